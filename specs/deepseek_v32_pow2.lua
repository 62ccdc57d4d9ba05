-- DeepSeek-V3.2-Exp's MLA cache row (as specs/deepseek_v32.lua: 656 bytes, 4 tiles of 128 fp8 e4m3 values, 4 float32
-- scales, 64 bf16 rope values), with every tile scale rounded up to a power of two: scale = 2^ceil(log2(amax / 448)),
-- at least FLT_MIN. A power of two is exact as a float32, a bf16 and an E8M0 byte, so every reader decodes the row
-- the same way; the readers that take a scale as E8M0 need it: FlashMLA's sm_100 sparse decode (the float32 scale
-- converted with __nv_cvt_float2_to_e8m0x2, rounding toward zero) and FlashInfer's sm_120 sparse MLA reader
-- (pow2_fp32: 2^floor(log2(scale))). A raw float32 scale read so is up to 2x too small (deepseek_v32's rows).
-- FlashMLA's reference quantizer (tests/quant.py, V32_FP8Sparse) writes these scales, with a floor of 1e-4 on
-- amax / 448 where ropekv's is FLT_MIN: the bytes differ only for tiles whose amax is below 0.0448.
-- Only the tile row differs from deepseek_v32 (its bf16 rows are deepseek_v32's); the query is bf16, as the sparse
-- decoders take it.
return {
  name = "deepseek_v32_pow2",
  description = "DeepSeek-V3.2 MLA: 656-byte tile-scaled fp8 rows with power-of-two (E8M0-exact) scales",
  kv_lora_rank = 512,
  qk_rope_head_dim = 64,
  rope = "gptj",
  cos_sin = "f32_cat",
  kv_dtypes = { "fp8_tile" },
  records = { "fp8_ds_mla_pow2" },
  q_dtypes = { "bf16" },
  fp8_tile = {
    tile = 128,
    scale = "pow2",
    -- as deepseek_v32: 448, and vLLM's 224 on gfx942's FNUZ bytes
    saturate = { ocp = 448, fnuz = 224 },
    scales_at = 512,
    rope_at = 528,
    matches = "FlashMLA tests/quant.py V32_FP8Sparse: x / scale, scale = 2^ceil(log2(amax / 448)) (its floor 1e-4)",
    readers = "every reader: E8M0 (FlashMLA sm_100 sparse decode, FlashInfer sm_120 pow2_fp32), bf16(scale) "
      .. "(FlashMLA sm_90 sparse decode), f32 (vLLM cp_gather_and_upconvert, ropekv read)",
  },
  -- The fused kv_a RMSNorm, as deepseek_v32's.
  kv_norm = {
    weight = "bf16",
    eps = 1e-6,
    rounding = "twice",
    matches = "HF DeepseekV3RMSNorm and vLLM RMSNorm: weight * bf16(x * rsqrt(mean(x^2) + eps))",
  },
}
