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
#include "builtin.h"
#include "cache.h"
#include "rk.h"
#include "ropekv.h"

/* ---- status names --------------------------------------------------------------------------- */
int ropekv_version_number(void) { return ROPEKV_VERSION_NUMBER; }
const char *ropekv_version_string(void) { return ROPEKV_VERSION_STRING; }

const char *ropekv_status_name(ropekv_status s) {
    switch (s) {
#define NAME_(name, value, msg) case name: return #name;
        ROPEKV_STATUS_LIST(NAME_)
#undef NAME_
    }
    return "ROPEKV_UNKNOWN";
}

const char *ropekv_status_message(ropekv_status s) {
    switch (s) {
#define MSG_(name, value, msg) case name: return msg;
        ROPEKV_STATUS_LIST(MSG_)
#undef MSG_
    }
    return "unknown status";
}

/* gen's codes share the public values (see gen/rk.h); anything else is I/O. */
static ropekv_status from_rk(int rc) {
    switch (rc) {
    case ROPEKV_OK: return ROPEKV_OK;
    case ROPEKV_ERR_SPEC_SYNTAX: return ROPEKV_ERR_SPEC_SYNTAX;
    case ROPEKV_ERR_SPEC_RUNTIME: return ROPEKV_ERR_SPEC_RUNTIME;
    case ROPEKV_ERR_SPEC_LIMIT: return ROPEKV_ERR_SPEC_LIMIT;
    case ROPEKV_ERR_SPEC_INVALID: return ROPEKV_ERR_SPEC_INVALID;
    case ROPEKV_ERR_SPEC_TARGET: return ROPEKV_ERR_SPEC_TARGET;
    case ROPEKV_ERR_RENDER: return ROPEKV_ERR_RENDER;
    case ROPEKV_ERR_COMPILE: return ROPEKV_ERR_COMPILE;
    case ROPEKV_ERR_TARGET: return ROPEKV_ERR_TARGET;
    case ROPEKV_ERR_CACHE: return ROPEKV_ERR_CACHE;
    case ROPEKV_ERR_BACKEND: return ROPEKV_ERR_BACKEND;
    case ROPEKV_ERR_DEVICE: return ROPEKV_ERR_DEVICE;
    case ROPEKV_ERR_LAUNCH: return ROPEKV_ERR_LAUNCH;
    case ROPEKV_ERR_NOMEM: return ROPEKV_ERR_NOMEM;
    default: return ROPEKV_ERR_IO;
    }
}

/* ---- context ---------------------------------------------------------------------------------- */
/* What a kernel's code is: the parameters its name encodes, plus the launch block size. */
typedef struct kdesc {
    rk_name_parts p;
    int block;
    int chunks;
    int64_t chunks_from;
    int pdl;           /* the code waits for the previous grid (arch row `pdl`) */
} kdesc;

struct ropekv_kernel {
    ropekv_ctx *ctx;
    /* lookup key */
    char spec[64];
    unsigned generation;
    ropekv_kv_dtype kv;
    ropekv_q_form q;
    ropekv_index pos, slot;
    /* state: 0 building, 1 ready, 2 failed (waiters copy status and message) */
    int state;
    int refs;
    ropekv_status status;
    char *error;
    kdesc d;
    char name[192];
    struct resolved *src;   /* what it was built from: the 64-bit entry is built on first need */
    void *module[2];        /* [0] the 32-bit entry's build, [1] the 64-bit entry's */
    void *fn[2];            /* fn[1] is set (atomically) once built */
    int wide_building;      /* under ctx->mu */
    struct ropekv_kernel *next;
};

typedef struct runtime_spec {   /* a spec loaded at run time */
    rk_spec spec;
    unsigned generation;
} runtime_spec;

struct ropekv_ctx {
    pthread_mutex_t mu;
    pthread_cond_t built;
    rk_device dev;
    rk_arch_table archs;
    const rk_arch *arch;        /* the arch row the device maps to */
    rk_cache cache;
    int log;
    int pdl;                    /* launch kernels whose row has `pdl` with programmatic serialization */
    int pdl_prefetch;           /* ... reading the static inputs before the wait */
    unsigned char template_hash[32];
    runtime_spec *specs;        /* loaded at run time */
    int n_specs;
    unsigned generation;
    ropekv_kernel *kernels;
    ropekv_stats stats;         /* under mu */
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

static const char *env(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

static int env_flag(const char *name) {
    const char *v = env(name);
    return v && strcmp(v, "0") != 0;
}

/* Default cache directory: $ROPEKV_CACHE_DIR, $XDG_CACHE_HOME/ropekv, ~/.cache/ropekv. */
static void cache_dir(const ropekv_options *o, char *out, size_t cap) {
    const char *d = o && o->cache_dir ? o->cache_dir : env("ROPEKV_CACHE_DIR");
    if (d) snprintf(out, cap, "%s", d);
    else if (env("XDG_CACHE_HOME")) snprintf(out, cap, "%s/ropekv", env("XDG_CACHE_HOME"));
    else if (env("HOME")) snprintf(out, cap, "%s/.cache/ropekv", env("HOME"));
    else out[0] = '\0';
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

ropekv_status ropekv_create(ropekv_ctx **out, const ropekv_options *o) {
    if (!out) return ROPEKV_ERR_NULL;
    *out = NULL;
    ropekv_ctx *c = calloc(1, sizeof *c);
    if (!c) return ROPEKV_ERR_NOMEM;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->built, NULL);
    c->log = o && o->log ? o->log > 0 : env_flag("ROPEKV_LOG");
    c->pdl = o && o->pdl ? o->pdl > 0 : !env("ROPEKV_PDL") || env_flag("ROPEKV_PDL");
    c->pdl_prefetch = o && o->pdl_prefetch ? o->pdl_prefetch > 0 : env_flag("ROPEKV_PDL_PREFETCH");

    rk_err err = {0};
    size_t len;
    const char *archs = rk_embedded("archs.lua", &len);
    int rc = archs ? rk_archs_load("specs/archs.lua", archs, len, &c->archs, &err)
                   : rk_fail(&err, ROPEKV_ERR_IO, "specs/archs.lua is not built in");
    if (rc != ROPEKV_OK) {
        logf_(c, "%s", err.msg);
        ropekv_destroy(c);
        return from_rk(rc);
    }

    /* Backend: forced by option or $ROPEKV_BACKEND, else the first one with a device. */
    ropekv_backend want = o ? o->backend : ROPEKV_BACKEND_AUTO;
    const char *eb = env("ROPEKV_BACKEND");
    if (want == ROPEKV_BACKEND_AUTO && eb) {
        want = !strcmp(eb, "hip") ? ROPEKV_BACKEND_HIP : !strcmp(eb, "cuda") ? ROPEKV_BACKEND_CUDA
             : !strcmp(eb, "host") ? ROPEKV_BACKEND_HOST : (ropekv_backend)-1;
        if (want == (ropekv_backend)-1) {
            logf_(c, "ROPEKV_BACKEND=%s: expected hip, cuda or host", eb);
            ropekv_destroy(c);
            return ROPEKV_ERR_ARG;
        }
    }
    const char *target = o && o->target ? o->target : env("ROPEKV_TARGET");
    int ordinal = o ? o->device : 0;
    rk_buf log = {0};
    const rk_backend_ops *order[3] = {&rk_backend_hip, &rk_backend_cuda, &rk_backend_host};
    rc = ROPEKV_ERR_BACKEND;
    for (int i = 0; i < 3 && rc != ROPEKV_OK; i++) {
        if (want != ROPEKV_BACKEND_AUTO && want != (ropekv_backend)(i + 1)) continue;
        if (log.len) rk_buf_put(&log, "; ", 2);
        rc = open_backend(c, order[i], ordinal, target, &log);
    }
    if (rc == ROPEKV_OK && !(c->arch = arch_for_target(&c->archs, c->dev.target))) {
        rk_buf_printf(&log, "target %s has no row in specs/archs.lua", c->dev.target);
        c->dev.ops->close(&c->dev);
        rc = ROPEKV_ERR_TARGET;
    }
    if (rc != ROPEKV_OK) {
        logf_(c, "no backend: %s", log.p ? log.p : "");
        rk_buf_free(&log);
        c->dev.ops = NULL;
        ropekv_destroy(c);
        return from_rk(rc);
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
        return from_rk(rc);
    }
    rk_sha256_update(&h, tpl.p, tpl.len);
    rk_sha256_final(&h, c->template_hash);
    rk_buf_free(&tpl);

    char dir[4096];
    cache_dir(o, dir, sizeof dir);
    int disk = o && o->disk_cache ? o->disk_cache > 0 : !env_flag("ROPEKV_DISABLE_CACHE");
    if (disk && dir[0]) {
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

void ropekv_destroy(ropekv_ctx *c) {
    if (!c) return;
    ropekv_kernel *k = c->kernels;
    while (k) {
        ropekv_kernel *n = k->next;
        for (int w = 0; w < 2; w++)
            if (k->module[w] && c->dev.ops) c->dev.ops->unload(&c->dev, k->module[w]);
        free(k->src);
        free(k->error);
        free(k);
        k = n;
    }
    if (c->dev.ops) c->dev.ops->close(&c->dev);
    free(c->specs);
    pthread_cond_destroy(&c->built);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* ---- specs loaded at run time ------------------------------------------------------------------ */
ropekv_status ropekv_load_spec_text(ropekv_ctx *c, const char *file, const char *text, size_t len) {
    if (!c || !file || !text) return c ? fail(c, ROPEKV_ERR_NULL, "load_spec_text: NULL file or text") : ROPEKV_ERR_NULL;
    rk_spec s;
    rk_err err = {0};
    int rc = rk_spec_load(file, text, len, &c->archs, &s, &err);
    if (rc != ROPEKV_OK) return fail(c, from_rk(rc), "%s", err.msg);
    pthread_mutex_lock(&c->mu);
    int i = 0;
    while (i < c->n_specs && strcmp(c->specs[i].spec.name, s.name) != 0) i++;
    if (i == c->n_specs) {
        runtime_spec *grown = realloc(c->specs, sizeof *grown * (size_t)(c->n_specs + 1));
        if (!grown) {
            pthread_mutex_unlock(&c->mu);
            return fail(c, ROPEKV_ERR_NOMEM, "load_spec: out of memory");
        }
        c->specs = grown;
        c->n_specs++;
    }
    c->specs[i].spec = s;
    c->specs[i].generation = ++c->generation; /* kernels of the old content are never found again */
    pthread_mutex_unlock(&c->mu);
    logf_(c, "loaded spec %s from %s", s.name, file);
    return ROPEKV_OK;
}

ropekv_status ropekv_load_spec(ropekv_ctx *c, const char *path) {
    if (!c || !path) return c ? fail(c, ROPEKV_ERR_NULL, "load_spec: NULL path") : ROPEKV_ERR_NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return fail(c, ROPEKV_ERR_IO, "cannot open spec %s: %s", path, strerror(errno));
    rk_buf b = {0};
    char chunk[4096];
    size_t n;
    int rc = ROPEKV_OK;
    while (rc == ROPEKV_OK && (n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        rc = rk_buf_put(&b, chunk, n);
        if (b.len > (1u << 20)) rc = ROPEKV_ERR_SPEC_LIMIT;
    }
    int bad = ferror(f);
    fclose(f);
    ropekv_status s = rc == ROPEKV_ERR_SPEC_LIMIT ? fail(c, ROPEKV_ERR_SPEC_LIMIT, "%s: larger than 1 MiB", path)
                    : rc != ROPEKV_OK ? fail(c, ROPEKV_ERR_NOMEM, "%s: out of memory", path)
                    : bad ? fail(c, ROPEKV_ERR_IO, "cannot read spec %s", path)
                    : ropekv_load_spec_text(c, path, b.p ? b.p : "", b.len);
    rk_buf_free(&b);
    return s;
}

ropekv_status ropekv_cache_clear(ropekv_ctx *c) {
    if (!c) return ROPEKV_ERR_NULL;
    if (!c->cache.usable) return ROPEKV_OK;
    return rk_cache_clear(&c->cache) < 0 ? fail(c, ROPEKV_ERR_CACHE, "cannot clear %s", c->cache.dir) : ROPEKV_OK;
}

/* ---- resolving a variant to its source ---------------------------------------------------------- */
static const ropekv_kv_dtype KV[] = {ROPEKV_KV_BF16, ROPEKV_KV_FP8_E4M3};
static const ropekv_q_form QF[] = {ROPEKV_Q_ABSORBED, ROPEKV_Q_ZERO_COPY, ROPEKV_Q_INPLACE, ROPEKV_Q_NONE};
static const ropekv_index IDX[] = {ROPEKV_INDEX_INT64, ROPEKV_INDEX_INT32};

/* A resolved variant: its code description and where its source comes from. */
typedef struct resolved {
    kdesc d;
    char key[192];
    char name[192];
    unsigned generation;
    const rk_builtin *builtin;     /* source emitted at build time, or */
    rk_desc variant;            /* a run-time spec's variant, rendered on a miss */
    rk_spec spec;                  /* (copy: the variant points here) */
} resolved;

static int valid_variant(const ropekv_variant *v) {
    return (unsigned)v->kv <= ROPEKV_KV_FP8_E4M3 && (unsigned)v->q <= ROPEKV_Q_NONE &&
           (unsigned)v->positions <= ROPEKV_INDEX_INT32 && (unsigned)v->slots <= ROPEKV_INDEX_INT32;
}

static ropekv_status resolve(ropekv_ctx *c, const ropekv_variant *v, resolved *r) {
    memset(r, 0, sizeof *r);
    if (c->dev.refused[0]) return fail(c, ROPEKV_ERR_TARGET, "%s", c->dev.refused);
    if (!v || !v->spec) return fail(c, ROPEKV_ERR_NULL, "variant or variant.spec is NULL");
    if (!valid_variant(v)) return fail(c, ROPEKV_ERR_ARG, "variant has an out-of-range enum value");
    snprintf(r->key, sizeof r->key, "%s/%s/%s/%s/pos=%s/slot=%s", v->spec, c->arch->name, rk_kv_name(KV[v->kv]),
             rk_qform_name(QF[v->q]), rk_idx_name(IDX[v->positions]), rk_idx_name(IDX[v->slots]));
    int have_spec = 0;
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < c->n_specs; i++)
        if (!strcmp(c->specs[i].spec.name, v->spec)) {
            r->spec = c->specs[i].spec;
            r->generation = c->specs[i].generation;
            have_spec = 1;
        }
    pthread_mutex_unlock(&c->mu);
    if (have_spec) {
        rk_desc all[RK_MAX_VARIANTS_PER_SPEC];
        rk_err err = {0};
        int n = rk_variants(&r->spec, &c->archs, all, RK_MAX_VARIANTS_PER_SPEC, &err);
        for (int i = 0; i < n; i++)
            if (!strcmp(all[i].key, r->key)) {
                r->variant = all[i];
                r->variant.spec = &r->spec;
                rk_variant_parts(&r->variant, &r->d.p);
                r->d.block = r->variant.arch->block;
                r->d.chunks = r->variant.arch->chunks;
                r->d.chunks_from = r->variant.arch->chunks_from;
                r->d.pdl = r->variant.arch->pdl;
                snprintf(r->name, sizeof r->name, "%s", r->variant.name);
                return ROPEKV_OK;
            }
        return fail(c, ROPEKV_ERR_UNSUPPORTED, "spec %s (loaded at run time) has no variant %s", v->spec, r->key);
    }
    for (size_t i = 0; i < rk_builtin_count; i++) {
        const rk_builtin *b = &rk_builtins[i];
        if (strcmp(b->key, r->key) != 0) continue;
        rk_err err = {0};
        if (rk_name_parse(b->kernel, &r->d.p, &err) != ROPEKV_OK) return fail(c, ROPEKV_ERR_RENDER, "%s", err.msg);
        r->d.block = b->block;
        r->d.chunks = b->chunks;
        r->d.chunks_from = b->chunks_from;
        r->d.pdl = b->pdl;
        r->builtin = b;
        snprintf(r->name, sizeof r->name, "%s", b->kernel);
        return ROPEKV_OK;
    }
    for (size_t i = 0; i < rk_builtin_count; i++)
        if (!strcmp(rk_builtins[i].spec, v->spec))
            return fail(c, ROPEKV_ERR_UNSUPPORTED, "spec %s does not list %s (target %s)", v->spec, r->key,
                        c->dev.target);
    return fail(c, ROPEKV_ERR_NO_SPEC, "no spec named '%s' is built in or loaded", v->spec);
}

/* ---- the cache key ------------------------------------------------------------------------------------ */
static void key_digest(const ropekv_ctx *c, const resolved *r, const char *src, size_t len, unsigned char out[32]) {
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
    rk_sha256_field(&h, r->key, strlen(r->key));
    rk_sha256_field(&h, r->name, strlen(r->name));
    rk_sha256_field(&h, src_hash, 32);
    rk_sha256_field(&h, c->dev.ops->name, strlen(c->dev.ops->name));
    rk_sha256_field(&h, c->dev.compiler_id, strlen(c->dev.compiler_id));
    rk_sha256_field(&h, c->dev.target, strlen(c->dev.target));
    rk_sha256_field(&h, c->dev.options, strlen(c->dev.options));
    rk_sha256_field(&h, c->arch->options, strlen(c->arch->options));
    rk_sha256_final(&h, out);
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* Source -> digest -> disk cache or compiler -> loaded module holding one entry (templates/kernel.hip,
 * RK_ENTRIES): the 32-bit one (wide = 0) or the 64-bit one (wide = 1), stored in k->module[wide] and
 * *fn. Each is its own cache entry: the source differs by its first line. Runs without the context lock. */
static ropekv_status build(ropekv_ctx *c, const resolved *r, ropekv_kernel *k, int wide, void **fn) {
    rk_buf src = {0}, log = {0};
    rk_err err = {0};
    ropekv_status s = ROPEKV_OK;
    int rc = rk_buf_printf(&src, "#define RK_ENTRIES %d\n", wide ? 2 : 1);
    if (rc == ROPEKV_OK) rc = r->builtin ? rk_buf_put(&src, r->builtin->source, r->builtin->len)
                                     : rk_emit(&r->variant, &src, &err);
    if (rc != ROPEKV_OK) {
        rk_buf_free(&src);
        return err.msg[0] ? fail(c, from_rk(rc), "%s", err.msg) : fail(c, ROPEKV_ERR_NOMEM, "%s: out of memory", r->name);
    }
    const char *text = src.p;
    size_t len = src.len;
    unsigned char digest[32];
    char hex[65], why[1024] = "";
    key_digest(c, r, text, len, digest);
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
            double t0 = now_ms();
            count(c, &c->stats.compiles);
            rc = c->dev.ops->compile(&c->dev, text, len, r->name, c->arch, &co, &log);
            if (rc != ROPEKV_OK) {
                s = fail(c, from_rk(rc), "compiling %s (%s) for %s with %s:\n%s", r->key, r->name, c->dev.target,
                         c->dev.compiler_id, log.p ? log.p : "");
                break;
            }
            logf_(c, "compiled %s for %s in %.1f ms (%zu bytes)", r->name, c->dev.target, now_ms() - t0, co.len);
        } else {
            logf_(c, "disk cache hit %s (%s)", r->name, hex);
            count(c, &c->stats.disk_hits);
        }
        log.len = 0;
        void *fns[2] = {NULL, NULL};
        rc = c->dev.ops->load(&c->dev, &co, r->name, &k->module[wide], fns, &log);
        if (rc == ROPEKV_OK && !fns[wide]) {
            c->dev.ops->unload(&c->dev, k->module[wide]);
            k->module[wide] = NULL;
            rk_buf_printf(&log, "the code object lacks %s%s", r->name, wide ? "_i64" : "");
            rc = ROPEKV_ERR_COMPILE;
        }
        if (rc == ROPEKV_OK) {
            *fn = fns[wide];
            /* Only a code object that loads is worth keeping. */
            if (!from_disk && c->cache.usable &&
                rk_cache_put(&c->cache, digest, co.data, co.len, why, sizeof why) != RK_CACHE_OK)
                fprintf(stderr, "ropekv: warning: %s\n", why);
            break;
        }
        if (!from_disk) {
            s = fail(c, from_rk(rc), "loading %s: %s", r->name, log.p ? log.p : "");
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
static int same_lookup(const ropekv_kernel *k, const ropekv_variant *v, unsigned gen) {
    return k->kv == v->kv && k->q == v->q && k->pos == v->positions && k->slot == v->slots &&
           k->generation == gen && strcmp(k->spec, v->spec) == 0;
}

static unsigned spec_generation(const ropekv_ctx *c, const char *spec) {
    for (int i = 0; i < c->n_specs; i++)
        if (!strcmp(c->specs[i].spec.name, spec)) return c->specs[i].generation;
    return 0;
}

ropekv_status ropekv_kernel_get(ropekv_ctx *c, const ropekv_variant *v, ropekv_kernel **out) {
    if (!c || !out) return c ? fail(c, ROPEKV_ERR_NULL, "kernel_get: NULL out") : ROPEKV_ERR_NULL;
    *out = NULL;
    if (!v || !v->spec) return fail(c, ROPEKV_ERR_NULL, "variant or variant.spec is NULL");
    if (!valid_variant(v)) return fail(c, ROPEKV_ERR_ARG, "variant has an out-of-range enum value");
    if (strlen(v->spec) >= sizeof((ropekv_kernel *)0)->spec) return fail(c, ROPEKV_ERR_NO_SPEC, "spec name too long");

    pthread_mutex_lock(&c->mu);
    unsigned gen = spec_generation(c, v->spec);
    ropekv_kernel *k = c->kernels;
    while (k && !same_lookup(k, v, gen)) k = k->next;
    if (k) {
        while (k->state == 0) pthread_cond_wait(&c->built, &c->mu);
        ropekv_status s = k->status;
        if (s == ROPEKV_OK) {
            k->refs++;
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
    snprintf(k->spec, sizeof k->spec, "%s", v->spec);
    k->generation = gen;
    k->kv = v->kv;
    k->q = v->q;
    k->pos = v->positions;
    k->slot = v->slots;
    k->next = c->kernels;
    c->kernels = k;
    pthread_mutex_unlock(&c->mu);

    resolved *r = malloc(sizeof *r);
    ropekv_status s = r ? resolve(c, v, r) : fail(c, ROPEKV_ERR_NOMEM, "kernel_get: out of memory");
    void *fn = NULL;
    if (s == ROPEKV_OK) s = build(c, r, k, 0, &fn);

    pthread_mutex_lock(&c->mu);
    if (s == ROPEKV_OK) {
        k->fn[0] = fn;
        k->src = r;
        r = NULL;
        k->d = k->src->d;
        snprintf(k->name, sizeof k->name, "%s", k->src->name);
        k->status = ROPEKV_OK;
        k->refs = 1;
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
    free(r);
    return s;
}

void ropekv_kernel_release(ropekv_kernel *k) {
    if (!k) return;
    pthread_mutex_lock(&k->ctx->mu);
    if (k->refs > 0) k->refs--; /* modules stay loaded in the context's cache until destroy */
    pthread_mutex_unlock(&k->ctx->mu);
}

const char *ropekv_kernel_name(const ropekv_kernel *k) { return k ? k->name : ""; }

/* ---- argument checks ------------------------------------------------------------------------------ */
static void to_rk_args(const ropekv_args *a, rk_args *r) {
    *r = (rk_args){
        .q_nope = a->q_nope, .q_pe = a->q_pe, .q_out = a->q_out, .k_nope = a->k_nope, .k_pe = a->k_pe,
        .kv_cache = a->kv_cache, .positions = a->positions, .slots = a->slots, .cos = a->cos_sin, .sin = a->sin,
        .k_scale = a->k_scale, .tokens = a->tokens, .heads = a->heads, .max_pos = a->max_pos,
        .q_nope_st = a->q_nope_st, .q_nope_sh = a->q_nope_sh, .q_pe_st = a->q_pe_st, .q_pe_sh = a->q_pe_sh,
        .q_out_st = a->q_out_st, .q_out_sh = a->q_out_sh, .k_nope_st = a->k_nope_st, .k_pe_st = a->k_pe_st,
        .kv_st = a->kv_st, .kv_rows = a->kv_rows,
    };
}

typedef struct plan {
    int wide;        /* 64-bit index math */
    int64_t total;   /* chunks */
    int64_t blocks;
    rk_args args;    /* the kernel's arguments: the caller's, with rk_launch_plan's fields */
} plan;

#define CHECK(cond, status, ...) \
    do {                         \
        if (!(cond)) return fail(c, status, __VA_ARGS__); \
    } while (0)

static int aligned(const void *p, size_t a) { return ((uintptr_t)p & (a - 1)) == 0; }

/* Rows of width w at strides (st, sh) over T x H must not overlap (either nesting order). */
static int rows_disjoint(int64_t T, int64_t H, int64_t st, int64_t sh, int64_t w) {
    if (st < 0 || sh < 0) return 0;
    int ok_th = (H == 1 || sh >= w) && (T == 1 || st >= (H - 1) * sh + w);
    int ok_ht = (T == 1 || st >= w) && (H == 1 || sh >= (T - 1) * st + w);
    return ok_th || ok_ht;
}

/* Largest element offset touched through (st, sh) plus one row. */
static int64_t span(int64_t T, int64_t H, int64_t st, int64_t sh, int64_t w) {
    return (T - 1) * st + (H - 1) * sh + w;
}

static ropekv_status check_args(ropekv_ctx *c, const kdesc *d, const ropekv_args *a, plan *pl) {
    const rk_name_parts *p = &d->p;
    const int64_t L = p->L, R = p->R, W = L + R, T = a ? a->tokens : 0, H = a ? a->heads : 0;
    const int absorbed = p->q == ROPEKV_Q_ABSORBED, zc = p->q == ROPEKV_Q_ZERO_COPY, inplace = p->q == ROPEKV_Q_INPLACE;
    const int has_q = p->q != ROPEKV_Q_NONE, fp8 = p->kv_fp8;
    CHECK(a, ROPEKV_ERR_NULL, "args is NULL");
    CHECK(T >= 0 && T <= INT32_MAX, ROPEKV_ERR_SHAPE, "tokens = %lld: must be in [0, 2^31)", (long long)T);
    CHECK(H >= 1 && H <= 65536, ROPEKV_ERR_SHAPE, "heads = %lld: must be in [1, 65536]", (long long)H);
    CHECK(a->max_pos >= 1, ROPEKV_ERR_SHAPE, "max_pos = %lld: must be >= 1", (long long)a->max_pos);
    CHECK(a->kv_rows >= 0, ROPEKV_ERR_SHAPE, "kv_rows = %lld: must be >= 0", (long long)a->kv_rows);
    /* required pointers */
    CHECK(!absorbed || a->q_nope, ROPEKV_ERR_NULL, "q_nope is NULL (q form absorbed)");
    CHECK(!has_q || a->q_pe, ROPEKV_ERR_NULL, "q_pe is NULL");
    CHECK(!(absorbed || zc) || a->q_out, ROPEKV_ERR_NULL, "q_out is NULL");
    CHECK(a->k_nope, ROPEKV_ERR_NULL, "k_nope is NULL");
    CHECK(a->k_pe, ROPEKV_ERR_NULL, "k_pe is NULL");
    CHECK(a->kv_cache, ROPEKV_ERR_NULL, "kv_cache is NULL");
    CHECK(a->positions, ROPEKV_ERR_NULL, "positions is NULL");
    CHECK(a->slots, ROPEKV_ERR_NULL, "slots is NULL");
    CHECK(p->rope == RK_ROPE_NONE || a->cos_sin, ROPEKV_ERR_NULL, "cos_sin is NULL");
    CHECK(p->rope == RK_ROPE_NONE || p->cos_sin == RK_CS_F32_CAT || a->sin, ROPEKV_ERR_NULL,
          "sin is NULL (the spec's cos/sin tables are split)");
    CHECK(!fp8 || p->scale == RK_SCALE_NONE || a->k_scale, ROPEKV_ERR_NULL, "k_scale is NULL (fp8 cache with a scale)");
    /* strides: rows may not overlap (outputs would race; inputs would be a caller bug) */
    CHECK(!absorbed || rows_disjoint(T, H, a->q_nope_st, a->q_nope_sh, L), ROPEKV_ERR_STRIDE,
          "q_nope strides (token %lld, head %lld) overlap rows of %lld", (long long)a->q_nope_st, (long long)a->q_nope_sh,
          (long long)L);
    CHECK(!has_q || rows_disjoint(T, H, a->q_pe_st, a->q_pe_sh, R), ROPEKV_ERR_STRIDE,
          "q_pe strides (token %lld, head %lld) overlap rows of %lld", (long long)a->q_pe_st, (long long)a->q_pe_sh,
          (long long)R);
    CHECK(!(absorbed || zc) || rows_disjoint(T, H, a->q_out_st, a->q_out_sh, W), ROPEKV_ERR_STRIDE,
          "q_out strides (token %lld, head %lld) overlap rows of %lld", (long long)a->q_out_st, (long long)a->q_out_sh,
          (long long)W);
    CHECK(rows_disjoint(T, 1, a->k_nope_st, 0, L), ROPEKV_ERR_STRIDE, "k_nope token stride %lld < %lld",
          (long long)a->k_nope_st, (long long)L);
    CHECK(rows_disjoint(T, 1, a->k_pe_st, 0, R), ROPEKV_ERR_STRIDE, "k_pe token stride %lld < %lld",
          (long long)a->k_pe_st, (long long)R);
    CHECK(a->kv_rows <= 1 || a->kv_st >= W, ROPEKV_ERR_STRIDE, "kv_st %lld < row width %lld", (long long)a->kv_st,
          (long long)W);
    /* alignment the vector path assumes: 16-byte rows of bf16 (8 bytes for fp8 cache rows) */
    const int64_t kv_elem = fp8 ? 1 : 2, kv_align = fp8 ? 8 : 16;
    CHECK(!absorbed || (aligned(a->q_nope, 16) && a->q_nope_st % 8 == 0 && a->q_nope_sh % 8 == 0), ROPEKV_ERR_ALIGN,
          "q_nope must be 16-byte aligned with strides a multiple of 8 elements");
    CHECK(!has_q || (aligned(a->q_pe, 16) && a->q_pe_st % 8 == 0 && a->q_pe_sh % 8 == 0), ROPEKV_ERR_ALIGN,
          "q_pe must be 16-byte aligned with strides a multiple of 8 elements");
    CHECK(!(absorbed || zc) || (aligned(a->q_out, 16) && a->q_out_st % 8 == 0 && a->q_out_sh % 8 == 0),
          ROPEKV_ERR_ALIGN, "q_out must be 16-byte aligned with strides a multiple of 8 elements");
    CHECK(aligned(a->k_nope, 16) && a->k_nope_st % 8 == 0, ROPEKV_ERR_ALIGN,
          "k_nope must be 16-byte aligned with a token stride a multiple of 8 elements");
    CHECK(aligned(a->k_pe, 16) && a->k_pe_st % 8 == 0, ROPEKV_ERR_ALIGN,
          "k_pe must be 16-byte aligned with a token stride a multiple of 8 elements");
    CHECK(aligned(a->kv_cache, (size_t)kv_align) && (a->kv_st * kv_elem) % kv_align == 0, ROPEKV_ERR_ALIGN,
          "kv_cache must be %lld-byte aligned with a row stride of a multiple of %lld bytes", (long long)kv_align,
          (long long)kv_align);
    CHECK(aligned(a->positions, p->pos == ROPEKV_INDEX_INT64 ? 8 : 4) && aligned(a->slots, p->slot == ROPEKV_INDEX_INT64 ? 8 : 4),
          ROPEKV_ERR_ALIGN, "positions and slots must be aligned to their element size");
    const size_t cs_align = p->cos_sin == RK_CS_BF16_SPLIT ? 8 : 16;
    CHECK(p->rope == RK_ROPE_NONE || (aligned(a->cos_sin, cs_align) && (!a->sin || aligned(a->sin, cs_align))),
          ROPEKV_ERR_ALIGN, "cos/sin tables must be %zu-byte aligned", cs_align);
    CHECK(!a->k_scale || aligned(a->k_scale, 4), ROPEKV_ERR_ALIGN, "k_scale must be 4-byte aligned");

    /* launch size and index width */
    to_rk_args(a, &pl->args);
    rk_launch_plan(p->L, p->R, p->q, c->arch->wave, d->block, d->chunks, d->chunks_from, &pl->args, &pl->total,
                   &pl->blocks);
    CHECK(pl->blocks <= INT32_MAX, ROPEKV_ERR_SHAPE, "%lld tokens x %lld heads need too many blocks", (long long)T,
          (long long)H);
    int64_t reach = pl->total + (int64_t)d->block * d->chunks;
    if (T > 0) {
        int64_t cs_w = p->cos_sin == RK_CS_F32_CAT ? R : R / 2;
        int64_t spans[] = {
            absorbed ? span(T, H, a->q_nope_st, a->q_nope_sh, L) : 0,
            has_q ? span(T, H, a->q_pe_st, a->q_pe_sh, R) : 0,
            (absorbed || zc) ? span(T, H, a->q_out_st, a->q_out_sh, W) : 0,
            span(T, 1, a->k_nope_st, 0, L),
            span(T, 1, a->k_pe_st, 0, R),
            a->kv_rows * a->kv_st + W,
            a->max_pos * cs_w,
        };
        for (size_t i = 0; i < sizeof spans / sizeof spans[0]; i++)
            if (spans[i] > reach) reach = spans[i];
    }
    pl->wide = reach >= INT32_MAX;
    (void)inplace;
    return ROPEKV_OK;
}

/* The 64-bit entry, built by the first launch that needs it (2^31 or more elements in reach); threads
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
    ropekv_status s = build(c, k->src, k, 1, fn);
    pthread_mutex_lock(&c->mu);
    if (s == ROPEKV_OK) __atomic_store_n(&k->fn[1], *fn, __ATOMIC_RELEASE);
    k->wide_building = 0;
    pthread_cond_broadcast(&c->built);
    pthread_mutex_unlock(&c->mu);
    return s;
}

ropekv_status ropekv_launch(ropekv_kernel *k, const ropekv_args *a, void *stream) {
    if (!k) return ROPEKV_ERR_NULL;
    ropekv_ctx *c = k->ctx;
    plan pl;
    ropekv_status s = check_args(c, &k->d, a, &pl);
    if (s != ROPEKV_OK || pl.total == 0) return s;
    void *fn = __atomic_load_n(&k->fn[pl.wide], __ATOMIC_ACQUIRE);
    if (!fn && (s = wide_entry(k, &fn)) != ROPEKV_OK) return s;
    pl.args.prefetch = k->d.pdl && c->pdl && c->pdl_prefetch;
    rk_buf log = {0};
    int rc = c->dev.ops->launch(&c->dev, fn, &pl.args, pl.blocks, k->d.block, k->d.pdl && c->pdl,
                                  stream, &log);
    if (rc != ROPEKV_OK) s = fail(c, ROPEKV_ERR_LAUNCH, "launching %s: %s", k->name, log.p ? log.p : "");
    rk_buf_free(&log);
    return s;
}

ropekv_status ropekv_query(ropekv_ctx *c, const ropekv_variant *v, const ropekv_args *a, char *why, size_t cap) {
    if (!c) return ROPEKV_ERR_NULL;
    resolved *r = malloc(sizeof *r);
    if (!r) return fail(c, ROPEKV_ERR_NOMEM, "query: out of memory");
    ropekv_status s = resolve(c, v, r);
    plan pl;
    if (s == ROPEKV_OK && a) s = check_args(c, &r->d, a, &pl);
    free(r);
    if (why && cap) snprintf(why, cap, "%s", s == ROPEKV_OK ? "supported" : c->error);
    return s;
}
