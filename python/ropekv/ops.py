"""ropekv's kernels as PyTorch operators: torch.ops.ropekv.write, write_q_inplace and read.

    import ropekv.ops                       # registers the operators (imports torch)
    ropekv.ops.write("deepseek_v3", kv="fp8_e4m3", layout="paged", q_nope=..., q_pe=..., q_out=..., k_nope=...,
                     k_pe=..., kv_cache=..., positions=..., slots=..., cos_sin=..., k_scale=...)

Each operator is registered with torch.library: its schema marks the tensors it writes (q_out, kv_cache,
kv_rope_cache and norm_out, the fused kv_a RMSNorm's output; q_pe for write_q_inplace; out and out_rope for read)
and it has a fake implementation (it returns nothing and allocates nothing), so torch.compile(fullgraph=True)
traces a model step that calls it, and the step can be captured in a CUDA graph. The functions here are thin
wrappers that fill in the variant's strings: under torch.compile (and for fake or meta tensors) they call
torch.ops.ropekv.*, which become nodes of the graph; called eagerly on real tensors they run the operator's
implementation directly, without the dispatcher's boxing of twenty-two arguments (the same checks and launch, a
fraction of the host time; bench/bench_eager.py).

The variant is named by strings (spec, kv, q_form, q_dtype, layout, norm); positions and slots take their index types
from the tensors' dtypes. The kernels come from one Context per device, made on first use (the host backend for
CPU tensors; the device's GPU backend otherwise); use_context() puts a context of one's own (a cache directory,
PDL settings) in its place. A launch's device is its tensors' (kv_cache's picks the context; a tensor on another device
is a ValueError naming it), whichever device is current: cuda:1 tensors launch on cuda:1's context, on device 1's
current stream (the library makes the context's device current for the call itself: cuCtxPushCurrent, hipSetDevice).
A device named without an index (context("cuda")) is torch.cuda.current_device(). A launch checks its arguments as
Kernel.__call__ does (once per argument signature) and raises RopekvError, TypeError or ValueError with the reason.
"""
import importlib
import threading

import torch

from . import _capi, _core, _native

# The operators' arguments come from the library's tensor tables (ropekv_family_tensor: every tensor some kernel of a
# family may take, whether some kernel writes it, whether every kernel needs it). write launches the kernels of q forms
# absorbed, zero_copy and none; write_q_inplace those of q form inplace (rope(q_pe) written back into q_pe), with the
# arguments of write (less q_form) so that a call switches between the two by name alone; read the read-back kernels.
# A tensor is "Tensor" where every kernel the operator launches needs it, else "Tensor?"; it is marked written
# (Tensor(x!)) where some kernel of the operator's arguments writes it. The positions of the tensors version 0.1's
# operators took are frozen (calls passing them positionally stay valid): after the variant's strings, those tensors,
# then min_slot (and norm), then every other tensor of the table, with default None (the fused kv_a RMSNorm's).
_HEAD = {"write": ("str spec", "str kv", "str q_form", "str q_dtype", "str layout"),
         "write_q_inplace": ("str spec", "str kv", "str q_dtype", "str layout"),
         "read": ("str spec", "str kv", "str layout")}
_FROZEN = {"write": ("q_nope", "q_pe", "q_out", "k_nope", "k_pe", "kv_cache", "positions", "slots", "cos_sin", "sin",
                     "k_scale", "q_scale", "kv_rope_cache"),
           "read": ("kv_cache", "kv_rope_cache", "slots", "k_scale", "out", "out_rope")}
_FROZEN["write_q_inplace"] = _FROZEN["write"]
_SCALARS = {"write": ("int min_slot=0", 'str norm="none"'), "write_q_inplace": ("int min_slot=0", 'str norm="none"'),
            "read": ("int min_slot=0",)}
# after every tensor: the cache row by its record's name (None: kv chooses), so positional calls stay valid
_TAIL = ("str? record=None",)
# (op, the q forms it launches, the q forms whose tensors its arguments list)
_FAMILIES = {"write": ("write", ("absorbed", "zero_copy", "none"), ("absorbed", "zero_copy", "none")),
             "write_q_inplace": ("write", ("inplace",), ("absorbed", "zero_copy", "inplace", "none")),
             "read": ("read", ("none",), ("none",))}


def _schema(name):
    """The schema's argument list of operator name, from the library's family tables."""
    op, launched, listed = _FAMILIES[name]
    tables = {q: {t.name: t for t in _core.family_tensors(op, q)} for q in set(launched) | set(listed)}
    names = []
    for q in listed:
        names += [n for n in tables[q] if n not in names]
    frozen = _FROZEN[name]
    missing = [n for n in frozen if n not in names]
    assert not missing, "the library's %s tables lack %s" % (op, missing)
    order = [n for n in _capi.ARGS_POINTERS if n in names]  # the table's order
    later = [n for n in order if n not in frozen]
    letters = iter("abcdefghijklmnopqrstuvwxyz")

    def arg(n, default):
        written = any(n in tables[q] and tables[q][n].written for q in listed)
        needed = all(n in tables[q] and tables[q][n].need != "optional" for q in launched)
        alias = "(%s!)" % next(letters) if written else ""
        return "Tensor%s%s %s%s" % (alias, "" if needed and not default else "?", n, "=None" if default else "")

    args = (list(_HEAD[name]) + [arg(n, False) for n in frozen] + list(_SCALARS[name]) + [arg(n, True) for n in later] +
            list(_TAIL))
    return args


_LOCK = threading.Lock()
_CONTEXTS = {}  # (device type, index) -> Context
# (device index (tensor.get_device(): -1 for the CPU), spec, kv, q form, positions dtype, slots dtype, q_dtype, layout,
# op, norm) -> Kernel. A tensor on another device kind with the same index finds a kernel whose checks refuse it by name.
_KERNELS = {}
_INDEX = {torch.int64: "int64", torch.int32: "int32"}


def _device_key(device):
    if device.type == "cpu":
        return ("cpu", 0)
    index = device.index if device.index is not None else torch.cuda.current_device()
    return (device.type, index)


def context(device):
    """The Context the operators use for tensors on device (a torch.device or its string), made on first use."""
    device = torch.device(device)
    key = _device_key(device)
    with _LOCK:
        ctx = _CONTEXTS.get(key)
        if ctx is None or ctx.closed:
            if key[0] == "cpu":
                ctx = _core.Context("host")
            elif key[0] == "cuda":  # CUDA, or HIP under ROCm's PyTorch: "auto" picks the GPU backend there is
                ctx = _core.Context("auto", device=key[1])
            else:
                raise ValueError("ropekv runs on CPU tensors (host backend) and cuda tensors, not %s" % device)
            _CONTEXTS[key] = ctx
            _drop_kernels(key)
        return ctx


def use_context(ctx, device=None):
    """Makes the operators use ctx for tensors on device (default: the context's own: cpu for the host backend,
    cuda:<ctx.device> otherwise). Kernels taken from the previous context are dropped."""
    if device is None:
        device = "cpu" if ctx.backend == "host" else "cuda:%d" % ctx.device
    key = _device_key(torch.device(device))
    with _LOCK:
        _CONTEXTS[key] = ctx
        _drop_kernels(key)


def _drop_kernels(dev):  # under _LOCK; dev: a _device_key
    index = -1 if dev[0] == "cpu" else dev[1]
    for k in [k for k in _KERNELS if k[0] == index]:
        del _KERNELS[k]
    if _ROUTE[0] is not None:  # the routes lead to kernels: every one is dropped
        _ROUTE[0].forget(_ROUTE[2])


# ops.write's routes in C++ (_plans.cpp): [native module, its route_write, its router, ropekv_launch's address,
# torch._C._cuda_getCurrentRawStream or None], made on the first eager write with the module
_ROUTE = [None] * 5


def _route(native):
    with _LOCK:
        if _ROUTE[0] is not native:
            _ROUTE[:] = [native, native.route_write, native.router(), _capi.launch_address(),
                         getattr(torch._C, "_cuda_getCurrentRawStream", None)]
        return _ROUTE


def _index_name(t, name):
    dt = _INDEX.get(t.dtype)
    if dt is None:
        raise TypeError("%s must be int64 or int32, got %s" % (name, str(t.dtype).replace("torch.", "")))
    return dt


def _kernel(index, spec, kv, q_form, positions, slots, q_dtype, layout, op, norm="none", record=None):
    """The kernel of a variant for the device of index (a tensor's get_device()): a dictionary lookup after the
    first call."""
    key = (index, spec, kv, q_form, positions.dtype if positions is not None else None, slots.dtype, q_dtype, layout,
           op, norm, record)
    k = _KERNELS.get(key)
    if k is None or k._h is None:
        pos = _index_name(positions, "positions") if positions is not None else "int64"
        dev = torch.device("cpu") if index < 0 else torch.device("cuda", index)
        k = context(dev).kernel(spec, kv=kv, q=q_form, positions=pos, slots=_index_name(slots, "slots"),
                                q_dtype=q_dtype, layout=layout, op=op, norm=norm, record=record)
        with _LOCK:
            _KERNELS[key] = k
    return k


def _launch(name, a):
    """Operator name's launch, its arguments by name (a): the kernel of the variant they name, on the cache's device,
    launched on the tensors of the operator's table."""
    q_form = "none" if name == "read" else "inplace" if name == "write_q_inplace" else a["q_form"]
    if name == "read":
        k = _kernel(a["kv_cache"].get_device(), a["spec"], a["kv"], "none", None, a["slots"], "bf16", a["layout"],
                    "read", record=a.get("record"))
    else:
        k = _kernel(a["kv_cache"].get_device(), a["spec"], a["kv"], q_form, a["positions"], a["slots"], a["q_dtype"],
                    a["layout"], "write", a.get("norm", "none"), a.get("record"))
    k.launch_tensors([a.get(n) for n in _capi.ARGS_POINTERS], a.get("min_slot", 0))


def _impl(name):
    """Operator name's implementation: the dispatcher's arguments (in the schema's order, or by name) to _launch."""
    order = _ORDER[name]

    def impl(*args, **kwargs):
        a = dict(zip(order, args))
        a.update(kwargs)
        _launch(name, a)

    impl.__name__ = "_%s_impl" % name
    return impl


def _fake(*args, **kwargs):
    """Every operator writes into tensors it is given and returns nothing: its fake implementation has nothing to
    compute (torch.compile traces the writes from the schema's annotations)."""
    return None


_ORDER = {}  # operator -> its arguments' names, in the schema's order
_LIB = torch.library.Library("ropekv", "DEF")
for _name in ("write", "write_q_inplace", "read"):
    _args = _schema(_name)
    _ORDER[_name] = tuple(a.split(" ")[1].split("=")[0] for a in _args)
    _LIB.define("%s(%s) -> ()" % (_name, ", ".join(_args)))
    for _key in ("CPU", "CUDA"):
        _LIB.impl(_name, _impl(_name), _key)
    _register_fake = getattr(torch.library, "register_fake", None) or getattr(torch.library, "impl_abstract", None)
    if _register_fake is not None:  # torch >= 2.2
        _register_fake("ropekv::" + _name, _fake, lib=_LIB)
    else:  # older torch: a Meta kernel is what tracing with meta tensors calls (its AutogradMeta key has no
        # fallthrough there, so the fake is registered for it too)
        _LIB.impl(_name, _fake, "Meta")
        _LIB.impl(_name, _fake, "AutogradMeta")


def _call(name, a):
    """Operator name with arguments a (by name): eager on plain tensors, its implementation directly, without the
    dispatcher's boxing; else (torch.compile, fake or meta tensors) torch.ops.ropekv.<name>, with the arguments in its
    schema's order, which becomes a node of the graph."""
    kv_cache = a["kv_cache"]
    if _eager(kv_cache):
        _launch(name, a)
    else:
        _one_device(**{n: t for n, t in a.items() if isinstance(t, torch.Tensor)})
        for s in ("k_scale", "q_scale"):  # a scale given as a number: a float32 tensor [1] of the graph
            v = a.get(s)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                if not 0 < v < float("inf"):
                    raise ValueError("%s = %r: a scale must be a positive finite float32 (1.0 for no scaling)"
                                     % (s, v))
                a = dict(a)
                a[s] = torch.full((1,), float(v), dtype=torch.float32, device=kv_cache.device)
        getattr(torch.ops.ropekv, name)(*[a.get(n) for n in _ORDER[name]])


def _compiling_probe():
    """A function telling whether torch.compile is tracing (False on torch without torch.compile)."""
    f = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    if f is None and hasattr(torch, "compile"):  # torch 2.0 - 2.2
        f = importlib.import_module("torch._dynamo").is_compiling
    return f or (lambda: False)


_is_compiling = _compiling_probe()


def _eager(kv_cache):
    """Whether a call launches now (real tensors, no tracing) rather than through torch.ops.ropekv."""
    return not _is_compiling() and type(kv_cache) is torch.Tensor and not kv_cache.is_meta


def _one_device(**tensors):
    """Refuses tensors on more than one device, naming them: given to the dispatcher, a meta tensor among CPU or
    CUDA ones selects the fake implementation, which does nothing (a silent no-op, not an error)."""
    by_device = {}
    for name, t in tensors.items():
        if isinstance(t, torch.Tensor):
            by_device.setdefault(str(t.device), []).append(name)
    if len(by_device) > 1:
        raise ValueError("the tensors must be on one device, got %s" % "; ".join(
            "%s on %s" % (", ".join(names), dev) for dev, names in by_device.items()))


# q_out's dtype -> the q_dtype it implies (write's default)
_Q_DTYPE_OF = {torch.bfloat16: "bf16", torch.uint8: "fp8_e4m3"}
_Q_DTYPE_OF.update({getattr(torch, n): "fp8_e4m3" for n in ("float8_e4m3fn", "float8_e4m3fnuz") if hasattr(torch, n)})


def _q_dtype_of(q_out):
    q_dtype = _Q_DTYPE_OF.get(q_out.dtype)
    if q_dtype is None:
        raise TypeError("q_out must be bfloat16 (q_dtype bf16) or %s (q_dtype fp8_e4m3), got %s" % (
            " or ".join(str(d).replace("torch.", "") for d, q in _Q_DTYPE_OF.items() if q == "fp8_e4m3"),
            str(q_out.dtype).replace("torch.", "")))
    return q_dtype


def _q_form(q_nope, q_pe, q_out):
    if q_out is not None:
        return "absorbed" if q_nope is not None else "zero_copy"
    return "inplace" if q_pe is not None else "none"


def _q_defaults(q_form, q_dtype, q_nope, q_pe, q_out):
    """write's q_form and q_dtype, a None one taken from the query tensors given."""
    if q_form is None:
        q_form = _q_form(q_nope, q_pe, q_out)
    if q_dtype is None:
        q_dtype = _q_dtype_of(q_out) if isinstance(q_out, torch.Tensor) else "bf16"
    return q_form, q_dtype


def write(spec, *, kv="bf16", layout="flat", q_form=None, q_dtype=None, q_nope=None, q_pe=None, q_out=None, k_nope,
          k_pe=None, kv_cache, positions=None, slots, cos_sin=None, sin=None, k_scale=None, q_scale=None,
          kv_rope_cache=None, min_slot=0, norm="none", norm_weight=None, norm_out=None, record=None, write_mask=None):
    """The fused RoPE + KV-cache write (torch.ops.ropekv.write; write_q_inplace for q form inplace). The tensors are
    Kernel.__call__'s. q_form defaults from the query tensors given (q_out and q_nope: absorbed; q_out alone:
    zero_copy; q_pe alone: inplace; none: none); q_dtype from q_out's dtype (bfloat16: bf16; uint8 or a float8 e4m3
    dtype: fp8_e4m3; another is a TypeError; for inplace pass it: "bf16" keeps q_pe bf16, "fp8_e4m3" writes fp8 bytes
    over its rows). norm: the fused kv_a RMSNorm, "none" (default), "rms" (k_nope is the raw c_kv, normalized with
    norm_weight [L] before it is cached) or "rms_out" (and written to norm_out [Tkv, L] bf16). Tensors on more than
    one device are refused by name (a ValueError). record: the cache row by its record's name (one of the spec's, e.g.
    "fp8_ds_mla"; kv is then ignored): kv_cache is uint8 [.., record_row_bytes]. k_pe, positions and cos_sin may be
    None where the kernel has no such tensor (KernelInfo's tensors): a spec with rope "none" (kimi_k3) reads no
    positions or tables, one with no rope part (qk_rope_head_dim 0, glm53_flash) no k_pe or q_pe either. write_mask:
    None, or [Tkv] bool / uint8: KV row t is written only where it is set (beside min_slot and negative slots)."""
    if not _is_compiling():
        vals = (q_nope, q_pe, q_out, k_nope, k_pe, kv_cache, positions, slots, cos_sin, sin, k_scale, q_scale,
                kv_rope_cache, None, None, norm_weight, norm_out, write_mask)
        native = _native.module()
        if native is not None:  # a call whose variant and argument signature were seen before: launched in C++
            f = _ROUTE if _ROUTE[0] is native else _route(native)
            r = f[1](f[2], f[3], f[4], spec, kv, layout, q_form, q_dtype, norm, record, min_slot, vals)
            if r == 0:
                return
            if r is not None:
                r[1].ctx._raise(r[0])
        if _eager(kv_cache):  # _launch's, without the operator's dict of arguments
            qf, qd = _q_defaults(q_form, q_dtype, q_nope, q_pe, q_out)
            k = _kernel(kv_cache.get_device(), spec, kv, qf, positions, slots, qd, layout, "write", norm, record)
            k.launch_tensors(vals, min_slot)
            if native is not None and k._native is not None:  # the next such call takes route_write
                native.route(_route(native)[2], k, k._native, spec, kv, layout, q_form, q_dtype, norm, record, vals)
            return
    q_form, q_dtype = _q_defaults(q_form, q_dtype, q_nope, q_pe, q_out)
    _call("write_q_inplace" if q_form == "inplace" else "write",
          dict(spec=spec, kv=kv, q_form=q_form, q_dtype=q_dtype, layout=layout, q_nope=q_nope, q_pe=q_pe, q_out=q_out,
               k_nope=k_nope, k_pe=k_pe, kv_cache=kv_cache, positions=positions, slots=slots, cos_sin=cos_sin, sin=sin,
               k_scale=k_scale, q_scale=q_scale, kv_rope_cache=kv_rope_cache, min_slot=min_slot, norm=norm,
               norm_weight=norm_weight, norm_out=norm_out, record=record, write_mask=write_mask))


def read(spec, *, kv="bf16", layout="flat", kv_cache, slots, out, out_rope=None, kv_rope_cache=None, k_scale=None,
         min_slot=0, record=None):
    """The read-back (torch.ops.ropekv.read): out[t] = the row of slots[t] as bf16, [T, L+R]; or [T, L] with the rope
    parts in out_rope [T, R]. A slot below min_slot gives a zero row or leaves it, per the spec. Returns out, or
    (out, out_rope)."""
    _call("read", dict(spec=spec, kv=kv, layout=layout, kv_cache=kv_cache, kv_rope_cache=kv_rope_cache, slots=slots,
                       k_scale=k_scale, out=out, out_rope=out_rope, min_slot=min_slot, record=record))
    return out if out_rope is None else (out, out_rope)
