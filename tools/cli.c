/* ropekv-gen: list, emit and self-test the kernel variants that the spec files describe.
 * The CLI only parses arguments; the work is done by the gen library and the runtime backends. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "abi.h"
#include "build.h"
#include "cache.h"
#include "clang.h"
#include "cover.h"
#include "host_compile.h"
#include "pool.h"
#include "replay.h"
#include "rk.h"
#include "check.h"
#include "ropekv.h"

#define MAX_VARIANTS (RK_MAX_SPECS * 1024)

typedef struct opts {
    const char *extra_specs[16];
    int n_extra;
    const char *filter;                /* substring of the key */
    const char *out;                   /* emit */
    int jobs;                          /* selftest, build */
    const char *targets[RK_MAX_ARCHS]; /* build, inspect */
    int n_targets;
    int strict;         /* build */
    const char *key;    /* inspect */
    const char *bundle; /* build --bundle DIR */
    int all;            /* list, selftest: the exhaustive product, not the covering set */
    int product;        /* the product's size (of the variants passing the filter) */
} opts;

static const char USAGE[] =
    "usage: ropekv-gen [--spec FILE]... [--filter TEXT] COMMAND [options]\n"
    "\n"
    "Commands:\n"
    "  list [--all]       the covering set (--all: every variant), one per line: key, then kernel name\n"
    "  emit --out DIR     one HIP source per variant and DIR/manifest.json\n"
    "  selftest [--all] [--jobs N]\n"
    "                     run the covering set (--all: every variant) on the host backend against the\n"
    "                     CPU reference\n"
    "  build [--target T]... [--jobs N] [--strict] [--bundle DIR]\n"
    "                     compile every variant with its target's compiler; a table of registers,\n"
    "                     scratch, spills, code size and hardware conversions per variant\n"
    "  inspect KEY [--target T]\n"
    "                     one variant's table row, compiler log and disassembly (PTX/SASS on NVIDIA)\n"
    "  isa-baseline [--jobs N]\n"
    "                     the AMD ISA review's baseline (tests/golden/isa_amd.txt) of this build\n"
    "  replay FILE [--backend B]...\n"
    "                     run a dump of a launch (ROPEKV_DUMP, docs/dump.md) again and compare every byte\n"
    "                     with the CPU reference\n"
    "\n"
    "Options:\n"
    "  --spec FILE        also load this model spec (a spec with the same name replaces the built-in)\n"
    "  --filter TEXT      only variants whose key contains TEXT\n"
    "  --help             this text; `ropekv-gen COMMAND --help` describes one command\n"
    "  --version          the version of ropekv\n"
    "\n"
    "The architecture table and model specs under specs/ are built in.\n";

static const char *const HELP_REPLAY =
    "usage: ropekv-gen replay FILE [--backend host|cuda|hip]...\n"
    "Reads a dump file (written by a context with ROPEKV_DUMP or ropekv_options.dump: docs/dump.md), checks it\n"
    "field by field, rebuilds its variant (the dump's spec text and choices) for each backend's target, runs the\n"
    "launch on the dumped inputs and the CPU reference on a copy, and compares every byte of every tensor the\n"
    "launch touches, printing the first difference of each. A launch the argument check refused is refused again\n"
    "with the same status. Without --backend: the host backend, then the GPU the automatic choice finds, if any.\n"
    "Exit status: 0 every byte equal (or the same refusal), 1 a difference, 2 usage, 3 the file refused (its\n"
    "ropekv_status named: ROPEKV_ERR_DUMP, ROPEKV_ERR_VERSION) or the variant cannot be built here.\n";

static const char *const HELP_LIST =
    "usage: ropekv-gen [--spec FILE]... [--filter TEXT] list [--all]\n"
    "Prints the covering set of the loaded specs (every value of every choice, every pair of values and the\n"
    "declared interactions: docs/testing.md), one variant per line: the canonical key\n"
    "(spec/target/kv/q/pos=.../slot=...) then the extern \"C\" kernel name; its size and the product's go to\n"
    "stderr. --all prints every variant (the exhaustive product).\n";
static const char *const HELP_EMIT =
    "usage: ropekv-gen [--spec FILE]... [--filter TEXT] emit --out DIR\n"
    "Writes DIR/<spec>.<kernel>.hip for every variant and DIR/manifest.json describing them.\n"
    "Output is deterministic: emitting twice gives identical bytes.\n";
static const char *const HELP_SELFTEST =
    "usage: ropekv-gen [--spec FILE]... [--filter TEXT] selftest [--all] [--jobs N]\n"
    "Compiles the covering set (what `list` prints; --all: every variant) with the host backend ($CXX or\n"
    "c++) and runs each variant over several shapes\n"
    "(T = 1, 3, 17, 300; H = 1, 16; padded strides; negative slots; NaN/inf inputs; 32- and 64-bit\n"
    "index entry points), comparing every output byte with the CPU reference.\n"
    "Ends with `N passed, M failed`; exit status 0 only when nothing failed.\n";

static const char *const HELP_BUILD =
    "usage: ropekv-gen [--spec FILE]... [--filter TEXT] build [--target T]... [--jobs N] [--strict]\n"
    "Compiles every variant that `list` prints (with --target, only those whose target is T; T must be\n"
    "a row of specs/archs.lua) with the compiler of its target:\n"
    "  AMD     hiprtc when the local hiprtc's release is known to build the target (ROCm 5.x: up to\n"
    "          gfx90a and gfx1036), else clang++-22 offline ($ROPEKV_CLANG)\n"
    "  NVIDIA  nvrtc, -arch=sm_XY (a CUBIN; no GPU needed)\n"
    "  host    the host C++ compiler ($CXX or c++) into a shared object: only the compile is checked\n"
    "          here (no register figures); `selftest` runs host kernels against the reference\n"
    "Progress goes to stderr (\"[k/n] key compiler ms\"); stdout gets one row per variant:\n"
    "  KEY TARGET COMPILER    the variant, its target, the compiler and its version\n"
    "  MS                     compile time in milliseconds\n"
    "  REGS                   AMD: vgprs/sgprs (vgprs include AGPRs); NVIDIA: registers per thread\n"
    "  SCRATCH SPILLS         private memory bytes per thread; spills (AMD: VGPR+SGPR spill count,\n"
    "                         NVIDIA: bytes of spill stores)\n"
    "  CODE                   bytes of machine code (both entry points, <name> and <name>_i64)\n"
    "  FP8                    the hardware f32->fp8 conversion is used (AMD v_cvt_pk_fp8_f32, NVIDIA\n"
    "                         cvt.rn.satfinite.e4m3x2.f32); - for a bf16 cache\n"
    "  BF16                   the hardware f32->bf16 conversion v_cvt_pk_bf16_f32 is used (looked for on\n"
    "                         AMD targets with bf16_hw; - elsewhere; `inspect` looks on every target)\n"
    "then one summary row per target (largest figures, total compile time). A figure that could not\n"
    "be read (the AMD FP8 and BF16 columns need llvm-objdump-22) is -.\n"
    "  --target T   only variants for target T (repeatable)\n"
    "  --jobs N     worker processes (default: the number of CPUs)\n"
    "  --strict     also fail when a device variant uses scratch or spills (or they are not known), or\n"
    "               an fp8 variant on a target with fp8_hw lacks the hardware fp8 conversion, or an AMD\n"
    "               code object fails the launch ABI check (docs/amd.md)\n"
    "  --bundle DIR write the code of every variant chosen (both entries, 32- and 64-bit; each spec's,\n"
    "               also where another spec's renders the same code) into DIR as\n"
    "               the runtime's own cache entries, keyed as the runtime keys them, plus the identity\n"
    "               of the compiler and DIR/ropekv-bundle.txt listing the kernels; a runtime given DIR\n"
    "               as a read-only layer ($ROPEKV_CACHE_RO) runs them without any compiler. Builds through\n"
    "               the runtime (a compile-only context for GPU targets: their compiler is needed here,\n"
    "               nvrtc, hiprtc or for the AMD targets it cannot build clang++-22, not their GPU; the\n"
    "               keys are a device's); no table is printed. With\n"
    "               --bundle an AMD --target may carry the feature flags its devices report\n"
    "               (gfx942:sramecc+:xnack-): a runtime finds a bundle by the device's full target id.\n"
    "               Every entry is read back from DIR as a runtime reads it; DIR gets mode 0755 and its\n"
    "               files 0644, less the umask's bits\n"
    "Exit status 0 only when every variant compiled (and, with --strict, broke no rule; with --bundle,\n"
    "every entry read back from DIR); the compiler log of each failure, and each entry missing from\n"
    "the bundle, is printed on stderr.\n";
static const char *const HELP_INSPECT =
    "usage: ropekv-gen [--spec FILE]... [--filter TEXT] inspect KEY [--target T]\n"
    "Compiles one variant as `build` does and prints its table row, the compiler log and the code:\n"
    "  AMD: `llvm-objdump-22 -d` of the code object; NVIDIA: the PTX, then the SASS of the CUBIN when\n"
    "  cuobjdump or nvdisasm is on PATH (or in /usr/local/cuda/bin); host: `objdump -d` of the shared\n"
    "  object.\n"
    "KEY is a variant key as `list` prints it (spec/target/kv/q/pos=.../slot=...), a kernel name, or\n"
    "text found in exactly one key (with or without its target). With --target T (a row of\n"
    "specs/archs.lua) the variant is built for T even when its spec does not list T; KEY may then\n"
    "leave the target out (spec/kv/q/pos=.../slot=...) or name another target.\n"
    "Exit status 0 when the variant compiled.\n";

static const char *const HELP_ISA_BASELINE =
    "usage: ropekv-gen [--spec FILE]... [--filter TEXT] isa-baseline [--jobs N]\n"
    "Builds the covering set of the loaded specs on every AMD row of specs/archs.lua (as test_matrix\n"
    "does: each distinct kernel once, with the compiler `build` picks) and prints the baseline of\n"
    "test_matrix's ISA review on stdout, one line per (target, kernel), by target (specs/archs.lua's order)\n"
    "then kernel name:\n"
    "  target kernel vgprs sgprs occupancy narrow split waits load_waits free_waits\n"
    "the kernel's VGPRs and SGPRs, the waves per SIMD its VGPRs allow, its narrower-than-16-byte global\n"
    "loads and stores, those of them that are pieces of a split 16-byte chunk, its vector-memory load\n"
    "waits, its waits between two global loads and those of them whose later load neither depends on a\n"
    "loaded value nor starts another exec region (docs/amd.md, \"Per-target ISA review\"). test_matrix\n"
    "fails a kernel worse than its line on any figure, a kernel without a line and a line of no kernel.\n"
    "A deliberate change updates the baseline with\n"
    "  build/ropekv-gen isa-baseline > tests/golden/isa_amd.txt\n"
    "Exit status 0 only when every kernel compiled and was scanned (the llvm-22 tools are needed).\n";

static int load_catalog(const opts *o, rk_catalog *cat) {
    rk_err err = {0};
    if (rk_catalog_load_embedded(cat, &err) != ROPEKV_OK) {
        fprintf(stderr, "ropekv-gen: %s\n", err.msg);
        return -1;
    }
    for (int i = 0; i < o->n_extra; i++) {
        rk_codeobj text;
        if (rk_read_file(o->extra_specs[i], &text) != ROPEKV_OK) {
            fprintf(stderr, "ropekv-gen: cannot read %s: %s\n", o->extra_specs[i], strerror(errno));
            return -1;
        }
        int rc = rk_catalog_add(cat, o->extra_specs[i], (const char *)text.data, text.len, &err);
        rk_code_free(&text);
        if (rc != ROPEKV_OK) {
            fprintf(stderr, "ropekv-gen: %s\n", err.msg);
            return -1;
        }
    }
    return 0;
}

/* The variants of the catalog passing the filter: the covering set, or with all the exhaustive product (each
 * rendered source once); returns the count or -1. *product gets the size of the product before the filter. */
static int all_variants(const opts *o, const rk_catalog *cat, int all, rk_desc *out, int cap, int *product) {
    rk_err err = {0};
    int n = rk_cover_catalog(cat, o->filter, all, out, cap, &err);
    if (n < 0) {
        fprintf(stderr, "ropekv-gen: %s\n", err.msg);
        return -1;
    }
    *product = 0;
    rk_desc *tmp = malloc(sizeof *tmp * RK_MAX_VARIANTS_PER_SPEC);
    for (int s = 0; tmp && s < cat->n_specs; s++) {
        int k = rk_variants(&cat->specs[s], &cat->archs, tmp, RK_MAX_VARIANTS_PER_SPEC, NULL);
        for (int i = 0; i < k; i++) *product += !o->filter || strstr(tmp[i].key, o->filter);
    }
    free(tmp);
    return n;
}

/* build --bundle's variants: every one passing the filter, in the product's order. None is left out for rendering
 * the code of another spec's variant (as all_variants leaves it out): a runtime keys each kernel by its own spec's
 * variant key, so a bundle holds the entries of each. Returns the count or -1. */
static int bundle_variants(const opts *o, const rk_catalog *cat, rk_desc *out, int cap) {
    rk_desc *tmp = malloc(sizeof *tmp * RK_MAX_VARIANTS_PER_SPEC);
    int n = tmp ? 0 : -1;
    for (int s = 0; s < cat->n_specs && n >= 0; s++) {
        rk_err err = {0};
        const int k = rk_variants(&cat->specs[s], &cat->archs, tmp, RK_MAX_VARIANTS_PER_SPEC, &err);
        if (k < 0) fprintf(stderr, "ropekv-gen: %s\n", err.msg);
        for (int i = 0; i < k && n >= 0; i++) {
            if (o->filter && !strstr(tmp[i].key, o->filter)) continue;
            if (n < cap) {
                out[n++] = tmp[i];
                continue;
            }
            fprintf(stderr, "ropekv-gen build --bundle: more than %d variants; choose fewer (--filter)\n", cap);
            n = -1;
        }
        if (k < 0) n = -1;
    }
    if (!tmp) fprintf(stderr, "ropekv-gen: out of memory\n");
    free(tmp);
    return n;
}

static int cmd_list(const rk_desc *v, int n) {
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

static int cmd_emit(const opts *o, const rk_desc *v, int n) {
    if (!o->out) {
        fprintf(stderr, "ropekv-gen emit: --out DIR is required\n");
        return 2;
    }
    if (mkdir(o->out, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "ropekv-gen emit: cannot create %s: %s\n", o->out, strerror(errno));
        return 1;
    }
    rk_buf man = {0};
    int rc = rk_buf_printf(&man, "{\n  \"generator\": \"ropekv %s\",\n  \"variants\": [", ROPEKV_VERSION_STRING);
    for (int i = 0; i < n && rc == 0; i++) {
        rk_buf src = {0};
        rk_err err = {0};
        char path[4096], file[512];
        if (rk_emit(&v[i], &src, &err) != ROPEKV_OK) {
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
        const rk_desc *x = &v[i];
        int64_t from; /* the variant's op's chunks a thread and from where (the read-back op has its own) */
        const int chunks = rk_desc_chunks(x, &from);
        rc |= rk_buf_printf(
            &man,
            "%s\n    {\"key\": \"%s\", \"spec\": \"%s\", \"target\": \"%s\", \"kv\": \"%s\", \"q\": \"%s\", "
            "\"positions\": \"%s\", \"slots\": \"%s\", \"kernel\": \"%s\", \"file\": \"%s\", "
            "\"compiler\": \"%s\", \"block\": %d, \"wide_block\": %d, \"wide_from\": %lld, \"chunks\": %d, "
            "\"chunks_from\": %lld, \"pdl\": %d}",
            i ? "," : "", x->key, x->spec->name, x->arch->name, rk_kv_name(x->kv), rk_qform_name(x->q),
            rk_idx_name(x->pos), rk_idx_name(x->slot), x->name, file, rk_compiler_name(x->arch->compiler),
            x->arch->block, x->arch->wide_block, (long long)x->arch->wide_from, chunks, (long long)from, x->arch->pdl);
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
typedef struct selftest {
    const rk_desc *v;
    const char *dir;
} selftest;

typedef struct selftest_result {
    int ok;
    char why[4096];
} selftest_result;

static int selftest_run(void *ctx, int i, void *result) {
    const selftest *t = ctx;
    selftest_result *r = result;
    r->ok = rk_host_check_variant(&t->v[i], t->dir, r->why, sizeof r->why);
    return 0;
}

static void selftest_lost(void *ctx, int i, void *result, int pid, const char *why) {
    (void)ctx, (void)i, (void)pid;
    selftest_result *r = result;
    r->ok = 0;
    snprintf(r->why, sizeof r->why, "%s", why);
}

static void selftest_done(void *ctx, int k, int n, int i, const void *result) {
    (void)k, (void)n;
    const selftest *t = ctx;
    const selftest_result *r = result;
    if (r->ok) printf("pass %s\n", t->v[i].key);
    else printf("FAIL %s: %s\n", t->v[i].key, r->why);
    fflush(stdout);
}

static int cmd_selftest(const opts *o, const rk_desc *v, int n) {
    char d[4096];
    char why[512];
    if (rk_mktmpdir(d, sizeof d, "selftest") != ROPEKV_OK) { /* the kernels load from memory: noexec is fine */
        fprintf(stderr, "ropekv-gen selftest: cannot create a work directory: %s\n", rk_tmp_failure(why, sizeof why));
        return 1;
    }
    selftest_result *res = malloc(sizeof *res * (size_t)(n > 0 ? n : 1));
    if (!res) {
        rk_rmtmpdir(d);
        return 1;
    }
    int jobs = o->jobs > 0 ? o->jobs : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (jobs < 1) jobs = 1;
    printf("selftest: %d variants (%s of %d) on the host backend (%s), %d jobs\n", n,
           o->all ? "all" : "the covering set", o->product, rk_host_compiler(), jobs);
    fflush(stdout);
    selftest t = {v, d};
    rk_pool p = {.n = n,
                 .result_size = sizeof *res,
                 .jobs = jobs,
                 .worker = "selftest process",
                 .task = "checking this",
                 .ctx = &t,
                 .run = selftest_run,
                 .lost = selftest_lost,
                 .done = selftest_done};
    int passed = 0, failed = 0;
    if (rk_pool_run(&p, res) != 0) {
        fprintf(stderr, "ropekv-gen selftest: cannot start worker processes: %s\n", strerror(errno));
        failed = n;
    } else {
        for (int i = 0; i < n; i++) {
            passed += res[i].ok;
            failed += !res[i].ok;
        }
    }
    free(res);
    rk_rmtmpdir(d);
    printf("%d passed, %d failed\n", passed, failed);
    return failed || n == 0 ? 1 : 0;
}

/* ---- build and inspect ------------------------------------------------------------------------ */
/* The arch row named t, or NULL after a message listing the rows. */
/* The arch row of target t: a row name, or with --bundle an AMD row with the device's feature flags, the
 * full target id a device reports ("gfx942:sramecc+:xnack-"), which the bundle's keys then carry. */
static const rk_arch *target_row(const char *cmd, const rk_catalog *cat, const char *t, int full_ids) {
    char base[RK_NAME_MAX];
    snprintf(base, sizeof base, "%.*s", (int)strcspn(t, ":"), t);
    const rk_arch *a = rk_arch_find(&cat->archs, full_ids ? base : t);
    if (a && strchr(t, ':') && a->vendor != RK_VENDOR_AMD) a = NULL; /* feature flags are AMD's */
    if (a) return a;
    fprintf(stderr, "ropekv-gen %s: unknown target '%s'; specs/archs.lua has:", cmd, t);
    for (int i = 0; i < cat->archs.n; i++) fprintf(stderr, " %s", cat->archs.a[i].name);
    fputc('\n', stderr);
    return NULL;
}

/* ---- bundles ---------------------------------------------------------------------------------- */
int rk_ctx_write_compiler_note(ropekv_ctx *c, char *why, size_t cap); /* runtime.c, internal */
void rk_ctx_compiler_note_digest(const ropekv_ctx *c, unsigned char out[32]);
int rk_kernel_entry_digest(const ropekv_kernel *k, int wide, unsigned char out[32], char *why, size_t cap);
int rk_ctx_use_compiler(ropekv_ctx *c, const char *id,
                        int (*fn)(const char *, size_t, const char *, const char *, rk_codeobj *, rk_buf *));

/* Looks up one promised entry (what: which, for messages) in the bundle opened as a read-only layer. 0 when
 * it is there and valid, else 1 with a message naming it. */
static int check_entry(const rk_cache *l, const unsigned char digest[32], const char *what) {
    unsigned char *data = NULL;
    size_t len = 0;
    char why[1024], hex[65];
    const rk_cache_rc rc = rk_cache_get(l, digest, &data, &len, why, sizeof why);
    free(data);
    if (rc == RK_CACHE_OK) return 0;
    rk_sha256_hex(digest, hex);
    if (why[0]) fprintf(stderr, "ropekv-gen build --bundle: %s does not read back: %s\n", what, why);
    else fprintf(stderr, "ropekv-gen build --bundle: %s is missing: no %s/%s.rkco\n", what, l->dir, hex);
    return 1;
}

/* Reads back what context c wrote into the bundle dir for target: dir opened as a read-only layer, as a runtime
 * opens it, and both entries of each of the n variants and the compiler note looked up there (a failed write is
 * only a warning inside the runtime). Names every entry that is missing or unusable; returns how many (-1: the
 * directory itself cannot be used, or the kernels cannot be described again). */
static int check_bundle(ropekv_ctx *c, const char *target, const rk_desc *v, int n, const char *dir) {
    rk_cache *l = malloc(sizeof *l);
    if (!l) return -1;
    rk_cache_open_ro(l, dir);
    if (!l->usable) {
        fprintf(stderr, "ropekv-gen build --bundle: %s\n", l->why);
        free(l);
        return -1;
    }
    unsigned char digest[32];
    char what[512], why[512];
    rk_ctx_compiler_note_digest(c, digest);
    snprintf(what, sizeof what, "the compiler note for %s", target);
    int missing = check_entry(l, digest, what);
    for (int i = 0; i < n && missing >= 0; i++) {
        ropekv_variant rv = rk_variant_of(&v[i]);
        ropekv_kernel *k = NULL;
        if (ropekv_kernel_get(c, &rv, &k) != ROPEKV_OK) {
            fprintf(stderr, "ropekv-gen build --bundle: %s\n", ropekv_last_error(c));
            missing = -1;
            break;
        }
        for (int wide = 0; wide < 2; wide++) {
            if (rk_kernel_entry_digest(k, wide, digest, why, sizeof why) != 0) {
                fprintf(stderr, "ropekv-gen build --bundle: %s: %s\n", v[i].key, why);
                missing = -1;
                break;
            }
            snprintf(what, sizeof what, "the %s entry of %s (%s%s) for %s", wide ? "64-bit" : "32-bit", v[i].key,
                     v[i].name, wide ? "_i64" : "", target);
            missing += check_entry(l, digest, what);
        }
        ropekv_kernel_release(k);
    }
    free(l);
    return missing;
}

/* Builds the n variants (one target) through the runtime into the cache directory dir: the same code,
 * keys and entry format a runtime finds in a read-only layer, for target (a row name, or an AMD row with
 * feature flags). Appends "kernel KEY NAME TARGET" lines to man. */
static int bundle_target(const opts *o, const rk_arch *a, const char *target, const rk_desc *v, int n, const char *dir,
                         rk_buf *man) {
    ropekv_options opt = {.backend = a->vendor == RK_VENDOR_AMD      ? ROPEKV_BACKEND_HIP
                                     : a->vendor == RK_VENDOR_NVIDIA ? ROPEKV_BACKEND_CUDA
                                                                     : ROPEKV_BACKEND_HOST,
                          .target = target,
                          .cache_dir = dir,
                          .disk_cache = 1,
                          .cache_ro = "",
                          /* GPU targets: no device needed, only the target's compiler (the keys are a device's) */
                          .compile_only = a->vendor != RK_VENDOR_HOST};
    ropekv_ctx *c;
    ropekv_status s = ropekv_create(&c, &opt);
    if (s != ROPEKV_OK) {
        fprintf(stderr, "ropekv-gen build --bundle: no %s backend for target %s here: %s (ROPEKV_LOG=1 says why)\n",
                a->vendor == RK_VENDOR_AMD      ? "hip"
                : a->vendor == RK_VENDOR_NVIDIA ? "cuda"
                                                : "host",
                target, ropekv_status_name(s));
        return 1;
    }
    int failed = 0;
    /* An AMD target the local hiprtc cannot build: clang offline, as `build` compiles it. */
    if (a->vendor == RK_VENDOR_AMD && rk_build_pick(a) == RK_CC_CLANG) {
        char why[512];
        if (rk_clang_available(why, sizeof why) != 0) {
            fprintf(stderr,
                    "ropekv-gen build --bundle: no hip backend for target %s here: hiprtc cannot build it, %s\n",
                    target, why);
            ropekv_destroy(c);
            return 1;
        }
        rk_ctx_use_compiler(c, rk_clang_id(), rk_clang_compile);
    }
    for (int i = 0; i < o->n_extra && !failed; i++)
        if ((s = ropekv_load_spec(c, o->extra_specs[i])) != ROPEKV_OK) failed = 1;
    for (int i = 0; i < n && !failed; i++) {
        ropekv_variant rv = rk_variant_of(&v[i]);
        ropekv_kernel *k = NULL;
        s = ropekv_kernel_get(c, &rv, &k);
        if (s == ROPEKV_OK) s = ropekv_kernel_prepare(k, ROPEKV_ENTRY_32 | ROPEKV_ENTRY_64);
        ropekv_kernel_release(k);
        if (s != ROPEKV_OK) failed = 1;
        else {
            fprintf(stderr, "[%d/%d] %s\n", i + 1, n, v[i].key);
            rk_buf_printf(man, "kernel %s %s %s\n", v[i].key, v[i].name, target);
        }
    }
    char why[1024];
    if (failed) fprintf(stderr, "ropekv-gen build --bundle: %s\n", ropekv_last_error(c));
    else if (rk_ctx_write_compiler_note(c, why, sizeof why) != 0) {
        fprintf(stderr, "ropekv-gen build --bundle: %s\n", why);
        failed = 1;
    }
    const int missing = failed ? 0 : check_bundle(c, target, v, n, dir);
    if (missing) {
        if (missing > 0)
            fprintf(stderr, "ropekv-gen build --bundle: %s lacks %d of the %d entries made for %s\n", dir, missing,
                    2 * n + 1, target);
        failed = 1;
    }
    ropekv_destroy(c);
    return failed;
}

/* The bundle's final modes: dir 0755 and its entries 0644, less the umask's bits (a bundle serves every user of
 * the machine unless the umask says otherwise); the runtime made them private. Lock files are removed. Never
 * follows a symlink. 0, or -1 with a message. */
static int publish_bundle(const char *dir) {
    const mode_t mask = umask(0);
    umask(mask);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!d || fchmod(dfd, 0755 & ~mask) != 0) {
        fprintf(stderr, "ropekv-gen build --bundle: cannot set the mode of %s: %s\n", dir, strerror(errno));
        if (d) closedir(d);
        else if (dfd >= 0) close(dfd);
        return -1;
    }
    int rc = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len == 69 && strcmp(e->d_name + 64, ".lock") == 0) unlinkat(dfd, e->d_name, 0);
        if (len != 69 || strcmp(e->d_name + 64, ".rkco") != 0) continue;
        int fd = openat(dfd, e->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) != 0 || (S_ISREG(st.st_mode) && fchmod(fd, 0644 & ~mask) != 0)) {
            fprintf(stderr, "ropekv-gen build --bundle: cannot set the mode of %s/%s: %s\n", dir, e->d_name,
                    strerror(errno));
            rc = -1;
        }
        if (fd >= 0) close(fd);
    }
    closedir(d);
    return rc;
}

/* build --bundle: the chosen variants, target by target, into o->bundle, each target's entries read back;
 * then its modes (publish_bundle) and its manifest. The lock files the runtime left behind are removed (a
 * bundle is read-only). */
static int cmd_bundle(const opts *o, const rk_build_item *items, int m) {
    rk_buf man = {0};
    rk_buf_printf(&man, "ropekv-bundle 1\nropekv %s\n", ROPEKV_VERSION_STRING);
    rk_desc *group = malloc(sizeof *group * (size_t)m);
    int rc = group ? 0 : 1;
    /* one context per target id: each --target as given (a row, or an AMD row with feature flags), else each
     * row the chosen variants have */
    const int n_ids = o->n_targets ? o->n_targets : m;
    for (int t = 0; t < n_ids && rc == 0; t++) {
        const char *id = o->n_targets ? o->targets[t] : items[t].v.arch->name;
        const size_t base = strcspn(id, ":");
        int seen = 0;
        for (int u = 0; u < t && !seen; u++)
            seen = strcmp(o->n_targets ? o->targets[u] : items[u].v.arch->name, id) == 0;
        if (seen) continue;
        int n = 0;
        const rk_arch *a = NULL;
        for (int j = 0; j < m; j++)
            if (strlen(items[j].v.arch->name) == base && strncmp(items[j].v.arch->name, id, base) == 0) {
                group[n++] = items[j].v;
                a = items[j].v.arch;
            }
        if (n) rc = bundle_target(o, a, id, group, n, o->bundle, &man);
    }
    free(group);
    if (rc == 0 && publish_bundle(o->bundle) != 0) rc = 1;
    char path[4200];
    snprintf(path, sizeof path, "%s/ropekv-bundle.txt", o->bundle);
    if (rc == 0 && write_file(path, man.p, man.len) != 0) {
        fprintf(stderr, "ropekv-gen build --bundle: cannot write %s: %s\n", path, strerror(errno));
        rc = 1;
    }
    if (rc == 0) fprintf(stderr, "build: %d variants bundled in %s\n", m, o->bundle);
    rk_buf_free(&man);
    return rc;
}

static int cmd_build(const opts *o, const rk_catalog *cat, const rk_desc *v, int n) {
    const rk_arch *want[RK_MAX_ARCHS];
    for (int t = 0; t < o->n_targets; t++)
        if (!(want[t] = target_row("build", cat, o->targets[t], o->bundle != NULL))) return 2;
    rk_build_item *items = malloc(sizeof *items * (size_t)(n > 0 ? n : 1));
    rk_build_result *res = malloc(sizeof *res * (size_t)(n > 0 ? n : 1));
    if (!items || !res) {
        fprintf(stderr, "ropekv-gen build: out of memory\n");
        free(items);
        free(res);
        return 1;
    }
    /* One compiler choice per arch row. */
    int picked[RK_MAX_ARCHS] = {0};
    rk_compiler cc_of[RK_MAX_ARCHS];
    int m = 0;
    for (int i = 0; i < n; i++) {
        int keep = o->n_targets == 0;
        for (int t = 0; t < o->n_targets && !keep; t++) keep = v[i].arch == want[t];
        if (!keep) continue;
        int a = (int)(v[i].arch - cat->archs.a);
        if (!picked[a]) {
            cc_of[a] = rk_build_pick(v[i].arch);
            picked[a] = 1;
        }
        items[m].v = v[i];
        items[m].cc = cc_of[a];
        /* The scan costs a second look at the code: done where the arch row promises an instruction and only the
         * compiler decides whether it is used (AMD with bf16_hw; a family row's e2m1 conversion, which
         * rk_build_strict_violation requires). */
        items[m].flags = (v[i].arch->vendor == RK_VENDOR_AMD && v[i].arch->bf16_hw) ||
                                 (v[i].arch->family && rk_desc_writes_e2m1(&v[i]))
                             ? RK_BUILD_SCAN
                             : 0;
        m++;
    }
    if (m == 0) {
        if (o->filter)
            fprintf(stderr, "ropekv-gen build: no variant%s matches --filter '%s'\n",
                    o->n_targets ? " of these targets" : "", o->filter);
        else fprintf(stderr, "ropekv-gen build: no spec lists %s\n", o->n_targets ? "these targets" : "any target");
        free(items);
        free(res);
        return 1;
    }
    if (o->bundle) {
        int rc = cmd_bundle(o, items, m);
        free(items);
        free(res);
        return rc;
    }
    int jobs = o->jobs > 0 ? o->jobs : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (jobs < 1) jobs = 1;
    fprintf(stderr, "build: %d variants, %d jobs\n", m, jobs < m ? jobs : m);
    double t0 = rk_now_ms();
    int failed = rk_build_matrix(items, m, jobs, stderr, res);
    double wall = rk_now_ms() - t0;
    if (failed < 0) {
        fprintf(stderr, "ropekv-gen build: cannot start worker processes: %s\n", strerror(errno));
        free(items);
        free(res);
        return 1;
    }
    rk_build_table_header(stdout);
    for (int i = 0; i < m; i++) rk_build_table_row(stdout, &items[i].v, &res[i]);
    printf("\n");
    rk_build_summary(stdout, items, res, m);
    fflush(stdout);
    int violations = 0;
    for (int i = 0; i < m; i++) {
        if (res[i].rc != ROPEKV_OK) {
            fprintf(stderr, "\nFAILED %s (%s, error %d):\n%s\n", items[i].v.key, rk_compiler_name(res[i].cc), res[i].rc,
                    res[i].log);
            continue;
        }
        char why[256];
        if (o->strict && rk_build_strict_violation(&items[i].v, &res[i], why, sizeof why)) {
            fprintf(stderr, "strict: %s: %s\n", items[i].v.key, why);
            violations++;
        }
    }
    fprintf(stderr, "build: %d compiled, %d failed", m - failed, failed);
    if (o->strict) fprintf(stderr, ", %d strict violations", violations);
    fprintf(stderr, " (%.1f s)\n", wall / 1e3);
    free(items);
    free(res);
    return failed || violations ? 1 : 0;
}

/* The launch ABI check's verdict and each entry's facts (an AMD build). */
static void print_abi(const rk_desc *v, const rk_build_result *r, const rk_codeobj *code) {
    printf("launch ABI: %s%s (rk_args %zu bytes, block %d, wave %d)\n",
           r->abi ? "ok" : "MISMATCH: ", r->abi ? "" : r->abi_why, sizeof(rk_args), v->arch->block, v->arch->wave);
    rk_amd_code *c = malloc(sizeof *c);
    char line[256];
    if (c && rk_amd_read(code->data, code->len, c, NULL, 0) == 0)
        for (int i = 0; i < c->n_kernels; i++) {
            rk_amd_abi_facts(&c->kernels[i], line, sizeof line);
            const char *name = c->kernels[i].name;
            const size_t n = strlen(v->name);
            const int ours = strncmp(name, v->name, n) == 0; /* <name> or <name>_i64: print the suffix */
            printf("  %s%s: %s\n", ours ? "<name>" : "", name + (ours ? n : 0), line);
        }
    free(c);
}

/* "spec/target/rest" -> "spec/rest" (the key without its target). */
static void key_without_target(const char *key, char *out, size_t cap) {
    const char *a = strchr(key, '/');
    const char *b = a ? strchr(a + 1, '/') : NULL;
    if (!b) snprintf(out, cap, "%s", key);
    else snprintf(out, cap, "%.*s%s", (int)(a - key), key, b);
}

/* Match tiers for inspect: 0 the exact key or kernel name, 1 the key without its target, 2 part of
 * the key (with or without its target). */
static int key_matches(const rk_desc *v, const char *key, int tier) {
    if (tier == 0) return !strcmp(v->key, key) || !strcmp(v->name, key);
    char bare[256];
    key_without_target(v->key, bare, sizeof bare);
    if (tier == 1) return !strcmp(bare, key);
    return strstr(v->key, key) != NULL || strstr(bare, key) != NULL;
}

static int cmd_inspect(const opts *o, const rk_catalog *cat, const rk_desc *listed, int n_listed) {
    const rk_desc *cand = listed;
    int n = n_listed;
    rk_desc *re = NULL;
    char key[256];
    snprintf(key, sizeof key, "%s", o->key);
    if (o->n_targets) {
        const rk_arch *a = target_row("inspect", cat, o->targets[0], 0);
        if (!a) return 2;
        re = malloc(sizeof *re * MAX_VARIANTS);
        int k = re ? rk_build_retarget(cat, a, re, MAX_VARIANTS) : -1;
        if (k < 0) {
            fprintf(stderr, "ropekv-gen inspect: out of memory\n");
            free(re);
            return 1;
        }
        n = 0;
        for (int i = 0; i < k; i++)
            if (!o->filter || strstr(re[i].key, o->filter)) re[n++] = re[i];
        cand = re;
        /* A full key naming another target means the same shape on T. */
        const char *s1 = strchr(o->key, '/');
        const char *s2 = s1 ? strchr(s1 + 1, '/') : NULL;
        char t[RK_NAME_MAX];
        if (s2 && (size_t)(s2 - s1 - 1) < sizeof t) {
            snprintf(t, sizeof t, "%.*s", (int)(s2 - s1 - 1), s1 + 1);
            if (rk_arch_find(&cat->archs, t))
                snprintf(key, sizeof key, "%.*s/%s%s", (int)(s1 - o->key), o->key, a->name, s2);
        }
    }
    int pick = -1;
    for (int tier = 0; tier < 3 && pick < 0; tier++) {
        int count = 0;
        for (int i = 0; i < n; i++)
            if (key_matches(&cand[i], key, tier) && count++ == 0) pick = i;
        if (count > 1) {
            fprintf(stderr, "ropekv-gen inspect: '%s' matches %d variants:\n", key, count);
            int shown = 0;
            for (int i = 0; i < n && shown < 20; i++)
                if (key_matches(&cand[i], key, tier)) {
                    fprintf(stderr, "  %s\n", cand[i].key);
                    shown++;
                }
            if (count > shown) fprintf(stderr, "  ...\n");
            free(re);
            return 2;
        }
    }
    if (pick < 0) {
        fprintf(stderr, "ropekv-gen inspect: no variant matches '%s' (see `ropekv-gen list`%s)\n", key,
                o->n_targets ? "" : "; --target T builds a spec for a target it does not list");
        free(re);
        return 2;
    }
    rk_desc v = cand[pick];
    rk_compiler cc = rk_build_pick(v.arch);
    rk_build_result *r = malloc(sizeof *r);
    if (!r) {
        free(re);
        return 1;
    }
    rk_buf log = {0}, dis = {0}, sass = {0};
    rk_codeobj code = {0};
    rk_build_outputs out = {.code = &code,
                            .disasm = &dis,
                            .log = &log,
                            .sass = v.arch->vendor == RK_VENDOR_NVIDIA ? &sass : NULL};
    int rc = rk_build_one(&v, cc, RK_BUILD_SCAN, r, &out);
    printf("%s\nkernel %s\n\n", v.key, v.name);
    rk_build_table_header(stdout);
    rk_build_table_row(stdout, &v, r);
    if (r->info.lds >= 0) printf("lds: %d bytes\n", r->info.lds);
    if (r->abi >= 0) print_abi(&v, r, &code);
    if (r->isa.narrow >= 0)
        printf("isa: 16-byte global accesses %d, narrower %d (%d of them pieces of a split 16-byte chunk), "
               "load waits %d (%d between two loads, %d of them free: neither a dependence nor another exec region), "
               "occupancy %d waves per SIMD\n",
               r->isa.wide, r->isa.narrow, r->isa.split, r->isa.waits, r->isa.load_waits, r->isa.free_waits,
               r->isa.occupancy);
    printf("\n==== compiler log (%s) ====\n%s", rk_compiler_name(cc), log.len ? log.p : "(empty)\n");
    if (log.len && log.p[log.len - 1] != '\n') putchar('\n');
    if (rc == ROPEKV_OK) {
        const char *what = v.arch->vendor == RK_VENDOR_AMD      ? "disassembly (llvm-objdump -d)"
                           : v.arch->vendor == RK_VENDOR_NVIDIA ? "PTX"
                                                                : "disassembly (objdump -d)";
        printf("\n==== %s ====\n%s", what, dis.len ? dis.p : "(none)\n");
        if (v.arch->vendor == RK_VENDOR_NVIDIA) printf("\n==== SASS ====\n%s", sass.len ? sass.p : "(none)\n");
    }
    rk_buf_free(&log);
    rk_buf_free(&dis);
    rk_buf_free(&sass);
    rk_code_free(&code);
    free(r);
    free(re);
    return rc == ROPEKV_OK ? 0 : 1;
}

/* ---- isa-baseline ----------------------------------------------------------------------------- */
static int by_kernel(const void *a, const void *b) {
    return strcmp(((const rk_isa_limit *)a)->kernel, ((const rk_isa_limit *)b)->kernel);
}

static int cmd_isa_baseline(const opts *o, const rk_catalog *cat) {
    rk_isa_limit *lines = NULL;
    const int cap = RK_MAX_ARCHS * 256; /* the covering set's variants of the AMD rows */
    rk_build_item *items = malloc(sizeof *items * (size_t)cap);
    rk_desc *shapes = malloc(sizeof *shapes * MAX_VARIANTS);
    rk_build_result *res = malloc(sizeof *res * (size_t)cap);
    int n = 0, rc = 1;
    if (!items || !shapes || !res) {
        fprintf(stderr, "ropekv-gen isa-baseline: out of memory\n");
        goto out;
    }
    rk_err err = {0};
    const int k = rk_cover_catalog(cat, NULL, 0, shapes, MAX_VARIANTS, &err); /* test_matrix's set */
    if (k < 0) {
        fprintf(stderr, "ropekv-gen isa-baseline: %s\n", err.msg);
        goto out;
    }
    for (int a = 0; a < cat->archs.n; a++) {
        const rk_arch *arch = &cat->archs.a[a];
        if (arch->vendor != RK_VENDOR_AMD) continue;
        const rk_compiler cc = rk_build_pick(arch);
        for (int i = 0; i < k; i++) {
            if (shapes[i].arch != arch) continue;
            if (o->filter && !strstr(shapes[i].key, o->filter)) continue;
            int dup = 0; /* identical kernels (same name) are built once, as in test_matrix */
            for (int j = 0; j < n && !dup; j++) dup = !strcmp(items[j].v.name, shapes[i].name);
            if (dup) continue;
            if (n == cap) {
                fprintf(stderr, "ropekv-gen isa-baseline: more than %d kernels\n", cap);
                goto out;
            }
            items[n++] = (rk_build_item){shapes[i], cc, RK_BUILD_SCAN};
        }
    }
    if (o->filter) fprintf(stderr, "isa-baseline: --filter '%s': a baseline of part of the matrix\n", o->filter);
    int jobs = o->jobs > 0 ? o->jobs : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (jobs < 1) jobs = 1;
    fprintf(stderr, "isa-baseline: %d kernels, %d jobs\n", n, jobs < n ? jobs : n);
    if (n == 0 || rk_build_matrix(items, n, jobs, stderr, res) < 0) {
        fprintf(stderr, "ropekv-gen isa-baseline: %s\n", n ? strerror(errno) : "no kernel to build");
        goto out;
    }
    lines = malloc(sizeof *lines * (size_t)n);
    if (!lines) {
        fprintf(stderr, "ropekv-gen isa-baseline: out of memory\n");
        goto out;
    }
    int bad = 0;
    for (int i = 0; i < n; i++) {
        if (res[i].rc == ROPEKV_OK && res[i].isa.narrow >= 0 && res[i].isa.split >= 0 && res[i].isa.occupancy >= 0 &&
            res[i].info.regs >= 0 && res[i].info.sgprs >= 0)
            continue;
        fprintf(stderr, "%s: %s\n%s\n", items[i].v.key, res[i].rc ? "compile failed" : "not scanned", res[i].log);
        bad++;
    }
    if (bad) {
        fprintf(stderr, "ropekv-gen isa-baseline: %d kernels failed or were not scanned; no baseline\n", bad);
        goto out;
    }
    printf("# The AMD ISA review's baseline (test_matrix, docs/amd.md \"Per-target ISA review\"): one line per\n"
           "# kernel of the covering set on each AMD target, with the figures that kernel may not exceed (nor, for\n"
           "# occupancy, fall below):\n");
    rk_isa_limit_header(stdout);
    printf("# Generated, never edited by hand:\n"
           "#   build/ropekv-gen isa-baseline > tests/golden/isa_amd.txt\n");
    for (int i = 0, shown = 0; i < n; i++) { /* one line per compiler, in the order of the table */
        int first = 1;
        for (int j = 0; j < i && first; j++) first = items[j].v.arch != items[i].v.arch;
        if (!first) continue;
        printf("%s%s: %s\n", shown++ ? "#   " : "# compilers: ", items[i].v.arch->name, res[i].info.compiler);
    }
    /* items are in the order of the arch table; within a target, by kernel name */
    for (int i = 0; i < n; i++) rk_isa_limit_of(&lines[i], items[i].v.arch->name, items[i].v.name, &res[i]);
    for (int i = 0, j; i < n; i = j) {
        for (j = i; j < n && items[j].v.arch == items[i].v.arch;) j++;
        qsort(lines + i, (size_t)(j - i), sizeof *lines, by_kernel);
    }
    for (int i = 0; i < n; i++) rk_isa_limit_print(stdout, &lines[i]);
    rc = 0;
out:
    free(items);
    free(shapes);
    free(res);
    free(lines);
    return rc;
}

/* replay FILE [--backend B]...: arguments after the command. A replay never dumps itself. */
static int replay_main(int argc, char **argv) {
    const char *file = NULL, *backends[8];
    int n = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(HELP_REPLAY, stdout);
            return 0;
        } else if (!strcmp(argv[i], "--backend") && i + 1 < argc && n < 8) {
            const char *b = argv[++i];
            if (strcmp(b, "host") && strcmp(b, "cuda") && strcmp(b, "hip")) {
                fprintf(stderr, "ropekv-gen replay: --backend %s: expected host, cuda or hip\n\n%s", b, HELP_REPLAY);
                return 2;
            }
            backends[n++] = b;
        } else if (!file && argv[i][0] != '-') {
            file = argv[i];
        } else {
            fprintf(stderr, "ropekv-gen replay: unknown argument '%s'\n\n%s", argv[i], HELP_REPLAY);
            return 2;
        }
    }
    if (!file) {
        fprintf(stderr, "ropekv-gen replay: FILE is required\n\n%s", HELP_REPLAY);
        return 2;
    }
    unsetenv("ROPEKV_DUMP");
    return rk_replay(file, backends, n, stdout);
}

int main(int argc, char **argv) {
    opts o = {.jobs = 0};
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(USAGE, stdout);
            return 0;
        } else if (!strcmp(argv[i], "--version")) {
            printf("ropekv-gen %s\n", ROPEKV_VERSION_STRING);
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
    if (!strcmp(cmd, "replay")) return replay_main(argc - i, argv + i);
    const char *help = !strcmp(cmd, "list")           ? HELP_LIST
                       : !strcmp(cmd, "emit")         ? HELP_EMIT
                       : !strcmp(cmd, "selftest")     ? HELP_SELFTEST
                       : !strcmp(cmd, "build")        ? HELP_BUILD
                       : !strcmp(cmd, "inspect")      ? HELP_INSPECT
                       : !strcmp(cmd, "isa-baseline") ? HELP_ISA_BASELINE
                                                      : NULL;
    if (!help) {
        fprintf(stderr, "ropekv-gen: unknown command '%s'\n\n%s", cmd, USAGE);
        return 2;
    }
    for (; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(help, stdout);
            return 0;
        } else if ((!strcmp(cmd, "list") || !strcmp(cmd, "selftest")) && !strcmp(argv[i], "--all")) {
            o.all = 1;
        } else if (!strcmp(cmd, "emit") && !strcmp(argv[i], "--out") && i + 1 < argc) {
            o.out = argv[++i];
        } else if ((!strcmp(cmd, "selftest") || !strcmp(cmd, "build") || !strcmp(cmd, "isa-baseline")) &&
                   !strcmp(argv[i], "--jobs") && i + 1 < argc) {
            o.jobs = atoi(argv[++i]);
        } else if (!strcmp(cmd, "build") && !strcmp(argv[i], "--bundle") && i + 1 < argc) {
            o.bundle = argv[++i];
        } else if (!strcmp(cmd, "build") && !strcmp(argv[i], "--strict")) {
            o.strict = 1;
        } else if ((!strcmp(cmd, "build") || (!strcmp(cmd, "inspect") && o.n_targets == 0)) &&
                   !strcmp(argv[i], "--target") && i + 1 < argc) {
            if (o.n_targets == RK_MAX_ARCHS) {
                fprintf(stderr, "ropekv-gen %s: at most %d --target options\n", cmd, RK_MAX_ARCHS);
                return 2;
            }
            o.targets[o.n_targets++] = argv[++i];
        } else if (!strcmp(cmd, "inspect") && !o.key && argv[i][0] != '-') {
            o.key = argv[i];
        } else {

            fprintf(stderr, "ropekv-gen %s: unknown argument '%s'\n\n%s", cmd, argv[i], help);
            return 2;
        }
    }
    if (!strcmp(cmd, "inspect") && !o.key) {
        fprintf(stderr, "ropekv-gen inspect: KEY is required\n\n%s", help);
        return 2;
    }
    rk_catalog *cat = malloc(sizeof *cat);

    rk_desc *v = malloc(sizeof *v * MAX_VARIANTS);
    int rc = 1;
    if (!cat || !v) {
        fprintf(stderr, "ropekv-gen: out of memory\n");
    } else if (load_catalog(&o, cat) == 0) {
        /* list and selftest take the covering set unless --all; the others every variant (each rendered source
         * once), build --bundle every variant of every spec */
        const int sampled = (!strcmp(cmd, "list") || !strcmp(cmd, "selftest")) && !o.all;
        int product = 0, n = o.bundle && !strcmp(cmd, "build")
                                 ? bundle_variants(&o, cat, v, MAX_VARIANTS)
                                 : all_variants(&o, cat, !sampled, v, MAX_VARIANTS, &product);
        o.product = product;
        if (n >= 0 && !strcmp(cmd, "list"))
            fprintf(stderr, "list: %d variants (%s of %d)\n", n, sampled ? "the covering set" : "all", product);
        if (n >= 0)
            rc = !strcmp(cmd, "list")           ? cmd_list(v, n)
                 : !strcmp(cmd, "emit")         ? cmd_emit(&o, v, n)
                 : !strcmp(cmd, "build")        ? cmd_build(&o, cat, v, n)
                 : !strcmp(cmd, "inspect")      ? cmd_inspect(&o, cat, v, n)
                 : !strcmp(cmd, "isa-baseline") ? cmd_isa_baseline(&o, cat)
                                                : cmd_selftest(&o, v, n);
    }
    free(v);
    free(cat);
    return rc;
}
