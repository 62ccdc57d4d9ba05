"""aiter's fused MLA rope + concat + cache write (aiter.ops.triton's fused_qk_rope_cat_and_cache_mla) over ropekv.ops.

    from ropekv.compat.aiter import fused_qk_rope_cat_and_cache_mla

aiter scales an fp8 cache by the reciprocal of k_scale, deepseek_v3's convention (x * (1 / k_scale)). Its cos / sin are
two tables [max_pos, R/2]; deepseek_v3 takes one float32 table (cos | sin), so cos and sin must be the two halves of one
float32 [max_pos, R] tensor (cos_sin_cache.chunk(2, dim=-1)), or the spec one with separate tables
(deepseek_v2_lite: bf16 cos / sin). ropekv writes rope(k_pe) only into the cache: the third element returned
(k_pe_out) is None, and passing k_pe_out is refused. Errors aiter raises are AssertionError (its asserts); ropekv's
table checks raise AssertionError too (and their own type)."""
import torch

from .. import ops
from . import _common as c

_E4M3 = tuple(d for d in (getattr(torch, "float8_e4m3fn", None), getattr(torch, "float8_e4m3fnuz", None)) if d)


def _check(q_nope, q_pe, k_nope, k_pe, kv_cache, slot_mapping, cos, k_scale, num_decode_toks_for_zeros):
    """aiter's asserts on the shapes, with its messages; returns (b, qh, kh)."""
    b, qh, d_nope = q_nope.shape
    b2, qh2, d_pe = q_pe.shape
    bk, kh, dk_nope = k_nope.shape
    bk2, kh2, dk2 = k_pe.shape
    assert kv_cache.dtype in (torch.bfloat16, torch.uint8) + _E4M3, "KV cache dtype must be BF16, FP8 or packed FP4"
    (b_slot,) = slot_mapping.shape
    assert b == b2 and bk == bk2 and b_slot <= bk and b <= bk, (
        "Q batch dimensions should be identical (b == b2), K batch dimensions should be identical (bk == bk2), "
        "slot_mapping should not exceed K batch size (b_slot <= bk), and Q batch should not exceed K batch (b <= bk)")
    assert qh == qh2, "Q head should be identical"
    assert kv_cache.dim() == 3 and kh == kh2 == kv_cache.shape[1], "K head should be identical"
    assert d_pe == dk2, "D dimension of q_pe and k_pe should be identical"
    assert d_nope == dk_nope, "D dimension of q_nope and k_nope should be identical"
    assert dk_nope + d_pe == kv_cache.shape[2], (
        "D dimension of k_nope and k_pe should be summed up to be the D dimension of kv_cache")
    assert qh % kh == 0, "Q heads must be multiple of H heads"
    d_freq = cos.shape[-1]
    assert d_freq == d_pe // 2 or d_freq == d_pe, "cos/sin last dim should be the same or half of the qk last dim"
    assert num_decode_toks_for_zeros >= 0, (
        "num_decode_toks_for_zeros must be non-negative to avoid invalid tensor creation")
    if isinstance(k_scale, torch.Tensor):
        assert k_scale.numel() == 1, "k_scale should be a single-element torch.Tensor"
    return b, qh, kh


def _refusals(kv_cache, kh, num_decode_toks_for_zeros, k_pe_out, shuffled_kv_cache, cos, d_pe):
    if kv_cache.dtype == torch.uint8:
        raise c.refuse("kv_cache", "uint8 is aiter's packed FP4 cache; ropekv writes bf16 or fp8 e4m3 rows")
    if shuffled_kv_cache:
        raise c.refuse("shuffled_kv_cache", "ropekv writes rows, not aiter's shuffled blocks")
    if kh != 1:
        raise c.refuse("k_nope", "%d KV heads; MLA's latent cache has one" % kh)
    if num_decode_toks_for_zeros:
        raise c.refuse("num_decode_toks_for_zeros", "ropekv writes no zeros / q_pe side outputs (0 only)")
    if k_pe_out is not None:
        raise c.refuse("k_pe_out", "ropekv writes rope(k_pe) only into the cache")
    if cos.shape[-1] != d_pe // 2:
        raise c.refuse("cos", "full-width tables (last dim R) are not taken; pass the [max_pos, R/2] halves")


def _tables(info, cos, sin, spec):
    """(cos_sin, sin) for the spec's table layout: one [max_pos, R] table of which cos and sin are the halves (f32_cat),
    or the two tables as they are."""
    cos2, sin2 = cos.reshape(cos.shape[0], -1), sin.reshape(sin.shape[0], -1)
    if info.cos_sin != "f32_cat":
        return cos2, sin2
    whole = c.joint(cos2, sin2)
    if whole is None:
        raise c.refuse("cos, sin", "spec %s takes one float32 table [max_pos, R] (cos | sin): pass the two halves of "
                                   "one (cos_sin_cache.chunk(2, dim=-1)), or a spec with separate tables" % spec)
    return whole, None


def fused_qk_rope_cat_and_cache_mla(q_nope, q_pe, k_nope, k_pe, kv_cache, slot_mapping, pos, cos, sin, k_scale,
                                    is_neox, num_decode_toks_for_zeros=0, apply_scale=True, q_out=None,
                                    decode_q_pe_out=None, k_pe_out=None, q_out_dtype=None, shuffled_kv_cache=False,
                                    upcast_operand=False, *, spec="deepseek_v3"):
    """aiter's fused_qk_rope_cat_and_cache_mla: q_out[t, h] = cat(q_nope[t, h], rope(q_pe[t, h])) for the b query
    tokens (q_nope [b, QH, L], q_pe [b, QH, R]; q_out allocated as [b, QH, L + R] of q_out_dtype, default q_nope's, when
    None; an fp8 q_out is converted without a scale), and kv_cache[slot_mapping[t]] = cat(k_nope[t], rope(k_pe[t])) for
    the b_slot tokens of slot_mapping (k_nope [bk, 1, L], k_pe [bk, 1, R], kv_cache [B_cache, 1, L + R] bf16 or fp8
    e4m3, fp8 as x * (1 / k_scale); apply_scale False or k_scale None: no scale), a negative slot skipped; pos [>= bk]
    positions, cos / sin [max_pos, R/2]. Returns (q_out, decode_q_pe_out, None, q_nope_zeros_out), the second and
    fourth empty ([0, QH, R] and [0, QH, L]). upcast_operand is accepted: ropekv rotates in float32 whatever it says.
    spec (ropekv's own): deepseek_v3."""
    b, qh, kh = _check(q_nope, q_pe, k_nope, k_pe, kv_cache, slot_mapping, cos, k_scale, num_decode_toks_for_zeros)
    _refusals(kv_cache, kh, num_decode_toks_for_zeros, k_pe_out, shuffled_kv_cache, cos, q_pe.shape[2])
    if q_out is None:
        q_out = torch.empty(b, qh, q_nope.shape[2] + q_pe.shape[2], dtype=q_out_dtype or q_nope.dtype,
                            device=q_nope.device)
    else:
        assert tuple(q_out.shape) == (b, qh, q_nope.shape[2] + q_pe.shape[2]), "q_out shape mismatch"
    if decode_q_pe_out is None:
        decode_q_pe_out = torch.empty(0, qh, q_pe.shape[2], dtype=q_nope.dtype, device=q_nope.device)
    kv = "bf16" if kv_cache.dtype == torch.bfloat16 else "fp8_e4m3"
    with c.errors(AssertionError):
        info = c.kernel_info(kv_cache, spec, kv, "absorbed", pos, slot_mapping, ops._q_dtype_of(q_out))
        if bool(is_neox) != (info.rope == "neox"):
            raise c.refuse("is_neox", "%r, but spec %s rotates %s pairs" % (is_neox, spec, info.rope))
        cos_sin, sin_t = _tables(info, cos, sin, spec)
        ops.write(spec, kv=kv, q_nope=q_nope, q_pe=q_pe, q_out=q_out, k_nope=k_nope, k_pe=k_pe, kv_cache=kv_cache,
                  positions=pos, slots=slot_mapping, cos_sin=cos_sin, sin=sin_t,
                  k_scale=k_scale if apply_scale and k_scale is not None else 1.0, q_scale=1.0)
    zeros = torch.empty(0, qh, q_nope.shape[2], dtype=q_nope.dtype, device=q_nope.device)
    return q_out, decode_q_pe_out, None, zeros
