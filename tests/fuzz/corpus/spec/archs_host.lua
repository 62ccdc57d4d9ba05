return { archs = { { name = 'host', vendor = 'host', wave = 32, fp8 = 'ocp', fp8_hw = false, bf16_hw = false, compiler = 'host' } } }
