-- DeepSeek-V2-Lite, from deepseek-ai/DeepSeek-V2-Lite config.json:
--   hidden_size 2048, num_attention_heads 16, num_hidden_layers 27,
--   q_lora_rank null (no query compression), kv_lora_rank 512,
--   qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim 128,
--   max_position_embeddings 163840, rope_theta 10000,
--   rope_scaling { type = "yarn", factor 40, original_max_position_embeddings 4096,
--                  beta_fast 32, beta_slow 1, mscale 0.707, mscale_all_dim 0.707 }.
-- A small model for smaller GPUs, with aiter-style separate bf16 cos / sin tables and x * k_scale.
return {
  name = "deepseek_v2_lite",
  description = "DeepSeek-V2-Lite MLA: L = 512, R = 64, 16 heads, bf16 cos/sin tables",
  kv_lora_rank = 512,
  qk_rope_head_dim = 64,
  rope = "gptj",
  cos_sin = "bf16_split",
  fp8 = { scale = "mul" },
}
