-- GLM-4.7-Flash (model type glm4_moe_lite: DeepSeek-V3's MLA without DSA), from the copies of zai-org/GLM-4.7-Flash
-- config.json republished with its weights (EasyDeL/GLM-4.7-Flash, Intel/GLM-4.7-Flash-int4-AutoRound; the original
-- file itself was not read):
--   hidden_size 2048, num_attention_heads 20, num_hidden_layers 47,
--   q_lora_rank 768, kv_lora_rank 512, qk_nope_head_dim 192, qk_rope_head_dim 64, v_head_dim 256,
--   max_position_embeddings 202752, rope_theta 1000000, no rope scaling, rope_interleave true (GPT-J pairs),
--   rms_norm_eps 1e-5.
-- A 30B-A3B model, served on data-center and consumer GPUs alike, so every target stays open. Its engines (vLLM's
-- glm4_moe_lite runs DeepSeek-V2's MLA attention) store bf16 rows (1152 bytes) and fp8 rows (576 bytes, per tensor),
-- written the vLLM way: concat_and_cache_mla divides by k_scale, FNUZ clamped at 224 (that SGLang's writer rounds
-- the same way is not verified).
return {
  name = "glm47_flash",
  description = "GLM-4.7-Flash MLA: L = 512, R = 64, 20 heads, bf16 / fp8 rows",
  kv_lora_rank = 512,
  qk_rope_head_dim = 64,
  rope = "gptj",
  cos_sin = "f32_cat",
  -- where its engines (vLLM, SGLang) run it: A100 and the consumer Ampere / Ada cards (sm_80's row), Hopper,
  -- Blackwell (B200, RTX 50 / RTX PRO: sm_120), MI300X / MI355X; and the host
  targets = { "sm_80", "sm_90", "sm_100", "sm_120", "gfx942", "gfx950", "host" },
  kv_dtypes = { "bf16", "fp8_e4m3" },
  -- The query stays bf16: the fp8 query conventions of its engines were not checked.
  q_dtypes = { "bf16" },
  fp8 = {
    scale = "div",
    saturate = { fnuz = 224 },
    matches = "vLLM concat_and_cache_mla: x / k_scale, FNUZ clamped at 224",
  },
  -- The fused kv_a RMSNorm: rms_norm_eps 1e-5 (the config's), a bf16 weight of kv_lora_rank values.
  kv_norm = {
    weight = "bf16",
    eps = 1e-5,
    rounding = "twice",
    matches = "vLLM RMSNorm (the config's eps; HF's kv_a_layernorm keeps 1e-6): weight * bf16(x * rsqrt(mean(x^2) + eps))",
  },
}
