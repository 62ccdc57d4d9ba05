-- Kimi-K3, from its config.json as republished verbatim (hidden_size 7168, num_attention_heads 96, q_lora_rank 1536,
-- kv_lora_rank 512, qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim 128, rms_norm_eps 1e-5, mla_use_nope
-- true; no rope theta) and transformers' modular_kimi_k3.py ("no RoPE applied": the 64 rope slots pass through):
--   rope "none" copies k_pe and q_pe as they are, reads no positions and no cos/sin tables (the engines feed
--   identity tables today: vllm #57452, TensorRT-LLM #18159); 96 query heads (12 per rank at TP8); MLA in 24 of
--   its 93 layers (4, 8, ..., 92 and 93).
-- Its engines store bf16 (1152 bytes) and fp8 (576 bytes, per tensor) rows. Served the vLLM way, as kimi_k2: the
-- cache k / k_scale (concat_and_cache_mla), FNUZ clamped at 224, padding rows skipped entirely, non-finite values
-- sanitized before the store, the fp8 query q * (1 / q_scale); that Kimi-K3's engines keep Kimi-K2's conventions is
-- not verified.
return {
  name = "kimi_k3",
  description = "Kimi-K3 MLA: L = 512, R = 64 unrotated (rope none), 96 heads (before TP), vLLM conventions",
  kv_lora_rank = 512,
  qk_rope_head_dim = 64,
  rope = "none",
  kv_dtypes = { "bf16", "fp8_e4m3" },
  fp8 = {
    scale = "div",
    saturate = { fnuz = 224 },
    matches = "vLLM concat_and_cache_mla: x / k_scale, FNUZ clamped at 224",
  },
  q_fp8 = {
    scale = "mul_recip",
    saturate = { fnuz = 224 },
    rope_bf16_round = true,
    matches = "vLLM's static QuantFP8 (scaled_fp8_quant): q * (1 / q_scale)",
  },
  -- The rows its engines serve it on: vLLM and TensorRT-LLM on Hopper and Blackwell data-center GPUs, vLLM and aiter
  -- on MI300X / MI355X (aiter reports Kimi-K3 at 12 heads a rank on MI355X), and the host for the tests.
  -- test_matrix compiles its kernels for every row all the same.
  targets = { "sm_90", "sm_100", "sm_103", "gfx942", "gfx950", "host" },
  negative_slot = "skip_all",
  sanitize = true,
  -- The fused kv_a RMSNorm: eps 1e-6, as the reference modeling builds kv_a_layernorm whatever the config's
  -- rms_norm_eps (1e-5) says; a bf16 weight of kv_lora_rank values (the weight's dtype not verified).
  kv_norm = {
    weight = "bf16",
    eps = 1e-6,
    rounding = "twice",
    matches = "the reference modeling's kv_a_layernorm (eps 1e-6): weight * bf16(x * rsqrt(mean(x^2) + eps))",
  },
}
