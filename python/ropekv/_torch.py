"""torch tensors -> ropekv_args, by the kernel's tensor table (the library's ropekv_kernel_tensor: each tensor's dtype,
dimensions, strides and needs). Imported only when tensors are used (torch is imported lazily)."""
import math
import struct

from . import _capi


def _torch():
    import torch
    return torch


_NAMES = _capi.ARGS_POINTERS  # every tensor keyword, in the order of ropekv_args' pointers
_NAME_SET = frozenset(_NAMES)
_CACHES = ("kv_cache", "kv_rope_cache")
_SCALES = ("k_scale", "q_scale")  # required where the kernel reads one (a number is taken); dropped where it reads none
_Q_NAMES = ("q_nope", "q_pe", "q_out")
_ROWS_OF = {"Tkv": "the tokens of slots", "P": "max of the query and slot tokens"}  # dims that may have more rows
_Q_FORMS = ("absorbed", "zero_copy", "inplace", "none")
_OP_TABLES = {}


def _op_table(op):
    """{name: TensorInfo} of every tensor some kernel of op may take (the library's family tables, the first form's
    row where several have one)."""
    got = _OP_TABLES.get(op)
    if got is None:
        from ._core import family_tensors
        got = {}
        for q in (_Q_FORMS if op == "write" else ("none",)):
            for ti in family_tensors(op, q):
                got.setdefault(ti.name, ti)
        got = _OP_TABLES[op] = {n: got[n] for n in _NAMES if n in got}
    return got


def _fp8_dtypes(torch, fmt):
    """Dtypes accepted for an fp8 tensor (cache, query output) of byte format fmt ("ocp" / "fnuz")."""
    out = [torch.uint8]
    name = "float8_e4m3fn" if fmt == "ocp" else "float8_e4m3fnuz"
    dt = getattr(torch, name, None)
    if dt is not None:
        out.append(dt)
    return tuple(out)


def _dtype_names(dts):
    return " or ".join(str(d).replace("torch.", "") for d in dts)


def _check_dtype(name, t, allowed):
    if t.dtype not in allowed:
        raise TypeError("%s must be %s, got %s" % (name, _dtype_names(allowed), str(t.dtype).replace("torch.", "")))


def _check_shape(name, t, want):
    if tuple(t.shape) != tuple(want):
        raise ValueError("%s must have shape %s, got %s" % (name, list(want), list(t.shape)))


def _check_last_contiguous(name, t):
    if t.dim() >= 1 and t.shape[-1] > 1 and t.stride(-1) != 1:
        raise ValueError("%s: the last dimension must be contiguous (stride(-1) == 1), got strides %s"
                         % (name, list(t.stride())))


def _st(t, dim):
    """Stride of dim in elements; 0 for a dimension of size 1 (never stepped over, so any stride is as good,
    and 0 keeps the library's alignment checks from tripping over meaningless strides)."""
    return 0 if t.shape[dim] <= 1 else int(t.stride(dim))


def _kv_rows(t, W, strict, name="kv_cache", what="L+R"):
    """(rows, row stride) of a cache tensor [..., W] whose leading dimensions collapse into rows."""
    if t.dim() == 0:
        raise ValueError("%s must have at least one dimension (rows of %s)" % (name, what))
    if strict and t.shape[-1] != W:
        raise ValueError("%s: the last dimension must be %s = %d, got shape %s" % (name, what, W, list(t.shape)))
    lead = [(int(t.shape[i]), int(t.stride(i))) for i in range(t.dim() - 1)]
    rows = 1
    for size, _ in lead:
        rows *= size
    dims = [(size, st) for size, st in lead if size != 1]
    for (_, outer_st), (inner_size, inner_st) in zip(dims, dims[1:]):
        if outer_st != inner_st * inner_size:
            raise ValueError("%s: the leading dimensions cannot be read as rows of one stride (shape %s, "
                             "strides %s); pass a view whose dims before the last collapse (stride(i) == "
                             "stride(i+1) * size(i+1)), or use the paged layout" % (name, list(t.shape),
                                                                                   list(t.stride())))
    st = dims[-1][1] if dims else 0
    if rows == 0:
        st = 0
    return rows, st


def _kv_blocks(t, W, strict, layout, name="kv_cache", what="L+R"):
    """(blocks, block size, block stride, entry stride) of a paged cache tensor as engines hold it: [num_blocks,
    block_size, W], with any dimensions of size 1 between the blocks and the row (e.g. vLLM's [num_blocks,
    block_size, 1, W] or [num_blocks, 1, block_size, W]); all of them of size 1 make blocks of one entry."""
    if t.dim() < 3:
        raise ValueError("%s: a %s cache is [num_blocks, block_size, %s] (dimensions of size 1 may stand between "
                         "them), got shape %s" % (name, layout, what, list(t.shape)))
    if strict and t.shape[-1] != W:
        raise ValueError("%s: the last dimension must be %s = %d, got shape %s" % (name, what, W, list(t.shape)))
    inner = [i for i in range(1, t.dim() - 1) if t.shape[i] != 1]
    if len(inner) > 1:
        raise ValueError("%s: a %s cache is [num_blocks, block_size, %s]: only one dimension between the blocks "
                         "and the row may be larger than 1, got shape %s" % (name, layout, what, list(t.shape)))
    B, est = (int(t.shape[inner[0]]), _st(t, inner[0])) if inner else (1, 0)
    return int(t.shape[0]), B, _st(t, 0), est


def _cache_part(a, t, layout, width, strict, rope=False, what="L+R"):
    """Sets the ropekv_args fields of one cache part (kv_cache, or kv_rope_cache when rope) for the layout:
    flat: kv_rows and kv_st from rows of one stride; paged and split: kv_rows = blocks x block size, the
    block size, the block and entry strides. Returns (rows, block size)."""
    name = "kv_rope_cache" if rope else "kv_cache"
    if layout == "flat":
        rows, st = _kv_rows(t, width, strict, name, what)
        a.kv_rows, a.kv_st = rows, st
        return rows, None
    blocks, B, bst, est = _kv_blocks(t, width, strict, layout, name, what)
    if rope:
        a.kv_rope_block_st, a.kv_rope_st = bst, est
    else:
        a.kv_rows, a.kv_block_size, a.kv_block_st, a.kv_st = blocks * B, B, bst, est
    return blocks * B, B


_SCALE_TENSORS = {}  # (device, value) -> a float32 tensor [1]: a scale the caller gave as a number


def _scale_number(name, x):
    """x (a Python number, or a CPU tensor's value) as a scale: a positive finite float32, else a ValueError."""
    try:
        f32 = struct.unpack("<f", struct.pack("<f", float(x)))[0]
    except OverflowError:  # past the float32 range
        f32 = math.inf
    if not (math.isfinite(f32) and f32 > 0):
        raise ValueError("%s = %r: a scale must be a positive finite float32 (1.0 for no scaling)" % (name, x))
    return f32


def _scales_in(torch, tensors):
    """k_scale / q_scale given as Python numbers become float32 tensors [1] on the device of the tensor they scale (made
    once per device and value; not inside CUDA-graph capture, where a fill would run only on replay); a number, or a
    CPU tensor, that is not a positive finite float32 is a ValueError naming it. A scale on a GPU is not read here (that
    would wait for the device). Returns tensors, or a copy with the numbers replaced."""
    out = tensors
    for name in _SCALES:
        v = tensors.get(name)
        if v is None:
            continue
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            value = _scale_number(name, v)
            like = [tensors.get(n) for n in (("kv_cache",) if name == "k_scale" else ("q_out", "q_pe"))]
            like = [x for x in like if isinstance(x, torch.Tensor)]
            device = like[0].device if like else torch.device("cpu")
            key = (str(device), value)
            got = _SCALE_TENSORS.get(key)
            if got is None:
                if device.type == "cuda" and _capturing(torch, device):
                    raise ValueError("%s = %r inside CUDA-graph capture: pass a float32 tensor [1], or make one launch "
                                     "with this scale on this device before capturing" % (name, v))
                got = _SCALE_TENSORS[key] = torch.full((1,), value, dtype=torch.float32, device=device)
            if out is tensors:
                out = dict(tensors)
            out[name] = got
        elif isinstance(v, torch.Tensor) and v.device.type == "cpu" and v.dtype == torch.float32 and v.numel() == 1:
            _scale_number(name, v.item())
    return out


def _capturing(torch, device):
    """Whether device's current stream is capturing a CUDA graph. torch.cuda.is_current_stream_capturing() asks about
    the current device's stream, which need not be device's (tensors on cuda:1 while cuda:0 is current)."""
    with torch.cuda.device(device):
        return torch.cuda.is_current_stream_capturing()


def _device_ok(ctx, t):
    if ctx.backend == "host":
        return t.device.type == "cpu"
    if t.device.type != "cuda":
        return False
    idx = t.device.index
    return (idx if idx is not None else _torch().cuda.current_device()) == ctx.device


def _where(ctx):
    return "the CPU (host backend)" if ctx.backend == "host" else "cuda:%d (%s backend)" % (ctx.device, ctx.backend)


def _torch_dtypes(torch, ti, info):
    """The torch dtypes a tensor of the table may have: its dtype's; an fp8 one as uint8 or the float8 dtype of the
    target's format."""
    if ti.dtype == "fp8_e4m3":
        return _fp8_dtypes(torch, info.fp8_format or info.q_fp8_format)
    if ti.name == "write_mask":  # bytes: a bool tensor's too
        return (torch.bool, torch.uint8)
    return (getattr(torch, {"bf16": "bfloat16", "f32": "float32"}.get(ti.dtype, ti.dtype)),)


def _describe(ti, info):
    """A tensor of the table in words, for messages: "q_out [T, H, W=576] fp8_e4m3 (ocp)"."""
    dtype = ti.dtype + (" (%s)" % (info.fp8_format or info.q_fp8_format) if ti.dtype == "fp8_e4m3" else "")
    return "%s %s %s" % (ti.name, ti.shape_text(), dtype)


def _stray(kernel, info, t, name):
    """A tensor given to a kernel whose table does not list it: dropped (a scale it does not read; zero_copy's q_nope
    when it is q_out itself; the positions and tables of a kernel without RoPE; an empty k_pe or q_pe where there is
    no rope part), else ValueError saying why."""
    q = info.q
    if name in _SCALES:
        return
    if name in ("k_pe", "q_pe") and info.R == 0:  # no rope part: an empty [.., 0] tensor is nothing to read
        if t[name].numel() == 0:
            return
        raise ValueError("%s has no rope part (qk_rope_head_dim 0): it takes no %s (pass None)" % (info.key, name))
    if name == "positions" and info.rope == "none":
        return  # nothing is rotated: the positions are not read
    if name in _Q_NAMES:
        if q == "zero_copy" and name == "q_nope" and t["q_out"] is not None \
                and t[name].data_ptr() == t["q_out"].data_ptr():
            return  # q_out[..., :L] itself: the zero-copy form does not read it
        raise ValueError("q form %r does not take %s (pass None)" % (q, name))
    if name == "norm_weight" or (name == "norm_out" and info.norm == "none"):
        raise ValueError("%s is for a kernel with the fused kv_a RMSNorm (norm='rms' or 'rms_out'); %s has norm none "
                         "(pass None, or ask for the kernel with norm=)" % (name, info.key))
    if name == "norm_out":
        raise ValueError("norm_out is written by norm='rms_out' kernels only; %s has norm rms (pass None, or ask for "
                         "norm='rms_out')" % info.key)
    if name == "sin" and info.rope != "none":
        raise ValueError("sin must be None: spec %s takes one cos_sin table [max_pos, R] (cos | sin)" % kernel.spec)
    if name in ("cos_sin", "sin"):
        return  # no RoPE: the tables are not read
    raise ValueError("%s does not take %s (its tensors: %s)" % (info.key, name, ", ".join(ti.name for ti in
                                                                                       kernel.tensors)))


def _scale_missing(info, name):
    what = ("an fp8 cache under scale convention %s" % info.scale if name == "k_scale" else
            "an fp8 query under scale convention %s" % info.q_fp8_scale)
    return ValueError("%s is required: %s %s %s (a float32 tensor [1] or a number; 1.0 for no scaling: a missing scale "
                      "is not taken as 1)" % (name, info.key, "reads" if info.op == "read" else "writes", what))


def _required(torch, info, ti, t):
    """A tensor of the table that was not given: a ValueError naming it (q_scale once the query rows are known)."""
    if ti.name == "k_scale":
        raise _scale_missing(info, "k_scale")
    if ti.name == "q_scale":
        return
    if ti.name in _Q_NAMES:
        raise ValueError("q form %r needs %s" % (info.q, ti.name))
    raise ValueError("%s is required%s: %s" % (ti.name, " (%s)" % ti.when if ti.when else
                                               " (op read)" if info.op == "read" else "", _describe(ti, info)))


def _check_shape_of(ti, v, values):
    """A tensor's shape against its dims (values: the launch's counts by symbol). A dim of Tkv or P rows may have more
    (vLLM's slot_mapping shorter than the batch); a scale is one element in any shape."""
    if ti.dims == ("1",):
        if v.numel() != 1:
            raise ValueError("%s must hold one element, got shape %s" % (ti.name, list(v.shape)))
        return
    want = [n if n is not None else values[d] for d, n in zip(ti.dims, ti.sizes)]
    more = ti.dims[0] in _ROWS_OF and ti.name != "slots"
    if more:
        if v.dim() != len(want) or list(v.shape[1:]) != want[1:] or v.shape[0] < want[0]:
            raise ValueError("%s must have shape [%s] with n >= %d (%s), got %s" % (
                ti.name, ", ".join(["n"] + [str(n) for n in want[1:]]), want[0], _ROWS_OF[ti.dims[0]], list(v.shape)))
    elif tuple(v.shape) != tuple(want):
        raise ValueError("%s must have shape %s, got %s" % (ti.name, want, list(v.shape)))


def _check_packing(ti, v):
    """The strides a tensor's table allows: the last dimension contiguous, and a packed tensor (no stride field)
    contiguous throughout."""
    if not ti.packed or ti.name in _CACHES:
        _check_last_contiguous(ti.name, v)
    elif ti.dims == ("1",):
        pass  # one element
    elif v.dim() == 1:
        if v.shape[0] > 1 and v.stride(0) != 1:
            raise ValueError("%s must be contiguous (stride 1), got stride %d" % (ti.name, v.stride(0)))
    elif not v.is_contiguous():
        raise ValueError("%s must be contiguous (rows of the table back to back)" % ti.name)


def tensor_args(kernel, ctx, min_slot=0, layout="flat", op="write", **tensors):
    """(ropekv_args, keepalive) for a launch of kernel with torch tensors, by the kernel's tensor table
    (Kernel.tensors: its tensors' dtypes, dimensions, strides and needs, from the library). kernel=None reads the
    tensors as they are (for Context.query, with the variant's layout and op): no dtype, shape or device checks
    against a kernel. The cache per the layout: see _cache_args. Query rows are written for the tokens of the q
    tensors (T), KV rows for the tokens of slots (Tkv: vLLM's slot_mapping may be shorter than the batch, DP-padded
    queries longer); k_nope / k_pe (and norm_out) hold at least Tkv rows, positions at least max(T, Tkv). A read
    kernel's rows are its slots'. min_slot: slots below it are never written (1 keeps a reserved dummy slot 0
    untouched). A kernel's tensors must all be given (a scale as a tensor or a positive number; none is not 1.0); tensors it does not
    take are refused by name, but for a scale it does not read, and zero_copy's q_nope when it is q_out itself (not
    read). An fp8 tensor (a cache, an fp8 query output) is uint8 or the float8 dtype of the target's format, its
    strides in bytes; inplace takes the bf16 q_pe as it is (the kernel writes fp8 bytes over the start of its rows);
    an fp8_tile cache is uint8 rows of info.row_bytes."""
    torch = _torch()
    if not isinstance(min_slot, int) or isinstance(min_slot, bool) or not 0 <= min_slot < 1 << 63:
        raise ValueError("min_slot must be an int from 0 to 2**63 - 1 (int64), got %r" % (min_slot,))
    unknown = sorted(set(tensors) - _NAME_SET)
    if unknown:
        raise TypeError("unexpected arguments: %s (expected some of %s)" % (", ".join(unknown), ", ".join(_NAMES)))
    t = _scales_in(torch, {k: tensors.get(k) for k in _NAMES})
    for name, v in t.items():
        if v is not None and not isinstance(v, torch.Tensor):
            raise TypeError("%s must be a torch.Tensor, got %s" % (name, type(v).__name__))
    for name in ("k_nope", "k_pe"):  # [T, 1, D]: one KV head, as SGLang, aiter and tokenspeed pass k
        v = t[name]
        if v is not None and v.dim() == 3 and v.shape[1] == 1:
            t[name] = v[:, 0]
    strict = kernel is not None
    info = kernel.info if strict else None
    if strict:
        layout, op = info.layout, info.op
    ops = _op_table(op)
    extra = [n for n in _NAMES if n not in ops and t[n] is not None]
    if extra:
        raise ValueError("%s takes no %s (op %s: %s)" % (info.key if strict else "op " + op, ", ".join(extra), op,
                                                          ", ".join(ops)))
    if layout != "split" and t["kv_rope_cache"] is not None:
        raise ValueError("kv_rope_cache is for the split layout only (this %s is %s)" % (
            "kernel's layout" if strict else "layout", layout))
    read = op == "read"
    table = kernel._tensor_by_name if strict else ops

    if strict:
        for name in _NAMES:  # what the kernel does not take
            if t[name] is not None and name not in table:
                _stray(kernel, info, t, name)
                t[name] = None
        for ti in kernel.tensors:  # what it needs
            if t[ti.name] is None and ti.need != "optional":
                _required(torch, info, ti, t)
        for ti in kernel.tensors:  # dtypes
            v = t[ti.name]
            if v is None:
                continue
            allowed = _torch_dtypes(torch, ti, info)
            if v.dtype not in allowed:
                got = str(v.dtype).replace("torch.", "")
                raise TypeError("%s must be %s, got %s (%s)" % (ti.name, _dtype_names(allowed), got,
                                                                _describe(ti, info)))
        for name, v in t.items():  # devices
            if v is not None and not _device_ok(ctx, v):
                raise ValueError("%s is on %s; this context runs on %s" % (name, v.device, _where(ctx)))

    # the launch's counts: T query tokens (the q tensors; k_nope without them), Tkv tokens with a KV row (slots), P
    # positions; a read kernel's T rows (slots)
    def rows(name):
        v = t[name]
        return int(v.shape[0]) if v is not None and v.dim() >= 1 else None

    if read:
        T = K = rows("slots") or 0
        H = 1
    else:
        qref = t["q_pe"] if t["q_pe"] is not None else t["q_out"]
        T = rows("q_pe") if t["q_pe"] is not None else rows("q_out")
        K = rows("slots")
        if T is None:  # q form none: no query rows; the launch covers the slots' tokens
            T = K if K is not None else (rows("k_nope") or 0)
        if K is None:
            K = T
        H = int(qref.shape[1]) if qref is not None and qref.dim() >= 2 else 1
    # q_out's rows per token: the model's heads (q_pe's) and padded ones written as zeros
    qo = t["q_out"]
    HQ = int(qo.shape[1]) if qo is not None and qo.dim() >= 2 and t["q_pe"] is not None else H
    P = max(T, K)

    if strict:
        if "q_scale" in table and T > 0 and t["q_scale"] is None:
            raise _scale_missing(info, "q_scale")
        values = {"T": T, "Tkv": K, "P": P, "H": H, "Hq": HQ, "out_w": info.L if t["out_rope"] is not None else info.W}
        for ti in kernel.tensors:
            v = t[ti.name]
            if v is None or ti.name in _CACHES:
                continue
            if ti.name == "cos_sin":
                if v.dim() != 2 or v.shape[1] != ti.sizes[1] or v.shape[0] < 1:
                    raise ValueError("cos_sin must have shape [max_pos, %d], got %s" % (ti.sizes[1], list(v.shape)))
            elif ti.name == "sin":
                if tuple(v.shape) != tuple(t["cos_sin"].shape):
                    raise ValueError("sin must have the shape of cos_sin %s, got %s" % (list(t["cos_sin"].shape),
                                                                                       list(v.shape)))
            else:
                _check_shape_of(ti, v, values)

    for ti in table.values():
        v = t[ti.name]
        if v is not None:
            _check_packing(ti, v)

    a = _capi.ropekv_args()
    a.tokens, a.heads = T, H
    if not read and HQ != H:
        a.q_heads = HQ
    if read:
        a.max_pos = 1
    else:
        a.kv_tokens = K if K > 0 else (_capi.KV_TOKENS_NONE if T > 0 else 0)
        cs = t["cos_sin"]
        a.max_pos = int(cs.shape[0]) if cs is not None and cs.dim() >= 1 else 1
    a.min_slot = min_slot
    for name, v in t.items():  # pointers, and the strides the table names
        if v is None or name in _CACHES:
            continue
        setattr(a, name, v.data_ptr())
        ti = table.get(name)
        if ti is not None and v.dim() == len(ti.dims):
            for i, field in enumerate(ti.strides):
                if field:
                    setattr(a, field, _st(v, i))
    if t["kv_cache"] is not None:
        _cache_args(a, t, layout, table if strict else None, strict)
    keep = tuple(v for v in t.values() if v is not None)
    return a, keep


def _cache_args(a, t, layout, table, strict):
    """The cache fields of ropekv_args from t["kv_cache"] (and t["kv_rope_cache"] for the split layout), checked
    against the kernel's table (None: widths as the tensors have them): flat, rows of one stride (the leading
    dimensions collapse); paged and split, [num_blocks, block_size, row] as engines hold them."""
    def width_of(name):
        ti = table.get(name) if table is not None else None
        if ti is not None and ti.sizes and ti.sizes[-1] is not None:
            return ti.sizes[-1], ti.dims[-1]
        v = t[name]
        return (int(v.shape[-1]) if v.dim() else 0), "the row"

    width, what = width_of("kv_cache")
    a.kv_cache = t["kv_cache"].data_ptr()
    rows, B = _cache_part(a, t["kv_cache"], layout, width, strict, what=what)
    if layout != "split":
        return
    rc = t["kv_rope_cache"]
    if rc is None:
        return
    rwidth, rwhat = width_of("kv_rope_cache")
    rrows, rB = _cache_part(a, rc, layout, rwidth, strict, rope=True, what=rwhat)
    if strict and (rB != B or rrows != rows):
        raise ValueError("kv_rope_cache %s must have the blocks and block size of kv_cache %s" % (
            list(rc.shape), list(t["kv_cache"].shape)))
    a.kv_rope_cache = rc.data_ptr()


_PLANS_MAX = 64  # argument plans kept per kernel (a full table is dropped and refilled)
_SCALE_AT = tuple(_NAMES.index(n) for n in _SCALES)


def _signature(vals, min_slot):
    """What every check of a launch depends on: each tensor's dtype, shape, strides and device (None where absent), and
    min_slot; None when a value is not a tensor (a scale given as a number, or a stranger tensor_args names)."""
    try:
        return tuple([None if v is None else (v.dtype, v.shape, v.stride(), v.device) for v in vals]), \
            min_slot.__class__, min_slot
    except AttributeError:
        return None


def plan_args(kernel, vals, min_slot, native=None):
    """The argument block (bytes packed by _capi.ARGS_PACK) of a launch of kernel with vals, the tensors in the order of
    ropekv_args' pointers (_NAMES; None where not given), as tensor_args makes it, at the cost of reading each tensor's
    pointer.

    Every check of tensor_args depends on what the tensors' signatures hold (dtype, shape, strides, device) and on
    min_slot, never on their data or addresses (the library checks alignment and overlap at every launch), with two
    exceptions: whether a zero-copy q_nope is q_out itself, which joins the signature, and the value of a scale held
    by a CPU tensor, checked at every launch. So the first launch with a signature runs the full checks and keeps the
    fields they produce as the plan; a launch with the same signature takes the plan's fields with its own tensors'
    pointers. Pointer fields not taken from a tensor of the same name (NULL, or the 1.0 of a scale passed as None)
    stay as the plan has them. A scale given as a number becomes a tensor first (_scales_in). native: the C++ module
    (_native.py), given a plan of vals' own signature without CPU scales to keep for the next launch."""
    sig = own = _signature(vals, min_slot)
    if sig is None:
        torch = _torch()
        vals = [_scales_in(torch, dict(zip(_NAMES, vals))).get(n) for n in _NAMES]
        sig = _signature(vals, min_slot)
    if sig is not None and kernel._zero_copy and vals[0] is not None and vals[2] is not None:
        sig = (sig, vals[0].data_ptr() == vals[2].data_ptr())
    plan = kernel._plans.get(sig) if sig is not None else None
    if plan is not None:
        fields, ptrs, cpu_scales = plan
        for i in cpu_scales:
            _scale_number(_NAMES[i], vals[i].item())
        fields = fields[:]  # the plan's list is shared by every thread launching with this signature
        for f, i in ptrs:
            fields[f] = vals[i].data_ptr()
    else:
        a, _ = tensor_args(kernel, kernel.ctx, min_slot=min_slot, **dict(zip(_NAMES, vals)))
        fields = list(_capi.ARGS_PACK.unpack(bytes(a)))
        if sig is not None:
            ptrs = tuple((_capi.ARGS_INDEX[name], i) for i, name in enumerate(_NAMES)
                         if vals[i] is not None and getattr(a, name) and getattr(a, name) == vals[i].data_ptr())
            cpu_scales = tuple(i for i in _SCALE_AT if vals[i] is not None and vals[i].device.type == "cpu")
            if len(kernel._plans) >= _PLANS_MAX:
                kernel._plans.clear()
            kernel._plans[sig] = (fields, ptrs, cpu_scales)
    packed = _capi.ARGS_PACK.pack(*fields)
    if native is not None and own is not None and not cpu_scales:  # own: vals' signature, so ptrs is the plan's
        native.remember(kernel._native, vals, min_slot, packed, tuple((f * 8, i) for f, i in ptrs))
    return packed


_RAW_STREAM = []  # [torch._C._cuda_getCurrentRawStream or None], looked up once


def stream_for(ctx, stream):
    """The stream handle a launch goes to: None for the host backend; stream if given (a torch Stream or an
    int handle); else torch's current stream on the context's device."""
    if ctx.backend == "host":
        return None
    if stream is not None:
        from ._core import _stream_handle
        return _stream_handle(stream)
    if not _RAW_STREAM:
        _RAW_STREAM.append(getattr(_torch()._C, "_cuda_getCurrentRawStream", None))
    raw = _RAW_STREAM[0]
    if raw is not None:  # the current stream's handle, without making a torch.cuda.Stream object
        return raw(ctx.device) or None
    return _torch().cuda.current_stream(ctx.device).cuda_stream or None



def new_read_out(kernel, kv_cache, slots, split=False):
    """A zero-filled bf16 out for a read launch: [T, L+R], or [T, L] when the rope parts go to out_rope (split),
    T = the slots' length, on kv_cache's device."""
    torch = _torch()
    if not isinstance(slots, torch.Tensor) or slots.dim() != 1:
        raise ValueError("slots must be a 1-D torch.Tensor [T] (op read), got %s" % (
            list(slots.shape) if isinstance(slots, torch.Tensor) else type(slots).__name__))
    if not isinstance(kv_cache, torch.Tensor):
        raise ValueError("kv_cache is required (op read)")
    info = kernel.info
    return torch.zeros(int(slots.shape[0]), info.L if split else info.W, dtype=torch.bfloat16, device=kv_cache.device)
