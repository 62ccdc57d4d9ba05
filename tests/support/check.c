/* Conformance harness: random engine-shaped inputs, reference vs kernel, byte comparison. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rk.h"
#include "check.h"


static float uniform(rk_rng *r, float lo, float hi) {
    return lo + (hi - lo) * (float)((rk_rng_next(r) >> 40) * (1.0 / 16777216.0));
}

/* A bf16 input value: mostly moderate numbers, with a few specials when asked. */
static uint16_t bf16_input(rk_rng *r, int specials) {
    if (specials) {
        switch (rk_rng_next(r) % 64) {
        case 0: return 0x7fc0; /* NaN */
        case 1: return 0xff81; /* NaN with payload, sign */
        case 2: return 0x7f80; /* +inf */
        case 3: return 0xff80; /* -inf */
        case 4: return 0x7f7f; /* max finite */
        case 5: return 0x8000; /* -0 */
        default: break;
        }
    }
    float f = uniform(r, -6.0f, 6.0f);
    if (rk_rng_next(r) % 8 == 0) f *= 1e-3f;  /* small values exercise fp8 subnormals */
    if (rk_rng_next(r) % 16 == 0) f *= 64.0f; /* large values exercise saturation */
    return rk_f32_to_bf16(f);
}

/* One set of tensors (inputs and outputs). */
typedef struct set {
    uint16_t *q, *k, *q_out; /* q: [T,H,W+pad] holding q_nope|q_pe; k: [T,W+pad] holding k_nope|k_pe */
    uint8_t *kv, *kv_rope;   /* cache rows (split layout: the latent parts; the rope parts) */
    void *pos, *slots, *cos, *sin;
    float *k_scale, *q_scale;
    void *norm_w;       /* the fused norm's weight [L] (bf16 or f32) */
    uint16_t *norm_out; /* rms_out: [K, L+pad] bf16 */
    uint8_t *mask;      /* the write mask [K] */
} set;

typedef struct sizes {
    int64_t q, k, q_out, kv, kv_rope, pos, slots, cos, sin, norm_w, norm_out, mask; /* bytes */
} sizes;

static void *dup(const void *p, size_t n) {
    void *d = malloc(n ? n : 1);
    if (d && n) memcpy(d, p, n);
    return d;
}

static void set_free(set *s) {
    free(s->q);
    free(s->k);
    free(s->q_out);
    free(s->kv);
    free(s->kv_rope);
    free(s->pos);
    free(s->slots);
    free(s->cos);
    free(s->sin);
    free(s->k_scale);
    free(s->q_scale);
    free(s->norm_w);
    free(s->norm_out);
    free(s->mask);
    memset(s, 0, sizeof *s);
}

static int set_copy(set *d, const set *s, const sizes *z) {
    d->q = dup(s->q, z->q);
    d->k = dup(s->k, z->k);
    d->q_out = dup(s->q_out, z->q_out);
    d->kv = dup(s->kv, z->kv);
    d->kv_rope = dup(s->kv_rope, z->kv_rope);
    d->pos = dup(s->pos, z->pos);
    d->slots = dup(s->slots, z->slots);
    d->cos = dup(s->cos, z->cos);
    d->sin = dup(s->sin, z->sin);
    d->k_scale = dup(s->k_scale, sizeof(float));
    d->q_scale = dup(s->q_scale, sizeof(float));
    d->norm_w = dup(s->norm_w, z->norm_w);
    d->norm_out = dup(s->norm_out, z->norm_out);
    d->mask = dup(s->mask, z->mask);
    return d->q && d->k && d->q_out && d->kv && d->kv_rope && d->pos && d->slots && d->cos && d->sin && d->k_scale &&
                   d->q_scale && d->norm_w && d->norm_out && d->mask
               ? 0
               : -1;
}

/* KV tokens of a shape as a count: the tokens with a slot (the read-back op: every token). */
static int64_t kv_tokens_of(const rk_desc *v, const rk_shape *sh) {
    if (v->op == ROPEKV_OP_READ) return sh->tokens;
    return sh->kv_tokens < 0 ? 0 : sh->kv_tokens ? sh->kv_tokens : sh->tokens;
}

/* Bytes of one cache element: 2 for bf16 rows, 1 for fp8 and fp8_tile rows (whose strides count bytes). */
static int64_t kv_elem_of(const rk_desc *v) { return rk_desc_kv_elem(v); }

/* The read-back op writes its rope parts to a second output (out_rope) in the shapes with several heads
 * (heads mean nothing else to it), into out[:, L:] in the others. */
static int split_out(const rk_desc *v, const rk_shape *sh) { return v->op == ROPEKV_OP_READ && sh->heads > 1; }

/* The cache the harness lays out for K KV tokens: K + 3 slots; paged and split layouts in blocks of 4
 * entries, with padding between entries (pad) and between blocks (8 or 16 elements). Strides and sizes
 * in cache elements. */
typedef struct geometry {
    int64_t rows, block, st, block_st, rope_st, rope_block_st, elems, rope_elems;
} geometry;

static geometry geometry_of(const rk_desc *v, int64_t K, int64_t pad) {
    const int64_t L = v->L, R = v->R;
    /* a row in cache elements; an fp8_tile row's padding in bytes keeps its 16-byte alignment */
    const int64_t W = kv_elem_of(v) == 2 ? v->row_bytes / 2 : v->row_bytes;
    if (v->record || v->kv == ROPEKV_KV_FP8_TILE) pad *= 2; /* a record's strides: multiples of 16 bytes */
    geometry g = {.rows = K + 3, .block = 1, .st = W + pad};
    if (v->layout == ROPEKV_KV_FLAT) {
        g.elems = g.rows * g.st;
        return g;
    }
    g.block = 4;
    const int64_t blocks = (g.rows + g.block - 1) / g.block;
    g.st = (v->layout == ROPEKV_KV_SPLIT && !v->record ? L : W) + pad;
    /* a page-tail record's tails after a block's rows */
    g.block_st = g.block * g.st + 16 + (v->rec.tail_bytes + 15) / 16 * 16 * g.block;
    g.elems = blocks * g.block_st;
    if (v->layout == ROPEKV_KV_SPLIT) {
        g.rope_st = (v->record ? v->rec.row_bytes - v->rec.split_at : R) + pad;
        g.rope_block_st = g.block * g.rope_st + (v->record ? 16 : 8); /* a record's: a multiple of 16 bytes */
        g.rope_elems = blocks * g.rope_block_st;
    }
    return g;
}

/* The query rows q_out holds per token: heads, and the shape's padded ones where the q form takes them (absorbed). */
static int64_t q_heads_of(const rk_desc *v, const rk_shape *sh) {
    return sh->heads + (v->op == ROPEKV_OP_WRITE && v->q == ROPEKV_Q_ABSORBED ? sh->q_pad : 0);
}

static void args_for(const rk_desc *v, const rk_shape *sh, const set *s, rk_args *a) {
    const int64_t L = v->spec->kv_lora_rank, R = v->spec->rope_dim, W = L + R, T = sh->tokens, H = sh->heads;
    const int64_t K = kv_tokens_of(v, sh);
    const int64_t q_sh = W + sh->pad, q_st = H * q_sh + sh->pad;
    const int64_t o_sh = W + sh->pad, o_st = q_heads_of(v, sh) * o_sh + sh->pad;
    memset(a, 0, sizeof *a);
    a->q_nope = s->q;
    a->q_pe = R > 0 ? s->q + L : NULL; /* R = 0: no rope part */
    a->q_out = s->q_out;
    a->k_nope = s->k;
    a->k_pe = R > 0 ? s->k + L : NULL;
    a->kv_cache = s->kv;
    a->positions = s->pos;
    a->slots = s->slots;
    a->cos_sin = s->cos;
    a->sin = s->sin;
    a->k_scale = s->k_scale;
    a->q_scale = s->q_scale;
    a->tokens = T;
    a->kv_tokens = K;
    a->min_slot = sh->min_slot;
    a->heads = H;
    a->q_heads = q_heads_of(v, sh);
    a->write_mask = v->op == ROPEKV_OP_WRITE && sh->mask_every ? s->mask : NULL;
    a->max_pos = sh->max_pos;
    a->q_nope_st = a->q_pe_st = q_st;
    a->q_nope_sh = a->q_pe_sh = q_sh;
    a->q_out_st = o_st;
    a->q_out_sh = o_sh;
    a->k_nope_st = a->k_pe_st = W + sh->pad;
    const geometry g = geometry_of(v, K, sh->pad);
    a->kv_st = g.st;
    a->kv_rows = g.rows;
    a->kv_block_size = g.block;
    a->kv_block_st = g.block_st;
    a->kv_rope_cache = v->layout == ROPEKV_KV_SPLIT ? s->kv_rope : NULL;
    a->kv_rope_st = g.rope_st;
    a->kv_rope_block_st = g.rope_block_st;
    if (v->op == ROPEKV_OP_READ) { /* the outputs in the q_out buffer: out [T, W or L], then out_rope [T, R] */
        const int two = split_out(v, sh);
        a->out = s->q_out;
        a->out_st = (two ? L : W) + sh->pad;
        a->out_rope = two ? s->q_out + T * a->out_st : NULL;
        a->out_rope_st = two ? R + sh->pad : 0;
    }
    if (v->norm != ROPEKV_NORM_NONE) a->norm_weight = s->norm_w;
    if (v->norm == ROPEKV_NORM_RMS_OUT) {
        a->norm_out = s->norm_out;
        a->norm_out_st = L + sh->pad;
    }
    int64_t total, blocks;
    int block;
    rk_launch_plan(v, a, &total, &blocks, &block);
}

static int first_diff(const void *a, const void *b, int64_t n, int64_t *at) {
    const uint8_t *x = a, *y = b;
    for (int64_t i = 0; i < n; i++)
        if (x[i] != y[i]) {
            *at = i;
            return 1;
        }
    return 0;
}

static int compare(const char *what, const void *want, const void *got, int64_t n, int64_t elem, char *why,
                   size_t cap) {
    int64_t at;
    if (!first_diff(want, got, n, &at)) return 0;
    at -= at % elem;
    if (elem == 2)
        snprintf(why, cap, "%s differs at element %lld: want 0x%04x, got 0x%04x", what, (long long)(at / 2),
                 ((const uint16_t *)want)[at / 2], ((const uint16_t *)got)[at / 2]);
    else
        snprintf(why, cap, "%s differs at byte %lld: want 0x%02x, got 0x%02x", what, (long long)at,
                 ((const uint8_t *)want)[at], ((const uint8_t *)got)[at]);
    return 1;
}

/* Byte sizes of the buffers rk_check builds for a shape (T query tokens, K KV tokens, H heads, pad,
 * max_pos). */
static sizes sizes_for(const rk_desc *v, int64_t T, int64_t K, int64_t H, int64_t HQ, int64_t pad, int64_t max_pos,
                       int mask) {
    const rk_spec *sp = v->spec;
    const int64_t L = sp->kv_lora_rank, R = sp->rope_dim, W = L + R, row_elems = W + pad;
    const int64_t kv_elem = kv_elem_of(v), q_elem = v->q_dtype == ROPEKV_Q_FP8_E4M3 ? 1 : 2;
    const int64_t cs_w = sp->cos_sin == RK_CS_F32_CAT ? R : R / 2;
    const int64_t cs_elem = sp->cos_sin == RK_CS_BF16_SPLIT ? 2 : 4;
    const int64_t idx_pos = v->pos == ROPEKV_INDEX_INT64 ? 8 : 4, idx_slot = v->slot == ROPEKV_INDEX_INT64 ? 8 : 4;
    /* a tensor of no rows still gets one, so every argument pointer lies inside its buffer */
    const int64_t Tb = T > 0 ? T : 1, Kb = K > 0 ? K : 1, Pb = T > Kb ? T : Kb;
    const geometry g = geometry_of(v, K, pad);
    sizes z = {
        .q = (Tb * (H * row_elems + pad)) * 2,
        .k = Kb * row_elems * 2,
        .q_out = (Tb * (HQ * row_elems + pad)) * q_elem, /* strides count q_out's elements: bf16 or fp8 bytes */
        .kv = g.elems * kv_elem,
        .kv_rope = g.rope_elems * kv_elem,
        .pos = Pb * idx_pos,
        .slots = Kb * idx_slot,
        .cos = max_pos * cs_w * cs_elem,
        .sin = sp->cos_sin == RK_CS_F32_CAT ? 0 : max_pos * cs_w * cs_elem,
        .norm_w = v->norm == ROPEKV_NORM_NONE ? 0 : rk_norm_values(v) * (v->norm_weight == RK_NW_F32 ? 4 : 2),
        .norm_out = v->norm == ROPEKV_NORM_RMS_OUT ? Kb * (L + pad) * 2 : 0,
        .mask = mask ? Kb : 0,
    };
    return z;
}

void rk_check_buffers(const rk_desc *v, const rk_args *a, rk_check_buf out[RK_CHECK_NBUF]) {
    const int64_t W = (int64_t)v->spec->kv_lora_rank + v->spec->rope_dim;
    const sizes z = sizes_for(v, a->tokens, v->op == ROPEKV_OP_READ ? a->tokens : a->kv_tokens, a->heads,
                              a->q_heads > a->heads ? a->q_heads : a->heads, a->k_nope_st - W, a->max_pos,
                              a->write_mask != NULL);
    const rk_check_buf b[RK_CHECK_NBUF] = {
        [RK_CHECK_Q] = {"q", (void *)a->q_nope, z.q, 1},
        [RK_CHECK_K] = {"k", (void *)a->k_nope, z.k, 0},
        [RK_CHECK_Q_OUT] = {"q_out", a->q_out, z.q_out, 1},
        [RK_CHECK_KV] = {"kv_cache", a->kv_cache, z.kv, 1},
        [RK_CHECK_KV_ROPE] = {"kv_rope_cache", a->kv_rope_cache, z.kv_rope, 1},
        [RK_CHECK_POS] = {"positions", (void *)a->positions, z.pos, 0},
        [RK_CHECK_SLOTS] = {"slots", (void *)a->slots, z.slots, 0},
        [RK_CHECK_COS] = {"cos", (void *)a->cos_sin, z.cos, 0},
        [RK_CHECK_SIN] = {"sin", (void *)a->sin, z.sin, 0},
        [RK_CHECK_K_SCALE] = {"k_scale", (void *)a->k_scale, (int64_t)sizeof(float), 0},
        [RK_CHECK_Q_SCALE] = {"q_scale", (void *)a->q_scale, (int64_t)sizeof(float), 0},
        [RK_CHECK_NORM_W] = {"norm_weight", (void *)a->norm_weight, z.norm_w, 0},
        [RK_CHECK_NORM_OUT] = {"norm_out", a->norm_out, z.norm_out, 1},
        [RK_CHECK_MASK] = {"write_mask", (void *)a->write_mask, z.mask, 0},
    };
    memcpy(out, b, sizeof b);
}

static int64_t q_st_of(const rk_desc *v, const rk_shape *sh) {
    const int64_t W = (int64_t)v->spec->kv_lora_rank + v->spec->rope_dim;
    return sh->heads * (W + sh->pad) + sh->pad;
}

/* Values where one fused multiply-add and two roundings give different bf16 results (see the
 * reference tests): x0 = 1.03125, x1 = 1, c = 1 + 993*2^-23, s = +-1. Planted in table row 0 and in
 * every head of the tokens that sit at position 0, so a kernel that rounds differently is caught. */
static void plant_fma_witness(const rk_desc *v, const rk_shape *sh, set *s, int64_t q_st, int64_t row_elems) {
    const rk_spec *sp = v->spec;
    const int64_t L = sp->kv_lora_rank, R = sp->rope_dim, H2 = R / 2;
    const float c0 = 1.0f + 993.0f * 0x1p-23f;
    if (sp->rope == RK_ROPE_NONE || sp->cos_sin == RK_CS_BF16_SPLIT) return; /* bf16 cannot hold c0 */
    float *cos = s->cos, *sin = sp->cos_sin == RK_CS_F32_CAT ? (float *)s->cos + H2 : s->sin;
    cos[0] = cos[1] = c0;
    sin[0] = 1.0f;
    sin[1] = -1.0f;
    /* element offsets of pair 0 and pair 1 inside a rope row */
    const int64_t e[4] = {0, sp->rope == RK_ROPE_GPTJ ? 1 : H2, sp->rope == RK_ROPE_GPTJ ? 2 : 1,
                          sp->rope == RK_ROPE_GPTJ ? 3 : H2 + 1};
    const uint16_t x[4] = {rk_f32_to_bf16(1.03125f), rk_f32_to_bf16(1.0f), rk_f32_to_bf16(1.0f),
                           rk_f32_to_bf16(1.03125f)};
    const int64_t K = kv_tokens_of(v, sh), P = sh->tokens > K ? sh->tokens : K;
    for (int64_t t = 0; t < P; t++) {
        int64_t p = v->pos == ROPEKV_INDEX_INT64 ? ((int64_t *)s->pos)[t] : ((int32_t *)s->pos)[t];
        if (p > 0) continue; /* positions <= 0 read table row 0 */
        for (int k = 0; k < 4; k++) {
            if (t < K) s->k[t * row_elems + L + e[k]] = x[k];
            if (t < sh->tokens)
                for (int64_t h = 0; h < sh->heads; h++) s->q[t * q_st + h * row_elems + L + e[k]] = x[k];
        }
    }
}

/* Rope floats at the bf16 max, planted in table row 0 (pairs 2 to 5; s = 0) and in the KV rows of the tokens at
 * position 0: k_pe = (2^99, -2^99) per pair gives (y, -y), y = 2^99 * c exactly, with c = y * 2^-99 for y the
 * largest float that rounds to the bf16 max (0x7f7f7fff), the tie just above it that rounds to inf (0x7f7f8000),
 * 3.4e38, and 2^99 * (FLT_MAX * 2^-98), an inf from the fma itself. A sanitized bf16 store clamps them to
 * +-0x7f7f; a kernel that clamps before the rounding only stores inf for three of them. */
static void plant_bf16_bound(const rk_desc *v, const rk_shape *sh, set *s, int64_t row_elems) {
    const rk_spec *sp = v->spec;
    const int64_t L = sp->kv_lora_rank, R = sp->rope_dim, H2 = R / 2;
    if (v->op != ROPEKV_OP_WRITE || sp->rope == RK_ROPE_NONE || sp->cos_sin == RK_CS_BF16_SPLIT) return;
    float *cos = s->cos, *sin = sp->cos_sin == RK_CS_F32_CAT ? (float *)s->cos + H2 : s->sin;
    const uint32_t y[4] = {0x7f7f7fffu, 0x7f7f8000u, 0x7f7fc99eu /* 3.4e38 */, 0u};
    const int64_t K = kv_tokens_of(v, sh);
    for (int i = 2; i < 6 && i < H2; i++) {
        float c;
        uint32_t u = y[i - 2];
        memcpy(&c, &u, sizeof c);
        cos[i] = i == 5 ? 3.40282347e38f * 0x1p-98f : c * 0x1p-99f;
        sin[i] = 0.0f;
        const int64_t e0 = sp->rope == RK_ROPE_GPTJ ? 2 * i : i, e1 = sp->rope == RK_ROPE_GPTJ ? 2 * i + 1 : H2 + i;
        for (int64_t t = 0; t < K; t++) {
            int64_t p = v->pos == ROPEKV_INDEX_INT64 ? ((int64_t *)s->pos)[t] : ((int32_t *)s->pos)[t];
            if (p > 0) continue;                   /* positions <= 0 read table row 0 */
            s->k[t * row_elems + L + e0] = 0x7100; /* 2^99 */
            s->k[t * row_elems + L + e1] = 0xf100; /* -2^99 */
        }
    }
}

/* Rows with block scales over the latent (fp8_tile rows, block-scaled records): the blocks whose scale is an edge
 * case, planted in the first two KV tokens' first blocks: token 0 an all-zero block (+0 and -0: scale the floor), a
 * block whose amax is the saturation bound itself (scale 1), a block of bf16 subnormals (amax / sat below FLT_MIN),
 * and a block whose amax / sat is 2^-10 (an e4m3 scale on the tie below its least value 2^-9: to even, zero, stored
 * as the least value or, by rule exact_zero, as 0); token 1 a block holding +inf and a block holding NaN next to
 * finite values (with sanitize: +-bf16 max and 0), and for fp8_tile rows a quotient on an e4m3 tie. */
static void plant_tile_cases(const rk_desc *v, const rk_shape *sh, set *s, int64_t row_elems) {
    const rk_segment *g = &v->rec.seg[0];
    if (v->op != ROPEKV_OP_WRITE || v->rec.n_seg < 1 || g->from != 0 || g->block == 0) return;
    const int64_t K = kv_tokens_of(v, sh), n = g->block, tiles = g->n / g->block;
    const float sat = v->fp8 == RK_FP8_FNUZ ? g->sat_fnuz : g->sat_ocp;
    for (int64_t k = 0; k < tiles && k < 4 && K > 0; k++)
        for (int64_t j = 0; j < n; j++) {
            uint16_t x = k == 0   ? (j % 2 ? 0x8000 : 0x0000)
                         : k == 1 ? rk_f32_to_bf16(j == 5   ? sat
                                                   : j == 9 ? -sat
                                                            : (float)(j % 7) - 3.0f)
                         : k == 2 ? (uint16_t)(0x0001 + (j % 5) * 0x10 + (j % 2) * 0x8000) /* bf16 subnormals */
                                  : rk_f32_to_bf16(j == 0 ? ldexpf(sat, -10) : (float)(j % 3 - 1) * ldexpf(sat, -12));
            s->k[k * n + j] = x;
        }
    for (int64_t k = 0; k < tiles && k < 2 && K > 1; k++) s->k[row_elems + k * n + 3] = k == 0 ? 0x7f80 : 0x7fc0;
    /* token 1, tile 2: amax 8.625 (scale 8.625 / 448) and 0.80859375, whose quotient is 42 exactly, a tie
     * between the e4m3 values 40 and 44 (to even: 40); times the scale's f32 reciprocal it is 42.0000038 (44):
     * a division done as a multiply is caught */
    if (v->kv == ROPEKV_KV_FP8_TILE && tiles > 2 && K > 1)
        for (int64_t j = 0; j < n; j++)
            s->k[row_elems + 2 * n + j] = rk_f32_to_bf16(j == 0   ? 8.625f
                                                         : j == 1 ? 0.80859375f
                                                                  : (float)(j % 5) * 0.5f - 1.0f);
}

/* The fused norm's weight: values around 1 as trained weights are, some negative, some tiny; an f32 weight with
 * bits below bf16's (so a kernel that rounds it, or the product, early is caught). */
static void fill_norm_weight(const rk_desc *v, set *s, rk_rng *r) {
    if (v->norm == ROPEKV_NORM_NONE) return;
    for (int j = 0; j < rk_norm_values(v); j++) {
        float w = uniform(r, 0.25f, 2.0f);
        if (rk_rng_next(r) % 8 == 0) w = -w;
        if (rk_rng_next(r) % 16 == 0) w *= 1e-3f;
        if (v->norm_weight == RK_NW_F32) ((float *)s->norm_w)[j] = w;
        else ((uint16_t *)s->norm_w)[j] = rk_f32_to_bf16(w);
    }
}

/* The fused norm's edge rows, planted in the first KV tokens: token 0 all zeros (sum 0: r = 1 / sqrt(eps)),
 * token 1 values whose squares overflow f32 (sum inf: r = 0), token 2 one large value among small ones (the
 * sum's order decides its low bits), token 3 bf16 subnormals. */
static void plant_norm_cases(const rk_desc *v, const rk_shape *sh, set *s, int64_t row_elems) {
    const int64_t K = kv_tokens_of(v, sh);
    if (v->norm == ROPEKV_NORM_NONE) return;
    for (int64_t t = 0; t < K && t < 4; t++)
        for (int64_t j = 0; j < v->L; j++) {
            uint16_t *x = &s->k[t * row_elems + j];
            if (t == 0) *x = j % 3 ? 0x0000 : 0x8000;
            else if (t == 1) *x = rk_f32_to_bf16(j % 2 ? 3e19f : -2e19f);
            else if (t == 2) *x = rk_f32_to_bf16(j == 37 ? 4096.0f : (float)(j % 9) * 0.001f + 0.0001f);
            else *x = (uint16_t)(0x0001 + (j % 7) * 0x9 + (j % 2) * 0x8000);
        }
}

/* The read-back op's cache: every byte random (fp8 NaN codes and bf16 specials included), then each row's
 * fp8_tile scales set to scales an engine writes (mostly in [2^-10, 2), some FLT_MIN). */
static void fill_read_cache(const rk_desc *v, const rk_args *a, set *s, const sizes *z, rk_rng *r) {
    for (int64_t i = 0; i < z->kv; i++) s->kv[i] = (uint8_t)rk_rng_next(r);
    for (int64_t i = 0; i < z->kv_rope; i++) s->kv_rope[i] = (uint8_t)rk_rng_next(r);
    if (v->kv != ROPEKV_KV_FP8_TILE) return;
    for (int64_t slot = 0; slot < a->kv_rows; slot++) {
        const int64_t row = v->layout == ROPEKV_KV_FLAT
                                ? slot * a->kv_st
                                : slot / a->kv_block_size * a->kv_block_st + slot % a->kv_block_size * a->kv_st;
        for (int k = 0; k < v->L / v->tile; k++) {
            float scale = rk_rng_next(r) % 16 == 0 ? 0x1p-126f : uniform(r, 0x1p-10f, 2.0f);
            memcpy(s->kv + row + v->scales_at + 4 * k, &scale, 4);
        }
    }
}

int rk_check(const rk_desc *v, const rk_shape *sh, uint64_t seed, rk_run_fn run, void *ctx, char *why, size_t why_cap) {
    const rk_spec *sp = v->spec;
    const int64_t L = sp->kv_lora_rank, R = sp->rope_dim, W = L + R, T = sh->tokens, H = sh->heads;
    const int64_t row_elems = W + sh->pad;
    const int64_t kv_elem = kv_elem_of(v);
    const int64_t cs_w = sp->cos_sin == RK_CS_F32_CAT ? R : R / 2;
    const int64_t cs_elem = sp->cos_sin == RK_CS_BF16_SPLIT ? 2 : 4;
    const int64_t idx_pos = v->pos == ROPEKV_INDEX_INT64 ? 8 : 4, idx_slot = v->slot == ROPEKV_INDEX_INT64 ? 8 : 4;
    const int64_t K = kv_tokens_of(v, sh), P = T > K ? T : K;
    const int masked = v->op == ROPEKV_OP_WRITE && sh->mask_every;
    const sizes z = sizes_for(v, T, K, H, q_heads_of(v, sh), sh->pad, sh->max_pos, masked);
    rk_rng r = {seed * 0x9e3779b97f4a7c15ull + 1};
    set ref = {0}, ker = {0};
    int rc = 2;
    ref.q = malloc(z.q ? (size_t)z.q : 1);
    ref.k = malloc(z.k ? (size_t)z.k : 1);
    ref.q_out = malloc(z.q_out ? (size_t)z.q_out : 1);
    ref.kv = malloc(z.kv ? (size_t)z.kv : 1);
    ref.kv_rope = malloc(z.kv_rope ? (size_t)z.kv_rope : 1);
    ref.pos = malloc(z.pos ? (size_t)z.pos : 1);
    ref.slots = malloc(z.slots ? (size_t)z.slots : 1);
    ref.cos = malloc(z.cos ? (size_t)z.cos : 1);
    ref.sin = malloc(z.sin ? z.sin : 1);
    ref.k_scale = malloc(sizeof(float));
    ref.q_scale = malloc(sizeof(float));
    ref.norm_w = malloc(z.norm_w ? (size_t)z.norm_w : 1);
    ref.norm_out = malloc(z.norm_out ? (size_t)z.norm_out : 1);
    ref.mask = malloc(z.mask ? (size_t)z.mask : 1);
    if (!ref.q || !ref.k || !ref.q_out || !ref.kv || !ref.kv_rope || !ref.pos || !ref.slots || !ref.cos || !ref.sin ||
        !ref.k_scale || !ref.q_scale || !ref.norm_w || !ref.norm_out || !ref.mask) {
        snprintf(why, why_cap, "out of memory");
        goto out;
    }
    for (int64_t i = 0; i < z.q / 2; i++) ref.q[i] = bf16_input(&r, sh->specials);
    for (int64_t i = 0; i < z.k / 2; i++) ref.k[i] = bf16_input(&r, sh->specials);
    memset(ref.q_out, 0xa5, (size_t)z.q_out);
    memset(ref.kv, 0x5a, (size_t)z.kv);
    memset(ref.kv_rope, 0x3c, z.kv_rope ? (size_t)z.kv_rope : 1);
    memset(ref.norm_out, 0x6b, z.norm_out ? (size_t)z.norm_out : 1);
    fill_norm_weight(v, &ref, &r);
    /* the write mask: every mask_every-th token's byte 0, the others any nonzero byte (a bool's 1 among them) */
    for (int64_t t = 0; t < z.mask; t++)
        ref.mask[t] = t % sh->mask_every == sh->mask_every - 1 ? 0 : (uint8_t)(1 + rk_rng_next(&r) % 255);
    *ref.k_scale = sh->k_scale;
    *ref.q_scale = sh->q_scale != 0.0f ? sh->q_scale : 1.0f;
    /* positions: in range, at both ends, and out of range (clamped) */
    for (int64_t t = 0; t < P; t++) {
        int64_t p = (int64_t)(rk_rng_next(&r) % (uint64_t)(sh->max_pos + 4)) - 2;
        if (t % 5 == 1) p = 0;
        if (t % 5 == 2) p = sh->max_pos - 1;
        if (idx_pos == 8) ((int64_t *)ref.pos)[t] = p;
        else ((int32_t *)ref.pos)[t] = (int32_t)p;
    }
    /* slots: a shuffled permutation of the cache rows (0 .. min_slot - 1 among them: reserved rows that
     * must stay as they are), some negative (padding) */
    for (int64_t t = 0; t < K; t++) {
        int64_t s = t;
        if (sh->neg_every && t % sh->neg_every == sh->neg_every - 1) s = -1 - (int64_t)(rk_rng_next(&r) % 3);
        if (idx_slot == 8) ((int64_t *)ref.slots)[t] = s;
        else ((int32_t *)ref.slots)[t] = (int32_t)s;
    }
    for (int64_t t = K - 1; t > 0; t--) {
        int64_t j = (int64_t)(rk_rng_next(&r) % (uint64_t)(t + 1));
        if (idx_slot == 8) {
            int64_t *s = ref.slots, x = s[t];
            s[t] = s[j];
            s[j] = x;
        } else {
            int32_t *s = ref.slots, x = s[t];
            s[t] = s[j];
            s[j] = x;
        }
    }
    for (int64_t i = 0; i < sh->max_pos * cs_w; i++) {
        float c = uniform(&r, -1.0f, 1.0f), s = uniform(&r, -1.0f, 1.0f);
        if (cs_elem == 2) {
            ((uint16_t *)ref.cos)[i] = rk_f32_to_bf16(c);
            ((uint16_t *)ref.sin)[i] = rk_f32_to_bf16(s);
        } else {
            ((float *)ref.cos)[i] = c;
            if (z.sin) ((float *)ref.sin)[i] = s;
        }
    }
    plant_fma_witness(v, sh, &ref, q_st_of(v, sh), row_elems);
    plant_bf16_bound(v, sh, &ref, row_elems);
    plant_tile_cases(v, sh, &ref, row_elems);
    plant_norm_cases(v, sh, &ref, row_elems);
    rk_args a;
    args_for(v, sh, &ref, &a);
    if (v->op == ROPEKV_OP_READ) fill_read_cache(v, &a, &ref, &z, &r);
    if (set_copy(&ker, &ref, &z)) {
        snprintf(why, why_cap, "out of memory");
        goto out;
    }
    for (int i = 0; i < (sh->runs > 1 ? sh->runs : 1); i++) rk_ref_run(v, &a);
    args_for(v, sh, &ker, &a);
    rc = run(ctx, v, &a);
    if (rc != 0) {
        if (!why[0]) snprintf(why, why_cap, "kernel run failed (%d)", rc);
        goto out;
    }
    rc = compare(v->op == ROPEKV_OP_READ ? "out" : "q_out", ref.q_out, ker.q_out, z.q_out,
                 v->q_dtype == ROPEKV_Q_FP8_E4M3 ? 1 : 2, why, why_cap) ||
         compare("q (in place)", ref.q, ker.q, z.q, 2, why, why_cap) ||
         compare("kv_cache", ref.kv, ker.kv, z.kv, kv_elem, why, why_cap) ||
         compare("kv_rope_cache", ref.kv_rope, ker.kv_rope, z.kv_rope, kv_elem, why, why_cap) ||
         compare("norm_out", ref.norm_out, ker.norm_out, z.norm_out, 2, why, why_cap);
out:
    set_free(&ref);
    set_free(&ker);
    return rc;
}
