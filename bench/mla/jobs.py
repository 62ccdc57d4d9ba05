"""The sweep of --mode v32 and --mode read: per shape the job's problem and reference, then each method checked against
it and timed; a Triton peer's outputs also compared with ropekv's of the same shape byte for byte (SAME_AS)."""
import types

from .env import failed, log, rk_backend
from .library import _job_kernel, method_ropekv_read, method_ropekv_v32
from .numerics import compare_bits
from .peers import method_torch_read, method_torch_v32, method_triton_read, method_triton_v32
from .read import ReadProblem, check_read, read_reference
from .report import fmt_us, write_job_outputs
from .shapes import (K_SCALE, READ_KV, READ_METHODS, SAME_AS, V32_FORMS, W, bw_pct, cos_sin_table, job_bytes,
                     read_bytes, v32_bytes)
from .timing import each_shape, first_call_failed, run_floors, same_size_copy_us, time_call, timing_failed
from .v32 import V32Problem, V32Reference, check_v32

torch = None  # set by env.bind() in main()


# method -> its (state, problem, method) -> (fn, outputs)
JOB_METHODS = {}
for _m in V32_FORMS:
    JOB_METHODS[_m] = {"ropekv": method_ropekv_v32, "triton": method_triton_v32}.get(_m.split("_")[0],
                                                                                       method_torch_v32)
for _m in READ_METHODS:
    JOB_METHODS[_m] = {"ropekv": method_ropekv_read, "triton": method_triton_read}.get(_m.split("_")[0],
                                                                                         method_torch_read)


def same_as(torch, outs, base, method):
    """The fraction of a Triton peer's output elements equal, bit for bit, to ropekv's in the same shape (the cache
    bytes of every row, q_out's bf16 values; read: out's values, NaN == NaN)."""
    if method in V32_FORMS:
        a, b = outs["cache"].view(-1), base["cache"].view(-1)
        same, n = int((a == b).sum()), a.numel()
        if outs.get("q_out") is not None and base.get("q_out") is not None:
            r = compare_bits(torch, outs["q_out"], base["q_out"], "bf16")
            same, n = same + r[1], n + r[2]
        return same / max(n, 1)
    r = compare_bits(torch, outs["out"], base["out"], "bf16")
    return r[1] / max(r[2], 1)


def main_job(args, meta, dev):
    """--mode v32 and --mode read: each method checked against the reference of its job, then timed; a Triton peer
    also compared with ropekv's outputs of the same shape byte for byte."""
    cpu = args.cpu
    mode = args.mode
    methods = list(args.method_list)
    state = {"args": args, "meta": meta, "kernels": {}}
    meta["mode"] = mode
    rk = [m for m in methods if m.startswith("ropekv")]
    if rk:
        import ropekv
        meta["ropekv"] = ropekv.version()
        ctx = ropekv.Context(rk_backend(cpu), device=args.device)
        state["ctx"] = ctx
        meta["target"] = ctx.target
        for kv in args.kv_list:
            for m in rk:
                try:
                    _job_kernel(state, m, kv)
                except Exception as e:  # noqa: BLE001
                    log("%s (kv %s): no kernel: %s" % (m, kv, str(e).split("\n")[0][:200]))
        log("ropekv %s on %s: %s" % (meta["ropekv"], ctx.target, ", ".join(n for n, _ in meta["kernels"].values())))
    floors = run_floors(torch, args, cpu, dev)
    cos_sin_cache = cos_sin_table(torch, dev)
    k_scale = torch.tensor([K_SCALE], dtype=torch.float32, device=dev)
    order = ([m for m in methods if m.startswith("eager")] + [m for m in methods if m.startswith("ropekv")]
             + [m for m in methods if not m.startswith(("eager", "ropekv"))])
    run = types.SimpleNamespace(args=args, cpu=cpu, mode=mode, state=state, floors=floors, dev=dev, methods=methods,
                                cos_sin_cache=cos_sin_cache, k_scale=k_scale, order=order, compile_broken={})
    rows = each_shape(run, args.kv_list, lambda T, H, kv: _shape(run, T, H, kv), "",
                      lambda r: "  limit %s" % fmt_us(r["limit_us"]))
    paths = write_job_outputs(args, meta, floors, rows, methods)
    log("wrote " + ", ".join(paths))
    if state.get("ctx") is not None:
        state["ctx"].close()
    wrong = [(r["T"], r["H"], r["kv"], m) for r in rows for m, v in r["results"].items() if v["status"] == "WRONG"]
    return 1 if wrong else 0


def _shape(run, T, H, kv):
    """(one shape's row, whether its methods ran): skipped where the GPU lacks the memory, n/a where the problem or
    its reference fails; else the same-size copy and each method's result."""
    args, dev, methods, floors, cpu, mode = run.args, run.dev, run.methods, run.floors, run.cpu, run.mode
    seed = T * 1000 + H * 10 + list(READ_KV).index(kv)
    if mode == "v32":
        need = 5 * T * H * W * 2 + 64 * T * W + (256 << 20)
    else:
        need = 8 * T * W * 4 + (256 << 20)
    r = {"T": T, "H": H, "kv": kv, "results": {}}
    r["bytes"] = v32_bytes(T, H, "absorbed") if mode == "v32" else read_bytes(T, kv)
    r["limit_us"] = max(floors["roundtrip_us"], r["bytes"] / floors["copy_Bps"] * 1e6)
    r["copy_us"] = None
    free = torch.cuda.mem_get_info(dev)[0] if not cpu else float("inf")
    if need > 0.9 * free:
        log("T=%d H=%d %s: skipped (needs ~%.1f GB, %.1f GB free)" % (T, H, kv, need / 1e9, free / 1e9))
        for m in methods:
            r["results"][m] = {"status": "skipped", "us": None, "note": "not enough memory"}
        return r, False
    try:
        if mode == "v32":
            pb = V32Problem(torch, T, H, dev, run.cos_sin_cache, seed, args.block_size)
            ref = V32Reference(torch, pb, q=any(V32_FORMS[m] == "absorbed" for m in methods))
        else:
            pb = ReadProblem(torch, T, kv, dev, seed, args.block_size, run.k_scale)
            ref = read_reference(torch, pb)
    except Exception as e:  # noqa: BLE001
        msg = failed("problem or reference failed", e)
        for m in methods:
            r["results"][m] = {"status": "n/a", "us": None, "note": "no reference: %s" % msg}
        return r, False
    r["copy_us"] = same_size_copy_us(torch, args, cpu, dev, r["bytes"])
    kept = {}  # ropekv's outputs of this shape, for the Triton peers' byte comparison
    for m in run.order:
        r["results"][m] = _method(run, m, pb, ref, kept, T, H, kv)
    return r, True


def _method(run, m, pb, ref, kept, T, H, kv):
    """One method's result at one shape: n/a (torch.compile already failed at this KV dtype, or the first call raised),
    WRONG (not timed), or ok with its time and BW %; a ropekv method's outputs kept for its Triton peers'
    comparison."""
    cpu = run.cpu
    res = {"status": "ok", "us": None, "timing": "", "note": ""}
    if m.startswith("compile") and (m, kv) in run.compile_broken:
        return {"status": "n/a", "us": None, "note": run.compile_broken[(m, kv)]}
    try:
        fn, outputs = JOB_METHODS[m](run.state, pb, m)
        fn()
        if not cpu:
            torch.cuda.synchronize()
        outs = outputs()
    except Exception as e:  # noqa: BLE001
        failed, msg = first_call_failed(torch, m, e, cpu)
        if m.startswith("compile"):
            run.compile_broken[(m, kv)] = "torch.compile failed: " + msg
        return failed
    if run.mode == "v32":
        ok, steps, exact, bad = check_v32(torch, pb, ref, outs, V32_FORMS[m])
    else:
        ok, steps, exact, bad = check_read(torch, pb, ref, outs)
    res["exact"], res["steps"] = exact, steps
    if not ok:
        res["status"] = "WRONG"
        res["note"] = "%d elements outside the tolerance of the reference (max %d steps)" % (bad, steps)
        log("  %s WRONG: %d elements outside the tolerance, max %d steps, %.4f%% bit-identical" % (
            m, bad, steps, 100 * exact))
    if m.startswith("ropekv"):
        kept[m] = outs
    if m in SAME_AS and SAME_AS[m] in kept:
        res["same"] = same_as(torch, outs, kept[SAME_AS[m]], m)
        if res["same"] < 1:
            res["note"] = "%.4f%% of the output equal to %s's bit for bit" % (100 * res["same"], SAME_AS[m])
            log("  %s: %s" % (m, res["note"]))
    if res["status"] == "ok":
        try:
            res["us"], res["timing"], note = time_call(torch, fn, run.args, cpu)
            if note:
                res["note"] = note
            res["bytes"] = job_bytes(T, H, kv, m)
            res["bw_pct"] = bw_pct(res["bytes"], res["us"], run.floors["copy_Bps"])
        except Exception as e:  # noqa: BLE001
            timing_failed(torch, res, m, e, cpu, sync=False)
    return res
