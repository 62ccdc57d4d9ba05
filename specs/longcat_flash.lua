-- LongCat-Flash (model type longcat_flash), from meituan-longcat/LongCat-Flash-Chat config.json (as republished in
-- mlx-community/LongCat-Flash-Chat-bf16; the same numbers in hf-internal-testing/LongCat-ShortCat):
--   hidden_size 6144, num_attention_heads 64, num_layers 28 (two attention blocks each),
--   q_lora_rank 1536, kv_lora_rank 512, qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim 128,
--   max_position_embeddings 131072, rope_theta 10000000, no rope scaling, rms_norm_eps 1e-5,
--   mla_scale_q_lora true, mla_scale_kv_lora true.
-- The attention is DeepSeek-V3's (HF's LongcatFlashMLA rotates with apply_rotary_pos_emb_interleave: GPT-J pairs) with
-- one difference: the LoRA outputs are scaled, q by sqrt(hidden_size / q_lora_rank) after q_b_proj and the normalized
-- c_kv by sqrt(hidden_size / kv_lora_rank) = sqrt(12). vLLM folds both scales into the norm weights when it loads
-- them (q_a_layernorm.weight *= sqrt(6144 / 1536), kv_a_layernorm.weight *= sqrt(6144 / 512), longcat_flash.py), so
-- the fused kv_a RMSNorm below takes the folded bf16 weight and the cache holds the scaled c_kv. Its engines store
-- bf16 (1152 bytes) and fp8 (576 bytes, per tensor) rows, written the vLLM way (x / k_scale, FNUZ clamped at 224);
-- the fp8 convention of SGLang's LongCat path is not verified.
return {
  name = "longcat_flash",
  description = "LongCat-Flash MLA: L = 512, R = 64, 64 heads, LoRA scales folded into the norm weights",
  kv_lora_rank = 512,
  qk_rope_head_dim = 64,
  rope = "gptj",
  cos_sin = "f32_cat",
  kv_dtypes = { "bf16", "fp8_e4m3" },
  -- The query stays bf16: the fp8 query conventions of its engines were not checked.
  q_dtypes = { "bf16" },
  fp8 = {
    scale = "div",
    saturate = { fnuz = 224 },
    matches = "vLLM concat_and_cache_mla: x / k_scale, FNUZ clamped at 224",
  },
  -- where its engines run it (vLLM, SGLang): Hopper (H800 / H20 / H200) and Blackwell data-center GPUs; no AMD
  -- deployment is known (not verified); and the host
  targets = { "sm_90", "sm_100", "sm_103", "host" },
  -- The fused kv_a RMSNorm with the kv LoRA scale folded into its bf16 weight (vLLM: weight * sqrt(12), rounded to
  -- bf16 in place): rms_norm_eps 1e-5, HF's and vLLM's two roundings.
  kv_norm = {
    weight = "bf16",
    eps = 1e-5,
    rounding = "twice",
    matches = "vLLM RMSNorm, weight folded (w * sqrt(hidden / kv_lora_rank)): w' * bf16(x * rsqrt(mean(x^2) + eps))",
  },
}
