/* Choosing a cache row by its record's name (ropekv_variant.record): every record a built-in spec lists, written and
 * read back through the public API on the host backend and compared byte for byte with the reference (which encodes
 * and decodes through rk_record_encode / rk_record_decode); the kernel's public view of its record; a page-tail
 * record's block-stride rule; old-size variants; names a spec does not have. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "rk.h"
#include "ropekv.h"
#include "testutil.h"

static char cache[] = "/tmp/ropekv-test-record-choice-XXXXXX";
static rk_catalog cat;

static int setup(void **state) {
    (void)state;
    return rk_test_setup(cache, &cat);
}

static int teardown(void **state) {
    (void)state;
    rk_test_remove_tree(cache);
    return 0;
}

static ropekv_ctx *open_ctx(void) {
    ropekv_ctx *c = rk_test_host_ctx(NULL);
    assert_non_null(c);
    return c;
}

static const char *param(const ropekv_kernel *k, const char *name) {
    const char *v = NULL;
    assert_int_equal(ropekv_kernel_param_find(k, name, &v, NULL), ROPEKV_OK);
    return v;
}

/* Every record of every built-in spec that is not a kv dtype's row: its write kernel (q form none and absorbed) and
 * its read kernel in the first layout it fits, against the reference. */
static void test_records_launch(void **state) {
    (void)state;
    ropekv_ctx *c = open_ctx();
    int checked = 0;
    for (int s = 0; s < cat.n_specs; s++) {
        const rk_spec *sp = &cat.specs[s];
        const int rows = rk_spec_rows(sp);
        for (int i = 0; i < rows; i++) {
            rk_choice row;
            rk_record rec;
            const char *name = rk_spec_row(sp, i, &row, &rec);
            if (row.record == 0 || rk_record_unsupported(&rec)) continue;
            ropekv_kv_layout layout = ROPEKV_KV_FLAT;
            while (!rk_record_fits(&rec, layout)) layout = (ropekv_kv_layout)(layout + 1);
            for (int op = 0; op < 3; op++) {
                ropekv_variant v = {ROPEKV_SIZED(ropekv_variant),
                                    .spec = sp->name,
                                    .kv = ROPEKV_KV_FP8_TILE, /* ignored: the record chooses */
                                    .q = op == 1 ? ROPEKV_Q_ABSORBED : ROPEKV_Q_NONE,
                                    .layout = layout,
                                    .op = op == 2 ? ROPEKV_OP_READ : ROPEKV_OP_WRITE,
                                    .record = name};
                ropekv_kernel *k = NULL;
                const ropekv_status st = ropekv_kernel_get(c, &v, &k);
                if (st != ROPEKV_OK) fail_msg("%s %s: %s", sp->name, name, ropekv_last_error(c));
                assert_string_equal(param(k, "record"), name);
                assert_string_equal(param(k, "kv"), "");
                char bytes[32];
                snprintf(bytes, sizeof bytes, "%d", rec.row_bytes);
                assert_string_equal(param(k, "record_row_bytes"), bytes);
                assert_non_null(strstr(ropekv_kernel_name(k), "_rec"));
                ropekv_tensor_info t = {.size = sizeof t};
                assert_int_equal(ropekv_kernel_tensor_find(k, "kv_cache", &t), ROPEKV_OK);
                assert_string_equal(t.dtype, "uint8");
                assert_int_equal(t.sizes[t.rank - 1], layout == ROPEKV_KV_SPLIT ? rec.split_at : rec.row_bytes);
                const rk_desc *rv = rk_test_ref_variant(&cat, sp->name, &v);
                assert_non_null(rv);
                assert_string_equal(rv->name, ropekv_kernel_name(k));
                char why[4096] = "";
                if (rk_test_check_kernel(k, rv, why, sizeof why)) fail_msg("%s: %s", rv->key, why);
                ropekv_kernel_release(k);
                checked++;
            }
        }
    }
    print_message("%d record kernels checked\n", checked);
    assert_true(checked >= 12); /* fp8_ds_mla, nvfp4_fp8rope, fp8_ds_mla_pow2, kimi_k2's fp8, nvfp4 */
    ropekv_destroy(c);
}

/* A kv dtype's name is its row (the same kernel as the enum's); an old-size variant (no record field) chooses by kv;
 * a name the spec does not have, and a record the kernels cannot write yet, are refused naming the spec's rows. */
static void test_record_names(void **state) {
    (void)state;
    ropekv_ctx *c = open_ctx();
    ropekv_kernel *a = NULL, *b = NULL;
    const ropekv_variant by_enum = {.spec = "deepseek_v32", .kv = ROPEKV_KV_FP8_TILE};
    const ropekv_variant by_name = {ROPEKV_SIZED(ropekv_variant), .spec = "deepseek_v32", .record = "fp8_tile"};
    assert_int_equal(ropekv_kernel_get(c, &by_enum, &a), ROPEKV_OK);
    assert_int_equal(ropekv_kernel_get(c, &by_name, &b), ROPEKV_OK);
    assert_string_equal(ropekv_kernel_name(a), ropekv_kernel_name(b));
    assert_string_equal(param(a, "record"), "fp8_tile");
    assert_string_equal(param(a, "kv"), "fp8_tile");
    ropekv_kernel_release(a);
    ropekv_kernel_release(b);
    /* a variant of the size before `record`: bytes past it are not read */
    union {
        unsigned char old[offsetof(ropekv_variant, record)];
        ropekv_variant now;
    } v;
    memset(&v, 0xff, sizeof v);
    memset(v.old, 0, sizeof v.old);
    v.now.size = sizeof v.old;
    v.now.spec = "deepseek_v32";
    v.now.kv = ROPEKV_KV_BF16;
    assert_int_equal(ropekv_kernel_get(c, &v.now, &a), ROPEKV_OK);
    assert_string_equal(param(a, "record"), "bf16");
    ropekv_kernel_release(a);
    char why[1024];
    const ropekv_variant bad = {ROPEKV_SIZED(ropekv_variant), .spec = "deepseek_v32", .record = "nvfp4"};
    assert_int_equal(ropekv_kernel_get(c, &bad, &a), ROPEKV_ERR_UNSUPPORTED);
    assert_null(a);
    assert_non_null(strstr(ropekv_last_error(c), "no record named 'nvfp4'"));
    assert_non_null(strstr(ropekv_last_error(c), "fp8_tile, bf16, fp8_ds_mla"));
    assert_int_equal(ropekv_query(c, &bad, NULL, why, sizeof why), ROPEKV_ERR_UNSUPPORTED);
    assert_non_null(strstr(why, "no record named"));
    /* a per-token outer scale over the whole latent is written; one over another span is refused by name (a
     * rope part's own, as nvfp4_ds_mla_fp8rope's) */
    static const char spec[] =
        "return { name = 'tok', kv_lora_rank = 512, qk_rope_head_dim = 64, rope = 'gptj',\n"
        "  cos_sin = 'f32_cat', records = { 'nvfp4_ds_mla_fp8rope', { name = 'tok_latent', L = 512, R = 64,\n"
        "  row_bytes = 368, segments = { { from = 0, n = 512, elem = 'e2m1', at = 0, block = 16, scale = 'e4m3',\n"
        "  scales_at = 256, outer = 'token', outer_at = 352 }, { from = 512, n = 64, elem = 'e4m3', at = 288 } } },\n"
        "  { name = 'tok_rope', L = 512, R = 64,\n"
        "  row_bytes = 368, segments = { { from = 0, n = 512, elem = 'e2m1', at = 0, block = 16, scale = 'e4m3',\n"
        "  scales_at = 256 }, { from = 512, n = 64, elem = 'e4m3', at = 288, block = 16, scale = 'e4m3',\n"
        "  scales_at = 352, outer = 'token', outer_at = 356 } } } } }\n";
    assert_int_equal(ropekv_load_spec_text(c, "tok.lua", spec, sizeof spec - 1), ROPEKV_OK);
    const ropekv_variant tok = {ROPEKV_SIZED(ropekv_variant), .spec = "tok", .record = "tok_latent"};
    assert_int_equal(ropekv_kernel_get(c, &tok, &a), ROPEKV_OK);
    ropekv_kernel_release(a);
    static const char *const refused[] = {"tok_rope", "nvfp4_ds_mla_fp8rope"};
    for (int i = 0; i < 2; i++) {
        const ropekv_variant v2 = {ROPEKV_SIZED(ropekv_variant), .spec = "tok", .record = refused[i]};
        assert_int_equal(ropekv_kernel_get(c, &v2, &a), ROPEKV_ERR_UNSUPPORTED);
        assert_non_null(strstr(ropekv_last_error(c), "per-token outer scale over blocks of the whole latent"));
    }
    ropekv_destroy(c);
}

/* The public view of records: the library's in specs/records.lua's order, a kernel's (kimi_k2's fp8 with its own
 * convention), the structs' size rules and the NULL / range errors. */
static void test_record_view(void **state) {
    (void)state;
    assert_int_equal(ropekv_record_count(), 13);
    assert_null(ropekv_record_at(-1));
    assert_null(ropekv_record_at(13));
    const ropekv_record *r = ropekv_record_at(5);
    ropekv_record_info info = {.size = sizeof info};
    assert_int_equal(ropekv_record_describe(r, &info), ROPEKV_OK);
    assert_string_equal(info.name, "dsv4_fp8");
    assert_int_equal(info.L, 448);
    assert_int_equal(info.row_bytes, 576);
    assert_int_equal(info.tail_bytes, 8);
    assert_int_equal(info.segments, 2);
    assert_int_equal(info.readers, 1);
    assert_string_equal(info.conv, "none");
    ropekv_record_segment g = {0}; /* size 0: the whole struct */
    assert_int_equal(ropekv_record_segment_at(r, 0, &g), ROPEKV_OK);
    assert_int_equal(g.size, sizeof g);
    assert_int_equal(g.n, 448);
    assert_int_equal(g.block, 64);
    assert_string_equal(g.elem, "e4m3");
    assert_string_equal(g.scale, "ue8m0");
    assert_string_equal(g.rule, "pow2_up");
    assert_string_equal(g.scale_at, "page_tail");
    assert_true(g.saturate_ocp == 448.0f && g.saturate_fnuz == 240.0f);
    assert_int_equal(ropekv_record_segment_at(r, 1, &g), ROPEKV_OK);
    assert_string_equal(g.elem, "bf16");
    assert_int_equal(g.at, 448);
    ropekv_record_reader rd = {.size = sizeof rd};
    assert_int_equal(ropekv_record_reader_at(r, 0, &rd), ROPEKV_OK);
    assert_string_equal(rd.name, "flashmla_v4_sparse");
    assert_string_equal(rd.scale, "exact");
    /* errors: NULL, out of range, bad sizes; a short struct gets its prefix, a longer one zeros past it */
    assert_int_equal(ropekv_record_describe(NULL, &info), ROPEKV_ERR_NULL);
    assert_int_equal(ropekv_record_segment_at(r, 0, NULL), ROPEKV_ERR_NULL);
    assert_int_equal(ropekv_record_segment_at(r, 2, &g), ROPEKV_ERR_ARG);
    assert_int_equal(ropekv_record_reader_at(r, 1, &rd), ROPEKV_ERR_ARG);
    info.size = 4;
    assert_int_equal(ropekv_record_describe(r, &info), ROPEKV_ERR_VERSION);
    info.size = 5000;
    assert_int_equal(ropekv_record_describe(r, &info), ROPEKV_ERR_VERSION);
    struct {
        ropekv_record_info info;
        int later[4];
    } big;
    memset(&big, 0xff, sizeof big);
    big.info.size = sizeof big;
    assert_int_equal(ropekv_record_describe(r, &big.info), ROPEKV_OK);
    assert_int_equal(big.info.size, sizeof big.info);
    assert_int_equal(big.later[0] | big.later[3], 0);
    struct {
        size_t size;
        const char *name;
    } small = {sizeof small, NULL};
    assert_int_equal(ropekv_record_describe(r, (ropekv_record_info *)&small), ROPEKV_OK);
    assert_string_equal(small.name, "dsv4_fp8");
    /* a kernel's record: kimi_k2 takes the library's fp8 with conv div and a FNUZ bound of 224 */
    ropekv_ctx *c = open_ctx();
    ropekv_kernel *k = NULL;
    const ropekv_variant v = {ROPEKV_SIZED(ropekv_variant), .spec = "kimi_k2", .q = ROPEKV_Q_NONE, .record = "fp8"};
    assert_int_equal(ropekv_kernel_get(c, &v, &k), ROPEKV_OK);
    assert_null(ropekv_kernel_record(NULL));
    info.size = sizeof info;
    assert_int_equal(ropekv_record_describe(ropekv_kernel_record(k), &info), ROPEKV_OK);
    assert_string_equal(info.name, "fp8");
    assert_string_equal(info.conv, "div");
    assert_int_equal(ropekv_record_segment_at(ropekv_kernel_record(k), 1, &g), ROPEKV_OK);
    assert_string_equal(g.outer, "tensor");
    assert_true(g.saturate_fnuz == 224.0f);
    ropekv_kernel_release(k);
    ropekv_destroy(c);
}

/* A page-tail record (dsv4_fp8, L = 448): paged only, and the block stride must hold a block's tails after its rows. */
static void test_page_tail(void **state) {
    (void)state;
    ropekv_ctx *c = open_ctx();
    static const char spec[] = "return { name = 'tail', kv_lora_rank = 448, qk_rope_head_dim = 64, rope = 'gptj',\n"
                               "  cos_sin = 'f32_cat', kv_layouts = { 'flat', 'paged' }, records = { 'dsv4_fp8' } }\n";
    assert_int_equal(ropekv_load_spec_text(c, "tail.lua", spec, sizeof spec - 1), ROPEKV_OK);
    ropekv_variant v = {ROPEKV_SIZED(ropekv_variant), .spec = "tail", .q = ROPEKV_Q_NONE, .record = "dsv4_fp8"};
    ropekv_kernel *k = NULL;
    assert_int_equal(ropekv_kernel_get(c, &v, &k), ROPEKV_ERR_UNSUPPORTED);
    assert_non_null(strstr(ropekv_last_error(c), "page tail"));
    v.layout = ROPEKV_KV_PAGED;
    assert_int_equal(ropekv_kernel_get(c, &v, &k), ROPEKV_OK);
    assert_string_equal(param(k, "record_tail_bytes"), "8");
    enum { T = 4, B = 4, W = 512, ROW = 576 };
    static uint16_t kn[T * W];
    static int64_t slots[T] = {0, 1, 2, 5}, pos[T] = {0, 1, 2, 3};
    static float cs[8 * 64];
    static uint8_t kv[2 * (B * ROW + B * 8)];
    ropekv_args a = {ROPEKV_SIZED(ropekv_args),
                     .k_nope = kn,
                     .k_pe = kn + 448,
                     .kv_cache = kv,
                     .positions = pos,
                     .slots = slots,
                     .cos_sin = cs,
                     .tokens = T,
                     .heads = 1,
                     .max_pos = 8,
                     .k_nope_st = W,
                     .k_pe_st = W,
                     .kv_st = ROW,
                     .kv_rows = 2 * B,
                     .kv_block_size = B,
                     .kv_block_st = B * ROW};
    assert_int_equal(ropekv_launch(k, &a, NULL), ROPEKV_ERR_STRIDE);
    assert_non_null(strstr(ropekv_last_error(c), "no room for the page tail"));
    a.kv_block_st = B * ROW + B * 8;
    assert_int_equal(ropekv_launch(k, &a, NULL), ROPEKV_OK);
    ropekv_kernel_release(k);
    ropekv_destroy(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_record_names),
        cmocka_unit_test(test_record_view),
        cmocka_unit_test(test_page_tail),
        cmocka_unit_test(test_records_launch),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
