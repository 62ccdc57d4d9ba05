/* ropekv generator: specs (data) -> validated structs -> variants -> kernel source.
 *
 * Everything here is pure: no globals, no I/O except what a caller passes in.
 * Errors are reported through rk_err (a code and a message naming file, key and reason). */
#ifndef RK_GEN_H
#define RK_GEN_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "ropekv.h"


/* ---- error reporting: the public status codes (include/ropekv.h) are used here too ---------------- */
typedef struct rk_err {
    ropekv_status code;
    char msg[2048];
} rk_err;

/* Cache records as data: what a token's row holds (gen/record.h). */
#include "record.h"

/* A message into the caller's buffer why[cap] (nothing when why is NULL or cap is 0). printf-style; rk_vsay takes the
 * arguments as a va_list. */
void rk_say(char *why, size_t cap, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
void rk_vsay(char *why, size_t cap, const char *fmt, va_list ap);

/* Sets err (if non-NULL) and returns code. printf-style. */
int rk_fail(rk_err *err, ropekv_status code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* A caller's string (a spec or file name, a target, a path, an environment value) as a message may show it: the
 * len bytes at s, NUL bytes included, with each control character (below 0x20, and 0x7f) written as \n, \r, \t or
 * \xNN, so that a message cannot hide a NUL, break a line or send a terminal escape; other bytes as they are. Cut
 * with "..." to fit cap (which must be at least 4). Returns out. */
const char *rk_escape(const char *s, size_t len, char *out, size_t cap);
/* rk_escape of the NUL-terminated s ("(null)" for NULL). */
const char *rk_printable(const char *s, char *out, size_t cap);

/* ---- enumerations: one spelling table per enum ---------------------------------------------------
 * One row per value: X(enumerator, spelling, token). The spelling is what spec files, variant keys and
 * the public view (ropekv_kernel_param) use, and the name of the kernel's C++ enumerator (templates/params.hip: a binding
 * reads `constexpr Rope ROPE = Rope::gptj;`); the token is the value's part of a kernel name (no '_':
 * that separates a name's fields). Nothing depends on an enumerator's integer value. */
/* clang-format off */
#define RK_VENDOR_LIST(X)               \
    X(RK_VENDOR_AMD, amd, amd)          \
    X(RK_VENDOR_NVIDIA, nvidia, nvidia) \
    X(RK_VENDOR_HOST, host, host)
#define RK_COMPILER_LIST(X)         \
    X(RK_CC_HIPRTC, hiprtc, hiprtc) \
    X(RK_CC_CLANG, clang, clang)    \
    X(RK_CC_NVRTC, nvrtc, nvrtc)    \
    X(RK_CC_HOST, host, host)
#define RK_FP8_LIST(X)         \
    X(RK_FP8_OCP, ocp, ocp)    \
    X(RK_FP8_FNUZ, fnuz, fnuz)
#define RK_ROPE_LIST(X)         \
    X(RK_ROPE_GPTJ, gptj, gptj) \
    X(RK_ROPE_NEOX, neox, neox) \
    X(RK_ROPE_NONE, none, nope)
#define RK_COS_SIN_LIST(X)                     \
    X(RK_CS_F32_CAT, f32_cat, f32cat)          \
    X(RK_CS_F32_SPLIT, f32_split, f32split)    \
    X(RK_CS_BF16_SPLIT, bf16_split, bf16split)
#define RK_SCALE_LIST(X)                       \
    X(RK_SCALE_NONE, none, none)               \
    X(RK_SCALE_MUL_RECIP, mul_recip, mulrecip) \
    X(RK_SCALE_DIV, div, div)                  \
    X(RK_SCALE_MUL, mul, mul)
#define RK_NEG_LIST(X)                    \
    X(RK_NEG_SKIP_KV, skip_kv, skipkv)    \
    X(RK_NEG_SKIP_ALL, skip_all, skipall)
/* The public enums of include/ropekv.h: a caller's choice reaches the description unchanged. */
#define RK_KV_LIST(X)                    \
    X(ROPEKV_KV_BF16, bf16, bf16)        \
    X(ROPEKV_KV_FP8_E4M3, fp8_e4m3, fp8) \
    X(ROPEKV_KV_FP8_TILE, fp8_tile, fp8tile)
#define RK_QFORM_LIST(X)                       \
    X(ROPEKV_Q_ABSORBED, absorbed, absorbed)   \
    X(ROPEKV_Q_ZERO_COPY, zero_copy, zerocopy) \
    X(ROPEKV_Q_INPLACE, inplace, inplace)      \
    X(ROPEKV_Q_NONE, none, qnone)
#define RK_INDEX_LIST(X)             \
    X(ROPEKV_INDEX_INT64, int64, 64) \
    X(ROPEKV_INDEX_INT32, int32, 32)
#define RK_QDTYPE_LIST(X)                  \
    X(ROPEKV_Q_BF16, bf16, bf16)           \
    X(ROPEKV_Q_FP8_E4M3, fp8_e4m3, fp8)
#define RK_LAYOUT_LIST(X)            \
    X(ROPEKV_KV_FLAT, flat, flat)    \
    X(ROPEKV_KV_PAGED, paged, paged) \
    X(ROPEKV_KV_SPLIT, split, split)
#define RK_OP_LIST(X)                \
    X(ROPEKV_OP_WRITE, write, write) \
    X(ROPEKV_OP_READ, read, read)
/* The fused kv_a RMSNorm (include/ropekv.h, ropekv_norm): none, or c_kv normalized before it is cached, and with
 * rms_out also written to norm_out. */
#define RK_NORM_LIST(X)                      \
    X(ROPEKV_NORM_NONE, none, nonorm)        \
    X(ROPEKV_NORM_RMS, rms, rms)             \
    X(ROPEKV_NORM_RMS_OUT, rms_out, rmsout)
/* The RMSNorm weight's dtype, and where the normalized value is rounded to bf16: twice (x * r rounded, then
 * times the weight and rounded again) or once (x * r * w rounded once). */
#define RK_NORM_WEIGHT_LIST(X)        \
    X(RK_NW_BF16, bf16, wbf16)        \
    X(RK_NW_F32, f32, wf32)
#define RK_NORM_ROUND_LIST(X)         \
    X(RK_NR_TWICE, twice, r2)         \
    X(RK_NR_ONCE, once, r1)
/* What the kv_a RMSNorm sums over: the latent (L values: DeepSeek-V3) or the whole head, latent and rope part
 * before its rotation (L + R: DeepSeek-V4's one 512-wide KV head). */
#define RK_NORM_OVER_LIST(X)          \
    X(RK_NO_LATENT, latent, ol)       \
    X(RK_NO_HEAD, head, oh)
/* A weightless RMSNorm of each query head (q_nope and q_pe, before the rotation), DeepSeek-V4's: none or rms. */
#define RK_Q_NORM_LIST(X)             \
    X(RK_QN_NONE, none, qn0)          \
    X(RK_QN_RMS, rms, qrms)
/* How a token's lanes are laid out (templates/kernel.hip, chunk()): in two sections (the rotating chunks, then the
 * copied ones), or row by row (each query head's whole row, then the KV row, so that a norm over a whole row sums
 * over lanes of one wave). Derived from the norms, never chosen. */
#define RK_ORDER_LIST(X)              \
    X(RK_ORDER_SECTIONS, sections, os) \
    X(RK_ORDER_ROWS, rows, or)
/* How an fp8_tile row's tile scale is kept: as computed, or rounded up to a power of two. */
#define RK_TILE_SCALE_LIST(X)         \
    X(RK_TILE_F32, f32, f32)          \
    X(RK_TILE_POW2, pow2, pow2)
/* What the read-back op writes for a row without a valid slot. */
#define RK_READ_NEG_LIST(X)          \
    X(RK_READ_ZERO, zero, rzero)     \
    X(RK_READ_SKIP, skip, rskip)
/* clang-format on */

#define RK_ENUMERATOR_(e, spelling, token) e,
typedef enum { RK_VENDOR_LIST(RK_ENUMERATOR_) } rk_vendor;
typedef enum { RK_COMPILER_LIST(RK_ENUMERATOR_) } rk_compiler;
typedef enum { RK_FP8_LIST(RK_ENUMERATOR_) } rk_fp8_fmt;
typedef enum { RK_ROPE_LIST(RK_ENUMERATOR_) } rk_rope;
typedef enum { RK_COS_SIN_LIST(RK_ENUMERATOR_) } rk_cos_sin;
typedef enum { RK_SCALE_LIST(RK_ENUMERATOR_) } rk_scale;
typedef enum { RK_NEG_LIST(RK_ENUMERATOR_) } rk_neg;
typedef enum { RK_TILE_SCALE_LIST(RK_ENUMERATOR_) } rk_tile_scale;
typedef enum { RK_READ_NEG_LIST(RK_ENUMERATOR_) } rk_read_neg;
typedef enum { RK_NORM_WEIGHT_LIST(RK_ENUMERATOR_) } rk_norm_weight;
typedef enum { RK_NORM_ROUND_LIST(RK_ENUMERATOR_) } rk_norm_round;
typedef enum { RK_NORM_OVER_LIST(RK_ENUMERATOR_) } rk_norm_over;
typedef enum { RK_Q_NORM_LIST(RK_ENUMERATOR_) } rk_q_norm;
typedef enum { RK_ORDER_LIST(RK_ENUMERATOR_) } rk_order;
#undef RK_ENUMERATOR_

/* An enum's table, built from its list (gen/util.c). */
typedef struct rk_spelling {
    int value;
    const char *name;  /* spelling */
    const char *token; /* kernel-name token */
} rk_spelling;
typedef struct rk_enum {
    int n;
    const rk_spelling *v;
} rk_enum;
extern const rk_enum rk_vendor_enum, rk_compiler_enum, rk_fp8_enum, rk_rope_enum, rk_cos_sin_enum, rk_scale_enum,
    rk_neg_enum, rk_kv_enum, rk_qform_enum, rk_index_enum, rk_qdtype_enum, rk_layout_enum, rk_op_enum,
    rk_tile_scale_enum, rk_read_neg_enum, rk_norm_enum, rk_norm_weight_enum, rk_norm_round_enum, rk_norm_over_enum,
    rk_q_norm_enum, rk_order_enum;
/* The enums of a cache record (gen/record.h), tables in gen/record.c. */
extern const rk_enum rk_elem_enum, rk_scale_type_enum, rk_scale_rule_enum, rk_block_conv_enum, rk_scale_at_enum,
    rk_outer_enum, rk_read_scale_enum;

/* The spelling / token of a value; NULL for a value not in the table. */
const char *rk_enum_name(const rk_enum *e, int value);
const char *rk_enum_token(const rk_enum *e, int value);

/* Typed shorthands for rk_enum_name. */
const char *rk_vendor_name(rk_vendor v);
const char *rk_compiler_name(rk_compiler c);
const char *rk_fp8_name(rk_fp8_fmt f);
const char *rk_rope_name(rk_rope r);
const char *rk_cos_sin_name(rk_cos_sin c);
const char *rk_scale_name(rk_scale s);
const char *rk_neg_name(rk_neg n);
const char *rk_kv_name(ropekv_kv_dtype k);
const char *rk_qform_name(ropekv_q_form q);
const char *rk_idx_name(ropekv_index i);
const char *rk_qdtype_name(ropekv_q_dtype q);
const char *rk_layout_name(ropekv_kv_layout l);
const char *rk_op_name(ropekv_op o);
const char *rk_norm_name(ropekv_norm n);

/* ---- architecture table (specs/archs.lua) ---------------------------------------------------- */
#define RK_NAME_MAX 32
#define RK_MAX_ARCHS 32
#define RK_MAX_TARGETS 16

typedef struct rk_arch {
    char name[RK_NAME_MAX]; /* "gfx942", "sm_90", "host" */
    rk_vendor vendor;
    int wave;            /* 32 or 64 */
    rk_fp8_fmt fp8;      /* the format the target's fp8 cache bytes use */
    int fp8_hw;          /* 1: hardware f32->fp8 conversion */
    int bf16_hw;         /* 1: hardware f32->bf16 conversion */
    int vec_bytes;       /* bytes per lane per global access (16) */
    int block;           /* threads per block (launches of fewer than wide_from chunks) */
    int wide_block;      /* threads per block in launches of at least wide_from chunks (the spec's default: block) */
    int64_t wide_from;   /* (the spec's default: 2^30) */
    int chunks;          /* 16-byte output chunks per thread in large launches (1..8) */
    int64_t chunks_from; /* launches of at least this many chunks use `chunks`; smaller ones 1 */
    /* the read-back op's chunks and chunks_from (the spec's defaults: the two above) */
    int read_chunks;
    int64_t read_chunks_from;
    int nt_stores;   /* 1: non-temporal (streaming) stores for q_out and cache rows */
    int pdl;         /* 1: programmatic dependent launch (NVIDIA sm_90+): the kernel waits for
                                 the previous grid before its first memory access, so its launch can
                                 overlap that grid's tail */
    int family;      /* 1: compiled for the target's family-specific variant (NVIDIA sm_XYf: the conversions
                                 of its family, e.g. cvt e2m1x2 on sm_100f / sm_103f / sm_120f; the code runs on
                                 every GPU of the family): rk_arch_code */
    int e2m1_hw;     /* 1: hardware f32->e2m1 conversion (AMD: the spec's e2m1_hw, gfx950's
                                 v_cvt_scalef32_pk_fp4_f32; NVIDIA: family) */
    int write_pairs; /* 1: a KV-only write launch of token groups may give a latent lane two chunks (rk_write_pairs;
                                 the spec's default: 1 but on AMD, whose rows keep a chunk a lane) */
    rk_compiler compiler; /* preferred compiler family */
    char options[256];    /* default compiler options, space separated */
} rk_arch;

typedef struct rk_arch_table {
    int n;
    rk_arch a[RK_MAX_ARCHS];
} rk_arch_table;

const rk_arch *rk_arch_find(const rk_arch_table *t, const char *name);
/* The most threads a block of this row's launches has: the kernel's launch bound. */
int rk_arch_max_block(const rk_arch *a);
/* The compiler's target for a device (or compile-only) target of row a: target itself, or with a->family the
 * family-specific one (sm_100 -> sm_100f). Into out (cap bytes); returns out, or NULL when it does not fit. Pure. */
const char *rk_arch_code(const rk_arch *a, const char *target, char *out, size_t cap);

/* ---- cache records (gen/record.h; the library specs/records.lua) ------------------------------ */
#define RK_RECORDS_MAX 32 /* records in a library */
#define RK_SPEC_RECORDS 8 /* records a model spec lists */
typedef struct rk_record_lib {
    int n;
    rk_record r[RK_RECORDS_MAX];
} rk_record_lib;

/* Reads a records library (the text of specs/records.lua: `return { records = { {...}, ... } }`) in the Lua
 * sandbox; every record is checked with rk_record_check. An entry may take an earlier one as its base
 * ({ like = "name", <keys that differ> }). Errors as rk_spec_load's, naming file and key. */
int rk_records_load(const char *file, const char *text, size_t len, rk_record_lib *out, rk_err *err);
/* The built-in library (specs/records.lua, embedded at build time). */
int rk_records_builtin(rk_record_lib *out, rk_err *err);
/* The record named name, or NULL. */
const rk_record *rk_record_find(const rk_record_lib *lib, const char *name);

/* ---- model spec (specs/<model>.lua) ---------------------------------------------------------- */
/* How an output becomes fp8 e4m3: the spec's `fp8` table (the KV row) and `q_fp8` table (the query). */
typedef struct rk_fp8_policy {
    rk_scale scale;    /* scale convention with the launch's scale (k_scale, q_scale) */
    float sat_ocp;     /* saturation bound used with OCP bytes (<= 448) */
    float sat_fnuz;    /* saturation bound used with FNUZ bytes (<= 240) */
    int rope_bf16;     /* 1: round the rope part to bf16 before the fp8 conversion */
    char matches[128]; /* whose convention this is, in the spec's words (documentation; "" if unsaid) */
} rk_fp8_policy;

/* The spec's `fp8_tile` table: the tile-scaled row (include/ropekv.h, ROPEKV_KV_FP8_TILE). Byte offsets in
 * the row: the latent's fp8 bytes at 0, the L / tile float32 scales at scales_at, the bf16 rope part at
 * rope_at; the row is row_bytes long (the end of its last part). */
typedef struct rk_tile_policy {
    int tile;                /* values per tile: a multiple of 8 dividing L, tile / 8 lanes a power of two <= 32 */
    rk_tile_scale scale;     /* f32 or pow2 */
    float sat_ocp, sat_fnuz; /* the bound amax maps to (scale = amax / sat), per target format */
    int scales_at, rope_at, row_bytes;
    char matches[128]; /* whose writer this is, in the spec's words */
    char readers[256]; /* the readers (engines' kernels) that read the row right, in the spec's words ("" if unsaid) */
} rk_tile_policy;

/* The spec's `kv_norm` table: the kv_a RMSNorm of c_kv (kv_lora_rank values) that norm variants fuse. */
typedef struct rk_norm_policy {
    rk_norm_weight weight; /* the weight's dtype */
    float eps;             /* added to the mean square */
    rk_norm_round round;   /* twice or once (see RK_NORM_ROUND_LIST) */
    rk_norm_over over;     /* the latent, or the whole head (its weight then has L + R values) */
    char matches[128];
} rk_norm_policy;

/* The spec's `q_norm` table: a weightless RMSNorm of each query head over its W values, before the rotation. */
typedef struct rk_q_norm_policy {
    rk_q_norm norm; /* none, or rms */
    float eps;
    char matches[128];
} rk_q_norm_policy;

typedef struct rk_spec {
    char name[64];  /* spec name, [a-z0-9_]+ */
    char file[256]; /* file it came from (for messages and headers) */
    char description[256];
    int kv_lora_rank; /* L */
    int rope_dim;     /* R (qk_rope_head_dim) */
    rk_rope rope;
    rk_cos_sin cos_sin;
    int n_pos;
    ropekv_index pos[2]; /* position index types to build */
    int n_slot;
    ropekv_index slot[2]; /* slot index types to build */
    int n_kv;
    ropekv_kv_dtype kv[3];
    rk_fp8_policy fp8; /* an fp8 cache row */
    int n_qdt;
    ropekv_q_dtype q_dtypes[2]; /* query output dtypes to build */
    int n_layout;
    ropekv_kv_layout layouts[3]; /* KV layouts to build */
    rk_fp8_policy q_fp8;         /* an fp8 query output */
    rk_tile_policy tile;         /* an fp8_tile row */
    int n_ops;
    ropekv_op ops[2];     /* kernel families to build: write, read */
    rk_read_neg read_neg; /* read: a row without a valid slot */
    int n_norms;
    ropekv_norm norms[3];    /* write kernels: the fused kv_a RMSNorm choices to build */
    rk_norm_policy norm;     /* its arithmetic (when norms lists more than none) */
    rk_q_norm_policy q_norm; /* the query heads' norm (a fact of the model: every write kernel with a query has it) */
    rk_neg negative_slot;
    int n_q;
    ropekv_q_form q[4];
    int sanitize; /* 1: NaN -> 0, +-inf -> +-max finite in the KV row */
    int n_targets;
    char targets[RK_MAX_TARGETS][RK_NAME_MAX];
    /* The cache records the spec lists (`records`: library names, tables of their own, or { like = name, ... }),
     * each checked against kv_lora_rank and qk_rope_head_dim and with rk_record_check. With the kv dtypes' rows they
     * are the rows a caller chooses from (rk_spec_rows); one named as a kv dtype is that dtype's row. */
    int n_records;
    rk_record records[RK_SPEC_RECORDS];
} rk_spec;

/* Load a spec file's text in the Lua sandbox and validate it.
 * file is used in messages only. Binary chunks are refused. Text longer than RK_SPEC_TEXT_MAX bytes is
 * refused before it runs (ROPEKV_ERR_SPEC_LIMIT): every way a spec comes in (ropekv_load_spec,
 * ropekv_load_spec_text, ropekv-gen --spec, the built-in ones) goes through here. */
#define RK_SPEC_TEXT_MAX ((size_t)1 << 20)
int rk_archs_load(const char *file, const char *text, size_t len, rk_arch_table *out, rk_err *err);
int rk_spec_load(const char *file, const char *text, size_t len, const rk_arch_table *archs, rk_spec *out, rk_err *err);
/* The same with the records library a spec's `records` names are looked up in; lib NULL: the built-in library
 * (read from its embedded text when the spec names a record, as rk_spec_load does). */
int rk_spec_load_lib(const char *file, const char *text, size_t len, const rk_arch_table *archs,
                     const rk_record_lib *lib, rk_spec *out, rk_err *err);

/* ---- kernel ABI: templates/args.h, shared with the kernel ------------------------------------------ */
typedef int64_t rk_i64;
#include "args.h"

/* ---- the kernel description -----------------------------------------------------------------------
 * The choices a caller makes (one per enumerated dimension of a spec). */
typedef struct rk_choice {
    ropekv_kv_dtype kv;
    ropekv_q_form q;
    ropekv_index pos;
    ropekv_index slot;
    ropekv_q_dtype q_dtype;
    ropekv_kv_layout layout;
    ropekv_op op;
    ropekv_norm norm;
    int record; /* the row: 0, kv's (a kv dtype's row, rk_record_of_kv); i >= 1, the spec's records[i - 1] (kv is
                   then ignored, and canonical: bf16) */
} rk_choice;

/* The kinds of a parameter's value (gen/params.def). */
typedef enum { RK_PK_INT, RK_PK_FLOAT, RK_PK_BOOL, RK_PK_ENUM } rk_param_kind;

/* One kernel: a spec on a target with one choice per enumerated dimension, and every code parameter that
 * follows from them. It is the only source of the variant key, the kernel name (formatted for people and
 * cache keys, never parsed back), the template bindings (gen/render.c), the launch plan (rk_launch_plan),
 * the argument rules (runtime/args_check.c) and the public view (rk_desc_views). Its parameters are the rows
 * of gen/params.def: the choices (kv, q, pos, slot, q_dtype, layout, op, norm; the read-back op has q none,
 * pos int64 and q_dtype bf16; rope none has pos int64 and cos_sin f32_cat: it reads neither), and the code parameters: L, R, rope, cos_sin, the target's fp8 byte format,
 * the fp8 policies of the cache row (kv8_*) and of the query (q8_*), an fp8_tile row's layout, row_bytes,
 * the negative-slot rules, sanitize and the fused kv_a RMSNorm's arithmetic. A parameter that does not apply
 * holds a canonical value (0, or the first spelling), so identical kernels get identical names. */
typedef struct rk_desc {
    const rk_spec *spec; /* the model spec (its file and description head the emitted source) */
    const rk_arch *arch; /* the target's row: wave, block, chunks, pdl, hardware conversions */
#define RK_PARAM(field, type, kind, table, cxx, constant, binding, pub, applies, comment) type field;
#include "params.def"
    int record; /* the choice's row: 0 for the kv dtype's, i >= 1 for spec->records[i - 1] (kv is then bf16, canonical) */
    rk_record rec;  /* the cache row (rk_record_of_kv of the kv dtype, or the spec's record): what the writer and the
                       reader specialize on; for the read-back op, sat and rope_bf16 are 0 (the writer's, not the
                       reader's) */
    char key[192];  /* spec/target/row/q/pos=.../slot=...[/q_dtype=fp8_e4m3][/layout=paged|split], or for read
                       spec/target/row/read/slot=...[/layout=...]; row: the record's name (a kv dtype's spelling) */
    char name[224]; /* extern "C" kernel name: every code parameter, readable */
} rk_desc;

/* The public view of a description (ropekv_kernel_param): every row of gen/params.def with a public name, in
 * its order, as a name, a kind and text. Values point into the description, its spec and arch row, the
 * spelling tables or text[]: a view is valid while they are and must not be copied apart from them. */
enum {
    RK_VIEWS_MAX = 0
#define RK_PARAM(field, type, kind, table, cxx, constant, binding, pub, applies, comment) +1
#define RK_VIEW_TEXT(pub, expr, applies) +1
#define RK_VIEW_NUMBER(pub, kind, expr) +1
#include "params.def"
};
typedef struct rk_view {
    const char *name;
    ropekv_param_kind kind;
    const char *value;
} rk_view;
typedef struct rk_views {
    int n;
    rk_view v[RK_VIEWS_MAX];
    char text[RK_VIEWS_MAX][32]; /* the numbers' text */
} rk_views;
/* pdl: whether the context launches with programmatic dependent launch (the row's pdl is d->arch->pdl). */
void rk_desc_views(const rk_desc *d, int pdl, rk_views *out);

/* ---- the tensors of a description (gen/tensors.def) -------------------------------------------------------
 * What a kernel reads and writes, as data: the argument checks (runtime/args_check.c) walk it once per launch, and
 * the public view (ropekv_kernel_tensor) shows it. Dimensions are symbols: the description fixes some (L, R, W,
 * R/2, row bytes, 1), the launch's args the others (include/ropekv.h lists them). */
#define RK_SYM_LIST(X)                 \
    X(RK_SYM_NONE, "")                 \
    X(RK_SYM_ONE, "1")                 \
    X(RK_SYM_T, "T")                   \
    X(RK_SYM_TKV, "Tkv")               \
    X(RK_SYM_P, "P")                   \
    X(RK_SYM_H, "H")                   \
    X(RK_SYM_HQ, "Hq")                 \
    X(RK_SYM_MAX_POS, "max_pos")       \
    X(RK_SYM_KV_ROWS, "kv_rows")       \
    X(RK_SYM_BLOCKS, "blocks")         \
    X(RK_SYM_BLOCK_SIZE, "block_size") \
    X(RK_SYM_L, "L")                   \
    X(RK_SYM_R, "R")                   \
    X(RK_SYM_W, "W")                   \
    X(RK_SYM_HALF_R, "R/2")            \
    X(RK_SYM_ROW_BYTES, "row_bytes")   \
    X(RK_SYM_ROPE_BYTES, "rope_bytes") \
    X(RK_SYM_OUT_W, "out_w")
#define RK_SYM_ENUM_(e, text) e,
typedef enum rk_sym { RK_SYM_LIST(RK_SYM_ENUM_) RK_SYM_COUNT } rk_sym;
#undef RK_SYM_ENUM_
/* The element types: X(enumerator, public spelling, bytes). */
#define RK_DTYPE_LIST(X)        \
    X(RK_DT_BF16, "bf16", 2)    \
    X(RK_DT_F32, "f32", 4)      \
    X(RK_DT_FP8, "fp8_e4m3", 1) \
    X(RK_DT_U8, "uint8", 1)     \
    X(RK_DT_I32, "int32", 4)    \
    X(RK_DT_I64, "int64", 8)    \
    X(RK_DT_VARIES, "", 0) /* a family's tensor whose kernels differ (rk_family_tensors) */
#define RK_DTYPE_ENUM_(e, text, bytes) e,
typedef enum rk_dtype { RK_DTYPE_LIST(RK_DTYPE_ENUM_) } rk_dtype;
#undef RK_DTYPE_ENUM_
/* How a tensor's strides keep its rows apart: RK_ROWS_ANY, two strided dimensions in either nesting order (the
 * query's tokens and heads); RK_ROWS_TOKEN, rows at one stride (a token's); RK_ROWS_CACHE, a cache part's rows at one
 * stride (flat) or entries inside blocks (paged, split); RK_DENSE, no strides (packed). */
typedef enum rk_rows_rule { RK_ROWS_ANY, RK_ROWS_TOKEN, RK_ROWS_CACHE, RK_DENSE } rk_rows_rule;
#define RK_TENSOR_RANK 3
#define RK_NO_STRIDE ((size_t)-1)
typedef struct rk_tensor {
    const char *name; /* the ropekv_args field of its pointer */
    size_t at;        /* its offset in ropekv_args */
    ropekv_tensor_access access;
    ropekv_tensor_need need;
    rk_dtype dtype;
    int elem; /* bytes of an element */
    int rank;
    rk_sym dim[RK_TENSOR_RANK];
    size_t stride_at[RK_TENSOR_RANK - 1]; /* the ropekv_args int64 field of dim i's stride, or RK_NO_STRIDE */
    const char *stride[RK_TENSOR_RANK - 1];
    rk_rows_rule rule;
    int align, unit;   /* pointer alignment (bytes); strides a multiple of unit elements */
    const char *label; /* its name in messages */
    const char *when;  /* why it is needed, for the message of a NULL pointer ("" for none) */
} rk_tensor;
#define RK_TENSORS_MAX 16
/* The tensors d touches, in the order of gen/tensors.def, into out[0 .. cap): returns their count (at most
 * RK_TENSORS_MAX; out may hold fewer than the count when cap is smaller). Pure. */
int rk_tensors(const rk_desc *d, rk_tensor *out, int cap);
/* Every tensor some kernel of a family may take: the write op with q form q, or the read op (q ignored), over every
 * spec, kv dtype, layout, q dtype, index dtype and norm, in the order of gen/tensors.def (first rows), without a spec.
 * access: written where some kernel writes it; need: the kernels' own where all of them take it with one need, else
 * ROPEKV_NEED_OPTIONAL; dtype RK_DT_VARIES and elem 0, rank 0 (no dims, no strides), align and unit 0 and when ""
 * where the kernels differ. Returns the count (out may hold fewer when cap is smaller). Pure. */
int rk_family_tensors(ropekv_op op, ropekv_q_form q, rk_tensor *out, int cap);
/* A symbol's public spelling, and its size where the description fixes it (L, R, W, R/2, row bytes, 1), else -1. */
const char *rk_sym_name(rk_sym s);
int64_t rk_sym_size(const rk_desc *d, rk_sym s);
const char *rk_dtype_name(rk_dtype t);

/* x as the shortest decimal ("%.Ng", N <= 9) that reads back as x: "448", "1e-06", "0". */
void rk_float_text(float x, char *out, size_t cap);

/* The description of (spec, arch, choices), whether or not the spec lists them (the build matrix
 * builds any spec for any row). ROPEKV_OK, or ROPEKV_ERR_ARG for a choice outside its enum,
 * ROPEKV_ERR_SPEC_TARGET for a target that cannot be spelled in a kernel name. */
int rk_desc_make(const rk_spec *spec, const rk_arch *arch, const rk_choice *c, rk_desc *out, rk_err *err);

/* The choices d was made from (rk_desc_make(d->spec, arch, &c) describes the same variant on another row). */
rk_choice rk_desc_choice(const rk_desc *d);

/* The same for a variant a caller asks for: ROPEKV_ERR_UNSUPPORTED (naming what the spec lists) unless
 * the spec lists the target and every choice. */
int rk_desc_listed(const rk_spec *spec, const rk_arch *arch, const rk_choice *c, rk_desc *out, rk_err *err);

/* The geometry's rules, in one place: why a spec of rope part R (qk_rope_head_dim) has no kernel of q form q or
 * layout layout, as the rule's words, or NULL. R = 0 (no rope part: the row is the latent): q forms zero_copy and
 * inplace write only the query's rope part, and the split layout keeps the rope part in a cache of its own
 * (rk_desc_make refuses them, the spec's loader leaves them out of its lists). */
const char *rk_geometry_refuses(int R, ropekv_q_form q, ropekv_kv_layout layout);
/* 1 when a kv dtype's row can lie in a layout: a tile-scaled row (fp8_tile) is one row, never split in two caches. */
int rk_layout_fits(ropekv_kv_dtype kv, ropekv_kv_layout layout);
/* The same for any record: split only where it has a split_at, a page-tail record only paged. */
int rk_record_fits(const rk_record *r, ropekv_kv_layout layout);
/* Why the kernels cannot write or read record r yet (a per-token outer scale), or NULL when they can. */
const char *rk_record_unsupported(const rk_record *r);

/* The rows a caller chooses from (the kv dimension): the spec's kv dtypes (kv_dtypes, each named by its spelling),
 * then each record of its `records` not named as a listed kv dtype (a record named as an unlisted kv dtype is that
 * dtype's row). rk_spec_rows counts them; rk_spec_row sets row i's kv and record in *c (when not NULL) and its
 * record in *r (when not NULL), and returns its name. */
int rk_spec_rows(const rk_spec *s);
const char *rk_spec_row(const rk_spec *s, int i, rk_choice *c, rk_record *r);
/* The row named name: ROPEKV_OK with its kv and record set in *c, or ROPEKV_ERR_UNSUPPORTED naming the spec's rows. */
int rk_spec_row_find(const rk_spec *s, const char *name, rk_choice *c, rk_err *err);
/* A digest of everything in a record a kernel is specialized on (geometry, layout, segments, conv; not its name,
 * words or readers). */
uint32_t rk_record_digest(const rk_record *r);
/* Bytes of one element of d's cache (its strides count them): 2 for a bf16 kv dtype's row, else 1. */
int rk_desc_kv_elem(const rk_desc *d);

#define RK_MAX_ROWS (3 + RK_SPEC_RECORDS) /* a spec's rows: its kv dtypes and records (rk_spec_rows) */
#define RK_MAX_VARIANTS_PER_SPEC (RK_MAX_TARGETS * RK_MAX_ROWS * (7 * 2 * 2 * 3 * 3 + 2 * 3))

/* Every variant a spec lists, in a fixed order (targets, rows (rk_spec_rows: kv dtypes, then records; a record the
 * kernels cannot write yet, rk_record_unsupported, is left out), then the write variants: q forms, q dtypes,
 * positions, slots, layouts as listed in the spec, q form none once with a bf16 query, positions once under rope none
 * (nothing is rotated, no positions are read: rk_desc_make makes them int64); then the read variants:
 * slots, layouts): what `ropekv-gen list / emit / selftest` go through. Returns the count, or -1 with err
 * set (unknown target). The library never enumerates: it describes the one variant asked for. */
int rk_variants(const rk_spec *spec, const rk_arch_table *archs, rk_desc *out, int cap, rk_err *err);

/* How one launch is cut, from the description and a->tokens, a->heads: fills the plan fields of a
 * (templates/args.h; prefetch is the launcher's), *total = grid_groups * lanes chunks and
 * *blocks = ceil(total / (*block * a->chunks)) blocks of *block threads (the row's block, or its wide_block in a
 * launch of at least wide_from chunks). Every launcher (runtime, tests, benchmarks) uses it. */
void rk_launch_plan(const rk_desc *d, rk_args *a, int64_t *total, int64_t *blocks, int *block);

/* 1 when the kernel writes fp8 bytes (an fp8 cache row or an fp8 query): where the target has the
 * hardware conversion, its code must use it. */
/* The values the fused kv norm sums over: L, or L + R with kv_norm.over head (its weight has as many). */
int rk_norm_values(const rk_desc *d);
int rk_desc_writes_fp8(const rk_desc *d);
/* 1 when d writes e2m1 values (a record with an e2m1 segment) */
int rk_desc_writes_e2m1(const rk_desc *d);

/* Lanes of one head's query rope part: R/8 (a 16-byte chunk each), 0 for q form none. The kernel's QR. */
int rk_query_rope_lanes(const rk_desc *d);

/* Tokens a lane group of a write launch may cover (the kernel's RK_KV_GROUP; rk_launch_plan chooses it or 1 per
 * launch: kv_group): for q form none with sections (no query lanes), wave / gcd(wave, R/8), so that the group's R/8
 * rope lanes a token fill whole waves; else 1. */
int rk_kv_group(const rk_desc *d);

/* The 16-byte output chunks a thread of d's kernels takes in a launch of at least *from chunks (from may be NULL):
 * the arch row's chunks and chunks_from, or for the read-back op its read_chunks and read_chunks_from. The kernel's
 * RK_CHUNKS (at most this many a thread) and rk_launch_plan's a->chunks. */
int rk_desc_chunks(const rk_desc *d, int64_t *from);

/* 1 when the read-back op may give a latent lane two output chunks in one load (16 e4m3 or 8 e2m1 bytes): rows whose
 * latent is one block-scaled e4m3 or e2m1 segment with blocks of an even number of chunks, at a byte offset aligned
 * to that load (fp8_tile rows, the NVFP4 records). rk_launch_plan does so in launches of at least the row's
 * chunks_from chunks (a.lanes = L/16 + R/8 instead of L/8 + R/8), where bandwidth counts more than a lane's
 * latency. The kernel's READ_PAIRS. */
int rk_read_pairs(const rk_desc *d);

/* 1 when a KV-only write launch of token groups (rk_kv_group) gives a latent lane two chunks of such a latent (the
 * same rows as rk_read_pairs' whose latent segment holds the latent alone, without a norm or a per-token scale, on
 * a row with write_pairs): its index math, slot,
 * block scale and store then serve sixteen values (a group's a.lanes = kv_group * (R/8 + L/16)). The kernel's
 * WRITE_PAIRS (RK_WRITE_PAIRS). */
int rk_write_pairs(const rk_desc *d);

/* Division by d (1 <= d < 2^31) without a divide: for every 0 <= n < 2^31, n / d == (n * mul) >> shift
 * (a 64-bit product), with shift = 31 + ceil(log2 d) and mul = ceil(2^shift / d) < 2^32. For d outside
 * that range mul = shift = 0 (the 64-bit entry, which divides, is used then). */
void rk_div_magic(int64_t d, int64_t *mul, int64_t *shift);

/* ---- CPU reference (gen/ref.c): the oracle ----------------------------------------------------
 * Computes exactly what a variant's kernel must write, on host pointers. */
void rk_ref_run(const rk_desc *v, const rk_args *a);

/* Scalar conversions used by the reference (exact semantics documented in gen/ref.c). */
uint32_t rk_f32_bits(float f); /* the float's bits, and back */
float rk_bits_f32(uint32_t u);
float rk_bf16_to_f32(uint16_t b);
uint16_t rk_f32_to_bf16(float f); /* RNE; any NaN -> 0x7fff */
float rk_fp8_to_f32(uint8_t b, rk_fp8_fmt fmt);
uint8_t rk_f32_to_fp8(float f, rk_fp8_fmt fmt); /* RNE, saturating to the format's max finite */
uint8_t rk_f32_to_e2m1(float f);                /* gen/record_codec.c: RNE to the e2m1 grid, saturating at 6 */
float rk_e2m1_to_f32(uint8_t code);             /* the low nibble's value */

/* Today's row formats as records (gen/record_codec.c): the spec's fp8 policy (an e4m3 segment each for the latent
 * and the rope part, the launch's tensor scale), its fp8_tile table (an e4m3 latent in tiles with float32 scales,
 * a bf16 rope part), or bf16 (two bf16 segments), for the spec's L and R: 2 (L + R) bytes split at 2 L, L + R split at
 * L, the tile table's row_bytes (no split). */
void rk_record_of_kv(const rk_spec *spec, ropekv_kv_dtype kv, rk_record *out);

/* ---- growable text buffer ---------------------------------------------------------------------- */
typedef struct rk_buf {
    char *p; /* NUL-terminated when len > 0 */
    size_t len, cap;
} rk_buf;
int rk_buf_put(rk_buf *b, const char *s, size_t n); /* ROPEKV_OK or ROPEKV_ERR_NOMEM */
int rk_buf_printf(rk_buf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void rk_buf_free(rk_buf *b);

/* ---- templates (gen/render.c) -------------------------------------------------------------------- */
typedef struct rk_binding {
    const char *name;
    const char *value;
} rk_binding;

/* Replaces every ${name} in tpl by its binding. An unknown placeholder, a binding the template never
 * uses, or a "${" without a closing "}" is ROPEKV_ERR_RENDER naming the placeholder and line. */
int rk_render(const char *tpl, size_t len, const rk_binding *b, int n, rk_buf *out, rk_err *err);

/* The full source of a kernel: the generated-file header, then templates/params.hip, prelude.hip,
 * args.h and kernel.hip rendered with the description's values. Deterministic. */
int rk_emit(const rk_desc *d, rk_buf *out, rk_err *err);


/* The concatenated template text the kernels are rendered from (for hashing into cache keys). */
int rk_template_text(rk_buf *out, rk_err *err);

/* Files embedded at build time (templates/ and specs/ by base name); NULL if absent. */
const char *rk_embedded(const char *name, size_t *len);
const char *rk_embedded_at(size_t i, size_t *len); /* name of the i-th file, NULL past the end */

/* ---- a loaded set of specs (gen/catalog.c) --------------------------------------------------------- */
#define RK_MAX_SPECS 64
typedef struct rk_catalog {
    rk_arch_table archs;
    rk_record_lib records; /* specs/records.lua: the records model specs name */
    int n_specs;
    rk_spec specs[RK_MAX_SPECS];
} rk_catalog;

/* archs.lua, records.lua and every model spec embedded at build time. */
int rk_catalog_load_embedded(rk_catalog *c, rk_err *err);
/* One more spec (text of a file); a spec with the same name replaces the old one. */
int rk_catalog_add(rk_catalog *c, const char *file, const char *text, size_t len, rk_err *err);
const rk_spec *rk_catalog_find(const rk_catalog *c, const char *name);

/* Reads an embedded spec by its name ("<name>.lua" under specs/): ROPEKV_OK, ROPEKV_ERR_NO_SPEC when
 * none is built in, or the spec's load error. A spec file's name must equal its base name. */
int rk_spec_builtin(const char *name, const rk_arch_table *archs, rk_spec *out, rk_err *err);

#endif
