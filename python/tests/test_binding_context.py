"""The binding without torch or a GPU: importing ropekv (no torch), the ctypes structs against the header, a kernel's
info from the library, contexts on the host backend (query, kernel, stats, prepare, run-time specs).

    python3 python/tests/test_binding_context.py    # this file; python3 python/tests/test_binding.py runs them all"""
import ctypes
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

from _support import ROOT, context, main, skip

import ropekv  # noqa: E402  (after _support, which puts python/ on sys.path)


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
    structs = [ropekv.ropekv_options, ropekv.ropekv_stats, ropekv.ropekv_variant, ropekv.ropekv_args,
               ropekv._capi.ropekv_tensor_info, ropekv._capi.ropekv_record_info, ropekv._capi.ropekv_record_segment,
               ropekv._capi.ropekv_record_reader]
    for st in structs:
        lines.append('printf("%s sizeof %%zu\\n", sizeof(%s));' % (st.__name__, st.__name__))
        for f, _ in st._fields_:
            lines.append('printf("%s %s %%zu\\n", offsetof(%s, %s));' % (st.__name__, f, st.__name__, f.rstrip("_")))
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


def test_kernel_tensors():
    """A kernel's tensors come from the library's table (ropekv_kernel_tensor): names, access, dtypes, dimensions and
    strides; a family's (ropekv_family_tensor) without a kernel, what its kernels agree on."""
    c = context("host")
    k = c.kernel("deepseek_v3", kv="fp8_e4m3", layout="paged")
    by = {t.name: t for t in k.tensors}
    assert [t.name for t in k.tensors] == ["q_nope", "q_pe", "q_out", "k_nope", "k_pe", "kv_cache", "positions",
                                          "slots", "cos_sin", "k_scale", "write_mask"], k.tensors
    q = by["q_nope"]
    assert (q.access, q.need, q.dtype, q.dims, q.sizes, q.strides) == (
        "read", "tokens", "bf16", ("T", "H", "L"), (None, None, 512), ("q_nope_st", "q_nope_sh", None)), q
    assert q.shape_text() == "[T, H, L=512]" and q.when == "q form absorbed" and not q.packed
    kv = by["kv_cache"]
    assert (kv.access, kv.dtype, kv.elem_bytes, kv.dims, kv.strides, kv.align) == (
        "write", "fp8_e4m3", 1, ("blocks", "block_size", "W"), ("kv_block_st", "kv_st", None), 8), kv
    assert by["q_out"].written and by["positions"].packed and by["k_scale"].when == "fp8 cache with a scale"
    assert [t.name for t in c.kernel("deepseek_v3", q="inplace").tensors if t.written] == ["q_pe", "kv_cache"]
    r = c.kernel("deepseek_v3", op="read")
    assert [(t.name, t.access, t.need) for t in r.tensors] == [
        ("kv_cache", "read", "tokens"), ("slots", "read", "tokens"), ("out", "write", "tokens"),
        ("out_rope", "write", "optional")]
    fam = {t.name: t for t in ropekv.family_tensors("write", "absorbed")}
    assert fam["k_nope"].need == "kv_tokens" and fam["cos_sin"].need == "optional" and fam["sin"].need == "optional"
    assert fam["q_out"].dtype is None and fam["q_out"].dims == ("T", "Hq", "W") and fam["kv_cache"].dims == ()
    assert "out" not in fam and [t.name for t in ropekv.family_tensors("read")][-2:] == ["out", "out_rope"]


def test_context_dump_option():
    """dump= reaches the library: the context makes the dump directory (mode 0700) its launches are written to."""
    d = tempfile.mkdtemp(prefix="ropekv-dump-")
    try:
        target = os.path.join(d, "dumps")
        with ropekv.Context("host", disk_cache=False, dump=target):
            assert os.path.isdir(target) and os.stat(target).st_mode & 0o777 == 0o700
        try:
            ropekv.Context("host", disk_cache=False, dump="a\0b")
            raise AssertionError("a NUL byte in dump was accepted")
        except ValueError as e:
            assert "dump" in str(e)
    finally:
        shutil.rmtree(d, ignore_errors=True)


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


def test_cache_ro_host():
    """Context(cache_ro=...) reaches the library: a cache another context filled, given as a read-only layer (a string
    or a list), serves the kernel with no compile. This package carries no bundles, so the layers are the caller's
    alone; bad values are refused by name. (A wheel's bundles: tests/package/wheel_bundle.sh.)"""
    context("host")  # skips without a C++ compiler
    assert ropekv.bundle_dirs() == [], ropekv.bundle_dirs()
    tmp = tempfile.mkdtemp()
    try:
        filled = ropekv.Context("host", cache_dir=tmp, disk_cache=True)
        filled.kernel("deepseek_v3", kv="bf16", q="none")
        assert filled.stats()["compiles"] == 1 and filled.cache_ro is None, (filled.stats(), filled.cache_ro)
        filled.close()
        for layers in (tmp, [tmp], pathlib.Path(tmp)):
            c = ropekv.Context("host", disk_cache=False, cache_ro=layers)
            assert c.cache_ro == tmp, c.cache_ro
            c.kernel("deepseek_v3", kv="bf16", q="none")
            st = c.stats()
            assert st["compiles"] == 0 and st["disk_hits"] == 1, st
            c.close()
    finally:
        shutil.rmtree(tmp)
    for bad, what in (({"cache_ro": "a\0b"}, "cache_ro"), ({"bundles": "no"}, "bundles")):
        try:
            ropekv.Context("host", **bad)
        except ValueError as e:
            assert what in str(e), e
        else:
            raise AssertionError("no ValueError for %r" % bad)


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


if __name__ == "__main__":
    sys.exit(main(globals()))
