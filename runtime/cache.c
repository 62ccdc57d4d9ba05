/* The on-disk code-object cache (layout and rules in cache.h).
 *
 * Every function is thread-safe and safe to call from several processes at once: writers publish
 * only through rename(2) of a complete, verified file, readers validate everything they read, and
 * the only shared state is the temp-file counter below. Error messages follow one convention:
 * "<what failed> <path>: <strerror text>", always naming the file or directory involved.
 * Every operation first opens the directory itself (open_dir: no symlink, the same directory that
 * rk_cache_open checked, still private) and then works relative to that descriptor, so a directory
 * that is removed, or replaced by a symlink or another directory, while a process uses it is never
 * written through. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include "cache.h"
#include "rk.h"

#define HDR RK_CACHE_HEADER_SIZE
#define PATH_CAP (sizeof(((rk_cache *)0)->dir) + 128)
#define MEMORY_ONLY "; using memory-only caching"

static const unsigned char MAGIC[8] = {'R', 'K', 'C', 'A', 'C', 'H', 'E', '\0'};

/* Makes temp names unique between threads of one process; the pid separates processes. */
static atomic_uint tmp_counter;

/* strerror is not required to be thread-safe; this is. */
typedef struct errtext {
    char s[128];
} errtext;
static errtext errstr(int e) {
    errtext t;
    if (strerror_r(e, t.s, sizeof t.s) != 0) snprintf(t.s, sizeof t.s, "error %d", e);
    return t;
}

static void put_le32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put_le64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get_le32(const unsigned char *p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = v << 8 | p[i];
    return v;
}
static uint64_t get_le64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

#define NAME_CAP 128

/* <hex digest><suffix>, and <dir>/<that> (for messages) */
static void entry_name(const unsigned char digest[32], const char *suffix, char *name) {
    char hex[65];
    rk_sha256_hex(digest, hex);
    snprintf(name, NAME_CAP, "%s%s", hex, suffix);
}
static void entry_path(const rk_cache *c, const char *name, char *out) {
    snprintf(out, PATH_CAP, "%s/%s", c->dir, name);
}

/* ---- opening the directory ---------------------------------------------------------------------- */

/* mkdir -p: the last component gets `leaf`, missing parents 0755. Returns 0 or -1 with errno. */
static int make_dirs(char *path, mode_t leaf) {
    if (mkdir(path, leaf) == 0 || errno == EEXIST) return 0;
    if (errno != ENOENT) return -1;
    for (char *p = path + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        int r = mkdir(path, 0755);
        int e = errno;
        *p = '/';
        if (r != 0 && e != EEXIST) {
            errno = e;
            return -1;
        }
    }
    if (mkdir(path, leaf) == 0 || errno == EEXIST) return 0;
    return -1;
}

/* A directory of the system (after realpath) that is never a writable cache: the root, the top-level
 * system directories themselves, and anything under the kernel's pseudo file systems. */
int rk_system_dir(const char *real) {
    static const char *const top[] = {"/",       "/bin",  "/boot", "/dev",   "/etc",  "/lib", "/lib32", "/lib64",
                                      "/libx32", "/proc", "/run",  "/sbin",  "/srv",  "/sys", "/usr",   "/var",
                                      "/opt",    "/home", "/mnt",  "/media", "/root", "/tmp"};
    for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
        if (strcmp(real, top[i]) == 0) return 1;
    return strncmp(real, "/proc/", 6) == 0 || strncmp(real, "/sys/", 5) == 0;
}

/* Copies dir into c->dir with its own name last, so that lstat and O_NOFOLLOW see the directory's entry itself:
 * trailing slashes and "." components are dropped ("dir/", "dir/." and "dir/./" would make them follow a symlink
 * named dir), and a last component ".." (the parent of what the rest names, perhaps through a symlink) is refused.
 * 0, or -1 with the reason in c->why. */
static int set_dir(rk_cache *c, const char *dir) {
    if (!dir || !*dir) {
        rk_say(c->why, sizeof c->why, "no cache directory given" MEMORY_ONLY);
        return -1;
    }
    size_t n = strlen(dir);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)dir[i] < 0x20 || dir[i] == 0x7f) { /* never a path meant, and unsafe in messages */
            char shown[1024];
            rk_say(c->why, sizeof c->why, "cache directory '%s' holds control characters" MEMORY_ONLY,
                   rk_printable(dir, shown, sizeof shown));
            return -1;
        }
    for (;;) {
        while (n > 1 && dir[n - 1] == '/') n--;
        if (n > 2 && dir[n - 1] == '.' && dir[n - 2] == '/') n -= 2; /* "dir/." */
        else if (n == 2 && dir[0] == '/' && dir[1] == '.') n = 1;    /* "/." */
        else break;
    }
    if ((n == 2 || (n > 2 && dir[n - 3] == '/')) && dir[n - 1] == '.' && dir[n - 2] == '.') {
        rk_say(c->why, sizeof c->why, "cache directory %.*s ends in '..': name the directory itself" MEMORY_ONLY,
               (int)(n < 1024 ? n : 1024), dir);
        return -1;
    }
    if (n + 1 > sizeof c->dir - 128) {
        rk_say(c->why, sizeof c->why, "cache directory path is too long (%zu bytes)" MEMORY_ONLY, n);
        return -1;
    }
    memcpy(c->dir, dir, n);
    c->dir[n] = '\0';
    return 0;
}

void rk_cache_open_ro(rk_cache *c, const char *dir) {
    if (!c) return;
    memset(c, 0, sizeof *c);
    c->readonly = 1;
    if (set_dir(c, dir) != 0) return;
    const char *d = c->dir;
    struct stat st;
    if (lstat(d, &st) != 0) {
        errtext e = errstr(errno);
        rk_say(c->why, sizeof c->why, "cannot inspect read-only cache layer %s: %s; not used", d, e.s);
    } else if (S_ISLNK(st.st_mode)) {
        rk_say(c->why, sizeof c->why, "read-only cache layer %s is a symbolic link; not used", d);
    } else if (!S_ISDIR(st.st_mode)) {
        rk_say(c->why, sizeof c->why, "read-only cache layer %s is not a directory; not used", d);
    } else if (st.st_uid != geteuid() && st.st_uid != 0) {
        rk_say(c->why, sizeof c->why,
               "read-only cache layer %s is owned by uid %lu, neither this user (uid %lu) nor root; not used", d,
               (unsigned long)st.st_uid, (unsigned long)geteuid());
    } else if (st.st_mode & 022) {
        rk_say(c->why, sizeof c->why, "read-only cache layer %s is writable by %s (mode 0%03o); not used", d,
               (st.st_mode & 002) ? "others" : "its group", (unsigned)(st.st_mode & 07777));
    } else if (access(d, R_OK | X_OK) != 0) {
        errtext e = errstr(errno);
        rk_say(c->why, sizeof c->why, "read-only cache layer %s is not readable: %s; not used", d, e.s);
    } else {
        c->dev = (uint64_t)st.st_dev;
        c->ino = (uint64_t)st.st_ino;
        c->usable = 1;
    }
}

void rk_cache_open(rk_cache *c, const char *dir) {
    if (!c) return;
    memset(c, 0, sizeof *c);
    if (set_dir(c, dir) != 0) return;
    const char *d = c->dir;
    const size_t n = strlen(d);

    char tmp[sizeof c->dir];
    memcpy(tmp, c->dir, n + 1);
    if (make_dirs(tmp, 0700) != 0) {
        errtext e = errstr(errno);
        rk_say(c->why, sizeof c->why, "cannot create cache directory %s: %s" MEMORY_ONLY, d, e.s);
        return;
    }
    char real[PATH_MAX];
    if (realpath(d, real) && rk_system_dir(real)) {
        rk_say(c->why, sizeof c->why,
               "cache directory %s is the system directory %s; refusing to write kernels there" MEMORY_ONLY, d, real);
        return;
    }
    struct stat st;
    if (lstat(d, &st) != 0) {
        errtext e = errstr(errno);
        rk_say(c->why, sizeof c->why, "cannot inspect cache directory %s: %s" MEMORY_ONLY, d, e.s);
        return;
    }
    if (S_ISLNK(st.st_mode)) {
        rk_say(c->why, sizeof c->why, "cache directory %s is a symbolic link" MEMORY_ONLY, d);
        return;
    }
    if (!S_ISDIR(st.st_mode)) {
        rk_say(c->why, sizeof c->why, "cache directory %s is not a directory" MEMORY_ONLY, d);
        return;
    }
    if (st.st_uid != geteuid()) {
        rk_say(c->why, sizeof c->why, "cache directory %s is owned by uid %lu, not by this user (uid %lu)" MEMORY_ONLY,
               d, (unsigned long)st.st_uid, (unsigned long)geteuid());
        return;
    }
    if (st.st_mode & 022) {
        rk_say(c->why, sizeof c->why, "cache directory %s is writable by %s (mode 0%03o)" MEMORY_ONLY, d,
               (st.st_mode & 002) ? "others" : "its group", (unsigned)(st.st_mode & 07777));
        return;
    }
    if (access(d, W_OK | X_OK) != 0) {
        errtext e = errstr(errno);
        rk_say(c->why, sizeof c->why, "cache directory %s is not writable: %s" MEMORY_ONLY, d, e.s);
        return;
    }
    c->dev = (uint64_t)st.st_dev;
    c->ino = (uint64_t)st.st_ino;
    c->usable = 1;
    (void)rk_cache_sweep_tmp(c, RK_CACHE_TMP_AGE); /* what writers killed mid-write left */
}

/* Opens the directory for one operation: not through a symlink, and only while it is still the
 * directory rk_cache_open inspected, owned by this user and not writable by group or others.
 * Returns the descriptor, or -1 with the reason in why. */
static int open_dir(const rk_cache *c, char *why, size_t cap) {
    int fd = open(c->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        struct stat st;
        if ((e == ELOOP || e == ENOTDIR) && lstat(c->dir, &st) == 0 && S_ISLNK(st.st_mode)) {
            rk_say(why, cap, "cache directory %s was replaced by a symbolic link", c->dir);
        } else {
            errtext t = errstr(e);
            rk_say(why, cap, "cannot open cache directory %s: %s", c->dir, t.s);
        }
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || (uint64_t)st.st_dev != c->dev || (uint64_t)st.st_ino != c->ino) {
        rk_say(why, cap, "cache directory %s was replaced by another directory", c->dir);
        close(fd);
        return -1;
    }
    if ((st.st_uid != geteuid() && !(c->readonly && st.st_uid == 0)) || (st.st_mode & 022)) {
        rk_say(why, cap, "cache directory %s changed owner or permissions (uid %lu, mode 0%03o)", c->dir,
               (unsigned long)st.st_uid, (unsigned)(st.st_mode & 07777));
        close(fd);
        return -1;
    }
    return fd;
}

/* ---- parsing and reading entries ------------------------------------------------------------------ */

rk_cache_rc rk_cache_parse(const unsigned char *buf, size_t n, const unsigned char digest[32],
                           const unsigned char **payload, size_t *payload_len, char *why, size_t why_cap) {
    if (payload) *payload = NULL;
    if (payload_len) *payload_len = 0;
    if (!buf || n < HDR) {
        if (n == 0) rk_say(why, why_cap, "empty file");
        else rk_say(why, why_cap, "truncated: %zu bytes, shorter than the %d-byte header", n, HDR);
        return RK_CACHE_MISS;
    }
    if (memcmp(buf, MAGIC, sizeof MAGIC) != 0) {
        rk_say(why, why_cap, "bad magic (not a ropekv cache entry)");
        return RK_CACHE_MISS;
    }
    uint32_t version = get_le32(buf + 8);
    if (version != RK_CACHE_FORMAT) {
        rk_say(why, why_cap, "format version %lu, expected %u", (unsigned long)version, RK_CACHE_FORMAT);
        return RK_CACHE_MISS;
    }
    if (get_le32(buf + 12) != 0) {
        rk_say(why, why_cap, "reserved header field is not zero");
        return RK_CACHE_MISS;
    }
    if (digest && memcmp(buf + 16, digest, 32) != 0) {
        rk_say(why, why_cap, "foreign entry (its key digest differs from the file name's)");
        return RK_CACHE_MISS;
    }
    uint64_t len = get_le64(buf + 48);
    size_t rest = n - HDR;
    if (len > rest) {
        rk_say(why, why_cap, "truncated: header says %llu payload bytes, file holds %zu", (unsigned long long)len,
               rest);
        return RK_CACHE_MISS;
    }
    if (len < rest) {
        rk_say(why, why_cap, "%zu bytes of trailing garbage after the payload", rest - (size_t)len);
        return RK_CACHE_MISS;
    }
    unsigned char sum[32];
    rk_sha256 s;
    rk_sha256_init(&s);
    rk_sha256_update(&s, buf + HDR, rest);
    rk_sha256_final(&s, sum);
    if (memcmp(sum, buf + 56, 32) != 0) {
        rk_say(why, why_cap, "checksum mismatch");
        return RK_CACHE_MISS;
    }
    if (payload) *payload = buf + HDR;
    if (payload_len) *payload_len = rest;
    rk_say(why, why_cap, "%s", "");
    return RK_CACHE_OK;
}

typedef enum load_rc { LOAD_OK, LOAD_MISSING, LOAD_INVALID, LOAD_REFUSED, LOAD_ERROR } load_rc;

/* Reads the whole entry file `name` of the directory dfd (path: the same, for messages) without
 * following a symlink or blocking on a FIFO. On LOAD_OK *buf (malloc'd) holds *n bytes; on
 * LOAD_INVALID `what` says why the file cannot be an entry. In both cases *st describes the file
 * (st_mode is 0 when nothing could be inspected). A read-only layer's entry (layer = 1) is trusted as
 * its directory is: LOAD_REFUSED, with the reason in `what`, for a file owned by neither this user nor
 * root, writable by group or others (both checked on the opened descriptor), or that this user may not
 * open (EACCES). */
static load_rc load_file(int dfd, const char *name, const char *path, int layer, unsigned char **buf, size_t *n,
                         struct stat *st, char *what, size_t what_cap) {
    *buf = NULL;
    *n = 0;
    memset(st, 0, sizeof *st);
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        int e = errno;
        if (e == ENOENT) return LOAD_MISSING;
        if (e == ELOOP && fstatat(dfd, name, st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st->st_mode)) {
            rk_say(what, what_cap, "a symbolic link, not a file");
            return LOAD_INVALID;
        }
        errtext t = errstr(e);
        rk_say(what, what_cap, "cannot open cache entry %s: %s", path, t.s);
        return layer && e == EACCES ? LOAD_REFUSED : LOAD_ERROR;
    }
    if (fstat(fd, st) != 0) {
        errtext t = errstr(errno);
        rk_say(what, what_cap, "cannot inspect cache entry %s: %s", path, t.s);
        close(fd);
        return LOAD_ERROR;
    }
    if (!S_ISREG(st->st_mode)) {
        rk_say(what, what_cap, S_ISDIR(st->st_mode) ? "a directory, not a file" : "not a regular file");
        close(fd);
        return LOAD_INVALID;
    }
    if (layer && st->st_uid != geteuid() && st->st_uid != 0) {
        rk_say(what, what_cap, "cache entry %s is owned by uid %lu, neither this user (uid %lu) nor root", path,
               (unsigned long)st->st_uid, (unsigned long)geteuid());
        close(fd);
        return LOAD_REFUSED;
    }
    if (layer && (st->st_mode & 022)) {
        rk_say(what, what_cap, "cache entry %s is writable by %s (mode 0%03o)", path,
               (st->st_mode & 002) ? "others" : "its group", (unsigned)(st->st_mode & 07777));
        close(fd);
        return LOAD_REFUSED;
    }
    if (st->st_size < HDR || (uint64_t)st->st_size > RK_CACHE_MAX_FILE) {
        if (st->st_size == 0) rk_say(what, what_cap, "empty file");
        else if (st->st_size < HDR)
            rk_say(what, what_cap, "truncated: %lld bytes, shorter than the %d-byte header", (long long)st->st_size,
                   HDR);
        else rk_say(what, what_cap, "implausible size (%lld bytes)", (long long)st->st_size);
        close(fd);
        return LOAD_INVALID;
    }
    size_t want = (size_t)st->st_size, got = 0;
    unsigned char *b = malloc(want);
    if (!b) {
        rk_say(what, what_cap, "out of memory reading cache entry %s (%zu bytes)", path, want);
        close(fd);
        return LOAD_ERROR;
    }
    while (got < want) {
        ssize_t r = read(fd, b + got, want - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            errtext t = errstr(errno);
            rk_say(what, what_cap, "cannot read cache entry %s: %s", path, t.s);
            free(b);
            close(fd);
            return LOAD_ERROR;
        }
        if (r == 0) /* shrank under us: the parser reports it as truncated */
            break;
        got += (size_t)r;
    }
    close(fd);
    *buf = b;
    *n = got;
    return LOAD_OK;
}

static int same_file(const struct stat *a, const struct stat *b) {
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
           (a->st_mode & S_IFMT) == (b->st_mode & S_IFMT);
}

/* Removes the invalid file `name` of dfd unless it was replaced since it was inspected (st). Appends
 * the outcome ("; removed", ...) to why. */
static void remove_invalid(int dfd, const char *name, const struct stat *st, char *why, size_t cap) {
    struct stat now;
    const char *outcome = "; removed";
    errtext t = {{0}};
    if (fstatat(dfd, name, &now, AT_SYMLINK_NOFOLLOW) != 0) {
        outcome = "; already removed";
    } else if (!same_file(st, &now)) {
        outcome = "; left alone: it was replaced meanwhile";
    } else if (unlinkat(dfd, name, S_ISDIR(now.st_mode) ? AT_REMOVEDIR : 0) != 0 && errno != ENOENT) {
        t = errstr(errno);
        outcome = "; cannot remove it: ";
    }
    if (why && cap) {
        size_t used = strlen(why);
        if (used < cap) snprintf(why + used, cap - used, "%s%s", outcome, t.s);
    }
}

rk_cache_rc rk_cache_get(const rk_cache *c, const unsigned char digest[32], unsigned char **data, size_t *len,
                         char *why, size_t why_cap) {
    if (data) *data = NULL;
    if (len) *len = 0;
    rk_say(why, why_cap, "%s", "");
    if (!c || !c->usable || !digest || !data || !len) return RK_CACHE_MISS;
    int dfd = open_dir(c, NULL, 0); /* a directory gone or replaced holds no entries (put reports it) */
    if (dfd < 0) return RK_CACHE_MISS;
    char name[NAME_CAP], path[PATH_CAP], what[256];
    entry_name(digest, ".rkco", name);
    entry_path(c, name, path);
    unsigned char *buf;
    size_t n;
    struct stat st;
    rk_cache_rc rc = RK_CACHE_MISS;
    load_rc lr = load_file(dfd, name, path, c->readonly, &buf, &n, &st, what, sizeof what);
    if (lr == LOAD_ERROR) {
        rk_say(why, why_cap, "%s", what);
        rc = RK_CACHE_ERROR;
    } else if (lr == LOAD_REFUSED) {
        rk_say(why, why_cap, "%s; not used (a read-only layer)", what);
        rc = RK_CACHE_REFUSED;
    } else if (lr != LOAD_MISSING) {
        const unsigned char *p = NULL;
        size_t plen = 0;
        if (lr == LOAD_OK && rk_cache_parse(buf, n, digest, &p, &plen, what, sizeof what) == RK_CACHE_OK) {
            memmove(buf, p, plen);
            *data = buf;
            *len = plen;
            close(dfd);
            return RK_CACHE_OK;
        }
        free(buf);
        rk_say(why, why_cap, "corrupt cache entry %s: %s", path, what);
        if (c->readonly) {
            size_t used = why ? strlen(why) : 0;
            if (why && used < why_cap) snprintf(why + used, why_cap - used, "; skipped (a read-only layer)");
        } else {
            remove_invalid(dfd, name, &st, why, why_cap);
        }
    }
    close(dfd);
    return rc;
}

/* ---- writing entries ------------------------------------------------------------------------------ */

static int write_all(int fd, const void *p, size_t n) {
    const unsigned char *b = p;
    while (n > 0) {
        size_t chunk = n > ((size_t)1 << 30) ? (size_t)1 << 30 : n;
        ssize_t w = write(fd, b, chunk);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return -1;
        if (w == 0) {
            errno = EIO;
            return -1;
        }
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

rk_cache_rc rk_cache_put(const rk_cache *c, const unsigned char digest[32], const void *data, size_t len, char *why,
                         size_t why_cap) {
    rk_say(why, why_cap, "%s", "");
    if (!c || !c->usable || c->readonly) {
        rk_say(why, why_cap,
               c && c->readonly ? "cache directory %s is a read-only layer" : "cache directory is not usable",
               c ? c->dir : "");
        return RK_CACHE_ERROR;
    }
    if (!digest || (!data && len)) {
        rk_say(why, why_cap, "invalid argument to rk_cache_put");
        return RK_CACHE_ERROR;
    }
    char name[NAME_CAP], tmpname[NAME_CAP], path[PATH_CAP], tmp[PATH_CAP];
    entry_name(digest, ".rkco", name);
    entry_path(c, name, path);
    if (len > RK_CACHE_MAX_FILE - HDR) {
        rk_say(why, why_cap, "cannot write cache entry %s: %zu bytes exceed the entry size limit", path, len);
        return RK_CACHE_ERROR;
    }

    unsigned char hdr[HDR];
    memset(hdr, 0, sizeof hdr);
    memcpy(hdr, MAGIC, sizeof MAGIC);
    put_le32(hdr + 8, RK_CACHE_FORMAT);
    memcpy(hdr + 16, digest, 32);
    put_le64(hdr + 48, (uint64_t)len);
    rk_sha256 s;
    rk_sha256_init(&s);
    rk_sha256_update(&s, data, len);
    rk_sha256_final(&s, hdr + 56);

    int dfd = open_dir(c, why, why_cap);
    if (dfd < 0) return RK_CACHE_ERROR;
    int fd = -1;
    for (int attempt = 0; attempt < 16 && fd < 0; attempt++) {
        char suffix[64];
        snprintf(suffix, sizeof suffix, ".rkco.tmp.%ld.%u", (long)getpid(), atomic_fetch_add(&tmp_counter, 1u));
        entry_name(digest, suffix, tmpname);
        entry_path(c, tmpname, tmp);
        fd = openat(dfd, tmpname, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0 && errno != EEXIST) break;
    }
    if (fd < 0) {
        errtext t = errstr(errno);
        rk_say(why, why_cap, "cannot create temporary cache file %s: %s", tmp, t.s);
        close(dfd);
        return RK_CACHE_ERROR;
    }

    const char *step = NULL;
    int e = 0;
    if (write_all(fd, hdr, sizeof hdr) != 0 || write_all(fd, data, len) != 0) step = "cannot write cache entry";
    else {
        int r;
        while ((r = fsync(fd)) != 0 && errno == EINTR)
            ;
        if (r != 0) step = "cannot flush cache entry";
    }
    if (step) e = errno;
    /* close reports deferred write errors (NFS, quota); EINTR still closes the descriptor on Linux */
    if (close(fd) != 0 && errno != EINTR && !step) {
        step = "cannot close cache entry";
        e = errno;
    }
    if (step) {
        errtext t = errstr(e);
        rk_say(why, why_cap, "%s %s: %s", step, path, t.s);
        unlinkat(dfd, tmpname, 0);
        close(dfd);
        return RK_CACHE_ERROR;
    }

    /* Read back what the file system holds, with the reader's own code, before publishing it. */
    unsigned char *back;
    size_t n;
    struct stat st;
    char what[256] = "it vanished";
    load_rc lr = load_file(dfd, tmpname, tmp, 0, &back, &n, &st, what, sizeof what);
    if (lr == LOAD_OK) {
        const unsigned char *p = NULL;
        size_t plen = 0;
        if (rk_cache_parse(back, n, digest, &p, &plen, what, sizeof what) == RK_CACHE_OK &&
            (plen != len || (len && memcmp(p, data, len) != 0))) {
            snprintf(what, sizeof what, "payload differs from what was written");
        }
    }
    free(back);
    if (what[0]) {
        rk_say(why, why_cap, "cache entry %s did not read back intact: %s", tmp, what);
        unlinkat(dfd, tmpname, 0);
        close(dfd);
        return RK_CACHE_ERROR;
    }

    if (renameat(dfd, tmpname, dfd, name) != 0) {
        errtext t = errstr(errno);
        rk_say(why, why_cap, "cannot rename %s to %s: %s", tmp, path, t.s);
        unlinkat(dfd, tmpname, 0);
        close(dfd);
        return RK_CACHE_ERROR;
    }
    (void)fsync(dfd);
    close(dfd);
    return RK_CACHE_OK;
}

/* ---- locks ------------------------------------------------------------------------------------------ */

int rk_cache_lock(const rk_cache *c, const unsigned char digest[32]) {
    if (!c || !c->usable || c->readonly || !digest) return -1;
    int dfd = open_dir(c, NULL, 0);
    if (dfd < 0) return -1;
    char name[NAME_CAP];
    entry_name(digest, ".lock", name);
    /* rk_cache_clear may unlink the lock file between our open and flock; then the lock we hold is on
     * an orphan, so take it again on the file that is there now. */
    for (int attempt = 0; attempt < 8; attempt++) {
        int fd = openat(dfd, name, O_RDONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600);
        if (fd < 0) break;
        struct stat st, now;
        if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
            close(fd);
            break;
        }
        int r;
        while ((r = flock(fd, LOCK_EX)) != 0 && errno == EINTR)
            ;
        if (r != 0) {
            close(fd);
            break;
        }
        if (fstatat(dfd, name, &now, AT_SYMLINK_NOFOLLOW) == 0 && now.st_dev == st.st_dev && now.st_ino == st.st_ino) {
            close(dfd);
            return fd;
        }
        close(fd);
    }
    close(dfd);
    return -1;
}

void rk_cache_unlock(int fd) {
    if (fd < 0) return;
    (void)flock(fd, LOCK_UN);
    close(fd);
}

/* ---- clearing ----------------------------------------------------------------------------------------- */

/* <64 lowercase hex>.rkco, .lock or .rkco.tmp.<anything> */
static int is_ours(const char *name) {
    for (int i = 0; i < 64; i++) {
        char ch = name[i];
        if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f'))) return 0;
    }
    const char *rest = name + 64;
    return strcmp(rest, ".rkco") == 0 || strcmp(rest, ".lock") == 0 || strncmp(rest, ".rkco.tmp.", 10) == 0;
}

/* Removes the entries of the cache directory that are ours (is_ours) and that want(dfd, name, arg) picks: how many, or
 * -1 where the directory cannot be read or written. */
static int remove_ours(const rk_cache *c, int (*want)(int dfd, const char *name, const void *arg), const void *arg) {
    if (!c || !c->usable || c->readonly) return -1;
    int dfd = open_dir(c, NULL, 0);
    if (dfd < 0) return -1;
    DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        return -1;
    }
    int removed = 0;
    struct dirent *ent;
    while ((ent = readdir(d)) != NULL)
        if (is_ours(ent->d_name) && want(dfd, ent->d_name, arg) && unlinkat(dfd, ent->d_name, 0) == 0) removed++;
    closedir(d);
    return removed;
}

typedef struct tmp_age {
    time_t now;
    long max_age_s;
} tmp_age;

/* A temporary file (<key>.rkco.tmp.<pid>.<n>) of this user's, older than the age, whose writer is gone. */
static int stale_tmp(int dfd, const char *name, const void *arg) {
    const tmp_age *age = arg;
    if (strncmp(name + 64, ".rkco.tmp.", 10) != 0) return 0;
    char *end;
    const long pid = strtol(name + 74, &end, 10);
    struct stat st;
    if (end == name + 74 || *end != '.' || pid <= 0 || fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
        !S_ISREG(st.st_mode) || st.st_uid != geteuid() || age->now - st.st_mtime <= age->max_age_s)
        return 0;
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH; /* else its writer may still be writing */
}

static int every(int dfd, const char *name, const void *arg) {
    (void)dfd, (void)name, (void)arg;
    return 1;
}

int rk_cache_sweep_tmp(const rk_cache *c, long max_age_s) {
    const tmp_age age = {time(NULL), max_age_s};
    return remove_ours(c, stale_tmp, &age);
}

int rk_cache_clear(const rk_cache *c) { return remove_ours(c, every, NULL); }
