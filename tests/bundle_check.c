/* Runs kernels from a bundle with no compiler at all (tests/bundle.sh sets ROPEKV_CACHE_RO to the
 * bundle, ROPEKV_DISABLE_CACHE=1, CXX=/nonexistent/c++ and an empty PATH): the bundled variant
 * (deepseek_v3 bf16 absorbed paged) launches through both entries without a compile; a variant not in
 * the bundle fails with ROPEKV_ERR_COMPILE naming the missing compiler. Exit status 0 on success. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "ropekv.h"

#define CHECK(cond, ...)                                               \
    do {                                                               \
        if (!(cond)) {                                                 \
            fprintf(stderr, "FAIL: " __VA_ARGS__);                     \
            fprintf(stderr, " (%s)\n", c ? ropekv_last_error(c) : ""); \
            return 1;                                                  \
        }                                                              \
    } while (0)

enum { T = 3, H = 2, L = 512, R = 64, W = L + R, B = 4, ROWS = 8 };
static uint16_t q[T * H * W], qo[T * H * W], kn[T * W], kv[ROWS * W];
static int64_t pos[T] = {0, 1, 2}, slots[T] = {5, 0, 2};
static float cs[8 * R];

int main(void) {
    ropekv_ctx *c = NULL;
    ropekv_options o = {.backend = ROPEKV_BACKEND_HOST};
    CHECK(ropekv_create(&c, &o) == ROPEKV_OK, "ropekv_create");
    ropekv_variant v = {.spec = "deepseek_v3", .layout = ROPEKV_KV_PAGED};
    ropekv_kernel *k = NULL;
    CHECK(ropekv_kernel_get(c, &v, &k) == ROPEKV_OK, "bundled kernel_get");
    CHECK(ropekv_kernel_prepare(k, ROPEKV_ENTRY_64) == ROPEKV_OK, "bundled 64-bit entry");
    for (int i = 0; i < T * H * W; i++) q[i] = (uint16_t)(0x3c00 + i % 512);
    for (int i = 0; i < T * W; i++) kn[i] = (uint16_t)(0x3c00 + i % 300);
    ropekv_args a = {.tokens = T,
                     .heads = H,
                     .q_nope = q,
                     .q_nope_st = H * W,
                     .q_nope_sh = W,
                     .q_pe = q + L,
                     .q_pe_st = H * W,
                     .q_pe_sh = W,
                     .q_out = qo,
                     .q_out_st = H * W,
                     .q_out_sh = W,
                     .k_nope = kn,
                     .k_nope_st = W,
                     .k_pe = kn + L,
                     .k_pe_st = W,
                     .kv_cache = kv,
                     .kv_st = W,
                     .kv_rows = ROWS,
                     .positions = pos,
                     .slots = slots,
                     .cos_sin = cs,
                     .max_pos = 8,
                     .kv_block_size = B,
                     .kv_block_st = B * W};
    CHECK(ropekv_launch(k, &a, NULL) == ROPEKV_OK, "launch");
    CHECK(memcmp(qo, q, 2 * L) == 0 && memcmp(kv + 5 * W, kn, 2 * L) == 0, "the launch wrote its rows");
    a.kv_rows = (INT32_MAX / W + 1) / B * B + B; /* the 64-bit entry: a cache that large, reserved, not backed */
    a.kv_block_st = B * W;
    const size_t wide_bytes = (size_t)a.kv_rows * W * sizeof(uint16_t);
    void *wide = mmap(NULL, wide_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    CHECK(wide != MAP_FAILED, "reserving the wide cache");
    a.kv_cache = wide;
    CHECK(ropekv_launch(k, &a, NULL) == ROPEKV_OK, "wide launch");
    munmap(wide, wide_bytes);
    ropekv_stats st;
    CHECK(ropekv_get_stats(c, &st) == ROPEKV_OK && st.compiles == 0 && st.disk_hits == 2,
          "two bundle hits, no compile");
    ropekv_kernel_release(k);
    ropekv_variant other = {.spec = "deepseek_v3", .kv = ROPEKV_KV_FP8_E4M3};
    CHECK(ropekv_kernel_get(c, &other, &k) == ROPEKV_ERR_COMPILE, "a variant not in the bundle");
    CHECK(strstr(ropekv_last_error(c), "/nonexistent/c++") != NULL, "the error names the compiler");
    ropekv_destroy(c);
    printf("bundle: the bundled kernel ran without a compiler\n");
    return 0;
}
