/* Templates: ${name} placeholders bound to values; the generated-file header; rk_emit. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rk.h"

/* ---- rk_buf ---------------------------------------------------------------------------------- */
int rk_buf_put(rk_buf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return ROPEKV_ERR_NOMEM;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return ROPEKV_OK;
}

int rk_buf_printf(rk_buf *b, const char *fmt, ...) {
    char small[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return ROPEKV_ERR_NOMEM;
    if ((size_t)n < sizeof small) return rk_buf_put(b, small, (size_t)n);
    char *big = malloc((size_t)n + 1);
    if (!big) return ROPEKV_ERR_NOMEM;
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    int rc = rk_buf_put(b, big, (size_t)n);
    free(big);
    return rc;
}

void rk_buf_free(rk_buf *b) {
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

/* ---- rendering ------------------------------------------------------------------------------- */
static int line_of(const char *tpl, const char *at) {
    int line = 1;
    for (const char *c = tpl; c < at; c++) line += *c == '\n';
    return line;
}

static int is_name_char(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'; }

int rk_render(const char *tpl, size_t len, const rk_binding *b, int n, rk_buf *out, rk_err *err) {
    enum { MAX_BINDINGS = 64 };
    char used[MAX_BINDINGS] = {0};
    if (n > MAX_BINDINGS) return rk_fail(err, ROPEKV_ERR_RENDER, "template: more than %d bindings", MAX_BINDINGS);
    const char *c = tpl, *end = tpl + len, *lit = tpl;
    while (c < end) {
        if (!(c[0] == '$' && c + 1 < end && c[1] == '{')) {
            c++;
            continue;
        }
        if (rk_buf_put(out, lit, (size_t)(c - lit))) return rk_fail(err, ROPEKV_ERR_NOMEM, "template: out of memory");
        const char *name = c + 2, *close = name;
        while (close < end && is_name_char(*close)) close++;
        if (close == end || *close != '}' || close == name)
            return rk_fail(err, ROPEKV_ERR_RENDER, "template line %d: '${' without a closing '}' after a name",
                           line_of(tpl, c));
        size_t nl = (size_t)(close - name);
        int k = 0;
        while (k < n && !(strlen(b[k].name) == nl && memcmp(b[k].name, name, nl) == 0)) k++;
        if (k == n)
            return rk_fail(err, ROPEKV_ERR_RENDER, "template line %d: unknown placeholder '${%.*s}'", line_of(tpl, c),
                           (int)nl, name);
        used[k] = 1;
        if (rk_buf_put(out, b[k].value, strlen(b[k].value)))
            return rk_fail(err, ROPEKV_ERR_NOMEM, "template: out of memory");
        c = lit = close + 1;
    }
    if (rk_buf_put(out, lit, (size_t)(end - lit))) return rk_fail(err, ROPEKV_ERR_NOMEM, "template: out of memory");
    for (int k = 0; k < n; k++)
        if (!used[k]) return rk_fail(err, ROPEKV_ERR_RENDER, "template: binding '%s' is never used", b[k].name);
    return ROPEKV_OK;
}

/* ---- the kernel source of a variant ---------------------------------------------------------- */
static const char *const TEMPLATE_FILES[] = {"params.hip", "prelude.hip", "args.h",
                                             "kernel.hip", "read.hip",    "entry.hip"};

/* The line of templates/params.hip that the constants replace. */
static const char CONSTANTS_MARK[] = "//@ constants";

/* A kernel constant of templates/params.hip, as template text:
 *     constexpr <cxx> <name> = [<cxx>::]${<binding>};  // <comment>
 * the comment at column 50 (two spaces after a longer declaration). */
static int constant_line(rk_buf *out, const char *cxx, const char *name, int is_enum, const char *binding,
                         const char *comment) {
    char line[256];
    const int n = snprintf(line, sizeof line, "constexpr %s %s = %s%s${%s};", cxx, name, is_enum ? cxx : "",
                           is_enum ? "::" : "", binding);
    if (!comment[0]) return rk_buf_printf(out, "%s\n", line);
    return rk_buf_printf(out, "%s%*s// %s\n", line, n + 2 > 50 ? 2 : 50 - n, "", comment);
}

/* The constants: one a row of gen/params.def with one, in its order. */
static int constants(rk_buf *out) {
    int rc = ROPEKV_OK;
#define RK_PARAM(field, type, kind, table, cxx, constant, binding, pub, applies, comment) \
    if (constant[0]) rc |= constant_line(out, cxx, constant, RK_PK_##kind == RK_PK_ENUM, binding, comment);
#include "params.def"
    return rc ? ROPEKV_ERR_NOMEM : ROPEKV_OK;
}

/* The start of the line of t that begins with mark, or NULL. */
static const char *line_with(const char *t, size_t n, const char *mark) {
    const size_t m = strlen(mark);
    for (const char *c = t, *end = t + n; c + m <= end; c = memchr(c, '\n', (size_t)(end - c)), c = c ? c + 1 : end)
        if (memcmp(c, mark, m) == 0) return c;
    return NULL;
}

int rk_template_text(rk_buf *out, rk_err *err) {
    for (size_t i = 0; i < sizeof TEMPLATE_FILES / sizeof TEMPLATE_FILES[0]; i++) {
        size_t n;
        const char *t = rk_embedded(TEMPLATE_FILES[i], &n);
        if (!t) return rk_fail(err, ROPEKV_ERR_RENDER, "template %s is not embedded in this build", TEMPLATE_FILES[i]);
        if (i > 0) {
            if (rk_buf_put(out, t, n)) return rk_fail(err, ROPEKV_ERR_NOMEM, "template: out of memory");
            continue;
        }
        /* params.hip: the constants of gen/params.def in place of its CONSTANTS_MARK line */
        const char *mark = line_with(t, n, CONSTANTS_MARK), *rest;
        if (!mark)
            return rk_fail(err, ROPEKV_ERR_RENDER, "template %s has no '%s' line", TEMPLATE_FILES[i], CONSTANTS_MARK);
        rest = memchr(mark, '\n', n - (size_t)(mark - t));
        rest = rest ? rest + 1 : t + n;
        int rc = rk_buf_put(out, t, (size_t)(mark - t));
        if (rc == ROPEKV_OK) rc = constants(out);
        if (rc == ROPEKV_OK) rc = rk_buf_put(out, rest, n - (size_t)(rest - t));
        if (rc != ROPEKV_OK) return rk_fail(err, ROPEKV_ERR_NOMEM, "template: out of memory");
    }
    return ROPEKV_OK;
}

/* The spec file's base name as it may appear in a // comment of the generated source: the name is the
 * caller's (any bytes), so a newline could end the comment and put text into the code, and a trailing
 * backslash would continue it. Everything but printable ASCII other than '\\' becomes '?'. */
static const char *base_name(const char *path, char *out, size_t cap) {
    const char *s = strrchr(path, '/');
    size_t n = 0;
    for (s = s ? s + 1 : path; *s && n + 1 < cap; s++, n++) out[n] = *s >= 0x20 && *s < 0x7f && *s != '\\' ? *s : '?';
    out[n] = '\0';
    return out;
}

/* A float as a C++ literal that reads back to the same value. */
static void float_literal(float f, char *out, size_t cap) {
    snprintf(out, cap, "%.9g", (double)f);
    if (!strpbrk(out, ".en")) strncat(out, ".0", cap - strlen(out) - 1);
    strncat(out, "f", cap - strlen(out) - 1);
}

static int header(const rk_desc *d, rk_buf *o) {
    const rk_arch *a = d->arch;
    int rc = 0;
    char file[sizeof d->spec->file];
    rc |= rk_buf_printf(o, "// Generated by ropekv %s from specs/%s. Do not edit.\n", ROPEKV_VERSION_STRING,
                        base_name(d->spec->file, file, sizeof file));
    rc |= rk_buf_printf(o, "// Variant: %s\n// Kernels: %s, %s_i64\n", d->key, d->name, d->name);
    rc |= rk_buf_printf(o, "// Values:  kv_lora_rank=%d qk_rope_head_dim=%d rope=%s cos_sin=%s positions=%s slots=%s\n",
                        d->L, d->R, rk_rope_name(d->rope), rk_cos_sin_name(d->cos_sin), rk_idx_name(d->pos),
                        rk_idx_name(d->slot));
    rc |= rk_buf_printf(o, "//          kv=%s layout=%s q=%s negative_slot=%s sanitize=%s\n", d->rec.name,
                        rk_layout_name(d->layout), rk_qform_name(d->q), rk_neg_name(d->neg),
                        d->sanitize ? "true" : "false");
    if (d->kv == ROPEKV_KV_FP8_E4M3)
        rc |= rk_buf_printf(o, "//          fp8=%s scale=%s saturate=%.9g rope_bf16_round=%s\n", rk_fp8_name(d->fp8),
                            rk_scale_name(d->kv8_scale), (double)d->kv8_sat, d->kv8_rope_bf16 ? "true" : "false");
    if (d->kv == ROPEKV_KV_FP8_TILE)
        rc |= rk_buf_printf(
            o, "//          fp8_tile=%s tile=%d scale=%s saturate=%.9g scales_at=%d rope_at=%d row_bytes=%d\n",
            rk_fp8_name(d->fp8), d->tile, rk_enum_name(&rk_tile_scale_enum, d->tile_scale), (double)d->kv8_sat,
            d->scales_at, d->rope_at, d->row_bytes);
    if (d->record)
        rc |= rk_buf_printf(o, "//          record=%s fp8=%s row_bytes=%d split_at=%d tail_bytes=%d conv=%s\n",
                            d->rec.name, rk_fp8_name(d->fp8), d->rec.row_bytes, d->rec.split_at, d->rec.tail_bytes,
                            rk_scale_name(d->kv8_scale));
    if (d->op == ROPEKV_OP_READ)
        rc |= rk_buf_printf(o, "//          op=read negative_slot=%s\n", rk_enum_name(&rk_read_neg_enum, d->read_neg));
    if (d->norm != ROPEKV_NORM_NONE)
        rc |= rk_buf_printf(o, "//          norm=%s weight=%s eps=%.9g rounding=%s\n", rk_norm_name(d->norm),
                            rk_enum_name(&rk_norm_weight_enum, d->norm_weight), (double)d->norm_eps,
                            rk_enum_name(&rk_norm_round_enum, d->norm_round));
    if (d->q_dtype != ROPEKV_Q_BF16)
        rc |= rk_buf_printf(o, "//          q_dtype=%s q_fp8=%s scale=%s saturate=%.9g rope_bf16_round=%s\n",
                            rk_qdtype_name(d->q_dtype), rk_fp8_name(d->fp8), rk_scale_name(d->q8_scale),
                            (double)d->q8_sat, d->q8_rope_bf16 ? "true" : "false");
    rc |= rk_buf_printf(
        o,
        "//          target=%s vendor=%s wave=%d block=%d wide_block=%d wide_from=%lld chunks=%d nt_stores=%d pdl=%d "
        "fp8_hw=%d bf16_hw=%d compiler=%s\n",
        a->name, rk_vendor_name(a->vendor), a->wave, a->block, a->wide_block, (long long)a->wide_from,
        rk_desc_chunks(d, NULL), a->nt_stores, a->pdl, a->fp8_hw, a->bf16_hw, rk_compiler_name(a->compiler));
    rc |= rk_buf_printf(o, "// Regenerate: ropekv-gen --spec specs/%s --filter '%s' emit --out DIR\n\n", file, d->key);
    return rc ? ROPEKV_ERR_NOMEM : ROPEKV_OK;
}

/* A parameter's binding: a decimal, a C++ float literal, true / false, or the enum's spelling (NULL when the
 * value has none). */
static const char *bind_text(rk_param_kind kind, const rk_enum *e, double v, char *out, size_t cap) {
    switch (kind) {
    case RK_PK_INT: snprintf(out, cap, "%lld", (long long)v); return out;
    case RK_PK_FLOAT: float_literal((float)v, out, cap); return out;
    case RK_PK_BOOL: return v != 0 ? "true" : "false";
    case RK_PK_ENUM: return rk_enum_name(e, (int)v);
    }
    return NULL;
}

/* 1 when segment b continues a in the row as one run of the same stores: the next values at the next bytes, one
 * element type without blocks, one outer scale and bound (a's rounding of rope values only matters where a holds
 * some: a latent-only a takes b's). */
static int continues(const rk_segment *a, const rk_segment *b, int L) {
    return a->elem == b->elem && a->block == 0 && b->block == 0 && a->outer == b->outer && a->outer != RK_OUT_TOKEN &&
           a->sat_ocp == b->sat_ocp && a->sat_fnuz == b->sat_fnuz && a->from + a->n == b->from &&
           a->at + rk_seg_bytes(a) == b->at && (a->from + a->n <= L || a->rope_bf16 == b->rope_bf16);
}

/* The segments the kernels dispatch on, into out (when not NULL): the record's in the order of their values, each
 * run of segments that continue one another (continues) made one, so that a row stored as one run (bf16, fp8) is
 * one segment and a lane chooses nothing. Returns their count. */
static int kernel_segments(const rk_record *r, int L, rk_segment *out) {
    rk_segment seg[RK_RECORD_SEGMENTS];
    int n = 0;
    for (int i = 0; i < r->n_seg; i++) {
        int k = i;
        for (; k > 0 && seg[k - 1].from > r->seg[i].from; k--) seg[k] = seg[k - 1];
        seg[k] = r->seg[i];
    }
    for (int i = 0; i < r->n_seg; i++) {
        if (n > 0 && continues(&seg[n - 1], &seg[i], L)) {
            seg[n - 1].n += seg[i].n;
            seg[n - 1].rope_bf16 = seg[i].rope_bf16;
        } else {
            seg[n++] = seg[i];
        }
    }
    if (out)
        for (int i = 0; i < n; i++) out[i] = seg[i];
    return n;
}

/* The record's tables (templates/params.hip): its bytes, split and tail, the cache's stride unit, and one Segment a
 * segment, the bound the target's fp8 format's and the tensor scale's convention the description's. */
static int record_text(const rk_desc *d, rk_buf *o) {
    const rk_record *r = &d->rec;
    int rc = rk_buf_printf(o,
                           "constexpr int ROW_BYTES = %d;                      // record %s: bytes of a token's row\n"
                           "constexpr int SPLIT_AT = %d;                        // the split layout's first part\n"
                           "constexpr int TAIL_BYTES = %d;                      // bytes of a token's page tail\n"
                           "constexpr int UNIT = %d;                            // bytes of the cache's stride unit\n"
                           "constexpr int NSEG = %d;\n"
                           "constexpr Segment SEG[NSEG] = {\n",
                           r->row_bytes, r->name, r->split_at, r->tail_bytes, rk_desc_kv_elem(d),
                           kernel_segments(r, d->L, NULL));
    rk_segment seg[RK_RECORD_SEGMENTS];
    const int n_seg = kernel_segments(r, d->L, seg);
    for (int i = 0; i < n_seg; i++) {
        const rk_segment *g = &seg[i];
        char sat[32];
        float_literal(d->fp8 == RK_FP8_FNUZ ? g->sat_fnuz : g->sat_ocp, sat, sizeof sat);
        char floor[32];
        float_literal(rk_seg_floor(g), floor, sizeof floor);
        rc |= rk_buf_printf(
            o,
            "    {%d, %d, Elem::%s, %d, %d, ScaleType::%s, ScaleRule::%s, ScaleAt::%s, %d, %s, Outer::%s, "
            "Scale::%s, %d, %s, %s, BlockConv::%s, %d},\n",
            g->from, g->n, rk_enum_name(&rk_elem_enum, g->elem), g->at, g->block,
            rk_enum_name(&rk_scale_type_enum, g->scale), rk_enum_name(&rk_scale_rule_enum, g->rule),
            rk_enum_token(&rk_scale_at_enum, g->scale_at), g->scales_at, sat, rk_enum_name(&rk_outer_enum, g->outer),
            rk_scale_name(g->outer == RK_OUT_TENSOR ? d->kv8_scale : RK_SCALE_NONE), g->outer_at,
            g->rope_bf16 ? "true" : "false", floor, rk_enum_name(&rk_block_conv_enum, g->block_conv), g->interleave);
    }
    rc |= rk_buf_printf(o, "};");
    return rc ? ROPEKV_ERR_NOMEM : ROPEKV_OK;
}

/* The template bindings: every value the kernel is specialized on, from the description: a binding per row of
 * gen/params.def that has one, then the target row's values and the kernel's name. */
int rk_emit(const rk_desc *d, rk_buf *out, rk_err *err) {
    enum {
        N_PARAMS = 0
#define RK_PARAM(field, type, kind, table, cxx, constant, binding, pub, applies, comment) +1
#include "params.def"
    };
    const rk_arch *a = d->arch;
    rk_binding bind[N_PARAMS + 14];
    char text[N_PARAMS][48], block[16], wide_block[16], wave[16], chunks[16], kv_group[16];
    int n = 0;
#define RK_PARAM(field, type, kind, table, cxx, constant, binding, pub, applies, comment)          \
    if (binding[0]) {                                                                              \
        bind[n].name = binding;                                                                    \
        bind[n].value = bind_text(RK_PK_##kind, table, (double)d->field, text[n], sizeof text[n]); \
        n++;                                                                                       \
    }
#include "params.def"
    snprintf(block, sizeof block, "%d", a->block);
    snprintf(wide_block, sizeof wide_block, "%d", a->wide_block);
    snprintf(wave, sizeof wave, "%d", a->wave);
    snprintf(chunks, sizeof chunks, "%d", rk_desc_chunks(d, NULL));
    snprintf(kv_group, sizeof kv_group, "%d", rk_kv_group(d));
#define FLAG(x) ((x) ? "1" : "0")
    const rk_binding target[] = {
        {"block", block},
        {"wide_block", wide_block},
        {"wave", wave},
        {"chunks", chunks},
        {"nt_stores", FLAG(a->nt_stores)},
        {"pdl", FLAG(a->pdl)},
        {"hw_bf16", FLAG(a->bf16_hw)},
        {"hw_fp8", FLAG(a->fp8_hw)},
        {"hw_e2m1", FLAG(a->e2m1_hw)},
        {"fp8_fnuz", FLAG(d->fp8 == RK_FP8_FNUZ)},
        {"kv_group", kv_group},
        {"write_pairs", FLAG(rk_write_pairs(d))},
        {"name", d->name},
        {"record", NULL},
    };
#undef FLAG
    for (size_t i = 0; i < sizeof target / sizeof target[0]; i++) bind[n++] = target[i];
    rk_buf record = {0};
    if (record_text(d, &record) != ROPEKV_OK) {
        rk_buf_free(&record);
        return rk_fail(err, ROPEKV_ERR_NOMEM, "emit: out of memory");
    }
    bind[n - 1].value = record.p;
    for (int i = 0; i < n; i++)
        if (!bind[i].value) {
            rk_buf_free(&record);
            return rk_fail(err, ROPEKV_ERR_RENDER, "%s: '%s' has no spelling", d->key, bind[i].name);
        }
    rk_buf tpl = {0};
    int rc = rk_template_text(&tpl, err);
    if (rc == ROPEKV_OK && header(d, out) != ROPEKV_OK) rc = rk_fail(err, ROPEKV_ERR_NOMEM, "emit: out of memory");
    if (rc == ROPEKV_OK) rc = rk_render(tpl.p, tpl.len, bind, n, out, err);
    rk_buf_free(&tpl);
    rk_buf_free(&record);
    return rc;
}
