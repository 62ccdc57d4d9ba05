/* Kernel timing for tuning the arch table's launch knobs on an NVIDIA GPU.
 *
 *   bench_kernel [--spec NAME] [--block 128,256,...] [--chunks 1,2,4] [--chunks-from N] [--nt 0,1] [--pdl 0,1,2]
 *                [--kv bf16,fp8_e4m3,<a record of the spec>] [--q absorbed,zero_copy,inplace,none] [--qdtype bf16,fp8_e4m3]
 *                [--norm none,rms,rms_out] [--op write,read] [--layout flat|paged] [--shapes 1x16,128x16,...]
 *                [--entries 32,64] [--list]
 *
 * The variants: with none of --kv, --q, --qdtype, --norm and --layout, the covering set's variants of the spec
 * (tools/cover.h) retargeted to the sm_90 row, as gpu_conformance retargets them (every KV dtype, q form, query
 * dtype, index width, layout, op and norm the spec has, each value and pair of values at least once); with any of
 * them, the product of those lists (the others at their defaults: bf16,fp8_e4m3, absorbed, bf16, none, write, flat)
 * with 64-bit indices (--op read: one read-back variant a KV dtype or record). --chunks sets the row's chunks and
 * read_chunks (default: the row's), --chunks-from its chunks_from and read_chunks_from. --list prints the variants'
 * keys and their count, and exits (no GPU needed).
 *
 * For each (knobs, variant, shape) it renders the variant with the sm row's values replaced by the knobs,
 * compiles it for the device through the cuda backend, captures 50 launches in a CUDA graph, replays
 * it 5 times and prints the median per-call time (paged: blocks of 16 rows), next to the floors (an empty kernel and a 16-byte
 * round trip) and the copy-bandwidth limit measured in the same run; for the rope-only q forms (zero_copy, inplace)
 * also "% of pattern", against a copy kernel touching the same parts of the query rows. Outputs are not checked here:
 * gpu_conformance checks every variant bit for bit. --pdl: 0 plain launches; 1 programmatic dependent
 * launch, the next grid released as soon as this one starts; 2 the same, released when blocks exit;
 * 3 and 4: 1 and 2 with the static inputs read before the wait (ropekv_options.pdl_prefetch). --entries: the
 * kernel's 32-bit-index entry (32, the default), its 64-bit one (64), or both side by side; the 32-bit entry is
 * n/a where a tensor of the shape passes 2^31 bytes (the runtime launches the 64-bit one there). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cover.h"
#include "cuda_api.h"
#include "rk.h"

static const rk_cuda_api *cu; /* the runtime's driver table, with the programs' entry points */

#define CK(call)                                                               \
    do {                                                                       \
        CUresult r_ = (call);                                                  \
        if (r_ != 0) {                                                         \
            fprintf(stderr, "%s failed: %d (line %d)\n", #call, r_, __LINE__); \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

static CUstream g_stream;

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* Median per-call microseconds of `launch` captured 50 times in one graph, 5 replays. Each replay is
 * queued behind a spin kernel, so the start event is taken when the GPU reaches it and not while the
 * host is still submitting the graph (otherwise that host time is counted as GPU time). */
typedef void (*launch_fn)(void *ctx);
static CUfunction g_spin;
static void spin(void) {
    long long cycles = 1000000; /* ~0.5 ms, well over the time to submit one graph */
    void *params[] = {&cycles};
    CK(cu->cuLaunchKernel(g_spin, 1, 1, 1, 1, 1, 1, 0, g_stream, params, NULL));
}

static float time_graph(launch_fn launch, void *ctx) {
    enum { CALLS = 50, REPLAYS = 5 };
    CUgraph g;
    CUgraphExec ge;
    CUevent e0, e1;
    launch(ctx); /* warm up outside the graph */
    CK(cu->cuCtxSynchronize());
    CK(cu->cuStreamBeginCapture(g_stream, 2 /* relaxed */));
    for (int i = 0; i < CALLS; i++) launch(ctx);
    CK(cu->cuStreamEndCapture(g_stream, &g));
    CK(cu->cuGraphInstantiateWithFlags(&ge, g, 0));
    CK(cu->cuEventCreate(&e0, 0));
    CK(cu->cuEventCreate(&e1, 0));
    CK(cu->cuGraphLaunch(ge, g_stream));
    float t[REPLAYS];
    for (int r = 0; r < REPLAYS; r++) {
        spin();
        CK(cu->cuEventRecord(e0, g_stream));
        CK(cu->cuGraphLaunch(ge, g_stream));
        CK(cu->cuEventRecord(e1, g_stream));
        CK(cu->cuEventSynchronize(e1));
        CK(cu->cuEventElapsedTime(&t[r], e0, e1));
    }
    qsort(t, REPLAYS, sizeof t[0], cmp_float);
    return t[REPLAYS / 2] * 1000.0f / CALLS;
}

/* ---- floors --------------------------------------------------------------------------------------- */
static const char FLOORS[] =
    "extern \"C\" __global__ void empty() {}\n"
    "extern \"C\" __global__ void round_trip(const uint4 *a, uint4 *b) { b[threadIdx.x] = a[threadIdx.x]; }\n"
    "extern \"C\" __global__ void copy(const uint4 *a, uint4 *b, unsigned long long n) {\n"
    "  for (unsigned long long i = blockIdx.x * 256ull + threadIdx.x; i < n; i += 256ull * gridDim.x) b[i] = a[i];\n"
    "}\n"
    /* w 16-byte units of each row of a (rs units apart) to b's rows (ws bytes apart), whole or folded to 8 bytes */
    "extern \"C\" __global__ void copy_pattern(const uint4 *a, unsigned char *b, unsigned long long n, unsigned w,\n"
    "                                          unsigned rs, unsigned ws, unsigned half) {\n"
    "  for (unsigned long long i = blockIdx.x * 256ull + threadIdx.x; i < n; i += 256ull * gridDim.x) {\n"
    "    unsigned long long r = i / w, u = i % w;\n"
    "    uint4 x = a[r * rs + u];\n"
    "    if (half) *(uint2 *)(b + r * ws + u * 8) = make_uint2(x.x ^ x.z, x.y ^ x.w);\n"
    "    else *(uint4 *)(b + r * ws + u * 16) = x;\n"
    "  }\n"
    "}\n"
    "extern \"C\" __global__ void spin(long long cycles) {\n"
    "  long long t0 = clock64();\n"
    "  while (clock64() - t0 < cycles) {}\n"
    "}\n";

typedef struct kernel_call {
    CUfunction f;
    unsigned blocks, threads;
    void **params;
} kernel_call;

static void launch_call(void *p) {
    kernel_call *k = p;
    CK(cu->cuLaunchKernel(k->f, k->blocks, 1, 1, k->threads, 1, 1, 0, g_stream, k->params, NULL));
}


/* ---- the ropekv kernel ------------------------------------------------------------------------------ */
typedef struct rope_call {
    rk_device *dev;
    void *fn;
    rk_args a;
    int64_t blocks;
    int block;
    int pdl;
} rope_call;

static void launch_rope(void *p) {
    rope_call *r = p;
    rk_buf log = {0};
    if (r->dev->ops->launch(r->dev, r->fn, &r->a, r->blocks, r->block, r->pdl, g_stream, &log) != ROPEKV_OK) {
        fprintf(stderr, "launch: %s\n", log.p);
        exit(1);
    }
}

static int parse_list(const char *s, int *out, int cap) {
    int n = 0;
    while (s && *s && n < cap) {
        out[n++] = atoi(s);
        s = strchr(s, ',');
        if (s) s++;
    }
    return n;
}

/* The value of enum e spelled by the len bytes at s, or -1. */
static int enum_value(const rk_enum *e, const char *s, size_t len) {
    int found = -1;
    for (int i = 0; i < e->n; i++)
        if (strlen(e->v[i].name) == len && !strncmp(e->v[i].name, s, len)) found = e->v[i].value;
    return found;
}

/* The values of a comma-separated list of spellings of enum e: the count, or -1 naming a bad one. */
static int parse_enum(const char *list, const rk_enum *e, int *out, int cap) {
    int n = 0;
    for (const char *s = list; s && *s && n < cap;) {
        size_t len = strcspn(s, ",");
        const int found = enum_value(e, s, len);
        if (found < 0) {
            fprintf(stderr, "bench_kernel: unknown value '%.*s'\n", (int)len, s);
            return -1;
        }
        out[n++] = found;
        s += len;
        if (*s) s++;
    }
    return n;
}

/* Bytes a launch moves: the query part per q form and dtype, the KV rows, positions, slots and cos/sin; the
 * read-back op: the KV rows, slots and its bf16 output. */
static double bytes_moved(const rk_desc *v, int64_t T, int64_t H) {
    const double L = v->L, R = v->R, W = L + R, qe = v->q_dtype == ROPEKV_Q_BF16 ? 2 : 1;
    const double kve = v->kv == ROPEKV_KV_BF16 ? 2 : 1;
    /* both parts of a split row (a record's: its row bytes) */
    const double row = v->record ? v->rec.row_bytes : v->layout == ROPEKV_KV_SPLIT ? W * kve : v->row_bytes;
    const double pos = v->pos == ROPEKV_INDEX_INT32 ? 4 : 8, slot = v->slot == ROPEKV_INDEX_INT32 ? 4 : 8;
    if (v->op == ROPEKV_OP_READ) return (double)T * (row + W * 2 + slot);
    double q = 0;
    if (v->q == ROPEKV_Q_ABSORBED) q = W * 2 + W * qe;  /* q_nope + q_pe read, q_out written */
    else if (v->q != ROPEKV_Q_NONE) q = R * 2 + R * qe; /* q_pe read, the rope part written */
    const double norm_out = v->norm == ROPEKV_NORM_RMS_OUT ? (double)T * L * 2 : 0; /* the normalized c_kv */
    return (double)T * H * q + (double)T * (W * 2 + row) + (double)T * (pos + slot + R * 4) + norm_out;
}

/* The query bytes of a rope-only q form (zero_copy, inplace) as bench_kernel lays the query out: per (token, head), R
 * bf16 values of q_pe read from a [.., W] bf16 row, and R values written in the query dtype, to q_out's [.., W] row
 * (zero_copy) or over q_pe where it lies (inplace). 0 for the other forms. */
typedef struct q_pattern {
    unsigned read, read_st, write, write_st, in_place; /* bytes per row and row strides in bytes */
} q_pattern;

static int q_pattern_of(const rk_desc *v, q_pattern *p) {
    if (v->op != ROPEKV_OP_WRITE || (v->q != ROPEKV_Q_ZERO_COPY && v->q != ROPEKV_Q_INPLACE) || v->R == 0) return 0;
    const unsigned qe = v->q_dtype == ROPEKV_Q_BF16 ? 2 : 1, W = (unsigned)(v->L + v->R);
    const int in_place = v->q == ROPEKV_Q_INPLACE;
    *p = (q_pattern){(unsigned)v->R * 2, W * 2, (unsigned)v->R * qe, in_place ? W * 2 : W * qe, (unsigned)in_place};
    return 1;
}

/* n bf16 values in device memory, as a projection's output looks to the quantizing writers: signs, exponents
 * (2^-6 .. 2^3) and mantissas from a fixed xorshift sequence, so that every block of a record has its own amax and
 * scale (a constant fill would give every block the same ones). */
static void upload_random_bf16(CUdeviceptr dst, int64_t n) {
    uint16_t *h = malloc((size_t)n * 2);
    if (!h) {
        fprintf(stderr, "bench_kernel: out of memory\n");
        exit(1);
    }
    uint32_t x = 2463534242u;
    for (int64_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        h[i] = (uint16_t)((x & 0x8000u) | ((121u + (x >> 16) % 10u) << 7) | ((x >> 8) & 0x7fu));
    }
    CK(cu->cuMemcpyHtoD(dst, h, (size_t)n * 2));
    free(h);
}

/* n indices in device memory as w (int32 or int64). */
static void upload_index(CUdeviceptr dst, const int64_t *v, int64_t n, ropekv_index w) {
    if (w == ROPEKV_INDEX_INT64) {
        CK(cu->cuMemcpyHtoD(dst, v, (size_t)n * 8));
        return;
    }
    int32_t *t = malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) t[i] = (int32_t)v[i];
    CK(cu->cuMemcpyHtoD(dst, t, (size_t)n * 4));
    free(t);
}

/* The covering set's variants of sp retargeted to row (rk_cover_retarget), their choices into out: the count, or -1
 * with a message. */
static int covering_choices(const rk_catalog *cat, const rk_spec *sp, const rk_arch *row, rk_choice *out, int cap) {
    enum { ROOM = 8192 }; /* the whole covering set (436 today) */
    rk_desc *set = malloc(sizeof *set * ROOM);
    rk_err err = {0};
    const int n = set ? rk_cover_retarget(cat, row, set, ROOM, &err) : -1;
    int m = n < 0 ? -1 : 0;
    if (n < 0) fprintf(stderr, "bench_kernel: the covering set: %s\n", set ? err.msg : "out of memory");
    for (int i = 0; i < n && m >= 0; i++) {
        if (set[i].spec != sp) continue;
        if (m == cap) {
            fprintf(stderr, "bench_kernel: the covering set has more than %d variants of %s\n", cap, sp->name);
            m = -1;
        } else {
            out[m++] = rk_desc_choice(&set[i]);
        }
    }
    free(set);
    return m;
}

int main(int argc, char **argv) {
    const char *spec_name = "deepseek_v3", *kvs = "bf16,fp8_e4m3";
    int qforms[4] = {ROPEKV_Q_ABSORBED}, qdts[2] = {ROPEKV_Q_BF16}, norms[3] = {ROPEKV_NORM_NONE}, nq = 1, nqd = 1;
    int ops[2] = {ROPEKV_OP_WRITE}, nop = 1;
    int nno = 1, layout = ROPEKV_KV_FLAT, chosen = 0, list = 0; /* chosen: a variant option was given */
    const char *shapes = "1x16,16x16,128x16,512x16,2048x16,32768x16,1x128,128x128,2048x128";
    int blocks_l[8] = {256}, chunks_l[8] = {0}, nt_l[2] = {0}, pdl_l[5] = {0}, entries_l[2] = {32};
    int nb = 1, nc = 1, nn = 1, np = 1, ne = 1;
    int64_t chunks_from = -1; /* --chunks-from: the row's chunks_from and read_chunks_from (-1: the row's) */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--list")) {
            list = 1;
            continue;
        }
        if (i + 1 == argc) break;
        const char *opt = argv[i], *val = argv[++i];
        chosen |= !strcmp(opt, "--kv") || !strcmp(opt, "--q") || !strcmp(opt, "--qdtype") || !strcmp(opt, "--norm") ||
                  !strcmp(opt, "--layout") || !strcmp(opt, "--op");
        if (!strcmp(opt, "--spec")) spec_name = val;
        else if (!strcmp(opt, "--block")) nb = parse_list(val, blocks_l, 8);
        else if (!strcmp(opt, "--chunks")) nc = parse_list(val, chunks_l, 8);
        else if (!strcmp(opt, "--chunks-from")) chunks_from = atoll(val);
        else if (!strcmp(opt, "--nt")) nn = parse_list(val, nt_l, 2);
        else if (!strcmp(opt, "--pdl")) np = parse_list(val, pdl_l, 5);
        else if (!strcmp(opt, "--entries")) ne = parse_list(val, entries_l, 2);
        else if (!strcmp(opt, "--kv")) kvs = val;
        else if (!strcmp(opt, "--shapes")) shapes = val;
        else if (!strcmp(opt, "--q")) nq = parse_enum(val, &rk_qform_enum, qforms, 4);
        else if (!strcmp(opt, "--qdtype")) nqd = parse_enum(val, &rk_qdtype_enum, qdts, 2);
        else if (!strcmp(opt, "--norm")) nno = parse_enum(val, &rk_norm_enum, norms, 3);
        else if (!strcmp(opt, "--op")) nop = parse_enum(val, &rk_op_enum, ops, 2);
        else if (!strcmp(opt, "--layout") && parse_enum(val, &rk_layout_enum, &layout, 1) != 1) return 2;
    }
    if (nq <= 0 || nqd <= 0 || nno <= 0 || nop <= 0) return 2;
    for (int e = 0; e < ne; e++)
        if (entries_l[e] != 32 && entries_l[e] != 64) {
            fprintf(stderr, "bench_kernel: --entries takes 32 and 64, got %d\n", entries_l[e]);
            return 2;
        }

    /* the variants: the covering set's on the row, or the product of the options */
    static rk_catalog cat;
    rk_err err = {0};
    if (rk_catalog_load_embedded(&cat, &err) != ROPEKV_OK) {
        fprintf(stderr, "bench_kernel: %s\n", err.msg);
        return 1;
    }
    const rk_spec *sp = rk_catalog_find(&cat, spec_name);
    const rk_arch *row = rk_arch_find(&cat.archs, "sm_90");
    if (!sp || !row) {
        fprintf(stderr, "bench_kernel: no spec '%s' or no sm_90 row\n", spec_name);
        return 1;
    }
    enum { MAX_VARIANTS = 256 };
    static rk_choice choices[MAX_VARIANTS];
    int nv = 0;
    if (!chosen) {
        nv = covering_choices(&cat, sp, row, choices, MAX_VARIANTS);
        if (nv < 0) return 1;
    }
    for (const char *kv = chosen ? kvs : NULL; kv && *kv;) {
        /* a KV dtype (bf16, fp8_e4m3, fp8_tile), or a record of the spec by its name (its row; kv then bf16) */
        const size_t len = strcspn(kv, ",");
        const int kv_dtype = enum_value(&rk_kv_enum, kv, len);
        int record = 0;
        for (int r = 0; r < sp->n_records && kv_dtype < 0; r++)
            if (strlen(sp->records[r].name) == len && !strncmp(sp->records[r].name, kv, len)) record = r + 1;
        if (kv_dtype < 0 && record == 0) {
            fprintf(stderr, "bench_kernel: --kv: '%.*s' is neither a KV dtype nor a record of %s\n", (int)len, kv,
                    sp->name);
            return 2;
        }
        const ropekv_kv_dtype kd = kv_dtype < 0 ? ROPEKV_KV_BF16 : (ropekv_kv_dtype)kv_dtype;
        for (int o = 0; o < nop; o++) {
            /* the read-back op has no query form, query dtype or norm: one variant */
            const int reads = ops[o] == ROPEKV_OP_READ, n = reads ? 1 : nq * nqd * nno;
            for (int qv = 0; qv < n && nv < MAX_VARIANTS; qv++)
                choices[nv++] = (rk_choice){kd,
                                            reads ? ROPEKV_Q_NONE : (ropekv_q_form)qforms[qv / (nqd * nno)],
                                            ROPEKV_INDEX_INT64,
                                            ROPEKV_INDEX_INT64,
                                            reads ? ROPEKV_Q_BF16 : (ropekv_q_dtype)qdts[qv / nno % nqd],
                                            (ropekv_kv_layout)layout,
                                            (ropekv_op)ops[o],
                                            reads ? ROPEKV_NORM_NONE : (ropekv_norm)norms[qv % nno],
                                            record};
        }
        kv = strchr(kv, ',');
        if (kv) kv++;
    }
    if (list) {
        for (int i = 0; i < nv; i++) {
            rk_desc v;
            if (rk_desc_make(sp, row, &choices[i], &v, &err) != ROPEKV_OK) {
                fprintf(stderr, "bench_kernel: %s\n", err.msg);
                return 1;
            }
            printf("%s\n", v.key);
        }
        printf("%d variants (%s)\n", nv, chosen ? "the product of the options" : "the covering set on sm_90");
        return 0;
    }

    rk_device dev = {.ops = &rk_backend_cuda};
    rk_buf log = {0};
    if (dev.ops->open(&dev, 0, NULL, &log) != ROPEKV_OK) {
        printf("bench_kernel: SKIPPED: %s\n", log.p);
        return 77;
    }
    char why[256];
    if (!(cu = rk_cuda_driver(RK_CUDA_ALL, why, sizeof why))) {
        fprintf(stderr, "bench_kernel: %s\n", why);
        return 1;
    }
    CUcontext ctx;
    CK(cu->cuDevicePrimaryCtxRetain(&ctx, 0));
    CK(cu->cuCtxSetCurrent(ctx));
    CK(cu->cuStreamCreate(&g_stream, 1 /* non-blocking */));

    /* floors */
    rk_codeobj co = {0};
    rk_buf flog = {0};
    if (rk_nvrtc_compile(FLOORS, sizeof FLOORS - 1, dev.target, NULL, 0, &co, NULL, &flog) != ROPEKV_OK) {
        fprintf(stderr, "%s\n", flog.p);
        return 1;
    }
    CUmodule fm;
    CUfunction fe, fr, fc, fcp;
    CK(cu->cuModuleLoadData(&fm, co.data));
    CK(cu->cuModuleGetFunction(&fe, fm, "empty"));
    CK(cu->cuModuleGetFunction(&fr, fm, "round_trip"));
    CK(cu->cuModuleGetFunction(&fc, fm, "copy"));
    CK(cu->cuModuleGetFunction(&fcp, fm, "copy_pattern"));
    CK(cu->cuModuleGetFunction(&g_spin, fm, "spin"));
    CUdeviceptr big_a, big_b;
    const size_t big = (size_t)2 << 30;
    CK(cu->cuMemAlloc(&big_a, big));
    CK(cu->cuMemAlloc(&big_b, big));
    CK(cu->cuMemsetD8(big_a, 1, big));
    void *rp[] = {&big_a, &big_b};
    kernel_call empty = {fe, 1, 32, NULL}, rt = {fr, 1, 1, rp};
    unsigned long long n16 = big / 16;
    void *cpp[] = {&big_a, &big_b, &n16};
    kernel_call copy = {fc, 132 * 16, 256, cpp};
    float t_empty = time_graph(launch_call, &empty), t_rt = time_graph(launch_call, &rt);
    float t_copy = time_graph(launch_call, &copy);
    double bw = 2.0 * big / (t_copy * 1e-6); /* bytes read + written per second */
    printf("device %s, nvrtc %s; floors: empty %.2f us, round trip %.2f us, copy %.2f TB/s\n", dev.target,
           dev.compiler_id, t_empty, t_rt, bw / 1e12);
    /* The same copy over the part of each row a rope-only q form touches (q_pattern_of), timed once per pattern
     * the variants have: its rate is the floor of that form's query bytes ("% of pattern": the query bytes at the
     * pattern's rate, the rest at the copy rate). */
    enum { MAX_PATTERNS = 8 };
    q_pattern pats[MAX_PATTERNS];
    double pat_bw[MAX_PATTERNS];
    int npat = 0, pat_of[MAX_VARIANTS]; /* a variant's pattern in pats, or -1 */
    for (int vi = 0; vi < nv; vi++) {
        rk_desc v;
        q_pattern p;
        pat_of[vi] = -1;
        if (rk_desc_make(sp, row, &choices[vi], &v, &err) != ROPEKV_OK || !q_pattern_of(&v, &p)) continue;
        for (int i = 0; i < npat; i++)
            if (!memcmp(&pats[i], &p, sizeof p)) pat_of[vi] = i;
        if (pat_of[vi] >= 0 || npat == MAX_PATTERNS) continue;
        pat_of[vi] = npat;
        unsigned w = p.read / 16, rs = p.read_st / 16, ws = p.write_st, half = p.write * 2 == p.read;
        unsigned long long rows = big / (p.read_st > p.write_st ? p.read_st : p.write_st), n = rows * w;
        CUdeviceptr dst = p.in_place ? big_a : big_b; /* in place: the writes land on the rows read */
        void *cpp2[] = {&big_a, &dst, &n, &w, &rs, &ws, &half};
        kernel_call cr = {fcp, 132 * 16, 256, cpp2};
        const float t = time_graph(launch_call, &cr);
        pat_bw[npat] = (double)rows * (p.read + p.write) / (t * 1e-6);
        pats[npat++] = p;
        printf("pattern copy: %u of %u bytes read, %u of %u written%s: %.2f TB/s\n", p.read, p.read_st, p.write,
               p.write_st, p.in_place ? " (in place)" : "", pat_bw[npat - 1] / 1e12);
    }

    const int L = sp->kv_lora_rank, R = sp->rope_dim, W = L + R;
    printf(
        "| T | H | record | q | q dtype | norm | layout | op | pos/slot | block | chunks | nt | pdl | entry | us | limit us | "
        "%% of limit | %% of pattern |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int vi = 0; vi < nv; vi++)
        for (int b = 0; b < nb; b++)
            for (int c = 0; c < nc; c++)
                for (int n = 0; n < nn * np; n++) {
                    rk_arch arch = *row;
                    arch.block = arch.wide_block = blocks_l[b];
                    if (chunks_l[c] > 0) arch.chunks = arch.read_chunks = chunks_l[c]; /* 0: the row's */
                    if (chunks_from >= 0) arch.chunks_from = arch.read_chunks_from = chunks_from;
                    arch.nt_stores = nt_l[n % nn];
                    arch.pdl = pdl_l[n / nn] != 0;
                    rk_desc v;
                    if (rk_desc_make(sp, &arch, &choices[vi], &v, &err) != ROPEKV_OK) {
                        fprintf(stderr, "bench_kernel: %s\n", err.msg);
                        return 1;
                    }
                    rk_buf src = {0};
                    rk_codeobj kco = {0};
                    rk_buf klog = {0};
                    void *mod, *fn[2];
                    if (rk_emit(&v, &src, &err) != ROPEKV_OK ||
                        dev.ops->compile(&dev, src.p, src.len, v.name, &arch, &kco, &klog) != ROPEKV_OK ||
                        dev.ops->load(&dev, &kco, v.name, &mod, fn, &klog) != ROPEKV_OK) {
                        fprintf(stderr, "%s: %s %s\n", v.name, err.msg, klog.p ? klog.p : "");
                        return 1;
                    }
                    for (const char *s = shapes; s && *s;) {
                        int64_t T = atoll(s), H = atoll(strchr(s, 'x') + 1);
                        /* a record's cache holds bytes; split: the latent part, then the rope part's rows */
                        const size_t kv_elem = !v.record && v.kv == ROPEKV_KV_BF16 ? 2 : 1;
                        const int64_t kv_st = v.row_bytes / (int64_t)kv_elem;
                        const int64_t rope_st = v.record ? v.rec.row_bytes - v.rec.split_at : R;
                        const int split = v.layout == ROPEKV_KV_SPLIT, read = v.op == ROPEKV_OP_READ;
                        CUdeviceptr q, qo, k, cache, rope, out, pos, slots, cs, scale, nw, no;
                        CK(cu->cuMemAlloc(&q, (size_t)(T * H * W * 2)));
                        CK(cu->cuMemAlloc(&qo, (size_t)(T * H * W * 2)));
                        CK(cu->cuMemAlloc(&k, (size_t)(T * W * 2)));
                        const int64_t rows = (T + 16) / 16 * 16; /* T + 1 rows, whole blocks of 16 */
                        CK(cu->cuMemAlloc(&cache, (size_t)(rows * kv_st) * kv_elem));
                        CK(cu->cuMemAlloc(&rope, (size_t)(rows * rope_st) * kv_elem)); /* a split layout's rope rows */
                        CK(cu->cuMemAlloc(&out, (size_t)(T * W * 2)));                 /* the read-back op's rows */
                        CK(cu->cuMemAlloc(&pos, (size_t)T * 8));
                        CK(cu->cuMemAlloc(&slots, (size_t)T * 8));
                        CK(cu->cuMemAlloc(&cs, (size_t)4096 * R * 4));
                        CK(cu->cuMemAlloc(&scale, 4));
                        CK(cu->cuMemAlloc(&nw, (size_t)L * 4));       /* the norm's weight (f32 at most) */
                        CK(cu->cuMemAlloc(&no, (size_t)(T * L * 2))); /* its output (rms_out) */
                        CK(cu->cuMemsetD8(nw, 0x3f, (size_t)L * 4));
                        CK(cu->cuMemsetD8(q, 0x3f, (size_t)(T * H * W * 2)));
                        upload_random_bf16(k, T * W);
                        /* positions spread over the table, slots a shuffled permutation of the rows */
                        int64_t *hp = malloc((size_t)T * 8), *hs = malloc((size_t)T * 8);
                        for (int64_t t = 0; t < T; t++) hp[t] = (t * 2654435761u) % 4096, hs[t] = t;
                        for (int64_t t = T - 1; t > 0; t--) {
                            int64_t j = (int64_t)((t * 40503u + 7) % (uint64_t)(t + 1)), x = hs[t];
                            hs[t] = hs[j];
                            hs[j] = x;
                        }
                        upload_index(pos, hp, T, v.pos);
                        upload_index(slots, hs, T, v.slot);
                        free(hp);
                        free(hs);
                        CK(cu->cuMemsetD8(cs, 0x3f, (size_t)4096 * R * 4));
                        CK(cu->cuMemsetD8(scale, 0x3f, 4));
                        rope_call rc = {.dev = &dev, .fn = fn[0], .block = arch.block, .pdl = arch.pdl};
                        const int pdl_mode = pdl_l[n / nn];
                        rc.a = (rk_args){
                            .q_nope = (void *)q,
                            .q_pe = (void *)(q + (size_t)L * 2),
                            .q_out = (void *)qo,
                            .k_nope = (void *)k,
                            .k_pe = (void *)(k + (size_t)L * 2),
                            .kv_cache = (void *)cache,
                            .positions = (void *)pos,
                            .slots = (void *)slots,
                            .cos_sin = (void *)cs,
                            .sin = (void *)(cs + (size_t)4096 * R * 2), /* split tables: sin after cos's rows */
                            .k_scale = (const float *)scale,
                            .q_scale = (const float *)scale,
                            .tokens = T,
                            .kv_tokens = T,
                            .heads = H,
                            .max_pos = 4096,
                            .q_nope_st = H * W,
                            .q_nope_sh = W,
                            .q_pe_st = H * W,
                            .q_pe_sh = W,
                            .q_out_st = H * W,
                            .q_out_sh = W,
                            .k_nope_st = W,
                            .k_pe_st = W,
                            .kv_st = kv_st,
                            .kv_rows = rows,
                            .kv_block_size = 16,
                            .kv_block_st = 16 * kv_st,
                            .kv_rope_cache = split ? (void *)rope : NULL,
                            .kv_rope_st = rope_st,
                            .kv_rope_block_st = 16 * rope_st,
                            .out = read ? (void *)out : NULL,
                            .out_st = W,
                            .prefetch = pdl_mode >= 3,
                            .norm_weight = (const void *)nw,
                            .norm_out = (void *)no,
                            .norm_out_st = L,
                        };
                        int64_t total;
                        rk_launch_plan(&v, &rc.a, &total, &rc.blocks, &rc.block);
                        rc.a.early_release = pdl_mode == 1 || pdl_mode == 3;
                        double limit = bytes_moved(&v, T, H) / bw * 1e6, pat_limit = 0;
                        if (pat_of[vi] >= 0) { /* the query bytes at their pattern's rate, the rest at the copy's */
                            const q_pattern *qp = &pats[pat_of[vi]];
                            const double qb = (double)T * H * (qp->read + qp->write);
                            pat_limit = qb / pat_bw[pat_of[vi]] * 1e6 + limit - qb / bw * 1e6;
                            if (pat_limit < t_rt) pat_limit = t_rt;
                        }
                        if (limit < t_rt) limit = t_rt;
                        /* the 32-bit entry's reach: every chunk index and byte offset below 2^31 (q and q_out are
                         * the largest tensors here; rk_args_check decides the same for the runtime) */
                        const int narrow = (double)T * H * W * 2 < 2147483647.0 && total < 2147483647 - 4096;
                        for (int e = 0; e < ne; e++) {
                            const int wide = entries_l[e] == 64;
                            rc.fn = fn[wide];
                            const float us = wide || narrow ? time_graph(launch_rope, &rc) : 0.0f;
                            printf("| %lld | %lld | %s | %s | %s | %s | %s | %s | %s/%s | %d | %d | %d | %d | %d | ",
                                   (long long)T, (long long)H,
                                   v.rec.name, /* the cache record: bf16, fp8, dsv4_fp8, ... */
                                   rk_qform_name(v.q), rk_qdtype_name(v.q_dtype), rk_norm_name(v.norm),
                                   rk_layout_name(v.layout), rk_op_name(v.op), rk_idx_name(v.pos), rk_idx_name(v.slot),
                                   arch.block, rk_desc_chunks(&v, NULL), arch.nt_stores, pdl_mode, entries_l[e]);
                            if (us > 0) printf("%.2f | %.2f | %.0f%% | ", us, limit, 100 * limit / us);
                            else printf("n/a | %.2f | n/a | ", limit);
                            if (us > 0 && pat_limit > 0) printf("%.0f%% |\n", 100 * pat_limit / us);
                            else printf("- |\n");
                            fflush(stdout);
                        }
                        CUdeviceptr all[] = {q, qo, k, cache, rope, out, pos, slots, cs, scale, nw, no};
                        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) CK(cu->cuMemFree(all[i]));
                        s = strchr(s, ',');
                        if (s) s++;
                    }
                    rk_buf_free(&src);
                    rk_buf_free(&klog);
                    rk_code_free(&kco);
                }
    return 0;
}
