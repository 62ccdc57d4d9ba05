/* The run-time compilers of the library, each loaded with dlopen so a build never requires them:
 *   nvrtc   (libnvrtc.so.*)                  HIP-as-CUDA source -> CUBIN for sm_XY
 *   hiprtc  (libhiprtc.so.* / libamdhip64)   -> AMDGPU code object, guarded by an allow-list
 * Each hands back the code object and the compiler's log; reading figures out of them (registers,
 * spills, code size) is the tools' business (tools/inspect.h).
 *
 * Every function is thread-safe. The only process-wide state is the libraries found once
 * (pthread_once) and kept for the life of the process. */
#ifndef RK_COMPILERS_H
#define RK_COMPILERS_H

#include <stddef.h>

#include "proc.h"
#include "rk.h"

/* ---- nvrtc ---------------------------------------------------------------------------------- */
/* libnvrtc is found as $ROPEKV_NVRTC, else libnvrtc.so, .so.13, .so.12, /usr/local/cuda/lib64. */
/* 0 when libnvrtc could be loaded (version filled), else -1 with why. Thread-safe. */
int rk_nvrtc_available(int *major, int *minor, char *why, size_t cap);

/* rk_nvrtc_compile flags */
enum {
    RK_NVRTC_PTXAS_VERBOSE = 1, /* --ptxas-options=-v: ptxas's per-function report goes to the log */
};

/* Compiles src for arch ("sm_90", "sm_90a", "sm_100f": real architectures only). Options:
 * -arch=<arch> --std=c++17 --fmad=false plus extra (space separated, may be NULL).
 * Outputs of the one compile, each read only when asked for (may be NULL): cubin, the CUBIN;
 * ptx, the PTX text (appended). The compiler's log is appended to log (may be NULL).
 * Returns ROPEKV_OK, ROPEKV_ERR_COMPILE (log says why), ROPEKV_ERR_TARGET (arch malformed or unknown
 * to this nvrtc), ROPEKV_ERR_IO (nvrtc missing) or ROPEKV_ERR_NOMEM. cubin is empty on failure. */
int rk_nvrtc_compile(const char *src, size_t len, const char *arch, const char *extra, unsigned flags,
                     rk_codeobj *cubin, rk_buf *ptx, rk_buf *log);

/* ---- hiprtc --------------------------------------------------------------------------------- */
/* hiprtc is found as $ROPEKV_HIPRTC, else libhiprtc.so, .so.7, .so.6 (ROCm >= 6), else
 * libamdhip64.so, .so.5 (ROCm 5 carries hiprtc inside the HIP runtime), else the same under /opt/rocm/lib.
 * The version is the ROCm release of that library, read from its file name
 * (libamdhip64.so.5.2.21153 -> 5.2): hiprtcVersion() answers 9.0 on every release. Where the file
 * name carries none, $ROPEKV_HIPRTC_VERSION ("6.2") tells it, else 5.0 (the narrowest allow-list). */
int rk_hiprtc_available(int *major, int *minor, char *why, size_t cap);
/* 1 when this hiprtc version can compile target (a full target id like "gfx90a:xnack-"); else 0
 * with the reason (e.g. ROCm 5.2's comgr aborts the process on gfx942 and newer, and on feature
 * suffixes a processor does not have). An allow-list: a target not known to compile is refused.
 *   ROCm 5:    gfx600..gfx90c, gfx1010..gfx1036
 *   ROCm 6:    + gfx940/941/942, gfx1100..1103, gfx1150/1151, gfx1200/1201; gfx950 from 6.2
 *   ROCm >= 7: + gfx1250, - gfx940/941 (dropped by LLVM 20)
 * Feature suffixes: :sramecc+/- and :xnack+/- only where the processor has the feature (each at most
 * once). Pure function of its arguments. */
int rk_hiprtc_supports(int major, int minor, const char *target, char *why, size_t cap);
/* Options: --offload-arch=<target> -O3 -ffp-contract=off -std=c++17 plus extra (space separated,
 * may be NULL; an extra option naming an architecture is refused). Output: a raw AMDGPU ELF code
 * object. The compiler's log is appended to log (may be NULL).
 * Refuses (ROPEKV_ERR_TARGET, reason in log) a target rk_hiprtc_supports rejects before calling the
 * compiler. Else ROPEKV_OK, ROPEKV_ERR_COMPILE (log says why), ROPEKV_ERR_IO (hiprtc missing) or ROPEKV_ERR_NOMEM. */
int rk_hiprtc_compile(const char *src, size_t len, const char *target, const char *extra, rk_codeobj *out, rk_buf *log);

#endif
