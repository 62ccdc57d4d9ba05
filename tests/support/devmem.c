/* Device memory on the backend a ropekv context picked (devmem.h). */
#include "devmem.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cuda_api.h"
#include "dl.h"
#include "ropekv.h"

/* ---- cuda: the library's driver table ------------------------------------------------------------- */
static const rk_cuda_api *cu;

static int cu_fail(CUresult r, const char *what, char *why, size_t cap) {
    const char *name = NULL, *text = NULL;
    cu->cuGetErrorName(r, &name);
    cu->cuGetErrorString(r, &text);
    snprintf(why, cap, "%s: %s (%d): %s", what, name ? name : "CUDA error", r, text ? text : "no description");
    return -1;
}

static int cu_open(rk_devmem *m, char *why, size_t cap) {
    char e[256];
    if (!cu && !(cu = rk_cuda_driver(RK_CUDA_ALL, e, sizeof e))) {
        snprintf(why, cap, "cuda: %s", e);
        return 1;
    }
    int n = 0;
    if (cu->cuDeviceGetCount(&n) != 0 || m->ordinal < 0 || m->ordinal >= n) {
        snprintf(why, cap, "cuda: no device %d (%d present)", m->ordinal, n);
        return 1;
    }
    CUcontext ctx;
    CUresult r = cu->cuDeviceGet(&m->device, m->ordinal);
    if (r == 0) r = cu->cuDevicePrimaryCtxRetain(&ctx, m->device);
    if (r == 0) r = cu->cuCtxSetCurrent(ctx);
    return r == 0 ? 0 : cu_fail(r, "attaching to the device's primary context", why, cap);
}

/* ---- hip: libamdhip64, the entry points used --------------------------------------------------- */
typedef int hipError_t;
#define HIP_MEMCPY_HOST_TO_DEVICE 1 /* hipMemcpyKind */
#define HIP_MEMCPY_DEVICE_TO_HOST 2

#define HIP_MEM_API(X)                                                          \
    X(get_device_count, "hipGetDeviceCount", 1, hipError_t, (int *))            \
    X(set_device, "hipSetDevice", 1, hipError_t, (int))                         \
    X(malloc_, "hipMalloc", 1, hipError_t, (void **, size_t))                   \
    X(free_, "hipFree", 1, hipError_t, (void *))                                \
    X(memcpy_, "hipMemcpy", 1, hipError_t, (void *, const void *, size_t, int)) \
    X(synchronize, "hipDeviceSynchronize", 1, hipError_t, (void))               \
    X(error_string, "hipGetErrorString", 1, const char *, (hipError_t))         \
    X(error_name, "hipGetErrorName", 0, const char *, (hipError_t))             \
    X(device_get, "hipDeviceGet", 0, hipError_t, (int *, int))                  \
    X(device_name, "hipDeviceGetName", 0, hipError_t, (char *, int, int))       \
    X(total_mem, "hipDeviceTotalMem", 0, hipError_t, (size_t *, int))           \
    X(runtime_version, "hipRuntimeGetVersion", 0, hipError_t, (int *))

typedef struct hip_mem_api {
    HIP_MEM_API(RK_DL_FIELD)
} hip_mem_api;

#define RK_DL_TABLE hip_mem_api
static const rk_dl_sym hip_syms[] = {HIP_MEM_API(RK_DL_SYM)};
#undef RK_DL_TABLE

static hip_mem_api hip;
static int hip_loaded;
static char hip_why[512];
static pthread_once_t hip_once = PTHREAD_ONCE_INIT;

static void hip_load(void) {
    /* The hip backend's own library (rk_hip_dl_open): dlopen hands both the same one, so memory from here
     * is memory of the runtime's HIP instance. */
    rk_dl dl;
    if (rk_hip_dl_open(&dl) != ROPEKV_OK) {
        snprintf(hip_why, sizeof hip_why, "hip: libamdhip64 not found (%.400s)", dl.error);
        return;
    }
    if (rk_dl_resolve(&dl, hip_syms, sizeof hip_syms / sizeof hip_syms[0], &hip, 1) != ROPEKV_OK) {
        snprintf(hip_why, sizeof hip_why, "hip: %.300s lacks %s", dl.path, dl.missing);
        rk_dl_close(&dl);
        return;
    }
    hip_loaded = 1; /* stays open for the life of the process */
}

static int hip_fail(hipError_t r, const char *what, char *why, size_t cap) {
    const char *name = hip.error_name ? hip.error_name(r) : NULL, *text = hip.error_string(r);
    snprintf(why, cap, "%s: %s (%d): %s", what, name ? name : "HIP error", r, text ? text : "no description");
    return -1;
}

static int hip_open(rk_devmem *m, char *why, size_t cap) {
    pthread_once(&hip_once, hip_load);
    if (!hip_loaded) {
        snprintf(why, cap, "%s", hip_why);
        return 1;
    }
    int n = 0;
    if (hip.get_device_count(&n) != 0 || m->ordinal < 0 || m->ordinal >= n) {
        snprintf(why, cap, "hip: no device %d (%d present)", m->ordinal, n);
        return 1;
    }
    hipError_t r = hip.set_device(m->ordinal);
    return r == 0 ? 0 : hip_fail(r, "hipSetDevice", why, cap);
}

/* ---- the layer ------------------------------------------------------------------------------------- */
int rk_devmem_open(rk_devmem *m, const char *backend, int ordinal, char *why, size_t cap) {
    memset(m, 0, sizeof *m);
    m->ordinal = ordinal;
    if (!strcmp(backend, "host")) {
        m->kind = RK_DEVMEM_HOST;
        return 0;
    }
    if (!strcmp(backend, "cuda")) {
        m->kind = RK_DEVMEM_CUDA;
        return cu_open(m, why, cap);
    }
    if (!strcmp(backend, "hip")) {
        m->kind = RK_DEVMEM_HIP;
        return hip_open(m, why, cap);
    }
    snprintf(why, cap, "no device memory for backend '%s' (expected cuda, hip or host)", backend);
    return -1;
}

int rk_devmem_alloc(rk_devmem *m, uint64_t *p, size_t n, char *why, size_t cap) {
    char what[64];
    *p = 0;
    switch (m->kind) {
    case RK_DEVMEM_CUDA: {
        CUdeviceptr d = 0;
        CUresult r = cu->cuMemAlloc(&d, n ? n : 1);
        snprintf(what, sizeof what, "cuMemAlloc(%zu bytes)", n);
        if (r != 0) return cu_fail(r, what, why, cap);
        *p = d;
        return 0;
    }
    case RK_DEVMEM_HIP: {
        void *d = NULL;
        hipError_t r = hip.malloc_(&d, n ? n : 1);
        snprintf(what, sizeof what, "hipMalloc(%zu bytes)", n);
        if (r != 0) return hip_fail(r, what, why, cap);
        *p = (uint64_t)(uintptr_t)d;
        return 0;
    }
    case RK_DEVMEM_HOST: {
        void *q = NULL;
        if (posix_memalign(&q, RK_DEVMEM_ALIGN, n ? n : 1) != 0) {
            snprintf(why, cap, "out of host memory (%zu bytes)", n);
            return -1;
        }
        *p = (uint64_t)(uintptr_t)q;
        return 0;
    }
    }
    return -1;
}

void rk_devmem_free(rk_devmem *m, uint64_t p) {
    if (!p) return;
    switch (m->kind) {
    case RK_DEVMEM_CUDA: cu->cuMemFree((CUdeviceptr)p); break;
    case RK_DEVMEM_HIP: hip.free_((void *)(uintptr_t)p); break;
    case RK_DEVMEM_HOST: free((void *)(uintptr_t)p); break;
    }
}

int rk_devmem_to_device(rk_devmem *m, uint64_t dst, const void *src, size_t n, char *why, size_t cap) {
    char what[64];
    switch (m->kind) {
    case RK_DEVMEM_CUDA: {
        CUresult r = cu->cuMemcpyHtoD((CUdeviceptr)dst, src, n);
        snprintf(what, sizeof what, "cuMemcpyHtoD(%zu bytes)", n);
        return r == 0 ? 0 : cu_fail(r, what, why, cap);
    }
    case RK_DEVMEM_HIP: {
        hipError_t r = hip.memcpy_((void *)(uintptr_t)dst, src, n, HIP_MEMCPY_HOST_TO_DEVICE);
        snprintf(what, sizeof what, "hipMemcpy(%zu bytes, host to device)", n);
        return r == 0 ? 0 : hip_fail(r, what, why, cap);
    }
    case RK_DEVMEM_HOST: memcpy((void *)(uintptr_t)dst, src, n); return 0;
    }
    return -1;
}

int rk_devmem_to_host(rk_devmem *m, void *dst, uint64_t src, size_t n, char *why, size_t cap) {
    char what[64];
    switch (m->kind) {
    case RK_DEVMEM_CUDA: {
        CUresult r = cu->cuMemcpyDtoH(dst, (CUdeviceptr)src, n);
        snprintf(what, sizeof what, "cuMemcpyDtoH(%zu bytes)", n);
        return r == 0 ? 0 : cu_fail(r, what, why, cap);
    }
    case RK_DEVMEM_HIP: {
        hipError_t r = hip.memcpy_(dst, (const void *)(uintptr_t)src, n, HIP_MEMCPY_DEVICE_TO_HOST);
        snprintf(what, sizeof what, "hipMemcpy(%zu bytes, device to host)", n);
        return r == 0 ? 0 : hip_fail(r, what, why, cap);
    }
    case RK_DEVMEM_HOST: memcpy(dst, (const void *)(uintptr_t)src, n); return 0;
    }
    return -1;
}

int rk_devmem_synchronize(rk_devmem *m, char *why, size_t cap) {
    switch (m->kind) {
    case RK_DEVMEM_CUDA: {
        CUresult r = cu->cuCtxSynchronize();
        return r == 0 ? 0 : cu_fail(r, "cuCtxSynchronize after the launch", why, cap);
    }
    case RK_DEVMEM_HIP: {
        hipError_t r = hip.synchronize();
        return r == 0 ? 0 : hip_fail(r, "hipDeviceSynchronize after the launch", why, cap);
    }
    case RK_DEVMEM_HOST: return 0; /* the host backend runs kernels synchronously */
    }
    return -1;
}

void rk_devmem_describe(rk_devmem *m, char *out, size_t cap) {
    char name[200] = "";
    size_t mem = 0;
    int version = 0;
    switch (m->kind) {
    case RK_DEVMEM_CUDA:
        cu->cuDeviceGetName(name, (int)sizeof name, m->device);
        cu->cuDriverGetVersion(&version);
        cu->cuDeviceTotalMem(&mem, m->device);
        snprintf(out, cap, "%s, %.0f GiB, driver API %d.%d", name, mem / (1024.0 * 1024 * 1024), version / 1000,
                 version % 1000 / 10);
        return;
    case RK_DEVMEM_HIP: { /* the optional entry points: whatever this ROCm has */
        int dev = m->ordinal;
        if (hip.device_get) hip.device_get(&dev, m->ordinal);
        if (hip.device_name) hip.device_name(name, (int)sizeof name, dev);
        if (hip.total_mem) hip.total_mem(&mem, dev);
        if (hip.runtime_version) hip.runtime_version(&version);
        snprintf(out, cap, "%s, %.0f GiB, HIP runtime %d", name[0] ? name : "an AMD GPU", mem / (1024.0 * 1024 * 1024),
                 version);
        return;
    }
    case RK_DEVMEM_HOST: snprintf(out, cap, "the CPU (host backend)"); return;
    }
}
