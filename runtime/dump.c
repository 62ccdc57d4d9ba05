/* Replayable bug reports (runtime/dump.h, docs/dump.md): the policy, the writer and the reader of the format. */
#include "dump.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache.h"
#include "proc.h"

static const unsigned char MAGIC[8] = {'R', 'K', 'D', 'U', 'M', 'P', '\0', '\0'};

/* ---- the policy ------------------------------------------------------------------------------------------- */

/* A whole decimal number in [lo, hi] of the n bytes at s: 0, or -1. */
static int number(const char *s, size_t n, int64_t lo, int64_t hi, int64_t *out) {
    if (n == 0 || n > 19) return -1;
    int64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        v = v * 10 + (s[i] - '0');
    }
    if (v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

ropekv_status rk_dump_policy_parse(const char *when, const char *max_bytes, rk_dump_policy *p, char *why, size_t cap) {
    memset(p, 0, sizeof *p);
    p->max_bytes = RK_DUMP_MAX_BYTES_DEFAULT;
    char shown[256];
    if (max_bytes && number(max_bytes, strlen(max_bytes), 1, INT64_MAX, &p->max_bytes) != 0) {
        rk_say(why, cap, "dump max bytes '%s': expected a whole number of bytes >= 1",
               rk_printable(max_bytes, shown, sizeof shown));
        return ROPEKV_ERR_ARG;
    }
    if (!when) {
        p->first = 1;
        return ROPEKV_OK;
    }
    const char *s = when;
    do {
        const size_t n = strcspn(s, ",");
        if (n == 5 && strncmp(s, "first", 5) == 0) p->first = 1;
        else if (n == 4 && strncmp(s, "fail", 4) == 0) p->fail = 1;
        else if (n > 6 && strncmp(s, "every:", 6) == 0 && number(s + 6, n - 6, 1, INT64_MAX, &p->every) == 0) {
        } else {
            rk_say(why, cap, "dump when '%s': expected first, fail or every:N (N >= 1), separated by commas",
                   rk_printable(when, shown, sizeof shown));
            return ROPEKV_ERR_ARG;
        }
        s += n;
    } while (*s++ == ',');
    return ROPEKV_OK;
}

const char *rk_dump_reason_name(rk_dump_reason r) {
    return r == RK_DUMP_FIRST ? "first" : r == RK_DUMP_FAIL ? "fail" : r == RK_DUMP_EVERY ? "every" : "";
}

rk_dump_reason rk_dump_chosen(const rk_dump_policy *p, uint64_t n, int failed) {
    if (failed) return p->fail ? RK_DUMP_FAIL : RK_DUMP_NOT;
    if (p->first && n == 1) return RK_DUMP_FIRST;
    if (p->every > 0 && n % (uint64_t)p->every == 0) return RK_DUMP_EVERY;
    return RK_DUMP_NOT;
}

/* ---- the fields of ropekv_args, by name ------------------------------------------------------------------- */
typedef struct arg_field {
    const char *name;
    size_t at;
    int pointer; /* 1: a pointer field, 0: int64 */
} arg_field;

#define ARG_ROW_(type, name) \
    {#name, offsetof(ropekv_args, name), _Generic(((ropekv_args *)0)->name, int64_t : 0, default : 1)},
static const arg_field arg_fields[] = {RK_ARGS_CALLER(ARG_ROW_)};
#undef ARG_ROW_
enum { N_ARG_FIELDS = sizeof arg_fields / sizeof arg_fields[0] };
_Static_assert(N_ARG_FIELDS <= RK_DUMP_ARGS_MAX, "a dump holds every ropekv_args field");

static const arg_field *arg_field_named(const char *name) {
    for (int i = 0; i < N_ARG_FIELDS; i++)
        if (strcmp(arg_fields[i].name, name) == 0) return &arg_fields[i];
    return NULL;
}

/* ---- bytes ------------------------------------------------------------------------------------------------- */
typedef struct outbuf {
    unsigned char *p; /* NULL: only count */
    size_t n;
} outbuf;

static void put(outbuf *o, const void *src, size_t n) {
    if (o->p && n) memcpy(o->p + o->n, src, n);
    o->n += n;
}
static void put_u32(outbuf *o, uint32_t v) {
    unsigned char b[4];
    for (int i = 0; i < 4; i++) b[i] = (unsigned char)(v >> (8 * i));
    put(o, b, 4);
}
static void put_u64(outbuf *o, uint64_t v) {
    unsigned char b[8];
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
    put(o, b, 8);
}
static void put_str(outbuf *o, const char *s, size_t n) {
    put_u32(o, (uint32_t)n);
    put(o, s, n);
}
static void put_text(outbuf *o, const char *s) { put_str(o, s, strlen(s)); }

/* The string limits of the format: a field longer is refused by the reader (and cut by the writer). */
enum {
    LIB_MAX = 63,
    BACKEND_MAX = 15,
    TARGET_MAX = 95,
    ARCH_MAX = RK_NAME_MAX - 1,
    KEY_MAX = 191,
    NAME_MAX_ = 223,
    SPEC_MAX = 63,
    RECORD_MAX = 63,
    MESSAGE_MAX = 2047,
    FIELD_MAX = 31
};

static void put_cut(outbuf *o, const char *s, size_t max) {
    const size_t n = strlen(s);
    put_str(o, s, n < max ? n : max);
}

/* Everything before the tensors' bytes and the checksum (o->p NULL: only counted). */
static void put_head(outbuf *o, const rk_dump_launch *l) {
    put(o, MAGIC, 8);
    put_u32(o, RK_DUMP_FORMAT);
    put_u32(o, 0);
    put_cut(o, ROPEKV_VERSION_STRING, LIB_MAX);
    put_cut(o, l->backend, BACKEND_MAX);
    put_cut(o, l->device_target, TARGET_MAX);
    put_cut(o, l->d->arch->name, ARCH_MAX);
    put_cut(o, l->d->key, KEY_MAX);
    put_cut(o, l->d->name, NAME_MAX_);
    put_cut(o, l->v->spec, SPEC_MAX);
    put_cut(o, l->v->record ? l->v->record : "", RECORD_MAX);
    put_str(o, l->spec_text, l->spec_len);
    const ropekv_variant *v = l->v;
    const uint32_t enums[8] = {v->kv, v->q, v->positions, v->slots, v->q_dtype, v->layout, v->op, v->norm};
    for (int i = 0; i < 8; i++) put_u32(o, enums[i]);
    put_u32(o, (uint32_t)l->reason);
    put_u32(o, (uint32_t)l->status);
    put_u64(o, l->launch);
    put_cut(o, l->message ? l->message : "", MESSAGE_MAX);
    put_u32(o, N_ARG_FIELDS);
    for (int i = 0; i < N_ARG_FIELDS; i++) {
        put_text(o, arg_fields[i].name);
        put_u32(o, (uint32_t)arg_fields[i].pointer);
        uint64_t value;
        if (arg_fields[i].pointer) {
            const void *ptr;
            memcpy(&ptr, (const char *)l->a + arg_fields[i].at, sizeof ptr);
            value = (uint64_t)(uintptr_t)ptr;
        } else {
            int64_t x;
            memcpy(&x, (const char *)l->a + arg_fields[i].at, sizeof x);
            value = (uint64_t)x;
        }
        put_u64(o, value);
    }
    const int nt = l->pl ? l->pl->n_used : 0;
    put_u32(o, (uint32_t)nt);
}

/* ---- the directory ----------------------------------------------------------------------------------------- */
int rk_dumper_open(rk_dumper *d, const char *dir, const rk_dump_policy *p, char *why, size_t cap) {
    memset(d, 0, sizeof *d);
    d->policy = *p;
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)dir[i] < 0x20 || dir[i] == 0x7f) {
            rk_say(why, cap, "dump directory holds control characters");
            return -1;
        }
    if (n == 0 || n >= sizeof d->dir) {
        rk_say(why, cap, "dump directory path is empty or too long (%zu bytes)", n);
        return -1;
    }
    memcpy(d->dir, dir, n);
    d->dir[n] = '\0';
    if (mkdir(d->dir, 0700) != 0 && errno != EEXIST) {
        rk_say(why, cap, "cannot create dump directory %s: %s", d->dir, strerror(errno));
        return -1;
    }
    char real[PATH_MAX];
    struct stat st;
    if (realpath(d->dir, real) && rk_system_dir(real)) {
        rk_say(why, cap, "dump directory %s is the system directory %s; refusing to write dumps there", d->dir, real);
        return -1;
    }
    if (lstat(d->dir, &st) != 0) {
        rk_say(why, cap, "cannot inspect dump directory %s: %s", d->dir, strerror(errno));
        return -1;
    }
    if (S_ISLNK(st.st_mode) || !S_ISDIR(st.st_mode)) {
        rk_say(why, cap, "dump directory %s is %s", d->dir,
               S_ISLNK(st.st_mode) ? "a symbolic link" : "not a directory");
        return -1;
    }
    if (st.st_uid != geteuid()) {
        rk_say(why, cap, "dump directory %s is owned by uid %lu, not by this user (uid %lu)", d->dir,
               (unsigned long)st.st_uid, (unsigned long)geteuid());
        return -1;
    }
    if (st.st_mode & 022) {
        rk_say(why, cap, "dump directory %s is writable by %s (mode 0%03o)", d->dir,
               (st.st_mode & 002) ? "others" : "its group", (unsigned)(st.st_mode & 07777));
        return -1;
    }
    d->dev = (uint64_t)st.st_dev;
    d->ino = (uint64_t)st.st_ino;
    d->on = 1;
    return 0;
}

/* The directory for one write: not through a symbolic link, the one rk_dumper_open checked, still this user's and
 * not writable by group or others. The descriptor, or -1 with the reason in why. */
static int open_dir(const rk_dumper *d, char *why, size_t cap) {
    int fd = open(d->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        rk_say(why, cap, "cannot open dump directory %s: %s", d->dir, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || (uint64_t)st.st_dev != d->dev || (uint64_t)st.st_ino != d->ino ||
        st.st_uid != geteuid() || (st.st_mode & 022)) {
        rk_say(why, cap, "dump directory %s was replaced, or changed owner or permissions", d->dir);
        close(fd);
        return -1;
    }
    return fd;
}

/* ---- the caches' rows ---------------------------------------------------------------------------------------- */
void rk_dump_row_shape(const rk_desc *d, const rk_tensor *t, int64_t *row_bytes, int64_t *tail_bytes) {
    *row_bytes = rk_sym_size(d, t->dim[t->rank - 1]) * t->elem; /* the packed row after the strided dimensions */
    *tail_bytes = d->layout == ROPEKV_KV_PAGED && t->at == offsetof(ropekv_args, kv_cache) ? d->rec.tail_bytes : 0;
}

#define OFF_MAX ((int64_t)1 << 62)

/* a * b + c for a, b, c >= 0, or -1 past OFF_MAX */
static int64_t mul_add(int64_t a, int64_t b, int64_t c) {
    int64_t p, e;
    if (a < 0 || b < 0 || c < 0 || __builtin_mul_overflow(a, b, &p) || __builtin_add_overflow(p, c, &e) || e > OFF_MAX)
        return -1;
    return e;
}

int rk_dump_row_at(const rk_desc *d, const rk_tensor *t, const ropekv_args *a, int64_t slot, int64_t *row,
                   int64_t *tail) {
    int64_t st0, st1 = 0, tail_bytes, row_bytes;
    rk_dump_row_shape(d, t, &row_bytes, &tail_bytes);
    memcpy(&st0, (const char *)a + t->stride_at[0], sizeof st0);
    *tail = 0;
    if (t->rank == 2) { /* flat rows */
        *row = mul_add(mul_add(slot, st0, 0), t->elem, 0);
        return *row < 0 ? -1 : 0;
    }
    memcpy(&st1, (const char *)a + t->stride_at[1], sizeof st1);
    const int64_t B = a->kv_block_size;
    if (B < 1 || slot < 0) return -1;
    const int64_t block = slot / B, entry = slot % B;
    *row = mul_add(mul_add(block, st0, mul_add(entry, st1, 0)), t->elem, 0);
    if (tail_bytes) /* after the block's kv_block_size rows, tail_bytes a token */
        *tail = mul_add(mul_add(block, st0, mul_add(B, st1, 0)), t->elem, mul_add(entry, tail_bytes, 0));
    return *row < 0 || *tail < 0 ? -1 : 0;
}

static int cmp_i64(const void *x, const void *y) {
    const int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return (a > b) - (a < b);
}

int rk_dump_slot_rows(const void *slots, int64_t n, int wide, int64_t min_slot, int64_t kv_rows, int64_t **rows,
                      int64_t *n_rows) {
    *rows = NULL;
    *n_rows = 0;
    int64_t m = 0, *r = n > 0 ? malloc((size_t)n * sizeof *r) : NULL;
    if (n > 0 && !r) return -1;
    for (int64_t i = 0; i < n; i++) {
        int64_t s;
        if (wide) memcpy(&s, (const unsigned char *)slots + 8 * i, 8);
        else {
            int32_t s32;
            memcpy(&s32, (const unsigned char *)slots + 4 * i, 4);
            s = s32;
        }
        if (s >= min_slot && s < kv_rows) r[m++] = s;
    }
    if (m > 1) qsort(r, (size_t)m, sizeof *r, cmp_i64);
    int64_t u = 0;
    for (int64_t i = 0; i < m; i++)
        if (u == 0 || r[i] != r[u - 1]) r[u++] = r[i];
    if (u == 0) free(r);
    else *rows = r;
    *n_rows = u;
    return 0;
}

static atomic_uint dump_counter;

static int is_cache(const rk_tensor *t) { return t->rule == RK_ROWS_CACHE; }

/* The rows of cache tensor t (the plan's used entry u) into o: each row's bytes, then its tail's, read from the
 * device; runs of rows without tails that lie back to back are read at once. 0, or -1 with the reason in why. */
static int put_rows(outbuf *o, const rk_dump_launch *l, const rk_tensor *t, int u, const int64_t *rows, int64_t n_rows,
                    int64_t rb, int64_t tb, char *why, size_t cap) {
    const unsigned char *base = l->pl->used[u].ptr;
    const int64_t extent = l->pl->used[u].bytes;
    for (int64_t i = 0; i < n_rows;) {
        int64_t at, tail_at;
        if (rk_dump_row_at(l->d, t, l->a, rows[i], &at, &tail_at) != 0 || at > extent - rb ||
            (tb && tail_at > extent - tb)) {
            rk_say(why, cap, "%s: the row of slot %lld lies past the %lld bytes the launch's args give it", t->name,
                   (long long)rows[i], (long long)extent);
            return -1;
        }
        int64_t run = 1, next_at, next_tail;
        while (!tb && i + run < n_rows && rk_dump_row_at(l->d, t, l->a, rows[i + run], &next_at, &next_tail) == 0 &&
               next_at == at + run * rb && next_at <= extent - rb)
            run++;
        if (l->read(l->read_ctx, o->p + o->n, base + at, (size_t)(run * rb), why, cap) != 0) return -1;
        o->n += (size_t)(run * rb);
        if (tb) {
            if (l->read(l->read_ctx, o->p + o->n, base + tail_at, (size_t)tb, why, cap) != 0) return -1;
            o->n += (size_t)tb;
        }
        i += run;
    }
    return 0;
}

int rk_dump_write(const rk_dumper *d, const rk_dump_launch *l, char *path, size_t path_cap, char *why, size_t cap) {
    rk_tensor ts[RK_TENSORS_MAX];
    const int n_ts = rk_tensors(l->d, ts, RK_TENSORS_MAX);
    const int nt = l->pl ? l->pl->n_used : 0;
    /* the size: head, each tensor's name, access, length, form and bytes (a cache's: its rows), the checksum
     * (overflow-checked; UINT64_MAX stays) */
    outbuf count = {NULL, 0};
    put_head(&count, l);
    uint64_t total = count.n + 32;
    int slots_u = -1, caches = 0;
    for (int i = 0; i < nt; i++) {
        const int ti = l->pl->used[i].tensor;
        if (ti < 0 || ti >= n_ts) {
            rk_say(why, cap, "internal: tensor %d of the plan is not in the kernel's table", ti);
            return -1;
        }
        if (ts[ti].at == offsetof(ropekv_args, slots)) slots_u = i;
        if (is_cache(&ts[ti])) {
            caches++;
            continue;
        }
        const uint64_t b = (uint64_t)l->pl->used[i].bytes, entry = 4 + strlen(ts[ti].name) + 4 + 8 + 4; /* < 2^57 */
        total = total > (uint64_t)INT64_MAX - entry - b ? UINT64_MAX : total + entry + b;
    }
    if (caches && slots_u < 0) {
        rk_say(why, cap, "internal: the launch touches a cache but not the slots");
        return -1;
    }
    /* the caches' rows: the slots' bytes first (within the bound checked so far) */
    unsigned char *slot_bytes = NULL, *buf = NULL;
    int64_t *rows = NULL, n_rows = 0;
    int rc = -1;
    if (caches && total <= (uint64_t)d->policy.max_bytes) {
        const size_t sb = (size_t)l->pl->used[slots_u].bytes;
        const int wide = ts[l->pl->used[slots_u].tensor].elem == 8;
        slot_bytes = malloc(sb ? sb : 1);
        if (!slot_bytes) {
            rk_say(why, cap, "out of memory for the slots' %zu bytes", sb);
            goto done;
        }
        if (sb && l->read(l->read_ctx, slot_bytes, l->pl->used[slots_u].ptr, sb, why, cap) != 0) goto done;
        if (rk_dump_slot_rows(slot_bytes, (int64_t)(sb / (wide ? 8 : 4)), wide, l->a->min_slot, l->a->kv_rows, &rows,
                              &n_rows) != 0) {
            rk_say(why, cap, "out of memory for the rows of %zu bytes of slots", sb);
            goto done;
        }
        for (int i = 0; i < nt; i++) {
            const rk_tensor *t = &ts[l->pl->used[i].tensor];
            if (!is_cache(t)) continue;
            int64_t rb, tb;
            rk_dump_row_shape(l->d, t, &rb, &tb);
            const uint64_t entry = 4 + strlen(t->name) + 4 + 8 + 4 + 4 + 4 + 8;
            uint64_t per, body;
            if (__builtin_mul_overflow((uint64_t)n_rows, (uint64_t)(8 + rb + tb), &body) ||
                __builtin_add_overflow(body, entry, &per) || total > (uint64_t)INT64_MAX - per)
                total = UINT64_MAX;
            else total += per;
        }
    } else if (caches) {
        total = UINT64_MAX; /* past the bound already: the slots are not read */
    }
    if (total > (uint64_t)d->policy.max_bytes || total > SIZE_MAX) {
        if (total == UINT64_MAX)
            rk_say(why, cap, "the dump would be more than the bound of %lld bytes (dump max bytes)",
                   (long long)d->policy.max_bytes);
        else
            rk_say(why, cap, "the dump would be %llu bytes, more than the bound of %lld (dump max bytes)",
                   (unsigned long long)total, (long long)d->policy.max_bytes);
        goto done;
    }
    buf = malloc((size_t)total);
    if (!buf) {
        rk_say(why, cap, "out of memory for a dump of %llu bytes", (unsigned long long)total);
        goto done;
    }
    outbuf o = {buf, 0};
    put_head(&o, l);
    for (int i = 0; i < nt; i++) {
        const rk_tensor *t = &ts[l->pl->used[i].tensor];
        const size_t b = (size_t)l->pl->used[i].bytes;
        put_text(&o, t->name);
        put_u32(&o, (uint32_t)t->access);
        put_u64(&o, b);
        put_u32(&o, is_cache(t) ? 1 : 0);
        if (is_cache(t)) {
            int64_t rb, tb;
            rk_dump_row_shape(l->d, t, &rb, &tb);
            put_u32(&o, (uint32_t)rb);
            put_u32(&o, (uint32_t)tb);
            put_u64(&o, (uint64_t)n_rows);
            for (int64_t r = 0; r < n_rows; r++) put_u64(&o, (uint64_t)rows[r]);
            if (put_rows(&o, l, t, i, rows, n_rows, rb, tb, why, cap) != 0) goto done;
        } else if (i == slots_u && slot_bytes) {
            put(&o, slot_bytes, b);
        } else {
            if (b && l->read(l->read_ctx, buf + o.n, l->pl->used[i].ptr, b, why, cap) != 0) goto done;
            o.n += b;
        }
    }
    rk_sha256 h;
    rk_sha256_init(&h);
    rk_sha256_update(&h, buf, o.n);
    rk_sha256_final(&h, buf + o.n);
    o.n += 32;

    /* the name: the key's characters outside [A-Za-z0-9._-] as '_' */
    char key[sizeof l->d->key];
    snprintf(key, sizeof key, "%s", l->d->key);
    for (char *c = key; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '.' ||
              *c == '-'))
            *c = '_';
    const unsigned seq = atomic_fetch_add(&dump_counter, 1);
    char name[384], tmp[400];
    snprintf(name, sizeof name, "%s-%llu-%s-%ld-%u.rkdump", key, (unsigned long long)l->launch,
             rk_dump_reason_name(l->reason), (long)getpid(), seq);
    snprintf(tmp, sizeof tmp, ".%s.tmp", name);
    const int dfd = open_dir(d, why, cap);
    if (dfd >= 0) {
        const int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0) {
            rk_say(why, cap, "cannot create %s/%s: %s", d->dir, tmp, strerror(errno));
        } else {
            int ok = rk_write_all(fd, buf, o.n) == ROPEKV_OK && fsync(fd) == 0;
            const int e = errno;
            ok = close(fd) == 0 && ok;
            if (!ok) rk_say(why, cap, "cannot write %s/%s: %s", d->dir, tmp, strerror(e));
            else if (linkat(dfd, tmp, dfd, name, 0) != 0) /* never replaces a file of that name */
                rk_say(why, cap, "cannot name %s/%s: %s", d->dir, name, strerror(errno));
            else rc = 0;
            unlinkat(dfd, tmp, 0);
        }
        close(dfd);
    }
    if (rc == 0) rk_say(path, path_cap, "%s/%s", d->dir, name);
done:
    free(buf);
    free(rows);
    free(slot_bytes);
    return rc;
}

/* ---- the reader -------------------------------------------------------------------------------------------- */
typedef struct in {
    const unsigned char *p;
    size_t n, at;
    rk_err *err;
} in;

#define REFUSE(...) (rk_fail(r->err, ROPEKV_ERR_DUMP, __VA_ARGS__), -1)
#define BAD(...) return (ropekv_status)rk_fail(err, ROPEKV_ERR_DUMP, __VA_ARGS__)

static int get(in *r, void *dst, size_t n, const char *field) {
    if (n > r->n - r->at)
        return REFUSE("truncated at byte %zu: %s needs %zu bytes, %zu are left", r->at, field, n, r->n - r->at);
    memcpy(dst, r->p + r->at, n);
    r->at += n;
    return 0;
}
static int get_u32(in *r, uint32_t *v, const char *field) {
    unsigned char b[4];
    if (get(r, b, 4, field)) return -1;
    *v = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    return 0;
}
static int get_u64(in *r, uint64_t *v, const char *field) {
    unsigned char b[8];
    if (get(r, b, 8, field)) return -1;
    *v = 0;
    for (int i = 7; i >= 0; i--) *v = *v << 8 | b[i];
    return 0;
}
/* A string of at most max bytes: where it lies in the buffer, *s and *len. text: any byte but NUL (the spec's
 * text, the message); else no control characters either. */
static int get_span(in *r, const char **s, size_t *len, size_t max, int text, const char *field) {
    uint32_t n;
    if (get_u32(r, &n, field)) return -1;
    if (n > max) return REFUSE("%s: length %u is over its limit of %zu bytes", field, n, max);
    if (n > r->n - r->at)
        return REFUSE("%s: length %u passes the end of the file (%zu bytes left)", field, n, r->n - r->at);
    const unsigned char *p = r->p + r->at;
    for (uint32_t i = 0; i < n; i++)
        if (p[i] == 0 || (!text && (p[i] < 0x20 || p[i] == 0x7f)))
            return REFUSE("%s: byte %u is %s", field, i, p[i] ? "a control character" : "NUL");
    *s = (const char *)p;
    *len = n;
    r->at += n;
    return 0;
}
static int get_str(in *r, char *dst, size_t cap, int text, const char *field) {
    const char *s;
    size_t n;
    if (get_span(r, &s, &n, cap - 1, text, field)) return -1;
    memcpy(dst, s, n);
    dst[n] = '\0';
    return 0;
}

ropekv_status rk_dump_parse(const unsigned char *buf, size_t n, rk_dump *out, rk_err *err) {
    memset(out, 0, sizeof *out);
    in rd = {buf, n, 0, err}, *r = &rd;
    unsigned char magic[8];
    uint32_t version, reserved;
    if (get(r, magic, 8, "magic")) return ROPEKV_ERR_DUMP;
    if (memcmp(magic, MAGIC, 8) != 0) BAD("magic: not a ropekv dump (no \"RKDUMP\" at byte 0)");
    if (get_u32(r, &version, "format version")) return ROPEKV_ERR_DUMP;
    if (version != RK_DUMP_FORMAT)
        return (ropekv_status)rk_fail(err, ROPEKV_ERR_VERSION,
                                      "format version: %u, but this ropekv (%s) reads version %u", version,
                                      ROPEKV_VERSION_STRING, RK_DUMP_FORMAT);
    if (get_u32(r, &reserved, "reserved")) return ROPEKV_ERR_DUMP;
    if (reserved != 0) BAD("reserved: 0x%x, not 0", reserved);
    if (get_str(r, out->library, LIB_MAX + 1, 0, "library") ||
        get_str(r, out->backend, BACKEND_MAX + 1, 0, "backend") ||
        get_str(r, out->device_target, TARGET_MAX + 1, 0, "device target") ||
        get_str(r, out->arch, ARCH_MAX + 1, 0, "arch row") || get_str(r, out->key, KEY_MAX + 1, 0, "key") ||
        get_str(r, out->name, NAME_MAX_ + 1, 0, "kernel name") || get_str(r, out->spec, SPEC_MAX + 1, 0, "spec") ||
        get_str(r, out->record, RECORD_MAX + 1, 0, "record") ||
        get_span(r, &out->spec_text, &out->spec_len, RK_SPEC_TEXT_MAX, 1, "spec text"))
        return ROPEKV_ERR_DUMP;
    if (!out->spec[0]) BAD("spec: empty");
    static const struct {
        const char *name;
        uint32_t max;
    } enums[8] = {{"variant kv", ROPEKV_KV_FP8_TILE},
                  {"variant q", ROPEKV_Q_NONE},
                  {"variant positions", ROPEKV_INDEX_INT32},
                  {"variant slots", ROPEKV_INDEX_INT32},
                  {"variant q_dtype", ROPEKV_Q_FP8_E4M3},
                  {"variant layout", ROPEKV_KV_SPLIT},
                  {"variant op", ROPEKV_OP_READ},
                  {"variant norm", ROPEKV_NORM_RMS_OUT}};
    uint32_t e[8];
    for (int i = 0; i < 8; i++) {
        if (get_u32(r, &e[i], enums[i].name)) return ROPEKV_ERR_DUMP;
        if (e[i] > enums[i].max) BAD("%s: %u is out of range", enums[i].name, e[i]);
    }
    out->v = (ropekv_variant){.size = sizeof out->v,
                              .spec = out->spec,
                              .kv = (ropekv_kv_dtype)e[0],
                              .q = (ropekv_q_form)e[1],
                              .positions = (ropekv_index)e[2],
                              .slots = (ropekv_index)e[3],
                              .q_dtype = (ropekv_q_dtype)e[4],
                              .layout = (ropekv_kv_layout)e[5],
                              .op = (ropekv_op)e[6],
                              .norm = (ropekv_norm)e[7],
                              .record = out->record[0] ? out->record : NULL};
    uint32_t reason, status, count;
    if (get_u32(r, &reason, "reason")) return ROPEKV_ERR_DUMP;
    if (reason < RK_DUMP_FIRST || reason > RK_DUMP_EVERY) BAD("reason: %u is out of range", reason);
    out->reason = (rk_dump_reason)reason;
    if (get_u32(r, &status, "status")) return ROPEKV_ERR_DUMP;
    if (strcmp(ropekv_status_name((ropekv_status)status), "ROPEKV_UNKNOWN") == 0)
        BAD("status: %u is not a ropekv_status", status);
    out->status = (ropekv_status)status;
    if (get_u64(r, &out->launch, "launch") || get_str(r, out->message, sizeof out->message, 1, "message"))
        return ROPEKV_ERR_DUMP;

    if (get_u32(r, &count, "args count")) return ROPEKV_ERR_DUMP;
    if (count > RK_DUMP_ARGS_MAX) BAD("args count: %u, over %d", count, RK_DUMP_ARGS_MAX);
    out->args.size = sizeof out->args;
    uint64_t seen = 0; /* the arg_fields set, one bit each */
    for (uint32_t i = 0; i < count; i++) {
        char name[FIELD_MAX + 1];
        uint32_t kind;
        uint64_t value;
        if (get_str(r, name, sizeof name, 0, "args field name") || get_u32(r, &kind, "args field kind") ||
            get_u64(r, &value, "args field value"))
            return ROPEKV_ERR_DUMP;
        const arg_field *f = arg_field_named(name);
        if (!f) BAD("args field '%s' is not a field of this ropekv's ropekv_args", name);
        const uint64_t bit = (uint64_t)1 << (f - arg_fields);
        if (seen & bit) BAD("args field '%s' appears twice", name);
        seen |= bit;
        if (kind != (uint32_t)f->pointer)
            BAD("args field '%s': kind %u, but it is %s", name, kind, f->pointer ? "a pointer (1)" : "int64 (0)");
        if (f->pointer) {
            const void *ptr = (const void *)(uintptr_t)value;
            memcpy((char *)&out->args + f->at, &ptr, sizeof ptr);
        } else {
            const int64_t x = (int64_t)value;
            memcpy((char *)&out->args + f->at, &x, sizeof x);
        }
    }

    if (get_u32(r, &count, "tensor count")) return ROPEKV_ERR_DUMP;
    if (count > RK_TENSORS_MAX) BAD("tensor count: %u, over %d", count, RK_TENSORS_MAX);
    out->n_tensors = (int)count;
    for (uint32_t i = 0; i < count; i++) {
        rk_dump_tensor *t = &out->t[i];
        uint32_t access;
        if (get_str(r, t->name, sizeof t->name, 0, "tensor name")) return ROPEKV_ERR_DUMP;
        const arg_field *f = arg_field_named(t->name);
        if (!f || !f->pointer) BAD("tensor '%s' is not a pointer field of ropekv_args", t->name);
        for (uint32_t j = 0; j < i; j++)
            if (strcmp(out->t[j].name, t->name) == 0) BAD("tensor '%s' appears twice", t->name);
        if (get_u32(r, &access, "tensor access") || get_u64(r, &t->bytes, "tensor bytes")) return ROPEKV_ERR_DUMP;
        if (access < ROPEKV_TENSOR_READ || access > ROPEKV_TENSOR_READ_WRITE)
            BAD("tensor '%s': access %u is out of range", t->name, access);
        t->access = (ropekv_tensor_access)access;
        uint32_t form;
        if (get_u32(r, &form, "tensor form")) return ROPEKV_ERR_DUMP;
        const int cache = !strcmp(t->name, "kv_cache") || !strcmp(t->name, "kv_rope_cache");
        if (form > 1) BAD("tensor '%s': form %u is out of range", t->name, form);
        if (form == 0 && cache) BAD("tensor '%s': form 0 (whole), but a cache is dumped as rows (form 1)", t->name);
        if (form == 1 && !cache) BAD("tensor '%s': form 1 (rows), but only the caches are dumped as rows", t->name);
        t->rows = (int)form;
        if (form == 0) {
            if (t->bytes > r->n - r->at)
                BAD("tensor '%s': %llu bytes pass the end of the file (%zu bytes left)", t->name,
                    (unsigned long long)t->bytes, r->n - r->at);
            t->data = r->p + r->at;
            t->stored = t->bytes;
            r->at += (size_t)t->bytes;
            continue;
        }
        /* form 1: the rows the launch can touch, of a cache whose extent may be far larger than the file */
        if (t->bytes > (uint64_t)1 << 57)
            BAD("tensor '%s': %llu bytes, more than any address space (2^57)", t->name, (unsigned long long)t->bytes);
        if (get_u32(r, &t->row_bytes, "tensor row bytes") || get_u32(r, &t->tail_bytes, "tensor tail bytes") ||
            get_u64(r, &t->n_rows, "tensor row count"))
            return ROPEKV_ERR_DUMP;
        if (t->row_bytes == 0 || t->row_bytes > RK_DUMP_ROW_BYTES_MAX)
            BAD("tensor '%s': row bytes %u, not in [1, %d]", t->name, t->row_bytes, RK_DUMP_ROW_BYTES_MAX);
        if (t->tail_bytes > RK_DUMP_TAIL_BYTES_MAX)
            BAD("tensor '%s': tail bytes %u, over %d", t->name, t->tail_bytes, RK_DUMP_TAIL_BYTES_MAX);
        if (t->n_rows > (r->n - r->at) / 8)
            BAD("tensor '%s': row count %llu: the row list passes the end of the file (%zu bytes left)", t->name,
                (unsigned long long)t->n_rows, r->n - r->at);
        t->row_list = r->p + r->at;
        r->at += (size_t)t->n_rows * 8;
        const int64_t lo = out->args.min_slot > 0 ? out->args.min_slot : 0, hi = out->args.kv_rows;
        for (uint64_t k = 0; k < t->n_rows; k++) {
            const uint64_t row = (uint64_t)rk_dump_row(t, k);
            if (row > (uint64_t)INT64_MAX || (int64_t)row < lo || (int64_t)row >= hi)
                BAD("tensor '%s': row %llu (entry %llu of the row list) is outside [min_slot %lld, kv_rows %lld)",
                    t->name, (unsigned long long)row, (unsigned long long)k, (long long)out->args.min_slot,
                    (long long)hi);
            if (k > 0 && row <= (uint64_t)rk_dump_row(t, k - 1))
                BAD("tensor '%s': row %llu (entry %llu of the row list) %s the one before it: rows are increasing",
                    t->name, (unsigned long long)row, (unsigned long long)k,
                    row == (uint64_t)rk_dump_row(t, k - 1) ? "repeats" : "is below");
        }
        uint64_t stored;
        if (__builtin_mul_overflow(t->n_rows, (uint64_t)t->row_bytes + t->tail_bytes, &stored) || stored > r->n - r->at)
            BAD("tensor '%s': %llu rows of %u + %u bytes pass the end of the file (%zu bytes left)", t->name,
                (unsigned long long)t->n_rows, t->row_bytes, t->tail_bytes, r->n - r->at);
        t->data = r->p + r->at;
        t->stored = stored;
        r->at += (size_t)stored;
    }
    unsigned char sum[32], want[32];
    const size_t body = r->at;
    if (get(r, sum, 32, "checksum")) return ROPEKV_ERR_DUMP;
    if (r->at != r->n) BAD("%zu bytes after the checksum", r->n - r->at);
    rk_sha256 h;
    rk_sha256_init(&h);
    rk_sha256_update(&h, buf, body);
    rk_sha256_final(&h, want);
    if (memcmp(sum, want, 32) != 0) BAD("checksum: the file's bytes do not match its SHA-256");
    return ROPEKV_OK;
}
