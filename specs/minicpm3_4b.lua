-- MiniCPM3-4B, from openbmb/MiniCPM3-4B config.json:
--   hidden_size 2560, num_attention_heads 40, num_hidden_layers 62,
--   q_lora_rank 768, kv_lora_rank 256, qk_nope_head_dim 64, qk_rope_head_dim 32,
--   max_position_embeddings 32768, rope_scaling { type = "longrope", ... }.
-- Its attention rotates with rotate_half (NeoX style), and serves an unscaled fp8 cache whose rope
-- part is rounded to bf16 first, as the unfused PyTorch sequence does. In place, a NeoX pair spans
-- two 16-byte chunks of q_pe: the kernel must rotate both halves in one lane.
return {
  name = "minicpm3_4b",
  description = "MiniCPM3-4B MLA: L = 256, R = 32, 40 heads, NeoX rope",
  kv_lora_rank = 256,
  qk_rope_head_dim = 32,
  rope = "neox",
  cos_sin = "f32_split",
  fp8 = {
    scale = "none",
    rope_bf16_round = true,
  },
  q_fp8 = { scale = "mul", rope_bf16_round = true },
}
