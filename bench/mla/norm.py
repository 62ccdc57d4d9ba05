"""The fused kv_a RMSNorm section (write mode: after the main sweep of a default or --quick run, alone with --norm): the
absorbed op with DeepSeek-V3's kv_a_layernorm on the raw c_kv, ropekv norm="rms" against its peers and against
ropekv without the norm on the already-normalized input (the goal: the fused op within NORM_GOAL of it)."""
import copy
import types

from .env import error_text, log, rk_backend
from .library import (method_ropekv_nonorm, method_ropekv_norm, method_ropekv_norm_out, ropekv_kernel,
                      sync_policy)
from .numerics import _bits, code_steps, compare_bits
from .peers import method_eager_norm, method_rmsnorm_ropekv, rmsnorm_impl
from .report import _norm_ratio
from .shapes import L, NORM_PEER_STEPS, NORM_PEERS, W, norm_bytes
from .timing import each_shape, first_call_failed, time_call, timing_failed
from .write import Problem, Reference, check

torch = None  # set by env.bind() in main()
rkref = None  # ropekv.reference, set with torch


# ---- the fused kv_a RMSNorm section (write mode) ---------------------------------------------------------------------
# DeepSeek-V3's kv_a_layernorm fused into the write (norm="rms"): k_nope is the raw kv_a projection's c_kv, normalized
# per token (r = 1 / sqrt(mean(x^2) + eps) in float32, n = bf16(bf16(x * r) * w)) before the row is cached. Per shape:
#   ropekv_norm      ropekv norm="rms": one launch
#   ropekv_norm_out  ropekv norm="rms_out": one launch that also writes the normalized c_kv [T, L] (prefill's up-proj)
#   rmsnorm_ropekv   a separate RMSNorm kernel (Triton, written here; torch eager where Triton is missing or --cpu)
#                    writing a [T, L] bf16 buffer, then ropekv with norm none on it: two launches
#   eager_norm       the unfused PyTorch sequence (the eager peer's) with the RMSNorm in torch first
#   ropekv_nonorm    ropekv with norm none on the already-normalized input (the fused op's norm_out placed where the
#                    raw c_kv was): the baseline of the goal "ropekv_norm within 5% of it at every shape"


def norm_problem(torch, T, H, kv, dev, cos_sin_cache, k_scale, seed, policy, info):
    """A Problem whose c_kv (k_nope) is a raw projection output: each token's row scaled by a power of two in 2^-8 ..
    2^8 (so the norm matters), with the RMSNorm weight [L] of the kernel's dtype (info.norm_weight; about 1 +- 0.5), its
    eps and rounding (info.norm_eps, info.norm_rounding)."""
    pb = Problem(torch, T, H, kv, dev, cos_sin_cache, k_scale, seed, None, policy)
    g = torch.Generator(device=dev).manual_seed(seed + 7)
    scale = torch.exp2(torch.randint(-8, 9, (T, 1), device=dev, generator=g).float())
    pb.proj[:, :L] = (pb.proj[:, :L].float() * scale).to(torch.bfloat16)  # exact: powers of two
    wd = torch.float32 if info.norm_weight == "f32" else torch.bfloat16
    pb.norm_weight = (1.0 + 0.5 * torch.randn(L, device=dev, generator=g)).to(wd)
    pb.norm_eps, pb.norm_rounding = info.norm_eps, info.norm_rounding
    return pb


def prenormed(pb, n):
    """The problem with the normalized rows n [T, L] in the projection's c_kv columns (a copy of it: the same layout
    as the raw input): the input of ropekv_nonorm and of the references the norm methods are checked against."""
    pn = copy.copy(pb)
    pn.proj = pb.proj.clone()
    pn.proj[:, :L] = n
    pn.k_nope, pn.k_pe = pn.proj[:, :L], pn.proj[:, L:]
    return pn


def norm_ref_check(torch, pb, n):
    """How the fused op's normalized rows n compare with two PyTorch RMSNorms of the raw c_kv: (the fraction equal,
    bit for bit, to ropekv.reference.rms_norm, the kernels' arithmetic emulated exactly; the largest relative
    difference from a float64 RMSNorm, x / sqrt(mean(x^2) + eps) * w). The latter is within 2^-7 + 2^-12: two bf16
    roundings of at most 2^-8 each, and float32's few 2^-24."""
    want = rkref.rms_norm(pb.k_nope, pb.norm_weight, pb.norm_eps, pb.norm_rounding)
    r = compare_bits(torch, n, want, "bf16")
    x = pb.k_nope.double()
    n64 = x / torch.sqrt((x * x).mean(-1, keepdim=True) + pb.norm_eps) * pb.norm_weight.double()
    rel = ((n.double() - n64).abs() / n64.abs().clamp(min=1e-300)).max()
    return r[1] / max(r[2], 1), float(rel)


NORM_REL_TOL = 2.0 ** -7 + 2.0 ** -12


NORM_FNS = {"ropekv_norm": method_ropekv_norm, "ropekv_norm_out": method_ropekv_norm_out,
            "rmsnorm_ropekv": method_rmsnorm_ropekv, "eager_norm": method_eager_norm,
            "ropekv_nonorm": method_ropekv_nonorm}


def check_norm(torch, pb, ref, outs, method, base):
    """(ok, max steps, fraction bit-identical, elements failing, note) of a norm-section method. ref is the fma
    Reference of pb.pn (the fused op's normalized rows as k_nope) and base the outputs of ropekv norm none on pb.pn.
    ropekv's methods: the check() of the op on those rows (k_nope parts bit-identical), and the cache and q_out equal to
    base's bit for bit (the fused op = the op without the norm on k_nope := norm_out); ropekv_norm_out's rows too
    (equal to pb.n_fused, bit for bit). The peers (their RMSNorm sums in another order): k_nope parts within
    NORM_PEER_STEPS codes of the cache's format, their normalized buffer within 2 bf16 steps of pb.n_fused; the rest
    as check()."""
    kind = "fp8" if pb.fp8 else "bf16"
    notes = []
    if method in NORM_PEERS:
        ok, steps, exact, bad = check(torch, pb.pn, ref, outs, "absorbed", False, nope_steps=NORM_PEER_STEPS[kind])
        if outs.get("norm") is not None:
            d = code_steps(torch, outs["norm"], pb.n_fused, "bf16")
            nb = int((d > NORM_PEER_STEPS["bf16"]).sum())
            bad += nb
            ok = ok and nb == 0
            worst = int(d.max()) if d.numel() else 0
            if worst:
                notes.append("normalized rows up to %d bf16 step(s) from the fused op's" % worst)
        return ok, steps, exact, bad, "; ".join(notes)
    ok, steps, exact, bad = check(torch, pb.pn, ref, outs, "absorbed", False)
    if method != "ropekv_nonorm":
        for name in ("cache", "q_out"):
            if not torch.equal(_bits(torch, outs[name]), _bits(torch, base[name])):
                ok = False
                bad += 1
                notes.append("%s differs from ropekv norm none on the fused norm_out" % name)
        if outs.get("norm") is not None and not torch.equal(_bits(torch, outs["norm"]), _bits(torch, pb.n_fused)):
            ok = False
            bad += 1
            notes.append("norm_out differs from the first rms_out launch's")
    return ok, steps, exact, bad, "; ".join(notes)


def run_norm_section(args, meta, state, floors, dev, cos_sin_cache, k_scale, policy):
    """The norm section: per shape (the T x H of the run, the KV dtypes of args.norm_kv_list, absorbed bf16 query), the
    fused op's normalized rows first (an rms_out launch), the baseline and the reference on them, then each method
    checked and timed. Returns the rows."""
    cpu = args.cpu
    infos = _prepare(args, meta, state, policy)
    run = types.SimpleNamespace(args=args, cpu=cpu, state=state, floors=floors, dev=dev, cos_sin_cache=cos_sin_cache,
                                k_scale=k_scale, policy=policy, methods=list(args.norm_method_list), infos=infos)
    return each_shape(run, args.norm_kv_list, lambda T, H, kv: _shape(run, T, H, kv), "norm: ",
                      lambda r: "  fused/no-norm %s" % _norm_ratio(r["results"], "ropekv_norm", "ropekv_nonorm"))


def _prepare(args, meta, state, policy):
    """The context (unless the sweep made one), which RMSNorm rmsnorm_ropekv uses, and the three norm kernels of each
    KV dtype (the spec's policy taken from them). Returns {kv: the rms_out kernel's info, or why there is none}."""
    import ropekv
    cpu = args.cpu
    if state.get("ctx") is None:
        state["ctx"] = ropekv.Context(rk_backend(cpu), device=args.device)
        meta["ropekv"], meta["target"] = ropekv.version(), state["ctx"].target
    state["rmsnorm_impl"], why = rmsnorm_impl(state, cpu)
    meta["rmsnorm_impl"] = why or "Triton (rmsnorm_kernel)"
    if why:
        log("norm: rmsnorm_ropekv: %s" % why)
    infos = {}
    for kv in args.norm_kv_list:
        try:
            for norm in ("none", "rms", "rms_out"):
                k = ropekv_kernel(state, "ctx", "absorbed", False, kv, norm)
                sync_policy(policy, k.info, kv == "fp8_e4m3", False)
            infos[kv] = k.info
        except Exception as e:  # noqa: BLE001
            infos[kv] = "%s: %s" % (type(e).__name__, str(e).split("\n")[0][:200])
            log("norm (kv %s): no kernel: %s" % (kv, infos[kv]))
    first = next((i for i in infos.values() if not isinstance(i, str)), None)
    if first is not None:
        meta["norm"] = "weight %s [%d], eps %g, rounding %s (%s)" % (first.norm_weight, L, first.norm_eps,
                                                                    first.norm_rounding, first.norm_matches or "-")
    return infos


def _shape(run, T, H, kv):
    """(one shape's row, whether its methods ran): skipped where the GPU lacks the memory, n/a without a kernel or a
    reference; else each method's result."""
    r = {"T": T, "H": H, "kv": kv, "results": {}, "bytes": norm_bytes(T, H, kv == "fp8_e4m3")}
    r["limit_us"] = max(run.floors["roundtrip_us"], r["bytes"] / run.floors["copy_Bps"] * 1e6)
    need = 9 * T * H * W * 2 + 64 * T * W + (256 << 20)
    free = torch.cuda.mem_get_info(run.dev)[0] if not run.cpu else float("inf")
    info = run.infos[kv]
    why = None
    if isinstance(info, str):
        why = "no kernel: " + info
    elif need > 0.9 * free:
        why = "not enough memory (needs ~%.1f GB, %.1f GB free)" % (need / 1e9, free / 1e9)
    pb = ref = base = None
    if why is None:
        try:
            pb, ref, base = _baseline(run, r, T, H, kv, info)
        except Exception as e:  # noqa: BLE001
            why = "no reference: %s: %s" % (type(e).__name__, error_text(e))
    if why is not None:
        log("T=%d H=%d %s (norm): %s" % (T, H, kv, why))
        for m in run.methods:
            r["results"][m] = {"status": "skipped" if "memory" in why else "n/a", "us": None, "note": why}
        return r, False
    norm_off = r["norm_rel"] > NORM_REL_TOL
    for m in run.methods:
        r["results"][m] = _method(run, m, pb, ref, base, r, norm_off)
    return r, True


def _baseline(run, r, T, H, kv, info):
    """(the problem, the fma reference, the baseline's outputs) of one shape: the fused op's normalized rows (an rms_out
    launch), ropekv norm none on them (the baseline), the reference of the op on them; r gets how the rows compare
    with PyTorch's RMSNorms (norm_ref_check)."""
    state, cpu = run.state, run.cpu
    pb = norm_problem(torch, T, H, kv, run.dev, run.cos_sin_cache, run.k_scale, T * 1000 + H * 10 + 5, run.policy,
                      info)
    # the fused op's normalized rows (rms_out), the baseline (norm none on them), the reference
    fn, outputs = method_ropekv_norm(state, pb, "rms_out")
    fn()
    if not cpu:
        torch.cuda.synchronize()
    pb.n_fused = outputs()["norm"]
    pb.pn = prenormed(pb, pb.n_fused)
    pb.pn.ref = ref = Reference(torch, pb.pn)
    fn, outputs = method_ropekv_nonorm(state, pb)
    fn()
    if not cpu:
        torch.cuda.synchronize()
    base = outputs()
    r["norm_exact"], r["norm_rel"] = norm_ref_check(torch, pb, pb.n_fused)
    if r["norm_exact"] < 1 or r["norm_rel"] > NORM_REL_TOL:
        log("  norm_out vs PyTorch: %.4f%% equal to rms_norm (the kernels' arithmetic), %.3g "
            "relative from a float64 RMSNorm (bound %.3g)" % (100 * r["norm_exact"], r["norm_rel"], NORM_REL_TOL))
    return pb, ref, base


def _method(run, m, pb, ref, base, r, norm_off):
    """One norm method's result at one shape: n/a (its first call raised), WRONG (check_norm; not timed), or ok with
    its time."""
    cpu, state = run.cpu, run.state
    res = {"status": "ok", "us": None, "timing": "", "note": ""}
    try:
        fn, outputs = NORM_FNS[m](state, pb)
        fn()
        if not cpu:
            torch.cuda.synchronize()
        outs = outputs()
    except Exception as e:  # noqa: BLE001
        return first_call_failed(torch, m, e, cpu, sync=False)[0]
    ok, steps, exact, bad, note = check_norm(torch, pb, ref, outs, m, base)
    if ok and norm_off and m.startswith("ropekv_norm"):
        ok, note = False, "norm_out %.3g relative from a float64 RMSNorm (bound %.3g)" % (r["norm_rel"], NORM_REL_TOL)
    res.update(exact=exact, steps=steps, note=note)
    if m == "rmsnorm_ropekv" and state["rmsnorm_impl"] != "triton":
        res["note"] = "; ".join(x for x in (note, "RMSNorm by torch eager") if x)
    if not ok:
        res["status"] = "WRONG"
        res["note"] = "%d elements outside the tolerance (max %d steps)%s" % (bad, steps, "; " + note if note else "")
        log("  %s WRONG: %s" % (m, res["note"]))
    else:
        try:
            res["us"], res["timing"], tn = time_call(torch, fn, run.args, cpu)
            if tn:
                res["note"] = "; ".join(x for x in (res["note"], tn) if x)
        except Exception as e:  # noqa: BLE001
            timing_failed(torch, res, m, e, cpu)
    return res
