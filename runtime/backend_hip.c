/* The hip backend: hiprtc (runtime/hiprtc.c) + the HIP module API from libamdhip64, loaded with
 * dlopen so a build never needs ROCm. Works with ROCm 5 (Debian's 5.2.3) and ROCm 6/7.
 * The device's full target id (gcnArchName, e.g. "gfx942:sramecc+:xnack-") is what hiprtc compiles
 * for and what cache keys hold. A target the local hiprtc cannot compile is refused before the
 * compiler is called (ROCm 5.2's hiprtc aborts the process on gfx942 and newer). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "env.h"
#include "backend.h"
#include "dl.h"

typedef int hipError_t;
typedef struct ihipModule_t *hipModule_t;
typedef struct ihipModuleSymbol_t *hipFunction_t;
typedef struct ihipStream_t *hipStream_t;

/* The HIP entry points used. ROCm 6 renamed the properties call (its struct changed); both hold
 * gcnArchName, so either will do. */
#define HIP_API(X)                                                                                                \
    X(init, "hipInit", 1, hipError_t, (unsigned))                                                                 \
    X(device_count, "hipGetDeviceCount", 1, hipError_t, (int *))                                                  \
    X(get_device, "hipGetDevice", 1, hipError_t, (int *))                                                         \
    X(set_device, "hipSetDevice", 1, hipError_t, (int))                                                           \
    X(module_load, "hipModuleLoadData", 1, hipError_t, (hipModule_t *, const void *))                             \
    X(module_unload, "hipModuleUnload", 1, hipError_t, (hipModule_t))                                             \
    X(get_function, "hipModuleGetFunction", 1, hipError_t, (hipFunction_t *, hipModule_t, const char *))          \
    X(launch, "hipModuleLaunchKernel", 1, hipError_t,                                                             \
      (hipFunction_t, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, hipStream_t, void **, \
       void **))                                                                                                  \
    X(error_string, "hipGetErrorString", 1, const char *, (hipError_t))                                           \
    X(properties_r0600, "hipGetDevicePropertiesR0600", 0, hipError_t, (void *, int))                              \
    X(properties_old, "hipGetDeviceProperties", 0, hipError_t, (void *, int))

typedef struct hip_api {
    HIP_API(RK_DL_FIELD)
    hipError_t (*properties)(void *, int); /* the one of the two the library has */
} hip_api;

#define RK_DL_TABLE hip_api
static const rk_dl_sym hip_syms[] = {HIP_API(RK_DL_SYM)};
#undef RK_DL_TABLE

static hip_api hip;
static int hip_loaded;
static char hip_why[256];
static pthread_once_t hip_once = PTHREAD_ONCE_INIT;

static void hip_load(void) {
    const char *env = rk_env_text(RK_ENV_LIBHIP);
    const char *names[] = {env && *env ? env : "libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6",
                           "libamdhip64.so.5"};
    rk_dl dl;
    if (rk_dl_open(&dl, names, sizeof names / sizeof names[0], NULL) != ROPEKV_OK) {
        snprintf(hip_why, sizeof hip_why, "libamdhip64 not found");
        return;
    }
    if (rk_dl_resolve(&dl, hip_syms, sizeof hip_syms / sizeof hip_syms[0], &hip, 1) != ROPEKV_OK) {
        snprintf(hip_why, sizeof hip_why, "libamdhip64 lacks %s", dl.missing);
        rk_dl_close(&dl);
        return;
    }
    hip.properties = hip.properties_r0600 ? hip.properties_r0600 : hip.properties_old;
    if (!hip.properties) {
        snprintf(hip_why, sizeof hip_why, "libamdhip64 lacks hipGetDeviceProperties");
        rk_dl_close(&dl);
        return;
    }
    hip_loaded = 1; /* the library stays open for the life of the process */
}

/* gcnArchName from a hipDeviceProp_t of any ROCm version: the NUL-terminated "gfx..." string in it
 * (the struct's layout differs between versions; the name is its only field of that form). */
static int arch_name(const unsigned char *prop, size_t n, char *out, size_t cap) {
    for (size_t i = 0; i + 4 < n; i++) {
        if (memcmp(prop + i, "gfx", 3) != 0 || prop[i + 3] < '0' || prop[i + 3] > '9') continue;
        if (i > 0 && prop[i - 1] != 0) continue;
        size_t k = i;
        while (k < n && prop[k] && k - i < cap - 1) k++;
        if (k == n || prop[k]) continue;
        memcpy(out, prop + i, k - i);
        out[k - i] = '\0';
        return 0;
    }
    return -1;
}

typedef struct hip_state {
    int ordinal;
} hip_state;

/* The compiler's identity, the options of d->target and whether hiprtc can build it: part of every cache key (or
 * of the context's refusal), so one function sets them for device and compile-only contexts alike. */
static void hip_identity(rk_device *d, int have_rtc, int major, int minor) {
    char why[512];
    if (have_rtc) snprintf(d->compiler_id, sizeof d->compiler_id, "hiprtc %d.%d", major, minor);
    else snprintf(d->compiler_id, sizeof d->compiler_id, "no hiprtc");
    if (have_rtc && !rk_hiprtc_supports(major, minor, d->target, why, sizeof why))
        snprintf(d->refused, sizeof d->refused, "%s", why);
    snprintf(d->options, sizeof d->options, "--offload-arch=%s -O3 -ffp-contract=off -std=c++17", d->target);
}

static int hip_open(rk_device *d, int ordinal, const char *target_override, rk_buf *log) {
    int major = 0, minor = 0, n = 0;
    char why[512];
    if (ordinal == RK_COMPILE_ONLY) { /* no HIP runtime, no device: the compiler is what is needed */
        if (rk_hiprtc_available(&major, &minor, why, sizeof why) != 0) {
            rk_buf_printf(log, "hip (compile only): %s", why);
            return ROPEKV_ERR_BACKEND;
        }
        snprintf(d->target, sizeof d->target, "%s", target_override);
        hip_identity(d, 1, major, minor);
        return ROPEKV_OK;
    }
    pthread_once(&hip_once, hip_load);
    if (!hip_loaded) {
        rk_buf_printf(log, "hip: %s", hip_why);
        return ROPEKV_ERR_BACKEND;
    }
    hip.init(0);
    hipError_t e = hip.device_count(&n);
    if (e != 0 || ordinal < 0 || ordinal >= n) {
        rk_buf_printf(log, "hip: no device %d (%s)", ordinal, e ? hip.error_string(e) : "too few devices");
        return ROPEKV_ERR_BACKEND;
    }
    /* Without hiprtc the backend still opens: kernels then come only from read-only cache layers (bundles),
     * and a compile fails naming the reason (hip_compile). */
    const int have_rtc = rk_hiprtc_available(&major, &minor, why, sizeof why) == 0;
    if (target_override) {
        snprintf(d->target, sizeof d->target, "%s", target_override);
    } else {
        static unsigned char prop[16384];
        static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
        pthread_mutex_lock(&mu);
        memset(prop, 0, sizeof prop);
        e = hip.properties(prop, ordinal);
        int found = e == 0 ? arch_name(prop, sizeof prop, d->target, sizeof d->target) : -1;
        pthread_mutex_unlock(&mu);
        if (found != 0) {
            rk_buf_printf(log, "hip: cannot read device %d's target (%s)", ordinal,
                          e ? hip.error_string(e) : "no gfx name");
            return ROPEKV_ERR_DEVICE;
        }
    }
    hip_identity(d, have_rtc, major, minor);
    hip_state *s = calloc(1, sizeof *s);
    if (!s) return ROPEKV_ERR_NOMEM;
    s->ordinal = ordinal;
    d->state = s;
    return ROPEKV_OK;
}

static int hip_compile(rk_device *d, const char *src, size_t len, const char *name, const rk_arch *arch,
                       rk_codeobj *out, rk_buf *log) {
    (void)name;
    char why[512];
    if (rk_hiprtc_available(NULL, NULL, why, sizeof why) != 0) {
        rk_buf_printf(log,
                      "no compiler: %s; without hiprtc only kernels of a read-only cache layer run "
                      "(ROPEKV_CACHE_RO, a bundle of `ropekv-gen build --bundle`)\n",
                      why);
        return ROPEKV_ERR_COMPILE;
    }
    return rk_hiprtc_compile(src, len, d->target, arch->options[0] ? arch->options : NULL, out, log);
}

/* Runs with the context's device current, then restores the caller's. */
#define ON_DEVICE(s, body)                                              \
    do {                                                                \
        int prev_ = -1;                                                 \
        hip.get_device(&prev_);                                         \
        if (prev_ != (s)->ordinal) hip.set_device((s)->ordinal);        \
        body;                                                           \
        if (prev_ >= 0 && prev_ != (s)->ordinal) hip.set_device(prev_); \
    } while (0)

static int hip_load_module(rk_device *d, const rk_codeobj *co, const char *name, void **module, void *fn[2],
                           rk_buf *log) {
    hip_state *s = d->state;
    char wide[256];
    snprintf(wide, sizeof wide, "%s_i64", name);
    hipModule_t m = NULL;
    hipFunction_t f32 = NULL, f64 = NULL;
    hipError_t e = 0, e32 = 0, e64 = 0;
    ON_DEVICE(s, {
        e = hip.module_load(&m, co->data);
        if (e == 0) { /* a build of one entry (RK_ENTRIES) lacks the other */
            e32 = hip.get_function(&f32, m, name);
            e64 = hip.get_function(&f64, m, wide);
            if (e32 != 0 && e64 != 0) e = e32;
        }
        if (e != 0 && m) hip.module_unload(m);
    });
    if (e != 0) {
        rk_buf_printf(log, "hipModuleLoadData/GetFunction %s: %s", name, hip.error_string(e));
        return ROPEKV_ERR_DEVICE;
    }
    *module = m;
    fn[0] = f32;
    fn[1] = f64;
    return ROPEKV_OK;
}

static int hip_launch(rk_device *d, void *fn, const rk_args *a, int64_t blocks, int block, int pdl, void *stream,
                      rk_buf *log) {
    (void)pdl; /* no programmatic dependent launch here */
    hip_state *s = d->state;
    rk_args copy = *a;
    void *params[] = {&copy};
    hipError_t e = 0;
    ON_DEVICE(s, e = hip.launch((hipFunction_t)fn, (unsigned)blocks, 1, 1, (unsigned)block, 1, 1, 0,
                                (hipStream_t)stream, params, NULL));
    if (e != 0) {
        rk_buf_printf(log, "hipModuleLaunchKernel: %s", hip.error_string(e));
        return ROPEKV_ERR_LAUNCH;
    }
    return ROPEKV_OK;
}

static void hip_unload(rk_device *d, void *module) {
    hip_state *s = d->state;
    if (module) ON_DEVICE(s, hip.module_unload((hipModule_t)module));
}

static void hip_close(rk_device *d) {
    free(d->state);
    d->state = NULL;
}

const rk_backend_ops rk_backend_hip = {
    "hip", hip_open, hip_compile, hip_load_module, hip_launch, hip_unload, hip_close,
};
