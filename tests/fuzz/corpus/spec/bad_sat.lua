return { name = 'x', kv_lora_rank = 512, qk_rope_head_dim = 64, fp8 = { saturate = { ocp = 447 } }, targets = { 'host' } }
