/* A program built against an installed ropekv (tests/package/run.sh): loads its own spec file
 * (argv[1], my_model.lua: L = 128, R = 32, gptj rope, bf16 rows), launches three tokens on the host
 * backend and checks the result exactly: the unrotated parts (k_nope, q_nope) are copied bit for bit,
 * the rope parts at an even position are unchanged (cos 1, sin 0) and at an odd one turned by 90
 * degrees (cos 0, sin 1: (x, y) -> (-y, x), exact in bf16), a negative slot writes no row, and no
 * other cache byte changes. Exit status 0 only when everything holds. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ropekv.h"

#define L 128 /* kv_lora_rank */
#define R 32  /* qk_rope_head_dim */
#define W (L + R)
enum { T = 3, H = 2, MAX_POS = 8, ROWS = 8 };

static int failures;

static void expect(int ok, const char *what, int t, int i) {
    if (!ok && failures++ < 10) fprintf(stderr, "consumer: wrong %s (token %d, element %d)\n", what, t, i);
}

/* A finite, non-zero bf16 value of either sign that differs from element to element. */
static uint16_t value(int i) { return (uint16_t)((i % 3 == 0 ? 0x8000 : 0) | (0x3c00 + (i * 37) % 0x0700)); }

/* What the rope does to element j (0 <= j < R) of a row x at position pos. */
static uint16_t roped(const uint16_t *x, int j, int64_t pos) {
    if (pos % 2 == 0) return x[j];
    return j % 2 == 0 ? (uint16_t)(x[j + 1] ^ 0x8000) : x[j - 1];
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: consumer SPEC.lua\n");
        return 2;
    }
    ropekv_options opts = {.backend = ROPEKV_BACKEND_HOST};
    ropekv_ctx *ctx;
    ropekv_status s = ropekv_create(&ctx, &opts);
    if (s != ROPEKV_OK) {
        fprintf(stderr, "ropekv_create: %s\n", ropekv_status_name(s));
        return 1;
    }
    ropekv_kernel *k = NULL;
    ropekv_variant v = {.spec = "my_model", .kv = ROPEKV_KV_BF16, .q = ROPEKV_Q_ABSORBED};
    if ((s = ropekv_load_spec(ctx, argv[1])) != ROPEKV_OK || (s = ropekv_kernel_get(ctx, &v, &k)) != ROPEKV_OK) {
        fprintf(stderr, "consumer: %s: %s\n", ropekv_status_name(s), ropekv_last_error(ctx));
        ropekv_destroy(ctx);
        return 1;
    }

    static uint16_t q[T][H][W], kv_a[T][W], q_out[T][H][W], cache[ROWS][W];
    static float cos_sin[MAX_POS][R]; /* f32_cat: cos[R / 2] | sin[R / 2] per position */
    int64_t positions[T] = {2, 5, 7}, slots[T] = {5, -1, 2};
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < W; i++) kv_a[t][i] = value(t * W + i);
        for (int h = 0; h < H; h++)
            for (int i = 0; i < W; i++) q[t][h][i] = value(1000 + (t * H + h) * W + i);
    }
    for (int p = 0; p < MAX_POS; p++) {
        for (int i = 0; i < R / 2; i++) {
            cos_sin[p][i] = p % 2 ? 0.0f : 1.0f;         /* cos */
            cos_sin[p][R / 2 + i] = p % 2 ? 1.0f : 0.0f; /* sin */
        }
    }
    memset(cache, 0xab, sizeof cache);

    /* clang-format off */
    ropekv_args a = {
        .tokens = T, .heads = H,
        .q_nope = q, .q_nope_st = H * W, .q_nope_sh = W,
        .q_pe = &q[0][0][L], .q_pe_st = H * W, .q_pe_sh = W,
        .q_out = q_out, .q_out_st = H * W, .q_out_sh = W,
        .k_nope = kv_a, .k_nope_st = W,
        .k_pe = &kv_a[0][L], .k_pe_st = W,
        .kv_cache = cache, .kv_st = W, .kv_rows = ROWS,
        .positions = positions, .slots = slots,
        .cos_sin = cos_sin, .max_pos = MAX_POS,
    };
    /* clang-format on */
    if ((s = ropekv_launch(k, &a, NULL)) != ROPEKV_OK) {
        fprintf(stderr, "consumer: launch: %s: %s\n", ropekv_status_name(s), ropekv_last_error(ctx));
        return 1;
    }

    const char *name = ropekv_kernel_name(k);
    expect(strncmp(name, "rk_L128_R32_gptj_", 17) == 0, "kernel name", -1, 0);
    for (int t = 0; t < T; t++) {
        for (int h = 0; h < H; h++) {
            for (int i = 0; i < L; i++) expect(q_out[t][h][i] == q[t][h][i], "q_out nope part", t, i);
            for (int j = 0; j < R; j++)
                expect(q_out[t][h][L + j] == roped(&q[t][h][L], j, positions[t]), "q_out rope", t, j);
        }
    }
    for (int row = 0; row < ROWS; row++) {
        int t = row == 5 ? 0 : row == 2 ? 2 : -1; /* the token whose slot is this row */
        for (int i = 0; i < W; i++) {
            uint16_t want = t < 0 ? 0xabab : i < L ? kv_a[t][i] : roped(&kv_a[t][L], i - L, positions[t]);
            expect(cache[row][i] == want, t < 0 ? "untouched cache row" : "cache row", t < 0 ? row : t, i);
        }
    }
    printf("ropekv %s (header %s): %s on %s: %s\n", ropekv_version_string(), ROPEKV_VERSION_STRING, name,
           ropekv_backend_name(ctx), failures ? "FAILED" : "ok");
    expect(strcmp(ropekv_version_string(), ROPEKV_VERSION_STRING) == 0, "library version", -1, 0);
    ropekv_kernel_release(k);
    ropekv_destroy(ctx);
    return failures ? 1 : 0;
}
