/* The CUDA driver API as ropekv reaches it: one table of entry points, loaded once from
 * $ROPEKV_LIBCUDA or libcuda.so.1 by the cuda backend (backend_cuda.c) and shared with the programs
 * that drive the device around the library (tests/gpu_conformance.c, bench/bench_kernel.c: device
 * memory, events, graphs). The types are declared here, reduced to what is used, so the build needs
 * no CUDA headers. */
#ifndef RK_CUDA_API_H
#define RK_CUDA_API_H

#include <stddef.h>

#include "dl.h"

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;

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

/* Who needs an entry point: the backend (the library cannot use the driver without it), or the
 * programs around it (rk_cuda_driver with RK_CUDA_PROGRAMS). cuLaunchKernelEx is needed by nobody:
 * before CUDA 12 it is missing and launches fall back to cuLaunchKernel; nor are the dump's stream-ordered copy
 * calls (cuMemcpyDtoHAsync, cuStreamSynchronize, cuStreamIsCapturing), which only a dump uses. */
enum { RK_CUDA_BACKEND = 1, RK_CUDA_PROGRAMS = 2 };
#define RK_CUDA_ALL (RK_CUDA_BACKEND | RK_CUDA_PROGRAMS)

#define RK_CUDA_API(X)                                                                                                \
    X(cuInit, "cuInit", RK_CUDA_ALL, CUresult, (unsigned))                                                            \
    X(cuDeviceGetCount, "cuDeviceGetCount", RK_CUDA_ALL, CUresult, (int *))                                           \
    X(cuDeviceGet, "cuDeviceGet", RK_CUDA_ALL, CUresult, (CUdevice *, int))                                           \
    X(cuDeviceGetAttribute, "cuDeviceGetAttribute", RK_CUDA_ALL, CUresult, (int *, int, CUdevice))                    \
    X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", RK_CUDA_ALL, CUresult, (CUcontext *, CUdevice))           \
    X(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", RK_CUDA_ALL, CUresult, (CUdevice))                   \
    X(cuCtxPushCurrent, "cuCtxPushCurrent_v2", RK_CUDA_ALL, CUresult, (CUcontext))                                    \
    X(cuCtxPopCurrent, "cuCtxPopCurrent_v2", RK_CUDA_ALL, CUresult, (CUcontext *))                                    \
    X(cuModuleLoadData, "cuModuleLoadData", RK_CUDA_ALL, CUresult, (CUmodule *, const void *))                        \
    X(cuModuleUnload, "cuModuleUnload", RK_CUDA_ALL, CUresult, (CUmodule))                                            \
    X(cuModuleGetFunction, "cuModuleGetFunction", RK_CUDA_ALL, CUresult, (CUfunction *, CUmodule, const char *))      \
    X(cuLaunchKernel, "cuLaunchKernel", RK_CUDA_ALL, CUresult,                                                        \
      (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void **, void **)) \
    X(cuGetErrorString, "cuGetErrorString", RK_CUDA_ALL, CUresult, (CUresult, const char **))                         \
    X(cuLaunchKernelEx, "cuLaunchKernelEx", 0, CUresult, (const CUlaunchConfig *, CUfunction, void **, void **))      \
    X(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", 0, CUresult, (void *, CUdeviceptr, size_t, CUstream))                \
    X(cuStreamSynchronize, "cuStreamSynchronize", 0, CUresult, (CUstream))                                            \
    X(cuStreamIsCapturing, "cuStreamIsCapturing", 0, CUresult, (CUstream, int *))                                     \
    X(cuGetErrorName, "cuGetErrorName", RK_CUDA_PROGRAMS, CUresult, (CUresult, const char **))                        \
    X(cuDriverGetVersion, "cuDriverGetVersion", RK_CUDA_PROGRAMS, CUresult, (int *))                                  \
    X(cuDeviceGetName, "cuDeviceGetName", RK_CUDA_PROGRAMS, CUresult, (char *, int, CUdevice))                        \
    X(cuDeviceTotalMem, "cuDeviceTotalMem_v2", RK_CUDA_PROGRAMS, CUresult, (size_t *, CUdevice))                      \
    X(cuCtxSetCurrent, "cuCtxSetCurrent", RK_CUDA_PROGRAMS, CUresult, (CUcontext))                                    \
    X(cuCtxSynchronize, "cuCtxSynchronize", RK_CUDA_PROGRAMS, CUresult, (void))                                       \
    X(cuMemAlloc, "cuMemAlloc_v2", RK_CUDA_PROGRAMS, CUresult, (CUdeviceptr *, size_t))                               \
    X(cuMemFree, "cuMemFree_v2", RK_CUDA_PROGRAMS, CUresult, (CUdeviceptr))                                           \
    X(cuMemsetD8, "cuMemsetD8_v2", RK_CUDA_PROGRAMS, CUresult, (CUdeviceptr, unsigned char, size_t))                  \
    X(cuMemcpyHtoD, "cuMemcpyHtoD_v2", RK_CUDA_PROGRAMS, CUresult, (CUdeviceptr, const void *, size_t))               \
    X(cuMemcpyDtoH, "cuMemcpyDtoH_v2", RK_CUDA_PROGRAMS, CUresult, (void *, CUdeviceptr, size_t))                     \
    X(cuStreamCreate, "cuStreamCreate", RK_CUDA_PROGRAMS, CUresult, (CUstream *, unsigned))                           \
    X(cuStreamBeginCapture, "cuStreamBeginCapture_v2", RK_CUDA_PROGRAMS, CUresult, (CUstream, int))                   \
    X(cuStreamEndCapture, "cuStreamEndCapture", RK_CUDA_PROGRAMS, CUresult, (CUstream, CUgraph *))                    \
    X(cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags", RK_CUDA_PROGRAMS, CUresult,                         \
      (CUgraphExec *, CUgraph, unsigned long long))                                                                   \
    X(cuGraphLaunch, "cuGraphLaunch", RK_CUDA_PROGRAMS, CUresult, (CUgraphExec, CUstream))                            \
    X(cuEventCreate, "cuEventCreate", RK_CUDA_PROGRAMS, CUresult, (CUevent *, unsigned))                              \
    X(cuEventRecord, "cuEventRecord", RK_CUDA_PROGRAMS, CUresult, (CUevent, CUstream))                                \
    X(cuEventSynchronize, "cuEventSynchronize", RK_CUDA_PROGRAMS, CUresult, (CUevent))                                \
    X(cuEventElapsedTime, "cuEventElapsedTime", RK_CUDA_PROGRAMS, CUresult, (float *, CUevent, CUevent))

typedef struct rk_cuda_api {
    RK_CUDA_API(RK_DL_FIELD)
} rk_cuda_api;

/* The driver table, loaded and initialized (cuInit(0)) once, with every entry point needed by the
 * users in need (RK_CUDA_BACKEND, RK_CUDA_PROGRAMS or both); else NULL with the reason in why (the
 * library missing, the first missing entry point by name, or cuInit failing). Thread-safe. */
const rk_cuda_api *rk_cuda_driver(unsigned need, char *why, size_t cap);

#endif
