"""torch tensors -> ropekv_args. Imported only when tensors are used (torch is imported lazily)."""
from . import _capi


def _torch():
    import torch
    return torch


_ARG_NAMES = ("q_nope", "q_pe", "q_out", "k_nope", "k_pe", "kv_cache", "positions", "slots", "cos_sin", "sin",
              "k_scale", "q_scale", "kv_rope_cache", "out", "out_rope", "norm_weight", "norm_out")
_N_ARGS = len(_ARG_NAMES)
_NO_NORM = (None, None)  # a launch's vals without the norm's two tensors (the form before the norm) padded with it
# what each op reads or writes (the rest must be None)
_READ_NAMES = ("kv_cache", "kv_rope_cache", "slots", "k_scale", "out", "out_rope")
_WRITE_NAMES = tuple(n for n in _ARG_NAMES if n not in ("out", "out_rope"))


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


def _cache_args(a, t, layout, info, strict):
    """The cache fields of ropekv_args from t["kv_cache"] (and t["kv_rope_cache"] for the split layout), checked
    against the kernel's row (info; None: widths as the tensors have them)."""
    if info is not None and info.kv == "fp8_tile":  # one row, flat or paged (the spec refuses split)
        width, what = info.row_bytes, "the row bytes"
    elif info is not None:
        width = info.L if layout == "split" else info.W
        what = "L" if layout == "split" else "L+R"
    else:
        width = int(t["kv_cache"].shape[-1]) if t["kv_cache"].dim() else 0
        what = "the row"
    a.kv_cache = t["kv_cache"].data_ptr()
    rows, B = _cache_part(a, t["kv_cache"], layout, width, strict, what=what)
    if layout != "split":
        return
    rc = t["kv_rope_cache"]
    if rc is None:
        return
    rwidth = info.R if info is not None else (int(rc.shape[-1]) if rc.dim() else 0)
    rrows, rB = _cache_part(a, rc, layout, rwidth, strict, rope=True, what="R")
    if strict and (rB != B or rrows != rows):
        raise ValueError("kv_rope_cache %s must have the blocks and block size of kv_cache %s" % (
            list(rc.shape), list(t["kv_cache"].shape)))
    a.kv_rope_cache = rc.data_ptr()


def _check_cache_dtypes(torch, info, t):
    """kv_cache (and kv_rope_cache) dtype for the kernel's KV dtype: bf16; an fp8 e4m3 cache uint8 or the float8
    dtype of its format; an fp8_tile cache uint8 (its rows hold fp8 values, float32 scales and bf16 rope values)."""
    if info.kv == "fp8_tile":
        allowed = (torch.uint8,)
        for name in ("kv_cache", "kv_rope_cache"):
            v = t[name]
            if v is not None and v.dtype not in allowed:
                raise TypeError("%s must be uint8 (an fp8_tile cache: rows of %d bytes, strides in bytes), got %s" % (
                    name, info.row_bytes, str(v.dtype).replace("torch.", "")))
        return
    allowed = _fp8_dtypes(torch, info.fp8_format) if info.kv == "fp8_e4m3" else (torch.bfloat16,)
    for name in ("kv_cache", "kv_rope_cache"):
        if t[name] is not None:
            _check_dtype(name, t[name], allowed)


_UNIT_SCALES = {}  # device -> a float32 tensor [1] holding 1.0: the scale of a caller who passes none


def _unit_scale(torch, device, name):
    """k_scale / q_scale = None means 1.0 (the identity under every scale convention: x * (1 / 1), x / 1, x * 1),
    as engines pass it for an fp8 cache without calibration (SGLang's attn.k_scale may be None). One tensor per
    device, made on first use; it cannot be made inside CUDA-graph capture (its fill would run only on replay)."""
    key = str(device)
    v = _UNIT_SCALES.get(key)
    if v is None:
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            raise ValueError("%s is None inside CUDA-graph capture: pass a float32 tensor [1] (1.0), or make one "
                             "launch on this device before capturing" % name)
        v = _UNIT_SCALES[key] = torch.ones(1, dtype=torch.float32, device=device)
    return v


def _device_ok(ctx, t):
    if ctx.backend == "host":
        return t.device.type == "cpu"
    if t.device.type != "cuda":
        return False
    idx = t.device.index
    return (idx if idx is not None else _torch().cuda.current_device()) == ctx.device


def _where(ctx):
    return "the CPU (host backend)" if ctx.backend == "host" else "cuda:%d (%s backend)" % (ctx.device, ctx.backend)


def tensor_args(kernel, ctx, min_slot=0, layout="flat", op="write", **tensors):
    """(ropekv_args, keepalive) for a launch of kernel with torch tensors. kernel=None reads the tensors as they
    are (for Context.query, with the variant's layout and op): no dtype, shape or device checks against a kernel.
    A read kernel's tensors: see read_args. The cache per the layout: see _cache_args. Query rows are written for the
    tokens of the q tensors (T), KV rows for the tokens of slots (Tkv: vLLM's slot_mapping may be shorter than
    the batch, DP-padded queries longer); k_nope / k_pe hold at least Tkv rows, positions at least max(T, Tkv).
    min_slot: slots below it are never written (1 keeps a reserved dummy slot 0 untouched).
    An fp8 query output (info.q_dtype "fp8_e4m3"): q_out (absorbed, zero_copy) is uint8 or the float8 dtype of
    info.q_fp8_format, its strides in bytes (elements of that 1-byte dtype); inplace takes the bf16 q_pe as it
    is (the kernel writes fp8 bytes over the start of its rows); q_scale (one float32) is needed when the launch
    has query rows and info.q_fp8_scale is not "none".
    The fused kv_a RMSNorm (info.norm "rms" / "rms_out"): norm_weight, 1-D [L] contiguous, of info.norm_weight's dtype
    (bf16 or float32); rms_out: norm_out [>= Tkv, L] bf16, its last dimension contiguous (the library checks its
    16-byte alignment). Refused by name for a kernel that does not read them (norm none; norm_out with norm rms)."""
    torch = _torch()
    if not isinstance(min_slot, int) or isinstance(min_slot, bool) or not 0 <= min_slot < 1 << 63:
        raise ValueError("min_slot must be an int from 0 to 2**63 - 1 (int64), got %r" % (min_slot,))
    unknown = sorted(set(tensors) - set(_ARG_NAMES))
    if unknown:
        raise TypeError("unexpected arguments: %s (expected some of %s)" % (", ".join(unknown), ", ".join(_ARG_NAMES)))
    t = {k: tensors.get(k) for k in _ARG_NAMES}
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
    names = _READ_NAMES if op == "read" else _WRITE_NAMES
    extra = [n for n in _ARG_NAMES if n not in names and t[n] is not None]
    if extra:
        raise ValueError("%s takes no %s (op %s: %s)" % (info.key if strict else "op " + op, ", ".join(extra), op,
                                                          ", ".join(names)))
    if layout != "split" and t["kv_rope_cache"] is not None:
        raise ValueError("kv_rope_cache is for the split layout only (this %s is %s)" % (
            "kernel's layout" if strict else "layout", layout))
    if op == "read":
        return read_args(torch, kernel, ctx, t, layout, min_slot)

    if strict:
        q = info.q
        need = {"absorbed": ("q_nope", "q_pe", "q_out"), "zero_copy": ("q_pe", "q_out"), "inplace": ("q_pe",),
                "none": ()}[q]
        for name in need:
            if t[name] is None:
                raise ValueError("q form %r needs %s" % (q, name))
        for name in ("q_nope", "q_pe", "q_out"):
            if name in need or t[name] is None:
                continue
            if q == "zero_copy" and name == "q_nope" and t["q_out"] is not None \
                    and t[name].data_ptr() == t["q_out"].data_ptr():
                t[name] = None  # q_out[..., :L] itself: the zero-copy form does not read it
                continue
            raise ValueError("q form %r does not take %s (pass None)" % (q, name))
        for name in ("k_nope", "k_pe", "kv_cache", "positions", "slots"):
            if t[name] is None:
                raise ValueError("%s is required" % name)
        if layout == "split" and t["kv_rope_cache"] is None:
            raise ValueError("kv_rope_cache is required (layout split: the rope parts [pages, block_size, R])")
        if info.rope != "none" and t["cos_sin"] is None:
            raise ValueError("cos_sin is required")
        split = info.cos_sin != "f32_cat"
        if info.rope != "none" and split and t["sin"] is None:
            raise ValueError("sin is required: spec %s has split cos/sin tables (%s)" % (kernel.spec, info.cos_sin))
        if not split and t["sin"] is not None:
            raise ValueError("sin must be None: spec %s takes one cos_sin table [max_pos, R] (cos | sin)" % kernel.spec)
        _check_norm_presence(info, t)
        fp8 = info.kv == "fp8_e4m3"
        needs_scale = fp8 and info.scale != "none"
        if needs_scale and t["k_scale"] is None:
            t["k_scale"] = _unit_scale(torch, t["kv_cache"].device, "k_scale")
        if not needs_scale:
            t["k_scale"] = None  # not read by this kernel
        q_fp8 = info.q_dtype == "fp8_e4m3" and q != "none"
        needs_q_scale = q_fp8 and info.q_fp8_scale != "none"
        if not needs_q_scale:
            t["q_scale"] = None  # not read by this kernel (checked against the query rows below)

        # dtypes
        bf16 = (torch.bfloat16,)
        for name in ("q_nope", "q_pe", "k_nope", "k_pe"):
            if t[name] is not None:
                _check_dtype(name, t[name], bf16)
        if t["q_out"] is not None:
            if q_fp8:
                fp8_q = _fp8_dtypes(torch, info.q_fp8_format)
                if t["q_out"].dtype not in fp8_q:
                    raise TypeError("q_out must be %s (the kernel's query output is fp8 e4m3, %s), got %s" % (
                        _dtype_names(fp8_q), info.q_fp8_format, str(t["q_out"].dtype).replace("torch.", "")))
            else:
                _check_dtype("q_out", t["q_out"], bf16)
        _check_cache_dtypes(torch, info, t)
        idx = {"int64": (torch.int64,), "int32": (torch.int32,)}
        _check_dtype("positions", t["positions"], idx[info.positions])
        _check_dtype("slots", t["slots"], idx[info.slots])
        cs_dt = (torch.bfloat16,) if info.cos_sin == "bf16_split" else (torch.float32,)
        for name in ("cos_sin", "sin"):
            if t[name] is not None:
                _check_dtype(name, t[name], cs_dt)
        if t["k_scale"] is not None:
            _check_dtype("k_scale", t["k_scale"], (torch.float32,))
            if t["k_scale"].numel() != 1:
                raise ValueError("k_scale must hold one element, got shape %s" % list(t["k_scale"].shape))
        if t["q_scale"] is not None:
            _check_dtype("q_scale", t["q_scale"], (torch.float32,))
            if t["q_scale"].numel() != 1:
                raise ValueError("q_scale must hold one element, got shape %s" % list(t["q_scale"].shape))
        if t["norm_weight"] is not None:
            _check_dtype("norm_weight", t["norm_weight"], (_NORM_WEIGHT_DTYPES[info.norm_weight](torch),))
        if t["norm_out"] is not None:
            _check_dtype("norm_out", t["norm_out"], bf16)

        # devices
        for name, v in t.items():
            if v is not None and not _device_ok(ctx, v):
                raise ValueError("%s is on %s; this context runs on %s" % (name, v.device, _where(ctx)))

    # sizes: T query tokens (the q tensors; k_nope without them), K tokens with a KV row (slots), P positions
    def rows(name):
        v = t[name]
        return int(v.shape[0]) if v is not None and v.dim() >= 1 else None

    qref = t["q_pe"] if t["q_pe"] is not None else t["q_out"]
    T = rows("q_pe") if t["q_pe"] is not None else rows("q_out")
    K = rows("slots")
    if T is None:  # q form none: no query rows; the launch covers the slots' tokens
        T = K if K is not None else (rows("k_nope") or 0)
    if K is None:
        K = T
    P = max(T, K)
    H = int(qref.shape[1]) if qref is not None and qref.dim() >= 2 else 1

    if strict:
        L, R, W = info.L, info.R, info.W
        if needs_q_scale and T > 0 and t["q_scale"] is None:
            t["q_scale"] = _unit_scale(torch, t["q_out"].device if t["q_out"] is not None else t["q_pe"].device,
                                       "q_scale")
        shapes = {"q_nope": (T, H, L), "q_pe": (T, H, R), "q_out": (T, H, W), "slots": (K,)}
        for name, want in shapes.items():
            if t[name] is not None:
                _check_shape(name, t[name], want)
        for name, width in (("k_nope", L), ("k_pe", R)) + ((("norm_out", L),) if t["norm_out"] is not None else ()):
            v = t[name]
            if v.dim() != 2 or v.shape[1] != width or v.shape[0] < K:
                raise ValueError("%s must have shape [n, %d] with n >= %d (the tokens of slots), got %s"
                                 % (name, width, K, list(v.shape)))
        v = t["norm_weight"]
        if v is not None:
            if v.dim() != 1 or v.shape[0] != L:
                raise ValueError("norm_weight must have shape [%d] (L, the kv_a RMSNorm weight), got %s"
                                 % (L, list(v.shape)))
            if L > 1 and v.stride(0) != 1:
                raise ValueError("norm_weight must be contiguous (stride 1), got stride %d" % v.stride(0))
        v = t["positions"]
        if v.dim() != 1 or v.shape[0] < P:
            raise ValueError("positions must have shape [n] with n >= %d (max of the query and slot tokens), got %s"
                             % (P, list(v.shape)))
        if t["cos_sin"] is not None:
            cs = t["cos_sin"]
            width = R if info.cos_sin == "f32_cat" else R // 2
            if cs.dim() != 2 or cs.shape[1] != width or cs.shape[0] < 1:
                raise ValueError("cos_sin must have shape [max_pos, %d], got %s" % (width, list(cs.shape)))
            if t["sin"] is not None and tuple(t["sin"].shape) != tuple(cs.shape):
                raise ValueError("sin must have the shape of cos_sin %s, got %s" % (list(cs.shape), list(t["sin"].shape)))

    for name in ("q_nope", "q_pe", "q_out", "k_nope", "k_pe", "kv_cache", "kv_rope_cache", "norm_weight", "norm_out"):
        if t[name] is not None:
            _check_last_contiguous(name, t[name])
    for name in ("positions", "slots"):
        v = t[name]
        if v is not None and v.dim() == 1 and v.shape[0] > 1 and v.stride(0) != 1:
            raise ValueError("%s must be contiguous (stride 1), got stride %d" % (name, v.stride(0)))
    for name in ("cos_sin", "sin"):
        v = t[name]
        if v is not None and not v.is_contiguous():
            raise ValueError("%s must be contiguous (rows of the table back to back)" % name)

    a = _capi.ropekv_args()
    a.tokens, a.heads = T, H
    a.kv_tokens = K if K > 0 else (_capi.KV_TOKENS_NONE if T > 0 else 0)
    a.min_slot = min_slot

    def ptr(name):
        v = t[name]
        return v.data_ptr() if v is not None else None

    for name in ("q_nope", "q_pe", "q_out"):
        v = t[name]
        if v is None:
            continue
        setattr(a, name, ptr(name))
        if v.dim() == 3:
            setattr(a, name + "_st", _st(v, 0))
            setattr(a, name + "_sh", _st(v, 1))
    for name in ("k_nope", "k_pe", "norm_out"):
        v = t[name]
        if v is None:
            continue
        setattr(a, name, ptr(name))
        if v.dim() == 2:
            setattr(a, name + "_st", _st(v, 0))
    a.norm_weight = ptr("norm_weight")
    if t["kv_cache"] is not None:
        _cache_args(a, t, layout, info, strict)
    a.positions = ptr("positions")
    a.slots = ptr("slots")
    a.cos_sin = ptr("cos_sin")
    a.sin = ptr("sin")
    a.k_scale = ptr("k_scale")
    a.q_scale = ptr("q_scale")
    a.max_pos = int(t["cos_sin"].shape[0]) if t["cos_sin"] is not None and t["cos_sin"].dim() >= 1 else 1
    keep = tuple(v for v in t.values() if v is not None)
    return a, keep


_NORM_WEIGHT_DTYPES = {"bf16": lambda torch: torch.bfloat16, "f32": lambda torch: torch.float32}


def _check_norm_presence(info, t):
    """The fused norm's tensors against the kernel's norm: norm_weight is read by rms and rms_out kernels only (and
    required there), norm_out written by rms_out kernels only (and required there)."""
    norm = info.norm
    if norm == "none":
        for name in ("norm_weight", "norm_out"):
            if t[name] is not None:
                raise ValueError("%s is for a kernel with the fused kv_a RMSNorm (norm='rms' or 'rms_out'); %s has "
                                 "norm none (pass None, or ask for the kernel with norm=)" % (name, info.key))
        return
    if t["norm_weight"] is None:
        raise ValueError("norm_weight is required (norm %s: the kv_a RMSNorm weight [%d], %s)" % (
            norm, info.L, "bfloat16" if info.norm_weight == "bf16" else "float32"))
    if norm == "rms" and t["norm_out"] is not None:
        raise ValueError("norm_out is written by norm='rms_out' kernels only; %s has norm rms (pass None, or ask for "
                         "norm='rms_out')" % info.key)
    if norm == "rms_out" and t["norm_out"] is None:
        raise ValueError("norm_out is required (norm rms_out writes the normalized c_kv to norm_out [Tkv, %d] bf16)"
                         % info.L)


_PLANS_MAX = 64  # argument plans kept per kernel (a full table is dropped and refilled)


def plan_args(kernel, vals, min_slot):
    """The argument block (bytes packed by _capi.ARGS_PACK) of a launch of kernel with vals, the tensors in
    _ARG_NAMES order (None where absent), as tensor_args makes it, at the cost of reading each tensor's pointer.

    Every check of tensor_args depends on what the tensors' signatures hold (dtype, shape, strides, device) and on
    min_slot, never on their data or addresses (the library checks alignment and overlap at every launch), with one
    exception: whether a zero-copy q_nope is q_out itself, which joins the signature. So the first launch with a
    signature runs the full checks and keeps the fields they produce as the plan; a launch with the same signature
    takes the plan's fields with its own tensors' pointers. Pointer fields not taken from a tensor of the same name
    (NULL, or the 1.0 of a scale passed as None) stay as the plan has them. vals without the last two (norm_weight,
    norm_out) are read as None there."""
    if len(vals) != _N_ARGS:
        vals = tuple(vals) + _NO_NORM if len(vals) == _N_ARGS - 2 else vals
    try:
        sig = tuple([None if v is None else (v.dtype, v.shape, v.stride(), v.device) for v in vals])
    except AttributeError:  # not a tensor: tensor_args raises the named error
        sig = None
    if sig is not None:
        if kernel._zero_copy and vals[0] is not None and vals[2] is not None:
            sig = (sig, vals[0].data_ptr() == vals[2].data_ptr())
        sig = (sig, min_slot.__class__, min_slot)
        plan = kernel._plans.get(sig)
        if plan is not None:
            fields, ptrs = plan
            fields = fields[:]  # the plan's list is shared by every thread launching with this signature
            for f, i in ptrs:
                fields[f] = vals[i].data_ptr()
            return _capi.ARGS_PACK.pack(*fields)
    a, _ = tensor_args(kernel, kernel.ctx, min_slot=min_slot, **dict(zip(_ARG_NAMES, vals)))
    fields = list(_capi.ARGS_PACK.unpack(bytes(a)))
    if sig is not None:
        ptrs = tuple((_capi.ARGS_INDEX[name], i) for i, name in enumerate(_ARG_NAMES)
                     if vals[i] is not None and getattr(a, name) and getattr(a, name) == vals[i].data_ptr())
        if len(kernel._plans) >= _PLANS_MAX:
            kernel._plans.clear()
        kernel._plans[sig] = (fields, ptrs)
    return _capi.ARGS_PACK.pack(*fields)


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



def read_args(torch, kernel, ctx, t, layout, min_slot):
    """(ropekv_args, keepalive) of a read-back launch (op read): out[t] = the row of slots[t] as bf16. kv_cache
    (with kv_rope_cache for the split layout) as a write kernel takes it, slots [T] (int64/int32 per the variant),
    out [T, L+R] bf16, or out [T, L] with out_rope [T, R], and k_scale (one float32) for an fp8 e4m3 cache whose
    convention is not "none". kernel=None (Context.query): the tensors as they are."""
    strict = kernel is not None
    info = kernel.info if strict else None
    if strict:
        for name in ("kv_cache", "slots", "out"):
            if t[name] is None:
                raise ValueError("%s is required (op read)" % name)
        if layout == "split" and t["kv_rope_cache"] is None:
            raise ValueError("kv_rope_cache is required (layout split: the rope parts [pages, block_size, R])")
        needs_scale = info.kv == "fp8_e4m3" and info.scale != "none"
        if needs_scale and t["k_scale"] is None:
            t["k_scale"] = _unit_scale(torch, t["kv_cache"].device, "k_scale")
        if not needs_scale:
            t["k_scale"] = None  # not read by this kernel
        _check_cache_dtypes(torch, info, t)
        _check_dtype("slots", t["slots"], {"int64": (torch.int64,), "int32": (torch.int32,)}[info.slots])
        for name in ("out", "out_rope"):
            if t[name] is not None:
                _check_dtype(name, t[name], (torch.bfloat16,))
        if t["k_scale"] is not None:
            _check_dtype("k_scale", t["k_scale"], (torch.float32,))
            if t["k_scale"].numel() != 1:
                raise ValueError("k_scale must hold one element, got shape %s" % list(t["k_scale"].shape))
        for name, v in t.items():
            if v is not None and not _device_ok(ctx, v):
                raise ValueError("%s is on %s; this context runs on %s" % (name, v.device, _where(ctx)))
    sl = t["slots"]
    T = int(sl.shape[0]) if sl is not None and sl.dim() >= 1 else 0
    if strict:
        L, R, W = info.L, info.R, info.W
        _check_shape("slots", sl, (T,))
        if t["out_rope"] is not None:
            _check_shape("out", t["out"], (T, L))
            _check_shape("out_rope", t["out_rope"], (T, R))
        elif tuple(t["out"].shape) != (T, W):
            raise ValueError("out must have shape %s (or %s with out_rope [%d, %d]), got %s" % (
                [T, W], [T, L], T, R, list(t["out"].shape)))
    for name in ("kv_cache", "kv_rope_cache", "out", "out_rope"):
        if t[name] is not None:
            _check_last_contiguous(name, t[name])
    if sl is not None and sl.dim() == 1 and sl.shape[0] > 1 and sl.stride(0) != 1:
        raise ValueError("slots must be contiguous (stride 1), got stride %d" % sl.stride(0))

    a = _capi.ropekv_args()
    a.tokens, a.heads, a.max_pos = T, 1, 1
    a.min_slot = min_slot
    if t["kv_cache"] is not None:
        _cache_args(a, t, layout, info, strict)
    a.slots = sl.data_ptr() if sl is not None else None
    a.k_scale = t["k_scale"].data_ptr() if t["k_scale"] is not None else None
    for name in ("out", "out_rope"):
        v = t[name]
        if v is not None:
            setattr(a, name, v.data_ptr())
            if v.dim() == 2:
                setattr(a, name + "_st", _st(v, 0))
    keep = tuple(v for v in t.values() if v is not None)
    return a, keep


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
