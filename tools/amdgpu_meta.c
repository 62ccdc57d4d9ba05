/* AMDGPU code objects read without the llvm tools (amdgpu_meta.h): the offload bundle, the ELF64 header,
 * its notes and symbol table, and the MessagePack of the NT_AMDGPU_METADATA note.
 *
 * Every offset and length read from the input is checked against the bytes left before it is used (in
 * size_t arithmetic that cannot wrap: a length is compared with what remains, never added to a position
 * first), and MessagePack containers nest at most RK_MP_MAX_DEPTH deep, so a hostile input ends in an
 * error and a reason. The layouts are LLVM's AMDGPUUsage ("Code Object V3 to V6 Metadata", "ELF Header")
 * and the clang offload bundler's. */
#include "amdgpu_meta.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ---- errors ------------------------------------------------------------------------------------- */
static int fail(char *why, size_t cap, const char *fmt, ...) {
    if (why && cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, cap, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* Little-endian fields of the ELF and the bundle, big-endian ones of MessagePack. */
static uint64_t le(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static uint64_t be(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v = v << 8 | p[i];
    return v;
}

/* ---- MessagePack -------------------------------------------------------------------------------- */
void rk_mp_init(rk_mp *m, const void *p, size_t n, char *why, size_t cap) {
    m->p = p;
    m->end = m->p + n;
    m->depth = 0;
    m->why = why;
    m->cap = cap;
}

static size_t mp_left(const rk_mp *m) { return (size_t)(m->end - m->p); }

static int mp_need(rk_mp *m, size_t n, const char *what) {
    if (mp_left(m) >= n) return 0;
    return fail(m->why, m->cap, "MessagePack: %s needs %zu bytes, %zu left", what, n, mp_left(m));
}

/* Reads an n-byte big-endian length or number after the type byte. */
static int mp_word(rk_mp *m, int n, uint64_t *v, const char *what) {
    if (mp_need(m, (size_t)n, what)) return -1;
    *v = be(m->p, n);
    m->p += n;
    return 0;
}

/* A string or binary payload of n bytes. */
static int mp_bytes(rk_mp *m, uint64_t n, rk_mp_value *v, const char *what) {
    if (n > mp_left(m))
        return fail(m->why, m->cap, "MessagePack: %s of %llu bytes, %zu left", what, (unsigned long long)n, mp_left(m));
    v->s = (const char *)m->p;
    v->n = (uint32_t)n;
    m->p += n;
    return 0;
}

/* A container of n elements (pairs for a map, per = 2): each element takes at least one byte, so a count
 * larger than the bytes left is refused here, before anyone loops over it. */
static int mp_count(rk_mp *m, uint64_t n, int per, rk_mp_value *v, const char *what) {
    if (n > mp_left(m) / (size_t)per)
        return fail(m->why, m->cap, "MessagePack: %s of %llu elements, %zu bytes left", what, (unsigned long long)n,
                    mp_left(m));
    v->n = (uint32_t)n;
    return 0;
}

int rk_mp_next(rk_mp *m, rk_mp_value *v) {
    memset(v, 0, sizeof *v);
    if (mp_need(m, 1, "a value")) return -1;
    const unsigned t = *m->p++;
    uint64_t w;
    if (t <= 0x7f) {
        v->kind = RK_MP_UINT;
        v->u = t;
        return 0;
    }
    if (t >= 0xe0) {
        v->kind = RK_MP_INT;
        v->i = (int8_t)t;
        return 0;
    }
    if ((t & 0xf0) == 0x80) {
        v->kind = RK_MP_MAP;
        return mp_count(m, t & 0x0f, 2, v, "fixmap");
    }
    if ((t & 0xf0) == 0x90) {
        v->kind = RK_MP_ARRAY;
        return mp_count(m, t & 0x0f, 1, v, "fixarray");
    }
    if ((t & 0xe0) == 0xa0) {
        v->kind = RK_MP_STR;
        return mp_bytes(m, t & 0x1f, v, "fixstr");
    }
    switch (t) {
    case 0xc0: v->kind = RK_MP_NIL; return 0;
    case 0xc2:
    case 0xc3:
        v->kind = RK_MP_BOOL;
        v->u = t == 0xc3;
        return 0;
    case 0xc4:
    case 0xc5:
    case 0xc6: {
        const int n = 1 << (t - 0xc4);
        v->kind = RK_MP_BIN;
        return mp_word(m, n, &w, "bin length") ? -1 : mp_bytes(m, w, v, "bin");
    }
    case 0xc7:
    case 0xc8:
    case 0xc9: { /* ext 8/16/32: a length, a type byte, the payload */
        const int n = 1 << (t - 0xc7);
        v->kind = RK_MP_EXT;
        if (mp_word(m, n, &w, "ext length") || mp_need(m, 1, "ext type")) return -1;
        v->i = (int8_t)*m->p++;
        return mp_bytes(m, w, v, "ext");
    }
    case 0xca:
    case 0xcb: {
        const int n = t == 0xca ? 4 : 8;
        if (mp_word(m, n, &w, "float")) return -1;
        v->kind = RK_MP_FLOAT;
        if (n == 4) {
            uint32_t b = (uint32_t)w;
            float f;
            memcpy(&f, &b, 4);
            v->f = f;
        } else {
            memcpy(&v->f, &w, 8);
        }
        return 0;
    }
    case 0xcc:
    case 0xcd:
    case 0xce:
    case 0xcf: v->kind = RK_MP_UINT; return mp_word(m, 1 << (t - 0xcc), &v->u, "uint");
    case 0xd0:
    case 0xd1:
    case 0xd2:
    case 0xd3: {
        const int n = 1 << (t - 0xd0);
        if (mp_word(m, n, &w, "int")) return -1;
        /* sign-extend the n-byte two's complement value */
        const uint64_t sign = (uint64_t)1 << (8 * n - 1);
        v->kind = RK_MP_INT;
        v->i = n == 8 ? (int64_t)w : (int64_t)(w ^ sign) - (int64_t)sign;
        return 0;
    }
    case 0xd4:
    case 0xd5:
    case 0xd6:
    case 0xd7:
    case 0xd8: /* fixext 1/2/4/8/16 */
        v->kind = RK_MP_EXT;
        if (mp_need(m, 1, "fixext type")) return -1;
        v->i = (int8_t)*m->p++;
        return mp_bytes(m, (uint64_t)1 << (t - 0xd4), v, "fixext");
    case 0xd9:
    case 0xda:
    case 0xdb: {
        const int n = 1 << (t - 0xd9);
        v->kind = RK_MP_STR;
        return mp_word(m, n, &w, "str length") ? -1 : mp_bytes(m, w, v, "str");
    }
    case 0xdc:
    case 0xdd:
        v->kind = RK_MP_ARRAY;
        return mp_word(m, t == 0xdc ? 2 : 4, &w, "array length") ? -1 : mp_count(m, w, 1, v, "array");
    case 0xde:
    case 0xdf:
        v->kind = RK_MP_MAP;
        return mp_word(m, t == 0xde ? 2 : 4, &w, "map length") ? -1 : mp_count(m, w, 2, v, "map");
    default: return fail(m->why, m->cap, "MessagePack: type byte 0x%02x is never used", t);
    }
}

/* Skips the children of a container value v just read; containers nest at most RK_MP_MAX_DEPTH deep. */
static int mp_skip_children(rk_mp *m, const rk_mp_value *v) {
    if (v->kind != RK_MP_ARRAY && v->kind != RK_MP_MAP) return 0;
    if (m->depth >= RK_MP_MAX_DEPTH)
        return fail(m->why, m->cap, "MessagePack: containers nested more than %d deep", RK_MP_MAX_DEPTH);
    m->depth++;
    const uint64_t n = (uint64_t)v->n * (v->kind == RK_MP_MAP ? 2 : 1);
    for (uint64_t i = 0; i < n; i++)
        if (rk_mp_skip(m)) return -1;
    m->depth--;
    return 0;
}

int rk_mp_skip(rk_mp *m) {
    rk_mp_value v;
    return rk_mp_next(m, &v) ? -1 : mp_skip_children(m, &v);
}

/* ---- the metadata map ----------------------------------------------------------------------------- */
static int is_key(const rk_mp_value *k, const char *name) {
    return k->kind == RK_MP_STR && k->n == strlen(name) && memcmp(k->s, name, k->n) == 0;
}

/* Reads a value that must be a string into dst[cap] (whole: a longer one is an error when cut is 0). */
static int mp_string(rk_mp *m, const char *key, char *dst, size_t cap, int cut) {
    rk_mp_value v;
    if (rk_mp_next(m, &v)) return -1;
    if (v.kind != RK_MP_STR) {
        if (mp_skip_children(m, &v)) return -1;
        return fail(m->why, m->cap, "metadata: %s is not a string", key);
    }
    if (v.n >= cap && !cut) return fail(m->why, m->cap, "metadata: %s is %u bytes, more than %zu", key, v.n, cap - 1);
    const size_t n = v.n < cap ? v.n : cap - 1;
    memcpy(dst, v.s, n);
    dst[n] = '\0';
    return 0;
}

/* Reads a value that must be a non-negative integer of at most max. */
static int mp_uint(rk_mp *m, const char *key, uint64_t max, uint64_t *out) {
    rk_mp_value v;
    if (rk_mp_next(m, &v)) return -1;
    if (v.kind == RK_MP_INT && v.i >= 0) v.u = (uint64_t)v.i;
    else if (v.kind != RK_MP_UINT) {
        if (mp_skip_children(m, &v)) return -1;
        return fail(m->why, m->cap, "metadata: %s is not a non-negative integer", key);
    }
    if (v.u > max)
        return fail(m->why, m->cap, "metadata: %s is %llu, more than %llu", key, (unsigned long long)v.u,
                    (unsigned long long)max);
    *out = v.u;
    return 0;
}

static int mp_u32(rk_mp *m, const char *key, uint32_t *out) {
    uint64_t u;
    if (mp_uint(m, key, UINT32_MAX, &u)) return -1;
    *out = (uint32_t)u;
    return 0;
}

static int mp_i32(rk_mp *m, const char *key, int32_t *out) {
    uint64_t u;
    if (mp_uint(m, key, INT32_MAX, &u)) return -1;
    *out = (int32_t)u;
    return 0;
}

/* Reads a container header of the given kind ("what" names it in the error). */
static int mp_expect(rk_mp *m, rk_mp_kind kind, const char *what, uint32_t *n) {
    rk_mp_value v;
    if (rk_mp_next(m, &v)) return -1;
    if (v.kind != kind) {
        if (mp_skip_children(m, &v)) return -1;
        return fail(m->why, m->cap, "metadata: %s is not %s", what, kind == RK_MP_MAP ? "a map" : "an array");
    }
    *n = v.n;
    return 0;
}

/* Enters / leaves a container whose children are read one by one (the depth limit counts them too). */
static int mp_enter(rk_mp *m) {
    if (m->depth >= RK_MP_MAX_DEPTH)
        return fail(m->why, m->cap, "MessagePack: containers nested more than %d deep", RK_MP_MAX_DEPTH);
    m->depth++;
    return 0;
}

static int read_arg(rk_mp *m, rk_amd_arg *a) {
    uint32_t n;
    if (mp_expect(m, RK_MP_MAP, "an entry of .args", &n) || mp_enter(m)) return -1;
    memset(a, 0, sizeof *a);
    int seen = 0; /* bits: 1 .value_kind, 2 .offset, 4 .size */
    for (uint32_t i = 0; i < n; i++) {
        rk_mp_value k;
        if (rk_mp_next(m, &k) || mp_skip_children(m, &k)) return -1;
        int rc;
        if (is_key(&k, ".value_kind")) {
            rc = mp_string(m, ".value_kind", a->value_kind, sizeof a->value_kind, 0);
            seen |= 1;
        } else if (is_key(&k, ".offset")) {
            rc = mp_u32(m, ".offset", &a->offset);
            seen |= 2;
        } else if (is_key(&k, ".size")) {
            rc = mp_u32(m, ".size", &a->size);
            seen |= 4;
        } else if (is_key(&k, ".name")) {
            rc = mp_string(m, ".args .name", a->name, sizeof a->name, 1);
        } else {
            rc = rk_mp_skip(m);
        }
        if (rc) return -1;
    }
    m->depth--;
    if (seen != 7)
        return fail(m->why, m->cap, "metadata: an argument lacks %s",
                    !(seen & 1)   ? ".value_kind"
                    : !(seen & 2) ? ".offset"
                                  : ".size");
    return 0;
}

static int read_kernel(rk_mp *m, rk_amd_kernel *kn) {
    uint32_t n;
    if (mp_expect(m, RK_MP_MAP, "an entry of amdhsa.kernels", &n) || mp_enter(m)) return -1;
    memset(kn, 0, sizeof *kn);
    kn->vgpr = kn->agpr = kn->sgpr = kn->vgpr_spill = kn->sgpr_spill = -1;
    kn->code_size = -1;
    for (uint32_t i = 0; i < n; i++) {
        rk_mp_value k;
        if (rk_mp_next(m, &k) || mp_skip_children(m, &k)) return -1;
        int rc = 0;
        if (is_key(&k, ".name")) rc = mp_string(m, ".name", kn->name, sizeof kn->name, 0);
        else if (is_key(&k, ".symbol")) rc = mp_string(m, ".symbol", kn->symbol, sizeof kn->symbol, 0);
        else if (is_key(&k, ".kernarg_segment_size")) rc = mp_u32(m, ".kernarg_segment_size", &kn->kernarg_size);
        else if (is_key(&k, ".kernarg_segment_align")) rc = mp_u32(m, ".kernarg_segment_align", &kn->kernarg_align);
        else if (is_key(&k, ".max_flat_workgroup_size")) rc = mp_u32(m, ".max_flat_workgroup_size", &kn->max_flat_wg);
        else if (is_key(&k, ".wavefront_size")) rc = mp_u32(m, ".wavefront_size", &kn->wave);
        else if (is_key(&k, ".private_segment_fixed_size"))
            rc = mp_u32(m, ".private_segment_fixed_size", &kn->private_size);
        else if (is_key(&k, ".group_segment_fixed_size")) rc = mp_u32(m, ".group_segment_fixed_size", &kn->group_size);
        else if (is_key(&k, ".vgpr_count")) rc = mp_i32(m, ".vgpr_count", &kn->vgpr);
        else if (is_key(&k, ".agpr_count")) rc = mp_i32(m, ".agpr_count", &kn->agpr);
        else if (is_key(&k, ".sgpr_count")) rc = mp_i32(m, ".sgpr_count", &kn->sgpr);
        else if (is_key(&k, ".vgpr_spill_count")) rc = mp_i32(m, ".vgpr_spill_count", &kn->vgpr_spill);
        else if (is_key(&k, ".sgpr_spill_count")) rc = mp_i32(m, ".sgpr_spill_count", &kn->sgpr_spill);
        else if (is_key(&k, ".uses_dynamic_stack")) {
            rk_mp_value v;
            rc = rk_mp_next(m, &v) || mp_skip_children(m, &v);
            if (!rc && v.kind != RK_MP_BOOL)
                rc = fail(m->why, m->cap, "metadata: .uses_dynamic_stack is not a boolean");
            kn->dynamic_stack = (int)v.u;
        } else if (is_key(&k, ".args")) {
            uint32_t na;
            if (mp_expect(m, RK_MP_ARRAY, ".args", &na) || mp_enter(m)) return -1;
            if (na > RK_AMD_MAX_ARGS)
                return fail(m->why, m->cap, "metadata: kernel has %u arguments, more than %d", na, RK_AMD_MAX_ARGS);
            for (uint32_t j = 0; j < na; j++)
                if (read_arg(m, &kn->args[j])) return -1;
            kn->n_args = (int)na;
            m->depth--;
        } else rc = rk_mp_skip(m);
        if (rc) return -1;
    }
    m->depth--;
    if (!kn->name[0] || !kn->symbol[0])
        return fail(m->why, m->cap, "metadata: a kernel lacks %s", !kn->name[0] ? ".name" : ".symbol");
    return 0;
}

/* The note's descriptor: the map of amdhsa.version, amdhsa.target, amdhsa.kernels and others. */
static int read_metadata(const unsigned char *p, size_t n, rk_amd_code *c, char *why, size_t cap) {
    rk_mp m;
    rk_mp_init(&m, p, n, why, cap);
    uint32_t keys;
    int have_kernels = 0;
    if (mp_expect(&m, RK_MP_MAP, "the metadata", &keys) || mp_enter(&m)) return -1;
    for (uint32_t i = 0; i < keys; i++) {
        rk_mp_value k;
        if (rk_mp_next(&m, &k) || mp_skip_children(&m, &k)) return -1;
        if (is_key(&k, "amdhsa.version")) {
            uint32_t nv, ver[2] = {0, 0};
            if (mp_expect(&m, RK_MP_ARRAY, "amdhsa.version", &nv) || mp_enter(&m)) return -1;
            if (nv != 2) return fail(why, cap, "metadata: amdhsa.version has %u elements, not 2", nv);
            if (mp_u32(&m, "amdhsa.version", &ver[0]) || mp_u32(&m, "amdhsa.version", &ver[1])) return -1;
            m.depth--;
            c->version_major = (int)(ver[0] & 0x7fffffff);
            c->version_minor = (int)(ver[1] & 0x7fffffff);
        } else if (is_key(&k, "amdhsa.target")) {
            if (mp_string(&m, "amdhsa.target", c->target, sizeof c->target, 0)) return -1;
        } else if (is_key(&k, "amdhsa.kernels")) {
            uint32_t nk;
            if (mp_expect(&m, RK_MP_ARRAY, "amdhsa.kernels", &nk) || mp_enter(&m)) return -1;
            if (nk > RK_AMD_MAX_KERNELS)
                return fail(why, cap, "metadata: %u kernels, more than %d", nk, RK_AMD_MAX_KERNELS);
            for (uint32_t j = 0; j < nk; j++)
                if (read_kernel(&m, &c->kernels[j])) return -1;
            c->n_kernels = (int)nk;
            have_kernels = 1;
            m.depth--;
        } else if (rk_mp_skip(&m)) {
            return -1;
        }
    }
    if (!have_kernels) return fail(why, cap, "metadata: no amdhsa.kernels");
    return 0;
}

/* ---- the ELF ---------------------------------------------------------------------------------------- */
enum {
    EM_AMDGPU = 224,
    ELFOSABI_AMDGPU_HSA = 64,
    SHT_SYMTAB = 2,
    SHT_NOTE = 7,
    PT_NOTE = 4,
    NT_AMDGPU_METADATA = 32,
    STT_FUNC = 2,
    EF_AMDGPU_MACH = 0xff,
    EF_AMDGPU_FEATURE_XNACK_V3 = 0x100,
    EF_AMDGPU_FEATURE_SRAMECC_V3 = 0x200,
    EF_AMDGPU_FEATURE_XNACK_V4 = 0x300,   /* 2 bits: unsupported, any, off, on */
    EF_AMDGPU_FEATURE_SRAMECC_V4 = 0xc00, /* the same */
};

/* EF_AMDGPU_MACH values, from LLVM's llvm/BinaryFormat/ELF.h (AMDGPUUsage, "AMDGPU EF_AMDGPU_MACH Values"). */
static const struct {
    unsigned mach;
    const char *name;
} MACHS[] = {
    {0x030, "gfx908"},  {0x03f, "gfx90a"},  {0x040, "gfx940"},  {0x04b, "gfx941"},
    {0x04c, "gfx942"},  {0x04f, "gfx950"},  {0x036, "gfx1030"}, {0x041, "gfx1100"},
    {0x046, "gfx1101"}, {0x047, "gfx1102"}, {0x044, "gfx1103"}, {0x043, "gfx1150"},
    {0x04a, "gfx1151"}, {0x048, "gfx1200"}, {0x04e, "gfx1201"}, {0x049, "gfx1250"},
};

const char *rk_amd_mach_name(uint32_t e_flags) {
    for (size_t i = 0; i < sizeof MACHS / sizeof MACHS[0]; i++)
        if (MACHS[i].mach == (e_flags & EF_AMDGPU_MACH)) return MACHS[i].name;
    return NULL;
}

/* The ELF header's fields this reader uses, after its checks. */
typedef struct elf {
    const unsigned char *p;
    size_t n;
    uint64_t shoff, phoff;
    unsigned shentsize, shnum, phentsize, phnum;
} elf;

/* A table of count entries of size ent (at least min bytes each) at off: inside the image? */
static int table_fits(const elf *e, uint64_t off, unsigned ent, unsigned count, unsigned min) {
    if (count == 0) return 1;
    return ent >= min && off <= e->n && (uint64_t)ent * count <= e->n - off;
}

/* Finds the NT_AMDGPU_METADATA note ("AMDGPU") in the notes at p[0, n); 1 found, 0 not, -1 malformed. */
static int find_note(const unsigned char *p, uint64_t n, const unsigned char **desc, size_t *dlen, char *why,
                     size_t cap) {
    uint64_t at = 0;
    while (n - at >= 12) {
        const uint64_t namesz = le(p + at, 4), descsz = le(p + at + 4, 4), type = le(p + at + 8, 4);
        at += 12;
        /* name and descriptor are each padded to 4 bytes (AMDGPU notes use 4-byte alignment) */
        const uint64_t name_pad = (namesz + 3) & ~(uint64_t)3, desc_pad = (descsz + 3) & ~(uint64_t)3;
        if (name_pad > n - at || descsz > n - at - name_pad)
            return fail(why, cap, "ELF: a note of %llu + %llu bytes overruns its section (%llu bytes left)",
                        (unsigned long long)namesz, (unsigned long long)descsz, (unsigned long long)(n - at));
        const unsigned char *name = p + at;
        if (type == NT_AMDGPU_METADATA && namesz == 7 && memcmp(name, "AMDGPU", 7) == 0) {
            *desc = p + at + name_pad;
            *dlen = (size_t)descsz;
            return 1;
        }
        at += name_pad;
        at += desc_pad < n - at ? desc_pad : n - at;
    }
    return 0;
}

/* The metadata note: in a SHT_NOTE section, else in a PT_NOTE segment. */
static int metadata_note(const elf *e, const unsigned char **desc, size_t *dlen, char *why, size_t cap) {
    for (unsigned i = 0; i < e->shnum; i++) {
        const unsigned char *h = e->p + e->shoff + (size_t)i * e->shentsize;
        if (le(h + 4, 4) != SHT_NOTE) continue;
        const uint64_t off = le(h + 0x18, 8), size = le(h + 0x20, 8);
        if (off > e->n || size > e->n - off) return fail(why, cap, "ELF: note section %u lies outside the file", i);
        const int rc = find_note(e->p + off, size, desc, dlen, why, cap);
        if (rc) return rc;
    }
    for (unsigned i = 0; i < e->phnum; i++) {
        const unsigned char *h = e->p + e->phoff + (size_t)i * e->phentsize;
        if (le(h, 4) != PT_NOTE) continue;
        const uint64_t off = le(h + 0x08, 8), size = le(h + 0x20, 8);
        if (off > e->n || size > e->n - off) return fail(why, cap, "ELF: note segment %u lies outside the file", i);
        const int rc = find_note(e->p + off, size, desc, dlen, why, cap);
        if (rc) return rc;
    }
    return 0;
}

/* st_size of each kernel's STT_FUNC symbol (the symbol named as the kernel) from the symbol tables. */
static void kernel_code_sizes(const elf *e, rk_amd_code *c) {
    for (unsigned i = 0; i < e->shnum; i++) {
        const unsigned char *h = e->p + e->shoff + (size_t)i * e->shentsize;
        if (le(h + 4, 4) != SHT_SYMTAB) continue;
        const uint64_t off = le(h + 0x18, 8), size = le(h + 0x20, 8), link = le(h + 0x28, 4);
        if (off > e->n || size > e->n - off || link >= e->shnum) continue;
        const unsigned char *sh = e->p + e->shoff + (size_t)link * e->shentsize;
        const uint64_t soff = le(sh + 0x18, 8), ssize = le(sh + 0x20, 8);
        if (soff > e->n || ssize > e->n - soff) continue;
        const char *strs = (const char *)e->p + soff;
        for (uint64_t s = 0; s + 24 <= size; s += 24) {
            const unsigned char *sym = e->p + off + s;
            const uint64_t name = le(sym, 4);
            if ((sym[4] & 0xf) != STT_FUNC || name >= ssize) continue;
            const char *nm = strs + name;
            const size_t room = (size_t)(ssize - name);
            for (int k = 0; k < c->n_kernels; k++) {
                const size_t len = strlen(c->kernels[k].name);
                if (len < room && memcmp(nm, c->kernels[k].name, len + 1) == 0) {
                    const uint64_t st_size = le(sym + 16, 8);
                    c->kernels[k].code_size = st_size > INT32_MAX ? -1 : (int64_t)st_size;
                }
            }
        }
    }
}

static rk_amd_feature feature_v4(uint32_t flags, uint32_t mask) {
    const uint32_t v = (flags & mask) / (mask & -mask); /* the field's two bits */
    return v == 0   ? RK_AMD_FEATURE_UNSUPPORTED
           : v == 1 ? RK_AMD_FEATURE_ANY
           : v == 2 ? RK_AMD_FEATURE_OFF
                    : RK_AMD_FEATURE_ON;
}

/* ---- the offload bundle -------------------------------------------------------------------------------- */
static const char BUNDLE_MAGIC[] = "__CLANG_OFFLOAD_BUNDLE__"; /* 24 bytes, no NUL in the file */

int rk_amd_elf_image(const void *p, size_t n, const unsigned char **img, size_t *len, char *why, size_t cap) {
    const unsigned char *b = p;
    if (!b || n < 4) return fail(why, cap, "not a code object: %zu bytes", n);
    if (memcmp(b,
               "\x7f"
               "ELF",
               4) == 0) {
        *img = b;
        *len = n;
        return 0;
    }
    if (memcmp(b, "CCOB", 4) == 0) return fail(why, cap, "a compressed offload bundle (CCOB) is not read");
    const size_t ml = sizeof BUNDLE_MAGIC - 1;
    if (n < ml || memcmp(b, BUNDLE_MAGIC, ml) != 0)
        return fail(why, cap, "not a code object: neither an ELF nor a clang offload bundle");
    if (n - ml < 8) return fail(why, cap, "offload bundle: truncated before its entry count");
    const uint64_t count = le(b + ml, 8);
    size_t at = ml + 8;
    int found = 0;
    for (uint64_t i = 0; i < count; i++) {
        if (n - at < 24)
            return fail(why, cap, "offload bundle: entry %llu of %llu truncated", (unsigned long long)i,
                        (unsigned long long)count);
        const uint64_t off = le(b + at, 8), size = le(b + at + 8, 8), idlen = le(b + at + 16, 8);
        at += 24;
        if (idlen > n - at)
            return fail(why, cap, "offload bundle: entry %llu's id of %llu bytes overruns the file",
                        (unsigned long long)i, (unsigned long long)idlen);
        const char *id = (const char *)b + at;
        at += (size_t)idlen;
        if (off > n || size > n - off)
            return fail(why, cap, "offload bundle: entry %llu (%.*s) lies outside the file", (unsigned long long)i,
                        (int)(idlen < 80 ? idlen : 80), id);
        /* "hipv4-amdgcn-amd-amdhsa--gfx942" (or "hip-" before code object v4) */
        static const char *kinds[] = {"hipv4-amdgcn-amd-amdhsa-", "hip-amdgcn-amd-amdhsa-"};
        for (int k = 0; k < 2; k++) {
            const size_t kl = strlen(kinds[k]);
            if (idlen > kl && memcmp(id, kinds[k], kl) == 0 && size > 0) {
                if (found++) return fail(why, cap, "offload bundle: more than one amdgcn entry");
                *img = b + off;
                *len = (size_t)size;
            }
        }
    }
    if (!found)
        return fail(why, cap, "offload bundle: no hipv4-amdgcn-amd-amdhsa entry among %llu", (unsigned long long)count);
    if (*len < 4 || memcmp(*img,
                           "\x7f"
                           "ELF",
                           4) != 0)
        return fail(why, cap, "offload bundle: the amdgcn entry is not an ELF");
    return 0;
}

/* ---- the reader ------------------------------------------------------------------------------------------ */
int rk_amd_read(const void *p, size_t n, rk_amd_code *out, char *why, size_t cap) {
    if (why && cap) why[0] = '\0';
    memset(out, 0, sizeof *out);
    elf e = {0};
    if (rk_amd_elf_image(p, n, &e.p, &e.n, why, cap)) return -1;
    const unsigned char *h = e.p;
    if (e.n < 64) return fail(why, cap, "ELF: %zu bytes, shorter than its header", e.n);
    if (h[4] != 2 || h[5] != 1) return fail(why, cap, "ELF: not ELF64 little-endian (class %u, data %u)", h[4], h[5]);
    const unsigned machine = (unsigned)le(h + 18, 2);
    if (machine != EM_AMDGPU) return fail(why, cap, "ELF: machine %u, not AMDGPU (%d)", machine, EM_AMDGPU);
    if (h[7] != ELFOSABI_AMDGPU_HSA)
        return fail(why, cap, "ELF: OS ABI %u, not AMDGPU HSA (%d)", h[7], ELFOSABI_AMDGPU_HSA);
    out->abi_version = h[8];
    out->e_flags = (uint32_t)le(h + 48, 4);
    e.phoff = le(h + 32, 8);
    e.shoff = le(h + 40, 8);
    e.phentsize = (unsigned)le(h + 54, 2);
    e.phnum = (unsigned)le(h + 56, 2);
    e.shentsize = (unsigned)le(h + 58, 2);
    e.shnum = (unsigned)le(h + 60, 2);
    if (!table_fits(&e, e.shoff, e.shentsize, e.shnum, 64))
        return fail(why, cap, "ELF: the section headers (%u of %u bytes at %llu) lie outside the file", e.shnum,
                    e.shentsize, (unsigned long long)e.shoff);
    if (!table_fits(&e, e.phoff, e.phentsize, e.phnum, 56))
        return fail(why, cap, "ELF: the program headers (%u of %u bytes at %llu) lie outside the file", e.phnum,
                    e.phentsize, (unsigned long long)e.phoff);

    const char *mach = rk_amd_mach_name(out->e_flags);
    snprintf(out->mach, sizeof out->mach, "%s", mach ? mach : "");
    if (out->abi_version >= 2) { /* v4 and later: two-bit fields */
        out->xnack = feature_v4(out->e_flags, EF_AMDGPU_FEATURE_XNACK_V4);
        out->sramecc = feature_v4(out->e_flags, EF_AMDGPU_FEATURE_SRAMECC_V4);
    } else { /* v3: one bit each, set when the feature is on */
        out->xnack = out->e_flags & EF_AMDGPU_FEATURE_XNACK_V3 ? RK_AMD_FEATURE_ON : RK_AMD_FEATURE_OFF;
        out->sramecc = out->e_flags & EF_AMDGPU_FEATURE_SRAMECC_V3 ? RK_AMD_FEATURE_ON : RK_AMD_FEATURE_OFF;
    }

    const unsigned char *desc = NULL;
    size_t dlen = 0;
    const int found = metadata_note(&e, &desc, &dlen, why, cap);
    if (found < 0) return -1;
    if (!found)
        return fail(why, cap, "ELF: no NT_AMDGPU_METADATA note (\"AMDGPU\", type %d): code object v2 or not HSA",
                    NT_AMDGPU_METADATA);
    if (read_metadata(desc, dlen, out, why, cap)) return -1;
    kernel_code_sizes(&e, out);
    return 0;
}

const rk_amd_kernel *rk_amd_kernel_find(const rk_amd_code *c, const char *name) {
    if (!c || !name) return NULL;
    const size_t n = strlen(name);
    for (int i = 0; i < c->n_kernels; i++) /* a kernel's name first: another's symbol may be this name + ".kd" */
        if (strcmp(c->kernels[i].name, name) == 0) return &c->kernels[i];
    for (int i = 0; i < c->n_kernels; i++) {
        const rk_amd_kernel *k = &c->kernels[i];
        if (strncmp(k->symbol, name, n) == 0 && strcmp(k->symbol + n, ".kd") == 0) return k;
    }
    return NULL;
}

/* ---- target ids ------------------------------------------------------------------------------------------ */
int rk_amd_target_parse(const char *id, char *mach, size_t cap, rk_amd_feature *xnack, rk_amd_feature *sramecc) {
    static const char prefix[] = "amdgcn-amd-amdhsa--";
    if (!id) return -1;
    if (strncmp(id, prefix, sizeof prefix - 1) == 0) id += sizeof prefix - 1;
    const size_t n = strcspn(id, ":");
    if (n < 4 || strncmp(id, "gfx", 3) != 0) return -1;
    for (size_t i = 3; i < n; i++)
        if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f'))) return -1;
    if (mach) {
        if (n >= cap) return -1;
        memcpy(mach, id, n);
        mach[n] = '\0';
    }
    rk_amd_feature x = RK_AMD_FEATURE_ANY, s = RK_AMD_FEATURE_ANY;
    int seen_x = 0, seen_s = 0;
    for (const char *f = id + n; *f;) {
        f++; /* the ':' */
        const size_t fl = strcspn(f, ":");
        if (fl < 2 || (f[fl - 1] != '+' && f[fl - 1] != '-')) return -1;
        const rk_amd_feature v = f[fl - 1] == '+' ? RK_AMD_FEATURE_ON : RK_AMD_FEATURE_OFF;
        if (fl - 1 == 5 && strncmp(f, "xnack", 5) == 0 && !seen_x++) x = v;
        else if (fl - 1 == 7 && strncmp(f, "sramecc", 7) == 0 && !seen_s++) s = v;
        else return -1; /* an unknown feature, or one named twice */
        f += fl;
    }
    if (xnack) *xnack = x;
    if (sramecc) *sramecc = s;
    return 0;
}

static const char *feature_name(rk_amd_feature f) {
    switch (f) {
    case RK_AMD_FEATURE_UNSUPPORTED: return "unsupported";
    case RK_AMD_FEATURE_ANY: return "any";
    case RK_AMD_FEATURE_OFF: return "off (-)";
    default: return "on (+)";
    }
}

/* One feature: the code object's setting (e_flags) against the device's. */
static int feature_ok(const char *name, rk_amd_feature code, rk_amd_feature dev, char *why, size_t cap) {
    if (code == RK_AMD_FEATURE_ANY || code == RK_AMD_FEATURE_UNSUPPORTED || code == dev) return 1;
    fail(why, cap, "the code object has %s %s, the device %s", name, feature_name(code),
         dev == RK_AMD_FEATURE_ANY ? "does not name it" : feature_name(dev));
    return 0;
}

int rk_amd_target_compatible(const rk_amd_code *c, const char *device_target, char *why, size_t cap) {
    if (why && cap) why[0] = '\0';
    char dev[24], meta[24];
    rk_amd_feature dx, ds, mx, ms;
    if (rk_amd_target_parse(device_target, dev, sizeof dev, &dx, &ds) != 0) {
        fail(why, cap, "device target '%s' is not a target id", device_target ? device_target : "(null)");
        return 0;
    }
    if (!c->mach[0]) {
        fail(why, cap, "the code object's e_flags (0x%x) name no known processor", c->e_flags);
        return 0;
    }
    /* amdhsa.target (v4 and later) must say what e_flags says */
    if (c->target[0]) {
        if (rk_amd_target_parse(c->target, meta, sizeof meta, &mx, &ms) != 0) {
            fail(why, cap, "amdhsa.target '%s' is not a target id", c->target);
            return 0;
        }
        const int named_x = c->xnack == RK_AMD_FEATURE_ON || c->xnack == RK_AMD_FEATURE_OFF;
        const int named_s = c->sramecc == RK_AMD_FEATURE_ON || c->sramecc == RK_AMD_FEATURE_OFF;
        if (strcmp(meta, c->mach) != 0 || (named_x ? mx != c->xnack : mx != RK_AMD_FEATURE_ANY) ||
            (named_s ? ms != c->sramecc : ms != RK_AMD_FEATURE_ANY)) {
            fail(why, cap, "amdhsa.target '%s' disagrees with e_flags (%s, xnack %s, sramecc %s)", c->target, c->mach,
                 feature_name(c->xnack), feature_name(c->sramecc));
            return 0;
        }
    }
    if (strcmp(dev, c->mach) != 0) {
        fail(why, cap, "the code object is for %s, the device is %s", c->mach, dev);
        return 0;
    }
    return feature_ok("xnack", c->xnack, dx, why, cap) && feature_ok("sramecc", c->sramecc, ds, why, cap);
}
