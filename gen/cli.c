/* ropekv-gen: list, emit and self-test the kernel variants that the spec files describe.
 * The CLI only parses arguments; the work is done by the gen library and the runtime backends. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "host_backend.h"
#include "rk.h"

#define MAX_VARIANTS (RK_MAX_SPECS * 64)

typedef struct opts {
    const char *extra_specs[16];
    int n_extra;
    const char *filter;   /* substring of the key */
    const char *out;      /* emit */
    int jobs;             /* selftest */
} opts;

static const char USAGE[] =
    "usage: ropekv-gen [--spec FILE]... [--filter TEXT] COMMAND [options]\n"
    "\n"
    "Commands:\n"
    "  list               one variant per line: key, then kernel name\n"
    "  emit --out DIR     one HIP source per variant and DIR/manifest.json\n"
    "  selftest [--jobs N] run every variant on the host backend against the CPU reference\n"
    "\n"
    "Options:\n"
    "  --spec FILE        also load this model spec (a spec with the same name replaces the built-in)\n"
    "  --filter TEXT      only variants whose key contains TEXT\n"
    "  --help             this text; `ropekv-gen COMMAND --help` describes one command\n"
    "\n"
    "The architecture table and model specs under specs/ are built in.\n";

static const char *const HELP_LIST =
    "usage: ropekv-gen [--spec FILE]... [--filter TEXT] list\n"
    "Prints every variant of the loaded specs, one per line: the canonical key\n"
    "(spec/target/kv/q/pos=.../slot=...) then the extern \"C\" kernel name.\n";
static const char *const HELP_EMIT =
    "usage: ropekv-gen [--spec FILE]... [--filter TEXT] emit --out DIR\n"
    "Writes DIR/<spec>.<kernel>.hip for every variant and DIR/manifest.json describing them.\n"
    "Output is deterministic: emitting twice gives identical bytes.\n";
static const char *const HELP_SELFTEST =
    "usage: ropekv-gen [--spec FILE]... [--filter TEXT] selftest [--jobs N]\n"
    "Compiles every variant with the host backend ($CXX or c++) and runs it over several shapes\n"
    "(T = 1, 3, 17, 300; H = 1, 16; padded strides; negative slots; NaN/inf inputs; 32- and 64-bit\n"
    "index entry points), comparing every output byte with the CPU reference.\n"
    "Ends with `N passed, M failed`; exit status 0 only when nothing failed.\n";

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? cap * 2 : 4096;
            char *p = realloc(buf, cap);
            if (!p) break;
            buf = p;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) break;
    }
    fclose(f);
    *len = n;
    return buf;
}

static int load_catalog(const opts *o, rk_catalog *cat) {
    rk_err err = {0};
    if (rk_catalog_load_embedded(cat, &err) != RK_OK) {
        fprintf(stderr, "ropekv-gen: %s\n", err.msg);
        return -1;
    }
    for (int i = 0; i < o->n_extra; i++) {
        size_t len;
        char *text = read_file(o->extra_specs[i], &len);
        if (!text) {
            fprintf(stderr, "ropekv-gen: cannot read %s: %s\n", o->extra_specs[i], strerror(errno));
            return -1;
        }
        int rc = rk_catalog_add(cat, o->extra_specs[i], text, len, &err);
        free(text);
        if (rc != RK_OK) {
            fprintf(stderr, "ropekv-gen: %s\n", err.msg);
            return -1;
        }
    }
    return 0;
}

/* All variants of the catalog passing the filter; returns the count or -1. */
static int all_variants(const opts *o, const rk_catalog *cat, rk_variant *out, int cap) {
    int n = 0;
    rk_variant *tmp = malloc(sizeof *tmp * RK_MAX_VARIANTS_PER_SPEC);
    if (!tmp) return -1;
    for (int s = 0; s < cat->n_specs; s++) {
        rk_err err = {0};
        int k = rk_variants(&cat->specs[s], &cat->archs, tmp, RK_MAX_VARIANTS_PER_SPEC, &err);
        if (k < 0) {
            fprintf(stderr, "ropekv-gen: %s\n", err.msg);
            free(tmp);
            return -1;
        }
        for (int i = 0; i < k; i++) {
            if (o->filter && !strstr(tmp[i].key, o->filter)) continue;
            if (n == cap) {
                fprintf(stderr, "ropekv-gen: more than %d variants\n", cap);
                free(tmp);
                return -1;
            }
            out[n++] = tmp[i];
        }
    }
    free(tmp);
    return n;
}

static int cmd_list(const rk_variant *v, int n) {
    for (int i = 0; i < n; i++) printf("%s %s\n", v[i].key, v[i].name);
    return 0;
}

static int write_file(const char *path, const char *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = fwrite(data, 1, len, f) == len;
    ok &= fclose(f) == 0;
    return ok ? 0 : -1;
}

static int cmd_emit(const opts *o, const rk_variant *v, int n) {
    if (!o->out) {
        fprintf(stderr, "ropekv-gen emit: --out DIR is required\n");
        return 2;
    }
    if (mkdir(o->out, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "ropekv-gen emit: cannot create %s: %s\n", o->out, strerror(errno));
        return 1;
    }
    rk_buf man = {0};
    int rc = rk_buf_printf(&man, "{\n  \"generator\": \"ropekv %s\",\n  \"variants\": [", RK_VERSION_STRING);
    for (int i = 0; i < n && rc == 0; i++) {
        rk_buf src = {0};
        rk_err err = {0};
        char path[4096], file[512];
        if (rk_emit(&v[i], &src, &err) != RK_OK) {
            fprintf(stderr, "ropekv-gen emit: %s: %s\n", v[i].key, err.msg);
            rk_buf_free(&src);
            rc = 1;
            break;
        }
        snprintf(file, sizeof file, "%s.%s.hip", v[i].spec->name, v[i].name);
        snprintf(path, sizeof path, "%s/%s", o->out, file);
        if (write_file(path, src.p, src.len) != 0) {
            fprintf(stderr, "ropekv-gen emit: cannot write %s: %s\n", path, strerror(errno));
            rc = 1;
        }
        rk_buf_free(&src);
        const rk_variant *x = &v[i];
        rc |= rk_buf_printf(&man,
                            "%s\n    {\"key\": \"%s\", \"spec\": \"%s\", \"target\": \"%s\", \"kv\": \"%s\", \"q\": \"%s\", "
                            "\"positions\": \"%s\", \"slots\": \"%s\", \"kernel\": \"%s\", \"file\": \"%s\", "
                            "\"compiler\": \"%s\", \"block\": %d}",
                            i ? "," : "", x->key, x->spec->name, x->arch->name, rk_kv_name(x->kv), rk_qform_name(x->q),
                            rk_idx_name(x->pos), rk_idx_name(x->slot), x->name, file,
                            rk_compiler_name(x->arch->compiler), x->arch->block);
    }
    rc |= rk_buf_printf(&man, "\n  ]\n}\n");
    if (rc == 0) {
        char path[4096];
        snprintf(path, sizeof path, "%s/manifest.json", o->out);
        if (write_file(path, man.p, man.len) != 0) {
            fprintf(stderr, "ropekv-gen emit: cannot write %s: %s\n", path, strerror(errno));
            rc = 1;
        }
    }
    rk_buf_free(&man);
    if (rc == 0) printf("%d variants written to %s\n", n, o->out);
    return rc ? 1 : 0;
}

/* ---- selftest --------------------------------------------------------------------------------- */
static int cmd_selftest(const opts *o, const rk_variant *v, int n) {
    char dir[] = "/tmp/ropekv-selftest-XXXXXX";
    const char *tmpdir = getenv("TMPDIR");
    char dirbuf[4096];
    snprintf(dirbuf, sizeof dirbuf, "%s/ropekv-selftest-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
    char *d = mkdtemp(strlen(dirbuf) < sizeof dirbuf - 1 ? dirbuf : dir);
    if (!d) {
        fprintf(stderr, "ropekv-gen selftest: cannot create a work directory: %s\n", strerror(errno));
        return 1;
    }
    /* Results shared with the worker processes: 0 not run, 1 passed, 2 failed. */
    char *res = mmap(NULL, (size_t)n + 1, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (res == MAP_FAILED) return 1;
    memset(res, 0, (size_t)n + 1);
    int jobs = o->jobs > 0 ? o->jobs : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (jobs < 1) jobs = 1;
    printf("selftest: %d variants on the host backend (%s), %d jobs\n", n, rk_host_compiler(), jobs);
    fflush(stdout);
    for (int j = 0; j < jobs; j++) {
        pid_t pid = fork();
        if (pid < 0) {
            jobs = j;
            break;
        }
        if (pid > 0) continue;
        for (int i = j; i < n; i += jobs) {
            char why[4096];
            int ok = rk_host_check_variant(&v[i], d, why, sizeof why);
            res[i] = ok ? 1 : 2;
            if (ok) printf("pass %s\n", v[i].key);
            else printf("FAIL %s: %s\n", v[i].key, why);
            fflush(stdout);
        }
        _exit(0);
    }
    while (wait(NULL) > 0) {}
    int passed = 0, failed = 0;
    for (int i = 0; i < n; i++) {
        passed += res[i] == 1;
        failed += res[i] != 1;
    }
    munmap(res, (size_t)n + 1);
    rmdir(d);
    printf("%d passed, %d failed\n", passed, failed);
    return failed || n == 0 ? 1 : 0;
}

int main(int argc, char **argv) {
    opts o = {.jobs = 0};
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(USAGE, stdout);
            return 0;
        } else if (!strcmp(argv[i], "--spec") && i + 1 < argc) {
            if (o.n_extra == 16) {
                fprintf(stderr, "ropekv-gen: at most 16 --spec files\n");
                return 2;
            }
            o.extra_specs[o.n_extra++] = argv[++i];
        } else if (!strcmp(argv[i], "--filter") && i + 1 < argc) {
            o.filter = argv[++i];
        } else {
            fprintf(stderr, "ropekv-gen: unknown option '%s'\n\n%s", argv[i], USAGE);
            return 2;
        }
    }
    if (i == argc) {
        fputs(USAGE, stderr);
        return 2;
    }
    const char *cmd = argv[i++];
    const char *help = !strcmp(cmd, "list") ? HELP_LIST : !strcmp(cmd, "emit") ? HELP_EMIT
                     : !strcmp(cmd, "selftest") ? HELP_SELFTEST : NULL;
    if (!help) {
        fprintf(stderr, "ropekv-gen: unknown command '%s'\n\n%s", cmd, USAGE);
        return 2;
    }
    for (; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(help, stdout);
            return 0;
        } else if (!strcmp(cmd, "emit") && !strcmp(argv[i], "--out") && i + 1 < argc) {
            o.out = argv[++i];
        } else if (!strcmp(cmd, "selftest") && !strcmp(argv[i], "--jobs") && i + 1 < argc) {
            o.jobs = atoi(argv[++i]);
        } else {
            fprintf(stderr, "ropekv-gen %s: unknown argument '%s'\n\n%s", cmd, argv[i], help);
            return 2;
        }
    }
    rk_catalog *cat = malloc(sizeof *cat);
    rk_variant *v = malloc(sizeof *v * MAX_VARIANTS);
    int rc = 1;
    if (!cat || !v) {
        fprintf(stderr, "ropekv-gen: out of memory\n");
    } else if (load_catalog(&o, cat) == 0) {
        int n = all_variants(&o, cat, v, MAX_VARIANTS);
        if (n >= 0)
            rc = !strcmp(cmd, "list") ? cmd_list(v, n) : !strcmp(cmd, "emit") ? cmd_emit(&o, v, n) : cmd_selftest(&o, v, n);
    }
    free(v);
    free(cat);
    return rc;
}
