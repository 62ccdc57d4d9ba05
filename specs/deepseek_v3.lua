-- DeepSeek-V3 and DeepSeek-R1 (same attention), from deepseek-ai/DeepSeek-V3 config.json:
--   hidden_size 7168, num_attention_heads 128, num_hidden_layers 61,
--   q_lora_rank 1536, kv_lora_rank 512, qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim 128,
--   max_position_embeddings 163840, rope_theta 10000,
--   rope_scaling { type = "yarn", factor 40, original_max_position_embeddings 4096,
--                  beta_fast 32, beta_slow 1, mscale 1.0, mscale_all_dim 1.0 }.
-- The engines build the rope with is_neox_style = False (interleaved pairs) and one float32
-- cos_sin_cache [max_pos, 64] with YaRN mscale folded in.
return {
  name = "deepseek_v3",
  description = "DeepSeek-V3 / R1 MLA: L = 512, R = 64, 128 heads (before TP)",
  kv_lora_rank = 512,
  qk_rope_head_dim = 64,
  rope = "gptj",
  cos_sin = "f32_cat",
  fp8 = { scale = "mul_recip" },
  -- The query in fp8 for fp8 attention (FlashMLA FP8, FlashInfer / TRT-LLM MLA fp8, aiter's MLA decode):
  -- per-tensor q_scale, multiplied by its reciprocal, the f32 rope quantized as it is.
  q_fp8 = { scale = "mul_recip", matches = "FlashInfer and aiter fused peers: q * (1 / q_scale)" },
  -- The cache records beside bf16 and fp8_e4m3: NVFP4 (its engines store one for V3: TensorRT-LLM, FlashInfer).
  -- The library's nvfp4 is FlashInfer's dense MLA layout (nvfp4_quantize_append_paged_mla_kv_cache); that
  -- TensorRT-LLM's bytes are the same is not verified.
  records = { "nvfp4" },
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
