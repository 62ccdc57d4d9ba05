"""ctypes declarations of runtime/ropekv.h: structs, enums, prototypes and library loading.

Everything here mirrors the C header one to one; keep the two in step (python/tests/test_binding.py
compares the struct layouts with the header's when a C compiler is around)."""
import ctypes
import ctypes.util
import os
import threading

# ---- enums (values as in ropekv.h) ------------------------------------------------------------------
BACKENDS = {"auto": 0, "hip": 1, "cuda": 2, "host": 3}
KV_DTYPES = {"bf16": 0, "fp8_e4m3": 1}
Q_FORMS = {"absorbed": 0, "zero_copy": 1, "inplace": 2, "none": 3}
INDEX_TYPES = {"int64": 0, "int32": 1}

# ropekv_status: name -> value (ROPEKV_STATUS_LIST)
STATUS = {
    "ROPEKV_OK": 0,
    "ROPEKV_ERR_SPEC_SYNTAX": 100,
    "ROPEKV_ERR_SPEC_RUNTIME": 101,
    "ROPEKV_ERR_SPEC_LIMIT": 102,
    "ROPEKV_ERR_SPEC_INVALID": 103,
    "ROPEKV_ERR_SPEC_TARGET": 104,
    "ROPEKV_ERR_NO_SPEC": 110,
    "ROPEKV_ERR_UNSUPPORTED": 120,
    "ROPEKV_ERR_RENDER": 200,
    "ROPEKV_ERR_COMPILE": 300,
    "ROPEKV_ERR_TARGET": 301,
    "ROPEKV_ERR_CACHE": 400,
    "ROPEKV_ERR_BACKEND": 500,
    "ROPEKV_ERR_DEVICE": 501,
    "ROPEKV_ERR_LAUNCH": 502,
    "ROPEKV_ERR_NULL": 600,
    "ROPEKV_ERR_SHAPE": 601,
    "ROPEKV_ERR_STRIDE": 602,
    "ROPEKV_ERR_ALIGN": 603,
    "ROPEKV_ERR_ARG": 604,
    "ROPEKV_ERR_NOMEM": 900,
    "ROPEKV_ERR_IO": 901,
}
STATUS_NAMES = {v: k for k, v in STATUS.items()}


# ---- structs ---------------------------------------------------------------------------------------------
class ropekv_options(ctypes.Structure):
    _fields_ = [
        ("backend", ctypes.c_int),
        ("device", ctypes.c_int),
        ("target", ctypes.c_char_p),
        ("cache_dir", ctypes.c_char_p),
        ("disk_cache", ctypes.c_int),
        ("log", ctypes.c_int),
        ("pdl", ctypes.c_int),
        ("pdl_prefetch", ctypes.c_int),
    ]


class ropekv_stats(ctypes.Structure):
    _fields_ = [
        ("memory_hits", ctypes.c_uint64),
        ("disk_hits", ctypes.c_uint64),
        ("compiles", ctypes.c_uint64),
        ("cache_rejects", ctypes.c_uint64),
    ]


class ropekv_variant(ctypes.Structure):
    _fields_ = [
        ("spec", ctypes.c_char_p),
        ("kv", ctypes.c_int),
        ("q", ctypes.c_int),
        ("positions", ctypes.c_int),
        ("slots", ctypes.c_int),
    ]


class ropekv_args(ctypes.Structure):
    _fields_ = [
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
    ]


ARGS_POINTERS = ("q_nope", "q_pe", "q_out", "k_nope", "k_pe", "kv_cache", "positions", "slots", "cos_sin", "sin",
                 "k_scale")
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
    "ropekv_query": (_status, [_ctx_p, ctypes.POINTER(ropekv_variant), ctypes.POINTER(ropekv_args), ctypes.c_char_p,
                               ctypes.c_size_t]),
    "ropekv_kernel_get": (_status, [_ctx_p, ctypes.POINTER(ropekv_variant), ctypes.POINTER(_kernel_p)]),
    "ropekv_kernel_release": (None, [_kernel_p]),
    "ropekv_kernel_name": (ctypes.c_char_p, [_kernel_p]),
    "ropekv_launch": (_status, [_kernel_p, ctypes.POINTER(ropekv_args), ctypes.c_void_p]),
}

# ---- library loading --------------------------------------------------------------------------------------
_lib = None
_lib_path = None
_lib_lock = threading.Lock()


def candidate_paths():
    """Where the library is looked for, in order: $ROPEKV_LIB, the repository's build directory next to
    this package (../../build/libropekv.so), then the system's search path (ctypes.util.find_library)."""
    out = []
    env = os.environ.get("ROPEKV_LIB")
    if env:
        out.append(env)
    here = os.path.dirname(os.path.abspath(__file__))
    out.append(os.path.normpath(os.path.join(here, "..", "..", "build", "libropekv.so")))
    found = ctypes.util.find_library("ropekv")
    if found:
        out.append(found)
    return out


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
    return name.decode() if name else STATUS_NAMES.get(code, "ROPEKV_UNKNOWN")


def status_message(code):
    msg = library().ropekv_status_message(code)
    return msg.decode() if msg else ""
