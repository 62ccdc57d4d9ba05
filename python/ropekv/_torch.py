"""torch tensors -> ropekv_args. Imported only when tensors are used (torch is imported lazily)."""
from . import _capi


def _torch():
    import torch
    return torch


_ARG_NAMES = ("q_nope", "q_pe", "q_out", "k_nope", "k_pe", "kv_cache", "positions", "slots", "cos_sin", "sin",
              "k_scale", "q_scale")


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


def _kv_rows(t, W, strict):
    """(rows, row stride) of a cache tensor [..., W] whose leading dimensions collapse into rows."""
    if t.dim() == 0:
        raise ValueError("kv_cache must have at least one dimension (rows of L+R)")
    if strict and t.shape[-1] != W:
        raise ValueError("kv_cache: the last dimension must be L+R = %d, got shape %s" % (W, list(t.shape)))
    lead = [(int(t.shape[i]), int(t.stride(i))) for i in range(t.dim() - 1)]
    rows = 1
    for size, _ in lead:
        rows *= size
    dims = [(size, st) for size, st in lead if size != 1]
    for (_, outer_st), (inner_size, inner_st) in zip(dims, dims[1:]):
        if outer_st != inner_st * inner_size:
            raise ValueError("kv_cache: the leading dimensions cannot be read as rows of one stride (shape %s, "
                             "strides %s); pass a view whose dims before the last collapse (stride(i) == "
                             "stride(i+1) * size(i+1))" % (list(t.shape), list(t.stride())))
    st = dims[-1][1] if dims else 0
    if rows == 0:
        st = 0
    return rows, st


def _device_ok(ctx, t):
    if ctx.backend == "host":
        return t.device.type == "cpu"
    if t.device.type != "cuda":
        return False
    idx = t.device.index
    return (idx if idx is not None else _torch().cuda.current_device()) == ctx.device


def _where(ctx):
    return "the CPU (host backend)" if ctx.backend == "host" else "cuda:%d (%s backend)" % (ctx.device, ctx.backend)


def tensor_args(kernel, ctx, min_slot=0, **tensors):
    """(ropekv_args, keepalive) for a launch of kernel with torch tensors. kernel=None reads the tensors as they
    are (for Context.query): no dtype, shape or device checks against a kernel. Query rows are written for the
    tokens of the q tensors (T), KV rows for the tokens of slots (Tkv: vLLM's slot_mapping may be shorter than
    the batch, DP-padded queries longer); k_nope / k_pe hold at least Tkv rows, positions at least max(T, Tkv).
    min_slot: slots below it are never written (1 keeps a reserved dummy slot 0 untouched).
    An fp8 query output (info.q_dtype "fp8_e4m3"): q_out (absorbed, zero_copy) is uint8 or the float8 dtype of
    info.q_fp8_format, its strides in bytes (elements of that 1-byte dtype); inplace takes the bf16 q_pe as it
    is (the kernel writes fp8 bytes over the start of its rows); q_scale (one float32) is needed when the launch
    has query rows and info.q_fp8_scale is not "none"."""
    torch = _torch()
    if not isinstance(min_slot, int) or isinstance(min_slot, bool) or min_slot < 0:
        raise ValueError("min_slot must be an int >= 0, got %r" % (min_slot,))
    unknown = sorted(set(tensors) - set(_ARG_NAMES))
    if unknown:
        raise TypeError("unexpected arguments: %s (expected some of %s)" % (", ".join(unknown), ", ".join(_ARG_NAMES)))
    t = {k: tensors.get(k) for k in _ARG_NAMES}
    for name, v in t.items():
        if v is not None and not isinstance(v, torch.Tensor):
            raise TypeError("%s must be a torch.Tensor, got %s" % (name, type(v).__name__))
    strict = kernel is not None
    info = kernel.info if strict else None

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
        if info.rope != "none" and t["cos_sin"] is None:
            raise ValueError("cos_sin is required")
        split = info.cos_sin != "f32_cat"
        if info.rope != "none" and split and t["sin"] is None:
            raise ValueError("sin is required: spec %s has split cos/sin tables (%s)" % (kernel.spec, info.cos_sin))
        if not split and t["sin"] is not None:
            raise ValueError("sin must be None: spec %s takes one cos_sin table [max_pos, R] (cos | sin)" % kernel.spec)
        fp8 = info.kv == "fp8_e4m3"
        needs_scale = fp8 and info.scale != "none"
        if needs_scale and t["k_scale"] is None:
            raise ValueError("k_scale is required (fp8 cache with scale convention %r)" % info.scale)
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
        _check_dtype("kv_cache", t["kv_cache"], _fp8_dtypes(torch, info.fp8_format) if fp8 else bf16)
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
            raise ValueError("q_scale is required (fp8 query output with scale convention %r)" % info.q_fp8_scale)
        shapes = {"q_nope": (T, H, L), "q_pe": (T, H, R), "q_out": (T, H, W), "slots": (K,)}
        for name, want in shapes.items():
            if t[name] is not None:
                _check_shape(name, t[name], want)
        for name, width in (("k_nope", L), ("k_pe", R)):
            v = t[name]
            if v.dim() != 2 or v.shape[1] != width or v.shape[0] < K:
                raise ValueError("%s must have shape [n, %d] with n >= %d (the tokens of slots), got %s"
                                 % (name, width, K, list(v.shape)))
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
        W_check = W
    else:
        W_check = int(t["kv_cache"].shape[-1]) if t["kv_cache"] is not None and t["kv_cache"].dim() else 0

    for name in ("q_nope", "q_pe", "q_out", "k_nope", "k_pe", "kv_cache"):
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
    for name in ("k_nope", "k_pe"):
        v = t[name]
        if v is None:
            continue
        setattr(a, name, ptr(name))
        if v.dim() == 2:
            setattr(a, name + "_st", _st(v, 0))
    if t["kv_cache"] is not None:
        a.kv_cache = ptr("kv_cache")
        a.kv_rows, a.kv_st = _kv_rows(t["kv_cache"], W_check, strict)
    a.positions = ptr("positions")
    a.slots = ptr("slots")
    a.cos_sin = ptr("cos_sin")
    a.sin = ptr("sin")
    a.k_scale = ptr("k_scale")
    a.q_scale = ptr("q_scale")
    a.max_pos = int(t["cos_sin"].shape[0]) if t["cos_sin"] is not None and t["cos_sin"].dim() >= 1 else 1
    keep = tuple(v for v in t.values() if v is not None)
    return a, keep


def stream_for(ctx, stream):
    """The stream handle a launch goes to: None for the host backend; stream if given (a torch Stream or an
    int handle); else torch's current stream on the context's device."""
    from ._core import _stream_handle
    if ctx.backend == "host":
        return None
    if stream is not None:
        return _stream_handle(stream)
    torch = _torch()
    return torch.cuda.current_stream(ctx.device).cuda_stream or None

