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

/* Compares every byte of the tensors; prints the first difference of each. 0: all equal. */
static int compare(const replay *r, const char *backend, unsigned char *const *got, unsigned char *const *want) {
    const rk_dump *dm = r->dm;
    int differ = 0;
    uint64_t total = 0;
    for (int i = 0; i < dm->n_tensors; i++) {
        const rk_dump_tensor *t = &dm->t[i];
        total += t->bytes;
        uint64_t n = 0, first = 0;
        for (uint64_t b = 0; b < t->bytes; b++)
            if (got[i][b] != want[i][b] && n++ == 0) first = b;
        if (n) {
            fprintf(r->out,
                    "%s: %s differs from the reference in %llu of %llu bytes; the first at byte %llu: kernel 0x%02x, "
                    "reference 0x%02x\n",
                    backend, t->name, (unsigned long long)n, (unsigned long long)t->bytes, (unsigned long long)first,
                    got[i][first], want[i][first]);
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
    int row[RK_TENSORS_MAX];
    for (int i = 0; i < dm->n_tensors; i++) { /* every dumped tensor is one of the kernel's */
        row[i] = -1;
        for (int j = 0; j < nt; j++)
            if (strcmp(ts[j].name, dm->t[i].name) == 0) row[i] = j;
        if (row[i] < 0) {
            fprintf(r->out, "%s: ROPEKV_ERR_DUMP: tensor '%s' is not a tensor of %s\n", backend, dm->t[i].name, d->key);
            return RK_REPLAY_REFUSED;
        }
    }
    unsigned char *want[RK_TENSORS_MAX] = {0}, *got[RK_TENSORS_MAX] = {0};
    uint64_t dev[RK_TENSORS_MAX] = {0};
    int rc = RK_REPLAY_REFUSED, n_dev = 0;
    rk_devmem m = {0};
    const int host = strcmp(backend, "host") == 0;
    char why[1024];
    for (int i = 0; i < dm->n_tensors; i++) {
        want[i] = host_alloc(dm->t[i].bytes);
        got[i] = host_alloc(dm->t[i].bytes);
        if (!want[i] || !got[i]) {
            fprintf(r->out, "%s: out of memory\n", backend);
            goto done;
        }
        memcpy(want[i], dm->t[i].data, dm->t[i].bytes);
        memcpy(got[i], dm->t[i].data, dm->t[i].bytes);
    }
    /* the reference's launch: the dumped args on the copies, checked as the library checks them, and every tensor's
     * extent the one the dump holds */
    ropekv_args ra = dm->args;
    ra.size = sizeof ra;
    point_args(dm, ts, row, (void *const *)want, &ra);
    rk_plan pl;
    rk_err err = {0};
    ropekv_status s = rk_args_check(d, &ra, &pl, &err);
    if (s != ROPEKV_OK && dm->status == ROPEKV_OK) {
        fprintf(r->out, "%s: the dumped args fail the check on %s: %s: %s\n", backend, d->key, ropekv_status_name(s),
                err.msg);
        rc = RK_REPLAY_DIFFERS;
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
    /* the kernel's launch: the host's buffers are its memory; a GPU's are copies */
    void *kbuf[RK_TENSORS_MAX];
    if (!host) {
        if (rk_devmem_open(&m, backend, 0, why, sizeof why) != 0) {
            fprintf(r->out, "%s: %s\n", backend, why);
            goto done;
        }
        for (; n_dev < dm->n_tensors; n_dev++) {
            const uint64_t b = dm->t[n_dev].bytes;
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
    ropekv_args ka = dm->args;
    ka.size = sizeof ka;
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
        if (rk_devmem_to_host(&m, got[i], dev[i], (size_t)dm->t[i].bytes, why, sizeof why) != 0) {
            fprintf(r->out, "%s: %s\n", backend, why);
            goto done;
        }
    if (s == ROPEKV_OK) rk_ref_run(d, &pl.args); /* a refused launch writes nothing: want stays the dumped bytes */
    else fprintf(r->out, "%s: refused again with %s: %s\n", backend, ropekv_status_name(s), ropekv_last_error(ctx));
    rc = compare(r, backend, got, want) ? RK_REPLAY_DIFFERS : RK_REPLAY_SAME;
done:
    for (int i = 0; i < n_dev; i++) rk_devmem_free(&m, dev[i]);
    for (int i = 0; i < dm->n_tensors; i++) {
        free(want[i]);
        free(got[i]);
    }
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
        for (int i = 0; i < dm->n_tensors; i++)
            fprintf(out, "  %-14s %12llu bytes (%s)\n", dm->t[i].name, (unsigned long long)dm->t[i].bytes,
                    dm->t[i].access == ROPEKV_TENSOR_READ    ? "read"
                    : dm->t[i].access == ROPEKV_TENSOR_WRITE ? "written"
                                                             : "read and written");
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
