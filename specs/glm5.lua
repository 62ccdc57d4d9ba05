-- GLM-5 / GLM-5.1 / GLM-5.2 (model type glm_moe_dsa), from zai-org/GLM-5-FP8 config.json (the same attention numbers
-- in amd/GLM-5-MXFP4's and GLM-5.1's copies):
--   hidden_size 6144, num_attention_heads 64, num_hidden_layers 78,
--   q_lora_rank 2048, kv_lora_rank 512, qk_nope_head_dim 192, qk_rope_head_dim 64, v_head_dim 256,
--   max_position_embeddings 202752, rope_parameters { rope_theta 1000000, rope_type "default" } (no scaling),
--   rope_interleave true (GPT-J pairs), rms_norm_eps 1e-5; the DSA indexer (index_n_heads 32, index_head_dim 128,
--   index_topk 2048) rotates its own keys (indexer_rope_interleave), which is not this op.
-- DeepSeek Sparse Attention as DeepSeek-V3.2's (specs/deepseek_v32.lua): the engines store the 656-byte tile row
-- (vLLM's fp8_ds_mla: 4 tiles of 128 e4m3 values, float32 scales max(amax / 448, FLT_MIN) as vLLM's writer stores
-- them, 224 on FNUZ; 64 bf16 rope values) or bf16 rows, paged, with int64 slot mappings. The tile row is the
-- fp8_ds_mla record byte for byte (deepseek_v32 lists that name as a choice of its own; here the row is taken once).
-- GLM-5.2's NVFP4 row (nvfp4_ds_mla, 432 bytes, local-inference-lab/vllm #82; specs/records.lua says how it was
-- checked) is a record choice of its own; the 368-byte one (#95, a per-token scale) has no kernels yet.
return {
  name = "glm5",
  description = "GLM-5 MLA (DSA): L = 512, R = 64, 64 heads, 656-byte tile-scaled fp8 rows or bf16",
  kv_lora_rank = 512,
  qk_rope_head_dim = 64,
  rope = "gptj",
  cos_sin = "f32_cat",
  kv_dtypes = { "fp8_tile", "bf16" },
  records = { "nvfp4_ds_mla" },
  fp8_tile = {
    tile = 128,
    scale = "f32",
    saturate = { ocp = 448, fnuz = 224 },
    scales_at = 512,
    rope_at = 528,
    matches = "vLLM fp8_ds_mla (concat_and_cache_ds_mla), as V3.2's: x / scale, scale = amax / 448 (224 on FNUZ)",
    readers = "f32 scale: vLLM cp_gather_and_upconvert, ropekv read; bf16(scale): FlashMLA sm_90 sparse decode",
  },
  -- The sparse decoders take a bf16 query (FlashMLA's sparse decode reads one whatever the cache).
  q_dtypes = { "bf16" },
  -- where its engines run it: Hopper and Blackwell data-center GPUs, RTX PRO 6000 (sm_120: the NVFP4 fork), MI300X /
  -- MI355X (vLLM's fp8_ds_mla writer has its FNUZ path for gfx942); and the host. Not verified per target.
  targets = { "sm_90", "sm_100", "sm_103", "sm_120", "gfx942", "gfx950", "host" },
  -- The fused kv_a RMSNorm: rms_norm_eps 1e-5 (the config's), a bf16 weight of kv_lora_rank values, HF's and vLLM's
  -- two roundings.
  kv_norm = {
    weight = "bf16",
    eps = 1e-5,
    rounding = "twice",
    matches = "vLLM RMSNorm (the config's eps; HF's kv_a_layernorm keeps 1e-6): weight * bf16(x * rsqrt(mean(x^2) + eps))",
  },
}
