/* Fuzz target: launch arguments from arbitrary bytes (tests/support/args_oracle.h).
 *
 * The input is a draw (rk_draw_of_bytes): a variant, whether the read-back op splits its output and which norm
 * tensors are passed by mistake, every int64 size, stride and count of ropekv_args, and the seed of the buffers'
 * contents, positions and slots. The variants are the covering set's host variants (the first byte taken modulo
 * their count); on the host backend (each variant's kernel compiled on its first launch) the launch must be refused
 * with a named error and write nothing, or equal the CPU reference on copies; every buffer has guard pages on both
 * sides. The seed corpus (tests/fuzz/corpus/args, written by `test_args_random --seeds`) has a valid draw per
 * variant and near-overflow ones (CAMPAIGN.md). */
#include "args_oracle.h"
#include "fuzz.h"

static rk_oracle oracle;

/* The oracle (the catalog and the covering set's host variants) is opened once, before any input: its time is no
 * input's (libFuzzer's per-input timeout). */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    char why[2048];
    FUZZ_CHECK(rk_oracle_open(&oracle, why, sizeof why) == 0, "%s", why);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char why[2048];
    const rk_draw d = rk_draw_of_bytes(data, size);
    FUZZ_CHECK(rk_oracle_check(&oracle, &d, why, sizeof why) == 0, "variant %u: %s", d.variant, why);
    return 0;
}
