/* The launch ABI check: what an AMD kernel's metadata says it takes against what the runtime launches.
 * Every generated kernel takes one argument, the rk_args block of templates/args.h by value
 * (runtime/backend_hip.c: hipModuleLaunchKernel with params = {&copy}), in blocks of the arch row's
 * `block` threads (runtime/runtime.c). A compiler that laid the argument out otherwise, or compiled the
 * kernel for another wave size or a smaller work group, would read garbage or fail to launch on a GPU
 * no CI machine has; the metadata says so without one. Used by tools/build.c (test_matrix) and
 * `ropekv-gen inspect`. */
#ifndef RK_ABI_H
#define RK_ABI_H

#include <stddef.h>

#include "amdgpu_meta.h"
#include "rk.h"

/* Bytes of LDS a work group may use on the row's device: 160 KiB on gfx950, 64 KiB elsewhere. */
unsigned rk_amd_lds_bytes(const rk_arch *a);

/* One kernel of a code object of EI_ABIVERSION abi_version against the launch of d:
 *   - exactly one explicit (non-hidden_*) argument: by_value, at offset 0, sizeof(rk_args) bytes;
 *   - the hidden arguments after it, each inside .kernarg_segment_size and aligned to its size; from
 *     code object v5 (abi_version 3) on, each known one at its fixed place in the implicit block, which
 *     starts at sizeof(rk_args) rounded up to 8 (the kernel reads them there, the runtime writes them
 *     where the metadata says: the two places must be one);
 *   - .kernarg_segment_size >= sizeof(rk_args), .kernarg_segment_align >= _Alignof(rk_args);
 *   - .wavefront_size == d->arch->wave; d->arch->block <= .max_flat_workgroup_size and a multiple of the
 *     wave;
 *   - no private segment, no dynamic stack; .group_segment_fixed_size <= rk_amd_lds_bytes.
 * 1 when all hold; 0 with every broken rule in why ("; " between them). */
int rk_amd_abi_check_kernel(const rk_amd_kernel *k, int abi_version, const rk_desc *d, char *why, size_t cap);

/* The code object of d: built for d->arch (rk_amd_target_compatible with the row's name), holding both
 * entries, d->name and d->name "_i64", each passing rk_amd_abi_check_kernel. 1 or 0 as above. */
int rk_amd_abi_check(const rk_amd_code *c, const rk_desc *d, char *why, size_t cap);

/* One line of a kernel's launch facts, for `ropekv-gen inspect`: kernarg size and alignment, the
 * explicit argument, the hidden ones, wave, max flat work-group size. */
void rk_amd_abi_facts(const rk_amd_kernel *k, char *out, size_t cap);

#endif
