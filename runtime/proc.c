/* The process and file helpers of proc.h: running a program without a shell, private temporary
 * directories, whole-file writes and reads, the monotonic clock, option splitting. */
#define _GNU_SOURCE 1 /* pipe2, posix_spawn_file_actions_addfchdir_np */
#include "proc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define RK_RUN_POLL_MS 50    /* how often a run with no output looks for the program's exit */
#define RK_RUN_DRAIN_MS 1000 /* how long output may still come once the program is gone */

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

/* environ without TMPDIR, then TMPDIR=. and a NULL (malloc'd; the strings are environ's), or NULL when
 * out of memory. */
static char **env_tmpdir_here(void) {
    size_t n = 0, k = 0;
    while (environ && environ[n]) n++;
    char **env = malloc((n + 2) * sizeof *env);
    if (!env) return NULL;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "TMPDIR=", 7) != 0) env[k++] = environ[i];
    env[k++] = (char *)"TMPDIR=.";
    env[k] = NULL;
    return env;
}

/* One read of the output pipe fd into out (may be NULL; once out cannot grow, *rc is ROPEKV_ERR_NOMEM and the
 * output is still read, so the program never blocks on a full pipe). 0 at the pipe's end (or an error), else 1. */
static int drain(int fd, rk_buf *out, int *rc) {
    char chunk[8192];
    ssize_t n;
    while ((n = read(fd, chunk, sizeof chunk)) < 0 && errno == EINTR) {}
    if (n <= 0) return 0;
    if (out && *rc == ROPEKV_OK) *rc = rk_buf_put(out, chunk, (size_t)n);
    return 1;
}

int rk_run(const char *const argv[], int timeout_s, unsigned flags, rk_buf *out, int *status) {
    return rk_run_in(argv, -1, timeout_s, flags, out, status);
}

int rk_run_in(const char *const argv[], int dirfd, int timeout_s, unsigned flags, rk_buf *out, int *status) {
    *status = -1;
    char **env = environ, cwd[4096], here[8192];
    const char *file = argv[0];
    if (dirfd >= 0) {
        env = env_tmpdir_here();
        if (!env) {
            if (out) rk_buf_printf(out, "%s: out of memory\n", argv[0]);
            return ROPEKV_ERR_NOMEM;
        }
        if (strchr(argv[0], '/') && argv[0][0] != '/' && getcwd(cwd, sizeof cwd)) {
            snprintf(here, sizeof here, "%s/%s", cwd, argv[0]);
            file = here;
        }
    }
    int fd[2];
    if (pipe2(fd, O_CLOEXEC) != 0) {
        if (out) rk_buf_printf(out, "%s: pipe: %s\n", argv[0], strerror(errno));
        if (env != environ) free(env);
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
    if (dirfd >= 0) posix_spawn_file_actions_addfchdir_np(&fa, dirfd);
    sigset_t none, dfl;
    sigemptyset(&none);
    sigemptyset(&dfl);
    sigaddset(&dfl, SIGPIPE);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &dfl);
    /* Its own session, so that its process group is what it starts too (a compiler driver's compiler,
     * assembler and linker, a wrapper's background job): killed as one on a timeout, and once it has
     * exited, so that nothing it left running outlives it holding the output pipe. */
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSID);
    pid_t pid;
    int e = posix_spawnp(&pid, file, &fa, &at, (char *const *)argv, env);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    if (env != environ) free(env);
    close(fd[1]);
    if (e != 0) {
        close(fd[0]);
        char shown[512];
        if (out) rk_buf_printf(out, "%s: cannot run: %s\n", rk_printable(argv[0], shown, sizeof shown), strerror(e));
        return ROPEKV_ERR_IO;
    }
    /* The output is read until the program exits, not until the pipe's end, which what it left running
     * may hold open for as long as it lives. The exit is seen with WNOWAIT, so the pid (and with it the
     * process group's id) stays the program's until the group is killed and the program reaped. */
    const double deadline = rk_now_ms() + timeout_s * 1e3;
    int timed_out = 0, open_ = 1, nap_ms = 1;
    int rc = ROPEKV_OK;
    for (;;) {
        siginfo_t si;
        memset(&si, 0, sizeof si);
        if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 ? si.si_pid == pid : errno != EINTR)
            break; /* exited (or cannot be waited for: waitpid below says why) */
        const double left = timeout_s > 0 ? deadline - rk_now_ms() : 1e9;
        if (left <= 0) {
            timed_out = 1;
            break;
        }
        if (open_) { /* output, or RK_RUN_POLL_MS without any: then look for the exit again */
            const int k = poll(&(struct pollfd){.fd = fd[0], .events = POLLIN}, 1,
                               left < RK_RUN_POLL_MS ? (int)left + 1 : RK_RUN_POLL_MS);
            if (k > 0) open_ = drain(fd[0], out, &rc);
        } else { /* the pipe's end came first: the program is exiting, or lives on without its output */
            const int ms = left < nap_ms ? (int)left + 1 : nap_ms;
            nanosleep(&(struct timespec){.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L}, NULL);
            if (nap_ms < RK_RUN_POLL_MS) nap_ms *= 2;
        }
    }
    kill(-pid, SIGKILL); /* the group: what it left running, or all of it past the limit */
    if (timed_out) kill(pid, SIGKILL);
    int ws = 0;
    while (waitpid(pid, &ws, 0) < 0) {
        if (errno != EINTR) {
            close(fd[0]);
            if (out) rk_buf_printf(out, "%s: waitpid: %s\n", argv[0], strerror(errno));
            return ROPEKV_ERR_IO;
        }
    }
    /* What is still in the pipe, for a bounded time: a process that left the group may still hold it. */
    const double drain_end = rk_now_ms() + RK_RUN_DRAIN_MS;
    while (open_) {
        const double left = drain_end - rk_now_ms();
        if (left <= 0 || poll(&(struct pollfd){.fd = fd[0], .events = POLLIN}, 1, (int)left + 1) == 0) break;
        open_ = drain(fd[0], out, &rc);
    }
    close(fd[0]);
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

const char *rk_tmp_base(void) {
    const char *t = getenv("TMPDIR");
    return t && *t ? t : "/tmp";
}

/* Whether s holds a control character (below 0x20, or 0x7f). */
static int has_control(const char *s) {
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f) return 1;
    return 0;
}

int rk_tmp_check(int need_exec, char *why, size_t cap) {
    const char *base = rk_tmp_base(), *set = getenv("TMPDIR"), *problem = NULL;
    struct stat st;
    struct statvfs vfs;
    char shown[512];
    if (has_control(base)) problem = "holds control characters";
    else if (stat(base, &st) != 0) problem = errno == ENOENT ? "no such directory" : strerror(errno);
    else if (!S_ISDIR(st.st_mode)) problem = "not a directory";
    else if (access(base, W_OK | X_OK) != 0) problem = "not writable";
    else if (need_exec && statvfs(base, &vfs) == 0 && (vfs.f_flag & ST_NOEXEC))
        problem = "on a noexec mount, so the host backend cannot load the kernels it builds there";
    if (!problem) return 0;
    rk_printable(base, shown, sizeof shown);
    if (set && *set) snprintf(why, cap, "TMPDIR=%s: %s", shown, problem);
    else snprintf(why, cap, "%s (TMPDIR is not set): %s", shown, problem);
    return -1;
}

void rk_tmp_prefix(char *out, size_t cap, const char *what) {
    snprintf(out, cap, "ropekv-tmp-%ld-%ld-%s-", (long)getuid(), (long)getpid(), what ? what : "dir");
}

int rk_mktmpdir(char *path, size_t cap, const char *what) {
    char prefix[128];
    rk_tmp_prefix(prefix, sizeof prefix, what);
    int n = snprintf(path, cap, "%s/%sXXXXXX", rk_tmp_base(), prefix);
    if (n < 0 || (size_t)n >= cap) {
        errno = ENAMETOOLONG;
        return ROPEKV_ERR_IO;
    }
    return mkdtemp(path) ? ROPEKV_OK : ROPEKV_ERR_IO; /* mkdtemp makes it 0700 */
}

const char *rk_tmp_failure(char *why, size_t cap) {
    const int e = errno;
    char shown[512];
    if (rk_tmp_check(0, why, cap) != 0) return why;
    snprintf(why, cap, "%s: %s", rk_printable(rk_tmp_base(), shown, sizeof shown), strerror(e));
    return why;
}

int rk_tmp_opendir(const char *path) {
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd < 0) return -1;
    if (fstat(fd, &st) != 0) {
        const int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077) != 0) {
        close(fd);
        errno = EACCES;
        return -1;
    }
    return fd;
}

int rk_tmp_shared(char *why, size_t cap) {
    const char *base = rk_tmp_base(), *set = getenv("TMPDIR");
    char head[256], dir[PATH_MAX], shown[200];
    rk_printable(base, shown, sizeof shown);
    if (set && *set) snprintf(head, sizeof head, "TMPDIR=%s", shown);
    else snprintf(head, sizeof head, "%s (TMPDIR is not set)", shown);
    if (!realpath(base, dir)) { /* what cannot be looked at is not known to be private */
        snprintf(why, cap, "%s: %s", head, strerror(errno));
        return 1;
    }
    for (;;) { /* the directory, then each one above it up to / */
        struct stat st;
        const char *problem = NULL;
        if (stat(dir, &st) != 0) problem = strerror(errno);
        else if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX))
            problem = "is writable by other users and not sticky";
        else if (st.st_uid != geteuid() && st.st_uid != 0) problem = "belongs to another user";
        if (problem) {
            char at[512];
            snprintf(why, cap, "%s: %s %s", head, rk_printable(dir, at, sizeof at), problem);
            return 1;
        }
        char *slash = strrchr(dir, '/');
        if (!slash || slash == dir) {
            if (strcmp(dir, "/") == 0 || !slash) return 0;
            slash[1] = '\0';
        } else {
            *slash = '\0';
        }
    }
}

int rk_fd_path(int fd, const char *name, char *out, size_t cap) {
    struct stat a, b;
    int n = snprintf(out, cap, "/proc/self/fd/%d", fd);
    if (n < 0 || (size_t)n >= cap || stat(out, &a) != 0 || fstat(fd, &b) != 0 || a.st_dev != b.st_dev ||
        a.st_ino != b.st_ino)
        return -1;
    if (name) n = snprintf(out, cap, "/proc/self/fd/%d/%s", fd, name);
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

/* Removes name (in the directory open as dfd) and, when it is a directory, everything under it, never
 * following a symbolic link. Entries that vanish meanwhile (another sweep) are fine. */
static void remove_at(int dfd, const char *name, int depth) {
    if (unlinkat(dfd, name, 0) == 0 || errno == ENOENT || depth > 32) return;
    int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0) close(fd);
        return;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) remove_at(fd, e->d_name, depth + 1);
    closedir(d);
    unlinkat(dfd, name, AT_REMOVEDIR);
}

void rk_rmtmpdir(const char *path) { remove_at(AT_FDCWD, path, 0); }

int rk_tmp_sweep(long max_age_s) {
    char mine[64];
    snprintf(mine, sizeof mine, "ropekv-tmp-%ld-", (long)getuid());
    const size_t n = strlen(mine);
    int dfd = open(rk_tmp_base(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!d) {
        if (dfd >= 0) close(dfd);
        return 0;
    }
    int removed = 0;
    const time_t now = time(NULL);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char *end;
        struct stat st;
        if (strncmp(e->d_name, mine, n) != 0) continue;
        long pid = strtol(e->d_name + n, &end, 10);
        if (end == e->d_name + n || *end != '-' || pid <= 0) continue;
        if (fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || st.st_uid != getuid()) continue;
        if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) continue; /* symbolic links included */
        if (now - st.st_mtime <= max_age_s) continue;
        if (pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* alive */
        remove_at(dfd, e->d_name, 0);
        removed++;
    }
    closedir(d);
    return removed;
}

int rk_write_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return ROPEKV_ERR_IO;
        if (w == 0) {
            errno = EIO;
            return ROPEKV_ERR_IO;
        }
        c += w;
        n -= (size_t)w;
    }
    return ROPEKV_OK;
}

static int write_file(int dirfd, const char *path, int flags, const void *p, size_t n) {
    int fd = openat(dirfd, path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | flags, 0600);
    if (fd < 0) return ROPEKV_ERR_IO;
    if (rk_write_all(fd, p, n) != ROPEKV_OK) {
        const int e = errno;
        close(fd);
        errno = e;
        return ROPEKV_ERR_IO;
    }
    return close(fd) == 0 ? ROPEKV_OK : ROPEKV_ERR_IO;
}

int rk_write_file(const char *path, const void *p, size_t n) { return write_file(AT_FDCWD, path, 0, p, n); }

int rk_write_file_at(int dirfd, const char *name, const void *p, size_t n) {
    return write_file(dirfd, name, O_NOFOLLOW, p, n);
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

static int read_file(int dirfd, const char *path, int flags, rk_codeobj *out) {
    out->data = NULL;
    out->len = 0;
    int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC | flags);
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

int rk_read_file(const char *path, rk_codeobj *out) { return read_file(AT_FDCWD, path, 0, out); }

int rk_read_file_at(int dirfd, const char *name, rk_codeobj *out) { return read_file(dirfd, name, O_NOFOLLOW, out); }
