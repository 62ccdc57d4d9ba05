/* The process and file helpers the library needs (the compiler drivers and the host backend), also
 * used by tools/, tests/ and bench/ so the tree has one of each: running a program without a shell,
 * private temporary directories, writing and reading whole files, the monotonic clock, option
 * splitting, and the byte block a compiler hands back.
 *
 * Every function is thread-safe and keeps no state. */
#ifndef RK_PROC_H
#define RK_PROC_H

#include <stddef.h>

#include "rk.h"

/* A compiled code object (CUBIN, AMDGPU ELF, host shared object) or any other malloc'd byte block.
 * Named rk_codeobj: ropekv_status is the error-code enum of rk.h, and C shares one tag namespace
 * between enums and structs. */
typedef struct rk_codeobj {
    unsigned char *data; /* malloc'd */
    size_t len;
} rk_codeobj;

/* Frees c->data and empties c (NULL is fine). */
void rk_code_free(rk_codeobj *c);

/* Monotonic clock in milliseconds. */
double rk_now_ms(void);

/* rk_run flags */
enum {
    RK_RUN_NO_STDERR = 1, /* the program's stderr goes to /dev/null, not to out */
};
#define RK_RUN_TIMED_OUT (-2)
#define RK_RUN_SIGNALED(sig) (-1000 - (sig)) /* *status of a program killed by signal sig */
/* Runs argv[0] (searched in PATH when it has no '/') with argv, no shell, stdin from /dev/null,
 * stdout and stderr appended to out (may be NULL). ROPEKV_OK when it ran to an exit (status in
 * *status: the exit code, or RK_RUN_SIGNALED(signal)); ROPEKV_ERR_IO when it could not be started (reason in
 * out); ROPEKV_ERR_NOMEM when out could not hold its output (it still ran to its end).
 * The program runs in its own session, whose process group is what it starts too. The run ends when
 * the program exits, not when its output pipe closes: then the group is killed (what it left running,
 * such as a wrapper's background job holding the pipe) and the output still in the pipe read for at
 * most a second. timeout_s > 0: when it has not exited after timeout_s seconds the whole group is
 * killed and *status is RK_RUN_TIMED_OUT (out keeps what it wrote until then). */
int rk_run(const char *const argv[], int timeout_s, unsigned flags, rk_buf *out, int *status);
/* rk_run with the directory open as dirfd as the program's current directory and TMPDIR=. in its
 * environment, so that it reaches its files and makes its own temporary ones through the directory
 * itself, whatever another user renames meanwhile in the directories above it. argv[0] relative to
 * the caller's current directory ("bin/c++") is run from there. */
int rk_run_in(const char *const argv[], int dirfd, int timeout_s, unsigned flags, rk_buf *out, int *status);
/* How a run ended, for people: "exit status 1", "killed by signal 9 (Killed)", "timed out". */
void rk_run_status_text(int status, char *out, size_t cap);

/* Temporary files and directories live in $TMPDIR (set and not empty), else /tmp, named
 * ropekv-tmp-<uid>-<pid>-<what>-XXXXXX, so that rk_tmp_sweep can find the ones a killed process
 * left behind. */
const char *rk_tmp_base(void);
/* 0 when rk_tmp_base() is a directory this process can create files in and, with need_exec, load
 * code from (not on a noexec mount); else -1 and why names the variable and the reason:
 * "TMPDIR=/x: no such directory". */
int rk_tmp_check(int need_exec, char *why, size_t cap);
/* The name prefix of this process's temporary entries ("ropekv-tmp-1000-4242-<what>-"). */
void rk_tmp_prefix(char *out, size_t cap, const char *what);
/* Creates a private (0700) temporary directory rk_tmp_base()/<rk_tmp_prefix(what)>XXXXXX (what NULL:
 * "dir"). ROPEKV_OK or ROPEKV_ERR_IO (errno set; rk_tmp_check says why in words). */
int rk_mktmpdir(char *path, size_t cap, const char *what);
/* Why rk_mktmpdir just failed, in words, into why: rk_tmp_check's reason (naming TMPDIR) when it has
 * one, else the directory and errno's text. Returns why. */
const char *rk_tmp_failure(char *why, size_t cap);
/* Opens path, a directory rk_mktmpdir made, checked to be private: a directory (not a symbolic link)
 * owned by this user that no other user may read, write or enter. The descriptor (close-on-exec), or
 * -1 with errno set (EACCES when it is not private). */
int rk_tmp_opendir(const char *path);
/* 1 when another user could rename or replace entries of rk_tmp_base() (its own temporary directories
 * included), so that a path through it may lead elsewhere by the time it is used: it or a directory
 * above it is writable by group or others without the sticky bit, or is owned by a user other than
 * this one and root; why says which ("TMPDIR=/x: /x is writable by other users and not sticky").
 * Else 0. */
int rk_tmp_shared(char *why, size_t cap);
/* The path of what is open as fd (name NULL), or of the entry name in the directory open as fd, through
 * /proc/self/fd/ ("/proc/self/fd/7/kernel.so"): a path that leads there whatever is renamed meanwhile.
 * 0, or -1 where /proc is not mounted (or the path does not lead to fd). */
int rk_fd_path(int fd, const char *name, char *out, size_t cap);
/* Removes path and everything under it, never following a symbolic link. */
void rk_rmtmpdir(const char *path);
/* Removes the temporary entries of processes that are gone: entries of rk_tmp_base() named
 * ropekv-tmp-<our uid>-<pid>-..., owned by our uid, not symbolic links (never followed), not modified
 * for more than max_age_s seconds, whose pid is no running process. Two processes sweeping at once
 * is harmless. Returns the number removed. */
int rk_tmp_sweep(long max_age_s);

/* Writes n bytes to path (created 0600, truncated); ROPEKV_OK or ROPEKV_ERR_IO (errno set). */
int rk_write_file(const char *path, const void *p, size_t n);
/* rk_write_file of the entry name in the directory open as dirfd (AT_FDCWD: path), never through a
 * symbolic link. */
int rk_write_file_at(int dirfd, const char *name, const void *p, size_t n);
/* Writes all n bytes to fd; ROPEKV_OK or ROPEKV_ERR_IO (errno set). */
int rk_write_all(int fd, const void *p, size_t n);

/* Reads the whole file at path into out->data (malloc'd, followed by a NUL byte that out->len does
 * not count, so a text file reads as a string). ROPEKV_OK (an empty file gives len 0),
 * ROPEKV_ERR_IO (cannot open or read: errno set) or ROPEKV_ERR_NOMEM. out is empty on failure. */
int rk_read_file(const char *path, rk_codeobj *out);
/* rk_read_file of the entry name in the directory open as dirfd, never through a symbolic link. */
int rk_read_file_at(int dirfd, const char *name, rk_codeobj *out);

/* Splits extra at spaces into a NULL-terminated array appended after the n entries already in
 * argv (capacity cap, including the NULL); the strings live in *store (free it). ROPEKV_OK, ROPEKV_ERR_NOMEM,
 * or ROPEKV_ERR_COMPILE when there are too many options. */
int rk_split_options(const char *extra, const char **argv, int n, int cap, char **store, int *count);

#endif
