"""KV cache layouts (flat, paged with and without a unit head dim, split) as engines allocate them, with padding between
entries and after blocks: the rows land where the layout says and nothing else is written; the layout and op enums;
the argument errors of layouts and read kernels.

    python3 python/tests/test_binding_layouts.py    # this file; python3 python/tests/test_binding.py runs them all"""
import sys

from _cases import LAYOUT_CASES, TILE_LAYOUT_CASES, layout_cache, run_layout_case
from _reference import make_inputs
from _support import _cuda_spec, _cuda_torch, _expect, _torch, context, main, parametrize

import ropekv  # noqa: E402  (after _support, which puts python/ on sys.path)


@parametrize("spec,kv,layout,B,unit_dim", LAYOUT_CASES + TILE_LAYOUT_CASES)
def test_host_torch_layouts(spec, kv, layout, B, unit_dim):
    """Paged and split caches as engines hold them, with padding between entries and after blocks: the rows land
    where the layout says and nothing else is written."""
    torch = _torch()
    T = 50 if B == 64 else 11  # rows (make_inputs: 16-row blocks for 2T + 16 slots) a multiple of B
    run_layout_case(torch, context("host"), spec, kv, layout, B, unit_dim=unit_dim, T=T,
                    specials=kv != "fp8_tile", seed=43)


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
    # an fp8 read with a scale convention: a missing k_scale is refused; 1.0 said as a number is the unit tensor's
    r8 = ctx.kernel(spec, kv="fp8_e4m3", layout="paged", op="read")
    p8 = layout_cache(torch, spec, "fp8_e4m3", "paged", rows, 16, device)
    out1 = torch.zeros(T, 576, dtype=torch.bfloat16, device=device)
    e = _expect(ValueError, lambda: r8(kv_cache=p8["kv_cache"], slots=slots, out=out1))
    assert "k_scale is required" in str(e) and "reads an fp8 cache under scale convention" in str(e), e
    r8(kv_cache=p8["kv_cache"], slots=slots, out=out1, k_scale=1.0)
    r8(kv_cache=p8["kv_cache"], slots=slots, out=out, k_scale=torch.ones(1, device=device))
    assert torch.equal(out1, out)
    _expect(TypeError, lambda: r8(kv_cache=paged["kv_cache"], slots=slots, out=out,
                                  k_scale=torch.ones(1, device=device)))  # a bf16 cache for an fp8 kernel
    # the library's own checks of a read launch (raw arguments bypass the Python ones)
    args, keep = r.args(kv_cache=paged["kv_cache"], slots=slots, out=out)
    args.out = None
    _expect(ropekv.RopekvError, lambda: r.launch_raw(args), {"ROPEKV_ERR_NULL"})
    del keep


def test_host_layout_errors():
    torch = _torch()
    _check_layout_errors(torch, context("host"), "cpu")


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


# ---- CUDA ---------------------------------------------------------------------------------------------------
@parametrize("spec,kv,layout,B,unit_dim", TILE_LAYOUT_CASES + LAYOUT_CASES)
def test_cuda_layouts(spec, kv, layout, B, unit_dim):
    torch = _cuda_torch()
    ctx = context("cuda")
    _cuda_spec(ctx, spec, kv=kv, layout=layout)
    run_layout_case(torch, ctx, spec, kv, layout, B, device="cuda", unit_dim=unit_dim, T=1016 if B == 64 else 67,
                    H=16, specials=kv != "fp8_tile", seed=71)


if __name__ == "__main__":
    sys.exit(main(globals()))
