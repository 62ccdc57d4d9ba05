"""main(): the command line, torch (imported here, so that --help works without it), the device and the run's
metadata, then the mode: --mode v32 / read (jobs.py), records (records.py), or write (the write sweep, then the norm
section where it runs).
Returns the exit status: 0, 1 when a method was WRONG, 2 without a GPU."""
import datetime
import sys

from . import env
from .cli import parse_args
from .env import GPU, gpu_platform, log
from .jobs import main_job
from .norm import run_norm_section
from .records import run_records
from .report import write_norm_outputs, write_outputs
from .shapes import K_SCALE, SPECS, cos_sin_table
from .timing import run_floors
from .triton_kernels import triton_kernels
from .write import open_contexts, sweep, unsupported_methods

torch = None  # set by env.bind() in main()


def main(argv=None):
    args = parse_args(argv)
    import torch
    import ropekv.reference as rkref
    env.bind(torch, rkref)
    cpu = args.cpu
    if not cpu and not torch.cuda.is_available():
        print("bench_mla: no GPU: torch.cuda (CUDA or ROCm PyTorch) sees none (--cpu checks the script on the CPU)",
              file=sys.stderr)
        return 2
    dev, meta = _device_and_meta(args)
    if args.mode == "records":
        return run_records(args, meta, dev)
    if args.mode != "write":
        return main_job(args, meta, dev)
    return run_write(args, meta, dev)


def _device_and_meta(args):
    """(the device, the run's metadata: the GPU, its SMs, the versions, the date, the spec's policy)."""
    cpu = args.cpu
    if cpu:
        dev = torch.device("cpu")
        meta_gpu, sms, cuda_v = "cpu", 0, "-"
    else:
        GPU["backend"], GPU["runtime"] = gpu_platform(torch)
        torch.cuda.set_device(args.device)
        torch.cuda.init()
        torch.cuda.current_device()
        dev = torch.device("cuda", args.device)
        props = torch.cuda.get_device_properties(dev)
        meta_gpu, sms, cuda_v = torch.cuda.get_device_name(dev), props.multi_processor_count, GPU["runtime"]
        for name, val in (("recompile_limit", 256), ("cache_size_limit", 256), ("accumulated_recompile_limit", 4096),
                          ("accumulated_cache_size_limit", 4096)):
            try:  # one compiled function serves every shape: let it recompile as often as the sweep needs
                if hasattr(torch._dynamo.config, name):
                    setattr(torch._dynamo.config, name, val)
            except Exception:  # noqa: BLE001
                pass

    now = datetime.datetime.now()
    policy = dict(SPECS[args.spec])
    meta = {"gpu": meta_gpu, "sms": sms, "torch": torch.__version__, "cuda": cuda_v, "date": now.strftime("%Y-%m-%d"),
            "datetime": now.strftime("%Y-%m-%d %H:%M"), "ropekv": "-", "target": "-", "kernels": {},
            "policy": policy}
    if cpu:
        meta["triton"] = "n/a (--cpu)"
    else:
        try:
            meta["triton"] = triton_kernels()["version"]
        except Exception as e:  # noqa: BLE001
            meta["triton"] = "n/a (%s)" % str(e).split("\n")[0]
    return dev, meta


def run_write(args, meta, dev):
    """--mode write: the methods' contexts and kernels, the floors, the sweep and its report, then the norm section
    (where args.norm_on) in the same run, with the same floors."""
    cpu = args.cpu
    policy = meta["policy"]
    methods = list(args.method_list)
    state = {"args": args, "meta": meta, "kernels": {}}
    unsupported = unsupported_methods(args, methods, policy)
    open_contexts(args, meta, state, methods, unsupported, policy)
    log("%s, torch %s, triton %s" % ("CPU (--cpu)" if cpu else "GPU " + meta["gpu"], meta["torch"], meta["triton"]))

    floors = run_floors(torch, args, cpu, dev)
    cos_sin_cache = cos_sin_table(torch, dev)
    k_scale = torch.tensor([K_SCALE], dtype=torch.float32, device=dev)
    q_scale = torch.tensor([args.q_scale], dtype=torch.float32, device=dev)
    rows = sweep(args, state, floors, dev, methods, unsupported, policy, cos_sin_cache, k_scale, q_scale)

    paths = [] if args.norm_only else write_outputs(args, meta, floors, rows, methods)
    if args.norm_on:  # the fused kv_a RMSNorm section, in the same run (the same floors)
        norm_rows = run_norm_section(args, meta, state, floors, dev, cos_sin_cache, k_scale, policy)
        paths += write_norm_outputs(args, meta, floors, norm_rows, args.norm_method_list)
        rows = rows + norm_rows
    log("wrote " + ", ".join(paths))
    for name in ("ctx", "ctx_nopdl", "ctx_prefetch"):
        if state.get(name) is not None:
            state[name].close()
    wrong = [(r["T"], r["H"], r["kv"], m) for r in rows for m, v in r["results"].items() if v["status"] == "WRONG"]
    return 1 if wrong else 0
