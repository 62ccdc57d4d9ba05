/* JIT costs: cold compile per compiler, a disk-cache hit, an in-process hit.
 * Goals (docs/results.md): cold compile <= 0.5 s, disk hit <= 2 ms, in-process hit <= 100 ns.
 *   bench_jit [--reps N]
 * Compilers that are not on the machine are reported as "n/a". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inspect.h"
#include "rk.h"
#include "ropekv.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

/* The deepseek_v3 fp8 absorbed source for one arch row. */
static int source_for(const rk_catalog *cat, const char *target, rk_buf *src) {
    static rk_desc v[RK_MAX_VARIANTS_PER_SPEC];
    rk_err err = {0};
    const rk_spec *s = rk_catalog_find(cat, "deepseek_v3");
    char key[192];
    snprintf(key, sizeof key, "deepseek_v3/%s/fp8_e4m3/absorbed/pos=int64/slot=int64", target);
    int n = s ? rk_variants(s, &cat->archs, v, RK_MAX_VARIANTS_PER_SPEC, &err) : 0;
    for (int i = 0; i < n; i++)
        if (!strcmp(v[i].key, key)) return rk_emit(&v[i], src, &err);
    return -1;
}

/* entries: as the runtime compiles (templates/kernel.hip RK_ENTRIES): 1, the 32-bit entry that
 * ropekv_kernel_get builds; 2, the 64-bit entry the first launch that needs it builds. */
static void cold(const rk_catalog *cat, const char *label, const char *row, const char *target, rk_compiler cc,
                 int reps, int entries) {
    rk_buf src = {0};
    double t[16];
    int ok = rk_buf_printf(&src, "#define RK_ENTRIES %d\n", entries) == ROPEKV_OK &&
             source_for(cat, row, &src) == ROPEKV_OK;
    for (int i = 0; ok && i < reps; i++) {
        rk_codeobj co = {0};
        rk_buf log = {0};
        double t0 = rk_now_ms();
        ok = rk_compile_inspect(cc, src.p, src.len, target, NULL, &co, NULL, NULL, &log) == ROPEKV_OK;
        t[i] = rk_now_ms() - t0;
        rk_code_free(&co);
        rk_buf_free(&log);
    }
    const char *what = entries == 1 ? "kernel_get" : "1st wide launch";
    if (ok) printf("| cold compile, %-16s %-15s | %8.1f ms | <= 500 ms |\n", label, what, median(t, reps));
    else printf("| cold compile, %-16s %-15s | %11s | <= 500 ms |\n", label, what, "n/a");
    rk_buf_free(&src);
}

int main(int argc, char **argv) {
    int reps = argc > 2 && !strcmp(argv[1], "--reps") ? atoi(argv[2]) : 5;
    if (reps < 1 || reps > 16) reps = 5;
    static rk_catalog cat;
    rk_err err = {0};
    if (rk_catalog_load_embedded(&cat, &err) != ROPEKV_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    printf("| what | median of %d | goal |\n|---|---|---|\n", reps);
    for (int entries = 1; entries <= 2; entries++) {
        cold(&cat, "nvrtc sm_90", "sm_90", "sm_90", RK_CC_NVRTC, reps, entries);
        cold(&cat, "clang-22 gfx942", "gfx942", "gfx942", RK_CC_CLANG, reps, entries);
        cold(&cat, "hiprtc gfx90a", "gfx90a", "gfx90a", RK_CC_HIPRTC, reps, entries);
    }

    /* Through the public API, for the host backend and (where present) the cuda and hip backends:
     * cold (empty cache), disk hit (a new context), memory hit (the same context). */
    char dir[4096];
    if (rk_mktmpdir(dir, sizeof dir, "ropekv-bench") != ROPEKV_OK) return 1;
    static const struct {
        ropekv_backend b;
        const char *name;
    } backends[] = {{ROPEKV_BACKEND_HOST, "host"}, {ROPEKV_BACKEND_CUDA, "cuda"}, {ROPEKV_BACKEND_HIP, "hip"}};
    for (size_t b = 0; b < sizeof backends / sizeof backends[0]; b++) {
        ropekv_options o = {.backend = backends[b].b, .cache_dir = dir, .disk_cache = 1};
        ropekv_variant v = {.spec = "deepseek_v3", .kv = ROPEKV_KV_FP8_E4M3};
        double cold_t[16], disk_t[16], per = 0;
        ropekv_kernel *k;
        ropekv_ctx *c;
        if (ropekv_create(&c, &o) != ROPEKV_OK) {
            printf("| %-4s backend                         | %11s | not on this machine |\n", backends[b].name, "n/a");
            continue;
        }
        char target[96];
        snprintf(target, sizeof target, "%s", ropekv_target(c));
        ropekv_destroy(c);
        int ok = 1;
        for (int i = 0; ok && i < reps; i++) {
            ok = ropekv_create(&c, &o) == ROPEKV_OK;
            ropekv_cache_clear(c);
            double t0 = rk_now_ms();
            ok = ok && ropekv_kernel_get(c, &v, &k) == ROPEKV_OK;
            cold_t[i] = rk_now_ms() - t0;
            if (!ok) fprintf(stderr, "%s\n", ropekv_last_error(c));
            ropekv_destroy(c);
            ok = ok && ropekv_create(&c, &o) == ROPEKV_OK;
            t0 = rk_now_ms();
            ok = ok && ropekv_kernel_get(c, &v, &k) == ROPEKV_OK;
            disk_t[i] = rk_now_ms() - t0;
            ropekv_stats st;
            ropekv_get_stats(c, &st);
            ok = ok && st.disk_hits == 1 && st.compiles == 0;
            if (ok && i + 1 == reps) {
                enum { N = 1000000 };
                double t1 = rk_now_ms();
                for (int j = 0; j < N; j++) {
                    ropekv_kernel_get(c, &v, &k);
                    ropekv_kernel_release(k);
                }
                per = (rk_now_ms() - t1) / N;
                ropekv_cache_clear(c);
            }
            ropekv_destroy(c);
        }
        if (!ok) {
            printf("| %-4s backend                         | %11s | failed |\n", backends[b].name, "error");
            continue;
        }
        printf("| %-4s %-8s cold get (compile+load)  | %8.1f ms | <= 500 ms |\n", backends[b].name, target,
               median(cold_t, reps));
        printf("| %-4s %-8s disk-cache hit (get)     | %8.3f ms | <= 2 ms |\n", backends[b].name, target,
               median(disk_t, reps));
        printf("| %-4s %-8s in-process hit          | %8.1f ns | <= 100 ns |\n", backends[b].name, target, per * 1e6);
    }
    rk_rmtmpdir(dir);
    return 0;
}
