/* The covering set (cover.h). */
#include "cover.h"

#include <stdlib.h>
#include <string.h>

#include "cache.h" /* rk_sha256 */

const char *const rk_cover_dims[RK_COVER_DIMS] = {"target", "kv",     "q",  "q_dtype", "positions",
                                                  "slots",  "layout", "op", "norm"};

/* Where the code paths of two choices meet beyond a pair: a row format with its layout and op (a tile row is laid
 * out and read back differently), a row format with a query dtype on each target (the fp8 conversions each row
 * has or lacks), a row format with the fused norm on each target (the sum's lanes per wave, the row's scale of the
 * normalized values), and a q form with a query dtype and a row format (in place, zero copy and the fp8 query). */
const int rk_cover_triples[RK_COVER_TRIPLES][3] = {{RK_DIM_KV, RK_DIM_LAYOUT, RK_DIM_OP},
                                                   {RK_DIM_TARGET, RK_DIM_KV, RK_DIM_Q_DTYPE},
                                                   {RK_DIM_TARGET, RK_DIM_KV, RK_DIM_NORM},
                                                   {RK_DIM_Q, RK_DIM_Q_DTYPE, RK_DIM_KV}};

static int enum_index(const rk_enum *e, int value) {
    for (int i = 0; i < e->n; i++)
        if (e->v[i].value == value) return i;
    return -1;
}

int rk_cover_value(const rk_desc *d, const rk_arch_table *archs, int dim) {
    const int read = d->op == ROPEKV_OP_READ;
    switch (dim) {
    case RK_DIM_TARGET:
        for (int i = 0; i < archs->n; i++)
            if (strcmp(archs->a[i].name, d->arch->name) == 0) return i;
        return -1;
    case RK_DIM_KV: /* the row: a kv dtype's, or a record of the spec's after them */
        return d->record ? rk_kv_enum.n - 1 + d->record : enum_index(&rk_kv_enum, (int)d->kv);
    case RK_DIM_Q: return read ? -1 : enum_index(&rk_qform_enum, (int)d->q);
    case RK_DIM_Q_DTYPE: return read || d->q == ROPEKV_Q_NONE ? -1 : enum_index(&rk_qdtype_enum, (int)d->q_dtype);
    case RK_DIM_POSITIONS: /* a kernel that rotates nothing reads no positions */
        return read || d->rope == RK_ROPE_NONE ? -1 : enum_index(&rk_index_enum, (int)d->pos);
    case RK_DIM_SLOTS: return enum_index(&rk_index_enum, (int)d->slot);
    case RK_DIM_LAYOUT: return enum_index(&rk_layout_enum, (int)d->layout);
    case RK_DIM_OP: return enum_index(&rk_op_enum, (int)d->op);
    case RK_DIM_NORM: return read ? -1 : enum_index(&rk_norm_enum, (int)d->norm);
    }
    return -1;
}

/* A tuple is an interaction (a pair of dimensions, or a declared triple) and a value for each of its dimensions;
 * it is numbered interaction * VALUES^3 + its values in base VALUES. */
#define VALUES RK_MAX_ARCHS /* the most values a dimension has: the rows */
#define N_PAIRS (RK_COVER_DIMS * (RK_COVER_DIMS - 1) / 2)
#define N_INTERACTIONS (N_PAIRS + RK_COVER_TRIPLES)
#define TUPLES ((size_t)N_INTERACTIONS * VALUES * VALUES * VALUES)

/* The tuples of one candidate (-1 where a dimension of the interaction does not apply). */
static void tuples_of(const int *val, int *out) {
    int k = 0;
    for (int i = 0; i < RK_COVER_DIMS; i++)
        for (int j = i + 1; j < RK_COVER_DIMS; j++, k++)
            out[k] = val[i] < 0 || val[j] < 0 ? -1 : (k * VALUES + val[i]) * VALUES * VALUES + val[j];
    for (int t = 0; t < RK_COVER_TRIPLES; t++, k++) {
        const int *d = rk_cover_triples[t];
        out[k] = val[d[0]] < 0 || val[d[1]] < 0 || val[d[2]] < 0
                     ? -1
                     : ((k * VALUES + val[d[0]]) * VALUES + val[d[1]]) * VALUES + val[d[2]];
    }
}

int rk_cover_pick(const rk_desc *cand, int n, const rk_arch_table *archs, int *pick) {
    enum { NEEDED = 1, COVERED = 2 };
    unsigned char *state = calloc(TUPLES, 1), *taken = calloc((size_t)(n > 0 ? n : 1), 1);
    int *tup = malloc(sizeof *tup * N_INTERACTIONS * (size_t)(n > 0 ? n : 1));
    int m = -1;
    if (!state || !taken || !tup) goto out;
    for (int c = 0; c < n; c++) {
        int val[RK_COVER_DIMS];
        for (int d = 0; d < RK_COVER_DIMS; d++) val[d] = rk_cover_value(&cand[c], archs, d);
        tuples_of(val, &tup[c * N_INTERACTIONS]);
        for (int k = 0; k < N_INTERACTIONS; k++)
            if (tup[c * N_INTERACTIONS + k] >= 0) state[tup[c * N_INTERACTIONS + k]] = NEEDED;
    }
    m = 0;
    for (;;) {
        int best = -1, best_gain = 0;
        for (int c = 0; c < n; c++) {
            if (taken[c]) continue;
            int gain = 0;
            for (int k = 0; k < N_INTERACTIONS; k++) {
                const int t = tup[c * N_INTERACTIONS + k];
                gain += t >= 0 && state[t] == NEEDED;
            }
            if (gain > best_gain) best = c, best_gain = gain;
        }
        if (best < 0) break;
        taken[best] = 1;
        pick[m++] = best;
        for (int k = 0; k < N_INTERACTIONS; k++)
            if (tup[best * N_INTERACTIONS + k] >= 0) state[tup[best * N_INTERACTIONS + k]] = COVERED;
    }
out:
    free(state);
    free(taken);
    free(tup);
    return m;
}

/* A set of 32-byte digests (open addressing; cap a power of two, at least twice the entries). */
typedef struct digest_set {
    unsigned char (*d)[32];
    unsigned char *used;
    size_t cap;
} digest_set;

/* 1 when dg was already in s (else adds it). */
static int seen_before(digest_set *s, const unsigned char dg[32]) {
    size_t h;
    memcpy(&h, dg, sizeof h);
    for (size_t i = h & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
        if (!s->used[i]) {
            s->used[i] = 1;
            memcpy(s->d[i], dg, 32);
            return 0;
        }
        if (memcmp(s->d[i], dg, 32) == 0) return 1;
    }
}

/* Appends v to out unless its rendered code was seen; ROPEKV_OK or an error. */
static int add_distinct(const rk_desc *v, digest_set *seen, rk_desc *out, int *n, int cap, rk_err *err) {
    rk_buf src = {0};
    int rc = rk_emit(v, &src, err);
    if (rc != ROPEKV_OK) {
        rk_buf_free(&src);
        return rc;
    }
    /* the code, not the header comment naming the spec and the key: two specs may describe one kernel */
    const char *code = strstr(src.p, "\n// Regenerate:");
    code = code ? strchr(code + 1, '\n') : NULL;
    if (!code) code = src.p;
    unsigned char dg[32];
    rk_sha256 h;
    rk_sha256_init(&h);
    rk_sha256_update(&h, code, src.len - (size_t)(code - src.p));
    rk_sha256_final(&h, dg);
    rk_buf_free(&src);
    if (seen_before(seen, dg)) return ROPEKV_OK;
    if (*n == cap) return rk_fail(err, ROPEKV_ERR_NOMEM, "more than %d variants", cap);
    out[(*n)++] = *v;
    return ROPEKV_OK;
}

int rk_cover_catalog(const rk_catalog *cat, const char *filter, int all, rk_desc *out, int cap, rk_err *err) {
    rk_desc *tmp = malloc(sizeof *tmp * RK_MAX_VARIANTS_PER_SPEC);
    int *pick = malloc(sizeof *pick * RK_MAX_VARIANTS_PER_SPEC), n = 0, rc = ROPEKV_OK;
    digest_set seen = {0};
    seen.cap = 64;
    while (seen.cap < 2 * (size_t)(cap > 0 ? cap : 1)) seen.cap *= 2;
    seen.d = malloc(32 * seen.cap);
    seen.used = calloc(seen.cap, 1);
    if (!tmp || !pick || !seen.d || !seen.used) {
        rc = rk_fail(err, ROPEKV_ERR_NOMEM, "out of memory choosing variants");
        goto out;
    }
    for (int s = 0; s < cat->n_specs && rc == ROPEKV_OK; s++) {
        int k = rk_variants(&cat->specs[s], &cat->archs, tmp, RK_MAX_VARIANTS_PER_SPEC, err);
        if (k < 0) {
            rc = err ? (int)err->code : ROPEKV_ERR_SPEC_INVALID;
            break;
        }
        int m = 0;
        for (int i = 0; i < k; i++)
            if (!filter || strstr(tmp[i].key, filter)) tmp[m++] = tmp[i];
        int p = m;
        if (all)
            for (int i = 0; i < m; i++) pick[i] = i;
        else if ((p = rk_cover_pick(tmp, m, &cat->archs, pick)) < 0)
            rc = rk_fail(err, ROPEKV_ERR_NOMEM, "out of memory choosing variants");
        for (int i = 0; i < p && rc == ROPEKV_OK; i++) rc = add_distinct(&tmp[pick[i]], &seen, out, &n, cap, err);
    }
out:
    free(tmp);
    free(pick);
    free(seen.d);
    free(seen.used);
    return rc == ROPEKV_OK ? n : -1;
}

int rk_cover_retarget(const rk_catalog *cat, const rk_arch *target, rk_desc *out, int cap, rk_err *err) {
    int n = rk_cover_catalog(cat, NULL, 0, out, cap, err), m = 0;
    for (int i = 0; i < n; i++) {
        rk_desc d;
        const rk_choice c = rk_desc_choice(&out[i]);
        if (rk_desc_make(out[i].spec, target, &c, &d, err) != ROPEKV_OK) return -1;
        int dup = 0;
        for (int j = 0; j < m && !dup; j++) dup = strcmp(out[j].name, d.name) == 0;
        if (!dup) out[m++] = d;
    }
    return n < 0 ? -1 : m;
}
