/* clang++ (offline, as a subprocess): kernel source -> AMDGPU code object for any AMD target,
 * independent of the installed ROCm. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clang.h"

static char g_clang[PATH_MAX];
static pthread_once_t g_path_once = PTHREAD_ONCE_INIT;

/* Version of g_clang, asked once: full first line, and "clang <x.y.z>". */
static int g_ver_ok;
static char g_ver_line[256], g_ver_id[128], g_ver_why[512];
static pthread_once_t g_ver_once = PTHREAD_ONCE_INIT;

static int in_path(const char *name) {
    const char *path = getenv("PATH");
    if (!path || !*path) path = "/usr/local/bin:/usr/bin:/bin";
    char dir[PATH_MAX], full[PATH_MAX];
    while (*path) {
        size_t n = strcspn(path, ":");
        if (n > 0 && n < sizeof dir) {
            memcpy(dir, path, n);
            dir[n] = '\0';
            int k = snprintf(full, sizeof full, "%s/%s", dir, name);
            if (k > 0 && (size_t)k < sizeof full && access(full, X_OK) == 0) return 1;
        }
        path += n;
        if (*path == ':') path++;
    }
    return 0;
}

static void find_clang(void) {
    const char *env = getenv("ROPEKV_CLANG");
    if (env && *env) snprintf(g_clang, sizeof g_clang, "%s", env);
    else snprintf(g_clang, sizeof g_clang, "%s", in_path("clang++-22") ? "clang++-22" : "clang++");
}

const char *rk_clang_path(void) {
    pthread_once(&g_path_once, find_clang);
    return g_clang;
}

static void ask_version(void) {
    const char *argv[] = {rk_clang_path(), "--version", NULL};
    rk_buf out = {0};
    int st = -1;
    int rc = rk_run(argv, 0, 0, &out, &st);
    if (rc != ROPEKV_OK || st != 0 || !out.len) {
        size_t n = out.len;
        while (n > 0 && (out.p[n - 1] == '\n' || out.p[n - 1] == '\r')) n--;
        snprintf(g_ver_why, sizeof g_ver_why, "clang: %s --version failed (status %d): %.*s", argv[0], st,
                 n ? (int)(n < 300 ? n : 300) : 9, n ? out.p : "no output");
        rk_buf_free(&out);
        return;
    }
    size_t n = strcspn(out.p, "\n");
    snprintf(g_ver_line, sizeof g_ver_line, "%.*s", (int)(n < 255 ? n : 255), out.p);
    const char *v = strstr(g_ver_line, "clang version ");
    if (v) {
        v += strlen("clang version ");
        snprintf(g_ver_id, sizeof g_ver_id, "clang %.*s", (int)strcspn(v, " "), v);
    } else {
        snprintf(g_ver_id, sizeof g_ver_id, "%.127s", g_ver_line);
    }
    g_ver_ok = 1;
    rk_buf_free(&out);
}

int rk_clang_available(char *version, size_t cap) {
    pthread_once(&g_ver_once, ask_version);
    if (!g_ver_ok) {
        if (version && cap) snprintf(version, cap, "%s", g_ver_why);
        return -1;
    }
    if (version && cap) snprintf(version, cap, "%s", g_ver_line);
    return 0;
}

const char *rk_clang_id(void) {
    pthread_once(&g_ver_once, ask_version);
    return g_ver_ok ? g_ver_id : "";
}

int rk_clang_compile(const char *src, size_t len, const char *target, const char *extra, rk_codeobj *out, rk_buf *log) {
    out->data = NULL;
    out->len = 0;
    if (rk_clang_available(NULL, 0) != 0) {
        if (log) rk_buf_printf(log, "%s\n", g_ver_why);
        return ROPEKV_ERR_IO;
    }
    if (!target || !*target) {
        if (log) rk_buf_printf(log, "clang: no target\n");
        return ROPEKV_ERR_TARGET;
    }
    /* clang runs in the directory (rk_run_in) and its files are reached through it, never by a path
     * another user could redirect in a shared TMPDIR. */
    static const char in[] = "kernel.hip", co[] = "kernel.co";
    char dir[4096], arch[160];
    if (rk_mktmpdir(dir, sizeof dir, NULL) != ROPEKV_OK) {
        char why[512];
        if (log)
            rk_buf_printf(log, "clang: cannot create a temporary directory: %s\n", rk_tmp_failure(why, sizeof why));
        return ROPEKV_ERR_IO;
    }
    int dfd = rk_tmp_opendir(dir);
    if (dfd < 0) {
        if (log) rk_buf_printf(log, "clang: %s: not a private directory of this user\n", dir);
        rk_rmtmpdir(dir);
        return ROPEKV_ERR_IO;
    }
    snprintf(arch, sizeof arch, "--offload-arch=%s", target);

    enum { CAP = 160 };
    const char *argv[CAP];
    int n = 0;
    argv[n++] = rk_clang_path();
    argv[n++] = "-x";
    argv[n++] = "hip";
    argv[n++] = "--cuda-device-only";
    argv[n++] = "--no-gpu-bundle-output";
    argv[n++] = arch;
    argv[n++] = "-nogpuinc";
    argv[n++] = "-nogpulib";
    argv[n++] = "-O3";
    argv[n++] = "-mcode-object-version=5";
    argv[n++] = "-ffp-contract=off";
    argv[n++] = "-std=c++17";
    char *store = NULL;
    int rc = rk_split_options(extra, argv, n, CAP - 3, &store, &n);
    if (rc == ROPEKV_ERR_COMPILE && log) rk_buf_printf(log, "clang: too many extra options\n");
    if (rc == ROPEKV_OK) {
        argv[n++] = "-o";
        argv[n++] = co;
        argv[n++] = in;
        argv[n] = NULL;
        if (rk_write_file_at(dfd, in, src, len) != ROPEKV_OK) {
            if (log) rk_buf_printf(log, "clang: cannot write %s/%s\n", dir, in);
            rc = ROPEKV_ERR_IO;
        }
    }
    if (rc == ROPEKV_OK) {
        rk_buf out_log = {0};
        int st = -1;
        rc = rk_run_in(argv, dfd, 0, 0, &out_log, &st);
        if (log && out_log.len) rk_buf_put(log, out_log.p, out_log.len);
        if (rc == ROPEKV_OK && st != 0) {
            const char *t = out_log.len ? out_log.p : "";
            int bad_target = strstr(t, "unsupported HIP gpu architecture") || strstr(t, "invalid target ID") ||
                             strstr(t, "unsupported CUDA gpu architecture") || strstr(t, "invalid offload arch");
            if (log) rk_buf_printf(log, "clang: %s exited with status %d (%s)\n", argv[0], st, arch);
            rc = bad_target ? ROPEKV_ERR_TARGET : ROPEKV_ERR_COMPILE;
        }
        rk_buf_free(&out_log);
        if (rc == ROPEKV_OK) {
            rc = rk_read_file_at(dfd, co, out);
            if (rc == ROPEKV_OK && out->len == 0) {
                rk_code_free(out);
                rc = ROPEKV_ERR_IO;
            }
            if (rc == ROPEKV_ERR_IO && log) rk_buf_printf(log, "clang: no code object at %s/%s\n", dir, co);
        }
    }
    free(store);
    close(dfd);
    rk_rmtmpdir(dir);
    return rc;
}
