"""Tests of the engine shims (ropekv.compat: vllm, flashinfer, sglang, aiter): each shim's documented semantics written
out with ropekv.reference (the fma-exact rope, the e4m3 encoder) and compared bit for bit, on the host backend (CPU
tensors) and on CUDA where there is a device; the engines' refusals (their exception types and messages) and ropekv's
own (NotImplementedError naming the argument).

    python3 python/tests/test_compat.py            # plain runner (no pytest needed)
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import _reference as rf  # noqa: E402
import _support as sp  # noqa: E402
from _support import _expect, ref  # noqa: E402

L, R, W = 512, 64, 576


def _setup(device):
    torch = sp._torch() if device == "cpu" else sp._cuda_torch()
    import ropekv.ops
    import ropekv.compat.aiter
    import ropekv.compat.flashinfer
    import ropekv.compat.sglang
    import ropekv.compat.vllm
    ropekv.ops.use_context(sp.context("host" if device == "cpu" else "cuda"))
    return torch, ropekv.compat


def _bf16(torch, shape, g, device):
    return (torch.randn(*shape, generator=g) * 2).to(torch.bfloat16).to(device)


def _table(torch, g, device, max_pos=64):
    ang = torch.rand(max_pos, R // 2, generator=g) * 6.3
    return torch.cat([ang.cos(), ang.sin()], dim=-1).to(device)


def _rope(torch, x, table, pos):
    """rope(x) as float32 (ropekv.reference), x [..., R] with pos indexing x's first dimension."""
    cs = table[pos.long()]
    c, s = cs[:, :R // 2], cs[:, R // 2:]
    extra = x.dim() - 2
    c, s = c.view(c.shape[0], *([1] * extra), R // 2), s.view(s.shape[0], *([1] * extra), R // 2)
    return ref.rope(x, c, s, "gptj")


def _fp8(torch, v, mult=None):
    """e4m3 codes of float32 values times a float32 multiplier, clamped to +-448 (OCP)."""
    if mult is not None:
        v = v * torch.tensor(mult, dtype=torch.float32, device=v.device)
    return ref.e4m3_codes(torch.clamp(v, -448.0, 448.0))


def _eq(torch, got, want, what):
    got = got.contiguous().view(torch.uint8) if got.dtype != torch.bfloat16 else got
    want = want.contiguous().view(torch.uint8) if want.dtype != torch.bfloat16 else want
    sp._equal_bits(torch, got.cpu(), want.cpu(), what)


# ---- vLLM ------------------------------------------------------------------------------------------------------
def _vllm_write(device, kv_dtype):
    """concat_and_cache_mla against vLLM's definition: the cache rows of the slots are cat(kv_c, k_pe) (no rope),
    bf16 bits copied, fp8 as fp8(x / scale), fp8_ds_mla as DeepSeek-V3.2's tile row; negative slots skipped, the
    rows past the slots' length (padding) never read."""
    torch, compat = _setup(device)
    g = torch.Generator().manual_seed(11)
    T = 9
    kv = _bf16(torch, (T + 3, W), g, device)  # the projection output, 3 padding rows
    slots = torch.tensor([5, -1, 0, 17, 30, -1, 2, 9, 31], dtype=torch.int64, device=device)
    width, dt = {"auto": (W, torch.bfloat16), "fp8": (W, torch.uint8), "fp8_ds_mla": (656, torch.uint8)}[kv_dtype]
    cache = torch.full((4, 8, width), 0x5A, dtype=torch.uint8, device=device).view(dt)[..., :width]
    if dt == torch.bfloat16:
        cache = torch.randn(4, 8, width, generator=g).to(torch.bfloat16).to(device)
    before = cache.clone()
    scale = torch.tensor([0.37], dtype=torch.float32, device=device)
    compat.vllm.concat_and_cache_mla(kv[:, :L], kv[:, L:], cache, slots, kv_dtype, scale)
    want = _vllm_want(torch, kv[:T], slots, scale, before, kv_dtype)
    _eq(torch, cache.view(32, width), want, "vllm concat_and_cache_mla %s" % kv_dtype)


def _vllm_want(torch, kv, slots, scale, before, kv_dtype):
    """The cache rows concat_and_cache_mla writes, as [rows, width]: before's, with cat(kv_c, k_pe) of each token
    at its slot (none at a negative one), converted per kv_dtype."""
    want = before.clone().view(-1, before.shape[-1])
    ok = slots >= 0
    rows = kv[ok]
    if kv_dtype == "auto":
        want[slots[ok]] = rows
    elif kv_dtype == "fp8":
        want[slots[ok]] = ref.e4m3_codes(torch.clamp(rows.float() / scale, -448.0, 448.0))
    else:
        want[slots[ok]] = rf.tile_rows(torch, "deepseek_v32", rows[:, :L].cpu(), rows[:, L:].cpu()).to(want.device)
    return want


@sp.parametrize("kv_dtype", ["auto", "fp8", "fp8_ds_mla"])
def test_vllm_concat_and_cache_mla_host(kv_dtype):
    _vllm_write("cpu", kv_dtype)


def test_vllm_concat_and_cache_mla_edges_host():
    """What the identity rotation changes (docs/engines.md): nothing in a pair of finite values but the sign of a zero
    (-0 with a negative partner); a non-finite k_pe value makes the other value of its pair NaN (x * 0). c_kv's bits
    are copied whatever they are."""
    torch, compat = _setup("cpu")
    kv = torch.ones(2, W, dtype=torch.bfloat16)
    kv[0, 3], kv[0, L] = float("nan"), float("inf")  # c_kv NaN (copied); k_pe pair 0 = (inf, 1)
    kv[0, L + 2], kv[0, L + 3] = -0.0, -1.0  # pair 1 = (-0, -1): the -0 becomes +0
    kv[1, L + 4] = -0.0  # pair 2 of token 1 = (-0, 1): kept
    cache = torch.zeros(1, 4, W, dtype=torch.bfloat16)
    compat.vllm.concat_and_cache_mla(kv[:, :L], kv[:, L:], cache, torch.tensor([0, 1]), "auto", torch.ones(1))
    got = cache.view(4, W)[:2].view(torch.int16)
    bits = kv.view(torch.int16)
    assert torch.equal(got[:, :L], bits[:, :L]), "c_kv bits not copied"
    assert got[0, L] == 0x7F80 and got[0, L + 1] == 0x7FFF, got[0, L:L + 2]  # inf kept, its partner + inf * 0: NaN
    assert got[0, L + 2] == 0 and got[0, L + 3] == bits[0, L + 3], got[0, L + 2:L + 4]
    assert torch.equal(got[1, L:], bits[1, L:]), "finite k_pe (and a -0 with a positive partner) not kept"
    assert torch.equal(got[0, L + 4:], bits[0, L + 4:])


def test_vllm_errors_host():
    """vLLM's refusals as vLLM raises them (RuntimeError, its messages); ropekv's table checks as RuntimeError and
    their own type; what ropekv lacks as NotImplementedError naming the argument."""
    torch, compat = _setup("cpu")
    f = compat.vllm.concat_and_cache_mla
    kv = torch.zeros(4, W, dtype=torch.bfloat16)
    cache = torch.zeros(2, 4, W, dtype=torch.bfloat16)
    slots, one = torch.arange(4), torch.ones(1)
    e = _expect(RuntimeError, lambda: f(kv[:, :L], kv[:, L:], cache, slots, "int8", one))
    assert str(e) == "Unsupported data type of kv cache: int8", e
    e = _expect(NotImplementedError, lambda: f(kv[:, :L], kv[:, L:], cache, slots, "fp8_e5m2", one))
    assert str(e).startswith("kv_cache_dtype:"), e
    e = _expect(RuntimeError, lambda: f(kv[:, :L], kv[:, L:], cache[..., :500], slots, "auto", one))
    assert "kv_cache.size(2) == kv_lora_rank + pe_dim" in str(e), e
    e = _expect(RuntimeError, lambda: f(kv[:, :256], kv[:, L:], torch.zeros(2, 4, 656, dtype=torch.uint8), slots,
                                        "fp8_ds_mla", one))
    assert str(e) == "kv_lora_rank must be 512 for fp8_ds_mla", e
    e = _expect(RuntimeError, lambda: f(kv[:, :L], kv[:, L:], cache, slots, "fp8_ds_mla", one))
    assert str(e) == "kv_cache.size(2) must be 656 bytes for fp8_ds_mla", e
    _expect(RuntimeError, lambda: f(kv[:, :L], kv[:, L:], cache, slots.int(), "auto", one))
    e = _expect(NotImplementedError, lambda: f(kv[:, :L].half(), kv[:, L:].half(), cache.half(), slots, "auto", one))
    assert str(e).startswith("kv_c:"), e
    e = _expect(RuntimeError, lambda: f(kv[:, :L], kv[:, L:], cache.view(torch.int16), slots, "auto", one))
    assert isinstance(e, TypeError) and "kv_cache must be bfloat16" in str(e), e
    e = _expect(RuntimeError, lambda: f(kv[:, :L], kv[:, L:], cache, slots, "auto", one, spec="minicpm3_4b"))
    assert isinstance(e, ValueError), e


def _vllm_rotary(device):
    """rotary_embedding rotates query [T, H * R] and key [T, 1, R] in place: ropekv's float32 rope, rounded to bf16."""
    torch, compat = _setup(device)
    g = torch.Generator().manual_seed(12)
    T, H = 7, 3
    q = _bf16(torch, (T, H, 192), g, device)[..., 128:]  # q_pe: a slice of the query heads, as MLA has it
    k = _bf16(torch, (T, 1, R), g, device)
    table = _table(torch, g, device)
    pos = torch.tensor([0, 5, 63, 7, 7, 1, 40], device=device)
    want_q = _rope(torch, q, table, pos).to(torch.bfloat16)
    want_k = _rope(torch, k, table, pos).to(torch.bfloat16)
    compat.vllm.rotary_embedding(pos, q, k, R, table, False)
    _eq(torch, q, want_q, "rotary_embedding query")
    _eq(torch, k, want_k, "rotary_embedding key")
    flat = _bf16(torch, (T, H * R), g, device)
    want = _rope(torch, flat.view(T, H, R), table, pos).to(torch.bfloat16).view(T, H * R)
    compat.vllm.rotary_embedding(pos, flat, None, R, table, False)
    _eq(torch, flat, want, "rotary_embedding query [T, H * R], key None")


def test_vllm_rotary_embedding_host():
    _vllm_rotary("cpu")


def test_vllm_rotary_refusals_host():
    torch, compat = _setup("cpu")
    q, k = torch.zeros(2, 2, R, dtype=torch.bfloat16), torch.zeros(2, R, dtype=torch.bfloat16)
    pos, table = torch.zeros(2, dtype=torch.int64), torch.zeros(8, R)
    f = compat.vllm.rotary_embedding
    for kw, name in ((dict(cos_sin_cache=table.bfloat16()), "cos_sin_cache"), (dict(is_neox=True), "is_neox"),
                     (dict(rope_dim_offset=8), "rope_dim_offset"), (dict(inverse=True), "inverse"),
                     (dict(cos_sin_cache=table[:, :32]), "head_size")):
        a = dict(positions=pos, query=q, key=k, head_size=R, cos_sin_cache=table, is_neox=False)
        a.update(kw)
        e = _expect(NotImplementedError, lambda: f(**a))
        assert str(e).startswith(name + ":"), e



# ---- FlashInfer ------------------------------------------------------------------------------------------------
def _fi_inputs(torch, device, seed, T=6, H=3):
    g = torch.Generator().manual_seed(seed)
    q = _bf16(torch, (T, H, W), g, device)
    kv = _bf16(torch, (T, W), g, device)
    table = _table(torch, g, device)
    pos = torch.randint(0, 64, (T,), generator=g).to(device)
    return q, kv, table, pos


def _fi_want(torch, q, kv, table, pos, qs, ks):
    """FlashInfer's definition, in its return order (q_rope_out, k_rope_out, q_nope_out, k_nope_out): fp8(rope(x) *
    quant_scale) of the rope parts, fp8(x * quant_scale) of the nope parts."""
    return (_fp8(torch, _rope(torch, q[..., L:], table, pos), qs), _fp8(torch, _rope(torch, kv[:, L:], table, pos), ks),
            _fp8(torch, q[..., :L].float(), qs), _fp8(torch, kv[:, :L].float(), ks))


def _flashinfer_rope(device):
    """mla_rope_quantize_fp8 with its outputs allocated, and into one preallocated query and key buffer, with a
    multiplier whose reciprocal is not exact (1 / 0.7)."""
    torch, compat = _setup(device)
    q, kv, table, pos = _fi_inputs(torch, device, 13)
    f = compat.flashinfer.mla_rope_quantize_fp8
    for qs, ks in ((1.0, 0.5), (1 / 0.7, 3.0)):
        want = _fi_want(torch, q, kv, table, pos, qs, ks)
        got = f(q[..., L:], kv[:, L:], q[..., :L], kv[:, :L], table, pos, is_neox=False, quantize_dtype=torch.uint8,
                quant_scale_q=qs, quant_scale_kv=ks)
        for name, a, b in zip(("q_rope_out", "k_rope_out", "q_nope_out", "k_nope_out"), got, want):
            _eq(torch, a, b, "mla_rope_quantize_fp8 %s (%r, %r)" % (name, qs, ks))
    qo = torch.zeros(q.shape, dtype=torch.uint8, device=device)
    ko = torch.zeros(kv.shape, dtype=torch.uint8, device=device)
    got = f(q[..., L:], kv[:, L:], q[..., :L], kv[:, :L], table, pos, False, None, 2.0, 0.25, qo[..., L:], ko[:, L:],
            qo[..., :L], ko[:, :L])
    assert got[0].data_ptr() == qo[..., L:].data_ptr() and got[3].data_ptr() == ko.data_ptr()
    want = _fi_want(torch, q, kv, table, pos, 2.0, 0.25)
    _eq(torch, qo, torch.cat([want[2], want[0]], dim=-1), "mla_rope_quantize_fp8 into one query buffer")
    _eq(torch, ko, torch.cat([want[3], want[1]], dim=-1), "mla_rope_quantize_fp8 into one key buffer")


def test_flashinfer_mla_rope_quantize_fp8_host():
    _flashinfer_rope("cpu")



def test_flashinfer_scale_bound_host():
    """A multiplier with no exact k under x * (1 / k) (3.0686924...): every fp8 code within one step of FlashInfer's,
    the rest of the codes equal; an exact one (0.5, 1 / 0.7) bit for bit (above)."""
    torch, compat = _setup("cpu")
    from ropekv.compat import _common as c
    qs = 3.068692445755005
    assert not c.scale_exact(qs, "mul_recip") and c.scale_exact(1 / 0.7, "mul_recip") and c.scale_exact(0.5, "div")
    q, kv, table, pos = _fi_inputs(torch, "cpu", 14, T=32, H=8)
    got = compat.flashinfer.mla_rope_quantize_fp8(q[..., L:], kv[:, L:], q[..., :L], kv[:, :L], table, pos, False,
                                                 torch.uint8, qs, qs)
    for a, b in zip(got, _fi_want(torch, q, kv, table, pos, qs, qs)):
        steps, _, n, bad = sp.compare_bits(torch, a, b, "fp8")
        assert steps <= 1 and bad <= n // 100, (steps, bad, n)


def _flashinfer_paged(device, one_buffer):
    """rope_quantize_fp8_append_paged_kv_cache: the key's fp8 row at the slot FlashInfer's page table gives each token
    (kv_indices[kv_indptr[b] + p // page_size] * page_size + p % page_size), the caches two slices of one buffer
    (ropekv's paged layout) or two buffers (the split layout)."""
    torch, compat = _setup(device)
    q, kv, table, pos_ids = _fi_inputs(torch, device, 15, T=7)
    buf = torch.full((6, 4, W), 0x5A, dtype=torch.uint8, device=device)
    before = buf.clone()
    kv_indices = torch.tensor([4, 1, 5, 0, 2], dtype=torch.int32, device=device)
    kv_indptr = torch.tensor([0, 2, 5], dtype=torch.int32, device=device)
    batch = torch.tensor([0, 0, 0, 1, 1, 1, 1], dtype=torch.int32, device=device)
    positions = torch.tensor([4, 5, 7, 0, 3, 8, 11], dtype=torch.int32, device=device)
    caches = (buf[..., :L], buf[..., L:]) if one_buffer else (buf[..., :L].clone(), buf[..., L:].clone())
    q_rope_out, q_nope_out = compat.flashinfer.rope_quantize_fp8_append_paged_kv_cache(
        q[..., L:], kv[:, L:], q[..., :L], kv[:, :L], None, table, pos_ids, caches, kv_indices,
        kv_indptr, batch, positions, is_neox=False, quantize_dtype=torch.uint8, quant_scale_q=0.5, quant_scale_kv=2.0,
        page_size=4)
    want = _fi_want(torch, q, kv, table, pos_ids, 0.5, 2.0)
    _eq(torch, q_rope_out, want[0], "append_paged q_rope_out")
    _eq(torch, q_nope_out, want[2], "append_paged q_nope_out")
    pages = [1, 1, 1, 5, 5, 2, 2]  # per token: request 0 has pages [4, 1], request 1 [5, 0, 2]
    slots = torch.tensor([pg * 4 + p % 4 for pg, p in zip(pages, positions.tolist())], device=device)
    flat = before.view(24, W)
    flat[slots] = torch.cat([want[3], want[1]], dim=-1)
    got = buf if one_buffer else torch.cat(caches, dim=-1)
    _eq(torch, got.view(24, W), flat, "append_paged cache%s" % ("" if one_buffer else "s (split)"))


@sp.parametrize("one_buffer", [True, False])
def test_flashinfer_append_paged_host(one_buffer):
    _flashinfer_paged("cpu", one_buffer)


def test_flashinfer_errors_host():
    torch, compat = _setup("cpu")
    q, kv, table, pos = _fi_inputs(torch, "cpu", 16, T=4)
    f = compat.flashinfer.mla_rope_quantize_fp8
    a = (q[..., L:], kv[:, L:], q[..., :L], kv[:, :L])
    e = _expect(ValueError, lambda: f(*a, table.double(), pos, False, torch.uint8))
    assert str(e) == "cos_sin_cache should be float32", e
    e = _expect(NotImplementedError, lambda: f(*a, table, pos, True, torch.uint8))  # NeoX pairs: not deepseek_v3's
    assert str(e).startswith("is_neox:"), e
    e = _expect(NotImplementedError, lambda: f(*a, table, pos, False, torch.uint8, q_rope_out=torch.zeros(
        4, 3, R, dtype=torch.uint8), q_nope_out=torch.zeros(4, 3, L, dtype=torch.uint8)))
    assert str(e).startswith("q_nope_out, q_rope_out:"), e
    e = _expect(ValueError, lambda: f(*a, table, pos, False, torch.int8))
    assert "quantize_dtype must be" in str(e), e
    e = _expect(ValueError, lambda: f(q[..., L:], kv[:, L:], q[..., :L], kv[:, :256], table, pos, False, torch.uint8))
    assert "k_nope" in str(e), e  # ropekv's table: the shapes
    g = compat.flashinfer.rope_quantize_fp8_append_paged_kv_cache
    buf = torch.zeros(2, 4, W, dtype=torch.uint8)
    idx = [torch.zeros(n, dtype=torch.int32) for n in (1, 2, 4, 4)]
    e = _expect(ValueError, lambda: g(*a, kv, table, pos, (buf[..., :L], buf[..., L:]), *idx, False, torch.uint8,
                                      page_size=4))
    assert str(e) == "MLA should not have V input (pass None)", e
    e = _expect(ValueError, lambda: g(*a, None, table, pos, (buf,), *idx, False, torch.uint8, page_size=4))
    assert str(e) == "paged_kv_cache must be a tuple of 2 tensors", e
    e = _expect(ValueError, lambda: g(*a, None, table, pos, (buf[..., :L].view(torch.int8), buf[..., L:]), *idx, False,
                                      torch.uint8, page_size=4))
    assert str(e).startswith("MLA cache dtype mismatch"), e
    e = _expect(NotImplementedError, lambda: g(*a, None, table, pos, (buf[..., :L], buf[..., L:]), *idx, False,
                                               torch.uint8, page_size=8))
    assert str(e).startswith("page_size:"), e


# ---- SGLang ----------------------------------------------------------------------------------------------------
def _sglang(device):
    """mla_rope_quantize_fp8_fused: q_out = fp8(cat(q_nope, rope(q_rope))), the key's fp8 row into kv_buffer at
    kv_cache_loc and into k_nope_out | k_rope_out, no scale; a 2-D query (one head) too."""
    torch, compat = _setup(device)
    q, kv, table, pos = _fi_inputs(torch, device, 17, T=5)
    want = _fi_want(torch, q, kv, table, pos, 1.0, 1.0)
    q_out = torch.zeros(q.shape, dtype=torch.uint8, device=device)
    k_out = torch.zeros(kv.shape, dtype=torch.uint8, device=device)
    kv_buffer = torch.zeros(12, 1, W, dtype=torch.uint8, device=device)
    loc = torch.tensor([3, 0, 11, 7, 4], device=device)
    compat.sglang.mla_rope_quantize_fp8_fused(q[..., :L], q[..., L:], kv[:, :L], kv[:, L:], table, pos, False, q_out,
                                              k_out[:, :L], k_out[:, L:], kv_buffer, loc)
    _eq(torch, q_out, torch.cat([want[2], want[0]], dim=-1), "sglang q_out")
    k_rows = torch.cat([want[3], want[1]], dim=-1)
    _eq(torch, k_out, k_rows, "sglang k_nope_out | k_rope_out")
    flat = torch.zeros(12, W, dtype=torch.uint8, device=device)
    flat[loc] = k_rows
    _eq(torch, kv_buffer.view(12, W), flat, "sglang kv_buffer")
    q2 = torch.zeros(5, W, dtype=torch.uint8, device=device)
    compat.sglang.mla_rope_quantize_fp8_fused(q[:, 0, :L], q[:, 0, L:], kv[:, :L], kv[:, L:], table, pos, False, q2)
    _eq(torch, q2, torch.cat([want[2], want[0]], dim=-1)[:, 0], "sglang 2-D q_out, no key outputs")


def test_sglang_mla_rope_quantize_fp8_fused_host():
    _sglang("cpu")


def test_sglang_errors_host():
    torch, compat = _setup("cpu")
    q, kv, table, pos = _fi_inputs(torch, "cpu", 18, T=3)
    f = compat.sglang.mla_rope_quantize_fp8_fused
    q_out = torch.zeros(q.shape, dtype=torch.uint8)
    e = _expect(RuntimeError, lambda: f(q[..., :L], q[..., L:], kv[:, None, :L], kv[:, L:], table, pos, False, q_out))
    assert str(e) == "k_nope must be 2D", e
    e = _expect(RuntimeError, lambda: f(q[..., :L], q[..., L:], kv[:2, :L], kv[:2, L:], table, pos, False, q_out))
    assert str(e) == "nnz_k must equal nnz_tokens", e
    apart = (torch.zeros(3, L, dtype=torch.uint8), torch.zeros(3, R, dtype=torch.uint8))
    e = _expect(NotImplementedError, lambda: f(q[..., :L], q[..., L:], kv[:, :L], kv[:, L:], table, pos, False, q_out,
                                               *apart))
    assert str(e).startswith("k_nope_out, k_rope_out:"), e
    e = _expect(RuntimeError, lambda: f(q[..., :L], q[..., L:], kv[:, :L], kv[:, L:], table, pos, False,
                                        q_out.view(torch.int8)))
    assert isinstance(e, TypeError) and "q_out" in str(e), e


# ---- aiter -----------------------------------------------------------------------------------------------------
def _aiter(device, fp8):
    """fused_qk_rope_cat_and_cache_mla: q_out = cat(q_nope, rope(q_pe)) for the b query tokens, the cache rows of the
    b_slot > b tokens' slots (negative skipped) cat(k_nope, rope(k_pe)), bf16 or fp8(x * (1 / k_scale)); cos / sin
    the two halves of one table."""
    torch, compat = _setup(device)
    g = torch.Generator().manual_seed(19)
    b, bk, H = 4, 6, 3
    q = _bf16(torch, (b, H, W), g, device)
    kv = _bf16(torch, (bk, 1, W), g, device)
    table = _table(torch, g, device)
    cos, sin = table.chunk(2, dim=-1)
    pos = torch.tensor([3, 9, 0, 63, 12, 5], device=device)
    slots = torch.tensor([7, -1, 2, 0, 5], device=device)
    dt = getattr(torch, "float8_e4m3fn") if fp8 else torch.bfloat16
    cache = torch.zeros(8, 1, W, dtype=torch.uint8 if fp8 else torch.bfloat16, device=device).view(dt)
    k_scale = torch.tensor([0.8], device=device)
    q_out, zq, none, zn = compat.aiter.fused_qk_rope_cat_and_cache_mla(
        q[..., :L], q[..., L:], kv[..., :L], kv[..., L:], cache, slots, pos, cos, sin, k_scale, False)
    assert none is None and zq.shape == (0, H, R) and zn.shape == (0, H, L)
    want_q = torch.cat([q[..., :L], _rope(torch, q[..., L:], table, pos[:b]).to(torch.bfloat16)], dim=-1)
    _eq(torch, q_out, want_q, "aiter q_out")
    rows = torch.cat([kv[:5, 0, :L].float(), _rope(torch, kv[:5, 0, L:], table, pos[:5])], dim=-1)[slots >= 0]
    want = torch.zeros(8, W, dtype=torch.uint8 if fp8 else torch.bfloat16, device=device)
    recip = (1.0 / k_scale).item()
    want[slots[slots >= 0]] = _fp8(torch, rows, recip) if fp8 else rows.to(torch.bfloat16)
    _eq(torch, cache.view(8, W), want, "aiter kv_cache")


def test_aiter_bf16_host():
    _aiter("cpu", False)


def test_aiter_fp8_host():
    if not hasattr(sp._torch(), "float8_e4m3fn"):
        sp.skip("torch %s has no float8_e4m3fn (aiter's fp8 cache dtype)" % sp._torch().__version__)
    _aiter("cpu", True)


def test_aiter_errors_host():
    torch, compat = _setup("cpu")
    q, kv = torch.zeros(2, 2, W, dtype=torch.bfloat16), torch.zeros(3, 1, W, dtype=torch.bfloat16)
    cache, slots, pos = torch.zeros(4, 1, W, dtype=torch.bfloat16), torch.arange(3), torch.arange(3)
    table = torch.zeros(8, R)
    cos, sin = table.chunk(2, dim=-1)
    f = compat.aiter.fused_qk_rope_cat_and_cache_mla
    a = (q[..., :L], q[..., L:], kv[..., :L], kv[..., L:])
    e = _expect(AssertionError, lambda: f(*a, cache[..., :500], slots, pos, cos, sin, None, False))
    assert "summed up to be the D dimension of kv_cache" in str(e), e
    e = _expect(AssertionError, lambda: f(*a, cache.float(), slots, pos, cos, sin, None, False))
    assert str(e) == "KV cache dtype must be BF16, FP8 or packed FP4", e
    e = _expect(AssertionError, lambda: f(*a, cache, torch.arange(4), pos, cos, sin, None, False))
    assert "slot_mapping should not exceed K batch size" in str(e), e
    for kw, name in ((dict(num_decode_toks_for_zeros=2), "num_decode_toks_for_zeros"),
                     (dict(k_pe_out=kv[..., L:].clone()), "k_pe_out"), (dict(shuffled_kv_cache=True), "shuffled"),
                     (dict(cos=table, sin=table), "cos"), (dict(cos=cos.clone(), sin=sin.clone()), "cos, sin"),
                     (dict(is_neox=True), "is_neox")):
        args = dict(kv_cache=cache, slot_mapping=slots, pos=pos, cos=cos, sin=sin, k_scale=None, is_neox=False)
        args.update(kw)
        e = _expect(NotImplementedError, lambda: f(*a, **args))
        assert str(e).startswith(name), (name, e)
    e = _expect(AssertionError, lambda: f(*a, cache, slots.int().float(), pos, cos, sin, None, False))
    assert isinstance(e, TypeError) and "slots" in str(e), e  # ropekv's table: slot indices int32 / int64


# ---- torch.compile and CUDA graphs -------------------------------------------------------------------------------
# Each shim's calls as one step, as an engine's compiled or graph-captured model code makes them: step(*args()) calls
# the shim (every form the eager tests check, a few calls a step) and returns the tensors it wrote or returned; args()
# makes fresh copies of the outputs, as they were before any call (the inputs are shared); want holds the reference's
# bits of each returned tensor (ropekv.reference, as the eager tests compute them).
def _vllm_write_case(torch, compat, device):
    g = torch.Generator().manual_seed(21)
    T = 9
    kv = _bf16(torch, (T + 3, W), g, device)  # 3 padding rows past the slots
    slots = torch.tensor([5, -1, 0, 17, 30, -1, 2, 9, 31], dtype=torch.int64, device=device)
    scale = torch.tensor([0.37], dtype=torch.float32, device=device)
    kinds = ("auto", "fp8", "fp8_ds_mla")
    caches = (torch.randn(4, 8, W, generator=g).to(torch.bfloat16).to(device),
              torch.full((4, 8, W), 0x5A, dtype=torch.uint8, device=device),
              torch.full((4, 8, 656), 0x5A, dtype=torch.uint8, device=device))

    def args():
        return (kv, slots, scale) + tuple(c.clone() for c in caches)

    def step(kv, slots, scale, *out):
        for kv_dtype, cache in zip(kinds, out):
            compat.vllm.concat_and_cache_mla(kv[:, :L], kv[:, L:], cache, slots, kv_dtype, scale)
        return out

    want = [_vllm_want(torch, kv[:T], slots, scale, c, k).view(c.shape) for c, k in zip(caches, kinds)]
    return step, args, want


def _vllm_rotary_case(torch, compat, device):
    g = torch.Generator().manual_seed(22)
    T, H = 7, 3
    q, k, flat = _bf16(torch, (T, H, 192), g, device), _bf16(torch, (T, 1, R), g, device), \
        _bf16(torch, (T, H * R), g, device)
    table = _table(torch, g, device)
    pos = torch.tensor([0, 5, 63, 7, 7, 1, 40], device=device)

    def args():
        return q.clone(), k.clone(), flat.clone(), pos, table

    def step(q, k, flat, pos, table):
        compat.vllm.rotary_embedding(pos, q[..., 128:], k, R, table, False)  # q_pe: a slice of the query heads
        compat.vllm.rotary_embedding(pos, flat, None, R, table, False)
        return q, k, flat

    want_q = torch.cat([q[..., :128], _rope(torch, q[..., 128:], table, pos).to(torch.bfloat16)], dim=-1)
    want_flat = _rope(torch, flat.view(T, H, R), table, pos).to(torch.bfloat16).view(T, H * R)
    return step, args, [want_q, _rope(torch, k, table, pos).to(torch.bfloat16), want_flat]


def _flashinfer_rope_case(torch, compat, device):
    q, kv, table, pos = _fi_inputs(torch, device, 23)
    f = compat.flashinfer.mla_rope_quantize_fp8
    qo, ko = torch.zeros(q.shape, dtype=torch.uint8, device=device), torch.zeros(kv.shape, dtype=torch.uint8,
                                                                               device=device)

    def args():
        return q, kv, table, pos, qo.clone(), ko.clone()

    def step(q, kv, table, pos, qo, ko):
        got = f(q[..., L:], kv[:, L:], q[..., :L], kv[:, :L], table, pos, is_neox=False, quantize_dtype=torch.uint8,
                quant_scale_q=1 / 0.7, quant_scale_kv=3.0)  # the outputs allocated
        f(q[..., L:], kv[:, L:], q[..., :L], kv[:, :L], table, pos, False, None, 2.0, 0.25, qo[..., L:], ko[:, L:],
          qo[..., :L], ko[:, :L])  # into one query and one key buffer
        return tuple(got) + (qo, ko)

    w = _fi_want(torch, q, kv, table, pos, 2.0, 0.25)
    want = list(_fi_want(torch, q, kv, table, pos, 1 / 0.7, 3.0))
    return step, args, want + [torch.cat([w[2], w[0]], dim=-1), torch.cat([w[3], w[1]], dim=-1)]


def _flashinfer_paged_case(torch, compat, device):
    q, kv, table, pos_ids = _fi_inputs(torch, device, 24, T=7)
    g = compat.flashinfer.rope_quantize_fp8_append_paged_kv_cache
    buf = torch.full((6, 4, W), 0x5A, dtype=torch.uint8, device=device)
    kv_indices = torch.tensor([4, 1, 5, 0, 2], dtype=torch.int32, device=device)
    kv_indptr = torch.tensor([0, 2, 5], dtype=torch.int32, device=device)
    batch = torch.tensor([0, 0, 0, 1, 1, 1, 1], dtype=torch.int32, device=device)
    positions = torch.tensor([4, 5, 7, 0, 3, 8, 11], dtype=torch.int32, device=device)

    def args():
        return (q, kv, table, pos_ids, kv_indices, kv_indptr, batch, positions, buf.clone(), buf[..., :L].clone(),
                buf[..., L:].clone())

    def step(q, kv, table, pos_ids, kv_indices, kv_indptr, batch, positions, buf, ckv, kpe):
        out = []
        for caches in ((buf[..., :L], buf[..., L:]), (ckv, kpe)):  # one buffer (paged layout), two (split)
            out += g(q[..., L:], kv[:, L:], q[..., :L], kv[:, :L], None, table, pos_ids, caches, kv_indices,
                     kv_indptr, batch, positions, is_neox=False, quantize_dtype=torch.uint8, quant_scale_q=0.5,
                     quant_scale_kv=2.0, page_size=4)
        return tuple(out) + (buf, ckv, kpe)

    w = _fi_want(torch, q, kv, table, pos_ids, 0.5, 2.0)
    pages = [1, 1, 1, 5, 5, 2, 2]  # per token: request 0 has pages [4, 1], request 1 [5, 0, 2]
    slots = torch.tensor([pg * 4 + p % 4 for pg, p in zip(pages, positions.tolist())], device=device)
    rows = buf.clone().view(24, W)
    rows[slots] = torch.cat([w[3], w[1]], dim=-1)
    rows = rows.view(buf.shape)
    return step, args, [w[0], w[2], w[0], w[2], rows, rows[..., :L], rows[..., L:]]


def _sglang_case(torch, compat, device):
    q, kv, table, pos = _fi_inputs(torch, device, 25, T=5)
    f = compat.sglang.mla_rope_quantize_fp8_fused
    loc = torch.tensor([3, 0, 11, 7, 4], device=device)

    def args():
        return (q, kv, table, pos, loc, torch.zeros(q.shape, dtype=torch.uint8, device=device),
                torch.zeros(kv.shape, dtype=torch.uint8, device=device),
                torch.zeros(12, 1, W, dtype=torch.uint8, device=device),
                torch.zeros(5, W, dtype=torch.uint8, device=device))

    def step(q, kv, table, pos, loc, q_out, k_out, kv_buffer, q2):
        f(q[..., :L], q[..., L:], kv[:, :L], kv[:, L:], table, pos, False, q_out, k_out[:, :L], k_out[:, L:],
          kv_buffer, loc)
        f(q[:, 0, :L], q[:, 0, L:], kv[:, :L], kv[:, L:], table, pos, False, q2)  # one head, no key outputs
        return q_out, k_out, kv_buffer, q2

    w = _fi_want(torch, q, kv, table, pos, 1.0, 1.0)
    k_rows = torch.cat([w[3], w[1]], dim=-1)
    cache = torch.zeros(12, W, dtype=torch.uint8, device=device)
    cache[loc] = k_rows
    q_rows = torch.cat([w[2], w[0]], dim=-1)
    return step, args, [q_rows, k_rows, cache.view(12, 1, W), q_rows[:, 0]]


def _aiter_case(torch, compat, device):
    g = torch.Generator().manual_seed(26)
    b, bk, H = 4, 6, 3
    q = _bf16(torch, (b, H, W), g, device)
    kv = _bf16(torch, (bk, 1, W), g, device)
    table = _table(torch, g, device)
    pos = torch.tensor([3, 9, 0, 63, 12, 5], device=device)
    slots = torch.tensor([7, -1, 2, 0, 5], device=device)
    k_scale = torch.tensor([0.8], device=device)
    dtypes = [torch.bfloat16] + ([torch.float8_e4m3fn] if hasattr(torch, "float8_e4m3fn") else [])
    caches = [torch.zeros(8, 1, W, dtype=torch.uint8 if dt != torch.bfloat16 else dt, device=device).view(dt)
              for dt in dtypes]

    def args():
        return (q, kv, table, pos, slots, k_scale) + tuple(c.clone() for c in caches)

    def step(q, kv, table, pos, slots, k_scale, *caches):
        cos, sin = table.chunk(2, dim=-1)  # the halves of one table, as engines make them
        out = []
        for cache in caches:
            out.append(compat.aiter.fused_qk_rope_cat_and_cache_mla(
                q[..., :L], q[..., L:], kv[..., :L], kv[..., L:], cache, slots, pos, cos, sin, k_scale, False)[0])
        return tuple(out) + tuple(caches)

    want_q = torch.cat([q[..., :L], _rope(torch, q[..., L:], table, pos[:b]).to(torch.bfloat16)], dim=-1)
    rows = torch.cat([kv[:5, 0, :L].float(), _rope(torch, kv[:5, 0, L:], table, pos[:5])], dim=-1)[slots >= 0]
    want = []
    for dt in dtypes:
        fp8 = dt != torch.bfloat16
        w = torch.zeros(8, W, dtype=torch.uint8 if fp8 else torch.bfloat16, device=device)
        w[slots[slots >= 0]] = _fp8(torch, rows, (1.0 / k_scale).item()) if fp8 else rows.to(torch.bfloat16)
        want.append(w.view(8, 1, W))
    return step, args, [want_q] * len(dtypes) + want


SHIM_CASES = {"vllm_concat_and_cache_mla": _vllm_write_case, "vllm_rotary_embedding": _vllm_rotary_case,
              "flashinfer_mla_rope_quantize_fp8": _flashinfer_rope_case,
              "flashinfer_append_paged_kv_cache": _flashinfer_paged_case,
              "sglang_mla_rope_quantize_fp8_fused": _sglang_case, "aiter_fused_qk_rope_cat_and_cache_mla": _aiter_case}


def _compare(torch, got, want, what):
    assert len(got) == len(want), (what, len(got), len(want))
    for i, (a, b) in enumerate(zip(got, want)):
        _eq(torch, a, b, "%s, output %d" % (what, i))


def _run_eager(torch, case, what):
    step, args, want = case
    _compare(torch, step(*args()), want, what)


def _run_compiled(torch, case, what):
    """The step under torch.compile(fullgraph=True) (a graph break fails it): its outputs bit for bit the eager
    step's and the reference's."""
    step, args, want = case
    eager = step(*args())
    _compare(torch, eager, want, what + " (eager)")
    got = torch.compile(step, fullgraph=True)(*args())
    _compare(torch, got, eager, what + " (compiled vs eager)")
    _compare(torch, got, want, what + " (compiled)")


def _run_graph(torch, case, what):
    """The step captured in a CUDA graph (after one eager call outside capture: the kernels, constant tensors and
    scale tensors made there) and replayed with every tensor as before any call: the replay's outputs bit for bit the
    eager step's and the reference's, and the replay changed them."""
    step, args, want = case
    eager = step(*args())
    static = args()
    step(*static)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = step(*static)
    for t, fresh in zip(static, args()):
        t.copy_(fresh)
    torch.cuda.synchronize()
    before = [o.clone() for o in out]
    g.replay()
    torch.cuda.synchronize()
    assert any(not sp._same_bits(torch, a, b) for a, b in zip(out, before)), "%s: the replay wrote nothing" % what
    _compare(torch, out, eager, what + " (graph replay vs eager)")
    _compare(torch, out, want, what + " (graph replay)")


def _compile_torch():
    torch = sp._torch()
    if not hasattr(torch, "compile"):
        sp.skip("torch %s has no torch.compile" % torch.__version__)
    return torch


@sp.parametrize("shim", list(SHIM_CASES))
def test_shim_steps_host(shim):
    """The steps' eager calls against the reference (what the compiled and graph runs are compared with)."""
    torch, compat = _setup("cpu")
    _run_eager(torch, SHIM_CASES[shim](torch, compat, "cpu"), shim)


@sp.parametrize("shim", list(SHIM_CASES))
def test_traced_branch_host(shim):
    """What torch.compile traces, run eagerly on any torch: with ropekv.ops' compiling probe answering True, the shims
    take their traced branch (the kernel's facts and the scales through the constant-result functions, the constant
    tensors made per call, two parts joined by their storage offsets, the operators called through the dispatcher with
    number scales made tensors) and write the reference's bits."""
    torch, compat = _setup("cpu")
    import ropekv.ops as ops
    from ropekv.compat import _common as c
    probe, seen = ops._is_compiling, []
    ops._is_compiling = lambda: seen.append(1) or True
    try:
        assert c.tracing() and isinstance(c.kernel_info(torch.zeros(1), "deepseek_v3"), c.Facts)
        one, other = torch.zeros(3, 8), torch.zeros(3, 8)
        assert c.joint(one[:, :5], one[:, 5:]).shape == (3, 8)
        assert c.joint(one[:, :5], other[:, 5:]) is None  # the same layout in another buffer
        _run_eager(torch, SHIM_CASES[shim](torch, compat, "cpu"), shim + " (traced branch)")
    finally:
        ops._is_compiling = probe
    assert len(seen) > 2, seen


@sp.parametrize("shim", list(SHIM_CASES))
def test_compile_fullgraph_host(shim):
    _compile_torch()
    torch, compat = _setup("cpu")
    _run_compiled(torch, SHIM_CASES[shim](torch, compat, "cpu"), shim)


@sp.parametrize("shim", list(SHIM_CASES))
def test_compile_fullgraph_cuda(shim):
    _compile_torch()
    torch, compat = _setup("cuda")
    _run_compiled(torch, SHIM_CASES[shim](torch, compat, "cuda"), shim)


@sp.parametrize("shim", list(SHIM_CASES))
def test_cuda_graph_replay(shim):
    torch, compat = _setup("cuda")
    _run_graph(torch, SHIM_CASES[shim](torch, compat, "cuda"), shim)


# ---- CUDA ------------------------------------------------------------------------------------------------------
def test_cuda_shims():
    """Every shim's semantics on a CUDA device, bit for bit, as on the host."""
    _setup("cuda")
    for kv_dtype in ("auto", "fp8", "fp8_ds_mla"):
        _vllm_write("cuda", kv_dtype)
    _vllm_rotary("cuda")
    _flashinfer_rope("cuda")
    _flashinfer_paged("cuda", True)
    _flashinfer_paged("cuda", False)
    _sglang("cuda")
    _aiter("cuda", False)
    if hasattr(sp._torch(), "float8_e4m3fn"):
        _aiter("cuda", True)


if __name__ == "__main__":
    sys.exit(sp.main(globals()))
