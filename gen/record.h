/* Cache records as data: what one token's row of an MLA cache holds, byte for byte.
 *
 * A record is a short list of segments over the row's logical values x[0, L + R) (the latent c_kv first, then the
 * rope part k_pe after RoPE). Each segment stores x[from, from + n) as one element type at a byte offset of the
 * row, optionally cut into blocks of `block` values that share a scale (stored inline in the row, at the end of the
 * page, or nowhere when the launch passes one per tensor). A segment that spans the latent/rope boundary quantizes
 * the rotated rope values with the latent (DeepSeek-V4.1). Bytes of the row no segment or scale covers are padding,
 * written as zeros. Everything a writer, a reader and the reference need follows from this description:
 * the generator validates it (rk_record_check), the templates specialize the one generic writer and reader from
 * its constexpr tables, and gen/record.c encodes and decodes rows for the reference and the tests.
 *
 * Records are spec data: specs/records.lua holds the published ones by name, a model spec lists the names it
 * stores (or describes its own), docs/formats.md draws each with its engine references. */
#ifndef RK_RECORD_H
#define RK_RECORD_H

#include <stdint.h>

struct rk_err; /* gen/rk.h */

/* clang-format off */
/* Element types of a segment: X(enumerator, spelling, token, bits). e4m3 is the target's fp8 byte format (OCP, or
 * FNUZ on gfx942); e2m1 packs two values per byte, the first in the low nibble. */
#define RK_ELEM_LIST(X)              \
    X(RK_EL_BF16, bf16, bf16, 16)    \
    X(RK_EL_E4M3, e4m3, e4m3, 8)     \
    X(RK_EL_E2M1, e2m1, e2m1, 4)
/* How a block's scale is stored: none (no blocks: the segment is stored as it is, or against the launch's
 * per-tensor scale), f32, one UE8M0 byte (2^(b - 127); 0xff is NaN), or one e4m3 byte (the target's format). */
#define RK_SCALE_TYPE_LIST(X)        \
    X(RK_ST_NONE, none, none)        \
    X(RK_ST_F32, f32, f32)           \
    X(RK_ST_UE8M0, ue8m0, ue8m0)     \
    X(RK_ST_E4M3, e4m3, e4m3)
/* A block scale's rule, s = max(amax / sat, floor) first (sat: the element's bound, per fp8 format; floor: the
 * segment's, FLT_MIN unless it names one):
 *   exact   s as it is (an f32 scale; an e4m3 scale rounds s to nearest even, saturating)
 *   pow2_up s rounded up to a power of two (the UE8M0 rule; on an f32 scale: f32 holding 2^k)
 *   up      an e4m3 scale: the least e4m3 value >= s (saturating at the format's largest)
 *   exact_zero  an e4m3 scale: as exact, but an s that rounds to zero is stored as 0x00 and the block's values are
 *           multiplied by 0 (zeros of their signs), where exact stores the least e4m3 value (0x01) */
#define RK_SCALE_RULE_LIST(X)                  \
    X(RK_SR_EXACT, exact, exact)               \
    X(RK_SR_POW2_UP, pow2_up, pow2)            \
    X(RK_SR_UP, up, up)                        \
    X(RK_SR_EXACT_ZERO, exact_zero, exactzero)
/* How a block's values take its scale d (as stored, decoded): div, y / d (an IEEE division); mul_recip, y * (1 / d)
 * (the reciprocal an f32 first, as writers that multiply do). */
#define RK_BLOCK_CONV_LIST(X)                 \
    X(RK_BC_DIV, div, div)                    \
    X(RK_BC_MUL_RECIP, mul_recip, mul_recip)
/* Where a segment's block scales lie: inline at a byte offset of the row; in the page tail (paged layout only:
 * after a page's block_size rows, block_size tails of tail_bytes, the token's scales at an offset of its tail). */
#define RK_SCALE_AT_LIST(X)              \
    X(RK_SA_INLINE, inline, inl)         \
    X(RK_SA_PAGE_TAIL, page_tail, tail)
/* An outer scale over a whole segment (blocks or not): none; tensor (the launch's k_scale, one float32 for every
 * token; a per-layer scale is the same thing to one launch); token (a float32 per token stored in the row at
 * outer_at: max over the segment's blocks, the blocks' scales then relative to it). */
#define RK_OUTER_LIST(X)                 \
    X(RK_OUT_NONE, none, none)           \
    X(RK_OUT_TENSOR, tensor, tensor)     \
    X(RK_OUT_TOKEN, token, token)
/* clang-format on */

#define RK_ENUMERATOR_(e, spelling, token, ...) e,
typedef enum { RK_ELEM_LIST(RK_ENUMERATOR_) } rk_elem;
typedef enum { RK_SCALE_TYPE_LIST(RK_ENUMERATOR_) } rk_scale_type;
typedef enum { RK_SCALE_RULE_LIST(RK_ENUMERATOR_) } rk_scale_rule;
typedef enum { RK_BLOCK_CONV_LIST(RK_ENUMERATOR_) } rk_block_conv;
typedef enum { RK_SCALE_AT_LIST(RK_ENUMERATOR_) } rk_scale_at;
typedef enum { RK_OUTER_LIST(RK_ENUMERATOR_) } rk_outer;
#undef RK_ENUMERATOR_

#define RK_RECORD_SEGMENTS 4
#define RK_RECORD_READERS 4

typedef struct rk_segment {
    int from, n;         /* the logical values x[from, from + n) it stores */
    rk_elem elem;        /* their element type */
    int at;              /* byte offset of the first value in the row */
    int block;           /* values per scale block: 0 (no block scales), 16, 32, 64 or 128; divides n */
    rk_scale_type scale; /* the block scale's storage (RK_ST_NONE when block is 0) */
    rk_scale_rule rule;
    rk_scale_at scale_at; /* inline or page tail */
    int scales_at;        /* inline: byte offset of the n / block scales in the row; page tail: in the token's tail */
    float sat_ocp, sat_fnuz; /* the bound a block's amax maps to (s = amax / sat), per fp8 byte format; for an
                                unblocked e4m3 segment the clamp before conversion; 0 for bf16 */
    rk_outer outer;
    int outer_at;  /* token: byte offset of its float32 in the row */
    int rope_bf16; /* 1: values of the rope part are rounded to bf16 before they are quantized */
    float floor;   /* the least block scale before its rule (s = max(amax / sat, floor)); 0: FLT_MIN (rk_seg_floor) */
    rk_block_conv block_conv; /* how the block's values take its scale */
    int interleave; /* 0: block b's scale is scale b; k >= 2: scale (b % k) * (n / block / k) + b / k (the scales
                       stored as k runs: b = 0, k, 2k, ..., then b = 1, k + 1, ...) */
} rk_segment;

/* How a reader takes a block's scale back: exact (the stored value), bf16 (rounded to bf16 first, as FlashMLA's
 * sm_90 sparse decode does), pow2_down (2^floor(log2 s), an E8M0 reading toward zero, as FlashMLA's sm_100 sparse
 * decode does). A record names each reader it was checked for. */
#define RK_READ_SCALE_LIST(X)    \
    X(RK_RS_EXACT, exact, exact) \
    X(RK_RS_BF16, bf16, bf16)    \
    X(RK_RS_POW2_DOWN, pow2_down, pow2d)
#define RK_ENUMERATOR_(e, spelling, token) e,
typedef enum { RK_READ_SCALE_LIST(RK_ENUMERATOR_) } rk_read_scale;
#undef RK_ENUMERATOR_

typedef struct rk_reader {
    char name[64]; /* the engine kernel, e.g. "flashmla_sm100_sparse" */
    rk_read_scale scale;
} rk_reader;

typedef struct rk_record {
    char name[32];  /* [a-z0-9_]+ */
    int L, R;       /* the geometry it is for: its segments cover x[0, L + R) exactly once */
    int row_bytes;  /* bytes of one token's row */
    int split_at;   /* the split layout: bytes [0, split_at) in kv_cache, [split_at, row_bytes) in kv_rope_cache;
                       0 when the record cannot be split (a segment or scale straddles every boundary) */
    int tail_bytes; /* bytes of a token's page-tail part (page_tail scales), 0 for none */
    int conv;       /* how an RK_OUT_TENSOR segment takes the launch's k_scale: an rk_scale of gen/rk.h (mul_recip:
                       x * (1 / k_scale), div: x / k_scale, mul: x * k_scale); RK_SCALE_NONE (0) when no segment
                       has a tensor scale. Engines differ here, so it is the record's (a spec takes a library
                       record with its own convention: { like = "fp8", conv = "div" }) */
    int n_seg;
    rk_segment seg[RK_RECORD_SEGMENTS];
    int n_readers;
    rk_reader readers[RK_RECORD_READERS];
    char matches[160]; /* whose writer it matches, in the spec's words */
} rk_record;

/* Bits of one value of an element type (16, 8, 4); bytes of a segment's values (n * bits / 8); bytes of its
 * block scales (n / block of 4 (f32) or 1 (UE8M0, e4m3) bytes; 0 without blocks). gen/record.c. */
int rk_elem_bits(rk_elem e);
int rk_seg_bytes(const rk_segment *s);
int rk_seg_scale_bytes(const rk_segment *s);
/* The least block scale of a segment (its floor, FLT_MIN when it names none); the place of block b's scale among its
 * n / block scales (interleave). */
float rk_seg_floor(const rk_segment *s);
int rk_seg_scale_slot(const rk_segment *s, int b);

/* ---- gen/record.c: validation ----------------------------------------------------------------------------------
 * ROPEKV_OK, or ROPEKV_ERR_SPEC with a message naming the record, the segment (by index and its `from`) and the key
 * at fault: segments that leave a value of x[0, L + R) uncovered or cover one twice; byte ranges (values, inline
 * scales, outer scales) that overlap or pass row_bytes; misaligned offsets (bf16 values at 16 bytes, e4m3 at 8,
 * e2m1 at 4, f32 scales and outer scales at 4); a block that is not 16, 32, 64 or 128 or does not divide n; a scale
 * type without a block or a block without one; page-tail scales without tail_bytes room; a split_at that cuts a
 * segment or its scales. file names the spec in messages. */
int rk_record_check(const rk_record *r, const char *file, struct rk_err *err);

/* ---- gen/record_codec.c: the reference encoder and decoder ------------------------------------------------------
 * One token's logical values x[0, L + R) (floats as the writer holds them: the latent as read, or normalized; the
 * rope part after RoPE, before any rounding) into its row (row_bytes) and, for page-tail scales, its tail
 * (tail_bytes; NULL when the record has none), in fp8 byte format fmt, with the launch's tensor scale k_scale (an
 * RK_OUT_TENSOR segment, under convention conv) and sanitize (NaN -> 0, +-inf -> the largest finite value before
 * any amax). x[0, raw) are bf16 values as read (the latent, L; and with rope none the unrotated rope part, L + R): a
 * bf16 segment stores their bits (NaN payloads kept), where a rotated value is rounded. Padding bytes are written as
 * zeros. Bit-exact with the kernels' writer. */
void rk_record_encode(const rk_record *r, int fmt, const float *x, int raw, float k_scale, int conv, int sanitize,
                      uint8_t *row, uint8_t *tail);
/* The row back as reader rd reads it (NULL: ropekv's read op, scales exact), y[0, L + R) as floats before the
 * read op's bf16 rounding. */
void rk_record_decode(const rk_record *r, int fmt, const uint8_t *row, const uint8_t *tail, float k_scale, int conv,
                      const rk_reader *rd, float *y);

#endif
