/* The hip backend end to end against the HIP stand-in (tests/support/hip_standin.h), a test double for
 * libamdhip64: no AMD GPU is needed, and none was used. Four stand-in devices: an MI300X-like gfx942, an
 * MI355X-like gfx950 and a gfx1250 (ordinals 0-2) whose kernels come from a bundle that ropekv-gen builds with
 * clang-22, as on a ROCm machine whose hiprtc cannot build them; and a gfx90a (ordinal 3) whose kernels this
 * machine's hiprtc (ROCm 5.2) compiles at run time. Checked: the context's target, loads through the stand-in,
 * launches reaching hipModuleLaunchKernel with the runtime's arguments, grid, block and stream; each HIP failure
 * giving its documented status and a message naming the HIP call; the device made current and restored.
 * Skipped (77) without clang-22. The hip backend opens libamdhip64 once per process, so the stand-in is
 * reconfigured through its own setters, reached by dlopen of the same library. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "args_check.h"
#include "compilers.h"
#include "hip_standin.h"
#include "testutil.h"

static const char *const k_targets[] = {"gfx942:sramecc+:xnack-", "gfx950:sramecc+:xnack-", "gfx1250",
                                        "gfx90a:sramecc+:xnack-"};
#define DEVICES "gfx942:sramecc+:xnack-,gfx950:sramecc+:xnack-,gfx1250,gfx90a:sramecc+:xnack-"
enum { BUNDLED = 3, JIT = 3 };
/* hipModuleLaunchKernel's `extra` markers (hip_runtime_api.h) */
#define HIP_LAUNCH_PARAM_BUFFER_POINTER_ ((void *)0x01)
#define HIP_LAUNCH_PARAM_BUFFER_SIZE_ ((void *)0x02)
#define HIP_LAUNCH_PARAM_END_ ((void *)0x03) /* devices 0..2 run the bundle; device 3 compiles with hiprtc */

/* One variant, on every row: the filter of `ropekv-gen build` picks exactly it. */
#define VARIANT_KEY "deepseek_v3/%s/bf16/absorbed/pos=int64/slot=int64/layout=paged"
static const ropekv_variant k_variant = {.spec = "deepseek_v3", .layout = ROPEKV_KV_PAGED};

static char g_dir[] = "/tmp/rk-hip-standin-XXXXXX";
static char g_bundle[4200];
static rk_catalog g_cat;
static int g_have_hiprtc;

/* The stand-in's control functions and the HIP calls the tests make themselves. */
static struct {
    int (*last_launch)(rk_hip_standin_launch *);
    int (*inject)(const char *, int);
    int (*set_devices)(const char *);
    void (*cap_threads)(unsigned);
    int (*live_modules)(void);
    void (*reset)(void);
    int (*set_device)(int);
    int (*get_device)(int *);
    int (*load)(void **, const void *);
    int (*unload)(void *);
    int (*get_function)(void **, void *, const char *);
    int (*launch)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *, void **,
                  void **);
} sd;

/* ---- helpers ------------------------------------------------------------------------------------------- */
/* Runs argv with stdout and stderr into log; the exit status. */
static int run(char *const argv[], const char *log) {
    pid_t pid = rk_test_fork();
    if (pid == 0) {
        if (!freopen(log, "w", stdout) || dup2(fileno(stdout), 2) < 0) _exit(127);
        execvp(argv[0], argv);
        _exit(127);
    }
    return rk_test_wait(pid);
}

static int file_has(const char *path, const char *text) {
    char buf[16384];
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    buf[n] = '\0';
    return strstr(buf, text) != NULL;
}

/* A bundle entry per target id: the one variant, built by ropekv-gen for target (clang-22 for the rows this
 * machine's hiprtc cannot build). 0; 77 when clang-22 is not here; -1 on another failure. */
static int make_bundle(const char *target) {
    char row[32], filter[160], log[4300];
    snprintf(row, sizeof row, "%.*s", (int)strcspn(target, ":"), target);
    snprintf(filter, sizeof filter, VARIANT_KEY, row);
    snprintf(log, sizeof log, "%s/gen.log", g_dir);
    char *argv[] = {RK_GEN, "--filter", filter, "build", "--target", (char *)target, "--bundle", g_bundle, NULL};
    if (run(argv, log) == 0) return 0;
    if (file_has(log, "no hip backend for target")) {
        print_message("skipped: ropekv-gen cannot build %s here (no clang-22)\n", target);
        return 77;
    }
    fprintf(stderr, "ropekv-gen build --bundle for %s failed; see %s\n", target, log);
    return -1;
}

static ropekv_ctx *hip_ctx(int device, const char *target) {
    ropekv_options o = {.backend = ROPEKV_BACKEND_HIP, .device = device, .target = target, .disk_cache = -1};
    ropekv_ctx *c = NULL;
    ropekv_status s = ropekv_create(&c, &o);
    if (s != ROPEKV_OK) fprintf(stderr, "ropekv_create(hip, device %d): %s\n", device, ropekv_status_name(s));
    return c;
}

/* Launch arguments with fake device pointers (the stand-in never dereferences them), 16-byte aligned. */
enum { L = 512, R = 64, W = 576, T = 5, H = 16, B = 16 };
static ropekv_args fake_args(void) {
    char *base = (char *)(uintptr_t)0x7e0000000000u;
    return (ropekv_args){
        .tokens = T,
        .heads = H,
        .q_nope = base,
        .q_nope_st = H * W,
        .q_nope_sh = W,
        .q_pe = base + 2 * L,
        .q_pe_st = H * W,
        .q_pe_sh = W,
        .q_out = base + 0x100000,
        .q_out_st = H * W,
        .q_out_sh = W,
        .k_nope = base + 0x200000,
        .k_nope_st = W,
        .k_pe = base + 0x200000 + 2 * L,
        .k_pe_st = W,
        .kv_cache = base + 0x300000,
        .kv_st = W,
        .kv_rows = 4 * B,
        .kv_block_size = B,
        .kv_block_st = B * W,
        .positions = base + 0x400000,
        .slots = base + 0x500000,
        .cos_sin = base + 0x600000,
        .max_pos = 4096,
    };
}

/* The launch of k with a, checked against what the stand-in recorded: the kernel, grid and block of the
 * launch plan, the stream, the device, and the kernarg segment's explicit part (rk_args by value at offset
 * 0) field by field against the caller's arguments and the plan. */
static void launch_and_check(ropekv_ctx *c, ropekv_kernel *k, int device) {
    char row[32], key[160];
    snprintf(row, sizeof row, "%.*s", (int)strcspn(ropekv_target(c), ":"), ropekv_target(c));
    snprintf(key, sizeof key, VARIANT_KEY, row);
    const rk_desc *d = rk_test_variant(&g_cat, key);
    assert_non_null(d);

    const ropekv_args a = fake_args();
    rk_plan pl;
    rk_err err = {0};
    assert_int_equal(rk_args_check(d, &a, &pl, &err), ROPEKV_OK);
    void *stream = (void *)(uintptr_t)0x5eed0000u;
    rk_hip_standin_launch before = {0}, got;
    sd.last_launch(&before);
    ropekv_status s = ropekv_launch(k, &a, stream);
    if (s != ROPEKV_OK) fail_msg("ropekv_launch: %s: %s", ropekv_status_name(s), ropekv_last_error(c));
    assert_int_equal(sd.last_launch(&got), 0);
    assert_int_equal(got.count, before.count + 1);
    assert_string_equal(got.kernel, ropekv_kernel_name(k));
    assert_int_equal(got.device, device);
    assert_ptr_equal(got.stream, stream);
    assert_int_equal(got.extra, 0);
    assert_int_equal(got.grid[0], pl.blocks);
    assert_int_equal(got.block[0], pl.block);
    assert_int_equal(got.grid[1] * got.grid[2] * got.block[1] * got.block[2], 1);
    assert_int_equal(got.shared, 0);
    assert_true(got.kernarg_size >= sizeof(rk_args));

    rk_args want = pl.args; /* the caller's fields and the plan's; no pdl on AMD rows: no prefetch */
    want.prefetch = 0;
#define FIELD(type, name)                                                                        \
    if (memcmp(got.kernarg + offsetof(rk_args, name), &want.name, 8) != 0)                       \
        fail_msg("kernarg field %s: got 0x%llx, the runtime's 0x%llx", #name,                    \
                 (unsigned long long)*(const uint64_t *)(got.kernarg + offsetof(rk_args, name)), \
                 (unsigned long long)(uint64_t)(uintptr_t)want.name);
    RK_ARGS(FIELD)
#undef FIELD
    /* ... and against the caller's own values, not only the runtime's copy of them */
    rk_args seen;
    memcpy(&seen, got.kernarg, sizeof seen);
    assert_ptr_equal(seen.q_nope, a.q_nope);
    assert_ptr_equal(seen.kv_cache, a.kv_cache);
    assert_int_equal(seen.tokens, T);
    assert_int_equal(seen.heads, H);
    assert_int_equal(seen.kv_tokens, T); /* 0: as many KV rows as tokens, passed as a count */
    assert_int_equal(seen.grid_groups, T);
    assert_int_equal(seen.kv_block_size, B);
    assert_int_equal(seen.lanes * seen.grid_groups, pl.total);
}

/* ---- setup ---------------------------------------------------------------------------------------------- */
static int setup(void **state) {
    (void)state;
    if (rk_test_setup(g_dir, &g_cat) != 0) return -1;
    snprintf(g_bundle, sizeof g_bundle, "%s/bundle", g_dir);
    const char *ids[] = {k_targets[0], k_targets[1], k_targets[2], "gfx942:sramecc+:xnack+"};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        int rc = make_bundle(ids[i]);
        if (rc == 77) {
            rk_test_remove_tree(g_dir);
            exit(77);
        }
        if (rc != 0) return -1;
    }
    g_have_hiprtc = rk_hiprtc_available(NULL, NULL, NULL, 0) == 0;
    void *h = dlopen(RK_HIP_STANDIN, RTLD_NOW | RTLD_LOCAL);
    if (!h) return fprintf(stderr, "%s\n", dlerror()), -1;
    *(void **)&sd.last_launch = dlsym(h, "rk_hip_standin_last_launch");
    *(void **)&sd.inject = dlsym(h, "rk_hip_standin_fail");
    *(void **)&sd.set_devices = dlsym(h, "rk_hip_standin_set_devices");
    *(void **)&sd.cap_threads = dlsym(h, "rk_hip_standin_cap_threads");
    *(void **)&sd.live_modules = dlsym(h, "rk_hip_standin_live_modules");
    *(void **)&sd.reset = dlsym(h, "rk_hip_standin_reset");
    *(void **)&sd.set_device = dlsym(h, "hipSetDevice");
    *(void **)&sd.get_device = dlsym(h, "hipGetDevice");
    *(void **)&sd.load = dlsym(h, "hipModuleLoadData");
    *(void **)&sd.unload = dlsym(h, "hipModuleUnload");
    *(void **)&sd.get_function = dlsym(h, "hipModuleGetFunction");
    *(void **)&sd.launch = dlsym(h, "hipModuleLaunchKernel");
    if (!sd.last_launch || !sd.inject || !sd.set_devices || !sd.cap_threads || !sd.live_modules || !sd.reset ||
        !sd.set_device || !sd.get_device || !sd.load || !sd.unload || !sd.get_function || !sd.launch)
        return fprintf(stderr, "the stand-in lacks a control function\n"), -1;
    setenv("ROPEKV_LIBHIP", RK_HIP_STANDIN, 1);
    setenv("RK_HIP_STANDIN_DEVICES", DEVICES, 1);
    unsetenv("RK_HIP_STANDIN_FAIL");
    setenv("ROPEKV_CACHE_RO", g_bundle, 1);
    setenv("ROPEKV_DISABLE_CACHE", "1", 1);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    rk_test_remove_tree(g_dir);
    return 0;
}

static int reset(void **state) {
    (void)state;
    sd.reset();
    return 0;
}

/* ---- tests ---------------------------------------------------------------------------------------------- */
/* Devices 0..2: the full target id, the bundled kernel loaded through the stand-in (no compile), launched. */
static void test_bundled_devices(void **state) {
    (void)state;
    for (int dev = 0; dev < BUNDLED; dev++) {
        ropekv_ctx *c = hip_ctx(dev, NULL);
        assert_non_null(c);
        assert_string_equal(ropekv_backend_name(c), "hip");
        assert_string_equal(ropekv_target(c), k_targets[dev]);
        ropekv_kernel *k = NULL;
        ropekv_status s = ropekv_kernel_get(c, &k_variant, &k);
        if (s != ROPEKV_OK) fail_msg("device %d: %s: %s", dev, ropekv_status_name(s), ropekv_last_error(c));
        ropekv_stats st;
        ropekv_get_stats(c, &st);
        assert_int_equal(st.disk_hits, 1);
        assert_int_equal(st.compiles, 0);
        launch_and_check(c, k, dev);
        ropekv_kernel_release(k);
        ropekv_destroy(c);
    }
    assert_int_equal(sd.live_modules(), 0); /* every module unloaded with its context */
}

/* Device 3 (gfx90a): hiprtc compiles, the stand-in loads and launches. */
static void test_jit_gfx90a(void **state) {
    (void)state;
    if (!g_have_hiprtc) skip();
    ropekv_ctx *c = hip_ctx(JIT, NULL);
    assert_non_null(c);
    assert_string_equal(ropekv_target(c), k_targets[JIT]);
    ropekv_kernel *k = NULL;
    ropekv_status s = ropekv_kernel_get(c, &k_variant, &k);
    if (s != ROPEKV_OK) fail_msg("%s: %s", ropekv_status_name(s), ropekv_last_error(c));
    ropekv_stats st;
    ropekv_get_stats(c, &st);
    assert_int_equal(st.compiles, 1);
    launch_and_check(c, k, JIT);
    ropekv_kernel_release(k);
    ropekv_destroy(c);
}

/* The context's device is made current for each call and the caller's restored: with device 2 current on
 * this thread, kernels of devices 0 and 1 load and launch on their own (the stand-in refuses a launch on a
 * device other than the module's). */
static void test_current_device(void **state) {
    (void)state;
    ropekv_ctx *c[2] = {hip_ctx(0, NULL), hip_ctx(1, NULL)};
    assert_non_null(c[0]);
    assert_non_null(c[1]);
    assert_int_equal(sd.set_device(2), 0);
    ropekv_kernel *k[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++) assert_int_equal(ropekv_kernel_get(c[i], &k_variant, &k[i]), ROPEKV_OK);
    int cur = -1;
    assert_int_equal(sd.get_device(&cur), 0);
    assert_int_equal(cur, 2);
    for (int round = 0; round < 2; round++)
        for (int i = 1; i >= 0; i--) {
            launch_and_check(c[i], k[i], i);
            assert_int_equal(sd.get_device(&cur), 0);
            assert_int_equal(cur, 2);
        }
    for (int i = 0; i < 2; i++) {
        ropekv_kernel_release(k[i]);
        ropekv_destroy(c[i]);
    }
    assert_int_equal(sd.get_device(&cur), 0);
    assert_int_equal(cur, 2);
}

/* ropekv_create with logging on: the status, and the log (stderr) naming the HIP call. */
static void expect_create(int device, ropekv_status want, const char *call, const char *error) {
    char cap[4300];
    snprintf(cap, sizeof cap, "%s/stderr", g_dir);
    assert_int_equal(rk_test_capture_begin(cap), 0);
    ropekv_options o = {.backend = ROPEKV_BACKEND_HIP, .device = device, .disk_cache = -1, .log = 1};
    ropekv_ctx *c = NULL;
    ropekv_status s = ropekv_create(&c, &o);
    const char *err = rk_test_capture_end();
    ropekv_destroy(c);
    assert_int_equal(s, want);
    if (!strstr(err, call) || !strstr(err, error)) fail_msg("the log does not name %s and %s: %s", call, error, err);
}

static void test_open_failures(void **state) {
    (void)state;
    assert_int_equal(sd.inject("hipInit", 100), 0);
    expect_create(0, ROPEKV_ERR_BACKEND, "hipInit", "hipErrorNoDevice");
    sd.reset();
    assert_int_equal(sd.set_devices(""), 0);
    expect_create(0, ROPEKV_ERR_BACKEND, "hipGetDeviceCount", "hipErrorNoDevice");
    sd.reset();
    expect_create(4, ROPEKV_ERR_BACKEND, "no device 4", "hipGetDeviceCount reports 4");
    assert_int_equal(sd.inject("hipGetDevicePropertiesR0600", 101), 0);
    expect_create(1, ROPEKV_ERR_DEVICE, "hipGetDevicePropertiesR0600", "hipErrorInvalidDevice");
    sd.reset();
    ropekv_ctx *c = hip_ctx(1, NULL); /* and nothing of that stays */
    assert_non_null(c);
    ropekv_destroy(c);
}

/* kernel_get with the stand-in refusing the bundle's code object: the entry is skipped (a cache reject, the
 * warning naming the HIP call and error), then the compile is refused (this machine's hiprtc cannot build
 * gfx942): ROPEKV_ERR_TARGET. */
static void expect_bundle_refused(ropekv_ctx *c, const char *call, const char *error) {
    char cap[4300];
    snprintf(cap, sizeof cap, "%s/stderr", g_dir);
    ropekv_stats before, after;
    ropekv_get_stats(c, &before);
    ropekv_kernel *k = NULL;
    assert_int_equal(rk_test_capture_begin(cap), 0);
    ropekv_status s = ropekv_kernel_get(c, &k_variant, &k);
    const char *err = rk_test_capture_end();
    assert_null(k);
    assert_int_equal(s, g_have_hiprtc ? ROPEKV_ERR_TARGET : ROPEKV_ERR_COMPILE);
    if (!strstr(err, call) || !strstr(err, error))
        fail_msg("the warning does not name %s and %s: %s", call, error, err);
    if (g_have_hiprtc && !strstr(ropekv_last_error(c), "cannot build"))
        fail_msg("ropekv_last_error: %s", ropekv_last_error(c));
    ropekv_get_stats(c, &after);
    assert_int_equal(after.cache_rejects, before.cache_rejects + 1);
    assert_int_equal(sd.live_modules(), 0);
}

static void test_load_failures(void **state) {
    (void)state;
    /* a code object for xnack+ on an xnack- device (the target forced): HIP's loader refuses it */
    ropekv_ctx *c = hip_ctx(0, "gfx942:sramecc+:xnack+");
    assert_non_null(c);
    expect_bundle_refused(c, "hipModuleLoadData", "hipErrorNoBinaryForGpu");
    ropekv_destroy(c);

    /* injected: the load, then the function; the context works once the failure is gone */
    c = hip_ctx(0, NULL);
    assert_non_null(c);
    assert_int_equal(sd.inject("hipModuleLoadData", 200), 0);
    expect_bundle_refused(c, "hipModuleLoadData", "hipErrorInvalidImage");
    sd.reset();
    assert_int_equal(sd.inject("hipModuleGetFunction", 500), 0);
    expect_bundle_refused(c, "hipModuleGetFunction", "hipErrorNotFound");
    sd.reset();
    ropekv_kernel *k = NULL;
    assert_int_equal(ropekv_kernel_get(c, &k_variant, &k), ROPEKV_OK);
    launch_and_check(c, k, 0);
    ropekv_kernel_release(k);
    ropekv_destroy(c);
}

/* With hiprtc, a load failure is the kernel_get's own: ROPEKV_ERR_DEVICE naming the call. Also a kernel
 * whose maximum workgroup size is below the arch row's block is refused at load, by name. */
static void test_jit_load_failures(void **state) {
    (void)state;
    if (!g_have_hiprtc) skip();
    ropekv_ctx *c = hip_ctx(JIT, NULL);
    assert_non_null(c);
    ropekv_kernel *k = NULL;
    assert_int_equal(sd.inject("hipModuleGetFunction", 500), 0);
    assert_int_equal(ropekv_kernel_get(c, &k_variant, &k), ROPEKV_ERR_DEVICE);
    const char *e = ropekv_last_error(c);
    if (!strstr(e, "hipModuleGetFunction") || !strstr(e, "hipErrorNotFound") || !strstr(e, k_targets[JIT]))
        fail_msg("%s", e);
    sd.reset();
    sd.cap_threads(64);
    assert_int_equal(ropekv_kernel_get(c, &k_variant, &k), ROPEKV_ERR_DEVICE);
    e = ropekv_last_error(c);
    if (!strstr(e, "HIP_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK") || !strstr(e, "allows 64")) fail_msg("%s", e);
    assert_int_equal(sd.live_modules(), 0);
    ropekv_destroy(c);
}

/* A failing launch is ROPEKV_ERR_LAUNCH naming hipModuleLaunchKernel and the error; the next one works. */
static void test_launch_failure(void **state) {
    (void)state;
    ropekv_ctx *c = hip_ctx(1, NULL);
    assert_non_null(c);
    ropekv_kernel *k = NULL;
    assert_int_equal(ropekv_kernel_get(c, &k_variant, &k), ROPEKV_OK);
    assert_int_equal(sd.inject("hipModuleLaunchKernel", 719), 0);
    const ropekv_args a = fake_args();
    assert_int_equal(ropekv_launch(k, &a, NULL), ROPEKV_ERR_LAUNCH);
    const char *e = ropekv_last_error(c);
    if (!strstr(e, "hipModuleLaunchKernel") || !strstr(e, "hipErrorLaunchFailure") || !strstr(e, k_targets[1]))
        fail_msg("%s", e);
    sd.reset();
    launch_and_check(c, k, 1);
    ropekv_kernel_release(k);
    ropekv_destroy(c);
}

/* ---- the stand-in's own refusals (a test double that accepts everything proves nothing) ----------- */
/* A small kernel of two explicit arguments that reads its block size (a hidden argument), built by clang-22
 * for gfx942; the stand-in's refusals are checked on it with HIP calls made here. */
static const char k_probe_src[] =
    "extern \"C\" __attribute__((global)) __attribute__((amdgpu_flat_work_group_size(1, 256)))\n"
    "void probe(int *out, int n) { out[n] = __builtin_amdgcn_workgroup_size_x(); }\n";

static void test_standin_refuses(void **state) {
    (void)state;
    char src[4300], obj[4300], log[4300];
    snprintf(src, sizeof src, "%s/probe.hip", g_dir);
    snprintf(obj, sizeof obj, "%s/probe.o", g_dir);
    snprintf(log, sizeof log, "%s/clang.log", g_dir);
    assert_int_equal(rk_test_write_file(src, k_probe_src, strlen(k_probe_src), 0600), ROPEKV_OK);
    char *argv[] = {"clang++-22",
                    "-x",
                    "hip",
                    "--cuda-device-only",
                    "--no-gpu-bundle-output",
                    "--offload-arch=gfx942:sramecc+:xnack-",
                    "-nogpuinc",
                    "-nogpulib",
                    "-O2",
                    "-mcode-object-version=5",
                    "-c",
                    src,
                    "-o",
                    obj,
                    NULL};
    if (run(argv, log) != 0) fail_msg("clang++-22 failed; see %s", log);
    static unsigned char code[1 << 20];
    FILE *f = fopen(obj, "rb");
    assert_non_null(f);
    size_t n = fread(code, 1, sizeof code, f);
    fclose(f);
    assert_true(n > 0 && n < sizeof code);

    void *m = NULL, *fn = NULL;
    static const unsigned char junk[256] = "not a code object";
    assert_int_equal(sd.load(&m, junk), 200); /* hipErrorInvalidImage */
    assert_int_equal(sd.set_device(2), 0);    /* gfx1250 */
    assert_int_equal(sd.load(&m, code), 209); /* hipErrorNoBinaryForGpu */
    assert_int_equal(sd.set_device(0), 0);
    assert_int_equal(sd.load(&m, code), 0);
    assert_int_equal(sd.get_function(&fn, m, "nope"), 500); /* hipErrorNotFound */
    assert_int_equal(sd.get_function(&fn, m, "probe"), 0);

    void *out = (void *)(uintptr_t)0x7e0000001000u;
    int idx = 7;
    void *params[] = {&out, &idx};
    void *stream = (void *)(uintptr_t)0x51u;
    assert_int_equal(sd.launch(fn, 3, 1, 1, 128, 1, 1, 0, stream, params, NULL), 0);
    rk_hip_standin_launch got;
    assert_int_equal(sd.last_launch(&got), 0);
    assert_string_equal(got.kernel, "probe");
    assert_int_equal(got.grid[0], 3);
    assert_int_equal(got.block[0], 128);
    assert_ptr_equal(got.stream, stream);
    assert_true(got.kernarg_size > 16); /* the hidden arguments behind the explicit ones */
    assert_memory_equal(got.kernarg, &out, 8);
    assert_memory_equal(got.kernarg + 8, &idx, 4);
    uint16_t group_x = 0; /* hidden_group_size_x: offset 12 of the implicit arguments (code object v5) */
    memcpy(&group_x, got.kernarg + 16 + 12, 2);
    assert_int_equal(group_x, 128);

    /* hipErrorInvalidConfiguration: no grid, a block above the kernel's limit or not whole waves */
    assert_int_equal(sd.launch(fn, 0, 1, 1, 128, 1, 1, 0, NULL, params, NULL), 9);
    assert_int_equal(sd.launch(fn, 3, 1, 1, 512, 1, 1, 0, NULL, params, NULL), 9);
    assert_int_equal(sd.launch(fn, 3, 1, 1, 96, 1, 1, 0, NULL, params, NULL), 9);
    /* hipErrorInvalidValue: both argument forms, or an `extra` buffer short of the explicit arguments */
    unsigned char buf[16] = {0};
    size_t size = 12;
    void *extra[] = {HIP_LAUNCH_PARAM_BUFFER_POINTER_, buf, HIP_LAUNCH_PARAM_BUFFER_SIZE_, &size,
                     HIP_LAUNCH_PARAM_END_};
    assert_int_equal(sd.launch(fn, 3, 1, 1, 128, 1, 1, 0, NULL, params, extra), 1);
    memcpy(buf, &out, 8);
    memcpy(buf + 8, &idx, 4);
    assert_int_equal(sd.launch(fn, 1, 1, 1, 64, 1, 1, 0, NULL, NULL, extra), 0);
    assert_int_equal(sd.last_launch(&got), 0);
    assert_int_equal(got.extra, 1);
    assert_memory_equal(got.kernarg, buf, 12);
    size = 4;
    assert_int_equal(sd.launch(fn, 1, 1, 1, 64, 1, 1, 0, NULL, NULL, extra), 1);
    /* hipErrorInvalidDeviceFunction: the module's device is not current */
    assert_int_equal(sd.set_device(1), 0);
    assert_int_equal(sd.launch(fn, 3, 1, 1, 128, 1, 1, 0, NULL, params, NULL), 98);
    assert_int_equal(sd.set_device(0), 0);
    assert_int_equal(sd.unload(m), 0);
    assert_int_equal(sd.unload(m), 400); /* hipErrorInvalidHandle */
    assert_int_equal(sd.launch(fn, 3, 1, 1, 128, 1, 1, 0, NULL, params, NULL), 400);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_bundled_devices, reset), cmocka_unit_test_setup(test_jit_gfx90a, reset),
        cmocka_unit_test_setup(test_current_device, reset),  cmocka_unit_test_setup(test_open_failures, reset),
        cmocka_unit_test_setup(test_load_failures, reset),   cmocka_unit_test_setup(test_jit_load_failures, reset),
        cmocka_unit_test_setup(test_launch_failure, reset),  cmocka_unit_test_setup(test_standin_refuses, reset),
    };
    return cmocka_run_group_tests_name("hip_standin", tests, setup, teardown);
}
