/* AMDGPU code objects read without the llvm tools: the ELF header (the processor and its xnack / sramecc
 * settings in e_flags, the code object version in e_ident) and the NT_AMDGPU_METADATA note (code object
 * v3 to v6: a MessagePack map), decoded into the facts a launch depends on. A clang offload bundle
 * ("__CLANG_OFFLOAD_BUNDLE__", what some compilers hand back) is opened to its one amdgcn entry.
 * Every read is bounds-checked and the MessagePack nesting depth is limited: hostile input gives an error
 * and a reason, never a read outside the buffer. Used by the tools (rk_amd_inspect, the launch ABI check of
 * test_matrix) and by tests/support's HIP stand-in; the library itself never reads code objects. */
#ifndef RK_AMDGPU_META_H
#define RK_AMDGPU_META_H

#include <stddef.h>
#include <stdint.h>

#define RK_AMD_MAX_KERNELS 8
#define RK_AMD_MAX_ARGS 48

/* A feature's setting in a code object or a target id (xnack, sramecc). */
typedef enum rk_amd_feature {
    RK_AMD_FEATURE_UNSUPPORTED = 0, /* the processor has no such setting */
    RK_AMD_FEATURE_ANY,             /* code object: runs with either setting; target id: not named */
    RK_AMD_FEATURE_OFF,             /* "feature-" */
    RK_AMD_FEATURE_ON,              /* "feature+" */
} rk_amd_feature;

/* One entry of a kernel's .args, in metadata order (.value_kind, .offset and .size are required). */
typedef struct rk_amd_arg {
    char value_kind[40]; /* "by_value", "global_buffer", "hidden_block_count_x", "hidden_none", ... */
    char name[64];       /* .name; "" when absent; cut to fit */
    uint32_t offset, size;
} rk_amd_arg;

/* One kernel of amdhsa.kernels (.name and .symbol are required; a longer string than a field holds is an
 * error, but for an argument's name). Counts absent from the metadata are -1, other numbers 0. */
typedef struct rk_amd_kernel {
    char name[256];                       /* .name (rk_desc names are up to 223 characters) */
    char symbol[264];                     /* .symbol: "<name>.kd" */
    uint32_t kernarg_size, kernarg_align; /* .kernarg_segment_size, .kernarg_segment_align */
    uint32_t max_flat_wg;                 /* .max_flat_workgroup_size */
    uint32_t wave;                        /* .wavefront_size */
    uint32_t private_size, group_size;    /* .private_segment_fixed_size, .group_segment_fixed_size */
    int dynamic_stack;                    /* .uses_dynamic_stack (0 when absent) */
    int32_t vgpr, agpr, sgpr;             /* .vgpr_count, .agpr_count, .sgpr_count */
    int32_t vgpr_spill, sgpr_spill;       /* .vgpr_spill_count, .sgpr_spill_count */
    int64_t code_size;                    /* st_size of the kernel's STT_FUNC symbol; -1 when absent */
    int n_args;
    rk_amd_arg args[RK_AMD_MAX_ARGS];
} rk_amd_kernel;

/* A whole code object. */
typedef struct rk_amd_code {
    uint32_t e_flags;
    int abi_version;                  /* e_ident[EI_ABIVERSION]: 1 (v3), 2 (v4), 3 (v5), 4 (v6) */
    int version_major, version_minor; /* amdhsa.version */
    char mach[24];                    /* the processor e_flags name: "gfx942"; "" when e_flags names none known */
    rk_amd_feature xnack, sramecc;    /* from e_flags (v4 and later; v3's one bit gives ON or OFF) */
    char target[160];                 /* amdhsa.target: "amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-" */
    int n_kernels;
    rk_amd_kernel kernels[RK_AMD_MAX_KERNELS];
} rk_amd_code;

/* The processor e_flags names (EF_AMDGPU_MACH, its low 8 bits): "gfx942". The table holds gfx908, gfx90a,
 * gfx940-942, gfx950, gfx1030, gfx1100-1103, gfx1150/1151, gfx1200/1201 and gfx1250; NULL for others. */
const char *rk_amd_mach_name(uint32_t e_flags);

/* The AMDGPU ELF image in p[0, n): p itself when it starts with the ELF magic, else the one
 * "hipv4-amdgcn-amd-amdhsa--<target>" entry of a clang offload bundle (a compressed one is refused).
 * 0 with *elf and *len set; -1 with the reason in why. */
int rk_amd_elf_image(const void *p, size_t n, const unsigned char **elf, size_t *len, char *why, size_t cap);

/* Reads the code object (an AMDGPU ELF64, or a clang offload bundle holding one) at p[0, n) into *out.
 * 0 on success; -1 with the reason in why (may be NULL) when it is not one, is truncated or malformed, has no
 * metadata note, or holds more kernels or arguments than the limits above. */
int rk_amd_read(const void *p, size_t n, rk_amd_code *out, char *why, size_t cap);

/* The kernel named name (its .name, or its .symbol without ".kd"); NULL when absent. */
const rk_amd_kernel *rk_amd_kernel_find(const rk_amd_code *c, const char *name);

/* Parses a target id: "gfx942", "gfx942:sramecc+:xnack-", with or without the "amdgcn-amd-amdhsa--" prefix,
 * into the processor name and its two settings (ANY where the id does not name the feature). 0, or -1 on an
 * id of another form or an unknown feature. */
int rk_amd_target_parse(const char *id, char *mach, size_t cap, rk_amd_feature *xnack, rk_amd_feature *sramecc);

/* Whether HIP's loader would run code object c on a device of target id device_target: the same processor
 * (e_flags and amdhsa.target agreeing), and each feature either ANY in the code object or equal to the
 * device's. 1 yes; 0 no, with the reason in why. */
int rk_amd_target_compatible(const rk_amd_code *c, const char *device_target, char *why, size_t cap);

/* ---- MessagePack (the metadata note's encoding), for the reader and its tests ---------------------- */
#define RK_MP_MAX_DEPTH 16 /* containers nested deeper are an error */

typedef enum rk_mp_kind {
    RK_MP_NIL,
    RK_MP_BOOL,  /* u: 0 or 1 */
    RK_MP_UINT,  /* u: positive fixint, uint8..uint64 */
    RK_MP_INT,   /* i: negative fixint, int8..int64 (of any sign) */
    RK_MP_FLOAT, /* f: float32, float64 */
    RK_MP_STR,   /* s, n: the bytes (not NUL-terminated) */
    RK_MP_BIN,   /* s, n */
    RK_MP_EXT,   /* s, n; i: the ext type */
    RK_MP_ARRAY, /* n elements follow */
    RK_MP_MAP,   /* n key/value pairs follow */
} rk_mp_kind;

typedef struct rk_mp_value {
    rk_mp_kind kind;
    uint64_t u;
    int64_t i;
    double f;
    const char *s;
    uint32_t n;
} rk_mp_value;

/* A cursor over MessagePack bytes; errors go to why[cap] (may be NULL). */
typedef struct rk_mp {
    const unsigned char *p, *end;
    int depth;
    char *why;
    size_t cap;
} rk_mp;

void rk_mp_init(rk_mp *m, const void *p, size_t n, char *why, size_t cap);
/* Reads one value's header (a string's or binary's bytes with it; an array's or map's count, whose
 * elements follow). A length beyond the bytes left, a count of more elements than bytes left, or the
 * unused type byte 0xc1 is an error: -1. */
int rk_mp_next(rk_mp *m, rk_mp_value *v);
/* Skips one whole value, children included; -1 on an error or nesting deeper than RK_MP_MAX_DEPTH. */
int rk_mp_skip(rk_mp *m);

#endif
