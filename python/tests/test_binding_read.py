"""The read-back op: random cache rows (every fp8 byte, bf16 specials, tile scales over 2^60) read through each layout
into out (or out + out_rope), dequantized as read_rows says, bit for bit; a new output when none is passed; a write
read back by its read kernel (host backend and CUDA).

    python3 python/tests/test_binding_read.py    # this file; python3 python/tests/test_binding.py runs them all"""
import sys

from _cases import READ_CASES, run_layout_case, run_read_case
from _reference import SPECS, read_reference
from _support import _cuda_spec, _cuda_torch, _equal_bits, _torch, context, main, parametrize


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


# ---- CUDA ---------------------------------------------------------------------------------------------------
@parametrize("spec,kv,layout,B,split_out,min_slot,slots", READ_CASES)
def test_cuda_read(spec, kv, layout, B, split_out, min_slot, slots):
    torch = _cuda_torch()
    ctx = context("cuda")
    _cuda_spec(ctx, spec, kv=kv, layout=layout, op="read")
    run_read_case(torch, ctx, spec, kv, layout, B, device="cuda", split_out=split_out, min_slot=min_slot,
                  slots_dtype=slots, T=1000, rows=2048, unit_dim=layout == "paged" and B == 8)


if __name__ == "__main__":
    sys.exit(main(globals()))
