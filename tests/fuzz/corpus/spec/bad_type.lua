return { name = 'x', kv_lora_rank = '512', qk_rope_head_dim = 64, targets = { 'host' } }
