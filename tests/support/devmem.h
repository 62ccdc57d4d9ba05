/* Device memory for programs that launch kernels through the public API (include/ropekv.h) and need
 * buffers on the device the context picked: tests/gpu_conformance. One small layer over the three
 * backends, chosen by ropekv_backend_name:
 *   cuda  the CUDA driver API, through the table the library loads (runtime/cuda_api.h); the device's
 *         primary context (the one the cuda backend uses) is made current on the calling thread
 *   hip   libamdhip64 opened with dlopen ($ROPEKV_LIBHIP when set, as the hip backend opens it, so both
 *         use one HIP runtime): hipMalloc, hipFree, hipMemcpy, hipDeviceSynchronize
 *   host  malloc (the host backend runs kernels on the CPU: its "device" pointers are host memory)
 * No CUDA or HIP header is needed to build it. Addresses are uint64_t whatever the backend. */
#ifndef RK_DEVMEM_H
#define RK_DEVMEM_H

#include <stddef.h>
#include <stdint.h>

typedef enum rk_devmem_kind { RK_DEVMEM_HOST, RK_DEVMEM_CUDA, RK_DEVMEM_HIP } rk_devmem_kind;

typedef struct rk_devmem {
    rk_devmem_kind kind;
    int ordinal; /* the device (cuda, hip) */
    int device;  /* cuda: its CUdevice */
} rk_devmem;

#define RK_DEVMEM_ALIGN 256 /* every allocation is aligned at least this much (the drivers' guarantee) */

/* Opens device `ordinal` of backend ("cuda", "hip" or "host": ropekv_backend_name's spellings) for this
 * thread. 0; 1 when the backend's library or device is not on this machine (a reason to skip); -1 on
 * another failure, or an unknown backend name. why says which. */
int rk_devmem_open(rk_devmem *m, const char *backend, int ordinal, char *why, size_t cap);

/* n bytes (n may be 0), aligned to RK_DEVMEM_ALIGN. 0, or -1 with why ("hipMalloc(4096 bytes): ..."). */
int rk_devmem_alloc(rk_devmem *m, uint64_t *p, size_t n, char *why, size_t cap);
void rk_devmem_free(rk_devmem *m, uint64_t p);
/* Copies to and from the device (synchronous). 0, or -1 with why. */
int rk_devmem_to_device(rk_devmem *m, uint64_t dst, const void *src, size_t n, char *why, size_t cap);
int rk_devmem_to_host(rk_devmem *m, void *dst, uint64_t src, size_t n, char *why, size_t cap);
/* Waits for all work on the device, and reports a failure of a kernel launched before it. */
int rk_devmem_synchronize(rk_devmem *m, char *why, size_t cap);

/* One line about the device: "NVIDIA H200, 140 GiB, driver API 12.8", "AMD Instinct MI300X, 192 GiB,
 * HIP runtime 60342134", "the CPU (host backend)". */
void rk_devmem_describe(rk_devmem *m, char *out, size_t cap);

#endif
