return { name = 'x', kv_lora_rank = 512,, }
