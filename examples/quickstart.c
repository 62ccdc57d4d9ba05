/* Quickstart: one DeepSeek-V3 decode step (T tokens, H heads) with an fp8 KV cache.
 * Runs on whatever ropekv finds (AMD, NVIDIA, else the CPU); with the host backend the
 * tensors are plain host memory, as here. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "ropekv.h"

#define L 512 /* kv_lora_rank */
#define R 64  /* qk_rope_head_dim */
#define W (L + R)

int main(void) {
    enum { T = 4, H = 16, MAX_POS = 4096, ROWS = 64 };
    ropekv_options opts = {.backend = ROPEKV_BACKEND_HOST};
    ropekv_ctx *ctx;
    ropekv_status s = ropekv_create(&ctx, &opts);
    if (s != ROPEKV_OK) {
        fprintf(stderr, "ropekv_create: %s\n", ropekv_status_name(s));
        return 1;
    }

    ropekv_variant v = {.spec = "deepseek_v3", .kv = ROPEKV_KV_FP8_E4M3, .q = ROPEKV_Q_ABSORBED};
    ropekv_kernel *k;
    if (ropekv_kernel_get(ctx, &v, &k) != ROPEKV_OK) {
        fprintf(stderr, "%s\n", ropekv_last_error(ctx));
        return 1;
    }

    /* q is [T, H, L + R] (q_nope | q_pe); the kv projection output is [T, L + R] (c_kv | k_pe). */
    uint16_t *q = aligned_alloc(16, sizeof(uint16_t) * T * H * W);
    uint16_t *kv_a = aligned_alloc(16, sizeof(uint16_t) * T * W);
    uint16_t *q_out = aligned_alloc(16, sizeof(uint16_t) * T * H * W);
    uint8_t *cache = aligned_alloc(16, (size_t)ROWS * W);
    float *cos_sin = aligned_alloc(16, sizeof(float) * MAX_POS * R);
    int64_t positions[T] = {7, 8, 9, 10}, slots[T] = {3, -1, 5, 6}; /* -1: padding */
    float k_scale = 0.5f;
    for (int i = 0; i < T * H * W; i++) q[i] = 0x3f80; /* 1.0 in bf16 */
    for (int i = 0; i < T * W; i++) kv_a[i] = 0x4000;  /* 2.0 */
    for (int i = 0; i < MAX_POS * R; i++) cos_sin[i] = i % R < R / 2 ? 1.0f : 0.0f;

    /* clang-format off */
    ropekv_args a = {
        .tokens = T, .heads = H,
        .q_nope = q, .q_nope_st = H * W, .q_nope_sh = W,
        .q_pe = q + L, .q_pe_st = H * W, .q_pe_sh = W,
        .q_out = q_out, .q_out_st = H * W, .q_out_sh = W,
        .k_nope = kv_a, .k_nope_st = W,
        .k_pe = kv_a + L, .k_pe_st = W,
        .kv_cache = cache, .kv_st = W, .kv_rows = ROWS,
        .positions = positions, .slots = slots,
        .cos_sin = cos_sin, .max_pos = MAX_POS,
        .k_scale = &k_scale,
    };
    /* clang-format on */
    s = ropekv_launch(k, &a, NULL /* stream */);
    if (s != ROPEKV_OK) {
        fprintf(stderr, "launch: %s\n", ropekv_last_error(ctx));
        return 1;
    }
    /* 2.0 / 0.5 = 4.0 is 0x48 in OCP e4m3. */
    printf("%s: q_out[0][0][0] = 0x%04x, cache[3][0] = 0x%02x\n", ropekv_kernel_name(k), q_out[0], cache[3 * W]);
    int ok = q_out[0] == 0x3f80 && cache[3 * W] == 0x48;

    ropekv_kernel_release(k);
    ropekv_destroy(ctx);
    free(q), free(kv_a), free(q_out), free(cache), free(cos_sin);
    return ok ? 0 : 1;
}
