"""ropekv's arithmetic in PyTorch, exactly (docs/numerics.md; gen/ref.c is the definition): the pieces a PyTorch
implementation of the op needs to write the same bits as the kernels. Used by the tests, the benchmarks' reference
and the example layer's unfused path. Imports torch.

    fma_f32(a, b, p)             float32(a*b + p) rounded once, as fmaf
    rope(x, cos, sin, style)     the rope of a bf16 tensor as float32: y0 = fma(x0, c, -(x1*s)), y1 = fma(x1, c, x0*s);
                                 style "none": x as it is (cos and sin may be None)
    scale(x, convention, s)      x scaled by a float32 scale under a spec's fp8 convention
    e4m3_codes(v, fmt)           float32 values (scaled and clamped) as e4m3 codes (uint8), round to nearest even
    e4m3_values(codes, fmt)      the float32 values of e4m3 codes
    rms_norm(x, w, eps, rounding)  the fused kv_a RMSNorm of bf16 rows (norm rms / rms_out), the kernels' order of sums
"""
import math

import torch


def fma_f32(a, b, p):
    """float32(a*b + p) with a single rounding, what fmaf(a, b, p) returns, for float32 tensors: a holds bf16
    values, b and p any float32 values (broadcast like a*b + p).

    a*b is exact in float64 (8 + 24 significant bits). The float64 sum prod + p is made round-to-odd: TwoSum
    gives its exact error, and an inexact sum whose last bit is even moves one float64 ulp toward the exact
    value. Rounding a round-to-odd float64 (53 >= 24 + 2 bits) to float32 is the correctly rounded float32 of
    the exact sum, so the two conversions (exact -> float64 -> float32) never double-round. Infinite and NaN
    operands give what fmaf gives (the float64 sum is already inf/NaN; no correction is applied)."""
    prod = a.double() * b.double()
    pd = p.double()
    s = prod + pd
    bb = s - prod
    err = (prod - (s - bb)) + (pd - bb)  # exact: prod + pd == s + err (TwoSum, each op a separate kernel)
    even = (s.view(torch.int64) & 1) == 0
    fix = (err != 0) & torch.isfinite(err) & even
    toward = torch.where(err > 0, torch.full_like(s, math.inf), torch.full_like(s, -math.inf))
    s = torch.where(fix, torch.nextafter(s, toward), s)
    return s.float()


def rope(x, c=None, sn=None, style="gptj"):
    """ropekv's rope of a bf16 tensor x [..., R] as float32 (gen/ref.c): pairs (x0, x1) interleaved (gptj) or in
    halves (neox), y0 = fmaf(x0, c, -(x1*s)), y1 = fmaf(x1, c, x0*s) with x1*s and x0*s float32 products (torch's
    float32 multiply is correctly rounded). c and sn: float32 [..., R/2], broadcast against the pairs. style "none"
    rotates nothing: x as float32 (no table is read; c and sn may be None). Its bf16 output is x itself, bit for bit
    (a NaN keeps its payload): the kernels copy an unrotated rope part as they copy the latent."""
    xf = x.float()
    if style == "none":
        return xf
    half = xf.shape[-1] // 2
    if style == "gptj":
        x0, x1 = xf[..., 0::2], xf[..., 1::2]
    else:
        x0, x1 = xf[..., :half], xf[..., half:]
    c, sn = c.float(), sn.float()
    y0 = fma_f32(x0, c, -(x1 * sn))
    y1 = fma_f32(x1, c, x0 * sn)
    if style == "gptj":
        return torch.stack((y0, y1), dim=-1).flatten(-2)
    return torch.cat((y0, y1), dim=-1)


def scale(x, convention, s):
    """float32 x scaled by the float32 scale tensor s under a spec's fp8 convention: mul_recip x * float32(1 / s),
    div x / s, mul x * s, none x."""
    if convention == "mul_recip":
        return x * (1.0 / s)
    if convention == "div":
        return x / s
    if convention == "mul":
        return x * s
    return x


def e4m3_codes(v, fmt="ocp"):
    """float32 values (already scaled and clamped) as e4m3 codes (uint8), exactly as gen/ref.c's rk_f32_to_fp8
    (needs no float8 dtype): round to nearest even on the float64 value in quanta of its binade (exact: the
    quotient has at most 24 significant bits, torch.round ties to even), past the max -> the max, NaN -> 0x7f (OCP)
    / 0x80 (FNUZ), the sign kept (OCP -0 = 0x80; FNUZ zero is 0x00)."""
    bias, max_code, nan, fmax = (8, 0x7F, 0x80, 240.0) if fmt == "fnuz" else (7, 0x7E, 0x7F, 448.0)
    v = v.float()
    u = v.view(torch.int32)
    neg = u < 0
    ef = (u >> 23) & 0xFF
    emin = 1 - bias
    e = torch.clamp(ef - 127, min=emin)
    m = v.double().abs()
    quanta = m / torch.ldexp(torch.ones_like(m), (e - 3).to(torch.int64))
    code = (e - emin).to(torch.int64) * 8 + torch.round(quanta).to(torch.int64)
    code = torch.where(ef == 0, torch.zeros_like(code), code)  # f32 subnormals: far below the fp8 ones
    code = torch.where(m > fmax, torch.full_like(code, max_code), code)
    if fmt == "fnuz":
        code = torch.where(neg & (code != 0), code | 0x80, code)
    else:
        code = torch.where(neg, code | 0x80, code)
    code = torch.where(torch.isnan(v), torch.full_like(code, nan), code)
    return code.to(torch.uint8)


def e4m3_values(codes, fmt="ocp"):
    """The float32 values of e4m3 codes (a uint8 tensor) through a 256-entry table: OCP (bias 7, 0x7f / 0xff NaN)
    or FNUZ (bias 8, 0x80 the only NaN)."""
    c = torch.arange(256, dtype=torch.int64)
    bias = 8 if fmt == "fnuz" else 7
    e, m = (c >> 3) & 0xF, (c & 7).double()
    mag = torch.where(e == 0, m * 2.0 ** (1 - bias - 3), torch.ldexp(8.0 + m, (e - bias - 3)))
    val = torch.where((c & 0x80) != 0, -mag, mag)
    nan = (c == 0x80) if fmt == "fnuz" else ((c & 0x7F) == 0x7F)
    val = torch.where(nan, torch.full_like(val, float("nan")), val)
    return val.float().to(codes.device)[codes.long()]


def rms_norm(x, weight, eps, rounding="twice"):
    """The fused kv_a RMSNorm of ropekv's write kernels (norm rms / rms_out; gen/ref.c defines it) on bf16 rows x
    [..., L] (L a multiple of 8 whose L / 8 is a power of two, as the specs have it) with weight [L] (bf16 or
    float32) and eps (a Python float, taken as float32, as the kernels take the spec's eps: KernelInfo.norm_eps).
    Returns the bf16 rows n, with ropekv's arithmetic in float32, bit for bit:
        p[c] = sum of squares of chunk c = x[8c .. 8c+8), p = fmaf(x_i, x_i, p) in order (emulated exactly: fma_f32)
        for d = L/16, L/32, .., 1: p[c] = p[c] + p[c + d], c in [0, d)   (a pairwise tree over the chunks)
        r = 1 / sqrt(p[0] / L + eps)                                    (correctly rounded division and square root)
        n = bf16(bf16(x * r) * w)  (rounding "twice", HF's and vLLM's)  or  bf16((x * r) * w)  ("once")
    Every operation is one IEEE float32 operation (torch's float32 multiply, add, division and sqrt are correctly
    rounded on the CPU and on CUDA; divisors are tensors, since torch's CUDA division by a Python number multiplies
    by its reciprocal), so the result is the kernels' bit for bit: the tests compare it with the host backend."""
    xf = x.float()
    L = xf.shape[-1]
    chunks = L // 8
    if L % 8 or chunks & (chunks - 1):
        raise ValueError("rms_norm: L = %d must be 8 times a power of two" % L)
    xc = xf.unflatten(-1, (chunks, 8))
    p = torch.zeros(xc.shape[:-1], dtype=torch.float32, device=x.device)
    for i in range(8):
        p = fma_f32(xc[..., i], xc[..., i], p)
    d = chunks // 2
    while d >= 1:
        p = p[..., :d] + p[..., d:2 * d]
        d //= 2
    total = p[..., 0]
    mean = total / torch.full_like(total, float(L))
    r = torch.ones_like(total) / torch.sqrt(mean + torch.full_like(total, eps))
    y = xf * r.unsqueeze(-1)
    if rounding == "twice":
        y = y.to(torch.bfloat16).float()
    elif rounding != "once":
        raise ValueError("rms_norm: rounding must be 'twice' or 'once', got %r" % (rounding,))
    return (y * weight.float()).to(torch.bfloat16)
