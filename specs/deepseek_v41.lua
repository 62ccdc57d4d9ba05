-- DeepSeek-V4.1: DeepSeek-V4's attention (specs/deepseek_v4_flash.lua: one 512-wide head, L = 448 NoPE + R = 64 rope
-- at its end, the KV norm over the whole head, the weightless query norm, padded query heads) with compressed KV
-- shared across layer groups and caches that quantize the rotated rope values inside their tiles: MXFP8 (528 bytes:
-- 512 e4m3 with a UE8M0 scale per 32) and FP4 (288 bytes: 512 e2m1 with an e4m3 scale per 16), as vllm #56893 /
-- #56935 and sglang #39123 describe them. The published config.json was not read here: the eps values are not
-- verified.
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
  records = { "dsv41_mxfp8", "dsv41_fp4" },
  kv_norm = {
    weight = "bf16",
    eps = 1e-6,
    over = "head",
    matches = "DeepSeek-V4 kv_norm: RMSNorm over the whole 512-wide head before the rotation (eps not verified)",
  },
  q_norm = {
    eps = 1e-6,
    matches = "DeepSeek-V4: q * rsqrt(mean(q^2) + eps) per head, no weight, before the rotation (eps not verified)",
  },
}
