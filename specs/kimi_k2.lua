-- Kimi-K2 (DeepSeek-V3 architecture with fewer heads), from moonshotai/Kimi-K2-Instruct config.json:
--   hidden_size 7168, num_attention_heads 64, num_hidden_layers 61,
--   q_lora_rank 1536, kv_lora_rank 512, qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim 128,
--   max_position_embeddings 131072, rope_theta 50000,
--   rope_scaling { type = "yarn", factor 32, original_max_position_embeddings 4096,
--                  beta_fast 1, beta_slow 1, mscale 1.0, mscale_all_dim 1.0 }.
-- Served the vLLM way: the cache k / k_scale (concat_and_cache_mla), the fp8 query q * (1 / q_scale), FNUZ
-- clamped at 224, padding rows skipped entirely, non-finite values sanitized before the fp8 store. Positions and
-- slots in both widths: vLLM's MLA kernels take int64 positions and slots, FlashInfer and tokenspeed int32.
return {
  name = "kimi_k2",
  description = "Kimi-K2 MLA: L = 512, R = 64, 64 heads (before TP), vLLM conventions",
  kv_lora_rank = 512,
  qk_rope_head_dim = 64,
  rope = "gptj",
  cos_sin = "f32_cat",
  fp8 = {
    scale = "div",
    saturate = { fnuz = 224 },
  },
  -- vLLM's fp8 query: the rope written in bf16, then the MLA decode's static per-tensor QuantFP8
  -- (_DecodeConcatQuantFP8: x * scale.reciprocal() in torch, scaled_fp8_quant's x * (1.0f / scale) in CUDA),
  -- clamped to +-448 (+-224 on ROCm's FNUZ).
  q_fp8 = {
    scale = "mul_recip",
    saturate = { fnuz = 224 },
    rope_bf16_round = true,
    matches = "vLLM's static QuantFP8 (scaled_fp8_quant): q * (1 / q_scale) after a bf16 rope",
  },
  -- The cache records: bf16, and the fp8 record the vLLM way (x / k_scale, FNUZ clamped at 224).
  records = {
    "bf16",
    { like = "fp8", conv = "div", segments = { { saturate = { fnuz = 224 } }, { saturate = { fnuz = 224 } } } },
  },
  negative_slot = "skip_all",
  sanitize = true,
  -- The fused kv_a RMSNorm (kv_a_layernorm: rms_norm_eps 1e-6, a bf16 weight of kv_lora_rank values): the op reads
  -- the raw kv_a projection's c_kv and caches it normalized; rms_out also writes the normalized c_kv (prefill's
  -- up-projection reads it).
  kv_norm = {
    weight = "bf16",
    eps = 1e-6,
    rounding = "twice",
    matches = "HF DeepseekV3RMSNorm and vLLM RMSNorm: weight * bf16(x * rsqrt(mean(x^2) + eps))",
  },
}
