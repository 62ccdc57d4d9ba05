/* GPU conformance: every NVIDIA-compilable variant run on the device against the CPU reference.
 *
 * Variants: every variant of the built-in specs on an NVIDIA row (sm_80, sm_90), plus every variant
 * shape of every spec retargeted to each NVIDIA row (so specs that list only sm_90 also run the
 * sm_80 row's software fp8 path), one per kernel name. Each is emitted from its row, compiled by
 * nvrtc for the device's own architecture (an sm_80 CUBIN does not load on sm_90), loaded and
 * launched through the cuda backend table, and checked with rk_check over a set of shapes: padded
 * (non-contiguous) token and head strides on every other shape, negative slots, positions at 0,
 * max_pos - 1 and out of range, NaN/inf inputs, k_scale != 1, an fp8 query's q_scale going round 0.37, 1 and
 * 1/448 from shape to shape (1/448 saturates a mul_recip or div query). Every buffer is surrounded by guard
 * bytes on the device, so a write outside any tensor is caught as well.
 *
 * Plain C (no test framework): it must build and run where only the CUDA driver and nvrtc exist.
 * Without a usable driver or device it prints "gpu_conformance: SKIPPED: <reason>" and exits 77.
 *
 * Kernels of rows with `pdl` are launched as the runtime launches them (programmatic dependent
 * launch), and three shapes chain launches back to back on the same buffers ("x32 chained": in place,
 * each launch rotates the previous one's q_pe), so a kernel that touched memory before its
 * griddepcontrol.wait would read stale rows. --no-wait removes that wait from the source: a control
 * run that shows the chained shapes can fail.
 *
 *   gpu_conformance [--quick] [--filter TEXT] [--jobs N] [--seed N] [--list] [--host] [--no-wait]
 *     --quick    only T in {1, 17} x H in {1, 16} (smoke run)
 *     --filter   only variants whose key contains TEXT
 *     --jobs     worker processes (default: online CPUs); each opens its own CUDA context
 *     --list     print the variants and shapes, run nothing
 *     --host     the same flow through the host backend (host C++ compiler, kernel run on the CPU,
 *                "device" buffers in host memory with guards): exercises everything but the GPU
 *
 * Output: one line per variant, "pass <key> (<n> shapes)" or "FAIL <key>: <why> [shape]", then the
 * total time and a last line "N passed, M failed". Exit status 0 iff M == 0 and N > 0. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "cuda_api.h"
#include "build.h"
#include "rk.h"
#include "check.h"
#include "pool.h"

#define SKIP_STATUS 77
#define GUARD 256 /* guard bytes before and after every device buffer (keeps 256-byte alignment) */
#define GUARD_BYTE 0xcd
#define MAX_POS 4096 /* rows of the cos/sin tables */
#define WHY_CAP 2048

/* ---- shapes -------------------------------------------------------------------------------------- */
typedef struct shape {
    int64_t tokens, heads;
    int wide;     /* 1: run the 64-bit entry (fn[1]) even though the 32-bit one would do */
    int runs;     /* launches back to back on the same buffers (0: one) */
    int prefetch; /* rows with pdl: read the static inputs before the wait (ropekv_options.pdl_prefetch) */
    int late;     /* a kernel before it in the stream writes its buffers late (see late_copy) */
    int64_t kv_tokens, min_slot; /* padding (rk_shape): KV rows for fewer or more tokens, reserved slots */
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

static void make_shapes(int quick) {
    const int64_t *ts = quick ? QUICK_T : FULL_T, *hs = quick ? QUICK_H : FULL_H;
    int nt = quick ? 2 : (int)(sizeof FULL_T / sizeof FULL_T[0]);
    int nh = quick ? 2 : (int)(sizeof FULL_H / sizeof FULL_H[0]);
    g_n_shapes = 0;
    for (int h = 0; h < nh; h++)
        for (int t = 0; t < nt; t++)
            if (ts[t] * hs[h] <= MAX_ROWS) g_shapes[g_n_shapes++] = (shape){ts[t], hs[h], 0, 0, 0, 0, 0, 0};
    /* smallest first, so a failure is reported on the smallest shape that shows it */
    for (int i = 1; i < g_n_shapes; i++)
        for (int j = i;
             j > 0 && g_shapes[j].tokens * g_shapes[j].heads < g_shapes[j - 1].tokens * g_shapes[j - 1].heads; j--) {
            shape x = g_shapes[j];
            g_shapes[j] = g_shapes[j - 1];
            g_shapes[j - 1] = x;
        }
    g_shapes[g_n_shapes++] = quick ? (shape){17, 16, 1, 0, 0, 0, 0, 0} : (shape){1000, 16, 1, 0, 0, 0, 0, 0};
    /* padding: fewer KV rows than query rows (a short slot list), more (padded queries), none, no
     * query rows; reserved slots (min_slot) that must stay untouched */
    g_shapes[g_n_shapes++] = (shape){17, 16, 0, 0, 0, 0, 5, 1};
    g_shapes[g_n_shapes++] = (shape){3, 16, 0, 0, 0, 0, 17, 2};
    if (!quick) {
        g_shapes[g_n_shapes++] = (shape){1000, 128, 0, 0, 0, 0, 600, 1};
        g_shapes[g_n_shapes++] = (shape){127, 16, 0, 0, 0, 0, 1000, 3};
        g_shapes[g_n_shapes++] = (shape){127, 16, 0, 0, 0, 0, -1, 0};
        g_shapes[g_n_shapes++] = (shape){0, 16, 0, 0, 0, 0, 127, 1};
        g_shapes[g_n_shapes++] = (shape){1000, 16, 1, 0, 0, 0, 300, 1};
    }
    /* chained launches: one wave of blocks (16 x 128) and several (1000 x 16) */
    /* late inputs: the kernel before it lets it launch at once, then writes its buffers ~0.1 ms later */
    if (quick) {
        g_shapes[g_n_shapes++] = (shape){17, 16, 0, 4, 1, 0, 0, 0};
        g_shapes[g_n_shapes++] = (shape){17, 16, 0, 0, 0, 1, 0, 0};
    } else {
        g_shapes[g_n_shapes++] = (shape){16, 128, 0, 32, 0, 0, 0, 0};
        g_shapes[g_n_shapes++] = (shape){16, 128, 0, 32, 1, 0, 0, 0};
        g_shapes[g_n_shapes++] = (shape){1000, 16, 0, 8, 1, 0, 0, 0};
        g_shapes[g_n_shapes++] = (shape){1, 16, 0, 0, 0, 1, 0, 0};
        g_shapes[g_n_shapes++] = (shape){16, 16, 0, 0, 1, 1, 0, 0};
        g_shapes[g_n_shapes++] = (shape){1000, 16, 0, 0, 0, 1, 0, 0};
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
                      .min_slot = g_shapes[i].min_slot};
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
    snprintf(out, cap, "[T=%lld H=%lld pad=%lld %s%s%s]", (long long)s.tokens, (long long)s.heads, (long long)s.pad,
             wide ? "i64" : "i32", chained, padding);
}

/* ---- the CUDA driver calls for memory: the runtime's driver table (the backend ops have none) ---- */
static const rk_cuda_api *cu; /* the runtime's driver table, with the programs' entry points */
static CUdevice cu_dev;

/* "CUDA_ERROR_ILLEGAL_ADDRESS (700): an illegal memory access was encountered" */
static void cu_explain(CUresult r, char *out, size_t cap) {
    const char *name = NULL, *text = NULL;
    if (cu) cu->cuGetErrorName(r, &name);
    if (cu) cu->cuGetErrorString(r, &text);
    snprintf(out, cap, "%s (%d): %s", name ? name : "CUDA error", r, text ? text : "no description");
}

/* Device 0's primary context (the one the backend uses), current on this thread. */
static int cu_attach(char *why, size_t cap) {
    char e[256];
    if (!cu && !(cu = rk_cuda_driver(RK_CUDA_ALL, why, cap))) return -1;
    CUcontext ctx;
    CUresult r = cu->cuDeviceGet(&cu_dev, 0);
    if (r == 0) r = cu->cuDevicePrimaryCtxRetain(&ctx, cu_dev);
    if (r == 0) r = cu->cuCtxSetCurrent(ctx);
    if (r != 0) {
        cu_explain(r, e, sizeof e);
        snprintf(why, cap, "attaching to device 0: %s", e);
        return -1;
    }
    return 0;
}

/* ---- device memory: CUDA, or host memory standing in for it (--host) ------------------------------ */
typedef struct mem_ops {
    int (*alloc)(uint64_t *p, size_t n, char *why, size_t cap);
    void (*release)(uint64_t p);
    int (*htod)(uint64_t dst, const void *src, size_t n, char *why, size_t cap);
    int (*dtoh)(void *dst, uint64_t src, size_t n, char *why, size_t cap);
    int (*sync)(char *why, size_t cap);
} mem_ops;

static int cu_check(CUresult r, const char *what, char *why, size_t cap) {
    if (r == 0) return 0;
    char e[256];
    cu_explain(r, e, sizeof e);
    snprintf(why, cap, "%s: %s", what, e);
    return -1;
}

static int cuda_alloc(uint64_t *p, size_t n, char *why, size_t cap) {
    CUdeviceptr d = 0;
    char what[64];
    snprintf(what, sizeof what, "cuMemAlloc(%zu bytes)", n);
    if (cu_check(cu->cuMemAlloc(&d, n), what, why, cap)) return -1;
    *p = d;
    return 0;
}
static void cuda_release(uint64_t p) { cu->cuMemFree((CUdeviceptr)p); }
static int cuda_htod(uint64_t dst, const void *src, size_t n, char *why, size_t cap) {
    char what[64];
    snprintf(what, sizeof what, "cuMemcpyHtoD(%zu bytes)", n);
    return cu_check(cu->cuMemcpyHtoD((CUdeviceptr)dst, src, n), what, why, cap);
}
static int cuda_dtoh(void *dst, uint64_t src, size_t n, char *why, size_t cap) {
    char what[64];
    snprintf(what, sizeof what, "cuMemcpyDtoH(%zu bytes)", n);
    return cu_check(cu->cuMemcpyDtoH(dst, (CUdeviceptr)src, n), what, why, cap);
}
static int cuda_sync(char *why, size_t cap) {
    return cu_check(cu->cuCtxSynchronize(), "cuCtxSynchronize after the launch", why, cap);
}
static const mem_ops CUDA_MEM = {cuda_alloc, cuda_release, cuda_htod, cuda_dtoh, cuda_sync};

static int host_alloc(uint64_t *p, size_t n, char *why, size_t cap) {
    void *q = NULL;
    if (posix_memalign(&q, GUARD, n ? n : 1) != 0) {
        snprintf(why, cap, "out of host memory (%zu bytes)", n);
        return -1;
    }
    *p = (uint64_t)(uintptr_t)q;
    return 0;
}
static void host_release(uint64_t p) { free((void *)(uintptr_t)p); }
static int host_htod(uint64_t dst, const void *src, size_t n, char *why, size_t cap) {
    (void)why, (void)cap;
    memcpy((void *)(uintptr_t)dst, src, n);
    return 0;
}
static int host_dtoh(void *dst, uint64_t src, size_t n, char *why, size_t cap) {
    (void)why, (void)cap;
    memcpy(dst, (const void *)(uintptr_t)src, n);
    return 0;
}
static int host_sync(char *why, size_t cap) {
    (void)why, (void)cap;
    return 0;
}
static const mem_ops HOST_MEM = {host_alloc, host_release, host_htod, host_dtoh, host_sync};

/* ---- one run of a kernel: the rk_check callback --------------------------------------------------- */
typedef struct runner {
    rk_device *dev;
    const mem_ops *mem;
    void *fn[2];
    int force_wide;  /* the shape asks for the 64-bit entry */
    int runs;        /* launches back to back (the shape's runs, at least 1) */
    int prefetch;    /* the shape's prefetch */
    int pdl;         /* launch as the runtime does for rows with `pdl` */
    int late;        /* the shape's late */
    void *late_fn;   /* late_copy, loaded (CUDA only) */
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

/* The "late" shapes: a kernel launched just before the one under test copies the test's buffers into
 * place from staging copies, but only after spinning ~0.1 ms, and lets the next grid launch at once
 * (griddepcontrol.launch_dependents). With programmatic dependent launch the kernel under test starts
 * while this one spins: only its griddepcontrol.wait keeps it from reading stale inputs, or writing
 * outputs that late_copy then overwrites with their initial contents. (`--no-wait` shows it failing.) */
#define LATE_MAX 11 /* rows of late_copy's table (the 11 in LATE_SRC): one per rk_check buffer */
_Static_assert(RK_CHECK_NBUF <= LATE_MAX, "late_copy's table holds every rk_check buffer");
static const char LATE_SRC[] =
    "struct late { unsigned long long dst[11], src[11], n[11]; long long count, spin; };\n"
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

static int run_device(void *ctx, const rk_desc *v, const rk_args *a) {
    runner *r = ctx;
    rk_check_buf b[RK_CHECK_NBUF];
    uint64_t dev[RK_CHECK_NBUF] = {0};
    unsigned char *guard = NULL, *back = NULL;
    rk_buf log = {0};
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
        if (r->mem->alloc(&dev[i], n + 2 * GUARD, why, cap) || r->mem->htod(dev[i], guard, GUARD, why, cap) ||
            (n && r->mem->htod(dev[i] + GUARD, b[i].host, n, why, cap)) ||
            r->mem->htod(dev[i] + GUARD + n, guard, GUARD, why, cap)) {
            char what[64];
            snprintf(what, sizeof what, " (%s)", b[i].name);
            strncat(why, what, cap - strlen(why) - 1);
            r->device_lost = 1;
            goto out;
        }
    }
    if (r->late && r->late_fn) {
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
            if (r->mem->alloc(&staging[i], n, why, cap) || r->mem->htod(staging[i], b[i].host, n, why, cap) ||
                r->mem->htod(dev[i] + GUARD, stale, n, why, cap)) {
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
        if (cu_check(cu->cuLaunchKernel(r->late_fn, 528, 1, 1, 256, 1, 1, 0, NULL, params, NULL), "launching late_copy",
                     why, cap)) {
            r->device_lost = 1;
            goto out;
        }
    }
    rk_args d = *a;
    uint64_t p[15] = {
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
    };
    for (int i = 0; i < 15; i++)
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

    /* launch geometry as the runtime computes it */
    const int block = v->arch->block;
    int64_t total, blocks;
    rk_launch_plan(v, &d, &total, &blocks);
    d.prefetch = v->arch->pdl && r->prefetch;
    /* the 64-bit entry is needed once a chunk index or an element offset can pass 2^31 - 1 (bytes
     * bound elements from above) */
    int64_t reach = total + (int64_t)block * v->arch->chunks;
    for (int i = 0; i < RK_CHECK_NBUF; i++)
        if (b[i].bytes > reach) reach = b[i].bytes;
    r->used_wide = r->force_wide || reach >= INT32_MAX;
    if (blocks > INT32_MAX) {
        snprintf(why, cap, "%lld blocks: too many for one launch", (long long)blocks);
        rc = ROPEKV_ERR_LAUNCH;
        goto out;
    }
    if (total > 0) {
        rc = ROPEKV_OK;
        for (int i = 0; i < r->runs && rc == ROPEKV_OK; i++)
            rc = r->dev->ops->launch(r->dev, r->fn[r->used_wide], &d, blocks, block, r->pdl, NULL, &log);
        if (rc != ROPEKV_OK) {
            snprintf(why, cap, "launch (%lld blocks of %d): %s", (long long)blocks, block, log.p ? log.p : "failed");
            r->device_lost = 1;
            goto out;
        }
        rc = ROPEKV_ERR_DEVICE;
        if (r->mem->sync(why, cap)) {
            r->device_lost = 1;
            goto out;
        }
    }
    /* outputs back; every guard checked */
    for (int i = 0; i < RK_CHECK_NBUF; i++) {
        size_t n = (size_t)b[i].bytes;
        if (!b[i].host) continue;
        if (b[i].compared && n && r->mem->dtoh(b[i].host, dev[i] + GUARD, n, why, cap)) {
            r->device_lost = 1;
            goto out;
        }
        for (int side = 0; side < 2; side++) {
            if (r->mem->dtoh(back, dev[i] + (side ? GUARD + n : 0), GUARD, why, cap)) {
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
        if (dev[i]) r->mem->release(dev[i]);
        if (staging[i]) r->mem->release(staging[i]);
    }
    free(guard);
    free(back);
    rk_buf_free(&log);
    return rc;
}

/* ---- variants ------------------------------------------------------------------------------------- */
static rk_catalog g_cat;
static rk_desc *g_vars;
static int g_n_vars, g_n_builtin, g_n_retargeted;

static int add_variant(const rk_desc *v, const char *filter, int *cap) {
    if (filter && !strstr(v->key, filter)) return 0;
    for (int i = 0; i < g_n_vars; i++)
        if (strcmp(g_vars[i].name, v->name) == 0) return 0;
    if (g_n_vars == *cap) {
        int ncap = *cap ? *cap * 2 : 256;
        rk_desc *n = realloc(g_vars, sizeof *n * (size_t)ncap);
        if (!n) return -1;
        g_vars = n;
        *cap = ncap;
    }
    g_vars[g_n_vars++] = *v;
    return 0;
}

static int collect_variants(const char *filter, char *why, size_t cap) {
    rk_err err = {0};
    if (rk_catalog_load_embedded(&g_cat, &err) != ROPEKV_OK) {
        snprintf(why, cap, "loading the built-in specs: %.900s", err.msg);
        return -1;
    }
    int vcap = 0;
    rk_desc *tmp = malloc(sizeof *tmp * RK_MAX_VARIANTS_PER_SPEC * RK_MAX_SPECS);
    if (!tmp) {
        snprintf(why, cap, "out of memory");
        return -1;
    }
    for (int s = 0; s < g_cat.n_specs; s++) {
        int n = rk_variants(&g_cat.specs[s], &g_cat.archs, tmp, RK_MAX_VARIANTS_PER_SPEC, &err);
        if (n < 0) {
            snprintf(why, cap, "variants of %s: %.900s", g_cat.specs[s].name, err.msg);
            free(tmp);
            return -1;
        }
        for (int i = 0; i < n; i++)
            if (tmp[i].arch->vendor == RK_VENDOR_NVIDIA) {
                g_n_builtin++;
                if (add_variant(&tmp[i], filter, &vcap)) goto oom;
            }
    }
    for (int a = 0; a < g_cat.archs.n; a++) {
        if (g_cat.archs.a[a].vendor != RK_VENDOR_NVIDIA) continue;
        int n = rk_build_retarget(&g_cat, &g_cat.archs.a[a], tmp, RK_MAX_VARIANTS_PER_SPEC * RK_MAX_SPECS);
        if (n < 0) goto oom;
        g_n_retargeted += n;
        for (int i = 0; i < n; i++)
            if (add_variant(&tmp[i], filter, &vcap)) goto oom;
    }
    free(tmp);
    return 0;
oom:
    free(tmp);
    snprintf(why, cap, "out of memory");
    return -1;
}

/* ---- results shared between the workers and the parent --------------------------------------------- */
typedef struct result {
    int ok;
    int shapes; /* shapes that passed */
    double ms;
    char why[WHY_CAP];
} result;

/* What the probe found. */
typedef struct probe_info {
    int rc;
    char device[256];
    char target[96];
    char compiler[192];
    char why[1024];
} probe_info;

static int g_host;    /* --host */
static int g_no_wait; /* --no-wait */
static uint64_t g_seed = 1;

/* Opens the backend for this process: ROPEKV_OK, ROPEKV_ERR_BACKEND (skip) or another error, why set. */
static int open_backend(rk_device *dev, char *why, size_t cap) {
    rk_buf log = {0};
    memset(dev, 0, sizeof *dev);
    const rk_backend_ops *ops = g_host ? &rk_backend_host : &rk_backend_cuda;
    int rc = ops->open(dev, 0, NULL, &log);
    if (rc == ROPEKV_OK) dev->ops = ops;
    else snprintf(why, cap, "%s", log.p ? log.p : "the backend did not open");
    rk_buf_free(&log);
    if (rc == ROPEKV_OK && !g_host && cu_attach(why, cap) != 0) {
        ops->close(dev);
        rc = ROPEKV_ERR_DEVICE;
    }
    return rc;
}

/* Compiles, loads and checks one variant over every shape. Returns 1 when the device is unusable. */
static int check_variant(rk_device *dev, const rk_desc *v, result *res) {
    const mem_ops *mem = g_host ? &HOST_MEM : &CUDA_MEM;
    rk_buf src = {0}, log = {0};
    rk_err err = {0};
    rk_codeobj co = {0};
    void *module = NULL;
    runner r = {.dev = dev, .mem = mem, .pdl = v->arch->pdl, .why = res->why, .why_cap = sizeof res->why};
    res->ok = 0;
    res->shapes = 0;
    res->why[0] = '\0';
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
    static void *late_fn; /* this process's late_copy (none on the host backend) */
    if (!g_host && !late_fn) {
        rk_codeobj lco = {0};
        void *lmod = NULL, *lfn[2] = {NULL, NULL};
        rk_buf_free(&log);
        rc = dev->ops->compile(dev, LATE_SRC, sizeof LATE_SRC - 1, "late_copy", v->arch, &lco, &log);
        if (rc == ROPEKV_OK) rc = dev->ops->load(dev, &lco, "late_copy", &lmod, lfn, &log);
        rk_code_free(&lco);
        if (rc != ROPEKV_OK || !lfn[0]) {
            snprintf(res->why, sizeof res->why, "late_copy: %s", log.p ? log.p : "failed");
            r.device_lost = rc == ROPEKV_ERR_DEVICE;
            goto out;
        }
        late_fn = lfn[0];
    }
    r.late_fn = late_fn;
    for (int i = 0; i < g_n_shapes; i++) {
        rk_shape sh = rk_shape_of(i);
        r.force_wide = g_shapes[i].wide;
        r.runs = sh.runs > 1 ? sh.runs : 1;
        r.prefetch = g_shapes[i].prefetch;
        r.late = g_shapes[i].late;
        r.used_wide = 0;
        res->why[0] = '\0';
        rc = rk_check(v, &sh, g_seed * 1000003u + (uint64_t)i, run_device, &r, res->why, sizeof res->why);
        if (rc != 0) {
            char s[96];
            shape_text(i, r.used_wide, s, sizeof s);
            size_t n = strlen(res->why);
            snprintf(res->why + n, sizeof res->why - n, " %s", s);
            goto out;
        }
        res->shapes++;
    }
    res->ok = 1;
out:
    if (module && !r.device_lost) dev->ops->unload(dev, module);
    rk_code_free(&co);
    rk_buf_free(&src);
    rk_buf_free(&log);
    return r.device_lost;
}

/* ---- the worker processes (tools/pool.h) ---------------------------------------------------------- */
static rk_device g_dev; /* this worker's device, opened for its first variant */
static int g_opened;

static int conf_run(void *ctx, int i, void *result_) {
    (void)ctx;
    result *res = result_;
    double t0 = rk_now_ms();
    int lost = 0;
    if (!g_opened) {
        char why[1024];
        if (open_backend(&g_dev, why, sizeof why) != ROPEKV_OK) {
            snprintf(res->why, sizeof res->why, "cannot open the device: %s", why);
            lost = 1;
        } else {
            g_opened = 1;
        }
    }
    if (g_opened) lost = check_variant(&g_dev, &g_vars[i], res);
    res->ms = rk_now_ms() - t0;
    return lost; /* the context is unusable: a fresh process takes the rest */
}

static void conf_worker_end(void *ctx) {
    (void)ctx;
    if (g_opened) g_dev.ops->close(&g_dev);
}

static void conf_lost(void *ctx, int i, void *result_, int pid, const char *why) {
    (void)ctx, (void)i, (void)pid;
    result *res = result_;
    res->ok = 0;
    snprintf(res->why, sizeof res->why, "%s", why);
}

static void print_result(const rk_desc *v, const result *r) {
    if (r->ok) printf("pass %s (%d shapes)\n", v->key, r->shapes);
    else printf("FAIL %s: %s\n", v->key, r->why);
    fflush(stdout);
}

static void conf_done(void *ctx, int k, int n, int i, const void *result_) {
    (void)ctx, (void)k, (void)n;
    print_result(&g_vars[i], result_);
}

/* Opens the device in a child process (CUDA state does not survive fork) and reports what it found. */
static void probe(probe_info *sh) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        rk_device dev;
        sh->rc = open_backend(&dev, sh->why, sizeof sh->why);
        if (sh->rc == ROPEKV_OK) {
            snprintf(sh->target, sizeof sh->target, "%s", dev.target);
            snprintf(sh->compiler, sizeof sh->compiler, "%s", dev.compiler_id);
            if (g_host) {
                snprintf(sh->device, sizeof sh->device, "the CPU (host backend)");
            } else {
                char name[200] = "";
                int drv = 0;
                size_t mem = 0;
                cu->cuDeviceGetName(name, (int)sizeof name, cu_dev);
                cu->cuDriverGetVersion(&drv);
                cu->cuDeviceTotalMem(&mem, cu_dev);
                snprintf(sh->device, sizeof sh->device, "%s, %.0f GiB, driver API %d.%d", name,
                         mem / (1024.0 * 1024 * 1024), drv / 1000, drv % 1000 / 10);
            }
            dev.ops->close(&dev);
        }
        _exit(0);
    }
    int st = 0;
    if (pid < 0) {
        sh->rc = ROPEKV_ERR_IO;
        snprintf(sh->why, sizeof sh->why, "fork: %s", strerror(errno));
        return;
    }
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        sh->rc = ROPEKV_ERR_DEVICE;
        snprintf(sh->why, sizeof sh->why, "the probe process died (status 0x%x) while opening the device", st);
    }
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: gpu_conformance [--quick] [--filter TEXT] [--jobs N] [--seed N] [--list] [--host] [--no-wait]\n");
}

int main(int argc, char **argv) {
    const char *filter = NULL;
    int quick = 0, list = 0, jobs = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--host")) g_host = 1;
        else if (!strcmp(argv[i], "--no-wait")) g_no_wait = 1;
        else if (!strcmp(argv[i], "--list")) list = 1;
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
    const double t0 = rk_now_ms();
    char why[1024];
    make_shapes(quick);
    if (collect_variants(filter, why, sizeof why) != 0) {
        fprintf(stderr, "gpu_conformance: %s\n", why);
        return 1;
    }
    const int n = g_n_vars;

    probe_info *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) {
        fprintf(stderr, "gpu_conformance: mmap: %s\n", strerror(errno));
        return 1;
    }
    if (!list) {
        probe(sh);
        if (sh->rc == ROPEKV_ERR_BACKEND) {
            printf("gpu_conformance: SKIPPED: %s\n", sh->why);
            return SKIP_STATUS;
        }
        if (sh->rc != ROPEKV_OK) {
            printf("gpu_conformance: cannot open the device: %s\n", sh->why);
            printf("0 passed, 1 failed\n");
            return 1;
        }
        printf("device: %s; target %s; compiler %s\n", sh->device, sh->target, sh->compiler);
    }

    char rows[128] = "";
    for (int a = 0; a < g_cat.archs.n; a++)
        if (g_cat.archs.a[a].vendor == RK_VENDOR_NVIDIA)
            snprintf(rows + strlen(rows), sizeof rows - strlen(rows), "%s%s", rows[0] ? "/" : "",
                     g_cat.archs.a[a].name);
    printf("variants: %d distinct kernels (from %d built-in variants on %s rows and %d variant shapes retargeted to "
           "them%s%s%s)\n",
           n, g_n_builtin, rows, g_n_retargeted, filter ? "; filter \"" : "", filter ? filter : "", filter ? "\"" : "");
    printf("shapes (T x H; pad 0/8 alternating, max_pos %d, every 3rd slot negative, NaN/inf inputs, k_scale 0.37, "
           "q_scale 0.37 / 1 / 1/448 in turn):",
           MAX_POS);
    for (int i = 0; i < g_n_shapes; i++) {
        printf(" %lldx%lld%s", (long long)g_shapes[i].tokens, (long long)g_shapes[i].heads,
               g_shapes[i].wide ? "(i64 entry)" : "");
        if (g_shapes[i].runs > 1) printf("(x%d chained%s)", g_shapes[i].runs, g_shapes[i].prefetch ? ", prefetch" : "");
        if (g_shapes[i].kv_tokens || g_shapes[i].min_slot)
            printf("(kv_tokens %lld, min_slot %lld)", (long long)g_shapes[i].kv_tokens,
                   (long long)g_shapes[i].min_slot);
    }
    printf("\n");
    if (list) {
        for (int i = 0; i < n; i++) printf("%s  %s\n", g_vars[i].key, g_vars[i].name);
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
        return 1;
    }
    int passed = 0, failed = 0;
    for (int i = 0; i < n; i++) {
        passed += res[i].ok != 0;
        failed += res[i].ok == 0;
    }
    double cpu_ms = 0;
    for (int i = 0; i < n; i++) cpu_ms += res[i].ms;
    printf("total time: %.1f s (%.1f s of worker time over %d jobs)\n", (rk_now_ms() - t0) / 1e3, cpu_ms / 1e3, jobs);
    printf("%d passed, %d failed\n", passed, failed);
    free(res);
    munmap(sh, sizeof *sh);
    return failed == 0 && passed > 0 ? 0 : 1;
}
