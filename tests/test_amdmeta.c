/* The AMDGPU code object reader (tools/amdgpu_meta.h): MessagePack decoding of hand-built buffers of every
 * type, a metadata note built here (every byte of it truncated, nested too deep, with huge lengths, under
 * another name or type), a non-AMDGPU ELF, a clang offload bundle; a real code object from clang-22 for
 * gfx942 (skipped with a message without it); target ids and their compatibility; the launch ABI check
 * (tools/abi.h) on metadata doctored to break each of its rules. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "abi.h"
#include "amdgpu_meta.h"
#include "build.h"
#include "clang.h"

/* The generated kernels take rk_args by value: the metadata built here and the real code object take a block of
 * its size (derived, so that a field added to templates/args.h changes nothing here), then the 256-byte hidden
 * block of code object v5. */
#define ARGS ((unsigned)sizeof(rk_args))
#define KERNARG (ARGS + 256)
_Static_assert(sizeof(rk_args) % 8 == 0 && sizeof(rk_args) >= 256, "rk_args: a block of longs, two bytes of size");

/* printf into a static buffer: a message that names rk_args' size. */
static const char *fmt(const char *f, ...) {
    static char b[256];
    va_list ap;
    va_start(ap, f);
    vsnprintf(b, sizeof b, f, ap);
    va_end(ap);
    return b;
}

/* ---- a MessagePack writer for the tests ------------------------------------------------------------ */
typedef struct wbuf {
    unsigned char b[8192];
    size_t n;
} wbuf;

static void put(wbuf *w, const void *p, size_t n) {
    assert_true(w->n + n <= sizeof w->b);
    memcpy(w->b + w->n, p, n);
    w->n += n;
}

static void put1(wbuf *w, unsigned v) {
    unsigned char c = (unsigned char)v;
    put(w, &c, 1);
}

static void put_be(wbuf *w, uint64_t v, int n) {
    for (int i = n - 1; i >= 0; i--) put1(w, (unsigned)(v >> (8 * i)) & 0xff);
}

static void put_le(wbuf *w, uint64_t v, int n) {
    for (int i = 0; i < n; i++) put1(w, (unsigned)(v >> (8 * i)) & 0xff);
}

static void w_map(wbuf *w, unsigned n) { put1(w, 0x80 | n); } /* n < 16 */
static void w_arr(wbuf *w, unsigned n) { put1(w, 0x90 | n); }
static void w_str(wbuf *w, const char *s) {
    size_t n = strlen(s);
    if (n < 32) put1(w, 0xa0 | (unsigned)n);
    else {
        put1(w, 0xd9);
        put1(w, (unsigned)n);
    }
    put(w, s, n);
}
static void w_uint(wbuf *w, uint64_t v) {
    if (v < 128) put1(w, (unsigned)v);
    else if (v < 65536) {
        put1(w, 0xcd);
        put_be(w, v, 2);
    } else {
        put1(w, 0xce);
        put_be(w, v, 4);
    }
}
static void kv_str(wbuf *w, const char *k, const char *v) {
    w_str(w, k);
    w_str(w, v);
}
static void kv_uint(wbuf *w, const char *k, uint64_t v) {
    w_str(w, k);
    w_uint(w, v);
}

/* The metadata of one kernel taking an rk_args-sized by-value argument, as clang writes it (plus one key the
 * reader does not know, holding nested containers and every scalar type). */
static void w_kernel(wbuf *w, const char *name, unsigned wave) {
    char sym[64];
    snprintf(sym, sizeof sym, "%s.kd", name);
    w_map(w, 15);
    w_str(w, ".args");
    w_arr(w, 2);
    w_map(w, 4);
    kv_uint(w, ".offset", 0);
    kv_uint(w, ".size", ARGS);
    kv_str(w, ".value_kind", "by_value");
    kv_str(w, ".name", "a");
    w_map(w, 3);
    kv_uint(w, ".offset", ARGS);
    kv_uint(w, ".size", 4);
    kv_str(w, ".value_kind", "hidden_block_count_x");
    kv_uint(w, ".group_segment_fixed_size", 0);
    kv_uint(w, ".kernarg_segment_align", 8);
    kv_uint(w, ".kernarg_segment_size", KERNARG);
    kv_uint(w, ".max_flat_workgroup_size", 256);
    kv_str(w, ".name", name);
    kv_uint(w, ".private_segment_fixed_size", 0);
    kv_uint(w, ".sgpr_count", 60);
    kv_uint(w, ".sgpr_spill_count", 0);
    kv_str(w, ".symbol", sym);
    w_str(w, ".uses_dynamic_stack");
    put1(w, 0xc2);
    kv_uint(w, ".vgpr_count", 28);
    kv_uint(w, ".vgpr_spill_count", 0);
    kv_uint(w, ".wavefront_size", wave);
    w_str(w, ".vendor_extension"); /* unknown: skipped whole */
    w_arr(w, 7);
    put1(w, 0xc0);
    put1(w, 0xc3);
    put1(w, 0xcb);
    put_be(w, 0x3ff0000000000000ull, 8);
    put1(w, 0xd3);
    put_be(w, (uint64_t)-5, 8);
    put1(w, 0xc4);
    put1(w, 2);
    put(w, "\x01\x02", 2);
    w_map(w, 1);
    w_str(w, "x");
    w_arr(w, 1);
    w_arr(w, 0);
    put1(w, 0xd4);
    put1(w, 1);
    put1(w, 0x55);
}

static void w_metadata_for(wbuf *w, const char *target) {
    w_map(w, 4);
    w_str(w, "amdhsa.kernels");
    w_arr(w, 2);
    w_kernel(w, "kern", 64);
    w_kernel(w, "kern_i64", 64);
    w_str(w, "amdhsa.printf");
    w_arr(w, 0);
    kv_str(w, "amdhsa.target", target);
    w_str(w, "amdhsa.version");
    w_arr(w, 2);
    w_uint(w, 1);
    w_uint(w, 2);
}

static void w_metadata(wbuf *w) { w_metadata_for(w, "amdgcn-amd-amdhsa--gfx942:sramecc+"); }

/* An AMDGPU ELF64 (v5: EI_ABIVERSION 3) with one SHT_NOTE section holding the note (name, type) with
 * descriptor desc[0, n), and the section headers at the end. machine 224 unless told. */
static void w_elf(wbuf *w, const void *desc, size_t n, const char *name, unsigned type, unsigned machine,
                  uint32_t flags) {
    w->n = 0;
    const size_t namesz = strlen(name) + 1, name_pad = (namesz + 3) & ~(size_t)3, desc_pad = (n + 3) & ~(size_t)3;
    const size_t note_size = 12 + name_pad + desc_pad, shoff = 64 + note_size;
    put(w,
        "\x7f"
        "ELF",
        4);
    put1(w, 2); /* ELFCLASS64 */
    put1(w, 1); /* little-endian */
    put1(w, 1);
    put1(w, 64); /* ELFOSABI_AMDGPU_HSA */
    put1(w, 3);  /* code object v5 */
    put(w, "\0\0\0\0\0\0\0", 7);
    put_le(w, 3, 2); /* ET_DYN */
    put_le(w, machine, 2);
    put_le(w, 1, 4);
    put_le(w, 0, 8);      /* entry */
    put_le(w, 0, 8);      /* phoff */
    put_le(w, shoff, 8);  /* shoff */
    put_le(w, flags, 4);  /* e_flags */
    put_le(w, 64, 2);     /* ehsize */
    put_le(w, 56, 2);     /* phentsize */
    put_le(w, 0, 2);      /* phnum */
    put_le(w, 64, 2);     /* shentsize */
    put_le(w, 2, 2);      /* shnum */
    put_le(w, 0, 2);      /* shstrndx */
    put_le(w, namesz, 4); /* the note */
    put_le(w, n, 4);
    put_le(w, type, 4);
    put(w, name, namesz);
    put(w, "\0\0\0", name_pad - namesz);
    if (n) put(w, desc, n);
    put(w, "\0\0\0", desc_pad - n);
    unsigned char zero[64] = {0};
    put(w, zero, 64); /* section 0 */
    put_le(w, 0, 4);  /* sh_name */
    put_le(w, 7, 4);  /* SHT_NOTE */
    put_le(w, 2, 8);  /* SHF_ALLOC */
    put_le(w, 64, 8); /* sh_addr */
    put_le(w, 64, 8); /* sh_offset */
    put_le(w, note_size, 8);
    put_le(w, 0, 4);
    put_le(w, 0, 4);
    put_le(w, 4, 8);
    put_le(w, 0, 8);
}

enum { GFX942_V4_FLAGS = 0x4c | 0x100 | 0xc00 }; /* gfx942, xnack any, sramecc on */

/* ---- MessagePack ---------------------------------------------------------------------------------- */
static void test_mp_types(void **state) {
    (void)state;
    wbuf w = {0};
    put1(&w, 0x05);                       /* positive fixint */
    put1(&w, 0xff);                       /* negative fixint -1 */
    put1(&w, 0xc0);                       /* nil */
    put1(&w, 0xc2);                       /* false */
    put1(&w, 0xc3);                       /* true */
    put1(&w, 0xcc), put1(&w, 200);        /* uint8 */
    put1(&w, 0xcd), put_be(&w, 60000, 2); /* uint16 */
    put1(&w, 0xce), put_be(&w, 4000000000u, 4);
    put1(&w, 0xcf), put_be(&w, 0xfedcba9876543210ull, 8);
    put1(&w, 0xd0), put1(&w, 0x80); /* int8 -128 */
    put1(&w, 0xd1), put_be(&w, 0x8000, 2);
    put1(&w, 0xd2), put_be(&w, 0xfffffffe, 4);
    put1(&w, 0xd3), put_be(&w, 0x8000000000000000ull, 8);
    put1(&w, 0xd2), put_be(&w, 7, 4); /* a positive int32 */
    float f = 1.5f;
    uint32_t fb;
    memcpy(&fb, &f, 4);
    put1(&w, 0xca), put_be(&w, fb, 4);
    put1(&w, 0xcb), put_be(&w, 0xc004000000000000ull, 8); /* -2.5 */
    w_str(&w, "abc");                                     /* fixstr */
    put1(&w, 0xd9), put1(&w, 2), put(&w, "de", 2);        /* str8 */
    put1(&w, 0xda), put_be(&w, 1, 2), put(&w, "f", 1);    /* str16 */
    put1(&w, 0xdb), put_be(&w, 0, 4);                     /* str32, empty */
    put1(&w, 0xc4), put1(&w, 1), put1(&w, 0xaa);          /* bin8 */
    put1(&w, 0xc5), put_be(&w, 1, 2), put1(&w, 0xbb);     /* bin16 */
    put1(&w, 0xc6), put_be(&w, 1, 4), put1(&w, 0xcc);     /* bin32 */
    w_arr(&w, 1), put1(&w, 1);                            /* fixarray */
    put1(&w, 0xdc), put_be(&w, 1, 2), put1(&w, 2);        /* array16 */
    put1(&w, 0xdd), put_be(&w, 1, 4), put1(&w, 3);        /* array32 */
    w_map(&w, 1), put1(&w, 1), put1(&w, 2);               /* fixmap */
    put1(&w, 0xde), put_be(&w, 1, 2), put1(&w, 1), put1(&w, 2);
    put1(&w, 0xdf), put_be(&w, 1, 4), put1(&w, 1), put1(&w, 2);
    put1(&w, 0xc7), put1(&w, 1), put1(&w, 9), put1(&w, 0); /* ext8 */
    put1(&w, 0xd5), put1(&w, 0xfe), put(&w, "xy", 2);      /* fixext2, type -2 */

    const struct {
        rk_mp_kind kind;
        uint64_t u;
        int64_t i;
        double f;
        const char *s;
        uint32_t n;
    } want[] = {
        {RK_MP_UINT, 5, 0, 0, NULL, 0},
        {RK_MP_INT, 0, -1, 0, NULL, 0},
        {RK_MP_NIL, 0, 0, 0, NULL, 0},
        {RK_MP_BOOL, 0, 0, 0, NULL, 0},
        {RK_MP_BOOL, 1, 0, 0, NULL, 0},
        {RK_MP_UINT, 200, 0, 0, NULL, 0},
        {RK_MP_UINT, 60000, 0, 0, NULL, 0},
        {RK_MP_UINT, 4000000000u, 0, 0, NULL, 0},
        {RK_MP_UINT, 0xfedcba9876543210ull, 0, 0, NULL, 0},
        {RK_MP_INT, 0, -128, 0, NULL, 0},
        {RK_MP_INT, 0, -32768, 0, NULL, 0},
        {RK_MP_INT, 0, -2, 0, NULL, 0},
        {RK_MP_INT, 0, INT64_MIN, 0, NULL, 0},
        {RK_MP_INT, 0, 7, 0, NULL, 0},
        {RK_MP_FLOAT, 0, 0, 1.5, NULL, 0},
        {RK_MP_FLOAT, 0, 0, -2.5, NULL, 0},
        {RK_MP_STR, 0, 0, 0, "abc", 3},
        {RK_MP_STR, 0, 0, 0, "de", 2},
        {RK_MP_STR, 0, 0, 0, "f", 1},
        {RK_MP_STR, 0, 0, 0, "", 0},
        {RK_MP_BIN, 0, 0, 0, "\xaa", 1},
        {RK_MP_BIN, 0, 0, 0, "\xbb", 1},
        {RK_MP_BIN, 0, 0, 0, "\xcc", 1},
    };
    char why[256] = "";
    rk_mp m;
    rk_mp_init(&m, w.b, w.n, why, sizeof why);
    rk_mp_value v;
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
        if (rk_mp_next(&m, &v)) fail_msg("value %zu: %s", k, why);
        assert_int_equal(v.kind, want[k].kind);
        if (v.kind == RK_MP_UINT || v.kind == RK_MP_BOOL) assert_true(v.u == want[k].u);
        if (v.kind == RK_MP_INT) assert_true(v.i == want[k].i);
        if (v.kind == RK_MP_FLOAT) assert_true(v.f == want[k].f);
        if (want[k].s) {
            assert_int_equal(v.n, want[k].n);
            assert_memory_equal(v.s, want[k].s, v.n);
        }
    }
    for (uint64_t k = 1; k <= 3; k++) { /* the three arrays of one element k */
        assert_int_equal(rk_mp_next(&m, &v), 0);
        assert_int_equal(v.kind, RK_MP_ARRAY);
        assert_int_equal(v.n, 1);
        assert_int_equal(rk_mp_next(&m, &v), 0);
        assert_true(v.kind == RK_MP_UINT && v.u == k);
    }
    for (int k = 0; k < 3; k++) {
        assert_int_equal(rk_mp_next(&m, &v), 0);
        assert_int_equal(v.kind, RK_MP_MAP);
        assert_int_equal(v.n, 1);
        assert_int_equal(rk_mp_skip(&m), 0);
        assert_int_equal(rk_mp_skip(&m), 0);
    }
    assert_int_equal(rk_mp_next(&m, &v), 0);
    assert_true(v.kind == RK_MP_EXT && v.i == 9 && v.n == 1);
    assert_int_equal(rk_mp_next(&m, &v), 0);
    assert_true(v.kind == RK_MP_EXT && v.i == -2 && v.n == 2 && !memcmp(v.s, "xy", 2));
    assert_ptr_equal(m.p, m.end);
    assert_int_equal(rk_mp_next(&m, &v), -1); /* nothing left */
    assert_non_null(strstr(why, "needs 1 bytes, 0 left"));

    /* 0xc1 is never used */
    rk_mp_init(&m, "\xc1", 1, why, sizeof why);
    assert_int_equal(rk_mp_next(&m, &v), -1);
    assert_non_null(strstr(why, "0xc1"));
}

/* Lengths and counts beyond the bytes left are refused before anything is read or looped over. */
static void test_mp_huge_lengths(void **state) {
    (void)state;
    static const struct {
        const char *bytes;
        size_t n;
        const char *err;
    } cases[] = {
        {"\xdb\xff\xff\xff\xff", 5, "str of 4294967295 bytes"},
        {"\xc6\xff\xff\xff\xf0"
         "ab",
         7, "bin of 4294967280 bytes"},
        {"\xdd\xff\xff\xff\xff", 5, "array of 4294967295 elements"},
        {"\xdf\x7f\xff\xff\xff\x01\x02", 7, "map of 2147483647 elements"},
        {"\xde\x00\x02\x01\x02\x03", 6, "map of 2 elements, 3 bytes left"},
        {"\xa5"
         "abcd",
         5, "fixstr of 5 bytes, 4 left"},
        {"\xc9\xff\xff\xff\xff\x01", 6, "ext of 4294967295 bytes"},
        {"\xcf\x01\x02", 3, "uint needs 8 bytes, 2 left"},
        {"\xda\x01", 2, "str length needs 2 bytes, 1 left"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char why[256] = "";
        rk_mp m;
        rk_mp_init(&m, cases[i].bytes, cases[i].n, why, sizeof why);
        assert_int_equal(rk_mp_skip(&m), -1);
        if (!strstr(why, cases[i].err)) fail_msg("case %zu: '%s' lacks '%s'", i, why, cases[i].err);
    }
}

/* Arrays nested past the limit: refused (skip recursion and the reader alike), not a stack overflow. */
static void test_mp_nesting_bomb(void **state) {
    (void)state;
    static unsigned char bomb[100000];
    memset(bomb, 0x91, sizeof bomb); /* [[[[...]]]] */
    char why[256] = "";
    rk_mp m;
    rk_mp_init(&m, bomb, sizeof bomb, why, sizeof why);
    assert_int_equal(rk_mp_skip(&m), -1);
    assert_non_null(strstr(why, "nested more than"));
    /* at the limit it is fine */
    unsigned char ok[RK_MP_MAX_DEPTH + 1];
    memset(ok, 0x91, RK_MP_MAX_DEPTH);
    ok[RK_MP_MAX_DEPTH] = 0xc0;
    rk_mp_init(&m, ok, sizeof ok, why, sizeof why);
    assert_int_equal(rk_mp_skip(&m), 0);
    /* the same bomb as the value of an unknown metadata key */
    wbuf d = {0};
    w_map(&d, 2);
    w_str(&d, "amdhsa.kernels");
    w_arr(&d, 0);
    w_str(&d, "x");
    put(&d, bomb, 4000);
    static wbuf e;
    w_elf(&e, d.b, d.n, "AMDGPU", 32, 224, GFX942_V4_FLAGS);
    rk_amd_code c;
    assert_int_equal(rk_amd_read(e.b, e.n, &c, why, sizeof why), -1);
    assert_non_null(strstr(why, "nested more than"));
}

/* ---- the reader on a note built here ------------------------------------------------------------------ */
static void test_read_built(void **state) {
    (void)state;
    wbuf d = {0};
    w_metadata(&d);
    static wbuf e;
    w_elf(&e, d.b, d.n, "AMDGPU", 32, 224, GFX942_V4_FLAGS);
    rk_amd_code c;
    char why[256] = "";
    if (rk_amd_read(e.b, e.n, &c, why, sizeof why)) fail_msg("%s", why);
    assert_string_equal(c.mach, "gfx942");
    assert_int_equal(c.abi_version, 3);
    assert_int_equal(c.e_flags, GFX942_V4_FLAGS);
    assert_int_equal(c.xnack, RK_AMD_FEATURE_ANY);
    assert_int_equal(c.sramecc, RK_AMD_FEATURE_ON);
    assert_int_equal(c.version_major, 1);
    assert_int_equal(c.version_minor, 2);
    assert_string_equal(c.target, "amdgcn-amd-amdhsa--gfx942:sramecc+");
    assert_int_equal(c.n_kernels, 2);
    const rk_amd_kernel *k = rk_amd_kernel_find(&c, "kern_i64");
    assert_non_null(k);
    assert_ptr_equal(rk_amd_kernel_find(&c, "kern_i64.kd"), NULL);
    assert_ptr_equal(rk_amd_kernel_find(&c, "kern"), &c.kernels[0]);
    assert_null(rk_amd_kernel_find(&c, "ker"));
    assert_string_equal(k->symbol, "kern_i64.kd");
    assert_int_equal(k->kernarg_size, KERNARG);
    assert_int_equal(k->kernarg_align, 8);
    assert_int_equal(k->max_flat_wg, 256);
    assert_int_equal(k->wave, 64);
    assert_int_equal(k->private_size, 0);
    assert_int_equal(k->group_size, 0);
    assert_int_equal(k->dynamic_stack, 0);
    assert_int_equal(k->vgpr, 28);
    assert_int_equal(k->agpr, -1); /* absent */
    assert_int_equal(k->sgpr, 60);
    assert_int_equal(k->vgpr_spill, 0);
    assert_int_equal(k->code_size, -1); /* no symbol table */
    assert_int_equal(k->n_args, 2);
    assert_string_equal(k->args[0].value_kind, "by_value");
    assert_string_equal(k->args[0].name, "a");
    assert_int_equal(k->args[0].size, ARGS);
    assert_string_equal(k->args[1].value_kind, "hidden_block_count_x");
    assert_int_equal(k->args[1].offset, ARGS);
    assert_string_equal(k->args[1].name, "");

    /* The note truncated at every byte: an error each time, never a read past it (ASan). */
    static wbuf t;
    for (size_t n = 0; n < d.n; n++) {
        w_elf(&t, d.b, n, "AMDGPU", 32, 224, GFX942_V4_FLAGS);
        why[0] = '\0';
        if (rk_amd_read(t.b, t.n, &c, why, sizeof why) != -1) fail_msg("the note cut to %zu bytes was read", n);
        assert_true(why[0] != '\0');
    }
    /* The file truncated at every byte. */
    for (size_t n = 0; n < e.n; n++) {
        unsigned char *cut = malloc(n ? n : 1);
        assert_non_null(cut);
        memcpy(cut, e.b, n);
        if (rk_amd_read(cut, n, &c, why, sizeof why) != -1) fail_msg("the file cut to %zu bytes was read", n);
        free(cut);
    }
}

static void test_read_wrong(void **state) {
    (void)state;
    wbuf d = {0};
    w_metadata(&d);
    static wbuf e;
    rk_amd_code c;
    char why[256];
    /* another note name or type: no metadata */
    w_elf(&e, d.b, d.n, "AMD", 32, 224, GFX942_V4_FLAGS);
    assert_int_equal(rk_amd_read(e.b, e.n, &c, why, sizeof why), -1);
    assert_non_null(strstr(why, "no NT_AMDGPU_METADATA note"));
    w_elf(&e, d.b, d.n, "AMDGPU", 10, 224, GFX942_V4_FLAGS);
    assert_int_equal(rk_amd_read(e.b, e.n, &c, why, sizeof why), -1);
    assert_non_null(strstr(why, "no NT_AMDGPU_METADATA note"));
    /* another machine (x86-64) */
    w_elf(&e, d.b, d.n, "AMDGPU", 32, 62, GFX942_V4_FLAGS);
    assert_int_equal(rk_amd_read(e.b, e.n, &c, why, sizeof why), -1);
    assert_non_null(strstr(why, "machine 62, not AMDGPU"));
    /* not an ELF, nothing, ELF32 */
    assert_int_equal(rk_amd_read("hello world", 11, &c, why, sizeof why), -1);
    assert_non_null(strstr(why, "neither an ELF nor a clang offload bundle"));
    assert_int_equal(rk_amd_read(NULL, 0, &c, why, sizeof why), -1);
    w_elf(&e, d.b, d.n, "AMDGPU", 32, 224, GFX942_V4_FLAGS);
    e.b[4] = 1;
    assert_int_equal(rk_amd_read(e.b, e.n, &c, why, sizeof why), -1);
    assert_non_null(strstr(why, "not ELF64 little-endian"));
    /* a section header pointing past the end */
    w_elf(&e, d.b, d.n, "AMDGPU", 32, 224, GFX942_V4_FLAGS);
    e.b[e.n - 64 + 0x20] = 0xff;
    e.b[e.n - 64 + 0x27] = 0x7f; /* sh_size huge */
    assert_int_equal(rk_amd_read(e.b, e.n, &c, why, sizeof why), -1);
    assert_non_null(strstr(why, "outside the file"));
    /* a note whose descsz runs past its section */
    w_elf(&e, d.b, d.n, "AMDGPU", 32, 224, GFX942_V4_FLAGS);
    memcpy(e.b + 64 + 4, "\xff\xff\xff\xff", 4);
    assert_int_equal(rk_amd_read(e.b, e.n, &c, why, sizeof why), -1);
    assert_non_null(strstr(why, "overruns its section"));
    /* metadata that is not a map; a kernel without .symbol; too many arguments */
    w_elf(&e, "\x93\x01\x02\x03", 4, "AMDGPU", 32, 224, GFX942_V4_FLAGS);
    assert_int_equal(rk_amd_read(e.b, e.n, &c, why, sizeof why), -1);
    assert_non_null(strstr(why, "the metadata is not a map"));
    wbuf k = {0};
    w_map(&k, 1);
    w_str(&k, "amdhsa.kernels");
    w_arr(&k, 1);
    w_map(&k, 1);
    kv_str(&k, ".name", "x");
    w_elf(&e, k.b, k.n, "AMDGPU", 32, 224, GFX942_V4_FLAGS);
    assert_int_equal(rk_amd_read(e.b, e.n, &c, why, sizeof why), -1);
    assert_non_null(strstr(why, "lacks .symbol"));
    k.n = 0;
    w_map(&k, 1);
    w_str(&k, "amdhsa.kernels");
    w_arr(&k, 1);
    w_map(&k, 1);
    w_str(&k, ".args");
    put1(&k, 0xdc);
    put_be(&k, RK_AMD_MAX_ARGS + 1, 2);
    for (int i = 0; i <= RK_AMD_MAX_ARGS; i++) w_map(&k, 0);
    w_elf(&e, k.b, k.n, "AMDGPU", 32, 224, GFX942_V4_FLAGS);
    assert_int_equal(rk_amd_read(e.b, e.n, &c, why, sizeof why), -1);
    assert_non_null(strstr(why, "more than 48"));
    /* an argument without its offset */
    k.n = 0;
    w_map(&k, 1);
    w_str(&k, "amdhsa.kernels");
    w_arr(&k, 1);
    w_map(&k, 1);
    w_str(&k, ".args");
    w_arr(&k, 1);
    w_map(&k, 2);
    kv_str(&k, ".value_kind", "by_value");
    kv_uint(&k, ".size", 8);
    w_elf(&e, k.b, k.n, "AMDGPU", 32, 224, GFX942_V4_FLAGS);
    assert_int_equal(rk_amd_read(e.b, e.n, &c, why, sizeof why), -1);
    assert_non_null(strstr(why, "an argument lacks .offset"));
    /* a number where a string belongs, a string where a number does */
    k.n = 0;
    w_map(&k, 1);
    w_str(&k, "amdhsa.target");
    w_uint(&k, 5);
    w_elf(&e, k.b, k.n, "AMDGPU", 32, 224, GFX942_V4_FLAGS);
    assert_int_equal(rk_amd_read(e.b, e.n, &c, why, sizeof why), -1);
    assert_non_null(strstr(why, "amdhsa.target is not a string"));
}

/* A clang offload bundle ("__CLANG_OFFLOAD_BUNDLE__", count, then offset, size, id length, id per entry)
 * with an empty host entry and the code object, as clang-offload-bundler writes it. */
static size_t w_bundle(unsigned char *out, size_t cap, const void *co, size_t n, const char *id) {
    wbuf *w = calloc(1, sizeof *w);
    assert_non_null(w);
    const char *host = "host-x86_64-unknown-linux-gnu";
    const size_t head = 24 + 8 + (24 + strlen(host)) + (24 + strlen(id)), at = (head + 4095) & ~(size_t)4095;
    put(w, "__CLANG_OFFLOAD_BUNDLE__", 24);
    put_le(w, 2, 8);
    put_le(w, at, 8);
    put_le(w, 0, 8);
    put_le(w, strlen(host), 8);
    put(w, host, strlen(host));
    put_le(w, at, 8);
    put_le(w, n, 8);
    put_le(w, strlen(id), 8);
    put(w, id, strlen(id));
    assert_true(at + n <= cap);
    memcpy(out, w->b, w->n);
    memset(out + w->n, 0, at - w->n);
    memcpy(out + at, co, n);
    free(w);
    return at + n;
}

static void test_read_bundle(void **state) {
    (void)state;
    wbuf d = {0};
    w_metadata(&d);
    static wbuf e;
    w_elf(&e, d.b, d.n, "AMDGPU", 32, 224, GFX942_V4_FLAGS);
    static unsigned char b[16384];
    size_t n = w_bundle(b, sizeof b, e.b, e.n, "hipv4-amdgcn-amd-amdhsa--gfx942");
    rk_amd_code c;
    char why[256];
    if (rk_amd_read(b, n, &c, why, sizeof why)) fail_msg("%s", why);
    assert_int_equal(c.n_kernels, 2);
    assert_string_equal(c.mach, "gfx942");
    const unsigned char *img;
    size_t len;
    assert_int_equal(rk_amd_elf_image(b, n, &img, &len, why, sizeof why), 0);
    assert_int_equal(len, e.n);
    assert_memory_equal(img, e.b, e.n);
    /* truncated anywhere: an error */
    for (size_t k = 0; k < n; k += (k < 256 ? 1 : 97))
        if (rk_amd_read(b, k, &c, why, sizeof why) != -1) fail_msg("the bundle cut to %zu bytes was read", k);
    /* no amdgcn entry; an entry past the end; a compressed bundle */
    n = w_bundle(b, sizeof b, e.b, e.n, "openmp-x86_64-unknown-linux-gnu");
    assert_int_equal(rk_amd_read(b, n, &c, why, sizeof why), -1);
    assert_non_null(strstr(why, "no hipv4-amdgcn-amd-amdhsa entry"));
    n = w_bundle(b, sizeof b, e.b, e.n, "hipv4-amdgcn-amd-amdhsa--gfx942");
    b[24 + 8 + 24 + 29 + 8] = 0xff; /* the code object's size */
    assert_int_equal(rk_amd_read(b, n, &c, why, sizeof why), -1);
    assert_non_null(strstr(why, "lies outside the file"));
    assert_int_equal(rk_amd_read("CCOB\x01\x00", 6, &c, why, sizeof why), -1);
    assert_non_null(strstr(why, "compressed offload bundle"));
}

/* ---- target ids ------------------------------------------------------------------------------------- */
static void test_target_ids(void **state) {
    (void)state;
    char mach[24];
    rk_amd_feature x, s;
    assert_int_equal(rk_amd_target_parse("gfx942", mach, sizeof mach, &x, &s), 0);
    assert_string_equal(mach, "gfx942");
    assert_true(x == RK_AMD_FEATURE_ANY && s == RK_AMD_FEATURE_ANY);
    assert_int_equal(rk_amd_target_parse("amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-", mach, sizeof mach, &x, &s), 0);
    assert_string_equal(mach, "gfx90a");
    assert_true(x == RK_AMD_FEATURE_OFF && s == RK_AMD_FEATURE_ON);
    assert_int_equal(rk_amd_target_parse("gfx1100:xnack+", mach, sizeof mach, &x, &s), 0);
    assert_true(x == RK_AMD_FEATURE_ON && s == RK_AMD_FEATURE_ANY);
    const char *bad[] = {"",
                         "sm_90",
                         "gfx",
                         "gfx942:",
                         "gfx942:xnack",
                         "gfx942:tgsplit+",
                         "gfx942:xnack+:xnack-",
                         "gfx9g2",
                         "amdgcn-amd-amdhsa-gfx942",
                         "gfx942 "};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (rk_amd_target_parse(bad[i], mach, sizeof mach, &x, &s) == 0) fail_msg("'%s' was parsed", bad[i]);
    assert_int_equal(rk_amd_target_parse("gfx942", mach, 4, &x, &s), -1); /* no room */

    /* A gfx942 code object with sramecc any and xnack any runs on gfx942:sramecc+:xnack-. */
    rk_amd_code c;
    memset(&c, 0, sizeof c);
    c.abi_version = 3;
    c.e_flags = 0x54c;
    snprintf(c.mach, sizeof c.mach, "gfx942");
    c.xnack = c.sramecc = RK_AMD_FEATURE_ANY;
    snprintf(c.target, sizeof c.target, "amdgcn-amd-amdhsa--gfx942");
    char why[256];
    assert_int_equal(rk_amd_target_compatible(&c, "gfx942:sramecc+:xnack-", why, sizeof why), 1);
    assert_int_equal(rk_amd_target_compatible(&c, "gfx942", why, sizeof why), 1);
    /* not on gfx950 */
    assert_int_equal(rk_amd_target_compatible(&c, "gfx950", why, sizeof why), 0);
    assert_non_null(strstr(why, "for gfx942, the device is gfx950"));
    /* xnack+ code on an xnack- device: no */
    c.xnack = RK_AMD_FEATURE_ON;
    snprintf(c.target, sizeof c.target, "amdgcn-amd-amdhsa--gfx942:xnack+");
    assert_int_equal(rk_amd_target_compatible(&c, "gfx942:sramecc+:xnack-", why, sizeof why), 0);
    assert_non_null(strstr(why, "xnack on (+), the device off (-)"));
    assert_int_equal(rk_amd_target_compatible(&c, "gfx942:sramecc+:xnack+", why, sizeof why), 1);
    /* amdhsa.target disagreeing with e_flags */
    snprintf(c.target, sizeof c.target, "amdgcn-amd-amdhsa--gfx942");
    assert_int_equal(rk_amd_target_compatible(&c, "gfx942:xnack+", why, sizeof why), 0);
    assert_non_null(strstr(why, "disagrees with e_flags"));
    /* e_flags naming no processor known */
    c.mach[0] = '\0';
    assert_int_equal(rk_amd_target_compatible(&c, "gfx942", why, sizeof why), 0);
    assert_non_null(strstr(why, "name no known processor"));
    /* the e_flags table */
    assert_string_equal(rk_amd_mach_name(0x53f), "gfx90a");
    assert_string_equal(rk_amd_mach_name(0x4f), "gfx950");
    assert_string_equal(rk_amd_mach_name(0x49), "gfx1250");
    assert_string_equal(rk_amd_mach_name(0x4e), "gfx1201");
    assert_null(rk_amd_mach_name(0x00));
}

/* ---- a real code object --------------------------------------------------------------------------------- */
/* Two entries taking one block of rk_args' size by value, as the generated kernels do; the second reads the
 * work-group size, which gives it the code object v5 hidden arguments. %u: the block's longs. */
static const char k_real[] =
    "struct blk { long a[%u]; };\n"
    "extern \"C\" __attribute__((global)) __attribute__((amdgpu_flat_work_group_size(1, 256)))\n"
    "void kern(blk b) { if (b.a[0]) ((long *)b.a[1])[__builtin_amdgcn_workgroup_id_x()] = b.a[2]; }\n"
    "extern \"C\" __attribute__((global)) void kern_i64(blk b) {\n"
    "    ((long *)b.a[1])[__builtin_amdgcn_workgroup_size_x()] = b.a[2];\n"
    "}\n";

static void test_read_real(void **state) {
    (void)state;
    char version[512];
    if (rk_clang_available(version, sizeof version) != 0) {
        print_message("clang-22 not available, skipping the real code object: %s\n", version);
        skip();
    }
    rk_codeobj co;
    rk_buf log = {0};
    char src[sizeof k_real + 16];
    snprintf(src, sizeof src, k_real, ARGS / 8);
    int rc = rk_clang_compile(src, strlen(src), "gfx942", NULL, &co, &log);
    if (rc != ROPEKV_OK) fail_msg("clang gfx942: %d: %s", rc, log.p ? log.p : "");
    rk_amd_code c;
    char why[256];
    if (rk_amd_read(co.data, co.len, &c, why, sizeof why)) fail_msg("%s", why);
    assert_string_equal(c.mach, "gfx942");
    assert_int_equal(c.abi_version, 3); /* -mcode-object-version=5 */
    assert_int_equal(c.xnack, RK_AMD_FEATURE_ANY);
    assert_int_equal(c.sramecc, RK_AMD_FEATURE_ANY);
    assert_string_equal(c.target, "amdgcn-amd-amdhsa--gfx942");
    assert_true(c.version_major == 1 && c.version_minor >= 2);
    assert_int_equal(c.n_kernels, 2);
    const rk_amd_kernel *k = rk_amd_kernel_find(&c, "kern");
    assert_non_null(k);
    assert_int_equal(k->n_args, 1);
    assert_string_equal(k->args[0].value_kind, "by_value");
    assert_int_equal(k->args[0].offset, 0);
    assert_int_equal(k->args[0].size, ARGS);
    assert_int_equal(k->kernarg_size, ARGS);
    assert_int_equal(k->kernarg_align, 8);
    assert_int_equal(k->max_flat_wg, 256);
    assert_int_equal(k->wave, 64);
    assert_int_equal(k->private_size, 0);
    assert_true(k->vgpr > 0 && k->sgpr > 0 && k->agpr == 0);
    assert_true(k->code_size > 0);
    const rk_amd_kernel *h = rk_amd_kernel_find(&c, "kern_i64");
    assert_non_null(h);
    assert_int_equal(h->max_flat_wg, 1024);
    assert_true(h->n_args > 1);
    assert_int_equal(h->kernarg_size, KERNARG); /* v5: the whole 256-byte hidden block */
    print_message("gfx942: kern %d vgprs, %d sgprs, %lld bytes; kern_i64 %d args, kernarg %u bytes\n", k->vgpr, k->sgpr,
                  (long long)k->code_size, h->n_args, h->kernarg_size);
    char compat[256];
    assert_int_equal(rk_amd_target_compatible(&c, "gfx942:sramecc+:xnack-", compat, sizeof compat), 1);
    /* the launch ABI check passes, the hidden arguments of kern_i64 at clang's v5 places included */
    rk_arch row = {.name = "gfx942", .vendor = RK_VENDOR_AMD, .wave = 64, .block = 256};
    rk_desc d;
    memset(&d, 0, sizeof d);
    d.arch = &row;
    snprintf(d.name, sizeof d.name, "kern");
    if (!rk_amd_abi_check(&c, &d, why, sizeof why)) fail_msg("%s", why);

    /* The real note's descriptor cut at every byte (its size field rewritten in place). */
    unsigned char *p = co.data;
    size_t at = 0;
    for (size_t i = 12; i + 8 <= co.len && !at; i++)
        if (!memcmp(p + i, "AMDGPU\0", 7) && !memcmp(p + i - 12, "\x07\0\0\0", 4) &&
            !memcmp(p + i - 4, "\x20\0\0\0", 4))
            at = i - 12;
    assert_true(at > 0);
    uint32_t descsz;
    memcpy(&descsz, p + at + 4, 4);
    for (uint32_t n = 0; n < descsz; n++) {
        memcpy(p + at + 4, &n, 4);
        if (rk_amd_read(p, co.len, &c, why, sizeof why) != -1) fail_msg("the real note cut to %u bytes was read", n);
    }
    memcpy(p + at + 4, &descsz, 4);
    assert_int_equal(rk_amd_read(p, co.len, &c, why, sizeof why), 0);
    /* and in a bundle, as clang-offload-bundler writes one */
    unsigned char *b = malloc(co.len + 8192);
    assert_non_null(b);
    size_t n = w_bundle(b, co.len + 8192, co.data, co.len, "hipv4-amdgcn-amd-amdhsa--gfx942");
    assert_int_equal(rk_amd_read(b, n, &c, why, sizeof why), 0);
    assert_int_equal(c.n_kernels, 2);
    free(b);
    rk_code_free(&co);
    rk_buf_free(&log);
}

/* ---- the launch ABI check --------------------------------------------------------------------------------- */
static void check_fails(const rk_amd_kernel *k, int abi_version, const rk_desc *d, const char *want) {
    char why[512];
    assert_int_equal(rk_amd_abi_check_kernel(k, abi_version, d, why, sizeof why), 0);
    if (!strstr(why, want)) fail_msg("'%s' lacks '%s'", why, want);
}

static void test_abi_check(void **state) {
    (void)state;
    rk_arch gfx942 = {.name = "gfx942", .vendor = RK_VENDOR_AMD, .wave = 64, .block = 256};
    rk_arch gfx950 = gfx942, gfx1201 = gfx942;
    snprintf(gfx950.name, sizeof gfx950.name, "gfx950");
    snprintf(gfx1201.name, sizeof gfx1201.name, "gfx1201");
    gfx1201.wave = 32;
    rk_desc d;
    memset(&d, 0, sizeof d);
    d.arch = &gfx942;
    snprintf(d.name, sizeof d.name, "kern");

    /* the code object built here: gfx942, every feature any, both entries, v5 */
    wbuf m = {0};
    w_metadata_for(&m, "amdgcn-amd-amdhsa--gfx942");
    static wbuf e;
    w_elf(&e, m.b, m.n, "AMDGPU", 32, 224, 0x54c);
    static rk_amd_code c;
    char why[512];
    if (rk_amd_read(e.b, e.n, &c, why, sizeof why)) fail_msg("%s", why);
    if (!rk_amd_abi_check(&c, &d, why, sizeof why)) fail_msg("%s", why);
    char facts[256];
    rk_amd_abi_facts(&c.kernels[0], facts, sizeof facts);
    assert_string_equal(facts, fmt("kernarg %u bytes, align 8; explicit arg: by_value at 0, %u bytes; 1 hidden; wave "
                                   "64; max flat work group 256",
                                   KERNARG, ARGS));
    /* for another row, another processor or a restricted feature: no */
    d.arch = &gfx950;
    assert_int_equal(rk_amd_abi_check(&c, &d, why, sizeof why), 0);
    assert_non_null(strstr(why, "for gfx942, the device is gfx950"));
    d.arch = &gfx942;
    m.n = 0;
    w_metadata_for(&m, "amdgcn-amd-amdhsa--gfx942:sramecc+");
    w_elf(&e, m.b, m.n, "AMDGPU", 32, 224, GFX942_V4_FLAGS);
    assert_int_equal(rk_amd_read(e.b, e.n, &c, why, sizeof why), 0);
    assert_int_equal(rk_amd_abi_check(&c, &d, why, sizeof why), 0);
    assert_non_null(strstr(why, "sramecc on (+), the device does not name it"));
    /* an entry missing */
    m.n = 0;
    w_metadata_for(&m, "amdgcn-amd-amdhsa--gfx942");
    w_elf(&e, m.b, m.n, "AMDGPU", 32, 224, 0x54c);
    assert_int_equal(rk_amd_read(e.b, e.n, &c, why, sizeof why), 0);
    snprintf(c.kernels[1].name, sizeof c.kernels[1].name, "kern_i32");
    snprintf(c.kernels[1].symbol, sizeof c.kernels[1].symbol, "kern_i32.kd");
    assert_int_equal(rk_amd_abi_check(&c, &d, why, sizeof why), 0);
    assert_non_null(strstr(why, "no kernel kern_i64"));

    const rk_amd_kernel good = c.kernels[0];
    rk_amd_kernel k = good;
    assert_int_equal(rk_amd_abi_check_kernel(&k, 3, &d, why, sizeof why), 1);
    /* the argument of another size; two explicit arguments; not by value */
    k.args[0].size = ARGS - 8;
    check_fails(&k, 3, &d, fmt("the argument is %u bytes, sizeof(rk_args) is %u", ARGS - 8, ARGS));
    k = good;
    k.args[1] = k.args[0];
    k.args[1].offset = ARGS;
    k.args[1].size = 8;
    snprintf(k.args[1].value_kind, sizeof k.args[1].value_kind, "global_buffer");
    check_fails(&k, 3, &d, fmt("explicit argument 1 (global_buffer at %u)", ARGS));
    k = good;
    snprintf(k.args[0].value_kind, sizeof k.args[0].value_kind, "global_buffer");
    check_fails(&k, 3, &d, "the argument is global_buffer, not by_value");
    k = good;
    k.args[0].offset = 8;
    check_fails(&k, 3, &d, "the argument is at offset 8, not 0");
    k = good;
    k.n_args = 0;
    check_fails(&k, 3, &d, "no explicit argument");
    /* wave 32 against the row's 64, and the other way round */
    k = good;
    k.wave = 32;
    check_fails(&k, 3, &d, ".wavefront_size 32, the gfx942 row's wave is 64");
    d.arch = &gfx1201;
    check_fails(&good, 3, &d, ".wavefront_size 64, the gfx1201 row's wave is 32");
    d.arch = &gfx942;
    /* a block larger than the kernel's max flat work-group size; a block not a multiple of the wave */
    k = good;
    k.max_flat_wg = 128;
    check_fails(&k, 3, &d, "block 256 > .max_flat_workgroup_size 128");
    rk_arch odd = gfx942;
    odd.block = 96;
    d.arch = &odd;
    check_fails(&good, 3, &d, "block 96 is not a multiple of the wave 64");
    d.arch = &gfx942;
    /* hidden arguments: inside rk_args, past the segment, misaligned, off their v5 place */
    k = good;
    k.args[1].offset = ARGS - 4;
    check_fails(&k, 3, &d, fmt("hidden_block_count_x at %u, inside the rk_args block", ARGS - 4));
    k = good;
    k.kernarg_size = ARGS + 2;
    check_fails(&k, 3, &d, fmt("past .kernarg_segment_size %u", ARGS + 2));
    k = good;
    k.args[1].offset = ARGS + 2;
    check_fails(&k, 3, &d, fmt("hidden_block_count_x at %u, not aligned to 4", ARGS + 2));
    k = good;
    k.args[1].offset = ARGS + 4;
    check_fails(&k, 3, &d, fmt("the v5 implicit block puts it at %u", ARGS));
    assert_int_equal(rk_amd_abi_check_kernel(&k, 2, &d, why, sizeof why), 1); /* v4 has no fixed places */
    k = good;                                                                 /* the hidden one listed first */
    k.args[0] = good.args[1];
    k.args[1] = good.args[0];
    check_fails(&k, 3, &d, "explicit argument 1 after a hidden one");
    /* segment size and alignment */
    k = good;
    k.kernarg_size = 300;
    check_fails(&k, 3, &d, fmt(".kernarg_segment_size 300 < sizeof(rk_args) %u", ARGS));
    k = good;
    k.kernarg_align = 4;
    check_fails(&k, 3, &d, ".kernarg_segment_align 4, rk_args needs 8");
    /* scratch, dynamic stack, LDS */
    k = good;
    k.private_size = 16;
    check_fails(&k, 3, &d, ".private_segment_fixed_size 16");
    k = good;
    k.dynamic_stack = 1;
    check_fails(&k, 3, &d, ".uses_dynamic_stack");
    k = good;
    k.group_size = 65537;
    check_fails(&k, 3, &d, ".group_segment_fixed_size 65537 > the device's 65536 bytes of LDS");
    d.arch = &gfx950;
    assert_int_equal(rk_amd_abi_check_kernel(&k, 3, &d, why, sizeof why), 1); /* 160 KiB on gfx950 */
    k.group_size = 160 * 1024 + 1;
    check_fails(&k, 3, &d, "163840 bytes of LDS");
    /* several rules broken: each is named */
    d.arch = &gfx942;
    k = good;
    k.wave = 32;
    k.private_size = 4;
    check_fails(&k, 3, &d, ".wavefront_size 32, the gfx942 row's wave is 64; .private_segment_fixed_size 4");

    /* `ropekv-gen build --strict` counts a failed check as a violation */
    static rk_build_result r;
    memset(&r, 0, sizeof r);
    r.rc = ROPEKV_OK;
    r.cc = RK_CC_CLANG;
    r.info.fp8_cvt = 1;
    r.abi = 1;
    assert_int_equal(rk_build_strict_violation(&d, &r, why, sizeof why), 0);
    r.abi = 0;
    snprintf(r.abi_why, sizeof r.abi_why, "the entry: .wavefront_size 32");
    assert_int_equal(rk_build_strict_violation(&d, &r, why, sizeof why), 1);
    assert_string_equal(why, "launch ABI check: the entry: .wavefront_size 32");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mp_types),        cmocka_unit_test(test_mp_huge_lengths),
        cmocka_unit_test(test_mp_nesting_bomb), cmocka_unit_test(test_read_built),
        cmocka_unit_test(test_read_wrong),      cmocka_unit_test(test_read_bundle),
        cmocka_unit_test(test_target_ids),      cmocka_unit_test(test_read_real),
        cmocka_unit_test(test_abi_check),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
