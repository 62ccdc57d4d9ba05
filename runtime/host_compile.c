/* The host C++ compiler driver: emitted source -> $CXX -> shared object -> dlopen'd entry points. */
#define _GNU_SOURCE 1 /* memfd_create */
#include "host_compile.h"

#include "proc.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MFD_EXEC
#define MFD_EXEC 0x0010U /* Linux 6.3 (linux/memfd.h) */
#endif

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

/* dlopen of path, and the entry points <name> and <name>_i64 (at least one). */
static int open_so(const char *path, const char *name, rk_host_kernel *out, char *log, size_t log_cap) {
    char wide[256];
    snprintf(wide, sizeof wide, "%s_i64", name);
    out->so = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!out->so) {
        snprintf(log, log_cap, "dlopen %s: %s", path, dlerror());
        return ROPEKV_ERR_COMPILE;
    }
    /* POSIX allows converting dlsym's result to a function pointer through a union-free cast. */
    *(void **)&out->entry32 = dlsym(out->so, name);
    *(void **)&out->entry64 = dlsym(out->so, wide);
    if (!out->entry32 && !out->entry64) { /* a build of one entry (RK_ENTRIES) lacks the other */
        snprintf(log, log_cap, "%s: kernel %s not found", path, name);
        rk_host_unload(out);
        return ROPEKV_ERR_COMPILE;
    }
    return ROPEKV_OK;
}

/* A path through /proc/self/fd/ to what is open as fd (name NULL: fd itself; else its directory entry
 * name) under which no object is loaded: dlopen hands back the object already loaded under the name it
 * is given, and a /proc/self/fd/N of a loaded object is free for another file once N is closed. *used
 * is fd, or a duplicate of it to close after the dlopen. -1 where /proc is not mounted. */
static int fresh_fd_path(int fd, const char *name, char *path, size_t cap, int *used) {
    int n = fd;
    while (rk_fd_path(n, name, path, cap) == 0) {
        void *h = dlopen(path, RTLD_LAZY | RTLD_NOLOAD);
        if (!h) {
            (void)dlerror();
            *used = n;
            return 0;
        }
        dlclose(h); /* taken: try the lowest free descriptor above n */
        int next = fcntl(fd, F_DUPFD_CLOEXEC, n + 1);
        if (n != fd) close(n);
        if (next < 0) return -1;
        n = next;
    }
    if (n != fd) close(n);
    return -1;
}

/* Loads the shared object from a private directory under rk_tmp_base(), where no memfd can be loaded:
 * through /proc/self/fd/ of the directory, else by its path where no other user can rename entries on
 * the way (rk_tmp_shared), else not at all. */
static int load_from_dir(const void *code, size_t len, const char *name, rk_host_kernel *out, char *log,
                         size_t log_cap) {
    static const char so[] = "kernel.so";
    char dir[4096], path[4400], why[1024];
    if (rk_tmp_check(1, why, sizeof why) != 0) { /* one message naming TMPDIR, before anything fails */
        snprintf(log, log_cap, "%s", why);
        return ROPEKV_ERR_IO;
    }
    if (rk_mktmpdir(dir, sizeof dir, "load") != ROPEKV_OK) {
        snprintf(log, log_cap, "cannot create a directory under %s: %s", rk_tmp_base(), strerror(errno));
        return ROPEKV_ERR_IO;
    }
    int dfd = rk_tmp_opendir(dir), used = -1, rc = ROPEKV_ERR_IO;
    if (dfd < 0) {
        snprintf(log, log_cap, "%s: %s", dir,
                 errno == EACCES ? "not a private directory of this user" : strerror(errno));
        rmdir(dir);
        return ROPEKV_ERR_IO;
    }
    if (rk_write_file_at(dfd, so, code, len) != ROPEKV_OK) {
        snprintf(log, log_cap, "cannot write %s/%s: %s", dir, so, strerror(errno));
    } else if (fresh_fd_path(dfd, so, path, sizeof path, &used) == 0) {
        rc = open_so(path, name, out, log, log_cap);
        if (used != dfd) close(used);
    } else if (rk_tmp_shared(why, sizeof why)) {
        snprintf(log, log_cap,
                 "%s; without /proc/self/fd to load the kernel through, another user could replace it before it "
                 "is loaded: use a TMPDIR that only this user can write to (or a sticky one, like /tmp)",
                 why);
    } else {
        snprintf(path, sizeof path, "%s/%s", dir, so);
        rc = open_so(path, name, out, log, log_cap);
    }
    unlinkat(dfd, so, 0); /* the mapping stays valid after the name is gone */
    close(dfd);
    rmdir(dir);
    return rc;
}

int rk_host_load(const void *code, size_t len, const char *name, rk_host_kernel *out, char *log, size_t log_cap) {
    char label[64], path[64];
    memset(out, 0, sizeof *out);
    /* An anonymous file in memory, loaded through /proc/self/fd/: no path another user can touch.
     * MFD_EXEC: executable where vm.memfd_noexec would seal it otherwise; a kernel before 6.3 knows
     * neither (EINVAL), and its memfds are executable. */
    snprintf(label, sizeof label, "ropekv:%s", name);
    int fd = memfd_create(label, MFD_CLOEXEC | MFD_EXEC), used = -1;
    if (fd < 0 && errno == EINVAL) fd = memfd_create(label, MFD_CLOEXEC);
    if (fd >= 0) {
        if (rk_write_all(fd, code, len) != ROPEKV_OK) {
            snprintf(log, log_cap, "cannot write %s to memory: %s", name, strerror(errno));
            close(fd);
            return ROPEKV_ERR_IO;
        }
        if (fresh_fd_path(fd, NULL, path, sizeof path, &used) == 0) {
            int rc = open_so(path, name, out, log, log_cap);
            if (used != fd) close(used);
            close(fd);
            return rc;
        }
        close(fd);
    }
    return load_from_dir(code, len, name, out, log, log_cap);
}

int rk_host_build(const char *src, size_t len, const char *name, const char *dir, rk_host_kernel *out, rk_codeobj *code,
                  char *log, size_t log_cap) {
    char cpp[320], so[320], tmp[320];
    int pid = (int)getpid();
    /* Names in dir, which the compiler reaches as its current directory (rk_run_in), never by a path. */
    snprintf(cpp, sizeof cpp, "%.256s.%d.cpp", name, pid);
    snprintf(tmp, sizeof tmp, "%.256s.%d.so.tmp", name, pid);
    snprintf(so, sizeof so, "%.256s.so", name);
    memset(out, 0, sizeof *out);
    if (code) *code = (rk_codeobj){0};
    if (log && log_cap) log[0] = '\0';

    int dfd = rk_tmp_opendir(dir);
    if (dfd < 0) {
        snprintf(log, log_cap, "%s: %s", dir,
                 errno == EACCES ? "not a private directory of this user" : strerror(errno));
        return ROPEKV_ERR_IO;
    }
    if (rk_write_file_at(dfd, cpp, src, len) != ROPEKV_OK) {
        snprintf(log, log_cap, "cannot write %s/%s: %s", dir, cpp, strerror(errno));
        unlinkat(dfd, cpp, 0);
        close(dfd);
        return ROPEKV_ERR_IO;
    }
    static const char *const options[] = {"-std=c++17",      "-O2", "-fPIC", "-shared", "-ffp-contract=off",
                                          "-fno-math-errno", "-w",  "-x",    "c++",     "-o"};
    const char *argv[128];
    char *store, how[96], cxx[256]; /* $CXX as messages show it */
    rk_printable(rk_host_compiler(), cxx, sizeof cxx);
    int n, rc = rk_host_compiler_argv(argv, 128 - 13, &store, &n);
    if (rc != ROPEKV_OK) {
        snprintf(log, log_cap, "$CXX (%s): %s", cxx, rc == ROPEKV_ERR_NOMEM ? "out of memory" : "too many words");
        free(store);
        unlinkat(dfd, cpp, 0);
        close(dfd);
        return rc;
    }
    for (size_t i = 0; i < sizeof options / sizeof options[0]; i++) argv[n++] = options[i];
    argv[n++] = tmp;
    argv[n++] = cpp;
    argv[n] = NULL;
    int timeout = rk_host_compile_timeout();
    rk_buf out_log = {0};
    rk_codeobj built = {0};
    int status = -1;
    rc = rk_run_in(argv, dfd, timeout, 0, &out_log, &status);
    rk_run_status_text(status, how, sizeof how);
    if (rc == ROPEKV_ERR_NOMEM) {
        snprintf(log, log_cap, "out of memory running %s", cxx);
    } else if (status == RK_RUN_TIMED_OUT) {
        snprintf(log, log_cap, "%s timed out after %d s (ROPEKV_COMPILE_TIMEOUT) and was killed", cxx, timeout);
        rc = ROPEKV_ERR_COMPILE;
    } else if (rc != ROPEKV_OK) { /* could not be started: rk_run's words say why */
        snprintf(log, log_cap, "%s", out_log.len ? out_log.p : "");
        rc = ROPEKV_ERR_COMPILE;
    } else if (status != 0) {
        snprintf(log, log_cap, "%s failed (%s)%s%s", cxx, how, out_log.len ? ":\n" : ", printing nothing",
                 out_log.len ? out_log.p : "");
        rc = ROPEKV_ERR_COMPILE;
    } else if (renameat(dfd, tmp, dfd, so) != 0) {
        if (errno == ENOENT) {
            snprintf(log, log_cap, "%s exited 0 without writing %s/%s", cxx, dir, tmp);
            rc = ROPEKV_ERR_COMPILE;
        } else {
            snprintf(log, log_cap, "cannot rename %s/%s: %s", dir, tmp, strerror(errno));
            rc = ROPEKV_ERR_IO;
        }
    } else if ((rc = rk_read_file_at(dfd, so, &built)) != ROPEKV_OK) {
        if (rc == ROPEKV_ERR_NOMEM) snprintf(log, log_cap, "out of memory reading %s/%s", dir, so);
        else snprintf(log, log_cap, "cannot read %s/%s: %s", dir, so, strerror(errno));
    }
    rk_buf_free(&out_log);
    free(store);
    unlinkat(dfd, cpp, 0);
    unlinkat(dfd, tmp, 0);
    close(dfd);
    /* Loaded from the bytes read through the directory, never from a path. */
    if (rc == ROPEKV_OK) rc = rk_host_load(built.data, built.len, name, out, log, log_cap);
    if (rc == ROPEKV_OK && code) *code = built;
    else rk_code_free(&built);
    return rc;
}

void rk_host_unload(rk_host_kernel *k) {
    if (k->so) dlclose(k->so);
    memset(k, 0, sizeof *k);
}
