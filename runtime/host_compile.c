/* The host C++ compiler driver: emitted source -> $CXX -> shared object -> dlopen'd entry points. */
#include "host_compile.h"

#include "proc.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

const char *rk_host_compiler(void) {
    const char *cxx = getenv("CXX");
    return cxx && *cxx ? cxx : "c++";
}

/* The start of the file at path as a string in log (empty when it cannot be read). */
static void read_log(const char *path, char *log, size_t cap) {
    if (!log || !cap) return;
    rk_codeobj f;
    if (rk_read_file(path, &f) != ROPEKV_OK) {
        log[0] = '\0';
        return;
    }
    snprintf(log, cap, "%s", (const char *)f.data);
    rk_code_free(&f);
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

/* Waits up to `seconds` (< 0: no limit) for the child to change state: poll on a pidfd where the
 * kernel has them, else short sleeps. Returns waitpid's result (0 when the time is up). */
static pid_t wait_child(pid_t pid, int *status, double seconds) {
    double deadline = rk_now_ms() + seconds * 1e3;
#ifdef SYS_pidfd_open
    int pfd = seconds >= 0 ? (int)syscall(SYS_pidfd_open, pid, 0) : -1;
#else
    int pfd = -1;
#endif
    for (long nap_us = 1000;;) {
        pid_t r = waitpid(pid, status, seconds < 0 ? 0 : WNOHANG);
        if (r != 0 && !(r < 0 && errno == EINTR)) {
            if (pfd >= 0) close(pfd);
            return r;
        }
        if (r < 0) continue;
        double left = (deadline - rk_now_ms()) / 1e3;
        if (left <= 0) {
            if (pfd >= 0) close(pfd);
            return 0;
        }
        if (pfd >= 0) {
            struct pollfd p = {.fd = pfd, .events = POLLIN};
            (void)poll(&p, 1, left > 1e6 ? 1000000000 : (int)(left * 1000) + 1);
        } else {
            struct timespec ts = {0, nap_us * 1000};
            nanosleep(&ts, NULL);
            if (nap_us < 50000) nap_us *= 2;
        }
    }
}

/* Runs argv with stderr and stdout sent to log_path, in its own process group; returns the exit
 * status, -1 when it could not be run or died from a signal, or RUN_TIMED_OUT when it ran longer
 * than timeout_s seconds (0: no limit): then the whole group (the driver and the compiler, assembler
 * and linker it started) is killed. */
#define RUN_TIMED_OUT (-2)
static int run_compiler(char *const argv[], const char *log_path, int with_stderr, int timeout_s) {
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        setpgid(0, 0);
        int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        if (!with_stderr && (fd = open("/dev/null", O_WRONLY)) >= 0) {
            dup2(fd, 2);
            close(fd);
        }
        execvp(argv[0], argv);
        fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    setpgid(pid, pid); /* also here: the group must exist before a kill can name it */
    int status;
    pid_t r = wait_child(pid, &status, timeout_s > 0 ? (double)timeout_s : -1.0);
    if (r == 0) {
        kill(-pid, SIGKILL);
        kill(pid, SIGKILL);
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
        return RUN_TIMED_OUT;
    }
    if (r < 0) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int rk_host_compiler_version(char *line, size_t cap) {
    const char *t = getenv("TMPDIR");
    char path[4096];
    int timeout = rk_host_compile_timeout();
    if (!line || !cap) return -1;
    line[0] = '\0';
    snprintf(path, sizeof path, "%s/ropekv-cxx-XXXXXX", t && *t ? t : "/tmp");
    int fd = mkstemp(path);
    if (fd < 0) return -1;
    close(fd);
    char *argv[] = {(char *)rk_host_compiler(), "--version", NULL};
    int status = run_compiler(argv, path, 0, timeout > 0 && timeout < 10 ? timeout : 10);
    read_log(path, line, cap);
    unlink(path);
    line[strcspn(line, "\n")] = '\0';
    return status == 0 && line[0] ? 0 : -1;
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

int rk_host_build(const char *src, size_t len, const char *name, const char *dir, rk_host_kernel *out,
                  char *log, size_t log_cap) {
    char cpp[4096], so[4096], tmp[4096], logp[4096];
    int pid = (int)getpid();
    snprintf(cpp, sizeof cpp, "%s/%s.%d.cpp", dir, name, pid);
    snprintf(tmp, sizeof tmp, "%s/%s.%d.so.tmp", dir, name, pid);
    snprintf(logp, sizeof logp, "%s/%s.%d.log", dir, name, pid);
    snprintf(so, sizeof so, "%s/%s.so", dir, name);
    if (log && log_cap) log[0] = '\0';

    if (rk_write_file(cpp, src, len) != ROPEKV_OK) {
        snprintf(log, log_cap, "cannot write %s: %s", cpp, strerror(errno));
        unlink(cpp);
        return ROPEKV_ERR_IO;
    }
    char *argv[] = {(char *)rk_host_compiler(), "-std=c++17", "-O2", "-fPIC", "-shared", "-ffp-contract=off",
                    "-fno-math-errno", "-w", "-x", "c++", "-o", tmp, cpp, NULL};
    int timeout = rk_host_compile_timeout();
    int status = run_compiler(argv, logp, 1, timeout);
    int rc = ROPEKV_OK;
    if (status == RUN_TIMED_OUT) {
        snprintf(log, log_cap, "%s timed out after %d s (ROPEKV_COMPILE_TIMEOUT) and was killed", argv[0], timeout);
        rc = ROPEKV_ERR_COMPILE;
    } else if (status != 0) {
        read_log(logp, log, log_cap);
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
    unlink(cpp);
    unlink(logp);
    unlink(tmp);
    return rc == ROPEKV_OK ? rk_host_load(so, name, out, log, log_cap) : rc;
}

void rk_host_unload(rk_host_kernel *k) {
    if (k->so) dlclose(k->so);
    memset(k, 0, sizeof *k);
}
