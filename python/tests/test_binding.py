"""Tests of the Python binding (python/ropekv).

    python3 python/tests/test_binding.py        # plain runner (no pytest needed)
    python3 -m pytest -s python/tests/test_binding.py

Without torch only the raw-pointer tests run (host backend, ctypes buffers); without a CUDA device the torch
tests on the host backend run and the CUDA ones skip. On a GPU machine the CUDA tests compare ropekv with a
PyTorch implementation of the op written here that does ropekv's arithmetic exactly (x1*s rounded to float32,
then x0*c - x1*s rounded once, as fmaf does; see reference()), so every bf16 and fp8 element must be
bit-identical (NaN == NaN whatever the payload)."""
import ctypes
import math
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
from fractions import Fraction

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))

import ropekv  # noqa: E402

# ---- a small shim: pytest when present, a plain runner otherwise -----------------------------------------
try:
    import pytest
except ImportError:
    pytest = None


class _Skip(Exception):
    pass


def skip(msg):
    if pytest is not None:
        pytest.skip(msg)
    raise _Skip(msg)


def parametrize(names, values):
    def deco(fn):
        fn._params = (names, list(values))
        if pytest is not None:
            return pytest.mark.parametrize(names, values)(fn)
        return fn
    return deco


ref = None  # ropekv.reference (ropekv's arithmetic in PyTorch), imported with torch


def _torch():
    global ref
    try:
        import torch
    except ImportError:
        skip("torch is not installed")
    import ropekv.reference
    ref = ropekv.reference
    return torch


def _cuda_torch():
    torch = _torch()
    if not torch.cuda.is_available():
        skip("no CUDA device")
    return torch


_CACHE_DIR = tempfile.mkdtemp(prefix="ropekv-pytest-")
_CONTEXTS = {}


def context(backend):
    """One context per backend for the whole run, with a private disk cache. The host backend compiles with
    $CXX (default c++): without one its tests skip."""
    if backend == "host":
        cxx = (os.environ.get("CXX") or "c++").split()[0]
        if shutil.which(cxx) is None:
            skip("no C++ compiler (%s) for the host backend" % cxx)
    c = _CONTEXTS.get(backend)
    if c is None or c.closed:
        c = ropekv.Context(backend, cache_dir=_CACHE_DIR)
        _CONTEXTS[backend] = c
    return c


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


# ---- tests that need neither torch nor a GPU -------------------------------------------------------------
def test_import_without_torch():
    code = ("import sys; sys.path.insert(0, %r); import ropekv; "
            "assert 'torch' not in sys.modules, 'importing ropekv imported torch'; "
            "print(ropekv.version())" % os.path.join(ROOT, "python"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ropekv.version()
    major, minor, patch = (int(p) for p in ropekv.version().split("."))
    assert ropekv.version_number() == major * 10000 + minor * 100 + patch


def test_struct_layout_matches_header():
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    header = os.path.join(ROOT, "include", "ropekv.h")
    if cc is None or not os.path.exists(header):
        skip("no C compiler or no include/ropekv.h")
    # ropekv.h includes the generated ropekv_version.h: beside the library's build (build/include)
    version_dirs = [os.path.join(os.path.dirname(ropekv.library_path()), "include"), os.path.join(ROOT, "build", "include")]
    version_dir = next((d for d in version_dirs if os.path.exists(os.path.join(d, "ropekv_version.h"))), None)
    assert version_dir, "ropekv_version.h not found in %s" % ", ".join(version_dirs)
    lines = ['#include <stdio.h>', '#include <stddef.h>', '#include "ropekv.h"', "int main(void) {"]
    structs = [ropekv.ropekv_options, ropekv.ropekv_stats, ropekv.ropekv_variant, ropekv.ropekv_args]
    for st in structs:
        lines.append('printf("%s sizeof %%zu\\n", sizeof(%s));' % (st.__name__, st.__name__))
        for f, _ in st._fields_:
            lines.append('printf("%s %s %%zu\\n", offsetof(%s, %s));' % (st.__name__, f, st.__name__, f))
    lines += ["return 0; }"]
    d = tempfile.mkdtemp(prefix="ropekv-layout-")
    try:
        src, exe = os.path.join(d, "layout.c"), os.path.join(d, "layout")
        with open(src, "w") as fh:
            fh.write("\n".join(lines) + "\n")
        r = subprocess.run([cc, "-I", os.path.dirname(header), "-I", version_dir, src, "-o", exe], capture_output=True,
                           text=True)
        assert r.returncode == 0, r.stderr
        out = subprocess.run([exe], capture_output=True, text=True, check=True).stdout.split("\n")
    finally:
        shutil.rmtree(d, ignore_errors=True)
    want = {}
    for line in out:
        if line:
            s, f, v = line.split()
            want[(s, f)] = int(v)
    for st in structs:
        assert want[(st.__name__, "sizeof")] == ctypes.sizeof(st), st.__name__
        for f, _ in st._fields_:
            assert want[(st.__name__, f)] == getattr(st, f).offset, "%s.%s" % (st.__name__, f)
    # the structs that grow are made with their size: the library reads the fields mirrored here
    for st in (ropekv.ropekv_options, ropekv.ropekv_variant, ropekv.ropekv_args):
        assert st._fields_[0][0] == "size" and st().size == ctypes.sizeof(st), st.__name__
    assert ropekv.ropekv_variant(b"deepseek_v3", 1).kv == 1  # positional fields follow the size


def test_kernel_info():
    """A kernel's parameters come from the library (ropekv_kernel_param), never from its name: every parameter the
    library lists is an attribute (five under the names KernelInfo gives them), of the type its kind says."""
    c = context("host")
    k = c.kernel("deepseek_v3", kv="fp8_e4m3", slots="int32")
    i = k.info
    assert (i.L, i.R, i.W, i.rope, i.cos_sin) == (512, 64, 576, "gptj", "f32_cat")
    assert (i.positions, i.slots, i.kv, i.fp8_format, i.scale, i.sat) == ("int64", "int32", "fp8_e4m3", "ocp",
                                                                          "mul_recip", 448.0)
    assert (i.q, i.negative_slot, i.sanitize, i.target, i.spec) == ("absorbed", "skip_kv", False, "host", "deepseek_v3")
    assert i.name == k.name and i.key == "deepseek_v3/host/fp8_e4m3/absorbed/pos=int64/slot=int32"
    b = c.kernel("deepseek_v3").info
    assert (b.kv, b.fp8_format, b.scale, b.sat, b.rope_bf16_round) == ("bf16", None, "none", 0.0, False)
    assert ropekv.STATUS["ROPEKV_ERR_ALIGN"] == 603 and "ROPEKV_OK" in ropekv.STATUS
    params = ropekv._core.kernel_params(c._lib, k._h)
    renamed = {"kv_lora_rank": "L", "rope_dim": "R", "fp8_scale": "scale", "fp8_saturate": "sat",
               "fp8_rope_bf16_round": "rope_bf16_round"}
    assert set(i.as_dict()) == {renamed.get(n, n) for n, _, _ in params} | {"W"}, i.as_dict()
    types = {0: (str, type(None)), 1: int, 2: float, 3: bool}
    for name, text, kind in params:
        value = getattr(i, renamed.get(name, name))
        assert isinstance(value, types[kind]) and not (kind == 1 and isinstance(value, bool)), (name, text, value)
    assert (i.sanitize, i.pdl, i.row_bytes, i.read_negative_slot, i.norm_eps) == (False, False, 576, None, 0.0)
    eps = c.kernel("deepseek_v3", norm="rms").info.norm_eps  # the float32 1e-6, as a Python float
    assert eps == ctypes.c_float(1e-6).value and eps != 1e-6, eps
    lib = ropekv.library()
    value, kind = ctypes.c_char_p(), ctypes.c_int()
    assert lib.ropekv_kernel_param_find(k._h, b"kv", ctypes.byref(value), ctypes.byref(kind)) == 0
    assert (value.value, kind.value) == (b"fp8_e4m3", ropekv._capi.PARAM_KINDS["text"])
    assert lib.ropekv_kernel_param_find(k._h, b"no_such_parameter", ctypes.byref(value), None) == \
        ropekv.STATUS["ROPEKV_ERR_ARG"]


def test_context_host_basics():
    c = context("host")
    assert c.backend == "host" and c.target == "host"
    ok, why = c.query("deepseek_v3", kv="fp8_e4m3", q="absorbed")
    assert ok, why
    ok, why = c.query("deepseek_v3", q="inplace")  # open: the spec leaves the q form to the caller
    assert ok, why
    ok, why = c.query("deepseek_v32", kv="fp8_e4m3")  # the model binds its row formats
    assert not ok and "ROPEKV_ERR_UNSUPPORTED" in why and "kv_dtypes {fp8_tile, bf16}" in why, why
    ok, why = c.query("no_such_model")
    assert not ok and "ROPEKV_ERR_NO_SPEC" in why
    k = c.kernel("deepseek_v3")
    assert c.kernel("deepseek_v3") is k
    assert k.info.L == 512 and k.info.R == 64 and k.info.target == "host"
    try:
        c.kernel("no_such_model")
    except ropekv.RopekvError as e:
        assert e.status == "ROPEKV_ERR_NO_SPEC" and e.code == 110 and "no_such_model" in e.message
    else:
        raise AssertionError("no error for an unknown spec")
    try:
        c.kernel("deepseek_v3", kv="fp16")
    except ValueError:
        pass
    else:
        raise AssertionError("no ValueError for kv='fp16'")
    st = c.stats()
    assert set(st) == {"memory_hits", "disk_hits", "compiles", "cache_rejects"}


def test_kernel_prepare_host():
    """Kernel.prepare builds the 64-bit entry ahead of time; a second call compiles nothing; a Kernel keeps its
    Context object alive, and close() stays idempotent."""
    c = ropekv.Context("host", disk_cache=False)
    k = c.kernel("deepseek_v3", kv="bf16", q="absorbed")
    before = c.stats()["compiles"]
    k.prepare(wide=True)
    after = c.stats()["compiles"]
    assert after == before + 1, (before, after)
    k.prepare()
    k.prepare(wide=False)
    assert c.stats()["compiles"] == after
    assert k.ctx is c
    c.close()
    c.close()
    try:
        k.prepare()
    except ValueError:
        pass
    else:
        raise AssertionError("prepare on a closed context did not raise")


def test_load_spec_text_host():
    c = ropekv.Context("host", disk_cache=False)
    try:
        text = open(os.path.join(ROOT, "specs", "deepseek_v3.lua")).read().replace('"deepseek_v3"', '"my_model"')
        c.load_spec_text("my_model.lua", text)
        assert c.query("my_model")[0]
        try:
            c.load_spec_text("bad.lua", "return {")
        except ropekv.RopekvError as e:
            assert e.status == "ROPEKV_ERR_SPEC_SYNTAX", e
        else:
            raise AssertionError("a broken spec loaded")
    finally:
        c.close()
    assert c.closed
    c.close()  # idempotent


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


# ---- PyTorch reference and inputs built the way engines lay them out --------------------------------------
SPECS = {
    "deepseek_v3": dict(L=512, R=64, rope="gptj", cos_sin="f32_cat", scale="mul_recip", sat=448.0, rr=False,
                        neg="skip_kv", sanitize=False, pos="int64", nope_head=128,
                        q_scale="mul_recip", q_sat=448.0, q_rr=False),  # fp8 query: FlashInfer / aiter style
    "kimi_k2": dict(L=512, R=64, rope="gptj", cos_sin="f32_cat", scale="div", sat=448.0, rr=False,
                    neg="skip_all", sanitize=True, pos="int32", nope_head=128,
                    q_scale="div", q_sat=448.0, q_rr=True),  # fp8 query: vLLM style
    "minicpm3_4b": dict(L=256, R=32, rope="neox", cos_sin="f32_split", scale="none", sat=448.0, rr=True,
                        neg="skip_kv", sanitize=False, pos="int64", nope_head=64,
                        q_scale="mul", q_sat=448.0, q_rr=True),
    "deepseek_v2_lite": dict(L=512, R=64, rope="gptj", cos_sin="bf16_split", scale="mul", sat=448.0, rr=False,
                             neg="skip_kv", sanitize=False, pos="int64", nope_head=128),
    # DeepSeek-V3.2: the fp8_tile row (vLLM's fp8_ds_mla): 4 tiles of 128 fp8 values, 4 float32 scales, 64 bf16
    "deepseek_v32": dict(L=512, R=64, rope="gptj", cos_sin="f32_cat", scale="none", sat=448.0, rr=False,
                         neg="skip_kv", sanitize=False, pos="int64", nope_head=128,
                         q_scale="mul_recip", q_sat=448.0, q_rr=False,
                         tile=128, tile_scale="f32", scales_at=512, rope_at=528, row_bytes=656),
}
BF16_MAX = 3.38953139e38


def make_inputs(torch, spec, q, kv, T, H, device, slots_dtype="int64", specials=False, seed=0, kv_tokens=None,
                min_slot=0, q_dtype="bf16", q_scale=None, q_specials=False):
    """Random inputs as engines pass them: q_nope/q_pe slices of one query buffer, k_nope/k_pe slices of the
    kv projection output, a paged cache [blocks, 16, W], positions (a few past max_pos, to test the clamp),
    slots (a permutation, every 5th token padding (-1), one past the cache). kv_tokens: slots for that many
    tokens (default T); the projection and positions cover max(T, kv_tokens). min_slot > 0: one slot points
    at the reserved slot 0. An fp8 cache is float8_e4m3fn where torch has it, else uint8.
    q_dtype "fp8_e4m3": q_out is uint8 (0x5A where nothing is written; zero_copy: [..., :L] random fp8 codes, as
    the BMM leaves them), q_scale a float32 tensor of the value q_scale. q_specials: NaN, +-inf and values far
    past the fp8 range in the query (it is not sanitized)."""
    s = SPECS[spec]
    L, R, W = s["L"], s["R"], s["L"] + s["R"]
    g = torch.Generator().manual_seed(seed)
    bf = torch.bfloat16

    def randn(*shape):
        return torch.randn(*shape, generator=g).to(bf)

    x = {}
    sentinel = -777.0

    def dev(t):  # bases go to the device first, views are taken there (so they stay views)
        return t.to(device)

    fp8_q = q_dtype == "fp8_e4m3"

    def query(*shape):
        v = randn(*shape)
        if q_specials and v.numel() >= 8:
            f = v.view(-1)
            n = f.numel()
            f[0], f[n // 7], f[n // 5], f[n // 3] = float("nan"), float("inf"), float("-inf"), 3.0e38
            f[n // 2], f[n - 1], f[n - 2] = -5000.0, 600.0, -1.0e-6
        return v

    def q_out_buf():
        if fp8_q:
            return torch.full((T, H, W), 0x5A, dtype=torch.uint8)
        return torch.full((T, H, W), sentinel, dtype=bf)

    if q == "absorbed":
        qb = dev(query(T, H, W))
        x["q_nope"], x["q_pe"] = qb[..., :L], qb[..., L:]
        x["q_out"] = dev(q_out_buf())
    elif q == "zero_copy":
        qp = dev(query(T, H, s["nope_head"] + R))
        x["q_pe"] = qp[..., s["nope_head"]:]
        qo = q_out_buf()
        if fp8_q:  # the absorption GEMM's epilogue quantized q_nope with the same q_scale
            qo[..., :L] = ref.e4m3_codes((randn(T, H, L).float() * 4).clamp(-448, 448))
        else:
            qo[..., :L] = randn(T, H, L)  # written by the absorption GEMM
        x["q_out"] = dev(qo)
    elif q == "inplace":
        qp = dev(query(T, H, s["nope_head"] + R))
        x["q_pe"] = qp[..., s["nope_head"]:]
    K = T if kv_tokens is None else kv_tokens
    P = max(T, K)
    proj = randn(P, W)
    if specials and P >= 5:
        proj[1, 3] = float("nan")
        proj[2, 7] = float("inf")
        proj[4, L + 2] = float("-inf")
        proj[1, L + 5] = float("nan")
    proj = dev(proj)
    x["k_nope"], x["k_pe"] = proj[:, :L], proj[:, L:]
    blocks = (2 * T + 15) // 16 + 1
    rows = blocks * 16
    if kv == "bf16":
        cache = torch.full((blocks, 16, W), sentinel, dtype=bf)
    elif kv == "fp8_tile":
        cache = torch.full((blocks, 16, s["row_bytes"]), 0x5A, dtype=torch.uint8)
    else:
        cache = torch.full((blocks, 16, W), 0x5A, dtype=torch.uint8)
        if hasattr(torch, "float8_e4m3fn"):
            cache = cache.view(torch.float8_e4m3fn)
    x["kv_cache"] = cache
    max_pos = 512
    pos = torch.randint(0, max_pos, (P,), generator=g)
    if P >= 3:
        pos[2] = max_pos + 3
    slots = torch.randperm(rows - 1, generator=g)[:K] + 1
    slots[::5] = -1
    if K >= 4:
        slots[3] = rows + 5  # past the cache: no KV write, q rows still written
    if K >= 2:
        slots[1] = 0  # the reserved row when min_slot > 0
    x["positions"] = pos.to(torch.int64 if s["pos"] == "int64" else torch.int32)
    x["slots"] = slots.to(torch.int64 if slots_dtype == "int64" else torch.int32)
    half = R // 2
    inv = 10000.0 ** (-torch.arange(half, dtype=torch.float64) * 2 / R)
    ang = torch.arange(max_pos, dtype=torch.float64)[:, None] * inv[None, :]
    mscale = 1.0 + 0.1 * torch.rand(1, generator=g, dtype=torch.float64)  # folded in like YaRN's mscale
    c, sn = (ang.cos() * mscale).float(), (ang.sin() * mscale).float()
    if s["cos_sin"] == "f32_cat":
        x["cos_sin"] = torch.cat([c, sn], dim=1).contiguous()
    else:
        x["cos_sin"], x["sin"] = c.contiguous(), sn.contiguous()
        if s["cos_sin"] == "bf16_split":
            x["cos_sin"], x["sin"] = x["cos_sin"].to(bf), x["sin"].to(bf)
    if kv == "fp8_e4m3" and s["scale"] != "none":
        x["k_scale"] = torch.tensor([0.75], dtype=torch.float32)
    if fp8_q and q != "none" and q_scale is not None:
        x["q_scale"] = torch.tensor([q_scale], dtype=torch.float32)
    for name in ("kv_cache", "positions", "slots", "cos_sin", "sin", "k_scale", "q_scale"):
        if name in x:
            x[name] = dev(x[name])
    return x


def q_fp8_reference(torch, spec, v, q_scale):
    """The fp8 query element of the float32 values v (the q_nope values, or the rope floats already rounded to
    bf16 when the spec's q_fp8 policy says so): scale with q_scale by the spec's convention (mul_recip: a float32
    reciprocal first), clamp to +-q_sat (NaN passes), round to OCP e4m3. No sanitizing."""
    s = SPECS[spec]
    if s["q_scale"] == "mul_recip":
        v = v * (1.0 / q_scale)
    elif s["q_scale"] == "div":
        v = v / q_scale
    elif s["q_scale"] == "mul":
        v = v * q_scale
    return ref.e4m3_codes(v.clamp(-s["q_sat"], s["q_sat"]))


FLT_MIN = 2.0 ** -126


def tile_scales(torch, x, sat, pow2=False):
    """The float32 scale of each tile (the last dimension of x, float32): max(amax / sat, FLT_MIN), amax the
    largest |x| ignoring NaN (an inf amax gives an inf scale), the quotient a float32 division; pow2 rounds a
    finite scale up to a power of two."""
    a = x.abs()
    amax = torch.where(torch.isnan(a), torch.zeros_like(a), a).amax(dim=-1)
    # a tensor divisor: torch divides by a Python number on CUDA as a multiply by its reciprocal
    scale = torch.clamp(amax / torch.full_like(amax, sat), min=FLT_MIN)
    if pow2:
        m, e = torch.frexp(scale)  # scale = m * 2^e, m in [0.5, 1): a power of two when m == 0.5
        up = torch.ldexp(torch.ones_like(scale), e.to(torch.int64))
        scale = torch.where((m == 0.5) | ~torch.isfinite(scale), scale, up)
    return scale


def tile_rows(torch, spec, k_nope, rope_bf16):
    """The fp8_tile rows (uint8 [K, row_bytes]) of the bf16 latents k_nope [K, L] and rope parts rope_bf16 [K, R]
    (already rotated, rounded to bf16): each tile of `tile` latent values x becomes fp8(x / scale) (a float32
    division, clamped to +-sat, NaN kept, OCP e4m3 to nearest even), the float32 scales at scales_at and the
    bf16 rope values at rope_at, little-endian as the device writes them."""
    s = SPECS[spec]
    L, tile, sat = s["L"], s["tile"], s["sat"]
    K = k_nope.shape[0]
    x = k_nope.float().reshape(K, L // tile, tile)
    scale = tile_scales(torch, x, sat, s["tile_scale"] == "pow2")
    v = (x / scale[..., None]).clamp(-sat, sat)
    out = torch.zeros(K, s["row_bytes"], dtype=torch.uint8, device=k_nope.device)
    out[:, :L] = ref.e4m3_codes(v).reshape(K, L)
    out[:, s["scales_at"]:s["scales_at"] + 4 * (L // tile)] = scale.contiguous().view(torch.uint8)
    out[:, s["rope_at"]:s["rope_at"] + 2 * s["R"]] = rope_bf16.contiguous().view(torch.uint8)
    return out


def read_rows(torch, spec, kv, rows, k_scale=None):
    """What the read-back op makes of cache rows (flat [n, W] bf16, [n, W] fp8 bytes or [n, row_bytes] fp8_tile
    bytes): bf16 [n, W]. bf16 rows as they are; fp8 e4m3: value * k_scale (mul_recip, div) or value / k_scale
    (mul) in float32, rounded to bf16; fp8_tile: value * its tile's float32 scale, rounded to bf16, the rope part's
    bf16 values as they are."""
    s = SPECS[spec]
    L, R = s["L"], s["R"]
    if kv == "bf16":
        return rows.clone()
    n = rows.shape[0]
    if kv == "fp8_e4m3":
        v = ref.e4m3_values(rows.view(torch.uint8))
        if s["scale"] in ("mul_recip", "div"):
            v = v * k_scale
        elif s["scale"] == "mul":
            v = v / k_scale
        return v.to(torch.bfloat16)
    b = rows.view(torch.uint8)
    scale = b[:, s["scales_at"]:s["scales_at"] + 4 * (L // s["tile"])].contiguous().view(torch.float32)
    v = ref.e4m3_values(b[:, :L]).reshape(n, L // s["tile"], s["tile"]) * scale[..., None]
    rope = b[:, s["rope_at"]:s["rope_at"] + 2 * R].contiguous().view(torch.bfloat16)
    return torch.cat([v.reshape(n, L).to(torch.bfloat16), rope], dim=-1)


def read_reference(torch, spec, kv, flat, slots, k_scale=None, min_slot=0, prior=None, negative="zero"):
    """The read-back op on a flat view of the cache rows (flat [rows, row width]): out [T, W] bf16 with the rows of
    slots, dequantized (read_rows). A row whose slot is below min_slot or past the rows is zero (read
    negative_slot "zero") or keeps prior's row ("skip"; prior: out's contents before the launch)."""
    s = SPECS[spec]
    T = slots.shape[0]
    sl = slots.long()
    valid = (sl >= min_slot) & (sl < flat.shape[0])
    want = torch.zeros(T, s["L"] + s["R"], dtype=torch.bfloat16) if prior is None else prior.clone()
    if negative == "zero":
        want[~valid] = 0
    idx = sl[valid]
    if idx.numel():
        want[valid] = read_rows(torch, spec, kv, flat[idx], k_scale)
    return want


def reference(torch, spec, q, kv, x, min_slot=0, q_dtype="bf16"):
    """The op in PyTorch, doing ropekv's arithmetic (docs/numerics.md, gen/ref.c): the rope as ropekv.reference.rope (one
    rounded product, one fused multiply-add, emulated exactly), bf16 by round to nearest even (torch's
    .to(bfloat16)), fp8 by scale (mul_recip: x * float32(1/k); div: x / k; mul: x * k; none), sanitize
    (NaN -> 0, +-inf -> +-bound), clamp to the bound (NaN passes through), then e4m3_codes (OCP, round to
    nearest even), with the rope float rounded to bf16 first when the spec sets rope_bf16_round.
    Query rows for the T tokens of the q tensors, KV rows for the K tokens of slots (a slot below min_slot is
    not written; with skip_all a negative slot skips the token's query rows, a token past K has none).
    q_dtype "fp8_e4m3": the query output as q_fp8_reference (OCP codes; the rope float rounded to bf16 first when
    the spec's q policy sets it): q_out [T,H,W] uint8 (absorbed: fp8(q_nope) | fp8(rope); zero_copy: [..., L:]
    only), inplace: q_pe's bytes with the R codes over the first R bytes of each row ("q_pe" is then uint8
    [T,H,2R]).
    Returns the expected q_out, q_pe and kv_cache (clones of the inputs with the op applied)."""
    s = SPECS[spec]
    L, R = s["L"], s["R"]
    half = R // 2
    max_pos = x["cos_sin"].shape[0]
    slot = x["slots"].long()
    K = slot.shape[0]
    qref = x.get("q_pe", x.get("q_out"))
    T = qref.shape[0] if qref is not None else K
    pos = x["positions"].long().clamp(0, max_pos - 1)
    if s["cos_sin"] == "f32_cat":
        c_all, sn_all = x["cos_sin"][pos, :half], x["cos_sin"][pos, half:]
    else:
        c_all, sn_all = x["cos_sin"][pos].float(), x["sin"][pos].float()
    c, sn = c_all[:T], sn_all[:T]
    write_q = torch.ones(T, dtype=torch.bool, device=slot.device)
    if s["neg"] == "skip_all":
        n = min(T, K)
        write_q[:n] = slot[:n] >= 0
    out = {}
    if q_dtype == "fp8_e4m3" and q != "none":
        qr = ref.rope(x["q_pe"], c[:, None, :], sn[:, None, :], s["rope"])
        if s["q_rr"]:
            qr = qr.to(torch.bfloat16).float()
        qs = x.get("q_scale")
        if qs is None:  # no query rows (T = 0): nothing is quantized
            qs = torch.ones(1, device=qr.device)
        qr8 = q_fp8_reference(torch, spec, qr, qs)
        if q == "inplace":
            qp = x["q_pe"].view(torch.uint8).clone()
            qp[write_q, :, :R] = qr8[write_q]
            out["q_pe"] = qp
        else:
            qo = x["q_out"].view(torch.uint8).clone()
            if q == "absorbed":
                qo[write_q, :, :L] = q_fp8_reference(torch, spec, x["q_nope"].float(), qs)[write_q]
            qo[write_q, :, L:] = qr8[write_q]
            out["q_out"] = qo
    elif q in ("absorbed", "zero_copy"):
        qo = x["q_out"].clone()
        qr = ref.rope(x["q_pe"], c[:, None, :], sn[:, None, :], s["rope"]).to(torch.bfloat16)
        if q == "absorbed":
            qo[write_q, :, :L] = x["q_nope"][write_q]
        qo[write_q, :, L:] = qr[write_q]
        out["q_out"] = qo
    if q == "inplace" and "q_pe" not in out:  # bf16 (the fp8 query output is made above)
        qp = x["q_pe"].clone()
        qr = ref.rope(x["q_pe"], c[:, None, :], sn[:, None, :], s["rope"]).to(torch.bfloat16)
        qp[write_q] = qr[write_q]
        out["q_pe"] = qp
    cache = x["kv_cache"].clone()
    flat = cache.view(-1, cache.shape[-1])
    rows = flat.shape[0]
    valid = (slot >= min_slot) & (slot < rows)
    k_nope, k_pe = x["k_nope"][:K], x["k_pe"][:K]
    kr = ref.rope(k_pe, c_all[:K], sn_all[:K], s["rope"])
    if kv == "bf16":
        if s["sanitize"]:
            row = torch.cat([k_nope.float(), kr], dim=-1)
            row = torch.nan_to_num(row, nan=0.0, posinf=BF16_MAX, neginf=-BF16_MAX).to(torch.bfloat16)
        else:
            row = torch.cat([k_nope, kr.to(torch.bfloat16)], dim=-1)
        flat[slot[valid]] = row[valid]
    elif kv == "fp8_tile":
        flat[slot[valid]] = tile_rows(torch, spec, k_nope, kr.to(torch.bfloat16))[valid]
    else:
        if s["rr"]:
            kr = kr.to(torch.bfloat16).float()
        v = torch.cat([k_nope.float(), kr], dim=-1)
        ks = x.get("k_scale")
        if s["scale"] == "mul_recip":
            v = v * (1.0 / ks)
        elif s["scale"] == "div":
            v = v / ks
        elif s["scale"] == "mul":
            v = v * ks
        sat = s["sat"]
        if s["sanitize"]:
            v = torch.nan_to_num(v, nan=0.0, posinf=sat, neginf=-sat)
        v = v.clamp(-sat, sat)
        flat8 = cache.view(torch.uint8).view(-1, cache.shape[-1])
        flat8[slot[valid]] = ref.e4m3_codes(v)[valid]
    out["kv_cache"] = cache
    return out


def compare_bits(torch, got, want, kind):
    """(max code steps apart, fraction bit-identical, elements, elements not bit-identical) of two bf16 or fp8
    (OCP) tensors; NaN == NaN whatever the payload (ropekv writes bf16 NaN as 0x7fff, torch as 0x7fc0)."""
    if kind == "bf16":
        a = got.contiguous().view(torch.int16).to(torch.int32) & 0xFFFF
        b = want.contiguous().view(torch.int16).to(torch.int32) & 0xFFFF
        mag_mask, sign_shift, nan_min = 0x7FFF, 15, 0x7F81
    else:
        a = got.contiguous().view(torch.uint8).to(torch.int32)
        b = want.contiguous().view(torch.uint8).to(torch.int32)
        mag_mask, sign_shift, nan_min = 0x7F, 7, 0x7F

    def ordered(v):
        mag = v & mag_mask
        return torch.where((v >> sign_shift) == 1, -mag, mag), mag >= nan_min

    oa, na = ordered(a)
    ob, nb = ordered(b)
    both_nan = na & nb
    one_nan = na ^ nb
    diff = (oa - ob).abs()
    diff = torch.where(both_nan, torch.zeros_like(diff), diff)
    diff = torch.where(one_nan, torch.full_like(diff, 1 << 20), diff)
    equal = (a == b) | both_nan
    n = a.numel()
    same = int(equal.sum()) if n else 0
    return (int(diff.max()) if n else 0), (same / n if n else 1.0), n, n - same


def _first_differences(torch, got, want, kind, limit=4):
    """A few differing elements (index: got bits vs expected bits), for a failure message."""
    width = torch.int16 if kind == "bf16" else torch.uint8
    mask = 0xFFFF if kind == "bf16" else 0xFF
    a = got.contiguous().view(width).to(torch.int32).reshape(-1) & mask
    b = want.contiguous().view(width).to(torch.int32).reshape(-1) & mask
    idx = (a != b).nonzero().reshape(-1)[:limit].tolist()
    shape = tuple(got.shape)
    out = []
    for i in idx:
        pos, rest = [], i
        for d in reversed(shape):
            pos.append(rest % d)
            rest //= d
        out.append("%s: 0x%0*x vs 0x%0*x" % (tuple(reversed(pos)), 4 if kind == "bf16" else 2, int(a[i]),
                                             4 if kind == "bf16" else 2, int(b[i])))
    return "; ".join(out)


def run_and_check(torch, ctx, spec, q, kv, T, H, device, slots_dtype="int64", specials=False, seed=0, kv_tokens=None,
                  min_slot=0, q_dtype="bf16", q_scale=None, q_specials=False, q_out_dtype=None, via="kernel"):
    """One launch of spec's (q, kv, q_dtype) kernel on make_inputs' tensors, every output compared bit for bit
    with reference(). q_scale: the fp8 query's scale value; q_out_dtype: the fp8 q_out passed as this dtype (a
    view of the uint8 buffer, e.g. torch.float8_e4m3fn). via: "kernel" (Kernel.__call__) or "op" (ropekv.ops.write,
    the torch.ops.ropekv operator)."""
    k = ctx.kernel(spec, kv=kv, q=q, positions=SPECS[spec]["pos"], slots=slots_dtype, q_dtype=q_dtype)
    s = SPECS[spec]
    assert (k.info.L, k.info.R, k.info.rope, k.info.cos_sin, k.info.q) == (s["L"], s["R"], s["rope"], s["cos_sin"], q)
    assert k.info.negative_slot == s["neg"] and k.info.sanitize == s["sanitize"]
    if kv != "bf16":
        assert k.info.fp8_format == "ocp", "these tests compare with OCP e4m3 (e4m3_codes)"
        assert (k.info.scale, k.info.sat, k.info.rope_bf16_round) == (s["scale"], s["sat"], s["rr"])
    fp8_q = q_dtype == "fp8_e4m3" and q != "none"
    if fp8_q:
        i = k.info
        assert i.q_dtype == "fp8_e4m3" and i.q_fp8_format == "ocp", "these tests compare with OCP e4m3 (e4m3_codes)"
        assert (i.q_fp8_scale, i.q_fp8_saturate, i.q_fp8_rope_bf16_round) == (s["q_scale"], s["q_sat"], s["q_rr"]), i
    else:
        assert k.info.q_dtype == "bf16"
    x = make_inputs(torch, spec, q, kv, T, H, device, slots_dtype, specials, seed, kv_tokens, min_slot, q_dtype,
                    q_scale, q_specials)
    want = reference(torch, spec, q, kv, x, min_slot, q_dtype if fp8_q else "bf16")
    call = dict(x)
    if q_out_dtype is not None and "q_out" in x:
        call["q_out"] = x["q_out"].view(q_out_dtype)
    if via == "op":
        import ropekv.ops
        ropekv.ops.write(spec, kv=kv, q_form=q, q_dtype=q_dtype if fp8_q else "bf16", **call, min_slot=min_slot)
    else:
        k(**call, min_slot=min_slot)
    if device != "cpu":
        torch.cuda.synchronize()
    report, failures = [], []
    total_n = total_eq = 0
    for name, exp in want.items():
        kind = "bf16" if exp.dtype == torch.bfloat16 else "fp8"
        got = x[name]
        if name == "q_pe" and fp8_q:  # fp8 codes over the first R bytes of each bf16 row, the rest untouched
            R = s["R"]
            got, exp = got.view(torch.uint8)[..., :R], exp[..., :R]
            tail_got, tail_want = x[name].view(torch.uint8)[..., R:], want[name][..., R:]
            if not torch.equal(tail_got, tail_want):
                failures.append("q_pe: bytes past the first R of a row were written")
        steps, frac, n, bad = compare_bits(torch, got, exp, kind)
        total_n += n
        total_eq += n - bad
        report.append("%s: max %d step(s), %.4f%% bit-identical" % (name, steps, 100 * frac))
        if name == "kv_cache" or name == "q_out":
            L = s["L"]
            part = x[name][..., L:] if name == "q_out" else x[name].view(-1, x[name].shape[-1])[:, L:]
            wpart = exp[..., L:] if name == "q_out" else exp.view(-1, exp.shape[-1])[:, L:]
            report.append("(rope part %.4f%%)" % (100 * compare_bits(torch, part, wpart, kind)[1]))
        if bad:
            failures.append("%s: %d of %d elements not bit-identical (max %d %s steps; %s)" % (
                name, bad, n, steps, kind, _first_differences(torch, got, exp, kind)))
    frac = total_eq / max(total_n, 1)
    qd = " q_dtype=%s q_scale=%s" % (q_dtype, "%.6g" % q_scale if q_scale is not None else "none") if fp8_q else ""
    print("%s q=%s kv=%s%s T=%d H=%d %s: %s; all %.4f%% bit-identical" % (spec, q, kv, qd, T, H, device,
                                                                         " ".join(report), 100 * frac))
    # The reference does ropekv's arithmetic exactly (one rounded product, one exactly emulated fma), so any
    # difference, even one step on one element, is a real one.
    assert not failures, "%s %s %s %s: %s" % (spec, q, kv, device, "; ".join(failures))
    return k, x


# ---- torch on the host backend (CPU tensors) ---------------------------------------------------------------
HOST_CASES = [("deepseek_v3", "absorbed", "bf16"), ("deepseek_v3", "absorbed", "fp8_e4m3"),
              ("deepseek_v3", "zero_copy", "fp8_e4m3"), ("kimi_k2", "inplace", "bf16"),
              ("kimi_k2", "inplace", "fp8_e4m3"), ("minicpm3_4b", "zero_copy", "bf16"),
              ("minicpm3_4b", "inplace", "fp8_e4m3")]


@parametrize("spec,q,kv", HOST_CASES)
def test_host_torch(spec, q, kv):
    torch = _torch()
    run_and_check(torch, context("host"), spec, q, kv, T=11, H=3, device="cpu", specials=spec == "kimi_k2")


PADDING_CASES = [("deepseek_v3", "absorbed", "fp8_e4m3", 11, 5, 1), ("deepseek_v3", "zero_copy", "bf16", 3, 11, 2),
                 ("kimi_k2", "inplace", "fp8_e4m3", 11, 6, 1), ("kimi_k2", "absorbed", "bf16", 4, 9, 0),
                 ("deepseek_v3", "absorbed", "bf16", 0, 5, 1), ("kimi_k2", "absorbed", "fp8_e4m3", 6, 0, 0),
                 ("deepseek_v3", "none", "fp8_e4m3", 0, 7, 1)]


@parametrize("spec,q,kv,T,K,min_slot", PADDING_CASES)
def test_host_torch_padding(spec, q, kv, T, K, min_slot):
    """Query rows for T tokens, KV rows for K (a short slot list, or padded queries), reserved slots kept."""
    torch = _torch()
    run_and_check(torch, context("host"), spec, q, kv, T=T, H=3, device="cpu", specials=True, kv_tokens=K,
                  min_slot=min_slot)


@parametrize("spec,q,kv,T,K,min_slot", PADDING_CASES + [("deepseek_v3", "absorbed", "bf16", 1000, 700, 1)])
def test_cuda_padding(spec, q, kv, T, K, min_slot):
    torch = _cuda_torch()
    run_and_check(torch, context("cuda"), spec, q, kv, T=T, H=16, device="cuda", specials=True, kv_tokens=K,
                  min_slot=min_slot)


def test_host_torch_errors():
    torch = _torch()
    _check_errors(torch, context("host"), "cpu")


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


Q_SCALES = (0.37, 1.0, 1.0 / 448)

# (spec, q form, kv dtype, q_scale): every q form each spec lists, both caches, the three scales, the three
# conventions of the specs' query fp8 policies (mul_recip; div and mul with the rope rounded to bf16 first)
FP8Q_HOST_CASES = [("deepseek_v3", "absorbed", "bf16", 0.37), ("deepseek_v3", "absorbed", "fp8_e4m3", 1.0),
                   ("deepseek_v3", "absorbed", "bf16", 1.0 / 448), ("deepseek_v3", "zero_copy", "fp8_e4m3", 0.37),
                   ("deepseek_v3", "zero_copy", "bf16", 1.0 / 448), ("deepseek_v3", "zero_copy", "bf16", 1.0),
                   ("deepseek_v3", "none", "fp8_e4m3", 0.37), ("kimi_k2", "absorbed", "fp8_e4m3", 0.37),
                   ("kimi_k2", "absorbed", "bf16", 1.0 / 448), ("kimi_k2", "inplace", "bf16", 0.37),
                   ("kimi_k2", "inplace", "fp8_e4m3", 1.0 / 448), ("kimi_k2", "inplace", "bf16", 1.0),
                   ("minicpm3_4b", "absorbed", "fp8_e4m3", 0.37), ("minicpm3_4b", "zero_copy", "bf16", 1.0 / 448),
                   ("minicpm3_4b", "inplace", "fp8_e4m3", 1.0)]


@parametrize("spec,q,kv,q_scale", FP8Q_HOST_CASES)
def test_host_torch_fp8_q(spec, q, kv, q_scale):
    """The fp8 query output on the host backend: every byte against reference() (q_fp8_reference: scale by the
    spec's convention, clamp, e4m3), with NaN, +-inf and out-of-range values in the query."""
    torch = _torch()
    run_and_check(torch, context("host"), spec, q, kv, T=11, H=3, device="cpu", specials=True, seed=21,
                  q_dtype="fp8_e4m3", q_scale=q_scale, q_specials=True)


FP8Q_PADDING_CASES = [("deepseek_v3", "absorbed", "fp8_e4m3", 11, 5, 1), ("deepseek_v3", "zero_copy", "bf16", 3, 11, 2),
                      ("kimi_k2", "inplace", "fp8_e4m3", 11, 6, 1), ("kimi_k2", "absorbed", "bf16", 6, 0, 0),
                      ("deepseek_v3", "absorbed", "bf16", 0, 5, 1)]


@parametrize("spec,q,kv,T,K,min_slot", FP8Q_PADDING_CASES)
def test_host_torch_fp8_q_padding(spec, q, kv, T, K, min_slot):
    """fp8 query rows for T tokens, KV rows for K; with T = 0 no q_scale is needed (none is passed)."""
    torch = _torch()
    run_and_check(torch, context("host"), spec, q, kv, T=T, H=3, device="cpu", specials=True, kv_tokens=K,
                  min_slot=min_slot, q_dtype="fp8_e4m3", q_scale=None if T == 0 else 0.37)


def test_host_torch_fp8_q_float8_dtype():
    """q_out passed as torch.float8_e4m3fn (the dtype matching the host's OCP bytes) instead of uint8."""
    torch = _torch()
    if not hasattr(torch, "float8_e4m3fn"):
        skip("this torch has no float8_e4m3fn (uint8 q_out is tested elsewhere)")
    for q in ("absorbed", "zero_copy"):
        run_and_check(torch, context("host"), "deepseek_v3", q, "bf16", T=5, H=2, device="cpu", q_dtype="fp8_e4m3",
                      q_scale=0.37, q_out_dtype=torch.float8_e4m3fn)


def test_host_fp8_q_kernel_info():
    """The fp8 query policy as the library describes it, the q_dtype spellings and what q form none makes."""
    c = context("host")
    k = c.kernel("deepseek_v3", kv="fp8_e4m3", q="absorbed", q_dtype="fp8_e4m3")
    i = k.info
    assert (i.q_dtype, i.q_fp8_format, i.q_fp8_scale, i.q_fp8_saturate, i.q_fp8_rope_bf16_round) == (
        "fp8_e4m3", "ocp", "mul_recip", 448.0, False), i
    assert (i.kv, i.scale, i.sat) == ("fp8_e4m3", "mul_recip", 448.0)
    assert k.q_dtype == "fp8_e4m3" and "/" in i.key
    kk = c.kernel("kimi_k2", kv="bf16", q="inplace", positions="int32", q_dtype="fp8_e4m3").info
    assert (kk.q_dtype, kk.q_fp8_format, kk.q_fp8_scale, kk.q_fp8_saturate, kk.q_fp8_rope_bf16_round) == (
        "fp8_e4m3", "ocp", "div", 448.0, True), kk
    b = c.kernel("deepseek_v3", kv="fp8_e4m3", q="absorbed").info
    assert (b.q_dtype, b.q_fp8_format, b.q_fp8_scale, b.q_fp8_saturate, b.q_fp8_rope_bf16_round) == (
        "bf16", None, "none", 0.0, False), b
    assert b.name != i.name and b.key != i.key
    assert c.kernel("deepseek_v3", kv="fp8_e4m3", q="absorbed", q_dtype=1).name == i.name
    # q form none writes no query: the fp8 choice makes the bf16 kernel
    n8 = c.kernel("deepseek_v3", kv="fp8_e4m3", q="none", q_dtype="fp8_e4m3")
    n = c.kernel("deepseek_v3", kv="fp8_e4m3", q="none")
    assert n8.name == n.name and n8.info.q_dtype == "bf16"
    ok, why = c.query("deepseek_v3", kv="bf16", q="zero_copy", q_dtype="fp8_e4m3")
    assert ok, why
    ok, why = c.query("kimi_k2", kv="bf16", q="inplace", q_dtype="fp8_e4m3")
    assert ok, why
    for bad in ("fp8", "float8_e4m3fn", 2, None, True):
        _expect(ValueError, lambda: c.kernel("deepseek_v3", q_dtype=bad))
        _expect(ValueError, lambda: c.query("deepseek_v3", q_dtype=bad))
    try:
        import torch
    except ImportError:
        return
    assert c.kernel("deepseek_v3", q_dtype=torch.bfloat16).name == c.kernel("deepseek_v3").name
    _expect(ValueError, lambda: c.kernel("deepseek_v3", q_dtype=torch.float16))
    if hasattr(torch, "float8_e4m3fn"):
        assert c.kernel("deepseek_v3", kv="fp8_e4m3", q_dtype=torch.float8_e4m3fn).name == i.name


def _check_fp8_q_errors(torch, ctx, device):
    """Argument errors of fp8 query launches: q_out's dtype, q_scale missing / of another dtype / size."""
    T, H = 8, 2
    k = ctx.kernel("deepseek_v3", kv="bf16", q="absorbed", q_dtype="fp8_e4m3")
    x = make_inputs(torch, "deepseek_v3", "absorbed", "bf16", T, H, device, seed=23, q_dtype="fp8_e4m3",
                    q_scale=0.37)
    k(**x)
    e = _expect(TypeError, lambda: k(**dict(x, q_out=torch.zeros(T, H, 576, dtype=torch.bfloat16, device=device))))
    assert "q_out" in str(e) and "uint8" in str(e)
    _expect(TypeError, lambda: k(**dict(x, q_out=x["q_out"].view(torch.int8))))
    if hasattr(torch, "float8_e4m3fnuz"):  # the other format's dtype
        _expect(TypeError, lambda: k(**dict(x, q_out=x["q_out"].view(torch.float8_e4m3fnuz))))
    # q_scale=None means 1.0 (the identity under every convention)
    runs = []
    for scale in (None, torch.ones(1, dtype=torch.float32, device=device)):
        runs.append(dict(x, q_out=x["q_out"].clone(), kv_cache=x["kv_cache"].clone(), q_scale=scale))
        k(**runs[-1])
    assert torch.equal(runs[0]["q_out"].view(torch.uint8), runs[1]["q_out"].view(torch.uint8))
    _expect(TypeError, lambda: k(**dict(x, q_scale=x["q_scale"].double())))
    _expect(ValueError, lambda: k(**dict(x, q_scale=torch.ones(2, device=device))))
    _expect(ValueError, lambda: k(**dict(x, q_out=x["q_out"][:, :, :575])))
    ok, why = ctx.query("deepseek_v3", kv="bf16", q="absorbed", q_dtype="fp8_e4m3", **x)
    assert ok, why
    # a bf16 query kernel takes no fp8 q_out, and ignores a q_scale
    kb = ctx.kernel("deepseek_v3", kv="bf16", q="absorbed")
    _expect(TypeError, lambda: kb(**x))
    xb = make_inputs(torch, "deepseek_v3", "absorbed", "bf16", T, H, device, seed=23)
    kb(**dict(xb, q_scale=x["q_scale"]))
    # k as [T, 1, D] (one KV head, as SGLang, aiter and tokenspeed pass it): the same launch as [T, D]
    runs = []
    for unit in (False, True):
        r = dict(xb, kv_cache=xb["kv_cache"].clone(), q_out=xb["q_out"].clone())
        if unit:
            r.update(k_nope=xb["k_nope"].unsqueeze(1), k_pe=xb["k_pe"].unsqueeze(1))
        kb(**r)
        runs.append(r)
    assert torch.equal(runs[0]["kv_cache"], runs[1]["kv_cache"]) and torch.equal(runs[0]["q_out"], runs[1]["q_out"])
    # zero_copy: q_out[..., :L] may be passed as q_nope (it is not read); inplace takes the bf16 q_pe
    kz = ctx.kernel("deepseek_v3", kv="bf16", q="zero_copy", q_dtype="fp8_e4m3")
    xz = make_inputs(torch, "deepseek_v3", "zero_copy", "bf16", T, H, device, seed=23, q_dtype="fp8_e4m3",
                     q_scale=1.0)
    kz(**dict(xz, q_nope=xz["q_out"][..., :512]))
    ki = ctx.kernel("kimi_k2", kv="bf16", q="inplace", positions="int32", q_dtype="fp8_e4m3")
    xi = make_inputs(torch, "kimi_k2", "inplace", "bf16", T, H, device, seed=23, q_dtype="fp8_e4m3", q_scale=1.0)
    _expect(TypeError, lambda: ki(**dict(xi, q_pe=xi["q_pe"].float())))
    ki(**dict(xi, q_scale=None))  # 1.0
    # bound launches carry q_scale too
    launch = k.bind(**x)
    launch()
    # the library's own check of a NULL q_scale (raw arguments bypass the Python ones)
    args, keep = k.args(**x)
    args.q_scale = None
    e = _expect(ropekv.RopekvError, lambda: k.launch_raw(args), {"ROPEKV_ERR_NULL"})
    del keep


def test_host_fp8_q_errors():
    torch = _torch()
    _check_fp8_q_errors(torch, context("host"), "cpu")


# ---- KV layouts, fp8_tile rows and the read-back op -----------------------------------------------------------
def row_width(spec, kv):
    """Elements of one flat cache row: W, or the fp8_tile row's bytes."""
    s = SPECS[spec]
    return s["row_bytes"] if kv == "fp8_tile" else s["L"] + s["R"]


def layout_cache(torch, spec, kv, layout, rows, B, device, unit_dim=False, fill=None):
    """A cache of `rows` slots laid out as engines hold it, with padding: paged, [rows / B, B, width] entries of
    (width + pad) elements in blocks with a gap after them (unit_dim: [blocks, B, 1, width], vLLM's head dim);
    split, the latent parts [rows / B, B, L] and the rope parts [rows / B, B, R] in two padded buffers (FlashInfer);
    flat, [rows, width] rows of (width + pad). bf16 caches are bf16, fp8 and fp8_tile caches uint8. Padding and
    every entry hold a sentinel (-777.0 / 0x5A); fill (flat rows [rows, width]) is placed in the entries when
    given. Returns {"kv_cache", "kv_rope_cache" (split), "bases" (the buffers), "entries" (the [blocks, B, w]
    views, one per buffer)}."""
    s = SPECS[spec]
    assert rows % B == 0, (rows, B)
    blocks = rows // B
    dt = torch.bfloat16 if kv == "bf16" else torch.uint8
    pad = 8 if kv == "bf16" else 16
    gap = 32
    sentinel = -777.0 if kv == "bf16" else 0x5A
    if layout == "split":
        widths = [s["L"], s["R"]]
    else:
        widths = [row_width(spec, kv)]
    out = {"bases": [], "entries": []}
    for w in widths:
        if layout == "flat":
            base = torch.full((rows, w + pad), sentinel, dtype=dt, device=device)
            entries = base[:, :w].unsqueeze(0)
        else:
            base = torch.full((blocks, B * (w + pad) + gap), sentinel, dtype=dt, device=device)
            entries = base[:, :B * (w + pad)].view(blocks, B, w + pad)[..., :w]
        out["bases"].append(base)
        out["entries"].append(entries)
    if fill is not None:
        place_rows(torch, out["entries"], fill, s["L"])
    e = out["entries"]
    if layout == "flat":
        out["kv_cache"] = e[0][0]
    else:
        out["kv_cache"] = e[0].unsqueeze(2) if unit_dim else e[0]
    if layout == "split":
        out["kv_rope_cache"] = e[1].unsqueeze(2) if unit_dim else e[1]
    return out


def place_rows(torch, entries, flat, L):
    """Writes flat rows [rows, width] into the [blocks, B, w] entry views (split: latent and rope parts)."""
    B = entries[0].shape[1]
    r = torch.arange(flat.shape[0], device=flat.device)
    if flat.dtype != entries[0].dtype:  # an fp8 cache held as uint8 (or the other way round): the same bytes
        flat = flat.view(entries[0].dtype)
    if len(entries) == 2:
        entries[0][r // B, r % B] = flat[:, :L]
        entries[1][r // B, r % B] = flat[:, L:]
    else:
        entries[0][r // B, r % B] = flat


def expected_bases(torch, cache, flat, L):
    """The buffers of a layout_cache after flat rows [rows, width] were written in its entries: clones of the
    bases with the rows placed (padding and gaps as they were)."""
    bases = [b.clone() for b in cache["bases"]]
    entries = [nb.as_strided(e.shape, e.stride(), e.storage_offset() - b.storage_offset())
               for nb, b, e in zip(bases, cache["bases"], cache["entries"])]
    place_rows(torch, entries, flat, L)
    return bases


def _equal_bits(torch, got, want, what):
    kind = "bf16" if got.dtype == torch.bfloat16 else "fp8"
    steps, frac, n, bad = compare_bits(torch, got, want, kind)
    assert bad == 0, "%s: %d of %d elements not bit-identical (max %d steps; %s)" % (
        what, bad, n, steps, _first_differences(torch, got, want, kind))


def run_layout_case(torch, ctx, spec, kv, layout, B, device="cpu", unit_dim=False, q="absorbed", T=11, H=3,
                    seed=41, slots_dtype="int64", specials=True, min_slot=0, via="kernel"):
    """One write launch into a layout_cache (padded entries and blocks), compared with reference() on a flat cache
    of the same rows: every buffer bit for bit, padding included, and the query output. via "op": through
    ropekv.ops.write (the torch.ops.ropekv operator)."""
    s = SPECS[spec]
    k = ctx.kernel(spec, kv=kv, q=q, positions=s["pos"], slots=slots_dtype, layout=layout)
    assert (k.info.layout, k.info.kv, k.info.op) == (layout, kv, "write"), k.info
    x = make_inputs(torch, spec, q, kv, T, H, device, slots_dtype, specials=specials, seed=seed, min_slot=min_slot)
    width = row_width(spec, kv)
    rows = x["kv_cache"].numel() // width
    want = reference(torch, spec, q, kv, x, min_slot)
    cache = layout_cache(torch, spec, kv, layout, rows, B, device, unit_dim)
    call = dict(x, kv_cache=cache["kv_cache"])
    if layout == "split":
        call["kv_rope_cache"] = cache["kv_rope_cache"]
    ok, why = ctx.query(spec, kv=kv, q=q, layout=layout, **call)  # index types from the tensors
    assert ok, why
    if via == "op":
        import ropekv.ops
        ropekv.ops.write(spec, kv=kv, layout=layout, q_form=q, **call, min_slot=min_slot)
    else:
        k(**call, min_slot=min_slot)
    if device != "cpu":
        torch.cuda.synchronize()
    flat_want = want["kv_cache"].reshape(rows, width)
    for i, (got, exp) in enumerate(zip(cache["bases"], expected_bases(torch, cache, flat_want, s["L"]))):
        _equal_bits(torch, got, exp, "%s %s %s B=%d: cache buffer %d" % (spec, kv, layout, B, i))
    if "q_out" in want:
        _equal_bits(torch, x["q_out"], want["q_out"], "%s %s %s: q_out" % (spec, kv, layout))
    print("%s kv=%s layout=%s B=%d%s T=%d: cache buffers and q_out bit-identical" % (
        spec, kv, layout, B, " (unit dim)" if unit_dim else "", T))
    return k, x, cache, flat_want


# (spec, kv, layout, block size, unit dim): deepseek_v2_lite lists every layout
LAYOUT_CASES = [("deepseek_v2_lite", "bf16", "paged", 16, False), ("deepseek_v2_lite", "fp8_e4m3", "paged", 8, True),
                ("deepseek_v2_lite", "bf16", "paged", 1, True), ("deepseek_v2_lite", "bf16", "split", 16, False),
                ("deepseek_v2_lite", "fp8_e4m3", "split", 8, True), ("deepseek_v2_lite", "fp8_e4m3", "flat", 1, False)]
# the specs of the tile-scaled row and the read-back op
TILE_LAYOUT_CASES = [("deepseek_v32", "fp8_tile", "paged", 64, False), ("deepseek_v32", "fp8_tile", "paged", 16, True),
                     ("deepseek_v32", "fp8_tile", "flat", 1, False), ("deepseek_v32", "bf16", "paged", 16, False),
                     ("deepseek_v3", "fp8_e4m3", "paged", 16, True), ("kimi_k2", "bf16", "paged", 8, False)]


@parametrize("spec,kv,layout,B,unit_dim", LAYOUT_CASES + TILE_LAYOUT_CASES)
def test_host_torch_layouts(spec, kv, layout, B, unit_dim):
    """Paged and split caches as engines hold them, with padding between entries and after blocks: the rows land
    where the layout says and nothing else is written."""
    torch = _torch()
    T = 50 if B == 64 else 11  # rows (make_inputs: 16-row blocks for 2T + 16 slots) a multiple of B
    run_layout_case(torch, context("host"), spec, kv, layout, B, unit_dim=unit_dim, T=T,
                    specials=kv != "fp8_tile", seed=43)


def test_host_torch_fp8_tile_rows():
    """The fp8_tile write of deepseek_v32 against tile_rows byte for byte, with tiles of very different ranges
    (all zero: the FLT_MIN scale; 1e-30, bf16 subnormals, 1e30), tiles with NaN (ignored by amax; an all-NaN tile),
    +-inf (an inf scale: x / inf and inf / inf) and padding slots, in both q forms the bench uses; the kernel's
    parameters as the library reports them."""
    torch = _torch()
    c = context("host")
    k = c.kernel("deepseek_v32", kv="fp8_tile", q="absorbed", layout="paged")
    i = k.info
    s = SPECS["deepseek_v32"]
    assert (i.kv, i.layout, i.op, i.fp8_tile, i.fp8_tile_scale) == ("fp8_tile", "paged", "write", s["tile"],
                                                                     s["tile_scale"]), i
    assert (i.fp8_tile_scales_at, i.fp8_tile_rope_at, i.row_bytes, i.L, i.R) == (s["scales_at"], s["rope_at"],
                                                                                s["row_bytes"], 512, 64), i
    assert i.fp8_format == "ocp", "these tests compare with OCP e4m3"
    for q in ("absorbed", "none"):
        kq = c.kernel("deepseek_v32", kv="fp8_tile", q=q, layout="paged")
        x = make_inputs(torch, "deepseek_v32", q, "fp8_tile", 20, 2, "cpu", seed=47)
        kn = x["k_nope"]  # tokens with a slot in the cache (make_inputs: 0, 5, 10, 15 are padding, 3 past it)
        kn[2, :128] = 0.0
        kn[4, 128:256] *= 1e-30
        kn[6, 256:384] *= 1e30
        kn[7, 384:] = kn[7, 384:].abs()
        kn[8, 5] = float("nan")
        kn[9, :128] = float("nan")
        kn[11, 130] = float("inf")
        kn[12, 300], kn[12, 301] = float("-inf"), float("inf")
        kn[13, 400:512] *= 1e-38  # bf16 subnormals: scale FLT_MIN
        kn[14, 0] = 3.0e38  # near the bf16 max
        want = reference(torch, "deepseek_v32", q, "fp8_tile", x)
        cache = layout_cache(torch, "deepseek_v32", "fp8_tile", "paged", x["kv_cache"].numel() // 656, 16, "cpu")
        kq(**dict(x, kv_cache=cache["kv_cache"]))
        flat_want = want["kv_cache"].reshape(-1, 656)
        exp = expected_bases(torch, cache, flat_want, 512)[0]
        assert torch.equal(cache["bases"][0], exp), "fp8_tile rows (q %s): %d bytes differ" % (
            q, int((cache["bases"][0] != exp).sum()))
        if q == "absorbed":
            _equal_bits(torch, x["q_out"], want["q_out"], "q_out")
        slot = int(x["slots"][2])
        zero_tile = cache["entries"][0][slot // 16, slot % 16, 512:516].contiguous().view(torch.float32)
        assert zero_tile.item() == FLT_MIN, "the all-zero tile's scale"
        slot = int(x["slots"][11])
        inf_tile = cache["entries"][0][slot // 16, slot % 16, 516:520].contiguous().view(torch.float32)
        assert inf_tile.item() == math.inf, "the scale of a tile with inf"


def fill_rows(torch, spec, kv, rows, seed, specials=True):
    """Random cache rows (flat [rows, width]) of a kv dtype: bf16 values (NaN, +-inf among them); every fp8 byte
    (NaN codes included); fp8_tile rows with random codes, positive float32 scales over a wide range and bf16
    rope values."""
    s = SPECS[spec]
    L, R = s["L"], s["R"]
    g = torch.Generator().manual_seed(seed)
    if kv == "bf16":
        v = torch.randn(rows, L + R, generator=g).to(torch.bfloat16)
        if specials and rows >= 4:
            v[1, 3], v[2, L + 1], v[3, 7] = float("nan"), float("inf"), float("-inf")
        return v
    if kv == "fp8_e4m3":
        return torch.randint(0, 256, (rows, L + R), generator=g).to(torch.uint8)
    out = torch.zeros(rows, s["row_bytes"], dtype=torch.uint8)
    out[:, :L] = torch.randint(0, 256, (rows, L), generator=g).to(torch.uint8)
    nt = L // s["tile"]
    scale = torch.exp2(torch.randint(-40, 20, (rows, nt), generator=g).float())
    scale = scale * (1 + torch.rand(rows, nt, generator=g))
    out[:, s["scales_at"]:s["scales_at"] + 4 * nt] = scale.contiguous().view(torch.uint8)
    out[:, s["rope_at"]:s["rope_at"] + 2 * R] = torch.randn(rows, R, generator=g).to(torch.bfloat16).view(torch.uint8)
    return out


def run_read_case(torch, ctx, spec, kv, layout, B, device="cpu", split_out=False, min_slot=0, slots_dtype="int64",
                  T=13, rows=64, seed=51, unit_dim=False, alloc=False, via="kernel"):
    """One read-back launch of random cache rows in a layout_cache: out against read_reference bit for bit (NaN ==
    NaN), with padding slots (-1), a slot past the cache and, with min_slot, slot 0 below it. via "op": through
    ropekv.ops.read (the torch.ops.ropekv operator) instead of Kernel.__call__."""
    s = SPECS[spec]
    k = ctx.kernel(spec, kv=kv, slots=slots_dtype, layout=layout, op="read")
    assert (k.info.op, k.info.kv, k.info.layout, k.info.slots) == ("read", kv, layout, slots_dtype), k.info
    assert k.info.read_negative_slot in ("zero", "skip"), k.info
    flat = fill_rows(torch, spec, kv, rows, seed)
    cache = layout_cache(torch, spec, kv, layout, rows, B, device, unit_dim, fill=flat.to(device))
    g = torch.Generator().manual_seed(seed + 1)
    slots = torch.randperm(rows, generator=g)[:T]
    slots[::4] = -1
    slots[2] = rows + 3
    if min_slot:
        slots[1] = 0
    slots = slots.to(torch.int64 if slots_dtype == "int64" else torch.int32).to(device)
    k_scale = torch.tensor([0.37], dtype=torch.float32, device=device) if kv == "fp8_e4m3" else None
    call = dict(kv_cache=cache["kv_cache"], slots=slots, min_slot=min_slot)
    if k_scale is not None and s["scale"] != "none":
        call["k_scale"] = k_scale
    if layout == "split":
        call["kv_rope_cache"] = cache["kv_rope_cache"]
    L, W = s["L"], s["L"] + s["R"]
    prior = torch.full((T, W), -777.0, dtype=torch.bfloat16)
    read = k
    if via == "op":
        import ropekv.ops

        def read(**kw):
            return ropekv.ops.read(spec, kv=kv, layout=layout, **kw)
    if alloc:
        got = k(**call)
        if split_out:
            raise AssertionError("alloc with split_out is not a case")
        prior = torch.zeros(T, W, dtype=torch.bfloat16)
    elif split_out:
        out, out_rope = prior[:, :L].clone().to(device), prior[:, L:].clone().to(device)
        r = read(**call, out=out, out_rope=out_rope)
        assert r[0] is out and r[1] is out_rope
        got = torch.cat([out, out_rope], dim=-1)
    else:
        pad = torch.full((T, W + 8), -777.0, dtype=torch.bfloat16, device=device)  # rows of a wider stride
        out = pad[:, :W]
        assert read(**call, out=out) is out
        got = out
        assert bool((pad[:, W:] == -777.0).all()), "out's padding was written"
    want = read_reference(torch, spec, kv, flat, slots.cpu(), k_scale.cpu() if k_scale is not None else None,
                          min_slot, prior, k.info.read_negative_slot)
    _equal_bits(torch, got.cpu(), want, "%s %s %s read (B=%d%s)" % (spec, kv, layout, B,
                                                                    ", out_rope" if split_out else ""))
    print("%s kv=%s layout=%s B=%d read T=%d%s: out bit-identical" % (spec, kv, layout, B, T,
                                                                     " with out_rope" if split_out else ""))
    return k


# (spec, kv, layout, block size, out_rope, min_slot, slots dtype)
READ_CASES = [("deepseek_v3", "bf16", "flat", 1, False, 0, "int64"),
              ("deepseek_v3", "fp8_e4m3", "flat", 1, False, 1, "int32"),
              ("deepseek_v3", "fp8_e4m3", "paged", 16, True, 0, "int64"),
              ("kimi_k2", "fp8_e4m3", "paged", 8, False, 0, "int64"),
              ("minicpm3_4b", "fp8_e4m3", "flat", 1, True, 0, "int64"),
              ("deepseek_v2_lite", "fp8_e4m3", "split", 16, False, 0, "int64"),
              ("deepseek_v2_lite", "bf16", "split", 8, True, 1, "int64"),
              ("deepseek_v32", "fp8_tile", "paged", 64, False, 0, "int64"),
              ("deepseek_v32", "fp8_tile", "flat", 1, True, 1, "int32"),
              ("deepseek_v32", "bf16", "paged", 16, False, 0, "int64")]


@parametrize("spec,kv,layout,B,split_out,min_slot,slots", READ_CASES)
def test_host_torch_read(spec, kv, layout, B, split_out, min_slot, slots):
    """The read-back op: cache rows of every byte value (fp8), specials (bf16) and tile scales over 2^60, read
    through each layout into out (or out + out_rope), dequantized as read_rows says, bit for bit."""
    torch = _torch()
    run_read_case(torch, context("host"), spec, kv, layout, B, split_out=split_out, min_slot=min_slot,
                  slots_dtype=slots, unit_dim=layout == "paged" and B == 8)


def test_host_torch_read_alloc():
    """Without out, the read kernel returns a new zero-filled [T, W] bf16 tensor with the rows."""
    torch = _torch()
    run_read_case(torch, context("host"), "deepseek_v32", "fp8_tile", "paged", 16, alloc=True)


@parametrize("spec,kv,layout,B", [("deepseek_v32", "fp8_tile", "paged", 64), ("deepseek_v32", "bf16", "paged", 16),
                                  ("deepseek_v3", "bf16", "flat", 1), ("deepseek_v3", "fp8_e4m3", "paged", 16),
                                  ("deepseek_v2_lite", "bf16", "split", 16)])
def test_host_torch_round_trip(spec, kv, layout, B):
    """Write with one kernel, read back with its read kernel: the fp8_tile rows' bytes equal tile_rows' and read
    back as read_rows dequantizes them; a bf16 row reads back as the written row exactly."""
    torch = _torch()
    ctx = context("host")
    s = SPECS[spec]
    T = 50 if B == 64 else 11
    k, x, cache, flat_want = run_layout_case(torch, ctx, spec, kv, layout, B, T=T, specials=kv != "fp8_tile",
                                             seed=53)
    r = ctx.kernel(spec, kv=kv, layout=layout, op="read")
    slots = x["slots"]
    call = dict(kv_cache=cache["kv_cache"], slots=slots)
    if layout == "split":
        call["kv_rope_cache"] = cache["kv_rope_cache"]
    if kv == "fp8_e4m3" and s["scale"] != "none":
        call["k_scale"] = x["k_scale"]
    got = r(**call)
    valid = (slots >= 0) & (slots < flat_want.shape[0])
    want = read_reference(torch, spec, kv, flat_want, slots, x.get("k_scale"))
    _equal_bits(torch, got, want, "%s %s %s: read back" % (spec, kv, layout))
    if kv == "bf16":  # the written row itself: k_nope | rope(k_pe) as reference() made it
        written = flat_want[slots[valid].long()]
        _equal_bits(torch, got[valid], written, "bf16 row read back")
        assert bool((got[~valid] == 0).all())
    print("%s kv=%s layout=%s: written and read back, %d rows" % (spec, kv, layout, int(valid.sum())))


def _check_layout_errors(torch, ctx, device):
    """Argument errors of layouts, fp8_tile caches and read kernels, in Python and in the library."""
    spec = "deepseek_v2_lite"
    T, H = 8, 2
    x = make_inputs(torch, spec, "absorbed", "bf16", T, H, device, seed=61)
    rows = x["kv_cache"].numel() // 576
    kp = ctx.kernel(spec, kv="bf16", layout="paged")
    paged = layout_cache(torch, spec, "bf16", "paged", rows, 16, device)
    kp(**dict(x, kv_cache=paged["kv_cache"]))
    e = _expect(ValueError, lambda: kp(**dict(x, kv_cache=paged["kv_cache"].reshape(-1, 576))))
    assert "paged" in str(e) and "block_size" in str(e)
    two = torch.zeros(rows // 16, 8, 2, 576, dtype=torch.bfloat16, device=device)
    _expect(ValueError, lambda: kp(**dict(x, kv_cache=two)))
    _expect(ValueError, lambda: kp(**dict(x, kv_cache=paged["kv_cache"][..., :568])))  # row narrower than W
    _expect(ValueError, lambda: kp(**dict(x, kv_cache=paged["kv_cache"], kv_rope_cache=paged["kv_cache"])))
    ov = torch.zeros(rows * 576, dtype=torch.bfloat16, device=device)
    overlapping = torch.as_strided(ov, (rows // 16, 16, 576), (16 * 576, 64, 1))  # entries 64 apart, 576 wide
    e = _expect(ropekv.RopekvError, lambda: kp(**dict(x, kv_cache=overlapping)), {"ROPEKV_ERR_STRIDE"})
    assert "kv_cache" in e.message
    ok, why = ctx.query(spec, layout="paged", **dict(x, kv_cache=overlapping))
    assert not ok and "ROPEKV_ERR_STRIDE" in why
    ok, why = ctx.query(spec, layout="paged", **dict(x, kv_cache=paged["kv_cache"]))
    assert ok, why
    _expect(ValueError, lambda: ctx.kernel(spec, layout="tiled"))
    _expect(ValueError, lambda: ctx.kernel(spec, op="gather"))
    # split: the rope cache is required, of the same blocks
    ks = ctx.kernel(spec, kv="bf16", layout="split")
    split = layout_cache(torch, spec, "bf16", "split", rows, 16, device)
    e = _expect(ValueError, lambda: ks(**dict(x, kv_cache=split["kv_cache"])))
    assert "kv_rope_cache" in str(e)
    other = layout_cache(torch, spec, "bf16", "split", rows, 8, device)
    _expect(ValueError, lambda: ks(**dict(x, kv_cache=split["kv_cache"], kv_rope_cache=other["kv_rope_cache"])))
    _expect(TypeError, lambda: ks(**dict(x, kv_cache=split["kv_cache"],
                                         kv_rope_cache=split["kv_rope_cache"].float())))
    ks(**dict(x, kv_cache=split["kv_cache"], kv_rope_cache=split["kv_rope_cache"]))
    # read kernels take no write tensors, and the write kernels no out
    r = ctx.kernel(spec, kv="bf16", layout="paged", op="read")
    slots = x["slots"]
    out = torch.zeros(T, 576, dtype=torch.bfloat16, device=device)
    r(kv_cache=paged["kv_cache"], slots=slots, out=out)
    e = _expect(ValueError, lambda: r(kv_cache=paged["kv_cache"], slots=slots, out=out, k_nope=x["k_nope"]))
    assert "k_nope" in str(e)
    _expect(ValueError, lambda: kp(**dict(x, kv_cache=paged["kv_cache"], out=out)))
    _expect(ValueError, lambda: r(kv_cache=paged["kv_cache"], out=out))  # no slots
    _expect(ValueError, lambda: r(slots=slots, out=out))  # no cache
    _expect(ValueError, lambda: r(kv_cache=paged["kv_cache"], slots=slots, out=out[:, :512]))  # [T, L] without out_rope
    _expect(ValueError, lambda: r(kv_cache=paged["kv_cache"], slots=slots, out=out[:T - 1]))
    _expect(ValueError, lambda: r(kv_cache=paged["kv_cache"], slots=slots, out=out[:, :512],
                                  out_rope=torch.zeros(T, 32, dtype=torch.bfloat16, device=device)))
    _expect(TypeError, lambda: r(kv_cache=paged["kv_cache"], slots=slots, out=out.float()))
    _expect(TypeError, lambda: r(kv_cache=paged["kv_cache"], slots=slots.to(torch.int32), out=out))
    _expect(ValueError, lambda: r(kv_cache=paged["kv_cache"], slots=slots, out=out.t().contiguous().t()))
    ok, why = ctx.query(spec, layout="paged", op="read", kv_cache=paged["kv_cache"], slots=slots, out=out)
    assert ok, why
    bad_out = torch.as_strided(out, (T, 576), (8, 1))  # rows of 576 at a stride of 8: overlapping
    e = _expect(ropekv.RopekvError, lambda: r(kv_cache=paged["kv_cache"], slots=slots, out=bad_out),
                {"ROPEKV_ERR_STRIDE"})
    assert "out" in e.message
    # an fp8 read with a scale convention: k_scale=None means 1.0
    r8 = ctx.kernel(spec, kv="fp8_e4m3", layout="paged", op="read")
    p8 = layout_cache(torch, spec, "fp8_e4m3", "paged", rows, 16, device)
    out1 = torch.zeros(T, 576, dtype=torch.bfloat16, device=device)
    r8(kv_cache=p8["kv_cache"], slots=slots, out=out1)
    r8(kv_cache=p8["kv_cache"], slots=slots, out=out, k_scale=torch.ones(1, device=device))
    assert torch.equal(out1, out)
    _expect(TypeError, lambda: r8(kv_cache=paged["kv_cache"], slots=slots, out=out,
                                  k_scale=torch.ones(1, device=device)))  # a bf16 cache for an fp8 kernel
    # the library's own checks of a read launch (raw arguments bypass the Python ones)
    args, keep = r.args(kv_cache=paged["kv_cache"], slots=slots, out=out)
    args.out = None
    _expect(ropekv.RopekvError, lambda: r.launch_raw(args), {"ROPEKV_ERR_NULL"})
    del keep


def _check_tile_errors(torch, ctx, device):
    """fp8_tile caches are uint8 rows of info.row_bytes; the kernel takes no k_scale (ignored)."""
    k = ctx.kernel("deepseek_v32", kv="fp8_tile", layout="paged")
    x = make_inputs(torch, "deepseek_v32", "absorbed", "fp8_tile", 8, 2, device, seed=67)
    rows = x["kv_cache"].numel() // 656
    cache = layout_cache(torch, "deepseek_v32", "fp8_tile", "paged", rows, 16, device)
    k(**dict(x, kv_cache=cache["kv_cache"]))
    k(**dict(x, kv_cache=cache["kv_cache"], k_scale=torch.ones(1, device=device)))
    e = _expect(TypeError, lambda: k(**dict(x, kv_cache=cache["kv_cache"].view(torch.int8))))
    assert "uint8" in str(e) and "656" in str(e)
    wide = torch.zeros(rows // 16, 16, 576, dtype=torch.uint8, device=device)
    e = _expect(ValueError, lambda: k(**dict(x, kv_cache=wide)))
    assert "656" in str(e)
    _expect(TypeError, lambda: k(**dict(x, kv_cache=torch.zeros(rows // 16, 16, 576, dtype=torch.bfloat16,
                                                                 device=device))))
    r = ctx.kernel("deepseek_v32", kv="fp8_tile", layout="paged", op="read")
    got = r(kv_cache=cache["kv_cache"], slots=x["slots"])
    assert tuple(got.shape) == (8, 576) and got.dtype == torch.bfloat16
    lat, rope = r(kv_cache=cache["kv_cache"], slots=x["slots"],
                  out_rope=torch.zeros(8, 64, dtype=torch.bfloat16, device=device))
    assert tuple(lat.shape) == (8, 512) and torch.equal(torch.cat([lat, rope], dim=-1), got)


def test_host_layout_errors():
    torch = _torch()
    _check_layout_errors(torch, context("host"), "cpu")


def test_host_tile_errors():
    torch = _torch()
    _check_tile_errors(torch, context("host"), "cpu")


def test_layout_and_op_enums():
    """The enums of the header, and kernels keyed by layout and op (host backend, no torch)."""
    assert ropekv.KV_DTYPES == {"bf16": 0, "fp8_e4m3": 1, "fp8_tile": 2}
    assert ropekv.LAYOUTS == {"flat": 0, "paged": 1, "split": 2} and ropekv.OPS == {"write": 0, "read": 1}
    c = context("host")
    kf = c.kernel("deepseek_v2_lite", layout="flat")
    kp = c.kernel("deepseek_v2_lite", layout="paged")
    ks = c.kernel("deepseek_v2_lite", layout=2)
    assert (kf.info.layout, kp.info.layout, ks.info.layout) == ("flat", "paged", "split")
    assert kp.info.key.endswith("/layout=paged") and kf.name != kp.name != ks.name
    assert (kp.layout, kp.op) == ("paged", "write")
    r = c.kernel("deepseek_v2_lite", kv="fp8_e4m3", layout="split", op="read")
    assert (r.info.op, r.info.layout, r.info.kv, r.op) == ("read", "split", "fp8_e4m3", "read")
    assert "/read/" in r.info.key and r.info.key.endswith("/layout=split"), r.info.key
    assert r.info.read_negative_slot == "zero"
    ok, why = c.query("deepseek_v3", kv="fp8_e4m3", layout="paged", op="read")
    assert ok, why
    ok, why = c.query("deepseek_v32", kv="fp8_tile", layout="split")  # a tile row is one row
    assert not ok and "ROPEKV_ERR_UNSUPPORTED" in why and "fp8_tile is one row" in why, why


# ---- the fused kv_a RMSNorm (norm rms / rms_out) ---------------------------------------------------------------
NORM_SENTINEL = -777.0


def norm_inputs(torch, spec, q, kv, T, H, device, seed=0, kv_tokens=None, min_slot=0, specials=False):
    """make_inputs' tensors with k_nope as a raw kv_a projection's c_kv: each token's row scaled by a power of two
    in 2^-12 .. 2^12, and, with 8 or more rows, row 5 all zeros, row 6 scaled by 2^100 (its squares overflow float32:
    r = 0) and row 7 by 2^-120 (its squares underflow: r = 1 / sqrt(eps)); and the RMSNorm weight [L] (bf16, about 1
    +- 0.5). The same seed gives the same tensors (fresh outputs for each launch compared)."""
    x = make_inputs(torch, spec, q, kv, T, H, device, specials=specials, seed=seed, kv_tokens=kv_tokens,
                    min_slot=min_slot)
    L = SPECS[spec]["L"]
    g = torch.Generator().manual_seed(seed + 1)
    k = x["k_nope"].cpu().float()
    P = k.shape[0]
    scale = torch.exp2(torch.randint(-12, 13, (P, 1), generator=g).float())
    if P >= 8:
        scale[5], scale[6], scale[7] = 0.0, 2.0 ** 100, 2.0 ** -120
    x["k_nope"].copy_((k * scale).to(torch.bfloat16).to(device))  # a view of the projection: written in place
    w = (1.0 + 0.5 * torch.randn(L, generator=g)).to(torch.bfloat16).to(device)
    return x, w


def _norm_launch(torch, ctx, spec, q, kv, norm, x, w, norm_out, min_slot, via):
    kw = dict(x)
    if norm != "none":
        kw["norm_weight"] = w
    if norm_out is not None:
        kw["norm_out"] = norm_out
    if via == "op":
        import ropekv.ops
        ropekv.ops.write(spec, kv=kv, q_form=q, q_dtype="bf16", **kw, min_slot=min_slot, norm=norm)
    else:
        k = ctx.kernel(spec, kv=kv, q=q, positions=SPECS[spec]["pos"], norm=norm)
        assert k.info.norm == norm and k.norm == norm, (k.info.key, norm)
        k(**kw, min_slot=min_slot)


def _same_bits(torch, a, b):
    return torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


NORM_REL_TOL = 2.0 ** -7 + 2.0 ** -12  # norm_out vs a float64 RMSNorm: see run_norm_case


def run_norm_case(torch, ctx, spec, q, kv, T, H, device, seed=0, kv_tokens=None, min_slot=0, specials=False,
                  via="kernel"):
    """The fused kv_a RMSNorm against the unfused composition, bit for bit: an rms_out launch on the raw c_kv writes
    norm_out; the op without the norm (norm none) launched with k_nope := that norm_out must write the same query
    output and cache bits as the rms_out and rms launches; norm_out must equal ropekv.reference.rms_norm bit for bit
    on every row it writes (every KV token, but a negative slot under skip_all, whose row keeps its prior contents),
    and the reference op (reference()) on k_nope := rms_norm(c_kv) must give every output (NaN == NaN whatever the
    payload). Finally norm_out against a float64 RMSNorm of the same rows (x / sqrt(mean(x^2) + eps) * w): within
    NORM_REL_TOL = 2^-7 + 2^-12 relative, the two bf16 roundings of the "twice" rounding (x * r, then * w; each at most
    half an ulp, 2^-8 relative) and the float32 arithmetic (a few 2^-24), on the rows whose sum of squares is finite
    in float32 (a row whose squares overflow normalizes to zeros, as the kernels define it)."""
    s = SPECS[spec]
    L = s["L"]
    info = ctx.kernel(spec, kv=kv, q=q, positions=s["pos"], norm="rms_out").info
    assert (info.norm, info.norm_weight, info.norm_rounding) == ("rms_out", "bf16", "twice"), info
    assert abs(info.norm_eps - 1e-6) < 1e-12 and info.key.endswith("/norm=rms_out"), info
    args = (torch, spec, q, kv, T, H, device, seed, kv_tokens, min_slot, specials)
    fused, w = norm_inputs(*args)
    P = fused["k_nope"].shape[0]
    norm_out = torch.full((P, L), NORM_SENTINEL, dtype=torch.bfloat16, device=device)
    _norm_launch(torch, ctx, spec, q, kv, "rms_out", fused, w, norm_out, min_slot, via)
    rms, _ = norm_inputs(*args)
    _norm_launch(torch, ctx, spec, q, kv, "rms", rms, w, None, min_slot, via)
    unfused, _ = norm_inputs(*args)
    unfused["k_nope"] = norm_out
    _norm_launch(torch, ctx, spec, q, kv, "none", unfused, w, None, min_slot, via)
    if device != "cpu":
        torch.cuda.synchronize()
    outs = [n for n in ("q_out", "q_pe", "kv_cache") if n in fused]
    for name in outs:
        assert _same_bits(torch, fused[name], unfused[name]), "%s: rms_out differs from norm none on norm_out" % name
        assert _same_bits(torch, rms[name], unfused[name]), "%s: rms differs from norm none on norm_out" % name
    # norm_out: written for every KV token except a negative slot under skip_all
    raw, _ = norm_inputs(*args)
    slots = raw["slots"].long()
    K = slots.shape[0]
    written = torch.zeros(P, dtype=torch.bool, device=slots.device)
    written[:K] = True
    if s["neg"] == "skip_all":
        written[:K] &= slots >= 0
    want = ref.rms_norm(raw["k_nope"], w, info.norm_eps, info.norm_rounding)
    got = norm_out[written]
    bad = compare_bits(torch, got, want[written], "bf16")[3]
    assert bad == 0, "norm_out: %d elements differ from rms_norm (%s)" % (
        bad, _first_differences(torch, got, want[written], "bf16"))
    assert bool((norm_out[~written] == NORM_SENTINEL).all()), "norm_out rows of tokens without one were written"
    # the reference op on the normalized rows
    normed = dict(raw)
    normed["k_nope"] = want
    exp = reference(torch, spec, q, kv, normed, min_slot)
    for name, e in exp.items():
        kind = "bf16" if e.dtype == torch.bfloat16 else "fp8"
        steps, frac, n, bad = compare_bits(torch, fused[name], e, kind)
        assert bad == 0, "%s: %d of %d elements differ from the reference on rms_norm's rows (%s)" % (
            name, bad, n, _first_differences(torch, fused[name], e, kind))
    # closeness to a float64 RMSNorm
    x64 = raw["k_nope"][:K].double().cpu()
    n64 = x64 / torch.sqrt((x64 * x64).mean(-1, keepdim=True) + info.norm_eps) * w.double().cpu()
    ok_rows = torch.isfinite(x64).all(-1) & ((x64 * x64).sum(-1) < 3.4e38) & written[:K].cpu()
    err = (norm_out[:K].double().cpu() - n64).abs()
    rel = (err / n64.abs().clamp(min=1e-300))[ok_rows]
    exact0 = (n64 == 0)[ok_rows]
    worst = float(torch.where(exact0, err[ok_rows], rel).max()) if rel.numel() else 0.0
    assert worst <= NORM_REL_TOL, "norm_out vs a float64 RMSNorm: %g relative > %g" % (worst, NORM_REL_TOL)
    print("%s q=%s kv=%s norm T=%d K=%d %s: fused == unfused composition bit for bit (%s), norm_out == rms_norm, "
          "float64 RMSNorm within %.3g relative (bound %.3g)" % (spec, q, kv, T, K, device, ", ".join(outs), worst,
                                                                 NORM_REL_TOL))


NORM_CASES = [("deepseek_v3", "absorbed", "bf16", 11, None, 0), ("deepseek_v3", "absorbed", "fp8_e4m3", 11, None, 0),
              ("deepseek_v3", "zero_copy", "bf16", 9, None, 0), ("deepseek_v3", "none", "fp8_e4m3", 0, 9, 1),
              ("kimi_k2", "inplace", "fp8_e4m3", 11, None, 0), ("kimi_k2", "absorbed", "bf16", 6, 11, 1),
              ("deepseek_v3", "absorbed", "bf16", 11, 5, 1), ("deepseek_v32", "absorbed", "fp8_tile", 11, None, 0)]


@parametrize("spec,q,kv,T,K,min_slot", NORM_CASES)
def test_host_torch_norm(spec, q, kv, T, K, min_slot):
    torch = _torch()
    run_norm_case(torch, context("host"), spec, q, kv, T, 3, "cpu", seed=41, kv_tokens=K, min_slot=min_slot,
                  specials=spec == "kimi_k2")


def test_host_norm_kernel_info():
    """The norm of a kernel comes from the library (KernelInfo), is part of its key, and a spec without a kv_norm
    table refuses it."""
    c = context("host")
    none, rms = c.kernel("deepseek_v3"), c.kernel("deepseek_v3", norm="rms")
    assert (none.info.norm, none.info.norm_weight, none.info.norm_eps, none.info.norm_rounding) == ("none", None, 0.0,
                                                                                                    None)
    assert (rms.info.norm, rms.info.norm_weight, rms.info.norm_rounding) == ("rms", "bf16", "twice")
    assert rms.info.key == none.info.key + "/norm=rms" and rms.name != none.name and rms.norm == "rms"
    assert "RMSNorm" in (rms.info.norm_matches or ""), rms.info.norm_matches
    assert c.kernel("deepseek_v3", norm=2).info.norm == "rms_out" and ropekv.NORMS == {"none": 0, "rms": 1,
                                                                                        "rms_out": 2}
    ok, why = c.query("deepseek_v3", norm="rms_out")
    assert ok, why
    ok, why = c.query("minicpm3_4b", norm="rms")
    assert not ok and "ROPEKV_ERR_UNSUPPORTED" in why, why
    _expect(ValueError, lambda: c.kernel("deepseek_v3", norm="layer"))


def _check_norm_errors(torch, ctx, device):
    """The norm's tensors are checked by name before the library sees them; the library's own checks (alignment,
    a norm tensor passed raw to a kernel without the norm) still apply."""
    x, w = norm_inputs(torch, "deepseek_v3", "absorbed", "bf16", 8, 2, device, seed=43)
    none = ctx.kernel("deepseek_v3")
    rms = ctx.kernel("deepseek_v3", norm="rms")
    out = ctx.kernel("deepseek_v3", norm="rms_out")
    no = torch.zeros(8, 512, dtype=torch.bfloat16, device=device)
    e = _expect(ValueError, lambda: rms(**x))
    assert "norm_weight is required" in str(e), e
    e = _expect(TypeError, lambda: rms(**x, norm_weight=w.float()))
    assert "norm_weight must be bfloat16" in str(e), e
    e = _expect(ValueError, lambda: rms(**x, norm_weight=w[:511]))
    assert "norm_weight must have shape [512]" in str(e), e
    _expect(ValueError, lambda: rms(**x, norm_weight=w.view(1, 512)))
    strided = torch.zeros(1024, dtype=torch.bfloat16, device=device)[::2]
    e = _expect(ValueError, lambda: rms(**x, norm_weight=strided))
    assert "norm_weight must be contiguous" in str(e), e
    _expect(TypeError, lambda: rms(**x, norm_weight=[1.0] * 512))
    e = _expect(ValueError, lambda: rms(**x, norm_weight=w, norm_out=no))
    assert "norm_out is written by norm='rms_out' kernels only" in str(e), e
    e = _expect(ValueError, lambda: none(**x, norm_weight=w))
    assert "norm_weight is for a kernel with the fused kv_a RMSNorm" in str(e), e
    _expect(ValueError, lambda: none(**x, norm_out=no))
    e = _expect(ValueError, lambda: out(**x, norm_weight=w))
    assert "norm_out is required" in str(e), e
    e = _expect(TypeError, lambda: out(**x, norm_weight=w, norm_out=no.float()))
    assert "norm_out must be bfloat16" in str(e), e
    e = _expect(ValueError, lambda: out(**x, norm_weight=w, norm_out=no[:7]))
    assert "norm_out must have shape [n, 512] with n >= 8" in str(e), e
    _expect(ValueError, lambda: out(**x, norm_weight=w, norm_out=no.t().contiguous().t()))
    base = torch.zeros(8 * 520 + 8, dtype=torch.bfloat16, device=device)
    _expect(ropekv.RopekvError, lambda: out(**x, norm_weight=w, norm_out=base[4:4 + 8 * 520].view(8, 520)[:, :512]),
            {"ROPEKV_ERR_ALIGN"})  # a row stride of 520 is fine, 8 bytes past a 16-byte boundary is not
    out(**x, norm_weight=w, norm_out=base[:8 * 520].view(8, 520)[:, :512])
    e = _expect(ValueError, lambda: ctx.kernel("deepseek_v3", op="read")(kv_cache=x["kv_cache"], slots=x["slots"],
                                                                      norm_weight=w))
    assert "norm_weight" in str(e), e
    if device == "cpu" and torch.cuda.is_available():
        _expect(ValueError, lambda: rms(**x, norm_weight=w.cuda()))
    elif device != "cpu":
        _expect(ValueError, lambda: rms(**x, norm_weight=w.cpu()))
    # the library refuses the norm's pointers for a kernel without the norm (ROPEKV_ERR_ARG), and checks that a
    # norm kernel gets its weight (ROPEKV_ERR_NULL): what Context.query with raw arguments reports
    raw, keep = none.args(**x)
    fields = {name: getattr(raw, name) for name, _ in ropekv.ropekv_args._fields_}
    fields["norm_weight"] = w.data_ptr()
    e = _expect(ropekv.RopekvError, lambda: none.launch_raw(fields), {"ROPEKV_ERR_ARG"})
    assert "norm" in e.message, e
    ok, why = ctx.query("deepseek_v3", raw=dict(fields, norm_weight=0), norm="rms")
    assert not ok and "ROPEKV_ERR_NULL" in why, why
    ok, why = ctx.query("deepseek_v3", raw=fields, norm="rms")
    assert ok, why
    del keep


def test_host_norm_errors():
    torch = _torch()
    _check_norm_errors(torch, context("host"), "cpu")


# ---- CUDA ---------------------------------------------------------------------------------------------------
@parametrize("kv,q,slots", [(kv, q, sl) for kv in ("bf16", "fp8_e4m3") for q in ("absorbed", "zero_copy", "none")
                            for sl in ("int64",)] + [("fp8_e4m3", "absorbed", "int32")])
def test_cuda_deepseek_v3(kv, q, slots):
    torch = _cuda_torch()
    run_and_check(torch, context("cuda"), "deepseek_v3", q, kv, T=67, H=16, device="cuda", slots_dtype=slots)


@parametrize("kv,q", [("fp8_e4m3", "inplace"), ("fp8_e4m3", "absorbed"), ("bf16", "inplace")])
def test_cuda_kimi_k2(kv, q):
    torch = _cuda_torch()
    run_and_check(torch, context("cuda"), "kimi_k2", q, kv, T=41, H=8, device="cuda", specials=True, seed=3)


@parametrize("kv,q", [(kv, q) for kv in ("bf16", "fp8_e4m3") for q in ("absorbed", "zero_copy", "inplace")])
def test_cuda_minicpm3_4b(kv, q):
    torch = _cuda_torch()
    run_and_check(torch, context("cuda"), "minicpm3_4b", q, kv, T=33, H=40, device="cuda", seed=5)


def test_cuda_large_strides():
    """Many tokens and heads (index math past 2^31 elements is not reached here; strides and the 2-D grid are)."""
    torch = _cuda_torch()
    run_and_check(torch, context("cuda"), "deepseek_v3", "absorbed", "fp8_e4m3", T=4099, H=128, device="cuda",
                  seed=7)


def test_cuda_graph_capture():
    """A bound launch captured in a CUDA graph runs on replay (the launch goes to torch's current stream)."""
    torch = _cuda_torch()
    ctx = context("cuda")
    k = ctx.kernel("deepseek_v3", kv="bf16", q="absorbed")
    x = make_inputs(torch, "deepseek_v3", "absorbed", "bf16", 32, 16, "cuda", seed=11)
    want = reference(torch, "deepseek_v3", "absorbed", "bf16", x)
    launch = k.bind(**x)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        launch()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    x["q_out"].fill_(-777.0)
    x["kv_cache"].fill_(-777.0)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        launch()
    torch.cuda.synchronize()
    assert bool((x["q_out"] == -777.0).all()), "the captured launch ran during capture"
    g.replay()
    torch.cuda.synchronize()
    for name in ("q_out", "kv_cache"):
        steps, frac, n, bad = compare_bits(torch, x[name], want[name], "bf16")
        assert bad == 0, "%s after replay: %d of %d elements not bit-identical (max %d steps; %s)" % (
            name, bad, n, steps, _first_differences(torch, x[name], want[name], "bf16"))


def test_cuda_pdl_chain():
    """Chained in-place launches (each rotates the previous one's q_pe) give the same bits with programmatic
    dependent launch (the default on sm_90), also with pdl_prefetch, as without it, eagerly and replayed from a
    CUDA graph."""
    torch = _cuda_torch()
    on = ropekv.Context("cuda", cache_dir=_CACHE_DIR, pdl=True)
    off = ropekv.Context("cuda", cache_dir=_CACHE_DIR, pdl=False)
    pf = ropekv.Context("cuda", cache_dir=_CACHE_DIR, pdl=True, pdl_prefetch=True)
    try:
        results = []
        runs = ((off, False), (on, False), (on, True), (pf, False), (pf, True))
        for ctx, graph in runs:
            k = ctx.kernel("kimi_k2", kv="bf16", q="inplace", positions=SPECS["kimi_k2"]["pos"])
            x = make_inputs(torch, "kimi_k2", "inplace", "bf16", 1000, 16, "cuda", seed=17)
            launch = k.bind(**x)
            if graph:
                q0 = x["q_pe"].clone()
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    launch()
                torch.cuda.current_stream().wait_stream(s)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    for _ in range(16):
                        launch()
                x["q_pe"].copy_(q0)
                g.replay()
            else:
                for _ in range(16):
                    launch()
            torch.cuda.synchronize()
            results.append((x["q_pe"].clone(), x["kv_cache"].clone()))
        for name, i in (("q_pe", 0), ("kv_cache", 1)):
            for j in range(1, len(runs)):
                steps, frac, n, bad = compare_bits(torch, results[j][i], results[0][i], "bf16")
                assert bad == 0, "%s, %s%s: %d of %d elements differ from launches without PDL" % (
                    name, "graph" if runs[j][1] else "eager", " with prefetch" if runs[j][0] is pf else "", bad, n)
    finally:
        on.close()
        off.close()
        pf.close()


def _expect(exc, fn, status=None):
    try:
        fn()
    except exc as e:
        if status is not None:
            assert e.status in status, "got %s, expected %s" % (e.status, status)
        return e
    raise AssertionError("no %s" % exc.__name__)


def _check_errors(torch, ctx, device):
    k = ctx.kernel("deepseek_v3", kv="bf16", q="absorbed")
    T, H = 16, 4
    x = make_inputs(torch, "deepseek_v3", "absorbed", "bf16", T, H, device, seed=13)
    # dtypes
    _expect(TypeError, lambda: k(**dict(x, q_pe=x["q_pe"].to(torch.float16))))
    _expect(TypeError, lambda: k(**dict(x, positions=x["positions"].to(torch.int32))))
    _expect(TypeError, lambda: k(**dict(x, kv_cache=x["kv_cache"].view(torch.int16))))
    _expect(TypeError, lambda: k(**dict(x, q_out=3)))
    if hasattr(torch, "float8_e4m3fn"):
        kf = ctx.kernel("deepseek_v3", kv="fp8_e4m3", q="absorbed")
        xf = make_inputs(torch, "deepseek_v3", "absorbed", "fp8_e4m3", T, H, device, seed=13)
        if hasattr(torch, "float8_e4m3fnuz"):
            _expect(TypeError, lambda: kf(**dict(xf, kv_cache=xf["kv_cache"].view(torch.float8_e4m3fnuz))))
        kf(**dict(xf, kv_cache=xf["kv_cache"].view(torch.uint8)))  # raw bytes are fine
        runs = []  # k_scale=None means 1.0
        for scale in (None, torch.ones(1, dtype=torch.float32, device=device)):
            runs.append(dict(xf, kv_cache=xf["kv_cache"].clone(), q_out=xf["q_out"].clone(), k_scale=scale))
            kf(**runs[-1])
        assert torch.equal(runs[0]["kv_cache"].view(torch.uint8), runs[1]["kv_cache"].view(torch.uint8))
        _expect(ValueError, lambda: kf(**dict(xf, k_scale=torch.ones(2, device=device))))
    # shapes and layouts
    _expect(ValueError, lambda: k(**dict(x, q_pe=x["q_pe"][:, :2])))
    _expect(ValueError, lambda: k(**dict(x, k_pe=x["k_pe"].t().contiguous().t())))  # last dim not contiguous
    _expect(ValueError, lambda: k(**dict(x, kv_cache=x["kv_cache"][:, :8])))  # rows of two strides
    _expect(ValueError, lambda: k(**dict(x, sin=x["cos_sin"])))
    _expect(ValueError, lambda: ctx.kernel("deepseek_v3", kv="bf16", q="none")(**x))  # q tensors for form none
    _expect(TypeError, lambda: k(**dict(x, bogus=x["q_out"])))
    _expect(ValueError, lambda: k(**dict(x, positions=x["positions"][:T - 1])))  # fewer than the query tokens
    _expect(ValueError, lambda: k(**dict(x, k_nope=x["k_nope"][:T - 1], k_pe=x["k_pe"][:T - 1])))  # < slots
    _expect(ValueError, lambda: k(**x, min_slot=-1))
    # the library's checks
    qb = torch.empty(T, H, 576 + 8, dtype=torch.bfloat16, device=device)
    _expect(ropekv.RopekvError, lambda: k(**dict(x, q_nope=qb[..., 1:513])), {"ROPEKV_ERR_ALIGN"})
    ov = torch.empty(T * H * 576, dtype=torch.bfloat16, device=device)
    overlapping = torch.as_strided(ov, (T, H, 576), (H * 576, 8, 1))
    e = _expect(ropekv.RopekvError, lambda: k(**dict(x, q_out=overlapping)), {"ROPEKV_ERR_STRIDE"})
    assert "q_out" in e.message
    ok, why = ctx.query("deepseek_v3", kv="bf16", q="absorbed", **dict(x, q_out=overlapping))
    assert not ok and "ROPEKV_ERR_STRIDE" in why
    ok, why = ctx.query("deepseek_v3", kv="bf16", q="absorbed", **x)
    assert ok, why
    # devices
    if device == "cpu":
        if torch.cuda.is_available():
            _expect(ValueError, lambda: k(**dict(x, k_nope=x["k_nope"].cuda())))
    else:
        _expect(ValueError, lambda: k(**dict(x, k_nope=x["k_nope"].cpu())))
        _expect(ValueError, lambda: k(**{n: v.cpu() for n, v in x.items()}))
    return k, x


def test_cuda_errors():
    torch = _cuda_torch()
    _check_errors(torch, context("cuda"), "cuda")


@parametrize("spec,q,kv,q_scale", [("deepseek_v3", q, kv, qs) for q in ("absorbed", "zero_copy")
                                   for kv in ("bf16", "fp8_e4m3") for qs in Q_SCALES]
             + [("kimi_k2", q, kv, qs) for q in ("absorbed", "inplace") for kv in ("bf16", "fp8_e4m3")
                for qs in (0.37, 1.0 / 448)]
             + [("minicpm3_4b", q, "fp8_e4m3", 0.37) for q in ("absorbed", "zero_copy", "inplace")])
def test_cuda_fp8_q(spec, q, kv, q_scale):
    torch = _cuda_torch()
    run_and_check(torch, context("cuda"), spec, q, kv, T=67, H=16, device="cuda", specials=spec == "kimi_k2",
                  seed=29, q_dtype="fp8_e4m3", q_scale=q_scale, q_specials=True)


@parametrize("spec,q,kv,T,K,min_slot", FP8Q_PADDING_CASES + [("deepseek_v3", "absorbed", "fp8_e4m3", 1000, 700, 1)])
def test_cuda_fp8_q_padding(spec, q, kv, T, K, min_slot):
    torch = _cuda_torch()
    run_and_check(torch, context("cuda"), spec, q, kv, T=T, H=16, device="cuda", specials=True, kv_tokens=K,
                  min_slot=min_slot, q_dtype="fp8_e4m3", q_scale=None if T == 0 else 0.37)


def test_cuda_fp8_q_large():
    """Many tokens and heads with an fp8 query and cache (the vector path, the 2-D grid)."""
    torch = _cuda_torch()
    run_and_check(torch, context("cuda"), "deepseek_v3", "absorbed", "fp8_e4m3", T=4099, H=128, device="cuda",
                  seed=31, q_dtype="fp8_e4m3", q_scale=0.37,
                  q_out_dtype=getattr(torch, "float8_e4m3fn", None))


def test_cuda_fp8_q_errors():
    torch = _cuda_torch()
    _check_fp8_q_errors(torch, context("cuda"), "cuda")


def _cuda_spec(ctx, spec, **variant):
    ok, why = ctx.query(spec, **variant)
    if not ok and "ROPEKV_ERR_UNSUPPORTED" in why:
        skip("%s on %s: %s" % (spec, ctx.target, why))


@parametrize("spec,kv,layout,B,unit_dim", TILE_LAYOUT_CASES + LAYOUT_CASES)
def test_cuda_layouts(spec, kv, layout, B, unit_dim):
    torch = _cuda_torch()
    ctx = context("cuda")
    _cuda_spec(ctx, spec, kv=kv, layout=layout)
    run_layout_case(torch, ctx, spec, kv, layout, B, device="cuda", unit_dim=unit_dim, T=1016 if B == 64 else 67,
                    H=16, specials=kv != "fp8_tile", seed=71)


@parametrize("spec,kv,layout,B,split_out,min_slot,slots", READ_CASES)
def test_cuda_read(spec, kv, layout, B, split_out, min_slot, slots):
    torch = _cuda_torch()
    ctx = context("cuda")
    _cuda_spec(ctx, spec, kv=kv, layout=layout, op="read")
    run_read_case(torch, ctx, spec, kv, layout, B, device="cuda", split_out=split_out, min_slot=min_slot,
                  slots_dtype=slots, T=1000, rows=2048, unit_dim=layout == "paged" and B == 8)


def test_cuda_fp8_tile_errors():
    torch = _cuda_torch()
    _check_tile_errors(torch, context("cuda"), "cuda")


@parametrize("spec,q,kv,T,K,min_slot", [(s, q, kv, 1000 if T else 0, K and 700, m) for s, q, kv, T, K, m in NORM_CASES])
def test_cuda_norm(spec, q, kv, T, K, min_slot):
    torch = _cuda_torch()
    ctx = context("cuda")
    _cuda_spec(ctx, spec, kv=kv, q=q, norm="rms")
    run_norm_case(torch, ctx, spec, q, kv, T, 16, "cuda", seed=47, kv_tokens=K, min_slot=min_slot,
                  specials=spec == "kimi_k2")


def test_cuda_norm_errors():
    torch = _cuda_torch()
    _check_norm_errors(torch, context("cuda"), "cuda")


# ---- plain runner --------------------------------------------------------------------------------------------
def _cases(fn):
    params = getattr(fn, "_params", None)
    if params is None:
        return [((), {})]
    names = [n.strip() for n in params[0].split(",")]
    out = []
    for v in params[1]:
        v = v if len(names) > 1 else (v,)
        out.append((v, dict(zip(names, v))))
    return out


def main(namespace=None):
    """Runs every test_* function of namespace (default: this module's) in file order."""
    skipped_types = (_Skip,) + ((pytest.skip.Exception,) if pytest is not None else ())
    namespace = globals() if namespace is None else namespace
    tests = [(n, f) for n, f in sorted(namespace.items(), key=lambda kv: kv[1].__code__.co_firstlineno
                                        if callable(kv[1]) and hasattr(kv[1], "__code__") else 0)
             if n.startswith("test_") and callable(f)]
    passed = failed = skipped = 0
    for name, fn in tests:
        for vals, kw in _cases(fn):
            label = name + ("[%s]" % "-".join(map(str, vals)) if vals else "")
            try:
                fn(**kw)
            except skipped_types as e:
                skipped += 1
                print("SKIP %s: %s" % (label, e))
                continue
            except Exception as e:  # noqa: BLE001
                failed += 1
                import traceback
                traceback.print_exc()
                print("FAIL %s: %s" % (label, e))
                continue
            passed += 1
            print("PASS %s" % label)
    print("%d passed, %d failed, %d skipped" % (passed, failed, skipped))
    for c in _CONTEXTS.values():
        c.close()
    shutil.rmtree(_CACHE_DIR, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
