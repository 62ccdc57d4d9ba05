/* The HIP stand-in: a test double for the HIP runtime (libamdhip64), built as librk_hip_standin.so for the
 * tests only (never installed) and loaded by the library's hip backend through ROPEKV_LIBHIP. There is no
 * AMD GPU here; the stand-in lets the backend run end to end all the same.
 *
 * It implements the entry points runtime/backend_hip.c resolves, with HIP's error codes, and validates every
 * call the way the HIP runtime would refuse it: a code object is read with tools/amdgpu_meta.h and must be an
 * AMDGPU code object compatible with the current device's target id; a function must be in its metadata; a
 * launch must have a grid and a block the device and the kernel accept and arguments that pack into exactly the
 * kernel's kernarg segment. It never executes a kernel (device pointers are never dereferenced): a launch is
 * recorded for the test to read back (rk_hip_standin_last_launch).
 *
 * Configuration, from the environment (read at hipInit and by rk_hip_standin_reset) or the setters below:
 *   RK_HIP_STANDIN_DEVICES  the devices, comma-separated target ids as gcnArchName reports them, e.g.
 *                           "gfx942:sramecc+:xnack-,gfx950:sramecc+:xnack-,gfx1250" (MI300X-, MI355X- and
 *                           gfx1250-like devices); empty: no device. Unset: one gfx942:sramecc+:xnack- device.
 *   RK_HIP_STANDIN_FAIL     failures to inject: "hipInit=100,hipModuleLaunchKernel=719": each named call
 *                           returns that HIP error (until cleared). */
#ifndef RK_HIP_STANDIN_H
#define RK_HIP_STANDIN_H

#include <stddef.h>

#define RK_HIP_STANDIN_KERNARG_MAX 4096

/* What the last successful hipModuleLaunchKernel got. */
typedef struct rk_hip_standin_launch {
    unsigned long count; /* successful launches since the last reset */
    int device;          /* the current device at the launch */
    char kernel[256];    /* the function's name (.name) */
    unsigned grid[3], block[3];
    unsigned shared;     /* sharedMemBytes */
    void *stream;        /* as passed */
    int extra;           /* 1: the arguments came as `extra` (HIP_LAUNCH_PARAM_BUFFER_*), 0: as kernelParams */
    size_t kernarg_size; /* the packed kernarg segment: .kernarg_segment_size bytes */
    unsigned char kernarg[RK_HIP_STANDIN_KERNARG_MAX];
} rk_hip_standin_launch;

/* Copies the last launch into *out; 0, or -1 when there was none since the last reset. */
int rk_hip_standin_last_launch(rk_hip_standin_launch *out);

/* Makes every later call of the entry point `call` (its HIP name) return error; error 0 clears it. 0, or -1
 * for a name the stand-in does not implement. */
int rk_hip_standin_fail(const char *call, int error);

/* Replaces the devices (the RK_HIP_STANDIN_DEVICES syntax); modules loaded before stay valid. 0, or -1 with a
 * message on stderr for a target the stand-in has no device for. */
int rk_hip_standin_set_devices(const char *list);

/* The device behaves as if every kernel's maximum workgroup size (.max_flat_workgroup_size) were at most n:
 * hipFuncGetAttribute reports it and launches are checked against it. 0: the code object's own. */
void rk_hip_standin_cap_threads(unsigned n);

/* Modules currently loaded (load minus unload): a test sees leaks and double unloads. */
int rk_hip_standin_live_modules(void);

/* Back to the environment's configuration: no injected failures, no cap, no recorded launch, device 0
 * current on the calling thread. Loaded modules stay. */
void rk_hip_standin_reset(void);

#endif
