/* Kernel sources emitted by ropekv-gen from specs/ at build time and compiled into the library
 * (cmake/builtin_run.cmake writes the table), so applications need no spec files at run time. */
#ifndef RK_BUILTIN_H
#define RK_BUILTIN_H

#include <stddef.h>

typedef struct rk_builtin {
    const char *key;       /* spec/target/kv/q/pos=.../slot=... */
    const char *spec;      /* spec name */
    const char *kernel;    /* extern "C" name; parses back with rk_name_parse */
    int block;             /* threads per block of the target's row */
    int chunks;            /* 16-byte output chunks per thread in large launches */
    long long chunks_from; /* launches of at least this many chunks are large */
    int pdl;               /* the source waits for the previous grid: launch with programmatic serialization */
    const char *source;    /* the emitted text */
    size_t len;
} rk_builtin;

extern const rk_builtin rk_builtins[];
extern const size_t rk_builtin_count;

#endif
