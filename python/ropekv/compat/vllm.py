"""vLLM's MLA cache write and rope (vllm._custom_ops) over ropekv.ops: concat_and_cache_mla and rotary_embedding.

    from ropekv.compat.vllm import concat_and_cache_mla, rotary_embedding

concat_and_cache_mla writes cat(kv_c, k_pe) into the paged cache with no rope, as vLLM's does: ropekv's write kernel
rotates k_pe by the identity (one cos/sin row of cos 1, sin 0), which leaves finite values as they are
(docs/engines.md: a signed zero may lose its sign, a non-finite k_pe value makes its pair NaN). rotary_embedding rotates
the query and the key in place as vLLM's MLA layers call it (head_size = rotary dim, a float32 cos_sin_cache). Errors
vLLM raises are RuntimeError (its TORCH_CHECKs); ropekv's table checks raise RuntimeError too (and their own type)."""
import torch

from .. import ops
from . import _common as c

# kv_cache_dtype -> ropekv's kv dtype; "bf16" is ropekv's name for what vLLM calls "auto" with bf16 inputs
_KV = {"auto": "bf16", "bf16": "bf16", "fp8": "fp8_e4m3", "fp8_e4m3": "fp8_e4m3", "fp8_ds_mla": "fp8_tile"}
# the spec each kv dtype takes by default: the bits of kv_c copied (deepseek_v3), vLLM's x / scale with its 224
# clamp on FNUZ (kimi_k2), vLLM's 656-byte row (deepseek_v32)
SPECS = {"bf16": "deepseek_v3", "fp8_e4m3": "kimi_k2", "fp8_tile": "deepseek_v32"}


def _check_cache(kv, kv_c, k_pe, kv_cache):
    """The shape checks of vLLM's concat_and_cache_mla, with its messages."""
    L, R = kv_c.size(1), k_pe.size(1)
    if kv == "fp8_tile":
        if L != 512:
            raise RuntimeError("kv_lora_rank must be 512 for fp8_ds_mla")
        if R != 64:
            raise RuntimeError("pe_dim must be 64 for fp8_ds_mla")
        if kv_cache.size(2) != 656 // kv_cache.element_size():
            raise RuntimeError("kv_cache.size(2) must be 656 bytes for fp8_ds_mla")
        if kv_c.element_size() != 2:
            raise RuntimeError("kv_c.itemsize() must be 2 for fp8_ds_mla")
        if k_pe.element_size() != 2:
            raise RuntimeError("k_pe.itemsize() must be 2 for fp8_ds_mla")
    elif kv_cache.size(2) != L + R:
        raise RuntimeError("Expected kv_cache.size(2) == kv_lora_rank + pe_dim to be true, but got false.")


def concat_and_cache_mla(kv_c, k_pe, kv_cache, slot_mapping, kv_cache_dtype, scale, *, spec=None):
    """vLLM's concat_and_cache_mla: kv_cache[slot_mapping[t]] = cat(kv_c[t], k_pe[t]) for t < len(slot_mapping)
    (kv_c and k_pe may have more rows: CUDA-graph padding), a negative slot skipped. kv_c [T, L] and k_pe [T, R] bf16;
    kv_cache [num_blocks, block_size, L + R] (bf16 for "auto" / "bf16"; uint8 or float8 bytes for "fp8" /
    "fp8_e4m3", each value converted as fp8(x / scale) under kimi_k2; uint8 [.., 656] for "fp8_ds_mla", DeepSeek-V3.2's
    tile-scaled row, scale unused); slot_mapping int64 [T]; scale a float32 tensor of one element.
    spec (ropekv's own): the spec of the launch; default SPECS[kv dtype]."""
    kv = _KV.get(kv_cache_dtype)
    if kv is None:
        if kv_cache_dtype == "fp8_e5m2":
            raise c.refuse("kv_cache_dtype", "ropekv has no e5m2 cache row (fp8 e4m3 only)")
        raise RuntimeError("Unsupported data type of kv cache: %s" % kv_cache_dtype)
    for name, t in (("kv_c", kv_c), ("k_pe", k_pe)):
        if isinstance(t, torch.Tensor) and t.dtype in (torch.float16, torch.float32):
            raise c.refuse(name, "ropekv writes from bfloat16 inputs; vLLM also takes %s" % t.dtype)
    if isinstance(slot_mapping, torch.Tensor) and slot_mapping.dtype != torch.int64:
        raise RuntimeError("expected scalar type Long but found %s (slot_mapping)" % slot_mapping.dtype)
    _check_cache(kv, kv_c, k_pe, kv_cache)
    spec = spec or SPECS[kv]
    with c.errors(RuntimeError):
        # positions: any int64 tensor of the slots' length; the one-row identity table clamps them all to row 0
        ops.write(spec, kv=kv, layout="paged", q_form="none", k_nope=kv_c, k_pe=k_pe, kv_cache=kv_cache,
                  positions=slot_mapping, slots=slot_mapping, cos_sin=c.identity_table(k_pe.size(1), kv_c.device),
                  k_scale=scale if kv == "fp8_e4m3" else None)


def _rotate(spec, x, positions, cos_sin_cache, head_size):
    """One launch rotating x [T, H * head_size] (or [T, H, head_size]) in place: ropekv's write kernel with the
    in-place query form and no KV row."""
    T = positions.numel()
    view = x.view(T, -1, head_size)
    info = c.kernel_info(x, spec, "bf16", "inplace", positions, None)
    k_nope, k_pe, cache, slots = c.no_kv(info.L, info.R, x.device)
    ops.write(spec, kv="bf16", q_form="inplace", q_dtype="bf16", q_pe=view, k_nope=k_nope, k_pe=k_pe, kv_cache=cache,
              positions=positions.reshape(-1), slots=slots, cos_sin=cos_sin_cache)


def rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox, rope_dim_offset=0, inverse=False, *,
                     spec="deepseek_v3"):
    """vLLM's rotary_embedding as MLA calls it: query [T, H * R] (or [T, H, R]) and key [T, R] (or [T, 1, R], or None)
    rotated in place by cos_sin_cache [max_pos, R] float32 (cos | sin) at positions [T], head_size = R (the whole head
    rotates), interleaved pairs (is_neox False) for the gptj specs. Two launches (query, then key). Refused
    (NotImplementedError): a cos_sin_cache of another dtype (vLLM rotates in that dtype's arithmetic), a rotary dim
    other than head_size, is_neox other than the spec's rope style, rope_dim_offset != 0, inverse.
    spec (ropekv's own): the spec whose rope the launch takes (deepseek_v3)."""
    if rope_dim_offset != 0:
        raise c.refuse("rope_dim_offset", "ropekv rotates from the start of the head (0 only)")
    if inverse:
        raise c.refuse("inverse", "ropekv has no inverse rotation")
    if cos_sin_cache.dtype != torch.float32:
        raise c.refuse("cos_sin_cache", "%s: vLLM rotates in that dtype's arithmetic; ropekv rotates in float32 and "
                                        "takes a float32 table" % cos_sin_cache.dtype)
    if cos_sin_cache.dim() != 2 or cos_sin_cache.size(1) != head_size:
        raise c.refuse("head_size", "partial rotary (rot_dim %s < head_size %d) is not MLA's; ropekv rotates the "
                                    "whole head" % (list(cos_sin_cache.shape)[1:], head_size))
    with c.errors(RuntimeError):
        info = c.kernel_info(query, spec, "bf16", "inplace", positions, None)
        if bool(is_neox) != (info.rope == "neox"):
            raise c.refuse("is_neox", "%r, but spec %s rotates %s pairs" % (is_neox, spec, info.rope))
        _rotate(spec, query, positions, cos_sin_cache, head_size)
        if key is not None:
            _rotate(spec, key, positions, cos_sin_cache, head_size)
