/* Dumps (runtime/dump.h, docs/dump.md): launches of a DeepSeek-V3 variant, of a paged fp8_tile (DeepSeek-V3.2)
 * variant, of DeepSeek-V4's page-tail record (write and read-back) and of a split layout dumped on the host backend
 * and replayed with `ropekv-gen replay` bit for bit, their caches as the rows the slots name; launches on caches of
 * millions of rows (sparse mappings of gigabytes) dumped under a bound of 1 MiB and replayed in a compact cache; the
 * policy (first, fail, every:N) and the byte bound; the options and variables refused; and hostile files (truncated
 * at every field, lengths past the end or over their limits, wrong magic or version, huge counts, a flipped byte, row
 * lists out of range, repeated or decreasing) refused with ROPEKV_ERR_DUMP or ROPEKV_ERR_VERSION naming the field, by
 * the reader and by `ropekv-gen replay`; a dump of another target (a CUDA context's on sm_90) replayed on the host
 * backend.
 *   test_dump [--seeds DIR]   (--seeds: writes the fuzz target's seed dumps to DIR and exits) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache.h"
#include "dump.h"
#include "proc.h"
#include "rk.h"
#include "check.h"
#include "ropekv.h"
#include "testutil.h"

static char scratch[] = "/tmp/ropekv-test-dump-XXXXXX";
static rk_catalog cat;

static int setup(void **state) {
    (void)state;
    return rk_test_setup(scratch, &cat);
}

static int teardown(void **state) {
    (void)state;
    rk_test_remove_tree(scratch);
    return 0;
}

/* A fresh dump directory under the scratch directory (not made yet: the context makes it). */
static const char *fresh_dir(const char *name) {
    static char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", scratch, name);
    rk_test_remove_tree(dir);
    return dir;
}

/* The dump files of dir, sorted by name, into names (n at most cap); their number. */
static int dumps_in(const char *dir, char names[][512], int cap) {
    DIR *d = opendir(dir);
    int n = 0;
    if (!d) return 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const size_t len = strlen(e->d_name);
        if (len > 7 && strcmp(e->d_name + len - 7, ".rkdump") == 0 && n < cap)
            snprintf(names[n++], 512, "%s/%s", dir, e->d_name);
        else if (e->d_name[0] != '.' || (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")))
            fail_msg("%s: a file that is no dump: %s", dir, e->d_name); /* no temporary file is left */
    }
    closedir(d);
    qsort(names, (size_t)n, 512, (int (*)(const void *, const void *))strcmp);
    return n;
}

/* A host context dumping to dir under when (NULL: the default) and max bytes (0: the default). */
static ropekv_ctx *dump_ctx(const char *dir, const char *when, int64_t max_bytes) {
    ropekv_options o = {ROPEKV_SIZED(ropekv_options),
                        .backend = ROPEKV_BACKEND_HOST,
                        .cache_dir = scratch,
                        .disk_cache = 1,
                        .dump = dir,
                        .dump_when = when,
                        .dump_max_bytes = max_bytes};
    ropekv_ctx *c = NULL;
    assert_int_equal(ropekv_create(&c, &o), ROPEKV_OK);
    return c;
}

/* The harness's inputs for v (small: the seeds come from here too), launched once through k with the harness's
 * comparison with the reference: dumping changes nothing of the launch. */
static void launch_checked(ropekv_kernel *k, const rk_desc *rv, uint64_t seed) {
    rk_shape sh = {.tokens = 3, .heads = 2, .max_pos = 16, .neg_every = 3, .specials = 1, .k_scale = 0.37f};
    char why[2048];
    if (rk_check(rv, &sh, seed, rk_test_launch, k, why, sizeof why) != 0) fail_msg("%s: %s", rv->key, why);
}

/* Runs `ropekv-gen replay FILE [more]`; its exit status, its output in out. */
static int replay(const char *file, const char *more, const char *more2, rk_buf *out) {
    const char *argv[] = {RK_GEN, "replay", file, more, more2, NULL};
    int status = -1;
    out->len = 0;
    assert_int_equal(rk_run(argv, 300, 0, out, &status), ROPEKV_OK);
    return status;
}

/* Reads a whole file. */
static rk_codeobj slurp(const char *path) {
    rk_codeobj f = {0};
    assert_int_equal(rk_read_file(path, &f), ROPEKV_OK);
    return f;
}

/* Dumps the first launch of variant v (spec, choices) to a fresh directory and replays it: every byte equal. Checks
 * the file (mode 0600 in a 0700 directory made for it), what it holds (the inputs as they were before the launch),
 * and that later launches are not dumped under "first". */
static void round_trip(const char *name, const ropekv_variant *v) {
    const char *dir = fresh_dir(name);
    ropekv_ctx *c = dump_ctx(dir, NULL, 0);
    ropekv_kernel *k = NULL;
    assert_int_equal(ropekv_kernel_get(c, v, &k), ROPEKV_OK);
    const rk_desc *rv = rk_test_ref_variant(&cat, v->spec, v);
    assert_non_null(rv);
    for (int i = 0; i < 3; i++) launch_checked(k, rv, 11 + (uint64_t)i);
    char files[4][512];
    assert_int_equal(dumps_in(dir, files, 4), 1); /* "first": the first of the three */
    assert_non_null(strstr(files[0], "-1-first-"));
    struct stat st;
    assert_int_equal(stat(dir, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0700);
    assert_int_equal(stat(files[0], &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);

    rk_codeobj f = slurp(files[0]);
    rk_dump *dm = malloc(sizeof *dm);
    rk_err err = {0};
    assert_int_equal(rk_dump_parse(f.data, f.len, dm, &err), ROPEKV_OK);
    assert_string_equal(dm->key, rv->key);
    assert_string_equal(dm->name, ropekv_kernel_name(k));
    assert_string_equal(dm->backend, "host");
    assert_int_equal(dm->status, ROPEKV_OK);
    assert_int_equal(dm->reason, RK_DUMP_FIRST);
    assert_true(dm->spec_len > 0); /* the built-in spec's text travels with the dump */
    int needed = 0;                /* the harness passes no write mask; the read-back op's out_rope at times */
    for (int i = 0; i < ropekv_kernel_tensor_count(k); i++) {
        ropekv_tensor_info ti = {.size = sizeof ti};
        assert_int_equal(ropekv_kernel_tensor(k, i, &ti), ROPEKV_OK);
        needed += ti.need != ROPEKV_NEED_OPTIONAL;
    }
    assert_true(dm->n_tensors == needed || (v->op == ROPEKV_OP_READ && dm->n_tensors == needed + 1));
    /* the cache as it was before the launch: the harness fills it with its sentinel, which the launch overwrites
     * in the rows it writes */
    const rk_dump_tensor *cache = NULL;
    for (int i = 0; i < dm->n_tensors; i++)
        if (!strcmp(dm->t[i].name, "kv_cache")) cache = &dm->t[i];
    assert_non_null(cache);
    assert_true(cache->bytes > 0);
    assert_true(cache->rows && cache->n_rows > 0); /* the rows the slots name, not the whole cache */
    assert_true(cache->stored < cache->bytes);
    free(dm);
    rk_code_free(&f);
    ropekv_kernel_release(k);
    ropekv_destroy(c);

    rk_buf out = {0};
    const int status = replay(files[0], "--backend", "host", &out);
    if (status != 0 || !strstr(out.p, "every byte equal to the reference"))
        fail_msg("replay of %s: exit %d:\n%s", files[0], status, out.p ? out.p : "");
    rk_buf_free(&out);
}

static void test_round_trip_deepseek_v3(void **state) {
    (void)state;
    const ropekv_variant v = {ROPEKV_SIZED(ropekv_variant), .spec = "deepseek_v3", .kv = ROPEKV_KV_FP8_E4M3};
    round_trip("v3", &v);
}

static void test_round_trip_fp8_tile_paged(void **state) {
    (void)state;
    const ropekv_variant v = {ROPEKV_SIZED(ropekv_variant), .spec = "deepseek_v32", .kv = ROPEKV_KV_FP8_TILE,
                              .layout = ROPEKV_KV_PAGED};
    round_trip("v32", &v);
}

/* DeepSeek-V4's fp8 record keeps its scales in the page tail after a block's rows: each dumped row carries its
 * token's tail; the write and the read-back op. */
static void test_round_trip_page_tail(void **state) {
    (void)state;
    const ropekv_variant w = {ROPEKV_SIZED(ropekv_variant), .spec = "deepseek_v4_flash", .record = "dsv4_fp8",
                              .layout = ROPEKV_KV_PAGED};
    round_trip("v4", &w);
    const ropekv_variant r = {ROPEKV_SIZED(ropekv_variant), .spec = "deepseek_v4_flash", .record = "dsv4_fp8",
                              .layout = ROPEKV_KV_PAGED,    .op = ROPEKV_OP_READ,        .slots = ROPEKV_INDEX_INT32};
    round_trip("v4read", &r);
}

/* The split layout: each row's two parts, in kv_cache and kv_rope_cache. */
static void test_round_trip_split(void **state) {
    (void)state;
    const ropekv_variant v = {ROPEKV_SIZED(ropekv_variant), .spec = "deepseek_v4_flash", .kv = ROPEKV_KV_BF16,
                              .layout = ROPEKV_KV_SPLIT, .positions = ROPEKV_INDEX_INT32};
    round_trip("split", &v);
}

/* ---- a cache far larger than the byte bound ------------------------------------------------------------------ */

/* The harness's cache rows spread over a cache of millions of rows: harness slot s (in block s / B, entry s % B; the
 * flat layout's B is 1) becomes slot spread(s), its block SPREAD blocks apart from the previous one's. */
enum { SPREAD = 1 << 20 };
static int64_t spread(int64_t s, int64_t B) { return s / B * SPREAD * B + s % B; }

static void *sparse(size_t bytes) {
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static int spread_refused; /* the system refused a sparse mapping: the test is skipped */

/* rk_check's run callback: the launch of a through kernel (a ropekv_kernel *) with each cache moved into a sparse
 * mapping of spread(kv_rows - 1) + 1 rows (gigabytes, untouched but for the harness's rows), the slots spread the
 * same way; the rows copied back into the harness's buffers after it. */
static int launch_spread(void *kernel, const rk_desc *v, const rk_args *a) {
    ropekv_args p, big;
    rk_test_public_args(a, &p);
    big = p;
    const int64_t B = v->layout == ROPEKV_KV_FLAT ? 1 : a->kv_block_size, rows = a->kv_rows;
    big.kv_rows = spread(rows - 1, B) + 1;
    big.min_slot = spread(a->min_slot, B);
    const int64_t n = v->op == ROPEKV_OP_READ ? a->tokens : a->kv_tokens;
    const int wide = v->slot == ROPEKV_INDEX_INT64;
    unsigned char *slots = malloc((size_t)n * 8 + 8);
    assert_non_null(slots);
    for (int64_t t = 0; t < n; t++) {
        int64_t x;
        if (wide) memcpy(&x, (const unsigned char *)a->slots + 8 * t, 8);
        else {
            int32_t x32;
            memcpy(&x32, (const unsigned char *)a->slots + 4 * t, 4);
            x = x32;
        }
        x = x < 0 ? x : x < rows ? spread(x, B) : big.kv_rows + x;
        if (wide) memcpy(slots + 8 * t, &x, 8);
        else {
            const int32_t x32 = (int32_t)x;
            memcpy(slots + 4 * t, &x32, 4);
        }
    }
    big.slots = slots;
    rk_tensor ts[RK_TENSORS_MAX];
    const int nt = rk_tensors(v, ts, RK_TENSORS_MAX);
    unsigned char *maps[2] = {0}, *small[2] = {0};
    size_t map_bytes[2] = {0};
    const rk_tensor *cache[2] = {0};
    int nm = 0, rc = -1;
    for (int i = 0; i < nt && nm < 2; i++) {
        if (ts[i].rule != RK_ROWS_CACHE) continue;
        int64_t st0, rb, tb;
        memcpy(&st0, (const char *)&p + ts[i].stride_at[0], 8);
        rk_dump_row_shape(v, &ts[i], &rb, &tb);
        const int64_t units = ts[i].rank == 2 ? big.kv_rows : (big.kv_rows - 1) / B + 1; /* rows, or blocks */
        map_bytes[nm] = (size_t)((units + 1) * st0 * ts[i].elem + 4096);
        maps[nm] = sparse(map_bytes[nm]);
        if (!maps[nm]) {
            spread_refused = 1;
            goto done;
        }
        memcpy(&small[nm], (const char *)&p + ts[i].at, sizeof small[nm]);
        memcpy((char *)&big + ts[i].at, &maps[nm], sizeof maps[nm]);
        cache[nm++] = &ts[i];
    }
    for (int copy_back = 0; copy_back < 2; copy_back++) {
        for (int m = 0; m < nm; m++)
            for (int64_t r = 0; r < rows; r++) {
                int64_t at, tail, big_at, big_tail, rb, tb;
                rk_dump_row_shape(v, cache[m], &rb, &tb);
                assert_int_equal(rk_dump_row_at(v, cache[m], &p, r, &at, &tail), 0);
                assert_int_equal(rk_dump_row_at(v, cache[m], &big, spread(r, B), &big_at, &big_tail), 0);
                assert_true(big_at + rb <= (int64_t)map_bytes[m] && big_tail + tb <= (int64_t)map_bytes[m]);
                if (copy_back) {
                    memcpy(small[m] + at, maps[m] + big_at, (size_t)rb);
                    memcpy(small[m] + tail, maps[m] + big_tail, (size_t)tb);
                } else {
                    memcpy(maps[m] + big_at, small[m] + at, (size_t)rb);
                    memcpy(maps[m] + big_tail, small[m] + tail, (size_t)tb);
                }
            }
        if (!copy_back) rc = ropekv_launch(kernel, &big, NULL);
    }
done:
    for (int m = 0; m < 2; m++)
        if (maps[m]) munmap(maps[m], map_bytes[m]);
    free(slots);
    return rc;
}

/* A launch on a cache of millions of rows (gigabytes, a sparse mapping), dumped under a bound of 1 MiB: its dump holds
 * the rows the slots name, and replays bit for bit (the replay's cache holds those rows' blocks only). Flat and
 * paged, with page tails, the write and the read-back op. */
static void test_huge_cache(void **state) {
    (void)state;
    static const ropekv_variant vs[] = {
        {ROPEKV_SIZED(ropekv_variant), .spec = "deepseek_v3", .kv = ROPEKV_KV_FP8_E4M3},
        {ROPEKV_SIZED(ropekv_variant), .spec = "deepseek_v32", .kv = ROPEKV_KV_FP8_TILE, .layout = ROPEKV_KV_PAGED,
         .slots = ROPEKV_INDEX_INT32},
        {ROPEKV_SIZED(ropekv_variant), .spec = "deepseek_v4_flash", .record = "dsv4_fp8", .layout = ROPEKV_KV_PAGED},
        {ROPEKV_SIZED(ropekv_variant), .spec = "deepseek_v4_flash", .record = "dsv4_fp8", .layout = ROPEKV_KV_PAGED,
         .op = ROPEKV_OP_READ, .slots = ROPEKV_INDEX_INT32},
        {ROPEKV_SIZED(ropekv_variant), .spec = "deepseek_v4_flash", .kv = ROPEKV_KV_BF16, .layout = ROPEKV_KV_SPLIT},
    };
    for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "huge%zu", i);
        const char *dir = fresh_dir(name);
        ropekv_ctx *c = dump_ctx(dir, NULL, (int64_t)1 << 20);
        ropekv_kernel *k = NULL;
        assert_int_equal(ropekv_kernel_get(c, &vs[i], &k), ROPEKV_OK);
        const rk_desc *rv = rk_test_ref_variant(&cat, vs[i].spec, &vs[i]);
        assert_non_null(rv);
        rk_shape sh = {.tokens = 5, .heads = 2, .max_pos = 16, .neg_every = 3, .min_slot = 1, .k_scale = 0.37f};
        char why[2048];
        const int checked = rk_check(rv, &sh, 7, launch_spread, k, why, sizeof why);
        ropekv_kernel_release(k);
        ropekv_destroy(c);
        if (spread_refused) {
            print_message("skipped: the system refuses a sparse mapping of gigabytes\n");
            return;
        }
        if (checked != 0) fail_msg("%s: %s", rv->key, why);
        char files[2][512];
        assert_int_equal(dumps_in(dir, files, 2), 1);
        rk_codeobj f = slurp(files[0]);
        assert_true(f.len < 64 * 1024);
        rk_dump *dm = malloc(sizeof *dm);
        rk_err err = {0};
        assert_int_equal(rk_dump_parse(f.data, f.len, dm, &err), ROPEKV_OK);
        assert_true(dm->args.kv_rows > 1000000);
        for (int t = 0; t < dm->n_tensors; t++)
            if (dm->t[t].rows) {
                assert_true(dm->t[t].bytes > ((uint64_t)256 << 20)); /* far past the bound */
                assert_true(dm->t[t].n_rows > 0 && dm->t[t].n_rows <= 5);
                assert_true(rk_dump_row(&dm->t[t], 0) >= dm->args.min_slot);
            }
        free(dm);
        rk_code_free(&f);
        rk_buf out = {0};
        const int status = replay(files[0], "--backend", "host", &out);
        if (status != 0 || !strstr(out.p, "every byte equal to the reference") || !strstr(out.p, "rows dumped"))
            fail_msg("replay of %s: exit %d:\n%s", files[0], status, out.p ? out.p : "");
        rk_buf_free(&out);
    }
}

/* The rows a cache's dump holds: the slots in [min_slot, kv_rows), increasing, each once. */
static void test_slot_rows(void **state) {
    (void)state;
    const int64_t wide[] = {5, -1, 3, 5, 9, 3, 0, 8, 12};
    const int32_t narrow[] = {5, -1, 3, 5, 9, 3, 0, 8, 12};
    for (int w = 0; w < 2; w++) {
        int64_t *rows, n;
        assert_int_equal(rk_dump_slot_rows(w ? (const void *)wide : (const void *)narrow, 9, w, 1, 9, &rows, &n), 0);
        assert_int_equal(n, 3);
        assert_int_equal(rows[0], 3);
        assert_int_equal(rows[1], 5);
        assert_int_equal(rows[2], 8);
        free(rows);
        assert_int_equal(rk_dump_slot_rows(wide, 9, 1, 20, 30, &rows, &n), 0); /* none in range */
        assert_int_equal(n, 0);
        assert_null(rows);
    }
}

/* The read-back op reads a row as often as the slots name it: a slot repeated is dumped once; a slot at kv_rows and
 * a negative one name no row. A bf16 cache of 3 million rows (a sparse mapping), two of them written before. */
static void test_repeated_slots(void **state) {
    (void)state;
    enum { ROWS = 3000000, W = 576, T = 5 };
    const ropekv_variant v = {ROPEKV_SIZED(ropekv_variant), .spec = "deepseek_v3", .kv = ROPEKV_KV_BF16,
                              .op = ROPEKV_OP_READ};
    uint16_t *cache = sparse((size_t)ROWS * W * 2);
    if (!cache) {
        print_message("skipped: the system refuses a sparse mapping of 3.5 GB\n");
        return;
    }
    for (int j = 0; j < W; j++) {
        cache[(size_t)5 * W + (size_t)j] = (uint16_t)(0x3f80 + j);          /* row 5 */
        cache[(size_t)(ROWS - 1) * W + (size_t)j] = (uint16_t)(0xbf80 + j); /* the last row */
    }
    int64_t slots[T] = {ROWS - 1, ROWS - 1, 5, -1, ROWS};
    static uint16_t out[T * W];
    memset(out, 0x55, sizeof out);
    const ropekv_args a = {ROPEKV_SIZED(ropekv_args), .tokens = T,    .kv_cache = cache, .kv_st = W,
                           .kv_rows = ROWS,           .slots = slots, .out = out,        .out_st = W};
    const char *dir = fresh_dir("repeated");
    ropekv_ctx *c = dump_ctx(dir, NULL, (int64_t)1 << 20);
    ropekv_kernel *k = NULL;
    assert_int_equal(ropekv_kernel_get(c, &v, &k), ROPEKV_OK);
    assert_int_equal(ropekv_launch(k, &a, NULL), ROPEKV_OK);
    assert_int_equal(out[0], 0xbf80);
    assert_int_equal(out[W + 1], 0xbf81);
    assert_int_equal(out[2 * W + 2], 0x3f82);
    ropekv_kernel_release(k);
    ropekv_destroy(c);
    munmap(cache, (size_t)ROWS * W * 2);
    char files[2][512];
    assert_int_equal(dumps_in(dir, files, 2), 1);
    rk_codeobj f = slurp(files[0]);
    rk_dump *dm = malloc(sizeof *dm);
    rk_err err = {0};
    assert_int_equal(rk_dump_parse(f.data, f.len, dm, &err), ROPEKV_OK);
    const rk_dump_tensor *t = NULL;
    for (int i = 0; i < dm->n_tensors; i++)
        if (!strcmp(dm->t[i].name, "kv_cache")) t = &dm->t[i];
    assert_non_null(t);
    assert_int_equal(t->bytes, (uint64_t)ROWS * W * 2);
    assert_int_equal(t->n_rows, 2);
    assert_int_equal(rk_dump_row(t, 0), 5);
    assert_int_equal(rk_dump_row(t, 1), ROWS - 1);
    assert_int_equal(t->row_bytes, W * 2);
    assert_int_equal(t->tail_bytes, 0);
    assert_int_equal(t->data[0] | t->data[1] << 8, 0x3f80); /* row 5's first element, then the last row's */
    assert_int_equal(t->data[t->row_bytes] | t->data[t->row_bytes + 1] << 8, 0xbf80);
    free(dm);
    rk_code_free(&f);
    rk_buf out_text = {0};
    const int status = replay(files[0], "--backend", "host", &out_text);
    if (status != 0 || !strstr(out_text.p, "kv_cache: 2 rows dumped, replayed in a cache of kv_rows 2") ||
        !strstr(out_text.p, "every byte equal to the reference"))
        fail_msg("exit %d:\n%s", status, out_text.p ? out_text.p : "");
    rk_buf_free(&out_text);
}

/* A spec loaded at run time travels with its dump: replayed from the dump's text, not from a file. */
static void test_round_trip_loaded_spec(void **state) {
    (void)state;
    const char *dir = fresh_dir("loaded");
    ropekv_ctx *c = dump_ctx(dir, NULL, 0);
    size_t len;
    const char *text = rk_embedded("minicpm3_4b.lua", &len);
    assert_non_null(text);
    assert_int_equal(ropekv_load_spec_text(c, "my/minicpm3_4b.lua", text, len), ROPEKV_OK);
    const ropekv_variant v = {ROPEKV_SIZED(ropekv_variant), .spec = "minicpm3_4b"};
    ropekv_kernel *k = NULL;
    assert_int_equal(ropekv_kernel_get(c, &v, &k), ROPEKV_OK);
    const rk_desc *rv = rk_test_ref_variant(&cat, v.spec, &v);
    assert_non_null(rv);
    launch_checked(k, rv, 5);
    ropekv_kernel_release(k);
    ropekv_destroy(c);
    char files[2][512];
    assert_int_equal(dumps_in(dir, files, 2), 1);
    rk_buf out = {0};
    const int status = replay(files[0], NULL, NULL, &out);
    if (status != 0 || !strstr(out.p, "every byte equal")) fail_msg("exit %d:\n%s", status, out.p ? out.p : "");
    rk_buf_free(&out);
}

/* The policy: every:2 dumps launches 2 and 4 of five; fail dumps each refused launch (its args, no tensors), which
 * replays as the same refusal; a launch whose dump would pass the byte bound is not dumped, and still runs. */
static void test_policy(void **state) {
    (void)state;
    const ropekv_variant v = {ROPEKV_SIZED(ropekv_variant), .spec = "deepseek_v3", .kv = ROPEKV_KV_BF16};
    const rk_desc *rv = rk_test_ref_variant(&cat, v.spec, &v);
    assert_non_null(rv);
    const char *dir = fresh_dir("policy");
    ropekv_ctx *c = dump_ctx(dir, "every:2,fail", 0);
    ropekv_kernel *k = NULL;
    assert_int_equal(ropekv_kernel_get(c, &v, &k), ROPEKV_OK);
    for (int i = 0; i < 5; i++) launch_checked(k, rv, 20 + (uint64_t)i);
    ropekv_args bad = {ROPEKV_SIZED(ropekv_args), .tokens = -1, .heads = 1};
    assert_int_equal(ropekv_launch(k, &bad, NULL), ROPEKV_ERR_SHAPE);
    assert_int_equal(ropekv_launch(k, NULL, NULL), ROPEKV_ERR_NULL); /* no args: nothing to dump */
    bad.tokens = 1;                                                  /* tensors missing */
    bad.max_pos = 16;
    assert_int_equal(ropekv_launch(k, &bad, NULL), ROPEKV_ERR_NULL);
    ropekv_kernel_release(k);
    ropekv_destroy(c);
    char files[8][512];
    assert_int_equal(dumps_in(dir, files, 8), 4);
    int every = 0, fails = 0;
    for (int i = 0; i < 4; i++) {
        rk_codeobj f = slurp(files[i]);
        rk_dump *dm = malloc(sizeof *dm);
        rk_err err = {0};
        assert_int_equal(rk_dump_parse(f.data, f.len, dm, &err), ROPEKV_OK);
        if (dm->reason == RK_DUMP_EVERY) {
            assert_true(dm->launch == 2 || dm->launch == 4);
            assert_int_equal(dm->status, ROPEKV_OK);
            every++;
        } else {
            assert_int_equal(dm->reason, RK_DUMP_FAIL);
            assert_int_equal(dm->n_tensors, 0);
            assert_int_equal(dm->status, dm->launch == 1 ? ROPEKV_ERR_SHAPE : ROPEKV_ERR_NULL);
            assert_non_null(strstr(dm->message, dm->launch == 1 ? "tokens" : "NULL"));
            fails++;
            rk_buf out = {0};
            const int status = replay(files[i], "--backend", "host", &out);
            if (status != 0 || !strstr(out.p, ropekv_status_name(dm->status)))
                fail_msg("exit %d:\n%s", status, out.p ? out.p : "");
            rk_buf_free(&out);
        }
        free(dm);
        rk_code_free(&f);
    }
    assert_int_equal(every, 2);
    assert_int_equal(fails, 2);

    /* the byte bound: nothing written, a warning, the launch as without dumps */
    dir = fresh_dir("bound");
    c = dump_ctx(dir, "first", 1000);
    assert_int_equal(ropekv_kernel_get(c, &v, &k), ROPEKV_OK);
    assert_int_equal(rk_test_capture_begin("/tmp/ropekv-test-dump-stderr"), 0);
    launch_checked(k, rv, 30);
    const char *said = rk_test_capture_end();
    assert_non_null(strstr(said, "not dumped"));
    assert_non_null(strstr(said, "more than the bound of 1000"));
    ropekv_kernel_release(k);
    ropekv_destroy(c);
    assert_int_equal(dumps_in(dir, files, 8), 0);
}

static void test_policy_parse(void **state) {
    (void)state;
    rk_dump_policy p;
    char why[512];
    assert_int_equal(rk_dump_policy_parse(NULL, NULL, &p, why, sizeof why), ROPEKV_OK);
    assert_true(p.first && !p.fail && p.every == 0 && p.max_bytes == RK_DUMP_MAX_BYTES_DEFAULT);
    assert_int_equal(rk_dump_policy_parse("fail,every:3", "4096", &p, why, sizeof why), ROPEKV_OK);
    assert_true(!p.first && p.fail && p.every == 3 && p.max_bytes == 4096);
    assert_int_equal(rk_dump_chosen(&p, 1, 0), RK_DUMP_NOT);
    assert_int_equal(rk_dump_chosen(&p, 3, 0), RK_DUMP_EVERY);
    assert_int_equal(rk_dump_chosen(&p, 4, 0), RK_DUMP_NOT);
    assert_int_equal(rk_dump_chosen(&p, 6, 0), RK_DUMP_EVERY);
    assert_int_equal(rk_dump_chosen(&p, 1, 1), RK_DUMP_FAIL);
    assert_int_equal(rk_dump_policy_parse("first", NULL, &p, why, sizeof why), ROPEKV_OK);
    assert_int_equal(rk_dump_chosen(&p, 1, 0), RK_DUMP_FIRST);
    assert_int_equal(rk_dump_chosen(&p, 2, 0), RK_DUMP_NOT);
    assert_int_equal(rk_dump_chosen(&p, 1, 1), RK_DUMP_NOT);
    static const char *const bad_when[] = {"",
                                           "firsts",
                                           "every:",
                                           "every:0",
                                           "every:-2",
                                           "every:1x",
                                           "first,,fail",
                                           "first,",
                                           "every:99999999999999999999",
                                           "FIRST"};
    for (size_t i = 0; i < sizeof bad_when / sizeof bad_when[0]; i++) {
        why[0] = '\0';
        assert_int_equal(rk_dump_policy_parse(bad_when[i], NULL, &p, why, sizeof why), ROPEKV_ERR_ARG);
        assert_non_null(strstr(why, "dump when"));
    }
    static const char *const bad_max[] = {"", "0", "-1", "12k", "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad_max / sizeof bad_max[0]; i++) {
        why[0] = '\0';
        assert_int_equal(rk_dump_policy_parse(NULL, bad_max[i], &p, why, sizeof why), ROPEKV_ERR_ARG);
        assert_non_null(strstr(why, "dump max bytes"));
    }
}

/* Invalid options and variables fail ropekv_create, named; an unusable directory is a warning and no dump. */
static void test_options_refused(void **state) {
    (void)state;
    ropekv_ctx *c = NULL;
    ropekv_options o = {ROPEKV_SIZED(ropekv_options), .backend = ROPEKV_BACKEND_HOST, .dump_when = "sometimes"};
    assert_int_equal(rk_test_capture_begin("/tmp/ropekv-test-dump-stderr"), 0);
    assert_int_equal(ropekv_create(&c, &o), ROPEKV_ERR_ARG);
    assert_non_null(strstr(rk_test_capture_end(), "options.dump_when"));
    o.dump_when = NULL;
    o.dump_max_bytes = -5;
    assert_int_equal(ropekv_create(&c, &o), ROPEKV_ERR_ARG);
    o.dump_max_bytes = 0;
    setenv("ROPEKV_DUMP_WHEN", "every:zero", 1);
    assert_int_equal(rk_test_capture_begin("/tmp/ropekv-test-dump-stderr"), 0);
    assert_int_equal(ropekv_create(&c, &o), ROPEKV_ERR_ARG);
    assert_non_null(strstr(rk_test_capture_end(), "ROPEKV_DUMP_WHEN"));
    unsetenv("ROPEKV_DUMP_WHEN");
    setenv("ROPEKV_DUMP_MAX_BYTES", "lots", 1);
    assert_int_equal(rk_test_capture_begin("/tmp/ropekv-test-dump-stderr"), 0);
    assert_int_equal(ropekv_create(&c, &o), ROPEKV_ERR_ARG);
    assert_non_null(strstr(rk_test_capture_end(), "ROPEKV_DUMP_MAX_BYTES"));
    unsetenv("ROPEKV_DUMP_MAX_BYTES");
    assert_null(c);
    /* a directory others may write: a warning, the context works, nothing is dumped */
    char dir[600];
    snprintf(dir, sizeof dir, "%s/open", scratch);
    assert_int_equal(mkdir(dir, 0700), 0);
    assert_int_equal(chmod(dir, 0777), 0);
    o.dump = dir;
    assert_int_equal(rk_test_capture_begin("/tmp/ropekv-test-dump-stderr"), 0);
    assert_int_equal(ropekv_create(&c, &o), ROPEKV_OK);
    assert_non_null(strstr(rk_test_capture_end(), "writable by others"));
    ropekv_destroy(c);
    c = NULL;
    /* $ROPEKV_DUMP is read when options.dump is NULL */
    const char *env_dir = fresh_dir("env");
    setenv("ROPEKV_DUMP", env_dir, 1);
    o.dump = NULL;
    assert_int_equal(ropekv_create(&c, &o), ROPEKV_OK);
    unsetenv("ROPEKV_DUMP");
    const ropekv_variant v = {ROPEKV_SIZED(ropekv_variant), .spec = "deepseek_v3"};
    ropekv_kernel *k = NULL;
    assert_int_equal(ropekv_kernel_get(c, &v, &k), ROPEKV_OK);
    launch_checked(k, rk_test_ref_variant(&cat, v.spec, &v), 3);
    ropekv_kernel_release(k);
    ropekv_destroy(c);
    char files[2][512];
    assert_int_equal(dumps_in(env_dir, files, 2), 1);
}

/* ---- hostile files ------------------------------------------------------------------------------------------ */

/* A small valid dump of v's first launch in memory (dumped in the directory name). */
static rk_codeobj small_dump_of(const ropekv_variant *v, const char *name) {
    const char *dir = fresh_dir(name);
    ropekv_ctx *c = dump_ctx(dir, NULL, 0);
    ropekv_kernel *k = NULL;
    assert_int_equal(ropekv_kernel_get(c, v, &k), ROPEKV_OK);
    launch_checked(k, rk_test_ref_variant(&cat, v->spec, v), 1);
    ropekv_kernel_release(k);
    ropekv_destroy(c);
    char files[2][512];
    assert_int_equal(dumps_in(dir, files, 2), 1);
    return slurp(files[0]);
}

static uint32_t le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static void set_le32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint64_t le64(const unsigned char *p) {
    uint64_t v = 0;
    for (int j = 7; j >= 0; j--) v = v << 8 | p[j];
    return v;
}
static void set_le64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* The format's fields, walked independently of the reader (docs/dump.md): each field's offset. */
enum {
    F_MAGIC,
    F_VERSION,
    F_RESERVED,
    F_LIBRARY,
    F_SPEC_TEXT = F_LIBRARY + 8,
    F_ENUMS,
    F_REASON = F_ENUMS + 8,
    F_STATUS,
    F_LAUNCH,
    F_MESSAGE,
    F_ARGS,
    F_TENSORS,
    F_TENSOR0,
    F_CHECKSUM,
    F_END,
    F_COUNT
};
static void walk(const unsigned char *p, size_t n, size_t at[F_COUNT]) {
    size_t o = 0;
    at[F_MAGIC] = o, o += 8;
    at[F_VERSION] = o, o += 4;
    at[F_RESERVED] = o, o += 4;
    for (int i = F_LIBRARY; i <= F_SPEC_TEXT; i++) at[i] = o, o += 4 + le32(p + o);
    for (int i = 0; i < 8; i++) at[F_ENUMS + i] = o, o += 4;
    at[F_REASON] = o, o += 4;
    at[F_STATUS] = o, o += 4;
    at[F_LAUNCH] = o, o += 8;
    at[F_MESSAGE] = o, o += 4 + le32(p + o);
    at[F_ARGS] = o;
    const uint32_t na = le32(p + o);
    o += 4;
    for (uint32_t i = 0; i < na; i++) o += 4 + le32(p + o) + 4 + 8;
    at[F_TENSORS] = o;
    const uint32_t nt = le32(p + o);
    o += 4;
    at[F_TENSOR0] = o;
    for (uint32_t i = 0; i < nt; i++) {
        o += 4 + le32(p + o) + 4;
        const uint64_t b = le64(p + o);
        o += 8;
        const uint32_t form = le32(p + o);
        o += 4;
        if (form == 0) o += b;
        else o += 16 + le64(p + o + 8) * (8 + le32(p + o) + le32(p + o + 4)); /* the row list, then the rows */
    }
    at[F_CHECKSUM] = o;
    at[F_END] = o + 32;
    assert_int_equal(at[F_END], n);
}

/* The reader refuses buf with status s and a message holding want. */
static void refused(const unsigned char *buf, size_t n, ropekv_status s, const char *want) {
    rk_dump *dm = malloc(sizeof *dm);
    rk_err err = {0};
    const ropekv_status got = rk_dump_parse(buf, n, dm, &err);
    if (got != s || !strstr(err.msg, want))
        fail_msg("%zu bytes: want %s with '%s', got %s: %s", n, ropekv_status_name(s), want, ropekv_status_name(got),
                 err.msg);
    free(dm);
}

static void test_hostile_files(void **state) {
    (void)state;
    const ropekv_variant v = {ROPEKV_SIZED(ropekv_variant), .spec = "deepseek_v3", .kv = ROPEKV_KV_FP8_E4M3};
    rk_codeobj f = small_dump_of(&v, "small");
    const size_t n = f.len;
    size_t at[F_COUNT];
    walk(f.data, n, at);
    unsigned char *b = malloc(n + 1);
    /* truncated: at every field's start and inside it, and at every byte of the head and of the checksum */
    for (size_t cut = 0; cut < n; cut++) {
        if (cut > at[F_TENSOR0] + 64 && cut < at[F_CHECKSUM] && cut % 257) continue;
        rk_dump *dm = malloc(sizeof *dm);
        rk_err err = {0};
        const ropekv_status got = rk_dump_parse(f.data, cut, dm, &err);
        if (got != ROPEKV_ERR_DUMP ||
            (!strstr(err.msg, "truncated") && !strstr(err.msg, "passes the end") && !strstr(err.msg, "pass the end")))
            fail_msg("cut at %zu of %zu: %s: %s", cut, n, ropekv_status_name(got), err.msg);
        free(dm);
    }
    static const char *const names[F_END] = {"magic",
                                             "format version",
                                             "reserved",
                                             "library",
                                             "backend",
                                             "device target",
                                             "arch row",
                                             "key",
                                             "kernel name",
                                             "spec",
                                             "record",
                                             "spec text",
                                             "variant kv",
                                             "variant q",
                                             "variant positions",
                                             "variant slots",
                                             "variant q_dtype",
                                             "variant layout",
                                             "variant op",
                                             "variant norm",
                                             "reason",
                                             "status",
                                             "launch",
                                             "message",
                                             "args count",
                                             "tensor count",
                                             "tensor name",
                                             "checksum"};
    for (int i = F_MAGIC; i < F_END; i++) { /* cut at each field's first byte: the message names the field */
        char want[96];
        snprintf(want, sizeof want, "truncated at byte %zu: %s needs", at[i], names[i]);
        refused(f.data, at[i], ROPEKV_ERR_DUMP, want);
    }
#define MUTATE(off, val) (memcpy(b, f.data, n), set_le32(b + (off), (val)))
    MUTATE(at[F_MAGIC], 0x504d5544); /* "DUMP" */
    refused(b, n, ROPEKV_ERR_DUMP, "magic");
    MUTATE(at[F_VERSION], 1); /* the first format, whose caches were whole */
    refused(b, n, ROPEKV_ERR_VERSION, "format version: 1, but this ropekv");
    MUTATE(at[F_RESERVED], 1);
    refused(b, n, ROPEKV_ERR_DUMP, "reserved");
    MUTATE(at[F_LIBRARY], 0xffffffffu);
    refused(b, n, ROPEKV_ERR_DUMP, "library: length 4294967295 is over its limit");
    MUTATE(at[F_SPEC_TEXT], (uint32_t)(n - at[F_SPEC_TEXT] - 4 + 1)); /* one byte past the end, under the limit */
    refused(b, n, ROPEKV_ERR_DUMP, "spec text: length");
    memcpy(b, f.data, n);
    b[at[F_LIBRARY] + 4] = '\n';
    refused(b, n, ROPEKV_ERR_DUMP, "library: byte 0 is a control character");
    MUTATE(at[F_ENUMS] + 4 * 6, 7); /* op */
    refused(b, n, ROPEKV_ERR_DUMP, "variant op: 7 is out of range");
    MUTATE(at[F_REASON], 9);
    refused(b, n, ROPEKV_ERR_DUMP, "reason");
    MUTATE(at[F_STATUS], 12345);
    refused(b, n, ROPEKV_ERR_DUMP, "status: 12345");
    MUTATE(at[F_ARGS], 0x7fffffffu);
    refused(b, n, ROPEKV_ERR_DUMP, "args count");
    MUTATE(at[F_ARGS] + 4 + 4, 0x59454b4d); /* the first field's name: "MKEY"... not a field */
    refused(b, n, ROPEKV_ERR_DUMP, "is not a field");
    MUTATE(at[F_TENSORS], 1u << 30);
    refused(b, n, ROPEKV_ERR_DUMP, "tensor count");
    {
        const size_t bytes_at = at[F_TENSOR0] + 4 + le32(f.data + at[F_TENSOR0]) + 4;
        memcpy(b, f.data, n);
        for (int j = 0; j < 8; j++) b[bytes_at + j] = j == 7 ? 0x7f : 0xff; /* 2^63 - 1 bytes */
        refused(b, n, ROPEKV_ERR_DUMP, "pass the end");
        memcpy(b, f.data, n);
        b[bytes_at + 8 + 4] ^= 1; /* a flipped byte of the first tensor (after its form) */
        refused(b, n, ROPEKV_ERR_DUMP, "checksum");
    }
    memcpy(b, f.data, n);
    b[n] = 0;
    refused(b, n + 1, ROPEKV_ERR_DUMP, "1 bytes after the checksum");
    refused(f.data, n, ROPEKV_OK, ""); /* and the file itself is read */

    /* ropekv-gen replay names the refusal, exit 3 */
    char path[600];
    snprintf(path, sizeof path, "%s/hostile.rkdump", scratch);
    MUTATE(at[F_VERSION], 9);
    assert_int_equal(rk_test_write_file(path, b, n, 0600), ROPEKV_OK);
    rk_buf out = {0};
    assert_int_equal(replay(path, NULL, NULL, &out), 3);
    assert_non_null(strstr(out.p, "ROPEKV_ERR_VERSION: format version: 9"));
    assert_int_equal(rk_test_write_file(path, f.data, 100, 0600), ROPEKV_OK);
    assert_int_equal(replay(path, NULL, NULL, &out), 3);
    assert_non_null(strstr(out.p, "ROPEKV_ERR_DUMP"));
    /* a status the launch does not reproduce: exit 1 */
    MUTATE(at[F_STATUS], ROPEKV_ERR_SHAPE);
    rk_sha256 h;
    rk_sha256_init(&h);
    rk_sha256_update(&h, b, at[F_CHECKSUM]);
    rk_sha256_final(&h, b + at[F_CHECKSUM]);
    assert_int_equal(rk_test_write_file(path, b, n, 0600), ROPEKV_OK);
    assert_int_equal(replay(path, "--backend", "host", &out), 1);
    assert_non_null(strstr(out.p, "the launch returned ROPEKV_OK"));
#undef MUTATE
    rk_buf_free(&out);
    free(b);
    rk_code_free(&f);
}

/* The offset of tensor name's entry in dump f (its name's length field). */
static size_t entry_of(const rk_codeobj *f, const char *name) {
    size_t at[F_COUNT];
    walk(f->data, f->len, at);
    const unsigned char *p = f->data;
    size_t o = at[F_TENSOR0];
    for (uint32_t i = 0; i < le32(p + at[F_TENSORS]); i++) {
        const uint32_t len = le32(p + o);
        if (len == strlen(name) && !memcmp(p + o + 4, name, len)) return o;
        o += 4 + len + 4;
        const uint64_t b = le64(p + o);
        o += 8;
        const uint32_t form = le32(p + o);
        o += 4;
        o += form == 0 ? b : 16 + le64(p + o + 8) * (8 + le32(p + o) + le32(p + o + 4));
    }
    fail_msg("no tensor %s", name);
    return 0;
}

/* The checksum of the n bytes at b made again. */
static void resum(unsigned char *b, size_t n) {
    rk_sha256 h;
    rk_sha256_init(&h);
    rk_sha256_update(&h, b, n - 32);
    rk_sha256_final(&h, b + n - 32);
}

/* f with its kv_cache's rows rewritten, consistently: the first keep rows of its list, each cut to row_bytes (at most
 * the dumped ones), the checksum made again. */
static rk_codeobj cut_rows(const rk_codeobj *f, uint64_t keep, uint32_t row_bytes) {
    const size_t e = entry_of(f, "kv_cache"), fields = e + 4 + strlen("kv_cache") + 4 + 8 + 4;
    const unsigned char *p = f->data;
    const uint32_t rb = le32(p + fields), tb = le32(p + fields + 4);
    const uint64_t n = le64(p + fields + 8);
    assert_true(keep <= n && row_bytes <= rb);
    const size_t list = fields + 16, data = list + 8 * n, end = data + n * (rb + tb);
    rk_codeobj o = {malloc(f->len), 0};
    assert_non_null(o.data);
    memcpy(o.data, p, fields);
    o.len = fields;
    set_le32(o.data + o.len, row_bytes);
    set_le32(o.data + o.len + 4, tb);
    set_le64(o.data + o.len + 8, keep);
    o.len += 16;
    memcpy(o.data + o.len, p + list, 8 * keep);
    o.len += 8 * keep;
    for (uint64_t k = 0; k < keep; k++) {
        memcpy(o.data + o.len, p + data + k * (rb + tb), row_bytes);
        memcpy(o.data + o.len + row_bytes, p + data + k * (rb + tb) + rb, tb);
        o.len += row_bytes + tb;
    }
    memcpy(o.data + o.len, p + end, f->len - end);
    o.len += f->len - end;
    resum(o.data, o.len);
    return o;
}

/* Hostile row lists (checksums made again, so the reader reaches them): a row outside [min_slot, kv_rows), repeated,
 * decreasing; a form other than the tensor's; row and tail bytes out of range; a row count past the end; refused by
 * the reader naming the tensor. Rows cut short or missing are consistent files that replay refuses (exit 3). */
static void test_hostile_rows(void **state) {
    (void)state;
    const ropekv_variant v = {ROPEKV_SIZED(ropekv_variant), .spec = "deepseek_v3", .kv = ROPEKV_KV_FP8_E4M3};
    rk_codeobj f = small_dump_of(&v, "rows");
    const size_t n = f.len, e = entry_of(&f, "kv_cache"), form = e + 4 + strlen("kv_cache") + 4 + 8;
    const size_t fields = form + 4, list = fields + 16;
    const uint64_t n_rows = le64(f.data + fields + 8);
    assert_true(n_rows >= 2);
    rk_dump *dm = malloc(sizeof *dm);
    rk_err err = {0};
    assert_int_equal(rk_dump_parse(f.data, n, dm, &err), ROPEKV_OK);
    const int64_t kv_rows = dm->args.kv_rows;
    free(dm);
    unsigned char *b = malloc(n);
#define EDIT(stmt) (memcpy(b, f.data, n), (stmt), resum(b, n))
    EDIT(set_le64(b + list + 8 * (n_rows - 1), (uint64_t)kv_rows));
    refused(b, n, ROPEKV_ERR_DUMP, "tensor 'kv_cache': row");
    refused(b, n, ROPEKV_ERR_DUMP, "is outside [min_slot 0, kv_rows");
    EDIT(set_le64(b + list + 8, le64(f.data + list)));
    refused(b, n, ROPEKV_ERR_DUMP, "(entry 1 of the row list) repeats the one before it");
    EDIT((set_le64(b + list, le64(f.data + list + 8)), set_le64(b + list + 8, le64(f.data + list))));
    refused(b, n, ROPEKV_ERR_DUMP, "(entry 1 of the row list) is below the one before it");
    EDIT(set_le32(b + form, 0));
    refused(b, n, ROPEKV_ERR_DUMP, "tensor 'kv_cache': form 0 (whole), but a cache is dumped as rows");
    EDIT(set_le32(b + form, 2));
    refused(b, n, ROPEKV_ERR_DUMP, "tensor 'kv_cache': form 2 is out of range");
    {
        size_t at[F_COUNT];
        walk(f.data, n, at);
        const size_t first_form = at[F_TENSOR0] + 4 + le32(f.data + at[F_TENSOR0]) + 4 + 8;
        EDIT(set_le32(b + first_form, 1));
        refused(b, n, ROPEKV_ERR_DUMP, "form 1 (rows), but only the caches are dumped as rows");
    }
    EDIT(set_le32(b + fields, 0));
    refused(b, n, ROPEKV_ERR_DUMP, "tensor 'kv_cache': row bytes 0");
    EDIT(set_le32(b + fields + 4, 256));
    refused(b, n, ROPEKV_ERR_DUMP, "tensor 'kv_cache': tail bytes 256");
    EDIT(set_le64(b + fields + 8, (uint64_t)1 << 61));
    refused(b, n, ROPEKV_ERR_DUMP, "tensor 'kv_cache': row count 2305843009213693952");
    EDIT(set_le32(b + fields, le32(f.data + fields) + 4096));
    refused(b, n, ROPEKV_ERR_DUMP, "pass the end of the file");
    for (size_t cut = form; cut < list + 8 * n_rows + 16; cut++) /* truncated inside the rows' fields */
        refused(f.data, cut, ROPEKV_ERR_DUMP, cut < list ? "truncated at byte" : "pass");
#undef EDIT
    /* consistent files that replay refuses: rows cut to other than the kernel's row bytes, a row missing */
    char path[600];
    snprintf(path, sizeof path, "%s/rows.rkdump", scratch);
    rk_buf out = {0};
    const uint32_t rb = le32(f.data + fields);
    rk_codeobj g = cut_rows(&f, n_rows, rb - 16);
    refused(g.data, g.len, ROPEKV_OK, "");
    assert_int_equal(rk_test_write_file(path, g.data, g.len, 0600), ROPEKV_OK);
    int status = replay(path, "--backend", "host", &out);
    if (status != 3 || !strstr(out.p, "ROPEKV_ERR_DUMP: tensor 'kv_cache': rows of"))
        fail_msg("exit %d:\n%s", status, out.p ? out.p : "");
    rk_code_free(&g);
    g = cut_rows(&f, n_rows - 1, rb);
    assert_int_equal(rk_test_write_file(path, g.data, g.len, 0600), ROPEKV_OK);
    status = replay(path, "--backend", "host", &out);
    if (status != 3 || !strstr(out.p, "is not the") || !strstr(out.p, "rows the slots name"))
        fail_msg("exit %d:\n%s", status, out.p ? out.p : "");
    rk_code_free(&g);
    g = cut_rows(&f, n_rows, rb); /* the same rows: the file itself, replayed */
    assert_int_equal(g.len, n);
    assert_memory_equal(g.data, f.data, n);
    rk_code_free(&g);
    rk_buf_free(&out);
    free(b);
    rk_code_free(&f);
}

/* f with string fields F_LIBRARY + 1 .. F_LIBRARY + 5 (backend, device target, arch row, key, kernel name) replaced by
 * s[0..4] and the checksum made again: what the same launch's dump on another target holds. */
static rk_codeobj retarget(const rk_codeobj *f, const char *const s[5]) {
    size_t at[F_COUNT];
    walk(f->data, f->len, at);
    rk_codeobj o = {malloc(f->len + 2048), 0};
    assert_non_null(o.data);
    memcpy(o.data, f->data, at[F_LIBRARY + 1]);
    o.len = at[F_LIBRARY + 1];
    for (int i = 0; i < 5; i++) {
        set_le32(o.data + o.len, (uint32_t)strlen(s[i]));
        memcpy(o.data + o.len + 4, s[i], strlen(s[i]));
        o.len += 4 + strlen(s[i]);
    }
    memcpy(o.data + o.len, f->data + at[F_LIBRARY + 6], at[F_CHECKSUM] - at[F_LIBRARY + 6]);
    o.len += at[F_CHECKSUM] - at[F_LIBRARY + 6];
    rk_sha256 h;
    rk_sha256_init(&h);
    rk_sha256_update(&h, o.data, o.len);
    rk_sha256_final(&h, o.data + o.len);
    o.len += 32;
    return o;
}

/* A dump made by a CUDA context on an H200 (backend cuda, target sm_90, the sm_90 kernel's key and name) replays on the
 * host backend: the same choices, built for the host's row, bit for bit; a kernel name the spec and choices do not
 * give (another library version's) is warned about and replayed as they describe. */
static void test_other_target_replays_on_host(void **state) {
    (void)state;
    const ropekv_variant v = {ROPEKV_SIZED(ropekv_variant), .spec = "deepseek_v32", .kv = ROPEKV_KV_FP8_TILE,
                              .layout = ROPEKV_KV_PAGED};
    const rk_desc *host = rk_test_ref_variant(&cat, v.spec, &v);
    assert_non_null(host);
    const rk_arch *sm90 = rk_arch_find(&cat.archs, "sm_90");
    assert_non_null(sm90);
    rk_desc *d = malloc(sizeof *d);
    rk_err err = {0};
    const rk_choice choice = rk_desc_choice(host);
    assert_int_equal(rk_desc_make(host->spec, sm90, &choice, d, &err), ROPEKV_OK);
    assert_string_not_equal(d->key, host->key);
    rk_codeobj f = small_dump_of(&v, "retarget");
    char path[600];
    snprintf(path, sizeof path, "%s/sm_90.rkdump", scratch);
    const char *const cuda[5] = {"cuda", "sm_90", "sm_90", d->key, d->name};
    rk_codeobj g = retarget(&f, cuda);
    assert_int_equal(rk_test_write_file(path, g.data, g.len, 0600), ROPEKV_OK);
    rk_buf out = {0};
    int status = replay(path, NULL, NULL, &out);
    if (status != 0 || !strstr(out.p, "cuda target sm_90 (row sm_90)") || !strstr(out.p, host->name) ||
        !strstr(out.p, "every byte equal") || strstr(out.p, "warning"))
        fail_msg("exit %d:\n%s", status, out.p ? out.p : "");
    rk_code_free(&g);
    const char *const other[5] = {"cuda", "sm_90", "sm_90", d->key, "rk_a_kernel_of_another_version"};
    g = retarget(&f, other);
    assert_int_equal(rk_test_write_file(path, g.data, g.len, 0600), ROPEKV_OK);
    status = replay(path, NULL, NULL, &out);
    if (status != 0 || !strstr(out.p, "warning: the dump's spec and choices describe") ||
        !strstr(out.p, "every byte equal"))
        fail_msg("exit %d:\n%s", status, out.p ? out.p : "");
    rk_buf_free(&out);
    rk_code_free(&g);
    rk_code_free(&f);
    free(d);
}

/* Writes the n bytes at p to dir/name; 0, or 1. */
static int write_seed(const char *dir, const char *name, const unsigned char *p, size_t n) {
    char out[1100];
    snprintf(out, sizeof out, "%s/%s.rkdump", dir, name);
    if (rk_write_file(out, p, n) != ROPEKV_OK) return 1;
    printf("%s (%zu bytes)\n", out, n);
    return 0;
}

/* The hostile seeds, variants of the DeepSeek-V3 dump f (two rows in its cache): the head's fields (magic, version 1,
 * a spec text's length past the end, truncated, a trailing byte, a flipped byte), and its cache's rows (repeated,
 * decreasing, past kv_rows, dumped whole) under a checksum made again. */
static int write_hostile_seeds(const char *dir, const rk_codeobj *f) {
    size_t at[F_COUNT];
    walk(f->data, f->len, at);
    const size_t n = f->len, form = entry_of(f, "kv_cache") + 4 + strlen("kv_cache") + 4 + 8, list = form + 4 + 16;
    if (le64(f->data + form + 4 + 8) != 2) return 1;
    unsigned char *b = malloc(n + 1);
    int rc = b == NULL;
#define SEED(name, len, stmt) (rc = rc || (memcpy(b, f->data, n), (stmt), write_seed(dir, name, b, len)))
    SEED("bad_magic", n, b[0] = 'X');
    SEED("version_1", n, set_le32(b + at[F_VERSION], 1));
    SEED("huge_spec_length", n, set_le32(b + at[F_SPEC_TEXT], 0xfffffff0u));
    SEED("truncated_head", 200, (void)0);
    SEED("truncated_tensor", n / 2, (void)0);
    SEED("trailing_byte", n + 1, b[n] = 0);
    SEED("checksum_flipped", n, b[at[F_CHECKSUM] - 1] ^= 1);
    SEED("rows_repeated", n, (set_le64(b + list + 8, le64(f->data + list)), resum(b, n)));
    SEED("rows_decreasing", n,
         (set_le64(b + list, le64(f->data + list + 8)), set_le64(b + list + 8, le64(f->data + list)), resum(b, n)));
    SEED("rows_past_kv_rows", n, (set_le64(b + list + 8, 1u << 20), resum(b, n)));
    SEED("cache_whole", n, (set_le32(b + form, 0), resum(b, n)));
#undef SEED
    free(b);
    return rc;
}

/* --seeds DIR: the fuzz target's seeds (tests/fuzz/corpus/dump): small valid dumps of two variants (two tokens, two
 * rows in the cache) and two refused launches, and the hostile seeds. */
static int write_seeds(const char *dir) {
    if (rk_test_setup(scratch, &cat) != 0) return 1;
    static const ropekv_variant vs[] = {
        {ROPEKV_SIZED(ropekv_variant), .spec = "deepseek_v3", .kv = ROPEKV_KV_FP8_E4M3},
        {ROPEKV_SIZED(ropekv_variant), .spec = "deepseek_v32", .kv = ROPEKV_KV_FP8_TILE, .layout = ROPEKV_KV_PAGED},
    };
    const char *d = fresh_dir("seeds");
    ropekv_ctx *c = dump_ctx(d, "first,fail", 0);
    for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++) {
        ropekv_kernel *k = NULL;
        if (ropekv_kernel_get(c, &vs[i], &k) != ROPEKV_OK) return 1;
        rk_shape sh = {.tokens = 2, .heads = 1, .max_pos = 2, .k_scale = 1.0f};
        char why[2048];
        if (rk_check(rk_test_ref_variant(&cat, vs[i].spec, &vs[i]), &sh, 1, rk_test_launch, k, why, sizeof why))
            return 1;
        ropekv_args bad = {ROPEKV_SIZED(ropekv_args), .tokens = 1, .heads = 0};
        (void)ropekv_launch(k, &bad, NULL);
        ropekv_kernel_release(k);
    }
    ropekv_destroy(c);
    char files[8][512];
    const int n = dumps_in(d, files, 8);
    int rc = n == 4 ? 0 : 1;
    for (int i = 0; i < n && rc == 0; i++) {
        rk_codeobj f = {0};
        char name[600];
        const char *base = strrchr(files[i], '/') + 1;
        snprintf(name, sizeof name, "%s%.*s", strstr(base, "-fail-") ? "refused_" : "", (int)strcspn(base, "-"), base);
        rc = rk_read_file(files[i], &f) != ROPEKV_OK || write_seed(dir, name, f.data, f.len);
        if (rc == 0 && !strstr(base, "-fail-") && strstr(base, "deepseek_v3_")) rc = write_hostile_seeds(dir, &f);
        rk_code_free(&f);
    }
    rk_test_remove_tree(scratch);
    return rc;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--seeds")) return write_seeds(argv[2]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_policy_parse),
        cmocka_unit_test(test_slot_rows),
        cmocka_unit_test(test_round_trip_deepseek_v3),
        cmocka_unit_test(test_round_trip_fp8_tile_paged),
        cmocka_unit_test(test_round_trip_page_tail),
        cmocka_unit_test(test_round_trip_split),
        cmocka_unit_test(test_huge_cache),
        cmocka_unit_test(test_repeated_slots),
        cmocka_unit_test(test_round_trip_loaded_spec),
        cmocka_unit_test(test_policy),
        cmocka_unit_test(test_options_refused),
        cmocka_unit_test(test_hostile_files),
        cmocka_unit_test(test_hostile_rows),
        cmocka_unit_test(test_other_target_replays_on_host),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
