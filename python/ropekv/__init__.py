"""ropekv: fused MLA RoPE + KV-cache write kernels, JIT-compiled for the device at hand (Python binding).

A ctypes binding over libropekv.so (found through $ROPEKV_LIB, else the copy inside this package that a wheel
carries, else the repository's build/ directory next to this package, else the system's library path). A wheel
may also carry bundles of prebuilt kernels (ropekv.bundle_dirs()), which every Context searches as read-only cache
layers. Importing it needs neither torch nor the library; torch is imported only where tensors are passed, and by
ropekv.ops (the torch.library operators) and ropekv.reference (ropekv's arithmetic in PyTorch).

    import torch, ropekv
    ctx = ropekv.Context("cuda")                      # shares PyTorch's primary CUDA context
    k = ctx.kernel("deepseek_v3", kv="fp8_e4m3", q="absorbed")
    k(q_nope=q[..., :512], q_pe=q[..., 512:], q_out=q_out, k_nope=kv[:, :512], k_pe=kv[:, 512:],
      kv_cache=cache, positions=positions, slots=slot_mapping, cos_sin=cos_sin_cache, k_scale=k_scale)

An fp8 e4m3 query output in the same launch: ctx.kernel(..., q_dtype="fp8_e4m3"), q_out a uint8 / float8 tensor
and q_scale=<one float32> (the convention, saturation and rope rounding are the spec's: k.info.q_fp8_*).

Paged caches as engines hold them, DeepSeek-V3.2's tile-scaled rows, and reading rows back as bf16:

    w = ctx.kernel("deepseek_v32", kv="fp8_tile", layout="paged")   # cache: uint8 [blocks, block_size, 656]
    w(q_nope=..., q_pe=..., q_out=..., k_nope=..., k_pe=..., kv_cache=cache, positions=..., slots=..., cos_sin=...)
    r = ctx.kernel("deepseek_v32", kv="fp8_tile", layout="paged", op="read")
    rows = r(kv_cache=cache, slots=slots)                            # bf16 [T, 576], dequantized

The fused kv_a RMSNorm (DeepSeek-V3 / Kimi-K2's kv_a_layernorm) in the same launch: k_nope is the raw c_kv.

    k = ctx.kernel("deepseek_v3", kv="fp8_e4m3", norm="rms")        # "rms_out" also writes norm_out [T, 512]
    k(..., k_nope=kv[:, :512], norm_weight=kv_a_layernorm.weight)   # bf16 [512] (k.info.norm_weight)

Errors the library reports raise RopekvError (status name + the context's last error text); argument
errors found in Python raise TypeError (dtypes, types) or ValueError (shapes, devices, layouts)."""
from ._capi import BACKENDS, INDEX_TYPES, KV_DTYPES, LAYOUTS, NORMS, OPS, Q_DTYPES, Q_FORMS, STATUS, candidate_paths
from ._capi import bundle_dirs
from ._capi import library
from ._capi import library_path
from ._capi import ropekv_args, ropekv_options, ropekv_stats, ropekv_variant
from ._core import BoundLaunch, Context, Kernel, KernelInfo, RopekvError, TensorInfo, family_tensors, raw_args
from ._core import Reader, Record, Segment, record, records
from ._core import version
from ._core import version_number


def __getattr__(name):
    # __version__ is the loaded library's (ropekv_version_string), read on first use so that importing
    # the package still needs no library.
    if name == "__version__":
        return version()
    if name == "ops":  # the torch.library operators: importing them imports torch
        import importlib
        return importlib.import_module(".ops", __name__)
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


__all__ = [
    "BACKENDS", "INDEX_TYPES", "KV_DTYPES", "LAYOUTS", "NORMS", "OPS", "Q_DTYPES", "Q_FORMS", "STATUS", "BoundLaunch",
    "Context", "Kernel", "KernelInfo", "Reader", "Record", "RopekvError", "Segment", "TensorInfo", "bundle_dirs",
    "candidate_paths",
    "family_tensors", "library", "library_path", "raw_args", "record", "records",
    "ropekv_args", "ropekv_options", "ropekv_stats", "ropekv_variant", "version",
    "version_number",
]
