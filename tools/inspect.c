/* The figures of a compile: AMDGPU code objects (metadata and symbol sizes read by amdgpu_meta.h,
 * disassembly by llvm-objdump), ptxas's verbose report, ELF machine-code sections; and the compile
 * that gathers them for the tools (rk_compile_inspect). */
#include "inspect.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amdgpu_meta.h"
#include "clang.h"

void rk_info_reset(rk_compile_info *info) {
    if (!info) return;
    info->ms = -1;
    info->regs = info->sgprs = info->scratch = info->spills = info->lds = -1;
    info->code_size = info->fp8_cvt = -1;
    info->compiler[0] = '\0';
}

/* ---- AMDGPU code objects ------------------------------------------------------------------------ */
static void llvm_tool(char *out, size_t cap, const char *tool) {
    const char *suffix = getenv("ROPEKV_LLVM_SUFFIX");
    if (!suffix) suffix = "-22";
    snprintf(out, cap, "llvm-%s%s", tool, suffix);
}

static int max_of(int a, int b) { return a > b ? a : b; }

/* One kernel's metadata figures folded into info (the first one sets them). */
static void fold(rk_compile_info *info, const rk_amd_kernel *k, int first) {
    const int spills = (k->vgpr_spill < 0 && k->sgpr_spill < 0) ? -1
                                                                : max_of(k->vgpr_spill, 0) + max_of(k->sgpr_spill, 0);
    const int scratch = k->private_size > INT32_MAX ? INT32_MAX : (int)k->private_size;
    const int lds = k->group_size > INT32_MAX ? INT32_MAX : (int)k->group_size;
    if (first) {
        info->regs = k->vgpr;
        info->sgprs = k->sgpr;
        info->scratch = scratch;
        info->lds = lds;
        info->spills = spills;
    } else {
        info->regs = max_of(info->regs, k->vgpr);
        info->sgprs = max_of(info->sgprs, k->sgpr);
        info->scratch = max_of(info->scratch, scratch);
        info->lds = max_of(info->lds, lds);
        info->spills = max_of(info->spills, spills);
    }
}

/* The line starting at p (copied, NUL-terminated) and the start of the next one. */
static const char *next_line(const char *p, char *line, size_t cap) {
    const char *e = strchr(p, '\n');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    if (n >= cap) n = cap - 1;
    memcpy(line, p, n);
    line[n] = '\0';
    return e ? e + 1 : p + strlen(p);
}

/* 1 when the disassembly (of kernel, or of everything for NULL) holds a hardware f32 -> fp8
 * conversion: v_cvt_pk_fp8_f32, or its stochastic-rounding and scaled forms. */
static int parse_fp8(const char *text, const char *kernel) {
    char line[1024];
    char want[600];
    if (kernel) snprintf(want, sizeof want, "<%s>:", kernel);
    int in = kernel == NULL;
    for (const char *p = text; *p;) {
        p = next_line(p, line, sizeof line);
        size_t n = strlen(line);
        if (n > 2 && line[n - 1] == ':' && line[n - 2] == '>' && strchr(line, '<')) {
            /* "0000000000001900 <to_fp8>:" starts a symbol's code */
            if (kernel) in = strstr(line, want) != NULL && strstr(line, want)[strlen(want)] == '\0';
            continue;
        }
        if (!in) continue;
        if (strstr(line, "v_cvt") && (strstr(line, "pk_fp8_f32") || strstr(line, "sr_fp8_f32"))) return 1;
    }
    return 0;
}

/* `llvm-objdump -d` of the ELF image into dis; ROPEKV_OK, or ROPEKV_ERR_IO with the reason in dis. */
static int disassemble(const unsigned char *img, size_t len, rk_buf *dis) {
    char dir[4096], file[4200], objdump[64];
    if (rk_mktmpdir(dir, sizeof dir, NULL) != ROPEKV_OK) {
        char why[512];
        rk_buf_printf(dis, "inspect: cannot create a temporary directory: %s\n", rk_tmp_failure(why, sizeof why));
        return ROPEKV_ERR_IO;
    }
    snprintf(file, sizeof file, "%s/code.co", dir);
    int rc = rk_write_file(file, img, len);
    if (rc != ROPEKV_OK) {
        rk_buf_printf(dis, "inspect: cannot write %s\n", file);
    } else {
        llvm_tool(objdump, sizeof objdump, "objdump");
        const char *argv[] = {objdump, "-d", file, NULL};
        int st = -1;
        rc = rk_run(argv, 0, 0, dis, &st);
        if (rc == ROPEKV_OK && st != 0) rc = ROPEKV_ERR_IO;
    }
    rk_rmtmpdir(dir);
    return rc;
}

int rk_amd_inspect(const rk_codeobj *co, const char *kernel, rk_compile_info *info, rk_buf *disasm) {
    if (!co || !co->data || co->len == 0 || !info) return ROPEKV_ERR_IO;
    rk_amd_code *c = malloc(sizeof *c);
    if (!c) return ROPEKV_ERR_NOMEM;
    char why[512];
    const unsigned char *img = NULL;
    size_t len = 0;
    if (rk_amd_read(co->data, co->len, c, why, sizeof why) != 0 ||
        rk_amd_elf_image(co->data, co->len, &img, &len, why, sizeof why) != 0) {
        if (disasm) rk_buf_printf(disasm, "inspect: %s\n", why);
        free(c);
        return ROPEKV_ERR_IO;
    }
    rk_compile_info got = *info;
    int found = 0;
    const rk_amd_kernel *one = kernel ? rk_amd_kernel_find(c, kernel) : NULL;
    for (int i = 0; i < c->n_kernels; i++)
        if (!kernel || &c->kernels[i] == one) fold(&got, &c->kernels[i], found++ == 0);
    if (!found) {
        free(c);
        return ROPEKV_ERR_COMPILE;
    }
    got.code_size = one ? (one->code_size > INT32_MAX ? -1 : (int)one->code_size) : rk_elf_text_size(img, len);
    got.fp8_cvt = -1;
    free(c);

    /* The metadata figures stand without the llvm tools; fp8_cvt needs the disassembly. */
    rk_buf dis = {0};
    const int rc = disassemble(img, len, &dis);
    if (rc == ROPEKV_OK) got.fp8_cvt = dis.len ? parse_fp8(dis.p, kernel) : 0;
    if (disasm && dis.len) rk_buf_put(disasm, dis.p, dis.len);
    rk_buf_free(&dis);
    *info = got;
    return rc;
}

/* Bytes of machine code in an ELF64 little-endian image (a CUBIN, a host shared object): the sizes
 * of its .text and .text.<function> sections. -1 when the image is not such an ELF. */
int rk_elf_text_size(const unsigned char *p, size_t n) {
    if (!p || n < 64 ||
        memcmp(p,
               "\x7f"
               "ELF",
               4) != 0 ||
        p[4] != 2 || p[5] != 1)
        return -1;
    uint64_t shoff;
    uint16_t shentsize, shnum, shstrndx;
    memcpy(&shoff, p + 0x28, 8);
    memcpy(&shentsize, p + 0x3a, 2);
    memcpy(&shnum, p + 0x3c, 2);
    memcpy(&shstrndx, p + 0x3e, 2);
    if (shentsize < 64 || shstrndx >= shnum || shoff > n || (uint64_t)shnum * shentsize > n - shoff) return -1;
    const unsigned char *strh = p + shoff + (size_t)shstrndx * shentsize;
    uint64_t stroff, strsize;
    memcpy(&stroff, strh + 0x18, 8);
    memcpy(&strsize, strh + 0x20, 8);
    if (stroff > n || strsize > n - stroff) return -1;
    uint64_t total = 0;
    for (uint16_t i = 0; i < shnum; i++) {
        const unsigned char *h = p + shoff + (size_t)i * shentsize;
        uint32_t name;
        uint64_t size;
        memcpy(&name, h, 4);
        memcpy(&size, h + 0x20, 8);
        if (name >= strsize) continue;
        const char *s = (const char *)p + stroff + name;
        size_t room = (size_t)(strsize - name);
        if (!memchr(s, '\0', room)) continue;
        if (strcmp(s, ".text") == 0 || strncmp(s, ".text.", 6) == 0) total += size;
    }
    return total > INT32_MAX ? -1 : (int)total;
}

/* ---- ptxas -v report ---------------------------------------------------------------------------- */
/* The number just before `what` in s (e.g. "12 bytes stack frame"), else -1. */
static int number_before(const char *s, const char *what) {
    const char *w = strstr(s, what);
    if (!w) return -1;
    const char *e = w;
    while (e > s && e[-1] == ' ') e--;
    const char *b = e;
    while (b > s && b[-1] >= '0' && b[-1] <= '9') b--;
    if (b == e) return -1;
    return atoi(b);
}

void rk_ptxas_report(const char *log, rk_compile_info *info) {
    char line[1024];
    for (const char *p = log; p && *p;) {
        p = next_line(p, line, sizeof line);
        if (strncmp(line, "ptxas", 5) != 0) continue;
        int v;
        if ((v = number_before(line, "registers")) >= 0 && strstr(line, "Used ")) info->regs = max_of(info->regs, v);
        if ((v = number_before(line, "bytes stack frame")) >= 0) info->scratch = max_of(info->scratch, v);
        if ((v = number_before(line, "bytes spill stores")) >= 0) info->spills = max_of(info->spills, v);
        if ((v = number_before(line, "bytes smem")) >= 0) info->lds = max_of(info->lds, v);
    }
    /* ptxas prints smem only when a kernel uses it. */
    if (info->regs >= 0 && info->lds < 0) info->lds = 0;
}

/* ---- a compile with its figures ------------------------------------------------------------------ */
int rk_compile_inspect(rk_compiler cc, const char *src, size_t len, const char *target, const char *extra,
                       rk_codeobj *out, rk_compile_info *info, rk_buf *text, rk_buf *log) {
    out->data = NULL;
    out->len = 0;
    rk_compile_info got;
    rk_info_reset(&got);
    rk_buf own = {0}, ptx = {0};
    rk_buf *clog = log ? log : &own;
    size_t log_at = clog->len;
    int rc = ROPEKV_ERR_TARGET, major, minor;
    double t0 = rk_now_ms();
    switch (cc) {
    case RK_CC_NVRTC:
        if (rk_nvrtc_available(&major, &minor, NULL, 0) == 0)
            snprintf(got.compiler, sizeof got.compiler, "nvrtc %d.%d", major, minor);
        if (!info) {
            rc = rk_nvrtc_compile(src, len, target, extra, 0, out, text, log);
            break;
        }
        rc = rk_nvrtc_compile(src, len, target, extra, RK_NVRTC_PTXAS_VERBOSE, out, &ptx, clog);
        got.ms = rk_now_ms() - t0;
        if (rc != ROPEKV_OK) break;
        rk_ptxas_report(clog->p + log_at, &got);
        /* The machine code proper, not the whole CUBIN (which adds symbols, constants, notes). */
        got.code_size = rk_elf_text_size(out->data, out->len);
        got.fp8_cvt = ptx.len && strstr(ptx.p, "cvt.rn.satfinite.e4m3x2.f32") ? 1 : 0;
        if (text && ptx.len) rk_buf_put(text, ptx.p, ptx.len);
        break;
    case RK_CC_HIPRTC:
    case RK_CC_CLANG:
        if (cc == RK_CC_HIPRTC) {
            if (rk_hiprtc_available(&major, &minor, NULL, 0) == 0)
                snprintf(got.compiler, sizeof got.compiler, "hiprtc %d.%d", major, minor);
            rc = rk_hiprtc_compile(src, len, target, extra, out, log);
        } else {
            snprintf(got.compiler, sizeof got.compiler, "%s", rk_clang_id());
            rc = rk_clang_compile(src, len, target, extra, out, log);
        }
        got.ms = rk_now_ms() - t0;
        /* Figures from the code object's metadata; fp8_cvt and text need llvm-objdump. */
        if (rc == ROPEKV_OK && (info || text)) rk_amd_inspect(out, NULL, &got, text);
        break;
    default:
        if (log) rk_buf_printf(log, "rk_compile_inspect: %s is not a device compiler\n", rk_compiler_name(cc));
    }
    if (got.ms < 0) got.ms = rk_now_ms() - t0;
    if (info) *info = got;
    rk_buf_free(&own);
    rk_buf_free(&ptx);
    return rc;
}
