/* The small function table every backend implements (hip, cuda, host). runtime.c reaches each
 * compiler and driver only through it; tests can substitute their own. */
#ifndef RK_BACKEND_H
#define RK_BACKEND_H

#include "compilers.h"
#include "rk.h"

typedef struct rk_device {
    const struct rk_backend_ops *ops;
    char target[96];       /* full target id: "sm_90", "gfx942:sramecc+:xnack-", "host" */
    char compiler_id[192]; /* identity and version of the compiler used (part of cache keys) */
    char options[256];     /* compile options beyond the arch row's (part of cache keys) */
    char refused[512];     /* non-empty: the compiler cannot build for this target, and why */
    int block;             /* the most threads per block of a launch (rk_arch_max_block of the arch row), set by
                              the runtime after open: a backend may refuse at load a kernel that cannot run
                              blocks of this size */
    int named_unusable;    /* set by a failed open: what cannot be used is the library the caller named
                              ($ROPEKV_LIBHIP, $ROPEKV_LIBCUDA), so no other backend is tried */
    void *state;           /* backend-private */
} rk_device;

#define RK_COMPILE_ONLY (-1) /* rk_backend_ops.open's ordinal for a context without a device */

typedef struct rk_backend_ops {
    const char *name;
    /* Finds device `ordinal` (target_override, if non-NULL, replaces the detected target). ROPEKV_OK,
     * or ROPEKV_ERR_BACKEND (not on this machine; d->named_unusable when the library the caller named cannot be
     * used) / ROPEKV_ERR_DEVICE with the reason in log.
     * ordinal RK_COMPILE_ONLY: no device; the target is target_override and only compile is used (the
     * identity, options and target are set exactly as a device of that target would have them). */
    int (*open)(rk_device *d, int ordinal, const char *target_override, rk_buf *log);
    /* Source -> code object for d->target, using the arch row's options. */
    int (*compile)(rk_device *d, const char *src, size_t len, const char *name, const rk_arch *arch, rk_codeobj *out,
                   rk_buf *log);
    /* Code object -> module with entry points fn[0] = name (32-bit) and fn[1] = name_i64; an entry the
     * code object lacks (built with RK_ENTRIES 1 or 2) is NULL; lacking both is an error.
     * ROPEKV_ERR_IO: nothing can be loaded here, whatever the object (the host backend's $TMPDIR where it
     * needs one): the caller neither tries another object nor rebuilds. */
    int (*load)(rk_device *d, const rk_codeobj *co, const char *name, void **module, void *fn[2], rk_buf *log);
    /* pdl: the code waits for the previous grid itself (arch row `pdl`), so the launch may overlap it
     * (programmatic dependent launch); backends without the feature launch normally. */
    int (*launch)(rk_device *d, void *fn, const rk_args *a, int64_t blocks, int block, int pdl, void *stream,
                  rk_buf *log);
    void (*unload)(rk_device *d, void *module);
    void (*close)(rk_device *d);
    /* Copies n bytes of device memory at src to host memory at dst, in stream order: after the work queued on stream
     * before it, and finished when it returns (a dump of a launch's inputs, runtime/dump.h). ROPEKV_OK, or
     * ROPEKV_ERR_DEVICE with the reason in log (ROPEKV_ERR_BACKEND: the driver lacks the calls). */
    int (*read)(rk_device *d, void *dst, const void *src, size_t n, void *stream, rk_buf *log);
} rk_backend_ops;

extern const rk_backend_ops rk_backend_host;
extern const rk_backend_ops rk_backend_cuda;
extern const rk_backend_ops rk_backend_hip;

/* Opens the HIP runtime the hip backend uses ($ROPEKV_LIBHIP when set, and only it; else libamdhip64 of ROCm 7, 6
 * or 5), so that
 * other users of the process's HIP (tests' device memory) get the same library. ROPEKV_OK or an rk_dl_open
 * error, the reason in dl->error. */
struct rk_dl;
int rk_hip_dl_open(struct rk_dl *dl);

#endif
