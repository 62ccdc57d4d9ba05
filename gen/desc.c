/* The kernel description: (spec, arch row, choices) -> every code parameter, the variant key and the
 * kernel name; the enumeration of a spec's variants for the tools; the launch plan. */
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rk.h"

/* "448" or "1p5": a float spelled with identifier characters. */
static void sat_token(float sat, char *out, size_t cap) {
    snprintf(out, cap, "%.9g", (double)sat);
    for (char *c = out; *c; c++)
        if (*c == '.') *c = 'p';
}

static int valid_target_chars(const char *t) {
    if (!*t) return 0;
    for (; *t; t++)
        if (!((*t >= 'a' && *t <= 'z') || (*t >= '0' && *t <= '9') || *t == '_')) return 0;
    return 1;
}

/* "bf16", or "fp8" and the format's token, for a cache or query dtype. */
static void dtype_token(int fp8, rk_fp8_fmt fmt, char *out, size_t cap) {
    snprintf(out, cap, "%s%s", fp8 ? "fp8" : "bf16", fp8 ? rk_enum_token(&rk_fp8_enum, fmt) : "");
}

/* FNV-1a over n bytes. */
static uint32_t fnv(uint32_t h, const void *p, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ ((const uint8_t *)p)[i]) * 16777619u;
    return h;
}

/* Field by field, so that padding in the structs does not count. */
uint32_t rk_record_digest(const rk_record *r) {
    uint32_t h = 2166136261u;
    const int head[] = {r->L, r->R, r->row_bytes, r->split_at, r->tail_bytes, r->conv, r->n_seg};
    h = fnv(h, head, sizeof head);
    for (int i = 0; i < r->n_seg; i++) {
        const rk_segment *g = &r->seg[i];
        const int f[] = {g->from,      g->n,          (int)g->elem, g->at,
                         g->block,     (int)g->scale, (int)g->rule, (int)g->scale_at,
                         g->scales_at, (int)g->outer, g->outer_at,  g->rope_bf16};
        h = fnv(h, f, sizeof f);
        h = fnv(h, &g->sat_ocp, sizeof g->sat_ocp);
        h = fnv(h, &g->sat_fnuz, sizeof g->sat_fnuz);
        const float floor = rk_seg_floor(g);
        if (floor != FLT_MIN || g->block_conv != RK_BC_DIV || g->interleave != 0) { /* older records' digests kept */
            const int more[] = {(int)g->block_conv, g->interleave};
            h = fnv(h, &floor, sizeof floor);
            h = fnv(h, more, sizeof more);
        }
    }
    return h;
}

/* The row format's part of a name: bf16 | fp8<fmt>_<scale>_sat<N>_rr<0|1> |
 * fp8tile<fmt>_t<tile>_<f32|pow2>_sat<N>_at<scales_at>_<rope_at> for a kv dtype's row; rec<name without '_'>_<digest>
 * for a record of the spec's (rk_record_digest: the bytes it writes; the target's fp8 format is the name's target). */
static void kv_token(const rk_desc *d, char *out, size_t cap) {
    char sat[32], kv[32];
    if (d->record) { /* a record of the spec's: rec<name>_<digest> (two records of one name may differ) */
        size_t k = (size_t)snprintf(out, cap, "rec");
        for (const char *c = d->rec.name; *c && k + 1 < cap; c++)
            if (*c != '_') out[k++] = *c;
        out[k < cap ? k : cap - 1] = '\0';
        if (k < cap) snprintf(out + k, cap - k, "_%08x", (unsigned)rk_record_digest(&d->rec));
        return;
    }
    sat_token(d->kv8_sat, sat, sizeof sat);
    dtype_token(d->kv != ROPEKV_KV_BF16, d->fp8, kv, sizeof kv);
    if (d->kv == ROPEKV_KV_BF16) snprintf(out, cap, "%s", kv);
    else if (d->kv == ROPEKV_KV_FP8_E4M3)
        snprintf(out, cap, "%s_%s_sat%s_rr%d", kv, rk_enum_token(&rk_scale_enum, d->kv8_scale), sat, d->kv8_rope_bf16);
    else
        snprintf(out, cap, "fp8tile%s_t%d_%s_sat%s_at%d_%d", rk_enum_token(&rk_fp8_enum, d->fp8), d->tile,
                 rk_enum_token(&rk_tile_scale_enum, d->tile_scale), sat, d->scales_at, d->rope_at);
}


/* An eps as the shortest decimal that reads back as the float, spelled with identifier characters: 1em06. */
static void eps_token(float eps, char *out, size_t cap) {
    rk_float_text(eps, out, cap);
    for (char *e = out; *e; e++) *e = *e == '-' ? 'm' : *e == '+' || *e == '.' ? 'p' : *e;
}

/* write: rk_L<L>_R<R>_<rope>_<cossin>_p<32|64>_s<32|64>_<kv>_<qform>_q<qdtype>_<scale>_sat<N>_rr<0|1>
 *          _<skipkv|skipall>_san<0|1>_<flat|paged|split>[_<rms|rmsout>_<wbf16|wf32>_eps<N>_<r2|r1>[_oh]][_qrms_eps<N>]
 *          _<target>
 * read:  rkread_L<L>_R<R>_s<32|64>_<kv>_<rzero|rskip>_<flat|paged|split>_<target>
 * from the tokens of the spelling tables; kv per kv_token, qdtype bf16, fp8ocp or fp8fnuz. */
static int format_name(const rk_desc *d, char *out, size_t cap) {
    char qsat[32], kv[96], q[32];
    int n;
    kv_token(d, kv, sizeof kv);
    if (d->op == ROPEKV_OP_READ) {
        n = snprintf(out, cap, "rkread_L%d_R%d_s%s_%s_%s_%s_%s", d->L, d->R, rk_enum_token(&rk_index_enum, d->slot), kv,
                     rk_enum_token(&rk_read_neg_enum, d->read_neg), rk_enum_token(&rk_layout_enum, d->layout),
                     d->arch->name);
        return n > 0 && (size_t)n < cap ? 0 : -1;
    }
    sat_token(d->q8_sat, qsat, sizeof qsat);
    dtype_token(d->q_dtype != ROPEKV_Q_BF16, d->fp8, q, sizeof q);
    char norm[64] = "", eps[32], qnorm[48] = "", qeps[32];
    if (d->norm != ROPEKV_NORM_NONE) {
        eps_token(d->norm_eps, eps, sizeof eps);
        snprintf(norm, sizeof norm, "_%s_%s_eps%s_%s%s", rk_enum_token(&rk_norm_enum, d->norm),
                 rk_enum_token(&rk_norm_weight_enum, d->norm_weight), eps,
                 rk_enum_token(&rk_norm_round_enum, d->norm_round), d->norm_over == RK_NO_HEAD ? "_oh" : "");
    }
    if (d->q_norm != RK_QN_NONE) {
        eps_token(d->q_norm_eps, qeps, sizeof qeps);
        snprintf(qnorm, sizeof qnorm, "_%s_eps%s", rk_enum_token(&rk_q_norm_enum, d->q_norm), qeps);
    }
    n = snprintf(out, cap, "rk_L%d_R%d_%s_%s_p%s_s%s_%s_%s_q%s_%s_sat%s_rr%d_%s_san%d_%s%s%s_%s", d->L, d->R,
                 rk_enum_token(&rk_rope_enum, d->rope), rk_enum_token(&rk_cos_sin_enum, d->cos_sin),
                 rk_enum_token(&rk_index_enum, d->pos), rk_enum_token(&rk_index_enum, d->slot), kv,
                 rk_enum_token(&rk_qform_enum, d->q), q, rk_enum_token(&rk_scale_enum, d->q8_scale), qsat,
                 d->q8_rope_bf16, rk_enum_token(&rk_neg_enum, d->neg), d->sanitize,
                 rk_enum_token(&rk_layout_enum, d->layout), norm, qnorm, d->arch->name);
    return n > 0 && (size_t)n < cap ? 0 : -1;
}

/* The saturation bound of an fp8 output under policy p on a target of format fmt. */
static float fp8_sat(const rk_fp8_policy *p, rk_fp8_fmt fmt) { return fmt == RK_FP8_FNUZ ? p->sat_fnuz : p->sat_ocp; }

int rk_desc_make(const rk_spec *s, const rk_arch *a, const rk_choice *c, rk_desc *d, rk_err *err) {
    memset(d, 0, sizeof *d);
    if (!rk_kv_name(c->kv) || !rk_qform_name(c->q) || !rk_idx_name(c->pos) || !rk_idx_name(c->slot) ||
        !rk_qdtype_name(c->q_dtype) || !rk_layout_name(c->layout) || !rk_op_name(c->op) || !rk_norm_name(c->norm) ||
        c->record < 0 || c->record > s->n_records)
        return rk_fail(err, ROPEKV_ERR_ARG, "variant has an out-of-range enum value or record index");
    const int read = c->op == ROPEKV_OP_READ;
    d->record = c->record;
    if (d->record) d->rec = s->records[d->record - 1];
    else rk_record_of_kv(s, c->kv, &d->rec);
    const char *rule = rk_geometry_refuses(s->rope_dim, read ? ROPEKV_Q_NONE : c->q, c->layout);
    if (rule) return rk_fail(err, ROPEKV_ERR_UNSUPPORTED, "%s: %s", s->name, rule);
    const char *why = rk_record_unsupported(&d->rec);
    if (why) return rk_fail(err, ROPEKV_ERR_UNSUPPORTED, "%s: record %s: %s", s->name, d->rec.name, why);
    if (!rk_record_fits(&d->rec, c->layout))
        return rk_fail(err, ROPEKV_ERR_UNSUPPORTED, "%s: record %s %s, not %s", s->name, d->rec.name,
                       d->rec.tail_bytes ? "keeps scales in the page tail: layout paged"
                                         : "is one row (no split_at): layout flat or paged",
                       rk_layout_name(c->layout));
    if (!read && c->norm != ROPEKV_NORM_NONE && s->norm.eps <= 0)
        return rk_fail(err, ROPEKV_ERR_UNSUPPORTED, "%s: norm %s needs the spec's kv_norm table (%s has none)", s->name,
                       rk_norm_name(c->norm), s->file);
    d->spec = s;
    d->arch = a;
    d->op = c->op;
    d->kv = d->record ? ROPEKV_KV_BF16 : c->kv;
    /* the read-back op has no query and reads no positions, nor does a write that rotates nothing: canonical values,
     * one kernel */
    d->q = read ? ROPEKV_Q_NONE : c->q;
    d->pos = read || s->rope == RK_ROPE_NONE ? ROPEKV_INDEX_INT64 : c->pos;
    d->slot = c->slot;
    d->q_dtype = d->q == ROPEKV_Q_NONE ? ROPEKV_Q_BF16 : c->q_dtype; /* no query output: nothing to convert */
    d->layout = c->layout;
    d->L = s->kv_lora_rank;
    d->R = s->rope_dim;
    /* the read-back op rotates nothing: canonical values, so that specs with the same rows share its kernels */
    d->rope = read ? RK_ROPE_NONE : s->rope;
    d->cos_sin = read || s->rope == RK_ROPE_NONE ? RK_CS_F32_CAT : s->cos_sin; /* no tables without a rotation */
    d->fp8 = a->fp8;
    d->neg = read ? RK_NEG_SKIP_KV : s->negative_slot;
    d->read_neg = read ? s->read_neg : RK_READ_ZERO;
    d->sanitize = read ? 0 : s->sanitize;
    /* the read-back op reads the cache: no norm */
    d->norm = read ? ROPEKV_NORM_NONE : c->norm;
    if (d->norm != ROPEKV_NORM_NONE) {
        d->norm_weight = s->norm.weight;
        d->norm_eps = s->norm.eps;
        d->norm_round = s->norm.round;
        d->norm_over = s->norm.over;
    }
    /* the query heads' norm, a fact of the model, on every write kernel with a query output */
    if (!read && d->q != ROPEKV_Q_NONE && s->q_norm.norm != RK_QN_NONE) {
        d->q_norm = s->q_norm.norm;
        d->q_norm_eps = s->q_norm.eps;
    }
    /* a norm over a whole row sums over lanes of one wave: the lanes row by row */
    d->order = !read && ((d->norm != ROPEKV_NORM_NONE && d->norm_over == RK_NO_HEAD) || d->q_norm != RK_QN_NONE)
                   ? RK_ORDER_ROWS
                   : RK_ORDER_SECTIONS;
    if (d->record) {
        /* a record's tensor scale takes k_scale under its own convention */
        for (int i = 0; i < d->rec.n_seg; i++)
            if (d->rec.seg[i].outer == RK_OUT_TENSOR) d->kv8_scale = (rk_scale)d->rec.conv;
    } else if (d->kv == ROPEKV_KV_FP8_E4M3) {
        d->kv8_scale = s->fp8.scale;
        /* the writer's clamp and rounding: not the reader's */
        d->kv8_sat = read ? 0.0f : fp8_sat(&s->fp8, d->fp8);
        d->kv8_rope_bf16 = read ? 0 : s->fp8.rope_bf16;
    } else if (d->kv == ROPEKV_KV_FP8_TILE) {
        const rk_tile_policy *t = &s->tile;
        d->kv8_scale = RK_SCALE_NONE;
        d->kv8_sat = read ? 0.0f : d->fp8 == RK_FP8_FNUZ ? t->sat_fnuz : t->sat_ocp;
        d->tile = t->tile;
        d->tile_scale = t->scale;
        d->scales_at = t->scales_at;
        d->rope_at = t->rope_at;
    }
    if (d->q_dtype != ROPEKV_Q_BF16) {
        d->q8_scale = s->q_fp8.scale;
        d->q8_sat = fp8_sat(&s->q_fp8, d->fp8);
        d->q8_rope_bf16 = s->q_fp8.rope_bf16;
    }
    if (read) /* the writer's bound and rope rounding: not the reader's */
        for (int i = 0; i < d->rec.n_seg; i++) {
            d->rec.seg[i].sat_ocp = d->rec.seg[i].sat_fnuz = 0.0f;
            d->rec.seg[i].rope_bf16 = 0;
        }
    d->row_bytes = d->layout == ROPEKV_KV_SPLIT ? d->rec.split_at : d->rec.row_bytes;
    char what[96];
    if (read) snprintf(what, sizeof what, "read");
    else snprintf(what, sizeof what, "%s/pos=%s", rk_qform_name(d->q), rk_idx_name(d->pos));
    int n = snprintf(d->key, sizeof d->key, "%s/%s/%s/%s/slot=%s%s%s%s%s%s%s", s->name, a->name, d->rec.name, what,
                     rk_idx_name(d->slot), d->q_dtype != ROPEKV_Q_BF16 ? "/q_dtype=" : "",
                     d->q_dtype != ROPEKV_Q_BF16 ? rk_qdtype_name(d->q_dtype) : "",
                     d->layout != ROPEKV_KV_FLAT ? "/layout=" : "",
                     d->layout != ROPEKV_KV_FLAT ? rk_layout_name(d->layout) : "",
                     d->norm != ROPEKV_NORM_NONE ? "/norm=" : "",
                     d->norm != ROPEKV_NORM_NONE ? rk_norm_name(d->norm) : "");
    if (n < 0 || (size_t)n >= sizeof d->key)
        return rk_fail(err, ROPEKV_ERR_SPEC_TARGET, "%s: target '%s' makes a variant key too long", s->file, a->name);
    if (!valid_target_chars(a->name) || format_name(d, d->name, sizeof d->name) != 0)
        return rk_fail(err, ROPEKV_ERR_SPEC_TARGET, "%s: target '%s' cannot be spelled in a kernel name", s->file,
                       a->name);
    return ROPEKV_OK;
}

/* ---- the public view ------------------------------------------------------------------------------------ */
/* A value of a row of gen/params.def as public text: a decimal, the shortest decimal of a float, true / false, or
 * the spelling ("" where the parameter does not apply). */
static void view(rk_views *o, const char *name, rk_param_kind kind, const rk_enum *e, double v, int applies) {
    rk_view *w = &o->v[o->n];
    char *text = o->text[o->n++];
    const char *s;
    w->name = name;
    w->value = text;
    switch (kind) {
    case RK_PK_INT:
        w->kind = ROPEKV_PARAM_INT;
        snprintf(text, sizeof o->text[0], "%lld", (long long)v);
        break;
    case RK_PK_FLOAT:
        w->kind = ROPEKV_PARAM_FLOAT;
        rk_float_text((float)v, text, sizeof o->text[0]);
        break;
    case RK_PK_BOOL:
        w->kind = ROPEKV_PARAM_BOOL;
        w->value = v != 0 ? "true" : "false";
        break;
    case RK_PK_ENUM:
        w->kind = ROPEKV_PARAM_TEXT;
        s = applies ? rk_enum_name(e, (int)v) : "";
        w->value = s ? s : "";
        break;
    }
}

static void text_view(rk_views *o, const char *name, const char *value) {
    o->v[o->n++] = (rk_view){name, ROPEKV_PARAM_TEXT, value};
}

void rk_desc_views(const rk_desc *d, int pdl, rk_views *out) {
    out->n = 0;
#define RK_PARAM(field, type, kind, table, cxx, constant, binding, pub, applies, comment) \
    if (pub[0]) view(out, pub, RK_PK_##kind, table, (double)d->field, applies);
#define RK_VIEW_TEXT(pub, expr, applies) text_view(out, pub, (applies) ? (expr) : "");
#define RK_VIEW_NUMBER(pub, kind, expr) view(out, pub, RK_PK_##kind, NULL, (double)(expr), 1);
#include "params.def"
}

/* ---- the tensors --------------------------------------------------------------------------------------- */
const char *rk_sym_name(rk_sym s) {
    static const char *const names[] = {
#define RK_SYM_NAME_(e, text) text,
        RK_SYM_LIST(RK_SYM_NAME_)
#undef RK_SYM_NAME_
    };
    return (unsigned)s < RK_SYM_COUNT ? names[s] : "";
}

int64_t rk_sym_size(const rk_desc *d, rk_sym s) {
    switch (s) {
    case RK_SYM_ONE: return 1;
    case RK_SYM_L: return d->L;
    case RK_SYM_R: return d->R;
    case RK_SYM_W: return d->L + d->R;
    case RK_SYM_HALF_R: return d->R / 2;
    case RK_SYM_ROW_BYTES: return d->row_bytes;
    case RK_SYM_ROPE_BYTES: return d->rec.row_bytes - d->rec.split_at;
    default: return -1;
    }
}

const char *rk_dtype_name(rk_dtype t) {
    switch (t) {
#define RK_DTYPE_NAME_(e, text, bytes) \
    case e: return text;
        RK_DTYPE_LIST(RK_DTYPE_NAME_)
#undef RK_DTYPE_NAME_
    }
    return "";
}

static int dtype_bytes(rk_dtype t) {
    switch (t) {
#define RK_DTYPE_BYTES_(e, text, bytes) \
    case e: return bytes;
        RK_DTYPE_LIST(RK_DTYPE_BYTES_)
#undef RK_DTYPE_BYTES_
    }
    return 1;
}

int rk_tensors(const rk_desc *d, rk_tensor *out, int cap) {
    int n = 0;
#define RK_ST(field) offsetof(ropekv_args, field), #field
#define RK_PACKED RK_NO_STRIDE, NULL
#define RK_TENSOR(name_, uses, access_, need_, dtype_, rank_, dim0, dim1, dim2, stride0, stride1, rule_, align_, \
                  unit_, label_, when_)                                                                          \
    if (uses) {                                                                                                  \
        const struct {                                                                                           \
            size_t at;                                                                                           \
            const char *name;                                                                                    \
        } st_[2] = {{stride0}, {stride1}};                                                                       \
        if (n < cap)                                                                                             \
            out[n] = (rk_tensor){.name = #name_,                                                                 \
                                 .at = offsetof(ropekv_args, name_),                                             \
                                 .access = (access_),                                                            \
                                 .need = (need_),                                                                \
                                 .dtype = (dtype_),                                                              \
                                 .elem = dtype_bytes(dtype_),                                                    \
                                 .rank = (rank_),                                                                \
                                 .dim = {(dim0), (dim1), (dim2)},                                                \
                                 .stride_at = {st_[0].at, st_[1].at},                                            \
                                 .stride = {st_[0].name, st_[1].name},                                           \
                                 .rule = (rule_),                                                                \
                                 .align = (align_),                                                              \
                                 .unit = (unit_),                                                                \
                                 .label = (label_),                                                              \
                                 .when = (when_)};                                                               \
        n++;                                                                                                     \
    }
#include "tensors.def"
    return n;
}

/* Merges one kernel's row r into the family's row f (the first kernel's row, seen == 1). */
static void family_merge(rk_tensor *f, const rk_tensor *r) {
    f->access |= r->access;
    if (f->need != r->need) f->need = ROPEKV_NEED_OPTIONAL;
    if (f->dtype != r->dtype) f->dtype = RK_DT_VARIES, f->elem = 0;
    int same = f->rank == r->rank && f->rule == r->rule;
    for (int i = 0; same && i < r->rank; i++) same = f->dim[i] == r->dim[i];
    for (int i = 0; same && i + 1 < r->rank; i++) same = f->stride_at[i] == r->stride_at[i];
    if (!same) {
        f->rank = 0;
        for (int i = 0; i < RK_TENSOR_RANK; i++) f->dim[i] = RK_SYM_NONE;
        for (int i = 0; i + 1 < RK_TENSOR_RANK; i++) f->stride_at[i] = RK_NO_STRIDE, f->stride[i] = NULL;
    }
    if (f->align != r->align || f->unit != r->unit) f->align = f->unit = 0;
    if (strcmp(f->when, r->when) != 0) f->when = "";
}

int rk_family_tensors(ropekv_op op, ropekv_q_form q, rk_tensor *out, int cap) {
    enum { NAMES = 24 };
    rk_tensor fam[NAMES];
    long seen[NAMES] = {0}, kernels = 0;
    int n = 0;
    const int write = op == ROPEKV_OP_WRITE;
    rk_desc d;
    memset(&d, 0, sizeof d);
    d.op = op;
    d.q = write ? q : ROPEKV_Q_NONE;
    d.pos = ROPEKV_INDEX_INT64;
    /* every choice and every spec-level value the rows read */
    rk_record split_rec; /* a record of the spec's (kv 3 below): bytes, split or not */
    memset(&split_rec, 0, sizeof split_rec);
    split_rec.split_at = 1;
    for (int kv = 0; kv < 4; kv++)
        for (int layout = 0; layout < 3; layout++)
            for (int qdt = 0; qdt < (write && d.q != ROPEKV_Q_NONE ? 2 : 1); qdt++)
                for (int pos = 0; pos < (write ? 2 : 1); pos++)
                    for (int slot = 0; slot < 2; slot++)
                        for (int geo = 0; geo < 3; geo++) /* rope gptj; rope none; no rope part (R = 0, rope none) */
                            for (int cs = 0; cs < 3; cs++)
                                for (int ks = 0; ks < (kv == ROPEKV_KV_FP8_E4M3 || kv == 3 ? 2 : 1); ks++)
                                    for (int qs = 0; qs < (qdt ? 2 : 1); qs++)
                                        for (int norm = 0; norm < (write ? 3 : 1); norm++)
                                            for (int nw = 0; nw < (norm ? 2 : 1); nw++) {
                                                if (kv < 3 &&
                                                    !rk_layout_fits((ropekv_kv_dtype)kv, (ropekv_kv_layout)layout))
                                                    continue;
                                                if (geo == 2 && rk_geometry_refuses(0, d.q, (ropekv_kv_layout)layout))
                                                    continue;
                                                d.R = geo == 2 ? 0 : 8;
                                                d.record = kv == 3;
                                                d.rec = split_rec;
                                                d.kv = kv == 3 ? ROPEKV_KV_BF16 : (ropekv_kv_dtype)kv;
                                                d.layout = (ropekv_kv_layout)layout;
                                                d.q_dtype = (ropekv_q_dtype)qdt;
                                                if (write) d.pos = (ropekv_index)pos;
                                                d.slot = (ropekv_index)slot;
                                                d.rope = geo ? RK_ROPE_NONE : RK_ROPE_GPTJ;
                                                d.cos_sin = (rk_cos_sin)cs;
                                                d.kv8_scale = ks ? RK_SCALE_MUL_RECIP : RK_SCALE_NONE;
                                                d.q8_scale = qs ? RK_SCALE_MUL_RECIP : RK_SCALE_NONE;
                                                d.norm = (ropekv_norm)norm;
                                                d.norm_weight = nw ? RK_NW_F32 : RK_NW_BF16;
                                                rk_tensor rows[RK_TENSORS_MAX];
                                                const int m = rk_tensors(&d, rows, RK_TENSORS_MAX);
                                                kernels++;
                                                for (int i = 0; i < m && i < RK_TENSORS_MAX; i++) {
                                                    int j = 0;
                                                    while (j < n && strcmp(fam[j].name, rows[i].name) != 0) j++;
                                                    if (j == n) {
                                                        if (n == NAMES) continue;
                                                        fam[n++] = rows[i];
                                                    } else {
                                                        family_merge(&fam[j], &rows[i]);
                                                    }
                                                    seen[j]++;
                                                }
                                            }
    for (int j = 0; j < n; j++)
        if (seen[j] < kernels) fam[j].need = ROPEKV_NEED_OPTIONAL;
    for (int j = 1; j < n; j++) /* the order of the rows (of the pointers in ropekv_args) */
        for (int i = j; i > 0 && fam[i].at < fam[i - 1].at; i--) {
            const rk_tensor t = fam[i];
            fam[i] = fam[i - 1];
            fam[i - 1] = t;
        }
    int k = 0;
    for (int j = 0; j < n; j++) {
        if (k < cap) out[k] = fam[j];
        k++;
    }
    return k;
}

rk_choice rk_desc_choice(const rk_desc *d) {
    return (rk_choice){d->kv, d->q, d->pos, d->slot, d->q_dtype, d->layout, d->op, d->norm, d->record};
}

/* One of the caller's choices and the spec's list for it (enum values, read as int). */
typedef struct choice {
    const char *key; /* the spec's key for the list */
    const rk_enum *e;
    int n, list[4], want;
} choice;

static int listed(const choice *c) {
    for (int i = 0; i < c->n; i++)
        if (c->list[i] == c->want) return 1;
    return 0;
}

static int kv_row(const rk_spec *s, ropekv_kv_dtype kv);

int rk_desc_listed(const rk_spec *s, const rk_arch *a, const rk_choice *ch, rk_desc *d, rk_err *err) {
    int rc = rk_desc_make(s, a, ch, d, err);
    if (rc != ROPEKV_OK) return rc;
    int t = 0;
    while (t < s->n_targets && strcmp(s->targets[t], a->name) != 0) t++;
    if (t == s->n_targets)
        return rk_fail(err, ROPEKV_ERR_UNSUPPORTED, "spec %s (%s) does not list target %s (variant %s)", s->name,
                       s->file, a->name, d->key);
    choice c[8] = {{"kv_dtypes", &rk_kv_enum, s->n_kv, {0}, (int)d->kv},
                   {"q_forms", &rk_qform_enum, s->n_q, {0}, (int)d->q},
                   {"positions", &rk_index_enum, s->n_pos, {0}, (int)d->pos},
                   {"slots", &rk_index_enum, s->n_slot, {0}, (int)d->slot},
                   {"q_dtypes", &rk_qdtype_enum, s->n_qdt, {0}, (int)d->q_dtype},
                   {"kv_layouts", &rk_layout_enum, s->n_layout, {0}, (int)d->layout},
                   {"ops", &rk_op_enum, s->n_ops, {0}, (int)d->op},
                   {"norms", &rk_norm_enum, s->n_norms, {0}, (int)d->norm}};
    for (int i = 0; i < s->n_kv; i++) c[0].list[i] = (int)s->kv[i];
    /* the row: a record of the spec's, or a kv dtype the spec lists (in kv_dtypes, or a record of its name) */
    const int row_listed = d->record > 0 || kv_row(s, d->kv) >= 0;
    for (int i = 0; i < s->n_q; i++) c[1].list[i] = (int)s->q[i];
    for (int i = 0; i < s->n_pos; i++) c[2].list[i] = (int)s->pos[i];
    for (int i = 0; i < s->n_slot; i++) c[3].list[i] = (int)s->slot[i];
    for (int i = 0; i < s->n_qdt; i++) c[4].list[i] = (int)s->q_dtypes[i];
    for (int i = 0; i < s->n_layout; i++) c[5].list[i] = (int)s->layouts[i];
    for (int i = 0; i < s->n_ops; i++) c[6].list[i] = (int)s->ops[i];
    for (int i = 0; i < s->n_norms; i++) c[7].list[i] = (int)s->norms[i];
    const int read = d->op == ROPEKV_OP_READ;
    for (int k = 0; k < 8; k++) {
        /* q form none writes no query: its kernel is the bf16 one whatever the spec's q dtypes; the read-back
         * op has no query, reads no positions and normalizes nothing */
        if ((k == 0 ? row_listed : listed(&c[k])) || (k == 4 && d->q == ROPEKV_Q_NONE) ||
            (read && (k == 1 || k == 2 || k == 7)) || (k == 2 && d->rope == RK_ROPE_NONE))
            continue;
        char got[128];
        size_t at = 0;
        got[0] = '\0';
        for (int i = 0; i < c[k].n && at < sizeof got; i++)
            at += (size_t)snprintf(got + at, sizeof got - at, "%s%s", i ? ", " : "",
                                   rk_enum_name(c[k].e, c[k].list[i]));
        /* a value the model cannot have is left out of an open choice: say which fact of the spec leaves it out */
        const char *why = k == 0 && c[k].want == ROPEKV_KV_FP8_TILE && !s->tile.row_bytes
                              ? ": the spec has no fp8_tile table"
                          : k == 1 && c[k].want == ROPEKV_Q_INPLACE && s->rope == RK_ROPE_NONE
                              ? ": rope 'none' leaves nothing to rotate in place"
                              : "";
        /* the row: the spec's other rows are its records (ropekv_variant.record) */
        char rows[RK_MAX_ROWS * 34] = "";
        if (k == 0 && rk_spec_rows(s) > s->n_kv) {
            size_t r = (size_t)snprintf(rows, sizeof rows, "; its records (by name):");
            for (int i = s->n_kv; i < rk_spec_rows(s) && r < sizeof rows; i++)
                r += (size_t)snprintf(rows + r, sizeof rows - r, " %s", rk_spec_row(s, i, NULL, NULL));
        }
        return rk_fail(err, ROPEKV_ERR_UNSUPPORTED, "spec %s lists %s {%s}, not %s%s (variant %s)%s", s->name, c[k].key,
                       got, rk_enum_name(c[k].e, c[k].want), why, d->key, rows);
    }
    return ROPEKV_OK;
}

const char *rk_geometry_refuses(int R, ropekv_q_form q, ropekv_kv_layout layout) {
    if (R > 0) return NULL;
    if (q == ROPEKV_Q_ZERO_COPY) return "R = 0: no rope part (q form zero_copy writes only the query's rope part)";
    if (q == ROPEKV_Q_INPLACE) return "R = 0: no rope part (q form inplace writes only the query's rope part)";
    if (layout == ROPEKV_KV_SPLIT) return "R = 0: no rope part (layout split keeps it in a cache of its own)";
    return NULL;
}

int rk_layout_fits(ropekv_kv_dtype kv, ropekv_kv_layout layout) {
    return !(kv == ROPEKV_KV_FP8_TILE && layout == ROPEKV_KV_SPLIT);
}

int rk_record_fits(const rk_record *r, ropekv_kv_layout layout) {
    if (layout == ROPEKV_KV_SPLIT && r->split_at <= 0) return 0;
    return r->tail_bytes == 0 || layout == ROPEKV_KV_PAGED;
}

const char *rk_record_unsupported(const rk_record *r) {
    const int chunks = r->L / 8;
    for (int i = 0; i < r->n_seg; i++) {
        const rk_segment *g = &r->seg[i];
        /* the kernels find a token's amax over the latent's lanes, as the fused norm sums them */
        if (g->outer == RK_OUT_TOKEN && (g->from != 0 || g->n != r->L || (chunks & (chunks - 1)) != 0 || !g->block))
            return "the kernels write a per-token outer scale over blocks of the whole latent (from 0, n = L, L / 8 a "
                   "power of two) only; the reference encodes any";
    }
    return NULL;
}

/* The kv dtype a record's name spells, or -1. */
static int kv_of_name(const char *name) {
    for (int k = 0; k < rk_kv_enum.n; k++)
        if (strcmp(rk_kv_enum.v[k].name, name) == 0) return rk_kv_enum.v[k].value;
    return -1;
}

/* The row of kv dtype kv: its index in rk_spec_rows, or -1 when the spec lists it nowhere. */
static int kv_row(const rk_spec *s, ropekv_kv_dtype kv) {
    const int n = rk_spec_rows(s);
    for (int i = 0; i < n; i++) {
        rk_choice c;
        rk_spec_row(s, i, &c, NULL);
        if (c.record == 0 && c.kv == kv) return i;
    }
    return -1;
}

int rk_spec_rows(const rk_spec *s) {
    int n = s->n_kv;
    for (int i = 0; i < s->n_records; i++) {
        const int kv = kv_of_name(s->records[i].name);
        int dup = 0;
        for (int k = 0; k < s->n_kv && kv >= 0; k++) dup |= (int)s->kv[k] == kv;
        n += !dup;
    }
    return n;
}

const char *rk_spec_row(const rk_spec *s, int i, rk_choice *c, rk_record *r) {
    rk_choice row = {0};
    if (i < s->n_kv) {
        row.kv = s->kv[i];
    } else {
        int left = i - s->n_kv, at = 0;
        for (; at < s->n_records; at++) {
            const int kv = kv_of_name(s->records[at].name);
            int dup = 0;
            for (int k = 0; k < s->n_kv && kv >= 0; k++) dup |= (int)s->kv[k] == kv;
            if (!dup && left-- == 0) break;
        }
        if (at == s->n_records) return NULL;
        const int kv = kv_of_name(s->records[at].name);
        if (kv >= 0) row.kv = (ropekv_kv_dtype)kv; /* the spec's loader checked that it is that dtype's row */
        else row.record = at + 1;
    }
    if (c) {
        c->kv = row.kv;
        c->record = row.record;
    }
    rk_record tmp;
    if (!r) r = &tmp;
    if (row.record) *r = s->records[row.record - 1];
    else rk_record_of_kv(s, row.kv, r);
    return row.record ? s->records[row.record - 1].name : rk_kv_name(row.kv);
}

/* The names of the spec's rows, comma separated. */
static void row_names(const rk_spec *s, char *out, size_t cap) {
    size_t at = 0;
    out[0] = '\0';
    const int n = rk_spec_rows(s);
    for (int i = 0; i < n && at < cap; i++)
        at += (size_t)snprintf(out + at, cap - at, "%s%s", i ? ", " : "", rk_spec_row(s, i, NULL, NULL));
}

int rk_spec_row_find(const rk_spec *s, const char *name, rk_choice *c, rk_err *err) {
    const int n = rk_spec_rows(s);
    for (int i = 0; i < n; i++) {
        rk_choice row;
        if (strcmp(rk_spec_row(s, i, &row, NULL), name) != 0) continue;
        c->kv = row.kv;
        c->record = row.record;
        return ROPEKV_OK;
    }
    char rows[RK_MAX_ROWS * 34], esc[80];
    row_names(s, rows, sizeof rows);
    return rk_fail(err, ROPEKV_ERR_UNSUPPORTED, "spec %s has no record named '%s' (its records: %s)", s->name,
                   rk_printable(name, esc, sizeof esc), rows);
}

int rk_desc_kv_elem(const rk_desc *d) { return d->record == 0 && d->kv == ROPEKV_KV_BF16 ? 2 : 1; }

int rk_variants(const rk_spec *s, const rk_arch_table *archs, rk_desc *out, int cap, rk_err *err) {
    int n = 0;
    for (int t = 0; t < s->n_targets; t++) {
        const rk_arch *a = rk_arch_find(archs, s->targets[t]);
        if (!a) {
            rk_fail(err, ROPEKV_ERR_SPEC_TARGET, "%s: targets[%d]: unknown target '%s'", s->file, t + 1, s->targets[t]);
            return -1;
        }
        const int rows = rk_spec_rows(s);
        for (int k = 0; k < rows; k++) {
            rk_choice c[RK_MAX_VARIANTS_PER_SPEC / RK_MAX_TARGETS / RK_MAX_ROWS], row;
            rk_record rec;
            int m = 0;
            rk_spec_row(s, k, &row, &rec);
            if (rk_record_unsupported(&rec)) continue; /* not in the kernels yet: rk_desc_make says why */
            for (int op = 0; op < s->n_ops; op++) {
                if (s->ops[op] == ROPEKV_OP_READ) {
                    for (int sl = 0; sl < s->n_slot; sl++)
                        for (int ly = 0; ly < s->n_layout; ly++)
                            if (rk_record_fits(&rec, s->layouts[ly]))
                                c[m++] = (rk_choice){row.kv,         ROPEKV_Q_NONE,    ROPEKV_INDEX_INT64,
                                                     s->slot[sl],    ROPEKV_Q_BF16,    s->layouts[ly],
                                                     ROPEKV_OP_READ, ROPEKV_NORM_NONE, row.record};
                    continue;
                }
                for (int nm = 0; nm < s->n_norms; nm++)
                    for (int q = 0; q < s->n_q; q++)
                        for (int qd = 0; qd < (s->q[q] == ROPEKV_Q_NONE ? 1 : s->n_qdt); qd++)
                            for (int p = 0; p < (s->rope == RK_ROPE_NONE ? 1 : s->n_pos); p++)
                                for (int sl = 0; sl < s->n_slot; sl++)
                                    for (int ly = 0; ly < s->n_layout; ly++)
                                        /* q form none takes one q dtype: rk_desc_make makes it bf16 */
                                        if (rk_record_fits(&rec, s->layouts[ly]))
                                            c[m++] = (rk_choice){row.kv,          s->q[q],         s->pos[p],
                                                                 s->slot[sl],     s->q_dtypes[qd], s->layouts[ly],
                                                                 ROPEKV_OP_WRITE, s->norms[nm],    row.record};
            }
            for (int i = 0; i < m; i++) {
                if (n == cap) {
                    rk_fail(err, ROPEKV_ERR_NOMEM, "%s: more than %d variants", s->file, cap);
                    return -1;
                }
                if (rk_desc_make(s, a, &c[i], &out[n], err) != ROPEKV_OK) return -1;
                n++;
            }
        }
    }
    return n;
}

void rk_div_magic(int64_t d, int64_t *mul, int64_t *shift) {
    *mul = *shift = 0;
    if (d < 1 || d >= ((int64_t)1 << 31)) return;
    int l = 0;
    while (((int64_t)1 << l) < d) l++;
    /* With e = mul * d - 2^shift in [0, d) and n = q d + r: n * mul / 2^shift = n / d + n e / (d 2^shift)
     * < q + (d - 1) / d + 2^31 / 2^(31 + l) <= q + 1, since 2^l >= d. */
    *shift = 31 + l;
    *mul = (int64_t)((((uint64_t)1 << *shift) + (uint64_t)d - 1) / (uint64_t)d);
}

int rk_norm_values(const rk_desc *d) { return d->norm_over == RK_NO_HEAD ? d->L + d->R : d->L; }

int rk_desc_writes_e2m1(const rk_desc *d) {
    int row = 0;
    for (int i = 0; i < d->rec.n_seg; i++) row |= d->rec.seg[i].elem == RK_EL_E2M1;
    return d->op == ROPEKV_OP_WRITE && row;
}

int rk_desc_writes_fp8(const rk_desc *d) {
    int row = 0; /* an e4m3 value or scale in the row */
    for (int i = 0; i < d->rec.n_seg; i++) row |= d->rec.seg[i].elem == RK_EL_E4M3 || d->rec.seg[i].scale == RK_ST_E4M3;
    return d->op == ROPEKV_OP_WRITE && (row || d->q_dtype != ROPEKV_Q_BF16);
}

/* The latent's segment (the one from 0) when a latent lane may take two neighbouring chunks of it, else NULL. */
static const rk_segment *latent_pairs(const rk_desc *d) {
    for (int i = 0; i < d->rec.n_seg; i++) {
        const rk_segment *g = &d->rec.seg[i];
        if (g->from == 0) /* the pair's bytes in one aligned access: 16 e4m3 bytes or 8 e2m1 ones */
            return g->n >= d->L && g->elem != RK_EL_BF16 && g->block > 0 &&
                           g->at % (g->elem == RK_EL_E4M3 ? 16 : 8) == 0 && (d->L / 8) % 2 == 0 &&
                           (g->block / 8) % 2 == 0
                       ? g
                       : NULL;
    }
    return NULL;
}

int rk_read_pairs(const rk_desc *d) { return d->op == ROPEKV_OP_READ && latent_pairs(d) != NULL; }

int rk_write_pairs(const rk_desc *d) {
    const rk_segment *g = latent_pairs(d);
    /* a latent segment that also holds the rope part (DeepSeek-V4.1's rows) keeps a chunk a lane: its kernel would
     * hold the rope lanes' and both latent paths in one segment's code (sm_90: 32 -> 40 registers, twice the code),
     * and ran 7-8% slower at 8192 x 16 on an H100 (docs/results.md) */
    return d->op == ROPEKV_OP_WRITE && d->arch->write_pairs && g != NULL && g->n == d->L && g->outer != RK_OUT_TOKEN &&
           d->norm == ROPEKV_NORM_NONE && rk_kv_group(d) > 1;
}

int rk_query_rope_lanes(const rk_desc *d) {
    if (d->q == ROPEKV_Q_NONE) return 0;
    return d->R / 8;
}

int rk_kv_group(const rk_desc *d) {
    const int r = d->R / 8, wave = d->arch->wave;
    if (d->op != ROPEKV_OP_WRITE || d->q != ROPEKV_Q_NONE || d->order == RK_ORDER_ROWS || r <= 0 || wave <= 0) return 1;
    int x = wave, y = r; /* gcd */
    while (y) {
        const int z = x % y;
        x = y;
        y = z;
    }
    return wave / x;
}

int rk_desc_chunks(const rk_desc *d, int64_t *from) {
    const int read = d->op == ROPEKV_OP_READ;
    if (from) *from = read ? d->arch->read_chunks_from : d->arch->chunks_from;
    const int n = read ? d->arch->read_chunks : d->arch->chunks;
    return n > 0 ? n : 1;
}

void rk_launch_plan(const rk_desc *d, rk_args *a, int64_t *total, int64_t *blocks, int *block) {
    const int wave = d->arch->wave, read = d->op == ROPEKV_OP_READ;
    int64_t chunks_from;
    const int chunks = rk_desc_chunks(d, &chunks_from);
    if (read) { /* read: a lane per 16-byte chunk of the bf16 output row (templates/read.hip) */
        a->lanes = (d->L + d->R) / 8;
        if (rk_read_pairs(d) && a->tokens * a->lanes >= d->arch->chunks_from) a->lanes = d->L / 16 + d->R / 8;
        a->kv_group = 1;
        a->grid_groups = a->tokens;
    } else {
        /* the query rows written: the model's heads and the padded ones (q_heads, resolved by the launcher) */
        const int64_t hq = a->q_heads > a->heads ? a->q_heads : a->heads;
        const int64_t qr = rk_query_rope_lanes(d), qn = d->q == ROPEKV_Q_ABSORBED ? d->L / 8 : 0;
        const int64_t rope = (hq * qr + d->R / 8 + wave - 1) / wave * wave; /* the kernel's rope_lanes */
        a->q_heads = hq;
        /* row by row: q_heads query rows then the KV row, (L + R) / 8 lanes each (the kernel's row_chunk_of) */
        if (d->order == RK_ORDER_ROWS) a->lanes = (d->q == ROPEKV_Q_NONE ? 1 : hq + 1) * ((d->L + d->R) / 8);
        else a->lanes = rope + hq * qn + d->L / 8;
        /* tokens [0, tokens) have query rows and [0, kv_tokens) KV rows; a launch without a query form has only
         * the KV rows to write, whatever tokens says */
        const int64_t rows = d->q == ROPEKV_Q_NONE ? a->kv_tokens : a->tokens > a->kv_tokens ? a->tokens : a->kv_tokens;
        /* a KV-only launch bound by throughput takes its tokens in groups whose rope chunks fill whole waves (below
         * chunks_from a launch is one short wave of latency chains, and a token a group is as fast or faster) */
        const int group = rk_kv_group(d);
        a->kv_group = group > 1 && rows * a->lanes >= d->arch->chunks_from ? group : 1;
        if (a->kv_group > 1) a->lanes = a->kv_group * (d->R / 8 + d->L / (rk_write_pairs(d) ? 16 : 8));
        a->grid_groups = (rows + a->kv_group - 1) / a->kv_group;
    }
    rk_div_magic(a->lanes, &a->lanes_mul, &a->lanes_shift);
    a->block_mul = a->block_shift = a->block_gap = a->rope_block_gap = 0;
    if (d->layout != ROPEKV_KV_FLAT) {
        rk_div_magic(a->kv_block_size, &a->block_mul, &a->block_shift);
        /* two's complement: the kernel's row arithmetic is modulo 2^64, where the row's true offset lies */
        a->block_gap = (int64_t)((uint64_t)a->kv_block_st - (uint64_t)a->kv_block_size * (uint64_t)a->kv_st);
        a->rope_block_gap = (int64_t)((uint64_t)a->kv_rope_block_st -
                                      (uint64_t)a->kv_block_size * (uint64_t)a->kv_rope_st);
    }
    *total = a->grid_groups * a->lanes;
    *block = *total >= d->arch->wide_from ? d->arch->wide_block : d->arch->block;
    a->chunks = chunks > 1 && *total >= chunks_from ? chunks : 1;
    a->early_release = a->chunks == 1;
    const int64_t per_block = *block * a->chunks;
    *blocks = (*total + per_block - 1) / per_block;
}
