/* A pool of forked worker processes over n items: each worker takes the next item not yet taken and
 * writes its result into memory shared with the parent. A worker that dies (a compiler aborting the
 * process, a device error that spoils its context) fails the item it was on, and a fresh worker
 * takes the items left. The parent reports every finished item, in the order they finish.
 * Used by the build matrix (tools/build.c), `ropekv-gen selftest` and tests/gpu_conformance.c. */
#ifndef RK_POOL_H
#define RK_POOL_H

#include <stddef.h>

typedef struct rk_pool {
    int n;              /* items */
    size_t result_size; /* bytes of one item's result */
    int jobs;           /* worker processes (< 1: the number of online CPUs; at most n) */
    const char *worker; /* what a worker is called in messages, e.g. "build process" */
    const char *task;   /* what a worker does to an item, e.g. "compiling this" */
    void *ctx;          /* handed to every callback */
    /* In a worker: handles item i, writing its result (zeroed before the call). Returns 0 to go on
     * with the next item, else the worker ends after this item (its result stands) and a fresh one
     * takes the rest. */
    int (*run)(void *ctx, int i, void *result);
    /* In a worker, before it exits normally (may be NULL). */
    void (*worker_end)(void *ctx);
    /* In the parent: item i has no result of its own (its worker died, with pid, or no worker was
     * left to take it, pid 0); fill result as a failure described by why. */
    void (*lost)(void *ctx, int i, void *result, int pid, const char *why);
    /* In the parent, once per item as it finishes (may be NULL): the k-th item to finish of n. */
    void (*done)(void *ctx, int k, int n, int i, const void *result);
} rk_pool;

/* Runs the pool; results receives the n results in item order (n * result_size bytes).
 * Returns 0, or -1 with errno when no worker could be started (results untouched). */
int rk_pool_run(const rk_pool *p, void *results);

#endif
