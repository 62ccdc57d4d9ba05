/* `ropekv-gen replay FILE` (tools/replay.h): parse and check the dump, rebuild its variant with the same choices on
 * each backend's target, run the launch on the dumped inputs there and the CPU reference (gen/ref.c) on a copy of
 * them, and compare every byte of every tensor the launch touches. */
#include "replay.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "args_check.h"
#include "devmem.h"
#include "dump.h"
#include "proc.h"
#include "rk.h"
#include "ropekv.h"

/* What one replay works with: the parsed dump, the spec it names, the architecture table. */
typedef struct replay {
    const rk_dump *dm;
    rk_arch_table archs;
    rk_spec spec;
    rk_choice choice;
    FILE *out;
} replay;

/* An allocation of n bytes (at least 1) aligned for any tensor of a launch, zeroed past n. */
static unsigned char *host_alloc(uint64_t n) {
    const size_t size = (size_t)((n + 256) & ~(uint64_t)255);
    unsigned char *p = aligned_alloc(256, size);
    if (p) memset(p, 0, size);
    return p;
}

/* The dumped tensor of the ropekv_args field name, or NULL. */
static const rk_dump_tensor *dumped(const rk_dump *dm, const char *name) {
    for (int i = 0; i < dm->n_tensors; i++)
        if (strcmp(dm->t[i].name, name) == 0) return &dm->t[i];
    return NULL;
}

/* The ropekv_args pointer field of tensor t (rk_tensor.at). */
static void set_ptr(ropekv_args *a, size_t at, const void *p) { memcpy((char *)a + at, &p, sizeof p); }

/* Every pointer field of a as NULL (the dump's addresses are another process's), then each dumped tensor's at
 * bufs[i]. */
static void point_args(const rk_dump *dm, const rk_tensor *ts, const int *row, void *const *bufs, ropekv_args *a) {
#define NULL_POINTER_(type, name) \
    if (_Generic(a->name, int64_t : 0, default : 1)) memset(&a->name, 0, sizeof a->name);
    RK_ARGS_CALLER(NULL_POINTER_)
#undef NULL_POINTER_
    for (int i = 0; i < dm->n_tensors; i++) set_ptr(a, ts[row[i]].at, bufs[i]);
}

/* The caches dumped as rows (form 1), laid out for the replay (docs/dump.md, "A cache's rows"): the rows keep their
 * place inside their block, and the blocks (the rows, in the flat layout) that hold none are left out. Row k of the
 * row list (the slot rows[k]) becomes the slot to[k]: flat, k; paged and split, j * kv_block_size + rows[k] %
 * kv_block_size, j counting the distinct blocks rows[0 .. k] lie in from 0. kv_rows becomes the flat layout's row
 * count, or the blocks' count times kv_block_size; min_slot 0. A slot in [min_slot, kv_rows) becomes its row's, a
 * negative one stays, any other (below min_slot, at kv_rows or past: written and read by no launch) becomes the new
 * kv_rows. Every other byte of the caches is 0 in both the kernel's and the reference's copy. */
typedef struct compact {
    int64_t *rows, *to, n_rows; /* the rows the slots name, increasing; to[k]: the replay's slot of rows[k] */
    int64_t kv_rows;            /* the replay's kv_rows */
    unsigned char *slots;       /* the slots' bytes, renumbered */
} compact;

#define REPLAY_CACHE_MAX ((int64_t)1 << 32) /* bytes of a cache the replay allocates (each of its two copies) */

static void compact_free(compact *c) {
    free(c->rows);
    free(c->to);
    free(c->slots);
}

/* The row list's entry of slot s (rows increasing), or -1. */
static int64_t row_index(const compact *c, int64_t s) {
    int64_t lo = 0, hi = c->n_rows;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (c->rows[mid] < s) lo = mid + 1;
        else hi = mid;
    }
    return lo < c->n_rows && c->rows[lo] == s ? lo : -1;
}

/* The renumbering of the dump's rows under its args a (checked): 0, or -1 with the reason printed. */
static int compact_make(const replay *r, const char *backend, const rk_desc *d, const ropekv_args *a,
                        const rk_dump_tensor *slots, int wide, compact *c) {
    const rk_dump *dm = r->dm;
    const int64_t isz = wide ? 8 : 4, n_tok = (int64_t)(slots->bytes / (uint64_t)isz);
    if (rk_dump_slot_rows(slots->data, n_tok, wide, a->min_slot, a->kv_rows, &c->rows, &c->n_rows) != 0 ||
        (c->n_rows && !(c->to = malloc((size_t)c->n_rows * sizeof *c->to))) || !(c->slots = malloc(slots->bytes + 1))) {
        fprintf(r->out, "%s: out of memory\n", backend);
        return -1;
    }
    for (int i = 0; i < dm->n_tensors; i++) { /* every cache holds exactly the rows its slots name */
        const rk_dump_tensor *t = &dm->t[i];
        if (!t->rows) continue;
        int64_t k = 0;
        while (k < c->n_rows && (uint64_t)k < t->n_rows && rk_dump_row(t, (uint64_t)k) == c->rows[k]) k++;
        if ((uint64_t)c->n_rows != t->n_rows || k < c->n_rows) {
            fprintf(r->out,
                    "%s: ROPEKV_ERR_DUMP: tensor '%s': its row list (%llu rows) is not the %lld rows the slots name "
                    "in [min_slot, kv_rows): they differ at entry %lld\n",
                    backend, t->name, (unsigned long long)t->n_rows, (long long)c->n_rows, (long long)k);
            return -1;
        }
    }
    int64_t blocks = 0;
    const int64_t B = d->layout == ROPEKV_KV_FLAT ? 1 : a->kv_block_size; /* >= 1: checked */
    for (int64_t k = 0; k < c->n_rows; k++) {
        if (k == 0 || c->rows[k] / B != c->rows[k - 1] / B) blocks++;
        c->to[k] = (blocks - 1) * B + c->rows[k] % B; /* <= rows[k] */
    }
    if (__builtin_mul_overflow(blocks, B, &c->kv_rows)) c->kv_rows = INT64_MAX; /* refused below */
    memcpy(c->slots, slots->data, slots->bytes);
    for (int64_t t = 0; t < n_tok; t++) {
        int64_t s;
        if (wide) memcpy(&s, c->slots + 8 * t, 8);
        else {
            int32_t s32;
            memcpy(&s32, c->slots + 4 * t, 4);
            s = s32;
        }
        if (s < 0) continue;
        const int64_t k = s >= a->min_slot && s < a->kv_rows ? row_index(c, s) : -1;
        const int64_t to = k >= 0 ? c->to[k] : c->kv_rows;
        if (!wide && to > INT32_MAX) {
            fprintf(r->out,
                    "%s: the slots cannot be renumbered for the replay: slot %lld of token %lld would be %lld, past "
                    "int32\n",
                    backend, (long long)s, (long long)t, (long long)to);
            return -1;
        }
        if (wide) memcpy(c->slots + 8 * t, &to, 8);
        else {
            const int32_t to32 = (int32_t)to;
            memcpy(c->slots + 4 * t, &to32, 4);
        }
    }
    return 0;
}

/* Cache tensor t's rows from the dump into buf (size bytes, zeroed) at their renumbered slots under args ca: 0, or -1
 * when one falls outside buf. */
static int place_rows(const rk_desc *d, const rk_tensor *tt, const rk_dump_tensor *t, const compact *c,
                      const ropekv_args *ca, unsigned char *buf, int64_t size) {
    const uint64_t per = (uint64_t)t->row_bytes + t->tail_bytes;
    for (int64_t k = 0; k < c->n_rows; k++) {
        int64_t at, tail_at;
        if (rk_dump_row_at(d, tt, ca, c->to[k], &at, &tail_at) != 0 || at > size - (int64_t)t->row_bytes ||
            tail_at > size - (int64_t)t->tail_bytes)
            return -1;
        memcpy(buf + at, t->data + (uint64_t)k * per, t->row_bytes);
        if (t->tail_bytes) memcpy(buf + tail_at, t->data + (uint64_t)k * per + t->row_bytes, t->tail_bytes);
    }
    return 0;
}

/* Where byte b of cache tensor t's replay copy lies, in words, into out. */
static void where_in_cache(const rk_desc *d, const rk_tensor *tt, const rk_dump_tensor *t, const compact *c,
                           const ropekv_args *ca, int64_t b, char *out, size_t cap) {
    for (int64_t k = 0; k < c->n_rows; k++) {
        int64_t at, tail_at;
        if (rk_dump_row_at(d, tt, ca, c->to[k], &at, &tail_at) != 0) break;
        if (b >= at && b - at < (int64_t)t->row_bytes) {
            snprintf(out, cap, " (byte %lld of the row of slot %lld)", (long long)(b - at), (long long)c->rows[k]);
            return;
        }
        if (t->tail_bytes && b >= tail_at && b - tail_at < (int64_t)t->tail_bytes) {
            snprintf(out, cap, " (byte %lld of the page tail of slot %lld)", (long long)(b - tail_at),
                     (long long)c->rows[k]);
            return;
        }
    }
    snprintf(out, cap, " (in no dumped row: a byte the launch does not touch, filled with 0)");
}

/* Compares every byte of the tensors (size[i] bytes each); prints the first difference of each. 0: all equal. */
static int compare(const replay *r, const char *backend, const rk_desc *d, const rk_tensor *ts, const int *row,
                   const compact *c, const ropekv_args *ca, const int64_t *size, unsigned char *const *got,
                   unsigned char *const *want) {
    const rk_dump *dm = r->dm;
    int differ = 0;
    uint64_t total = 0;
    for (int i = 0; i < dm->n_tensors; i++) {
        const rk_dump_tensor *t = &dm->t[i];
        total += (uint64_t)size[i];
        uint64_t n = 0, first = 0;
        for (uint64_t b = 0; b < (uint64_t)size[i]; b++)
            if (got[i][b] != want[i][b] && n++ == 0) first = b;
        if (n) {
            char where[160] = "";
            if (t->rows) where_in_cache(d, &ts[row[i]], t, c, ca, (int64_t)first, where, sizeof where);
            fprintf(r->out,
                    "%s: %s differs from the reference in %llu of %llu bytes; the first at byte %llu%s: kernel 0x%02x, "
                    "reference 0x%02x\n",
                    backend, t->name, (unsigned long long)n, (unsigned long long)size[i], (unsigned long long)first,
                    where, got[i][first], want[i][first]);
            differ = 1;
        }
    }
    if (!differ)
        fprintf(r->out, "%s: %d tensors, %llu bytes: every byte equal to the reference\n", backend, dm->n_tensors,
                (unsigned long long)total);
    return differ;
}

/* The launch on ctx's kernel k (backend name, description d of its target), with the dumped tensors. */
static int replay_tensors(const replay *r, ropekv_ctx *ctx, ropekv_kernel *k, const rk_desc *d) {
    const rk_dump *dm = r->dm;
    const char *backend = ropekv_backend_name(ctx);
    rk_tensor ts[RK_TENSORS_MAX];
    const int nt = rk_tensors(d, ts, RK_TENSORS_MAX);
    int row[RK_TENSORS_MAX], any_rows = 0, slots_i = -1;
    for (int i = 0; i < dm->n_tensors; i++) { /* every dumped tensor is one of the kernel's */
        row[i] = -1;
        for (int j = 0; j < nt; j++)
            if (strcmp(ts[j].name, dm->t[i].name) == 0) row[i] = j;
        if (row[i] < 0) {
            fprintf(r->out, "%s: ROPEKV_ERR_DUMP: tensor '%s' is not a tensor of %s\n", backend, dm->t[i].name, d->key);
            return RK_REPLAY_REFUSED;
        }
        if (ts[row[i]].at == offsetof(ropekv_args, slots)) slots_i = i;
        if (!dm->t[i].rows) continue;
        any_rows = 1;
        int64_t rb, tb;
        rk_dump_row_shape(d, &ts[row[i]], &rb, &tb);
        if (ts[row[i]].rule != RK_ROWS_CACHE || rb != (int64_t)dm->t[i].row_bytes ||
            tb != (int64_t)dm->t[i].tail_bytes) {
            fprintf(r->out,
                    "%s: ROPEKV_ERR_DUMP: tensor '%s': rows of %u bytes with %u bytes of page tail, but a row of %s is "
                    "%lld bytes with %lld\n",
                    backend, dm->t[i].name, dm->t[i].row_bytes, dm->t[i].tail_bytes, d->key, (long long)rb,
                    (long long)tb);
            return RK_REPLAY_REFUSED;
        }
    }
    unsigned char *want[RK_TENSORS_MAX] = {0}, *got[RK_TENSORS_MAX] = {0};
    uint64_t dev[RK_TENSORS_MAX] = {0};
    int64_t size[RK_TENSORS_MAX] = {0};
    int rc = RK_REPLAY_REFUSED, n_dev = 0;
    rk_devmem m = {0};
    compact c = {0};
    const int host = strcmp(backend, "host") == 0;
    char why[1024];
    /* the dumped args, checked as the library checks them, at addresses apart from each other (the tensors are not
     * read): every tensor's extent the one the dump holds */
    void *far[RK_TENSORS_MAX];
    for (int i = 0; i < dm->n_tensors; i++) far[i] = (void *)((uintptr_t)(i + 1) << 58);
    ropekv_args oa = dm->args, ca;
    oa.size = sizeof oa;
    point_args(dm, ts, row, far, &oa);
    rk_plan pl;
    rk_err err = {0};
    ropekv_status s = rk_args_check(d, &oa, &pl, &err);
    if (s != ROPEKV_OK && dm->status == ROPEKV_OK) {
        fprintf(r->out, "%s: the dumped args fail the check on %s: %s: %s\n", backend, d->key, ropekv_status_name(s),
                err.msg);
        rc = RK_REPLAY_DIFFERS;
        goto done;
    }
    if (s != ROPEKV_OK && any_rows) {
        fprintf(r->out, "%s: ROPEKV_ERR_DUMP: rows of a cache, but the dumped args fail the check: %s\n", backend,
                err.msg);
        goto done;
    }
    if (s == ROPEKV_OK) {
        int used = 0;
        for (int u = 0; u < pl.n_used; u++) {
            const char *name = ts[pl.used[u].tensor].name;
            const rk_dump_tensor *t = dumped(dm, name);
            if (!t || t->bytes != (uint64_t)pl.used[u].bytes) {
                fprintf(r->out, "%s: ROPEKV_ERR_DUMP: tensor '%s': the dump holds %lld bytes, the args reach %lld\n",
                        backend, name, t ? (long long)t->bytes : -1LL, (long long)pl.used[u].bytes);
                goto done;
            }
            used++;
        }
        if (used != dm->n_tensors) {
            fprintf(r->out, "%s: ROPEKV_ERR_DUMP: the dump holds %d tensors, the launch touches %d\n", backend,
                    dm->n_tensors, used);
            goto done;
        }
    }
    /* the replay's args: the dumped ones, the caches' rows renumbered (compact) */
    ca = oa;
    for (int i = 0; i < dm->n_tensors; i++) size[i] = (int64_t)dm->t[i].bytes;
    if (any_rows) {
        if (slots_i < 0 || dm->t[slots_i].rows) {
            fprintf(r->out, "%s: ROPEKV_ERR_DUMP: rows of a cache without the slots\n", backend);
            goto done;
        }
        if (compact_make(r, backend, d, &oa, &dm->t[slots_i], ts[row[slots_i]].elem == 8, &c) != 0) goto done;
        ca.kv_rows = c.kv_rows;
        ca.min_slot = 0;
        rk_plan cp;
        if ((s = rk_args_check(d, &ca, &cp, &err)) != ROPEKV_OK) {
            fprintf(r->out, "%s: the renumbered rows fail the check: %s: %s\n", backend, ropekv_status_name(s),
                    err.msg);
            goto done;
        }
        for (int u = 0; u < cp.n_used; u++)
            for (int i = 0; i < dm->n_tensors; i++)
                if (dm->t[i].rows && row[i] == cp.used[u].tensor) size[i] = cp.used[u].bytes;
        for (int i = 0; i < dm->n_tensors; i++)
            if (dm->t[i].rows) {
                fprintf(r->out, "%s: %s: %lld rows dumped, replayed in a cache of kv_rows %lld (%lld bytes)\n", backend,
                        dm->t[i].name, (long long)c.n_rows, (long long)c.kv_rows, (long long)size[i]);
                if (size[i] > REPLAY_CACHE_MAX) {
                    fprintf(r->out, "%s: %s: the replay's copy would be %lld bytes, more than its bound of %lld\n",
                            backend, dm->t[i].name, (long long)size[i], (long long)REPLAY_CACHE_MAX);
                    goto done;
                }
            }
    }
    for (int i = 0; i < dm->n_tensors; i++) {
        want[i] = host_alloc((uint64_t)size[i]);
        got[i] = host_alloc((uint64_t)size[i]);
        if (!want[i] || !got[i]) {
            fprintf(r->out, "%s: out of memory\n", backend);
            goto done;
        }
        const rk_dump_tensor *t = &dm->t[i];
        if (t->rows) {
            if (place_rows(d, &ts[row[i]], t, &c, &ca, want[i], size[i]) != 0 ||
                place_rows(d, &ts[row[i]], t, &c, &ca, got[i], size[i]) != 0) {
                fprintf(r->out, "%s: internal: a row of %s falls outside its renumbered cache\n", backend, t->name);
                goto done;
            }
            continue;
        }
        const unsigned char *from = any_rows && i == slots_i ? c.slots : t->data;
        memcpy(want[i], from, t->bytes);
        memcpy(got[i], from, t->bytes);
    }
    /* the reference's launch: the replay's args on the copies */
    ropekv_args ra = ca;
    point_args(dm, ts, row, (void *const *)want, &ra);
    s = rk_args_check(d, &ra, &pl, &err);
    if (s != ROPEKV_OK && dm->status == ROPEKV_OK) {
        fprintf(r->out, "%s: the dumped args fail the check on %s: %s: %s\n", backend, d->key, ropekv_status_name(s),
                err.msg);
        rc = RK_REPLAY_DIFFERS;
        goto done;
    }
    /* the kernel's launch: the host's buffers are its memory; a GPU's are copies */
    void *kbuf[RK_TENSORS_MAX];
    if (!host) {
        if (rk_devmem_open(&m, backend, 0, why, sizeof why) != 0) {
            fprintf(r->out, "%s: %s\n", backend, why);
            goto done;
        }
        for (; n_dev < dm->n_tensors; n_dev++) {
            const uint64_t b = (uint64_t)size[n_dev];
            if (rk_devmem_alloc(&m, &dev[n_dev], (size_t)b, why, sizeof why) != 0) {
                fprintf(r->out, "%s: %s\n", backend, why);
                goto done;
            }
            if (rk_devmem_to_device(&m, dev[n_dev], got[n_dev], (size_t)b, why, sizeof why) != 0) {
                n_dev++;
                fprintf(r->out, "%s: %s\n", backend, why);
                goto done;
            }
        }
    }
    for (int i = 0; i < dm->n_tensors; i++) kbuf[i] = host ? (void *)got[i] : (void *)(uintptr_t)dev[i];
    ropekv_args ka = ca;
    point_args(dm, ts, row, kbuf, &ka);
    s = ropekv_launch(k, &ka, NULL);
    if (s == ROPEKV_OK && !host && rk_devmem_synchronize(&m, why, sizeof why) != 0) {
        fprintf(r->out, "%s: the launch failed on the device: %s\n", backend, why);
        rc = RK_REPLAY_DIFFERS;
        goto done;
    }
    if (s != dm->status) {
        fprintf(r->out, "%s: the launch returned %s (%s), the dumped one %s\n", backend, ropekv_status_name(s),
                s == ROPEKV_OK ? "" : ropekv_last_error(ctx), ropekv_status_name(dm->status));
        rc = RK_REPLAY_DIFFERS;
        goto done;
    }
    for (int i = 0; !host && i < dm->n_tensors; i++)
        if (rk_devmem_to_host(&m, got[i], dev[i], (size_t)size[i], why, sizeof why) != 0) {
            fprintf(r->out, "%s: %s\n", backend, why);
            goto done;
        }
    if (s == ROPEKV_OK) rk_ref_run(d, &pl.args); /* a refused launch writes nothing: want stays the dumped bytes */
    else fprintf(r->out, "%s: refused again with %s: %s\n", backend, ropekv_status_name(s), ropekv_last_error(ctx));
    rc = compare(r, backend, d, ts, row, &c, &ca, size, got, want) ? RK_REPLAY_DIFFERS : RK_REPLAY_SAME;
done:
    for (int i = 0; i < n_dev; i++) rk_devmem_free(&m, dev[i]);
    for (int i = 0; i < dm->n_tensors; i++) {
        free(want[i]);
        free(got[i]);
    }
    compact_free(&c);
    return rc;
}

/* The dump on one backend ("host", "cuda", "hip"; NULL: the automatic choice, skipped when it is the host). */
static int replay_on(replay *r, const char *backend) {
    const rk_dump *dm = r->dm;
    ropekv_options o = {ROPEKV_SIZED(ropekv_options)};
    o.backend = !backend                   ? ROPEKV_BACKEND_AUTO
                : !strcmp(backend, "host") ? ROPEKV_BACKEND_HOST
                : !strcmp(backend, "cuda") ? ROPEKV_BACKEND_CUDA
                                           : ROPEKV_BACKEND_HIP;
    ropekv_ctx *ctx = NULL;
    ropekv_status s = ropekv_create(&ctx, &o);
    if (s != ROPEKV_OK) {
        if (!backend) return RK_REPLAY_SAME; /* no GPU here: the host run stands */
        fprintf(r->out, "%s: no context: %s\n", backend, ropekv_status_name(s));
        return RK_REPLAY_REFUSED;
    }
    const char *name = ropekv_backend_name(ctx);
    if (!backend && strcmp(name, "host") == 0) {
        fprintf(r->out, "no GPU backend on this machine: replayed on the host only\n");
        ropekv_destroy(ctx);
        return RK_REPLAY_SAME;
    }
    int rc = RK_REPLAY_REFUSED;
    ropekv_kernel *k = NULL;
    rk_desc *d = malloc(sizeof *d);
    char file[96];
    snprintf(file, sizeof file, "%s.lua (from the dump)", dm->spec);
    if (!d) {
        fprintf(r->out, "%s: out of memory\n", name);
    } else if (dm->spec_len && (s = ropekv_load_spec_text(ctx, file, dm->spec_text, dm->spec_len)) != ROPEKV_OK) {
        fprintf(r->out, "%s: the dump's spec does not load: %s\n", name, ropekv_last_error(ctx));
    } else if ((s = ropekv_kernel_get(ctx, &dm->v, &k)) != ROPEKV_OK) {
        fprintf(r->out, "%s: the variant cannot be built on target %s: %s\n", name, ropekv_target(ctx),
                ropekv_last_error(ctx));
    } else {
        ropekv_kernel_params kp;
        ropekv_kernel_info(k, &kp);
        rk_err err = {0};
        const rk_arch *arch = rk_arch_find(&r->archs, kp.target);
        d->spec = &r->spec;
        if (!arch || rk_desc_listed(&r->spec, arch, &r->choice, d, &err) != ROPEKV_OK || strcmp(d->key, kp.key) != 0) {
            fprintf(r->out, "%s: the reference's description of %s differs from the kernel's (%s)\n", name, kp.key,
                    err.msg);
        } else {
            fprintf(r->out, "%s (target %s): %s\n", name, ropekv_target(ctx), kp.name);
            if (dm->n_tensors == 0) { /* a refused launch without its tensors: the check alone, which reads none */
                char why[2048];
                ropekv_args a = dm->args;
                a.size = sizeof a;
                s = ropekv_query(ctx, &dm->v, &a, why, sizeof why);
                fprintf(r->out, "%s: the argument check returns %s\n", name, s == ROPEKV_OK ? "ROPEKV_OK" : why);
                rc = s == dm->status ? RK_REPLAY_SAME : RK_REPLAY_DIFFERS;
                if (rc != RK_REPLAY_SAME)
                    fprintf(r->out, "%s: the dumped launch returned %s\n", name, ropekv_status_name(dm->status));
            } else {
                rc = replay_tensors(r, ctx, k, d);
            }
        }
    }
    ropekv_kernel_release(k);
    ropekv_destroy(ctx);
    free(d);
    return rc;
}

int rk_replay(const char *path, const char *const *backends, int n, FILE *out) {
    rk_codeobj file = {0};
    char shown[512];
    if (rk_read_file(path, &file) != ROPEKV_OK) {
        fprintf(out, "replay: cannot read %s: %s\n", rk_printable(path, shown, sizeof shown), strerror(errno));
        return RK_REPLAY_REFUSED;
    }
    replay *r = calloc(1, sizeof *r);
    rk_dump *dm = malloc(sizeof *dm);
    rk_err err = {0};
    int rc = RK_REPLAY_REFUSED;
    ropekv_status s;
    size_t len;
    const char *archs = rk_embedded("archs.lua", &len);
    if (!r || !dm) {
        fprintf(out, "replay: out of memory\n");
    } else if ((s = rk_dump_parse(file.data, file.len, dm, &err)) != ROPEKV_OK) {
        fprintf(out, "replay: %s refused: %s: %s\n", rk_printable(path, shown, sizeof shown), ropekv_status_name(s),
                err.msg);
    } else if (!archs || rk_archs_load("specs/archs.lua", archs, len, &r->archs, &err) != ROPEKV_OK) {
        fprintf(out, "replay: the architecture table does not load: %s\n", err.msg);
    } else {
        r->dm = dm;
        r->out = out;
        fprintf(out, "dump %s: ropekv %s, %s target %s (row %s), launch %llu (%s), %s%s%s\n",
                rk_printable(path, shown, sizeof shown), dm->library, dm->backend, dm->device_target, dm->arch,
                (unsigned long long)dm->launch, rk_dump_reason_name(dm->reason), ropekv_status_name(dm->status),
                dm->message[0] ? ": " : "", dm->message);
        fprintf(out, "kernel: %s\n        %s\n", dm->key, dm->name);
        for (int i = 0; i < dm->n_tensors; i++) {
            char rows[96] = "";
            if (dm->t[i].rows)
                snprintf(rows, sizeof rows, ", %llu rows of it dumped", (unsigned long long)dm->t[i].n_rows);
            fprintf(out, "  %-14s %12llu bytes (%s%s)\n", dm->t[i].name, (unsigned long long)dm->t[i].bytes,
                    dm->t[i].access == ROPEKV_TENSOR_READ    ? "read"
                    : dm->t[i].access == ROPEKV_TENSOR_WRITE ? "written"
                                                             : "read and written",
                    rows);
        }
        /* the spec: the dump's text, else the built-in one of its name; the choices as the dump's variant names them */
        char spec_file[96];
        snprintf(spec_file, sizeof spec_file, "%s.lua (from the dump)", dm->spec);
        s = dm->spec_len ? rk_spec_load(spec_file, dm->spec_text, dm->spec_len, &r->archs, &r->spec, &err)
                         : rk_spec_builtin(dm->spec, &r->archs, &r->spec, &err);
        const ropekv_variant *v = &dm->v;
        r->choice = (rk_choice){v->kv, v->q, v->positions, v->slots, v->q_dtype, v->layout, v->op, v->norm, 0};
        if (s == ROPEKV_OK && strcmp(r->spec.name, dm->spec) != 0)
            s = (ropekv_status)rk_fail(&err, ROPEKV_ERR_DUMP, "the spec text is spec %s, the variant names %s",
                                       r->spec.name, dm->spec);
        if (s == ROPEKV_OK && v->record) s = (ropekv_status)rk_spec_row_find(&r->spec, v->record, &r->choice, &err);
        if (s != ROPEKV_OK) {
            fprintf(out, "replay: the dump's spec: %s: %s\n", ropekv_status_name(s), err.msg);
        } else {
            /* the dumped kernel, described again from the dump's spec and choices on its own row */
            const rk_arch *row = rk_arch_find(&r->archs, dm->arch);
            rk_desc *again = malloc(sizeof *again);
            if (again && row && rk_desc_make(&r->spec, row, &r->choice, again, &err) == ROPEKV_OK &&
                (strcmp(again->key, dm->key) != 0 || strcmp(again->name, dm->name) != 0))
                fprintf(out,
                        "warning: the dump's spec and choices describe %s (%s) on row %s today, not the dumped "
                        "kernel: replaying what they describe\n",
                        again->key, again->name, dm->arch);
            free(again);
            rc = RK_REPLAY_SAME;
            for (int i = 0; i < (n ? n : 2); i++) {
                const int one = replay_on(r, n ? backends[i] : i == 0 ? "host" : NULL);
                if (one > rc) rc = one;
            }
        }
    }
    free(dm);
    free(r);
    rk_code_free(&file);
    return rc;
}
