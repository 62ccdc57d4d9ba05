/* The ROPEKV_* environment variables the library reads: one table (env.c) naming each with its kind,
 * default and range, and the parsers every reader goes through. An invalid value is either a warning
 * on stderr (once per variable and value) and the default, or, where a default would surprise (a
 * backend other than the one asked for: the choices), an error of the caller's.
 * The tools' variables (ROPEKV_CLANG, ROPEKV_LLVM_SUFFIX) and the Python binding's (ROPEKV_LIB) are
 * read where they are used, not here. Thread-safe. */
#ifndef RK_ENV_H
#define RK_ENV_H

#include <stddef.h>

typedef enum rk_env_id {
    RK_ENV_BACKEND,         /* choice: hip cuda host (invalid: an error) */
    RK_ENV_TARGET,          /* text */
    RK_ENV_CACHE_DIR,       /* text */
    RK_ENV_CACHE_RO,        /* text: read-only cache layers, ':'-separated */
    RK_ENV_DISABLE_CACHE,   /* flag, default 0 */
    RK_ENV_LOG,             /* flag, default 0 */
    RK_ENV_PDL,             /* flag, default 1 */
    RK_ENV_PDL_PREFETCH,    /* flag, default 0 */
    RK_ENV_FORCE_I64,       /* flag, default 0 */
    RK_ENV_COMPILE_TIMEOUT, /* seconds, 0..RK_COMPILE_TIMEOUT_MAX, default RK_COMPILE_TIMEOUT_DEFAULT */
    RK_ENV_NVRTC,           /* text: library paths for dlopen */
    RK_ENV_HIPRTC,
    RK_ENV_LIBCUDA,
    RK_ENV_LIBHIP,
    RK_ENV_HIPRTC_VERSION, /* version: MAJOR.MINOR */
    RK_ENV_DUMP,           /* text: the dump directory (runtime/dump.h) */
    RK_ENV_DUMP_WHEN,      /* text: which launches are dumped (rk_dump_policy_parse: invalid is an error) */
    RK_ENV_DUMP_MAX_BYTES, /* text: the most bytes of one dump (rk_dump_policy_parse: invalid is an error) */
    RK_ENV_COUNT
} rk_env_id;

#define RK_COMPILE_TIMEOUT_DEFAULT 120
#define RK_COMPILE_TIMEOUT_MAX (86400 * 365)

/* The variable's name ("ROPEKV_LOG"). */
const char *rk_env_name(rk_env_id id);
/* Its value when set and not empty, else NULL (every kind). */
const char *rk_env_text(rk_env_id id);
/* A flag: 1, true, yes, on / 0, false, no, off (any case); unset or invalid: the default. */
int rk_env_flag(rk_env_id id);
/* A number: a decimal integer in the variable's range, whole string; unset or invalid: the default. */
long rk_env_number(rk_env_id id);
/* A choice: the index of the value in the variable's list; -1 when unset; -2 when invalid, with why
 * ("ROPEKV_BACKEND=gpu: expected one of: hip cuda host"): the caller's error, no warning. */
int rk_env_choice(rk_env_id id, char *why, size_t cap);
/* A version MAJOR.MINOR: 1 with *major, *minor set; 0 when unset or invalid (the caller's default). */
int rk_env_version(rk_env_id id, int *major, int *minor);

/* Reads every flag, number and version of the table, so an invalid one is warned about (once) when a
 * context is created rather than when it is first used. */
void rk_env_warn_invalid(void);

#endif
