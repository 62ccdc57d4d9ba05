/* For tests that check a kernel got through the public API against the CPU reference: rk_check hands
 * its callback gen's rk_args; this turns them into the public ropekv_args and launches. */
#ifndef ROPEKV_TESTS_API_LAUNCH_H
#define ROPEKV_TESTS_API_LAUNCH_H

#include "rk.h"
#include "ropekv.h"

static inline void rk_test_public_args(const rk_args *a, ropekv_args *p) {
    *p = (ropekv_args){
        .tokens = a->tokens, .heads = a->heads,
        .q_nope = a->q_nope, .q_nope_st = a->q_nope_st, .q_nope_sh = a->q_nope_sh,
        .q_pe = (void *)a->q_pe, .q_pe_st = a->q_pe_st, .q_pe_sh = a->q_pe_sh,
        .q_out = a->q_out, .q_out_st = a->q_out_st, .q_out_sh = a->q_out_sh,
        .k_nope = a->k_nope, .k_nope_st = a->k_nope_st, .k_pe = a->k_pe, .k_pe_st = a->k_pe_st,
        .kv_cache = a->kv_cache, .kv_st = a->kv_st, .kv_rows = a->kv_rows,
        .positions = a->positions, .slots = a->slots, .cos_sin = a->cos, .sin = a->sin,
        .max_pos = a->max_pos, .k_scale = a->k_scale,
    };
}

/* rk_check's run callback; kernel is a ropekv_kernel *. */
static inline int rk_test_launch(void *kernel, const rk_desc *v, const rk_args *a) {
    (void)v;
    ropekv_args p;
    rk_test_public_args(a, &p);
    return ropekv_launch(kernel, &p, NULL);
}

#endif
