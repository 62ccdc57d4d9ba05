-- GLM-5.3-Flash (model type glm5_next), from transformers' configuration_glm5_next.py, whose defaults are
-- zai-org/GLM-5.3-Flash's (the released config.json itself was not found): hidden_size 4096, num_attention_heads 64,
-- q_lora_rank 1536, kv_lora_rank 512, qk_nope_head_dim 256, qk_rope_head_dim 0, v_head_dim 256, rms_norm_eps 1e-5,
-- max_position_embeddings 1048576, mla_use_nope true (transformers refuses a qk_rope_head_dim above 0). The MLA is
-- NoPE, so the cache row is the latent alone and the op rotates nothing (no k_pe, q_pe, positions or cos/sin
-- tables); the config has no rope theta (its indexer's rotation is not this op). vLLM's writer fails on R = 0
-- (vllm #55773, #57578).
-- The rows its engines store: GLM_NEXT fp8, 528 bytes (512 e4m3 + 4 float32 scales per 128: b12x and vLLM forks,
-- b12x #266), and GLM_NEXT NVFP4, 304 bytes, whose per-token outer scale the kernels do not write yet (choosing it
-- is refused, with the reason); a bf16 cache (1024 bytes) as every engine's unquantized MLA cache (not verified for
-- this model). A 656-byte padded fp8 row is reported too; its layout is not described, so it is not listed.
return {
  name = "glm53_flash",
  description = "GLM-5.3-Flash MLA: L = 512, R = 0 (NoPE: the row is the latent)",
  kv_lora_rank = 512,
  qk_rope_head_dim = 0,
  rope = "none",
  kv_dtypes = { "bf16" },
  records = { "glm_next_fp8", "glm_next_nvfp4" },
  -- The rows its engines run on: vLLM's forks and b12x are NVIDIA's (no AMD engine is known to serve it), and the
  -- host for the tests. test_matrix compiles its kernels for every row all the same.
  targets = { "sm_80", "sm_90", "sm_100", "sm_103", "sm_120", "host" },
  -- An fp8 query (absorbed: q_out = fp8(q_nope)), per-tensor q_scale multiplied by its reciprocal.
  q_fp8 = { scale = "mul_recip" },
  -- The fused kv_a RMSNorm over the 512 latent values: the config's rms_norm_eps 1e-5 (vLLM's RMSNorm takes it;
  -- transformers' kv_a_layernorm takes its own default 1e-6). The weight's dtype is not verified.
  kv_norm = {
    weight = "bf16",
    eps = 1e-5,
    rounding = "twice",
    matches = "vLLM RMSNorm (eps 1e-5, the config's): weight * bf16(x * rsqrt(mean(x^2) + eps))",
  },
}
