"""ropekv's side: its kernels, made on first use on one of the run's contexts and checked against what was asked (a
kernel whose info differs, or whose fp8 is not OCP e4m3, raises and its method is reported n/a), the spec's policy
taken from them, and the ropekv methods of every mode. A method returns (fn, outputs): fn() runs one call, outputs()
gives a dict of its outputs ("q_out" for absorbed and zero_copy, "q_pe" for inplace, "cache" always; read: "out")."""
import time

from .env import log
from .shapes import L, READ_KV, ROPE_AT, ROW_BYTES, SCALES_AT, TILE, V32_FORMS


def require_ocp(info):
    """The script's reference, checks and peers make OCP e4m3 (float8_e4m3fn); a target whose fp8 bytes are FNUZ
    (gfx942: MI300X) writes another format, so its fp8 kernels are reported n/a with this reason."""
    for what, fmt in (("cache", info.fp8_format), ("query", info.q_fp8_format)):
        if fmt == "fnuz":
            raise RuntimeError("%s: the fp8 %s of this target is FNUZ (e4m3fnuz); this script checks OCP e4m3 only"
                               % (info.key, what))


def ropekv_kernel(state, ctx_key, form, q_fp8, kv, norm="none"):
    """The ropekv kernel of one variant on one of the script's contexts (made on first use); norm: the fused kv_a
    RMSNorm ("none", "rms", "rms_out")."""
    key = (ctx_key, form, q_fp8, kv, norm)
    k = state["kernels"].get(key)
    if k is None:
        ctx = state[ctx_key]
        t0 = time.perf_counter()
        kw = {"norm": norm} if norm != "none" else {}
        k = ctx.kernel(state["args"].spec, kv=kv, q=form, q_dtype="fp8_e4m3" if q_fp8 else "bf16", **kw)
        want = "fp8_e4m3" if q_fp8 and form != "none" else "bf16"
        if k.info.q_dtype != want or k.info.kv != kv or k.info.q != form or getattr(k.info, "norm", "none") != norm:
            raise RuntimeError("asked for q form %s, %s query, kv %s, norm %s; the library gave %s (%s)"
                               % (form, want, kv, norm, k.info.key, k.name))
        require_ocp(k.info)
        if ctx_key == "ctx":
            label = "%s%s, kv %s%s" % (form, " fp8 q" if q_fp8 else "", kv,
                                       ", norm %s" % norm if norm != "none" else "")
            state["meta"]["kernels"][label] = (k.name, (time.perf_counter() - t0) * 1e3)
        state["kernels"][key] = k
    return k


def method_ropekv(state, pb, ctx_key="ctx", form="absorbed", q_fp8=False):
    k = ropekv_kernel(state, ctx_key, form, q_fp8, pb.kv)
    cache = pb.new_cache()
    out = {"cache": cache}
    kw = dict(k_nope=pb.k_nope, k_pe=pb.k_pe, kv_cache=cache, positions=pb.positions, slots=pb.slots,
              cos_sin=pb.cos_sin_cache, k_scale=pb.k_scale if pb.fp8 else None, q_scale=pb.q_scale if q_fp8 else None)
    if form == "absorbed":
        out["q_out"] = pb.new_q_out(q_fp8)
        kw.update(q_nope=pb.q_nope, q_pe=pb.q_pe, q_out=out["q_out"])
    elif form == "zero_copy":
        out["q_out"] = pb.new_q_out_zero_copy(q_fp8)
        kw.update(q_pe=pb.q_pe, q_out=out["q_out"])
    elif form == "inplace":
        out["q_pe"] = pb.new_q_pe()
        kw.update(q_pe=out["q_pe"])
    launch = k.bind(**kw)
    return launch, lambda: out


def method_ropekv_nopdl(state, pb):
    return method_ropekv(state, pb, "ctx_nopdl")


def method_ropekv_prefetch(state, pb):
    return method_ropekv(state, pb, "ctx_prefetch")


def _ropekv_form(form, q_fp8):
    def method(state, pb):
        return method_ropekv(state, pb, "ctx", form, q_fp8)
    return method


def _job_kernel(state, method, kv):
    """The ropekv kernel of a v32 or read method (made on first use)."""
    key = (method, kv)
    k = state["kernels"].get(key)
    if k is None:
        ctx = state["ctx"]
        t0 = time.perf_counter()
        if method in V32_FORMS:
            k = ctx.kernel("deepseek_v32", kv="fp8_tile", q=V32_FORMS[method], layout="paged")
            want = ("fp8_tile", "paged", "write", V32_FORMS[method])
        else:
            spec, layout = READ_KV[kv]
            k = ctx.kernel(spec, kv=kv, layout=layout, op="read")
            want = (kv, layout, "read", k.info.q)
        got = (k.info.kv, k.info.layout, k.info.op, k.info.q)
        if got != want:
            raise RuntimeError("asked for %s; the library gave %s (%s)" % (want, k.info.key, k.name))
        require_ocp(k.info)
        if k.info.kv == "fp8_tile" and (k.info.row_bytes, k.info.fp8_tile, k.info.fp8_tile_scales_at,
                                        k.info.fp8_tile_rope_at, k.info.fp8_tile_scale) != (
                ROW_BYTES, TILE, SCALES_AT, ROPE_AT, "f32"):
            raise RuntimeError("%s: the library's fp8_tile row (%d bytes, tiles of %d, scales at %d, rope at %d, "
                               "scale %s) is not the one this script checks" % (
                                   k.info.key, k.info.row_bytes, k.info.fp8_tile, k.info.fp8_tile_scales_at,
                                   k.info.fp8_tile_rope_at, k.info.fp8_tile_scale))
        if k.info.kv == "fp8_e4m3" and k.info.op == "read" and k.info.scale not in ("mul_recip", "div"):
            raise RuntimeError("%s: scale %s; the script's reference multiplies by k_scale" % (k.info.key,
                                                                                                k.info.scale))
        state["meta"]["kernels"]["%s, kv %s" % (method, kv)] = (k.name, (time.perf_counter() - t0) * 1e3)
        state["kernels"][key] = k
    return k


def method_ropekv_v32(state, pb, method):
    k = _job_kernel(state, method, "fp8_tile")
    cache = pb.new_cache()
    out = {"cache": cache}
    kw = dict(k_nope=pb.k_nope, k_pe=pb.k_pe, kv_cache=cache, positions=pb.positions, slots=pb.slots,
              cos_sin=pb.cos_sin_cache)
    if V32_FORMS[method] == "absorbed":
        out["q_out"] = pb.new_q_out()
        kw.update(q_nope=pb.q_nope, q_pe=pb.q_pe, q_out=out["q_out"])
    return k.bind(**kw), lambda: out


def method_ropekv_read(state, pb, method):
    k = _job_kernel(state, method, pb.kv)
    out = {"out": pb.new_out()}
    kw = dict(kv_cache=pb.cache, slots=pb.slots, out=out["out"])
    if pb.kv == "fp8_e4m3":
        kw["k_scale"] = pb.k_scale
    return k.bind(**kw), lambda: out


def _norm_kernel(state, pb, norm):
    return ropekv_kernel(state, "ctx", "absorbed", False, pb.kv, norm)


def method_ropekv_norm(state, pb, norm="rms"):
    """ropekv with the fused norm: the raw c_kv in, norm_weight; rms_out also writes the normalized rows ("norm")."""
    k = _norm_kernel(state, pb, norm)
    out = {"cache": pb.new_cache(), "q_out": pb.new_q_out()}
    kw = dict(q_nope=pb.q_nope, q_pe=pb.q_pe, q_out=out["q_out"], k_nope=pb.k_nope, k_pe=pb.k_pe,
              kv_cache=out["cache"], positions=pb.positions, slots=pb.slots, cos_sin=pb.cos_sin_cache,
              k_scale=pb.k_scale if pb.fp8 else None, norm_weight=pb.norm_weight)
    if norm == "rms_out":
        out["norm"] = pb.torch.empty(pb.T, L, device=pb.dev, dtype=pb.torch.bfloat16)
        kw["norm_out"] = out["norm"]
    return k.bind(**kw), lambda: out


def method_ropekv_norm_out(state, pb):
    return method_ropekv_norm(state, pb, "rms_out")


def method_ropekv_nonorm(state, pb):
    """ropekv with norm none on the already-normalized input (pb.pn, the fused op's rows in the c_kv columns)."""
    return method_ropekv(state, pb.pn)


def sync_policy(policy, info, kv_fp8, q_fp8):
    """The spec's policy is the definition: take the ropekv kernel's (KernelInfo) where it differs from SPECS."""
    pairs = []
    if kv_fp8:
        pairs += [("kv_scale", info.scale), ("kv_rr", bool(info.rope_bf16_round))]
    if q_fp8 and getattr(info, "q_dtype", "bf16") == "fp8_e4m3":
        pairs += [("q_scale", info.q_fp8_scale), ("q_rr", bool(info.q_fp8_rope_bf16_round)),
                  ("q_sat", float(info.q_fp8_saturate))]
    for key, value in pairs:
        if policy[key] != value:
            log("policy: %s is %r in the library's %s, %r in this script's table: the library's is used"
                % (key, value, info.key, policy[key]))
            policy[key] = value
