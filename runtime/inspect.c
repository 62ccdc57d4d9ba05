/* AMDGPU code-object inspection with the llvm tools, and the helpers the compiler drivers share:
 * running a program without a shell, private temporary directories, option splitting. */
#define _GNU_SOURCE 1 /* pipe2 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "compilers.h"

extern char **environ;

/* ---- shared helpers --------------------------------------------------------------------------- */
void rk_code_free(rk_codeobj *c) {
    if (!c) return;
    free(c->data);
    c->data = NULL;
    c->len = 0;
}

void rk_info_reset(rk_compile_info *info) {
    if (!info) return;
    info->ms = -1;
    info->regs = info->sgprs = info->scratch = info->spills = info->lds = -1;
    info->code_size = info->fp8_cvt = -1;
    info->compiler[0] = '\0';
}

double rk_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int rk_run(const char *const argv[], rk_buf *out, int *status) {
    *status = -1;
    int fd[2];
    if (pipe2(fd, O_CLOEXEC) != 0) {
        if (out) rk_buf_printf(out, "%s: pipe: %s\n", argv[0], strerror(errno));
        return ROPEKV_ERR_IO;
    }
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&at);
    /* Only the three standard descriptors reach the child: both pipe ends are close-on-exec, and
     * dup2 onto 1 and 2 clears that flag on the copies. */
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, fd[1], 1);
    posix_spawn_file_actions_adddup2(&fa, fd[1], 2);
    sigset_t none, dfl;
    sigemptyset(&none);
    sigemptyset(&dfl);
    sigaddset(&dfl, SIGPIPE);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &dfl);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    pid_t pid;
    int e = posix_spawnp(&pid, argv[0], &fa, &at, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    close(fd[1]);
    if (e != 0) {
        close(fd[0]);
        if (out) rk_buf_printf(out, "%s: cannot run: %s\n", argv[0], strerror(e));
        return ROPEKV_ERR_IO;
    }
    char chunk[8192];
    int rc = ROPEKV_OK;
    for (;;) {
        ssize_t n = read(fd[0], chunk, sizeof chunk);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        if (out && rc == ROPEKV_OK) rc = rk_buf_put(out, chunk, (size_t)n); /* keep draining */
    }
    close(fd[0]);
    int ws = 0;
    while (waitpid(pid, &ws, 0) < 0) {
        if (errno != EINTR) {
            if (out) rk_buf_printf(out, "%s: waitpid: %s\n", argv[0], strerror(errno));
            return ROPEKV_ERR_IO;
        }
    }
    if (WIFEXITED(ws)) *status = WEXITSTATUS(ws);
    else if (WIFSIGNALED(ws)) *status = 128 + WTERMSIG(ws);
    return rc;
}

int rk_mktmpdir(char *path, size_t cap) {
    const char *base = getenv("TMPDIR");
    if (!base || !*base) base = "/tmp";
    int n = snprintf(path, cap, "%s/ropekv-XXXXXX", base);
    if (n < 0 || (size_t)n >= cap) return ROPEKV_ERR_IO;
    if (!mkdtemp(path)) {
        /* An unusable $TMPDIR: fall back to /tmp once. */
        if (strcmp(base, "/tmp") == 0) return ROPEKV_ERR_IO;
        n = snprintf(path, cap, "/tmp/ropekv-XXXXXX");
        if (n < 0 || (size_t)n >= cap || !mkdtemp(path)) return ROPEKV_ERR_IO;
    }
    return ROPEKV_OK;
}

void rk_rmtmpdir(const char *path) {
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        char p[4096];
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            int n = snprintf(p, sizeof p, "%s/%s", path, e->d_name);
            if (n > 0 && (size_t)n < sizeof p) unlink(p);
        }
        closedir(d);
    }
    rmdir(path);
}

int rk_write_file(const char *path, const void *p, size_t n) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return ROPEKV_ERR_IO;
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            close(fd);
            return ROPEKV_ERR_IO;
        }
        c += w;
        n -= (size_t)w;
    }
    return close(fd) == 0 ? ROPEKV_OK : ROPEKV_ERR_IO;
}

int rk_split_options(const char *extra, const char **argv, int n, int cap, char **store, int *count) {
    *store = NULL;
    if (extra && *extra) {
        *store = strdup(extra);
        if (!*store) return ROPEKV_ERR_NOMEM;
        char *save = NULL;
        for (char *t = strtok_r(*store, " \t\n", &save); t; t = strtok_r(NULL, " \t\n", &save)) {
            if (n + 1 >= cap) return ROPEKV_ERR_COMPILE;
            argv[n++] = t;
        }
    }
    if (n >= cap) return ROPEKV_ERR_COMPILE;
    argv[n] = NULL;
    *count = n;
    return ROPEKV_OK;
}

/* ---- inspection -------------------------------------------------------------------------------- */
static void llvm_tool(char *out, size_t cap, const char *tool) {
    const char *suffix = getenv("ROPEKV_LLVM_SUFFIX");
    if (!suffix) suffix = "-22";
    snprintf(out, cap, "llvm-%s%s", tool, suffix);
}

static int max_of(int a, int b) { return a > b ? a : b; }

/* One kernel's figures from the metadata. */
typedef struct kmeta {
    char name[256], symbol[256];
    int vgpr, agpr, sgpr, scratch, lds, vspill, sspill;
} kmeta;

static void kmeta_reset(kmeta *k) {
    k->name[0] = k->symbol[0] = '\0';
    k->vgpr = k->agpr = k->sgpr = k->scratch = k->lds = k->vspill = k->sspill = -1;
}

static int kmeta_is(const kmeta *k, const char *kernel) {
    if (!kernel) return k->name[0] != '\0';
    if (strcmp(k->name, kernel) == 0) return 1;
    size_t n = strlen(kernel);
    return strncmp(k->symbol, kernel, n) == 0 && strcmp(k->symbol + n, ".kd") == 0;
}

static int indent_of(const char *l) {
    int i = 0;
    while (l[i] == ' ') i++;
    return i;
}

/* "  .key:   value" -> key and value (quotes stripped) in the caller's buffers. */
static int split_kv(const char *l, char *key, size_t kcap, char *val, size_t vcap) {
    while (*l == ' ' || *l == '-') l++;
    const char *colon = strchr(l, ':');
    if (!colon || *l != '.') return 0;
    size_t kn = (size_t)(colon - l);
    if (kn >= kcap) return 0;
    memcpy(key, l, kn);
    key[kn] = '\0';
    const char *v = colon + 1;
    while (*v == ' ') v++;
    size_t vn = strlen(v);
    while (vn > 0 && (v[vn - 1] == ' ' || v[vn - 1] == '\r')) vn--;
    if (vn >= 2 && (v[0] == '\'' || v[0] == '"') && v[vn - 1] == v[0]) {
        v++;
        vn -= 2;
    }
    if (vn >= vcap) vn = vcap - 1;
    memcpy(val, v, vn);
    val[vn] = '\0';
    return 1;
}

static void kmeta_set(kmeta *k, const char *key, const char *val) {
    int *slot = NULL;
    if (strcmp(key, ".name") == 0) snprintf(k->name, sizeof k->name, "%s", val);
    else if (strcmp(key, ".symbol") == 0) snprintf(k->symbol, sizeof k->symbol, "%s", val);
    else if (strcmp(key, ".vgpr_count") == 0) slot = &k->vgpr;
    else if (strcmp(key, ".agpr_count") == 0) slot = &k->agpr;
    else if (strcmp(key, ".sgpr_count") == 0) slot = &k->sgpr;
    else if (strcmp(key, ".private_segment_fixed_size") == 0) slot = &k->scratch;
    else if (strcmp(key, ".group_segment_fixed_size") == 0) slot = &k->lds;
    else if (strcmp(key, ".vgpr_spill_count") == 0) slot = &k->vspill;
    else if (strcmp(key, ".sgpr_spill_count") == 0) slot = &k->sspill;
    if (slot) *slot = atoi(val);
}

static void fold(rk_compile_info *info, const kmeta *k, int first) {
    int spills = (k->vspill < 0 && k->sspill < 0) ? -1 : max_of(k->vspill, 0) + max_of(k->sspill, 0);
    if (first) {
        info->regs = k->vgpr;
        info->sgprs = k->sgpr;
        info->scratch = k->scratch;
        info->lds = k->lds;
        info->spills = spills;
    } else {
        info->regs = max_of(info->regs, k->vgpr);
        info->sgprs = max_of(info->sgprs, k->sgpr);
        info->scratch = max_of(info->scratch, k->scratch);
        info->lds = max_of(info->lds, k->lds);
        info->spills = max_of(info->spills, spills);
    }
}

/* Walks the amdhsa.kernels list of `llvm-readelf --notes`; folds the matching kernels into info.
 * Returns how many matched. */
static int parse_notes(const char *text, const char *kernel, rk_compile_info *info) {
    const char *p = strstr(text, "amdhsa.kernels:");
    if (!p) return 0;
    p = strchr(p, '\n');
    int item = -1, found = 0, have = 0;
    kmeta k;
    kmeta_reset(&k);
    char line[1024], key[128], val[512];
    while (p && *p) {
        p++;
        const char *e = strchr(p, '\n');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n >= sizeof line) n = sizeof line - 1;
        memcpy(line, p, n);
        line[n] = '\0';
        p = e;
        int ind = indent_of(line);
        if (line[ind] == '\0') continue;
        if (ind == 0) break; /* the next top-level key ends the list */
        if (line[ind] == '-' && (item < 0 || ind == item)) {
            if (have && kmeta_is(&k, kernel)) fold(info, &k, found++ == 0);
            item = ind;
            kmeta_reset(&k);
            have = 1;
            if (split_kv(line, key, sizeof key, val, sizeof val)) kmeta_set(&k, key, val);
            continue;
        }
        if (have && ind == item + 2 && line[ind] == '.' && split_kv(line, key, sizeof key, val, sizeof val))
            kmeta_set(&k, key, val);
    }
    if (have && kmeta_is(&k, kernel)) fold(info, &k, found++ == 0);
    return found;
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

/* Code size from `llvm-readelf -S -s`: the kernel's FUNC symbol size, or .text for NULL. */
static int parse_code_size(const char *text, const char *kernel) {
    char line[1024];
    for (const char *p = text; *p;) {
        p = next_line(p, line, sizeof line);
        if (!kernel) {
            const char *b = strchr(line, ']');
            if (line[indent_of(line)] != '[' || !b) continue;
            char name[64], type[64];
            unsigned long long addr, off, size;
            if (sscanf(b + 1, "%63s %63s %llx %llx %llx", name, type, &addr, &off, &size) == 5 &&
                strcmp(name, ".text") == 0)
                return (int)size;
        } else {
            char num[32], value[64], type[32], bind[32], vis[32], ndx[32], name[512];
            unsigned long long size;
            if (sscanf(line, "%31s %63s %llu %31s %31s %31s %31s %511s", num, value, &size, type, bind, vis,
                       ndx, name) == 8 &&
                strcmp(type, "FUNC") == 0 && strcmp(name, kernel) == 0)
                return (int)size;
        }
    }
    return -1;
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

int rk_amd_inspect(const rk_codeobj *co, const char *kernel, rk_compile_info *info, rk_buf *disasm) {
    if (!co || !co->data || co->len == 0 || !info) return ROPEKV_ERR_IO;
    char dir[4096], file[4200], readelf[64], objdump[64];
    if (rk_mktmpdir(dir, sizeof dir) != ROPEKV_OK) {
        if (disasm) rk_buf_printf(disasm, "inspect: cannot create a temporary directory\n");
        return ROPEKV_ERR_IO;
    }
    snprintf(file, sizeof file, "%s/code.co", dir);
    int rc = rk_write_file(file, co->data, co->len);
    rk_buf notes = {0}, dis = {0};
    if (rc != ROPEKV_OK) {
        if (disasm) rk_buf_printf(disasm, "inspect: cannot write %s\n", file);
        goto done;
    }
    llvm_tool(readelf, sizeof readelf, "readelf");
    llvm_tool(objdump, sizeof objdump, "objdump");

    int st = -1;
    const char *argv1[] = {readelf, "--wide", "--notes", "-S", "-s", file, NULL};
    rc = rk_run(argv1, &notes, &st);
    if (rc == ROPEKV_OK && st != 0) rc = ROPEKV_ERR_IO;
    if (rc != ROPEKV_OK) {
        if (disasm && notes.len) rk_buf_put(disasm, notes.p, notes.len);
        goto done;
    }
    const char *argv2[] = {objdump, "-d", file, NULL};
    rc = rk_run(argv2, &dis, &st);
    if (rc == ROPEKV_OK && st != 0) rc = ROPEKV_ERR_IO;
    if (disasm && dis.len) rk_buf_put(disasm, dis.p, dis.len);
    if (rc != ROPEKV_OK) goto done;

    rk_compile_info got = *info;
    if (parse_notes(notes.p, kernel, &got) == 0) {
        rc = strstr(notes.p, "amdhsa.kernels:") ? ROPEKV_ERR_COMPILE : ROPEKV_ERR_IO;
        goto done;
    }
    got.code_size = parse_code_size(notes.p, kernel);
    got.fp8_cvt = dis.len ? parse_fp8(dis.p, kernel) : 0;
    *info = got;
done:
    rk_buf_free(&notes);
    rk_buf_free(&dis);
    rk_rmtmpdir(dir);
    return rc;
}

/* Bytes of machine code in an ELF64 little-endian image (a CUBIN, a host shared object): the sizes
 * of its .text and .text.<function> sections. -1 when the image is not such an ELF. */
int rk_elf_text_size(const unsigned char *p, size_t n) {
    if (!p || n < 64 || memcmp(p, "\x7f" "ELF", 4) != 0 || p[4] != 2 || p[5] != 1) return -1;
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
