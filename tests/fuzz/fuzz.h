/* Shared by the fuzz targets (tests/fuzz/fuzz_*.c) and their replay driver (tests/fuzz/replay.c).
 *
 * A target is one LLVMFuzzerTestOneInput. Built with clang -fsanitize=fuzzer it runs under libFuzzer
 * (scripts/fuzz.sh); built with the normal compiler and replay.c it is a plain program that feeds
 * every file of the corpus and regression directories to the same function (a CTest test).
 * FUZZ_CHECK is the targets' oracle: unlike assert it stays on in release builds. */
#ifndef RK_FUZZ_H
#define RK_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond, ...)                                                        \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                            \
            fputc('\n', stderr);                                                     \
            abort();                                                                 \
        }                                                                            \
    } while (0)

#endif
