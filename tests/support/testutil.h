/* Helpers the test programs share: their scratch directory and environment, files, child processes,
 * host contexts, and reference variants checked against kernels got through the public API.
 * Plain C (no test framework): a helper reports failure by its result and the caller asserts. */
#ifndef RK_TESTUTIL_H
#define RK_TESTUTIL_H

#include <stddef.h>
#include <sys/types.h>

#include <stdio.h>
#include <string.h>

#include "check.h"
#include "rk.h"
#include "ropekv.h"

/* The state the API tests start from: dir (a mkdtemp template "...XXXXXX", rewritten in place)
 * created private (0700), ROPEKV_BACKEND=host, ROPEKV_DISABLE_CACHE and ROPEKV_COMPILE_TIMEOUT unset,
 * and, when cat is not NULL, the built-in catalog loaded into it. 0, or -1. */
int rk_test_setup(char *dir, rk_catalog *cat);

/* rm -rf without following symlinks; directories are made writable first (tests chmod them). */
void rk_test_remove_tree(const char *path);

/* Writes n bytes to path, then gives it mode. ROPEKV_OK or ROPEKV_ERR_IO. */
int rk_test_write_file(const char *path, const void *p, size_t n, mode_t mode);
/* stderr goes to the file path (created 0600) until rk_test_capture_end, which restores it, removes the file,
 * echoes what was written to stderr and returns it (a static buffer of 16 KiB: the last capture's). Returns 0,
 * or -1 when path cannot be created (nothing is captured). */
int rk_test_capture_begin(const char *path);
const char *rk_test_capture_end(void);

/* fork() with stdout and stderr flushed first (nothing buffered is written twice). */
pid_t rk_test_fork(void);
/* Waits for a child; its exit status, or 128 + signal when it was killed. */
int rk_test_wait(pid_t pid);

/* Files ropekv made in a cache directory (names starting with '.' are not counted). */
typedef struct rk_test_census {
    int entries, temps, locks, other;
} rk_test_census;
rk_test_census rk_test_count_files(const char *dir);

/* The variant of cat with this key ("spec/target/kv/q/pos=.../slot=..."), or NULL. The storage
 * is static: the next call reuses it. */
const rk_desc *rk_test_variant(const rk_catalog *cat, const char *key);
/* The reference's view of the public variant v of spec on the host target: every choice of v (kv dtype, q form,
 * index types, q dtype, layout, op, norm), or NULL when the spec does not list it there. The storage is static: the
 * last 8 results stay valid. */
const rk_desc *rk_test_ref_variant(const rk_catalog *cat, const char *spec, const ropekv_variant *v);

/* ---- through the public API ---------------------------------------------------------------------
 * Inline here: rksupport sits below the library's public entry points (ropekv-gen, which links it,
 * builds the library's built-in kernels), so only the programs that link the library compile these. */

/* A context on the host backend with its disk cache in dir (NULL: no disk cache). NULL when
 * ropekv_create fails (its status printed on stderr). */
static inline ropekv_ctx *rk_test_host_ctx(const char *dir) {
    ropekv_options o = {.backend = ROPEKV_BACKEND_HOST, .cache_dir = dir, .disk_cache = dir ? 1 : -1};
    ropekv_ctx *c = NULL;
    ropekv_status s = ropekv_create(&c, &o);
    if (s == ROPEKV_OK) return c;
    fprintf(stderr, "ropekv_create: %s\n", ropekv_status_name(s));
    return NULL;
}

/* The public ropekv_args of gen's rk_args: the caller's fields carry the same names (templates/args.h). */
static inline void rk_test_public_args(const rk_args *a, ropekv_args *p) {
    memset(p, 0, sizeof *p);
#define RK_TEST_COPY_(type, name)                                     \
    _Static_assert(sizeof p->name == sizeof a->name, "field " #name); \
    memcpy(&p->name, &a->name, sizeof p->name);
    RK_ARGS_CALLER(RK_TEST_COPY_)
#undef RK_TEST_COPY_
    p->size = sizeof *p; /* every field read: q_heads and write_mask are past version 0.1's */
    if (a->kv_tokens == 0 && a->tokens > 0) p->kv_tokens = ROPEKV_KV_TOKENS_NONE; /* a count of 0 */
}

/* rk_check's run callback for a kernel got through the public API (kernel: a ropekv_kernel *). */
static inline int rk_test_launch(void *kernel, const rk_desc *v, const rk_args *a) {
    (void)v;
    ropekv_args p;
    rk_test_public_args(a, &p);
    return ropekv_launch(kernel, &p, NULL);
}

/* 0 when kernel k computes what the reference computes for rv over T = 1, 17 x H = 1, 16 (padded
 * strides on H = 16); else 1 with why. */
static inline int rk_test_check_kernel(ropekv_kernel *k, const rk_desc *rv, char *why, size_t cap) {
    static const int64_t T[] = {1, 17}, H[] = {1, 16};
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) {
            rk_shape sh = {.tokens = T[i],
                           .heads = H[j],
                           .pad = 8 * j,
                           .max_pos = 64,
                           .neg_every = 3,
                           .specials = 1,
                           .k_scale = 0.37f};
            if (rk_check(rv, &sh, (uint64_t)(i * 2 + j + 1), rk_test_launch, k, why, cap) != 0) return 1;
        }
    return 0;
}

#endif
