/* Tests for the CPU reference (gen/ref.c): scalar conversions against independently derived tables,
 * and the op against hand-computed vectors. */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "check.h"
#include "rk.h"

/* ---- small helpers ----------------------------------------------------------------------------- */

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bitsf(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* bf16 bits of a value the test knows to be exactly representable. */
static uint16_t bfx(float f) {
    uint32_t u = fbits(f);
    assert_int_equal(u & 0xffffu, 0);
    return (uint16_t)(u >> 16);
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t rng32(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

#define SENT16 0xdeadu
#define SENT8 0xa5u

static void fill16(uint16_t *p, size_t n, uint16_t v) {
    for (size_t i = 0; i < n; i++) p[i] = v;
}

static void fill8(uint8_t *p, size_t n, uint8_t v) { memset(p, v, n); }

static void put_f(uint16_t *dst, const float *x, int n) {
    for (int i = 0; i < n; i++) dst[i] = bfx(x[i]);
}

static void put_h(uint16_t *dst, const uint16_t *x, int n) { memcpy(dst, x, (size_t)n * sizeof *dst); }

static void check16(const uint16_t *got, const uint16_t *want, size_t n, const char *what) {
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i])
            fail_msg("%s[%zu]: got 0x%04x, want 0x%04x", what, i, (unsigned)got[i], (unsigned)want[i]);
}

static void check8(const uint8_t *got, const uint8_t *want, size_t n, const char *what) {
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i])
            fail_msg("%s[%zu]: got 0x%02x, want 0x%02x", what, i, (unsigned)got[i], (unsigned)want[i]);
}

/* ---- a variant built by hand: L = R = 8 ------------------------------------------------------------ */

typedef struct setup {
    rk_spec spec;
    rk_arch arch;
    rk_desc v;
} setup;

static void setup_init(setup *s, rk_rope rope, rk_cos_sin cs) {
    memset(s, 0, sizeof *s);
    strcpy(s->spec.name, "test");
    s->spec.kv_lora_rank = 8;
    s->spec.rope_dim = 8;
    s->spec.rope = rope;
    s->spec.cos_sin = cs;
    s->spec.fp8.scale = RK_SCALE_NONE;
    s->spec.fp8.sat_ocp = 448.0f;
    s->spec.fp8.sat_fnuz = 240.0f;
    s->spec.negative_slot = RK_NEG_SKIP_KV;
    strcpy(s->arch.name, "host");
    s->arch.vendor = RK_VENDOR_HOST;
    s->arch.wave = 32;
    s->arch.fp8 = RK_FP8_OCP;
    s->arch.vec_bytes = 16;
    s->arch.block = 256;
    s->arch.compiler = RK_CC_HOST;
    s->v.kv = ROPEKV_KV_BF16;
    s->v.q = ROPEKV_Q_ABSORBED;
    s->v.pos = ROPEKV_INDEX_INT64;
    s->v.slot = ROPEKV_INDEX_INT64;
}

/* The reference run on the description of the setup's spec, row and choices (set them first). */
static void ref_run(setup *s, const rk_args *a) {
    rk_err err = {0};
    if (rk_desc_make(&s->spec, &s->arch, &(rk_choice[]){rk_desc_choice(&s->v)}[0], &s->v, &err) != ROPEKV_OK)
        fail_msg("rk_desc_make: %s", err.msg);
    rk_args b = *a;
    if (b.kv_tokens == 0) b.kv_tokens = b.tokens; /* most tests give one token count */
    rk_ref_run(&s->v, &b);
}

/* Padding: query rows for tokens [0, tokens), KV rows for [0, kv_tokens), slots below min_slot never
 * written; with skip_all only a negative slot skips a token's query rows (a token past kv_tokens has
 * no slot: its rows are written). Rope none, zero_copy: the rows are the inputs. */
static void padding_case(int64_t T, int64_t K, int64_t min_slot, const int64_t *slots, const int *q_written,
                         const int *kv_row_of_token) {
    enum { H = 2, L = 8, R = 8, W = 16, ROWS = 4, MAXT = 4 };
    setup s;
    setup_init(&s, RK_ROPE_NONE, RK_CS_F32_CAT);
    s.spec.negative_slot = RK_NEG_SKIP_ALL;
    s.v.q = ROPEKV_Q_ZERO_COPY;
    rk_err err = {0};
    assert_int_equal(rk_desc_make(&s.spec, &s.arch, &(rk_choice[]){rk_desc_choice(&s.v)}[0], &s.v, &err), ROPEKV_OK);
    uint16_t q_pe[MAXT * H * R], q_out[MAXT * H * W], k[MAXT * W], kv[ROWS * W];
    int64_t pos[MAXT] = {0, 1, 2, 3};
    float cs[4 * R] = {0};
    for (int i = 0; i < MAXT * H * R; i++) q_pe[i] = (uint16_t)(0x3c00 + i);
    for (int i = 0; i < MAXT * W; i++) k[i] = (uint16_t)(0x4400 + i);
    fill16(q_out, MAXT * H * W, SENT16);
    fill16(kv, ROWS * W, SENT16);
    rk_args a = {.q_pe = q_pe,
                 .q_out = q_out,
                 .k_nope = k,
                 .k_pe = k + L,
                 .kv_cache = kv,
                 .positions = pos,
                 .slots = slots,
                 .cos_sin = cs,
                 .tokens = T,
                 .kv_tokens = K,
                 .min_slot = min_slot,
                 .heads = H,
                 .max_pos = 4,
                 .q_pe_st = H * R,
                 .q_pe_sh = R,
                 .q_out_st = H * W,
                 .q_out_sh = W,
                 .k_nope_st = W,
                 .k_pe_st = W,
                 .kv_st = W,
                 .kv_rows = ROWS};
    rk_ref_run(&s.v, &a);
    uint16_t want_q[MAXT * H * W], want_kv[ROWS * W];
    fill16(want_q, MAXT * H * W, SENT16);
    fill16(want_kv, ROWS * W, SENT16);
    for (int t = 0; t < MAXT; t++) {
        if (q_written[t])
            for (int h = 0; h < H; h++) put_h(want_q + (t * H + h) * W + L, q_pe + (t * H + h) * R, R);
        if (kv_row_of_token[t] >= 0) put_h(want_kv + kv_row_of_token[t] * W, k + t * W, W);
    }
    check16(q_out, want_q, MAXT * H * W, "q_out");
    check16(kv, want_kv, ROWS * W, "kv_cache");
}

static void test_op_padding(void **state) {
    (void)state;
    /* 3 query rows, 2 KV rows, slot 0 reserved: token 1's row (slot 0) stays; token 2 has no slot */
    const int64_t slots_a[] = {1, 0};
    padding_case(3, 2, 1, slots_a, (const int[]){1, 1, 1, 0}, (const int[]){1, -1, -1, -1});
    /* 1 query row, 3 KV rows: a negative slot skips its KV row; tokens 1 and 2 have no query rows */
    const int64_t slots_b[] = {2, -1, 0};
    padding_case(1, 3, 0, slots_b, (const int[]){1, 0, 0, 0}, (const int[]){2, -1, 0, -1});
    /* no KV rows at all: every query row is written, the slots are never read */
    padding_case(3, 0, 0, NULL, (const int[]){1, 1, 1, 0}, (const int[]){-1, -1, -1, -1});
    /* a negative slot with skip_all: no query rows for that token; slots 0 and 1 reserved */
    const int64_t slots_d[] = {-1, 1, 3, 2};
    padding_case(4, 4, 2, slots_d, (const int[]){0, 1, 1, 1}, (const int[]){-1, -1, 3, 2});
}

/* ---- bf16 -------------------------------------------------------------------------------------- */

static void test_bf16_to_f32_exact(void **state) {
    (void)state;
    for (uint32_t b = 0; b < 0x10000u; b++) assert_int_equal(fbits(rk_bf16_to_f32((uint16_t)b)), b << 16);
    assert_true(rk_bf16_to_f32(0x3f80) == 1.0f);
    assert_true(rk_bf16_to_f32(0xc0a0) == -5.0f);
}

static void test_f32_to_bf16_rne(void **state) {
    (void)state;
    static const struct {
        uint32_t f;
        uint16_t b;
    } cases[] = {
        {0x3f800000u, 0x3f80},                        /* 1.0 exact */
        {0x3f808000u, 0x3f80},                        /* tie, 0x3f80 even: down */
        {0x3f818000u, 0x3f82},                        /* tie, 0x3f81 odd: up */
        {0x3f808001u, 0x3f81},                        /* just above the tie */
        {0x3f817fffu, 0x3f81},                        /* just below the tie */
        {0xbf808000u, 0xbf80},                        /* negative tie: magnitude to even */
        {0xbf818000u, 0xbf82}, {0x7fc00000u, 0x7fff}, /* quiet NaN */
        {0xffc00000u, 0x7fff},                        /* negative NaN: sign dropped */
        {0x7f800001u, 0x7fff},                        /* signalling NaN */
        {0xff812345u, 0x7fff},                        /* NaN with payload */
        {0x7fff0000u, 0x7fff}, {0x7f800000u, 0x7f80}, /* +inf */
        {0xff800000u, 0xff80},                        /* -inf */
        {0x7f7fffffu, 0x7f80},                        /* FLT_MAX rounds up to inf */
        {0x7f7f8000u, 0x7f80},                        /* tie at the top, 0x7f7f odd: inf */
        {0x7f7f7fffu, 0x7f7f},                        /* stays the largest finite */
        {0xff7fffffu, 0xff80},                        /* -FLT_MAX -> -inf */
        {0x00010000u, 0x0001},                        /* f32 subnormal kept */
        {0x00008000u, 0x0000},                        /* subnormal tie to even zero */
        {0x00018000u, 0x0002},                        /* subnormal tie up */
        {0x00000001u, 0x0000},                        /* smallest subnormal rounds to zero */
        {0x80008001u, 0x8001},                        /* negative subnormal above the tie */
        {0x007f8000u, 0x0080},                        /* largest subnormal region carries into the smallest normal */
        {0x80000000u, 0x8000},                        /* -0 */
        {0x00000000u, 0x0000},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint16_t got = rk_f32_to_bf16(bitsf(cases[i].f));
        if (got != cases[i].b)
            fail_msg("bf16(0x%08x): got 0x%04x, want 0x%04x", (unsigned)cases[i].f, (unsigned)got,
                     (unsigned)cases[i].b);
    }
    /* Every non-NaN bf16 survives the round trip. */
    for (uint32_t b = 0; b < 0x10000u; b++) {
        if ((b & 0x7fffu) > 0x7f80u) continue;
        assert_int_equal(rk_f32_to_bf16(rk_bf16_to_f32((uint16_t)b)), b);
    }
}

/* ---- fp8: an independent decode table and a nearest-value search -------------------------------- */

typedef struct fp8_table {
    int fnuz;
    int max_code; /* largest finite magnitude code */
    int nan[256];
    double v[256]; /* decoded value (unused for NaN codes) */
} fp8_table;

/* value = (-1)^s * 2^(e - bias) * (1 + m/8) for e > 0, (-1)^s * 2^(1 - bias) * (m/8) for e = 0. */
static void fp8_table_build(fp8_table *t, int fnuz) {
    const int bias = fnuz ? 8 : 7;
    t->fnuz = fnuz;
    t->max_code = fnuz ? 0x7f : 0x7e;
    for (int c = 0; c < 256; c++) {
        int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
        t->nan[c] = fnuz ? (c == 0x80) : (e == 15 && m == 7);
        double mag = e == 0 ? (m / 8.0) * pow(2.0, 1 - bias) : (1.0 + m / 8.0) * pow(2.0, e - bias);
        t->v[c] = s ? -mag : mag;
    }
}

/* Encoding by search: the nearest finite magnitude (ties to the even code, i.e. even mantissa),
 * saturation above the max, then the sign and NaN rules of the format. */
static uint8_t fp8_oracle(const fp8_table *t, float f) {
    if (isnan(f)) return t->fnuz ? 0x80 : 0x7f;
    double a = fabs((double)f);
    int best = 0;
    if (a > t->v[t->max_code]) {
        best = t->max_code;
    } else {
        double bestd = a;
        for (int c = 1; c <= t->max_code; c++) {
            double d = fabs(a - t->v[c]);
            if (d < bestd || (d == bestd && (c & 1) == 0)) {
                best = c;
                bestd = d;
            }
        }
    }
    if (signbit(f)) {
        if (t->fnuz) return best == 0 ? 0x00 : (uint8_t)(best | 0x80);
        return (uint8_t)(best | 0x80);
    }
    return (uint8_t)best;
}

static void check_decode(rk_fp8_fmt fmt, int fnuz) {
    fp8_table t;
    fp8_table_build(&t, fnuz);
    int nans = 0;
    for (int c = 0; c < 256; c++) {
        float got = rk_fp8_to_f32((uint8_t)c, fmt);
        if (t.nan[c]) {
            nans++;
            if (!isnan(got)) fail_msg("code 0x%02x should decode to NaN, got %a", c, (double)got);
            continue;
        }
        if ((double)got != t.v[c] || (signbit(got) != 0) != ((c & 0x80) != 0))
            fail_msg("code 0x%02x: got %a, want %a", c, (double)got, t.v[c]);
    }
    assert_int_equal(nans, fnuz ? 1 : 2);
}

static void test_fp8_decode_ocp(void **state) {
    (void)state;
    check_decode(RK_FP8_OCP, 0);
    assert_true(rk_fp8_to_f32(0x7e, RK_FP8_OCP) == 448.0f);
    assert_true(rk_fp8_to_f32(0x01, RK_FP8_OCP) == 0x1p-9f);
    assert_true(rk_fp8_to_f32(0x38, RK_FP8_OCP) == 1.0f);
    assert_true(signbit(rk_fp8_to_f32(0x80, RK_FP8_OCP)) && rk_fp8_to_f32(0x80, RK_FP8_OCP) == 0.0f);
}

static void test_fp8_decode_fnuz(void **state) {
    (void)state;
    check_decode(RK_FP8_FNUZ, 1);
    assert_true(rk_fp8_to_f32(0x7f, RK_FP8_FNUZ) == 240.0f);
    assert_true(rk_fp8_to_f32(0xff, RK_FP8_FNUZ) == -240.0f);
    assert_true(rk_fp8_to_f32(0x01, RK_FP8_FNUZ) == 0x1p-10f);
    assert_true(rk_fp8_to_f32(0x40, RK_FP8_FNUZ) == 1.0f);
    assert_true(isnan(rk_fp8_to_f32(0x80, RK_FP8_FNUZ)));
}

static void check_encode_one(const fp8_table *t, rk_fp8_fmt fmt, float f) {
    uint8_t want = fp8_oracle(t, f), got = rk_f32_to_fp8(f, fmt);
    if (got != want)
        fail_msg("%s fp8(%a = 0x%08x): got 0x%02x, want 0x%02x", t->fnuz ? "fnuz" : "ocp", (double)f,
                 (unsigned)fbits(f), (unsigned)got, (unsigned)want);
}

static void check_encode_all(rk_fp8_fmt fmt, int fnuz) {
    fp8_table t;
    fp8_table_build(&t, fnuz);
    /* Every bf16 value (all classes: zeros, subnormals, normals, inf, NaN). */
    for (uint32_t b = 0; b < 0x10000u; b++) check_encode_one(&t, fmt, bitsf(b << 16));
    /* Midpoints between neighbouring codes, and one f32 ulp either side, both signs. */
    for (int c = 0; c < t.max_code + 1; c++) {
        double hi = c < t.max_code ? t.v[c + 1] : 2.0 * t.v[c]; /* past the max: beyond saturation */
        float mid = (float)((t.v[c] + hi) / 2.0);
        float pts[] = {(float)t.v[c],
                       mid,
                       nextafterf(mid, 0.0f),
                       nextafterf(mid, INFINITY),
                       nextafterf((float)t.v[c], 0.0f),
                       nextafterf((float)t.v[c], INFINITY)};
        for (size_t i = 0; i < sizeof pts / sizeof pts[0]; i++) {
            check_encode_one(&t, fmt, pts[i]);
            check_encode_one(&t, fmt, -pts[i]);
        }
    }
    /* Random bit patterns, and random values spread over the format's range. */
    for (int i = 0; i < 100000; i++) check_encode_one(&t, fmt, bitsf(rng32()));
    for (int i = 0; i < 100000; i++) {
        uint32_t r = rng32();
        int e = (int)(r % 26) - 15; /* 2^-15 .. 2^10 */
        float f = ldexpf(1.0f + (float)(rng32() & 0x7fffffu) * 0x1p-23f, e);
        check_encode_one(&t, fmt, (r & 0x80000000u) ? -f : f);
    }
}

static void test_fp8_encode_bruteforce_ocp(void **state) {
    (void)state;
    check_encode_all(RK_FP8_OCP, 0);
}

static void test_fp8_encode_bruteforce_fnuz(void **state) {
    (void)state;
    check_encode_all(RK_FP8_FNUZ, 1);
}

typedef struct enc_case {
    float f;
    uint8_t code;
} enc_case;

static void check_cases(rk_fp8_fmt fmt, const enc_case *c, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint8_t got = rk_f32_to_fp8(c[i].f, fmt);
        if (got != c[i].code)
            fail_msg("%s fp8(%a): got 0x%02x, want 0x%02x", fmt == RK_FP8_FNUZ ? "fnuz" : "ocp", (double)c[i].f,
                     (unsigned)got, (unsigned)c[i].code);
    }
}

static void test_fp8_encode_boundaries_ocp(void **state) {
    (void)state;
    const enc_case c[] = {
        {448.0f, 0x7e},
        {-448.0f, 0xfe},
        {464.0f, 0x7e}, /* midpoint to 480: saturates */
        {480.0f, 0x7e},
        {1e30f, 0x7e},
        {INFINITY, 0x7e},
        {-INFINITY, 0xfe},
        {432.0f, 0x7e}, /* tie between 416 (m5) and 448 (m6): even */
        {424.0f, 0x7d},
        {416.0f, 0x7d},
        {NAN, 0x7f},
        {-NAN, 0x7f},
        {1.0f, 0x38},
        {1.0625f, 0x38},  /* tie to even mantissa 0 */
        {1.1875f, 0x3a},  /* tie between m1 and m2: m2 */
        {0x1p-6f, 0x08},  /* smallest normal */
        {0x1p-9f, 0x01},  /* smallest subnormal */
        {0x1p-10f, 0x00}, /* half of it: tie to zero */
        {0x1.000002p-10f, 0x01},
        {0x1.8p-9f, 0x02}, /* 1.5 quanta: tie to 2 */
        {0x1.4p-8f, 0x02}, /* 2.5 quanta: tie to 2 */
        {0x1.ep-7f, 0x08}, /* 7.5 quanta: tie between 7 and 8 (smallest normal) */
        {-0x1p-10f, 0x80},
        {-0x1p-20f, 0x80},
        {-0x1p-149f, 0x80},
        {-0.0f, 0x80},
        {0.0f, 0x00},
        {0x1p-149f, 0x00},
    };
    check_cases(RK_FP8_OCP, c, sizeof c / sizeof c[0]);
}

static void test_fp8_encode_boundaries_fnuz(void **state) {
    (void)state;
    const enc_case c[] = {
        {240.0f, 0x7f},     {-240.0f, 0xff},   {248.0f, 0x7f},    {256.0f, 0x7f}, {1e30f, 0x7f},
        {INFINITY, 0x7f},   {-INFINITY, 0xff}, {232.0f, 0x7e}, /* tie between 224 (m6) and 240 (m7): even */
        {236.0f, 0x7f},     {224.0f, 0x7e},    {NAN, 0x80},       {-NAN, 0x80},   {1.0f, 0x40},
        {0x1p-7f, 0x08},                                          /* smallest normal */
        {0x1p-10f, 0x01},                                         /* smallest subnormal */
        {0x1p-11f, 0x00},                                         /* half of it: tie to zero */
        {0x1.8p-10f, 0x02}, {-0x1p-10f, 0x81}, {-0x1p-11f, 0x00}, /* -tiny: no -0 in FNUZ */
        {-0x1p-20f, 0x00},  {-0.0f, 0x00},     {0.0f, 0x00},
    };
    check_cases(RK_FP8_FNUZ, c, sizeof c / sizeof c[0]);
}

/* ---- the op: shared hand-computed vectors -----------------------------------------------------------
 * cos/sin rows (pair i = 0..3):
 *   pos 0: c = 1, s = 0 (identity)
 *   pos 1: c = {0, 0.5, -1, 2},   s = {1, 0.5, 0, 0.25}
 *   pos 2: c = s = 9 (never selected: a wrong row shows up as garbage)
 *   pos 3: c = {0.5, 0, 1, -0.5}, s = {-0.5, 2, 1, 0.5}
 * Every product and sum below is exact, so each expected bf16 is the exact result. */
static const float COS_ROWS[4][4] = {{1, 1, 1, 1}, {0, 0.5f, -1, 2}, {9, 9, 9, 9}, {0.5f, 0, 1, -0.5f}};
static const float SIN_ROWS[4][4] = {{0, 0, 0, 0}, {1, 0.5f, 0, 0.25f}, {9, 9, 9, 9}, {-0.5f, 2, 1, 0.5f}};

static const float XA[8] = {1, 2, 3, 4, 5, 6, 7, 8};
static const float XB[8] = {-1, 0.5f, 2, -2, 0.25f, 4, -3, 1};
static const float XC[8] = {4, 2, 1, -1, 3, 3, 2, 4};
static const float XD[8] = {0.5f, 0.5f, -2, 8, 1, -1, -4, 0.5f};
static const float XE[8] = {1.5f, -2.5f, 3, 0.125f, -1, 7, 2, 5};
static const float XF[8] = {6, 1, -1, 2, 3, 4, 0.75f, -0.5f};
static const float XG[8] = {0.5f, -1, 2, 0.25f, 3, -0.5f, 1, 4};
static const float XH[8] = {-1, -2, -3, -4, -5, -6, -7, -8};
static const float KA[8] = {2, 2, -1, 3, 0.5f, 0.5f, 1, -4};
static const float KB[8] = {1, 1, 0.5f, 0.25f, -2, 1, 4, 4};
static const float KC[8] = {2, 4, 1, 1, 1, 2, 3, 0.5f};
static const float KD[8] = {1, -1, 2, -2, 3, -3, 4, -4};

/* GPT-J at pos 1. XA: pairs (1,2) (3,4) (5,6) (7,8) -> (-2,1) (-0.5,3.5) (-5,-6) (12,17.75). */
static const uint16_t XA_GPTJ_P1[8] = {0xc000, 0x3f80, 0xbf00, 0x4060, 0xc0a0, 0xc0c0, 0x4140, 0x418e};
/* XB -> (-0.5,-1) (2,+0) (-0.25,-4) (-6.25,1.25) */
static const uint16_t XB_GPTJ_P1[8] = {0xbf00, 0xbf80, 0x4000, 0x0000, 0xbe80, 0xc080, 0xc0c8, 0x3fa0};
/* KA -> (-2,2) (-2,1) (-0.5,-0.5) (3,-7.75) */
static const uint16_t KA_GPTJ_P1[8] = {0xc000, 0x4000, 0xc000, 0x3f80, 0xbf00, 0xbf00, 0x4040, 0xc0f8};
/* GPT-J at pos 3. XC -> (3,-1) (2,2) (+0,6) (-3,-1) */
static const uint16_t XC_GPTJ_P3[8] = {0x4040, 0xbf80, 0x4000, 0x4000, 0x0000, 0x40c0, 0xc040, 0xbf80};
/* XD -> (0.5,+0) (-16,-4) (2,+0) (1.75,-2.25) */
static const uint16_t XD_GPTJ_P3[8] = {0x3f00, 0x0000, 0xc180, 0xc080, 0x4000, 0x0000, 0x3fe0, 0xc010};
/* KB -> (1,+0) (-0.5,1) (-3,-1) (-4,+0) */
static const uint16_t KB_GPTJ_P3[8] = {0x3f80, 0x0000, 0xbf00, 0x3f80, 0xc040, 0xbf80, 0xc080, 0x0000};
/* Identity (pos 0) */
static const uint16_t XE_BITS[8] = {0x3fc0, 0xc020, 0x4040, 0x3e00, 0xbf80, 0x40e0, 0x4000, 0x40a0};
static const uint16_t XF_BITS[8] = {0x40c0, 0x3f80, 0xbf80, 0x4000, 0x4040, 0x4080, 0x3f40, 0xbf00};
static const uint16_t XA_BITS[8] = {0x3f80, 0x4000, 0x4040, 0x4080, 0x40a0, 0x40c0, 0x40e0, 0x4100};
static const uint16_t XH_BITS[8] = {0xbf80, 0xc000, 0xc040, 0xc080, 0xc0a0, 0xc0c0, 0xc0e0, 0xc100};
static const uint16_t KD_BITS[8] = {0x3f80, 0xbf80, 0x4000, 0xc000, 0x4040, 0xc040, 0x4080, 0xc080};
/* NeoX at pos 1: pairs (x[i], x[i+4]).
 * XA: (1,5) (2,6) (3,7) (4,8) -> y[i] = -5 -2 -3 6, y[i+4] = 1 4 -7 17 */
static const uint16_t XA_NEOX_P1[8] = {0xc0a0, 0xc000, 0xc040, 0x40c0, 0x3f80, 0x4080, 0xc0e0, 0x4188};
/* XG: (0.5,3) (-1,-0.5) (2,1) (0.25,4) -> -3 -0.25 -2 -0.5 | 0.5 -0.75 -1 8.0625 */
static const uint16_t XG_NEOX_P1[8] = {0xc040, 0xbe80, 0xc000, 0xbf00, 0x3f00, 0xbf40, 0xbf80, 0x4101};
/* KC: (2,1) (4,2) (1,3) (1,0.5) -> -1 1 -1 1.875 | 2 3 -3 1.25 */
static const uint16_t KC_NEOX_P1[8] = {0xbf80, 0x3f80, 0xbf80, 0x3ff0, 0x4000, 0x4040, 0xc040, 0x3fa0};

static void cat_table(float *t) { /* [4][8]: cos | sin */
    for (int p = 0; p < 4; p++)
        for (int i = 0; i < 4; i++) {
            t[p * 8 + i] = COS_ROWS[p][i];
            t[p * 8 + 4 + i] = SIN_ROWS[p][i];
        }
}

static void split_tables(float *c, float *s) { /* [4][4] each */
    for (int p = 0; p < 4; p++)
        for (int i = 0; i < 4; i++) {
            c[p * 4 + i] = COS_ROWS[p][i];
            s[p * 4 + i] = SIN_ROWS[p][i];
        }
}

static uint16_t qn_pattern(int t, int h, int l) { return (uint16_t)(0x4400 + t * 0x100 + h * 0x20 + l); }
static uint16_t kn_pattern(int t, int l) { return (uint16_t)(0x4600 + t * 0x10 + l); }

/* GPT-J, absorbed q, one f32 cos|sin table, int64 indices, skip_kv, bf16 cache, every tensor a
 * strided view (q_pe head-major). Token 1 has position 2^40 (clamped to 3), token 2 position -5
 * (clamped to 0) and slot -1 (q still written), token 3 slot 4 = kv_rows (q written, no KV). */
static void test_op_gptj_absorbed(void **state) {
    (void)state;
    setup s;
    setup_init(&s, RK_ROPE_GPTJ, RK_CS_F32_CAT);
    enum { T = 4, H = 2, L = 8, R = 8 };
    const int64_t qn_st = 23, qn_sh = 10, qp_st = 10, qp_sh = 40, qo_st = 39, qo_sh = 19;
    const int64_t kn_st = 13, kp_st = 15, kv_st = 20;
    uint16_t q_nope[90], q_pe[80], q_out[160], k_nope[50], k_pe[56], kv[80];
    uint16_t q_nope0[90], q_pe0[80], k_nope0[50], k_pe0[56], want_q[160], want_kv[80];
    float table[32];
    cat_table(table);
    int64_t pos[T] = {1, (int64_t)1 << 40, -5, 0};
    int64_t slot[T] = {2, 0, -1, 4};

    fill16(q_nope, 90, SENT16);
    fill16(q_pe, 80, SENT16);
    fill16(q_out, 160, SENT16);
    fill16(k_nope, 50, SENT16);
    fill16(k_pe, 56, SENT16);
    fill16(kv, 80, SENT16);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++)
            for (int l = 0; l < L; l++) q_nope[t * qn_st + h * qn_sh + l] = qn_pattern(t, h, l);
    q_nope[1 * qn_st + 0 * qn_sh + 3] = 0x7fc1; /* NaN payloads are copied, not canonicalized */
    q_nope[0 * qn_st + 1 * qn_sh + 0] = 0xff81;
    const float *qpe_in[T][H] = {{XA, XB}, {XC, XD}, {XE, XF}, {XE, XF}};
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++) put_f(q_pe + t * qp_st + h * qp_sh, qpe_in[t][h], R);
    for (int t = 0; t < T; t++)
        for (int l = 0; l < L; l++) k_nope[t * kn_st + l] = kn_pattern(t, l);
    k_nope[0 * kn_st + 5] = 0x7fa0;
    const float *kpe_in[T] = {KA, KB, KA, KB};
    for (int t = 0; t < T; t++) put_f(k_pe + t * kp_st, kpe_in[t], R);
    memcpy(q_nope0, q_nope, sizeof q_nope);
    memcpy(q_pe0, q_pe, sizeof q_pe);
    memcpy(k_nope0, k_nope, sizeof k_nope);
    memcpy(k_pe0, k_pe, sizeof k_pe);

    rk_args a = {
        .q_nope = q_nope,
        .q_pe = q_pe,
        .q_out = q_out,
        .k_nope = k_nope,
        .k_pe = k_pe,
        .kv_cache = kv,
        .positions = pos,
        .slots = slot,
        .cos_sin = table,
        .sin = NULL,
        .k_scale = NULL,
        .tokens = T,
        .heads = H,
        .max_pos = 4,
        .q_nope_st = qn_st,
        .q_nope_sh = qn_sh,
        .q_pe_st = qp_st,
        .q_pe_sh = qp_sh,
        .q_out_st = qo_st,
        .q_out_sh = qo_sh,
        .k_nope_st = kn_st,
        .k_pe_st = kp_st,
        .kv_st = kv_st,
        .kv_rows = 4,
    };
    ref_run(&s, &a);

    fill16(want_q, 160, SENT16);
    const uint16_t *tail[T][H] = {{XA_GPTJ_P1, XB_GPTJ_P1},
                                  {XC_GPTJ_P3, XD_GPTJ_P3},
                                  {XE_BITS, XF_BITS},
                                  {XE_BITS, XF_BITS}};
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
            uint16_t *row = want_q + t * qo_st + h * qo_sh;
            put_h(row, q_nope0 + t * qn_st + h * qn_sh, L);
            put_h(row + L, tail[t][h], R);
        }
    check16(q_out, want_q, 160, "q_out");

    fill16(want_kv, 80, SENT16);
    put_h(want_kv + 2 * kv_st, k_nope0 + 0 * kn_st, L); /* token 0 -> slot 2 */
    put_h(want_kv + 2 * kv_st + L, KA_GPTJ_P1, R);
    put_h(want_kv + 0 * kv_st, k_nope0 + 1 * kn_st, L); /* token 1 -> slot 0 */
    put_h(want_kv + 0 * kv_st + L, KB_GPTJ_P3, R);
    check16(kv, want_kv, 80, "kv");
    assert_int_equal(want_kv[2 * kv_st + 5], 0x7fa0);

    check16(q_nope, q_nope0, 90, "q_nope (input)");
    check16(q_pe, q_pe0, 80, "q_pe (input)");
    check16(k_nope, k_nope0, 50, "k_nope (input)");
    check16(k_pe, k_pe0, 56, "k_pe (input)");
}

/* NeoX, zero-copy q, split f32 tables, int32 indices, skip_all: token 0 (slot -1) writes nothing at
 * all; q_out[..., :L] is never touched and q_nope is not read (NULL). */
static void test_op_neox_zero_copy_skip_all(void **state) {
    (void)state;
    setup s;
    setup_init(&s, RK_ROPE_NEOX, RK_CS_F32_SPLIT);
    s.spec.negative_slot = RK_NEG_SKIP_ALL;
    s.v.q = ROPEKV_Q_ZERO_COPY;
    s.v.pos = ROPEKV_INDEX_INT32;
    s.v.slot = ROPEKV_INDEX_INT32;
    enum { T = 3, H = 2, L = 8, R = 8, W = 16 };
    uint16_t q_pe[T * H * R], q_out[T * H * W], k_nope[T * L], k_pe[T * R], kv[4 * W];
    uint16_t want_q[T * H * W], want_kv[4 * W];
    float cos_t[16], sin_t[16];
    split_tables(cos_t, sin_t);
    int32_t pos[T] = {3, -1, 1};
    int32_t slot[T] = {-1, 1, 3};

    const float *qpe_in[T][H] = {{XC, XD}, {XA, XH}, {XA, XG}};
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++) put_f(q_pe + (t * H + h) * R, qpe_in[t][h], R);
    for (int t = 0; t < T; t++)
        for (int l = 0; l < L; l++) k_nope[t * L + l] = kn_pattern(t, l);
    const float *kpe_in[T] = {KB, KD, KC};
    for (int t = 0; t < T; t++) put_f(k_pe + t * R, kpe_in[t], R);
    fill16(q_out, T * H * W, SENT16);
    fill16(kv, 4 * W, SENT16);

    rk_args a = {
        .q_nope = NULL,
        .q_pe = q_pe,
        .q_out = q_out,
        .k_nope = k_nope,
        .k_pe = k_pe,
        .kv_cache = kv,
        .positions = pos,
        .slots = slot,
        .cos_sin = cos_t,
        .sin = sin_t,
        .tokens = T,
        .heads = H,
        .max_pos = 4,
        .q_pe_st = H * R,
        .q_pe_sh = R,
        .q_out_st = H * W,
        .q_out_sh = W,
        .k_nope_st = L,
        .k_pe_st = R,
        .kv_st = W,
        .kv_rows = 4,
    };
    ref_run(&s, &a);

    fill16(want_q, T * H * W, SENT16);
    put_h(want_q + (1 * H + 0) * W + L, XA_BITS, R); /* token 1: pos -1 -> 0, identity */
    put_h(want_q + (1 * H + 1) * W + L, XH_BITS, R);
    put_h(want_q + (2 * H + 0) * W + L, XA_NEOX_P1, R);
    put_h(want_q + (2 * H + 1) * W + L, XG_NEOX_P1, R);
    check16(q_out, want_q, T * H * W, "q_out");

    fill16(want_kv, 4 * W, SENT16);
    for (int l = 0; l < L; l++) {
        want_kv[1 * W + l] = kn_pattern(1, l);
        want_kv[3 * W + l] = kn_pattern(2, l);
    }
    put_h(want_kv + 1 * W + L, KD_BITS, R);
    put_h(want_kv + 3 * W + L, KC_NEOX_P1, R);
    check16(kv, want_kv, 4 * W, "kv");
}

/* GPT-J in place on the q_pe slice of a [T, H, 12] query (4 nope + 8 rope), bf16 split tables,
 * int32 positions, int64 slots, skip_kv: token 0 (slot -1) still gets its q rotated. */
static void test_op_inplace_bf16_tables(void **state) {
    (void)state;
    setup s;
    setup_init(&s, RK_ROPE_GPTJ, RK_CS_BF16_SPLIT);
    s.v.q = ROPEKV_Q_INPLACE;
    s.v.pos = ROPEKV_INDEX_INT32;
    s.v.slot = ROPEKV_INDEX_INT64;
    enum { T = 2, H = 2, L = 8, R = 8, W = 16, D = 12 };
    uint16_t q[T * H * D], want_q[T * H * D], k_nope[T * L], k_pe[T * R], kv[2 * W], want_kv[2 * W];
    uint16_t cos_t[16], sin_t[16];
    for (int p = 0; p < 4; p++)
        for (int i = 0; i < 4; i++) {
            cos_t[p * 4 + i] = bfx(COS_ROWS[p][i]);
            sin_t[p * 4 + i] = bfx(SIN_ROWS[p][i]);
        }
    int32_t pos[T] = {3, 1};
    int64_t slot[T] = {-1, 0};

    const float *qpe_in[T][H] = {{XC, XD}, {XA, XB}};
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
            uint16_t *head = q + (t * H + h) * D;
            for (int j = 0; j < 4; j++) head[j] = qn_pattern(t, h, j);
            put_f(head + 4, qpe_in[t][h], R);
        }
    for (int t = 0; t < T; t++)
        for (int l = 0; l < L; l++) k_nope[t * L + l] = kn_pattern(t, l);
    put_f(k_pe, KB, R);
    put_f(k_pe + R, KA, R);
    fill16(kv, 2 * W, SENT16);

    rk_args a = {
        .q_nope = NULL,
        .q_pe = q + 4,
        .q_out = NULL,
        .k_nope = k_nope,
        .k_pe = k_pe,
        .kv_cache = kv,
        .positions = pos,
        .slots = slot,
        .cos_sin = cos_t,
        .sin = sin_t,
        .tokens = T,
        .heads = H,
        .max_pos = 4,
        .q_pe_st = H * D,
        .q_pe_sh = D,
        .k_nope_st = L,
        .k_pe_st = R,
        .kv_st = W,
        .kv_rows = 1,
    };
    ref_run(&s, &a);

    const uint16_t *rot[T][H] = {{XC_GPTJ_P3, XD_GPTJ_P3}, {XA_GPTJ_P1, XB_GPTJ_P1}};
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
            uint16_t *head = want_q + (t * H + h) * D;
            for (int j = 0; j < 4; j++) head[j] = qn_pattern(t, h, j);
            put_h(head + 4, rot[t][h], R);
        }
    check16(q, want_q, T * H * D, "q (in place)");

    fill16(want_kv, 2 * W, SENT16);
    for (int l = 0; l < L; l++) want_kv[l] = kn_pattern(1, l);
    put_h(want_kv + L, KA_GPTJ_P1, R);
    check16(kv, want_kv, 2 * W, "kv");
}

/* No rope (tables never read), no q writes, bf16 cache with and without sanitize. */
static void test_op_rope_none_q_none_sanitize(void **state) {
    (void)state;
    enum { L = 8, R = 8, W = 16 };
    static const uint16_t nope[L] = {0x7fc1, 0xff80, 0x7f80, 0x0001, 0x8000, 0x3f80, 0xffc0, 0x7f7f};
    static const uint16_t pe[R] = {0x7f80, 0xff80, 0x7fa0, 0x4040, 0x8001, 0xc000, 0x0000, 0xff7f};
    /* sanitize: NaN -> 0, +-inf -> +-0x7f7f, everything else as it was */
    static const uint16_t want_san[W] = {0x0000, 0xff7f, 0x7f7f, 0x0001, 0x8000, 0x3f80, 0x0000, 0x7f7f,
                                         0x7f7f, 0xff7f, 0x0000, 0x4040, 0x8001, 0xc000, 0x0000, 0xff7f};
    /* no sanitize: the bits copied, the rope part's too (rope none rotates nothing): the NaN 0x7fa0 keeps its
     * payload, where a rotated value would round to 0x7fff */
    static const uint16_t want_raw[W] = {0x7fc1, 0xff80, 0x7f80, 0x0001, 0x8000, 0x3f80, 0xffc0, 0x7f7f,
                                         0x7f80, 0xff80, 0x7fa0, 0x4040, 0x8001, 0xc000, 0x0000, 0xff7f};
    for (int san = 0; san < 2; san++) {
        setup s;
        setup_init(&s, RK_ROPE_NONE, RK_CS_F32_CAT);
        s.spec.sanitize = san;
        s.v.q = ROPEKV_Q_NONE;
        uint16_t k_nope[L], k_pe[R], kv[W], q_pe[R], q_out[W], q_nope[L];
        put_h(k_nope, nope, L);
        put_h(k_pe, pe, R);
        put_f(q_pe, XA, R);
        fill16(q_nope, L, 0x1234);
        fill16(q_out, W, SENT16);
        fill16(kv, W, SENT16);
        int64_t pos = 7, slot = 0;
        rk_args a = {
            .q_nope = q_nope,
            .q_pe = q_pe,
            .q_out = q_out,
            .k_nope = k_nope,
            .k_pe = k_pe,
            .kv_cache = kv,
            .positions = &pos,
            .slots = &slot,
            .cos_sin = NULL,
            .sin = NULL,
            .tokens = 1,
            .heads = 1,
            .max_pos = 1,
            .q_nope_st = L,
            .q_nope_sh = L,
            .q_pe_st = R,
            .q_pe_sh = R,
            .q_out_st = W,
            .q_out_sh = W,
            .k_nope_st = L,
            .k_pe_st = R,
            .kv_st = W,
            .kv_rows = 1,
        };
        ref_run(&s, &a);
        check16(kv, san ? want_san : want_raw, W, san ? "kv (sanitize)" : "kv (raw)");
        uint16_t untouched[W];
        fill16(untouched, W, SENT16);
        check16(q_out, untouched, W, "q_out");
        check16(q_pe, XA_BITS, R, "q_pe");
    }
}

/* Rope none with R > 0 (Kimi-K3: rope slots never rotated): the query's rope part is q_pe's bits, a NaN's payload
 * and a -0 included (a rotation with identity tables would give 0x7fff and +-0 by the other value's sign); an fp8
 * query quantizes the unrotated values; neither the positions nor the cos/sin tables are read (NULL here). */
static void test_op_rope_none_copies_bits(void **state) {
    (void)state;
    enum { L = 8, R = 8, W = 16 };
    static const uint16_t nope[L] = {0x3f80, 0xc000, 0x7fc1, 0x0001, 0x8000, 0x4040, 0x3f00, 0x7f80};
    static const uint16_t pe[R] = {0x7fa0, 0x8000, 0xff81, 0x4000, 0x0001, 0x43e0, 0xc3e0, 0x3e80};
    /* absorbed, bf16: q_nope | q_pe, bits for bits */
    static const uint16_t want_q[W] = {0x3f80, 0xc000, 0x7fc1, 0x0001, 0x8000, 0x4040, 0x3f00, 0x7f80,
                                       0x7fa0, 0x8000, 0xff81, 0x4000, 0x0001, 0x43e0, 0xc3e0, 0x3e80};
    /* zero_copy, fp8 query, q_scale convention none, OCP bound 448: the rope part only, at byte L: NaN -> 0x7f,
     * -0 -> 0x80, 2.0 -> 0x40, the bf16 subnormal 2^-133 -> 0x00, 448 -> 0x7e, -448 -> 0xfe, 0.25 -> 0x28 */
    static const uint8_t want_q8[R] = {0x7f, 0x80, 0x7f, 0x40, 0x00, 0x7e, 0xfe, 0x28};
    for (int fp8 = 0; fp8 < 2; fp8++) {
        setup s;
        setup_init(&s, RK_ROPE_NONE, RK_CS_F32_CAT);
        s.spec.q_fp8 = (rk_fp8_policy){RK_SCALE_NONE, 448.0f, 240.0f, 1, ""}; /* rope_bf16: a bf16 value already */
        s.v.q = fp8 ? ROPEKV_Q_ZERO_COPY : ROPEKV_Q_ABSORBED;
        s.v.q_dtype = fp8 ? ROPEKV_Q_FP8_E4M3 : ROPEKV_Q_BF16;
        uint16_t q_nope[L], q_pe[R], k_nope[L], k_pe[R], kv[W + 4], q_out[W + 4];
        put_h(q_nope, nope, L);
        put_h(q_pe, pe, R);
        put_h(k_nope, nope, L);
        put_h(k_pe, pe, R);
        fill16(kv, W + 4, SENT16);
        fill16(q_out, W + 4, SENT16);
        int64_t slot = 0;
        rk_args a = {.q_nope = q_nope,
                     .q_pe = q_pe,
                     .q_out = q_out,
                     .k_nope = k_nope,
                     .k_pe = k_pe,
                     .kv_cache = kv,
                     .positions = NULL,
                     .slots = &slot,
                     .cos_sin = NULL,
                     .sin = NULL,
                     .tokens = 1,
                     .heads = 1,
                     .max_pos = 0,
                     .q_nope_st = L,
                     .q_nope_sh = L,
                     .q_pe_st = R,
                     .q_pe_sh = R,
                     .q_out_st = W,
                     .q_out_sh = W,
                     .k_nope_st = L,
                     .k_pe_st = R,
                     .kv_st = W,
                     .kv_rows = 1};
        ref_run(&s, &a);
        assert_true(s.v.pos == ROPEKV_INDEX_INT64 && s.v.cos_sin == RK_CS_F32_CAT); /* canonical: neither is read */
        check16(kv, want_q, W, "kv row"); /* the bf16 row as the absorbed query: the rope part's bits */
        for (int i = W; i < W + 4; i++) assert_int_equal(kv[i], SENT16);
        if (fp8) {
            uint8_t *q8 = (uint8_t *)q_out;
            /* zero_copy leaves bytes [0, L) (the BMM's) and everything past the row as they were */
            for (int i = 0; i < 2 * (W + 4); i++)
                if (i < L || i >= L + R) assert_int_equal(q8[i], (i & 1) ? SENT16 >> 8 : SENT16 & 0xff);
            check8(q8 + L, want_q8, R, "q_out fp8 rope part");
        } else {
            check16(q_out, want_q, W, "q_out");
            for (int i = W; i < W + 4; i++) assert_int_equal(q_out[i], SENT16);
        }
    }
}

/* R = 0 (GLM-5.3-Flash: no rope part): the row is the latent alone, an absorbed query row q_nope's; no k_pe, q_pe,
 * positions or tables are read (NULL here). Two tokens, two heads, rows of 8 at a stride of 12: the padding stays. */
static void test_op_r0_rows(void **state) {
    (void)state;
    enum { L = 8, H = 2, T = 2, ST = 12 };
    static const uint16_t nope[T][L] = {{0x3f80, 0xc000, 0x7fc1, 0x0001, 0x8000, 0x4040, 0x3f00, 0x7f80},
                                        {0x43e0, 0x43fa, 0xc3e0, 0x3e80, 0x0000, 0xffc0, 0x3fc0, 0x4000}};
    /* fp8 e4m3 OCP, scale none, bound 448: 1 -> 0x38, -2 -> 0xc0, NaN -> 0x7f, 2^-133 -> 0x00, -0 -> 0x80,
     * 3 -> 0x44, 0.5 -> 0x30, inf -> 0x7e (saturated); 448 -> 0x7e, 500 -> 0x7e (clamped), -448 -> 0xfe,
     * 0.25 -> 0x28, 0 -> 0x00, NaN -> 0x7f, 1.5 -> 0x3c, 2 -> 0x40 */
    static const uint8_t want8[T][L] = {{0x38, 0xc0, 0x7f, 0x00, 0x80, 0x44, 0x30, 0x7e},
                                        {0x7e, 0x7e, 0xfe, 0x28, 0x00, 0x7f, 0x3c, 0x40}};
    for (int kv8 = 0; kv8 < 2; kv8++) {
        setup s;
        setup_init(&s, RK_ROPE_NONE, RK_CS_F32_CAT);
        s.spec.rope_dim = 0;
        s.v.kv = kv8 ? ROPEKV_KV_FP8_E4M3 : ROPEKV_KV_BF16;
        uint16_t k_nope[T * L], q_nope[T * H * L], q_out[T * H * ST], kv[T * ST];
        for (int t = 0; t < T; t++) {
            put_h(k_nope + t * L, nope[t], L);
            for (int h = 0; h < H; h++) put_h(q_nope + (t * H + h) * L, nope[(t + h) % T], L);
        }
        fill16(q_out, T * H * ST, SENT16);
        fill16(kv, T * ST, SENT16);
        int64_t slots[T] = {1, 0};
        rk_args a = {.q_nope = q_nope,
                     .q_out = q_out,
                     .k_nope = k_nope,
                     .kv_cache = kv,
                     .slots = slots,
                     .tokens = T,
                     .heads = H,
                     .q_nope_st = H * L,
                     .q_nope_sh = L,
                     .q_out_st = H * ST,
                     .q_out_sh = ST,
                     .k_nope_st = L,
                     .kv_st = kv8 ? 2 * ST : ST,
                     .kv_rows = T};
        ref_run(&s, &a);
        assert_true(s.v.R == 0 && s.v.rec.n_seg == 1 && s.v.rec.split_at == 0);
        assert_int_equal(s.v.rec.row_bytes, kv8 ? L : 2 * L);
        for (int t = 0; t < T; t++)
            for (int h = 0; h < H; h++) {
                check16(q_out + (t * H + h) * ST, nope[(t + h) % T], L, "q_out (q_nope's bits)");
                for (int i = L; i < ST; i++) assert_int_equal(q_out[(t * H + h) * ST + i], SENT16);
            }
        for (int t = 0; t < T; t++) { /* token t in slot 1 - t */
            const int64_t at = (int64_t)(1 - t) * ST;
            if (kv8) {
                check8((const uint8_t *)(kv + at), want8[t], L, "kv row (fp8)");
                for (int i = L / 2; i < ST; i++) assert_int_equal(kv[at + i], SENT16);
            } else {
                check16(kv + at, nope[t], L, "kv row (bf16 bits)");
                for (int i = L; i < ST; i++) assert_int_equal(kv[at + i], SENT16);
            }
        }
    }
    /* what holds or writes only the rope part is refused by its rule */
    setup s;
    setup_init(&s, RK_ROPE_NONE, RK_CS_F32_CAT);
    s.spec.rope_dim = 0;
    rk_desc d;
    rk_err err = {0};
    rk_choice c = rk_desc_choice(&s.v);
    c.q = ROPEKV_Q_ZERO_COPY;
    assert_int_equal(rk_desc_make(&s.spec, &s.arch, &c, &d, &err), ROPEKV_ERR_UNSUPPORTED);
    assert_string_equal(err.msg, "test: R = 0: no rope part (q form zero_copy writes only the query's rope part)");
    c.q = ROPEKV_Q_ABSORBED;
    c.layout = ROPEKV_KV_SPLIT;
    assert_int_equal(rk_desc_make(&s.spec, &s.arch, &c, &d, &err), ROPEKV_ERR_UNSUPPORTED);
    assert_string_equal(err.msg, "test: R = 0: no rope part (layout split keeps it in a cache of its own)");
    /* its tensors: no k_pe, q_pe, positions or tables; q_out rows of L */
    c.layout = ROPEKV_KV_FLAT;
    assert_int_equal(rk_desc_make(&s.spec, &s.arch, &c, &d, &err), ROPEKV_OK);
    rk_tensor t[RK_TENSORS_MAX];
    const int n = rk_tensors(&d, t, RK_TENSORS_MAX);
    const char *names[RK_TENSORS_MAX + 1] = {0};
    for (int i = 0; i < n; i++) names[i] = t[i].name;
    assert_int_equal(n, 6);
    assert_string_equal(names[0], "q_nope");
    assert_string_equal(names[1], "q_out");
    assert_string_equal(names[2], "k_nope");
    assert_string_equal(names[3], "kv_cache");
    assert_string_equal(names[4], "slots");
    assert_string_equal(names[5], "write_mask");
    assert_int_equal(rk_sym_size(&d, t[1].dim[2]), L);
}

/* A tile-scaled R = 0 record (GLM_NEXT fp8's recipe at L = 16: one block of 16 e4m3 values, its float32 scale at
 * byte 16, 20 bytes): amax 896 -> s = 896 / 448 = 2 (0x40000000), each value x / 2. */
static void test_op_r0_tile_record(void **state) {
    (void)state;
    enum { L = 16, ROW = 20 };
    static const float x[L] = {896, 2, -4, 1, 0.5f, 0, -0.0f, 3, 1, 1, 1, 1, 1, 1, 1, 1};
    static const uint8_t want[ROW] = {0x7e, 0x38, 0xc0, 0x30, 0x28, 0x00, 0x80, 0x3c, 0x30, 0x30,
                                      0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x00, 0x00, 0x00, 0x40};
    setup s;
    setup_init(&s, RK_ROPE_NONE, RK_CS_F32_CAT);
    s.spec.kv_lora_rank = L;
    s.spec.rope_dim = 0;
    rk_record *r = &s.spec.records[0];
    strcpy(r->name, "next16");
    r->L = L;
    r->R = 0;
    r->row_bytes = ROW;
    r->n_seg = 1;
    r->seg[0] = (rk_segment){.from = 0,
                             .n = L,
                             .elem = RK_EL_E4M3,
                             .block = 16,
                             .scale = RK_ST_F32,
                             .scales_at = L,
                             .sat_ocp = 448.0f,
                             .sat_fnuz = 224.0f};
    s.spec.n_records = 1;
    s.v.record = 1;
    s.v.q = ROPEKV_Q_NONE;
    uint16_t k_nope[L];
    put_f(k_nope, x, L);
    uint8_t kv[32];
    fill8(kv, sizeof kv, SENT8);
    int64_t slot = 0;
    rk_args a = {
        .k_nope = k_nope, .kv_cache = kv, .slots = &slot, .tokens = 1, .k_nope_st = L, .kv_st = 32, .kv_rows = 1};
    ref_run(&s, &a);
    check8(kv, want, ROW, "kv row (tile record)");
    for (int i = ROW; i < 32; i++) assert_int_equal(kv[i], SENT8);
    /* and back: the read op gives the values (bf16 of v * 2) */
    s.v.op = ROPEKV_OP_READ;
    uint16_t out[L];
    fill16(out, L, SENT16);
    rk_args b = {.kv_cache = kv, .slots = &slot, .tokens = 1, .kv_st = 32, .kv_rows = 1, .out = out, .out_st = L};
    ref_run(&s, &b);
    for (int i = 0; i < L; i++) assert_int_equal(out[i], bfx(x[i]));
}

/* The rope is one rounded product then a fused multiply-add. With x0 = 1.03125 = 1 + 2^-5,
 * c = 1 + 993*2^-23, x1 = s = 1:
 *   x0*c = 1 + 2^-5 + 2^-13 + 2^-28 exactly (993*2^-23 + 993*2^-28 = 2^-13 + 2^-28).
 *   fused:   y0 = 2^-5 + 2^-13 + 2^-28 (exact in f32), above the bf16 tie -> 2^-5 + 2^-12 = 0x3d01.
 *   unfused: x0*c rounds to 1 + 2^-5 + 2^-13, y0 = 2^-5 + 2^-13, a bf16 tie -> 2^-5 = 0x3d00.
 *   y1 = fmaf(1, c, 1.03125 * 1) = 2.03125 + 993*2^-23 -> bf16 2.03125 = 0x4002.
 * Pair 1 swaps the roles (x = (1, 1.03125), s = -1) so that the fused y1 is the one that matters. */
static void test_op_fused_rounding(void **state) {
    (void)state;
    setup s;
    setup_init(&s, RK_ROPE_GPTJ, RK_CS_F32_CAT);
    enum { L = 8, R = 8, W = 16 };
    const float c0 = 0x1.0007c2p+0f;
    assert_true(c0 == 1.0f + 993.0f * 0x1p-23f);
    float table[8] = {c0, c0, 1, 1, 1, -1, 0, 0};
    const float x[R] = {1.03125f, 1, 1, 1.03125f, 5, 6, 7, 8};
    uint16_t q_nope[L], q_pe[R], q_out[W], k_nope[L], k_pe[R], kv[W];
    fill16(q_nope, L, 0x3f80);
    fill16(k_nope, L, 0x4000);
    put_f(q_pe, x, R);
    put_f(k_pe, x, R);
    int32_t pos = 0, slot = 0;
    s.v.pos = ROPEKV_INDEX_INT32;
    s.v.slot = ROPEKV_INDEX_INT32;
    rk_args a = {
        .q_nope = q_nope,
        .q_pe = q_pe,
        .q_out = q_out,
        .k_nope = k_nope,
        .k_pe = k_pe,
        .kv_cache = kv,
        .positions = &pos,
        .slots = &slot,
        .cos_sin = table,
        .tokens = 1,
        .heads = 1,
        .max_pos = 1,
        .q_nope_st = L,
        .q_nope_sh = L,
        .q_pe_st = R,
        .q_pe_sh = R,
        .q_out_st = W,
        .q_out_sh = W,
        .k_nope_st = L,
        .k_pe_st = R,
        .kv_st = W,
        .kv_rows = 1,
    };
    ref_run(&s, &a);
    static const uint16_t tail[R] = {0x3d01, 0x4002, 0x4002, 0x3d01, 0x40a0, 0x40c0, 0x40e0, 0x4100};
    check16(q_out + L, tail, R, "q_out rope");
    check16(kv + L, tail, R, "kv rope");
}

/* ---- the op: fp8 cache ------------------------------------------------------------------------------ */

/* One token, one head, L = R = 8 (W = 16), rope none over a unit table, rows back to back: runs the
 * reference on the tensors given, with one cache row written at slot (none for a negative slot). */
static void run_one_token(setup *s, uint16_t *q_nope, uint16_t *q_pe, void *q_out, uint16_t *k_nope, uint16_t *k_pe,
                          void *kv, int64_t slot, float *k_scale, float *q_scale) {
    enum { L = 8, R = 8, W = 16 };
    int64_t pos = 0;
    float cs[8] = {1, 1, 1, 1, 0, 0, 0, 0};
    rk_args a = {
        .q_nope = q_nope,
        .q_pe = q_pe,
        .q_out = q_out,
        .k_nope = k_nope,
        .k_pe = k_pe,
        .kv_cache = kv,
        .positions = &pos,
        .slots = &slot,
        .cos_sin = cs,
        .k_scale = k_scale,
        .q_scale = q_scale,
        .tokens = 1,
        .heads = 1,
        .max_pos = 1,
        .q_nope_st = L,
        .q_nope_sh = L,
        .q_pe_st = R,
        .q_pe_sh = R,
        .q_out_st = W,
        .q_out_sh = W,
        .k_nope_st = L,
        .k_pe_st = R,
        .kv_st = W,
        .kv_rows = 1,
    };
    ref_run(s, &a);
}

/* One token, one head, rope none, fp8 cache: returns the 16 bytes of the KV row. */
static void run_fp8_row(setup *s, const float *nope, const float *pe, float k_scale, uint8_t *row) {
    enum { L = 8, R = 8, W = 16 };
    uint16_t k_nope[L], k_pe[R], q_pe[R], q_out[W], q_nope[L];
    uint8_t kv[W + 4];
    for (int i = 0; i < L; i++) k_nope[i] = rk_f32_to_bf16(nope[i]);
    for (int i = 0; i < R; i++) k_pe[i] = rk_f32_to_bf16(pe[i]);
    fill16(q_nope, L, 0);
    fill16(q_pe, R, 0);
    fill8(kv, W + 4, SENT8);
    run_one_token(s, q_nope, q_pe, q_out, k_nope, k_pe, kv, 0, &k_scale, NULL);
    for (int i = W; i < W + 4; i++) assert_int_equal(kv[i], SENT8);
    memcpy(row, kv, W);
}

static void setup_fp8(setup *s, rk_fp8_fmt fmt, float sat, rk_scale scale) {
    setup_init(s, RK_ROPE_NONE, RK_CS_F32_CAT);
    s->spec.fp8.scale = scale;
    s->arch.fp8 = fmt;
    s->spec.fp8.sat_ocp = s->spec.fp8.sat_fnuz = sat;
    s->v.kv = ROPEKV_KV_FP8_E4M3;
    s->v.q = ROPEKV_Q_NONE;
}

/* ---- fp8_tile rows: L = 16 in two tiles of 8, R = 8; scales at byte 16, the rope part at byte 32, 48 bytes ---- */
enum { TL = 16, TR = 8, T_ROW = 48, T_SCALES = 16, T_ROPE = 32 };

static void setup_tile(setup *s, rk_tile_scale scale, int sanitize) {
    setup_init(s, RK_ROPE_NONE, RK_CS_F32_CAT);
    s->spec.kv_lora_rank = TL;
    s->spec.tile = (rk_tile_policy){8, scale, 448.0f, 240.0f, T_SCALES, T_ROPE, T_ROW, "", ""};
    s->spec.sanitize = sanitize;
    s->v.kv = ROPEKV_KV_FP8_TILE;
    s->v.q = ROPEKV_Q_NONE;
}

/* The fp8_tile row of one token (rope none: the rope part is k_pe rounded to bf16); the bytes after the row
 * must stay untouched. */
static void run_tile_row(setup *s, const uint16_t *k_nope, const uint16_t *k_pe, uint8_t *row) {
    uint8_t kv[T_ROW + 16];
    int64_t pos = 0, slot = 0;
    float cs[8] = {1, 1, 1, 1, 0, 0, 0, 0};
    fill8(kv, sizeof kv, SENT8);
    rk_args a = {.k_nope = k_nope,
                 .k_pe = k_pe,
                 .kv_cache = kv,
                 .positions = &pos,
                 .slots = &slot,
                 .cos_sin = cs,
                 .tokens = 1,
                 .heads = 1,
                 .max_pos = 1,
                 .k_nope_st = TL,
                 .k_pe_st = TR,
                 .kv_st = T_ROW,
                 .kv_rows = 1};
    ref_run(s, &a);
    for (int i = T_ROW; i < T_ROW + 16; i++) assert_int_equal(kv[i], SENT8);
    memcpy(row, kv, T_ROW);
}

static void check_scale(const uint8_t *row, int k, uint32_t want) {
    uint32_t got;
    memcpy(&got, row + T_SCALES + 4 * k, 4);
    if (got != want) fail_msg("scale of tile %d: got 0x%08x, want 0x%08x", k, (unsigned)got, (unsigned)want);
}

/* Tiles whose scale is exact (amax 448: scale 1; amax 56: scale 1/8) give the e4m3 codes of x / scale by hand;
 * an all-zero tile takes FLT_MIN (and -0 stays -0, 0x80 in OCP); the rope part is the bf16 input. */
static void test_op_fp8_tile_row(void **state) {
    (void)state;
    setup s;
    setup_tile(&s, RK_TILE_F32, 0);
    const float a[8] = {448, 1, -2, 0.5f, 3, 1.5f, -0.25f, 0}, b[8] = {56, -7, 1, 0.5f, 2, -28, 0.25f, 3.5f};
    const uint8_t a_codes[8] = {0x7e, 0x38, 0xc0, 0x30, 0x44, 0x3c, 0xa8, 0x00};
    const uint8_t b_codes[8] = {0x7e, 0xe6, 0x50, 0x48, 0x58, 0xf6, 0x40, 0x5e}; /* 448, -56, 8, 4, 16, -224, 2, 28 */
    uint16_t k_nope[TL], k_pe[TR];
    uint8_t row[T_ROW];
    put_f(k_nope, a, 8);
    put_f(k_nope + 8, b, 8);
    put_h(k_pe, KD_BITS, TR);
    run_tile_row(&s, k_nope, k_pe, row);
    check8(row, a_codes, 8, "tile 0 (scale 1)");
    check8(row + 8, b_codes, 8, "tile 1 (scale 1/8)");
    check_scale(row, 0, 0x3f800000u);
    check_scale(row, 1, 0x3e000000u);
    check16((const uint16_t *)(row + T_ROPE), KD_BITS, TR, "rope part");
    for (int i = T_SCALES + 8; i < T_ROPE; i++) assert_int_equal(row[i], SENT8); /* the gap is not written */
    /* all zero, with -0: scale FLT_MIN */
    for (int i = 0; i < TL; i++) k_nope[i] = (uint16_t)(i % 2 ? 0x8000 : 0x0000);
    run_tile_row(&s, k_nope, k_pe, row);
    for (int i = 0; i < TL; i++) assert_int_equal(row[i], i % 2 ? 0x80 : 0x00);
    check_scale(row, 0, 0x00800000u);
    check_scale(row, 1, 0x00800000u);
}

/* pow2 rounds a scale up to a power of two: amax 100 -> 100/448 -> 0.25, x * 4. A tile whose scale already is
 * one keeps it. */
static void test_op_fp8_tile_pow2(void **state) {
    (void)state;
    setup s;
    setup_tile(&s, RK_TILE_POW2, 0);
    const float a[8] = {100, 1, -3, 0.5f, 0, 2, -100, 25}, b[8] = {448, 1, 2, 3, 4, 5, 6, 7};
    /* x * 4 = 400, 4, -12, 2, 0, 8, -400, 100: 400 -> 384 and 100 -> 96 are ties to even */
    const uint8_t a_codes[8] = {0x7c, 0x48, 0xd4, 0x40, 0x00, 0x50, 0xfc, 0x6c};
    uint16_t k_nope[TL], k_pe[TR];
    uint8_t row[T_ROW];
    put_f(k_nope, a, 8);
    put_f(k_nope + 8, b, 8);
    put_h(k_pe, KD_BITS, TR);
    run_tile_row(&s, k_nope, k_pe, row);
    check8(row, a_codes, 8, "tile 0 (scale 0.25)");
    check_scale(row, 0, 0x3e800000u);
    check_scale(row, 1, 0x3f800000u);
}

/* Non-finite values in a tile: amax ignores NaN, which becomes the fp8 NaN; an inf makes the scale inf, so
 * finite values become +-0 and the inf itself inf / inf = NaN. With sanitize NaN -> 0 and inf -> bf16 max
 * first: the scale stays finite and the inf maps to the bound. */
static void test_op_fp8_tile_nonfinite(void **state) {
    (void)state;
    setup s;
    setup_tile(&s, RK_TILE_F32, 0);
    uint16_t k_nope[TL], k_pe[TR];
    uint8_t row[T_ROW];
    const float b[8] = {448, 1, 2, -2, 4, 0.5f, 0, 8};
    put_f(k_nope + 8, b, 8);
    for (int i = 0; i < 8; i++) k_nope[i] = bfx(1.0f);
    k_nope[0] = 0x7f80; /* +inf */
    k_nope[1] = bfx(-1.0f);
    k_nope[8 + 6] = 0x7fc0; /* NaN in a tile of amax 448 */
    put_h(k_pe, KD_BITS, TR);
    run_tile_row(&s, k_nope, k_pe, row);
    assert_int_equal(row[0], 0x7f); /* inf / inf */
    assert_int_equal(row[1], 0x80); /* -1 / inf = -0 */
    for (int i = 2; i < 8; i++) assert_int_equal(row[i], 0x00);
    check_scale(row, 0, 0x7f800000u);
    assert_int_equal(row[8], 0x7e);
    assert_int_equal(row[8 + 6], 0x7f); /* NaN stays NaN */
    assert_int_equal(row[8 + 1], 0x38);
    check_scale(row, 1, 0x3f800000u);
    setup_tile(&s, RK_TILE_F32, 1);
    run_tile_row(&s, k_nope, k_pe, row);
    const float big = 3.38953139e38f, scale = big / 448.0f; /* the bf16 max's tile: one f32 division */
    assert_int_equal(row[0], 0x7e);
    for (int i = 1; i < 8; i++) assert_int_equal(row[i], rk_f32_to_fp8((i == 1 ? -1.0f : 1.0f) / scale, RK_FP8_OCP));
    assert_int_equal(row[1], 0x80); /* far below the smallest subnormal */
    check_scale(row, 0, fbits(scale));
    assert_int_equal(row[8 + 6], 0x00); /* NaN -> 0 */
}

/* Sanitize and the bf16 max: a rope float in (0x7f7f7fff, FLT_MAX] rounds to inf in bf16, so a sanitized bf16 store
 * clamps it to +-0x7f7f (and an inf from the fma too); without sanitize it stays +-inf. GPT-J with s = 0 and
 * k_pe = (2^99, -2^99) per pair makes each pair (t, -t), t = 2^99 * c exactly, c = t * 2^-99 in the table:
 *   0x7f7f7fff (the largest float that rounds to 0x7f7f), 0x7f7f8000 (3.3961e38, the tie that rounds to inf),
 *   3.4e38 and FLT_MAX, then (L = 16) 2 * FLT_MAX = inf from the fma itself. Checked in a bf16 row and in the
 * bf16 rope part of an fp8_tile row. */
static void test_op_sanitize_bf16_bound(void **state) {
    (void)state;
    enum { L = 8, R = 8, W = 16 };
    const float t[4] = {bitsf(0x7f7f7fffu), bitsf(0x7f7f8000u), 3.4e38f, FLT_MAX};
    assert_true(rk_f32_to_bf16(t[0]) == 0x7f7f && rk_f32_to_bf16(t[1]) == 0x7f80);
    float table[8] = {0, 0, 0, 0, 0, 0, 0, 0}; /* cos | sin (all 0) */
    for (int i = 0; i < 4; i++) table[i] = t[i] * 0x1p-99f;
    uint16_t k_pe[R], k_nope[TL];
    for (int i = 0; i < R; i++) k_pe[i] = i % 2 ? 0xf100 : 0x7100; /* -2^99, 2^99 */
    for (int i = 0; i < TL; i++) k_nope[i] = bfx((float)(i % 5) - 2.0f);
    static const uint16_t san[R] = {0x7f7f, 0xff7f, 0x7f7f, 0xff7f, 0x7f7f, 0xff7f, 0x7f7f, 0xff7f};
    static const uint16_t raw[R] = {0x7f7f, 0xff7f, 0x7f80, 0xff80, 0x7f80, 0xff80, 0x7f80, 0xff80};
    for (int tile = 0; tile < 2; tile++)
        for (int sanitize = 0; sanitize < 2; sanitize++) {
            setup s;
            if (tile) {
                setup_tile(&s, RK_TILE_F32, sanitize);
                s.spec.rope = RK_ROPE_GPTJ;
            } else {
                setup_init(&s, RK_ROPE_GPTJ, RK_CS_F32_CAT);
                s.spec.sanitize = sanitize;
                s.v.q = ROPEKV_Q_NONE;
            }
            uint8_t kv[T_ROW];
            fill8(kv, sizeof kv, SENT8);
            int64_t pos = 0, slot = 0;
            rk_args a = {.k_nope = k_nope,
                         .k_pe = k_pe,
                         .kv_cache = kv,
                         .positions = &pos,
                         .slots = &slot,
                         .cos_sin = table,
                         .tokens = 1,
                         .heads = 1,
                         .max_pos = 1,
                         .k_nope_st = tile ? TL : L,
                         .k_pe_st = R,
                         .kv_st = tile ? T_ROW : W,
                         .kv_rows = 1};
            ref_run(&s, &a);
            uint16_t rope[R];
            memcpy(rope, kv + (tile ? T_ROPE : 2 * L), sizeof rope);
            check16(rope, sanitize ? san : raw, R, tile ? "tile row's rope part" : "bf16 row's rope part");
        }
    /* the inf an fma makes: 2^99 * (2 FLT_MAX 2^-99) overflows */
    setup s;
    setup_init(&s, RK_ROPE_GPTJ, RK_CS_F32_CAT);
    s.spec.sanitize = 1;
    s.v.q = ROPEKV_Q_NONE;
    for (int i = 0; i < 4; i++) table[i] = FLT_MAX * 0x1p-98f;
    uint16_t kv[W];
    int64_t pos = 0, slot = 0;
    rk_args a = {.k_nope = k_nope,
                 .k_pe = k_pe,
                 .kv_cache = kv,
                 .positions = &pos,
                 .slots = &slot,
                 .cos_sin = table,
                 .tokens = 1,
                 .heads = 1,
                 .max_pos = 1,
                 .k_nope_st = L,
                 .k_pe_st = R,
                 .kv_st = W,
                 .kv_rows = 1};
    ref_run(&s, &a);
    check16(kv + L, san, R, "an fma's inf");
}

/* The read-back op on the rows above: fp8_tile latents times their tile's scale (exact here), the rope part
 * copied; an fp8 row times k_scale (mul_recip, div) or divided by it (mul); a bf16 row copied; a slot below
 * min_slot or past kv_rows writes zeros, or nothing with skip; out_rope takes the rope parts apart. */
static void test_op_read(void **state) {
    (void)state;
    setup s;
    setup_tile(&s, RK_TILE_F32, 0);
    const float a[8] = {448, 1, -2, 0.5f, 3, 1.5f, -0.25f, 0}, b[8] = {56, -7, 1, 0.5f, 2, -28, 0.25f, 3.5f};
    uint16_t k_nope[TL], k_pe[TR], out[3 * (TL + TR)], out_rope[3 * TR], want[TL + TR];
    uint8_t rows[2 * T_ROW];
    put_f(k_nope, a, 8);
    put_f(k_nope + 8, b, 8);
    put_h(k_pe, KD_BITS, TR);
    run_tile_row(&s, k_nope, k_pe, rows);
    memcpy(rows + T_ROW, rows, T_ROW);
    float two = 2.0f;
    memcpy(rows + T_ROW + T_SCALES, &two, 4); /* row 1: tile 0's scale 2 */
    s.v.op = ROPEKV_OP_READ;
    int64_t slots[3] = {1, -1, 0};
    fill16(out, 3 * (TL + TR), SENT16);
    rk_args r = {
        .tokens = 3, .slots = slots, .kv_cache = rows, .kv_st = T_ROW, .kv_rows = 2, .out = out, .out_st = TL + TR};
    ref_run(&s, &r);
    for (int i = 0; i < 8; i++) want[i] = bfx(2.0f * a[i]);
    put_f(want + 8, b, 8);
    put_h(want + TL, KD_BITS, TR);
    check16(out, want, TL + TR, "slot 1");
    for (int i = 0; i < TL + TR; i++) assert_int_equal(out[TL + TR + i], 0); /* slot -1: zeros */
    put_f(want, a, 8);
    check16(out + 2 * (TL + TR), want, TL + TR, "slot 0 (round trip: exact)");
    /* skip, out_rope, min_slot */
    s.spec.read_neg = RK_READ_SKIP;
    fill16(out, 3 * (TL + TR), SENT16);
    fill16(out_rope, 3 * TR, SENT16);
    r.out_st = TL;
    r.out_rope = out_rope;
    r.out_rope_st = TR;
    r.min_slot = 1;
    ref_run(&s, &r);
    for (int i = 0; i < 8; i++) want[i] = bfx(2.0f * a[i]);
    check16(out, want, TL, "slot 1, latent");
    check16(out_rope, KD_BITS, TR, "slot 1, rope");
    for (int i = TL; i < 3 * TL; i++) assert_int_equal(out[i], SENT16); /* skipped: slot -1, and 0 < min_slot */
    for (int i = TR; i < 3 * TR; i++) assert_int_equal(out_rope[i], SENT16);
    for (int i = 3 * TL; i < 3 * (TL + TR); i++) assert_int_equal(out[i], SENT16); /* past the rows of out */
    /* fp8 rows (L = 8): the inverse of the write's scale convention */
    const rk_scale conv[3] = {RK_SCALE_MUL_RECIP, RK_SCALE_DIV, RK_SCALE_MUL};
    for (int c = 0; c < 3; c++) {
        setup_fp8(&s, RK_FP8_OCP, 448.0f, conv[c]);
        s.v.op = ROPEKV_OP_READ;
        const uint8_t row[16] = {
            0x38, 0xc0, 0x7e, 0x01, 0x7f, 0x80, 0x44, 0x30,
            0x38, 0x38, 0x38, 0x38, 0x38, 0x38, 0x38, 0xb8}; /* 1, -2, 448, 2^-9, NaN, -0, 3, 0.5, ..., -1 */
        float k = 0.75f;
        int64_t slot = 0;
        rk_args f = {.tokens = 1,
                     .slots = &slot,
                     .kv_cache = (void *)row,
                     .kv_st = 16,
                     .kv_rows = 1,
                     .out = out,
                     .out_st = 16,
                     .k_scale = &k};
        ref_run(&s, &f);
        const float x[8] = {1, -2, 448, 0x1p-9f, 0, -0.0f, 3, 0.5f};
        for (int i = 0; i < 8; i++) {
            if (i == 4) {
                assert_int_equal(out[i], 0x7fff); /* NaN */
                continue;
            }
            /* one f32 operation, rounded to bf16 (to nearest even) */
            const uint16_t w = rk_f32_to_bf16(conv[c] == RK_SCALE_MUL ? x[i] / k : x[i] * k);
            if (out[i] != w) fail_msg("%s: out[%d] = 0x%04x, want 0x%04x", rk_scale_name(conv[c]), i, out[i], w);
        }
        assert_int_equal(out[15], rk_f32_to_bf16(conv[c] == RK_SCALE_MUL ? -1.0f / k : -k));
    }
}


/* k_scale = 2 under each convention, OCP bytes. */
static void test_op_fp8_scales(void **state) {
    (void)state;
    static const float nope[8] = {3, -3, 1, 0.5f, 448, 500, -1000, 0};
    static const float pe[8] = {0.75f, -0.75f, 2.5f, 17, 1, -1, 0.125f, 100};
    static const struct {
        rk_scale scale;
        const char *label;
        uint8_t want[16];
    } cases[] = {
        /* x * (1/2): 1.5 -1.5 0.5 0.25 224 250->256 -500->-448 0 | 0.375 -0.375 1.25 8.5->8 (tie)
         * 0.5 -0.5 0.0625 50->48 (tie) */
        {RK_SCALE_MUL_RECIP,
         "mul_recip",
         {0x3c, 0xbc, 0x30, 0x28, 0x76, 0x78, 0xfe, 0x00, 0x2c, 0xac, 0x3a, 0x50, 0x30, 0xb0, 0x18, 0x64}},
        {RK_SCALE_DIV,
         "div",
         {0x3c, 0xbc, 0x30, 0x28, 0x76, 0x78, 0xfe, 0x00, 0x2c, 0xac, 0x3a, 0x50, 0x30, 0xb0, 0x18, 0x64}},
        /* x * 2: 6 -6 2 1 896->448 1000->448 -2000->-448 0 | 1.5 -1.5 5 34->32 (tie) 2 -2 0.25
         * 200->192 (tie) */
        {RK_SCALE_MUL,
         "mul",
         {0x4c, 0xcc, 0x40, 0x38, 0x7e, 0x7e, 0xfe, 0x00, 0x3c, 0xbc, 0x4a, 0x60, 0x40, 0xc0, 0x28, 0x74}},
        /* unscaled: 3 -3 1 0.5 448 500->448 -1000->-448 0 | 0.75 -0.75 2.5 17->16 (tie) 1 -1 0.125
         * 100->96 (tie) */
        {RK_SCALE_NONE,
         "none",
         {0x44, 0xc4, 0x38, 0x30, 0x7e, 0x7e, 0xfe, 0x00, 0x34, 0xb4, 0x42, 0x58, 0x38, 0xb8, 0x20, 0x6c}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        setup s;
        setup_fp8(&s, RK_FP8_OCP, 448.0f, cases[i].scale);
        uint8_t row[16];
        run_fp8_row(&s, nope, pe, 2.0f, row);
        check8(row, cases[i].want, 16, cases[i].label);
    }
}

/* x * (1/k) and x / k round differently. k = 7, x = 91 * 2^-10 (a bf16):
 *   x / 7 = 13 * 2^-10 exactly: 6.5 quanta of the OCP subnormal step 2^-9, a tie -> 6 (0x06);
 *   1.0f/7 rounds up (0x3e124925 > 1/7), so x * (1.0f/7) is just above 13 * 2^-10 -> 7 (0x07). */
static void test_op_fp8_mul_recip_vs_div(void **state) {
    (void)state;
    const float k = 7.0f, x = 91.0f * 0x1p-10f;
    const float r = 1.0f / k;
    assert_int_equal(fbits(r), 0x3e124925u);
    assert_true(x / k == 13.0f * 0x1p-10f);
    assert_true(x * r > x / k);
    float nope[8] = {x, -x, 7, 14, 0, 0, 0, 0};
    float pe[8] = {x, 0, 0, 0, 0, 0, 0, 0};
    setup s;
    uint8_t row[16];
    setup_fp8(&s, RK_FP8_OCP, 448.0f, RK_SCALE_MUL_RECIP);
    run_fp8_row(&s, nope, pe, k, row);
    assert_int_equal(row[0], 0x07);
    assert_int_equal(row[1], 0x87);
    assert_int_equal(row[2], 0x38); /* 7 * (1.0f/7) = 1 */
    assert_int_equal(row[3], 0x40);
    assert_int_equal(row[8], 0x07);
    setup_fp8(&s, RK_FP8_OCP, 448.0f, RK_SCALE_DIV);
    run_fp8_row(&s, nope, pe, k, row);
    assert_int_equal(row[0], 0x06);
    assert_int_equal(row[1], 0x86);
    assert_int_equal(row[2], 0x38);
    assert_int_equal(row[3], 0x40);
    assert_int_equal(row[8], 0x06);
}

/* The block writer's division (templates/kernel.hip, block_divide): for a scale d in [2^-60, 2^60], q = y * k with
 * k = 1 / d, then q - (d q - y) k, each step one rounding (fma). It must equal the IEEE quotient y / d bit for bit
 * wherever |y / d| >= 2^-11, and below that stay under 2^-10 (a zero code of fp8 and e2m1) with y's sign. Checked
 * for every bf16 y against divisors spread over the range (edge significands at every fourth exponent, random ones
 * beside them), and for random f32 y, up to |y / d| = 2^20 (a block's quotients stay near its format's largest
 * value). */
static float block_quotient(float y, float d) {
    const float k = 1.0f / d, q = y * k;
    return fmaf(-fmaf(d, q, -y), k, q);
}
static void block_quotient_check(float y, float d, uint64_t *n, uint64_t *bad) {
    const float want = y / d, got = block_quotient(y, d);
    if (fabsf(want) > 0x1p20f) return; /* not a block's quotient */
    const int ok = fabsf(want) >= 0x1p-11f ? fbits(got) == fbits(want)
                                           : fabsf(got) < 0x1p-10f && signbit(got) == signbit(y);
    ++*n;
    if (!ok && ++*bad <= 5) print_message("y = %a, d = %a: %a, want %a\n", y, d, got, want);
}
static void test_block_division(void **state) {
    (void)state;
    static const uint32_t sig[] = {0x000000u, 0x000001u, 0x7fffffu, 0x7ffffeu, 0x400000u,
                                   0x2aaaabu, 0x555555u, 0x124925u, 0x6db6dbu, 0x0ccccdu};
    enum { NSIG = sizeof sig / sizeof sig[0] };
    rk_rng rng = {0x9e3779b97f4a7c15u};
    uint64_t bad = 0, n = 0;
    for (int e = -60; e < 60; e += 4)
        for (int j = 0; j < NSIG + 6; j++) {
            const uint32_t m = j < NSIG ? sig[j] : (uint32_t)(rk_rng_next(&rng) >> 41);
            const float d = bitsf((uint32_t)(e + 127) << 23 | m);
            for (uint32_t b = 0; b < 0x10000u; b++) {
                const float y = bitsf(b << 16);
                if (!isnan(y) && !isinf(y)) block_quotient_check(y, d, &n, &bad);
            }
        }
    for (int i = 0; i < 4000000; i++) {
        const uint64_t u = rk_rng_next(&rng), v = rk_rng_next(&rng);
        const float d = bitsf((uint32_t)((int)(u >> 57) % 120 - 60 + 127) << 23 | (uint32_t)(u >> 8 & 0x7fffffu));
        const float y = ldexpf(bitsf(0x3f800000u | (uint32_t)(v >> 41)), (int)(v >> 32 & 31) - 24) * d *
                        ((v & 1) ? -1.0f : 1.0f);
        block_quotient_check(y, d, &n, &bad);
    }
    print_message("block division: %llu pairs, %llu differ\n", (unsigned long long)n, (unsigned long long)bad);
    assert_true(n > 20000000u);
    assert_int_equal(bad, 0);
    /* a signed zero keeps its sign; without the correction a quotient can be one step off */
    assert_true(signbit(block_quotient(-0.0f, 3.0f)) && !signbit(block_quotient(0.0f, 3.0f)));
    const float x = 91.0f * 0x1p-10f;
    assert_true(x * (1.0f / 7.0f) != x / 7.0f && block_quotient(x, 7.0f) == x / 7.0f);
}

/* The software e2m1 encoder of the templates on NVIDIA and the host (templates/prelude.hip, rk_e2m1_sw): with
 * a = min(|f|, 6) (a NaN gives 6), the smallest of fma(a, 2, 2^23), a + 2^23 + 2 and fma(a, 1/2, 2^23 + 4), whose low
 * three bits are the code's magnitude; the sign is that of min(f, FLT_MAX) (a NaN gives +). min returns the operand
 * that is not a NaN, as NVIDIA's min.f32 and the host's comparison x < c ? x : c do here. It must give
 * rk_f32_to_e2m1's code for every input: every f32 with an exponent between 2^-4 and 2^2 (where the codes change),
 * each of the others at a stride of 251 mantissas and their ends, both signs. */
static float min_num(float x, float c) { return x < c ? x : c; }
static uint32_t e2m1_min_form(float f) {
    const float a = min_num(bitsf(fbits(f) & 0x7fffffffu), 6.0f);
    const float t = min_num(min_num(fmaf(a, 2.0f, 8388608.0f), a + 8388610.0f), fmaf(a, 0.5f, 8388612.0f));
    return (fbits(t) & 7u) | ((fbits(min_num(f, 3.40282347e38f)) >> 28) & 8u);
}
static void test_e2m1_min_form(void **state) {
    (void)state;
    uint64_t n = 0, bad = 0;
    for (uint32_t e = 0; e < 256; e++) {
        const uint32_t step = e >= 123 && e <= 129 ? 1u : 251u;
        for (uint32_t m = 0; m < 0x800000u; m = m + step < 0x800000u || m == 0x7fffffu ? m + step : 0x7fffffu)
            for (uint32_t sign = 0; sign < 2; sign++) {
                const float f = bitsf(sign << 31 | e << 23 | m);
                const uint32_t got = e2m1_min_form(f), want = rk_f32_to_e2m1(f);
                n++;
                if (got != want && ++bad <= 5) print_message("%a: code %x, want %x\n", f, got, want);
            }
    }
    print_message("e2m1 min form: %llu inputs, %llu differ\n", (unsigned long long)n, (unsigned long long)bad);
    assert_true(n > 100000000u);
    assert_int_equal(bad, 0);
}

/* The read-back's e2m1 decode on NVIDIA (templates/read.hip, unpack_e2m1): byte permutes (__byte_perm, emulated
 * here: result byte k is byte (selector nibble k & 7) of the 8 bytes x, y) look up four magnitudes' top f32 bytes,
 * pair them into two values' upper halves, and move each sign bit to bit 31. Every 16-bit group of four nibbles must
 * decode to rk_e2m1_to_f32's bits. */
static uint32_t byte_perm(uint32_t x, uint32_t y, uint32_t s) {
    const uint64_t v = (uint64_t)y << 32 | x;
    uint32_t r = 0;
    for (int k = 0; k < 4; k++) r |= (uint32_t)(v >> (8 * ((s >> (4 * k)) & 7u)) & 0xffu) << (8 * k);
    return r;
}
static void test_e2m1_permute_decode(void **state) {
    (void)state;
    int bad = 0;
    for (uint32_t s = 0; s < 0x10000u; s++) {
        const uint32_t sel = s & 0x7777u;
        const uint32_t e = byte_perm(0x3f3f3f00u, 0x40404040u, sel), m = byte_perm(0xc0800000u, 0xc0804000u, sel);
        const uint32_t w01 = byte_perm(m, e, 0x5140u), w23 = byte_perm(m, e, 0x7362u);
        const uint32_t got[4] = {w01 << 16 | (s << 28 & 0x80000000u), (w01 & 0xffff0000u) | (s << 24 & 0x80000000u),
                                 w23 << 16 | (s << 20 & 0x80000000u), (w23 & 0xffff0000u) | (s << 16 & 0x80000000u)};
        for (int k = 0; k < 4; k++) {
            const uint32_t want = fbits(rk_e2m1_to_f32((uint8_t)(s >> (4 * k) & 0xfu)));
            if (got[k] != want && ++bad <= 5) print_message("%04x value %d: %08x, want %08x\n", s, k, got[k], want);
        }
    }
    assert_int_equal(bad, 0);
}

/* The built-in specs, loaded once (the catalog is large: not on the stack). */
static const rk_catalog *builtin(void) {
    static rk_catalog *cat;
    if (!cat) {
        rk_err err = {0};
        cat = calloc(1, sizeof *cat);
        assert_non_null(cat);
        if (rk_catalog_load_embedded(cat, &err) != ROPEKV_OK) fail_msg("catalog: %s", err.msg);
    }
    return cat;
}

/* kimi_k2's fp8 query is vLLM's: q * (1.0f / q_scale). With q_scale = 7 the bf16 0x3db6 (91 * 2^-10) gives 0x07
 * (x / 7 would be the tie 6.5 * 2^-9, 0x06), in q_nope's bytes and, through a rope at c = 1, s = 0 (the rope part
 * is rounded to bf16 first, which keeps it), in the rope part's. On FNUZ bytes (bias 8, a subnormal step of 2^-10)
 * x / 7 is 13 steps exactly, no tie: both conventions give 0x0d. */
static void test_op_kimi_k2_q_fp8(void **state) {
    (void)state;
    const rk_catalog *cat = builtin();
    const rk_spec *sp = rk_catalog_find(cat, "kimi_k2");
    assert_non_null(sp);
    assert_int_equal(sp->q_fp8.scale, RK_SCALE_MUL_RECIP);
    const char *targets[2] = {"host", "gfx942"};
    const uint8_t want[2] = {0x07, 0x0d};
    for (int k = 0; k < 2; k++) {
        const rk_arch *arch = rk_arch_find(&cat->archs, targets[k]);
        assert_non_null(arch);
        const rk_choice ch = {ROPEKV_KV_BF16,     ROPEKV_Q_ABSORBED, ROPEKV_INDEX_INT64,
                              ROPEKV_INDEX_INT64, ROPEKV_Q_FP8_E4M3, ROPEKV_KV_FLAT,
                              ROPEKV_OP_WRITE,    ROPEKV_NORM_NONE,  0};
        rk_desc d;
        rk_err err = {0};
        if (rk_desc_make(sp, arch, &ch, &d, &err) != ROPEKV_OK) fail_msg("rk_desc_make: %s", err.msg);
        enum { L = 512, R = 64, W = 576 };
        static uint16_t q_nope[L], q_pe[R], k_nope[L], k_pe[R], kv[W];
        static uint8_t q_out[W];
        static float table[R];
        for (int i = 0; i < L; i++) q_nope[i] = k_nope[i] = 0x3db6;
        for (int i = 0; i < R; i++) q_pe[i] = k_pe[i] = 0x3db6;
        for (int i = 0; i < R; i++) table[i] = i < R / 2 ? 1.0f : 0.0f;
        int64_t pos = 0, slot = 0;
        float q_scale = 7.0f;
        rk_args a = {.q_nope = q_nope,
                     .q_pe = q_pe,
                     .q_out = q_out,
                     .k_nope = k_nope,
                     .k_pe = k_pe,
                     .kv_cache = kv,
                     .positions = &pos,
                     .slots = &slot,
                     .cos_sin = table,
                     .q_scale = &q_scale,
                     .tokens = 1,
                     .kv_tokens = 1,
                     .heads = 1,
                     .max_pos = 1,
                     .q_nope_st = L,
                     .q_nope_sh = L,
                     .q_pe_st = R,
                     .q_pe_sh = R,
                     .q_out_st = W,
                     .q_out_sh = W,
                     .k_nope_st = L,
                     .k_pe_st = R,
                     .kv_st = W,
                     .kv_rows = 1};
        rk_ref_run(&d, &a);
        for (int i = 0; i < W; i++)
            if (q_out[i] != want[k]) fail_msg("%s: q_out[%d] = 0x%02x, want 0x%02x", targets[k], i, q_out[i], want[k]);
    }
}

/* deepseek_v32's tile row follows vLLM's writer: amax maps to 448 on OCP bytes and to 224 on gfx942's FNUZ bytes.
 * A tile of amax 448: scale 1 (host) and 2 (gfx942), so 448, 1, -3 become 448, 1, -3 (0x7e 0x38 0xc4 OCP) and 224,
 * 0.5, -1.5 (0x7e 0x38 0xc4 FNUZ, bias 8). */
static void test_op_deepseek_v32_tile_bound(void **state) {
    (void)state;
    const rk_catalog *cat = builtin();
    const rk_spec *sp = rk_catalog_find(cat, "deepseek_v32");
    assert_non_null(sp);
    const char *targets[2] = {"host", "gfx942"};
    const uint32_t want_scale[2] = {0x3f800000u, 0x40000000u};
    const uint8_t want[3] = {0x7e, 0x38, 0xc4};
    for (int k = 0; k < 2; k++) {
        const rk_arch *arch = rk_arch_find(&cat->archs, targets[k]);
        assert_non_null(arch);
        const rk_choice ch = {ROPEKV_KV_FP8_TILE, ROPEKV_Q_NONE,    ROPEKV_INDEX_INT64,
                              ROPEKV_INDEX_INT64, ROPEKV_Q_BF16,    ROPEKV_KV_FLAT,
                              ROPEKV_OP_WRITE,    ROPEKV_NORM_NONE, 0};
        rk_desc d;
        rk_err err = {0};
        if (rk_desc_make(sp, arch, &ch, &d, &err) != ROPEKV_OK) fail_msg("rk_desc_make: %s", err.msg);
        assert_true(d.kv8_sat == (k ? 224.0f : 448.0f));
        enum { L = 512, R = 64, ROW = 656 };
        static uint16_t k_nope[L], k_pe[R];
        static uint8_t kv[ROW];
        static float table[R];
        for (int i = 0; i < L; i++) k_nope[i] = i % 128 == 0 ? bfx(448.0f) : i % 2 ? bfx(-3.0f) : bfx(1.0f);
        for (int i = 0; i < R; i++) k_pe[i] = bfx(1.0f);
        for (int i = 0; i < R; i++) table[i] = i < R / 2 ? 1.0f : 0.0f;
        int64_t pos = 0, slot = 0;
        rk_args a = {.k_nope = k_nope,
                     .k_pe = k_pe,
                     .kv_cache = kv,
                     .positions = &pos,
                     .slots = &slot,
                     .cos_sin = table,
                     .tokens = 1,
                     .kv_tokens = 1,
                     .heads = 1,
                     .max_pos = 1,
                     .k_nope_st = L,
                     .k_pe_st = R,
                     .kv_st = ROW,
                     .kv_rows = 1};
        rk_ref_run(&d, &a);
        for (int i = 0; i < L; i++) {
            const uint8_t w = i % 128 == 0 ? want[0] : i % 2 ? want[2] : want[1];
            if (kv[i] != w) fail_msg("%s: byte %d = 0x%02x, want 0x%02x", targets[k], i, kv[i], w);
        }
        for (int t = 0; t < 4; t++) {
            uint32_t got;
            memcpy(&got, kv + 512 + 4 * t, 4);
            if (got != want_scale[k]) fail_msg("%s: scale %d = 0x%08x", targets[k], t, (unsigned)got);
        }
    }
}

/* ---- fp8_tile rows as the engines' readers decode them ---------------------------------------------------------
 * A reader turns latent byte j of tile k into bf16(v * s'), v the byte's exact value and s' the tile's float32 scale
 * s as that reader takes it (the specs' `readers` name them):
 *   F32   s' = s                      vLLM's cp_gather_and_upconvert, ropekv's read-back op, FlashMLA tests/quant.py
 *   BF16  s' = bf16(s), to nearest    FlashMLA's sm_90 sparse decode (v and s' as bf16, one bf16 product)
 *   E8M0  s' = 2^floor(log2(s))       FlashMLA's sm_100 sparse decode (__nv_cvt_float2_to_e8m0x2, toward zero),
 *                                     FlashInfer's sm_120 reader (pow2_fp32: the scale's exponent bits)
 * A value x written with scale s has |v s - x| <= 2^-4 |x| + 2^-10 s (half an e4m3 step: relative 2^-4 for normals,
 * 2^-10 s for subnormals), and the read adds its scale's error and one bf16 rounding (2^-8). */
typedef enum { READ_F32, READ_BF16, READ_E8M0, N_READERS } tile_reader;
static const char *const reader_names[N_READERS] = {"f32", "bf16 scale (FlashMLA sm_90)",
                                                    "E8M0 (FlashMLA sm_100, FlashInfer sm_120)"};

static float reader_scale(tile_reader r, float s) {
    if (r == READ_BF16) return rk_bf16_to_f32(rk_f32_to_bf16(s));
    if (r == READ_E8M0) return bitsf(fbits(s) & 0xff800000u); /* a finite s >= FLT_MIN: its exponent alone */
    return s;
}

/* The error a reader may make on x (written with scale s) when it reads the scale with relative error at most
 * eps: the write's half step, then the read's scale error and its bf16 rounding on |v s| <= |x| + bound. */
static double read_bound(double x, double s, double eps) {
    const double w = fabs(x) / 16.0 + s / 1024.0;
    return w + (fabs(x) + w) * ((1.0 + eps) * (1.0 + 1.0 / 256.0) - 1.0) + 1e-30;
}

/* deepseek_v32 (f32 scales) and deepseek_v32_pow2 (power-of-two scales) write random tiles of values from 2^-12 to
 * 2^12; each reader decodes every row. A reader matched to its row stays within the bound above (E8M0 and BF16
 * read a pow2 row exactly as F32 does, bit for bit); E8M0 on f32 scales reads most values up to 2x too small, and
 * the test must see that. */
static void test_tile_readers(void **state) {
    (void)state;
    enum { T = 48, L = 512, R = 64, ROW = 656, TILE = 128 };
    const rk_catalog *cat = builtin();
    const rk_arch *host = rk_arch_find(&cat->archs, "host");
    static uint16_t k_nope[T * L], k_pe[T * R];
    static uint8_t rows[2][T * ROW];
    static float table[R];
    int64_t pos[T], slots[T];
    for (int t = 0; t < T; t++) pos[t] = 0, slots[t] = t;
    for (int i = 0; i < R; i++) table[i] = i < R / 2 ? 1.0f : 0.0f;
    for (int i = 0; i < T * R; i++) k_pe[i] = bfx(1.0f);
    for (int t = 0; t < T; t++)
        for (int k = 0; k < L / TILE; k++) {
            const float mag = ldexpf(1.0f, (int)(rng32() % 25) - 12); /* the tile's range: 2^-12 .. 2^12 */
            for (int j = 0; j < TILE; j++) {
                const float u = (float)(rng32() % 20001) / 10000.0f - 1.0f; /* [-1, 1] */
                k_nope[t * L + k * TILE + j] = rk_f32_to_bf16(u * mag * (1.0f + (float)(rng32() % 1000) / 1000.0f));
            }
        }
    const char *specs[2] = {"deepseek_v32", "deepseek_v32_pow2"};
    for (int sp = 0; sp < 2; sp++) {
        const rk_spec *spec = rk_catalog_find(cat, specs[sp]);
        assert_non_null(spec);
        assert_int_equal(spec->tile.scale, sp ? RK_TILE_POW2 : RK_TILE_F32);
        assert_true(spec->tile.readers[0] != '\0'); /* the spec says which readers its rows are for */
        const rk_choice ch = {ROPEKV_KV_FP8_TILE, ROPEKV_Q_NONE,    ROPEKV_INDEX_INT64,
                              ROPEKV_INDEX_INT64, ROPEKV_Q_BF16,    ROPEKV_KV_FLAT,
                              ROPEKV_OP_WRITE,    ROPEKV_NORM_NONE, 0};
        rk_desc d;
        rk_err err = {0};
        if (rk_desc_make(spec, host, &ch, &d, &err) != ROPEKV_OK) fail_msg("rk_desc_make: %s", err.msg);
        rk_args a = {.k_nope = k_nope,
                     .k_pe = k_pe,
                     .kv_cache = rows[sp],
                     .positions = pos,
                     .slots = slots,
                     .cos_sin = table,
                     .tokens = T,
                     .kv_tokens = T,
                     .heads = 1,
                     .max_pos = 1,
                     .k_nope_st = L,
                     .k_pe_st = R,
                     .kv_st = ROW,
                     .kv_rows = T};
        rk_ref_run(&d, &a);
    }
    /* [row spec][reader]: the largest relative error on values of at least amax / 16, the largest error over the
     * tile's amax, the values past read_bound, and the values the reader reads differently from F32 */
    double rel[2][N_READERS] = {{0}}, of_amax[2][N_READERS] = {{0}};
    long over[2][N_READERS] = {{0}}, differ[2][N_READERS] = {{0}}, big = 0;
    for (int sp = 0; sp < 2; sp++)
        for (int t = 0; t < T; t++)
            for (int k = 0; k < L / TILE; k++) {
                const uint8_t *row = rows[sp] + t * ROW;
                float s;
                memcpy(&s, row + 512 + 4 * k, 4);
                if (sp) assert_int_equal(fbits(s) & 0x007fffffu, 0); /* pow2: a power of two */
                double amax = 0;
                for (int j = 0; j < TILE; j++) amax = fmax(amax, fabs(rk_bf16_to_f32(k_nope[t * L + k * TILE + j])));
                for (int j = 0; j < TILE; j++) {
                    const double x = rk_bf16_to_f32(k_nope[t * L + k * TILE + j]);
                    const float v = rk_fp8_to_f32(row[k * TILE + j], RK_FP8_OCP);
                    const uint16_t f32_read = rk_f32_to_bf16(v * s);
                    big += sp == 0 && fabs(x) >= amax / 16;
                    for (int r = 0; r < N_READERS; r++) {
                        const uint16_t got = rk_f32_to_bf16(v * reader_scale((tile_reader)r, s));
                        const double e = fabs(rk_bf16_to_f32(got) - x);
                        if (fabs(x) >= amax / 16) rel[sp][r] = fmax(rel[sp][r], e / fabs(x));
                        of_amax[sp][r] = fmax(of_amax[sp][r], e / amax);
                        over[sp][r] += e > read_bound(x, s, r == READ_BF16 ? 1.0 / 256 : 0.0);
                        differ[sp][r] += got != f32_read;
                    }
                }
            }
    for (int sp = 0; sp < 2; sp++)
        for (int r = 0; r < N_READERS; r++)
            print_message("%-17s read by %-41s max rel. error %.4f (|x| >= amax/16), max error / amax %.4f, "
                          "%ld values past the bound, %ld read unlike f32\n",
                          specs[sp], reader_names[r], rel[sp][r], of_amax[sp][r], over[sp][r], differ[sp][r]);
    /* matched: within the bound, like f32 scales read as f32 */
    for (int r = 0; r < N_READERS; r++) {
        assert_int_equal(over[1][r], 0);
        assert_int_equal(differ[1][r], 0); /* a power of two reads the same in every reader */
        assert_true(rel[1][r] <= 1.0 / 16 + 1.0 / 128);
    }
    assert_int_equal(over[0][READ_F32], 0);
    assert_int_equal(over[0][READ_BF16], 0);
    assert_true(rel[0][READ_F32] <= 1.0 / 16 + 1.0 / 128 && rel[0][READ_BF16] <= 1.0 / 16 + 1.0 / 64);
    /* mismatched: E8M0 on f32 scales is caught */
    assert_true(rel[0][READ_E8M0] > 0.25);
    assert_true(over[0][READ_E8M0] > big / 2);
}

/* FNUZ bytes with the 224 bound (vLLM), sanitize off and on, and the format's own 240 bound. */
static void test_op_fp8_fnuz_bound(void **state) {
    (void)state;
    const float nope[8] = {236, -236, 230, 1000, -INFINITY, INFINITY, NAN, -0x1p-12f};
    const float pe[8] = {-0.0f, 0x1p-11f, 0x1.8p-10f, -0x1p-10f, 1, -0.5f, 0, 15};
    /* pe: -0 -> 0x00, half the smallest subnormal ties to 0, 1.5 quanta ties to 2, -1 quantum,
     * 1 (bias 8), -0.5, 0, 15 = 1.875 * 8 */
    static const uint8_t pe_want[8] = {0x00, 0x00, 0x02, 0x81, 0x40, 0xb8, 0x00, 0x5f};
    static const struct {
        float sat;
        int san;
        uint8_t nope_want[8];
    } cases[] = {
        /* 236, 230, 1000, inf clamp to 224 (0x7e); NaN passes to the FNUZ NaN; -tiny -> 0x00 */
        {224.0f, 0, {0x7e, 0xfe, 0x7e, 0x7e, 0xfe, 0x7e, 0x80, 0x00}},
        {224.0f, 1, {0x7e, 0xfe, 0x7e, 0x7e, 0xfe, 0x7e, 0x00, 0x00}},
        /* 236 is nearer 240 than 224; 230 nearer 224 */
        {240.0f, 0, {0x7f, 0xff, 0x7e, 0x7f, 0xff, 0x7f, 0x80, 0x00}},
        {240.0f, 1, {0x7f, 0xff, 0x7e, 0x7f, 0xff, 0x7f, 0x00, 0x00}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        setup s;
        setup_fp8(&s, RK_FP8_FNUZ, cases[i].sat, RK_SCALE_NONE);
        s.spec.fp8.sat_fnuz = cases[i].sat;
        s.spec.sanitize = cases[i].san;
        uint8_t row[16];
        run_fp8_row(&s, nope, pe, 1.0f, row);
        check8(row, cases[i].nope_want, 8, "fnuz nope");
        check8(row + 8, pe_want, 8, "fnuz rope");
    }
}

/* OCP sanitize: NaN -> 0, +-inf -> +-sat; without it a NaN becomes the OCP NaN 0x7f. A lower OCP
 * bound (240) clamps first. */
static void test_op_fp8_ocp_sanitize(void **state) {
    (void)state;
    const float nope[8] = {NAN, INFINITY, -INFINITY, -0x1p-12f, -0.0f, 300, -300, 0x1p-9f};
    const float pe[8] = {-NAN, 1, 1, 1, 1, 1, 1, 1};
    static const struct {
        float sat;
        int san;
        uint8_t want[9];
    } cases[] = {
        {448.0f, 0, {0x7f, 0x7e, 0xfe, 0x80, 0x80, 0x79, 0xf9, 0x01, 0x7f}},
        {448.0f, 1, {0x00, 0x7e, 0xfe, 0x80, 0x80, 0x79, 0xf9, 0x01, 0x00}},
        /* 240 = 1.875 * 128 = 0x77 in OCP */
        {240.0f, 1, {0x00, 0x77, 0xf7, 0x80, 0x80, 0x77, 0xf7, 0x01, 0x00}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        setup s;
        setup_fp8(&s, RK_FP8_OCP, cases[i].sat, RK_SCALE_NONE);
        s.spec.sanitize = cases[i].san;
        uint8_t row[16];
        run_fp8_row(&s, nope, pe, 1.0f, row);
        check8(row, cases[i].want, 9, "ocp row");
    }
}

/* fp8.rope_bf16: the rope float is rounded to bf16 before the fp8 conversion. GPT-J at a position
 * with c0 = 1.0634765625 = 1 + 65*2^-10, s0 = 0, on k_pe = (1, 2, 1, ...):
 *   y0 = 1.0634765625: fp8 directly -> above the 1.0625 midpoint -> 1.125 (0x39);
 *                      bf16 first -> 1.0625 (a tie in fp8) -> 1.0 (0x38).
 *   y1 = 2.126953125:  fp8 directly -> 2.25 (0x41); bf16 first -> 2.125 -> tie -> 2.0 (0x40). */
static void test_op_fp8_rope_bf16(void **state) {
    (void)state;
    enum { L = 8, R = 8, W = 16 };
    float table[8] = {1.0634765625f, 1, 1, 1, 0, 0, 0, 0};
    const float kpe[R] = {1, 2, 1, 1, 3, 0.5f, -1, 1};
    for (int rr = 0; rr < 2; rr++) {
        setup s;
        setup_init(&s, RK_ROPE_GPTJ, RK_CS_F32_CAT);
        s.spec.fp8.rope_bf16 = rr;
        s.spec.fp8.scale = RK_SCALE_MUL;
        s.v.kv = ROPEKV_KV_FP8_E4M3;
        s.v.q = ROPEKV_Q_NONE;
        uint16_t k_nope[L], k_pe[R];
        uint8_t kv[W];
        fill16(k_nope, L, 0x3f80);
        put_f(k_pe, kpe, R);
        int64_t pos = 0, slot = 0;
        float k_scale = 1.0f;
        rk_args a = {
            .k_nope = k_nope,
            .k_pe = k_pe,
            .kv_cache = kv,
            .positions = &pos,
            .slots = &slot,
            .cos_sin = table,
            .k_scale = &k_scale,
            .tokens = 1,
            .heads = 1,
            .max_pos = 1,
            .k_nope_st = L,
            .k_pe_st = R,
            .kv_st = W,
            .kv_rows = 1,
        };
        ref_run(&s, &a);
        const uint8_t want[W] = {0x38, 0x38, 0x38, 0x38, 0x38, 0x38, 0x38, 0x38, rr ? 0x38 : 0x39, rr ? 0x40 : 0x41,
                                 0x38, 0x38, 0x44, 0x30, 0xb8, 0x38};
        check8(kv, want, W, rr ? "rope_bf16 on" : "rope_bf16 off");
    }
}

/* ---- the op: fp8 query ------------------------------------------------------------------------------ */

/* One token, one head, an fp8 query under q form qf (rope none; q_fp8 policy scale, bound 448 OCP):
 * returns the 16 bytes of q_out (absorbed, zero_copy) or the 16 bf16-row bytes of q_pe (inplace). */
static void run_q_fp8(rk_scale scale, ropekv_q_form qf, const float *nope, const float *pe, float q_scale,
                      uint8_t *out) {
    enum { L = 8, R = 8, W = 16 };
    setup s;
    setup_init(&s, RK_ROPE_NONE, RK_CS_F32_CAT);
    s.spec.q_fp8.scale = scale;
    s.spec.q_fp8.sat_ocp = 448.0f;
    s.spec.q_fp8.sat_fnuz = 240.0f;
    s.v.q = qf;
    s.v.q_dtype = ROPEKV_Q_FP8_E4M3;
    uint16_t q_nope[L], q_pe[R], k_nope[L], k_pe[R];
    uint8_t q_out[W + 4], kv[W];
    for (int i = 0; i < L; i++) q_nope[i] = rk_f32_to_bf16(nope[i]);
    for (int i = 0; i < R; i++) q_pe[i] = rk_f32_to_bf16(pe[i]);
    fill16(k_nope, L, 0);
    fill16(k_pe, R, 0);
    fill8(q_out, W + 4, SENT8);
    run_one_token(&s, q_nope, q_pe, q_out, k_nope, k_pe, kv, -1, NULL, &q_scale);
    for (int i = W; i < W + 4; i++) assert_int_equal(q_out[i], SENT8); /* nothing past the row */
    if (qf == ROPEKV_Q_INPLACE) memcpy(out, q_pe, W);
    else memcpy(out, q_out, W);
}

/* The query's fp8 elements follow the cache's arithmetic: q_scale = 2 under each convention gives the
 * bytes test_op_fp8_scales derives for the cache (same inputs). zero_copy writes only the rope part;
 * inplace puts the R fp8 bytes at the start of the q_pe row and leaves the rest of its bytes alone. */
static void test_op_fp8_query(void **state) {
    (void)state;
    static const float nope[8] = {3, -3, 1, 0.5f, 448, 500, -1000, 0};
    static const float pe[8] = {0.75f, -0.75f, 2.5f, 17, 1, -1, 0.125f, 100};
    static const struct {
        rk_scale scale;
        uint8_t want[16];
    } cases[] = {
        {RK_SCALE_MUL_RECIP,
         {0x3c, 0xbc, 0x30, 0x28, 0x76, 0x78, 0xfe, 0x00, 0x2c, 0xac, 0x3a, 0x50, 0x30, 0xb0, 0x18, 0x64}},
        {RK_SCALE_DIV,
         {0x3c, 0xbc, 0x30, 0x28, 0x76, 0x78, 0xfe, 0x00, 0x2c, 0xac, 0x3a, 0x50, 0x30, 0xb0, 0x18, 0x64}},
        {RK_SCALE_MUL,
         {0x4c, 0xcc, 0x40, 0x38, 0x7e, 0x7e, 0xfe, 0x00, 0x3c, 0xbc, 0x4a, 0x60, 0x40, 0xc0, 0x28, 0x74}},
        {RK_SCALE_NONE,
         {0x44, 0xc4, 0x38, 0x30, 0x7e, 0x7e, 0xfe, 0x00, 0x34, 0xb4, 0x42, 0x58, 0x38, 0xb8, 0x20, 0x6c}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint8_t got[16];
        run_q_fp8(cases[i].scale, ROPEKV_Q_ABSORBED, nope, pe, 2.0f, got);
        check8(got, cases[i].want, 16, "absorbed");
        run_q_fp8(cases[i].scale, ROPEKV_Q_ZERO_COPY, nope, pe, 2.0f, got);
        for (int j = 0; j < 8; j++) assert_int_equal(got[j], SENT8);
        check8(got + 8, cases[i].want + 8, 8, "zero_copy");
        run_q_fp8(cases[i].scale, ROPEKV_Q_INPLACE, nope, pe, 2.0f, got);
        check8(got, cases[i].want + 8, 8, "inplace");
        uint16_t rest[4];
        for (int j = 0; j < 4; j++) rest[j] = rk_f32_to_bf16(pe[4 + j]);
        assert_memory_equal(got + 8, rest, 8); /* bf16 values 4..7 of the row, as they were */
    }
    /* q_scale = 1/448 with mul_recip: 1/(1/448) is 448 in f32; 1 * 448 = 448 (0x7e), 0.5 -> 224 (0x76),
     * 3 and 500 saturate */
    uint8_t got[16];
    run_q_fp8(RK_SCALE_MUL_RECIP, ROPEKV_Q_ABSORBED, nope, pe, 1.0f / 448.0f, got);
    const uint8_t sat[4] = {0x7e, 0xfe, 0x7e, 0x76};
    check8(got, sat, 4, "saturated");
}

/* q_fp8.rope_bf16 rounds the query's rope floats to bf16 first, independent of the cache's setting: the
 * values of test_op_fp8_rope_bf16 (y0 = 1.0634765625, y1 = 2.126953125) land on 0x39 0x41 directly
 * and on 0x38 0x40 through bf16. */
static void test_op_fp8_query_rope_bf16(void **state) {
    (void)state;
    enum { L = 8, R = 8, W = 16 };
    float table[8] = {1.0634765625f, 1, 1, 1, 0, 0, 0, 0};
    const float qpe[R] = {1, 2, 1, 1, 3, 0.5f, -1, 1};
    for (int rr = 0; rr < 2; rr++) {
        setup s;
        setup_init(&s, RK_ROPE_GPTJ, RK_CS_F32_CAT);
        s.spec.q_fp8.rope_bf16 = rr;
        s.spec.fp8.rope_bf16 = !rr; /* the cache's setting does not reach the query */
        s.spec.q_fp8.scale = RK_SCALE_NONE;
        s.spec.q_fp8.sat_ocp = 448.0f;
        s.v.q = ROPEKV_Q_ZERO_COPY;
        s.v.q_dtype = ROPEKV_Q_FP8_E4M3;
        uint16_t q_pe[R];
        uint8_t q_out[W];
        put_f(q_pe, qpe, R);
        fill8(q_out, W, SENT8);
        int64_t pos = 0;
        rk_args a = {
            .q_pe = q_pe,
            .q_out = q_out,
            .positions = &pos,
            .cos_sin = table,
            .tokens = 1,
            .heads = 1,
            .max_pos = 1,
            .q_pe_st = R,
            .q_pe_sh = R,
            .q_out_st = W,
            .q_out_sh = W,
            .kv_tokens = ROPEKV_KV_TOKENS_NONE,
        };
        ref_run(&s, &a);
        assert_int_equal(q_out[L], rr ? 0x38 : 0x39);
        assert_int_equal(q_out[L + 1], rr ? 0x40 : 0x41);
        assert_int_equal(q_out[L + 4], 0x44); /* 3 */
    }
}

/* ---- the op: consistency between layouts on random data ---------------------------------------- */

/* Same numbers through different layouts must give the same bits: f32_cat vs f32_split vs bf16_split
 * (tables holding bf16 values), int32 vs int64 indices, absorbed vs zero_copy vs inplace, and GPT-J
 * on x vs NeoX on x with its pairs regrouped (x[2i], x[2i+1]) -> (x[i], x[i+R/2]). */
static void test_op_layout_consistency(void **state) {
    (void)state;
    enum { T = 5, H = 3, L = 8, R = 8, W = 16, P = 6 };
    uint16_t q_nope[T * H * L], q_pe[T * H * R], q_pe_nx[T * H * R], k_nope[T * L], k_pe[T * R], k_pe_nx[T * R];
    float cat[P * R], cs[P * R / 2], sn[P * R / 2];
    uint16_t cs16[P * R / 2], sn16[P * R / 2];
    int64_t pos64[T], slot64[T];
    int32_t pos32[T], slot32[T];
    for (int i = 0; i < T * H * L; i++) q_nope[i] = (uint16_t)(rng32() & 0xbfffu); /* finite */
    for (int i = 0; i < T * H * R; i++) q_pe[i] = (uint16_t)(rng32() & 0xbfffu);
    for (int i = 0; i < T * L; i++) k_nope[i] = (uint16_t)(rng32() & 0xbfffu);
    for (int i = 0; i < T * R; i++) k_pe[i] = (uint16_t)(rng32() & 0xbfffu);
    for (int i = 0; i < T * H; i++)
        for (int j = 0; j < R / 2; j++) {
            q_pe_nx[i * R + j] = q_pe[i * R + 2 * j];
            q_pe_nx[i * R + R / 2 + j] = q_pe[i * R + 2 * j + 1];
        }
    for (int t = 0; t < T; t++)
        for (int j = 0; j < R / 2; j++) {
            k_pe_nx[t * R + j] = k_pe[t * R + 2 * j];
            k_pe_nx[t * R + R / 2 + j] = k_pe[t * R + 2 * j + 1];
        }
    for (int p = 0; p < P; p++)
        for (int i = 0; i < R / 2; i++) {
            /* bf16-exact values in (-2, 2) */
            cs16[p * 4 + i] = (uint16_t)(0x3c00u + (rng32() % 0x380u)) | (uint16_t)(rng32() & 0x8000u);
            sn16[p * 4 + i] = (uint16_t)(0x3c00u + (rng32() % 0x380u)) | (uint16_t)(rng32() & 0x8000u);
            cs[p * 4 + i] = cat[p * R + i] = rk_bf16_to_f32(cs16[p * 4 + i]);
            sn[p * 4 + i] = cat[p * R + 4 + i] = rk_bf16_to_f32(sn16[p * 4 + i]);
        }
    for (int t = 0; t < T; t++) {
        pos32[t] = (int32_t)(rng32() % (P + 4)) - 2;
        slot32[t] = t == 1 ? -1 : t;
        pos64[t] = pos32[t];
        slot64[t] = slot32[t];
    }

    uint16_t base_q[T * H * W], base_kv[T * W];
    for (int run = 0; run < 8; run++) {
        setup s;
        rk_cos_sin layout = (rk_cos_sin)(run % 3);
        int neox = run >= 4;
        setup_init(&s, neox ? RK_ROPE_NEOX : RK_ROPE_GPTJ, layout);
        s.v.pos = (run & 1) ? ROPEKV_INDEX_INT32 : ROPEKV_INDEX_INT64;
        s.v.slot = (run & 2) ? ROPEKV_INDEX_INT32 : ROPEKV_INDEX_INT64;
        s.v.q = (ropekv_q_form)((run + run / 3) % 3); /* absorbed, zero_copy, inplace */
        uint16_t q_out[T * H * W], kv[T * W], q_pe_run[T * H * R];
        fill16(q_out, T * H * W, 0);
        fill16(kv, T * W, 0);
        memcpy(q_pe_run, neox ? q_pe_nx : q_pe, sizeof q_pe_run);
        if (s.v.q != ROPEKV_Q_ABSORBED)
            for (int i = 0; i < T * H; i++) memcpy(q_out + i * W, q_nope + i * L, L * sizeof(uint16_t));
        rk_args a = {
            .q_nope = q_nope,
            .q_pe = q_pe_run,
            .q_out = q_out,
            .k_nope = k_nope,
            .k_pe = neox ? k_pe_nx : k_pe,
            .kv_cache = kv,
            .positions = s.v.pos == ROPEKV_INDEX_INT32 ? (const void *)pos32 : (const void *)pos64,
            .slots = s.v.slot == ROPEKV_INDEX_INT32 ? (const void *)slot32 : (const void *)slot64,
            .cos_sin = layout == RK_CS_F32_CAT     ? (const void *)cat
                       : layout == RK_CS_F32_SPLIT ? (const void *)cs
                                                   : (const void *)cs16,
            .sin = layout == RK_CS_F32_SPLIT ? (const void *)sn : (const void *)sn16,
            .tokens = T,
            .heads = H,
            .max_pos = P,
            .q_nope_st = H * L,
            .q_nope_sh = L,
            .q_pe_st = H * R,
            .q_pe_sh = R,
            .q_out_st = H * W,
            .q_out_sh = W,
            .k_nope_st = L,
            .k_pe_st = R,
            .kv_st = W,
            .kv_rows = T,
        };
        ref_run(&s, &a);
        if (s.v.q == ROPEKV_Q_INPLACE)
            for (int i = 0; i < T * H; i++) memcpy(q_out + i * W + L, q_pe_run + i * R, R * sizeof(uint16_t));
        if (neox) { /* regroup back to the GPT-J order */
            uint16_t tmp[R];
            for (int i = 0; i < T * H; i++) {
                for (int j = 0; j < R / 2; j++) {
                    tmp[2 * j] = q_out[i * W + L + j];
                    tmp[2 * j + 1] = q_out[i * W + L + R / 2 + j];
                }
                memcpy(q_out + i * W + L, tmp, sizeof tmp);
            }
            for (int t = 0; t < T; t++) {
                for (int j = 0; j < R / 2; j++) {
                    tmp[2 * j] = kv[t * W + L + j];
                    tmp[2 * j + 1] = kv[t * W + L + R / 2 + j];
                }
                memcpy(kv + t * W + L, tmp, sizeof tmp);
            }
        }
        if (run == 0) {
            memcpy(base_q, q_out, sizeof base_q);
            memcpy(base_kv, kv, sizeof base_kv);
            /* the row of the negative slot stays untouched */
            for (int j = 0; j < W; j++) assert_int_equal(kv[1 * W + j], 0);
        } else {
            check16(q_out, base_q, T * H * W, "q_out vs baseline");
            check16(kv, base_kv, T * W, "kv vs baseline");
        }
    }
}

/* ---- the fused kv_a RMSNorm ------------------------------------------------------------------------------
 * A spec of kv_lora_rank L (16 or 64) with the kv_norm {weight, eps, rounding}; q form none, rope none (the row's
 * rope part is k_pe rounded to bf16: KD_BITS), one cache row of NSTRIDE elements per slot. */
enum { NMAX = 64, NR = 8, NSTRIDE = 80, NT = 6 };

static void setup_norm(setup *s, int L, rk_norm_weight w, float eps, rk_norm_round r, ropekv_norm norm) {
    setup_init(s, RK_ROPE_NONE, RK_CS_F32_CAT);
    s->spec.kv_lora_rank = L;
    s->spec.norm = (rk_norm_policy){.weight = w, .eps = eps, .round = r, .over = RK_NO_LATENT, .matches = ""};
    s->v.q = ROPEKV_Q_NONE;
    s->v.norm = norm;
}

/* Tokens [0, K) of k_nope (rows of L at stride L) through the reference with the weight w: token t to slot t of K
 * rows of NSTRIDE cache elements in kv (bf16, or bytes for fp8 rows; k_scale 0.37), norm_out rows at stride L + 8.
 * The inputs must come back unchanged. */
static void norm_run(setup *s, const uint16_t *k_nope, int64_t K, const void *w, void *kv, uint16_t *norm_out) {
    const int L = s->spec.kv_lora_rank;
    uint16_t k_pe[NT * NR], x0[NT * NMAX];
    int64_t pos[NT] = {0}, ident[NT] = {0, 1, 2, 3, 4, 5};
    float cs[NR] = {1, 1, 1, 1, 0, 0, 0, 0}, k_scale = 0.37f; /* an fp8 row's scale (mul_recip: x * (1 / 0.37)) */
    assert_true(K <= NT && L <= NMAX);
    for (int t = 0; t < K; t++) put_h(k_pe + t * NR, KD_BITS, NR);
    memcpy(x0, k_nope, (size_t)(K * L) * 2);
    rk_args a = {.k_nope = k_nope,
                 .k_pe = k_pe,
                 .kv_cache = kv,
                 .positions = pos,
                 .slots = ident,
                 .cos_sin = cs,
                 .tokens = K,
                 .heads = 1,
                 .max_pos = 1,
                 .k_nope_st = L,
                 .k_pe_st = NR,
                 .kv_st = NSTRIDE,
                 .kv_rows = K,
                 .k_scale = &k_scale,
                 .norm_weight = w,
                 .norm_out = norm_out,
                 .norm_out_st = L + 8};
    ref_run(s, &a);
    check16(k_nope, x0, (size_t)(K * L), "k_nope (input)");
}

/* One token's normalized row n as the rms_out variant writes it (bf16 cache, no sanitize): the cache row's latent part
 * and norm_out hold the same bits, the rope part is k_pe's, and nothing past either is written. */
static void norm_row_of(setup *s, const uint16_t *x, const void *w, uint16_t *n) {
    const int L = s->spec.kv_lora_rank;
    uint16_t kv[2 * NSTRIDE], out[NMAX + 8];
    s->v.kv = ROPEKV_KV_BF16;
    s->v.norm = ROPEKV_NORM_RMS_OUT;
    fill16(kv, 2 * NSTRIDE, SENT16);
    fill16(out, NMAX + 8, SENT16);
    norm_run(s, x, 1, w, kv, out);
    check16(out, kv, (size_t)L, "norm_out (the bits the cache got)");
    check16(kv + L, KD_BITS, NR, "the row's rope part");
    for (int i = L + NR; i < 2 * NSTRIDE; i++) assert_int_equal(kv[i], SENT16);
    for (int i = L; i < NMAX + 8; i++) assert_int_equal(out[i], SENT16);
    memcpy(n, kv, (size_t)L * 2);
}

static void bf16_row(uint16_t *dst, const float *x, int n) {
    for (int i = 0; i < n; i++) dst[i] = rk_f32_to_bf16(x[i]);
}

/* A hand-computed row, L = 16, eps = 0.5, rounding twice, a bf16 weight. The sum of squares is 40 + 16 = 56, so
 * r = 1 / sqrt(56 / 16 + 0.5) = 1 / sqrt(4) = 0.5 exactly (without eps, or over L + R, or with a chunk lost it is
 * not); every x * r is exact, and n = bf16(x * r * w): 1.5 * 1.0078125 = 1.51171875 is a tie between bf16 1.5078125
 * and 1.515625 and goes to the even 1.515625; a zero times a negative weight is -0. */
static void test_norm_hand_case(void **state) {
    (void)state;
    setup s;
    setup_norm(&s, 16, RK_NW_BF16, 0.5f, RK_NR_TWICE, ROPEKV_NORM_RMS_OUT);
    const float x[16] = {3, -3, 4, 2, 1, 1, 0, 0, 2, -2, 2, 1, 1, 1, 1, 0};
    const float w[16] = {1.0078125f, 1.0078125f, 0.5f,   -1,         3,          1.5f, 2,    -2,
                         0.25f,      1.25f,      -0.75f, 1.0078125f, 1.9921875f, -3,   0.5f, 1};
    /* 1.515625, -1.515625, 1, -1, 1.5, 0.75, 0, -0, 0.25, -1.25, -0.75, 0.50390625, 0.99609375, -1.5, 0.25, 0 */
    const uint16_t want[16] = {0x3fc2, 0xbfc2, 0x3f80, 0xbf80, 0x3fc0, 0x3f40, 0x0000, 0x8000,
                               0x3e80, 0xbfa0, 0xbf40, 0x3f01, 0x3f7f, 0xbfc0, 0x3e80, 0x0000};
    uint16_t k_nope[16], wb[16], n[16];
    put_f(k_nope, x, 16);
    put_f(wb, w, 16);
    norm_row_of(&s, k_nope, wb, n);
    check16(n, want, 16, "normalized row");
}

/* The sum's order is the defined tree: chunk sums of 8 squares, then pairwise at strides 4, 2, 1 (L = 64); not the
 * running sum of the chunks, nor one running fma over the row, nor a tree over chunks of 16 or 32, nor pairs of
 * neighbours first (strides 1, 2, 4); and r is 1 / sqrt(), not sqrt(1 / ). Each row is built so that the other ways
 * give other floats and other bits.
 *   Row A (DeepSeek's arithmetic: bf16 weight of ones, rounding twice, eps 1e-6): x[0] = 4288, x[9] = 70, x[33] = 26.5
 *   and a 1 starting each chunk 1..7. Chunk sums 18386944, 4901, 1, 1, 703.25, 1, 1, 1 (f32 spacing 2 there).
 *   Tree: c0 + c4 = 18387647.25 -> 18387648, + (c2 + c6) = 18387650, + ((c1 + c5) + (c3 + c7)) = 4904 -> 18392554.
 *   Running sum: c0 + c1 = 18391845 is a tie that goes to 18391844, and after + 703.25 -> 18392548 each + 1 is a tie
 *   that stays: 18392548 (one fma over the row: the same). Neighbours first: 18391844 + 2, + 706.25 -> 18392552.
 *   Chunks of 16: 18391844 + 704.25 -> 18392548, + 4 = 18392552; of 32: 18392550.
 *   r = 1 / sqrt(18392554 / 64 + eps) = 0x1.e9p-10, exactly halfway between bf16 0x3af4 and 0x3af5: the ones become
 *   0x3af4 (ties to even); every other sum is smaller, its r larger, and the ones round up to 0x3af5 (as they do with
 *   sqrt(1 / (18392554 / 64 + eps)) = 0x1.e90002p-10).
 *   Row B (an f32 weight of 1.01171875, rounding once): x[0] = 4096 and the ones. Tree 2^24 + 6, running sum 2^24
 *   (every + 1 a tie to even): r = 2^-9 (1 - 2^-23) against 2^-9 exactly; 2^-9 * 1.01171875 is a bf16 tie that goes
 *   up to 0x3b02, the tree's r puts it just below: 0x3b01 (and x[0]: 0x4101, not 0x4102). */
static void test_norm_tree_order(void **state) {
    (void)state;
    setup s;
    uint16_t k_nope[64], wb[64], n[64], want[64];
    float x[64] = {0}, wf[64];
    x[0] = 4288;
    x[9] = 70;
    x[33] = 26.5f;
    for (int c = 1; c < 8; c++) x[8 * c] = 1;
    /* the other orders' sums, computed here (not by the reference) */
    float chunk[8], running = 0, row = 0, c16[4];
    for (int c = 0; c < 8; c++) {
        chunk[c] = 0;
        for (int i = 8 * c; i < 8 * c + 8; i++) chunk[c] = fmaf(x[i], x[i], chunk[c]);
        running += chunk[c];
    }
    for (int i = 0; i < 64; i++) row = fmaf(x[i], x[i], row);
    for (int c = 0; c < 4; c++) {
        c16[c] = 0;
        for (int i = 16 * c; i < 16 * c + 16; i++) c16[c] = fmaf(x[i], x[i], c16[c]);
    }
    assert_true(((chunk[0] + chunk[4]) + (chunk[2] + chunk[6])) + ((chunk[1] + chunk[5]) + (chunk[3] + chunk[7])) ==
                18392554.0f);
    assert_true(running == 18392548.0f && row == 18392548.0f);
    assert_true(((chunk[0] + chunk[1]) + (chunk[2] + chunk[3])) + ((chunk[4] + chunk[5]) + (chunk[6] + chunk[7])) ==
                18392552.0f);
    assert_true((c16[0] + c16[2]) + (c16[1] + c16[3]) == 18392552.0f);
    setup_norm(&s, 64, RK_NW_BF16, 1e-6f, RK_NR_TWICE, ROPEKV_NORM_RMS_OUT);
    bf16_row(k_nope, x, 64);
    for (int j = 0; j < 64; j++) wb[j] = 0x3f80;
    norm_row_of(&s, k_nope, wb, n);
    fill16(want, 64, 0x0000);
    want[0] = 0x4100;  /* 4288 r = 7.99878 -> 8 */
    want[9] = 0x3e06;  /* 70 r = 0.130577 */
    want[33] = 0x3d4a; /* 26.5 r = 0.0494328 */
    for (int c = 1; c < 8; c++) want[8 * c] = 0x3af4;
    check16(n, want, 64, "row A (tree order, rounding twice)");
    /* the largest of the other sums already rounds the ones up */
    assert_int_equal(rk_f32_to_bf16(1.0f / sqrtf(18392552.0f / 64.0f + 1e-6f)), 0x3af5);
    assert_int_equal(rk_f32_to_bf16(sqrtf(1.0f / (18392554.0f / 64.0f + 1e-6f))), 0x3af5);

    memset(x, 0, sizeof x);
    x[0] = 4096;
    for (int c = 1; c < 8; c++) x[8 * c] = 1;
    setup_norm(&s, 64, RK_NW_F32, 1e-6f, RK_NR_ONCE, ROPEKV_NORM_RMS_OUT);
    bf16_row(k_nope, x, 64);
    for (int j = 0; j < 64; j++) wf[j] = 1.01171875f;
    norm_row_of(&s, k_nope, wf, n);
    fill16(want, 64, 0x0000);
    want[0] = 0x4101;
    for (int c = 1; c < 8; c++) want[8 * c] = 0x3b01;
    check16(n, want, 64, "row B (tree order, rounding once)");
    /* the running sum's r (2^-9) would round the other way */
    assert_int_equal(rk_f32_to_bf16(0x1p-9f * 1.01171875f), 0x3b02);
}

/* Rounding twice (HF, vLLM) against once (FlashInfer): x all 1, L = 16, eps = 1, so r = 1 / sqrt(2) = 0x3f3504f3.
 * Twice rounds r to bf16 0.70703125 first: 0.70703125 * 1.046875 = 0.74017... lies below the bf16 midpoint
 * 0.740234375 (0x3f3d), r * 1.046875 = 0.74025... above it (0x3f3e); likewise for 1.2734375 and 1.7734375. A weight
 * of 1 gives bf16(r) either way. */
static void test_norm_rounding(void **state) {
    (void)state;
    setup s;
    const float w[4] = {1.046875f, 1.2734375f, 1.7734375f, 1};
    const uint16_t twice[4] = {0x3f3d, 0x3f66, 0x3fa0, 0x3f35}, once[4] = {0x3f3e, 0x3f67, 0x3fa1, 0x3f35};
    uint16_t k_nope[16], wb[16], n[16];
    fill16(k_nope, 16, 0x3f80);
    for (int j = 0; j < 16; j++) wb[j] = bfx(w[j % 4]);
    setup_norm(&s, 16, RK_NW_BF16, 1.0f, RK_NR_TWICE, ROPEKV_NORM_RMS_OUT);
    norm_row_of(&s, k_nope, wb, n);
    for (int j = 0; j < 16; j++) assert_int_equal(n[j], twice[j % 4]);
    setup_norm(&s, 16, RK_NW_BF16, 1.0f, RK_NR_ONCE, ROPEKV_NORM_RMS_OUT);
    norm_row_of(&s, k_nope, wb, n);
    for (int j = 0; j < 16; j++) assert_int_equal(n[j], once[j % 4]);
}

/* The weight's dtype: an f32 weight is read as 4-byte floats and used as it is. On the hand case's row (r = 0.5),
 * x = -3 gives x * r = -1.5: with w = 1.01171875 (no bf16 value) -1.5 w = -1.517578125 -> 0xbfc2; with its bf16
 * rounding 1.015625 (1.01171875 is a tie), -1.5234375 -> 0xbfc3. Every other element (x r of +-1, 0.5, 0 times
 * 1.01171875, a tie that goes to 1.015625's product; or a weight that is a bf16 value) gives the bf16 weight's bits. */
static void test_norm_weight_dtype(void **state) {
    (void)state;
    setup s;
    const float x[16] = {3, -3, 4, 2, 1, 1, 0, 0, 2, -2, 2, 1, 1, 1, 1, 0};
    float wf[16];
    uint16_t k_nope[16], wb[16], nf[16], nb[16];
    put_f(k_nope, x, 16);
    for (int j = 0; j < 16; j++) wf[j] = j % 2 ? 1.01171875f : (float)(j % 5) - 1.5f; /* -1.5 .. 2.5: bf16 values */
    for (int j = 0; j < 16; j++) wb[j] = rk_f32_to_bf16(wf[j]);
    assert_int_equal(wb[1], 0x3f82);
    setup_norm(&s, 16, RK_NW_F32, 0.5f, RK_NR_TWICE, ROPEKV_NORM_RMS_OUT);
    norm_row_of(&s, k_nope, wf, nf);
    setup_norm(&s, 16, RK_NW_BF16, 0.5f, RK_NR_TWICE, ROPEKV_NORM_RMS_OUT);
    norm_row_of(&s, k_nope, wb, nb);
    assert_int_equal(nf[1], 0xbfc2);
    assert_int_equal(nb[1], 0xbfc3);
    for (int j = 0; j < 16; j++)
        if (j != 1) assert_int_equal(nf[j], nb[j]);
    assert_int_equal(nb[0], 0xc010); /* 1.5 * -1.5 = -2.25 */
}

/* Rows at the ends of the range (eps = 2^-20, so sqrt(eps) = 2^-10 is exact):
 *   squares that overflow the sum: sum inf, r = 0, every n a zero of the sign of x * w, an inf element inf * 0 = NaN;
 *   a NaN anywhere: the sum and r NaN, every n the canonical NaN 0x7fff;
 *   an all-zero row: r = 1 / sqrt(eps) = 1024, n = +-0 (never 0 * inf = NaN: eps keeps r finite);
 *   a near-zero row (2^-30, a bf16 subnormal 2^-133, -0): the sum 2^-60 vanishes beside eps, r = 1024 exactly, and
 *   n = x * 1024 * w: 2^-20 * 1.5 and -2^-123 (a subnormal input is not flushed). */
static void test_norm_special_rows(void **state) {
    (void)state;
    setup s;
    setup_norm(&s, 16, RK_NW_BF16, 0x1p-20f, RK_NR_TWICE, ROPEKV_NORM_RMS_OUT);
    const float w[16] = {1.5f, -1, 2, 0.5f, 1, -2, 1, 1, 3, 1, -1, 1, 0.25f, 1, 1, -0.5f};
    uint16_t k_nope[16], wb[16], n[16], want[16];
    put_f(wb, w, 16);
    for (int j = 0; j < 16; j++) k_nope[j] = rk_f32_to_bf16(j % 3 ? 1e19f : -2e19f);
    norm_row_of(&s, k_nope, wb, n);
    for (int j = 0; j < 16; j++) assert_int_equal(n[j], (j % 3 == 0) != (w[j] < 0) ? 0x8000 : 0x0000);
    k_nope[4] = 0x7f80; /* +inf */
    norm_row_of(&s, k_nope, wb, n);
    for (int j = 0; j < 16; j++) assert_int_equal(n[j], j == 4 ? 0x7fff : (j % 3 == 0) != (w[j] < 0) ? 0x8000 : 0x0000);
    for (int j = 0; j < 16; j++) k_nope[j] = bfx((float)(j % 7) - 3.0f);
    k_nope[11] = 0xffc1; /* a NaN with a payload and a sign */
    norm_row_of(&s, k_nope, wb, n);
    for (int j = 0; j < 16; j++) assert_int_equal(n[j], 0x7fff);
    for (int j = 0; j < 16; j++) k_nope[j] = j % 5 ? 0x0000 : 0x8000;
    norm_row_of(&s, k_nope, wb, n);
    for (int j = 0; j < 16; j++) assert_int_equal(n[j], (j % 5 == 0) != (w[j] < 0) ? 0x8000 : 0x0000);
    fill16(k_nope, 16, 0x0000);
    k_nope[0] = bfx(0x1p-30f);
    k_nope[1] = 0x0001; /* 2^-133 */
    k_nope[2] = 0x8000;
    norm_row_of(&s, k_nope, wb, n);
    for (int j = 0; j < 16; j++) want[j] = w[j] < 0 ? 0x8000 : 0x0000;
    want[0] = 0x35c0; /* 2^-20 * 1.5 */
    want[1] = 0x8200; /* 2^-123 * -1 */
    want[2] = 0x8000; /* -0 * 2 */
    check16(n, want, 16, "near-zero row");
    /* the same row with eps 1e-6: r = 1 / sqrtf(1e-6f), not a power of two, and other bits */
    setup_norm(&s, 16, RK_NW_BF16, 1e-6f, RK_NR_TWICE, ROPEKV_NORM_RMS_OUT);
    norm_row_of(&s, k_nope, wb, n);
    assert_int_not_equal(n[0], 0x35c0);
}

/* With sanitize the bf16 cache gets the sanitized n (a NaN -> 0), norm_out n itself: the definition stores n. */
static void test_norm_sanitize(void **state) {
    (void)state;
    setup s;
    setup_norm(&s, 16, RK_NW_BF16, 1e-6f, RK_NR_TWICE, ROPEKV_NORM_RMS_OUT);
    s.spec.sanitize = 1;
    uint16_t k_nope[16], wb[16], kv[NSTRIDE], out[16 + 8];
    fill16(wb, 16, 0x3f80);
    for (int j = 0; j < 16; j++) k_nope[j] = bfx((float)j - 8.0f);
    k_nope[3] = 0x7fc0;
    fill16(kv, NSTRIDE, SENT16);
    fill16(out, 16 + 8, SENT16);
    norm_run(&s, k_nope, 1, wb, kv, out);
    for (int j = 0; j < 16; j++) {
        assert_int_equal(kv[j], 0x0000);
        assert_int_equal(out[j], 0x7fff);
    }
}

/* The normalized values feed the whole row: for fp8 e4m3 rows (OCP with mul_recip and k_scale, FNUZ with sanitize)
 * and fp8_tile rows (raw and pow2 scales, sanitize) a norm variant writes exactly the bytes that the norm-none
 * variant writes from a k_nope of n (the rms_out variant's norm_out), fp8 scales and tile scales included; and not
 * the bytes it writes from x itself. Rows: random values of several magnitudes, a NaN row, an all-zero row, an
 * overflowing row. */
static void test_norm_feeds_the_row(void **state) {
    (void)state;
    enum { L = 16, K = NT };
    uint16_t x[K * L], n[K * L], wb[L], out[K * (L + 8)], bf[K * NSTRIDE];
    uint8_t with_norm[2 * K * NSTRIDE], from_n[2 * K * NSTRIDE], from_x[2 * K * NSTRIDE]; /* bf16 or fp8 rows */
    for (int t = 0; t < 3; t++)
        for (int j = 0; j < L; j++) {
            const float m = t == 0 ? 1.0f : t == 1 ? 300.0f : 0.01f;
            x[t * L + j] = rk_f32_to_bf16(m * ((float)(int)(rng32() % 2001) - 1000.0f) / 250.0f);
        }
    for (int j = 0; j < L; j++) {
        x[3 * L + j] = j == 5 ? 0x7fc0 : bfx(1.0f);
        x[4 * L + j] = j % 2 ? 0x0000 : 0x8000;
        x[5 * L + j] = rk_f32_to_bf16(j % 2 ? 3e19f : -2e19f);
    }
    for (int j = 0; j < L; j++) wb[j] = rk_f32_to_bf16((float)(j % 9) * 0.25f - 0.75f);
    setup s;
    setup_norm(&s, L, RK_NW_BF16, 1e-6f, RK_NR_TWICE, ROPEKV_NORM_RMS_OUT);
    fill16(bf, K * NSTRIDE, SENT16);
    norm_run(&s, x, K, wb, bf, out);
    for (int t = 0; t < K; t++) {
        memcpy(n + t * L, out + t * (L + 8), L * 2);
        check16(bf + t * NSTRIDE, n + t * L, L, "a bf16 cache row and its norm_out row");
    }
    static const struct {
        ropekv_kv_dtype kv;
        rk_fp8_fmt fmt;
        int sanitize;
        rk_tile_scale tile;
    } rows[] = {
        {ROPEKV_KV_FP8_E4M3, RK_FP8_OCP, 0, RK_TILE_F32}, {ROPEKV_KV_FP8_E4M3, RK_FP8_FNUZ, 1, RK_TILE_F32},
        {ROPEKV_KV_FP8_TILE, RK_FP8_OCP, 0, RK_TILE_F32}, {ROPEKV_KV_FP8_TILE, RK_FP8_FNUZ, 1, RK_TILE_POW2},
        {ROPEKV_KV_BF16, RK_FP8_OCP, 1, RK_TILE_F32},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        uint8_t *dst[3] = {with_norm, from_n, from_x};
        for (int run = 0; run < 3; run++) {
            setup_norm(&s, L, RK_NW_BF16, 1e-6f, RK_NR_TWICE, run == 0 ? ROPEKV_NORM_RMS : ROPEKV_NORM_NONE);
            s.v.kv = rows[i].kv;
            s.arch.fp8 = rows[i].fmt;
            s.spec.sanitize = rows[i].sanitize;
            s.spec.fp8.scale = RK_SCALE_MUL_RECIP;
            s.spec.tile = (rk_tile_policy){8, rows[i].tile, 448.0f, 240.0f, T_SCALES, T_ROPE, T_ROW, "", ""};
            memset(dst[run], SENT8, sizeof with_norm);
            norm_run(&s, run == 1 ? n : x, K, run == 0 ? (const void *)wb : NULL, dst[run], NULL);
        }
        if (memcmp(with_norm, from_n, sizeof with_norm) != 0) {
            for (size_t b = 0; b < sizeof with_norm; b++)
                if (with_norm[b] != from_n[b])
                    fail_msg("row kind %zu: byte %zu: the norm variant wrote 0x%02x, the row of n is 0x%02x", i, b,
                             with_norm[b], from_n[b]);
        }
        assert_memory_not_equal(with_norm, from_x, sizeof with_norm);
    }
}

/* norm_out rows: one for every KV token whatever its slot (negative under skip_kv, past kv_rows, below min_slot), none
 * for a negative slot under skip_all or for a token past kv_tokens, and none at all from the rms variant (which writes
 * the same cache rows); the padding between rows is never written. Tokens 0..3 have KV rows (slots 2, -1, 9 past the
 * 4 rows, 1 below min_slot 2), token 4 only a query row (its slot 3 is not read). */
/* DeepSeek-V4's geometry on a hand case (L = R = 8, W = 16, eps 0.5, GPT-J with cos 0 and sin 1 at position 0, so
 * a pair (x0, x1) turns into (-x1, x0)): the kv norm over the whole head and the weightless query norm, both before
 * the rotation, and padded query heads. The head's values are test_norm_hand_case's: the sum of squares over all 16
 * is 56, r = 1 / sqrt(56 / 16 + 0.5) = 0.5 exactly (over the latent alone it would be 1 / sqrt(40 / 8 + 0.5)).
 *   KV: n = that case's row; the latent is n[0, 8), the rope part n[8, 16) rotated: (0.25, -1.25) -> (1.25, 0.25),
 *       (-0.75, 0.50390625) -> (-0.50390625, -0.75), (0.99609375, -1.5) -> (1.5, 0.99609375), (0.25, 0) -> (+0,
 *       0.25) (fmaf(0.25, 0, -0) = +0).
 *   q:  n = bf16(x * 0.5) (no weight): 1.5, -1.5, 2, 1, 0.5, 0.5, 0, 0 | 1, -1, 1, 0.5, 0.5, 0.5, 0.5, 0, the rope
 *       part rotated: 1, 1, -0.5, 1, -0.5, 0.5, +0, 0.5. Heads 1 and 2 of q_heads = 3 are zeros. */
static void test_v4_head(void **state) {
    (void)state;
    enum { L = 8, R = 8, W = 16, QH = 3 };
    setup s;
    setup_init(&s, RK_ROPE_GPTJ, RK_CS_F32_CAT);
    s.spec.norm = (rk_norm_policy){.weight = RK_NW_BF16, .eps = 0.5f, .round = RK_NR_TWICE, .over = RK_NO_HEAD};
    s.spec.q_norm = (rk_q_norm_policy){.norm = RK_QN_RMS, .eps = 0.5f};
    s.v.norm = ROPEKV_NORM_RMS;
    const float x[W] = {3, -3, 4, 2, 1, 1, 0, 0, 2, -2, 2, 1, 1, 1, 1, 0};
    const float w[W] = {1.0078125f, 1.0078125f, 0.5f,   -1,         3,          1.5f, 2,    -2,
                        0.25f,      1.25f,      -0.75f, 1.0078125f, 1.9921875f, -3,   0.5f, 1};
    const uint16_t want_kv[W] = {0x3fc2, 0xbfc2, 0x3f80, 0xbf80, 0x3fc0, 0x3f40, 0x0000, 0x8000,
                                 0x3fa0, 0x3e80, 0xbf01, 0xbf40, 0x3fc0, 0x3f7f, 0x0000, 0x3e80};
    const uint16_t want_q[W] = {0x3fc0, 0xbfc0, 0x4000, 0x3f80, 0x3f00, 0x3f00, 0x0000, 0x0000,
                                0x3f80, 0x3f80, 0xbf00, 0x3f80, 0xbf00, 0x3f00, 0x0000, 0x3f00};
    uint16_t head[W], wb[W], kv[W + 4], q_out[QH * W + 4], zeros[W] = {0};
    int64_t pos[1] = {0}, slot[1] = {0};
    float cs[R] = {0, 0, 0, 0, 1, 1, 1, 1};
    put_f(head, x, W);
    put_f(wb, w, W);
    fill16(kv, W + 4, SENT16);
    fill16(q_out, QH * W + 4, SENT16);
    rk_args a = {.q_nope = head,
                 .q_pe = head + L,
                 .q_out = q_out,
                 .k_nope = head,
                 .k_pe = head + L,
                 .kv_cache = kv,
                 .positions = pos,
                 .slots = slot,
                 .cos_sin = cs,
                 .tokens = 1,
                 .heads = 1,
                 .q_heads = QH,
                 .max_pos = 1,
                 .q_nope_st = W,
                 .q_pe_st = W,
                 .q_out_st = QH * W,
                 .q_out_sh = W,
                 .k_nope_st = W,
                 .k_pe_st = W,
                 .kv_st = W,
                 .kv_rows = 1,
                 .norm_weight = wb};
    ref_run(&s, &a);
    check16(kv, want_kv, W, "kv row");
    check16(q_out, want_q, W, "q_out head 0");
    check16(q_out + W, zeros, W, "q_out head 1 (padded)");
    check16(q_out + 2 * W, zeros, W, "q_out head 2 (padded)");
    for (int i = 0; i < 4; i++) assert_int_equal(kv[W + i], SENT16);
    for (int i = 0; i < 4; i++) assert_int_equal(q_out[QH * W + i], SENT16);
    /* over the latent alone the factor differs, so does every value */
    s.spec.norm.over = RK_NO_LATENT;
    s.spec.q_norm.norm = RK_QN_NONE;
    fill16(kv, W + 4, SENT16);
    ref_run(&s, &a);
    assert_int_not_equal(kv[0], want_kv[0]);
}

static void test_norm_out_rows(void **state) {
    (void)state;
    enum { L = 16, T = 5, K = 4, ROWS = 4, OST = L + 8 };
    uint16_t x[T * L], wb[L], n[T][L], kv[ROWS * NSTRIDE], kv_rms_out[ROWS * NSTRIDE], out[T * OST];
    int64_t pos[T] = {0}, slots[T] = {2, -1, 9, 1, 3};
    float cs[NR] = {1, 1, 1, 1, 0, 0, 0, 0};
    uint16_t k_pe[T * NR];
    for (int i = 0; i < T * L; i++) x[i] = rk_f32_to_bf16((float)((i * 37) % 23) - 11.0f);
    for (int j = 0; j < L; j++) wb[j] = rk_f32_to_bf16(0.5f + (float)j / 8.0f);
    for (int t = 0; t < T; t++) put_h(k_pe + t * NR, KD_BITS, NR);
    setup s;
    for (int t = 0; t < T; t++) {
        setup_norm(&s, L, RK_NW_BF16, 1e-6f, RK_NR_TWICE, ROPEKV_NORM_RMS_OUT);
        norm_row_of(&s, x + t * L, wb, n[t]);
    }
    for (int mode = 0; mode < 3; mode++) { /* rms_out skip_kv, rms_out skip_all, rms */
        setup_norm(&s, L, RK_NW_BF16, 1e-6f, RK_NR_TWICE, mode == 2 ? ROPEKV_NORM_RMS : ROPEKV_NORM_RMS_OUT);
        s.spec.negative_slot = mode == 1 ? RK_NEG_SKIP_ALL : RK_NEG_SKIP_KV;
        fill16(kv, ROWS * NSTRIDE, SENT16);
        fill16(out, T * OST, SENT16);
        rk_args a = {.k_nope = x,
                     .k_pe = k_pe,
                     .kv_cache = kv,
                     .positions = pos,
                     .slots = slots,
                     .cos_sin = cs,
                     .tokens = T,
                     .kv_tokens = K,
                     .min_slot = 2,
                     .heads = 1,
                     .max_pos = 1,
                     .k_nope_st = L,
                     .k_pe_st = NR,
                     .kv_st = NSTRIDE,
                     .kv_rows = ROWS,
                     .norm_weight = wb,
                     .norm_out = out,
                     .norm_out_st = OST};
        ref_run(&s, &a);
        /* the cache: slot 2 only (token 0), the same bits whichever variant wrote it */
        check16(kv + 2 * NSTRIDE, n[0], L, "cache row of slot 2");
        check16(kv + 2 * NSTRIDE + L, KD_BITS, NR, "rope part of slot 2");
        for (int i = 0; i < ROWS * NSTRIDE; i++)
            if (i < 2 * NSTRIDE || i >= 2 * NSTRIDE + L + NR) assert_int_equal(kv[i], SENT16);
        if (mode == 0) memcpy(kv_rms_out, kv, sizeof kv);
        else assert_memory_equal(kv, kv_rms_out, sizeof kv);
        for (int t = 0; t < T; t++) {
            const int written = mode != 2 && t < K && !(mode == 1 && slots[t] < 0);
            for (int j = 0; j < OST; j++) {
                const uint16_t want = written && j < L ? n[t][j] : SENT16;
                if (out[t * OST + j] != want)
                    fail_msg("mode %d: norm_out[%d][%d] = 0x%04x, want 0x%04x", mode, t, j, out[t * OST + j], want);
            }
        }
    }
}

/* ---- the record codec (gen/record_codec.c): hand-derived bytes ----------------------------------------------- */

/* A one-segment record over x[0, n) (L = n, R = 0 unless said): elem at byte 0, blocks of block values with
 * scales of type st (rule ru) inline at scales_at, bound sat for both fp8 formats. */
static rk_record one_segment(int n, rk_elem elem, int block, rk_scale_type st, rk_scale_rule ru, int scales_at,
                             float sat, int row_bytes) {
    rk_record r;
    memset(&r, 0, sizeof r);
    snprintf(r.name, sizeof r.name, "test");
    r.L = n;
    r.row_bytes = row_bytes;
    r.n_seg = 1;
    r.seg[0] = (rk_segment){.from = 0,
                            .n = n,
                            .elem = elem,
                            .at = 0,
                            .block = block,
                            .scale = st,
                            .rule = ru,
                            .scale_at = RK_SA_INLINE,
                            .scales_at = scales_at,
                            .sat_ocp = sat,
                            .sat_fnuz = sat,
                            .outer = RK_OUT_NONE};
    return r;
}

/* e2m1, no blocks: every midpoint of the grid {0, 0.5, 1, 1.5, 2, 3, 4, 6} is a tie that goes to the even code
 * (0.25 -> 0, 0.75 -> 1.0, 1.25 -> 1.0, 1.75 -> 2.0, 2.5 -> 2.0, 3.5 -> 4.0, 5 -> 4.0); 7 and -inf saturate; a NaN
 * is +6 (0x7), or 0 with sanitize; -0.25 rounds to -0 (0x8); the first value of a byte is its low nibble. */
static void test_codec_e2m1_ties(void **state) {
    (void)state;
    const rk_record r = one_segment(16, RK_EL_E2M1, 0, RK_ST_NONE, RK_SR_EXACT, 0, 6.0f, 8);
    const float x[16] = {0.25f, 0.75f,     1.25f, 1.75f, 2.5f, 3.5f, 5.0f, -0.25f,
                         7.0f,  -INFINITY, NAN,   0.2f,  5.1f, 0.0f, 1.5f, -3.5f};
    /* codes: 0, 2, 2, 4, 4, 6, 6, 8, 7, f, 7, 0, 7, 0, 3, e */
    const uint8_t want[8] = {0x20, 0x42, 0x64, 0x86, 0xf7, 0x07, 0x07, 0xe3};
    uint8_t row[8];
    rk_record_encode(&r, RK_FP8_OCP, x, r.L, 1.0f, RK_SCALE_NONE, 0, row, NULL);
    check8(row, want, 8, "e2m1 ties");
    const uint8_t want_clean[8] = {0x20, 0x42, 0x64, 0x86, 0xf7, 0x00, 0x07, 0xe3}; /* NaN -> 0 */
    rk_record_encode(&r, RK_FP8_OCP, x, r.L, 1.0f, RK_SCALE_NONE, 1, row, NULL);
    check8(row, want_clean, 8, "e2m1 ties, sanitized");
    float y[16];
    rk_record_decode(&r, RK_FP8_OCP, row, NULL, 1.0f, RK_SCALE_NONE, NULL, y);
    const float back[16] = {0, 1, 1, 2, 2, 4, 4, -0.0f, 6, -6, 0, 0, 6, 0, 1.5f, -4};
    for (int i = 0; i < 16; i++)
        if (fbits(y[i]) != fbits(back[i])) fail_msg("e2m1 value %d decodes to %a, want %a", i, y[i], back[i]);
}

/* e4m3, no blocks, no outer scale (OCP): ties between codes go to the even one (1.0625 -> 1.0 0x38, 1.1875 ->
 * 1.25 0x3a; subnormals: 2^-10 -> 0, 3 * 2^-10 -> 2^-8 0x02); 464 meets the clamp (448, 0x7e); NaN is 0x7f, or 0
 * with sanitize; -inf meets the clamp (0xfe) either way. */
static void test_codec_e4m3_ties(void **state) {
    (void)state;
    const rk_record r = one_segment(8, RK_EL_E4M3, 0, RK_ST_NONE, RK_SR_EXACT, 0, 448.0f, 8);
    const float x[8] = {1.0625f, 1.1875f, 0x1p-10f, 0x3p-10f, 464.0f, NAN, -INFINITY, -1.0625f};
    const uint8_t want[8] = {0x38, 0x3a, 0x00, 0x02, 0x7e, 0x7f, 0xfe, 0xb8};
    const uint8_t want_clean[8] = {0x38, 0x3a, 0x00, 0x02, 0x7e, 0x00, 0xfe, 0xb8};
    uint8_t row[8];
    rk_record_encode(&r, RK_FP8_OCP, x, r.L, 1.0f, RK_SCALE_NONE, 0, row, NULL);
    check8(row, want, 8, "e4m3 ties");
    rk_record_encode(&r, RK_FP8_OCP, x, r.L, 1.0f, RK_SCALE_NONE, 1, row, NULL);
    check8(row, want_clean, 8, "e4m3 ties, sanitized");
}

/* Blocks of 8 e4m3 values with UE8M0 scales (pow2_up) after 32 value bytes, sat 448 (OCP) or 240 (FNUZ):
 *   block 0  amax 448: s = 1 exactly a power of two, kept: byte 127; 448 -> 0x7e, 1.0625 a tie -> 0x38
 *   block 1  amax 449: s = 449/448 just above 1, up to 2: byte 128; 449/2 = 224.5 -> 224 (0x76), -3/2 -> 0xbc
 *   block 2  all zero (one -0): s = FLT_MIN: byte 1; the zeros stay +0 / -0
 *   block 3  amax 224: s = 0.5 exactly: byte 126; 224 / 0.5 = 448 -> 0x7e, 0.75 / 0.5 = 1.5 -> 0x3c
 * and the padding after the scales is zeroed. */
static void test_codec_ue8m0_blocks(void **state) {
    (void)state;
    const rk_record r = one_segment(32, RK_EL_E4M3, 8, RK_ST_UE8M0, RK_SR_POW2_UP, 32, 448.0f, 40);
    float x[32] = {0};
    x[0] = 448.0f, x[1] = 1.0625f;
    x[8] = 449.0f, x[9] = -3.0f;
    x[17] = -0.0f;
    x[24] = 224.0f, x[25] = 0.75f;
    uint8_t row[40];
    memset(row, 0xee, sizeof row);
    rk_record_encode(&r, RK_FP8_OCP, x, r.L, 1.0f, RK_SCALE_NONE, 0, row, NULL);
    uint8_t want[40] = {0};
    want[0] = 0x7e, want[1] = 0x38;
    want[8] = 0x76, want[9] = 0xbc;
    want[17] = 0x80;
    want[24] = 0x7e, want[25] = 0x3c;
    want[32] = 127, want[33] = 128, want[34] = 1, want[35] = 126;
    check8(row, want, 40, "UE8M0 blocks");
    float y[32];
    rk_record_decode(&r, RK_FP8_OCP, row, NULL, 1.0f, RK_SCALE_NONE, NULL, y);
    assert_true(y[0] == 448.0f && y[1] == 1.0f && y[8] == 448.0f && y[9] == -3.0f && y[24] == 224.0f && y[25] == 0.75f);
    /* FNUZ, sat 240: amax 240 -> s = 1, 240 -> 0x7f; 241 -> s = 2, 120.5 -> 120 (0x77) */
    const rk_record f = one_segment(32, RK_EL_E4M3, 8, RK_ST_UE8M0, RK_SR_POW2_UP, 32, 240.0f, 40);
    float z[32] = {0};
    z[0] = 240.0f, z[8] = 241.0f;
    rk_record_encode(&f, RK_FP8_FNUZ, z, f.L, 1.0f, RK_SCALE_NONE, 0, row, NULL);
    assert_int_equal(row[0], 0x7f);
    assert_int_equal(row[8], 0x77);
    assert_int_equal(row[32], 127);
    assert_int_equal(row[33], 128);
    assert_int_equal(row[34], 1);
}

/* Non-finite values in a UE8M0 block: an inf makes the scale inf (0xff, UE8M0's NaN), so the block's values are
 * NaN (0x7f) and a NaN alone is ignored by the amax (its block of 2s: s = 2/448 -> 2^-7, byte 120, 2 -> 256
 * (0x78)); with sanitize the inf is BF16_MAX = 2^128 - 2^120: s = BF16_MAX / 448 -> 2^120 (byte 247), the value
 * 255 -> 256 (0x78), 1 / 2^120 -> 0; the NaN is 0. */
static void test_codec_ue8m0_nonfinite(void **state) {
    (void)state;
    const rk_record r = one_segment(16, RK_EL_E4M3, 8, RK_ST_UE8M0, RK_SR_POW2_UP, 16, 448.0f, 20);
    float x[16];
    for (int i = 0; i < 16; i++) x[i] = i < 8 ? 1.0f : 2.0f;
    x[0] = INFINITY, x[9] = NAN;
    uint8_t row[20];
    rk_record_encode(&r, RK_FP8_OCP, x, r.L, 1.0f, RK_SCALE_NONE, 0, row, NULL);
    for (int i = 0; i < 8; i++) assert_int_equal(row[i], 0x7f);
    assert_int_equal(row[16], 0xff);
    assert_int_equal(row[8], 0x78);
    assert_int_equal(row[9], 0x7f);
    assert_int_equal(row[17], 120);
    rk_record_encode(&r, RK_FP8_OCP, x, r.L, 1.0f, RK_SCALE_NONE, 1, row, NULL);
    assert_int_equal(row[0], 0x78);
    for (int i = 1; i < 8; i++) assert_int_equal(row[i], 0x00);
    assert_int_equal(row[16], 247);
    assert_int_equal(row[9], 0x00);
    assert_int_equal(row[17], 120);
}

/* f32 scales, exact rule: an all-zero block takes FLT_MIN (0x00800000); a block holding the max (448) scale 1. */
static void test_codec_f32_blocks(void **state) {
    (void)state;
    const rk_record r = one_segment(16, RK_EL_E4M3, 8, RK_ST_F32, RK_SR_EXACT, 16, 448.0f, 24);
    float x[16] = {0};
    x[8] = -448.0f, x[9] = 0.5f;
    uint8_t row[24];
    rk_record_encode(&r, RK_FP8_OCP, x, r.L, 1.0f, RK_SCALE_NONE, 0, row, NULL);
    uint32_t s0, s1;
    memcpy(&s0, row + 16, 4);
    memcpy(&s1, row + 20, 4);
    assert_int_equal(s0, 0x00800000u);
    assert_int_equal(s1, 0x3f800000u);
    assert_int_equal(row[8], 0xfe);
    assert_int_equal(row[9], 0x30);
}

/* DeepSeek-V4.1 style: one e4m3 segment over the 576 values (the latent and the rotated rope part, rounded to bf16
 * first), blocks of 32 with UE8M0 scales inline after the values, 608 bytes (14 of padding). Each value comes back
 * within half an e4m3 step of its (rope: bf16-rounded) value: 2^-4 relative, or 2^-10 s among the subnormals. */
static void test_codec_v41_record(void **state) {
    (void)state;
    rk_record r;
    memset(&r, 0, sizeof r);
    snprintf(r.name, sizeof r.name, "v41");
    r.L = 512, r.R = 64, r.row_bytes = 608, r.n_seg = 1;
    r.seg[0] = (rk_segment){.from = 0,
                            .n = 576,
                            .elem = RK_EL_E4M3,
                            .at = 0,
                            .block = 32,
                            .scale = RK_ST_UE8M0,
                            .rule = RK_SR_POW2_UP,
                            .scale_at = RK_SA_INLINE,
                            .scales_at = 576,
                            .sat_ocp = 448.0f,
                            .sat_fnuz = 240.0f,
                            .outer = RK_OUT_NONE,
                            .rope_bf16 = 1};
    float x[576], y[576];
    for (int i = 0; i < 576; i++) x[i] = ldexpf((float)(int)(rng32() % 2001) - 1000.0f, (int)(rng32() % 20) - 12);
    for (int i = 0; i < 32; i++) x[i] = (float)((int)(rng32() % 2001) - 1000) / 16.0f;
    x[5] = 1792.0f; /* the max of block 0: s = 1792 / 448 = 4, byte 129, 448 -> 0x7e */
    uint8_t row[608];
    memset(row, 0xee, sizeof row);
    rk_record_encode(&r, RK_FP8_OCP, x, r.L, 1.0f, RK_SCALE_NONE, 0, row, NULL);
    assert_int_equal(row[576], 129);
    assert_int_equal(row[5], 0x7e);
    for (int i = 576 + 18; i < 608; i++) assert_int_equal(row[i], 0);
    rk_record_decode(&r, RK_FP8_OCP, row, NULL, 1.0f, RK_SCALE_NONE, NULL, y);
    for (int i = 0; i < 576; i++) {
        const float want = i >= 512 ? rk_bf16_to_f32(rk_f32_to_bf16(x[i])) : x[i];
        const float s = ldexpf(1.0f, (int)row[576 + i / 32] - 127);
        if (!(fabsf(y[i] - want) <= fabsf(want) * 0x1p-4f + s * 0x1p-10f))
            fail_msg("value %d: %a decodes to %a", i, want, y[i]);
    }
    /* read as FlashMLA's sm_100 reader (pow2_down) does: a UE8M0 scale is a power of two, read the same */
    const rk_reader rd = {"pow2_down", RK_RS_POW2_DOWN};
    float z[576];
    rk_record_decode(&r, RK_FP8_OCP, row, NULL, 1.0f, RK_SCALE_NONE, &rd, z);
    assert_memory_equal(y, z, sizeof y);
}

/* vLLM's DSA NVFP4 row (nvfp4_fp8rope) by hand: the block scale rounded up to an e4m3 value (6.375 / 6 = 1.0625,
 * whose nearest is 1.0: 1.125, 0x39; 15/512 exact: 0x0f), block b's scale at 320 + 8 (b % 4) + b / 4, the values
 * times the reciprocal of the decoded scale (1.25 d times 1 / d is 1.2500001: 1.5 (3), where the quotient 1.25 is a
 * tie to 1.0 (2)); the rope value rounded to bf16 first (1.0634765625 -> 1.0625, an e4m3 tie to 1.0: 0x38, not
 * 0x39). A floor: an all-zero UE8M0 block of floor 1e-4 stores 2^-13 (114). */
static void test_codec_rounded_up_interleaved(void **state) {
    (void)state;
    rk_record r;
    memset(&r, 0, sizeof r);
    snprintf(r.name, sizeof r.name, "nvfp4_fp8rope");
    r.L = 512, r.R = 64, r.row_bytes = 352, r.n_seg = 2;
    r.seg[0] = (rk_segment){.from = 0,
                            .n = 512,
                            .elem = RK_EL_E2M1,
                            .at = 0,
                            .block = 16,
                            .scale = RK_ST_E4M3,
                            .rule = RK_SR_UP,
                            .scale_at = RK_SA_INLINE,
                            .scales_at = 320,
                            .sat_ocp = 6.0f,
                            .sat_fnuz = 6.0f,
                            .block_conv = RK_BC_MUL_RECIP,
                            .interleave = 4};
    r.seg[1] = (rk_segment){
        .from = 512, .n = 64, .elem = RK_EL_E4M3, .at = 256, .sat_ocp = 448.0f, .sat_fnuz = 240.0f, .rope_bf16 = 1};
    float x[576] = {0}, y[576];
    const float d = 15.0f / 512.0f;
    for (int i = 0; i < 16; i++) x[i] = 6.375f;
    x[16] = 6.0f * d, x[17] = 1.25f * d, x[64] = 6.375f, x[512] = 1.0634765625f;
    uint8_t row[352];
    rk_record_encode(&r, RK_FP8_OCP, x, r.L, 1.0f, RK_SCALE_NONE, 0, row, NULL);
    assert_int_equal(row[320], 0x39); /* block 0 */
    assert_int_equal(row[328], 0x0f); /* block 1 */
    assert_int_equal(row[321], 0x39); /* block 4 */
    assert_int_equal(row[336], 0x01); /* block 2, all zero */
    assert_int_equal(row[0], 0x77);   /* 6.375 / 1.125 = 5.67: 6, 6 */
    assert_int_equal(row[8], 0x37);   /* 6 d / d: 6 (7); 1.25 d * (1 / d): 1.5 (3) */
    assert_int_equal(row[256], 0x38);
    rk_record_decode(&r, RK_FP8_OCP, row, NULL, 1.0f, RK_SCALE_NONE, NULL, y);
    assert_true(y[0] == 6.0f * 1.125f && y[17] == 1.5f * d && y[64] == 6.0f * 1.125f && y[512] == 1.0f);
    /* division instead: the tie goes to 1.0 */
    r.seg[0].block_conv = RK_BC_DIV;
    rk_record_encode(&r, RK_FP8_OCP, x, r.L, 1.0f, RK_SCALE_NONE, 0, row, NULL);
    assert_int_equal(row[8], 0x27);
    /* a floor */
    rk_record f;
    memset(&f, 0, sizeof f);
    snprintf(f.name, sizeof f.name, "floor");
    f.L = 32, f.R = 0, f.row_bytes = 48, f.n_seg = 1;
    f.seg[0] = (rk_segment){.from = 0,
                            .n = 32,
                            .elem = RK_EL_E4M3,
                            .at = 0,
                            .block = 32,
                            .scale = RK_ST_UE8M0,
                            .rule = RK_SR_POW2_UP,
                            .scales_at = 32,
                            .sat_ocp = 448.0f,
                            .sat_fnuz = 240.0f,
                            .floor = 1e-4f};
    float z[32] = {0};
    uint8_t frow[48];
    rk_record_encode(&f, RK_FP8_OCP, z, f.L, 1.0f, RK_SCALE_NONE, 0, frow, NULL);
    assert_int_equal(frow[32], 114);
    z[3] = 448.0f * 0x1p-14f; /* s = 2^-14, under the floor: still 114 */
    rk_record_encode(&f, RK_FP8_OCP, z, f.L, 1.0f, RK_SCALE_NONE, 0, frow, NULL);
    assert_int_equal(frow[32], 114);
    assert_int_equal(frow[3], 0x76); /* 448 2^-14 / 2^-13 = 224 = 1.75 2^7 */
}

/* Rule exact_zero (nvfp4_ds_mla's e4m3 block scales), by hand. Block 0's amax is 6 * 2^-10: s = 2^-10, the tie
 * between the e4m3 values 0 and 2^-9, goes to even, zero: the byte 0x00 and the block's values times 0 (+0 code 0,
 * -0.001 a -0, code 8, NaN stays NaN, code 7), where rule exact stores 0x01 and quantizes against 2^-9 (3, code 5;
 * -0.512, code 9). Block 1's amax is the next bf16 value, 1.5078125 * 2^-8: s is above the tie, 0x01, and the value
 * times 2^9 is 3.015625, code 5. Decoding takes a zero scale to zeros of the codes' signs. */
static void test_codec_zero_scale(void **state) {
    (void)state;
    rk_record r;
    memset(&r, 0, sizeof r);
    snprintf(r.name, sizeof r.name, "zero_scale");
    r.L = 32, r.R = 0, r.row_bytes = 32, r.n_seg = 1;
    r.seg[0] = (rk_segment){.from = 0,
                            .n = 32,
                            .elem = RK_EL_E2M1,
                            .at = 0,
                            .block = 16,
                            .scale = RK_ST_E4M3,
                            .rule = RK_SR_EXACT_ZERO,
                            .scales_at = 16,
                            .sat_ocp = 6.0f,
                            .sat_fnuz = 6.0f,
                            .block_conv = RK_BC_MUL_RECIP};
    rk_err err = {0};
    assert_int_equal(rk_record_check(&r, NULL, &err), ROPEKV_OK);
    float x[32] = {0}, y[32];
    x[0] = 0.005859375f, x[1] = -0.001f, x[2] = NAN, x[16] = 1.5078125f * 0x1p-8f;
    uint8_t row[32];
    rk_record_encode(&r, RK_FP8_OCP, x, r.L, 1.0f, RK_SCALE_NONE, 0, row, NULL);
    assert_int_equal(row[16], 0x00);
    assert_int_equal(row[17], 0x01);
    assert_int_equal(row[0], 0x80);
    assert_int_equal(row[1], 0x07);
    assert_int_equal(row[8], 0x05);
    rk_record_decode(&r, RK_FP8_OCP, row, NULL, 1.0f, RK_SCALE_NONE, NULL, y);
    assert_true(y[0] == 0.0f && !signbit(y[0]) && y[1] == 0.0f && signbit(y[1]));
    assert_true(y[16] == 3.0f * 0x1p-9f);
    /* rule exact: the least value and a quotient against it */
    r.seg[0].rule = RK_SR_EXACT;
    rk_record_encode(&r, RK_FP8_OCP, x, r.L, 1.0f, RK_SCALE_NONE, 0, row, NULL);
    assert_int_equal(row[16], 0x01);
    assert_int_equal(row[0], 0x95);
}

/* e2m1 with e4m3 scales per 16 (exact rule), and with a per-token float32 over them (two levels): each value
 * comes back within 1/4 of its block's amax (half the widest e2m1 gap, 1 of 6, plus the scale's e4m3 rounding). */
static void test_codec_e2m1_e4m3_scales(void **state) {
    (void)state;
    for (int token = 0; token < 2; token++) {
        rk_record r;
        memset(&r, 0, sizeof r);
        snprintf(r.name, sizeof r.name, "nvfp4");
        r.L = 512, r.R = 64, r.row_bytes = 336, r.n_seg = 1;
        r.seg[0] = (rk_segment){.from = 0,
                                .n = 576,
                                .elem = RK_EL_E2M1,
                                .at = 0,
                                .block = 16,
                                .scale = RK_ST_E4M3,
                                .rule = RK_SR_EXACT,
                                .scale_at = RK_SA_INLINE,
                                .scales_at = 288,
                                .sat_ocp = 6.0f,
                                .sat_fnuz = 6.0f,
                                .outer = token ? RK_OUT_TOKEN : RK_OUT_NONE,
                                .outer_at = 324};
        float x[576], y[576];
        for (int i = 0; i < 576; i++) x[i] = ldexpf((float)(int)(rng32() % 2001) - 1000.0f, (int)(rng32() % 8) - 10);
        uint8_t row[336];
        rk_record_encode(&r, RK_FP8_OCP, x, r.L, 1.0f, RK_SCALE_NONE, 0, row, NULL);
        rk_record_decode(&r, RK_FP8_OCP, row, NULL, 1.0f, RK_SCALE_NONE, NULL, y);
        for (int b = 0; b < 36; b++) {
            float amax = 0.0f;
            for (int i = 16 * b; i < 16 * b + 16; i++) amax = fmaxf(amax, fabsf(x[i]));
            for (int i = 16 * b; i < 16 * b + 16; i++)
                if (!(fabsf(y[i] - x[i]) <= 0.25f * amax))
                    fail_msg("token %d: value %d: %a -> %a", token, i, x[i], y[i]);
        }
        if (!token) { /* scale s = amax / 6 as e4m3: the first block's by hand */
            float amax = 0.0f;
            for (int i = 0; i < 16; i++) amax = fmaxf(amax, fabsf(x[i]));
            assert_int_equal(row[288], rk_f32_to_fp8(amax / 6.0f, RK_FP8_OCP));
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bf16_to_f32_exact),
        cmocka_unit_test(test_f32_to_bf16_rne),
        cmocka_unit_test(test_fp8_decode_ocp),
        cmocka_unit_test(test_fp8_decode_fnuz),
        cmocka_unit_test(test_fp8_encode_bruteforce_ocp),
        cmocka_unit_test(test_fp8_encode_bruteforce_fnuz),
        cmocka_unit_test(test_fp8_encode_boundaries_ocp),
        cmocka_unit_test(test_fp8_encode_boundaries_fnuz),
        cmocka_unit_test(test_op_gptj_absorbed),
        cmocka_unit_test(test_op_neox_zero_copy_skip_all),
        cmocka_unit_test(test_op_padding),
        cmocka_unit_test(test_op_inplace_bf16_tables),
        cmocka_unit_test(test_op_rope_none_q_none_sanitize),
        cmocka_unit_test(test_op_rope_none_copies_bits),
        cmocka_unit_test(test_op_r0_rows),
        cmocka_unit_test(test_op_r0_tile_record),
        cmocka_unit_test(test_op_sanitize_bf16_bound),
        cmocka_unit_test(test_op_fused_rounding),
        cmocka_unit_test(test_op_fp8_scales),
        cmocka_unit_test(test_op_fp8_mul_recip_vs_div),
        cmocka_unit_test(test_block_division),
        cmocka_unit_test(test_op_kimi_k2_q_fp8),
        cmocka_unit_test(test_op_deepseek_v32_tile_bound),
        cmocka_unit_test(test_tile_readers),
        cmocka_unit_test(test_op_fp8_fnuz_bound),
        cmocka_unit_test(test_op_fp8_ocp_sanitize),
        cmocka_unit_test(test_op_fp8_rope_bf16),
        cmocka_unit_test(test_op_fp8_query),
        cmocka_unit_test(test_op_fp8_query_rope_bf16),
        cmocka_unit_test(test_op_layout_consistency),
        cmocka_unit_test(test_op_fp8_tile_row),
        cmocka_unit_test(test_op_fp8_tile_pow2),
        cmocka_unit_test(test_op_fp8_tile_nonfinite),
        cmocka_unit_test(test_op_read),
        cmocka_unit_test(test_norm_hand_case),
        cmocka_unit_test(test_norm_tree_order),
        cmocka_unit_test(test_norm_rounding),
        cmocka_unit_test(test_norm_weight_dtype),
        cmocka_unit_test(test_norm_special_rows),
        cmocka_unit_test(test_norm_sanitize),
        cmocka_unit_test(test_norm_feeds_the_row),
        cmocka_unit_test(test_norm_out_rows),
        cmocka_unit_test(test_v4_head),
        cmocka_unit_test(test_codec_e2m1_ties),
        cmocka_unit_test(test_e2m1_min_form),
        cmocka_unit_test(test_e2m1_permute_decode),
        cmocka_unit_test(test_codec_e4m3_ties),
        cmocka_unit_test(test_codec_ue8m0_blocks),
        cmocka_unit_test(test_codec_ue8m0_nonfinite),
        cmocka_unit_test(test_codec_f32_blocks),
        cmocka_unit_test(test_codec_v41_record),
        cmocka_unit_test(test_codec_rounded_up_interleaved),
        cmocka_unit_test(test_codec_zero_scale),
        cmocka_unit_test(test_codec_e2m1_e4m3_scales),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
