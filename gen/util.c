/* Error reporting, enum spellings and their parsers, architecture lookup. */
#include "rk.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void rk_vsay(char *why, size_t cap, const char *fmt, va_list ap) {
    if (why != NULL && cap > 0) vsnprintf(why, cap, fmt, ap);
}

void rk_say(char *why, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    rk_vsay(why, cap, fmt, ap);
    va_end(ap);
}

int rk_fail(rk_err *err, ropekv_status code, const char *fmt, ...) {
    if (err != NULL) {
        va_list ap;
        err->code = code;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return (int)code;
}

/* The escape of byte c into e (rk_escape); its length. */
static size_t escape_byte(unsigned char c, char e[4]) {
    static const char hex[] = "0123456789abcdef";
    e[0] = '\\';
    if (c == '\n') e[1] = 'n';
    else if (c == '\r') e[1] = 'r';
    else if (c == '\t') e[1] = 't';
    else if (c < 0x20 || c == 0x7f) {
        e[1] = 'x';
        e[2] = hex[c >> 4];
        e[3] = hex[c & 15];
        return 4;
    } else {
        e[0] = (char)c;
        return 1;
    }
    return 2;
}

const char *rk_escape(const char *s, size_t len, char *out, size_t cap) {
    char e[4];
    size_t need = 0, o = 0;
    for (size_t i = 0; i < len; i++) need += escape_byte((unsigned char)s[i], e);
    const size_t room = need < cap ? need : cap - 4; /* all of it, or what fits before "..." */
    for (size_t i = 0; i < len; i++) {
        const size_t n = escape_byte((unsigned char)s[i], e);
        if (o + n > room) break;
        memcpy(out + o, e, n);
        o += n;
    }
    memcpy(out + o, need < cap ? "" : "...", need < cap ? 1 : 4);
    return out;
}

const char *rk_printable(const char *s, char *out, size_t cap) {
    return s ? rk_escape(s, strlen(s), out, cap) : rk_escape("(null)", 6, out, cap);
}

/* ---- spellings: one table per enum, built from its list in rk.h ---------------------------------- */
#define RK_ROW_(e, spelling, token) {e, #spelling, #token},
#define RK_TABLE_(what, LIST)                                 \
    static const rk_spelling what##_rows[] = {LIST(RK_ROW_)}; \
    const rk_enum rk_##what##_enum = {(int)(sizeof what##_rows / sizeof what##_rows[0]), what##_rows};
RK_TABLE_(vendor, RK_VENDOR_LIST)
RK_TABLE_(compiler, RK_COMPILER_LIST)
RK_TABLE_(fp8, RK_FP8_LIST)
RK_TABLE_(rope, RK_ROPE_LIST)
RK_TABLE_(cos_sin, RK_COS_SIN_LIST)
RK_TABLE_(scale, RK_SCALE_LIST)
RK_TABLE_(neg, RK_NEG_LIST)
RK_TABLE_(kv, RK_KV_LIST)
RK_TABLE_(qform, RK_QFORM_LIST)
RK_TABLE_(index, RK_INDEX_LIST)
RK_TABLE_(qdtype, RK_QDTYPE_LIST)
RK_TABLE_(layout, RK_LAYOUT_LIST)
RK_TABLE_(op, RK_OP_LIST)
RK_TABLE_(tile_scale, RK_TILE_SCALE_LIST)
RK_TABLE_(read_neg, RK_READ_NEG_LIST)
RK_TABLE_(norm, RK_NORM_LIST)
RK_TABLE_(norm_weight, RK_NORM_WEIGHT_LIST)
RK_TABLE_(norm_round, RK_NORM_ROUND_LIST)
RK_TABLE_(norm_over, RK_NORM_OVER_LIST)
RK_TABLE_(q_norm, RK_Q_NORM_LIST)
RK_TABLE_(order, RK_ORDER_LIST)

static const rk_spelling *row_of(const rk_enum *e, int value) {
    for (int i = 0; i < e->n; i++)
        if (e->v[i].value == value) return &e->v[i];
    return NULL;
}

const char *rk_enum_name(const rk_enum *e, int value) {
    const rk_spelling *r = row_of(e, value);
    return r ? r->name : NULL;
}

const char *rk_enum_token(const rk_enum *e, int value) {
    const rk_spelling *r = row_of(e, value);
    return r ? r->token : NULL;
}

const char *rk_vendor_name(rk_vendor v) { return rk_enum_name(&rk_vendor_enum, (int)v); }
const char *rk_compiler_name(rk_compiler c) { return rk_enum_name(&rk_compiler_enum, (int)c); }
const char *rk_fp8_name(rk_fp8_fmt f) { return rk_enum_name(&rk_fp8_enum, (int)f); }
const char *rk_rope_name(rk_rope r) { return rk_enum_name(&rk_rope_enum, (int)r); }
const char *rk_cos_sin_name(rk_cos_sin c) { return rk_enum_name(&rk_cos_sin_enum, (int)c); }
const char *rk_scale_name(rk_scale s) { return rk_enum_name(&rk_scale_enum, (int)s); }
const char *rk_neg_name(rk_neg n) { return rk_enum_name(&rk_neg_enum, (int)n); }
const char *rk_kv_name(ropekv_kv_dtype k) { return rk_enum_name(&rk_kv_enum, (int)k); }
const char *rk_qform_name(ropekv_q_form q) { return rk_enum_name(&rk_qform_enum, (int)q); }
const char *rk_idx_name(ropekv_index i) { return rk_enum_name(&rk_index_enum, (int)i); }
const char *rk_qdtype_name(ropekv_q_dtype q) { return rk_enum_name(&rk_qdtype_enum, (int)q); }
const char *rk_layout_name(ropekv_kv_layout l) { return rk_enum_name(&rk_layout_enum, (int)l); }
const char *rk_op_name(ropekv_op o) { return rk_enum_name(&rk_op_enum, (int)o); }
const char *rk_norm_name(ropekv_norm n) { return rk_enum_name(&rk_norm_enum, (int)n); }

void rk_float_text(float x, char *out, size_t cap) {
    for (int digits = 1; digits <= 9; digits++) {
        snprintf(out, cap, "%.*g", digits, (double)x);
        if (strtof(out, NULL) == x) return;
    }
}

/* ---- architecture table ------------------------------------------------------------------------ */
int rk_arch_max_block(const rk_arch *a) { return a->wide_block > a->block ? a->wide_block : a->block; }

const char *rk_arch_code(const rk_arch *a, const char *target, char *out, size_t cap) {
    const size_t n = strlen(target);
    /* sm_ and digits only: a target that names its variant already (sm_90a, sm_100f) is taken as it is */
    int plain = n > 3 && strncmp(target, "sm_", 3) == 0;
    for (size_t i = 3; plain && i < n; i++) plain = target[i] >= '0' && target[i] <= '9';
    const int w = snprintf(out, cap, "%s%s", target, a && a->family && plain ? "f" : "");
    return w >= 0 && (size_t)w < cap ? out : NULL;
}

const rk_arch *rk_arch_find(const rk_arch_table *t, const char *name) {
    if (t == NULL || name == NULL) return NULL;
    for (int i = 0; i < t->n && i < RK_MAX_ARCHS; i++)
        if (strcmp(t->a[i].name, name) == 0) return &t->a[i];
    return NULL;
}
