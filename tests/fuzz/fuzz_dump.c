/* Fuzz target: dump files (runtime/dump.h, docs/dump.md) from arbitrary bytes.
 *
 * rk_dump_parse reads the input as it is, and again with its last 32 bytes replaced by the SHA-256 of the bytes
 * before them, so that a mutation gets past the checksum to the fields the reader checks after it. Each parse either
 * refuses with ROPEKV_ERR_DUMP or ROPEKV_ERR_VERSION and a non-empty message, or accepts; an accepted dump has every
 * string terminated inside its field, its enums and counts in range, and every tensor's bytes inside the input, and
 * a second parse gives the same; a cache's rows (form 1) are in range and increasing, with their bytes inside the
 * input. The seed corpus (tests/fuzz/corpus/dump, written by `test_dump --seeds`) holds small dumps of a DeepSeek-V3
 * and a paged fp8_tile launch and of two refused launches, and hostile variants of them. */
#include <string.h>

#include "cache.h"
#include "dump.h"
#include "fuzz.h"

static void check(const uint8_t *data, size_t size) {
    static rk_dump a, b;
    rk_err err = {0};
    const ropekv_status s = rk_dump_parse(data, size, &a, &err);
    if (s != ROPEKV_OK) {
        FUZZ_CHECK(s == ROPEKV_ERR_DUMP || s == ROPEKV_ERR_VERSION, "status %s", ropekv_status_name(s));
        FUZZ_CHECK(err.msg[0] != '\0', "a refusal without a message");
        return;
    }
    FUZZ_CHECK(memchr(a.key, '\0', sizeof a.key) && memchr(a.name, '\0', sizeof a.name) &&
                   memchr(a.spec, '\0', sizeof a.spec) && memchr(a.record, '\0', sizeof a.record) &&
                   memchr(a.arch, '\0', sizeof a.arch) && memchr(a.message, '\0', sizeof a.message),
               "a string not terminated inside its field");
    FUZZ_CHECK(a.spec[0] && a.v.spec == a.spec && (a.v.record == NULL) == (a.record[0] == '\0'), "variant names");
    FUZZ_CHECK((unsigned)a.v.kv <= ROPEKV_KV_FP8_TILE && (unsigned)a.v.op <= ROPEKV_OP_READ &&
                   (unsigned)a.v.layout <= ROPEKV_KV_SPLIT && (unsigned)a.v.norm <= ROPEKV_NORM_RMS_OUT,
               "an enum out of range");
    FUZZ_CHECK(a.reason >= RK_DUMP_FIRST && a.reason <= RK_DUMP_EVERY, "reason %d", (int)a.reason);
    FUZZ_CHECK(a.n_tensors >= 0 && a.n_tensors <= RK_TENSORS_MAX, "%d tensors", a.n_tensors);
    FUZZ_CHECK(a.spec_len <= RK_SPEC_TEXT_MAX &&
                   (a.spec_len == 0 ||
                    (a.spec_text >= (const char *)data && a.spec_text + a.spec_len <= (const char *)data + size)),
               "the spec text outside the input");
    for (int i = 0; i < a.n_tensors; i++) {
        const rk_dump_tensor *t = &a.t[i];
        FUZZ_CHECK(memchr(t->name, '\0', sizeof t->name) && t->name[0], "tensor %d's name", i);
        FUZZ_CHECK(t->data >= data && t->stored <= size && t->data + t->stored <= data + size,
                   "tensor %s's %llu bytes outside the input", t->name, (unsigned long long)t->stored);
        if (!t->rows) {
            FUZZ_CHECK(t->stored == t->bytes, "tensor %s: form 0 with %llu of %llu bytes", t->name,
                       (unsigned long long)t->stored, (unsigned long long)t->bytes);
            continue;
        }
        FUZZ_CHECK(!strcmp(t->name, "kv_cache") || !strcmp(t->name, "kv_rope_cache"), "rows of %s", t->name);
        FUZZ_CHECK(t->row_bytes >= 1 && t->row_bytes <= RK_DUMP_ROW_BYTES_MAX &&
                       t->tail_bytes <= RK_DUMP_TAIL_BYTES_MAX &&
                       t->stored == t->n_rows * ((uint64_t)t->row_bytes + t->tail_bytes),
                   "tensor %s: rows of %u + %u bytes, %llu stored", t->name, t->row_bytes, t->tail_bytes,
                   (unsigned long long)t->stored);
        FUZZ_CHECK(t->row_list >= data && t->n_rows <= size / 8 && t->row_list + 8 * t->n_rows <= data + size,
                   "tensor %s's row list outside the input", t->name);
        for (uint64_t k = 0; k < t->n_rows; k++) {
            const int64_t row = rk_dump_row(t, k);
            FUZZ_CHECK(row >= a.args.min_slot && row < a.args.kv_rows && (k == 0 || row > rk_dump_row(t, k - 1)),
                       "tensor %s: row %lld (entry %llu) out of range or order", t->name, (long long)row,
                       (unsigned long long)k);
        }
    }
    FUZZ_CHECK(rk_dump_parse(data, size, &b, &err) == ROPEKV_OK && !strcmp(a.key, b.key) &&
                   !strcmp(a.message, b.message) && memcmp(&a.args, &b.args, sizeof a.args) == 0 &&
                   a.n_tensors == b.n_tensors && memcmp(a.t, b.t, sizeof a.t) == 0 && a.spec_text == b.spec_text,
               "a second parse differs");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    check(data, size);
    if (size >= 32) { /* the same bytes under a checksum that matches them */
        uint8_t *fixed = malloc(size);
        FUZZ_CHECK(fixed != NULL, "out of memory");
        memcpy(fixed, data, size - 32);
        rk_sha256 h;
        rk_sha256_init(&h);
        rk_sha256_update(&h, fixed, size - 32);
        rk_sha256_final(&h, fixed + size - 32);
        check(fixed, size);
        free(fixed);
    }
    return 0;
}
