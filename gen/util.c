/* Error reporting, enum spellings and their parsers, architecture lookup. */
#include "rk.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int rk_fail(rk_err *err, ropekv_status code, const char *fmt, ...)
{
    if (err != NULL) {
        va_list ap;
        err->code = code;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return (int)code;
}

/* ---- spellings: one table per enum, indexed by the enum value ---------------------------------- */
#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const char *const vendor_names[] = {"amd", "nvidia", "host"};
static const char *const compiler_names[] = {"hiprtc", "clang", "nvrtc", "host"};
static const char *const fp8_names[] = {"ocp", "fnuz"};
static const char *const rope_names[] = {"gptj", "neox", "none"};
static const char *const cos_sin_names[] = {"f32_cat", "f32_split", "bf16_split"};
static const char *const idx_names[] = {"int32", "int64"};
static const char *const kv_names[] = {"bf16", "fp8_e4m3"};
static const char *const scale_names[] = {"none", "mul_recip", "div", "mul"};
static const char *const neg_names[] = {"skip_kv", "skip_all"};
static const char *const qform_names[] = {"absorbed", "zero_copy", "inplace", "none"};

static const char *name_at(const char *const *names, int n, int v)
{
    return v >= 0 && v < n ? names[v] : NULL;
}

/* Index of s in names, or -1. */
static int name_find(const char *const *names, int n, const char *s)
{
    if (s == NULL)
        return -1;
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], s) == 0)
            return i;
    return -1;
}

/* rk_<what>_name and rk_parse_<what> for one enum. */
#define RK_NAMES(what, type, table)                                                                \
    const char *rk_##what##_name(type v) { return name_at(table, COUNT(table), (int)v); }          \
    int rk_parse_##what(const char *s, type *out)                                                  \
    {                                                                                              \
        int i = name_find(table, COUNT(table), s);                                                 \
        if (i < 0)                                                                                 \
            return -1;                                                                             \
        *out = (type)i;                                                                            \
        return 0;                                                                                  \
    }

RK_NAMES(vendor, rk_vendor, vendor_names)
RK_NAMES(compiler, rk_compiler, compiler_names)
RK_NAMES(fp8, rk_fp8_fmt, fp8_names)
RK_NAMES(rope, rk_rope, rope_names)
RK_NAMES(cos_sin, rk_cos_sin, cos_sin_names)
RK_NAMES(idx, ropekv_index, idx_names)
RK_NAMES(kv, ropekv_kv_dtype, kv_names)
RK_NAMES(scale, rk_scale, scale_names)
RK_NAMES(neg, rk_neg, neg_names)
RK_NAMES(qform, ropekv_q_form, qform_names)

/* ---- architecture table ------------------------------------------------------------------------ */
const rk_arch *rk_arch_find(const rk_arch_table *t, const char *name)
{
    if (t == NULL || name == NULL)
        return NULL;
    for (int i = 0; i < t->n && i < RK_MAX_ARCHS; i++)
        if (strcmp(t->a[i].name, name) == 0)
            return &t->a[i];
    return NULL;
}
