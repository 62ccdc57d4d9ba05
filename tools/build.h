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

/* ---- the AMD ISA review ----------------------------------------------------------------------- */
/* What the disassembly of an AMD code object shows, per kernel: a code object holds <name> and
 * <name>_i64, and each figure is the worse of the two. -1: not scanned.
 *   wide        16-byte global loads and stores (global_load_dwordx4 / global_store_dwordx4 on gfx9,
 *               global_load_b128 / global_store_b128 on gfx11 and gfx12; buffer_ and flat_ alike)
 *   narrow      narrower global loads and stores (dword, dwordx2, b32, ubyte, ...)
 *   split       the narrow accesses that are pieces of a split 16-byte chunk: two or more loads (or two
 *               or more stores) through the same address operands (vaddr and saddr / off, as written),
 *               with no write to those registers between them, whose byte ranges [offset, offset +
 *               width) are adjacent or overlap (the same range twice is one piece, e.g. a store on two
 *               paths) and lie in one 16-byte window [16k, 16k + 16) of offsets. A dword store at offset 0
 *               and a dwordx3 store at offset 4 of v[8:9] are a split 16-byte store: 2.
 *   waits       waits for vector-memory loads: s_waitcnt with vmcnt (gfx9, gfx11), s_wait_loadcnt
 *               and s_wait_loadcnt_dscnt (gfx12)
 *   load_waits  the waits among those that sit between two global loads: the global access before the
 *               wait and the one after it (in program order) are both loads, so the second load is not
 *               issued until the first has returned. A lane's independent loads issued back to back
 *               have none between them; a load whose address needs the one before (a row's slot, then
 *               the row) needs one, so the baseline holds the count the kernel needs today.
 *   free_waits  the load_waits whose later load neither depends on a loaded value nor starts another
 *               exec region (the ideal is 0). A wait W between loads L1 ... W ... L2 is
 *                 region crossing  when an instruction between W and L2 writes exec (exec, exec_lo or
 *                                  exec_hi as its first operand, a *saveexec*, a v_cmpx*), branches
 *                                  (s_branch, s_cbranch_*, s_setpc / s_swappc / s_call, s_endpgm) or
 *                                  is a label line ("<L0>:"): L2 is the first load of another side of
 *                                  a branch, which a wave that runs one side does not reach after W;
 *                 dependent        else when a register of L2's address operands is tainted: a global
 *                                  load taints its data registers, any other instruction gives its
 *                                  destinations (the first operand; also the second, the carry-out,
 *                                  of *_co_* / v_mad_u64_u32 / v_mad_i64_i32 / v_div_scale forms)
 *                                  the taint of its sources (all other operands; SCC for s_cselect,
 *                                  s_addc, s_subb, s_cmov, written by SALU instructions and
 *                                  s_cmp), so a source-free overwrite clears it; scalar loads
 *                                  (s_load_*, s_buffer_load_*: kernel arguments) clear it. The
 *                                  listing is read in order, as one path (a taint of another path is
 *                                  kept: dependent can only be overcounted);
 *                 free             otherwise: a wait between two independent loads.
 *   occupancy   waves per SIMD that the kernel's VGPR count allows (rk_isa_occupancy) */
typedef struct rk_isa {
    int wide, narrow, split, waits, load_waits, free_waits, occupancy;
} rk_isa;

/* Every figure not known. */
#define RK_ISA_UNKNOWN ((rk_isa){-1, -1, -1, -1, -1, -1, -1})

/* Waves per SIMD a kernel of `vgprs` VGPRs (AGPRs included, as .vgpr_count counts them) can keep
 * resident on AMD target `target` ("gfx942"); -1 for an unknown target or vgprs < 0. */
int rk_isa_occupancy(const char *target, int vgprs);

/* Fills wide, narrow, split, waits, load_waits and free_waits of out from `llvm-objdump -d` text (occupancy is
 * left alone); every figure -1 when the text holds no kernel, holds an instruction too long to read
 * (more than 511 characters before its "//" comment, or a global access whose address operands do not
 * fit the record that split and free_waits read them into) or memory ran out. */
void rk_isa_scan(const char *disasm, rk_isa *out);

/* What one build produced. Figures that are not known are -1 (host builds report only ms and
 * code_size; AMD figures need the llvm-22 tools). */
typedef struct rk_build_result {
    int state;      /* 0 not started, 1 running, 2 done */
    int rc;         /* ROPEKV_OK, else the compile's error code (log says why) */
    rk_compiler cc; /* the compiler used */
    rk_compile_info info;
    int bf16_cvt; /* 1/0: the hardware f32 -> bf16 conversion is present (AMD
                              * v_cvt_pk_bf16_f32, NVIDIA cvt.rn.bf16x2.f32); -1: not scanned */
    int e2m1_cvt; /* 1/0: the hardware f32 -> e2m1 conversion is present (NVIDIA PTX
                              * cvt.rn.satfinite.e2m1x2.f32, AMD v_cvt_scalef32_pk_fp4_f32); -1: not scanned */
    int pdl_gate; /* NVIDIA PTX: 0 no griddepcontrol.wait; 1 every entry has a wait before
                              * its first global store; 2 an entry stores first (a defect for rows
                              * with pdl); 3 it waits but reads through ld.global.nc, which ptxas
                              * may move above the wait (a defect); -1: not scanned */
    int abi;      /* the launch ABI check of an AMD code object (abi.h): 1 passed, 0 failed
                              * (abi_why says why), -1 not an AMD build or not compiled */
    char abi_why[256];
    rk_isa isa;             /* AMD with RK_BUILD_SCAN: the ISA review's figures (rk_isa_scan) */
    int pid;                /* worker process that ran it */
    char log[RK_BUILD_LOG]; /* the compiler's log (NUL-terminated, possibly cut) */
} rk_build_result;

/* rk_build_one flags */
enum {
    RK_BUILD_SCAN = 1, /* also scan the disassembly (AMD) or PTX (NVIDIA) for bf16_cvt, pdl_gate, isa */
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

/* The public variant of a description: its spec's name and its choices (what a caller passes to
 * ropekv_kernel_get for the same kernel); a record of the spec's by its name, which points into d. */
ropekv_variant rk_variant_of(const rk_desc *d);

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

/* The hardware f32 -> e2m1 conversion as the disassembly of a vendor's code spells it (e2m1_cvt scans for it):
 * NVIDIA PTX cvt.rn.satfinite.e2m1x2.f32, AMD v_cvt_scalef32_pk_fp4_f32. */
const char *rk_build_e2m1_insn(rk_vendor v);

/* Per target: items built, failures, largest regs / sgprs / scratch / spills, total compile ms. */
void rk_build_summary(FILE *f, const rk_build_item *items, const rk_build_result *res, int n);

/* A line of the baseline (tests/golden/isa_amd.txt): one kernel's figures on one target, the worst
 * that kernel may show. A kernel regresses when any figure is worse than its line's: more vgprs,
 * sgprs, narrow, split, waits, load_waits or free_waits, or a lower occupancy. */
typedef struct rk_isa_limit {
    char target[RK_NAME_MAX];
    char kernel[sizeof((rk_desc *)0)->name];
    int vgprs, sgprs, occupancy, narrow, split, waits, load_waits, free_waits;
} rk_isa_limit;

/* The figures of a baseline line, in the file's column order: the one list that the file's header,
 * rk_isa_limit_print, rk_isa_limits_parse and rk_isa_regressions use. */
typedef struct rk_isa_figure {
    const char *name;   /* the column ("vgprs") */
    size_t at;          /* offsetof(rk_isa_limit, the field) */
    int fewer_is_worse; /* 1: a lower value regresses (occupancy); 0: a higher one */
    const char *means;  /* one line for the file's header */
} rk_isa_figure;
#define RK_ISA_FIGURES 8
extern const rk_isa_figure rk_isa_figures[RK_ISA_FIGURES];

/* The baseline file's text: "# ..." comments, then one line per (target, kernel):
 *   target kernel vgprs sgprs occupancy narrow split waits load_waits free_waits
 * sorted by target (specs/archs.lua's order), then by kernel name. */

/* "#   vgprs       ...\n" for each figure, then "# target kernel vgprs ... free_waits\n". */
void rk_isa_limit_header(FILE *f);
/* The line of a successful AMD build r scanned with RK_BUILD_SCAN: its figures as they are. */
void rk_isa_limit_of(rk_isa_limit *l, const char *target, const char *kernel, const rk_build_result *r);
/* "target kernel vgprs sgprs occupancy narrow split waits load_waits free_waits\n" */
void rk_isa_limit_print(FILE *f, const rk_isa_limit *l);
/* Parses a baseline file's text into out (at most cap lines). Returns the count, or -1 with why
 * naming the line that is not "target kernel" followed by RK_ISA_FIGURES non-negative integers, a
 * second line for one (target, kernel), or the first line past cap. */
int rk_isa_limits_parse(const char *text, rk_isa_limit *out, int cap, char *why, size_t why_cap);
/* The line of (target, kernel) in limits, or NULL. */
const rk_isa_limit *rk_isa_limit_find(const rk_isa_limit *limits, int n, const char *target, const char *kernel);
/* Compares a scanned AMD build with its kernel's line: the number of figures past the line (or not
 * known), each one named in why ("vgprs 40 > 36; ..."). */
int rk_isa_regressions(const rk_build_result *r, const rk_isa_limit *l, char *why, size_t cap);

#endif
