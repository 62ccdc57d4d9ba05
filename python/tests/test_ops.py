"""Tests of the torch.library operators (ropekv.ops: torch.ops.ropekv.write / write_q_inplace / read) and of the
argument plans that make repeated launches cheap (Kernel.__call__ and the operators share them).

    python3 python/tests/test_ops.py            # plain runner (no pytest needed)

Needs torch (every test skips without it). On the host backend (CPU tensors) the operators are compared bit for
bit with the reference of the binding's tests (_reference.py); torch.compile(fullgraph=True) runs where torch has it
(2.x), CUDA graph capture where there is a CUDA device. With torch 1.13 (no torch.compile, no register_fake) the
operators are registered with a Meta kernel as their fake implementation, and the compile tests skip with that
reason."""
import contextlib
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import _cases as cs  # noqa: E402
import _reference as rf  # noqa: E402
import _support as sp  # noqa: E402
from _support import _expect, parametrize, skip  # noqa: E402

import ropekv  # noqa: E402


def _ops(device="cpu"):
    torch = sp._torch() if device == "cpu" else sp._cuda_torch()
    import ropekv.ops
    ropekv.ops.use_context(sp.context("host" if device == "cpu" else "cuda"))  # the tests' private cache directory
    return torch, ropekv.ops


def _compile_torch():
    torch = sp._torch()
    if not hasattr(torch, "compile"):
        skip("torch %s has no torch.compile" % torch.__version__)
    return torch


# ---- the operators' schemas ---------------------------------------------------------------------------------
def test_schemas_name_the_tensors_written():
    """Each operator's schema marks exactly the tensors its kernel writes, so torch.compile orders and
    functionalizes the writes; nothing is returned (the outputs are the caller's tensors)."""
    torch, ops = _ops()
    want = {"write": {"q_out", "kv_cache", "kv_rope_cache", "norm_out"},
            "write_q_inplace": {"q_pe", "q_out", "kv_cache", "kv_rope_cache", "norm_out"},
            "read": {"out", "out_rope"}}
    for name, written in want.items():
        schema = getattr(torch.ops.ropekv, name).default._schema
        got = {a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write}
        assert got == written, (name, got, written)
        assert len(schema.returns) == 0, schema
        names = [a.name for a in schema.arguments]
        assert names[:2] == ["spec", "kv"], names
        # the norm's arguments come last with defaults, so positional calls written before them stay valid
        # and the record's name after every tensor
        tail = (["min_slot", "norm", "norm_weight", "norm_out", "write_mask", "record"] if name != "read" else
                ["min_slot", "record"])
        assert names[-len(tail):] == tail, names
        if name != "read":
            defaults = {a.name: a.default_value for a in schema.arguments if a.name in tail}
            assert defaults == {"min_slot": 0, "norm": "none", "norm_weight": None, "norm_out": None,
                                "write_mask": None, "record": None}, defaults


def test_import_without_ops_needs_no_torch():
    """import ropekv does not import torch or register anything; ropekv.ops does."""
    import subprocess
    code = ("import sys; sys.path.insert(0, %r); import ropekv; assert 'torch' not in sys.modules; "
            "assert 'ropekv.ops' not in sys.modules; print('ok')" % os.path.join(sp.ROOT, "python"))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.stdout, r.stderr)


# ---- the operators against the reference (host backend) ---------------------------------------------------------
OP_CASES = [("deepseek_v3", "absorbed", "bf16"), ("deepseek_v3", "absorbed", "fp8_e4m3"),
            ("deepseek_v3", "zero_copy", "fp8_e4m3"), ("kimi_k2", "inplace", "fp8_e4m3"),
            ("deepseek_v3", "none", "fp8_e4m3"), ("minicpm3_4b", "zero_copy", "bf16")]


@parametrize("spec,q,kv", OP_CASES)
def test_op_write_host(spec, q, kv):
    torch, _ = _ops()
    cs.run_and_check(torch, sp.context("host"), spec, q, kv, T=11, H=3, device="cpu", specials=True, via="op")


def test_op_dispatcher_host():
    """torch.ops.ropekv.write called itself (the dispatcher's path: what a compiled graph's node calls; ropekv.ops.write
    launches eager calls directly) writes the reference's bits."""
    torch, _ = _ops()
    x = rf.make_inputs(torch, "deepseek_v3", "absorbed", "fp8_e4m3", 9, 3, "cpu", specials=True, seed=7)
    want = rf.reference(torch, "deepseek_v3", "absorbed", "fp8_e4m3", x)
    torch.ops.ropekv.write("deepseek_v3", "fp8_e4m3", "absorbed", "bf16", "flat", x["q_nope"], x["q_pe"], x["q_out"],
                           x["k_nope"], x["k_pe"], x["kv_cache"], x["positions"], x["slots"], x["cos_sin"], None,
                           x.get("k_scale"), None, None, 0)
    assert sp.compare_bits(torch, x["kv_cache"], want["kv_cache"], "fp8")[3] == 0
    assert sp.compare_bits(torch, x["q_out"], want["q_out"], "bf16")[3] == 0
    out = torch.zeros(4, 576, dtype=torch.bfloat16)
    slots = x["slots"][:4].clone()
    torch.ops.ropekv.read("deepseek_v3", "fp8_e4m3", "flat", x["kv_cache"], None, slots, x.get("k_scale"), out, None, 0)
    direct = ropekv.ops.read("deepseek_v3", kv="fp8_e4m3", kv_cache=x["kv_cache"], slots=slots,
                             out=torch.zeros(4, 576, dtype=torch.bfloat16), k_scale=x.get("k_scale"))
    assert torch.equal(out.view(torch.int16), direct.view(torch.int16))


def test_op_write_fp8_q_host():
    torch, _ = _ops()
    cs.run_and_check(torch, sp.context("host"), "deepseek_v3", "absorbed", "fp8_e4m3", T=7, H=3, device="cpu",
                     q_dtype="fp8_e4m3", q_scale=0.75, via="op")


@parametrize("spec,kv,layout,B,unit_dim", cs.LAYOUT_CASES)
def test_op_write_layouts_host(spec, kv, layout, B, unit_dim):
    """Paged, split and fp8_tile caches through the operator, every cache byte against the reference."""
    torch, _ = _ops()
    cs.run_layout_case(torch, sp.context("host"), spec, kv, layout, B, unit_dim=unit_dim, T=50 if B == 64 else 11,
                       via="op")


@parametrize("spec,kv,layout,B,split_out,min_slot,slots", [c for c in cs.READ_CASES if c[2] != "split" or c[4]])
def test_op_read_host(spec, kv, layout, B, split_out, min_slot, slots):
    torch, _ = _ops()
    cs.run_read_case(torch, sp.context("host"), spec, kv, layout, B, split_out=split_out, min_slot=min_slot,
                     slots_dtype=slots, unit_dim=layout == "paged" and B == 8, via="op")


def test_op_errors_host():
    """The operators check what Kernel.__call__ checks and name the fix."""
    torch, ops = _ops()
    x = rf.make_inputs(torch, "deepseek_v3", "absorbed", "bf16", 8, 2, "cpu", seed=3)
    e = _expect(ropekv.RopekvError, lambda: ops.write("deepseek_v3", kv="fp8_tile", **x))
    assert "specs of the same L and R that list it: deepseek_v32" in str(e), e
    _expect(TypeError, lambda: ops.write("deepseek_v3", **dict(x, q_pe=x["q_pe"].float())))
    _expect(ValueError, lambda: ops.write("deepseek_v3", **dict(x, q_pe=x["q_pe"][:, :1])))
    _expect(TypeError, lambda: ops.write("deepseek_v3", **dict(x, slots=x["slots"].to(torch.int16))))
    _expect(ValueError, lambda: ops.write("deepseek_v3", **x, min_slot=-2))
    # aliasing: q_pe read from the q_out rows the kernel writes
    e = _expect(ropekv.RopekvError, lambda: ops.write("deepseek_v3", **dict(x, q_pe=x["q_out"][..., 512:])),
                {"ROPEKV_ERR_ALIAS"})
    assert "q_out" in e.message, e
    e = _expect(ropekv.RopekvError, lambda: torch.ops.ropekv.write(
        "deepseek_v3", "bf16", "absorbed", "bf16", "flat", x["q_nope"], x["q_out"][..., 512:], x["q_out"], x["k_nope"],
        x["k_pe"], x["kv_cache"], x["positions"], x["slots"], x["cos_sin"], None, None, None, None),
        {"ROPEKV_ERR_ALIAS"})


NORM_OP_CASES = [("deepseek_v3", "absorbed", "fp8_e4m3", 11, None, 0), ("kimi_k2", "inplace", "bf16", 11, None, 0),
                 ("kimi_k2", "absorbed", "fp8_e4m3", 6, 11, 1), ("deepseek_v32", "absorbed", "fp8_tile", 9, None, 0)]


@parametrize("spec,q,kv,T,K,min_slot", NORM_OP_CASES)
def test_op_write_norm_host(spec, q, kv, T, K, min_slot):
    """ropekv.ops.write(..., norm="rms" / "rms_out", norm_weight=, norm_out=) against the unfused composition and the
    reference, bit for bit (test_binding.run_norm_case); write_q_inplace for the inplace form."""
    torch, _ = _ops()
    cs.run_norm_case(torch, sp.context("host"), spec, q, kv, T, 3, "cpu", seed=53, kv_tokens=K, min_slot=min_slot,
                     specials=True, via="op")


def test_op_norm_dispatcher_and_cache_key_host():
    """torch.ops.ropekv.write with the norm's arguments (positional, as a graph's node calls it) writes what the
    eager wrapper writes; the operators' kernel cache keeps one kernel per norm."""
    torch, ops = _ops()
    x, w = cs.norm_inputs(torch, "deepseek_v3", "absorbed", "bf16", 9, 2, "cpu", seed=57)
    y, _ = cs.norm_inputs(torch, "deepseek_v3", "absorbed", "bf16", 9, 2, "cpu", seed=57)
    nx, ny = (torch.zeros(9, 512, dtype=torch.bfloat16) for _ in range(2))
    ops.write("deepseek_v3", **x, norm="rms_out", norm_weight=w, norm_out=nx)
    torch.ops.ropekv.write("deepseek_v3", "bf16", "absorbed", "bf16", "flat", y["q_nope"], y["q_pe"], y["q_out"],
                           y["k_nope"], y["k_pe"], y["kv_cache"], y["positions"], y["slots"], y["cos_sin"], None, None,
                           None, None, 0, "rms_out", w, ny)
    for a, b in ((x["kv_cache"], y["kv_cache"]), (x["q_out"], y["q_out"]), (nx, ny)):
        assert sp._same_bits(torch, a, b)
    z, _ = cs.norm_inputs(torch, "deepseek_v3", "absorbed", "bf16", 9, 2, "cpu", seed=57)
    ops.write("deepseek_v3", **z)  # the same variant without the norm: another kernel, the raw c_kv cached
    assert not torch.equal(z["kv_cache"], x["kv_cache"])
    norms = {k[-2] for k in ops._KERNELS if k[1] == "deepseek_v3" and k[2] == "bf16" and k[3] == "absorbed"
             and k[-3] == "write" and k[-1] is None}
    assert {"none", "rms_out"} <= norms, norms


def test_op_write_record_host():
    """A record chosen by name (record="fp8_ds_mla", kv ignored) writes a uint8 cache of its row_bytes: the same bytes
    as deepseek_v32's fp8_tile row, which is that record; KernelInfo shows the record; a name the spec does not have
    is refused naming its rows."""
    torch, ops = _ops()
    x = cs.make_inputs(torch, "deepseek_v32", "absorbed", "fp8_tile", 9, 2, "cpu", seed=11)
    y = cs.make_inputs(torch, "deepseek_v32", "absorbed", "fp8_tile", 9, 2, "cpu", seed=11)
    ops.write("deepseek_v32", kv="fp8_tile", **x)
    ops.write("deepseek_v32", record="fp8_ds_mla", **y)
    assert y["kv_cache"].dtype == torch.uint8
    for a, b in ((x["kv_cache"], y["kv_cache"]), (x["q_out"], y["q_out"])):
        assert sp._same_bits(torch, a, b)
    k = sp.context("host").kernel("deepseek_v32", q="none", record="fp8_ds_mla")
    assert (k.record, k.info.record, k.info.record_row_bytes, k.info.record_split_at) == ("fp8_ds_mla", "fp8_ds_mla",
                                                                                          656, 0), k.info
    assert "_recfp8dsmla_" in k.name, k.name
    e = _expect(ropekv.RopekvError, lambda: sp.context("host").kernel("deepseek_v32", record="nvfp4"))
    assert "no record named 'nvfp4'" in str(e) and "fp8_ds_mla" in str(e), e


def test_op_norm_errors_host():
    """The operators refuse the norm's tensors as Kernel.__call__ does, naming them."""
    torch, ops = _ops()
    x, w = cs.norm_inputs(torch, "deepseek_v3", "absorbed", "bf16", 8, 2, "cpu", seed=59)
    no = torch.zeros(8, 512, dtype=torch.bfloat16)
    e = _expect(ValueError, lambda: ops.write("deepseek_v3", **x, norm="rms"))
    assert "norm_weight is required" in str(e), e
    e = _expect(TypeError, lambda: ops.write("deepseek_v3", **x, norm="rms", norm_weight=w.float()))
    assert "norm_weight must be bfloat16" in str(e), e
    e = _expect(ValueError, lambda: ops.write("deepseek_v3", **x, norm="rms", norm_weight=w[:256]))
    assert "norm_weight must have shape [512]" in str(e), e
    e = _expect(ValueError, lambda: ops.write("deepseek_v3", **x, norm="rms", norm_weight=w, norm_out=no))
    assert "norm_out is written by norm='rms_out' kernels only" in str(e), e
    e = _expect(ValueError, lambda: ops.write("deepseek_v3", **x, norm_weight=w))  # norm defaults to none
    assert "norm_weight is for a kernel with the fused kv_a RMSNorm" in str(e), e
    _expect(ValueError, lambda: ops.write("deepseek_v3", **x, norm="rms_out", norm_weight=w))
    _expect(ValueError, lambda: ops.write("deepseek_v3", **x, norm="layer", norm_weight=w))
    e = _expect(ropekv.RopekvError, lambda: ops.write("minicpm3_4b", **rf.make_inputs(
        torch, "minicpm3_4b", "absorbed", "bf16", 4, 2, "cpu"), norm="rms", norm_weight=w[:256]))
    assert e.status == "ROPEKV_ERR_UNSUPPORTED", e


def test_padded_query_heads():
    """DeepSeek-V4 (one 512-wide head, the kv norm over it, the weightless query norm): a q_out with more heads than
    q_pe gets the model's heads as an unpadded launch writes them and zeros in the others (+0 bits, bf16 and fp8); a
    padded q_out on another q form is refused."""
    torch, ops = _ops()
    T, H, HQ, L, R = 5, 2, 8, 448, 64
    g = torch.Generator().manual_seed(17)

    def rnd(*shape):
        return torch.randn(*shape, generator=g).to(torch.bfloat16)

    x = dict(q_nope=rnd(T, H, L), q_pe=rnd(T, H, R), k_nope=rnd(T, L), k_pe=rnd(T, R),
             positions=torch.arange(T, dtype=torch.int64), slots=torch.arange(T, dtype=torch.int64),
             cos_sin=torch.randn(8, R, generator=g), norm="rms", norm_weight=rnd(L + R))
    for q_dtype, make in (("bf16", lambda h: torch.full((T, h, L + R), 3.0, dtype=torch.bfloat16)),
                          ("fp8_e4m3", lambda h: torch.full((T, h, L + R), 0x5A, dtype=torch.uint8))):
        padded, plain = make(HQ), make(H)
        caches = [torch.zeros(T, L + R, dtype=torch.bfloat16) for _ in range(2)]
        scale = dict(q_scale=torch.tensor([0.5])) if q_dtype == "fp8_e4m3" else {}
        ops.write("deepseek_v4_flash", q_out=padded, kv_cache=caches[0], **x, **scale)
        ops.write("deepseek_v4_flash", q_out=plain, kv_cache=caches[1], **x, **scale)
        assert torch.equal(padded[:, :H].view(torch.uint8), plain.view(torch.uint8)), q_dtype
        assert (padded[:, H:].contiguous().view(torch.uint8) == 0).all(), q_dtype
        assert torch.equal(caches[0].view(torch.int16), caches[1].view(torch.int16))
        assert (plain.view(torch.uint8) != (3 if q_dtype == "fp8_e4m3" else 0)).any()
    e = _expect(ropekv.RopekvError, lambda: ops.write("deepseek_v3", **rf.make_inputs(
        torch, "deepseek_v3", "none", "bf16", 4, 2, "cpu"), q_out=torch.zeros(4, 4, 576, dtype=torch.bfloat16),
        q_form="zero_copy", q_pe=torch.zeros(4, 2, 64, dtype=torch.bfloat16)))
    assert "padded query heads are written by q form absorbed" in str(e), e


def test_write_mask():
    """A write mask (bool or uint8) writes the KV rows where it is set and leaves the others as a negative slot
    does; the query rows are written either way. Refused on a read kernel's argument list."""
    torch, ops = _ops()
    T = 9
    x = rf.make_inputs(torch, "deepseek_v3", "absorbed", "fp8_e4m3", T, 2, "cpu", seed=23)
    mask = torch.tensor([t % 3 != 1 for t in range(T)])

    def run(**kw):
        y = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in x.items()}
        y.update(kw)
        ops.write("deepseek_v3", kv="fp8_e4m3", **y)
        return y["kv_cache"].view(torch.uint8), y["q_out"]

    slots = x["slots"].clone()
    slots[~mask] = -1
    want_kv, want_q = run(slots=slots)
    for m in (mask, mask.to(torch.uint8) * 7):
        got_kv, got_q = run(write_mask=m)
        assert torch.equal(got_kv, want_kv) and torch.equal(got_q.view(torch.int16), want_q.view(torch.int16))
    all_kv, _ = run()
    assert not torch.equal(all_kv, want_kv)  # the mask held rows back
    e = _expect(TypeError, lambda: run(write_mask=mask.to(torch.int32)))
    assert "write_mask must be bool or uint8" in str(e), e


def test_op_fake_implementation():
    """The fake implementation (a Meta kernel on torch 1.13, register_fake on 2.x) runs on meta tensors without
    launching anything: what tracing calls."""
    torch, ops = _ops()
    x = rf.make_inputs(torch, "deepseek_v3", "absorbed", "fp8_e4m3", 4, 2, "cpu", seed=5)
    meta = {k: (v.to("meta") if isinstance(v, torch.Tensor) else v) for k, v in x.items()}
    assert ops.write("deepseek_v3", kv="fp8_e4m3", **meta) is None
    w, no = (torch.empty(*shape, dtype=torch.bfloat16, device="meta") for shape in ((512,), (4, 512)))
    assert ops.write("deepseek_v3", kv="fp8_e4m3", **meta, norm="rms_out", norm_weight=w, norm_out=no) is None
    assert ops.write("kimi_k2", kv="fp8_e4m3", q_pe=meta["q_pe"], **{k: v for k, v in meta.items() if "q_" not in k},
                     norm="rms", norm_weight=w) is None  # write_q_inplace
    out = torch.empty(4, 576, dtype=torch.bfloat16, device="meta")
    slots = torch.zeros(4, dtype=torch.int64, device="meta")
    assert ops.read("deepseek_v3", kv="fp8_e4m3", kv_cache=meta["kv_cache"], slots=slots, out=out) is out


def test_number_scales_on_the_dispatchers_path():
    """A scale given as a number where the operator is called through the dispatcher (torch.compile, meta tensors):
    a float32 tensor [1] of its value on the cache's device (the schema takes tensors); one that is not a positive
    finite number is a ValueError naming it, as in eager calls. With the compiling probe answering True on CPU
    tensors, the launch writes what the eager call with the same scale as a tensor writes."""
    torch, ops = _ops()
    x = rf.make_inputs(torch, "deepseek_v3", "absorbed", "fp8_e4m3", 4, 2, "cpu", seed=5)
    meta = {k: (v.to("meta") if isinstance(v, torch.Tensor) else v) for k, v in x.items() if k != "k_scale"}
    assert ops.write("deepseek_v3", kv="fp8_e4m3", **meta, k_scale=0.5) is None
    e = _expect(ValueError, lambda: ops.write("deepseek_v3", kv="fp8_e4m3", **meta, k_scale=-1.0))
    assert "k_scale" in str(e), e
    y = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in x.items() if k != "k_scale"}
    z = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in x.items() if k != "k_scale"}
    ops.write("deepseek_v3", kv="fp8_e4m3", **y, k_scale=torch.tensor([0.5]))
    probe = ops._is_compiling
    ops._is_compiling = lambda: True
    try:
        ops.write("deepseek_v3", kv="fp8_e4m3", **z, k_scale=0.5)
    finally:
        ops._is_compiling = probe
    assert torch.equal(y["kv_cache"].view(torch.uint8), z["kv_cache"].view(torch.uint8))
    assert not torch.equal(y["kv_cache"].view(torch.uint8), x["kv_cache"].view(torch.uint8))


# ---- argument plans ----------------------------------------------------------------------------------------
# Each plan test runs on both paths of a launch with a signature seen before: the C++ plans (python/ropekv/_native.py,
# on by default; python_ops builds them) and the Python ones (ROPEKV_TORCH_NATIVE=0). "off" swaps the built module
# out for the test's length.
@contextlib.contextmanager
def _NativePath(on):
    from ropekv import _native
    if not on:
        with _native.python_path():
            yield None
        return
    if _native.module() is None:
        skip("the C++ argument plans could not be built here (the warning above says why)")
    yield _native.module()


@parametrize("native", [True, False])
def test_plans_reuse_checks_not_pointers(native):
    with _NativePath(native):
        _plans_reuse_checks_not_pointers()


def _plans_reuse_checks_not_pointers():
    """A second launch with the same signature takes its pointers from its own tensors (the rows land in the new
    cache, the old one is untouched); the library still checks every launch's addresses (a misaligned view of
    the same shape and strides is refused); a new signature runs every check again."""
    torch = sp._torch()
    ctx = sp.context("host")
    k = ctx.kernel("deepseek_v3", kv="bf16", q="absorbed")
    x = rf.make_inputs(torch, "deepseek_v3", "absorbed", "bf16", 9, 2, "cpu", seed=21)
    want = rf.reference(torch, "deepseek_v3", "absorbed", "bf16", x)
    first = dict(x, kv_cache=x["kv_cache"].clone(), q_out=x["q_out"].clone())
    k(**first)
    n = len(k._plans)
    second = dict(x, kv_cache=x["kv_cache"].clone(), q_out=x["q_out"].clone())
    before = first["kv_cache"].clone()
    k(**second)
    assert len(k._plans) == n, "the same signature made a second plan"
    for name in ("kv_cache", "q_out"):
        assert sp.compare_bits(torch, second[name], want[name], "bf16")[3] == 0, name
    assert torch.equal(first["kv_cache"], before), "a reused plan wrote the first launch's cache"
    # same dtype, shape and strides, but q_nope 2 bytes past a 16-byte boundary
    base = torch.empty(9 * 2 * 576 + 1, dtype=torch.bfloat16)
    q_nope = base[1:].view(9, 2, 576)[..., :512]
    q_nope_aligned = base[:-1].view(9, 2, 576)[..., :512]
    k(**dict(x, q_nope=q_nope_aligned))
    _expect(ropekv.RopekvError, lambda: k(**dict(x, q_nope=q_nope)), {"ROPEKV_ERR_ALIGN"})
    # a new signature: the Python checks run again
    _expect(ValueError, lambda: k(**dict(x, q_pe=x["q_pe"][:, :1])))
    _expect(TypeError, lambda: k(**dict(x, positions=x["positions"].to(torch.int32))))


@parametrize("native", [True, False])
def test_plans_zero_copy_alias(native):
    """Zero-copy: a q_nope that is q_out itself is dropped (not read); one that is not is refused. Whether it is
    joins the plan's signature, so neither case takes the other's plan."""
    torch = sp._torch()
    with _NativePath(native):
        _plans_zero_copy_alias(torch)


def _plans_zero_copy_alias(torch):
    ctx = sp.context("host")
    k = ctx.kernel("deepseek_v3", kv="bf16", q="zero_copy")
    x = rf.make_inputs(torch, "deepseek_v3", "zero_copy", "bf16", 5, 2, "cpu", seed=23)
    same = x["q_out"][..., :512]
    k(**dict(x, q_nope=same))
    k(**dict(x, q_nope=same))
    other = x["q_out"].clone()[..., :512]
    _expect(ValueError, lambda: k(**dict(x, q_nope=other)))


@parametrize("native", [True, False])
def test_plans_bounded(native):
    torch = sp._torch()
    ctx = sp.context("host")
    k = ctx.kernel("deepseek_v3", kv="bf16", q="absorbed")
    from ropekv import _torch as rt
    with _NativePath(native) as m:
        for T in range(1, rt._PLANS_MAX + 10):
            x = rf.make_inputs(torch, "deepseek_v3", "absorbed", "bf16", T, 1, "cpu", seed=T)
            k(**x)
            assert len(k._plans) <= rt._PLANS_MAX
            assert m is None or 1 <= m.count(k._native) <= rt._PLANS_MAX


def _launch_cases(torch, device="cpu"):
    """(spec, kernel variant, inputs) of launches whose plans differ in kind: the q forms, a record row (no scale),
    32-bit slots, the fused norm with its output."""
    cases = []
    for spec, q, kv, T, H, slots in (("deepseek_v3", "absorbed", "bf16", 5, 2, "int64"),
                                     ("deepseek_v3", "zero_copy", "bf16", 3, 2, "int64"),
                                     ("deepseek_v3", "inplace", "bf16", 4, 2, "int64"),
                                     ("deepseek_v32", "none", "fp8_tile", 6, 1, "int64"),
                                     ("deepseek_v32", "absorbed", "fp8_tile", 7, 3, "int32")):
        x = rf.make_inputs(torch, spec, q, kv, T, H, device, seed=T * 7 + H, slots_dtype=slots)
        cases.append((spec, dict(kv=kv, q=q, slots=slots), x))
    x, w = cs.norm_inputs(torch, "deepseek_v3", "absorbed", "bf16", 9, 2, device, seed=57)
    cases.append(("deepseek_v3", dict(kv="bf16", q="absorbed", norm="rms_out"),
                  dict(x, norm_weight=w, norm_out=torch.zeros(9, 512, dtype=torch.bfloat16, device=device))))
    return cases


def test_native_plans_match_the_python_path():
    """A launch served by the C++ plans (its signature seen before) writes the bytes the Python path writes, into
    its own tensors, and never reaches the Python path (plan_args is replaced by a trap for it) nor adds a plan."""
    torch = sp._torch()
    ctx = sp.context("host")
    from ropekv import _torch as rt
    with _NativePath(True) as m:
        for spec, variant, x in _launch_cases(torch):
            k = ctx.kernel(spec, **variant)
            outs = [n for n in ("q_out", "q_pe", "kv_cache", "norm_out") if x.get(n) is not None]
            got, plans = [], None
            for path in ("python", "first", "native"):
                y = {n: (t.clone() if n in outs else t) for n, t in x.items()}
                if path == "python":
                    with _NativePath(False):
                        k(**y)
                elif path == "native":
                    plans = m.count(k._native)
                    plan_args, rt.plan_args = rt.plan_args, None  # a call of it raises TypeError
                    try:
                        k(**y)
                    finally:
                        rt.plan_args = plan_args
                else:
                    k(**y)
                got.append(y)
            for n in outs:
                for y in got[1:]:
                    assert torch.equal(y[n].view(torch.uint8), got[0][n].view(torch.uint8)), (spec, variant, n)
            assert plans >= 1 and m.count(k._native) == plans, (spec, variant, plans, m.count(k._native))


def _write(ops, spec, variant, y):
    """ops.write of a _launch_cases case, its q form and q dtype left to their defaults."""
    ops.write(spec, kv=variant["kv"], norm=variant.get("norm", "none"), **y)


def test_ops_write_routes_match_the_python_path():
    """ops.write's routes (_plans.cpp: the variant lookup of a call seen before, in C++): a routed call writes the bytes
    the Python path writes, into its own tensors, without ops._kernel or the Python plans (both replaced by traps);
    one route a variant; a launch the library refuses still raises its error; new kernels (use_context) drop every
    route, and a closed context's route is dropped at its next call, which then launches on a new context."""
    torch, ops = _ops()
    with _NativePath(True) as m:
        router = _routes_match(torch, ops, m, "cpu")
        spec, variant, x = _launch_cases(torch)[0]
        base = torch.empty(x["q_nope"].numel() // 512 * 576 + 1, dtype=torch.bfloat16)
        q_nope = base[1:].view(x["q_out"].shape)[..., :512]  # the same signature, 2 bytes off 16-byte alignment
        _expect(ropekv.RopekvError, lambda: _write(ops, spec, variant, dict(x, q_nope=q_nope)), {"ROPEKV_ERR_ALIGN"})
        own = ropekv.Context("host", cache_dir=sp._CACHE_DIR)
        ops.use_context(own)
        assert m.routes(router) == 0
        _write(ops, spec, variant, dict(x))
        _write(ops, spec, variant, dict(x))
        assert m.routes(router) == 1
        own.close()
        y = dict(x, kv_cache=x["kv_cache"].clone(), q_out=x["q_out"].clone())
        _write(ops, spec, variant, y)  # the route's context is closed: the Python path, on a new context
        assert ops.context("cpu") is not own and m.routes(router) == 1
        want = rf.reference(torch, spec, "absorbed", "bf16", x)
        assert sp.compare_bits(torch, y["kv_cache"], want["kv_cache"], "bf16")[3] == 0
        ops.use_context(sp.context("host"))


def _routes_match(torch, ops, m, device):
    """test_ops_write_routes_match_the_python_path's first part on device: every _launch_cases case by the Python
    path, then routed; returns the router."""
    from ropekv import _torch as rt
    router = ops._route(m)[2]
    m.forget(router)
    for i, (spec, variant, x) in enumerate(_launch_cases(torch, device)):
        outs = [n for n in ("q_out", "q_pe", "kv_cache", "norm_out") if x.get(n) is not None]
        got = []
        for path in ("python", "first", "routed"):
            y = {n: (t.clone() if n in outs else t) for n, t in x.items()}
            if path == "python":
                with _NativePath(False):
                    _write(ops, spec, variant, y)
            elif path == "routed":
                traps = (ops._kernel, rt.plan_args)
                ops._kernel, rt.plan_args = None, None  # a call of either raises TypeError
                try:
                    _write(ops, spec, variant, y)
                finally:
                    ops._kernel, rt.plan_args = traps
            else:
                _write(ops, spec, variant, y)
            got.append(y)
        for n in outs:
            for y in got[1:]:
                assert torch.equal(y[n].view(torch.uint8), got[0][n].view(torch.uint8)), (spec, variant, n)
        assert m.routes(router) == i + 1, (spec, variant, m.routes(router))
    return router


def test_cuda_ops_write_routes():
    """ops.write's routes on a GPU: a routed call (on the device's current stream, taken in C++) writes the Python
    path's bytes, a call on another stream included."""
    torch, ops = _ops("cuda")
    with _NativePath(True) as m:
        _routes_match(torch, ops, m, "cuda")
        spec, variant, x = _launch_cases(torch, "cuda")[0]
        want = dict(x, kv_cache=x["kv_cache"].clone(), q_out=x["q_out"].clone())
        with _NativePath(False):
            _write(ops, spec, variant, want)
        y = dict(x, kv_cache=x["kv_cache"].clone(), q_out=x["q_out"].clone())
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            _write(ops, spec, variant, y)  # routed: its launch goes to s
        s.synchronize()
        for n in ("kv_cache", "q_out"):
            assert torch.equal(y[n].view(torch.uint8), want[n].view(torch.uint8)), n
        ops.use_context(sp.context("cuda"))


def test_native_plans_leave_cpu_scales_and_numbers_to_python():
    """A scale held by a CPU tensor is checked at every launch (its value can change), and a scale given as a number
    becomes a tensor first: neither signature gets a C++ plan, and a bad value is still refused on a later launch."""
    torch = sp._torch()
    ctx = sp.context("host")
    k = ctx.kernel("deepseek_v3", kv="fp8_e4m3", q="none")
    x = rf.make_inputs(torch, "deepseek_v3", "none", "fp8_e4m3", 4, 1, "cpu", seed=5)
    with _NativePath(True) as m:
        scale = torch.tensor([0.5], dtype=torch.float32)
        k(**dict(x, k_scale=scale))
        k(**dict(x, k_scale=scale))
        k(**dict(x, k_scale=0.25))
        assert m.count(k._native) == 0
        scale.fill_(float("nan"))
        _expect((ValueError, ropekv.RopekvError), lambda: k(**dict(x, k_scale=scale)))


def test_native_cache_dir_is_the_library_s():
    """The C++ module's directory is the library's default cache directory (ropekv_cache_dir) with torch/ under it,
    and none (a private temporary directory) where the library has none."""
    from ropekv import _native
    env = dict(os.environ)
    for n in ("ROPEKV_CACHE_DIR", "XDG_CACHE_HOME", "HOME", "ROPEKV_DISABLE_CACHE"):
        os.environ.pop(n, None)
    try:
        assert _native._cache_dir() is None
        os.environ["HOME"] = "/home/h"
        assert _native._cache_dir() == "/home/h/.cache/ropekv/torch", _native._cache_dir()
        os.environ["ROPEKV_CACHE_DIR"] = "/r/c"
        assert _native._cache_dir() == "/r/c/torch", _native._cache_dir()
        os.environ["ROPEKV_DISABLE_CACHE"] = "1"
        assert _native._cache_dir() is None
    finally:
        os.environ.clear()
        os.environ.update(env)


def test_native_build_refusals():
    """What stops the C++ plans is one warning naming it, and the launches take the Python path: a cache directory
    writable by others, a damaged module in the cache (removed; here the rebuild then meets a broken compiler),
    ROPEKV_TORCH_NATIVE=0 (no warning)."""
    import stat
    import tempfile
    import warnings
    torch = sp._torch()
    from ropekv import _native
    saved, env = list(_native._STATE), dict(os.environ)
    root = tempfile.mkdtemp(prefix="ropekv-native-")

    def attempt(**set_env):
        os.environ.update(set_env)
        _native._STATE.clear()
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            got = _native.module()
        return got, [str(x.message) for x in w]

    try:
        os.environ.pop("ROPEKV_DISABLE_CACHE", None)
        open_dir = os.path.join(root, "open")
        os.makedirs(os.path.join(open_dir, "torch"))
        os.chmod(os.path.join(open_dir, "torch"), 0o777)
        got, said = attempt(ROPEKV_CACHE_DIR=open_dir, ROPEKV_TORCH_NATIVE="1")
        assert got is None and len(said) == 1 and "writable by others" in said[0], said
        damaged = os.path.join(root, "damaged")
        os.makedirs(os.path.join(damaged, "torch"), mode=0o700)
        os.environ["CXX"] = "false"  # (the compiler's name is part of the module's key)
        key = _native._key(torch, _native._command(torch, "OUT"))
        path = os.path.join(damaged, "torch", "plans-%s.so" % key)
        with open(path, "wb") as f:
            f.write(b"not a shared object")
        got, said = attempt(ROPEKV_CACHE_DIR=damaged, CXX="false")
        assert got is None and len(said) == 1 and "false exited with 1" in said[0], said
        assert not os.path.exists(path), "the damaged module was kept"
        assert not [n for n in os.listdir(os.path.join(damaged, "torch"))], "a failed build left a file"
        got, said = attempt(ROPEKV_TORCH_NATIVE="0")
        assert got is None and not said, said
        # and the launches go on, on the Python path
        k = sp.context("host").kernel("deepseek_v3", kv="bf16", q="absorbed")
        x = rf.make_inputs(torch, "deepseek_v3", "absorbed", "bf16", 3, 1, "cpu", seed=3)
        want = rf.reference(torch, "deepseek_v3", "absorbed", "bf16", x)
        k(**x)
        assert sp.compare_bits(torch, x["kv_cache"], want["kv_cache"], "bf16")[3] == 0
        assert stat.S_IMODE(os.stat(os.path.join(open_dir, "torch")).st_mode) == 0o777  # left as it was
    finally:
        os.environ.clear()
        os.environ.update(env)
        _native._STATE[:] = saved
        import shutil
        shutil.rmtree(root, ignore_errors=True)


# ---- torch.compile and CUDA graphs -------------------------------------------------------------------------
def _step(ops, x, kv):
    """A tiny model step: the query and key projections' outputs made inside the region, then the operator."""
    def step(q, kvp, cache, positions, slots, cos_sin, q_out):
        q = q * 1.0
        ops.write("deepseek_v3", kv=kv, q_nope=q[..., :512], q_pe=q[..., 512:], q_out=q_out, k_nope=kvp[:, :512],
                  k_pe=kvp[:, 512:], kv_cache=cache, positions=positions, slots=slots, cos_sin=cos_sin)
        return q_out.float().sum()
    return step


def _compile_case(torch, ops, device):
    x = rf.make_inputs(torch, "deepseek_v3", "absorbed", "bf16", 6, 2, device, seed=31)
    q = torch.cat([x["q_nope"], x["q_pe"]], dim=-1).contiguous()
    kvp = torch.cat([x["k_nope"], x["k_pe"]], dim=-1).contiguous()
    args = lambda: (q, kvp, x["kv_cache"].clone(), x["positions"], x["slots"], x["cos_sin"],  # noqa: E731
                    torch.zeros_like(x["q_out"]))
    step = _step(ops, x, "bf16")
    eager_args, compiled_args = args(), args()
    want = step(*eager_args)
    got = torch.compile(step, fullgraph=True)(*compiled_args)
    assert torch.equal(got, want), (got, want)
    for i in (2, 6):  # the cache and q_out: written by the operator inside the compiled graph
        assert torch.equal(eager_args[i], compiled_args[i]), i
    return step, args


def test_compile_fullgraph_host():
    torch = _compile_torch()
    _, ops = _ops()
    _compile_case(torch, ops, "cpu")


def _norm_step(ops, norm):
    """A model step with the fused norm: the raw kv_a projection made inside the region, the RMSNorm in the write."""
    def step(q, kvp, cache, positions, slots, cos_sin, q_out, weight, norm_out):
        q = q * 1.0
        kvp = kvp * 1.0
        ops.write("deepseek_v3", q_nope=q[..., :512], q_pe=q[..., 512:], q_out=q_out, k_nope=kvp[:, :512],
                  k_pe=kvp[:, 512:], kv_cache=cache, positions=positions, slots=slots, cos_sin=cos_sin, norm=norm,
                  norm_weight=weight, norm_out=norm_out if norm == "rms_out" else None)
        return q_out.float().sum()
    return step


def _compile_norm_case(torch, ops, device):
    """torch.compile(fullgraph=True) of a step calling the operator with norm rms and rms_out: the cache, q_out and
    norm_out (written by the operator inside the graph) equal the eager step's."""
    x, w = cs.norm_inputs(torch, "deepseek_v3", "absorbed", "bf16", 6, 2, device, seed=61)
    q = torch.cat([x["q_nope"], x["q_pe"]], dim=-1).contiguous()
    kvp = torch.cat([x["k_nope"], x["k_pe"]], dim=-1).contiguous()
    for norm in ("rms", "rms_out"):
        args = lambda: (q, kvp, x["kv_cache"].clone(), x["positions"], x["slots"], x["cos_sin"],  # noqa: E731
                        torch.zeros_like(x["q_out"]), w, torch.zeros(6, 512, dtype=torch.bfloat16, device=device))
        step = _norm_step(ops, norm)
        eager_args, compiled_args = args(), args()
        want = step(*eager_args)
        got = torch.compile(step, fullgraph=True)(*compiled_args)
        # the returned sum is Inductor's reduction, in its own order: close, not bit-equal; the buffers the
        # operator wrote are compared bit for bit below
        assert torch.allclose(got, want, rtol=1e-5, atol=0), (norm, got, want)
        for i in (2, 6, 8):
            assert torch.equal(eager_args[i], compiled_args[i]), (norm, i)
        if norm == "rms_out":
            assert bool((eager_args[8] != 0).any()), "norm_out was not written"


def test_compile_fullgraph_norm_host():
    torch = _compile_torch()
    _, ops = _ops()
    _compile_norm_case(torch, ops, "cpu")


def test_compile_fullgraph_norm_cuda():
    torch = _compile_torch()
    torch, ops = _ops("cuda")
    _compile_norm_case(torch, ops, "cuda")


def test_compile_fullgraph_cuda_graph():
    """fullgraph compile on CUDA, then the compiled step captured in a CUDA graph and replayed with new inputs."""
    torch = _compile_torch()
    torch, ops = _ops("cuda")
    step, args = _compile_case(torch, ops, "cuda")
    compiled = torch.compile(step, fullgraph=True)
    static = args()
    compiled(*static)  # compiles and warms up outside capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        compiled(*static)
    fresh = args()
    step(*fresh)
    static[2].copy_(args()[2])  # the cache as it was before any launch, q_out zeros, as fresh had them
    static[6].zero_()
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(static[2], fresh[2]) and torch.equal(static[6], fresh[6])


def test_cuda_op_graph_capture():
    """The operator itself (eager) captured in a CUDA graph: a replay writes what the eager launch wrote."""
    torch, ops = _ops("cuda")
    x = rf.make_inputs(torch, "deepseek_v3", "absorbed", "fp8_e4m3", 64, 16, "cuda", seed=33)
    want = rf.reference(torch, "deepseek_v3", "absorbed", "fp8_e4m3", x)
    prior = x["kv_cache"].view(torch.uint8).clone()
    ops.write("deepseek_v3", kv="fp8_e4m3", **x)  # the first launch (and k_scale's 1.0) outside capture
    torch.cuda.synchronize()
    assert sp.compare_bits(torch, x["kv_cache"], want["kv_cache"], "fp8")[3] == 0
    after = x["kv_cache"].view(torch.uint8).clone()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        ops.write("deepseek_v3", kv="fp8_e4m3", **x)
    x["kv_cache"].view(torch.uint8).copy_(prior)
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(x["kv_cache"].view(torch.uint8), after)


# ---- the geometries without a rotation --------------------------------------------------------------------------
def _bits(torch, t):
    return t.view(torch.int16) if t.dtype == torch.bfloat16 else t.view(torch.uint8)


def test_op_rope_none_and_r0_take_no_rope_tensors():
    """kimi_k3 (rope none: 64 rope slots never rotated) and glm53_flash (R = 0: no rope part) run without positions or
    cos/sin tables (glm53_flash without k_pe and q_pe too): bf16 outputs are the inputs' bits (a NaN's payload, a -0),
    a sanitizing cache replaces NaN, fp8 quantizes the unrotated values; a glm_next_fp8 row is fp8_ds_mla's latent and
    tile scales, read back; glm_next_nvfp4 and the forms that write only the rope part are refused with the rule."""
    torch, ops = _ops()
    from ropekv import reference as rr
    g = torch.Generator().manual_seed(11)
    T, H, L = 5, 3, 512
    slots = torch.tensor([3, 17, -1, 40, 5])
    for spec, R in (("kimi_k3", 64), ("glm53_flash", 0)):
        W = L + R
        q = torch.randn(T, H, W, generator=g).bfloat16()
        k = torch.randn(T, W, generator=g).bfloat16()
        _bits(torch, q)[0, 0, W - 1] = 0x7FA0  # a NaN with a payload (kimi_k3: in q_pe; glm53_flash: in q_nope)
        _bits(torch, q)[1, 2, W - 5] = -0x8000  # -0
        _bits(torch, k)[2 if R == 0 else 3, W - 3] = 0x7FA0
        q_nope, q_pe = q[..., :L], (q[..., L:] if R else None)
        q_out = torch.zeros(T, H, W, dtype=torch.bfloat16)
        cache = torch.zeros(8, 16, W, dtype=torch.bfloat16)
        ops.write(spec, kv="bf16", layout="paged", q_nope=q_nope, q_pe=q_pe, q_out=q_out, k_nope=k[:, :L],
                  k_pe=k[:, L:] if R else None, kv_cache=cache, slots=slots)
        skip_all = spec == "kimi_k3"  # vLLM's convention: a padding token writes no query row either
        for t in range(T):
            want = torch.zeros(H, W, dtype=torch.bfloat16) if skip_all and slots[t] < 0 else q[t]
            assert torch.equal(_bits(torch, q_out[t]), _bits(torch, want)), (spec, t)
        rows = cache.view(-1, W)
        for t in range(T):
            if slots[t] < 0:
                continue
            want = k[t].clone()
            if spec == "kimi_k3":  # sanitized: NaN -> 0
                want = torch.where(torch.isnan(want), torch.zeros_like(want), want)
            assert torch.equal(_bits(torch, rows[slots[t]]), _bits(torch, want)), (spec, t)
        # the rows read back: bits
        out = torch.zeros(T, W, dtype=torch.bfloat16)
        ops.read(spec, kv="bf16", layout="paged", kv_cache=cache, slots=slots, out=out)
        for t in range(T):
            want = rows[slots[t]] if slots[t] >= 0 else torch.zeros(W, dtype=torch.bfloat16)
            assert torch.equal(_bits(torch, out[t]), _bits(torch, want)), (spec, t)

    # kimi_k3's fp8 row: x / k_scale, sanitized (NaN -> 0), clamped to 448, of the unrotated values
    R, W = 64, 576
    k = torch.randn(T, W, generator=g).bfloat16() * 300
    _bits(torch, k)[0, L + 1] = 0x7FA0
    cache = torch.zeros(4, 16, W, dtype=torch.uint8)
    k_scale = torch.tensor([0.5])
    ops.write("kimi_k3", kv="fp8_e4m3", layout="paged", k_nope=k[:, :L], k_pe=k[:, L:], kv_cache=cache,
              slots=slots, k_scale=k_scale)
    x = rr.scale(k.float(), "div", k_scale)
    x = torch.where(torch.isnan(x), torch.zeros_like(x), x).clamp(-448.0, 448.0)
    want = rr.e4m3_codes(x)
    rows = cache.view(-1, W)
    for t in range(T):
        if slots[t] >= 0:
            assert torch.equal(rows[slots[t]], want[t]), t

    # glm53_flash's glm_next_fp8 row: 4 tiles of 128 e4m3 values, s = max(amax / 448, FLT_MIN), 4 float32 scales
    k = torch.randn(T, L, generator=g).bfloat16() * 3
    cache = torch.zeros(4, 16, 528, dtype=torch.uint8)
    ops.write("glm53_flash", record="glm_next_fp8", layout="paged", k_nope=k, kv_cache=cache, slots=slots)
    tiles = k.float().view(T, 4, 128)
    s = torch.clamp(tiles.abs().amax(-1) / torch.full((T, 4), 448.0), min=1.1754943508222875e-38)
    codes = rr.e4m3_codes((tiles / s.unsqueeze(-1)).clamp(-448.0, 448.0)).view(T, L)
    rows = cache.view(-1, 528)
    for t in range(T):
        if slots[t] >= 0:
            assert torch.equal(rows[slots[t], :L], codes[t]), t
            assert torch.equal(rows[slots[t], L:].view(torch.float32), s[t]), t
    out = torch.zeros(T, L, dtype=torch.bfloat16)
    ops.read("glm53_flash", record="glm_next_fp8", layout="paged", kv_cache=cache, slots=slots, out=out)
    back = (rr.e4m3_values(codes) * s.repeat_interleave(128, -1)).bfloat16()
    for t in range(T):
        if slots[t] >= 0:
            assert torch.equal(_bits(torch, out[t]), _bits(torch, back[t])), t

    # what engines pass today is taken: positions and identity tables to a kernel that rotates nothing (dropped),
    # an empty k_pe where there is no rope part; a q_pe with values is refused, naming why
    k = torch.randn(T, 576, generator=g).bfloat16()
    cache = torch.zeros(4, 16, 576, dtype=torch.bfloat16)
    ops.write("kimi_k3", layout="paged", k_nope=k[:, :L], k_pe=k[:, L:], kv_cache=cache, slots=slots,
              positions=torch.arange(T), cos_sin=torch.ones(8, 64))
    assert torch.equal(_bits(torch, cache.view(-1, 576)[slots[0]]), _bits(torch, k[0]))
    k = torch.randn(T, L, generator=g).bfloat16()
    cache = torch.zeros(4, 16, L, dtype=torch.bfloat16)
    ops.write("glm53_flash", layout="paged", k_nope=k, k_pe=k[:, L:], kv_cache=cache, slots=slots,
              positions=torch.arange(T))
    assert torch.equal(_bits(torch, cache.view(-1, L)[slots[0]]), _bits(torch, k[0]))
    e = _expect(ValueError, lambda: ops.write("glm53_flash", q_form="absorbed", q_nope=q[..., :L], q_pe=q[..., :8],
                                              q_out=torch.zeros(T, H, L, dtype=torch.bfloat16), k_nope=k,
                                              kv_cache=cache, slots=slots))
    assert "no rope part" in str(e), e

    ctx = sp.context("host")
    ok, why = ctx.query("glm53_flash", record="glm_next_nvfp4")  # its per-token scale covers the whole latent
    assert ok, why
    ok, why = ctx.query("glm53_flash", q="zero_copy")
    assert not ok and "R = 0: no rope part" in why, why
    ok, why = ctx.query("glm53_flash", layout="split")
    assert not ok and "R = 0: no rope part" in why, why
    ok, why = ctx.query("kimi_k3", q="inplace")
    assert not ok and "nothing to rotate in place" in why, why
    info = ctx.kernel("kimi_k3", kv="bf16", q="absorbed").info
    names = {t.name for t in ctx.kernel("kimi_k3", kv="bf16", q="absorbed").tensors}
    assert "positions" not in names and "cos_sin" not in names and "k_pe" in names and info.rope == "none", names
    names = {t.name for t in ctx.kernel("glm53_flash", kv="bf16", q="absorbed").tensors}
    assert names == {"q_nope", "q_out", "k_nope", "kv_cache", "slots", "write_mask"}, names


def test_cuda_op_write_norm():
    torch, _ = _ops("cuda")
    for spec, q, kv, T, K, min_slot in NORM_OP_CASES:
        cs.run_norm_case(torch, sp.context("cuda"), spec, q, kv, 300, 16, "cuda", seed=63, kv_tokens=K and 200,
                         min_slot=min_slot, specials=True, via="op")


def test_cuda_op_write():
    torch, _ = _ops("cuda")
    for spec, q, kv in OP_CASES:
        cs.run_and_check(torch, sp.context("cuda"), spec, q, kv, T=300, H=16, device="cuda", specials=True, via="op")


if __name__ == "__main__":
    sys.exit(sp.main(globals()))
