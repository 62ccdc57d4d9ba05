/* Host backend: every built-in variant equals the reference bit for bit over the standard shapes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "build.h"
#include "compilers.h"
#include "cover.h"
#include "host_compile.h"
#include "rk.h"
#include "check.h"
#include "pool.h"
#include "testutil.h"

static char dir[] = "/tmp/ropekv-test-host-XXXXXX";

static int make_dir(void **state) {
    (void)state;
    return mkdtemp(dir) ? 0 : -1;
}

static int remove_dir(void **state) {
    (void)state;
    return rmdir(dir);
}

/* Replaces the first occurrence of from by to in src (in place, src has room). */
static void replace(rk_buf *src, const char *from, const char *to) {
    char *at = strstr(src->p, from);
    assert_non_null(at);
    size_t nf = strlen(from), nt = strlen(to), tail = strlen(at + nf);
    assert_true(nt <= nf);
    memmove(at + nt, at + nf, tail + 1);
    memcpy(at, to, nt);
    src->len = strlen(src->p);
}

/* The argument block is one field list (templates/args.h) for the launcher (C) and the kernel (C++); its
 * layout checks hold it to the ABI on both sides. A kernel source whose list disagrees (one field made
 * 4 bytes) fails to compile on the kernel side, and the same header fails as C. */
static void test_args_layout_checked_on_both_sides(void **state) {
    (void)state;
    static rk_catalog cat;
    rk_err err = {0};
    assert_int_equal(rk_catalog_load_embedded(&cat, &err), ROPEKV_OK);
    rk_desc d;
    assert_int_equal(rk_desc_make(rk_catalog_find(&cat, "deepseek_v3"), rk_arch_find(&cat.archs, "host"),
                                  &(rk_choice){ROPEKV_KV_BF16, ROPEKV_Q_ABSORBED, ROPEKV_INDEX_INT64,
                                               ROPEKV_INDEX_INT64, ROPEKV_Q_BF16, ROPEKV_KV_FLAT, ROPEKV_OP_WRITE,
                                               ROPEKV_NORM_NONE, 0},
                                  &d, &err),
                     ROPEKV_OK);
    rk_buf src = {0};
    assert_int_equal(rk_emit(&d, &src, &err), ROPEKV_OK);
    static const char field[] = "F(rk_i64, kv_rows)", narrow[] = "F(int, kv_rows)";
    rk_host_kernel k;
    char log[8192];
    assert_int_equal(rk_host_build(src.p, src.len, d.name, dir, &k, NULL, log, sizeof log), ROPEKV_OK);
    rk_host_unload(&k);
    char so[4200];
    snprintf(so, sizeof so, "%s/%s.so", dir, d.name);
    assert_int_equal(unlink(so), 0);
    replace(&src, field, narrow);
    assert_int_equal(rk_host_build(src.p, src.len, d.name, dir, &k, NULL, log, sizeof log), ROPEKV_ERR_COMPILE);
    if (!strstr(log, "rk_args layout: kv_rows")) fail_msg("compiler log without the layout check:\n%s", log);

    /* the C side: the same header, with and without the disagreeing field */
    size_t n;
    const char *hdr = rk_embedded("args.h", &n);
    assert_non_null(hdr);
    char tmp[4096];
    assert_int_equal(rk_mktmpdir(tmp, sizeof tmp, "ropekv-args"), ROPEKV_OK);
    char path[4200];
    snprintf(path, sizeof path, "%s/args.c", tmp);
    const char *cc = getenv("CC") && *getenv("CC") ? getenv("CC") : "cc";
    for (int broken = 0; broken < 2; broken++) {
        rk_buf c = {0};
        rk_buf_printf(&c, "#include <stdint.h>\ntypedef int64_t rk_i64;\n");
        rk_buf_put(&c, hdr, n);
        if (broken) replace(&c, field, narrow);
        assert_int_equal(rk_write_file(path, c.p, c.len), ROPEKV_OK);
        const char *argv[] = {cc, "-std=c11", "-fsyntax-only", path, NULL};
        rk_buf out = {0};
        int status = -1;
        assert_int_equal(rk_run(argv, 60, 0, &out, &status), ROPEKV_OK);
        if (broken) {
            assert_int_not_equal(status, 0);
            assert_non_null(out.p);
            assert_non_null(strstr(out.p, "rk_args layout: kv_rows"));
        } else if (status != 0) {
            fail_msg("args.h as C: %s", out.p ? out.p : "");
        }
        rk_buf_free(&out);
        rk_buf_free(&c);
    }
    rk_rmtmpdir(tmp);
    rk_buf_free(&src);
}

/* What a variant's kernel is on the host backend: its name without the target (every code parameter)
 * and the row values the host code reads (the wave, which lays out the lanes, and the fp8 format). The
 * rest of a row (hardware conversions, streaming stores, PDL, block, chunks) is dead code on the host:
 * those are compiled and inspected per target by test_matrix and run by gpu_conformance. */
static void host_signature(const rk_desc *v, char *out, size_t cap) {
    size_t n = strlen(v->name) - strlen(v->arch->name) - 1; /* the name ends in _<target> */
    snprintf(out, cap, "%.*s_w%d_%s", (int)n, v->name, v->arch->wave, rk_fp8_name(v->fp8));
}

/* A host check of one kernel, in a worker process of the pool. */
typedef struct host_check {
    const rk_desc *v;
} host_check;
typedef struct host_result {
    int ok;
    char why[4096];
} host_result;

static int host_check_run(void *ctx, int i, void *result) {
    const host_check *c = ctx;
    host_result *r = result;
    r->ok = rk_host_check_variant(&c->v[i], dir, r->why, sizeof r->why);
    return 0;
}

static void host_check_lost(void *ctx, int i, void *result, int pid, const char *why) {
    (void)ctx, (void)i, (void)pid;
    host_result *r = result;
    r->ok = 0;
    snprintf(r->why, sizeof r->why, "%s", why);
}

/* The covering set of the built-in specs (tools/cover.h: what `ropekv-gen selftest` runs), once per distinct host
 * kernel (host_signature: variants of rows that share the wave and the fp8 format compile to the same host code),
 * checked by as many worker processes as there are CPUs. */
static void test_every_variant_matches_reference(void **state) {
    (void)state;
    static rk_catalog cat;
    static rk_desc v[8192], pick[8192];
    static char seen[8192][256];
    static host_result res[8192];
    rk_err err = {0};
    assert_int_equal(rk_catalog_load_embedded(&cat, &err), ROPEKV_OK);
    int failed = 0, distinct = 0, total = rk_cover_catalog(&cat, NULL, 0, v, 8192, &err);
    if (total < 0) fail_msg("%s", err.msg);
    for (int i = 0; i < total; i++) {
        char sig[256];
        host_signature(&v[i], sig, sizeof sig);
        int dup = 0;
        for (int k = 0; k < distinct && !dup; k++) dup = !strcmp(seen[k], sig);
        if (dup) continue;
        strcpy(seen[distinct], sig);
        pick[distinct++] = v[i];
    }
    host_check c = {pick};
    rk_pool p = {.n = distinct,
                 .result_size = sizeof res[0],
                 .jobs = 0,
                 .worker = "host check process",
                 .task = "checking this",
                 .ctx = &c,
                 .run = host_check_run,
                 .lost = host_check_lost};
    assert_int_equal(rk_pool_run(&p, res), 0);
    for (int i = 0; i < distinct; i++)
        if (!res[i].ok) {
            failed++;
            print_error("%s: %s\n", pick[i].key, res[i].why);
        }
    print_message("%d variants (the covering set), %d distinct host kernels checked, %d failed\n", total, distinct,
                  failed);
    assert_true(distinct > 0 && distinct <= total);
    assert_int_equal(failed, 0);
}

static void test_compiler_error_is_reported(void **state) {
    (void)state;
    const char src[] = "this is not C++;\n";
    rk_host_kernel k;
    char log[4096];
    assert_int_equal(rk_host_build(src, sizeof src - 1, "rk_broken", dir, &k, NULL, log, sizeof log),
                     ROPEKV_ERR_COMPILE);
    assert_non_null(strstr(log, "error"));
    assert_null(k.so);
}

static void test_missing_entry_is_reported(void **state) {
    (void)state;
    const char src[] = "extern \"C\" void other(void) {}\n";
    rk_host_kernel k;
    char log[4096];
    assert_int_equal(rk_host_build(src, sizeof src - 1, "rk_absent", dir, &k, NULL, log, sizeof log),
                     ROPEKV_ERR_COMPILE);
    assert_non_null(strstr(log, "kernel rk_absent not found"));
    char so[4200];
    snprintf(so, sizeof so, "%s/rk_absent.so", dir);
    unlink(so);
}

/* A built-in variant by key. */
static const rk_desc *variant(const char *key) {
    static rk_catalog cat;
    static int loaded;
    rk_err err = {0};
    if (!loaded) {
        assert_int_equal(rk_catalog_load_embedded(&cat, &err), ROPEKV_OK);
        loaded = 1;
    }
    const rk_desc *v = rk_test_variant(&cat, key);
    if (!v) fail_msg("no variant %s", key);
    return v;
}

/* 1 when two keys (spec/target/kv/q form or op/...) agree in the parts a level compares: 0 all four, 1 spec, target
 * and row format, 2 spec, row format and q form or op. */
static int same_kind(const char *a, const char *b, int level) {
    static const int compared[3][4] = {{1, 1, 1, 1}, {1, 1, 1, 0}, {1, 0, 1, 1}};
    for (int part = 0; part < 4; part++) {
        const size_t na = strcspn(a, "/"), nb = strcspn(b, "/");
        if (compared[level][part] && (na != nb || strncmp(a, b, na) != 0)) return 0;
        if (!a[na] || !b[nb]) return 1;
        a += na + 1, b += nb + 1;
    }
    return 1;
}

/* v's source src with from replaced by to, built and checked: 1 when the check finds a difference. */
static int mutated_kernel_caught(const rk_desc *v, rk_buf *src, const char *from, const char *to) {
    replace(src, from, to);
    rk_host_kernel k;
    char why[4096] = "";
    assert_int_equal(rk_host_build(src->p, src->len, v->name, dir, &k, NULL, why, sizeof why), ROPEKV_OK);
    rk_host_run hr = {&k, 0};
    rk_shape sh = {.tokens = 17,
                   .heads = 4,
                   .pad = 8,
                   .max_pos = 64,
                   .neg_every = 3,
                   .specials = 1,
                   .k_scale = 0.37f,
                   .q_scale = 0.37f};
    int rc = rk_check(v, &sh, 7, rk_host_run_kernel, &hr, why, sizeof why);
    rk_host_unload(&k);
    char so[4200];
    snprintf(so, sizeof so, "%s/%s.so", dir, v->name);
    unlink(so);
    if (rc) print_message("  %s: %s\n", v->key, why);
    return rc != 0;
}

/* The comparison can fail: a kernel with one deliberate change is caught. */
static void test_check_catches_a_wrong_kernel(void **state) {
    (void)state;
    static const struct {
        const char *key, *from, *to;
        int caught;
    } mutations[] = {
        /* two roundings instead of one fused multiply-add */
        {"deepseek_v3/host/fp8_e4m3/absorbed/pos=int64/slot=int64", "rk_fma(x0, c[i], -(x1 * s[i]))",
         "(x0 * c[i] - x1 * s[i])", 1},
        /* no saturation at the spec's FNUZ bound of 224 */
        {"kimi_k2/gfx942/fp8_e4m3/absorbed/pos=int32/slot=int64", "return x > sat ? sat : x < -sat ? -sat : x;",
         "return x;", 1},
        /* the fp8 query's scale ignored */
        {"deepseek_v3/host/bf16/absorbed/pos=int64/slot=int64/q_dtype=fp8_e4m3", "pack_fp8<Q_SCALE, false>(y, k, Q_SAT",
         "pack_fp8<Q_SCALE, false>(y, 1, Q_SAT", 1},
        /* the fp8 query's rope not rounded to bf16 first (kimi_k2's policy rounds it) */
        {"kimi_k2/host/fp8_e4m3/inplace/pos=int64/slot=int64/q_dtype=fp8_e4m3", "rope && Q_ROPE_BF16", "false", 1},
        /* no clamp of positions at max_pos */
        {"deepseek_v3/host/bf16/absorbed/pos=int64/slot=int64", "p < 0 ? 0 : p >= a.max_pos ? a.max_pos - 1 : p",
         "p < 0 ? 0 : p", 1},
        /* padding tokens written (to rows 0/1, so the wrong kernel stays inside the buffer) */
        {"deepseek_v3/host/bf16/none/pos=int64/slot=int32",
         "const rk_i64 slot = load_index(a.slots, t, SLOT == Index::int64);",
         "rk_i64 slot = load_index(a.slots, t, SLOT == Index::int64) & 1;", 1},
        /* skip_all: query rows of padding tokens written anyway */
        {"kimi_k2/gfx942/fp8_e4m3/absorbed/pos=int32/slot=int64",
         "return NEG == Neg::skip_all && t < (I)a.kv_tokens && load_index(a.slots, t, SLOT == Index::int64) < 0;",
         "return false;", 1},
        /* fp8_tile: no floor (FLT_MIN) under a tile's scale (an all-zero tile then divides by 0) */
        {"deepseek_v32/host/fp8_tile/none/pos=int64/slot=int64", "s = s > G.floor ? s : G.floor;", "", 1},
        /* fp8_tile: x times the reciprocal of the scale, without block_divide's correction (not correctly rounded) */
        {"deepseek_v32/host/fp8_tile/none/pos=int64/slot=int64/layout=paged",
         "y.v[i] = rk_fma(-rk_fma(d, q, -y.v[i]), k, q);", "y.v[i] = q;", 1},
        /* read-back: the tile's scale not applied */
        {"deepseek_v32/host/fp8_tile/read/slot=int64/layout=paged", "for (int i = 0; i < V; i++) y.v[i] = y.v[i] * dg;",
         "(void)dg;", 1},
        /* read-back: a padding row left as it was instead of zeros */
        {"deepseek_v3/host/bf16/read/slot=int32",
         "for (int i = 0; i < n; i++) rk_store16_out(dst + i * V, rk_v16{0, 0, 0, 0});", "", 1},
        /* a line that cannot matter for a skip_kv spec: the check must not flag it */
        {"deepseek_v3/host/bf16/absorbed/pos=int64/slot=int64",
         "return NEG == Neg::skip_all && t < (I)a.kv_tokens && load_index(a.slots, t, SLOT == Index::int64) < 0;",
         "return false;", 0},
    };
    /* a fault that must be caught is caught in the covering set (the set `selftest` and
     * test_every_variant_matches_reference run): on one of the set's variants closest to the key whose source holds
     * the faulty line */
    static rk_catalog cat;
    static rk_desc cover[8192];
    rk_err err = {0};
    assert_int_equal(rk_catalog_load_embedded(&cat, &err), ROPEKV_OK);
    const int n_cover = rk_cover_catalog(&cat, NULL, 0, cover, 8192, &err);
    assert_true(n_cover > 0);
    for (size_t m = 0; m < sizeof mutations / sizeof mutations[0]; m++) {
        const char *key = mutations[m].key;
        int tried = 0, caught = 0;
        /* closest first: the key's spec, target, row format and q form; then any q form; then any target */
        for (int level = 0; level < 3 && !caught; level++)
            for (int i = -1, here = 0; i < n_cover && here < 3 && !caught; i++) {
                /* i = -1: the variant the fault was written for, when it must not be flagged */
                const rk_desc *v = i < 0 ? (mutations[m].caught || level ? NULL : variant(key)) : &cover[i];
                if (!v || (i >= 0 && (!mutations[m].caught || !same_kind(v->key, key, level)))) continue;
                rk_buf src = {0};
                assert_int_equal(rk_emit(v, &src, &err), ROPEKV_OK);
                if (!strstr(src.p, mutations[m].from)) {
                    rk_buf_free(&src);
                    continue;
                }
                tried++, here++;
                caught = mutated_kernel_caught(v, &src, mutations[m].from, mutations[m].to);
                rk_buf_free(&src);
            }
        print_message("mutation %zu: %s in %d variant(s)\n", m, caught ? "caught" : "not caught", tried);
        assert_true(tried > 0);
        assert_int_equal(caught, mutations[m].caught);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_compiler_error_is_reported),
        cmocka_unit_test(test_missing_entry_is_reported),
        cmocka_unit_test(test_check_catches_a_wrong_kernel),
        cmocka_unit_test(test_args_layout_checked_on_both_sides),
        cmocka_unit_test(test_every_variant_matches_reference),
    };
    return cmocka_run_group_tests_name("host_backend", tests, make_dir, remove_dir);
}
