"""What the engine shims share: the engines' error types over ropekv's, joint views of an engine's two-part outputs,
scale arguments under a spec's convention, and the small constant tensors a launch needs (made once per device).

Under torch.compile (fullgraph=True) the shims are traced: what they read from the library (a kernel's spec facts, a
multiplier's float32 scale) and whether two parts lie back to back in one buffer are computed once when the call is
traced, by functions marked as constant results (torch.compiler.assume_constant_result: called with the traced call's
Python constants, or its real tensors where two parts' addresses are compared); the constant tensors are made inside
the graph instead of being taken from the per-device tables; and the engines' error types are not layered over
ropekv's (the checks of the traced path raise when torch.compile traces the call, as torch reports them)."""
import collections
import contextlib
import importlib
import struct
import threading

import torch

from .. import _core
from .. import ops

_LOCK = threading.Lock()
_MIXED = {}  # (engine type, ropekv type) -> the exception class that is both


def _both(base, exc):
    """exc (an error of ropekv's) as an instance of a class deriving from both base and exc's own class, with exc's
    message and attributes (RopekvError's status and message), so a caller catching either type catches it."""
    key = (base, type(exc))
    cls = _MIXED.get(key)
    if cls is None:
        cls = type("%sFrom%s" % (base.__name__, type(exc).__name__), (base, type(exc)), {"__module__": __name__})
        _MIXED[key] = cls
    err = cls.__new__(cls, *exc.args)
    err.__dict__.update(exc.__dict__)
    return err


def _constant_marker():
    """torch.compiler.assume_constant_result (torch._dynamo's before 2.2), or the identity on a torch without
    torch.compile: a function so marked is called when torch.compile traces a call to it, with Python constants (and
    real tensors for tensor arguments), and its result is a constant of the graph."""
    f = getattr(getattr(torch, "compiler", None), "assume_constant_result", None)
    if f is None and hasattr(torch, "compile"):
        f = importlib.import_module("torch._dynamo").assume_constant_result
    return f or (lambda fn: fn)


constant_result = _constant_marker()


def tracing():
    """Whether torch.compile is tracing the call (False on a torch without torch.compile)."""
    return ops._is_compiling()


def errors(base):
    """Raises ropekv's argument errors inside the block as the engine's exception type base (as well as their own):
    TypeError, ValueError and RopekvError. A variant the spec does not offer (ROPEKV_ERR_UNSUPPORTED) is a convention
    ropekv lacks for this call: NotImplementedError (and RopekvError). Under torch.compile, nothing (the launch's own
    checks run when the graph runs, inside the operator, and raise as the operator's errors do)."""
    if tracing():
        return contextlib.nullcontext()
    return _errors(base)


@contextlib.contextmanager
def _errors(base):
    try:
        yield
    except NotImplementedError:
        raise
    except _core.RopekvError as e:
        want = NotImplementedError if e.status == "ROPEKV_ERR_UNSUPPORTED" else base
        if isinstance(e, want):
            raise
        raise _both(want, e) from e
    except (TypeError, ValueError) as e:
        if isinstance(e, base):
            raise
        raise _both(base, e) from e


def refuse(argument, why):
    """NotImplementedError naming the argument: the engine accepts it, ropekv has no convention for it."""
    return NotImplementedError("%s: %s" % (argument, why))


def joint(nope, rope):
    """The [..., A + B] view of which nope ([..., A]) and rope ([..., B]) are the two parts, or None: the same dtype,
    device, leading shape and strides, the last dimension contiguous, rope starting right after nope's last element
    (engines that keep one buffer pass its two slices). Under torch.compile the traced tensors have no addresses:
    whether rope starts right after nope in one storage is asked of the real tensors when the call is traced (a
    constant of the graph, as the rest of the layout is)."""
    if nope is None or rope is None:
        return None
    if nope.dtype != rope.dtype or nope.device != rope.device or nope.dim() != rope.dim() or nope.dim() == 0:
        return None
    if tuple(nope.shape[:-1]) != tuple(rope.shape[:-1]) or tuple(nope.stride()[:-1]) != tuple(rope.stride()[:-1]):
        return None
    a = nope.shape[-1]
    if nope.stride(-1) != 1 or (rope.shape[-1] > 1 and rope.stride(-1) != 1):
        return None
    size = tuple(nope.shape[:-1]) + (a + rope.shape[-1],)
    if tracing():
        return nope.as_strided(size, nope.stride()) if _traced_adjacent(nope, rope) else None
    if rope.data_ptr() != nope.data_ptr() + a * nope.element_size():
        return None
    if nope.storage().data_ptr() != rope.storage().data_ptr():
        return None
    try:
        return nope.as_strided(size, nope.stride(), nope.storage_offset())
    except RuntimeError:
        return None


_INT64 = torch.empty(0, dtype=torch.int64)  # an index tensor's dtype, where a launch's slots are made later
# a kernel's facts the shims read, under torch.compile (a KernelInfo's attributes of the same names)
Facts = collections.namedtuple("Facts", "L R W rope cos_sin scale q_fp8_scale")


@constant_result
def _traced_adjacent(nope, rope):
    """Whether rope starts right after nope's last element of its rows, in the same storage: torch.compile calls it
    with the real tensors of the call it traces."""
    return (rope.data_ptr() == nope.data_ptr() + nope.shape[-1] * nope.element_size()
            and _storage_ptr(rope) == _storage_ptr(nope))


def _storage_ptr(t):
    return (t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()).data_ptr()


def kernel_info(like, spec, kv="bf16", q_form="none", positions=None, slots=None, q_dtype="bf16", layout="flat"):
    """The KernelInfo of the write kernel a launch on like's device takes (ropekv.ops' kernel, made once): the
    spec's rope style, cos/sin layout, L, R and scale conventions. positions and slots give the index types (None:
    int64). Under torch.compile, the same facts as Facts, read once when the call is traced."""
    if tracing():
        pos = ops._index_name(positions, "positions") if positions is not None else "int64"
        sl = ops._index_name(slots, "slots") if slots is not None else "int64"
        text = _traced_facts(like.get_device(), spec, kv, q_form, pos, sl, q_dtype, layout).split("|")
        return Facts(int(text[0]), int(text[1]), int(text[2]), text[3], text[4], text[5] or None, text[6] or None)
    return ops._kernel(like.get_device(), spec, kv, q_form, positions, slots if slots is not None else _INT64,
                       q_dtype, layout, "write").info


class _Index:
    """An index type where ops._kernel reads a tensor's dtype."""
    __slots__ = ("dtype",)

    def __init__(self, name):
        self.dtype = torch.int32 if name == "int32" else torch.int64


@constant_result
def _traced_facts(index, spec, kv, q_form, positions, slots, q_dtype, layout):
    """Facts of kernel_info as one string, fields joined by "|" (None as ""): a constant of the traced graph."""
    info = ops._kernel(index, spec, kv, q_form, _Index(positions), _Index(slots), q_dtype, layout, "write").info
    return "|".join("" if v is None else str(v) for v in (info.L, info.R, info.W, info.rope, info.cos_sin, info.scale,
                                                          info.q_fp8_scale))


def _f32(x):
    """x rounded to float32 (an exact division's quotient rounded twice, through float64, is still the float32
    quotient: 53 >= 2 * 24 + 2)."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def scale_value(value, convention, argument):
    """The float32 k_scale / q_scale under which the spec's convention computes x * value (the engines' multiplier):
    mul: value itself; mul_recip: a k with float32(1 / k) == float32(value) where one exists (the product is then the
    engine's, bit for bit), else float32(1 / value), whose reciprocal is value's float32 neighbour (the product may
    differ in its last bit, the fp8 code by one step where it lies on a rounding boundary: about one multiplier in
    eight); div: float32(1 / value) (exact for a power of two; otherwise the same one-step bound); none: 1.0 only (any
    other multiplier is refused by name, NotImplementedError)."""
    try:
        v = _f32(float(value))
    except (OverflowError, TypeError, ValueError):
        raise TypeError("%s must be a float, got %r" % (argument, value))
    if convention == "mul":
        return v
    if convention in ("mul_recip", "div") and v != 0 and v == v and abs(v) != float("inf"):
        k = _f32(1.0 / v)
        if convention == "mul_recip":
            bits = struct.unpack("<I", struct.pack("<f", k))[0]
            near = [struct.unpack("<f", struct.pack("<I", b))[0] for b in (bits + 1, bits - 1)
                    if 0 < (b & 0x7FFFFFFF) < 0x7F800000]
            for cand in [k] + near:
                if _f32(1.0 / cand) == v:
                    return cand
        return k
    if convention == "none" and v == 1.0:
        return 1.0
    raise refuse(argument, "%r cannot be taken as a multiplier under the spec's %s scale convention; pass a spec of "
                           "another convention with spec=" % (value, convention))


def scale_number(value, convention, argument):
    """scale_value's k as a float32 value: under torch.compile computed once when the call is traced (value must then
    be a Python number of the traced code, not a symbolic one), the number passed on to ropekv.ops, which makes the
    tensor inside the graph."""
    if tracing():
        return float(_traced_scale(value, convention, argument))
    return scale_value(value, convention, argument)


@constant_result
def _traced_scale(value, convention, argument):
    return repr(scale_value(value, convention, argument))


def scale_exact(value, convention):
    """Whether scale_value's k gives the engine's product x * value bit for bit for every x."""
    v = _f32(float(value))
    k = scale_value(value, convention, "scale")
    if convention == "mul_recip":
        return _f32(1.0 / k) == v
    if convention == "div":
        return k * v == 1.0
    return True


_TENSORS = {}  # (what, device, ...) -> a tensor made once


def cached(key, make):
    """A constant tensor made once per key (never written: identity tables, unit scales, the index ramp)."""
    t = _TENSORS.get(key)
    if t is None:
        with _LOCK:
            t = _TENSORS.get(key)
            if t is None:
                t = _TENSORS[key] = make()
    return t


def scale_tensor(value, device):
    """A float32 tensor [1] holding value on device (made once per device and value). Under torch.compile, value
    itself: ropekv.ops makes the tensor inside the graph."""
    if tracing():
        return value
    return cached(("scale", str(device), value), lambda: torch.full((1,), value, dtype=torch.float32, device=device))


def identity_table(R, device):
    """A float32 cos/sin table [1, R] of one position: cos 1, sin 0 (the rotation by 0). Under torch.compile, made
    inside the graph."""
    if tracing():
        half = torch.ones(1, R // 2, dtype=torch.float32, device=device)
        return torch.cat([half, torch.zeros(1, R - R // 2, dtype=torch.float32, device=device)], dim=-1)

    def make():
        t = torch.zeros(1, R, dtype=torch.float32, device=device)
        t[:, :R // 2] = 1.0
        return t
    return cached(("identity", str(device), R), make)


def ramp(n, device):
    """int64 [n]: 0 .. n-1 (the slots of outputs written row by row), a slice of one ramp per device. Under
    torch.compile, made inside the graph."""
    if tracing():
        return torch.arange(n, dtype=torch.int64, device=device)
    size = 1 << max(10, (max(n, 1) - 1).bit_length())
    return cached(("ramp", str(device), size), lambda: torch.arange(size, dtype=torch.int64, device=device))[:n]


def no_kv(L, R, device):
    """The KV tensors of a launch that writes no KV row (kv_tokens none): k_nope [1, L], k_pe [1, R], a flat bf16
    cache of one row and slots [0] (int64). Under torch.compile, made inside the graph (the cache is written to by
    the operator's schema, so it is the graph's own buffer, not a constant)."""
    if tracing():
        base = torch.zeros(2 * (L + R), dtype=torch.bfloat16, device=device)
        return (base[:L].view(1, L), base[L:L + R].view(1, R), base[L + R:].view(1, L + R),
                torch.zeros(0, dtype=torch.int64, device=device))

    def make():
        base = torch.zeros(2 * (L + R), dtype=torch.bfloat16, device=device)
        slots = torch.zeros(1, dtype=torch.int64, device=device)[:0]
        return base[:L].view(1, L), base[L:L + R].view(1, R), base[L + R:].view(1, L + R), slots
    return cached(("no_kv", str(device), L, R), make)
