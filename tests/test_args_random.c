/* Launch arguments drawn at random, near-overflow values among them (tests/support/args_oracle.h): each draw
 * is refused with a named error and writes nothing, or launches and equals the CPU reference, with guard pages
 * around every buffer. Fixed seeds: the same draws every run. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

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

/* A launch as an engine lays it out (small, padded strides, either nesting order of the query), then up to
 * three fields replaced by a value of WILD or moved by a few elements. */
static rk_draw draw(rk_rng *r) {
    rk_draw d = {.variant = (unsigned)below(r, RK_ORACLE_VARIANTS),
                 .out_rope = (int)below(r, 2),
                 .seed = rk_rng_next(r)};
    d.stray = below(r, 8) == 0 ? 1 + (unsigned)below(r, 3) : 0; /* a norm tensor passed by mistake, now and then */
    const rk_desc *v = &oracle.var[d.variant].d;
    const int64_t L = v->L, R = v->R, W = L + R, T = below(r, 7), H = 1 + below(r, 4), pad = 8 * below(r, 3);
    const int64_t row_w = v->kv == ROPEKV_KV_BF16 ? v->row_bytes / 2 : v->row_bytes;
    const int64_t B = 1 + below(r, 4), row_pad = v->kv == ROPEKV_KV_FP8_TILE ? 2 * pad : pad;
    ropekv_args *a = &d.a;
    a->tokens = T;
    a->heads = H;
    a->q_nope_sh = L + pad;
    a->q_pe_sh = R + pad;
    a->q_out_sh = W + pad;
    a->q_nope_st = H * a->q_nope_sh;
    a->q_pe_st = H * a->q_pe_sh;
    a->q_out_st = H * a->q_out_sh;
    if (below(r, 4) == 0 && T > 0) { /* head-major */
        a->q_out_st = a->q_out_sh;
        a->q_out_sh = T * a->q_out_st;
    }
    a->k_nope_st = L + pad;
    a->k_pe_st = R + pad;
    a->kv_tokens = below(r, 3) == 0 ? below(r, 9) - 1 : 0;
    a->min_slot = below(r, 3) == 0 ? below(r, 3) : 0;
    a->max_pos = 1 + below(r, 16);
    a->kv_rows = below(r, 12);
    a->kv_block_size = B;
    a->kv_st = (v->layout == ROPEKV_KV_SPLIT ? L : row_w) + row_pad;
    a->kv_block_st = B * a->kv_st + 16 * below(r, 2);
    a->kv_rope_st = R + pad;
    a->kv_rope_block_st = B * a->kv_rope_st + 16 * below(r, 2);
    a->out_st = (d.out_rope ? L : W) + pad;
    a->out_rope_st = R + pad;
    a->norm_out_st = L + pad;
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
    enum { DRAWS = 3000 };
    rk_rng r = {0x5eed5eedull};
    char why[2048];
    for (int i = 0; i < DRAWS; i++) {
        const rk_draw d = draw(&r);
        if (rk_oracle_check(&oracle, &d, why, sizeof why) != 0)
            fail_msg("draw %d (variant %u, tokens %lld, heads %lld, kv_rows %lld): %s", i, d.variant,
                     (long long)d.a.tokens, (long long)d.a.heads, (long long)d.a.kv_rows, why);
    }
    print_message("%ld launched, %ld refused, %ld too large to map (checked with ropekv_query)\n", oracle.launched,
                  oracle.refused, oracle.queried);
    /* the draws reach every outcome, every variant launches and is refused, and norm tensors passed by mistake
     * are refused */
    assert_true(oracle.launched > DRAWS / 5 && oracle.refused > DRAWS / 5 && oracle.queried > 0);
    for (int v = 0; v < RK_ORACLE_VARIANTS; v++) {
        print_message("variant %d (%s): %ld launched, %ld refused\n", v, oracle.var[v].d.key, oracle.launched_by[v],
                      oracle.refused_by[v]);
        assert_true(oracle.launched_by[v] > 0 && oracle.refused_by[v] > 0);
    }
    print_message("%ld refused for a norm tensor given to a kernel without it\n", oracle.strays);
    assert_true(oracle.strays > 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_args),
    };
    return cmocka_run_group_tests_name("args_random", tests, setup, teardown);
}
