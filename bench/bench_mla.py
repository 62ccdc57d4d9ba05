#!/usr/bin/env python3
"""Fused MLA RoPE + KV-cache write: ropekv against its peers, DeepSeek-V3 shapes, on one GPU (NVIDIA or AMD).

    python3 bench/bench_mla.py --out bench/results            # the full sweep
    python3 bench/bench_mla.py --quick --out /tmp/r           # T in {1, 128, 2048}, H = 16, bf16
    python3 bench/bench_mla.py --cpu --T 1,7 --H 2 --out /tmp/r   # a check of the script itself (no GPU)
    python3 bench/bench_mla.py --mode v32 --out /tmp/r         # DeepSeek-V3.2's fp8_tile paged writer
    python3 bench/bench_mla.py --mode read --out /tmp/r        # the read-back op (fp8_tile, fp8_e4m3, bf16)
    python3 bench/bench_mla.py --norm --out /tmp/r             # only the fused kv_a RMSNorm section

Shapes: L = 512, R = 64 (GPT-J rope), f32 cos_sin_cache [4096, 64]; T tokens x H heads x KV dtype.
Inputs are laid out as engines pass them: q_nope / q_pe slices of one [T, H, 576] query, k_nope / k_pe
slices of one [T, 576] projection output, a paged cache [blocks, 16, 576], random positions, slots a
permutation of the cache rows; fp8 caches use k_scale = 0.5 (stored = x * (1 / k_scale), clamped to +-448).
An fp8 query uses one per-tensor q_scale (Q_SCALE, about the query's max / 448) with the convention of the
spec being benchmarked (--spec; deepseek_v3: x * (1 / q_scale) on the float32 rope, FlashInfer / aiter style;
kimi_k2: x / q_scale on the rope rounded to bf16 first, vLLM style), clamped to +-448, e4m3 (OCP).

Methods (all measured in this one process, see bench/README.md):
  ropekv   the library through its Python binding (cuda backend, hip under ROCm; absorbed form), default
           options: on sm_90 launches use programmatic dependent launch (PDL: each call's launch overlaps the previous
           kernel's tail; the kernel waits for it before touching memory)
  ropekv_nopdl  the same kernel launched without PDL (Context(pdl=False)); not a peer
  ropekv_fp8q  the absorbed form with an fp8 e4m3 query output (q_dtype="fp8_e4m3", q_scale) in the same
           launch as the KV row
  ropekv_zero_copy, ropekv_inplace, ropekv_none  the other q forms (those the spec lists): zero_copy writes
           only q_out[..., L:] (q_nope already sits in q_out[..., :L]), inplace rotates q_pe where it lies,
           none writes the KV row only; ropekv_zero_copy_fp8q and ropekv_inplace_fp8q the same with an fp8
           query output. Each has its own bytes moved; they have no peer here
  triton   a fused Triton kernel written here: grid (T, H + 1), one program per (token, head) and one per
           token for the KV row, fp32 math
  triton_pdl  the same Triton kernel with gdc_wait / gdc_launch_dependents at its start, launched with
           launch_pdl=True: the peer given the same launch overlap as ropekv
  ropekv_prefetch, triton_prefetch  both with PDL, reading positions and the cos/sin rows before the wait
           (ropekv's Context(pdl_prefetch=True): valid when the kernel before does not write them); these
           two are compared with each other only
  triton_fp8q, triton_fp8q_pdl  a second fused Triton kernel, the same job as ropekv_fp8q in one launch:
           fp8 query (absorbed) and KV row, with ropekv's arithmetic (an explicit fma for the rope,
           tl.div_rn for the scale's reciprocal or quotient, clamp, round to nearest even): expected
           bit-identical to the reference; without and with PDL
  aiter    (ROCm, where aiter imports) aiter's fused_qk_rope_cat_and_cache_mla given our tensors (aiter_args):
           the same job as ropekv (absorbed, bf16 query), checked with the peers' tolerance
  compile  torch.compile of the unfused PyTorch sequence below
  eager    the unfused PyTorch sequence engines ran: rope on q_pe and k_pe with torch ops, torch.cat for
           q_out and the KV row, the fp8 cast, index_copy_ into the cache (negative slots masked to a
           scratch row)
  eager_fp8q, compile_fp8q  the same sequence followed by the query's quantization (q_out scaled by the
           spec's convention, clamped, cast to float8_e4m3fn), as engines quantize the bf16 query
Before it is timed every method is checked against one reference computed here in PyTorch, per shape, that
does ropekv's arithmetic exactly (docs/numerics.md: x1*s rounded to float32, then one fma, emulated in
float64): the q_nope / k_nope parts must be bit-identical (an fp8 query's q_nope part: within one fp8 step,
for a peer whose reciprocal of q_scale is not correctly rounded), and each rope element bit-identical or
within one bf16 (fp8) step of max(|expected|, |x0*c| + |x1*s|) - the error bound of the peers' two-rounding
x0*c - x1*s, which can be many steps of a result that cancels. A method that fails is reported WRONG and
not timed. 'bit-identical' in the table is ropekv's fraction of codes equal to the reference's (100%
expected); the csv has it for every method.

Timing: CALLS calls captured in one CUDA graph (a hipGraph under ROCm PyTorch), replayed REPS times, the median
per-call time (when a capture fails: back-to-back launches timed with CUDA events, marked *). Each replay is queued behind
~0.5 ms of GPU spinning (torch.cuda._sleep), so the start event is taken when the GPU reaches it rather
than while the host is still submitting the replay. Floors in the same run: an empty
kernel, a kernel that reads 16 B and writes 16 B, and the device copy bandwidth (a 2 GiB copy, bytes read +
written / time). limit = max(round-trip floor, bytes moved / copy bandwidth), the bytes the op moves
being (q_nope + q_pe read, q_out written, k_nope + k_pe read, KV row written, positions + slots +
cos/sin rows read). Per shape, "copy us" is a device copy of half those bytes (so the same bytes read +
written) timed the same way: what this device achieves moving this much data in one call, the fairer
bar at mid sizes where launch ramp-up and tail are a visible part of a call. Per method, "BW %" is the
bytes that method's job moves (its q form and q dtype: see op_bytes) / its time / the copy bandwidth.

--mode v32: ropekv's deepseek_v32 fp8_tile paged writer (q forms absorbed and none) against a Triton kernel doing the
same job in one launch (triton_v32, triton_v32_pdl, triton_v32_none), torch.compile and the eager sequence (see
main_job, bench/README.md). --mode read: ropekv's read-back kernels (fp8_tile paged, fp8_e4m3 and bf16 flat) against
a Triton gather + dequant kernel, torch.compile and eager. Both check every method against a PyTorch reference of the
job and compare the Triton peers' outputs with ropekv's byte for byte.

The fused kv_a RMSNorm section (write mode: after the main sweep of a default or --quick run, alone with --norm): the
absorbed op with DeepSeek-V3's kv_a_layernorm on the raw c_kv, ropekv norm="rms" (one launch; ropekv_norm_out:
norm="rms_out") against a Triton RMSNorm kernel + ropekv norm none (two launches; torch eager RMSNorm where Triton is
missing), the eager sequence with the RMSNorm in torch, and ropekv norm none on the already-normalized input (the
baseline: the goal is the fused op within 5% of it at every shape). Checked before timed: the fused cache and q_out
equal, bit for bit, ropekv norm none's on k_nope := the fused op's norm_out; the peers within NORM_PEER_STEPS.

Under ROCm PyTorch (torch.version.hip set, torch.cuda is HIP) the same code runs on the AMD GPU; what has no AMD
counterpart is reported n/a with the reason: the Triton PDL methods (NVIDIA sm_90+), and on a target whose fp8 is
FNUZ (gfx942) the ropekv fp8 methods (this script checks OCP e4m3).

--cpu runs the PyTorch methods (eager, eager_fp8q) and the ropekv methods (the host backend: the kernels compiled
for the CPU) with the checks on the CPU at the given shapes, with CPU times and a CPU copy bandwidth: a check of
the script (inputs, reference, checks, tables) and of the host backend against the reference, not numbers."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the mla package beside this file

from mla.main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
