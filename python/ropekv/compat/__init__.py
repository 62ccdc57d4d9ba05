"""Drop-in shims with the engines' own signatures, over ropekv.ops (docs/engines.md says what each replaces and where
the conventions differ):

    ropekv.compat.vllm         concat_and_cache_mla, rotary_embedding (vllm._custom_ops)
    ropekv.compat.flashinfer   mla_rope_quantize_fp8, rope_quantize_fp8_append_paged_kv_cache (flashinfer.rope)
    ropekv.compat.sglang       mla_rope_quantize_fp8_fused (sgl_kernel)
    ropekv.compat.aiter        fused_qk_rope_cat_and_cache_mla (aiter.ops.triton)

Each function takes the engine's arguments, in its order, with its defaults, and writes the same tensors in place; one
keyword-only argument of ropekv's own, spec=, names the spec whose conventions the launch follows (each shim has a
default). What the engine refuses raises the engine's exception type; ropekv's own checks (the kernel's tensor table)
raise an exception that is both the engine's type and ropekv's (TypeError, ValueError or RopekvError); what the engine
accepts but ropekv has no convention for raises NotImplementedError naming the argument. Importing a shim imports torch
and ropekv.ops."""
import importlib

_ENGINES = ("vllm", "flashinfer", "sglang", "aiter")


def __getattr__(name):
    if name in _ENGINES:
        return importlib.import_module("." + name, __name__)
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


__all__ = list(_ENGINES)
