/* Variants of a spec: enumeration, canonical keys, and kernel names that parse back. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rk.h"

/* Name spellings: like the spec spellings but without underscores, so '_' separates fields. */
static const char *const ROPE_TOK[] = {"gptj", "neox", "nope"};
static const char *const CS_TOK[] = {"f32cat", "f32split", "bf16split"};
static const char *const SCALE_TOK[] = {"none", "mulrecip", "div", "mul"};
static const char *const Q_TOK[] = {"absorbed", "zerocopy", "inplace", "qnone"};
static const char *const NEG_TOK[] = {"skipkv", "skipall"};

void rk_variant_parts(const rk_desc *v, rk_name_parts *p) {
    const rk_spec *s = v->spec;
    memset(p, 0, sizeof *p);
    p->L = s->kv_lora_rank;
    p->R = s->rope_dim;
    p->rope = s->rope;
    p->cos_sin = s->cos_sin;
    p->pos = v->pos;
    p->slot = v->slot;
    p->kv_fp8 = v->kv == ROPEKV_KV_FP8_E4M3;
    p->q = v->q;
    p->neg = s->negative_slot;
    p->sanitize = s->sanitize;
    snprintf(p->target, sizeof p->target, "%s", v->arch->name);
    /* Options that cannot change the code of a bf16 kernel are canonicalized away, so identical
     * kernels get identical names. */
    if (p->kv_fp8) {
        p->fp8 = v->fp8;
        p->scale = s->fp8_scale;
        p->sat = v->sat;
        p->rope_bf16 = s->fp8_rope_bf16;
    } else {
        p->fp8 = RK_FP8_OCP;
        p->scale = RK_SCALE_NONE;
        p->sat = 0;
        p->rope_bf16 = 0;
    }
}

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

int rk_name_format(const rk_name_parts *p, char *out, size_t cap) {
    char sat[32];
    if ((unsigned)p->rope > 2 || (unsigned)p->cos_sin > 2 || (unsigned)p->scale > 3 || (unsigned)p->q > 3 ||
        (unsigned)p->neg > 1 || !valid_target_chars(p->target))
        return ROPEKV_ERR_RENDER;
    sat_token(p->sat, sat, sizeof sat);
    int n = snprintf(out, cap, "rk_L%d_R%d_%s_%s_p%d_s%d_%s_%s_sat%s_rr%d_%s_%s_san%d_%s", p->L, p->R,
                     ROPE_TOK[p->rope], CS_TOK[p->cos_sin], p->pos == ROPEKV_INDEX_INT64 ? 64 : 32,
                     p->slot == ROPEKV_INDEX_INT64 ? 64 : 32,
                     !p->kv_fp8 ? "bf16" : p->fp8 == RK_FP8_FNUZ ? "fp8fnuz" : "fp8ocp", SCALE_TOK[p->scale], sat,
                     p->rope_bf16 ? 1 : 0, Q_TOK[p->q], NEG_TOK[p->neg], p->sanitize ? 1 : 0, p->target);
    return n > 0 && (size_t)n < cap ? ROPEKV_OK : ROPEKV_ERR_RENDER;
}

void rk_desc_finish(rk_desc *v) {
    rk_name_parts p;
    v->fp8 = v->arch->fp8;
    v->sat = v->fp8 == RK_FP8_FNUZ ? v->spec->fp8_sat_fnuz : v->spec->fp8_sat_ocp;
    snprintf(v->key, sizeof v->key, "%s/%s/%s/%s/pos=%s/slot=%s", v->spec->name, v->arch->name, rk_kv_name(v->kv),
             rk_qform_name(v->q), rk_idx_name(v->pos), rk_idx_name(v->slot));
    rk_variant_parts(v, &p);
    if (rk_name_format(&p, v->name, sizeof v->name) != ROPEKV_OK) v->name[0] = '\0';
}

int rk_variants(const rk_spec *s, const rk_arch_table *archs, rk_desc *out, int cap, rk_err *err) {
    int n = 0;
    for (int t = 0; t < s->n_targets; t++) {
        const rk_arch *a = rk_arch_find(archs, s->targets[t]);
        if (!a) {
            rk_fail(err, ROPEKV_ERR_SPEC_TARGET, "%s: targets[%d]: unknown target '%s'", s->file, t + 1, s->targets[t]);
            return -1;
        }
        for (int k = 0; k < s->n_kv; k++)
            for (int q = 0; q < s->n_q; q++)
                for (int p = 0; p < s->n_pos; p++)
                    for (int sl = 0; sl < s->n_slot; sl++) {
                        if (n == cap) {
                            rk_fail(err, ROPEKV_ERR_NOMEM, "%s: more than %d variants", s->file, cap);
                            return -1;
                        }
                        rk_desc *v = &out[n++];
                        memset(v, 0, sizeof *v);
                        v->spec = s;
                        v->arch = a;
                        v->kv = s->kv[k];
                        v->q = s->q[q];
                        v->pos = s->pos[p];
                        v->slot = s->slot[sl];
                        rk_desc_finish(v);
                        if (!v->name[0]) {
                            rk_fail(err, ROPEKV_ERR_SPEC_TARGET, "%s: target '%s' cannot be spelled in a kernel name",
                                    s->file, a->name);
                            return -1;
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

void rk_launch_plan(int L, int R, ropekv_q_form q, int wave, int block, int chunks, int64_t chunks_from, rk_args *a,
                    int64_t *total, int64_t *blocks) {
    const int64_t qr = q == ROPEKV_Q_NONE ? 0 : R / 8, qn = q == ROPEKV_Q_ABSORBED ? L / 8 : 0;
    const int64_t rope = (a->heads * qr + R / 8 + wave - 1) / wave * wave; /* the kernel's rope_lanes */
    a->lanes = rope + a->heads * qn + L / 8;
    rk_div_magic(a->lanes, &a->lanes_mul, &a->lanes_shift);
    *total = a->tokens * a->lanes;
    a->chunks = chunks > 1 && *total >= chunks_from ? chunks : 1;
    a->early_release = a->chunks == 1;
    const int64_t per_block = (int64_t)block * a->chunks;
    *blocks = (*total + per_block - 1) / per_block;
}

/* ---- parsing a name back -------------------------------------------------------------------- */
static int tok_index(const char *tok, const char *const *list, int n) {
    for (int i = 0; i < n; i++)
        if (strcmp(tok, list[i]) == 0) return i;
    return -1;
}

/* Parses "<prefix><decimal int>" exactly; 0 on success. */
static int tok_int(const char *tok, const char *prefix, long lo, long hi, long *out) {
    size_t n = strlen(prefix);
    if (strncmp(tok, prefix, n) != 0 || !tok[n]) return -1;
    char *end;
    if (tok[n] < '0' || tok[n] > '9') return -1;
    long v = strtol(tok + n, &end, 10);
    if (*end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int rk_name_parse(const char *name, rk_name_parts *p, rk_err *err) {
    enum { FIELDS = 14 };
    char buf[256], *tok[FIELDS + 1];
    long v;
    memset(p, 0, sizeof *p);
    if (!name || strlen(name) >= sizeof buf || strncmp(name, "rk_", 3) != 0)
        return rk_fail(err, ROPEKV_ERR_RENDER, "kernel name: must start with 'rk_' and be shorter than %zu", sizeof buf);
    strcpy(buf, name + 3);
    /* The first FIELDS-1 fields are '_'-separated; the target is the rest (it may hold '_'). */
    char *c = buf;
    for (int i = 0; i < FIELDS - 1; i++) {
        tok[i] = c;
        c = strchr(c, '_');
        if (!c) return rk_fail(err, ROPEKV_ERR_RENDER, "kernel name '%s': %d fields expected, found %d", name, FIELDS, i + 1);
        *c++ = '\0';
    }
    tok[FIELDS - 1] = c;
#define BAD(what) return rk_fail(err, ROPEKV_ERR_RENDER, "kernel name '%s': bad %s field", name, what)
    if (tok_int(tok[0], "L", 8, 8192, &v)) BAD("L");
    p->L = (int)v;
    if (tok_int(tok[1], "R", 8, 1024, &v)) BAD("R");
    p->R = (int)v;
    int i;
    if ((i = tok_index(tok[2], ROPE_TOK, 3)) < 0) BAD("rope");
    p->rope = (rk_rope)i;
    if ((i = tok_index(tok[3], CS_TOK, 3)) < 0) BAD("cos_sin");
    p->cos_sin = (rk_cos_sin)i;
    if (strcmp(tok[4], "p32") && strcmp(tok[4], "p64")) BAD("positions");
    p->pos = tok[4][1] == '6' ? ROPEKV_INDEX_INT64 : ROPEKV_INDEX_INT32;
    if (strcmp(tok[5], "s32") && strcmp(tok[5], "s64")) BAD("slots");
    p->slot = tok[5][1] == '6' ? ROPEKV_INDEX_INT64 : ROPEKV_INDEX_INT32;
    if (!strcmp(tok[6], "bf16")) p->kv_fp8 = 0;
    else if (!strcmp(tok[6], "fp8ocp")) p->kv_fp8 = 1, p->fp8 = RK_FP8_OCP;
    else if (!strcmp(tok[6], "fp8fnuz")) p->kv_fp8 = 1, p->fp8 = RK_FP8_FNUZ;
    else BAD("kv dtype");
    if ((i = tok_index(tok[7], SCALE_TOK, 4)) < 0) BAD("scale");
    p->scale = (rk_scale)i;
    if (strncmp(tok[8], "sat", 3) != 0 || !tok[8][3]) BAD("sat");
    {
        char num[32], *end;
        if (strlen(tok[8] + 3) >= sizeof num) BAD("sat");
        strcpy(num, tok[8] + 3);
        for (char *d = num; *d; d++)
            if (*d == 'p') *d = '.';
        if (num[0] < '0' || num[0] > '9') BAD("sat");
        double s = strtod(num, &end);
        if (*end || s < 0 || s > 448) BAD("sat");
        p->sat = (float)s;
    }
    if (strcmp(tok[9], "rr0") && strcmp(tok[9], "rr1")) BAD("rr");
    p->rope_bf16 = tok[9][2] == '1';
    if ((i = tok_index(tok[10], Q_TOK, 4)) < 0) BAD("q form");
    p->q = (ropekv_q_form)i;
    if ((i = tok_index(tok[11], NEG_TOK, 2)) < 0) BAD("negative slot");
    p->neg = (rk_neg)i;
    if (strcmp(tok[12], "san0") && strcmp(tok[12], "san1")) BAD("sanitize");
    p->sanitize = tok[12][3] == '1';
    if (strlen(tok[13]) >= sizeof p->target || !valid_target_chars(tok[13])) BAD("target");
    strcpy(p->target, tok[13]);
#undef BAD
    /* Canonical form only: formatting the parts must give the name back. */
    char again[256];
    if (rk_name_format(p, again, sizeof again) != ROPEKV_OK || strcmp(again, name) != 0)
        return rk_fail(err, ROPEKV_ERR_RENDER, "kernel name '%s': not in canonical form", name);
    return ROPEKV_OK;
}
