/* The launch-argument property (args_oracle.h): guard-paged buffers sized from the claims of the args, the
 * launch, and the CPU reference on copies. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "args_oracle.h"
#include "build.h" /* rk_variant_of */
#include "check.h"
#include "cover.h"

typedef __int128 i128;
#define ADDRESS_SPACE ((i128)1 << 57) /* no claim past it is a buffer */

/* Pairs whose argument rules differ (the read-back op's block and rope-cache checks, q form none or absorbed beside
 * paged and split caches), which the covering set guarantees on some row but not on the host's: added when the host
 * variants lack them. */
static const struct {
    const char *spec;
    rk_choice c;
} RULE_CASES[] = {
    {"deepseek_v3", {.kv = ROPEKV_KV_FP8_E4M3, .q = ROPEKV_Q_NONE, .layout = ROPEKV_KV_PAGED, .op = ROPEKV_OP_READ}},
    {"deepseek_v2_lite", {.kv = ROPEKV_KV_BF16, .q = ROPEKV_Q_NONE, .layout = ROPEKV_KV_SPLIT, .op = ROPEKV_OP_READ}},
    {"deepseek_v3", {.kv = ROPEKV_KV_FP8_E4M3, .q = ROPEKV_Q_NONE, .layout = ROPEKV_KV_PAGED}},
    {"deepseek_v2_lite", {.kv = ROPEKV_KV_BF16, .q = ROPEKV_Q_ABSORBED, .layout = ROPEKV_KV_SPLIT}},
    {"deepseek_v32",
     {.kv = ROPEKV_KV_FP8_TILE, .q = ROPEKV_Q_NONE, .layout = ROPEKV_KV_PAGED, .norm = ROPEKV_NORM_RMS}},
};

/* RULE_CASES[i] on the host row, unless a variant with its key is there already. 0, or -1 with why. */
static int add_rule_case(rk_oracle *o, const rk_arch *host, size_t i, char *why, size_t cap) {
    rk_desc d;
    rk_err err = {0};
    if (rk_desc_make(rk_catalog_find(&o->cat, RULE_CASES[i].spec), host, &RULE_CASES[i].c, &d, &err) != ROPEKV_OK) {
        snprintf(why, cap, "rule case %zu: %s", i, err.msg);
        return -1;
    }
    for (int k = 0; k < o->n; k++)
        if (!strcmp(o->var[k].d.key, d.key)) return 0;
    if (o->n == RK_ORACLE_MAX_VARIANTS) {
        snprintf(why, cap, "the oracle holds at most %d variants (RK_ORACLE_MAX_VARIANTS)", RK_ORACLE_MAX_VARIANTS);
        return -1;
    }
    o->var[o->n].d = d;
    o->var[o->n].v = rk_variant_of(&o->var[o->n].d); /* its record name points into the description */
    o->n++;
    return 0;
}

/* The host row's variants of the covering set, the catalog's pointers (spec, row) into o->cat. 0, or -1 with why. */
static int host_variants(rk_oracle *o, char *why, size_t cap) {
    enum { ROOM = 8192 }; /* the whole covering set (691 today) */
    rk_desc *set = malloc(sizeof *set * ROOM);
    rk_err err = {0};
    if (!set) {
        snprintf(why, cap, "out of memory");
        return -1;
    }
    const int n = rk_cover_catalog(&o->cat, NULL, 0, set, ROOM, &err);
    const rk_arch *host = rk_arch_find(&o->cat.archs, "host");
    int rc = 0, hosts = 0;
    if (n < 0) {
        snprintf(why, cap, "the covering set: %s", err.msg);
        rc = -1;
    }
    for (int i = 0; i < n; i++) hosts += set[i].arch == host;
    if (rc == 0 && (hosts == 0 || hosts > RK_ORACLE_MAX_VARIANTS)) {
        snprintf(why, cap, "the covering set has %d host variants; the oracle holds 1 to %d (RK_ORACLE_MAX_VARIANTS)",
                 hosts, RK_ORACLE_MAX_VARIANTS);
        rc = -1;
    }
    for (int i = 0; i < n && rc == 0; i++) {
        if (set[i].arch != host) continue;
        o->var[o->n].d = set[i];
        o->var[o->n].v = rk_variant_of(&o->var[o->n].d);
        o->n++;
    }
    free(set);
    for (size_t i = 0; i < sizeof RULE_CASES / sizeof RULE_CASES[0] && rc == 0; i++)
        rc = add_rule_case(o, host, i, why, cap);
    return rc;
}

int rk_oracle_open(rk_oracle *o, char *why, size_t cap) {
    memset(o, 0, sizeof *o);
    rk_err err = {0};
    if (rk_catalog_load_embedded(&o->cat, &err) != ROPEKV_OK) {
        snprintf(why, cap, "catalog: %s", err.msg);
        return -1;
    }
    if (host_variants(o, why, cap) != 0) return -1;
    ropekv_options opt = {.backend = ROPEKV_BACKEND_HOST, .disk_cache = -1};
    ropekv_status s = ropekv_create(&o->ctx, &opt);
    if (s != ROPEKV_OK) {
        snprintf(why, cap, "ropekv_create: %s", ropekv_status_name(s));
        return -1;
    }
    return 0;
}

void rk_oracle_close(rk_oracle *o) {
    for (int i = 0; i < o->n; i++)
        if (o->var[i].k) ropekv_kernel_release(o->var[i].k);
    ropekv_destroy(o->ctx);
    memset(o, 0, sizeof *o);
}

#define F(name) offsetof(ropekv_args, name)
const size_t rk_oracle_fields[RK_ORACLE_NFIELDS] = {
    F(tokens),     F(heads),     F(q_nope_st),   F(q_nope_sh),     F(q_pe_st),     F(q_pe_sh),
    F(q_out_st),   F(q_out_sh),  F(k_nope_st),   F(k_pe_st),       F(kv_st),       F(kv_rows),
    F(max_pos),    F(kv_tokens), F(min_slot),    F(kv_block_size), F(kv_block_st), F(kv_rope_block_st),
    F(kv_rope_st), F(out_st),    F(out_rope_st), F(norm_out_st),   F(q_heads)};
#undef F

static uint64_t le(const uint8_t *p, size_t n, size_t at) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | (at + (size_t)i < n ? p[at + (size_t)i] : 0);
    return v;
}

rk_draw rk_draw_of_bytes(const uint8_t *p, size_t n) {
    rk_draw d;
    memset(&d, 0, sizeof d);
    d.variant = n > 0 ? p[0] : 0;
    d.out_rope = n > 1 ? p[1] & 1 : 0;
    d.stray = n > 1 ? (p[1] >> 1) & 3u : 0;
    for (int i = 0; i < RK_ORACLE_NFIELDS; i++) {
        const int64_t v = (int64_t)le(p, n, 2 + 8 * (size_t)(i < RK_ORACLE_SEED_AT ? i : i + 1));
        memcpy((char *)&d.a + rk_oracle_fields[i], &v, sizeof v);
    }
    d.seed = le(p, n, 2 + 8 * RK_ORACLE_SEED_AT);
    return d;
}

static void put_le(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> 8 * i);
}

void rk_draw_to_bytes(const rk_draw *d, uint8_t p[RK_ORACLE_DRAW_BYTES]) {
    p[0] = (uint8_t)d->variant;
    p[1] = (uint8_t)((d->out_rope ? 1u : 0u) | (d->stray & 3u) << 1);
    for (int i = 0; i < RK_ORACLE_NFIELDS; i++) {
        int64_t v;
        memcpy(&v, (const char *)&d->a + rk_oracle_fields[i], sizeof v);
        put_le(p + 2 + 8 * (i < RK_ORACLE_SEED_AT ? i : i + 1), (uint64_t)v);
    }
    put_le(p + 2 + 8 * RK_ORACLE_SEED_AT, d->seed);
}

/* ---- what the args claim -------------------------------------------------------------------------- */
/* The buffers, in the order of ropekv_args. */
enum {
    Q_NOPE,
    Q_PE,
    Q_OUT,
    K_NOPE,
    K_PE,
    KV,
    KV_ROPE,
    POS,
    SLOTS,
    COS,
    SIN,
    K_SCALE,
    Q_SCALE,
    OUT,
    OUT_ROPE,
    NORM_W,
    NORM_OUT,
    WRITE_MASK,
    NBUF
};
static const char *const NAMES[NBUF] = {"q_nope",      "q_pe",          "q_out",     "k_nope", "k_pe",
                                        "kv_cache",    "kv_rope_cache", "positions", "slots",  "cos_sin",
                                        "sin",         "k_scale",       "q_scale",   "out",    "out_rope",
                                        "norm_weight", "norm_out",      "write_mask"};

/* Whether the kernel takes buffer b at all: the norm's tensors belong to the norm variants (norm_out to rms_out);
 * passing one to another kernel is a mix-up it must refuse. */
static int takes(const rk_desc *d, int b) {
    if (b == NORM_W) return d->norm != ROPEKV_NORM_NONE;
    if (b == NORM_OUT) return d->norm == ROPEKV_NORM_RMS_OUT;
    if (b == WRITE_MASK) return d->op == ROPEKV_OP_WRITE; /* a read kernel does not look at it */
    return 1;
}

/* A claim: the bytes a tensor the launch touches spans (0: not touched), or why it must be refused. */
typedef struct claims {
    i128 bytes[NBUF];
    int refuse; /* 1: a count out of range, a negative stride or a claim past the address space */
    i128 rows;  /* the rows the launch writes (query rows and KV rows, or the read's): its work */
} claims;

/* Rows (n1, n2) of w elements at strides (s1, s2), elem bytes each: the span, or refuse for a negative stride. */
static void claim(claims *c, int b, int64_t n1, int64_t n2, int64_t s1, int64_t s2, int64_t w, int64_t elem) {
    if (n1 <= 0 || n2 <= 0) return;
    if (s1 < 0 || s2 < 0) c->refuse = 1;
    i128 e = ((i128)(n1 - 1) * (s1 < 0 ? 0 : s1) + (i128)(n2 - 1) * (s2 < 0 ? 0 : s2) + w) * elem;
    if (e > ADDRESS_SPACE) c->refuse = 1;
    c->bytes[b] = e;
}

/* The rows of slots [0, rows) of a cache (ropekv_kv_layout): block s / B at bst, entry s % B at est. */
static void claim_cache(claims *c, int b, int64_t rows, int64_t B, int64_t est, int64_t bst, int64_t w, int64_t elem) {
    if (rows <= 0) return;
    if (est < 0 || bst < 0) c->refuse = 1;
    est = est < 0 ? 0 : est;
    bst = bst < 0 ? 0 : bst;
    const int64_t last = rows - 1, full = rows < B ? rows - 1 : B - 1; /* the last slot; a full block's last entry */
    i128 e = (i128)(last / B) * bst + (i128)(last % B) * est + w;
    if (last / B > 0) { /* the block before the last one may end later when blocks overlap */
        i128 f = (i128)(last / B - 1) * bst + (i128)full * est + w;
        e = f > e ? f : e;
    }
    e *= elem;
    if (e > ADDRESS_SPACE) c->refuse = 1;
    c->bytes[b] = e;
}

static claims claims_of(const rk_desc *d, const ropekv_args *a, int out_rope) {
    claims c;
    memset(&c, 0, sizeof c);
    const int64_t L = d->L, R = d->R, W = L + R, T = a->tokens, H = a->heads;
    const int paged = d->layout != ROPEKV_KV_FLAT;
    const int64_t B = paged ? a->kv_block_size : (a->kv_rows > 0 ? a->kv_rows : 1);
    const int64_t kv_elem = rk_desc_kv_elem(d), row_w = kv_elem == 2 ? d->row_bytes / 2 : d->row_bytes;
    const int64_t idx_pos = d->pos == ROPEKV_INDEX_INT64 ? 8 : 4, idx_slot = d->slot == ROPEKV_INDEX_INT64 ? 8 : 4;
    if (T < 0 || T > INT32_MAX || a->kv_rows < 0 || a->min_slot < 0) c.refuse = 1;
    if (c.refuse) return c;
    /* the cache, read for T tokens or written for K */
    int64_t K = T;
    if (d->op == ROPEKV_OP_WRITE) {
        if (H < 1 || H > 65536 || a->max_pos < 1 || a->kv_tokens < -1 || a->kv_tokens > INT32_MAX) c.refuse = 1;
        /* padded query heads: 0, or heads up to 65536; above heads only for the absorbed form */
        if (a->q_heads != 0 && (a->q_heads < H || a->q_heads > 65536)) c.refuse = 1;
        if (a->q_heads != 0 && a->q_heads != H && d->q != ROPEKV_Q_ABSORBED) c.refuse = 1;
        if (c.refuse) return c;
        K = a->kv_tokens == ROPEKV_KV_TOKENS_NONE ? 0 : a->kv_tokens ? a->kv_tokens : T;
    }
    if (K > 0 && paged && (B < 1 || B > INT32_MAX)) c.refuse = 1;
    if (c.refuse) return c;
    if (K > 0) {
        const int64_t w = d->layout == ROPEKV_KV_SPLIT ? L : row_w;
        claim_cache(&c, KV, a->kv_rows, B, a->kv_st, paged ? a->kv_block_st : 0, w, kv_elem);
        if (d->layout == ROPEKV_KV_PAGED && d->rec.tail_bytes && a->kv_rows > 0 && !c.refuse) {
            /* a page-tail record: the last block's tails follow its B rows (B x (kv_st + tail_bytes)) */
            const i128 e = ((i128)((a->kv_rows - 1) / B) * a->kv_block_st +
                            (i128)B * ((i128)a->kv_st + d->rec.tail_bytes)) *
                           kv_elem;
            if (e > ADDRESS_SPACE) c.refuse = 1;
            else if (e > c.bytes[KV]) c.bytes[KV] = e;
        }
        if (d->layout == ROPEKV_KV_SPLIT)
            claim_cache(&c, KV_ROPE, a->kv_rows, B, a->kv_rope_st, a->kv_rope_block_st, R, kv_elem);
        c.bytes[SLOTS] = K * idx_slot;
    }
    if (d->op == ROPEKV_OP_READ) {
        claim(&c, OUT, T, 1, a->out_st, 0, out_rope ? L : W, 2);
        if (out_rope && R > 0) claim(&c, OUT_ROPE, T, 1, a->out_rope_st, 0, R, 2); /* R = 0: no rope part */
        c.bytes[K_SCALE] = 4;
        c.rows = T;
        return c;
    }
    const int absorbed = d->q == ROPEKV_Q_ABSORBED, zc = d->q == ROPEKV_Q_ZERO_COPY;
    if (absorbed) claim(&c, Q_NOPE, T, H, a->q_nope_st, a->q_nope_sh, L, 2);
    if (d->q != ROPEKV_Q_NONE && R > 0) claim(&c, Q_PE, T, H, a->q_pe_st, a->q_pe_sh, R, 2);
    const int64_t HQ = a->q_heads ? a->q_heads : H;
    c.rows = (d->q == ROPEKV_Q_NONE ? 0 : (i128)T * HQ) + K;
    if (absorbed || zc) claim(&c, Q_OUT, T, HQ, a->q_out_st, a->q_out_sh, W, d->q_dtype == ROPEKV_Q_BF16 ? 2 : 1);
    if (K > 0) c.bytes[WRITE_MASK] = K; /* the write mask [K] bytes, when the draw gives one */
    claim(&c, K_NOPE, K, 1, a->k_nope_st, 0, L, 2);
    if (R > 0) claim(&c, K_PE, K, 1, a->k_pe_st, 0, R, 2);
    /* the fused norm: the weight [L] and rms_out's rows [K, L] bf16, with KV rows only */
    if (d->norm != ROPEKV_NORM_NONE && K > 0)
        c.bytes[NORM_W] = rk_norm_values(d) * (d->norm_weight == RK_NW_F32 ? 4 : 2);
    if (d->norm == ROPEKV_NORM_RMS_OUT) claim(&c, NORM_OUT, K, 1, a->norm_out_st, 0, L, 2);
    const int64_t P = T > K ? T : K;
    if (d->rope != RK_ROPE_NONE) c.bytes[POS] = P * idx_pos; /* rope none reads no positions */
    if (d->rope != RK_ROPE_NONE && ((d->q != ROPEKV_Q_NONE && T > 0) || K > 0)) {
        const int64_t cs_w = d->cos_sin == RK_CS_F32_CAT ? R : R / 2, cs_elem = d->cos_sin == RK_CS_BF16_SPLIT ? 2 : 4;
        claim(&c, COS, a->max_pos, 1, cs_w, 0, cs_w, cs_elem);
        if (d->cos_sin != RK_CS_F32_CAT) claim(&c, SIN, a->max_pos, 1, cs_w, 0, cs_w, cs_elem);
    }
    c.bytes[K_SCALE] = c.bytes[Q_SCALE] = 4;
    return c;
}

/* ---- guarded buffers -------------------------------------------------------------------------------- */
/* n bytes ending 16-byte aligned at most 15 bytes before a PROT_NONE page, after the PROT_NONE page before
 * them; region: the whole writable part (compared as a whole). */
typedef struct gbuf {
    uint8_t *map, *region, *p;
    size_t map_len, region_len;
} gbuf;

static int gbuf_map(gbuf *g, size_t n) {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE), rounded = (n + 15) / 16 * 16;
    g->region_len = (rounded + page - 1) / page * page;
    if (g->region_len == 0) g->region_len = page;
    g->map_len = g->region_len + 2 * page;
    g->map = mmap(NULL, g->map_len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (g->map == MAP_FAILED) return g->map = NULL, -1;
    g->region = g->map + page;
    if (mprotect(g->region, g->region_len, PROT_READ | PROT_WRITE) != 0) return -1;
    g->p = g->region + g->region_len - rounded;
    return 0;
}

static void gbuf_unmap(gbuf *g) {
    if (g->map) munmap(g->map, g->map_len);
    memset(g, 0, sizeof *g);
}


/* An index value: in [0, n) mostly, else at the edges, negative, past 2^31 or at INT64's ends. */
static int64_t index_value(rk_rng *r, int64_t n) {
    static const int64_t WILD[] = {
        -1, -2, 0, INT32_MAX, (int64_t)INT32_MAX + 1, INT64_MAX, INT64_MIN, (int64_t)1 << 40};
    const uint64_t k = rk_rng_next(r) % 8;
    if (k < 5 && n > 0) return (int64_t)(rk_rng_next(r) % (uint64_t)n);
    if (k == 5 && n > 0) return n - 1 + (int64_t)(rk_rng_next(r) % 3); /* the last, and just past */
    return WILD[rk_rng_next(r) % (sizeof WILD / sizeof WILD[0])];
}

static void store_index(void *p, int64_t i, int64_t v, int wide) {
    if (wide) ((int64_t *)p)[i] = v;
    else ((int32_t *)p)[i] = (int32_t)v; /* the int32 variants see the value truncated: still any int32 */
}

/* Contents: moderate bf16 values for the bf16 inputs (the norm's bf16 weight too), [-1, 1] for the tables and an f32
 * weight, random bytes elsewhere (an fp8_tile cache gets bytes below 0x40: finite fp8 codes and positive finite
 * scales). */
static void fill(const rk_desc *d, int b, gbuf *g, rk_rng *r, int64_t pos_n, int64_t slot_n, int64_t max_pos,
                 int64_t kv_rows) {
    const size_t n = g->region_len;
    for (size_t i = 0; i < n; i++) g->region[i] = (uint8_t)rk_rng_next(r);
    const int64_t len = (int64_t)(g->region + n - g->p);
    if (b == Q_NOPE || b == Q_PE || b == K_NOPE || b == K_PE || (b == COS && d->cos_sin == RK_CS_BF16_SPLIT) ||
        (b == SIN && d->cos_sin == RK_CS_BF16_SPLIT) || (b == NORM_W && d->norm_weight == RK_NW_BF16)) {
        const int table = b == COS || b == SIN;
        for (int64_t i = 0; i + 1 < len; i += 2) {
            float f = ((float)(rk_rng_next(r) % 2001) - 1000.0f) / (table ? 1000.0f : 200.0f);
            const uint16_t h = rk_f32_to_bf16(f);
            memcpy(g->p + i, &h, 2);
        }
    } else if (b == COS || b == SIN || b == NORM_W) {
        for (int64_t i = 0; i + 3 < len; i += 4) {
            float f = ((float)(rk_rng_next(r) % 2001) - 1000.0f) / 1000.0f;
            memcpy(g->p + i, &f, 4);
        }
    } else if (b == KV && d->kv == ROPEKV_KV_FP8_TILE) {
        for (size_t i = 0; i < n; i++) g->region[i] &= 0x3f;
    } else if (b == WRITE_MASK) { /* a third of the rows held back */
        for (size_t i = 0; i < n; i++) g->region[i] = rk_rng_next(r) % 3 ? (uint8_t)(1 + rk_rng_next(r) % 255) : 0;
    } else if (b == K_SCALE || b == Q_SCALE) {
        const float s = b == K_SCALE ? 0.37f : 0.5f;
        memcpy(g->p, &s, 4);
    } else if (b == POS) {
        const int wide = d->pos == ROPEKV_INDEX_INT64;
        for (int64_t i = 0; i < pos_n && (i + 1) * (wide ? 8 : 4) <= len; i++)
            store_index(g->p, i, index_value(r, max_pos), wide);
    } else if (b == SLOTS) {
        const int wide = d->slot == ROPEKV_INDEX_INT64;
        for (int64_t i = 0; i < slot_n && (i + 1) * (wide ? 8 : 4) <= len; i++)
            store_index(g->p, i, index_value(r, kv_rows), wide);
    }
}

/* ---- the check ------------------------------------------------------------------------------------------ */
static const void **field(ropekv_args *a, int b) {
    switch (b) {
    case Q_NOPE: return (const void **)&a->q_nope;
    case Q_PE: return (const void **)&a->q_pe;
    case Q_OUT: return (const void **)&a->q_out;
    case K_NOPE: return (const void **)&a->k_nope;
    case K_PE: return (const void **)&a->k_pe;
    case KV: return (const void **)&a->kv_cache;
    case KV_ROPE: return (const void **)&a->kv_rope_cache;
    case POS: return (const void **)&a->positions;
    case SLOTS: return (const void **)&a->slots;
    case COS: return (const void **)&a->cos_sin;
    case SIN: return (const void **)&a->sin;
    case K_SCALE: return (const void **)&a->k_scale;
    case Q_SCALE: return (const void **)&a->q_scale;
    case OUT: return (const void **)&a->out;
    case OUT_ROPE: return (const void **)&a->out_rope;
    case NORM_W: return (const void **)&a->norm_weight;
    case NORM_OUT: return (const void **)&a->norm_out;
    default: return (const void **)&a->write_mask;
    }
}

/* A refusal names a field (or the args themselves). */
static int names_a_field(const char *msg) {
    static const char *const MORE[] = {"tokens",        "heads",   "max_pos", "kv_rows", "kv_tokens", "min_slot",
                                       "kv_block_size", "cos/sin", "kv_st",   "args",    "q_heads"};
    for (int b = 0; b < NBUF; b++)
        if (strstr(msg, NAMES[b])) return 1;
    for (size_t i = 0; i < sizeof MORE / sizeof MORE[0]; i++)
        if (strstr(msg, MORE[i])) return 1;
    return 0;
}

static void rk_args_of(const ropekv_args *p, int64_t K, rk_args *a) {
    memset(a, 0, sizeof *a);
#define ORACLE_COPY_(type, name) memcpy(&a->name, &p->name, sizeof a->name);
    RK_ARGS_CALLER(ORACLE_COPY_)
#undef ORACLE_COPY_
    a->kv_tokens = K;
}

int rk_oracle_check(rk_oracle *o, const rk_draw *dr, char *why, size_t cap) {
    const unsigned vi = dr->variant % (unsigned)o->n;
    const rk_desc *d = &o->var[vi].d;
    ropekv_args a = dr->a;
    a.size = sizeof a; /* every field read (q_heads, write_mask: past version 0.1's) */
    const int out_rope = d->op == ROPEKV_OP_READ && dr->out_rope;
    const claims c = claims_of(d, &a, out_rope);
    int mapped = 1; /* every claim small enough to map */
    for (int b = 0; b < NBUF; b++)
        if (c.bytes[b] > RK_ORACLE_CAP) mapped = 0;
    if (c.rows > RK_ORACLE_ROWS) mapped = 0; /* small buffers (broadcast inputs, few cache rows), much work */
    /* buffers: the claims when they can be mapped, else (the args must be refused; or the launch does not
     * touch the tensor) 64-byte stand-ins */
    gbuf ker[NBUF], ref[NBUF];
    memset(ker, 0, sizeof ker);
    memset(ref, 0, sizeof ref);
    rk_rng r = {dr->seed * 0x9e3779b97f4a7c15ull + 1};
    int rc = 0, stray = 0; /* a norm tensor given to a kernel that does not take it */
    const int64_t T = a.tokens, K = d->op == ROPEKV_OP_READ ? T : a.kv_tokens == -1 ? 0 : a.kv_tokens ? a.kv_tokens : T;
    if (!mapped && !c.refuse) { /* possible, but too large to map here: the checks alone */
        for (int b = 0; b < NBUF; b++) *field(&a, b) = c.bytes[b] ? (const void *)(uintptr_t)4096 : NULL;
        ropekv_status s = ropekv_query(o->ctx, &o->var[vi].v, &a, why, cap);
        if (s != ROPEKV_OK && !names_a_field(why)) {
            snprintf(why + strlen(why), cap - strlen(why), " [query: %s names no field]", ropekv_status_name(s));
            return 1;
        }
        why[0] = '\0';
        o->queried++;
        return 0;
    }
    for (int b = 0; b < NBUF; b++) {
        const size_t n = mapped && !c.refuse && c.bytes[b] ? (size_t)c.bytes[b] : 64;
        if (b == OUT_ROPE && !out_rope) continue; /* its pointer chooses where the rope parts go */
        if (!takes(d, b)) { /* NULL, unless the draw passes a norm tensor by mistake (a read ignores a mask) */
            if (b == WRITE_MASK || !(dr->stray & (b == NORM_W ? 1u : 2u))) continue;
            stray = 1;
        } else if (!c.bytes[b] && b != K_SCALE && b != Q_SCALE && (rk_rng_next(&r) & 1)) {
            continue; /* untouched: NULL half the time */
        } else if (b == WRITE_MASK && (rk_rng_next(&r) & 1)) {
            continue; /* optional: no mask half the time */
        }
        if (gbuf_map(&ker[b], n) || gbuf_map(&ref[b], n)) {
            snprintf(why, cap, "mmap of %zu bytes failed", n);
            rc = 1;
            goto out;
        }
        const int64_t P = T > K ? T : K;
        fill(d, b, &ker[b], &r, P, K, a.max_pos, a.kv_rows);
        memcpy(ref[b].region, ker[b].region, ker[b].region_len);
        *field(&a, b) = ker[b].p;
    }
    if (!o->var[vi].k) { /* the variant's first launch */
        ropekv_status ks = ropekv_kernel_get(o->ctx, &o->var[vi].v, &o->var[vi].k);
        if (ks != ROPEKV_OK) {
            snprintf(why, cap, "%s: %s: %s", d->key, ropekv_status_name(ks), ropekv_last_error(o->ctx));
            o->var[vi].k = NULL;
            rc = 1;
            goto out;
        }
    }
    ropekv_status s = ropekv_launch(o->var[vi].k, &a, NULL);
    if (s != ROPEKV_OK) {
        const char *msg = ropekv_last_error(o->ctx);
        if (s != ROPEKV_ERR_NULL && s != ROPEKV_ERR_SHAPE && s != ROPEKV_ERR_STRIDE && s != ROPEKV_ERR_ALIGN &&
            s != ROPEKV_ERR_ARG) {
            snprintf(why, cap, "refused with %s: %s", ropekv_status_name(s), msg);
            rc = 1;
        } else if (!names_a_field(msg)) {
            snprintf(why, cap, "refused with %s, naming no field: %s", ropekv_status_name(s), msg);
            rc = 1;
        }
        for (int b = 0; b < NBUF && !rc; b++)
            if (ker[b].map && memcmp(ker[b].region, ref[b].region, ker[b].region_len) != 0) {
                snprintf(why, cap, "refused with %s but %s was written", ropekv_status_name(s), NAMES[b]);
                rc = 1;
            }
        o->refused++;
        o->refused_by[vi]++;
        o->strays += stray;
        goto out;
    }
    if (c.refuse) {
        snprintf(why, cap,
                 "launched args that claim no buffer (a negative stride, a count out of range or more "
                 "than 2^57 bytes)");
        rc = 1;
        goto out;
    }
    if (stray) {
        snprintf(why, cap, "launched with a norm tensor (norm_weight or norm_out) the kernel does not take");
        rc = 1;
        goto out;
    }
    /* the reference on the copies */
    ropekv_args ra = a;
    for (int b = 0; b < NBUF; b++) *field(&ra, b) = ref[b].p;
    rk_args ref_args;
    rk_args_of(&ra, d->op == ROPEKV_OP_READ ? 0 : K, &ref_args);
    rk_ref_run(d, &ref_args);
    for (int b = 0; b < NBUF && !rc; b++) {
        if (!ker[b].map) continue;
        for (size_t i = 0; i < ker[b].region_len; i++)
            if (ker[b].region[i] != ref[b].region[i]) {
                snprintf(why, cap, "%s differs from the reference at byte %lld of %lld (0x%02x, the reference 0x%02x)",
                         NAMES[b], (long long)(ker[b].region + i - ker[b].p), (long long)c.bytes[b], ker[b].region[i],
                         ref[b].region[i]);
                rc = 1;
                break;
            }
    }
    o->launched++;
    o->launched_by[vi]++;
out:
    for (int b = 0; b < NBUF; b++) {
        gbuf_unmap(&ker[b]);
        gbuf_unmap(&ref[b]);
    }
    return rc;
}
