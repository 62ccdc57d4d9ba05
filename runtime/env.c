/* The ROPEKV_* variables of env.h: the table, the parsers, and the warnings. */
#include "env.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "rk.h"

typedef enum { TEXT, FLAG, NUMBER, CHOICE, VERSION } kind;

static const struct {
    const char *name;
    kind kind;
    long def, min, max;  /* FLAG, NUMBER */
    const char *choices; /* CHOICE: space-separated; an invalid value is an error, not a warning */
} table[RK_ENV_COUNT] = {
    [RK_ENV_BACKEND] = {"ROPEKV_BACKEND", CHOICE, 0, 0, 0, "hip cuda host"},
    [RK_ENV_TARGET] = {"ROPEKV_TARGET", TEXT, 0, 0, 0, NULL},
    [RK_ENV_CACHE_DIR] = {"ROPEKV_CACHE_DIR", TEXT, 0, 0, 0, NULL},
    [RK_ENV_CACHE_RO] = {"ROPEKV_CACHE_RO", TEXT, 0, 0, 0, NULL},
    [RK_ENV_DISABLE_CACHE] = {"ROPEKV_DISABLE_CACHE", FLAG, 0, 0, 1, NULL},
    [RK_ENV_LOG] = {"ROPEKV_LOG", FLAG, 0, 0, 1, NULL},
    [RK_ENV_PDL] = {"ROPEKV_PDL", FLAG, 1, 0, 1, NULL},
    [RK_ENV_PDL_PREFETCH] = {"ROPEKV_PDL_PREFETCH", FLAG, 0, 0, 1, NULL},
    [RK_ENV_FORCE_I64] = {"ROPEKV_FORCE_I64", FLAG, 0, 0, 1, NULL},
    [RK_ENV_COMPILE_TIMEOUT] = {"ROPEKV_COMPILE_TIMEOUT", NUMBER, RK_COMPILE_TIMEOUT_DEFAULT, 0, RK_COMPILE_TIMEOUT_MAX,
                                NULL},
    [RK_ENV_NVRTC] = {"ROPEKV_NVRTC", TEXT, 0, 0, 0, NULL},
    [RK_ENV_HIPRTC] = {"ROPEKV_HIPRTC", TEXT, 0, 0, 0, NULL},
    [RK_ENV_LIBCUDA] = {"ROPEKV_LIBCUDA", TEXT, 0, 0, 0, NULL},
    [RK_ENV_LIBHIP] = {"ROPEKV_LIBHIP", TEXT, 0, 0, 0, NULL},
    [RK_ENV_HIPRTC_VERSION] = {"ROPEKV_HIPRTC_VERSION", VERSION, 0, 0, 0, NULL},
    [RK_ENV_DUMP] = {"ROPEKV_DUMP", TEXT, 0, 0, 0, NULL},
    [RK_ENV_DUMP_WHEN] = {"ROPEKV_DUMP_WHEN", TEXT, 0, 0, 0, NULL},
    [RK_ENV_DUMP_MAX_BYTES] = {"ROPEKV_DUMP_MAX_BYTES", TEXT, 0, 0, 0, NULL},
};

const char *rk_env_name(rk_env_id id) { return table[id].name; }

const char *rk_env_text(rk_env_id id) {
    const char *v = getenv(table[id].name);
    return v && *v ? v : NULL;
}

/* FNV-1a of the n bytes at s, never 0. */
static uint64_t hash(const char *s, size_t n) {
    uint64_t h = 1469598103934665603u;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211u;
    return h | 1;
}

/* Warns about an invalid value once per variable and value (a hash of the last one warned about). */
static void warn(rk_env_id id, const char *v, const char *expected, const char *using) {
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static uint64_t warned[RK_ENV_COUNT];
    const uint64_t h = hash(v, strlen(v));
    pthread_mutex_lock(&mu);
    int again = warned[id] == h;
    warned[id] = h;
    pthread_mutex_unlock(&mu);
    char shown[256];
    if (!again)
        fprintf(stderr, "ropekv: warning: %s=%s: expected %s; using %s\n", table[id].name,
                rk_printable(v, shown, sizeof shown), expected, using);
}

/* 1 or 0 for a flag's spelling, -1 for anything else. */
static int parse_flag(const char *v) {
    static const char *const on[] = {"1", "true", "yes", "on"}, *const off[] = {"0", "false", "no", "off"};
    for (int i = 0; i < 4; i++) {
        if (strcasecmp(v, on[i]) == 0) return 1;
        if (strcasecmp(v, off[i]) == 0) return 0;
    }
    return -1;
}

int rk_env_flag(rk_env_id id) {
    const char *v = rk_env_text(id);
    int f = v ? parse_flag(v) : -1;
    if (v && f < 0) warn(id, v, "1, true, yes, on, 0, false, no or off", table[id].def ? "1" : "0");
    return f < 0 ? (int)table[id].def : f;
}

long rk_env_number(rk_env_id id) {
    const char *v = rk_env_text(id);
    if (!v) return table[id].def;
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (*end || errno || end == v || n < table[id].min || n > table[id].max) {
        char expected[96], using[32];
        snprintf(expected, sizeof expected, "a whole number from %ld to %ld", table[id].min, table[id].max);
        snprintf(using, sizeof using, "%ld", table[id].def);
        warn(id, v, expected, using);
        return table[id].def;
    }
    return n;
}

/* The index of v in the space-separated list, or -1. */
static int choice_index(const char *list, const char *v) {
    size_t n = strlen(v);
    int i = 0;
    for (const char *p = list; *p; i++) {
        size_t w = strcspn(p, " ");
        if (w == n && strncmp(p, v, n) == 0) return i;
        p += w;
        p += *p == ' ';
    }
    return -1;
}

int rk_env_choice(rk_env_id id, char *why, size_t cap) {
    const char *v = rk_env_text(id);
    int i = v ? choice_index(table[id].choices, v) : -1;
    if (v && i < 0) {
        char shown[256];
        snprintf(why, cap, "%s=%s: expected one of: %s", table[id].name, rk_printable(v, shown, sizeof shown),
                 table[id].choices);
        return -2;
    }
    return i;
}
int rk_env_version(rk_env_id id, int *major, int *minor) {
    const char *v = rk_env_text(id);
    int a, b, n = 0;
    if (!v) return 0;
    if (sscanf(v, "%3d.%3d%n", &a, &b, &n) == 2 && v[n] == '\0' && a >= 0 && b >= 0 && v[0] >= '0' && v[0] <= '9') {
        *major = a;
        *minor = b;
        return 1;
    }
    warn(id, v, "a version MAJOR.MINOR such as 6.2", "the default");
    return 0;
}

/* ROPEKV_* names read outside the library (the Python binding, its wheel build, ropekv-gen's offline tools):
 * known, so not warned about as misspellings. */
static const char *const elsewhere[] = {"ROPEKV_LIB",         "ROPEKV_BUILD_DIR", "ROPEKV_WHEEL_BUNDLE", "ROPEKV_CLANG",
                                        "ROPEKV_LLVM_SUFFIX", "ROPEKV_NO_BUNDLE", "ROPEKV_TORCH_NATIVE"};

/* 1 when name (NAME=value, of environ) is a ROPEKV_* variable nobody reads: most likely a misspelling. */
static int unknown_name(const char *entry) {
    const size_t n = strcspn(entry, "=");
    if (strncmp(entry, "ROPEKV_", 7) != 0) return 0;
    for (int i = 0; i < RK_ENV_COUNT; i++)
        if (strlen(table[i].name) == n && strncmp(entry, table[i].name, n) == 0) return 0;
    for (size_t i = 0; i < sizeof elsewhere / sizeof elsewhere[0]; i++)
        if (strlen(elsewhere[i]) == n && strncmp(entry, elsewhere[i], n) == 0) return 0;
    return 1;
}

void rk_env_warn_invalid(void) {
    extern char **environ;
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static uint64_t *warned; /* hashes of the unknown names warned about (once each), n of them, room for cap */
    static size_t n_warned, cap;
    int major, minor;
    for (int i = 0; i < RK_ENV_COUNT; i++) {
        if (table[i].kind == FLAG) rk_env_flag((rk_env_id)i);
        if (table[i].kind == NUMBER) rk_env_number((rk_env_id)i);
        if (table[i].kind == VERSION) rk_env_version((rk_env_id)i, &major, &minor);
    }
    pthread_mutex_lock(&mu);
    for (char **e = environ; e && *e; e++) {
        if (!unknown_name(*e)) continue;
        const size_t n = strcspn(*e, "=");
        const uint64_t h = hash(*e, n);
        size_t i = 0;
        while (i < n_warned && warned[i] != h) i++;
        if (i < n_warned) continue;
        if (n_warned == cap) { /* out of memory: not warned now (rather than at every context) */
            uint64_t *grown = realloc(warned, sizeof *grown * (cap ? cap * 2 : 16));
            if (!grown) continue;
            warned = grown;
            cap = cap ? cap * 2 : 16;
        }
        warned[n_warned++] = h;
        char shown[256];
        fprintf(stderr, "ropekv: warning: %s is not a variable ropekv reads (a misspelling? README lists them)\n",
                rk_escape(*e, n, shown, sizeof shown));
    }
    pthread_mutex_unlock(&mu);
}
