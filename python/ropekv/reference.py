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
    record_encode(desc, x, ...)  tokens' values as their bytes under a cache record (gen/record_codec.c's encoder)
    record_decode(desc, rows, reader=None, ...)  the bytes back to values, as ropekv's read op or a reader reads them
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


# ---- cache records (docs/formats.md, "Cache records"; gen/record_codec.c is the definition) -----------------------
# record_encode / record_decode work from a record's description as the library gives it (ropekv.record(name),
# Kernel.record_desc: a Record of segments and readers), never from a table of their own. Every step is one float32
# operation on a tensor (divisors and factors are float32 tensors, never Python numbers), in the codec's order, so
# the bytes are rk_record_encode's and the values rk_record_decode's, bit for bit.
_FLT_MIN = 2.0 ** -126
_READ_SCALES = ("exact", "bf16", "pow2_down")


def _f32(v):
    return torch.tensor(v, dtype=torch.float32)


def _u32(v):
    """The bits of float32 v as int64 in [0, 2^32)."""
    return v.contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF


def _from_u32(u):
    """float32 values of bits u (int64 in [0, 2^32))."""
    u = torch.where(u >= 2 ** 31, u - 2 ** 32, u)
    return u.to(torch.int32).view(torch.float32)


def bf16_bits(v):
    """float32 v as bf16 bits (int64), rk_f32_to_bf16: round to nearest even, overflow to inf, NaN -> 0x7fff."""
    u = _u32(v.float())
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF
    return torch.where((u & 0x7FFFFFFF) > 0x7F800000, torch.full_like(r, 0x7FFF), r)


def bf16_from_bits(b):
    """The float32 values of bf16 bits b (int64)."""
    return _from_u32((b.to(torch.int64) & 0xFFFF) << 16)


def e2m1_codes(v):
    """float32 values (already clamped to +-6) as e2m1 codes 0..15 (int64), rk_f32_to_e2m1: the nearest of {0, 0.5,
    1, 1.5, 2, 3, 4, 6}, a tie to the even code, saturating at 6, the sign in bit 3 (-0 too), NaN -> 0x7."""
    a = v.abs()
    code = torch.zeros(v.shape, dtype=torch.int64)
    for c, mid in enumerate((0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)):
        code += ((a > mid) | ((a == mid) & bool(c & 1))).to(torch.int64)
    neg = (_u32(v) >> 31) == 1
    code = torch.where(neg, code | 8, code)
    return torch.where(torch.isnan(v), torch.full_like(code, 7), code)


def e2m1_values(codes):
    """The float32 values of e2m1 codes (any integer tensor)."""
    mag = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=torch.float32)
    c = codes.to(torch.int64)
    m = mag[c & 7]
    return torch.where((c & 8) != 0, -m, m)


def pow2_up(s):
    """Positive float32 s rounded up to a power of two (a power of two, inf and NaN stay), on the bits."""
    u = _u32(s)
    up = ((u & 0x7FFFFF) != 0) & (u < 0x7F800000)
    return _from_u32(torch.where(up, (u & 0xFF800000) + 0x800000, u))


def pow2_down(s):
    """2^floor(log2 s) for a positive finite float32 s (an E8M0 reading toward zero); others stay."""
    _, e = torch.frexp(s.double())
    p = torch.ldexp(torch.ones_like(s, dtype=torch.float64), (e - 1).to(torch.int64)).float()
    return torch.where((s > 0) & ~torch.isinf(s), p, s)


def _le_bytes(codes, n):
    """Integer codes [..., k] as their n little-endian bytes each, uint8 [..., k * n]."""
    c = codes.to(torch.int64)
    return torch.stack([(c >> (8 * i)) & 0xFF for i in range(n)], dim=-1).flatten(-2).to(torch.uint8)


def _from_le(b, n):
    """uint8 [..., k * n] as k little-endian integers of n bytes (int64)."""
    b = b.to(torch.int64).unflatten(-1, (-1, n))
    return sum(b[..., i] << (8 * i) for i in range(n))


def _desc(desc):
    if isinstance(desc, str):
        from . import _core
        return _core.record(desc)
    return desc


def _sat(g, fmt):
    return _f32(g.saturate_fnuz if fmt == "fnuz" else g.saturate_ocp)


def _clamp(v, sat):
    """x > sat ? sat : x < -sat ? -sat : x (NaN passes)."""
    return torch.where(v > sat, sat, torch.where(v < -sat, -sat, v))


def _amax(v):
    """The largest |v| over the last dimension, NaN ignored (0 for none), inf kept."""
    a = v.abs()
    return torch.where(torch.isnan(a), torch.zeros_like(a), a).amax(dim=-1)


def _scale_bytes(g):
    return 4 if g.scale == "f32" else 0 if g.scale == "none" else 1


def _scale_base(desc, g):
    """The byte offset of a segment's block scales in a token's bytes (its row, then its page-tail part)."""
    return (desc.row_bytes if g.scale_at == "page_tail" else 0) + g.scales_at


def _scale_slots(g):
    """The place of each block's scale (rk_seg_scale_slot): block order, or with scales_interleave k block b's at
    (b % k) * (blocks / k) + b / k."""
    nb, k = g.n // g.block, g.scales_interleave
    b = torch.arange(nb)
    return b if k < 2 else (b % k) * (nb // k) + b // k


def _scale_order(g):
    """The blocks whose scales lie at places 0, 1, ... (_scale_slots inverted)."""
    order = torch.empty(g.n // g.block, dtype=torch.int64)
    order[_scale_slots(g)] = torch.arange(g.n // g.block)
    return order


def record_encode(desc, x, k_scale=1.0, fmt="ocp", conv=None, sanitize=False):
    """Tokens' logical values x [..., L + R] (the latent as the writer holds it, the rope part after RoPE, before any
    rounding; taken as float32) as their bytes under record desc (a Record, or a library record's name): uint8
    [..., row_bytes + tail_bytes], each token's row then its page-tail part (a page-tail record's block scales),
    padding zeros. fmt: the fp8 byte format of e4m3 values and scales, "ocp" or "fnuz"; k_scale: the launch's
    float32 tensor scale for "tensor" segments, taken under conv (None: the record's own, desc.conv); sanitize: NaN ->
    0 and +-inf -> +-max before any amax, as a spec with sanitize = true writes. Bit-exact with rk_record_encode."""
    desc = _desc(desc)
    conv = desc.conv if conv is None else conv
    x = torch.as_tensor(x).float()
    lead = x.shape[:-1]
    W = desc.L + desc.R
    if x.shape[-1] != W:
        raise ValueError("record %s takes rows of %d values, got %d" % (desc.name, W, x.shape[-1]))
    x = x.reshape(-1, W)
    N = x.shape[0]
    out = torch.zeros(N, desc.row_bytes + desc.tail_bytes, dtype=torch.uint8)
    k = torch.as_tensor(k_scale, dtype=torch.float32).reshape(())
    bf16_max = _from_u32(torch.tensor(0x7F7F0000))
    for g in desc.segments:
        sat = _sat(g, fmt)
        v = x[:, g.from_:g.from_ + g.n].clone()
        rope = torch.arange(g.from_, g.from_ + g.n) >= desc.L
        if g.rope_bf16:
            v = torch.where(rope, bf16_from_bits(bf16_bits(v)), v)
        if g.outer == "tensor":
            if conv == "mul_recip":
                v = v * (_f32(1.0) / k)
            elif conv == "div":
                v = v / k
            elif conv == "mul":
                v = v * k
        if sanitize:
            v = torch.where(torch.isnan(v), torch.zeros_like(v), v)
            if not (g.elem == "e4m3" and not g.block):
                v = _clamp(v, bf16_max)
        if g.elem == "bf16":
            u = _u32(v)
            b = torch.where(~rope & ((u & 0xFFFF) == 0), u >> 16, bf16_bits(v))
            out[:, g.at:g.at + 2 * g.n] = _le_bytes(b, 2)
            continue
        gs = None
        if g.outer == "token":
            smax = _f32(2.0 ** 127 if g.scale == "ue8m0" else (240.0 if fmt == "fnuz" else 448.0)
                        if g.scale == "e4m3" else 1.0)
            gs = _amax(v) / (smax * sat)
            gs = torch.where(gs >= _FLT_MIN, gs, _f32(_FLT_MIN)).unsqueeze(-1)
            out[:, g.outer_at:g.outer_at + 4] = _le_bytes(_u32(gs), 4)
        if g.block:
            vb = v.unflatten(-1, (g.n // g.block, g.block))
            s = _amax(vb) / sat
            if gs is not None:
                s = s / gs
            floor = _f32(g.floor)
            s = torch.where(s >= floor, s, floor)
            if g.rule == "pow2_up" or g.scale == "ue8m0":
                s = pow2_up(s)
            at = _scale_base(desc, g)
            nb = g.n // g.block * _scale_bytes(g)
            order = _scale_order(g)
            if g.scale == "f32":
                code, d = _u32(s), s
                out[:, at:at + nb] = _le_bytes(code[:, order], 4)
            elif g.scale == "ue8m0":
                code = (_u32(s) >> 23) & 0xFF
                out[:, at:at + nb] = code[:, order].to(torch.uint8)
                d = _ue8m0_values(code)
            else:  # e4m3
                code = e4m3_codes(s, fmt).to(torch.int64)
                # s > 0 rounding to zero: the least value (0x01), or 0x00 by rule exact_zero
                code = torch.where((code & 0x7F) == 0, torch.full_like(code, int(g.rule != "exact_zero")), code)
                if g.rule == "up":  # the next value while the nearest is below s, short of the largest finite
                    top = 0x7F if fmt == "fnuz" else 0x7E
                    code = torch.where((e4m3_values(code, fmt) < s) & (code < top), code + 1, code)
                out[:, at:at + nb] = code[:, order].to(torch.uint8)
                d = e4m3_values(code, fmt)
            if gs is not None:
                d = d * gs
            y = vb * (_f32(1.0) / d).unsqueeze(-1) if g.block_conv == "mul_recip" else vb / d.unsqueeze(-1)
            if g.rule == "exact_zero":  # a zero scale: the block's values times 0
                y = torch.where((d == 0).unsqueeze(-1), vb * 0.0, y)
            y = y.flatten(-2)
        else:
            y = v / gs if gs is not None else v
        y = _clamp(y, sat)
        if g.elem == "e4m3":
            out[:, g.at:g.at + g.n] = e4m3_codes(y, fmt)
        else:  # e2m1: two a byte, the first in the low nibble
            c = e2m1_codes(y)
            out[:, g.at:g.at + g.n // 2] = (c[:, 0::2] | (c[:, 1::2] << 4)).to(torch.uint8)
    return out.reshape(*lead, desc.row_bytes + desc.tail_bytes)


def _ue8m0_values(code):
    """UE8M0 bytes' values: 2^(b - 127), 0xff NaN."""
    d = torch.ldexp(torch.ones(code.shape, dtype=torch.float64), code - 127).float()
    return torch.where(code == 0xFF, _f32(float("nan")), d)


def _reader_scale(desc, reader):
    """A reader's scale convention: None (ropekv's read op: exact), a reader's name of desc, a Reader, or a
    convention's spelling."""
    if reader is None:
        return "exact"
    if isinstance(reader, str):
        for r in desc.readers:
            if r.name == reader:
                return r.scale
        if reader in _READ_SCALES:
            return reader
        raise ValueError("record %s has no reader %r (its readers: %s; or one of %s)" % (
            desc.name, reader, ", ".join(r.name for r in desc.readers) or "none", ", ".join(_READ_SCALES)))
    return reader.scale


def record_decode(desc, rows, reader=None, k_scale=1.0, fmt="ocp", conv=None):
    """Tokens' bytes under record desc (uint8 [..., row_bytes + tail_bytes], as record_encode makes them; [...,
    row_bytes] without a page tail) back to their values [..., L + R] float32, as a reader reads them: None is ropekv's
    read op (block scales exact; the op then rounds to bf16); a reader's name of desc.readers (or a Reader, or its
    convention "exact", "bf16", "pow2_down") takes each block scale as that reader does. A "tensor" segment is undone
    with k_scale under conv (None: desc.conv): x * k (mul_recip, div), x / k (mul). Bit-exact with rk_record_decode."""
    desc = _desc(desc)
    conv = desc.conv if conv is None else conv
    rs = _reader_scale(desc, reader)
    rows = torch.as_tensor(rows)
    nbytes = desc.row_bytes + desc.tail_bytes
    if rows.dtype != torch.uint8 or rows.shape[-1] != nbytes:
        raise ValueError("record %s: rows must be uint8 [..., %d], got %s %s" % (desc.name, nbytes, rows.dtype,
                                                                                  tuple(rows.shape)))
    lead = rows.shape[:-1]
    rows = rows.reshape(-1, nbytes)
    N = rows.shape[0]
    y = torch.zeros(N, desc.L + desc.R, dtype=torch.float32)
    k = torch.as_tensor(k_scale, dtype=torch.float32).reshape(())
    for g in desc.segments:
        if g.elem == "bf16":
            v = bf16_from_bits(_from_le(rows[:, g.at:g.at + 2 * g.n], 2))
        elif g.elem == "e4m3":
            v = e4m3_values(rows[:, g.at:g.at + g.n], fmt)
        else:
            b = rows[:, g.at:g.at + g.n // 2].to(torch.int64)
            v = e2m1_values(torch.stack((b & 0xF, b >> 4), dim=-1).flatten(-2))
        gs = None
        if g.outer == "token":
            gs = _from_u32(_from_le(rows[:, g.outer_at:g.outer_at + 4], 4))
        if g.block:
            at, nb = _scale_base(desc, g), g.n // g.block * _scale_bytes(g)
            sb = rows[:, at:at + nb]
            if g.scale == "f32":
                d = _from_u32(_from_le(sb, 4))
            elif g.scale == "ue8m0":
                d = _ue8m0_values(sb.to(torch.int64))
            else:
                d = e4m3_values(sb, fmt)
            d = d[:, _scale_slots(g)]  # block b's scale from its place
            if rs == "bf16":
                d = bf16_from_bits(bf16_bits(d))
            elif rs == "pow2_down":
                d = pow2_down(d)
            if gs is not None:
                d = d * gs
            v = (v.unflatten(-1, (g.n // g.block, g.block)) * d.unsqueeze(-1)).flatten(-2)
        elif gs is not None:
            v = v * gs
        if g.outer == "tensor" and conv != "none":
            v = v / k if conv == "mul" else v * k
        y[:, g.from_:g.from_ + g.n] = v
    return y.reshape(*lead, desc.L + desc.R)
