"""FlashInfer's MLA rope + fp8 quantize (flashinfer.rope) over ropekv.ops: mla_rope_quantize_fp8 and
rope_quantize_fp8_append_paged_kv_cache, for MLA (2-D k_rope / k_nope).

    from ropekv.compat.flashinfer import mla_rope_quantize_fp8, rope_quantize_fp8_append_paged_kv_cache

FlashInfer quantizes fp8(x * quant_scale) with a Python float multiplier; ropekv takes a float32 scale tensor under the
spec's convention, and the shim passes the one that computes the same product (deepseek_v3's x * (1 / k): the float32 k
whose reciprocal is quant_scale; for the multipliers no such k exists for, about one in eight, the nearest, and a code
may differ by one fp8 step: docs/engines.md). The two parts of each output are one
ropekv row: q_nope_out | q_rope_out must be the two slices of one [nnz, H, L + R] buffer (as they are when the shim
allocates them), k_nope_out | k_rope_out of one [nnz, L + R] buffer, and the paged caches (ckv_cache, kpe_cache) the two
slices of one [pages, page_size, L + R] buffer (ropekv's paged layout) or two buffers (its split layout). Errors
FlashInfer raises are ValueError; ropekv's table checks raise ValueError too (and their own type)."""
import torch

from .. import ops
from . import _common as c

_E4M3 = getattr(torch, "float8_e4m3fn", None)
_FP8 = tuple(d for d in (_E4M3, getattr(torch, "float8_e4m3fnuz", None), torch.uint8) if d is not None)


def _quantize_dtype(quantize_dtype, outs):
    """FlashInfer's rule: quantize_dtype, else the first output's dtype, else float8_e4m3fn (uint8 bytes on a torch
    without float8 dtypes). e5m2 is refused (ropekv writes e4m3)."""
    if quantize_dtype is None:
        quantize_dtype = _E4M3 or torch.uint8
        for o in reversed(outs):
            if o is not None:
                quantize_dtype = o.dtype
    if quantize_dtype not in _FP8:
        if "e5m2" in str(quantize_dtype):
            raise c.refuse("quantize_dtype", "ropekv writes fp8 e4m3 only, not %s" % quantize_dtype)
        raise ValueError("quantize_dtype must be torch.float8_e4m3fn or torch.float8_e5m2, got %s" % quantize_dtype)
    return quantize_dtype


def _pair(nope_out, rope_out, shape, dtype, device, names):
    """The joint [..., L + R] output of two parts (allocated when both are None), and the two parts."""
    if nope_out is None and rope_out is None:
        whole = torch.empty(*shape, dtype=dtype, device=device)
        L = shape[-1] - names[2]
        return whole, whole[..., :L], whole[..., L:]
    whole = c.joint(nope_out, rope_out)
    if whole is None:
        raise c.refuse("%s, %s" % names[:2], "ropekv writes the two parts as one row: pass the two slices of one "
                                             "[..., L + R] tensor (or neither, to have them allocated)")
    return whole, nope_out, rope_out


def _scales(spec, like, pos_ids, quant_scale_q, quant_scale_kv, kv="fp8_e4m3", layout="flat"):
    """(k_scale, q_scale) float32 tensors [1] computing x * quant_scale under the spec's conventions."""
    info = c.kernel_info(like, spec, kv, "absorbed", pos_ids, None, "fp8_e4m3", layout)
    k = c.scale_number(quant_scale_kv, info.scale, "quant_scale_kv")
    q = c.scale_number(quant_scale_q, info.q_fp8_scale, "quant_scale_q")
    return c.scale_tensor(k, like.device), c.scale_tensor(q, like.device), info


def _check_rope(info, is_neox, cos_sin_cache, spec):
    if cos_sin_cache.dtype != torch.float32:
        raise ValueError("cos_sin_cache should be float32")
    if bool(is_neox) != (info.rope == "neox"):
        raise c.refuse("is_neox", "%r, but spec %s rotates %s pairs" % (is_neox, spec, info.rope))


def mla_rope_quantize_fp8(q_rope, k_rope, q_nope, k_nope, cos_sin_cache, pos_ids, is_neox=True, quantize_dtype=None,
                          quant_scale_q=1.0, quant_scale_kv=1.0, q_rope_out=None, k_rope_out=None, q_nope_out=None,
                          k_nope_out=None, enable_pdl=False, *, spec="deepseek_v3"):
    """FlashInfer's mla_rope_quantize_fp8: q_rope [nnz, H, R], k_rope [nnz, R], q_nope [nnz, H, L], k_nope [nnz, L]
    (bf16), cos_sin_cache float32 [max_pos, R] (cos | sin), pos_ids [nnz]. Writes fp8(rope(x) * quant_scale) and
    fp8(x * quant_scale) into q_rope_out, k_rope_out, q_nope_out, k_nope_out (allocated when None) and returns them
    in that order. One launch: the query as ropekv's absorbed q_out, the key as rows 0 .. nnz-1 of a flat cache.
    enable_pdl is accepted and left to ropekv (the context's PDL setting). spec (ropekv's own): deepseek_v3."""
    if q_nope is None or k_nope is None:
        raise c.refuse("q_nope" if q_nope is None else "k_nope", "None (a zero-width nope part) is not MLA's")
    if k_rope.dim() != 2:
        raise c.refuse("k_rope", "GQA / MHA keys (3-D) are not MLA's; ropekv takes k_rope [nnz, R]")
    dtype = _quantize_dtype(quantize_dtype, (q_rope_out, k_rope_out, q_nope_out, k_nope_out))
    with c.errors(ValueError):
        k_scale, q_scale, info = _scales(spec, k_rope, pos_ids, quant_scale_q, quant_scale_kv)
        _check_rope(info, is_neox, cos_sin_cache, spec)
        nnz, H = q_rope.shape[0], q_rope.shape[1]
        q_out, q_nope_out, q_rope_out = _pair(q_nope_out, q_rope_out, (nnz, H, info.W), dtype, q_rope.device,
                                              ("q_nope_out", "q_rope_out", info.R))
        k_out, k_nope_out, k_rope_out = _pair(k_nope_out, k_rope_out, (nnz, info.W), dtype, k_rope.device,
                                              ("k_nope_out", "k_rope_out", info.R))
        ops.write(spec, kv="fp8_e4m3", q_nope=q_nope, q_pe=q_rope, q_out=q_out, k_nope=k_nope, k_pe=k_rope,
                  kv_cache=k_out, positions=pos_ids, slots=c.ramp(k_out.shape[0], k_out.device),
                  cos_sin=cos_sin_cache, k_scale=k_scale, q_scale=q_scale)
    return q_rope_out, k_rope_out, q_nope_out, k_nope_out


def _slots(kv_indices, kv_indptr, batch_indices, positions, page_size):
    """FlashInfer's page addressing as ropekv's slots: token t of request b at position p is entry p % page_size of
    page kv_indices[kv_indptr[b] + p // page_size]."""
    b = batch_indices.long()
    p = positions.long()
    page = kv_indices.long()[kv_indptr.long()[b] + torch.div(p, page_size, rounding_mode="floor")]
    return page * page_size + torch.remainder(p, page_size)


def _caches(paged_kv_cache, dtype, page_size):
    """(the cache tensor, kv_rope_cache or None, layout) of FlashInfer's MLA (ckv_cache, kpe_cache), with its checks."""
    if len(paged_kv_cache) != 2:
        raise ValueError("paged_kv_cache must be a tuple of 2 tensors")
    ckv, kpe = paged_kv_cache
    if ckv.dtype != dtype or kpe.dtype != dtype:
        raise ValueError("MLA cache dtype mismatch: expected %s, got ckv=%s, kpe=%s" % (dtype, ckv.dtype, kpe.dtype))
    if ckv.dim() != 3 or kpe.dim() != 3:
        raise ValueError("MLA cache must be 3D: (max_pages, page_size, dim), got ckv=%dD, kpe=%dD"
                         % (ckv.dim(), kpe.dim()))
    if ckv.shape[1] != page_size or kpe.shape[1] != page_size:
        raise c.refuse("page_size", "%d, but the caches hold pages of %d entries; ropekv takes the page size from "
                                    "the caches" % (page_size, ckv.shape[1]))
    whole = c.joint(ckv, kpe)
    return (whole, None, "paged") if whole is not None else (ckv, kpe, "split")


def rope_quantize_fp8_append_paged_kv_cache(q_rope, k_rope, q_nope, k_nope, v, cos_sin_cache, pos_ids, paged_kv_cache,
                                            kv_indices, kv_indptr, batch_indices, positions, is_neox=True,
                                            quantize_dtype=None, quant_scale_q=1.0, quant_scale_kv=1.0, page_size=16,
                                            kv_layout="NHD", q_rope_out=None, q_nope_out=None, enable_pdl=False, *,
                                            spec="deepseek_v3"):
    """FlashInfer's rope_quantize_fp8_append_paged_kv_cache for MLA: the query as mla_rope_quantize_fp8 quantizes it
    (returned as (q_rope_out, q_nope_out)), the key's fp8 row appended to the paged caches paged_kv_cache =
    (ckv_cache [pages, page_size, L], kpe_cache [pages, page_size, R]) at the slot FlashInfer's page table gives each
    token (computed in PyTorch before the launch: a few small kernels). v must be None (MLA); kv_layout is not used
    (MLA's caches have no head axis); enable_pdl is left to ropekv. spec (ropekv's own): deepseek_v3."""
    if cos_sin_cache.dtype != torch.float32:
        raise ValueError("cos_sin_cache should be float32")
    if k_rope.dim() != 2:
        raise c.refuse("k_rope", "GQA / MHA keys (3-D) are not MLA's; ropekv takes k_rope [nnz, R]")
    if q_nope is None or k_nope is None:
        raise c.refuse("q_nope" if q_nope is None else "k_nope", "None (a zero-width nope part) is not MLA's")
    if v is not None:
        raise ValueError("MLA should not have V input (pass None)")
    dtype = _quantize_dtype(quantize_dtype, (q_rope_out, q_nope_out))
    cache, rope_cache, layout = _caches(paged_kv_cache, dtype, page_size)
    with c.errors(ValueError):
        k_scale, q_scale, info = _scales(spec, k_rope, pos_ids, quant_scale_q, quant_scale_kv, layout=layout)
        _check_rope(info, is_neox, cos_sin_cache, spec)
        nnz, H = q_rope.shape[0], q_rope.shape[1]
        q_out, q_nope_out, q_rope_out = _pair(q_nope_out, q_rope_out, (nnz, H, info.W), dtype, q_rope.device,
                                              ("q_nope_out", "q_rope_out", info.R))
        slots = _slots(kv_indices, kv_indptr, batch_indices, positions, page_size)
        ops.write(spec, kv="fp8_e4m3", layout=layout, q_nope=q_nope, q_pe=q_rope, q_out=q_out, k_nope=k_nope,
                  k_pe=k_rope, kv_cache=cache, kv_rope_cache=rope_cache, positions=pos_ids, slots=slots,
                  cos_sin=cos_sin_cache, k_scale=k_scale, q_scale=q_scale)
    return q_rope_out, q_nope_out
