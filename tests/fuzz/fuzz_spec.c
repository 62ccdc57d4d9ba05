/* Fuzz target: spec loading and validation from arbitrary bytes.
 *
 * Every input is loaded twice: as a model spec (against the built-in architecture table) and as an
 * architecture table. Either load may fail, but only with one of the spec error codes and a
 * non-empty, terminated message. What loads must satisfy every rule the validator promises, and its
 * variants must enumerate, name themselves canonically (names parse back to the same parts) and
 * render to kernel source. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "rk.h"

static const rk_arch_table *builtin_archs(void) {
    static rk_arch_table t;
    static int done;
    if (!done) {
        size_t len = 0;
        rk_err err = {0};
        const char *text = rk_embedded("archs.lua", &len);
        FUZZ_CHECK(text != NULL, "archs.lua is not embedded");
        FUZZ_CHECK(rk_archs_load("specs/archs.lua", text, len, &t, &err) == ROPEKV_OK, "%s", err.msg);
        done = 1;
    }
    return &t;
}

/* A failed load: a spec error code (or out of memory) and a message. */
static void check_failure(int rc, const rk_err *err) {
    FUZZ_CHECK(rc == ROPEKV_ERR_SPEC_SYNTAX || rc == ROPEKV_ERR_SPEC_RUNTIME || rc == ROPEKV_ERR_SPEC_LIMIT ||
                   rc == ROPEKV_ERR_SPEC_INVALID || rc == ROPEKV_ERR_SPEC_TARGET || rc == ROPEKV_ERR_NOMEM,
               "unexpected code %d", rc);
    FUZZ_CHECK((int)err->code == rc, "err.code %d, returned %d", (int)err->code, rc);
    FUZZ_CHECK(memchr(err->msg, '\0', sizeof err->msg) != NULL, "message not terminated");
    FUZZ_CHECK(err->msg[0] != '\0', "empty message for code %d", rc);
}

static int terminated(const char *s, size_t cap) { return memchr(s, '\0', cap) != NULL; }

static int ident(const char *s, const char *extra) {
    if (!*s) return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || strchr(extra, *s))) return 0;
    return 1;
}

static void check_arch(const rk_arch *a) {
    FUZZ_CHECK(terminated(a->name, sizeof a->name) && ident(a->name, "_:+-"), "arch name");
    FUZZ_CHECK(terminated(a->options, sizeof a->options), "options");
    FUZZ_CHECK(rk_vendor_name(a->vendor) && rk_compiler_name(a->compiler) && rk_fp8_name(a->fp8), "enum out of range");
    FUZZ_CHECK(a->wave == 32 || a->wave == 64, "wave %d", a->wave);
    FUZZ_CHECK(a->vec_bytes == 8 || a->vec_bytes == 16, "vec_bytes %d", a->vec_bytes);
    FUZZ_CHECK(a->block >= 32 && a->block <= 1024 && a->block % a->wave == 0, "block %d", a->block);
    FUZZ_CHECK(a->chunks >= 1 && a->chunks <= 8, "chunks %d", a->chunks);
    FUZZ_CHECK(a->chunks_from >= 0 && a->chunks_from <= 1 << 30, "chunks_from %lld", (long long)a->chunks_from);
    FUZZ_CHECK(a->nt_stores == 0 || a->nt_stores == 1, "nt_stores");
    FUZZ_CHECK(a->pdl == 0 || (a->pdl == 1 && a->vendor == RK_VENDOR_NVIDIA), "pdl");
    FUZZ_CHECK(a->fp8_hw == 0 || a->fp8_hw == 1, "fp8_hw");
    FUZZ_CHECK(a->bf16_hw == 0 || a->bf16_hw == 1, "bf16_hw");
    FUZZ_CHECK((a->compiler == RK_CC_HOST) == (a->vendor == RK_VENDOR_HOST), "compiler/vendor");
}

#define NAME_CHARS "abcdefghijklmnopqrstuvwxyzLR0123456789_"

/* The variants of a loaded spec: count, unique keys and names (a name spells every choice), names made
 * of identifier characters, one rendered source. */
static int by_key(const void *a, const void *b) {
    return strcmp((*(const rk_desc *const *)a)->key, (*(const rk_desc *const *)b)->key);
}
static int by_name(const void *a, const void *b) {
    return strcmp((*(const rk_desc *const *)a)->name, (*(const rk_desc *const *)b)->name);
}

static void check_variants(const rk_spec *s, const rk_arch_table *archs, size_t pick) {
    static rk_desc v[RK_MAX_VARIANTS_PER_SPEC];
    rk_err err = {0};
    int n = rk_variants(s, archs, v, RK_MAX_VARIANTS_PER_SPEC, &err);
    if (n < 0) {
        /* only a target that cannot be spelled in a kernel name may be refused here */
        FUZZ_CHECK(err.code == ROPEKV_ERR_SPEC_TARGET, "rk_variants: %s", err.msg);
        return;
    }
    int forms = 0; /* q forms times their query dtypes: q form none has one (no query output) */
    for (int i = 0; i < s->n_q; i++) forms += s->q[i] == ROPEKV_Q_NONE ? 1 : s->n_qdt;
    int writes = 0, reads = 0;
    for (int i = 0; i < s->n_ops; i++) {
        writes += s->ops[i] == ROPEKV_OP_WRITE;
        reads += s->ops[i] == ROPEKV_OP_READ;
    }
    int rows = 0;                               /* a row format in a layout it fits (a tile row is never split) */
    for (int k = 0; k < rk_spec_rows(s); k++) { /* its kv dtypes and the records the kernels write */
        rk_record rec;
        rk_spec_row(s, k, NULL, &rec);
        for (int l = 0; l < s->n_layout && !rk_record_unsupported(&rec); l++)
            rows += rk_record_fits(&rec, s->layouts[l]);
    }
    const int positions = s->rope == RK_ROPE_NONE ? 1 : s->n_pos; /* rope none reads no positions: one type */
    FUZZ_CHECK(n == s->n_targets * rows * s->n_slot * (writes * forms * positions * s->n_norms + reads), "%d variants",
               n);
    static const rk_desc *by[RK_MAX_VARIANTS_PER_SPEC];
    for (int i = 0; i < n; i++) {
        FUZZ_CHECK(v[i].name[0] && terminated(v[i].key, sizeof v[i].key), "variant %d", i);
        FUZZ_CHECK(terminated(v[i].name, sizeof v[i].name) && strspn(v[i].name, NAME_CHARS) == strlen(v[i].name),
                   "name %s", v[i].name);
        FUZZ_CHECK(rk_record_fits(&v[i].rec, v[i].layout), "%s: a row in a layout it does not fit", v[i].key);
        by[i] = &v[i];
    }
    /* keys and names unique (within one spec the read-back op's canonical choices never meet): sorted, neighbours */
    qsort(by, (size_t)n, sizeof *by, by_key);
    for (int i = 1; i < n; i++) FUZZ_CHECK(strcmp(by[i - 1]->key, by[i]->key) != 0, "duplicate key %s", by[i]->key);
    qsort(by, (size_t)n, sizeof *by, by_name);
    for (int i = 1; i < n; i++)
        FUZZ_CHECK(strcmp(by[i - 1]->name, by[i]->name) != 0, "%s and %s share the name %s", by[i - 1]->key, by[i]->key,
                   by[i]->name);
    rk_buf src = {0};
    const rk_desc *e = &v[pick % (size_t)n];
    FUZZ_CHECK(rk_emit(e, &src, &err) == ROPEKV_OK, "rk_emit %s: %s", e->key, err.msg);
    FUZZ_CHECK(src.p && strlen(src.p) == src.len, "emitted source");
    FUZZ_CHECK(strstr(src.p, e->name) != NULL, "kernel name missing from its source");
    FUZZ_CHECK(strstr(src.p, "${") == NULL, "placeholder left in the source of %s", e->key);
    rk_buf_free(&src);
}

static void check_spec(const rk_spec *s, const rk_arch_table *archs, size_t pick) {
    FUZZ_CHECK(terminated(s->name, sizeof s->name) && ident(s->name, "_"), "name");
    FUZZ_CHECK(strcmp(s->file, "fuzz.lua") == 0, "file");
    FUZZ_CHECK(terminated(s->description, sizeof s->description), "description");
    FUZZ_CHECK(s->kv_lora_rank >= 8 && s->kv_lora_rank <= 8192 && s->kv_lora_rank % 8 == 0, "L %d", s->kv_lora_rank);
    FUZZ_CHECK(s->rope_dim >= 0 && s->rope_dim <= 1024 && s->rope_dim % 8 == 0, "R %d", s->rope_dim);
    FUZZ_CHECK(s->rope_dim > 0 || s->rope == RK_ROPE_NONE, "R = 0 with rope %s", rk_rope_name(s->rope));
    FUZZ_CHECK(rk_rope_name(s->rope) && rk_cos_sin_name(s->cos_sin) && rk_scale_name(s->fp8.scale) &&
                   rk_neg_name(s->negative_slot),
               "enum out of range");
    FUZZ_CHECK(s->rope != RK_ROPE_NEOX || s->rope_dim % 16 == 0, "neox with R %d", s->rope_dim);
    FUZZ_CHECK(s->n_records >= 0 && s->n_records <= RK_SPEC_RECORDS, "%d records", s->n_records);
    for (int i = 0; i < s->n_records; i++) {
        rk_err err = {0};
        FUZZ_CHECK(rk_record_check(&s->records[i], "fuzz.lua", &err) == ROPEKV_OK, "records[%d]: %s", i + 1, err.msg);
        FUZZ_CHECK(s->records[i].L == s->kv_lora_rank && s->records[i].R == s->rope_dim, "records[%d]: L, R", i + 1);
    }
    FUZZ_CHECK(s->n_pos >= 1 && s->n_pos <= 2 && s->n_slot >= 1 && s->n_slot <= 2 && s->n_kv >= 1 && s->n_kv <= 3 &&
                   s->n_q >= 1 && s->n_q <= 4 && s->n_targets >= 1 && s->n_targets <= RK_MAX_TARGETS,
               "list sizes");
    for (int i = 0; i < s->n_q; i++) {
        FUZZ_CHECK(rk_qform_name(s->q[i]), "q form");
        FUZZ_CHECK(!(s->q[i] == ROPEKV_Q_INPLACE && s->rope == RK_ROPE_NONE), "inplace without rope");
        FUZZ_CHECK(!rk_geometry_refuses(s->rope_dim, s->q[i], ROPEKV_KV_FLAT), "q form %s with R = 0",
                   rk_qform_name(s->q[i]));
        for (int j = 0; j < i; j++) FUZZ_CHECK(s->q[i] != s->q[j], "duplicate q form");
    }
    FUZZ_CHECK(s->fp8.sat_ocp > 0 && s->fp8.sat_ocp <= 448 && s->fp8.sat_fnuz > 0 && s->fp8.sat_fnuz <= 240,
               "saturation %g %g", (double)s->fp8.sat_ocp, (double)s->fp8.sat_fnuz);
    FUZZ_CHECK(s->fp8.rope_bf16 == 0 || s->fp8.rope_bf16 == 1, "rope_bf16_round");
    FUZZ_CHECK(s->q_fp8.sat_ocp > 0 && s->q_fp8.sat_ocp <= 448 && s->q_fp8.sat_fnuz > 0 && s->q_fp8.sat_fnuz <= 240 &&
                   rk_scale_name(s->q_fp8.scale) && (s->q_fp8.rope_bf16 == 0 || s->q_fp8.rope_bf16 == 1),
               "q_fp8");
    FUZZ_CHECK(terminated(s->fp8.matches, sizeof s->fp8.matches) &&
                   terminated(s->q_fp8.matches, sizeof s->q_fp8.matches),
               "matches");
    FUZZ_CHECK(s->n_qdt >= 1 && s->n_qdt <= 2, "q dtypes");
    FUZZ_CHECK(s->n_ops >= 1 && s->n_ops <= 2 && rk_enum_name(&rk_read_neg_enum, s->read_neg), "ops");
    int tile = 0;
    for (int i = 0; i < s->n_kv; i++) tile |= s->kv[i] == ROPEKV_KV_FP8_TILE;
    if (tile) {
        const rk_tile_policy *t = &s->tile;
        const int scales_end = t->scales_at + 4 * (s->kv_lora_rank / t->tile), rope_end = t->rope_at + 2 * s->rope_dim;
        FUZZ_CHECK(t->tile >= 8 && t->tile <= 256 && (t->tile & (t->tile - 1)) == 0 && s->kv_lora_rank % t->tile == 0,
                   "tile %d", t->tile);
        FUZZ_CHECK(t->scales_at >= s->kv_lora_rank && t->rope_at >= s->kv_lora_rank && t->rope_at % 16 == 0 &&
                       t->scales_at % 4 == 0 && (scales_end <= t->rope_at || rope_end <= t->scales_at) &&
                       t->row_bytes == (scales_end > rope_end ? scales_end : rope_end),
                   "tile row: scales at %d, rope at %d, %d bytes", t->scales_at, t->rope_at, t->row_bytes);
    }
    FUZZ_CHECK(s->n_layout >= 1 && s->n_layout <= 3, "kv layouts");
    for (int i = 0; i < s->n_layout; i++) {
        FUZZ_CHECK(rk_layout_name(s->layouts[i]), "kv layout");
        FUZZ_CHECK(!rk_geometry_refuses(s->rope_dim, ROPEKV_Q_NONE, s->layouts[i]), "split with R = 0");
        for (int j = 0; j < i; j++) FUZZ_CHECK(s->layouts[i] != s->layouts[j], "duplicate kv layout");
    }
    for (int i = 0; i < s->n_qdt; i++) {
        FUZZ_CHECK(rk_qdtype_name(s->q_dtypes[i]), "q dtype");
        for (int j = 0; j < i; j++) FUZZ_CHECK(s->q_dtypes[i] != s->q_dtypes[j], "duplicate q dtype");
    }
    FUZZ_CHECK(s->sanitize == 0 || s->sanitize == 1, "sanitize");
    for (int i = 0; i < s->n_targets; i++) {
        FUZZ_CHECK(terminated(s->targets[i], RK_NAME_MAX) && rk_arch_find(archs, s->targets[i]), "target %d", i);
        for (int j = 0; j < i; j++) FUZZ_CHECK(strcmp(s->targets[i], s->targets[j]) != 0, "duplicate target");
    }
    check_variants(s, archs, pick);
}

/* A loaded architecture table, then a small spec that targets its first row. */
static void check_archs(const rk_arch_table *t) {
    FUZZ_CHECK(t->n >= 1 && t->n <= RK_MAX_ARCHS, "%d archs", t->n);
    for (int i = 0; i < t->n; i++) {
        check_arch(&t->a[i]);
        for (int j = 0; j < i; j++) FUZZ_CHECK(strcmp(t->a[i].name, t->a[j].name) != 0, "duplicate arch");
    }
    char text[256];
#define SMALL_SPEC "return { name = 'f', kv_lora_rank = 64, qk_rope_head_dim = 16, targets = { '%s' } }"
    int n = snprintf(text, sizeof text, SMALL_SPEC, t->a[0].name);
    rk_spec s;
    rk_err err = {0};
    int rc = rk_spec_load("fuzz.lua", text, (size_t)n, t, &s, &err);
    FUZZ_CHECK(rc == ROPEKV_OK, "a spec for target %s: %s", t->a[0].name, err.msg);
    check_spec(&s, t, 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const rk_arch_table *archs = builtin_archs();
    const char *text = (const char *)data;
    rk_err err = {.code = (ropekv_status)-1};
    rk_spec *s = malloc(sizeof *s);
    FUZZ_CHECK(s != NULL, "out of memory");
    int rc = rk_spec_load("fuzz.lua", text, size, archs, s, &err);
    if (rc == ROPEKV_OK) check_spec(s, archs, size);
    else check_failure(rc, &err);
    free(s);

    /* the same text as a records library: every record it yields passes rk_record_check */
    rk_record_lib *lib = malloc(sizeof *lib);
    FUZZ_CHECK(lib != NULL, "out of memory");
    err.code = (ropekv_status)-1;
    rc = rk_records_load("fuzz_records.lua", text, size, lib, &err);
    if (rc == ROPEKV_OK) {
        FUZZ_CHECK(lib->n >= 1 && lib->n <= RK_RECORDS_MAX, "%d records", lib->n);
        for (int i = 0; i < lib->n; i++)
            FUZZ_CHECK(rk_record_check(&lib->r[i], "fuzz_records.lua", &err) == ROPEKV_OK, "%s", err.msg);
    } else {
        check_failure(rc, &err);
    }
    free(lib);

    rk_arch_table *t = malloc(sizeof *t);
    FUZZ_CHECK(t != NULL, "out of memory");
    err.code = (ropekv_status)-1;
    rc = rk_archs_load("fuzz_archs.lua", text, size, t, &err);
    if (rc == ROPEKV_OK) check_archs(t);
    else check_failure(rc, &err);
    free(t);
    return 0;
}
