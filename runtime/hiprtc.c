/* hiprtc, opened with dlopen: kernel source -> AMDGPU code object, behind an allow-list.
 *
 * The allow-list exists because hiprtc does not fail cleanly on a target its comgr does not know:
 * ROCm 5.2.3's aborts the whole process (SIGABRT inside comgr) for gfx940/941/942, gfx950,
 * gfx1100-1103, gfx1150/1151, gfx1200/1201, gfx1250, and for feature suffixes a processor lacks
 * (gfx1030:xnack-). So a target is compiled only when the local hiprtc release is known to build it. */
#define _GNU_SOURCE 1 /* dladdr */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "env.h"
#include "compilers.h"
#include "dl.h"

/* The hiprtc entry points used, declared here so the build needs no ROCm headers. */
typedef int hiprtc_result; /* hiprtcResult: 0 is HIPRTC_SUCCESS */
typedef struct hiprtc_prog *hiprtc_program;
enum { HIPRTC_OK = 0, HIPRTC_OUT_OF_MEMORY = 1 };

#define HIPRTC_API(X)                                                                          \
    X(version, "hiprtcVersion", 1, hiprtc_result, (int *, int *))                              \
    X(error_string, "hiprtcGetErrorString", 1, const char *, (hiprtc_result))                  \
    X(create, "hiprtcCreateProgram", 1, hiprtc_result,                                         \
      (hiprtc_program *, const char *, const char *, int, const char **, const char **))       \
    X(compile, "hiprtcCompileProgram", 1, hiprtc_result, (hiprtc_program, int, const char **)) \
    X(destroy, "hiprtcDestroyProgram", 1, hiprtc_result, (hiprtc_program *))                   \
    X(log_size, "hiprtcGetProgramLogSize", 1, hiprtc_result, (hiprtc_program, size_t *))       \
    X(log, "hiprtcGetProgramLog", 1, hiprtc_result, (hiprtc_program, char *))                  \
    X(code_size, "hiprtcGetCodeSize", 1, hiprtc_result, (hiprtc_program, size_t *))            \
    X(code, "hiprtcGetCode", 1, hiprtc_result, (hiprtc_program, char *))

typedef struct hiprtc_api {
    int loaded;
    char path[PATH_MAX]; /* the library, resolved (its name carries the ROCm release) */
    int major, minor;    /* ROCm release of the library (see rk_hiprtc_available) */
    char why[768];
    HIPRTC_API(RK_DL_FIELD)
} hiprtc_api;

#define RK_DL_TABLE hiprtc_api
static const rk_dl_sym hip_syms[] = {HIPRTC_API(RK_DL_SYM)};
#undef RK_DL_TABLE

static hiprtc_api g_hip;
static pthread_once_t g_hip_once = PTHREAD_ONCE_INIT;
/* ROCm 5's hiprtc drives comgr through the HIP runtime's program objects; its compiles are
 * serialized here rather than trusted to be reentrant. */
static pthread_mutex_t g_hip_serial = PTHREAD_MUTEX_INITIALIZER;

/* "libamdhip64.so.5.2.21153" -> 5, 2. 0 when the name carries no "<major>.<minor>" after ".so.". */
static int version_from_name(const char *path, int *major, int *minor) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *so = strstr(base, ".so.");
    if (!so) return 0;
    int a, b, n = 0;
    if (sscanf(so + 4, "%d.%d%n", &a, &b, &n) != 2 || n == 0) return 0;
    *major = a;
    *minor = b;
    return 1;
}

static void hip_load(void) {
    const char *env = rk_env_text(RK_ENV_HIPRTC);
    const char *names[] = {"libhiprtc.so",
                           "libhiprtc.so.7",
                           "libhiprtc.so.6",
                           "libamdhip64.so",
                           "libamdhip64.so.5",
                           "/opt/rocm/lib/libhiprtc.so",
                           "/opt/rocm/lib/libamdhip64.so"};
    /* A library counts only when it carries hiprtc: a ROCm >= 6 libamdhip64 no longer does. */
    rk_dl dl;
    if (env && *env) {
        if (rk_dl_open(&dl, &env, 1, "hiprtcCreateProgram") != ROPEKV_OK) {
            char shown[400];
            snprintf(g_hip.why, sizeof g_hip.why, "hiprtc: $ROPEKV_HIPRTC (%s) cannot be opened or has no hiprtc",
                     rk_printable(env, shown, sizeof shown));
            return;
        }
    } else if (rk_dl_open(&dl, names, sizeof names / sizeof names[0], "hiprtcCreateProgram") != ROPEKV_OK) {
        snprintf(g_hip.why, sizeof g_hip.why,
                 "hiprtc: not found (tried libhiprtc.so, .so.7, .so.6, libamdhip64.so, .so.5, /opt/rocm/lib; "
                 "set ROPEKV_HIPRTC to its path)");
        return;
    }
    int rc = rk_dl_resolve(&dl, hip_syms, sizeof hip_syms / sizeof hip_syms[0], &g_hip, 1);
    /* The file the symbols came from, with links resolved: a plain soname has no release in it. */
    Dl_info di;
    char real[PATH_MAX];
    const char *where = dl.path;
    if (g_hip.create && dladdr(*(void **)&g_hip.create, &di) && di.dli_fname) where = di.dli_fname;
    snprintf(g_hip.path, sizeof g_hip.path, "%s", realpath(where, real) ? real : where);
    if (rc != ROPEKV_OK) {
        char shown[600];
        snprintf(g_hip.why, sizeof g_hip.why, "hiprtc: %s lacks %s", rk_printable(g_hip.path, shown, sizeof shown),
                 dl.missing);
        rk_dl_close(&dl);
        return;
    }
    /* hiprtcVersion() answers 9.0 on every ROCm release, so the release comes from the library's
     * file name, else from $ROPEKV_HIPRTC_VERSION, else the narrowest allow-list (ROCm 5.0). */
    if (!version_from_name(g_hip.path, &g_hip.major, &g_hip.minor)) {
        if (!rk_env_version(RK_ENV_HIPRTC_VERSION, &g_hip.major, &g_hip.minor)) {
            g_hip.major = 5;
            g_hip.minor = 0;
        }
    }
    g_hip.loaded = 1; /* the library stays open for the life of the process */
}

static const hiprtc_api *hip(void) {
    pthread_once(&g_hip_once, hip_load);
    return g_hip.loaded ? &g_hip : NULL;
}

int rk_hiprtc_available(int *major, int *minor, char *why, size_t cap) {
    const hiprtc_api *a = hip();
    if (!a) {
        if (why && cap) snprintf(why, cap, "%s", g_hip.why);
        return -1;
    }
    if (major) *major = a->major;
    if (minor) *minor = a->minor;
    return 0;
}

/* ---- the allow-list --------------------------------------------------------------------------- */
enum { F_XNACK = 1, F_SRAMECC = 2 };

typedef struct amd_proc {
    const char *name;
    int features;     /* target-id features the processor has (LLVM AMDGPUUsage) */
    int major, minor; /* first ROCm release whose hiprtc builds it */
    int last;         /* last ROCm major release that builds it (0: no limit) */
} amd_proc;

/* Every ROCm 5 entry, bare and with each valid feature suffix, builds with ROCm 5.2.3's hiprtc; the
 * feature sets agree with clang 22's target-id checks. */
static const amd_proc k_procs[] = {
    {"gfx600", 0, 0, 0, 0},
    {"gfx601", 0, 0, 0, 0},
    {"gfx602", 0, 0, 0, 0},
    {"gfx700", 0, 0, 0, 0},
    {"gfx701", 0, 0, 0, 0},
    {"gfx702", 0, 0, 0, 0},
    {"gfx703", 0, 0, 0, 0},
    {"gfx704", 0, 0, 0, 0},
    {"gfx705", 0, 0, 0, 0},
    {"gfx801", F_XNACK, 0, 0, 0},
    {"gfx802", 0, 0, 0, 0},
    {"gfx803", 0, 0, 0, 0},
    {"gfx805", 0, 0, 0, 0},
    {"gfx810", F_XNACK, 0, 0, 0},
    {"gfx900", F_XNACK, 0, 0, 0},
    {"gfx902", F_XNACK, 0, 0, 0},
    {"gfx904", F_XNACK, 0, 0, 0},
    {"gfx906", F_XNACK | F_SRAMECC, 0, 0, 0},
    {"gfx908", F_XNACK | F_SRAMECC, 0, 0, 0},
    {"gfx909", F_XNACK, 0, 0, 0},
    {"gfx90a", F_XNACK | F_SRAMECC, 0, 0, 0},
    {"gfx90c", F_XNACK, 0, 0, 0},
    {"gfx1010", F_XNACK, 0, 0, 0},
    {"gfx1011", F_XNACK, 0, 0, 0},
    {"gfx1012", F_XNACK, 0, 0, 0},
    {"gfx1013", F_XNACK, 0, 0, 0},
    {"gfx1030", 0, 0, 0, 0},
    {"gfx1031", 0, 0, 0, 0},
    {"gfx1032", 0, 0, 0, 0},
    {"gfx1033", 0, 0, 0, 0},
    {"gfx1034", 0, 0, 0, 0},
    {"gfx1035", 0, 0, 0, 0},
    {"gfx1036", 0, 0, 0, 0},
    /* ROCm 6 (LLVM 20, in ROCm 7, dropped gfx940 and gfx941) */
    {"gfx940", F_XNACK | F_SRAMECC, 6, 0, 6},
    {"gfx941", F_XNACK | F_SRAMECC, 6, 0, 6},
    {"gfx942", F_XNACK | F_SRAMECC, 6, 0, 0},
    {"gfx950", F_XNACK | F_SRAMECC, 6, 2, 0},
    {"gfx1100", 0, 6, 0, 0},
    {"gfx1101", 0, 6, 0, 0},
    {"gfx1102", 0, 6, 0, 0},
    {"gfx1103", 0, 6, 0, 0},
    {"gfx1150", 0, 6, 0, 0},
    {"gfx1151", 0, 6, 0, 0},
    {"gfx1200", 0, 6, 0, 0},
    {"gfx1201", 0, 6, 0, 0},
    /* ROCm 7 */
    {"gfx1250", 0, 7, 0, 0},
};

static int refuse(char *why, size_t cap, int major, int minor, const char *target, const char *msg) {
    if (why && cap) snprintf(why, cap, "hiprtc %d.%d cannot build '%.64s': %s", major, minor, target, msg);
    return 0;
}

int rk_hiprtc_supports(int major, int minor, const char *target, char *why, size_t cap) {
    if (why && cap) why[0] = '\0';
    if (!target) target = "";
    char msg[256];
    size_t plen = strcspn(target, ":");
    const amd_proc *proc = NULL;
    for (size_t i = 0; i < sizeof k_procs / sizeof k_procs[0]; i++)
        if (strlen(k_procs[i].name) == plen && strncmp(k_procs[i].name, target, plen) == 0) proc = &k_procs[i];
    if (!proc) {
        snprintf(msg, sizeof msg, "'%.*s' is not a processor on the allow-list", (int)(plen < 40 ? plen : 40), target);
        return refuse(why, cap, major, minor, target, msg);
    }
    if (proc->last && major > proc->last) {
        snprintf(msg, sizeof msg, "%s was dropped after ROCm %d; use the clang backend", proc->name, proc->last);
        return refuse(why, cap, major, minor, target, msg);
    }
    if (major < proc->major || (major == proc->major && minor < proc->minor)) {
        snprintf(msg, sizeof msg,
                 "%s needs ROCm %d.%d or newer (an older comgr aborts the process on it); use the clang backend",
                 proc->name, proc->major, proc->minor);
        return refuse(why, cap, major, minor, target, msg);
    }
    int seen = 0;
    for (const char *f = target + plen; *f;) {
        f++; /* ':' */
        size_t n = strcspn(f, ":");
        int bit = 0;
        if (n == 6 && strncmp(f, "xnack", 5) == 0) bit = F_XNACK;
        else if (n == 8 && strncmp(f, "sramecc", 7) == 0) bit = F_SRAMECC;
        int fl = (int)(n < 40 ? n : 40);
        if (!bit || (f[n - 1] != '+' && f[n - 1] != '-')) {
            snprintf(msg, sizeof msg, "'%.*s' is not a target feature (xnack+/-, sramecc+/-)", fl, f);
            return refuse(why, cap, major, minor, target, msg);
        }
        if (!(proc->features & bit)) {
            snprintf(msg, sizeof msg, "%s has no '%.*s' feature (comgr aborts on it)", proc->name, fl - 1, f);
            return refuse(why, cap, major, minor, target, msg);
        }
        if (seen & bit) {
            snprintf(msg, sizeof msg, "'%.*s' is given twice", fl - 1, f);
            return refuse(why, cap, major, minor, target, msg);
        }
        seen |= bit;
        f += n;
    }
    return 1;
}

/* ---- compile ---------------------------------------------------------------------------------- */
/* An extra option that would choose the architecture behind the allow-list's back. */
static int names_arch(const char *opt) {
    const char *bad[] = {"--offload-arch", "--gpu-architecture", "--cuda-gpu-arch", "-arch",
                         "-mcpu",          "--amdgpu-target",    "-march"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        size_t n = strlen(bad[i]);
        if (strncmp(opt, bad[i], n) == 0 && (opt[n] == '\0' || opt[n] == '=')) return 1;
    }
    return 0;
}

int rk_hiprtc_compile(const char *src, size_t len, const char *target, const char *extra, rk_codeobj *out,
                      rk_buf *log) {
    out->data = NULL;
    out->len = 0;
    const hiprtc_api *a = hip();
    if (!a) {
        if (log) rk_buf_printf(log, "%s\n", g_hip.why);
        return ROPEKV_ERR_IO;
    }
    char why[512];
    if (!rk_hiprtc_supports(a->major, a->minor, target, why, sizeof why)) {
        if (log) rk_buf_printf(log, "%s\n", why);
        return ROPEKV_ERR_TARGET;
    }

    char archopt[128];
    snprintf(archopt, sizeof archopt, "--offload-arch=%s", target);
    enum { CAP = 128 };
    const char *opts[CAP];
    int n = 0;
    opts[n++] = archopt;
    opts[n++] = "-O3";
    opts[n++] = "-ffp-contract=off";
    opts[n++] = "-std=c++17";
    char *store = NULL;
    int rc = rk_split_options(extra, opts, n, CAP, &store, &n);
    if (rc != ROPEKV_OK) {
        if (rc == ROPEKV_ERR_COMPILE && log) rk_buf_printf(log, "hiprtc: too many extra options\n");
        free(store);
        return rc;
    }
    for (int i = 4; i < n; i++) {
        if (names_arch(opts[i])) {
            if (log)
                rk_buf_printf(log, "hiprtc: extra option '%s' chooses the architecture; pass the target instead\n",
                              opts[i]);
            free(store);
            return ROPEKV_ERR_TARGET;
        }
    }
    char *text = malloc(len + 1);
    if (!text) {
        free(store);
        return ROPEKV_ERR_NOMEM;
    }
    memcpy(text, src, len);
    text[len] = '\0';

    int serial = a->major < 6;
    if (serial) pthread_mutex_lock(&g_hip_serial);
    hiprtc_program prog = NULL;
    hiprtc_result r = a->create(&prog, text, "ropekv.hip", 0, NULL, NULL);
    if (r != HIPRTC_OK) {
        if (log) rk_buf_printf(log, "hiprtc: hiprtcCreateProgram: %s\n", a->error_string(r));
        rc = r == HIPRTC_OUT_OF_MEMORY ? ROPEKV_ERR_NOMEM : ROPEKV_ERR_COMPILE;
        prog = NULL;
    } else {
        r = a->compile(prog, n, opts);
        size_t ln = 0;
        if (log && a->log_size(prog, &ln) == HIPRTC_OK && ln > 1) {
            char *s = malloc(ln);
            if (s && a->log(prog, s) == HIPRTC_OK) rk_buf_put(log, s, strnlen(s, ln));
            free(s);
        }
        if (r != HIPRTC_OK) {
            if (log) rk_buf_printf(log, "hiprtc %d.%d: %s (%s)\n", a->major, a->minor, a->error_string(r), archopt);
            rc = r == HIPRTC_OUT_OF_MEMORY ? ROPEKV_ERR_NOMEM : ROPEKV_ERR_COMPILE;
        } else {
            size_t cn = 0;
            if (a->code_size(prog, &cn) != HIPRTC_OK || cn == 0) {
                if (log) rk_buf_printf(log, "hiprtc: no code object\n");
                rc = ROPEKV_ERR_COMPILE;
            } else if (!(out->data = malloc(cn))) {
                rc = ROPEKV_ERR_NOMEM;
            } else if (a->code(prog, (char *)out->data) != HIPRTC_OK) {
                if (log) rk_buf_printf(log, "hiprtc: hiprtcGetCode failed\n");
                rk_code_free(out);
                rc = ROPEKV_ERR_COMPILE;
            } else {
                out->len = cn;
            }
        }
        a->destroy(&prog);
    }
    if (serial) pthread_mutex_unlock(&g_hip_serial);
    free(text);
    free(store);
    return rc;
}
