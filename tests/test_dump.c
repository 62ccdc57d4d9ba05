/* Dumps (runtime/dump.h, docs/dump.md): launches of a DeepSeek-V3 variant and of a paged fp8_tile (DeepSeek-V3.2)
 * variant dumped on the host backend and replayed with `ropekv-gen replay` bit for bit; the policy (first, fail,
 * every:N) and the byte bound; the options and variables refused; and hostile files (truncated at every field,
 * lengths past the end or over their limits, wrong magic or version, huge counts, a flipped byte) refused with
 * ROPEKV_ERR_DUMP or ROPEKV_ERR_VERSION naming the field, by the reader and by `ropekv-gen replay`; a dump of another
 * target (a CUDA context's on sm_90) replayed on the host backend.
 *   test_dump [--seeds DIR]   (--seeds: writes the fuzz target's seed dumps to DIR and exits) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    int needed = 0;                /* the harness passes no optional tensor (write mask, out_rope) */
    for (int i = 0; i < ropekv_kernel_tensor_count(k); i++) {
        ropekv_tensor_info ti = {.size = sizeof ti};
        assert_int_equal(ropekv_kernel_tensor(k, i, &ti), ROPEKV_OK);
        needed += ti.need != ROPEKV_NEED_OPTIONAL;
    }
    assert_int_equal(dm->n_tensors, needed);
    /* the cache as it was before the launch: the harness fills it with its sentinel, which the launch overwrites
     * in the rows it writes */
    const rk_dump_tensor *cache = NULL;
    for (int i = 0; i < dm->n_tensors; i++)
        if (!strcmp(dm->t[i].name, "kv_cache")) cache = &dm->t[i];
    assert_non_null(cache);
    assert_true(cache->bytes > 0);
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
        uint64_t b = 0;
        for (int j = 7; j >= 0; j--) b = b << 8 | p[o + j];
        o += 8 + b;
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
    MUTATE(at[F_VERSION], 2);
    refused(b, n, ROPEKV_ERR_VERSION, "format version: 2");
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
        b[bytes_at + 8] ^= 1; /* a flipped byte of the first tensor */
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

/* --seeds DIR: the fuzz target's seeds (tests/fuzz/corpus/dump): small valid dumps of two variants and a refused
 * launch. */
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
        rk_shape sh = {.tokens = 1, .heads = 1, .max_pos = 2, .k_scale = 1.0f};
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
    for (int i = 0; i < n; i++) {
        rk_codeobj f = {0};
        char out[1100];
        const char *base = strrchr(files[i], '/') + 1;
        snprintf(out, sizeof out, "%s/%.*s.rkdump", dir, (int)strcspn(base, "-"), base);
        if (strstr(base, "-fail-"))
            snprintf(out, sizeof out, "%s/refused_%.*s.rkdump", dir, (int)strcspn(base, "-"), base);
        if (rk_read_file(files[i], &f) != ROPEKV_OK || rk_write_file(out, f.data, f.len) != ROPEKV_OK) return 1;
        printf("%s (%zu bytes)\n", out, f.len);
        rk_code_free(&f);
    }
    rk_test_remove_tree(scratch);
    return n == 4 ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--seeds")) return write_seeds(argv[2]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_policy_parse),
        cmocka_unit_test(test_round_trip_deepseek_v3),
        cmocka_unit_test(test_round_trip_fp8_tile_paged),
        cmocka_unit_test(test_round_trip_loaded_spec),
        cmocka_unit_test(test_policy),
        cmocka_unit_test(test_options_refused),
        cmocka_unit_test(test_hostile_files),
        cmocka_unit_test(test_other_target_replays_on_host),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
