#!/usr/bin/env python3
"""Fused MLA RoPE + KV-cache write: ropekv against its peers, DeepSeek-V3 shapes, on one GPU.

    python3 bench/bench_mla.py --out bench/results            # the full sweep
    python3 bench/bench_mla.py --quick --out /tmp/r           # T in {1, 128, 2048}, H = 16, bf16

Shapes: L = 512, R = 64 (GPT-J rope), f32 cos_sin_cache [4096, 64]; T tokens x H heads x KV dtype.
Inputs are laid out as engines pass them: q_nope / q_pe slices of one [T, H, 576] query, k_nope / k_pe
slices of one [T, 576] projection output, a paged cache [blocks, 16, 576], random positions, slots a
permutation of the cache rows; fp8 caches use k_scale = 0.5 (stored = x * (1 / k_scale), clamped to +-448).

Methods (all measured in this one process, see bench/README.md):
  ropekv   the library through its Python binding (cuda backend, absorbed form), default options: on sm_90
           launches use programmatic dependent launch (PDL: each call's launch overlaps the previous
           kernel's tail; the kernel waits for it before touching memory)
  ropekv_nopdl  the same kernel launched without PDL (Context(pdl=False)); not a peer
  triton   a fused Triton kernel written here: grid (T, H + 1), one program per (token, head) and one per
           token for the KV row, fp32 math
  triton_pdl  the same Triton kernel with gdc_wait / gdc_launch_dependents at its start, launched with
           launch_pdl=True: the peer given the same launch overlap as ropekv
  ropekv_prefetch, triton_prefetch  both with PDL, reading positions and the cos/sin rows before the wait
           (ropekv's Context(pdl_prefetch=True): valid when the kernel before does not write them); these
           two are compared with each other only
  compile  torch.compile of the unfused PyTorch sequence below
  eager    the unfused PyTorch sequence engines ran: rope on q_pe and k_pe with torch ops, torch.cat for
           q_out and the KV row, the fp8 cast, index_copy_ into the cache (negative slots masked to a
           scratch row)
Before it is timed every method is checked against one reference computed here in PyTorch, per shape, that
does ropekv's arithmetic exactly (docs/numerics.md: x1*s rounded to float32, then one fma, emulated in
float64): the q_nope / k_nope parts must be bit-identical, and each rope element bit-identical or within
one bf16 (fp8) step of max(|expected|, |x0*c| + |x1*s|) - the error bound of the peers' two-rounding
x0*c - x1*s, which can be many steps of a result that cancels. A method that fails is reported WRONG and
not timed. 'bit-identical' in the table is ropekv's fraction of codes equal to the reference's (100%
expected).

Timing: CALLS calls captured in one CUDA graph, replayed REPS times, the median per-call time (when a
capture fails: back-to-back launches timed with CUDA events, marked *). Each replay is queued behind
~0.5 ms of GPU spinning (torch.cuda._sleep), so the start event is taken when the GPU reaches it rather
than while the host is still submitting the replay. Floors in the same run: an empty
kernel, a kernel that reads 16 B and writes 16 B, and the device copy bandwidth (a 2 GiB copy, bytes read +
written / time). limit = max(round-trip floor, bytes moved / copy bandwidth), the bytes the op moves
being (q_nope + q_pe read, q_out written, k_nope + k_pe read, KV row written, positions + slots +
cos/sin rows read). Per shape, "copy us" is a device copy of half those bytes (so the same bytes read +
written) timed the same way: what this device achieves moving this much data in one call, the fairer
bar at mid sizes where launch ramp-up and tail are a visible part of a call."""
import argparse
import csv
import datetime
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
BLOCK_SIZE = 16

ALL_T = [1, 4, 16, 64, 128, 512, 2048, 8192, 32768]
ALL_H = [16, 128]
ALL_KV = ["bf16", "fp8_e4m3"]
ALL_METHODS = ["ropekv", "ropekv_nopdl", "ropekv_prefetch", "triton", "triton_pdl", "triton_prefetch", "compile",
               "eager"]
PEERS = ["triton", "triton_pdl", "compile", "eager"]
PREFETCH_PEERS = ["triton_prefetch"]  # compared with ropekv_prefetch only (the same contract)

T0 = time.time()
torch = None  # imported in main(), so that --help and py_compile work without torch


def log(msg):
    print("[%7.1fs] %s" % (time.time() - T0, msg), flush=True)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=os.path.join(ROOT, "bench", "results"), help="directory for .md, .csv, .png")
    p.add_argument("--quick", action="store_true", help="T in {1, 128, 2048}, H = 16, kv bf16")
    p.add_argument("--methods", default=",".join(ALL_METHODS), help="comma list of %s" % ", ".join(ALL_METHODS))
    p.add_argument("--T", default=None, help="comma list of token counts (default: the full sweep)")
    p.add_argument("--H", default=None, help="comma list of head counts")
    p.add_argument("--kv", default=None, help="comma list of bf16, fp8_e4m3")
    p.add_argument("--calls", type=int, default=50, help="calls per CUDA graph")
    p.add_argument("--reps", type=int, default=5, help="graph replays (the median is reported)")
    p.add_argument("--compile-mode", default="default",
                   help="torch.compile mode (default, max-autotune-no-cudagraphs, ...)")
    p.add_argument("--compile-dynamic", default="auto", choices=["auto", "true", "false"],
                   help="torch.compile dynamic= (auto: PyTorch's automatic dynamic shapes, fewest recompiles)")
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--tag", default="", help="suffix for the output file names (e.g. when a sweep is split)")
    a = p.parse_args(argv)
    ints = lambda s: [int(v) for v in s.split(",") if v.strip()]  # noqa: E731
    a.T_list = ints(a.T) if a.T else ([1, 128, 2048] if a.quick else ALL_T)
    a.H_list = ints(a.H) if a.H else ([16] if a.quick else ALL_H)
    a.kv_list = [v.strip() for v in a.kv.split(",")] if a.kv else (["bf16"] if a.quick else ALL_KV)
    a.method_list = [m.strip() for m in a.methods.split(",") if m.strip()]
    for m in a.method_list:
        if m not in ALL_METHODS:
            p.error("unknown method %r (known: %s)" % (m, ", ".join(ALL_METHODS)))
    for kv in a.kv_list:
        if kv not in ALL_KV:
            p.error("unknown kv %r" % kv)
    return a


# ---- the peers ------------------------------------------------------------------------------------------------
def _rope_gptj(x, cos, sin):
    """GPT-J (interleaved) rope of a bf16 tensor in fp32, back to bf16: pairs through view_as pairs + stack."""
    xf = x.float().unflatten(-1, (-1, 2))
    x0, x1 = xf[..., 0], xf[..., 1]
    return torch.stack((x0 * cos - x1 * sin, x1 * cos + x0 * sin), dim=-1).flatten(-2).to(torch.bfloat16)


def mla_rope_kv_unfused(q_nope, q_pe, k_nope, k_pe, positions, slots, cos_sin_cache, kv_cache, k_scale, fp8: bool):
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
        kv = (kv.float() * (1.0 / k_scale)).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).view(torch.uint8)
        flat = flat.view(torch.uint8)
    idx = torch.where(slots >= 0, slots, flat.shape[0] - 1)
    flat.index_copy_(0, idx, kv)
    return q_out


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
    def empty_kernel(x_ptr):
        pass

    @triton.jit
    def roundtrip_kernel(src_ptr, dst_ptr):
        o = tl.arange(0, 4)
        tl.store(dst_ptr + o, tl.load(src_ptr + o))

    _TRITON.update(mla=mla_rope_kv_kernel, empty=empty_kernel, roundtrip=roundtrip_kernel, version=triton.__version__)
    return _TRITON


# ---- problem ----------------------------------------------------------------------------------------------------
class Problem:
    def __init__(self, torch, T, H, kv, dev, cos_sin_cache, k_scale, seed):
        self.torch, self.T, self.H, self.kv, self.dev = torch, T, H, kv, dev
        self.fp8 = kv == "fp8_e4m3"
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
        self.cache_dtype = torch.float8_e4m3fn if self.fp8 else bf

    def new_cache(self):
        return self.torch.zeros(self.blocks, BLOCK_SIZE, W, device=self.dev, dtype=self.cache_dtype)

    def new_q_out(self):
        return self.torch.empty(self.T, self.H, W, device=self.dev, dtype=self.torch.bfloat16)

    def bytes_moved(self):
        T, H = self.T, self.H
        kv_bytes = 1 if self.fp8 else 2
        return (T * H * (L + R) * 2      # q_nope + q_pe read
                + T * H * W * 2          # q_out written
                + T * (L + R) * 2        # k_nope + k_pe read
                + T * W * kv_bytes       # KV row written
                + T * 8 * 2              # positions + slots
                + T * R * 4)             # cos/sin rows


# ---- methods: each returns (fn, outputs) where fn() runs one call and outputs() gives (q_out, kv_cache) ----------
def method_ropekv(state, pb, which="ropekv_kernels"):
    k = state[which][pb.kv]
    q_out, cache = pb.new_q_out(), pb.new_cache()
    launch = k.bind(q_nope=pb.q_nope, q_pe=pb.q_pe, q_out=q_out, k_nope=pb.k_nope, k_pe=pb.k_pe, kv_cache=cache,
                    positions=pb.positions, slots=pb.slots, cos_sin=pb.cos_sin_cache,
                    k_scale=pb.k_scale if pb.fp8 else None)
    return launch, lambda: (q_out, cache)


def method_ropekv_nopdl(state, pb):
    return method_ropekv(state, pb, "ropekv_nopdl_kernels")


def method_triton(state, pb, pdl=False, prefetch=False):
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

    return fn, lambda: (q_out, cache)


def method_triton_pdl(state, pb):
    return method_triton(state, pb, pdl=True)


def method_triton_prefetch(state, pb):
    return method_triton(state, pb, pdl=True, prefetch=True)


def method_ropekv_prefetch(state, pb):
    return method_ropekv(state, pb, "ropekv_prefetch_kernels")


def _torch_method(f, pb):
    cache = pb.new_cache()
    out = {}

    def fn():
        out["q_out"] = f(pb.q_nope, pb.q_pe, pb.k_nope, pb.k_pe, pb.positions, pb.slots, pb.cos_sin_cache, cache,
                         pb.k_scale, pb.fp8)

    return fn, lambda: (out["q_out"], cache)


def method_eager(state, pb):
    return _torch_method(mla_rope_kv_unfused, pb)


def method_compile(state, pb):
    if state.get("compiled") is None:
        dyn = {"auto": None, "true": True, "false": False}[state["args"].compile_dynamic]
        state["compiled"] = torch.compile(mla_rope_kv_unfused, mode=state["args"].compile_mode, dynamic=dyn)
    return _torch_method(state["compiled"], pb)


METHODS = {"ropekv": method_ropekv, "ropekv_nopdl": method_ropekv_nopdl, "ropekv_prefetch": method_ropekv_prefetch,
           "triton": method_triton, "triton_pdl": method_triton_pdl, "triton_prefetch": method_triton_prefetch,
           "compile": method_compile, "eager": method_eager}


# ---- checks -------------------------------------------------------------------------------------------------------
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


def _fma_f32(torch, a, b, p):
    """float32(a*b + p) rounded once, as fmaf: a holds bf16 values (so a*b is exact in float64), b and p float32.
    The float64 sum is made round-to-odd (TwoSum error, then one ulp toward the exact value when the sum is
    inexact and its last bit even), so its conversion to float32 is the correctly rounded result."""
    prod = a.double() * b.double()
    pd = p.double()
    s = prod + pd
    bb = s - prod
    err = (prod - (s - bb)) + (pd - bb)
    fix = (err != 0) & torch.isfinite(err) & ((s.view(torch.int64) & 1) == 0)
    toward = torch.where(err > 0, torch.full_like(s, float("inf")), torch.full_like(s, float("-inf")))
    return torch.where(fix, torch.nextafter(s, toward), s).float()


def _ulp(torch, m, mant_bits, min_exp):
    """One step of a float format (mant_bits stored mantissa bits, min_exp its smallest normal exponent) at
    magnitudes m (float64, >= 0, normal or zero): 2^(max(floor(log2 m), min_exp) - mant_bits), built from the
    exponent bits (exact, no log2 or pow)."""
    e = ((m.view(torch.int64) >> 52) & 0x7FF) - 1023
    e = torch.clamp(e, min=min_exp) - mant_bits
    return ((e + 1023) << 52).view(torch.float64)


def _fp8_codes(torch, v):
    """float32 values (already clamped) rounded to fp8 e4m3fn (to nearest even), as uint8 codes."""
    return v.to(torch.float8_e4m3fn).view(torch.uint8)


def _decode(torch, t):
    """Values of a bf16 tensor or of fp8 e4m3fn codes held as uint8, as float64."""
    if t.dtype == torch.uint8:
        return t.view(torch.float8_e4m3fn).float().double()
    return t.double()


class Reference:
    """What ropekv computes (docs/numerics.md, gen/ref.c), in PyTorch, once per shape: the rope rows
    y0 = fmaf(x0, c, -(x1*s)), y1 = fmaf(x1, c, x0*s) with x1*s, x0*s float32 products, rounded to bf16 (q_out
    and a bf16 KV row) or scaled by float32(1 / k_scale), clamped to +-448 and rounded to fp8 (an fp8 KV row;
    codes kept as uint8). Besides the expected codes it keeps, per rope element, the tolerance for methods that
    round x0*c and x1*s separately (eager, torch.compile, Triton): one step of the output format at
    max(|expected|, |x0*c| + |x1*s|) (the terms scaled like the value for fp8). Two-rounding differs from the
    fma by at most about 2^-23 (|x0*c| + |x1*s|): many steps of a result that cancels, within one step at the
    terms' size."""

    def __init__(self, torch, pb, chunk_elems=1 << 24):
        half = R // 2
        cs = pb.cos_sin_cache.index_select(0, pb.positions)
        inv = (1.0 / pb.k_scale).float() if pb.fp8 else None  # a float32 reciprocal first, as mul_recip does
        step = max(1, chunk_elems // (pb.H * R))
        q_rope, q_tol, kv_rope, kv_tol = [], [], [], []
        for t0 in range(0, pb.T, step):
            sl = slice(t0, min(pb.T, t0 + step))
            c, sn = cs[sl, :half], cs[sl, half:]
            y, m = self._rope(torch, pb.q_pe[sl], c[:, None, :], sn[:, None, :])
            q_rope.append(y.to(torch.bfloat16))
            q_tol.append(_ulp(torch, torch.maximum(_decode(torch, q_rope[-1]).abs(), m), 7, -126).float())
            y, m = self._rope(torch, pb.k_pe[sl], c, sn)
            if pb.fp8:
                kv_rope.append(_fp8_codes(torch, (y * inv).clamp(-FP8_MAX, FP8_MAX)))
                m = m * inv.double()
                fmt = (3, -6)
            else:
                kv_rope.append(y.to(torch.bfloat16))
                fmt = (7, -126)
            kv_tol.append(_ulp(torch, torch.maximum(_decode(torch, kv_rope[-1]).abs(), m), *fmt).float())
        self.q_rope, self.q_tol = torch.cat(q_rope), torch.cat(q_tol)
        self.kv_rope, self.kv_tol = torch.cat(kv_rope), torch.cat(kv_tol)
        if pb.fp8:  # k_nope * (1 / 0.5) is exact: one rounding, the same for every method
            self.kv_nope = _fp8_codes(torch, (pb.k_nope.float() * inv).clamp(-FP8_MAX, FP8_MAX))
        else:
            self.kv_nope = pb.k_nope

    @staticmethod
    def _rope(torch, x, c, sn):
        """(ropekv's float32 rope of the bf16 GPT-J rows x, |x0*c| + |x1*s| per output element in float64)."""
        xf = x.float().unflatten(-1, (-1, 2))
        x0, x1 = xf[..., 0], xf[..., 1]
        y0 = _fma_f32(torch, x0, c, -(x1 * sn))
        y1 = _fma_f32(torch, x1, c, x0 * sn)
        a0, a1 = x0.double().abs(), x1.double().abs()
        ac, asn = c.double().abs(), sn.double().abs()
        return (torch.stack((y0, y1), dim=-1).flatten(-2),
                torch.stack((a0 * ac + a1 * asn, a1 * ac + a0 * asn), dim=-1).flatten(-2))


def _outside(torch, got, want, tol):
    """How many elements of got are neither bit-identical to want (NaN == NaN) nor within tol of it."""
    a, b = _decode(torch, got), _decode(torch, want)
    ok = (got == want) | (torch.isnan(a) & torch.isnan(b)) | ((a - b).abs() <= tol.double())
    return int((~ok).sum())


def check(torch, pb, ref, outs, chunk_elems=1 << 25):
    """(ok, max steps, fraction bit-identical, elements failing) of outs = (q_out, cache) against the fma
    reference. The q_nope / k_nope parts must be bit-identical (copies; for fp8 one exact scaling and one
    rounding), every rope element bit-identical or within its tolerance (see Reference), and the KV rows that
    no token writes untouched (zero). 'max steps' and 'bit-identical' count codes against the reference's over
    q_out and the KV rows (the scratch row aside)."""
    kind = "fp8" if pb.fp8 else "bf16"
    q_out, cache = outs
    flat = (cache.view(torch.uint8) if pb.fp8 else cache).view(-1, W)
    worst = same = n = bad = 0

    def add(r):  # r = compare_bits(...); returns how many codes differ
        nonlocal worst, same, n
        worst, same, n = max(worst, r[0]), same + r[1], n + r[2]
        return r[2] - r[1]

    step = max(1, chunk_elems // (pb.H * W))
    for t0 in range(0, pb.T, step):
        sl = slice(t0, min(pb.T, t0 + step))
        bad += add(compare_bits(torch, q_out[sl, :, :L], pb.q_nope[sl], "bf16"))
        add(compare_bits(torch, q_out[sl, :, L:], ref.q_rope[sl], "bf16"))
        bad += _outside(torch, q_out[sl, :, L:], ref.q_rope[sl], ref.q_tol[sl])
        rows = flat[pb.slots[sl]]  # every token has its own row (the slots are a permutation)
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
    torch.cuda._sleep(1_000_000)


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


def write_outputs(args, meta, floors, rows, methods):
    os.makedirs(args.out, exist_ok=True)
    gpu = re.sub(r"[^A-Za-z0-9]+", "_", meta["gpu"]).strip("_") or "gpu"
    tag = re.sub(r"[^A-Za-z0-9_.-]+", "_", args.tag)
    stem = "bench_%s_%s%s%s" % (meta["date"], gpu, "_quick" if args.quick else "", "_" + tag if tag else "")
    base = os.path.join(args.out, stem)
    peers = [m for m in PEERS if m in methods]

    lines = []
    lines.append("# MLA RoPE + KV-cache write: ropekv vs peers on %s" % meta["gpu"])
    lines.append("")
    lines.append("- date: %s; GPU: %s (%d SMs); torch %s (CUDA %s); triton %s; ropekv %s (target %s)" % (
        meta["datetime"], meta["gpu"], meta["sms"], meta["torch"], meta["cuda"], meta["triton"], meta["ropekv"],
        meta["target"]))
    for kv, name in meta["kernels"].items():
        lines.append("- ropekv kernel (%s): `%s` (kernel_get %.1f ms)" % (kv, name, meta["get_ms"][kv]))
    lines.append("- shapes: DeepSeek-V3 L=%d, R=%d, GPT-J rope, f32 cos_sin_cache [%d, %d]; paged cache [blocks, %d, %d];"
                 " fp8: OCP e4m3, k_scale %.2f (x * 1/k_scale), clamp +-%g" % (L, R, MAX_POS, R, BLOCK_SIZE, W,
                                                                            K_SCALE, FP8_MAX))
    lines.append("- timing: %d calls per CUDA graph, median of %d replays, each queued behind a GPU spin so the host's "
                 "submission is not timed; per-call us (* = graph capture failed: back-to-back launches timed with "
                 "CUDA events)" % (args.calls, args.reps))
    lines.append("- floors (same run): empty kernel %.2f us; 16 B read + 16 B write kernel %.2f us; device copy "
                 "%.2f TB/s (2 GiB, read + write)" % (floors["empty_us"], floors["roundtrip_us"],
                                                      floors["copy_Bps"] / 1e12))
    lines.append("- limit = max(round-trip floor, bytes / copy bandwidth); vs best peer = best peer us / ropekv us; "
                 "% of limit = limit us / ropekv us x 100; copy us = a device copy of the same bytes (half read, "
                 "half written) in the same graph timing; % of copy = copy us / ropekv us x 100; ropekv and "
                 "triton_pdl launch with PDL, ropekv_nopdl and triton without; prefetch vs peer = triton_prefetch us "
                 "/ ropekv_prefetch us (both read positions and cos/sin before the PDL wait)")
    lines.append("- torch.compile: mode=%s, dynamic=%s" % (args.compile_mode, args.compile_dynamic))
    lines.append("- checks: every method before timing vs a PyTorch reference of ropekv's arithmetic (one rounded "
                 "product, one fma, emulated exactly): q_nope/k_nope parts bit-identical, rope elements bit-identical "
                 "or within 1 bf16 (fp8) step of max(|expected|, |x0*c| + |x1*s|), the bound of two-rounding "
                 "x0*c - x1*s; 'bit-identical' = ropekv's outputs equal to the reference's bit for bit")
    lines.append("")
    head = ["T", "H", "kv"] + ["%s us" % m for m in methods] + ["limit us", "copy us"]
    if "ropekv" in methods:
        head += ["vs best peer", "% of limit", "% of copy", "bit-identical"]
    pf = "ropekv_prefetch" in methods and "triton_prefetch" in methods
    if pf:
        head += ["prefetch vs peer"]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "|".join("---" for _ in head) + "|")
    for r in rows:
        res = r["results"]
        vals = [str(r["T"]), str(r["H"]), r["kv"]] + [cell(res.get(m)) for m in methods] + [fmt_us(r["limit_us"]),
                                                                                            fmt_us(r.get("copy_us"))]
        if "ropekv" in methods:
            rk = res.get("ropekv")
            ok_rk = rk is not None and rk["status"] == "ok"
            best = [res[m]["us"] for m in peers if res.get(m) and res[m]["status"] == "ok"]
            vals.append("%.2fx" % (min(best) / rk["us"]) if ok_rk and best else "-")
            vals.append("%.0f%%" % (100 * r["limit_us"] / rk["us"]) if ok_rk else "-")
            vals.append("%.0f%%" % (100 * r["copy_us"] / rk["us"]) if ok_rk and r.get("copy_us") else "-")
            vals.append("%.4f%%" % (100 * rk["exact"]) if rk is not None and rk.get("exact") is not None else "-")
        if pf:
            a, b = res.get("ropekv_prefetch"), res.get("triton_prefetch")
            ok = a and b and a["status"] == "ok" and b["status"] == "ok"
            vals.append("%.2fx" % (b["us"] / a["us"]) if ok else "-")
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
                    "bytes", "limit_us", "copy_us", "empty_us", "roundtrip_us", "copy_TBps", "note"])
        for r in rows:
            for m in methods:
                res = r["results"].get(m)
                if res is None:
                    continue
                w.writerow([meta["datetime"], meta["gpu"], r["T"], r["H"], r["kv"], m, res["status"],
                            "%.4f" % res["us"] if res.get("us") is not None else "", res.get("timing", ""),
                            res.get("steps", ""), "%.6f" % res["exact"] if res.get("exact") is not None else "",
                            r["bytes"], "%.4f" % r["limit_us"],
                            "%.4f" % r["copy_us"] if r.get("copy_us") else "", "%.4f" % floors["empty_us"],
                            "%.4f" % floors["roundtrip_us"], "%.4f" % (floors["copy_Bps"] / 1e12), res.get("note", "")])
    paths = [base + ".md", base + ".csv"]
    if not args.no_plot:
        try:
            paths.append(plot(base + ".png", meta, rows, methods, args))
        except Exception as e:  # noqa: BLE001
            log("plot failed: %s" % e)
    return paths


def plot(path, meta, rows, methods, args):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    Hs = sorted({r["H"] for r in rows})
    kvs = [kv for kv in ALL_KV if any(r["kv"] == kv for r in rows)]
    fig, axes = plt.subplots(len(Hs), len(kvs), figsize=(6.5 * len(kvs), 4.8 * len(Hs)), squeeze=False)
    style = {"ropekv": ("C3", "o"), "ropekv_nopdl": ("C5", "o"), "ropekv_prefetch": ("C6", "o"),
             "triton": ("C0", "s"), "triton_pdl": ("C4", "s"), "triton_prefetch": ("C9", "s"),
             "compile": ("C2", "^"), "eager": ("C1", "v")}
    for i, H in enumerate(Hs):
        for j, kv in enumerate(kvs):
            ax = axes[i][j]
            sel = sorted((r for r in rows if r["H"] == H and r["kv"] == kv), key=lambda r: r["T"])
            for m in methods:
                pts = [(r["T"], r["results"][m]["us"]) for r in sel
                       if r["results"].get(m) and r["results"][m]["status"] == "ok"]
                if pts:
                    c, mk = style.get(m, ("k", "."))
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=mk, color=c, label=m)
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
    fig.suptitle("MLA RoPE + KV write, DeepSeek-V3 dims, %s (%s)" % (meta["gpu"], meta["date"]))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# ---- main ---------------------------------------------------------------------------------------------------------
def main(argv=None):
    global torch
    args = parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        print("bench_mla: no CUDA device", file=sys.stderr)
        return 2
    torch.cuda.set_device(args.device)
    torch.cuda.init()
    torch.cuda.current_device()
    dev = torch.device("cuda", args.device)
    props = torch.cuda.get_device_properties(dev)
    import ropekv
    for name, val in (("recompile_limit", 256), ("cache_size_limit", 256), ("accumulated_recompile_limit", 4096),
                      ("accumulated_cache_size_limit", 4096)):
        try:  # one compiled function serves every shape: let it recompile as often as the sweep needs
            if hasattr(torch._dynamo.config, name):
                setattr(torch._dynamo.config, name, val)
        except Exception:  # noqa: BLE001
            pass

    now = datetime.datetime.now()
    meta = {"gpu": torch.cuda.get_device_name(dev), "sms": props.multi_processor_count, "torch": torch.__version__,
            "cuda": torch.version.cuda, "date": now.strftime("%Y-%m-%d"), "datetime": now.strftime("%Y-%m-%d %H:%M"),
            "ropekv": "-", "target": "-", "kernels": {}, "get_ms": {}}
    try:
        meta["triton"] = triton_kernels()["version"]
    except Exception as e:  # noqa: BLE001
        meta["triton"] = "n/a (%s)" % str(e).split("\n")[0]
    methods = list(args.method_list)
    state = {"args": args, "ropekv_kernels": {}}
    if "ropekv" in methods:
        ctx = ropekv.Context("cuda", device=args.device)
        state["ctx"] = ctx
        meta["ropekv"], meta["target"] = ropekv.version(), ctx.target
        for kv in args.kv_list:
            t0 = time.perf_counter()
            k = ctx.kernel("deepseek_v3", kv=kv, q="absorbed")
            meta["get_ms"][kv] = (time.perf_counter() - t0) * 1e3
            meta["kernels"][kv] = k.name
            state["ropekv_kernels"][kv] = k
        log("ropekv %s on %s: %s; stats %s" % (meta["ropekv"], ctx.target, ", ".join(meta["kernels"].values()),
                                               ctx.stats()))
    for m, name, opts in (("ropekv_nopdl", "nopdl", {"pdl": False}),
                          ("ropekv_prefetch", "prefetch", {"pdl": True, "pdl_prefetch": True})):
        if m in methods:
            c2 = ropekv.Context("cuda", device=args.device, **opts)
            state["ctx_" + name] = c2
            state["ropekv_%s_kernels" % name] = {kv: c2.kernel("deepseek_v3", kv=kv, q="absorbed")
                                                 for kv in args.kv_list}
    log("GPU %s, torch %s, triton %s" % (meta["gpu"], meta["torch"], meta["triton"]))

    floors = measure_floors(torch, dev, args.calls, args.reps)
    log("floors: empty %.2f us, round trip %.2f us, copy %.2f TB/s" % (floors["empty_us"], floors["roundtrip_us"],
                                                                       floors["copy_Bps"] / 1e12))

    half = R // 2
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, half, dtype=torch.float64, device=dev) * 2 / R))
    freqs = torch.arange(MAX_POS, dtype=torch.float64, device=dev)[:, None] * inv_freq[None, :]
    cos_sin_cache = torch.cat([freqs.cos(), freqs.sin()], dim=-1).float().contiguous()
    k_scale = torch.tensor([K_SCALE], dtype=torch.float32, device=dev)

    rows = []
    compile_broken = {}
    order = [m for m in methods if m == "eager"] + [m for m in methods if m != "eager"]
    for H in args.H_list:
        for kv in args.kv_list:
            for T in args.T_list:
                seed = T * 1000 + H * 10 + (kv == "fp8_e4m3")
                need = 4 * T * H * W * 2 + 6 * T * H * R + 64 * T * W + (256 << 20)
                free, _ = torch.cuda.mem_get_info(dev)
                r = {"T": T, "H": H, "kv": kv, "results": {}}
                if need > 0.9 * free:
                    log("T=%d H=%d %s: skipped (needs ~%.1f GB, %.1f GB free)" % (T, H, kv, need / 1e9, free / 1e9))
                    for m in methods:
                        r["results"][m] = {"status": "skipped", "us": None, "note": "not enough memory"}
                    pb = None
                else:
                    pb = Problem(torch, T, H, kv, dev, cos_sin_cache, k_scale, seed)
                if pb is not None:
                    r["bytes"] = pb.bytes_moved()
                else:
                    kvb = 1 if kv == "fp8_e4m3" else 2
                    r["bytes"] = T * H * W * 4 + T * W * (2 + kvb) + T * (16 + R * 4)
                r["limit_us"] = max(floors["roundtrip_us"], r["bytes"] / floors["copy_Bps"] * 1e6)
                r["copy_us"] = None
                if pb is not None:
                    try:
                        n = max(16, r["bytes"] // 2 // 16 * 16)
                        src = torch.ones(n, dtype=torch.uint8, device=dev)
                        dst = torch.empty_like(src)
                        r["copy_us"] = time_graph(torch, lambda: dst.copy_(src), args.calls, args.reps)
                        del src, dst
                    except Exception as e:  # noqa: BLE001
                        log("  same-size copy failed: %s" % str(e).split("\n")[0][:200])
                ref = None
                if pb is not None:
                    try:
                        ref = Reference(torch, pb)  # the fma reference every method is checked against
                    except Exception as e:  # noqa: BLE001
                        msg = str(e).split("\n")[0][:200]
                        log("  reference failed: %s" % msg)
                        for m in methods:
                            r["results"][m] = {"status": "n/a", "us": None, "note": "no reference: %s" % msg}
                for m in (order if ref is not None else []):
                    res = {"status": "ok", "us": None, "timing": "", "note": ""}
                    if m == "compile" and kv in compile_broken:
                        r["results"][m] = {"status": "n/a", "us": None, "note": compile_broken[kv]}
                        continue
                    try:
                        t_setup = time.time()
                        fn, outputs = METHODS[m](state, pb)
                        fn()
                        torch.cuda.synchronize()
                        outs = outputs()
                        if m == "compile" and time.time() - t_setup > 5:
                            log("  torch.compile took %.1f s (T=%d H=%d %s)" % (time.time() - t_setup, T, H, kv))
                    except Exception as e:  # noqa: BLE001
                        msg = str(e).split("\n")[0][:200]
                        log("  %s failed: %s" % (m, msg))
                        if os.environ.get("BENCH_TRACEBACK"):
                            traceback.print_exc()
                        try:
                            torch.cuda.synchronize()
                        except Exception:  # noqa: BLE001
                            pass
                        if m == "compile":
                            compile_broken[kv] = "torch.compile failed: " + msg
                        r["results"][m] = {"status": "n/a", "us": None, "note": "%s: %s" % (type(e).__name__, msg)}
                        continue
                    ok, steps, exact, bad = check(torch, pb, ref, outs)
                    res["exact"], res["steps"] = exact, steps
                    if not ok:
                        res["status"] = "WRONG"
                        res["note"] = "%d elements outside the tolerance of the fma reference (max %d steps)" % (
                            bad, steps)
                        log("  %s WRONG: %d elements outside the tolerance, max %d steps, %.4f%% bit-identical" % (
                            m, bad, steps, 100 * exact))
                    if res["status"] == "ok":
                        try:
                            res["us"], res["timing"], note = time_method(torch, fn, args.calls, args.reps)
                            if note:
                                res["note"] = note
                        except Exception as e:  # noqa: BLE001
                            msg = str(e).split("\n")[0][:200]
                            log("  %s: timing failed: %s" % (m, msg))
                            res.update(status="n/a", us=None, note="timing failed: %s" % msg)
                            try:
                                torch.cuda.synchronize()
                            except Exception:  # noqa: BLE001
                                pass
                    del fn, outputs, outs
                    r["results"][m] = res
                rows.append(r)
                del pb, ref
                torch.cuda.empty_cache()
                res = r["results"]
                rk = res.get("ropekv") or {}
                log("T=%5d H=%3d %-8s " % (T, H, kv) + "  ".join("%s %s" % (m, cell(res.get(m))) for m in methods)
                    + "  limit %s" % fmt_us(r["limit_us"])
                    + ("  (ropekv %.4f%% bit-identical)" % (100 * rk["exact"]) if rk.get("exact") is not None else ""))

    paths = write_outputs(args, meta, floors, rows, methods)
    log("wrote " + ", ".join(paths))
    for name in ("ctx", "ctx_nopdl", "ctx_prefetch"):
        if state.get(name) is not None:
            state[name].close()
    wrong = [(r["T"], r["H"], r["kv"], m) for r in rows for m, v in r["results"].items() if v["status"] == "WRONG"]
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
