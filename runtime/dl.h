/* The one way the library opens a shared library that may be missing (libcuda, libamdhip64, libnvrtc,
 * hiprtc): open the first loadable of a candidate list, then resolve a table of entry points that is
 * written once, one line per entry point, and say which symbol is missing by name.
 *
 * A library's entry points are listed as
 *     #define MY_API(X) \
 *         X(cuInit, "cuInit", NEED, CUresult, (unsigned)) \
 *         X(cuMemAlloc, "cuMemAlloc_v2", NEED, CUresult, (CUdeviceptr *, size_t))
 * (field, symbol, the classes of users that need it as a bit mask, return type, parameters) and
 * expanded into the table's function pointers and its symbol list:
 *     typedef struct my_api { MY_API(RK_DL_FIELD) } my_api;
 *     #define RK_DL_TABLE my_api
 *     static const rk_dl_sym my_syms[] = {MY_API(RK_DL_SYM)};
 */
#ifndef RK_DL_H
#define RK_DL_H

#include <stddef.h>

#define RK_DL_FIELD(field, sym, need, ret, params) ret(*field) params;
#define RK_DL_SYM(field, sym, need, ret, params) {sym, offsetof(RK_DL_TABLE, field), need},

typedef struct rk_dl_sym {
    const char *name; /* the symbol */
    size_t offset;    /* where its pointer goes in the table */
    unsigned need;    /* who needs it (bit mask; 0: nobody, it may be missing) */
} rk_dl_sym;

typedef struct rk_dl {
    void *handle;        /* NULL until a candidate opened */
    char path[4096];     /* the candidate that opened */
    char error[512];     /* when none opened: dlerror() of the last one tried (rk_printable) */
    const char *missing; /* when rk_dl_resolve failed: the first symbol it lacks */
} rk_dl;

/* Opens the first of candidates[0..n) that dlopen accepts (RTLD_NOW | RTLD_LOCAL; NULL and empty
 * entries are skipped) and, when probe is not NULL, that defines the symbol probe (a candidate
 * without it is closed and the search goes on). ROPEKV_OK, or ROPEKV_ERR_BACKEND with dl->error. */
int rk_dl_open(rk_dl *dl, const char *const *candidates, size_t n, const char *probe);

/* Resolves every symbol of syms into table (a missing one leaves NULL). ROPEKV_OK when every symbol
 * whose need shares a bit with required is there; else ROPEKV_ERR_BACKEND with the first one that is
 * not in dl->missing. */
int rk_dl_resolve(rk_dl *dl, const rk_dl_sym *syms, size_t n, void *table, unsigned required);

/* The first symbol of syms whose need shares a bit with required and whose pointer in table is
 * NULL; NULL when there is none. */
const char *rk_dl_first_missing(const rk_dl_sym *syms, size_t n, const void *table, unsigned required);

/* Closes the library (NULL handle is fine); the table's pointers must not be used afterwards. */
void rk_dl_close(rk_dl *dl);

#endif
