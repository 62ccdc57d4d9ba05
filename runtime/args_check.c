/* The argument rules of a kernel, all read from its description: the counts, then one pass over its tensors
 * (gen/tensors.def: required pointers, strides that keep rows apart, the alignment the 16-byte vector path needs,
 * extents), the bytes a written tensor may not share, and the launch plan with the index width. */
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

/* The launch's counts, by which the symbols of the tensors' dimensions are read. */
typedef struct counts {
    int64_t T, K, P, H, HQ, max_pos, kv_rows, B, out_w;
    int has_q; /* the kernel writes a query and the launch has query rows */
} counts;

static int64_t sym_value(const rk_desc *p, const counts *c, rk_sym s) {
    switch (s) {
    case RK_SYM_T: return c->T;
    case RK_SYM_TKV: return c->K;
    case RK_SYM_P: return c->P;
    case RK_SYM_H: return c->H;
    case RK_SYM_HQ: return c->HQ;
    case RK_SYM_MAX_POS: return c->max_pos;
    case RK_SYM_KV_ROWS: return c->kv_rows;
    case RK_SYM_BLOCKS: return c->kv_rows == 0 || c->B < 1 ? 0 : (c->kv_rows - 1) / c->B + 1;
    case RK_SYM_BLOCK_SIZE: return c->kv_rows < c->B ? c->kv_rows : c->B; /* the entries a block has in use */
    case RK_SYM_OUT_W: return c->out_w;
    case RK_SYM_NONE: return 1;
    default: return rk_sym_size(p, s);
    }
}

/* Whether the launch touches tensor t (and then needs its pointer). */
static int touched(const rk_tensor *t, const counts *c, const ropekv_args *a) {
    switch (t->need) {
    case ROPEKV_NEED_TOKENS: return c->T > 0;
    case ROPEKV_NEED_KV_TOKENS: return c->K > 0;
    case ROPEKV_NEED_POSITIONS: return c->P > 0;
    case ROPEKV_NEED_ROPE: return c->has_q || c->K > 0;
    case ROPEKV_NEED_OPTIONAL: {
        const void *ptr;
        memcpy(&ptr, (const char *)a + t->at, sizeof ptr);
        return c->T > 0 && ptr != NULL;
    }
    }
    return 0;
}

/* A touched tensor as the launch lays it out: its base, its bytes, and its rows as the alias check reads them:
 * n rows at a stride of `step` bytes, each within `foot` bytes of its start (n == 1: the whole tensor). */
typedef struct placed {
    const rk_tensor *t;
    uintptr_t base;
    int64_t bytes, n, step, foot;
} placed;

/* One tensor's rules: its pointer, its strides, its alignment and its extent (in bytes, at most BYTES_MAX and
 * below the top of the address space); fills *pl. */
static ropekv_status tensor_check(const rk_desc *p, const rk_tensor *t, const counts *c, const ropekv_args *a,
                                  placed *pl, rk_err *err) {
    const void *ptr;
    memcpy(&ptr, (const char *)a + t->at, sizeof ptr);
    if (!ptr) {
        if (t->when[0]) return (ropekv_status)rk_fail(err, ROPEKV_ERR_NULL, "%s is NULL (%s)", t->name, t->when);
        return (ropekv_status)rk_fail(err, ROPEKV_ERR_NULL, "%s is NULL", t->name);
    }
    /* the dimensions: n[] counts, st[] strides (elements), w the packed tail */
    int64_t n[RK_TENSOR_RANK], st[RK_TENSOR_RANK - 1] = {0, 0};
    int strided = 0;
    for (int i = 0; i < t->rank; i++) n[i] = sym_value(p, c, t->dim[i]);
    for (int i = 0; i + 1 < t->rank; i++)
        if (t->stride_at[i] != RK_NO_STRIDE) {
            memcpy(&st[i], (const char *)a + t->stride_at[i], sizeof st[i]);
            strided = i + 1;
        }
    int64_t w = 1; /* the packed dimensions after the strided ones, in elements */
    for (int i = strided; i < t->rank; i++) w = extent(n[i], w, 0) < 0 ? -1 : n[i] * w;
    const int64_t n0 = strided >= 1 ? n[0] : 1, n1 = strided == 2 ? n[1] : 1;
    const int64_t s0 = st[0], s1 = strided == 2 ? st[1] : 0;
    /* strides: rows may not overlap (outputs would race; inputs would be a caller bug), and the alignment the vector
     * path assumes */
    int64_t tails_at = 0; /* a page-tail record: where the first block's tails end (elements) */
    switch (t->rule) {
    case RK_ROWS_ANY:
        CHECK(rows_disjoint(n0, n1, s0, s1, w), ROPEKV_ERR_STRIDE,
              "%s strides (token %lld, head %lld) overlap rows of %lld", t->label, (long long)s0, (long long)s1,
              (long long)w);
        CHECK(aligned(ptr, (size_t)t->align) && s0 % t->unit == 0 && s1 % t->unit == 0, ROPEKV_ERR_ALIGN,
              "%s must be %d-byte aligned with strides a multiple of %d elements", t->label, t->align, t->unit);
        break;
    case RK_ROWS_TOKEN:
        CHECK(rows_disjoint(n0, 1, s0, 0, w), ROPEKV_ERR_STRIDE, "%s token stride %lld < %lld", t->label, (long long)s0,
              (long long)w);
        CHECK(aligned(ptr, (size_t)t->align) && s0 % t->unit == 0, ROPEKV_ERR_ALIGN,
              "%s must be %d-byte aligned with a token stride a multiple of %d elements", t->label, t->align, t->unit);
        break;
    case RK_ROWS_CACHE: { /* entries (s1) inside blocks (s0), or flat rows (s0) */
        const int paged = strided == 2;
        const int64_t est = paged ? s1 : s0, bst = paged ? s0 : 0, per_block = paged ? n1 : n0, blocks = paged ? n0 : 1;
        const char *est_name = t->stride[paged ? 1 : 0];
        const int64_t block_w = per_block > 0 ? extent(per_block - 1, est, w) : 0;
        CHECK(est >= 0 && bst >= 0, ROPEKV_ERR_STRIDE, "%s: %s %lld or its block stride %lld is negative", t->label,
              est_name, (long long)est, (long long)bst);
        CHECK(per_block <= 1 || est >= w, ROPEKV_ERR_STRIDE, "%s: %s %lld < row width %lld", t->label, est_name,
              (long long)est, (long long)w);
        CHECK(blocks <= 1 || (block_w >= 0 && bst >= block_w), ROPEKV_ERR_STRIDE,
              "%s: block stride %lld < %lld, the span of a block's %lld entries", t->label, (long long)bst,
              (long long)block_w, (long long)per_block);
        /* a page-tail record: a block's tails (tail_bytes a token) lie after its kv_block_size rows, inside the block
         * stride (at kv_block_size x kv_st + entry x tail_bytes: templates/kernel.hip, tail_byte), also in a block
         * with fewer rows in use (kv_rows < kv_block_size) */
        const int64_t tail = paged && t->at == offsetof(ropekv_args, kv_cache) ? p->rec.tail_bytes : 0;
        int64_t tail_st = -1; /* a row and its tail, a token's stride in the tails' span (-1: past int64) */
        if (tail && __builtin_add_overflow(est, tail, &tail_st)) tail_st = -1;
        const int64_t tails_end = tail && per_block > 0 ? extent(c->B, tail_st, 0) : 0;
        CHECK(!tail || (tails_end >= 0 && bst >= tails_end), ROPEKV_ERR_STRIDE,
              "%s: block stride %lld leaves no room for the page tail: record %s keeps %lld bytes a token after a "
              "block's %lld rows (block_size x (kv_st + tail_bytes) = %lld)",
              t->label, (long long)bst, p->rec.name, (long long)tail, (long long)per_block, (long long)tails_end);
        tails_at = tails_end;
        CHECK(aligned(ptr, (size_t)t->align) && est % t->unit == 0 && (blocks <= 1 || bst % t->unit == 0),
              ROPEKV_ERR_ALIGN, "%s must be %d-byte aligned with strides a multiple of %d elements", t->label, t->align,
              t->unit);
        break;
    }
    case RK_DENSE:
        CHECK(aligned(ptr, (size_t)t->align), ROPEKV_ERR_ALIGN, "%s must be %d-byte aligned", t->label, t->align);
        break;
    }
    /* the extent: n0 x n1 rows of w elements at (s0, s1), in bytes */
    int64_t elems = w < 0 ? -1 : 0; /* -1: past BYTES_MAX */
    if (n0 > 0 && n1 > 0 && w > 0) {
        const int64_t inner = extent(n1 - 1, s1, w);
        elems = inner < 0 ? -1 : extent(n0 - 1, s0, inner);
        if (t->rule == RK_ROWS_CACHE && strided == 2 && elems >= 0 && c->kv_rows > 0) {
            /* blocks of a cache: the last one holds only the slots below kv_rows; it ends at its last slot's row, or
             * the block before it ends later (blocks may overlap) */
            const int64_t last = c->kv_rows - 1, lb = last / c->B, e = extent(lb, s0, extent(last % c->B, s1, w));
            const int64_t f = lb > 0 ? extent(lb - 1, s0, inner) : 0;
            elems = e < 0 || f < 0 ? -1 : e > f ? e : f;
        }
    }
    if (tails_at > 0 && elems >= 0) { /* the last block's tails end past its rows */
        const int64_t e = extent(n0 - 1, s0, tails_at);
        elems = e < 0 ? -1 : e > elems ? e : elems;
    }
    const int64_t bytes = elems >= 0 && elems <= BYTES_MAX / t->elem ? elems * t->elem : -1;
    CHECK(bytes >= 0, ROPEKV_ERR_SHAPE, "%s: its strides and sizes reach past 2^57 bytes, more than any address space",
          t->label);
    CHECK((uintptr_t)ptr <= UINTPTR_MAX - (uint64_t)bytes, ROPEKV_ERR_SHAPE,
          "%s: its %lld bytes from %p pass the end of the address space", t->label, (long long)bytes, ptr);
    /* its rows for the alias check: the outer strided dimension (the larger stride of two) and the span of the rest */
    *pl = (placed){.t = t, .base = (uintptr_t)ptr, .bytes = bytes, .n = 1, .step = 0, .foot = bytes};
    if (bytes > 0 && strided >= 1) {
        const int outer_is_0 = strided == 1 || n1 == 1 || (n0 > 1 && s0 >= s1);
        const int64_t on = outer_is_0 ? n0 : n1, os = outer_is_0 ? s0 : s1;
        const int64_t in_n = strided == 1 ? 1 : outer_is_0 ? n1 : n0, in_s = outer_is_0 ? s1 : s0;
        if (on > 1) {
            pl->n = on;
            pl->step = os * t->elem;
            pl->foot = extent(in_n - 1, in_s, w) * t->elem;
        }
    }
    return ROPEKV_OK;
}

/* Whether two placed tensors may share a byte. Their bytes overlap as ranges; they still share none when the rows of
 * both repeat at one stride S, each row within S of its start, and the rows of one fall after the other's within
 * each period (y's rows start δ = (y - x) mod S after x's: x's foot <= δ and δ + y's foot <= S). */
static int may_share(const placed *x, const placed *y) {
    if (x->base >= y->base + (uint64_t)y->bytes || y->base >= x->base + (uint64_t)x->bytes) return 0;
    if (x->n > 1 && y->n > 1 && x->step != y->step) return 1;
    const int64_t S = x->n > 1 ? x->step : y->step;
    if (S <= 0 || x->foot > S || y->foot > S) return 1;
    const int64_t diff = (int64_t)(y->base - x->base); /* the ranges overlap: |diff| < 2^57 */
    const int64_t delta = ((diff % S) + S) % S;
    return !(x->foot <= delta && delta + y->foot <= S);
}

/* No tensor the kernel writes may share a byte with another tensor the launch touches (include/ropekv.h,
 * "Aliasing"); tensors it only reads may. */
static ropekv_status alias_check(const placed *pl, int n, rk_err *err) {
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            const placed *x = &pl[i], *y = &pl[j];
            const int xw = (x->t->access & ROPEKV_TENSOR_WRITE) != 0, yw = (y->t->access & ROPEKV_TENSOR_WRITE) != 0;
            if ((!xw && !yw) || x->bytes == 0 || y->bytes == 0 || !may_share(x, y)) continue;
            const placed *wr = xw ? x : y, *other = xw ? y : x;
            return (ropekv_status)rk_fail(
                err, ROPEKV_ERR_ALIAS,
                "%s (%lld bytes from %p) overlaps %s (%lld bytes from %p), which the kernel writes: a written tensor may "
                "share no byte with another tensor of the launch",
                other->t->label, (long long)other->bytes, (const void *)other->base, wr->t->label, (long long)wr->bytes,
                (const void *)wr->base);
        }
    return ROPEKV_OK;
}

ropekv_status rk_args_check(const rk_desc *p, const ropekv_args *a, rk_plan *pl, rk_err *err) {
    CHECK(a, ROPEKV_ERR_NULL, "args is NULL");
    const int64_t L = p->L, R = p->R, W = L + R, T = a->tokens, H = a->heads;
    const int read = p->op == ROPEKV_OP_READ;
    CHECK(T >= 0 && T <= INT32_MAX, ROPEKV_ERR_SHAPE, "tokens = %lld: must be in [0, 2^31)", (long long)T);
    /* the norm's tensors belong to the variants that use them: one passed to another kernel is a mix-up */
    CHECK(p->norm != ROPEKV_NORM_NONE || (!a->norm_weight && !a->norm_out), ROPEKV_ERR_ARG,
          "norm_weight or norm_out is set, but kernel %s has no fused norm (variant norm none)", p->key);
    CHECK(p->norm == ROPEKV_NORM_RMS_OUT || !a->norm_out, ROPEKV_ERR_ARG,
          "norm_out is set, but kernel %s does not write it (variant norm rms; rms_out writes it)", p->key);
    if (!read) {
        CHECK(H >= 1 && H <= 65536, ROPEKV_ERR_SHAPE, "heads = %lld: must be in [1, 65536]", (long long)H);
        CHECK(a->max_pos >= 1, ROPEKV_ERR_SHAPE, "max_pos = %lld: must be >= 1", (long long)a->max_pos);
        CHECK(a->q_heads == 0 || (a->q_heads >= H && a->q_heads <= 65536), ROPEKV_ERR_SHAPE,
              "q_heads = %lld: must be 0 or in [heads (%lld), 65536]", (long long)a->q_heads, (long long)H);
        CHECK(a->q_heads == 0 || a->q_heads == H || p->q == ROPEKV_Q_ABSORBED, ROPEKV_ERR_ARG,
              "q_heads = %lld above heads = %lld: padded query heads are written by q form absorbed, not %s",
              (long long)a->q_heads, (long long)H, rk_qform_name(p->q));
    }
    CHECK(a->kv_rows >= 0, ROPEKV_ERR_SHAPE, "kv_rows = %lld: must be >= 0", (long long)a->kv_rows);
    if (!read)
        CHECK(a->kv_tokens == ROPEKV_KV_TOKENS_NONE || (a->kv_tokens >= 0 && a->kv_tokens <= INT32_MAX),
              ROPEKV_ERR_SHAPE, "kv_tokens = %lld: must be in [0, 2^31) or ROPEKV_KV_TOKENS_NONE",
              (long long)a->kv_tokens);
    CHECK(a->min_slot >= 0, ROPEKV_ERR_ARG, "min_slot = %lld: must be >= 0", (long long)a->min_slot);
    /* write: KV rows for tokens [0, K), query rows for [0, T); positions for [0, P). read: T rows. */
    const int64_t K = read ? T : a->kv_tokens == ROPEKV_KV_TOKENS_NONE ? 0 : a->kv_tokens ? a->kv_tokens : T;
    const int64_t P = T > K ? T : K;
    const counts c = {.T = T,
                      .K = K,
                      .P = P,
                      .H = read ? 1 : H,
                      .HQ = read         ? 1
                            : a->q_heads ? a->q_heads
                                         : H,
                      .max_pos = a->max_pos,
                      .kv_rows = a->kv_rows,
                      .B = p->layout == ROPEKV_KV_FLAT ? 1 : a->kv_block_size,
                      .out_w = a->out_rope ? L : W,
                      .has_q = p->q != ROPEKV_Q_NONE && T > 0};
    /* the caches are required with rows, whatever kv_rows says; their blocks need a size */
    if (p->layout != ROPEKV_KV_FLAT && K > 0)
        CHECK(a->kv_block_size >= 1 && a->kv_block_size <= INT32_MAX, ROPEKV_ERR_SHAPE,
              "kv_block_size = %lld: must be in [1, 2^31) (layout %s)", (long long)a->kv_block_size,
              rk_layout_name(p->layout));

    /* every tensor the launch touches, once */
    rk_tensor ts[RK_TENSORS_MAX];
    placed placed_[RK_TENSORS_MAX];
    const int nt = rk_tensors(p, ts, RK_TENSORS_MAX);
    int np = 0;
    int64_t widest = 0; /* bytes of the largest tensor of token rows, addressed in the index type (a cache's rows
                           and the cos/sin tables' are addressed in 64 bits by both entries; positions, slots and
                           the write mask by token, below 2^31) */
    for (int i = 0; i < nt && i < RK_TENSORS_MAX; i++) {
        if (!touched(&ts[i], &c, a)) continue;
        ropekv_status st = tensor_check(p, &ts[i], &c, a, &placed_[np], err);
        if (st != ROPEKV_OK) return st;
        pl->used[np].tensor = i;
        pl->used[np].ptr = (const void *)placed_[np].base;
        pl->used[np].bytes = placed_[np].bytes;
        if ((ts[i].rule == RK_ROWS_ANY || ts[i].rule == RK_ROWS_TOKEN) && placed_[np].bytes > widest)
            widest = placed_[np].bytes;
        np++;
    }
    pl->n_used = np;
    ropekv_status st = alias_check(placed_, np, err);
    if (st != ROPEKV_OK) return st;

    /* launch size and index width: the 64-bit entry runs once a chunk index (with a block's worth of slack) or a
     * byte offset into a per-token tensor (the query, k_nope / k_pe, the outputs) can reach 2^31 - 1 (the kernel
     * turns element offsets into byte offsets in its index type). Positions and slots are indexed by token, below
     * 2^31; a cache's rows are addressed in 64 bits by both entries (templates/kernel.hip, row_at). */
    rk_args_from_api(a, &pl->args);
    if (!read) {
        pl->args.kv_tokens = K;
        pl->args.q_heads = a->q_heads ? a->q_heads : H;
    }
    rk_launch_plan(p, &pl->args, &pl->total, &pl->blocks, &pl->block);
    if (read) CHECK(pl->blocks <= INT32_MAX, ROPEKV_ERR_SHAPE, "%lld tokens need too many blocks", (long long)T);
    else
        CHECK(pl->blocks <= INT32_MAX, ROPEKV_ERR_SHAPE, "%lld tokens x %lld heads need too many blocks", (long long)P,
              (long long)H);
    const int64_t reach = pl->total + (int64_t)pl->block * pl->args.chunks;
    pl->wide = (reach > widest ? reach : widest) >= INT32_MAX;
    return ROPEKV_OK;
}

ropekv_status rk_args_scales_check(const rk_desc *p, const ropekv_args *a, rk_err *err) {
    rk_tensor ts[RK_TENSORS_MAX];
    const int nt = rk_tensors(p, ts, RK_TENSORS_MAX);
    for (int i = 0; i < nt && i < RK_TENSORS_MAX; i++) {
        if (ts[i].at != offsetof(ropekv_args, k_scale) && ts[i].at != offsetof(ropekv_args, q_scale)) continue;
        const void *at = *(const void *const *)((const char *)a + ts[i].at);
        if (!at) continue; /* not needed by this launch (rk_args_check refused a missing one it needs) */
        float v;
        memcpy(&v, at, sizeof v);
        CHECK(v > 0.0f && v <= 3.40282347e38f, ROPEKV_ERR_ARG,
              "%s = %g: must be a positive finite float32 (1.0 for no scaling)", ts[i].name, (double)v);
    }
    return ROPEKV_OK;
}
