/* ropekv runtime: contexts, the kernel cache (memory, then disk, then compile), argument checks,
 * launches. Lua never runs here except inside ropekv_load_spec*. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "args_check.h"
#include "cache.h"
#include "dump.h"
#include "env.h"
#include "proc.h"
#include "rk.h"
#include "ropekv.h"

/* ---- status names --------------------------------------------------------------------------- */
int ropekv_version_number(void) { return ROPEKV_VERSION_NUMBER; }
const char *ropekv_version_string(void) { return ROPEKV_VERSION_STRING; }

const char *ropekv_status_name(ropekv_status s) {
    switch (s) {
#define NAME_(name, value, msg) \
    case name: return #name;
        ROPEKV_STATUS_LIST(NAME_)
#undef NAME_
    }
    return "ROPEKV_UNKNOWN";
}

const char *ropekv_status_message(ropekv_status s) {
    switch (s) {
#define MSG_(name, value, msg) \
    case name: return msg;
        ROPEKV_STATUS_LIST(MSG_)
#undef MSG_
    }
    return "unknown status";
}

/* ---- structs that grow (include/ropekv.h) -------------------------------------------------------------- */
/* The end of a struct's field: the structs of version 0.1 end at their last field, which a size of 0 reads up to.
 * A field added later goes past the struct's sizeof then, so these stay. */
#define END_OF_(type, field) (offsetof(type, field) + sizeof(((type *)0)->field))
#define OPTIONS_0_1 END_OF_(ropekv_options, compile_only)
#define VARIANT_0_1 END_OF_(ropekv_variant, norm)
#define ARGS_0_1 END_OF_(ropekv_args, norm_out_st)
#define SIZE_MAX_ 4096 /* no version of a struct is larger: a size past it is not one */

/* The caller's struct `in` (named what), whose size field says how much of it there is (0: base bytes), as the
 * library's struct `out` of `have` bytes: the caller's bytes, then zeros; its size is `have`. A caller's struct
 * larger than the library's may only have zeros past it. ROPEKV_OK, or ROPEKV_ERR_VERSION with the reason in why. */
static ropekv_status sized_in(const void *in, size_t base, void *out, size_t have, const char *what, char *why,
                              size_t cap) {
    size_t size;
    memcpy(&size, in, sizeof size);
    const size_t n = size ? size : base;
    if (n < sizeof size || n > SIZE_MAX_) {
        snprintf(why, cap, "%s.size is %zu: not the size of a version of %s (0 or sizeof(%s))", what, size, what, what);
        return ROPEKV_ERR_VERSION;
    }
    for (size_t i = have; i < n; i++)
        if (((const unsigned char *)in)[i]) {
            snprintf(why, cap,
                     "%s.size is %zu, and byte %zu, past the %zu bytes of this library's %s (ropekv %s), is not zero: "
                     "the caller sets a field of a newer version",
                     what, size, i, have, what, ROPEKV_VERSION_STRING);
            return ROPEKV_ERR_VERSION;
        }
    const size_t m = n < have ? n : have;
    memcpy(out, in, m);
    memset((unsigned char *)out + m, 0, have - m);
    memcpy(out, &have, sizeof have);
    return ROPEKV_OK;
}

/* ---- context ---------------------------------------------------------------------------------- */
#define RK_MAX_RO_LAYERS 8 /* read-only cache layers per context; more are ignored with a warning */

struct ropekv_kernel {
    ropekv_ctx *ctx;
    /* lookup key: the spec's name and generation, and the caller's choices */
    unsigned generation;
    char spec_name[64];
    char record_name[64]; /* v.record points here (when the caller named a record) */
    ropekv_variant v;     /* v.spec points at spec_name */
    /* state: 0 building, 1 ready, 2 failed (waiters copy status and message) */
    int state;
    int refs;
    ropekv_status status;
    char *error;
    rk_spec spec;                      /* the spec it was described from (d.spec points here) */
    rk_desc d;                         /* the description: name, key, code parameters, launch and argument rules */
    rk_views views;                    /* its public view (ropekv_kernel_param), pointing into spec and d */
    rk_tensor tensors[RK_TENSORS_MAX]; /* its tensors (ropekv_kernel_tensor) */
    int n_tensors;
    void *module[2];   /* [0] the 32-bit entry's build, [1] the 64-bit entry's */
    void *fn[2];       /* fn[1] is set (atomically) once built */
    int wide_building; /* under ctx->mu */
    char *spec_text;   /* a dumping context's kernel: the spec's text it was described from (malloc'd) */
    size_t spec_len;
    uint64_t launches, refused; /* launches that passed the argument check, and that failed it (atomic) */
    struct ropekv_kernel *next;
};

typedef struct ctx_spec { /* a spec in use: built in (generation 0) or loaded at run time */
    rk_spec spec;
    unsigned generation;
    char *text; /* a loaded spec's text (malloc'd; a dump holds it); NULL for a built-in one (rk_embedded) */
    size_t len;
} ctx_spec;

struct ropekv_ctx {
    pthread_mutex_t mu;
    pthread_cond_t built;
    rk_device dev;
    rk_arch_table archs;
    const rk_arch *arch; /* the arch row the device maps to */
    rk_cache cache;
    rk_cache ro[RK_MAX_RO_LAYERS]; /* read-only layers, searched in order before cache */
    char ro_compiler[RK_MAX_RO_LAYERS][sizeof(((rk_device *)0)->compiler_id)]; /* the identity each keys with */
    int ro_warned[RK_MAX_RO_LAYERS]; /* under mu: a refused entry of the layer was warned about */
    int n_ro;
    int compile_only; /* ropekv_options.compile_only: kernels are compiled and cached, never loaded */
    /* a compile-only context's compiler when not the backend's (rk_ctx_use_compiler) */
    int (*compile)(const char *src, size_t len, const char *target, const char *extra, rk_codeobj *out, rk_buf *log);
    int log;
    int pdl;          /* launch kernels whose row has `pdl` with programmatic serialization */
    int pdl_prefetch; /* ... reading the static inputs before the wait */
    int force_i64;    /* $ROPEKV_FORCE_I64: every launch runs the 64-bit entry (tests of that entry on small shapes) */
    rk_dumper dump;   /* ropekv_options.dump, $ROPEKV_DUMP: launches written as dump files (dump.on) */
    unsigned char template_hash[32];
    ctx_spec *specs; /* built-in specs read on first use, and specs loaded at run time */
    int n_specs;
    unsigned generation;
    ropekv_kernel *kernels;
    /* Under mu: 1 for the caller's handle until ropekv_destroy, plus 1 per kernel reference held; the
     * context is freed when it reaches 0, so a kernel released after ropekv_destroy is still safe. */
    int refs;
    ropekv_stats stats; /* under mu */
    char error[8192];
};

static void count(ropekv_ctx *c, uint64_t *counter) {
    pthread_mutex_lock(&c->mu);
    (*counter)++;
    pthread_mutex_unlock(&c->mu);
}

ropekv_status ropekv_get_stats(const ropekv_ctx *c, ropekv_stats *out) {
    if (!c || !out) return ROPEKV_ERR_NULL;
    pthread_mutex_lock((pthread_mutex_t *)&c->mu);
    *out = c->stats;
    pthread_mutex_unlock((pthread_mutex_t *)&c->mu);
    return ROPEKV_OK;
}

static void logf_(ropekv_ctx *c, const char *fmt, ...) {
    if (!c->log) return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "ropekv: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}

/* Records the details of a failure and returns its status. */
static ropekv_status fail(ropekv_ctx *c, ropekv_status s, const char *fmt, ...) {
    char msg[sizeof c->error - 64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&c->mu);
    snprintf(c->error, sizeof c->error, "%s: %s", ropekv_status_name(s), msg);
    pthread_mutex_unlock(&c->mu);
    logf_(c, "%s: %s", ropekv_status_name(s), msg);
    return s;
}

const char *ropekv_last_error(const ropekv_ctx *c) { return c ? c->error : "no context"; }
const char *ropekv_backend_name(const ropekv_ctx *c) { return c ? c->dev.ops->name : ""; }
const char *ropekv_target(const ropekv_ctx *c) { return c ? c->dev.target : ""; }

/* A variable that is not ropekv's (XDG_CACHE_HOME, HOME) when set and not empty; ropekv's are env.h's. */
static const char *env(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

/* Default cache directory: $ROPEKV_CACHE_DIR, $XDG_CACHE_HOME/ropekv, ~/.cache/ropekv. */
static void cache_dir(const ropekv_options *o, char *out, size_t cap) {
    const char *d = o && o->cache_dir ? o->cache_dir : rk_env_text(RK_ENV_CACHE_DIR);
    if (d) snprintf(out, cap, "%s", d);
    else if (env("XDG_CACHE_HOME")) snprintf(out, cap, "%s/ropekv", env("XDG_CACHE_HOME"));
    else if (env("HOME")) snprintf(out, cap, "%s/.cache/ropekv", env("HOME"));
    else out[0] = '\0';
}

/* Whether the disk cache is on: the options' disk_cache, else on unless $ROPEKV_DISABLE_CACHE=1. */
static int disk_cache_on(const ropekv_options *o) {
    return o && o->disk_cache ? o->disk_cache > 0 : !rk_env_flag(RK_ENV_DISABLE_CACHE);
}

ropekv_status ropekv_cache_dir(const ropekv_ctx *c, char *out, size_t cap) {
    if (!out) return ROPEKV_ERR_NULL;
    char dir[4096] = "";
    if (c) {
        if (c->cache.usable) snprintf(dir, sizeof dir, "%s", c->cache.dir);
    } else if (disk_cache_on(NULL)) {
        cache_dir(NULL, dir, sizeof dir);
    }
    const size_t n = strlen(dir);
    if (n >= cap) {
        if (cap) out[0] = '\0';
        return ROPEKV_ERR_ARG;
    }
    memcpy(out, dir, n + 1);
    return ROPEKV_OK;
}

/* The digest of a bundle's compiler note for the context's backend and target: an entry (the cache's own
 * format) whose payload is the identity of the compiler that built the bundle's kernels. A read-only
 * layer holding one keys its lookups with that identity, so a machine without the compiler (or with
 * another version) finds them; other layers key with the local compiler's. */
static void compiler_note_digest(const ropekv_ctx *c, unsigned char out[32]) {
    char fmt[16];
    snprintf(fmt, sizeof fmt, "%u", RK_CACHE_FORMAT);
    rk_sha256 h;
    rk_sha256_init(&h);
    rk_sha256_field(&h, "compiler note", strlen("compiler note"));
    rk_sha256_field(&h, fmt, strlen(fmt));
    rk_sha256_field(&h, ROPEKV_VERSION_STRING, strlen(ROPEKV_VERSION_STRING));
    rk_sha256_field(&h, c->dev.ops->name, strlen(c->dev.ops->name));
    rk_sha256_field(&h, c->dev.target, strlen(c->dev.target));
    rk_sha256_final(&h, out);
}

/* An entry of read-only layer i that rk_cache_get refused (why: which file, and why): another user could
 * write it, or this one cannot read it. Counted as a reject; warned about once per layer (a bundle unpacked
 * with the wrong owner or modes would otherwise warn for every kernel), logged every time. */
static void refused(ropekv_ctx *c, int i, const char *why) {
    pthread_mutex_lock(&c->mu);
    c->stats.cache_rejects++;
    const int first = !c->ro_warned[i];
    c->ro_warned[i] = 1;
    pthread_mutex_unlock(&c->mu);
    if (first)
        fprintf(stderr, "ropekv: warning: %s; further such entries of %s are skipped without a warning\n", why,
                c->ro[i].dir);
    else logf_(c, "%s", why);
}

/* The read-only cache layers of a colon-separated list (empty names are skipped). One that cannot be
 * used is warned about and left out. A layer holding a compiler note (a bundle) keys with its identity;
 * a note that cannot be used is warned about (a refused one once per layer, as its entries) and the
 * layer keys with the local compiler's. */
static void open_read_only(ropekv_ctx *c, const char *list) {
    for (const char *p = list; p && *p; p += *p == ':') {
        const size_t n = strcspn(p, ":");
        char dir[4096];
        snprintf(dir, sizeof dir, "%.*s", (int)n, p);
        p += n;
        if (!dir[0]) continue;
        if (c->n_ro == RK_MAX_RO_LAYERS) {
            char shown[512];
            fprintf(stderr, "ropekv: warning: more than %d read-only cache layers; %s and later ones not used\n",
                    RK_MAX_RO_LAYERS, rk_printable(dir, shown, sizeof shown));
            return;
        }
        rk_cache *l = &c->ro[c->n_ro];
        rk_cache_open_ro(l, dir);
        if (!l->usable) {
            fprintf(stderr, "ropekv: warning: %s\n", l->why);
            continue;
        }
        unsigned char digest[32];
        rk_codeobj note = {0};
        compiler_note_digest(c, digest);
        char *id = c->ro_compiler[c->n_ro], why[1024] = "";
        const int got = rk_cache_get(l, digest, &note.data, &note.len, why, sizeof why);
        if (got == RK_CACHE_REFUSED) refused(c, c->n_ro, why);
        else if (why[0]) fprintf(stderr, "ropekv: warning: %s\n", why);
        if (got == RK_CACHE_MISS && why[0]) count(c, &c->stats.cache_rejects);
        if (got == RK_CACHE_OK && note.len < sizeof c->ro_compiler[0] && !memchr(note.data, '\0', note.len))
            snprintf(id, sizeof c->ro_compiler[0], "%.*s", (int)note.len, (const char *)note.data);
        else snprintf(id, sizeof c->ro_compiler[0], "%s", c->dev.compiler_id);
        rk_code_free(&note);
        logf_(c, "read-only cache layer %s (kernels of %s)", l->dir, id);
        c->n_ro++;
    }
}

/* The arch row a device target maps to: its base name ("gfx942" of "gfx942:sramecc+:xnack-"), or
 * for NVIDIA the newest sm_XY row not newer than the device. */
static const rk_arch *arch_for_target(const rk_arch_table *t, const char *target) {
    char base[RK_NAME_MAX];
    snprintf(base, sizeof base, "%.*s", (int)strcspn(target, ":"), target);
    const rk_arch *a = rk_arch_find(t, base);
    if (a || strncmp(base, "sm_", 3) != 0) return a;
    int want = atoi(base + 3), best = -1;
    for (int i = 0; i < t->n; i++) {
        if (t->a[i].vendor != RK_VENDOR_NVIDIA || strncmp(t->a[i].name, "sm_", 3) != 0) continue;
        int cc = atoi(t->a[i].name + 3);
        if (cc <= want && cc > best) best = cc, a = &t->a[i];
    }
    return a;
}

static int open_backend(ropekv_ctx *c, const rk_backend_ops *ops, int ordinal, const char *target, rk_buf *log) {
    memset(&c->dev, 0, sizeof c->dev);
    c->dev.ops = ops;
    return ops->open(&c->dev, ordinal, target, log);
}

/* The dump options (ropekv_options.dump*, $ROPEKV_DUMP*): an invalid policy is the caller's error (ROPEKV_ERR_ARG,
 * named on stderr); a directory that cannot be used is a warning, and nothing is dumped. */
static ropekv_status open_dump(ropekv_ctx *c, const ropekv_options *o) {
    const char *dir = o && o->dump ? o->dump : rk_env_text(RK_ENV_DUMP);
    const char *when = o && o->dump_when ? o->dump_when : rk_env_text(RK_ENV_DUMP_WHEN);
    char max_text[32], why[1024];
    const char *max = rk_env_text(RK_ENV_DUMP_MAX_BYTES);
    if (o && o->dump_max_bytes < 0) {
        fprintf(stderr, "ropekv: error: options.dump_max_bytes = %lld: must be >= 0 (0: the default)\n",
                (long long)o->dump_max_bytes);
        return ROPEKV_ERR_ARG;
    }
    if (o && o->dump_max_bytes > 0) {
        snprintf(max_text, sizeof max_text, "%lld", (long long)o->dump_max_bytes);
        max = max_text;
    }
    rk_dump_policy p;
    if (rk_dump_policy_parse(when, max, &p, why, sizeof why) != ROPEKV_OK) {
        const int opt_when = o && o->dump_when, opt_max = o && o->dump_max_bytes;
        fprintf(stderr, "ropekv: error: %s: %s\n",
                strncmp(why, "dump when", 9) == 0 ? (opt_when ? "options.dump_when" : "ROPEKV_DUMP_WHEN")
                                                  : (opt_max ? "options.dump_max_bytes" : "ROPEKV_DUMP_MAX_BYTES"),
                why);
        return ROPEKV_ERR_ARG;
    }
    if (dir && rk_dumper_open(&c->dump, dir, &p, why, sizeof why) != 0)
        fprintf(stderr, "ropekv: warning: %s; no launch is dumped\n", why);
    return ROPEKV_OK;
}

ropekv_status ropekv_create(ropekv_ctx **out, const ropekv_options *o) {
    if (!out) return ROPEKV_ERR_NULL;
    *out = NULL;
    ropekv_options opts;
    char bad[512];
    if (o && sized_in(o, OPTIONS_0_1, &opts, sizeof opts, "ropekv_options", bad, sizeof bad) != ROPEKV_OK) {
        fprintf(stderr, "ropekv: error: %s\n", bad);
        return ROPEKV_ERR_VERSION;
    }
    if (o) o = &opts;
    ropekv_ctx *c = calloc(1, sizeof *c);
    if (!c) return ROPEKV_ERR_NOMEM;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->built, NULL);
    c->refs = 1;
    rk_env_warn_invalid();
    c->log = o && o->log ? o->log > 0 : rk_env_flag(RK_ENV_LOG);
    c->pdl = o && o->pdl ? o->pdl > 0 : rk_env_flag(RK_ENV_PDL);
    c->pdl_prefetch = o && o->pdl_prefetch ? o->pdl_prefetch > 0 : rk_env_flag(RK_ENV_PDL_PREFETCH);
    c->force_i64 = rk_env_flag(RK_ENV_FORCE_I64);
    if (open_dump(c, o) != ROPEKV_OK) {
        ropekv_destroy(c);
        return ROPEKV_ERR_ARG;
    }

    rk_err err = {0};
    size_t len;
    const char *archs = rk_embedded("archs.lua", &len);
    int rc = archs ? rk_archs_load("specs/archs.lua", archs, len, &c->archs, &err)
                   : rk_fail(&err, ROPEKV_ERR_IO, "specs/archs.lua is not built in");
    if (rc != ROPEKV_OK) {
        logf_(c, "%s", err.msg);
        ropekv_destroy(c);
        return (ropekv_status)rc;
    }

    /* Backend: forced by option or $ROPEKV_BACKEND, else the first one with a device. */
    ropekv_backend want = o ? o->backend : ROPEKV_BACKEND_AUTO;
    char why[512];
    const int eb = rk_env_choice(RK_ENV_BACKEND, why, sizeof why); /* hip cuda host: 0 1 2 */
    if (want == ROPEKV_BACKEND_AUTO && eb == -2) {                 /* not the default: another backend would surprise */
        fprintf(stderr, "ropekv: error: %s\n", why);
        ropekv_destroy(c);
        return ROPEKV_ERR_ARG;
    }
    if (want == ROPEKV_BACKEND_AUTO && eb >= 0) want = (ropekv_backend)(eb + 1);
    const char *target = o && o->target ? o->target : rk_env_text(RK_ENV_TARGET);
    if (target) { /* a target id is short and printable: it is part of cache keys and of messages */
        int control = 0;
        for (const char *p = target; *p; p++) control |= (unsigned char)*p < 0x20 || *p == 0x7f;
        if (control || strlen(target) >= sizeof c->dev.target) {
            char shown[160];
            fprintf(stderr, "ropekv: error: %s '%s': %s\n", o && o->target ? "options.target" : "ROPEKV_TARGET",
                    rk_printable(target, shown, sizeof shown),
                    control ? "holds control characters" : "too long for a target id");
            ropekv_destroy(c);
            return ROPEKV_ERR_ARG;
        }
    }
    int ordinal = o ? o->device : 0;
    if (o && o->compile_only > 0) { /* no device: the backend and the target are the caller's */
        if (want == ROPEKV_BACKEND_AUTO || !target) {
            fprintf(stderr, "ropekv: error: a compile-only context needs options.backend and options.target\n");
            ropekv_destroy(c);
            return ROPEKV_ERR_ARG;
        }
        c->compile_only = 1;
        ordinal = RK_COMPILE_ONLY;
    }
    /* Each backend passed over is logged with the reason; a library the caller named ($ROPEKV_LIBHIP,
     * $ROPEKV_LIBCUDA) that cannot be used is an error, never a reason to try the next backend. */
    rk_buf log = {0};
    const rk_backend_ops *order[3] = {&rk_backend_hip, &rk_backend_cuda, &rk_backend_host};
    rc = ROPEKV_ERR_BACKEND;
    for (int i = 0; i < 3 && rc != ROPEKV_OK; i++) {
        if (want != ROPEKV_BACKEND_AUTO && want != (ropekv_backend)(i + 1)) continue;
        if (log.len) rk_buf_put(&log, "; ", 2);
        const size_t at = log.len;
        rc = open_backend(c, order[i], ordinal, target, &log);
        if (rc == ROPEKV_OK) break;
        const char *reason = log.p && log.len > at ? log.p + at : ropekv_status_name((ropekv_status)rc);
        if (c->dev.named_unusable) {
            fprintf(stderr, "ropekv: error: %s; name a usable library there, or unset it\n", reason);
            rc = ROPEKV_ERR_BACKEND;
            break;
        }
        const size_t n = strlen(order[i]->name);
        const int named = strncmp(reason, order[i]->name, n) == 0 && (reason[n] == ':' || reason[n] == ' ');
        logf_(c, "backend skipped: %s%s%s", named ? "" : order[i]->name, named ? "" : ": ", reason);
    }
    if (rc == ROPEKV_OK && !(c->arch = arch_for_target(&c->archs, c->dev.target))) {
        rk_buf_printf(&log, "target %s has no row in specs/archs.lua", c->dev.target);
        c->dev.ops->close(&c->dev);
        rc = ROPEKV_ERR_TARGET;
    }
    if (rc == ROPEKV_OK) c->dev.block = rk_arch_max_block(c->arch);
    if (rc != ROPEKV_OK) {
        logf_(c, "no backend: %s", log.p ? log.p : "");
        rk_buf_free(&log);
        c->dev.ops = NULL;
        ropekv_destroy(c);
        return (ropekv_status)rc;
    }
    rk_buf_free(&log);

    /* Template hash: part of every cache key. */
    rk_buf tpl = {0};
    rk_sha256 h;
    rk_sha256_init(&h);
    if ((rc = rk_template_text(&tpl, &err)) != ROPEKV_OK) { /* never key caches on an empty template */
        logf_(c, "%s", err.msg);
        rk_buf_free(&tpl);
        ropekv_destroy(c);
        return (ropekv_status)rc;
    }
    rk_sha256_update(&h, tpl.p, tpl.len);
    rk_sha256_final(&h, c->template_hash);
    rk_buf_free(&tpl);

    open_read_only(c, o && o->cache_ro ? o->cache_ro : rk_env_text(RK_ENV_CACHE_RO));
    char dir[4096];
    cache_dir(o, dir, sizeof dir);
    if (disk_cache_on(o) && dir[0]) {
        rk_cache_open(&c->cache, dir);
        if (!c->cache.usable) fprintf(stderr, "ropekv: warning: %s\n", c->cache.why);
    } else {
        c->cache.usable = 0;
    }
    logf_(c, "backend %s, target %s (arch row %s), compiler %s, cache %s", c->dev.ops->name, c->dev.target,
          c->arch->name, c->dev.compiler_id, c->cache.usable ? c->cache.dir : "memory only");
    *out = c;
    return ROPEKV_OK;
}

/* Frees the context and every kernel: its last reference is gone. */
static void ctx_free(ropekv_ctx *c) {
    ropekv_kernel *k = c->kernels;
    while (k) {
        ropekv_kernel *n = k->next;
        for (int w = 0; w < 2; w++)
            if (k->module[w] && c->dev.ops) c->dev.ops->unload(&c->dev, k->module[w]);
        free(k->error);
        free(k->spec_text);
        free(k);
        k = n;
    }
    if (c->dev.ops) c->dev.ops->close(&c->dev);
    for (int i = 0; i < c->n_specs; i++) free(c->specs[i].text);
    free(c->specs);
    pthread_cond_destroy(&c->built);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* Drops one reference (the caller's handle, or one kernel reference); the last one frees it all. */
static void ctx_unref(ropekv_ctx *c) {
    pthread_mutex_lock(&c->mu);
    const int last = --c->refs == 0;
    pthread_mutex_unlock(&c->mu);
    if (last) ctx_free(c);
}

void ropekv_destroy(ropekv_ctx *c) {
    if (c) ctx_unref(c);
}

/* ---- specs ------------------------------------------------------------------------------------------ */
/* Under mu: the index of the spec named name in c->specs, or c->n_specs. */
static int spec_index(const ropekv_ctx *c, const char *name) {
    int i = 0;
    while (i < c->n_specs && strcmp(c->specs[i].spec.name, name) != 0) i++;
    return i;
}

/* Under mu: the spec named s->name becomes *s with generation gen and text (malloc'd, taken over; NULL for a built-in
 * spec); replace = 0 keeps an entry already there (a built-in spec read by two threads at once). */
static int put_spec(ropekv_ctx *c, const rk_spec *s, unsigned gen, int replace, char *text, size_t len) {
    const int i = spec_index(c, s->name);
    if (i < c->n_specs && !replace) {
        free(text);
        return ROPEKV_OK;
    }
    if (i == c->n_specs) {
        ctx_spec *grown = realloc(c->specs, sizeof *grown * (size_t)(c->n_specs + 1));
        if (!grown) {
            free(text);
            return ROPEKV_ERR_NOMEM;
        }
        c->specs = grown;
        c->specs[i].text = NULL;
        c->n_specs++;
    }
    c->specs[i].spec = *s;
    c->specs[i].generation = gen;
    free(c->specs[i].text);
    c->specs[i].text = text;
    c->specs[i].len = len;
    return ROPEKV_OK;
}
ropekv_status ropekv_load_spec_text(ropekv_ctx *c, const char *file, const char *text, size_t len) {
    if (!c || !file || !text)
        return c ? fail(c, ROPEKV_ERR_NULL, "load_spec_text: NULL file or text") : ROPEKV_ERR_NULL;
    rk_spec s;
    rk_err err = {0};
    int rc = rk_spec_load(file, text, len, &c->archs, &s, &err);
    if (rc != ROPEKV_OK) return fail(c, (ropekv_status)rc, "%s", err.msg);
    char *kept = malloc(len + 1); /* a dump of its kernels holds the text */
    if (!kept) return fail(c, ROPEKV_ERR_NOMEM, "load_spec: out of memory");
    memcpy(kept, text, len);
    kept[len] = '\0';
    pthread_mutex_lock(&c->mu);
    int rc_put = put_spec(c, &s, ++c->generation, 1, kept, len); /* kernels of the old content are never found again */
    pthread_mutex_unlock(&c->mu);
    if (rc_put != ROPEKV_OK) return fail(c, ROPEKV_ERR_NOMEM, "load_spec: out of memory");
    char shown[4400];
    logf_(c, "loaded spec %s from %s", s.name, rk_printable(file, shown, sizeof shown));
    return ROPEKV_OK;
}

ropekv_status ropekv_load_spec(ropekv_ctx *c, const char *path) {
    if (!c || !path) return c ? fail(c, ROPEKV_ERR_NULL, "load_spec: NULL path") : ROPEKV_ERR_NULL;
    char shown[4400];
    const char *name = rk_printable(path, shown, sizeof shown);
    FILE *f = fopen(path, "rb");
    if (!f) return fail(c, ROPEKV_ERR_IO, "cannot open spec %s: %s", name, strerror(errno));
    rk_buf b = {0};
    char chunk[4096];
    size_t n;
    int rc = ROPEKV_OK;
    while (rc == ROPEKV_OK && (n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        rc = rk_buf_put(&b, chunk, n);
        if (b.len > RK_SPEC_TEXT_MAX) break; /* enough to be refused by the loader's cap */
    }
    int bad = ferror(f);
    fclose(f);
    ropekv_status s = rc != ROPEKV_OK ? fail(c, ROPEKV_ERR_NOMEM, "%s: out of memory", name)
                      : bad           ? fail(c, ROPEKV_ERR_IO, "cannot read spec %s", name)
                                      : ropekv_load_spec_text(c, path, b.p ? b.p : "", b.len);
    rk_buf_free(&b);
    return s;
}

ropekv_status ropekv_cache_clear(ropekv_ctx *c) {
    if (!c) return ROPEKV_ERR_NULL;
    if (!c->cache.usable) return ROPEKV_OK;
    return rk_cache_clear(&c->cache) < 0 ? fail(c, ROPEKV_ERR_CACHE, "cannot clear %s", c->cache.dir) : ROPEKV_OK;
}

/* ---- describing a variant ------------------------------------------------------------------------- */
/* A variant's choices as the description takes them: the one list of its enumerated fields (the lookup
 * below compares two of them whole: rk_choice is enums only, no padding). */
static rk_choice choice_of(const ropekv_variant *v) {
    return (rk_choice){v->kv, v->q, v->positions, v->slots, v->q_dtype, v->layout, v->op, v->norm, 0};
}
_Static_assert(sizeof(rk_choice) == 9 * sizeof(int), "rk_choice: enums and the record index only");

/* How to fix a variant that spec s does not list: the other specs of the same L and R (loaded ones, then the
 * built-in ones) that list the whole choice on the context's target, named into out. Runs only on that
 * error path (built-in specs not yet in use are read from their embedded text here). */
static void listed_by(ropekv_ctx *c, const rk_spec *s, const rk_choice *choice, char *out, size_t cap) {
    char names[RK_MAX_SPECS][sizeof s->name];
    int n = 0;
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < c->n_specs && n < RK_MAX_SPECS; i++)
        snprintf(names[n++], sizeof names[0], "%s", c->specs[i].spec.name);
    pthread_mutex_unlock(&c->mu);
    for (size_t i = 0; n < RK_MAX_SPECS; i++) { /* built-in specs not loaded yet: specs/<name>.lua */
        const char *file = rk_embedded_at(i, NULL);
        if (!file) break;
        size_t len = strlen(file);
        if (len < 5 || len - 4 >= sizeof names[0] || strcmp(file + len - 4, ".lua") != 0 ||
            strcmp(file, "archs.lua") == 0 || strcmp(file, "records.lua") == 0)
            continue;
        snprintf(names[n], sizeof names[0], "%.*s", (int)(len - 4), file);
        int dup = 0;
        for (int j = 0; j < n && !dup; j++) dup = strcmp(names[j], names[n]) == 0;
        if (!dup) n++;
    }
    size_t at = (size_t)snprintf(out, cap, "specs of the same L and R that list it:");
    int found = 0;
    for (int i = 0; i < n && at < cap; i++) {
        if (strcmp(names[i], s->name) == 0) continue;
        rk_spec other;
        rk_desc d;
        rk_err err = {0};
        pthread_mutex_lock(&c->mu);
        const int j = spec_index(c, names[i]), loaded = j < c->n_specs;
        if (loaded) other = c->specs[j].spec;
        pthread_mutex_unlock(&c->mu);
        if (!loaded && rk_spec_builtin(names[i], &c->archs, &other, &err) != ROPEKV_OK) continue;
        if (other.kv_lora_rank != s->kv_lora_rank || other.rope_dim != s->rope_dim) continue;
        if (rk_desc_listed(&other, c->arch, choice, &d, &err) != ROPEKV_OK) continue;
        at += (size_t)snprintf(out + at, cap - at, "%s %s", found ? "," : "", other.name);
        found++;
    }
    if (!found)
        snprintf(out, cap, "no loaded or built-in spec with L=%d, R=%d lists it on %s: add one (a spec file) that does",
                 s->kv_lora_rank, s->rope_dim, c->arch->name);
}

/* The description of v on the context's target, from the spec it names: one loaded at run time, else the
 * built-in one (read from the embedded text on first use). *spec receives the spec (d->spec points
 * there) and *gen its generation. Nothing is enumerated: the description is computed for v alone. */
static ropekv_status describe(ropekv_ctx *c, const ropekv_variant *v, rk_spec *spec, unsigned *gen, rk_desc *d,
                              char **text, size_t *text_len) {
    if (c->dev.refused[0]) return fail(c, ROPEKV_ERR_TARGET, "%s", c->dev.refused);
    if (!v || !v->spec) return fail(c, ROPEKV_ERR_NULL, "variant or variant.spec is NULL");
    rk_err err = {0};
    pthread_mutex_lock(&c->mu);
    const int i = spec_index(c, v->spec), found = i < c->n_specs;
    if (found) {
        *spec = c->specs[i].spec;
        *gen = c->specs[i].generation;
        if (text && c->specs[i].text && (*text = malloc(c->specs[i].len + 1)) != NULL) {
            memcpy(*text, c->specs[i].text, c->specs[i].len + 1);
            *text_len = c->specs[i].len;
        }
    }
    pthread_mutex_unlock(&c->mu);
    if (!found) {
        int rc = rk_spec_builtin(v->spec, &c->archs, spec, &err);
        if (rc != ROPEKV_OK) return fail(c, (ropekv_status)rc, "%s", err.msg);
        *gen = 0;
        pthread_mutex_lock(&c->mu);
        rc = put_spec(c, spec, 0, 0, NULL, 0);
        pthread_mutex_unlock(&c->mu);
        if (rc != ROPEKV_OK) return fail(c, ROPEKV_ERR_NOMEM, "out of memory");
    }
    rk_choice choice = choice_of(v);
    if (v->record && rk_spec_row_find(spec, v->record, &choice, &err) != ROPEKV_OK)
        return fail(c, ROPEKV_ERR_UNSUPPORTED, "%s", err.msg);
    int rc = rk_desc_listed(spec, c->arch, &choice, d, &err);
    if (rc == ROPEKV_ERR_UNSUPPORTED && choice.record == 0) {
        char who[256];
        listed_by(c, spec, &choice, who, sizeof who);
        return fail(c, ROPEKV_ERR_UNSUPPORTED, "%s; %s", err.msg, who);
    }
    if (rc != ROPEKV_OK) return fail(c, (ropekv_status)rc, "%s", err.msg);
    return ROPEKV_OK;
}

/* ---- the cache key ------------------------------------------------------------------------------------ */
static void key_digest(const ropekv_ctx *c, const char *compiler_id, const rk_desc *d, const char *src, size_t len,
                       unsigned char out[32]) {
    unsigned char src_hash[32];
    rk_sha256 h;
    rk_sha256_init(&h);
    rk_sha256_update(&h, src, len);
    rk_sha256_final(&h, src_hash);
    char fmt[16];
    snprintf(fmt, sizeof fmt, "%u", RK_CACHE_FORMAT);
    rk_sha256_init(&h);
    rk_sha256_field(&h, fmt, strlen(fmt));
    rk_sha256_field(&h, ROPEKV_VERSION_STRING, strlen(ROPEKV_VERSION_STRING));
    rk_sha256_field(&h, c->template_hash, 32);
    rk_sha256_field(&h, d->key, strlen(d->key));
    rk_sha256_field(&h, d->name, strlen(d->name));
    rk_sha256_field(&h, src_hash, 32);
    rk_sha256_field(&h, c->dev.ops->name, strlen(c->dev.ops->name));
    rk_sha256_field(&h, compiler_id, strlen(compiler_id));
    char code[sizeof c->dev.target + 1]; /* the compiler's target: the device's, or its family's (rk_arch_code) */
    const char *target = rk_arch_code(c->arch, c->dev.target, code, sizeof code) ? code : c->dev.target;
    rk_sha256_field(&h, target, strlen(target));
    rk_sha256_field(&h, c->dev.options, strlen(c->dev.options));
    rk_sha256_field(&h, c->arch->options, strlen(c->arch->options));
    rk_sha256_final(&h, out);
}

/* Writes the compiler note into the context's writable cache (`ropekv-gen build --bundle`). Internal: not
 * exported. 0, or -1 with the reason in why. */
int rk_ctx_write_compiler_note(ropekv_ctx *c, char *why, size_t cap);
int rk_ctx_write_compiler_note(ropekv_ctx *c, char *why, size_t cap) {
    unsigned char digest[32];
    compiler_note_digest(c, digest);
    return rk_cache_put(&c->cache, digest, c->dev.compiler_id, strlen(c->dev.compiler_id), why, cap) == RK_CACHE_OK
               ? 0
               : -1;
}

/* The digest of that compiler note (`ropekv-gen build --bundle` looks it up in the bundle). Internal: not exported. */
void rk_ctx_compiler_note_digest(const ropekv_ctx *c, unsigned char out[32]);
void rk_ctx_compiler_note_digest(const ropekv_ctx *c, unsigned char out[32]) { compiler_note_digest(c, out); }


/* Makes a compile-only context build with fn under the identity id instead of its backend's compiler (keys and
 * the compiler note then carry id): `ropekv-gen build --bundle` builds the AMD targets the local hiprtc cannot
 * with clang offline. Internal: not exported. 0, or -1 for a device context. */
int rk_ctx_use_compiler(ropekv_ctx *c, const char *id,
                        int (*fn)(const char *, size_t, const char *, const char *, rk_codeobj *, rk_buf *));
int rk_ctx_use_compiler(ropekv_ctx *c, const char *id,
                        int (*fn)(const char *, size_t, const char *, const char *, rk_codeobj *, rk_buf *)) {
    if (!c->compile_only) return -1;
    c->compile = fn;
    snprintf(c->dev.compiler_id, sizeof c->dev.compiler_id, "%s", id);
    c->dev.refused[0] = '\0'; /* the refusal was the backend compiler's */
    return 0;
}

/* Loads code object co as entry `wide` of k (k->module[wide], *fn); an object lacking that entry is
 * ROPEKV_ERR_COMPILE. The reason of a failure goes to log. */
/* The entry point a compile-only context gives its kernels: built and cached, never loaded nor launched. */
static char not_loaded;

static int load_code(ropekv_ctx *c, ropekv_kernel *k, int wide, const rk_codeobj *co, void **fn, rk_buf *log) {
    if (c->compile_only) { /* no device to load into: the code object is only cached */
        *fn = &not_loaded;
        return ROPEKV_OK;
    }
    void *fns[2] = {NULL, NULL};
    int rc = c->dev.ops->load(&c->dev, co, k->d.name, &k->module[wide], fns, log);
    if (rc == ROPEKV_OK && !fns[wide]) {
        c->dev.ops->unload(&c->dev, k->module[wide]);
        k->module[wide] = NULL;
        rk_buf_printf(log, "the code object lacks %s%s", k->d.name, wide ? "_i64" : "");
        rc = ROPEKV_ERR_COMPILE;
    }
    if (rc == ROPEKV_OK) *fn = fns[wide];
    return rc;
}

/* The read-only layers, in order: 1 when one holds a valid entry of this source that loads (then it is
 * k's entry `wide`). An invalid entry, or one that does not load, is warned about, counted as a reject
 * and skipped, never removed; so is a refused one (refused: warned about once per layer). -1, with the reason in
 * log, when no code can be loaded here at all (ROPEKV_ERR_IO: e.g. an unusable $TMPDIR of the host backend), which
 * another entry or a compile would meet again. */
static int from_read_only(ropekv_ctx *c, ropekv_kernel *k, int wide, const char *text, size_t len, void **fn,
                          rk_buf *log_io) {
    for (int i = 0; i < c->n_ro; i++) {
        unsigned char digest[32];
        char why[1024] = "";
        rk_codeobj co = {0};
        key_digest(c, c->ro_compiler[i], &k->d, text, len, digest);
        int got = rk_cache_get(&c->ro[i], digest, &co.data, &co.len, why, sizeof why);
        if (got == RK_CACHE_REFUSED) {
            refused(c, i, why);
            continue;
        }
        if (got != RK_CACHE_OK) {
            if (why[0]) fprintf(stderr, "ropekv: warning: %s\n", why);
            if (got == RK_CACHE_MISS && why[0]) count(c, &c->stats.cache_rejects);
            continue;
        }
        rk_buf log = {0};
        int rc = load_code(c, k, wide, &co, fn, &log);
        if (rc == ROPEKV_OK) {
            logf_(c, "read-only cache hit %s in %s", k->d.name, c->ro[i].dir);
            count(c, &c->stats.disk_hits);
        } else if (rc == ROPEKV_ERR_IO) {
            rk_buf_printf(log_io, "%s", log.p ? log.p : "");
            rk_buf_free(&log);
            rk_code_free(&co);
            return -1;
        } else {
            fprintf(stderr, "ropekv: warning: an entry of %s in read-only cache layer %s does not load (%s); skipped\n",
                    k->d.name, c->ro[i].dir, log.p ? log.p : "");
            count(c, &c->stats.cache_rejects);
        }
        rk_buf_free(&log);
        rk_code_free(&co);
        if (rc == ROPEKV_OK) return 1;
    }
    return 0;
}

/* The source of entry `wide` of the kernel d describes: RK_ENTRIES, then the rendered kernel. */
static int entry_source(const rk_desc *d, int wide, rk_buf *src, rk_err *err) {
    int rc = rk_buf_printf(src, "#define RK_ENTRIES %d\n", wide ? 2 : 1);
    return rc == ROPEKV_OK ? rk_emit(d, src, err) : rc;
}

/* The digest of kernel k's entry `wide` (0: the 32-bit one, 1: the 64-bit one) as its context keys it in the
 * writable cache; a runtime reading that directory as a read-only layer with this context's compiler note keys it
 * the same (`ropekv-gen build --bundle` looks up every entry it made in the bundle). Internal: not exported. 0, or
 * -1 with the reason in why. */
int rk_kernel_entry_digest(const ropekv_kernel *k, int wide, unsigned char out[32], char *why, size_t cap);
int rk_kernel_entry_digest(const ropekv_kernel *k, int wide, unsigned char out[32], char *why, size_t cap) {
    rk_buf src = {0};
    rk_err err = {0};
    const int rc = entry_source(&k->d, wide, &src, &err);
    if (rc == ROPEKV_OK) key_digest(k->ctx, k->ctx->dev.compiler_id, &k->d, src.p, src.len, out);
    else snprintf(why, cap, "%s", err.msg[0] ? err.msg : "out of memory");
    rk_buf_free(&src);
    return rc == ROPEKV_OK ? 0 : -1;
}

/* Source -> digest -> read-only layers, writable disk cache or compiler -> loaded module holding one entry (templates/kernel.hip,
 * RK_ENTRIES): the 32-bit one (wide = 0) or the 64-bit one (wide = 1), stored in k->module[wide] and
 * *fn. Each is its own cache entry: the source differs by its first line. Runs without the context lock. */
static ropekv_status build(ropekv_ctx *c, ropekv_kernel *k, int wide, void **fn) {
    const rk_desc *d = &k->d;
    rk_buf src = {0}, log = {0};
    rk_err err = {0};
    ropekv_status s = ROPEKV_OK;
    int rc = entry_source(d, wide, &src, &err);
    if (rc != ROPEKV_OK) {
        rk_buf_free(&src);
        return err.msg[0] ? fail(c, (ropekv_status)rc, "%s", err.msg)
                          : fail(c, ROPEKV_ERR_NOMEM, "%s: out of memory", d->name);
    }
    const char *text = src.p;
    size_t len = src.len;
    unsigned char digest[32];
    char hex[65], why[1024] = "";
    const int ro = from_read_only(c, k, wide, text, len, fn, &log);
    if (ro != 0) {
        if (ro < 0) s = fail(c, ROPEKV_ERR_IO, "loading %s: %s", d->name, log.p ? log.p : "");
        rk_buf_free(&src);
        rk_buf_free(&log);
        return s;
    }
    key_digest(c, c->dev.compiler_id, d, text, len, digest);
    rk_sha256_hex(digest, hex);
    rk_codeobj co = {0};
    int from_disk = 0, lock = -1;
    if (c->cache.usable) {
        int got = rk_cache_get(&c->cache, digest, &co.data, &co.len, why, sizeof why);
        if (got == RK_CACHE_OK) {
            from_disk = 1;
        } else {
            if (why[0]) fprintf(stderr, "ropekv: warning: %s\n", why);
            if (got == RK_CACHE_MISS && why[0]) count(c, &c->stats.cache_rejects); /* an invalid entry, removed */
            lock = rk_cache_lock(&c->cache, digest); /* another process may be compiling it: wait */
            why[0] = '\0';
            from_disk = rk_cache_get(&c->cache, digest, &co.data, &co.len, why, sizeof why) == RK_CACHE_OK;
        }
    }
    for (int attempt = 0; attempt < 2; attempt++) {
        if (!from_disk) {
            double t0 = rk_now_ms();
            count(c, &c->stats.compiles);
            rc = c->compile
                     ? c->compile(text, len, c->dev.target, c->arch->options[0] ? c->arch->options : NULL, &co, &log)
                     : c->dev.ops->compile(&c->dev, text, len, d->name, c->arch, &co, &log);
            if (rc != ROPEKV_OK) {
                s = fail(c, (ropekv_status)rc, "compiling %s (%s) for %s with %s:\n%s", d->key, d->name, c->dev.target,
                         c->dev.compiler_id, log.p ? log.p : "");
                break;
            }
            logf_(c, "compiled %s for %s in %.1f ms (%zu bytes)", d->name, c->dev.target, rk_now_ms() - t0, co.len);
        } else {
            logf_(c, "disk cache hit %s (%s)", d->name, hex);
            count(c, &c->stats.disk_hits);
        }
        log.len = 0;
        rc = load_code(c, k, wide, &co, fn, &log);
        if (rc == ROPEKV_OK) {
            /* Only a code object that loads is worth keeping. */
            if (!from_disk && c->cache.usable &&
                rk_cache_put(&c->cache, digest, co.data, co.len, why, sizeof why) != RK_CACHE_OK)
                fprintf(stderr, "ropekv: warning: %s\n", why);
            break;
        }
        if (!from_disk || rc == ROPEKV_ERR_IO) { /* ROPEKV_ERR_IO: loading, not the object, fails: one error */
            s = fail(c, (ropekv_status)rc, "loading %s: %s", d->name, log.p ? log.p : "");
            break;
        }
        /* A cached object that does not load is dropped and rebuilt once. */
        fprintf(stderr, "ropekv: warning: cached %s/%s.rkco does not load (%s); rebuilding\n", c->cache.dir, hex,
                log.p ? log.p : "");
        count(c, &c->stats.cache_rejects);
        rk_code_free(&co);
        from_disk = 0;
    }
    if (lock >= 0) rk_cache_unlock(lock);
    rk_code_free(&co);
    rk_buf_free(&src);
    rk_buf_free(&log);
    return s;
}

/* ---- kernels ------------------------------------------------------------------------------------------ */
/* The caller's variant as the library's struct (sized_in): ROPEKV_OK, or ROPEKV_ERR_VERSION recorded on c. */
static ropekv_status variant_in(ropekv_ctx *c, const ropekv_variant *v, ropekv_variant *out) {
    char why[512];
    if (sized_in(v, VARIANT_0_1, out, sizeof *out, "ropekv_variant", why, sizeof why) != ROPEKV_OK)
        return fail(c, ROPEKV_ERR_VERSION, "%s", why);
    return ROPEKV_OK;
}

/* The caller's arguments *a as the library's struct: *a itself when it is one (its size sizeof, or 0 while the
 * struct is version 0.1's), else a copy in *buf that *a then points to. ROPEKV_OK, or ROPEKV_ERR_VERSION recorded
 * on c. */
static ropekv_status args_in(ropekv_ctx *c, const ropekv_args **a, ropekv_args *buf) {
    const ropekv_args *in = *a;
    if (!in || in->size == sizeof *in || (in->size == 0 && ARGS_0_1 == sizeof *in)) return ROPEKV_OK;
    char why[512];
    if (sized_in(in, ARGS_0_1, buf, sizeof *buf, "ropekv_args", why, sizeof why) != ROPEKV_OK)
        return fail(c, ROPEKV_ERR_VERSION, "%s", why);
    *a = buf;
    return ROPEKV_OK;
}

static int same_lookup(const ropekv_kernel *k, const ropekv_variant *v, unsigned gen) {
    const rk_choice have = choice_of(&k->v), want = choice_of(v);
    const int same_row = v->record ? k->v.record && strcmp(k->v.record, v->record) == 0
                                   : !k->v.record && have.kv == want.kv;
    return memcmp(&have.q, &want.q, sizeof have - offsetof(rk_choice, q)) == 0 && same_row && k->generation == gen &&
           strcmp(k->spec_name, v->spec) == 0;
}

/* Under mu: the generation a lookup of spec uses (0 for a built-in spec not read yet). */
static unsigned spec_generation(const ropekv_ctx *c, const char *spec) {
    const int i = spec_index(c, spec);
    return i < c->n_specs ? c->specs[i].generation : 0;
}

ropekv_status ropekv_kernel_get(ropekv_ctx *c, const ropekv_variant *v, ropekv_kernel **out) {
    if (!c || !out) return c ? fail(c, ROPEKV_ERR_NULL, "kernel_get: NULL out") : ROPEKV_ERR_NULL;
    *out = NULL;
    ropekv_variant vin;
    if (!v) return fail(c, ROPEKV_ERR_NULL, "variant is NULL");
    if (variant_in(c, v, &vin) != ROPEKV_OK) return ROPEKV_ERR_VERSION;
    v = &vin;
    if (!v->spec) return fail(c, ROPEKV_ERR_NULL, "variant.spec is NULL");
    char esc[128];
    if (strlen(v->spec) >= sizeof((ropekv_kernel *)0)->spec_name)
        return fail(c, ROPEKV_ERR_NO_SPEC, "no spec named '%s': name too long", rk_printable(v->spec, esc, 72));
    if (v->record && strlen(v->record) >= sizeof((ropekv_kernel *)0)->record_name)
        return fail(c, ROPEKV_ERR_UNSUPPORTED, "spec %s has no record named '%s': name too long",
                    rk_printable(v->spec, esc, 72), rk_printable(v->record, esc + 72, 56));

    pthread_mutex_lock(&c->mu);
    unsigned gen = spec_generation(c, v->spec);
    ropekv_kernel *k = c->kernels;
    while (k && !same_lookup(k, v, gen)) k = k->next;
    if (k) {
        while (k->state == 0) pthread_cond_wait(&c->built, &c->mu);
        ropekv_status s = k->status;
        if (s == ROPEKV_OK) {
            k->refs++;
            c->refs++;
            c->stats.memory_hits++;
            *out = k;
            pthread_mutex_unlock(&c->mu);
            return ROPEKV_OK;
        }
        snprintf(c->error, sizeof c->error, "%s", k->error ? k->error : ropekv_status_name(s));
        pthread_mutex_unlock(&c->mu);
        return s;
    }
    k = calloc(1, sizeof *k);
    if (!k) {
        pthread_mutex_unlock(&c->mu);
        return fail(c, ROPEKV_ERR_NOMEM, "kernel_get: out of memory");
    }
    k->ctx = c;
    snprintf(k->spec_name, sizeof k->spec_name, "%s", v->spec);
    k->generation = gen;
    k->v = *v;
    k->v.spec = k->spec_name;
    if (v->record) {
        snprintf(k->record_name, sizeof k->record_name, "%s", v->record);
        k->v.record = k->record_name;
    }
    k->next = c->kernels;
    c->kernels = k;
    pthread_mutex_unlock(&c->mu);

    unsigned described_gen; /* differs from gen only when the spec is replaced meanwhile: then the kernel
                               is the new content's, under the old lookup, and never found again */
    ropekv_status s = describe(c, v, &k->spec, &described_gen, &k->d, c->dump.on ? &k->spec_text : NULL, &k->spec_len);
    if (s == ROPEKV_OK && described_gen != gen) { /* other threads' lookups read it under mu */
        pthread_mutex_lock(&c->mu);
        k->generation = ~0u;
        pthread_mutex_unlock(&c->mu);
    }
    k->d.spec = &k->spec;
    if (s == ROPEKV_OK) {
        rk_desc_views(&k->d, c->pdl, &k->views);
        k->n_tensors = rk_tensors(&k->d, k->tensors, RK_TENSORS_MAX);
    }
    void *fn = NULL;
    if (s == ROPEKV_OK) s = build(c, k, 0, &fn);

    pthread_mutex_lock(&c->mu);
    if (s == ROPEKV_OK) {
        k->fn[0] = fn;
        k->status = ROPEKV_OK;
        k->refs = 1;
        c->refs++;
        k->state = 1;
        *out = k;
    } else {
        /* Waiters see this failure; later calls try again. */
        k->status = s;
        k->error = strdup(c->error);
        k->state = 2;
        k->generation = ~0u; /* never matches a lookup again */
    }
    pthread_cond_broadcast(&c->built);
    pthread_mutex_unlock(&c->mu);
    return s;
}

void ropekv_kernel_release(ropekv_kernel *k) {
    if (!k) return;
    ropekv_ctx *c = k->ctx;
    pthread_mutex_lock(&c->mu);
    const int held = k->refs > 0;
    if (held) k->refs--; /* modules stay loaded in the context's cache until the context is freed */
    pthread_mutex_unlock(&c->mu);
    if (held) ctx_unref(c);
}

const char *ropekv_kernel_name(const ropekv_kernel *k) { return k ? k->d.name : ""; }

ropekv_status ropekv_kernel_info(const ropekv_kernel *k, ropekv_kernel_params *out) {
    if (!k || !out) return ROPEKV_ERR_NULL;
    const rk_desc *d = &k->d;
    const int fp8 = d->record || d->kv != ROPEKV_KV_BF16, q8 = d->q_dtype != ROPEKV_Q_BF16;
    *out = (ropekv_kernel_params){
        .name = d->name,
        .key = d->key,
        .spec = d->spec->name,
        .target = d->arch->name,
        .kv_lora_rank = d->L,
        .rope_dim = d->R,
        .kv = d->kv,
        .q = d->q,
        .positions = d->pos,
        .slots = d->slot,
        .rope = rk_rope_name(d->rope),
        .cos_sin = rk_cos_sin_name(d->cos_sin),
        .fp8_format = fp8 ? rk_fp8_name(d->fp8) : "",
        .fp8_scale = rk_scale_name(d->kv8_scale),
        .fp8_saturate = d->kv8_sat,
        .fp8_rope_bf16_round = d->kv8_rope_bf16,
        .fp8_matches = d->record                     ? d->rec.matches
                       : d->kv == ROPEKV_KV_FP8_TILE ? d->spec->tile.matches
                       : fp8                         ? d->spec->fp8.matches
                                                     : "",
        .q_dtype = d->q_dtype,
        .q_fp8_format = q8 ? rk_fp8_name(d->fp8) : "",
        .q_fp8_scale = rk_scale_name(d->q8_scale),
        .q_fp8_saturate = d->q8_sat,
        .q_fp8_rope_bf16_round = d->q8_rope_bf16,
        .q_fp8_matches = q8 ? d->spec->q_fp8.matches : "",
        .layout = d->layout,
        .negative_slot = rk_neg_name(d->neg),
        .sanitize = d->sanitize,
        .block = d->arch->block,
        .pdl = d->arch->pdl && k->ctx->pdl,
        .op = d->op,
        .read_negative_slot = d->op == ROPEKV_OP_READ ? rk_enum_name(&rk_read_neg_enum, d->read_neg) : "",
        .fp8_tile = d->tile,
        .fp8_tile_scale = d->tile ? rk_enum_name(&rk_tile_scale_enum, d->tile_scale) : "",
        .fp8_tile_scales_at = d->scales_at,
        .fp8_tile_rope_at = d->rope_at,
        .row_bytes = d->row_bytes,
        .norm = d->norm,
        .norm_weight = d->norm == ROPEKV_NORM_NONE ? "" : rk_enum_name(&rk_norm_weight_enum, d->norm_weight),
        .norm_eps = d->norm_eps,
        .norm_rounding = d->norm == ROPEKV_NORM_NONE ? "" : rk_enum_name(&rk_norm_round_enum, d->norm_round),
        .norm_matches = d->norm == ROPEKV_NORM_NONE ? "" : d->spec->norm.matches,
        .wide_block = d->arch->wide_block,
        .wide_from = d->arch->wide_from,
    };
    return ROPEKV_OK;
}

int ropekv_kernel_param_count(const ropekv_kernel *k) { return k ? k->views.n : 0; }

ropekv_status ropekv_kernel_param(const ropekv_kernel *k, int i, const char **name, const char **value,
                                  ropekv_param_kind *kind) {
    if (!k) return ROPEKV_ERR_NULL;
    if (i < 0 || i >= k->views.n) return ROPEKV_ERR_ARG;
    const rk_view *v = &k->views.v[i];
    if (name) *name = v->name;
    if (value) *value = v->value;
    if (kind) *kind = v->kind;
    return ROPEKV_OK;
}

ropekv_status ropekv_kernel_param_find(const ropekv_kernel *k, const char *name, const char **value,
                                       ropekv_param_kind *kind) {
    if (!k || !name) return ROPEKV_ERR_NULL;
    for (int i = 0; i < k->views.n; i++)
        if (strcmp(k->views.v[i].name, name) == 0) return ropekv_kernel_param(k, i, NULL, value, kind);
    return ROPEKV_ERR_ARG;
}

int ropekv_kernel_tensor_count(const ropekv_kernel *k) { return k ? k->n_tensors : 0; }

/* A row of a tensor table as the caller's ropekv_tensor_info (its size field says how much of it to fill): sizes from
 * d, or -1 without one (a family's row). */
static ropekv_status tensor_info(const rk_tensor *t, const rk_desc *d, ropekv_tensor_info *out) {
    size_t size;
    memcpy(&size, out, sizeof size);
    if (size == 0) size = sizeof *out;
    if (size < sizeof size || size > SIZE_MAX_) return ROPEKV_ERR_VERSION;
    ropekv_tensor_info v = {
        .size = size < sizeof v ? size : sizeof v,
        .name = t->name,
        .access = t->access,
        .need = t->need,
        .dtype = rk_dtype_name(t->dtype),
        .elem_bytes = t->elem,
        .rank = t->rank,
        .align = t->align,
        .stride_multiple = t->unit,
        .when = t->when,
    };
    for (int j = 0; j < t->rank && j < ROPEKV_TENSOR_RANK_MAX; j++) {
        v.dims[j] = rk_sym_name(t->dim[j]);
        v.sizes[j] = d ? rk_sym_size(d, t->dim[j]) : -1;
        v.strides[j] = j + 1 < t->rank ? t->stride[j] : NULL;
    }
    memcpy(out, &v, size < sizeof v ? size : sizeof v);
    if (size > sizeof v) memset((char *)out + sizeof v, 0, size - sizeof v);
    return ROPEKV_OK;
}

ropekv_status ropekv_kernel_tensor(const ropekv_kernel *k, int i, ropekv_tensor_info *out) {
    if (!k || !out) return ROPEKV_ERR_NULL;
    if (i < 0 || i >= k->n_tensors) return ROPEKV_ERR_ARG;
    return tensor_info(&k->tensors[i], &k->d, out);
}

/* The families' tables (rk_family_tensors), made once: the write op's q forms, then the read op. */
enum { FAMILIES = 5, FAMILY_MAX = 24 };
static struct {
    int n;
    rk_tensor t[FAMILY_MAX];
} families[FAMILIES];
static pthread_once_t families_once = PTHREAD_ONCE_INIT;

static void families_make(void) {
    for (int f = 0; f < FAMILIES; f++) {
        const ropekv_op op = f < 4 ? ROPEKV_OP_WRITE : ROPEKV_OP_READ;
        const int n = rk_family_tensors(op, f < 4 ? (ropekv_q_form)f : ROPEKV_Q_NONE, families[f].t, FAMILY_MAX);
        families[f].n = n < FAMILY_MAX ? n : FAMILY_MAX;
    }
}

/* The family of (op, q), or -1 for values outside the enums. */
static int family_of(ropekv_op op, ropekv_q_form q) {
    if (op == ROPEKV_OP_READ) return 4;
    if (op != ROPEKV_OP_WRITE || (unsigned)q > (unsigned)ROPEKV_Q_NONE) return -1;
    return (int)q;
}

int ropekv_family_tensor_count(ropekv_op op, ropekv_q_form q) {
    const int f = family_of(op, q);
    if (f < 0) return 0;
    pthread_once(&families_once, families_make);
    return families[f].n;
}

ropekv_status ropekv_family_tensor(ropekv_op op, ropekv_q_form q, int i, ropekv_tensor_info *out) {
    if (!out) return ROPEKV_ERR_NULL;
    const int f = family_of(op, q);
    if (f < 0) return ROPEKV_ERR_ARG;
    pthread_once(&families_once, families_make);
    if (i < 0 || i >= families[f].n) return ROPEKV_ERR_ARG;
    return tensor_info(&families[f].t[i], NULL, out);
}

ropekv_status ropekv_kernel_tensor_find(const ropekv_kernel *k, const char *name, ropekv_tensor_info *out) {
    if (!k || !name || !out) return ROPEKV_ERR_NULL;
    for (int i = 0; i < k->n_tensors; i++)
        if (strcmp(k->tensors[i].name, name) == 0) return ropekv_kernel_tensor(k, i, out);
    return ROPEKV_ERR_ARG;
}

/* The 64-bit entry, built by ropekv_kernel_prepare or the first launch that needs it (2^31 or more
 * elements in reach); threads
 * that need it meanwhile wait. A failed build is reported to the launch and tried again by the next. */
static ropekv_status wide_entry(ropekv_kernel *k, void **fn) {
    ropekv_ctx *c = k->ctx;
    pthread_mutex_lock(&c->mu);
    while (k->wide_building) pthread_cond_wait(&c->built, &c->mu);
    if ((*fn = k->fn[1]) != NULL) {
        pthread_mutex_unlock(&c->mu);
        return ROPEKV_OK;
    }
    k->wide_building = 1;
    pthread_mutex_unlock(&c->mu);
    ropekv_status s = build(c, k, 1, fn);
    pthread_mutex_lock(&c->mu);
    if (s == ROPEKV_OK) __atomic_store_n(&k->fn[1], *fn, __ATOMIC_RELEASE);
    k->wide_building = 0;
    pthread_cond_broadcast(&c->built);
    pthread_mutex_unlock(&c->mu);
    return s;
}

ropekv_status ropekv_kernel_prepare(ropekv_kernel *k, unsigned entries) {
    if (!k) return ROPEKV_ERR_NULL;
    if (entries & ~(unsigned)(ROPEKV_ENTRY_32 | ROPEKV_ENTRY_64))
        return fail(k->ctx, ROPEKV_ERR_ARG,
                    "kernel_prepare: entries 0x%x has bits other than ROPEKV_ENTRY_32 | ROPEKV_ENTRY_64", entries);
    void *fn; /* the 32-bit entry is built by ropekv_kernel_get */
    return entries & ROPEKV_ENTRY_64 ? wide_entry(k, &fn) : ROPEKV_OK;
}

/* ---- dumps (runtime/dump.h) ----------------------------------------------------------------------------------- */
typedef struct dump_read_ctx {
    ropekv_ctx *c;
    void *stream;
} dump_read_ctx;

static int dump_read(void *ctx, void *dst, const void *src, size_t n, char *why, size_t cap) {
    dump_read_ctx *r = ctx;
    rk_buf log = {0};
    const int rc = r->c->dev.ops->read ? r->c->dev.ops->read(&r->c->dev, dst, src, n, r->stream, &log)
                                       : ROPEKV_ERR_BACKEND;
    if (rc != ROPEKV_OK)
        snprintf(why, cap, "reading %zu bytes of device memory: %s", n, log.p ? log.p : "the backend cannot");
    rk_buf_free(&log);
    return rc == ROPEKV_OK ? 0 : -1;
}

/* Writes a dump of the launch of k with a when the context's policy chooses it: pl the checked launch (its tensors
 * are read back, in stream order, before the kernel runs), or NULL when the argument check failed with s and msg.
 * Never changes the launch: a dump that cannot be written is a warning. */
static void dump_launch(ropekv_kernel *k, const ropekv_args *a, const rk_plan *pl, void *stream, ropekv_status s,
                        const char *msg) {
    ropekv_ctx *c = k->ctx;
    const int failed = s != ROPEKV_OK;
    const uint64_t n = __atomic_add_fetch(failed ? &k->refused : &k->launches, 1, __ATOMIC_RELAXED);
    const rk_dump_reason reason = rk_dump_chosen(&c->dump.policy, n, failed);
    if (reason == RK_DUMP_NOT) return;
    char file[sizeof k->d.spec->name + 8];
    snprintf(file, sizeof file, "%s.lua", k->d.spec->name);
    size_t len = k->spec_len;
    const char *text = k->spec_text ? k->spec_text : rk_embedded(file, &len);
    dump_read_ctx rd = {c, stream};
    const rk_dump_launch l = {.d = &k->d,
                              .v = &k->v,
                              .spec_text = text ? text : "",
                              .spec_len = text ? len : 0,
                              .backend = c->dev.ops->name,
                              .device_target = c->dev.target,
                              .a = a,
                              .pl = pl,
                              .status = s,
                              .message = msg,
                              .launch = n,
                              .reason = reason,
                              .read = dump_read,
                              .read_ctx = &rd};
    char path[4608], why[1024];
    if (rk_dump_write(&c->dump, &l, path, sizeof path, why, sizeof why) != 0)
        fprintf(stderr, "ropekv: warning: launch %llu of %s not dumped: %s\n", (unsigned long long)n, k->d.key, why);
    else
        logf_(c, "dumped launch %llu of %s (%s) to %s", (unsigned long long)n, k->d.key, rk_dump_reason_name(reason),
              path);
}

ropekv_status ropekv_launch(ropekv_kernel *k, const ropekv_args *a, void *stream) {
    if (!k) return ROPEKV_ERR_NULL;
    ropekv_ctx *c = k->ctx;
    rk_plan pl;
    rk_err err = {0};
    ropekv_args buf;
    ropekv_status s = args_in(c, &a, &buf);
    if (s != ROPEKV_OK) return s;
    s = rk_args_check(&k->d, a, &pl, &err);
    const int checked = s == ROPEKV_OK; /* the scales' check reads memory the plan holds */
    if (s == ROPEKV_OK && pl.total > 0 && k->d.arch->vendor == RK_VENDOR_HOST) s = rk_args_scales_check(&k->d, a, &err);
    if (s != ROPEKV_OK) {
        if (c->dump.on && !c->compile_only && a) dump_launch(k, a, checked ? &pl : NULL, stream, s, err.msg);
        return fail(c, s, "%s", err.msg);
    }
    if (pl.total == 0) return ROPEKV_OK;
    if (c->compile_only)
        return fail(c, ROPEKV_ERR_BACKEND, "%s: a compile-only context builds and caches kernels, never launches them",
                    k->d.key);
    if (c->dump.on) dump_launch(k, a, &pl, stream, ROPEKV_OK, "");
    void *fn = __atomic_load_n(&k->fn[pl.wide || c->force_i64], __ATOMIC_ACQUIRE);
    if (!fn && (s = wide_entry(k, &fn)) != ROPEKV_OK) return s;
    const int pdl = k->d.arch->pdl && c->pdl;
    pl.args.prefetch = pdl && c->pdl_prefetch;
    rk_buf log = {0};
    int rc = c->dev.ops->launch(&c->dev, fn, &pl.args, pl.blocks, pl.block, pdl, stream, &log);
    if (rc != ROPEKV_OK) s = fail(c, ROPEKV_ERR_LAUNCH, "launching %s: %s", k->d.name, log.p ? log.p : "");
    rk_buf_free(&log);
    return s;
}

ropekv_status ropekv_query(ropekv_ctx *c, const ropekv_variant *v, const ropekv_args *a, char *why, size_t cap) {
    if (!c) return ROPEKV_ERR_NULL;
    struct {
        rk_spec spec;
        rk_desc d;
        rk_plan pl;
        ropekv_variant v;
        ropekv_args a;
    } *q = malloc(sizeof *q);
    if (!q) return fail(c, ROPEKV_ERR_NOMEM, "query: out of memory");
    unsigned gen;
    ropekv_status s = v ? variant_in(c, v, &q->v) : ROPEKV_OK;
    if (s == ROPEKV_OK) s = args_in(c, &a, &q->a);
    if (s == ROPEKV_OK) s = describe(c, v ? &q->v : NULL, &q->spec, &gen, &q->d, NULL, NULL);
    q->d.spec = &q->spec;
    if (s == ROPEKV_OK && a) {
        rk_err err = {0};
        s = rk_args_check(&q->d, a, &q->pl, &err);
        if (s != ROPEKV_OK) fail(c, s, "%s", err.msg);
    }
    free(q);
    if (why && cap) snprintf(why, cap, "%s", s == ROPEKV_OK ? "supported" : c->error);
    return s;
}

/* ---- cache records: the public view of an rk_record (ropekv_record is an rk_record) ------------------------- */

const ropekv_record *ropekv_kernel_record(const ropekv_kernel *k) {
    return k ? (const ropekv_record *)&k->d.rec : NULL;
}

/* The built-in records library (specs/records.lua), read once. */
static rk_record_lib builtin_records;
static pthread_once_t builtin_records_once = PTHREAD_ONCE_INIT;

static void builtin_records_load(void) {
    rk_err err = {0};
    if (rk_records_builtin(&builtin_records, &err) != ROPEKV_OK) builtin_records.n = 0;
}

int ropekv_record_count(void) {
    pthread_once(&builtin_records_once, builtin_records_load);
    return builtin_records.n;
}

const ropekv_record *ropekv_record_at(int i) {
    pthread_once(&builtin_records_once, builtin_records_load);
    if (i < 0 || i >= builtin_records.n) return NULL;
    return (const ropekv_record *)&builtin_records.r[i];
}

/* The caller's size field of a view struct: how much of v (n bytes) to copy out, or 0 for ROPEKV_ERR_VERSION. */
static size_t view_size(const void *out, size_t n) {
    size_t size;
    memcpy(&size, out, sizeof size);
    if (size == 0) size = n;
    if (size < sizeof size || size > SIZE_MAX_) return 0;
    return size;
}

static void view_copy(void *out, size_t size, void *v, size_t n) {
    const size_t m = size < n ? size : n;
    memcpy(v, &m, sizeof m); /* the size field says how much was filled */
    memcpy(out, v, m);
    if (size > n) memset((char *)out + n, 0, size - n);
}

ropekv_status ropekv_record_describe(const ropekv_record *rec, ropekv_record_info *out) {
    if (!rec || !out) return ROPEKV_ERR_NULL;
    const rk_record *r = (const rk_record *)rec;
    const size_t size = view_size(out, sizeof *out);
    if (!size) return ROPEKV_ERR_VERSION;
    ropekv_record_info v = {
        .name = r->name,
        .L = r->L,
        .R = r->R,
        .row_bytes = r->row_bytes,
        .split_at = r->split_at,
        .tail_bytes = r->tail_bytes,
        .conv = rk_scale_name((rk_scale)r->conv),
        .segments = r->n_seg,
        .readers = r->n_readers,
        .matches = r->matches,
    };
    view_copy(out, size, &v, sizeof v);
    return ROPEKV_OK;
}

ropekv_status ropekv_record_segment_at(const ropekv_record *rec, int i, ropekv_record_segment *out) {
    if (!rec || !out) return ROPEKV_ERR_NULL;
    const rk_record *r = (const rk_record *)rec;
    if (i < 0 || i >= r->n_seg) return ROPEKV_ERR_ARG;
    const size_t size = view_size(out, sizeof *out);
    if (!size) return ROPEKV_ERR_VERSION;
    const rk_segment *g = &r->seg[i];
    ropekv_record_segment v = {
        .from = g->from,
        .n = g->n,
        .elem = rk_enum_name(&rk_elem_enum, g->elem),
        .at = g->at,
        .block = g->block,
        .scale = rk_enum_name(&rk_scale_type_enum, g->scale),
        .rule = rk_enum_name(&rk_scale_rule_enum, g->rule),
        .scale_at = rk_enum_name(&rk_scale_at_enum, g->scale_at),
        .scales_at = g->scales_at,
        .saturate_ocp = g->sat_ocp,
        .saturate_fnuz = g->sat_fnuz,
        .outer = rk_enum_name(&rk_outer_enum, g->outer),
        .outer_at = g->outer_at,
        .rope_bf16 = g->rope_bf16,
        .floor = g->block ? rk_seg_floor(g) : 0.0f,
        .block_conv = g->block ? rk_enum_name(&rk_block_conv_enum, g->block_conv) : "none",
        .scales_interleave = g->interleave,
    };
    view_copy(out, size, &v, sizeof v);
    return ROPEKV_OK;
}

ropekv_status ropekv_record_reader_at(const ropekv_record *rec, int i, ropekv_record_reader *out) {
    if (!rec || !out) return ROPEKV_ERR_NULL;
    const rk_record *r = (const rk_record *)rec;
    if (i < 0 || i >= r->n_readers) return ROPEKV_ERR_ARG;
    const size_t size = view_size(out, sizeof *out);
    if (!size) return ROPEKV_ERR_VERSION;
    ropekv_record_reader v = {
        .name = r->readers[i].name,
        .scale = rk_enum_name(&rk_read_scale_enum, r->readers[i].scale),
    };
    view_copy(out, size, &v, sizeof v);
    return ROPEKV_OK;
}
