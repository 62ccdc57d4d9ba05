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
        if (rk_buf_put(out, b[k].value, strlen(b[k].value))) return rk_fail(err, ROPEKV_ERR_NOMEM, "template: out of memory");
        c = lit = close + 1;
    }
    if (rk_buf_put(out, lit, (size_t)(end - lit))) return rk_fail(err, ROPEKV_ERR_NOMEM, "template: out of memory");
    for (int k = 0; k < n; k++)
        if (!used[k]) return rk_fail(err, ROPEKV_ERR_RENDER, "template: binding '%s' is never used", b[k].name);
    return ROPEKV_OK;
}

/* ---- the kernel source of a variant ---------------------------------------------------------- */
static const char *const TEMPLATE_FILES[] = {"params.hip", "prelude.hip", "kernel.hip"};

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
    for (s = s ? s + 1 : path; *s && n + 1 < cap; s++, n++)
        out[n] = *s >= 0x20 && *s < 0x7f && *s != '\\' ? *s : '?';
    out[n] = '\0';
    return out;
}

/* A float as a C++ literal that reads back to the same value. */
static void float_literal(float f, char *out, size_t cap) {
    snprintf(out, cap, "%.9g", (double)f);
    if (!strpbrk(out, ".en")) strncat(out, ".0", cap - strlen(out) - 1);
    strncat(out, "f", cap - strlen(out) - 1);
}

static int header(const rk_desc *v, rk_buf *o) {
    const rk_spec *s = v->spec;
    const rk_arch *a = v->arch;
    int rc = 0;
    char file[sizeof s->file];
    rc |= rk_buf_printf(o, "// Generated by ropekv %s from specs/%s. Do not edit.\n", ROPEKV_VERSION_STRING,
                        base_name(s->file, file, sizeof file));
    rc |= rk_buf_printf(o, "// Variant: %s\n// Kernels: %s, %s_i64\n", v->key, v->name, v->name);
    rc |= rk_buf_printf(o, "// Values:  kv_lora_rank=%d qk_rope_head_dim=%d rope=%s cos_sin=%s positions=%s slots=%s\n",
                        s->kv_lora_rank, s->rope_dim, rk_rope_name(s->rope), rk_cos_sin_name(s->cos_sin),
                        rk_idx_name(v->pos), rk_idx_name(v->slot));
    rc |= rk_buf_printf(o, "//          kv=%s q=%s negative_slot=%s sanitize=%s\n", rk_kv_name(v->kv), rk_qform_name(v->q),
                        rk_neg_name(s->negative_slot), s->sanitize ? "true" : "false");
    if (v->kv == ROPEKV_KV_FP8_E4M3)
        rc |= rk_buf_printf(o, "//          fp8=%s scale=%s saturate=%.9g rope_bf16_round=%s\n", rk_fp8_name(v->fp8),
                            rk_scale_name(s->fp8_scale), (double)v->sat, s->fp8_rope_bf16 ? "true" : "false");
    rc |= rk_buf_printf(o, "//          target=%s vendor=%s wave=%d block=%d chunks=%d nt_stores=%d pdl=%d fp8_hw=%d bf16_hw=%d compiler=%s\n",
                        a->name, rk_vendor_name(a->vendor), a->wave, a->block, a->chunks, a->nt_stores, a->pdl, a->fp8_hw,
                        a->bf16_hw, rk_compiler_name(a->compiler));
    rc |= rk_buf_printf(o, "// Regenerate: ropekv-gen --spec specs/%s --filter '%s' emit --out DIR\n\n", file,
                        v->key);
    return rc ? ROPEKV_ERR_NOMEM : ROPEKV_OK;
}

int rk_emit(const rk_desc *v, rk_buf *out, rk_err *err) {
    const rk_spec *s = v->spec;
    const rk_arch *a = v->arch;
    char block[16], wave[16], chunks[16], nt[4], pdl[4], hw_bf16[4], hw_fp8[4], fnuz[4], L[16], R[16], rope[4], cs[4], scale[4], q[4], sat[48];
    snprintf(block, sizeof block, "%d", a->block);
    snprintf(wave, sizeof wave, "%d", a->wave);
    snprintf(chunks, sizeof chunks, "%d", a->chunks > 0 ? a->chunks : 1);
    snprintf(nt, sizeof nt, "%d", a->nt_stores ? 1 : 0);
    snprintf(pdl, sizeof pdl, "%d", a->pdl ? 1 : 0);
    snprintf(hw_bf16, sizeof hw_bf16, "%d", a->bf16_hw ? 1 : 0);
    snprintf(hw_fp8, sizeof hw_fp8, "%d", a->fp8_hw ? 1 : 0);
    snprintf(fnuz, sizeof fnuz, "%d", v->fp8 == RK_FP8_FNUZ ? 1 : 0);
    snprintf(L, sizeof L, "%d", s->kv_lora_rank);
    snprintf(R, sizeof R, "%d", s->rope_dim);
    snprintf(rope, sizeof rope, "%d", (int)s->rope);
    snprintf(cs, sizeof cs, "%d", (int)s->cos_sin);
    snprintf(scale, sizeof scale, "%d", v->kv == ROPEKV_KV_FP8_E4M3 ? (int)s->fp8_scale : 0);
    snprintf(q, sizeof q, "%d", (int)v->q);
    float_literal(v->kv == ROPEKV_KV_FP8_E4M3 ? v->sat : 0.0f, sat, sizeof sat);
#define B(x) ((x) ? "true" : "false")
    const rk_binding bind[] = {
        {"block", block},
        {"wave", wave},
        {"chunks", chunks},
        {"nt_stores", nt},
        {"pdl", pdl},
        {"hw_bf16", hw_bf16},
        {"hw_fp8", hw_fp8},
        {"fp8_fnuz", fnuz},
        {"kv_lora_rank", L},
        {"rope_dim", R},
        {"rope", rope},
        {"cos_sin", cs},
        {"pos_i64", B(v->pos == ROPEKV_INDEX_INT64)},
        {"slot_i64", B(v->slot == ROPEKV_INDEX_INT64)},
        {"kv_fp8", B(v->kv == ROPEKV_KV_FP8_E4M3)},
        {"scale", scale},
        {"sat", sat},
        {"rope_bf16", B(v->kv == ROPEKV_KV_FP8_E4M3 && s->fp8_rope_bf16)},
        {"skip_all", B(s->negative_slot == RK_NEG_SKIP_ALL)},
        {"qform", q},
        {"sanitize", B(s->sanitize)},
        {"name", v->name},
    };
#undef B
    rk_buf tpl = {0};
    int rc = rk_template_text(&tpl, err);
    if (rc == ROPEKV_OK && header(v, out) != ROPEKV_OK) rc = rk_fail(err, ROPEKV_ERR_NOMEM, "emit: out of memory");
    if (rc == ROPEKV_OK) rc = rk_render(tpl.p, tpl.len, bind, (int)(sizeof bind / sizeof bind[0]), out, err);
    rk_buf_free(&tpl);
    return rc;
}
