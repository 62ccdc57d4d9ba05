/* The HIP stand-in: a test double for libamdhip64 (hip_standin.h says what it is for and how it is
 * configured). The entry points keep HIP's C signatures and error codes (hip_runtime_api.h); the checks are
 * the refusals a HIP runtime makes that a launcher can get wrong. Kernels are never executed. */
#include "hip_standin.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amdgpu_meta.h"

#define EXPORT __attribute__((visibility("default")))

/* hipError_t values, as hip_runtime_api.h defines them. */
enum {
    hipSuccess = 0,
    hipErrorInvalidValue = 1,
    hipErrorInvalidConfiguration = 9,
    hipErrorInvalidDeviceFunction = 98,
    hipErrorNoDevice = 100,
    hipErrorInvalidDevice = 101,
    hipErrorInvalidImage = 200,
    hipErrorNoBinaryForGpu = 209,
    hipErrorInvalidHandle = 400,
    hipErrorNotFound = 500,
    hipErrorLaunchOutOfResources = 701,
    hipErrorLaunchFailure = 719,
    hipErrorNotSupported = 801,
};
typedef int hipError_t;

/* hipFunction_attribute values used (hip_runtime_api.h). */
enum {
    HIP_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0,
    HIP_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1,
    HIP_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES = 3,
    HIP_FUNC_ATTRIBUTE_NUM_REGS = 4,
};

/* What hipModuleLaunchKernel takes in `extra` (hip_runtime_api.h). */
#define HIP_LAUNCH_PARAM_BUFFER_POINTER ((void *)0x01)
#define HIP_LAUNCH_PARAM_BUFFER_SIZE ((void *)0x02)
#define HIP_LAUNCH_PARAM_END ((void *)0x03)

/* hipDeviceProp_tR0600, ROCm 6's hipDeviceProp_t (what hipGetDevicePropertiesR0600 fills), field for field:
 * gcnArchName sits behind the CUDA-compatible part, 1160 bytes in. */
typedef struct {
    unsigned bits; /* hipDeviceArch_t: 17 one-bit flags */
} hip_device_arch;
typedef struct hipDeviceProp_tR0600 {
    char name[256];
    char uuid[16];
    char luid[8];
    unsigned int luidDeviceNodeMask;
    size_t totalGlobalMem;
    size_t sharedMemPerBlock;
    int regsPerBlock;
    int warpSize;
    size_t memPitch;
    int maxThreadsPerBlock;
    int maxThreadsDim[3];
    int maxGridSize[3];
    int clockRate;
    size_t totalConstMem;
    int major;
    int minor;
    size_t textureAlignment;
    size_t texturePitchAlignment;
    int deviceOverlap;
    int multiProcessorCount;
    int kernelExecTimeoutEnabled;
    int integrated;
    int canMapHostMemory;
    int computeMode;
    int maxTexture1D;
    int maxTexture1DMipmap;
    int maxTexture1DLinear;
    int maxTexture2D[2];
    int maxTexture2DMipmap[2];
    int maxTexture2DLinear[3];
    int maxTexture2DGather[2];
    int maxTexture3D[3];
    int maxTexture3DAlt[3];
    int maxTextureCubemap;
    int maxTexture1DLayered[2];
    int maxTexture2DLayered[3];
    int maxTextureCubemapLayered[2];
    int maxSurface1D;
    int maxSurface2D[2];
    int maxSurface3D[3];
    int maxSurface1DLayered[2];
    int maxSurface2DLayered[3];
    int maxSurfaceCubemap;
    int maxSurfaceCubemapLayered[2];
    size_t surfaceAlignment;
    int concurrentKernels;
    int ECCEnabled;
    int pciBusID;
    int pciDeviceID;
    int pciDomainID;
    int tccDriver;
    int asyncEngineCount;
    int unifiedAddressing;
    int memoryClockRate;
    int memoryBusWidth;
    int l2CacheSize;
    int persistingL2CacheMaxSize;
    int maxThreadsPerMultiProcessor;
    int streamPrioritiesSupported;
    int globalL1CacheSupported;
    int localL1CacheSupported;
    size_t sharedMemPerMultiprocessor;
    int regsPerMultiprocessor;
    int managedMemory;
    int isMultiGpuBoard;
    int multiGpuBoardGroupID;
    int hostNativeAtomicSupported;
    int singleToDoublePrecisionPerfRatio;
    int pageableMemoryAccess;
    int concurrentManagedAccess;
    int computePreemptionSupported;
    int canUseHostPointerForRegisteredMem;
    int cooperativeLaunch;
    int cooperativeMultiDeviceLaunch;
    size_t sharedMemPerBlockOptin;
    int pageableMemoryAccessUsesHostPageTables;
    int directManagedMemAccessFromHost;
    int maxBlocksPerMultiProcessor;
    int accessPolicyMaxWindowSize;
    size_t reservedSharedMemPerBlock;
    int hostRegisterSupported;
    int sparseHipArraySupported;
    int hostRegisterReadOnlySupported;
    int timelineSemaphoreInteropSupported;
    int memoryPoolsSupported;
    int gpuDirectRDMASupported;
    unsigned int gpuDirectRDMAFlushWritesOptions;
    int gpuDirectRDMAWritesOrdering;
    unsigned int memoryPoolSupportedHandleTypes;
    int deferredMappingHipArraySupported;
    int ipcEventSupported;
    int clusterLaunch;
    int unifiedFunctionPointers;
    int reserved[63];
    int hipReserved[32];
    char gcnArchName[256];
    size_t maxSharedMemoryPerMultiProcessor;
    int clockInstructionRate;
    hip_device_arch arch;
    unsigned int *hdpMemFlushCntl;
    unsigned int *hdpRegFlushCntl;
    int cooperativeMultiDeviceUnmatchedFunc;
    int cooperativeMultiDeviceUnmatchedGridDim;
    int cooperativeMultiDeviceUnmatchedBlockDim;
    int cooperativeMultiDeviceUnmatchedSharedMem;
    int isLargeBar;
    int asicRevision;
} hipDeviceProp_tR0600;
_Static_assert(offsetof(hipDeviceProp_tR0600, gcnArchName) == 1160, "hipDeviceProp_tR0600 layout");

/* ---- devices ------------------------------------------------------------------------------------------ */
/* The processors the stand-in can pose as: figures of the product each is like (gfx1250: no product is
 * assumed; its LDS is what LLVM gives the processor). Limits every AMD device shares are in device_props. */
typedef struct standin_proc {
    const char *mach, *name;
    int warp, cus, major, minor;
    size_t lds, mem_gib;
} standin_proc;
static const standin_proc k_procs[] = {
    {"gfx90a", "AMD Instinct MI250X", 64, 110, 9, 0, 65536, 64},
    {"gfx942", "AMD Instinct MI300X", 64, 304, 9, 4, 65536, 192},
    {"gfx950", "AMD Instinct MI355X", 64, 256, 9, 5, 163840, 288},
    {"gfx1100", "AMD Radeon RX 7900 XTX", 32, 96, 11, 0, 65536, 24},
    {"gfx1201", "AMD Radeon RX 9070 XT", 32, 64, 12, 0, 65536, 16},
    {"gfx1250", "AMD gfx1250", 32, 64, 12, 5, 327680, 128},
};

#define MAX_DEVICES 8
#define MAX_BLOCK 1024 /* maxThreadsPerBlock of every AMD device */

typedef struct device {
    char target[96]; /* gcnArchName */
    const standin_proc *proc;
} device;

/* ---- state ---------------------------------------------------------------------------------------------- */
typedef struct function {
    struct module *module;
    const rk_amd_kernel *kernel;
} function;

typedef struct module {
    struct module *next;
    int device; /* the device current at the load: its functions run there */
    rk_amd_code code;
    function fn[RK_AMD_MAX_KERNELS];
} module;

/* clang-format off */
#define CALLS(X)                       \
    X(hipInit)                         \
    X(hipGetDeviceCount)               \
    X(hipGetDevice)                    \
    X(hipSetDevice)                    \
    X(hipGetDevicePropertiesR0600)     \
    X(hipModuleLoadData)               \
    X(hipModuleUnload)                 \
    X(hipModuleGetFunction)            \
    X(hipModuleLaunchKernel)           \
    X(hipFuncGetAttribute)
/* clang-format on */
#define CALL_INDEX(name) CALL_##name,
enum { CALLS(CALL_INDEX) N_CALLS };
#define CALL_NAME(name) #name,
static const char *const k_call_names[] = {CALLS(CALL_NAME)};

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_configured;
static int g_n_devices;
static device g_devices[MAX_DEVICES];
static hipError_t g_fail[N_CALLS];
static unsigned g_cap_threads;
static module *g_modules;
static int g_live_modules;
static rk_hip_standin_launch g_last;
static _Thread_local int t_current; /* HIP's current device is per thread */

static int set_devices_locked(const char *list) {
    int n = 0;
    for (const char *p = list; p && *p; p += *p == ',') {
        const size_t len = strcspn(p, ",");
        char id[96], mach[32];
        rk_amd_feature xnack, sramecc;
        snprintf(id, sizeof id, "%.*s", (int)(len < sizeof id - 1 ? len : sizeof id - 1), p);
        p += len;
        if (!id[0]) continue;
        const standin_proc *proc = NULL;
        if (rk_amd_target_parse(id, mach, sizeof mach, &xnack, &sramecc) == 0)
            for (size_t i = 0; i < sizeof k_procs / sizeof k_procs[0]; i++)
                if (!strcmp(k_procs[i].mach, mach)) proc = &k_procs[i];
        if (!proc || n == MAX_DEVICES) {
            fprintf(stderr, "hip stand-in: no device for '%s' (%s)\n", id,
                    proc ? "too many devices" : "a target id of a processor in hip_standin.c's k_procs");
            return -1;
        }
        snprintf(g_devices[n].target, sizeof g_devices[n].target, "%s", id);
        g_devices[n++].proc = proc;
    }
    g_n_devices = n;
    return 0;
}

static int set_fail_locked(const char *call, int error) {
    for (int i = 0; i < N_CALLS; i++)
        if (!strcmp(k_call_names[i], call)) {
            g_fail[i] = error;
            return 0;
        }
    return -1;
}

/* RK_HIP_STANDIN_DEVICES and RK_HIP_STANDIN_FAIL. */
static void configure_locked(void) {
    const char *devs = getenv("RK_HIP_STANDIN_DEVICES");
    if (set_devices_locked(devs ? devs : "gfx942:sramecc+:xnack-") != 0) g_n_devices = 0;
    memset(g_fail, 0, sizeof g_fail);
    const char *fail = getenv("RK_HIP_STANDIN_FAIL");
    for (const char *p = fail; p && *p; p += *p == ',') {
        const size_t len = strcspn(p, ",");
        char call[64];
        int error = 0;
        snprintf(call, sizeof call, "%.*s", (int)(len < sizeof call - 1 ? len : sizeof call - 1), p);
        p += len;
        char *eq = strchr(call, '=');
        if (eq) *eq = '\0', error = atoi(eq + 1);
        if (!eq || set_fail_locked(call, error) != 0)
            fprintf(stderr, "hip stand-in: RK_HIP_STANDIN_FAIL: '%s' is not CALL=ERROR of an entry point here\n", call);
    }
    g_configured = 1;
}

/* Every entry point starts here: the configuration read once, then the injected failure of the call. */
static hipError_t enter(int call) {
    pthread_mutex_lock(&g_mu);
    if (!g_configured) configure_locked();
    return g_fail[call];
}
#define ENTER(call)                                     \
    do {                                                \
        hipError_t injected_ = enter(CALL_##call);      \
        if (injected_ != hipSuccess) UNLOCK(injected_); \
    } while (0)
#define UNLOCK(e)                    \
    do {                             \
        pthread_mutex_unlock(&g_mu); \
        return (e);                  \
    } while (0)

/* ---- control (hip_standin.h) ---------------------------------------------------------------------------- */
EXPORT int rk_hip_standin_last_launch(rk_hip_standin_launch *out) {
    pthread_mutex_lock(&g_mu);
    const int have = g_last.count > 0;
    if (have) *out = g_last;
    pthread_mutex_unlock(&g_mu);
    return have ? 0 : -1;
}

EXPORT int rk_hip_standin_fail(const char *call, int error) {
    pthread_mutex_lock(&g_mu);
    if (!g_configured) configure_locked();
    int rc = set_fail_locked(call, error);
    pthread_mutex_unlock(&g_mu);
    return rc;
}

EXPORT int rk_hip_standin_set_devices(const char *list) {
    pthread_mutex_lock(&g_mu);
    if (!g_configured) configure_locked();
    int rc = set_devices_locked(list);
    pthread_mutex_unlock(&g_mu);
    return rc;
}

EXPORT void rk_hip_standin_cap_threads(unsigned n) {
    pthread_mutex_lock(&g_mu);
    g_cap_threads = n;
    pthread_mutex_unlock(&g_mu);
}

EXPORT int rk_hip_standin_live_modules(void) {
    pthread_mutex_lock(&g_mu);
    int n = g_live_modules;
    pthread_mutex_unlock(&g_mu);
    return n;
}

EXPORT void rk_hip_standin_reset(void) {
    pthread_mutex_lock(&g_mu);
    configure_locked();
    g_cap_threads = 0;
    memset(&g_last, 0, sizeof g_last);
    t_current = 0;
    pthread_mutex_unlock(&g_mu);
}

/* ---- devices -------------------------------------------------------------------------------------------- */
EXPORT hipError_t hipInit(unsigned flags) {
    ENTER(hipInit);
    UNLOCK(flags ? hipErrorInvalidValue : hipSuccess); /* HIP takes no flags yet */
}

EXPORT hipError_t hipGetDeviceCount(int *count) {
    ENTER(hipGetDeviceCount);
    if (!count) UNLOCK(hipErrorInvalidValue);
    *count = g_n_devices;
    UNLOCK(g_n_devices ? hipSuccess : hipErrorNoDevice);
}

EXPORT hipError_t hipGetDevice(int *dev) {
    ENTER(hipGetDevice);
    if (!dev) UNLOCK(hipErrorInvalidValue);
    if (!g_n_devices) UNLOCK(hipErrorNoDevice);
    *dev = t_current;
    UNLOCK(hipSuccess);
}

EXPORT hipError_t hipSetDevice(int dev) {
    ENTER(hipSetDevice);
    if (dev < 0 || dev >= g_n_devices) UNLOCK(hipErrorInvalidDevice);
    t_current = dev;
    UNLOCK(hipSuccess);
}

EXPORT hipError_t hipGetDevicePropertiesR0600(hipDeviceProp_tR0600 *p, int dev) {
    ENTER(hipGetDevicePropertiesR0600);
    if (!p) UNLOCK(hipErrorInvalidValue);
    if (dev < 0 || dev >= g_n_devices) UNLOCK(hipErrorInvalidDevice);
    const device *d = &g_devices[dev];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", d->proc->name);
    snprintf(p->gcnArchName, sizeof p->gcnArchName, "%s", d->target);
    p->totalGlobalMem = d->proc->mem_gib << 30;
    p->sharedMemPerBlock = d->proc->lds;
    p->maxSharedMemoryPerMultiProcessor = d->proc->lds;
    p->sharedMemPerMultiprocessor = d->proc->lds;
    p->warpSize = d->proc->warp;
    p->maxThreadsPerBlock = MAX_BLOCK;
    p->maxThreadsDim[0] = p->maxThreadsDim[1] = p->maxThreadsDim[2] = MAX_BLOCK;
    p->maxGridSize[0] = INT32_MAX;
    p->maxGridSize[1] = p->maxGridSize[2] = 65536;
    p->multiProcessorCount = d->proc->cus;
    p->maxThreadsPerMultiProcessor = 2048;
    p->major = d->proc->major;
    p->minor = d->proc->minor;
    p->regsPerBlock = 65536;
    p->pciBusID = dev + 1;
    UNLOCK(hipSuccess);
}

/* ---- modules -------------------------------------------------------------------------------------------- */
static uint64_t rd64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}
static uint16_t rd16(const unsigned char *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

/* hipModuleLoadData gets a pointer and no size: like HIP, the stand-in takes the size from the image's own
 * headers (an ELF's section and program header tables and sections, a clang offload bundle's entries).
 * 0 when the image is neither. */
#define IMAGE_MAX ((uint64_t)1 << 30)
static size_t image_size(const unsigned char *p) {
    static const char bundle[] = "__CLANG_OFFLOAD_BUNDLE__";
    uint64_t end = 0;
    if (!memcmp(p, bundle, sizeof bundle - 1)) {
        const uint64_t n = rd64(p + 24);
        const unsigned char *e = p + 32;
        for (uint64_t i = 0; i < n && i < 64; i++) {
            const uint64_t off = rd64(e), size = rd64(e + 8), id_len = rd64(e + 16);
            if (off > IMAGE_MAX || size > IMAGE_MAX || id_len > 4096) return 0;
            if (off + size > end) end = off + size;
            e += 24 + id_len;
        }
        return end <= IMAGE_MAX ? (size_t)end : 0;
    }
    if (memcmp(p, "\177ELF", 4) != 0 || p[4] != 2 /* ELFCLASS64 */ || p[5] != 1 /* little-endian */) return 0;
    const uint64_t phoff = rd64(p + 0x20), shoff = rd64(p + 0x28);
    const uint16_t phentsize = rd16(p + 0x36), phnum = rd16(p + 0x38), shentsize = rd16(p + 0x3a),
                   shnum = rd16(p + 0x3c);
    if (phoff > IMAGE_MAX || shoff > IMAGE_MAX || shentsize < 64) return 0;
    end = 64;
    if (phoff + (uint64_t)phentsize * phnum > end) end = phoff + (uint64_t)phentsize * phnum;
    if (shoff + (uint64_t)shentsize * shnum > end) end = shoff + (uint64_t)shentsize * shnum;
    for (uint16_t i = 0; i < shnum; i++) {
        const unsigned char *sh = p + shoff + (uint64_t)i * shentsize;
        const uint32_t type = (uint32_t)rd64(sh + 4);
        const uint64_t off = rd64(sh + 0x18), size = rd64(sh + 0x20);
        if (type == 8 /* SHT_NOBITS */) continue;
        if (off > IMAGE_MAX || size > IMAGE_MAX) return 0;
        if (off + size > end) end = off + size;
    }
    return end <= IMAGE_MAX ? (size_t)end : 0;
}

EXPORT hipError_t hipModuleLoadData(module **out, const void *image) {
    ENTER(hipModuleLoadData);
    if (!out || !image) UNLOCK(hipErrorInvalidValue);
    *out = NULL;
    if (t_current >= g_n_devices) UNLOCK(hipErrorNoDevice);
    const device *d = &g_devices[t_current];
    module *m = calloc(1, sizeof *m);
    if (!m) UNLOCK(hipErrorNotSupported);
    char why[256];
    const size_t n = image_size(image);
    if (n == 0 || rk_amd_read(image, n, &m->code, why, sizeof why) != 0) {
        fprintf(stderr, "hip stand-in: hipModuleLoadData: not an AMDGPU code object (%s)\n",
                n ? why : "neither an ELF64 nor a clang offload bundle");
        free(m);
        UNLOCK(hipErrorInvalidImage);
    }
    if (!rk_amd_target_compatible(&m->code, d->target, why, sizeof why)) {
        fprintf(stderr, "hip stand-in: hipModuleLoadData: no code for device %d (%s): %s\n", t_current, d->target, why);
        free(m);
        UNLOCK(hipErrorNoBinaryForGpu);
    }
    m->device = t_current;
    for (int i = 0; i < m->code.n_kernels; i++) m->fn[i] = (function){m, &m->code.kernels[i]};
    m->next = g_modules;
    g_modules = m;
    g_live_modules++;
    *out = m;
    UNLOCK(hipSuccess);
}

static int live(const module *m) {
    for (const module *x = g_modules; x; x = x->next)
        if (x == m) return 1;
    return 0;
}

EXPORT hipError_t hipModuleUnload(module *m) {
    ENTER(hipModuleUnload);
    module **at = &g_modules;
    while (*at && *at != m) at = &(*at)->next;
    if (!m || !*at) UNLOCK(hipErrorInvalidHandle);
    *at = m->next;
    g_live_modules--;
    free(m);
    UNLOCK(hipSuccess);
}

EXPORT hipError_t hipModuleGetFunction(function **out, module *m, const char *name) {
    ENTER(hipModuleGetFunction);
    if (!out || !name) UNLOCK(hipErrorInvalidValue);
    if (!live(m)) UNLOCK(hipErrorInvalidHandle);
    const rk_amd_kernel *k = rk_amd_kernel_find(&m->code, name);
    if (!k) UNLOCK(hipErrorNotFound);
    *out = &m->fn[k - m->code.kernels];
    UNLOCK(hipSuccess);
}

/* A function of a module still loaded. */
static const function *live_function(const function *f) {
    for (const module *x = g_modules; x; x = x->next)
        if (f >= x->fn && f < x->fn + x->code.n_kernels) return f;
    return NULL;
}

static unsigned max_threads(const rk_amd_kernel *k) {
    return g_cap_threads && g_cap_threads < k->max_flat_wg ? g_cap_threads : k->max_flat_wg;
}

EXPORT hipError_t hipFuncGetAttribute(int *value, int attrib, const function *f) {
    ENTER(hipFuncGetAttribute);
    if (!value) UNLOCK(hipErrorInvalidValue);
    if (!live_function(f)) UNLOCK(hipErrorInvalidHandle);
    switch (attrib) {
    case HIP_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *value = (int)max_threads(f->kernel); break;
    case HIP_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *value = (int)f->kernel->group_size; break;
    case HIP_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: *value = (int)f->kernel->private_size; break;
    case HIP_FUNC_ATTRIBUTE_NUM_REGS: *value = f->kernel->vgpr; break;
    default: UNLOCK(hipErrorNotSupported);
    }
    UNLOCK(hipSuccess);
}

/* ---- launch ---------------------------------------------------------------------------------------------- */
static int hidden(const rk_amd_arg *a) { return !strncmp(a->value_kind, "hidden_", 7); }

static void put(unsigned char *seg, const rk_amd_arg *a, uint64_t v) {
    memcpy(seg + a->offset, &v, a->size < 8 ? a->size : 8); /* little-endian: the low bytes */
}

/* The hidden arguments HIP fills: the grid in blocks, the block, the remainders (0: ropekv's grids are whole
 * blocks) and the grid's dimensions; the rest (queue and buffer pointers, hostcall) stays 0 here. */
static void fill_hidden(unsigned char *seg, const rk_amd_kernel *k, const unsigned grid[3], const unsigned block[3]) {
    for (int i = 0; i < k->n_args; i++) {
        const rk_amd_arg *a = &k->args[i];
        const char *v = a->value_kind;
        if (!hidden(a)) continue;
        for (int d = 0; d < 3; d++) {
            char name[40];
            snprintf(name, sizeof name, "hidden_block_count_%c", 'x' + d);
            if (!strcmp(v, name)) put(seg, a, grid[d]);
            snprintf(name, sizeof name, "hidden_group_size_%c", 'x' + d);
            if (!strcmp(v, name)) put(seg, a, block[d]);
        }
        if (!strcmp(v, "hidden_grid_dims"))
            put(seg, a, grid[2] > 1 || block[2] > 1 ? 3 : grid[1] > 1 || block[1] > 1 ? 2 : 1);
    }
}

/* The arguments packed as HIP packs them into the kernarg segment: explicit argument i copied from params[i]
 * (size bytes at its offset), or the whole explicit part from `extra`'s buffer. */
static hipError_t pack(unsigned char *seg, const rk_amd_kernel *k, void **params, void **extra, int *used_extra) {
    uint32_t explicit_end = 0;
    for (int i = 0; i < k->n_args; i++) { /* every argument lies in the segment */
        const rk_amd_arg *a = &k->args[i];
        if ((uint64_t)a->offset + a->size > k->kernarg_size) return hipErrorInvalidImage;
        if (!hidden(a) && a->offset + a->size > explicit_end) explicit_end = a->offset + a->size;
    }
    if ((params != NULL) == (extra != NULL)) return hipErrorInvalidValue; /* exactly one form */
    *used_extra = extra != NULL;
    if (params) {
        int e = 0;
        for (int i = 0; i < k->n_args; i++) {
            const rk_amd_arg *a = &k->args[i];
            if (hidden(a)) continue;
            if (!params[e]) return hipErrorInvalidValue;
            memcpy(seg + a->offset, params[e++], a->size);
        }
        return hipSuccess;
    }
    const void *buf = NULL;
    const size_t *size = NULL;
    for (int i = 0; extra[i] != HIP_LAUNCH_PARAM_END; i += 2) {
        if (i >= 16) return hipErrorInvalidValue; /* no HIP_LAUNCH_PARAM_END */
        if (extra[i] == HIP_LAUNCH_PARAM_BUFFER_POINTER) buf = extra[i + 1];
        else if (extra[i] == HIP_LAUNCH_PARAM_BUFFER_SIZE) size = extra[i + 1];
        else return hipErrorInvalidValue;
    }
    /* The buffer holds the explicit arguments (at least), at most the whole segment. */
    if (!buf || !size || *size < explicit_end || *size > k->kernarg_size) return hipErrorInvalidValue;
    memcpy(seg, buf, explicit_end);
    return hipSuccess;
}

EXPORT hipError_t hipModuleLaunchKernel(const function *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                        unsigned by, unsigned bz, unsigned shared, void *stream, void **params,
                                        void **extra) {
    ENTER(hipModuleLaunchKernel);
    if (!live_function(f)) UNLOCK(hipErrorInvalidHandle);
    const rk_amd_kernel *k = f->kernel;
    const device *d = &g_devices[f->module->device];
    /* A module's functions run on the device it was loaded on, which must be current. */
    if (f->module->device != t_current) {
        fprintf(stderr, "hip stand-in: hipModuleLaunchKernel: %s was loaded on device %d, device %d is current\n",
                k->name, f->module->device, t_current);
        UNLOCK(hipErrorInvalidDeviceFunction);
    }
    const unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
    const uint64_t threads = (uint64_t)bx * by * bz;
    const int wave = k->wave ? (int)k->wave : d->proc->warp;
    if (!gx || !gy || !gz || gx > INT32_MAX || gy > 65536 || gz > 65536 || (uint64_t)gx * bx > UINT32_MAX || !threads ||
        threads > MAX_BLOCK || threads > max_threads(k) || threads % (uint64_t)wave) {
        fprintf(stderr,
                "hip stand-in: hipModuleLaunchKernel: %s: grid %ux%ux%u, block %ux%ux%u refused (kernel's maximum "
                "workgroup size %u, wave %d)\n",
                k->name, gx, gy, gz, bx, by, bz, max_threads(k), wave);
        UNLOCK(hipErrorInvalidConfiguration);
    }
    if ((size_t)shared + k->group_size > d->proc->lds) UNLOCK(hipErrorInvalidValue);
    if (k->kernarg_size > RK_HIP_STANDIN_KERNARG_MAX) UNLOCK(hipErrorNotSupported);
    unsigned char seg[RK_HIP_STANDIN_KERNARG_MAX] = {0};
    int used_extra = 0;
    hipError_t e = pack(seg, k, params, extra, &used_extra);
    if (e != hipSuccess) {
        fprintf(stderr,
                "hip stand-in: hipModuleLaunchKernel: %s: the arguments do not pack into its %u-byte kernarg "
                "segment\n",
                k->name, k->kernarg_size);
        UNLOCK(e);
    }
    fill_hidden(seg, k, grid, block);
    g_last.count++;
    g_last.device = t_current;
    snprintf(g_last.kernel, sizeof g_last.kernel, "%s", k->name);
    memcpy(g_last.grid, grid, sizeof grid);
    memcpy(g_last.block, block, sizeof block);
    g_last.shared = shared;
    g_last.stream = stream;
    g_last.extra = used_extra;
    g_last.kernarg_size = k->kernarg_size;
    memcpy(g_last.kernarg, seg, k->kernarg_size);
    UNLOCK(hipSuccess);
}

/* ---- errors --------------------------------------------------------------------------------------------- */
EXPORT const char *hipGetErrorName(hipError_t e) {
    switch (e) {
#define NAME(x) \
    case x: return #x;
        NAME(hipSuccess)
        NAME(hipErrorInvalidValue)
        NAME(hipErrorInvalidConfiguration)
        NAME(hipErrorInvalidDeviceFunction)
        NAME(hipErrorNoDevice)
        NAME(hipErrorInvalidDevice)
        NAME(hipErrorInvalidImage)
        NAME(hipErrorNoBinaryForGpu)
        NAME(hipErrorInvalidHandle)
        NAME(hipErrorNotFound)
        NAME(hipErrorLaunchOutOfResources)
        NAME(hipErrorLaunchFailure)
        NAME(hipErrorNotSupported)
#undef NAME
    default: return "hipErrorUnknown";
    }
}

EXPORT const char *hipGetErrorString(hipError_t e) {
    switch (e) {
    case hipSuccess: return "no error";
    case hipErrorInvalidValue: return "invalid argument";
    case hipErrorInvalidConfiguration: return "invalid configuration argument";
    case hipErrorInvalidDeviceFunction: return "invalid device function";
    case hipErrorNoDevice: return "no ROCm-capable device is detected";
    case hipErrorInvalidDevice: return "invalid device ordinal";
    case hipErrorInvalidImage: return "device kernel image is invalid";
    case hipErrorNoBinaryForGpu: return "no kernel image is available for execution on the device";
    case hipErrorInvalidHandle: return "invalid resource handle";
    case hipErrorNotFound: return "named symbol not found";
    case hipErrorLaunchOutOfResources: return "too many resources requested for launch";
    case hipErrorLaunchFailure: return "unspecified launch failure";
    case hipErrorNotSupported: return "operation not supported";
    default: return "unknown error";
    }
}
