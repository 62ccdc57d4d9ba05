"""What the Python binding's tests share (python/tests/test_binding_*.py; test_ops.py too): the pytest shim (pytest
when present, the plain runner otherwise), torch and the reference module, one context per backend with a private
disk cache, bit-for-bit comparisons, and the plain runner itself (run, main)."""
import os
import shutil
import sys
import tempfile

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


class _LazyReference:
    """ropekv.reference (ropekv's arithmetic in PyTorch), imported on first use: it imports torch, which the tests
    that need none must not."""

    def __getattr__(self, name):
        import ropekv.reference
        return getattr(ropekv.reference, name)


ref = _LazyReference()


def _torch():
    try:
        import torch
    except ImportError:
        skip("torch is not installed")
    import ropekv.reference  # noqa: F401  (what ref reads: imported with torch)
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


def _cuda_spec(ctx, spec, **variant):
    """Skips the test where the CUDA target does not support the variant."""
    ok, why = ctx.query(spec, **variant)
    if not ok and "ROPEKV_ERR_UNSUPPORTED" in why:
        skip("%s on %s: %s" % (spec, ctx.target, why))


def _expect(exc, fn, status=None):
    try:
        fn()
    except exc as e:
        if status is not None:
            assert e.status in status, "got %s, expected %s" % (e.status, status)
        return e
    raise AssertionError("no %s" % exc.__name__)


# ---- bit-for-bit comparisons -----------------------------------------------------------------------------------
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


def _equal_bits(torch, got, want, what):
    kind = "bf16" if got.dtype == torch.bfloat16 else "fp8"
    steps, frac, n, bad = compare_bits(torch, got, want, kind)
    assert bad == 0, "%s: %d of %d elements not bit-identical (max %d steps; %s)" % (
        what, bad, n, steps, _first_differences(torch, got, want, kind))


def _same_bits(torch, a, b):
    return torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


# ---- the plain runner -------------------------------------------------------------------------------------------
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


def _tests(namespace):
    """The test_* functions of a module's namespace, in file order."""
    return [(n, f) for n, f in sorted(namespace.items(), key=lambda kv: kv[1].__code__.co_firstlineno
                                      if callable(kv[1]) and hasattr(kv[1], "__code__") else 0)
            if n.startswith("test_") and callable(f)]


def run(namespaces):
    """Runs every test_* function of each namespace (a test module's globals), in file order, each parametrized case
    on its own: PASS, FAIL (with the traceback) or SKIP a line, then the totals. Closes the contexts and removes the
    private cache directory at the end. Returns 1 when a case failed, else 0."""
    skipped_types = (_Skip,) + ((pytest.skip.Exception,) if pytest is not None else ())
    passed = failed = skipped = 0
    for namespace in namespaces:
        for name, fn in _tests(namespace):
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


def main(namespace):
    """Runs every test_* function of one test module (python3 python/tests/<file>.py)."""
    return run([namespace])
