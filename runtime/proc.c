/* The process and file helpers of proc.h: running a program without a shell, private temporary
 * directories, whole-file writes and reads, the monotonic clock, option splitting. */
#define _GNU_SOURCE 1 /* pipe2 */
#include "proc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

void rk_code_free(rk_codeobj *c) {
    if (!c) return;
    free(c->data);
    c->data = NULL;
    c->len = 0;
}

double rk_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int rk_run(const char *const argv[], int timeout_s, unsigned flags, rk_buf *out, int *status) {
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
    if (flags & RK_RUN_NO_STDERR) posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    else posix_spawn_file_actions_adddup2(&fa, fd[1], 2);
    sigset_t none, dfl;
    sigemptyset(&none);
    sigemptyset(&dfl);
    sigaddset(&dfl, SIGPIPE);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &dfl);
    short spawn_flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
    if (timeout_s > 0) {
        /* Its own process group, so a kill reaches what it started too (a compiler driver's
         * compiler, assembler and linker). */
        posix_spawnattr_setpgroup(&at, 0);
        spawn_flags |= POSIX_SPAWN_SETPGROUP;
    }
    posix_spawnattr_setflags(&at, spawn_flags);
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
    double deadline = rk_now_ms() + timeout_s * 1e3;
    int timed_out = 0;
    char chunk[8192];
    int rc = ROPEKV_OK;
    for (;;) {
        if (timeout_s > 0) {
            double left = deadline - rk_now_ms();
            struct pollfd p = {.fd = fd[0], .events = POLLIN};
            int k = left > 0 ? poll(&p, 1, left > 1e9 ? 1000000000 : (int)left + 1) : 0;
            if (k < 0 && errno == EINTR) continue;
            if (k == 0) {
                timed_out = 1;
                kill(-pid, SIGKILL);
                kill(pid, SIGKILL);
                break;
            }
        }
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
    if (timed_out) *status = RK_RUN_TIMED_OUT;
    else if (WIFEXITED(ws)) *status = WEXITSTATUS(ws);
    else if (WIFSIGNALED(ws)) *status = RK_RUN_SIGNALED(WTERMSIG(ws));
    return rc;
}

void rk_run_status_text(int status, char *out, size_t cap) {
    if (status == RK_RUN_TIMED_OUT) snprintf(out, cap, "timed out");
    else if (status <= RK_RUN_SIGNALED(1))
        snprintf(out, cap, "killed by signal %d (%s)", RK_RUN_SIGNALED(0) - status,
                 strsignal(RK_RUN_SIGNALED(0) - status));
    else snprintf(out, cap, "exit status %d", status);
}

int rk_mktmpdir(char *path, size_t cap, const char *prefix) {
    const char *base = getenv("TMPDIR");
    if (!base || !*base) base = "/tmp";
    if (!prefix) prefix = "ropekv";
    int n = snprintf(path, cap, "%s/%s-XXXXXX", base, prefix);
    if (n < 0 || (size_t)n >= cap) {
        errno = ENAMETOOLONG;
        return ROPEKV_ERR_IO;
    }
    if (!mkdtemp(path)) {
        /* An unusable $TMPDIR: fall back to /tmp once. */
        if (strcmp(base, "/tmp") == 0) return ROPEKV_ERR_IO;
        int e = errno;
        n = snprintf(path, cap, "/tmp/%s-XXXXXX", prefix);
        if (n < 0 || (size_t)n >= cap || !mkdtemp(path)) {
            errno = e;
            return ROPEKV_ERR_IO;
        }
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

int rk_read_file(const char *path, rk_codeobj *out) {
    out->data = NULL;
    out->len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ROPEKV_ERR_IO;
    /* The size is a first guess: the file may be growing, or be a pipe or a /proc file. */
    struct stat st;
    size_t cap = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 ? (size_t)st.st_size + 1 : 4096;
    unsigned char *d = malloc(cap);
    size_t n = 0;
    int rc = d ? ROPEKV_OK : ROPEKV_ERR_NOMEM;
    while (rc == ROPEKV_OK) {
        if (n + 1 == cap) {
            unsigned char *g = cap > SIZE_MAX / 2 ? NULL : realloc(d, cap * 2);
            if (!g) {
                rc = ROPEKV_ERR_NOMEM;
                break;
            }
            d = g;
            cap *= 2;
        }
        ssize_t r = read(fd, d + n, cap - 1 - n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) rc = ROPEKV_ERR_IO;
        if (r <= 0) break;
        n += (size_t)r;
    }
    int e = errno;
    close(fd);
    if (rc != ROPEKV_OK) {
        free(d);
        errno = rc == ROPEKV_ERR_NOMEM ? ENOMEM : e;
        return rc;
    }
    d[n] = '\0';
    out->data = d;
    out->len = n;
    return ROPEKV_OK;
}
