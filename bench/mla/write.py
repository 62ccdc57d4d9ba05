"""--mode write (the default): the fused write of --spec's kernels (every q form, bf16 and fp8 queries) against the
peers. Per shape: the problem (inputs laid out as engines pass them), the fma reference every method is checked
against, then each method checked and timed."""
import time
import types

from .env import failed, log, rk_backend
from .library import (_ropekv_form, method_ropekv, method_ropekv_nopdl, method_ropekv_prefetch, ropekv_kernel,
                      sync_policy)
from .numerics import (BF16_ULP, FP8_ULP, _decode, _fp8_codes, _outside, _scale_mag, _ulp, code_steps, compare_bits,
                       fp8_dtype)
from .peers import (aiter_op, method_aiter, method_compile, method_compile_fp8q, method_eager, method_eager_fp8q,
                    method_triton, method_triton_fp8q, method_triton_fp8q_pdl, method_triton_pdl,
                    method_triton_prefetch)
from .report import fmt_us
from .shapes import BLOCK_SIZE, FORMS, FP8_MAX, L, MAX_POS, R, SPECS, W, bw_pct, op_bytes
from .timing import each_shape, first_call_failed, same_size_copy_us, time_call, timing_failed

torch = None  # set by env.bind() in main()
rkref = None  # ropekv.reference, set with torch


# ---- the problem -----------------------------------------------------------------------------------------------------

class Problem:
    def __init__(self, torch, T, H, kv, dev, cos_sin_cache, k_scale, seed, q_scale=None, policy=None):
        self.torch, self.T, self.H, self.kv, self.dev = torch, T, H, kv, dev
        self.fp8 = kv == "fp8_e4m3"
        self.policy = policy if policy is not None else SPECS["deepseek_v3"]
        g = torch.Generator(device=dev).manual_seed(seed)
        bf = torch.bfloat16
        self.q = torch.randn(T, H, W, device=dev, dtype=bf, generator=g)
        self.q_nope, self.q_pe = self.q[..., :L], self.q[..., L:]
        self.proj = torch.randn(T, W, device=dev, dtype=bf, generator=g)
        self.k_nope, self.k_pe = self.proj[:, :L], self.proj[:, L:]
        self.positions = torch.randint(0, MAX_POS, (T,), device=dev, generator=g, dtype=torch.int64)
        self.blocks = (T + 1 + BLOCK_SIZE - 1) // BLOCK_SIZE
        self.rows = self.blocks * BLOCK_SIZE  # the last row is the eager sequence's scratch row
        self.slots = torch.randperm(self.rows - 1, device=dev, generator=g)[:T].to(torch.int64)
        self.cos_sin_cache = cos_sin_cache
        self.k_scale = k_scale
        self.q_scale = q_scale
        self.cache_dtype = fp8_dtype() if self.fp8 else bf
        self.ref = None  # the Reference, set before the methods run (zero_copy's q_out[..., :L] comes from it)

    def new_cache(self):
        return self.torch.zeros(self.blocks, BLOCK_SIZE, W, device=self.dev, dtype=self.cache_dtype)

    def new_q_out(self, q_fp8=False):
        dt = fp8_dtype() if q_fp8 else self.torch.bfloat16
        return self.torch.empty(self.T, self.H, W, device=self.dev, dtype=dt)

    def new_q_out_zero_copy(self, q_fp8=False):
        """q_out with q_nope already in [..., :L], as the absorption BMM leaves it (fp8: quantized with q_scale
        by the BMM's epilogue, here the reference's codes)."""
        q_out = self.new_q_out(q_fp8)
        if q_fp8:
            q_out.view(self.torch.uint8)[..., :L] = self.ref.q_nope8
        else:
            q_out[..., :L] = self.q_nope
        return q_out

    def new_q_pe(self):
        """A copy of the query for the inplace form (it rotates q_pe where it lies); its q_pe slice."""
        return self.q.clone()[..., L:]

    def bytes_moved(self, form="absorbed", q_fp8=False):
        return op_bytes(self.T, self.H, self.fp8, form, q_fp8)


# ---- the methods: each returns (fn, outputs) where fn() runs one call and outputs() gives a dict of its outputs ------
METHODS = {"ropekv": method_ropekv, "ropekv_nopdl": method_ropekv_nopdl, "ropekv_prefetch": method_ropekv_prefetch,
           "triton": method_triton, "triton_pdl": method_triton_pdl, "triton_prefetch": method_triton_prefetch,
           "triton_fp8q": method_triton_fp8q, "triton_fp8q_pdl": method_triton_fp8q_pdl,
           "compile": method_compile, "eager": method_eager, "aiter": method_aiter, "compile_fp8q": method_compile_fp8q,
           "eager_fp8q": method_eager_fp8q}
for _m, (_form, _q8) in FORMS.items():
    if _m not in METHODS:  # ropekv_fp8q and the other q forms on the default context
        METHODS[_m] = _ropekv_form(_form, _q8)


# ---- the fma reference and the checks --------------------------------------------------------------------------------
class Reference:
    """What ropekv computes (docs/numerics.md, gen/ref.c), in PyTorch, once per shape: the rope rows
    y0 = fmaf(x0, c, -(x1*s)), y1 = fmaf(x1, c, x0*s) with x1*s, x0*s float32 products, rounded to bf16 (q_out
    and a bf16 KV row) or scaled by the spec's KV convention (deepseek_v3: float32(1 / k_scale)), clamped to +-448
    and rounded to fp8 (an fp8 KV row; codes kept as uint8). With q8, the fp8 query too: q_nope and the rope floats
    (rounded to bf16 first where the spec's q policy says so) scaled by its q convention, clamped to +-q_sat,
    rounded to fp8. Besides the expected codes it keeps, per rope element, the tolerance for methods that
    round x0*c and x1*s separately (eager, torch.compile, Triton): one step of the output format at
    max(|expected|, |x0*c| + |x1*s|) (the terms scaled like the value for fp8). Two-rounding differs from the
    fma by at most about 2^-23 (|x0*c| + |x1*s|): many steps of a result that cancels, within one step at the
    terms' size."""

    def __init__(self, torch, pb, q8=False, chunk_elems=1 << 24):
        half = R // 2
        pol = pb.policy
        cs = pb.cos_sin_cache.index_select(0, pb.positions)
        step = max(1, chunk_elems // (pb.H * W if q8 else pb.H * R))
        q_rope, q_tol, kv_rope, kv_tol = [], [], [], []
        q_rope8, q_tol8, q_nope8 = [], [], []
        self.q8 = q8
        for t0 in range(0, pb.T, step):
            sl = slice(t0, min(pb.T, t0 + step))
            c, sn = cs[sl, :half], cs[sl, half:]
            y, m = self._rope(torch, pb.q_pe[sl], c[:, None, :], sn[:, None, :])
            q_rope.append(y.to(torch.bfloat16))
            q_tol.append(_ulp(torch, torch.maximum(_decode(torch, q_rope[-1]).abs(), m), *BF16_ULP).float())
            if q8:
                yq = y.to(torch.bfloat16).float() if pol["q_rr"] else y
                sat = pol["q_sat"]
                q_rope8.append(_fp8_codes(torch, rkref.scale(yq, pol["q_scale"], pb.q_scale).clamp(-sat, sat)))
                mq = _scale_mag(torch, m, pol["q_scale"], pb.q_scale)
                q_tol8.append(_ulp(torch, torch.maximum(_decode(torch, q_rope8[-1]).abs(), mq), *FP8_ULP).float())
                xn = pb.q_nope[sl].float()
                q_nope8.append(_fp8_codes(torch, rkref.scale(xn, pol["q_scale"], pb.q_scale).clamp(-sat, sat)))
            y, m = self._rope(torch, pb.k_pe[sl], c, sn)
            if pb.fp8:
                yk = y.to(torch.bfloat16).float() if pol["kv_rr"] else y
                kv_rope.append(_fp8_codes(torch, rkref.scale(yk, pol["kv_scale"], pb.k_scale).clamp(-FP8_MAX, FP8_MAX)))
                m = _scale_mag(torch, m, pol["kv_scale"], pb.k_scale)
                fmt = FP8_ULP
            else:
                kv_rope.append(y.to(torch.bfloat16))
                fmt = BF16_ULP
            kv_tol.append(_ulp(torch, torch.maximum(_decode(torch, kv_rope[-1]).abs(), m), *fmt).float())
        self.q_rope, self.q_tol = torch.cat(q_rope), torch.cat(q_tol)
        self.kv_rope, self.kv_tol = torch.cat(kv_rope), torch.cat(kv_tol)
        if q8:
            self.q_rope8, self.q_tol8, self.q_nope8 = torch.cat(q_rope8), torch.cat(q_tol8), torch.cat(q_nope8)
        if pb.fp8:  # k_nope * (1 / 0.5) is exact: one rounding, the same for every method
            kn = rkref.scale(pb.k_nope.float(), pol["kv_scale"], pb.k_scale)
            self.kv_nope = _fp8_codes(torch, kn.clamp(-FP8_MAX, FP8_MAX))
        else:
            self.kv_nope = pb.k_nope

    def q_nope8_tol(self, torch, pb, sl):
        """The fp8 query's q_nope part: one fp8 step at max(|expected|, |scaled q_nope|), for a peer whose
        reciprocal (or quotient) of q_scale is rounded otherwise (one rounding of the scaled value apart)."""
        m = _scale_mag(torch, pb.q_nope[sl].double().abs(), pb.policy["q_scale"], pb.q_scale)
        return _ulp(torch, torch.maximum(_decode(torch, self.q_nope8[sl]).abs(), m), *FP8_ULP)

    @staticmethod
    def _rope(torch, x, c, sn):
        """(ropekv's float32 rope of the bf16 GPT-J rows x, |x0*c| + |x1*s| per output element in float64)."""
        xf = x.float().unflatten(-1, (-1, 2))
        x0, x1 = xf[..., 0], xf[..., 1]
        y0 = rkref.fma_f32(x0, c, -(x1 * sn))
        y1 = rkref.fma_f32(x1, c, x0 * sn)
        a0, a1 = x0.double().abs(), x1.double().abs()
        ac, asn = c.double().abs(), sn.double().abs()
        return (torch.stack((y0, y1), dim=-1).flatten(-2),
                torch.stack((a0 * ac + a1 * asn, a1 * ac + a0 * asn), dim=-1).flatten(-2))


def check(torch, pb, ref, outs, form="absorbed", q_fp8=False, chunk_elems=1 << 25, nope_steps=0):
    """(ok, max steps, fraction bit-identical, elements failing) of a method's outputs (a dict: "q_out" for the
    absorbed and zero_copy forms, "q_pe" for inplace, "cache") against the fma reference. The q_nope / k_nope
    parts must be bit-identical (copies; for fp8 one exact scaling and one rounding; an fp8 query's q_nope part
    within one fp8 step, see Reference.q_nope8_tol), every rope element bit-identical or within its tolerance
    (see Reference), an inplace fp8 query's bytes past the first R of each q_pe row untouched, and the KV rows
    that no token writes untouched (zero). 'max steps' and 'bit-identical' count codes against the reference's
    over the query output and the KV rows (the scratch row aside). nope_steps > 0: the KV rows' k_nope parts may be
    that many codes of the cache's format away (the norm section's peers, whose RMSNorm sums in another order)."""
    kind = "fp8" if pb.fp8 else "bf16"
    cache = outs["cache"]
    flat = (cache.view(torch.uint8) if pb.fp8 else cache).view(-1, W)
    worst = same = n = bad = 0

    def add(r):  # r = compare_bits(...); returns how many codes differ
        nonlocal worst, same, n
        worst, same, n = max(worst, r[0]), same + r[1], n + r[2]
        return r[2] - r[1]

    step = max(1, chunk_elems // (pb.H * W))
    for t0 in range(0, pb.T, step):
        sl = slice(t0, min(pb.T, t0 + step))
        if form in ("absorbed", "zero_copy") and q_fp8:
            qo = outs["q_out"][sl].view(torch.uint8)
            add(compare_bits(torch, qo[..., :L], ref.q_nope8[sl], "fp8"))
            bad += _outside(torch, qo[..., :L], ref.q_nope8[sl], ref.q_nope8_tol(torch, pb, sl))
            add(compare_bits(torch, qo[..., L:], ref.q_rope8[sl], "fp8"))
            bad += _outside(torch, qo[..., L:], ref.q_rope8[sl], ref.q_tol8[sl])
        elif form in ("absorbed", "zero_copy"):
            q_out = outs["q_out"]
            bad += add(compare_bits(torch, q_out[sl, :, :L], pb.q_nope[sl], "bf16"))
            add(compare_bits(torch, q_out[sl, :, L:], ref.q_rope[sl], "bf16"))
            bad += _outside(torch, q_out[sl, :, L:], ref.q_rope[sl], ref.q_tol[sl])
        elif form == "inplace" and q_fp8:
            b = outs["q_pe"][sl].view(torch.uint8)  # [n, H, 2R]: fp8 codes over the first R bytes of each row
            add(compare_bits(torch, b[..., :R], ref.q_rope8[sl], "fp8"))
            bad += _outside(torch, b[..., :R], ref.q_rope8[sl], ref.q_tol8[sl])
            bad += int((b[..., R:] != pb.q_pe[sl].view(torch.uint8)[..., R:]).sum())
        elif form == "inplace":
            q_pe = outs["q_pe"]
            add(compare_bits(torch, q_pe[sl], ref.q_rope[sl], "bf16"))
            bad += _outside(torch, q_pe[sl], ref.q_rope[sl], ref.q_tol[sl])
        rows = flat[pb.slots[sl]]  # every token has its own row (the slots are a permutation)
        if nope_steps:
            add(compare_bits(torch, rows[:, :L], ref.kv_nope[sl], kind))
            bad += int((code_steps(torch, rows[:, :L], ref.kv_nope[sl], kind) > nope_steps).sum())
        else:
            bad += add(compare_bits(torch, rows[:, :L], ref.kv_nope[sl], kind))
        add(compare_bits(torch, rows[:, L:], ref.kv_rope[sl], kind))
        bad += _outside(torch, rows[:, L:], ref.kv_rope[sl], ref.kv_tol[sl])
    untouched = torch.ones(pb.rows - 1, dtype=torch.bool, device=flat.device)
    untouched[pb.slots] = False
    others = flat[:pb.rows - 1][untouched]
    bad += add(compare_bits(torch, others, torch.zeros_like(others), kind))
    return bad == 0, worst, same / max(n, 1), bad


# ---- the sweep -------------------------------------------------------------------------------------------------------
def unsupported_methods(args, methods, policy):
    """{method: why} of the methods reported n/a at every shape: aiter where it does not import (asked for with
    --methods; else it is dropped from methods, a default peer only where it imports), and the methods whose q form
    the spec does not list."""
    unsupported = {}
    if "aiter" in methods:
        try:
            aiter_op()
        except Exception as e:  # noqa: BLE001
            why = "aiter is not available (%s: %s)" % (type(e).__name__, str(e).split("\n")[0][:200])
            if args.methods:  # asked for: a column of n/a with the reason
                unsupported["aiter"] = why
            else:  # a default peer only where it imports (ROCm with aiter installed)
                methods.remove("aiter")
            log("aiter: %s" % why)
    for m in methods:
        if FORMS[m][0] not in policy["q_forms"] and m not in unsupported:
            unsupported[m] = "spec %s does not list q form %s" % (args.spec, FORMS[m][0])
            log("%s: n/a (%s)" % (m, unsupported[m]))
    return unsupported


def open_contexts(args, meta, state, methods, unsupported, policy):
    """The ropekv contexts the methods need (state["ctx"], "ctx_nopdl", "ctx_prefetch") and their kernels, compiled
    before the sweep (so that kernel_get times are their own); the spec's policy taken from the kernels."""
    cpu = args.cpu
    rk_main = [m for m in methods if m.startswith("ropekv") and m not in ("ropekv_nopdl", "ropekv_prefetch")
               and m not in unsupported]
    if rk_main or "ropekv_nopdl" in methods or "ropekv_prefetch" in methods:
        import ropekv
        meta["ropekv"] = ropekv.version()
    if rk_main:
        backend = rk_backend(cpu)
        ctx = ropekv.Context(backend, device=args.device)
        state["ctx"] = ctx
        meta["target"] = ctx.target
        for kv in args.kv_list:  # compiled before the sweep, so kernel_get times are their own
            for m in rk_main:
                form, q_fp8 = FORMS[m]
                try:
                    k = ropekv_kernel(state, "ctx", form, q_fp8, kv)
                except Exception as e:  # noqa: BLE001
                    msg = "%s: %s" % (type(e).__name__, str(e).split("\n")[0][:200])
                    log("%s (kv %s): no kernel: %s" % (m, kv, msg))
                    continue  # the method's first call raises the same, and it is reported n/a
                sync_policy(policy, k.info, kv == "fp8_e4m3", q_fp8)
        log("ropekv %s on %s: %s; stats %s" % (meta["ropekv"], ctx.target,
                                               ", ".join(n for n, _ in meta["kernels"].values()), ctx.stats()))
    for m, name, opts in (("ropekv_nopdl", "nopdl", {"pdl": False}),
                          ("ropekv_prefetch", "prefetch", {"pdl": True, "pdl_prefetch": True})):
        if m in methods:
            state["ctx_" + name] = ropekv.Context(rk_backend(cpu), device=args.device, **opts)
            for kv in args.kv_list:
                ropekv_kernel(state, "ctx_" + name, "absorbed", False, kv)


def sweep(args, state, floors, dev, methods, unsupported, policy, cos_sin_cache, k_scale, q_scale):
    """The write sweep (none with --norm): per H, KV dtype and T one row, its methods checked and timed (the eager
    ones first). Returns the rows."""
    run = types.SimpleNamespace(
        args=args, cpu=args.cpu, state=state, floors=floors, dev=dev, methods=methods, unsupported=unsupported,
        policy=policy, cos_sin_cache=cos_sin_cache, k_scale=k_scale, q_scale=q_scale,
        q8=any(FORMS[m][1] for m in methods), compile_broken={},
        order=[m for m in methods if m.startswith("eager")] + [m for m in methods if not m.startswith("eager")])
    if args.norm_only:
        return []
    return each_shape(run, args.kv_list, lambda T, H, kv: (_shape(run, T, H, kv), True), "", _write_tail)


def _write_tail(r):
    """The end of a shape's line: its limit, and how much of ropekv's output was bit-identical."""
    rk = r["results"].get("ropekv") or r["results"].get("ropekv_fp8q") or {}
    return "  limit %s" % fmt_us(r["limit_us"]) + (
        "  (ropekv %.4f%% bit-identical)" % (100 * rk["exact"]) if rk.get("exact") is not None else "")


def _shape(run, T, H, kv):
    """One shape's row: skipped where the GPU lacks the memory; else its problem, the same-size copy, the fma
    reference, and each method's result."""
    dev, methods, floors, cpu = run.dev, run.methods, run.floors, run.cpu
    seed = T * 1000 + H * 10 + (kv == "fp8_e4m3")
    need = 4 * T * H * W * 2 + 6 * T * H * R + 64 * T * W + (256 << 20)
    if run.q8:
        need += 2 * T * H * W
    if any(FORMS[m][0] == "inplace" for m in methods):
        need += T * H * W * 2
    r = {"T": T, "H": H, "kv": kv, "results": {}}
    free = torch.cuda.mem_get_info(dev)[0] if not cpu else float("inf")
    if need > 0.9 * free:
        log("T=%d H=%d %s: skipped (needs ~%.1f GB, %.1f GB free)" % (T, H, kv, need / 1e9, free / 1e9))
        for m in methods:
            r["results"][m] = {"status": "skipped", "us": None, "note": "not enough memory"}
        pb = None
    else:
        pb = Problem(torch, T, H, kv, dev, run.cos_sin_cache, run.k_scale, seed, run.q_scale, run.policy)
    r["bytes"] = op_bytes(T, H, kv == "fp8_e4m3")
    r["limit_us"] = max(floors["roundtrip_us"], r["bytes"] / floors["copy_Bps"] * 1e6)
    r["copy_us"] = None
    if pb is not None:
        r["copy_us"] = same_size_copy_us(torch, run.args, cpu, dev, r["bytes"])
    ref = None
    if pb is not None:
        try:
            ref = Reference(torch, pb, q8=run.q8)  # the fma reference every method is checked against
            pb.ref = ref
        except Exception as e:  # noqa: BLE001
            msg = failed("reference failed", e)
            for m in methods:
                r["results"][m] = {"status": "n/a", "us": None, "note": "no reference: %s" % msg}
    for m in (run.order if ref is not None else []):
        r["results"][m] = _method(run, m, pb, ref, T, H, kv)
    return r


def _method(run, m, pb, ref, T, H, kv):
    """One method's result at one shape: n/a (unsupported, torch.compile already failed at this KV dtype, or the
    first call raised), WRONG (outside the reference's tolerance; not timed), or ok with its time and BW %."""
    cpu = run.cpu
    res = {"status": "ok", "us": None, "timing": "", "note": ""}
    form, q_fp8 = FORMS[m]
    if m in run.unsupported:
        return {"status": "n/a", "us": None, "note": run.unsupported[m]}
    broken_key = (m, kv)
    if m.startswith("compile") and broken_key in run.compile_broken:
        return {"status": "n/a", "us": None, "note": run.compile_broken[broken_key]}
    try:
        t_setup = time.time()
        fn, outputs = METHODS[m](run.state, pb)
        fn()
        if not cpu:
            torch.cuda.synchronize()
        outs = outputs()
        if m.startswith("compile") and time.time() - t_setup > 5:
            log("  torch.compile took %.1f s (%s T=%d H=%d %s)" % (time.time() - t_setup, m, T, H, kv))
    except Exception as e:  # noqa: BLE001
        failed, msg = first_call_failed(torch, m, e, cpu)
        if m.startswith("compile"):
            run.compile_broken[broken_key] = "torch.compile failed: " + msg
        return failed
    ok, steps, exact, bad = check(torch, pb, ref, outs, form, q_fp8)
    res["exact"], res["steps"] = exact, steps
    if not ok:
        res["status"] = "WRONG"
        res["note"] = "%d elements outside the tolerance of the fma reference (max %d steps)" % (bad, steps)
        log("  %s WRONG: %d elements outside the tolerance, max %d steps, %.4f%% bit-identical" % (
            m, bad, steps, 100 * exact))
    elif m.startswith("triton_fp8q") and exact < 1:
        res["note"] = "not bit-identical (%.4f%%) although it does ropekv's arithmetic" % (100 * exact)
        log("  %s: %s" % (m, res["note"]))
    if res["status"] == "ok":
        try:
            res["us"], res["timing"], note = time_call(torch, fn, run.args, cpu)
            if note:
                res["note"] = note
            res["bytes"] = pb.bytes_moved(form, q_fp8)
            res["bw_pct"] = bw_pct(res["bytes"], res["us"], run.floors["copy_Bps"])
        except Exception as e:  # noqa: BLE001
            timing_failed(torch, res, m, e, cpu)
    return res
