/* Cache records: the built-in library (specs/records.lua), rk_record_check's rules one by one, and a spec's
 * `records` key (names, tables of its own, like + overrides). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rk.h"

#define TFILE "specs/t.lua"

typedef struct fixture {
    rk_arch_table archs;
    rk_record_lib lib;
} fixture;

static int group_setup(void **state) {
    fixture *f = calloc(1, sizeof *f);
    rk_err err = {0};
    size_t len;
    const char *text = rk_embedded("archs.lua", &len);
    if (f == NULL || text == NULL || rk_archs_load("specs/archs.lua", text, len, &f->archs, &err) != ROPEKV_OK ||
        rk_records_builtin(&f->lib, &err) != ROPEKV_OK) {
        fprintf(stderr, "setup: %s\n", err.msg);
        free(f);
        return -1;
    }
    *state = f;
    return 0;
}

static int group_teardown(void **state) {
    free(*state);
    return 0;
}

static const rk_record *lib_record(void **state, const char *name) {
    const rk_record *r = rk_record_find(&((fixture *)*state)->lib, name);
    if (r == NULL) fail_msg("no library record '%s'", name);
    return r;
}

/* ---- the library ------------------------------------------------------------------------------------------ */
/* Every record of RECORDS.md with its bytes a token (row + page tail), and the geometry it is for. */
static const struct {
    const char *name;
    int L, R, row, tail;
} published[] = {
    {"bf16", 512, 64, 1152, 0},           {"fp8", 512, 64, 576, 0},          {"fp8_ds_mla", 512, 64, 656, 0},
    {"fp8_ds_mla_pow2", 512, 64, 656, 0}, {"glm_next_fp8", 512, 0, 528, 0},  {"dsv4_fp8", 448, 64, 576, 8},
    {"dsv41_mxfp8", 448, 64, 528, 0},     {"dsv41_fp4", 448, 64, 288, 0},    {"nvfp4", 512, 64, 352, 0},
    {"nvfp4_fp8rope", 512, 64, 352, 0},   {"nvfp4_ds_mla", 512, 64, 432, 0}, {"nvfp4_ds_mla_fp8rope", 512, 64, 368, 0},
    {"glm_next_nvfp4", 512, 0, 304, 0},
};

static void test_library(void **state) {
    const rk_record_lib *lib = &((fixture *)*state)->lib;
    rk_err err = {0};
    for (size_t i = 0; i < sizeof published / sizeof published[0]; i++) {
        const rk_record *r = lib_record(state, published[i].name);
        if (rk_record_check(r, "specs/records.lua", &err) != ROPEKV_OK) fail_msg("%s", err.msg);
        if (r->L != published[i].L || r->R != published[i].R || r->row_bytes != published[i].row ||
            r->tail_bytes != published[i].tail)
            fail_msg("%s: L %d R %d row %d tail %d, want %d %d %d %d", r->name, r->L, r->R, r->row_bytes, r->tail_bytes,
                     published[i].L, published[i].R, published[i].row, published[i].tail);
    }
    assert_int_equal(lib->n, (int)(sizeof published / sizeof published[0]));
    /* the totals the engines name */
    assert_int_equal(lib_record(state, "dsv4_fp8")->row_bytes + lib_record(state, "dsv4_fp8")->tail_bytes, 584);
    /* V4.1's MXFP8 segment spans the latent and the rotated rope values */
    const rk_record *mx = lib_record(state, "dsv41_mxfp8");
    assert_int_equal(mx->n_seg, 1);
    assert_int_equal(mx->seg[0].n, 512);
    /* the split records cut between their parts */
    assert_int_equal(lib_record(state, "nvfp4")->split_at, 288);
    assert_int_equal(lib_record(state, "bf16")->split_at, 1024);
    /* like: the pow2 record is fp8_ds_mla's row with power-of-two scales */
    const rk_record *p2 = lib_record(state, "fp8_ds_mla_pow2"), *ds = lib_record(state, "fp8_ds_mla");
    assert_int_equal(p2->seg[0].rule, RK_SR_POW2_UP);
    assert_int_equal(ds->seg[0].rule, RK_SR_EXACT);
    assert_int_equal(p2->seg[1].at, 528);
    assert_true(p2->seg[0].sat_fnuz == 224.0f && ds->seg[0].sat_ocp == 448.0f);
    assert_int_equal(p2->readers[0].scale, RK_RS_POW2_DOWN);
}

/* The catalog holds the library, and a built-in spec's records come from it. */
static void test_catalog(void **state) {
    (void)state;
    rk_catalog *c = malloc(sizeof *c);
    rk_err err = {0};
    assert_non_null(c);
    if (rk_catalog_load_embedded(c, &err) != ROPEKV_OK) fail_msg("%s", err.msg);
    assert_int_equal(c->records.n, (int)(sizeof published / sizeof published[0]));
    const rk_spec *k = rk_catalog_find(c, "kimi_k2");
    assert_non_null(k);
    assert_int_equal(k->n_records, 2);
    assert_string_equal(k->records[1].name, "fp8");
    assert_int_equal(k->records[1].conv, RK_SCALE_DIV);
    assert_true(k->records[1].seg[0].sat_fnuz == 224.0f && k->records[1].seg[1].sat_fnuz == 224.0f);
    assert_true(k->records[1].seg[0].sat_ocp == 448.0f);
    const rk_spec *v32 = rk_catalog_find(c, "deepseek_v32");
    assert_non_null(v32);
    assert_string_equal(v32->records[0].name, "fp8_ds_mla");
    free(c);
}

/* ---- rk_record_check, one rule at a time --------------------------------------------------------------------- */
typedef struct rule_case {
    const char *base; /* a library record */
    void (*change)(rk_record *r);
    const char *want; /* the message after "<file>: record '<name>': " */
} rule_case;

static void uncovered_tail(rk_record *r) { r->seg[1].n = 32; }
static void covered_twice(rk_record *r) { r->seg[1].from = 500; }
static void gap(rk_record *r) {
    r->seg[1].from = 520;
    r->seg[1].n = 56;
}
static void past_values(rk_record *r) { r->seg[1].n = 128; }
static void values_overlap_scales(rk_record *r) { r->seg[1].at = 512; }
static void past_row(rk_record *r) { r->row_bytes = 640; }
static void bf16_misaligned(rk_record *r) { r->seg[1].at = 536; }
static void e4m3_misaligned(rk_record *r) { r->seg[1].at = 516; }
static void e2m1_misaligned(rk_record *r) { r->seg[0].at = 2; }
static void f32_scales_misaligned(rk_record *r) { r->seg[0].scales_at = 530; }
static void outer_misaligned(rk_record *r) { r->seg[0].outer_at = 290; }
static void outer_overlap(rk_record *r) { r->seg[0].outer_at = 284; }
static void bad_block(rk_record *r) { r->seg[0].block = 96; }
static void block_not_dividing(rk_record *r) { r->seg[0].block = 128; }
static void scale_without_block(rk_record *r) { r->seg[0].scale = RK_ST_F32; }
static void block_without_scale(rk_record *r) { r->seg[0].scale = RK_ST_NONE; }
static void bf16_blocks(rk_record *r) {
    r->seg[0].block = 16;
    r->seg[0].scale = RK_ST_E4M3;
}
static void ue8m0_exact(rk_record *r) { r->seg[0].rule = RK_SR_EXACT; }
static void no_tail_room(rk_record *r) { r->tail_bytes = 4; }
static void tail_unused(rk_record *r) { r->tail_bytes = 8; }
static void split_cuts_values(rk_record *r) { r->split_at = 1000; }
static void split_cuts_scales(rk_record *r) { r->split_at = 272; }
static void tensor_without_conv(rk_record *r) { r->conv = RK_SCALE_NONE; }
static void conv_without_tensor(rk_record *r) { r->conv = RK_SCALE_DIV; }
static void fnuz_too_large(rk_record *r) { r->seg[0].sat_fnuz = 448; }
static void e2m1_sat(rk_record *r) { r->seg[0].sat_ocp = 8; }
static void bf16_sat(rk_record *r) { r->seg[0].sat_ocp = 448; }
static void rope_bf16_latent(rk_record *r) { r->seg[0].rope_bf16 = 1; }
static void up_on_f32(rk_record *r) { r->seg[0].rule = RK_SR_UP; }
static void exact_zero(rk_record *r) { r->seg[0].rule = RK_SR_EXACT_ZERO; }
static void floor_too_small(rk_record *r) { r->seg[0].floor = 1e-39f; }
static void floor_above_one(rk_record *r) { r->seg[0].floor = 2.0f; }
static void floor_unblocked(rk_record *r) { r->seg[0].floor = 1e-4f; }
static void recip_unblocked(rk_record *r) { r->seg[1].block_conv = RK_BC_MUL_RECIP; }
static void interleave_not_dividing(rk_record *r) { r->seg[0].interleave = 3; }
static void interleave_one(rk_record *r) { r->seg[0].interleave = 1; }
static void bad_name(rk_record *r) { strcpy(r->name, "Bad"); }
static void duplicate_reader(rk_record *r) { strcpy(r->readers[1].name, r->readers[0].name); }
static void no_segments(rk_record *r) { r->n_seg = 0; }

static const rule_case rule_cases[] = {
    {"fp8_ds_mla", uncovered_tail, "segments: x[544, 576) is covered by no segment"},
    {"bf16", covered_twice, "segments[2] (from 500): from: x[500, 512) is covered by segments[1] too"},
    {"bf16", gap, "segments[2] (from 520): from: x[512, 520) is covered by no segment"},
    {"fp8", past_values, "segments[2] (from 512): n: must be in 1..64"},
    {"fp8_ds_mla", values_overlap_scales,
     "segments[2] (from 512): at: its values' bytes [512, 640) of the row overlap segments[1]'s scales [512, 528)"},
    {"fp8_ds_mla", past_row, "segments[2] (from 512): at: the values' bytes [528, 656) pass row_bytes (640)"},
    {"fp8_ds_mla", bf16_misaligned, "segments[2] (from 512): at: must be a multiple of 16 (bf16 values), got 536"},
    {"fp8", e4m3_misaligned, "segments[2] (from 512): at: must be a multiple of 8 (e4m3 values), got 516"},
    {"nvfp4", e2m1_misaligned, "segments[1] (from 0): at: must be a multiple of 4 (e2m1 values), got 2"},
    {"fp8_ds_mla", f32_scales_misaligned, "segments[1] (from 0): scales_at: must be a non-negative multiple of 4"},
    {"glm_next_nvfp4", outer_misaligned, "segments[1] (from 0): outer_at: must be a non-negative multiple of 4"},
    {"glm_next_nvfp4", outer_overlap,
     "segments[1] (from 0): outer_at: its outer scale' bytes [284, 288) of the row overlap segments[1]'s scales"},
    {"fp8_ds_mla", bad_block, "segments[1] (from 0): block: must be 0 (no block scales), 16, 32, 64 or 128, got 96"},
    {"dsv4_fp8", block_not_dividing, "segments[1] (from 0): block: 128 does not divide n (448)"},
    {"fp8", scale_without_block, "segments[1] (from 0): scale: 'f32' without a block"},
    {"fp8_ds_mla", block_without_scale, "segments[1] (from 0): block: blocks of 128 need a scale type"},
    {"bf16", bf16_blocks, "segments[1] (from 0): scale: bf16 values take no block scale"},
    {"dsv4_fp8", ue8m0_exact, "segments[1] (from 0): rule: must be 'pow2_up' with ue8m0 scales"},
    {"dsv4_fp8", no_tail_room, "segments[1] (from 0): tail_bytes: the 7 page-tail scales' bytes [0, 7)"},
    {"fp8", tail_unused, "tail_bytes: 8 but no segment's scales lie in the page tail"},
    {"bf16", split_cuts_values, "split_at: 1000 cuts segments[1]'s values [0, 1024)"},
    {"nvfp4", split_cuts_scales, "split_at: 272 cuts segments[1]'s scales [256, 288)"},
    {"fp8", tensor_without_conv, "segments[1] (from 0): conv: a tensor-scaled segment needs the record's conv"},
    {"fp8_ds_mla", conv_without_tensor, "conv: 'div' but no segment has a tensor scale"},
    {"fp8", fnuz_too_large, "segments[1] (from 0): saturate.fnuz: must be in (0, 240] for e4m3 values, got 448"},
    {"nvfp4", e2m1_sat, "segments[1] (from 0): saturate.ocp: must be in (0, 6] for e2m1 values, got 8"},
    {"bf16", bf16_sat, "segments[1] (from 0): saturate: bf16 values have no saturation bound"},
    {"fp8", rope_bf16_latent, "segments[1] (from 0): rope_bf16: the segment holds no rope value"},
    {"fp8_ds_mla", up_on_f32, "segments[1] (from 0): rule: 'up' rounds to an e4m3 scale's values (scale is 'f32')"},
    {"dsv4_fp8", exact_zero, "segments[1] (from 0): rule: must be 'pow2_up' with ue8m0 scales"},
    {"fp8_ds_mla", exact_zero,
     "segments[1] (from 0): rule: 'exact_zero' rounds to an e4m3 scale's values (scale is 'f32')"},
    {"nvfp4_fp8rope", floor_too_small, "segments[1] (from 0): floor: must be in [FLT_MIN, 1]"},
    {"dsv41_mxfp8", floor_above_one,
     "segments[1] (from 0): floor: must be in [FLT_MIN, 1] (the least block scale), got 2"},
    {"fp8", floor_unblocked, "segments[1] (from 0): floor: given without block scales (block is 0)"},
    {"nvfp4_fp8rope", recip_unblocked, "segments[2] (from 512): block_conv: given without block scales (block is 0)"},
    {"nvfp4_fp8rope", interleave_not_dividing,
     "segments[1] (from 0): scales_interleave: must be 0 (block order) or k >= 2 dividing the 32 block scales, got 3"},
    {"nvfp4_fp8rope", interleave_one, "segments[1] (from 0): scales_interleave: must be 0 (block order) or k >= 2"},
    {"fp8", bad_name, "name: must match [a-z0-9_]+"},
    {"fp8_ds_mla", duplicate_reader, "readers[2].name: duplicate 'vllm_cp_gather_and_upconvert' (also readers[1])"},
    {"fp8", no_segments, "segments: must hold 1..4 segments, got 0"},
};

static void test_check_rules(void **state) {
    for (size_t i = 0; i < sizeof rule_cases / sizeof rule_cases[0]; i++) {
        const rule_case *c = &rule_cases[i];
        rk_record r = *lib_record(state, c->base);
        rk_err err = {0};
        char head[96];
        c->change(&r);
        snprintf(head, sizeof head, "%s: record '%s': ", TFILE, r.name);
        const int rc = rk_record_check(&r, TFILE, &err);
        const int ok = rc == ROPEKV_ERR_SPEC_INVALID && err.code == ROPEKV_ERR_SPEC_INVALID &&
                       strncmp(err.msg, head, strlen(head)) == 0 && strstr(err.msg, c->want) != NULL;
        if (!ok) fail_msg("case %zu (%s): rc %d\n  msg:  %s\n  want: %s%s", i, c->base, rc, err.msg, head, c->want);
    }
}

/* ---- a spec's `records` --------------------------------------------------------------------------------------- */
static const char BASE[] = "local s = { name = 't', kv_lora_rank = %d, qk_rope_head_dim = %d, targets = { 'host' } }\n"
                           "%s\n"
                           "return s\n";

static int load(void **state, int L, int R, const char *change, rk_spec *out, rk_err *err) {
    static char text[8192];
    snprintf(text, sizeof text, BASE, L, R, change);
    return rk_spec_load(TFILE, text, strlen(text), &((fixture *)*state)->archs, out, err);
}

static void test_spec_names(void **state) {
    rk_spec *s = malloc(sizeof *s);
    rk_err err = {0};
    assert_non_null(s);
    if (load(state, 512, 64, "s.records = { 'fp8_ds_mla', 'bf16' }", s, &err) != ROPEKV_OK) fail_msg("%s", err.msg);
    assert_int_equal(s->n_records, 2);
    assert_string_equal(s->records[0].name, "fp8_ds_mla");
    assert_int_equal(s->records[0].row_bytes, 656);
    assert_int_equal(s->records[1].row_bytes, 1152);
    /* one name as a string */
    if (load(state, 448, 64, "s.records = 'dsv4_fp8'", s, &err) != ROPEKV_OK) fail_msg("%s", err.msg);
    assert_int_equal(s->n_records, 1);
    assert_int_equal(s->records[0].tail_bytes, 8);
    /* absent: none */
    if (load(state, 512, 64, "", s, &err) != ROPEKV_OK) fail_msg("%s", err.msg);
    assert_int_equal(s->n_records, 0);
    free(s);
}

static void test_spec_inline(void **state) {
    rk_spec *s = malloc(sizeof *s);
    rk_err err = {0};
    assert_non_null(s);
    const char *mine = "s.records = { { name = 'mine', row_bytes = 336, segments = {\n"
                       "  { from = 0, n = 256, elem = 'e4m3', at = 0, block = 64, scale = 'ue8m0', scales_at = 256 },\n"
                       "  { from = 256, n = 32, elem = 'bf16', at = 272 } },\n"
                       "  readers = { { name = 'mine_reader', scale = 'pow2_down' } }, matches = 'a test' } }";
    if (load(state, 256, 32, mine, s, &err) != ROPEKV_OK) fail_msg("%s", err.msg);
    assert_int_equal(s->n_records, 1);
    const rk_record *r = &s->records[0];
    assert_int_equal(r->L, 256); /* the spec's L and R */
    assert_int_equal(r->R, 32);
    assert_int_equal(r->seg[0].rule, RK_SR_POW2_UP); /* the UE8M0 default */
    assert_true(r->seg[0].sat_ocp == 448.0f && r->seg[0].sat_fnuz == 240.0f);
    assert_true(r->seg[1].sat_ocp == 0.0f);
    assert_int_equal(r->readers[0].scale, RK_RS_POW2_DOWN);
    assert_string_equal(r->matches, "a test");
    free(s);
}

static void test_spec_like(void **state) {
    rk_spec *s = malloc(sizeof *s);
    rk_err err = {0};
    assert_non_null(s);
    const char *kimi = "s.records = { { like = 'fp8', conv = 'div', segments = { { saturate = { fnuz = 224 } } } },\n"
                       "  { like = 'fp8_ds_mla', name = 'ds_mine', segments = { {}, { at = 544 } }, row_bytes = 672 } }";
    if (load(state, 512, 64, kimi, s, &err) != ROPEKV_OK) fail_msg("%s", err.msg);
    assert_int_equal(s->n_records, 2);
    const rk_record *f = &s->records[0];
    assert_string_equal(f->name, "fp8");
    assert_int_equal(f->conv, RK_SCALE_DIV);
    assert_true(f->seg[0].sat_fnuz == 224.0f && f->seg[0].sat_ocp == 448.0f);
    assert_true(f->seg[1].sat_fnuz == 240.0f); /* the base's second segment as it is */
    assert_int_equal(f->n_seg, 2);
    assert_int_equal(f->split_at, 512);
    const rk_record *d = &s->records[1];
    assert_string_equal(d->name, "ds_mine");
    assert_int_equal(d->seg[1].at, 544);
    assert_int_equal(d->seg[0].block, 128);
    assert_int_equal(d->row_bytes, 672);
    free(s);
}

static void test_spec_errors(void **state) {
    static const struct {
        int L, R;
        const char *change, *want;
    } cases[] = {
        {512, 64, "s.records = { 'nope' }", "specs/t.lua: records[1]: unknown record 'nope' (known: bf16, fp8, "},
        {256, 32, "s.records = { 'fp8' }",
         "specs/t.lua: records[1]: record 'fp8' is for L = 512, R = 64; the spec has kv_lora_rank 256, "
         "qk_rope_head_dim 32"},
        {512, 64, "s.records = { 'bf16', 'dsv4_fp8' }", "specs/t.lua: records[2]: record 'dsv4_fp8' is for L = 448"},
        {512, 64, "s.records = { { like = 'fp8', L = 256 } }", "specs/t.lua: records[1]: record 'fp8' is for L = 256"},
        {512, 64, "s.records = { 'bf16', 'bf16' }",
         "specs/t.lua: records[2]: duplicate record 'bf16' (also records[1])"},
        {512, 64, "s.records = { 5 }", "specs/t.lua: records[1]: must be a record's name or a table, got number"},
        {512, 64, "s.records = 5", "specs/t.lua: records: must be a list of strings (or one string), got number"},
        {512, 64, "s.records = { { like = 'zzz' } }",
         "specs/t.lua: records[1].like: unknown record 'zzz' (known: bf16"},
        {512, 64, "s.records = { { like = 'fp8', colour = 1 } }", "specs/t.lua: records[1]: unknown key 'colour'"},
        {512, 64, "s.records = { { like = 'fp8', segments = { { elem = 'e5m2' } } } }",
         "specs/t.lua: records[1].segments[1].elem: unknown value 'e5m2' (one of: bf16, e4m3, e2m1)"},
        {512, 64, "s.records = { { like = 'fp8', segments = { { saturate = { ocp = 447 } } } } }",
         "specs/t.lua: records[1].segments[1].saturate.ocp: 447 is not an e4m3 OCP value"},
        {512, 64, "s.records = { { like = 'fp8', segments = { 'x' } } }",
         "specs/t.lua: records[1].segments[1]: must be a table, got string"},
        {512, 64, "s.records = { { like = 'nvfp4_fp8rope', segments = { { block_conv = 'mul' } } } }",
         "specs/t.lua: records[1].segments[1].block_conv: unknown value 'mul' (one of: div, mul_recip)"},
        {512, 64, "s.records = { { like = 'nvfp4_fp8rope', segments = { { floor = 'x' } } } }",
         "specs/t.lua: records[1].segments[1].floor: must be a number, got string"},
        {512, 64, "s.records = { { like = 'fp8', readers = { { name = 'a', scale = 'up' } } } }",
         "specs/t.lua: records[1].readers[1].scale: unknown value 'up' (one of: exact, bf16, pow2_down)"},
        {512, 64, "s.records = { { name = 'x', row_bytes = 10 } }", "specs/t.lua: records[1].segments: required"},
        {512, 64, "s.records = { { segments = {} } }", "specs/t.lua: records[1].name: required"},
        {512, 64, "s.records = { { name = 'x', segments = { { from = 0, n = 576, elem = 'bf16', at = 0 } } } }",
         "specs/t.lua: records[1].row_bytes: required"},
        {512, 64,
         "s.records = { { name = 'x', row_bytes = 576, segments = { { from = 0, n = 576, elem = 'e4m3', "
         "at = 0, scale = 'f32', block = 64 } } } }",
         "specs/t.lua: records[1].segments[1].scales_at: required"},
        /* rk_record_check's rules reach a spec's records, naming its file */
        {512, 64, "s.records = { { like = 'fp8', segments = { { at = 4 } } } }",
         "specs/t.lua: record 'fp8': segments[1] (from 0): at: must be a multiple of 8 (e4m3 values), got 4"},
        {512, 64, "s.records = { { like = 'fp8_ds_mla', segments = { { block = 64 } } } }",
         "specs/t.lua: record 'fp8_ds_mla': segments[2] (from 512): at: its values' bytes [528, 656) of the row "
         "overlap segments[1]'s scales [512, 544)"},
    };
    rk_spec *s = malloc(sizeof *s);
    assert_non_null(s);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rk_err err = {0};
        const int rc = load(state, cases[i].L, cases[i].R, cases[i].change, s, &err);
        if (rc != ROPEKV_ERR_SPEC_INVALID || strstr(err.msg, cases[i].want) != err.msg)
            fail_msg("case %zu: %s\n  rc %d, msg:  %s\n  want: %s", i, cases[i].change, rc, err.msg, cases[i].want);
    }
    free(s);
}

/* A library of one's own: rk_records_load's errors, and rk_spec_load_lib resolving names in it. */
static void test_own_library(void **state) {
    fixture *f = *state;
    rk_record_lib *lib = malloc(sizeof *lib);
    rk_spec *s = malloc(sizeof *s);
    rk_err err = {0};
    assert_non_null(lib);
    assert_non_null(s);
    const char *text = "return { records = {\n"
                       "  { name = 'tiny', L = 512, R = 64, row_bytes = 1152, segments = {\n"
                       "    { from = 0, n = 576, elem = 'bf16', at = 0 } } },\n"
                       "  { like = 'tiny', name = 'tiny2', readers = { { name = 'r' } } },\n"
                       "} }";
    if (rk_records_load("lib.lua", text, strlen(text), lib, &err) != ROPEKV_OK) fail_msg("%s", err.msg);
    assert_int_equal(lib->n, 2);
    assert_int_equal(lib->r[1].n_readers, 1);
    const char *spec = "return { name = 't', kv_lora_rank = 512, qk_rope_head_dim = 64, targets = { 'host' },\n"
                       "  records = { 'tiny2' } }";
    if (rk_spec_load_lib(TFILE, spec, strlen(spec), &f->archs, lib, s, &err) != ROPEKV_OK) fail_msg("%s", err.msg);
    assert_string_equal(s->records[0].name, "tiny2");
    /* not in the built-in library */
    assert_int_equal(rk_spec_load(TFILE, spec, strlen(spec), &f->archs, s, &err), ROPEKV_ERR_SPEC_INVALID);
    assert_non_null(strstr(err.msg, "records[1]: unknown record 'tiny2'"));

    static const struct {
        const char *text, *want;
    } bad[] = {
        {"return { records = { { name = 'a', L = 8, R = 0, row_bytes = 16, segments = { { from = 0, n = 8, "
         "elem = 'bf16', at = 0 } } }, { like = 'a' } } }",
         "lib.lua: records[2].name: duplicate record 'a'"},
        {"return { records = { { name = 'a', R = 0, row_bytes = 16, segments = {} } } }",
         "lib.lua: records[1].L: required"},
        {"return { records = {} }", "lib.lua: records: must not be empty"},
        {"return { recs = {} }", "lib.lua: unknown key 'recs' (allowed: records)"},
        {"return { records = { { name = 'a', L = 8, R = 0, row_bytes = 8, segments = { { from = 0, n = 8, "
         "elem = 'bf16', at = 0 } } } } }",
         "lib.lua: record 'a': segments[1] (from 0): at: the values' bytes [0, 16) pass row_bytes (8)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const int rc = rk_records_load("lib.lua", bad[i].text, strlen(bad[i].text), lib, &err);
        if (rc != ROPEKV_ERR_SPEC_INVALID || strstr(err.msg, bad[i].want) != err.msg)
            fail_msg("library case %zu: rc %d\n  msg:  %s\n  want: %s", i, rc, err.msg, bad[i].want);
    }
    free(lib);
    free(s);
}

/* The enums' spellings read back. */
static void test_spellings(void **state) {
    (void)state;
    assert_string_equal(rk_enum_name(&rk_elem_enum, RK_EL_E2M1), "e2m1");
    assert_string_equal(rk_enum_name(&rk_scale_type_enum, RK_ST_UE8M0), "ue8m0");
    assert_string_equal(rk_enum_name(&rk_scale_rule_enum, RK_SR_POW2_UP), "pow2_up");
    assert_string_equal(rk_enum_token(&rk_scale_rule_enum, RK_SR_POW2_UP), "pow2");
    assert_string_equal(rk_enum_name(&rk_scale_at_enum, RK_SA_PAGE_TAIL), "page_tail");
    assert_string_equal(rk_enum_name(&rk_outer_enum, RK_OUT_TOKEN), "token");
    assert_string_equal(rk_enum_name(&rk_read_scale_enum, RK_RS_POW2_DOWN), "pow2_down");
    assert_int_equal(rk_elem_bits(RK_EL_BF16), 16);
    assert_int_equal(rk_elem_bits(RK_EL_E2M1), 4);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_library),     cmocka_unit_test(test_catalog),     cmocka_unit_test(test_check_rules),
        cmocka_unit_test(test_spec_names),  cmocka_unit_test(test_spec_inline), cmocka_unit_test(test_spec_like),
        cmocka_unit_test(test_spec_errors), cmocka_unit_test(test_own_library), cmocka_unit_test(test_spellings),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
