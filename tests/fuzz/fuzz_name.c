/* Fuzz target: kernel names and enum spellings.
 *
 * The input, read as a string, goes to rk_name_parse (a name that parses must format back to the
 * same string) and to every rk_parse_<enum> (a spelling that parses must be the canonical one). The
 * same bytes, read as a struct, go to rk_name_format with an arbitrary buffer size: the result must
 * fit or be refused, and a formatted name whose parts are in the parser's domain must parse back to
 * the same parts. (Variant keys are only ever built and compared, never parsed, so there is no key
 * parser to fuzz.) */
#include <math.h>
#include <string.h>

#include "fuzz.h"
#include "rk.h"

static int same_parts(const rk_name_parts *a, const rk_name_parts *b) {
    return a->L == b->L && a->R == b->R && a->rope == b->rope && a->cos_sin == b->cos_sin && a->pos == b->pos &&
           a->slot == b->slot && a->kv_fp8 == b->kv_fp8 && a->fp8 == b->fp8 && a->scale == b->scale &&
           memcmp(&a->sat, &b->sat, sizeof a->sat) == 0 && a->rope_bf16 == b->rope_bf16 && a->q == b->q &&
           a->neg == b->neg && a->sanitize == b->sanitize && strcmp(a->target, b->target) == 0;
}

static void check_parse(const char *s) {
    rk_name_parts p;
    rk_err err = {.code = (ropekv_status)-1};
    char again[512];
    int rc = rk_name_parse(s, &p, &err);
    if (rc != ROPEKV_OK) {
        FUZZ_CHECK(rc == ROPEKV_ERR_RENDER && err.code == ROPEKV_ERR_RENDER, "code %d", rc);
        FUZZ_CHECK(memchr(err.msg, '\0', sizeof err.msg) && err.msg[0], "message");
        return;
    }
    FUZZ_CHECK(rk_name_format(&p, again, sizeof again) == ROPEKV_OK, "'%s' parses but does not format", s);
    FUZZ_CHECK(strcmp(again, s) == 0, "'%s' formats back as '%s'", s, again);
    FUZZ_CHECK(p.L >= 8 && p.L <= 8192 && p.R >= 8 && p.R <= 1024, "L %d R %d", p.L, p.R);
    FUZZ_CHECK(rk_rope_name(p.rope) && rk_cos_sin_name(p.cos_sin) && rk_idx_name(p.pos) && rk_idx_name(p.slot) &&
                   rk_fp8_name(p.fp8) && rk_scale_name(p.scale) && rk_qform_name(p.q) && rk_neg_name(p.neg),
               "enum out of range in '%s'", s);
    FUZZ_CHECK(isfinite(p.sat) && p.sat >= 0 && p.sat <= 448, "sat %g", (double)p.sat);
    FUZZ_CHECK((p.kv_fp8 | p.rope_bf16 | p.sanitize) <= 1, "flags");
}

/* rk_parse_<what>(s) succeeds only for the spelling rk_<what>_name gives back. */
#define SPELLING(what, type)                                                                       \
    do {                                                                                           \
        type v_;                                                                                   \
        if (rk_parse_##what(s, &v_) == 0)                                                          \
            FUZZ_CHECK(rk_##what##_name(v_) && strcmp(rk_##what##_name(v_), s) == 0, "%s", s);     \
    } while (0)

static void check_spellings(const char *s) {
    SPELLING(vendor, rk_vendor);
    SPELLING(compiler, rk_compiler);
    SPELLING(fp8, rk_fp8_fmt);
    SPELLING(rope, rk_rope);
    SPELLING(cos_sin, rk_cos_sin);
    SPELLING(idx, ropekv_index);
    SPELLING(kv, ropekv_kv_dtype);
    SPELLING(scale, rk_scale);
    SPELLING(neg, rk_neg);
    SPELLING(qform, ropekv_q_form);
}

typedef struct reader {
    const uint8_t *p;
    size_t n;
} reader;

/* The next `bytes` bytes, little endian; zeros past the end. */
static uint32_t take(reader *r, int bytes) {
    uint32_t v = 0;
    for (int i = 0; i < bytes; i++) {
        uint32_t b = 0;
        if (r->n > 0) b = *r->p++, r->n--;
        v |= b << (8 * i);
    }
    return v;
}

/* What the parser gives back for a name formatted from p: the flags and the index/fp8 fields that the
 * format treats as booleans, canonicalized. */
static rk_name_parts canonical(const rk_name_parts *p) {
    rk_name_parts c = *p;
    c.pos = p->pos == ROPEKV_INDEX_INT64 ? ROPEKV_INDEX_INT64 : ROPEKV_INDEX_INT32;
    c.slot = p->slot == ROPEKV_INDEX_INT64 ? ROPEKV_INDEX_INT64 : ROPEKV_INDEX_INT32;
    c.kv_fp8 = p->kv_fp8 != 0;
    c.fp8 = c.kv_fp8 && p->fp8 == RK_FP8_FNUZ ? RK_FP8_FNUZ : RK_FP8_OCP;
    c.rope_bf16 = p->rope_bf16 != 0;
    c.sanitize = p->sanitize != 0;
    return c;
}

static void check_format(const uint8_t *data, size_t size) {
    reader r = {data, size};
    rk_name_parts p;
    memset(&p, 0, sizeof p);
    uint32_t mode = take(&r, 1);
    p.L = mode & 1 ? (int)take(&r, 4) : (int)take(&r, 2);
    p.R = mode & 2 ? (int)take(&r, 4) : (int)take(&r, 2);
    p.rope = (rk_rope)(take(&r, 1) % 5);
    p.cos_sin = (rk_cos_sin)(take(&r, 1) % 5);
    p.pos = (ropekv_index)(take(&r, 1) % 3);
    p.slot = (ropekv_index)(take(&r, 1) % 3);
    p.kv_fp8 = (int)(take(&r, 1) % 3);
    p.fp8 = (rk_fp8_fmt)(take(&r, 1) % 3);
    p.scale = (rk_scale)(take(&r, 1) % 6);
    uint32_t bits = mode & 4 ? take(&r, 4) : 0x43e00000u + take(&r, 1); /* any float, or near 448 */
    memcpy(&p.sat, &bits, sizeof bits);
    p.rope_bf16 = (int)(take(&r, 1) % 3);
    p.q = (ropekv_q_form)(take(&r, 1) % 6);
    p.neg = (rk_neg)(take(&r, 1) % 3);
    p.sanitize = (int)(take(&r, 1) % 3);
    size_t tl = take(&r, 1) % RK_NAME_MAX;
    for (size_t i = 0; i < tl; i++) p.target[i] = (char)take(&r, 1);
    p.target[tl] = '\0';
    size_t cap = take(&r, 2) % 300;

    char full[1024], out[300];
    int rc_full = rk_name_format(&p, full, sizeof full);
    int rc = rk_name_format(&p, out, cap);
    if (rc_full != ROPEKV_OK) {
        FUZZ_CHECK(rc_full == ROPEKV_ERR_RENDER && rc != ROPEKV_OK, "format results %d %d", rc_full, rc);
        return;
    }
    FUZZ_CHECK((rc == ROPEKV_OK) == (strlen(full) < cap), "cap %zu, name of %zu bytes: %d", cap, strlen(full), rc);
    if (rc == ROPEKV_OK) FUZZ_CHECK(strcmp(out, full) == 0, "'%s' vs '%s'", out, full);

    int in_domain = p.L >= 8 && p.L <= 8192 && p.R >= 8 && p.R <= 1024 && isfinite(p.sat) && !signbit(p.sat) &&
                    p.sat <= 448;
    rk_name_parts back;
    rk_err err = {0};
    int prc = rk_name_parse(full, &back, &err);
    if (!in_domain) return;
    FUZZ_CHECK(prc == ROPEKV_OK, "'%s' does not parse: %s", full, err.msg);
    rk_name_parts want = canonical(&p);
    FUZZ_CHECK(same_parts(&want, &back), "'%s' parses to different parts", full);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *s = malloc(size + 1);
    FUZZ_CHECK(s != NULL, "out of memory");
    if (size) memcpy(s, data, size); /* libFuzzer may pass NULL for an empty input */
    s[size] = '\0';
    check_parse(s);
    check_spellings(s);
    free(s);
    check_format(data, size);
    return 0;
}
