/* Launch arguments drawn at random, near-overflow values among them (tests/support/args_oracle.h): each draw
 * is refused with a named error and writes nothing, or launches and equals the CPU reference, with guard pages
 * around every buffer. Fixed seeds: the same draws every run.
 *   usage: test_args_random               the test (CTest runs it so)
 *          test_args_random --seeds DIR   writes fuzz_args's seed corpus into DIR (below, "the seed corpus") */
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "args_oracle.h"
#include "testutil.h"

static char dir[] = "/tmp/ropekv-test-args-XXXXXX";
static rk_oracle oracle;

static int setup(void **state) {
    (void)state;
    char why[2048];
    if (rk_test_setup(dir, NULL) != 0) return -1;
    if (rk_oracle_open(&oracle, why, sizeof why) != 0) {
        fprintf(stderr, "%s\n", why);
        return -1;
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    rk_oracle_close(&oracle);
    rk_test_remove_tree(dir);
    return 0;
}


static int64_t below(rk_rng *r, int64_t n) { return (int64_t)(rk_rng_next(r) % (uint64_t)n); }

/* Values at the edges of every range the checks guard: zero, negatives, 2^31, the address space, INT64. */
static const int64_t WILD[] = {0,
                               1,
                               -1,
                               -8,
                               8,
                               4096,
                               INT32_MAX,
                               (int64_t)INT32_MAX + 1,
                               (int64_t)1 << 32,
                               (int64_t)1 << 40,
                               (int64_t)1 << 54,
                               (int64_t)1 << 56,
                               (int64_t)1 << 57,
                               ((int64_t)1 << 57) + 8,
                               (int64_t)1 << 61,
                               ((int64_t)1 << 62) - 8,
                               (int64_t)1 << 62,
                               INT64_MAX - 7,
                               INT64_MAX,
                               INT64_MIN,
                               INT64_MIN + 8,
                               -((int64_t)1 << 40)};

/* A launch as an engine lays it out: T tokens of H heads (token-major), every row padded by pad elements, 8 cache
 * rows in blocks of B, 16 elements between blocks, 16 positions, the read-back op's output split when out_rope. */
static void lay_out(ropekv_args *a, const rk_desc *v, int64_t T, int64_t H, int64_t pad, int64_t B, int out_rope) {
    const int64_t L = v->L, R = v->R, W = L + R;
    /* the cache's elements (bytes but for a bf16 kv dtype's row); a row of bytes (fp8_tile, a record) takes strides of
     * a multiple of 16; row_bytes is the latent part's in the split layout */
    const int64_t elem = rk_desc_kv_elem(v), row_w = v->row_bytes / elem;
    const int64_t row_pad = v->record || v->kv == ROPEKV_KV_FP8_TILE ? 2 * pad : pad;
    a->tokens = T;
    a->heads = H;
    a->q_nope_sh = L + pad;
    a->q_pe_sh = R + pad;
    a->q_out_sh = W + pad;
    a->q_nope_st = H * a->q_nope_sh;
    a->q_pe_st = H * a->q_pe_sh;
    a->q_out_st = H * a->q_out_sh;
    a->k_nope_st = L + pad;
    a->k_pe_st = R + pad;
    a->kv_tokens = 0;
    a->min_slot = 0;
    a->max_pos = 16;
    a->kv_rows = 8;
    a->kv_block_size = B;
    a->kv_st = row_w + row_pad;
    a->kv_block_st = B * (a->kv_st + v->rec.tail_bytes) + 16; /* a page-tail record's tails after a block's rows */
    a->kv_rope_st = (v->rec.row_bytes - v->rec.split_at) / elem + row_pad;
    a->kv_rope_block_st = B * a->kv_rope_st + 16;
    a->out_st = (out_rope ? L : W) + pad;
    a->out_rope_st = R + pad;
    a->norm_out_st = L + pad;
}

/* A launch as an engine lays it out (small, padded strides, either nesting order of the query), then up to
 * three fields replaced by a value of WILD or moved by a few elements. */
static rk_draw draw(rk_rng *r) {
    rk_draw d = {.variant = (unsigned)below(r, oracle.n), .out_rope = (int)below(r, 2), .seed = rk_rng_next(r)};
    d.stray = below(r, 8) == 0 ? 1 + (unsigned)below(r, 3) : 0; /* a norm tensor passed by mistake, now and then */
    const rk_desc *v = &oracle.var[d.variant].d;
    const int64_t T = below(r, 7), H = 1 + below(r, 4), pad = 8 * below(r, 3), B = 1 + below(r, 4);
    ropekv_args *a = &d.a;
    lay_out(a, v, T, H, pad, B, d.out_rope);
    if (below(r, 4) == 0 && T > 0) { /* head-major */
        a->q_out_st = a->q_out_sh;
        a->q_out_sh = T * a->q_out_st;
    }
    a->kv_tokens = below(r, 3) == 0 ? below(r, 9) - 1 : 0;
    a->min_slot = below(r, 3) == 0 ? below(r, 3) : 0;
    a->max_pos = 1 + below(r, 16);
    a->kv_rows = below(r, 12);
    a->kv_block_st = B * (a->kv_st + v->rec.tail_bytes) + 16 * below(r, 2);
    a->kv_rope_block_st = B * a->kv_rope_st + 16 * below(r, 2);
    if (below(r, 4) == 0) { /* padded query heads, token-major rows of q_heads */
        a->q_heads = H + below(r, 3);
        if (a->q_out_sh < a->q_out_st || T == 0) a->q_out_st = a->q_heads * a->q_out_sh;
    }
    for (int64_t n = below(r, 4); n > 0; n--) {
        int64_t *f = (int64_t *)((char *)a + rk_oracle_fields[below(r, RK_ORACLE_NFIELDS)]);
        int64_t nudged;
        if (below(r, 4) != 0) *f = WILD[below(r, sizeof WILD / sizeof WILD[0])];
        else if (!__builtin_add_overflow(*f, 8 * (below(r, 5) - 2), &nudged)) *f = nudged; /* a wild value stays */
    }
    return d;
}

static void test_random_args(void **state) {
    (void)state;
    enum { DRAWS = 4500 }; /* about 65 draws a variant of the oracle's 69 */
    rk_rng r = {0x5eed5eedull};
    char why[2048];
    for (int i = 0; i < DRAWS; i++) {
        const rk_draw d = draw(&r);
        if (rk_oracle_check(&oracle, &d, why, sizeof why) != 0)
            fail_msg("draw %d (variant %u %s, tokens %lld, heads %lld, q_heads %lld, kv_tokens %lld, kv_rows %lld): %s",
                     i, d.variant, oracle.var[d.variant % (unsigned)oracle.n].d.key, (long long)d.a.tokens,
                     (long long)d.a.heads, (long long)d.a.q_heads, (long long)d.a.kv_tokens, (long long)d.a.kv_rows,
                     why);
    }
    print_message("%ld launched, %ld refused, %ld too large to map (checked with ropekv_query)\n", oracle.launched,
                  oracle.refused, oracle.queried);
    /* the draws reach every outcome, every variant launches and is refused, and norm tensors passed by mistake
     * are refused */
    assert_true(oracle.launched > DRAWS / 5 && oracle.refused > DRAWS / 5 && oracle.queried > 0);
    for (int v = 0; v < oracle.n; v++) {
        print_message("variant %d (%s): %ld launched, %ld refused\n", v, oracle.var[v].d.key, oracle.launched_by[v],
                      oracle.refused_by[v]);
        assert_true(oracle.launched_by[v] > 0 && oracle.refused_by[v] > 0);
    }
    print_message("%ld refused for a norm tensor given to a kernel without it\n", oracle.strays);
    assert_true(oracle.strays > 0);
}

/* ---- the seed corpus of fuzz_args ----------------------------------------------------------------------------
 * `test_args_random --seeds DIR` writes tests/fuzz/corpus/args (tests/fuzz/CAMPAIGN.md) into DIR, which must hold no
 * file: v<i>_valid, a launch of variant i as lay_out has it (4 tokens, 2 heads, no padding, blocks of 2), for every
 * variant, and the near-overflow seeds of EDGES, each on the first variant that has what it needs. A draw names its
 * variant by its index in the oracle's set, so the seeds are made again when the covering set changes. Every seed is
 * checked by the oracle: the valid ones must launch, the others must be refused (or, too large to map, pass
 * ropekv_query alone). */

/* A near-overflow seed: the base draw of a variant that fits, with one thing changed. */
typedef struct edge {
    const char *name;
    int launches; /* 1: a valid launch; 0: refused, or checked with ropekv_query */
} edge;
static const edge EDGES[] = {
    {"table_2p64_bytes", 0},         /* an f32 cos/sin table of 2^64 bytes */
    {"bf16_cache_2p30_elements", 0}, /* a bf16 cache past 2^31 bytes whose element offsets stay below 2^31 */
    {"cache_past_2p57", 0},          /* a cache one row past 2^57 bytes */
    {"kv_st_int64max", 0},           /* kv_st INT64_MAX - 7 */
    {"q_out_st_2p62", 0},            /* q_out_st 2^62 */
    {"padding", 1},                  /* fewer KV rows than query rows, a reserved slot below min_slot */
    {"no_kv", 1},                    /* the query alone (kv_tokens -1) */
    {"stray_norm_weight", 0},        /* norm_weight given to a kernel without the norm */
    {"block_size_2p31", 0},          /* kv_block_size 2^31 */
    {"block_st_int64min", 0},        /* kv_block_st INT64_MIN */
    {"rope_st_negative", 0},         /* a negative kv_rope_st */
    {"tokens_int32max", 0},          /* INT32_MAX tokens read back */
    {"valid_out_rope", 1},           /* the read-back op's rope parts to out_rope */
    {"out_st_huge", 0},              /* out_st 2^61 */
    {"norm_out_st_2p62", 0},         /* rms_out's norm_out_st 2^62 */
    {"norm_out_st_negative", 0},     /* rms_out's norm_out_st -L */
    {"norm_out_st_small", 0},        /* rms_out's norm_out_st L - 8: its rows overlap */
    {"stray_norm_out", 0},           /* norm_out given to an rms kernel */
};
#define N_EDGES (int)(sizeof EDGES / sizeof EDGES[0])

/* EDGES[k] on variant v's base draw d: 1 with d changed, or 0 when v lacks what the case needs. */
static int edge_apply(int k, const rk_desc *v, rk_draw *d) {
    ropekv_args *a = &d->a;
    const int write = v->op == ROPEKV_OP_WRITE, flat = v->layout == ROPEKV_KV_FLAT;
    const int64_t elem = v->kv == ROPEKV_KV_BF16 ? 2 : 1;
    switch (k) {
    case 0:
        if (!write || v->rope == RK_ROPE_NONE || v->cos_sin != RK_CS_F32_CAT) return 0;
        a->max_pos = ((int64_t)1 << 62) / v->R; /* rows of R floats */
        return 1;
    case 1:
        if (!write || !flat || v->kv != ROPEKV_KV_BF16) return 0;
        a->kv_rows = INT32_MAX / a->kv_st - 1;
        return 1;
    case 2:
        if (!write || !flat) return 0;
        a->kv_rows = ((int64_t)1 << 57) / (a->kv_st * elem) + 1;
        return 1;
    case 3:
        if (!write) return 0;
        a->kv_st = INT64_MAX - 7;
        return 1;
    case 4:
        if (!write || (v->q != ROPEKV_Q_ABSORBED && v->q != ROPEKV_Q_ZERO_COPY)) return 0;
        a->q_out_st = (int64_t)1 << 62;
        return 1;
    case 5:
        if (!write) return 0;
        a->kv_tokens = 2;
        a->min_slot = 1;
        return 1;
    case 6:
        if (!write || v->q == ROPEKV_Q_NONE) return 0;
        a->kv_tokens = ROPEKV_KV_TOKENS_NONE;
        return 1;
    case 7:
        if (!write || v->norm != ROPEKV_NORM_NONE) return 0;
        d->stray = 1;
        return 1;
    case 8:
    case 9:
        if (v->layout != ROPEKV_KV_PAGED) return 0;
        if (k == 8) a->kv_block_size = (int64_t)1 << 31;
        else a->kv_block_st = INT64_MIN;
        return 1;
    case 10:
        if (v->layout != ROPEKV_KV_SPLIT) return 0;
        a->kv_rope_st = -8;
        return 1;
    case 11:
    case 12:
    case 13:
        if (v->op != ROPEKV_OP_READ) return 0;
        if (k == 11) a->tokens = INT32_MAX;
        if (k == 12) d->out_rope = 1, a->out_st = v->L;
        if (k == 13) a->out_st = (int64_t)1 << 61;
        return 1;
    case 14:
    case 15:
    case 16:
        if (v->norm != ROPEKV_NORM_RMS_OUT) return 0;
        a->norm_out_st = k == 14 ? (int64_t)1 << 62 : k == 15 ? -(int64_t)v->L : v->L - 8;
        return 1;
    case 17:
        if (v->norm != ROPEKV_NORM_RMS) return 0;
        d->stray = 2;
        return 1;
    }
    return 0;
}

static rk_draw base_draw(int i) {
    rk_draw d = {.variant = (unsigned)i, .seed = (uint64_t)i + 1};
    lay_out(&d.a, &oracle.var[i].d, 4, 2, 0, 2, 0);
    return d;
}

/* Checks d with the oracle and writes it to out/name. 0, or 1 with a message. */
static int write_seed(const char *out, const char *name, const rk_draw *d, int launches) {
    char why[2048], path[4096];
    const long launched = oracle.launched, refused = oracle.refused;
    if (rk_oracle_check(&oracle, d, why, sizeof why) != 0) {
        fprintf(stderr, "%s (variant %u): %s\n", name, d->variant, why);
        return 1;
    }
    const char *outcome = oracle.launched > launched ? "launches" : oracle.refused > refused ? "refused" : "queried";
    if ((oracle.launched > launched) != launches) {
        fprintf(stderr, "%s (variant %u, %s): %s, but should %s\n", name, d->variant, oracle.var[d->variant].d.key,
                outcome, launches ? "launch" : "not");
        return 1;
    }
    uint8_t bytes[RK_ORACLE_DRAW_BYTES];
    rk_draw_to_bytes(d, bytes);
    snprintf(path, sizeof path, "%s/%s", out, name);
    FILE *f = fopen(path, "wbx");
    if (!f || fwrite(bytes, 1, sizeof bytes, f) != sizeof bytes || fclose(f) != 0) {
        fprintf(stderr, "%s: cannot write\n", path);
        return 1;
    }
    printf("%-26s variant %2u  %-8s  %s\n", name, d->variant, outcome, oracle.var[d->variant].d.key);
    return 0;
}

static int write_seeds(const char *out) {
    char why[2048], name[64];
    if (mkdir(out, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "%s: %s\n", out, strerror(errno));
        return 1;
    }
    DIR *dd = opendir(out);
    for (struct dirent *e; dd && (e = readdir(dd));)
        if (e->d_name[0] != '.') {
            fprintf(stderr, "%s holds %s: the seeds go into a directory without files\n", out, e->d_name);
            closedir(dd);
            return 1;
        }
    if (dd) closedir(dd);
    if (rk_oracle_open(&oracle, why, sizeof why) != 0) {
        fprintf(stderr, "%s\n", why);
        return 1;
    }
    int rc = 0;
    for (int i = 0; i < oracle.n && !rc; i++) {
        const rk_draw d = base_draw(i);
        snprintf(name, sizeof name, "v%d_valid", i);
        rc = write_seed(out, name, &d, 1);
    }
    for (int k = 0; k < N_EDGES && !rc; k++) {
        int i = 0;
        rk_draw d;
        for (; i < oracle.n; i++) {
            d = base_draw(i);
            if (edge_apply(k, &oracle.var[i].d, &d)) break;
        }
        if (i == oracle.n) {
            fprintf(stderr, "%s: no variant has what it needs\n", EDGES[k].name);
            rc = 1;
        } else {
            rc = write_seed(out, EDGES[k].name, &d, EDGES[k].launches);
        }
    }
    if (!rc) printf("%d seeds in %s\n", oracle.n + N_EDGES, out);
    rk_oracle_close(&oracle);
    return rc;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--seeds") == 0) return write_seeds(argv[2]);
    if (argc > 1) {
        fprintf(stderr, "usage: test_args_random [--seeds DIR]\n");
        return 2;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_args),
    };
    return cmocka_run_group_tests_name("args_random", tests, setup, teardown);
}
