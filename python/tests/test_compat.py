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
    want = before.clone().view(32, width)
    ok = slots >= 0
    rows = kv[:T][ok]
    if kv_dtype == "auto":
        want[slots[ok]] = rows
    elif kv_dtype == "fp8":
        want[slots[ok]] = ref.e4m3_codes(torch.clamp(rows.float() / scale, -448.0, 448.0))
    else:
        want[slots[ok]] = rf.tile_rows(torch, "deepseek_v32", rows[:, :L].cpu(), rows[:, L:].cpu()).to(device)
    _eq(torch, cache.view(32, width), want, "vllm concat_and_cache_mla %s" % kv_dtype)


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


if __name__ == "__main__":
    sys.exit(sp.main(globals()))
