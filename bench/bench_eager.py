"""Host cost of one eager ropekv launch from PyTorch: the torch.library operator, Kernel.__call__, a bound launch,
and the floors of the same run (a torch elementwise op, an empty ctypes call).

    python3 bench/bench_eager.py                      # CUDA (the H200 figures in bench/results/)
    python3 bench/bench_eager.py --out bench/results  # also a markdown table there
    python3 bench/bench_eager.py --cpu                # the script itself on the host backend (no meaningful time)

Each method is called N times back to back on a decode shape (T tokens, H heads: a kernel of about a microsecond
on the GPU), so the GPU waits on the host and the wall time per call is the host's cost: Python, the argument
checks, the dispatcher, the driver's launch. The figure is the median of --reps runs of --calls calls each, after a
warm-up that compiles the kernel and makes its argument plan; the methods take turns, run by run, so that a drift
of the host's speed touches each alike. Methods:

  op              ropekv.ops.write(...)            the Python wrapper, a call seen before routed in C++
  op_python       the same, on the Python plans    ROPEKV_TORCH_NATIVE=0's path (python/ropekv/_native.py)
  op_direct       torch.ops.ropekv.write(...)       the operator as a compiled graph calls it in eager fallback
  kernel_call     Kernel.__call__(**tensors)        the binding without the operator
  kernel_python   the same, on the Python plans
  kernel_checked  every check on every call         tensor_args + launch, no argument plan (what a call cost before)
  bound           BoundLaunch()                     arguments converted once; the launch only
  torch_add       torch.add(a, b, out=c)            a floor: one small torch op
  ctypes_empty    ropekv_version_number()           a floor: one ctypes call into the library
"""
import argparse
import os
import re
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

METHODS = ("op", "op_python", "op_direct", "kernel_call", "kernel_python", "kernel_checked", "bound", "torch_add",
           "ctypes_empty")


def python_path(native, fn):
    """fn with the C++ argument plans off for the call (what ROPEKV_TORCH_NATIVE=0 gives)."""
    def call():
        with native.python_path():
            fn()
    return call


def inputs(torch, T, H, device, blocks=256, block_size=64):
    g = torch.Generator().manual_seed(0)
    q = (torch.randn(T, H, 576, generator=g)).to(torch.bfloat16).to(device)
    kv = (torch.randn(T, 576, generator=g)).to(torch.bfloat16).to(device)
    fp8 = torch.float8_e4m3fn if hasattr(torch, "float8_e4m3fn") else torch.uint8
    return dict(q_nope=q[..., :512], q_pe=q[..., 512:], q_out=torch.empty(T, H, 576, dtype=torch.bfloat16,
                                                                           device=device),
                k_nope=kv[:, :512], k_pe=kv[:, 512:],
                kv_cache=torch.zeros(blocks, block_size, 576, dtype=torch.uint8, device=device).view(fp8),
                positions=torch.arange(T, dtype=torch.int64, device=device),
                slots=torch.randperm(blocks * block_size, generator=g)[:T].to(device),
                cos_sin=torch.randn(4096, 64, generator=g).to(device),
                k_scale=torch.tensor([0.5], dtype=torch.float32, device=device))


def per_call_us(fns, calls, reps, sync):
    """{name: (median, best)} us per call of each fn, the methods interleaved run by run (a drift of the host's
    speed during the measurement touches every method alike)."""
    for fn in fns.values():
        fn()
    sync()
    runs = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            sync()
            runs[name].append((time.perf_counter() - t0) / calls * 1e6)
    return {name: (statistics.median(r), min(r)) for name, r in runs.items()}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cpu", action="store_true", help="the host backend (checks the script; times are the CPU kernel's)")
    ap.add_argument("--T", type=int, default=1)
    ap.add_argument("--H", type=int, default=16)
    ap.add_argument("--calls", type=int, default=5000)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--out", default=None)
    ap.add_argument("--tag", default=None, help="the output file's tag (default: the device's name)")
    args = ap.parse_args(argv)
    import torch
    import ropekv
    import ropekv.ops
    from ropekv import _torch as rt
    device = torch.device("cpu" if args.cpu else "cuda")
    if device.type == "cuda" and not torch.cuda.is_available():
        print("bench_eager: no CUDA device (--cpu runs the script on the host backend)", file=sys.stderr)
        return 2
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    x = inputs(torch, args.T, args.H, device)
    spec, kv, layout = "deepseek_v3", "fp8_e4m3", "paged"
    k = ropekv.ops.context(device).kernel(spec, kv=kv, q="absorbed", layout=layout)
    b = k.bind(**x)
    a, c = torch.randn(64, device=device), torch.randn(64, device=device)
    out = torch.empty(64, device=device)
    lib = ropekv.library()
    order = ("q_nope", "q_pe", "q_out", "k_nope", "k_pe", "kv_cache", "positions", "slots", "cos_sin")
    t = [x[n] for n in order]
    ks = x["k_scale"]
    from ropekv import _native
    plans = "on" if _native.module() is not None else "off (the warning above says why)"
    print("the C++ argument plans: %s" % plans)
    op = lambda: ropekv.ops.write(spec, kv=kv, layout=layout, **x)  # noqa: E731
    fns = {
        "op": op,
        "op_python": python_path(_native, op),
        "op_direct": lambda: torch.ops.ropekv.write(spec, kv, "absorbed", "bf16", layout, t[0], t[1], t[2], t[3],
                                                    t[4], t[5], t[6], t[7], t[8], None, ks, None, None, 0),
        "kernel_call": lambda: k(**x),
        "kernel_python": python_path(_native, lambda: k(**x)),
        "kernel_checked": lambda: k._launch(rt.tensor_args(k, k.ctx, **x)[0], rt.stream_for(k.ctx, None)),
        "bound": b,
        "torch_add": lambda: torch.add(a, c, out=out),
        "ctypes_empty": lib.ropekv_version_number,
    }
    rows = []
    for name, (med, best) in per_call_us({n: fns[n] for n in METHODS}, args.calls, args.reps, sync).items():
        rows.append((name, med, best))
        print("%-15s %7.2f us per call (median of %d x %d; best %.2f)" % (name, med, args.reps, args.calls, best))
    if args.out:
        dev = torch.cuda.get_device_name() if device.type == "cuda" else "cpu (host backend)"
        tag = args.tag or re.sub(r"[^a-z0-9]+", "_", dev.lower()).strip("_")
        path = os.path.join(args.out, time.strftime("%Y-%m-%d") + "_eager_cost_%s.md" % tag)
        with open(path, "w") as f:
            f.write("# Host cost of one eager launch (bench/bench_eager.py), %s\n\n" % dev)
            f.write("torch %s, ropekv %s; %s %s %s, T=%d, H=%d; median (best) of %d runs of %d back-to-back calls, "
                    "the methods interleaved run by run; the C++ argument plans %s.\n\n"
                    % (torch.__version__, ropekv.__version__, spec, kv, layout, args.T, args.H, args.reps, args.calls,
                       plans))
            f.write("| method | us per call (median) | best |\n|---|---|---|\n")
            for name, med, best in rows:
                f.write("| %s | %.2f | %.2f |\n" % (name, med, best))
        print("wrote %s" % path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
