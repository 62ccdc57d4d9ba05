/* A variant built with the host compiler and checked against the CPU reference (`ropekv-gen selftest`,
 * tests/test_host.c). */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "host_compile.h"

/* ---- checking a variant against the reference ------------------------------------------------- */
int rk_host_run_kernel(void *ctx, const rk_desc *v, const rk_args *a) {
    (void)v;
    const rk_host_run *h = ctx;
    (h->wide ? h->k->entry64 : h->k->entry32)(*a);
    return 0;
}

/* The standard shapes: T x H over {1, 3, 17, 301} x {1, 16}, padded strides on every other one, the
 * query scale going round 0.37, 1 and 1/448 (with 1/448 a mul_recip or div query saturates), a write mask on every
 * fourth and padded query heads on the next; then padding: a short slot list, padded queries, no KV rows, no query
 * rows, with reserved slots and a write mask. */
static int standard_shapes(rk_shape *out) {
    static const int64_t TOKENS[] = {1, 3, 17, 301}, HEADS[] = {1, 16};
    static const int64_t PADDING[][3] = {{17, 5, 1}, {3, 17, 2}, {5, -1, 0}, {0, 4, 1}}; /* T, kv_tokens, min_slot */
    static const float Q_SCALES[] = {0.37f, 1.0f, 1.0f / 448.0f};
    const rk_shape base = {.max_pos = 64, .neg_every = 3, .specials = 1, .k_scale = 0.37f};
    int n = 0;
    for (size_t t = 0; t < sizeof TOKENS / sizeof TOKENS[0]; t++)
        for (size_t h = 0; h < sizeof HEADS / sizeof HEADS[0]; h++, n++) {
            out[n] = base;
            out[n].tokens = TOKENS[t];
            out[n].heads = HEADS[h];
            out[n].pad = (n % 2) * 8;
            out[n].q_scale = Q_SCALES[n % 3];
            out[n].mask_every = n % 4 == 2 ? 4 : 0; /* a write mask */
            out[n].q_pad = n % 4 == 3 ? 3 : 0;      /* padded query heads */
        }
    for (size_t i = 0; i < sizeof PADDING / sizeof PADDING[0]; i++, n++) {
        out[n] = base;
        out[n].tokens = PADDING[i][0];
        out[n].kv_tokens = PADDING[i][1];
        out[n].min_slot = PADDING[i][2];
        out[n].heads = 4;
        out[n].pad = 8;
        out[n].mask_every = 2;
        out[n].q_scale = Q_SCALES[n % 3];
    }
    return n;
}

int rk_host_check_variant(const rk_desc *v, const char *dir, char *why, size_t cap) {
    rk_buf src = {0};
    rk_err err = {0};
    rk_host_kernel k;
    why[0] = '\0';
    if (rk_emit(v, &src, &err) != ROPEKV_OK) {
        snprintf(why, cap, "emit: %s", err.msg);
        rk_buf_free(&src);
        return 0;
    }
    int rc = rk_host_build(src.p, src.len, v->name, dir, &k, NULL, why, cap);
    rk_buf_free(&src);
    if (rc != ROPEKV_OK) return 0;
    rk_shape shapes[16];
    const int n = standard_shapes(shapes);
    int ok = 1, seed = 0;
    for (int i = 0; ok && i < n; i++)
        for (int wide = 0; ok && wide < 2; wide++) {
            const rk_shape *sh = &shapes[i];
            rk_host_run hr = {&k, wide};
            if (rk_check(v, sh, (uint64_t)++seed, rk_host_run_kernel, &hr, why, cap) != 0) {
                char shape[160];
                snprintf(shape, sizeof shape,
                         " [T=%lld kv_tokens=%lld min_slot=%lld H=%lld pad=%lld %s write_mask 1/%d padded heads +%lld]",
                         (long long)sh->tokens, (long long)sh->kv_tokens, (long long)sh->min_slot, (long long)sh->heads,
                         (long long)sh->pad, wide ? "i64" : "i32", sh->mask_every, (long long)sh->q_pad);
                strncat(why, shape, cap - strlen(why) - 1);
                ok = 0;
            }
        }
    rk_host_unload(&k);
    char so[4096];
    snprintf(so, sizeof so, "%s/%s.so", dir, v->name);
    unlink(so);
    return ok;
}
