return {
  name = 'r',
  kv_lora_rank = 512,
  qk_rope_head_dim = 64,
  targets = { 'host' },
  records = {
    'fp8_ds_mla',
    { like = 'fp8', conv = 'div', segments = { { saturate = { fnuz = 224 } } } },
    { name = 'mine', row_bytes = 656, segments = {
      { from = 0, n = 512, elem = 'e4m3', at = 0, block = 64, scale = 'ue8m0', scale_at = 'page_tail', scales_at = 0 },
      { from = 512, n = 64, elem = 'bf16', at = 528 } }, tail_bytes = 8,
      readers = { { name = 'r1', scale = 'pow2_down' } } },
  },
}
