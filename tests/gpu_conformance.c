/* GPU conformance: every variant the device's target lists, run on the device against the CPU reference.
 *
 * Portable part (every backend: hip, cuda, host): a context made with ropekv_create (the backend the
 * library picks, or --backend), every variant of the built-in specs on the context's row of
 * specs/archs.lua, each got with ropekv_kernel_get and launched with ropekv_launch exactly as an
 * application does, on device buffers of that backend (tests/support/devmem.h). Each is checked with
 * rk_check over a set of shapes: padded (non-contiguous) token and head strides on every other shape,
 * negative slots, positions at 0, max_pos - 1 and out of range, NaN/inf inputs, k_scale != 1, an fp8
 * query's q_scale going round 0.37, 1 and 1/448 from shape to shape (1/448 saturates a mul_recip or div
 * query), padding (kv_tokens above and below tokens, none; min_slot), chained launches (x4 / x32 / x8
 * back to back on the same buffers, in place: each rotates the previous one's q_pe, so they must be
 * ordered) and the 64-bit-index entry (a context made with $ROPEKV_FORCE_I64=1, the runtime's switch
 * that runs that entry on shapes that do not need it). Every buffer is surrounded by guard bytes on the
 * device, so a write outside any tensor is caught as well. The runtime's kernel must be the one the
 * reference describes: its name (which spells every code parameter) is compared first.
 *
 * CUDA-only part (active when the context's backend is cuda; it uses the library's internal cuda
 * backend table, which the portable part never touches):
 *   - rows retargeted: every variant shape of every spec on each NVIDIA row not newer than the device
 *     (so specs that list only sm_90 also run the sm_80 row's software fp8 path), plus the built-in
 *     variants of those rows, one per kernel name not already run above. The public API builds only
 *     the device's own row (an sm_80 cubin does not load on sm_90), so these are emitted from their row,
 *     compiled by nvrtc for the device's architecture and launched through the cuda backend table.
 *   - programmatic dependent launch: kernels of rows with `pdl` are launched with it (the context's
 *     default); shapes whose static inputs are read before the wait (a context with pdl_prefetch), and
 *     "late inputs" shapes, where a kernel launched just before (late_copy) writes the buffers ~0.1 ms
 *     after letting the kernel under test start, so a kernel that touched memory before its
 *     griddepcontrol.wait reads stale rows. --no-wait removes that wait from the source (every variant
 *     then goes through the backend table, the only way to run an edited source): a control run that
 *     shows the chained and late shapes can fail.
 *
 * Plain C (no test framework): it must build and run where only the driver and its compiler exist (CUDA
 * driver and nvrtc, or ROCm). Without a usable GPU it prints "gpu_conformance: SKIPPED: <reason>" and
 * exits 77; so does a run whose context lands on the host backend unless that was asked for (--host).
 *
 *   gpu_conformance [--quick] [--all] [--filter TEXT] [--jobs N] [--seed N] [--list]
 *                   [--backend hip|cuda|host] [--host] [--no-wait]
 *     --quick    only T in {1, 17} x H in {1, 16}, and 1000 x 1 (smoke run)
 *     --all      every variant of the built-in specs (the exhaustive product), not the covering set
 *                (tools/cover.h), on the context's row and retargeted
 *     --filter   only variants whose key contains TEXT
 *     --jobs     worker processes (default: online CPUs, at most 8); each opens its own context
 *     --list     print the device, the variants and shapes, run nothing
 *     --backend  the backend to use (default: the library's choice: $ROPEKV_BACKEND, else an AMD GPU,
 *                else NVIDIA); host runs the same flow on the CPU (kernels built by the host C++
 *                compiler, "device" buffers in host memory with guards): everything but a GPU
 *     --host     --backend host
 *     --no-wait  (cuda) the control run described above
 *
 * Output: the device, the variants and the shapes, one line per variant, "pass <key> (<n> shapes)" or
 * "FAIL <key>: <why> [shape]", then the total time and a last line "N passed, M failed". Exit status 0
 * iff M == 0 and N > 0. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ropekv.h"
#include "rk.h"
#include "check.h"
#include "devmem.h"
#include "pool.h"
#include "proc.h"
#include "testutil.h"
/* the CUDA-only part */
#include "backend.h"
#include "build.h"
#include "cover.h"
#include "cuda_api.h"

#define SKIP_STATUS 77
#define GUARD 256 /* guard bytes before and after every device buffer (keeps 256-byte alignment) */
#define GUARD_BYTE 0xcd
#define MAX_POS 4096 /* rows of the cos/sin tables */
#define WHY_CAP 2048
_Static_assert(GUARD % RK_DEVMEM_ALIGN == 0, "guards keep the buffers' alignment");

/* ---- options ---------------------------------------------------------------------------------------- */
static const char *g_backend; /* --backend: "hip", "cuda", "host"; NULL: the library's choice, a GPU */
static int g_no_wait;         /* --no-wait */
static uint64_t g_seed = 1;
static char g_cache_dir[4096]; /* the run's own disk cache (see make_cache_dir) */

/* ---- shapes -------------------------------------------------------------------------------------- */
typedef struct shape {
    int64_t tokens, heads;
    int wide;     /* 1: run the 64-bit entry even though the 32-bit one would do */
    int runs;     /* launches back to back on the same buffers (0: one) */
    int prefetch; /* (cuda) rows with pdl: read the static inputs before the wait (ropekv_options.pdl_prefetch) */
    int late;     /* (cuda) a kernel before it in the stream writes its buffers late (see late_copy) */
    int64_t kv_tokens, min_slot; /* padding (rk_shape): KV rows for fewer or more tokens, reserved slots */
    int reads;                   /* 1: the read-back variants only */
} shape;

static const int64_t FULL_T[] = {1, 2, 3, 16, 127, 1000, 8192};
static const int64_t FULL_H[] = {1, 16, 128};
static const int64_t QUICK_T[] = {1, 17};
static const int64_t QUICK_H[] = {1, 16};
/* Every shape runs; the largest (8192 x 128, ~1M rows) holds about 5 GB of host copies per worker,
 * so the default worker count is capped by MAX_DEFAULT_JOBS. */
#define MAX_ROWS (1 << 21)
#define MAX_DEFAULT_JOBS 8

static shape g_shapes[80];
static int g_n_shapes;

/* pdl: the CUDA-only shapes (prefetch, late inputs) are added. */
static void make_shapes(int quick, int pdl) {
    const int64_t *ts = quick ? QUICK_T : FULL_T, *hs = quick ? QUICK_H : FULL_H;
    int nt = quick ? 2 : (int)(sizeof FULL_T / sizeof FULL_T[0]);
    int nh = quick ? 2 : (int)(sizeof FULL_H / sizeof FULL_H[0]);
    g_n_shapes = 0;
    for (int h = 0; h < nh; h++)
        for (int t = 0; t < nt; t++)
            if (ts[t] * hs[h] <= MAX_ROWS) g_shapes[g_n_shapes++] = (shape){.tokens = ts[t], .heads = hs[h]};
    /* smallest first, so a failure is reported on the smallest shape that shows it */
    for (int i = 1; i < g_n_shapes; i++)
        for (int j = i;
             j > 0 && g_shapes[j].tokens * g_shapes[j].heads < g_shapes[j - 1].tokens * g_shapes[j - 1].heads; j--) {
            shape x = g_shapes[j];
            g_shapes[j] = g_shapes[j - 1];
            g_shapes[j - 1] = x;
        }
    g_shapes[g_n_shapes++] = quick ? (shape){.tokens = 17, .heads = 16, .wide = 1}
                                   : (shape){.tokens = 1000, .heads = 16, .wide = 1};
    /* a launch of at least 65536 chunks in every op and q form (1000 x 1: 72 chunks a token and more), where
     * rows with a wide_block take their wide blocks (the full list has it already) */
    if (quick) g_shapes[g_n_shapes++] = (shape){.tokens = 1000, .heads = 1};
    /* a read-back launch past the NVIDIA rows' read_chunks_from (2^21 chunks: 32768 rows of 72), where a thread
     * takes read_chunks chunks */
    g_shapes[g_n_shapes++] = (shape){.tokens = 32768, .heads = 1, .reads = 1};
    /* padding: fewer KV rows than query rows (a short slot list), more (padded queries), none, no
     * query rows; reserved slots (min_slot) that must stay untouched */
    g_shapes[g_n_shapes++] = (shape){.tokens = 17, .heads = 16, .kv_tokens = 5, .min_slot = 1};
    g_shapes[g_n_shapes++] = (shape){.tokens = 3, .heads = 16, .kv_tokens = 17, .min_slot = 2};
    if (!quick) {
        g_shapes[g_n_shapes++] = (shape){.tokens = 1000, .heads = 128, .kv_tokens = 600, .min_slot = 1};
        g_shapes[g_n_shapes++] = (shape){.tokens = 127, .heads = 16, .kv_tokens = 1000, .min_slot = 3};
        g_shapes[g_n_shapes++] = (shape){.tokens = 127, .heads = 16, .kv_tokens = -1};
        g_shapes[g_n_shapes++] = (shape){.tokens = 0, .heads = 16, .kv_tokens = 127, .min_slot = 1};
        g_shapes[g_n_shapes++] = (shape){.tokens = 1000, .heads = 16, .wide = 1, .kv_tokens = 300, .min_slot = 1};
    }
    /* chained launches: one wave of blocks (16 x 128) and several (1000 x 16); with pdl also reading the
     * static inputs before the wait */
    if (quick) {
        g_shapes[g_n_shapes++] = (shape){.tokens = 17, .heads = 16, .runs = 4, .prefetch = pdl};
    } else {
        g_shapes[g_n_shapes++] = (shape){.tokens = 16, .heads = 128, .runs = 32};
        if (pdl) g_shapes[g_n_shapes++] = (shape){.tokens = 16, .heads = 128, .runs = 32, .prefetch = 1};
        g_shapes[g_n_shapes++] = (shape){.tokens = 1000, .heads = 16, .runs = 8, .prefetch = pdl};
    }
    /* late inputs: the kernel before it lets it launch at once, then writes its buffers ~0.1 ms later */
    if (pdl && quick) g_shapes[g_n_shapes++] = (shape){.tokens = 17, .heads = 16, .late = 1};
    if (pdl && !quick) {
        g_shapes[g_n_shapes++] = (shape){.tokens = 1, .heads = 16, .late = 1};
        g_shapes[g_n_shapes++] = (shape){.tokens = 16, .heads = 16, .prefetch = 1, .late = 1};
        g_shapes[g_n_shapes++] = (shape){.tokens = 1000, .heads = 16, .late = 1};
    }
}

static rk_shape rk_shape_of(int i) {
    return (rk_shape){.tokens = g_shapes[i].tokens,
                      .heads = g_shapes[i].heads,
                      .pad = (i % 2) * 8,
                      .max_pos = MAX_POS,
                      .neg_every = 3,
                      .specials = 1,
                      .k_scale = 0.37f,
                      .q_scale = i % 3 == 0   ? 0.37f
                                 : i % 3 == 1 ? 1.0f
                                              : 1.0f / 448.0f,
                      .runs = g_shapes[i].runs,
                      .kv_tokens = g_shapes[i].kv_tokens,
                      .min_slot = g_shapes[i].min_slot,
                      .mask_every = i % 4 == 2 ? 4 : 0, /* a write mask */
                      .q_pad = i % 4 == 3 ? 5 : 0};     /* padded query heads */
}

static void shape_text(int i, int wide, char *out, size_t cap) {
    rk_shape s = rk_shape_of(i);
    char chained[48] = "";
    if (s.runs > 1)
        snprintf(chained, sizeof chained, " x%d chained%s", s.runs, g_shapes[i].prefetch ? ", prefetch" : "");
    if (g_shapes[i].late) snprintf(chained, sizeof chained, " late inputs%s", g_shapes[i].prefetch ? ", prefetch" : "");
    char padding[64] = "";
    if (s.kv_tokens || s.min_slot)
        snprintf(padding, sizeof padding, " kv_tokens=%lld min_slot=%lld", (long long)s.kv_tokens,
                 (long long)s.min_slot);
    char extra[48] = "";
    if (s.mask_every || s.q_pad)
        snprintf(extra, sizeof extra, "%s%.0d%s%.0lld", s.mask_every ? " write_mask 1/" : "", s.mask_every,
                 s.q_pad ? " padded heads +" : "", (long long)s.q_pad);
    snprintf(out, cap, "[T=%lld H=%lld pad=%lld %s%s%s%s]", (long long)s.tokens, (long long)s.heads, (long long)s.pad,
             wide ? "i64" : "i32", chained, padding, extra);
}

/* ---- variants --------------------------------------------------------------------------------------- */

typedef struct conf_variant {
    rk_desc d;    /* the reference's description */
    int internal; /* 1: the CUDA-only part runs it through the backend table; 0: the public API */
} conf_variant;

static rk_catalog g_cat;
static rk_desc *g_all; /* the covering set of the built-in specs (--all: every variant), every row */
static int g_n_all;
static conf_variant *g_vars; /* what this run checks */
static int g_n_vars, g_n_public, g_n_retargeted;
static int g_every; /* --all: the exhaustive product, not the covering set */

static int load_catalog(char *why, size_t cap) {
    rk_err err = {0};
    if (rk_catalog_load_embedded(&g_cat, &err) != ROPEKV_OK) {
        snprintf(why, cap, "loading the built-in specs: %.900s", err.msg);
        return -1;
    }
    g_all = malloc(sizeof *g_all * RK_MAX_VARIANTS_PER_SPEC * RK_MAX_SPECS);
    if (!g_all) {
        snprintf(why, cap, "out of memory");
        return -1;
    }
    g_n_all = rk_cover_catalog(&g_cat, NULL, g_every, g_all, RK_MAX_VARIANTS_PER_SPEC * RK_MAX_SPECS, &err);
    if (g_n_all < 0) {
        snprintf(why, cap, "the built-in variants: %.900s", err.msg);
        return -1;
    }
    return 0;
}

/* Adds v unless the filter leaves it out or a variant of the same kernel name is there. */
static int add_variant(const rk_desc *v, int internal, const char *filter, int *cap) {
    if (filter && !strstr(v->key, filter)) return 0;
    for (int i = 0; i < g_n_vars; i++)
        if (strcmp(g_vars[i].d.name, v->name) == 0) return 0;
    if (g_n_vars == *cap) {
        int ncap = *cap ? *cap * 2 : 256;
        conf_variant *n = realloc(g_vars, sizeof *n * (size_t)ncap);
        if (!n) return -1;
        g_vars = n;
        *cap = ncap;
    }
    g_vars[g_n_vars++] = (conf_variant){*v, internal};
    return 0;
}

/* "sm_90" -> 90, "sm_90a" -> 90; -1 for a target that is not NVIDIA's. */
static int sm_number(const char *target) {
    return strncmp(target, "sm_", 3) == 0 && target[3] >= '0' && target[3] <= '9' ? atoi(target + 3) : -1;
}

/* The variants of this run: every built-in variant on the context's row (through the public API); on
 * cuda also the NVIDIA rows up to the device's, retargeted (the CUDA-only part). */
static int collect_variants(const char *row, const char *backend, const char *target, const char *filter, char *why,
                            size_t cap) {
    int vcap = 0;
    const int cuda = !strcmp(backend, "cuda");
    for (int i = 0; i < g_n_all; i++)
        if (!strcmp(g_all[i].arch->name, row) && add_variant(&g_all[i], g_no_wait, filter, &vcap)) goto oom;
    g_n_public = g_no_wait ? 0 : g_n_vars;
    if (!cuda) return 0;
    const int device_sm = sm_number(target);
    for (int i = 0; i < g_n_all; i++) { /* the built-in variants of the other NVIDIA rows */
        const int sm = sm_number(g_all[i].arch->name);
        if (sm >= 0 && sm <= device_sm && add_variant(&g_all[i], 1, filter, &vcap)) goto oom;
    }
    rk_desc *tmp = malloc(sizeof *tmp * RK_MAX_VARIANTS_PER_SPEC * RK_MAX_SPECS);
    if (!tmp) goto oom;
    for (int a = 0; a < g_cat.archs.n; a++) {
        const int sm = sm_number(g_cat.archs.a[a].name);
        if (sm < 0 || sm > device_sm) continue; /* a newer row's code may use what this device lacks */
        rk_err err = {0};
        int n = g_every
                    ? rk_build_retarget(&g_cat, &g_cat.archs.a[a], tmp, RK_MAX_VARIANTS_PER_SPEC * RK_MAX_SPECS)
                    : rk_cover_retarget(&g_cat, &g_cat.archs.a[a], tmp, RK_MAX_VARIANTS_PER_SPEC * RK_MAX_SPECS, &err);
        if (n < 0) {
            free(tmp);
            goto oom;
        }
        g_n_retargeted += n;
        for (int i = 0; i < n; i++)
            if (add_variant(&tmp[i], 1, filter, &vcap)) {
                free(tmp);
                goto oom;
            }
    }
    free(tmp);
    return 0;
oom:
    snprintf(why, cap, "out of memory");
    return -1;
}

/* ---- contexts ------------------------------------------------------------------------------------- */
/* A worker's contexts, one per way of launching: plain; pdl_prefetch on (the prefetch shapes); the
 * 64-bit entry forced (the wide shapes). All share the run's disk cache, so a kernel is compiled once
 * per entry, whichever context asks first. */
enum { CTX_PLAIN, CTX_PREFETCH, CTX_I64, N_CTX };
static const char *const CTX_NAME[N_CTX] = {"", " (pdl_prefetch)", " (ROPEKV_FORCE_I64=1)"};

static int ctx_mode(const shape *s) { return s->wide ? CTX_I64 : s->prefetch ? CTX_PREFETCH : CTX_PLAIN; }

static ropekv_backend backend_enum(const char *name) {
    return !name                   ? ROPEKV_BACKEND_AUTO
           : !strcmp(name, "hip")  ? ROPEKV_BACKEND_HIP
           : !strcmp(name, "cuda") ? ROPEKV_BACKEND_CUDA
                                   : ROPEKV_BACKEND_HOST;
}

/* A context of the run: backend (NULL: the library's choice), the run's cache only (no read-only layers:
 * every kernel is compiled here), pdl on as the row says. */
static ropekv_status make_ctx(ropekv_ctx **out, const char *backend, int mode) {
    ropekv_options o = {.backend = backend_enum(backend),
                        .cache_dir = g_cache_dir,
                        .disk_cache = 1,
                        .cache_ro = "",
                        .pdl = 1,
                        .pdl_prefetch = mode == CTX_PREFETCH ? 1 : -1};
    if (mode == CTX_I64) setenv("ROPEKV_FORCE_I64", "1", 1); /* read by ropekv_create (docs/environment.md) */
    ropekv_status s = ropekv_create(out, &o);
    if (mode == CTX_I64) unsetenv("ROPEKV_FORCE_I64");
    return s;
}

/* The run's disk cache: a fresh private directory, removed at the end (remove_cache_dir). */
static int make_cache_dir(char *why, size_t cap) {
    const char *tmp = getenv("TMPDIR");
    snprintf(g_cache_dir, sizeof g_cache_dir, "%s/ropekv-conformance-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(g_cache_dir)) {
        snprintf(why, cap, "mkdtemp %.800s: %s", g_cache_dir, strerror(errno));
        return -1;
    }
    return 0;
}

/* ---- the CUDA-only part: the driver table, late_copy, the backend table ------------------------------ */
static const rk_cuda_api *cu;

/* The "late" shapes: a kernel launched just before the one under test copies the test's buffers into
 * place from staging copies, but only after spinning ~0.1 ms, and lets the next grid launch at once
 * (griddepcontrol.launch_dependents). With programmatic dependent launch the kernel under test starts
 * while this one spins: only its griddepcontrol.wait keeps it from reading stale inputs, or writing
 * outputs that late_copy then overwrites with their initial contents. (`--no-wait` shows it failing.) */
#define LATE_MAX 14 /* rows of late_copy's table (the 14 in LATE_SRC): one per rk_check buffer */
_Static_assert(RK_CHECK_NBUF <= LATE_MAX, "late_copy's table holds every rk_check buffer");
static const char LATE_SRC[] =
    "struct late { unsigned long long dst[14], src[14], n[14]; long long count, spin; };\n"
    "extern \"C\" __global__ void late_copy(const late a) {\n"
    "#if __CUDA_ARCH__ >= 900\n"
    "    asm volatile(\"griddepcontrol.launch_dependents;\" ::: \"memory\");\n"
    "#endif\n"
    "    long long t0 = clock64();\n"
    "    while (clock64() - t0 < a.spin) {}\n"
    "    const unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;\n"
    "    for (int b = 0; b < a.count; b++)\n"
    "        for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < a.n[b]; i += step)\n"
    "            ((unsigned char *)a.dst[b])[i] = ((const unsigned char *)a.src[b])[i];\n"
    "}\n";
typedef struct late_args {
    unsigned long long dst[LATE_MAX], src[LATE_MAX], n[LATE_MAX];
    long long count, spin;
} late_args;

/* Buffers a kernel before it may write: inputs (positions, slots and tables only without prefetch,
 * whose contract is that they are not written there) and the outputs. */
static int late_buffer(int i, int prefetch) {
    switch (i) {
    case RK_CHECK_POS:
    case RK_CHECK_SLOTS:
    case RK_CHECK_COS:
    case RK_CHECK_SIN: return !prefetch;
    default: return 1;
    }
}

/* ---- one run of a kernel: the rk_check callback --------------------------------------------------- */
typedef struct runner {
    rk_devmem *mem;
    ropekv_kernel *k; /* the portable part: launched with ropekv_launch */
    ropekv_ctx *ctx;  /* ... its context */
    /* the CUDA-only part: launched through the backend table */
    rk_device *dev;
    void *fn[2];
    int pdl;         /* launch as the runtime does for rows with `pdl` */
    int force_wide;  /* the shape asks for the 64-bit entry */
    int runs;        /* launches back to back (the shape's runs, at least 1) */
    int prefetch;    /* the shape's prefetch */
    int late;        /* the shape's late */
    void *late_fn;   /* late_copy, loaded (cuda only) */
    int used_wide;   /* out: the entry that ran */
    int device_lost; /* out: a driver call failed; the context may be unusable */
    char *why;       /* rk_check's message buffer */
    size_t why_cap;
} runner;

/* Rebases a host pointer inside one of the buffers onto its device copy. */
static uint64_t rebase(const void *p, const rk_check_buf *b, const uint64_t *dev) {
    if (!p) return 0;
    uintptr_t x = (uintptr_t)p;
    for (int i = 0; i < RK_CHECK_NBUF; i++) {
        uintptr_t h = (uintptr_t)b[i].host;
        if (b[i].host && x >= h && x < h + (uintptr_t)(b[i].bytes ? b[i].bytes : 1)) return dev[i] + GUARD + (x - h);
    }
    return UINT64_MAX;
}

/* The launches of one shape through the public API. */
static int launch_public(runner *r, const rk_args *d) {
    ropekv_args a;
    rk_test_public_args(d, &a);
    for (int i = 0; i < r->runs; i++) {
        ropekv_status s = ropekv_launch(r->k, &a, NULL);
        if (s != ROPEKV_OK) { /* the context's last error is this one: the worker is its only thread */
            snprintf(r->why, r->why_cap, "ropekv_launch: %s", ropekv_last_error(r->ctx));
            r->device_lost = s == ROPEKV_ERR_LAUNCH || s == ROPEKV_ERR_DEVICE;
            return s;
        }
    }
    return ROPEKV_OK;
}

/* The launches of one shape through the cuda backend table (d: planned by rk_launch_plan). */
static int launch_internal(runner *r, const rk_desc *v, rk_args *d, int64_t blocks, int block) {
    rk_buf log = {0};
    int rc = ROPEKV_OK;
    d->prefetch = v->arch->pdl && r->prefetch;
    for (int i = 0; i < r->runs && rc == ROPEKV_OK; i++)
        rc = r->dev->ops->launch(r->dev, r->fn[r->used_wide], d, blocks, block, r->pdl, NULL, &log);
    if (rc != ROPEKV_OK) {
        snprintf(r->why, r->why_cap, "launch (%lld blocks of %d): %s", (long long)blocks, block,
                 log.p ? log.p : "failed");
        r->device_lost = 1;
    }
    rk_buf_free(&log);
    return rc;
}

static int run_device(void *ctx, const rk_desc *v, const rk_args *a) {
    runner *r = ctx;
    rk_check_buf b[RK_CHECK_NBUF];
    uint64_t dev[RK_CHECK_NBUF] = {0};
    unsigned char *guard = NULL, *back = NULL;
    char *why = r->why;
    const size_t cap = r->why_cap;
    int rc = ROPEKV_ERR_DEVICE;
    uint64_t staging[RK_CHECK_NBUF] = {0};
    rk_check_buffers(v, a, b);

    guard = malloc(GUARD);
    back = malloc(GUARD);
    if (!guard || !back) {
        snprintf(why, cap, "out of host memory");
        rc = ROPEKV_ERR_NOMEM;
        goto out;
    }
    memset(guard, GUARD_BYTE, GUARD);
    /* every buffer: [guard | data | guard] on the device */
    for (int i = 0; i < RK_CHECK_NBUF; i++) {
        size_t n = (size_t)b[i].bytes;
        if (!b[i].host) continue;
        if (rk_devmem_alloc(r->mem, &dev[i], n + 2 * GUARD, why, cap) ||
            rk_devmem_to_device(r->mem, dev[i], guard, GUARD, why, cap) ||
            (n && rk_devmem_to_device(r->mem, dev[i] + GUARD, b[i].host, n, why, cap)) ||
            rk_devmem_to_device(r->mem, dev[i] + GUARD + n, guard, GUARD, why, cap)) {
            char what[64];
            snprintf(what, sizeof what, " (%s)", b[i].name);
            strncat(why, what, cap - strlen(why) - 1);
            r->device_lost = 1;
            goto out;
        }
    }
    if (r->late && r->late_fn) { /* the CUDA-only part */
        late_args la = {.spin = 200000};
        size_t most = 0; /* the largest buffer: one stale pattern serves all */
        for (int i = 0; i < RK_CHECK_NBUF; i++)
            if (b[i].host && late_buffer(i, r->prefetch) && (size_t)b[i].bytes > most) most = (size_t)b[i].bytes;
        unsigned char *stale = malloc(most ? most : 1);
        if (!stale) {
            snprintf(why, cap, "out of host memory");
            rc = ROPEKV_ERR_NOMEM;
            goto out;
        }
        memset(stale, 0x5a, most);
        for (int i = 0; i < RK_CHECK_NBUF; i++) {
            size_t n = (size_t)b[i].bytes;
            if (!b[i].host || !n || !late_buffer(i, r->prefetch)) continue;
            int k = (int)la.count++;
            if (rk_devmem_alloc(r->mem, &staging[i], n, why, cap) ||
                rk_devmem_to_device(r->mem, staging[i], b[i].host, n, why, cap) ||
                rk_devmem_to_device(r->mem, dev[i] + GUARD, stale, n, why, cap)) {
                free(stale);
                r->device_lost = 1;
                goto out;
            }
            la.dst[k] = dev[i] + GUARD;
            la.src[k] = staging[i];
            la.n[k] = n;
        }
        free(stale);
        void *params[] = {&la};
        CUresult cr = cu->cuLaunchKernel(r->late_fn, 528, 1, 1, 256, 1, 1, 0, NULL, params, NULL);
        if (cr != 0) {
            const char *text = NULL;
            cu->cuGetErrorString(cr, &text);
            snprintf(why, cap, "launching late_copy: %s (%d)", text ? text : "CUDA error", cr);
            r->device_lost = 1;
            goto out;
        }
    }
    rk_args d = *a;
    uint64_t p[18] = {
        rebase(a->q_nope, b, dev),
        rebase(a->q_pe, b, dev),
        rebase(a->q_out, b, dev),
        rebase(a->k_nope, b, dev),
        rebase(a->k_pe, b, dev),
        rebase(a->kv_cache, b, dev),
        rebase(a->positions, b, dev),
        rebase(a->slots, b, dev),
        rebase(a->cos_sin, b, dev),
        rebase(a->sin, b, dev),
        rebase(a->k_scale, b, dev),
        rebase(a->q_scale, b, dev),
        a->kv_rope_cache ? rebase(a->kv_rope_cache, b, dev) : 0,
        rebase(a->out, b, dev),
        rebase(a->out_rope, b, dev),
        rebase(a->norm_weight, b, dev),
        rebase(a->norm_out, b, dev),
        rebase(a->write_mask, b, dev),
    };
    for (int i = 0; i < 18; i++)
        if (p[i] == UINT64_MAX) {
            snprintf(why, cap, "argument pointer %d lies outside every buffer rk_check_buffers describes", i);
            rc = ROPEKV_ERR_IO;
            goto out;
        }
    d.q_nope = (const void *)(uintptr_t)p[0];
    d.q_pe = (const void *)(uintptr_t)p[1];
    d.q_out = (void *)(uintptr_t)p[2];
    d.k_nope = (const void *)(uintptr_t)p[3];
    d.k_pe = (const void *)(uintptr_t)p[4];
    d.kv_cache = (void *)(uintptr_t)p[5];
    d.positions = (const void *)(uintptr_t)p[6];
    d.slots = (const void *)(uintptr_t)p[7];
    d.cos_sin = (const void *)(uintptr_t)p[8];
    d.sin = (const void *)(uintptr_t)p[9];
    d.k_scale = (const float *)(uintptr_t)p[10];
    d.q_scale = (const float *)(uintptr_t)p[11];
    d.kv_rope_cache = (void *)(uintptr_t)p[12];
    d.out = (void *)(uintptr_t)p[13];
    d.out_rope = (void *)(uintptr_t)p[14];
    d.norm_weight = (const void *)(uintptr_t)p[15];
    d.norm_out = (void *)(uintptr_t)p[16];
    d.write_mask = (const void *)(uintptr_t)p[17];

    /* The launch geometry as the runtime computes it; the 64-bit entry is needed once a chunk index or an
     * element offset can pass 2^31 - 1 (bytes bound elements from above): the entry the backend table
     * launches, and the one the shape's message names (the runtime decides the same by that rule). */
    rk_args planned = d;
    int64_t total, blocks;
    int block;
    rk_launch_plan(v, &planned, &total, &blocks, &block);
    int64_t reach = total + (int64_t)block * planned.chunks;
    for (int i = 0; i < RK_CHECK_NBUF; i++)
        if (b[i].bytes > reach) reach = b[i].bytes;
    r->used_wide = r->force_wide || reach >= INT32_MAX;
    if (r->k) {
        rc = launch_public(r, &d);
    } else if (blocks > INT32_MAX) {
        snprintf(why, cap, "%lld blocks: too many for one launch", (long long)blocks);
        rc = ROPEKV_ERR_LAUNCH;
    } else {
        rc = total > 0 ? launch_internal(r, v, &planned, blocks, block) : ROPEKV_OK;
    }
    if (rc != ROPEKV_OK) goto out;
    rc = ROPEKV_ERR_DEVICE;
    if (rk_devmem_synchronize(r->mem, why, cap)) {
        r->device_lost = 1;
        goto out;
    }
    /* outputs back; every guard checked */
    for (int i = 0; i < RK_CHECK_NBUF; i++) {
        size_t n = (size_t)b[i].bytes;
        if (!b[i].host) continue;
        if (b[i].compared && n && rk_devmem_to_host(r->mem, b[i].host, dev[i] + GUARD, n, why, cap)) {
            r->device_lost = 1;
            goto out;
        }
        for (int side = 0; side < 2; side++) {
            if (rk_devmem_to_host(r->mem, back, dev[i] + (side ? GUARD + n : 0), GUARD, why, cap)) {
                r->device_lost = 1;
                goto out;
            }
            for (int k = 0; k < GUARD; k++)
                if (back[k] != GUARD_BYTE) {
                    snprintf(why, cap, "the kernel wrote %s %s: byte %d of the guard is 0x%02x",
                             side ? "past the end of" : "before", b[i].name, side ? k : k - GUARD, back[k]);
                    rc = 1;
                    goto out;
                }
        }
    }
    rc = ROPEKV_OK;
out:
    for (int i = 0; i < RK_CHECK_NBUF; i++) {
        rk_devmem_free(r->mem, dev[i]);
        rk_devmem_free(r->mem, staging[i]);
    }
    free(guard);
    free(back);
    return rc;
}

/* ---- a worker: its device memory, contexts and (cuda) backend table --------------------------------- */
typedef struct result {
    int ok;
    int shapes; /* shapes that passed */
    double ms;
    char why[WHY_CAP];
} result;

typedef struct worker {
    int opened; /* mem is open */
    rk_devmem mem;
    ropekv_ctx *ctx[N_CTX]; /* made on first need */
    /* the CUDA-only part */
    int cuda_opened;
    rk_device cuda_dev;
    void *late_fn;
} worker;

static worker g_w;
static char g_probed_backend[16]; /* the backend the probe's context picked: every worker opens it */

static ropekv_ctx *worker_ctx(worker *w, int mode, char *why, size_t cap) {
    if (w->ctx[mode]) return w->ctx[mode];
    ropekv_status s = make_ctx(&w->ctx[mode], g_probed_backend, mode);
    if (s != ROPEKV_OK) {
        snprintf(why, cap, "ropekv_create%s: %s (%s)", CTX_NAME[mode], ropekv_status_name(s), ropekv_status_message(s));
        w->ctx[mode] = NULL;
    }
    return w->ctx[mode];
}

/* The cuda backend table and late_copy, for the CUDA-only part. 0, or -1 with why. */
static int open_cuda_part(worker *w, const rk_arch *arch, char *why, size_t cap) {
    if (w->cuda_opened) return 0;
    rk_buf log = {0};
    rk_codeobj lco = {0};
    void *lmod = NULL, *lfn[2] = {NULL, NULL};
    int rc = (cu = rk_cuda_driver(RK_CUDA_ALL, why, cap)) ? ROPEKV_OK : ROPEKV_ERR_BACKEND;
    if (rc == ROPEKV_OK) rc = rk_backend_cuda.open(&w->cuda_dev, 0, NULL, &log);
    if (rc != ROPEKV_OK) {
        if (log.p) snprintf(why, cap, "the cuda backend table: %s", log.p);
        rk_buf_free(&log);
        return -1;
    }
    w->cuda_dev.ops = &rk_backend_cuda;
    rc = rk_backend_cuda.compile(&w->cuda_dev, LATE_SRC, sizeof LATE_SRC - 1, "late_copy", arch, &lco, &log);
    if (rc == ROPEKV_OK) rc = rk_backend_cuda.load(&w->cuda_dev, &lco, "late_copy", &lmod, lfn, &log);
    rk_code_free(&lco);
    if (rc != ROPEKV_OK || !lfn[0]) {
        snprintf(why, cap, "late_copy: %s", log.p ? log.p : "failed");
        rk_buf_free(&log);
        rk_backend_cuda.close(&w->cuda_dev);
        return -1;
    }
    rk_buf_free(&log);
    w->late_fn = lfn[0];
    w->cuda_opened = 1;
    return 0;
}

/* Checks v over every shape with the runner r: the kernel (and context) of the shape's mode, or the entry
 * points already in r (k_by_mode NULL). res->shapes counts the shapes that passed. */
static int check_shapes(const rk_desc *v, runner *r, ropekv_kernel **k_by_mode, ropekv_ctx **ctx_by_mode, result *res) {
    for (int i = 0; i < g_n_shapes; i++) {
        rk_shape sh = rk_shape_of(i);
        if (g_shapes[i].reads && v->op != ROPEKV_OP_READ) continue;
        if (k_by_mode) {
            r->k = k_by_mode[ctx_mode(&g_shapes[i])];
            r->ctx = ctx_by_mode[ctx_mode(&g_shapes[i])];
        }
        r->force_wide = g_shapes[i].wide;
        r->runs = sh.runs > 1 ? sh.runs : 1;
        r->prefetch = g_shapes[i].prefetch;
        r->late = g_shapes[i].late;
        r->used_wide = 0;
        res->why[0] = '\0';
        int rc = rk_check(v, &sh, g_seed * 1000003u + (uint64_t)i, run_device, r, res->why, sizeof res->why);
        if (rc != 0) {
            char s[96];
            shape_text(i, r->used_wide, s, sizeof s);
            size_t n = strlen(res->why);
            snprintf(res->why + n, sizeof res->why - n, " %s", s);
            return -1;
        }
        res->shapes++;
    }
    return 0;
}

/* The portable part: v through ropekv_kernel_get / ropekv_launch, one kernel per context a shape needs.
 * Returns 1 when the device is unusable. */
static int check_public(worker *w, const rk_desc *v, result *res) {
    ropekv_kernel *k[N_CTX] = {NULL};
    const ropekv_variant pv = rk_variant_of(v);
    runner r = {.mem = &w->mem, .late_fn = w->late_fn, .why = res->why, .why_cap = sizeof res->why};
    int need[N_CTX] = {0};
    for (int i = 0; i < g_n_shapes; i++) need[ctx_mode(&g_shapes[i])] = 1;
    for (int m = 0; m < N_CTX; m++) {
        if (!need[m]) continue;
        ropekv_ctx *c = worker_ctx(w, m, res->why, sizeof res->why);
        if (!c) {
            r.device_lost = 1;
            goto out;
        }
        ropekv_status s = ropekv_kernel_get(c, &pv, &k[m]);
        if (s != ROPEKV_OK) {
            snprintf(res->why, sizeof res->why, "ropekv_kernel_get%s: %s", CTX_NAME[m], ropekv_last_error(c));
            r.device_lost = s == ROPEKV_ERR_DEVICE;
            goto out;
        }
        if (strcmp(ropekv_kernel_name(k[m]), v->name) != 0) {
            snprintf(res->why, sizeof res->why, "the runtime built %s, the reference describes %s",
                     ropekv_kernel_name(k[m]), v->name);
            goto out;
        }
    }
    /* the wide shapes must really run the 64-bit entry: the forced context builds it on their first launch */
    ropekv_stats before = {0}, after = {0};
    if (k[CTX_I64]) ropekv_get_stats(w->ctx[CTX_I64], &before);
    if (check_shapes(v, &r, k, w->ctx, res) != 0) goto out;
    if (k[CTX_I64]) {
        ropekv_get_stats(w->ctx[CTX_I64], &after);
        if (after.compiles + after.disk_hits != before.compiles + before.disk_hits + 1) {
            snprintf(res->why, sizeof res->why,
                     "the launches with ROPEKV_FORCE_I64=1 built %llu entries, expected 1 (the 64-bit one)",
                     (unsigned long long)(after.compiles + after.disk_hits - before.compiles - before.disk_hits));
            goto out;
        }
    }
    res->ok = 1;
out:
    for (int m = 0; m < N_CTX; m++) ropekv_kernel_release(k[m]);
    return r.device_lost;
}

/* The CUDA-only part: v emitted from its row (with --no-wait, its wait blanked out), compiled by nvrtc for
 * the device, loaded and launched through the cuda backend table. Returns 1 when the device is unusable. */
static int check_internal(worker *w, const rk_desc *v, result *res) {
    rk_buf src = {0}, log = {0};
    rk_err err = {0};
    rk_codeobj co = {0};
    void *module = NULL;
    rk_device *dev = &w->cuda_dev;
    runner r = {.mem = &w->mem,
                .dev = dev,
                .pdl = v->arch->pdl,
                .late_fn = w->late_fn,
                .why = res->why,
                .why_cap = sizeof res->why};
    if (rk_emit(v, &src, &err) != ROPEKV_OK) {
        snprintf(res->why, sizeof res->why, "emit: %.2000s", err.msg);
        goto out;
    }
    if (g_no_wait) { /* the control: blank out the kernel's wait for the previous grid */
        static const char wait[] = "griddepcontrol.wait;";
        for (char *p = src.p; (p = strstr(p, wait)) != NULL;) memset(p, ' ', sizeof wait - 1);
    }
    int rc = dev->ops->compile(dev, src.p, src.len, v->name, v->arch, &co, &log);
    if (rc != ROPEKV_OK) {
        snprintf(res->why, sizeof res->why, "compile for %s (%s row): %s", dev->target, v->arch->name,
                 log.p ? log.p : "failed");
        goto out;
    }
    rk_buf_free(&log);
    rc = dev->ops->load(dev, &co, v->name, &module, r.fn, &log);
    if (rc != ROPEKV_OK) {
        snprintf(res->why, sizeof res->why, "load: %s", log.p ? log.p : "failed");
        r.device_lost = rc == ROPEKV_ERR_DEVICE;
        goto out;
    }
    if (check_shapes(v, &r, NULL, NULL, res) == 0) res->ok = 1;
out:
    if (module && !r.device_lost) dev->ops->unload(dev, module);
    rk_code_free(&co);
    rk_buf_free(&src);
    rk_buf_free(&log);
    return r.device_lost;
}

/* ---- the worker processes (tools/pool.h) ---------------------------------------------------------- */
static int conf_run(void *ctx, int i, void *result_) {
    (void)ctx;
    result *res = result_;
    worker *w = &g_w;
    const conf_variant *cv = &g_vars[i];
    double t0 = rk_now_ms();
    int lost = 1;
    if (!w->opened) {
        char why[1024];
        if (rk_devmem_open(&w->mem, g_probed_backend, 0, why, sizeof why) != 0) {
            snprintf(res->why, sizeof res->why, "device memory: %s", why);
            goto done;
        }
        w->opened = 1;
    }
    if (!strcmp(g_probed_backend, "cuda") && open_cuda_part(w, cv->d.arch, res->why, sizeof res->why) != 0) goto done;
    lost = cv->internal ? check_internal(w, &cv->d, res) : check_public(w, &cv->d, res);
done:
    res->ms = rk_now_ms() - t0;
    return lost; /* the device is unusable: a fresh process takes the rest */
}

static void conf_worker_end(void *ctx) {
    (void)ctx;
    for (int m = 0; m < N_CTX; m++) ropekv_destroy(g_w.ctx[m]);
    if (g_w.cuda_opened) rk_backend_cuda.close(&g_w.cuda_dev);
}

static void conf_lost(void *ctx, int i, void *result_, int pid, const char *why) {
    (void)ctx, (void)i, (void)pid;
    result *res = result_;
    res->ok = 0;
    snprintf(res->why, sizeof res->why, "%s", why);
}

static void conf_done(void *ctx, int k, int n, int i, const void *result_) {
    (void)ctx, (void)k, (void)n;
    const result *r = result_;
    if (r->ok) printf("pass %s (%d shapes)\n", g_vars[i].d.key, r->shapes);
    else printf("FAIL %s: %s\n", g_vars[i].d.key, r->why);
    fflush(stdout);
}

/* ---- the probe: what the library picks, in a child (CUDA state does not survive fork) ------------- */
typedef struct probe_info {
    int rc; /* 0: found; SKIP_STATUS: no GPU (or not the backend asked for); 1: an error */
    char backend[16];
    char target[96];
    char row[RK_NAME_MAX]; /* the row of specs/archs.lua the runtime builds for */
    char device[256];
    char why[1024];
} probe_info;

/* Why the GPU backends (only: just that one) are not usable: "hip: libamdhip64 not found (...); cuda: ...". */
static void gpu_reasons(const char *only, char *out, size_t cap) {
    static const char *const gpus[] = {"hip", "cuda"};
    size_t at = 0;
    out[0] = '\0';
    for (int i = 0; i < 2 && at < cap; i++) {
        if (only && strcmp(only, gpus[i])) continue;
        rk_devmem m;
        char why[400];
        snprintf(why, sizeof why, "%s: its device memory opens, yet the library did not pick it", gpus[i]);
        rk_devmem_open(&m, gpus[i], 0, why, sizeof why);
        at += (size_t)snprintf(out + at, cap - at, "%s%s", at ? "; " : "", why);
    }
}

static void probe_child(probe_info *pi) {
    ropekv_ctx *c = NULL;
    char gpus[800];
    ropekv_status s = make_ctx(&c, g_backend, CTX_PLAIN);
    if (s == ROPEKV_ERR_BACKEND) {
        gpu_reasons(g_backend, gpus, sizeof gpus);
        pi->rc = SKIP_STATUS;
        snprintf(pi->why, sizeof pi->why, "no %s backend on this machine (%s)", g_backend ? g_backend : "usable",
                 g_backend && !strcmp(g_backend, "host") ? "ROPEKV_LOG=1 says why" : gpus);
        return;
    }
    if (s != ROPEKV_OK) {
        pi->rc = 1;
        snprintf(pi->why, sizeof pi->why, "ropekv_create: %s (%s)", ropekv_status_name(s), ropekv_status_message(s));
        return;
    }
    snprintf(pi->backend, sizeof pi->backend, "%s", ropekv_backend_name(c));
    snprintf(pi->target, sizeof pi->target, "%s", ropekv_target(c));
    if (!g_backend && !strcmp(pi->backend, "host")) {
        gpu_reasons(NULL, gpus, sizeof gpus);
        pi->rc = SKIP_STATUS;
        snprintf(pi->why, sizeof pi->why,
                 "no GPU: the library picked the host backend (%s); --host runs the checks there", gpus);
        ropekv_destroy(c);
        return;
    }
    rk_devmem m;
    int mrc = rk_devmem_open(&m, pi->backend, 0, pi->why, sizeof pi->why);
    if (mrc != 0) {
        pi->rc = 1; /* the library opened this backend: its memory must be there too */
        ropekv_destroy(c);
        return;
    }
    rk_devmem_describe(&m, pi->device, sizeof pi->device);
    /* The row: the kernel of the first built-in variant the context lists says which (ropekv_kernel_info).
     * Its build goes into the run's cache, where the worker that checks it finds it. */
    for (int i = 0; i < g_n_all && !pi->row[0]; i++) {
        const ropekv_variant v = rk_variant_of(&g_all[i]);
        if (ropekv_query(c, &v, NULL, NULL, 0) != ROPEKV_OK) continue;
        ropekv_kernel *k = NULL;
        ropekv_kernel_params kp;
        if (ropekv_kernel_get(c, &v, &k) != ROPEKV_OK || ropekv_kernel_info(k, &kp) != ROPEKV_OK) {
            pi->rc = 1;
            snprintf(pi->why, sizeof pi->why, "building %s on %s: %s", g_all[i].key, pi->target, ropekv_last_error(c));
            ropekv_destroy(c);
            return;
        }
        snprintf(pi->row, sizeof pi->row, "%s", kp.target);
        ropekv_kernel_release(k);
    }
    ropekv_destroy(c);
    pi->rc = 0;
}

static void probe(probe_info *pi) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        probe_child(pi);
        _exit(0);
    }
    int st = 0;
    if (pid < 0) {
        pi->rc = 1;
        snprintf(pi->why, sizeof pi->why, "fork: %s", strerror(errno));
        return;
    }
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        pi->rc = 1;
        snprintf(pi->why, sizeof pi->why, "the probe process died (status 0x%x) while opening the device", st);
    }
}

static void usage(FILE *f) {
    fprintf(f, "usage: gpu_conformance [--quick] [--all] [--filter TEXT] [--jobs N] [--seed N] [--list] "
               "[--backend hip|cuda|host] [--host] [--no-wait]\n");
}

static int run(int quick, int list, int jobs, const char *filter);

int main(int argc, char **argv) {
    const char *filter = NULL;
    int quick = 0, list = 0, jobs = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--host")) g_backend = "host";
        else if (!strcmp(argv[i], "--backend") && i + 1 < argc) g_backend = argv[++i];
        else if (!strcmp(argv[i], "--no-wait")) g_no_wait = 1;
        else if (!strcmp(argv[i], "--list")) list = 1;
        else if (!strcmp(argv[i], "--all")) g_every = 1;
        else if (!strcmp(argv[i], "--filter") && i + 1 < argc) filter = argv[++i];
        else if (!strcmp(argv[i], "--jobs") && i + 1 < argc) jobs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) g_seed = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (g_backend && strcmp(g_backend, "hip") && strcmp(g_backend, "cuda") && strcmp(g_backend, "host")) {
        fprintf(stderr, "gpu_conformance: --backend %s: expected hip, cuda or host\n", g_backend);
        return 2;
    }
    char why[1024];
    if (make_cache_dir(why, sizeof why) != 0) {
        fprintf(stderr, "gpu_conformance: %s\n", why);
        return 1;
    }
    int rc = run(quick, list, jobs, filter);
    rk_test_remove_tree(g_cache_dir);
    return rc;
}

static int run(int quick, int list, int jobs, const char *filter) {
    const double t0 = rk_now_ms();
    char why[1024];
    if (load_catalog(why, sizeof why) != 0) {
        fprintf(stderr, "gpu_conformance: %s\n", why);
        return 1;
    }
    probe_info *pi = mmap(NULL, sizeof *pi, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (pi == MAP_FAILED) {
        fprintf(stderr, "gpu_conformance: mmap: %s\n", strerror(errno));
        return 1;
    }
    probe(pi);
    if (pi->rc == SKIP_STATUS) {
        printf("gpu_conformance: SKIPPED: %s\n", pi->why);
        return SKIP_STATUS;
    }
    if (pi->rc != 0) {
        printf("gpu_conformance: cannot open the device: %s\n", pi->why);
        printf("0 passed, 1 failed\n");
        return 1;
    }
    const int cuda = !strcmp(pi->backend, "cuda");
    if (g_no_wait && !cuda) {
        fprintf(stderr,
                "gpu_conformance: --no-wait: the programmatic dependent launch control needs the cuda "
                "backend (this is %s)\n",
                pi->backend);
        return 2;
    }
    snprintf(g_probed_backend, sizeof g_probed_backend, "%s", pi->backend);
    printf("device: %s; backend %s, target %s (row %s)\n", pi->device, pi->backend, pi->target,
           pi->row[0] ? pi->row : "none: no built-in spec lists it");
    make_shapes(quick, cuda);
    if (collect_variants(pi->row, pi->backend, pi->target, filter, why, sizeof why) != 0) {
        fprintf(stderr, "gpu_conformance: %s\n", why);
        return 1;
    }
    const int n = g_n_vars;
    printf("variants: %d distinct kernels: %d built-in variants of the %s row through the public API", n, g_n_public,
           pi->row);
    if (cuda)
        printf(", %d through the cuda backend table (%s, NVIDIA rows up to %s with %d variant shapes retargeted "
               "to them)",
               n - g_n_public, g_no_wait ? "--no-wait: all of them" : "the other rows' built-in variants", pi->target,
               g_n_retargeted);
    printf("%s%s%s\n", filter ? "; filter \"" : "", filter ? filter : "", filter ? "\"" : "");
    printf("shapes (T x H; pad 0/8 alternating, max_pos %d, every 3rd slot negative, NaN/inf inputs, k_scale 0.37, "
           "q_scale 0.37 / 1 / 1/448 in turn):",
           MAX_POS);
    for (int i = 0; i < g_n_shapes; i++) {
        printf(" %lldx%lld%s", (long long)g_shapes[i].tokens, (long long)g_shapes[i].heads,
               g_shapes[i].wide    ? "(i64 entry)"
               : g_shapes[i].reads ? "(reads)"
                                   : "");
        if (g_shapes[i].runs > 1) printf("(x%d chained%s)", g_shapes[i].runs, g_shapes[i].prefetch ? ", prefetch" : "");
        if (g_shapes[i].late) printf("(late inputs%s)", g_shapes[i].prefetch ? ", prefetch" : "");
        if (g_shapes[i].kv_tokens || g_shapes[i].min_slot)
            printf("(kv_tokens %lld, min_slot %lld)", (long long)g_shapes[i].kv_tokens,
                   (long long)g_shapes[i].min_slot);
    }
    printf("\n");
    if (list) {
        for (int i = 0; i < n; i++)
            printf("%s  %s%s\n", g_vars[i].d.key, g_vars[i].d.name, g_vars[i].internal ? "  (cuda backend table)" : "");
        return 0;
    }
    if (n == 0) {
        printf("0 passed, 0 failed\n");
        return 1;
    }

    if (jobs < 1) {
        jobs = (int)sysconf(_SC_NPROCESSORS_ONLN);
        if (jobs > MAX_DEFAULT_JOBS) jobs = MAX_DEFAULT_JOBS;
    }
    if (jobs < 1) jobs = 1;
    if (jobs > n) jobs = n;
    printf("jobs: %d\n", jobs);
    fflush(stdout);

    result *res = calloc((size_t)n, sizeof *res);
    if (!res) {
        fprintf(stderr, "gpu_conformance: out of memory\n");
        return 1;
    }
    rk_pool pool = {.n = n,
                    .result_size = sizeof *res,
                    .jobs = jobs,
                    .worker = "worker",
                    .task = "checking this",
                    .run = conf_run,
                    .worker_end = conf_worker_end,
                    .lost = conf_lost,
                    .done = conf_done};
    if (rk_pool_run(&pool, res) != 0) {
        fprintf(stderr, "gpu_conformance: fork: %s\n", strerror(errno));
        free(res);
        return 1;
    }
    int passed = 0, failed = 0;
    double cpu_ms = 0;
    for (int i = 0; i < n; i++) {
        passed += res[i].ok != 0;
        failed += res[i].ok == 0;
        cpu_ms += res[i].ms;
    }
    printf("total time: %.1f s (%.1f s of worker time over %d jobs)\n", (rk_now_ms() - t0) / 1e3, cpu_ms / 1e3, jobs);
    printf("%d passed, %d failed\n", passed, failed);
    free(res);
    munmap(pi, sizeof *pi);
    return failed == 0 && passed > 0 ? 0 : 1;
}
