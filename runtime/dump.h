/* Replayable bug reports: the launches a policy chooses, written as files of the dump format (docs/dump.md), and
 * the format's reader (`ropekv-gen replay`, tests/fuzz/fuzz_dump.c).
 *
 * A dump file, every number little endian, every string a u32 length and that many bytes (no NUL; a length past
 * its field's limit or past the end of the file is refused):
 *   magic "RKDUMP\0\0" (8 bytes), u32 format version (RK_DUMP_FORMAT), u32 reserved (0)
 *   strings: library version, backend, device target, arch row, variant key, kernel name, spec name, record name
 *            ("" for none), the spec's source text (the text the kernel was described from)
 *   u32 x 8: the variant's kv, q, positions, slots, q_dtype, layout, op, norm
 *   u32 reason (rk_dump_reason), u32 the launch's status (ROPEKV_OK, or the argument check's error),
 *   u64 the kernel's launch number (1: its first), string: the check's message ("" for ROPEKV_OK)
 *   u32 n_args, then n_args x (string: a ropekv_args field, u32 kind: 0 int64 / 1 pointer, i64 value)
 *   u32 n_tensors, then n_tensors x (string: the ropekv_args field of its pointer, u32 access, u64 bytes: its extent,
 *       u32 form, then
 *         form 0 (whole; every tensor but the caches): the bytes
 *         form 1 (rows; the caches kv_cache and kv_rope_cache): u32 row bytes, u32 tail bytes, u64 n_rows,
 *             n_rows x u64 row (the slots in [min_slot, kv_rows) the launch's slots name, increasing), then
 *             n_rows x (the row's bytes, its page tail's bytes))
 *   32 bytes: SHA-256 of every byte before it; nothing after it. */
#ifndef RK_DUMP_H
#define RK_DUMP_H

#include <stddef.h>
#include <stdint.h>

#include "args_check.h"
#include "rk.h"
#include "ropekv.h"

#define RK_DUMP_FORMAT 2u
#define RK_DUMP_MAX_BYTES_DEFAULT ((int64_t)256 << 20) /* ropekv_options.dump_max_bytes' default */
#define RK_DUMP_ARGS_MAX 64                            /* args fields a dump may hold */
#define RK_DUMP_ROW_BYTES_MAX (1 << 20)                /* bytes of a cache row in form 1 */
#define RK_DUMP_TAIL_BYTES_MAX 255                     /* bytes of a page tail (rk_record_check's limit) */

/* Which launches are dumped (ropekv_options.dump_when, $ROPEKV_DUMP_WHEN) and how large a dump may be. */
typedef struct rk_dump_policy {
    int first;         /* each kernel's first launch */
    int fail;          /* every launch whose argument check fails */
    int64_t every;     /* a kernel's launches every, 2 every, ...; 0: none */
    int64_t max_bytes; /* a dump file larger than this is not written */
} rk_dump_policy;

/* Parses when ("first", "fail", "every:N", comma-separated; NULL: "first") and max_bytes (a decimal number of
 * bytes >= 1; NULL: RK_DUMP_MAX_BYTES_DEFAULT). ROPEKV_OK, or ROPEKV_ERR_ARG with the reason in why. */
ropekv_status rk_dump_policy_parse(const char *when, const char *max_bytes, rk_dump_policy *p, char *why, size_t cap);

/* Why a launch is dumped: the policy's part that chose it. */
typedef enum rk_dump_reason { RK_DUMP_NOT = 0, RK_DUMP_FIRST, RK_DUMP_FAIL, RK_DUMP_EVERY } rk_dump_reason;
const char *rk_dump_reason_name(rk_dump_reason r); /* "first", "fail", "every"; "" */

/* Whether launch number n (1: the kernel's first) is dumped: failed, a launch whose argument check failed (counted
 * apart: n is then the kernel's number of such launches). */
rk_dump_reason rk_dump_chosen(const rk_dump_policy *p, uint64_t n, int failed);

/* One tensor of a dump: its ropekv_args field, how the kernel touches it, its extent from the pointer, and its bytes:
 * all of them (form 0), or the rows the launch can touch (form 1, the caches). */
typedef struct rk_dump_tensor {
    char name[32];
    ropekv_tensor_access access;
    uint64_t bytes; /* the extent the launch's args give it */
    int rows;       /* 1: form 1 (rows), 0: form 0 (whole) */
    uint32_t row_bytes, tail_bytes;
    uint64_t n_rows;               /* form 1: rows in row_list, increasing, each in [min_slot, kv_rows) */
    const unsigned char *row_list; /* form 1: n_rows u64 (rk_dump_row) */
    const unsigned char *data;     /* rk_dump_parse: inside the parsed buffer; form 1: row after row, each its
                                    * row_bytes then its tail_bytes */
    uint64_t stored;               /* bytes at data: bytes (form 0), n_rows x (row_bytes + tail_bytes) (form 1) */
} rk_dump_tensor;

/* Row i of a form 1 tensor (i < n_rows). */
static inline int64_t rk_dump_row(const rk_dump_tensor *t, uint64_t i) {
    uint64_t v = 0;
    for (int b = 7; b >= 0; b--) v = v << 8 | t->row_list[8 * i + (uint64_t)b];
    return (int64_t)v;
}

/* The rows of a cache tensor (rule RK_ROWS_CACHE) that the launch can touch, and where they lie (templates/kernel.hip
 * row_at, row_byte, tail_byte; gen/ref.c row_parts): */
/* the bytes of a slot's row in t (its packed width) and of its page tail (kv_cache of the paged layout with a
 * page-tail record; else 0) */
void rk_dump_row_shape(const rk_desc *d, const rk_tensor *t, int64_t *row_bytes, int64_t *tail_bytes);
/* the byte offsets from t's pointer of slot's row and of its page tail (0 when it has none) under a (slot >= 0): 0,
 * or -1 when an offset passes 2^62 */
int rk_dump_row_at(const rk_desc *d, const rk_tensor *t, const ropekv_args *a, int64_t slot, int64_t *row,
                   int64_t *tail);
/* the slots of the n slot values at slots (int64 when wide, else int32) that lie in [min_slot, kv_rows), increasing,
 * each once, into *rows (malloc'd; NULL when none) and their number into *n: 0, or -1 out of memory */
int rk_dump_slot_rows(const void *slots, int64_t n, int wide, int64_t min_slot, int64_t kv_rows, int64_t **rows,
                      int64_t *n_rows);

/* A dump's contents. */
typedef struct rk_dump {
    char library[64], backend[16], device_target[96], arch[RK_NAME_MAX], key[192], name[224], spec[64], record[64];
    const char *spec_text; /* rk_dump_parse: inside the parsed buffer, not NUL-terminated */
    size_t spec_len;
    ropekv_variant v; /* v.spec points at spec, v.record at record (NULL when "") */
    rk_dump_reason reason;
    ropekv_status status;
    uint64_t launch;
    char message[2048];
    ropekv_args args; /* every field the dump holds; pointers as the launch had them (addresses, never read) */
    int n_tensors;
    rk_dump_tensor t[RK_TENSORS_MAX];
} rk_dump;

/* Parses a dump held in memory, reading only buf[0 .. n): ROPEKV_OK with *out filled (pointing into buf), else
 * ROPEKV_ERR_DUMP (bad magic, truncated, a length past the end or over its field's limit, a NUL or control
 * character in a name, an enum or count out of range, an unknown or repeated args field or tensor, a form other
 * than the tensor's, a row list with a row outside [min_slot, kv_rows) or not increasing, trailing bytes, a
 * checksum that does not match) or ROPEKV_ERR_VERSION (another format version), with the field named in err. */
ropekv_status rk_dump_parse(const unsigned char *buf, size_t n, rk_dump *out, rk_err *err);

/* Where dumps go: a directory checked when the context is made and before every write. */
typedef struct rk_dumper {
    int on;
    char dir[4096];
    uint64_t dev, ino; /* the directory checked: every write insists on it */
    rk_dump_policy policy;
} rk_dumper;

/* Creates dir (0700) when missing and checks it: not a symbolic link, a directory, owned by this user, not
 * writable by group or others, not a system directory. 0 with d->on set, or -1 with the reason in why. */
int rk_dumper_open(rk_dumper *d, const char *dir, const rk_dump_policy *p, char *why, size_t cap);

/* What the launch path hands the writer. */
typedef struct rk_dump_launch {
    const rk_desc *d;
    const ropekv_variant *v;
    const char *spec_text;
    size_t spec_len;
    const char *backend, *device_target;
    const ropekv_args *a;
    const rk_plan *pl; /* the checked launch (its tensors are dumped), or NULL: the check failed, no tensor is */
    ropekv_status status;
    const char *message;
    uint64_t launch;
    rk_dump_reason reason;
    /* Copies n bytes of device memory at src to dst (synchronously, in the launch's stream order). 0, or -1 with
     * the reason in why. */
    int (*read)(void *ctx, void *dst, const void *src, size_t n, char *why, size_t cap);
    void *read_ctx;
} rk_dump_launch;

/* Writes one dump file into d's directory atomically (a temporary file created O_EXCL | O_NOFOLLOW with mode 0600,
 * written, synced, then linked under its name, never replacing a file): <key, '/' as '_'>-<launch>-<reason>-<pid>-
 * <n>.rkdump. 0 with its path in path, or -1 with the reason in why (the directory replaced or unusable, the dump
 * larger than the policy's max_bytes, a device read failing, out of memory, a write failing); nothing is left. */
int rk_dump_write(const rk_dumper *d, const rk_dump_launch *l, char *path, size_t path_cap, char *why, size_t cap);

#endif
