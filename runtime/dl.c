/* dlopen of the first loadable candidate, and a table of entry points resolved from it (dl.h). */
#include "dl.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "rk.h"

int rk_dl_open(rk_dl *dl, const char *const *candidates, size_t n, const char *probe) {
    memset(dl, 0, sizeof *dl);
    snprintf(dl->error, sizeof dl->error, "no candidate");
    for (size_t i = 0; i < n && !dl->handle; i++) {
        if (!candidates[i] || !candidates[i][0]) continue;
        void *h = dlopen(candidates[i], RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            const char *e = dlerror(); /* names the file: a caller's path, escaped */
            rk_printable(e ? e : "?", dl->error, sizeof dl->error);
            continue;
        }
        if (probe && !dlsym(h, probe)) {
            char shown[256];
            snprintf(dl->error, sizeof dl->error, "%s: no symbol %s", rk_printable(candidates[i], shown, sizeof shown),
                     probe);
            dlclose(h);
            continue;
        }
        dl->handle = h;
        snprintf(dl->path, sizeof dl->path, "%s", candidates[i]);
    }
    return dl->handle ? ROPEKV_OK : ROPEKV_ERR_BACKEND;
}

const char *rk_dl_first_missing(const rk_dl_sym *syms, size_t n, const void *table, unsigned required) {
    for (size_t i = 0; i < n; i++) {
        void *p;
        memcpy(&p, (const char *)table + syms[i].offset, sizeof p);
        if (!p && (syms[i].need & required)) return syms[i].name;
    }
    return NULL;
}

int rk_dl_resolve(rk_dl *dl, const rk_dl_sym *syms, size_t n, void *table, unsigned required) {
    for (size_t i = 0; i < n; i++) {
        /* The object pointer is stored as the function pointer it stands for (POSIX allows this). */
        void *p = dl->handle ? dlsym(dl->handle, syms[i].name) : NULL;
        memcpy((char *)table + syms[i].offset, &p, sizeof p);
    }
    dl->missing = rk_dl_first_missing(syms, n, table, required);
    return dl->missing ? ROPEKV_ERR_BACKEND : ROPEKV_OK;
}

void rk_dl_close(rk_dl *dl) {
    if (dl->handle) dlclose(dl->handle);
    dl->handle = NULL;
}
