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
import argparse
import csv
import datetime
import importlib
import os
import re
import statistics
import sys
import time
import traceback

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))

L, R, W = 512, 64, 576
MAX_POS = 4096
FP8_MAX = 448.0
K_SCALE = 0.5
Q_SCALE = 0.0123  # the fp8 query's per-tensor scale: about max |q| / 448 for the bf16 randn query
BLOCK_SIZE = 16

# The fp8 policies of the specs benchmarked (specs/<name>.lua: L = 512, R = 64, GPT-J, f32_cat for both). The
# spec's policy is the definition: main() compares these with the ropekv kernels' info and takes the library's.
SPECS = {
    "deepseek_v3": dict(kv_scale="mul_recip", kv_rr=False, q_scale="mul_recip", q_rr=False, q_sat=FP8_MAX,
                        q_forms=("absorbed", "zero_copy", "none")),
    "kimi_k2": dict(kv_scale="div", kv_rr=False, q_scale="div", q_rr=True, q_sat=FP8_MAX,
                    q_forms=("absorbed", "inplace")),
}
SCALE_CONV = {"none": 0, "mul_recip": 1, "div": 2, "mul": 3}  # the Triton kernel's constexpr

ALL_T = [1, 4, 16, 64, 128, 512, 2048, 8192, 32768]
ALL_H = [16, 128]
ALL_KV = ["bf16", "fp8_e4m3"]
# method -> (q form, fp8 query): what its job is, hence its bytes moved and how it is checked
FORMS = {
    "ropekv": ("absorbed", False), "ropekv_nopdl": ("absorbed", False), "ropekv_prefetch": ("absorbed", False),
    "ropekv_fp8q": ("absorbed", True), "ropekv_zero_copy": ("zero_copy", False),
    "ropekv_zero_copy_fp8q": ("zero_copy", True), "ropekv_inplace": ("inplace", False),
    "ropekv_inplace_fp8q": ("inplace", True), "ropekv_none": ("none", False),
    "triton": ("absorbed", False), "triton_pdl": ("absorbed", False), "triton_prefetch": ("absorbed", False),
    "triton_fp8q": ("absorbed", True), "triton_fp8q_pdl": ("absorbed", True),
    "compile": ("absorbed", False), "eager": ("absorbed", False), "aiter": ("absorbed", False),
    "compile_fp8q": ("absorbed", True), "eager_fp8q": ("absorbed", True),
}
ALL_METHODS = list(FORMS)
PEERS = ["triton", "triton_pdl", "compile", "eager", "aiter"]
PREFETCH_PEERS = ["triton_prefetch"]  # compared with ropekv_prefetch only (the same contract)
FP8Q_PEERS = ["triton_fp8q", "triton_fp8q_pdl", "compile_fp8q", "eager_fp8q"]  # compared with ropekv_fp8q
CPU_METHODS = ["eager", "eager_fp8q"] + [m for m in FORMS if m.startswith("ropekv")]  # what --cpu can run

# --mode v32: DeepSeek-V3.2's writer, the fp8_tile row (656 bytes: 4 tiles of 128 fp8 latent values, their 4 float32
# scales, the 64 rope values in bf16) in a paged cache; method -> its q form
TILE, ROW_BYTES, SCALES_AT, ROPE_AT = 128, 656, 512, 528
NTILES = L // TILE
FLT_MIN = 2.0 ** -126
V32_BLOCK = 64  # vLLM's block size for DeepSeek-V3.2's fp8_ds_mla cache
V32_FORMS = {"ropekv_v32": "absorbed", "ropekv_v32_none": "none", "triton_v32": "absorbed",
             "triton_v32_pdl": "absorbed", "triton_v32_none": "none", "compile_v32": "absorbed",
             "eager_v32": "absorbed", "eager_v32_none": "none"}
# --mode read: rows gathered by slot and dequantized to bf16 [T, 576]; kv dtype -> (spec, layout) read
READ_KV = {"fp8_tile": ("deepseek_v32", "paged"), "fp8_e4m3": ("deepseek_v3", "flat"), "bf16": ("deepseek_v3", "flat")}
READ_METHODS = ["ropekv_read", "triton_read", "triton_read_pdl", "compile_read", "eager_read"]
# per ropekv method of these modes: the peers doing the same job (its "vs best peer" column)
JOB_PEERS = {"ropekv_v32": ["triton_v32", "triton_v32_pdl", "compile_v32", "eager_v32"],
             "ropekv_v32_none": ["triton_v32_none", "eager_v32_none"],
             "ropekv_read": ["triton_read", "triton_read_pdl", "compile_read", "eager_read"]}
# the Triton peers whose outputs must equal ropekv's byte for byte (the same arithmetic)
SAME_AS = {"triton_v32": "ropekv_v32", "triton_v32_pdl": "ropekv_v32", "triton_v32_none": "ropekv_v32_none",
           "triton_read": "ropekv_read", "triton_read_pdl": "ropekv_read"}
MODE_METHODS = {"write": ALL_METHODS, "v32": list(V32_FORMS), "read": READ_METHODS}
# the fused kv_a RMSNorm section (write mode, absorbed bf16 query, --spec's kv_norm): the fused op, its peers, and ropekv
# without the norm on the already-normalized input (the baseline of the goal: fused within NORM_GOAL of it)
NORM_METHODS = ["ropekv_norm", "ropekv_norm_out", "rmsnorm_ropekv", "eager_norm", "ropekv_nonorm"]
NORM_PEERS = ["rmsnorm_ropekv", "eager_norm"]
NORM_GOAL = 1.05
# a peer's normalized values against the fused op's: its RMSNorm sums in another order (and may use an approximate
# rsqrt), so r differs by a few float32 ulps; bf16(x * r) can then land one bf16 step away, and after * w that is at
# most 2 bf16 steps of the result (less than 2 ulps of it before the last rounding); an fp8 cache's code at most 1 fp8
# step (2 bf16 steps are far below one fp8 step: one rounding boundary crossed at most)
NORM_PEER_STEPS = {"bf16": 2, "fp8": 1}

T0 = time.time()
torch = None  # imported in main(), so that --help and py_compile work without torch
# The GPU torch.cuda drives: NVIDIA (CUDA PyTorch) or AMD (ROCm PyTorch, where torch.cuda is HIP, torch.version.hip
# is set, and torch.cuda.CUDAGraph / Event are hipGraph / hipEvent behind the same calls). Set by main().
GPU = {"backend": "cuda", "runtime": "-"}
PDL_ONLY = ("programmatic dependent launch (Triton's gdc_wait / gdc_launch_dependents, launch_pdl) is NVIDIA sm_90+ "
            "only: n/a under ROCm")
rkref = None  # ropekv.reference (ropekv's arithmetic in PyTorch), imported with torch


def log(msg):
    print("[%7.1fs] %s" % (time.time() - T0, msg), flush=True)


def gpu_platform(torch):
    """(ropekv backend, runtime label) of the GPU torch.cuda drives: ("hip", "HIP 6.4.x") under ROCm PyTorch,
    ("cuda", "CUDA 12.8") under CUDA PyTorch."""
    hip = getattr(torch.version, "hip", None)
    return ("hip", "HIP %s" % hip) if hip else ("cuda", "CUDA %s" % torch.version.cuda)


def rk_backend(cpu):
    """The ropekv backend of this run: the host backend with --cpu, else the GPU's."""
    return "host" if cpu else GPU["backend"]


def require_pdl():
    """A PDL method's first step: raises (the method is reported n/a with the reason) where there is no PDL."""
    if GPU["backend"] != "cuda":
        raise RuntimeError(PDL_ONLY)


def default_methods(spec):
    """Every method whose q form the spec lists."""
    return [m for m in ALL_METHODS if FORMS[m][0] in SPECS[spec]["q_forms"]]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=os.path.join(ROOT, "bench", "results"), help="directory for .md, .csv, .png")
    p.add_argument("--mode", default="write", choices=sorted(MODE_METHODS),
                   help="write: the fused write of --spec (default); v32: DeepSeek-V3.2's fp8_tile paged writer; "
                        "read: the read-back op (rows gathered by slot, dequantized to bf16)")
    p.add_argument("--block-size", type=int, default=V32_BLOCK,
                   help="entries per block of the paged caches of --mode v32 and read (default %d)" % V32_BLOCK)
    p.add_argument("--quick", action="store_true", help="T in {1, 128, 2048}, H = 16, kv bf16")
    p.add_argument("--spec", default="deepseek_v3", choices=sorted(SPECS),
                   help="the ropekv spec benchmarked: its q forms and fp8 policies (default deepseek_v3)")
    p.add_argument("--methods", default=None,
                   help="comma list of %s (default: every method whose q form the spec lists)" % ", ".join(ALL_METHODS))
    p.add_argument("--T", default=None, help="comma list of token counts (default: the full sweep)")
    p.add_argument("--H", default=None, help="comma list of head counts")
    p.add_argument("--kv", default=None, help="comma list of bf16, fp8_e4m3 (--mode read: and fp8_tile)")
    p.add_argument("--q-scale", type=float, default=Q_SCALE, help="the fp8 query's scale (default %g)" % Q_SCALE)
    p.add_argument("--calls", type=int, default=50, help="calls per CUDA graph")
    p.add_argument("--reps", type=int, default=5, help="graph replays (the median is reported)")
    p.add_argument("--compile-mode", default="default",
                   help="torch.compile mode (default, max-autotune-no-cudagraphs, ...)")
    p.add_argument("--compile-dynamic", default="auto", choices=["auto", "true", "false"],
                   help="torch.compile dynamic= (auto: PyTorch's automatic dynamic shapes, fewest recompiles)")
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--cpu", action="store_true",
                   help="check the script on the CPU: eager, eager_fp8q and the ropekv methods (host backend) "
                        "against the reference, CPU times (not numbers)")
    p.add_argument("--norm", action="store_true",
                   help="run only the fused kv_a RMSNorm section (write mode): ropekv's norm='rms' against RMSNorm + "
                        "ropekv, the unfused PyTorch sequence and ropekv without the norm")
    p.add_argument("--no-norm", action="store_true", help="skip the norm section")
    p.add_argument("--norm-methods", default=None,
                   help="comma list of %s (default: all; the norm section then also runs after a --methods sweep)"
                        % ", ".join(NORM_METHODS))
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--tag", default="", help="suffix for the output file names (e.g. when a sweep is split)")
    a = p.parse_args(argv)
    ints = lambda s: [int(v) for v in s.split(",") if v.strip()]  # noqa: E731
    a.T_list = ints(a.T) if a.T else ([1, 128, 2048] if a.quick else ALL_T)
    a.H_list = ints(a.H) if a.H else ([16] if a.quick else ALL_H)
    known_kv = {"write": ALL_KV, "v32": ["fp8_tile"], "read": list(READ_KV)}[a.mode]
    if a.mode == "v32":
        a.kv_list = ["fp8_tile"]  # the job's cache
    elif a.mode == "read":
        a.H_list = [1]  # no heads: the op reads cache rows
        a.kv_list = [v.strip() for v in a.kv.split(",")] if a.kv else list(READ_KV)
    else:
        a.kv_list = [v.strip() for v in a.kv.split(",")] if a.kv else (["bf16"] if a.quick else ALL_KV)
    known = MODE_METHODS[a.mode]
    cpu_ok = CPU_METHODS if a.mode == "write" else [m for m in known if m.startswith(("ropekv", "eager"))]
    if a.methods:
        a.method_list = [m.strip() for m in a.methods.split(",") if m.strip()]
    elif a.mode == "write":
        a.method_list = [m for m in default_methods(a.spec) if not a.cpu or m in CPU_METHODS]
    else:
        a.method_list = [m for m in known if not a.cpu or m in cpu_ok]
    for m in a.method_list:
        if m not in known:
            p.error("unknown method %r for --mode %s (known: %s)" % (m, a.mode, ", ".join(known)))
        if a.cpu and m not in cpu_ok:
            p.error("--cpu runs the eager and ropekv methods only, not %r" % m)
    for kv in a.kv_list:
        if kv not in known_kv:
            p.error("unknown kv %r for --mode %s (known: %s)" % (kv, a.mode, ", ".join(known_kv)))
    if a.block_size < 1:
        p.error("--block-size must be >= 1")
    if not a.q_scale > 0:
        p.error("--q-scale must be > 0")
    # the norm section (write mode): after the main sweep in a default or --quick run; only it with --norm; after a
    # --methods sweep when --norm-methods asks for it; never with --no-norm
    if (a.norm or a.norm_methods) and a.mode != "write":
        p.error("--norm and --norm-methods are for --mode write")
    if a.norm and a.no_norm:
        p.error("--norm and --no-norm exclude each other")
    a.norm_only = a.norm
    a.norm_on = a.mode == "write" and not a.no_norm and (a.norm or not a.methods or bool(a.norm_methods))
    a.norm_method_list = ([m.strip() for m in a.norm_methods.split(",") if m.strip()] if a.norm_methods
                          else list(NORM_METHODS))
    for m in a.norm_method_list:
        if m not in NORM_METHODS:
            p.error("unknown norm method %r (known: %s)" % (m, ", ".join(NORM_METHODS)))
    # the norm section's KV dtypes: --kv where given, else bf16 and fp8_e4m3 (--quick too)
    a.norm_kv_list = [v.strip() for v in a.kv.split(",")] if a.kv and a.mode == "write" else list(ALL_KV)
    if a.norm_only:
        a.method_list = []
    return a


def op_bytes(T, H, kv_fp8, form="absorbed", q_fp8=False):
    """The bytes one call's job moves at least: the query part of its q form (absorbed: q_nope + q_pe read,
    q_out written; zero_copy: q_pe read, q_out[..., L:] written; inplace: q_pe read and written back, fp8: R
    bytes a row; none: nothing), an fp8 query writing 1 byte an element instead of 2; then k_nope + k_pe read,
    the KV row written (1 or 2 bytes an element), positions + slots (int64) and the cos/sin rows (f32) read."""
    qb = 1 if q_fp8 else 2
    q = {"absorbed": T * H * (L + R) * 2 + T * H * W * qb,
         "zero_copy": T * H * R * 2 + T * H * R * qb,
         "inplace": T * H * R * 2 + T * H * R * qb,
         "none": 0}[form]
    kvb = 1 if kv_fp8 else 2
    return q + T * (L + R) * 2 + T * W * kvb + T * 8 * 2 + T * R * 4


def method_bytes(T, H, kv, method):
    form, q_fp8 = FORMS[method]
    return op_bytes(T, H, kv == "fp8_e4m3", form, q_fp8)


def bw_pct(nbytes, us, copy_Bps):
    """Bytes moved per second as a fraction of the copy bandwidth, in %; None without a time."""
    if not us or not copy_Bps:
        return None
    return 100.0 * nbytes / (us * 1e-6) / copy_Bps


# ---- fp8 e4m3 (OCP) codes without a float8 dtype (for --cpu on a torch without one) -----------------------------
def _has_float8():
    return hasattr(torch, "float8_e4m3fn")


def to_fp8(x):
    """x (float32, clamped) cast to float8_e4m3fn; uint8 codes of the same bits where torch has no float8."""
    if _has_float8():
        return x.to(torch.float8_e4m3fn)
    return rkref.e4m3_codes(x)


def fp8_dtype():
    return torch.float8_e4m3fn if _has_float8() else torch.uint8


# ---- the peers ------------------------------------------------------------------------------------------------
def _rope_gptj(x, cos, sin):
    """GPT-J (interleaved) rope of a bf16 tensor in fp32, back to bf16: pairs through view_as pairs + stack."""
    xf = x.float().unflatten(-1, (-1, 2))
    x0, x1 = xf[..., 0], xf[..., 1]
    return torch.stack((x0 * cos - x1 * sin, x1 * cos + x0 * sin), dim=-1).flatten(-2).to(torch.bfloat16)


def mla_rope_kv_unfused(q_nope, q_pe, k_nope, k_pe, positions, slots, cos_sin_cache, kv_cache, k_scale, fp8: bool,
                        kv_conv: str = "mul_recip"):
    """The unfused sequence: returns q_out [T, H, 576]; writes the KV rows into kv_cache (its last row is a
    scratch row that padding tokens (slot < 0) are sent to, so no host sync is needed to mask them)."""
    cos_sin = cos_sin_cache.index_select(0, positions)
    cos, sin = cos_sin.chunk(2, dim=-1)
    q_rot = _rope_gptj(q_pe, cos.unsqueeze(1), sin.unsqueeze(1))
    k_rot = _rope_gptj(k_pe, cos, sin)
    q_out = torch.cat([q_nope, q_rot], dim=-1)
    kv = torch.cat([k_nope, k_rot], dim=-1)
    flat = kv_cache.view(-1, kv_cache.shape[-1])
    if fp8:
        kv = to_fp8(rkref.scale(kv.float(), kv_conv, k_scale).clamp(-FP8_MAX, FP8_MAX)).view(torch.uint8)
        flat = flat.view(torch.uint8)
    idx = torch.where(slots >= 0, slots, flat.shape[0] - 1)
    flat.index_copy_(0, idx, kv)
    return q_out


def mla_rope_kv_unfused_fp8q(q_nope, q_pe, k_nope, k_pe, positions, slots, cos_sin_cache, kv_cache, k_scale,
                             fp8: bool, q_scale, q_conv: str, q_sat: float, kv_conv: str = "mul_recip"):
    """The unfused sequence, then the query quantized as engines do it: the bf16 q_out scaled by q_scale with the
    spec's convention, clamped to +-q_sat, cast to float8_e4m3fn. Returns the fp8 q_out [T, H, 576]."""
    q_out = mla_rope_kv_unfused(q_nope, q_pe, k_nope, k_pe, positions, slots, cos_sin_cache, kv_cache, k_scale, fp8,
                                kv_conv)
    return to_fp8(rkref.scale(q_out.float(), q_conv, q_scale).clamp(-q_sat, q_sat))


_TRITON = {}


def triton_kernels():
    """The Triton kernels (defined on first use so that the module imports without Triton)."""
    if _TRITON:
        return _TRITON
    import triton
    import triton.language as tl

    @triton.jit
    def mla_rope_kv_kernel(q_nope_ptr, q_pe_ptr, q_out_ptr, k_nope_ptr, k_pe_ptr, kv_ptr, pos_ptr, slot_ptr, cs_ptr,
                           k_scale_ptr, q_nope_st, q_nope_sh, q_pe_st, q_pe_sh, q_out_st, q_out_sh, k_nope_st,
                           k_pe_st, kv_st, H, L: tl.constexpr, R: tl.constexpr, FP8: tl.constexpr,
                           FP8_MAX: tl.constexpr, USE_GDC: tl.constexpr, PREFETCH: tl.constexpr):
        if USE_GDC and not PREFETCH:  # PDL: wait for the previous grid before any memory access
            tl.extra.cuda.gdc_wait()
            tl.extra.cuda.gdc_launch_dependents()
        t = tl.program_id(0).to(tl.int64)
        h = tl.program_id(1)
        HALF: tl.constexpr = R // 2
        pos = tl.load(pos_ptr + t).to(tl.int64)
        i = tl.arange(0, HALF)
        c = tl.load(cs_ptr + pos * R + i)
        s = tl.load(cs_ptr + pos * R + HALF + i)
        if USE_GDC and PREFETCH:  # positions and cos/sin read before the wait
            tl.extra.cuda.gdc_wait()
            tl.extra.cuda.gdc_launch_dependents()
        nope = tl.arange(0, L)
        pe = tl.arange(0, R)
        if h < H:
            hh = h.to(tl.int64)
            dst = q_out_ptr + t * q_out_st + hh * q_out_sh
            tl.store(dst + nope, tl.load(q_nope_ptr + t * q_nope_st + hh * q_nope_sh + nope))
            xr = tl.load(q_pe_ptr + t * q_pe_st + hh * q_pe_sh + pe).to(tl.float32)
            x0, x1 = tl.split(tl.reshape(xr, (HALF, 2)))
            y = tl.interleave(x0 * c - x1 * s, x1 * c + x0 * s)
            tl.store(dst + L + pe, y.to(tl.bfloat16))
        else:
            slot = tl.load(slot_ptr + t).to(tl.int64)
            if slot >= 0:
                row = kv_ptr + slot * kv_st
                xn = tl.load(k_nope_ptr + t * k_nope_st + nope)
                xr = tl.load(k_pe_ptr + t * k_pe_st + pe).to(tl.float32)
                x0, x1 = tl.split(tl.reshape(xr, (HALF, 2)))
                y = tl.interleave(x0 * c - x1 * s, x1 * c + x0 * s)
                if FP8:
                    inv = 1.0 / tl.load(k_scale_ptr)
                    vn = tl.minimum(tl.maximum(xn.to(tl.float32) * inv, -FP8_MAX), FP8_MAX)
                    vr = tl.minimum(tl.maximum(y * inv, -FP8_MAX), FP8_MAX)
                    tl.store(row + nope, vn.to(tl.float8e4nv))
                    tl.store(row + L + pe, vr.to(tl.float8e4nv))
                else:
                    tl.store(row + nope, xn)
                    tl.store(row + L + pe, y.to(tl.bfloat16))

    @triton.jit
    def mla_rope_kv_fp8q_kernel(q_nope_ptr, q_pe_ptr, q_out_ptr, k_nope_ptr, k_pe_ptr, kv_ptr, pos_ptr, slot_ptr,
                                cs_ptr, k_scale_ptr, q_scale_ptr, q_nope_st, q_nope_sh, q_pe_st, q_pe_sh, q_out_st,
                                q_out_sh, k_nope_st, k_pe_st, kv_st, H, L: tl.constexpr, R: tl.constexpr,
                                FP8: tl.constexpr, FP8_MAX: tl.constexpr, KV_CONV: tl.constexpr, KV_RR: tl.constexpr,
                                Q_SAT: tl.constexpr, Q_CONV: tl.constexpr, Q_RR: tl.constexpr,
                                USE_GDC: tl.constexpr):
        # The same job as ropekv's absorbed form with an fp8 query, in ropekv's arithmetic: the rope as
        # fma(x0, c, -(x1*s)) / fma(x1, c, x0*s) (the products rounded, explicit fmas: nothing left to contract),
        # the rope rounded to bf16 first where the policy says so, the scale by the convention (a correctly
        # rounded reciprocal or quotient: tl.div_rn, where "/" would be div.full), clamp (NaN passes), then
        # cvt.rn.satfinite to e4m3. Conventions: 0 none, 1 mul_recip, 2 div, 3 mul.
        if USE_GDC:  # PDL: wait for the previous grid before any memory access
            tl.extra.cuda.gdc_wait()
            tl.extra.cuda.gdc_launch_dependents()
        t = tl.program_id(0).to(tl.int64)
        h = tl.program_id(1)
        HALF: tl.constexpr = R // 2
        pos = tl.load(pos_ptr + t).to(tl.int64)
        i = tl.arange(0, HALF)
        c = tl.load(cs_ptr + pos * R + i)
        s = tl.load(cs_ptr + pos * R + HALF + i)
        nope = tl.arange(0, L)
        pe = tl.arange(0, R)
        if h < H:
            hh = h.to(tl.int64)
            vn = tl.load(q_nope_ptr + t * q_nope_st + hh * q_nope_sh + nope).to(tl.float32)
            xr = tl.load(q_pe_ptr + t * q_pe_st + hh * q_pe_sh + pe).to(tl.float32)
            x0, x1 = tl.split(tl.reshape(xr, (HALF, 2)))
            vr = tl.interleave(tl.fma(x0, c, -(x1 * s)), tl.fma(x1, c, x0 * s))
            if Q_RR:
                vr = vr.to(tl.bfloat16).to(tl.float32)
            qs = tl.load(q_scale_ptr)
            if Q_CONV == 1:
                inv = tl.div_rn(1.0, qs)
                vn = vn * inv
                vr = vr * inv
            elif Q_CONV == 2:
                vn = tl.div_rn(vn, qs)
                vr = tl.div_rn(vr, qs)
            elif Q_CONV == 3:
                vn = vn * qs
                vr = vr * qs
            vn = tl.clamp(vn, -Q_SAT, Q_SAT, propagate_nan=tl.PropagateNan.ALL)
            vr = tl.clamp(vr, -Q_SAT, Q_SAT, propagate_nan=tl.PropagateNan.ALL)
            dst = q_out_ptr + t * q_out_st + hh * q_out_sh
            tl.store(dst + nope, vn.to(tl.float8e4nv))
            tl.store(dst + L + pe, vr.to(tl.float8e4nv))
        else:
            slot = tl.load(slot_ptr + t).to(tl.int64)
            if slot >= 0:
                row = kv_ptr + slot * kv_st
                xn = tl.load(k_nope_ptr + t * k_nope_st + nope)
                xr = tl.load(k_pe_ptr + t * k_pe_st + pe).to(tl.float32)
                x0, x1 = tl.split(tl.reshape(xr, (HALF, 2)))
                y = tl.interleave(tl.fma(x0, c, -(x1 * s)), tl.fma(x1, c, x0 * s))
                if FP8:
                    if KV_RR:
                        y = y.to(tl.bfloat16).to(tl.float32)
                    vn = xn.to(tl.float32)
                    ks = tl.load(k_scale_ptr)
                    if KV_CONV == 1:
                        kinv = tl.div_rn(1.0, ks)
                        vn = vn * kinv
                        y = y * kinv
                    elif KV_CONV == 2:
                        vn = tl.div_rn(vn, ks)
                        y = tl.div_rn(y, ks)
                    elif KV_CONV == 3:
                        vn = vn * ks
                        y = y * ks
                    vn = tl.clamp(vn, -FP8_MAX, FP8_MAX, propagate_nan=tl.PropagateNan.ALL)
                    y = tl.clamp(y, -FP8_MAX, FP8_MAX, propagate_nan=tl.PropagateNan.ALL)
                    tl.store(row + nope, vn.to(tl.float8e4nv))
                    tl.store(row + L + pe, y.to(tl.float8e4nv))
                else:
                    tl.store(row + nope, xn)
                    tl.store(row + L + pe, y.to(tl.bfloat16))

    @triton.jit
    def v32_write_kernel(q_nope_ptr, q_pe_ptr, q_out_ptr, k_nope_ptr, k_pe_ptr, cache_ptr, pos_ptr, slot_ptr, cs_ptr,
                         q_nope_st, q_nope_sh, q_pe_st, q_pe_sh, q_out_st, q_out_sh, k_nope_st, k_pe_st, block_size,
                         block_st, entry_st, H, L: tl.constexpr, R: tl.constexpr, TILE: tl.constexpr,
                         NT: tl.constexpr, SCALES_AT: tl.constexpr, ROPE_AT: tl.constexpr, FP8_MAX: tl.constexpr,
                         SCALE_MIN: tl.constexpr, USE_GDC: tl.constexpr):
        # DeepSeek-V3.2's writer in one launch, grid (T, H + 1) (q form none: (T, 1) with H = 0): a program per
        # (token, head) writes the absorbed query row, one per token the 656-byte fp8_tile row of its paged slot:
        # per tile of 128 latent values scale = max(amax / 448, FLT_MIN) and fp8(x / scale), both correctly
        # rounded divisions (tl.div_rn), the float32 scales after the 512 codes, then the rope part in bf16. The
        # rope is ropekv's (explicit fmas on rounded products), so every byte is expected equal to ropekv's.
        if USE_GDC:  # PDL: wait for the previous grid before any memory access
            tl.extra.cuda.gdc_wait()
            tl.extra.cuda.gdc_launch_dependents()
        t = tl.program_id(0).to(tl.int64)
        h = tl.program_id(1)
        HALF: tl.constexpr = R // 2
        pos = tl.load(pos_ptr + t).to(tl.int64)
        i = tl.arange(0, HALF)
        c = tl.load(cs_ptr + pos * R + i)
        s = tl.load(cs_ptr + pos * R + HALF + i)
        nope = tl.arange(0, L)
        pe = tl.arange(0, R)
        if h < H:
            hh = h.to(tl.int64)
            dst = q_out_ptr + t * q_out_st + hh * q_out_sh
            tl.store(dst + nope, tl.load(q_nope_ptr + t * q_nope_st + hh * q_nope_sh + nope))
            xr = tl.load(q_pe_ptr + t * q_pe_st + hh * q_pe_sh + pe).to(tl.float32)
            x0, x1 = tl.split(tl.reshape(xr, (HALF, 2)))
            y = tl.interleave(tl.fma(x0, c, -(x1 * s)), tl.fma(x1, c, x0 * s))
            tl.store(dst + L + pe, y.to(tl.bfloat16))
        else:
            slot = tl.load(slot_ptr + t).to(tl.int64)
            if slot >= 0:
                row = cache_ptr + (slot // block_size) * block_st + (slot % block_size) * entry_st
                tiles = tl.arange(0, NT)[:, None] * TILE + tl.arange(0, TILE)[None, :]
                x = tl.load(k_nope_ptr + t * k_nope_st + tiles).to(tl.float32)
                ax = tl.where(x == x, tl.abs(x), 0.0)  # amax ignoring NaN
                amax = tl.max(ax, axis=1)
                scale = tl.maximum(tl.div_rn(amax, tl.full([NT], FP8_MAX, tl.float32)), SCALE_MIN)
                v = tl.div_rn(x, tl.broadcast_to(scale[:, None], (NT, TILE)))
                v = tl.clamp(v, -FP8_MAX, FP8_MAX, propagate_nan=tl.PropagateNan.ALL)
                tl.store(row + tiles, v.to(tl.float8e4nv).to(tl.uint8, bitcast=True))
                tl.store((row + SCALES_AT).to(tl.pointer_type(tl.float32)) + tl.arange(0, NT), scale)
                xr = tl.load(k_pe_ptr + t * k_pe_st + pe).to(tl.float32)
                x0, x1 = tl.split(tl.reshape(xr, (HALF, 2)))
                y = tl.interleave(tl.fma(x0, c, -(x1 * s)), tl.fma(x1, c, x0 * s))
                tl.store((row + ROPE_AT).to(tl.pointer_type(tl.bfloat16)) + pe, y.to(tl.bfloat16))

    @triton.jit
    def read_rows_kernel(cache_ptr, slot_ptr, out_ptr, k_scale_ptr, rows, block_size, block_st, entry_st, out_st,
                         L: tl.constexpr, R: tl.constexpr, KIND: tl.constexpr, SCALE_OP: tl.constexpr,
                         TILE: tl.constexpr, NT: tl.constexpr, SCALES_AT: tl.constexpr, ROPE_AT: tl.constexpr,
                         USE_GDC: tl.constexpr):
        # The read-back in one launch, a program per token: out[t] = the row of slots[t] (paged addressing; a flat
        # cache is blocks of one row) as bf16, zeros for a slot outside [0, rows). KIND 0: a bf16 row copied;
        # 1: fp8 e4m3 bytes, value * k_scale (SCALE_OP 1) or value / k_scale (2, tl.div_rn) or value (0);
        # 2: the fp8_tile row, value * its tile's float32 scale, the bf16 rope part copied. Each value is one
        # float32 operation rounded to bf16, so every element is expected equal to ropekv's.
        if USE_GDC:
            tl.extra.cuda.gdc_wait()
            tl.extra.cuda.gdc_launch_dependents()
        t = tl.program_id(0).to(tl.int64)
        slot = tl.load(slot_ptr + t).to(tl.int64)
        dst = out_ptr + t * out_st
        nope = tl.arange(0, L)
        pe = tl.arange(0, R)
        if (slot >= 0) & (slot < rows):
            row = cache_ptr + (slot // block_size) * block_st + (slot % block_size) * entry_st
            if KIND == 0:
                tl.store(dst + nope, tl.load(row + nope))
                tl.store(dst + L + pe, tl.load(row + L + pe))
            elif KIND == 1:
                vn = tl.load(row + nope).to(tl.float8e4nv, bitcast=True).to(tl.float32)
                vr = tl.load(row + L + pe).to(tl.float8e4nv, bitcast=True).to(tl.float32)
                if SCALE_OP == 1:
                    ks = tl.load(k_scale_ptr)
                    vn = vn * ks
                    vr = vr * ks
                elif SCALE_OP == 2:
                    ks = tl.load(k_scale_ptr)
                    vn = tl.div_rn(vn, tl.full([L], 1.0, tl.float32) * ks)
                    vr = tl.div_rn(vr, tl.full([R], 1.0, tl.float32) * ks)
                tl.store(dst + nope, vn.to(tl.bfloat16))
                tl.store(dst + L + pe, vr.to(tl.bfloat16))
            else:
                tiles = tl.arange(0, NT)[:, None] * TILE + tl.arange(0, TILE)[None, :]
                v = tl.load(row + tiles).to(tl.float8e4nv, bitcast=True).to(tl.float32)
                sc = tl.load((row + SCALES_AT).to(tl.pointer_type(tl.float32)) + tl.arange(0, NT))
                tl.store(dst + tiles, (v * sc[:, None]).to(tl.bfloat16))
                tl.store(dst + L + pe, tl.load((row + ROPE_AT).to(tl.pointer_type(tl.bfloat16)) + pe))
        else:
            tl.store(dst + nope, tl.zeros([L], dtype=tl.bfloat16))
            tl.store(dst + L + pe, tl.zeros([R], dtype=tl.bfloat16))

    @triton.jit
    def rmsnorm_kernel(x_ptr, w_ptr, out_ptr, x_st, out_st, eps, L: tl.constexpr, TWICE: tl.constexpr):
        # The separate RMSNorm of the norm section's rmsnorm_ropekv peer, as engines write it in Triton: a program per
        # token reads the first L values of its row of the [T, 576] projection (c_kv), r = rsqrt(mean(x^2) + eps)
        # in float32 (tl.sum's order, rsqrt.approx), writes bf16(bf16(x * r) * w) (TWICE, HF's and vLLM's) or
        # bf16(x * r * w) into the [T, L] bf16 buffer the ropekv launch then reads.
        t = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, L)
        x = tl.load(x_ptr + t * x_st + cols).to(tl.float32)
        r = tl.rsqrt(tl.sum(x * x, axis=0) / L + eps)
        y = x * r
        if TWICE:
            y = y.to(tl.bfloat16).to(tl.float32)
        w = tl.load(w_ptr + cols).to(tl.float32)
        tl.store(out_ptr + t * out_st + cols, (y * w).to(tl.bfloat16))

    @triton.jit
    def empty_kernel(x_ptr):
        pass

    @triton.jit
    def roundtrip_kernel(src_ptr, dst_ptr):
        o = tl.arange(0, 4)
        tl.store(dst_ptr + o, tl.load(src_ptr + o))

    _TRITON.update(mla=mla_rope_kv_kernel, mla_fp8q=mla_rope_kv_fp8q_kernel, v32=v32_write_kernel,
                   read=read_rows_kernel, rmsnorm=rmsnorm_kernel, empty=empty_kernel, roundtrip=roundtrip_kernel,
                   version=triton.__version__)
    return _TRITON


# ---- problem ----------------------------------------------------------------------------------------------------
class Problem:
    def __init__(self, torch, T, H, kv, dev, cos_sin_cache, k_scale, seed, q_scale=None, policy=None):
        self.torch, self.T, self.H, self.kv, self.dev = torch, T, H, kv, dev
        self.fp8 = kv == "fp8_e4m3"
        self.policy = policy if policy is not None else SPECS["deepseek_v3"]
        g = torch.Generator(device=dev).manual_seed(seed)
        bf = torch.bfloat16
        self.q = torch.randn(T, H, W, device=dev, dtype=bf, generator=g)
        self.q_nope, self.q_pe = self.q[..., :L], self.q[..., L:]
        self.proj = torch.randn(T, W, device=dev, dtype=bf, generator=g)
        self.k_nope, self.k_pe = self.proj[:, :L], self.proj[:, L:]
        self.positions = torch.randint(0, MAX_POS, (T,), device=dev, generator=g, dtype=torch.int64)
        self.blocks = (T + 1 + BLOCK_SIZE - 1) // BLOCK_SIZE
        self.rows = self.blocks * BLOCK_SIZE  # the last row is the eager sequence's scratch row
        self.slots = torch.randperm(self.rows - 1, device=dev, generator=g)[:T].to(torch.int64)
        self.cos_sin_cache = cos_sin_cache
        self.k_scale = k_scale
        self.q_scale = q_scale
        self.cache_dtype = fp8_dtype() if self.fp8 else bf
        self.ref = None  # the Reference, set before the methods run (zero_copy's q_out[..., :L] comes from it)

    def new_cache(self):
        return self.torch.zeros(self.blocks, BLOCK_SIZE, W, device=self.dev, dtype=self.cache_dtype)

    def new_q_out(self, q_fp8=False):
        dt = fp8_dtype() if q_fp8 else self.torch.bfloat16
        return self.torch.empty(self.T, self.H, W, device=self.dev, dtype=dt)

    def new_q_out_zero_copy(self, q_fp8=False):
        """q_out with q_nope already in [..., :L], as the absorption BMM leaves it (fp8: quantized with q_scale
        by the BMM's epilogue, here the reference's codes)."""
        q_out = self.new_q_out(q_fp8)
        if q_fp8:
            q_out.view(self.torch.uint8)[..., :L] = self.ref.q_nope8
        else:
            q_out[..., :L] = self.q_nope
        return q_out

    def new_q_pe(self):
        """A copy of the query for the inplace form (it rotates q_pe where it lies); its q_pe slice."""
        return self.q.clone()[..., L:]

    def bytes_moved(self, form="absorbed", q_fp8=False):
        return op_bytes(self.T, self.H, self.fp8, form, q_fp8)


def require_ocp(info):
    """The script's reference, checks and peers make OCP e4m3 (float8_e4m3fn); a target whose fp8 bytes are FNUZ
    (gfx942: MI300X) writes another format, so its fp8 kernels are reported n/a with this reason."""
    for what, fmt in (("cache", info.fp8_format), ("query", info.q_fp8_format)):
        if fmt == "fnuz":
            raise RuntimeError("%s: the fp8 %s of this target is FNUZ (e4m3fnuz); this script checks OCP e4m3 only"
                               % (info.key, what))


# ---- methods: each returns (fn, outputs) where fn() runs one call and outputs() gives a dict of its outputs ------
# ("q_out" for absorbed and zero_copy, "q_pe" for inplace, "cache" always)
def ropekv_kernel(state, ctx_key, form, q_fp8, kv, norm="none"):
    """The ropekv kernel of one variant on one of the script's contexts (made on first use); norm: the fused kv_a
    RMSNorm ("none", "rms", "rms_out")."""
    key = (ctx_key, form, q_fp8, kv, norm)
    k = state["kernels"].get(key)
    if k is None:
        ctx = state[ctx_key]
        t0 = time.perf_counter()
        kw = {"norm": norm} if norm != "none" else {}
        k = ctx.kernel(state["args"].spec, kv=kv, q=form, q_dtype="fp8_e4m3" if q_fp8 else "bf16", **kw)
        want = "fp8_e4m3" if q_fp8 and form != "none" else "bf16"
        if k.info.q_dtype != want or k.info.kv != kv or k.info.q != form or getattr(k.info, "norm", "none") != norm:
            raise RuntimeError("asked for q form %s, %s query, kv %s, norm %s; the library gave %s (%s)"
                               % (form, want, kv, norm, k.info.key, k.name))
        require_ocp(k.info)
        if ctx_key == "ctx":
            label = "%s%s, kv %s%s" % (form, " fp8 q" if q_fp8 else "", kv,
                                       ", norm %s" % norm if norm != "none" else "")
            state["meta"]["kernels"][label] = (k.name, (time.perf_counter() - t0) * 1e3)
        state["kernels"][key] = k
    return k


def method_ropekv(state, pb, ctx_key="ctx", form="absorbed", q_fp8=False):
    k = ropekv_kernel(state, ctx_key, form, q_fp8, pb.kv)
    cache = pb.new_cache()
    out = {"cache": cache}
    kw = dict(k_nope=pb.k_nope, k_pe=pb.k_pe, kv_cache=cache, positions=pb.positions, slots=pb.slots,
              cos_sin=pb.cos_sin_cache, k_scale=pb.k_scale if pb.fp8 else None, q_scale=pb.q_scale if q_fp8 else None)
    if form == "absorbed":
        out["q_out"] = pb.new_q_out(q_fp8)
        kw.update(q_nope=pb.q_nope, q_pe=pb.q_pe, q_out=out["q_out"])
    elif form == "zero_copy":
        out["q_out"] = pb.new_q_out_zero_copy(q_fp8)
        kw.update(q_pe=pb.q_pe, q_out=out["q_out"])
    elif form == "inplace":
        out["q_pe"] = pb.new_q_pe()
        kw.update(q_pe=out["q_pe"])
    launch = k.bind(**kw)
    return launch, lambda: out


def method_ropekv_nopdl(state, pb):
    return method_ropekv(state, pb, "ctx_nopdl")


def method_ropekv_prefetch(state, pb):
    return method_ropekv(state, pb, "ctx_prefetch")


def _ropekv_form(form, q_fp8):
    def method(state, pb):
        return method_ropekv(state, pb, "ctx", form, q_fp8)
    return method


def method_triton(state, pb, pdl=False, prefetch=False):
    if pdl:
        require_pdl()
    kern = triton_kernels()["mla"]
    q_out, cache = pb.new_q_out(), pb.new_cache()
    grid = (pb.T, pb.H + 1)
    a = (pb.q_nope, pb.q_pe, q_out, pb.k_nope, pb.k_pe, cache, pb.positions, pb.slots, pb.cos_sin_cache, pb.k_scale,
         pb.q_nope.stride(0), pb.q_nope.stride(1), pb.q_pe.stride(0), pb.q_pe.stride(1), q_out.stride(0),
         q_out.stride(1), pb.k_nope.stride(0), pb.k_pe.stride(0), W, pb.H)

    if pdl:
        def fn():
            kern[grid](*a, L=L, R=R, FP8=pb.fp8, FP8_MAX=FP8_MAX, USE_GDC=True, PREFETCH=prefetch, num_warps=2,
                       launch_pdl=True)
    else:
        def fn():
            kern[grid](*a, L=L, R=R, FP8=pb.fp8, FP8_MAX=FP8_MAX, USE_GDC=False, PREFETCH=False, num_warps=2)

    return fn, lambda: {"q_out": q_out, "cache": cache}


def method_triton_pdl(state, pb):
    return method_triton(state, pb, pdl=True)


def method_triton_prefetch(state, pb):
    return method_triton(state, pb, pdl=True, prefetch=True)


def method_triton_fp8q(state, pb, pdl=False):
    if pdl:
        require_pdl()
    kern = triton_kernels()["mla_fp8q"]
    pol = pb.policy
    q_out, cache = pb.new_q_out(q_fp8=True), pb.new_cache()
    grid = (pb.T, pb.H + 1)
    a = (pb.q_nope, pb.q_pe, q_out, pb.k_nope, pb.k_pe, cache, pb.positions, pb.slots, pb.cos_sin_cache, pb.k_scale,
         pb.q_scale, pb.q_nope.stride(0), pb.q_nope.stride(1), pb.q_pe.stride(0), pb.q_pe.stride(1), q_out.stride(0),
         q_out.stride(1), pb.k_nope.stride(0), pb.k_pe.stride(0), W, pb.H)
    kw = dict(L=L, R=R, FP8=pb.fp8, FP8_MAX=FP8_MAX, KV_CONV=SCALE_CONV[pol["kv_scale"]], KV_RR=pol["kv_rr"],
              Q_SAT=float(pol["q_sat"]), Q_CONV=SCALE_CONV[pol["q_scale"]], Q_RR=pol["q_rr"], USE_GDC=pdl,
              num_warps=2)
    if pdl:
        kw["launch_pdl"] = True

    def fn():
        kern[grid](*a, **kw)

    return fn, lambda: {"q_out": q_out, "cache": cache}


def method_triton_fp8q_pdl(state, pb):
    return method_triton_fp8q(state, pb, pdl=True)


def _torch_method(f, pb, q_fp8=False):
    cache = pb.new_cache()
    out = {"cache": cache}
    pol = pb.policy
    if q_fp8:
        def fn():
            out["q_out"] = f(pb.q_nope, pb.q_pe, pb.k_nope, pb.k_pe, pb.positions, pb.slots, pb.cos_sin_cache, cache,
                             pb.k_scale, pb.fp8, pb.q_scale, pol["q_scale"], float(pol["q_sat"]), pol["kv_scale"])
    else:
        def fn():
            out["q_out"] = f(pb.q_nope, pb.q_pe, pb.k_nope, pb.k_pe, pb.positions, pb.slots, pb.cos_sin_cache, cache,
                             pb.k_scale, pb.fp8, pol["kv_scale"])

    return fn, lambda: out


def method_eager(state, pb):
    return _torch_method(mla_rope_kv_unfused, pb)


# aiter (ROCm/aiter): its Triton fused_qk_rope_cat_and_cache_mla, the op AMD's engines (SGLang, ATOM) call for this
# job. Where it sits moved between releases; both places are tried.
AITER_MODULES = ("aiter.ops.triton.fusions.fused_kv_cache", "aiter.ops.triton.fused_kv_cache")


def aiter_op():
    """aiter's fused_qk_rope_cat_and_cache_mla; raises ImportError saying why when aiter or the op is missing."""
    import aiter  # noqa: F401  (ROCm only: the reason in the error where it is not installed)
    for name in AITER_MODULES:
        try:
            return importlib.import_module(name).fused_qk_rope_cat_and_cache_mla
        except (ImportError, AttributeError):
            continue
    raise ImportError("aiter has no fused_qk_rope_cat_and_cache_mla (looked in %s)" % ", ".join(AITER_MODULES))


def aiter_args(pb, q_out, cache, k_pe_out):
    """(args, kwargs) of fused_qk_rope_cat_and_cache_mla doing ropekv's absorbed job (bf16 query) on our tensors:
      q_nope, q_pe       [T, H, L], [T, H, R]: the strided slices of the query, as they are
      k_nope, k_pe       [T, 1, L], [T, 1, R]: one KV head (MLA's latent), views of the projection output
      kv_cache           [rows, 1, W]: the paged cache [blocks, 16, W] seen flat (slot s is row s: the same bytes)
      slot_mapping, pos  the slots and positions (int64)
      cos, sin           [max_pos, R/2] each: the two halves of the float32 cos_sin_cache (tables R/2 wide make
                         aiter take entry d // 2 for both elements of a GPT-J pair, as ropekv does)
      k_scale            the fp8 cache's scale, applied only to an fp8 cache: stored = x * (1 / k_scale), the
                         deepseek_v3 (mul_recip) convention; a bf16 cache is written unscaled
      is_neox=False      GPT-J rope (interleaved pairs), DeepSeek's
      q_out, k_pe_out    preallocated, so the timed call allocates nothing
    What it does differently: it also writes k_pe_out, the rotated k_pe ([T, 1, R] bf16: 128 bytes a token more than
    the job); it clamps nothing before the fp8 cast; its fp8 is aiter's platform e4m3 (FNUZ on gfx942, whose cache
    dtype our OCP cache is not: there it refuses the call and is reported n/a); its rope is x * cos + rot(x) * sin in
    float32, two roundings (or an fma where the compiler contracts them), so it is checked with the two-rounding
    tolerance, as triton and eager are, not bit for bit (its bit-identical fraction is in the csv); an fp8 q_out
    (q_out_dtype) would be a plain cast without q_scale, not the fp8q job, so it has no fp8q method."""
    half = R // 2
    args = (pb.q_nope, pb.q_pe, pb.k_nope.unsqueeze(1), pb.k_pe.unsqueeze(1), cache.view(-1, 1, W), pb.slots,
            pb.positions, pb.cos_sin_cache[:, :half], pb.cos_sin_cache[:, half:], pb.k_scale, False)
    return args, dict(apply_scale=pb.fp8, q_out=q_out, k_pe_out=k_pe_out)


def method_aiter(state, pb):
    op = aiter_op()
    q_out, cache = pb.new_q_out(), pb.new_cache()
    k_pe_out = pb.torch.empty(pb.T, 1, R, device=pb.dev, dtype=pb.torch.bfloat16)
    args, kw = aiter_args(pb, q_out, cache, k_pe_out)

    def fn():
        op(*args, **kw)

    return fn, lambda: {"q_out": q_out, "cache": cache}


def method_eager_fp8q(state, pb):
    return _torch_method(mla_rope_kv_unfused_fp8q, pb, q_fp8=True)


def _compiled(state, name, f):
    if state.get(name) is None:
        dyn = {"auto": None, "true": True, "false": False}[state["args"].compile_dynamic]
        state[name] = torch.compile(f, mode=state["args"].compile_mode, dynamic=dyn)
    return state[name]


def method_compile(state, pb):
    return _torch_method(_compiled(state, "compiled", mla_rope_kv_unfused), pb)


def method_compile_fp8q(state, pb):
    return _torch_method(_compiled(state, "compiled_fp8q", mla_rope_kv_unfused_fp8q), pb, q_fp8=True)


METHODS = {"ropekv": method_ropekv, "ropekv_nopdl": method_ropekv_nopdl, "ropekv_prefetch": method_ropekv_prefetch,
           "triton": method_triton, "triton_pdl": method_triton_pdl, "triton_prefetch": method_triton_prefetch,
           "triton_fp8q": method_triton_fp8q, "triton_fp8q_pdl": method_triton_fp8q_pdl,
           "compile": method_compile, "eager": method_eager, "aiter": method_aiter, "compile_fp8q": method_compile_fp8q,
           "eager_fp8q": method_eager_fp8q}
for _m, (_form, _q8) in FORMS.items():
    if _m not in METHODS:  # ropekv_fp8q and the other q forms on the default context
        METHODS[_m] = _ropekv_form(_form, _q8)


# ---- checks -------------------------------------------------------------------------------------------------------
def code_steps(torch, got, want, kind):
    """Per element, how many codes of the format (bf16, or fp8 e4m3fn held as uint8 / float8) got is from want: 0 for
    equal bits or NaN against NaN, 1 << 20 for NaN against a number (int32, the shape of the inputs)."""
    if kind == "bf16":
        a, b = got.contiguous().view(torch.int16), want.contiguous().view(torch.int16)
        mag_mask, sign_shift, nan_min, bits = 0x7FFF, 15, 0x7F81, 0xFFFF
    else:
        a, b = got.contiguous().view(torch.uint8), want.contiguous().view(torch.uint8)
        mag_mask, sign_shift, nan_min, bits = 0x7F, 7, 0x7F, 0xFF
    a, b = a.to(torch.int32) & bits, b.to(torch.int32) & bits
    ma, mb = a & mag_mask, b & mag_mask
    d = (torch.where((a >> sign_shift) == 1, -ma, ma) - torch.where((b >> sign_shift) == 1, -mb, mb)).abs()
    na, nb = ma >= nan_min, mb >= nan_min
    d = torch.where(na & nb, torch.zeros_like(d), d)
    return torch.where(na ^ nb, torch.full_like(d, 1 << 20), d)


def compare_bits(torch, got, want, kind, chunk_elems=1 << 27):
    """(max code steps apart, number of bit-identical elements, elements); bf16 or fp8 e4m3fn; NaN == NaN."""
    a_all = got.reshape(-1) if got.is_contiguous() else got.contiguous().reshape(-1)
    b_all = want.reshape(-1) if want.is_contiguous() else want.contiguous().reshape(-1)
    if kind == "bf16":
        a_all, b_all = a_all.view(torch.int16), b_all.view(torch.int16)
        mag_mask, sign_shift, nan_min, bits = 0x7FFF, 15, 0x7F81, 0xFFFF
    else:
        a_all, b_all = a_all.view(torch.uint8), b_all.view(torch.uint8)
        mag_mask, sign_shift, nan_min, bits = 0x7F, 7, 0x7F, 0xFF
    n = a_all.numel()
    worst, same = 0, 0
    for s in range(0, n, chunk_elems):
        a = a_all[s:s + chunk_elems].to(torch.int32) & bits
        b = b_all[s:s + chunk_elems].to(torch.int32) & bits
        ma, mb = a & mag_mask, b & mag_mask
        oa = torch.where((a >> sign_shift) == 1, -ma, ma)
        ob = torch.where((b >> sign_shift) == 1, -mb, mb)
        na, nb = ma >= nan_min, mb >= nan_min
        d = (oa - ob).abs()
        d = torch.where(na & nb, torch.zeros_like(d), d)
        d = torch.where(na ^ nb, torch.full_like(d, 1 << 20), d)
        if d.numel():
            worst = max(worst, int(d.max()))
        same += int(((a == b) | (na & nb)).sum())
    return worst, same, n


def _ulp(torch, m, mant_bits, min_exp):
    """One step of a float format (mant_bits stored mantissa bits, min_exp its smallest normal exponent) at
    magnitudes m (float64, >= 0, normal or zero): 2^(max(floor(log2 m), min_exp) - mant_bits), built from the
    exponent bits (exact, no log2 or pow)."""
    e = ((m.view(torch.int64) >> 52) & 0x7FF) - 1023
    e = torch.clamp(e, min=min_exp) - mant_bits
    return ((e + 1023) << 52).view(torch.float64)


FP8_ULP = (3, -6)  # e4m3: 3 mantissa bits, smallest normal exponent -6
BF16_ULP = (7, -126)


def _fp8_codes(torch, v):
    """float32 values (already clamped) rounded to fp8 e4m3fn (to nearest even), as uint8 codes."""
    return to_fp8(v).view(torch.uint8)


def _decode(torch, t):
    """Values of a bf16 tensor or of fp8 e4m3fn codes held as uint8, as float64."""
    if t.dtype == torch.uint8:
        if _has_float8():
            return t.view(torch.float8_e4m3fn).float().double()
        return rkref.e4m3_values(t).double()
    return t.double()


def _scale_mag(torch, m, conv, s):
    """|scale| applied to the magnitudes m (float64): what the tolerance scales the rope terms by."""
    if conv in ("mul_recip", "div"):
        return m / s.double()
    if conv == "mul":
        return m * s.double()
    return m


class Reference:
    """What ropekv computes (docs/numerics.md, gen/ref.c), in PyTorch, once per shape: the rope rows
    y0 = fmaf(x0, c, -(x1*s)), y1 = fmaf(x1, c, x0*s) with x1*s, x0*s float32 products, rounded to bf16 (q_out
    and a bf16 KV row) or scaled by the spec's KV convention (deepseek_v3: float32(1 / k_scale)), clamped to +-448
    and rounded to fp8 (an fp8 KV row; codes kept as uint8). With q8, the fp8 query too: q_nope and the rope floats
    (rounded to bf16 first where the spec's q policy says so) scaled by its q convention, clamped to +-q_sat,
    rounded to fp8. Besides the expected codes it keeps, per rope element, the tolerance for methods that
    round x0*c and x1*s separately (eager, torch.compile, Triton): one step of the output format at
    max(|expected|, |x0*c| + |x1*s|) (the terms scaled like the value for fp8). Two-rounding differs from the
    fma by at most about 2^-23 (|x0*c| + |x1*s|): many steps of a result that cancels, within one step at the
    terms' size."""

    def __init__(self, torch, pb, q8=False, chunk_elems=1 << 24):
        half = R // 2
        pol = pb.policy
        cs = pb.cos_sin_cache.index_select(0, pb.positions)
        step = max(1, chunk_elems // (pb.H * W if q8 else pb.H * R))
        q_rope, q_tol, kv_rope, kv_tol = [], [], [], []
        q_rope8, q_tol8, q_nope8 = [], [], []
        self.q8 = q8
        for t0 in range(0, pb.T, step):
            sl = slice(t0, min(pb.T, t0 + step))
            c, sn = cs[sl, :half], cs[sl, half:]
            y, m = self._rope(torch, pb.q_pe[sl], c[:, None, :], sn[:, None, :])
            q_rope.append(y.to(torch.bfloat16))
            q_tol.append(_ulp(torch, torch.maximum(_decode(torch, q_rope[-1]).abs(), m), *BF16_ULP).float())
            if q8:
                yq = y.to(torch.bfloat16).float() if pol["q_rr"] else y
                sat = pol["q_sat"]
                q_rope8.append(_fp8_codes(torch, rkref.scale(yq, pol["q_scale"], pb.q_scale).clamp(-sat, sat)))
                mq = _scale_mag(torch, m, pol["q_scale"], pb.q_scale)
                q_tol8.append(_ulp(torch, torch.maximum(_decode(torch, q_rope8[-1]).abs(), mq), *FP8_ULP).float())
                xn = pb.q_nope[sl].float()
                q_nope8.append(_fp8_codes(torch, rkref.scale(xn, pol["q_scale"], pb.q_scale).clamp(-sat, sat)))
            y, m = self._rope(torch, pb.k_pe[sl], c, sn)
            if pb.fp8:
                yk = y.to(torch.bfloat16).float() if pol["kv_rr"] else y
                kv_rope.append(_fp8_codes(torch, rkref.scale(yk, pol["kv_scale"], pb.k_scale).clamp(-FP8_MAX, FP8_MAX)))
                m = _scale_mag(torch, m, pol["kv_scale"], pb.k_scale)
                fmt = FP8_ULP
            else:
                kv_rope.append(y.to(torch.bfloat16))
                fmt = BF16_ULP
            kv_tol.append(_ulp(torch, torch.maximum(_decode(torch, kv_rope[-1]).abs(), m), *fmt).float())
        self.q_rope, self.q_tol = torch.cat(q_rope), torch.cat(q_tol)
        self.kv_rope, self.kv_tol = torch.cat(kv_rope), torch.cat(kv_tol)
        if q8:
            self.q_rope8, self.q_tol8, self.q_nope8 = torch.cat(q_rope8), torch.cat(q_tol8), torch.cat(q_nope8)
        if pb.fp8:  # k_nope * (1 / 0.5) is exact: one rounding, the same for every method
            kn = rkref.scale(pb.k_nope.float(), pol["kv_scale"], pb.k_scale)
            self.kv_nope = _fp8_codes(torch, kn.clamp(-FP8_MAX, FP8_MAX))
        else:
            self.kv_nope = pb.k_nope

    def q_nope8_tol(self, torch, pb, sl):
        """The fp8 query's q_nope part: one fp8 step at max(|expected|, |scaled q_nope|), for a peer whose
        reciprocal (or quotient) of q_scale is rounded otherwise (one rounding of the scaled value apart)."""
        m = _scale_mag(torch, pb.q_nope[sl].double().abs(), pb.policy["q_scale"], pb.q_scale)
        return _ulp(torch, torch.maximum(_decode(torch, self.q_nope8[sl]).abs(), m), *FP8_ULP)

    @staticmethod
    def _rope(torch, x, c, sn):
        """(ropekv's float32 rope of the bf16 GPT-J rows x, |x0*c| + |x1*s| per output element in float64)."""
        xf = x.float().unflatten(-1, (-1, 2))
        x0, x1 = xf[..., 0], xf[..., 1]
        y0 = rkref.fma_f32(x0, c, -(x1 * sn))
        y1 = rkref.fma_f32(x1, c, x0 * sn)
        a0, a1 = x0.double().abs(), x1.double().abs()
        ac, asn = c.double().abs(), sn.double().abs()
        return (torch.stack((y0, y1), dim=-1).flatten(-2),
                torch.stack((a0 * ac + a1 * asn, a1 * ac + a0 * asn), dim=-1).flatten(-2))


def _outside(torch, got, want, tol):
    """How many elements of got are neither bit-identical to want (NaN == NaN) nor within tol of it."""
    a, b = _decode(torch, got), _decode(torch, want)
    ok = (got == want) | (torch.isnan(a) & torch.isnan(b)) | ((a - b).abs() <= tol.double())
    return int((~ok).sum())


def check(torch, pb, ref, outs, form="absorbed", q_fp8=False, chunk_elems=1 << 25, nope_steps=0):
    """(ok, max steps, fraction bit-identical, elements failing) of a method's outputs (a dict: "q_out" for the
    absorbed and zero_copy forms, "q_pe" for inplace, "cache") against the fma reference. The q_nope / k_nope
    parts must be bit-identical (copies; for fp8 one exact scaling and one rounding; an fp8 query's q_nope part
    within one fp8 step, see Reference.q_nope8_tol), every rope element bit-identical or within its tolerance
    (see Reference), an inplace fp8 query's bytes past the first R of each q_pe row untouched, and the KV rows
    that no token writes untouched (zero). 'max steps' and 'bit-identical' count codes against the reference's
    over the query output and the KV rows (the scratch row aside). nope_steps > 0: the KV rows' k_nope parts may be
    that many codes of the cache's format away (the norm section's peers, whose RMSNorm sums in another order)."""
    kind = "fp8" if pb.fp8 else "bf16"
    cache = outs["cache"]
    flat = (cache.view(torch.uint8) if pb.fp8 else cache).view(-1, W)
    worst = same = n = bad = 0

    def add(r):  # r = compare_bits(...); returns how many codes differ
        nonlocal worst, same, n
        worst, same, n = max(worst, r[0]), same + r[1], n + r[2]
        return r[2] - r[1]

    step = max(1, chunk_elems // (pb.H * W))
    for t0 in range(0, pb.T, step):
        sl = slice(t0, min(pb.T, t0 + step))
        if form in ("absorbed", "zero_copy") and q_fp8:
            qo = outs["q_out"][sl].view(torch.uint8)
            add(compare_bits(torch, qo[..., :L], ref.q_nope8[sl], "fp8"))
            bad += _outside(torch, qo[..., :L], ref.q_nope8[sl], ref.q_nope8_tol(torch, pb, sl))
            add(compare_bits(torch, qo[..., L:], ref.q_rope8[sl], "fp8"))
            bad += _outside(torch, qo[..., L:], ref.q_rope8[sl], ref.q_tol8[sl])
        elif form in ("absorbed", "zero_copy"):
            q_out = outs["q_out"]
            bad += add(compare_bits(torch, q_out[sl, :, :L], pb.q_nope[sl], "bf16"))
            add(compare_bits(torch, q_out[sl, :, L:], ref.q_rope[sl], "bf16"))
            bad += _outside(torch, q_out[sl, :, L:], ref.q_rope[sl], ref.q_tol[sl])
        elif form == "inplace" and q_fp8:
            b = outs["q_pe"][sl].view(torch.uint8)  # [n, H, 2R]: fp8 codes over the first R bytes of each row
            add(compare_bits(torch, b[..., :R], ref.q_rope8[sl], "fp8"))
            bad += _outside(torch, b[..., :R], ref.q_rope8[sl], ref.q_tol8[sl])
            bad += int((b[..., R:] != pb.q_pe[sl].view(torch.uint8)[..., R:]).sum())
        elif form == "inplace":
            q_pe = outs["q_pe"]
            add(compare_bits(torch, q_pe[sl], ref.q_rope[sl], "bf16"))
            bad += _outside(torch, q_pe[sl], ref.q_rope[sl], ref.q_tol[sl])
        rows = flat[pb.slots[sl]]  # every token has its own row (the slots are a permutation)
        if nope_steps:
            add(compare_bits(torch, rows[:, :L], ref.kv_nope[sl], kind))
            bad += int((code_steps(torch, rows[:, :L], ref.kv_nope[sl], kind) > nope_steps).sum())
        else:
            bad += add(compare_bits(torch, rows[:, :L], ref.kv_nope[sl], kind))
        add(compare_bits(torch, rows[:, L:], ref.kv_rope[sl], kind))
        bad += _outside(torch, rows[:, L:], ref.kv_rope[sl], ref.kv_tol[sl])
    untouched = torch.ones(pb.rows - 1, dtype=torch.bool, device=flat.device)
    untouched[pb.slots] = False
    others = flat[:pb.rows - 1][untouched]
    bad += add(compare_bits(torch, others, torch.zeros_like(others), kind))
    return bad == 0, worst, same / max(n, 1), bad


# ---- timing -----------------------------------------------------------------------------------------------------
def gpu_busy(torch):
    """Queue ~0.5 ms of GPU spinning, so that the start event recorded next is taken when the GPU reaches
    it and not while the host is still submitting the work after it (that host time is not GPU time)."""
    torch.cuda._sleep(1_000_000)  # ROCm PyTorch has it too (a clock64 spin: its length follows the GPU's clock)


def time_graph(torch, fn, calls, reps):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        gpu_busy(torch)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / calls)
    del g
    return statistics.median(times)


def time_events(torch, fn, calls, reps):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(calls):
            fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / calls)
    return statistics.median(times)


def time_method(torch, fn, calls, reps):
    """(us per call, "graph" | "events", note)."""
    try:
        return time_graph(torch, fn, calls, reps), "graph", ""
    except Exception as e:  # noqa: BLE001
        note = "graph capture failed: %s" % str(e).split("\n")[0][:200]
        try:
            torch.cuda.synchronize()
        except Exception:  # noqa: BLE001
            pass
        return time_events(torch, fn, calls, reps), "events", note


def time_cpu(fn, calls, reps):
    """--cpu: wall-clock us per call of CALLS back-to-back calls, median of REPS (a check of the script only)."""
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) * 1e6 / calls)
    return statistics.median(times)


def measure_floors(torch, dev, calls, reps):
    f = {}
    try:
        tk = triton_kernels()
        buf = torch.zeros(4, dtype=torch.int32, device=dev)
        out4 = torch.zeros(4, dtype=torch.int32, device=dev)
        f["empty_us"] = time_graph(torch, lambda: tk["empty"][(1,)](buf), calls, reps)
        f["roundtrip_us"] = time_graph(torch, lambda: tk["roundtrip"][(1,)](buf, out4), calls, reps)
    except Exception as e:  # noqa: BLE001
        log("floors: Triton kernels failed (%s); using a 1-element torch op for both" % str(e).split("\n")[0])
        x = torch.zeros(4, dtype=torch.int32, device=dev)
        f["empty_us"] = f["roundtrip_us"] = time_graph(torch, lambda: x.add_(1), calls, reps)
    nbytes = 2 << 30
    src = torch.empty(nbytes, dtype=torch.uint8, device=dev)
    dst = torch.empty(nbytes, dtype=torch.uint8, device=dev)
    src.fill_(1)
    dst.copy_(src)
    torch.cuda.synchronize()
    times = []
    for _ in range(10):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        gpu_busy(torch)
        a.record()
        dst.copy_(src)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e-3)
    del src, dst
    torch.cuda.empty_cache()
    f["copy_Bps"] = 2 * nbytes / statistics.median(times)
    return f


def measure_floors_cpu(calls, reps):
    """--cpu: a 64 MiB CPU copy for the bandwidth, a 1-element op for the round trip (not GPU figures)."""
    x = torch.zeros(4, dtype=torch.int32)
    us = time_cpu(lambda: x.add_(1), calls, reps)
    src = torch.ones(64 << 20, dtype=torch.uint8)
    dst = torch.empty_like(src)
    copy_us = time_cpu(lambda: dst.copy_(src), 3, 3)
    return {"empty_us": us, "roundtrip_us": us, "copy_Bps": 2 * src.numel() / (copy_us * 1e-6)}


# ---- output -------------------------------------------------------------------------------------------------------
def fmt_us(v):
    if v is None:
        return "-"
    if v < 10:
        return "%.2f" % v
    if v < 1000:
        return "%.1f" % v
    return "%.0f" % v


def cell(res):
    if res is None:
        return "-"
    if res["status"] != "ok":
        return res["status"]
    return fmt_us(res["us"]) + ("*" if res["timing"] == "events" else "")


def _ratio_vs_best(res, method, peers):
    """best peer us / method us, formatted; '-' when either is missing."""
    me = res.get(method)
    best = [res[m]["us"] for m in peers if res.get(m) and res[m]["status"] == "ok"]
    if me is None or me["status"] != "ok" or not best:
        return "-"
    return "%.2fx" % (min(best) / me["us"])


def _exact(res):
    return "%.4f%%" % (100 * res["exact"]) if res is not None and res.get("exact") is not None else "-"


def write_outputs(args, meta, floors, rows, methods):
    os.makedirs(args.out, exist_ok=True)
    gpu = re.sub(r"[^A-Za-z0-9]+", "_", meta["gpu"]).strip("_") or "gpu"
    tag = re.sub(r"[^A-Za-z0-9_.-]+", "_", args.tag)
    stem = "bench_%s_%s%s%s" % (meta["date"], gpu, "_quick" if args.quick else "", "_" + tag if tag else "")
    base = os.path.join(args.out, stem)
    peers = [m for m in PEERS if m in methods]
    fp8q_peers = [m for m in FP8Q_PEERS if m in methods]
    pol = meta["policy"]

    lines = []
    lines.append("# MLA RoPE + KV-cache write: ropekv vs peers on %s" % meta["gpu"])
    lines.append("")
    lines.append("- date: %s; GPU: %s (%d SMs / CUs); torch %s (%s); triton %s; ropekv %s (target %s)" % (
        meta["datetime"], meta["gpu"], meta["sms"], meta["torch"], meta["cuda"], meta["triton"], meta["ropekv"],
        meta["target"]))
    if args.cpu:
        lines.append("- **--cpu: the script checked on the CPU; the times and bandwidths are not GPU figures**")
    for label, (name, get_ms) in meta["kernels"].items():
        lines.append("- ropekv kernel (%s): `%s` (kernel_get %.1f ms)" % (label, name, get_ms))
    lines.append("- shapes: DeepSeek-V3 L=%d, R=%d, GPT-J rope, f32 cos_sin_cache [%d, %d]; paged cache [blocks, %d, %d];"
                 " fp8: OCP e4m3, k_scale %.2f (x * 1/k_scale), clamp +-%g" % (L, R, MAX_POS, R, BLOCK_SIZE, W,
                                                                            K_SCALE, FP8_MAX))
    if any(FORMS[m][1] for m in methods):
        lines.append("- fp8 query (spec %s): q_scale %g, %s%s, clamp +-%g, OCP e4m3 (q_nope and the rope part of "
                     "q_out)" % (args.spec, args.q_scale, {"mul_recip": "x * (1/q_scale)", "div": "x / q_scale",
                                                           "mul": "x * q_scale", "none": "no scale"}[pol["q_scale"]],
                                 ", the rope rounded to bf16 first" if pol["q_rr"] else "", pol["q_sat"]))
    lines.append("- timing: %d calls per CUDA graph, median of %d replays, each queued behind a GPU spin so the host's "
                 "submission is not timed; per-call us (* = graph capture failed: back-to-back launches timed with "
                 "CUDA events)" % (args.calls, args.reps))
    lines.append("- floors (same run): empty kernel %.2f us; 16 B read + 16 B write kernel %.2f us; device copy "
                 "%.2f TB/s (2 GiB, read + write)" % (floors["empty_us"], floors["roundtrip_us"],
                                                      floors["copy_Bps"] / 1e12))
    lines.append("- limit = max(round-trip floor, bytes / copy bandwidth), bytes = the absorbed form's with a bf16 "
                 "query; vs best peer = best peer us / ropekv us; "
                 "%% of limit = limit us / ropekv us x 100; copy us = a device copy of the same bytes (half read, "
                 "half written) in the same graph timing; %% of copy = copy us / ropekv us x 100; ropekv and "
                 "triton_pdl launch with PDL, ropekv_nopdl and triton without; prefetch vs peer = triton_prefetch us "
                 "/ ropekv_prefetch us (both read positions and cos/sin before the PDL wait); fp8q vs best fp8q peer "
                 "= best of %s us / ropekv_fp8q us" % ", ".join(FP8Q_PEERS))
    lines.append("- torch.compile: mode=%s, dynamic=%s" % (args.compile_mode, args.compile_dynamic))
    lines.append("- checks: every method before timing vs a PyTorch reference of ropekv's arithmetic (one rounded "
                 "product, one fma, emulated exactly): q_nope/k_nope parts bit-identical (an fp8 query's q_nope: "
                 "within 1 fp8 step), rope elements bit-identical "
                 "or within 1 bf16 (fp8) step of max(|expected|, |x0*c| + |x1*s|), the bound of two-rounding "
                 "x0*c - x1*s; 'bit-identical' = the outputs equal to the reference's bit for bit (ropekv's here, "
                 "every method's in the csv)")
    lines.append("")
    head = ["T", "H", "kv"] + ["%s us" % m for m in methods] + ["limit us", "copy us"]
    if "ropekv" in methods:
        head += ["vs best peer", "% of limit", "% of copy", "bit-identical"]
    pf = "ropekv_prefetch" in methods and "triton_prefetch" in methods
    if pf:
        head += ["prefetch vs peer"]
    fq = "ropekv_fp8q" in methods
    if fq:
        head += ["fp8q vs best fp8q peer", "fp8q bit-identical"]
    for m in ("triton_fp8q", "triton_fp8q_pdl"):  # expected bit-identical too (ropekv's arithmetic)
        if m in methods:
            head += ["%s bit-identical" % m]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "|".join("---" for _ in head) + "|")
    for r in rows:
        res = r["results"]
        vals = [str(r["T"]), str(r["H"]), r["kv"]] + [cell(res.get(m)) for m in methods] + [fmt_us(r["limit_us"]),
                                                                                            fmt_us(r.get("copy_us"))]
        if "ropekv" in methods:
            rk = res.get("ropekv")
            ok_rk = rk is not None and rk["status"] == "ok"
            vals.append(_ratio_vs_best(res, "ropekv", peers))
            vals.append("%.0f%%" % (100 * r["limit_us"] / rk["us"]) if ok_rk else "-")
            vals.append("%.0f%%" % (100 * r["copy_us"] / rk["us"]) if ok_rk and r.get("copy_us") else "-")
            vals.append(_exact(rk))
        if pf:
            a, b = res.get("ropekv_prefetch"), res.get("triton_prefetch")
            ok = a and b and a["status"] == "ok" and b["status"] == "ok"
            vals.append("%.2fx" % (b["us"] / a["us"]) if ok else "-")
        if fq:
            vals.append(_ratio_vs_best(res, "ropekv_fp8q", fp8q_peers))
            vals.append(_exact(res.get("ropekv_fp8q")))
        for m in ("triton_fp8q", "triton_fp8q_pdl"):
            if m in methods:
                vals.append(_exact(res.get(m)))
        lines.append("| " + " | ".join(vals) + " |")

    # the bandwidth fraction of every method: its own job's bytes / its time / the copy bandwidth of this run
    lines.append("")
    lines.append("Bandwidth: BW %% = bytes the method's job moves (its q form and query dtype: absorbed reads q_nope + "
                 "q_pe and writes q_out, zero_copy reads q_pe and writes q_out[..., L:], inplace reads and writes q_pe "
                 "(fp8: R bytes a row), none no query; an fp8 query 1 byte an element; KV row, positions, slots, "
                 "cos/sin rows for all) / time / the copy bandwidth above (%.2f TB/s). MB = those bytes." %
                 (floors["copy_Bps"] / 1e12))
    lines.append("")
    jobs = []  # the distinct jobs (q form, fp8 query) of the methods, for the bytes columns
    for m in methods:
        if FORMS[m] not in jobs:
            jobs.append(FORMS[m])
    head = ["T", "H", "kv"] + ["%s BW %%" % m for m in methods]
    head += ["%s%s MB" % (form, " fp8q" if q_fp8 else "") for form, q_fp8 in jobs]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "|".join("---" for _ in head) + "|")
    for r in rows:
        res = r["results"]
        vals = [str(r["T"]), str(r["H"]), r["kv"]]
        for m in methods:
            v = res.get(m)
            pct = v.get("bw_pct") if v is not None and v["status"] == "ok" else None
            vals.append("%.0f%%" % pct if pct is not None else "-")
        vals += ["%.3f" % (op_bytes(r["T"], r["H"], r["kv"] == "fp8_e4m3", form, q_fp8) / 1e6) for form, q_fp8 in jobs]
        lines.append("| " + " | ".join(vals) + " |")
    notes = sorted({"%s: %s" % (m, r["results"][m]["note"]) for r in rows for m in methods
                    if r["results"].get(m) and r["results"][m].get("note")})
    if notes:
        lines.append("")
        lines.append("Notes:")
        lines += ["- " + n for n in notes[:20]]
    md = "\n".join(lines) + "\n"
    with open(base + ".md", "w") as fh:
        fh.write(md)
    print(md)

    with open(base + ".csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["date", "gpu", "T", "H", "kv", "method", "status", "us", "timing", "max_steps", "bit_identical",
                    "bytes", "limit_us", "copy_us", "empty_us", "roundtrip_us", "copy_TBps", "spec", "q_form",
                    "q_dtype", "method_bytes", "bw_pct", "note"])
        for r in rows:
            for m in methods:
                res = r["results"].get(m)
                if res is None:
                    continue
                form, q_fp8 = FORMS[m]
                w.writerow([meta["datetime"], meta["gpu"], r["T"], r["H"], r["kv"], m, res["status"],
                            "%.4f" % res["us"] if res.get("us") is not None else "", res.get("timing", ""),
                            res.get("steps", ""), "%.6f" % res["exact"] if res.get("exact") is not None else "",
                            r["bytes"], "%.4f" % r["limit_us"],
                            "%.4f" % r["copy_us"] if r.get("copy_us") else "", "%.4f" % floors["empty_us"],
                            "%.4f" % floors["roundtrip_us"], "%.4f" % (floors["copy_Bps"] / 1e12), args.spec, form,
                            "fp8_e4m3" if q_fp8 else "bf16", method_bytes(r["T"], r["H"], r["kv"], m),
                            "%.2f" % res["bw_pct"] if res.get("bw_pct") is not None else "", res.get("note", "")])
    paths = [base + ".md", base + ".csv"]
    if not args.no_plot:
        try:
            paths.append(plot(base + ".png", meta, rows, methods, args))
        except Exception as e:  # noqa: BLE001
            log("plot failed: %s" % e)
    return paths


PLOT_STYLE = {"ropekv": ("C3", "o"), "ropekv_nopdl": ("C5", "o"), "ropekv_prefetch": ("C6", "o"),
              "ropekv_fp8q": ("C3", "D"), "ropekv_zero_copy": ("C8", "o"), "ropekv_zero_copy_fp8q": ("C8", "D"),
              "ropekv_inplace": ("C7", "o"), "ropekv_inplace_fp8q": ("C7", "D"), "ropekv_none": ("k", "x"),
              "triton": ("C0", "s"), "triton_pdl": ("C4", "s"), "triton_prefetch": ("C9", "s"), "aiter": ("C1", "^"),
              "triton_fp8q": ("C0", "P"), "triton_fp8q_pdl": ("C4", "P"),
              "compile": ("C2", "^"), "eager": ("C1", "v"), "compile_fp8q": ("C2", "<"), "eager_fp8q": ("C1", ">"),
              "ropekv_v32": ("C3", "o"), "ropekv_v32_none": ("C3", "x"), "triton_v32": ("C0", "s"),
              "triton_v32_pdl": ("C4", "s"), "triton_v32_none": ("C0", "x"), "compile_v32": ("C2", "^"),
              "eager_v32": ("C1", "v"), "eager_v32_none": ("C1", "x"), "ropekv_read": ("C3", "o"),
              "triton_read": ("C0", "s"), "triton_read_pdl": ("C4", "s"), "compile_read": ("C2", "^"),
              "eager_read": ("C1", "v")}


def plot(path, meta, rows, methods, args):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    Hs = sorted({r["H"] for r in rows})
    kvs = []
    for r in rows:
        if r["kv"] not in kvs:
            kvs.append(r["kv"])
    fig, axes = plt.subplots(len(Hs), len(kvs), figsize=(6.5 * len(kvs), 4.8 * len(Hs)), squeeze=False)
    for i, H in enumerate(Hs):
        for j, kv in enumerate(kvs):
            ax = axes[i][j]
            sel = sorted((r for r in rows if r["H"] == H and r["kv"] == kv), key=lambda r: r["T"])
            for m in methods:
                pts = [(r["T"], r["results"][m]["us"]) for r in sel
                       if r["results"].get(m) and r["results"][m]["status"] == "ok"]
                if pts:
                    c, mk = PLOT_STYLE.get(m, ("k", "."))
                    ls = "--" if (FORMS[m][1] if m in FORMS else m.endswith("_none")) else "-"
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=mk, color=c, linestyle=ls, label=m)
            if sel:
                ax.plot([r["T"] for r in sel], [r["limit_us"] for r in sel], "k--", label="limit")
                cp = [(r["T"], r["copy_us"]) for r in sel if r.get("copy_us")]
                if cp:
                    ax.plot([p[0] for p in cp], [p[1] for p in cp], "k:", label="copy (same bytes)")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("tokens T")
            ax.set_ylabel("us per call")
            ax.set_title("H=%d, kv=%s" % (H, kv))
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
    title = {"v32": "DeepSeek-V3.2 fp8_tile writer", "read": "KV-cache read-back"}.get(
        meta.get("mode"), "MLA RoPE + KV write, DeepSeek-V3 dims")
    fig.suptitle("%s, %s (%s)" % (title, meta["gpu"], meta["date"]))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# ---- --mode v32 and --mode read: DeepSeek-V3.2's fp8_tile writer and the read-back op -----------------------------
def v32_bytes(T, H, form):
    """The bytes one call of the V3.2 writer moves at least: the absorbed query (q_nope + q_pe read, q_out written;
    none: nothing), k_nope + k_pe read, the 656-byte row written, positions + slots (int64) and the cos/sin rows."""
    q = T * H * (L + R) * 2 + T * H * W * 2 if form == "absorbed" else 0
    return q + T * (L + R) * 2 + T * ROW_BYTES + T * 8 * 2 + T * R * 4


READ_ROW_BYTES = {"bf16": 2 * W, "fp8_e4m3": W, "fp8_tile": ROW_BYTES}


def read_bytes(T, kv):
    """The bytes one read-back call moves: each row read (1152, 576 or 656 bytes), the bf16 [T, 576] out written,
    the slots (int64) read."""
    return T * READ_ROW_BYTES[kv] + T * W * 2 + T * 8


def job_bytes(T, H, kv, method):
    if method in V32_FORMS:
        return v32_bytes(T, H, V32_FORMS[method])
    return read_bytes(T, kv)


def tile_row_bytes(torch, k_nope, rope):
    """The fp8_tile rows (uint8 [n, 656]) of latents k_nope [n, 512] and rope parts [n, 64] (bf16, already
    rotated): per tile of 128 values scale = max(amax / 448, FLT_MIN) (amax of |x| ignoring NaN, a float32
    division), the codes fp8(x / scale) (a float32 division, clamped, to nearest even), the 4 float32 scales at
    byte 512, the rope values at byte 528."""
    n = k_nope.shape[0]
    x = k_nope.float().reshape(n, NTILES, TILE)
    a = x.abs()
    amax = torch.where(torch.isnan(a), torch.zeros_like(a), a).amax(dim=-1)
    scale = (amax / torch.full_like(amax, FP8_MAX)).clamp(min=FLT_MIN)  # a tensor divisor: a true division on CUDA
    codes = _fp8_codes(torch, (x / scale[..., None]).clamp(-FP8_MAX, FP8_MAX)).reshape(n, L)
    rows = torch.empty(n, ROW_BYTES, dtype=torch.uint8, device=k_nope.device)
    rows[:, :L] = codes
    rows[:, SCALES_AT:ROPE_AT] = scale.contiguous().view(torch.uint8)
    rows[:, ROPE_AT:] = rope.contiguous().view(torch.uint8)
    return rows, scale


def fp8_values(torch, codes):
    """float32 values of e4m3fn codes (uint8): the float8 dtype's cast, or the table where torch has none."""
    if _has_float8():
        return codes.view(torch.float8_e4m3fn).float()
    return rkref.e4m3_values(codes)


def dequant_rows(torch, kv, rows, k_scale):
    """Cache rows as the read-back op returns them, bf16 [n, 576]: a bf16 row as it is; fp8 e4m3 codes times
    k_scale (deepseek_v3's convention: stored = x * (1 / k_scale)) in float32; an fp8_tile row's codes times their
    tile's float32 scale, its bf16 rope part as it is; each float32 product rounded to bf16."""
    if kv == "bf16":
        return rows
    n = rows.shape[0]
    if kv == "fp8_e4m3":
        return (fp8_values(torch, rows.view(torch.uint8)) * k_scale).to(torch.bfloat16)
    b = rows.view(torch.uint8)
    scale = b[:, SCALES_AT:ROPE_AT].contiguous().view(torch.float32)
    lat = fp8_values(torch, b[:, :L].contiguous()).reshape(n, NTILES, TILE) * scale[..., None]
    return torch.cat([lat.reshape(n, L).to(torch.bfloat16), b[:, ROPE_AT:].contiguous().view(torch.bfloat16)], dim=-1)


class V32Problem:
    """DeepSeek-V3.2's writer inputs: q [T, H, 576] (q_nope | q_pe), the projection [T, 576] (k_nope | k_pe), the
    latents' tiles spread over a wide range (each token's 4 tiles scaled by 2^-4 .. 2^4), random positions, a
    paged uint8 cache [blocks, block_size, 656], slots a permutation of its rows (the last row is the eager
    sequence's scratch row)."""

    def __init__(self, torch, T, H, dev, cos_sin_cache, seed, block_size):
        self.torch, self.T, self.H, self.dev, self.kv = torch, T, H, dev, "fp8_tile"
        g = torch.Generator(device=dev).manual_seed(seed)
        bf = torch.bfloat16
        self.q = torch.randn(T, H, W, device=dev, dtype=bf, generator=g)
        self.q_nope, self.q_pe = self.q[..., :L], self.q[..., L:]
        proj = torch.randn(T, W, device=dev, dtype=torch.float32, generator=g)
        spread = torch.exp2(torch.randint(-4, 5, (T, NTILES, 1), device=dev, generator=g).float())
        proj[:, :L] = (proj[:, :L].reshape(T, NTILES, TILE) * spread).reshape(T, L)
        self.proj = proj.to(bf)
        self.k_nope, self.k_pe = self.proj[:, :L], self.proj[:, L:]
        self.positions = torch.randint(0, MAX_POS, (T,), device=dev, generator=g, dtype=torch.int64)
        self.block_size = block_size
        self.blocks = (T + 1 + block_size - 1) // block_size
        self.rows = self.blocks * block_size
        self.slots = torch.randperm(self.rows - 1, device=dev, generator=g)[:T].to(torch.int64)
        self.cos_sin_cache = cos_sin_cache

    def new_cache(self):
        return self.torch.zeros(self.blocks, self.block_size, ROW_BYTES, device=self.dev, dtype=self.torch.uint8)

    def new_q_out(self):
        return self.torch.empty(self.T, self.H, W, device=self.dev, dtype=self.torch.bfloat16)


class V32Reference:
    """The V3.2 writer's outputs in ropekv's arithmetic: the query rope and the KV rope (Reference._rope: one
    rounded product, one fma) rounded to bf16 with their tolerances for two-rounding peers, and the 656-byte rows
    (tile_row_bytes). lat_tol: per latent code, one fp8 step at max(|expected|, |x / scale|), for a peer whose
    division is not correctly rounded (torch.compile's generated Triton)."""

    def __init__(self, torch, pb, q=True, chunk_elems=1 << 24):
        half = R // 2
        cs = pb.cos_sin_cache.index_select(0, pb.positions)
        q_rope, q_tol = [], []
        step = max(1, chunk_elems // (pb.H * R))
        for t0 in range(0, pb.T if q else 0, step):
            sl = slice(t0, min(pb.T, t0 + step))
            y, m = Reference._rope(torch, pb.q_pe[sl], cs[sl, None, :half], cs[sl, None, half:])
            q_rope.append(y.to(torch.bfloat16))
            q_tol.append(_ulp(torch, torch.maximum(_decode(torch, q_rope[-1]).abs(), m), *BF16_ULP).float())
        self.q_rope = torch.cat(q_rope) if q_rope else None
        self.q_tol = torch.cat(q_tol) if q_tol else None
        y, m = Reference._rope(torch, pb.k_pe, cs[:, :half], cs[:, half:])
        self.kv_rope = y.to(torch.bfloat16)
        self.kv_tol = _ulp(torch, torch.maximum(_decode(torch, self.kv_rope).abs(), m), *BF16_ULP).float()
        self.rows, scale = tile_row_bytes(torch, pb.k_nope, self.kv_rope)
        quot = (pb.k_nope.double().reshape(pb.T, NTILES, TILE) / scale.double()[..., None]).abs().reshape(pb.T, L)
        self.lat_tol = _ulp(torch, torch.maximum(_decode(torch, self.rows[:, :L]).abs(), quot.clamp(max=FP8_MAX)),
                            *FP8_ULP).float()


def check_v32(torch, pb, ref, outs, form, chunk_elems=1 << 25):
    """(ok, max steps, fraction bit-identical, elements failing) of a V3.2 writer's outputs: each token's 656-byte
    row at its slot (the latent codes bit-identical or within lat_tol, the float32 scales bit-identical or within
    2 ulps, the bf16 rope part bit-identical or within kv_tol), every other row untouched (zero), and for the
    absorbed form q_out (q_nope bit-identical, the rope part within q_tol)."""
    flat = outs["cache"].view(-1, ROW_BYTES)
    rows = flat[pb.slots]
    worst = same = n = bad = 0

    def add(r):
        nonlocal worst, same, n
        worst, same, n = max(worst, r[0]), same + r[1], n + r[2]
        return r[2] - r[1]

    add(compare_bits(torch, rows[:, :L], ref.rows[:, :L], "fp8"))
    bad += _outside(torch, rows[:, :L], ref.rows[:, :L], ref.lat_tol)
    gs = rows[:, SCALES_AT:ROPE_AT].contiguous().view(torch.float32)
    ws = ref.rows[:, SCALES_AT:ROPE_AT].contiguous().view(torch.float32)
    eq = gs.view(torch.int32) == ws.view(torch.int32)
    same, n = same + int(eq.sum()), n + eq.numel()
    bad += int(((gs.double() - ws.double()).abs() > ws.double().abs() * 2.0 ** -22).sum())
    gr = rows[:, ROPE_AT:].contiguous().view(torch.bfloat16)
    add(compare_bits(torch, gr, ref.kv_rope, "bf16"))
    bad += _outside(torch, gr, ref.kv_rope, ref.kv_tol)
    untouched = torch.ones(pb.rows - 1, dtype=torch.bool, device=flat.device)
    untouched[pb.slots] = False
    others = flat[:pb.rows - 1][untouched]
    bad += add(compare_bits(torch, others, torch.zeros_like(others), "fp8"))
    if form == "absorbed":
        step = max(1, chunk_elems // (pb.H * W))
        q_out = outs["q_out"]
        for t0 in range(0, pb.T, step):
            sl = slice(t0, min(pb.T, t0 + step))
            bad += add(compare_bits(torch, q_out[sl, :, :L], pb.q_nope[sl], "bf16"))
            add(compare_bits(torch, q_out[sl, :, L:], ref.q_rope[sl], "bf16"))
            bad += _outside(torch, q_out[sl, :, L:], ref.q_rope[sl], ref.q_tol[sl])
    return bad == 0, worst, same / max(n, 1), bad


def v32_unfused(q_nope, q_pe, k_nope, k_pe, positions, slots, cos_sin_cache, kv_cache, absorbed: bool):
    """The unfused V3.2 writer: rope of k_pe (and q_pe) with torch ops, the tiles' amax, scales and fp8 codes, the
    656-byte rows assembled with torch.cat of byte views, index_copy_ into the paged cache (slot < 0 to the scratch
    row); returns q_out [T, H, 576] for the absorbed form, else None."""
    cos_sin = cos_sin_cache.index_select(0, positions)
    cos, sin = cos_sin.chunk(2, dim=-1)
    k_rot = _rope_gptj(k_pe, cos, sin)
    x = k_nope.float().unflatten(-1, (NTILES, TILE))
    scale = (x.abs().amax(dim=-1) / FP8_MAX).clamp(min=FLT_MIN)
    codes = to_fp8((x / scale.unsqueeze(-1)).clamp(-FP8_MAX, FP8_MAX)).view(torch.uint8).flatten(-2)
    row = torch.cat([codes, scale.view(torch.uint8), k_rot.view(torch.uint8)], dim=-1)
    flat = kv_cache.view(-1, ROW_BYTES)
    flat.index_copy_(0, torch.where(slots >= 0, slots, flat.shape[0] - 1), row)
    if not absorbed:
        return None
    return torch.cat([q_nope, _rope_gptj(q_pe, cos.unsqueeze(1), sin.unsqueeze(1))], dim=-1)


class ReadProblem:
    """The read-back's inputs: a cache of the kv dtype in the layout the spec benchmarked holds it (fp8_tile:
    deepseek_v32's paged uint8 [blocks, block_size, 656]; fp8_e4m3 and bf16: deepseek_v3's flat [rows, 576]) with
    rows as a writer leaves them, and slots: T distinct rows, every 64th token (the 64th, 128th, ...) padding (-1: a
    zero row)."""

    def __init__(self, torch, T, kv, dev, seed, block_size, k_scale):
        self.torch, self.T, self.H, self.kv, self.dev = torch, T, 1, kv, dev
        self.spec, self.layout = READ_KV[kv]
        B = block_size if self.layout == "paged" else 1
        self.rows = (T + B) // B * B
        g = torch.Generator(device=dev).manual_seed(seed)
        v = torch.randn(self.rows, W, device=dev, generator=g)
        if kv == "bf16":
            self.cache = v.to(torch.bfloat16)
        elif kv == "fp8_e4m3":
            self.cache = _fp8_codes(torch, (v * 8).clamp(-FP8_MAX, FP8_MAX))
        else:
            spread = torch.exp2(torch.randint(-4, 5, (self.rows, NTILES, 1), device=dev, generator=g).float())
            lat = (v[:, :L].reshape(self.rows, NTILES, TILE) * spread).reshape(self.rows, L).to(torch.bfloat16)
            self.cache = tile_row_bytes(torch, lat, v[:, L:].to(torch.bfloat16))[0].view(self.rows // B, B, ROW_BYTES)
        slots = torch.randperm(self.rows, device=dev, generator=g)[:T].to(torch.int64)
        slots[63::64] = -1
        self.slots = slots
        self.k_scale = k_scale

    def flat(self):
        return self.cache.view(-1, self.cache.shape[-1])

    def new_out(self):
        return self.torch.empty(self.T, W, device=self.dev, dtype=self.torch.bfloat16)


def read_reference(torch, pb):
    """The expected out, built apart from the methods' code: the rows of the valid slots, each fp8 code's value from
    the exact decoding table (ropekv.reference.e4m3_values), times k_scale or its tile's scale as one float32 product, rounded to
    bf16; a bf16 row as it is; zero rows for padding."""
    want = torch.zeros(pb.T, W, dtype=torch.bfloat16, device=pb.dev)
    ok = (pb.slots >= 0).nonzero().reshape(-1)
    rows = pb.flat()[pb.slots[ok]]
    if pb.kv == "bf16":
        want[ok] = rows
        return want
    b = rows.view(torch.uint8)
    if pb.kv == "fp8_e4m3":
        want[ok] = (rkref.e4m3_values(b) * pb.k_scale.float()).to(torch.bfloat16)
        return want
    n = b.shape[0]
    scale = b[:, SCALES_AT:ROPE_AT].contiguous().view(torch.float32).repeat_interleave(TILE, dim=1)
    want[ok, :L] = (rkref.e4m3_values(b[:, :L]) * scale).to(torch.bfloat16)
    want[ok, L:] = b[:, ROPE_AT:].contiguous().view(torch.bfloat16).reshape(n, R)
    return want


def check_read(torch, pb, want, outs):
    """Every element of out bit-identical to the reference (NaN == NaN): the op is one float32 operation rounded to
    bf16 per value, with no room for another result."""
    worst, same, n = compare_bits(torch, outs["out"], want, "bf16")
    return same == n, worst, same / max(n, 1), n - same


def read_unfused(cache, slots, k_scale, kv):
    """The unfused read: index_select of the rows (padding reads row 0), the dequantization with torch ops
    (dequant_rows), the padding rows zeroed with a mask."""
    flat = cache.view(-1, cache.shape[-1])
    rows = flat.index_select(0, slots.clamp(min=0))
    out = dequant_rows(torch, kv, rows, k_scale)
    return out.masked_fill((slots < 0).unsqueeze(-1), 0)


def _job_kernel(state, method, kv):
    """The ropekv kernel of a v32 or read method (made on first use)."""
    key = (method, kv)
    k = state["kernels"].get(key)
    if k is None:
        ctx = state["ctx"]
        t0 = time.perf_counter()
        if method in V32_FORMS:
            k = ctx.kernel("deepseek_v32", kv="fp8_tile", q=V32_FORMS[method], layout="paged")
            want = ("fp8_tile", "paged", "write", V32_FORMS[method])
        else:
            spec, layout = READ_KV[kv]
            k = ctx.kernel(spec, kv=kv, layout=layout, op="read")
            want = (kv, layout, "read", k.info.q)
        got = (k.info.kv, k.info.layout, k.info.op, k.info.q)
        if got != want:
            raise RuntimeError("asked for %s; the library gave %s (%s)" % (want, k.info.key, k.name))
        require_ocp(k.info)
        if k.info.kv == "fp8_tile" and (k.info.row_bytes, k.info.fp8_tile, k.info.fp8_tile_scales_at,
                                        k.info.fp8_tile_rope_at, k.info.fp8_tile_scale) != (
                ROW_BYTES, TILE, SCALES_AT, ROPE_AT, "f32"):
            raise RuntimeError("%s: the library's fp8_tile row (%d bytes, tiles of %d, scales at %d, rope at %d, "
                               "scale %s) is not the one this script checks" % (
                                   k.info.key, k.info.row_bytes, k.info.fp8_tile, k.info.fp8_tile_scales_at,
                                   k.info.fp8_tile_rope_at, k.info.fp8_tile_scale))
        if k.info.kv == "fp8_e4m3" and k.info.op == "read" and k.info.scale not in ("mul_recip", "div"):
            raise RuntimeError("%s: scale %s; the script's reference multiplies by k_scale" % (k.info.key,
                                                                                                k.info.scale))
        state["meta"]["kernels"]["%s, kv %s" % (method, kv)] = (k.name, (time.perf_counter() - t0) * 1e3)
        state["kernels"][key] = k
    return k


def method_ropekv_v32(state, pb, method):
    k = _job_kernel(state, method, "fp8_tile")
    cache = pb.new_cache()
    out = {"cache": cache}
    kw = dict(k_nope=pb.k_nope, k_pe=pb.k_pe, kv_cache=cache, positions=pb.positions, slots=pb.slots,
              cos_sin=pb.cos_sin_cache)
    if V32_FORMS[method] == "absorbed":
        out["q_out"] = pb.new_q_out()
        kw.update(q_nope=pb.q_nope, q_pe=pb.q_pe, q_out=out["q_out"])
    return k.bind(**kw), lambda: out


def method_triton_v32(state, pb, method):
    if method.endswith("_pdl"):
        require_pdl()
    kern = triton_kernels()["v32"]
    absorbed = V32_FORMS[method] == "absorbed"
    cache = pb.new_cache()
    out = {"cache": cache}
    q_out = pb.new_q_out() if absorbed else pb.q  # a placeholder pointer for the none form (never written)
    if absorbed:
        out["q_out"] = q_out
    H = pb.H if absorbed else 0
    grid = (pb.T, H + 1)
    a = (pb.q_nope, pb.q_pe, q_out, pb.k_nope, pb.k_pe, cache, pb.positions, pb.slots, pb.cos_sin_cache,
         pb.q_nope.stride(0), pb.q_nope.stride(1), pb.q_pe.stride(0), pb.q_pe.stride(1), q_out.stride(0),
         q_out.stride(1), pb.k_nope.stride(0), pb.k_pe.stride(0), pb.block_size, cache.stride(0), cache.stride(1), H)
    pdl = method.endswith("_pdl")
    kw = dict(L=L, R=R, TILE=TILE, NT=NTILES, SCALES_AT=SCALES_AT, ROPE_AT=ROPE_AT, FP8_MAX=FP8_MAX,
              SCALE_MIN=FLT_MIN, USE_GDC=pdl, num_warps=4)
    if pdl:
        kw["launch_pdl"] = True

    def fn():
        kern[grid](*a, **kw)

    return fn, lambda: out


def method_torch_v32(state, pb, method):
    f = v32_unfused
    if method.startswith("compile"):
        f = _compiled(state, "compiled_v32", v32_unfused)
    absorbed = V32_FORMS[method] == "absorbed"
    cache = pb.new_cache()
    out = {"cache": cache}

    def fn():
        out["q_out"] = f(pb.q_nope, pb.q_pe, pb.k_nope, pb.k_pe, pb.positions, pb.slots, pb.cos_sin_cache, cache,
                         absorbed)

    return fn, lambda: out


def method_ropekv_read(state, pb, method):
    k = _job_kernel(state, method, pb.kv)
    out = {"out": pb.new_out()}
    kw = dict(kv_cache=pb.cache, slots=pb.slots, out=out["out"])
    if pb.kv == "fp8_e4m3":
        kw["k_scale"] = pb.k_scale
    return k.bind(**kw), lambda: out


def method_triton_read(state, pb, method):
    if method.endswith("_pdl"):
        require_pdl()
    kern = triton_kernels()["read"]
    out = {"out": pb.new_out()}
    c = pb.cache
    if pb.layout == "paged":
        B, bst, est = c.shape[1], c.stride(0), c.stride(1)
    else:  # blocks of one row
        B, bst, est = 1, c.stride(0), 0
    a = (c, pb.slots, out["out"], pb.k_scale, pb.rows, B, bst, est, out["out"].stride(0))
    pdl = method.endswith("_pdl")
    kw = dict(L=L, R=R, KIND={"bf16": 0, "fp8_e4m3": 1, "fp8_tile": 2}[pb.kv], SCALE_OP=1, TILE=TILE, NT=NTILES,
              SCALES_AT=SCALES_AT, ROPE_AT=ROPE_AT, USE_GDC=pdl, num_warps=4)
    if pdl:
        kw["launch_pdl"] = True

    def fn():
        kern[(pb.T,)](*a, **kw)

    return fn, lambda: out


def method_torch_read(state, pb, method):
    f = read_unfused
    if method.startswith("compile"):
        f = _compiled(state, "compiled_read", read_unfused)
    out = {}

    def fn():
        out["out"] = f(pb.cache, pb.slots, pb.k_scale, pb.kv)

    return fn, lambda: out


JOB_METHODS = {}
for _m in V32_FORMS:
    JOB_METHODS[_m] = {"ropekv": method_ropekv_v32, "triton": method_triton_v32}.get(_m.split("_")[0],
                                                                                       method_torch_v32)
for _m in READ_METHODS:
    JOB_METHODS[_m] = {"ropekv": method_ropekv_read, "triton": method_triton_read}.get(_m.split("_")[0],
                                                                                         method_torch_read)


def same_as(torch, outs, base, method):
    """The fraction of a Triton peer's output elements equal, bit for bit, to ropekv's in the same shape (the cache
    bytes of every row, q_out's bf16 values; read: out's values, NaN == NaN)."""
    if method in V32_FORMS:
        a, b = outs["cache"].view(-1), base["cache"].view(-1)
        same, n = int((a == b).sum()), a.numel()
        if outs.get("q_out") is not None and base.get("q_out") is not None:
            r = compare_bits(torch, outs["q_out"], base["q_out"], "bf16")
            same, n = same + r[1], n + r[2]
        return same / max(n, 1)
    r = compare_bits(torch, outs["out"], base["out"], "bf16")
    return r[1] / max(r[2], 1)


def main_job(args, meta, dev):
    """--mode v32 and --mode read: each method checked against the reference of its job, then timed; a Triton peer
    also compared with ropekv's outputs of the same shape byte for byte."""
    cpu = args.cpu
    mode = args.mode
    methods = list(args.method_list)
    state = {"args": args, "meta": meta, "kernels": {}}
    meta["mode"] = mode
    rk = [m for m in methods if m.startswith("ropekv")]
    if rk:
        import ropekv
        meta["ropekv"] = ropekv.version()
        ctx = ropekv.Context(rk_backend(cpu), device=args.device)
        state["ctx"] = ctx
        meta["target"] = ctx.target
        for kv in args.kv_list:
            for m in rk:
                try:
                    _job_kernel(state, m, kv)
                except Exception as e:  # noqa: BLE001
                    log("%s (kv %s): no kernel: %s" % (m, kv, str(e).split("\n")[0][:200]))
        log("ropekv %s on %s: %s" % (meta["ropekv"], ctx.target, ", ".join(n for n, _ in meta["kernels"].values())))
    floors = measure_floors_cpu(args.calls, args.reps) if cpu else measure_floors(torch, dev, args.calls, args.reps)
    log("floors: empty %.2f us, round trip %.2f us, copy %.2f TB/s" % (floors["empty_us"], floors["roundtrip_us"],
                                                                       floors["copy_Bps"] / 1e12))

    def timed(fn):
        return time_cpu(fn, args.calls, args.reps) if cpu else time_graph(torch, fn, args.calls, args.reps)

    half = R // 2
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, half, dtype=torch.float64, device=dev) * 2 / R))
    freqs = torch.arange(MAX_POS, dtype=torch.float64, device=dev)[:, None] * inv_freq[None, :]
    cos_sin_cache = torch.cat([freqs.cos(), freqs.sin()], dim=-1).float().contiguous()
    k_scale = torch.tensor([K_SCALE], dtype=torch.float32, device=dev)
    order = ([m for m in methods if m.startswith("eager")] + [m for m in methods if m.startswith("ropekv")]
             + [m for m in methods if not m.startswith(("eager", "ropekv"))])
    rows = []
    compile_broken = {}
    for H in args.H_list:
        for kv in args.kv_list:
            for T in args.T_list:
                seed = T * 1000 + H * 10 + list(READ_KV).index(kv)
                if mode == "v32":
                    need = 5 * T * H * W * 2 + 64 * T * W + (256 << 20)
                else:
                    need = 8 * T * W * 4 + (256 << 20)
                r = {"T": T, "H": H, "kv": kv, "results": {}}
                r["bytes"] = v32_bytes(T, H, "absorbed") if mode == "v32" else read_bytes(T, kv)
                r["limit_us"] = max(floors["roundtrip_us"], r["bytes"] / floors["copy_Bps"] * 1e6)
                r["copy_us"] = None
                free = torch.cuda.mem_get_info(dev)[0] if not cpu else float("inf")
                if need > 0.9 * free:
                    log("T=%d H=%d %s: skipped (needs ~%.1f GB, %.1f GB free)" % (T, H, kv, need / 1e9, free / 1e9))
                    for m in methods:
                        r["results"][m] = {"status": "skipped", "us": None, "note": "not enough memory"}
                    rows.append(r)
                    continue
                try:
                    if mode == "v32":
                        pb = V32Problem(torch, T, H, dev, cos_sin_cache, seed, args.block_size)
                        ref = V32Reference(torch, pb, q=any(V32_FORMS[m] == "absorbed" for m in methods))
                    else:
                        pb = ReadProblem(torch, T, kv, dev, seed, args.block_size, k_scale)
                        ref = read_reference(torch, pb)
                except Exception as e:  # noqa: BLE001
                    msg = str(e).split("\n")[0][:200]
                    log("  problem or reference failed: %s" % msg)
                    if os.environ.get("BENCH_TRACEBACK"):
                        traceback.print_exc()
                    for m in methods:
                        r["results"][m] = {"status": "n/a", "us": None, "note": "no reference: %s" % msg}
                    rows.append(r)
                    continue
                try:
                    n = max(16, r["bytes"] // 2 // 16 * 16)
                    src = torch.ones(n, dtype=torch.uint8, device=dev)
                    dst = torch.empty_like(src)
                    r["copy_us"] = timed(lambda: dst.copy_(src))
                    del src, dst
                except Exception as e:  # noqa: BLE001
                    log("  same-size copy failed: %s" % str(e).split("\n")[0][:200])
                kept = {}  # ropekv's outputs of this shape, for the Triton peers' byte comparison
                for m in order:
                    res = {"status": "ok", "us": None, "timing": "", "note": ""}
                    if m.startswith("compile") and (m, kv) in compile_broken:
                        r["results"][m] = {"status": "n/a", "us": None, "note": compile_broken[(m, kv)]}
                        continue
                    try:
                        fn, outputs = JOB_METHODS[m](state, pb, m)
                        fn()
                        if not cpu:
                            torch.cuda.synchronize()
                        outs = outputs()
                    except Exception as e:  # noqa: BLE001
                        msg = str(e).split("\n")[0][:200]
                        log("  %s failed: %s" % (m, msg))
                        if os.environ.get("BENCH_TRACEBACK"):
                            traceback.print_exc()
                        try:
                            if not cpu:
                                torch.cuda.synchronize()
                        except Exception:  # noqa: BLE001
                            pass
                        if m.startswith("compile"):
                            compile_broken[(m, kv)] = "torch.compile failed: " + msg
                        r["results"][m] = {"status": "n/a", "us": None, "note": "%s: %s" % (type(e).__name__, msg)}
                        continue
                    if mode == "v32":
                        ok, steps, exact, bad = check_v32(torch, pb, ref, outs, V32_FORMS[m])
                    else:
                        ok, steps, exact, bad = check_read(torch, pb, ref, outs)
                    res["exact"], res["steps"] = exact, steps
                    if not ok:
                        res["status"] = "WRONG"
                        res["note"] = "%d elements outside the tolerance of the reference (max %d steps)" % (bad, steps)
                        log("  %s WRONG: %d elements outside the tolerance, max %d steps, %.4f%% bit-identical" % (
                            m, bad, steps, 100 * exact))
                    if m.startswith("ropekv"):
                        kept[m] = outs
                    if m in SAME_AS and SAME_AS[m] in kept:
                        res["same"] = same_as(torch, outs, kept[SAME_AS[m]], m)
                        if res["same"] < 1:
                            res["note"] = "%.4f%% of the output equal to %s's bit for bit" % (100 * res["same"],
                                                                                             SAME_AS[m])
                            log("  %s: %s" % (m, res["note"]))
                    if res["status"] == "ok":
                        try:
                            if cpu:
                                res["us"], res["timing"] = time_cpu(fn, args.calls, args.reps), "cpu"
                            else:
                                res["us"], res["timing"], note = time_method(torch, fn, args.calls, args.reps)
                                if note:
                                    res["note"] = note
                            res["bytes"] = job_bytes(T, H, kv, m)
                            res["bw_pct"] = bw_pct(res["bytes"], res["us"], floors["copy_Bps"])
                        except Exception as e:  # noqa: BLE001
                            msg = str(e).split("\n")[0][:200]
                            log("  %s: timing failed: %s" % (m, msg))
                            res.update(status="n/a", us=None, note="timing failed: %s" % msg)
                    del fn, outputs, outs
                    r["results"][m] = res
                rows.append(r)
                del pb, ref, kept
                if not cpu:
                    torch.cuda.empty_cache()
                res = r["results"]
                log("T=%5d H=%3d %-8s " % (T, H, kv) + "  ".join("%s %s" % (m, cell(res.get(m))) for m in methods)
                    + "  limit %s" % fmt_us(r["limit_us"]))
    paths = write_job_outputs(args, meta, floors, rows, methods)
    log("wrote " + ", ".join(paths))
    if state.get("ctx") is not None:
        state["ctx"].close()
    wrong = [(r["T"], r["H"], r["kv"], m) for r in rows for m, v in r["results"].items() if v["status"] == "WRONG"]
    return 1 if wrong else 0


def write_job_outputs(args, meta, floors, rows, methods):
    """The md tables (time per method, each ropekv method's speed-up over its best peer, % of the copy of the same
    bytes, bit-identical fractions, the Triton peers' equality with ropekv; then BW % per method) and the csv."""
    os.makedirs(args.out, exist_ok=True)
    gpu = re.sub(r"[^A-Za-z0-9]+", "_", meta["gpu"]).strip("_") or "gpu"
    tag = re.sub(r"[^A-Za-z0-9_.-]+", "_", args.tag)
    mode = args.mode
    stem = "bench_%s_%s_%s%s" % (meta["date"], gpu, mode, "_" + tag if tag else "")
    base = os.path.join(args.out, stem)
    lines = []
    if mode == "v32":
        lines.append("# DeepSeek-V3.2 writer (fp8_tile rows, paged cache): ropekv vs peers on %s" % meta["gpu"])
    else:
        lines.append("# KV-cache read-back (rows by slot, dequantized to bf16): ropekv vs peers on %s" % meta["gpu"])
    lines.append("")
    lines.append("- date: %s; GPU: %s (%d SMs / CUs); torch %s (%s); triton %s; ropekv %s (target %s)" % (
        meta["datetime"], meta["gpu"], meta["sms"], meta["torch"], meta["cuda"], meta["triton"], meta["ropekv"],
        meta["target"]))
    if args.cpu:
        lines.append("- **--cpu: the script checked on the CPU; the times and bandwidths are not GPU figures**")
    for label, (name, get_ms) in meta["kernels"].items():
        lines.append("- ropekv kernel (%s): `%s` (kernel_get %.1f ms)" % (label, name, get_ms))
    if mode == "v32":
        lines.append("- shapes: DeepSeek-V3.2 L=%d, R=%d, GPT-J rope, f32 cos_sin_cache [%d, %d]; paged uint8 cache "
                     "[blocks, %d, %d]: per token %d fp8 e4m3 codes (tiles of %d, scale = max(amax / 448, FLT_MIN)), "
                     "%d float32 scales, %d bf16 rope values; query absorbed (bf16 [T, H, %d]) or none" % (
                         L, R, MAX_POS, R, args.block_size, ROW_BYTES, L, TILE, NTILES, R, W))
    else:
        lines.append("- caches: fp8_tile = deepseek_v32's paged uint8 [blocks, %d, %d]; fp8_e4m3 = deepseek_v3's "
                     "flat [rows, %d] (k_scale %.2f, value * k_scale); bf16 = deepseek_v3's flat [rows, %d]; "
                     "out bf16 [T, %d]; every 64th slot -1 (a zero row)" % (args.block_size, ROW_BYTES, W, K_SCALE,
                                                                           W, W))
    lines.append("- timing: %d calls per CUDA graph, median of %d replays, each queued behind a GPU spin; per-call "
                 "us (* = graph capture failed: CUDA events)" % (args.calls, args.reps))
    lines.append("- floors (same run): empty kernel %.2f us; 16 B read + 16 B write kernel %.2f us; device copy "
                 "%.2f TB/s (2 GiB, read + write)" % (floors["empty_us"], floors["roundtrip_us"],
                                                      floors["copy_Bps"] / 1e12))
    if mode == "v32":
        lines.append("- checks: the rows' latent codes and float32 scales bit-identical to a PyTorch reference (or "
                     "within one fp8 step / 2 ulps, for a division not correctly rounded), the rope parts (row and "
                     "q_out) bit-identical to ropekv's fma rope or within one bf16 step of max(|expected|, "
                     "|x0*c| + |x1*s|), q_nope copied bit for bit, other rows untouched; `= ropekv`: the fraction of "
                     "a Triton peer's output bytes equal to ropekv's")
    else:
        lines.append("- checks: out bit-identical to a PyTorch reference (one float32 product rounded to bf16 per "
                     "value; bf16 rows copied; padding rows zero); `= ropekv`: the fraction of a Triton peer's out "
                     "equal to ropekv's")
    peers = "; ".join("%s: %s" % (k, ", ".join(p for p in v if p in methods)) for k, v in JOB_PEERS.items()
                      if k in methods)
    lines.append("- limit = max(round-trip floor, bytes / copy bandwidth) with the bytes of %s; copy us = a device "
                 "copy of the same bytes (half read, half written)%s" % (
                     "the absorbed job" if mode == "v32" else "the read",
                     "; vs best peer = best peer us / ropekv us, the peers of each ropekv method: " + peers
                     if peers else ""))
    lines.append("")
    rk = [m for m in methods if m in JOB_PEERS]
    sames = [m for m in methods if m in SAME_AS]
    head = ["T"] + (["H"] if mode == "v32" else []) + ["kv"] + ["%s us" % m for m in methods] + ["limit us", "copy us"]
    for m in rk:
        head += ["%s vs best peer" % m, "%s %% of copy" % m, "%s bit-identical" % m]
    head += ["%s = ropekv" % m for m in sames]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "|".join("---" for _ in head) + "|")
    for r in rows:
        res = r["results"]
        vals = [str(r["T"])] + ([str(r["H"])] if mode == "v32" else []) + [r["kv"]]
        vals += [cell(res.get(m)) for m in methods] + [fmt_us(r["limit_us"]), fmt_us(r.get("copy_us"))]
        for m in rk:
            me = res.get(m)
            ok = me is not None and me["status"] == "ok"
            vals.append(_ratio_vs_best(res, m, [p for p in JOB_PEERS[m] if p in methods]))
            vals.append("%.0f%%" % (100 * r["copy_us"] / me["us"]) if ok and r.get("copy_us") else "-")
            vals.append(_exact(me))
        for m in sames:
            v = res.get(m)
            vals.append("%.4f%%" % (100 * v["same"]) if v is not None and v.get("same") is not None else "-")
        lines.append("| " + " | ".join(vals) + " |")
    lines.append("")
    lines.append("Bandwidth: BW %% = bytes the method's job moves / time / the copy bandwidth above (%.2f TB/s). %s "
                 "MB = those bytes." % (floors["copy_Bps"] / 1e12,
                                        "The V3.2 writer's: the absorbed query (q_nope + q_pe read, q_out written; "
                                        "none: nothing), k_nope + k_pe read, the 656-byte row written, positions, "
                                        "slots and cos/sin rows read." if mode == "v32" else
                                        "The read's: each row read (1152, 576 or 656 bytes), the bf16 out row "
                                        "(1152 bytes) written, the slots read."))
    lines.append("")
    jobs = []
    for m in methods:
        j = V32_FORMS.get(m, "read")
        if j not in jobs:
            jobs.append(j)
    head = ["T"] + (["H"] if mode == "v32" else []) + ["kv"] + ["%s BW %%" % m for m in methods]
    head += ["%s MB" % j for j in jobs]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "|".join("---" for _ in head) + "|")
    for r in rows:
        res = r["results"]
        vals = [str(r["T"])] + ([str(r["H"])] if mode == "v32" else []) + [r["kv"]]
        for m in methods:
            v = res.get(m)
            pct = v.get("bw_pct") if v is not None and v["status"] == "ok" else None
            vals.append("%.0f%%" % pct if pct is not None else "-")
        vals += ["%.3f" % ((v32_bytes(r["T"], r["H"], j) if mode == "v32" else read_bytes(r["T"], r["kv"])) / 1e6)
                 for j in jobs]
        lines.append("| " + " | ".join(vals) + " |")
    notes = sorted({"%s: %s" % (m, r["results"][m]["note"]) for r in rows for m in methods
                    if r["results"].get(m) and r["results"][m].get("note")})
    if notes:
        lines.append("")
        lines.append("Notes:")
        lines += ["- " + n for n in notes[:20]]
    md = "\n".join(lines) + "\n"
    with open(base + ".md", "w") as fh:
        fh.write(md)
    print(md)
    with open(base + ".csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["date", "gpu", "mode", "T", "H", "kv", "method", "status", "us", "timing", "max_steps",
                    "bit_identical", "same_as_ropekv", "bytes", "limit_us", "copy_us", "empty_us", "roundtrip_us",
                    "copy_TBps", "job", "method_bytes", "bw_pct", "note"])
        for r in rows:
            for m in methods:
                res = r["results"].get(m)
                if res is None:
                    continue
                w.writerow([meta["datetime"], meta["gpu"], mode, r["T"], r["H"], r["kv"], m, res["status"],
                            "%.4f" % res["us"] if res.get("us") is not None else "", res.get("timing", ""),
                            res.get("steps", ""), "%.6f" % res["exact"] if res.get("exact") is not None else "",
                            "%.6f" % res["same"] if res.get("same") is not None else "", r["bytes"],
                            "%.4f" % r["limit_us"], "%.4f" % r["copy_us"] if r.get("copy_us") else "",
                            "%.4f" % floors["empty_us"], "%.4f" % floors["roundtrip_us"],
                            "%.4f" % (floors["copy_Bps"] / 1e12), V32_FORMS.get(m, "read"),
                            job_bytes(r["T"], r["H"], r["kv"], m),
                            "%.2f" % res["bw_pct"] if res.get("bw_pct") is not None else "", res.get("note", "")])
    paths = [base + ".md", base + ".csv"]
    if not args.no_plot:
        try:
            paths.append(plot(base + ".png", meta, rows, methods, args))
        except Exception as e:  # noqa: BLE001
            log("plot failed: %s" % e)
    return paths


# ---- the fused kv_a RMSNorm section (write mode) ------------------------------------------------------------------
# DeepSeek-V3's kv_a_layernorm fused into the write (norm="rms"): k_nope is the raw kv_a projection's c_kv, normalized
# per token (r = 1 / sqrt(mean(x^2) + eps) in float32, n = bf16(bf16(x * r) * w)) before the row is cached. Per shape:
#   ropekv_norm      ropekv norm="rms": one launch
#   ropekv_norm_out  ropekv norm="rms_out": one launch that also writes the normalized c_kv [T, L] (prefill's up-proj)
#   rmsnorm_ropekv   a separate RMSNorm kernel (Triton, written here; torch eager where Triton is missing or --cpu)
#                    writing a [T, L] bf16 buffer, then ropekv with norm none on it: two launches
#   eager_norm       the unfused PyTorch sequence (the eager peer's) with the RMSNorm in torch first
#   ropekv_nonorm    ropekv with norm none on the already-normalized input (the fused op's norm_out placed where the
#                    raw c_kv was): the baseline of the goal "ropekv_norm within 5% of it at every shape"

def rmsnorm_torch(x, w, eps, rounding="twice"):
    """RMSNorm as engines write it in PyTorch (HF DeepseekV3RMSNorm): float32 mean of squares (torch's reduction
    order), rsqrt, x * r rounded to bf16 (rounding "twice") and times the weight, rounded to bf16."""
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    if rounding == "twice":
        y = y.to(torch.bfloat16).float()
    return (y * w.float()).to(torch.bfloat16)


def mla_norm_unfused(q_nope, q_pe, c_kv, k_pe, positions, slots, cos_sin_cache, kv_cache, k_scale, fp8: bool, w,
                     eps: float, rounding: str = "twice", kv_conv: str = "mul_recip"):
    """The unfused sequence with the kv_a RMSNorm first (rmsnorm_torch of c_kv), then mla_rope_kv_unfused on the
    normalized rows. Returns q_out."""
    k_nope = rmsnorm_torch(c_kv, w, eps, rounding)
    return mla_rope_kv_unfused(q_nope, q_pe, k_nope, k_pe, positions, slots, cos_sin_cache, kv_cache, k_scale, fp8,
                               kv_conv)


def rmsnorm_triton_launch(pb, out):
    """(grid, args, kwargs) of the Triton RMSNorm (triton_kernels()["rmsnorm"]) normalizing the problem's raw c_kv
    (pb.k_nope: the first L columns of the [T, 576] projection, its row stride) into out [T, L] bf16 with the weight,
    eps and rounding of the kernel's spec (pb.norm_weight, pb.norm_eps, pb.norm_rounding)."""
    args = (pb.k_nope, pb.norm_weight, out, pb.k_nope.stride(0), out.stride(0), float(pb.norm_eps))
    return (pb.T,), args, dict(L=L, TWICE=pb.norm_rounding == "twice", num_warps=2)


def norm_problem(torch, T, H, kv, dev, cos_sin_cache, k_scale, seed, policy, info):
    """A Problem whose c_kv (k_nope) is a raw projection output: each token's row scaled by a power of two in 2^-8 ..
    2^8 (so the norm matters), with the RMSNorm weight [L] of the kernel's dtype (info.norm_weight; about 1 +- 0.5), its
    eps and rounding (info.norm_eps, info.norm_rounding)."""
    pb = Problem(torch, T, H, kv, dev, cos_sin_cache, k_scale, seed, None, policy)
    g = torch.Generator(device=dev).manual_seed(seed + 7)
    scale = torch.exp2(torch.randint(-8, 9, (T, 1), device=dev, generator=g).float())
    pb.proj[:, :L] = (pb.proj[:, :L].float() * scale).to(torch.bfloat16)  # exact: powers of two
    wd = torch.float32 if info.norm_weight == "f32" else torch.bfloat16
    pb.norm_weight = (1.0 + 0.5 * torch.randn(L, device=dev, generator=g)).to(wd)
    pb.norm_eps, pb.norm_rounding = info.norm_eps, info.norm_rounding
    return pb


def prenormed(pb, n):
    """The problem with the normalized rows n [T, L] in the projection's c_kv columns (a copy of it: the same layout
    as the raw input): the input of ropekv_nonorm and of the references the norm methods are checked against."""
    import copy
    pn = copy.copy(pb)
    pn.proj = pb.proj.clone()
    pn.proj[:, :L] = n
    pn.k_nope, pn.k_pe = pn.proj[:, :L], pn.proj[:, L:]
    return pn


def norm_ref_check(torch, pb, n):
    """How the fused op's normalized rows n compare with two PyTorch RMSNorms of the raw c_kv: (the fraction equal,
    bit for bit, to ropekv.reference.rms_norm, the kernels' arithmetic emulated exactly; the largest relative
    difference from a float64 RMSNorm, x / sqrt(mean(x^2) + eps) * w). The latter is within 2^-7 + 2^-12: two bf16
    roundings of at most 2^-8 each, and float32's few 2^-24."""
    want = rkref.rms_norm(pb.k_nope, pb.norm_weight, pb.norm_eps, pb.norm_rounding)
    r = compare_bits(torch, n, want, "bf16")
    x = pb.k_nope.double()
    n64 = x / torch.sqrt((x * x).mean(-1, keepdim=True) + pb.norm_eps) * pb.norm_weight.double()
    rel = ((n.double() - n64).abs() / n64.abs().clamp(min=1e-300)).max()
    return r[1] / max(r[2], 1), float(rel)


NORM_REL_TOL = 2.0 ** -7 + 2.0 ** -12


def _norm_kernel(state, pb, norm):
    return ropekv_kernel(state, "ctx", "absorbed", False, pb.kv, norm)


def method_ropekv_norm(state, pb, norm="rms"):
    """ropekv with the fused norm: the raw c_kv in, norm_weight; rms_out also writes the normalized rows ("norm")."""
    k = _norm_kernel(state, pb, norm)
    out = {"cache": pb.new_cache(), "q_out": pb.new_q_out()}
    kw = dict(q_nope=pb.q_nope, q_pe=pb.q_pe, q_out=out["q_out"], k_nope=pb.k_nope, k_pe=pb.k_pe,
              kv_cache=out["cache"], positions=pb.positions, slots=pb.slots, cos_sin=pb.cos_sin_cache,
              k_scale=pb.k_scale if pb.fp8 else None, norm_weight=pb.norm_weight)
    if norm == "rms_out":
        out["norm"] = pb.torch.empty(pb.T, L, device=pb.dev, dtype=pb.torch.bfloat16)
        kw["norm_out"] = out["norm"]
    return k.bind(**kw), lambda: out


def method_ropekv_norm_out(state, pb):
    return method_ropekv_norm(state, pb, "rms_out")


def method_ropekv_nonorm(state, pb):
    """ropekv with norm none on the already-normalized input (pb.pn, the fused op's rows in the c_kv columns)."""
    return method_ropekv(state, pb.pn)


def rmsnorm_impl(state, cpu):
    """("triton", None) where the Triton RMSNorm can run, else ("torch", why): the torch eager RMSNorm stands in."""
    if cpu:
        return "torch", "--cpu: no Triton on the CPU, the RMSNorm is torch eager"
    try:
        triton_kernels()
        return "triton", None
    except Exception as e:  # noqa: BLE001
        return "torch", "Triton missing (%s): the RMSNorm is torch eager" % str(e).split("\n")[0][:120]


def method_rmsnorm_ropekv(state, pb):
    """A separate RMSNorm kernel into a [T, L] bf16 buffer ("norm"), then ropekv with norm none on it: two launches."""
    k = _norm_kernel(state, pb, "none")
    buf = pb.torch.empty(pb.T, L, device=pb.dev, dtype=pb.torch.bfloat16)
    out = {"cache": pb.new_cache(), "q_out": pb.new_q_out(), "norm": buf}
    launch = k.bind(q_nope=pb.q_nope, q_pe=pb.q_pe, q_out=out["q_out"], k_nope=buf, k_pe=pb.k_pe,
                    kv_cache=out["cache"], positions=pb.positions, slots=pb.slots, cos_sin=pb.cos_sin_cache,
                    k_scale=pb.k_scale if pb.fp8 else None)
    if state.get("rmsnorm_impl", "torch") == "triton":
        kern = triton_kernels()["rmsnorm"]
        grid, a, kw = rmsnorm_triton_launch(pb, buf)

        def fn():
            kern[grid](*a, **kw)
            launch()
    else:
        def fn():
            buf.copy_(rmsnorm_torch(pb.k_nope, pb.norm_weight, pb.norm_eps, pb.norm_rounding))
            launch()

    return fn, lambda: out


def method_eager_norm(state, pb):
    out = {"cache": pb.new_cache()}
    pol = pb.policy

    def fn():
        out["q_out"] = mla_norm_unfused(pb.q_nope, pb.q_pe, pb.k_nope, pb.k_pe, pb.positions, pb.slots,
                                        pb.cos_sin_cache, out["cache"], pb.k_scale, pb.fp8, pb.norm_weight,
                                        pb.norm_eps, pb.norm_rounding, pol["kv_scale"])

    return fn, lambda: out


NORM_FNS = {"ropekv_norm": method_ropekv_norm, "ropekv_norm_out": method_ropekv_norm_out,
            "rmsnorm_ropekv": method_rmsnorm_ropekv, "eager_norm": method_eager_norm,
            "ropekv_nonorm": method_ropekv_nonorm}


def norm_bytes(T, H, kv_fp8, norm="rms"):
    """The bytes of the fused job: the absorbed op's (op_bytes; the raw c_kv is read where k_nope was), the weight,
    and for rms_out the normalized rows written."""
    return op_bytes(T, H, kv_fp8) + L * 2 + (T * L * 2 if norm == "rms_out" else 0)


def _bits(torch, t):
    """A bf16 or fp8 tensor's bits (int16 / uint8 view), for bit-for-bit equality (NaN payloads included)."""
    return t.view(torch.int16) if t.dtype == torch.bfloat16 else t.view(torch.uint8)


def check_norm(torch, pb, ref, outs, method, base):
    """(ok, max steps, fraction bit-identical, elements failing, note) of a norm-section method. ref is the fma
    Reference of pb.pn (the fused op's normalized rows as k_nope) and base the outputs of ropekv norm none on pb.pn.
    ropekv's methods: the check() of the op on those rows (k_nope parts bit-identical), and the cache and q_out equal to
    base's bit for bit (the fused op = the op without the norm on k_nope := norm_out); ropekv_norm_out's rows too
    (equal to pb.n_fused, bit for bit). The peers (their RMSNorm sums in another order): k_nope parts within
    NORM_PEER_STEPS codes of the cache's format, their normalized buffer within 2 bf16 steps of pb.n_fused; the rest
    as check()."""
    kind = "fp8" if pb.fp8 else "bf16"
    notes = []
    if method in NORM_PEERS:
        ok, steps, exact, bad = check(torch, pb.pn, ref, outs, "absorbed", False, nope_steps=NORM_PEER_STEPS[kind])
        if outs.get("norm") is not None:
            d = code_steps(torch, outs["norm"], pb.n_fused, "bf16")
            nb = int((d > NORM_PEER_STEPS["bf16"]).sum())
            bad += nb
            ok = ok and nb == 0
            worst = int(d.max()) if d.numel() else 0
            if worst:
                notes.append("normalized rows up to %d bf16 step(s) from the fused op's" % worst)
        return ok, steps, exact, bad, "; ".join(notes)
    ok, steps, exact, bad = check(torch, pb.pn, ref, outs, "absorbed", False)
    if method != "ropekv_nonorm":
        for name in ("cache", "q_out"):
            if not torch.equal(_bits(torch, outs[name]), _bits(torch, base[name])):
                ok = False
                bad += 1
                notes.append("%s differs from ropekv norm none on the fused norm_out" % name)
        if outs.get("norm") is not None and not torch.equal(_bits(torch, outs["norm"]), _bits(torch, pb.n_fused)):
            ok = False
            bad += 1
            notes.append("norm_out differs from the first rms_out launch's")
    return ok, steps, exact, bad, "; ".join(notes)


def run_norm_section(args, meta, state, floors, dev, cos_sin_cache, k_scale, policy):
    """The norm section: per shape (the T x H of the run, the KV dtypes of args.norm_kv_list, absorbed bf16 query), the
    fused op's normalized rows first (an rms_out launch), the baseline and the reference on them, then each method
    checked and timed. Returns the rows."""
    import ropekv
    cpu = args.cpu
    methods = list(args.norm_method_list)
    if state.get("ctx") is None:
        state["ctx"] = ropekv.Context(rk_backend(cpu), device=args.device)
        meta["ropekv"], meta["target"] = ropekv.version(), state["ctx"].target
    state["rmsnorm_impl"], why = rmsnorm_impl(state, cpu)
    meta["rmsnorm_impl"] = why or "Triton (rmsnorm_kernel)"
    if why:
        log("norm: rmsnorm_ropekv: %s" % why)
    infos = {}
    for kv in args.norm_kv_list:
        try:
            for norm in ("none", "rms", "rms_out"):
                k = ropekv_kernel(state, "ctx", "absorbed", False, kv, norm)
                sync_policy(policy, k.info, kv == "fp8_e4m3", False)
            infos[kv] = k.info
        except Exception as e:  # noqa: BLE001
            infos[kv] = "%s: %s" % (type(e).__name__, str(e).split("\n")[0][:200])
            log("norm (kv %s): no kernel: %s" % (kv, infos[kv]))
    first = next((i for i in infos.values() if not isinstance(i, str)), None)
    if first is not None:
        meta["norm"] = "weight %s [%d], eps %g, rounding %s (%s)" % (first.norm_weight, L, first.norm_eps,
                                                                    first.norm_rounding, first.norm_matches or "-")
    rows = []
    for H in args.H_list:
        for kv in args.norm_kv_list:
            for T in args.T_list:
                r = {"T": T, "H": H, "kv": kv, "results": {}, "bytes": norm_bytes(T, H, kv == "fp8_e4m3")}
                r["limit_us"] = max(floors["roundtrip_us"], r["bytes"] / floors["copy_Bps"] * 1e6)
                rows.append(r)
                need = 9 * T * H * W * 2 + 64 * T * W + (256 << 20)
                free = torch.cuda.mem_get_info(dev)[0] if not cpu else float("inf")
                info = infos[kv]
                why = None
                if isinstance(info, str):
                    why = "no kernel: " + info
                elif need > 0.9 * free:
                    why = "not enough memory (needs ~%.1f GB, %.1f GB free)" % (need / 1e9, free / 1e9)
                pb = ref = base = None
                if why is None:
                    try:
                        pb = norm_problem(torch, T, H, kv, dev, cos_sin_cache, k_scale, T * 1000 + H * 10 + 5, policy,
                                          info)
                        # the fused op's normalized rows (rms_out), the baseline (norm none on them), the reference
                        fn, outputs = method_ropekv_norm(state, pb, "rms_out")
                        fn()
                        if not cpu:
                            torch.cuda.synchronize()
                        pb.n_fused = outputs()["norm"]
                        pb.pn = prenormed(pb, pb.n_fused)
                        pb.pn.ref = ref = Reference(torch, pb.pn)
                        fn, outputs = method_ropekv_nonorm(state, pb)
                        fn()
                        if not cpu:
                            torch.cuda.synchronize()
                        base = outputs()
                        r["norm_exact"], r["norm_rel"] = norm_ref_check(torch, pb, pb.n_fused)
                        if r["norm_exact"] < 1 or r["norm_rel"] > NORM_REL_TOL:
                            log("  norm_out vs PyTorch: %.4f%% equal to rms_norm (the kernels' arithmetic), %.3g "
                                "relative from a float64 RMSNorm (bound %.3g)" % (100 * r["norm_exact"],
                                                                                   r["norm_rel"], NORM_REL_TOL))
                    except Exception as e:  # noqa: BLE001
                        why = "no reference: %s: %s" % (type(e).__name__, str(e).split("\n")[0][:200])
                        if os.environ.get("BENCH_TRACEBACK"):
                            traceback.print_exc()
                if why is not None:
                    log("T=%d H=%d %s (norm): %s" % (T, H, kv, why))
                    for m in methods:
                        r["results"][m] = {"status": "skipped" if "memory" in why else "n/a", "us": None, "note": why}
                    continue
                norm_off = r["norm_rel"] > NORM_REL_TOL
                for m in methods:
                    res = {"status": "ok", "us": None, "timing": "", "note": ""}
                    try:
                        fn, outputs = NORM_FNS[m](state, pb)
                        fn()
                        if not cpu:
                            torch.cuda.synchronize()
                        outs = outputs()
                    except Exception as e:  # noqa: BLE001
                        msg = str(e).split("\n")[0][:200]
                        log("  %s failed: %s" % (m, msg))
                        if os.environ.get("BENCH_TRACEBACK"):
                            traceback.print_exc()
                        r["results"][m] = {"status": "n/a", "us": None, "note": "%s: %s" % (type(e).__name__, msg)}
                        continue
                    ok, steps, exact, bad, note = check_norm(torch, pb, ref, outs, m, base)
                    if ok and norm_off and m.startswith("ropekv_norm"):
                        ok, note = False, "norm_out %.3g relative from a float64 RMSNorm (bound %.3g)" % (
                            r["norm_rel"], NORM_REL_TOL)
                    res.update(exact=exact, steps=steps, note=note)
                    if m == "rmsnorm_ropekv" and state["rmsnorm_impl"] != "triton":
                        res["note"] = "; ".join(x for x in (note, "RMSNorm by torch eager") if x)
                    if not ok:
                        res["status"] = "WRONG"
                        res["note"] = "%d elements outside the tolerance (max %d steps)%s" % (
                            bad, steps, "; " + note if note else "")
                        log("  %s WRONG: %s" % (m, res["note"]))
                    else:
                        try:
                            if cpu:
                                res["us"], res["timing"] = time_cpu(fn, args.calls, args.reps), "cpu"
                            else:
                                res["us"], res["timing"], tn = time_method(torch, fn, args.calls, args.reps)
                                if tn:
                                    res["note"] = "; ".join(x for x in (res["note"], tn) if x)
                        except Exception as e:  # noqa: BLE001
                            msg = str(e).split("\n")[0][:200]
                            log("  %s: timing failed: %s" % (m, msg))
                            res.update(status="n/a", us=None, note="timing failed: %s" % msg)
                            try:
                                if not cpu:
                                    torch.cuda.synchronize()
                            except Exception:  # noqa: BLE001
                                pass
                    del fn, outputs, outs
                    r["results"][m] = res
                del pb, ref, base
                if not cpu:
                    torch.cuda.empty_cache()
                res = r["results"]
                log("T=%5d H=%3d %-8s norm: " % (T, H, kv) + "  ".join("%s %s" % (m, cell(res.get(m)))
                                                                        for m in methods)
                    + "  fused/no-norm %s" % _norm_ratio(res, "ropekv_norm", "ropekv_nonorm"))
    return rows


def _norm_ratio(res, a, b):
    """a us / b us as '1.03' ('-' when either is missing)."""
    x, y = res.get(a), res.get(b)
    if not x or not y or x["status"] != "ok" or y["status"] != "ok":
        return "-"
    return "%.3f" % (x["us"] / y["us"])


def norm_goal(rows):
    """(shapes where ropekv_norm and ropekv_nonorm were both timed, those within NORM_GOAL, the worst ratio and its
    shape)."""
    n = met = 0
    worst = None
    for r in rows:
        v = _norm_ratio(r["results"], "ropekv_norm", "ropekv_nonorm")
        if v == "-":
            continue
        n += 1
        met += float(v) <= NORM_GOAL
        if worst is None or float(v) > worst[0]:
            worst = (float(v), r["T"], r["H"], r["kv"])
    return n, met, worst


def write_norm_outputs(args, meta, floors, rows, methods):
    """The norm section's md table (per-call us of each method, the fused op / ropekv without the norm, the fused op's
    speed-up over each peer, its share of the limit, bit-identical fractions) and csv."""
    os.makedirs(args.out, exist_ok=True)
    gpu = re.sub(r"[^A-Za-z0-9]+", "_", meta["gpu"]).strip("_") or "gpu"
    tag = re.sub(r"[^A-Za-z0-9_.-]+", "_", args.tag)
    stem = "bench_%s_%s%s_norm%s" % (meta["date"], gpu, "_quick" if args.quick else "", "_" + tag if tag else "")
    base = os.path.join(args.out, stem)
    lines = ["# Fused kv_a RMSNorm + MLA RoPE + KV-cache write: ropekv norm='rms' vs RMSNorm + ropekv on %s"
             % meta["gpu"], ""]
    lines.append("- date: %s; GPU: %s (%d SMs / CUs); torch %s (%s); triton %s; ropekv %s (target %s)" % (
        meta["datetime"], meta["gpu"], meta["sms"], meta["torch"], meta["cuda"], meta["triton"], meta["ropekv"],
        meta["target"]))
    if args.cpu:
        lines.append("- **--cpu: the script checked on the CPU; the times are not GPU figures**")
    lines.append("- spec %s, norm: %s; DeepSeek-V3 dims L=%d, R=%d, absorbed bf16 query [T, H, %d]; the raw c_kv = the "
                 "first %d columns of the [T, %d] projection, each token's row scaled by 2^-8 .. 2^8; paged cache "
                 "[blocks, %d, %d]; fp8: OCP e4m3, k_scale %.2f" % (args.spec, meta.get("norm", "-"), L, R, W, L, W,
                                                                  BLOCK_SIZE, W, K_SCALE))
    lines.append("- methods: ropekv_norm = norm='rms' (one launch); ropekv_norm_out = norm='rms_out' (also writes the "
                 "normalized c_kv [T, %d]); rmsnorm_ropekv = a separate RMSNorm kernel (%s) into a [T, %d] bf16 buffer, "
                 "then ropekv with norm none on it (two launches); eager_norm = the unfused PyTorch sequence with the "
                 "RMSNorm in torch (float32 mean, rsqrt); ropekv_nonorm = ropekv with norm none on the already-"
                 "normalized input (the baseline)" % (L, meta.get("rmsnorm_impl", "-"), L))
    lines.append("- timing: %d calls per CUDA graph, median of %d replays, each queued behind a GPU spin; per-call us "
                 "(* = graph capture failed: CUDA events)" % (args.calls, args.reps))
    lines.append("- floors (same run): empty kernel %.2f us; 16 B read + 16 B write kernel %.2f us; device copy "
                 "%.2f TB/s (2 GiB, read + write); limit = max(round trip, bytes of the rms job / copy bandwidth)" % (
                     floors["empty_us"], floors["roundtrip_us"], floors["copy_Bps"] / 1e12))
    lines.append("- fused / no-norm = ropekv_norm us / ropekv_nonorm us (goal: <= %.2f at every shape); out / no-norm the "
                 "same for ropekv_norm_out; vs X = X us / ropekv_norm us" % NORM_GOAL)
    lines.append("- checks before timing: an rms_out launch gives the normalized rows n; ropekv_norm's and "
                 "ropekv_norm_out's cache and q_out equal, bit for bit, those of ropekv norm none on k_nope := n; every "
                 "method against the fma reference of the op on n (k_nope parts bit-identical for ropekv; for the peers, "
                 "whose RMSNorm sums in another order, within %d bf16 / %d fp8 steps, their normalized buffer within %d "
                 "bf16 steps of n); n itself against ropekv.reference.rms_norm (`norm_out = ref`: the kernels' "
                 "arithmetic, expected 100%%) and a float64 RMSNorm (within 2^-7 + 2^-12 relative)" % (
                     NORM_PEER_STEPS["bf16"], NORM_PEER_STEPS["fp8"], NORM_PEER_STEPS["bf16"]))
    n, met, worst = norm_goal(rows)
    if n:
        lines.append("- **goal (fused within %d%% of ropekv without the norm): met at %d of %d shapes; worst %.3f at T=%d "
                     "H=%d %s**" % (round(100 * (NORM_GOAL - 1)), met, n, worst[0], worst[1], worst[2], worst[3]))
    lines.append("")
    head = ["T", "H", "kv"] + ["%s us" % m for m in methods] + ["limit us", "fused / no-norm", "out / no-norm"]
    head += ["vs %s" % m for m in NORM_PEERS if m in methods] + ["% of limit", "bit-identical", "norm_out = ref"]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "|".join("---" for _ in head) + "|")
    for r in rows:
        res = r["results"]
        fused = res.get("ropekv_norm")
        ok = fused is not None and fused["status"] == "ok"
        vals = [str(r["T"]), str(r["H"]), r["kv"]] + [cell(res.get(m)) for m in methods] + [fmt_us(r["limit_us"])]
        vals += [_norm_ratio(res, "ropekv_norm", "ropekv_nonorm"), _norm_ratio(res, "ropekv_norm_out", "ropekv_nonorm")]
        vals += ["%.2fx" % (res[m]["us"] / fused["us"]) if ok and res.get(m) and res[m]["status"] == "ok" else "-"
                 for m in NORM_PEERS if m in methods]
        vals.append("%.0f%%" % (100 * r["limit_us"] / fused["us"]) if ok else "-")
        vals.append(_exact(fused))
        vals.append("%.4f%%" % (100 * r["norm_exact"]) if r.get("norm_exact") is not None else "-")
        lines.append("| " + " | ".join(vals) + " |")
    notes = sorted({"%s: %s" % (m, r["results"][m]["note"]) for r in rows for m in methods
                    if r["results"].get(m) and r["results"][m].get("note")})
    if notes:
        lines += ["", "Notes:"] + ["- " + x for x in notes[:20]]
    md = "\n".join(lines) + "\n"
    with open(base + ".md", "w") as fh:
        fh.write(md)
    print(md)
    with open(base + ".csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["date", "gpu", "T", "H", "kv", "method", "status", "us", "timing", "max_steps", "bit_identical",
                    "bytes", "limit_us", "empty_us", "roundtrip_us", "copy_TBps", "spec", "fused_over_nonorm",
                    "norm_out_exact", "norm_out_rel_f64", "note"])
        for r in rows:
            for m in methods:
                res = r["results"].get(m)
                if res is None:
                    continue
                w.writerow([meta["datetime"], meta["gpu"], r["T"], r["H"], r["kv"], m, res["status"],
                            "%.4f" % res["us"] if res.get("us") is not None else "", res.get("timing", ""),
                            res.get("steps", ""), "%.6f" % res["exact"] if res.get("exact") is not None else "",
                            norm_bytes(r["T"], r["H"], r["kv"] == "fp8_e4m3", "rms_out" if m == "ropekv_norm_out"
                                       else "rms"), "%.4f" % r["limit_us"], "%.4f" % floors["empty_us"],
                            "%.4f" % floors["roundtrip_us"], "%.4f" % (floors["copy_Bps"] / 1e12), args.spec,
                            _norm_ratio(r["results"], "ropekv_norm", "ropekv_nonorm"),
                            "%.6f" % r["norm_exact"] if r.get("norm_exact") is not None else "",
                            "%.3g" % r["norm_rel"] if r.get("norm_rel") is not None else "", res.get("note", "")])
    return [base + ".md", base + ".csv"]


# ---- main ---------------------------------------------------------------------------------------------------------
def sync_policy(policy, info, kv_fp8, q_fp8):
    """The spec's policy is the definition: take the ropekv kernel's (KernelInfo) where it differs from SPECS."""
    pairs = []
    if kv_fp8:
        pairs += [("kv_scale", info.scale), ("kv_rr", bool(info.rope_bf16_round))]
    if q_fp8 and getattr(info, "q_dtype", "bf16") == "fp8_e4m3":
        pairs += [("q_scale", info.q_fp8_scale), ("q_rr", bool(info.q_fp8_rope_bf16_round)),
                  ("q_sat", float(info.q_fp8_saturate))]
    for key, value in pairs:
        if policy[key] != value:
            log("policy: %s is %r in the library's %s, %r in this script's table: the library's is used"
                % (key, value, info.key, policy[key]))
            policy[key] = value


def main(argv=None):
    global torch, rkref
    args = parse_args(argv)
    import torch
    import ropekv.reference as rkref
    cpu = args.cpu
    if not cpu and not torch.cuda.is_available():
        print("bench_mla: no GPU: torch.cuda (CUDA or ROCm PyTorch) sees none (--cpu checks the script on the CPU)",
              file=sys.stderr)
        return 2
    if cpu:
        dev = torch.device("cpu")
        meta_gpu, sms, cuda_v = "cpu", 0, "-"
    else:
        GPU["backend"], GPU["runtime"] = gpu_platform(torch)
        torch.cuda.set_device(args.device)
        torch.cuda.init()
        torch.cuda.current_device()
        dev = torch.device("cuda", args.device)
        props = torch.cuda.get_device_properties(dev)
        meta_gpu, sms, cuda_v = torch.cuda.get_device_name(dev), props.multi_processor_count, GPU["runtime"]
        for name, val in (("recompile_limit", 256), ("cache_size_limit", 256), ("accumulated_recompile_limit", 4096),
                          ("accumulated_cache_size_limit", 4096)):
            try:  # one compiled function serves every shape: let it recompile as often as the sweep needs
                if hasattr(torch._dynamo.config, name):
                    setattr(torch._dynamo.config, name, val)
            except Exception:  # noqa: BLE001
                pass

    now = datetime.datetime.now()
    policy = dict(SPECS[args.spec])
    meta = {"gpu": meta_gpu, "sms": sms, "torch": torch.__version__, "cuda": cuda_v, "date": now.strftime("%Y-%m-%d"),
            "datetime": now.strftime("%Y-%m-%d %H:%M"), "ropekv": "-", "target": "-", "kernels": {},
            "policy": policy}
    if cpu:
        meta["triton"] = "n/a (--cpu)"
    else:
        try:
            meta["triton"] = triton_kernels()["version"]
        except Exception as e:  # noqa: BLE001
            meta["triton"] = "n/a (%s)" % str(e).split("\n")[0]
    if args.mode != "write":
        return main_job(args, meta, dev)
    methods = list(args.method_list)
    state = {"args": args, "meta": meta, "kernels": {}}
    unsupported = {}
    if "aiter" in methods:
        try:
            aiter_op()
        except Exception as e:  # noqa: BLE001
            why = "aiter is not available (%s: %s)" % (type(e).__name__, str(e).split("\n")[0][:200])
            if args.methods:  # asked for: a column of n/a with the reason
                unsupported["aiter"] = why
            else:  # a default peer only where it imports (ROCm with aiter installed)
                methods.remove("aiter")
            log("aiter: %s" % why)
    for m in methods:
        if FORMS[m][0] not in policy["q_forms"] and m not in unsupported:
            unsupported[m] = "spec %s does not list q form %s" % (args.spec, FORMS[m][0])
            log("%s: n/a (%s)" % (m, unsupported[m]))
    rk_main = [m for m in methods if m.startswith("ropekv") and m not in ("ropekv_nopdl", "ropekv_prefetch")
               and m not in unsupported]
    if rk_main or "ropekv_nopdl" in methods or "ropekv_prefetch" in methods:
        import ropekv
        meta["ropekv"] = ropekv.version()
    if rk_main:
        backend = rk_backend(cpu)
        ctx = ropekv.Context(backend, device=args.device)
        state["ctx"] = ctx
        meta["target"] = ctx.target
        for kv in args.kv_list:  # compiled before the sweep, so kernel_get times are their own
            for m in rk_main:
                form, q_fp8 = FORMS[m]
                try:
                    k = ropekv_kernel(state, "ctx", form, q_fp8, kv)
                except Exception as e:  # noqa: BLE001
                    msg = "%s: %s" % (type(e).__name__, str(e).split("\n")[0][:200])
                    log("%s (kv %s): no kernel: %s" % (m, kv, msg))
                    continue  # the method's first call raises the same, and it is reported n/a
                sync_policy(policy, k.info, kv == "fp8_e4m3", q_fp8)
        log("ropekv %s on %s: %s; stats %s" % (meta["ropekv"], ctx.target,
                                               ", ".join(n for n, _ in meta["kernels"].values()), ctx.stats()))
    for m, name, opts in (("ropekv_nopdl", "nopdl", {"pdl": False}),
                          ("ropekv_prefetch", "prefetch", {"pdl": True, "pdl_prefetch": True})):
        if m in methods:
            state["ctx_" + name] = ropekv.Context(rk_backend(cpu), device=args.device, **opts)
            for kv in args.kv_list:
                ropekv_kernel(state, "ctx_" + name, "absorbed", False, kv)
    log("%s, torch %s, triton %s" % ("CPU (--cpu)" if cpu else "GPU " + meta["gpu"], meta["torch"], meta["triton"]))

    if cpu:
        floors = measure_floors_cpu(args.calls, args.reps)
    else:
        floors = measure_floors(torch, dev, args.calls, args.reps)
    log("floors: empty %.2f us, round trip %.2f us, copy %.2f TB/s" % (floors["empty_us"], floors["roundtrip_us"],
                                                                       floors["copy_Bps"] / 1e12))

    def timed(fn):
        return time_cpu(fn, args.calls, args.reps) if cpu else time_graph(torch, fn, args.calls, args.reps)

    half = R // 2
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, half, dtype=torch.float64, device=dev) * 2 / R))
    freqs = torch.arange(MAX_POS, dtype=torch.float64, device=dev)[:, None] * inv_freq[None, :]
    cos_sin_cache = torch.cat([freqs.cos(), freqs.sin()], dim=-1).float().contiguous()
    k_scale = torch.tensor([K_SCALE], dtype=torch.float32, device=dev)
    q_scale = torch.tensor([args.q_scale], dtype=torch.float32, device=dev)
    q8 = any(FORMS[m][1] for m in methods)

    rows = []
    compile_broken = {}
    order = [m for m in methods if m.startswith("eager")] + [m for m in methods if not m.startswith("eager")]
    for H in [] if args.norm_only else args.H_list:
        for kv in args.kv_list:
            for T in args.T_list:
                seed = T * 1000 + H * 10 + (kv == "fp8_e4m3")
                need = 4 * T * H * W * 2 + 6 * T * H * R + 64 * T * W + (256 << 20)
                if q8:
                    need += 2 * T * H * W
                if any(FORMS[m][0] == "inplace" for m in methods):
                    need += T * H * W * 2
                r = {"T": T, "H": H, "kv": kv, "results": {}}
                free = torch.cuda.mem_get_info(dev)[0] if not cpu else float("inf")
                if need > 0.9 * free:
                    log("T=%d H=%d %s: skipped (needs ~%.1f GB, %.1f GB free)" % (T, H, kv, need / 1e9, free / 1e9))
                    for m in methods:
                        r["results"][m] = {"status": "skipped", "us": None, "note": "not enough memory"}
                    pb = None
                else:
                    pb = Problem(torch, T, H, kv, dev, cos_sin_cache, k_scale, seed, q_scale, policy)
                r["bytes"] = op_bytes(T, H, kv == "fp8_e4m3")
                r["limit_us"] = max(floors["roundtrip_us"], r["bytes"] / floors["copy_Bps"] * 1e6)
                r["copy_us"] = None
                if pb is not None:
                    try:
                        n = max(16, r["bytes"] // 2 // 16 * 16)
                        src = torch.ones(n, dtype=torch.uint8, device=dev)
                        dst = torch.empty_like(src)
                        r["copy_us"] = timed(lambda: dst.copy_(src))
                        del src, dst
                    except Exception as e:  # noqa: BLE001
                        log("  same-size copy failed: %s" % str(e).split("\n")[0][:200])
                ref = None
                if pb is not None:
                    try:
                        ref = Reference(torch, pb, q8=q8)  # the fma reference every method is checked against
                        pb.ref = ref
                    except Exception as e:  # noqa: BLE001
                        msg = str(e).split("\n")[0][:200]
                        log("  reference failed: %s" % msg)
                        if os.environ.get("BENCH_TRACEBACK"):
                            traceback.print_exc()
                        for m in methods:
                            r["results"][m] = {"status": "n/a", "us": None, "note": "no reference: %s" % msg}
                for m in (order if ref is not None else []):
                    res = {"status": "ok", "us": None, "timing": "", "note": ""}
                    form, q_fp8 = FORMS[m]
                    if m in unsupported:
                        r["results"][m] = {"status": "n/a", "us": None, "note": unsupported[m]}
                        continue
                    broken_key = (m, kv)
                    if m.startswith("compile") and broken_key in compile_broken:
                        r["results"][m] = {"status": "n/a", "us": None, "note": compile_broken[broken_key]}
                        continue
                    try:
                        t_setup = time.time()
                        fn, outputs = METHODS[m](state, pb)
                        fn()
                        if not cpu:
                            torch.cuda.synchronize()
                        outs = outputs()
                        if m.startswith("compile") and time.time() - t_setup > 5:
                            log("  torch.compile took %.1f s (%s T=%d H=%d %s)" % (time.time() - t_setup, m, T, H, kv))
                    except Exception as e:  # noqa: BLE001
                        msg = str(e).split("\n")[0][:200]
                        log("  %s failed: %s" % (m, msg))
                        if os.environ.get("BENCH_TRACEBACK"):
                            traceback.print_exc()
                        try:
                            if not cpu:
                                torch.cuda.synchronize()
                        except Exception:  # noqa: BLE001
                            pass
                        if m.startswith("compile"):
                            compile_broken[broken_key] = "torch.compile failed: " + msg
                        r["results"][m] = {"status": "n/a", "us": None, "note": "%s: %s" % (type(e).__name__, msg)}
                        continue
                    ok, steps, exact, bad = check(torch, pb, ref, outs, form, q_fp8)
                    res["exact"], res["steps"] = exact, steps
                    if not ok:
                        res["status"] = "WRONG"
                        res["note"] = "%d elements outside the tolerance of the fma reference (max %d steps)" % (
                            bad, steps)
                        log("  %s WRONG: %d elements outside the tolerance, max %d steps, %.4f%% bit-identical" % (
                            m, bad, steps, 100 * exact))
                    elif m.startswith("triton_fp8q") and exact < 1:
                        res["note"] = "not bit-identical (%.4f%%) although it does ropekv's arithmetic" % (100 * exact)
                        log("  %s: %s" % (m, res["note"]))
                    if res["status"] == "ok":
                        try:
                            if cpu:
                                res["us"], res["timing"] = time_cpu(fn, args.calls, args.reps), "cpu"
                            else:
                                res["us"], res["timing"], note = time_method(torch, fn, args.calls, args.reps)
                                if note:
                                    res["note"] = note
                            res["bytes"] = pb.bytes_moved(form, q_fp8)
                            res["bw_pct"] = bw_pct(res["bytes"], res["us"], floors["copy_Bps"])
                        except Exception as e:  # noqa: BLE001
                            msg = str(e).split("\n")[0][:200]
                            log("  %s: timing failed: %s" % (m, msg))
                            res.update(status="n/a", us=None, note="timing failed: %s" % msg)
                            try:
                                if not cpu:
                                    torch.cuda.synchronize()
                            except Exception:  # noqa: BLE001
                                pass
                    del fn, outputs, outs
                    r["results"][m] = res
                rows.append(r)
                del pb, ref
                if not cpu:
                    torch.cuda.empty_cache()
                res = r["results"]
                rk = res.get("ropekv") or res.get("ropekv_fp8q") or {}
                log("T=%5d H=%3d %-8s " % (T, H, kv) + "  ".join("%s %s" % (m, cell(res.get(m))) for m in methods)
                    + "  limit %s" % fmt_us(r["limit_us"])
                    + ("  (ropekv %.4f%% bit-identical)" % (100 * rk["exact"]) if rk.get("exact") is not None else ""))

    paths = [] if args.norm_only else write_outputs(args, meta, floors, rows, methods)
    if args.norm_on:  # the fused kv_a RMSNorm section, in the same run (the same floors)
        norm_rows = run_norm_section(args, meta, state, floors, dev, cos_sin_cache, k_scale, policy)
        paths += write_norm_outputs(args, meta, floors, norm_rows, args.norm_method_list)
        rows = rows + norm_rows
    log("wrote " + ", ".join(paths))
    for name in ("ctx", "ctx_nopdl", "ctx_prefetch"):
        if state.get(name) is not None:
            state[name].close()
    wrong = [(r["T"], r["H"], r["kv"], m) for r in rows for m, v in r["results"].items() if v["status"] == "WRONG"]
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
