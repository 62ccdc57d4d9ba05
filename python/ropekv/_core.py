"""Context, Kernel and errors over the C API (no torch needed here; see _torch.py for tensors)."""
import collections
import ctypes
import struct
import sys
import threading

from . import _capi
from . import _native  # the C++ argument plans of eager launches, built on first use
from . import _torch  # tensors -> ropekv_args (imports torch only when tensors are used)

_N_POINTERS = len(_capi.ARGS_POINTERS)


class RopekvError(RuntimeError):
    """A failure reported by libropekv: status is the ropekv_status_name ("ROPEKV_ERR_ALIGN"), code its value,
    message the context's ropekv_last_error text (compiler log, path, Lua traceback ...)."""

    def __init__(self, status, message, code=None):
        self.status = status
        self.code = _capi.STATUS.get(status) if code is None else code
        self.message = message
        super().__init__(status, message)

    def __str__(self):
        return "%s: %s" % (self.status, self.message) if self.message else self.status


# ---- what a kernel is --------------------------------------------------------------------------------------
_BY_VALUE = {
    "q_dtype": {v: k for k, v in _capi.Q_DTYPES.items()},
    "layout": {v: k for k, v in _capi.LAYOUTS.items()},
    "op": {v: k for k, v in _capi.OPS.items()},
    "norm": {v: k for k, v in _capi.NORMS.items()},
}

# torch dtypes accepted for q_dtype, by their str() (torch is not imported here): the fp8 query output is e4m3 in
# the target's format whichever of the two torch dtypes names it (the q_out tensor's dtype is checked at launch)
_Q_DTYPE_ALIASES = {"torch.bfloat16": "bf16", "torch.float8_e4m3fn": "fp8_e4m3", "torch.float8_e4m3fnuz": "fp8_e4m3"}


def _q_dtype(value):
    """q_dtype as its spelling ("bf16" / "fp8_e4m3"): a spelling, the enum's int, or a torch dtype."""
    if isinstance(value, str) and value in _capi.Q_DTYPES:
        return value
    if isinstance(value, int) and not isinstance(value, bool) and value in _BY_VALUE["q_dtype"]:
        return _BY_VALUE["q_dtype"][value]
    alias = _Q_DTYPE_ALIASES.get(str(value)) if type(value).__name__ == "dtype" else None
    if alias is not None:
        return alias
    raise ValueError("q_dtype must be one of %s (or torch.bfloat16, torch.float8_e4m3fn, torch.float8_e4m3fnuz), "
                     "got %r" % (", ".join(sorted(_capi.Q_DTYPES)), value))


# The parameters (ropekv_kernel_param) KernelInfo names otherwise; every other parameter keeps the library's name.
_INFO_NAMES = {"kv_lora_rank": "L", "rope_dim": "R", "fp8_scale": "scale", "fp8_saturate": "sat",
               "fp8_rope_bf16_round": "rope_bf16_round"}


def _float32(x):
    """x rounded to float32 (the parameter's value: its text is the shortest decimal that reads back as it)."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


# A parameter's text as Python reads it, by its kind (ropekv_param_kind): text ("" where it does not apply: None),
# int, float (a float32's value), bool
_FROM_TEXT = {
    _capi.PARAM_KINDS["text"]: lambda t: t or None,
    _capi.PARAM_KINDS["int"]: int,
    _capi.PARAM_KINDS["float"]: lambda t: _float32(float(t)),
    _capi.PARAM_KINDS["bool"]: lambda t: t == "true",
}


def kernel_params(lib, handle):
    """[(name, value text, kind)] of a kernel, as the library gives them (ropekv_kernel_param)."""
    name, value, kind = ctypes.c_char_p(), ctypes.c_char_p(), ctypes.c_int()
    out = []
    for i in range(lib.ropekv_kernel_param_count(handle)):
        code = lib.ropekv_kernel_param(handle, i, ctypes.byref(name), ctypes.byref(value), ctypes.byref(kind))
        if code != 0:
            raise RopekvError(_capi.status_name(code), "ropekv_kernel_param %d failed" % i, code)
        out.append((name.value.decode(), value.value.decode(errors="replace"), kind.value))
    return out


class KernelInfo:
    """A kernel's parameters as the library describes them (ropekv_kernel_param, whose list in include/ropekv.h
    says what each means), as attributes of the library's names and values: text (the spec's spellings; None where
    a parameter does not apply to the kernel), int, float or bool per the parameter's kind. A parameter a newer
    library adds appears here under its name. Five are named otherwise: L (kv_lora_rank), R (rope_dim), scale,
    sat and rope_bf16_round (the cache's fp8_scale, fp8_saturate and fp8_rope_bf16_round); W = L + R. So:
    name, key, spec, target, L, R, W, rope, cos_sin, positions, slots ("int64"/"int32"), kv ("bf16"/"fp8_e4m3"/
    "fp8_tile"), fp8_format ("ocp"/"fnuz", None for bf16), scale, sat, rope_bf16_round, fp8_matches (whose convention
    the cache's fp8 policy follows, None if the spec says nothing), negative_slot, q, q_dtype ("bf16"/"fp8_e4m3",
    "bf16" for q form none), q_fp8_format (None for a bf16 query output), layout ("flat"/"paged"/"split"),
    q_fp8_scale, q_fp8_saturate, q_fp8_rope_bf16_round, q_fp8_matches, sanitize, op ("write"/"read"), fp8_tile
    (values per tile, 0 for other caches), fp8_tile_scale ("f32"/"pow2", None for other caches), fp8_tile_scales_at,
    fp8_tile_rope_at, fp8_tile_readers (the spec's word on which readers read the tile row right, None for other
    caches), row_bytes (bytes of one cache row; of its latent part alone in the split layout),
    read_negative_slot ("zero"/"skip" for the read op, else None), norm ("none"/"rms"/"rms_out"), norm_weight
    ("bf16"/"f32", None without a norm), norm_eps, norm_rounding ("twice"/"once", None without a norm),
    norm_matches, block, wide_block, wide_from, pdl."""

    def __init__(self, params):
        """params: [(name, value text, kind)] as kernel_params gives them."""
        values = {}
        for name, text, kind in params:
            convert = _FROM_TEXT.get(kind)
            values[_INFO_NAMES.get(name, name)] = convert(text) if convert else text
            if name == "rope_dim" and "L" in values:
                values["W"] = values["L"] + values["R"]
        self.__dict__.update(values)
        self._names = tuple(values)

    def as_dict(self):
        return {k: getattr(self, k) for k in self._names}

    def __repr__(self):
        return "KernelInfo(%s)" % ", ".join("%s=%r" % (k, getattr(self, k)) for k in self._names)


class TensorInfo:
    """One tensor a kernel takes, as the library's table gives it (ropekv_kernel_tensor; include/ropekv.h says what
    each field means): name (the ropekv_args field and the keyword), access ("read", "write", "read_write"), need
    (when a launch needs it: "tokens", "kv_tokens", "positions", "rope", "optional"), dtype ("bf16", "f32", "fp8_e4m3",
    "uint8", "int32", "int64"; None where a family's kernels differ), elem_bytes, dims (symbols, outermost first),
    sizes (the kernel's size of each, None for a launch's count), strides (the ropekv_args stride field of each, None
    where packed), align (bytes), stride_multiple (elements) and when (why it is needed, in words, or "")."""

    __slots__ = ("name", "access", "need", "dtype", "elem_bytes", "dims", "sizes", "strides", "align",
                 "stride_multiple", "when")

    def __init__(self, t):
        """t: a filled _capi.ropekv_tensor_info."""
        rank = t.rank
        self.name = t.name.decode()
        self.access = _capi.ACCESS.get(t.access, "read")
        self.need = _capi.NEEDS.get(t.need, "optional")
        self.dtype = t.dtype.decode() or None
        self.elem_bytes = t.elem_bytes
        self.dims = tuple(t.dims[i].decode() for i in range(rank))
        self.sizes = tuple(None if t.sizes[i] < 0 else int(t.sizes[i]) for i in range(rank))
        self.strides = tuple(t.strides[i].decode() if t.strides[i] else None for i in range(rank))
        self.align = t.align
        self.stride_multiple = t.stride_multiple
        self.when = t.when.decode()

    @property
    def written(self):
        return self.access != "read"

    @property
    def packed(self):
        """No dimension has a stride field: the tensor is contiguous (positions, slots, the tables, weights, scales)."""
        return not any(self.strides)

    def shape_text(self):
        """Its dimensions as text, a fixed size after its symbol: "[T, H, L=512]"."""
        return "[%s]" % ", ".join(d if n is None or d == str(n) else "%s=%d" % (d, n) for d, n in zip(self.dims,
                                                                                                      self.sizes))

    def __repr__(self):
        return "TensorInfo(%s %s %s %s%s)" % (self.name, self.access, self.dtype, self.shape_text(),
                                              ", needed with %s" % self.need if self.need != "optional" else "")


def _table(count, get):
    out = []
    for i in range(count):
        t = _capi.ropekv_tensor_info()
        code = get(i, t)
        if code != 0:
            raise RopekvError(_capi.status_name(code), "reading tensor %d of a table failed" % i, code)
        out.append(TensorInfo(t))
    return tuple(out)


def kernel_tensors(lib, handle):
    """The tensors of a kernel (ropekv_kernel_tensor), in the library's order."""
    return _table(lib.ropekv_kernel_tensor_count(handle),
                  lambda i, t: lib.ropekv_kernel_tensor(handle, i, ctypes.byref(t)))


_FAMILIES = {}


def family_tensors(op, q="none"):
    """Every tensor some kernel of the write op with q form q (or of the read op) may take (ropekv_family_tensor):
    what the kernels agree on is set, the rest None; need is "optional" where some kernel does not take it."""
    key = (op, q if op == "write" else "none")
    got = _FAMILIES.get(key)
    if got is None:
        lib = _capi.library()
        o, qv = _capi.OPS[key[0]], _capi.Q_FORMS[key[1]]
        got = _FAMILIES[key] = _table(lib.ropekv_family_tensor_count(o, qv),
                                      lambda i, t: lib.ropekv_family_tensor(o, qv, i, ctypes.byref(t)))
    return got


# ---- cache records: what a row holds, byte for byte (the library's description, never re-typed here) ------------
Segment = collections.namedtuple("Segment", "from_ n elem at block scale rule scale_at scales_at saturate_ocp "
                                            "saturate_fnuz outer outer_at rope_bf16 floor block_conv "
                                            "scales_interleave")
Segment.__doc__ = """One segment of a record (ropekv_record_segment): it stores x[from_, from_ + n) as elem ("bf16",
"e4m3", "e2m1") at byte `at` of the row, in blocks of `block` values (0: none) sharing a scale stored as `scale`
("none", "f32", "ue8m0", "e4m3") under `rule` ("exact", "pow2_up", "up": an e4m3 scale rounded up, "exact_zero": an
e4m3 scale whose zero is kept, its values then times 0) at byte scales_at
of the row ("inline") or of the token's page tail ("page_tail"), block b's at place b or, with scales_interleave k,
(b % k) * (blocks / k) + b / k; saturate_ocp / saturate_fnuz the bound a block's amax maps to (an unblocked fp8
segment's clamp), floor the least block scale (s = max(amax / sat, floor)); block_conv how the block's values take
its decoded scale d ("div": y / d, "mul_recip": y * (1 / d); "none" without blocks); outer "none", "tensor" (k_scale
under the record's conv) or "token" (a float32 at outer_at); rope_bf16: rope values rounded to bf16 before they are
quantized."""
Reader = collections.namedtuple("Reader", "name scale")
Reader.__doc__ = """A reader a record was checked for (ropekv_record_reader): an engine's kernel and how it takes a
block scale back ("exact", "bf16", "pow2_down")."""
Record = collections.namedtuple("Record", "name L R row_bytes split_at tail_bytes conv segments readers matches")
Record.__doc__ = """A cache record as the library describes it (ropekv_record_describe; docs/formats.md, "Cache
records"): the geometry L, R (the segments cover x[0, L + R)), row_bytes, split_at (0: one row), tail_bytes (a
token's page-tail bytes, 0: none), conv (how a "tensor" outer scale takes k_scale: "mul_recip", "div", "mul", "none"),
segments (Segment), readers (Reader) and matches (whose writer it matches). ropekv.reference.record_encode /
record_decode work from it."""


def _text(b):
    return b.decode() if b is not None else ""


def _record(lib, handle):
    """The Record of an opaque ropekv_record pointer."""
    info = _capi.ropekv_record_info()
    code = lib.ropekv_record_describe(handle, ctypes.byref(info))
    if code != 0:
        raise RopekvError(_capi.status_name(code), "ropekv_record_describe failed", code)
    segs, readers = [], []
    for i in range(info.segments):
        g = _capi.ropekv_record_segment()
        code = lib.ropekv_record_segment_at(handle, i, ctypes.byref(g))
        if code != 0:
            raise RopekvError(_capi.status_name(code), "ropekv_record_segment_at(%d) failed" % i, code)
        segs.append(Segment(g.from_, g.n, _text(g.elem), g.at, g.block, _text(g.scale), _text(g.rule),
                            _text(g.scale_at), g.scales_at, g.saturate_ocp, g.saturate_fnuz, _text(g.outer),
                            g.outer_at, bool(g.rope_bf16), g.floor, _text(g.block_conv), g.scales_interleave))
    for i in range(info.readers):
        r = _capi.ropekv_record_reader()
        code = lib.ropekv_record_reader_at(handle, i, ctypes.byref(r))
        if code != 0:
            raise RopekvError(_capi.status_name(code), "ropekv_record_reader_at(%d) failed" % i, code)
        readers.append(Reader(_text(r.name), _text(r.scale)))
    return Record(_text(info.name), info.L, info.R, info.row_bytes, info.split_at, info.tail_bytes, _text(info.conv),
                  tuple(segs), tuple(readers), _text(info.matches))


_RECORDS = []


def records():
    """The library's records (specs/records.lua, ropekv_record_at), by name, in the file's order."""
    if not _RECORDS:
        lib = _capi.library()
        _RECORDS.append({r.name: r for r in (_record(lib, lib.ropekv_record_at(i))
                                             for i in range(lib.ropekv_record_count()))})
    return _RECORDS[0]


def record(name):
    """The library's record of this name (a Record); KeyError naming the records for another name."""
    got = records().get(name)
    if got is None:
        raise KeyError("no record named %r; the library has %s" % (name, ", ".join(records())))
    return got


def _enum(table, value, what):
    if isinstance(value, int) and not isinstance(value, bool) and value in table.values():
        return value
    try:
        return table[value]
    except (KeyError, TypeError):
        raise ValueError("%s must be one of %s, got %r" % (what, ", ".join(sorted(table)), value)) from None


def _tristate(value, what):
    if value is None:
        return 0
    if value is True:
        return 1
    if value is False:
        return -1
    if value in (0, 1, -1):
        return int(value)
    raise ValueError("%s must be None, True or False, got %r" % (what, value))


def _cstr(s, what=None):
    """s as bytes for a C string (None stays None). what names it: then a NUL byte in it, which would end the C
    string there and silently drop the rest, is a ValueError."""
    if s is None:
        return None
    b = s.encode() if isinstance(s, str) else bytes(s)
    if what is not None and b"\0" in b:
        raise ValueError("%s must not contain a NUL byte, got %r" % (what, s))
    return b


_INT32 = (0, (1 << 31) - 1)  # a non-negative C int
_INT64 = (-(1 << 63), (1 << 63) - 1)
_UINT64 = (0, (1 << 64) - 1)  # a pointer or size_t


def _int_in(value, bounds, what):
    """value, an int (not a bool) within bounds (lo, hi); else TypeError or ValueError naming what. ctypes would
    silently wrap an int past its field's range (2**64 as 0)."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError("%s must be an int, got %s" % (what, type(value).__name__))
    if not bounds[0] <= value <= bounds[1]:
        raise ValueError("%s must be an int from %d to %d, got %d" % (what, bounds[0], bounds[1], value))
    return value


def _torch_cuda_init(device):
    """The C library uses the device's primary context (cuDevicePrimaryCtxRetain), the one the CUDA runtime
    and PyTorch use. When PyTorch is in the process, let it initialize CUDA on that device first, so both
    share one context from the start. Nothing is imported: a program that never imported torch has no torch
    tensors to share."""
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "cuda"):
        return
    try:
        if not torch.cuda.is_available() or device >= torch.cuda.device_count():
            return
        torch.cuda.init()
        with torch.cuda.device(device):
            torch.cuda.current_device()
            torch.cuda.synchronize()
    except Exception:  # a broken CUDA setup is reported by ropekv_create itself
        pass


class Context:
    """A ropekv context: one backend on one device, the kernels compiled for it and their caches.

    Context(backend="auto"|"cuda"|"hip"|"host", device=0, target=None, cache_dir=None, disk_cache=None, log=None,
            pdl=None, pdl_prefetch=None, cache_ro=None, bundles=None, dump=None)
    disk_cache, log, pdl, pdl_prefetch: None = library default (environment), True = on, False = off.
    cache_ro: read-only cache layers searched before cache_dir, a ':'-separated string, a path or a list of
    directories (None: $ROPEKV_CACHE_RO). bundles: the bundles the installed wheel carries (ropekv.bundle_dirs()) are searched
    after those layers; False leaves them out, None takes $ROPEKV_NO_BUNDLE=1 as False (docs/install.md).
    pdl: programmatic dependent launch where the target's row enables it (sm_90): a launch overlaps the tail
    of the kernel before it in the stream and waits for it before touching memory. pdl_prefetch: positions,
    slots and cos/sin are read before that wait; only when the kernel before never writes them. dump: a directory
    that launches are written to for `ropekv-gen replay` (None: $ROPEKV_DUMP; which launches: $ROPEKV_DUMP_WHEN;
    docs/dump.md).
    Use as a context manager or call close(); kernels obtained from it must not be used after that."""

    def __init__(self, backend="auto", device=0, target=None, cache_dir=None, disk_cache=None, log=None, pdl=None,
                 pdl_prefetch=None, cache_ro=None, bundles=None, dump=None):
        self._h = None
        self._kernels = {}
        self._all_kernels = []
        self._lock = threading.Lock()
        lib = _capi.library()
        b = _enum(_capi.BACKENDS, backend, "backend")
        if not isinstance(device, int) or isinstance(device, bool) or not _INT32[0] <= device <= _INT32[1]:
            raise ValueError("device must be an int from 0 to %d, got %r" % (_INT32[1], device))
        if bundles not in (None, True, False):
            raise ValueError("bundles must be None, True or False, got %r" % (bundles,))
        layers = _cstr(_capi.read_only_layers(cache_ro, bundles), "cache_ro")
        if b in (_capi.BACKENDS["auto"], _capi.BACKENDS["cuda"], _capi.BACKENDS["hip"]):
            _torch_cuda_init(device)
        self._opts = _capi.ropekv_options(b, device, _cstr(target, "target"), _cstr(cache_dir, "cache_dir"),
                                          _tristate(disk_cache, "disk_cache"),
                                          _tristate(log, "log"), _tristate(pdl, "pdl"),
                                          _tristate(pdl_prefetch, "pdl_prefetch"), cache_ro=layers)
        self._opts.dump = _cstr(dump, "dump")
        h = ctypes.c_void_p()
        s = lib.ropekv_create(ctypes.byref(h), ctypes.byref(self._opts))
        if s != 0:
            raise RopekvError(_capi.status_name(s), "%s (backend %r; set log=True or ROPEKV_LOG=1 for details)" %
                              (_capi.status_message(s), backend), s)
        self._h = h
        self._lib = lib
        self.device = device
        self.backend = lib.ropekv_backend_name(h).decode()
        self.target = lib.ropekv_target(h).decode()
        self.cache_ro = layers.decode() if layers is not None else None  # the layers given to the library

    # -- lifetime --
    @property
    def closed(self):
        return self._h is None

    def _handle(self):
        if self._h is None:
            raise ValueError("the ropekv context is closed")
        return self._h

    def close(self):
        """Releases every kernel of this context and destroys it (idempotent)."""
        h, self._h = self._h, None
        if h is None:
            return
        for k in self._all_kernels:
            k._release()
        self._all_kernels = []
        self._kernels = {}
        self._lib.ropekv_destroy(h)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self):
        if self.closed:
            return "<ropekv.Context closed>"
        return "<ropekv.Context backend=%s target=%s device=%d>" % (self.backend, self.target, self.device)

    # -- errors --
    def last_error(self):
        msg = self._lib.ropekv_last_error(self._handle())
        return msg.decode(errors="replace") if msg else ""

    def _raise(self, status):
        name = _capi.status_name(status)
        msg = self.last_error()
        if msg.startswith(name + ": "):
            msg = msg[len(name) + 2:]
        raise RopekvError(name, msg or _capi.status_message(status), status)

    def _check(self, status):
        if status != 0:
            self._raise(status)

    # -- context-wide calls --
    def stats(self):
        """{"memory_hits", "disk_hits", "compiles", "cache_rejects"} since the context was created."""
        st = _capi.ropekv_stats()
        self._check(self._lib.ropekv_get_stats(self._handle(), ctypes.byref(st)))
        return {name: int(getattr(st, name)) for name, _ in st._fields_}

    def _spec_changed(self):
        with self._lock:
            self._kernels = {}  # the next kernel() asks the library again (it rebuilds what changed)

    def load_spec(self, path):
        """Loads (or replaces) a model spec from a file."""
        self._check(self._lib.ropekv_load_spec(self._handle(), _cstr(str(path), "path")))
        self._spec_changed()

    def load_spec_text(self, name, text):
        """Loads (or replaces) a model spec from text; name labels it in messages."""
        data = _cstr(text)
        self._check(self._lib.ropekv_load_spec_text(self._handle(), _cstr(name, "name"), data, len(data)))
        self._spec_changed()

    def cache_clear(self):
        """Removes this context's entries from the on-disk cache (kernels in memory stay)."""
        self._check(self._lib.ropekv_cache_clear(self._handle()))

    @staticmethod
    def _variant(spec, kv, q, positions, slots, q_dtype="bf16", layout="flat", op="write", norm="none", record=None):
        if not isinstance(spec, str) or not spec:
            raise ValueError("spec must be a non-empty string (a spec name such as 'deepseek_v3'), got %r" % (spec,))
        q_dtype = _q_dtype(q_dtype)
        layout = _BY_VALUE["layout"][_enum(_capi.LAYOUTS, layout, "layout")]
        op = _BY_VALUE["op"][_enum(_capi.OPS, op, "op")]
        norm = _BY_VALUE["norm"][_enum(_capi.NORMS, norm, "norm")]
        if record is not None and (not isinstance(record, str) or not record):
            raise ValueError("record must be None or a record's name (such as 'fp8_ds_mla'), got %r" % (record,))
        key = (spec, kv, q, positions, slots, q_dtype, layout, op, norm, record)
        v = _capi.ropekv_variant(_cstr(spec, "spec"), _enum(_capi.KV_DTYPES, kv, "kv"), _enum(_capi.Q_FORMS, q, "q"),
                                 _enum(_capi.INDEX_TYPES, positions, "positions"),
                                 _enum(_capi.INDEX_TYPES, slots, "slots"), _capi.Q_DTYPES[q_dtype],
                                 _capi.LAYOUTS[layout], _capi.OPS[op], _capi.NORMS[norm], _cstr(record, "record"))
        return key, v

    def query(self, spec, kv="bf16", q="absorbed", positions="int64", slots="int64", q_dtype="bf16", raw=None,
              layout="flat", op="write", norm="none", record=None, **tensors):
        """Is this configuration supported? Returns (ok, reason) without compiling anything.

        With tensors (the keywords of Kernel.__call__) or raw (a dict of ropekv_args fields as ints), every
        launch check runs too. Tensors are read as they are (pointers, strides, sizes): dtype and shape
        checks against the kernel happen in Kernel.__call__. positions and slots name index types
        ("int64"/"int32"); given tensors instead, they are passed on and their dtype picks the type. q_dtype: the
        query output's dtype, "bf16" or "fp8_e4m3" (or torch.bfloat16 / torch.float8_e4m3fn / float8_e4m3fnuz).
        layout, op, norm and record: as in kernel()."""
        def index_arg(value, name):
            if value is None or isinstance(value, (str, int)):
                return value
            tensors[name] = value
            return "int32" if str(getattr(value, "dtype", "")) == "torch.int32" else "int64"

        positions = index_arg(positions, "positions")
        slots = index_arg(slots, "slots")
        _, v = self._variant(spec, kv, q, positions, slots, q_dtype, layout, op, norm, record)
        args = None
        keep = None
        try:
            if raw is not None and tensors:
                raise ValueError("pass tensors or raw, not both")
            if raw is not None:
                args = raw_args(raw)
            elif tensors:
                args, keep = _torch.tensor_args(None, self, layout=_BY_VALUE["layout"][v.layout],
                                                op=_BY_VALUE["op"][v.op], **tensors)
        except (TypeError, ValueError) as e:
            return False, "%s: %s" % (type(e).__name__, e)
        why = ctypes.create_string_buffer(4096)
        s = self._lib.ropekv_query(self._handle(), ctypes.byref(v), ctypes.byref(args) if args is not None else None,
                                   why, len(why))
        del keep
        reason = why.value.decode(errors="replace")
        return s == 0, reason if reason else _capi.status_message(s)

    def kernel(self, spec, kv="bf16", q="absorbed", positions="int64", slots="int64", q_dtype="bf16", layout="flat",
               op="write", norm="none", record=None):
        """The kernel of one variant (compiled on first use, then cached here and on disk). q_dtype: the query
        output's dtype, "bf16" or "fp8_e4m3" (or torch.bfloat16 / torch.float8_e4m3fn / float8_e4m3fnuz): an fp8
        query output is e4m3 in the target's format, made with the spec's q_fp8 policy and a q_scale.
        kv: "bf16", "fp8_e4m3" or "fp8_tile" (the spec's tile-scaled row, e.g. DeepSeek-V3.2's 656 bytes).
        layout: where the KV rows lie, "flat" (rows of one stride), "paged" ([num_blocks, block_size, W], vLLM) or
        "split" (the latent and rope parts in two caches, FlashInfer). op: "write" (the fused RoPE + KV write) or
        "read" (the read-back: rows of the cache gathered by slot and dequantized to bf16; q, positions and
        q_dtype do not apply to it). norm (write kernels of a spec with a kv_norm table: deepseek_v3, kimi_k2,
        deepseek_v32): "none" (k_nope cached as it is), "rms" (the fused kv_a RMSNorm: k_nope is the raw c_kv, each
        row normalized with the spec's eps and weight dtype before it is cached; the launch takes norm_weight [L]) or
        "rms_out" (and the normalized rows written to norm_out [Tkv, L] bf16). record: the cache row by its record's
        name, one of the spec's ("fp8_ds_mla", "nvfp4", or a kv dtype's spelling), instead of kv (docs/formats.md,
        "Choosing a record"); its cache is uint8 rows of info.record_row_bytes (split: record_split_at bytes in
        kv_cache, the rest in kv_rope_cache)."""
        key, v = self._variant(spec, kv, q, positions, slots, q_dtype, layout, op, norm, record)
        with self._lock:
            k = self._kernels.get(key)
            if k is not None and k._h is not None:
                return k
            h = ctypes.c_void_p()
            s = self._lib.ropekv_kernel_get(self._handle(), ctypes.byref(v), ctypes.byref(h))
            if s != 0:
                self._raise(s)
            k = Kernel(self, h, key)
            self._kernels[key] = k
            self._all_kernels.append(k)
            return k


def raw_args(d):
    """ropekv_args from a dict of ints (pointers as addresses, strides in elements); absent fields are 0."""
    if not isinstance(d, dict):
        raise TypeError("raw args must be a dict of ropekv_args fields, got %s" % type(d).__name__)
    unknown = sorted(set(d) - set(_capi.ARGS_FIELDS))
    if unknown:
        raise ValueError("unknown ropekv_args fields: %s (known: %s)" % (", ".join(unknown), ", ".join(_capi.ARGS_FIELDS)))
    a = _capi.ropekv_args()
    types = dict(_capi.ropekv_args._fields_)
    for name, value in d.items():
        if value is None:
            continue
        if isinstance(value, ctypes.c_void_p):
            value = value.value or 0
        elif name in _capi.ARGS_POINTERS and isinstance(value, (ctypes.Array, ctypes.Structure, ctypes._SimpleCData)):
            value = ctypes.addressof(value)  # a ctypes buffer passed for a pointer field
        elif isinstance(value, ctypes._SimpleCData):
            value = value.value
        bounds = _UINT64 if types[name] in (ctypes.c_void_p, ctypes.c_size_t) else _INT64
        setattr(a, name, _int_in(value, bounds, "ropekv_args field %s" % name))
    return a


def _stream_handle(stream):
    if stream is None:
        return None
    if isinstance(stream, int) and not isinstance(stream, bool):
        return _int_in(stream, _UINT64, "stream") or None
    h = getattr(stream, "cuda_stream", None)
    if isinstance(h, int):
        return _int_in(h, _UINT64, "stream.cuda_stream") or None
    if isinstance(stream, ctypes.c_void_p):
        return stream.value
    raise TypeError("stream must be None, an int handle or an object with .cuda_stream, got %s" % type(stream).__name__)


class Kernel:
    """One compiled variant. Call it with torch tensors (see __call__), or with raw pointers (launch_raw).
    name is the kernel's extern "C" name; info (KernelInfo) its parameters, as the library describes them."""

    def __init__(self, ctx, handle, key):
        self.ctx = ctx
        self._h = handle
        (self.spec, self.kv, self.q, self.positions, self.slots, self.q_dtype, self.layout, self.op, self.norm,
         self.record) = key
        self.name = ctx._lib.ropekv_kernel_name(handle).decode()
        self.info = KernelInfo(kernel_params(ctx._lib, handle))
        self.tensors = kernel_tensors(ctx._lib, handle)  # the tensors it takes (TensorInfo), the library's table
        # its cache row as a Record (ropekv_kernel_record): the record it names, or its kv dtype's row as one
        self.record_desc = _record(ctx._lib, ctx._lib.ropekv_kernel_record(handle))
        self._tensor_by_name = {t.name: t for t in self.tensors}
        self._read = self.info.op == "read"
        self._zero_copy = self.info.q == "zero_copy"
        self._plans = {}  # argument signature -> checked ropekv_args (_torch.plan_args)
        self._native = None  # the same plans held by the C++ module (_native.py), made on the first launch
        self._launch_packed = _capi.launch_packed()

    def _release(self):
        h, self._h = self._h, None
        if h is not None:
            self.ctx._lib.ropekv_kernel_release(h)

    def _handle(self):
        if self._h is None or self.ctx.closed:
            raise ValueError("this kernel's ropekv context is closed")
        return self._h

    def __repr__(self):
        return "<ropekv.Kernel %s>" % self.name

    def _launch(self, args, stream):
        s = self.ctx._lib.ropekv_launch(self._handle(), ctypes.byref(args), stream)
        if s != 0:
            self.ctx._raise(s)

    def launch_raw(self, args, stream=None):
        """Launches with raw pointers: args is a dict of ropekv_args fields (ints: device addresses or, for the
        host backend, host addresses; strides in elements of each tensor's dtype, bytes for an fp8 cache).
        stream: a CUstream / hipStream_t handle as an int (None: the default stream); also read from
        args["stream"]."""
        if isinstance(args, dict) and "stream" in args:
            args = dict(args)
            s = args.pop("stream")
            stream = s if stream is None else stream
        a = args if isinstance(args, _capi.ropekv_args) else raw_args(args)
        self._launch(a, _stream_handle(stream))

    def args(self, **tensors):
        """The ropekv_args of a launch with these tensors (checked as __call__ checks them), and the tuple of
        objects that must stay alive while they are used."""
        return _torch.tensor_args(self, self.ctx, **tensors)

    def __call__(self, *, q_nope=None, q_pe=None, q_out=None, k_nope=None, k_pe=None, kv_cache=None, positions=None,
                 slots=None, cos_sin=None, sin=None, k_scale=None, q_scale=None, kv_rope_cache=None, out=None,
                 out_rope=None, min_slot=0, stream=None, norm_weight=None, norm_out=None, write_mask=None):
        """One launch on torch tensors.

        A write kernel (op "write") takes k_nope, k_pe, kv_cache, positions, slots and cos_sin, and the query
        tensors of its q form; it returns None.
        q_nope [T,H,L], q_pe [T,H,R], q_out [T,H,L+R] bf16 (which of them per the q form: absorbed takes all
        three, zero_copy q_pe and q_out, inplace q_pe, none nothing); k_nope [>=Tkv,L], k_pe [>=Tkv,R] bf16;
        kv_cache: rows of L+R (bf16, or uint8 / float8_e4m3fn / float8_e4m3fnuz for an fp8 cache), e.g. a paged
        [blocks, block_size, L+R] cache; slots [Tkv], positions [>= max(T, Tkv)] (int64/int32 per the variant;
        Tkv, the KV rows written, may differ from T, the query rows; a slot < min_slot, e.g. < 0, skips the KV
        row; min_slot=1 keeps a reserved slot 0 untouched); cos_sin: [max_pos, R] f32 (f32_cat) or cos [max_pos, R/2] with sin [max_pos, R/2] (split
        layouts, f32 or bf16); k_scale: one float32 (fp8 with a scale). Only the last dimension of each tensor
        needs to be contiguous. stream: default torch.cuda.current_stream(device).

        The cache per the kernel's layout (info.layout): flat, rows of one stride (the leading dimensions collapse);
        paged, [num_blocks, block_size, W] as engines hold it (dimensions of size 1 between block_size and W are
        allowed; the block and entry strides may differ); split, kv_cache [pages, block_size, L] with the rope
        parts in kv_rope_cache [pages, block_size, R]. An fp8_tile cache (info.kv "fp8_tile") is uint8 whose last
        dimension is info.row_bytes (656 for deepseek_v32); it takes no k_scale.

        A kernel with q_dtype "fp8_e4m3" writes the query output as fp8 e4m3 in info.q_fp8_format: absorbed and
        zero_copy take q_out [T,H,L+R] as uint8 or the matching float8 dtype (zero_copy writes only [..., L:],
        [..., :L] being the BMM's fp8 q_nope); inplace takes the bf16 q_pe and writes fp8(rope) over the first R
        bytes of each row (read it as q_pe.view(float8)[..., :R]). q_scale: one float32, the query's scale (its
        convention is info.q_fp8_scale), required when there are query rows and the convention is not "none".

        A read kernel (op "read") takes kv_cache (and kv_rope_cache for split), slots [T] and out, and k_scale for
        an fp8 cache with a scale: out[t] = the row of slots[t] dequantized to bf16, [T, L+R]; or, with out_rope
        [T, R] bf16, the latent parts in out [T, L] and the rope parts in out_rope. A slot below min_slot (e.g.
        -1) or past the cache gives a zero row (info.read_negative_slot "zero") or leaves it ("skip"). Without
        out, a zero-filled out is allocated on the cache's device. It returns out, or (out, out_rope).

        A kernel with the fused kv_a RMSNorm (info.norm "rms" or "rms_out") takes k_nope as the raw projection's c_kv
        and norm_weight: the RMSNorm weight [L], contiguous, of the spec's dtype (info.norm_weight: bf16 or float32);
        "rms_out" also writes the normalized rows to norm_out [>= Tkv, L] bf16 (last dimension contiguous, 16-byte
        aligned rows). A kernel without the norm refuses norm_weight and norm_out, an "rms" kernel norm_out.

        write_mask (write kernels): None, or [>= Tkv] bool / uint8: KV row t is written only where write_mask[t] is
        set, beside min_slot and negative slots (the query rows and norm_out do not look at it)."""
        if self._read and out is None:
            out = _torch.new_read_out(self, kv_cache, slots, split=out_rope is not None)
        self.launch_tensors((q_nope, q_pe, q_out, k_nope, k_pe, kv_cache, positions, slots, cos_sin, sin, k_scale,
                             q_scale, kv_rope_cache, out, out_rope, norm_weight, norm_out, write_mask), min_slot, stream)
        if self._read:
            return out if out_rope is None else (out, out_rope)

    def launch_named(self, tensors, min_slot=0, stream=None):
        """__call__ on a dict of tensors by name (the names of self.tensors, None or absent where not given); out must
        be given for a read kernel. The checks of a launch run once per argument signature (dtypes, shapes, strides,
        devices, min_slot); a launch with a signature seen before only reads the tensors' pointers (see
        _torch.plan_args)."""
        if not _torch._NAME_SET.issuperset(tensors):  # tensor_args names the stranger
            _torch.tensor_args(self, self.ctx, min_slot=min_slot, **tensors)
        self.launch_tensors([tensors.get(n) for n in _capi.ARGS_POINTERS], min_slot, stream)

    def launch_tensors(self, vals, min_slot=0, stream=None):
        """launch_named with the tensors in the order of ropekv_args' pointers (_capi.ARGS_POINTERS: q_nope ... out_rope,
        norm_weight, norm_out, write_mask; those at the end may be left off), None where absent: the eager operators'
        path, without a dict."""
        h = self._h
        if h is None or self.ctx._h is None:
            raise ValueError("this kernel's ropekv context is closed")
        n = len(vals)
        if n != _N_POINTERS:
            if n > _N_POINTERS:
                raise TypeError("launch_tensors takes at most %d tensors, got %d" % (_N_POINTERS, n))
            vals = list(vals) + [None] * (_N_POINTERS - n)
        stream = _torch.stream_for(self.ctx, stream)
        native, s = _native.module(), None
        if native is not None:  # a plan seen before, in C++; else (None) the Python path, which keeps the plan there
            if self._native is None:
                self._native = native.plans(self._zero_copy)
            s = native.launch(self._native, _capi.launch_address(), h.value, vals, min_slot, stream)
        if s is None:
            s = self._launch_packed(h, _torch.plan_args(self, vals, min_slot, native), stream)
        if s != 0:
            self.ctx._raise(s)

    def bind(self, *, stream=None, **tensors):
        """A launch with its arguments checked and converted once: BoundLaunch(stream=None) launches it.
        The tensors are kept alive by the returned object. With stream=None each call launches on the current
        torch stream (so a bound launch can be captured in a CUDA graph)."""
        args, keep = self.args(**tensors)
        return BoundLaunch(self, args, keep, stream)

    def prepare(self, wide=True):
        """Builds the kernel's entries now (ropekv_kernel_prepare): with wide=True the 64-bit entry too, which
        otherwise the first launch whose offsets reach 2^31 elements builds. Call it before capturing a CUDA
        graph so that nothing compiles during the capture. Raises RopekvError when the build fails."""
        entries = _capi.ENTRY_32 | (_capi.ENTRY_64 if wide else 0)
        s = self.ctx._lib.ropekv_kernel_prepare(self._handle(), entries)
        if s != 0:
            self.ctx._raise(s)


class BoundLaunch:
    """A kernel launch with fixed tensors (Kernel.bind): call it to launch again."""

    def __init__(self, kernel, args, keep, stream=None):
        self.kernel = kernel
        self.args = args
        self._keep = keep
        self._stream = stream

    def __call__(self, stream=None):
        self.kernel._launch(self.args, _torch.stream_for(self.kernel.ctx, stream if stream is not None else self._stream))


def version():
    """The library's version string (ropekv_version_string)."""
    return _capi.library().ropekv_version_string().decode()


def version_number():
    return int(_capi.library().ropekv_version_number())
