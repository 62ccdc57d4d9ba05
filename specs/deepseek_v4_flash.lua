-- DeepSeek-V4-Flash. Its attention, as the engines that serve it describe it (vLLM's and SGLang's V4 paths, FlashMLA's
-- V4 sparse decode): one KV head of head_dim 512 whose last
-- qk_rope_head_dim = 64 values carry the rotation (GPT-J pairs) and whose first 448 are NoPE, so the cached latent is
-- L = 448 and the rope part R = 64; 64 query heads (the Pro model: 128). The KV RMSNorm covers the whole 512-wide
-- head (latent and rope part, before the rotation); each query head gets a weightless RMSNorm over its 512 values
-- before the rotation; the attention kernel wants 64 or 128 query heads, so a tensor-parallel rank's heads are
-- padded with zero rows (ropekv_args.q_heads). Sliding-window and compressed-KV layers rotate with different tables
-- (rope_theta 10000 and compress_rope_theta 160000): the table is an argument of each launch, so one kernel serves
-- both. Both norms take eps 1e-6, the rms_norm_eps of deepseek-ai/DeepSeek-V4-Flash's config.json, as its copies
-- republish it (python/tests/test_models.py checks the spec against it).
return {
  name = "deepseek_v4_flash",
  description = "DeepSeek-V4-Flash MLA: one 512-wide head, L = 448 NoPE + R = 64 rope at its end, 64 heads",
  kv_lora_rank = 448,
  qk_rope_head_dim = 64,
  rope = "gptj",
  cos_sin = "f32_cat",
  -- where its engines run it: Hopper (H800 / H200), Blackwell (B200, B300, RTX PRO), MI355X; and the host
  targets = { "sm_90", "sm_100", "sm_103", "sm_120", "gfx950", "host" },
  -- the cache rows its engines store: bf16 (1024 bytes) and the V4 fp8 record (576 + 8 bytes of page tail)
  kv_dtypes = { "bf16" },
  records = { "dsv4_fp8" },
  kv_norm = {
    weight = "bf16",
    eps = 1e-6,
    over = "head",
    matches = "DeepSeek-V4 kv_norm: RMSNorm over the whole 512-wide head before the rotation, eps the config's",
  },
  q_norm = {
    eps = 1e-6,
    matches = "DeepSeek-V4: q * rsqrt(mean(q^2) + eps) per head, no weight, before the rotation, eps the config's",
  },
}
