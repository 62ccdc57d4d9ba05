/* The host C++ compiler driver, the host backend's compiler as nvrtc is the cuda backend's: an
 * emitted kernel source -> a shared object built with $CXX (killed past a time limit) -> its entry
 * points, loaded with dlopen. The backend table entry that uses it is backend_host.c; the kernel
 * runs its whole grid as a loop when an entry point is called. */
#ifndef RK_HOST_COMPILE_H
#define RK_HOST_COMPILE_H

#include <stddef.h>

#include "env.h"
#include "proc.h"
#include "rk.h"

typedef struct rk_host_kernel {
    void *so;                 /* dlopen handle */
    void (*entry32)(rk_args); /* <name>: 32-bit index math (NULL when built without it) */
    void (*entry64)(rk_args); /* <name>_i64 (NULL when built without it) */
} rk_host_kernel;

/* The compiler command: $CXX if set, else "c++". It may carry arguments ("ccache g++",
 * "clang++ -stdlib=libc++"): split at blanks, no shell, quotes not interpreted. */
const char *rk_host_compiler(void);
/* The command's words in argv[0..*n) followed by a NULL (capacity cap); they live in *store (free
 * it, also on failure). ROPEKV_OK, ROPEKV_ERR_NOMEM, or ROPEKV_ERR_COMPILE (too many words). */
int rk_host_compiler_argv(const char **argv, int cap, char **store, int *n);

/* Seconds one compiler run may take before it is killed: $ROPEKV_COMPILE_TIMEOUT (0: no limit),
 * default RK_COMPILE_TIMEOUT_DEFAULT (env.h). Read on every compile. */
int rk_host_compile_timeout(void);

/* The first line of `$CXX --version` (run like a compile, with at most 10 s; its stderr is not
 * read): ROPEKV_OK; ROPEKV_ERR_NOMEM; ROPEKV_ERR_COMPILE, with line empty, when the compiler cannot be
 * run, fails or hangs. */
int rk_host_compiler_version(char *line, size_t cap);

/* Compiles src (a full emitted source defining kernel `name`) into dir/<name>.so and loads it (as
 * rk_host_load does, from the bytes read back); with code not NULL, hands back those bytes too. dir is a
 * private directory of this user (rk_mktmpdir; ROPEKV_ERR_IO otherwise): the compiler runs in it
 * (rk_run_in) and every file is reached through it, never through a path another user could redirect.
 * On failure returns ROPEKV_ERR_IO (cannot write), or ROPEKV_ERR_COMPILE with how the compiler ended
 * ("exit status 1", "killed by signal 11 (...)", or "timed out after N s": a compiler that runs past
 * the time limit is killed with its whole process group) and its log in log. */
int rk_host_build(const char *src, size_t len, const char *name, const char *dir, rk_host_kernel *out, rk_codeobj *code,
                  char *log, size_t log_cap);

/* Loads a shared object from its bytes, by no path another user could touch: from an anonymous
 * in-memory file (memfd) through /proc/self/fd/; where there is none, from a file in a private
 * directory under $TMPDIR (rk_tmp_check with need_exec applies), through /proc/self/fd/ of the
 * directory, else by its path when no other user can rename entries of $TMPDIR or above it
 * (rk_tmp_shared), else ROPEKV_ERR_IO saying so. ROPEKV_ERR_COMPILE when the object does not load or
 * has neither entry point. */
int rk_host_load(const void *code, size_t len, const char *name, rk_host_kernel *out, char *log, size_t log_cap);

void rk_host_unload(rk_host_kernel *k);

#endif
