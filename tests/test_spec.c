/* Spec loading: the Lua sandbox, strict conversion, the spec files in specs/, enum names. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "proc.h"
#include "rk.h"

#ifndef RK_SOURCE_DIR
#error "RK_SOURCE_DIR must name the repository root"
#endif

#define TFILE "specs/t.lua"

/* ---- helpers ---------------------------------------------------------------------------------- */
/* Group state: the architecture table from specs/archs.lua. */
static int group_setup(void **state) {
    rk_codeobj text;
    rk_err err = {0};
    int rc = rk_read_file(RK_SOURCE_DIR "/specs/archs.lua", &text);
    rk_arch_table *t = malloc(sizeof *t);
    if (rc != ROPEKV_OK || t == NULL ||
        rk_archs_load("specs/archs.lua", (const char *)text.data, text.len, t, &err) != ROPEKV_OK) {
        fprintf(stderr, "cannot load specs/archs.lua: %s\n", err.msg);
        rk_code_free(&text);
        free(t);
        return -1;
    }
    rk_code_free(&text);
    *state = t;
    return 0;
}

static int group_teardown(void **state) {
    free(*state);
    return 0;
}

/* A valid spec with every key; each case adds Lua statements before `return s`. */
static const char BASE[] =
    "local s = {\n"
    "  name = 't',\n"
    "  description = 'test spec',\n"
    "  kv_lora_rank = 512,\n"
    "  qk_rope_head_dim = 64,\n"
    "  rope = 'gptj',\n"
    "  cos_sin = 'f32_cat',\n"
    "  positions = { 'int64' },\n"
    "  slots = { 'int64', 'int32' },\n"
    "  kv_dtypes = { 'bf16', 'fp8_e4m3' },\n"
    "  fp8 = { scale = 'mul_recip', saturate = { ocp = 448, fnuz = 240 }, rope_bf16_round = false },\n"
    "  negative_slot = 'skip_kv',\n"
    "  q_forms = { 'absorbed' },\n"
    "  sanitize = false,\n"
    "  targets = { 'gfx942', 'host' },\n"
    "}\n"
    "%s\n"
    "return s\n";

/* A valid architecture table; the same scheme with `a`. */
static const char ARCH_BASE[] =
    "local a = { archs = {\n"
    "  { name = 'gfx942', vendor = 'amd', wave = 64, fp8 = 'fnuz', fp8_hw = true, bf16_hw = false,\n"
    "    compiler = 'clang' },\n"
    "  { name = 'host', vendor = 'host', wave = 32, fp8 = 'ocp', fp8_hw = false, bf16_hw = false,\n"
    "    compiler = 'host', vec_bytes = 16, block = 256, options = '' },\n"
    "} }\n"
    "%s\n"
    "return a\n";

typedef struct fail_case {
    const char *change; /* Lua statements */
    int code;           /* expected ropekv_status */
    const char *want;   /* expected substring of the message */
} fail_case;

static int load_spec_with(const rk_arch_table *archs, const char *change, rk_spec *out, rk_err *err) {
    static char text[16384];
    snprintf(text, sizeof text, BASE, change);
    return rk_spec_load(TFILE, text, strlen(text), archs, out, err);
}

static int load_archs_with(const char *change, rk_arch_table *out, rk_err *err) {
    static char text[16384];
    snprintf(text, sizeof text, ARCH_BASE, change);
    return rk_archs_load(TFILE, text, strlen(text), out, err);
}

/* rc and err must say code, and the message must start with the file name and contain want. */
static void check_failure(const char *change, int rc, const rk_err *err, int code, const char *want) {
    int ok = rc == code && (int)err->code == code && strstr(err->msg, want) != NULL &&
             strncmp(err->msg, TFILE, strlen(TFILE)) == 0;
    if (!ok)
        fprintf(stderr, "case:  %s\nrc:    %d (want %d)\nmsg:   %s\nwant:  %s\n", change, rc, code, err->msg, want);
    assert_true(ok);
}

static void run_spec_cases(void **state, const fail_case *c, size_t n) {
    for (size_t i = 0; i < n; i++) {
        rk_err err = {0};
        rk_spec s;
        int rc = load_spec_with(*state, c[i].change, &s, &err);
        check_failure(c[i].change, rc, &err, c[i].code, c[i].want);
    }
}

static rk_spec load_ok(void **state, const char *change) {
    rk_err err = {0};
    rk_spec s;
    memset(&s, 0, sizeof s);
    int rc = load_spec_with(*state, change, &s, &err);
    if (rc != ROPEKV_OK) fprintf(stderr, "case: %s\nmsg:  %s\n", change, err.msg);
    assert_int_equal(rc, ROPEKV_OK);
    return s;
}

#define N(a) (sizeof(a) / sizeof((a)[0]))

/* ---- util.c ------------------------------------------------------------------------------------ */
static void test_fail(void **state) {
    (void)state;
    rk_err err = {0};
    char big[3000];
    assert_int_equal(rk_fail(NULL, ROPEKV_ERR_SPEC_INVALID, "x %d", 1), ROPEKV_ERR_SPEC_INVALID);
    assert_int_equal(rk_fail(&err, ROPEKV_ERR_IO, "%s: %d", "f", 7), ROPEKV_ERR_IO);
    assert_int_equal(err.code, ROPEKV_ERR_IO);
    assert_string_equal(err.msg, "f: 7");
    memset(big, 'y', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    rk_fail(&err, ROPEKV_ERR_NOMEM, "%s", big);
    assert_int_equal(strlen(err.msg), sizeof err.msg - 1);
}

/* rk_escape: control characters, NUL bytes included, as escapes; other bytes as they are; cut with "...". */
static void test_escape(void **state) {
    (void)state;
    char out[64];
    assert_string_equal(rk_escape("a\0b\n\t\r\x1b[1m\x7f\xc3\xa9", 13, out, sizeof out),
                        "a\\x00b\\n\\t\\r\\x1b[1m\\x7f\xc3\xa9");
    assert_string_equal(rk_printable("plain/path-1.lua", out, sizeof out), "plain/path-1.lua");
    assert_string_equal(rk_printable(NULL, out, sizeof out), "(null)");
    assert_string_equal(rk_printable("", out, sizeof out), "");
    assert_string_equal(rk_printable("abcdefgh", out, 9), "abcdefgh"); /* just fits */
    assert_string_equal(rk_printable("abcdefghi", out, 9), "abcde...");
    assert_string_equal(rk_printable("ab\001", out, 8), "ab\\x01");
    assert_string_equal(rk_printable("ab\001c", out, 7), "ab...");
    assert_string_equal(rk_printable("abcdef", out, 4), "...");

    /* what a spec's file name, keys, values and error() text put into messages */
    static const fail_case c[] = {
        {"s['k\\1'] = 1", ROPEKV_ERR_SPEC_INVALID, "unknown key 'k\\x01'"},
        {"s.rope = 'neox\\27[0m'", ROPEKV_ERR_SPEC_INVALID, "unknown value 'neox\\x1b[0m'"},
        {"s.name = 'a\\nb'", ROPEKV_ERR_SPEC_INVALID, "got 'a\\nb'"},
        {"error('\\27[31mred\\nline')", ROPEKV_ERR_SPEC_RUNTIME, "\\x1b[31mred\\nline"},
    };
    run_spec_cases(state, c, N(c));
    rk_err err = {0};
    rk_spec spec;
    assert_int_equal(rk_spec_load("evil\x1b]0;title\x07.lua", "error('x')", 10, *state, &spec, &err),
                     ROPEKV_ERR_SPEC_RUNTIME);
    assert_non_null(strstr(err.msg, "evil\\x1b]0;title\\x07.lua"));
    assert_null(strchr(err.msg, '\x1b'));
}

/* Every enum table: values, spellings and name tokens unique; tokens free of '_' (it separates a kernel
 * name's fields); a value outside the table has no spelling. */
static void check_table(const rk_enum *e) {
    assert_true(e->n >= 2);
    for (int i = 0; i < e->n; i++) {
        assert_non_null(e->v[i].name);
        assert_non_null(e->v[i].token);
        assert_null(strchr(e->v[i].token, '_'));
        assert_string_equal(rk_enum_name(e, e->v[i].value), e->v[i].name);
        assert_string_equal(rk_enum_token(e, e->v[i].value), e->v[i].token);
        for (int j = 0; j < i; j++) {
            assert_int_not_equal(e->v[i].value, e->v[j].value);
            assert_string_not_equal(e->v[i].name, e->v[j].name);
            assert_string_not_equal(e->v[i].token, e->v[j].token);
        }
    }
    assert_null(rk_enum_name(e, -1));
    assert_null(rk_enum_name(e, 1000));
}

/* The kernel's C++ enumerators (templates/params.hip, `enum class T { a, b };`) are the table's
 * spellings, in any order: a binding names one, so the two must agree. */
static void check_kernel_enum(const char *type, const rk_enum *e) {
    size_t len;
    const char *t = rk_embedded("params.hip", &len);
    assert_non_null(t);
    char head[64], body[256];
    snprintf(head, sizeof head, "enum class %s {", type);
    const char *at = strstr(t, head);
    assert_non_null(at);
    at += strlen(head);
    const char *end = strchr(at, '}');
    assert_non_null(end);
    snprintf(body, sizeof body, "%.*s", (int)(end - at), at);
    int n = 0;
    for (char *tok = strtok(body, " ,"); tok; tok = strtok(NULL, " ,"), n++) {
        int found = 0;
        for (int i = 0; i < e->n; i++) found |= strcmp(e->v[i].name, tok) == 0;
        if (!found) fail_msg("enum class %s has '%s', which no spelling of its table names", type, tok);
    }
    assert_int_equal(n, e->n);
}

/* The library reads a built-in spec by its name: every embedded spec file's name is its base name. */
static void test_builtin_specs_by_name(void **state) {
    (void)state;
    static rk_arch_table archs;
    static rk_spec spec;
    rk_err err = {0};
    size_t len;
    const char *text = rk_embedded("archs.lua", &len);
    assert_non_null(text);
    assert_int_equal(rk_archs_load("specs/archs.lua", text, len, &archs, &err), ROPEKV_OK);
    int n = 0;
    for (size_t i = 0; rk_embedded_at(i, NULL); i++) {
        const char *file = rk_embedded_at(i, NULL);
        size_t fl = strlen(file);
        if (fl < 5 || strcmp(file + fl - 4, ".lua") != 0 || strcmp(file, "archs.lua") == 0 ||
            strcmp(file, "records.lua") == 0)
            continue;
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(fl - 4), file);
        if (rk_spec_builtin(name, &archs, &spec, &err) != ROPEKV_OK) fail_msg("%s: %s", name, err.msg);
        assert_string_equal(spec.name, name);
        n++;
    }
    assert_true(n >= 4);
    assert_int_equal(rk_spec_builtin("archs", &archs, &spec, &err), ROPEKV_ERR_NO_SPEC);
    assert_int_equal(rk_spec_builtin("records", &archs, &spec, &err), ROPEKV_ERR_NO_SPEC);
    assert_int_equal(rk_spec_builtin("no_such_model", &archs, &spec, &err), ROPEKV_ERR_NO_SPEC);
    assert_non_null(strstr(err.msg, "no_such_model"));
}

static void test_names(void **state) {
    (void)state;
    const rk_enum *all[] = {&rk_vendor_enum, &rk_compiler_enum,    &rk_fp8_enum,       &rk_rope_enum,  &rk_cos_sin_enum,
                            &rk_scale_enum,  &rk_neg_enum,         &rk_kv_enum,        &rk_qform_enum, &rk_index_enum,
                            &rk_norm_enum,   &rk_norm_weight_enum, &rk_norm_round_enum};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) check_table(all[i]);
    check_kernel_enum("Rope", &rk_rope_enum);
    check_kernel_enum("CosSin", &rk_cos_sin_enum);
    check_kernel_enum("Index", &rk_index_enum);
    check_kernel_enum("Kv", &rk_kv_enum);
    check_kernel_enum("Scale", &rk_scale_enum);
    check_kernel_enum("Neg", &rk_neg_enum);
    check_kernel_enum("QForm", &rk_qform_enum);
    check_kernel_enum("Norm", &rk_norm_enum);
    check_kernel_enum("NormWeight", &rk_norm_weight_enum);
    check_kernel_enum("NormRounding", &rk_norm_round_enum);
    assert_string_equal(rk_kv_name(ROPEKV_KV_FP8_E4M3), "fp8_e4m3");
    assert_string_equal(rk_idx_name(ROPEKV_INDEX_INT32), "int32");
    assert_string_equal(rk_qform_name(ROPEKV_Q_ZERO_COPY), "zero_copy");
    assert_string_equal(rk_norm_name(ROPEKV_NORM_RMS_OUT), "rms_out");
    assert_null(rk_norm_name((ropekv_norm)3));
}

static void test_arch_find(void **state) {
    const rk_arch_table *t = *state;
    assert_non_null(rk_arch_find(t, "gfx942"));
    assert_string_equal(rk_arch_find(t, "sm_90")->name, "sm_90");
    assert_null(rk_arch_find(t, "gfx999"));
    assert_null(rk_arch_find(t, NULL));
    assert_null(rk_arch_find(NULL, "host"));
}

/* ---- specs/ ------------------------------------------------------------------------------------ */
static void test_archs_file(void **state) {
    const rk_arch_table *t = *state;
    static const char *const names[] = {"gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1201", "gfx1250",
                                        "sm_80",  "sm_90",  "sm_100", "sm_103",  "sm_120",  "host"};
    assert_int_equal(t->n, (int)N(names));
    for (size_t i = 0; i < N(names); i++) {
        assert_string_equal(t->a[i].name, names[i]);
        const int nvidia = t->a[i].vendor == RK_VENDOR_NVIDIA; /* the rows tuned with bench_kernel */
        const int sm80 = !strcmp(names[i], "sm_80");           /* the others: sm_90's values */
        assert_int_equal(t->a[i].vec_bytes, 16);
        assert_int_equal(t->a[i].block, nvidia ? 128 : 256);
        assert_int_equal(t->a[i].wide_block, nvidia && !sm80 ? 256 : t->a[i].block); /* default: block */
        assert_int_equal(t->a[i].wide_from, nvidia && !sm80 ? 65536 : 1 << 30);
        assert_int_equal(rk_arch_max_block(&t->a[i]), nvidia && !sm80 ? 256 : t->a[i].block);
        assert_int_equal(t->a[i].chunks, sm80 ? 4 : 1);
        /* (the host row's low value only sets where the read-back pairs latent chunks: both run in its tests) */
        assert_int_equal(t->a[i].chunks_from, nvidia ? 524288 : !strcmp(names[i], "host") ? 4096 : 1 << 20);
        /* the read-back op's: sm_90's own (bench_kernel --op read; the Blackwell rows copy it), the row's chunks and
         * chunks_from elsewhere */
        const int sm90_reads = nvidia && !sm80;
        assert_int_equal(t->a[i].read_chunks, sm90_reads ? 2 : t->a[i].chunks);
        assert_int_equal(t->a[i].read_chunks_from, sm90_reads ? 2097152 : t->a[i].chunks_from);
        assert_false(t->a[i].nt_stores);
        assert_int_equal(t->a[i].pdl, nvidia && strcmp(names[i], "sm_80") != 0); /* griddepcontrol: sm_90+ */
        assert_string_equal(t->a[i].options, "");
    }
    const rk_arch *a = rk_arch_find(t, "gfx90a");
    assert_int_equal(a->vendor, RK_VENDOR_AMD);
    assert_int_equal(a->wave, 64);
    assert_int_equal(a->fp8, RK_FP8_OCP);
    assert_false(a->fp8_hw);
    assert_int_equal(a->compiler, RK_CC_HIPRTC);
    a = rk_arch_find(t, "gfx942");
    assert_int_equal(a->fp8, RK_FP8_FNUZ);
    assert_true(a->fp8_hw);
    assert_false(a->bf16_hw);
    assert_int_equal(a->compiler, RK_CC_CLANG);
    a = rk_arch_find(t, "gfx950");
    assert_true(a->fp8_hw && a->bf16_hw && a->fp8 == RK_FP8_OCP);
    a = rk_arch_find(t, "gfx1100");
    assert_true(a->wave == 32 && !a->fp8_hw && !a->bf16_hw);
    a = rk_arch_find(t, "gfx1201");
    assert_true(a->wave == 32 && a->fp8_hw && !a->bf16_hw);
    a = rk_arch_find(t, "gfx1250");
    assert_true(a->wave == 32 && a->fp8_hw && a->bf16_hw);
    a = rk_arch_find(t, "sm_80");
    assert_true(a->vendor == RK_VENDOR_NVIDIA && !a->fp8_hw && a->bf16_hw && a->compiler == RK_CC_NVRTC);
    a = rk_arch_find(t, "sm_90");
    assert_true(a->vendor == RK_VENDOR_NVIDIA && a->fp8_hw && a->bf16_hw && a->compiler == RK_CC_NVRTC);
    a = rk_arch_find(t, "host");
    assert_true(a->vendor == RK_VENDOR_HOST && a->compiler == RK_CC_HOST && !a->fp8_hw);
}

/* Every model spec in specs/ loads; together they stay a reasonable number of kernels. */
static void test_spec_files(void **state) {
    DIR *d = opendir(RK_SOURCE_DIR "/specs");
    struct dirent *e;
    int n = 0, variants = 0, norm_variants = 0;
    assert_non_null(d);
    while ((e = readdir(d)) != NULL) {
        size_t l = strlen(e->d_name);
        if (l < 5 || strcmp(e->d_name + l - 4, ".lua") != 0 || strcmp(e->d_name, "archs.lua") == 0 ||
            strcmp(e->d_name, "records.lua") == 0)
            continue;
        char path[1024], file[512];
        snprintf(path, sizeof path, "%s/specs/%s", RK_SOURCE_DIR, e->d_name);
        snprintf(file, sizeof file, "specs/%s", e->d_name);
        rk_codeobj text;
        assert_int_equal(rk_read_file(path, &text), ROPEKV_OK);
        rk_err err = {0};
        rk_spec s;
        int rc = rk_spec_load(file, (const char *)text.data, text.len, *state, &s, &err);
        rk_code_free(&text);
        if (rc != ROPEKV_OK) fprintf(stderr, "%s\n", err.msg);
        assert_int_equal(rc, ROPEKV_OK);
        assert_string_equal(s.file, file);
        static rk_desc v[RK_MAX_VARIANTS_PER_SPEC];
        const int k = rk_variants(&s, *state, v, RK_MAX_VARIANTS_PER_SPEC, &err);
        assert_true(k > 0);
        /* the fused norm multiplies the write variants by the norms a spec lists, and nothing else: as many
         * rms (and rms_out) variants as norm-none write variants, each the same choices but its norm */
        int by_norm[3] = {0, 0, 0};
        for (int i = 0; i < k; i++)
            if (v[i].op == ROPEKV_OP_WRITE) by_norm[v[i].norm]++;
            else assert_int_equal(v[i].norm, ROPEKV_NORM_NONE); /* the read-back op normalizes nothing */
        for (int m = 0; m < 3; m++) {
            int listed = 0;
            for (int j = 0; j < s.n_norms; j++) listed |= s.norms[j] == (ropekv_norm)m;
            assert_int_equal(by_norm[m], listed ? by_norm[ROPEKV_NORM_NONE] : 0);
        }
        variants += k;
        norm_variants += by_norm[ROPEKV_NORM_RMS] + by_norm[ROPEKV_NORM_RMS_OUT];
        n++;
    }
    closedir(d);
    assert_true(n >= 4);
    /* the product grows with every value of every open choice: what CI runs is the covering set (test_cover
     * holds its budget); the product stays within what a spec can describe */
    assert_true(norm_variants > 0);
    assert_true(variants <= RK_MAX_SPECS * RK_MAX_VARIANTS_PER_SPEC);
}

static rk_spec load_file(void **state, const char *base) {
    char path[1024], file[256];
    snprintf(path, sizeof path, "%s/specs/%s", RK_SOURCE_DIR, base);
    snprintf(file, sizeof file, "specs/%s", base);
    rk_codeobj text;
    assert_int_equal(rk_read_file(path, &text), ROPEKV_OK);
    rk_err err = {0};
    rk_spec s;
    int rc = rk_spec_load(file, (const char *)text.data, text.len, *state, &s, &err);
    rk_code_free(&text);
    if (rc != ROPEKV_OK) fprintf(stderr, "%s\n", err.msg);
    assert_int_equal(rc, ROPEKV_OK);
    return s;
}

static void test_spec_values(void **state) {
    rk_spec s = load_file(state, "deepseek_v3.lua");
    assert_string_equal(s.name, "deepseek_v3");
    assert_true(s.kv_lora_rank == 512 && s.rope_dim == 64 && s.rope == RK_ROPE_GPTJ);
    assert_true(s.cos_sin == RK_CS_F32_CAT && s.n_pos == 2 && s.pos[0] == ROPEKV_INDEX_INT64 &&
                s.pos[1] == ROPEKV_INDEX_INT32);
    assert_true(s.n_slot == 2 && s.slot[0] == ROPEKV_INDEX_INT64 && s.slot[1] == ROPEKV_INDEX_INT32);
    assert_true(s.n_kv == 2 && s.fp8.scale == RK_SCALE_MUL_RECIP);
    /* the caller's choices are open: every q form, every row of specs/archs.lua */
    assert_true(s.n_q == 4 && s.q[0] == ROPEKV_Q_ABSORBED && s.q[1] == ROPEKV_Q_ZERO_COPY && s.q[2] == ROPEKV_Q_NONE &&
                s.q[3] == ROPEKV_Q_INPLACE);
    assert_true(s.n_layout == 3 && s.n_ops == 2);
    assert_true(s.fp8.sat_ocp == 448.0f && s.fp8.sat_fnuz == 240.0f && !s.fp8.rope_bf16);
    assert_true(s.negative_slot == RK_NEG_SKIP_KV && !s.sanitize && s.n_targets == ((rk_arch_table *)*state)->n);
    assert_true(s.n_qdt == 2 && s.q_dtypes[1] == ROPEKV_Q_FP8_E4M3 && s.q_fp8.scale == RK_SCALE_MUL_RECIP &&
                !s.q_fp8.rope_bf16 && s.q_fp8.matches[0]);
    /* the fused kv_a RMSNorm: DeepSeek-V3's kv_a_layernorm (rms_norm_eps 1e-6, bf16 weight, HF's double rounding) */
    assert_true(s.n_norms == 3 && s.norms[0] == ROPEKV_NORM_NONE && s.norms[1] == ROPEKV_NORM_RMS &&
                s.norms[2] == ROPEKV_NORM_RMS_OUT);
    assert_true(s.norm.weight == RK_NW_BF16 && s.norm.eps == 1e-6f && s.norm.round == RK_NR_TWICE && s.norm.matches[0]);

    s = load_file(state, "kimi_k2.lua");
    assert_true(s.kv_lora_rank == 512 && s.rope_dim == 64);
    assert_true(s.n_pos == 2 && s.pos[0] == ROPEKV_INDEX_INT64 && s.pos[1] == ROPEKV_INDEX_INT32);
    assert_true(s.n_slot == 2 && s.slot[0] == ROPEKV_INDEX_INT64 && s.slot[1] == ROPEKV_INDEX_INT32);
    assert_true(s.n_q == 4);
    assert_true(s.fp8.scale == RK_SCALE_DIV && s.fp8.sat_fnuz == 224.0f && s.fp8.sat_ocp == 448.0f);
    assert_true(s.negative_slot == RK_NEG_SKIP_ALL && s.sanitize);
    assert_true(s.n_qdt == 2 && s.q_fp8.scale == RK_SCALE_MUL_RECIP && s.q_fp8.rope_bf16 && s.q_fp8.sat_fnuz == 224.0f);
    assert_true(s.n_norms == 3 && s.norm.weight == RK_NW_BF16 && s.norm.eps == 1e-6f && s.norm.round == RK_NR_TWICE);

    s = load_file(state, "glm53_flash.lua");
    /* no rope part: rope none, the q forms and layouts that write the latent alone, the GLM_NEXT records */
    assert_true(s.kv_lora_rank == 512 && s.rope_dim == 0 && s.rope == RK_ROPE_NONE);
    assert_true(s.n_q == 2 && s.q[0] == ROPEKV_Q_ABSORBED && s.q[1] == ROPEKV_Q_NONE && s.n_layout == 2);
    assert_true(s.n_kv == 1 && s.kv[0] == ROPEKV_KV_BF16 && s.n_records == 2);
    assert_string_equal(s.records[0].name, "glm_next_fp8");
    assert_true(s.records[0].row_bytes == 528 && s.records[0].n_seg == 1 && s.records[0].seg[0].block == 128);
    assert_string_equal(s.records[1].name, "glm_next_nvfp4");
    assert_null(rk_record_unsupported(&s.records[1])); /* its per-token outer scale covers the whole latent */
    assert_true(s.n_norms == 3 && s.norm.eps == 1e-5f);

    s = load_file(state, "kimi_k3.lua");
    /* 64 rope slots never rotated: rope none, which leaves inplace out; Kimi-K2's vLLM conventions */
    assert_true(s.kv_lora_rank == 512 && s.rope_dim == 64 && s.rope == RK_ROPE_NONE);
    assert_true(s.n_q == 3 && s.q[0] == ROPEKV_Q_ABSORBED && s.q[1] == ROPEKV_Q_ZERO_COPY && s.q[2] == ROPEKV_Q_NONE);
    assert_true(s.n_kv == 2 && s.kv[0] == ROPEKV_KV_BF16 && s.kv[1] == ROPEKV_KV_FP8_E4M3 && s.n_layout == 3);
    assert_true(s.fp8.scale == RK_SCALE_DIV && s.fp8.sat_fnuz == 224.0f && s.fp8.sat_ocp == 448.0f);
    assert_true(s.negative_slot == RK_NEG_SKIP_ALL && s.sanitize && s.q_fp8.scale == RK_SCALE_MUL_RECIP);
    assert_true(s.n_norms == 3 && s.norm.eps == 1e-6f);

    s = load_file(state, "deepseek_v32.lua");
    /* the model binds its row formats (the tile row and bf16); a tile row is never split */
    assert_true(s.n_kv == 2 && s.kv[0] == ROPEKV_KV_FP8_TILE && s.kv[1] == ROPEKV_KV_BF16 && s.n_layout == 3);
    assert_true(!rk_layout_fits(ROPEKV_KV_FP8_TILE, ROPEKV_KV_SPLIT) &&
                rk_layout_fits(ROPEKV_KV_BF16, ROPEKV_KV_SPLIT));
    /* vLLM's writer maps amax to 448, and to 224 on gfx942's FNUZ bytes */
    assert_true(s.tile.scale == RK_TILE_F32 && s.tile.sat_ocp == 448.0f && s.tile.sat_fnuz == 224.0f);
    /* f32 scales: the spec names its readers, and sends the E8M0 readers to deepseek_v32_pow2 */
    assert_non_null(strstr(s.tile.readers, "FlashMLA sm_90"));
    assert_non_null(strstr(s.tile.readers, "deepseek_v32_pow2"));

    s = load_file(state, "deepseek_v32_pow2.lua");
    /* the same row with power-of-two scales, for every reader, E8M0 ones included; the tile row alone */
    assert_true(s.n_kv == 1 && s.kv[0] == ROPEKV_KV_FP8_TILE && s.tile.scale == RK_TILE_POW2 && s.tile.tile == 128);
    assert_true(s.tile.sat_ocp == 448.0f && s.tile.sat_fnuz == 224.0f && s.tile.row_bytes == 656);
    assert_true(s.n_qdt == 1 && s.q_dtypes[0] == ROPEKV_Q_BF16 && s.n_norms == 3);
    assert_non_null(strstr(s.tile.readers, "E8M0"));
    assert_non_null(strstr(s.tile.readers, "FlashMLA sm_100"));
    assert_true(s.n_norms == 3 && s.norm.weight == RK_NW_BF16 && s.norm.eps == 1e-6f && s.norm.round == RK_NR_TWICE);

    s = load_file(state, "deepseek_v2_lite.lua");
    assert_true(s.kv_lora_rank == 512 && s.rope_dim == 64 && s.cos_sin == RK_CS_BF16_SPLIT);
    assert_true(s.fp8.scale == RK_SCALE_MUL && s.n_q == 4);
    /* no kv_norm table: no norm variants, the policy all zeros */
    assert_true(s.n_norms == 1 && s.norms[0] == ROPEKV_NORM_NONE && s.norm.eps == 0.0f);

    s = load_file(state, "minicpm3_4b.lua");
    assert_true(s.kv_lora_rank == 256 && s.rope_dim == 32 && s.rope == RK_ROPE_NEOX);
    assert_true(s.cos_sin == RK_CS_F32_SPLIT && s.fp8.scale == RK_SCALE_NONE && s.fp8.rope_bf16);
    assert_true(s.n_q == 4 && s.q[1] == ROPEKV_Q_ZERO_COPY && s.q[3] == ROPEKV_Q_INPLACE);
    assert_string_equal(s.targets[0], "gfx90a"); /* the rows in specs/archs.lua's order */
}

/* ---- conversion: what loads ------------------------------------------------------------------- */
static void test_defaults(void **state) {
    static const char text[] = "return { name = 'm', kv_lora_rank = 64, qk_rope_head_dim = 16 }";
    rk_err err = {0};
    rk_spec s;
    assert_int_equal(rk_spec_load("specs/m.lua", text, strlen(text), *state, &s, &err), ROPEKV_OK);
    assert_string_equal(s.name, "m");
    assert_string_equal(s.description, "");
    assert_string_equal(s.file, "specs/m.lua");
    assert_true(s.rope == RK_ROPE_GPTJ && s.cos_sin == RK_CS_F32_CAT);
    /* every choice open: both index types, the row formats without a table of their own, every layout, op,
     * query dtype and q form, every row of the architecture table; no norm without a kv_norm table */
    assert_true(s.n_pos == 2 && s.pos[0] == ROPEKV_INDEX_INT64 && s.n_slot == 2 && s.slot[1] == ROPEKV_INDEX_INT32);
    assert_true(s.n_kv == 2 && s.kv[0] == ROPEKV_KV_BF16 && s.kv[1] == ROPEKV_KV_FP8_E4M3);
    assert_true(s.fp8.scale == RK_SCALE_MUL_RECIP && s.fp8.sat_ocp == 448.0f && s.fp8.sat_fnuz == 240.0f);
    assert_true(!s.fp8.rope_bf16 && s.negative_slot == RK_NEG_SKIP_KV && !s.sanitize);
    assert_true(s.n_q == 4 && s.q[0] == ROPEKV_Q_ABSORBED && s.n_qdt == 2 && s.n_layout == 3 && s.n_ops == 2);
    const rk_arch_table *archs = *state;
    assert_true(s.n_targets == archs->n && strcmp(s.targets[archs->n - 1], archs->a[archs->n - 1].name) == 0);
    assert_true(s.n_norms == 1 && s.norms[0] == ROPEKV_NORM_NONE);
    /* rope none leaves inplace out; an fp8_tile table opens the tile row; a kv_norm table the norms */
    static const char none[] = "return { name = 'm', kv_lora_rank = 64, qk_rope_head_dim = 16, rope = 'none',"
                               " fp8_tile = { tile = 32 }, kv_norm = { eps = 1e-5 } }";
    assert_int_equal(rk_spec_load("specs/m.lua", none, strlen(none), *state, &s, &err), ROPEKV_OK);
    assert_true(s.n_q == 3 && s.q[2] == ROPEKV_Q_NONE);
    assert_true(s.n_kv == 3 && s.kv[2] == ROPEKV_KV_FP8_TILE && s.n_norms == 3);
}

static void test_accepts(void **state) {
    rk_spec s = load_ok(state, "");
    assert_true(s.n_slot == 2 && s.n_targets == 2 && s.kv_lora_rank == 512);

    s = load_ok(state, "s.kv_lora_rank = 512.0  s.qk_rope_head_dim = 2^6");
    assert_true(s.kv_lora_rank == 512 && s.rope_dim == 64);
    s = load_ok(state, "s.kv_lora_rank = 8  s.qk_rope_head_dim = 8");
    assert_true(s.kv_lora_rank == 8 && s.rope_dim == 8);
    s = load_ok(state, "s.positions = 'int32'  s.targets = 'host'");
    assert_true(s.n_pos == 1 && s.pos[0] == ROPEKV_INDEX_INT32 && s.n_targets == 1);
    s = load_ok(state, "s.fp8.saturate.fnuz = 224  s.fp8.saturate.ocp = 240");
    assert_true(s.fp8.sat_fnuz == 224.0f && s.fp8.sat_ocp == 240.0f);
    s = load_ok(state, "s.fp8.saturate.ocp = 2^-9  s.fp8.saturate = { ocp = 2^-9 }");
    assert_true(s.fp8.sat_ocp == 0x1p-9f && s.fp8.sat_fnuz == 240.0f);
    s = load_ok(state, "s.fp8 = nil  s.description = nil");
    assert_true(s.fp8.scale == RK_SCALE_MUL_RECIP && s.description[0] == '\0');
    s = load_ok(state, "s.rope = 'none'  s.q_forms = { 'absorbed', 'zero_copy', 'none' }");
    assert_true(s.rope == RK_ROPE_NONE && s.n_q == 3);
    s = load_ok(state, "s.rope = 'neox'  s.qk_rope_head_dim = 48");
    assert_true(s.rope == RK_ROPE_NEOX && s.rope_dim == 48);
    /* R = 0: rope none (said, or by default), and the open lists leave out what holds or writes only the rope part */
    s = load_ok(state, "s.qk_rope_head_dim = 0  s.rope = nil  s.q_forms = nil  s.kv_layouts = nil");
    assert_true(s.rope_dim == 0 && s.rope == RK_ROPE_NONE);
    assert_true(s.n_q == 2 && s.q[0] == ROPEKV_Q_ABSORBED && s.q[1] == ROPEKV_Q_NONE);
    assert_true(s.n_layout == 2 && s.layouts[0] == ROPEKV_KV_FLAT && s.layouts[1] == ROPEKV_KV_PAGED);
    s = load_ok(state, "s.qk_rope_head_dim = 0  s.rope = 'none'  s.records = { 'glm_next_fp8' }");
    assert_true(s.rope_dim == 0 && s.n_records == 1 && s.records[0].R == 0 && s.records[0].row_bytes == 528);
    /* the allowed library functions work */
    s = load_ok(state, "local t = {} for _, v in ipairs({ 1, 2 }) do table.insert(t, v) end\n"
                       "assert(#t == 2 and select('#', 1, 2) == 2 and type(next) == 'function')\n"
                       "s.description = string.format('%d-%s', math.max(3, 4), ('x'):upper())\n"
                       "  .. tostring(tonumber('5')) .. _VERSION");
    assert_string_equal(s.description, "4-X5Lua 5.4");
    /* a caught memory error leaves a usable state */
    s = load_ok(state, "local ok = pcall(string.rep, 'x', 1 << 30) s.description = tostring(ok)");
    assert_string_equal(s.description, "false");
    /* metatables on the result are ignored: fields are read raw */
    s = load_ok(state, "s = setmetatable(s, { __index = function() error('no') end,\n"
                       "  __pairs = function() error('no') end })");
    assert_string_equal(s.name, "t");
    /* setmetatable and xpcall still work */
    s = load_ok(state, "local t = setmetatable({}, { __index = function() return 7 end })\n"
                       "local ok, m = xpcall(error, function(e) return 'h:' .. e end, 'x', 0)\n"
                       "assert(t.k == 7 and getmetatable(t) ~= nil and not ok and m == 'h:x')\n"
                       "assert(select('#', xpcall(function() return 1, 2 end, error)) == 3)");
    assert_string_equal(s.name, "t");
}

/* ---- the sandbox -------------------------------------------------------------------------------- */
static void test_sandbox_escapes(void **state) {
    static const fail_case c[] = {
        {"os.execute('touch /tmp/rk_sandbox_escape')", ROPEKV_ERR_SPEC_RUNTIME, "global 'os'"},
        {"io.open('/etc/passwd')", ROPEKV_ERR_SPEC_RUNTIME, "global 'io'"},
        {"require('os')", ROPEKV_ERR_SPEC_RUNTIME, "global 'require'"},
        {"load('return 1')", ROPEKV_ERR_SPEC_RUNTIME, "global 'load'"},
        {"loadstring('return 1')", ROPEKV_ERR_SPEC_RUNTIME, "global 'loadstring'"},
        {"dofile('/etc/passwd')", ROPEKV_ERR_SPEC_RUNTIME, "global 'dofile'"},
        {"loadfile('/etc/passwd')", ROPEKV_ERR_SPEC_RUNTIME, "global 'loadfile'"},
        {"string.dump(function() end)", ROPEKV_ERR_SPEC_RUNTIME, "field 'dump'"},
        {"('a'):rep(20):find(('a*'):rep(20)..'b')", ROPEKV_ERR_SPEC_RUNTIME, "method 'find'"},
        {"string.gsub('x', 'x', 'y')", ROPEKV_ERR_SPEC_RUNTIME, "field 'gsub'"},
        {";('x'):dump()", ROPEKV_ERR_SPEC_RUNTIME, "method 'dump'"},
        {"getmetatable('').__index.dump(function() end)", ROPEKV_ERR_SPEC_RUNTIME, "field 'dump'"},
        {"collectgarbage('count')", ROPEKV_ERR_SPEC_RUNTIME, "global 'collectgarbage'"},
        {"print('hello')", ROPEKV_ERR_SPEC_RUNTIME, "global 'print'"},
        {"debug.getregistry()", ROPEKV_ERR_SPEC_RUNTIME, "global 'debug'"},
        {"package.loadlib('libc.so.6', 'system')", ROPEKV_ERR_SPEC_RUNTIME, "global 'package'"},
        {"coroutine.wrap(print)", ROPEKV_ERR_SPEC_RUNTIME, "global 'coroutine'"},
        {"utf8.char(72)", ROPEKV_ERR_SPEC_RUNTIME, "global 'utf8'"},
        {"_G.os.execute('true')", ROPEKV_ERR_SPEC_RUNTIME, "global '_G'"},
        {"rawget(_ENV, 'os').execute('true')", ROPEKV_ERR_SPEC_RUNTIME, "attempt to index a nil value"},
        {"math.random()", ROPEKV_ERR_SPEC_RUNTIME, "field 'random'"},
        /* finalizers and handlers of hook errors run with hooks off: no endless loop may hide there */
        {"setmetatable({}, { __gc = function() while true do end end })", ROPEKV_ERR_SPEC_RUNTIME,
         "__gc metamethods are not allowed"},
        {"local mt = { __gc = true } setmetatable({}, mt)", ROPEKV_ERR_SPEC_RUNTIME,
         "__gc metamethods are not allowed"},
        {"xpcall(function() while true do end end, function() while true do end end)", ROPEKV_ERR_SPEC_LIMIT,
         "instruction limit exceeded"},
        {"while true do end", ROPEKV_ERR_SPEC_LIMIT, "instruction limit exceeded"},
        {"while true do pcall(function() while true do end end) end", ROPEKV_ERR_SPEC_LIMIT,
         "instruction limit exceeded"},
        {"do return pcall(function() while true do end end) end", ROPEKV_ERR_SPEC_LIMIT, "instruction limit exceeded"},
        {"string.rep('x', 1 << 30)", ROPEKV_ERR_SPEC_LIMIT, "memory limit exceeded"},
        {"local s1 = ('x'):rep(1 << 20) while true do s1 = s1 .. s1 end", ROPEKV_ERR_SPEC_LIMIT,
         "memory limit exceeded"},
        {"local t, x = {}, string.rep('x', 4096) while true do t[#t + 1] = x .. #t end", ROPEKV_ERR_SPEC_LIMIT,
         "memory limit exceeded"},
        {"local t = {} for i = 1, 1e7 do t[i] = {} end", ROPEKV_ERR_SPEC_LIMIT, "limit exceeded"},
    };
    run_spec_cases(state, c, N(c));
}

/* The environment holds exactly the allowed names. */
static void test_sandbox_env(void **state) {
    rk_spec s =
        load_ok(state, "local allowed = { assert = 1, error = 1, ipairs = 1, next = 1, pairs = 1, pcall = 1,\n"
                       "  select = 1, tonumber = 1, tostring = 1, type = 1, xpcall = 1, rawequal = 1, rawget = 1,\n"
                       "  rawlen = 1, rawset = 1, setmetatable = 1, getmetatable = 1, _VERSION = 1, string = 1,\n"
                       "  table = 1, math = 1 }\n"
                       "local n = 0\n"
                       "for k in pairs(_ENV) do assert(allowed[k], 'unexpected global ' .. tostring(k)) n = n + 1 end\n"
                       "assert(n == 21, 'missing globals')\n"
                       "assert(string.dump == nil and getmetatable('').__index.dump == nil)\n"
                       "assert(math.random == nil and math.randomseed == nil and math.floor ~= nil)\n"
                       "assert(table.concat ~= nil and string.rep ~= nil)");
    assert_string_equal(s.name, "t");
}

typedef struct bytes {
    char p[4096];
    size_t n;
} bytes;

static int dump_writer(lua_State *L, const void *p, size_t sz, void *ud) {
    (void)L;
    bytes *b = ud;
    if (sz > sizeof b->p - b->n) return 1;
    memcpy(b->p + b->n, p, sz);
    b->n += sz;
    return 0;
}

static void test_binary_chunks(void **state) {
    /* a real binary chunk, made by an ordinary (unsandboxed) state */
    lua_State *L = luaL_newstate();
    assert_non_null(L);
    assert_int_equal(luaL_loadstring(L, "return { name = 't' }"), LUA_OK);
    bytes b = {{0}, 0};
    assert_int_equal(lua_dump(L, dump_writer, &b, 0), 0);
    lua_close(L);
    assert_true(b.n > 4 && memcmp(b.p, LUA_SIGNATURE, 4) == 0);
    rk_err err = {0};
    rk_spec s;
    int rc = rk_spec_load(TFILE, b.p, b.n, *state, &s, &err);
    check_failure("(dumped chunk)", rc, &err, ROPEKV_ERR_SPEC_SYNTAX, "binary chunks are not allowed");

    static const char crafted[] = "\x1bLua\x54\x00\x19\x93\r\n\x1a\n";
    rc = rk_spec_load(TFILE, crafted, sizeof crafted - 1, *state, &s, &err);
    check_failure("(crafted chunk)", rc, &err, ROPEKV_ERR_SPEC_SYNTAX, "binary chunks are not allowed");
    rc = rk_archs_load(TFILE, crafted, sizeof crafted - 1, NULL, &err);
    check_failure("(crafted archs)", rc, &err, ROPEKV_ERR_SPEC_SYNTAX, "binary chunks are not allowed");
}

static void test_lua_errors(void **state) {
    static const fail_case c[] = {
        {"local x = {", ROPEKV_ERR_SPEC_SYNTAX, TFILE ":18: unexpected symbol near 'return'"},
        {"x = 'open", ROPEKV_ERR_SPEC_SYNTAX, TFILE ":17: unfinished string"},
        {"local = 1", ROPEKV_ERR_SPEC_SYNTAX, "<name> expected"},
        {"error('boom')", ROPEKV_ERR_SPEC_RUNTIME, TFILE ":17: boom"},
        {"error('boom')", ROPEKV_ERR_SPEC_RUNTIME, "stack traceback:"},
        {"error('plain', 0)", ROPEKV_ERR_SPEC_RUNTIME, TFILE ": plain"},
        {"error({})", ROPEKV_ERR_SPEC_RUNTIME, "(error object is a table value)"},
        {"error()", ROPEKV_ERR_SPEC_RUNTIME, "(error object is a nil value)"},
        {"local x = nil + 1", ROPEKV_ERR_SPEC_RUNTIME, "attempt to perform arithmetic on a nil value"},
        {"s = 42", ROPEKV_ERR_SPEC_INVALID, TFILE ": the chunk must return a table, got number"},
        {"s = nil", ROPEKV_ERR_SPEC_INVALID, "must return a table, got nil"},
    };
    run_spec_cases(state, c, N(c));

    /* deep recursion ends in some error, never a crash */
    rk_err err = {0};
    rk_spec s;
    int rc = load_spec_with(*state, "local function f() return 1 + f() end f()", &s, &err);
    assert_true(rc == ROPEKV_ERR_SPEC_LIMIT || rc == ROPEKV_ERR_SPEC_RUNTIME);
    assert_int_equal(strncmp(err.msg, TFILE, strlen(TFILE)), 0);
}

/* ---- conversion: what is refused ------------------------------------------------------------------ */
static void test_unknown_keys(void **state) {
    static const fail_case c[] = {
        {"s.kv_lora_rnak = 512", ROPEKV_ERR_SPEC_INVALID, TFILE ": unknown key 'kv_lora_rnak' (allowed: name,"},
        {"s[1] = 5", ROPEKV_ERR_SPEC_INVALID, TFILE ": unknown key [1]"},
        {"s[true] = 5", ROPEKV_ERR_SPEC_INVALID, "unknown key [true]"},
        {"s[{}] = 5", ROPEKV_ERR_SPEC_INVALID, "unknown key of type table"},
        {"s.fp8.saturat = {}", ROPEKV_ERR_SPEC_INVALID, TFILE ": fp8: unknown key 'saturat'"},
        {"s.fp8.saturate.e5m2 = 57344", ROPEKV_ERR_SPEC_INVALID,
         "fp8.saturate: unknown key 'e5m2' (allowed: ocp, fnuz)"},
        {"s['name\\0x'] = 1", ROPEKV_ERR_SPEC_INVALID, "unknown key 'name\\x00x'"},
    };
    run_spec_cases(state, c, N(c));
}

static void test_scalars(void **state) {
    static const fail_case c[] = {
        {"s.name = nil", ROPEKV_ERR_SPEC_INVALID, TFILE ": name: required"},
        {"s.name = 'DeepSeek-V3'", ROPEKV_ERR_SPEC_INVALID, "name: must match [a-z0-9_]+, got 'DeepSeek-V3'"},
        {"s.name = ''", ROPEKV_ERR_SPEC_INVALID, "name: must match [a-z0-9_]+"},
        {"s.name = 42", ROPEKV_ERR_SPEC_INVALID, "name: must be a string, got number"},
        {"s.name = string.rep('a', 64)", ROPEKV_ERR_SPEC_INVALID, "name: too long (at most 63 characters, got 64)"},
        {"s.name = 'a\\0b'", ROPEKV_ERR_SPEC_INVALID, "name: must not contain NUL bytes"},
        {"s.description = string.rep('d', 256)", ROPEKV_ERR_SPEC_INVALID, "description: too long"},
        {"s.description = {}", ROPEKV_ERR_SPEC_INVALID, "description: must be a string, got table"},
        {"s.kv_lora_rank = nil", ROPEKV_ERR_SPEC_INVALID, "kv_lora_rank: required"},
        {"s.kv_lora_rank = '512'", ROPEKV_ERR_SPEC_INVALID, "kv_lora_rank: must be an integer, got string"},
        {"s.kv_lora_rank = 3.5", ROPEKV_ERR_SPEC_INVALID, "kv_lora_rank: must be an integer, got 3.5"},
        {"s.kv_lora_rank = 1/0", ROPEKV_ERR_SPEC_INVALID, "kv_lora_rank: must be an integer, got inf"},
        {"s.kv_lora_rank = 0", ROPEKV_ERR_SPEC_INVALID, "kv_lora_rank: must be in 8..8192, got 0"},
        {"s.kv_lora_rank = 16384", ROPEKV_ERR_SPEC_INVALID, "kv_lora_rank: must be in 8..8192, got 16384"},
        {"s.kv_lora_rank = 1 << 40", ROPEKV_ERR_SPEC_INVALID, "kv_lora_rank: must be in 8..8192, got 1099511627776"},
        {"s.kv_lora_rank = 500", ROPEKV_ERR_SPEC_INVALID, "kv_lora_rank: must be a multiple of 8"},
        {"s.qk_rope_head_dim = nil", ROPEKV_ERR_SPEC_INVALID, "qk_rope_head_dim: required"},
        {"s.qk_rope_head_dim = 63", ROPEKV_ERR_SPEC_INVALID, TFILE ": qk_rope_head_dim: must be even, got 63"},
        {"s.qk_rope_head_dim = 36", ROPEKV_ERR_SPEC_INVALID,
         "qk_rope_head_dim: must be a multiple of 8 (one 16-byte vector of bf16), got 36"},
        {"s.qk_rope_head_dim = 4", ROPEKV_ERR_SPEC_INVALID,
         "qk_rope_head_dim: must be a multiple of 8 (one 16-byte vector of bf16), got 4"},
        {"s.qk_rope_head_dim = 7", ROPEKV_ERR_SPEC_INVALID, "qk_rope_head_dim: must be even, got 7"},
        {"s.qk_rope_head_dim = -8", ROPEKV_ERR_SPEC_INVALID, "qk_rope_head_dim: must be in 0..1024, got -8"},
        {"s.qk_rope_head_dim = 2048", ROPEKV_ERR_SPEC_INVALID, "qk_rope_head_dim: must be in 0..1024, got 2048"},
        /* R = 0: no rope part, nothing to rotate, nothing that holds or writes only the rope part */
        {"s.qk_rope_head_dim = 0", ROPEKV_ERR_SPEC_INVALID,
         TFILE ": rope: 'gptj' with qk_rope_head_dim 0: R = 0: no rope part to rotate (say 'none', or leave rope out)"},
        {"s.qk_rope_head_dim = 0  s.rope = 'neox'", ROPEKV_ERR_SPEC_INVALID,
         "rope: 'neox' with qk_rope_head_dim 0: R = 0: no rope part to rotate"},
        {"s.qk_rope_head_dim = 0  s.rope = nil  s.q_forms = { 'absorbed', 'zero_copy' }", ROPEKV_ERR_SPEC_INVALID,
         TFILE ": q_forms: 'zero_copy': R = 0: no rope part (q form zero_copy writes only the query's rope part)"},
        {"s.qk_rope_head_dim = 0  s.rope = 'none'  s.q_forms = { 'inplace' }", ROPEKV_ERR_SPEC_INVALID,
         "q_forms: 'inplace': R = 0: no rope part (q form inplace writes only the query's rope part)"},
        {"s.qk_rope_head_dim = 0  s.rope = nil  s.kv_layouts = { 'flat', 'split' }", ROPEKV_ERR_SPEC_INVALID,
         TFILE ": kv_layouts: 'split': R = 0: no rope part (layout split keeps it in a cache of its own)"},
        {"s.qk_rope_head_dim = 0  s.rope = nil  s.records = { 'fp8_ds_mla' }", ROPEKV_ERR_SPEC_INVALID,
         "record 'fp8_ds_mla' is for L = 512, R = 64; the spec has kv_lora_rank 512, qk_rope_head_dim 0"},
        {"s.rope = 'neox'  s.qk_rope_head_dim = 40", ROPEKV_ERR_SPEC_INVALID,
         "qk_rope_head_dim: must be a multiple of 16 with rope 'neox'"},
        {"s.rope = 'rotate_half'", ROPEKV_ERR_SPEC_INVALID,
         "rope: unknown value 'rotate_half' (one of: gptj, neox, none)"},
        {"s.rope = true", ROPEKV_ERR_SPEC_INVALID, "rope: must be a string, got boolean"},
        {"s.cos_sin = 'f16_cat'", ROPEKV_ERR_SPEC_INVALID,
         "cos_sin: unknown value 'f16_cat' (one of: f32_cat, f32_split, bf16_split)"},
        {"s.negative_slot = 'skip'", ROPEKV_ERR_SPEC_INVALID,
         "negative_slot: unknown value 'skip' (one of: skip_kv, skip_all)"},
        {"s.sanitize = 'yes'", ROPEKV_ERR_SPEC_INVALID, "sanitize: must be a boolean (true or false), got string"},
        {"s.sanitize = 0", ROPEKV_ERR_SPEC_INVALID, "sanitize: must be a boolean (true or false), got number"},
    };
    run_spec_cases(state, c, N(c));
}

static void test_lists(void **state) {
    static const fail_case c[] = {
        {"s.positions = {}", ROPEKV_ERR_SPEC_INVALID, "positions: must not be empty"},
        {"s.positions = { 'int32', 'int32' }", ROPEKV_ERR_SPEC_INVALID,
         "positions[2]: duplicate 'int32' (also positions[1])"},
        {"s.positions = { 'int16' }", ROPEKV_ERR_SPEC_INVALID,
         "positions[1]: unknown value 'int16' (one of: int64, int32)"},
        {"s.positions = { 'int32', x = 'int64' }", ROPEKV_ERR_SPEC_INVALID,
         "positions: must be a list (a sequence without holes), found key 'x'"},
        {"s.positions = { [1] = 'int32', [3] = 'int64' }", ROPEKV_ERR_SPEC_INVALID, "positions: must be a list"},
        {"s.positions = { [2] = 'int32' }", ROPEKV_ERR_SPEC_INVALID, "positions: must be a list"},
        {"s.positions = { [1.5] = 'int32' }", ROPEKV_ERR_SPEC_INVALID, "found key [1.5]"},
        {"s.positions = 64", ROPEKV_ERR_SPEC_INVALID,
         "positions: must be a list of strings (or one string), got number"},
        {"s.positions = { 64 }", ROPEKV_ERR_SPEC_INVALID, "positions[1]: must be a string, got number"},
        {"s.slots = { 'int64', 'int32', 'int64' }", ROPEKV_ERR_SPEC_INVALID, "slots: at most 2 entries, got 3"},
        {"s.slots = { 'int64', 'int64' }", ROPEKV_ERR_SPEC_INVALID, "slots[2]: duplicate 'int64'"},
        {"s.kv_dtypes = { 'fp16' }", ROPEKV_ERR_SPEC_INVALID,
         "kv_dtypes[1]: unknown value 'fp16' (one of: bf16, fp8_e4m3, fp8_tile)"},
        {"s.kv_dtypes = {}", ROPEKV_ERR_SPEC_INVALID, "kv_dtypes: must not be empty"},
        {"s.q_forms = { 'absorbed', 'absorbed' }", ROPEKV_ERR_SPEC_INVALID, "q_forms[2]: duplicate 'absorbed'"},
        {"s.q_forms = { 'decode' }", ROPEKV_ERR_SPEC_INVALID,
         "q_forms[1]: unknown value 'decode' (one of: absorbed, zero_copy, inplace, none)"},
        {"s.q_forms = {}", ROPEKV_ERR_SPEC_INVALID, "q_forms: must not be empty"},
        {"s.rope = 'none'  s.q_forms = { 'absorbed', 'inplace' }", ROPEKV_ERR_SPEC_INVALID,
         "q_forms: 'inplace' with rope 'none' has nothing to do"},
    };
    run_spec_cases(state, c, N(c));
}

/* Every list-valued key at every length 0..N+1, N the number of values its enum has: 0 and N+1 are refused by name,
 * 1..N load and read back exactly as listed (a list longer than its array in rk_spec used to land in the next
 * field). Under the asan preset UBSan's bounds check runs this too. */
typedef struct list_key {
    const char *key;
    const rk_enum *e;
    const char *extra; /* statements a valid spec needs with any of this key's values */
} list_key;

static int spec_list(const rk_spec *s, const char *key, int *out) {
#define LIST_CASE(name, arr, count)                                 \
    if (strcmp(key, name) == 0) {                                   \
        for (int i = 0; i < s->count; i++) out[i] = (int)s->arr[i]; \
        return s->count;                                            \
    }
    LIST_CASE("positions", pos, n_pos)
    LIST_CASE("slots", slot, n_slot)
    LIST_CASE("kv_dtypes", kv, n_kv)
    LIST_CASE("kv_layouts", layouts, n_layout)
    LIST_CASE("ops", ops, n_ops)
    LIST_CASE("q_dtypes", q_dtypes, n_qdt)
    LIST_CASE("q_forms", q, n_q)
    LIST_CASE("norms", norms, n_norms)
#undef LIST_CASE
    return -1;
}

static void test_list_lengths(void **state) {
    static const list_key keys[] = {
        {"positions", &rk_index_enum, ""}, {"slots", &rk_index_enum, ""},
        {"kv_dtypes", &rk_kv_enum, ""},    {"kv_layouts", &rk_layout_enum, ""},
        {"ops", &rk_op_enum, ""},          {"q_dtypes", &rk_qdtype_enum, ""},
        {"q_forms", &rk_qform_enum, ""},   {"norms", &rk_norm_enum, "s.kv_norm = { eps = 1e-6 }"},
    };
    for (size_t k = 0; k < N(keys); k++) {
        const rk_enum *e = keys[k].e;
        for (int len = 0; len <= e->n + 1; len++) {
            char change[512];
            int at = snprintf(change, sizeof change, "s.%s = {", keys[k].key);
            for (int i = 0; i < len; i++)
                at += snprintf(change + at, sizeof change - (size_t)at, "%s'%s'", i ? ", " : " ", e->v[i % e->n].name);
            /* what the key's values past the first need (norms: the kv_norm table); the base lists neither fp8_tile
             * nor split, which refuse each other */
            snprintf(change + at, sizeof change - (size_t)at, " } %s", len > 1 && len <= e->n ? keys[k].extra : "");
            rk_err err = {0};
            rk_spec s;
            memset(&s, 0xa5, sizeof s);
            int rc = load_spec_with(*state, change, &s, &err);
            if (len == 0) {
                check_failure(change, rc, &err, ROPEKV_ERR_SPEC_INVALID, "must not be empty");
                continue;
            }
            if (len > e->n) {
                char want[64];
                snprintf(want, sizeof want, "%s: at most %d entries, got %d", keys[k].key, e->n, len);
                check_failure(change, rc, &err, ROPEKV_ERR_SPEC_INVALID, want);
                continue;
            }
            if (rc != ROPEKV_OK) fprintf(stderr, "case: %s\nmsg:  %s\n", change, err.msg);
            assert_int_equal(rc, ROPEKV_OK);
            int got[16];
            assert_int_equal(spec_list(&s, keys[k].key, got), len);
            for (int i = 0; i < len; i++) assert_int_equal(got[i], e->v[i].value);
        }
    }
}

static void test_fp8(void **state) {
    static const fail_case c[] = {
        {"s.fp8 = 'mul'", ROPEKV_ERR_SPEC_INVALID, "fp8: must be a table, got string"},
        {"s.fp8.scale = 'divide'", ROPEKV_ERR_SPEC_INVALID,
         "fp8.scale: unknown value 'divide' (one of: none, mul_recip, div, mul)"},
        {"s.fp8.rope_bf16_round = 1", ROPEKV_ERR_SPEC_INVALID,
         "fp8.rope_bf16_round: must be a boolean (true or false), got number"},
        {"s.fp8.saturate = 240", ROPEKV_ERR_SPEC_INVALID, "fp8.saturate: must be a table, got number"},
        {"s.fp8.saturate.fnuz = 250", ROPEKV_ERR_SPEC_INVALID,
         "fp8.saturate.fnuz: must be at most 240 (the e4m3 FNUZ maximum), got 250"},
        {"s.fp8.saturate.fnuz = 448", ROPEKV_ERR_SPEC_INVALID, "fp8.saturate.fnuz: must be at most 240"},
        {"s.fp8.saturate.ocp = 480", ROPEKV_ERR_SPEC_INVALID,
         "fp8.saturate.ocp: must be at most 448 (the e4m3 OCP maximum), got 480"},
        {"s.fp8.saturate.fnuz = 230", ROPEKV_ERR_SPEC_INVALID,
         "fp8.saturate.fnuz: 230 is not an e4m3 FNUZ value (nearest: 224 and 240)"},
        {"s.fp8.saturate.ocp = 300", ROPEKV_ERR_SPEC_INVALID,
         "fp8.saturate.ocp: 300 is not an e4m3 OCP value (nearest: 288 and 320)"},
        {"s.fp8.saturate.ocp = 0.1", ROPEKV_ERR_SPEC_INVALID, "0.1 is not an e4m3 OCP value"},
        {"s.fp8.saturate.ocp = 0", ROPEKV_ERR_SPEC_INVALID, "fp8.saturate.ocp: must be positive, got 0"},
        {"s.fp8.saturate.ocp = -448", ROPEKV_ERR_SPEC_INVALID, "fp8.saturate.ocp: must be positive, got -448"},
        {"s.fp8.saturate.ocp = 0/0", ROPEKV_ERR_SPEC_INVALID, "fp8.saturate.ocp: must be finite"},
        {"s.fp8.saturate.fnuz = 1/0", ROPEKV_ERR_SPEC_INVALID, "fp8.saturate.fnuz: must be finite"},
        {"s.fp8.saturate.ocp = '448'", ROPEKV_ERR_SPEC_INVALID, "fp8.saturate.ocp: must be a number, got string"},
        {"s.fp8.matches = 7", ROPEKV_ERR_SPEC_INVALID, "fp8.matches: must be a string, got number"},
        /* the query's policy: the same table, its own key */
        {"s.q_fp8 = true", ROPEKV_ERR_SPEC_INVALID, "q_fp8: must be a table, got boolean"},
        {"s.q_fp8 = { scale = 'recip' }", ROPEKV_ERR_SPEC_INVALID,
         "q_fp8.scale: unknown value 'recip' (one of: none, mul_recip, div, mul)"},
        {"s.q_fp8 = { saturate = { fnuz = 230 } }", ROPEKV_ERR_SPEC_INVALID,
         "q_fp8.saturate.fnuz: 230 is not an e4m3 FNUZ value"},
        {"s.q_fp8 = { round = true }", ROPEKV_ERR_SPEC_INVALID, "q_fp8: unknown key 'round'"},
        {"s.q_fp8 = { matches = string.rep('x', 200) }", ROPEKV_ERR_SPEC_INVALID, "q_fp8.matches: too long"},
        {"s.q_dtypes = { 'fp16' }", ROPEKV_ERR_SPEC_INVALID,
         "q_dtypes[1]: unknown value 'fp16' (one of: bf16, fp8_e4m3)"},
        {"s.q_dtypes = { 'bf16', 'bf16' }", ROPEKV_ERR_SPEC_INVALID, "q_dtypes[2]: duplicate 'bf16'"},
        {"s.q_dtypes = {}", ROPEKV_ERR_SPEC_INVALID, "q_dtypes: must not be empty"},
    };
    run_spec_cases(state, c, N(c));
}

/* The fp8_tile row: its table, read and checked only when kv_dtypes lists it; the read-back op's table; ops. */
static void test_fp8_tile(void **state) {
    static const fail_case c[] = {
        {"s.fp8_tile = { tile = 64 }", ROPEKV_ERR_SPEC_INVALID, "fp8_tile: kv_dtypes does not list 'fp8_tile'"},
        {"s.kv_dtypes = { 'fp8_tile' }  s.fp8_tile = { tile = 96 }", ROPEKV_ERR_SPEC_INVALID,
         "fp8_tile.tile: must be 8 times a power of two"},
        {"s.kv_dtypes = { 'fp8_tile' }  s.fp8_tile = { tile = 512 }", ROPEKV_ERR_SPEC_INVALID,
         "fp8_tile.tile: must be in 8..256, got 512"},
        {"s.kv_lora_rank = 448  s.kv_dtypes = { 'fp8_tile' }", ROPEKV_ERR_SPEC_INVALID,
         "fp8_tile.tile: must divide kv_lora_rank (448), got 128"},
        {"s.kv_dtypes = { 'fp8_tile' }  s.fp8_tile = { scale = 'e8m0' }", ROPEKV_ERR_SPEC_INVALID,
         "fp8_tile.scale: unknown value 'e8m0' (one of: f32, pow2)"},
        {"s.kv_dtypes = { 'fp8_tile' }  s.fp8_tile = { scales_at = 510 }", ROPEKV_ERR_SPEC_INVALID,
         "fp8_tile.scales_at: must be a multiple of 4"},
        {"s.kv_dtypes = { 'fp8_tile' }  s.fp8_tile = { scales_at = 256 }", ROPEKV_ERR_SPEC_INVALID,
         "fp8_tile.scales_at: 256 overlaps the latent's fp8 bytes [0, 512)"},
        {"s.kv_dtypes = { 'fp8_tile' }  s.fp8_tile = { rope_at = 520 }", ROPEKV_ERR_SPEC_INVALID,
         "fp8_tile.rope_at: must be a multiple of 16"},
        {"s.kv_dtypes = { 'fp8_tile' }  s.fp8_tile = { rope_at = 512 }", ROPEKV_ERR_SPEC_INVALID,
         "fp8_tile.rope_at: the rope part [512, 640) overlaps the scales [512, 528)"},
        {"s.kv_dtypes = { 'fp8_tile' }  s.fp8_tile = { saturate = { ocp = 500 } }", ROPEKV_ERR_SPEC_INVALID,
         "fp8_tile.saturate.ocp: must be at most 448"},
        {"s.kv_dtypes = { 'fp8_tile' }  s.fp8_tile = { where = 1 }", ROPEKV_ERR_SPEC_INVALID,
         "fp8_tile: unknown key 'where'"},
        {"s.kv_dtypes = { 'fp8_tile' }  s.fp8_tile = { readers = string.rep('x', 256) }", ROPEKV_ERR_SPEC_INVALID,
         "fp8_tile.readers: too long (at most 255 characters, got 256)"},
        {"s.kv_dtypes = { 'fp8_tile' }  s.fp8_tile = { readers = { 'FlashMLA' } }", ROPEKV_ERR_SPEC_INVALID,
         "fp8_tile.readers: must be a string, got table"},
        {"s.kv_dtypes = { 'fp8_tile' }  s.kv_layouts = { 'flat', 'split' }", ROPEKV_ERR_SPEC_INVALID,
         "kv_layouts: 'split' with kv dtype 'fp8_tile'"},
        {"s.ops = { 'write', 'gather' }", ROPEKV_ERR_SPEC_INVALID,
         "ops[2]: unknown value 'gather' (one of: write, read)"},
        {"s.read = { negative_slot = 'nan' }", ROPEKV_ERR_SPEC_INVALID,
         "read.negative_slot: unknown value 'nan' (one of: zero, skip)"},
        {"s.read = { zeros = true }", ROPEKV_ERR_SPEC_INVALID, "read: unknown key 'zeros'"},
    };
    run_spec_cases(state, c, N(c));
    /* the defaults: DeepSeek-V3.2's 656-byte row; rows of other shapes put the rope part after the scales */
    rk_spec s = load_ok(state, "s.kv_dtypes = { 'fp8_tile', 'bf16' }");
    assert_true(s.tile.tile == 128 && s.tile.scale == RK_TILE_F32 && s.tile.sat_ocp == 448.0f &&
                s.tile.sat_fnuz == 240.0f);
    assert_true(s.tile.scales_at == 512 && s.tile.rope_at == 528 && s.tile.row_bytes == 656);
    assert_true(s.n_ops == 2 && s.ops[0] == ROPEKV_OP_WRITE && s.ops[1] == ROPEKV_OP_READ &&
                s.read_neg == RK_READ_ZERO);
    assert_string_equal(s.tile.readers, "");
    s = load_ok(state, "s.kv_dtypes = { 'fp8_tile' }  s.fp8_tile = { tile = 64, scale = 'pow2', rope_at = 768,"
                       " scales_at = 896, readers = 'an E8M0 reader' }  s.ops = { 'read' }"
                       "  s.read = { negative_slot = 'skip' }");
    assert_true(s.tile.tile == 64 && s.tile.scale == RK_TILE_POW2 && s.tile.row_bytes == 928);
    assert_string_equal(s.tile.readers, "an E8M0 reader");
    assert_true(s.n_ops == 1 && s.ops[0] == ROPEKV_OP_READ && s.read_neg == RK_READ_SKIP);
    s = load_ok(state, "s.kv_lora_rank = 256  s.qk_rope_head_dim = 32  s.kv_dtypes = { 'fp8_tile' }"
                       "  s.fp8_tile = { tile = 32 }");
    assert_true(s.tile.scales_at == 256 && s.tile.rope_at == 288 && s.tile.row_bytes == 352);
}

/* The fused kv_a RMSNorm: `norms` (none, rms, rms_out; default every one with a kv_norm table, else none) and the `kv_norm` table that rms and rms_out
 * need (eps required, in (0, 1]; weight bf16 or f32; rounding twice or once), refused without them; the sum's tree
 * over 16-byte chunks needs kv_lora_rank / 8 a power of two. Each refusal names the key. */
static void test_kv_norm(void **state) {
#define KVN "s.norms = { 'none', 'rms' }  "
    static const fail_case c[] = {
        /* the table with norms narrowed to none, and the other way round (the table alone opens every norm) */
        {"s.norms = { 'none' }  s.kv_norm = { eps = 1e-6 }", ROPEKV_ERR_SPEC_INVALID,
         "kv_norm: norms lists neither 'rms' nor 'rms_out'"},
        {"s.norms = { 'rms' }", ROPEKV_ERR_SPEC_INVALID,
         "kv_norm: required when norms lists 'rms' or 'rms_out' (at least its eps)"},
        {"s.norms = { 'none', 'rms_out' }", ROPEKV_ERR_SPEC_INVALID, "kv_norm: required when norms lists"},
        /* eps: required, a number, in (0, 1] and not below the smallest float */
        {KVN "s.kv_norm = { weight = 'bf16' }", ROPEKV_ERR_SPEC_INVALID, "kv_norm.eps: required (a number)"},
        {KVN "s.kv_norm = { eps = 0 }", ROPEKV_ERR_SPEC_INVALID, "kv_norm.eps: must be in (0, 1]"},
        {KVN "s.kv_norm = { eps = 0 }", ROPEKV_ERR_SPEC_INVALID, "got 0"},
        {KVN "s.kv_norm = { eps = -1e-6 }", ROPEKV_ERR_SPEC_INVALID, "kv_norm.eps: must be in (0, 1]"},
        {KVN "s.kv_norm = { eps = -1e-6 }", ROPEKV_ERR_SPEC_INVALID, "got -1e-06"},
        {KVN "s.kv_norm = { eps = 1.5 }", ROPEKV_ERR_SPEC_INVALID, "kv_norm.eps: must be in (0, 1]"},
        {KVN "s.kv_norm = { eps = 1 + 2^-52 }", ROPEKV_ERR_SPEC_INVALID, "kv_norm.eps: must be in (0, 1]"},
        {KVN "s.kv_norm = { eps = 0/0 }", ROPEKV_ERR_SPEC_INVALID, "kv_norm.eps: must be in (0, 1]"},
        {KVN "s.kv_norm = { eps = 1/0 }", ROPEKV_ERR_SPEC_INVALID, "kv_norm.eps: must be in (0, 1]"},
        {KVN "s.kv_norm = { eps = 1e-50 }", ROPEKV_ERR_SPEC_INVALID, "kv_norm.eps: must be in (0, 1]"},
        {KVN "s.kv_norm = { eps = 1e-50 }", ROPEKV_ERR_SPEC_INVALID, "above the smallest float, got 1e-50"},
        {KVN "s.kv_norm = { eps = '1e-6' }", ROPEKV_ERR_SPEC_INVALID, "kv_norm.eps: must be a number, got string"},
        {KVN "s.kv_norm = { eps = true }", ROPEKV_ERR_SPEC_INVALID, "kv_norm.eps: must be a number, got boolean"},
        /* the other keys */
        {KVN "s.kv_norm = { eps = 1e-6, epsilon = 1e-6 }", ROPEKV_ERR_SPEC_INVALID,
         "kv_norm: unknown key 'epsilon' (allowed: weight, eps, rounding, over, matches)"},
        /* a norm over the whole head (DeepSeek-V4): a power of two of chunks, a wave's lanes or more; no rms_out */
        {KVN "s.kv_norm = { eps = 1e-6, over = 'head' }", ROPEKV_ERR_SPEC_INVALID,
         "kv_norm: over 'head' needs kv_lora_rank + qk_rope_head_dim a power of two of at least 512"},
        {KVN "s.kv_norm = { eps = 1e-6, over = 'head' }", ROPEKV_ERR_SPEC_INVALID, "got 576"},
        {KVN "s.kv_lora_rank = 192  s.kv_norm = { eps = 1e-6, over = 'head' }", ROPEKV_ERR_SPEC_INVALID, "got 256"},
        {KVN "s.kv_norm = { eps = 1e-6, over = 'rows' }", ROPEKV_ERR_SPEC_INVALID,
         "kv_norm.over: unknown value 'rows' (one of: latent, head)"},
        {"s.kv_lora_rank = 448  s.norms = { 'none', 'rms_out' }  s.kv_norm = { eps = 1e-6, over = 'head' }",
         ROPEKV_ERR_SPEC_INVALID, "norms: 'rms_out' with kv_norm.over 'head'"},
        {KVN "s.kv_lora_rank = 448  s.kv_norm = { eps = 1e-6 }", ROPEKV_ERR_SPEC_INVALID,
         "norms: the fused RMSNorm needs kv_lora_rank / 8 a power of two"},
        /* a norm over the head lays the lanes out row by row: the forms of whole query rows only */
        {KVN "s.kv_lora_rank = 448  s.q_forms = { 'absorbed', 'inplace' }  s.kv_norm = { eps = 1e-6, over = 'head' }",
         ROPEKV_ERR_SPEC_INVALID, "q_forms: 'inplace' with kv_norm.over 'head': the norm needs the lanes row by row"},
        {KVN "s.kv_lora_rank = 448  s.q_forms = { 'zero_copy' }  s.kv_norm = { eps = 1e-6, over = 'head' }",
         ROPEKV_ERR_SPEC_INVALID, "q_forms: 'zero_copy' with kv_norm.over 'head'"},
        /* the query heads' norm */
        {"s.q_norm = { eps = 1e-6 }", ROPEKV_ERR_SPEC_INVALID,
         "q_norm: the query norm needs kv_lora_rank + qk_rope_head_dim a power of two of at least 512"},
        {"s.kv_lora_rank = 448  s.q_norm = { }", ROPEKV_ERR_SPEC_INVALID, "q_norm.eps: required (a number)"},
        {"s.kv_lora_rank = 448  s.q_norm = { eps = 2 }", ROPEKV_ERR_SPEC_INVALID, "q_norm.eps: must be in (0, 1]"},
        {"s.kv_lora_rank = 448  s.q_norm = { eps = 1e-6, weight = 'bf16' }", ROPEKV_ERR_SPEC_INVALID,
         "q_norm: unknown key 'weight' (allowed: eps, matches)"},
        {"s.kv_lora_rank = 448  s.q_norm = { eps = 1e-6 }  s.q_forms = { 'absorbed', 'zero_copy' }",
         ROPEKV_ERR_SPEC_INVALID, "q_forms: 'zero_copy' with a q_norm: the norm needs the whole query head"},
        {"s.kv_lora_rank = 448  s.q_norm = { eps = 1e-6 }  s.q_forms = { 'inplace' }", ROPEKV_ERR_SPEC_INVALID,
         "q_forms: 'inplace' with a q_norm"},
        {"s.qk_rope_head_dim = 512  s.q_norm = { eps = 1e-6 }  " KVN "s.kv_norm = { eps = 1e-6 }",
         ROPEKV_ERR_SPEC_INVALID, "kv_norm: a q_norm with a norm over the latent only"},
        {KVN "s.kv_norm = { eps = 1e-6, weight = 'fp16' }", ROPEKV_ERR_SPEC_INVALID,
         "kv_norm.weight: unknown value 'fp16' (one of: bf16, f32)"},
        {KVN "s.kv_norm = { eps = 1e-6, weight = 4 }", ROPEKV_ERR_SPEC_INVALID,
         "kv_norm.weight: must be a string, got number"},
        {KVN "s.kv_norm = { eps = 1e-6, rounding = 'thrice' }", ROPEKV_ERR_SPEC_INVALID,
         "kv_norm.rounding: unknown value 'thrice' (one of: twice, once)"},
        {KVN "s.kv_norm = { eps = 1e-6, rounding = 'TWICE' }", ROPEKV_ERR_SPEC_INVALID,
         "kv_norm.rounding: unknown value 'TWICE'"},
        {KVN "s.kv_norm = { eps = 1e-6, matches = string.rep('x', 200) }", ROPEKV_ERR_SPEC_INVALID,
         "kv_norm.matches: too long"},
        {KVN "s.kv_norm = 1e-6", ROPEKV_ERR_SPEC_INVALID, "kv_norm: must be a table, got number"},
        /* the norms list itself */
        {"s.norms = { 'layer' }", ROPEKV_ERR_SPEC_INVALID,
         "norms[1]: unknown value 'layer' (one of: none, rms, rms_out)"},
        {"s.norms = { 'rms', 'rms' }  s.kv_norm = { eps = 1e-6 }", ROPEKV_ERR_SPEC_INVALID,
         "norms[2]: duplicate 'rms' (also norms[1])"},
        {"s.norms = {}", ROPEKV_ERR_SPEC_INVALID, "norms: must not be empty"},
        /* the tree over 16-byte chunks: kv_lora_rank / 8 a power of two (448 / 8 = 56, 24 / 8 = 3) */
        {"s.kv_lora_rank = 448  " KVN "s.kv_norm = { eps = 1e-6 }", ROPEKV_ERR_SPEC_INVALID,
         "norms: the fused RMSNorm needs kv_lora_rank / 8 a power of two (its sum is a tree over 16-byte chunks), "
         "got kv_lora_rank 448"},
        {"s.kv_lora_rank = 24  s.norms = 'rms_out'  s.kv_norm = { eps = 1e-6 }", ROPEKV_ERR_SPEC_INVALID,
         "got kv_lora_rank 24"},
    };
#undef KVN
    run_spec_cases(state, c, N(c));

    /* the defaults: a bf16 weight, rounding twice, no word on whose it is; the list in the spec's order */
    rk_spec s = load_ok(state, "s.norms = { 'rms_out', 'none' }  s.kv_norm = { eps = 1e-6 }");
    assert_true(s.n_norms == 2 && s.norms[0] == ROPEKV_NORM_RMS_OUT && s.norms[1] == ROPEKV_NORM_NONE);
    assert_true(s.norm.weight == RK_NW_BF16 && s.norm.round == RK_NR_TWICE && s.norm.eps == 1e-6f);
    assert_string_equal(s.norm.matches, "");
    /* every key given; eps is kept as the float nearest the number; a single string is a list of one */
    s = load_ok(state, "s.norms = 'rms'  s.kv_norm = { eps = 2^-20, weight = 'f32', rounding = 'once',"
                       " matches = 'FlashInfer' }");
    assert_true(s.n_norms == 1 && s.norms[0] == ROPEKV_NORM_RMS);
    assert_true(s.norm.weight == RK_NW_F32 && s.norm.round == RK_NR_ONCE && s.norm.eps == 0x1p-20f);
    assert_string_equal(s.norm.matches, "FlashInfer");
    /* the bounds of eps: 1 itself, and the smallest float (a subnormal) */
    s = load_ok(state, "s.norms = 'rms'  s.kv_norm = { eps = 1 }");
    assert_true(s.norm.eps == 1.0f);
    s = load_ok(state, "s.norms = 'rms'  s.kv_norm = { eps = 2^-149 }");
    assert_true(s.norm.eps == 0x1p-149f);
    /* a kv_lora_rank whose / 8 is no power of two is fine without the norm, and every power of two with it */
    s = load_ok(state, "s.kv_lora_rank = 448");
    assert_true(s.n_norms == 1 && s.kv_lora_rank == 448);
    s = load_ok(state, "s.kv_lora_rank = 8  s.norms = { 'rms' }  s.kv_norm = { eps = 1e-6 }");
    assert_true(s.kv_lora_rank == 8 && s.n_norms == 1);
    s = load_ok(state, "s.kv_lora_rank = 8192  s.norms = { 'rms' }  s.kv_norm = { eps = 1e-6 }");
    assert_true(s.kv_lora_rank == 8192);
    /* DeepSeek-V4's head: the kv norm over all 512 values (norms default to none and rms), the query norm (q forms
     * default to absorbed and none) */
    s = load_ok(state, "s.kv_lora_rank = 448  s.kv_norm = { eps = 1e-6, over = 'head' }  s.q_norm = { eps = 1e-5 }"
                       "  s.q_forms = nil");
    assert_true(s.norm.over == RK_NO_HEAD && s.n_norms == 2 && s.norms[0] == ROPEKV_NORM_NONE &&
                s.norms[1] == ROPEKV_NORM_RMS);
    assert_true(s.q_norm.norm == RK_QN_RMS && s.q_norm.eps == 1e-5f && s.n_q == 2 && s.q[0] == ROPEKV_Q_ABSORBED &&
                s.q[1] == ROPEKV_Q_NONE);
    s = load_ok(state, "");
    assert_true(s.norm.over == RK_NO_LATENT && s.q_norm.norm == RK_QN_NONE);
}

/* The query's fp8 policy is read apart from the cache's. */
static void test_q_fp8(void **state) {
    rk_spec s = load_ok(state, "s.q_dtypes = { 'fp8_e4m3', 'bf16' }  s.fp8 = { scale = 'mul' }"
                               "  s.q_fp8 = { scale = 'div', saturate = { fnuz = 224 }, rope_bf16_round = true,"
                               " matches = 'an engine' }");
    assert_true(s.n_qdt == 2 && s.q_dtypes[0] == ROPEKV_Q_FP8_E4M3 && s.q_dtypes[1] == ROPEKV_Q_BF16);
    assert_true(s.fp8.scale == RK_SCALE_MUL && !s.fp8.rope_bf16 && s.fp8.sat_fnuz == 240.0f);
    assert_true(s.q_fp8.scale == RK_SCALE_DIV && s.q_fp8.rope_bf16 && s.q_fp8.sat_fnuz == 224.0f &&
                s.q_fp8.sat_ocp == 448.0f);
    assert_string_equal(s.q_fp8.matches, "an engine");
    assert_string_equal(s.fp8.matches, "");
    s = load_ok(state, "");
    assert_true(s.n_qdt == 2 && s.q_dtypes[0] == ROPEKV_Q_BF16 && s.q_fp8.scale == RK_SCALE_MUL_RECIP);
}

static void test_targets(void **state) {
    static const fail_case c[] = {
        {"s.targets = {}", ROPEKV_ERR_SPEC_INVALID, "targets: must not be empty"},
        {"s.targets = { 'host', 'gfx999' }", ROPEKV_ERR_SPEC_TARGET,
         TFILE ": targets[2]: unknown target 'gfx999' (known: gfx90a, gfx942, gfx950, gfx1100, "
               "gfx1201, gfx1250, sm_80, sm_90, sm_100, sm_103, sm_120, host)"},
        {"s.targets = 'gfx999'", ROPEKV_ERR_SPEC_TARGET, "targets[1]: unknown target 'gfx999'"},
        {"s.targets = { 'host\\0x' }", ROPEKV_ERR_SPEC_TARGET, "targets[1]: 'host\\x00x' holds a NUL byte"},
        {"s.targets = { 'host', 'host' }", ROPEKV_ERR_SPEC_INVALID, "targets[2]: duplicate 'host' (also targets[1])"},
        {"s.targets = { 1 }", ROPEKV_ERR_SPEC_INVALID, "targets[1]: must be a string, got number"},
        {"s.targets = { 'host', nil, 'sm_90' }", ROPEKV_ERR_SPEC_INVALID, "targets: must be a list"},
        {"s.targets = {} for i = 1, 17 do s.targets[i] = 'host' end", ROPEKV_ERR_SPEC_INVALID,
         "targets: at most 16 entries, got 17"},
    };
    run_spec_cases(state, c, N(c));

    rk_err err = {0};
    rk_spec s;
    int rc = load_spec_with(NULL, "", &s, &err);
    check_failure("(no arch table)", rc, &err, ROPEKV_ERR_SPEC_TARGET, "unknown target 'gfx942' (known: none)");
    /* open: every row of the table, in its order */
    s = load_ok(state, "s.targets = nil");
    const rk_arch_table *archs = *state;
    assert_int_equal(s.n_targets, archs->n);
    for (int i = 0; i < archs->n; i++) assert_string_equal(s.targets[i], archs->a[i].name);
    rc = load_spec_with(NULL, "s.targets = nil", &s, &err);
    check_failure("(no arch table, open targets)", rc, &err, ROPEKV_ERR_SPEC_INVALID, "targets: no architecture table");
}

/* ---- the architecture table ---------------------------------------------------------------------- */
static void test_archs_invalid(void **state) {
    (void)state;
    static const fail_case c[] = {
        {"a.archs[1].wave = 48", ROPEKV_ERR_SPEC_INVALID, TFILE ": archs[1].wave: must be 32 or 64, got 48"},
        {"a.archs[1].wave = 64.5", ROPEKV_ERR_SPEC_INVALID, "archs[1].wave: must be an integer, got 64.5"},
        {"a.archs[1].name = 'GFX942'", ROPEKV_ERR_SPEC_INVALID, "archs[1].name: must match [a-z0-9_:+-]+"},
        {"a.archs[1].name = string.rep('x', 40)", ROPEKV_ERR_SPEC_INVALID,
         "archs[1].name: too long (at most 31 characters, got 40)"},
        {"a.archs[2].name = 'gfx942'", ROPEKV_ERR_SPEC_INVALID,
         "archs[2].name: duplicate arch 'gfx942' (also archs[1])"},
        {"a.archs[1].vendor = 'intel'", ROPEKV_ERR_SPEC_INVALID,
         "archs[1].vendor: unknown value 'intel' (one of: amd, nvidia, host)"},
        {"a.archs[1].compiler = 'gcc'", ROPEKV_ERR_SPEC_INVALID,
         "archs[1].compiler: unknown value 'gcc' (one of: hiprtc, clang, nvrtc, host)"},
        {"a.archs[1].compiler = 'nvrtc'", ROPEKV_ERR_SPEC_INVALID,
         "archs[1].compiler: 'nvrtc' does not build for vendor 'amd'"},
        {"a.archs[2].compiler = 'clang'", ROPEKV_ERR_SPEC_INVALID,
         "archs[2].compiler: 'clang' does not build for vendor 'host'"},
        {"a.archs[1].fp8 = 'e5m2'", ROPEKV_ERR_SPEC_INVALID, "archs[1].fp8: unknown value 'e5m2' (one of: ocp, fnuz)"},
        {"a.archs[1].fp8 = nil", ROPEKV_ERR_SPEC_INVALID, "archs[1].fp8: required"},
        {"a.archs[1].fp8_hw = nil", ROPEKV_ERR_SPEC_INVALID, "archs[1].fp8_hw: required"},
        {"a.archs[1].bf16_hw = 1", ROPEKV_ERR_SPEC_INVALID, "archs[1].bf16_hw: must be a boolean"},
        {"a.archs[1].vec_bytes = 4", ROPEKV_ERR_SPEC_INVALID, "archs[1].vec_bytes: must be 8 or 16, got 4"},
        {"a.archs[1].block = 96", ROPEKV_ERR_SPEC_INVALID, "archs[1].block: must be a multiple of wave (64), got 96"},
        {"a.archs[1].block = 2048", ROPEKV_ERR_SPEC_INVALID, "archs[1].block: must be in 32..1024, got 2048"},
        {"a.archs[1].wide_block = 96", ROPEKV_ERR_SPEC_INVALID,
         "archs[1].wide_block: must be a multiple of wave (64), got 96"},
        {"a.archs[1].wide_block = 16", ROPEKV_ERR_SPEC_INVALID, "archs[1].wide_block: must be in 32..1024, got 16"},
        {"a.archs[1].wide_from = -1", ROPEKV_ERR_SPEC_INVALID, "archs[1].wide_from: must be in 0..1073741824, got -1"},
        {"a.archs[1].read_chunks = 9", ROPEKV_ERR_SPEC_INVALID, "archs[1].read_chunks: must be in 1..8, got 9"},
        {"a.archs[1].read_chunks_from = -1", ROPEKV_ERR_SPEC_INVALID,
         "archs[1].read_chunks_from: must be in 0..1073741824, got -1"},
        {"a.archs[1].pdl = true", ROPEKV_ERR_SPEC_INVALID,
         "archs[1].pdl: programmatic dependent launch is an NVIDIA feature (sm_90 and later)"},
        {"a.archs[1].pdl = 'yes'", ROPEKV_ERR_SPEC_INVALID, "archs[1].pdl: must be a boolean"},
        {"a.archs[2].e2m1_hw = true", ROPEKV_ERR_SPEC_INVALID,
         "archs[2].e2m1_hw: an AMD key (an NVIDIA row converts e2m1 in hardware through its family target, family = "
         "true)"},
        {"a.archs[1].e2m1_hw = 1", ROPEKV_ERR_SPEC_INVALID, "archs[1].e2m1_hw: must be a boolean"},
        {"a.archs[1].options = 5", ROPEKV_ERR_SPEC_INVALID, "archs[1].options: must be a string, got number"},
        {"a.archs[1].wavefront = 64", ROPEKV_ERR_SPEC_INVALID, TFILE ": archs[1]: unknown key 'wavefront'"},
        {"a.extra = 1", ROPEKV_ERR_SPEC_INVALID, TFILE ": unknown key 'extra' (allowed: archs)"},
        {"a.archs = nil", ROPEKV_ERR_SPEC_INVALID, "archs: required"},
        {"a.archs = {}", ROPEKV_ERR_SPEC_INVALID, "archs: must not be empty"},
        {"a.archs = 'gfx942'", ROPEKV_ERR_SPEC_INVALID, "archs: must be a list of tables, got string"},
        {"a.archs[4] = a.archs[1]", ROPEKV_ERR_SPEC_INVALID, "archs: must be a list"},
        {"a.archs[2] = 'host'", ROPEKV_ERR_SPEC_INVALID, "archs[2]: must be a table, got string"},
        {"a = { archs = {} } for i = 1, 33 do a.archs[i] = { name = 'h' .. i, vendor = 'host',\n"
         "  wave = 32, fp8 = 'ocp', fp8_hw = false, bf16_hw = false, compiler = 'host' } end",
         ROPEKV_ERR_SPEC_INVALID, "archs: at most 32 entries, got 33"},
        {"os.exit(1)", ROPEKV_ERR_SPEC_RUNTIME, "global 'os'"},
        {"while true do end", ROPEKV_ERR_SPEC_LIMIT, "instruction limit exceeded"},
    };
    for (size_t i = 0; i < N(c); i++) {
        rk_err err = {0};
        rk_arch_table *t = malloc(sizeof *t);
        assert_non_null(t);
        int rc = load_archs_with(c[i].change, t, &err);
        free(t);
        check_failure(c[i].change, rc, &err, c[i].code, c[i].want);
    }
}

static void test_archs_ok(void **state) {
    (void)state;
    rk_err err = {0};
    rk_arch_table *t = malloc(sizeof *t);
    assert_non_null(t);
    assert_int_equal(load_archs_with("a.archs[1].vec_bytes = 8  a.archs[1].block = 1024\n"
                                     "a.archs[2].options = '-O2 -g'  a.archs[2].name = 'x86_64+avx2:v3-a'",
                                     t, &err),
                     ROPEKV_OK);
    assert_int_equal(t->n, 2);
    assert_true(t->a[0].vec_bytes == 8 && t->a[0].block == 1024 && t->a[0].fp8 == RK_FP8_FNUZ);
    assert_string_equal(t->a[1].options, "-O2 -g");
    assert_string_equal(t->a[1].name, "x86_64+avx2:v3-a");
    /* 32 rows is the maximum that fits */
    assert_int_equal(load_archs_with("a = { archs = {} } for i = 1, 32 do a.archs[i] = { name = 'h' .. i,\n"
                                     "  vendor = 'host', wave = 32, fp8 = 'ocp', fp8_hw = false,\n"
                                     "  bf16_hw = false, compiler = 'host' } end",
                                     t, &err),
                     ROPEKV_OK);
    assert_int_equal(t->n, RK_MAX_ARCHS);
    assert_string_equal(t->a[31].name, "h32");
    free(t);
}

/* ---- arguments ----------------------------------------------------------------------------------- */
static void test_arguments(void **state) {
    rk_err err = {0};
    rk_spec s;
    char text[4096];
    snprintf(text, sizeof text, BASE, "");

    /* err may be NULL; out may be NULL (validation only) */
    assert_int_equal(rk_spec_load(TFILE, text, strlen(text), *state, NULL, NULL), ROPEKV_OK);
    assert_int_equal(rk_spec_load(TFILE, "return 1", 8, *state, &s, NULL), ROPEKV_ERR_SPEC_INVALID);
    assert_int_equal(rk_spec_load(TFILE, NULL, 0, *state, &s, &err), ROPEKV_ERR_IO);
    assert_int_equal(rk_spec_load(NULL, "return 1", 8, *state, &s, &err), ROPEKV_ERR_SPEC_INVALID);
    assert_non_null(strstr(err.msg, "must return a table"));
    assert_int_equal(rk_archs_load(TFILE, "", 0, NULL, &err), ROPEKV_ERR_SPEC_INVALID);
    assert_non_null(strstr(err.msg, "must return a table, got nil"));

    /* a failed load leaves out untouched */
    memset(&s, 0x5a, sizeof s);
    assert_int_not_equal(load_spec_with(*state, "s.rope = 1", &s, &err), ROPEKV_OK);
    assert_int_equal((unsigned char)s.name[0], 0x5a);

    /* a long file name is truncated in rk_spec.file, and still starts every message */
    char file[400];
    memset(file, 'd', sizeof file - 5);
    strcpy(file + sizeof file - 5, ".lua");
    assert_int_equal(rk_spec_load(file, text, strlen(text), *state, &s, &err), ROPEKV_OK);
    assert_int_equal(strlen(s.file), sizeof s.file - 1);
    assert_memory_equal(s.file, file, sizeof s.file - 1);
    assert_int_equal(rk_spec_load(file, "error('boom')", 13, *state, &s, &err), ROPEKV_ERR_SPEC_RUNTIME);
    assert_int_equal(strncmp(err.msg, file, strlen(file)), 0);
    assert_non_null(strstr(err.msg, "boom"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fail),
        cmocka_unit_test(test_escape),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_builtin_specs_by_name),
        cmocka_unit_test(test_arch_find),
        cmocka_unit_test(test_archs_file),
        cmocka_unit_test(test_spec_files),
        cmocka_unit_test(test_spec_values),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_accepts),
        cmocka_unit_test(test_sandbox_escapes),
        cmocka_unit_test(test_sandbox_env),
        cmocka_unit_test(test_binary_chunks),
        cmocka_unit_test(test_lua_errors),
        cmocka_unit_test(test_unknown_keys),
        cmocka_unit_test(test_scalars),
        cmocka_unit_test(test_lists),
        cmocka_unit_test(test_list_lengths),
        cmocka_unit_test(test_fp8),
        cmocka_unit_test(test_q_fp8),
        cmocka_unit_test(test_fp8_tile),
        cmocka_unit_test(test_kv_norm),
        cmocka_unit_test(test_targets),
        cmocka_unit_test(test_archs_invalid),
        cmocka_unit_test(test_archs_ok),
        cmocka_unit_test(test_arguments),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
