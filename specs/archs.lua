-- Targets the generator knows: one row per architecture.
--   name       target name as the compilers spell it
--   vendor     "amd" | "nvidia" | "host"
--   wave       32 | 64 lanes
--   fp8        "ocp" | "fnuz": the byte format of an fp8 KV cache on this target
--   fp8_hw     hardware f32 -> fp8 conversion (else software RNE with saturation)
--   bf16_hw    hardware f32 -> bf16 conversion (else a software RNE sequence)
--   compiler   "hiprtc" | "clang" | "nvrtc" | "host": the preferred compiler family
--   optional:  vec_bytes (16), block (256, a multiple of wave): threads per block, options (""),
--              wide_block (block) and wide_from (2^30): launches of at least wide_from chunks take blocks of
--              wide_block threads (small launches spread over more processors, larger ones take fewer, bigger
--              blocks: with PDL the block scheduler, not memory, bounds a launch of many small blocks),
--              chunks (1): 16-byte output chunks per thread in launches of at least chunks_from
--              (1048576) chunks (smaller launches take one: latency wins there; from there the read-back op
--              also gives a block-scaled e4m3 or e2m1 latent lane two chunks), read_chunks (chunks) and
--              read_chunks_from (chunks_from): the same for the read-back op, nt_stores (false):
--              streaming stores for q_out and cache rows, pdl (false, NVIDIA sm_90+ only):
--              programmatic dependent launch: the kernel waits for the grid before it in the stream
--              before its first memory access, so its launch overlaps that grid's tail, family (false,
--              NVIDIA only): compile for the device's family-specific target (sm_100 -> sm_100f): the family's
--              conversions (cvt.rn.satfinite.e2m1x2.f32 for e2m1 records), in code that runs on every GPU of the
--              family (an nvrtc before 12.9 has no family targets: the plain one, software conversions),
--              e2m1_hw (false, AMD only; an NVIDIA row's is its family): the hardware f32 -> e2m1 conversion,
--              write_pairs (true; false on AMD rows): a KV-only write launch of token groups gives a block-scaled
--              latent's lanes two chunks each (gen/rk.h, rk_write_pairs).
--   sm_80 and sm_90 are tuned with bench_kernel (bench/README.md, results in docs/results.md); the Blackwell rows
--   are not yet (sm_90's values); AMD rows keep the defaults.
return {
  archs = {
    -- MI200 (CDNA2): no fp8 instructions; fp8 caches hold OCP bytes made in software.
    { name = "gfx90a", vendor = "amd", wave = 64, fp8 = "ocp", fp8_hw = false, bf16_hw = false, compiler = "hiprtc" },
    -- MI300 (CDNA3): FNUZ e4m3 (bias 8, max 240) converted by v_cvt_pk_fp8_f32.
    { name = "gfx942", vendor = "amd", wave = 64, fp8 = "fnuz", fp8_hw = true, bf16_hw = false, compiler = "clang" },
    -- MI350/MI355 (CDNA4): OCP e4m3 and bf16 conversion in hardware.
    -- e2m1 (fp4) records converted by v_cvt_scalef32_pk_fp4_f32.
    {
      name = "gfx950",
      vendor = "amd",
      wave = 64,
      fp8 = "ocp",
      fp8_hw = true,
      bf16_hw = true,
      e2m1_hw = true,
      compiler = "clang",
    },
    -- RDNA3 (Radeon RX 7900): wave32, no fp8 instructions.
    { name = "gfx1100", vendor = "amd", wave = 32, fp8 = "ocp", fp8_hw = false, bf16_hw = false, compiler = "clang" },
    -- RDNA4 (Radeon RX 9070): wave32, OCP fp8 conversion in hardware.
    { name = "gfx1201", vendor = "amd", wave = 32, fp8 = "ocp", fp8_hw = true, bf16_hw = false, compiler = "clang" },
    -- GFX12.5: wave32, OCP fp8 and bf16 conversion in hardware.
    { name = "gfx1250", vendor = "amd", wave = 32, fp8 = "ocp", fp8_hw = true, bf16_hw = true, compiler = "clang" },
    -- A100 (Ampere): cvt.rn.bf16x2.f32, but no fp8 conversion instruction before sm_89.
    { name = "sm_80", vendor = "nvidia", wave = 32, fp8 = "ocp", fp8_hw = false, bf16_hw = true, compiler = "nvrtc",
      block = 128, chunks = 4, chunks_from = 524288 },
    -- H100/H200 (Hopper): cvt.rn.satfinite.e4m3x2.f32 and cvt.rn.bf16x2.f32.
    { name = "sm_90", vendor = "nvidia", wave = 32, fp8 = "ocp", fp8_hw = true, bf16_hw = true, compiler = "nvrtc",
      block = 128, wide_block = 256, wide_from = 65536, chunks_from = 524288, pdl = true,
      read_chunks = 2, read_chunks_from = 2097152 },
    -- Blackwell: the same cvt.rn.satfinite.e4m3x2.f32, cvt.rn.bf16x2.f32 and griddepcontrol as sm_90.
    -- UNTUNED: the launch knobs (block, wide_block, wide_from, chunks, chunks_from, read_chunks, read_chunks_from,
    -- nt_stores, pdl) are sm_90's
    -- values, copied as a starting point and written out so that each row is tuned on its own GPU with
    -- bench_kernel (bench/README.md); no kernel
    -- has run on a Blackwell GPU yet. A device maps to the newest row not newer than its compute
    -- capability (runtime.c): 10.1 -> sm_100, 11.x -> sm_103, 12.1 -> sm_120.
    -- B200/GB200 (compute capability 10.0).
    { name = "sm_100", vendor = "nvidia", wave = 32, fp8 = "ocp", fp8_hw = true, bf16_hw = true, compiler = "nvrtc",
      block = 128, wide_block = 256, wide_from = 65536, chunks_from = 524288, nt_stores = false, pdl = true,
      read_chunks = 2, read_chunks_from = 2097152, family = true },
    -- B300/GB300 (compute capability 10.3).
    { name = "sm_103", vendor = "nvidia", wave = 32, fp8 = "ocp", fp8_hw = true, bf16_hw = true, compiler = "nvrtc",
      block = 128, wide_block = 256, wide_from = 65536, chunks_from = 524288, nt_stores = false, pdl = true,
      read_chunks = 2, read_chunks_from = 2097152, family = true },
    -- RTX 50 series, RTX PRO 6000 Blackwell (compute capability 12.0).
    { name = "sm_120", vendor = "nvidia", wave = 32, fp8 = "ocp", fp8_hw = true, bf16_hw = true, compiler = "nvrtc",
      block = 128, wide_block = 256, wide_from = 65536, chunks_from = 524288, nt_stores = false, pdl = true,
      read_chunks = 2, read_chunks_from = 2097152, family = true },
    -- The CPU (portable C, for tests and machines without a GPU); its wave is only a loop width.
    -- (chunks_from: the host runs lanes one after another, so only the read-back's lane layout follows it; low,
    -- so that the host tests run both layouts)
    { name = "host", vendor = "host", wave = 32, fp8 = "ocp", fp8_hw = false, bf16_hw = false, compiler = "host",
      chunks_from = 4096 },
  },
}
