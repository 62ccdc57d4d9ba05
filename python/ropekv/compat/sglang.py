"""SGLang's fused MLA rope + fp8 quantize + KV write (sgl_kernel.mla_rope_quantize_fp8_fused) over ropekv.ops.

    from ropekv.compat.sglang import mla_rope_quantize_fp8_fused

SGLang's kernel converts to fp8 e4m3 without a scale (saturating at 448); the shim launches ropekv with unit scales,
which is the same conversion under every convention. k_nope_out | k_rope_out must be the two slices of one
[nnz, L + R] buffer (ropekv writes the key as one row). SGLang refuses tensors off the GPU; the shim also takes CPU
tensors (ropekv's host backend). Errors SGLang raises are RuntimeError (its TORCH_CHECKs); ropekv's table checks raise
RuntimeError too (and their own type)."""

from .. import ops
from . import _common as c


def _check(q_nope, q_rope, k_nope, k_rope, cos_sin_cache, pos_ids, q_out):
    """SGLang's rank and size checks, with its messages."""
    if q_nope.dim() not in (2, 3):
        raise RuntimeError("q_nope must be 2D or 3D")
    if q_rope.dim() not in (2, 3):
        raise RuntimeError("q_rope must be 2D or 3D")
    for name, t, d in (("k_nope", k_nope, 2), ("k_rope", k_rope, 2), ("pos_ids", pos_ids, 1),
                       ("cos_sin_cache", cos_sin_cache, 2)):
        if t.dim() != d:
            raise RuntimeError("%s must be %dD" % (name, d))
    if q_out.dim() != q_nope.dim():
        raise RuntimeError("q_out.dim() must equal %d" % q_nope.dim())
    if q_out.size(-1) != q_nope.size(-1) + q_rope.size(-1):
        raise RuntimeError("q_out.size(%d) must equal Dn + Dr" % (q_out.dim() - 1))
    if k_nope.size(0) != q_nope.size(0) or k_rope.size(0) != q_nope.size(0):
        raise RuntimeError("nnz_k must equal nnz_tokens")


def _heads(t):
    return t.unsqueeze(1) if t.dim() == 2 else t


def mla_rope_quantize_fp8_fused(q_nope, q_rope, k_nope, k_rope, cos_sin_cache, pos_ids, is_neox, q_out,
                                k_nope_out=None, k_rope_out=None, kv_buffer=None, kv_cache_loc=None, *,
                                spec="deepseek_v3"):
    """SGLang's mla_rope_quantize_fp8_fused: q_out[t, h] = fp8(cat(q_nope[t, h], rope(q_rope[t, h]))) (q_nope
    [nnz, H, Dn] or [nnz, Dn], q_out uint8 [nnz, H, Dn + Dr] or [nnz, Dn + Dr]); the key's fp8 row
    fp8(cat(k_nope[t], rope(k_rope[t]))) into kv_buffer [rows, 1, Dn + Dr] (uint8) at row kv_cache_loc[t] when both are
    given, and into k_nope_out [nnz, Dn] / k_rope_out [nnz, Dr] when given. cos_sin_cache float32 [max_pos, Dr]
    (cos | sin), pos_ids [nnz]. One launch, two when both kv_buffer and the key outputs are given.
    spec (ropekv's own): deepseek_v3."""
    _check(q_nope, q_rope, k_nope, k_rope, cos_sin_cache, pos_ids, q_out)
    with c.errors(RuntimeError):
        info = c.kernel_info(q_out, spec, "fp8_e4m3", "absorbed", pos_ids, None, "fp8_e4m3")
        if bool(is_neox) != (info.rope == "neox"):
            raise c.refuse("is_neox", "%r, but spec %s rotates %s pairs" % (is_neox, spec, info.rope))
        k_out = c.joint(k_nope_out, k_rope_out)
        if (k_nope_out is not None or k_rope_out is not None) and k_out is None:
            raise c.refuse("k_nope_out, k_rope_out", "ropekv writes the key as one row: pass the two slices of one "
                                                     "[nnz, Dn + Dr] tensor")
        fused = kv_buffer is not None and kv_cache_loc is not None
        targets = ([(kv_buffer, kv_cache_loc)] if fused else []) + ([(k_out, None)] if k_out is not None else [])
        q = dict(q_nope=_heads(q_nope), q_pe=_heads(q_rope), q_out=_heads(q_out))
        if not targets:  # the query alone: no KV row
            k_n, k_p, cache, slots = c.no_kv(info.L, info.R, q_out.device)
            ops.write(spec, kv="bf16", **q, k_nope=k_n, k_pe=k_p, kv_cache=cache, positions=pos_ids, slots=slots,
                      cos_sin=cos_sin_cache, q_scale=1.0)
        for i, (cache, slots) in enumerate(targets):
            ops.write(spec, kv="fp8_e4m3", **(q if i == 0 else {}), k_nope=k_nope, k_pe=k_rope, kv_cache=cache,
                      positions=pos_ids, slots=slots if slots is not None else c.ramp(k_nope.size(0), k_nope.device),
                      cos_sin=cos_sin_cache, k_scale=1.0, q_scale=1.0)
