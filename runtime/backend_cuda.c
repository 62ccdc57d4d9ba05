/* The cuda backend: nvrtc (runtime/nvrtc.c) + the CUDA driver API, both loaded with dlopen so one
 * build runs on machines with and without NVIDIA software. Uses the device's primary context, the
 * one the CUDA runtime (and PyTorch) use, so streams from those work unchanged. */
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "env.h"
#include "backend.h"
#include "cuda_api.h"

#define RK_DL_TABLE rk_cuda_api
static const rk_dl_sym cu_syms[] = {RK_CUDA_API(RK_DL_SYM)};
#undef RK_DL_TABLE

/* The driver is loaded and initialized on first use and stays open for the life of the process. An attempt is
 * remembered with the $ROPEKV_LIBCUDA it was made under: a failed one is made again only when that changes, and once
 * a library is loaded the backend refuses a $ROPEKV_LIBCUDA naming another one. */
static rk_cuda_api cu_table;
static const rk_cuda_api *cu; /* &cu_table once loaded and initialized (under cu_mu until set; then for good) */
static int cu_attempted;      /* under cu_mu: an attempt was made, */
static char cu_tried[4096];   /* under $ROPEKV_LIBCUDA = this ("" unset), and when it failed: */
static int cu_named;          /* failing to use the library it names (not the driver or the device), */
static char cu_why[768];      /* for this reason */
static pthread_mutex_t cu_mu = PTHREAD_MUTEX_INITIALIZER;

/* Under cu_mu: one attempt to load libcuda ($ROPEKV_LIBCUDA when set), resolve the table and initialize. */
static void cu_load(const char *env) {
    const char *candidate[] = {env ? env : "libcuda.so.1"};
    char lib[300];
    rk_dl dl;
    cu_attempted = 1;
    snprintf(cu_tried, sizeof cu_tried, "%s", env ? env : "");
    cu_named = env != NULL;
    char shown[280];
    if (env) snprintf(lib, sizeof lib, "ROPEKV_LIBCUDA=%s", rk_printable(env, shown, sizeof shown));
    else snprintf(lib, sizeof lib, "libcuda.so.1");
    if (rk_dl_open(&dl, candidate, 1, NULL) != ROPEKV_OK) {
        snprintf(cu_why, sizeof cu_why, "%s cannot be loaded (%.420s)", lib, dl.error);
        return;
    }
    if (rk_dl_resolve(&dl, cu_syms, sizeof cu_syms / sizeof cu_syms[0], &cu_table, RK_CUDA_BACKEND) != ROPEKV_OK) {
        snprintf(cu_why, sizeof cu_why, "%s lacks %s", lib, dl.missing);
        rk_dl_close(&dl);
        return;
    }
    cu_named = 0; /* the library is usable: what follows is the driver's or the device's */
    if (cu_table.cuInit(0) != 0) {
        snprintf(cu_why, sizeof cu_why, "cuInit failed (no usable NVIDIA driver or device)");
        rk_dl_close(&dl);
        return;
    }
    cu = &cu_table; /* the library stays open for the life of the process */
}

/* rk_cuda_driver, and *named (may be NULL) set when what cannot be used is the library $ROPEKV_LIBCUDA names. */
static const rk_cuda_api *driver(unsigned need, char *why, size_t cap, int *named) {
    pthread_mutex_lock(&cu_mu);
    const char *env = rk_env_text(RK_ENV_LIBCUDA);
    if (!cu && (!cu_attempted || strcmp(cu_tried, env ? env : "") != 0)) cu_load(env);
    const rk_cuda_api *api = cu;
    const char *missing = api ? rk_dl_first_missing(cu_syms, sizeof cu_syms / sizeof cu_syms[0], api, need) : NULL;
    if ((!api || missing) && why && cap) {
        if (missing) snprintf(why, cap, "libcuda.so.1 lacks %s", missing);
        else snprintf(why, cap, "%s", cu_why);
    }
    if (!api && named) *named = cu_named;
    if (api && env && strcmp(cu_tried, env) != 0 &&
        named) { /* the backend's open: not the library the variable names */
        char shown[280], loaded[280];
        snprintf(why, cap, "ROPEKV_LIBCUDA=%s cannot be used: this process loaded %s%s already",
                 rk_printable(env, shown, sizeof shown), cu_tried[0] ? "ROPEKV_LIBCUDA=" : "the default libcuda.so.1",
                 rk_printable(cu_tried, loaded, sizeof loaded));
        *named = 1;
        api = NULL;
    }
    pthread_mutex_unlock(&cu_mu);
    return api && !missing ? api : NULL;
}

const rk_cuda_api *rk_cuda_driver(unsigned need, char *why, size_t cap) { return driver(need, why, cap, NULL); }

static const char *cu_err(CUresult r) {
    const char *s = NULL;
    if (cu && cu->cuGetErrorString) cu->cuGetErrorString(r, &s);
    return s ? s : "unknown CUDA error";
}

typedef struct cuda_state {
    CUdevice dev;
    CUcontext ctx;
} cuda_state;

/* The compiler's identity and the options of d->target: part of every cache key, so one function sets them for
 * device and compile-only contexts alike. */
static void cuda_identity(rk_device *d, int have_nvrtc, int major, int minor) {
    if (have_nvrtc) snprintf(d->compiler_id, sizeof d->compiler_id, "nvrtc %d.%d", major, minor);
    else snprintf(d->compiler_id, sizeof d->compiler_id, "no nvrtc");
    snprintf(d->options, sizeof d->options, "-arch=%s --std=c++17 --fmad=false", d->target);
}

static int cuda_open(rk_device *d, int ordinal, const char *target_override, rk_buf *log) {
    int major = 0, minor = 0, n = 0;
    char why[768];
    if (ordinal == RK_COMPILE_ONLY) { /* no driver, no device: the compiler is what is needed */
        if (rk_nvrtc_available(&major, &minor, why, sizeof why) != 0) {
            rk_buf_printf(log, "cuda (compile only): %s", why);
            return ROPEKV_ERR_BACKEND;
        }
        snprintf(d->target, sizeof d->target, "%s", target_override);
        cuda_identity(d, 1, major, minor);
        return ROPEKV_OK;
    }
    if (!driver(RK_CUDA_BACKEND, why, sizeof why, &d->named_unusable)) {
        rk_buf_printf(log, "cuda: %s", why);
        return ROPEKV_ERR_BACKEND;
    }
    /* Without nvrtc the backend still opens: kernels then come only from read-only cache layers (bundles),
     * and a compile fails naming the reason (cuda_compile). */
    const int have_nvrtc = rk_nvrtc_available(&major, &minor, why, sizeof why) == 0;
    if (cu->cuDeviceGetCount(&n) != 0 || ordinal < 0 || ordinal >= n) {
        rk_buf_printf(log, "cuda: no device %d (%d present)", ordinal, n);
        return ROPEKV_ERR_BACKEND;
    }
    cuda_state *s = calloc(1, sizeof *s);
    if (!s) return ROPEKV_ERR_NOMEM;
    CUresult r = cu->cuDeviceGet(&s->dev, ordinal);
    int cc_major = 0, cc_minor = 0;
    if (r == 0) r = cu->cuDeviceGetAttribute(&cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, s->dev);
    if (r == 0) r = cu->cuDeviceGetAttribute(&cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, s->dev);
    if (r == 0) r = cu->cuDevicePrimaryCtxRetain(&s->ctx, s->dev);
    if (r != 0) {
        rk_buf_printf(log, "cuda: device %d: %s", ordinal, cu_err(r));
        free(s);
        return ROPEKV_ERR_DEVICE;
    }
    if (target_override) snprintf(d->target, sizeof d->target, "%s", target_override);
    else /* 10.0 -> sm_100, 12.1 -> sm_121: nvrtc builds for the device itself, and runtime.c picks the arch row
          * (the newest sm_XY row not newer than the device: sm_121 -> sm_120, sm_110 -> sm_103) */
        snprintf(d->target, sizeof d->target, "sm_%d%d", cc_major, cc_minor);
    cuda_identity(d, have_nvrtc, major, minor);
    d->state = s;
    return ROPEKV_OK;
}

static int cuda_compile(rk_device *d, const char *src, size_t len, const char *name, const rk_arch *arch,
                        rk_codeobj *out, rk_buf *log) {
    (void)name;
    char why[256];
    if (rk_nvrtc_available(NULL, NULL, why, sizeof why) != 0) {
        rk_buf_printf(log,
                      "no compiler: %s; without nvrtc only kernels of a read-only cache layer run "
                      "(ROPEKV_CACHE_RO, a bundle of `ropekv-gen build --bundle`)\n",
                      why);
        return ROPEKV_ERR_COMPILE;
    }
    char code[sizeof d->target + 1];
    if (!rk_arch_code(arch, d->target, code, sizeof code)) {
        rk_buf_printf(log, "target %s: too long\n", d->target);
        return ROPEKV_ERR_TARGET;
    }
    return rk_nvrtc_compile(src, len, code, arch->options[0] ? arch->options : NULL, 0, out, NULL, log);
}

static int cuda_load(rk_device *d, const rk_codeobj *co, const char *name, void **module, void *fn[2], rk_buf *log) {
    cuda_state *s = d->state;
    char wide[256];
    snprintf(wide, sizeof wide, "%s_i64", name);
    CUmodule m = NULL;
    CUfunction f32 = NULL, f64 = NULL;
    CUcontext prev;
    CUresult r = cu->cuCtxPushCurrent(s->ctx);
    if (r == 0) {
        r = cu->cuModuleLoadData(&m, co->data);
        if (r == 0) { /* a build of one entry (RK_ENTRIES) lacks the other */
            CUresult r32 = cu->cuModuleGetFunction(&f32, m, name), r64 = cu->cuModuleGetFunction(&f64, m, wide);
            if (r32 != 0 && r64 != 0) r = r32;
        }
        if (r != 0 && m) cu->cuModuleUnload(m);
        cu->cuCtxPopCurrent(&prev);
    }
    if (r != 0) {
        rk_buf_printf(log, "cuModuleLoadData/GetFunction %s: %s", name, cu_err(r));
        return ROPEKV_ERR_DEVICE;
    }
    *module = m;
    fn[0] = f32;
    fn[1] = f64;
    return ROPEKV_OK;
}

static int cuda_launch(rk_device *d, void *fn, const rk_args *a, int64_t blocks, int block, int pdl, void *stream,
                       rk_buf *log) {
    cuda_state *s = d->state;
    rk_args copy = *a;
    void *params[] = {&copy};
    CUcontext prev;
    const int ex = pdl && cu->cuLaunchKernelEx;
    CUresult r = cu->cuCtxPushCurrent(s->ctx);
    if (r == 0) {
        if (ex) {
            CUlaunchAttribute attr = {.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION};
            attr.value.programmatic_stream_serialization_allowed = 1;
            CUlaunchConfig cfg = {(unsigned)blocks, 1, 1, (unsigned)block, 1, 1, 0, (CUstream)stream, &attr, 1};
            r = cu->cuLaunchKernelEx(&cfg, (CUfunction)fn, params, NULL);
        } else {
            r = cu->cuLaunchKernel((CUfunction)fn, (unsigned)blocks, 1, 1, (unsigned)block, 1, 1, 0, (CUstream)stream,
                                   params, NULL);
        }
        cu->cuCtxPopCurrent(&prev);
    }
    if (r != 0) {
        rk_buf_printf(log, "%s: %s", ex ? "cuLaunchKernelEx" : "cuLaunchKernel", cu_err(r));
        return ROPEKV_ERR_LAUNCH;
    }
    return ROPEKV_OK;
}

static void cuda_unload(rk_device *d, void *module) {
    cuda_state *s = d->state;
    CUcontext prev;
    if (!module || cu->cuCtxPushCurrent(s->ctx) != 0) return;
    cu->cuModuleUnload((CUmodule)module);
    cu->cuCtxPopCurrent(&prev);
}

static void cuda_close(rk_device *d) {
    cuda_state *s = d->state;
    if (!s) return;
    cu->cuDevicePrimaryCtxRelease(s->dev);
    free(s);
    d->state = NULL;
}

static int cuda_read(rk_device *d, void *dst, const void *src, size_t n, void *stream, rk_buf *log) {
    cuda_state *s = d->state;
    if (!cu->cuMemcpyDtoHAsync || !cu->cuStreamSynchronize) {
        rk_buf_printf(log, "libcuda.so.1 lacks cuMemcpyDtoHAsync_v2 or cuStreamSynchronize");
        return ROPEKV_ERR_BACKEND;
    }
    CUcontext prev;
    const char *call = "cuCtxPushCurrent";
    CUresult r = cu->cuCtxPushCurrent(s->ctx);
    if (r != 0) {
        rk_buf_printf(log, "%s: %s", call, cu_err(r));
        return ROPEKV_ERR_DEVICE;
    }
    int capturing = 0; /* a stream capturing a graph: a synchronous copy would invalidate the capture */
    if (cu->cuStreamIsCapturing) {
        call = "cuStreamIsCapturing";
        r = cu->cuStreamIsCapturing((CUstream)stream, &capturing);
    }
    if (r == 0 && !capturing) {
        call = "cuMemcpyDtoHAsync";
        r = cu->cuMemcpyDtoHAsync(dst, (CUdeviceptr)(uintptr_t)src, n, (CUstream)stream);
        if (r == 0) {
            call = "cuStreamSynchronize";
            r = cu->cuStreamSynchronize((CUstream)stream);
        }
    }
    cu->cuCtxPopCurrent(&prev);
    if (r == 0 && capturing) {
        rk_buf_printf(log, "the stream is capturing a graph: its memory cannot be read now");
        return ROPEKV_ERR_DEVICE;
    }
    if (r != 0) {
        rk_buf_printf(log, "%s (%zu bytes from %p): %s", call, n, src, cu_err(r));
        return ROPEKV_ERR_DEVICE;
    }
    return ROPEKV_OK;
}

const rk_backend_ops rk_backend_cuda = {
    "cuda", cuda_open, cuda_compile, cuda_load, cuda_launch, cuda_unload, cuda_close, cuda_read,
};
