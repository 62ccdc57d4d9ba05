/* Fuzz target: cache entries parsed from arbitrary file contents.
 *
 * The input is an entry file's contents. rk_cache_parse (with the fixed digest below, and with NULL)
 * must accept exactly the well-formed entries, as an independent check of the layout in cache.h
 * decides. Then the bytes are written as <digest>.rkco into a private cache directory and read with
 * rk_cache_get: OK with the payload only for a valid entry; anything else is a MISS with a reason and
 * the file removed. The corpus's valid entries were made with rk_cache_put under this digest. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache.h"
#include "fuzz.h"

/* bytes 0x00..0x1f: the key digest every entry of the corpus was written under */
static const unsigned char DIGEST[32] = {0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15,
                                         16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31};

static rk_cache cache;
static char entry[sizeof cache.dir + 96];

static void remove_dir(void) {
    unlink(entry);
    rmdir(cache.dir);
}

static void open_cache(void) {
    static char dir[256];
    if (dir[0]) return;
    const char *root = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(dir, sizeof dir, "%s/ropekv-fuzz-cache-XXXXXX", root);
    FUZZ_CHECK(mkdtemp(dir) != NULL, "mkdtemp %s: %s", dir, strerror(errno));
    rk_cache_open(&cache, dir);
    FUZZ_CHECK(cache.usable, "%s", cache.why);
    char hex[65];
    rk_sha256_hex(DIGEST, hex);
    snprintf(entry, sizeof entry, "%s/%s.rkco", cache.dir, hex);
    atexit(remove_dir);
}

static uint64_t le64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* The layout of cache.h, checked field by field. */
static int well_formed(const unsigned char *b, size_t n, const unsigned char *digest) {
    static const unsigned char magic[8] = "RKCACHE";
    static const unsigned char version[8] = {RK_CACHE_FORMAT, 0, 0, 0, 0, 0, 0, 0}; /* + reserved */
    if (n < RK_CACHE_HEADER_SIZE || memcmp(b, magic, 8) != 0 || memcmp(b + 8, version, 8) != 0) return 0;
    if (digest && memcmp(b + 16, digest, 32) != 0) return 0;
    if (le64(b + 48) != n - RK_CACHE_HEADER_SIZE) return 0;
    unsigned char sum[32];
    rk_sha256 s;
    rk_sha256_init(&s);
    rk_sha256_update(&s, b + RK_CACHE_HEADER_SIZE, n - RK_CACHE_HEADER_SIZE);
    rk_sha256_final(&s, sum);
    return memcmp(sum, b + 56, 32) == 0;
}

static void check_parse(const unsigned char *b, size_t n, const unsigned char *digest) {
    const unsigned char *payload = (const unsigned char *)1;
    size_t len = 12345;
    char why[256];
    memset(why, 'x', sizeof why);
    rk_cache_rc rc = rk_cache_parse(b, n, digest, &payload, &len, why, sizeof why);
    FUZZ_CHECK(memchr(why, '\0', sizeof why) != NULL, "reason not terminated");
    if (well_formed(b, n, digest)) {
        FUZZ_CHECK(rc == RK_CACHE_OK, "a valid entry refused: %s", why);
        FUZZ_CHECK(payload == b + RK_CACHE_HEADER_SIZE && len == n - RK_CACHE_HEADER_SIZE && why[0] == '\0', "payload");
    } else {
        FUZZ_CHECK(rc == RK_CACHE_MISS, "an invalid entry accepted (rc %d)", (int)rc);
        FUZZ_CHECK(payload == NULL && len == 0 && why[0] != '\0', "outputs of a miss");
    }
    /* without outputs or a message buffer */
    FUZZ_CHECK(rk_cache_parse(b, n, digest, NULL, NULL, NULL, 0) == rc, "result depends on the outputs");
}

static void check_get(const unsigned char *b, size_t n) {
    int fd = open(entry, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    FUZZ_CHECK(fd >= 0, "open %s: %s", entry, strerror(errno));
    for (size_t off = 0; off < n;) {
        ssize_t w = write(fd, b + off, n - off);
        FUZZ_CHECK(w > 0, "write %s: %s", entry, strerror(errno));
        off += (size_t)w;
    }
    close(fd);
    unsigned char *data = (unsigned char *)1;
    size_t len = 12345;
    char why[1024];
    rk_cache_rc rc = rk_cache_get(&cache, DIGEST, &data, &len, why, sizeof why);
    struct stat st;
    int present = lstat(entry, &st) == 0;
    if (well_formed(b, n, DIGEST)) {
        FUZZ_CHECK(rc == RK_CACHE_OK, "a valid entry refused: %s", why);
        FUZZ_CHECK(data != NULL && len == n - RK_CACHE_HEADER_SIZE, "payload");
        FUZZ_CHECK(len == 0 || memcmp(data, b + RK_CACHE_HEADER_SIZE, len) == 0, "payload bytes");
        FUZZ_CHECK(present, "a valid entry was removed");
        free(data);
        unlink(entry);
    } else {
        FUZZ_CHECK(rc == RK_CACHE_MISS, "an invalid entry accepted (rc %d): %s", (int)rc, why);
        FUZZ_CHECK(data == NULL && len == 0, "outputs of a miss");
        FUZZ_CHECK(strstr(why, "corrupt cache entry") && strstr(why, "; removed"), "reason: %s", why);
        FUZZ_CHECK(!present, "the invalid entry was left in place");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    open_cache();
    check_parse(data, size, DIGEST);
    check_parse(data, size, NULL);
    check_get(data, size);
    return 0;
}
