/* The compiler drivers: nvrtc, hiprtc (and its allow-list guard), clang, and the tools' figures of
 * their compiles (code-object inspection, ptxas report).
 * A compiler that is not installed skips its tests with a message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clang.h"
#include "compilers.h"
#include "inspect.h"

/* One header-free kernel text for nvrtc, hiprtc and clang -nogpuinc: f32 pairs -> fp8 e4m3 pairs,
 * with the hardware conversion where the target has one (AMD: the builtin where __has_builtin says
 * so; NVIDIA: cvt.rn.satfinite.e4m3x2.f32 from sm_89) and a software stand-in elsewhere. Two
 * entry points, as every emitted source has: <name> and <name>_i64. */
static const char k_src[] =
    "#ifndef __has_builtin\n"
    "#define __has_builtin(x) 0\n"
    "#endif\n"
    "#if defined(__HIPCC_RTC__) || (defined(__HIP__) && defined(__HIP_DEVICE_COMPILE__))\n"
    "#define K_AMD 1\n"
    "#define K_ENTRY extern \"C\" __attribute__((global))\n"
    "#define K_ID() (__builtin_amdgcn_workgroup_id_x() * 256u + __builtin_amdgcn_workitem_id_x())\n"
    "#else\n"
    "#define K_ENTRY extern \"C\" __global__\n"
    "#define K_ID() (blockIdx.x * 256u + threadIdx.x)\n"
    "#endif\n"
    "template <typename I> __attribute__((device)) inline void body(const float *in, unsigned short *out, I n) {\n"
    "    I i = (I)K_ID();\n"
    "    if (i >= n) return;\n"
    "    float lo = in[2 * i], hi = in[2 * i + 1];\n"
    "    unsigned int r;\n"
    "#if defined(K_AMD) && __has_builtin(__builtin_amdgcn_cvt_pk_fp8_f32)\n"
    "    r = (unsigned int)__builtin_amdgcn_cvt_pk_fp8_f32(lo, hi, 0, false) & 0xffffu;\n"
    "#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890\n"
    "    unsigned short h;\n"
    "    asm(\"cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\" : \"=h\"(h) : \"f\"(hi), \"f\"(lo));\n"
    "    r = h;\n"
    "#else\n"
    "    r = (__builtin_bit_cast(unsigned int, lo) >> 24) | ((__builtin_bit_cast(unsigned int, hi) >> 24) << 8);\n"
    "#endif\n"
    "    out[i] = (unsigned short)r;\n"
    "}\n"
    "K_ENTRY void to_fp8(const float *in, unsigned short *out, unsigned int n) { body(in, out, n); }\n"
    "K_ENTRY void to_fp8_i64(const float *in, unsigned short *out, long long n) { body(in, out, n); }\n";

static const char k_bad[] = "extern \"C\" __global__ void broken(int *p) { p[0] = ; }\n";

static int is_elf(const rk_codeobj *c) {
    return c->data && c->len > 64 &&
           memcmp(c->data,
                  "\x7f"
                  "ELF",
                  4) == 0;
}

static int has(const rk_buf *b, const char *s) { return b->len && strstr(b->p, s) != NULL; }

/* ---- availability: each compiler's absence skips its tests ------------------------------------ */
static int nvrtc_here(void) {
    char why[512];
    int maj, min;
    if (rk_nvrtc_available(&maj, &min, why, sizeof why) == 0) return 1;
    print_message("nvrtc not available, skipping: %s\n", why);
    return 0;
}

static int hiprtc_here(int *major, int *minor) {
    char why[768];
    if (rk_hiprtc_available(major, minor, why, sizeof why) == 0) return 1;
    print_message("hiprtc not available, skipping: %s\n", why);
    return 0;
}

static int clang_here(void) {
    char v[512];
    if (rk_clang_available(v, sizeof v) == 0) return 1;
    print_message("clang (%s) not available, skipping: %s\n", rk_clang_path(), v);
    return 0;
}

/* The llvm tools that rk_amd_inspect runs. */
static int llvm_tools_here(void) {
    const char *sfx = getenv("ROPEKV_LLVM_SUFFIX");
    char tool[64];
    snprintf(tool, sizeof tool, "llvm-objdump%s", sfx ? sfx : "-22");
    const char *argv[] = {tool, "--version", NULL};
    int st = -1;
    rk_buf out = {0};
    int ok = rk_run(argv, 0, 0, &out, &st) == ROPEKV_OK && st == 0;
    rk_buf_free(&out);
    if (!ok) print_message("%s not available, skipping inspection\n", tool);
    return ok;
}

/* ---- helpers ------------------------------------------------------------------------------------ */
static void test_helpers(void **state) {
    (void)state;
    rk_buf out = {0};
    int st = -1;
    const char *no[] = {"ropekv-no-such-program-here", NULL};
    assert_int_equal(rk_run(no, 0, 0, &out, &st), ROPEKV_ERR_IO);
    assert_true(has(&out, "cannot run"));
    rk_buf_free(&out);

    const char *sh[] = {"/bin/sh", "-c", "echo to-stdout; echo to-stderr >&2; exit 3", NULL};
    assert_int_equal(rk_run(sh, 0, 0, &out, &st), ROPEKV_OK);
    assert_int_equal(st, 3);
    assert_true(has(&out, "to-stdout") && has(&out, "to-stderr"));
    rk_buf_free(&out);
    assert_int_equal(rk_run(sh, 5, RK_RUN_NO_STDERR, &out, &st), ROPEKV_OK);
    assert_int_equal(st, 3);
    assert_true(has(&out, "to-stdout") && !has(&out, "to-stderr"));
    rk_buf_free(&out);
    /* past the limit the program and what it started are killed */
    const char *hang[] = {"/bin/sh", "-c", "echo started; sleep 30 & wait", NULL};
    double t0 = rk_now_ms();
    assert_int_equal(rk_run(hang, 1, 0, &out, &st), ROPEKV_OK);
    assert_int_equal(st, RK_RUN_TIMED_OUT);
    assert_true(rk_now_ms() - t0 < 10e3);
    assert_true(has(&out, "started"));
    rk_buf_free(&out);
    /* a program that exits leaving a child holding its output: the run ends at the exit, with or without a
     * limit (not when the child closes the pipe), and is not reported as timed out */
    const char *leaves[] = {"/bin/sh", "-c", "echo done; sleep 30 & exit 0", NULL};
    for (int limit = 0; limit <= 20; limit += 20) {
        t0 = rk_now_ms();
        assert_int_equal(rk_run(leaves, limit, 0, &out, &st), ROPEKV_OK);
        assert_int_equal(st, 0);
        assert_true(rk_now_ms() - t0 < 10e3);
        assert_true(has(&out, "done"));
        rk_buf_free(&out);
    }

    const char *argv[8] = {"cc"};
    char *store = NULL;
    int n = 0;
    assert_int_equal(rk_split_options("  -DA=1   -DB ", argv, 1, 8, &store, &n), ROPEKV_OK);
    assert_int_equal(n, 3);
    assert_string_equal(argv[1], "-DA=1");
    assert_string_equal(argv[2], "-DB");
    assert_null(argv[3]);
    free(store);
    assert_int_equal(rk_split_options("a b c d e f g h", argv, 1, 8, &store, &n), ROPEKV_ERR_COMPILE);
    free(store);
    assert_int_equal(rk_split_options(NULL, argv, 1, 8, &store, &n), ROPEKV_OK);
    assert_int_equal(n, 1);
    assert_null(store);

    char dir[4096];
    assert_int_equal(rk_mktmpdir(dir, sizeof dir, NULL), ROPEKV_OK);
    char f[4200];
    snprintf(f, sizeof f, "%s/x", dir);
    assert_int_equal(rk_write_file(f, "abc", 3), ROPEKV_OK);

    /* in a directory: reached through it after it is renamed, with TMPDIR=.; a relative program is
     * still found from the caller's directory */
    int dfd = rk_tmp_opendir(dir);
    assert_true(dfd >= 0);
    char moved[4200], cwd[4096], rel[4400];
    snprintf(moved, sizeof moved, "%s.moved", dir);
    assert_int_equal(rename(dir, moved), 0);
    const char *in[] = {"/bin/sh", "-c", "cat x; echo \" $TMPDIR\"; echo made > y", NULL};
    assert_int_equal(rk_run_in(in, dfd, 5, 0, &out, &st), ROPEKV_OK);
    assert_int_equal(st, 0);
    assert_true(has(&out, "abc ."));
    rk_buf_free(&out);
    rk_codeobj y;
    assert_int_equal(rk_read_file_at(dfd, "y", &y), ROPEKV_OK);
    assert_string_equal((const char *)y.data, "made\n");
    rk_code_free(&y);
    snprintf(rel, sizeof rel, "%s/link", moved);
    assert_int_equal(symlink(f, rel), 0);
    assert_int_equal(rk_write_file_at(dfd, "link", "x", 1), ROPEKV_ERR_IO); /* never through a link */
    assert_int_equal(rk_read_file_at(dfd, "link", &y), ROPEKV_ERR_IO);
    char caller[4096];
    assert_int_equal(rk_mktmpdir(caller, sizeof caller, NULL), ROPEKV_OK);
    snprintf(rel, sizeof rel, "%s/sh", caller);
    assert_int_equal(symlink("/bin/sh", rel), 0);
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(caller), 0);
    const char *relative[] = {"./sh", "-c", "echo relative", NULL};
    assert_int_equal(rk_run_in(relative, dfd, 5, 0, &out, &st), ROPEKV_OK);
    assert_int_equal(chdir(cwd), 0);
    assert_int_equal(st, 0);
    assert_true(has(&out, "relative"));
    rk_buf_free(&out);
    rk_rmtmpdir(caller);
    close(dfd);
    /* a directory another user could enter is not private */
    assert_int_equal(chmod(moved, 0750), 0);
    assert_int_equal(rk_tmp_opendir(moved), -1);
    assert_int_equal(errno, EACCES);
    rk_rmtmpdir(moved);

    assert_int_equal(rk_mktmpdir(dir, sizeof dir, NULL), ROPEKV_OK);
    snprintf(f, sizeof f, "%s/x", dir);
    assert_int_equal(rk_write_file(f, "abc", 3), ROPEKV_OK);
    rk_rmtmpdir(dir);
    FILE *gone = fopen(f, "rb");
    assert_null(gone);
}

/* ---- hiprtc allow-list (pure) --------------------------------------------------------------- */
static void test_hiprtc_supports(void **state) {
    (void)state;
    static const struct {
        int major, minor;
        const char *target;
        int ok;
    } cases[] = {
        {5, 2, "gfx90a", 1},
        {5, 2, "gfx90a:xnack-", 1},
        {5, 2, "gfx90a:sramecc+:xnack-", 1},
        {5, 2, "gfx90a:xnack-:sramecc+", 1},
        {5, 2, "gfx908:sramecc-", 1},
        {5, 2, "gfx906:xnack+", 1},
        {5, 2, "gfx900:xnack-", 1},
        {5, 2, "gfx900:sramecc+", 0}, /* gfx900 has no sramecc */
        {5, 2, "gfx803", 1},
        {5, 2, "gfx803:xnack-", 0}, /* gfx803 has no xnack */
        {5, 2, "gfx801:xnack+", 1},
        {5, 2, "gfx600", 1},
        {5, 2, "gfx1010:xnack-", 1},
        {5, 2, "gfx1030", 1},
        {5, 2, "gfx1036", 1},
        {5, 2, "gfx1030:xnack-", 0}, /* aborts ROCm 5.2's comgr */
        {5, 2, "gfx940", 0},
        {5, 2, "gfx942", 0},
        {5, 2, "gfx942:sramecc+:xnack-", 0},
        {5, 2, "gfx950", 0},
        {5, 2, "gfx1100", 0},
        {5, 2, "gfx1151", 0},
        {5, 2, "gfx1201", 0},
        {5, 2, "gfx1250", 0},
        {6, 0, "gfx942", 1},
        {6, 2, "gfx942:sramecc+:xnack-", 1},
        {6, 2, "gfx942:xnack+", 1},
        {6, 1, "gfx950", 0},
        {6, 2, "gfx950", 1},
        {6, 2, "gfx1100", 1},
        {6, 2, "gfx1103", 1},
        {6, 2, "gfx1150", 1},
        {6, 2, "gfx1201", 1},
        {6, 2, "gfx1201:xnack-", 0},
        {6, 2, "gfx1250", 0},
        {6, 4, "gfx940", 1},
        {6, 2, "gfx90a:xnack+", 1},
        {7, 0, "gfx1250", 1},
        {7, 0, "gfx942", 1},
        {7, 0, "gfx950:sramecc-", 1},
        {7, 0, "gfx940", 0},
        {7, 0, "gfx90a", 1},
        /* garbage */
        {9, 9, "", 0},
        {9, 9, "gfx", 0},
        {9, 9, "gfx9999", 0},
        {9, 9, "sm_90", 0},
        {9, 9, "GFX90A", 0},
        {9, 9, "gfx90a:", 0},
        {9, 9, "gfx90a::xnack-", 0},
        {9, 9, "gfx90a:xnack", 0},
        {9, 9, "gfx90a:xnack*", 0},
        {9, 9, "gfx90a:xnack-:xnack+", 0},
        {9, 9, "gfx90a:sramecc+:sramecc+", 0},
        {9, 9, "gfx90a:foo+", 0},
        {9, 9, "gfx90a xnack-", 0},
        {9, 9, "gfx90a;rm -rf", 0},
        {9, 9, "gfx90ax", 0},
        {9, 9, " gfx90a", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char why[512] = "unset";
        int ok = rk_hiprtc_supports(cases[i].major, cases[i].minor, cases[i].target, why, sizeof why);
        if (ok != cases[i].ok)
            fail_msg("rk_hiprtc_supports(%d, %d, \"%s\") = %d, expected %d (%s)", cases[i].major, cases[i].minor,
                     cases[i].target, ok, cases[i].ok, why);
        if (!ok) {
            /* The reason names the version and the target. */
            char ver[32];
            snprintf(ver, sizeof ver, "hiprtc %d.%d", cases[i].major, cases[i].minor);
            assert_non_null(strstr(why, ver));
            if (cases[i].target[0]) assert_non_null(strstr(why, cases[i].target));
        } else {
            assert_string_equal(why, "");
        }
    }
    assert_int_equal(rk_hiprtc_supports(5, 2, NULL, NULL, 0), 0);
    char small[8];
    assert_int_equal(rk_hiprtc_supports(5, 2, "gfx942", small, sizeof small), 0);
    assert_int_equal(strlen(small), sizeof small - 1);
}

/* ---- hiprtc ----------------------------------------------------------------------------------- */
/* The guard: targets this hiprtc would abort on are refused before it is called, and the process
 * lives on to say so. */
static void test_hiprtc_guard(void **state) {
    (void)state;
    int maj, min;
    if (!hiprtc_here(&maj, &min)) {
        rk_codeobj co;
        rk_buf log = {0};
        assert_int_equal(rk_hiprtc_compile(k_src, strlen(k_src), "gfx90a", NULL, &co, &log), ROPEKV_ERR_IO);
        rk_buf_free(&log);
        skip();
    }
    const char *refused[] = {"gfx942", "gfx950", "gfx1100", "gfx1201", "gfx1250", "gfx1030:xnack-", "gfx9999"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        if (maj >= 6 && rk_hiprtc_supports(maj, min, refused[i], NULL, 0)) continue;
        rk_codeobj co = {(unsigned char *)"x", 1};
        rk_compile_info info;
        rk_buf log = {0};
        int rc = rk_compile_inspect(RK_CC_HIPRTC, k_src, strlen(k_src), refused[i], NULL, &co, &info, NULL, &log);
        if (rc != ROPEKV_ERR_TARGET)
            fail_msg("%s: rc %d, expected ROPEKV_ERR_TARGET; log: %s", refused[i], rc, log.p ? log.p : "");
        assert_null(co.data);
        assert_int_equal(co.len, 0);
        assert_true(has(&log, "cannot build"));
        assert_true(has(&log, refused[i]));
        assert_int_equal(strncmp(info.compiler, "hiprtc ", 7), 0);
        rk_buf_free(&log);
    }
    /* An extra option may not pick the architecture behind the guard's back. */
    rk_codeobj co;
    rk_buf log = {0};
    assert_int_equal(rk_hiprtc_compile(k_src, strlen(k_src), "gfx90a", "-DX=1 --offload-arch=gfx942", &co, &log),
                     ROPEKV_ERR_TARGET);
    assert_true(has(&log, "--offload-arch=gfx942"));
    rk_buf_free(&log);
    assert_int_equal(rk_hiprtc_compile(k_src, strlen(k_src), "gfx90a", "--gpu-architecture=gfx1100", &co, &log),
                     ROPEKV_ERR_TARGET);
    rk_buf_free(&log);
}

static void test_hiprtc_compile(void **state) {
    (void)state;
    int maj, min;
    if (!hiprtc_here(&maj, &min)) skip();
    print_message("hiprtc %d.%d\n", maj, min);
    assert_true(maj >= 5); /* from the library file name (hiprtcVersion answers 9.0) */
    const char *targets[] = {"gfx90a", "gfx90a:xnack-", "gfx1030"};
    int inspect = llvm_tools_here();
    for (size_t i = 0; i < sizeof targets / sizeof targets[0]; i++) {
        rk_codeobj co;
        rk_compile_info info;
        rk_buf log = {0};
        int rc = rk_compile_inspect(RK_CC_HIPRTC, k_src, strlen(k_src), targets[i], NULL, &co, &info, NULL, &log);
        if (rc != ROPEKV_OK) fail_msg("hiprtc %s: rc %d; log: %s", targets[i], rc, log.p ? log.p : "");
        assert_true(is_elf(&co));
        char id[64];
        snprintf(id, sizeof id, "hiprtc %d.%d", maj, min);
        assert_string_equal(info.compiler, id);
        assert_true(info.ms > 0);
        print_message("hiprtc %-14s %7.1f ms  %zu bytes\n", targets[i], info.ms, co.len);
        if (inspect) {
            /* Whole object from the compile; one kernel from inspect. */
            assert_true(info.regs > 0);
            assert_int_equal(info.scratch, 0);
            assert_int_equal(info.fp8_cvt, 0); /* no fp8 instruction before gfx942 */
            rk_compile_info k;
            rk_info_reset(&k);
            assert_int_equal(rk_amd_inspect(&co, "to_fp8", &k, NULL), ROPEKV_OK);
            assert_true(k.regs > 0 && k.sgprs > 0);
            assert_int_equal(k.scratch, 0);
            assert_int_equal(k.spills, 0);
            assert_int_equal(k.lds, 0);
            assert_true(k.code_size > 0 && k.code_size <= info.code_size);
            assert_int_equal(k.fp8_cvt, 0);
        }
        rk_code_free(&co);
        rk_buf_free(&log);
    }
    /* A syntax error is a compile error with the compiler's message. */
    rk_codeobj co;
    rk_buf log = {0};
    assert_int_equal(rk_hiprtc_compile(k_bad, strlen(k_bad), "gfx90a", NULL, &co, &log), ROPEKV_ERR_COMPILE);
    assert_null(co.data);
    assert_true(has(&log, "error"));
    rk_buf_free(&log);
}

/* ---- nvrtc ------------------------------------------------------------------------------------ */
static void test_nvrtc_compile(void **state) {
    (void)state;
    if (!nvrtc_here()) skip();
    const struct {
        const char *arch;
        int fp8;
    } cases[] = {{"sm_80", 0}, {"sm_90", 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rk_codeobj co;
        rk_compile_info info;
        rk_buf log = {0};
        int rc = rk_compile_inspect(RK_CC_NVRTC, k_src, strlen(k_src), cases[i].arch, NULL, &co, &info, NULL, &log);
        if (rc != ROPEKV_OK) fail_msg("nvrtc %s: rc %d; log: %s", cases[i].arch, rc, log.p ? log.p : "");
        assert_true(is_elf(&co));
        assert_int_equal(strncmp(info.compiler, "nvrtc ", 6), 0);
        assert_true(info.ms > 0);
        assert_true(info.regs > 0);
        assert_int_equal(info.spills, 0);
        assert_int_equal(info.scratch, 0);
        assert_int_equal(info.lds, 0);
        assert_true(info.code_size > 0 && (size_t)info.code_size < co.len);
        assert_int_equal(info.fp8_cvt, cases[i].fp8);
        assert_int_equal(info.sgprs, -1);
        assert_true(has(&log, "registers")); /* ptxas -v went to the log */
        print_message("nvrtc  %-14s %7.1f ms  %zu bytes, %d regs, fp8_cvt %d (%s)\n", cases[i].arch, info.ms, co.len,
                      info.regs, info.fp8_cvt, info.compiler);
        rk_code_free(&co);
        rk_buf_free(&log);

        /* The library's compile: no ptxas report requested. */
        assert_int_equal(rk_nvrtc_compile(k_src, strlen(k_src), cases[i].arch, "-DUNUSED=1", 0, &co, NULL, NULL),
                         ROPEKV_OK);
        assert_true(is_elf(&co));
        rk_code_free(&co);

        rk_buf ptx = {0};
        assert_int_equal(rk_nvrtc_compile(k_src, strlen(k_src), cases[i].arch, NULL, 0, NULL, &ptx, NULL), ROPEKV_OK);
        assert_true(has(&ptx, ".entry to_fp8("));
        assert_true(has(&ptx, ".entry to_fp8_i64("));
        assert_int_equal(has(&ptx, "cvt.rn.satfinite.e4m3x2.f32"), cases[i].fp8);
        rk_buf_free(&ptx);
    }
}

static void test_nvrtc_errors(void **state) {
    (void)state;
    if (!nvrtc_here()) skip();
    rk_codeobj co = {(unsigned char *)"x", 1};
    rk_compile_info info;
    rk_buf log = {0};
    assert_int_equal(rk_compile_inspect(RK_CC_NVRTC, k_bad, strlen(k_bad), "sm_90", NULL, &co, &info, NULL, &log),
                     ROPEKV_ERR_COMPILE);
    assert_null(co.data);
    assert_true(has(&log, "error"));
    assert_int_equal(info.regs, -1);
    rk_buf_free(&log);
    /* Malformed (refused here) and unknown to nvrtc (refused by it). */
    const char *bad_arch[] = {"compute_90", "sm_", "sm_90x", "gfx942", "sm_99"};
    for (size_t i = 0; i < sizeof bad_arch / sizeof bad_arch[0]; i++) {
        int rc = rk_nvrtc_compile(k_src, strlen(k_src), bad_arch[i], NULL, 0, &co, NULL, &log);
        if (rc != ROPEKV_ERR_TARGET)
            fail_msg("nvrtc %s: rc %d, expected ROPEKV_ERR_TARGET; log: %s", bad_arch[i], rc, log.p ? log.p : "");
        rk_buf_free(&log);
    }
    /* An option nvrtc does not take (it rejects -O3) is a compile error, not a crash. */
    assert_int_equal(rk_nvrtc_compile(k_src, strlen(k_src), "sm_90", "-O3", 0, &co, NULL, &log), ROPEKV_ERR_COMPILE);
    rk_buf_free(&log);
}

/* ---- clang + inspection ------------------------------------------------------------------------- */
static void test_clang_compile(void **state) {
    (void)state;
    if (!clang_here()) skip();
    int inspect = llvm_tools_here();
    const struct {
        const char *target;
        int fp8;
    } cases[] = {{"gfx942", 1}, {"gfx950", 1}, {"gfx1100", 0}, {"gfx1201", 1}, {"gfx1250", 1}, {"gfx90a:xnack-", 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rk_codeobj co;
        rk_compile_info info;
        rk_buf log = {0};
        int rc = rk_compile_inspect(RK_CC_CLANG, k_src, strlen(k_src), cases[i].target, NULL, &co, &info, NULL, &log);
        if (rc != ROPEKV_OK) fail_msg("clang %s: rc %d; log: %s", cases[i].target, rc, log.p ? log.p : "");
        assert_true(is_elf(&co));
        assert_int_equal(strncmp(info.compiler, "clang ", 6), 0);
        assert_true(info.ms > 0);
        print_message("clang  %-14s %7.1f ms  %zu bytes (%s)\n", cases[i].target, info.ms, co.len, info.compiler);
        if (!inspect) {
            rk_code_free(&co);
            rk_buf_free(&log);
            continue;
        }
        assert_int_equal(info.fp8_cvt, cases[i].fp8);
        assert_int_equal(info.scratch, 0);
        const char *kernels[] = {"to_fp8", "to_fp8_i64"};
        for (int k = 0; k < 2; k++) {
            rk_compile_info ki;
            rk_info_reset(&ki);
            ki.ms = 12.5;
            rk_buf dis = {0};
            rc = rk_amd_inspect(&co, kernels[k], &ki, &dis);
            if (rc != ROPEKV_OK)
                fail_msg("inspect %s %s: rc %d: %s", cases[i].target, kernels[k], rc, dis.p ? dis.p : "");
            assert_true(ki.regs > 0 && ki.regs <= info.regs);
            assert_true(ki.sgprs > 0);
            assert_int_equal(ki.scratch, 0);
            assert_int_equal(ki.spills, 0);
            assert_int_equal(ki.lds, 0);
            assert_true(ki.code_size > 0 && ki.code_size < info.code_size);
            assert_int_equal(ki.fp8_cvt, cases[i].fp8);
            assert_true(ki.ms == 12.5); /* inspect leaves ms and compiler alone */
            assert_true(has(&dis, "<to_fp8>:") && has(&dis, "<to_fp8_i64>:"));
            assert_int_equal(has(&dis, "v_cvt_pk_fp8_f32"), cases[i].fp8);
            if (k == 0)
                print_message("       %-14s to_fp8: %d vgprs, %d sgprs, %d bytes code, fp8_cvt %d\n", cases[i].target,
                              ki.regs, ki.sgprs, ki.code_size, ki.fp8_cvt);
            rk_buf_free(&dis);
        }
        rk_compile_info none;
        rk_info_reset(&none);
        assert_int_equal(rk_amd_inspect(&co, "to_fp", &none, NULL), ROPEKV_ERR_COMPILE);
        assert_int_equal(rk_amd_inspect(&co, "no_such_kernel", &none, NULL), ROPEKV_ERR_COMPILE);
        assert_int_equal(none.regs, -1);
        rk_code_free(&co);
        rk_buf_free(&log);
    }
}

static void test_clang_errors(void **state) {
    (void)state;
    if (!clang_here()) skip();
    rk_codeobj co = {(unsigned char *)"x", 1};
    rk_buf log = {0};
    assert_int_equal(rk_clang_compile(k_bad, strlen(k_bad), "gfx942", NULL, &co, &log), ROPEKV_ERR_COMPILE);
    assert_null(co.data);
    assert_true(has(&log, "error"));
    rk_buf_free(&log);
    assert_int_equal(rk_clang_compile(k_src, strlen(k_src), "gfx9999", NULL, &co, &log), ROPEKV_ERR_TARGET);
    rk_buf_free(&log);
    assert_int_equal(rk_clang_compile(k_src, strlen(k_src), "gfx1030:xnack-", NULL, &co, &log), ROPEKV_ERR_TARGET);
    rk_buf_free(&log);
    /* An unusable TMPDIR: the offline drivers name it and the reason, as the runtime does. */
    const char *saved = getenv("TMPDIR");
    char keep[4096] = "";
    if (saved) snprintf(keep, sizeof keep, "%s", saved);
    setenv("TMPDIR", "/nonexistent-ropekv-tmpdir", 1);
    assert_int_equal(rk_clang_compile(k_src, strlen(k_src), "gfx942", NULL, &co, &log), ROPEKV_ERR_IO);
    assert_true(has(&log, "cannot create a temporary directory: TMPDIR=/nonexistent-ropekv-tmpdir"));
    rk_buf_free(&log);
    if (saved) setenv("TMPDIR", keep, 1);
    else unsetenv("TMPDIR");
    /* Not a code object: inspection fails cleanly. */
    rk_codeobj junk = {(unsigned char *)"not an elf file at all", 22};
    rk_compile_info info;
    rk_info_reset(&info);
    if (llvm_tools_here()) assert_int_equal(rk_amd_inspect(&junk, "to_fp8", &info, NULL), ROPEKV_ERR_IO);
    assert_int_equal(info.regs, -1);
}

/* ---- thread safety: the compilers from several threads at once ------------------------------- */
typedef struct job {
    int which; /* 0 nvrtc, 1 clang, 2 hiprtc */
    int rc;
    int regs;
} job;

static void *run_job(void *p) {
    job *j = p;
    rk_codeobj co;
    rk_compile_info info;
    static const rk_compiler cc[] = {RK_CC_NVRTC, RK_CC_CLANG, RK_CC_HIPRTC};
    static const char *const target[] = {"sm_90", "gfx942", "gfx90a"};
    j->rc = rk_compile_inspect(cc[j->which], k_src, strlen(k_src), target[j->which], NULL, &co, &info, NULL, NULL);
    j->regs = info.regs;
    rk_code_free(&co);
    return NULL;
}

static void test_threads(void **state) {
    (void)state;
    int maj, min;
    int have[3] = {nvrtc_here(), clang_here(), hiprtc_here(&maj, &min)};
    if (!have[0] && !have[1] && !have[2]) skip();
    enum { N = 9 };
    job jobs[N];
    pthread_t t[N];
    int started[N] = {0};
    for (int i = 0; i < N; i++) {
        jobs[i].which = i % 3;
        jobs[i].rc = -1;
        if (!have[i % 3]) continue;
        assert_int_equal(pthread_create(&t[i], NULL, run_job, &jobs[i]), 0);
        started[i] = 1;
    }
    for (int i = 0; i < N; i++) {
        if (!started[i]) continue;
        pthread_join(t[i], NULL);
        assert_int_equal(jobs[i].rc, ROPEKV_OK);
        /* The same source gives the same figures whichever thread compiled it. */
        assert_int_equal(jobs[i].regs, jobs[i % 3].regs);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_helpers),       cmocka_unit_test(test_hiprtc_supports),
        cmocka_unit_test(test_hiprtc_guard),  cmocka_unit_test(test_hiprtc_compile),
        cmocka_unit_test(test_nvrtc_compile), cmocka_unit_test(test_nvrtc_errors),
        cmocka_unit_test(test_clang_compile), cmocka_unit_test(test_clang_errors),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
