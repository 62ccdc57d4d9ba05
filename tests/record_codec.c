/* The reference codec of cache records (rk_record_encode / rk_record_decode, gen/record_codec.c) as a filter, for
 * the Python tests (python/tests/test_records.py) to compare ropekv.reference with byte for byte on every record of
 * specs/records.lua, those no kernel writes included (a per-token outer scale, R = 0). Not installed.
 *
 *   record_codec encode NAME FMT CONV K_SCALE SANITIZE   stdin: rows of L + R float32; stdout: row_bytes + tail_bytes
 *   record_codec decode NAME FMT CONV K_SCALE READER     stdin: row_bytes + tail_bytes; stdout: rows of L + R float32
 *
 * NAME a record of the built-in library, FMT ocp or fnuz, CONV a scale convention's spelling (mul_recip, div, mul,
 * none) or "-" for the record's own, K_SCALE a float, SANITIZE 0 or 1, READER a read scale's spelling (exact, bf16,
 * pow2_down) or "-" for ropekv's read op. Exit status 2 on bad arguments or input. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rk.h"

static int spelled(const rk_enum *e, const char *name) {
    for (int i = 0; i < e->n; i++)
        if (strcmp(e->v[i].name, name) == 0) return e->v[i].value;
    return -1;
}

int main(int argc, char **argv) {
    static rk_record_lib lib;
    rk_err err = {0};
    if (argc != 7 || rk_records_builtin(&lib, &err) != ROPEKV_OK) {
        fprintf(stderr, "usage: record_codec encode|decode NAME FMT CONV K_SCALE SANITIZE|READER %s\n", err.msg);
        return 2;
    }
    const rk_record *r = rk_record_find(&lib, argv[2]);
    const int fmt = spelled(&rk_fp8_enum, argv[3]);
    const int conv = strcmp(argv[4], "-") == 0 ? r ? r->conv : 0 : spelled(&rk_scale_enum, argv[4]);
    const float k = strtof(argv[5], NULL);
    if (!r || fmt < 0 || conv < 0) {
        fprintf(stderr, "record_codec: bad record, format or convention\n");
        return 2;
    }
    const int W = r->L + r->R, bytes = r->row_bytes + r->tail_bytes;
    float *x = malloc(sizeof(float) * (size_t)W);
    uint8_t *row = malloc((size_t)bytes);
    if (!x || !row) return 2;
    if (strcmp(argv[1], "encode") == 0) {
        const int sanitize = atoi(argv[6]);
        while (fread(x, sizeof(float), (size_t)W, stdin) == (size_t)W) {
            rk_record_encode(r, fmt, x, r->L, k, conv, sanitize, row, r->tail_bytes ? row + r->row_bytes : NULL);
            fwrite(row, 1, (size_t)bytes, stdout);
        }
    } else if (strcmp(argv[1], "decode") == 0) {
        rk_reader rd = {{0}, RK_RS_EXACT};
        if (strcmp(argv[6], "-") != 0) {
            const int s = spelled(&rk_read_scale_enum, argv[6]);
            if (s < 0) return 2;
            rd.scale = (rk_read_scale)s;
        }
        while (fread(row, 1, (size_t)bytes, stdin) == (size_t)bytes) {
            rk_record_decode(r, fmt, row, r->tail_bytes ? row + r->row_bytes : NULL, k, conv,
                             strcmp(argv[6], "-") == 0 ? NULL : &rd, x);
            fwrite(x, sizeof(float), (size_t)W, stdout);
        }
    } else {
        return 2;
    }
    free(x);
    free(row);
    return ferror(stdin) || ferror(stdout) ? 2 : 0;
}
