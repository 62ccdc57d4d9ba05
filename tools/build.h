/* The build matrix: every variant compiled with the compiler its target uses, in worker processes,
 * with the static figures each compile reports (registers, scratch, spills, code size, hardware
 * conversions). Used by `ropekv-gen build` / `ropekv-gen inspect` and by tests/test_matrix.c. */
#ifndef RK_BUILD_H
#define RK_BUILD_H

#include <stdio.h>

#include "inspect.h"
#include "rk.h"

/* Bytes of compiler log kept per result (the start of the log; a longer log ends in "..."). */
#define RK_BUILD_LOG 12288

/* The compiler a target is built with:
 *   AMD:    hiprtc when the local hiprtc loads and its release can build the target
 *           (rk_hiprtc_supports), else clang (offline);
 *   NVIDIA: nvrtc;  host: the host C++ compiler (rk_host_build). */
rk_compiler rk_build_pick(const rk_arch *a);

/* What one build produced. Figures that are not known are -1 (host builds report only ms and
 * code_size; AMD figures need the llvm-22 tools). */
typedef struct rk_build_result {
    int state;      /* 0 not started, 1 running, 2 done */
    int rc;         /* ROPEKV_OK, else the compile's error code (log says why) */
    rk_compiler cc; /* the compiler used */
    rk_compile_info info;
    int bf16_cvt; /* 1/0: the hardware f32 -> bf16 conversion is present (AMD
                              * v_cvt_pk_bf16_f32, NVIDIA cvt.rn.bf16x2.f32); -1: not scanned */
    int pdl_gate; /* NVIDIA PTX: 0 no griddepcontrol.wait; 1 every entry has a wait before
                              * its first global store; 2 an entry stores first (a defect for rows
                              * with pdl); 3 it waits but reads through ld.global.nc, which ptxas
                              * may move above the wait (a defect); -1: not scanned */
    int abi;      /* the launch ABI check of an AMD code object (abi.h): 1 passed, 0 failed
                              * (abi_why says why), -1 not an AMD build or not compiled */
    char abi_why[256];
    int pid;                /* worker process that ran it */
    char log[RK_BUILD_LOG]; /* the compiler's log (NUL-terminated, possibly cut) */
} rk_build_result;

/* rk_build_one flags */
enum {
    RK_BUILD_SCAN = 1, /* also scan the disassembly (AMD) or PTX (NVIDIA) for bf16_cvt, pdl_gate */
};

/* Optional outputs of rk_build_one, for inspection (each may be NULL). */
typedef struct rk_build_outputs {
    rk_codeobj *code; /* the code object (AMD ELF, CUBIN, host shared object bytes) */
    rk_buf *disasm;   /* AMD: llvm-objdump -d; NVIDIA: the PTX; host: objdump -d */
    rk_buf *sass;     /* NVIDIA only: cuobjdump -sass (or nvdisasm) of the CUBIN, when on PATH */
    rk_buf *log;      /* the whole compiler log (r->log keeps only its start) */
} rk_build_outputs;

/* Emits v and compiles it with cc for v->arch, filling r (always: r->state is set to 2).
 * Returns r->rc. */
int rk_build_one(const rk_desc *v, rk_compiler cc, unsigned flags, rk_build_result *r, const rk_build_outputs *out);

/* One entry of a matrix. */
typedef struct rk_build_item {
    rk_desc v;
    rk_compiler cc;
    unsigned flags;
} rk_build_item;

/* Every variant shape (spec, kv, q, positions, slots) of every spec in cat, built for target
 * whatever the spec's own target list says (v.arch = target, then rk_desc_finish), in
 * rk_variants order. Returns the count, or -1 when cap is too small. */
int rk_build_retarget(const rk_catalog *cat, const rk_arch *target, rk_desc *out, int cap);

/* Builds every item in a pool of `jobs` worker processes (tools/pool.h; < 1: the number of online
 * CPUs), each taking the next unbuilt item. A worker that dies (e.g. a compiler aborting the
 * process) fails the item it was on and is replaced. progress (may be NULL) gets one line per
 * finished item: "[k/n] key compiler ms" or "[k/n] key compiler FAILED". res receives one result per
 * item, in order. Returns the number of failed items, or -1 when the workers could not be started
 * (errno). */
int rk_build_matrix(const rk_build_item *items, int n, int jobs, FILE *progress, rk_build_result *res);

/* The table: a header, then one row per result; rows are
 *   key, target, compiler, ms, regs (AMD vgprs/sgprs, NVIDIA registers), scratch, spills,
 *   code bytes, fp8 hardware conversion (yes/no, "-" for a bf16 cache), bf16 hardware conversion
 *   (yes/no, "-" when not scanned). */
void rk_build_table_header(FILE *f);
void rk_build_table_row(FILE *f, const rk_desc *v, const rk_build_result *r);

/* 1 when the result breaks a strict rule: scratch or spills above 0 (or not known), an fp8
 * variant on a target with arch->fp8_hw lacking the hardware fp8 conversion, or an AMD code
 * object failing the launch ABI check (abi 0). why says which. */
int rk_build_strict_violation(const rk_desc *v, const rk_build_result *r, char *why, size_t cap);

/* Per target: items built, failures, largest regs / sgprs / scratch / spills, total compile ms. */
void rk_build_summary(FILE *f, const rk_build_item *items, const rk_build_result *res, int n);

#endif
