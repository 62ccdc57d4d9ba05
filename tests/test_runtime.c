/* Runtime: the public API end to end on the host backend (get -> compile -> cache -> launch ->
 * compare with the reference), the disk cache across contexts, argument checks, run-time specs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "args_check.h"
#include "rk.h"
#include "check.h"
#include "ropekv.h"
#include "testutil.h"

static char cache[] = "/tmp/ropekv-test-runtime-XXXXXX";
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

/* A host context with its disk cache in dir (NULL: none). */
static ropekv_ctx *open_ctx(const char *dir) {
    ropekv_ctx *c = rk_test_host_ctx(dir);
    assert_non_null(c);
    assert_string_equal(ropekv_backend_name(c), "host");
    assert_string_equal(ropekv_target(c), "host");
    return c;
}

/* Checks kernel k against the reference over a few shapes. */
static void check_kernel(ropekv_kernel *k, const rk_desc *rv) {
    char why[4096] = "";
    assert_non_null(rv);
    if (rk_test_check_kernel(k, rv, why, sizeof why)) fail_msg("%s: %s", rv->key, why);
}

static const ropekv_variant DS_FP8 = {.spec = "deepseek_v3", .kv = ROPEKV_KV_FP8_E4M3, .q = ROPEKV_Q_ABSORBED};

static void test_status_names(void **state) {
    (void)state;
    static const ropekv_status all[] = {
#define ALL_(name, value, msg) name,
        ROPEKV_STATUS_LIST(ALL_)
#undef ALL_
    };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        assert_true(strncmp(ropekv_status_name(all[i]), "ROPEKV_", 7) == 0);
        assert_true(strlen(ropekv_status_message(all[i])) > 5);
        for (size_t j = 0; j < i; j++) assert_string_not_equal(ropekv_status_name(all[i]), ropekv_status_name(all[j]));
    }
    assert_string_equal(ropekv_status_name((ropekv_status)12345), "ROPEKV_UNKNOWN");
    assert_string_equal(ropekv_status_name(ROPEKV_ERR_ALIGN), "ROPEKV_ERR_ALIGN");
    assert_int_equal(ropekv_version_number(), ROPEKV_VERSION_NUMBER);
    assert_string_equal(ropekv_version_string(), ROPEKV_VERSION_STRING);
    ropekv_destroy(NULL);
    ropekv_kernel_release(NULL);
    assert_int_equal(ropekv_create(NULL, NULL), ROPEKV_ERR_NULL);
}

/* Cold cache -> compile; same context -> memory; new context -> disk (with no compiler at all). */
static void test_jit_cold_warm_disk(void **state) {
    (void)state;
    const rk_desc *rv = rk_test_ref_variant(&cat, "deepseek_v3", &DS_FP8);
    ropekv_ctx *c = open_ctx(cache);
    ropekv_kernel *k = NULL, *k2 = NULL;
    assert_int_equal(ropekv_kernel_get(c, &DS_FP8, &k), ROPEKV_OK);
    assert_string_equal(ropekv_kernel_name(k), rv->name);
    check_kernel(k, rv);
    assert_int_equal(rk_test_count_files(cache).entries, 1);
    assert_int_equal(ropekv_kernel_get(c, &DS_FP8, &k2), ROPEKV_OK);
    assert_ptr_equal(k, k2); /* memory hit */
    ropekv_kernel_release(k2);
    ropekv_kernel_release(k);

    ropekv_stats st;
    assert_int_equal(ropekv_get_stats(c, &st), ROPEKV_OK);
    assert_true(st.compiles == 1 && st.memory_hits == 1 && st.disk_hits == 0);
    ropekv_destroy(c);

    /* A second context finds the code object on disk and compiles nothing. */
    c = open_ctx(cache);
    assert_int_equal(ropekv_kernel_get(c, &DS_FP8, &k), ROPEKV_OK);
    check_kernel(k, rv);
    assert_int_equal(ropekv_get_stats(c, &st), ROPEKV_OK);
    assert_true(st.compiles == 0 && st.disk_hits == 1);
    ropekv_kernel_release(k);
    ropekv_destroy(c);

    /* A different compiler identity is a different key: its failure is reported with the log. */
    setenv("CXX", "/nonexistent/c++", 1);
    c = open_ctx(cache);
    assert_int_equal(ropekv_kernel_get(c, &DS_FP8, &k), ROPEKV_ERR_COMPILE);
    assert_non_null(strstr(ropekv_last_error(c), "/nonexistent/c++"));
    ropekv_destroy(c);
    unsetenv("CXX");
}

/* A corrupt entry is detected, removed and rebuilt once. */
static void test_corrupt_entry_rebuilt(void **state) {
    (void)state;
    const rk_desc *rv = rk_test_ref_variant(&cat, "deepseek_v3", &DS_FP8);
    ropekv_ctx *c = open_ctx(cache);
    ropekv_kernel *k = NULL;
    assert_int_equal(ropekv_kernel_get(c, &DS_FP8, &k), ROPEKV_OK);
    ropekv_kernel_release(k);
    ropekv_destroy(c);
    DIR *d = opendir(cache);
    struct dirent *e;
    char path[4400] = "";
    while ((e = readdir(d)))
        if (strstr(e->d_name, ".rkco")) snprintf(path, sizeof path, "%s/%s", cache, e->d_name);
    closedir(d);
    assert_true(path[0]);
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, 200, SEEK_SET);
    int ch = fgetc(f);
    fseek(f, 200, SEEK_SET);
    fputc(ch ^ 0x40, f);
    fclose(f);
    c = open_ctx(cache);
    assert_int_equal(ropekv_kernel_get(c, &DS_FP8, &k), ROPEKV_OK);
    check_kernel(k, rv);
    ropekv_stats st;
    assert_int_equal(ropekv_get_stats(c, &st), ROPEKV_OK);
    assert_true(st.cache_rejects == 1 && st.compiles == 1 && st.disk_hits == 0);
    ropekv_kernel_release(k);
    ropekv_destroy(c);
    assert_int_equal(rk_test_count_files(cache).entries, 1);
}

/* An unsafe cache directory: one warning, memory-only caching, everything still works. */
static void test_unsafe_cache_dir(void **state) {
    (void)state;
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/open", cache);
    mkdir(dir, 0777);
    chmod(dir, 0777);
    ropekv_ctx *c = open_ctx(dir);
    ropekv_kernel *k;
    assert_int_equal(ropekv_kernel_get(c, &DS_FP8, &k), ROPEKV_OK);
    ropekv_kernel_release(k);
    ropekv_destroy(c);
    assert_int_equal(rk_test_count_files(dir).entries, 0);
    rmdir(dir);
}

/* ropekv_cache_dir: a context's directory as opened ("" without a disk cache or where the directory was refused);
 * with no context the default options' choice from the environment in its order ("" with $ROPEKV_DISABLE_CACHE=1
 * or no variable); a NULL out or a buffer too small refused by name. */
static void test_cache_dir_query(void **state) {
    (void)state;
    char out[4200], open_dir[4200];
    ropekv_ctx *c = open_ctx(cache);
    assert_int_equal(ropekv_cache_dir(c, out, sizeof out), ROPEKV_OK);
    assert_string_equal(out, cache);
    assert_int_equal(ropekv_cache_dir(c, NULL, 10), ROPEKV_ERR_NULL);
    assert_int_equal(ropekv_cache_dir(c, out, strlen(cache)), ROPEKV_ERR_ARG);
    assert_string_equal(out, "");
    assert_int_equal(ropekv_cache_dir(c, out, strlen(cache) + 1), ROPEKV_OK);
    assert_string_equal(out, cache);
    ropekv_destroy(c);
    c = open_ctx(NULL);
    assert_int_equal(ropekv_cache_dir(c, out, sizeof out), ROPEKV_OK);
    assert_string_equal(out, "");
    ropekv_destroy(c);
    snprintf(open_dir, sizeof open_dir, "%s/open-query", cache); /* refused (writable by others): none */
    mkdir(open_dir, 0777);
    chmod(open_dir, 0777);
    c = open_ctx(open_dir);
    assert_int_equal(ropekv_cache_dir(c, out, sizeof out), ROPEKV_OK);
    assert_string_equal(out, "");
    ropekv_destroy(c);
    rmdir(open_dir);

    /* each variable set in turn on top of the ones before, from none: the directory it gives */
    static const struct {
        const char *name, *value, *want;
    } steps[] = {{NULL, NULL, ""},
                 {"HOME", "/home/h", "/home/h/.cache/ropekv"},
                 {"XDG_CACHE_HOME", "/x", "/x/ropekv"},
                 {"ROPEKV_CACHE_DIR", "/r/c", "/r/c"},
                 {"ROPEKV_DISABLE_CACHE", "1", ""}};
    enum { NSTEPS = sizeof steps / sizeof steps[0] };
    char *saved[NSTEPS];
    for (int i = 1; i < NSTEPS; i++) {
        const char *v = getenv(steps[i].name);
        saved[i] = v ? strdup(v) : NULL;
        unsetenv(steps[i].name);
    }
    for (int i = 0; i < NSTEPS; i++) {
        if (steps[i].name) setenv(steps[i].name, steps[i].value, 1);
        assert_int_equal(ropekv_cache_dir(NULL, out, sizeof out), ROPEKV_OK);
        assert_string_equal(out, steps[i].want);
    }
    for (int i = 1; i < NSTEPS; i++) {
        if (saved[i]) setenv(steps[i].name, saved[i], 1);
        else unsetenv(steps[i].name);
        free(saved[i]);
    }
}

/* Read-only layers ($ROPEKV_CACHE_RO or opts.cache_ro, ':'-separated) are searched in order before the
 * writable directory, with the disk cache off too; a corrupt entry there is skipped and counted, never
 * removed; a system directory is refused as the writable cache. */
static void test_read_only_layers(void **state) {
    (void)state;
    char a[256], b[256], list[600];
    snprintf(a, sizeof a, "%s/layer-a", cache);
    snprintf(b, sizeof b, "%s/layer-b", cache);
    ropekv_ctx *c = open_ctx(a); /* fills layer a */
    ropekv_kernel *k;
    ropekv_stats st;
    assert_int_equal(ropekv_kernel_get(c, &DS_FP8, &k), ROPEKV_OK);
    ropekv_kernel_release(k);
    ropekv_destroy(c);

    snprintf(list, sizeof list, "%s/none::%s", cache, a); /* a missing layer is warned about and skipped */
    setenv("ROPEKV_CACHE_RO", list, 1); /* keyed with this compiler's identity (a bundle carries its own) */
    c = open_ctx(NULL);
    assert_int_equal(ropekv_kernel_get(c, &DS_FP8, &k), ROPEKV_OK);
    assert_int_equal(ropekv_get_stats(c, &st), ROPEKV_OK);
    assert_true(st.disk_hits == 1 && st.compiles == 0);
    ropekv_kernel_release(k);
    ropekv_destroy(c);
    unsetenv("ROPEKV_CACHE_RO");

    /* corrupt in the layer: skipped (one reject), compiled into the writable b, the layer untouched */
    DIR *dir = opendir(a);
    struct dirent *e;
    char path[600] = "";
    while ((e = readdir(dir)))
        if (strstr(e->d_name, ".rkco")) snprintf(path, sizeof path, "%s/%s", a, e->d_name);
    closedir(dir);
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, 200, SEEK_SET);
    fputc(0x5a ^ fgetc(f), f);
    fclose(f);
    ropekv_options o = {.backend = ROPEKV_BACKEND_HOST, .cache_dir = b, .disk_cache = 1, .cache_ro = a};
    assert_int_equal(ropekv_create(&c, &o), ROPEKV_OK);
    assert_int_equal(ropekv_kernel_get(c, &DS_FP8, &k), ROPEKV_OK);
    assert_int_equal(ropekv_get_stats(c, &st), ROPEKV_OK);
    assert_true(st.cache_rejects == 1 && st.compiles == 1 && st.disk_hits == 0);
    ropekv_kernel_release(k);
    ropekv_destroy(c);
    assert_int_equal(rk_test_count_files(a).entries, 1);
    assert_int_equal(rk_test_count_files(b).entries, 1);

    /* the root as the writable cache: refused (one warning), memory-only, nothing written there */
    const int before = rk_test_count_files("/").entries;
    ropekv_options root = {.backend = ROPEKV_BACKEND_HOST, .cache_dir = "/", .disk_cache = 1};
    assert_int_equal(ropekv_create(&c, &root), ROPEKV_OK);
    assert_int_equal(ropekv_kernel_get(c, &DS_FP8, &k), ROPEKV_OK);
    ropekv_kernel_release(k);
    ropekv_destroy(c);
    assert_int_equal(rk_test_count_files("/").entries, before);
}

/* How many times needle occurs in text. */
static int occurrences(const char *text, const char *needle) {
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle)) n++;
    return n;
}

/* Sets the mode (and, uid >= 0, the owner) of every entry file in dir. */
static void set_entries(const char *dir, mode_t mode, int uid) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d));) {
        if (!strstr(e->d_name, ".rkco")) continue;
        char path[600];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (uid >= 0) assert_int_equal(chown(path, (uid_t)uid, (gid_t)uid), 0);
        assert_int_equal(chmod(path, mode), 0);
    }
    closedir(d);
}

/* Both entries of DS_FP8 from the read-only layer dir, with no disk cache: compiled when the layer's entries
 * are refused. The counters afterwards; what was written on stderr in *err. */
static ropekv_stats from_layer(const char *dir, const char **err) {
    char log[600];
    snprintf(log, sizeof log, "%s/stderr.txt", cache);
    ropekv_options o = {.backend = ROPEKV_BACKEND_HOST, .disk_cache = -1, .cache_ro = dir};
    ropekv_ctx *c;
    ropekv_kernel *k;
    ropekv_stats st;
    assert_int_equal(ropekv_create(&c, &o), ROPEKV_OK);
    assert_int_equal(rk_test_capture_begin(log), 0);
    assert_int_equal(ropekv_kernel_get(c, &DS_FP8, &k), ROPEKV_OK);
    assert_int_equal(ropekv_kernel_prepare(k, ROPEKV_ENTRY_64), ROPEKV_OK);
    *err = rk_test_capture_end();
    assert_int_equal(ropekv_get_stats(c, &st), ROPEKV_OK);
    ropekv_kernel_release(k);
    ropekv_destroy(c);
    return st;
}

/* A read-only layer's entries that another user could write (writable by group or others, or owned by neither
 * this user nor root, as a bundle unpacked by root with the archive's owners is) are refused: each is counted
 * as a reject and built anew, with one warning for the layer however many there are, and left in place. */
static void test_read_only_entry_trust(void **state) {
    (void)state;
    char dir[256];
    snprintf(dir, sizeof dir, "%s/layer-trust", cache);
    ropekv_ctx *c = open_ctx(dir); /* fills the layer: both entries */
    ropekv_kernel *k;
    assert_int_equal(ropekv_kernel_get(c, &DS_FP8, &k), ROPEKV_OK);
    assert_int_equal(ropekv_kernel_prepare(k, ROPEKV_ENTRY_64), ROPEKV_OK);
    ropekv_kernel_release(k);
    ropekv_destroy(c);
    assert_int_equal(rk_test_count_files(dir).entries, 2);

    const char *err;
    set_entries(dir, 0646, -1);
    ropekv_stats st = from_layer(dir, &err);
    assert_true(st.cache_rejects == 2 && st.compiles == 2 && st.disk_hits == 0);
    assert_int_equal(occurrences(err, "is writable by others (mode 0646)"), 1);
    assert_int_equal(occurrences(err, "ropekv: warning:"), 1);
    assert_int_equal(occurrences(err, "further such entries of"), 1);
    assert_int_equal(rk_test_count_files(dir).entries, 2);

    set_entries(dir, 0644, -1);
    st = from_layer(dir, &err);
    assert_true(st.cache_rejects == 0 && st.compiles == 0 && st.disk_hits == 2);
    assert_null(strstr(err, "ropekv: warning:"));

    if (geteuid() != 0) {
        print_message("not root: entries owned by another user not tried\n");
        return;
    }
    set_entries(dir, 0644, 65534);
    st = from_layer(dir, &err);
    assert_true(st.cache_rejects == 2 && st.compiles == 2 && st.disk_hits == 0);
    assert_int_equal(occurrences(err, "is owned by uid 65534, neither this user (uid 0) nor root"), 1);
    assert_int_equal(occurrences(err, "ropekv: warning:"), 1);
    set_entries(dir, 0644, 0);
    st = from_layer(dir, &err);
    assert_true(st.cache_rejects == 0 && st.compiles == 0 && st.disk_hits == 2);
}

/* A compile-only context (ropekv_options.compile_only) compiles and caches under a device context's keys without
 * loading: a device context given its directory finds the kernel (a disk hit, no compile) and launches it; the
 * compile-only one refuses launches by name, and needs its backend and target chosen. */
static void test_compile_only(void **state) {
    (void)state;
    char dir[256];
    snprintf(dir, sizeof dir, "%s/compile-only", cache);
    ropekv_ctx *c;
    ropekv_options no_target = {.compile_only = 1, .backend = ROPEKV_BACKEND_HOST}; /* and no $ROPEKV_TARGET */
    assert_int_equal(ropekv_create(&c, &no_target), ROPEKV_ERR_ARG);
    no_target.compile_only = -1; /* off, as -1 is for every tri-state option: a device context, no target needed */
    assert_int_equal(ropekv_create(&c, &no_target), ROPEKV_OK);
    ropekv_destroy(c);
    ropekv_options o = {
        .backend = ROPEKV_BACKEND_HOST, .target = "host", .cache_dir = dir, .disk_cache = 1, .compile_only = 1};
    assert_int_equal(ropekv_create(&c, &o), ROPEKV_OK);
    ropekv_kernel *k;
    assert_int_equal(ropekv_kernel_get(c, &DS_FP8, &k), ROPEKV_OK);
    assert_int_equal(ropekv_kernel_prepare(k, ROPEKV_ENTRY_32 | ROPEKV_ENTRY_64), ROPEKV_OK);
    const rk_desc *rv = rk_test_ref_variant(&cat, "deepseek_v3", &DS_FP8);
    char why[4096] = "";
    assert_int_not_equal(rk_test_check_kernel(k, rv, why, sizeof why), 0); /* its launches are refused */
    assert_non_null(strstr(ropekv_last_error(c), "a compile-only context builds and caches kernels, never launches"));
    ropekv_kernel_release(k);
    ropekv_destroy(c);
    assert_int_equal(rk_test_count_files(dir).entries, 2); /* both entries */

    ropekv_options dev = {.backend = ROPEKV_BACKEND_HOST, .cache_dir = dir, .disk_cache = 1};
    assert_int_equal(ropekv_create(&c, &dev), ROPEKV_OK);
    assert_int_equal(ropekv_kernel_get(c, &DS_FP8, &k), ROPEKV_OK);
    ropekv_stats st;
    assert_int_equal(ropekv_get_stats(c, &st), ROPEKV_OK);
    assert_true(st.disk_hits == 1 && st.compiles == 0);
    check_kernel(k, rv);
    ropekv_kernel_release(k);
    ropekv_destroy(c);
}

typedef struct thread_arg {
    ropekv_ctx *c;
    ropekv_kernel *k;
    int rc;
} thread_arg;

static void *get_in_thread(void *p) {
    thread_arg *t = p;
    t->rc = ropekv_kernel_get(t->c, &DS_FP8, &t->k);
    return NULL;
}

/* Many threads asking at once get one kernel. */
static void test_threads_share_one_compile(void **state) {
    (void)state;
    ropekv_ctx *c = open_ctx(NULL);
    pthread_t th[8];
    thread_arg a[8];
    for (int i = 0; i < 8; i++) {
        a[i] = (thread_arg){.c = c};
        assert_int_equal(pthread_create(&th[i], NULL, get_in_thread, &a[i]), 0);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(a[i].rc, ROPEKV_OK);
        assert_ptr_equal(a[i].k, a[0].k);
    }
    for (int i = 0; i < 8; i++) ropekv_kernel_release(a[i].k);
    ropekv_destroy(c);
}

/* Threads getting a kernel while another thread loads its spec again and again (the same text: each load is a new
 * generation): every get and load succeeds, and a lookup never reads a kernel's generation while the thread building
 * it marks it stale (one described after a load that came between its lookup and its description). A compile-only
 * context keeps each get cheap (a disk hit, nothing loaded), so that the narrow window between a lookup and its
 * description is met often: under ThreadSanitizer (the tsan preset) a race there shows within seconds. */
static const char SMALL_SPEC[] =
    "return { name = 'small', kv_lora_rank = 256, qk_rope_head_dim = 32, targets = {'host'} }";

static int reloads_done; /* atomic */

static void *reload_in_thread(void *p) {
    thread_arg *t = p;
    for (int i = 0; i < 3000 && t->rc == ROPEKV_OK; i++)
        t->rc = ropekv_load_spec_text(t->c, "small.lua", SMALL_SPEC, sizeof SMALL_SPEC - 1);
    __atomic_store_n(&reloads_done, 1, __ATOMIC_RELEASE);
    return NULL;
}

static void *get_many_in_thread(void *p) {
    thread_arg *t = p;
    const ropekv_variant v = {.spec = "small"};
    while (t->rc == ROPEKV_OK && !__atomic_load_n(&reloads_done, __ATOMIC_ACQUIRE)) {
        ropekv_kernel *k = NULL;
        t->rc = ropekv_kernel_get(t->c, &v, &k);
        ropekv_kernel_release(k);
    }
    return NULL;
}

static void test_threads_reload_spec(void **state) {
    (void)state;
    char dir[256];
    snprintf(dir, sizeof dir, "%s/reload", cache);
    ropekv_options o = {
        .backend = ROPEKV_BACKEND_HOST, .target = "host", .cache_dir = dir, .disk_cache = 1, .compile_only = 1};
    ropekv_ctx *c = NULL;
    assert_int_equal(ropekv_create(&c, &o), ROPEKV_OK);
    assert_int_equal(ropekv_load_spec_text(c, "small.lua", SMALL_SPEC, sizeof SMALL_SPEC - 1), ROPEKV_OK);
    pthread_t th[8];
    thread_arg a[8];
    for (int i = 0; i < 8; i++) {
        a[i] = (thread_arg){.c = c};
        assert_int_equal(pthread_create(&th[i], NULL, i ? get_many_in_thread : reload_in_thread, &a[i]), 0);
    }
    for (int i = 0; i < 8; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 8; i++)
        if (a[i].rc != ROPEKV_OK) fail_msg("thread %d: %s", i, ropekv_status_name((ropekv_status)a[i].rc));
    ropekv_destroy(c);
}

/* Query: supported, unknown spec, missing configuration, bad arguments. */
static void test_query(void **state) {
    (void)state;
    ropekv_ctx *c = open_ctx(NULL);
    char why[1024];
    assert_int_equal(ropekv_query(c, &DS_FP8, NULL, why, sizeof why), ROPEKV_OK);
    ropekv_variant v = DS_FP8;
    v.spec = "no_such_model";
    assert_int_equal(ropekv_query(c, &v, NULL, why, sizeof why), ROPEKV_ERR_NO_SPEC);
    assert_non_null(strstr(why, "no_such_model"));
    v = DS_FP8;
    v.spec = "deepseek_v32"; /* the model binds its row formats: the tile row and bf16 */
    assert_int_equal(ropekv_query(c, &v, NULL, why, sizeof why), ROPEKV_ERR_UNSUPPORTED);
    assert_non_null(strstr(why, "lists kv_dtypes {fp8_tile, bf16}, not fp8_e4m3"));
    v.kv = ROPEKV_KV_FP8_TILE; /* a rule of the description: a tile row is never split */
    v.layout = ROPEKV_KV_SPLIT;
    assert_int_equal(ropekv_query(c, &v, NULL, why, sizeof why), ROPEKV_ERR_UNSUPPORTED);
    assert_non_null(strstr(why, "fp8_tile is one row"));
    v = DS_FP8;
    v.q = ROPEKV_Q_INPLACE; /* open: deepseek_v3.lua leaves the q form to the caller */
    assert_int_equal(ropekv_query(c, &v, NULL, why, sizeof why), ROPEKV_OK);
    v = DS_FP8;
    v.kv = (ropekv_kv_dtype)7;
    assert_int_equal(ropekv_query(c, &v, NULL, why, sizeof why), ROPEKV_ERR_ARG);
    assert_int_equal(ropekv_query(c, NULL, NULL, why, sizeof why), ROPEKV_ERR_NULL);
    static const char narrow[] = "return { name = 'narrow64', kv_lora_rank = 128, qk_rope_head_dim = 16,"
                                 " positions = { 'int64' } }";
    assert_int_equal(ropekv_load_spec_text(c, "narrow64.lua", narrow, sizeof narrow - 1), ROPEKV_OK);
    v = DS_FP8;
    v.spec = "narrow64";
    v.positions = ROPEKV_INDEX_INT32; /* the spec lists int64 positions only: the reason says so */
    assert_int_equal(ropekv_query(c, &v, NULL, why, sizeof why), ROPEKV_ERR_UNSUPPORTED);
    assert_non_null(strstr(why, "lists positions {int64}, not int32"));
    /* no other spec has its L = 128, R = 16: the reason says a spec file is the fix */
    assert_non_null(strstr(why, "no loaded or built-in spec with L=128, R=16 lists it on host"));
    ropekv_destroy(c);
}

/* What a kernel is, from the library: every field of ropekv_kernel_info is its description's. */
static void test_kernel_info(void **state) {
    (void)state;
    ropekv_ctx *c = open_ctx(NULL);
    ropekv_kernel *k;
    ropekv_kernel_params p;
    assert_int_equal(ropekv_kernel_get(c, &DS_FP8, &k), ROPEKV_OK);
    assert_int_equal(ropekv_kernel_info(k, &p), ROPEKV_OK);
    assert_string_equal(p.name, ropekv_kernel_name(k));
    assert_string_equal(p.key, "deepseek_v3/host/fp8_e4m3/absorbed/pos=int64/slot=int64");
    assert_string_equal(p.spec, "deepseek_v3");
    assert_string_equal(p.target, "host");
    assert_int_equal(p.kv_lora_rank, 512);
    assert_int_equal(p.rope_dim, 64);
    assert_int_equal(p.kv, ROPEKV_KV_FP8_E4M3);
    assert_int_equal(p.q, ROPEKV_Q_ABSORBED);
    assert_int_equal(p.positions, ROPEKV_INDEX_INT64);
    assert_int_equal(p.slots, ROPEKV_INDEX_INT64);
    assert_string_equal(p.rope, "gptj");
    assert_string_equal(p.cos_sin, "f32_cat");
    assert_string_equal(p.fp8_format, "ocp");
    assert_string_equal(p.fp8_scale, "mul_recip");
    assert_true(p.fp8_saturate == 448.0f);
    assert_int_equal(p.fp8_rope_bf16_round, 0);
    assert_string_equal(p.negative_slot, "skip_kv");
    assert_int_equal(p.sanitize, 0);
    assert_true(p.block > 0);
    assert_int_equal(p.pdl, 0);
    assert_int_equal(ropekv_kernel_info(NULL, &p), ROPEKV_ERR_NULL);
    assert_int_equal(ropekv_kernel_info(k, NULL), ROPEKV_ERR_NULL);
    ropekv_kernel_release(k);
    ropekv_variant b = DS_FP8;
    b.kv = ROPEKV_KV_BF16;
    assert_int_equal(ropekv_kernel_get(c, &b, &k), ROPEKV_OK);
    assert_int_equal(ropekv_kernel_info(k, &p), ROPEKV_OK);
    assert_string_equal(p.fp8_format, "");
    assert_string_equal(p.fp8_scale, "none");
    assert_true(p.fp8_saturate == 0.0f);
    ropekv_kernel_release(k);
    /* a spec loaded at run time under a built-in's name replaces it: its kernels are described anew */
    const char mine[] = "return { name = 'deepseek_v3', kv_lora_rank = 256, qk_rope_head_dim = 32, targets = {'host'} }";
    assert_int_equal(ropekv_load_spec_text(c, "mine.lua", mine, sizeof mine - 1), ROPEKV_OK);
    assert_int_equal(ropekv_kernel_get(c, &b, &k), ROPEKV_OK);
    assert_int_equal(ropekv_kernel_info(k, &p), ROPEKV_OK);
    assert_int_equal(p.kv_lora_rank, 256);
    assert_int_equal(p.rope_dim, 32);
    ropekv_kernel_release(k);
    ropekv_destroy(c);
}

/* Parameter `name` of k is `want` of kind `kind`. */
static void expect_param(const ropekv_kernel *k, const char *name, ropekv_param_kind kind, const char *want) {
    const char *got = NULL;
    ropekv_param_kind got_kind = (ropekv_param_kind)-1;
    if (ropekv_kernel_param_find(k, name, &got, &got_kind) != ROPEKV_OK) fail_msg("no parameter '%s'", name);
    if (got_kind != kind || strcmp(got, want) != 0)
        fail_msg("%s: parameter %s is '%s' (kind %d), ropekv_kernel_info's '%s' (kind %d)", ropekv_kernel_name(k), name,
                 got, (int)got_kind, want, (int)kind);
}

static void expect_int(const ropekv_kernel *k, const char *name, long long want) {
    char text[32];
    snprintf(text, sizeof text, "%lld", want);
    expect_param(k, name, ROPEKV_PARAM_INT, text);
}

/* A float parameter: its text reads back as want. */
static void expect_float(const ropekv_kernel *k, const char *name, float want) {
    const char *got = NULL;
    ropekv_param_kind kind = (ropekv_param_kind)-1;
    assert_int_equal(ropekv_kernel_param_find(k, name, &got, &kind), ROPEKV_OK);
    if (kind != ROPEKV_PARAM_FLOAT || strtof(got, NULL) != want)
        fail_msg("%s: parameter %s is '%s' (kind %d), not the float %.9g", ropekv_kernel_name(k), name, got, (int)kind,
                 (double)want);
}

/* Every field of the deprecated ropekv_kernel_params has its parameter, of the same value. */
static void expect_params_as_info(const ropekv_kernel *k) {
    ropekv_kernel_params p;
    assert_int_equal(ropekv_kernel_info(k, &p), ROPEKV_OK);
#define TEXT_(f) expect_param(k, #f, ROPEKV_PARAM_TEXT, p.f)
#define BOOL_(f) expect_param(k, #f, ROPEKV_PARAM_BOOL, p.f ? "true" : "false")
    TEXT_(name), TEXT_(key), TEXT_(spec), TEXT_(target);
    expect_int(k, "kv_lora_rank", p.kv_lora_rank), expect_int(k, "rope_dim", p.rope_dim);
    expect_param(k, "kv", ROPEKV_PARAM_TEXT, rk_kv_name(p.kv));
    expect_param(k, "q", ROPEKV_PARAM_TEXT, rk_qform_name(p.q));
    expect_param(k, "positions", ROPEKV_PARAM_TEXT, rk_idx_name(p.positions));
    expect_param(k, "slots", ROPEKV_PARAM_TEXT, rk_idx_name(p.slots));
    TEXT_(rope), TEXT_(cos_sin), TEXT_(fp8_format), TEXT_(fp8_scale), TEXT_(fp8_matches);
    expect_float(k, "fp8_saturate", p.fp8_saturate);
    BOOL_(fp8_rope_bf16_round);
    expect_param(k, "q_dtype", ROPEKV_PARAM_TEXT, rk_qdtype_name(p.q_dtype));
    TEXT_(q_fp8_format), TEXT_(q_fp8_scale), TEXT_(q_fp8_matches);
    expect_float(k, "q_fp8_saturate", p.q_fp8_saturate);
    BOOL_(q_fp8_rope_bf16_round);
    expect_param(k, "layout", ROPEKV_PARAM_TEXT, rk_layout_name(p.layout));
    TEXT_(negative_slot);
    BOOL_(sanitize);
    expect_int(k, "block", p.block), expect_int(k, "wide_block", p.wide_block), expect_int(k, "wide_from", p.wide_from);
    BOOL_(pdl);
    expect_param(k, "op", ROPEKV_PARAM_TEXT, rk_op_name(p.op));
    TEXT_(read_negative_slot);
    expect_int(k, "fp8_tile", p.fp8_tile), expect_int(k, "fp8_tile_scales_at", p.fp8_tile_scales_at);
    expect_int(k, "fp8_tile_rope_at", p.fp8_tile_rope_at), expect_int(k, "row_bytes", p.row_bytes);
    TEXT_(fp8_tile_scale);
    expect_param(k, "norm", ROPEKV_PARAM_TEXT, rk_norm_name(p.norm));
    TEXT_(norm_weight), TEXT_(norm_rounding), TEXT_(norm_matches);
    expect_float(k, "norm_eps", p.norm_eps);
#undef TEXT_
#undef BOOL_
}

/* ropekv_kernel_param: every parameter by index, each name once, the values of ropekv_kernel_info for kernels of
 * every row format, op, query dtype and norm; by name too; an index or name out of range is ROPEKV_ERR_ARG. */
static void test_kernel_params(void **state) {
    (void)state;
    ropekv_ctx *c = open_ctx(NULL);
    const ropekv_variant vs[] = {
        DS_FP8,
        {.spec = "deepseek_v3"},
        {.spec = "deepseek_v3", .kv = ROPEKV_KV_FP8_E4M3, .q_dtype = ROPEKV_Q_FP8_E4M3, .layout = ROPEKV_KV_PAGED},
        {.spec = "deepseek_v3", .kv = ROPEKV_KV_FP8_E4M3, .op = ROPEKV_OP_READ, .slots = ROPEKV_INDEX_INT32},
        {.spec = "deepseek_v3", .q = ROPEKV_Q_INPLACE, .norm = ROPEKV_NORM_RMS_OUT},
        {.spec = "deepseek_v32", .kv = ROPEKV_KV_FP8_TILE, .q = ROPEKV_Q_NONE, .layout = ROPEKV_KV_PAGED},
        {.spec = "deepseek_v32", .kv = ROPEKV_KV_FP8_TILE, .op = ROPEKV_OP_READ},
        {.spec = "deepseek_v32_pow2", .kv = ROPEKV_KV_FP8_TILE, .q = ROPEKV_Q_NONE, .layout = ROPEKV_KV_PAGED},
        {.spec = "deepseek_v2_lite", .layout = ROPEKV_KV_SPLIT},
    };
    for (size_t v = 0; v < sizeof vs / sizeof vs[0]; v++) {
        ropekv_kernel *k;
        assert_int_equal(ropekv_kernel_get(c, &vs[v], &k), ROPEKV_OK);
        const int n = ropekv_kernel_param_count(k);
        assert_true(n >= 42);
        for (int i = 0; i < n; i++) {
            const char *name = NULL, *value = NULL;
            ropekv_param_kind kind = (ropekv_param_kind)-1;
            assert_int_equal(ropekv_kernel_param(k, i, &name, &value, &kind), ROPEKV_OK);
            assert_non_null(name);
            assert_non_null(value);
            assert_true(kind >= ROPEKV_PARAM_TEXT && kind <= ROPEKV_PARAM_BOOL);
            assert_true(kind == ROPEKV_PARAM_TEXT || value[0]); /* numbers are never empty */
            for (int j = 0; j < i; j++) {
                const char *other;
                assert_int_equal(ropekv_kernel_param(k, j, &other, NULL, NULL), ROPEKV_OK);
                assert_string_not_equal(name, other);
            }
        }
        expect_params_as_info(k);
        ropekv_kernel_release(k);
    }
    ropekv_kernel *k;
    const char *name = "unchanged", *value = "unchanged";
    ropekv_param_kind kind;
    assert_int_equal(ropekv_kernel_get(c, &DS_FP8, &k), ROPEKV_OK);
    expect_param(k, "kv", ROPEKV_PARAM_TEXT, "fp8_e4m3");
    expect_param(k, "fp8_saturate", ROPEKV_PARAM_FLOAT, "448");
    expect_param(k, "sanitize", ROPEKV_PARAM_BOOL, "false");
    expect_param(k, "kv_lora_rank", ROPEKV_PARAM_INT, "512");
    assert_int_equal(ropekv_kernel_param(k, 0, &name, NULL, &kind), ROPEKV_OK);
    assert_string_equal(name, "name");
    assert_int_equal(ropekv_kernel_param(k, -1, &name, &value, &kind), ROPEKV_ERR_ARG);
    assert_int_equal(ropekv_kernel_param(k, ropekv_kernel_param_count(k), &name, &value, NULL), ROPEKV_ERR_ARG);
    assert_int_equal(ropekv_kernel_param_find(k, "no_such_parameter", &value, &kind), ROPEKV_ERR_ARG);
    assert_string_equal(name, "name");
    assert_string_equal(value, "unchanged");
    assert_int_equal(ropekv_kernel_param(NULL, 0, &name, &value, &kind), ROPEKV_ERR_NULL);
    assert_int_equal(ropekv_kernel_param_find(NULL, "kv", &value, &kind), ROPEKV_ERR_NULL);
    assert_int_equal(ropekv_kernel_param_find(k, NULL, &value, &kind), ROPEKV_ERR_NULL);
    assert_int_equal(ropekv_kernel_param_count(NULL), 0);
    ropekv_kernel_release(k);
    /* an fp8_tile kernel names its scale form and the readers its rows are for (the spec's words): f32 scales for
     * deepseek_v32, powers of two (E8M0 readers too) for deepseek_v32_pow2; other rows have no readers */
    const char *specs[2] = {"deepseek_v32", "deepseek_v32_pow2"};
    for (int i = 0; i < 2; i++)
        for (int read = 0; read < 2; read++) {
            ropekv_variant tv = {.spec = specs[i], .kv = ROPEKV_KV_FP8_TILE, .q = ROPEKV_Q_NONE};
            if (read) tv.op = ROPEKV_OP_READ;
            assert_int_equal(ropekv_kernel_get(c, &tv, &k), ROPEKV_OK);
            expect_param(k, "fp8_tile_scale", ROPEKV_PARAM_TEXT, i ? "pow2" : "f32");
            assert_int_equal(ropekv_kernel_param_find(k, "fp8_tile_readers", &value, &kind), ROPEKV_OK);
            assert_int_equal(kind, ROPEKV_PARAM_TEXT);
            assert_non_null(strstr(value, i ? "E8M0 (FlashMLA sm_100" : "FlashMLA sm_90"));
            ropekv_kernel_release(k);
        }
    assert_int_equal(ropekv_kernel_get(c, &DS_FP8, &k), ROPEKV_OK);
    expect_param(k, "fp8_tile_readers", ROPEKV_PARAM_TEXT, "");
    ropekv_kernel_release(k);
    ropekv_destroy(c);
}

/* ---- argument checks: one failing case per rule ------------------------------------------------- */
enum { L = 512, R = 64, W = 576, T = 4, H = 2 };
static uint16_t q[T * H * W + 8], qo[T * H * W + 8], kbuf[T * W + 8];
static uint8_t kv[2 * (T + 2) * W + 16]; /* T + 2 rows of bf16 */
static int64_t pos[T + 1], slots[T + 1];
static float cs[8 * R + 4], kscale[2] = {1.0f, 1.0f};

static void *sparse(size_t bytes) {
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* The bytes of an fp8 cache of WIDE_ROWS rows (2^31 bytes), a sparse mapping of its own: a claim that large over the
 * static buffers would overlap the other tensors (ROPEKV_ERR_ALIAS). Its rows are addressed in 64 bits by both
 * entries: it runs the 32-bit one. */
enum { WIDE_ROWS = INT32_MAX / W + 1 };
/* An address far from every buffer, for a tensor whose claims are checked but never launched on (larger than the
 * buffers here, they would overlap the others: ROPEKV_ERR_ALIAS). */
#define FAR ((void *)((uintptr_t)1 << 60))
static uint8_t *wide_cache(void) {
    static uint8_t *p;
    if (!p) p = sparse((size_t)WIDE_ROWS * W);
    assert_non_null(p);
    return p;
}
/* A bf16 q_out of T rows WIDE_ST elements apart (past 2^31 bytes: its offsets need the 64-bit entry), a sparse
 * mapping of its own. */
enum { WIDE_ST = INT32_MAX / 2 / (T - 1) / 8 * 8 + 8 };
static uint16_t *wide_q_out(void) {
    static uint16_t *p;
    if (!p) p = sparse((size_t)WIDE_ST * 2 * T);
    assert_non_null(p);
    return p;
}
/* Row t of the wide q_out is the same as row t of qo (H * W values each). */
static void assert_wide_rows_equal(const uint16_t *wide_rows, const uint16_t *rows) {
    for (int t = 0; t < T; t++)
        assert_memory_equal(wide_rows + (size_t)t * WIDE_ST, rows + (size_t)t * H * W, (size_t)H * W * 2);
}

static ropekv_args good_args(void) {
    return (ropekv_args){
        .tokens = T,
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
        .k_nope = kbuf,
        .k_nope_st = W,
        .k_pe = kbuf + L,
        .k_pe_st = W,
        .kv_cache = kv,
        .kv_st = W,
        .kv_rows = T + 2,
        .positions = pos,
        .slots = slots,
        .cos_sin = cs,
        .max_pos = 8,
        .k_scale = kscale,
    };
}

static void expect(ropekv_ctx *c, ropekv_kernel *k, ropekv_args a, ropekv_status want, const char *text) {
    ropekv_status s = ropekv_launch(k, &a, NULL);
    if (s != want)
        fail_msg("want %s, got %s (%s)", ropekv_status_name(want), ropekv_status_name(s), ropekv_last_error(c));
    if (text && !strstr(ropekv_last_error(c), text)) fail_msg("'%s' not in '%s'", text, ropekv_last_error(c));
}

/* The structs that grow (include/ropekv.h). A caller built against an older, shorter struct passes its size, and the
 * library reads no further: past it the bytes here are 0xff, which as fields would be refused or fail (cache_ro a wild
 * pointer, q_dtype 0xffffffff, a norm_weight for a kernel without the norm). A newer, longer struct is
 * accepted while the bytes past the library's are zero, else refused with ROPEKV_ERR_VERSION, as is a size smaller
 * than the size field. */
static void test_struct_sizes(void **state) {
    (void)state;
    char why[1024];
    /* options of a version without pdl, pdl_prefetch, cache_ro and compile_only */
    typedef struct {
        size_t size;
        ropekv_backend backend;
        int device;
        const char *target, *cache_dir;
        int disk_cache, log;
    } options_old;
    union {
        options_old old;
        ropekv_options now;
    } o;
    memset(&o, 0xff, sizeof o);
    o.old = (options_old){.size = sizeof o.old, .backend = ROPEKV_BACKEND_HOST, .disk_cache = -1};
    ropekv_ctx *c = NULL;
    assert_int_equal(ropekv_create(&c, &o.now), ROPEKV_OK);
    assert_string_equal(ropekv_backend_name(c), "host");
    ropekv_destroy(c);
    struct {
        ropekv_options now;
        int64_t later; /* a field of a newer version */
    } big = {.now = {.backend = ROPEKV_BACKEND_HOST, .disk_cache = -1}};
    big.now.size = sizeof big;
    assert_int_equal(ropekv_create(&c, &big.now), ROPEKV_OK);
    ropekv_destroy(c);
    big.later = 1;
    assert_int_equal(ropekv_create(&c, &big.now), ROPEKV_ERR_VERSION);
    assert_null(c);
    big.later = 0;
    big.now.size = 4;
    assert_int_equal(ropekv_create(&c, &big.now), ROPEKV_ERR_VERSION);

    /* a variant of a version without q_dtype, layout, op and norm: the same kernel as the full one's */
    c = open_ctx(NULL);
    typedef struct {
        size_t size;
        const char *spec;
        ropekv_kv_dtype kv;
        ropekv_q_form q;
        ropekv_index positions, slots;
    } variant_old;
    union {
        variant_old old;
        ropekv_variant now;
    } v;
    memset(&v, 0xff, sizeof v);
    v.old = (variant_old){.size = sizeof v.old, .spec = "deepseek_v3", .kv = ROPEKV_KV_FP8_E4M3};
    ropekv_kernel *k, *k2;
    assert_int_equal(ropekv_kernel_get(c, &v.now, &k), ROPEKV_OK);
    assert_int_equal(ropekv_kernel_get(c, &DS_FP8, &k2), ROPEKV_OK);
    assert_ptr_equal(k, k2);
    ropekv_kernel_release(k2);
    assert_int_equal(ropekv_query(c, &v.now, NULL, why, sizeof why), ROPEKV_OK);
    struct {
        ropekv_variant now;
        int later;
    } bigv;
    memset(&bigv, 0, sizeof bigv); /* the padding after `later` too: the library reads every byte of size */
    bigv.now = DS_FP8;
    bigv.later = 7;
    bigv.now.size = sizeof bigv;
    assert_int_equal(ropekv_kernel_get(c, &bigv.now, &k2), ROPEKV_ERR_VERSION);
    assert_null(k2);
    assert_non_null(strstr(ropekv_last_error(c), "ropekv_variant.size"));
    assert_int_equal(ropekv_query(c, &bigv.now, NULL, why, sizeof why), ROPEKV_ERR_VERSION);
    assert_non_null(strstr(why, "a field of a newer version"));
    bigv.later = 0;
    assert_int_equal(ropekv_kernel_get(c, &bigv.now, &k2), ROPEKV_OK);
    assert_ptr_equal(k, k2);
    ropekv_kernel_release(k2);

    /* launch arguments of a version without the norm's fields */
    for (int i = 0; i < T; i++) slots[i] = i, pos[i] = i;
    union {
        ropekv_args now;
        unsigned char bytes[sizeof(ropekv_args)];
    } a;
    const ropekv_args good = good_args();
    memset(&a, 0xff, sizeof a);
    memcpy(&a, &good, offsetof(ropekv_args, norm_weight));
    a.now.size = offsetof(ropekv_args, norm_weight);
    assert_int_equal(ropekv_launch(k, &a.now, NULL), ROPEKV_OK);
    assert_int_equal(ropekv_query(c, &DS_FP8, &a.now, why, sizeof why), ROPEKV_OK);
    a.now.size = sizeof a.now; /* the same bytes read whole: the norm_weight of 0xff bytes is refused */
    assert_int_equal(ropekv_launch(k, &a.now, NULL), ROPEKV_ERR_ARG);
    struct {
        ropekv_args now;
        void *later;
    } biga = {.now = good, .later = kv};
    biga.now.size = sizeof biga;
    assert_int_equal(ropekv_launch(k, &biga.now, NULL), ROPEKV_ERR_VERSION);
    assert_non_null(strstr(ropekv_last_error(c), "ropekv_args.size"));
    assert_int_equal(ropekv_query(c, &DS_FP8, &biga.now, why, sizeof why), ROPEKV_ERR_VERSION);
    biga.later = NULL;
    assert_int_equal(ropekv_launch(k, &biga.now, NULL), ROPEKV_OK);
    biga.now.size = 1;
    assert_int_equal(ropekv_launch(k, &biga.now, NULL), ROPEKV_ERR_VERSION);
    ropekv_kernel_release(k);
    ropekv_destroy(c);
}

/* The 64-bit entry is compiled by the first launch that needs it (a query output whose rows reach 2^31 bytes),
 * cached on disk as its own entry, and computes what the 32-bit entry does. A failure to build it is the launch's
 * error, with the compiler's message, and writes nothing. A cache past 2^31 bytes does not need it. */
static void test_wide_entry_on_first_need(void **state) {
    (void)state;
    char dir[sizeof cache + 8];
    snprintf(dir, sizeof dir, "%s/wide", cache);
    assert_int_equal(mkdir(dir, 0700), 0);
    ropekv_ctx *c = open_ctx(dir);
    ropekv_kernel *k;
    ropekv_stats st;
    assert_int_equal(ropekv_kernel_get(c, &DS_FP8, &k), ROPEKV_OK);
    for (int i = 0; i < T; i++) slots[i] = T - 1 - i, pos[i] = (3 * i) % 8;
    for (size_t i = 0; i < sizeof q / sizeof q[0]; i++) q[i] = (uint16_t)(0x3c00 + (i * 37) % 977);
    for (size_t i = 0; i < sizeof kbuf / sizeof kbuf[0]; i++) kbuf[i] = (uint16_t)(0xbc00 + (i * 53) % 811);
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) cs[i] = (float)((int)(i % 13) - 6) / 7.0f;
    ropekv_args narrow = good_args(), wide = good_args();
    uint16_t *qw = wide_q_out();
    wide.q_out = qw;
    wide.q_out_st = WIDE_ST; /* rows past 2^31 bytes: the offsets need 64 bits */

    memset(qo, 0, sizeof qo);
    memset(kv, 0, sizeof kv);
    assert_int_equal(ropekv_launch(k, &narrow, NULL), ROPEKV_OK);
    static uint16_t qo_narrow[sizeof qo / sizeof qo[0]];
    static uint8_t kv_narrow[sizeof kv];
    memcpy(qo_narrow, qo, sizeof qo);
    memcpy(kv_narrow, kv, sizeof kv);
    assert_int_equal(ropekv_get_stats(c, &st), ROPEKV_OK);
    assert_true(st.compiles == 1);
    assert_int_equal(rk_test_count_files(dir).entries, 1);

    /* an engine-sized cache (past 2^31 bytes) runs the 32-bit entry: nothing is built, and its rows are the same */
    ropekv_args big_cache = good_args();
    uint8_t *kvw = wide_cache();
    big_cache.kv_cache = kvw;
    big_cache.kv_rows = WIDE_ROWS;
    memset(kvw, 0, sizeof kv);
    setenv("CXX", "/nonexistent/c++", 1); /* a compile now would fail the launch */
    const ropekv_status big_rc = ropekv_launch(k, &big_cache, NULL);
    unsetenv("CXX");
    assert_int_equal(big_rc, ROPEKV_OK);
    assert_memory_equal(kvw, kv_narrow, sizeof kv);
    assert_int_equal(ropekv_get_stats(c, &st), ROPEKV_OK);
    assert_true(st.compiles == 1);

    /* its build fails: the launch says why and writes nothing */
    setenv("CXX", "/nonexistent/c++", 1);
    memset(kv, 0, sizeof kv);
    for (int t = 0; t < T; t++) memset(qw + (size_t)t * WIDE_ST, 0, (size_t)H * W * 2);
    const ropekv_status failed = ropekv_launch(k, &wide, NULL);
    unsetenv("CXX");
    assert_int_equal(failed, ROPEKV_ERR_COMPILE);
    assert_non_null(strstr(ropekv_last_error(c), "/nonexistent/c++"));
    assert_non_null(strstr(ropekv_last_error(c), ropekv_kernel_name(k)));
    for (int t = 0; t < T; t++)
        for (int i = 0; i < H * W; i++) assert_int_equal(qw[(size_t)t * WIDE_ST + (size_t)i], 0);
    for (size_t i = 0; i < sizeof kv; i++) assert_int_equal(kv[i], 0);
    assert_int_equal(rk_test_count_files(dir).entries, 1);

    /* the next wide launch builds it, and it agrees with the 32-bit entry */
    assert_int_equal(ropekv_launch(k, &wide, NULL), ROPEKV_OK);
    assert_wide_rows_equal(qw, qo_narrow);
    assert_memory_equal(kv, kv_narrow, sizeof kv);
    assert_int_equal(ropekv_get_stats(c, &st), ROPEKV_OK);
    assert_true(st.compiles == 3); /* the 32-bit entry, the failed build, the 64-bit entry */
    assert_int_equal(rk_test_count_files(dir).entries, 2);
    ropekv_kernel_release(k);
    ropekv_destroy(c);

    /* a new context finds both on disk */
    c = open_ctx(dir);
    assert_int_equal(ropekv_kernel_get(c, &DS_FP8, &k), ROPEKV_OK);
    for (int t = 0; t < T; t++) memset(qw + (size_t)t * WIDE_ST, 0, (size_t)H * W * 2);
    memset(kv, 0, sizeof kv);
    assert_int_equal(ropekv_launch(k, &wide, NULL), ROPEKV_OK);
    assert_wide_rows_equal(qw, qo_narrow);
    assert_memory_equal(kv, kv_narrow, sizeof kv);
    assert_int_equal(ropekv_get_stats(c, &st), ROPEKV_OK);
    assert_true(st.compiles == 0 && st.disk_hits == 2);
    ropekv_kernel_release(k);
    ropekv_destroy(c);
}

/* ropekv_kernel_prepare builds the 64-bit entry now: a later launch that needs it compiles nothing
 * (as inside graph capture). Unknown entry bits are ROPEKV_ERR_ARG. */
static void test_prepare_wide_entry(void **state) {
    (void)state;
    ropekv_ctx *c = open_ctx(NULL);
    ropekv_kernel *k;
    ropekv_stats before, after;
    assert_int_equal(ropekv_kernel_get(c, &DS_FP8, &k), ROPEKV_OK);
    assert_int_equal(ropekv_kernel_prepare(k, 4), ROPEKV_ERR_ARG);
    assert_non_null(strstr(ropekv_last_error(c), "ROPEKV_ENTRY_64"));
    assert_int_equal(ropekv_kernel_prepare(NULL, ROPEKV_ENTRY_64), ROPEKV_ERR_NULL);
    assert_int_equal(ropekv_kernel_prepare(k, ROPEKV_ENTRY_32), ROPEKV_OK);
    assert_int_equal(ropekv_get_stats(c, &before), ROPEKV_OK);
    assert_true(before.compiles == 1);
    assert_int_equal(ropekv_kernel_prepare(k, ROPEKV_ENTRY_32 | ROPEKV_ENTRY_64), ROPEKV_OK);
    assert_int_equal(ropekv_kernel_prepare(k, ROPEKV_ENTRY_64), ROPEKV_OK); /* already built: nothing to do */
    assert_int_equal(ropekv_get_stats(c, &before), ROPEKV_OK);
    assert_true(before.compiles == 2);
    for (int i = 0; i < T; i++) slots[i] = i, pos[i] = i % 8;
    ropekv_args wide = good_args();
    wide.q_out = wide_q_out();
    wide.q_out_st = WIDE_ST;              /* the offsets need the 64-bit entry */
    setenv("CXX", "/nonexistent/c++", 1); /* a compile now would fail the launch */
    expect(c, k, wide, ROPEKV_OK, NULL);
    unsetenv("CXX");
    assert_int_equal(ropekv_get_stats(c, &after), ROPEKV_OK);
    assert_true(after.compiles == before.compiles);
    ropekv_kernel_release(k);
    ropekv_destroy(c);
}

/* A kernel keeps its context alive: destroyed first, the context lives until the last kernel is
 * released, and the kernels still launch meanwhile (the asan preset checks nothing leaks or is used
 * after it is freed). */
static void test_release_after_destroy(void **state) {
    (void)state;
    ropekv_ctx *c = open_ctx(NULL);
    ropekv_kernel *k, *k2, *r;
    ropekv_variant rv = DS_FP8;
    rv.op = ROPEKV_OP_READ;
    assert_int_equal(ropekv_kernel_get(c, &DS_FP8, &k), ROPEKV_OK);
    assert_int_equal(ropekv_kernel_get(c, &DS_FP8, &k2), ROPEKV_OK);
    assert_int_equal(ropekv_kernel_get(c, &rv, &r), ROPEKV_OK);
    ropekv_destroy(c);
    for (int i = 0; i < T; i++) slots[i] = i, pos[i] = i % 8;
    ropekv_args a = good_args();
    assert_int_equal(ropekv_launch(k, &a, NULL), ROPEKV_OK);
    ropekv_kernel_params p;
    assert_int_equal(ropekv_kernel_info(k, &p), ROPEKV_OK);
    assert_string_equal(p.spec, "deepseek_v3");
    a.kv_st = 1; /* a failing launch records its error on the context, which is still there */
    assert_int_equal(ropekv_launch(k, &a, NULL), ROPEKV_ERR_STRIDE);
    ropekv_kernel_release(k);
    ropekv_kernel_release(r);
    a = good_args();
    assert_int_equal(ropekv_launch(k2, &a, NULL), ROPEKV_OK);
    ropekv_kernel_release(k2); /* the last reference: everything is freed */
}

static void test_argument_checks(void **state) {
    (void)state;
    ropekv_ctx *c = open_ctx(NULL);
    ropekv_kernel *k;
    assert_int_equal(ropekv_kernel_get(c, &DS_FP8, &k), ROPEKV_OK);
    for (int i = 0; i < T; i++) slots[i] = i, pos[i] = i;
    ropekv_args a;
    expect(c, k, good_args(), ROPEKV_OK, NULL);
    assert_int_equal(ropekv_launch(k, NULL, NULL), ROPEKV_ERR_NULL);
    assert_int_equal(ropekv_launch(NULL, NULL, NULL), ROPEKV_ERR_NULL);
#define CASE(field, value, status, text) \
    a = good_args();                     \
    a.field = value;                     \
    expect(c, k, a, status, text)
    CASE(q_nope, NULL, ROPEKV_ERR_NULL, "q_nope");
    CASE(q_pe, NULL, ROPEKV_ERR_NULL, "q_pe");
    CASE(q_out, NULL, ROPEKV_ERR_NULL, "q_out");
    CASE(k_nope, NULL, ROPEKV_ERR_NULL, "k_nope");
    CASE(k_pe, NULL, ROPEKV_ERR_NULL, "k_pe");
    CASE(kv_cache, NULL, ROPEKV_ERR_NULL, "kv_cache");
    CASE(positions, NULL, ROPEKV_ERR_NULL, "positions");
    CASE(slots, NULL, ROPEKV_ERR_NULL, "slots");
    CASE(cos_sin, NULL, ROPEKV_ERR_NULL, "cos_sin");
    CASE(k_scale, NULL, ROPEKV_ERR_NULL, "k_scale");
    CASE(tokens, -1, ROPEKV_ERR_SHAPE, "tokens");
    CASE(heads, 0, ROPEKV_ERR_SHAPE, "heads");
    CASE(heads, 70000, ROPEKV_ERR_SHAPE, "heads");
    CASE(max_pos, 0, ROPEKV_ERR_SHAPE, "max_pos");
    CASE(kv_rows, -1, ROPEKV_ERR_SHAPE, "kv_rows");
    CASE(kv_tokens, -2, ROPEKV_ERR_SHAPE, "kv_tokens");
    CASE(kv_tokens, (int64_t)1 << 31, ROPEKV_ERR_SHAPE, "kv_tokens");
    CASE(min_slot, -1, ROPEKV_ERR_ARG, "min_slot");
    CASE(q_out_sh, W - 8, ROPEKV_ERR_STRIDE, "q_out strides");
    CASE(q_nope_st, W, ROPEKV_ERR_STRIDE, "q_nope strides");
    CASE(q_pe_sh, -W, ROPEKV_ERR_STRIDE, "q_pe strides");
    CASE(k_nope_st, L - 8, ROPEKV_ERR_STRIDE, "k_nope");
    CASE(k_pe_st, 0, ROPEKV_ERR_STRIDE, "k_pe");
    CASE(kv_st, W - 8, ROPEKV_ERR_STRIDE, "kv_st");
    CASE(q_pe, q + L + 1, ROPEKV_ERR_ALIGN, "q_pe");
    CASE(q_out_st, H * W + 4, ROPEKV_ERR_ALIGN, "q_out");
    CASE(k_nope, kbuf + 4, ROPEKV_ERR_ALIGN, "k_nope");
    CASE(k_pe_st, W + 2, ROPEKV_ERR_ALIGN, "k_pe");
    CASE(kv_cache, kv + 4, ROPEKV_ERR_ALIGN, "kv_cache");
    CASE(kv_st, W + 4, ROPEKV_ERR_ALIGN, "kv_cache");
    CASE(positions, (const char *)pos + 4, ROPEKV_ERR_ALIGN, "positions");
    CASE(cos_sin, (const char *)cs + 4, ROPEKV_ERR_ALIGN, "cos/sin");
    CASE(k_scale, (const float *)((const char *)kscale + 2), ROPEKV_ERR_ALIGN, "k_scale");
    /* strides and sizes whose extents would overflow: a named error, no arithmetic past 64 bits */
    CASE(q_nope_st, INT64_MAX - 7, ROPEKV_ERR_SHAPE, "q_nope: its strides and sizes reach past 2^57 bytes");
    CASE(q_out_st, (int64_t)1 << 62, ROPEKV_ERR_SHAPE, "q_out");
    CASE(q_pe_sh, INT64_MAX - 7, ROPEKV_ERR_SHAPE, "q_pe"); /* head-major: disjoint, but past 2^57 bytes */
    CASE(k_pe_st, INT64_MAX - 7, ROPEKV_ERR_SHAPE, "k_pe");
    CASE(kv_st, INT64_MAX - 7, ROPEKV_ERR_SHAPE, "kv_cache");
    CASE(max_pos, INT64_MAX, ROPEKV_ERR_SHAPE, "cos/sin");
    /* nothing to do is not an error */
    CASE(tokens, 0, ROPEKV_OK, NULL);
    /* head-major layouts are accepted */
    a = good_args();
    a.q_out_sh = T * W;
    a.q_out_st = W;
    expect(c, k, a, ROPEKV_OK, NULL);
#undef CASE
    /* a launch with no KV rows needs no KV tensors, and one with no query rows no query tensors */
    a = good_args();
    a.kv_tokens = ROPEKV_KV_TOKENS_NONE;
    a.k_nope = a.k_pe = a.slots = NULL;
    a.kv_cache = NULL;
    a.k_nope_st = a.k_pe_st = a.kv_st = 0;
    expect(c, k, a, ROPEKV_OK, NULL);
    a = good_args();
    a.tokens = 0;
    a.kv_tokens = T;
    a.q_nope = a.q_pe = a.q_out = NULL;
    a.q_nope_st = a.q_nope_sh = a.q_pe_st = a.q_pe_sh = a.q_out_st = a.q_out_sh = 0;
    expect(c, k, a, ROPEKV_OK, NULL);
    a.slots = NULL; /* but KV rows still need their slots */
    expect(c, k, a, ROPEKV_ERR_NULL, "slots");
    /* query runs the same checks */
    char why[512];
    a = good_args();
    a.kv_st = 3;
    assert_int_equal(ropekv_query(c, &DS_FP8, &a, why, sizeof why), ROPEKV_ERR_STRIDE);
    assert_non_null(strstr(why, "kv_st"));
    ropekv_kernel_release(k);
    ropekv_destroy(c);
}

/* Extents are counted in bytes: a tensor whose element count fits but whose bytes pass 2^57 (no address space
 * is larger) or pass the top of the address space describes no buffer and is refused, naming it. Before, an f32
 * table of 2^62 elements (2^64 bytes) passed, and positions clamped to max_pos - 1 then addressed past it. */
static void test_extents_in_bytes(void **state) {
    (void)state;
    ropekv_ctx *c = open_ctx(NULL);
    char why[512];
    /* a page-tail record's tails lie after all kv_block_size rows of a block, also with fewer rows in use: DeepSeek-V4's
     * fp8 record (576-byte rows, 8 bytes of tail a token), 3 rows of a block of 64, read back: the cache spans
     * 64 x (576 + 8) bytes, not 3 x (576 + 8) */
    const ropekv_variant v4 = {ROPEKV_SIZED(ropekv_variant), .spec = "deepseek_v4_flash", .record = "dsv4_fp8",
                               .layout = ROPEKV_KV_PAGED, .op = ROPEKV_OP_READ};
    ropekv_args r = {.tokens = 2,
                     .slots = slots,
                     .out = qo,
                     .out_st = 512,
                     .kv_st = 576,
                     .kv_rows = 3,
                     .kv_block_size = 64,
                     .kv_block_st = 64 * (576 + 8)};
    r.kv_cache = (void *)(UINTPTR_MAX - 32767); /* 32 KiB below the top: room for 3 rows and their tails */
    assert_int_equal(ropekv_query(c, &v4, &r, why, sizeof why), ROPEKV_ERR_SHAPE);
    assert_non_null(strstr(why, "kv_cache: its 37376 bytes from"));
    r.kv_cache = kv;
    r.kv_block_st = 64 * 576 + 3 * 8; /* room for the tails of the rows in use, not for the block's */
    assert_int_equal(ropekv_query(c, &v4, &r, why, sizeof why), ROPEKV_ERR_STRIDE);
    assert_non_null(strstr(why, "leaves no room for the page tail"));
    /* a cache's last block ends at its last slot's row: bf16 rows of 576 in blocks of 64, 66 slots: 64 rows, then 2
     * of the second block: (64 + 2) x 1152 = 76032 bytes, not two whole blocks (147456) */
    const ropekv_variant bf = {ROPEKV_SIZED(ropekv_variant), .spec = "deepseek_v3", .layout = ROPEKV_KV_PAGED,
                               .op = ROPEKV_OP_READ};
    r.kv_rows = 66;
    r.kv_block_st = 64 * 576;
    r.out_st = 576;
    r.kv_cache = (void *)(UINTPTR_MAX - 65535); /* 64 KiB below the top */
    assert_int_equal(ropekv_query(c, &bf, &r, why, sizeof why), ROPEKV_ERR_SHAPE);
    assert_non_null(strstr(why, "kv_cache: its 76032 bytes from"));
    r.kv_cache = (void *)(UINTPTR_MAX - 76031 - 256); /* ending 256 bytes below the top */
    if (ropekv_query(c, &bf, &r, why, sizeof why) != ROPEKV_OK) fail_msg("%s", why);
    ropekv_args a = good_args();
    a.max_pos = (int64_t)1 << 56; /* x R = 2^62 f32 elements */
    assert_int_equal(ropekv_query(c, &DS_FP8, &a, why, sizeof why), ROPEKV_ERR_SHAPE);
    assert_non_null(strstr(why, "cos/sin tables (max_pos rows): its strides and sizes reach past 2^57 bytes"));
    a.cos_sin = FAR;
    a.max_pos = ((int64_t)1 << 57) / (4 * R); /* exactly 2^57 bytes: accepted */
    assert_int_equal(ropekv_query(c, &DS_FP8, &a, why, sizeof why), ROPEKV_OK);
    a.max_pos++;
    assert_int_equal(ropekv_query(c, &DS_FP8, &a, why, sizeof why), ROPEKV_ERR_SHAPE);
    /* a bf16 query output of 2^62 elements is 2^63 bytes, past INT64_MAX */
    a = good_args();
    a.q_out_st = (((int64_t)1 << 62) - H * W) / (T - 1) / 8 * 8;
    assert_int_equal(ropekv_query(c, &DS_FP8, &a, why, sizeof why), ROPEKV_ERR_SHAPE);
    assert_non_null(strstr(why, "q_out"));
    /* an fp8 cache one byte row past 2^57 bytes, and one that ends past the top of the address space */
    a = good_args();
    a.kv_cache = FAR;
    a.kv_rows = ((int64_t)1 << 57) / W;
    assert_int_equal(ropekv_query(c, &DS_FP8, &a, why, sizeof why), ROPEKV_OK);
    a.kv_rows++;
    assert_int_equal(ropekv_query(c, &DS_FP8, &a, why, sizeof why), ROPEKV_ERR_SHAPE);
    assert_non_null(strstr(why, "kv_cache: its strides and sizes reach past 2^57 bytes"));
    a = good_args();
    a.kv_cache = (void *)(UINTPTR_MAX - 2047); /* 2 KiB below the top, 8-byte aligned */
    assert_int_equal(ropekv_query(c, &DS_FP8, &a, why, sizeof why), ROPEKV_ERR_SHAPE);
    assert_non_null(strstr(why, "kv_cache: its 3456 bytes from"));
    assert_non_null(strstr(why, "pass the end of the address space"));
    ropekv_destroy(c);
}

/* The 64-bit entry is chosen from byte offsets into the per-token tensors: the kernel turns their element offsets
 * into byte offsets in its index type, so a bf16 query of fewer than 2^31 elements but more than 2^31 bytes needs
 * it. A cache never does: its rows are addressed in 64 bits by both entries, so an engine-sized cache (a bf16 cache
 * past 2 GiB) runs the 32-bit entry. */
static void test_index_width_in_bytes(void **state) {
    (void)state;
    ropekv_variant v = DS_FP8;
    v.kv = ROPEKV_KV_BF16;
    const rk_desc *d = rk_test_ref_variant(&cat, "deepseek_v3", &v);
    assert_non_null(d);
    rk_plan pl;
    rk_err err = {0};
    ropekv_args a = good_args();
    a.kv_cache = FAR;
    a.kv_rows = ((int64_t)1 << 40) / W; /* a 2 TiB bf16 cache: still the 32-bit entry */
    assert_int_equal(rk_args_check(d, &a, &pl, &err), ROPEKV_OK);
    assert_int_equal(pl.wide, 0);
    a = good_args();
    a.q_nope = FAR;
    const int64_t fits = ((int64_t)1 << 29) / (T - 1) / 8 * 8; /* rows under 2^30 elements: both offsets fit */
    const int64_t over = ((int64_t)1 << 30) / (T - 1) / 8 * 8; /* rows just past 2^30 elements: 2^31 bytes of bf16 */
    a.q_nope_st = fits;
    assert_int_equal(rk_args_check(d, &a, &pl, &err), ROPEKV_OK);
    assert_int_equal(pl.wide, 0);
    a.q_nope_st = over;
    assert_int_equal(rk_args_check(d, &a, &pl, &err), ROPEKV_OK);
    assert_int_equal(pl.wide, 1);
    /* the output counts bytes: q_out with that stride needs the 64-bit entry in bf16, not in fp8 */
    a = good_args();
    a.q_out = FAR;
    a.q_out_st = over;
    assert_int_equal(rk_args_check(d, &a, &pl, &err), ROPEKV_OK);
    assert_int_equal(pl.wide, 1);
    v.q_dtype = ROPEKV_Q_FP8_E4M3;
    v.kv = ROPEKV_KV_FP8_E4M3;
    const rk_desc *d8 = rk_test_ref_variant(&cat, "deepseek_v3", &v);
    assert_non_null(d8);
    a.q_scale = kscale;
    assert_int_equal(rk_args_check(d8, &a, &pl, &err), ROPEKV_OK);
    assert_int_equal(pl.wide, 0);
}

/* A negative cache stride is a stride error naming it, even where it is never multiplied (one entry a block). */
static void test_negative_cache_strides(void **state) {
    (void)state;
    ropekv_ctx *c = open_ctx(NULL);
    ropekv_variant v = {.spec = "deepseek_v2_lite", .layout = ROPEKV_KV_PAGED};
    char why[512];
    ropekv_args a = good_args();
    static float cs2[8 * 32 * 2];
    a.cos_sin = a.sin = cs2;
    a.kv_block_size = 1;
    a.kv_block_st = W;
    a.kv_st = -8;
    a.kv_rows = 2;
    assert_int_equal(ropekv_query(c, &v, &a, why, sizeof why), ROPEKV_ERR_STRIDE);
    assert_non_null(strstr(why, "kv_cache: kv_st -8 or its block stride 576 is negative"));
    a.kv_st = W;
    a.kv_rows = 1;
    a.kv_block_st = -8; /* one block: never multiplied */
    assert_int_equal(ropekv_query(c, &v, &a, why, sizeof why), ROPEKV_ERR_STRIDE);
    assert_non_null(strstr(why, "block stride -8 is negative"));
    ropekv_destroy(c);
}

/* Paged and split layouts: where each slot's row lands (blocks of 2 entries, padding between entries
 * and blocks), the page-segmented layout as a split one, and the rules of their arguments. */
/* Write, then read back through the read-back op (host backend): a bf16 row comes back bit for bit, an fp8_tile
 * row as each value rounded through its tile (fp8(x / scale) * scale, to bf16) with the rope part exact; a padding
 * slot reads as zeros. DeepSeek-V3.2's paged cache, 656-byte rows, padded entries and blocks. */
static void test_read_round_trip(void **state) {
    (void)state;
    enum { B = 2, ROW = 656, EST = ROW + 16, BST = B * EST + 32, ROWS = 6 };
    static uint8_t tiles[(ROWS / B) * BST];
    static uint16_t bf16_cache[ROWS * W], out[T * W + 8], out_rope[T * R];
    static float cs2[8 * 64];
    ropekv_ctx *c = open_ctx(NULL);
    ropekv_kernel *wk, *rk;
    for (int i = 0; i < T; i++) pos[i] = i;
    const int64_t sl[T] = {5, -1, 0, 2};
    for (int i = 0; i < T; i++) slots[i] = sl[i];
    for (int i = 0; i < T * W; i++) kbuf[i] = rk_f32_to_bf16((float)((i * 37) % 201 - 100) * (i % 3 ? 0.01f : 3.0f));
    for (size_t i = 0; i < sizeof cs2 / sizeof cs2[0]; i++) cs2[i] = i % 64 < 32 ? 0.75f : 0.5f;
    for (int tile = 0; tile < 2; tile++) {
        const ropekv_kv_dtype dtype = tile ? ROPEKV_KV_FP8_TILE : ROPEKV_KV_BF16;
        ropekv_variant wv = {.spec = "deepseek_v32", .kv = dtype, .q = ROPEKV_Q_NONE, .layout = ROPEKV_KV_PAGED};
        ropekv_variant rv = wv;
        rv.op = ROPEKV_OP_READ;
        assert_int_equal(ropekv_kernel_get(c, &wv, &wk), ROPEKV_OK);
        assert_int_equal(ropekv_kernel_get(c, &rv, &rk), ROPEKV_OK);
        ropekv_kernel_params p;
        assert_int_equal(ropekv_kernel_info(rk, &p), ROPEKV_OK);
        assert_true(p.op == ROPEKV_OP_READ && p.kv == dtype && p.q == ROPEKV_Q_NONE &&
                    p.row_bytes == (tile ? 656 : 1152));
        assert_string_equal(p.read_negative_slot, "zero");
        assert_int_equal(p.fp8_tile, tile ? 128 : 0);
        assert_string_equal(p.fp8_tile_scale, tile ? "f32" : "");
        ropekv_args a = good_args();
        a.cos_sin = cs2;
        a.kv_cache = tile ? (void *)tiles : (void *)bf16_cache;
        a.kv_st = tile ? EST : W;
        a.kv_block_st = tile ? BST : B * W;
        a.kv_block_size = B;
        a.kv_rows = ROWS;
        expect(c, wk, a, ROPEKV_OK, NULL);
        ropekv_args r = {.tokens = T,
                         .slots = slots,
                         .kv_cache = a.kv_cache,
                         .kv_st = a.kv_st,
                         .kv_rows = ROWS,
                         .kv_block_size = B,
                         .kv_block_st = a.kv_block_st,
                         .out = out,
                         .out_st = W};
        memset(out, 0xff, sizeof out);
        expect(c, rk, r, ROPEKV_OK, NULL);
        for (int t = 0; t < T; t++) {
            const uint16_t *got = out + t * W, *x = kbuf + t * W;
            if (sl[t] < 0) {
                for (int j = 0; j < W; j++) assert_int_equal(got[j], 0);
                continue;
            }
            const uint8_t *row = tiles + (sl[t] / B) * BST + (sl[t] % B) * EST;
            for (int j = 0; j < L; j++) {
                uint16_t want = x[j];
                if (tile) {
                    float scale, v = rk_bf16_to_f32(x[j]);
                    memcpy(&scale, row + 512 + 4 * (j / 128), 4);
                    want = rk_f32_to_bf16(rk_fp8_to_f32(rk_f32_to_fp8(v / scale, RK_FP8_OCP), RK_FP8_OCP) * scale);
                }
                if (got[j] != want) fail_msg("%s token %d latent %d: 0x%04x, want 0x%04x", p.key, t, j, got[j], want);
            }
            /* the rope part as the row holds it: bf16 after RoPE, read back unchanged */
            const uint16_t *rope = tile ? (const uint16_t *)(row + 528) : bf16_cache + sl[t] * W + L;
            assert_memory_equal(got + L, rope, 2 * R);
        }
        /* the rope parts apart: the same rows, the latents at a stride of L */
        static uint16_t whole[T * W];
        memcpy(whole, out, sizeof whole);
        r.out_st = L;
        r.out_rope = out_rope;
        r.out_rope_st = R;
        expect(c, rk, r, ROPEKV_OK, NULL);
        for (int t = 0; t < T; t++) {
            assert_memory_equal(out + t * L, whole + t * W, 2 * L);
            assert_memory_equal(out_rope + t * R, whole + t * W + L, 2 * R);
        }
        /* the read's own rules */
        ropekv_args b = r;
        b.out = NULL;
        expect(c, rk, b, ROPEKV_ERR_NULL, "out is NULL");
        b = r;
        b.out_st = L - 8;
        expect(c, rk, b, ROPEKV_ERR_STRIDE, "out token stride");
        b = r;
        b.out_rope = out_rope + 1;
        expect(c, rk, b, ROPEKV_ERR_ALIGN, "out_rope must be 16-byte aligned");
        b = r;
        b.kv_st = tile ? ROW - 16 : W - 8;
        expect(c, rk, b, ROPEKV_ERR_STRIDE, "kv_cache: kv_st");
        if (tile) {
            b = r;
            b.kv_st = EST - 8; /* the bf16 rope part needs 16-byte rows */
            expect(c, rk, b, ROPEKV_ERR_ALIGN, "multiple of 16");
            b = a;
            b.kv_block_st = BST + 8;
            expect(c, wk, b, ROPEKV_ERR_ALIGN, "multiple of 16");
        }
        ropekv_kernel_release(wk);
        ropekv_kernel_release(rk);
    }
    /* fp8_tile rows are one row: no split layout */
    ropekv_variant split = {.spec = "deepseek_v2_lite", .kv = ROPEKV_KV_FP8_TILE, .layout = ROPEKV_KV_SPLIT};
    assert_int_equal(ropekv_kernel_get(c, &split, &wk), ROPEKV_ERR_UNSUPPORTED);
    assert_non_null(strstr(ropekv_last_error(c), "not split"));
    ropekv_variant no_tile = {.spec = "deepseek_v3", .kv = ROPEKV_KV_FP8_TILE};
    assert_int_equal(ropekv_kernel_get(c, &no_tile, &wk), ROPEKV_ERR_UNSUPPORTED);
    assert_non_null(strstr(ropekv_last_error(c), "kv_dtypes {bf16, fp8_e4m3}, not fp8_tile"));
    /* the error names the spec that lists the variant (same L and R), so the caller knows the fix */
    assert_non_null(strstr(ropekv_last_error(c), "specs of the same L and R that list it: deepseek_v32"));
    ropekv_destroy(c);
}

/* Slots near 2^31 (a paged fp8_tile cache of 2^31 - 1 rows, 1.4 TB of address space of which only the pages
 * written are backed): the launch takes the 64-bit entry, and the rows written and read there are the
 * reference's byte for byte, the reference running on a second such mapping. Skipped where the system refuses
 * the mapping. */
static void test_slots_near_2_31(void **state) {
    (void)state;
    enum { B = 64, EST = 672 };
    const int64_t rows = INT32_MAX, bst = (int64_t)B * EST, blocks = (rows + B - 1) / B;
    const size_t bytes = (size_t)(blocks * bst);
    uint8_t *kc = sparse(bytes), *rc = sparse(bytes);
    if (!kc || !rc) {
        if (kc) munmap(kc, bytes);
        print_message("skipped: the system refuses a %.2f TB sparse mapping\n", (double)bytes / 1e12);
        skip();
    }
    ropekv_ctx *c = open_ctx(NULL);
    ropekv_variant wv = {.spec = "deepseek_v32",
                         .kv = ROPEKV_KV_FP8_TILE,
                         .q = ROPEKV_Q_NONE,
                         .layout = ROPEKV_KV_PAGED};
    ropekv_variant rv = wv;
    rv.op = ROPEKV_OP_READ;
    ropekv_kernel *wk, *rk;
    assert_int_equal(ropekv_kernel_get(c, &wv, &wk), ROPEKV_OK);
    assert_int_equal(ropekv_kernel_get(c, &rv, &rk), ROPEKV_OK);
    const int64_t sl[T] = {INT32_MAX - 1, -1, INT32_MAX - 65, 5};
    for (int i = 0; i < T; i++) slots[i] = sl[i], pos[i] = i;
    for (int i = 0; i < T * W; i++) kbuf[i] = rk_f32_to_bf16((float)((i * 29) % 97 - 48) * 0.125f);
    ropekv_args a = good_args();
    a.kv_cache = kc;
    a.kv_st = EST;
    a.kv_rows = rows;
    a.kv_block_size = B;
    a.kv_block_st = bst;
    expect(c, wk, a, ROPEKV_OK, NULL);
    static uint16_t got[T * W], want[T * W];
    ropekv_args r = {.tokens = T,
                     .slots = slots,
                     .kv_cache = kc,
                     .kv_st = EST,
                     .kv_rows = rows,
                     .kv_block_size = B,
                     .kv_block_st = bst,
                     .out = got,
                     .out_st = W};
    expect(c, rk, r, ROPEKV_OK, NULL);
    /* the reference, on the other mapping */
    rk_desc wd, rd;
    rk_err err = {0};
    const rk_spec *sp = rk_catalog_find(&cat, "deepseek_v32");
    const rk_arch *host = rk_arch_find(&cat.archs, "host");
    rk_choice ch = {ROPEKV_KV_FP8_TILE, ROPEKV_Q_NONE,    ROPEKV_INDEX_INT64,
                    ROPEKV_INDEX_INT64, ROPEKV_Q_BF16,    ROPEKV_KV_PAGED,
                    ROPEKV_OP_WRITE,    ROPEKV_NORM_NONE, 0};
    assert_int_equal(rk_desc_make(sp, host, &ch, &wd, &err), ROPEKV_OK);
    ch.op = ROPEKV_OP_READ;
    assert_int_equal(rk_desc_make(sp, host, &ch, &rd, &err), ROPEKV_OK);
    rk_args ra = {.k_nope = a.k_nope,
                  .k_pe = a.k_pe,
                  .kv_cache = rc,
                  .positions = pos,
                  .slots = slots,
                  .cos_sin = cs,
                  .tokens = T,
                  .heads = H,
                  .max_pos = a.max_pos,
                  .k_nope_st = W,
                  .k_pe_st = W,
                  .kv_st = EST,
                  .kv_rows = rows,
                  .kv_tokens = T,
                  .kv_block_size = B,
                  .kv_block_st = bst};
    rk_ref_run(&wd, &ra);
    ra.out = want;
    ra.out_st = W;
    rk_ref_run(&rd, &ra);
    for (int t = 0; t < T; t++) {
        if (sl[t] < 0) continue;
        const int64_t at = sl[t] / B * bst + sl[t] % B * EST;
        assert_memory_equal(kc + at, rc + at, 656);
        assert_true(kc[at + 512 + 3] != 0 || kc[at + 512 + 2] != 0); /* a scale was written there */
    }
    assert_memory_equal(got, want, sizeof got);
    ropekv_kernel_release(wk);
    ropekv_kernel_release(rk);
    ropekv_destroy(c);
    munmap(kc, bytes);
    munmap(rc, bytes);
}

static void test_kv_layouts(void **state) {
    (void)state;
    enum { B = 2, EST = W + 8, BST = B * EST + 16, ROWS = 4 };
    static uint16_t paged[(ROWS / B) * BST + 64];
    ropekv_ctx *c = open_ctx(NULL);
    ropekv_variant v = {.spec = "deepseek_v2_lite", .layout = ROPEKV_KV_PAGED};
    ropekv_kernel *k;
    assert_int_equal(ropekv_kernel_get(c, &v, &k), ROPEKV_OK);
    ropekv_kernel_params p;
    assert_int_equal(ropekv_kernel_info(k, &p), ROPEKV_OK);
    assert_int_equal(p.layout, ROPEKV_KV_PAGED);
    assert_non_null(strstr(p.key, "/layout=paged"));
    for (int i = 0; i < T; i++) pos[i] = i;
    const int64_t sl[T] = {3, -1, 0, 2}; /* token t -> slot sl[t] */
    for (int i = 0; i < T; i++) slots[i] = sl[i];
    for (int i = 0; i < T * W; i++) kbuf[i] = (uint16_t)(0x3c00 + (i % 512)); /* distinct k_nope values */
    static float cs2[8 * 32 * 2];
    for (size_t i = 0; i < sizeof cs2 / sizeof cs2[0]; i++) cs2[i] = 0.5f;
    ropekv_args a = good_args();
    a.cos_sin = cs2;
    a.sin = cs2;
    a.kv_cache = paged;
    a.kv_st = EST;
    a.kv_rows = ROWS;
    a.kv_block_size = B;
    a.kv_block_st = BST;
    memset(paged, 0, sizeof paged);
    expect(c, k, a, ROPEKV_OK, NULL);
    for (int t = 0; t < T; t++) {
        if (sl[t] < 0) continue;
        const uint16_t *row = paged + (sl[t] / B) * BST + (sl[t] % B) * EST;
        assert_memory_equal(row, kbuf + t * W, 2 * 512); /* the latent part, copied */
    }
    const uint16_t zero[8] = {0};
    assert_memory_equal(paged + 1 * EST + W, zero, sizeof zero); /* padding after an entry: untouched */
    assert_memory_equal(paged + B * EST, zero, sizeof zero);     /* padding after a block: untouched */
    /* the rules */
    ropekv_args b = a;
    b.kv_block_size = 0;
    expect(c, k, b, ROPEKV_ERR_SHAPE, "kv_block_size");
    b = a;
    b.kv_block_st = EST + W - 8; /* a block spans EST + W elements */
    expect(c, k, b, ROPEKV_ERR_STRIDE, "kv_cache: block stride");
    b = a;
    b.kv_st = W - 8;
    expect(c, k, b, ROPEKV_ERR_STRIDE, "kv_cache: kv_st");
    b = a;
    b.kv_block_st = BST + 4;
    expect(c, k, b, ROPEKV_ERR_ALIGN, "kv_cache");
    b = a;
    b.kv_block_st = INT64_MAX - 7;
    expect(c, k, b, ROPEKV_ERR_SHAPE, "kv_cache: its strides");
    ropekv_kernel_release(k);

    /* split: aiter's page-segmented blocks (B latent rows, then B rope rows, in one buffer) */
    v.layout = ROPEKV_KV_SPLIT;
    assert_int_equal(ropekv_kernel_get(c, &v, &k), ROPEKV_OK);
    enum { L2 = 512, R2 = 64, SEG = B * (L2 + R2) };
    a.kv_st = L2;
    a.kv_block_st = SEG;
    a.kv_rope_cache = paged + B * L2;
    a.kv_rope_st = R2;
    a.kv_rope_block_st = SEG;
    memset(paged, 0, sizeof paged);
    expect(c, k, a, ROPEKV_OK, NULL);
    for (int t = 0; t < T; t++) {
        if (sl[t] < 0) continue;
        const uint16_t *latent = paged + (sl[t] / B) * SEG + (sl[t] % B) * L2;
        const uint16_t *rope = paged + (sl[t] / B) * SEG + B * L2 + (sl[t] % B) * R2;
        assert_memory_equal(latent, kbuf + t * W, 2 * L2);
        assert_memory_not_equal(rope, zero, sizeof zero); /* the rotated k_pe is written there */
    }
    b = a;
    b.kv_rope_cache = NULL;
    expect(c, k, b, ROPEKV_ERR_NULL, "kv_rope_cache is NULL");
    b = a;
    b.kv_rope_st = R2 - 8;
    expect(c, k, b, ROPEKV_ERR_STRIDE, "kv_rope_cache: kv_rope_st");
    ropekv_kernel_release(k);
    /* a layout a spec narrows its choice to leave out */
    static const char narrow[] = "return { name = 'narrow', kv_lora_rank = 512, qk_rope_head_dim = 64,"
                                 " kv_layouts = { 'flat', 'paged' }, q_dtypes = { 'bf16' } }";
    assert_int_equal(ropekv_load_spec_text(c, "narrow.lua", narrow, sizeof narrow - 1), ROPEKV_OK);
    ropekv_variant ds = {.spec = "narrow", .layout = ROPEKV_KV_SPLIT};
    assert_int_equal(ropekv_kernel_get(c, &ds, &k), ROPEKV_ERR_UNSUPPORTED);
    assert_non_null(strstr(ropekv_last_error(c), "kv_layouts {flat, paged}, not split"));
    ropekv_destroy(c);
}

/* The fp8 query: its parameters, its arguments' rules, and a launch that writes T * H rows of W bytes. */
static void test_fp8_query(void **state) {
    (void)state;
    ropekv_ctx *c = open_ctx(NULL);
    ropekv_variant v = DS_FP8;
    v.q_dtype = ROPEKV_Q_FP8_E4M3;
    ropekv_kernel *k, *k2;
    ropekv_kernel_params p;
    assert_int_equal(ropekv_kernel_get(c, &DS_FP8, &k2), ROPEKV_OK); /* the bf16 query first: its own kernel */
    assert_int_equal(ropekv_kernel_get(c, &v, &k), ROPEKV_OK);
    assert_string_not_equal(ropekv_kernel_name(k), ropekv_kernel_name(k2));
    ropekv_kernel_release(k2);
    assert_int_equal(ropekv_kernel_info(k, &p), ROPEKV_OK);
    assert_string_equal(p.key, "deepseek_v3/host/fp8_e4m3/absorbed/pos=int64/slot=int64/q_dtype=fp8_e4m3");
    assert_int_equal(p.q_dtype, ROPEKV_Q_FP8_E4M3);
    assert_string_equal(p.q_fp8_format, "ocp");
    assert_string_equal(p.q_fp8_scale, "mul_recip");
    assert_true(p.q_fp8_saturate == 448.0f && p.q_fp8_rope_bf16_round == 0);
    assert_true(strlen(p.q_fp8_matches) > 0);
    for (int i = 0; i < T; i++) slots[i] = i, pos[i] = i;
    float qscale[2] = {0.5f, 0.5f};
    ropekv_args a = good_args();
    a.q_scale = qscale;
    uint8_t *qo8 = (uint8_t *)qo;
    memset(qo, 0xa5, sizeof qo);
    for (size_t i = 0; i < sizeof q / sizeof q[0]; i++) q[i] = 0x3f80; /* 1.0: fp8(1 * (1 / 0.5)) = 0x40 */
    expect(c, k, a, ROPEKV_OK, NULL);
    for (int i = 0; i < L; i++) assert_int_equal(qo8[i], 0x40);                    /* q_nope of (0, 0) */
    for (size_t i = T * H * W; i < sizeof qo; i++) assert_int_equal(qo8[i], 0xa5); /* rows of W bytes */
    /* strides and alignment count bytes: 8-byte rows are enough */
    a.q_out = qo8 + 8;
    expect(c, k, a, ROPEKV_OK, NULL);
    a.q_out = qo8 + 4;
    expect(c, k, a, ROPEKV_ERR_ALIGN, "q_out must be 8-byte aligned");
    a = good_args();
    expect(c, k, a, ROPEKV_ERR_NULL, "q_scale is NULL");
    a.q_scale = (const float *)((const char *)qscale + 2);
    expect(c, k, a, ROPEKV_ERR_ALIGN, "q_scale");
    a = good_args(); /* no query rows: no q_scale needed */
    a.tokens = 0;
    a.kv_tokens = T;
    expect(c, k, a, ROPEKV_OK, NULL);
    ropekv_kernel_release(k);

    /* q form none writes no query: the fp8 choice is the bf16 kernel */
    v.q = ROPEKV_Q_NONE;
    assert_int_equal(ropekv_kernel_get(c, &v, &k), ROPEKV_OK);
    v.q_dtype = ROPEKV_Q_BF16;
    assert_int_equal(ropekv_kernel_get(c, &v, &k2), ROPEKV_OK);
    assert_string_equal(ropekv_kernel_name(k), ropekv_kernel_name(k2));
    ropekv_kernel_release(k);
    ropekv_kernel_release(k2);
    /* a spec narrowed to bf16 queries says so; an out-of-range dtype is an argument error */
    static const char narrow[] = "return { name = 'bf16q', kv_lora_rank = 512, qk_rope_head_dim = 64,"
                                 " q_dtypes = { 'bf16' } }";
    assert_int_equal(ropekv_load_spec_text(c, "bf16q.lua", narrow, sizeof narrow - 1), ROPEKV_OK);
    ropekv_variant lite = {.spec = "bf16q", .q_dtype = ROPEKV_Q_FP8_E4M3};
    assert_int_equal(ropekv_kernel_get(c, &lite, &k), ROPEKV_ERR_UNSUPPORTED);
    assert_non_null(strstr(ropekv_last_error(c), "q_dtypes {bf16}, not fp8_e4m3"));
    lite.q_dtype = (ropekv_q_dtype)9;
    assert_int_equal(ropekv_kernel_get(c, &lite, &k), ROPEKV_ERR_ARG);
    ropekv_destroy(c);
}

/* ---- the fused kv_a RMSNorm ------------------------------------------------------------------------------ */
static const ropekv_variant DS_NORM = {.spec = "deepseek_v3",
                                       .kv = ROPEKV_KV_BF16,
                                       .q = ROPEKV_Q_ABSORBED,
                                       .norm = ROPEKV_NORM_RMS_OUT};
static _Alignas(16) uint16_t norm_w[L + 8], norm_out[T * L + 16];

static ropekv_args norm_args(void) {
    ropekv_args a = good_args();
    a.norm_weight = norm_w;
    a.norm_out = norm_out;
    a.norm_out_st = L;
    return a;
}

/* A spec loaded at run time with every kv_norm key set otherwise than DeepSeek's, and rms but not rms_out. */
static const char NORMED_SPEC[] = "return { name = 'normed', kv_lora_rank = 128, qk_rope_head_dim = 32,\n"
                                  "  norms = { 'none', 'rms' }, kv_norm = { eps = 2^-20, weight = 'f32',\n"
                                  "  rounding = 'once', matches = 'a model of mine' }, targets = { 'host' } }\n";

/* ropekv_kernel_info reports the norm and the spec's kv_norm for a norm variant, the canonical "", 0 without one;
 * the norm is part of the key and the name; a spec without kv_norm (DeepSeek-V2-Lite) or whose norms do not list the
 * choice refuses it as unsupported, saying why and which spec lists it; an out-of-range norm is an argument error;
 * the read-back op has no norm (the choice gives the plain read kernel). */
static void test_norm_variants(void **state) {
    (void)state;
    ropekv_ctx *c = open_ctx(NULL);
    ropekv_kernel *k, *k2;
    ropekv_kernel_params p;
    char why[1024];
    assert_int_equal(ropekv_kernel_get(c, &DS_NORM, &k), ROPEKV_OK);
    assert_int_equal(ropekv_kernel_info(k, &p), ROPEKV_OK);
    assert_string_equal(p.key, "deepseek_v3/host/bf16/absorbed/pos=int64/slot=int64/norm=rms_out");
    assert_non_null(strstr(p.name, "_flat_rmsout_wbf16_eps1em06_r2_host"));
    assert_int_equal(p.norm, ROPEKV_NORM_RMS_OUT);
    assert_string_equal(p.norm_weight, "bf16");
    assert_true(p.norm_eps == 1e-6f);
    assert_string_equal(p.norm_rounding, "twice");
    assert_non_null(strstr(p.norm_matches, "RMSNorm"));
    ropekv_kernel_release(k);
    ropekv_variant v = DS_NORM;
    v.norm = ROPEKV_NORM_RMS;
    assert_int_equal(ropekv_kernel_get(c, &v, &k), ROPEKV_OK);
    assert_int_equal(ropekv_kernel_info(k, &p), ROPEKV_OK);
    assert_int_equal(p.norm, ROPEKV_NORM_RMS);
    assert_string_equal(p.key, "deepseek_v3/host/bf16/absorbed/pos=int64/slot=int64/norm=rms");
    assert_non_null(strstr(p.name, "_flat_rms_wbf16_eps1em06_r2_host"));
    v.norm = ROPEKV_NORM_NONE;
    assert_int_equal(ropekv_kernel_get(c, &v, &k2), ROPEKV_OK); /* the same choices without the norm: its own kernel */
    assert_string_not_equal(ropekv_kernel_name(k), ropekv_kernel_name(k2));
    ropekv_kernel_release(k);
    assert_int_equal(ropekv_kernel_info(k2, &p), ROPEKV_OK);
    assert_int_equal(p.norm, ROPEKV_NORM_NONE);
    assert_string_equal(p.norm_weight, "");
    assert_true(p.norm_eps == 0.0f);
    assert_string_equal(p.norm_rounding, "");
    assert_string_equal(p.norm_matches, "");
    assert_null(strstr(p.key, "norm"));
    assert_null(strstr(p.name, "_eps"));
    ropekv_kernel_release(k2);

    /* DeepSeek-V2-Lite has no kv_norm: the reason names the norm and the table, and the specs that list it */
    ropekv_variant lite = {.spec = "deepseek_v2_lite", .norm = ROPEKV_NORM_RMS};
    assert_int_equal(ropekv_query(c, &lite, NULL, why, sizeof why), ROPEKV_ERR_UNSUPPORTED);
    assert_non_null(strstr(why, "deepseek_v2_lite: norm rms needs the spec's kv_norm table"));
    assert_non_null(strstr(why, "specs of the same L and R that list it: deepseek_v3"));
    assert_int_equal(ropekv_kernel_get(c, &lite, &k), ROPEKV_ERR_UNSUPPORTED);
    assert_non_null(strstr(ropekv_last_error(c), "kv_norm"));
    lite.norm = (ropekv_norm)7;
    assert_int_equal(ropekv_query(c, &lite, NULL, why, sizeof why), ROPEKV_ERR_ARG);

    /* a run-time spec: its kv_norm in the info; its norms list refuses rms_out by name */
    assert_int_equal(ropekv_load_spec_text(c, "normed.lua", NORMED_SPEC, sizeof NORMED_SPEC - 1), ROPEKV_OK);
    ropekv_variant mine = {.spec = "normed", .norm = ROPEKV_NORM_RMS_OUT};
    assert_int_equal(ropekv_query(c, &mine, NULL, why, sizeof why), ROPEKV_ERR_UNSUPPORTED);
    assert_non_null(strstr(why, "lists norms {none, rms}, not rms_out"));
    mine.norm = ROPEKV_NORM_RMS;
    assert_int_equal(ropekv_kernel_get(c, &mine, &k), ROPEKV_OK);
    assert_int_equal(ropekv_kernel_info(k, &p), ROPEKV_OK);
    assert_string_equal(p.norm_weight, "f32");
    assert_true(p.norm_eps == 0x1p-20f);
    assert_string_equal(p.norm_rounding, "once");
    assert_string_equal(p.norm_matches, "a model of mine");
    assert_non_null(strstr(p.name, "_rms_wf32_eps9p536743em07_r1_host")); /* the shortest decimal of 2^-20 */
    ropekv_kernel_release(k);

    /* the read-back op normalizes nothing: a norm choice gives the read kernel */
    ropekv_variant rd = {.spec = "deepseek_v3", .op = ROPEKV_OP_READ}, rd_norm = rd;
    rd_norm.norm = ROPEKV_NORM_RMS_OUT;
    assert_int_equal(ropekv_kernel_get(c, &rd, &k), ROPEKV_OK);
    assert_int_equal(ropekv_kernel_get(c, &rd_norm, &k2), ROPEKV_OK);
    assert_string_equal(ropekv_kernel_name(k), ropekv_kernel_name(k2));
    assert_int_equal(ropekv_kernel_info(k2, &p), ROPEKV_OK);
    assert_int_equal(p.norm, ROPEKV_NORM_NONE);
    ropekv_kernel_release(k);
    ropekv_kernel_release(k2);
    ropekv_destroy(c);
}

/* The norm's argument rules, each with its status and a message naming the field: the weight (and norm_out for
 * rms_out) required with KV rows, 16-byte aligned, norm_out's stride wide enough, a multiple of 8 and its extent
 * bounded; the norm's tensors refused by kernels that do not use them (norm none, the read-back op; norm_out by rms). */
static void test_norm_argument_checks(void **state) {
    (void)state;
    ropekv_ctx *c = open_ctx(NULL);
    ropekv_kernel *k;
    assert_int_equal(ropekv_kernel_get(c, &DS_NORM, &k), ROPEKV_OK);
    for (int i = 0; i < T; i++) slots[i] = i, pos[i] = i;
    ropekv_args a;
    expect(c, k, norm_args(), ROPEKV_OK, NULL);
#define CASE(field, value, status, text) \
    a = norm_args();                     \
    a.field = value;                     \
    expect(c, k, a, status, text)
    CASE(norm_weight, NULL, ROPEKV_ERR_NULL, "norm_weight is NULL (norm rms_out)");
    CASE(norm_out, NULL, ROPEKV_ERR_NULL, "norm_out is NULL (norm rms_out)");
    CASE(norm_out_st, L - 8, ROPEKV_ERR_STRIDE, "norm_out token stride 504 < 512");
    CASE(norm_out_st, 0, ROPEKV_ERR_STRIDE, "norm_out token stride 0 < 512");
    CASE(norm_out_st, -L, ROPEKV_ERR_STRIDE, "norm_out token stride -512");
    CASE(norm_out_st, L + 4, ROPEKV_ERR_ALIGN, "norm_out must be 16-byte aligned with a token stride a multiple of 8");
    CASE(norm_out, norm_out + 4, ROPEKV_ERR_ALIGN, "norm_out must be 16-byte aligned");
    CASE(norm_weight, norm_w + 1, ROPEKV_ERR_ALIGN, "norm_weight must be 16-byte aligned");
    CASE(norm_out_st, INT64_MAX - 7, ROPEKV_ERR_SHAPE, "norm_out: its strides and sizes reach past 2^57 bytes");
    CASE(norm_out, (void *)(UINTPTR_MAX - 4095), ROPEKV_ERR_SHAPE, "norm_out: its 4096 bytes from");
    /* one KV row needs no stride; no KV rows need neither tensor */
    CASE(kv_tokens, 1, ROPEKV_OK, NULL);
    a.norm_out_st = 0;
    expect(c, k, a, ROPEKV_OK, NULL);
    a = norm_args();
    a.kv_tokens = ROPEKV_KV_TOKENS_NONE;
    a.k_nope = a.k_pe = a.slots = a.norm_weight = NULL;
    a.kv_cache = a.norm_out = NULL;
    a.k_nope_st = a.k_pe_st = a.kv_st = a.norm_out_st = 0;
    expect(c, k, a, ROPEKV_OK, NULL);
    /* query runs the same checks */
    char why[512];
    a = norm_args();
    a.norm_out_st = 8;
    assert_int_equal(ropekv_query(c, &DS_NORM, &a, why, sizeof why), ROPEKV_ERR_STRIDE);
    assert_non_null(strstr(why, "norm_out token stride 8 < 512"));
    ropekv_kernel_release(k);

    /* norm rms writes no norm_out: one given is a mix-up */
    ropekv_variant rms = DS_NORM;
    rms.norm = ROPEKV_NORM_RMS;
    assert_int_equal(ropekv_kernel_get(c, &rms, &k), ROPEKV_OK);
    expect(c, k, norm_args(), ROPEKV_ERR_ARG, "norm_out is set, but kernel deepseek_v3/host/bf16/absorbed");
    CASE(norm_out, NULL, ROPEKV_OK, NULL);
    a.norm_weight = NULL;
    expect(c, k, a, ROPEKV_ERR_NULL, "norm_weight is NULL (norm rms)");
    ropekv_kernel_release(k);
    /* a kernel without the norm takes neither tensor, with rows or without */
    assert_int_equal(ropekv_kernel_get(c, &DS_FP8, &k), ROPEKV_OK);
    expect(c, k, good_args(), ROPEKV_OK, NULL);
    a = good_args();
    a.norm_weight = norm_w;
    expect(c, k, a, ROPEKV_ERR_ARG, "norm_weight or norm_out is set, but kernel");
    a = good_args();
    a.norm_out = norm_out;
    a.tokens = 0;
    expect(c, k, a, ROPEKV_ERR_ARG, "has no fused norm (variant norm none)");
    ropekv_kernel_release(k);
    ropekv_variant rd = {.spec = "deepseek_v3", .op = ROPEKV_OP_READ};
    assert_int_equal(ropekv_kernel_get(c, &rd, &k), ROPEKV_OK);
    static _Alignas(16) uint16_t out[T * W];
    ropekv_args r = {.tokens = T, .slots = slots, .kv_cache = kv, .kv_st = W, .kv_rows = T + 2, .out = out, .out_st = W};
    expect(c, k, r, ROPEKV_OK, NULL);
    r.norm_weight = norm_w;
    expect(c, k, r, ROPEKV_ERR_ARG, "norm_weight");
#undef CASE
    ropekv_kernel_release(k);
    ropekv_destroy(c);
}

/* Aliasing (include/ropekv.h): a tensor the kernel writes may share no byte with another tensor of the launch, each
 * pair the checks must refuse refused with ROPEKV_ERR_ALIAS naming both (launch and query alike); the in-place forms
 * (zero_copy's q_nope in q_out, inplace's q_pe), tensors only read, and written rows interleaved with another
 * tensor's without a shared byte are accepted. */
static void test_aliasing(void **state) {
    (void)state;
    ropekv_ctx *c = open_ctx(NULL);
    ropekv_kernel *k;
    char why[512];
    for (int i = 0; i < T; i++) slots[i] = i, pos[i] = i;
    assert_string_equal(ropekv_status_name(ROPEKV_ERR_ALIAS), "ROPEKV_ERR_ALIAS");
    assert_int_equal(ropekv_kernel_get(c, &DS_FP8, &k), ROPEKV_OK);
    ropekv_args a = good_args();
    /* the cache over k_nope, with other strides (fp8 rows of W bytes over bf16 rows of W elements) */
    a.kv_cache = kbuf;
    expect(c, k, a, ROPEKV_ERR_ALIAS, "k_nope");
    assert_non_null(strstr(ropekv_last_error(c), "overlaps kv_cache"));
    assert_int_equal(ropekv_query(c, &DS_FP8, &a, why, sizeof why), ROPEKV_ERR_ALIAS);
    assert_non_null(strstr(why, "which the kernel writes"));
    /* slots inside the cache; q_pe inside q_out's rows (absorbed reads it while it writes them) */
    a = good_args();
    a.slots = kv + 64;
    expect(c, k, a, ROPEKV_ERR_ALIAS, "slots");
    a = good_args();
    a.q_pe = qo + L;
    a.q_pe_st = H * W;
    a.q_pe_sh = W;
    expect(c, k, a, ROPEKV_ERR_ALIAS, "q_pe");
    /* tensors only read may overlap: q_nope and q_pe, k_nope and k_pe as the same bytes */
    a = good_args();
    a.q_pe = q;
    a.k_pe = kbuf;
    expect(c, k, a, ROPEKV_OK, NULL);
    ropekv_kernel_release(k);

    /* q_scale inside q_out's bytes (an fp8 query) */
    ropekv_variant v = DS_FP8;
    v.q_dtype = ROPEKV_Q_FP8_E4M3;
    assert_int_equal(ropekv_kernel_get(c, &v, &k), ROPEKV_OK);
    static float qscale[2] = {0.5f, 0.5f};
    a = good_args();
    a.q_scale = qscale;
    expect(c, k, a, ROPEKV_OK, NULL);
    a.q_scale = (const float *)((uint8_t *)qo + 64);
    expect(c, k, a, ROPEKV_ERR_ALIAS, "q_scale");
    assert_non_null(strstr(ropekv_last_error(c), "overlaps q_out"));
    ropekv_kernel_release(k);

    /* zero_copy does not read q_nope, which lies in q_out[..., :L]: any pointer is accepted, q_out's own too */
    v = DS_FP8;
    v.q = ROPEKV_Q_ZERO_COPY;
    assert_int_equal(ropekv_kernel_get(c, &v, &k), ROPEKV_OK);
    a = good_args();
    a.q_nope = qo;
    expect(c, k, a, ROPEKV_OK, NULL);
    a.q_pe = qo + L; /* but q_pe is read: not inside q_out */
    expect(c, k, a, ROPEKV_ERR_ALIAS, "q_pe");
    ropekv_kernel_release(k);
    /* inplace rewrites q_pe where it lies; q_nope and q_out are not its tensors */
    v.q = ROPEKV_Q_INPLACE;
    assert_int_equal(ropekv_kernel_get(c, &v, &k), ROPEKV_OK);
    a = good_args();
    a.q_out = q;
    expect(c, k, a, ROPEKV_OK, NULL);
    a.q_pe = kbuf + L; /* the rope part it rewrites may not be k_pe's */
    expect(c, k, a, ROPEKV_ERR_ALIAS, "q_pe");
    ropekv_kernel_release(k);

    /* norm_out = k_nope refused; norm_out and k_nope as the halves of one [K, 2L] buffer accepted */
    static _Alignas(16) uint16_t halves[T * 2 * L];
    assert_int_equal(ropekv_kernel_get(c, &DS_NORM, &k), ROPEKV_OK);
    a = norm_args();
    a.norm_out = kbuf;
    a.norm_out_st = W;
    expect(c, k, a, ROPEKV_ERR_ALIAS, "norm_out");
    assert_non_null(strstr(ropekv_last_error(c), "k_nope"));
    a = norm_args();
    a.k_nope = halves;
    a.k_nope_st = 2 * L;
    a.norm_out = halves + L;
    a.norm_out_st = 2 * L;
    expect(c, k, a, ROPEKV_OK, NULL);
    a.norm_out = halves + L - 8; /* one chunk into k_nope's rows */
    expect(c, k, a, ROPEKV_ERR_ALIAS, "norm_out");
    ropekv_kernel_release(k);

    /* split: the rope parts inside the latent parts' entries refused (the page-segmented layout: test_kv_layouts) */
    ropekv_variant sv = {.spec = "deepseek_v2_lite", .layout = ROPEKV_KV_SPLIT};
    assert_int_equal(ropekv_kernel_get(c, &sv, &k), ROPEKV_OK);
    static float cs2[8 * 32 * 2];
    static _Alignas(16) uint16_t pages[2 * 2 * W];
    a = good_args();
    a.cos_sin = a.sin = cs2;
    a.kv_cache = pages;
    a.kv_st = L;
    a.kv_block_size = 2;
    a.kv_block_st = 2 * W;
    a.kv_rows = 4;
    a.kv_rope_cache = pages + 2 * L;
    a.kv_rope_st = R;
    a.kv_rope_block_st = 2 * W;
    expect(c, k, a, ROPEKV_OK, NULL);
    a.kv_rope_cache = pages + L;
    expect(c, k, a, ROPEKV_ERR_ALIAS, "kv_rope_cache");
    ropekv_kernel_release(k);

    /* the read-back op's outputs over its cache */
    ropekv_variant rv = {.spec = "deepseek_v3", .op = ROPEKV_OP_READ};
    assert_int_equal(ropekv_kernel_get(c, &rv, &k), ROPEKV_OK);
    ropekv_args r = {.tokens = T, .slots = slots, .kv_cache = kv, .kv_st = W, .kv_rows = T + 2, .out = qo, .out_st = W};
    expect(c, k, r, ROPEKV_OK, NULL);
    r.out = kv + 2 * W;
    expect(c, k, r, ROPEKV_ERR_ALIAS, "out");
    r.out = qo;
    r.out_st = L;
    r.out_rope = qo + L - 8;
    r.out_rope_st = L;
    expect(c, k, r, ROPEKV_ERR_ALIAS, "out_rope");
    ropekv_kernel_release(k);
    ropekv_destroy(c);
}

/* The tensor table (ropekv_kernel_tensor): the tensors a kernel touches, in order, with their dtypes, dimensions,
 * strides, alignment and needs, by index and by name; and every tensor it lists is one the launch needs. */
static void test_kernel_tensors(void **state) {
    (void)state;
    ropekv_ctx *c = open_ctx(NULL);
    ropekv_kernel *k;
    ropekv_tensor_info t = {.size = sizeof t};
    assert_int_equal(ropekv_kernel_get(c, &DS_FP8, &k), ROPEKV_OK);
    static const char *const names[] = {"q_nope",    "q_pe",  "q_out",   "k_nope",  "k_pe",      "kv_cache",
                                        "positions", "slots", "cos_sin", "k_scale", "write_mask"};
    assert_int_equal(ropekv_kernel_tensor_count(k), sizeof names / sizeof names[0]);
    for (int i = 0; i < ropekv_kernel_tensor_count(k); i++) {
        assert_int_equal(ropekv_kernel_tensor(k, i, &t), ROPEKV_OK);
        assert_string_equal(t.name, names[i]);
        assert_int_equal(t.size, sizeof t);
    }
    assert_int_equal(ropekv_kernel_tensor_find(k, "q_nope", &t), ROPEKV_OK);
    assert_int_equal(t.access, ROPEKV_TENSOR_READ);
    assert_int_equal(t.need, ROPEKV_NEED_TOKENS);
    assert_string_equal(t.dtype, "bf16");
    assert_int_equal(t.elem_bytes, 2);
    assert_int_equal(t.rank, 3);
    assert_string_equal(t.dims[0], "T");
    assert_string_equal(t.dims[1], "H");
    assert_string_equal(t.dims[2], "L");
    assert_true(t.sizes[0] == -1 && t.sizes[1] == -1 && t.sizes[2] == L);
    assert_string_equal(t.strides[0], "q_nope_st");
    assert_string_equal(t.strides[1], "q_nope_sh");
    assert_null(t.strides[2]);
    assert_true(t.align == 16 && t.stride_multiple == 8);
    assert_string_equal(t.when, "q form absorbed");
    assert_int_equal(ropekv_kernel_tensor_find(k, "q_out", &t), ROPEKV_OK);
    assert_int_equal(t.access, ROPEKV_TENSOR_WRITE);
    assert_true(t.sizes[2] == W);
    assert_int_equal(ropekv_kernel_tensor_find(k, "kv_cache", &t), ROPEKV_OK);
    assert_string_equal(t.dtype, "fp8_e4m3");
    assert_int_equal(t.need, ROPEKV_NEED_KV_TOKENS);
    assert_true(t.rank == 2 && t.align == 8 && t.elem_bytes == 1);
    assert_string_equal(t.dims[0], "kv_rows");
    assert_string_equal(t.strides[0], "kv_st");
    assert_int_equal(ropekv_kernel_tensor_find(k, "cos_sin", &t), ROPEKV_OK);
    assert_true(t.rank == 2 && t.sizes[1] == R && t.strides[0] == NULL && t.need == ROPEKV_NEED_ROPE);
    assert_string_equal(t.dtype, "f32");
    assert_int_equal(ropekv_kernel_tensor_find(k, "k_scale", &t), ROPEKV_OK);
    assert_string_equal(t.when, "fp8 cache with a scale");
    assert_int_equal(ropekv_kernel_tensor_find(k, "positions", &t), ROPEKV_OK);
    assert_true(t.need == ROPEKV_NEED_POSITIONS && t.align == 8);
    assert_string_equal(t.dims[0], "P");
    /* errors, and the sized struct */
    assert_int_equal(ropekv_kernel_tensor_find(k, "norm_out", &t), ROPEKV_ERR_ARG);
    assert_int_equal(ropekv_kernel_tensor_find(k, NULL, &t), ROPEKV_ERR_NULL);
    assert_int_equal(ropekv_kernel_tensor(k, -1, &t), ROPEKV_ERR_ARG);
    assert_int_equal(ropekv_kernel_tensor(k, ropekv_kernel_tensor_count(k), &t), ROPEKV_ERR_ARG);
    assert_int_equal(ropekv_kernel_tensor(NULL, 0, &t), ROPEKV_ERR_NULL);
    assert_int_equal(ropekv_kernel_tensor(k, 0, NULL), ROPEKV_ERR_NULL);
    assert_int_equal(ropekv_kernel_tensor_count(NULL), 0);
    t.size = 0;
    assert_int_equal(ropekv_kernel_tensor(k, 0, &t), ROPEKV_OK);
    assert_int_equal(t.size, sizeof t);
    t.size = 4;
    assert_int_equal(ropekv_kernel_tensor(k, 0, &t), ROPEKV_ERR_VERSION);
    struct {
        size_t size;
        const char *name;
    } head = {sizeof head, NULL}; /* a caller that knows the first fields only */
    assert_int_equal(ropekv_kernel_tensor(k, 1, (ropekv_tensor_info *)(void *)&head), ROPEKV_OK);
    assert_string_equal(head.name, "q_pe");
    struct {
        ropekv_tensor_info now;
        int64_t later;
    } big;
    memset(&big, 0xff, sizeof big);
    big.now.size = sizeof big;
    assert_int_equal(ropekv_kernel_tensor(k, 0, &big.now), ROPEKV_OK);
    assert_true(big.later == 0 && big.now.size == sizeof big.now);
    /* every tensor listed is needed by a launch with rows (but the optional write mask, last): NULL is refused,
     * naming it */
    t.size = sizeof t;
    for (int i = 0; i < ropekv_kernel_tensor_count(k); i++) {
        assert_int_equal(ropekv_kernel_tensor(k, i, &t), ROPEKV_OK);
        if (t.need == ROPEKV_NEED_OPTIONAL) {
            assert_string_equal(t.name, "write_mask");
            continue;
        }
        assert_true(i < 10);
        static const struct {
            const char *name;
            size_t at;
        } fields[] = {{"q_nope", offsetof(ropekv_args, q_nope)},       {"q_pe", offsetof(ropekv_args, q_pe)},
                      {"q_out", offsetof(ropekv_args, q_out)},         {"k_nope", offsetof(ropekv_args, k_nope)},
                      {"k_pe", offsetof(ropekv_args, k_pe)},           {"kv_cache", offsetof(ropekv_args, kv_cache)},
                      {"positions", offsetof(ropekv_args, positions)}, {"slots", offsetof(ropekv_args, slots)},
                      {"cos_sin", offsetof(ropekv_args, cos_sin)},     {"k_scale", offsetof(ropekv_args, k_scale)}};
        ropekv_args a = good_args();
        const void *none = NULL;
        memcpy((char *)&a + fields[i].at, &none, sizeof none);
        expect(c, k, a, ROPEKV_ERR_NULL, fields[i].name);
    }
    ropekv_kernel_release(k);
    /* the other forms: zero_copy has no q_nope; inplace writes q_pe; paged caches are blocks of entries; the
     * read-back op's out_rope is optional */
    ropekv_variant v = DS_FP8;
    v.q = ROPEKV_Q_ZERO_COPY;
    v.layout = ROPEKV_KV_PAGED;
    assert_int_equal(ropekv_kernel_get(c, &v, &k), ROPEKV_OK);
    assert_int_equal(ropekv_kernel_tensor_find(k, "q_nope", &t), ROPEKV_ERR_ARG);
    assert_int_equal(ropekv_kernel_tensor_find(k, "kv_cache", &t), ROPEKV_OK);
    assert_true(t.rank == 3 && t.sizes[2] == W);
    assert_string_equal(t.dims[0], "blocks");
    assert_string_equal(t.dims[1], "block_size");
    assert_string_equal(t.strides[0], "kv_block_st");
    assert_string_equal(t.strides[1], "kv_st");
    ropekv_kernel_release(k);
    v.q = ROPEKV_Q_INPLACE;
    assert_int_equal(ropekv_kernel_get(c, &v, &k), ROPEKV_OK);
    assert_int_equal(ropekv_kernel_tensor_find(k, "q_pe", &t), ROPEKV_OK);
    assert_int_equal(t.access, ROPEKV_TENSOR_READ_WRITE);
    assert_int_equal(ropekv_kernel_tensor_find(k, "q_out", &t), ROPEKV_ERR_ARG);
    ropekv_kernel_release(k);
    ropekv_variant rv = {.spec = "deepseek_v32", .kv = ROPEKV_KV_FP8_TILE, .op = ROPEKV_OP_READ};
    assert_int_equal(ropekv_kernel_get(c, &rv, &k), ROPEKV_OK);
    assert_int_equal(ropekv_kernel_tensor_count(k), 4); /* kv_cache, slots, out, out_rope: no k_scale */
    assert_int_equal(ropekv_kernel_tensor_find(k, "kv_cache", &t), ROPEKV_OK);
    assert_true(t.access == ROPEKV_TENSOR_READ && t.need == ROPEKV_NEED_TOKENS && t.sizes[1] == 656);
    assert_string_equal(t.dtype, "uint8");
    assert_string_equal(t.dims[1], "row_bytes");
    assert_int_equal(ropekv_kernel_tensor_find(k, "out_rope", &t), ROPEKV_OK);
    assert_int_equal(t.need, ROPEKV_NEED_OPTIONAL);
    assert_int_equal(ropekv_kernel_tensor_find(k, "out", &t), ROPEKV_OK);
    assert_string_equal(t.dims[1], "out_w");
    ropekv_kernel_release(k);
    ropekv_destroy(c);

    /* a family's table, without a kernel: what its kernels agree on */
    assert_int_equal(ropekv_family_tensor_count(ROPEKV_OP_WRITE, ROPEKV_Q_ABSORBED), 16);
    assert_int_equal(ropekv_family_tensor_count(ROPEKV_OP_WRITE, ROPEKV_Q_NONE), 12);
    assert_int_equal(ropekv_family_tensor_count(ROPEKV_OP_READ, ROPEKV_Q_ABSORBED), 6); /* q does not apply */
    assert_int_equal(ropekv_family_tensor_count((ropekv_op)7, ROPEKV_Q_NONE), 0);
    assert_int_equal(ropekv_family_tensor(ROPEKV_OP_WRITE, ROPEKV_Q_INPLACE, 0, &t), ROPEKV_OK);
    assert_string_equal(t.name, "q_pe");
    assert_true(t.access == ROPEKV_TENSOR_READ_WRITE && t.need == ROPEKV_NEED_TOKENS && t.sizes[2] == -1);
    assert_int_equal(ropekv_family_tensor(ROPEKV_OP_WRITE, ROPEKV_Q_ABSORBED, 2, &t), ROPEKV_OK);
    assert_string_equal(t.name, "q_out");
    assert_string_equal(t.dtype, ""); /* bf16 or fp8 per kernel */
    assert_true(t.rank == 3 && t.access == ROPEKV_TENSOR_WRITE && t.elem_bytes == 0);
    assert_int_equal(ropekv_family_tensor(ROPEKV_OP_WRITE, ROPEKV_Q_ABSORBED, 5, &t), ROPEKV_OK);
    assert_string_equal(t.name, "kv_cache");
    assert_true(t.rank == 0 && t.need == ROPEKV_NEED_KV_TOKENS); /* flat rows or paged blocks */
    assert_int_equal(ropekv_family_tensor(ROPEKV_OP_WRITE, ROPEKV_Q_ABSORBED, 8, &t), ROPEKV_OK);
    assert_string_equal(t.name, "cos_sin");
    assert_int_equal(t.need, ROPEKV_NEED_OPTIONAL); /* a spec without RoPE has no tables */
    assert_int_equal(ropekv_family_tensor(ROPEKV_OP_WRITE, ROPEKV_Q_ABSORBED, 16, &t), ROPEKV_ERR_ARG);
    assert_int_equal(ropekv_family_tensor((ropekv_op)7, ROPEKV_Q_NONE, 0, &t), ROPEKV_ERR_ARG);
    assert_int_equal(ropekv_family_tensor(ROPEKV_OP_WRITE, ROPEKV_Q_NONE, 0, NULL), ROPEKV_ERR_NULL);
}

/* Norm kernels launched through the API compute what the reference computes (rk_check: random rows, the planted zero,
 * overflowing, ordered and subnormal rows, norm_out compared): DeepSeek-V3's bf16 cache with rms_out, DeepSeek-V3.2's
 * paged fp8_tile rows with rms, and a run-time spec's f32 weight rounded once. */
static void test_norm_launch(void **state) {
    (void)state;
    ropekv_ctx *c = open_ctx(NULL);
    ropekv_kernel *k;
    const ropekv_variant v32 = {.spec = "deepseek_v32",
                                .kv = ROPEKV_KV_FP8_TILE,
                                .q = ROPEKV_Q_NONE,
                                .layout = ROPEKV_KV_PAGED,
                                .norm = ROPEKV_NORM_RMS};
    const ropekv_variant *vs[2] = {&DS_NORM, &v32};
    for (int i = 0; i < 2; i++) {
        const rk_desc *rv = rk_test_ref_variant(&cat, vs[i]->spec, vs[i]);
        assert_non_null(rv);
        assert_int_equal(rv->norm, vs[i]->norm);
        assert_int_equal(ropekv_kernel_get(c, vs[i], &k), ROPEKV_OK);
        assert_string_equal(ropekv_kernel_name(k), rv->name);
        check_kernel(k, rv);
        ropekv_kernel_release(k);
    }
    assert_int_equal(ropekv_load_spec_text(c, "normed.lua", NORMED_SPEC, sizeof NORMED_SPEC - 1), ROPEKV_OK);
    rk_catalog *mine = malloc(sizeof *mine);
    rk_err err = {0};
    assert_non_null(mine);
    *mine = cat;
    assert_int_equal(rk_catalog_add(mine, "normed.lua", NORMED_SPEC, sizeof NORMED_SPEC - 1, &err), ROPEKV_OK);
    const ropekv_variant v = {.spec = "normed", .kv = ROPEKV_KV_FP8_E4M3, .norm = ROPEKV_NORM_RMS};
    const rk_desc *rv = rk_test_ref_variant(mine, "normed", &v);
    assert_non_null(rv);
    assert_true(rv->norm_weight == RK_NW_F32 && rv->norm_round == RK_NR_ONCE);
    assert_int_equal(ropekv_kernel_get(c, &v, &k), ROPEKV_OK);
    check_kernel(k, rv);
    ropekv_kernel_release(k);
    free(mine);
    ropekv_destroy(c);
}

/* ---- specs at run time ------------------------------------------------------------------------------ */
static const char *MY_SPEC =
    "return { name = 'my_model', kv_lora_rank = 128, qk_rope_head_dim = 32, rope = '%s',\n"
    "         cos_sin = 'f32_split', q_forms = { 'absorbed', 'inplace' }, targets = { 'host', 'sm_90' } }\n";

static void test_runtime_spec(void **state) {
    (void)state;
    ropekv_ctx *c = open_ctx(cache);
    char text[512], path[4300];
    snprintf(path, sizeof path, "%s/my_model.lua", cache);
    for (int round = 0; round < 2; round++) {
        const char *rope = round ? "neox" : "gptj";
        snprintf(text, sizeof text, MY_SPEC, rope);
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs(text, f);
        fclose(f);
        assert_int_equal(ropekv_load_spec(c, path), ROPEKV_OK);
        /* the reference's view of the same file */
        rk_catalog *mine = malloc(sizeof *mine);
        rk_err err = {0};
        *mine = cat;
        assert_int_equal(rk_catalog_add(mine, path, text, strlen(text), &err), ROPEKV_OK);
        for (int qf = 0; qf < 2; qf++) {
            ropekv_variant v = {.spec = "my_model",
                                .kv = ROPEKV_KV_BF16,
                                .q = qf ? ROPEKV_Q_INPLACE : ROPEKV_Q_ABSORBED};
            ropekv_kernel *k;
            assert_int_equal(ropekv_kernel_get(c, &v, &k), ROPEKV_OK);
            const rk_desc *rv = rk_test_ref_variant(mine, "my_model", &v);
            assert_string_equal(ropekv_kernel_name(k), rv->name); /* the new content wins */
            assert_non_null(strstr(rv->name, rope));
            check_kernel(k, rv);
            ropekv_kernel_release(k);
        }
        free(mine);
    }
    /* a bad spec is refused with file, key and reason, and the loaded one stays */
    const char bad[] = "return { name = 'my_model', kv_lora_rank = 128, qk_rope_head_dim = 31, targets = {'host'} }";
    assert_int_equal(ropekv_load_spec_text(c, "bad.lua", bad, sizeof bad - 1), ROPEKV_ERR_SPEC_INVALID);
    assert_non_null(strstr(ropekv_last_error(c), "bad.lua: qk_rope_head_dim"));
    const char evil[] = "os.execute('true') return {}";
    assert_int_equal(ropekv_load_spec_text(c, "evil.lua", evil, sizeof evil - 1), ROPEKV_ERR_SPEC_RUNTIME);
    assert_int_equal(ropekv_load_spec(c, "/nonexistent/spec.lua"), ROPEKV_ERR_IO);
    ropekv_variant v = {.spec = "my_model", .kv = ROPEKV_KV_BF16};
    ropekv_kernel *k;
    assert_int_equal(ropekv_kernel_get(c, &v, &k), ROPEKV_OK);
    assert_non_null(strstr(ropekv_kernel_name(k), "neox"));
    ropekv_kernel_release(k);
    ropekv_destroy(c);
}

/* Backends that are not on this machine are reported, not crashed on. */
static void test_missing_backends(void **state) {
    (void)state;
    ropekv_options o = {.backend = ROPEKV_BACKEND_HIP, .disk_cache = -1};
    ropekv_ctx *c = (ropekv_ctx *)1;
    ropekv_status s = ropekv_create(&c, &o);
    if (s == ROPEKV_OK) {
        print_message("an AMD device is present: %s\n", ropekv_target(c));
        ropekv_destroy(c);
    } else {
        assert_int_equal(s, ROPEKV_ERR_BACKEND);
        assert_null(c);
    }
    o.backend = ROPEKV_BACKEND_CUDA;
    s = ropekv_create(&c, &o);
    if (s == ROPEKV_OK) {
        print_message("an NVIDIA device is present: %s\n", ropekv_target(c));
        ropekv_destroy(c);
    } else {
        assert_int_equal(s, ROPEKV_ERR_BACKEND);
    }
    o.backend = ROPEKV_BACKEND_HOST;
    o.target = "gfx942";
    assert_int_equal(ropekv_create(&c, &o), ROPEKV_ERR_TARGET);
    setenv("ROPEKV_BACKEND", "quantum", 1);
    assert_int_equal(ropekv_create(&c, NULL), ROPEKV_ERR_ARG);
    setenv("ROPEKV_BACKEND", "host", 1);
}

int main(int argc, char **argv) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_names),
        cmocka_unit_test(test_jit_cold_warm_disk),
        cmocka_unit_test(test_corrupt_entry_rebuilt),
        cmocka_unit_test(test_unsafe_cache_dir),
        cmocka_unit_test(test_cache_dir_query),
        cmocka_unit_test(test_threads_share_one_compile),
        cmocka_unit_test(test_query),
        cmocka_unit_test(test_kernel_info),
        cmocka_unit_test(test_kernel_params),
        cmocka_unit_test(test_wide_entry_on_first_need),
        cmocka_unit_test(test_argument_checks),
        cmocka_unit_test(test_struct_sizes),
        cmocka_unit_test(test_extents_in_bytes),
        cmocka_unit_test(test_index_width_in_bytes),
        cmocka_unit_test(test_negative_cache_strides),
        cmocka_unit_test(test_fp8_query),
        cmocka_unit_test(test_kv_layouts),
        cmocka_unit_test(test_norm_variants),
        cmocka_unit_test(test_norm_argument_checks),
        cmocka_unit_test(test_norm_launch),
        cmocka_unit_test(test_aliasing),
        cmocka_unit_test(test_kernel_tensors),
        cmocka_unit_test(test_read_round_trip),
        cmocka_unit_test(test_slots_near_2_31),
        cmocka_unit_test(test_prepare_wide_entry),
        cmocka_unit_test(test_compile_only),
        cmocka_unit_test(test_threads_reload_spec),
        cmocka_unit_test(test_read_only_layers),
        cmocka_unit_test(test_read_only_entry_trust),
        cmocka_unit_test(test_release_after_destroy),
        cmocka_unit_test(test_runtime_spec),
        cmocka_unit_test(test_missing_backends),
    };
    if (argc > 1) cmocka_set_test_filter(argv[1]); /* e.g. "test_threads*" */
    return cmocka_run_group_tests_name("runtime", tests, setup, teardown);
}
