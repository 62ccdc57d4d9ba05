"""ropekv.reference's record codec (record_encode / record_decode) on every record of specs/records.lua, from the
description the library gives (ropekv.record, Kernel.record_desc), byte for byte against:
  - the C codec (rk_record_encode / rk_record_decode through tests/record_codec.c, $RK_RECORD_CODEC; the
    python_records ctest sets it): every record, OCP and FNUZ bytes, each reader's scale convention;
  - the host backend's kernels: a write launch of every record a spec can list (the built-in specs' records, and
    specs loaded here for the rest) and its read op (op="read"), which is record_decode rounded to bf16;
  - hand-derived values: the e2m1 / e4m3 / UE8M0 ties, and the readers' scale conventions.
Rows hold random values, ties at every rounding boundary, all-zero blocks, a block holding the max, NaN and inf.

    python3 python/tests/test_records.py    # with ROPEKV_LIB (docs/testing.md) and RK_RECORD_CODEC"""
import os
import struct
import subprocess
import sys

from _support import _torch, context, main, parametrize, skip

import ropekv  # noqa: E402 (after _support, which puts the package on the path)

RECORDS = ("bf16", "fp8", "fp8_ds_mla", "fp8_ds_mla_pow2", "glm_next_fp8", "dsv4_fp8", "dsv41_mxfp8", "dsv41_fp4",
           "nvfp4", "nvfp4_fp8rope", "nvfp4_ds_mla", "nvfp4_ds_mla_fp8rope", "glm_next_nvfp4")
# Where a kernel writes each record on the host backend: a built-in spec that lists it, or a spec loaded here (None:
# no kernel writes it: a per-token outer scale, or R = 0, which no spec can have)
KERNEL_SPEC = {"bf16": "deepseek_v32", "fp8": "t_rec512", "fp8_ds_mla": "deepseek_v32",
               "fp8_ds_mla_pow2": "deepseek_v32_pow2", "glm_next_fp8": None, "dsv4_fp8": "t_rec448",
               "dsv41_mxfp8": "t_rec448", "dsv41_fp4": "t_rec448", "nvfp4": "deepseek_v3",
               "nvfp4_fp8rope": "deepseek_v32", "nvfp4_ds_mla": "t_rec512", "nvfp4_ds_mla_fp8rope": None,
               "glm_next_nvfp4": None}
TEST_SPECS = {
    "t_rec512": (512, "{ 'fp8', 'nvfp4_ds_mla', 'nvfp4_ds_mla_fp8rope' }"),
    "t_rec448": (448, "{ 'dsv4_fp8', 'dsv41_mxfp8', 'dsv41_fp4' }"),
}


def _ref():
    import ropekv.reference as ref
    return ref


# ---- inputs ------------------------------------------------------------------------------------------------------
E2M1_TIES = [6.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.25, -0.75, -1.25, -1.75, -2.5, -3.5, -5.0, -0.0]
# against a block scale of exactly 1 (amax 448): e4m3 ties (1.0625 -> 1, 1.1875 -> 1.25, 17 -> 16, 19 -> 20,
# 232 -> 224, 2^-10 -> 0, 3 * 2^-10 -> 2^-8), 464 past the bound, signed zeros
E4M3_TIES = [448.0, 1.0625, 1.1875, 17.0, 19.0, 232.0, 2.0 ** -10, 3 * 2.0 ** -10, -1.0625, -1.1875, -17.0, -19.0,
             -0.0, 0.0, 1.5, -2.0 ** -10]


def rows_for(torch, desc, seed):
    """Rows of desc's L + R float32 values (the latent bf16-valued), one kind a row:
    0 random, 1 wide magnitudes (2^-40 .. 2^40), 2 ties at the elements' and scales' rounding boundaries, 3 zeros,
    4 blocks holding the max (bf16 max, 448 * 2^k and just past it: UE8M0 / pow2 round-up boundaries), 5 NaN and +-inf,
    6 tiny values (e4m3 subnormals, FLT_MIN floors), 7 random with rope values off the bf16 grid."""
    g = torch.Generator().manual_seed(seed)
    L, W = desc.L, desc.L + desc.R
    x = torch.zeros(8, W)
    x[0] = torch.randn(W, generator=g) * 3
    x[1] = torch.randn(W, generator=g) * torch.pow(2.0, torch.randint(-40, 41, (W,), generator=g).float())
    for s in desc.segments:
        blk = s.block or 16
        pat = E2M1_TIES if s.elem == "e2m1" else E4M3_TIES if s.elem == "e4m3" else [1 + 2 ** -8, 1 + 3 * 2 ** -8,
                                                                                     -(1 + 2 ** -8), 3.0]
        vals = torch.tensor(pat * (s.n // len(pat) + 1))[:s.n]
        if s.elem == "e2m1" and s.block:  # some blocks with e4m3-scale ties: amax 6.375 (s 1.0625), 7.125 (1.1875)
            vals = vals.unflatten(0, (-1, blk)).clone()
            vals[1::4, 0] = 6.375
            vals[2::4, 0] = 7.125
            vals[3::4] *= 2.0 ** -3
            vals = vals.flatten()
        x[2, s.from_:s.from_ + s.n] = vals
        top = torch.tensor([3.3895313892515355e38, 448.0, 448.0 * 2 ** 20, 448.0 * (1 + 2 ** -7), 6.0 * 2 ** -3,
                            -448.0 * 2 ** -30, 1.0, -65504.0])
        for b in range(s.n // blk):
            x[4, s.from_ + b * blk:s.from_ + (b + 1) * blk] = torch.randn(blk, generator=g) * float(top[b % 8]) / 4
            x[4, s.from_ + b * blk + (b % blk)] = top[b % 8]
    x[5] = torch.randn(W, generator=g)
    special = torch.tensor([float("nan"), float("inf"), -float("inf"), float("-nan")])
    x[5, torch.randint(0, W, (12,), generator=g)] = special.repeat(3)
    x[6] = torch.randn(W, generator=g) * 2.0 ** -12
    x[6, :W // 4] *= 2.0 ** -100
    x[7] = torch.randn(W, generator=g) * 10
    x[:, :L] = x[:, :L].to(torch.bfloat16).float()  # the latent as the writer reads it
    x[2:5, L:] = x[2:5, L:].to(torch.bfloat16).float()
    return x


# ---- the C codec (tests/record_codec.c) --------------------------------------------------------------------------
def _codec():
    exe = os.environ.get("RK_RECORD_CODEC")
    if not exe or not os.path.exists(exe):
        skip("no RK_RECORD_CODEC (the record_codec test program; the python_records ctest sets it)")
    return exe


def c_encode(torch, name, x, fmt, k, sanitize, conv="-"):
    exe = _codec()
    desc = ropekv.record(name)
    r = subprocess.run([exe, "encode", name, fmt, conv, repr(float(k)), str(int(sanitize))],
                       input=x.contiguous().numpy().tobytes() if hasattr(x, "numpy") else x, capture_output=True,
                       check=True)
    return torch.frombuffer(bytearray(r.stdout), dtype=torch.uint8).reshape(-1, desc.row_bytes + desc.tail_bytes)


def c_decode(torch, name, rows, fmt, k, reader, conv="-"):
    exe = _codec()
    desc = ropekv.record(name)
    r = subprocess.run([exe, "decode", name, fmt, conv, repr(float(k)), reader or "-"],
                       input=bytes(rows.contiguous().numpy().tobytes()), capture_output=True, check=True)
    return torch.frombuffer(bytearray(r.stdout), dtype=torch.float32).reshape(-1, desc.L + desc.R)


def _same_bits(torch, a, b):
    """Equal bit for bit, NaN == NaN whatever the payload or sign."""
    if a.dtype == torch.float32:
        nan = torch.isnan(a)
        return bool(torch.equal(nan, torch.isnan(b))) and bool(torch.equal(a[~nan].view(torch.int32),
                                                                           b[~nan].view(torch.int32)))
    return bool(torch.equal(a, b))


def _diff(torch, a, b):
    d = (a.view(torch.uint8) != b.view(torch.uint8)).nonzero()
    return "%d differences, first at %s" % (d.shape[0], d[:4].tolist())


# ---- the description ---------------------------------------------------------------------------------------------
def test_library_records():
    """The library's records are specs/records.lua's, in its order, as the C API describes them: a few facts read
    back by hand (docs/formats.md's drawings)."""
    recs = ropekv.records()
    assert tuple(recs) == RECORDS, tuple(recs)
    r = ropekv.record("dsv4_fp8")
    assert (r.L, r.R, r.row_bytes, r.tail_bytes, r.split_at) == (448, 64, 576, 8, 0), r
    s = r.segments[0]
    assert (s.from_, s.n, s.elem, s.block, s.scale, s.rule, s.scale_at, s.scales_at) == (
        0, 448, "e4m3", 64, "ue8m0", "pow2_up", "page_tail", 0), s
    r = ropekv.record("nvfp4_ds_mla_fp8rope")
    assert (r.segments[0].outer, r.segments[0].outer_at, r.segments[0].saturate_ocp) == ("token", 292, 6.0)
    assert (r.segments[1].at, r.segments[1].outer, r.segments[1].outer_at) == (304, "token", 288)
    r = ropekv.record("nvfp4_fp8rope")
    assert (r.segments[0].rule, r.segments[0].block_conv, r.segments[0].scales_interleave) == ("up", "mul_recip", 4)
    assert r.segments[1].block_conv == "none" and r.segments[1].floor == 0.0
    assert ropekv.record("dsv41_mxfp8").segments[0].floor == struct.unpack("<f", struct.pack("<f", 1e-4))[0]
    r = ropekv.record("fp8_ds_mla_pow2")
    assert [(x.name, x.scale) for x in r.readers][:2] == [("flashmla_sm100_sparse", "pow2_down"),
                                                          ("flashinfer_sm120_sparse", "pow2_down")], r.readers
    assert ropekv.record("fp8").conv == "mul_recip" and ropekv.record("fp8").segments[0].saturate_fnuz == 240.0
    try:
        ropekv.record("nope")
        raise AssertionError("no KeyError")
    except KeyError as e:
        assert "fp8_ds_mla" in str(e)


def test_kernel_record_desc():
    """A kernel's record comes from the kernel: kimi_k2 takes the library's fp8 with its own convention and FNUZ
    bound; a kv dtype's row is a record too (deepseek_v32's fp8_tile is fp8_ds_mla's bytes)."""
    ctx = context("host")
    k = ctx.kernel("kimi_k2", q="none", record="fp8")
    d = k.record_desc
    assert (d.name, d.conv, d.segments[0].saturate_fnuz, d.row_bytes) == ("fp8", "div", 224.0, 576), d
    t = ctx.kernel("deepseek_v32", kv="fp8_tile", q="none").record_desc
    lib = ropekv.record("fp8_ds_mla")
    assert t.name == "fp8_tile" and t.segments == lib.segments and t.row_bytes == lib.row_bytes, (t, lib)


# ---- against the C codec -----------------------------------------------------------------------------------------
@parametrize("name", RECORDS)
def test_encode_decode_c(name):
    """record_encode's bytes and record_decode's values (ropekv's read op and every reader convention) equal the C
    codec's, OCP and FNUZ, with and without sanitize, k_scale 1 (ties exact) and 0.37, every convention."""
    torch = _torch()
    ref = _ref()
    desc = ropekv.record(name)
    x = rows_for(torch, desc, seed=RECORDS.index(name))
    n = 0
    for fmt in ("ocp", "fnuz"):
        for sanitize in (False, True):
            for k, conv in ((1.0, "-"), (0.37, "-"), (0.37, "div"), (3.0, "mul")):
                if conv != "-" and desc.conv == "none":
                    continue
                want = c_encode(torch, name, x, fmt, k, sanitize, conv)
                got = ref.record_encode(desc, x, k_scale=k, fmt=fmt, sanitize=sanitize,
                                        conv=None if conv == "-" else conv)
                assert got.shape == want.shape and torch.equal(got, want), "%s %s sanitize=%s k=%s %s: %s" % (
                    name, fmt, sanitize, k, conv, _diff(torch, got, want))
                for reader in (None, "exact", "bf16", "pow2_down"):
                    yw = c_decode(torch, name, want, fmt, k, reader, conv)
                    yg = ref.record_decode(desc, got, reader=reader, k_scale=k, fmt=fmt,
                                           conv=None if conv == "-" else conv)
                    assert _same_bits(torch, yg, yw), "%s %s decode reader=%s: %s" % (name, fmt, reader,
                                                                                       _diff(torch, yg, yw))
                n += 1
    # random bytes decode alike too (every scale byte, NaN scales, e2m1 / e4m3 codes of every value)
    g = torch.Generator().manual_seed(7)
    junk = torch.randint(0, 256, (16, desc.row_bytes + desc.tail_bytes), generator=g, dtype=torch.int64)
    junk = junk.to(torch.uint8)
    for fmt in ("ocp", "fnuz"):
        for reader in (None, "bf16", "pow2_down"):
            yw = c_decode(torch, name, junk, fmt, 0.37, reader)
            yg = ref.record_decode(desc, junk, reader=reader, k_scale=0.37, fmt=fmt)
            assert _same_bits(torch, yg, yw), "%s %s random bytes reader=%s: %s" % (name, fmt, reader,
                                                                                   _diff(torch, yg, yw))
    print("%s: %d encodings and their decodes equal the C codec's" % (name, n))


# ---- hand-derived values -----------------------------------------------------------------------------------------
def test_e2m1_by_hand():
    """e2m1 ties go to the even code (0.25 -> 0, 0.75 -> 1.0, 1.25 -> 1.0, 1.75 -> 2.0, 2.5 -> 2.0, 3.5 -> 4.0,
    5 -> 4.0), saturating at 6, -0 keeps its sign, NaN is 0x7; a dsv41_fp4 block of amax 6 has scale 1.0 (0x38)."""
    torch = _torch()
    ref = _ref()
    v = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0, 0.26, -0.0, -5.0, float("nan"), 0.0])
    assert ref.e2m1_codes(v).tolist() == [0, 2, 2, 4, 4, 6, 6, 7, 1, 8, 14, 7, 0]
    desc = ropekv.record("dsv41_fp4")
    x = torch.zeros(1, 512)
    x[0, :16] = torch.tensor(E2M1_TIES)
    x[0, 16:32] = 6.375  # s = 6.375 / 6 = 1.0625: an e4m3 tie, to 1.0 (0x38); 6.375 / 1 clamps to 6
    x[0, 32] = 7.125     # s = 1.1875 -> 1.25 (0x3a); 7.125 / 1.25 = 5.7 -> 6
    row = ref.record_encode(desc, x)[0]
    assert row[256:260].tolist() == [0x38, 0x38, 0x3A, 0x01], row[256:260]  # an all-zero block: 0x01, never 0
    codes = [int(row[i // 2]) >> (4 * (i % 2)) & 0xF for i in range(16)]
    assert codes == [7, 0, 2, 2, 4, 4, 6, 6, 8, 10, 10, 12, 12, 14, 14, 8], codes
    assert row[8:16].tolist() == [0x77] * 8 and int(row[16]) == 0x07
    y = ref.record_decode(desc, row[None])[0]
    assert y[:16].tolist() == [6, 0, 1, 1, 2, 2, 4, 4, -0.0, -1, -1, -2, -2, -4, -4, -0.0]
    assert y[32] == 6.0 * 1.25


def test_nvfp4_fp8rope_by_hand():
    """vLLM's DSA NVFP4 row: a block scale rounded up to an e4m3 value (6.375 / 6 = 1.0625, whose nearest is 1.0:
    1.125, 0x39; 15/512 exact: 0x0f), block b's scale at byte 320 + 8 (b % 4) + b / 4, the values times the
    reciprocal of the decoded scale (1.25 d times 1 / d is 1.2500001: 1.5, where 1.25 d / d is a tie to 1.0), the rope
    values rounded to bf16 before their e4m3 conversion (1.0634765625 -> 1.0625, a tie, to 1.0: 0x38)."""
    torch = _torch()
    ref = _ref()
    d = 15 / 512
    x = torch.zeros(1, 576)
    x[0, :16] = 6.375
    x[0, 16] = 6 * d
    x[0, 17] = 1.25 * d
    x[0, 4 * 16] = 6.375  # block 4: its scale at 321
    x[0, 512] = 1.0634765625
    row = ref.record_encode("nvfp4_fp8rope", x)[0]
    assert row[320].item() == 0x39 and row[328].item() == 0x0F and row[321].item() == 0x39, row[320:352]
    assert row[336].item() == 0x01  # block 2, all zero: 0x01
    assert row[0].item() == 0x77 and row[8].item() == 0x37, row[:16]  # 6.375 / 1.125 -> 6; block 1: 6 and 1.5
    assert row[256].item() == 0x38, row[256:260]
    y = ref.record_decode("nvfp4_fp8rope", row[None])[0]
    assert y[0] == 6 * 1.125 and y[16] == 6 * d and y[17] == 1.5 * d and y[64] == 6 * 1.125 and y[512] == 1.0


def test_nvfp4_ds_mla_by_hand():
    """The 432-byte row's rule exact_zero: a block whose amax is 6 * 2^-10 has s = 2^-10, the tie below e4m3's least
    value, to even: scale byte 0x00 and the values times 0 (+0 and -0: codes 0 and 8); the next bf16 amax
    (1.5078125 * 2^-8) rounds to 2^-9 (0x01) and its value times 2^9 is 3.015625: 3, code 5. An all-zero block: 0x00."""
    torch = _torch()
    ref = _ref()
    x = torch.zeros(1, 576)
    x[0, 0] = 0.005859375
    x[0, 1] = -0.001
    x[0, 16] = 1.5078125 * 2.0 ** -8
    row = ref.record_encode("nvfp4_ds_mla", x)[0]
    assert row[256:259].tolist() == [0x00, 0x01, 0x00], row[256:259]
    assert row[0].item() == 0x80 and row[8].item() == 0x05, row[:16]
    y = ref.record_decode("nvfp4_ds_mla", row[None])[0]
    assert y[0] == 0 and not torch.signbit(y[0]) and torch.signbit(y[1]) and y[16] == 3 * 2.0 ** -9


def test_scales_by_hand():
    """Block scales by hand: fp8_ds_mla's f32 scale is amax / 448 (FNUZ: / 224) floored at FLT_MIN; the pow2 record
    rounds it up (448 * (1 + 2^-7) -> 2.0; 448 -> 1.0); dsv41_mxfp8's UE8M0 byte is the biased exponent of the
    rounded-up scale (127 for 1.0, 128 for just past it, 114 for an all-zero block: its floor 1e-4 rounded up to
    2^-13, 0xff for an inf amax)."""
    torch = _torch()
    ref = _ref()
    x = torch.zeros(1, 576)
    x[0, 0] = 448.0
    x[0, 128] = 448.0 * (1 + 2 ** -7)
    x[0, 384] = 1000.0
    for name, fmt, want in (("fp8_ds_mla", "ocp", [1.0, 1 + 2 ** -7, 2.0 ** -126, 1000 / 448]),
                            ("fp8_ds_mla", "fnuz", [2.0, 2 * (1 + 2 ** -7), 2.0 ** -126, 1000 / 224]),
                            ("fp8_ds_mla_pow2", "ocp", [1.0, 2.0, 2.0 ** -126, 4.0])):
        row = ref.record_encode(name, x, fmt=fmt)[0]
        got = list(struct.unpack("<4f", bytes(row[512:528].tolist())))
        assert got == [struct.unpack("<f", struct.pack("<f", w))[0] for w in want], (name, fmt, got)
    x = torch.zeros(1, 512)
    x[0, 0] = 448.0
    x[0, 32] = 448.0 * (1 + 2 ** -7)
    x[0, 96] = float("inf")
    row = ref.record_encode("dsv41_mxfp8", x)[0]
    assert row[512:516].tolist() == [127, 128, 114, 0xFF], row[512:516]  # zero: the floor 1e-4, up to 2^-13
    y = ref.record_decode("dsv41_mxfp8", row[None])[0]
    assert y[0] == 448.0 and y[32] == 448.0 and bool(torch.isnan(y[96:128]).all())


def test_readers_by_hand():
    """The readers' conventions on one scale: fp8_ds_mla's f32 scale 1000 / 448 = 2.2321429 read exact, as bf16
    (2.234375) and as pow2_down (2.0); a reader is named by desc.readers or by its convention."""
    torch = _torch()
    ref = _ref()
    x = torch.zeros(1, 576)
    x[0, 0] = 1000.0
    row = ref.record_encode("fp8_ds_mla", x)
    s = struct.unpack("<f", struct.pack("<f", 1000 / 448))[0]
    for reader, scale in ((None, s), ("ropekv_read", s), ("flashmla_sm90_sparse", 2.234375), ("pow2_down", 2.0)):
        y = ref.record_decode("fp8_ds_mla", row, reader=reader)[0]
        assert float(y[0]) == struct.unpack("<f", struct.pack("<f", 448.0 * scale))[0], (reader, float(y[0]))
    y = ref.record_decode("fp8_ds_mla_pow2", ref.record_encode("fp8_ds_mla_pow2", x),
                          reader="flashmla_sm100_sparse")[0]
    assert float(y[0]) == 1024.0, float(y[0])  # scale 2^ceil(log2 2.23) = 4, read as 4; 1000 / 4 = 250 -> e4m3 256
    try:
        ref.record_decode("fp8_ds_mla", row, reader="flashmla_sm100_sparse")
        raise AssertionError("a reader fp8_ds_mla does not list was taken")
    except ValueError as e:
        assert "flashmla_sm90_sparse" in str(e)


# ---- against the host backend's kernels --------------------------------------------------------------------------
def _host_kernels(name, layout, op):
    ctx = context("host")
    spec = KERNEL_SPEC[name]
    if spec in TEST_SPECS:
        L, recs = TEST_SPECS[spec]
        ctx.load_spec_text(spec + ".lua", "return { name = '%s', kv_lora_rank = %d, qk_rope_head_dim = 64, rope = "
                           "'gptj', cos_sin = 'f32_cat', targets = { 'host' }, records = %s }" % (spec, L, recs))
    return ctx.kernel(spec, q="none", layout=layout, op=op, record=name)


@parametrize("name", [n for n in RECORDS if KERNEL_SPEC[n]])
def test_host_kernels(name):
    """A write launch of the record on the host backend stores record_encode's bytes for x = cat(k_nope, rope(k_pe))
    (page-tail scales after the page's rows), and the read op returns record_decode's values rounded to bf16."""
    torch = _torch()
    ref = _ref()
    desc = ropekv.record(name)
    tail = desc.tail_bytes
    layout = "paged" if tail else "flat"
    w = _host_kernels(name, layout, "write")
    r = _host_kernels(name, layout, "read")
    assert w.record_desc.segments == desc.segments, (w.record_desc, desc)
    # the read kernel's record: the writer's bound and rope rounding canonical (0), the rest the same
    assert r.record_desc.segments == tuple(s._replace(saturate_ocp=0.0, saturate_fnuz=0.0, rope_bf16=False)
                                           for s in desc.segments), r.record_desc
    fmt = w.info.fp8_format or "ocp"
    L, R = desc.L, desc.R
    x = rows_for(torch, desc, seed=100 + RECORDS.index(name))
    T = x.shape[0] * 2
    g = torch.Generator().manual_seed(5)
    k_nope = torch.cat([x[:, :L], x[:, :L] * 0.5]).to(torch.bfloat16)
    k_pe = torch.cat([x[:, L:], torch.randn(x.shape[0], R, generator=g)]).to(torch.bfloat16)
    max_pos = 64
    ang = torch.arange(max_pos, dtype=torch.float64)[:, None] * 10000.0 ** (-torch.arange(R // 2) * 2.0 / R)
    cos, sin = ang.cos().float(), ang.sin().float()
    positions = torch.randint(0, max_pos, (T,), generator=g)
    slots = torch.randperm(T + 8, generator=g)[:T]
    B, rows_n = 8, T + 8
    if tail:
        blocks = rows_n // B
        buf = torch.zeros(blocks, B * (desc.row_bytes + tail), dtype=torch.uint8)
        cache = buf.as_strided((blocks, B, desc.row_bytes), (B * (desc.row_bytes + tail), desc.row_bytes, 1))
    elif w.tensors[[t.name for t in w.tensors].index("kv_cache")].dtype == "bf16":  # the bf16 row: a bf16 cache
        cache = torch.zeros(rows_n, desc.row_bytes // 2, dtype=torch.bfloat16)
    else:
        cache = torch.zeros(rows_n, desc.row_bytes, dtype=torch.uint8)
    k_scale = torch.tensor([0.37])
    call = dict(k_nope=k_nope, k_pe=k_pe, kv_cache=cache, positions=positions, slots=slots,
                cos_sin=torch.cat([cos, sin], dim=1).contiguous())
    if any(s.outer == "tensor" for s in desc.segments):
        call["k_scale"] = k_scale
    w(**call)
    xs = torch.cat([k_nope.float(), ref.rope(k_pe, cos[positions], sin[positions], "gptj")], dim=-1)
    want = ref.record_encode(w.record_desc, xs, k_scale=k_scale, fmt=fmt, sanitize=w.info.sanitize)
    if tail:  # a token's bytes: its row, then its part of its page's tail
        blk, e = slots // B, slots % B
        got = torch.stack([torch.cat([buf[b, i * desc.row_bytes:(i + 1) * desc.row_bytes],
                                      buf[b, B * desc.row_bytes + i * tail:B * desc.row_bytes + (i + 1) * tail]])
                           for b, i in zip(blk.tolist(), e.tolist())])
    else:
        got = cache.view(torch.uint8)[slots]
    assert torch.equal(got, want), "%s: the kernel's bytes differ from record_encode's: %s" % (
        name, _diff(torch, got, want))
    read = dict(kv_cache=cache, slots=slots)
    if "k_scale" in call:
        read["k_scale"] = k_scale
    out = r(**read)
    y = ref.record_decode(w.record_desc, want, k_scale=k_scale, fmt=fmt).to(torch.bfloat16)
    assert _same_bits(torch, out.float(), y.float()), "%s: read op: %s" % (name, _diff(torch, out, y))
    print("%s (%s, %s): %d rows written and read as the reference says" % (name, KERNEL_SPEC[name], fmt, T))


if __name__ == "__main__":
    sys.exit(main(globals()))
