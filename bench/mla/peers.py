"""The peers ropekv is compared with, per mode: the unfused PyTorch sequences engines ran (eager) and torch.compile of
them, the Triton kernels written here (triton_kernels.py) launched on the problem's tensors, aiter's fused op (ROCm),
and the norm section's RMSNorm + ropekv and eager sequence. Each method returns (fn, outputs): fn() runs one call,
outputs() gives a dict of its outputs."""
import importlib

from .env import require_pdl
from .library import _norm_kernel
from .numerics import fp8_values, to_fp8
from .shapes import (FLT_MIN, FP8_MAX, L, NTILES, R, ROPE_AT, ROW_BYTES, SCALE_CONV, SCALES_AT, TILE, V32_FORMS,
                     W)
from .triton_kernels import triton_kernels

torch = None  # set by env.bind() in main()
rkref = None  # ropekv.reference, set with torch


# ---- --mode write ----------------------------------------------------------------------------------------------------
def _rope_gptj(x, cos, sin):
    """GPT-J (interleaved) rope of a bf16 tensor in fp32, back to bf16: pairs through view_as pairs + stack."""
    xf = x.float().unflatten(-1, (-1, 2))
    x0, x1 = xf[..., 0], xf[..., 1]
    return torch.stack((x0 * cos - x1 * sin, x1 * cos + x0 * sin), dim=-1).flatten(-2).to(torch.bfloat16)


def mla_rope_kv_unfused(q_nope, q_pe, k_nope, k_pe, positions, slots, cos_sin_cache, kv_cache, k_scale, fp8: bool,
                        kv_conv: str = "mul_recip"):
    """The unfused sequence: returns q_out [T, H, 576]; writes the KV rows into kv_cache (its last row is a
    scratch row that padding tokens (slot < 0) are sent to, so no host sync is needed to mask them)."""
    cos_sin = cos_sin_cache.index_select(0, positions)
    cos, sin = cos_sin.chunk(2, dim=-1)
    q_rot = _rope_gptj(q_pe, cos.unsqueeze(1), sin.unsqueeze(1))
    k_rot = _rope_gptj(k_pe, cos, sin)
    q_out = torch.cat([q_nope, q_rot], dim=-1)
    kv = torch.cat([k_nope, k_rot], dim=-1)
    flat = kv_cache.view(-1, kv_cache.shape[-1])
    if fp8:
        kv = to_fp8(rkref.scale(kv.float(), kv_conv, k_scale).clamp(-FP8_MAX, FP8_MAX)).view(torch.uint8)
        flat = flat.view(torch.uint8)
    idx = torch.where(slots >= 0, slots, flat.shape[0] - 1)
    flat.index_copy_(0, idx, kv)
    return q_out


def mla_rope_kv_unfused_fp8q(q_nope, q_pe, k_nope, k_pe, positions, slots, cos_sin_cache, kv_cache, k_scale,
                             fp8: bool, q_scale, q_conv: str, q_sat: float, kv_conv: str = "mul_recip"):
    """The unfused sequence, then the query quantized as engines do it: the bf16 q_out scaled by q_scale with the
    spec's convention, clamped to +-q_sat, cast to float8_e4m3fn. Returns the fp8 q_out [T, H, 576]."""
    q_out = mla_rope_kv_unfused(q_nope, q_pe, k_nope, k_pe, positions, slots, cos_sin_cache, kv_cache, k_scale, fp8,
                                kv_conv)
    return to_fp8(rkref.scale(q_out.float(), q_conv, q_scale).clamp(-q_sat, q_sat))


def method_triton(state, pb, pdl=False, prefetch=False):
    if pdl:
        require_pdl()
    kern = triton_kernels()["mla"]
    q_out, cache = pb.new_q_out(), pb.new_cache()
    grid = (pb.T, pb.H + 1)
    a = (pb.q_nope, pb.q_pe, q_out, pb.k_nope, pb.k_pe, cache, pb.positions, pb.slots, pb.cos_sin_cache, pb.k_scale,
         pb.q_nope.stride(0), pb.q_nope.stride(1), pb.q_pe.stride(0), pb.q_pe.stride(1), q_out.stride(0),
         q_out.stride(1), pb.k_nope.stride(0), pb.k_pe.stride(0), W, pb.H)

    if pdl:
        def fn():
            kern[grid](*a, L=L, R=R, FP8=pb.fp8, FP8_MAX=FP8_MAX, USE_GDC=True, PREFETCH=prefetch, num_warps=2,
                       launch_pdl=True)
    else:
        def fn():
            kern[grid](*a, L=L, R=R, FP8=pb.fp8, FP8_MAX=FP8_MAX, USE_GDC=False, PREFETCH=False, num_warps=2)

    return fn, lambda: {"q_out": q_out, "cache": cache}


def method_triton_pdl(state, pb):
    return method_triton(state, pb, pdl=True)


def method_triton_prefetch(state, pb):
    return method_triton(state, pb, pdl=True, prefetch=True)


def method_triton_fp8q(state, pb, pdl=False):
    if pdl:
        require_pdl()
    kern = triton_kernels()["mla_fp8q"]
    pol = pb.policy
    q_out, cache = pb.new_q_out(q_fp8=True), pb.new_cache()
    grid = (pb.T, pb.H + 1)
    a = (pb.q_nope, pb.q_pe, q_out, pb.k_nope, pb.k_pe, cache, pb.positions, pb.slots, pb.cos_sin_cache, pb.k_scale,
         pb.q_scale, pb.q_nope.stride(0), pb.q_nope.stride(1), pb.q_pe.stride(0), pb.q_pe.stride(1), q_out.stride(0),
         q_out.stride(1), pb.k_nope.stride(0), pb.k_pe.stride(0), W, pb.H)
    kw = dict(L=L, R=R, FP8=pb.fp8, FP8_MAX=FP8_MAX, KV_CONV=SCALE_CONV[pol["kv_scale"]], KV_RR=pol["kv_rr"],
              Q_SAT=float(pol["q_sat"]), Q_CONV=SCALE_CONV[pol["q_scale"]], Q_RR=pol["q_rr"], USE_GDC=pdl,
              num_warps=2)
    if pdl:
        kw["launch_pdl"] = True

    def fn():
        kern[grid](*a, **kw)

    return fn, lambda: {"q_out": q_out, "cache": cache}


def method_triton_fp8q_pdl(state, pb):
    return method_triton_fp8q(state, pb, pdl=True)


def _torch_method(f, pb, q_fp8=False):
    cache = pb.new_cache()
    out = {"cache": cache}
    pol = pb.policy
    if q_fp8:
        def fn():
            out["q_out"] = f(pb.q_nope, pb.q_pe, pb.k_nope, pb.k_pe, pb.positions, pb.slots, pb.cos_sin_cache, cache,
                             pb.k_scale, pb.fp8, pb.q_scale, pol["q_scale"], float(pol["q_sat"]), pol["kv_scale"])
    else:
        def fn():
            out["q_out"] = f(pb.q_nope, pb.q_pe, pb.k_nope, pb.k_pe, pb.positions, pb.slots, pb.cos_sin_cache, cache,
                             pb.k_scale, pb.fp8, pol["kv_scale"])

    return fn, lambda: out


def method_eager(state, pb):
    return _torch_method(mla_rope_kv_unfused, pb)


# aiter (ROCm/aiter): its Triton fused_qk_rope_cat_and_cache_mla, the op AMD's engines (SGLang, ATOM) call for this
# job. Where it sits moved between releases; both places are tried.
AITER_MODULES = ("aiter.ops.triton.fusions.fused_kv_cache", "aiter.ops.triton.fused_kv_cache")


def aiter_op():
    """aiter's fused_qk_rope_cat_and_cache_mla; raises ImportError saying why when aiter or the op is missing."""
    import aiter  # noqa: F401  (ROCm only: the reason in the error where it is not installed)
    for name in AITER_MODULES:
        try:
            return importlib.import_module(name).fused_qk_rope_cat_and_cache_mla
        except (ImportError, AttributeError):
            continue
    raise ImportError("aiter has no fused_qk_rope_cat_and_cache_mla (looked in %s)" % ", ".join(AITER_MODULES))


def aiter_args(pb, q_out, cache, k_pe_out):
    """(args, kwargs) of fused_qk_rope_cat_and_cache_mla doing ropekv's absorbed job (bf16 query) on our tensors:
      q_nope, q_pe       [T, H, L], [T, H, R]: the strided slices of the query, as they are
      k_nope, k_pe       [T, 1, L], [T, 1, R]: one KV head (MLA's latent), views of the projection output
      kv_cache           [rows, 1, W]: the paged cache [blocks, 16, W] seen flat (slot s is row s: the same bytes)
      slot_mapping, pos  the slots and positions (int64)
      cos, sin           [max_pos, R/2] each: the two halves of the float32 cos_sin_cache (tables R/2 wide make
                         aiter take entry d // 2 for both elements of a GPT-J pair, as ropekv does)
      k_scale            the fp8 cache's scale, applied only to an fp8 cache: stored = x * (1 / k_scale), the
                         deepseek_v3 (mul_recip) convention; a bf16 cache is written unscaled
      is_neox=False      GPT-J rope (interleaved pairs), DeepSeek's
      q_out, k_pe_out    preallocated, so the timed call allocates nothing
    What it does differently: it also writes k_pe_out, the rotated k_pe ([T, 1, R] bf16: 128 bytes a token more than
    the job); it clamps nothing before the fp8 cast; its fp8 is aiter's platform e4m3 (FNUZ on gfx942, whose cache
    dtype our OCP cache is not: there it refuses the call and is reported n/a); its rope is x * cos + rot(x) * sin in
    float32, two roundings (or an fma where the compiler contracts them), so it is checked with the two-rounding
    tolerance, as triton and eager are, not bit for bit (its bit-identical fraction is in the csv); an fp8 q_out
    (q_out_dtype) would be a plain cast without q_scale, not the fp8q job, so it has no fp8q method."""
    half = R // 2
    args = (pb.q_nope, pb.q_pe, pb.k_nope.unsqueeze(1), pb.k_pe.unsqueeze(1), cache.view(-1, 1, W), pb.slots,
            pb.positions, pb.cos_sin_cache[:, :half], pb.cos_sin_cache[:, half:], pb.k_scale, False)
    return args, dict(apply_scale=pb.fp8, q_out=q_out, k_pe_out=k_pe_out)


def method_aiter(state, pb):
    op = aiter_op()
    q_out, cache = pb.new_q_out(), pb.new_cache()
    k_pe_out = pb.torch.empty(pb.T, 1, R, device=pb.dev, dtype=pb.torch.bfloat16)
    args, kw = aiter_args(pb, q_out, cache, k_pe_out)

    def fn():
        op(*args, **kw)

    return fn, lambda: {"q_out": q_out, "cache": cache}


def method_eager_fp8q(state, pb):
    return _torch_method(mla_rope_kv_unfused_fp8q, pb, q_fp8=True)


def _compiled(state, name, f):
    if state.get(name) is None:
        dyn = {"auto": None, "true": True, "false": False}[state["args"].compile_dynamic]
        state[name] = torch.compile(f, mode=state["args"].compile_mode, dynamic=dyn)
    return state[name]


def method_compile(state, pb):
    return _torch_method(_compiled(state, "compiled", mla_rope_kv_unfused), pb)


def method_compile_fp8q(state, pb):
    return _torch_method(_compiled(state, "compiled_fp8q", mla_rope_kv_unfused_fp8q), pb, q_fp8=True)


# ---- --mode v32 ------------------------------------------------------------------------------------------------------
def v32_unfused(q_nope, q_pe, k_nope, k_pe, positions, slots, cos_sin_cache, kv_cache, absorbed: bool):
    """The unfused V3.2 writer: rope of k_pe (and q_pe) with torch ops, the tiles' amax, scales and fp8 codes, the
    656-byte rows assembled with torch.cat of byte views, index_copy_ into the paged cache (slot < 0 to the scratch
    row); returns q_out [T, H, 576] for the absorbed form, else None."""
    cos_sin = cos_sin_cache.index_select(0, positions)
    cos, sin = cos_sin.chunk(2, dim=-1)
    k_rot = _rope_gptj(k_pe, cos, sin)
    x = k_nope.float().unflatten(-1, (NTILES, TILE))
    scale = (x.abs().amax(dim=-1) / FP8_MAX).clamp(min=FLT_MIN)
    codes = to_fp8((x / scale.unsqueeze(-1)).clamp(-FP8_MAX, FP8_MAX)).view(torch.uint8).flatten(-2)
    row = torch.cat([codes, scale.view(torch.uint8), k_rot.view(torch.uint8)], dim=-1)
    flat = kv_cache.view(-1, ROW_BYTES)
    flat.index_copy_(0, torch.where(slots >= 0, slots, flat.shape[0] - 1), row)
    if not absorbed:
        return None
    return torch.cat([q_nope, _rope_gptj(q_pe, cos.unsqueeze(1), sin.unsqueeze(1))], dim=-1)


def method_triton_v32(state, pb, method):
    if method.endswith("_pdl"):
        require_pdl()
    kern = triton_kernels()["v32"]
    absorbed = V32_FORMS[method] == "absorbed"
    cache = pb.new_cache()
    out = {"cache": cache}
    q_out = pb.new_q_out() if absorbed else pb.q  # a placeholder pointer for the none form (never written)
    if absorbed:
        out["q_out"] = q_out
    H = pb.H if absorbed else 0
    grid = (pb.T, H + 1)
    a = (pb.q_nope, pb.q_pe, q_out, pb.k_nope, pb.k_pe, cache, pb.positions, pb.slots, pb.cos_sin_cache,
         pb.q_nope.stride(0), pb.q_nope.stride(1), pb.q_pe.stride(0), pb.q_pe.stride(1), q_out.stride(0),
         q_out.stride(1), pb.k_nope.stride(0), pb.k_pe.stride(0), pb.block_size, cache.stride(0), cache.stride(1), H)
    pdl = method.endswith("_pdl")
    kw = dict(L=L, R=R, TILE=TILE, NT=NTILES, SCALES_AT=SCALES_AT, ROPE_AT=ROPE_AT, FP8_MAX=FP8_MAX,
              SCALE_MIN=FLT_MIN, USE_GDC=pdl, num_warps=4)
    if pdl:
        kw["launch_pdl"] = True

    def fn():
        kern[grid](*a, **kw)

    return fn, lambda: out


def method_torch_v32(state, pb, method):
    f = v32_unfused
    if method.startswith("compile"):
        f = _compiled(state, "compiled_v32", v32_unfused)
    absorbed = V32_FORMS[method] == "absorbed"
    cache = pb.new_cache()
    out = {"cache": cache}

    def fn():
        out["q_out"] = f(pb.q_nope, pb.q_pe, pb.k_nope, pb.k_pe, pb.positions, pb.slots, pb.cos_sin_cache, cache,
                         absorbed)

    return fn, lambda: out


# ---- --mode read -----------------------------------------------------------------------------------------------------
def dequant_rows(torch, kv, rows, k_scale):
    """Cache rows as the read-back op returns them, bf16 [n, 576]: a bf16 row as it is; fp8 e4m3 codes times
    k_scale (deepseek_v3's convention: stored = x * (1 / k_scale)) in float32; an fp8_tile row's codes times their
    tile's float32 scale, its bf16 rope part as it is; each float32 product rounded to bf16."""
    if kv == "bf16":
        return rows
    n = rows.shape[0]
    if kv == "fp8_e4m3":
        return (fp8_values(torch, rows.view(torch.uint8)) * k_scale).to(torch.bfloat16)
    b = rows.view(torch.uint8)
    scale = b[:, SCALES_AT:ROPE_AT].contiguous().view(torch.float32)
    lat = fp8_values(torch, b[:, :L].contiguous()).reshape(n, NTILES, TILE) * scale[..., None]
    return torch.cat([lat.reshape(n, L).to(torch.bfloat16), b[:, ROPE_AT:].contiguous().view(torch.bfloat16)], dim=-1)


def read_unfused(cache, slots, k_scale, kv):
    """The unfused read: index_select of the rows (padding reads row 0), the dequantization with torch ops
    (dequant_rows), the padding rows zeroed with a mask."""
    flat = cache.view(-1, cache.shape[-1])
    rows = flat.index_select(0, slots.clamp(min=0))
    out = dequant_rows(torch, kv, rows, k_scale)
    return out.masked_fill((slots < 0).unsqueeze(-1), 0)


def method_triton_read(state, pb, method):
    if method.endswith("_pdl"):
        require_pdl()
    kern = triton_kernels()["read"]
    out = {"out": pb.new_out()}
    c = pb.cache
    if pb.layout == "paged":
        B, bst, est = c.shape[1], c.stride(0), c.stride(1)
    else:  # blocks of one row
        B, bst, est = 1, c.stride(0), 0
    a = (c, pb.slots, out["out"], pb.k_scale, pb.rows, B, bst, est, out["out"].stride(0))
    pdl = method.endswith("_pdl")
    kw = dict(L=L, R=R, KIND={"bf16": 0, "fp8_e4m3": 1, "fp8_tile": 2}[pb.kv], SCALE_OP=1, TILE=TILE, NT=NTILES,
              SCALES_AT=SCALES_AT, ROPE_AT=ROPE_AT, USE_GDC=pdl, num_warps=4)
    if pdl:
        kw["launch_pdl"] = True

    def fn():
        kern[(pb.T,)](*a, **kw)

    return fn, lambda: out


def method_torch_read(state, pb, method):
    f = read_unfused
    if method.startswith("compile"):
        f = _compiled(state, "compiled_read", read_unfused)
    out = {}

    def fn():
        out["out"] = f(pb.cache, pb.slots, pb.k_scale, pb.kv)

    return fn, lambda: out


# ---- the norm section ------------------------------------------------------------------------------------------------
def rmsnorm_torch(x, w, eps, rounding="twice"):
    """RMSNorm as engines write it in PyTorch (HF DeepseekV3RMSNorm): float32 mean of squares (torch's reduction
    order), rsqrt, x * r rounded to bf16 (rounding "twice") and times the weight, rounded to bf16."""
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    if rounding == "twice":
        y = y.to(torch.bfloat16).float()
    return (y * w.float()).to(torch.bfloat16)


def mla_norm_unfused(q_nope, q_pe, c_kv, k_pe, positions, slots, cos_sin_cache, kv_cache, k_scale, fp8: bool, w,
                     eps: float, rounding: str = "twice", kv_conv: str = "mul_recip"):
    """The unfused sequence with the kv_a RMSNorm first (rmsnorm_torch of c_kv), then mla_rope_kv_unfused on the
    normalized rows. Returns q_out."""
    k_nope = rmsnorm_torch(c_kv, w, eps, rounding)
    return mla_rope_kv_unfused(q_nope, q_pe, k_nope, k_pe, positions, slots, cos_sin_cache, kv_cache, k_scale, fp8,
                               kv_conv)


def rmsnorm_triton_launch(pb, out):
    """(grid, args, kwargs) of the Triton RMSNorm (triton_kernels()["rmsnorm"]) normalizing the problem's raw c_kv
    (pb.k_nope: the first L columns of the [T, 576] projection, its row stride) into out [T, L] bf16 with the weight,
    eps and rounding of the kernel's spec (pb.norm_weight, pb.norm_eps, pb.norm_rounding)."""
    args = (pb.k_nope, pb.norm_weight, out, pb.k_nope.stride(0), out.stride(0), float(pb.norm_eps))
    return (pb.T,), args, dict(L=L, TWICE=pb.norm_rounding == "twice", num_warps=2)


def rmsnorm_impl(state, cpu):
    """("triton", None) where the Triton RMSNorm can run, else ("torch", why): the torch eager RMSNorm stands in."""
    if cpu:
        return "torch", "--cpu: no Triton on the CPU, the RMSNorm is torch eager"
    try:
        triton_kernels()
        return "triton", None
    except Exception as e:  # noqa: BLE001
        return "torch", "Triton missing (%s): the RMSNorm is torch eager" % str(e).split("\n")[0][:120]


def method_rmsnorm_ropekv(state, pb):
    """A separate RMSNorm kernel into a [T, L] bf16 buffer ("norm"), then ropekv with norm none on it: two launches."""
    k = _norm_kernel(state, pb, "none")
    buf = pb.torch.empty(pb.T, L, device=pb.dev, dtype=pb.torch.bfloat16)
    out = {"cache": pb.new_cache(), "q_out": pb.new_q_out(), "norm": buf}
    launch = k.bind(q_nope=pb.q_nope, q_pe=pb.q_pe, q_out=out["q_out"], k_nope=buf, k_pe=pb.k_pe,
                    kv_cache=out["cache"], positions=pb.positions, slots=pb.slots, cos_sin=pb.cos_sin_cache,
                    k_scale=pb.k_scale if pb.fp8 else None)
    if state.get("rmsnorm_impl", "torch") == "triton":
        kern = triton_kernels()["rmsnorm"]
        grid, a, kw = rmsnorm_triton_launch(pb, buf)

        def fn():
            kern[grid](*a, **kw)
            launch()
    else:
        def fn():
            buf.copy_(rmsnorm_torch(pb.k_nope, pb.norm_weight, pb.norm_eps, pb.norm_rounding))
            launch()

    return fn, lambda: out


def method_eager_norm(state, pb):
    out = {"cache": pb.new_cache()}
    pol = pb.policy

    def fn():
        out["q_out"] = mla_norm_unfused(pb.q_nope, pb.q_pe, pb.k_nope, pb.k_pe, pb.positions, pb.slots,
                                        pb.cos_sin_cache, out["cache"], pb.k_scale, pb.fp8, pb.norm_weight,
                                        pb.norm_eps, pb.norm_rounding, pol["kv_scale"])

    return fn, lambda: out
