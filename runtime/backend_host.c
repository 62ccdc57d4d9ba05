/* The host backend behind the backend table: compiles with the host C++ compiler driver
 * (host_compile.c); the code object is the shared object's bytes, loaded from memory (rk_host_load);
 * a launch calls the entry point once, and the kernel runs its whole grid as a loop on the calling
 * thread. */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "host_compile.h"

/* First line of `$CXX --version`: the compiler's identity for cache keys. A compiler that does not
 * answer in time (rk_host_compiler_version) is named by its command alone. ROPEKV_OK or
 * ROPEKV_ERR_NOMEM. */
static int compiler_identity(char *out, size_t cap) {
    char line[160], id[512];
    int rc = rk_host_compiler_version(line, sizeof line);
    if (rc == ROPEKV_OK) snprintf(id, sizeof id, "host %s: %s", rk_host_compiler(), line);
    else snprintf(id, sizeof id, "host %s", rk_host_compiler());
    rk_printable(id, out, cap); /* shown in messages too */
    return rc == ROPEKV_ERR_NOMEM ? rc : ROPEKV_OK;
}

static int host_open(rk_device *d, int ordinal, const char *target_override, rk_buf *log) {
    (void)ordinal;
    if (target_override && strcmp(target_override, "host") != 0) {
        char shown[160];
        rk_buf_printf(log, "the host backend only builds for target 'host', not '%s'",
                      rk_printable(target_override, shown, sizeof shown));
        return ROPEKV_ERR_TARGET;
    }
    snprintf(d->target, sizeof d->target, "host");
    if (compiler_identity(d->compiler_id, sizeof d->compiler_id) != ROPEKV_OK) return ROPEKV_ERR_NOMEM;
    /* The work directories of compiles killed with their process: older than any compile of ours may
     * take (a process with a longer limit is still running, and rk_tmp_sweep leaves it alone). */
    long limit = rk_host_compile_timeout();
    rk_tmp_sweep((limit > 0 && limit > RK_COMPILE_TIMEOUT_DEFAULT ? limit : RK_COMPILE_TIMEOUT_DEFAULT) + 600);
    snprintf(d->options, sizeof d->options, "-std=c++17 -O2 -fPIC -shared -ffp-contract=off -fno-math-errno");
    return ROPEKV_OK;
}

static int host_compile(rk_device *d, const char *src, size_t len, const char *name, const rk_arch *arch,
                        rk_codeobj *out, rk_buf *log) {
    (void)d;
    (void)arch;
    char dir[4096], msg[8192];
    memset(out, 0, sizeof *out);
    /* A plain work directory: nothing is loaded from it (rk_host_build loads the bytes it reads back). */
    if (rk_tmp_check(0, msg, sizeof msg) != 0) { /* one message naming TMPDIR, before anything fails */
        rk_buf_printf(log, "%s", msg);
        return ROPEKV_ERR_IO;
    }
    if (rk_mktmpdir(dir, sizeof dir, "host") != ROPEKV_OK) {
        rk_buf_printf(log, "cannot create a directory under %s: %s", rk_tmp_base(), strerror(errno));
        return ROPEKV_ERR_IO;
    }
    rk_host_kernel k;
    int rc = rk_host_build(src, len, name, dir, &k, out, msg, sizeof msg);
    if (rc != ROPEKV_OK) rk_buf_printf(log, "%s", msg);
    else rk_host_unload(&k);
    rk_rmtmpdir(dir);
    return rc;
}

static int host_load(rk_device *d, const rk_codeobj *co, const char *name, void **module, void *fn[2], rk_buf *log) {
    (void)d;
    char msg[2048];
    rk_host_kernel k;
    int rc = rk_host_load(co->data, co->len, name, &k, msg, sizeof msg);
    if (rc != ROPEKV_OK) {
        rk_buf_printf(log, "%s", msg);
        return rc;
    }
    *module = k.so;
    fn[0] = *(void **)&k.entry32;
    fn[1] = *(void **)&k.entry64;
    return ROPEKV_OK;
}

static int host_launch(rk_device *d, void *fn, const rk_args *a, int64_t blocks, int block, int pdl, void *stream,
                       rk_buf *log) {
    (void)pdl; /* no programmatic dependent launch here */
    (void)d;
    (void)blocks;
    (void)block;
    (void)stream;
    (void)log;
    void (*entry)(rk_args);
    *(void **)&entry = fn;
    entry(*a);
    return ROPEKV_OK;
}

static void host_unload(rk_device *d, void *module) {
    (void)d;
    if (module) dlclose(module);
}

static void host_close(rk_device *d) { (void)d; }

static int host_read(rk_device *d, void *dst, const void *src, size_t n, void *stream, rk_buf *log) {
    (void)d; /* the host backend runs synchronously: its "device" memory is the caller's */
    (void)stream;
    (void)log;
    memcpy(dst, src, n);
    return ROPEKV_OK;
}

const rk_backend_ops rk_backend_host = {
    "host", host_open, host_compile, host_load, host_launch, host_unload, host_close, host_read,
};
