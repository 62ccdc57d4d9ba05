/* CPU reference for the fused MLA RoPE + KV-cache write: the oracle that generated kernels are
 * compared against bit for bit. Plain C11; built with -ffp-contract=off so every a*b+c below is two
 * roundings unless it is written as fmaf.
 *
 * This comment block is the project's definition of the op.
 *
 * Conversions
 *   bf16 -> f32   exact: the bf16 bits are the high half of the f32.
 *   f32 -> bf16   round to nearest even on the bit pattern. Overflow rounds to +-inf by itself,
 *                 f32 subnormals are kept (no flush), any NaN -> 0x7fff (the canonical NaN that
 *                 NVIDIA's cvt.rn.bf16 produces; sign and payload are dropped).
 *   f32 -> fp8 e4m3, OCP e4m3fn (bias 7, max 448 = 0x7e, NaN 0x7f/0xff, no inf, -0 = 0x80,
 *                 smallest subnormal 2^-9):
 *                 any NaN -> 0x7f; |x| > 448 (inf included) -> +-448 (satfinite); otherwise round
 *                 to nearest even, subnormals included; a negative value (or -0) that rounds to
 *                 zero -> 0x80.
 *   f32 -> fp8 e4m3, FNUZ e4m3fnuz (bias 8, max 240 = 0x7f, 0x80 the only NaN, no -0, no inf,
 *                 smallest subnormal 2^-10):
 *                 any NaN -> 0x80; |x| > 240 (inf included) -> +-240; round to nearest even;
 *                 anything that rounds to zero -> 0x00 (never 0x80, which would be NaN).
 *   fp8 -> f32    exact decode; OCP 0x7f/0xff and FNUZ 0x80 decode to NaN.
 *
 * The op, for every token t in [0, tokens) and head h in [0, heads)
 *   Pointers: element (t, h) of q_nope is q_nope + t*q_nope_st + h*q_nope_sh, likewise q_pe, q_out;
 *   k_nope + t*k_nope_st, k_pe + t*k_pe_st; strides count elements of the tensor's dtype (bytes for
 *   an fp8 cache). L = kv_lora_rank, R = rope_dim, W = L + R.
 *   pos  = positions[t] (int32 or int64 per variant), clamped to [0, max_pos - 1].
 *   slot = slots[t] (int32 or int64 per variant).
 *   cos/sin of pair i in [0, R/2) at pos:
 *     f32_cat     c = cos[pos*R + i],      s = cos[pos*R + R/2 + i]     (one f32 table)
 *     f32_split   c = cos[pos*(R/2) + i],  s = sin[pos*(R/2) + i]       (two f32 tables)
 *     bf16_split  as f32_split on bf16 tables, converted exactly to f32.
 *   rope of a bf16 row x[0, R) into floats y[0, R), for each pair i:
 *     gptj  (x0, x1) = (x[2i], x[2i+1]);   y[2i] = fmaf(x0, c, -(x1*s)); y[2i+1] = fmaf(x1, c, x0*s)
 *     neox  (x0, x1) = (x[i], x[i+R/2]);   y[i]  = fmaf(x0, c, -(x1*s)); y[i+R/2] = fmaf(x1, c, x0*s)
 *     none  y = x (neither the positions nor the cos/sin tables are read; the values are copied: below)
 *     where x1*s and x0*s are single f32 products, rounded before the fused multiply-add.
 *   Geometry: R = 0 (no rope part) has rope none and no k_pe, q_pe or rope part of a row: the row is the latent
 *   (W = L), an absorbed q_out row is q_nope's; q forms zero_copy and inplace and the split layout are refused
 *   (rk_geometry_refuses). Rope none with R > 0 copies the rope part as the latent is copied: bf16 outputs take
 *   its bits (a NaN's payload kept; a sanitized KV row replaces NaN and inf as below), fp8 outputs quantize the
 *   unrotated values.
 *   Q rows (skipped for a token with slot < 0 when negative_slot = skip_all), bf16 query:
 *     absorbed   q_out[t,h,0:L] = q_nope[t,h,:] (bits copied);  q_out[t,h,L:W] = bf16(rope(q_pe[t,h,:]))
 *     zero_copy  only q_out[t,h,L:W] = bf16(rope(q_pe[t,h,:])); q_out[t,h,0:L] is left alone
 *     inplace    q_pe[t,h,:] = bf16(rope(q_pe[t,h,:]))
 *     none       no q writes
 *     where bf16(rope(q_pe)) is, with rope none, q_pe's bits (a NaN keeps its payload).
 *   fp8 query (q_dtype fp8_e4m3, the spec's q_fp8 policy: scale convention, bound sat, rope_bf16):
 *   q_out strides count bytes; each element x as f32 (q_nope from bf16; the rope float, first rounded
 *   to bf16 and back when rope_bf16) goes through the scale (k = *q_scale) and the clamp as a KV element
 *   does below (no sanitize: a NaN stays NaN) and is stored as rk_f32_to_fp8(x, fp8):
 *     absorbed   q_out[t,h,0:L] = fp8(q_nope[t,h,:]);  q_out[t,h,L:W] = fp8(rope(q_pe[t,h,:]))
 *     zero_copy  only q_out[t,h,L:W] = fp8(rope(q_pe[t,h,:]))
 *     inplace    bytes [0, R) of the q_pe row (at byte 2*(t*q_pe_st + h*q_pe_sh)) = fp8(rope(q_pe[t,h,:]));
 *                the row's other bytes are left as they are
 *   KV row, written only when 0 <= slot < kv_rows, W elements: flat at kv_cache + slot*kv_st; paged at
 *   kv_cache + (slot / B)*kv_block_st + (slot % B)*kv_st (B = kv_block_size); split: row[0:L] there and
 *   row[L:W] at kv_rope_cache + (slot / B)*kv_rope_block_st + (slot % B)*kv_rope_st:
 *     bf16 cache, no sanitize: row[0:L] = k_nope bits copied; row[L:W] = bf16(rope(k_pe)) (rope none: bits copied).
 *     bf16 cache, sanitize:    each element x (k_nope converted to f32, or the rope float) becomes
 *                              bf16(sanitize(x)), sanitize(x) = 0 for NaN, x clamped to
 *                              [-3.38953139e38f, 3.38953139e38f] (the bf16 max finite, 0x7f7f) otherwise:
 *                              +-inf and a finite rope float that would round to +-inf (|x| >= 0x7f7f8000,
 *                              3.3961e38) store +-0x7f7f; every other value rounds as it would unclamped.
 *     fp8 cache (format fp8, bound sat): each element x as f32 (k_nope from bf16; the rope float,
 *                              first rounded to bf16 and back when fp8_rope_bf16) goes through
 *                                scale   mul_recip: x * (1.0f / k) (the reciprocal is an f32 first)
 *                                        div: x / k   mul: x * k   none: x        (k = *k_scale)
 *                                sanitize (if set): NaN -> 0, +-inf -> +-sat
 *                                clamp   x > sat -> sat, x < -sat -> -sat (a NaN passes unchanged)
 *                              and is stored as rk_f32_to_fp8(x, fp8).
 *     fp8_tile row (the spec's fp8_tile table: tile n, bound sat, scales_at, rope_at; one row, flat or paged,
 *                              offsets and strides in bytes):
 *                              the latent in tiles of n values; each value x (k_nope as f32; with sanitize
 *                              NaN -> 0, +-inf -> +-3.38953139e38f first, the clamp above) of tile k:
 *                                amax_k  = the largest |x| of the tile, NaN ignored (0 for an all-NaN tile)
 *                                scale_k = amax_k / sat (f32 division), at least FLT_MIN (2^-126); with scale
 *                                          pow2 rounded up to a power of two (2^ceil(log2)); an inf amax
 *                                          gives an inf scale
 *                                byte j  = rk_f32_to_fp8(clamp(x / scale_k, -sat, sat), fp8) (f32 division;
 *                                          NaN passes the clamp: a NaN value, or inf / inf, gives fp8 NaN)
 *                              float32 scale_k at byte scales_at + 4k; the rope part as the bf16 cache's
 *                              (bf16(rope(k_pe)), sanitized when set) at byte rope_at.
 *   A slot >= kv_rows is treated like a negative slot for the KV row only: the q rows are still
 *   written whatever negative_slot says. With a write mask (write_mask != NULL) the KV row of token t is written only
 *   where write_mask[t] != 0 (a byte); the q rows and norm_out do not look at it.
 *   The fused kv_a RMSNorm (norm rms, rms_out; the spec's kv_norm: weight dtype, eps, rounding): before the KV
 *   row is written, every KV token's k_nope row x[0, L) is replaced by its normalized bf16 row n[0, L):
 *     p[c]  = the sum of squares of chunk c (x[8c .. 8c+8)), c in [0, L/8): p = 0; p = fmaf(x_i, x_i, p)
 *             for i = 8c, .., 8c+7 in order
 *     sum   = a pairwise tree over the chunks (L/8 a power of two): for d = L/16, L/32, .., 1:
 *             p[c] = p[c] + p[c + d] for c in [0, d); sum = p[0] (the GPUs' butterfly over lanes gives the
 *             same sums: f32 addition is commutative)
 *     r     = 1.0f / sqrtf(sum / L + eps)             (IEEE division and square root, correctly rounded)
 *     n[j]  = bf16(f32(bf16(x[j] * r)) * w[j])  rounding twice (HF transformers' and vLLM's RMSNorm)
 *             bf16((x[j] * r) * w[j])           rounding once (FlashInfer's)
 *             w[j] the weight (bf16 -> f32 exactly, or f32)
 *   The row is then written from n as from a k_nope of n (its bits copied into a bf16 cache, its fp8 values
 *   and tile scales computed from n). With kv_norm.over = head (DeepSeek-V4) the norm covers the whole head: x is
 *   k_nope[0, L) | k_pe[0, R) (W values, the weight has W, the tree runs over W/8 chunks, r divides by W), and the
 *   row is written from n[0, L) as the latent and rope(n[L, W)) as the rope part (the rotation of normalized
 *   values). rms_out is not built with it.
 *   The query norm (the spec's q_norm, DeepSeek-V4; q form absorbed): each head's x = q_nope | q_pe (W values)
 *   becomes n[j] = bf16(x[j] * r), r = 1.0f / sqrtf(sum / W + eps) with the tree above over W/8 chunks, no weight;
 *   q_out is then written from n as from q_nope = n[0, L) and q_pe = n[L, W).
 *   Padded query heads (q_heads > heads, absorbed): q_out[t, h, 0:W] = 0 (bf16 zeros or fp8 0x00 bytes) for h in
 *   [heads, q_heads), under the same rule as the token's other query rows (skip_all skips them too). With norm rms_out, n is also stored at norm_out + t*norm_out_st for every
 *   t in [0, kv_tokens), whatever its slot, except a negative slot under negative_slot = skip_all.
 *
 * The read-back op (op read), for every t in [0, tokens): slot = slots[t]; when min_slot <= slot < kv_rows,
 *   the slot's row (at the layout's offsets above) becomes bf16 values, the latent in out[t, 0:L] and the rope
 *   part in out[t, L:W] (or out_rope[t, 0:R] when out_rope is set); strides count bf16 elements:
 *     bf16       bits copied
 *     fp8_e4m3   bf16(v * k) for scale mul_recip and div, bf16(v / k) for mul, bf16(v) for none, v the
 *                exact value of the byte (NaN codes: NaN, so 0x7fff), k = *k_scale
 *     fp8_tile   latent: bf16(v * scale_k) with the row's float32 scale of the value's tile; rope: bits copied
 *   Otherwise the output row is zeros (read.negative_slot zero) or left as it is (skip). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rk.h"

/* ---- scalar conversions ------------------------------------------------------------------------ */

uint32_t rk_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

float rk_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float rk_bf16_to_f32(uint16_t b) { return rk_bits_f32((uint32_t)b << 16); }

uint16_t rk_f32_to_bf16(float f) {
    uint32_t u = rk_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;
    /* Adding 0x7fff plus the lowest kept bit rounds to nearest, ties to even; a carry out of the
     * mantissa bumps the exponent, and out of the largest finite exponent gives inf. */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* The two e4m3 formats differ in bias, largest finite code and NaN/zero rules. */
typedef struct fp8_fmt_info {
    int bias;
    uint8_t max_code; /* largest finite magnitude code */
    uint8_t nan;      /* code produced for NaN */
} fp8_fmt_info;

static fp8_fmt_info fp8_info(rk_fp8_fmt fmt) {
    fp8_fmt_info i;
    if (fmt == RK_FP8_FNUZ) {
        i.bias = 8;
        i.max_code = 0x7f; /* 1.875 * 2^7 = 240 */
        i.nan = 0x80;
    } else {
        i.bias = 7;
        i.max_code = 0x7e; /* 1.75 * 2^8 = 448 */
        i.nan = 0x7f;
    }
    return i;
}

/* Magnitude of code c (sign bit clear, not a NaN code): 3 mantissa bits, exponent field 0 is
 * subnormal with the exponent of field 1. */
static float fp8_magnitude(uint8_t c, int bias) {
    int e = (c >> 3) & 0xf, m = c & 7;
    if (e == 0) return ldexpf((float)m, 1 - bias - 3);
    return ldexpf((float)(8 + m), e - bias - 3);
}

float rk_fp8_to_f32(uint8_t b, rk_fp8_fmt fmt) {
    fp8_fmt_info fi = fp8_info(fmt);
    if (fmt == RK_FP8_FNUZ ? b == 0x80 : (b & 0x7f) == 0x7f) return NAN;
    float m = fp8_magnitude((uint8_t)(b & 0x7f), fi.bias);
    return (b & 0x80) ? -m : m;
}

/* Round a positive finite magnitude (f32 bit pattern a, at most the format's max) to an fp8
 * magnitude code, nearest even. The quantum (value of one mantissa step) is 2^(E-3) for an exponent
 * E >= emin = 1 - bias, and 2^(emin-3) below it (subnormals). With q the magnitude in quanta,
 * the code is ((max(E, emin) - emin) << 3) + q: for subnormals q is the mantissa, for normals q
 * carries the implicit 8, and a q that rounds up to the next power of two lands on the next
 * exponent's code. */
static uint8_t fp8_round_magnitude(uint32_t a, int bias) {
    int ef = (int)(a >> 23);
    if (ef == 0) return 0; /* f32 subnormals are far below half the smallest fp8 subnormal */
    const int emin = 1 - bias;
    int e = ef - 127;
    if (e < emin) e = emin;
    uint32_t sig = (a & 0x7fffffu) | 0x800000u; /* value = sig * 2^(ef - 150) */
    int shift = (e - 3) - (ef - 150);           /* >= 20 */
    if (shift > 25) return 0;                   /* below a quarter quantum */
    uint32_t q = sig >> shift;
    uint32_t rest = sig & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rest > half || (rest == half && (q & 1u))) q++;
    return (uint8_t)(((uint32_t)(e - emin) << 3) + q);
}

uint8_t rk_f32_to_fp8(float f, rk_fp8_fmt fmt) {
    fp8_fmt_info fi = fp8_info(fmt);
    uint32_t u = rk_f32_bits(f);
    uint32_t a = u & 0x7fffffffu;
    uint8_t sign = (u >> 31) ? 0x80 : 0x00;
    if (a > 0x7f800000u) return fi.nan;
    uint8_t code;
    if (rk_bits_f32(a) > fp8_magnitude(fi.max_code, fi.bias)) code = fi.max_code; /* satfinite, inf included */
    else code = fp8_round_magnitude(a, fi.bias);
    if (code == 0 && fmt == RK_FP8_FNUZ) return 0x00;
    return (uint8_t)(code | sign);
}

/* ---- the op ------------------------------------------------------------------------------------ */

static int64_t load_idx(const void *p, int64_t t, ropekv_index type) {
    if (type == ROPEKV_INDEX_INT64) return ((const int64_t *)p)[t];
    return (int64_t)((const int32_t *)p)[t];
}

static int64_t position_of(const rk_desc *v, const rk_args *a, int64_t t) {
    int64_t pos = load_idx(a->positions, t, v->pos);
    if (pos >= a->max_pos) pos = a->max_pos - 1;
    if (pos < 0) pos = 0;
    return pos;
}

static void cos_sin_at(const rk_desc *v, const rk_args *a, int64_t pos, int i, float *c, float *s) {
    const int64_t R = v->R, half = R / 2;
    switch (v->cos_sin) {
    case RK_CS_F32_CAT:
        *c = ((const float *)a->cos_sin)[pos * R + i];
        *s = ((const float *)a->cos_sin)[pos * R + half + i];
        break;
    case RK_CS_F32_SPLIT:
        *c = ((const float *)a->cos_sin)[pos * half + i];
        *s = ((const float *)a->sin)[pos * half + i];
        break;
    case RK_CS_BF16_SPLIT:
        *c = rk_bf16_to_f32(((const uint16_t *)a->cos_sin)[pos * half + i]);
        *s = rk_bf16_to_f32(((const uint16_t *)a->sin)[pos * half + i]);
        break;
    }
}

/* Where pair i of a row of R elements lives. */
static void pair_index(rk_rope rope, int R, int i, int *j0, int *j1) {
    if (rope == RK_ROPE_GPTJ) {
        *j0 = 2 * i;
        *j1 = 2 * i + 1;
    } else { /* neox; none uses the same pairing, it does not matter which */
        *j0 = i;
        *j1 = i + R / 2;
    }
}

/* Pair i of rope(x): y0 at j0, y1 at j1. Reads x before anything is written, so a caller may store
 * the pair back into x (in-place rope); pairs never share elements. */
static void rope_pair(const rk_desc *v, const rk_args *a, int64_t pos, const uint16_t *x, int i, int *j0, int *j1,
                      float *y0, float *y1) {
    pair_index(v->rope, v->R, i, j0, j1);
    float x0 = rk_bf16_to_f32(x[*j0]), x1 = rk_bf16_to_f32(x[*j1]);
    if (v->rope == RK_ROPE_NONE) {
        *y0 = x0;
        *y1 = x1;
        return;
    }
    float c = 0.0f, s = 0.0f; /* set by cos_sin_at for every layout */
    cos_sin_at(v, a, pos, i, &c, &s);
    float p1 = x1 * s, p0 = x0 * s;
    *y0 = fmaf(x0, c, -p1);
    *y1 = fmaf(x1, c, p0);
}

/* dst[0, R) = bf16(rope(x)); dst may equal x. Rope none: x's bits. */
static void rope_row_bf16(const rk_desc *v, const rk_args *a, int64_t pos, const uint16_t *x, uint16_t *dst) {
    if (v->rope == RK_ROPE_NONE) {
        if (v->R > 0) memmove(dst, x, (size_t)v->R * sizeof *dst); /* R = 0: x is NULL */
        return;
    }
    for (int i = 0; i < v->R / 2; i++) {
        int j0, j1;
        float y0, y1;
        rope_pair(v, a, pos, x, i, &j0, &j1, &y0, &y1);
        dst[j0] = rk_f32_to_bf16(y0);
        dst[j1] = rk_f32_to_bf16(y1);
    }
}

/* One fp8 element from the f32 value x under the scale convention `scale` with scale k (read only when there
 * is a convention) and the bound sat: scale, sanitize (when asked), clamp, convert. */
static uint8_t fp8_elem(rk_scale scale, float sat, rk_fp8_fmt fmt, const float *k, int sanitize, float x) {
    switch (scale) {
    case RK_SCALE_MUL_RECIP: {
        float r = 1.0f / *k;
        x = x * r;
        break;
    }
    case RK_SCALE_DIV: x = x / *k; break;
    case RK_SCALE_MUL: x = x * *k; break;
    case RK_SCALE_NONE: break;
    }
    if (sanitize) {
        if (isnan(x)) x = 0.0f;
        else if (isinf(x)) x = x > 0 ? sat : -sat;
    }
    if (x > sat) x = sat;
    else if (x < -sat) x = -sat;
    return rk_f32_to_fp8(x, fmt);
}

/* A query element of an fp8 query: rope values rounded to bf16 first when the policy says so. */
static uint8_t q_fp8_elem(const rk_desc *v, const rk_args *a, float x, int rope) {
    if (rope && v->q8_rope_bf16) x = rk_bf16_to_f32(rk_f32_to_bf16(x));
    return fp8_elem(v->q8_scale, v->q8_sat, v->fp8, a->q_scale, 0, x);
}

/* dst[0, R) = fp8(rope(x)) (an fp8 query); dst may overlap x: the row is read first. */
static void rope_row_fp8(const rk_desc *v, const rk_args *a, int64_t pos, const uint16_t *x, uint8_t *dst) {
    uint8_t row[1024]; /* R <= 1024 (spec limit) */
    for (int i = 0; i < v->R / 2; i++) {
        int j0, j1;
        float y0, y1;
        rope_pair(v, a, pos, x, i, &j0, &j1, &y0, &y1);
        row[j0] = q_fp8_elem(v, a, y0, 1);
        row[j1] = q_fp8_elem(v, a, y1, 1);
    }
    memcpy(dst, row, (size_t)v->R);
}

static float norm_factor(const uint16_t *x, int n, float eps);

static void write_q_rows(const rk_desc *v, const rk_args *a, int64_t t, int64_t pos) {
    const int L = v->L, W = v->L + v->R, fp8 = v->q_dtype != ROPEKV_Q_BF16;
    if (v->q == ROPEKV_Q_NONE) return;
    const int64_t q_heads = a->q_heads > a->heads ? a->q_heads : a->heads;
    for (int64_t h = a->heads; h < q_heads; h++) /* padded heads (absorbed): zeros, bf16 or fp8 */
        memset((uint8_t *)a->q_out + (t * a->q_out_st + h * a->q_out_sh) * (fp8 ? 1 : 2), 0, (size_t)W * (fp8 ? 1 : 2));
    for (int64_t h = 0; h < a->heads; h++) {
        uint16_t *q_pe = v->R > 0 ? (uint16_t *)a->q_pe + t * a->q_pe_st + h * a->q_pe_sh : NULL; /* R = 0: none */
        uint16_t head[8192 + 1024];
        if (v->q_norm != RK_QN_NONE) { /* absorbed: the head q_nope | q_pe as bf16(x * r), before the rotation */
            const uint16_t *q_nope = (const uint16_t *)a->q_nope + t * a->q_nope_st + h * a->q_nope_sh;
            memcpy(head, q_nope, (size_t)L * 2);
            if (v->R > 0) memcpy(head + L, q_pe, (size_t)v->R * 2);
            const float r = norm_factor(head, W, v->q_norm_eps);
            for (int j = 0; j < W; j++) head[j] = rk_f32_to_bf16(rk_bf16_to_f32(head[j]) * r);
            q_pe = head + L; /* read only: absorbed writes q_out */
        }
        /* q_out's strides count its own elements: bf16, or bytes for an fp8 query; the inplace form has no q_out,
         * and its strides may be any numbers */
        const int has_out = v->q == ROPEKV_Q_ABSORBED || v->q == ROPEKV_Q_ZERO_COPY;
        const int64_t at = has_out ? t * a->q_out_st + h * a->q_out_sh : 0;
        uint16_t *out = has_out ? (uint16_t *)a->q_out + at : NULL;
        uint8_t *out8 = has_out ? (uint8_t *)a->q_out + at : NULL;
        switch (v->q) {
        case ROPEKV_Q_ABSORBED: {
            const uint16_t *q_nope = v->q_norm != RK_QN_NONE
                                         ? head
                                         : (const uint16_t *)a->q_nope + t * a->q_nope_st + h * a->q_nope_sh;
            if (fp8) {
                for (int j = 0; j < L; j++) out8[j] = q_fp8_elem(v, a, rk_bf16_to_f32(q_nope[j]), 0);
                rope_row_fp8(v, a, pos, q_pe, out8 + L);
            } else {
                memcpy(out, q_nope, (size_t)L * sizeof *out);
                rope_row_bf16(v, a, pos, q_pe, out + L);
            }
            break;
        }
        case ROPEKV_Q_ZERO_COPY:
            if (fp8) rope_row_fp8(v, a, pos, q_pe, out8 + L);
            else rope_row_bf16(v, a, pos, q_pe, out + L);
            break;
        case ROPEKV_Q_INPLACE:
            if (fp8) rope_row_fp8(v, a, pos, q_pe, (uint8_t *)q_pe);
            else rope_row_bf16(v, a, pos, q_pe, q_pe);
            break;
        case ROPEKV_Q_NONE: break;
        }
    }
}

/* Where a slot's row lies: the bytes [0, split_at) of the record at *part0 and, in the split layout, the bytes
 * [split_at, row_bytes) at *part1 (else at *part0 + split_at: the row is contiguous); a page-tail record's tail
 * after the block's kv_block_size rows, tail_bytes a token (ropekv_kv_layout). */
static void row_parts(const rk_desc *v, const rk_args *a, int64_t slot, uint8_t **part0, uint8_t **part1,
                      uint8_t **tail) {
    const int64_t elem = rk_desc_kv_elem(v); /* the strides count the cache's elements */
    int64_t at, at_rope, block = 0, entry = 0;
    if (v->layout == ROPEKV_KV_FLAT) {
        at = slot * a->kv_st;
        at_rope = 0;
    } else {
        block = slot / a->kv_block_size;
        entry = slot % a->kv_block_size;
        at = block * a->kv_block_st + entry * a->kv_st;
        /* the rope cache's strides are the caller's only in the split layout (unchecked, maybe huge, elsewhere) */
        at_rope = v->layout == ROPEKV_KV_SPLIT ? block * a->kv_rope_block_st + entry * a->kv_rope_st : 0;
    }
    *part0 = (uint8_t *)a->kv_cache + at * elem;
    *part1 = v->layout == ROPEKV_KV_SPLIT ? (uint8_t *)a->kv_rope_cache + at_rope * elem : *part0 + v->rec.split_at;
    *tail = v->rec.tail_bytes && v->layout == ROPEKV_KV_PAGED
                ? (uint8_t *)a->kv_cache + (block * a->kv_block_st + a->kv_block_size * a->kv_st) * elem +
                      entry * v->rec.tail_bytes
                : NULL;
}

/* Bytes [b, e) of the row to or from the cache (a range never straddles split_at: rk_record_check). */
static void range_copy(const rk_desc *v, uint8_t *part0, uint8_t *part1, uint8_t *row, int b, int e, int to_cache) {
    const int split = v->layout == ROPEKV_KV_SPLIT && b >= v->rec.split_at;
    uint8_t *c = split ? part1 + (b - v->rec.split_at) : part0 + b;
    if (to_cache) memcpy(c, row + b, (size_t)(e - b));
    else memcpy(row + b, c, (size_t)(e - b));
}

/* The row's bytes to or from the cache: the values, inline scales and token scales of its segments, split at
 * split_at in the split layout. The row's padding is not written to the cache (the kernels store no more than
 * the record's values and scales) and reads as zeros. */
static void row_copy(const rk_desc *v, uint8_t *part0, uint8_t *part1, uint8_t *row, int to_cache) {
    if (!to_cache) memset(row, 0, (size_t)v->rec.row_bytes);
    for (int s = 0; s < v->rec.n_seg; s++) {
        const rk_segment *g = &v->rec.seg[s];
        range_copy(v, part0, part1, row, g->at, g->at + rk_seg_bytes(g), to_cache);
        if (g->block && g->scale_at == RK_SA_INLINE)
            range_copy(v, part0, part1, row, g->scales_at, g->scales_at + rk_seg_scale_bytes(g), to_cache);
        if (g->outer == RK_OUT_TOKEN) range_copy(v, part0, part1, row, g->outer_at, g->outer_at + 4, to_cache);
    }
}

/* 1 / sqrt(sum(x^2) / n + eps) of the bf16 values x[0, n): the sum a tree over chunks of 8 (the definition above). */
static float norm_factor(const uint16_t *x, int n, float eps) {
    const int chunks = n / 8;
    float p[1152]; /* n <= 8192 + 1024 (spec limits) */
    for (int c = 0; c < chunks; c++) {
        float s = 0.0f;
        for (int i = 8 * c; i < 8 * c + 8; i++) {
            const float xi = rk_bf16_to_f32(x[i]);
            s = fmaf(xi, xi, s);
        }
        p[c] = s;
    }
    for (int d = chunks / 2; d >= 1; d /= 2)
        for (int c = 0; c < d; c++) p[c] = p[c] + p[c + d];
    return 1.0f / sqrtf(p[0] / (float)n + eps);
}

/* The fused kv_a RMSNorm of the n values x (a k_nope row, or with kv_norm.over head the row k_nope | k_pe) into the
 * bf16 row out (see the definition above); the weight has n values. */
static void norm_row(const rk_desc *v, const rk_args *a, const uint16_t *x, int n, uint16_t *out) {
    const float r = norm_factor(x, n, v->norm_eps);
    for (int j = 0; j < n; j++) {
        const float w = v->norm_weight == RK_NW_BF16 ? rk_bf16_to_f32(((const uint16_t *)a->norm_weight)[j])
                                                     : ((const float *)a->norm_weight)[j];
        float y = rk_bf16_to_f32(x[j]) * r;
        if (v->norm_round == RK_NR_TWICE) y = rk_bf16_to_f32(rk_f32_to_bf16(y));
        out[j] = rk_f32_to_bf16(y * w);
    }
}

/* The launch's tensor scale for the record's outer tensor scale (1 when the convention is none). */
static float kv_scale(const rk_desc *v, const rk_args *a) { return v->kv8_scale == RK_SCALE_NONE ? 1.0f : *a->k_scale; }

enum { ROW_MAX = 20480 }; /* bytes of a row held on the stack; a longer one is allocated */

static void write_kv_row(const rk_desc *v, const rk_args *a, int64_t t, int64_t pos, int64_t slot) {
    const int L = v->L;
    const uint16_t *k_nope = (const uint16_t *)a->k_nope + t * a->k_nope_st;
    const uint16_t *k_pe = v->R > 0 ? (const uint16_t *)a->k_pe + t * a->k_pe_st : NULL; /* R = 0: no k_pe */
    uint16_t normed[8192 + 1024], head[8192 + 1024];
    if (v->norm != ROPEKV_NORM_NONE && v->norm_over == RK_NO_HEAD) { /* the whole head, before the rotation */
        memcpy(head, k_nope, (size_t)L * 2);
        if (v->R > 0) memcpy(head + L, k_pe, (size_t)v->R * 2);
        norm_row(v, a, head, rk_norm_values(v), normed);
        k_nope = normed;
        k_pe = normed + L;
    } else if (v->norm != ROPEKV_NORM_NONE) {
        norm_row(v, a, k_nope, rk_norm_values(v), normed);
        k_nope = normed;
    }
    float x[8192 + 1024]; /* L <= 8192, R <= 1024 (spec limits) */
    for (int j = 0; j < L; j++) x[j] = rk_bf16_to_f32(k_nope[j]);
    for (int i = 0; i < v->R / 2; i++) {
        int j0, j1;
        float y0, y1;
        rope_pair(v, a, pos, k_pe, i, &j0, &j1, &y0, &y1);
        x[L + j0] = y0;
        x[L + j1] = y1;
    }
    uint8_t small[ROW_MAX], *row = v->rec.row_bytes <= ROW_MAX ? small : malloc((size_t)v->rec.row_bytes);
    if (!row) return;
    uint8_t *part0, *part1, *tail;
    row_parts(v, a, slot, &part0, &part1, &tail);
    uint8_t tail_row[256]; /* the token's page tail (tail_bytes <= 255: rk_record_check) */
    /* the values as read: the latent, and the rope part when it is not rotated */
    const int raw = v->rope == RK_ROPE_NONE ? L + v->R : L;
    rk_record_encode(&v->rec, v->fp8, x, raw, kv_scale(v, a), v->kv8_scale, v->sanitize, row, tail ? tail_row : NULL);
    row_copy(v, part0, part1, row, 1);
    for (int s = 0; tail && s < v->rec.n_seg; s++) { /* its scales; its padding is not written, as the row's */
        const rk_segment *g = &v->rec.seg[s];
        if (g->block && g->scale_at == RK_SA_PAGE_TAIL)
            memcpy(tail + g->scales_at, tail_row + g->scales_at, (size_t)rk_seg_scale_bytes(g));
    }
    if (row != small) free(row);
}

/* The read-back op: row t of out (and out_rope) from the row of slots[t]. */
static void read_row(const rk_desc *v, const rk_args *a, int64_t t) {
    const int L = v->L, R = v->R;
    const int64_t slot = load_idx(a->slots, t, v->slot);
    uint16_t *out = (uint16_t *)a->out + t * a->out_st;
    uint16_t *out_rope = a->out_rope ? (uint16_t *)a->out_rope + t * a->out_rope_st : out + L;
    if (slot < a->min_slot || slot >= a->kv_rows) {
        if (v->read_neg == RK_READ_ZERO) {
            memset(out, 0, (size_t)L * 2);
            memset(out_rope, 0, (size_t)R * 2);
        }
        return;
    }
    uint8_t small[ROW_MAX], *row = v->rec.row_bytes <= ROW_MAX ? small : malloc((size_t)v->rec.row_bytes);
    if (!row) return;
    uint8_t *part0, *part1, *tail;
    row_parts(v, a, slot, &part0, &part1, &tail);
    row_copy(v, part0, part1, row, 0);
    float y[8192 + 1024];
    rk_record_decode(&v->rec, v->fp8, row, tail, kv_scale(v, a), v->kv8_scale, NULL, y);
    for (int s = 0; s < v->rec.n_seg; s++) {
        const rk_segment *g = &v->rec.seg[s];
        for (int i = 0; i < g->n; i++) {
            const int j = g->from + i;
            uint16_t b;
            if (g->elem == RK_EL_BF16) memcpy(&b, row + g->at + 2 * i, 2); /* bf16 bits, copied */
            else b = rk_f32_to_bf16(y[j]);
            if (j < L) out[j] = b;
            else out_rope[j - L] = b;
        }
    }
    if (row != small) free(row);
}

/* Query rows for tokens [0, tokens), KV rows for tokens [0, kv_tokens); a slot below min_slot
 * (negative: padding; or a reserved row) or at kv_rows and past is not written. With skip_all a
 * negative slot also skips the token's query rows (a token past kv_tokens has no slot: its rows are
 * written). */
void rk_ref_run(const rk_desc *v, const rk_args *a) {
    if (v->op == ROPEKV_OP_READ) {
        for (int64_t t = 0; t < a->tokens; t++) read_row(v, a, t);
        return;
    }
    const int64_t T = v->q == ROPEKV_Q_NONE ? 0 : a->tokens; /* no query form: KV rows only */
    const int64_t n = T > a->kv_tokens ? T : a->kv_tokens;
    for (int64_t t = 0; t < n; t++) {
        const int has_slot = t < a->kv_tokens;
        const int64_t slot = has_slot ? load_idx(a->slots, t, v->slot) : -1;
        const int64_t pos = v->rope != RK_ROPE_NONE ? position_of(v, a, t) : 0; /* rope none reads no positions */
        const int skip_all = has_slot && slot < 0 && v->neg == RK_NEG_SKIP_ALL;
        if (t < T && !skip_all) write_q_rows(v, a, t, pos);
        const int masked = has_slot && a->write_mask != NULL && ((const uint8_t *)a->write_mask)[t] == 0; /* [Tkv] */
        if (has_slot && slot >= a->min_slot && slot < a->kv_rows && !masked) write_kv_row(v, a, t, pos, slot);
        if (has_slot && !skip_all && v->norm == ROPEKV_NORM_RMS_OUT)
            norm_row(v, a, (const uint16_t *)a->k_nope + t * a->k_nope_st, v->L,
                     (uint16_t *)a->norm_out + t * a->norm_out_st);
    }
}
