/* Fuzz target: AMDGPU code objects read from arbitrary bytes (tools/amdgpu_meta.h).
 *
 * The input goes to rk_amd_read as a code object (an ELF, or a clang offload bundle) and to rk_mp_skip as
 * MessagePack. The reader must fail with a reason, or succeed with every count within its limit, every
 * string terminated inside its field, each kernel found again by its name, the processor name the one
 * e_flags gives, and the same result on a second read; target compatibility must answer 0 with a reason
 * or 1. rk_mp_skip must fail with a reason or consume at most the input. ASan sees every read outside
 * the input. The seed corpus (tests/fuzz/corpus/amdmeta) holds clang-22 code objects (v4 and v5, wave 64
 * and 32, with and without hidden arguments, xnack+), one in an offload bundle, and a bare metadata note. */
#include <string.h>

#include "amdgpu_meta.h"
#include "fuzz.h"

static int terminated(const char *s, size_t cap) { return memchr(s, '\0', cap) != NULL; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static rk_amd_code c, again;
    char why[256] = "";
    if (rk_amd_read(data, size, &c, why, sizeof why) != 0) {
        FUZZ_CHECK(why[0] != '\0' && terminated(why, sizeof why), "a failed read without a reason");
    } else {
        FUZZ_CHECK(c.n_kernels >= 0 && c.n_kernels <= RK_AMD_MAX_KERNELS, "%d kernels", c.n_kernels);
        FUZZ_CHECK(terminated(c.mach, sizeof c.mach) && terminated(c.target, sizeof c.target), "unterminated");
        const char *mach = rk_amd_mach_name(c.e_flags);
        FUZZ_CHECK(strcmp(c.mach, mach ? mach : "") == 0, "mach '%s' for e_flags 0x%x", c.mach, c.e_flags);
        for (int i = 0; i < c.n_kernels; i++) {
            const rk_amd_kernel *k = &c.kernels[i];
            FUZZ_CHECK(terminated(k->name, sizeof k->name) && terminated(k->symbol, sizeof k->symbol),
                       "kernel %d: unterminated name", i);
            FUZZ_CHECK(k->name[0] && k->symbol[0], "kernel %d without a name or symbol", i);
            FUZZ_CHECK(k->n_args >= 0 && k->n_args <= RK_AMD_MAX_ARGS, "kernel %d: %d args", i, k->n_args);
            for (int j = 0; j < k->n_args; j++)
                FUZZ_CHECK(terminated(k->args[j].value_kind, sizeof k->args[j].value_kind) &&
                               terminated(k->args[j].name, sizeof k->args[j].name),
                           "kernel %d arg %d: unterminated", i, j);
            const rk_amd_kernel *f = rk_amd_kernel_find(&c, k->name);
            FUZZ_CHECK(f && strcmp(f->name, k->name) == 0, "kernel '%s' not found by its name", k->name);
        }
        FUZZ_CHECK(rk_amd_read(data, size, &again, why, sizeof why) == 0 && memcmp(&c, &again, sizeof c) == 0,
                   "a second read differs");
        why[0] = '\0';
        const int ok = rk_amd_target_compatible(&c, "gfx942:sramecc+:xnack-", why, sizeof why);
        FUZZ_CHECK(ok == 1 || (ok == 0 && why[0]), "target_compatible: %d, '%s'", ok, why);
    }
    rk_mp m;
    why[0] = '\0';
    rk_mp_init(&m, data, size, why, sizeof why);
    if (rk_mp_skip(&m) != 0) FUZZ_CHECK(why[0] != '\0', "a failed skip without a reason");
    else FUZZ_CHECK(m.p >= data && m.p <= data + size && m.depth == 0, "skip ended outside the input");
    return 0;
}
