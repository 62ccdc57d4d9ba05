/* The argument rules of a kernel, all read from its description: required pointers, strides that keep
 * rows apart, the alignment the 16-byte vector path needs, and the launch plan with the index width. */
#include <stdint.h>
#include <string.h>

#include "args_check.h"

void rk_args_from_api(const ropekv_args *a, rk_args *r) {
    memset(r, 0, sizeof *r);
#define COPY_(type, name) r->name = a->name;
    RK_ARGS_CALLER(COPY_)
#undef COPY_
}

#define CHECK(cond, status, ...)                                              \
    do {                                                                      \
        if (!(cond)) return (ropekv_status)rk_fail(err, status, __VA_ARGS__); \
    } while (0)

static int aligned(const void *p, size_t a) { return ((uintptr_t)p & (a - 1)) == 0; }

/* No tensor may span more than 2^57 bytes: no address space is larger (x86-64 with 5-level paging, AArch64's
 * 52 bits, the GPUs' virtual addresses), so args that claim more describe no buffer; below it every offset,
 * in elements or in bytes, is a signed 64-bit number with room to spare. */
#define BYTES_MAX ((int64_t)1 << 57)

/* n * st + w for n, st, w >= 0, or -1 when it passes BYTES_MAX (an element is at least a byte; caller values:
 * never overflows). */
static int64_t extent(int64_t n, int64_t st, int64_t w) {
    int64_t p, e;
    if (n < 0 || st < 0 || w < 0 || __builtin_mul_overflow(n, st, &p) || __builtin_add_overflow(p, w, &e) ||
        e > BYTES_MAX)
        return -1;
    return e;
}

/* Rows of width w at strides (st, sh) over T x H must not overlap (either nesting order). */
static int rows_disjoint(int64_t T, int64_t H, int64_t st, int64_t sh, int64_t w) {
    if (st < 0 || sh < 0) return 0;
    if (T == 0) return 1;
    const int64_t th = extent(H - 1, sh, w), ht = extent(T - 1, st, w); /* -1: past any stride */
    int ok_th = (H == 1 || sh >= w) && (T == 1 || (th >= 0 && st >= th));
    int ok_ht = (T == 1 || st >= w) && (H == 1 || (ht >= 0 && sh >= ht));
    return ok_th || ok_ht;
}

/* Largest element offset touched through (st, sh) plus one row, or -1 past BYTES_MAX. */
static int64_t span(int64_t T, int64_t H, int64_t st, int64_t sh, int64_t w) {
    const int64_t inner = extent(H - 1, sh, w);
    return inner < 0 ? -1 : extent(T - 1, st, inner);
}

/* One part of the KV rows in one cache (ropekv_kv_layout): `rows` slots of `w` elements, B a block, at
 * entry stride est and block stride bst (the flat layout is one block of every row). Entries of a block
 * and blocks may not overlap; the vector path needs the base `align`-byte aligned and the strides a
 * multiple of `unit` elements (16 and 8 for bf16 rows, 8 and 8 for fp8 rows, 16 and 16 for fp8_tile rows,
 * whose bf16 rope part is read and written 16 bytes at a time). *extent: the elements the part spans. */
static ropekv_status cache_part(const char *name, const char *est_name, const void *base, int64_t rows, int64_t B,
                                int64_t est, int64_t bst, int64_t w, int align, int unit, int64_t *ext, rk_err *err) {
    const int64_t per_block = rows < B ? rows : B, blocks = rows == 0 ? 0 : (rows - 1) / B + 1;
    const int64_t block_w = per_block > 0 ? extent(per_block - 1, est, w) : 0;
    CHECK(base, ROPEKV_ERR_NULL, "%s is NULL", name);
    CHECK(est >= 0 && bst >= 0, ROPEKV_ERR_STRIDE, "%s: %s %lld or its block stride %lld is negative", name, est_name,
          (long long)est, (long long)bst);
    CHECK(per_block <= 1 || est >= w, ROPEKV_ERR_STRIDE, "%s: %s %lld < row width %lld", name, est_name, (long long)est,
          (long long)w);
    CHECK(blocks <= 1 || (block_w >= 0 && bst >= block_w), ROPEKV_ERR_STRIDE,
          "%s: block stride %lld < %lld, the span of a block's %lld entries", name, (long long)bst, (long long)block_w,
          (long long)per_block);
    CHECK(aligned(base, (size_t)align) && est % unit == 0 && (blocks <= 1 || bst % unit == 0), ROPEKV_ERR_ALIGN,
          "%s must be %d-byte aligned with strides a multiple of %d elements", name, align, unit);
    *ext = blocks > 0 && block_w >= 0 ? extent(blocks - 1, blocks > 1 ? bst : 0, block_w) : blocks > 0 ? -1 : 0;
    return ROPEKV_OK;
}

/* A tensor the launch touches: its base, its extent in elements (-1 past BYTES_MAX) and an element's bytes. */
typedef struct tensor_span {
    const char *what;
    const void *base;
    int64_t elems, elem_bytes;
} tensor_span;

/* The last rule of every launch and its index width: no tensor may span more than BYTES_MAX bytes or end past
 * the top of the address space, and the 64-bit entry runs once a chunk index (with a block's worth of slack)
 * or a byte offset can reach 2^31 - 1 (the kernel turns a bf16 cache's element offsets into byte offsets in
 * its index type). Positions and slots are indexed by token, below 2^31. */
static ropekv_status index_width(const tensor_span *s, size_t n, rk_plan *pl, rk_err *err) {
    int64_t reach = pl->total + (int64_t)pl->block * pl->args.chunks;
    for (size_t i = 0; i < n; i++) {
        const int64_t bytes = s[i].elems >= 0 && s[i].elems <= BYTES_MAX / s[i].elem_bytes
                                  ? s[i].elems * s[i].elem_bytes
                                  : -1;
        CHECK(bytes >= 0 && bytes <= BYTES_MAX, ROPEKV_ERR_SHAPE,
              "%s: its strides and sizes reach past 2^57 bytes, more than any address space", s[i].what);
        CHECK((uintptr_t)s[i].base <= UINTPTR_MAX - (uint64_t)bytes, ROPEKV_ERR_SHAPE,
              "%s: its %lld bytes from %p pass the end of the address space", s[i].what, (long long)bytes, s[i].base);
        if (bytes > reach) reach = bytes;
    }
    pl->wide = reach >= INT32_MAX;
    return ROPEKV_OK;
}

/* The cache parts of the variant's layout: their pointers, strides and alignment; *kv and *rope: their
 * extents in elements (-1 past BYTES_MAX). */
static ropekv_status cache_check(const rk_desc *p, const ropekv_args *a, int64_t *kv, int64_t *rope, rk_err *err) {
    const int64_t R = p->R;
    const int tile = p->kv == ROPEKV_KV_FP8_TILE, fp8 = p->kv == ROPEKV_KV_FP8_E4M3;
    const int align = fp8 ? 8 : 16, unit = tile ? 16 : 8;
    const int64_t row_w = p->kv == ROPEKV_KV_BF16 ? p->row_bytes / 2 : p->row_bytes; /* in cache elements */
    if (p->layout == ROPEKV_KV_FLAT)
        return cache_part("kv_cache", "kv_st", a->kv_cache, a->kv_rows, a->kv_rows, a->kv_st, 0, row_w, align, unit, kv,
                          err);
    CHECK(a->kv_block_size >= 1 && a->kv_block_size <= INT32_MAX, ROPEKV_ERR_SHAPE,
          "kv_block_size = %lld: must be in [1, 2^31) (layout %s)", (long long)a->kv_block_size,
          rk_layout_name(p->layout));
    ropekv_status st = cache_part("kv_cache", "kv_st", a->kv_cache, a->kv_rows, a->kv_block_size, a->kv_st,
                                  a->kv_block_st, row_w, align, unit, kv, err);
    if (st == ROPEKV_OK && p->layout == ROPEKV_KV_SPLIT)
        st = cache_part("kv_rope_cache", "kv_rope_st", a->kv_rope_cache, a->kv_rows, a->kv_block_size, a->kv_rope_st,
                        a->kv_rope_block_st, R, align, unit, rope, err);
    return st;
}

/* The read-back op's rules: tokens, slots, the cache of its layout, k_scale for an fp8 row with a scale, and
 * the bf16 outputs (out [T, W], or [T, L] and out_rope [T, R]). */
static ropekv_status read_check(const rk_desc *p, const ropekv_args *a, rk_plan *pl, rk_err *err) {
    const int64_t L = p->L, R = p->R, W = L + R, T = a->tokens;
    const int split_out = a->out_rope != NULL;
    CHECK(a->kv_rows >= 0, ROPEKV_ERR_SHAPE, "kv_rows = %lld: must be >= 0", (long long)a->kv_rows);
    CHECK(a->min_slot >= 0, ROPEKV_ERR_ARG, "min_slot = %lld: must be >= 0", (long long)a->min_slot);
    int64_t kv_extent = 0, rope_extent = 0;
    if (T > 0) {
        CHECK(a->out, ROPEKV_ERR_NULL, "out is NULL (the read-back op's output)");
        CHECK(a->slots, ROPEKV_ERR_NULL, "slots is NULL");
        CHECK(p->kv != ROPEKV_KV_FP8_E4M3 || p->kv8_scale == RK_SCALE_NONE || a->k_scale, ROPEKV_ERR_NULL,
              "k_scale is NULL (fp8 cache with a scale)");
        ropekv_status st = cache_check(p, a, &kv_extent, &rope_extent, err);
        if (st != ROPEKV_OK) return st;
        CHECK(rows_disjoint(T, 1, a->out_st, 0, split_out ? L : W), ROPEKV_ERR_STRIDE, "out token stride %lld < %lld",
              (long long)a->out_st, (long long)(split_out ? L : W));
        CHECK(!split_out || rows_disjoint(T, 1, a->out_rope_st, 0, R), ROPEKV_ERR_STRIDE,
              "out_rope token stride %lld < %lld", (long long)a->out_rope_st, (long long)R);
        CHECK(aligned(a->out, 16) && a->out_st % 8 == 0, ROPEKV_ERR_ALIGN,
              "out must be 16-byte aligned with a token stride a multiple of 8 elements");
        CHECK(!split_out || (aligned(a->out_rope, 16) && a->out_rope_st % 8 == 0), ROPEKV_ERR_ALIGN,
              "out_rope must be 16-byte aligned with a token stride a multiple of 8 elements");
        CHECK(aligned(a->slots, p->slot == ROPEKV_INDEX_INT64 ? 8 : 4), ROPEKV_ERR_ALIGN,
              "slots must be aligned to their element size");
        CHECK(!a->k_scale || aligned(a->k_scale, 4), ROPEKV_ERR_ALIGN, "k_scale must be 4-byte aligned");
    }
    rk_args_from_api(a, &pl->args);
    rk_launch_plan(p, &pl->args, &pl->total, &pl->blocks, &pl->block);
    CHECK(pl->blocks <= INT32_MAX, ROPEKV_ERR_SHAPE, "%lld tokens need too many blocks", (long long)T);
    const int64_t kv_bytes = p->kv == ROPEKV_KV_BF16 ? 2 : 1;
    const tensor_span spans[] = {
        {"kv_cache", a->kv_cache, kv_extent, kv_bytes},
        {"kv_rope_cache", a->kv_rope_cache, rope_extent, kv_bytes},
        {"out", a->out, T > 0 ? span(T, 1, a->out_st, 0, split_out ? L : W) : 0, 2},
        {"out_rope", a->out_rope, T > 0 && split_out ? span(T, 1, a->out_rope_st, 0, R) : 0, 2},
    };
    return index_width(spans, sizeof spans / sizeof spans[0], pl, err);
}

ropekv_status rk_args_check(const rk_desc *p, const ropekv_args *a, rk_plan *pl, rk_err *err) {
    const int64_t L = p->L, R = p->R, W = L + R, T = a ? a->tokens : 0, H = a ? a->heads : 0;
    const int q8 = p->q_dtype != ROPEKV_Q_BF16;
    CHECK(a, ROPEKV_ERR_NULL, "args is NULL");
    CHECK(T >= 0 && T <= INT32_MAX, ROPEKV_ERR_SHAPE, "tokens = %lld: must be in [0, 2^31)", (long long)T);
    /* the norm's tensors belong to the variants that use them: one passed to another kernel is a mix-up */
    CHECK(p->norm != ROPEKV_NORM_NONE || (!a->norm_weight && !a->norm_out), ROPEKV_ERR_ARG,
          "norm_weight or norm_out is set, but kernel %s has no fused norm (variant norm none)", p->key);
    CHECK(p->norm == ROPEKV_NORM_RMS_OUT || !a->norm_out, ROPEKV_ERR_ARG,
          "norm_out is set, but kernel %s does not write it (variant norm rms; rms_out writes it)", p->key);
    if (p->op == ROPEKV_OP_READ) return read_check(p, a, pl, err);
    CHECK(H >= 1 && H <= 65536, ROPEKV_ERR_SHAPE, "heads = %lld: must be in [1, 65536]", (long long)H);
    CHECK(a->max_pos >= 1, ROPEKV_ERR_SHAPE, "max_pos = %lld: must be >= 1", (long long)a->max_pos);
    CHECK(a->kv_rows >= 0, ROPEKV_ERR_SHAPE, "kv_rows = %lld: must be >= 0", (long long)a->kv_rows);
    CHECK(a->kv_tokens == ROPEKV_KV_TOKENS_NONE || (a->kv_tokens >= 0 && a->kv_tokens <= INT32_MAX), ROPEKV_ERR_SHAPE,
          "kv_tokens = %lld: must be in [0, 2^31) or ROPEKV_KV_TOKENS_NONE", (long long)a->kv_tokens);
    CHECK(a->min_slot >= 0, ROPEKV_ERR_ARG, "min_slot = %lld: must be >= 0", (long long)a->min_slot);
    /* KV rows for tokens [0, K), query rows for [0, T); positions for [0, P) */
    const int64_t K = a->kv_tokens == ROPEKV_KV_TOKENS_NONE ? 0 : a->kv_tokens ? a->kv_tokens : T;
    const int64_t P = T > K ? T : K;
    /* A tensor is required (and its strides and alignment checked) only when the launch has rows of it:
     * the query tensors for T > 0, the KV inputs, slots and cache for K > 0. */
    const int absorbed = p->q == ROPEKV_Q_ABSORBED && T > 0, zc = p->q == ROPEKV_Q_ZERO_COPY && T > 0;
    const int has_q = p->q != ROPEKV_Q_NONE && T > 0, has_kv = K > 0;
    const int tables = p->rope != RK_ROPE_NONE && (has_q || has_kv);
    /* required pointers */
    CHECK(!absorbed || a->q_nope, ROPEKV_ERR_NULL, "q_nope is NULL (q form absorbed)");
    CHECK(!has_q || a->q_pe, ROPEKV_ERR_NULL, "q_pe is NULL");
    CHECK(!(absorbed || zc) || a->q_out, ROPEKV_ERR_NULL, "q_out is NULL");
    CHECK(!has_kv || a->k_nope, ROPEKV_ERR_NULL, "k_nope is NULL");
    CHECK(!has_kv || a->k_pe, ROPEKV_ERR_NULL, "k_pe is NULL");
    CHECK(P == 0 || a->positions, ROPEKV_ERR_NULL, "positions is NULL");
    CHECK(!has_kv || a->slots, ROPEKV_ERR_NULL, "slots is NULL");
    CHECK(!tables || a->cos_sin, ROPEKV_ERR_NULL, "cos_sin is NULL");
    CHECK(!tables || p->cos_sin == RK_CS_F32_CAT || a->sin, ROPEKV_ERR_NULL,
          "sin is NULL (the spec's cos/sin tables are split)");
    CHECK(!has_kv || p->kv != ROPEKV_KV_FP8_E4M3 || p->kv8_scale == RK_SCALE_NONE || a->k_scale, ROPEKV_ERR_NULL,
          "k_scale is NULL (fp8 cache with a scale)");
    CHECK(!has_q || !q8 || p->q8_scale == RK_SCALE_NONE || a->q_scale, ROPEKV_ERR_NULL,
          "q_scale is NULL (fp8 query with a scale)");
    const int norm = p->norm != ROPEKV_NORM_NONE && has_kv, norm_out = p->norm == ROPEKV_NORM_RMS_OUT && has_kv;
    const int64_t w_bytes = p->norm_weight == RK_NW_F32 ? 4 : 2;
    CHECK(!norm || a->norm_weight, ROPEKV_ERR_NULL, "norm_weight is NULL (norm %s)", rk_norm_name(p->norm));
    CHECK(!norm_out || a->norm_out, ROPEKV_ERR_NULL, "norm_out is NULL (norm rms_out)");
    /* strides: rows may not overlap (outputs would race; inputs would be a caller bug) */
    CHECK(!absorbed || rows_disjoint(T, H, a->q_nope_st, a->q_nope_sh, L), ROPEKV_ERR_STRIDE,
          "q_nope strides (token %lld, head %lld) overlap rows of %lld", (long long)a->q_nope_st,
          (long long)a->q_nope_sh, (long long)L);
    CHECK(!has_q || rows_disjoint(T, H, a->q_pe_st, a->q_pe_sh, R), ROPEKV_ERR_STRIDE,
          "q_pe strides (token %lld, head %lld) overlap rows of %lld", (long long)a->q_pe_st, (long long)a->q_pe_sh,
          (long long)R);
    CHECK(!(absorbed || zc) || rows_disjoint(T, H, a->q_out_st, a->q_out_sh, W), ROPEKV_ERR_STRIDE,
          "q_out strides (token %lld, head %lld) overlap rows of %lld", (long long)a->q_out_st, (long long)a->q_out_sh,
          (long long)W);
    CHECK(!has_kv || rows_disjoint(K, 1, a->k_nope_st, 0, L), ROPEKV_ERR_STRIDE, "k_nope token stride %lld < %lld",
          (long long)a->k_nope_st, (long long)L);
    CHECK(!has_kv || rows_disjoint(K, 1, a->k_pe_st, 0, R), ROPEKV_ERR_STRIDE, "k_pe token stride %lld < %lld",
          (long long)a->k_pe_st, (long long)R);
    CHECK(!norm_out || rows_disjoint(K, 1, a->norm_out_st, 0, L), ROPEKV_ERR_STRIDE,
          "norm_out token stride %lld < %lld", (long long)a->norm_out_st, (long long)L);
    /* the cache rows, per layout (the caches are required with KV rows, whatever kv_rows says) */
    int64_t kv_extent = 0, rope_extent = 0;
    if (has_kv) {
        ropekv_status st = cache_check(p, a, &kv_extent, &rope_extent, err);
        if (st != ROPEKV_OK) return st;
    }
    /* alignment the vector path assumes: 16-byte rows of bf16 (8 bytes for fp8 cache rows and queries) */
    const int64_t q_align = q8 ? 8 : 16;
    CHECK(!absorbed || (aligned(a->q_nope, 16) && a->q_nope_st % 8 == 0 && a->q_nope_sh % 8 == 0), ROPEKV_ERR_ALIGN,
          "q_nope must be 16-byte aligned with strides a multiple of 8 elements");
    CHECK(!has_q || (aligned(a->q_pe, 16) && a->q_pe_st % 8 == 0 && a->q_pe_sh % 8 == 0), ROPEKV_ERR_ALIGN,
          "q_pe must be 16-byte aligned with strides a multiple of 8 elements");
    CHECK(!(absorbed || zc) || (aligned(a->q_out, (size_t)q_align) && a->q_out_st % 8 == 0 && a->q_out_sh % 8 == 0),
          ROPEKV_ERR_ALIGN, "q_out must be %lld-byte aligned with strides a multiple of 8 elements",
          (long long)q_align);
    CHECK(!has_kv || (aligned(a->k_nope, 16) && a->k_nope_st % 8 == 0), ROPEKV_ERR_ALIGN,
          "k_nope must be 16-byte aligned with a token stride a multiple of 8 elements");
    CHECK(!has_kv || (aligned(a->k_pe, 16) && a->k_pe_st % 8 == 0), ROPEKV_ERR_ALIGN,
          "k_pe must be 16-byte aligned with a token stride a multiple of 8 elements");
    CHECK(aligned(a->positions, p->pos == ROPEKV_INDEX_INT64 ? 8 : 4) &&
              aligned(a->slots, p->slot == ROPEKV_INDEX_INT64 ? 8 : 4),
          ROPEKV_ERR_ALIGN, "positions and slots must be aligned to their element size");
    const size_t cs_align = p->cos_sin == RK_CS_BF16_SPLIT ? 8 : 16;
    CHECK(!tables || (aligned(a->cos_sin, cs_align) && (!a->sin || aligned(a->sin, cs_align))), ROPEKV_ERR_ALIGN,
          "cos/sin tables must be %zu-byte aligned", cs_align);
    CHECK(!a->k_scale || aligned(a->k_scale, 4), ROPEKV_ERR_ALIGN, "k_scale must be 4-byte aligned");
    CHECK(!a->q_scale || aligned(a->q_scale, 4), ROPEKV_ERR_ALIGN, "q_scale must be 4-byte aligned");
    CHECK(!norm || aligned(a->norm_weight, 16), ROPEKV_ERR_ALIGN, "norm_weight must be 16-byte aligned");
    CHECK(!norm_out || (aligned(a->norm_out, 16) && a->norm_out_st % 8 == 0), ROPEKV_ERR_ALIGN,
          "norm_out must be 16-byte aligned with a token stride a multiple of 8 elements");

    /* launch size and index width */
    rk_args_from_api(a, &pl->args);
    pl->args.kv_tokens = K;
    rk_launch_plan(p, &pl->args, &pl->total, &pl->blocks, &pl->block);
    CHECK(pl->blocks <= INT32_MAX, ROPEKV_ERR_SHAPE, "%lld tokens x %lld heads need too many blocks", (long long)P,
          (long long)H);
    /* every tensor's extent in elements (all 0 without rows: P == 0) */
    const int64_t cs_w = p->cos_sin == RK_CS_F32_CAT ? R : R / 2, cs_bytes = p->cos_sin == RK_CS_BF16_SPLIT ? 2 : 4;
    const int64_t cs_elems = tables ? extent(a->max_pos, cs_w, 0) : 0, kv_bytes = p->kv == ROPEKV_KV_BF16 ? 2 : 1;
    const tensor_span spans[] = {
        {"q_nope", a->q_nope, absorbed ? span(T, H, a->q_nope_st, a->q_nope_sh, L) : 0, 2},
        {"q_pe", a->q_pe, has_q ? span(T, H, a->q_pe_st, a->q_pe_sh, R) : 0, 2},
        {"q_out", a->q_out, (absorbed || zc) ? span(T, H, a->q_out_st, a->q_out_sh, W) : 0, q8 ? 1 : 2},
        {"k_nope", a->k_nope, has_kv ? span(K, 1, a->k_nope_st, 0, L) : 0, 2},
        {"k_pe", a->k_pe, has_kv ? span(K, 1, a->k_pe_st, 0, R) : 0, 2},
        {"kv_cache", a->kv_cache, kv_extent, kv_bytes},
        {"kv_rope_cache", a->kv_rope_cache, rope_extent, kv_bytes},
        {"the cos/sin tables (max_pos rows)", a->cos_sin, cs_elems, cs_bytes},
        {"the sin table (max_pos rows)", a->sin, p->cos_sin == RK_CS_F32_CAT ? 0 : cs_elems, cs_bytes},
        {"norm_weight", a->norm_weight, norm ? L : 0, w_bytes},
        {"norm_out", a->norm_out, norm_out ? span(K, 1, a->norm_out_st, 0, L) : 0, 2},
    };
    return index_width(spans, sizeof spans / sizeof spans[0], pl, err);
}
