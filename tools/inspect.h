/* The static facts of a compile, read by the tools from what the compilers hand back: the AMDGPU code
 * object's metadata note (amdgpu_meta.h) and disassembly (llvm-objdump), ptxas's verbose report in the
 * nvrtc log and the PTX, and the ELF's machine-code sections. The library itself never reads them. */
#ifndef RK_INSPECT_H
#define RK_INSPECT_H

#include <stddef.h>

#include "compilers.h"
#include "rk.h"

/* What a compile produced besides the code object. -1 where a figure is not known.
 * A compile reports the whole source (each emitted source holds two kernels, <name> and
 * <name>_i64): the largest figure of any kernel for regs/sgprs/scratch/spills/lds, the machine
 * code of all kernels for code_size, and fp8_cvt when any kernel has the instruction.
 * rk_amd_inspect with a kernel name reports that one kernel. */
typedef struct rk_compile_info {
    double ms;          /* wall time of the compile */
    int regs;           /* NVIDIA: registers per thread; AMD: VGPRs (.vgpr_count, which already
                            * counts the AGPRs: aligned sum on gfx90a/gfx94x/gfx950, max elsewhere) */
    int sgprs;          /* AMD only */
    int scratch;        /* bytes of private/stack memory per thread */
    int spills;         /* spill stores (NVIDIA) or VGPR+SGPR spill count (AMD) */
    int lds;            /* bytes of shared memory */
    int code_size;      /* bytes of machine code (.text) */
    int fp8_cvt;        /* 1: the hardware fp8 conversion instruction is present */
    char compiler[128]; /* identity and version, e.g. "nvrtc 13.0", "hiprtc 5.2", "clang 22.1.8" */
} rk_compile_info;

/* Sets every figure of info to -1 and compiler to "" (NULL is fine). */
void rk_info_reset(rk_compile_info *info);

/* Compiles src for target with cc (RK_CC_NVRTC, RK_CC_HIPRTC or RK_CC_CLANG; the host compiler is
 * rk_build_one's) exactly as the compiler's driver does (extra: its extra options, may be NULL), and
 * fills info (may be NULL) with the compile's wall time, the compiler's identity and the figures:
 *   NVIDIA  --ptxas-options=-v is added and its report read from the log (regs, scratch, spills,
 *           lds); code_size is the CUBIN's .text sections; fp8_cvt looks for
 *           cvt.rn.satfinite.e4m3x2.f32 in the PTX of the same compile;
 *   AMD     rk_amd_inspect of the whole code object (fp8_cvt stays -1 without llvm-objdump).
 * text (may be NULL) receives the code as text: the PTX (NVIDIA), `llvm-objdump -d` (AMD; what the
 * llvm tools said when they failed). info->fp8_cvt is 0 or 1 exactly when the code was read, so
 * then text is the code. The compiler's log is appended to log (may be NULL).
 * Returns the driver's status (ROPEKV_ERR_TARGET for another cc). */
int rk_compile_inspect(rk_compiler cc, const char *src, size_t len, const char *target, const char *extra,
                       rk_codeobj *out, rk_compile_info *info, rk_buf *text, rk_buf *log);

/* Fills regs/sgprs/scratch/spills/lds/code_size/fp8_cvt of info from an AMDGPU code object (an ELF or
 * a clang offload bundle): the figures from its metadata note and symbol table (amdgpu_meta.h),
 * fp8_cvt from its disassembly (llvm-objdump, $ROPEKV_LLVM_SUFFIX or -22).
 * kernel: the kernel's name ("<name>" and "<name>_i64" are different kernels); NULL reports the
 * whole code object (largest figures, all of .text, fp8_cvt if any kernel has v_cvt_pk_fp8_f32).
 * code_size is the kernel's symbol size (all of .text for NULL). ms and compiler are left alone.
 * disasm (may be NULL) receives the whole `llvm-objdump -d` output.
 * ROPEKV_OK; ROPEKV_ERR_COMPILE when the kernel is not in the code object's metadata (info untouched);
 * ROPEKV_ERR_IO when the code object cannot be read (info untouched, the reason in disasm) or llvm-objdump
 * cannot be run or fails (the metadata figures are filled, fp8_cvt is -1, its output is in disasm). */
int rk_amd_inspect(const rk_codeobj *co, const char *kernel, rk_compile_info *info, rk_buf *disasm);

/* Folds every function's "Used N registers", "N bytes stack frame, N bytes spill stores" and
 * "N bytes smem" of a ptxas -v report (lines starting with "ptxas" in log) into regs, scratch,
 * spills and lds of info: the largest of each over all functions (lds 0 when registers were
 * reported and smem was not). */
void rk_ptxas_report(const char *log, rk_compile_info *info);

/* Bytes of machine code (.text and .text.* sections) of an ELF64 image; -1 if it is not one. */
int rk_elf_text_size(const unsigned char *p, size_t n);

#endif
