return { archs = { { name = 'gfx942:xnack-', vendor = 'amd', wave = 64, fp8 = 'fnuz', fp8_hw = true, bf16_hw = false, compiler = 'clang', block = 64, vec_bytes = 8, options = '-O3' } } }
