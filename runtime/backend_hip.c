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
 * gcnArchName, so either will do. hipFuncGetAttribute and hipGetErrorName only sharpen messages and checks
 * (need 0: a library without them still runs). The warp size is not read: hipDeviceGetAttribute's enum
 * values changed between ROCm 5 and 6 and hipDeviceProp_t's layout with them, so no one call reads it on
 * every release. */
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
    X(error_name, "hipGetErrorName", 0, const char *, (hipError_t))                                               \
    X(func_attribute, "hipFuncGetAttribute", 0, hipError_t, (int *, int, hipFunction_t))                          \
    X(properties_r0600, "hipGetDevicePropertiesR0600", 0, hipError_t, (void *, int))                              \
    X(properties_old, "hipGetDeviceProperties", 0, hipError_t, (void *, int))                                     \
    X(memcpy_dtoh_async, "hipMemcpyDtoHAsync", 0, hipError_t, (void *, void *, size_t, hipStream_t))              \
    X(stream_synchronize, "hipStreamSynchronize", 0, hipError_t, (hipStream_t))                                   \
    X(stream_is_capturing, "hipStreamIsCapturing", 0, hipError_t, (hipStream_t, int *))

enum { HIP_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0 }; /* hipFunction_attribute, the same in every release */

typedef struct hip_api {
    HIP_API(RK_DL_FIELD)
    hipError_t (*properties)(void *, int); /* the one of the two the library has */
} hip_api;

#define RK_DL_TABLE hip_api
static const rk_dl_sym hip_syms[] = {HIP_API(RK_DL_SYM)};
#undef RK_DL_TABLE

/* The library is loaded on first use and stays open for the life of the process. An attempt is remembered with the
 * $ROPEKV_LIBHIP it was made under: a failed one is made again only when that changes, and once a library is loaded
 * a $ROPEKV_LIBHIP naming another one is refused. */
static hip_api hip;
static int hip_loaded;       /* under hip_mu until set; then for good */
static int hip_attempted;    /* under hip_mu: an attempt was made, */
static char hip_tried[4096]; /* under $ROPEKV_LIBHIP = this ("" unset), and when it failed: */
static int hip_named;        /* failing to use the library it names (not merely to find the default one), */
static char hip_why[768];    /* for this reason */
static pthread_mutex_t hip_mu = PTHREAD_MUTEX_INITIALIZER;

int rk_hip_dl_open(rk_dl *dl) {
    const char *env = rk_env_text(RK_ENV_LIBHIP);
    if (env) return rk_dl_open(dl, &env, 1, NULL); /* the caller's choice, and nothing else */
    const char *names[] = {"libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5"};
    return rk_dl_open(dl, names, sizeof names / sizeof names[0], NULL);
}

/* Under hip_mu: one attempt to load libamdhip64 ($ROPEKV_LIBHIP when set) and resolve the table. */
static void hip_load(const char *env) {
    rk_dl dl;
    char lib[300];
    hip_attempted = 1;
    snprintf(hip_tried, sizeof hip_tried, "%s", env ? env : "");
    hip_named = env != NULL;
    char shown[280];
    if (env) snprintf(lib, sizeof lib, "ROPEKV_LIBHIP=%s", rk_printable(env, shown, sizeof shown));
    else snprintf(lib, sizeof lib, "libamdhip64");
    if (rk_hip_dl_open(&dl) != ROPEKV_OK) {
        snprintf(hip_why, sizeof hip_why, "%s cannot be loaded (%.420s)", lib, dl.error);
        return;
    }
    if (rk_dl_resolve(&dl, hip_syms, sizeof hip_syms / sizeof hip_syms[0], &hip, 1) != ROPEKV_OK) {
        snprintf(hip_why, sizeof hip_why, "%s lacks %s", lib, dl.missing);
        rk_dl_close(&dl);
        return;
    }
    hip.properties = hip.properties_r0600 ? hip.properties_r0600 : hip.properties_old;
    if (!hip.properties) {
        snprintf(hip_why, sizeof hip_why, "%s lacks hipGetDeviceProperties", lib);
        rk_dl_close(&dl);
        return;
    }
    hip_loaded = 1; /* the library stays open for the life of the process */
}

/* 1 when libamdhip64 is loaded; else 0 with the reason in why and *named set when the library that cannot be
 * used is the one $ROPEKV_LIBHIP names (also one other than the library this process loaded already). */
static int hip_ready(char *why, size_t cap, int *named) {
    pthread_mutex_lock(&hip_mu);
    const char *env = rk_env_text(RK_ENV_LIBHIP);
    if (!hip_loaded && (!hip_attempted || strcmp(hip_tried, env ? env : "") != 0)) hip_load(env);
    int ok = hip_loaded;
    if (!ok) {
        snprintf(why, cap, "%s", hip_why);
        *named = hip_named;
    } else if (env && strcmp(hip_tried, env) != 0) {
        char shown[280], loaded[280];
        snprintf(why, cap, "ROPEKV_LIBHIP=%s cannot be used: this process loaded %s%s already",
                 rk_printable(env, shown, sizeof shown), hip_tried[0] ? "ROPEKV_LIBHIP=" : "the default libamdhip64",
                 rk_printable(hip_tried, loaded, sizeof loaded));
        *named = 1;
        ok = 0;
    }
    pthread_mutex_unlock(&hip_mu);
    return ok;
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
    /* Non-empty: the local hiprtc cannot build this device's target, and why. The device still runs the
     * kernels of read-only layers (bundles); only a compile is refused (hip_compile). */
    char no_compile[512];
} hip_state;

/* "hipModuleLoadData on gfx942:sramecc+:xnack- (device 0): hipErrorNoBinaryForGpu (209): no kernel image ...";
 * target NULL before it is known. */
static void hip_fail(rk_buf *log, const char *call, const char *target, int ordinal, hipError_t e) {
    const char *name = hip.error_name ? hip.error_name(e) : NULL;
    rk_buf_printf(log, "%s on %s%sdevice %d%s: %s%s(%d): %s", call, target ? target : "", target ? " (" : "", ordinal,
                  target ? ")" : "", name ? name : "", name ? " " : "", e, hip.error_string(e));
}

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
    char why[768];
    if (ordinal == RK_COMPILE_ONLY) { /* no HIP runtime, no device: the compiler is what is needed */
        if (rk_hiprtc_available(&major, &minor, why, sizeof why) != 0) {
            rk_buf_printf(log, "hip (compile only): %s", why);
            return ROPEKV_ERR_BACKEND;
        }
        snprintf(d->target, sizeof d->target, "%s", target_override);
        hip_identity(d, 1, major, minor);
        return ROPEKV_OK;
    }
    if (!hip_ready(why, sizeof why, &d->named_unusable)) {
        rk_buf_printf(log, "hip: %s", why);
        return ROPEKV_ERR_BACKEND;
    }
    hipError_t e = hip.init(0);
    if (e != 0) {
        rk_buf_printf(log, "hip: ");
        hip_fail(log, "hipInit", NULL, ordinal, e);
        return ROPEKV_ERR_BACKEND;
    }
    e = hip.device_count(&n);
    if (e != 0 || ordinal < 0 || ordinal >= n) {
        if (e != 0) {
            rk_buf_printf(log, "hip: no device %d: ", ordinal);
            hip_fail(log, "hipGetDeviceCount", NULL, ordinal, e);
        } else {
            rk_buf_printf(log, "hip: no device %d: hipGetDeviceCount reports %d", ordinal, n);
        }
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
            rk_buf_printf(log, "hip: cannot read device %d's target: ", ordinal);
            if (e)
                hip_fail(log, hip.properties_r0600 ? "hipGetDevicePropertiesR0600" : "hipGetDeviceProperties", NULL,
                         ordinal, e);
            else rk_buf_printf(log, "its properties hold no gfx name");
            return ROPEKV_ERR_DEVICE;
        }
    }
    hip_identity(d, have_rtc, major, minor);
    hip_state *s = calloc(1, sizeof *s);
    if (!s) return ROPEKV_ERR_NOMEM;
    s->ordinal = ordinal;
    /* A device context is more than its compiler: what hiprtc cannot build, a bundle may hold. */
    snprintf(s->no_compile, sizeof s->no_compile, "%s", d->refused);
    d->refused[0] = '\0';
    d->state = s;
    return ROPEKV_OK;
}

static int hip_compile(rk_device *d, const char *src, size_t len, const char *name, const rk_arch *arch,
                       rk_codeobj *out, rk_buf *log) {
    (void)name;
    const hip_state *s = d->state;
    char why[512];
    if (rk_hiprtc_available(NULL, NULL, why, sizeof why) != 0) {
        rk_buf_printf(log,
                      "no compiler: %s; without hiprtc only kernels of a read-only cache layer run "
                      "(ROPEKV_CACHE_RO, a bundle of `ropekv-gen build --bundle`)\n",
                      why);
        return ROPEKV_ERR_COMPILE;
    }
    if (s && s->no_compile[0]) {
        rk_buf_printf(log,
                      "%s; only kernels of a read-only cache layer run here (a bundle of `ropekv-gen build --bundle`)\n",
                      s->no_compile);
        return ROPEKV_ERR_TARGET;
    }
    return rk_hiprtc_compile(src, len, d->target, arch->options[0] ? arch->options : NULL, out, log);
}

/* The context's device made current for a call (HIP's current device is the calling thread's); *prev receives
 * the caller's, which leave_device restores. 0, or the error of hipSetDevice. */
static hipError_t enter_device(const hip_state *s, int *prev) {
    *prev = -1;
    hip.get_device(prev);
    return *prev == s->ordinal ? 0 : hip.set_device(s->ordinal);
}
static void leave_device(const hip_state *s, int prev) {
    if (prev >= 0 && prev != s->ordinal) hip.set_device(prev);
}

/* Entry point `entry` of module m into *f. 0 found; 1 absent (a build of one entry, RK_ENTRIES, lacks the other),
 * with HIP's error in *e; -1 with the reason in log when it is there but cannot run the runtime's blocks of
 * d->block threads (refused here, by name, rather than failing every launch). */
static int get_entry(const rk_device *d, const hip_state *s, hipModule_t m, const char *entry, hipFunction_t *f,
                     hipError_t *e, rk_buf *log) {
    if ((*e = hip.get_function(f, m, entry)) != 0) {
        *f = NULL;
        return 1;
    }
    int max = 0;
    if (!hip.func_attribute || hip.func_attribute(&max, HIP_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, *f) != 0 ||
        max <= 0 || max >= d->block)
        return 0;
    rk_buf_printf(log,
                  "%s on %s (device %d): hipFuncGetAttribute(HIP_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK) allows %d "
                  "threads per block, the arch row launches %d",
                  entry, d->target, s->ordinal, max, d->block);
    return -1;
}

static int hip_load_module(rk_device *d, const rk_codeobj *co, const char *name, void **module, void *fn[2],
                           rk_buf *log) {
    hip_state *s = d->state;
    char wide[256];
    snprintf(wide, sizeof wide, "%s_i64", name);
    hipModule_t m = NULL;
    hipFunction_t f[2] = {NULL, NULL};
    int prev, got[2] = {1, 1}, rc = ROPEKV_ERR_DEVICE;
    hipError_t e = enter_device(s, &prev), e_fn[2] = {0, 0};
    if (e != 0) {
        hip_fail(log, "hipSetDevice", d->target, s->ordinal, e);
    } else if ((e = hip.module_load(&m, co->data)) != 0) {
        hip_fail(log, "hipModuleLoadData", d->target, s->ordinal, e);
    } else {
        got[0] = get_entry(d, s, m, name, &f[0], &e_fn[0], log);
        if (got[0] >= 0) got[1] = get_entry(d, s, m, wide, &f[1], &e_fn[1], log);
        const int refused = got[0] < 0 || got[1] < 0, found = got[0] == 0 || got[1] == 0;
        if (!refused && found) {
            rc = ROPEKV_OK;
        } else if (!refused) {
            rk_buf_printf(log, "neither %s nor %s: ", name, wide);
            hip_fail(log, "hipModuleGetFunction", d->target, s->ordinal, e_fn[0]);
        }
        if (rc != ROPEKV_OK) hip.module_unload(m);
    }
    leave_device(s, prev);
    if (rc != ROPEKV_OK) return rc;
    *module = m;
    fn[0] = f[0];
    fn[1] = f[1];
    return ROPEKV_OK;
}

static int hip_launch(rk_device *d, void *fn, const rk_args *a, int64_t blocks, int block, int pdl, void *stream,
                      rk_buf *log) {
    (void)pdl; /* no programmatic dependent launch here */
    hip_state *s = d->state;
    rk_args copy = *a;
    void *params[] = {&copy}; /* the kernel's one argument: rk_args by value */
    int prev;
    hipError_t e = enter_device(s, &prev);
    const char *call = e ? "hipSetDevice" : "hipModuleLaunchKernel";
    if (e == 0)
        e = hip.launch((hipFunction_t)fn, (unsigned)blocks, 1, 1, (unsigned)block, 1, 1, 0, (hipStream_t)stream, params,
                       NULL);
    leave_device(s, prev);
    if (e != 0) {
        hip_fail(log, call, d->target, s->ordinal, e);
        return ROPEKV_ERR_LAUNCH;
    }
    return ROPEKV_OK;
}

static void hip_unload(rk_device *d, void *module) {
    hip_state *s = d->state;
    int prev;
    if (!module) return;
    if (enter_device(s, &prev) == 0) hip.module_unload((hipModule_t)module);
    leave_device(s, prev);
}

static void hip_close(rk_device *d) {
    free(d->state);
    d->state = NULL;
}

static int hip_read(rk_device *d, void *dst, const void *src, size_t n, void *stream, rk_buf *log) {
    hip_state *s = d->state;
    if (!hip.memcpy_dtoh_async || !hip.stream_synchronize) {
        rk_buf_printf(log, "libamdhip64 lacks hipMemcpyDtoHAsync or hipStreamSynchronize");
        return ROPEKV_ERR_BACKEND;
    }
    int prev;
    hipError_t e = enter_device(s, &prev);
    const char *call = "hipSetDevice";
    int capturing = 0; /* a stream capturing a graph: a synchronous copy would invalidate the capture */
    if (e == 0 && hip.stream_is_capturing) {
        call = "hipStreamIsCapturing";
        e = hip.stream_is_capturing((hipStream_t)stream, &capturing);
    }
    if (e == 0 && capturing) {
        leave_device(s, prev);
        rk_buf_printf(log, "the stream is capturing a graph: its memory cannot be read now");
        return ROPEKV_ERR_DEVICE;
    }
    if (e == 0) {
        call = "hipMemcpyDtoHAsync";
        e = hip.memcpy_dtoh_async(dst, (void *)src, n, (hipStream_t)stream);
        if (e == 0) {
            call = "hipStreamSynchronize";
            e = hip.stream_synchronize((hipStream_t)stream);
        }
    }
    leave_device(s, prev);
    if (e != 0) {
        hip_fail(log, call, d->target, s->ordinal, e);
        return ROPEKV_ERR_DEVICE;
    }
    return ROPEKV_OK;
}

const rk_backend_ops rk_backend_hip = {
    "hip", hip_open, hip_compile, hip_load_module, hip_launch, hip_unload, hip_close, hip_read,
};
