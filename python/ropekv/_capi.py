"""ctypes declarations of runtime/ropekv.h: structs, enums, prototypes and library loading.

Everything here mirrors the C header one to one; keep the two in step (python/tests/test_binding_context.py
compares the struct layouts with the header's when a C compiler is around)."""
import ctypes
import ctypes.util
import os
import struct
import threading
from collections.abc import Mapping

# ---- enums (values as in ropekv.h) ------------------------------------------------------------------
BACKENDS = {"auto": 0, "hip": 1, "cuda": 2, "host": 3}
KV_DTYPES = {"bf16": 0, "fp8_e4m3": 1, "fp8_tile": 2}
Q_FORMS = {"absorbed": 0, "zero_copy": 1, "inplace": 2, "none": 3}
INDEX_TYPES = {"int64": 0, "int32": 1}
Q_DTYPES = {"bf16": 0, "fp8_e4m3": 1}
LAYOUTS = {"flat": 0, "paged": 1, "split": 2}
OPS = {"write": 0, "read": 1}
NORMS = {"none": 0, "rms": 1, "rms_out": 2}  # ropekv_norm: the fused kv_a RMSNorm of write kernels
KV_TOKENS_NONE = -1  # ROPEKV_KV_TOKENS_NONE
PARAM_KINDS = {"text": 0, "int": 1, "float": 2, "bool": 3}  # ropekv_param_kind (ropekv_kernel_param)

class _Statuses(Mapping):
    """ropekv_status name -> value, read from the library on first use (ropekv_status_name over the code
    range), so the list is the header's and nothing here repeats it."""

    def __init__(self):
        self._map = None

    def _load(self):
        if self._map is None:
            lib = library()
            found = {}
            for code in range(1000):
                name = lib.ropekv_status_name(code).decode()
                if name != "ROPEKV_UNKNOWN":
                    found[name] = code
            self._map = found
        return self._map

    def __getitem__(self, name):
        return self._load()[name]

    def __iter__(self):
        return iter(self._load())

    def __len__(self):
        return len(self._load())


STATUS = _Statuses()


# ---- structs ---------------------------------------------------------------------------------------------
class _Sized(ctypes.Structure):
    """A struct that begins with its size (include/ropekv.h, "structs that grow"): made with this mirror's size, so
    that the library reads the fields declared here and takes any it has past them as their defaults. Positional
    arguments fill the fields after the size."""

    def __init__(self, *args, **kwargs):
        super().__init__(ctypes.sizeof(self), *args, **kwargs)


class ropekv_options(_Sized):
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("backend", ctypes.c_int),
        ("device", ctypes.c_int),
        ("target", ctypes.c_char_p),
        ("cache_dir", ctypes.c_char_p),
        ("disk_cache", ctypes.c_int),
        ("log", ctypes.c_int),
        ("pdl", ctypes.c_int),
        ("pdl_prefetch", ctypes.c_int),
        ("cache_ro", ctypes.c_char_p),  # read-only cache layers, ':'-separated (None: $ROPEKV_CACHE_RO)
        ("compile_only", ctypes.c_int),  # 1: no device; kernels are compiled and cached, never launched
        ("dump", ctypes.c_char_p),  # directory of replayable launch dumps (None: $ROPEKV_DUMP; docs/dump.md)
        ("dump_when", ctypes.c_char_p),  # "first", "fail", "every:N", comma-separated (None: $ROPEKV_DUMP_WHEN)
        ("dump_max_bytes", ctypes.c_int64),  # the most bytes of one dump (0: $ROPEKV_DUMP_MAX_BYTES, else 256 MiB)
    ]


class ropekv_stats(ctypes.Structure):
    _fields_ = [
        ("memory_hits", ctypes.c_uint64),
        ("disk_hits", ctypes.c_uint64),
        ("compiles", ctypes.c_uint64),
        ("cache_rejects", ctypes.c_uint64),
    ]


class ropekv_variant(_Sized):
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("spec", ctypes.c_char_p),
        ("kv", ctypes.c_int),
        ("q", ctypes.c_int),
        ("positions", ctypes.c_int),
        ("slots", ctypes.c_int),
        ("q_dtype", ctypes.c_int),
        ("layout", ctypes.c_int),
        ("op", ctypes.c_int),
        ("norm", ctypes.c_int),  # ropekv_norm (NORMS)
        ("record", ctypes.c_char_p),  # the cache row by its record's name (None: kv chooses)
    ]


class ropekv_args(_Sized):
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("tokens", ctypes.c_int64),
        ("heads", ctypes.c_int64),
        ("q_nope", ctypes.c_void_p),
        ("q_nope_st", ctypes.c_int64),
        ("q_nope_sh", ctypes.c_int64),
        ("q_pe", ctypes.c_void_p),
        ("q_pe_st", ctypes.c_int64),
        ("q_pe_sh", ctypes.c_int64),
        ("q_out", ctypes.c_void_p),
        ("q_out_st", ctypes.c_int64),
        ("q_out_sh", ctypes.c_int64),
        ("k_nope", ctypes.c_void_p),
        ("k_nope_st", ctypes.c_int64),
        ("k_pe", ctypes.c_void_p),
        ("k_pe_st", ctypes.c_int64),
        ("kv_cache", ctypes.c_void_p),
        ("kv_st", ctypes.c_int64),
        ("kv_rows", ctypes.c_int64),
        ("positions", ctypes.c_void_p),
        ("slots", ctypes.c_void_p),
        ("cos_sin", ctypes.c_void_p),
        ("sin", ctypes.c_void_p),
        ("max_pos", ctypes.c_int64),
        ("k_scale", ctypes.c_void_p),
        ("kv_tokens", ctypes.c_int64),
        ("min_slot", ctypes.c_int64),
        ("q_scale", ctypes.c_void_p),
        ("kv_block_size", ctypes.c_int64),
        ("kv_block_st", ctypes.c_int64),
        ("kv_rope_cache", ctypes.c_void_p),
        ("kv_rope_block_st", ctypes.c_int64),
        ("kv_rope_st", ctypes.c_int64),
        ("out", ctypes.c_void_p),
        ("out_st", ctypes.c_int64),
        ("out_rope", ctypes.c_void_p),
        ("out_rope_st", ctypes.c_int64),
        ("norm_weight", ctypes.c_void_p),  # norm rms / rms_out: the weight [L] (bf16 or f32 per the spec)
        ("norm_out", ctypes.c_void_p),  # norm rms_out: the normalized c_kv [Tkv, L] bf16
        ("norm_out_st", ctypes.c_int64),
        ("q_heads", ctypes.c_int64),  # padded query heads (absorbed): q_out's rows per token, >= heads; 0: heads
        ("write_mask", ctypes.c_void_p),  # [Tkv] bytes: KV row t written only where write_mask[t] != 0 (NULL: all)
    ]


class ropekv_tensor_info(_Sized):
    """One tensor of a kernel's table (ropekv_kernel_tensor) or of a family's (ropekv_family_tensor)."""
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("name", ctypes.c_char_p),
        ("access", ctypes.c_int),  # ACCESS
        ("need", ctypes.c_int),  # NEEDS
        ("dtype", ctypes.c_char_p),
        ("elem_bytes", ctypes.c_int),
        ("rank", ctypes.c_int),
        ("dims", ctypes.c_char_p * 3),
        ("sizes", ctypes.c_int64 * 3),
        ("strides", ctypes.c_char_p * 3),
        ("align", ctypes.c_int),
        ("stride_multiple", ctypes.c_int),
        ("when", ctypes.c_char_p),
    ]


class ropekv_record_info(_Sized):
    """A cache record (ropekv_record_describe): its geometry, bytes, convention and counts."""
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("name", ctypes.c_char_p),
        ("L", ctypes.c_int),
        ("R", ctypes.c_int),
        ("row_bytes", ctypes.c_int),
        ("split_at", ctypes.c_int),
        ("tail_bytes", ctypes.c_int),
        ("conv", ctypes.c_char_p),
        ("segments", ctypes.c_int),
        ("readers", ctypes.c_int),
        ("matches", ctypes.c_char_p),
    ]


class ropekv_record_segment(_Sized):
    """One segment of a cache record (ropekv_record_segment_at)."""
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("from_", ctypes.c_int),  # the header's `from` (a Python keyword)
        ("n", ctypes.c_int),
        ("elem", ctypes.c_char_p),
        ("at", ctypes.c_int),
        ("block", ctypes.c_int),
        ("scale", ctypes.c_char_p),
        ("rule", ctypes.c_char_p),
        ("scale_at", ctypes.c_char_p),
        ("scales_at", ctypes.c_int),
        ("saturate_ocp", ctypes.c_float),
        ("saturate_fnuz", ctypes.c_float),
        ("outer", ctypes.c_char_p),
        ("outer_at", ctypes.c_int),
        ("rope_bf16", ctypes.c_int),
        ("floor", ctypes.c_float),
        ("block_conv", ctypes.c_char_p),
        ("scales_interleave", ctypes.c_int),
    ]


class ropekv_record_reader(_Sized):
    """One reader of a cache record (ropekv_record_reader_at)."""
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("name", ctypes.c_char_p),
        ("scale", ctypes.c_char_p),
    ]


ACCESS = {1: "read", 2: "write", 3: "read_write"}  # ropekv_tensor_access
NEEDS = {0: "tokens", 1: "kv_tokens", 2: "positions", 3: "rope", 4: "optional"}  # ropekv_tensor_need


# ropekv_args as bytes: every field is 8 bytes (its size, int64_t or a pointer), so one struct.Struct packs a whole argument
# block, which a launch passes through LAUNCH_PACKED (Kernel.launch_tensors' argument plans).
ARGS_PACK = struct.Struct("<" + "".join("Q" if t in (ctypes.c_void_p, ctypes.c_size_t) else "q"
                                        for _, t in ropekv_args._fields_))
assert ARGS_PACK.size == ctypes.sizeof(ropekv_args), "ropekv_args has a field that is not 8 bytes"
ARGS_INDEX = {name: i for i, (name, _) in enumerate(ropekv_args._fields_)}


ARGS_POINTERS = ("q_nope", "q_pe", "q_out", "k_nope", "k_pe", "kv_cache", "positions", "slots", "cos_sin", "sin",
                 "k_scale", "q_scale", "kv_rope_cache", "out", "out_rope", "norm_weight", "norm_out", "write_mask")
ARGS_FIELDS = tuple(name for name, _ in ropekv_args._fields_)

_ctx_p = ctypes.c_void_p
_kernel_p = ctypes.c_void_p
_status = ctypes.c_int

_PROTOTYPES = {
    "ropekv_version_number": (ctypes.c_int, []),
    "ropekv_version_string": (ctypes.c_char_p, []),
    "ropekv_status_name": (ctypes.c_char_p, [_status]),
    "ropekv_status_message": (ctypes.c_char_p, [_status]),
    "ropekv_create": (_status, [ctypes.POINTER(_ctx_p), ctypes.POINTER(ropekv_options)]),
    "ropekv_destroy": (None, [_ctx_p]),
    "ropekv_last_error": (ctypes.c_char_p, [_ctx_p]),
    "ropekv_backend_name": (ctypes.c_char_p, [_ctx_p]),
    "ropekv_target": (ctypes.c_char_p, [_ctx_p]),
    "ropekv_load_spec": (_status, [_ctx_p, ctypes.c_char_p]),
    "ropekv_load_spec_text": (_status, [_ctx_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]),
    "ropekv_get_stats": (_status, [_ctx_p, ctypes.POINTER(ropekv_stats)]),
    "ropekv_cache_clear": (_status, [_ctx_p]),
    "ropekv_cache_dir": (_status, [_ctx_p, ctypes.c_char_p, ctypes.c_size_t]),
    "ropekv_query": (_status, [_ctx_p, ctypes.POINTER(ropekv_variant), ctypes.POINTER(ropekv_args), ctypes.c_char_p,
                               ctypes.c_size_t]),
    "ropekv_kernel_get": (_status, [_ctx_p, ctypes.POINTER(ropekv_variant), ctypes.POINTER(_kernel_p)]),
    "ropekv_kernel_release": (None, [_kernel_p]),
    "ropekv_kernel_name": (ctypes.c_char_p, [_kernel_p]),
    "ropekv_kernel_param_count": (ctypes.c_int, [_kernel_p]),
    "ropekv_kernel_param": (_status, [_kernel_p, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p),
                                      ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_int)]),
    "ropekv_kernel_param_find": (_status, [_kernel_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p),
                                           ctypes.POINTER(ctypes.c_int)]),
    "ropekv_kernel_tensor_count": (ctypes.c_int, [_kernel_p]),
    "ropekv_kernel_tensor": (_status, [_kernel_p, ctypes.c_int, ctypes.POINTER(ropekv_tensor_info)]),
    "ropekv_kernel_tensor_find": (_status, [_kernel_p, ctypes.c_char_p, ctypes.POINTER(ropekv_tensor_info)]),
    "ropekv_family_tensor_count": (ctypes.c_int, [ctypes.c_int, ctypes.c_int]),
    "ropekv_family_tensor": (_status, [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.POINTER(ropekv_tensor_info)]),
    "ropekv_kernel_record": (ctypes.c_void_p, [_kernel_p]),
    "ropekv_record_count": (ctypes.c_int, []),
    "ropekv_record_at": (ctypes.c_void_p, [ctypes.c_int]),
    "ropekv_record_describe": (_status, [ctypes.c_void_p, ctypes.POINTER(ropekv_record_info)]),
    "ropekv_record_segment_at": (_status, [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ropekv_record_segment)]),
    "ropekv_record_reader_at": (_status, [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ropekv_record_reader)]),
    "ropekv_launch": (_status, [_kernel_p, ctypes.POINTER(ropekv_args), ctypes.c_void_p]),
    "ropekv_kernel_prepare": (_status, [_kernel_p, ctypes.c_uint]),
}

ENTRY_32, ENTRY_64 = 1, 2  # ropekv_kernel_prepare's entries (ROPEKV_ENTRY_32, ROPEKV_ENTRY_64)

# ropekv_launch with the argument block as bytes (ARGS_PACK): the same function, another prototype
_LAUNCH_PACKED = ctypes.CFUNCTYPE(_status, _kernel_p, ctypes.c_char_p, ctypes.c_void_p)
_launch_packed = None


def launch_packed():
    """ropekv_launch(kernel, args, stream) taking the args as bytes packed by ARGS_PACK."""
    global _launch_packed
    if _launch_packed is None:
        _launch_packed = _LAUNCH_PACKED(("ropekv_launch", library()))
    return _launch_packed


_launch_address = []


def launch_address():
    """ropekv_launch's address, for the C++ argument plans (_plans.cpp), which call it directly."""
    if not _launch_address:
        _launch_address.append(ctypes.cast(launch_packed(), ctypes.c_void_p).value)
    return _launch_address[0]


# ---- library loading --------------------------------------------------------------------------------------
_lib = None
_lib_path = None
_lib_lock = threading.Lock()


def candidate_paths():
    """Where the library is looked for, in order: $ROPEKV_LIB, this package's own directory (the wheel's
    libropekv.so), the repository's build directory next to this package (../../build/libropekv.so), then
    the system's search path (ctypes.util.find_library)."""
    out = []
    env = os.environ.get("ROPEKV_LIB")
    if env:
        out.append(env)
    here = os.path.dirname(os.path.abspath(__file__))
    out.append(os.path.join(here, "libropekv.so"))
    out.append(os.path.normpath(os.path.join(here, "..", "..", "build", "libropekv.so")))
    found = ctypes.util.find_library("ropekv")
    if found:
        out.append(found)
    return out


BUNDLE_MANIFEST = "ropekv-bundle.txt"  # a bundle's manifest (ropekv-gen build --bundle)
_FLAG = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}


def env_flag(name, default):
    """The flag $name as the library reads its own (1, true, yes, on / 0, false, no, off, any case; empty: unset):
    an invalid value is a Python warning, and default is used."""
    env = os.environ.get(name) or ""
    if not env:
        return default
    got = _FLAG.get(env.lower())
    if got is None:
        import warnings
        warnings.warn("%s=%s: expected 1 or 0 (true, yes, on / false, no, off); using %d" % (name, env, default))
        return default
    return got


def bundle_dirs():
    """The bundles a wheel carries (built with ROPEKV_WHEEL_BUNDLE, docs/install.md): each directory
    ropekv/bundles/<name>/ of this package that holds a bundle's manifest, by name. Empty for a package without
    bundles (a source checkout, a wheel built without them)."""
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bundles")
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return []
    return [os.path.join(root, n) for n in names if os.path.isfile(os.path.join(root, n, BUNDLE_MANIFEST))]


def read_only_layers(cache_ro=None, bundles=None):
    """The read-only cache layers of a Context, ':'-separated as ropekv_options.cache_ro takes them: the caller's
    cache_ro (a string or path, or a list of directories; None: $ROPEKV_CACHE_RO), then this package's bundle_dirs()
    unless bundles is False, or None with $ROPEKV_NO_BUNDLE=1. None when that is only $ROPEKV_CACHE_RO (the library
    reads it itself)."""
    if cache_ro is None or isinstance(cache_ro, (str, os.PathLike)):
        own = None if cache_ro is None else os.fspath(cache_ro)
    else:
        own = ":".join(os.fspath(d) for d in cache_ro)
    if bundles is None:
        bundles = not env_flag("ROPEKV_NO_BUNDLE", False)
    extra = []
    for d in bundle_dirs() if bundles else []:
        if ":" in d:  # cache_ro separates layers with ':'
            import warnings
            warnings.warn("ropekv bundle %s is not used: its path holds ':'" % d)
        else:
            extra.append(d)
    if not extra:
        return own
    if own is None:
        own = os.environ.get("ROPEKV_CACHE_RO") or ""
    return ":".join([own] + extra) if own else ":".join(extra)


def library():
    """The loaded libropekv (loaded on first use, so that importing the package needs nothing)."""
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    with _lib_lock:
        if _lib is not None:
            return _lib
        env = os.environ.get("ROPEKV_LIB")
        tried = []
        for path in candidate_paths():
            if path != env and os.sep in path and not os.path.exists(path):
                tried.append("%s (absent)" % path)
                continue
            try:
                lib = ctypes.CDLL(path)
            except OSError as e:
                tried.append("%s (%s)" % (path, e))
                if path == env:
                    break  # an explicit choice that fails is not silently replaced
                continue
            for name, (restype, argtypes) in _PROTOTYPES.items():
                fn = getattr(lib, name)
                fn.restype = restype
                fn.argtypes = argtypes
            _lib, _lib_path = lib, path
            return lib
        raise OSError("libropekv not found; tried: %s. Build it (cmake -S . -B build && cmake --build build) "
                      "or set ROPEKV_LIB to its path." % "; ".join(tried or ["nothing"]))


def library_path():
    library()
    return _lib_path


def status_name(code):
    name = library().ropekv_status_name(code)
    return name.decode() if name else "ROPEKV_UNKNOWN"


def status_message(code):
    msg = library().ropekv_status_message(code)
    return msg.decode() if msg else ""
