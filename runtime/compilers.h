/* The device compilers ropekv drives, each loaded at run time so a build never requires them:
 *   nvrtc   (libnvrtc.so.*, dlopen)          HIP-as-CUDA source -> CUBIN for sm_XY
 *   hiprtc  (libhiprtc.so.* / libamdhip64)   -> AMDGPU code object, guarded by an allow-list
 *   clang   (clang++-22 subprocess, offline) -> AMDGPU code object for every AMD target
 * and the static facts read from their output (registers, scratch, spills, code size).
 *
 * Every function is thread-safe. The only process-wide state is the libraries and tool paths found
 * once (pthread_once) and kept for the life of the process. */
#ifndef RK_COMPILERS_H
#define RK_COMPILERS_H

#include <stddef.h>

#include "rk.h"

/* A compiled code object (CUBIN or AMDGPU ELF). Named rk_codeobj: ropekv_status is the error-code enum
 * of rk.h, and C shares one tag namespace between enums and structs. */
typedef struct rk_codeobj {
    unsigned char *data;   /* malloc'd code object */
    size_t len;
} rk_codeobj;

/* What a compile produced besides the code object. -1 where a figure is not known.
 * A compile reports the whole source (each emitted source holds two kernels, <name> and
 * <name>_i64): the largest figure of any kernel for regs/sgprs/scratch/spills/lds, the machine
 * code of all kernels for code_size, and fp8_cvt when any kernel has the instruction.
 * rk_amd_inspect with a kernel name reports that one kernel. */
typedef struct rk_compile_info {
    double ms;             /* wall time of the compile */
    int regs;              /* NVIDIA: registers per thread; AMD: VGPRs (.vgpr_count, which already
                            * counts the AGPRs: aligned sum on gfx90a/gfx94x/gfx950, max elsewhere) */
    int sgprs;             /* AMD only */
    int scratch;           /* bytes of private/stack memory per thread */
    int spills;            /* spill stores (NVIDIA) or VGPR+SGPR spill count (AMD) */
    int lds;               /* bytes of shared memory */
    int code_size;         /* bytes of machine code (.text) */
    int fp8_cvt;           /* 1: the hardware fp8 conversion instruction is present */
    char compiler[128];    /* identity and version, e.g. "nvrtc 13.0", "hiprtc 5.2", "clang 22.1.8" */
} rk_compile_info;

void rk_code_free(rk_codeobj *c);

/* ---- nvrtc ---------------------------------------------------------------------------------- */
/* libnvrtc is found as $ROPEKV_NVRTC, else libnvrtc.so, .so.13, .so.12, /usr/local/cuda/lib64. */
/* 0 when libnvrtc could be loaded (version filled), else -1 with why. Thread-safe. */
int rk_nvrtc_available(int *major, int *minor, char *why, size_t cap);
/* Compiles src for arch ("sm_90", "sm_90a", "sm_100f": real architectures only) to a CUBIN.
 * Options: -arch=<arch> --std=c++17 --fmad=false plus extra (space separated, may be NULL), and
 * --ptxas-options=-v when info is requested (its report fills regs/scratch/spills/lds; code_size is
 * the size of the CUBIN's .text.* sections; fp8_cvt looks for cvt.rn.satfinite.e4m3x2.f32 in the
 * PTX of the same compile). The log is appended to log (may be NULL). info may be NULL.
 * Returns ROPEKV_OK, ROPEKV_ERR_COMPILE (log says why), ROPEKV_ERR_TARGET (arch malformed or unknown to this nvrtc),
 * ROPEKV_ERR_IO (nvrtc missing) or ROPEKV_ERR_NOMEM. */
int rk_nvrtc_compile(const char *src, size_t len, const char *arch, const char *extra, rk_codeobj *out,
                     rk_compile_info *info, rk_buf *log);
/* The PTX for the same inputs (inspection: fp8 instruction check, `ropekv-gen inspect`). */
int rk_nvrtc_ptx(const char *src, size_t len, const char *arch, const char *extra, rk_buf *ptx, rk_buf *log);

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
 * object. When info is requested, it is filled from the code object as rk_amd_inspect does (the
 * figures stay -1 when the llvm tools are missing).
 * Refuses (ROPEKV_ERR_TARGET, reason in log) a target rk_hiprtc_supports rejects before calling the
 * compiler. Else ROPEKV_OK, ROPEKV_ERR_COMPILE (log says why), ROPEKV_ERR_IO (hiprtc missing) or ROPEKV_ERR_NOMEM. */
int rk_hiprtc_compile(const char *src, size_t len, const char *target, const char *extra, rk_codeobj *out,
                      rk_compile_info *info, rk_buf *log);

/* ---- clang (offline AMD) -------------------------------------------------------------------- */
/* The clang++ used: $ROPEKV_CLANG, else clang++-22, else clang++ (looked up in PATH once). */
const char *rk_clang_path(void);
/* 0 with the first line of `clang++ --version` in version (may be NULL), else -1 with the reason. */
int rk_clang_available(char *version, size_t cap);
/* Runs clang++ -x hip --cuda-device-only --no-gpu-bundle-output --offload-arch=<target> -nogpuinc
 * -nogpulib -O3 -mcode-object-version=5 -ffp-contract=off -std=c++17 plus extra (space separated)
 * on src in a private temporary directory (removed afterwards), no shell involved. The compiler's
 * output is appended to log. info: as for rk_hiprtc_compile; compiler is "clang <version>".
 * ROPEKV_OK, ROPEKV_ERR_COMPILE, ROPEKV_ERR_TARGET (clang does not know the target id), ROPEKV_ERR_IO (no clang, or
 * temporary files failed) or ROPEKV_ERR_NOMEM. */
int rk_clang_compile(const char *src, size_t len, const char *target, const char *extra, rk_codeobj *out,
                     rk_compile_info *info, rk_buf *log);

/* ---- inspection ------------------------------------------------------------------------------ */
/* Fills regs/sgprs/scratch/spills/lds/code_size/fp8_cvt of info from an AMDGPU code object (reads
 * its metadata notes and disassembly with llvm-readelf/llvm-objdump, $ROPEKV_LLVM_SUFFIX or -22).
 * kernel: the kernel's name ("<name>" and "<name>_i64" are different kernels); NULL reports the
 * whole code object (largest figures, all of .text, fp8_cvt if any kernel has v_cvt_pk_fp8_f32).
 * code_size is the kernel's symbol size (all of .text for NULL). ms and compiler are left alone.
 * disasm (may be NULL) receives the whole `llvm-objdump -d` output.
 * ROPEKV_OK; ROPEKV_ERR_COMPILE when the kernel is not in the code object's metadata; ROPEKV_ERR_IO when the tools
 * cannot be run or do not understand the code object (their output, if any, is in disasm). */
/* Bytes of machine code (.text and .text.* sections) of an ELF64 image; -1 if it is not one. */
int rk_elf_text_size(const unsigned char *p, size_t n);

int rk_amd_inspect(const rk_codeobj *co, const char *kernel, rk_compile_info *info, rk_buf *disasm);

/* ---- helpers shared by the drivers (runtime/inspect.c) ---------------------------------------- */
/* Sets every figure of info to -1 and compiler to "". */
void rk_info_reset(rk_compile_info *info);
/* Monotonic clock in milliseconds. */
double rk_now_ms(void);
/* Runs argv[0] (searched in PATH when it has no '/') with argv, no shell, stdin from /dev/null,
 * stdout and stderr appended to out (may be NULL). ROPEKV_OK when it ran to an exit (status in *status:
 * the exit code, or 128 + signal); ROPEKV_ERR_IO when it could not be started (reason in out). */
int rk_run(const char *const argv[], rk_buf *out, int *status);
/* Creates a private (0700) temporary directory under $TMPDIR or /tmp; ROPEKV_OK or ROPEKV_ERR_IO. */
int rk_mktmpdir(char *path, size_t cap);
/* Removes the files directly inside path, then path itself. */
void rk_rmtmpdir(const char *path);
/* Writes n bytes to path (created 0600); ROPEKV_OK or ROPEKV_ERR_IO. */
int rk_write_file(const char *path, const void *p, size_t n);
/* Splits extra at spaces into a NULL-terminated array appended after the n entries already in
 * argv (capacity cap, including the NULL); the strings live in *store (free it). ROPEKV_OK, ROPEKV_ERR_NOMEM,
 * or ROPEKV_ERR_COMPILE when there are too many options. */
int rk_split_options(const char *extra, const char **argv, int n, int cap, char **store, int *count);

#endif
