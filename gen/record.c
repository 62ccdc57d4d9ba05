/* Cache records (gen/record.h): the spelling tables of their enums and rk_record_check. */
#include "rk.h"

#include <float.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ---- spellings: one table per enum, built from its list in record.h ------------------------------- */
#define RK_ROW_(e, spelling, token, ...) {e, #spelling, #token},
#define RK_TABLE_(what, LIST)                                 \
    static const rk_spelling what##_rows[] = {LIST(RK_ROW_)}; \
    const rk_enum rk_##what##_enum = {(int)(sizeof what##_rows / sizeof what##_rows[0]), what##_rows};
RK_TABLE_(elem, RK_ELEM_LIST)
RK_TABLE_(scale_type, RK_SCALE_TYPE_LIST)
RK_TABLE_(scale_rule, RK_SCALE_RULE_LIST)
RK_TABLE_(block_conv, RK_BLOCK_CONV_LIST)
RK_TABLE_(scale_at, RK_SCALE_AT_LIST)
RK_TABLE_(outer, RK_OUTER_LIST)
RK_TABLE_(read_scale, RK_READ_SCALE_LIST)

int rk_elem_bits(rk_elem e) {
#define RK_BITS_(en, spelling, token, bits) \
    case en: return bits;
    switch (e) { RK_ELEM_LIST(RK_BITS_) }
#undef RK_BITS_
    return 0;
}

int rk_seg_bytes(const rk_segment *s) { return s->n * rk_elem_bits(s->elem) / 8; }

int rk_seg_scale_bytes(const rk_segment *s) {
    if (s->block <= 0 || s->scale == RK_ST_NONE) return 0;
    return s->n / s->block * (s->scale == RK_ST_F32 ? 4 : 1);
}

float rk_seg_floor(const rk_segment *s) { return s->floor > 0.0f ? s->floor : FLT_MIN; }

int rk_seg_scale_slot(const rk_segment *s, int b) {
    const int k = s->interleave;
    return k >= 2 ? b % k * (s->n / s->block / k) + b / k : b;
}

const rk_record *rk_record_find(const rk_record_lib *lib, const char *name) {
    for (int i = 0; lib != NULL && i < lib->n && i < RK_RECORDS_MAX; i++)
        if (strcmp(lib->r[i].name, name) == 0) return &lib->r[i];
    return NULL;
}

/* ---- validation ------------------------------------------------------------------------------------- */
#if defined(__GNUC__)
#define RK_PRINTF_(a, b) __attribute__((format(printf, a, b)))
#else
#define RK_PRINTF_(a, b)
#endif

typedef struct ctx {
    const rk_record *r;
    const char *file;
    rk_err *err;
} ctx;

/* "<file>: record '<name>': <where><key>: <reason>" */
static int bad_at(const ctx *c, const char *where, const char *key, const char *fmt, va_list ap) {
    char reason[1024], name[64];
    vsnprintf(reason, sizeof reason, fmt, ap);
    rk_escape(c->r->name, strnlen(c->r->name, sizeof c->r->name), name, sizeof name);
    return rk_fail(c->err, ROPEKV_ERR_SPEC_INVALID, "%s: record '%s': %s%s: %s", c->file, name, where, key, reason);
}

/* "<file>: record '<name>': <key>: <reason>" */
static int RK_PRINTF_(3, 4) rec_bad(const ctx *c, const char *key, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    const int rc = bad_at(c, "", key, fmt, ap);
    va_end(ap);
    return rc;
}

/* "<file>: record '<name>': segments[<i + 1>] (from <from>): <key>: <reason>" */
static int RK_PRINTF_(4, 5) seg_bad(const ctx *c, int i, const char *key, const char *fmt, ...) {
    char where[48];
    snprintf(where, sizeof where, "segments[%d] (from %d): ", i + 1, c->r->seg[i].from);
    va_list ap;
    va_start(ap, fmt);
    const int rc = bad_at(c, where, key, fmt, ap);
    va_end(ap);
    return rc;
}

static int ident_ok(const char *s, size_t cap) {
    size_t n = strnlen(s, cap);
    if (n == 0 || n == cap) return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_')) return 0;
    return 1;
}

static int in_enum(const rk_enum *e, int v) { return rk_enum_name(e, v) != NULL; }

/* A byte range of the row (or of the page tail) and what lies there, for the overlap and split checks. */
typedef struct span {
    int lo, hi, seg;
    const char *key, *what;
} span;

/* One segment's own rules (not those between segments). */
static int check_segment(const ctx *c, int i) {
    const rk_record *r = c->r;
    const rk_segment *s = &r->seg[i];
    const int total = r->L + r->R;
    if (!in_enum(&rk_elem_enum, (int)s->elem)) return seg_bad(c, i, "elem", "not an element type (%d)", (int)s->elem);
    if (!in_enum(&rk_scale_type_enum, (int)s->scale))
        return seg_bad(c, i, "scale", "not a scale type (%d)", (int)s->scale);
    if (!in_enum(&rk_scale_rule_enum, (int)s->rule))
        return seg_bad(c, i, "rule", "not a scale rule (%d)", (int)s->rule);
    if (!in_enum(&rk_block_conv_enum, (int)s->block_conv))
        return seg_bad(c, i, "block_conv", "not a block convention (%d)", (int)s->block_conv);
    if (!in_enum(&rk_scale_at_enum, (int)s->scale_at))
        return seg_bad(c, i, "scale_at", "not a scale placement (%d)", (int)s->scale_at);
    if (!in_enum(&rk_outer_enum, (int)s->outer))
        return seg_bad(c, i, "outer", "not an outer scale (%d)", (int)s->outer);
    if (s->from < 0 || s->from >= total)
        return seg_bad(c, i, "from", "must be in 0..%d (L + R = %d values), got %d", total - 1, total, s->from);
    if (s->n <= 0 || s->n > total - s->from)
        return seg_bad(c, i, "n", "must be in 1..%d (x[from, from + n) within L + R = %d), got %d", total - s->from,
                       total, s->n);
    const char *elem = rk_enum_name(&rk_elem_enum, (int)s->elem);
    const int bits = rk_elem_bits(s->elem), align = s->elem == RK_EL_BF16 ? 16 : s->elem == RK_EL_E4M3 ? 8 : 4;
    if (s->elem == RK_EL_E2M1 && s->n % 2 != 0)
        return seg_bad(c, i, "n", "must be even for e2m1 (two values a byte), got %d", s->n);
    if (s->at < 0 || s->at % align != 0)
        return seg_bad(c, i, "at", "must be a multiple of %d (%s values), got %d", align, elem, s->at);
    const int bytes = s->n * bits / 8;
    if (s->at + bytes > r->row_bytes)
        return seg_bad(c, i, "at", "the values' bytes [%d, %d) pass row_bytes (%d)", s->at, s->at + bytes,
                       r->row_bytes);
    /* blocks and their scales */
    if (s->block != 0 && s->block != 16 && s->block != 32 && s->block != 64 && s->block != 128)
        return seg_bad(c, i, "block", "must be 0 (no block scales), 16, 32, 64 or 128, got %d", s->block);
    if (s->block != 0 && s->n % s->block != 0)
        return seg_bad(c, i, "block", "%d does not divide n (%d)", s->block, s->n);
    if (s->block != 0 && s->scale == RK_ST_NONE)
        return seg_bad(c, i, "block", "blocks of %d need a scale type (f32, ue8m0 or e4m3)", s->block);
    if (s->block == 0 && s->scale != RK_ST_NONE)
        return seg_bad(c, i, "scale", "'%s' without a block (block is 0)", rk_enum_name(&rk_scale_type_enum, s->scale));
    if (s->elem == RK_EL_BF16 && s->block != 0)
        return seg_bad(c, i, "scale", "bf16 values take no block scale (they are stored as they are)");
    if (s->block == 0 && s->rule != RK_SR_EXACT)
        return seg_bad(c, i, "rule", "'%s' without block scales", rk_enum_name(&rk_scale_rule_enum, s->rule));
    if (s->scale == RK_ST_UE8M0 && s->rule != RK_SR_POW2_UP)
        return seg_bad(c, i, "rule", "must be 'pow2_up' with ue8m0 scales (a UE8M0 byte holds only powers of two)");
    if ((s->rule == RK_SR_UP || s->rule == RK_SR_EXACT_ZERO) && s->scale != RK_ST_E4M3)
        return seg_bad(c, i, "rule", "'%s' rounds to an e4m3 scale's values (scale is '%s')",
                       rk_enum_name(&rk_scale_rule_enum, s->rule), rk_enum_name(&rk_scale_type_enum, s->scale));
    if (s->block == 0 && (s->floor != 0.0f || s->block_conv != RK_BC_DIV || s->interleave != 0))
        return seg_bad(c, i,
                       s->floor != 0.0f             ? "floor"
                       : s->block_conv != RK_BC_DIV ? "block_conv"
                                                    : "scales_interleave",
                       "given without block scales (block is 0)");
    if (s->floor != 0.0f && !(s->floor >= FLT_MIN && s->floor <= 1.0f))
        return seg_bad(c, i, "floor", "must be in [FLT_MIN, 1] (the least block scale), got %g", (double)s->floor);
    if (s->interleave != 0 && (s->interleave < 2 || (s->block && (s->n / s->block) % s->interleave != 0)))
        return seg_bad(c, i, "scales_interleave",
                       "must be 0 (block order) or k >= 2 dividing the %d block scales, got %d",
                       s->block ? s->n / s->block : 0, s->interleave);
    if (s->block == 0 && s->scale_at != RK_SA_INLINE)
        return seg_bad(c, i, "scale_at", "'page_tail' without block scales (block is 0)");
    if (s->block != 0) {
        const int sb = rk_seg_scale_bytes(s), salign = s->scale == RK_ST_F32 ? 4 : 1;
        const char *where = s->scale_at == RK_SA_INLINE ? "row" : "tail";
        if (s->scales_at < 0 || s->scales_at % salign != 0)
            return seg_bad(c, i, "scales_at", "must be a non-negative multiple of %d (%s scales), got %d", salign,
                           rk_enum_name(&rk_scale_type_enum, s->scale), s->scales_at);
        if (s->scale_at == RK_SA_INLINE && s->scales_at + sb > r->row_bytes)
            return seg_bad(c, i, "scales_at", "the %d scales' bytes [%d, %d) pass row_bytes (%d)", s->n / s->block,
                           s->scales_at, s->scales_at + sb, r->row_bytes);
        if (s->scale_at == RK_SA_PAGE_TAIL && s->scales_at + sb > r->tail_bytes)
            return seg_bad(c, i, "tail_bytes",
                           "the %d page-tail scales' bytes [%d, %d) of the token's %s need tail_bytes >= %d, got %d",
                           s->n / s->block, s->scales_at, s->scales_at + sb, where, s->scales_at + sb, r->tail_bytes);
    } else if (s->scales_at != 0) {
        return seg_bad(c, i, "scales_at", "given (%d) without block scales (block is 0)", s->scales_at);
    }
    /* outer scale */
    if (s->elem == RK_EL_BF16 && s->outer != RK_OUT_NONE)
        return seg_bad(c, i, "outer", "bf16 values take no outer scale");
    if (s->outer == RK_OUT_TOKEN) {
        if (s->outer_at < 0 || s->outer_at % 4 != 0)
            return seg_bad(c, i, "outer_at", "must be a non-negative multiple of 4 (a float32), got %d", s->outer_at);
        if (s->outer_at + 4 > r->row_bytes)
            return seg_bad(c, i, "outer_at", "the float32 [%d, %d) passes row_bytes (%d)", s->outer_at, s->outer_at + 4,
                           r->row_bytes);
    } else if (s->outer_at != 0) {
        return seg_bad(c, i, "outer_at", "given (%d) without a per-token outer scale", s->outer_at);
    }
    if (s->outer == RK_OUT_TENSOR && r->conv == RK_SCALE_NONE)
        return seg_bad(c, i, "conv", "a tensor-scaled segment needs the record's conv (mul_recip, div or mul)");
    /* saturation bounds, per element type */
    if (s->elem == RK_EL_BF16) {
        if (s->sat_ocp != 0 || s->sat_fnuz != 0)
            return seg_bad(c, i, "saturate", "bf16 values have no saturation bound (got ocp %g, fnuz %g)",
                           (double)s->sat_ocp, (double)s->sat_fnuz);
    } else {
        const double max_ocp = s->elem == RK_EL_E4M3 ? 448 : 6, max_fnuz = s->elem == RK_EL_E4M3 ? 240 : 6;
        if (!(s->sat_ocp > 0 && s->sat_ocp <= max_ocp))
            return seg_bad(c, i, "saturate.ocp", "must be in (0, %g] for %s values, got %g", max_ocp, elem,
                           (double)s->sat_ocp);
        if (!(s->sat_fnuz > 0 && s->sat_fnuz <= max_fnuz))
            return seg_bad(c, i, "saturate.fnuz", "must be in (0, %g] for %s values, got %g", max_fnuz, elem,
                           (double)s->sat_fnuz);
    }
    if (s->rope_bf16 && s->from + s->n <= r->L)
        return seg_bad(c, i, "rope_bf16", "the segment holds no rope value (x[%d, %d) is latent, L = %d)", s->from,
                       s->from + s->n, r->L);
    return ROPEKV_OK;
}

/* Every value of x[0, L + R) in exactly one segment. */
static int check_cover(const ctx *c) {
    const rk_record *r = c->r;
    int order[RK_RECORD_SEGMENTS];
    for (int i = 0; i < r->n_seg; i++) order[i] = i;
    for (int i = 1; i < r->n_seg; i++) /* by from; insertion sort keeps the list order among equals */
        for (int j = i; j > 0 && r->seg[order[j - 1]].from > r->seg[order[j]].from; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    int next = 0, prev = -1;
    for (int k = 0; k < r->n_seg; k++) {
        const int i = order[k];
        const rk_segment *s = &r->seg[i];
        if (s->from < next)
            return seg_bad(c, i, "from", "x[%d, %d) is covered by segments[%d] too", s->from,
                           s->from + s->n < next ? s->from + s->n : next, prev + 1);
        if (s->from > next) return seg_bad(c, i, "from", "x[%d, %d) is covered by no segment", next, s->from);
        next = s->from + s->n;
        prev = i;
    }
    if (next < r->L + r->R)
        return rec_bad(c, "segments", "x[%d, %d) is covered by no segment (L + R = %d)", next, r->L + r->R,
                       r->L + r->R);
    return ROPEKV_OK;
}

/* The byte ranges of the row (tail 0) or of the token's page tail (tail 1). */
static int spans_of(const rk_record *r, int tail, span *out) {
    int n = 0;
    for (int i = 0; i < r->n_seg; i++) {
        const rk_segment *s = &r->seg[i];
        if (!tail) out[n++] = (span){s->at, s->at + rk_seg_bytes(s), i, "at", "values"};
        if (s->block != 0 && (s->scale_at == RK_SA_PAGE_TAIL) == tail)
            out[n++] = (span){s->scales_at, s->scales_at + rk_seg_scale_bytes(s), i, "scales_at", "scales"};
        if (!tail && s->outer == RK_OUT_TOKEN)
            out[n++] = (span){s->outer_at, s->outer_at + 4, i, "outer_at", "outer scale"};
    }
    return n;
}

static int check_overlaps(const ctx *c, int tail) {
    span sp[3 * RK_RECORD_SEGMENTS];
    const int n = spans_of(c->r, tail, sp);
    for (int a = 1; a < n; a++)
        for (int b = 0; b < a; b++)
            if (sp[a].lo < sp[b].hi && sp[b].lo < sp[a].hi)
                return seg_bad(c, sp[a].seg, sp[a].key,
                               "its %s' bytes [%d, %d) of the %s overlap segments[%d]'s %s [%d, %d)", sp[a].what,
                               sp[a].lo, sp[a].hi, tail ? "page tail" : "row", sp[b].seg + 1, sp[b].what, sp[b].lo,
                               sp[b].hi);
    return ROPEKV_OK;
}

static int check_split(const ctx *c) {
    const rk_record *r = c->r;
    if (r->split_at == 0) return ROPEKV_OK;
    span sp[3 * RK_RECORD_SEGMENTS];
    const int n = spans_of(r, 0, sp);
    for (int k = 0; k < n; k++)
        if (sp[k].lo < r->split_at && r->split_at < sp[k].hi)
            return rec_bad(c, "split_at", "%d cuts segments[%d]'s %s [%d, %d)", r->split_at, sp[k].seg + 1, sp[k].what,
                           sp[k].lo, sp[k].hi);
    return ROPEKV_OK;
}

int rk_record_check(const rk_record *r, const char *file, rk_err *err) {
    const ctx c = {r, file != NULL ? file : "(record)", err};
    if (!ident_ok(r->name, sizeof r->name)) return rec_bad(&c, "name", "must match [a-z0-9_]+");
    if (r->L < 0 || r->R < 0 || r->L + r->R <= 0)
        return rec_bad(&c, "L", "L and R must be non-negative with L + R > 0, got L = %d, R = %d", r->L, r->R);
    if (r->row_bytes <= 0) return rec_bad(&c, "row_bytes", "must be positive, got %d", r->row_bytes);
    if (r->tail_bytes < 0) return rec_bad(&c, "tail_bytes", "must not be negative, got %d", r->tail_bytes);
    if (r->split_at < 0 || r->split_at >= r->row_bytes)
        return rec_bad(&c, "split_at", "must be 0 (no split) or in 1..%d, got %d", r->row_bytes - 1, r->split_at);
    if (!in_enum(&rk_scale_enum, r->conv)) return rec_bad(&c, "conv", "not a scale convention (%d)", r->conv);
    if (r->n_seg < 1 || r->n_seg > RK_RECORD_SEGMENTS)
        return rec_bad(&c, "segments", "must hold 1..%d segments, got %d", RK_RECORD_SEGMENTS, r->n_seg);
    if (r->n_readers < 0 || r->n_readers > RK_RECORD_READERS)
        return rec_bad(&c, "readers", "must hold 0..%d readers, got %d", RK_RECORD_READERS, r->n_readers);
    int tensor = 0, tail = 0;
    for (int i = 0; i < r->n_seg; i++) {
        int rc = check_segment(&c, i);
        if (rc != ROPEKV_OK) return rc;
        tensor |= r->seg[i].outer == RK_OUT_TENSOR;
        tail |= r->seg[i].block != 0 && r->seg[i].scale_at == RK_SA_PAGE_TAIL;
    }
    if (r->conv != RK_SCALE_NONE && !tensor)
        return rec_bad(&c, "conv", "'%s' but no segment has a tensor scale (outer = 'tensor')",
                       rk_enum_name(&rk_scale_enum, r->conv));
    if (r->tail_bytes > 0 && !tail)
        return rec_bad(&c, "tail_bytes", "%d but no segment's scales lie in the page tail", r->tail_bytes);
    int rc = check_cover(&c);
    if (rc == ROPEKV_OK) rc = check_overlaps(&c, 0);
    if (rc == ROPEKV_OK) rc = check_overlaps(&c, 1);
    if (rc == ROPEKV_OK) rc = check_split(&c);
    if (rc != ROPEKV_OK) return rc;
    for (int i = 0; i < r->n_readers; i++) {
        char key[32];
        snprintf(key, sizeof key, "readers[%d].name", i + 1);
        if (!ident_ok(r->readers[i].name, sizeof r->readers[i].name)) return rec_bad(&c, key, "must match [a-z0-9_]+");
        for (int j = 0; j < i; j++)
            if (strcmp(r->readers[j].name, r->readers[i].name) == 0)
                return rec_bad(&c, key, "duplicate '%s' (also readers[%d])", r->readers[i].name, j + 1);
        if (!in_enum(&rk_read_scale_enum, (int)r->readers[i].scale)) {
            snprintf(key, sizeof key, "readers[%d].scale", i + 1);
            return rec_bad(&c, key, "not a read scale (%d)", (int)r->readers[i].scale);
        }
    }
    return ROPEKV_OK;
}
