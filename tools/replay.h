/* `ropekv-gen replay FILE`: a dump file (runtime/dump.h, docs/dump.md) run again and compared with the reference. */
#ifndef RK_REPLAY_H
#define RK_REPLAY_H

#include <stdio.h>

/* Exit statuses of rk_replay. */
enum {
    RK_REPLAY_SAME = 0,    /* every backend reproduced the launch: every byte equal to the reference (or the same
                              refusal) */
    RK_REPLAY_DIFFERS = 1, /* a byte differs from the reference, or the status differs from the dump's */
    RK_REPLAY_USAGE = 2,
    RK_REPLAY_REFUSED = 3, /* the file is refused (its ropekv_status named), or the launch cannot be rebuilt */
};

/* Replays the dump at path on each backend of backends ("host", "cuda", "hip"; n of them), or with n == 0 on the host
 * backend and then on the GPU the automatic choice finds, if any. Reports to out (the first differing byte of each
 * tensor that differs, by tensor and offset). Returns an RK_REPLAY_* status. */
int rk_replay(const char *path, const char *const *backends, int n, FILE *out);

#endif
