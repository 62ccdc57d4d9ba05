/* The covering set (tools/cover.h), checked against the exhaustive product by a check of its own: for every
 * built-in spec, every value of every dimension, every pair of values and every declared triple that some variant
 * of the product has is in the set; the set is deterministic, holds no two variants of the same source, stays
 * within CI's budget, and the check fails when a dimension's value is dropped from it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cover.h"
#include "rk.h"

#define CAP (RK_MAX_SPECS * 1024)

/* A variant's value along a dimension, read here from the description's fields (not through rk_cover_value):
 * the field's value, the row's index for the target; -1 where the dimension does not apply (the read-back op has
 * no query, positions or norm; q form none no query dtype; rope none no positions). */
static int value(const rk_desc *d, const rk_arch_table *archs, int dim) {
    const int read = d->op == ROPEKV_OP_READ;
    switch (dim) {
    case RK_DIM_TARGET:
        for (int i = 0; i < archs->n; i++)
            if (d->arch == &archs->a[i]) return i;
        fail_msg("%s: a row outside the table", d->key);
        return -1;
    case RK_DIM_KV: return d->record ? 2 + d->record : (int)d->kv; /* a record of the spec's: after the kv dtypes */
    case RK_DIM_Q: return read ? -1 : (int)d->q;
    case RK_DIM_Q_DTYPE: return read || d->q == ROPEKV_Q_NONE ? -1 : (int)d->q_dtype;
    case RK_DIM_POSITIONS: return read || d->rope == RK_ROPE_NONE ? -1 : (int)d->pos; /* rope none reads none */
    case RK_DIM_SLOTS: return (int)d->slot;
    case RK_DIM_LAYOUT: return (int)d->layout;
    case RK_DIM_OP: return (int)d->op;
    case RK_DIM_NORM: return read ? -1 : (int)d->norm;
    }
    return -1;
}

/* The tuples of a variant, marked in a table: each pair of dimensions (a <= b: a value alone when a == b) and each
 * declared triple with its values, where every dimension of it applies. */
#define V RK_MAX_ARCHS
#define PAIR_SLOTS ((size_t)RK_COVER_DIMS * RK_COVER_DIMS * V * V)
#define SLOTS (PAIR_SLOTS + (size_t)RK_COVER_TRIPLES * V * V * V)
static void mark(const rk_desc *d, const rk_arch_table *archs, unsigned char *table, unsigned char bit) {
    int val[RK_COVER_DIMS];
    for (int k = 0; k < RK_COVER_DIMS; k++) val[k] = value(d, archs, k);
    for (int a = 0; a < RK_COVER_DIMS; a++)
        for (int b = a; b < RK_COVER_DIMS; b++)
            if (val[a] >= 0 && val[b] >= 0) table[((size_t)(a * RK_COVER_DIMS + b) * V + val[a]) * V + val[b]] |= bit;
    for (int t = 0; t < RK_COVER_TRIPLES; t++) {
        const int *x = rk_cover_triples[t];
        if (val[x[0]] >= 0 && val[x[1]] >= 0 && val[x[2]] >= 0)
            table[PAIR_SLOTS + (((size_t)t * V + val[x[0]]) * V + val[x[1]]) * V + val[x[2]]] |= bit;
    }
}

/* How many value tuples (single values, pairs, declared triples) of the product's variants the set lacks; the
 * first few are printed. */
static int missing(const rk_desc *product, int np, const rk_desc *set, int ns, const rk_arch_table *archs) {
    unsigned char *table = calloc(SLOTS, 1);
    assert_non_null(table);
    for (int i = 0; i < np; i++) mark(&product[i], archs, table, 1);
    for (int i = 0; i < ns; i++) mark(&set[i], archs, table, 2);
    int lacking = 0;
    for (size_t i = 0; i < SLOTS; i++)
        if (table[i] == 1 && lacking++ < 4) {
            if (i < PAIR_SLOTS) {
                const size_t ab = i / (V * V);
                print_error("the set lacks %s=%d with %s=%d\n", rk_cover_dims[ab / RK_COVER_DIMS], (int)(i / V % V),
                            rk_cover_dims[ab % RK_COVER_DIMS], (int)(i % V));
            } else {
                print_error("the set lacks a value triple of declared interaction %d\n",
                            (int)((i - PAIR_SLOTS) / (V * V * V)));
            }
        }
    for (size_t i = 0; i < SLOTS; i++) assert_true(table[i] != 2); /* the set is part of the product */
    free(table);
    return lacking;
}

static int group_setup(void **state) {
    static rk_catalog cat;
    rk_err err = {0};
    if (rk_catalog_load_embedded(&cat, &err) != ROPEKV_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    *state = &cat;
    return 0;
}

/* Every spec's product is covered by its part of the set. The product's pairs are checked against distinct value
 * tuples only (many variants share one), so the check is quadratic in the set, not the product. */
static void test_covers_the_product(void **state) {
    const rk_catalog *cat = *state;
    rk_desc *set = malloc(sizeof *set * CAP), *product = malloc(sizeof *product * RK_MAX_VARIANTS_PER_SPEC),
            *mine = malloc(sizeof *mine * CAP);
    assert_true(set && product && mine);
    rk_err err = {0};
    const int n = rk_cover_catalog(cat, NULL, 0, set, CAP, &err);
    if (n < 0) fail_msg("%s", err.msg);
    int total = 0;
    for (int s = 0; s < cat->n_specs; s++) {
        const int np = rk_variants(&cat->specs[s], &cat->archs, product, RK_MAX_VARIANTS_PER_SPEC, &err);
        assert_true(np > 0);
        int ns = 0;
        for (int i = 0; i < n; i++)
            if (set[i].spec == &cat->specs[s]) mine[ns++] = set[i];
        /* a variant left out as another spec's same source counts as that one: the set of this spec is its own
         * picks, which rk_cover_catalog keeps unless an earlier spec rendered the same source */
        for (int i = 0; i < n; i++)
            if (set[i].spec != &cat->specs[s]) {
                rk_desc d;
                const rk_choice c = rk_desc_choice(&set[i]);
                if (rk_desc_listed(&cat->specs[s], set[i].arch, &c, &d, NULL) == ROPEKV_OK &&
                    strcmp(d.name, set[i].name) == 0)
                    mine[ns++] = d;
            }
        const int lack = missing(product, np, mine, ns, &cat->archs);
        print_message("%s: %d of %d variants cover it, %d tuples missing\n", cat->specs[s].name, ns, np, lack);
        assert_int_equal(lack, 0);
        total += np;
    }
    /* CI's budget: selftest, test_host and test_matrix walk this set (docs/testing.md); 700 until the GLM-5,
     * GLM-4.7-Flash, LongCat-Flash, Kimi-K3 and GLM-5.3-Flash specs */
    print_message("the covering set: %d of %d variants\n", n, total);
    assert_true(n > 0 && n <= 950 && n < total / 10);
    free(set);
    free(product);
    free(mine);
}

/* The same set, in the same order, every time; the --all set is the product (each source once). */
static void test_deterministic(void **state) {
    const rk_catalog *cat = *state;
    rk_desc *a = malloc(sizeof *a * CAP), *b = malloc(sizeof *b * CAP);
    assert_true(a && b);
    rk_err err = {0};
    const int n = rk_cover_catalog(cat, NULL, 0, a, CAP, &err), m = rk_cover_catalog(cat, NULL, 0, b, CAP, &err);
    assert_true(n > 0);
    assert_int_equal(n, m);
    for (int i = 0; i < n; i++) assert_string_equal(a[i].key, b[i].key);
    /* a filter narrows the candidates before the pick: every key passes it */
    const int f = rk_cover_catalog(cat, "deepseek_v3/sm_90/", 0, a, CAP, &err);
    assert_true(f > 0 && f < n);
    for (int i = 0; i < f; i++) assert_non_null(strstr(a[i].key, "deepseek_v3/sm_90/"));
    /* too little room is an error, not a cut */
    assert_int_equal(rk_cover_catalog(cat, NULL, 0, a, 3, &err), -1);
    assert_int_equal(err.code, ROPEKV_ERR_NOMEM);
    free(a);
    free(b);
}

/* No two variants of the set render the same source. */
static void test_sources_distinct(void **state) {
    const rk_catalog *cat = *state;
    rk_desc *a = malloc(sizeof *a * CAP);
    assert_non_null(a);
    rk_err err = {0};
    const int n = rk_cover_catalog(cat, NULL, 0, a, CAP, &err);
    assert_true(n > 0);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++) assert_string_not_equal(a[i].name, a[j].name);
    free(a);
}

/* The check has teeth: a set without one value of a dimension (each dimension in turn, its last value), or
 * without one variant, is found lacking. */
static void test_check_catches_a_dropped_value(void **state) {
    const rk_catalog *cat = *state;
    const rk_spec *s = rk_catalog_find(cat, "deepseek_v3");
    assert_non_null(s);
    rk_desc *product = malloc(sizeof *product * RK_MAX_VARIANTS_PER_SPEC), *set = malloc(sizeof *set * CAP);
    int *pick = malloc(sizeof *pick * RK_MAX_VARIANTS_PER_SPEC);
    assert_true(product && set && pick);
    rk_err err = {0};
    const int np = rk_variants(s, &cat->archs, product, RK_MAX_VARIANTS_PER_SPEC, &err);
    const int ns = rk_cover_pick(product, np, &cat->archs, pick);
    assert_true(ns > 0);
    for (int d = 0; d < RK_COVER_DIMS; d++) {
        int top = -1, m = 0;
        for (int i = 0; i < ns; i++)
            if (value(&product[pick[i]], &cat->archs, d) > top) top = value(&product[pick[i]], &cat->archs, d);
        for (int i = 0; i < ns; i++)
            if (value(&product[pick[i]], &cat->archs, d) != top) set[m++] = product[pick[i]];
        const int lack = missing(product, np, set, m, &cat->archs);
        print_message("without %s=%d: %d tuples missing\n", rk_cover_dims[d], top, lack);
        assert_true(lack > 0);
    }
    /* the greedy pick takes nothing that covers nothing new: without any one variant something is missing */
    for (int drop = 0; drop < ns; drop += ns / 7 + 1) {
        int m = 0;
        for (int i = 0; i < ns; i++)
            if (i != drop) set[m++] = product[pick[i]];
        assert_true(missing(product, np, set, m, &cat->archs) > 0);
    }
    free(product);
    free(set);
    free(pick);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_covers_the_product),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_sources_distinct),
        cmocka_unit_test(test_check_catches_a_dropped_value),
    };
    return cmocka_run_group_tests_name("cover", tests, group_setup, NULL);
}
