"""DeepSeek-V3.2's fp8_tile rows: the write against tile_rows byte for byte with tiles of very different ranges, NaN,
+-inf and padding slots, the kernel's parameters as the library reports them, and the argument errors of tile caches
(host backend and CUDA).

    python3 python/tests/test_binding_fp8_tile.py    # this file; python3 python/tests/test_binding.py runs them all"""
import math
import sys

from _cases import expected_bases, layout_cache
from _reference import FLT_MIN, SPECS, make_inputs, reference
from _support import _cuda_torch, _equal_bits, _expect, _torch, context, main


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


def test_host_torch_fp8_tile_pow2_rows():
    """deepseek_v32_pow2: the same row with every tile scale a power of two, against tile_rows byte for byte; the
    kernel reports the scale form and the readers its rows are for (deepseek_v32's f32 scales are not for E8M0
    readers), and an E8M0 reader (the scale's exponent alone) reads its rows as an f32 reader does."""
    torch = _torch()
    c = context("host")
    k = c.kernel("deepseek_v32_pow2", kv="fp8_tile", q="absorbed", layout="paged")
    i = k.info
    assert (i.fp8_tile, i.fp8_tile_scale, i.row_bytes) == (128, "pow2", 656), i
    assert "E8M0" in i.fp8_tile_readers and "FlashMLA sm_100" in i.fp8_tile_readers, i.fp8_tile_readers
    f = c.kernel("deepseek_v32", kv="fp8_tile", q="absorbed", layout="paged").info
    assert f.fp8_tile_scale == "f32" and "deepseek_v32_pow2" in f.fp8_tile_readers, f.fp8_tile_readers
    assert c.kernel("deepseek_v32", kv="bf16", q="absorbed").info.fp8_tile_readers is None
    x = make_inputs(torch, "deepseek_v32_pow2", "absorbed", "fp8_tile", 20, 2, "cpu", seed=53)
    kn = x["k_nope"]
    kn[2, :128] = 0.0
    kn[4, 128:256] *= 1e-30
    kn[6, 256:384] *= 1e30
    kn[8, 5] = float("nan")
    kn[11, 130] = float("inf")
    want = reference(torch, "deepseek_v32_pow2", "absorbed", "fp8_tile", x)
    cache = layout_cache(torch, "deepseek_v32_pow2", "fp8_tile", "paged", x["kv_cache"].numel() // 656, 16, "cpu")
    k(**dict(x, kv_cache=cache["kv_cache"]))
    exp = expected_bases(torch, cache, want["kv_cache"].reshape(-1, 656), 512)[0]
    assert torch.equal(cache["bases"][0], exp), "pow2 rows: %d bytes differ" % int((cache["bases"][0] != exp).sum())
    flat = want["kv_cache"].reshape(-1, 656)
    sl = x["slots"].long()
    rows = flat[sl[(sl >= 0) & (sl < flat.shape[0])]]  # the rows written (a slot is padding, one past the cache)
    rows = rows[rows[:, 512:528].contiguous().view(torch.float32).isfinite().all(dim=1)]
    scale = rows[:, 512:528].contiguous().view(torch.int32)
    assert bool((scale & 0x7FFFFF == 0).all()), "every finite scale is a power of two"
    e8m0 = (scale & 0x7F800000).view(torch.float32)  # what an E8M0 reader takes: the exponent alone
    assert torch.equal(e8m0, rows[:, 512:528].contiguous().view(torch.float32))


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


def test_host_tile_errors():
    torch = _torch()
    _check_tile_errors(torch, context("host"), "cpu")


# ---- CUDA ---------------------------------------------------------------------------------------------------
def test_cuda_fp8_tile_errors():
    torch = _cuda_torch()
    _check_tile_errors(torch, context("cuda"), "cuda")


if __name__ == "__main__":
    sys.exit(main(globals()))
