-- DeepSeek-V4.1: DeepSeek-V4's head (specs/deepseek_v4_flash.lua: one 512-wide head, L = 448 NoPE + R = 64 rope at
-- its end, the KV norm over the whole head, padded query heads) with compressed KV shared across layer groups and
-- caches that quantize the rotated rope values inside their tiles: MXFP8 (528 bytes: 512 e4m3 with a UE8M0 scale per
-- 32) and FP4 (288 bytes: 512 e2m1 with an e4m3 scale per 16), as SGLang's store_row_fp8 / store_row_fp4 write them
-- (specs/records.lua). From deepseek-ai/DeepSeek-V4.1-Flash's config.json as republished verbatim (hidden_size 5120,
-- num_attention_heads 64, head_dim 512, qk_rope_head_dim 64, q_lora_rank 1280, rms_norm_eps 1e-20, rope_theta 10000,
-- compress_rope_theta 160000, YaRN factor 16 over 65536 on the compressed layers' table only) and SGLang's
-- python/sglang/srt/configs/deepseek_v41.py (q_head_norm = False): unlike V4, no per-head query norm, and every
-- norm's eps is 1e-20. The KV norm weight's dtype in the original checkpoint was not found (bf16, as V4's, assumed).
return {
  name = "deepseek_v41",
  description = "DeepSeek-V4.1 MLA: V4's head (448 + 64), rope quantized inside MXFP8 / FP4 tiles",
  kv_lora_rank = 448,
  qk_rope_head_dim = 64,
  rope = "gptj",
  cos_sin = "f32_cat",
  -- where its engines run it: Hopper (H800 / H200), Blackwell (B200, B300, RTX PRO), MI355X; and the host
  targets = { "sm_90", "sm_100", "sm_103", "sm_120", "gfx950", "host" },
  kv_dtypes = { "bf16" },
  -- the query as a whole head (q_out = [q_nope, rope(q_pe)]) or none: the KV norm over the head needs a query form
  -- whose lanes go row by row (V4's query norm gives it the same two)
  q_forms = { "absorbed", "none" },
  records = { "dsv41_mxfp8", "dsv41_fp4" },
  kv_norm = {
    weight = "bf16",
    eps = 1e-20,
    over = "head",
    matches = "DeepSeek-V4.1 kv_norm: RMSNorm over the whole 512-wide head before the rotation, eps 1e-20",
  },
}
