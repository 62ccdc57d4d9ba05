/* Cache: SHA-256 vectors, entry round trips, corrupt entries, unusable directories, the owners and
 * modes of read-only layers' entries, concurrent, lock-free and killed writers, clearing, and a parser
 * that survives garbage.
 * Every test gets a fresh directory under /tmp and removes it afterwards. An optional argument is a
 * cmocka test filter (e.g. "test_corrupt*"). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache.h"
#include "proc.h"
#include "testutil.h"

#define PATH 4400

typedef struct fixture {
    char root[64]; /* the mkdtemp directory */
    char dir[128]; /* root/c: the cache */
    rk_cache c;
} fixture;

/* ---- helpers ------------------------------------------------------------------------------------ */

static int setup(void **state) {
    fixture *f = calloc(1, sizeof *f);
    if (!f) return -1;
    snprintf(f->root, sizeof f->root, "/tmp/ropekv-test-cache-XXXXXX");
    if (rk_test_setup(f->root, NULL) != 0) {
        free(f);
        return -1;
    }
    snprintf(f->dir, sizeof f->dir, "%s/c", f->root);
    rk_cache_open(&f->c, f->dir);
    if (!f->c.usable) {
        fprintf(stderr, "%s\n", f->c.why);
        rk_test_remove_tree(f->root);
        free(f);
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fixture *f = *state;
    rk_test_remove_tree(f->root);
    free(f);
    return 0;
}

static void make_digest(int i, unsigned char d[32]) {
    char name[32];
    int n = snprintf(name, sizeof name, "digest-%d", i);
    rk_sha256 s;
    rk_sha256_init(&s);
    rk_sha256_field(&s, name, (size_t)n);
    rk_sha256_final(&s, d);
}

static uint64_t xorshift(uint64_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* A payload that depends on the digest only. */
static unsigned char *make_payload(const unsigned char d[32], size_t n) {
    unsigned char *p = malloc(n ? n : 1);
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < 8; i++) x ^= (uint64_t)d[i] << (8 * i);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v = xorshift(&x);
        memcpy(p + i, &v, 8);
    }
    for (; i < n; i++) p[i] = (unsigned char)xorshift(&x);
    return p;
}

static void le(unsigned char *p, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* An entry file built from the layout in cache.h, independently of the writer. */
static unsigned char *make_entry(const unsigned char d[32], const unsigned char *payload, size_t len, size_t *n) {
    *n = 88 + len;
    unsigned char *e = calloc(1, *n);
    memcpy(e, "RKCACHE\0", 8);
    le(e + 8, RK_CACHE_FORMAT, 4);
    memcpy(e + 16, d, 32);
    le(e + 48, len, 8);
    rk_sha256 s;
    rk_sha256_init(&s);
    rk_sha256_update(&s, payload, len);
    rk_sha256_final(&s, e + 56);
    if (len) memcpy(e + 88, payload, len);
    return e;
}

static void entry_file(const fixture *f, const unsigned char d[32], const char *suffix, char *out) {
    char hex[65];
    rk_sha256_hex(d, hex);
    snprintf(out, PATH, "%s/%s%s", f->dir, hex, suffix);
}

static int hex_to_digest(const char *hex, unsigned char d[32]) {
    for (int i = 0; i < 32; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1) return -1;
        d[i] = (unsigned char)v;
    }
    return 0;
}

static void sleep_ms(int ms) {
    struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0 && errno == EINTR)
        ;
}

static void expect_get(const rk_cache *c, const unsigned char d[32], const unsigned char *want, size_t want_len) {
    unsigned char *data = NULL;
    size_t len = 0;
    char why[1024];
    rk_cache_rc rc = rk_cache_get(c, d, &data, &len, why, sizeof why);
    if (rc != RK_CACHE_OK) print_error("get: %d %s\n", rc, why);
    assert_int_equal(rc, RK_CACHE_OK);
    assert_non_null(data);
    assert_int_equal(len, want_len);
    if (want_len) assert_memory_equal(data, want, want_len);
    free(data);
}

/* ---- SHA-256 ------------------------------------------------------------------------------------ */

static void hex_of(const void *p, size_t n, size_t chunk, char out[65]) {
    rk_sha256 s;
    unsigned char d[32];
    rk_sha256_init(&s);
    const unsigned char *b = p;
    for (size_t i = 0; i < n;) {
        size_t k = chunk ? (chunk + i % 7 < n - i ? chunk + i % 7 : n - i) : n;
        rk_sha256_update(&s, b + i, k);
        i += k;
    }
    rk_sha256_final(&s, d);
    rk_sha256_hex(d, out);
}

static void test_sha256_vectors(void **state) {
    (void)state;
    static const struct {
        const char *msg, *hex;
    } v[] = {
        {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
        {"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopq"
         "rstu",
         "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"},
    };
    char hex[65];
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        for (size_t chunk = 0; chunk < 70; chunk += 13) {
            hex_of(v[i].msg, strlen(v[i].msg), chunk, hex);
            assert_string_equal(hex, v[i].hex);
        }
    }
    size_t n = 1000000;
    char *a = malloc(n);
    memset(a, 'a', n);
    static const char million[] = "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";
    hex_of(a, n, 0, hex);
    assert_string_equal(hex, million);
    hex_of(a, n, 1, hex);
    assert_string_equal(hex, million);
    hex_of(a, n, 4093, hex);
    assert_string_equal(hex, million);
    free(a);
    /* padding boundaries: 55, 56, 63, 64 bytes, one-shot equals byte by byte */
    unsigned char buf[130];
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (unsigned char)(i * 7 + 1);
    for (size_t len = 50; len <= sizeof buf; len++) {
        char one[65], bytewise[65];
        hex_of(buf, len, 0, one);
        hex_of(buf, len, 1, bytewise);
        assert_string_equal(one, bytewise);
    }
}

static void test_sha256_field(void **state) {
    (void)state;
    unsigned char a[32], b[32], manual[32];
    rk_sha256 s;
    rk_sha256_init(&s);
    rk_sha256_field(&s, "ab", 2);
    rk_sha256_field(&s, "c", 1);
    rk_sha256_final(&s, a);
    rk_sha256_init(&s);
    rk_sha256_field(&s, "a", 1);
    rk_sha256_field(&s, "bc", 2);
    rk_sha256_final(&s, b);
    assert_memory_not_equal(a, b, 32);
    static const unsigned char raw[] = {2, 0, 0, 0, 0, 0, 0, 0, 'a', 'b', 1, 0, 0, 0, 0, 0, 0, 0, 'c'};
    rk_sha256_init(&s);
    rk_sha256_update(&s, raw, sizeof raw);
    rk_sha256_final(&s, manual);
    assert_memory_equal(a, manual, 32);
    /* an empty field still counts */
    rk_sha256_init(&s);
    rk_sha256_field(&s, NULL, 0);
    rk_sha256_final(&s, b);
    static const unsigned char zero8[8] = {0};
    rk_sha256_init(&s);
    rk_sha256_update(&s, zero8, 8);
    rk_sha256_final(&s, manual);
    assert_memory_equal(b, manual, 32);
}

/* ---- round trip ---------------------------------------------------------------------------------- */

static void test_round_trip(void **state) {
    fixture *f = *state;
    unsigned char d[32], other[32];
    make_digest(1, d);
    make_digest(2, other);
    char why[1024], path[PATH];
    unsigned char *data = (unsigned char *)"x";
    size_t len = 7;

    assert_int_equal(rk_cache_get(&f->c, d, &data, &len, why, sizeof why), RK_CACHE_MISS);
    assert_null(data);
    assert_int_equal(len, 0);
    assert_string_equal(why, "");

    size_t n = 12345, en;
    unsigned char *p = make_payload(d, n);
    assert_int_equal(rk_cache_put(&f->c, d, p, n, why, sizeof why), RK_CACHE_OK);
    expect_get(&f->c, d, p, n);
    assert_int_equal(rk_cache_get(&f->c, other, &data, &len, why, sizeof why), RK_CACHE_MISS);

    /* the file is exactly the documented layout, private to the user */
    entry_file(f, d, ".rkco", path);
    unsigned char *want = make_entry(d, p, n, &en);
    rk_codeobj got;
    assert_int_equal(rk_read_file(path, &got), ROPEKV_OK);
    assert_int_equal(got.len, en);
    assert_memory_equal(got.data, want, en);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0600);
    assert_int_equal(stat(f->dir, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0700);
    rk_code_free(&got);
    free(want);

    /* overwrite, empty payload, and no leftovers */
    unsigned char *q = make_payload(other, 777);
    assert_int_equal(rk_cache_put(&f->c, d, q, 777, why, sizeof why), RK_CACHE_OK);
    expect_get(&f->c, d, q, 777);
    assert_int_equal(rk_cache_put(&f->c, other, NULL, 0, why, sizeof why), RK_CACHE_OK);
    expect_get(&f->c, other, NULL, 0);
    rk_test_census k = rk_test_count_files(f->dir);
    assert_int_equal(k.entries, 2);
    assert_int_equal(k.temps + k.locks + k.other, 0);

    /* a why buffer is optional */
    assert_int_equal(rk_cache_put(&f->c, d, p, n, NULL, 0), RK_CACHE_OK);
    assert_int_equal(rk_cache_get(&f->c, d, &data, &len, NULL, 0), RK_CACHE_OK);
    assert_int_equal(len, n);
    free(data);
    free(p);
    free(q);
}

/* ---- corrupt entries ------------------------------------------------------------------------------ */

enum corruption {
    C_EMPTY,
    C_SHORT_HEADER,
    C_HEADER_ONLY,
    C_HALF_PAYLOAD,
    C_PAYLOAD_BYTE,
    C_MAGIC_BYTE,
    C_VERSION_BYTE,
    C_RESERVED_BYTE,
    C_DIGEST_BYTE,
    C_LENGTH_BYTE,
    C_SUM_BYTE,
    C_FOREIGN,
    C_TRAILING,
    C_DIRECTORY,
    C_SYMLINK,
    C_DANGLING_SYMLINK,
    C_FIFO,
    C_COUNT
};

static const char *const expected_reason[C_COUNT] = {
    [C_EMPTY] = "empty file",
    [C_SHORT_HEADER] = "truncated",
    [C_HEADER_ONLY] = "truncated",
    [C_HALF_PAYLOAD] = "truncated",
    [C_PAYLOAD_BYTE] = "checksum mismatch",
    [C_MAGIC_BYTE] = "bad magic",
    [C_VERSION_BYTE] = "format version",
    [C_RESERVED_BYTE] = "reserved",
    [C_DIGEST_BYTE] = "foreign entry",
    [C_LENGTH_BYTE] = "truncated",
    [C_SUM_BYTE] = "checksum mismatch",
    [C_FOREIGN] = "foreign entry",
    [C_TRAILING] = "trailing garbage",
    [C_DIRECTORY] = "a directory",
    [C_SYMLINK] = "symbolic link",
    [C_DANGLING_SYMLINK] = "symbolic link",
    [C_FIFO] = "not a regular file",
};

static void test_corrupt_entries(void **state) {
    fixture *f = *state;
    unsigned char d[32], a[32];
    make_digest(10, d);
    make_digest(11, a);
    size_t n = 5000, en, an;
    unsigned char *p = make_payload(d, n), *pa = make_payload(a, 300);
    unsigned char *good = make_entry(d, p, n, &en), *foreign = make_entry(a, pa, 300, &an);
    char path[PATH], outside[PATH], why[2048];
    entry_file(f, d, ".rkco", path);
    snprintf(outside, sizeof outside, "%s/outside.rkco", f->root);
    assert_int_equal(rk_write_file(outside, good, en), 0);

    for (int k = 0; k < C_COUNT; k++) {
        unsigned char *b = malloc(en + 16);
        memcpy(b, good, en);
        size_t bn = en;
        int r = 0;
        switch ((enum corruption)k) {
        case C_EMPTY: bn = 0; break;
        case C_SHORT_HEADER: bn = 40; break;
        case C_HEADER_ONLY: bn = 88; break;
        case C_HALF_PAYLOAD: bn = 88 + n / 2; break;
        case C_PAYLOAD_BYTE: b[88 + n / 3] ^= 0x01; break;
        case C_MAGIC_BYTE: b[2] ^= 0x20; break;
        case C_VERSION_BYTE: b[8] ^= 0x02; break;
        case C_RESERVED_BYTE: b[14] = 1; break;
        case C_DIGEST_BYTE: b[16 + 31] ^= 0x80; break;
        case C_LENGTH_BYTE: b[48] ^= 0x01; break;
        case C_SUM_BYTE: b[60] ^= 0x04; break;
        case C_FOREIGN:
            memcpy(b, foreign, an);
            bn = an;
            break;
        case C_TRAILING:
            memcpy(b + en, "garbage!", 8);
            bn = en + 8;
            break;
        case C_DIRECTORY: r = mkdir(path, 0700); break;
        case C_SYMLINK: r = symlink(outside, path); break;
        case C_DANGLING_SYMLINK: r = symlink("/nonexistent/ropekv", path); break;
        case C_FIFO: r = mkfifo(path, 0600); break;
        case C_COUNT: break;
        }
        if (k < C_DIRECTORY) r = rk_write_file(path, b, bn);
        assert_int_equal(r, 0);
        free(b);

        unsigned char *data = NULL;
        size_t len = 0;
        rk_cache_rc rc = rk_cache_get(&f->c, d, &data, &len, why, sizeof why);
        print_message("case %d: %s\n", k, why);
        assert_int_equal(rc, RK_CACHE_MISS);
        assert_null(data);
        assert_non_null(strstr(why, "corrupt cache entry "));
        assert_non_null(strstr(why, path));
        assert_non_null(strstr(why, expected_reason[k]));
        assert_non_null(strstr(why, "; removed"));
        struct stat st;
        assert_int_equal(lstat(path, &st), -1);
        assert_int_equal(errno, ENOENT);

        /* a second read is a plain miss; the next put and get work */
        assert_int_equal(rk_cache_get(&f->c, d, &data, &len, why, sizeof why), RK_CACHE_MISS);
        assert_string_equal(why, "");
        assert_int_equal(rk_cache_put(&f->c, d, p, n, why, sizeof why), RK_CACHE_OK);
        expect_get(&f->c, d, p, n);
        assert_int_equal(unlink(path), 0);
    }
    /* the symlink's target was not touched */
    rk_codeobj o;
    assert_int_equal(rk_read_file(outside, &o), ROPEKV_OK);
    assert_int_equal(o.len, en);
    assert_memory_equal(o.data, good, en);
    rk_code_free(&o);
    rk_test_census c = rk_test_count_files(f->dir);
    assert_int_equal(c.entries + c.temps + c.locks + c.other, 0);
    free(p);
    free(pa);
    free(good);
    free(foreign);
}

/* A half-written temp file that never got renamed is invisible to readers. */
static void test_half_written_temp_is_ignored(void **state) {
    fixture *f = *state;
    unsigned char d[32];
    make_digest(20, d);
    size_t n = 40000, en;
    unsigned char *p = make_payload(d, n), *e = make_entry(d, p, n, &en);
    char tmp[PATH], why[1024];
    entry_file(f, d, ".rkco.tmp.99999.0", tmp);
    assert_int_equal(rk_write_file(tmp, e, en / 2), 0);
    unsigned char *data = NULL;
    size_t len;
    assert_int_equal(rk_cache_get(&f->c, d, &data, &len, why, sizeof why), RK_CACHE_MISS);
    assert_string_equal(why, "");
    assert_int_equal(rk_cache_put(&f->c, d, p, n, why, sizeof why), RK_CACHE_OK);
    expect_get(&f->c, d, p, n);
    assert_int_equal(rk_cache_clear(&f->c), 2);
    assert_int_equal(access(tmp, F_OK), -1);
    free(p);
    free(e);
}

/* ---- unusable directories ----------------------------------------------------------------------- */

static void expect_unusable(const char *dir, const char *reason) {
    rk_cache c;
    rk_cache_open(&c, dir);
    print_message("%s: %s\n", dir, c.why);
    assert_int_equal(c.usable, 0);
    assert_non_null(strstr(c.why, reason));
    assert_non_null(strstr(c.why, "memory-only"));

    /* an unusable cache misses, refuses writes and locks, and never touches the directory */
    unsigned char d[32], *data = NULL;
    size_t len = 0;
    char why[1024];
    make_digest(1, d);
    assert_int_equal(rk_cache_get(&c, d, &data, &len, why, sizeof why), RK_CACHE_MISS);
    assert_null(data);
    assert_int_equal(rk_cache_put(&c, d, "x", 1, why, sizeof why), RK_CACHE_ERROR);
    assert_int_equal(rk_cache_lock(&c, d), -1);
    assert_int_equal(rk_cache_clear(&c), -1);
}

/* Run as a plain user: a read-only directory, and one that cannot be created. Returns an exit code. */
static int check_unwritable_as_user(const char *base) {
    char ro[PATH], sub[PATH];
    snprintf(ro, sizeof ro, "%s/ro", base);
    snprintf(sub, sizeof sub, "%s/ro/new/cache", base);
    if (mkdir(ro, 0700) != 0 || chmod(ro, 0500) != 0) return 10;
    rk_cache c;
    rk_cache_open(&c, ro);
    if (c.usable || !strstr(c.why, "is not writable") || !strstr(c.why, ro)) return 11;
    rk_cache_open(&c, sub);
    if (c.usable || !strstr(c.why, "cannot create cache directory") || !strstr(c.why, "Permission denied")) return 12;
    return 0;
}

static void test_unusable_directories(void **state) {
    fixture *f = *state;
    char p[PATH], q[PATH];

    /* a path below a regular file cannot be created; a regular file is no directory */
    snprintf(p, sizeof p, "%s/file", f->root);
    assert_int_equal(rk_write_file(p, "x", 1), 0);
    expect_unusable(p, "is not a directory");
    snprintf(q, sizeof q, "%s/file/sub", f->root);
    expect_unusable(q, "cannot create cache directory");
    snprintf(q, sizeof q, "%s/file/sub/deeper", f->root);
    expect_unusable(q, "Not a directory");

    /* writable by others or by the group */
    snprintf(p, sizeof p, "%s/open", f->root);
    assert_int_equal(mkdir(p, 0700), 0);
    assert_int_equal(chmod(p, 0777), 0);
    expect_unusable(p, "writable by others (mode 0777)");
    assert_int_equal(chmod(p, 0770), 0);
    expect_unusable(p, "writable by its group");
    assert_int_equal(chmod(p, 0755), 0);
    rk_cache c;
    rk_cache_open(&c, p);
    assert_int_equal(c.usable, 1);

    /* a symlink to a good directory, with and without a trailing slash */
    snprintf(q, sizeof q, "%s/link", f->root);
    assert_int_equal(symlink(f->dir, q), 0);
    expect_unusable(q, "is a symbolic link");
    snprintf(q, sizeof q, "%s/link//", f->root);
    expect_unusable(q, "is a symbolic link");
    /* ... or spelled with "." components after it, which lstat would follow; and ".." last */
    static const char *const spellings[] = {"link/.", "link/./", "link//.//./", "link/./."};
    for (size_t i = 0; i < sizeof spellings / sizeof spellings[0]; i++) {
        snprintf(q, sizeof q, "%s/%s", f->root, spellings[i]);
        expect_unusable(q, "is a symbolic link");
        rk_cache_open_ro(&c, q);
        assert_int_equal(c.usable, 0);
        assert_non_null(strstr(c.why, "is a symbolic link"));
    }
    snprintf(q, sizeof q, "%s/link/..", f->root);
    expect_unusable(q, "ends in '..'");
    snprintf(q, sizeof q, "%s/./open/.", f->root); /* "." components of a real directory are fine */
    rk_cache_open(&c, q);
    assert_int_equal(c.usable, 1);

    expect_unusable(NULL, "no cache directory");
    expect_unusable("", "no cache directory");

    if (geteuid() == 0) {
        /* owned by someone else */
        snprintf(p, sizeof p, "%s/theirs", f->root);
        assert_int_equal(mkdir(p, 0700), 0);
        assert_int_equal(chown(p, 65534, 65534), 0);
        expect_unusable(p, "owned by uid 65534");
        /* permission checks do not apply to root: repeat them as an unprivileged user */
        snprintf(p, sizeof p, "%s/user", f->root);
        assert_int_equal(mkdir(p, 0700), 0);
        assert_int_equal(chown(p, 65534, 65534), 0);
        assert_int_equal(chmod(f->root, 0711), 0);
        pid_t pid = rk_test_fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            if (setgid(65534) != 0 || setuid(65534) != 0) _exit(77);
            _exit(check_unwritable_as_user(p));
        }
        int rc = rk_test_wait(pid);
        if (rc == 77) print_message("cannot drop privileges; unwritable-directory check as a user skipped\n");
        else assert_int_equal(rc, 0);
    } else {
        assert_int_equal(check_unwritable_as_user(f->root), 0);
    }
}

static void test_open_creates_private_directories(void **state) {
    fixture *f = *state;
    char p[PATH], q[PATH];
    mode_t old = umask(022);
    snprintf(p, sizeof p, "%s/a/b/c///", f->root);
    rk_cache c;
    rk_cache_open(&c, p);
    umask(old);
    assert_int_equal(c.usable, 1);
    snprintf(p, sizeof p, "%s/a/b/c", f->root);
    assert_string_equal(c.dir, p);
    struct stat st;
    assert_int_equal(stat(p, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0700);
    snprintf(q, sizeof q, "%s/a", f->root);
    assert_int_equal(stat(q, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0755);
    /* opening again is fine */
    rk_cache_open(&c, p);
    assert_int_equal(c.usable, 1);
    assert_string_equal(c.why, "");
}

/* A write that hits the file size limit fails cleanly: the message names the entry, no temp file is
 * left, and the previous entry survives. Runs in a child that lowers RLIMIT_FSIZE. */
static void test_write_failure_cleans_up(void **state) {
    fixture *f = *state;
    unsigned char d[32];
    make_digest(30, d);
    unsigned char *small = make_payload(d, 100);
    char why[1024], path[PATH];
    entry_file(f, d, ".rkco", path);
    assert_int_equal(rk_cache_put(&f->c, d, small, 100, why, sizeof why), RK_CACHE_OK);
    pid_t pid = rk_test_fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct rlimit rl = {65536, 65536};
        signal(SIGXFSZ, SIG_IGN);
        if (setrlimit(RLIMIT_FSIZE, &rl) != 0) _exit(10);
        unsigned char *big = make_payload(d, 1 << 20);
        if (rk_cache_put(&f->c, d, big, 1 << 20, why, sizeof why) != RK_CACHE_ERROR) _exit(11);
        printf("%s\n", why);
        fflush(stdout);
        if (!strstr(why, path) || !strstr(why, "File too large")) _exit(12);
        rk_test_census k = rk_test_count_files(f->dir);
        if (k.temps != 0 || k.entries != 1) _exit(13);
        _exit(0);
    }
    assert_int_equal(rk_test_wait(pid), 0);
    expect_get(&f->c, d, small, 100);

    /* an entry over the size limit is refused before its bytes are read */
    assert_int_equal(rk_cache_put(&f->c, d, small, RK_CACHE_MAX_FILE, why, sizeof why), RK_CACHE_ERROR);
    assert_non_null(strstr(why, path));
    free(small);
}

/* ---- concurrency ----------------------------------------------------------------------------------- */

#define PROCS 8
#define THREADS 8
#define DIGESTS 4
#define PAYLOAD (200 * 1024)

typedef struct shared {
    atomic_int puts, failures, hits;
} shared;

typedef struct worker {
    const rk_cache *c;
    shared *sh;
    unsigned char (*digests)[32];
    unsigned char **payloads;
    int locked, tid, proc;
} worker;

static void note_failure(worker *w, const char *what, rk_cache_rc rc, const char *why) {
    atomic_fetch_add(&w->sh->failures, 1);
    fprintf(stderr, "process %d thread %d: %s (rc %d) %s\n", w->proc, w->tid, what, rc, why);
}

/* One get: OK must be the exact payload, MISS must be a plain miss (never a corrupt entry). */
static rk_cache_rc checked_get(worker *w, int k) {
    unsigned char *data;
    size_t len;
    char why[1024];
    rk_cache_rc rc = rk_cache_get(w->c, w->digests[k], &data, &len, why, sizeof why);
    if (rc == RK_CACHE_OK) {
        if (len != PAYLOAD || memcmp(data, w->payloads[k], PAYLOAD) != 0) note_failure(w, "payload differs", rc, "");
        else atomic_fetch_add(&w->sh->hits, 1);
        free(data);
    } else if (rc != RK_CACHE_MISS || why[0]) {
        note_failure(w, "get", rc, why);
    }
    return rc;
}

static void *work(void *arg) {
    worker *w = arg;
    char why[1024];
    /* without the lock, a quarter of the threads rewrite every entry while the others read */
    int writer = !w->locked && w->tid % 4 == 0;
    for (int i = 0; i < DIGESTS; i++) {
        int k = (i + w->tid + w->proc) % DIGESTS;
        int fd = -1;
        if (w->locked && (fd = rk_cache_lock(w->c, w->digests[k])) < 0) note_failure(w, "lock", 0, "");
        if (checked_get(w, k) == RK_CACHE_MISS || writer) {
            rk_cache_rc rc = rk_cache_put(w->c, w->digests[k], w->payloads[k], PAYLOAD, why, sizeof why);
            if (rc != RK_CACHE_OK) note_failure(w, "put", rc, why);
            atomic_fetch_add(&w->sh->puts, 1);
        }
        rk_cache_unlock(fd);
        if (checked_get(w, k) != RK_CACHE_OK) note_failure(w, "get after put", 0, "");
    }
    return NULL;
}

static void run_many(fixture *f, int locked) {
    unsigned char digests[DIGESTS][32];
    unsigned char *payloads[DIGESTS];
    for (int k = 0; k < DIGESTS; k++) {
        make_digest(100 + k, digests[k]);
        payloads[k] = make_payload(digests[k], PAYLOAD);
    }
    shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(sh != MAP_FAILED);
    atomic_init(&sh->puts, 0);
    atomic_init(&sh->failures, 0);
    atomic_init(&sh->hits, 0);
    double t0 = rk_now_ms();
    pid_t pids[PROCS];
    for (int i = 0; i < PROCS; i++) {
        pids[i] = rk_test_fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0) {
            pthread_t th[THREADS];
            worker w[THREADS];
            for (int t = 0; t < THREADS; t++) {
                w[t] = (worker){&f->c, sh, digests, payloads, locked, t, i};
                if (pthread_create(&th[t], NULL, work, &w[t]) != 0) _exit(2);
            }
            for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
            _exit(0);
        }
    }
    for (int i = 0; i < PROCS; i++) assert_int_equal(rk_test_wait(pids[i]), 0);
    print_message("%s: %d puts, %d hits, %.2f s\n", locked ? "locked" : "unlocked", atomic_load(&sh->puts),
                  atomic_load(&sh->hits), (rk_now_ms() - t0) / 1e3);
    assert_int_equal(atomic_load(&sh->failures), 0);
    if (locked) assert_int_equal(atomic_load(&sh->puts), DIGESTS); /* the lock let exactly one build each */
    assert_true(atomic_load(&sh->hits) >= PROCS * THREADS * DIGESTS);

    rk_test_census k = rk_test_count_files(f->dir);
    assert_int_equal(k.entries, DIGESTS);
    assert_int_equal(k.temps, 0);
    assert_int_equal(k.locks, locked ? DIGESTS : 0);
    assert_int_equal(k.other, 0);
    for (int i = 0; i < DIGESTS; i++) {
        expect_get(&f->c, digests[i], payloads[i], PAYLOAD);
        free(payloads[i]);
    }
    munmap(sh, sizeof *sh);
}

static void test_concurrent_locked(void **state) { run_many(*state, 1); }
static void test_concurrent_unlocked(void **state) { run_many(*state, 0); }

/* ---- killed writers and lock holders -------------------------------------------------------------- */

#define BIG (16u << 20)

/* Polls until the directory holds at least `entries` entries and `temps` temp files; 0 on success. */
static int wait_for_files(const char *dir, int entries, int temps, double timeout) {
    double t0 = rk_now_ms();
    while (rk_now_ms() - t0 < timeout * 1e3) {
        rk_test_census k = rk_test_count_files(dir);
        if (k.entries >= entries && k.temps >= temps) return 0;
        sleep_ms(1);
    }
    return -1;
}

static void test_killed_writer(void **state) {
    fixture *f = *state;
    /* kill during the first write; then after one complete entry, a few ms into the next write */
    static const struct { int entries, delay_ms; } plan[] = {{0, 2}, {1, 5}};
    int seen_temps = 0, seen_entries = 0;
    for (size_t round = 0; round < sizeof plan / sizeof plan[0]; round++) {
        rk_test_census base = rk_test_count_files(f->dir);
        pid_t pid = rk_test_fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            unsigned char d[32];
            unsigned char *p = malloc(BIG);
            if (!p) _exit(2);
            memset(p, 0x5a, BIG);
            for (int i = 0;; i++) {
                make_digest(1000 + 100 * (int)round + i, d);
                p[i % BIG] ^= 1;
                rk_cache_put(&f->c, d, p, BIG, NULL, 0);
            }
        }
        int waited = wait_for_files(f->dir, base.entries + plan[round].entries, base.temps + 1, 15.0);
        sleep_ms(plan[round].delay_ms);
        kill(pid, SIGKILL);
        assert_int_equal(rk_test_wait(pid), 128 + SIGKILL);
        assert_int_equal(waited, 0);

        /* every published entry is whole; temp files are invisible to readers */
        DIR *dp = opendir(f->dir);
        assert_non_null(dp);
        struct dirent *e;
        while ((e = readdir(dp))) {
            unsigned char d[32], *data;
            size_t len, nl = strlen(e->d_name);
            char why[1024], path[PATH];
            if (nl < 64 || hex_to_digest(e->d_name, d) != 0) continue;
            entry_file(f, d, ".rkco", path);
            int published = access(path, F_OK) == 0;
            rk_cache_rc rc = rk_cache_get(&f->c, d, &data, &len, why, sizeof why);
            if (strstr(e->d_name, ".tmp.")) {
                seen_temps++;
                if (!published) {
                    assert_int_equal(rc, RK_CACHE_MISS);
                    assert_string_equal(why, "");
                }
            } else {
                seen_entries++;
                assert_int_equal(rc, RK_CACHE_OK);
                assert_int_equal(len, BIG);
                free(data);
            }
        }
        closedir(dp);
    }
    print_message("%d entries and %d temp files left by killed writers\n", seen_entries, seen_temps);
    assert_true(seen_temps > 0);
    assert_true(seen_entries > 0);
    rk_test_census before = rk_test_count_files(f->dir);
    assert_int_equal(rk_cache_clear(&f->c), before.entries + before.temps);
    rk_test_census after = rk_test_count_files(f->dir);
    assert_int_equal(after.entries + after.temps + after.locks + after.other, 0);
}

/* A file named name in dir, its mtime age_s seconds ago (a symbolic link to target when target is set). */
static void aged_file(const char *dir, const char *name, long age_s, const char *target) {
    char path[PATH];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (target) {
        assert_int_equal(symlink(target, path), 0);
    } else {
        int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0600);
        assert_true(fd >= 0);
        close(fd);
    }
    const struct timespec t[2] = {{time(NULL) - age_s, 0}, {time(NULL) - age_s, 0}};
    assert_int_equal(utimensat(AT_FDCWD, path, t, AT_SYMLINK_NOFOLLOW), 0);
}

static int present(const char *dir, const char *name) {
    char path[PATH];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return lstat(path, &st) == 0;
}

/* Opening a cache sweeps the temp files writers killed mid-write left: its process gone and older than
 * RK_CACHE_TMP_AGE. A fresh one, a live process's, a symbolic link and published entries stay. */
static void test_sweep_killed_temps(void **state) {
    fixture *f = *state;
    pid_t dead = rk_test_fork();
    assert_true(dead >= 0);
    if (dead == 0) _exit(0);
    assert_int_equal(rk_test_wait(dead), 0); /* its pid is no running process now */
    const char *hex = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    char dead_old[128], dead_fresh[128], live_old[128], link_old[128], entry[128];
    snprintf(dead_old, sizeof dead_old, "%s.rkco.tmp.%ld.0", hex, (long)dead);
    snprintf(dead_fresh, sizeof dead_fresh, "%s.rkco.tmp.%ld.1", hex, (long)dead);
    snprintf(live_old, sizeof live_old, "%s.rkco.tmp.%ld.2", hex, (long)getpid());
    snprintf(link_old, sizeof link_old, "%s.rkco.tmp.%ld.3", hex, (long)dead);
    snprintf(entry, sizeof entry, "%s.rkco", hex);
    const long old = 2 * RK_CACHE_TMP_AGE;
    aged_file(f->dir, dead_old, old, NULL);
    aged_file(f->dir, dead_fresh, 0, NULL);
    aged_file(f->dir, live_old, old, NULL);
    aged_file(f->dir, link_old, old, f->root);
    aged_file(f->dir, entry, old, NULL);
    rk_cache c2;
    rk_cache_open(&c2, f->dir);
    assert_true(c2.usable);
    assert_false(present(f->dir, dead_old));
    assert_true(present(f->dir, dead_fresh) && present(f->dir, live_old) && present(f->dir, link_old));
    assert_true(present(f->dir, entry));
    assert_int_equal(rk_cache_sweep_tmp(&c2, RK_CACHE_TMP_AGE), 0); /* a second sweep finds nothing */
}

/* Child: takes the lock for d, reports through fd, and holds it until killed. */
static void hold_lock(const rk_cache *c, const unsigned char d[32], int fd) {
    int l = rk_cache_lock(c, d);
    char ok = l >= 0 ? 'y' : 'n';
    if (write(fd, &ok, 1) != 1) _exit(2);
    for (;;) pause();
}

static void test_lock_dies_with_holder(void **state) {
    fixture *f = *state;
    unsigned char d[32];
    make_digest(40, d);
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    pid_t holder = rk_test_fork();
    assert_true(holder >= 0);
    if (holder == 0) hold_lock(&f->c, d, pfd[1]);
    char ok = 0;
    assert_int_equal(read(pfd[0], &ok, 1), 1);
    assert_int_equal(ok, 'y');

    /* a waiter blocks while the holder lives... */
    pid_t waiter = rk_test_fork();
    assert_true(waiter >= 0);
    if (waiter == 0) {
        int l = rk_cache_lock(&f->c, d);
        _exit(l >= 0 ? 0 : 1);
    }
    sleep_ms(150);
    int st;
    assert_int_equal(waitpid(waiter, &st, WNOHANG), 0);

    /* ...and gets the lock once the holder is killed */
    double t0 = rk_now_ms();
    kill(holder, SIGKILL);
    assert_int_equal(rk_test_wait(holder), 128 + SIGKILL);
    pid_t done = 0;
    while ((done = waitpid(waiter, &st, WNOHANG)) == 0 && rk_now_ms() - t0 < 1e3) sleep_ms(1);
    if (done == 0) {
        kill(waiter, SIGKILL);
        rk_test_wait(waiter);
    }
    assert_int_equal(done, waiter);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);

    t0 = rk_now_ms();
    int l = rk_cache_lock(&f->c, d);
    assert_true(l >= 0);
    assert_true(rk_now_ms() - t0 < 1e3);
    rk_cache_unlock(l);
    rk_cache_unlock(-1);
    close(pfd[0]);
    close(pfd[1]);
}

/* ---- clearing -------------------------------------------------------------------------------------- */

static void test_clear(void **state) {
    fixture *f = *state;
    char why[1024], p[PATH], outside[PATH];
    unsigned char d[32];
    for (int i = 0; i < 3; i++) {
        make_digest(50 + i, d);
        assert_int_equal(rk_cache_put(&f->c, d, "payload", 7, why, sizeof why), RK_CACHE_OK);
        if (i < 2) rk_cache_unlock(rk_cache_lock(&f->c, d));
    }
    make_digest(60, d);
    entry_file(f, d, ".rkco.tmp.12345.7", p);
    assert_int_equal(rk_write_file(p, "half", 4), 0);
    /* a symlink named like an entry goes, its target stays */
    snprintf(outside, sizeof outside, "%s/target", f->root);
    assert_int_equal(rk_write_file(outside, "keep", 4), 0);
    make_digest(61, d);
    entry_file(f, d, ".rkco", p);
    assert_int_equal(symlink(outside, p), 0);
    /* unrelated files and directories stay */
    static const char *const keep[] = {"notes.txt", "short.rkco", "x.lock",
                                       "E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855.rkco"};
    for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", f->dir, keep[i]);
        assert_int_equal(rk_write_file(p, "mine", 4), 0);
    }
    make_digest(62, d);
    entry_file(f, d, ".rkco", p);
    assert_int_equal(mkdir(p, 0700), 0);
    char inner[PATH + 16];
    snprintf(inner, sizeof inner, "%s/inner.rkco", p);
    assert_int_equal(rk_write_file(inner, "deep", 4), 0);

    assert_int_equal(rk_cache_clear(&f->c), 3 + 2 + 1 + 1);
    rk_test_census k = rk_test_count_files(
        f->dir); /* left: short.rkco, the uppercase name, the directory, x.lock, notes.txt */
    assert_int_equal(k.temps, 0);
    assert_int_equal(k.entries, 3);
    assert_int_equal(k.locks, 1);
    assert_int_equal(k.other, 1);
    assert_int_equal(access(inner, F_OK), 0);
    assert_int_equal(access(outside, F_OK), 0);
    for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", f->dir, keep[i]);
        assert_int_equal(access(p, F_OK), 0);
    }
    assert_int_equal(rk_cache_clear(&f->c), 0);
}

/* ---- the parser under garbage ---------------------------------------------------------------------- */

/* System directories are refused as a writable cache, after realpath (nothing is created in them). */
static void test_system_dirs_refused(void **state) {
    (void)state;
    const char *dirs[] = {"/", "/usr/", "/etc/../usr", "/proc/self", "/var"};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        rk_cache c;
        rk_cache_open(&c, dirs[i]);
        assert_int_equal(c.usable, 0);
        if (!strstr(c.why, "system directory")) fail_msg("%s: %s", dirs[i], c.why);
    }
}

/* A read-only layer: entries are read and validated as in a writable cache; an invalid one is reported
 * and skipped, never removed; nothing is ever written, locked or cleared there. */
static void test_read_only_layer(void **state) {
    fixture *f = *state;
    unsigned char d[32], bad[32];
    make_digest(20, d);
    make_digest(21, bad);
    unsigned char *p = make_payload(d, 400);
    assert_int_equal(rk_cache_put(&f->c, d, p, 400, NULL, 0), RK_CACHE_OK);
    char path[PATH], why[1024];
    entry_file(f, bad, ".rkco", path);
    assert_int_equal(rk_write_file(path, "garbage", 7), 0);

    rk_cache ro;
    rk_cache_open_ro(&ro, f->dir);
    assert_int_equal(ro.usable, 1);
    expect_get(&ro, d, p, 400);
    unsigned char *data = NULL;
    size_t len = 0;
    assert_int_equal(rk_cache_get(&ro, bad, &data, &len, why, sizeof why), RK_CACHE_MISS);
    assert_non_null(strstr(why, "skipped (a read-only layer)"));
    struct stat st;
    assert_int_equal(stat(path, &st), 0); /* still there */
    assert_int_equal(rk_cache_put(&ro, bad, p, 400, why, sizeof why), RK_CACHE_ERROR);
    assert_non_null(strstr(why, "read-only layer"));
    assert_int_equal(rk_cache_lock(&ro, d), -1);
    assert_int_equal(rk_cache_clear(&ro), -1);
    assert_int_equal(rk_test_count_files(f->dir).entries, 2);

    /* unusable layers: missing, writable by others; nothing is created */
    char missing[PATH];
    snprintf(missing, sizeof missing, "%s/missing", f->root);
    rk_cache_open_ro(&ro, missing);
    assert_int_equal(ro.usable, 0);
    assert_non_null(strstr(ro.why, "cannot inspect read-only cache layer"));
    assert_int_not_equal(stat(missing, &st), 0);
    assert_int_equal(chmod(f->dir, 0777), 0);
    rk_cache_open_ro(&ro, f->dir);
    assert_int_equal(ro.usable, 0);
    assert_non_null(strstr(ro.why, "writable by others"));
    assert_int_equal(chmod(f->dir, 0700), 0);
    free(p);
}

/* Reads d from the read-only layer dir: RK_CACHE_REFUSED, with the entry's path and `reason` in why, the
 * entry left alone. Returns nothing; asserts. */
static void expect_refused(const char *dir, const fixture *f, const unsigned char d[32], const char *reason) {
    rk_cache ro;
    rk_cache_open_ro(&ro, dir);
    assert_int_equal(ro.usable, 1);
    unsigned char *data = NULL;
    size_t len = 0;
    char why[1024], path[PATH];
    entry_file(f, d, ".rkco", path);
    rk_cache_rc rc = rk_cache_get(&ro, d, &data, &len, why, sizeof why);
    print_message("%s\n", why);
    assert_int_equal(rc, RK_CACHE_REFUSED);
    assert_null(data);
    assert_int_equal(len, 0);
    assert_non_null(strstr(why, path));
    if (!strstr(why, reason)) fail_msg("expected '%s' in: %s", reason, why);
    assert_non_null(strstr(why, "not used (a read-only layer)"));
    struct stat st;
    assert_int_equal(stat(path, &st), 0); /* left alone */
}

/* Run as another user (uid 65534) over a layer of root's: an entry it may not open is refused, not an error. */
static int check_unreadable_as_user(const fixture *f, const unsigned char d[32]) {
    rk_cache ro;
    rk_cache_open_ro(&ro, f->dir);
    if (!ro.usable) return 10;
    unsigned char *data = NULL;
    size_t len = 0;
    char why[1024];
    if (rk_cache_get(&ro, d, &data, &len, why, sizeof why) != RK_CACHE_REFUSED) return 11;
    printf("%s\n", why);
    fflush(stdout);
    return strstr(why, "Permission denied") && strstr(why, "not used (a read-only layer)") ? 0 : 12;
}

/* A read-only layer trusts each entry as it trusts the directory: an entry (a bundle's compiler note is one
 * too) owned by neither this user nor root, or writable by group or others, is refused, as is one this user
 * may not open; nothing of it is read and it stays. One of this user's or root's, 0644 or 0600, is read. The
 * writable cache's own entries are checked as before. */
static void test_read_only_entry_owners(void **state) {
    fixture *f = *state;
    unsigned char d[4][32];
    unsigned char *p[4];
    char path[4][PATH];
    for (int i = 0; i < 4; i++) {
        make_digest(80 + i, d[i]);
        p[i] = make_payload(d[i], 300);
        assert_int_equal(rk_cache_put(&f->c, d[i], p[i], 300, NULL, 0), RK_CACHE_OK);
        entry_file(f, d[i], ".rkco", path[i]);
    }
    rk_cache ro;
    rk_cache_open_ro(&ro, f->dir);
    assert_int_equal(ro.usable, 1);
    expect_get(&ro, d[0], p[0], 300); /* 0600, this user's */
    assert_int_equal(chmod(path[0], 0644), 0);
    expect_get(&ro, d[0], p[0], 300);

    /* writable by the group, by others: refused by the layer, still read by the writable cache */
    assert_int_equal(chmod(path[1], 0664), 0);
    expect_refused(f->dir, f, d[1], "is writable by its group (mode 0664)");
    assert_int_equal(chmod(path[1], 0646), 0);
    expect_refused(f->dir, f, d[1], "is writable by others (mode 0646)");
    expect_get(&f->c, d[1], p[1], 300);
    assert_int_equal(chmod(path[1], 0644), 0);
    expect_get(&ro, d[1], p[1], 300);

    if (geteuid() != 0) {
        /* this user may not open it */
        assert_int_equal(chmod(path[2], 0), 0);
        expect_refused(f->dir, f, d[2], "Permission denied");
        assert_int_equal(chmod(path[2], 0600), 0);
        print_message("not root: entries owned by another user not tried\n");
        for (int i = 0; i < 4; i++) free(p[i]);
        return;
    }
    /* owned by another user, even 0644 in a layer of root's: refused; root's own: read */
    assert_int_equal(chown(path[2], 65534, 65534), 0);
    assert_int_equal(chmod(path[2], 0644), 0);
    expect_refused(f->dir, f, d[2], "is owned by uid 65534, neither this user (uid 0) nor root");
    assert_int_equal(chown(path[2], 0, 0), 0);
    expect_get(&ro, d[2], p[2], 300);

    /* root's 0600 entry in root's 0755 layer, read by another user: refused (Permission denied), not an error */
    assert_int_equal(chmod(f->root, 0711), 0);
    assert_int_equal(chmod(f->dir, 0755), 0);
    pid_t pid = rk_test_fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (setgid(65534) != 0 || setuid(65534) != 0) _exit(77);
        _exit(check_unreadable_as_user(f, d[3]));
    }
    int rc = rk_test_wait(pid);
    if (rc == 77) print_message("cannot drop privileges; unreadable-entry check as a user skipped\n");
    else assert_int_equal(rc, 0);
    assert_int_equal(chmod(f->dir, 0700), 0);
    for (int i = 0; i < 4; i++) free(p[i]);
}

static void test_parse_garbage(void **state) {
    (void)state;
    uint64_t x = 0x243f6a8885a308d3ull;
    unsigned char d[32];
    make_digest(70, d);
    size_t pn = 200, en;
    unsigned char *p = make_payload(d, pn), *good = make_entry(d, p, pn, &en);
    const unsigned char *pl;
    size_t plen;
    char why[256];
    assert_int_equal(rk_cache_parse(good, en, d, &pl, &plen, why, sizeof why), RK_CACHE_OK);
    assert_ptr_equal(pl, good + 88);
    assert_int_equal(plen, pn);
    assert_int_equal(rk_cache_parse(good, en, NULL, &pl, &plen, NULL, 0), RK_CACHE_OK);
    assert_int_equal(rk_cache_parse(NULL, 0, d, &pl, &plen, why, sizeof why), RK_CACHE_MISS);

    int ok = 0;
    for (int it = 0; it < 10000; it++) {
        size_t n;
        unsigned char *b;
        switch (it % 4) {
        case 0: /* random bytes of random length */
        case 1: /* a plausible header followed by garbage, with a random length field */
            n = (size_t)(xorshift(&x) % (it % 3 ? 400 : 4000));
            b = malloc(n ? n : 1);
            for (size_t i = 0; i < n; i++) b[i] = (unsigned char)xorshift(&x);
            if (it % 4 == 1 && n >= 88) {
                memcpy(b, good, 48);
                uint64_t v = xorshift(&x);
                le(b + 48, it % 8 == 1 ? v : v % (n + 2), 8);
                if (it % 16 == 5) le(b + 48, n - 88, 8); /* right length, wrong checksum */
            }
            break;
        case 2: /* a valid entry with one byte changed */
            n = en;
            b = malloc(n);
            memcpy(b, good, n);
            b[xorshift(&x) % n] ^= (unsigned char)(1 + xorshift(&x) % 255);
            break;
        default: /* a valid entry cut short or extended */
            n = (size_t)(xorshift(&x) % (en + 64));
            if (n == en) n++;
            b = malloc(n ? n : 1);
            memcpy(b, good, n < en ? n : en);
            for (size_t i = en; i < n; i++) b[i] = (unsigned char)xorshift(&x);
            break;
        }
        rk_cache_rc rc = rk_cache_parse(b, n, d, &pl, &plen, why, sizeof why);
        if (rc == RK_CACHE_OK) ok++;
        else if (rc != RK_CACHE_MISS || !why[0] || pl != NULL || plen != 0) ok += 1000;
        free(b);
    }
    assert_int_equal(ok, 0);
    free(p);
    free(good);
}

int main(int argc, char **argv) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sha256_vectors),
        cmocka_unit_test(test_sha256_field),
        cmocka_unit_test(test_parse_garbage),
        cmocka_unit_test(test_system_dirs_refused),
        cmocka_unit_test_setup_teardown(test_read_only_layer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_read_only_entry_owners, setup, teardown),
        cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_entries, setup, teardown),
        cmocka_unit_test_setup_teardown(test_half_written_temp_is_ignored, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unusable_directories, setup, teardown),
        cmocka_unit_test_setup_teardown(test_open_creates_private_directories, setup, teardown),
        cmocka_unit_test_setup_teardown(test_write_failure_cleans_up, setup, teardown),
        cmocka_unit_test_setup_teardown(test_clear, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lock_dies_with_holder, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_locked, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_unlocked, setup, teardown),
        cmocka_unit_test_setup_teardown(test_killed_writer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sweep_killed_temps, setup, teardown),
    };
    if (argc > 1) cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests_name("cache", tests, NULL, NULL);
}
