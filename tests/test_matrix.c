/* The compile matrix: the covering set of the built-in specs (tools/cover.h: on each row every value of every
 * choice, every pair and the declared triples with the target among them), built for
 *   gfx90a with hiprtc; gfx942, gfx950, gfx1100, gfx1201, gfx1250 with clang-22; sm_80, sm_90, sm_100, sm_103,
 *   sm_120 with nvrtc,
 * must compile without scratch or spills, use the hardware fp8 conversion where the target has one
 * (and not where it has none), the hardware bf16 conversion in bf16 kernels on gfx950/gfx1250, and the hardware
 * e2m1 conversion in e2m1 writers on the family rows (sm_100f, sm_103f, sm_120f; not on sm_80 / sm_90);
 * on NVIDIA rows with pdl every entry must reach a wait for the previous grid (griddepcontrol.wait)
 * before its first global store and read nothing through ld.global.nc (ptxas moves such loads above
 * the wait), and rows without pdl must not wait at all.
 * Every AMD code object must pass the launch ABI check (tools/abi.h): its metadata against the rk_args
 * block, wave and block size the runtime launches with.
 * Every AMD kernel must also stay within its own line (target + kernel name) of the ISA review's baseline,
 * tests/golden/isa_amd.txt, which must hold a line for each of them and no other (check_isa).
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
#include "cover.h"
#include "ropekv.h"

typedef struct target {
    const char *name;
    rk_compiler cc;
} target;

static const target TARGETS[] = {
    {"gfx90a", RK_CC_HIPRTC}, {"gfx942", RK_CC_CLANG},  {"gfx950", RK_CC_CLANG}, {"gfx1100", RK_CC_CLANG},
    {"gfx1201", RK_CC_CLANG}, {"gfx1250", RK_CC_CLANG}, {"sm_80", RK_CC_NVRTC},  {"sm_90", RK_CC_NVRTC},
    {"sm_100", RK_CC_NVRTC},  {"sm_103", RK_CC_NVRTC},  {"sm_120", RK_CC_NVRTC},
};
#define N_TARGETS ((int)(sizeof TARGETS / sizeof TARGETS[0]))
#define MAX_ITEMS (RK_MAX_SPECS * 64 * N_TARGETS)

static rk_catalog g_cat;
static rk_build_item *g_items;
static rk_build_result *g_res;
static int g_n;             /* kernels built */
static int g_picked;        /* covering-set variants on rows with an available compiler */
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
    int quantized = 0, bf16_rope = 0; /* the row's segments: values not stored as bf16; rope values stored as bf16 */
    for (int i = 0; i < v->rec.n_seg; i++) {
        const rk_segment *g = &v->rec.seg[i];
        quantized |= g->elem != RK_EL_BF16;
        bf16_rope |= g->elem == RK_EL_BF16 && g->from + g->n > v->L;
    }
    if (v->op == ROPEKV_OP_READ) return quantized;     /* fp8 / fp4 values rounded to bf16 (bf16 rows: copied) */
    return bf16_rope && v->spec->rope != RK_ROPE_NONE; /* the rope part */
}

/* ---- the Blackwell rows ----------------------------------------------------------------------- */
/* A device's compute capability picks its row (runtime.c: the newest sm_XY row not newer than the
 * device's "sm_%d%d"): a compile-only cuda context for each device target builds a DeepSeek-V3 kernel,
 * whose name ends in the row's name. */
static void test_blackwell_rows(void **state) {
    (void)state;
    if (!g_have[RK_CC_NVRTC]) {
        print_message("nvrtc not available: %s\n", g_why[RK_CC_NVRTC]);
        skip();
    }
    static const struct {
        const char *device, *row;
    } cases[] = {{"sm_100", "sm_100"}, {"sm_103", "sm_103"}, {"sm_120", "sm_120"}, /* B200, B300, RTX 50 */
                 {"sm_121", "sm_120"},                                             /* GB10 (DGX Spark) */
                 {"sm_110", "sm_103"},                                             /* Thor */
                 {"sm_89", "sm_80"}};                                              /* Ada: no fp8_hw row */
    char dir[] = "/tmp/rk_matrix_rows_XXXXXX";
    assert_non_null(mkdtemp(dir));
    const ropekv_variant v = {.spec = "deepseek_v3", .kv = ROPEKV_KV_BF16, .q = ROPEKV_Q_ABSORBED};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ropekv_options o = {.backend = ROPEKV_BACKEND_CUDA,
                            .target = cases[i].device,
                            .compile_only = 1,
                            .cache_dir = dir,
                            .disk_cache = 1};
        ropekv_ctx *c = NULL;
        assert_int_equal(ropekv_create(&c, &o), ROPEKV_OK);
        assert_string_equal(ropekv_target(c), cases[i].device);
        ropekv_kernel *k = NULL;
        const ropekv_status st = ropekv_kernel_get(c, &v, &k);
        if (st != ROPEKV_OK) print_error("%s: %s\n", cases[i].device, ropekv_last_error(c));
        assert_int_equal(st, ROPEKV_OK);
        const char *name = ropekv_kernel_name(k);
        const size_t n = strlen(name), r = strlen(cases[i].row);
        if (n <= r || name[n - r - 1] != '_' || strcmp(name + n - r, cases[i].row) != 0)
            print_error("device %s: kernel %s, want the row %s\n", cases[i].device, name, cases[i].row);
        assert_true(n > r && name[n - r - 1] == '_' && strcmp(name + n - r, cases[i].row) == 0);
        ropekv_kernel_release(k);
        ropekv_destroy(c);
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* ---- the AMD ISA review ----------------------------------------------------------------------- */
#define ISA_BASELINE "tests/golden/isa_amd.txt"
static rk_isa_limit *g_isa;
static int g_n_isa = -1; /* lines of the baseline; -1: not read (g_isa_why says why) */
static char g_isa_why[1024];

static void load_isa_baseline(void) {
    rk_codeobj text = {0};
    if (rk_read_file(RK_SOURCE_DIR "/" ISA_BASELINE, &text) != ROPEKV_OK) {
        snprintf(g_isa_why, sizeof g_isa_why, "cannot read %s", ISA_BASELINE);
        return;
    }
    char *t = malloc(text.len + 1);
    int lines = 1; /* at most one baseline line per line of text */
    for (size_t i = 0; i < text.len; i++) lines += text.data[i] == '\n';
    g_isa = malloc(sizeof *g_isa * (size_t)lines);
    if (t && g_isa) {
        memcpy(t, text.data, text.len);
        t[text.len] = '\0';
        char why[512] = "";
        g_n_isa = rk_isa_limits_parse(t, g_isa, lines, why, sizeof why);
        if (g_n_isa < 0) snprintf(g_isa_why, sizeof g_isa_why, "%s: %s", ISA_BASELINE, why);
    } else {
        snprintf(g_isa_why, sizeof g_isa_why, "%s: out of memory", ISA_BASELINE);
    }
    free(t);
    rk_code_free(&text);
}

/* Every AMD kernel built with cc against its own line of the baseline (target + kernel name); returns
 * how many failed: a kernel worse on a figure (printed with its key and each figure), a kernel without
 * a line, and a line of a target built here whose kernel is not built (a stale baseline). */
static int check_isa(rk_compiler cc) {
    if (g_n_isa < 0) {
        print_error("the ISA review has no baseline: %s\n", g_isa_why);
        return 1;
    }
    char *used = calloc((size_t)g_n_isa + 1, 1);
    if (!used) {
        print_error("the ISA review: out of memory\n");
        return 1;
    }
    int bad = 0;
    for (int t = 0; t < N_TARGETS; t++) {
        if (TARGETS[t].cc != cc) continue;
        int n = 0;
        for (int i = 0; i < g_n; i++) {
            const rk_desc *v = &g_items[i].v;
            if (g_items[i].cc != cc || strcmp(v->arch->name, TARGETS[t].name) != 0) continue;
            const rk_isa_limit *lim = rk_isa_limit_find(g_isa, g_n_isa, TARGETS[t].name, v->name);
            if (lim) used[lim - g_isa] = 1;
            if (g_res[i].rc != ROPEKV_OK) continue; /* check_built reports it */
            n++;
            char why[512];
            if (!lim) {
                print_error("%s: no line for %s %s: `ropekv-gen isa-baseline` writes one\n", v->key, TARGETS[t].name,
                            v->name);
                bad++;
            } else if (rk_isa_regressions(&g_res[i], lim, why, sizeof why)) {
                print_error("%s (%s): ISA regression against its line of %s:%s\n", v->key, v->name, ISA_BASELINE, why);
                bad++;
            }
        }
        for (int l = 0; l < g_n_isa; l++)
            if (!used[l] && !strcmp(g_isa[l].target, TARGETS[t].name)) {
                print_error("%s: stale line for %s %s: no such kernel is built\n", ISA_BASELINE, g_isa[l].target,
                            g_isa[l].kernel);
                bad++;
            }
        if (n) print_message("isa: %s: %d kernels against their lines of %s\n", TARGETS[t].name, n, ISA_BASELINE);
    }
    free(used);
    if (bad)
        print_error("the baseline is the generated one; a deliberate change updates it: "
                    "build/ropekv-gen isa-baseline > %s\n",
                    ISA_BASELINE);
    return bad;
}

/* The ISA review's rules on a hand-written disassembly and lines: each figure can fail. */
static void test_isa_rules(void **state) {
    (void)state;
    static const char dis[] = "0000000000001a00 <k>:\n"
                              "\tglobal_load_dwordx2 v[6:7], v[2:3], off\n"
                              "\tglobal_load_dwordx4 v[14:17], v[2:3], off\n"
                              "\ts_waitcnt vmcnt(0)\n" /* between two loads */
                              "\tglobal_load_dwordx4 v[22:25], v[18:19], off\n"
                              "\ts_waitcnt lgkmcnt(0)\n" /* not a vector-memory wait */
                              "\ts_waitcnt vmcnt(0) lgkmcnt(0)\n"
                              "\tglobal_store_dword v[8:9], v3, off                 // 000000001A2C: DC700000\n"
                              "\tglobal_store_dwordx3 v[8:9], v[0:2], off offset:4  // 000000001A34: DC7C0004\n"
                              "0000000000002500 <k_i64>:\n"
                              "\tglobal_load_b128 v[0:3], v[4:5], off\n"
                              "\ts_wait_loadcnt 0x0\n"
                              "\tglobal_store_b128 v[6:7], v[0:3], off\n";
    rk_isa isa;
    rk_isa_scan(dis, &isa);
    assert_int_equal(isa.wide, 2); /* the worse kernel of the two: k */
    assert_int_equal(isa.narrow, 3);
    assert_int_equal(isa.split, 2); /* the dword + dwordx3 store of one 16-byte chunk */
    assert_int_equal(isa.waits, 2);
    assert_int_equal(isa.load_waits, 1);
    assert_int_equal(isa.free_waits, 1); /* v[18:19] holds nothing the loads brought */
    rk_isa_scan("no kernel here\n", &isa);
    assert_int_equal(isa.narrow, -1);
    assert_int_equal(isa.split, -1);
    assert_int_equal(isa.free_waits, -1);
    /* free_waits: which waits between two loads are free, dependent (the later load's address holds a
     * loaded value) or cross into another exec region */
    static const struct {
        const char *body;
        int load_waits, free_waits;
    } frees[] = {
        /* 0: two independent loads */
        {"\tglobal_load_dwordx2 v[6:7], v[2:3], off\n\ts_waitcnt vmcnt(0)\n"
         "\tglobal_load_dwordx4 v[8:11], v[4:5], off\n",
         1, 1},
        /* 1: the row of a loaded slot: shift and add (position -> cos/sin row, slot -> cache row) */
        {"\tglobal_load_dwordx2 v[6:7], v[2:3], off\n\ts_waitcnt vmcnt(0)\n\tv_lshlrev_b64 v[8:9], 8, v[6:7]\n"
         "\tv_mov_b32_e32 v1, s23\n\tv_lshl_add_u64 v[8:9], s[6:7], 0, v[8:9]\n"
         "\tglobal_load_dwordx4 v[12:15], v[8:9], off\n",
         1, 0},
        /* 2: a 64-bit multiply-add of a loaded index (gfx9), a source modifier on the way */
        {"\tglobal_load_dword v6, v[2:3], off\n\ts_waitcnt vmcnt(0)\n\tv_mov_b32_e32 v9, 0\n"
         "\tv_max_i32_e64 v8, -|v6|, s2\n\tv_mad_u64_u32 v[8:9], s[0:1], v8, s4, v[8:9]\n"
         "\tglobal_load_dwordx4 v[12:15], v[8:9], off\n",
         1, 0},
        /* 3: the high half only through the carry (gfx11 forms): the carry-out is a destination */
        {"\tglobal_load_b32 v6, v[2:3], off\n\ts_wait_loadcnt 0x0\n\tv_add_co_u32 v10, vcc_lo, s2, v6\n"
         "\tv_mov_b32_e32 v10, s2\n\tv_mov_b32_e32 v12, s3\n\tv_add_co_ci_u32_e32 v11, vcc_lo, 0, v12, vcc_lo\n"
         "\tglobal_load_b128 v[12:15], v[10:11], off\n",
         1, 0},
        /* 4: the same with the carry from an unloaded value: free */
        {"\tglobal_load_b32 v6, v[2:3], off\n\ts_wait_loadcnt 0x0\n\tv_add_co_u32 v10, vcc_lo, s2, v7\n"
         "\tv_mov_b32_e32 v12, s3\n\tv_add_co_ci_u32_e32 v11, vcc_lo, 0, v12, vcc_lo\n"
         "\tglobal_load_b128 v[12:15], v[10:11], off\n",
         1, 1},
        /* 5: a loaded value's register overwritten from unloaded sources before it addresses the load */
        {"\tglobal_load_dword v6, v[2:3], off\n\ts_waitcnt vmcnt(0)\n\tv_lshlrev_b32_e32 v8, 4, v6\n"
         "\tv_mov_b32_e32 v8, s4\n\tv_mov_b32_e32 v9, s5\n\tglobal_load_dwordx4 v[12:15], v[8:9], off\n",
         1, 1},
        /* 6: the later load overwrites a loaded value's registers: its own data is not its address */
        {"\tglobal_load_dwordx4 v[2:5], v[0:1], off\n\ts_waitcnt vmcnt(0)\n"
         "\tglobal_load_dwordx4 v[2:5], v[6:7], off\n",
         1, 1},
        /* 7: a loaded value in an SGPR, the high half through SCC; a scalar load's register is clean */
        {"\tglobal_load_dword v6, v[2:3], off\n\ts_waitcnt vmcnt(0)\n\tv_readfirstlane_b32 s4, v6\n"
         "\ts_add_u32 s8, s2, s4\n\ts_addc_u32 s9, s3, 0\n\ts_mov_b32 s8, s2\n"
         "\tglobal_load_dwordx4 v[12:15], v0, s[8:9]\n",
         1, 0},
        {"\tglobal_load_dword v6, v[2:3], off\n\ts_waitcnt vmcnt(0)\n\tv_readfirstlane_b32 s8, v6\n"
         "\ts_load_dwordx2 s[8:9], s[0:1], 0x10\n\ts_waitcnt lgkmcnt(0)\n"
         "\tglobal_load_dwordx4 v[12:15], v0, s[8:9]\n",
         1, 1},
        /* 9: an exec write, a branch, a label or the program's end between the wait and the load: the
         * load starts another region */
        {"\tglobal_load_dwordx4 v[2:5], v[0:1], off\n\ts_waitcnt vmcnt(0)\n\ts_or_b64 exec, exec, s[22:23]\n"
         "\tglobal_load_dwordx4 v[8:11], v[6:7], off\n",
         1, 0},
        {"\tglobal_load_dwordx4 v[2:5], v[0:1], off\n\ts_waitcnt vmcnt(0)\n\tv_cmp_gt_i32_e32 vcc, s2, v4\n"
         "\ts_and_saveexec_b64 s[0:1], vcc\n\tglobal_load_dwordx4 v[8:11], v[6:7], off\n",
         1, 0},
        {"\tglobal_load_b128 v[2:5], v[0:1], off\n\ts_wait_loadcnt 0x0\n\ts_and_not1_saveexec_b32 s0, s0\n"
         "\tglobal_load_b128 v[8:11], v[6:7], off\n",
         1, 0},
        {"\tglobal_load_b128 v[2:5], v[0:1], off\n\ts_wait_loadcnt 0x0\n\tv_cmpx_gt_u32_e32 s0, v1\n"
         "\tglobal_load_b128 v[8:11], v[6:7], off\n",
         1, 0},
        {"\tglobal_load_dwordx4 v[2:5], v[0:1], off\n\ts_waitcnt vmcnt(0)\n\ts_cbranch_execz 25\n"
         "\tglobal_load_dwordx4 v[8:11], v[6:7], off\n",
         1, 0},
        {"\tglobal_load_dwordx4 v[2:5], v[0:1], off\n\ts_waitcnt vmcnt(0)\n<L1>:\n"
         "\tglobal_load_dwordx4 v[8:11], v[6:7], off\n",
         1, 0},
        {"\tglobal_load_dwordx4 v[2:5], v[0:1], off\n\ts_waitcnt vmcnt(0)\n\ts_endpgm\n"
         "\tglobal_load_dwordx4 v[8:11], v[6:7], off\n",
         1, 0},
        /* 16: an exec write before the wait does not count; two waits, one on each side of it */
        {"\tglobal_load_dwordx4 v[2:5], v[0:1], off\n\ts_or_b64 exec, exec, s[22:23]\n\ts_waitcnt vmcnt(0)\n"
         "\tglobal_load_dwordx4 v[8:11], v[6:7], off\n",
         1, 1},
        {"\tglobal_load_dwordx4 v[2:5], v[0:1], off\n\ts_waitcnt vmcnt(1)\n\ts_or_b32 exec_lo, exec_lo, s2\n"
         "\ts_waitcnt vmcnt(0)\n\tglobal_load_dwordx4 v[8:11], v[6:7], off\n",
         2, 1},
        /* 18: a compare reads exec, it does not write it */
        {"\tglobal_load_dwordx4 v[2:5], v[0:1], off\n\ts_waitcnt vmcnt(0)\n\ts_cmp_eq_u64 exec, 0\n"
         "\tglobal_load_dwordx4 v[8:11], v[6:7], off\n",
         1, 1},
        /* 19: a kernel boundary: neither the wait nor the taint of the kernel before carries over */
        {"\tglobal_load_dword v6, v[2:3], off\n\ts_waitcnt vmcnt(0)\n\tv_lshlrev_b32_e32 v8, 4, v6\n"
         "0000000000002500 <k_i64>:\n\tglobal_load_dword v1, v[2:3], off\n\ts_waitcnt vmcnt(0)\n"
         "\tglobal_load_dwordx4 v[12:15], v[8:9], off\n",
         1, 1},
        {"\tglobal_load_dword v6, v[2:3], off\n\ts_waitcnt vmcnt(0)\n"
         "0000000000002500 <k_i64>:\n\tglobal_load_dwordx4 v[12:15], v[8:9], off\n",
         0, 0},
    };
    for (size_t i = 0; i < sizeof frees / sizeof frees[0]; i++) {
        char text[768];
        snprintf(text, sizeof text, "0000000000001a00 <k>:\n%s", frees[i].body);
        rk_isa_scan(text, &isa);
        if (isa.load_waits != frees[i].load_waits || isa.free_waits != frees[i].free_waits)
            print_error("case %zu: load_waits %d free_waits %d, want %d %d\n", i, isa.load_waits, isa.free_waits,
                        frees[i].load_waits, frees[i].free_waits);
        assert_int_equal(isa.load_waits, frees[i].load_waits);
        assert_int_equal(isa.free_waits, frees[i].free_waits);
    }
    /* split: which narrow accesses are pieces of one 16-byte chunk */
    static const struct {
        const char *body;
        int split;
    } splits[] = {
        /* the same base, not adjacent (a gap of 4 bytes) */
        {"\tglobal_store_dword v[8:9], v3, off\n\tglobal_store_dword v[8:9], v4, off offset:8\n", 0},
        /* adjacent, but in two 16-byte windows */
        {"\tglobal_store_dwordx2 v[8:9], v[3:4], off offset:8\n\tglobal_store_dwordx2 v[8:9], v[5:6], off "
         "offset:0x10\n",
         0},
        /* a load and a store are not mixed */
        {"\tglobal_load_dword v3, v[8:9], off\n\tglobal_store_dwordx3 v[8:9], v[4:6], off offset:4\n", 0},
        /* another base register pair, another saddr */
        {"\tglobal_store_b32 v[8:9], v3, off\n\tglobal_store_b32 v[10:11], v4, off offset:4\n", 0},
        {"\tglobal_store_b32 v2, v3, s[8:9]\n\tglobal_store_b32 v2, v4, s[10:11] offset:4\n", 0},
        /* the address written between the two: another address */
        {"\tglobal_store_dword v[8:9], v3, off\n\tv_add_co_u32_e32 v8, vcc, 16, v8\n"
         "\tglobal_store_dword v[8:9], v4, off offset:4\n",
         0},
        /* the same range twice (a store on two paths) is one piece */
        {"\tglobal_store_dword v[8:9], v3, off\n\tglobal_store_dword v[8:9], v4, off\n", 0},
        /* gfx12 names, a byte load inside a 2-byte one's neighbour, hex offsets, saddr */
        {"\tglobal_load_b64 v[0:1], v2, s[8:9] offset:0x20\n\tglobal_load_b64 v[4:5], v2, s[8:9] offset:40\n"
         "\tglobal_load_u16 v6, v[10:11], off offset:14\n\tglobal_load_u8 v7, v[10:11], off offset:13\n",
         4},
        /* a wide access is never a piece; three pieces of one chunk */
        {"\tglobal_load_dwordx4 v[0:3], v[8:9], off\n\tglobal_load_dword v4, v[8:9], off\n"
         "\tglobal_load_dword v5, v[8:9], off offset:4\n\tglobal_load_dwordx2 v[6:7], v[8:9], off offset:8\n",
         3},
    };
    for (size_t i = 0; i < sizeof splits / sizeof splits[0]; i++) {
        char text[512];
        snprintf(text, sizeof text, "0000000000001a00 <k>:\n%s", splits[i].body);
        rk_isa_scan(text, &isa);
        if (isa.split != splits[i].split) print_error("case %zu: split %d, want %d\n", i, isa.split, splits[i].split);
        assert_int_equal(isa.split, splits[i].split);
    }
    /* the register files: LLVM's getNumWavesPerEUWithNumVGPRs, checked against llc-22's "; Occupancy" */
    assert_int_equal(rk_isa_occupancy("gfx942", 64), 8);
    assert_int_equal(rk_isa_occupancy("gfx942", 65), 7);
    assert_int_equal(rk_isa_occupancy("gfx90a", 129), 3);
    assert_int_equal(rk_isa_occupancy("gfx1100", 96), 16);
    assert_int_equal(rk_isa_occupancy("gfx1201", 97), 12);
    assert_int_equal(rk_isa_occupancy("gfx1250", 65), 12);
    assert_int_equal(rk_isa_occupancy("gfx1250", 200), 4);
    assert_int_equal(rk_isa_occupancy("sm_90", 32), -1);
    /* each figure can fail: a line one better than the build on that figure alone */
    rk_build_result r;
    memset(&r, 0, sizeof r);
    r.info.regs = 30, r.info.sgprs = 58, r.isa = (rk_isa){10, 7, 2, 11, 6, 3, 8};
    rk_isa_limit l, now;
    rk_isa_limit_of(&l, "gfx942", "k", &r);
    char why[512];
    assert_int_equal(rk_isa_regressions(&r, &l, why, sizeof why), 0);
    static const char *const want[RK_ISA_FIGURES] = {"vgprs 30 > 29",    "sgprs 58 > 57",   "occupancy 8 < 9",
                                                     "narrow 7 > 6",     "split 2 > 1",     "waits 11 > 10",
                                                     "load_waits 6 > 5", "free_waits 3 > 2"};
    for (int i = 0; i < RK_ISA_FIGURES; i++) {
        now = l;
        *(int *)((char *)&now + rk_isa_figures[i].at) += rk_isa_figures[i].fewer_is_worse ? 1 : -1;
        assert_int_equal(rk_isa_regressions(&r, &now, why, sizeof why), 1);
        if (!strstr(why, want[i])) print_error("figure %s: '%s'\n", rk_isa_figures[i].name, why);
        assert_non_null(strstr(why, want[i]));
    }
    l.vgprs = 29, l.occupancy = 9, l.split = 0, l.load_waits = 5, l.free_waits = 0;
    assert_int_equal(rk_isa_regressions(&r, &l, why, sizeof why), 5);
    r.isa.split = -1;
    rk_isa_limit_of(&l, "gfx942", "k", &r);
    l.split = 0;
    assert_int_equal(rk_isa_regressions(&r, &l, why, sizeof why), 1);
    assert_non_null(strstr(why, "split not known"));
    /* the baseline file's format: a line per (target, kernel); a bad line named */
    rk_isa_limit out[4];
    assert_int_equal(rk_isa_limits_parse("# c\ngfx942 k1 30 58 8 7 0 11 6 0\n\ngfx942 k2 31 58 8 7 2 11 6 1\n"
                                         "gfx1100 k1 51 54 16 9 1 9 5 2",
                                         out, 4, why, sizeof why),
                     3);
    assert_ptr_equal(rk_isa_limit_find(out, 3, "gfx942", "k2"), &out[1]);
    assert_ptr_equal(rk_isa_limit_find(out, 3, "gfx1100", "k1"), &out[2]);
    assert_null(rk_isa_limit_find(out, 3, "gfx1100", "k2"));
    assert_int_equal(out[1].split, 2);
    assert_int_equal(out[2].load_waits, 5);
    assert_int_equal(out[1].free_waits, 1);
    assert_int_equal(out[2].free_waits, 2);
    static const char *const malformed[] = {
        "gfx942 k 30 58 8 7 0 11 6\n",     /* the old format: no free_waits */
        "gfx942 30 58 8 7 0 11 6 0\n",     /* no kernel */
        "gfx942 k 30 58 8 7 0 11 6 0 1\n", /* a figure too many */
        "gfx942 k 30 58 8 7 -1 11 6 0\n",  /* negative */
        "gfx942 k 30 58 8 7 0x2 11 6 0\n", /* not decimal */
        "gfx942_a_target_name_longer_than_its_field k 30 58 8 7 0 11 6 0\n",
    };
    for (size_t i = 0; i < sizeof malformed / sizeof malformed[0]; i++) {
        char text[256];
        snprintf(text, sizeof text, "# header\ngfx942 k0 1 1 1 1 0 1 1 0\n%s", malformed[i]);
        assert_int_equal(rk_isa_limits_parse(text, out, 4, why, sizeof why), -1);
        if (!strstr(why, "line 3:")) print_error("case %zu: '%s'\n", i, why);
        assert_non_null(strstr(why, "line 3:"));
    }
    assert_int_equal(rk_isa_limits_parse("gfx942 k 1 1 1 1 0 1 1 0\ngfx942 k 2 1 1 1 0 1 1 0\n", out, 4, why,
                                         sizeof why),
                     -1);
    assert_non_null(strstr(why, "line 2: a second line for gfx942 k"));
    assert_int_equal(rk_isa_limits_parse("gfx942 k 1 1 1 1 0 1 1 0\ngfx942 k2 2 1 1 1 0 1 1 0\n", out, 1, why,
                                         sizeof why),
                     -1);
    assert_non_null(strstr(why, "line 2: more than 1 lines"));
    /* the checked-in baseline parses and has lines for every AMD target */
    if (g_n_isa < 0) print_error("%s\n", g_isa_why);
    assert_true(g_n_isa >= 0);
    for (int t = 0; t < N_TARGETS; t++) {
        if (TARGETS[t].cc == RK_CC_NVRTC) continue;
        int lines = 0;
        for (int i = 0; i < g_n_isa; i++) lines += !strcmp(g_isa[i].target, TARGETS[t].name);
        assert_true(lines > 0);
    }
}

static int setup(void **state) {
    (void)state;
    rk_err err = {0};
    if (rk_catalog_load_embedded(&g_cat, &err) != ROPEKV_OK) {
        fprintf(stderr, "catalog: %s\n", err.msg);
        return -1;
    }
    probe_compilers();
    load_isa_baseline();
    g_items = calloc(MAX_ITEMS, sizeof *g_items);
    g_res = calloc(MAX_ITEMS, sizeof *g_res);
    rk_desc *tmp = malloc(sizeof *tmp * MAX_ITEMS);
    if (!g_items || !g_res || !tmp) return -1;
    const int n_set = rk_cover_catalog(&g_cat, NULL, 0, tmp, MAX_ITEMS, &err); /* every row's part, once */
    if (n_set < 0) {
        fprintf(stderr, "the covering set: %s\n", err.msg);
        return -1;
    }
    for (int t = 0; t < N_TARGETS; t++) {
        const rk_arch *a = rk_arch_find(&g_cat.archs, TARGETS[t].name);
        if (!a) {
            fprintf(stderr, "specs/archs.lua has no row '%s'\n", TARGETS[t].name);
            return -1;
        }
        int k = 0;
        for (int i = 0; i < n_set; i++) k += tmp[i].arch == a;
        if (k == 0) {
            fprintf(stderr, "the covering set on %s: empty\n", a->name);
            return -1;
        }
        if (!g_have[TARGETS[t].cc]) continue;
        for (int i = 0; i < n_set; i++) {
            if (tmp[i].arch != a) continue;
            g_picked++;
            int dup = 0;
            for (int j = 0; j < g_n && !dup; j++) dup = !strcmp(g_items[j].v.name, tmp[i].name);
            if (dup) continue;
            g_items[g_n].v = tmp[i];
            g_items[g_n].cc = TARGETS[t].cc;
            g_items[g_n].flags = RK_BUILD_SCAN; /* bf16_cvt, pdl_gate, the AMD ISA review */
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
    free(g_isa);
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
        /* a row with e2m1_hw (NVIDIA's family rows sm_100f, sm_103f, sm_120f; gfx950) converts e2m1 in hardware;
         * the others in software */
        if (rk_desc_writes_e2m1(v) && r->e2m1_cvt != (a->e2m1_hw ? 1 : 0))
            WHY(" e2m1 output on %s (e2m1_hw = %s) with %s scan %d;", a->name, a->e2m1_hw ? "true" : "false",
                rk_build_e2m1_insn(a->vendor), r->e2m1_cvt);
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
    if (cc != RK_CC_NVRTC) bad += check_isa(cc);
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
        int rows = 0;                                /* a row format in a layout it fits (a tile row is never split) */
        for (int k = 0; k < rk_spec_rows(sp); k++) { /* its kv dtypes and the records the kernels write */
            rk_record rec;
            rk_spec_row(sp, k, NULL, &rec);
            for (int l = 0; l < sp->n_layout && !rk_record_unsupported(&rec); l++)
                rows += rk_record_fits(&rec, sp->layouts[l]);
        }
        const int positions = sp->rope == RK_ROPE_NONE ? 1 : sp->n_pos; /* rope none reads no positions */
        shapes += rows * sp->n_slot * (writes * forms * positions * sp->n_norms + reads);
    }
    const rk_arch *a = rk_arch_find(&g_cat.archs, "gfx1100");
    assert_non_null(a);
    rk_desc *v = malloc(sizeof *v * RK_MAX_SPECS * RK_MAX_VARIANTS_PER_SPEC);
    assert_non_null(v);
    int k = rk_build_retarget(&g_cat, a, v, RK_MAX_SPECS * RK_MAX_VARIANTS_PER_SPEC);
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
    print_message("matrix: the covering set on %d targets; %d variants with available compilers, %d distinct kernels "
                  "built by %d processes in %.1f s\n",
                  N_TARGETS, g_picked, g_n, g_jobs, g_wall_ms / 1e3);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_retarget),      cmocka_unit_test(test_pick),
        cmocka_unit_test(test_isa_rules),     cmocka_unit_test(test_blackwell_rows),
        cmocka_unit_test(test_hiprtc_gfx90a), cmocka_unit_test(test_clang_targets),
        cmocka_unit_test(test_nvrtc_targets), cmocka_unit_test(test_timing),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
