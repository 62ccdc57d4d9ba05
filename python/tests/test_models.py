"""Each model spec against its model: one attention layer built from random weights with the published config's
dimensions, one decode step, and the attention scores computed two ways.

    python3 python/tests/test_models.py            # plain runner (no pytest needed); ctest: python_models

(a) The Hugging Face way, in float64: the layer as the model's modeling code orders it (DeepSeek-V2/V3 family:
    q_a_proj -> q_a_layernorm -> q_b_proj, kv_a_proj_with_mqa -> split c_kv / k_pe -> kv_a_layernorm(c_kv) ->
    kv_b_proj; HF's rotary embedding, cat(freqs, freqs) with rotate_half, after HF's interleave permutation where
    the config says rope_interleave; DeepSeek-V4: one 512-wide KV head with its norm over the whole head and the
    weightless query-head norm, the rope on the last 64). The score of head h with cached token j is
    q_nope[h] . k_nope[j, h] + q_rot[h] . k_rot[j]: what the model's softmax scales.
(b) The engine way, through ropekv: the projections in bf16 (float32 accumulation, outputs rounded to bf16), the
    absorbed query (q_nope @ W_UK per head, rounded to bf16: what ropekv takes as q_nope; DeepSeek-V4: the query
    itself, normalized by ropekv), the cos/sin table the engines build for the spec's rope, the cached tokens
    written by a prefill launch (q form none) and the new token by the decode launch (q form absorbed), the fused
    kv_a RMSNorm (norm "rms") where the spec has a kv_norm, the rows read back with ropekv.ops.read. The score is
    q_out[h] . row[j].

The two differ by the bf16 (and fp8) roundings of path (b) only. The tolerance is derived from them: a rounding to
nearest changes a value x by an error uniform within half a unit in its last place, and that unit is at most 2u|x|
(u = 2^-8 for bf16, 2^-4 for e4m3), so the error has mean zero and variance at most u^2 x^2 / 3. A score's error is
then a sum of hundreds of independent terms, one per element and rounding, close to Gaussian, with variance at most
    sum over parts P (latent, rope) of  v_q(P) * rms(q_P)^2 * |k_P|^2  +  v_k(P) * rms(k_P)^2 * |q_P|^2
where v_q(P) and v_k(P) sum u^2 / 3 over the roundings each operand passes on its way (counted per model below; an
upstream rounding reaches the operand through a linear map, which keeps its size relative to the operand's rms).
The check allows 6 such standard deviations per score (TOL_SIGMAS). A wrong variant of the model (the other rope
pairing, the norm over the wrong span, a missing LoRA scale, a rotation where there is none) must fail the same
check: its largest error must exceed the same tolerance (by WRONG_MARGIN), so the check has teeth.

Every expected spec must be there: a missing one fails (test_expected_specs), never skips.
"""
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import _support as sp  # noqa: E402
from _support import parametrize  # noqa: E402

U_BF16 = 2.0 ** -8  # bf16's unit roundoff (8 significant bits, round to nearest)
U_E4M3 = 2.0 ** -4  # e4m3's (4 significant bits)
TOL_SIGMAS = 6.0
WRONG_MARGIN = 3.0  # a wrong variant must miss by at least this many tolerances


def _yarn(factor, original_max_position_embeddings, beta_fast=32, beta_slow=1, mscale=None, mscale_all_dim=None):
    return dict(type="yarn", factor=factor, original_max_position_embeddings=original_max_position_embeddings,
                beta_fast=beta_fast, beta_slow=beta_slow, mscale=mscale, mscale_all_dim=mscale_all_dim)


_MINICPM3_FACTORS = [1.0591234137867171, 1.1241891283591912, 1.2596935748670968, 1.5380380402321725,
                     2.093982484148734, 3.1446935121267696, 4.937952647693647, 7.524541999994549,
                     10.475458000005451, 13.062047352306353, 14.85530648787323, 15.906017515851266,
                     16.461961959767827, 16.740306425132907, 16.87581087164081, 16.940876586213285]

# The models, HF-style configurations as data (the config.json keys), one per spec, each citing its source. Keys of
# the test's own: arch ("mla": DeepSeek-V2/V3's attention, "v4": DeepSeek-V4's head), rope ("interleave": HF's
# apply_rotary_pos_emb_interleave, GPT-J pairs; "rotate_half": NeoX halves; "identity": rope slots never rotated;
# None: no rope part), lora_scale (LongCat's mla_scale_q_lora / mla_scale_kv_lora), and expect: what the spec must say
# (kv_lora_rank as ropekv's L, qk_rope_head_dim as R, its rope). "not verified" marks numbers no config confirmed.
MODELS = {
    # deepseek-ai/DeepSeek-V3 config.json (R1 the same attention)
    "deepseek_v3": dict(arch="mla", hidden_size=7168, num_attention_heads=128, q_lora_rank=1536, kv_lora_rank=512,
                        qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, rope_theta=10000.0,
                        rope_scaling=_yarn(40, 4096, 32, 1, 1.0, 1.0), rms_norm_eps=1e-6, rope="interleave",
                        expect=dict(L=512, R=64, rope="gptj")),
    # moonshotai/Kimi-K2-Instruct config.json
    "kimi_k2": dict(arch="mla", hidden_size=7168, num_attention_heads=64, q_lora_rank=1536, kv_lora_rank=512,
                    qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, rope_theta=50000.0,
                    rope_scaling=_yarn(32, 4096, 1, 1, 1.0, 1.0), rms_norm_eps=1e-6, rope="interleave",
                    expect=dict(L=512, R=64, rope="gptj")),
    # deepseek-ai/DeepSeek-V2-Lite config.json: no query compression (q_lora_rank null: q_proj)
    "deepseek_v2_lite": dict(arch="mla", hidden_size=2048, num_attention_heads=16, q_lora_rank=None,
                             kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
                             rope_theta=10000.0, rope_scaling=_yarn(40, 4096, 32, 1, 0.707, 0.707),
                             rms_norm_eps=1e-6, rope="interleave", expect=dict(L=512, R=64, rope="gptj")),
    # openbmb/MiniCPM3-4B config.json: longrope (short_factor = long_factor), rope_theta the default 10000;
    # modeling_minicpm.py rotates with rotate_half (no interleave permutation)
    "minicpm3_4b": dict(arch="mla", hidden_size=2560, num_attention_heads=40, q_lora_rank=768, kv_lora_rank=256,
                        qk_nope_head_dim=64, qk_rope_head_dim=32, v_head_dim=64, rope_theta=10000.0,
                        rope_scaling=dict(type="longrope", short_factor=_MINICPM3_FACTORS,
                                          long_factor=_MINICPM3_FACTORS, original_max_position_embeddings=32768),
                        max_position_embeddings=32768, rms_norm_eps=1e-5, rope="rotate_half",
                        expect=dict(L=256, R=32, rope="neox")),
    # deepseek-ai/DeepSeek-V3.2-Exp config.json: DeepSeek-V3's attention (+ the indexer, not this op)
    "deepseek_v32": dict(arch="mla", hidden_size=7168, num_attention_heads=128, q_lora_rank=1536, kv_lora_rank=512,
                         qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, rope_theta=10000.0,
                         rope_scaling=_yarn(40, 4096, 32, 1, 1.0, 1.0), rms_norm_eps=1e-6, rope="interleave",
                         expect=dict(L=512, R=64, rope="gptj")),
    # deepseek-ai/DeepSeek-V4-Flash config.json, as its trimmed copies republish it (Pinaster/DeepSeek-V4-Flash-FP8-
    # 4layer; NeMo AutoModel's DeepseekV4Config defaults agree): head_dim 512 (448 NoPE + 64 rope at the end),
    # one KV head; the compressed layers' table (compress_rope_theta 160000) is another launch's cos_sin
    "deepseek_v4_flash": dict(arch="v4", hidden_size=4096, num_attention_heads=64, q_lora_rank=1024, head_dim=512,
                              qk_rope_head_dim=64, rope_theta=10000.0, rope_scaling=_yarn(16, 65536, 32, 1),
                              rms_norm_eps=1e-6, rope="interleave", expect=dict(L=448, R=64, rope="gptj")),
    # deepseek-ai/DeepSeek-V4-Pro config.json (as republished verbatim): hidden 7168, 128 heads, q_lora_rank 1536
    "deepseek_v4_pro": dict(arch="v4", hidden_size=7168, num_attention_heads=128, q_lora_rank=1536, head_dim=512,
                            qk_rope_head_dim=64, rope_theta=10000.0, rope_scaling=_yarn(16, 65536, 32, 1),
                            rms_norm_eps=1e-6, rope="interleave", expect=dict(L=448, R=64, rope="gptj")),
    # deepseek-ai/DeepSeek-V4.1-Flash config.json (as republished verbatim; SGLang's configs/deepseek_v41.py): V4's
    # head without the per-head query norm (q_head_norm False), every norm's eps 1e-20
    "deepseek_v41": dict(arch="v4", hidden_size=5120, num_attention_heads=64, q_lora_rank=1280, head_dim=512,
                         qk_rope_head_dim=64, rope_theta=10000.0, rope_scaling=_yarn(16, 65536, 32, 1),
                         rms_norm_eps=1e-20, rope="interleave", q_head_norm=False,
                         expect=dict(L=448, R=64, rope="gptj")),
    # zai-org/GLM-5-FP8 config.json (glm_moe_dsa; GLM-5.1 / 5.2 the same attention)
    "glm5": dict(arch="mla", hidden_size=6144, num_attention_heads=64, q_lora_rank=2048, kv_lora_rank=512,
                 qk_nope_head_dim=192, qk_rope_head_dim=64, v_head_dim=256, rope_theta=1000000.0, rope_scaling=None,
                 rms_norm_eps=1e-5, rope="interleave", expect=dict(L=512, R=64, rope="gptj")),
    # zai-org/GLM-4.7-Flash config.json (glm4_moe_lite), as EasyDeL/GLM-4.7-Flash and Intel/GLM-4.7-Flash-int4-
    # AutoRound republish it
    "glm47_flash": dict(arch="mla", hidden_size=2048, num_attention_heads=20, q_lora_rank=768, kv_lora_rank=512,
                        qk_nope_head_dim=192, qk_rope_head_dim=64, v_head_dim=256, rope_theta=1000000.0,
                        rope_scaling=None, rms_norm_eps=1e-5, rope="interleave", expect=dict(L=512, R=64, rope="gptj")),
    # meituan-longcat/LongCat-Flash-Chat config.json (as mlx-community/LongCat-Flash-Chat-bf16 republishes it):
    # mla_scale_q_lora and mla_scale_kv_lora true
    "longcat_flash": dict(arch="mla", hidden_size=6144, num_attention_heads=64, q_lora_rank=1536, kv_lora_rank=512,
                          qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, rope_theta=10000000.0,
                          rope_scaling=None, rms_norm_eps=1e-5, rope="interleave", lora_scale=True,
                          expect=dict(L=512, R=64, rope="gptj")),
    # GLM-5.3-Flash (glm5_next): NoPE MLA (qk_rope_head_dim 0), from transformers' configuration_glm5_next.py
    # (its defaults are zai-org/GLM-5.3-Flash's; the released config.json itself was not found)
    "glm53_flash": dict(arch="mla", hidden_size=4096, num_attention_heads=64, q_lora_rank=1536, kv_lora_rank=512,
                        qk_nope_head_dim=256, qk_rope_head_dim=0, v_head_dim=256, rope_theta=None, rope_scaling=None,
                        rms_norm_eps=1e-5, rope=None, expect=dict(L=512, R=0, rope="none")),
    # Kimi-K3 config.json (as republished verbatim): Kimi-K2's attention with 96 heads, 64 rope slots never rotated
    # (transformers' modular_kimi_k3.py: "no RoPE applied"); rms_norm_eps 1e-5 there, but its kv_a_layernorm is built
    # with 1e-6 (the reference modeling), which the spec and this reference take
    "kimi_k3": dict(arch="mla", hidden_size=7168, num_attention_heads=96, q_lora_rank=1536, kv_lora_rank=512,
                    qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, rope_theta=None, rope_scaling=None,
                    rms_norm_eps=1e-6, rope="identity", expect=dict(L=512, R=64, rope="none")),
}
EXPECTED_SPECS = tuple(MODELS)

# (spec, cache row): bf16 for every model; the fp8 cases compare the same scores with a looser bound (the latent's
# e4m3 rounding), the tile row (fp8_tile) and a per-tensor fp8 row
CASES = [(s, "bf16") for s in MODELS] + [("glm5", "fp8_tile"), ("deepseek_v32", "fp8_tile"),
                                         ("glm47_flash", "fp8_e4m3"), ("kimi_k2", "fp8_e4m3")]

C_TOKENS = 4  # cached tokens before the decode step
KV_GAIN_LATENT, KV_GAIN_ROPE = 3.0, 6.0
MAX_POS = 4096
SEED = 1234


def _torch():
    return sp._torch()


def _ops():
    torch = sp._torch()
    import ropekv.ops
    ropekv.ops.use_context(sp.context("host"))
    return torch, ropekv.ops


def _require(spec):
    """Fails (never skips) when a spec this test expects is not in the library."""
    ok, why = sp.context("host").query(spec)
    assert ok or "ROPEKV_ERR_NO_SPEC" not in why, (
        "spec %r is not built in: this test expects the specs %s (%s)" % (spec, ", ".join(EXPECTED_SPECS), why))
    return ok, why


def _dims(m):
    """(heads, L, R, nope) of a model: the cached latent L and rope part R as ropekv sees them."""
    if m["arch"] == "v4":
        return m["num_attention_heads"], m["head_dim"] - m["qk_rope_head_dim"], m["qk_rope_head_dim"], None
    return m["num_attention_heads"], m["kv_lora_rank"], m["qk_rope_head_dim"], m["qk_nope_head_dim"]


# ---- the rotary tables ---------------------------------------------------------------------------------------------
def _inv_freq(torch, m):
    """(inv_freq [R/2] float64, attention factor): HF's rope initialisation for the config (default, yarn as
    _compute_yarn_parameters computes it, MiniCPM3's longrope); identity and R = 0: None."""
    R = m["qk_rope_head_dim"]
    if m["rope"] in (None, "identity"):
        return None, 1.0
    base = m["rope_theta"]
    exps = torch.arange(0, R, 2, dtype=torch.float64) / R
    pos_freqs = base ** exps
    rs = m["rope_scaling"]
    if rs is None:
        return 1.0 / pos_freqs, 1.0
    if rs["type"] == "longrope":  # modeling_minicpm.py MiniCPMLongRoPE: short factors within the original length
        ext = torch.tensor(rs["short_factor"], dtype=torch.float64)
        scale = m["max_position_embeddings"] / rs["original_max_position_embeddings"]
        orig = rs["original_max_position_embeddings"]
        factor = 1.0 if scale <= 1.0 else math.sqrt(1 + math.log(scale) / math.log(orig))
        return 1.0 / (ext * pos_freqs), factor
    factor, orig = rs["factor"], rs["original_max_position_embeddings"]

    def corr_dim(rot):
        return (R * math.log(orig / (rot * 2 * math.pi))) / (2 * math.log(base))

    low = max(math.floor(corr_dim(rs["beta_fast"])), 0)
    high = min(math.ceil(corr_dim(rs["beta_slow"])), R - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(R // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
    extra = 1.0 - ramp
    inv = (1.0 / (factor * pos_freqs)) * (1 - extra) + (1.0 / pos_freqs) * extra

    def get_mscale(scale, ms=1.0):
        return 1.0 if scale <= 1 else 0.1 * ms * math.log(scale) + 1.0

    if rs.get("mscale") and rs.get("mscale_all_dim"):
        att = get_mscale(factor, rs["mscale"]) / get_mscale(factor, rs["mscale_all_dim"])
    else:
        att = get_mscale(factor)
    return inv, att


def engine_table(torch, m, spec_cos_sin):
    """The cos/sin table(s) an engine builds for the spec: angles pos * inv_freq in float32 (vLLM's
    RotaryEmbedding), the attention factor folded in (DeepseekScalingRotaryEmbedding's mscale), laid out as the spec
    says: f32_cat one float32 [MAX_POS, R] (cos | sin), f32_split two float32 [MAX_POS, R/2], bf16_split the same in
    bf16. Returns (cos_sin, sin) (sin None for f32_cat); (None, None) where no table is read."""
    inv, att = _inv_freq(torch, m)
    if inv is None:
        return None, None
    t = torch.arange(MAX_POS, dtype=torch.float32)
    ang = t[:, None] * inv.float()[None, :]
    c, s = ang.cos() * att, ang.sin() * att
    if spec_cos_sin == "f32_cat":
        return torch.cat([c, s], dim=1).contiguous(), None
    if spec_cos_sin == "f32_split":
        return c.contiguous(), s.contiguous()
    return c.to(torch.bfloat16).contiguous(), s.to(torch.bfloat16).contiguous()


# ---- the layer -----------------------------------------------------------------------------------------------------
def make_layer(torch, m, seed):
    """Random weights with the config's dimensions, float32 rounded to bf16 (scaled by 1 / sqrt(fan_in), so every
    activation is of order one), the norm weights near one; the hidden states of the C_TOKENS + 1 tokens and their
    positions."""
    g = torch.Generator().manual_seed(seed)
    bf = torch.bfloat16
    H, L, R, nope = _dims(m)
    hid = m["hidden_size"]

    def lin(out_f, in_f, gains=None):
        v = torch.randn(out_f, in_f, generator=g) / math.sqrt(in_f)
        if gains is not None:  # per output row
            v = v * gains[:, None]
        return v.to(bf)

    # the KV projection's latent rows with gain KV_GAIN_LATENT and its rope rows with KV_GAIN_ROPE, as a trained
    # model's are not of unit size: so that the norm, and the span it covers, change the scores
    kv_gains = torch.cat([torch.full((L,), KV_GAIN_LATENT), torch.full((R,), KV_GAIN_ROPE)])

    def norm_w(n):
        return (1.0 + 0.25 * torch.randn(n, generator=g)).to(bf)

    w = {}
    ql = m["q_lora_rank"]
    qdim = m["head_dim"] if m["arch"] == "v4" else nope + R
    if ql:
        w["q_a_proj"], w["q_a_layernorm"], w["q_b_proj"] = lin(ql, hid), norm_w(ql), lin(H * qdim, ql)
    else:
        w["q_proj"] = lin(H * qdim, hid)
    if m["arch"] == "v4":
        w["wkv"], w["kv_norm"] = lin(L + R, hid, kv_gains), norm_w(L + R)
    else:
        w["kv_a_proj_with_mqa"], w["kv_a_layernorm"] = lin(L + R, hid, kv_gains), norm_w(L)
        # kv_b_proj's key rows only ([H, nope, L] of its [H * (nope + v_head_dim), L]): the values take no part
        w["w_uk"] = (torch.randn(H, nope, L, generator=g) / math.sqrt(L)).to(bf)
    N = C_TOKENS + 1
    x = torch.randn(N, hid, generator=g).to(bf)
    p0 = int(torch.randint(0, MAX_POS - N, (1,), generator=g))
    positions = torch.arange(p0, p0 + N, dtype=torch.int64)
    return w, x, positions


def _rms_f64(x, eps):
    """x * rsqrt(mean(x^2) + eps) over the last dimension, in float64: HF's RMSNorm without its weight and roundings."""
    return x * _rsqrt_mean_sq(x, eps)


def _rsqrt_mean_sq(x, eps):
    return 1.0 / (x.pow(2).mean(-1, keepdim=True) + eps).sqrt()


def _hf_rope(torch, q, k, pos, m, style):
    """HF's rotation of q [..., R] and k [..., R] at positions pos (float64): style "interleave"
    (apply_rotary_pos_emb_interleave: the pairs (2i, 2i + 1) regrouped as halves, then rotate_half), "rotate_half"
    (apply_rotary_pos_emb), "identity" (none); the table cat(freqs, freqs) with the attention factor."""
    if style == "identity":
        return q, k
    inv, att = _inv_freq(torch, m)
    if inv is None:  # a wrong variant rotating a model without a table: Kimi-K2's default-theta table
        inv = 1.0 / (50000.0 ** (torch.arange(0, q.shape[-1], 2, dtype=torch.float64) / q.shape[-1]))
    freqs = pos.double()[:, None] * inv[None, :]
    emb = torch.cat([freqs, freqs], dim=-1)
    cos, sin = emb.cos() * att, emb.sin() * att

    def perm(t):
        R = t.shape[-1]
        return t.unflatten(-1, (R // 2, 2)).transpose(-1, -2).reshape(t.shape)

    def rot_half(t):
        h = t.shape[-1] // 2
        return torch.cat([-t[..., h:], t[..., :h]], dim=-1)

    if style == "interleave":
        q, k = perm(q), perm(k)
    # q [H, R]: the decode token's heads, at the last position; k [N, R]: every token's, at its own
    return q * cos[-1:] + rot_half(q) * sin[-1:], k * cos + rot_half(k) * sin


def hf_scores(torch, m, w, x, pos, wrong=None):
    """The scores of the last token's query with every token's key, [H, N], float64, the Hugging Face way. wrong:
    a deliberately wrong variant (rope pairing, norm span, ...) for the teeth check."""
    d = torch.float64
    H, L, R, nope = _dims(m)
    eps = m["rms_norm_eps"]
    xf = x.to(d)

    def rms(v, weight):
        return _rms_f64(v, eps) * weight.to(d)

    if "_hf_q" not in w:  # the projections, once per layer (the wrong variants change what follows them)
        if m["q_lora_rank"]:
            cq = rms(xf[-1:] @ w["q_a_proj"].to(d).T, w["q_a_layernorm"])
            w["_hf_q"] = (cq @ w["q_b_proj"].to(d).T).view(H, -1)  # the decode token's heads
        else:
            w["_hf_q"] = (xf[-1:] @ w["q_proj"].to(d).T).view(H, -1)
        w["_hf_kv"] = xf @ (w["wkv"] if m["arch"] == "v4" else w["kv_a_proj_with_mqa"]).to(d).T
    q = w["_hf_q"]
    style = m["rope"]
    if wrong == "rope_pairs":
        style = {"interleave": "rotate_half", "rotate_half": "interleave"}[style]
    if wrong == "rotated":
        style = "interleave"
    if m["arch"] == "v4":
        if m.get("q_head_norm", True):
            q = q * _rsqrt_mean_sq(q, eps)  # the weightless per-head norm (V4; V4.1 has none)
        kv = w["_hf_kv"]
        if wrong == "norm_span":  # the norm over the latent alone (DeepSeek-V3's span)
            kv = torch.cat([rms(kv[:, :L], w["kv_norm"][:L]), kv[:, L:] * w["kv_norm"][L:].to(d)], dim=-1)
        else:
            kv = rms(kv, w["kv_norm"])
        qr, kr = _hf_rope(torch, q[:, L:], kv[:, L:], pos, m, style)
        return q[:, :L] @ kv[:, :L].T + qr @ kr.T
    lora_q = lora_kv = 1.0
    if m.get("lora_scale") and wrong != "no_lora_scale":  # LongcatFlashMLA: the LoRA outputs scaled
        lora_q = math.sqrt(m["hidden_size"] / m["q_lora_rank"])
        lora_kv = math.sqrt(m["hidden_size"] / m["kv_lora_rank"])
    q = q * lora_q
    q_nope, q_pe = q[:, :nope], q[:, nope:]
    ckv = w["_hf_kv"]
    c, k_pe = ckv[:, :L], ckv[:, L:]
    if wrong == "norm_span":  # the norm over c_kv and k_pe together (DeepSeek-V4's span), k_pe's weight one
        full = _rms_f64(ckv, eps)
        c, k_pe = full[:, :L] * w["kv_a_layernorm"].to(d), full[:, L:]
    elif wrong == "no_norm":
        c = c * w["kv_a_layernorm"].to(d)
    else:
        c = rms(c, w["kv_a_layernorm"])
    c = c * lora_kv
    k_nope = torch.einsum("nl,hdl->nhd", c, w["w_uk"].to(d))  # kv_b_proj's key part, per head
    s = torch.einsum("hd,nhd->hn", q_nope, k_nope)
    if R:
        qr, kr = _hf_rope(torch, q_pe, k_pe, pos, m, style)
        s = s + qr @ kr.T
    return s


def engine_scores(torch, ops, m, spec, kv, w, x, pos):
    """The same scores from ropekv's outputs ([H, N] float64), with the operands (q_out [H, W], rows [N, W]) for the
    tolerance, and the spec's kernel info."""
    bf, f32 = torch.bfloat16, torch.float32
    H, L, R, nope = _dims(m)
    N = x.shape[0]
    eps = m["rms_norm_eps"]
    ctx = sp.context("host")
    has_norm = ctx.query(spec, norm="rms")[0]
    info = ctx.kernel(spec, kv=kv, q="absorbed", norm="rms" if has_norm else "none").info

    def mm(a, b):  # a bf16 GEMM: float32 accumulation, the output rounded to bf16
        return (a.float() @ b.float().T).to(bf)

    def hf_norm_bf16(v, weight):  # HF's / vLLM's RMSNorm in bf16: weight * bf16(v * rsqrt(mean(v^2) + eps))
        vf = v.float()
        return ((vf * torch.rsqrt(vf.pow(2).mean(-1, keepdim=True) + eps)).to(bf) * weight).to(bf)

    qa_w = w.get("q_a_layernorm")
    kv_w = w.get("kv_a_layernorm", w.get("kv_norm"))
    if m.get("lora_scale"):  # vLLM's load_weights folds the LoRA scales into the norm weights (in bf16)
        qa_w = (qa_w.float() * math.sqrt(m["hidden_size"] / m["q_lora_rank"])).to(bf)
        kv_w = (kv_w.float() * math.sqrt(m["hidden_size"] / m["kv_lora_rank"])).to(bf)
    if m["q_lora_rank"]:
        q = mm(hf_norm_bf16(mm(x, w["q_a_proj"]), qa_w), w["q_b_proj"])
    else:
        q = mm(x, w["q_proj"])
    q = q[-1:].view(1, H, -1)
    if m["arch"] == "v4":
        q_nope, q_pe = q[..., :L], q[..., L:]  # ropekv normalizes the raw query itself (the spec's q_norm)
        proj = mm(x, w["wkv"])
    else:
        # the absorbed query: q_nope @ W_UK per head, a bf16 batched GEMM
        q_nope = torch.einsum("thd,hdl->thl", q[..., :nope].float(), w["w_uk"].float()).to(bf).contiguous()
        q_pe = q[..., nope:]
        proj = mm(x, w["kv_a_proj_with_mqa"])  # [N, L + R]: c_kv (raw) | k_pe
    k_nope, k_pe = proj[:, :L], proj[:, L:]
    norm = "rms" if has_norm else "none"
    if not has_norm:  # the engine's own kv_a_layernorm before the write
        k_nope = hf_norm_bf16(k_nope, kv_w)
    cos_sin, sin = engine_table(torch, m, info.cos_sin)
    rows = 2 * N + 3
    slots = torch.randperm(rows, generator=torch.Generator().manual_seed(7))[:N].to(torch.int64)
    if kv == "bf16":
        cache = torch.zeros(rows, L + R, dtype=bf)
    else:
        cache = torch.zeros(rows, info.row_bytes, dtype=torch.uint8)
    k_scale = None
    if kv == "fp8_e4m3":  # a per-tensor scale that maps the latent's largest value to about 224
        k_scale = torch.tensor([float(proj.float().abs().max()) / 224.0], dtype=f32)
    common = dict(kv=kv, kv_cache=cache, cos_sin=cos_sin, sin=sin, k_scale=k_scale, norm=norm,
                  norm_weight=kv_w if has_norm else None)
    # the prefill of the cached tokens (q form none), then the decode token (q form absorbed)
    ops.write(spec, k_nope=k_nope[:C_TOKENS], k_pe=k_pe[:C_TOKENS], positions=pos[:C_TOKENS].clone(),
              slots=slots[:C_TOKENS].clone(), **common)
    q_out = torch.zeros(1, H, L + R, dtype=bf)
    ops.write(spec, q_nope=q_nope, q_pe=q_pe, q_out=q_out, k_nope=k_nope[C_TOKENS:], k_pe=k_pe[C_TOKENS:],
              positions=pos[C_TOKENS:].clone(), slots=slots[C_TOKENS:].clone(), **common)
    out = ops.read(spec, kv=kv, kv_cache=cache, slots=slots, k_scale=k_scale,
                   out=torch.zeros(N, L + R, dtype=bf))
    qo, ro = q_out[0].double(), out.double()
    return qo @ ro.T, qo, ro, info


def _roundings(m, kv, info):
    """(v_q, v_k) per part, {"latent": .., "rope": ..}: the sum of u^2 / 3 over the roundings each operand of the engine
    path passes (see the module's docstring)."""
    b = U_BF16 ** 2 / 3
    e = U_E4M3 ** 2 / 3
    lora = 1 if m.get("lora_scale") else 0  # the folded weight's bf16 rounding
    if m["arch"] == "v4":
        q_up = 3 + 1  # q_a_proj, q_a_layernorm (two), q_b_proj
        q_lat = q_up + 1  # the weightless norm's bf16(x * r)
        q_rope = q_up + 1  # the rotation's bf16 output
        k_lat = 1 + 2  # wkv, kv_norm (two)
        k_rope = 1 + 2 + 1  # and the rotation's output
    else:
        q_up = (3 + 1 + lora) if m["q_lora_rank"] else 1
        q_lat = q_up + 1  # the absorbed BMM's bf16 output
        q_rope = q_up + 1  # the rotation's output
        k_lat = 1 + 2 + lora  # kv_a_proj, the norm (two roundings), the folded weight
        k_rope = 1 + 1  # kv_a_proj, the rotation's output
    if info.cos_sin == "bf16_split":  # the table's values themselves rounded to bf16
        q_rope, k_rope = q_rope + 1, k_rope + 1
    v_k_lat = k_lat * b + (e if kv in ("fp8_tile", "fp8_e4m3") else 0.0)
    v_k_rope = k_rope * b + (e if kv == "fp8_e4m3" else 0.0)
    return dict(latent=q_lat * b, rope=q_rope * b), dict(latent=v_k_lat, rope=v_k_rope)


def tolerance(torch, qo, ro, L, v_q, v_k):
    """The per-score bound [H, N]: TOL_SIGMAS standard deviations of the rounding error (module docstring)."""
    var = torch.zeros(qo.shape[0], ro.shape[0], dtype=torch.float64)
    for part, sl in (("latent", slice(0, L)), ("rope", slice(L, None))):
        q, k = qo[:, sl], ro[:, sl]
        if q.shape[1] == 0:
            continue
        q_rms2 = q.pow(2).mean(1, keepdim=True)  # [H, 1]
        k_rms2 = k.pow(2).mean(1)[None, :]  # [1, N]
        q_n2 = q.pow(2).sum(1, keepdim=True)
        k_n2 = k.pow(2).sum(1)[None, :]
        var = var + v_q[part] * q_rms2 * k_n2 + v_k[part] * k_rms2 * q_n2
    return TOL_SIGMAS * var.sqrt()


def _wrong_variants(m):
    """The deliberately wrong variants of a model that its check must catch."""
    out = []
    if m["rope"] in ("interleave", "rotate_half"):
        out.append("rope_pairs")
    if m["rope"] == "identity":
        out.append("rotated")
    out.append("norm_span" if m["qk_rope_head_dim"] and m["arch"] in ("mla", "v4") else "no_norm")
    if m.get("lora_scale"):
        out.append("no_lora_scale")
    return out


# ---- the tests -------------------------------------------------------------------------------------------------------
def test_expected_specs():
    """Every spec this test has a model for is in the library (a missing one fails here, naming them all)."""
    _torch()
    missing = [s for s in EXPECTED_SPECS if "ROPEKV_ERR_NO_SPEC" in sp.context("host").query(s)[1]]
    assert not missing, "specs missing from the library: %s (this test expects: %s)" % (
        ", ".join(missing), ", ".join(EXPECTED_SPECS))


@parametrize("spec", list(MODELS))
def test_spec_matches_config(spec):
    """The spec's L, R and rope are the config's (kv_lora_rank, or head_dim - qk_rope_head_dim for DeepSeek-V4;
    qk_rope_head_dim; the rope's pairing, or none), and its fused norms' eps is the config's rms_norm_eps."""
    _torch()
    _require(spec)
    m = MODELS[spec]
    ctx = sp.context("host")
    info = ctx.kernel(spec, kv="bf16", q="absorbed").info
    H, L, R, nope = _dims(m)
    got = dict(L=info.L, R=info.R, rope=info.rope)
    assert got == m["expect"] == dict(L=L, R=R, rope=m["expect"]["rope"]), (spec, got, m["expect"])
    if ctx.query(spec, norm="rms")[0]:
        ni = ctx.kernel(spec, kv="bf16", q="absorbed", norm="rms").info
        assert abs(ni.norm_eps - m["rms_norm_eps"]) <= 1e-6 * m["rms_norm_eps"], (spec, ni.norm_eps)
        assert ni.norm_over == ("head" if m["arch"] == "v4" else "latent"), (spec, ni.norm_over)
        if m["arch"] == "v4" and m.get("q_head_norm", True):
            assert ni.q_norm == "rms" and abs(ni.q_norm_eps - m["rms_norm_eps"]) <= 1e-6 * m["rms_norm_eps"], ni
        elif m["arch"] == "v4":
            assert ni.q_norm == "none", ni


@parametrize("spec,kv", CASES)
def test_decode_scores(spec, kv):
    """One decode step: the scores from ropekv's q_out and read-back rows agree with the HF way within the
    rounding-derived tolerance; each wrong variant misses it by WRONG_MARGIN tolerances or more."""
    torch, ops = _ops()
    _require(spec)
    m = MODELS[spec]
    w, x, pos = make_layer(torch, m, SEED + sorted(MODELS).index(spec))
    got, qo, ro, info = engine_scores(torch, ops, m, spec, kv, w, x, pos)
    want = hf_scores(torch, m, w, x, pos)
    v_q, v_k = _roundings(m, kv, info)
    tol = tolerance(torch, qo, ro, info.L, v_q, v_k)
    err = (got - want).abs()
    ratio = float((err / tol).max())
    scale = float(want.abs().max())
    print("  %s %s: scores up to %.3g, max error %.3g, max error / tolerance %.3f (tolerance %.3g..%.3g)" % (
        spec, kv, scale, float(err.max()), ratio, float(tol.min()), float(tol.max())))
    assert ratio <= 1.0, "%s %s: a score misses the HF way by %.3f tolerances" % (spec, kv, ratio)
    for wrong in _wrong_variants(m):
        werr = (got - hf_scores(torch, m, w, x, pos, wrong=wrong)).abs()
        wratio = float((werr / tol).max())
        print("    wrong variant %s: max error / tolerance %.1f" % (wrong, wratio))
        assert wratio >= WRONG_MARGIN, "%s %s: the wrong variant %s passes the check (%.2f tolerances)" % (
            spec, kv, wrong, wratio)


if __name__ == "__main__":
    sys.exit(sp.main(globals()))
