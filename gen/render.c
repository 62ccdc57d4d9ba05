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

int rk_template_text(rk_buf *out, rk_err *err) {
    for (size_t i = 0; i < sizeof TEMPLATE_FILES / sizeof TEMPLATE_FILES[0]; i++) {
        size_t n;
        const char *t = rk_embedded(TEMPLATE_FILES[i], &n);
        if (!t) return rk_fail(err, ROPEKV_ERR_RENDER, "template %s is not embedded in this build", TEMPLATE_FILES[i]);
        if (rk_buf_put(out, t, n)) return rk_fail(err, ROPEKV_ERR_NOMEM, "template: out of memory");
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
    rc |= rk_buf_printf(o, "//          kv=%s layout=%s q=%s negative_slot=%s sanitize=%s\n", rk_kv_name(d->kv),
                        rk_layout_name(d->layout), rk_qform_name(d->q), rk_neg_name(d->neg),
                        d->sanitize ? "true" : "false");
    if (d->kv == ROPEKV_KV_FP8_E4M3)
        rc |= rk_buf_printf(o, "//          fp8=%s scale=%s saturate=%.9g rope_bf16_round=%s\n", rk_fp8_name(d->fp8),
                            rk_scale_name(d->kv8.scale), (double)d->kv8.sat, d->kv8.rope_bf16 ? "true" : "false");
    if (d->kv == ROPEKV_KV_FP8_TILE)
        rc |= rk_buf_printf(
            o, "//          fp8_tile=%s tile=%d scale=%s saturate=%.9g scales_at=%d rope_at=%d row_bytes=%d\n",
            rk_fp8_name(d->fp8), d->tile, rk_enum_name(&rk_tile_scale_enum, d->tile_scale), (double)d->kv8.sat,
            d->scales_at, d->rope_at, d->row_bytes);
    if (d->op == ROPEKV_OP_READ)
        rc |= rk_buf_printf(o, "//          op=read negative_slot=%s\n", rk_enum_name(&rk_read_neg_enum, d->read_neg));
    if (d->norm != ROPEKV_NORM_NONE)
        rc |= rk_buf_printf(o, "//          norm=%s weight=%s eps=%.9g rounding=%s\n", rk_norm_name(d->norm),
                            rk_enum_name(&rk_norm_weight_enum, d->norm_weight), (double)d->norm_eps,
                            rk_enum_name(&rk_norm_round_enum, d->norm_round));
    if (d->q_dtype != ROPEKV_Q_BF16)
        rc |= rk_buf_printf(o, "//          q_dtype=%s q_fp8=%s scale=%s saturate=%.9g rope_bf16_round=%s\n",
                            rk_qdtype_name(d->q_dtype), rk_fp8_name(d->fp8), rk_scale_name(d->q8.scale),
                            (double)d->q8.sat, d->q8.rope_bf16 ? "true" : "false");
    rc |= rk_buf_printf(
        o,
        "//          target=%s vendor=%s wave=%d block=%d wide_block=%d wide_from=%lld chunks=%d nt_stores=%d pdl=%d "
        "fp8_hw=%d bf16_hw=%d compiler=%s\n",
        a->name, rk_vendor_name(a->vendor), a->wave, a->block, a->wide_block, (long long)a->wide_from, a->chunks,
        a->nt_stores, a->pdl, a->fp8_hw, a->bf16_hw, rk_compiler_name(a->compiler));
    rc |= rk_buf_printf(o, "// Regenerate: ropekv-gen --spec specs/%s --filter '%s' emit --out DIR\n\n", file, d->key);
    return rc ? ROPEKV_ERR_NOMEM : ROPEKV_OK;
}

/* The template bindings: every value the kernel is specialized on, from the description. Enumerations
 * bind their spellings (the kernel's C++ enumerators); numbers bind decimal text. */
int rk_emit(const rk_desc *d, rk_buf *out, rk_err *err) {
    const rk_arch *a = d->arch;
    char block[16], wide_block[16], wave[16], chunks[16], L[16], R[16], sat[48], q_sat[48], tile[16], scales_at[16],
        rope_at[16], eps[48];
    snprintf(tile, sizeof tile, "%d", d->tile);
    snprintf(scales_at, sizeof scales_at, "%d", d->scales_at);
    snprintf(rope_at, sizeof rope_at, "%d", d->rope_at);
    snprintf(block, sizeof block, "%d", a->block);
    snprintf(wide_block, sizeof wide_block, "%d", a->wide_block);
    snprintf(wave, sizeof wave, "%d", a->wave);
    snprintf(chunks, sizeof chunks, "%d", a->chunks > 0 ? a->chunks : 1);
    snprintf(L, sizeof L, "%d", d->L);
    snprintf(R, sizeof R, "%d", d->R);
    float_literal(d->kv8.sat, sat, sizeof sat);
    float_literal(d->q8.sat, q_sat, sizeof q_sat);
    float_literal(d->norm_eps, eps, sizeof eps);
#define FLAG(x) ((x) ? "1" : "0")
#define BOOL(x) ((x) ? "true" : "false")
    const rk_binding bind[] = {
        {"block", block},
        {"wide_block", wide_block},
        {"wave", wave},
        {"chunks", chunks},
        {"nt_stores", FLAG(a->nt_stores)},
        {"pdl", FLAG(a->pdl)},
        {"hw_bf16", FLAG(a->bf16_hw)},
        {"hw_fp8", FLAG(a->fp8_hw)},
        {"fp8_fnuz", FLAG(d->fp8 == RK_FP8_FNUZ)},
        {"kv_lora_rank", L},
        {"rope_dim", R},
        {"rope", rk_rope_name(d->rope)},
        {"cos_sin", rk_cos_sin_name(d->cos_sin)},
        {"positions", rk_idx_name(d->pos)},
        {"slots", rk_idx_name(d->slot)},
        {"kv", rk_kv_name(d->kv)},
        {"scale", rk_scale_name(d->kv8.scale)},
        {"sat", sat},
        {"rope_bf16", BOOL(d->kv8.rope_bf16)},
        {"q_dtype", rk_qdtype_name(d->q_dtype)},
        {"q_scale", rk_scale_name(d->q8.scale)},
        {"q_sat", q_sat},
        {"q_rope_bf16", BOOL(d->q8.rope_bf16)},
        {"layout", rk_layout_name(d->layout)},
        {"negative_slot", rk_neg_name(d->neg)},
        {"q", rk_qform_name(d->q)},
        {"sanitize", BOOL(d->sanitize)},
        {"op", rk_op_name(d->op)},
        {"tile", tile},
        {"tile_scale", rk_enum_name(&rk_tile_scale_enum, d->tile_scale)},
        {"scales_at", scales_at},
        {"rope_at", rope_at},
        {"read_negative_slot", rk_enum_name(&rk_read_neg_enum, d->read_neg)},
        {"norm", rk_norm_name(d->norm)},
        {"norm_weight", rk_enum_name(&rk_norm_weight_enum, d->norm_weight)},
        {"norm_eps", eps},
        {"norm_rounding", rk_enum_name(&rk_norm_round_enum, d->norm_round)},
        {"name", d->name},
    };
#undef FLAG
#undef BOOL
    for (size_t i = 0; i < sizeof bind / sizeof bind[0]; i++)
        if (!bind[i].value) return rk_fail(err, ROPEKV_ERR_RENDER, "%s: '%s' has no spelling", d->key, bind[i].name);
    rk_buf tpl = {0};
    int rc = rk_template_text(&tpl, err);
    if (rc == ROPEKV_OK && header(d, out) != ROPEKV_OK) rc = rk_fail(err, ROPEKV_ERR_NOMEM, "emit: out of memory");
    if (rc == ROPEKV_OK) rc = rk_render(tpl.p, tpl.len, bind, (int)(sizeof bind / sizeof bind[0]), out, err);
    rk_buf_free(&tpl);
    return rc;
}
