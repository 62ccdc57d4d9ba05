/* The reference encoder and decoder of cache records (gen/record.h), and today's three row formats as records.
 * Plain C11, built with -ffp-contract=off like gen/ref.c: every product and quotient below is one IEEE rounding.
 *
 * Encoding one segment (docs/numerics.md, "The record codec"), for its values v = x[from, from + n):
 *   rope rounding   with rope_bf16, a value of the rope part (index >= L) is rounded to bf16 and back first;
 *   tensor scale    outer tensor: v * (1.0f / k) (mul_recip, the reciprocal an f32 first), v / k (div), v * k (mul),
 *                   v (none), k the launch's k_scale;
 *   sanitize        unblocked e4m3: after the scale, NaN -> 0 (+-inf then meets the clamp); blocked segments and bf16:
 *                   NaN -> 0 and x clamped to +-3.38953139e38f (the bf16 max finite) before any amax;
 *   blocks          amax = the largest |v| of the block (NaN ignored: 0 for an all-NaN block; an inf gives inf),
 *                   s = max(amax / sat, floor) (an IEEE division; floor FLT_MIN unless the segment names one),
 *                   rounded up to a power of two by pow2_up;
 *                   the scale stored: f32 as it is; UE8M0 its biased exponent (s is rounded up to a power of two
 *                   whatever the rule: the byte holds nothing else; an inf scale is 0xff, UE8M0's NaN); e4m3 the
 *                   target's fp8 of s (nearest even, saturating), and 0x01 (the smallest subnormal) for an s that
 *                   rounds to zero (rule exact_zero: 0x00), then by rule up the next byte while its value is below s
 *                   (short of the largest finite one). The values are divided by the scale as stored (s', decoded),
 *                   or with block_conv mul_recip multiplied by 1.0f / s'; a zero s' (exact_zero) multiplies them by
 *                   0 (zeros of their signs; a NaN stays NaN). The scale of block b lies at place b, or with
 *                   interleave k at (b % k) * (blocks / k) + b / k;
 *   token scale     outer token: g = max(amax over the segment / (smax * sat), FLT_MIN), smax the scale type's
 *                   largest value (f32: 1, so g = the segment's own scale; UE8M0 2^127; e4m3 the format's max), g
 *                   stored as a float32 at outer_at; each block's s is (amax_b / sat) / g before its rule and
 *                   storage, and the values are divided by s' * g (one f32 product, then the division). Without
 *                   blocks, the values are divided by g itself;
 *   elements        the quotient clamped to +-sat (NaN passes) and stored: e4m3 rk_f32_to_fp8; e2m1 the nearest
 *                   value of {0, 0.5, 1, 1.5, 2, 3, 4, 6}, ties to the even code, saturating at 6, a NaN as 0x7
 *                   (+6: e2m1 has no NaN; the sm_100 conversion is pinned to it), two a byte, the first in the low
 *                   nibble; bf16 for a value as read (x[0, raw): the latent, and the rope part when rope is none;
 *                   a bf16 already) its bits, NaN payloads kept, for a rotated rope value rk_f32_to_bf16 (nearest
 *                   even, NaN -> 0x7fff).
 * Decoding reverses it: v = the element's exact value times the block's scale as the reader takes it (exact, bf16:
 * rounded to bf16, pow2_down: 2^floor(log2 s)), times g for a token scale; a tensor scale is undone by v * k (mul_recip,
 * div) or v / k (mul). */
#include <float.h>
#include <stdio.h>
#include <math.h>
#include <string.h>

#include "rk.h"

#define BF16_MAX 3.38953139e38f

static float sanitize_bf16(float x) {
    if (isnan(x)) return 0.0f;
    return x > BF16_MAX ? BF16_MAX : x < -BF16_MAX ? -BF16_MAX : x;
}

static float clamp_sat(float x, float sat) { return x > sat ? sat : x < -sat ? -sat : x; }

/* ---- element types ------------------------------------------------------------------------------------------- */

uint8_t rk_f32_to_e2m1(float f) {
    /* codes 0..7: 0, 0.5, 1, 1.5, 2, 3, 4, 6; the midpoints between neighbours decide, a tie going to the even
     * code (0.25 -> 0, 0.75 -> 2 (1.0), 1.25 -> 2 (1.0), 1.75 -> 4 (2.0), 2.5 -> 4 (2.0), 3.5 -> 6 (4.0),
     * 5 -> 6 (4.0)) */
    static const float mid[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
    if (isnan(f)) return 0x7;
    const uint8_t sign = signbit(f) ? 0x8 : 0x0;
    const float a = fabsf(f);
    uint8_t code = 0;
    while (code < 7 && (a > mid[code] || (a == mid[code] && (code & 1u)))) code++;
    return (uint8_t)(code | sign);
}

float rk_e2m1_to_f32(uint8_t c) {
    static const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    const float m = mag[c & 7u];
    return (c & 8u) ? -m : m;
}

/* ---- scales -------------------------------------------------------------------------------------------------- */

/* 2^ceil(log2 s) for a positive s (a power of two stays; inf stays inf). */
static float pow2_up(float s) {
    uint32_t u = rk_f32_bits(s);
    if ((u & 0x7fffffu) != 0u && u < 0x7f800000u) u = (u & 0xff800000u) + 0x800000u;
    return rk_bits_f32(u);
}

static float pow2_down(float s) {
    if (!(s > 0.0f) || isinf(s)) return s;
    int e;
    (void)frexpf(s, &e); /* s = m 2^e, m in [0.5, 1) */
    return ldexpf(1.0f, e - 1);
}

static int scale_bytes(rk_scale_type t) { return t == RK_ST_F32 ? 4 : t == RK_ST_NONE ? 0 : 1; }

/* The largest value a scale type holds (the token scale's smax). */
static float scale_max(rk_scale_type t, rk_fp8_fmt fmt) {
    switch (t) {
    case RK_ST_UE8M0: return 0x1p127f;
    case RK_ST_E4M3: return fmt == RK_FP8_FNUZ ? 240.0f : 448.0f;
    default: return 1.0f;
    }
}

/* A block's scale s (already max(., floor)) under the segment's rule and storage: the bytes written at out, and
 * the value they decode to. */
static float scale_store(const rk_segment *g, rk_fp8_fmt fmt, float s, uint8_t *out) {
    if (g->rule == RK_SR_POW2_UP || g->scale == RK_ST_UE8M0) s = pow2_up(s);
    switch (g->scale) {
    case RK_ST_F32: memcpy(out, &s, 4); return s;
    case RK_ST_UE8M0: {
        const uint8_t b = (uint8_t)((rk_f32_bits(s) >> 23) & 0xffu);
        *out = b;
        return b == 0xff ? NAN : ldexpf(1.0f, (int)b - 127);
    }
    case RK_ST_E4M3: {
        uint8_t b = rk_f32_to_fp8(s, fmt);
        if ((b & 0x7fu) == 0u) b = g->rule == RK_SR_EXACT_ZERO ? 0x00 : 0x01; /* s > 0: 0x00 only by that rule */
        /* up: the next value while the nearest is below s, short of the largest finite byte */
        if (g->rule == RK_SR_UP && rk_fp8_to_f32(b, fmt) < s && b < (fmt == RK_FP8_FNUZ ? 0x7f : 0x7e)) b++;
        *out = b;
        return rk_fp8_to_f32(b, fmt);
    }
    case RK_ST_NONE: break;
    }
    return s;
}

static float scale_load(const rk_segment *g, rk_fp8_fmt fmt, const uint8_t *p) {
    switch (g->scale) {
    case RK_ST_F32: {
        float s;
        memcpy(&s, p, 4);
        return s;
    }
    case RK_ST_UE8M0: return *p == 0xff ? NAN : ldexpf(1.0f, (int)*p - 127);
    case RK_ST_E4M3: return rk_fp8_to_f32(*p, fmt);
    case RK_ST_NONE: break;
    }
    return 1.0f;
}

static float read_scale(const rk_reader *rd, float s) {
    if (!rd) return s;
    switch (rd->scale) {
    case RK_RS_BF16: return rk_bf16_to_f32(rk_f32_to_bf16(s));
    case RK_RS_POW2_DOWN: return pow2_down(s);
    case RK_RS_EXACT: break;
    }
    return s;
}

static float sat_of(const rk_segment *g, rk_fp8_fmt fmt) { return fmt == RK_FP8_FNUZ ? g->sat_fnuz : g->sat_ocp; }

/* Where a segment's block scales lie: the row (inline) or the token's tail. */
static uint8_t *scales_base(const rk_segment *g, uint8_t *row, uint8_t *tail) {
    return (g->scale_at == RK_SA_PAGE_TAIL ? tail : row) + g->scales_at;
}

/* ---- encode -------------------------------------------------------------------------------------------------- */

static void store_elem(const rk_segment *g, int raw, rk_fp8_fmt fmt, uint8_t *row, int i, float y) {
    uint8_t *at = row + g->at;
    switch (g->elem) {
    case RK_EL_BF16: {
        /* a value as read (x[0, raw): the latent, and an unrotated rope part) is a bf16 already: its bits (a NaN's
         * payload kept); a rotated rope value is rounded */
        const uint32_t u = rk_f32_bits(y);
        const uint16_t b = g->from + i < raw && (u & 0xffffu) == 0u ? (uint16_t)(u >> 16) : rk_f32_to_bf16(y);
        memcpy(at + 2 * i, &b, 2);
        break;
    }
    case RK_EL_E4M3: at[i] = rk_f32_to_fp8(y, fmt); break;
    case RK_EL_E2M1: {
        const uint8_t c = rk_f32_to_e2m1(y);
        at[i / 2] = (uint8_t)(i % 2 ? (at[i / 2] & 0x0fu) | (c << 4) : (at[i / 2] & 0xf0u) | c);
        break;
    }
    }
}

static void encode_segment(const rk_record *r, const rk_segment *g, rk_fp8_fmt fmt, const float *x, int raw, float k,
                           int conv, int sanitize, uint8_t *row, uint8_t *tail) {
    float v[8192 + 1024]; /* n <= L + R (spec limits) */
    const float sat = sat_of(g, fmt);
    for (int i = 0; i < g->n; i++) {
        float y = x[g->from + i];
        if (g->rope_bf16 && g->from + i >= r->L) y = rk_bf16_to_f32(rk_f32_to_bf16(y));
        if (g->outer == RK_OUT_TENSOR) switch ((rk_scale)conv) {
            case RK_SCALE_MUL_RECIP: {
                const float rcp = 1.0f / k;
                y = y * rcp;
                break;
            }
            case RK_SCALE_DIV: y = y / k; break;
            case RK_SCALE_MUL: y = y * k; break;
            case RK_SCALE_NONE: break;
            }
        if (sanitize) y = g->elem == RK_EL_E4M3 && !g->block ? (isnan(y) ? 0.0f : y) : sanitize_bf16(y);
        v[i] = y;
    }
    if (g->elem == RK_EL_BF16) {
        for (int i = 0; i < g->n; i++) store_elem(g, raw, fmt, row, i, v[i]);
        return;
    }
    float gs = 1.0f; /* the token scale */
    if (g->outer == RK_OUT_TOKEN) {
        float amax = 0.0f;
        for (int i = 0; i < g->n; i++)
            if (fabsf(v[i]) > amax) amax = fabsf(v[i]);
        gs = amax / (scale_max(g->scale, fmt) * sat);
        if (!(gs >= FLT_MIN)) gs = FLT_MIN;
        memcpy(row + g->outer_at, &gs, 4);
    }
    if (!g->block) {
        for (int i = 0; i < g->n; i++) {
            const float y = g->outer == RK_OUT_TOKEN ? v[i] / gs : v[i];
            store_elem(g, raw, fmt, row, i, clamp_sat(y, sat));
        }
        return;
    }
    uint8_t *sc = scales_base(g, row, tail);
    const int sb = scale_bytes(g->scale);
    for (int b0 = 0; b0 < g->n; b0 += g->block) {
        float amax = 0.0f;
        for (int i = b0; i < b0 + g->block; i++)
            if (fabsf(v[i]) > amax) amax = fabsf(v[i]);
        float s = amax / sat;
        if (g->outer == RK_OUT_TOKEN) s = s / gs;
        const float floor = rk_seg_floor(g);
        if (!(s >= floor)) s = floor;
        float d = scale_store(g, fmt, s, sc + sb * rk_seg_scale_slot(g, b0 / g->block));
        if (g->outer == RK_OUT_TOKEN) d = d * gs;
        const float rcp = 1.0f / d; /* block_conv mul_recip */
        const int zero = g->rule == RK_SR_EXACT_ZERO && d == 0.0f;
        for (int i = b0; i < b0 + g->block; i++) {
            const float y = zero ? v[i] * 0.0f : g->block_conv == RK_BC_MUL_RECIP ? v[i] * rcp : v[i] / d;
            store_elem(g, raw, fmt, row, i, clamp_sat(y, sat));
        }
    }
}

void rk_record_encode(const rk_record *r, int fmt, const float *x, int raw, float k_scale, int conv, int sanitize,
                      uint8_t *row, uint8_t *tail) {
    memset(row, 0, (size_t)r->row_bytes);
    if (tail && r->tail_bytes) memset(tail, 0, (size_t)r->tail_bytes);
    for (int s = 0; s < r->n_seg; s++)
        encode_segment(r, &r->seg[s], (rk_fp8_fmt)fmt, x, raw, k_scale, conv, sanitize, row, tail);
}

/* ---- decode -------------------------------------------------------------------------------------------------- */

static float load_elem(const rk_segment *g, rk_fp8_fmt fmt, const uint8_t *row, int i) {
    const uint8_t *at = row + g->at;
    switch (g->elem) {
    case RK_EL_BF16: {
        uint16_t b;
        memcpy(&b, at + 2 * i, 2);
        return rk_bf16_to_f32(b);
    }
    case RK_EL_E4M3: return rk_fp8_to_f32(at[i], fmt);
    case RK_EL_E2M1: return rk_e2m1_to_f32((uint8_t)(i % 2 ? at[i / 2] >> 4 : at[i / 2] & 0x0fu));
    }
    return 0.0f;
}

void rk_record_decode(const rk_record *r, int fmt, const uint8_t *row, const uint8_t *tail, float k_scale, int conv,
                      const rk_reader *rd, float *y) {
    for (int s = 0; s < r->n_seg; s++) {
        const rk_segment *g = &r->seg[s];
        float gs = 1.0f;
        if (g->outer == RK_OUT_TOKEN) memcpy(&gs, row + g->outer_at, 4);
        const uint8_t *sc = g->block ? scales_base(g, (uint8_t *)row, (uint8_t *)tail) : NULL;
        for (int i = 0; i < g->n; i++) {
            float v = load_elem(g, (rk_fp8_fmt)fmt, row, i);
            if (g->block) {
                const int slot = rk_seg_scale_slot(g, i / g->block);
                float d = read_scale(rd, scale_load(g, (rk_fp8_fmt)fmt, sc + scale_bytes(g->scale) * slot));
                if (g->outer == RK_OUT_TOKEN) d = d * gs;
                v = v * d;
            } else if (g->outer == RK_OUT_TOKEN) {
                v = v * gs;
            }
            if (g->outer == RK_OUT_TENSOR && conv != RK_SCALE_NONE)
                v = conv == RK_SCALE_MUL ? v / k_scale : v * k_scale;
            y[g->from + i] = v;
        }
    }
}

/* ---- today's row formats --------------------------------------------------------------------------------------- */

static rk_segment plain(int from, int n, rk_elem elem, int at) {
    rk_segment g;
    memset(&g, 0, sizeof g);
    g.from = from;
    g.n = n;
    g.elem = elem;
    g.at = at;
    g.scale = RK_ST_NONE;
    g.rule = RK_SR_EXACT;
    g.scale_at = RK_SA_INLINE;
    g.outer = RK_OUT_NONE;
    return g;
}

void rk_record_of_kv(const rk_spec *s, ropekv_kv_dtype kv, rk_record *r) {
    const int L = s->kv_lora_rank, R = s->rope_dim;
    memset(r, 0, sizeof *r);
    r->L = L;
    r->R = R;
    snprintf(r->name, sizeof r->name, "%s", rk_kv_name(kv));
    /* R = 0: no rope part, no second segment and nothing to split off */
    r->n_seg = R > 0 ? 2 : 1;
    switch (kv) {
    case ROPEKV_KV_BF16:
        /* the latent's bf16 bits, then the rotated rope part rounded to bf16 */
        r->row_bytes = 2 * (L + R);
        r->split_at = R > 0 ? 2 * L : 0;
        r->seg[0] = plain(0, L, RK_EL_BF16, 0);
        r->seg[1] = plain(L, R, RK_EL_BF16, 2 * L);
        snprintf(r->matches, sizeof r->matches, "the bf16 cache");
        break;
    case ROPEKV_KV_FP8_E4M3:
        /* every value scaled by the launch's k_scale, clamped to the bound and converted */
        r->row_bytes = L + R;
        r->split_at = R > 0 ? L : 0;
        r->seg[0] = plain(0, L, RK_EL_E4M3, 0);
        r->seg[1] = plain(L, R, RK_EL_E4M3, L);
        for (int i = 0; i < 2; i++) {
            r->seg[i].sat_ocp = s->fp8.sat_ocp;
            r->seg[i].sat_fnuz = s->fp8.sat_fnuz;
            r->seg[i].outer = s->fp8.scale == RK_SCALE_NONE ? RK_OUT_NONE : RK_OUT_TENSOR;
        }
        r->seg[1].rope_bf16 = s->fp8.rope_bf16;
        r->conv = (int)s->fp8.scale;
        snprintf(r->matches, sizeof r->matches, "%s", s->fp8.matches);
        break;
    case ROPEKV_KV_FP8_TILE: {
        /* the latent in tiles with a float32 scale each, then the bf16 rope part */
        const rk_tile_policy *t = &s->tile;
        r->row_bytes = t->row_bytes;
        r->split_at = 0;
        r->seg[0] = plain(0, L, RK_EL_E4M3, 0);
        r->seg[0].block = t->tile;
        r->seg[0].scale = RK_ST_F32;
        r->seg[0].rule = t->scale == RK_TILE_POW2 ? RK_SR_POW2_UP : RK_SR_EXACT;
        r->seg[0].scales_at = t->scales_at;
        r->seg[0].sat_ocp = t->sat_ocp;
        r->seg[0].sat_fnuz = t->sat_fnuz;
        r->seg[1] = plain(L, R, RK_EL_BF16, t->rope_at);
        snprintf(r->matches, sizeof r->matches, "%s", t->matches);
        break;
    }
    }
    if (r->n_seg == 1) memset(&r->seg[1], 0, sizeof r->seg[1]); /* as a record with one segment has it */
}
