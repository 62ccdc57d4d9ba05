/* Bad inputs from the process around the library, on the host backend:
 *   - spec text: the 1 MiB cap on every entry point (exactly 1 MiB loads, one byte more is refused);
 * An optional argument is a cmocka test filter (e.g. "test_spec*"). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "proc.h"
#include "rk.h"
#include "ropekv.h"
#include "testutil.h"

#define PATH 4400

static char root[] = "/tmp/ropekv-test-inputs-XXXXXX";

static int setup(void **state) {
    (void)state;
    unsetenv("CXX");
    return rk_test_setup(root, NULL);
}

static int teardown(void **state) {
    (void)state;
    rk_test_remove_tree(root);
    return 0;
}

static void sub(char *out, const char *name) { snprintf(out, PATH, "%s/%s", root, name); }

/* ---- spec text: 1 MiB ----------------------------------------------------------------------------- */
/* A valid spec padded with a comment to n bytes (malloc'd). */
static char *spec_of_size(size_t n) {
    static const char head[] = "return { name = 'big_model', kv_lora_rank = 128, qk_rope_head_dim = 32, "
                               "rope = 'neox', cos_sin = 'f32_split', targets = { 'host' } }\n--";
    char *t = malloc(n);
    assert_non_null(t);
    assert_true(n > sizeof head);
    memcpy(t, head, sizeof head - 1);
    memset(t + sizeof head - 1, 'x', n - (sizeof head - 1));
    t[n - 1] = '\n';
    return t;
}

static void test_spec_size_cap(void **state) {
    (void)state;
    const size_t cap = (size_t)1 << 20;
    assert_int_equal(RK_SPEC_TEXT_MAX, cap);
    ropekv_ctx *c = rk_test_host_ctx(NULL);
    assert_non_null(c);
    char path[PATH];
    sub(path, "big.lua");
    for (size_t n = cap; n <= cap + 1; n++) {
        char *text = spec_of_size(n);
        ropekv_status want = n == cap ? ROPEKV_OK : ROPEKV_ERR_SPEC_LIMIT;
        /* from memory, from a file, and the loader under ropekv-gen --spec and the built-in specs */
        assert_int_equal(ropekv_load_spec_text(c, "big.lua", text, n), want);
        if (want != ROPEKV_OK) assert_non_null(strstr(ropekv_last_error(c), "larger than the 1048576 bytes"));
        assert_int_equal(rk_test_write_file(path, text, n, 0600), ROPEKV_OK);
        assert_int_equal(ropekv_load_spec(c, path), want);
        if (want != ROPEKV_OK) assert_non_null(strstr(ropekv_last_error(c), path));
        rk_err err = {0};
        rk_arch_table archs;
        size_t alen;
        const char *atext = rk_embedded("archs.lua", &alen);
        assert_int_equal(rk_archs_load("archs.lua", atext, alen, &archs, &err), ROPEKV_OK);
        rk_spec s;
        assert_int_equal(rk_spec_load("big.lua", text, n, &archs, &s, &err), want);
        free(text);
    }
    /* a file far over the cap is refused without reading it all */
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fseek(f, 64L << 20, SEEK_SET), 0);
    fputc('\n', f);
    fclose(f);
    assert_int_equal(ropekv_load_spec(c, path), ROPEKV_ERR_SPEC_LIMIT);
    ropekv_destroy(c);
}

int main(int argc, char **argv) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spec_size_cap),
    };
    if (argc > 1) cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests_name("inputs", tests, setup, teardown);
}
