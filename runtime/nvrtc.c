/* nvrtc, opened with dlopen: kernel source -> CUBIN (and, on request, PTX) for one sm_XY. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "env.h"
#include "compilers.h"
#include "dl.h"

/* The few nvrtc entry points used, declared here so the build needs no CUDA headers. */
typedef int nvrtc_result; /* nvrtcResult: 0 is NVRTC_SUCCESS */
typedef struct nvrtc_prog *nvrtc_program;
enum { NVRTC_OK = 0, NVRTC_OUT_OF_MEMORY = 1, NVRTC_INVALID_OPTION = 5, NVRTC_COMPILATION = 6 };

#define NVRTC_API(X)                                                                                \
    X(version, "nvrtcVersion", 1, nvrtc_result, (int *, int *))                                     \
    X(error_string, "nvrtcGetErrorString", 1, const char *, (nvrtc_result))                         \
    X(create, "nvrtcCreateProgram", 1, nvrtc_result,                                                \
      (nvrtc_program *, const char *, const char *, int, const char *const *, const char *const *)) \
    X(compile, "nvrtcCompileProgram", 1, nvrtc_result, (nvrtc_program, int, const char *const *))   \
    X(destroy, "nvrtcDestroyProgram", 1, nvrtc_result, (nvrtc_program *))                           \
    X(log_size, "nvrtcGetProgramLogSize", 1, nvrtc_result, (nvrtc_program, size_t *))               \
    X(log, "nvrtcGetProgramLog", 1, nvrtc_result, (nvrtc_program, char *))                          \
    X(cubin_size, "nvrtcGetCUBINSize", 1, nvrtc_result, (nvrtc_program, size_t *))                  \
    X(cubin, "nvrtcGetCUBIN", 1, nvrtc_result, (nvrtc_program, char *))                             \
    X(ptx_size, "nvrtcGetPTXSize", 1, nvrtc_result, (nvrtc_program, size_t *))                      \
    X(ptx, "nvrtcGetPTX", 1, nvrtc_result, (nvrtc_program, char *))

typedef struct nvrtc_api {
    int loaded;
    int major, minor;
    char why[512];
    NVRTC_API(RK_DL_FIELD)
} nvrtc_api;

#define RK_DL_TABLE nvrtc_api
static const rk_dl_sym nv_syms[] = {NVRTC_API(RK_DL_SYM)};
#undef RK_DL_TABLE

static nvrtc_api g_nv;
static pthread_once_t g_nv_once = PTHREAD_ONCE_INIT;

static void nv_load(void) {
    const char *env = rk_env_text(RK_ENV_NVRTC);
    const char *names[] = {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12", "/usr/local/cuda/lib64/libnvrtc.so"};
    rk_dl dl;
    if (env && *env) {
        if (rk_dl_open(&dl, &env, 1, NULL) != ROPEKV_OK) {
            char shown[200];
            snprintf(g_nv.why, sizeof g_nv.why, "nvrtc: cannot open $ROPEKV_NVRTC (%s): %.260s",
                     rk_printable(env, shown, sizeof shown), dl.error);
            return;
        }
    } else if (rk_dl_open(&dl, names, sizeof names / sizeof names[0], NULL) != ROPEKV_OK) {
        snprintf(g_nv.why, sizeof g_nv.why,
                 "nvrtc: not found (tried libnvrtc.so, .so.13, .so.12, /usr/local/cuda/lib64; "
                 "set ROPEKV_NVRTC to its path)");
        return;
    }
    if (rk_dl_resolve(&dl, nv_syms, sizeof nv_syms / sizeof nv_syms[0], &g_nv, 1) != ROPEKV_OK) {
        char shown[400];
        snprintf(g_nv.why, sizeof g_nv.why, "nvrtc: %s lacks %s (CUDA < 11.1?)",
                 rk_printable(dl.path, shown, sizeof shown), dl.missing);
        rk_dl_close(&dl);
        return;
    }
    if (g_nv.version(&g_nv.major, &g_nv.minor) != NVRTC_OK) {
        char shown[400];
        snprintf(g_nv.why, sizeof g_nv.why, "nvrtc: %s: nvrtcVersion failed",
                 rk_printable(dl.path, shown, sizeof shown));
        rk_dl_close(&dl);
        return;
    }
    g_nv.loaded = 1; /* the library stays open for the life of the process */
}

static const nvrtc_api *nv(void) {
    pthread_once(&g_nv_once, nv_load);
    return g_nv.loaded ? &g_nv : NULL;
}

int rk_nvrtc_available(int *major, int *minor, char *why, size_t cap) {
    const nvrtc_api *a = nv();
    if (!a) {
        if (why && cap) snprintf(why, cap, "%s", g_nv.why);
        return -1;
    }
    if (major) *major = a->major;
    if (minor) *minor = a->minor;
    return 0;
}

/* "sm_<digits>" with an optional 'a' or 'f' suffix. */
static int arch_ok(const char *arch) {
    if (!arch || strncmp(arch, "sm_", 3) != 0) return 0;
    const char *p = arch + 3;
    if (*p < '1' || *p > '9') return 0;
    while (*p >= '0' && *p <= '9') p++;
    if (*p == 'a' || *p == 'f') p++;
    return *p == '\0' && p - arch < 16;
}

/* ---- compile -------------------------------------------------------------------------------- */
static void put_log(const nvrtc_api *a, nvrtc_program prog, rk_buf *log) {
    size_t n = 0;
    if (!log || a->log_size(prog, &n) != NVRTC_OK || n <= 1) return;
    char *s = malloc(n);
    if (!s) return;
    if (a->log(prog, s) == NVRTC_OK) rk_buf_put(log, s, strnlen(s, n));
    free(s);
}

/* Reads one of the program's outputs (CUBIN or PTX) into a malloc'd block. */
static int get_output(nvrtc_result (*size_fn)(nvrtc_program, size_t *), nvrtc_result (*get_fn)(nvrtc_program, char *),
                      nvrtc_program prog, unsigned char **data, size_t *len) {
    size_t n = 0;
    *data = NULL;
    *len = 0;
    if (size_fn(prog, &n) != NVRTC_OK || n == 0) return ROPEKV_ERR_COMPILE;
    unsigned char *d = malloc(n);
    if (!d) return ROPEKV_ERR_NOMEM;
    if (get_fn(prog, (char *)d) != NVRTC_OK) {
        free(d);
        return ROPEKV_ERR_COMPILE;
    }
    *data = d;
    *len = n;
    return ROPEKV_OK;
}

int rk_nvrtc_compile(const char *src, size_t len, const char *arch, const char *extra, unsigned flags,
                     rk_codeobj *cubin, rk_buf *ptx, rk_buf *log) {
    if (cubin) {
        cubin->data = NULL;
        cubin->len = 0;
    }
    const nvrtc_api *a = nv();
    if (!a) {
        if (log) rk_buf_printf(log, "%s\n", g_nv.why);
        return ROPEKV_ERR_IO;
    }
    if (!arch_ok(arch)) {
        if (log)
            rk_buf_printf(log, "nvrtc %d.%d: '%s' is not a real architecture (sm_XY, sm_XYa, sm_XYf)\n", a->major,
                          a->minor, arch ? arch : "(null)");
        return ROPEKV_ERR_TARGET;
    }
    char *text = malloc(len + 1);
    if (!text) return ROPEKV_ERR_NOMEM;
    memcpy(text, src, len);
    text[len] = '\0';

    char archopt[64];
    snprintf(archopt, sizeof archopt, "-arch=%s", arch);
    /* a family-specific target (sm_100f) where nvrtc has none (before 12.9): the plain one, without the family's
     * conversions (the kernels take their software paths) */
    const size_t alen = strlen(arch);
    if (arch[alen - 1] == 'f' && (a->major < 12 || (a->major == 12 && a->minor < 9)))
        snprintf(archopt, sizeof archopt, "-arch=%.*s", (int)(alen - 1), arch);
    enum { CAP = 128 };
    const char *opts[CAP];
    int n = 0;
    opts[n++] = archopt;
    opts[n++] = "--std=c++17";
    opts[n++] = "--fmad=false";
    if (flags & RK_NVRTC_PTXAS_VERBOSE) opts[n++] = "--ptxas-options=-v";
    char *store = NULL;
    int rc = rk_split_options(extra, opts, n, CAP, &store, &n);
    if (rc != ROPEKV_OK) {
        if (rc == ROPEKV_ERR_COMPILE && log) rk_buf_printf(log, "nvrtc: too many extra options\n");
        free(store);
        free(text);
        return rc;
    }

    nvrtc_program prog = NULL;
    nvrtc_result r = a->create(&prog, text, "ropekv.cu", 0, NULL, NULL);
    if (r != NVRTC_OK) {
        if (log) rk_buf_printf(log, "nvrtc: nvrtcCreateProgram: %s\n", a->error_string(r));
        free(store);
        free(text);
        return r == NVRTC_OUT_OF_MEMORY ? ROPEKV_ERR_NOMEM : ROPEKV_ERR_COMPILE;
    }
    r = a->compile(prog, n, opts);
    rk_buf plog = {0};
    put_log(a, prog, &plog);
    if (log && plog.len) rk_buf_put(log, plog.p, plog.len);
    if (r != NVRTC_OK) {
        /* An architecture this nvrtc does not build for is an invalid option value. */
        int bad_arch = r == NVRTC_INVALID_OPTION && plog.len && strstr(plog.p, "gpu-architecture");
        if (log) rk_buf_printf(log, "nvrtc %d.%d: %s (-arch=%s)\n", a->major, a->minor, a->error_string(r), arch);
        rc = bad_arch ? ROPEKV_ERR_TARGET : r == NVRTC_OUT_OF_MEMORY ? ROPEKV_ERR_NOMEM : ROPEKV_ERR_COMPILE;
    }
    if (rc == ROPEKV_OK && cubin) {
        rc = get_output(a->cubin_size, a->cubin, prog, &cubin->data, &cubin->len);
        if (rc == ROPEKV_ERR_COMPILE && log) rk_buf_printf(log, "nvrtc: no CUBIN for -arch=%s\n", arch);
    }
    if (rc == ROPEKV_OK && ptx) {
        unsigned char *d;
        size_t dn;
        rc = get_output(a->ptx_size, a->ptx, prog, &d, &dn);
        if (rc == ROPEKV_OK) {
            rc = rk_buf_put(ptx, (const char *)d, strnlen((const char *)d, dn));
            free(d);
        } else if (rc == ROPEKV_ERR_COMPILE && log) {
            rk_buf_printf(log, "nvrtc: no PTX for -arch=%s\n", arch);
        }
    }
    if (rc != ROPEKV_OK && cubin) rk_code_free(cubin);
    a->destroy(&prog);
    rk_buf_free(&plog);
    free(store);
    free(text);
    return rc;
}
