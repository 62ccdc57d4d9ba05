"""The numerics the references and checks share: fp8 e4m3 (OCP) codes without a float8 dtype, the distance in codes
of a format between two tensors, bit-for-bit comparisons, one step of a format, and the fp8_tile row."""
from .shapes import FLT_MIN, FP8_MAX, L, NTILES, ROPE_AT, ROW_BYTES, SCALES_AT, TILE

torch = None  # set by env.bind() in main()
rkref = None  # ropekv.reference, set with torch


# ---- fp8 e4m3 (OCP) codes without a float8 dtype (for --cpu on a torch without one) ----------------------------------
def _has_float8():
    return hasattr(torch, "float8_e4m3fn")


def to_fp8(x):
    """x (float32, clamped) cast to float8_e4m3fn; uint8 codes of the same bits where torch has no float8."""
    if _has_float8():
        return x.to(torch.float8_e4m3fn)
    return rkref.e4m3_codes(x)


def fp8_dtype():
    return torch.float8_e4m3fn if _has_float8() else torch.uint8


# ---- checks ----------------------------------------------------------------------------------------------------------
def code_steps(torch, got, want, kind):
    """Per element, how many codes of the format (bf16, or fp8 e4m3fn held as uint8 / float8) got is from want: 0 for
    equal bits or NaN against NaN, 1 << 20 for NaN against a number (int32, the shape of the inputs)."""
    if kind == "bf16":
        a, b = got.contiguous().view(torch.int16), want.contiguous().view(torch.int16)
        mag_mask, sign_shift, nan_min, bits = 0x7FFF, 15, 0x7F81, 0xFFFF
    else:
        a, b = got.contiguous().view(torch.uint8), want.contiguous().view(torch.uint8)
        mag_mask, sign_shift, nan_min, bits = 0x7F, 7, 0x7F, 0xFF
    a, b = a.to(torch.int32) & bits, b.to(torch.int32) & bits
    ma, mb = a & mag_mask, b & mag_mask
    d = (torch.where((a >> sign_shift) == 1, -ma, ma) - torch.where((b >> sign_shift) == 1, -mb, mb)).abs()
    na, nb = ma >= nan_min, mb >= nan_min
    d = torch.where(na & nb, torch.zeros_like(d), d)
    return torch.where(na ^ nb, torch.full_like(d, 1 << 20), d)


def compare_bits(torch, got, want, kind, chunk_elems=1 << 27):
    """(max code steps apart, number of bit-identical elements, elements); bf16 or fp8 e4m3fn; NaN == NaN."""
    a_all = got.reshape(-1) if got.is_contiguous() else got.contiguous().reshape(-1)
    b_all = want.reshape(-1) if want.is_contiguous() else want.contiguous().reshape(-1)
    if kind == "bf16":
        a_all, b_all = a_all.view(torch.int16), b_all.view(torch.int16)
        mag_mask, sign_shift, nan_min, bits = 0x7FFF, 15, 0x7F81, 0xFFFF
    else:
        a_all, b_all = a_all.view(torch.uint8), b_all.view(torch.uint8)
        mag_mask, sign_shift, nan_min, bits = 0x7F, 7, 0x7F, 0xFF
    n = a_all.numel()
    worst, same = 0, 0
    for s in range(0, n, chunk_elems):
        a = a_all[s:s + chunk_elems].to(torch.int32) & bits
        b = b_all[s:s + chunk_elems].to(torch.int32) & bits
        ma, mb = a & mag_mask, b & mag_mask
        oa = torch.where((a >> sign_shift) == 1, -ma, ma)
        ob = torch.where((b >> sign_shift) == 1, -mb, mb)
        na, nb = ma >= nan_min, mb >= nan_min
        d = (oa - ob).abs()
        d = torch.where(na & nb, torch.zeros_like(d), d)
        d = torch.where(na ^ nb, torch.full_like(d, 1 << 20), d)
        if d.numel():
            worst = max(worst, int(d.max()))
        same += int(((a == b) | (na & nb)).sum())
    return worst, same, n


def _ulp(torch, m, mant_bits, min_exp):
    """One step of a float format (mant_bits stored mantissa bits, min_exp its smallest normal exponent) at
    magnitudes m (float64, >= 0, normal or zero): 2^(max(floor(log2 m), min_exp) - mant_bits), built from the
    exponent bits (exact, no log2 or pow)."""
    e = ((m.view(torch.int64) >> 52) & 0x7FF) - 1023
    e = torch.clamp(e, min=min_exp) - mant_bits
    return ((e + 1023) << 52).view(torch.float64)


FP8_ULP = (3, -6)  # e4m3: 3 mantissa bits, smallest normal exponent -6
BF16_ULP = (7, -126)


def _fp8_codes(torch, v):
    """float32 values (already clamped) rounded to fp8 e4m3fn (to nearest even), as uint8 codes."""
    return to_fp8(v).view(torch.uint8)


def _decode(torch, t):
    """Values of a bf16 tensor or of fp8 e4m3fn codes held as uint8, as float64."""
    if t.dtype == torch.uint8:
        if _has_float8():
            return t.view(torch.float8_e4m3fn).float().double()
        return rkref.e4m3_values(t).double()
    return t.double()


def _scale_mag(torch, m, conv, s):
    """|scale| applied to the magnitudes m (float64): what the tolerance scales the rope terms by."""
    if conv in ("mul_recip", "div"):
        return m / s.double()
    if conv == "mul":
        return m * s.double()
    return m


def _outside(torch, got, want, tol):
    """How many elements of got are neither bit-identical to want (NaN == NaN) nor within tol of it."""
    a, b = _decode(torch, got), _decode(torch, want)
    ok = (got == want) | (torch.isnan(a) & torch.isnan(b)) | ((a - b).abs() <= tol.double())
    return int((~ok).sum())


def _bits(torch, t):
    """A bf16 or fp8 tensor's bits (int16 / uint8 view), for bit-for-bit equality (NaN payloads included)."""
    return t.view(torch.int16) if t.dtype == torch.bfloat16 else t.view(torch.uint8)


# ---- the fp8_tile row (--mode v32's writer, --mode read's fp8_tile cache) --------------------------------------------
def tile_row_bytes(torch, k_nope, rope):
    """The fp8_tile rows (uint8 [n, 656]) of latents k_nope [n, 512] and rope parts [n, 64] (bf16, already
    rotated): per tile of 128 values scale = max(amax / 448, FLT_MIN) (amax of |x| ignoring NaN, a float32
    division), the codes fp8(x / scale) (a float32 division, clamped, to nearest even), the 4 float32 scales at
    byte 512, the rope values at byte 528."""
    n = k_nope.shape[0]
    x = k_nope.float().reshape(n, NTILES, TILE)
    a = x.abs()
    amax = torch.where(torch.isnan(a), torch.zeros_like(a), a).amax(dim=-1)
    scale = (amax / torch.full_like(amax, FP8_MAX)).clamp(min=FLT_MIN)  # a tensor divisor: a true division on CUDA
    codes = _fp8_codes(torch, (x / scale[..., None]).clamp(-FP8_MAX, FP8_MAX)).reshape(n, L)
    rows = torch.empty(n, ROW_BYTES, dtype=torch.uint8, device=k_nope.device)
    rows[:, :L] = codes
    rows[:, SCALES_AT:ROPE_AT] = scale.contiguous().view(torch.uint8)
    rows[:, ROPE_AT:] = rope.contiguous().view(torch.uint8)
    return rows, scale


def fp8_values(torch, codes):
    """float32 values of e4m3fn codes (uint8): the float8 dtype's cast, or the table where torch has none."""
    if _has_float8():
        return codes.view(torch.float8_e4m3fn).float()
    return rkref.e4m3_values(codes)
