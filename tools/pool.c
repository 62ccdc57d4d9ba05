/* Forked workers over a list of items, results in shared memory (pool.h). */
#define _GNU_SOURCE 1 /* pipe2 */
#include "pool.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

enum { NOT_TAKEN = 0, RUNNING = 1, DONE = 2 };

typedef struct item_state {
    int state;
    int pid; /* the worker that took it */
} item_state;

/* The shared mapping: the next item to take, each item's state, then the results. */
typedef struct shared {
    int next;
    item_state item[];
} shared;

typedef struct pool_run {
    const rk_pool *p;
    shared *sh;
    unsigned char *results; /* inside the mapping */
    int wake[2];            /* a worker writes a byte per finished item; the parent waits on it */
} pool_run;

static void *result_at(const pool_run *r, int i) { return r->results + (size_t)i * r->p->result_size; }

static void worker(const pool_run *r) {
    const rk_pool *p = r->p;
    close(r->wake[0]);
    for (;;) {
        int i = __atomic_fetch_add(&r->sh->next, 1, __ATOMIC_SEQ_CST);
        if (i >= p->n) break;
        r->sh->item[i].pid = (int)getpid();
        __atomic_store_n(&r->sh->item[i].state, RUNNING, __ATOMIC_SEQ_CST);
        int stop = p->run(p->ctx, i, result_at(r, i));
        __atomic_store_n(&r->sh->item[i].state, DONE, __ATOMIC_SEQ_CST);
        ssize_t w;
        while ((w = write(r->wake[1], "", 1)) < 0 && errno == EINTR) {}
        if (stop) _exit(0);
    }
    if (p->worker_end) p->worker_end(p->ctx);
    _exit(0);
}

static pid_t spawn(const pool_run *r) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) worker(r);
    return pid;
}

/* Reports every item that finished since the last call; k counts the reported ones. */
static void report(const pool_run *r, char *reported, int *k) {
    const rk_pool *p = r->p;
    for (int i = 0; i < p->n; i++) {
        if (reported[i] || __atomic_load_n(&r->sh->item[i].state, __ATOMIC_SEQ_CST) != DONE) continue;
        reported[i] = 1;
        ++*k;
        if (p->done) p->done(p->ctx, *k, p->n, i, result_at(r, i));
    }
}

/* Item i gets no result of its own: the pool's lost callback makes it a failure. */
static void lose(const pool_run *r, int i, int pid, const char *why) {
    memset(result_at(r, i), 0, r->p->result_size);
    r->p->lost(r->p->ctx, i, result_at(r, i), pid, why);
    __atomic_store_n(&r->sh->item[i].state, DONE, __ATOMIC_SEQ_CST);
}

/* Fails the items the worker pid held when it ended with wait status st. */
static void fail_held(const pool_run *r, pid_t pid, int st) {
    const rk_pool *p = r->p;
    char why[256];
    if (WIFSIGNALED(st))
        snprintf(why, sizeof why, "the %s (pid %d) was killed by signal %d (%s) while %s", p->worker, (int)pid,
                 WTERMSIG(st), strsignal(WTERMSIG(st)), p->task);
    else
        snprintf(why, sizeof why, "the %s (pid %d) exited with status %d while %s", p->worker, (int)pid,
                 WIFEXITED(st) ? WEXITSTATUS(st) : -1, p->task);
    for (int i = 0; i < p->n; i++) {
        const item_state *s = &r->sh->item[i];
        if (__atomic_load_n(&s->state, __ATOMIC_SEQ_CST) == RUNNING && s->pid == (int)pid) lose(r, i, (int)pid, why);
    }
}

int rk_pool_run(const rk_pool *p, void *results) {
    if (p->n <= 0) return 0;
    int jobs = p->jobs > 0 ? p->jobs : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (jobs < 1) jobs = 1;
    if (jobs > p->n) jobs = p->n;
    size_t head = sizeof(shared) + sizeof(item_state) * (size_t)p->n;
    head = (head + 63) & ~(size_t)63;
    size_t bytes = head + p->result_size * (size_t)p->n;
    pool_run r = {.p = p};
    r.sh = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (r.sh == MAP_FAILED) return -1;
    r.results = (unsigned char *)r.sh + head; /* the anonymous mapping starts zeroed */
    pid_t *pids = calloc((size_t)jobs, sizeof *pids);
    char *reported = calloc((size_t)p->n, 1);
    /* Close-on-exec: the compilers a worker runs do not inherit the pipe. */
    int running = 0, e = ENOMEM;
    if (pids && reported && pipe2(r.wake, O_CLOEXEC) == 0) {
        for (int j = 0; j < jobs; j++) {
            pids[j] = spawn(&r);
            if (pids[j] > 0) running++;
            else pids[j] = 0;
        }
        e = errno;
        if (!running) {
            close(r.wake[0]);
            close(r.wake[1]);
        }
    } else if (pids && reported) {
        e = errno;
    }
    if (!running) {
        free(pids);
        free(reported);
        munmap(r.sh, bytes);
        errno = e;
        return -1;
    }
    /* Waits for finished items (a byte on the pipe) and, every 100 ms at the latest, for workers that
     * ended: one that ends while items are left is replaced. */
    int k = 0;
    while (running) {
        struct pollfd pfd = {.fd = r.wake[0], .events = POLLIN};
        if (poll(&pfd, 1, 100) > 0) {
            char drain[256];
            ssize_t got = read(r.wake[0], drain, sizeof drain);
            (void)got;
        }
        report(&r, reported, &k);
        for (int j = 0; j < jobs; j++) {
            if (pids[j] <= 0) continue;
            int st = 0;
            pid_t q = waitpid(pids[j], &st, WNOHANG);
            if (q == 0 || (q < 0 && errno == EINTR)) continue;
            pids[j] = 0;
            running--;
            if (q > 0) fail_held(&r, q, st);
            if (__atomic_load_n(&r.sh->next, __ATOMIC_SEQ_CST) < p->n && (pids[j] = spawn(&r)) > 0) running++;
            else pids[j] = 0;
        }
        report(&r, reported, &k);
    }
    char why[256];
    snprintf(why, sizeof why, "not run: no %s was left to take it", p->worker);
    for (int i = 0; i < p->n; i++)
        if (r.sh->item[i].state != DONE) lose(&r, i, 0, why);
    report(&r, reported, &k);
    memcpy(results, r.results, p->result_size * (size_t)p->n);
    close(r.wake[0]);
    close(r.wake[1]);
    free(pids);
    free(reported);
    munmap(r.sh, bytes);
    return 0;
}
