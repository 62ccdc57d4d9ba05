/* Rendering: placeholders, determinism, the generated header, kernel names. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "proc.h"
#include "rk.h"

static int render(const char *tpl, const rk_binding *b, int n, rk_buf *out, rk_err *err) {
    return rk_render(tpl, strlen(tpl), b, n, out, err);
}

static void test_render_binds_values(void **state) {
    (void)state;
    const rk_binding b[] = {{"a", "1"}, {"name_2", "xyz"}};
    rk_buf out = {0};
    rk_err err = {0};
    assert_int_equal(render("int a = ${a}; // ${name_2} $ {a} $x ${a}", b, 2, &out, &err), ROPEKV_OK);
    assert_string_equal(out.p, "int a = 1; // xyz $ {a} $x 1");
    rk_buf_free(&out);
}

static void test_render_unknown_placeholder(void **state) {
    (void)state;
    const rk_binding b[] = {{"a", "1"}};
    rk_buf out = {0};
    rk_err err = {0};
    assert_int_equal(render("${a}\nline two ${b}\n", b, 1, &out, &err), ROPEKV_ERR_RENDER);
    assert_non_null(strstr(err.msg, "template line 2: unknown placeholder '${b}'"));
    rk_buf_free(&out);
}

static void test_render_unused_binding(void **state) {
    (void)state;
    const rk_binding b[] = {{"a", "1"}, {"extra", "2"}};
    rk_buf out = {0};
    rk_err err = {0};
    assert_int_equal(render("${a}", b, 2, &out, &err), ROPEKV_ERR_RENDER);
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
        assert_int_equal(render(bad[i], b, 1, &out, &err), ROPEKV_ERR_RENDER);
        assert_non_null(strstr(err.msg, "without a closing '}'"));
        rk_buf_free(&out);
    }
}

/* ---- over the built-in specs ------------------------------------------------------------------- */
/* Room for every built-in variant (the exhaustive product: 23064 now) and then some. */
#define MAX_VARIANTS (RK_MAX_SPECS * 1024)
typedef struct fixture {
    rk_catalog cat;
    rk_desc v[MAX_VARIANTS];
    int n;
} fixture;

static int setup(void **state) {
    fixture *f = calloc(1, sizeof *f);
    rk_err err = {0};
    if (!f || rk_catalog_load_embedded(&f->cat, &err) != ROPEKV_OK) {
        fprintf(stderr, "catalog: %s\n", err.msg);
        free(f);
        return -1;
    }
    for (int s = 0; s < f->cat.n_specs; s++) {
        int k = rk_variants(&f->cat.specs[s], &f->cat.archs, f->v + f->n, MAX_VARIANTS - f->n, &err);
        if (k < 0) {
            fprintf(stderr, "variants of %s: %s\n", f->cat.specs[s].name, err.msg);
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
        assert_int_equal(rk_emit(&f->v[i], &a, &err), ROPEKV_OK);
        assert_int_equal(rk_emit(&f->v[i], &b, &err), ROPEKV_OK);
        assert_int_equal(a.len, b.len);
        assert_memory_equal(a.p, b.p, a.len);
        assert_null(strstr(a.p, "${"));
        rk_buf_free(&a);
        rk_buf_free(&b);
    }
}

static void test_golden_header(void **state) {
    fixture *f = *state;
    const char *key = "deepseek_v3/sm_90/fp8_e4m3/absorbed/pos=int64/slot=int64/q_dtype=fp8_e4m3";
    const rk_desc *v = NULL;
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->v[i].key, key)) v = &f->v[i];
    assert_non_null(v);
    rk_buf src = {0};
    rk_err err = {0};
    assert_int_equal(rk_emit(v, &src, &err), ROPEKV_OK);
    /* The golden text writes the version as @VERSION@ (its one source is CMakeLists.txt). */
    rk_codeobj file;
    assert_int_equal(rk_read_file(RK_SOURCE_DIR "/tests/golden/header_deepseek_v3_sm_90_fp8_fp8q.txt", &file),
                     ROPEKV_OK);
    const char *text = (const char *)file.data;
    const char *at = strstr(text, "@VERSION@");
    assert_non_null(at);
    rk_buf want = {0};
    assert_int_equal(rk_buf_printf(&want, "%.*s%s%s", (int)(at - text), text, ROPEKV_VERSION_STRING,
                                   at + strlen("@VERSION@")),
                     ROPEKV_OK);
    rk_code_free(&file);
    const char *golden = want.p;
    size_t n = want.len;
    assert_true(src.len > n);
    if (memcmp(src.p, golden, n) != 0) fprintf(stderr, "emitted header:\n%.*s\n", (int)n, src.p);
    assert_memory_equal(src.p, golden, n);
    rk_buf_free(&want);
    rk_buf_free(&src);
}

/* The emitted sources of a and b are the same below their headers (which name the spec file and key). */
static int same_code(const rk_desc *a, const rk_desc *b) {
    rk_buf x = {0}, y = {0};
    rk_err err = {0};
    assert_int_equal(rk_emit(a, &x, &err), ROPEKV_OK);
    assert_int_equal(rk_emit(b, &y, &err), ROPEKV_OK);
    const char *cx = strstr(x.p, "\n// Regenerate:"), *cy = strstr(y.p, "\n// Regenerate:");
    assert_true(cx && cy);
    cx = strchr(cx + 1, '\n');
    cy = strchr(cy + 1, '\n');
    int same = strcmp(cx, cy) == 0;
    if (!same) fprintf(stderr, "%s and %s: one name, different code\n", a->key, b->key);
    rk_buf_free(&x);
    rk_buf_free(&y);
    return same;
}

static int by_key(const void *a, const void *b) {
    return strcmp((*(const rk_desc *const *)a)->key, (*(const rk_desc *const *)b)->key);
}
static int by_name(const void *a, const void *b) {
    return strcmp((*(const rk_desc *const *)a)->name, (*(const rk_desc *const *)b)->name);
}

/* Keys of the built-in variants are unique and a name belongs to one code; a name is made of identifier characters and
 * spells what it is (the sm_90 DeepSeek-V3 fp8 kernel's name is fixed: it is the PTX entry's). The fused norm's
 * variants are among them (each norm a key and a name of its own, spelling the norm's weight dtype, eps and
 * rounding). */
static void test_names_unique(void **state) {
    fixture *f = *state;
    int norms[3] = {0, 0, 0};
    for (int i = 0; i < f->n; i++) {
        if (f->v[i].spec->norm.over == RK_NO_LATENT) norms[f->v[i].norm]++; /* a norm over the head has no rms_out */
        const int has_key = strstr(f->v[i].key, "/norm=") != NULL,
                  has_name = strstr(f->v[i].name, "_rms_w") != NULL || strstr(f->v[i].name, "_rmsout_w") != NULL;
        assert_int_equal(has_key, f->v[i].norm != ROPEKV_NORM_NONE);
        assert_int_equal(has_name, f->v[i].norm != ROPEKV_NORM_NONE);
        for (const char *c = f->v[i].name; *c; c++)
            assert_true((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_' || (*c >= 'A' && *c <= 'Z'));
        if (!strcmp(f->v[i].key, "deepseek_v3/sm_90/fp8_e4m3/absorbed/pos=int64/slot=int64"))
            assert_string_equal(
                f->v[i].name,
                "rk_L512_R64_gptj_f32cat_p64_s64_fp8ocp_mulrecip_sat448_rr0_absorbed_qbf16_none_sat0_rr0_skipkv_san0_flat_sm_90");
        if (!strcmp(f->v[i].key, "deepseek_v3/sm_90/fp8_e4m3/absorbed/pos=int64/slot=int64/q_dtype=fp8_e4m3"))
            assert_string_equal(f->v[i].name, "rk_L512_R64_gptj_f32cat_p64_s64_fp8ocp_mulrecip_sat448_rr0_absorbed_"
                                              "qfp8ocp_mulrecip_sat448_rr0_skipkv_san0_flat_sm_90");
        if (!strcmp(f->v[i].key, "deepseek_v3/sm_90/bf16/absorbed/pos=int64/slot=int64/norm=rms_out"))
            assert_string_equal(f->v[i].name, "rk_L512_R64_gptj_f32cat_p64_s64_bf16_absorbed_qbf16_none_sat0_rr0_"
                                              "skipkv_san0_flat_rmsout_wbf16_eps1em06_r2_sm_90");
        if (!strcmp(f->v[i].key, "deepseek_v32/sm_90/fp8_tile/none/pos=int64/slot=int64/layout=paged/norm=rms"))
            assert_non_null(strstr(f->v[i].name, "_paged_rms_wbf16_eps1em06_r2_sm_90"));
    }
    /* DeepSeek-V3, Kimi-K2 and DeepSeek-V3.2 describe their kv_a norm: as many rms as rms_out variants (the norm over
     * the latent) */
    assert_true(norms[ROPEKV_NORM_RMS] > 0);
    assert_int_equal(norms[ROPEKV_NORM_RMS], norms[ROPEKV_NORM_RMS_OUT]);
    /* keys unique; two specs may describe the same kernel (DeepSeek-V3.2's bf16 rows are DeepSeek-V3's; the
     * read-back op of the same rows): one name, then one code. Sorted, neighbours compared. */
    const rk_desc **by = malloc(sizeof *by * (size_t)f->n);
    assert_non_null(by);
    for (int i = 0; i < f->n; i++) by[i] = &f->v[i];
    qsort(by, (size_t)f->n, sizeof *by, by_key);
    for (int i = 1; i < f->n; i++) assert_string_not_equal(by[i - 1]->key, by[i]->key);
    qsort(by, (size_t)f->n, sizeof *by, by_name);
    for (int i = 1; i < f->n; i++)
        if (!strcmp(by[i - 1]->name, by[i]->name)) assert_true(same_code(by[i - 1], by[i]));
    free(by);
}

/* The rendered source binds enumerations by name, from the description. */
static void test_bindings_are_named(void **state) {
    fixture *f = *state;
    const rk_spec *s = rk_catalog_find(&f->cat, "deepseek_v3");
    const rk_arch *a = rk_arch_find(&f->cat.archs, "gfx942");
    assert_non_null(s);
    assert_non_null(a);
    rk_desc d;
    rk_err err = {0};
    assert_int_equal(rk_desc_make(s, a,
                                  &(rk_choice){ROPEKV_KV_FP8_E4M3, ROPEKV_Q_ZERO_COPY, ROPEKV_INDEX_INT32,
                                               ROPEKV_INDEX_INT64, ROPEKV_Q_BF16, ROPEKV_KV_FLAT, ROPEKV_OP_WRITE,
                                               ROPEKV_NORM_NONE, 0},
                                  &d, &err),
                     ROPEKV_OK);
    rk_buf src = {0};
    assert_int_equal(rk_emit(&d, &src, &err), ROPEKV_OK);
    const char *want[] = {
        "constexpr Kv KV = Kv::fp8_e4m3;",
        "constexpr QForm QFORM = QForm::zero_copy;",
        "constexpr Index POS = Index::int32;",
        "constexpr Index SLOT = Index::int64;",
        "constexpr Rope ROPE = Rope::gptj;",
        "Elem::e4m3, 0, 0, ScaleType::none, ScaleRule::exact, ScaleAt::inl, 0, 240.0f, Outer::tensor, Scale::mul_recip",
        "#define RK_FP8_FNUZ 1",
        "constexpr Norm NORM = Norm::none;"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr(src.p, want[i])) fail_msg("source of %s lacks '%s'", d.key, want[i]);
    rk_buf_free(&src);
    /* the fused norm's bindings: the variant's norm and the spec's kv_norm (eps as a float literal that reads back
     * as the spec's float) */
    assert_int_equal(rk_desc_make(s, a,
                                  &(rk_choice){ROPEKV_KV_BF16, ROPEKV_Q_ABSORBED, ROPEKV_INDEX_INT64,
                                               ROPEKV_INDEX_INT64, ROPEKV_Q_BF16, ROPEKV_KV_PAGED, ROPEKV_OP_WRITE,
                                               ROPEKV_NORM_RMS_OUT, 0},
                                  &d, &err),
                     ROPEKV_OK);
    assert_int_equal(rk_emit(&d, &src, &err), ROPEKV_OK);
    const char *want_norm[] = {"constexpr Norm NORM = Norm::rms_out;",
                               "constexpr NormWeight NORM_WEIGHT = NormWeight::bf16;",
                               "constexpr NormRounding NORM_ROUNDING = NormRounding::twice;",
                               "constexpr Layout LAYOUT = Layout::paged;"};
    for (size_t i = 0; i < sizeof want_norm / sizeof want_norm[0]; i++)
        if (!strstr(src.p, want_norm[i])) fail_msg("source of %s lacks '%s'", d.key, want_norm[i]);
    const char *eps = strstr(src.p, "constexpr float NORM_EPS = ");
    assert_non_null(eps);
    assert_true(strtof(eps + strlen("constexpr float NORM_EPS = "), NULL) == 1e-6f);
    rk_buf_free(&src);
}

/* A variant the spec does not list is refused with what the spec lists; a choice outside its enum is an
 * argument error. */
static void test_desc_listed(void **state) {
    fixture *f = *state;
    const rk_spec *s = rk_catalog_find(&f->cat, "deepseek_v3");
    rk_desc d;
    rk_err err = {0};
    const rk_arch *sm90 = rk_arch_find(&f->cat.archs, "sm_90");
    assert_int_equal(rk_desc_listed(s, sm90,
                                    &(rk_choice){ROPEKV_KV_BF16, ROPEKV_Q_ABSORBED, ROPEKV_INDEX_INT64,
                                                 ROPEKV_INDEX_INT64, ROPEKV_Q_BF16, ROPEKV_KV_FLAT, ROPEKV_OP_WRITE,
                                                 ROPEKV_NORM_NONE, 0},
                                    &d, &err),
                     ROPEKV_OK);
    assert_string_equal(d.key, "deepseek_v3/sm_90/bf16/absorbed/pos=int64/slot=int64");
    rk_spec forms = *s; /* a spec that narrows a choice: q forms */
    forms.n_q = 3;
    forms.q[0] = ROPEKV_Q_ABSORBED, forms.q[1] = ROPEKV_Q_ZERO_COPY, forms.q[2] = ROPEKV_Q_NONE;
    assert_int_equal(rk_desc_listed(&forms, sm90,
                                    &(rk_choice){ROPEKV_KV_BF16, ROPEKV_Q_INPLACE, ROPEKV_INDEX_INT32,
                                                 ROPEKV_INDEX_INT64, ROPEKV_Q_BF16, ROPEKV_KV_FLAT, ROPEKV_OP_WRITE,
                                                 ROPEKV_NORM_NONE, 0},
                                    &d, &err),
                     ROPEKV_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "lists q_forms {absorbed, zero_copy, none}, not inplace"));
    rk_spec mini = *rk_catalog_find(&f->cat, "minicpm3_4b"); /* narrowed to int64 positions */
    mini.n_pos = 1;
    mini.pos[0] = ROPEKV_INDEX_INT64;
    assert_int_equal(rk_desc_listed(&mini, sm90,
                                    &(rk_choice){ROPEKV_KV_BF16, ROPEKV_Q_ABSORBED, ROPEKV_INDEX_INT32,
                                                 ROPEKV_INDEX_INT64, ROPEKV_Q_BF16, ROPEKV_KV_FLAT, ROPEKV_OP_WRITE,
                                                 ROPEKV_NORM_NONE, 0},
                                    &d, &err),
                     ROPEKV_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "lists positions {int64}, not int32"));
    /* a value an open choice leaves out for a fact of the model: the refusal names the fact */
    const rk_spec *lite = rk_catalog_find(&f->cat, "deepseek_v2_lite");
    assert_int_equal(rk_desc_listed(lite, sm90,
                                    &(rk_choice){ROPEKV_KV_FP8_TILE, ROPEKV_Q_ABSORBED, ROPEKV_INDEX_INT64,
                                                 ROPEKV_INDEX_INT64, ROPEKV_Q_BF16, ROPEKV_KV_FLAT, ROPEKV_OP_WRITE,
                                                 ROPEKV_NORM_NONE, 0},
                                    &d, &err),
                     ROPEKV_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "not fp8_tile: the spec has no fp8_tile table"));
    assert_int_equal(rk_desc_listed(lite, sm90,
                                    &(rk_choice){ROPEKV_KV_BF16, ROPEKV_Q_ABSORBED, ROPEKV_INDEX_INT64,
                                                 ROPEKV_INDEX_INT64, ROPEKV_Q_BF16, ROPEKV_KV_FLAT, ROPEKV_OP_WRITE,
                                                 ROPEKV_NORM_RMS, 0},
                                    &d, &err),
                     ROPEKV_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "norm rms needs the spec's kv_norm table"));
    rk_spec narrow = *s;
    narrow.n_targets = 1;
    snprintf(narrow.targets[0], sizeof narrow.targets[0], "gfx942");
    assert_int_equal(rk_desc_listed(&narrow, sm90,
                                    &(rk_choice){ROPEKV_KV_BF16, ROPEKV_Q_ABSORBED, ROPEKV_INDEX_INT64,
                                                 ROPEKV_INDEX_INT64, ROPEKV_Q_BF16, ROPEKV_KV_FLAT, ROPEKV_OP_WRITE,
                                                 ROPEKV_NORM_NONE, 0},
                                    &d, &err),
                     ROPEKV_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "does not list target sm_90"));
    assert_int_equal(rk_desc_make(s, sm90,
                                  &(rk_choice){(ropekv_kv_dtype)7, ROPEKV_Q_ABSORBED, ROPEKV_INDEX_INT64,
                                               ROPEKV_INDEX_INT64, ROPEKV_Q_BF16, ROPEKV_KV_FLAT, ROPEKV_OP_WRITE,
                                               ROPEKV_NORM_NONE, 0},
                                  &d, &err),
                     ROPEKV_ERR_ARG);
    assert_int_equal(rk_desc_make(s, sm90,
                                  &(rk_choice){ROPEKV_KV_BF16, (ropekv_q_form)-1, ROPEKV_INDEX_INT64,
                                               ROPEKV_INDEX_INT64, ROPEKV_Q_BF16, ROPEKV_KV_FLAT, ROPEKV_OP_WRITE,
                                               ROPEKV_NORM_NONE, 0},
                                  &d, &err),
                     ROPEKV_ERR_ARG);
}

/* The read-back op pairs a latent lane's chunks (one load of both, one block scale) for block-scaled e4m3 and e2m1
 * latents, in launches of at least chunks_from chunks: lanes L/16 + R/8 instead of L/8 + R/8. */
static void test_read_pairs(void **state) {
    fixture *f = *state;
    const rk_arch *sm90 = rk_arch_find(&f->cat.archs, "sm_90");
    static const struct {
        const char *spec;
        ropekv_kv_dtype kv;
        int record; /* the spec's record (1-based), 0: the kv dtype's row */
        ropekv_kv_layout layout;
        int pairs, write_pairs;
    } rows[] = {
        {"deepseek_v3", ROPEKV_KV_BF16, 0, ROPEKV_KV_PAGED, 0, 0},      /* no blocks: a chunk a lane */
        {"deepseek_v3", ROPEKV_KV_FP8_E4M3, 0, ROPEKV_KV_PAGED, 0, 0},  /* one tensor scale */
        {"deepseek_v3", ROPEKV_KV_BF16, 1, ROPEKV_KV_SPLIT, 1, 1},      /* nvfp4: e2m1 in blocks of 16 */
        {"deepseek_v32", ROPEKV_KV_FP8_TILE, 0, ROPEKV_KV_PAGED, 1, 1}, /* e4m3 tiles of 128 */
        {"deepseek_v32", ROPEKV_KV_BF16, 1, ROPEKV_KV_PAGED, 1, 1},     /* fp8_ds_mla */
        {"deepseek_v32", ROPEKV_KV_BF16, 3, ROPEKV_KV_PAGED, 1, 1},     /* nvfp4_fp8rope */
        {"deepseek_v41", ROPEKV_KV_BF16, 2, ROPEKV_KV_FLAT, 1, 0}, /* dsv41_fp4: the rope in the latent's segment */
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const rk_spec *s = rk_catalog_find(&f->cat, rows[i].spec);
        rk_desc d;
        rk_err err = {0};
        assert_int_equal(rk_desc_make(s, sm90,
                                      &(rk_choice){rows[i].kv, ROPEKV_Q_NONE, ROPEKV_INDEX_INT64, ROPEKV_INDEX_INT64,
                                                   ROPEKV_Q_BF16, rows[i].layout, ROPEKV_OP_READ, ROPEKV_NORM_NONE,
                                                   rows[i].record},
                                      &d, &err),
                         ROPEKV_OK);
        if (rk_read_pairs(&d) != rows[i].pairs) fail_msg("%s: rk_read_pairs %d", d.key, rk_read_pairs(&d));
        int64_t total, blocks;
        int block;
        rk_args a = {.tokens = 8192}; /* 8192 x 72 chunks: past sm_90's chunks_from */
        rk_launch_plan(&d, &a, &total, &blocks, &block);
        const int L = d.L, R = d.R;
        assert_int_equal(a.lanes, rows[i].pairs ? L / 16 + R / 8 : (L + R) / 8);
        a = (rk_args){.tokens = 16};
        rk_launch_plan(&d, &a, &total, &blocks, &block);
        assert_int_equal(a.lanes, (L + R) / 8);
        /* the writer pairs the same rows in a KV-only launch of token groups (4 tokens a group on sm_90), without a
         * norm; one token a group (a small launch), a norm or another q form keeps a chunk a lane */
        const ropekv_norm norms[] = {ROPEKV_NORM_NONE, ROPEKV_NORM_RMS};
        for (int n = 0; n < 2; n++) {
            rk_desc w;
            if (rk_desc_make(s, sm90,
                             &(rk_choice){rows[i].kv, ROPEKV_Q_NONE, ROPEKV_INDEX_INT64, ROPEKV_INDEX_INT64,
                                          ROPEKV_Q_BF16, rows[i].layout, ROPEKV_OP_WRITE, norms[n], rows[i].record},
                             &w, &err) != ROPEKV_OK)
                continue; /* no norm variant of this row */
            const int pairs = rows[i].write_pairs && n == 0;
            if (rk_write_pairs(&w) != pairs) fail_msg("%s: rk_write_pairs %d", w.key, rk_write_pairs(&w));
            if (w.order == RK_ORDER_ROWS) continue; /* a norm over the whole head: no token groups */
            a = (rk_args){.tokens = 8192, .kv_tokens = 8192};
            rk_launch_plan(&w, &a, &total, &blocks, &block);
            assert_int_equal(a.kv_group, 4);
            assert_int_equal(a.lanes, 4 * (R / 8 + (pairs ? L / 16 : L / 8)));
            a = (rk_args){.tokens = 4, .kv_tokens = 4};
            rk_launch_plan(&w, &a, &total, &blocks, &block);
            assert_int_equal(a.lanes, 32 + L / 8); /* the rope section a whole wave, then the latent's chunks */
        }
    }
}

/* n / d as the 32-bit kernel entry computes it from rk_div_magic's numbers. */
static int64_t magic_div(int64_t n, int64_t mul, int64_t shift) {
    return (int64_t)(((uint64_t)n * (uint64_t)mul) >> shift);
}

static void check_divisor(int64_t d) {
    int64_t mul, shift;
    rk_div_magic(d, &mul, &shift);
    assert_true(mul > 0 && mul < ((int64_t)1 << 32));
    const int64_t top = INT32_MAX;
    int64_t ns[] = {0, 1, d - 1, d, d + 1, 2 * d - 1, 2 * d, top, top - 1, top - d, top / d * d, top / d * d - 1};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
        if (ns[i] < 0 || ns[i] > top) continue;
        if (magic_div(ns[i], mul, shift) != ns[i] / d)
            fail_msg("d %lld n %lld: %lld, not %lld", (long long)d, (long long)ns[i],
                     (long long)magic_div(ns[i], mul, shift), (long long)(ns[i] / d));
    }
    uint64_t x = 0x9e3779b97f4a7c15ull ^ (uint64_t)d;
    for (int i = 0; i < 64; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int64_t n = (int64_t)(x % ((uint64_t)top + 1));
        if (magic_div(n, mul, shift) != n / d) fail_msg("d %lld n %lld", (long long)d, (long long)n);
    }
}

/* The kernel's 32-bit entry finds a lane's token by a multiply and a shift: exact for every lane
 * index below 2^31 (checked at the edges and at random points for many divisors, all below 4096). */
static void test_div_magic(void **state) {
    (void)state;
    for (int64_t d = 1; d <= 4096; d++) check_divisor(d);
    for (int k = 12; k < 31; k++) {
        check_divisor(((int64_t)1 << k) - 1);
        check_divisor((int64_t)1 << k);
        check_divisor(((int64_t)1 << k) + 1);
    }
    check_divisor(INT32_MAX);
    uint64_t x = 12345;
    for (int i = 0; i < 2000; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        check_divisor(1 + (int64_t)(x % INT32_MAX));
    }
    int64_t mul, shift;
    rk_div_magic(0, &mul, &shift);
    assert_true(mul == 0 && shift == 0);
    rk_div_magic((int64_t)1 << 31, &mul, &shift);
    assert_true(mul == 0 && shift == 0);
}

/* rk_launch_plan counts lanes as the kernel lays them out (DeepSeek-V3, absorbed, 32-lane waves):
 * rope section 16 * 8 + 8 = 136 -> 160, copy section 16 * 64 + 64. */
static void test_launch_plan(void **state) {
    (void)state;
    rk_arch nv = {
        .wave = 32, .block = 128, .wide_block = 128, .wide_from = 1 << 30, .chunks = 4, .chunks_from = 1 << 20};
    rk_arch amd = {.wave = 64, .block = 256, .wide_block = 256, .wide_from = 1 << 30, .chunks = 1, .chunks_from = 0};
    rk_desc d = {.arch = &nv, .q = ROPEKV_Q_ABSORBED, .L = 512, .R = 64};
    rk_args a = {.tokens = 3, .heads = 16};
    int64_t total, blocks;
    int block;
    rk_launch_plan(&d, &a, &total, &blocks, &block);
    assert_int_equal(a.lanes, 160 + 16 * 64 + 64);
    assert_int_equal(total, 3 * a.lanes);
    assert_int_equal(a.chunks, 1);
    assert_int_equal(a.early_release, 1);
    assert_int_equal(blocks, (total + 127) / 128);
    assert_int_equal(magic_div(total - 1, a.lanes_mul, a.lanes_shift), 2);
    a = (rk_args){.tokens = 4096, .heads = 16};
    rk_launch_plan(&d, &a, &total, &blocks, &block);
    assert_int_equal(a.chunks, 4);
    assert_int_equal(a.early_release, 0);
    assert_int_equal(block, 128);
    assert_int_equal(blocks, (total + 511) / 512);
    /* A row with a wide block: blocks of 256 threads from wide_from chunks on, 128 below. */
    rk_arch wide = {.wave = 32, .block = 128, .wide_block = 256, .wide_from = 65536, .chunks = 1};
    d.arch = &wide;
    a = (rk_args){.tokens = 52, .heads = 16}; /* 52 * 1248 = 64896 chunks */
    rk_launch_plan(&d, &a, &total, &blocks, &block);
    assert_int_equal(total, 64896);
    assert_int_equal(block, 128);
    assert_int_equal(blocks, (total + 127) / 128);
    a = (rk_args){.tokens = 53, .heads = 16}; /* 66144 */
    rk_launch_plan(&d, &a, &total, &blocks, &block);
    assert_int_equal(block, 256);
    assert_int_equal(a.early_release, 1);
    assert_int_equal(blocks, (total + 255) / 256);
    a = (rk_args){.tokens = 1, .heads = 1, .kv_tokens = 1};
    d = (rk_desc){.arch = &amd, .q = ROPEKV_Q_NONE, .L = 512, .R = 64};
    rk_launch_plan(&d, &a, &total, &blocks, &block);
    /* KV-only: groups of 8 tokens, whose 8 rope chunks each fill one 64-lane wave, then their c_kv chunks */
    assert_int_equal(rk_kv_group(&d), 8);
    assert_int_equal(a.lanes, 8 * (8 + 64));
    assert_int_equal(a.grid_groups, 1);
    /* Without a query form only the KV rows have work: tokens past kv_tokens launch nothing. */
    a = (rk_args){.tokens = 200000000, .heads = 2, .kv_tokens = 48};
    rk_launch_plan(&d, &a, &total, &blocks, &block);
    assert_int_equal(a.grid_groups, 6);
    assert_int_equal(total, 6 * a.lanes);
    a = (rk_args){.tokens = 1, .heads = 1, .kv_tokens = 49}; /* a last group of one token */
    rk_launch_plan(&d, &a, &total, &blocks, &block);
    assert_int_equal(a.grid_groups, 7);
    assert_int_equal(a.kv_group, 8);
    /* below chunks_from (counted on the token-a-group layout) a launch takes a token a group */
    amd.chunks_from = 48 * (64 + 64);
    a = (rk_args){.tokens = 1, .heads = 1, .kv_tokens = 47};
    rk_launch_plan(&d, &a, &total, &blocks, &block);
    assert_int_equal(a.kv_group, 1);
    assert_int_equal(a.lanes, 64 + 64); /* the KV rope chunks padded to a 64-lane wave, then c_kv */
    assert_int_equal(a.grid_groups, 47);
    a.kv_tokens = 48;
    rk_launch_plan(&d, &a, &total, &blocks, &block);
    assert_int_equal(a.kv_group, 8);
    assert_int_equal(a.grid_groups, 6);
    amd.chunks_from = 0;
    d.arch = &wide; /* 32-lane waves: groups of 4; R = 48 (6 chunks): lcm(32, 6) = 96 lanes, 16 tokens */
    assert_int_equal(rk_kv_group(&d), 4);
    d.R = 48;
    assert_int_equal(rk_kv_group(&d), 16);
    d.R = 0; /* no rope part: no group */
    assert_int_equal(rk_kv_group(&d), 1);
    d.R = 64;
    d.order = RK_ORDER_ROWS; /* row by row: no rope section */
    assert_int_equal(rk_kv_group(&d), 1);
    d.order = RK_ORDER_SECTIONS;
    d.op = ROPEKV_OP_READ;
    assert_int_equal(rk_kv_group(&d), 1);
    d.op = ROPEKV_OP_WRITE;
    d.arch = &amd;
    d.q = ROPEKV_Q_ABSORBED; /* with one, the query rows of every token, a group each */
    assert_int_equal(rk_kv_group(&d), 1);
    a = (rk_args){.tokens = 1000, .heads = 2, .kv_tokens = 48};
    rk_launch_plan(&d, &a, &total, &blocks, &block);
    assert_int_equal(a.grid_groups, 1000);
    /* The read-back op takes the row's read_chunks from read_chunks_from chunks on; the writer its chunks. */
    rk_arch rd = {.wave = 32,
                  .block = 128,
                  .wide_block = 128,
                  .wide_from = 1 << 30,
                  .chunks = 1,
                  .chunks_from = 1 << 20,
                  .read_chunks = 2,
                  .read_chunks_from = 72 * 1000};
    d = (rk_desc){.arch = &rd, .op = ROPEKV_OP_READ, .q = ROPEKV_Q_NONE, .L = 512, .R = 64};
    int64_t from;
    assert_int_equal(rk_desc_chunks(&d, &from), 2);
    assert_int_equal(from, 72 * 1000);
    a = (rk_args){.tokens = 999};
    rk_launch_plan(&d, &a, &total, &blocks, &block);
    assert_int_equal(a.lanes, 72);
    assert_int_equal(a.chunks, 1);
    assert_int_equal(a.early_release, 1);
    a = (rk_args){.tokens = 1000};
    rk_launch_plan(&d, &a, &total, &blocks, &block);
    assert_int_equal(a.chunks, 2);
    assert_int_equal(a.early_release, 0);
    assert_int_equal(blocks, (total + 255) / 256);
    d.op = ROPEKV_OP_WRITE;
    assert_int_equal(rk_desc_chunks(&d, &from), 1);
    assert_int_equal(from, 1 << 20);
}

int main(void) {
    const struct CMUnitTest plain[] = {
        cmocka_unit_test(test_div_magic),
        cmocka_unit_test(test_launch_plan),
        cmocka_unit_test(test_render_binds_values),
        cmocka_unit_test(test_render_unknown_placeholder),
        cmocka_unit_test(test_render_unused_binding),
        cmocka_unit_test(test_render_unbalanced),
    };
    const struct CMUnitTest specs[] = {
        cmocka_unit_test(test_emit_is_deterministic), cmocka_unit_test(test_golden_header),
        cmocka_unit_test(test_names_unique),          cmocka_unit_test(test_bindings_are_named),
        cmocka_unit_test(test_desc_listed),           cmocka_unit_test(test_read_pairs),
    };
    int failed = cmocka_run_group_tests_name("render", plain, NULL, NULL);
    failed += cmocka_run_group_tests_name("render_specs", specs, setup, teardown);
    return failed;
}
