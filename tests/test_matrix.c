/* The compile matrix: every variant shape of the built-in specs (spec, kv, q, positions, slots),
 * whatever targets the spec lists, built for
 *   gfx90a with hiprtc; gfx942, gfx950, gfx1100, gfx1201, gfx1250 with clang-22; sm_80, sm_90 with nvrtc
 * must compile without scratch or spills, use the hardware fp8 conversion where the target has one
 * (and not where it has none), and the hardware bf16 conversion in bf16 kernels on gfx950/gfx1250;
 * on NVIDIA rows with pdl every entry must reach a wait for the previous grid (griddepcontrol.wait)
 * before its first global store and read nothing through ld.global.nc (ptxas moves such loads above
 * the wait), and rows without pdl must not wait at all.
 * Every AMD code object must pass the launch ABI check (tools/abi.h): its metadata against the rk_args
 * block, wave and block size the runtime launches with.
 * Identical kernels (same name) are compiled once. A compiler that is not installed skips its part. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "build.h"
#include "clang.h"

typedef struct target {
    const char *name;
    rk_compiler cc;
} target;

static const target TARGETS[] = {
    {"gfx90a", RK_CC_HIPRTC}, {"gfx942", RK_CC_CLANG},  {"gfx950", RK_CC_CLANG}, {"gfx1100", RK_CC_CLANG},
    {"gfx1201", RK_CC_CLANG}, {"gfx1250", RK_CC_CLANG}, {"sm_80", RK_CC_NVRTC},  {"sm_90", RK_CC_NVRTC},
};
#define N_TARGETS ((int)(sizeof TARGETS / sizeof TARGETS[0]))
#define MAX_ITEMS (RK_MAX_SPECS * 64 * N_TARGETS)

static rk_catalog g_cat;
static rk_build_item *g_items;
static rk_build_result *g_res;
static int g_n;             /* kernels built */
static int g_shapes;        /* variant shapes over all specs */
static int g_retargeted;    /* shapes x targets with an available compiler, before removing duplicates */
static int g_have[4];       /* per rk_compiler: 1 when available */
static char g_why[4][1024]; /* per rk_compiler: why not */
static double g_wall_ms;
static int g_jobs;

static void probe_compilers(void) {
    int major, minor;
    char why[768];
    if (rk_hiprtc_available(&major, &minor, why, sizeof why) != 0) {
        snprintf(g_why[RK_CC_HIPRTC], sizeof g_why[0], "%s", why);
    } else if (!rk_hiprtc_supports(major, minor, "gfx90a", why, sizeof why)) {
        snprintf(g_why[RK_CC_HIPRTC], sizeof g_why[0], "%s", why);
    } else {
        g_have[RK_CC_HIPRTC] = 1;
    }
    char version[512];
    if (rk_clang_available(version, sizeof version) != 0)
        snprintf(g_why[RK_CC_CLANG], sizeof g_why[0], "%s (%s)", version, rk_clang_path());
    else g_have[RK_CC_CLANG] = 1;
    if (rk_nvrtc_available(&major, &minor, why, sizeof why) != 0)
        snprintf(g_why[RK_CC_NVRTC], sizeof g_why[0], "%s", why);
    else g_have[RK_CC_NVRTC] = 1;
}

/* The disassembly is scanned for v_cvt_pk_bf16_f32 where the test looks for it. */
static int wants_bf16_hw(const rk_desc *v) {
    if (v->arch->vendor != RK_VENDOR_AMD || !v->arch->bf16_hw) return 0;
    if (v->op == ROPEKV_OP_READ) return v->kv != ROPEKV_KV_BF16; /* fp8 values rounded to bf16 (bf16 rows: copied) */
    return (v->kv == ROPEKV_KV_BF16 || v->kv == ROPEKV_KV_FP8_TILE) &&
           v->spec->rope != RK_ROPE_NONE; /* the rope part */
}

static int setup(void **state) {
    (void)state;
    rk_err err = {0};
    if (rk_catalog_load_embedded(&g_cat, &err) != ROPEKV_OK) {
        fprintf(stderr, "catalog: %s\n", err.msg);
        return -1;
    }
    probe_compilers();
    g_items = calloc(MAX_ITEMS, sizeof *g_items);
    g_res = calloc(MAX_ITEMS, sizeof *g_res);
    rk_desc *tmp = malloc(sizeof *tmp * RK_MAX_SPECS * 64);
    if (!g_items || !g_res || !tmp) return -1;
    for (int t = 0; t < N_TARGETS; t++) {
        const rk_arch *a = rk_arch_find(&g_cat.archs, TARGETS[t].name);
        if (!a) {
            fprintf(stderr, "specs/archs.lua has no row '%s'\n", TARGETS[t].name);
            return -1;
        }
        int k = rk_build_retarget(&g_cat, a, tmp, RK_MAX_SPECS * 64);
        if (k <= 0) return -1;
        g_shapes = k;
        if (!g_have[TARGETS[t].cc]) continue;
        for (int i = 0; i < k; i++) {
            g_retargeted++;
            int dup = 0;
            for (int j = 0; j < g_n && !dup; j++) dup = !strcmp(g_items[j].v.name, tmp[i].name);
            if (dup) continue;
            g_items[g_n].v = tmp[i];
            g_items[g_n].cc = TARGETS[t].cc;
            g_items[g_n].flags = wants_bf16_hw(&tmp[i]) || tmp[i].arch->vendor == RK_VENDOR_NVIDIA ? RK_BUILD_SCAN : 0;
            g_n++;
        }
    }
    free(tmp);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    g_jobs = cpus < 2 ? 2 : cpus > 16 ? 16 : (int)cpus;
    double t0 = rk_now_ms();
    int failed = g_n ? rk_build_matrix(g_items, g_n, g_jobs, NULL, g_res) : 0;
    g_wall_ms = rk_now_ms() - t0;
    if (failed < 0) {
        fprintf(stderr, "cannot start the build processes\n");
        return -1;
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    free(g_items);
    free(g_res);
    return 0;
}

/* Checks every kernel built with cc; returns how many broke a rule (each one printed). */
static int check_built(rk_compiler cc, int *checked) {
    int bad = 0;
    *checked = 0;
    for (int i = 0; i < g_n; i++) {
        if (g_items[i].cc != cc) continue;
        const rk_desc *v = &g_items[i].v;
        const rk_build_result *r = &g_res[i];
        const rk_compile_info *in = &r->info;
        const rk_arch *a = v->arch;
        (*checked)++;
        if (r->rc != ROPEKV_OK) {
            print_error("%s (%s): compile failed, error %d:\n%s\n", v->key, v->name, r->rc, r->log);
            bad++;
            continue;
        }
        char why[512] = "";
        size_t w = 0;
#define WHY(...) \
    if (w < sizeof why) w += (size_t)snprintf(why + w, sizeof why - w, __VA_ARGS__)
        if (in->scratch != 0) WHY(" scratch %d bytes;", in->scratch);
        if (in->spills != 0) WHY(" spills %d;", in->spills);
        if (in->regs <= 0) WHY(" registers not reported (%d);", in->regs);
        if (a->vendor == RK_VENDOR_AMD && in->sgprs <= 0) WHY(" sgprs not reported (%d);", in->sgprs);
        if (in->code_size <= 0) WHY(" code size not reported (%d);", in->code_size);
        if (rk_desc_writes_fp8(v) && a->fp8_hw && in->fp8_cvt != 1)
            WHY(" fp8 on %s without the hardware conversion (%s);", a->name,
                a->vendor == RK_VENDOR_AMD ? "v_cvt_pk_fp8_f32" : "cvt.rn.satfinite.e4m3x2.f32 in the PTX");
        if (rk_desc_writes_fp8(v) && !a->fp8_hw && in->fp8_cvt != 0)
            WHY(" fp8 on %s (no fp8_hw) reports a hardware conversion (%d);", a->name, in->fp8_cvt);
        if (a->vendor == RK_VENDOR_NVIDIA && r->pdl_gate != (a->pdl ? 1 : 0))
            WHY(" row %s has pdl = %s but the PTX's gate is %d (1: every entry waits before its first "
                "global store and reads no ld.global.nc; 0: no wait);",
                a->name, a->pdl ? "true" : "false", r->pdl_gate);
        if (a->vendor == RK_VENDOR_AMD && r->abi != 1)
            WHY(" launch ABI check %s: %s;", r->abi < 0 ? "not run" : "failed", r->abi_why);
        if (wants_bf16_hw(v) && r->bf16_cvt != 1)
            WHY(" bf16 output on %s without v_cvt_pk_bf16_f32 (scan: %d);", a->name, r->bf16_cvt);
#undef WHY
        if (why[0]) {
            print_error("%s (%s, %s):%s\n", v->key, v->name, in->compiler, why);
            bad++;
        }
    }
    return bad;
}

static void summary(rk_compiler cc) {
    int n = 0;
    for (int i = 0; i < g_n; i++) n += g_items[i].cc == cc;
    rk_build_item *items = malloc(sizeof *items * (size_t)(n ? n : 1));
    rk_build_result *res = malloc(sizeof *res * (size_t)(n ? n : 1));
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (items && res && f) {
        n = 0;
        for (int i = 0; i < g_n; i++)
            if (g_items[i].cc == cc) {
                items[n] = g_items[i];
                res[n++] = g_res[i];
            }
        rk_build_summary(f, items, res, n);
        fclose(f);
        f = NULL;
        print_message("%s", text);
    }
    if (f) fclose(f);
    free(text);
    free(items);
    free(res);
}

static void run_part(rk_compiler cc) {
    if (!g_have[cc]) {
        print_message("%s not available, skipping its part of the matrix: %s\n", rk_compiler_name(cc), g_why[cc]);
        skip();
    }
    int checked = 0;
    int bad = check_built(cc, &checked);
    summary(cc);
    assert_true(checked > 0);
    assert_int_equal(bad, 0);
}

static void test_hiprtc_gfx90a(void **state) {
    (void)state;
    run_part(RK_CC_HIPRTC);
}

static void test_clang_targets(void **state) {
    (void)state;
    run_part(RK_CC_CLANG);
}

static void test_nvrtc_targets(void **state) {
    (void)state;
    run_part(RK_CC_NVRTC);
}

/* Retargeting gives every shape once, for the target asked, with names that end in the target's. */
static void test_retarget(void **state) {
    (void)state;
    int shapes = 0;
    for (int s = 0; s < g_cat.n_specs; s++) {
        const rk_spec *sp = &g_cat.specs[s];
        int forms = 0, writes = 0, reads = 0; /* q form none has one query dtype: it writes no query */
        for (int q = 0; q < sp->n_q; q++) forms += sp->q[q] == ROPEKV_Q_NONE ? 1 : sp->n_qdt;
        for (int o = 0; o < sp->n_ops; o++) {
            writes += sp->ops[o] == ROPEKV_OP_WRITE;
            reads += sp->ops[o] == ROPEKV_OP_READ;
        }
        shapes += sp->n_kv * sp->n_slot * sp->n_layout * (writes * forms * sp->n_pos + reads);
    }
    assert_int_equal(g_shapes, shapes);
    const rk_arch *a = rk_arch_find(&g_cat.archs, "gfx1100");
    assert_non_null(a);
    rk_desc *v = malloc(sizeof *v * RK_MAX_SPECS * 64);
    assert_non_null(v);
    int k = rk_build_retarget(&g_cat, a, v, RK_MAX_SPECS * 64);
    assert_int_equal(k, shapes);
    for (int i = 0; i < k; i++) {
        assert_ptr_equal(v[i].arch, a);
        assert_non_null(strstr(v[i].key, "/gfx1100/"));
        const size_t n = strlen(v[i].name);
        assert_true(n > 8 && strcmp(v[i].name + n - 8, "_gfx1100") == 0);
    }
    assert_int_equal(rk_build_retarget(&g_cat, a, v, 1), -1);
    free(v);
}

/* The compiler choice: hiprtc only where its allow-list says so (never gfx942+ on ROCm 5). */
static void test_pick(void **state) {
    (void)state;
    int major = 0, minor = 0;
    int hip = rk_hiprtc_available(&major, &minor, NULL, 0) == 0;
    for (int i = 0; i < g_cat.archs.n; i++) {
        const rk_arch *a = &g_cat.archs.a[i];
        rk_compiler cc = rk_build_pick(a);
        if (a->vendor == RK_VENDOR_AMD) {
            int ok = hip && rk_hiprtc_supports(major, minor, a->name, NULL, 0);
            assert_int_equal(cc, ok ? RK_CC_HIPRTC : RK_CC_CLANG);
            if (hip && major < 6 && strcmp(a->name, "gfx90a") != 0) assert_int_equal(cc, RK_CC_CLANG);
        } else {
            assert_int_equal(cc, a->vendor == RK_VENDOR_NVIDIA ? RK_CC_NVRTC : RK_CC_HOST);
        }
    }
}

static void test_timing(void **state) {
    (void)state;
    print_message("matrix: %d shapes x %d targets; %d compiles with available compilers, %d distinct kernels "
                  "built by %d processes in %.1f s\n",
                  g_shapes, N_TARGETS, g_retargeted, g_n, g_jobs, g_wall_ms / 1e3);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_retarget),      cmocka_unit_test(test_pick),
        cmocka_unit_test(test_hiprtc_gfx90a), cmocka_unit_test(test_clang_targets),
        cmocka_unit_test(test_nvrtc_targets), cmocka_unit_test(test_timing),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
