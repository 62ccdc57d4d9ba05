/* The cuda backend: nvrtc (runtime/nvrtc.c) + the CUDA driver API, both loaded with dlopen so one
 * build runs on machines with and without NVIDIA software. Uses the device's primary context, the
 * one the CUDA runtime (and PyTorch) use, so streams from those work unchanged. */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"

typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;

/* cuLaunchKernelEx's configuration (cuda.h, CUDA 12.0+), reduced to what ropekv sets. */
#define CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION 6
typedef struct CUlaunchAttribute {
    int id;
    char pad[4];
    union {
        char pad[64];
        unsigned programmatic_stream_serialization_allowed;
    } value;
} CUlaunchAttribute;
typedef struct CUlaunchConfig {
    unsigned grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes;
    CUstream stream;
    CUlaunchAttribute *attrs;
    unsigned n_attrs;
} CUlaunchConfig;
_Static_assert(sizeof(CUlaunchAttribute) == 72 && offsetof(CUlaunchAttribute, value) == 8, "CUlaunchAttribute layout");
_Static_assert(sizeof(void *) != 8 || (offsetof(CUlaunchConfig, stream) == 32 && sizeof(CUlaunchConfig) == 56),
               "CUlaunchConfig layout");

#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR 75
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR 76

static struct {
    void *lib;
    CUresult (*init)(unsigned);
    CUresult (*device_count)(int *);
    CUresult (*device_get)(CUdevice *, int);
    CUresult (*attribute)(int *, int, CUdevice);
    CUresult (*primary_retain)(CUcontext *, CUdevice);
    CUresult (*primary_release)(CUdevice);
    CUresult (*push)(CUcontext);
    CUresult (*pop)(CUcontext *);
    CUresult (*module_load)(CUmodule *, const void *);
    CUresult (*module_unload)(CUmodule);
    CUresult (*get_function)(CUfunction *, CUmodule, const char *);
    CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                       void **, void **);
    CUresult (*error_string)(CUresult, const char **);
    CUresult (*launch_ex)(const CUlaunchConfig *, CUfunction, void **, void **); /* NULL before CUDA 12 */
    char why[256];
} cu;

static pthread_once_t cu_once = PTHREAD_ONCE_INIT;

static void cu_load(void) {
    const char *path = getenv("ROPEKV_LIBCUDA");
    cu.lib = dlopen(path && *path ? path : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!cu.lib) {
        snprintf(cu.why, sizeof cu.why, "libcuda.so.1 not found (%s)", dlerror());
        return;
    }
#define SYM(field, name)                                                                  \
    if (!(*(void **)&cu.field = dlsym(cu.lib, name))) {                                   \
        snprintf(cu.why, sizeof cu.why, "libcuda.so.1 lacks %s", name);                   \
        dlclose(cu.lib);                                                                  \
        cu.lib = NULL;                                                                    \
        return;                                                                           \
    }
    SYM(init, "cuInit")
    SYM(device_count, "cuDeviceGetCount")
    SYM(device_get, "cuDeviceGet")
    SYM(attribute, "cuDeviceGetAttribute")
    SYM(primary_retain, "cuDevicePrimaryCtxRetain")
    SYM(primary_release, "cuDevicePrimaryCtxRelease_v2")
    SYM(push, "cuCtxPushCurrent_v2")
    SYM(pop, "cuCtxPopCurrent_v2")
    SYM(module_load, "cuModuleLoadData")
    SYM(module_unload, "cuModuleUnload")
    SYM(get_function, "cuModuleGetFunction")
    SYM(launch, "cuLaunchKernel")
    SYM(error_string, "cuGetErrorString")
#undef SYM
    *(void **)&cu.launch_ex = dlsym(cu.lib, "cuLaunchKernelEx");
    if (cu.init(0) != 0) {
        snprintf(cu.why, sizeof cu.why, "cuInit failed (no usable NVIDIA driver or device)");
        dlclose(cu.lib);
        cu.lib = NULL;
    }
}

static const char *cu_err(CUresult r) {
    const char *s = NULL;
    if (cu.error_string) cu.error_string(r, &s);
    return s ? s : "unknown CUDA error";
}

typedef struct cuda_state {
    CUdevice dev;
    CUcontext ctx;
} cuda_state;

static int cuda_open(rk_device *d, int ordinal, const char *target_override, rk_buf *log) {
    int major = 0, minor = 0, n = 0;
    char why[256];
    pthread_once(&cu_once, cu_load);
    if (!cu.lib) {
        rk_buf_printf(log, "cuda: %s", cu.why);
        return ROPEKV_ERR_BACKEND;
    }
    if (rk_nvrtc_available(&major, &minor, why, sizeof why) != 0) {
        rk_buf_printf(log, "cuda: %s", why);
        return ROPEKV_ERR_BACKEND;
    }
    snprintf(d->compiler_id, sizeof d->compiler_id, "nvrtc %d.%d", major, minor);
    if (cu.device_count(&n) != 0 || ordinal < 0 || ordinal >= n) {
        rk_buf_printf(log, "cuda: no device %d (%d present)", ordinal, n);
        return ROPEKV_ERR_BACKEND;
    }
    cuda_state *s = calloc(1, sizeof *s);
    if (!s) return ROPEKV_ERR_NOMEM;
    CUresult r = cu.device_get(&s->dev, ordinal);
    int cc_major = 0, cc_minor = 0;
    if (r == 0) r = cu.attribute(&cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, s->dev);
    if (r == 0) r = cu.attribute(&cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, s->dev);
    if (r == 0) r = cu.primary_retain(&s->ctx, s->dev);
    if (r != 0) {
        rk_buf_printf(log, "cuda: device %d: %s", ordinal, cu_err(r));
        free(s);
        return ROPEKV_ERR_DEVICE;
    }
    if (target_override) snprintf(d->target, sizeof d->target, "%s", target_override);
    else snprintf(d->target, sizeof d->target, "sm_%d%d", cc_major, cc_minor);
    snprintf(d->options, sizeof d->options, "-arch=%s --std=c++17 --fmad=false", d->target);
    d->state = s;
    return ROPEKV_OK;
}

static int cuda_compile(rk_device *d, const char *src, size_t len, const char *name, const rk_arch *arch, rk_codeobj *out,
                        rk_buf *log) {
    (void)name;
    return rk_nvrtc_compile(src, len, d->target, arch->options[0] ? arch->options : NULL, 0, out, NULL, log);
}

static int cuda_load(rk_device *d, const rk_codeobj *co, const char *name, void **module, void *fn[2], rk_buf *log) {
    cuda_state *s = d->state;
    char wide[256];
    snprintf(wide, sizeof wide, "%s_i64", name);
    CUmodule m = NULL;
    CUfunction f32 = NULL, f64 = NULL;
    CUcontext prev;
    CUresult r = cu.push(s->ctx);
    if (r == 0) {
        r = cu.module_load(&m, co->data);
        if (r == 0) { /* a build of one entry (RK_ENTRIES) lacks the other */
            CUresult r32 = cu.get_function(&f32, m, name), r64 = cu.get_function(&f64, m, wide);
            if (r32 != 0 && r64 != 0) r = r32;
        }
        if (r != 0 && m) cu.module_unload(m);
        cu.pop(&prev);
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
    const int ex = pdl && cu.launch_ex;
    CUresult r = cu.push(s->ctx);
    if (r == 0) {
        if (ex) {
            CUlaunchAttribute attr = {.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION};
            attr.value.programmatic_stream_serialization_allowed = 1;
            CUlaunchConfig cfg = {(unsigned)blocks, 1, 1, (unsigned)block, 1, 1, 0, (CUstream)stream, &attr, 1};
            r = cu.launch_ex(&cfg, (CUfunction)fn, params, NULL);
        } else {
            r = cu.launch((CUfunction)fn, (unsigned)blocks, 1, 1, (unsigned)block, 1, 1, 0, (CUstream)stream, params,
                          NULL);
        }
        cu.pop(&prev);
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
    if (!module || cu.push(s->ctx) != 0) return;
    cu.module_unload((CUmodule)module);
    cu.pop(&prev);
}

static void cuda_close(rk_device *d) {
    cuda_state *s = d->state;
    if (!s) return;
    cu.primary_release(s->dev);
    free(s);
    d->state = NULL;
}

const rk_backend_ops rk_backend_cuda = {
    "cuda", cuda_open, cuda_compile, cuda_load, cuda_launch, cuda_unload, cuda_close,
};
