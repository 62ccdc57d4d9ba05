/* The host C++ compiler driver: emitted source -> $CXX -> shared object -> dlopen'd entry points. */
#include "host_compile.h"

#include "proc.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *rk_host_compiler(void) {
    const char *cxx = getenv("CXX");
    return cxx && *cxx ? cxx : "c++";
}

/* Seconds a compiler run may take: $ROPEKV_COMPILE_TIMEOUT (a positive integer; 0 means no limit),
 * default RK_COMPILE_TIMEOUT_DEFAULT. */
int rk_host_compile_timeout(void) {
    const char *v = getenv("ROPEKV_COMPILE_TIMEOUT");
    char *end;
    if (!v || !*v) return RK_COMPILE_TIMEOUT_DEFAULT;
    errno = 0;
    long t = strtol(v, &end, 10);
    if (*end || errno || t < 0 || t > 86400 * 365) return RK_COMPILE_TIMEOUT_DEFAULT;
    return (int)t;
}

int rk_host_compiler_version(char *line, size_t cap) {
    int timeout = rk_host_compile_timeout();
    if (!line || !cap) return ROPEKV_ERR_COMPILE;
    line[0] = '\0';
    const char *argv[] = {rk_host_compiler(), "--version", NULL};
    rk_buf out = {0};
    int status = -1;
    int rc = rk_run(argv, timeout > 0 && timeout < 10 ? timeout : 10, RK_RUN_NO_STDERR, &out, &status);
    if (rc == ROPEKV_OK && status == 0 && out.len) snprintf(line, cap, "%.*s", (int)strcspn(out.p, "\n"), out.p);
    rk_buf_free(&out);
    if (rc == ROPEKV_ERR_NOMEM) return rc;
    return status == 0 && line[0] ? ROPEKV_OK : ROPEKV_ERR_COMPILE;
}

int rk_host_load(const char *so_path, const char *name, rk_host_kernel *out, char *log, size_t log_cap) {
    char wide[256];
    memset(out, 0, sizeof *out);
    snprintf(wide, sizeof wide, "%s_i64", name);
    out->so = dlopen(so_path, RTLD_NOW | RTLD_LOCAL);
    if (!out->so) {
        snprintf(log, log_cap, "dlopen %s: %s", so_path, dlerror());
        return ROPEKV_ERR_COMPILE;
    }
    /* POSIX allows converting dlsym's result to a function pointer through a union-free cast. */
    *(void **)&out->entry32 = dlsym(out->so, name);
    *(void **)&out->entry64 = dlsym(out->so, wide);
    if (!out->entry32 && !out->entry64) { /* a build of one entry (RK_ENTRIES) lacks the other */
        snprintf(log, log_cap, "%s: kernel %s not found", so_path, name);
        rk_host_unload(out);
        return ROPEKV_ERR_COMPILE;
    }
    return ROPEKV_OK;
}

int rk_host_build(const char *src, size_t len, const char *name, const char *dir, rk_host_kernel *out, char *log,
                  size_t log_cap) {
    char cpp[4096], so[4096], tmp[4096];
    int pid = (int)getpid();
    snprintf(cpp, sizeof cpp, "%s/%s.%d.cpp", dir, name, pid);
    snprintf(tmp, sizeof tmp, "%s/%s.%d.so.tmp", dir, name, pid);
    snprintf(so, sizeof so, "%s/%s.so", dir, name);
    if (log && log_cap) log[0] = '\0';

    if (rk_write_file(cpp, src, len) != ROPEKV_OK) {
        snprintf(log, log_cap, "cannot write %s: %s", cpp, strerror(errno));
        unlink(cpp);
        return ROPEKV_ERR_IO;
    }
    const char *argv[] = {rk_host_compiler(),
                          "-std=c++17",
                          "-O2",
                          "-fPIC",
                          "-shared",
                          "-ffp-contract=off",
                          "-fno-math-errno",
                          "-w",
                          "-x",
                          "c++",
                          "-o",
                          tmp,
                          cpp,
                          NULL};
    int timeout = rk_host_compile_timeout();
    rk_buf out_log = {0};
    int status = -1;
    int rc = rk_run(argv, timeout, 0, &out_log, &status);
    if (rc == ROPEKV_ERR_NOMEM) {
        snprintf(log, log_cap, "out of memory reading the output of %s", argv[0]);
    } else if (status == RK_RUN_TIMED_OUT) {
        snprintf(log, log_cap, "%s timed out after %d s (ROPEKV_COMPILE_TIMEOUT) and was killed", argv[0], timeout);
        rc = ROPEKV_ERR_COMPILE;
    } else if (rc != ROPEKV_OK || status != 0) { /* could not be started, or failed: its words say why */
        snprintf(log, log_cap, "%s", out_log.len ? out_log.p : "");
        rc = ROPEKV_ERR_COMPILE;
    } else if (rename(tmp, so) != 0) {
        if (errno == ENOENT) {
            snprintf(log, log_cap, "%s exited 0 without writing %s", argv[0], tmp);
            rc = ROPEKV_ERR_COMPILE;
        } else {
            snprintf(log, log_cap, "cannot rename %s: %s", tmp, strerror(errno));
            rc = ROPEKV_ERR_IO;
        }
    }
    rk_buf_free(&out_log);
    unlink(cpp);
    unlink(tmp);
    return rc == ROPEKV_OK ? rk_host_load(so, name, out, log, log_cap) : rc;
}

void rk_host_unload(rk_host_kernel *k) {
    if (k->so) dlclose(k->so);
    memset(k, 0, sizeof *k);
}
