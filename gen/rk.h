/* ropekv generator: specs (data) -> validated structs -> variants -> kernel source.
 *
 * Everything here is pure: no globals, no I/O except what a caller passes in.
 * Errors are reported through rk_err (a code and a message naming file, key and reason). */
#ifndef RK_GEN_H
#define RK_GEN_H

#include <stddef.h>
#include <stdint.h>

#include "ropekv.h"


/* ---- error reporting: the public status codes (include/ropekv.h) are used here too ---------------- */
typedef struct rk_err {
    ropekv_status code;
    char msg[2048];
} rk_err;

/* Sets err (if non-NULL) and returns code. printf-style. */
int rk_fail(rk_err *err, ropekv_status code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* ---- enumerations (each has a canonical lower-case spelling, see rk_*_name) ---------------- */
typedef enum { RK_VENDOR_AMD, RK_VENDOR_NVIDIA, RK_VENDOR_HOST } rk_vendor;
typedef enum { RK_CC_HIPRTC, RK_CC_CLANG, RK_CC_NVRTC, RK_CC_HOST } rk_compiler;
typedef enum { RK_FP8_OCP, RK_FP8_FNUZ } rk_fp8_fmt;
typedef enum { RK_ROPE_GPTJ, RK_ROPE_NEOX, RK_ROPE_NONE } rk_rope;
typedef enum { RK_CS_F32_CAT, RK_CS_F32_SPLIT, RK_CS_BF16_SPLIT } rk_cos_sin;
typedef enum { ROPEKV_INDEX_INT32, ROPEKV_INDEX_INT64 } ropekv_index;
typedef enum { ROPEKV_KV_BF16, ROPEKV_KV_FP8_E4M3 } ropekv_kv_dtype;
typedef enum { RK_SCALE_NONE, RK_SCALE_MUL_RECIP, RK_SCALE_DIV, RK_SCALE_MUL } rk_scale;
typedef enum { RK_NEG_SKIP_KV, RK_NEG_SKIP_ALL } rk_neg;
typedef enum { ROPEKV_Q_ABSORBED, ROPEKV_Q_ZERO_COPY, ROPEKV_Q_INPLACE, ROPEKV_Q_NONE } ropekv_q_form;

/* Spellings used in spec files, keys and names; NULL for an out-of-range value. */
const char *rk_vendor_name(rk_vendor v);   /* "amd" "nvidia" "host" */
const char *rk_compiler_name(rk_compiler c); /* "hiprtc" "clang" "nvrtc" "host" */
const char *rk_fp8_name(rk_fp8_fmt f);     /* "ocp" "fnuz" */
const char *rk_rope_name(rk_rope r);       /* "gptj" "neox" "none" */
const char *rk_cos_sin_name(rk_cos_sin c); /* "f32_cat" "f32_split" "bf16_split" */
const char *rk_idx_name(ropekv_index i);         /* "int32" "int64" */
const char *rk_kv_name(ropekv_kv_dtype k);           /* "bf16" "fp8_e4m3" */
const char *rk_scale_name(rk_scale s);     /* "none" "mul_recip" "div" "mul" */
const char *rk_neg_name(rk_neg n);         /* "skip_kv" "skip_all" */
const char *rk_qform_name(ropekv_q_form q);     /* "absorbed" "zero_copy" "inplace" "none" */

/* ---- name parsing: the inverse of rk_*_name; 0 on success, -1 for an unknown spelling -------- */
int rk_parse_vendor(const char *s, rk_vendor *out);
int rk_parse_compiler(const char *s, rk_compiler *out);
int rk_parse_fp8(const char *s, rk_fp8_fmt *out);
int rk_parse_rope(const char *s, rk_rope *out);
int rk_parse_cos_sin(const char *s, rk_cos_sin *out);
int rk_parse_idx(const char *s, ropekv_index *out);
int rk_parse_kv(const char *s, ropekv_kv_dtype *out);
int rk_parse_scale(const char *s, rk_scale *out);
int rk_parse_neg(const char *s, rk_neg *out);
int rk_parse_qform(const char *s, ropekv_q_form *out);

/* ---- architecture table (specs/archs.lua) ---------------------------------------------------- */
#define RK_NAME_MAX 32
#define RK_MAX_ARCHS 32
#define RK_MAX_TARGETS 16

typedef struct rk_arch {
    char name[RK_NAME_MAX];   /* "gfx942", "sm_90", "host" */
    rk_vendor vendor;
    int wave;                 /* 32 or 64 */
    rk_fp8_fmt fp8;           /* the format the target's fp8 cache bytes use */
    int fp8_hw;               /* 1: hardware f32->fp8 conversion */
    int bf16_hw;              /* 1: hardware f32->bf16 conversion */
    int vec_bytes;            /* bytes per lane per global access (16) */
    int block;                /* threads per block */
    int chunks;               /* 16-byte output chunks per thread in large launches (1..8) */
    int64_t chunks_from;      /* launches of at least this many chunks use `chunks`; smaller ones 1 */
    int nt_stores;            /* 1: non-temporal (streaming) stores for q_out and cache rows */
    int pdl;                  /* 1: programmatic dependent launch (NVIDIA sm_90+): the kernel waits for
                                 the previous grid before its first memory access, so its launch can
                                 overlap that grid's tail */
    rk_compiler compiler;     /* preferred compiler family */
    char options[256];        /* default compiler options, space separated */
} rk_arch;

typedef struct rk_arch_table {
    int n;
    rk_arch a[RK_MAX_ARCHS];
} rk_arch_table;

const rk_arch *rk_arch_find(const rk_arch_table *t, const char *name);

/* ---- model spec (specs/<model>.lua) ---------------------------------------------------------- */
typedef struct rk_spec {
    char name[64];            /* spec name, [a-z0-9_]+ */
    char file[256];           /* file it came from (for messages and headers) */
    char description[256];
    int kv_lora_rank;         /* L */
    int rope_dim;             /* R (qk_rope_head_dim) */
    rk_rope rope;
    rk_cos_sin cos_sin;
    int n_pos;   ropekv_index pos[2];   /* position index types to build */
    int n_slot;  ropekv_index slot[2];  /* slot index types to build */
    int n_kv;    ropekv_kv_dtype kv[2];
    rk_scale fp8_scale;
    float fp8_sat_ocp;        /* saturation bound used with OCP bytes (<= 448) */
    float fp8_sat_fnuz;       /* saturation bound used with FNUZ bytes (<= 240) */
    int fp8_rope_bf16;        /* 1: round the KV rope part to bf16 before the fp8 conversion */
    rk_neg negative_slot;
    int n_q;     ropekv_q_form q[4];
    int sanitize;             /* 1: NaN -> 0, +-inf -> +-max finite in the KV row */
    int n_targets; char targets[RK_MAX_TARGETS][RK_NAME_MAX];
} rk_spec;

/* Load a spec file's text in the Lua sandbox and validate it.
 * file is used in messages only. Binary chunks are refused. */
int rk_archs_load(const char *file, const char *text, size_t len, rk_arch_table *out, rk_err *err);
int rk_spec_load(const char *file, const char *text, size_t len, const rk_arch_table *archs,
                 rk_spec *out, rk_err *err);

/* ---- variants ------------------------------------------------------------------------------ */
/* One kernel to generate: a spec on a target with one choice per enumerated dimension. */
typedef struct rk_desc {
    const rk_spec *spec;
    const rk_arch *arch;
    ropekv_kv_dtype kv;
    ropekv_q_form q;
    ropekv_index pos;
    ropekv_index slot;
    rk_fp8_fmt fp8;           /* arch->fp8 */
    float sat;                /* saturation bound for fp8 (spec's bound for fp8) */
    char key[192];            /* canonical key: spec/target/kv/q/pos/slot */
    char name[192];           /* extern "C" kernel name, encodes every code parameter */
} rk_desc;

/* ---- kernel ABI -------------------------------------------------------------------------------
 * The argument block every generated kernel takes by value. Field order and types are part of the
 * ABI: templates/kernel.hip declares the same struct. All strides are in elements of the tensor's
 * own dtype (bytes for an fp8 cache). Only the last dimension of each tensor is contiguous.
 *   q_nope [T,H,L] bf16   q_pe [T,H,R] bf16   q_out [T,H,L+R] bf16 (zero_copy: only [...,L:] written)
 *   k_nope [T,L] bf16     k_pe [T,R] bf16     kv_cache rows of L+R (bf16 or fp8 bytes)
 *   positions [T], slots [T] (int32 or int64 per variant), cos/sin tables (see rk_cos_sin):
 *     f32_cat: cos = table [max_pos, R] f32 (cos | sin halves), sin unused;
 *     f32_split / bf16_split: cos [max_pos, R/2], sin [max_pos, R/2].
 *   k_scale: one float32 on the device (fp8 with a scale), else unused. */
typedef struct rk_args {
    const void *q_nope, *q_pe;
    void *q_out;
    const void *k_nope, *k_pe;
    void *kv_cache;
    const void *positions, *slots;
    const void *cos, *sin;
    const float *k_scale;
    int64_t tokens, heads, max_pos;
    int64_t q_nope_st, q_nope_sh;   /* token / head strides */
    int64_t q_pe_st, q_pe_sh;
    int64_t q_out_st, q_out_sh;
    int64_t k_nope_st, k_pe_st;
    int64_t kv_st;                  /* row stride of the cache */
    int64_t kv_rows;                /* rows in the cache: a slot >= kv_rows is not written */
    int64_t chunks;                 /* chunks per thread of this launch; rk_launch_plan fills it, and
                                       early_release, lanes, lanes_mul and lanes_shift */
    int64_t early_release;          /* rows with pdl: 1 lets the next grid launch as soon as this one has
                                       started, 0 when its blocks exit. rk_launch_plan releases early when
                                       threads take one chunk each (chunks == 1): in a launch of
                                       multi-chunk threads that fits the GPU at once, an early release
                                       packs the next grid's blocks unevenly beside it (H200, 512 x 16:
                                       5.5 us instead of 4.3) */
    int64_t prefetch;               /* rows with pdl: 1 reads positions, slots and cos/sin before waiting
                                       for the previous grid (ropekv_options.pdl_prefetch) */
    int64_t lanes;                  /* lanes (16-byte chunks) per token (templates/kernel.hip, chunk) */
    int64_t lanes_mul, lanes_shift; /* g / lanes == (g * lanes_mul) >> lanes_shift for 0 <= g < 2^31:
                                       the 32-bit entry divides without a divide (rk_div_magic) */
} rk_args;

/* ---- CPU reference (gen/ref.c): the oracle ----------------------------------------------------
 * Computes exactly what a variant's kernel must write, on host pointers. */
void rk_ref_run(const rk_desc *v, const rk_args *a);

/* Scalar conversions used by the reference (exact semantics documented in gen/ref.c). */
float rk_bf16_to_f32(uint16_t b);
uint16_t rk_f32_to_bf16(float f);             /* RNE; any NaN -> 0x7fff */
float rk_fp8_to_f32(uint8_t b, rk_fp8_fmt fmt);
uint8_t rk_f32_to_fp8(float f, rk_fp8_fmt fmt); /* RNE, saturating to the format's max finite */

/* ---- growable text buffer ---------------------------------------------------------------------- */
typedef struct rk_buf {
    char *p;      /* NUL-terminated when len > 0 */
    size_t len, cap;
} rk_buf;
int rk_buf_put(rk_buf *b, const char *s, size_t n);   /* ROPEKV_OK or ROPEKV_ERR_NOMEM */
int rk_buf_printf(rk_buf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void rk_buf_free(rk_buf *b);

/* ---- variant enumeration, keys and kernel names (gen/variant.c) --------------------------------- */
#define RK_MAX_VARIANTS_PER_SPEC (RK_MAX_TARGETS * 2 * 4 * 2 * 2)

/* Every variant of a spec, in a fixed order (targets, kv dtypes, q forms, positions, slots as listed
 * in the spec). Returns the count, or -1 with err set (unknown target). */
int rk_variants(const rk_spec *spec, const rk_arch_table *archs, rk_desc *out, int cap, rk_err *err);

/* Fills key, name, fp8 and sat from the other fields. */
void rk_desc_finish(rk_desc *v);

/* The code parameters a kernel name encodes; rk_name_parse is the inverse of the name format:
 *   rk_L<L>_R<R>_<rope>_<cossin>_p<32|64>_s<32|64>_<bf16|fp8ocp|fp8fnuz>_<scale>_sat<N>_rr<0|1>
 *     _<qform>_<skipkv|skipall>_san<0|1>_<target>
 * (spellings without underscores: f32cat, mulrecip, zerocopy ...). */
typedef struct rk_name_parts {
    int L, R;
    rk_rope rope;
    rk_cos_sin cos_sin;
    ropekv_index pos, slot;
    int kv_fp8;
    rk_fp8_fmt fp8;
    rk_scale scale;
    float sat;
    int rope_bf16;
    ropekv_q_form q;
    rk_neg neg;
    int sanitize;
    char target[RK_NAME_MAX];
} rk_name_parts;
int rk_name_format(const rk_name_parts *p, char *out, size_t cap);  /* ROPEKV_OK or ROPEKV_ERR_RENDER */
int rk_name_parse(const char *name, rk_name_parts *out, rk_err *err);
void rk_variant_parts(const rk_desc *v, rk_name_parts *out);

/* How one launch is cut, from a->tokens and a->heads and the arch row's knobs (wave, block, chunks,
 * chunks_from). Fills a->lanes (lanes per token, templates/kernel.hip chunk(): the rotating 16-byte
 * chunks of the query rows and KV row padded to whole waves, then the copied ones), a->lanes_mul and
 * a->lanes_shift (rk_div_magic of lanes), a->chunks (chunks per thread: chunks when total >= chunks_from,
 * else 1) and a->early_release (1 when threads take one chunk each; see rk_args). *total = tokens *
 * lanes, *blocks = ceil(total / (block * a->chunks)). Every launcher (runtime, tests, benchmarks) uses it. */
void rk_launch_plan(int L, int R, ropekv_q_form q, int wave, int block, int chunks, int64_t chunks_from, rk_args *a,
                    int64_t *total, int64_t *blocks);

/* Division by d (1 <= d < 2^31) without a divide: for every 0 <= n < 2^31, n / d == (n * mul) >> shift
 * (a 64-bit product), with shift = 31 + ceil(log2 d) and mul = ceil(2^shift / d) < 2^32. For d outside
 * that range mul = shift = 0 (the 64-bit entry, which divides, is used then). */
void rk_div_magic(int64_t d, int64_t *mul, int64_t *shift);

/* ---- templates (gen/render.c) -------------------------------------------------------------------- */
typedef struct rk_binding {
    const char *name;
    const char *value;
} rk_binding;

/* Replaces every ${name} in tpl by its binding. An unknown placeholder, a binding the template never
 * uses, or a "${" without a closing "}" is ROPEKV_ERR_RENDER naming the placeholder and line. */
int rk_render(const char *tpl, size_t len, const rk_binding *b, int n, rk_buf *out, rk_err *err);

/* The full source of a variant: the generated-file header, then templates/params.hip, prelude.hip
 * and kernel.hip rendered with the variant's values. Deterministic. */
int rk_emit(const rk_desc *v, rk_buf *out, rk_err *err);

/* The concatenated template text the kernels are rendered from (for hashing into cache keys). */
int rk_template_text(rk_buf *out, rk_err *err);

/* Files embedded at build time (templates/ and specs/ by base name); NULL if absent. */
const char *rk_embedded(const char *name, size_t *len);
const char *rk_embedded_at(size_t i, size_t *len);  /* name of the i-th file, NULL past the end */

/* ---- a loaded set of specs (gen/catalog.c) --------------------------------------------------------- */
#define RK_MAX_SPECS 64
typedef struct rk_catalog {
    rk_arch_table archs;
    int n_specs;
    rk_spec specs[RK_MAX_SPECS];
} rk_catalog;

/* archs.lua and every model spec embedded at build time. */
int rk_catalog_load_embedded(rk_catalog *c, rk_err *err);
/* One more spec (text of a file); a spec with the same name replaces the old one. */
int rk_catalog_add(rk_catalog *c, const char *file, const char *text, size_t len, rk_err *err);
const rk_spec *rk_catalog_find(const rk_catalog *c, const char *name);

#endif
