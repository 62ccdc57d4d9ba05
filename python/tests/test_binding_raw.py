"""Raw-pointer launches (launch_raw with ctypes buffers, host backend, no torch) against an exact scalar model of the op
(Fractions for the rope, the e4m3 encoding bit by bit), and ropekv.reference's tensor encoder against that model.

    python3 python/tests/test_binding_raw.py    # this file; python3 python/tests/test_binding.py runs them all"""
import ctypes
import math
import random
import struct
import sys
from fractions import Fraction

from _support import _torch, context, main, ref

import ropekv  # noqa: E402  (after _support, which puts python/ on sys.path)


# ---- exact scalar arithmetic for the raw-pointer test ------------------------------------------------------
def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def bf16_to_f32(b):
    return struct.unpack("<f", struct.pack("<I", (b & 0xFFFF) << 16))[0]


def f32_to_bf16(x):
    u = f32_bits(x)
    if (u & 0x7FFFFFFF) > 0x7F800000:
        return 0x7FFF
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF


def round_to_f32(fr):
    """A Fraction rounded to the nearest float32 (ties to even); normal and subnormal range, no overflow."""
    if fr == 0:
        return 0.0
    neg = fr < 0
    a = -fr if neg else fr
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    e = max(e, -126)
    q = a / Fraction(2) ** (e - 23)
    n = q.numerator // q.denominator
    rest = q - n
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and n % 2 == 1):
        n += 1
    v = float(n * Fraction(2) ** (e - 23))
    return -v if neg else v


def rope_pair_exact(x0, x1, c, s):
    """The op's pair rotation: y0 = fma(x0, c, -(x1*s)), y1 = fma(x1, c, x0*s), products rounded to f32."""
    p1 = round_to_f32(Fraction(x1) * Fraction(s))
    p0 = round_to_f32(Fraction(x0) * Fraction(s))
    y0 = round_to_f32(Fraction(x0) * Fraction(c) - Fraction(p1))
    y1 = round_to_f32(Fraction(x1) * Fraction(c) + Fraction(p0))
    return y0, y1


class Buf:
    """A ctypes array at an aligned address (the library needs 16-byte aligned rows)."""

    def __init__(self, ctype, n, align=64):
        self._raw = ctypes.create_string_buffer(ctypes.sizeof(ctype) * max(n, 1) + align)
        base = ctypes.addressof(self._raw)
        self.addr = base + (-base) % align
        self.a = (ctype * max(n, 1)).from_address(self.addr)


def _raw_case(seed=1):
    """A tiny deepseek_v3 absorbed bf16 launch: T=2, H=1, slots [-1, 1], on host buffers."""
    rng = random.Random(seed)
    T, H, L, R, W, max_pos = 2, 1, 512, 64, 576, 8

    def bf16_rand(scale=2.0):
        return f32_to_bf16(rng.uniform(-scale, scale))

    b = {
        "q_nope": Buf(ctypes.c_uint16, T * H * L), "q_pe": Buf(ctypes.c_uint16, T * H * R),
        "q_out": Buf(ctypes.c_uint16, T * H * W), "k_nope": Buf(ctypes.c_uint16, T * L),
        "k_pe": Buf(ctypes.c_uint16, T * R), "kv": Buf(ctypes.c_uint16, 2 * W),
        "positions": Buf(ctypes.c_int64, T), "slots": Buf(ctypes.c_int64, T),
        "cos_sin": Buf(ctypes.c_float, max_pos * R),
    }
    for name in ("q_nope", "q_pe", "k_nope", "k_pe"):
        for i in range(len(b[name].a)):
            b[name].a[i] = bf16_rand()
    for i in range(T * H * W):
        b["q_out"].a[i] = 0x5A5A
    for i in range(2 * W):
        b["kv"].a[i] = 0x5A5A
    for p in range(max_pos):
        for i in range(R // 2):
            ang = p * 10000.0 ** (-2.0 * i / R)
            b["cos_sin"].a[p * R + i] = f32(math.cos(ang))
            b["cos_sin"].a[p * R + R // 2 + i] = f32(math.sin(ang))
    b["positions"].a[0], b["positions"].a[1] = 3, 5
    b["slots"].a[0], b["slots"].a[1] = -1, 1
    args = {
        "tokens": T, "heads": H,
        "q_nope": b["q_nope"].addr, "q_nope_st": H * L, "q_nope_sh": L,
        "q_pe": b["q_pe"].addr, "q_pe_st": H * R, "q_pe_sh": R,
        "q_out": b["q_out"].addr, "q_out_st": H * W, "q_out_sh": W,
        "k_nope": b["k_nope"].addr, "k_nope_st": L,
        "k_pe": b["k_pe"].addr, "k_pe_st": R,
        "kv_cache": b["kv"].addr, "kv_st": W, "kv_rows": 2,
        "positions": b["positions"].addr, "slots": b["slots"].addr,
        "cos_sin": b["cos_sin"].addr, "max_pos": max_pos,
    }
    return b, args, (T, H, L, R, W)


def _rope_row_exact(b, src, off, pos, R):
    x = [bf16_to_f32(b[src].a[off + j]) for j in range(R)]
    out = [0] * R
    for i in range(R // 2):
        c = b["cos_sin"].a[pos * R + i]
        s = b["cos_sin"].a[pos * R + R // 2 + i]
        y0, y1 = rope_pair_exact(x[2 * i], x[2 * i + 1], c, s)
        out[2 * i], out[2 * i + 1] = f32_to_bf16(y0), f32_to_bf16(y1)
    return out


def f32_to_e4m3(x, fmt="ocp"):
    """gen/ref.c's rk_f32_to_fp8 on one float32 value (already scaled and clamped): OCP e4m3fn (bias 7, max 448 =
    0x7e, NaN -> 0x7f, -0 kept as 0x80) or FNUZ e4m3fnuz (bias 8, max 240 = 0x7f, NaN -> 0x80, zero always 0x00);
    round to nearest even, subnormals included, |x| past the max (inf included) -> the max."""
    bias, max_code, nan = (8, 0x7F, 0x80) if fmt == "fnuz" else (7, 0x7E, 0x7F)
    u = f32_bits(x)
    a = u & 0x7FFFFFFF
    sign = 0x80 if u >> 31 else 0
    if a > 0x7F800000:
        return nan
    ef = a >> 23
    emin = 1 - bias
    if struct.unpack("<f", struct.pack("<I", a))[0] > e4m3_to_f32(max_code, fmt):
        code = max_code
    elif ef == 0:
        code = 0
    else:
        e = max(ef - 127, emin)
        sig = (a & 0x7FFFFF) | 0x800000
        shift = (e - 3) - (ef - 150)
        if shift > 25:
            code = 0
        else:
            q = sig >> shift
            rest, half = sig & ((1 << shift) - 1), 1 << (shift - 1)
            if rest > half or (rest == half and q & 1):
                q += 1
            code = ((e - emin) << 3) + q
    if code == 0 and fmt == "fnuz":
        return 0
    return code | sign


def f32_step(x, up):
    """The float32 next to the positive float32 x, above (up) or below it."""
    return struct.unpack("<f", struct.pack("<I", f32_bits(x) + (1 if up else -1)))[0]


def e4m3_to_f32(b, fmt="ocp"):
    """The value of an e4m3 code (OCP 0x7f / 0xff and FNUZ 0x80 are NaN)."""
    bias = 8 if fmt == "fnuz" else 7
    if (b == 0x80) if fmt == "fnuz" else (b & 0x7F) == 0x7F:
        return math.nan
    e, m = (b >> 3) & 0xF, b & 7
    v = math.ldexp(m, 1 - bias - 3) if e == 0 else math.ldexp(8 + m, e - bias - 3)
    return -v if b & 0x80 else v


def q_fp8_exact(x, q_scale, scale="mul_recip", sat=448.0, fmt="ocp"):
    """One fp8 query element from the float32 x: scale (mul_recip: x * float32(1 / q_scale); div: x / q_scale;
    mul: x * q_scale; none), clamp to +-sat (NaN passes), round to e4m3. Each double result of one operation on
    float32 values rounds to the float32 one (exact products; 53 >= 2 * 24 + 2 bits for the quotient)."""
    def f32r(v):  # float32 rounding with overflow to +-inf
        if abs(v) >= 2.0 ** 128 - 2.0 ** 103:
            return math.copysign(math.inf, v)
        return f32(v)

    qs = f32(q_scale)
    if scale == "mul_recip":
        x = f32r(x * f32r(1.0 / qs))
    elif scale == "div":
        x = f32r(x / qs)
    elif scale == "mul":
        x = f32r(x * qs)
    if x > sat:
        x = sat
    elif x < -sat:
        x = -sat
    return f32_to_e4m3(x, fmt)


# ---- raw pointers ------------------------------------------------------------------------------------------
def test_raw_pointer_host():
    """deepseek_v3 absorbed bf16 through launch_raw with ctypes buffers: T=2, H=1, slots [-1, 1]."""
    k = context("host").kernel("deepseek_v3", kv="bf16", q="absorbed")
    b, args, (T, H, L, R, W) = _raw_case()
    ok, why = context("host").query("deepseek_v3", raw=args)
    assert ok, why
    k.launch_raw(args)
    exact_rope = 0
    for t in range(T):
        base = t * H * W
        assert [b["q_out"].a[base + j] for j in range(L)] == [b["q_nope"].a[t * L + j] for j in range(L)], \
            "q_out[%d, :L] is not q_nope's bits" % t
        got = [b["q_out"].a[base + L + j] for j in range(R)]
        want = _rope_row_exact(b, "q_pe", t * R, b["positions"].a[t], R)
        assert got == want, "q_out[%d, L:] differs from the exact rope" % t
        exact_rope += sum(g == w for g, w in zip(got, want))
    # slot -1: no KV write; slot 1: row 1 written, row 0 untouched
    assert all(b["kv"].a[j] == 0x5A5A for j in range(W)), "KV row 0 was written"
    row1 = [b["kv"].a[W + j] for j in range(W)]
    assert row1[:L] == [b["k_nope"].a[L + j] for j in range(L)], "KV row 1 nope part is not k_nope[1]"
    assert row1[L:] == _rope_row_exact(b, "k_pe", R, b["positions"].a[1], R), "KV row 1 rope part"
    print("raw host launch: q_out and KV bit-exact (%d rope values)" % (exact_rope + R))


def test_raw_pointer_errors_host():
    c = context("host")
    k = c.kernel("deepseek_v3", kv="bf16", q="absorbed")
    b, args, _ = _raw_case()
    bad = dict(args, q_nope=args["q_nope"] + 2)
    try:
        k.launch_raw(bad)
    except ropekv.RopekvError as e:
        assert e.status == "ROPEKV_ERR_ALIGN", e
    else:
        raise AssertionError("misaligned q_nope launched")
    bad = dict(args, q_out_st=8)  # token rows of 576 at a stride of 8: overlapping
    try:
        k.launch_raw(bad)
    except ropekv.RopekvError as e:
        assert e.status == "ROPEKV_ERR_STRIDE", e
    else:
        raise AssertionError("overlapping q_out launched")
    ok, why = c.query("deepseek_v3", raw=dict(args, q_out_st=8))
    assert not ok and "ROPEKV_ERR_STRIDE" in why
    for bad_args, exc in (({"nonsense": 1}, ValueError), ({"tokens": "2"}, TypeError)):
        try:
            k.launch_raw(bad_args)
        except exc:
            pass
        else:
            raise AssertionError("%r accepted" % bad_args)
    # untouched outputs after refused launches
    assert all(b["q_out"].a[j] == 0x5A5A for j in range(len(b["q_out"].a)))


def test_e4m3_scalar():
    """The pure-Python e4m3 encoder the fp8 tests build on: every finite code round-trips, midpoints go to the even
    neighbour, past the max saturates, NaN and -0 per format."""
    for fmt, top in (("ocp", 0x7E), ("fnuz", 0x7F)):
        for c in range(top + 1):
            for sign in (0, 0x80):
                if fmt == "fnuz" and c == 0 and sign:
                    continue
                assert f32_to_e4m3(e4m3_to_f32(c | sign, fmt), fmt) == c | sign, (fmt, hex(c | sign))
        for c in range(top):  # the midpoint between c and c + 1 rounds to the even code
            mid = (e4m3_to_f32(c, fmt) + e4m3_to_f32(c + 1, fmt)) / 2
            assert f32_to_e4m3(mid, fmt) == (c if c % 2 == 0 else c + 1), (fmt, hex(c))
            assert f32_to_e4m3(f32_step(mid, True), fmt) == c + 1, (fmt, hex(c))
            assert f32_to_e4m3(f32_step(mid, False), fmt) == c, (fmt, hex(c))
        assert f32_to_e4m3(math.inf, fmt) == top and f32_to_e4m3(-1e30, fmt) == top | 0x80
    assert f32_to_e4m3(math.nan) == 0x7F and f32_to_e4m3(-0.0) == 0x80 and f32_to_e4m3(-1e-30) == 0x80
    assert f32_to_e4m3(math.nan, "fnuz") == 0x80 and f32_to_e4m3(-0.0, "fnuz") == 0x00
    assert f32_to_e4m3(2.0 ** -10) == 0x00 and f32_to_e4m3(2.0 ** -10 * 1.0001) == 0x01  # half the OCP subnormal


def test_raw_pointer_fp8_q_host():
    """deepseek_v3 absorbed with an fp8 query output through launch_raw: q_out bytes (strides in bytes), q_scale a
    float32 in host memory; every q byte against the scalar definition (fp8(q_nope) | fp8(rope(q_pe)))."""
    c = context("host")
    k = c.kernel("deepseek_v3", kv="bf16", q="absorbed", q_dtype="fp8_e4m3")
    i = k.info
    assert (i.q_dtype, i.q_fp8_format, i.q_fp8_scale, i.q_fp8_saturate, i.q_fp8_rope_bf16_round) == (
        "fp8_e4m3", "ocp", "mul_recip", 448.0, False), i
    b, args, (T, H, L, R, W) = _raw_case(seed=2)
    q8 = Buf(ctypes.c_uint8, T * H * W)
    for j in range(T * H * W):
        q8.a[j] = 0x5A
    qs = Buf(ctypes.c_float, 1)
    for q_scale in (0.37, 1.0 / 448):
        qs.a[0] = q_scale
        fa = dict(args, q_out=q8.addr, q_out_st=H * W, q_out_sh=W, q_scale=qs.addr)
        ok, why = c.query("deepseek_v3", q_dtype="fp8_e4m3", raw=fa)
        assert ok, why
        ok, why = c.query("deepseek_v3", q_dtype="fp8_e4m3", raw=dict(fa, q_scale=None))
        assert not ok and "ROPEKV_ERR_NULL" in why, why
        k.launch_raw(fa)
        for t in range(T):
            base = t * H * W
            got = [q8.a[base + j] for j in range(W)]
            nope = [q_fp8_exact(bf16_to_f32(b["q_nope"].a[t * L + j]), q_scale) for j in range(L)]
            assert got[:L] == nope, "q_out[%d, :L] (q_scale %g)" % (t, q_scale)
            x = [bf16_to_f32(b["q_pe"].a[t * R + j]) for j in range(R)]
            pos = b["positions"].a[t]
            want = []
            for p in range(R // 2):
                cs, sn = b["cos_sin"].a[pos * R + p], b["cos_sin"].a[pos * R + R // 2 + p]
                want += [q_fp8_exact(y, q_scale) for y in rope_pair_exact(x[2 * p], x[2 * p + 1], cs, sn)]
            assert got[L:] == want, "q_out[%d, L:] (q_scale %g)" % (t, q_scale)
    # the KV row is the bf16 kernel's
    row1 = [b["kv"].a[W + j] for j in range(W)]
    assert row1[L:] == _rope_row_exact(b, "k_pe", R, b["positions"].a[1], R)
    try:
        k.launch_raw(dict(args, q_out=q8.addr, q_out_st=H * W, q_out_sh=W))  # no q_scale
    except ropekv.RopekvError as e:
        assert e.status == "ROPEKV_ERR_NULL", e
    else:
        raise AssertionError("an fp8 query output without q_scale launched")


def test_e4m3_codes_tensor():
    """ropekv.reference.e4m3_codes (the tensor encoder of the fp8 references) agrees with the scalar one on every code's value,
    the midpoints between neighbours and a point on either side of them, both signs, NaN, inf, values past the
    max, f32 subnormals; and with torch's float8_e4m3fn cast (round to nearest even) where torch has it."""
    torch = _torch()
    for fmt, top in (("ocp", 0x7E), ("fnuz", 0x7F)):
        vals = []
        for c in range(top + 1):
            v = e4m3_to_f32(c, fmt)
            vals.append(v)
            if c < top:
                mid = (v + e4m3_to_f32(c + 1, fmt)) / 2
                vals += [mid, f32_step(mid, False), f32_step(mid, True)]
        vals += [math.nan, math.inf, 1e30, 600.0, 1e-40, 2.0 ** -149, 3.0e38, 0.0]
        vals += [f32(random.Random(7).uniform(-500, 500)) for _ in range(200)]
        vals = [f32(v) for v in vals]
        vals += [-v for v in vals]
        got = ref.e4m3_codes(torch.tensor(vals, dtype=torch.float32), fmt).tolist()
        want = [f32_to_e4m3(v, fmt) for v in vals]
        bad = [(v, g, w) for v, g, w in zip(vals, got, want) if g != w]
        assert not bad, "%s: %s" % (fmt, bad[:5])
        # and the decoder: every code's value as the scalar one gives it (NaN codes NaN)
        dec = ref.e4m3_values(torch.arange(256, dtype=torch.int64).to(torch.uint8), fmt).tolist()
        for c in range(256):
            w = e4m3_to_f32(c, fmt)
            assert dec[c] == w or (math.isnan(dec[c]) and math.isnan(w)), (fmt, c, dec[c], w)
    if hasattr(torch, "float8_e4m3fn"):
        v = torch.randn(1 << 16) * 100
        v = v.clamp(-448, 448)
        assert torch.equal(ref.e4m3_codes(v), v.to(torch.float8_e4m3fn).view(torch.uint8))


if __name__ == "__main__":
    sys.exit(main(globals()))
