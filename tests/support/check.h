/* The conformance harness: random inputs laid out as engines hold them, the CPU reference on one copy,
 * the kernel under test on another, every output byte compared. Used by `ropekv-gen selftest`, the host
 * tests and tests/gpu_conformance. */
#ifndef RK_CHECK_H
#define RK_CHECK_H

#include "rk.h"

/* ---- conformance harness (gen/check.c) -------------------------------------------------------------
 * Builds random inputs for a shape as engines lay them out (non-contiguous views: q_nope and q_pe are
 * slices of one [T, H, L+R+pad] query buffer, k_nope and k_pe of one [T, L+R+pad] projection output),
 * runs the reference and the kernel on separate copies, and compares every output byte (outputs start
 * filled with a sentinel, so stray writes are caught too). */
/* The test generators' xorshift64 stream (the harness, the argument oracle, test_args_random and test_ref's
 * division check draw from it). */
typedef struct rk_rng {
    uint64_t s;
} rk_rng;

static inline uint64_t rk_rng_next(rk_rng *r) {
    r->s ^= r->s << 13;
    r->s ^= r->s >> 7;
    r->s ^= r->s << 17;
    return r->s;
}

typedef struct rk_shape {
    int64_t tokens, heads; /* query rows for tokens [0, tokens) */
    int64_t kv_tokens;     /* KV rows for tokens [0, kv_tokens): 0 the same as tokens, -1 none */
    int64_t min_slot;      /* slots below it are not written (the harness's slots include 0 .. min_slot - 1) */
    int64_t pad;           /* extra elements in every token and head stride (a multiple of 8) */
    int64_t max_pos;       /* rows of the cos/sin tables */
    int neg_every;         /* every n-th token gets a negative slot (0: none) */
    int specials;          /* sprinkle NaN and +-inf into the inputs */
    float k_scale;
    float q_scale;  /* an fp8 query's scale (0 means 1) */
    int mask_every; /* a write mask with every n-th KV token's byte 0 (0: no mask; write kernels) */
    int64_t q_pad;  /* padded query heads past heads (absorbed: ropekv_args.q_heads = heads + q_pad) */
    int runs;       /* the reference runs this many times on its buffers (0 means 1); the run callback
                        must run the kernel as often, back to back (in place, each run rotates the
                        previous one's output: chained launches that must be ordered) */
} rk_shape;

/* Runs the kernel under test on host-visible buffers described by a. Returns 0 or an error code. */
typedef int (*rk_run_fn)(void *ctx, const rk_desc *v, const rk_args *a);

/* 0: identical; 1: mismatch (why says where); other: error from run or allocation (why says). */
int rk_check(const rk_desc *v, const rk_shape *sh, uint64_t seed, rk_run_fn run, void *ctx, char *why, size_t why_cap);

/* The host buffers behind the rk_args that rk_check hands its run callback, for a callback that runs
 * the kernel elsewhere (copy each buffer to the device, rebase the pointers, copy the compared ones
 * back). Every non-NULL pointer of those args lies inside one of them; the sizes follow from the args
 * (tokens, heads, strides, max_pos) and the variant. */
enum {
    RK_CHECK_Q,     /* [T, H, L+R+pad] bf16 holding q_nope | q_pe (compared: the in-place form writes it) */
    RK_CHECK_K,     /* [kv_tokens, L+R+pad] bf16 holding k_nope | k_pe */
    RK_CHECK_Q_OUT, /* also the read-back op's out and out_rope ([T, W+pad], or [T, L+pad] then [T, R+pad]) */
    RK_CHECK_KV, /* kv_tokens (the read-back op: tokens) + 3 cache rows (split layout: their latent parts), in blocks of 4 entries
                         with padding between entries and between blocks for the paged and split layouts */
    RK_CHECK_KV_ROPE, /* split layout: the rope parts; else 0 bytes */
    RK_CHECK_POS,
    RK_CHECK_SLOTS,
    RK_CHECK_COS,
    RK_CHECK_SIN, /* 0 bytes with an f32_cat table */
    RK_CHECK_K_SCALE,
    RK_CHECK_Q_SCALE,
    RK_CHECK_NORM_W,   /* the fused norm's weight [L]; 0 bytes without the norm */
    RK_CHECK_NORM_OUT, /* rms_out: the normalized c_kv [kv_tokens, L+pad] bf16 (compared); else 0 bytes */
    RK_CHECK_MASK,     /* the write mask [kv_tokens] bytes (a shape with mask_every); else 0 bytes */
    RK_CHECK_NBUF
};
typedef struct rk_check_buf {
    const char *name; /* "q", "k", "q_out", "kv_cache", "kv_rope_cache", "positions", "slots", "cos", "sin",
                         "k_scale", "q_scale", "norm_weight", "norm_out" */
    void *host;       /* start of the buffer */
    int64_t bytes;
    int compared; /* 1: rk_check compares it after the run (q, q_out, kv_cache): copy it back */
} rk_check_buf;
void rk_check_buffers(const rk_desc *v, const rk_args *a, rk_check_buf out[RK_CHECK_NBUF]);

/* Builds one variant in dir and checks it against the reference over the standard shapes:
 * T = 1, 3, 17, 300; H = 1, 16; padded and unpadded strides; negative slots; NaN/inf inputs;
 * both entry points. Returns 1 when every output byte matched; else 0 with the reason in why. */
int rk_host_check_variant(const rk_desc *v, const char *dir, char *why, size_t cap);

/* rk_check's run callback for a kernel built with the host compiler (rk_host_build): ctx is an
 * rk_host_run naming the kernel and its entry point (<name> or <name>_i64), called once over the grid. */
struct rk_host_kernel;
typedef struct rk_host_run {
    const struct rk_host_kernel *k;
    int wide;
} rk_host_run;
int rk_host_run_kernel(void *ctx, const rk_desc *v, const rk_args *a);

#endif
