-- DeepSeek-V3.2-Exp (DeepSeek Sparse Attention), from deepseek-ai/DeepSeek-V3.2-Exp config.json:
--   the DeepSeek-V3 attention (kv_lora_rank 512, qk_rope_head_dim 64, 128 heads, the same YaRN rope with
--   is_neox_style = False and one float32 cos_sin_cache [max_pos, 64]), plus the lightning indexer.
-- Its MLA cache row is 656 bytes: the 512 latent values in fp8 e4m3, in 4 tiles of 128, each value
-- divided by its tile's scale (round to nearest even, saturating); the 4 tile scales as float32,
-- scale = max(amax(tile) / 448, FLT_MIN) (on gfx942's FNUZ bytes amax / 224, as vLLM's writer divides there);
-- then the 64 rope values in bf16, after RoPE. The engines keep
-- it paged ([num_blocks, block_size, 656] bytes, block_size 64) with int64 slot mappings.
-- The scales are raw float32 (amax / 448), as vLLM's writer stores them: right for readers that multiply by the
-- float32 (or its bf16 rounding), wrong for readers that take each scale as a power of two (FlashMLA's sm_100
-- sparse decode and FlashInfer's sm_120 reader in its pow2_fp32 mode: 2^floor(log2(scale)), up to 2x small). For
-- those, use deepseek_v32_pow2, whose scales are powers of two.
return {
  name = "deepseek_v32",
  description = "DeepSeek-V3.2 MLA: L = 512, R = 64, 656-byte tile-scaled fp8 cache rows",
  kv_lora_rank = 512,
  qk_rope_head_dim = 64,
  rope = "gptj",
  cos_sin = "f32_cat",
  -- the row formats V3.2's engines store: the tile row (the sparse indexer reads it) and bf16
  kv_dtypes = { "fp8_tile", "bf16" },
  -- and the NVFP4 record of vLLM's DSA path (nvfp4.fp8rope, vllm #51724)
  records = { "fp8_ds_mla", "bf16", "nvfp4_fp8rope" },
  fp8_tile = {
    tile = 128,
    scale = "f32",
    -- vLLM's concat_and_cache_ds_mla divides amax by 224 on gfx942 (FNUZ), by 448 elsewhere
    saturate = { ocp = 448, fnuz = 224 },
    scales_at = 512,
    rope_at = 528,
    matches = "vLLM fp8_ds_mla (concat_and_cache_ds_mla) and SGLang's NSA fp8 cache: x / scale, scale = amax / 448 (vLLM: 224 on FNUZ)",
    readers = "f32 scale: vLLM cp_gather_and_upconvert, ropekv read; bf16(scale): FlashMLA sm_90 sparse decode. "
      .. "Not E8M0 readers (FlashMLA sm_100 sparse decode, FlashInfer sm_120 pow2_fp32): deepseek_v32_pow2",
  },
  -- An fp8 query, for a dense fp8 decode (FlashMLA's sparse decode reads a bf16 query): per-tensor q_scale,
  -- multiplied by its reciprocal.
  q_fp8 = { scale = "mul_recip" },
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
