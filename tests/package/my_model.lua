-- The consumer's own model (tests/package): small, one variant, the host target only.
return {
  name = "my_model",
  description = "a small MLA model: L = 128, R = 32",
  kv_lora_rank = 128,
  qk_rope_head_dim = 32,
  rope = "gptj",
  cos_sin = "f32_cat",
  positions = { "int64" },
  slots = { "int64" },
  kv_dtypes = { "bf16" },
  q_dtypes = { "bf16" },
  q_forms = { "absorbed" },
  kv_layouts = { "flat" },
  ops = { "write" },
  targets = { "host" },
}
