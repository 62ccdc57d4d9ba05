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

int rk_host_compile_timeout(void) { return (int)rk_env_number(RK_ENV_COMPILE_TIMEOUT); }

int rk_host_compiler_argv(const char **argv, int cap, char **store, int *n) {
    int rc = rk_split_options(rk_host_compiler(), argv, 0, cap, store, n);
    if (rc == ROPEKV_OK && *n == 0) { /* $CXX of blanks only */
        argv[(*n)++] = "c++";
        argv[*n] = NULL;
    }
    return rc;
}

int rk_host_compiler_version(char *line, size_t cap) {
    int timeout = rk_host_compile_timeout();
    if (!line || !cap) return ROPEKV_ERR_COMPILE;
    line[0] = '\0';
    const char *argv[64];
    char *store;
    int n;
    int rc = rk_host_compiler_argv(argv, 62, &store, &n);
    if (rc != ROPEKV_OK) {
        free(store);
        return rc;
    }
    argv[n++] = "--version";
    argv[n] = NULL;
    rk_buf out = {0};
    int status = -1;
    rc = rk_run(argv, timeout > 0 && timeout < 10 ? timeout : 10, RK_RUN_NO_STDERR, &out, &status);
    free(store);
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
    static const char *const options[] = {"-std=c++17",      "-O2", "-fPIC", "-shared", "-ffp-contract=off",
                                          "-fno-math-errno", "-w",  "-x",    "c++",     "-o"};
    const char *argv[128];
    char *store, how[96];
    int n, rc = rk_host_compiler_argv(argv, 128 - 13, &store, &n);
    if (rc != ROPEKV_OK) {
        snprintf(log, log_cap, "$CXX (%s): %s", rk_host_compiler(),
                 rc == ROPEKV_ERR_NOMEM ? "out of memory" : "too many words");
        free(store);
        unlink(cpp);
        return rc;
    }
    for (size_t i = 0; i < sizeof options / sizeof options[0]; i++) argv[n++] = options[i];
    argv[n++] = tmp;
    argv[n++] = cpp;
    argv[n] = NULL;
    int timeout = rk_host_compile_timeout();
    rk_buf out_log = {0};
    int status = -1;
    rc = rk_run(argv, timeout, 0, &out_log, &status);
    rk_run_status_text(status, how, sizeof how);
    if (rc == ROPEKV_ERR_NOMEM) {
        snprintf(log, log_cap, "out of memory reading the output of %s", rk_host_compiler());
    } else if (status == RK_RUN_TIMED_OUT) {
        snprintf(log, log_cap, "%s timed out after %d s (ROPEKV_COMPILE_TIMEOUT) and was killed", rk_host_compiler(),
                 timeout);
        rc = ROPEKV_ERR_COMPILE;
    } else if (rc != ROPEKV_OK) { /* could not be started: rk_run's words say why */
        snprintf(log, log_cap, "%s", out_log.len ? out_log.p : "");
        rc = ROPEKV_ERR_COMPILE;
    } else if (status != 0) {
        snprintf(log, log_cap, "%s failed (%s)%s%s", rk_host_compiler(), how,
                 out_log.len ? ":\n" : ", printing nothing", out_log.len ? out_log.p : "");
        rc = ROPEKV_ERR_COMPILE;
    } else if (rename(tmp, so) != 0) {
        if (errno == ENOENT) {
            snprintf(log, log_cap, "%s exited 0 without writing %s", rk_host_compiler(), tmp);
            rc = ROPEKV_ERR_COMPILE;
        } else {
            snprintf(log, log_cap, "cannot rename %s: %s", tmp, strerror(errno));
            rc = ROPEKV_ERR_IO;
        }
    }
    rk_buf_free(&out_log);
    free(store);
    unlink(cpp);
    unlink(tmp);
    return rc == ROPEKV_OK ? rk_host_load(so, name, out, log, log_cap) : rc;
}

void rk_host_unload(rk_host_kernel *k) {
    if (k->so) dlclose(k->so);
    memset(k, 0, sizeof *k);
}
