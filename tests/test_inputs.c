/* Bad inputs from the process around the library, on the host backend:
 *   - spec text: the 1 MiB cap on every entry point (exactly 1 MiB loads, one byte more is refused);
 *   - ROPEKV_* variables: every spelling a flag, number, choice or version accepts, and an invalid
 *     value warned about once and replaced by the default, or (ROPEKV_BACKEND) an error;
 *   - the backend choice: each backend passed over logged with its reason; an unusable library named by
 *     ROPEKV_LIBHIP or ROPEKV_LIBCUDA an error, not a reason to choose another backend;
 *   - $CXX: a command with arguments; a compiler that leaves a background job holding its output; one that
 *     fails silently or is killed by a signal;
 *   - control characters in caller strings (names, paths, targets, variables): escaped in every message;
 *   - temporary directories: none left after a compile, failed or not; those of killed processes swept
 *     when a context opens (and only those); an unusable $TMPDIR named as such; a noexec one used
 *     (kernels load from memory).
 * An optional argument is a cmocka test filter (e.g. "test_spec*"). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "env.h"
#include "host_compile.h"
#include "proc.h"
#include "rk.h"
#include "ropekv.h"
#include "testutil.h"

#define PATH 4400

static char root[] = "/tmp/ropekv-test-inputs-XXXXXX";

static int setup(void **state) {
    (void)state;
    unsetenv("CXX");
    return rk_test_setup(root, NULL);
}

static int teardown(void **state) {
    (void)state;
    rk_test_remove_tree(root);
    return 0;
}

static void sub(char *out, const char *name) { snprintf(out, PATH, "%s/%s", root, name); }

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

/* How many times s occurs in text. */
static int occurrences(const char *text, const char *s) {
    int n = 0;
    for (const char *p = strstr(text, s); p; p = strstr(p + 1, s)) n++;
    return n;
}

/* ---- spec text: 1 MiB ----------------------------------------------------------------------------- */
/* A valid spec padded with a comment to n bytes (malloc'd). */
static char *spec_of_size(size_t n) {
    static const char head[] = "return { name = 'big_model', kv_lora_rank = 128, qk_rope_head_dim = 32, "
                               "rope = 'neox', cos_sin = 'f32_split', targets = { 'host' } }\n--";
    char *t = malloc(n);
    assert_non_null(t);
    assert_true(n > sizeof head);
    memcpy(t, head, sizeof head - 1);
    memset(t + sizeof head - 1, 'x', n - (sizeof head - 1));
    t[n - 1] = '\n';
    return t;
}

static void test_spec_size_cap(void **state) {
    (void)state;
    const size_t cap = (size_t)1 << 20;
    assert_int_equal(RK_SPEC_TEXT_MAX, cap);
    ropekv_ctx *c = rk_test_host_ctx(NULL);
    assert_non_null(c);
    char path[PATH];
    sub(path, "big.lua");
    for (size_t n = cap; n <= cap + 1; n++) {
        char *text = spec_of_size(n);
        ropekv_status want = n == cap ? ROPEKV_OK : ROPEKV_ERR_SPEC_LIMIT;
        /* from memory, from a file, and the loader under ropekv-gen --spec and the built-in specs */
        assert_int_equal(ropekv_load_spec_text(c, "big.lua", text, n), want);
        if (want != ROPEKV_OK) assert_non_null(strstr(ropekv_last_error(c), "larger than the 1048576 bytes"));
        assert_int_equal(rk_test_write_file(path, text, n, 0600), ROPEKV_OK);
        assert_int_equal(ropekv_load_spec(c, path), want);
        if (want != ROPEKV_OK) assert_non_null(strstr(ropekv_last_error(c), path));
        rk_err err = {0};
        rk_arch_table archs;
        size_t alen;
        const char *atext = rk_embedded("archs.lua", &alen);
        assert_int_equal(rk_archs_load("archs.lua", atext, alen, &archs, &err), ROPEKV_OK);
        rk_spec s;
        assert_int_equal(rk_spec_load("big.lua", text, n, &archs, &s, &err), want);
        free(text);
    }
    /* a file far over the cap is refused without reading it all */
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fseek(f, 64L << 20, SEEK_SET), 0);
    fputc('\n', f);
    fclose(f);
    assert_int_equal(ropekv_load_spec(c, path), ROPEKV_ERR_SPEC_LIMIT);
    ropekv_destroy(c);
}

/* ---- ROPEKV_* variables ------------------------------------------------------------------------------ */
static void test_env_values(void **state) {
    (void)state;
    static const struct {
        const char *v;
        int want; /* -1: invalid, the default (0 for ROPEKV_LOG) with a warning */
    } flags[] = {{"1", 1},  {"true", 1}, {"YES", 1}, {"on", 1},     {"0", 0},  {"false", 0},
                 {"No", 0}, {"off", 0},  {"2", -1},  {"maybe", -1}, {"1 ", -1}};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        setenv("ROPEKV_LOG", flags[i].v, 1);
        begin_capture();
        int got = rk_env_flag(RK_ENV_LOG);
        rk_env_flag(RK_ENV_LOG); /* warned about once */
        const char *err = end_capture();
        assert_int_equal(got, flags[i].want < 0 ? 0 : flags[i].want);
        assert_int_equal(occurrences(err, "ROPEKV_LOG="), flags[i].want < 0);
    }
    unsetenv("ROPEKV_LOG");
    setenv("ROPEKV_PDL", "bogus", 1); /* default on */
    assert_int_equal(rk_env_flag(RK_ENV_PDL), 1);
    unsetenv("ROPEKV_PDL");
    assert_int_equal(rk_env_flag(RK_ENV_PDL), 1);

    static const struct {
        const char *v;
        long want; /* -1: invalid */
    } seconds[] = {
        {"0", 0},    {"5", 5},  {"31536000", 31536000},      {"31536001", -1}, {"abc", -1}, {"-1", -1}, {"1e99", -1},
        {"10s", -1}, {"", 120}, {"99999999999999999999", -1}};
    for (size_t i = 0; i < sizeof seconds / sizeof seconds[0]; i++) {
        setenv("ROPEKV_COMPILE_TIMEOUT", seconds[i].v, 1);
        begin_capture();
        long got = rk_host_compile_timeout();
        const char *err = end_capture();
        assert_int_equal(got, seconds[i].want < 0 ? RK_COMPILE_TIMEOUT_DEFAULT : seconds[i].want);
        if (seconds[i].want < 0) assert_non_null(strstr(err, "ROPEKV_COMPILE_TIMEOUT="));
        if (seconds[i].want < 0) assert_non_null(strstr(err, "using 120"));
    }
    unsetenv("ROPEKV_COMPILE_TIMEOUT");

    int major = -1, minor = -1;
    setenv("ROPEKV_HIPRTC_VERSION", "6.2", 1);
    assert_int_equal(rk_env_version(RK_ENV_HIPRTC_VERSION, &major, &minor), 1);
    assert_true(major == 6 && minor == 2);
    static const char *const bad_versions[] = {"6", "6.2abc", "-6.2", "six"};
    for (size_t i = 0; i < 4; i++) {
        setenv("ROPEKV_HIPRTC_VERSION", bad_versions[i], 1);
        begin_capture();
        assert_int_equal(rk_env_version(RK_ENV_HIPRTC_VERSION, &major, &minor), 0);
        assert_non_null(strstr(end_capture(), "ROPEKV_HIPRTC_VERSION="));
    }
    unsetenv("ROPEKV_HIPRTC_VERSION");
}

static void test_env_at_create(void **state) {
    (void)state;
    /* an invalid flag or number: a warning when the context is created, and the default */
    setenv("ROPEKV_DISABLE_CACHE", "please", 1);
    setenv("ROPEKV_COMPILE_TIMEOUT", "forever", 1);
    begin_capture();
    ropekv_ctx *c = rk_test_host_ctx(NULL);
    const char *err = end_capture();
    assert_non_null(c);
    ropekv_destroy(c);
    assert_non_null(strstr(err, "ROPEKV_DISABLE_CACHE=please"));
    assert_non_null(strstr(err, "ROPEKV_COMPILE_TIMEOUT=forever"));
    unsetenv("ROPEKV_DISABLE_CACHE");
    unsetenv("ROPEKV_COMPILE_TIMEOUT");

    /* a ROPEKV_* name nobody reads (a misspelling): one warning naming it, however many contexts open; the
     * names read outside the library are not warned about */
    setenv("ROPEKV_DISABLE_CAHCE", "1", 1);
    setenv("ROPEKV_LIB", "/nowhere/libropekv.so", 1);
    begin_capture();
    for (int i = 0; i < 2; i++) {
        c = rk_test_host_ctx(NULL);
        assert_non_null(c);
        ropekv_destroy(c);
    }
    err = end_capture();
    const char *w = strstr(err, "ROPEKV_DISABLE_CAHCE is not a variable ropekv reads");
    assert_non_null(w);
    assert_null(strstr(w + 1, "ROPEKV_DISABLE_CAHCE is not"));
    assert_null(strstr(err, "ROPEKV_LIB"));
    unsetenv("ROPEKV_DISABLE_CAHCE");
    unsetenv("ROPEKV_LIB");
    /* however many there are */
    char name[64];
    for (int i = 0; i < 20; i++) {
        snprintf(name, sizeof name, "ROPEKV_MISSPELT_%02d", i);
        setenv(name, "1", 1);
    }
    begin_capture();
    for (int i = 0; i < 3; i++) {
        c = rk_test_host_ctx(NULL);
        assert_non_null(c);
        ropekv_destroy(c);
    }
    err = end_capture();
    for (int i = 0; i < 20; i++) {
        snprintf(name, sizeof name, "ROPEKV_MISSPELT_%02d is not a variable", i);
        if (occurrences(err, name) != 1) fail_msg("'%s' %d times in '%s'", name, occurrences(err, name), err);
        snprintf(name, sizeof name, "ROPEKV_MISSPELT_%02d", i);
        unsetenv(name);
    }

    /* an invalid backend is an error (another backend would surprise), unless the options choose one */
    setenv("ROPEKV_BACKEND", "gpu", 1);
    begin_capture();
    assert_int_equal(ropekv_create(&c, NULL), ROPEKV_ERR_ARG);
    assert_null(c);
    assert_non_null(strstr(end_capture(), "ROPEKV_BACKEND=gpu: expected one of: hip cuda host"));
    c = rk_test_host_ctx(NULL);
    assert_non_null(c);
    ropekv_destroy(c);
    setenv("ROPEKV_BACKEND", "host", 1);
}

/* ---- backend choice ------------------------------------------------------------------------------- */
/* ropekv_create(o) with the variable var set to value fails with ROPEKV_ERR_BACKEND naming them on stderr (without
 * the log), unless an AMD device is chosen before cuda is tried; o choosing the host backend is not affected. */
static void expect_unusable(ropekv_options *o, const char *var, const char *value) {
    ropekv_ctx *c = NULL;
    char says[256];
    snprintf(says, sizeof says, "%s=%s", var, value);
    setenv(var, value, 1);
    begin_capture();
    ropekv_status s = ropekv_create(&c, o);
    const char *err = end_capture();
    if (s == ROPEKV_OK && strcmp(ropekv_backend_name(c), "hip") == 0 && strcmp(var, "ROPEKV_LIBCUDA") == 0) {
        ropekv_destroy(c);
    } else {
        assert_int_equal(s, ROPEKV_ERR_BACKEND);
        assert_null(c);
        if (!strstr(err, says) || !strstr(err, "name a usable library there, or unset it"))
            fail_msg("'%s' not in '%s'", says, err);
    }
    o->backend = ROPEKV_BACKEND_HOST;
    assert_int_equal(ropekv_create(&c, o), ROPEKV_OK);
    ropekv_destroy(c);
    o->backend = ROPEKV_BACKEND_AUTO;
    unsetenv(var);
}

/* The automatic choice logs each backend it passes over with the reason (ROPEKV_LOG=1). A library named by
 * ROPEKV_LIBHIP or ROPEKV_LIBCUDA that cannot be used (not loadable, lacking an entry point, or another than the one
 * the process loaded already) fails ropekv_create instead of another backend being chosen; once the variable is
 * unset the choice is the one before. */
static void test_backend_choice(void **state) {
    (void)state;
    ropekv_options o = {.disk_cache = -1};
    ropekv_ctx *c = NULL;
    unsetenv("ROPEKV_BACKEND");
    expect_unusable(&o, "ROPEKV_LIBHIP", "/nonexistent/libamdhip64.so");
    expect_unusable(&o, "ROPEKV_LIBHIP", "libc.so.6"); /* loads, lacks hipInit */
    expect_unusable(&o, "ROPEKV_LIBCUDA", "/nonexistent/libcuda.so.1");

    setenv("ROPEKV_LOG", "1", 1);
    begin_capture();
    assert_int_equal(ropekv_create(&c, &o), ROPEKV_OK);
    const char *err = end_capture();
    char chosen[16];
    snprintf(chosen, sizeof chosen, "%s", ropekv_backend_name(c));
    ropekv_destroy(c);
    if (strcmp(chosen, "host") == 0) { /* no GPU here: both device backends were passed over, and said why */
        assert_non_null(strstr(err, "ropekv: backend skipped: hip: "));
        assert_non_null(strstr(err, "ropekv: backend skipped: cuda: "));
    }
    unsetenv("ROPEKV_LOG");
    /* after a libamdhip64 found by default, perhaps loaded now: one named is refused either way */
    expect_unusable(&o, "ROPEKV_LIBHIP", "libc.so.6");
    assert_int_equal(ropekv_create(&c, &o), ROPEKV_OK);
    assert_string_equal(ropekv_backend_name(c), chosen);
    ropekv_destroy(c);
    setenv("ROPEKV_BACKEND", "host", 1);
}

/* ---- $CXX ------------------------------------------------------------------------------------------- */
static void test_cxx(void **state) {
    (void)state;
    const ropekv_variant v = {.spec = "deepseek_v3", .kv = ROPEKV_KV_BF16, .q = ROPEKV_Q_ABSORBED};
    char cxx[PATH], mark[PATH], command[2 * PATH];
    sub(cxx, "cxx-with-args.sh");
    sub(mark, "cxx-with-args.ran");
    ropekv_kernel *k = NULL;

    /* a command with arguments: split at blanks, no shell */
    snprintf(command, sizeof command,
             "#!/bin/sh\n[ \"$1\" = --marker ] || exit 9\necho \"$2\" > '%s'\nshift 2\nexec c++ \"$@\"\n", mark);
    write_text(cxx, command, 0700);
    snprintf(command, sizeof command, "  %s --marker   'quoted  ", cxx);
    setenv("CXX", command, 1);
    ropekv_ctx *c = rk_test_host_ctx(NULL);
    assert_int_equal(ropekv_kernel_get(c, &v, &k), ROPEKV_OK);
    ropekv_kernel_release(k);
    ropekv_destroy(c);
    rk_codeobj ran;
    assert_int_equal(rk_read_file(mark, &ran), ROPEKV_OK);
    assert_string_equal((const char *)ran.data, "'quoted\n"); /* quotes are not interpreted */
    rk_code_free(&ran);

    /* a compiler that leaves a background job holding its output: the compile ends when the compiler exits,
     * with no limit and with one (not reported as timed out) */
    write_text(cxx, "#!/bin/sh\nsleep 30 &\nexec c++ \"$@\"\n", 0700);
    setenv("CXX", cxx, 1);
    static const char *const limits[] = {"0", "20"};
    for (int i = 0; i < 2; i++) {
        setenv("ROPEKV_COMPILE_TIMEOUT", limits[i], 1);
        const double t0 = rk_now_ms();
        c = rk_test_host_ctx(NULL);
        assert_int_equal(ropekv_kernel_get(c, &v, &k), ROPEKV_OK);
        assert_true(rk_now_ms() - t0 < 15e3);
        ropekv_kernel_release(k);
        ropekv_destroy(c);
    }
    unsetenv("ROPEKV_COMPILE_TIMEOUT");

    /* fails without a word: the exit status names it */
    setenv("CXX", "false", 1);
    c = rk_test_host_ctx(NULL);
    assert_int_equal(ropekv_kernel_get(c, &v, &k), ROPEKV_ERR_COMPILE);
    assert_non_null(strstr(ropekv_last_error(c), "false failed (exit status 1), printing nothing"));
    ropekv_destroy(c);

    /* killed by a signal, after a word */
    write_text(cxx, "#!/bin/sh\n[ \"$1\" = --version ] && exit 1\necho 'about to crash' >&2\nkill -SEGV $$\n", 0700);
    setenv("CXX", cxx, 1);
    c = rk_test_host_ctx(NULL);
    assert_int_equal(ropekv_kernel_get(c, &v, &k), ROPEKV_ERR_COMPILE);
    assert_non_null(strstr(ropekv_last_error(c), "killed by signal 11"));
    assert_non_null(strstr(ropekv_last_error(c), "about to crash"));
    ropekv_destroy(c);

    /* cannot be started */
    setenv("CXX", "/nonexistent/c++ -O2", 1);
    c = rk_test_host_ctx(NULL);
    assert_int_equal(ropekv_kernel_get(c, &v, &k), ROPEKV_ERR_COMPILE);
    assert_non_null(strstr(ropekv_last_error(c), "/nonexistent/c++: cannot run"));
    ropekv_destroy(c);
    unsetenv("CXX");
}

/* ---- temporary directories --------------------------------------------------------------------- */
/* The number of entries in dir. */
static int entries(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    assert_non_null(d);
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

/* path's modification time, age_s seconds ago (the link itself for a symbolic link). */
static void age(const char *path, long age_s) {
    struct timespec t[2];
    clock_gettime(CLOCK_REALTIME, &t[0]);
    t[0].tv_sec -= age_s;
    t[1] = t[0];
    assert_int_equal(utimensat(AT_FDCWD, path, t, AT_SYMLINK_NOFOLLOW), 0);
}

static void test_tmp_sweep(void **state) {
    (void)state;
    char tmp[PATH], path[2 * PATH], inner[3 * PATH], target[PATH];
    sub(tmp, "tmp");
    assert_int_equal(mkdir(tmp, 0700), 0);
    setenv("TMPDIR", tmp, 1);
    pid_t dead = fork(); /* a pid that is no running process (once reaped) */
    if (dead == 0) _exit(0);
    waitpid(dead, NULL, 0);
    const long uid = (long)getuid(), day = 86400;
    /* a compile killed mid-way: its directory with a file and a subdirectory, a day old */
    snprintf(path, sizeof path, "%s/ropekv-tmp-%ld-%ld-host-aaaaaa", tmp, uid, (long)dead);
    assert_int_equal(mkdir(path, 0700), 0);
    snprintf(inner, sizeof inner, "%s/kernel.cpp", path);
    write_text(inner, "x", 0600);
    snprintf(inner, sizeof inner, "%s/sub", path);
    assert_int_equal(mkdir(inner, 0700), 0);
    age(path, day);
    /* a loaded object killed before its unlink, a day old */
    snprintf(path, sizeof path, "%s/ropekv-tmp-%ld-%ld-load-bbbbbb.so", tmp, uid, (long)dead);
    write_text(path, "x", 0600);
    age(path, day);
    /* left alone: a fresh one of a dead process (it may be another pid namespace's, still compiling),
     * an old one of a live process, a symbolic link, another user's name, a name not ours */
    snprintf(path, sizeof path, "%s/ropekv-tmp-%ld-%ld-host-cccccc", tmp, uid, (long)dead);
    assert_int_equal(mkdir(path, 0700), 0);
    snprintf(path, sizeof path, "%s/ropekv-tmp-%ld-%ld-host-dddddd", tmp, uid, (long)getppid());
    assert_int_equal(mkdir(path, 0700), 0);
    age(path, day);
    sub(target, "precious");
    assert_int_equal(mkdir(target, 0700), 0);
    snprintf(inner, sizeof inner, "%s/file", target);
    write_text(inner, "keep me", 0600);
    snprintf(path, sizeof path, "%s/ropekv-tmp-%ld-%ld-host-eeeeee", tmp, uid, (long)dead);
    assert_int_equal(symlink(target, path), 0);
    age(path, day);
    snprintf(path, sizeof path, "%s/ropekv-tmp-%ld-%ld-host-ffffff", tmp, uid + 1, (long)dead);
    assert_int_equal(mkdir(path, 0700), 0);
    age(path, day);
    snprintf(path, sizeof path, "%s/ropekv-%ld-%ld-host-gggggg", tmp, uid, (long)dead);
    assert_int_equal(mkdir(path, 0700), 0);
    age(path, day);
    assert_int_equal(entries(tmp), 7);

    ropekv_ctx *c = rk_test_host_ctx(NULL); /* opening a host context sweeps */
    assert_non_null(c);
    assert_int_equal(entries(tmp), 5);
    snprintf(path, sizeof path, "%s/ropekv-tmp-%ld-%ld-host-aaaaaa", tmp, uid, (long)dead);
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(access(inner, F_OK), 0); /* the link's target is untouched */
    assert_int_equal(rk_tmp_sweep(60), 0);    /* a second sweep finds nothing; racing ones are harmless */

    /* compiles leave nothing behind, whether they succeed or fail */
    const ropekv_variant v = {.spec = "deepseek_v3", .kv = ROPEKV_KV_BF16, .q = ROPEKV_Q_ABSORBED};
    ropekv_kernel *k = NULL;
    assert_int_equal(ropekv_kernel_get(c, &v, &k), ROPEKV_OK);
    ropekv_kernel_release(k);
    ropekv_destroy(c);
    setenv("CXX", "false", 1);
    c = rk_test_host_ctx(NULL);
    assert_int_equal(ropekv_kernel_get(c, &v, &k), ROPEKV_ERR_COMPILE);
    ropekv_destroy(c);
    unsetenv("CXX");
    assert_int_equal(entries(tmp), 5);
    unsetenv("TMPDIR");
}

/* dir: a writable directory on a noexec mount. Code cannot be loaded from there, plain files can be
 * written; on a tmpfs (a file system that surely takes files), the host backend, which loads its
 * kernels from memory, compiles and loads there. */
static void check_noexec(const char *dir, int tmpfs) {
    char why[512];
    setenv("TMPDIR", dir, 1);
    assert_int_equal(rk_tmp_check(1, why, sizeof why), -1);
    assert_non_null(strstr(why, "noexec"));
    assert_int_equal(rk_tmp_check(0, why, sizeof why), 0);
    if (!tmpfs) return;
    const ropekv_variant v = {.spec = "deepseek_v3", .kv = ROPEKV_KV_BF16, .q = ROPEKV_Q_ABSORBED};
    ropekv_ctx *c = rk_test_host_ctx(NULL);
    ropekv_kernel *k = NULL;
    const ropekv_status s = ropekv_kernel_get(c, &v, &k);
    if (s != ROPEKV_OK) fail_msg("TMPDIR=%s: %s", dir, ropekv_last_error(c));
    ropekv_kernel_release(k);
    ropekv_destroy(c);
}

static void test_tmpdir_unusable(void **state) {
    (void)state;
    const ropekv_variant v = {.spec = "deepseek_v3", .kv = ROPEKV_KV_BF16, .q = ROPEKV_Q_ABSORBED};
    char missing[PATH], file[PATH], readonly[PATH], want[2 * PATH];
    sub(missing, "no-such-dir");
    sub(file, "a-file");
    sub(readonly, "read-only");
    write_text(file, "x", 0600);
    assert_int_equal(mkdir(readonly, 0500), 0);
    const struct {
        const char *dir, *why;
    } cases[] = {{missing, "no such directory"}, {file, "not a directory"}, {readonly, "not writable"}};
    for (size_t i = 0; i < 3; i++) {
        if (cases[i].dir == readonly && geteuid() == 0) continue; /* root writes anywhere */
        setenv("TMPDIR", cases[i].dir, 1);
        ropekv_ctx *c = rk_test_host_ctx(NULL);
        assert_non_null(c);
        ropekv_kernel *k = NULL;
        assert_int_equal(ropekv_kernel_get(c, &v, &k), ROPEKV_ERR_IO);
        snprintf(want, sizeof want, "TMPDIR=%s: %s", cases[i].dir, cases[i].why);
        print_message("%s\n", ropekv_last_error(c));
        assert_non_null(strstr(ropekv_last_error(c), want));
        assert_null(strstr(ropekv_last_error(c), "cannot")); /* one message, not two run together */
        ropekv_destroy(c);
    }
    unsetenv("TMPDIR");
    /* noexec: the detection, on a writable noexec mount the system has, else on a tmpfs mounted noexec here */
    FILE *f = fopen("/proc/mounts", "r");
    char dev[256], dir[1024], type[64], options[1024];
    int checked = 0;
    while (f && !checked && fscanf(f, "%255s %1023s %63s %1023s %*d %*d", dev, dir, type, options) == 4) {
        if (!strstr(options, "noexec") || access(dir, W_OK | X_OK) != 0) continue;
        check_noexec(dir, strcmp(type, "tmpfs") == 0);
        checked = 1;
    }
    if (f) fclose(f);
    char mnt[] = "/tmp/ropekv-test-noexec-XXXXXX";
    if (!checked && mkdtemp(mnt)) { /* none: make one where this process may mount (root) */
        if (mount("tmpfs", mnt, "tmpfs", MS_NOEXEC, "size=256m") == 0) { /* room for the compiler's files */
            check_noexec(mnt, 1);
            checked = 1;
            umount(mnt);
        }
        rmdir(mnt);
    }
    if (!checked)
        print_message("no writable noexec mount here, and none can be made: the noexec check is not exercised\n");
    unsetenv("TMPDIR");
}

/* ---- control characters in what the caller gives ----------------------------------------------------- */
/* Every caller string a message repeats (a spec name or path, a target, a directory, $CXX, $TMPDIR, a variable's name
 * or value) shows its control characters escaped (\x1b, \n): none reaches stderr or ropekv_last_error raw. A target
 * holding them, or too long for a target id, is refused when the context is created. */
static void expect_escaped(const char *text, const char *want) {
    if (!strstr(text, want) || strchr(text, '\x1b')) fail_msg("want '%s' (and no raw ESC) in '%s'", want, text);
}

static void test_control_characters(void **state) {
    (void)state;
    ropekv_ctx *c = NULL;
    ropekv_kernel *k = NULL;
    const char *err;

    setenv("ROPEKV_TARGET", "host\x1b[31m", 1);
    begin_capture();
    assert_int_equal(ropekv_create(&c, NULL), ROPEKV_ERR_ARG);
    expect_escaped(end_capture(), "ROPEKV_TARGET 'host\\x1b[31m': holds control characters");
    unsetenv("ROPEKV_TARGET");
    char long_target[200];
    memset(long_target, 'x', sizeof long_target - 1);
    long_target[sizeof long_target - 1] = '\0';
    ropekv_options o = {.backend = ROPEKV_BACKEND_HOST, .target = long_target, .disk_cache = -1};
    begin_capture();
    assert_int_equal(ropekv_create(&c, &o), ROPEKV_ERR_ARG);
    assert_non_null(strstr(end_capture(), "options.target 'xxx"));

    setenv("ROPEKV_LOG", "yes\x1b", 1);
    setenv("ROPEKV_NO\x1bSUCH", "1", 1);
    begin_capture();
    c = rk_test_host_ctx(NULL);
    err = end_capture();
    expect_escaped(err, "ROPEKV_LOG=yes\\x1b: expected");
    expect_escaped(err, "ROPEKV_NO\\x1bSUCH is not a variable");
    unsetenv("ROPEKV_LOG");
    unsetenv("ROPEKV_NO\x1bSUCH");
    const ropekv_variant bad_spec = {.spec = "deepseek\x1b[2J"};
    assert_int_equal(ropekv_kernel_get(c, &bad_spec, &k), ROPEKV_ERR_NO_SPEC);
    expect_escaped(ropekv_last_error(c), "no spec named 'deepseek\\x1b[2J'");
    assert_int_equal(ropekv_load_spec(c, "/nonexistent/\x1b]0;x\a.lua"), ROPEKV_ERR_IO);
    expect_escaped(ropekv_last_error(c), "cannot open spec /nonexistent/\\x1b]0;x\\x07.lua");
    assert_int_equal(ropekv_load_spec_text(c, "t\x1b.lua", "error('\\27')", 12), ROPEKV_ERR_SPEC_RUNTIME);
    expect_escaped(ropekv_last_error(c), "t\\x1b.lua");
    ropekv_destroy(c);

    setenv("ROPEKV_BACKEND", "host\x1b", 1);
    begin_capture();
    assert_int_equal(ropekv_create(&c, NULL), ROPEKV_ERR_ARG);
    expect_escaped(end_capture(), "ROPEKV_BACKEND=host\\x1b: expected one of");
    setenv("ROPEKV_BACKEND", "host", 1);

    char dir[PATH];
    sub(dir, "cache\x1b");
    begin_capture();
    c = rk_test_host_ctx(dir);
    expect_escaped(end_capture(), "cache\\x1b' holds control characters; using memory-only caching");
    ropekv_destroy(c);

    const ropekv_variant v = {.spec = "deepseek_v3", .kv = ROPEKV_KV_BF16, .q = ROPEKV_Q_ABSORBED};
    sub(dir, "tmp\x1b");
    setenv("TMPDIR", dir, 1);
    c = rk_test_host_ctx(NULL);
    assert_int_equal(ropekv_kernel_get(c, &v, &k), ROPEKV_ERR_IO);
    expect_escaped(ropekv_last_error(c), "tmp\\x1b: holds control characters");
    ropekv_destroy(c);
    unsetenv("TMPDIR");
    setenv("CXX", "/nonexistent/c\x1b++", 1);
    c = rk_test_host_ctx(NULL);
    assert_int_equal(ropekv_kernel_get(c, &v, &k), ROPEKV_ERR_COMPILE);
    expect_escaped(ropekv_last_error(c), "/nonexistent/c\\x1b++: cannot run");
    ropekv_destroy(c);
    unsetenv("CXX");
}

int main(int argc, char **argv) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spec_size_cap),
        cmocka_unit_test(test_env_values),
        cmocka_unit_test(test_env_at_create),
        cmocka_unit_test(test_backend_choice),
        cmocka_unit_test(test_cxx),
        cmocka_unit_test(test_tmp_sweep),
        cmocka_unit_test(test_tmpdir_unusable),
        cmocka_unit_test(test_control_characters),
    };
    if (argc > 1) cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests_name("inputs", tests, setup, teardown);
}
