/* For tests that check a kernel got through the public API against the CPU reference: rk_check hands
 * its callback gen's rk_args; this turns them into the public ropekv_args (the caller's fields carry the
 * same names, templates/args.h) and launches. */
#ifndef ROPEKV_TESTS_API_LAUNCH_H
#define ROPEKV_TESTS_API_LAUNCH_H

#include <string.h>

#include "rk.h"
#include "ropekv.h"

static inline void rk_test_public_args(const rk_args *a, ropekv_args *p) {
    memset(p, 0, sizeof *p);
#define RK_TEST_COPY_(type, name)                                       \
    _Static_assert(sizeof p->name == sizeof a->name, "field " #name);    \
    memcpy(&p->name, &a->name, sizeof p->name);
    RK_ARGS_CALLER(RK_TEST_COPY_)
#undef RK_TEST_COPY_
}

/* rk_check's run callback; kernel is a ropekv_kernel *. */
static inline int rk_test_launch(void *kernel, const rk_desc *v, const rk_args *a) {
    (void)v;
    ropekv_args p;
    rk_test_public_args(a, &p);
    return ropekv_launch(kernel, &p, NULL);
}

#endif
