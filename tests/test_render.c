/* Rendering: placeholders, determinism, the generated header, kernel names. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "rk.h"

static int render(const char *tpl, const rk_binding *b, int n, rk_buf *out, rk_err *err) {
    return rk_render(tpl, strlen(tpl), b, n, out, err);
}

static void test_render_binds_values(void **state) {
    (void)state;
    const rk_binding b[] = {{"a", "1"}, {"name_2", "xyz"}};
    rk_buf out = {0};
    rk_err err = {0};
    assert_int_equal(render("int a = ${a}; // ${name_2} $ {a} $x ${a}", b, 2, &out, &err), RK_OK);
    assert_string_equal(out.p, "int a = 1; // xyz $ {a} $x 1");
    rk_buf_free(&out);
}

static void test_render_unknown_placeholder(void **state) {
    (void)state;
    const rk_binding b[] = {{"a", "1"}};
    rk_buf out = {0};
    rk_err err = {0};
    assert_int_equal(render("${a}\nline two ${b}\n", b, 1, &out, &err), RK_ERENDER);
    assert_non_null(strstr(err.msg, "template line 2: unknown placeholder '${b}'"));
    rk_buf_free(&out);
}

static void test_render_unused_binding(void **state) {
    (void)state;
    const rk_binding b[] = {{"a", "1"}, {"extra", "2"}};
    rk_buf out = {0};
    rk_err err = {0};
    assert_int_equal(render("${a}", b, 2, &out, &err), RK_ERENDER);
    assert_non_null(strstr(err.msg, "binding 'extra' is never used"));
    rk_buf_free(&out);
}

static void test_render_unbalanced(void **state) {
    (void)state;
    const rk_binding b[] = {{"a", "1"}};
    const char *bad[] = {"x ${a", "${}", "${a b}", "${A}", "ok ${a}\n${"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rk_buf out = {0};
        rk_err err = {0};
        assert_int_equal(render(bad[i], b, 1, &out, &err), RK_ERENDER);
        assert_non_null(strstr(err.msg, "without a closing '}'"));
        rk_buf_free(&out);
    }
}

/* ---- over the built-in specs ------------------------------------------------------------------- */
typedef struct fixture {
    rk_catalog cat;
    rk_variant v[RK_MAX_SPECS * 64];
    int n;
} fixture;

static int setup(void **state) {
    fixture *f = calloc(1, sizeof *f);
    rk_err err = {0};
    if (!f || rk_catalog_load_embedded(&f->cat, &err) != RK_OK) {
        fprintf(stderr, "catalog: %s\n", err.msg);
        free(f);
        return -1;
    }
    for (int s = 0; s < f->cat.n_specs; s++) {
        int k = rk_variants(&f->cat.specs[s], &f->cat.archs, f->v + f->n, RK_MAX_SPECS * 64 - f->n, &err);
        if (k < 0) {
            free(f);
            return -1;
        }
        f->n += k;
    }
    *state = f;
    return 0;
}

static int teardown(void **state) {
    free(*state);
    return 0;
}

static void test_emit_is_deterministic(void **state) {
    fixture *f = *state;
    assert_true(f->n > 0);
    for (int i = 0; i < f->n; i++) {
        rk_buf a = {0}, b = {0};
        rk_err err = {0};
        assert_int_equal(rk_emit(&f->v[i], &a, &err), RK_OK);
        assert_int_equal(rk_emit(&f->v[i], &b, &err), RK_OK);
        assert_int_equal(a.len, b.len);
        assert_memory_equal(a.p, b.p, a.len);
        assert_null(strstr(a.p, "${"));
        rk_buf_free(&a);
        rk_buf_free(&b);
    }
}

static char *read_all(const char *path) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    static char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, fp);
    buf[n] = '\0';
    fclose(fp);
    return buf;
}

static void test_golden_header(void **state) {
    fixture *f = *state;
    const char *key = "deepseek_v3/sm_90/fp8_e4m3/absorbed/pos=int64/slot=int64";
    const rk_variant *v = NULL;
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->v[i].key, key)) v = &f->v[i];
    assert_non_null(v);
    rk_buf src = {0};
    rk_err err = {0};
    assert_int_equal(rk_emit(v, &src, &err), RK_OK);
    const char *golden = read_all(RK_SOURCE_DIR "/tests/golden/header_deepseek_v3_sm_90_fp8.txt");
    assert_non_null(golden);
    size_t n = strlen(golden);
    assert_true(src.len > n);
    if (memcmp(src.p, golden, n) != 0) fprintf(stderr, "emitted header:\n%.*s\n", (int)n, src.p);
    assert_memory_equal(src.p, golden, n);
    rk_buf_free(&src);
}

static void test_names_parse_back(void **state) {
    fixture *f = *state;
    for (int i = 0; i < f->n; i++) {
        rk_name_parts p, q;
        rk_err err = {0};
        assert_int_equal(rk_name_parse(f->v[i].name, &p, &err), RK_OK);
        rk_variant_parts(&f->v[i], &q);
        assert_memory_equal(&p, &q, sizeof p);
        for (int j = 0; j < i; j++) assert_string_not_equal(f->v[i].key, f->v[j].key);
    }
}

static void test_bad_names_are_refused(void **state) {
    (void)state;
    const char *good = "rk_L512_R64_gptj_f32cat_p64_s64_fp8ocp_mulrecip_sat448_rr0_absorbed_skipkv_san0_sm_90";
    rk_name_parts p;
    rk_err err = {0};
    assert_int_equal(rk_name_parse(good, &p, &err), RK_OK);
    assert_int_equal(p.L, 512);
    assert_string_equal(p.target, "sm_90");
    const char *bad[] = {
        "", "rk_", "xx_L512", "rk_L512_R64",
        "rk_L512_R64_gptx_f32cat_p64_s64_fp8ocp_mulrecip_sat448_rr0_absorbed_skipkv_san0_sm_90",
        "rk_L0512_R64_gptj_f32cat_p64_s64_fp8ocp_mulrecip_sat448_rr0_absorbed_skipkv_san0_sm_90",
        "rk_L512_R64_gptj_f32cat_p16_s64_fp8ocp_mulrecip_sat448_rr0_absorbed_skipkv_san0_sm_90",
        "rk_L512_R64_gptj_f32cat_p64_s64_fp8ocp_mulrecip_sat999_rr0_absorbed_skipkv_san0_sm_90",
        "rk_L512_R64_gptj_f32cat_p64_s64_fp8ocp_mulrecip_sat448_rr2_absorbed_skipkv_san0_sm_90",
        "rk_L512_R64_gptj_f32cat_p64_s64_fp8ocp_mulrecip_sat448_rr0_absorbed_skipkv_san0_",
        "rk_L512_R64_gptj_f32cat_p64_s64_fp8ocp_mulrecip_sat448_rr0_absorbed_skipkv_san0_SM90",
        "rk_L512_R64_gptj_f32cat_p64_s64_fp8ocp_mulrecip_sat448_rr0_absorbed_skipkv_san0_sm-90",
        "rk_L-8_R64_gptj_f32cat_p64_s64_fp8ocp_mulrecip_sat448_rr0_absorbed_skipkv_san0_sm_90",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&err, 0, sizeof err);
        assert_int_equal(rk_name_parse(bad[i], &p, &err), RK_ERENDER);
        assert_non_null(strstr(err.msg, "kernel name"));
    }
}

int main(void) {
    const struct CMUnitTest plain[] = {
        cmocka_unit_test(test_render_binds_values),
        cmocka_unit_test(test_render_unknown_placeholder),
        cmocka_unit_test(test_render_unused_binding),
        cmocka_unit_test(test_render_unbalanced),
        cmocka_unit_test(test_bad_names_are_refused),
    };
    const struct CMUnitTest specs[] = {
        cmocka_unit_test(test_emit_is_deterministic),
        cmocka_unit_test(test_golden_header),
        cmocka_unit_test(test_names_parse_back),
    };
    int failed = cmocka_run_group_tests_name("render", plain, NULL, NULL);
    failed += cmocka_run_group_tests_name("render_specs", specs, setup, teardown);
    return failed;
}
