/* On-disk code-object cache: one entry = one file, written atomically, validated on every read.
 *
 * Layout of an entry file <dir>/<hex digest>.rkco:
 *   offset 0   8 bytes  magic "RKCACHE\0"
 *          8   4 bytes  format version (little endian, RK_CACHE_FORMAT)
 *         12   4 bytes  reserved, zero
 *         16  32 bytes  the entry's key digest (must equal the file name's digest)
 *         48   8 bytes  payload length (little endian)
 *         56  32 bytes  SHA-256 of the payload
 *         88   ...      payload (the code object)
 * Writers: temp file in the same directory, write, fsync, close, re-read and check, rename.
 * Readers take no lock; a corrupt, truncated or foreign entry is removed (and the caller rebuilds).
 * An advisory flock(2) on <digest>.lock lets one process compile while others wait; the kernel
 * drops it when a process dies, and correctness never depends on it. */
#ifndef RK_CACHE_H
#define RK_CACHE_H

#include <stddef.h>
#include <stdint.h>

#define RK_CACHE_FORMAT 1u
#define RK_CACHE_HEADER_SIZE 88             /* bytes before the payload */
#define RK_CACHE_MAX_FILE ((size_t)1 << 30) /* larger entry files are refused (and removed) */

/* ---- SHA-256 -------------------------------------------------------------------------------- */
typedef struct rk_sha256 {
    uint32_t h[8];
    uint64_t n;
    unsigned char buf[64];
    size_t fill;
} rk_sha256;
void rk_sha256_init(rk_sha256 *s);
void rk_sha256_update(rk_sha256 *s, const void *p, size_t n);
void rk_sha256_final(rk_sha256 *s, unsigned char out[32]);
/* A length-prefixed field (8-byte little-endian length, then the bytes): keys built from fields
 * cannot collide by shifting bytes between neighbours. */
void rk_sha256_field(rk_sha256 *s, const void *p, size_t n);
void rk_sha256_hex(const unsigned char d[32], char out[65]);

/* ---- the cache ---------------------------------------------------------------------------------- */
/* Every function below is thread-safe and may run in many processes over one directory at once.
 * Messages go to why when why is non-NULL and why_cap > 0 (truncated to fit; "" when there is nothing
 * to say). They name the file or directory involved; I/O failures end with the system's error text,
 * e.g. "cannot write cache entry /c/<hex>.rkco: No space left on device". An unusable cache
 * (usable == 0) misses every get, fails every put with RK_CACHE_ERROR, and lock and clear return -1. */
typedef enum rk_cache_rc {
    RK_CACHE_OK = 0,
    RK_CACHE_MISS = 1,    /* no entry, or an invalid one that was removed */
    RK_CACHE_ERROR = -1,  /* I/O error; message says */
    RK_CACHE_REFUSED = 2, /* a read-only layer's entry that another user could write, or this one cannot read */
} rk_cache_rc;

typedef struct rk_cache {
    char dir[4096];
    int usable; /* 0: memory-only (directory unusable; reason in why) */
    char why[512];
    uint64_t dev, ino; /* the directory rk_cache_open checked: every later operation insists on it */
    int readonly;      /* opened by rk_cache_open_ro */
} rk_cache;

/* Opens (creating with mode 0700 if needed, missing parents 0755) the cache directory; trailing
 * slashes are dropped from c->dir. A directory that cannot be created or written, is a symlink, is not
 * owned by this user, or is writable by group/others gives usable = 0 with the reason in c->why, e.g.
 * "cache directory /x is writable by others (mode 0777); using memory-only caching"; the caller warns
 * once and keeps memory-only caching. Never fails otherwise.
 * The checks hold for the cache's whole life: every function below opens the directory without
 * following a symlink and goes on only while it is the same directory (device and inode), still owned
 * by this user and not writable by group/others. A directory removed or replaced meanwhile (by a
 * symlink or another directory) misses every get (why = ""), fails every put with RK_CACHE_ERROR
 * ("cache directory /x was replaced by a symbolic link", "cannot open cache directory /x: No such file
 * or directory"), and lock and clear return -1; nothing is ever read or written through it. */
void rk_cache_open(rk_cache *c, const char *dir);

/* The root, the top-level system directories (/bin, /boot, /dev, /etc, /lib*, /opt, /proc, /run, /sbin,
 * /srv, /sys, /usr, /var, /home, /tmp, ...) and anything under /proc or /sys, after realpath(3), are
 * refused by rk_cache_open too: "cache directory /x is the system directory /usr; refusing to write
 * kernels there; using memory-only caching" (as root every ownership check would pass there).
 *
 * A read-only layer: a directory of entries made elsewhere (a cache baked into a container image, a
 * bundle of `ropekv-gen build --bundle`), searched but never written. Nothing is created; the
 * directory must not be a symlink, must be owned by this user or by root, not writable by group or
 * others, and readable, checked here and before every read as for rk_cache_open (reason in c->why:
 * "read-only cache layer /x is writable by others (mode 0777); not used"). Each entry file is trusted as
 * the directory is: rk_cache_get opens it without following a symlink and, on that descriptor, refuses
 * one owned by neither this user nor root or writable by group or others, and one this user may not
 * open (EACCES): RK_CACHE_REFUSED with why = "cache entry <path> is owned by uid 65534, neither this
 * user (uid 1000) nor root; not used (a read-only layer)" (or "... is writable by others (mode 0666)
 * ...", "cannot open cache entry <path>: Permission denied; ..."); nothing of it is read. Otherwise
 * rk_cache_get reads and validates entries as for a writable cache, but an invalid entry is only
 * reported ("corrupt cache entry <path>: <reason>; skipped (a read-only layer)"), never removed; put
 * fails, lock and clear return -1. */
void rk_cache_open_ro(rk_cache *c, const char *dir);

/* 1 when real (a path after realpath(3)) is one of those system directories, which the dump directory
 * (runtime/dump.h) refuses too. */
int rk_system_dir(const char *real);

/* Reads the entry for digest. On RK_CACHE_OK *data (malloc'd, the caller frees; non-NULL even for an
 * empty payload) / *len hold the payload. No entry: RK_CACHE_MISS with why = "". Invalid entries
 * (corrupt, truncated, foreign, a symlink/directory/FIFO in the entry's place) are removed, unless
 * replaced meanwhile, and reported as RK_CACHE_MISS with why = "corrupt cache entry <path>: <reason>;
 * removed" (or "; left alone: it was replaced meanwhile", "; cannot remove it: <error>").
 * RK_CACHE_ERROR: the file exists but could not be read (EACCES, EIO, out of memory). RK_CACHE_REFUSED
 * (read-only layers only, above): the file is not trusted or not readable; it is left alone. */
rk_cache_rc rk_cache_get(const rk_cache *c, const unsigned char digest[32], unsigned char **data, size_t *len,
                         char *why, size_t why_cap);

/* Writes the entry atomically (see above); concurrent writers of one digest each publish a whole,
 * valid file and the last rename wins. On RK_CACHE_ERROR (full disk, file size limit, unusable cache,
 * len + header over RK_CACHE_MAX_FILE) no temp file is left behind and the existing entry, if any, is
 * untouched. */
rk_cache_rc rk_cache_put(const rk_cache *c, const unsigned char digest[32], const void *data, size_t len, char *why,
                         size_t why_cap);

/* Advisory cross-process lock for one digest: returns a descriptor to pass to unlock, or -1 (then
 * the caller simply goes on without it). Blocks while another live process, or another thread with
 * its own rk_cache_lock descriptor, holds it. The lock file <digest>.lock stays in the directory. */
int rk_cache_lock(const rk_cache *c, const unsigned char digest[32]);
void rk_cache_unlock(int fd);

/* Removes every entry, lock and stale temp file ropekv made in the directory (names of exactly 64
 * lowercase hex digits followed by .rkco, .lock or .rkco.tmp.*; not recursive; symlinks are removed,
 * never followed); returns how many were removed, or -1 (unusable cache, unreadable directory).
 * Other files are left alone. A put running meanwhile may fail (its temp file vanished); none is
 * corrupted. */
int rk_cache_clear(const rk_cache *c);
/* Removes the temporary entry files (<digest>.rkco.tmp.<pid>.<n>) that writers killed mid-write left in c's
 * writable directory: regular files owned by this user, older than max_age_s seconds, whose pid is no running
 * process. rk_cache_open runs it with RK_CACHE_TMP_AGE; returns the number removed (-1: the directory cannot be
 * read). A sweep racing a writer or another sweep is harmless (a live writer's pid is running). */
int rk_cache_sweep_tmp(const rk_cache *c, long max_age_s);
#define RK_CACHE_TMP_AGE 600L

/* Parses an entry held in memory (the reader's validation, also the fuzz target):
 * RK_CACHE_OK with *payload pointing inside buf, else RK_CACHE_MISS with why (a short reason such as
 * "checksum mismatch"). Reads only buf[0..n). digest NULL skips the foreign-entry check. */
rk_cache_rc rk_cache_parse(const unsigned char *buf, size_t n, const unsigned char digest[32],
                           const unsigned char **payload, size_t *payload_len, char *why, size_t why_cap);

#endif
