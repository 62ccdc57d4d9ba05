/* The kernel description: (spec, arch row, choices) -> every code parameter, the variant key and the
 * kernel name; the enumeration of a spec's variants for the tools; the launch plan. */
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

/* rk_L<L>_R<R>_<rope>_<cossin>_p<32|64>_s<32|64>_<bf16|fp8ocp|fp8fnuz>_<scale>_sat<N>_rr<0|1>_<qform>
 *   _<skipkv|skipall>_san<0|1>_<target>, from the tokens of the spelling tables. */
static int format_name(const rk_desc *d, char *out, size_t cap) {
    char sat[32], kv[32];
    sat_token(d->sat, sat, sizeof sat);
    snprintf(kv, sizeof kv, "%s%s", rk_enum_token(&rk_kv_enum, d->kv),
             d->kv == ROPEKV_KV_BF16 ? "" : rk_enum_token(&rk_fp8_enum, d->fp8));
    int n = snprintf(out, cap, "rk_L%d_R%d_%s_%s_p%s_s%s_%s_%s_sat%s_rr%d_%s_%s_san%d_%s", d->L, d->R,
                     rk_enum_token(&rk_rope_enum, d->rope), rk_enum_token(&rk_cos_sin_enum, d->cos_sin),
                     rk_enum_token(&rk_index_enum, d->pos), rk_enum_token(&rk_index_enum, d->slot), kv,
                     rk_enum_token(&rk_scale_enum, d->scale), sat, d->rope_bf16, rk_enum_token(&rk_qform_enum, d->q),
                     rk_enum_token(&rk_neg_enum, d->neg), d->sanitize, d->arch->name);
    return n > 0 && (size_t)n < cap ? 0 : -1;
}

int rk_desc_make(const rk_spec *s, const rk_arch *a, ropekv_kv_dtype kv, ropekv_q_form q, ropekv_index pos,
                 ropekv_index slot, rk_desc *d, rk_err *err) {
    memset(d, 0, sizeof *d);
    if (!rk_kv_name(kv) || !rk_qform_name(q) || !rk_idx_name(pos) || !rk_idx_name(slot))
        return rk_fail(err, ROPEKV_ERR_ARG, "variant has an out-of-range enum value");
    d->spec = s;
    d->arch = a;
    d->kv = kv;
    d->q = q;
    d->pos = pos;
    d->slot = slot;
    d->L = s->kv_lora_rank;
    d->R = s->rope_dim;
    d->rope = s->rope;
    d->cos_sin = s->cos_sin;
    d->fp8 = a->fp8;
    d->neg = s->negative_slot;
    d->sanitize = s->sanitize;
    d->scale = RK_SCALE_NONE;
    if (kv != ROPEKV_KV_BF16) {
        d->scale = s->fp8_scale;
        d->sat = d->fp8 == RK_FP8_FNUZ ? s->fp8_sat_fnuz : s->fp8_sat_ocp;
        d->rope_bf16 = s->fp8_rope_bf16;
    }
    snprintf(d->key, sizeof d->key, "%s/%s/%s/%s/pos=%s/slot=%s", s->name, a->name, rk_kv_name(kv), rk_qform_name(q),
             rk_idx_name(pos), rk_idx_name(slot));
    if (!valid_target_chars(a->name) || format_name(d, d->name, sizeof d->name) != 0)
        return rk_fail(err, ROPEKV_ERR_SPEC_TARGET, "%s: target '%s' cannot be spelled in a kernel name", s->file,
                       a->name);
    return ROPEKV_OK;
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

int rk_desc_listed(const rk_spec *s, const rk_arch *a, ropekv_kv_dtype kv, ropekv_q_form q, ropekv_index pos,
                   ropekv_index slot, rk_desc *d, rk_err *err) {
    int rc = rk_desc_make(s, a, kv, q, pos, slot, d, err);
    if (rc != ROPEKV_OK) return rc;
    int t = 0;
    while (t < s->n_targets && strcmp(s->targets[t], a->name) != 0) t++;
    if (t == s->n_targets)
        return rk_fail(err, ROPEKV_ERR_UNSUPPORTED, "spec %s (%s) does not list target %s (variant %s)", s->name,
                       s->file, a->name, d->key);
    choice c[4] = {{"kv_dtypes", &rk_kv_enum, s->n_kv, {0}, (int)kv},
                   {"q_forms", &rk_qform_enum, s->n_q, {0}, (int)q},
                   {"positions", &rk_index_enum, s->n_pos, {0}, (int)pos},
                   {"slots", &rk_index_enum, s->n_slot, {0}, (int)slot}};
    for (int i = 0; i < s->n_kv; i++) c[0].list[i] = (int)s->kv[i];
    for (int i = 0; i < s->n_q; i++) c[1].list[i] = (int)s->q[i];
    for (int i = 0; i < s->n_pos; i++) c[2].list[i] = (int)s->pos[i];
    for (int i = 0; i < s->n_slot; i++) c[3].list[i] = (int)s->slot[i];
    for (int k = 0; k < 4; k++) {
        if (listed(&c[k])) continue;
        char got[128];
        size_t at = 0;
        got[0] = '\0';
        for (int i = 0; i < c[k].n && at < sizeof got; i++)
            at += (size_t)snprintf(got + at, sizeof got - at, "%s%s", i ? ", " : "",
                                   rk_enum_name(c[k].e, c[k].list[i]));
        return rk_fail(err, ROPEKV_ERR_UNSUPPORTED, "spec %s lists %s {%s}, not %s (variant %s)", s->name, c[k].key,
                       got, rk_enum_name(c[k].e, c[k].want), d->key);
    }
    return ROPEKV_OK;
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
                        if (rk_desc_make(s, a, s->kv[k], s->q[q], s->pos[p], s->slot[sl], &out[n], err) != ROPEKV_OK)
                            return -1;
                        n++;
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

void rk_launch_plan(const rk_desc *d, rk_args *a, int64_t *total, int64_t *blocks) {
    const int wave = d->arch->wave, block = d->arch->block, chunks = d->arch->chunks;
    const int64_t qr = d->q == ROPEKV_Q_NONE ? 0 : d->R / 8, qn = d->q == ROPEKV_Q_ABSORBED ? d->L / 8 : 0;
    const int64_t rope = (a->heads * qr + d->R / 8 + wave - 1) / wave * wave; /* the kernel's rope_lanes */
    a->lanes = rope + a->heads * qn + d->L / 8;
    rk_div_magic(a->lanes, &a->lanes_mul, &a->lanes_shift);
    a->grid_tokens = a->tokens > a->kv_tokens ? a->tokens : a->kv_tokens;
    *total = a->grid_tokens * a->lanes;
    a->chunks = chunks > 1 && *total >= d->arch->chunks_from ? chunks : 1;
    a->early_release = a->chunks == 1;
    const int64_t per_block = (int64_t)block * a->chunks;
    *blocks = (*total + per_block - 1) / per_block;
}
