// ---- prelude: one kernel text for hiprtc, clang (offline, -nogpuinc), nvrtc and the host ----------
// No headers: each compiler family gets ids, entry attributes, fixed-width types, 16-byte vectors,
// fma, and the f32 -> bf16 / fp8 conversions (hardware where RK_HW_* says the target has them).
#if defined(__HIPCC_RTC__) || (defined(__HIP__) && defined(__HIP_DEVICE_COMPILE__))
#define RK_AMD 1
#elif defined(__CUDACC_RTC__) || defined(__CUDACC__)
#define RK_NV 1
#else
#define RK_HOST 1
#endif

#if defined(__clang__)
#pragma clang fp contract(off)
#endif

typedef unsigned char rk_u8;
typedef unsigned short rk_u16;
typedef unsigned int rk_u32;
typedef int rk_i32;
typedef long long rk_i64;
typedef unsigned long long rk_u64;

struct alignas(16) rk_v16 { rk_u32 x, y, z, w; };  // one 16-byte access
struct alignas(8) rk_v8 { rk_u32 x, y; };           // one 8-byte access

// The kernel is built for blocks of RK_BLOCK and of RK_WIDE_BLOCK threads; RK_BLOCK_DIM() is a launch's.
#define RK_MAX_BLOCK (RK_WIDE_BLOCK > RK_BLOCK ? RK_WIDE_BLOCK : RK_BLOCK)

#if defined(RK_AMD)
#if defined(__HIPCC_RTC__)
#define RK_DEVICE __device__ __forceinline__
#define RK_ENTRY extern "C" __global__ __launch_bounds__(RK_MAX_BLOCK)
#define RK_BLOCK_ID() ((rk_i64)blockIdx.x)
#define RK_THREAD_ID() ((rk_i64)threadIdx.x)
#define RK_BLOCK_DIM() ((int)blockDim.x)
#else
#define RK_DEVICE __attribute__((device)) inline __attribute__((always_inline))
#define RK_ENTRY extern "C" __attribute__((global)) __attribute__((amdgpu_flat_work_group_size(1, RK_MAX_BLOCK)))
#define RK_BLOCK_ID() ((rk_i64)__builtin_amdgcn_workgroup_id_x())
#define RK_THREAD_ID() ((rk_i64)__builtin_amdgcn_workitem_id_x())
#define RK_BLOCK_DIM() ((int)__builtin_amdgcn_workgroup_size_x())
#endif
#define rk_fma(a, b, c) __builtin_fmaf(a, b, c)
#elif defined(RK_NV)
#define RK_DEVICE __device__ __forceinline__
#define RK_ENTRY extern "C" __global__ __launch_bounds__(RK_MAX_BLOCK)
#define RK_BLOCK_ID() ((rk_i64)blockIdx.x)
#define RK_THREAD_ID() ((rk_i64)threadIdx.x)
#define RK_BLOCK_DIM() ((int)blockDim.x)
#define rk_fma(a, b, c) __fmaf_rn(a, b, c)
#else
#define RK_DEVICE static inline
#define RK_ENTRY extern "C" __attribute__((visibility("default")))
#define RK_FOR_EACH(g, n, cpt, blk) for (rk_i64 g = 0; g < (n); ++g)
#define RK_BLOCK_DIM() RK_BLOCK
#define rk_fma(a, b, c) __builtin_fmaf(a, b, c)
#endif

#define RK_RESTRICT __restrict__

#if !defined(RK_HOST)
// The launcher gives each thread of a block of blk threads (a compile-time constant: a block size taken from
// memory put the first index math of a lane ~0.05 us behind on an H200) cpt <= RK_CHUNKS chunks, blk apart
// (every step of the loop stays coalesced): one for small launches, where latency counts, more for large ones.
#define RK_FOR_EACH(g, n, cpt, blk)                                                             \
    _Pragma("unroll") for (int g##_e = 0; g##_e < RK_CHUNKS; ++g##_e)                           \
        for (rk_i64 g = RK_BLOCK_ID() * ((blk) * (cpt)) + RK_THREAD_ID() + (rk_i64)g##_e * (blk); \
             g##_e < (cpt) && g < (n); g = (n))
// One chunk per thread: the short path small launches take (nothing but the chunk on the way).
#define RK_FOR_ONE(g, n, blk) for (rk_i64 g = RK_BLOCK_ID() * (blk) + RK_THREAD_ID(); g < (n); g = (n))
#else
#define RK_FOR_ONE(g, n, blk) for (rk_i64 g = 0; g < (n); ++g)
#endif

// Programmatic dependent launch (RK_PDL, NVIDIA sm_90+). A kernel launched with the runtime's
// programmatic-serialization attribute may start while the grid before it in the stream still runs:
// rk_grid_wait() blocks until that grid has finished and its writes are visible, so it comes before
// the kernel's first memory access; rk_grid_release() then lets the next grid start launching.
// Launched without the attribute, both are no-ops.
RK_DEVICE void rk_grid_wait(void) {
#if RK_PDL && defined(RK_NV)
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
RK_DEVICE void rk_grid_release(void) {
#if RK_PDL && defined(RK_NV)
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Whether `on` holds and byte i of p is 0 (p is read only where `on` holds). NVIDIA predicates the load. On AMD a
// load behind a branch is waited for where the paths join, right after it, so the load always runs: from `any` (a
// byte the lane may read, e.g. one its other loads bring) where `on` does not hold.
RK_DEVICE bool rk_zero_byte_if(bool on, const void *p, rk_i64 i, const void *any) {
#if defined(RK_AMD)
    const rk_u32 b = *(on ? (const rk_u8 *)p + i : (const rk_u8 *)any);
    return on & (b == 0u);
#else
    (void)any;
    return on && ((const rk_u8 *)p)[i] == 0;
#endif
}

// A point the instruction scheduler does not move code across (AMD: sched_barrier; elsewhere nothing). Placed after
// a group of independent loads, it keeps the use of an earlier load's data below the later loads' issue, where
// the scheduler would otherwise pull it up and wait for that load before issuing them.
RK_DEVICE void rk_issue_point(void) {
#if defined(RK_AMD)
    __builtin_amdgcn_sched_barrier(0);
#endif
}

RK_DEVICE rk_u32 rk_f32_bits(float f) { return __builtin_bit_cast(rk_u32, f); }
RK_DEVICE float rk_bits_f32(rk_u32 u) { return __builtin_bit_cast(float, u); }
RK_DEVICE bool rk_isnan(float f) { return (rk_f32_bits(f) & 0x7fffffffu) > 0x7f800000u; }
RK_DEVICE bool rk_isinf(float f) { return (rk_f32_bits(f) & 0x7fffffffu) == 0x7f800000u; }

// bf16 -> f32 is exact: the bf16 bits are the high half of the f32.
RK_DEVICE float rk_bf16_lo(rk_u32 pair) { return rk_bits_f32(pair << 16); }
RK_DEVICE float rk_bf16_hi(rk_u32 pair) { return rk_bits_f32(pair & 0xffff0000u); }

// f32 -> bf16, round to nearest even, NaN -> 0x7fff. Software form (exact on every compiler).
RK_DEVICE rk_u32 rk_bf16_sw(float f) {
    rk_u32 u = rk_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

// Two floats -> two bf16 packed (lo in bits 0..15).
RK_DEVICE rk_u32 rk_pack_bf16(float lo, float hi) {
#if defined(RK_NV) && RK_HW_BF16
    rk_u32 r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
#elif defined(RK_AMD) && RK_HW_BF16
    typedef float rk_f2 __attribute__((ext_vector_type(2)));
    typedef __bf16 rk_b2 __attribute__((ext_vector_type(2)));
    // The hardware keeps NaN payloads; pin NaN to 0x7fff like the software path.
    rk_u32 r = __builtin_bit_cast(rk_u32, __builtin_convertvector((rk_f2){lo, hi}, rk_b2));
    if (rk_isnan(lo)) r = (r & 0xffff0000u) | 0x7fffu;
    if (rk_isnan(hi)) r = (r & 0x0000ffffu) | 0x7fff0000u;
    return r;
#else
    return rk_bf16_sw(lo) | (rk_bf16_sw(hi) << 16);
#endif
}

// f32 -> fp8 e4m3, round to nearest even, saturating to the format's max finite (OCP 448 = 0x7e,
// FNUZ 240 = 0x7f). NaN -> 0x7f (OCP) or 0x80 (FNUZ). FNUZ has no -0: a negative value that rounds
// to zero gives 0x00. Inputs reach this already clamped to the spec's bound, so the hardware
// converters (which do not clamp by themselves) and the software form agree.
RK_DEVICE rk_u32 rk_fp8_sw(float f) {
    const rk_u32 bias = RK_FP8_FNUZ ? 8u : 7u;
    const rk_u32 max_code = RK_FP8_FNUZ ? 0x7fu : 0x7eu;
    rk_u32 u = rk_f32_bits(f);
    rk_u32 sign = (u >> 24) & 0x80u;
    rk_u32 a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return RK_FP8_FNUZ ? 0x80u : 0x7fu;
    // Largest finite: 1.111 x 2^(15-bias) for FNUZ, 1.110 x 2^(15-bias) for OCP.
    const rk_u32 max_bits = ((15u - bias + 127u) << 23) | (RK_FP8_FNUZ ? 0x700000u : 0x600000u);
    rk_u32 code;
    if (a >= max_bits) {
        code = max_code;
    } else if (a < ((1u - bias + 127u) << 23)) {
        // Subnormal range of the fp8 format: units of 2^(1-bias-3).
        float q = rk_bits_f32(a) * rk_bits_f32((rk_u32)(bias + 2u + 127u) << 23);
        // q in [0, 8): round to nearest even integer with the 2^23 trick (exact in f32).
        float r = (q + 8388608.0f) - 8388608.0f;
        code = (rk_u32)r;  // 8 means the smallest normal: same encoding
    } else {
        rk_u32 e = (a >> 23) - 127u + bias;
        rk_u32 m = a & 0x7fffffu;
        rk_u32 keep = m >> 20, rest = m & 0xfffffu;
        code = (e << 3) | keep;
        if (rest > 0x80000u || (rest == 0x80000u && (keep & 1u))) code += 1u;
        if (code > max_code) code = max_code;
    }
    if (code == 0u) return RK_FP8_FNUZ ? 0u : sign;
    return code | sign;
}

// Two floats -> two fp8 bytes (lo in bits 0..7, hi in bits 8..15).
RK_DEVICE rk_u32 rk_pack_fp8(float lo, float hi) {
#if defined(RK_NV) && RK_HW_FP8
    unsigned short r;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
    return r;
#elif defined(RK_AMD) && RK_HW_FP8
    return (rk_u32)__builtin_amdgcn_cvt_pk_fp8_f32(lo, hi, 0, false) & 0xffffu;
#else
    return rk_fp8_sw(lo) | (rk_fp8_sw(hi) << 8);
#endif
}

// The larger of m and x where x may be a NaN (ignored) and m is not: max.f32 on NVIDIA, which returns the operand
// that is not a NaN (one instruction for a compare and a select); elsewhere the comparison, whose AMD code the ISA
// baseline holds.
RK_DEVICE float rk_max_num(float m, float x) {
#if defined(RK_NV)
    return fmaxf(m, x);
#else
    return x > m ? x : m;
#endif
}

// The smaller of x and c where x may be a NaN (c is not, and is returned for one): min.f32 on NVIDIA, which returns
// the operand that is not a NaN; elsewhere the comparison.
RK_DEVICE float rk_min_num(float x, float c) {
#if defined(RK_NV)
    return fminf(x, c);
#else
    return x < c ? x : c;
#endif
}

// f32 -> e2m1 (a nibble: sign, 2 exponent bits, 1 mantissa bit): the nearest of {0, 0.5, 1, 1.5, 2, 3, 4, 6}, a tie
// going to the even code, saturating at 6 (inf included); e2m1 has no NaN: a NaN gives 0x7 (+6). -0 and negative
// values that round to zero keep the sign (0x8). As the smallest of three roundings: with a = min(|f|, 6) (a NaN
// gives 6), the code's magnitude is rint(2a) below 2, rint(a) + 2 in [2, 4) and rint(a / 2) + 4 from 4, and each of
// the three is the smallest of them in its own range (rint is monotonic), so it is the minimum of all three. Each is
// one fma or add onto 2^23 (+ 2 or + 4), which rounds to an integer once, a tie to even (the offsets keep the parity),
// and leaves it in the low bits; the sign is f's, kept by a min with FLT_MAX that takes a NaN to +FLT_MAX. On NVIDIA
// four min.f32 and three fma / add a value (the fma / add at twice the integer rate), fewer and cheaper than the
// integer steps it replaced (12-14% off the e2m1 writers on an H100: docs/results.md). Equal to the comparison with
// each midpoint on all 2^32 inputs (test_ref test_e2m1_min_form checks 134 million). The AMD targets keep that
// comparison (each comparison with a midpoint is > or >= by the parity of the code below it): this form, and the
// integer one before it, raised the VGPRs of gfx942 kernels of the ISA baseline and added a wait to a gfx1100 one.
RK_DEVICE rk_u32 rk_e2m1_sw(float f) {
#if defined(RK_AMD)
    const rk_u32 u = rk_f32_bits(f), a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return 0x7u;
    const float x = rk_bits_f32(a);
    const rk_u32 code = (rk_u32)(x > 0.25f) + (rk_u32)(x >= 0.75f) + (rk_u32)(x > 1.25f) + (rk_u32)(x >= 1.75f) +
                        (rk_u32)(x > 2.5f) + (rk_u32)(x >= 3.5f) + (rk_u32)(x > 5.0f);
    return code | ((u >> 28) & 0x8u);
#else
#if defined(RK_NV)
    const float a = rk_min_num(fabsf(f), 6.0f);  // |f|: an operand modifier
#else
    const float a = rk_min_num(rk_bits_f32(rk_f32_bits(f) & 0x7fffffffu), 6.0f);
#endif
    const float t = rk_min_num(rk_min_num(rk_fma(a, 2.0f, 8388608.0f), a + 8388610.0f), rk_fma(a, 0.5f, 8388612.0f));
    return (rk_f32_bits(t) & 7u) | ((rk_f32_bits(rk_min_num(f, 3.40282347e38f)) >> 28) & 8u);
#endif
}

// Two floats -> one e2m1 byte (lo in bits 0..3, hi in bits 4..7). NVIDIA's family-specific targets from sm_100f (the
// rows with `family`: specs/archs.lua) have the conversion (cvt.rn.satfinite.e2m1x2.f32: nearest even, saturating);
// so has gfx950 (v_cvt_scalef32_pk_fp4_f32 with scale 1.0, the first operand in the low nibble: nearest even,
// saturating at 6, a NaN or inf to the signed 6, the sign of a zero result kept). A NaN is pinned to +6 first, as the
// software form gives it.
RK_DEVICE rk_u32 rk_pack_e2m1(float lo, float hi) {
#if defined(RK_AMD) && RK_HW_E2M1
    lo = rk_isnan(lo) ? 6.0f : lo;
    hi = rk_isnan(hi) ? 6.0f : hi;
    return (rk_u32)__builtin_amdgcn_cvt_scalef32_pk_fp4_f32(0u, lo, hi, 1.0f, 0) & 0xffu;
#elif defined(RK_NV) && RK_HW_E2M1 && defined(__CUDA_ARCH_FAMILY_SPECIFIC__) && __CUDA_ARCH__ >= 1000
    unsigned short r;
    lo = rk_isnan(lo) ? 6.0f : lo;
    hi = rk_isnan(hi) ? 6.0f : hi;
    asm("{\n.reg .b8 t;\ncvt.rn.satfinite.e2m1x2.f32 t, %1, %2;\ncvt.u16.u8 %0, t;\n}" : "=h"(r) : "f"(hi), "f"(lo));
    return r;
#else
    return rk_e2m1_sw(lo) | (rk_e2m1_sw(hi) << 4);
#endif
}

// An e2m1 nibble (the low one of c) -> f32, exact, in integer operations: magnitudes 0 and 0.5 (the subnormal), then
// 1, 1.5, 2, 3, 4, 6, whose f32 bits are (m + 252) << 22 (the exponent and one mantissa bit, in a row); the sign on top.
RK_DEVICE float rk_e2m1_to_f32(rk_u32 c) {
    const rk_u32 m = c & 7u;
    const rk_u32 mag = m >= 2u ? (m + 252u) << 22 : m == 1u ? 0x3f000000u : 0u;
    return rk_bits_f32(mag | (c & 8u) << 28);
}

// A UE8M0 scale byte (2^(b - 127)) of a power of two s >= 2^-126 (or inf): its biased exponent; inf gives 0xff,
// UE8M0's NaN. (The sm_100a conversion, cvt.rp.satfinite.ue8m0x2.f32, saturates inf to 2^127 instead.)
RK_DEVICE rk_u32 rk_ue8m0(float s) { return (rk_f32_bits(s) >> 23) & 0xffu; }
// A UE8M0 byte -> f32: 0xff is NaN, 0 is 2^-127 (a subnormal float).
RK_DEVICE float rk_ue8m0_to_f32(rk_u32 b) {
    return b == 0xffu ? rk_bits_f32(0x7fc00000u) : b == 0u ? rk_bits_f32(0x00400000u) : rk_bits_f32(b << 23);
}

// fp8 e4m3 -> f32, exact, in the target's format (OCP: bias 7, 0x7f/0xff NaN; FNUZ: bias 8, 0x80 NaN).
RK_DEVICE float rk_fp8_to_f32(rk_u32 b) {
    const rk_u32 bias = RK_FP8_FNUZ ? 8u : 7u;
    const rk_u32 sign = (b & 0x80u) << 24, e = (b >> 3) & 0xfu, m = b & 7u;
    if (RK_FP8_FNUZ ? b == 0x80u : (b & 0x7fu) == 0x7fu) return rk_bits_f32(0x7fc00000u);
    if (e == 0u)  // subnormal: m units of 2^(1-bias-3), exact in f32
        return rk_bits_f32(sign | rk_f32_bits((float)m * rk_bits_f32((127u + 1u - bias - 3u) << 23)));
    return rk_bits_f32(sign | ((e - bias + 127u) << 23) | (m << 20));
}

// Two fp8 bytes (lo in bits 0..7, hi in bits 8..15) -> two floats, exact: the hardware conversion where the
// target has one (e4m3 -> f16 is exact, and so is f16 -> f32), else rk_fp8_to_f32. (A NaN's payload may
// differ between the forms; every user rounds it to bf16's one NaN.)
RK_DEVICE void rk_unpack_fp8(rk_u32 pair, float *lo, float *hi) {
#if defined(RK_NV) && RK_HW_FP8
    rk_u32 h;
    unsigned short a, b;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h) : "h"((unsigned short)(pair & 0xffffu)));
    a = (unsigned short)(h & 0xffffu);
    b = (unsigned short)(h >> 16);
    asm("cvt.f32.f16 %0, %1;" : "=f"(*lo) : "h"(a));
    asm("cvt.f32.f16 %0, %1;" : "=f"(*hi) : "h"(b));
#elif defined(RK_AMD) && RK_HW_FP8
    typedef float rk_f2 __attribute__((ext_vector_type(2)));
    rk_f2 v = __builtin_amdgcn_cvt_pk_f32_fp8((int)pair, false);
    *lo = v.x;
    *hi = v.y;
#else
    *lo = rk_fp8_to_f32(pair & 0xffu);
    *hi = rk_fp8_to_f32((pair >> 8) & 0xffu);
#endif
}

// A stored fp8 scale byte -> f32, exact: on NVIDIA's fp8 targets the hardware conversion through f16 (two
// instructions; a NaN's payload may differ, as rk_unpack_fp8 says), else rk_fp8_to_f32.
RK_DEVICE float rk_fp8_scale_to_f32(rk_u32 b) {
#if defined(RK_NV) && RK_HW_FP8
    float lo, hi;
    rk_unpack_fp8(b, &lo, &hi);
    return lo;
#else
    return rk_fp8_to_f32(b);
#endif
}

#if !defined(RK_HOST)
// The max (SUM false) or the sum (SUM true) of v over each aligned group of N consecutive lanes of a wave (N a
// power of two, at most the wave), through register shuffles: every lane of a group calls it at the same point.
// The steps run m = N/2, .., 1, each lane combining its value with lane ^ m's: a sum is the pairwise tree
// gen/ref.c defines for the RMSNorm, the same in every lane (f32 addition is commutative). (The host runs lanes
// one after another and has no such exchange: its kernels read what they need themselves.)
#if defined(RK_NV)
// The lanes of this lane's aligned group of N in its warp, as a __shfl_sync / __syncwarp mask.
template <int N>
RK_DEVICE rk_u32 rk_group_mask(void) {
    const rk_u32 lane = threadIdx.x & 31u;
    return N == 32 ? 0xffffffffu : ((1u << (N % 32)) - 1u) << (lane & ~(rk_u32)(N - 1));
}
#endif
template <int N, bool SUM>
RK_DEVICE float rk_group_reduce(float v) {
#if defined(RK_NV)
    const rk_u32 mask = rk_group_mask<N>();
#pragma unroll
    for (int m = N / 2; m > 0; m /= 2) {
        float o = __shfl_xor_sync(mask, v, m, N);
        v = SUM ? v + o : rk_max_num(v, o);
    }
#else
    const int lane = (int)__builtin_amdgcn_mbcnt_hi(~0u, __builtin_amdgcn_mbcnt_lo(~0u, 0u));
#pragma unroll
    for (int m = N / 2; m > 0; m /= 2) {  // ds_bpermute: a cross-lane read, no LDS storage
        float o = rk_bits_f32((rk_u32)__builtin_amdgcn_ds_bpermute((lane ^ m) << 2, (int)rk_f32_bits(v)));
        v = SUM ? v + o : rk_max_num(v, o);
    }
#endif
    return v;
}
// Every lane of each aligned group of N consecutive lanes of a wave has done its memory accesses before the call
// when any of them goes on past it (every lane of a group calls it at the same point). NVIDIA's warps may run their
// lanes apart: __syncwarp orders the group's accesses. An AMD wave runs its lanes together, one instruction for all:
// the barrier only keeps the compiler from moving code across the point.
template <int N>
RK_DEVICE void rk_group_sync(void) {
#if defined(RK_NV)
    __syncwarp(rk_group_mask<N>());
#else
    __builtin_amdgcn_wave_barrier();
#endif
}
template <int N>
RK_DEVICE float rk_group_max(float v) { return rk_group_reduce<N, false>(v); }
template <int N>
RK_DEVICE float rk_group_sum(float v) { return rk_group_reduce<N, true>(v); }
#endif

// sqrt(x), correctly rounded (IEEE), as the reference's sqrtf: __fsqrt_rn on NVIDIA, the host's sqrtf. On AMD the
// f32 square root is not correctly rounded under every compiler this project builds with (v_sqrt_f32 alone is
// 1 ulp), so the result moves to the float whose rounding interval holds sqrt(x): the interval's ends, midpoints
// of neighbouring floats, have 25 significant bits and square exactly in double. (0, negative, NaN and inf
// inputs keep the compiler's result.)
RK_DEVICE float rk_sqrt_rn(float x) {
#if defined(RK_NV)
    return __fsqrt_rn(x);
#elif defined(RK_HOST)
    return __builtin_sqrtf(x);
#else
    float y = __builtin_sqrtf(x);
    if (!(x > 0.0f) || !(y < 3.0e38f)) return y;
    const double xd = (double)x;
#pragma unroll
    for (int k = 0; k < 2; k++) {  // the approximation is within 2 ulp
        const float down = rk_bits_f32(rk_f32_bits(y) - 1u), up = rk_bits_f32(rk_f32_bits(y) + 1u);
        const double lo = ((double)y + (double)down) * 0.5, hi = ((double)y + (double)up) * 0.5;
        if (lo * lo > xd) y = down;
        else if (hi * hi < xd) y = up;
    }
    return y;
#endif
}

#if defined(RK_AMD)
// On AMD a chunk moves as one vector value: an rk_v16 accessed as a struct is four 32-bit accesses to the
// optimizer, which may sink the ones two paths share into their join and leave a split access (a 4-byte store in
// each branch, a 12-byte one after them) where one 16-byte instruction belongs.
typedef rk_u32 rk_u32x4 __attribute__((ext_vector_type(4)));
typedef rk_u32 rk_u32x2 __attribute__((ext_vector_type(2)));
RK_DEVICE rk_v16 rk_load16(const void *p) {
    const rk_u32x4 v = *(const rk_u32x4 *)p;
    return rk_v16{v.x, v.y, v.z, v.w};
}
RK_DEVICE rk_v8 rk_load8(const void *p) {
    const rk_u32x2 v = *(const rk_u32x2 *)p;
    return rk_v8{v.x, v.y};
}
RK_DEVICE void rk_store16(void *p, rk_v16 v) { *(rk_u32x4 *)p = (rk_u32x4){v.x, v.y, v.z, v.w}; }
RK_DEVICE void rk_store8(void *p, rk_v8 v) { *(rk_u32x2 *)p = (rk_u32x2){v.x, v.y}; }
#else
RK_DEVICE rk_v16 rk_load16(const void *p) { return *(const rk_v16 *)p; }
RK_DEVICE rk_v8 rk_load8(const void *p) { return *(const rk_v8 *)p; }
RK_DEVICE void rk_store16(void *p, rk_v16 v) { *(rk_v16 *)p = v; }
RK_DEVICE void rk_store8(void *p, rk_v8 v) { *(rk_v8 *)p = v; }
#endif

// Inputs the kernel never writes (q_nope, k_nope, k_pe, the tables). Through the read-only path only
// without RK_PDL: ld.global.nc promises the data does not change while the kernel runs, and ptxas
// may move such loads above griddepcontrol.wait (test_matrix rejects ld.global.nc in PDL kernels),
// which would read inputs the grid before is still writing.
RK_DEVICE rk_v16 rk_load16_ro(const void *p) {
#if defined(RK_NV) && !RK_PDL
    uint4 v = __ldg((const uint4 *)p);  // read-only path: inputs are never written by the kernel
    return rk_v16{v.x, v.y, v.z, v.w};
#else
    return rk_load16(p);
#endif
}

// Output rows (q_out, cache rows): streamed past the caches when the target row asks for it.
RK_DEVICE void rk_store16_out(void *p, rk_v16 v) {
#if RK_NT_STORES && defined(RK_NV)
    asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
#elif RK_NT_STORES && defined(RK_AMD)
    __builtin_nontemporal_store((rk_u32x4){v.x, v.y, v.z, v.w}, (rk_u32x4 *)p);
#else
    rk_store16(p, v);
#endif
}
RK_DEVICE void rk_store4_out(void *p, rk_u32 v) { *(rk_u32 *)p = v; }
RK_DEVICE void rk_store8_out(void *p, rk_v8 v) {
#if RK_NT_STORES && defined(RK_NV)
    asm volatile("st.global.cs.v2.u32 [%0], {%1, %2};" ::"l"(p), "r"(v.x), "r"(v.y) : "memory");
#elif RK_NT_STORES && defined(RK_AMD)
    __builtin_nontemporal_store((rk_u32x2){v.x, v.y}, (rk_u32x2 *)p);
#else
    rk_store8(p, v);
#endif
}
