/* The build matrix: variants -> the compiler of their target -> figures, in worker processes. */
#include "build.h"

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "abi.h"
#include "host_compile.h"
#include "pool.h"

/* ---- choosing the compiler -------------------------------------------------------------------- */
rk_compiler rk_build_pick(const rk_arch *a) {
    switch (a->vendor) {
    case RK_VENDOR_AMD: {
        int major, minor;
        if (rk_hiprtc_available(&major, &minor, NULL, 0) == 0 && rk_hiprtc_supports(major, minor, a->name, NULL, 0))
            return RK_CC_HIPRTC;
        return RK_CC_CLANG;
    }
    case RK_VENDOR_NVIDIA: return RK_CC_NVRTC;
    default: return RK_CC_HOST;
    }
}

/* ---- one build -------------------------------------------------------------------------------- */
/* Copies the start of a log into a fixed buffer, marking a cut. */
static void keep_log(char *dst, size_t cap, const char *src, size_t len) {
    if (!src) len = 0;
    if (len < cap) {
        if (len) memcpy(dst, src, len);
        dst[len] = '\0';
        return;
    }
    static const char cut[] = "\n... (log cut)\n";
    size_t keep = cap - sizeof cut;
    memcpy(dst, src, keep);
    memcpy(dst + keep, cut, sizeof cut);
}

/* SASS of a CUBIN with cuobjdump or nvdisasm (PATH, then /usr/local/cuda/bin); a note when neither runs. */
static void cubin_sass(const rk_codeobj *co, rk_buf *sass) {
    char dir[4096], file[4200];
    if (rk_mktmpdir(dir, sizeof dir, NULL) != ROPEKV_OK) {
        char why[512];
        rk_buf_printf(sass, "(cannot create a temporary directory: %s)\n", rk_tmp_failure(why, sizeof why));
        return;
    }
    snprintf(file, sizeof file, "%s/kernel.cubin", dir);
    if (rk_write_file(file, co->data, co->len) != ROPEKV_OK) {
        rk_buf_printf(sass, "(cannot write %s)\n", file);
        rk_rmtmpdir(dir);
        return;
    }
    const char *tools[][3] = {{"cuobjdump", "-sass", NULL},
                              {"nvdisasm", "-c", NULL},
                              {"/usr/local/cuda/bin/cuobjdump", "-sass", NULL},
                              {"/usr/local/cuda/bin/nvdisasm", "-c", NULL}};
    int done = 0;
    for (size_t t = 0; t < sizeof tools / sizeof tools[0] && !done; t++) {
        const char *argv[] = {tools[t][0], tools[t][1], file, NULL};
        rk_buf out = {0};
        int st = -1;
        if (rk_run(argv, 0, 0, &out, &st) == ROPEKV_OK && st != 127) {
            rk_buf_printf(sass, "$ %s %s kernel.cubin%s\n", argv[0], argv[1], st ? " (failed)" : "");
            if (out.len) rk_buf_put(sass, out.p, out.len);
            done = 1;
        }
        rk_buf_free(&out);
    }
    if (!done) rk_buf_printf(sass, "(no cuobjdump or nvdisasm on PATH or in /usr/local/cuda/bin: no SASS)\n");
    rk_rmtmpdir(dir);
}

static int build_host(const rk_desc *v, const rk_buf *src, rk_build_result *r, const rk_build_outputs *out,
                      rk_buf *log) {
    char dir[4096], so[4400];
    if (rk_mktmpdir(dir, sizeof dir, NULL) != ROPEKV_OK) {
        char why[512];
        rk_buf_printf(log, "host: cannot create a temporary directory: %s\n", rk_tmp_failure(why, sizeof why));
        return ROPEKV_ERR_IO;
    }
    char *clog = malloc(RK_BUILD_LOG);
    if (!clog) {
        rk_rmtmpdir(dir);
        return ROPEKV_ERR_NOMEM;
    }
    rk_host_kernel k;
    rk_codeobj co = {0};
    double t0 = rk_now_ms();
    int rc = rk_host_build(src->p, src->len, v->name, dir, &k, &co, clog, RK_BUILD_LOG);
    r->info.ms = rk_now_ms() - t0;
    snprintf(r->info.compiler, sizeof r->info.compiler, "%s", rk_host_compiler());
    rk_buf_printf(log, "%s", clog);
    free(clog);
    if (rc == ROPEKV_OK) {
        rk_host_unload(&k);
        snprintf(so, sizeof so, "%s/%s.so", dir, v->name);
        r->info.code_size = rk_elf_text_size(co.data, co.len); /* the bytes that were loaded */
        if (out && out->code) *out->code = co;
        else rk_code_free(&co);
        if (out && out->disasm) {
            const char *argv[] = {"objdump", "-d", "--no-show-raw-insn", so, NULL};
            int st = -1;
            if (rk_run(argv, 0, 0, out->disasm, &st) != ROPEKV_OK || st != 0)
                rk_buf_printf(out->disasm, "(objdump -d failed, status %d)\n", st);
        }
    }
    rk_rmtmpdir(dir);
    return rc;
}

/* pdl_gate of a PTX text: per .entry, does a griddepcontrol.wait come before the first st.global?
 * (Loads may precede it: with args.prefetch the static inputs are read before the wait.) A kernel that
 * waits must not use ld.global.nc either: ptxas moves those loads above the wait. */
static int pdl_gate(const char *ptx) {
    int waits = 0, early = 0;
    for (const char *e = strstr(ptx, ".entry "); e; e = strstr(e + 1, ".entry ")) {
        const char *next = strstr(e + 1, ".entry ");
        const char *wait = strstr(e, "griddepcontrol.wait");
        const char *first = strstr(e, "st.global");
        if (wait && next && wait > next) wait = NULL;
        if (first && next && first > next) first = NULL;
        if (wait) waits++;
        if (wait && first && first < wait) early++;
        if (!wait && waits) early++;
    }
    return early ? 2 : waits && strstr(ptx, "ld.global.nc") ? 3 : waits ? 1 : 0;
}

/* The launch ABI check of an AMD code object into r->abi and r->abi_why. */
static void abi_check(const rk_desc *v, const rk_codeobj *co, rk_build_result *r) {
    rk_amd_code *c = malloc(sizeof *c);
    r->abi = 0;
    if (!c) snprintf(r->abi_why, sizeof r->abi_why, "out of memory for the code object's metadata");
    else if (rk_amd_read(co->data, co->len, c, r->abi_why, sizeof r->abi_why) == 0)
        r->abi = rk_amd_abi_check(c, v, r->abi_why, sizeof r->abi_why);
    free(c);
}

/* ---- the AMD ISA review ----------------------------------------------------------------------- */
/* The VGPR file of each AMD target, as LLVM's AMDGPU backend models it (AMDGPUBaseInfo.cpp:
 * getTotalNumVGPRs, getVGPRAllocGranule, getMaxWavesPerEU; the VGPR count is .vgpr_count of
 * AMDGPUUsage's code object metadata, AGPRs included):
 *   gfx90a, gfx942, gfx950  512 VGPRs per lane for a SIMD's wave64s (the unified VGPR+AGPR file of
 *                           FeatureGFX90AInsts), allocated in granules of 8, at most 8 waves;
 *   gfx1100, gfx1201        1536 per lane for wave32 (Feature1_5xVGPRs: a 192 KiB file), granules of
 *                           24, at most 16 waves;
 *   gfx1250                 1024 per lane for wave32 (Feature1024AddressableVGPRs), granules of 16,
 *                           at most 16 waves.
 * waves = min(max waves, total / round_up(vgprs, granule)) (getNumWavesPerEUWithNumVGPRs); llc-22's
 * "; Occupancy" comment agrees for each row at 24 to 200 VGPRs. SGPRs do not limit these kernels:
 * gfx10+ gives every wave its 106, and on gfx9 the 800-SGPR file holds 8 waves of up to 96 + VCC. */
static const struct {
    const char *target;
    int total, granule, max_waves;
} vgpr_files[] = {
    {"gfx90a", 512, 8, 8},     {"gfx942", 512, 8, 8},     {"gfx950", 512, 8, 8},
    {"gfx1100", 1536, 24, 16}, {"gfx1201", 1536, 24, 16}, {"gfx1250", 1024, 16, 16},
};

int rk_isa_occupancy(const char *target, int vgprs) {
    for (size_t i = 0; target && vgprs >= 0 && i < sizeof vgpr_files / sizeof vgpr_files[0]; i++) {
        if (strcmp(vgpr_files[i].target, target) != 0) continue;
        const int g = vgpr_files[i].granule, rounded = (vgprs + g - 1) / g * g;
        const int waves = rounded ? vgpr_files[i].total / rounded : vgpr_files[i].max_waves;
        return waves < 1 ? 1 : waves > vgpr_files[i].max_waves ? vgpr_files[i].max_waves : waves;
    }
    return -1;
}

static int starts(const char *s, const char *prefix) { return strncmp(s, prefix, strlen(prefix)) == 0; }

/* The figures of one kernel, folded into out (the worse of each). */
static void isa_fold(rk_isa *out, const rk_isa *k) {
    if (k->wide > out->wide) out->wide = k->wide;
    if (k->narrow > out->narrow) out->narrow = k->narrow;
    if (k->split > out->split) out->split = k->split;
    if (k->waits > out->waits) out->waits = k->waits;
    if (k->load_waits > out->load_waits) out->load_waits = k->load_waits;
    if (k->free_waits > out->free_waits) out->free_waits = k->free_waits;
}

/* The bytes one global access moves, from a part of its mnemonic ("global_load_dwordx2" 8,
 * "global_store_b32" 4, "global_load_ubyte_d16_hi" 1, "global_load_d16_hi_b16" 2); 0 when no part
 * names a width. */
static int access_width(const char *mnem) {
    static const struct {
        const char *part;
        int bytes;
    } widths[] = {{"dwordx4", 16}, {"b128", 16}, {"dwordx3", 12}, {"b96", 12},  {"dwordx2", 8},
                  {"b64", 8},      {"dword", 4}, {"b32", 4},      {"short", 2}, {"ushort", 2},
                  {"sshort", 2},   {"b16", 2},   {"u16", 2},      {"i16", 2},   {"byte", 1},
                  {"ubyte", 1},    {"sbyte", 1}, {"b8", 1},       {"u8", 1},    {"i8", 1}};
    for (const char *p = strchr(mnem, '_'); p; p = strchr(p + 1, '_')) {
        const size_t n = strcspn(p + 1, "_");
        for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++)
            if (strlen(widths[i].part) == n && !strncmp(p + 1, widths[i].part, n)) return widths[i].bytes;
    }
    return 0;
}

/* A register operand ("v5", "v[4:5]", "s[8:9]", "a[0:3]"): its file and first and last register;
 * 0 when t (n characters) is not one. */
typedef struct isa_regs {
    char file;
    long lo, hi;
} isa_regs;

static int reg_range(const char *t, size_t n, isa_regs *r) {
    if (n < 2 || (t[0] != 'v' && t[0] != 's' && t[0] != 'a')) return 0;
    char buf[32], *end;
    if (n >= sizeof buf) return 0;
    memcpy(buf, t, n);
    buf[n] = '\0';
    r->file = buf[0];
    if (buf[1] == '[') {
        r->lo = strtol(buf + 2, &end, 10);
        if (end == buf + 2 || *end != ':') return 0;
        const char *h = end + 1;
        r->hi = strtol(h, &end, 10);
        return end != h && end[0] == ']' && end[1] == '\0' && r->hi >= r->lo;
    }
    if (buf[1] < '0' || buf[1] > '9') return 0;
    r->lo = r->hi = strtol(buf + 1, &end, 10);
    return *end == '\0';
}

static int regs_overlap(const isa_regs *a, const isa_regs *b) {
    return a->file == b->file && a->lo <= b->hi && b->lo <= a->hi;
}

/* One narrow global access of a kernel, for split: its address operands as written ("v[8:9] off"),
 * their registers, and its bytes [off, off + width). */
typedef struct isa_access {
    char kind; /* 'l' load, 's' store */
    char addr[96];
    isa_regs reg[4];
    int n_reg;
    long off;
    int width;
    int open;  /* no write to its address registers since */
    int split; /* a piece of a split 16-byte chunk */
} isa_access;

static long floor16(long v) { return v >= 0 ? v / 16 : -((-v + 15) / 16); }

/* Two pieces of one split 16-byte chunk: adjacent or overlapping, not the same range, one window. */
static int split_pair(const isa_access *a, const isa_access *b) {
    if (a->off == b->off && a->width == b->width) return 0;
    if (a->off > b->off + b->width || b->off > a->off + a->width) return 0;
    const long w = floor16(a->off);
    return floor16(a->off + a->width - 1) == w && floor16(b->off) == w && floor16(b->off + b->width - 1) == w;
}

/* An instruction's operand text (after the mnemonic, before any "//"), split at commas: the first word of
 * operand i, or NULL past the last. n gets its length. */
static const char *operand(const char *ops, int i, size_t *n) {
    const char *p = ops;
    for (int k = 0; k < i; k++) {
        p = strchr(p, ',');
        if (!p) return NULL;
        p++;
    }
    p += strspn(p, " \t");
    *n = strcspn(p, " \t,");
    return *n ? p : NULL;
}

/* "offset:N" (decimal, or 0x hex, may be negative) among the operands; 0 when absent. */
static long access_offset(const char *ops) {
    for (const char *p = strstr(ops, "offset:"); p; p = strstr(p + 1, "offset:"))
        if (p == ops || p[-1] == ' ' || p[-1] == '\t') return strtol(p + 7, NULL, 0);
    return 0;
}

/* The global access `mnem ops` as a record (split keeps the narrow ones; free_waits reads a load's address
 * registers): 0 when its address operands do not fit, more than 94 characters or 3 registers (the scan then
 * reports nothing). The data
 * operand is left out of the address: the first for loads and buffer_ stores, the second for global_ and
 * flat_ stores; a load to LDS (global_load_lds_dword) has none. */
static int access_of(const char *mnem, const char *ops, int load, int width, isa_access *a) {
    memset(a, 0, sizeof *a);
    a->kind = load ? 'l' : 's';
    a->width = width;
    a->off = access_offset(ops);
    a->open = 1;
    const int data = strstr(mnem, "_lds") ? -1 : load || starts(mnem, "buffer_") ? 0 : 1;
    size_t w = 0, n;
    const char *t;
    for (int i = 0; (t = operand(ops, i, &n)) != NULL; i++) {
        if (i == data) continue;
        if (w + n + 2 > sizeof a->addr) return 0;
        memcpy(a->addr + w, t, n);
        w += n;
        a->addr[w++] = ' ';
        a->addr[w] = '\0';
        if (!reg_range(t, n, &a->reg[a->n_reg])) continue;
        if (++a->n_reg == (int)(sizeof a->reg / sizeof a->reg[0])) return 0;
    }
    return 1;
}

/* The scan of one kernel's narrow accesses for split. */
typedef struct split_scan {
    isa_access *a;
    int n, cap;
} split_scan;

/* Adds a narrow access, marking it and every open access of its kind and address it pairs with. */
static int split_add(split_scan *s, const isa_access *x) {
    if (s->n == s->cap) {
        const int cap = s->cap ? s->cap * 2 : 64;
        isa_access *a = realloc(s->a, sizeof *a * (size_t)cap);
        if (!a) return -1;
        s->a = a, s->cap = cap;
    }
    isa_access *y = &s->a[s->n++];
    *y = *x;
    for (int i = 0; i < s->n - 1; i++) {
        isa_access *o = &s->a[i];
        if (!o->open || o->kind != y->kind || strcmp(o->addr, y->addr) != 0 || !split_pair(o, y)) continue;
        o->split = y->split = 1;
    }
    return 0;
}

/* An instruction wrote the register operand t (n characters): accesses through it are closed. */
static void split_written(split_scan *s, const char *t, size_t n) {
    isa_regs w;
    if (!t || !reg_range(t, n, &w)) return;
    for (int i = 0; i < s->n; i++)
        for (int r = 0; r < s->a[i].n_reg && s->a[i].open; r++)
            if (regs_overlap(&s->a[i].reg[r], &w)) s->a[i].open = 0;
}

static int split_count(const split_scan *s) {
    int n = 0;
    for (int i = 0; i < s->n; i++) n += s->a[i].split;
    return n;
}

/* An instruction that writes no register through its first operand: a store (its first operand is
 * an address or data). Any other instruction is taken to write its first operand (a compare's first
 * operand is a source, so an access is closed early: split can only be undercounted). */
static int writes_no_first(const char *mnem) {
    return strstr(mnem, "_store") || strstr(mnem, "_write") || !strcmp(mnem, "s_nop") || starts(mnem, "s_wait") ||
           starts(mnem, "s_cbranch") || starts(mnem, "s_branch");
}

/* A vector-memory load from global memory (global_, buffer_ or flat_). */
static int global_load(const char *mnem) {
    return starts(mnem, "global_load") || starts(mnem, "buffer_load") || starts(mnem, "flat_load");
}

/* ---- free_waits: the registers that hold a value a global load brought ---------------------------- */
/* One flag per register: v0..v1023, a0..a1023, s0..s255; the special registers by their operand
 * numbers (vcc s106:107, m0 s124, exec s126:127) and SCC, which no operand names, as s253. */
typedef struct isa_taint {
    unsigned char v[1024], a[1024], s[256];
} isa_taint;

enum { ISA_SCC = 253 };

/* A register operand for the taint: what reg_range reads, or a named special register, without a
 * source's modifiers ("-v1", "|v1|", "-|v[2:3]|"); 0 when t (n characters) is neither. */
static int taint_reg(const char *t, size_t n, isa_regs *r) {
    static const struct {
        const char *name;
        long lo, hi;
    } named[] = {{"vcc", 106, 107},  {"vcc_lo", 106, 106},  {"vcc_hi", 107, 107}, {"m0", 124, 124},
                 {"exec", 126, 127}, {"exec_lo", 126, 126}, {"exec_hi", 127, 127}};
    while (n && (*t == '-' || *t == '|')) t++, n--;
    while (n && t[n - 1] == '|') n--;
    for (size_t i = 0; i < sizeof named / sizeof named[0]; i++)
        if (strlen(named[i].name) == n && !strncmp(t, named[i].name, n)) {
            r->file = 's', r->lo = named[i].lo, r->hi = named[i].hi;
            return 1;
        }
    return reg_range(t, n, r);
}

/* The flag of register i of a file; NULL past the file. */
static unsigned char *taint_cell(isa_taint *t, char file, long i) {
    unsigned char *cells = file == 'v' ? t->v : file == 'a' ? t->a : t->s;
    const long cap = file == 's' ? (long)sizeof t->s : (long)sizeof t->v;
    return i >= 0 && i < cap ? &cells[i] : NULL;
}

static int taint_of(isa_taint *t, const isa_regs *r) {
    for (long i = r->lo; i <= r->hi; i++) {
        const unsigned char *c = taint_cell(t, r->file, i);
        if (c && *c) return 1;
    }
    return 0;
}

static void taint_set(isa_taint *t, const isa_regs *r, int tainted) {
    for (long i = r->lo; i <= r->hi; i++) {
        unsigned char *c = taint_cell(t, r->file, i);
        if (c) *c = (unsigned char)tainted;
    }
}

/* A compare that writes only SCC: its operands are sources. */
static int scalar_compare(const char *mnem) { return starts(mnem, "s_cmp") || starts(mnem, "s_bitcmp"); }

/* One instruction `mnem ops` applied to the taint: a global load's data registers become tainted, a
 * scalar load's clean; any other instruction's destinations (its first operand, and its second in the
 * carry-out forms) take the taint of its sources (its other operands, and SCC where it reads it). */
static void taint_step(isa_taint *t, const char *mnem, const char *ops) {
    size_t n;
    const char *o;
    isa_regs r;
    const int global = global_load(mnem);
    if (global || starts(mnem, "s_load") || starts(mnem, "s_buffer_load")) {
        if ((global && strstr(mnem, "_lds")) || !(o = operand(ops, 0, &n)) || !taint_reg(o, n, &r)) return;
        taint_set(t, &r, global);
        return;
    }
    /* v_cmpx writes exec only on gfx10+ (two operands), vcc or an SGPR pair and exec on gfx9 (three) */
    const int first = !writes_no_first(mnem) && !scalar_compare(mnem) &&
                      !(starts(mnem, "v_cmpx") && !operand(ops, 2, &n));
    const int second = first && (strstr(mnem, "_co_") || starts(mnem, "v_mad_u64_u32") ||
                                 starts(mnem, "v_mad_i64_i32") || starts(mnem, "v_div_scale"));
    const int reads_scc = starts(mnem, "s_cselect") || starts(mnem, "s_addc") || starts(mnem, "s_subb") ||
                          starts(mnem, "s_cmov");
    static const char *const scc_writers[] = {"s_add", "s_sub",  "s_and", "s_or",   "s_xor",    "s_nand",
                                              "s_nor", "s_xnor", "s_not", "s_lshl", "s_lshr",   "s_ashr",
                                              "s_bfe", "s_min",  "s_max", "s_abs",  "s_absdiff"};
    int writes_scc = scalar_compare(mnem);
    for (size_t i = 0; i < sizeof scc_writers / sizeof scc_writers[0]; i++) writes_scc |= starts(mnem, scc_writers[i]);
    int tainted = reads_scc && t->s[ISA_SCC];
    for (int i = first + second; (o = operand(ops, i, &n)) != NULL; i++)
        if (taint_reg(o, n, &r)) tainted |= taint_of(t, &r);
    for (int i = 0; i < first + second; i++)
        if ((o = operand(ops, i, &n)) != NULL && taint_reg(o, n, &r)) taint_set(t, &r, tainted);
    if (writes_scc) t->s[ISA_SCC] = (unsigned char)tainted;
}

/* An instruction after which the listing may go on in another exec region: it writes exec (exec, exec_lo
 * or exec_hi as its first operand, a *saveexec*, a v_cmpx*) or branches (or ends the program: what
 * follows is reached by a branch). */
static int region_edge(const char *mnem, const char *ops) {
    size_t n;
    const char *first = operand(ops, 0, &n);
    if (first && !writes_no_first(mnem) && !scalar_compare(mnem) && n >= 4 && !strncmp(first, "exec", 4)) return 1;
    return strstr(mnem, "saveexec") || starts(mnem, "v_cmpx") || starts(mnem, "s_branch") ||
           starts(mnem, "s_cbranch") || starts(mnem, "s_setpc") || starts(mnem, "s_swappc") || starts(mnem, "s_call") ||
           starts(mnem, "s_endpgm");
}

void rk_isa_scan(const char *dis, rk_isa *out) {
    out->wide = out->narrow = out->split = out->waits = out->load_waits = out->free_waits = -1;
    rk_isa k = {0};
    split_scan sp = {0};
    isa_taint taint;
    int in_kernel = 0, ok = 1;
    int last = 0;         /* the last global access of this kernel: 0 none, 'l' a load, 's' a store */
    int pending_wait = 0; /* waits since that access, when it was a load */
    int pending_here = 0; /* those of them since the last region edge (region_edge, a label) */
    for (const char *line = dis; ok && line && *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        for (size_t c = 0; c + 1 < len; c++) /* the instruction, without its "// address: encoding" */
            if (line[c] == '/' && line[c + 1] == '/') {
                len = c;
                break;
            }
        char text[512];
        if (len >= sizeof text) {
            ok = 0;
            break;
        }
        memcpy(text, line, len);
        text[len] = '\0';
        while (len && (text[len - 1] == ' ' || text[len - 1] == '\t' || text[len - 1] == '\r')) text[--len] = '\0';
        line = end ? end + 1 : NULL;
        /* "0000000000001a00 <name>:" opens a kernel (llvm-objdump prints a symbol per function) */
        if (text[0] != '\t' && text[0] != ' ' && strstr(text, " <") && len && text[len - 1] == ':') {
            if (in_kernel) {
                k.split = split_count(&sp);
                isa_fold(out, &k);
            }
            if (!in_kernel) out->wide = out->narrow = out->split = out->waits = out->load_waits = out->free_waits = 0;
            memset(&k, 0, sizeof k);
            memset(&taint, 0, sizeof taint);
            sp.n = 0;
            in_kernel = 1, last = 0, pending_wait = pending_here = 0;
            continue;
        }
        /* "<L0>:" (llvm-objdump --symbolize-operands) labels a branch target */
        if (in_kernel && text[0] == '<' && len && text[len - 1] == ':') pending_here = 0;
        if (!in_kernel || text[0] != '\t') continue;
        const char *op = text + 1;
        char mnem[64];
        snprintf(mnem, sizeof mnem, "%.*s", (int)strcspn(op, " \t"), op);
        const char *ops = op + strcspn(op, " \t");
        const int load = global_load(mnem);
        const int store = starts(mnem, "global_store") || starts(mnem, "buffer_store") || starts(mnem, "flat_store");
        if (load || store) {
            const int width = access_width(mnem), wide = width == 16;
            if (wide) k.wide++;
            else k.narrow++;
            isa_access a;
            if (!access_of(mnem, ops, load, width, &a)) ok = 0;
            else if (!wide && width > 0 && width < 16 && split_add(&sp, &a) != 0) ok = 0;
            if (load && last == 'l') {
                k.load_waits += pending_wait;
                int dependent = 0;
                for (int r = 0; ok && r < a.n_reg; r++) dependent |= taint_of(&taint, &a.reg[r]);
                if (!dependent) k.free_waits += pending_here;
            }
            last = load ? 'l' : 's';
            pending_wait = pending_here = 0;
        } else if ((!strcmp(mnem, "s_waitcnt") && strstr(op, "vmcnt(")) || starts(mnem, "s_wait_loadcnt")) {
            k.waits++;
            pending_wait += last == 'l';
            pending_here += last == 'l';
        } else if (region_edge(mnem, ops)) {
            pending_here = 0;
        }
        taint_step(&taint, mnem, ops);
        size_t n0 = 0;
        const char *first = operand(ops, 0, &n0);
        if (!writes_no_first(mnem)) split_written(&sp, first, n0);
    }
    if (ok && in_kernel) {
        k.split = split_count(&sp);
        isa_fold(out, &k);
    }
    free(sp.a);
    if (!ok) out->wide = out->narrow = out->split = out->waits = out->load_waits = out->free_waits = -1;
}

#define FIGURE(field, fewer, means) \
    { #field, offsetof(rk_isa_limit, field), fewer, means }
const rk_isa_figure rk_isa_figures[RK_ISA_FIGURES] = {
    FIGURE(vgprs, 0, "VGPRs (AGPRs included, .vgpr_count)"),
    FIGURE(sgprs, 0, "SGPRs (.sgpr_count)"),
    FIGURE(occupancy, 1, "waves per SIMD that the VGPRs allow (lower is worse)"),
    FIGURE(narrow, 0, "global loads and stores narrower than 16 bytes"),
    FIGURE(split, 0, "narrow accesses that are pieces of a split 16-byte chunk (the ideal is 0)"),
    FIGURE(waits, 0, "vector-memory load waits (s_waitcnt vmcnt, s_wait_loadcnt)"),
    FIGURE(load_waits, 0, "those waits that sit between two global loads"),
    FIGURE(free_waits, 0,
           "those of them whose later load neither depends on a loaded value nor starts another exec region "
           "(the ideal is 0)"),
};
#undef FIGURE

static int *figure(rk_isa_limit *l, int i) { return (int *)((char *)l + rk_isa_figures[i].at); }
static int figure_of(const rk_isa_limit *l, int i) { return *(const int *)((const char *)l + rk_isa_figures[i].at); }

void rk_isa_limit_header(FILE *f) {
    for (int i = 0; i < RK_ISA_FIGURES; i++)
        fprintf(f, "#   %-11s %s\n", rk_isa_figures[i].name, rk_isa_figures[i].means);
    fprintf(f, "# target kernel");
    for (int i = 0; i < RK_ISA_FIGURES; i++) fprintf(f, " %s", rk_isa_figures[i].name);
    fputc('\n', f);
}

void rk_isa_limit_of(rk_isa_limit *l, const char *target, const char *kernel, const rk_build_result *r) {
    memset(l, 0, sizeof *l);
    snprintf(l->target, sizeof l->target, "%s", target);
    snprintf(l->kernel, sizeof l->kernel, "%s", kernel);
    l->vgprs = r->info.regs;
    l->sgprs = r->info.sgprs;
    l->occupancy = r->isa.occupancy;
    l->narrow = r->isa.narrow;
    l->split = r->isa.split;
    l->waits = r->isa.waits;
    l->load_waits = r->isa.load_waits;
    l->free_waits = r->isa.free_waits;
}

void rk_isa_limit_print(FILE *f, const rk_isa_limit *l) {
    fprintf(f, "%s %s", l->target, l->kernel);
    for (int i = 0; i < RK_ISA_FIGURES; i++) fprintf(f, " %d", figure_of(l, i));
    fputc('\n', f);
}

/* The next word of a line at *p (up to end), copied into dst; 0 when there is none or it does not fit. */
static int next_word(const char **p, const char *end, char *dst, size_t cap) {
    const char *s = *p;
    while (s < end && (*s == ' ' || *s == '\t' || *s == '\r')) s++;
    const char *e = s;
    while (e < end && *e != ' ' && *e != '\t' && *e != '\r') e++;
    *p = e;
    if (e == s || (size_t)(e - s) >= cap) return 0;
    memcpy(dst, s, (size_t)(e - s));
    dst[e - s] = '\0';
    return 1;
}

int rk_isa_limits_parse(const char *text, rk_isa_limit *out, int cap, char *why, size_t why_cap) {
    int n = 0, lineno = 0;
    for (const char *line = text; line && *line;) {
        const char *end = strchr(line, '\n');
        if (!end) end = line + strlen(line);
        const char *p = line, *next = *end ? end + 1 : NULL;
        const int len = (int)(end - line);
        lineno++;
        line = next;
        while (p < end && (*p == ' ' || *p == '\t' || *p == '\r')) p++;
        if (p == end || *p == '#') continue;
        rk_isa_limit l;
        memset(&l, 0, sizeof l);
        int good = next_word(&p, end, l.target, sizeof l.target) && next_word(&p, end, l.kernel, sizeof l.kernel);
        for (int i = 0; good && i < RK_ISA_FIGURES; i++) {
            char word[16], *e;
            good = next_word(&p, end, word, sizeof word);
            if (!good) break;
            errno = 0;
            const long v = strtol(word, &e, 10);
            good = *e == '\0' && errno == 0 && v >= 0 && v <= 1 << 20;
            *figure(&l, i) = (int)v;
        }
        char extra[2];
        if (good) good = !next_word(&p, end, extra, sizeof extra) && p == end;
        if (!good) {
            size_t w = (size_t)snprintf(why, why_cap, "line %d: want 'target kernel", lineno);
            for (int i = 0; i < RK_ISA_FIGURES && w < why_cap; i++)
                w += (size_t)snprintf(why + w, why_cap - w, " %s", rk_isa_figures[i].name);
            if (w < why_cap)
                snprintf(why + w, why_cap - w, "' (non-negative integers), got '%.*s%s'", len > 160 ? 160 : len,
                         end - len, len > 160 ? "..." : "");
            return -1;
        }
        if (rk_isa_limit_find(out, n, l.target, l.kernel)) {
            snprintf(why, why_cap, "line %d: a second line for %s %s", lineno, l.target, l.kernel);
            return -1;
        }
        if (n == cap) {
            snprintf(why, why_cap, "line %d: more than %d lines", lineno, cap);
            return -1;
        }
        out[n++] = l;
    }
    return n;
}

const rk_isa_limit *rk_isa_limit_find(const rk_isa_limit *limits, int n, const char *target, const char *kernel) {
    for (int i = 0; i < n; i++)
        if (!strcmp(limits[i].kernel, kernel) && !strcmp(limits[i].target, target)) return &limits[i];
    return NULL;
}

int rk_isa_regressions(const rk_build_result *r, const rk_isa_limit *l, char *why, size_t cap) {
    rk_isa_limit now;
    rk_isa_limit_of(&now, l->target, l->kernel, r);
    int bad = 0;
    size_t w = 0;
    if (cap) why[0] = '\0';
    for (int i = 0; i < RK_ISA_FIGURES; i++) {
        const rk_isa_figure *f = &rk_isa_figures[i];
        const int v = figure_of(&now, i), lim = figure_of(l, i);
        if (v >= 0 && (f->fewer_is_worse ? v >= lim : v <= lim)) continue;
        bad++;
        if (w < cap)
            w += (size_t)(v < 0 ? snprintf(why + w, cap - w, " %s not known;", f->name)
                                : snprintf(why + w, cap - w, " %s %d %s %d;", f->name, v, f->fewer_is_worse ? "<" : ">",
                                           lim));
    }
    return bad;
}

int rk_build_one(const rk_desc *v, rk_compiler cc, unsigned flags, rk_build_result *r, const rk_build_outputs *out) {
    memset(r, 0, sizeof *r);
    rk_info_reset(&r->info);
    r->cc = cc;
    r->bf16_cvt = r->e2m1_cvt = r->pdl_gate = r->abi = -1;
    r->isa = RK_ISA_UNKNOWN;
    r->pid = (int)getpid();
    rk_buf src = {0}, log = {0}, dis = {0};
    rk_codeobj co = {0};
    rk_err err = {0};
    char code[RK_NAME_MAX + 2];
    const char *target = rk_arch_code(v->arch, v->arch->name, code, sizeof code) ? code : v->arch->name;
    const char *extra = v->arch->options[0] ? v->arch->options : NULL;
    int want_dis = (flags & RK_BUILD_SCAN) || (out && out->disasm);
    int rc = rk_emit(v, &src, &err);
    if (rc != ROPEKV_OK) {
        rk_buf_printf(&log, "emit: %s\n", err.msg);
    } else {
        switch (cc) {
        case RK_CC_HIPRTC:
        case RK_CC_CLANG:
        case RK_CC_NVRTC:
            rc = rk_compile_inspect(cc, src.p, src.len, target, extra, &co, &r->info, want_dis ? &dis : NULL, &log);
            /* fp8_cvt is known exactly when the code was read: then dis is the code */
            if (rc == ROPEKV_OK && want_dis && r->info.fp8_cvt >= 0) {
                int nv = cc == RK_CC_NVRTC;
                r->bf16_cvt = dis.len && strstr(dis.p, nv ? "cvt.rn.bf16x2.f32" : "v_cvt_pk_bf16_f32") ? 1 : 0;
                if (nv) r->pdl_gate = dis.len ? pdl_gate(dis.p) : 0;
                r->e2m1_cvt = dis.len && strstr(dis.p, rk_build_e2m1_insn(v->arch->vendor)) ? 1 : 0;
                if (!nv && dis.len) {
                    rk_isa_scan(dis.p, &r->isa);
                    r->isa.occupancy = rk_isa_occupancy(target, r->info.regs);
                }
            }
            if (rc == ROPEKV_OK && cc != RK_CC_NVRTC) abi_check(v, &co, r);
            if (rc == ROPEKV_OK && cc == RK_CC_NVRTC && out && out->sass) cubin_sass(&co, out->sass);
            break;
        case RK_CC_HOST: rc = build_host(v, &src, r, out, &log); break;
        default: rc = ROPEKV_ERR_TARGET; rk_buf_printf(&log, "no compiler for target %s\n", target);
        }
    }
    r->rc = rc;
    keep_log(r->log, sizeof r->log, log.p, log.len);
    if (out && out->log && log.len) rk_buf_put(out->log, log.p, log.len);
    if (out && out->disasm && dis.len) rk_buf_put(out->disasm, dis.p, dis.len);
    if (out && out->code && cc != RK_CC_HOST) *out->code = co;
    else if (cc != RK_CC_HOST) rk_code_free(&co);
    rk_buf_free(&src);
    rk_buf_free(&log);
    rk_buf_free(&dis);
    r->state = 2;
    return rc;
}

/* ---- retargeting ------------------------------------------------------------------------------ */
ropekv_variant rk_variant_of(const rk_desc *d) {
    const rk_choice c = rk_desc_choice(d);
    return (ropekv_variant){ROPEKV_SIZED(ropekv_variant),
                            .spec = d->spec->name,
                            .kv = c.kv,
                            .q = c.q,
                            .positions = c.pos,
                            .slots = c.slot,
                            .q_dtype = c.q_dtype,
                            .layout = c.layout,
                            .op = c.op,
                            .norm = c.norm,
                            .record = c.record ? d->rec.name : NULL};
}

int rk_build_retarget(const rk_catalog *cat, const rk_arch *target, rk_desc *out, int cap) {
    rk_desc *tmp = malloc(sizeof *tmp * RK_MAX_VARIANTS_PER_SPEC);
    if (!tmp) return -1;
    int n = 0;
    for (int s = 0; s < cat->n_specs; s++) {
        int k = rk_variants(&cat->specs[s], &cat->archs, tmp, RK_MAX_VARIANTS_PER_SPEC, NULL);
        for (int i = 0; i < k; i++) {
            if (tmp[i].arch != tmp[0].arch) break; /* the first target's entries are every shape once */
            if (n == cap) {
                free(tmp);
                return -1;
            }
            if (rk_desc_make(tmp[i].spec, target, &(rk_choice[]){rk_desc_choice(&tmp[i])}[0], &out[n], NULL) !=
                ROPEKV_OK) {
                free(tmp);
                return -1;
            }
            n++;
        }
    }
    free(tmp);
    return n;
}

/* ---- the matrix ------------------------------------------------------------------------------- */
typedef struct matrix {
    const rk_build_item *items;
    FILE *progress;
} matrix;

static int matrix_run(void *ctx, int i, void *result) {
    const matrix *m = ctx;
    rk_build_one(&m->items[i].v, m->items[i].cc, m->items[i].flags, result, NULL);
    return 0;
}

/* Item i failed because its build process went away (or none was left to take it). */
static void matrix_lost(void *ctx, int i, void *result, int pid, const char *why) {
    const matrix *m = ctx;
    rk_build_result *r = result;
    rk_info_reset(&r->info);
    r->rc = ROPEKV_ERR_COMPILE;
    r->cc = m->items[i].cc;
    r->bf16_cvt = r->e2m1_cvt = r->pdl_gate = r->abi = -1;
    r->isa = RK_ISA_UNKNOWN;
    r->pid = pid;
    snprintf(r->log, sizeof r->log, "%s\n", why);
    r->state = 2;
}

/* "[k/n] key compiler ms" or "[k/n] key compiler FAILED". */
static void matrix_done(void *ctx, int k, int n, int i, const void *result) {
    const matrix *m = ctx;
    const rk_build_result *r = result;
    if (!m->progress) return;
    const rk_build_item *it = &m->items[i];
    if (r->rc == ROPEKV_OK)
        fprintf(m->progress, "[%d/%d] %s %s %.0f ms\n", k, n, it->v.key, rk_compiler_name(r->cc), r->info.ms);
    else fprintf(m->progress, "[%d/%d] %s %s FAILED\n", k, n, it->v.key, rk_compiler_name(r->cc));
    fflush(m->progress);
}

int rk_build_matrix(const rk_build_item *items, int n, int jobs, FILE *progress, rk_build_result *res) {
    matrix m = {items, progress};
    rk_pool p = {.n = n,
                 .result_size = sizeof *res,
                 .jobs = jobs,
                 .worker = "build process",
                 .task = "compiling this",
                 .ctx = &m,
                 .run = matrix_run,
                 .lost = matrix_lost,
                 .done = matrix_done};
    if (rk_pool_run(&p, res) != 0) return -1;
    int failed = 0;
    for (int i = 0; i < n; i++) failed += res[i].rc != ROPEKV_OK;
    return failed;
}

/* ---- reporting -------------------------------------------------------------------------------- */
static const char *yes_no(int v) { return v < 0 ? "-" : v ? "yes" : "no"; }

static void fig(char *out, size_t cap, int v) {
    if (v < 0) snprintf(out, cap, "-");
    else snprintf(out, cap, "%d", v);
}

void rk_build_table_header(FILE *f) {
    fprintf(f, "%-66s %-8s %-13s %7s %7s %7s %6s %7s %3s %4s\n", "KEY", "TARGET", "COMPILER", "MS", "REGS", "SCRATCH",
            "SPILLS", "CODE", "FP8", "BF16");
}

void rk_build_table_row(FILE *f, const rk_desc *v, const rk_build_result *r) {
    char regs[32], scratch[16], spills[16], code[16], ms[32];
    if (r->rc != ROPEKV_OK) {
        fprintf(f, "%-66s %-8s %-13s %7s %s\n", v->key, v->arch->name,
                r->info.compiler[0] ? r->info.compiler : rk_compiler_name(r->cc), "-", "FAILED");
        return;
    }
    if (r->info.regs < 0) snprintf(regs, sizeof regs, "-");
    else if (r->info.sgprs >= 0) snprintf(regs, sizeof regs, "%d/%d", r->info.regs, r->info.sgprs);
    else snprintf(regs, sizeof regs, "%d", r->info.regs);
    fig(scratch, sizeof scratch, r->info.scratch);
    fig(spills, sizeof spills, r->info.spills);
    fig(code, sizeof code, r->info.code_size);
    if (r->info.ms < 0) snprintf(ms, sizeof ms, "-");
    else snprintf(ms, sizeof ms, "%.0f", r->info.ms);
    const char *fp8 = !rk_desc_writes_fp8(v) || r->cc == RK_CC_HOST ? "-" : yes_no(r->info.fp8_cvt);
    fprintf(f, "%-66s %-8s %-13s %7s %7s %7s %6s %7s %3s %4s\n", v->key, v->arch->name,
            r->info.compiler[0] ? r->info.compiler : rk_compiler_name(r->cc), ms, regs, scratch, spills, code, fp8,
            r->cc == RK_CC_HOST ? "-" : yes_no(r->bf16_cvt));
}

const char *rk_build_e2m1_insn(rk_vendor v) {
    return v == RK_VENDOR_NVIDIA ? "cvt.rn.satfinite.e2m1x2.f32" : "v_cvt_scalef32_pk_fp4_f32";
}

int rk_build_strict_violation(const rk_desc *v, const rk_build_result *r, char *why, size_t cap) {
    if (why && cap) why[0] = '\0';
    if (r->rc != ROPEKV_OK || r->cc == RK_CC_HOST) return 0; /* failures are reported as such; host has no figures */
    if (r->info.scratch != 0 || r->info.spills != 0) {
        if (r->info.scratch < 0 || r->info.spills < 0)
            snprintf(why, cap, "scratch/spills not known (are the llvm-22 tools installed?)");
        else snprintf(why, cap, "%d bytes scratch, %d spills", r->info.scratch, r->info.spills);
        return 1;
    }
    if (r->abi == 0) {
        snprintf(why, cap, "launch ABI check: %s", r->abi_why);
        return 1;
    }
    if (rk_desc_writes_fp8(v) && v->arch->fp8_hw && r->info.fp8_cvt != 1) {
        snprintf(why, cap, "fp8 output on %s (fp8_hw) without the hardware fp8 conversion instruction", v->arch->name);
        return 1;
    }
    if (rk_desc_writes_e2m1(v) && v->arch->e2m1_hw && r->cc != RK_CC_HOST && r->e2m1_cvt == 0) {
        snprintf(why, cap, "e2m1 output on %s (e2m1_hw) without the hardware e2m1 conversion (%s)", v->arch->name,
                 rk_build_e2m1_insn(v->arch->vendor));
        return 1;
    }
    return 0;
}

void rk_build_summary(FILE *f, const rk_build_item *items, const rk_build_result *res, int n) {
    fprintf(f, "%-8s %-13s %6s %6s %6s %6s %7s %6s %8s %8s\n", "TARGET", "COMPILER", "BUILT", "FAILED", "REGS", "SGPRS",
            "SCRATCH", "SPILLS", "CODE", "MS");
    /* One row per (target, compiler), in the order of the architecture table (one catalog's rows
     * are one array, so their addresses are in table order). */
    int *first = malloc(sizeof *first * (size_t)(n > 0 ? n : 1));
    if (!first) return;
    int groups = 0;
    for (int i = 0; i < n; i++) {
        int seen = 0;
        for (int g = 0; g < groups && !seen; g++)
            seen = items[first[g]].v.arch == items[i].v.arch && items[first[g]].cc == items[i].cc;
        if (seen) continue;
        int g = groups++;
        while (g > 0 && (items[first[g - 1]].v.arch > items[i].v.arch ||
                         (items[first[g - 1]].v.arch == items[i].v.arch && items[first[g - 1]].cc > items[i].cc))) {
            first[g] = first[g - 1];
            g--;
        }
        first[g] = i;
    }
    for (int g = 0; g < groups; g++) {
        const rk_build_item *it = &items[first[g]];
        int built = 0, failed = 0, regs = -1, sgprs = -1, scratch = -1, spills = -1, code = -1;
        double ms = 0;
        const char *compiler = rk_compiler_name(it->cc);
        for (int j = 0; j < n; j++) {
            if (items[j].v.arch != it->v.arch || items[j].cc != it->cc) continue;
            const rk_build_result *r = &res[j];
            if (r->rc != ROPEKV_OK) {
                failed++;
                continue;
            }
            built++;
            if (r->info.compiler[0]) compiler = r->info.compiler;
            if (r->info.regs > regs) regs = r->info.regs;
            if (r->info.sgprs > sgprs) sgprs = r->info.sgprs;
            if (r->info.scratch > scratch) scratch = r->info.scratch;
            if (r->info.spills > spills) spills = r->info.spills;
            if (r->info.code_size > code) code = r->info.code_size;
            if (r->info.ms > 0) ms += r->info.ms;
        }
        char c[5][16];
        fig(c[0], sizeof c[0], regs);
        fig(c[1], sizeof c[1], sgprs);
        fig(c[2], sizeof c[2], scratch);
        fig(c[3], sizeof c[3], spills);
        fig(c[4], sizeof c[4], code);
        fprintf(f, "%-8s %-13s %6d %6d %6s %6s %7s %6s %8s %8.0f\n", it->v.arch->name, compiler, built, failed, c[0],
                c[1], c[2], c[3], c[4], ms);
    }
    free(first);
}
