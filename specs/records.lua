-- The cache records MLA engines store, by name: what one token's row holds, byte for byte (gen/record.h).
-- A model spec lists the ones it writes (`records = { "fp8_ds_mla", "bf16" }`), describes its own with the same
-- keys, or takes one of these with its own convention (`{ like = "fp8", conv = "div" }`). docs/formats.md draws
-- each row.
--
-- Keys of a record: name, L, R (the geometry: segments cover x[0, L + R), the latent first, then the rope part
-- after RoPE), row_bytes, split_at (the split layout's cut: bytes [0, split_at) in kv_cache, the rest in
-- kv_rope_cache; 0: not split), tail_bytes (a token's part of the page tail), conv (how a tensor-scaled segment
-- takes the launch's k_scale: mul_recip, div or mul), segments, readers, matches; `like` takes an earlier record
-- as the base (its segments are merged entry by entry).
-- Keys of a segment: from, n (it stores x[from, from + n)), elem (bf16, e4m3, e2m1), at (its first byte),
-- block (0, 16, 32, 64, 128 values a scale), scale (none, f32, ue8m0, e4m3), rule (exact; pow2_up: the scale
-- rounded up to a power of two; up: an e4m3 scale rounded up to the least e4m3 value >= it; exact_zero: an e4m3
-- scale to nearest, one that rounds to zero stored as 0x00 and its block's values times 0, where exact stores the
-- least value 0x01), floor (the least
-- scale before its rule: s = max(amax / sat, floor); default FLT_MIN), block_conv (how the values take their
-- block's decoded scale d: div, y / d; mul_recip, y * (1 / d)), scale_at (inline, page_tail), scales_at,
-- scales_interleave (0: block b's scale at place b; k: at (b % k) * (blocks / k) + b / k), saturate = { ocp, fnuz }
-- (the bound a block's amax maps to, or an unblocked segment's clamp; default: the element's largest finite
-- value), outer (none, tensor, token), outer_at (a per-token float32's offset), rope_bf16 (rope values rounded to
-- bf16 before they are quantized).
-- Keys of a reader: name (an engine's kernel), scale (how it takes a block scale back: exact, bf16, pow2_down).
--
-- Where a fact below could not be checked against an engine's code, its comment says "not verified".
return {
  records = {
    -- bf16, 1152 bytes (DeepSeek-V3/R1, Kimi-K2, GLM, LongCat, every MLA model): the 512 latent and 64 rope values
    -- as they are. vLLM's concat_and_cache_mla (csrc/cache_kernels.cu, vllm-project/vllm) copies kv_c and then
    -- k_pe into one [L + R] row when the cache dtype is "auto"; FlashInfer's append_paged_mla_kv_cache keeps the
    -- same values in two caches (ckv [L], kpe [R]), which is the split layout here.
    {
      name = "bf16",
      L = 512,
      R = 64,
      row_bytes = 1152,
      split_at = 1024,
      segments = {
        { from = 0, n = 512, elem = "bf16", at = 0 },
        { from = 512, n = 64, elem = "bf16", at = 1024 },
      },
      readers = { { name = "any_bf16_mla" } },
      matches = "every engine's bf16 MLA cache: kv_c then k_pe, unchanged",
    },
    -- fp8, 576 bytes: every value in e4m3 against one per-tensor scale (k_scale), no scales in the row.
    -- vLLM's concat_and_cache_mla (csrc/cache_kernels.cu) converts each kv_c and k_pe value with the fp8
    -- scaled_convert of csrc/quantization/.../quant_utils.cuh, which divides by the scale (x / k_scale). FlashInfer's
    -- and aiter's fused rope + quantize writers multiply by a reciprocal the caller passes instead. The engines
    -- differ, so the record follows ropekv's default fp8 policy (x * (1 / k_scale)); a spec that follows vLLM
    -- takes it with conv = "div" (specs/kimi_k2.lua). Bounds: 448 on OCP bytes, 240 on FNUZ (vLLM's ROCm path
    -- clamps at 224: a spec says so with saturate = { fnuz = 224 }).
    {
      name = "fp8",
      L = 512,
      R = 64,
      row_bytes = 576,
      split_at = 512,
      conv = "mul_recip",
      segments = {
        { from = 0, n = 512, elem = "e4m3", at = 0, outer = "tensor" },
        { from = 512, n = 64, elem = "e4m3", at = 512, outer = "tensor" },
      },
      readers = { { name = "any_fp8_mla" } },
      matches = "FlashInfer / aiter fused writers: x * (1 / k_scale), e4m3 saturating; vLLM divides (conv = div)",
    },
    -- fp8_ds_mla, 656 bytes (DeepSeek-V3.2, GLM-5): the latent in e4m3, 4 tiles of 128 values with one float32
    -- scale each at byte 512, then the 64 rope values in bf16 at 528. vLLM's concat_and_cache_ds_mla_kernel
    -- (csrc/cache_kernels.cu): two warps quantize the latent (a warp-wide amax per tile, scale = max(amax / 448,
    -- FLT_MIN), each value divided by its tile's scale and converted saturating, the 4 scales stored as float32
    -- after the 512 bytes), a third warp copies k_pe as bf16 after the scales; on gfx942 (FNUZ bytes) it divides
    -- amax by 224 (vllm #32976). SGLang's quantize_k_cache writes the same bytes (not verified here). Readers
    -- differ in how they take a scale back: vLLM's cp_gather_and_upconvert and ropekv's read as float32,
    -- FlashMLA's sm_90 sparse decode rounds it to bf16 first; FlashMLA's sm_100 sparse decode takes it as an E8M0
    -- power of two rounded toward zero, for which the pow2 record below is the right one.
    {
      name = "fp8_ds_mla",
      L = 512,
      R = 64,
      row_bytes = 656,
      segments = {
        {
          from = 0,
          n = 512,
          elem = "e4m3",
          at = 0,
          block = 128,
          scale = "f32",
          scales_at = 512,
          saturate = { ocp = 448, fnuz = 224 },
        },
        { from = 512, n = 64, elem = "bf16", at = 528 },
      },
      readers = {
        { name = "vllm_cp_gather_and_upconvert", scale = "exact" },
        { name = "ropekv_read", scale = "exact" },
        { name = "flashmla_sm90_sparse", scale = "bf16" },
      },
      matches = "vLLM concat_and_cache_ds_mla: x / s, s = max(amax / 448, FLT_MIN) per 128 (224 on FNUZ)",
    },
    -- fp8_ds_mla_pow2, 656 bytes: the same row with every tile scale rounded up to a power of two, so that readers
    -- that take the float32 as an E8M0 exponent (FlashMLA's sm_100 sparse decode, FlashInfer's sm_120 sparse reader
    -- in its pow2 mode) read it exactly. The round-up is what ropekv's deepseek_v32_pow2 spec writes; a fork of
    -- vLLM for sm_120 writes the same (not checked against upstream code, which stores the raw float32).
    {
      like = "fp8_ds_mla",
      name = "fp8_ds_mla_pow2",
      segments = { { rule = "pow2_up" } },
      readers = {
        { name = "flashmla_sm100_sparse", scale = "pow2_down" },
        { name = "flashinfer_sm120_sparse", scale = "pow2_down" },
        { name = "flashmla_sm90_sparse", scale = "bf16" },
        { name = "ropekv_read", scale = "exact" },
      },
      matches = "fp8_ds_mla with 2^ceil(log2 s) tile scales, for E8M0 readers",
    },
    -- glm_next_fp8, 528 bytes (GLM-5.3-Flash, R = 0: no rope part in the cache): the 512 latent values in e4m3,
    -- 4 float32 scales per 128 at 512, the fp8_ds_mla recipe without the rope bytes. Checked against b12x
    -- (local-inference-lab/b12x, b12x/attention/_shared/mla/kv_cache.py, ConcatAndCacheGlmNextMlaKernel): the same
    -- layout; its scale is amax * float32(1 / 448) (1.0 for an all-zero tile) and each value x * rcp(scale), where
    -- this record divides (amax / 448, FLT_MIN for a zero tile): the float32 scale differs for 17,468 of the 32,639
    -- positive finite bf16 amax values, about 1 in 8000 codes. vLLM's own writer fails on R = 0 (vllm #55773,
    -- #57578). No engine read writes it for FNUZ targets: the FNUZ bound (224, as fp8_ds_mla) is this record's own.
    {
      name = "glm_next_fp8",
      L = 512,
      R = 0,
      row_bytes = 528,
      segments = {
        {
          from = 0,
          n = 512,
          elem = "e4m3",
          at = 0,
          block = 128,
          scale = "f32",
          scales_at = 512,
          saturate = { ocp = 448, fnuz = 224 },
        },
      },
      matches = "b12x GLM_NEXT fp8 (ConcatAndCacheGlmNextMlaKernel): layout; its scale, reciprocals round differently",
    },
    -- dsv4_fp8, 576 bytes a row + 8 a token in the page tail = 584 (DeepSeek-V4 Flash / Pro): 448 NoPE values in
    -- e4m3 in 7 blocks of 64, the 64 rope values in bf16 at 448; the 7 UE8M0 block scales and one pad byte of each
    -- token lie after the page's rows. Follows vLLM's fused writer (vllm-project/vllm,
    -- csrc/fused_deepseek_v4_qnorm_rope_kv_insert_kernel.cu) and SGLang's (fused_k_norm_rope_flashmla): amax
    -- floored at 1e-4, divided by 448 and rounded up to a power of two (floor = the float32 1e-4 / 448: the same
    -- bytes), values times the scale's exact reciprocal, the pad byte 0. TensorRT-LLM's footer_scale_kv floors amax
    -- at 1e-8 and FlashMLA's test reference the quotient at 1e-4: they differ for blocks with amax below 5.3e-5
    -- (below 0.027 for FlashMLA's). No engine read has a FNUZ writer of this row: that bound is not verified.
    {
      name = "dsv4_fp8",
      L = 448,
      R = 64,
      row_bytes = 576,
      tail_bytes = 8,
      segments = {
        {
          from = 0,
          n = 448,
          elem = "e4m3",
          at = 0,
          block = 64,
          scale = "ue8m0",
          rule = "pow2_up",
          floor = 2.23214286e-07, -- float32(1e-4) / 448 in float32
          scale_at = "page_tail",
          scales_at = 0,
        },
        { from = 448, n = 64, elem = "bf16", at = 448 },
      },
      readers = { { name = "flashmla_v4_sparse", scale = "exact" } },
      matches = "vLLM / SGLang DeepSeek-V4 fused writers: 448 e4m3 + bf16 rope, 7 UE8M0 per 64 + 1 pad byte in the page tail",
    },
    -- dsv41_mxfp8, 528 bytes (DeepSeek-V4.1): all 512 values of the head in e4m3, the 64 rope values rotated and
    -- then quantized with the latent (one segment over x[0, 512)), 16 UE8M0 scales per 32 at 512. Follows SGLang
    -- (sgl-project/sglang, python/sglang/kernels/jit/include/sgl_kernel/deepseek_v4/kv_layout.cuh, v41::
    -- store_row_fp8, and its torch reference torch_quant.py, quantize_k_cache_v41): amax / 448 as an f32 division,
    -- floored at 1e-4 (float32), rounded up to a power of two, values times its exact reciprocal; the rope rotated
    -- in f32 and rounded to bf16 first. vLLM's Triton writers (vllm #56893) floor amax rather than the quotient and
    -- quantize the f32 rotation: they differ for tiles with amax below 0.0273.
    {
      name = "dsv41_mxfp8",
      L = 448,
      R = 64,
      row_bytes = 528,
      segments = {
        {
          from = 0,
          n = 512,
          elem = "e4m3",
          at = 0,
          block = 32,
          scale = "ue8m0",
          rule = "pow2_up",
          floor = 1e-4,
          scales_at = 512,
          rope_bf16 = true,
        },
      },
      matches = "SGLang V41 MXFP8 (kv_layout.cuh store_row_fp8): 512 e4m3 incl. the rotated rope, UE8M0 per 32",
    },
    -- dsv41_fp4, 288 bytes (DeepSeek-V4.1): the 512 values in e2m1 (two a byte, the first in the low nibble), 32
    -- e4m3 scales per 16 at 256, no outer scale: amax / 6 as an IEEE division rounded to the nearest e4m3, the values
    -- divided by the decoded scale, the rotated rope rounded to bf16 first. Checked against SGLang
    -- (kv_layout.cuh, v41::store_row_fp4, and torch_quant.py, quantize_k_cache_v41_fp4): the same bytes (its clamp
    -- to [2^-9, 448] gives what FLT_MIN and 0x01 give here). vLLM's _rope_quant_insert_nvfp4_kernel (vllm #56935)
    -- takes amax * (1 / 6) (a few scale bytes differ) and quantizes the rope part's f32 rotation.
    {
      name = "dsv41_fp4",
      L = 448,
      R = 64,
      row_bytes = 288,
      segments = {
        {
          from = 0,
          n = 512,
          elem = "e2m1",
          at = 0,
          block = 16,
          scale = "e4m3",
          scales_at = 256,
          rope_bf16 = true,
        },
      },
      matches = "SGLang V41 FP4 (kv_layout.cuh store_row_fp4): 512 e2m1 incl. the rotated rope, e4m3 per 16",
    },
    -- nvfp4, 352 bytes split in two caches (FlashInfer's dense MLA NVFP4 cache,
    -- nvfp4_quantize_append_paged_mla_kv_cache, flashinfer #4676): ckv 256 bytes of e2m1 + 32 e4m3 scales per 16
    -- (288 bytes), kpe 64 e4m3 bytes. Both against a per-tensor (global) scale. Checked against FlashInfer
    -- (include/flashinfer/page.cuh, NVFP4QuantizeAppendPagedKVMlaCacheKernel): the same contents, in three tensors
    -- there (ckv, ckv_sf, kpe); its arithmetic multiplies by rounded reciprocals (amax * rcp(6 gs), x * rcp(d gs),
    -- gs the global scale) where this record takes x * (1 / k) and divides by d (about 1 in 1000 codes differ, at
    -- exact ties), and it stores an all-zero block's scale as 0x00 (here 0x01); its kpe takes a kpe_scale of its own.
    {
      name = "nvfp4",
      L = 512,
      R = 64,
      row_bytes = 352,
      split_at = 288,
      conv = "mul_recip",
      segments = {
        {
          from = 0,
          n = 512,
          elem = "e2m1",
          at = 0,
          block = 16,
          scale = "e4m3",
          scales_at = 256,
          outer = "tensor",
        },
        { from = 512, n = 64, elem = "e4m3", at = 288, outer = "tensor" },
      },
      matches = "FlashInfer NVFP4 MLA cache (ckv e2m1 + e4m3 per 16, kpe e4m3): contents; 3 tensors, other reciprocals",
    },
    -- nvfp4_fp8rope, 352 bytes (the DSA NVFP4 record of vllm #51724, read by vllm-project/FlashMLA #18): 256 bytes
    -- of e2m1 latent, the 64 rope values in e4m3 at 256 (no scale), then 32 e4m3 scales per 16 at 320, stored as
    -- four runs (block b's at 8 (b % 4) + b / 4). As vLLM's concat_and_cache_nvfp4_ds_mla_kernel
    -- (csrc/libtorch_stable/nvfp4_ds_mla_cache_kernels.cu) writes it: amax / 6 as an f32 division, rounded up to an
    -- e4m3 value (nearest, then one step up while below), each value times the f32 reciprocal of the decoded scale;
    -- the rope part (a bf16 input there) converted as it is. FlashMLA's test reference (tests/quant.py) divides by
    -- the scale instead: its bytes differ at exact ties (about 1 in 2000 values).
    {
      name = "nvfp4_fp8rope",
      L = 512,
      R = 64,
      row_bytes = 352,
      segments = {
        {
          from = 0,
          n = 512,
          elem = "e2m1",
          at = 0,
          block = 16,
          scale = "e4m3",
          rule = "up",
          block_conv = "mul_recip",
          scales_at = 320,
          scales_interleave = 4,
        },
        { from = 512, n = 64, elem = "e4m3", at = 256, rope_bf16 = true },
      },
      readers = { { name = "flashmla_sm100_nvfp4", scale = "exact" } },
      matches = "vLLM nvfp4_ds_mla (DSA, concat_and_cache_nvfp4_ds_mla_kernel): e2m1 + e4m3 rope + e4m3 per 16",
    },
    -- nvfp4_ds_mla, 432 bytes (GLM-5.2, local-inference-lab/vllm #82): 256 bytes of e2m1, 32 e4m3 scales per 16 at
    -- 256, 16 zero bytes, the 64 rope values in bf16 at 304. The fork's concat_and_cache_nvfp4_mla_kernel
    -- (csrc/libtorch_stable/nvfp4_kv_cache_kernels.cu) takes amax times 1/6 (the same e4m3 byte as amax / 6 for
    -- every bf16 amax), keeps a scale that rounds to zero as 0x00 with zero values (amax <= 0.005859375: rule
    -- exact_zero) and multiplies each other value by the reciprocal of the decoded scale (block_conv mul_recip). Its
    -- reciprocals are rcp.approx, equal to 1 / d for every e4m3 value d on sm_90 (docs/formats.md). The optional
    -- per-layer outer scale of #95 divides the latent in PyTorch, rounded to bf16, before the writer: not this
    -- record's outer scale.
    {
      name = "nvfp4_ds_mla",
      L = 512,
      R = 64,
      row_bytes = 432,
      segments = {
        {
          from = 0,
          n = 512,
          elem = "e2m1",
          at = 0,
          block = 16,
          scale = "e4m3",
          rule = "exact_zero",
          block_conv = "mul_recip",
          scales_at = 256,
        },
        { from = 512, n = 64, elem = "bf16", at = 304 },
      },
      matches = "local-inference-lab vLLM concat_and_cache_nvfp4_mla_kernel: e2m1 + e4m3 per 16 + 16 pad + bf16 rope",
    },
    -- nvfp4_ds_mla_fp8rope, 368 bytes (the same fork, #95 / #549, written by local-inference-lab/b12x's
    -- ConcatAndCacheNvfp4MlaFp8RopeKernel, b12x/attention/_shared/mla/kv_cache.py, in its per-token mode): the
    -- latent as nvfp4_ds_mla against a float32 token scale at 292 (the latent's amax / (6 * 448)), the rope part in
    -- e4m3 at 304 against a float32 scale of its own at 288 (its amax / 448), 8 zero bytes at 296. The layout is
    -- b12x's; its arithmetic multiplies by rounded reciprocals (amax * (1 / 2688), x * rcp(scale)) where this
    -- record divides, and writes a zero scale as 0: some bytes differ (about 1 in 1000 block scales).
    {
      name = "nvfp4_ds_mla_fp8rope",
      L = 512,
      R = 64,
      row_bytes = 368,
      segments = {
        {
          from = 0,
          n = 512,
          elem = "e2m1",
          at = 0,
          block = 16,
          scale = "e4m3",
          scales_at = 256,
          outer = "token",
          outer_at = 292,
        },
        { from = 512, n = 64, elem = "e4m3", at = 304, outer = "token", outer_at = 288, rope_bf16 = true },
      },
      matches = "b12x ConcatAndCacheNvfp4MlaFp8RopeKernel (per-token mode): layout; its reciprocals round differently",
    },
    -- glm_next_nvfp4, 304 bytes (GLM-5.3-Flash, R = 0; b12x #266): 256 bytes of e2m1, 32 e4m3 scales per 16 at
    -- 256, 4 reserved bytes, a float32 per-token outer scale at 292 (the token's amax / (6 * 448)), 8 pad bytes.
    -- Checked against b12x (kv_cache.py, concat_and_cache_glm_next_nvfp4_mla: ConcatAndCacheNvfp4MlaFp8RopeKernel
    -- with no rope and a per-token scale): the layout; its arithmetic differs as nvfp4_ds_mla_fp8rope's.
    {
      name = "glm_next_nvfp4",
      L = 512,
      R = 0,
      row_bytes = 304,
      segments = {
        {
          from = 0,
          n = 512,
          elem = "e2m1",
          at = 0,
          block = 16,
          scale = "e4m3",
          scales_at = 256,
          outer = "token",
          outer_at = 292,
        },
      },
      matches = "b12x GLM_NEXT NVFP4 (concat_and_cache_glm_next_nvfp4_mla): layout; its reciprocals round differently",
    },
  },
}
