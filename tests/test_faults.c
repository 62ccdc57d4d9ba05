/* Faults around the library, reached through the public API on the host backend wherever possible:
 *   - the disk fills up while a cache entry is written (a 4 KiB tmpfs under the cache directory, or a
 *     file size limit where mounting is not allowed): the kernel still works, one warning, no partial
 *     entry;
 *   - the cache directory is removed, or replaced by a symlink or another directory, while a context
 *     uses it: gets still work and nothing is read or written through the replacement;
 *   - entries of another ropekv version (or cache format) in a shared directory are never used;
 *   - a spec file that changes between runs: the new content wins, in a new context and through the
 *     disk cache, and the old content still finds its own entry; a spec file name cannot become code;
 *   - a spec that burns CPU in C functions (within the instruction cap) is stopped by the time cap;
 *   - a compiler that fails, writes garbage, or hangs (killed after ROPEKV_COMPILE_TIMEOUT seconds);
 *   - a $TMPDIR that other users may write to without the sticky bit, where one renames and replaces
 *     the entries there (files and directories) just before each dlopen: the kernel loaded is still
 *     the one built, with memfd_create, without it, and without /proc too (then such a TMPDIR is
 *     refused, with one error); objects loaded in turn from memory each load as themselves;
 *   - allocation failures: every allocation of rk_spec_load, rk_emit and ropekv_create +
 *     ropekv_kernel_get + ropekv_destroy fails once in turn; each call fails cleanly or recovers, and
 *     nothing it allocated is left behind.
 * The allocation failures come from malloc/calloc/realloc/free wrappers (linked with --wrap, so they
 * see every allocation the library's own code makes, and the Lua sandbox's through its allocator); the
 * swaps before loading from a dlopen wrapper, and the missing memfd_create and /proc from wrappers of
 * memfd_create and rk_fd_path.
 * An optional argument is a cmocka test filter (e.g. "test_oom*"). */
#define _GNU_SOURCE /* unshare */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "host_compile.h"
#include "proc.h"
#include "rk.h"
#include "check.h"
#include "ropekv.h"
#include "testutil.h"

#define PATH 4400

static char root[] = "/tmp/ropekv-test-faults-XXXXXX";
static rk_catalog cat;

/* ---- allocation failures: the wrappers ---------------------------------------------------------- */
void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
void __real_free(void *p);

static long fail_at; /* 0: no injection; else the allocation call (1-based, while armed) that fails */
static long calls;   /* allocation calls seen while armed */
static int armed;

/* Blocks allocated while armed and not yet freed (open addressing, linear probing). */
#define LIVE_CAP (1 << 18)
static void *live[LIVE_CAP];
static long live_n;

static size_t slot_of(const void *p) {
    return (size_t)(((uintptr_t)p >> 4) * 0x9e3779b97f4a7c15ull >> 46) & (LIVE_CAP - 1);
}

static void live_add(void *p) {
    if (!p) return;
    size_t i = slot_of(p);
    while (live[i]) i = (i + 1) & (LIVE_CAP - 1);
    live[i] = p;
    live_n++;
}

static void live_del(void *p) {
    if (!p || live_n == 0) return;
    size_t i = slot_of(p);
    while (live[i] && live[i] != p) i = (i + 1) & (LIVE_CAP - 1);
    if (!live[i]) return; /* allocated before arming, or by code the wrappers do not see */
    live[i] = NULL;
    live_n--;
    /* backward-shift deletion keeps every probe chain unbroken */
    for (size_t j = (i + 1) & (LIVE_CAP - 1); live[j]; j = (j + 1) & (LIVE_CAP - 1)) {
        size_t home = slot_of(live[j]);
        if ((j > i && (home <= i || home > j)) || (j < i && home <= i && home > j)) {
            live[i] = live[j];
            live[j] = NULL;
            i = j;
        }
    }
}

static int inject(void) {
    if (!armed) return 0;
    if (++calls != fail_at) return 0;
    errno = ENOMEM;
    return 1;
}

void *__wrap_malloc(size_t n) {
    if (inject()) return NULL;
    void *p = __real_malloc(n);
    if (armed) live_add(p);
    return p;
}

void *__wrap_calloc(size_t n, size_t size) {
    if (inject()) return NULL;
    void *p = __real_calloc(n, size);
    if (armed) live_add(p);
    return p;
}

void *__wrap_realloc(void *p, size_t n) {
    if (n > 0 && inject()) return NULL;
    void *q = __real_realloc(p, n);
    if (q || n == 0) live_del(p);
    if (armed) live_add(q);
    return q;
}

void __wrap_free(void *p) {
    live_del(p);
    __real_free(p);
}

static void arm(long n) {
    memset(live, 0, sizeof live);
    live_n = 0;
    calls = 0;
    fail_at = n;
    armed = 1;
}

/* Stops injecting; returns the number of allocation calls seen. */
static long disarm(void) {
    armed = 0;
    fail_at = 0;
    return calls;
}

/* ---- helpers ------------------------------------------------------------------------------------ */
static int setup(void **state) {
    (void)state;
    unsetenv("CXX"); /* the tests that change the compiler set it themselves */
    return rk_test_setup(root, &cat);
}

static int teardown(void **state) {
    (void)state;
    rk_test_remove_tree(root);
    return 0;
}

static void sub(char *out, const char *name) { snprintf(out, PATH, "%s/%s", root, name); }

static ropekv_stats stats(const ropekv_ctx *c) {
    ropekv_stats st;
    assert_int_equal(ropekv_get_stats(c, &st), ROPEKV_OK);
    return st;
}

/* The path of the only entry in dir. */
static void only_entry(const char *dir, char *out) {
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    assert_non_null(d);
    while ((e = readdir(d)))
        if (strlen(e->d_name) == 69 && !strcmp(e->d_name + 64, ".rkco")) {
            snprintf(out, PATH, "%s/%s", dir, e->d_name);
            n++;
        }
    closedir(d);
    assert_int_equal(n, 1);
}

static void write_text(const char *path, const char *text, mode_t mode) {
    assert_int_equal(rk_test_write_file(path, text, strlen(text), mode), ROPEKV_OK);
}

/* stderr captured into root/stderr.txt (rk_test_capture_begin / _end) */
static void begin_capture(void) {
    char path[PATH];
    sub(path, "stderr.txt");
    assert_int_equal(rk_test_capture_begin(path), 0);
}

static const char *end_capture(void) { return rk_test_capture_end(); }

/* ---- checking kernels against the reference ------------------------------------------------------ */
static const ropekv_variant DS_FP8 = {.spec = "deepseek_v3", .kv = ROPEKV_KV_FP8_E4M3, .q = ROPEKV_Q_ABSORBED};
static const ropekv_variant DS_BF16 = {.spec = "deepseek_v3", .kv = ROPEKV_KV_BF16, .q = ROPEKV_Q_ABSORBED};
static const ropekv_variant DS_BF16_ZC = {.spec = "deepseek_v3", .kv = ROPEKV_KV_BF16, .q = ROPEKV_Q_ZERO_COPY};
static const ropekv_variant DS_FP8_NONE = {.spec = "deepseek_v3", .kv = ROPEKV_KV_FP8_E4M3, .q = ROPEKV_Q_NONE};

static void check_kernel(ropekv_kernel *k, const rk_desc *rv) {
    char why[4096] = "";
    assert_non_null(rv);
    if (rk_test_check_kernel(k, rv, why, sizeof why)) fail_msg("%s: %s", rv->key, why);
}

/* Gets v from c and checks it against the reference. */
static void get_and_check(ropekv_ctx *c, const ropekv_variant *v) {
    ropekv_kernel *k = NULL;
    ropekv_status s = ropekv_kernel_get(c, v, &k);
    if (s != ROPEKV_OK) fail_msg("kernel_get: %s: %s", ropekv_status_name(s), ropekv_last_error(c));
    check_kernel(k, rk_test_ref_variant(&cat, v->spec, v));
    ropekv_kernel_release(k);
}

/* ---- the disk fills up under the cache ------------------------------------------------------------ */
/* Makes writes under dir fail: a private 4 KiB tmpfs on it (needs a mount namespace: root, or an
 * unprivileged user namespace), else a file size limit below the entry size (entry_size - 44 bytes:
 * the host backend's own temporary .so, entry_size - 88 bytes, still fits; the compiler is started
 * through a wrapper that lifts the limit; RK_FAULTS_NO_TMPFS=1 forces this one). Returns "tmpfs",
 * "rlimit" or NULL. Runs in a child. */
static const char *make_disk_full(const char *dir, size_t entry_size, const char *wrapper) {
    uid_t uid = geteuid();
    gid_t gid = getegid();
    if (getenv("RK_FAULTS_NO_TMPFS")) /* to exercise the fallback where mounting is allowed */
        goto rlimit;
    if (unshare(CLONE_NEWNS) != 0) {
        if (unshare(CLONE_NEWUSER | CLONE_NEWNS) == 0) {
            char map[64];
            int fd;
            snprintf(map, sizeof map, "0 %lu 1", (unsigned long)uid);
            if ((fd = open("/proc/self/setgroups", O_WRONLY)) >= 0) {
                if (write(fd, "deny", 4) < 0) {}
                close(fd);
            }
            if ((fd = open("/proc/self/uid_map", O_WRONLY)) >= 0) {
                if (write(fd, map, strlen(map)) < 0) {}
                close(fd);
            }
            snprintf(map, sizeof map, "0 %lu 1", (unsigned long)gid);
            if ((fd = open("/proc/self/gid_map", O_WRONLY)) >= 0) {
                if (write(fd, map, strlen(map)) < 0) {}
                close(fd);
            }
        }
    }
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0 &&
        mount("ropekv-full", dir, "tmpfs", MS_NOSUID | MS_NODEV, "size=4k,mode=0700") == 0)
        return "tmpfs";
rlimit:;
    struct rlimit rl;
    if (getrlimit(RLIMIT_FSIZE, &rl) != 0) return NULL;
    rl.rlim_cur = (rlim_t)entry_size - 44;
    if (setrlimit(RLIMIT_FSIZE, &rl) != 0) return NULL;
    signal(SIGXFSZ, SIG_IGN);
    setenv("CXX", wrapper, 1);
    return "rlimit";
}

static void test_disk_full(void **state) {
    (void)state;
    char dir[PATH], probe[PATH], entry[PATH], wrapper[PATH], log[PATH];
    sub(dir, "full");
    sub(probe, "probe");
    sub(wrapper, "cxx-unlimited.sh");
    sub(log, "full-child.txt");
    /* the size of the entry this variant makes, for the file size limit */
    ropekv_ctx *c = rk_test_host_ctx(probe);
    get_and_check(c, &DS_FP8);
    ropekv_destroy(c);
    only_entry(probe, entry);
    struct stat st;
    assert_int_equal(stat(entry, &st), 0);
    write_text(wrapper, "#!/bin/sh\nulimit -f unlimited 2>/dev/null\nexec c++ \"$@\"\n", 0700);
    assert_int_equal(mkdir(dir, 0700), 0);

    fflush(stdout);
    fflush(stderr);
    pid_t pid = rk_test_fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd < 0) _exit(10);
        dup2(fd, 2);
        close(fd);
        const char *how = make_disk_full(dir, (size_t)st.st_size, wrapper);
        if (!how) _exit(77);
        fprintf(stderr, "disk full by %s\n", how);
        ropekv_options o = {.backend = ROPEKV_BACKEND_HOST, .cache_dir = dir, .disk_cache = 1};
        ropekv_ctx *cc = NULL;
        if (ropekv_create(&cc, &o) != ROPEKV_OK) _exit(11);
        ropekv_kernel *k = NULL;
        if (ropekv_kernel_get(cc, &DS_FP8, &k) != ROPEKV_OK) {
            fprintf(stderr, "%s\n", ropekv_last_error(cc));
            _exit(12);
        }
        char why[4096] = "";
        if (rk_test_check_kernel(k, rk_test_ref_variant(&cat, "deepseek_v3", &DS_FP8), why, sizeof why)) {
            fprintf(stderr, "%s\n", why);
            _exit(13);
        }
        ropekv_stats s;
        ropekv_get_stats(cc, &s);
        rk_test_census n = rk_test_count_files(dir);
        fprintf(stderr, "compiles %llu, entries %d, temps %d, other %d\n", (unsigned long long)s.compiles, n.entries,
                n.temps, n.other);
        if (s.compiles != 1 || n.entries != 0 || n.temps != 0 || n.other != 0) _exit(14);
        /* the same kernel again: from memory */
        ropekv_kernel *k2 = NULL;
        if (ropekv_kernel_get(cc, &DS_FP8, &k2) != ROPEKV_OK || k2 != k) _exit(15);
        ropekv_kernel_release(k2);
        ropekv_kernel_release(k);
        ropekv_destroy(cc);
        _exit(0);
    }
    int rc = rk_test_wait(pid);
    rk_codeobj out;
    assert_int_equal(rk_read_file(log, &out), ROPEKV_OK);
    char *text = (char *)out.data;
    print_message("%s", text);
    if (rc == 77) {
        print_message("neither a tmpfs nor a file size limit could be set up: skipped\n");
        free(text);
        skip();
    }
    assert_int_equal(rc, 0);
    /* one warning, naming the entry and the system's reason */
    const char *w = strstr(text, "ropekv: warning: cannot write cache entry ");
    assert_non_null(w);
    assert_null(strstr(w + 1, "ropekv: warning:"));
    assert_true(strstr(text, "No space left on device") || strstr(text, "File too large"));
    free(text);
    /* nothing was left on the real directory either, and a later context writes a proper entry */
    rk_test_census k = rk_test_count_files(dir);
    assert_int_equal(k.entries + k.temps + k.other, 0);
    c = rk_test_host_ctx(dir);
    get_and_check(c, &DS_FP8);
    assert_int_equal(stats(c).compiles, 1);
    ropekv_destroy(c);
    assert_int_equal(rk_test_count_files(dir).entries, 1);
}

/* ---- the cache directory is removed or replaced while in use ---------------------------------------- */
static void test_cache_dir_replaced(void **state) {
    (void)state;
    char dir[PATH], elsewhere[PATH], swapped[PATH], old[PATH], other_entry[PATH];
    sub(dir, "vanishing");
    sub(elsewhere, "elsewhere");
    ropekv_ctx *c = rk_test_host_ctx(dir);
    get_and_check(c, &DS_FP8);
    assert_int_equal(rk_test_count_files(dir).entries, 1);

    /* removed: a new kernel still works (one warning from the write), an old one comes from memory */
    rk_test_remove_tree(dir);
    begin_capture();
    get_and_check(c, &DS_BF16);
    const char *text = end_capture();
    assert_non_null(strstr(text, "cannot open cache directory"));
    assert_non_null(strstr(text, "No such file or directory"));
    get_and_check(c, &DS_FP8);
    assert_int_equal(stats(c).memory_hits, 1);

    /* replaced by a symlink to a directory of ours: nothing goes through it */
    assert_int_equal(mkdir(elsewhere, 0700), 0);
    assert_int_equal(symlink(elsewhere, dir), 0);
    begin_capture();
    get_and_check(c, &DS_BF16_ZC);
    text = end_capture();
    assert_non_null(strstr(text, "was replaced by a symbolic link"));
    rk_test_census k = rk_test_count_files(elsewhere);
    assert_int_equal(k.entries + k.temps + k.locks + k.other, 0);
    assert_int_equal(ropekv_cache_clear(c), ROPEKV_ERR_CACHE);
    ropekv_destroy(c);

    /* replaced by another directory (the old one moved away, so its inode cannot be reused), where
     * another context put an entry: that entry is neither read nor touched, nothing is written */
    sub(swapped, "swapped");
    sub(old, "swapped.old");
    c = rk_test_host_ctx(swapped);
    get_and_check(c, &DS_FP8);
    assert_int_equal(rename(swapped, old), 0);
    ropekv_ctx *other = rk_test_host_ctx(swapped);
    get_and_check(other, &DS_FP8_NONE);
    ropekv_destroy(other);
    only_entry(swapped, other_entry);
    rk_codeobj before, after;
    assert_int_equal(rk_read_file(other_entry, &before), ROPEKV_OK);
    begin_capture();
    get_and_check(c, &DS_FP8_NONE);
    text = end_capture();
    assert_non_null(strstr(text, "was replaced by another directory"));
    ropekv_stats s = stats(c);
    assert_true(s.compiles == 2 && s.disk_hits == 0);
    assert_int_equal(ropekv_cache_clear(c), ROPEKV_ERR_CACHE);
    ropekv_destroy(c);
    assert_int_equal(rk_read_file(other_entry, &after), ROPEKV_OK);
    assert_true(before.len == after.len && memcmp(before.data, after.data, before.len) == 0);
    assert_int_equal(rk_test_count_files(swapped).entries, 1);
    assert_int_equal(rk_test_count_files(old).entries, 1);
    rk_code_free(&before);
    rk_code_free(&after);
}

/* ---- another ropekv version shares the directory ------------------------------------------------- */
/* Every field of the key (ropekv version, cache format, templates, source, compiler, target, options)
 * is hashed into the digest that names an entry, so another version's entries have other names. The
 * cases where its bytes could still meet ours: its entry under its own name, its entry copied under
 * our name (a header digest that is not ours), and an entry of another cache format under our name. */
static void hex_flip(char *name_at) { *name_at = *name_at == '0' ? '1' : '0'; }

static void test_other_version_entries(void **state) {
    (void)state;
    char dir[PATH], ours[PATH], theirs[PATH];
    sub(dir, "shared");
    ropekv_ctx *c = rk_test_host_ctx(dir);
    get_and_check(c, &DS_FP8);
    ropekv_destroy(c);
    only_entry(dir, ours);
    rk_codeobj ours_co;
    assert_int_equal(rk_read_file(ours, &ours_co), ROPEKV_OK);
    unsigned char *entry = ours_co.data;
    size_t n = ours_co.len;
    assert_true(n > 88);

    /* their entry: the same code object under their digest (name and header agree) */
    snprintf(theirs, sizeof theirs, "%s", ours);
    hex_flip(theirs + strlen(dir) + 1);
    unsigned char *their = malloc(n);
    memcpy(their, entry, n);
    their[16] ^= 0x10; /* first hex digit of the name is the high nibble of byte 16 */
    assert_int_equal(rename(ours, theirs), 0);
    assert_int_equal(rk_test_write_file(theirs, their, n, 0600), ROPEKV_OK);
    c = rk_test_host_ctx(dir);
    get_and_check(c, &DS_FP8);
    ropekv_stats s = stats(c);
    assert_true(s.compiles == 1 && s.disk_hits == 0 && s.cache_rejects == 0);
    ropekv_destroy(c);
    rk_codeobj still;
    assert_int_equal(rk_read_file(theirs, &still), ROPEKV_OK);
    assert_true(still.len == n && memcmp(still.data, their, n) == 0); /* theirs: neither used nor touched */
    rk_code_free(&still);

    /* their entry under our name: a foreign entry, removed and rebuilt */
    assert_int_equal(rk_test_write_file(ours, their, n, 0600), ROPEKV_OK);
    c = rk_test_host_ctx(dir);
    begin_capture();
    get_and_check(c, &DS_FP8);
    const char *text = end_capture();
    assert_non_null(strstr(text, "foreign entry"));
    s = stats(c);
    assert_true(s.compiles == 1 && s.disk_hits == 0 && s.cache_rejects == 1);
    ropekv_destroy(c);

    /* an entry of another cache format under our name */
    rk_codeobj fmt2;
    assert_int_equal(rk_read_file(ours, &fmt2), ROPEKV_OK);
    assert_true(fmt2.len > 88 && memcmp(fmt2.data + 16, entry + 16, 32) == 0); /* rebuilt under our digest */
    fmt2.data[8] = 2;
    assert_int_equal(rk_test_write_file(ours, fmt2.data, fmt2.len, 0600), ROPEKV_OK);
    c = rk_test_host_ctx(dir);
    begin_capture();
    get_and_check(c, &DS_FP8);
    text = end_capture();
    assert_non_null(strstr(text, "format version 2, expected 1"));
    s = stats(c);
    assert_true(s.compiles == 1 && s.cache_rejects == 1);
    ropekv_destroy(c);
    assert_int_equal(rk_test_count_files(dir).entries, 2); /* ours, rebuilt, and theirs */
    rk_code_free(&fmt2);
    free(their);
    free(entry);
}

/* ---- a spec file changes between runs ----------------------------------------------------------------- */
static const char *MY_SPEC = "return { name = 'my_model', kv_lora_rank = 128, qk_rope_head_dim = 32, rope = '%s',\n"
                             "         cos_sin = 'f32_split', targets = { 'host' } }\n";

/* Loads the spec file into c, gets its bf16 kernel and checks it against the reference of `rope`. */
static void load_get_check(ropekv_ctx *c, const char *path, const char *rope) {
    char text[512];
    snprintf(text, sizeof text, MY_SPEC, rope);
    assert_int_equal(ropekv_load_spec(c, path), ROPEKV_OK);
    rk_catalog *mine = malloc(sizeof *mine);
    rk_err err = {0};
    *mine = cat;
    assert_int_equal(rk_catalog_add(mine, path, text, strlen(text), &err), ROPEKV_OK);
    ropekv_variant v = {.spec = "my_model", .kv = ROPEKV_KV_BF16};
    ropekv_kernel *k;
    assert_int_equal(ropekv_kernel_get(c, &v, &k), ROPEKV_OK);
    const rk_desc *rv = rk_test_ref_variant(mine, "my_model", &v);
    assert_string_equal(ropekv_kernel_name(k), rv->name);
    assert_non_null(strstr(rv->name, rope));
    check_kernel(k, rv);
    ropekv_kernel_release(k);
    free(mine);
}

static void write_spec(const char *path, const char *rope) {
    char text[512];
    snprintf(text, sizeof text, MY_SPEC, rope);
    write_text(path, text, 0600);
}

static void test_spec_file_changes(void **state) {
    (void)state;
    char dir[PATH], path[PATH];
    sub(dir, "specs-cache");
    sub(path, "my_model.lua");
    write_spec(path, "gptj");
    ropekv_ctx *c1 = rk_test_host_ctx(dir);
    load_get_check(c1, path, "gptj");
    assert_int_equal(stats(c1).compiles, 1);

    /* the file changes; a new process (context) loads it: the new content, compiled, not the old entry */
    write_spec(path, "neox");
    ropekv_ctx *c2 = rk_test_host_ctx(dir);
    load_get_check(c2, path, "neox");
    ropekv_stats s = stats(c2);
    assert_true(s.compiles == 1 && s.disk_hits == 0);
    assert_int_equal(rk_test_count_files(dir).entries, 2);

    /* the first context reloads the file: the new content again, now from the disk */
    load_get_check(c1, path, "neox");
    s = stats(c1);
    assert_true(s.compiles == 1 && s.disk_hits == 1);

    /* back to the old content in a third context: its own entry, no compile */
    write_spec(path, "gptj");
    ropekv_ctx *c3 = rk_test_host_ctx(dir);
    load_get_check(c3, path, "gptj");
    s = stats(c3);
    assert_true(s.compiles == 0 && s.disk_hits == 1);
    /* and c2, still on neox, keeps its kernel */
    ropekv_variant v = {.spec = "my_model", .kv = ROPEKV_KV_BF16};
    ropekv_kernel *k;
    assert_int_equal(ropekv_kernel_get(c2, &v, &k), ROPEKV_OK);
    assert_non_null(strstr(ropekv_kernel_name(k), "neox"));
    ropekv_kernel_release(k);
    ropekv_destroy(c3);
    ropekv_destroy(c2);
    ropekv_destroy(c1);
}

/* The spec's file name reaches the generated source only inside a comment, with control characters
 * escaped (rk_escape: the name as messages show it) and backslashes replaced: a name with a newline cannot
 * add code to the kernel. */
static void test_spec_file_name_stays_a_comment(void **state) {
    (void)state;
    char text[512];
    snprintf(text, sizeof text, MY_SPEC, "gptj");
    ropekv_ctx *c = rk_test_host_ctx(NULL);
    const char *name = "/specs/evil\n#error the file name became code\n.lua\\";
    assert_int_equal(ropekv_load_spec_text(c, name, text, strlen(text)), ROPEKV_OK);
    ropekv_variant v = {.spec = "my_model", .kv = ROPEKV_KV_BF16};
    ropekv_kernel *k = NULL;
    ropekv_status st = ropekv_kernel_get(c, &v, &k);
    if (st != ROPEKV_OK) fail_msg("%s", ropekv_last_error(c));
    ropekv_kernel_release(k);
    ropekv_destroy(c);
    rk_spec spec;
    rk_err err = {0};
    assert_int_equal(rk_spec_load(name, text, strlen(text), &cat.archs, &spec, &err), ROPEKV_OK);
    static rk_desc vs[RK_MAX_VARIANTS_PER_SPEC];
    assert_true(rk_variants(&spec, &cat.archs, vs, RK_MAX_VARIANTS_PER_SPEC, &err) > 0);
    rk_buf src = {0};
    assert_int_equal(rk_emit(&vs[0], &src, &err), ROPEKV_OK);
    assert_non_null(strstr(src.p, "from specs/evil?n#error the file name became code?n.lua?. Do not edit."));
    assert_null(strstr(src.p, "\n#error"));
    rk_buf_free(&src);
}

/* A spec that makes C functions do the work (string.rep, table.sort on big data) stays within the
 * instruction cap but is stopped by the CPU time cap, even under pcall. */
static void test_spec_cpu_time_cap(void **state) {
    (void)state;
    static const char *const burners[] = {
        "for i = 1, 200000 do local s = string.rep('x', 1 << 20) end return {}",
        "for i = 1, 200000 do pcall(string.rep, 'x', 1 << 20) end return {}",
        ("local t = {} for i = 1, 100000 do t[i] = i end\n"
         "for i = 1, 200000 do table.sort(t) pcall(table.sort, t) end return {}"),
    };
    for (size_t i = 0; i < sizeof burners / sizeof burners[0]; i++) {
        rk_spec s;
        rk_err err = {0};
        struct timespec a, b;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
        int rc = rk_spec_load("burn.lua", burners[i], strlen(burners[i]), &cat.archs, &s, &err);
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
        double cpu = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
        print_message("%.2f s of CPU: %.60s\n", cpu, err.msg);
        assert_int_equal(rc, ROPEKV_ERR_SPEC_LIMIT);
        assert_non_null(strstr(err.msg, "time limit exceeded (1 s of CPU time)"));
        assert_true(cpu < 3);
    }
    /* One C call that never returns to the VM is beyond the hooks: Lua's string.rep copies n empty
     * pieces one by one inside one C call (tests/fuzz/CAMPAIGN.md, finding 3). The sandbox's
     * string.rep is bounded by its result: these all end at once. */
    static const struct {
        const char *text;
        int rc;
    } reps[] = {
        {"local s = string.rep('', 8 << 48) return {}", ROPEKV_ERR_SPEC_INVALID},
        {"local s = (''):rep(1 << 62, '') return {}", ROPEKV_ERR_SPEC_INVALID},
        {"local s = string.rep('x', 1 << 40) return {}", ROPEKV_ERR_SPEC_RUNTIME},   /* Lua's own size check */
        {"local s = string.rep('', 1 << 30, ',') return {}", ROPEKV_ERR_SPEC_LIMIT}, /* 1 GiB of separators */
        {"return { s = string.rep('ab', 3, '-') }", ROPEKV_ERR_SPEC_INVALID},
    };
    for (size_t i = 0; i < sizeof reps / sizeof reps[0]; i++) {
        rk_spec s;
        rk_err err = {0};
        struct timespec a, b;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
        int rc = rk_spec_load("rep.lua", reps[i].text, strlen(reps[i].text), &cat.archs, &s, &err);
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
        double cpu = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
        print_message("%.3f s of CPU: %.70s\n", cpu, err.msg);
        assert_int_equal(rc, reps[i].rc);
        if (rc == ROPEKV_ERR_SPEC_LIMIT) assert_non_null(strstr(err.msg, "memory limit exceeded"));
        if (rc == ROPEKV_ERR_SPEC_RUNTIME) assert_non_null(strstr(err.msg, "resulting string too large"));
        assert_true(cpu < 0.5);
    }
}

/* ---- a compiler that fails, writes garbage or hangs ------------------------------------------------- */
/* 1 when no process of the pid list in file is left (gone, or a zombie waiting for init). */
static int all_gone(const char *file) {
    FILE *f = fopen(file, "r");
    long pid;
    int gone = 1;
    while (f && fscanf(f, "%ld", &pid) == 1) {
        char stat_path[64], line[512];
        snprintf(stat_path, sizeof stat_path, "/proc/%ld/stat", pid);
        FILE *s = fopen(stat_path, "r");
        if (!s) continue;
        if (fgets(line, sizeof line, s)) {
            const char *p = strrchr(line, ')');
            if (p && p[1] == ' ' && p[2] != 'Z') gone = 0;
        }
        fclose(s);
    }
    if (f) fclose(f);
    return gone;
}

static void test_compiler_fails_or_hangs(void **state) {
    (void)state;
    char cxx[PATH], pids[PATH], script[2 * PATH + 512], dir[PATH];
    sub(cxx, "cxx.sh");
    sub(pids, "cxx.pids");
    sub(dir, "bad-compilers");
    ropekv_kernel *k = NULL;

    /* fails with a message: the message reaches ropekv_last_error */
    write_text(cxx,
               "#!/bin/sh\n[ \"$1\" = --version ] && { echo broken 1.0; exit 0; }\n"
               "echo 'kernel.cpp:1: error: simulated failure' >&2\nexit 1\n",
               0700);
    setenv("CXX", cxx, 1);
    ropekv_ctx *c = rk_test_host_ctx(dir);
    assert_int_equal(ropekv_kernel_get(c, &DS_FP8, &k), ROPEKV_ERR_COMPILE);
    assert_non_null(strstr(ropekv_last_error(c), "simulated failure"));
    assert_int_equal(rk_test_count_files(dir).entries, 0);
    ropekv_destroy(c);

    /* exits 0 but writes nothing, or garbage: an error, no crash, no kernel */
    write_text(cxx, "#!/bin/sh\n[ \"$1\" = --version ] && { echo lazy 1.0; exit 0; }\nexit 0\n", 0700);
    c = rk_test_host_ctx(NULL);
    assert_int_equal(ropekv_kernel_get(c, &DS_FP8, &k), ROPEKV_ERR_COMPILE);
    assert_non_null(strstr(ropekv_last_error(c), "exited 0 without writing"));
    ropekv_destroy(c);
    write_text(cxx,
               "#!/bin/sh\n[ \"$1\" = --version ] && { echo garbage 1.0; exit 0; }\n"
               "while [ $# -gt 1 ]; do [ \"$1\" = -o ] && echo 'not an ELF file' > \"$2\"; shift; done\nexit 0\n",
               0700);
    c = rk_test_host_ctx(dir); /* with a disk cache: an object that does not load is not kept */
    assert_int_equal(ropekv_kernel_get(c, &DS_FP8, &k), ROPEKV_ERR_COMPILE);
    assert_non_null(strstr(ropekv_last_error(c), "file too short"));
    assert_int_equal(rk_test_count_files(dir).entries, 0);
    ropekv_destroy(c);
    /* a real shared object without the kernel's entry points: loading fails, nothing is cached */
    write_text(cxx,
               "#!/bin/sh\n[ \"$1\" = --version ] && { echo hollow 1.0; exit 0; }\n"
               "while [ $# -gt 1 ]; do [ \"$1\" = -o ] && out=$2; shift; done\n"
               "echo 'int rk_unrelated;' | exec cc -shared -fPIC -x c -o \"$out\" -\n",
               0700);
    c = rk_test_host_ctx(dir);
    assert_int_not_equal(ropekv_kernel_get(c, &DS_FP8, &k), ROPEKV_OK);
    print_message("%s\n", ropekv_last_error(c));
    assert_non_null(strstr(ropekv_last_error(c), "not found"));
    assert_int_equal(rk_test_count_files(dir).entries, 0);
    ropekv_destroy(c);

    /* hangs (and leaves a child behind): killed with its process group after the time limit */
    snprintf(script, sizeof script, "#!/bin/sh\necho $$ > '%s'\nsleep 1000 &\necho $! >> '%s'\nwait\n", pids, pids);
    write_text(cxx, script, 0700);
    setenv("ROPEKV_COMPILE_TIMEOUT", "1", 1);
    double t0 = rk_now_ms();
    c = rk_test_host_ctx(NULL); /* `$CXX --version` hangs too: the identity falls back to the command */
    for (int i = 0; i < 100 && !all_gone(pids); i++) usleep(20000);
    assert_true(all_gone(pids));
    assert_int_equal(ropekv_kernel_get(c, &DS_FP8, &k), ROPEKV_ERR_COMPILE);
    double took = (rk_now_ms() - t0) / 1e3;
    print_message("%s (%.1f s in all)\n", ropekv_last_error(c), took);
    assert_non_null(strstr(ropekv_last_error(c), "timed out after 1 s"));
    assert_true(took < 10);
    for (int i = 0; i < 100 && !all_gone(pids); i++) usleep(20000);
    assert_true(all_gone(pids));
    /* the context is still usable: a working compiler, the same kernel */
    unsetenv("CXX");
    unsetenv("ROPEKV_COMPILE_TIMEOUT");
    get_and_check(c, &DS_FP8);
    ropekv_destroy(c);
    /* the limit's spelling: seconds, 0 for none; anything else is the default */
    static const struct {
        const char *v;
        int want;
    } spell[] = {{"", 120}, {"5", 5}, {"0", 0}, {"-3", 120}, {"10s", 120}, {"99999999999999999999", 120}};
    for (size_t i = 0; i < sizeof spell / sizeof spell[0]; i++) {
        setenv("ROPEKV_COMPILE_TIMEOUT", spell[i].v, 1);
        assert_int_equal(rk_host_compile_timeout(), spell[i].want);
    }
    unsetenv("ROPEKV_COMPILE_TIMEOUT");
    assert_int_equal(rk_host_compile_timeout(), RK_COMPILE_TIMEOUT_DEFAULT);
}

/* ---- another user swaps the code in a shared TMPDIR before it is loaded ------------------------------ */
void *__real_dlopen(const char *file, int mode);
int __real_memfd_create(const char *name, unsigned flags);
int __real_rk_fd_path(int fd, const char *name, char *out, size_t cap);

static const char *swap_in;   /* NULL, or the shared object the other user puts in place of ours */
static int swaps;             /* entries swapped */
static int no_memfd, no_proc; /* memfd_create fails (ENOSYS); /proc/self/fd is not there */

/* dst: a copy of swap_in, as the other user's (mode 0777). */
static void plant(const char *dst) {
    rk_codeobj so;
    assert_int_equal(rk_read_file(swap_in, &so), ROPEKV_OK);
    assert_int_equal(rk_test_write_file(dst, so.data, so.len, 0777), ROPEKV_OK);
    assert_int_equal(chmod(dst, 0777), 0);
    rk_code_free(&so);
}

/* What another user may do in a directory they can write to that is not sticky, to every entry of ours
 * named ropekv-tmp-*: a file is replaced (a file of theirs renamed over it); a directory is renamed
 * away (to <name>.theirs) and one of theirs takes its name, holding their object under every name ours
 * holds. Their entries (mode 0777) and the ones moved away are left alone. */
static void swap_tmp_entries(void) {
    const char *tmp = getenv("TMPDIR");
    DIR *d = opendir(tmp);
    struct dirent *e;
    char path[PATH], away[2 * PATH], inner[3 * PATH];
    assert_non_null(d);
    while ((e = readdir(d))) {
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", tmp, e->d_name);
        if (strncmp(e->d_name, "ropekv-tmp-", 11) != 0 || strstr(e->d_name, ".theirs") || lstat(path, &st) != 0 ||
            (st.st_mode & 0777) == 0777)
            continue;
        snprintf(away, sizeof away, "%s.theirs", path);
        if (S_ISREG(st.st_mode)) {
            plant(away);
            assert_int_equal(rename(away, path), 0);
        } else if (S_ISDIR(st.st_mode)) {
            assert_int_equal(rename(path, away), 0);
            assert_int_equal(mkdir(path, 0777), 0);
            assert_int_equal(chmod(path, 0777), 0);
            DIR *in = opendir(away);
            struct dirent *f;
            assert_non_null(in);
            while ((f = readdir(in)))
                if (f->d_name[0] != '.') {
                    snprintf(inner, sizeof inner, "%s/%s", path, f->d_name);
                    plant(inner);
                }
            closedir(in);
        } else {
            continue;
        }
        swaps++;
    }
    closedir(d);
}

void *__wrap_dlopen(const char *file, int mode) {
    if (swap_in && file && !(mode & RTLD_NOLOAD)) swap_tmp_entries();
    return __real_dlopen(file, mode);
}

int __wrap_memfd_create(const char *name, unsigned flags) {
    if (no_memfd) {
        errno = ENOSYS;
        return -1;
    }
    return __real_memfd_create(name, flags);
}

int __wrap_rk_fd_path(int fd, const char *name, char *out, size_t cap) {
    return no_proc ? -1 : __real_rk_fd_path(fd, name, out, cap);
}

/* Gets v from a context (disk cache in cache_dir, or none) and checks it against the reference. */
static void get_check_in(const char *cache_dir, const ropekv_variant *v) {
    ropekv_ctx *c = rk_test_host_ctx(cache_dir);
    assert_non_null(c);
    get_and_check(c, v);
    ropekv_destroy(c);
}

static void test_tmp_swapped_before_load(void **state) {
    (void)state;
    char shared[PATH], cache[PATH], evil[PATH], evil_c[PATH], want[3 * PATH];
    sub(shared, "shared-tmp");
    sub(cache, "swap-cache");
    sub(evil, "theirs.so");
    sub(evil_c, "theirs.c");
    /* theirs: a shared object that marks the process when it is loaded */
    write_text(evil_c,
               "#include <stdlib.h>\n__attribute__((constructor)) static void rk_theirs(void) {\n"
               "    setenv(\"RK_TEST_SWAPPED_IN\", \"1\", 1);\n}\n",
               0600);
    const char *cc[] = {"cc", "-shared", "-fPIC", "-o", evil, evil_c, NULL};
    rk_buf out = {0};
    int st = -1;
    assert_int_equal(rk_run(cc, 60, 0, &out, &st), ROPEKV_OK);
    if (st != 0) fail_msg("cc: %s", out.p ? out.p : "");
    rk_buf_free(&out);
    unsetenv("RK_TEST_SWAPPED_IN");

    /* TMPDIR writable by everyone, not sticky; every dlopen comes after the other user's swaps */
    assert_int_equal(mkdir(shared, 0700), 0);
    assert_int_equal(chmod(shared, 0777), 0);
    setenv("TMPDIR", shared, 1);
    swap_in = evil;
    /* with memfd_create: compiled, then from the disk cache */
    get_check_in(NULL, &DS_BF16);
    get_check_in(cache, &DS_FP8);
    get_check_in(cache, &DS_FP8);
    assert_true(swaps > 0); /* the compile's directory, at least */
    assert_null(getenv("RK_TEST_SWAPPED_IN"));
    /* without: through a private directory's /proc/self/fd/ path */
    no_memfd = 1;
    swaps = 0;
    get_check_in(NULL, &DS_BF16);
    get_check_in(cache, &DS_FP8);
    assert_true(swaps >= 3); /* the compile's directory and two load directories */
    assert_null(getenv("RK_TEST_SWAPPED_IN"));

    /* and without /proc: such a TMPDIR (0777, or a group's 2775) is refused with one error naming it,
     * also for an entry of the disk cache or of a read-only layer, which is not taken for a bad one */
    no_proc = 1;
    static const mode_t refused[] = {0777, 02775};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(chmod(shared, refused[i]), 0);
        snprintf(want, sizeof want, "TMPDIR=%s: %s is writable by other users and not sticky", shared, shared);
        for (int from = 0; from < 3; from++) { /* compiled, the disk cache, a read-only layer */
            if (from == 2) setenv("ROPEKV_CACHE_RO", cache, 1);
            ropekv_ctx *c = rk_test_host_ctx(from == 1 ? cache : NULL);
            ropekv_kernel *k = NULL;
            begin_capture();
            assert_int_equal(ropekv_kernel_get(c, from ? &DS_FP8 : &DS_BF16, &k), ROPEKV_ERR_IO);
            const char *text = end_capture();
            print_message("%s\n", ropekv_last_error(c));
            assert_non_null(strstr(ropekv_last_error(c), want));
            assert_null(strstr(text, want)); /* said once, in the error */
            assert_int_equal(stats(c).cache_rejects, 0);
            assert_int_equal(stats(c).compiles, from == 0);
            ropekv_destroy(c);
            unsetenv("ROPEKV_CACHE_RO");
        }
    }
    assert_null(getenv("RK_TEST_SWAPPED_IN"));
    /* a sticky one, or one only this user may write to, is used by path */
    swap_in = NULL;
    static const mode_t used[] = {01777, 0700};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(chmod(shared, used[i]), 0);
        get_check_in(NULL, &DS_BF16);
        get_check_in(cache, &DS_FP8);
    }
    no_proc = no_memfd = 0;
    unsetenv("TMPDIR");
}

/* A shared object of its own (built with cc from a C file named <name>.c in root) exporting name. */
static void tiny_object(const char *name, rk_codeobj *out) {
    char c_file[PATH], so[PATH], text[256];
    snprintf(c_file, sizeof c_file, "%s/%s.c", root, name);
    snprintf(so, sizeof so, "%s/%s.so", root, name);
    snprintf(text, sizeof text, "void %s(void) {}\n", name);
    write_text(c_file, text, 0600);
    const char *cc[] = {"cc", "-shared", "-fPIC", "-o", so, c_file, NULL};
    rk_buf log = {0};
    int st = -1;
    assert_int_equal(rk_run(cc, 60, 0, &log, &st), ROPEKV_OK);
    if (st != 0) fail_msg("cc: %s", log.p ? log.p : "");
    rk_buf_free(&log);
    assert_int_equal(rk_read_file(so, out), ROPEKV_OK);
}

/* Objects loaded one after another each load as themselves, though the descriptor the first was
 * loaded through (closed after loading) is the second's too: dlopen would hand back the first for the
 * same /proc/self/fd/N name. From memory, and from private directories without memfd_create. */
static void test_loads_in_turn(void **state) {
    (void)state;
    rk_codeobj one, two;
    tiny_object("rk_one", &one);
    tiny_object("rk_two", &two);
    for (no_memfd = 0; no_memfd < 2; no_memfd++) {
        rk_host_kernel k1, k2;
        char log[1024];
        assert_int_equal(rk_host_load(one.data, one.len, "rk_one", &k1, log, sizeof log), ROPEKV_OK);
        if (rk_host_load(two.data, two.len, "rk_two", &k2, log, sizeof log) != ROPEKV_OK) fail_msg("%s", log);
        assert_ptr_not_equal(k1.so, k2.so);
        rk_host_unload(&k2);
        rk_host_unload(&k1);
    }
    no_memfd = 0;
    rk_code_free(&one);
    rk_code_free(&two);
}

/* ---- allocation failures ----------------------------------------------------------------------------- */
/* Runs op with the n-th allocation failing, for n = 1, 2, ... until a run makes fewer than n
 * allocations (it never met the failure). op returns 0 (succeeded) or 1 (failed cleanly) and frees what
 * it got; after every run nothing allocated during it may remain. Returns the number of sites. */
typedef int (*op_fn)(void *arg);

static long every_site_fails(const char *what, op_fn op, void *arg) {
    long failed = 0, recovered = 0;
    for (long n = 1;; n++) {
        arm(n);
        int rc = op(arg);
        long seen = disarm();
        if (live_n != 0) fail_msg("%s: %ld blocks leaked with allocation %ld failing", what, live_n, n);
        if (seen < n) {
            if (rc != 0) fail_msg("%s fails without an injected failure", what);
            print_message("%s: %ld allocation sites; %ld failed cleanly, %ld recovered\n", what, n - 1, failed,
                          recovered);
            return n - 1;
        }
        rc ? failed++ : recovered++;
        if (n > 200000) fail_msg("%s: runaway", what);
    }
}

/* rk_spec_load of a real spec: ROPEKV_OK with the same result, or ROPEKV_ERR_NOMEM. */
typedef struct spec_op {
    const char *text;
    size_t len;
    rk_spec want;
} spec_op;

static int op_spec_load(void *p) {
    spec_op *o = p;
    rk_spec s;
    rk_err err = {0};
    memset(&s, 0, sizeof s);
    int rc = rk_spec_load("specs/deepseek_v3.lua", o->text, o->len, &cat.archs, &s, &err);
    if (rc == ROPEKV_OK) {
        if (memcmp(&s, &o->want, sizeof s) != 0) fail_msg("rk_spec_load recovered with a different result");
        return 0;
    }
    if (rc != ROPEKV_ERR_NOMEM || err.code != ROPEKV_ERR_NOMEM || !err.msg[0])
        fail_msg("rk_spec_load under a failed allocation: %d %s", rc, err.msg);
    return 1;
}

static int op_archs_load(void *p) {
    spec_op *o = p;
    rk_arch_table *t = __real_malloc(sizeof *t);
    rk_err err = {0};
    int rc = rk_archs_load("specs/archs.lua", o->text, o->len, t, &err);
    int same = rc == ROPEKV_OK && t->n == cat.archs.n && !strcmp(t->a[t->n - 1].name, cat.archs.a[t->n - 1].name);
    __real_free(t);
    if (rc == ROPEKV_OK) {
        if (!same) fail_msg("rk_archs_load recovered with a different result");
        return 0;
    }
    if (rc != ROPEKV_ERR_NOMEM || err.code != ROPEKV_ERR_NOMEM || !err.msg[0])
        fail_msg("rk_archs_load under a failed allocation: %d %s", rc, err.msg);
    return 1;
}

static void test_oom_spec_load(void **state) {
    (void)state;
    spec_op *o = calloc(1, sizeof *o);
    rk_err err = {0};
    o->text = rk_embedded("deepseek_v3.lua", &o->len);
    assert_non_null(o->text);
    memset(&o->want, 0, sizeof o->want);
    assert_int_equal(rk_spec_load("specs/deepseek_v3.lua", o->text, o->len, &cat.archs, &o->want, &err), ROPEKV_OK);
    assert_true(every_site_fails("rk_spec_load", op_spec_load, o) > 100);
    o->text = rk_embedded("archs.lua", &o->len);
    assert_true(every_site_fails("rk_archs_load", op_archs_load, o) > 100);
    free(o);
}

/* rk_emit of a variant: the same source, or ROPEKV_ERR_NOMEM. */
typedef struct emit_op {
    const rk_desc *v;
    rk_buf want;
} emit_op;

static int op_emit(void *p) {
    emit_op *o = p;
    rk_buf out = {0};
    rk_err err = {0};
    int rc = rk_emit(o->v, &out, &err);
    int same = rc == ROPEKV_OK && out.len == o->want.len && memcmp(out.p, o->want.p, out.len) == 0;
    rk_buf_free(&out);
    if (rc == ROPEKV_OK) {
        if (!same) fail_msg("rk_emit recovered with a different source");
        return 0;
    }
    if (rc != ROPEKV_ERR_NOMEM || err.code != ROPEKV_ERR_NOMEM)
        fail_msg("rk_emit under a failed allocation: %d %s", rc, err.msg);
    return 1;
}

static void test_oom_emit(void **state) {
    (void)state;
    emit_op o = {rk_test_ref_variant(&cat, "deepseek_v3", &DS_FP8), {0}};
    rk_err err = {0};
    assert_int_equal(rk_emit(o.v, &o.want, &err), ROPEKV_OK);
    assert_true(every_site_fails("rk_emit", op_emit, &o) > 3);
    rk_buf_free(&o.want);
}

/* ropekv_create + ropekv_kernel_get + ropekv_destroy, memory-only. The compiler is a script that
 * copies a prebuilt shared object of the variant (a real compile per run would take minutes). */
static int op_create_get(void *p) {
    (void)p;
    ropekv_options o = {.backend = ROPEKV_BACKEND_HOST, .disk_cache = -1};
    ropekv_ctx *c = (ropekv_ctx *)1;
    ropekv_status s = ropekv_create(&c, &o);
    if (s != ROPEKV_OK) {
        if (c != NULL) fail_msg("ropekv_create failed (%s) but returned a context", ropekv_status_name(s));
        if (s != ROPEKV_ERR_NOMEM) fail_msg("ropekv_create under a failed allocation: %s", ropekv_status_name(s));
        return 1;
    }
    ropekv_kernel *k = NULL;
    s = ropekv_kernel_get(c, &DS_FP8, &k);
    int failed = s != ROPEKV_OK;
    if (failed) {
        long seen = calls;
        armed = 0; /* the context must still work: the same get, without failures */
        if (!ropekv_last_error(c)[0]) fail_msg("kernel_get failed (%s) without a message", ropekv_status_name(s));
        if (s != ROPEKV_ERR_NOMEM)
            fail_msg("kernel_get under a failed allocation: %s: %s", ropekv_status_name(s), ropekv_last_error(c));
        s = ropekv_kernel_get(c, &DS_FP8, &k);
        if (s != ROPEKV_OK) fail_msg("kernel_get after a failed one: %s", ropekv_last_error(c));
        armed = 1;
        calls = seen;
    }
    char why[4096] = "";
    armed = 0;
    int bad = rk_test_check_kernel(k, rk_test_ref_variant(&cat, "deepseek_v3", &DS_FP8), why, sizeof why);
    armed = 1;
    if (bad) fail_msg("the kernel is wrong: %s", why);
    ropekv_kernel_release(k);
    ropekv_destroy(c);
    return failed;
}

static void test_oom_create_get(void **state) {
    (void)state;
    char dir[PATH], so[PATH], cxx[PATH], entry[PATH], script[3 * PATH];
    sub(dir, "oom-prebuilt");
    sub(so, "prebuilt.so");
    sub(cxx, "copy-prebuilt.sh");
    ropekv_ctx *c = rk_test_host_ctx(dir);
    get_and_check(c, &DS_FP8);
    ropekv_destroy(c);
    only_entry(dir, entry);
    rk_codeobj e;
    assert_int_equal(rk_read_file(entry, &e), ROPEKV_OK);
    assert_int_equal(rk_test_write_file(so, e.data + 88, e.len - 88, 0600), ROPEKV_OK);
    rk_code_free(&e);
    snprintf(script, sizeof script,
             "#!/bin/sh\n[ \"$1\" = --version ] && { echo copy-prebuilt 1.0; exit 0; }\n"
             "while [ $# -gt 1 ]; do [ \"$1\" = -o ] && exec cp '%s' \"$2\"; shift; done\nexit 1\n",
             so);
    write_text(cxx, script, 0700);
    setenv("CXX", cxx, 1);
    assert_true(every_site_fails("ropekv_create + ropekv_kernel_get + ropekv_destroy", op_create_get, NULL) > 100);
    unsetenv("CXX");
}

int main(int argc, char **argv) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_disk_full),
        cmocka_unit_test(test_cache_dir_replaced),
        cmocka_unit_test(test_other_version_entries),
        cmocka_unit_test(test_spec_file_changes),
        cmocka_unit_test(test_spec_file_name_stays_a_comment),
        cmocka_unit_test(test_spec_cpu_time_cap),
        cmocka_unit_test(test_compiler_fails_or_hangs),
        cmocka_unit_test(test_tmp_swapped_before_load),
        cmocka_unit_test(test_loads_in_turn),
        cmocka_unit_test(test_oom_spec_load),
        cmocka_unit_test(test_oom_emit),
        cmocka_unit_test(test_oom_create_get),
    };
    if (argc > 1) cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests_name("faults", tests, setup, teardown);
}
