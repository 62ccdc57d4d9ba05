/* clang++ offline (a subprocess, independent of the installed ROCm): kernel source -> AMDGPU code
 * object for every AMD target. The build matrix's compiler for the targets hiprtc cannot build. */
#ifndef RK_CLANG_H
#define RK_CLANG_H

#include <stddef.h>

#include "proc.h"
#include "rk.h"

/* The clang++ used: $ROPEKV_CLANG, else clang++-22, else clang++ (looked up in PATH once). */
const char *rk_clang_path(void);
/* 0 with the first line of `clang++ --version` in version (may be NULL), else -1 with the reason. */
int rk_clang_available(char *version, size_t cap);
/* The compiler's identity, "clang <x.y.z>" (the version line when it names no version); "" when
 * clang cannot be run. */
const char *rk_clang_id(void);
/* Runs clang++ -x hip --cuda-device-only --no-gpu-bundle-output --offload-arch=<target> -nogpuinc
 * -nogpulib -O3 -mcode-object-version=5 -ffp-contract=off -std=c++17 plus extra (space separated)
 * on src in a private temporary directory (removed afterwards), no shell involved. The compiler's
 * output is appended to log (may be NULL).
 * ROPEKV_OK, ROPEKV_ERR_COMPILE, ROPEKV_ERR_TARGET (clang does not know the target id), ROPEKV_ERR_IO (no clang, or
 * temporary files failed) or ROPEKV_ERR_NOMEM. */
int rk_clang_compile(const char *src, size_t len, const char *target, const char *extra, rk_codeobj *out, rk_buf *log);

#endif
