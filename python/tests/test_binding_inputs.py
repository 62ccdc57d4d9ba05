"""Bad inputs the binding refuses before they reach ctypes or the dispatcher, each naming what is wrong: a NUL byte in a
string handed to C (ctypes would cut the string there), an int past its C field's range (ctypes would wrap it), tensors
on more than one device given to torch.ops.ropekv (a meta tensor among CPU ones selects the fake implementation, a
silent no-op), and a q_out dtype that is no query output's.

    python3 python/tests/test_binding_inputs.py    # this file; python3 python/tests/test_binding.py runs them all"""
import os
import sys

from _reference import make_inputs
from _support import _CACHE_DIR, _expect, _torch, context, main

import ropekv  # noqa: E402  (after _support, which puts python/ on sys.path)
from ropekv import _core  # noqa: E402


# ---- strings: a NUL byte ---------------------------------------------------------------------------------------
def test_nul_in_strings():
    """Every string the binding hands to C as a C string: refused with a NUL byte in it, by name (before, the spec
    name "deepseek_v3\\0junk" silently got the deepseek_v3 kernel)."""
    ctx = context("host")
    for call, what in ((lambda: ctx.kernel("deepseek_v3\0junk"), "spec"),
                       (lambda: ctx.query("deepseek_v3\0junk"), "spec"),
                       (lambda: ropekv.Context("host", target="host\0x"), "target"),
                       (lambda: ropekv.Context("host", cache_dir=os.path.join(_CACHE_DIR, "a\0b")), "cache_dir"),
                       (lambda: ctx.load_spec(os.path.join(_CACHE_DIR, "x\0.lua")), "path"),
                       (lambda: ctx.load_spec_text("mine\0.lua", "return 1"), "name")):
        e = _expect(ValueError, call)
        assert str(e).startswith(what + " must not contain a NUL byte"), str(e)


# ---- ints: the C field's range --------------------------------------------------------------------------------
def test_int_ranges():
    """An int past its C field's range is refused by name, not wrapped (2**64 as 0); the range's ends are taken."""
    e = _expect(ValueError, lambda: ropekv.Context("host", device=2**32))
    assert "device must be an int from 0 to 2147483647" in str(e), str(e)
    for field, value in (("tokens", 2**64), ("tokens", 2**63), ("min_slot", -2**63 - 1), ("q_nope", -1),
                         ("q_nope", 2**64), ("size", 2**64)):
        e = _expect(ValueError, lambda: _core.raw_args({field: value}))
        assert str(e).startswith("ropekv_args field %s must be an int from" % field), str(e)
        assert str(value) in str(e), str(e)
    a = _core.raw_args({"q_nope": 2**64 - 1, "min_slot": -2**63, "tokens": 2**63 - 1})
    assert (a.q_nope, a.min_slot, a.tokens) == (2**64 - 1, -2**63, 2**63 - 1)
    _expect(TypeError, lambda: _core.raw_args({"tokens": 1.0}))
    k = context("host").kernel("deepseek_v3")
    e = _expect(ValueError, lambda: k.launch_raw({"tokens": 0}, stream=2**64))
    assert str(e).startswith("stream must be an int from 0 to"), str(e)
    ok, why = context("host").query("deepseek_v3", raw={"kv_rows": 2**64})
    assert not ok and "ropekv_args field kv_rows" in why, why


def test_min_slot_range():
    """min_slot of a launch with tensors: an int64, 2**63 and 2**64 refused by name (2**64 used to wrap to 0)."""
    torch = _torch()
    k = context("host").kernel("deepseek_v3")
    x = make_inputs(torch, "deepseek_v3", "absorbed", "bf16", T=3, H=2, device="cpu")
    for bad in (2**63, 2**64, -1):
        e = _expect(ValueError, lambda: k(**x, min_slot=bad))
        assert str(e).startswith("min_slot must be an int from 0 to 2**63 - 1"), str(e)
    k(**x, min_slot=2**63 - 1)  # every slot below it: nothing written, and no error


# ---- the operators: devices and dtypes ------------------------------------------------------------------------
def test_ops_mixed_devices():
    """torch.ops.ropekv.* with tensors on more than one device (a meta kv_cache, the rest on the CPU) is refused,
    naming the tensors and their devices; under torch 1.13 the dispatcher ran the fake implementation instead."""
    torch = _torch()
    import ropekv.ops
    x = make_inputs(torch, "deepseek_v3", "absorbed", "bf16", T=3, H=2, device="cpu")
    x["kv_cache"] = torch.empty(x["kv_cache"].shape, dtype=x["kv_cache"].dtype, device="meta")
    e = _expect(ValueError, lambda: ropekv.ops.write("deepseek_v3", **x))
    assert "the tensors must be on one device" in str(e) and "kv_cache on meta" in str(e), str(e)
    assert "q_nope, q_pe, q_out, k_nope, k_pe, positions, slots, cos_sin on cpu" in str(e), str(e)
    out = torch.zeros(3, 576, dtype=torch.bfloat16)
    e = _expect(ValueError, lambda: ropekv.ops.read("deepseek_v3", kv_cache=x["kv_cache"], slots=x["slots"], out=out))
    assert "kv_cache on meta" in str(e) and "slots, out on cpu" in str(e), str(e)
    # all on meta (tracing): the fake implementation, no error
    meta = {n: torch.empty(t.shape, dtype=t.dtype, device="meta") for n, t in x.items()}
    ropekv.ops.write("deepseek_v3", **meta)


def test_ops_q_out_dtype():
    """ropekv.ops.write takes q_dtype from q_out's dtype: one that is no query output's (float16) is refused naming
    the dtypes that are, instead of being taken for fp8 and told it must be uint8."""
    torch = _torch()
    import ropekv.ops
    x = make_inputs(torch, "deepseek_v3", "absorbed", "bf16", T=3, H=2, device="cpu")
    x["q_out"] = x["q_out"].to(torch.float16)
    e = _expect(TypeError, lambda: ropekv.ops.write("deepseek_v3", **x))
    assert str(e).startswith("q_out must be bfloat16 (q_dtype bf16) or uint8"), str(e)
    assert "(q_dtype fp8_e4m3), got float16" in str(e), str(e)


if __name__ == "__main__":
    sys.exit(main(globals()))
