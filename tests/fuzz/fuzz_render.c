/* Fuzz target: template rendering with arbitrary placeholder maps.
 *
 * Input: TEMPLATE \0 name=value \0 name=value ... (a binding without '=' has an empty value). The
 * result of rk_render is compared with a straightforward reference renderer: both must agree on
 * success or failure, and on success produce the same bytes. Whatever the input, rk_render fails
 * only with ROPEKV_ERR_RENDER and a message, and a successful render leaves no "${" that no value brought
 * (rendering is one pass: "$${x}{" with x empty gives "${" by design, never a second substitution). */
#include <string.h>

#include "fuzz.h"
#include "rk.h"

#define MAX_BINDINGS 72 /* rk_render takes at most 64: the fuzzer may go past that */

static int is_name_char(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'; }

/* The documented rules, written the obvious way: 0 and out filled, or -1. */
static int reference(const char *tpl, size_t len, const rk_binding *b, int n, rk_buf *out) {
    char used[MAX_BINDINGS] = {0};
    if (n > 64) return -1;
    size_t i = 0;
    while (i < len) {
        if (tpl[i] != '$' || i + 1 >= len || tpl[i + 1] != '{') {
            FUZZ_CHECK(rk_buf_put(out, tpl + i, 1) == ROPEKV_OK, "out of memory");
            i++;
            continue;
        }
        size_t j = i + 2;
        while (j < len && is_name_char(tpl[j])) j++;
        if (j == len || tpl[j] != '}' || j == i + 2) return -1;
        int k = 0;
        while (k < n && !(strlen(b[k].name) == j - i - 2 && memcmp(b[k].name, tpl + i + 2, j - i - 2) == 0)) k++;
        if (k == n) return -1;
        used[k] = 1;
        FUZZ_CHECK(rk_buf_put(out, b[k].value, strlen(b[k].value)) == ROPEKV_OK, "out of memory");
        i = j + 1;
    }
    for (int k = 0; k < n; k++)
        if (!used[k]) return -1;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* one NUL-terminated copy, cut into the template and the bindings */
    char *buf = malloc(size + 1);
    FUZZ_CHECK(buf != NULL, "out of memory");
    if (size) memcpy(buf, data, size); /* libFuzzer may pass NULL for an empty input */
    buf[size] = '\0';
    size_t tlen = strlen(buf);
    rk_binding b[MAX_BINDINGS] = {{0}};
    int n = 0, value_may_form = 0; /* a value could make "${" */
    for (size_t at = tlen + 1, next; at <= size && n < MAX_BINDINGS; at = next) {
        next = at + strlen(buf + at) + 1;
        char *eq = strchr(buf + at, '=');
        b[n].name = buf + at;
        b[n].value = eq ? eq + 1 : "";
        if (eq) *eq = '\0';
        /* a value with '$' or '{' can bring "${"; so can an empty one, between a literal '$' and '{' */
        value_may_form |= strpbrk(b[n].value, "${") != NULL || b[n].value[0] == '\0';
        n++;
    }

    rk_buf out = {0}, want = {0};
    rk_err err = {.code = (ropekv_status)-1};
    int rc = rk_render(buf, tlen, b, n, &out, &err);
    int ref = reference(buf, tlen, b, n, &want);
    if (rc == ROPEKV_OK) {
        FUZZ_CHECK(ref == 0, "rk_render accepted what the rules refuse");
        FUZZ_CHECK(out.p != NULL && out.len == want.len && (out.len == 0 || memcmp(out.p, want.p, out.len) == 0),
                   "output differs from the reference (%zu vs %zu bytes)", out.len, want.len);
        FUZZ_CHECK(out.p[out.len] == '\0', "output not terminated");
        if (!value_may_form) FUZZ_CHECK(strstr(out.p, "${") == NULL, "a placeholder survived");
    } else {
        FUZZ_CHECK(ref != 0, "rk_render refused what the rules accept: %s", err.msg);
        FUZZ_CHECK(rc == ROPEKV_ERR_RENDER && err.code == ROPEKV_ERR_RENDER, "code %d", rc);
        FUZZ_CHECK(memchr(err.msg, '\0', sizeof err.msg) && err.msg[0], "message");
    }
    rk_buf_free(&out);
    rk_buf_free(&want);
    free(buf);
    return 0;
}
