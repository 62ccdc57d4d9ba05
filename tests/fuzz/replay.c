/* Replays inputs through a fuzz target without libFuzzer: every regular file of every directory
 * named on the command line (or a file named directly), in name order, goes to the target's
 * LLVMFuzzerTestOneInput in a buffer of exactly its size. A directory that does not exist is
 * skipped (a target with no regressions yet has none); no input at all is an error.
 * usage: replay_<target> DIR_OR_FILE... */
#include <dirent.h>
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static long replayed;

static void replay_file(const char *path) {
    FILE *f = fopen(path, "rb");
    FUZZ_CHECK(f != NULL, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    FUZZ_CHECK(fstat(fileno(f), &st) == 0, "cannot inspect %s", path);
    size_t n = (size_t)st.st_size;
    uint8_t *buf = malloc(n ? n : 1);
    FUZZ_CHECK(buf != NULL, "out of memory for %s", path);
    FUZZ_CHECK(fread(buf, 1, n, f) == n, "cannot read %s", path);
    fclose(f);
    fprintf(stderr, "%s\n", path); /* the last name printed is the input that crashed */
    LLVMFuzzerTestOneInput(buf, n);
    free(buf);
    replayed++;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void replay_dir(const char *dir) {
    DIR *d = opendir(dir);
    FUZZ_CHECK(d != NULL, "cannot open %s: %s", dir, strerror(errno));
    char **names = NULL;
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        names = realloc(names, (n + 1) * sizeof *names);
        FUZZ_CHECK(names != NULL, "out of memory");
        size_t len = strlen(dir) + strlen(e->d_name) + 2;
        names[n] = malloc(len);
        FUZZ_CHECK(names[n] != NULL, "out of memory");
        snprintf(names[n], len, "%s/%s", dir, e->d_name);
        n++;
    }
    closedir(d);
    if (n) qsort(names, n, sizeof *names, by_name);
    for (size_t i = 0; i < n; i++) {
        struct stat st;
        if (stat(names[i], &st) == 0 && S_ISREG(st.st_mode)) replay_file(names[i]);
        free(names[i]);
    }
    free(names);
}

/* A target's one-time setup, as libFuzzer calls it before any input (where the target has one). */
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

int main(int argc, char **argv) {
    if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "%s: not found, skipped\n", argv[i]);
            continue;
        }
        if (S_ISDIR(st.st_mode)) replay_dir(argv[i]);
        else replay_file(argv[i]);
    }
    printf("%ld inputs replayed without a failure\n", replayed);
    return replayed > 0 ? 0 : 1;
}
