/* The launch-argument property, shared by tests/test_args_random.c and the fuzz target tests/fuzz/fuzz_args.c:
 * for any numbers in a ropekv_args (sizes, strides, counts, any int64) and any positions and slots, on a host
 * kernel, ropekv_launch either
 *   - refuses with a named error (NULL, SHAPE, STRIDE, ALIGN or ARG, the message naming a field) and leaves
 *     every buffer byte for byte as it was, or
 *   - succeeds, and every buffer equals what the CPU reference makes of copies of them.
 * Every buffer is mapped with PROT_NONE guard pages before and after it, ending at its last byte, and is
 * exactly as large as the args claim (computed here, independently of the library's checks), so an access
 * outside the claims crashes. Args that claim more than the address space holds (2^57 bytes), a negative
 * stride of a tensor the launch touches or a count outside its documented range must be refused; claims too
 * large to map here (RK_ORACLE_CAP) or to run in a fuzzer's time (RK_ORACLE_ROWS) but possible are only checked
 * with ropekv_query. Links the library and rktools
 * (the covering set, tools/cover.h). */
#ifndef RK_ARGS_ORACLE_H
#define RK_ARGS_ORACLE_H

#include <stddef.h>
#include <stdint.h>

#include "rk.h"
#include "ropekv.h"

#define RK_ORACLE_MAX_VARIANTS 160        /* room for the covering set's host variants and rule cases */
#define RK_ORACLE_CAP ((int64_t)4 << 20)  /* bytes of the largest buffer mapped for a launch */
#define RK_ORACLE_ROWS ((int64_t)1 << 14) /* rows written by the largest launch run (query and KV rows) */

typedef struct rk_oracle {
    rk_catalog cat;
    ropekv_ctx *ctx;
    int n; /* the variants: var[0, n) */
    struct {
        ropekv_variant v;
        ropekv_kernel *k; /* compiled on the variant's first launch (NULL until then) */
        rk_desc d;
    } var[RK_ORACLE_MAX_VARIANTS];
    long launched, refused, queried; /* draws that ran and matched, were refused, were too large to map */
    long launched_by[RK_ORACLE_MAX_VARIANTS], refused_by[RK_ORACLE_MAX_VARIANTS]; /* the same per variant */
    long strays; /* refused draws that passed a norm tensor to a kernel that does not take it */
} rk_oracle;

/* A host context (no disk cache) and the variants: the host row's variants of the covering set of the built-in
 * specs (rk_cover_catalog, tools/cover.h), in the set's order. Every KV dtype, q form, query dtype, index width,
 * layout, op and norm is among them; the norm variants take norm_weight [L] (and with rms_out norm_out [K, L] at
 * norm_out_st), and a norm tensor passed to a kernel that does not use it must be refused. Nothing is compiled here:
 * a variant's kernel is compiled on its first launch, so a run that draws few variants pays for few. 0, or -1 with
 * why (the catalog, the context, or a set larger than RK_ORACLE_MAX_VARIANTS). */
int rk_oracle_open(rk_oracle *o, char *why, size_t cap);
void rk_oracle_close(rk_oracle *o);

/* One draw: the variant (taken modulo the oracle's n), the numbers of a (its pointers are ignored: the
 * oracle maps the buffers), whether the read-back op writes its rope parts to out_rope, which norm tensors are
 * passed to a kernel that does not take them (a mix-up it must refuse), and the seed of the buffers' contents and of
 * the positions and slots (in range, at the edges, negative, past 2^31 and INT64). */
typedef struct rk_draw {
    unsigned variant;
    int out_rope;
    unsigned stray; /* 1: norm_weight, 2: norm_out, given where the variant takes no such tensor (else: NULL) */
    ropekv_args a;
    uint64_t seed;
} rk_draw;

/* The int64 fields of ropekv_args a draw sets (offsets), in the order of a fuzz input (rk_draw_of_bytes): the first
 * RK_ORACLE_SEED_AT before the seed, the ones added later (norm_out_st, q_heads) after it, so that older inputs keep
 * their meaning. */
#define RK_ORACLE_NFIELDS 23
#define RK_ORACLE_SEED_AT 21
extern const size_t rk_oracle_fields[RK_ORACLE_NFIELDS];

/* A draw from bytes (the fuzz target's input): variant, a byte of flags (bit 0 out_rope, bits 1-2 stray), then fields
 * [0, RK_ORACLE_SEED_AT) of rk_oracle_fields as 8 little-endian bytes each, the seed, then the remaining fields;
 * missing bytes are zero. */
rk_draw rk_draw_of_bytes(const uint8_t *p, size_t n);

/* The bytes of d (RK_ORACLE_DRAW_BYTES of them, rk_draw_of_bytes' layout; the variant's low byte), for seed inputs. */
#define RK_ORACLE_DRAW_BYTES (2 + 8 * (RK_ORACLE_NFIELDS + 1))
void rk_draw_to_bytes(const rk_draw *d, uint8_t p[RK_ORACLE_DRAW_BYTES]);

/* 0 when the property holds for d; 1 with why when it does not (or the variant's kernel does not compile). */
int rk_oracle_check(rk_oracle *o, const rk_draw *d, char *why, size_t cap);

#endif
