/* The launch checks of runtime/args_check.c. */
#ifndef RK_ARGS_CHECK_H
#define RK_ARGS_CHECK_H

#include "rk.h"
#include "ropekv.h"

/* A checked launch: the kernel's arguments (the caller's, with rk_launch_plan's fields), its size and
 * whether offsets can reach 2^31 elements (then the 64-bit entry runs). */
typedef struct rk_plan {
    int wide;
    int64_t total; /* chunks */
    int64_t blocks;
    int block; /* threads per block */
    rk_args args;
    /* The tensors the launch touches, in the order of rk_tensors(d): the row's index there, the caller's pointer and
     * the bytes the launch may read or write from it (its extent, overflow-checked). */
    int n_used;
    struct {
        int tensor;
        const void *ptr;
        int64_t bytes;
    } used[RK_TENSORS_MAX];
} rk_plan;

/* The caller's fields of rk_args from ropekv_args, copied by name (templates/args.h); the plan fields
 * are zero. */
void rk_args_from_api(const ropekv_args *a, rk_args *r);

/* Checks a against the rules of d (its counts, then each tensor of rk_tensors(d) the launch touches: pointer,
 * strides, alignment, extent; then no written tensor sharing a byte with another) and plans the launch. ROPEKV_OK,
 * or ROPEKV_ERR_NULL / SHAPE / STRIDE / ALIGN / ARG / ALIAS with the field named in err. Pure: reads nothing but its
 * arguments. */
ropekv_status rk_args_check(const rk_desc *d, const ropekv_args *a, rk_plan *pl, rk_err *err);

/* The scales a launch divides or multiplies by (k_scale, q_scale: the ones the kernel reads) are positive finite
 * float32 values: read from memory, so only where it is the caller's (the host backend, at launch; a GPU's would
 * mean waiting for the device). ROPEKV_ERR_ARG naming the scale otherwise. */
ropekv_status rk_args_scales_check(const rk_desc *d, const ropekv_args *a, rk_err *err);

#endif
