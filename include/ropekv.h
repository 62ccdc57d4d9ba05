/* ropekv: fused MLA RoPE + KV-cache write kernels, JIT-compiled for the device at hand.
 *
 * One launch writes, for every token t and query head h,
 *     q_out[t, h] = cat(q_nope[t, h], rope(q_pe[t, h]))                  (bf16, or fp8 e4m3 with a q_scale)
 * and, where min_slot <= slots[t] < kv_rows (min_slot is 0 unless set), the token's KV-cache row
 *     kv_cache[slots[t]] = cat(k_nope[t], rope(k_pe[t]))                 (bf16 or fp8 e4m3)
 * with the dimensions, rope style, tables and fp8 policy of a model spec (specs/<model>.lua).
 *
 * Typical use (error handling shortened):
 *     ropekv_ctx *ctx;  ropekv_create(&ctx, NULL);          // picks HIP, CUDA or the host
 *     ropekv_variant v = {.spec = "deepseek_v3", .kv = ROPEKV_KV_FP8_E4M3};
 *     ropekv_kernel *k; ropekv_kernel_get(ctx, &v, &k);      // compiled once, then cached
 *     ropekv_launch(k, &args, stream);                       // per layer, per step
 *     ropekv_kernel_release(k); ropekv_destroy(ctx);
 *
 * Thread safety: every function may be called from many threads at once on the same context,
 * except ropekv_destroy (no other call on that context may be running or follow, though kernels
 * still held stay usable: see ropekv_kernel_get) and
 * ropekv_last_error (the text of the most recent failure on the context, whichever thread made it;
 * read it from the thread that got the error, before that thread's next call, when several threads
 * can fail at once). Handles are opaque; destroy/release functions accept NULL. */
#ifndef ROPEKV_H
#define ROPEKV_H

#include <stddef.h>
#include <stdint.h>

/* ROPEKV_VERSION_MAJOR/MINOR/PATCH/STRING/NUMBER: generated from the version in CMakeLists.txt and
 * installed beside this header. */
#include "ropekv_version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ROPEKV_API marks the functions libropekv exports; the rest of the library is hidden. The library's
 * own build defines ROPEKV_BUILDING; for users (shared or static library) the macro is empty. */
#if defined(ROPEKV_BUILDING) && defined(__GNUC__)
#define ROPEKV_API __attribute__((visibility("default")))
#else
#define ROPEKV_API
#endif

/* The library's version at run time (compare with the macros to detect a header/library mismatch). */
ROPEKV_API int ropekv_version_number(void);
ROPEKV_API const char *ropekv_version_string(void);

/* ---- status codes: gapped by area ---------------------------------------------------------------- */
#define ROPEKV_STATUS_LIST(X)                                                                       \
    X(ROPEKV_OK, 0, "success")                                                                      \
    X(ROPEKV_ERR_SPEC_SYNTAX, 100, "the spec file does not parse (or is a binary chunk)")           \
    X(ROPEKV_ERR_SPEC_RUNTIME, 101, "the spec file raised an error while running")                  \
    X(ROPEKV_ERR_SPEC_LIMIT, 102, "the spec exceeded a cap: text size, memory, instructions, time") \
    X(ROPEKV_ERR_SPEC_INVALID, 103, "the spec file failed validation")                              \
    X(ROPEKV_ERR_SPEC_TARGET, 104, "the spec names an unknown target")                              \
    X(ROPEKV_ERR_NO_SPEC, 110, "no spec of this name is loaded")                                    \
    X(ROPEKV_ERR_UNSUPPORTED, 120, "the spec does not provide this configuration")                  \
    X(ROPEKV_ERR_RENDER, 200, "the kernel template failed to render")                               \
    X(ROPEKV_ERR_COMPILE, 300, "the device compiler failed")                                        \
    X(ROPEKV_ERR_TARGET, 301, "the compiler cannot build for this target")                          \
    X(ROPEKV_ERR_CACHE, 400, "the code-object cache failed")                                        \
    X(ROPEKV_ERR_BACKEND, 500, "the backend is not available on this machine")                      \
    X(ROPEKV_ERR_DEVICE, 501, "a driver call failed")                                               \
    X(ROPEKV_ERR_LAUNCH, 502, "the kernel launch failed")                                           \
    X(ROPEKV_ERR_NULL, 600, "a required pointer is NULL")                                           \
    X(ROPEKV_ERR_SHAPE, 601, "tokens, kv_tokens, heads, max_pos or kv_rows out of range")           \
    X(ROPEKV_ERR_STRIDE, 602, "a stride lets rows overlap or is negative")                          \
    X(ROPEKV_ERR_ALIGN, 603, "a pointer or stride breaks the alignment the vector path needs")      \
    X(ROPEKV_ERR_ARG, 604, "an invalid argument")                                                   \
    X(ROPEKV_ERR_VERSION, 605, "a struct's size is invalid or newer than this library knows")       \
    X(ROPEKV_ERR_ALIAS, 606, "a tensor the kernel writes shares bytes with another tensor")         \
    X(ROPEKV_ERR_NOMEM, 900, "out of memory")                                                       \
    X(ROPEKV_ERR_IO, 901, "an I/O error")                                                           \
    X(ROPEKV_ERR_DUMP, 902, "a dump file is truncated, corrupt or not a dump (docs/dump.md)")

typedef enum ropekv_status {
#define ROPEKV_ENUM_(name, value, msg) name = value,
    ROPEKV_STATUS_LIST(ROPEKV_ENUM_)
#undef ROPEKV_ENUM_
} ropekv_status;

/* "ROPEKV_ERR_ALIGN" and a one-line description; "ROPEKV_UNKNOWN" for other values. Thread-safe. */
ROPEKV_API const char *ropekv_status_name(ropekv_status s);
ROPEKV_API const char *ropekv_status_message(ropekv_status s);

/* ---- context --------------------------------------------------------------------------------------- */
typedef struct ropekv_ctx ropekv_ctx;
typedef struct ropekv_kernel ropekv_kernel;

typedef enum ropekv_backend {
    ROPEKV_BACKEND_AUTO = 0, /* $ROPEKV_BACKEND if set, else an AMD device, else NVIDIA, else host */
    ROPEKV_BACKEND_HIP,      /* hiprtc + HIP module API (libamdhip64, loaded at run time) */
    ROPEKV_BACKEND_CUDA,     /* nvrtc + CUDA driver API (libnvrtc, libcuda, loaded at run time) */
    ROPEKV_BACKEND_HOST,     /* the system C++ compiler; runs on the CPU (pointers are host memory) */
} ropekv_backend;

/* ---- structs that grow ------------------------------------------------------------------------------
 * The structs a caller fills (ropekv_options, ropekv_variant, ropekv_args) begin with their size, so that a later
 * version can add fields without breaking programs built against this header. A struct only grows at its end, and
 * every field's zero is its default; the library reads the first `size` bytes of the caller's struct and takes the
 * fields past them as zero:
 *   0             what zero-initializing gives: the struct as version 0.1 has it (every field of this header).
 *                 Fields a later version adds are read only when size covers them: set size = sizeof(the struct),
 *                 e.g. with ROPEKV_SIZED(ropekv_options), to use them.
 *   sizeof(...)   of this header's struct or an older one: the fields up to there.
 *   larger        (a newer header's struct): accepted when every byte past the library's struct is zero (fields
 *                 this library does not know, left at their defaults); otherwise ROPEKV_ERR_VERSION, as is a size
 *                 too small to hold the size field itself.
 * So a program keeps working with a newer library, and one that sets only what an older library knows with an
 * older one. */
#define ROPEKV_SIZED(type) .size = sizeof(type) /* ropekv_args a = {ROPEKV_SIZED(ropekv_args), .tokens = n}; */

typedef struct ropekv_options {
    size_t size; /* 0, or sizeof(ropekv_options) (see "structs that grow") */
    ropekv_backend backend;
    int device;            /* device ordinal for hip/cuda */
    const char *target;    /* NULL: the device's (e.g. "gfx942:sramecc+:xnack-", "sm_90"); $ROPEKV_TARGET */
    const char *cache_dir; /* NULL: $ROPEKV_CACHE_DIR, else $XDG_CACHE_HOME/ropekv, else ~/.cache/ropekv.
                                  A system directory (/, /etc, /usr, ...) is refused with a warning */
    int disk_cache;        /* 0: default (on unless $ROPEKV_DISABLE_CACHE=1); 1 on; -1 off */
    int log;               /* 0: default ($ROPEKV_LOG=1 logs to stderr); 1 on; -1 off */
    int pdl;               /* programmatic dependent launch where the target's row enables it (sm_90):
                                  a launch overlaps the tail of the kernel before it in the stream, which
                                  it waits for before touching memory. 0: default (on unless
                                  $ROPEKV_PDL=0); 1 on; -1 off */
    int pdl_prefetch;      /* with pdl: read positions, slots and the cos/sin tables before waiting for
                                  the kernel before in the stream (hides one dependent memory round trip
                                  per call). Only correct when that kernel does not write them: engines
                                  write positions and slots once per step and never touch the tables.
                                  0: default (off unless $ROPEKV_PDL_PREFETCH=1); 1 on; -1 off */
    const char *cache_ro;  /* read-only cache layers: directories separated by ':' (like $PATH), searched in
                                  order before cache_dir and never written (a cache baked into an image, a
                                  bundle of `ropekv-gen build --bundle`). Entries are validated as disk
                                  entries are; an invalid one is skipped (a cache_reject), never removed. A
                                  layer must be owned by this user or root and not writable by group or
                                  others. Used with disk_cache off too. NULL: $ROPEKV_CACHE_RO */
    int compile_only;      /* 1: no device. The context compiles kernels for `target` (required) with the
                                  backend's compiler (nvrtc, hiprtc; the host's C++ compiler) and writes them
                                  to its disk cache under the keys a device context of that target computes,
                                  without loading them (how `ropekv-gen build --bundle` makes bundles on a
                                  machine without the GPU); the backend must be chosen (options.backend or
                                  $ROPEKV_BACKEND), and the target too (or $ROPEKV_TARGET). Its kernels
                                  can be got, prepared and described, never launched (ROPEKV_ERR_BACKEND).
                                  0 (or -1, off as for the options above): a device context */
    /* Replayable bug reports (docs/dump.md): a directory that chosen launches are written to, one file each (the
     * variant, the spec's text, every ropekv_args field and the bytes of every tensor the launch touches, copied
     * back from the device), which `ropekv-gen replay FILE` runs again and compares with the reference. Created
     * 0700 when missing; like the cache directory it must be owned by this user, not writable by group or others
     * and not a system directory. Dumping never changes a launch's result: a dump that cannot be written is a
     * warning on stderr. NULL: $ROPEKV_DUMP (unset: no dumps). Read when size covers it. */
    const char *dump;
    /* Which launches: a comma-separated list of "first" (each kernel's first launch), "fail" (every launch whose
     * argument check fails) and "every:N" (a kernel's launches N, 2N, ...). NULL: $ROPEKV_DUMP_WHEN, else "first".
     * An invalid list fails ropekv_create with ROPEKV_ERR_ARG. */
    const char *dump_when;
    /* The most bytes one dump file may have; a launch whose dump would be larger is not dumped (a warning).
     * 0: $ROPEKV_DUMP_MAX_BYTES, else 256 MiB; negative, or an invalid variable: ROPEKV_ERR_ARG. */
    int64_t dump_max_bytes;
} ropekv_options;

/* opts may be NULL (all defaults). On failure *out is NULL and the status says why; details of a
 * failed create go to stderr only when logging is on, except an invalid $ROPEKV_BACKEND (ROPEKV_ERR_ARG), a
 * target (options.target, $ROPEKV_TARGET) too long or holding control characters (ROPEKV_ERR_ARG), and
 * an unusable library named by $ROPEKV_LIBHIP or $ROPEKV_LIBCUDA (ROPEKV_ERR_BACKEND, not a reason to choose
 * another backend), always named there. With logging on, each backend the automatic choice passes over is
 * logged with the reason. */
ROPEKV_API ropekv_status ropekv_create(ropekv_ctx **out, const ropekv_options *opts);
/* Gives up the handle; the context is freed now, or when its last kernel is released. */
ROPEKV_API void ropekv_destroy(ropekv_ctx *ctx);

/* Details of the most recent failure on ctx: compiler log, path, Lua traceback. Never NULL. */
ROPEKV_API const char *ropekv_last_error(const ropekv_ctx *ctx);

/* "hip", "cuda" or "host", and the target kernels are built for. */
ROPEKV_API const char *ropekv_backend_name(const ropekv_ctx *ctx);
ROPEKV_API const char *ropekv_target(const ropekv_ctx *ctx);

/* Loads one more model spec at run time (a spec of the same name replaces the built-in one; its
 * kernels are rebuilt on next use). The file runs in the Lua sandbox once, here, never on launch. */
ROPEKV_API ropekv_status ropekv_load_spec(ropekv_ctx *ctx, const char *path);
/* The same from text in memory; file names the text in messages. Either refuses a spec of more than
 * 1 MiB (1048576 bytes) with ROPEKV_ERR_SPEC_LIMIT. */
ROPEKV_API ropekv_status ropekv_load_spec_text(ropekv_ctx *ctx, const char *file, const char *text, size_t len);

/* Counters of a context since its creation (monitoring, and tests of the cache). Thread-safe. */
typedef struct ropekv_stats {
    uint64_t memory_hits;   /* ropekv_kernel_get answered from the context */
    uint64_t disk_hits;     /* code objects loaded from the disk cache or a read-only layer */
    uint64_t compiles;      /* compiler runs */
    uint64_t cache_rejects; /* invalid disk entries removed (corrupt, truncated, foreign, not loadable), or
                               skipped in a read-only layer (also: owned by another user, writable by group
                               or others, or unreadable) */
} ropekv_stats;
ROPEKV_API ropekv_status ropekv_get_stats(const ropekv_ctx *ctx, ropekv_stats *out);

/* Removes every entry ropekv made in the context's cache directory (memory entries stay). */
ROPEKV_API ropekv_status ropekv_cache_clear(ropekv_ctx *ctx);

/* The directory of the disk cache (its writable layer) copied to out, cap bytes with the NUL: ctx's, as it was
 * opened, or an empty string where it has none (the disk cache off by its options or $ROPEKV_DISABLE_CACHE=1,
 * the directory refused); with ctx NULL the one a context of default options would choose ($ROPEKV_CACHE_DIR,
 * else $XDG_CACHE_HOME/ropekv, else ~/.cache/ropekv), an empty string with $ROPEKV_DISABLE_CACHE=1 or none of the
 * variables set. ROPEKV_ERR_NULL without out; ROPEKV_ERR_ARG (and out empty) where it does not fit in cap.
 * Thread-safe. */
ROPEKV_API ropekv_status ropekv_cache_dir(const ropekv_ctx *ctx, char *out, size_t cap);

/* ---- kernels -------------------------------------------------------------------------------------- */
/* The cache row format (docs/formats.md has the byte diagrams). Strides of an fp8 or fp8_tile cache count bytes.
 *   bf16       W bf16 values: the latent, then the rope part after RoPE
 *   fp8_e4m3   W fp8 bytes (the target's format), one per-tensor k_scale under the spec's `fp8` convention
 *   fp8_tile   the spec's `fp8_tile` row (DeepSeek-V3.2: 656 bytes): the latent in fp8 e4m3, each value divided by
 *              the scale of its tile of `tile` values (scale = max(amax(tile) / sat, FLT_MIN), optionally rounded up
 *              to a power of two); the L / tile scales as float32 at byte `scales_at`; the rope part in bf16 after
 *              RoPE at byte `rope_at`. No k_scale: the scales are the row's own. */
typedef enum ropekv_kv_dtype { ROPEKV_KV_BF16 = 0, ROPEKV_KV_FP8_E4M3, ROPEKV_KV_FP8_TILE } ropekv_kv_dtype;
typedef enum ropekv_q_form {
    ROPEKV_Q_ABSORBED = 0, /* q_out = cat(q_nope, rope(q_pe)) */
    ROPEKV_Q_ZERO_COPY,    /* q_nope already sits in q_out[..., :L]; only the rope tail is written */
    ROPEKV_Q_INPLACE,      /* rope(q_pe) written back into q_pe */
    ROPEKV_Q_NONE,         /* KV row only */
} ropekv_q_form;
typedef enum ropekv_index { ROPEKV_INDEX_INT64 = 0, ROPEKV_INDEX_INT32 } ropekv_index;
/* The dtype of the query output. fp8 is e4m3 in the target's format (FNUZ on gfx942, else OCP), made with
 * the spec's q_fp8 policy (scale convention, saturation, rope rounding) and ropekv_args.q_scale; strides
 * of an fp8 query output count bytes. Where each q form puts it:
 *   absorbed   q_out [T, H, W] fp8: fp8(q_nope) | fp8(rope(q_pe))
 *   zero_copy  q_out [T, H, W] fp8: only [..., L:] is written; [..., :L] holds the BMM's q_nope, already
 *              quantized with the same q_scale where it lies (by the BMM's epilogue)
 *   inplace    fp8(rope(q_pe)) over the first R bytes of each q_pe row: q_pe viewed as bytes, row (t, h)
 *              at byte 2 * (t * q_pe_st + h * q_pe_sh) (in torch: q_pe.view(float8)[..., :R])
 *   none       no query output: the fp8 choice makes the same kernel as bf16 */
typedef enum ropekv_q_dtype { ROPEKV_Q_BF16 = 0, ROPEKV_Q_FP8_E4M3 } ropekv_q_dtype;
/* Where a slot's KV row lies (the cache's own element strides; bytes for an fp8 cache). With B =
 * kv_block_size, slot s is entry s % B of block s / B:
 *   flat   row at kv_cache + s * kv_st                                              (rows of one stride)
 *   paged  row at kv_cache + (s / B) * kv_block_st + (s % B) * kv_st                ([blocks, B, W], vLLM)
 *   split  the latent part at kv_cache + (s / B) * kv_block_st + (s % B) * kv_st, the rope part at
 *          kv_rope_cache + (s / B) * kv_rope_block_st + (s % B) * kv_rope_st        (two caches: FlashInfer's
 *          [pages, B, L] and [pages, B, R]; or aiter's page-segmented blocks, the rope part of a block after
 *          its B latent rows: kv_rope_cache = kv_cache + B * L, the same block stride) */
typedef enum ropekv_kv_layout { ROPEKV_KV_FLAT = 0, ROPEKV_KV_PAGED, ROPEKV_KV_SPLIT } ropekv_kv_layout;

/* The kernel family:
 *   write  the fused RoPE + KV-cache write (and the query output), the op described at the top
 *   read   the read-back: out[t] = the row of slots[t] as bf16, t in [0, tokens), dequantized per the row format
 *          (fp8: the inverse of the spec's scale convention with *k_scale; fp8_tile: times the tile's scale) and
 *          rounded to bf16 (a bf16 row is copied bit for bit). A slot below min_slot (negative: padding) or at
 *          kv_rows and past writes zeros, or nothing when the spec's read.negative_slot is "skip". It reads the
 *          cache of the variant's kv dtype and layout; q form, positions and q dtype do not apply. */
typedef enum ropekv_op { ROPEKV_OP_WRITE = 0, ROPEKV_OP_READ } ropekv_op;

/* The fused kv_a RMSNorm of DeepSeek-V3 / Kimi-K2 MLA (write kernels of a spec with a `kv_norm` table): k_nope is the
 * raw projection output's c_kv, and the kernel normalizes each token's row before anything else uses it:
 *     r = 1 / sqrt(sum(x^2) / L + eps),  n = bf16(bf16(x * r) * w)   (the spec's rounding "twice"; "once": bf16(x * r * w))
 * in f32, w the spec's weight dtype (bf16 or f32) read from ropekv_args.norm_weight, the sum in the fixed order
 * docs/numerics.md defines (every backend follows it: results are bit-exact). The cache row is then written from
 * n exactly as the op without the norm writes it from a k_nope of n (fp8 scales and tile scales from n).
 *   none     no norm: k_nope is cached as it is
 *   rms      the normalized c_kv is cached
 *   rms_out  and also written to norm_out [Tkv, L] bf16 (prefill's up-projection reads it): every KV token's row,
 *            whatever its slot, but for a negative slot under the spec's negative_slot = skip_all */
typedef enum ropekv_norm { ROPEKV_NORM_NONE = 0, ROPEKV_NORM_RMS, ROPEKV_NORM_RMS_OUT } ropekv_norm;

/* Which kernel: zero-initialize, then set what differs from the defaults. */
typedef struct ropekv_variant {
    size_t size;        /* 0, or sizeof(ropekv_variant) (see "structs that grow") */
    const char *spec;   /* spec name, e.g. "deepseek_v3" (required) */
    ropekv_kv_dtype kv; /* cache dtype; fp8 uses the target's format (FNUZ on gfx942, else OCP) */
    ropekv_q_form q;
    ropekv_index positions;  /* dtype of positions[] */
    ropekv_index slots;      /* dtype of slots[] */
    ropekv_q_dtype q_dtype;  /* dtype of the query output (see ropekv_q_dtype) */
    ropekv_kv_layout layout; /* where the KV rows lie (see ropekv_kv_layout) */
    ropekv_op op;            /* write (the default) or read (see ropekv_op) */
    ropekv_norm norm;        /* write: the fused kv_a RMSNorm (see ropekv_norm); none by default */
    /* The cache row by its record's name (docs/formats.md, "Choosing a record"): NULL, the kv dtype chooses as
     * above; else one of the spec's rows, whose names are its kv dtypes' spellings ("bf16", "fp8_e4m3", "fp8_tile")
     * and the names of the records its `records` key lists ("fp8_ds_mla", "nvfp4"), and kv is ignored. A name the
     * spec does not have is ROPEKV_ERR_UNSUPPORTED naming the spec's rows; so is a record the kernels cannot write
     * yet (a per-token outer scale). A record's cache is bytes (uint8 rows of its row_bytes; in the split layout
     * kv_cache holds the bytes [0, split_at) and kv_rope_cache the rest); ropekv_kernel_param's "record",
     * "record_row_bytes", "record_split_at" and "record_tail_bytes" describe it. Read when size covers it. */
    const char *record;
} ropekv_variant;

/* The tensors of one launch. Pointers are device pointers (host memory for the host backend).
 * Strides are in elements of the tensor's dtype (bytes for an fp8 cache); the last dimension is
 * contiguous. L = kv_lora_rank, R = qk_rope_head_dim of the spec, W = L + R. T = tokens (query rows),
 * Tkv = the tokens with a KV row (kv_tokens; T unless set), P = max(T, Tkv). ropekv_kernel_tensor lists a kernel's
 * tensors with their shapes, strides and alignment.
 *
 * Aliasing: a tensor the kernel writes (q_out, kv_cache, kv_rope_cache, norm_out, out, out_rope, and q_pe of the
 * inplace form) may share no byte with another tensor the launch touches, or the launch is refused with
 * ROPEKV_ERR_ALIAS (on a GPU the kernel would race with itself: norm_out = k_nope, q_scale inside q_out, a cache over
 * k_nope). Tensors that are only read may overlap freely (q_nope and q_pe slices of one query, k_nope and k_pe slices
 * of the kv_a projection). The in-place forms are the q forms': zero_copy does not read q_nope (it already lies in
 * q_out[..., :L]; the pointer is not looked at), and inplace rewrites each q_pe row where it lies. Tensors whose
 * bytes interleave without sharing any are accepted where the rows of both repeat at one stride and each row of one
 * falls in the gap after a row of the other: aiter's page-segmented split cache (kv_rope_cache = kv_cache + B * L,
 * the same block stride), or norm_out and k_nope as the two halves of one [Tkv, 2L] buffer; other interleavings of a
 * written tensor are refused. */
#define ROPEKV_KV_TOKENS_NONE (-1) /* ropekv_args.kv_tokens: no token has a KV row */
typedef struct ropekv_args {
    size_t size;           /* 0, or sizeof(ropekv_args) (see "structs that grow") */
    int64_t tokens, heads; /* T >= 0, 1 <= H <= 65536 */
    const void *q_nope;
    int64_t q_nope_st, q_nope_sh; /* [T, H, L] bf16 (absorbed) */
    void *q_pe;
    int64_t q_pe_st, q_pe_sh; /* [T, H, R] bf16 (written by inplace) */
    void *q_out;
    int64_t q_out_st, q_out_sh; /* [T, H, W] bf16 or fp8 per q_dtype (absorbed, zero_copy) */
    const void *k_nope;
    int64_t k_nope_st; /* [Tkv, L] bf16 */
    const void *k_pe;
    int64_t k_pe_st; /* [Tkv, R] bf16 */
    void *kv_cache;
    int64_t kv_st, kv_rows;        /* rows of W; a slot >= kv_rows is skipped */
    const void *positions, *slots; /* [P] and [Tkv], int64 or int32 per the variant */
    const void *cos_sin;           /* f32_cat: [max_pos, R] f32, cos | sin; split layouts: cos [max_pos, R/2] */
    const void *sin;               /* split layouts: sin [max_pos, R/2] (f32 or bf16 per the spec); else NULL */
    int64_t max_pos;               /* rows of the tables; positions are clamped to [0, max_pos) */
    const float *k_scale;          /* fp8 cache with a scale convention: one float32 on the device */
    /* Padding as engines lay it out; zero (the default) means none. */
    int64_t kv_tokens;    /* KV rows for tokens [0, kv_tokens) only, query rows for [0, tokens): either may be the
                          larger (a slot list shorter than the batch, or queries padded past it). 0: tokens;
                          ROPEKV_KV_TOKENS_NONE: no KV row at all */
    int64_t min_slot;     /* slots below it are never written, whatever the inputs: 1 keeps a reserved dummy slot 0
                          untouched. 0: every slot >= 0 is written */
    const float *q_scale; /* fp8 query output with a scale convention: one float32 on the device */
    /* Paged and split layouts (ropekv_kv_layout): kv_rows counts slots (blocks x kv_block_size). */
    int64_t kv_block_size; /* entries (slots) per block, >= 1 */
    int64_t kv_block_st;   /* stride between blocks of kv_cache; kv_st is the stride between a block's entries */
    void *kv_rope_cache;   /* split: the rope parts, R wide */
    int64_t kv_rope_block_st, kv_rope_st; /* split: its block and entry strides */
    /* The read-back op (ROPEKV_OP_READ) reads tokens, slots [T], the cache fields above and k_scale (fp8), and
     * writes: */
    void *out;
    int64_t out_st; /* [T, W] bf16, or [T, L] (the latent parts) when out_rope is set */
    void *out_rope;
    int64_t out_rope_st; /* NULL: the rope parts go to out[:, L:W]; else [T, R] bf16 */
    /* The fused kv_a RMSNorm (variant norm rms, rms_out; NULL otherwise): */
    const void *norm_weight; /* [L], bf16 or f32 per the spec's kv_norm.weight */
    void *norm_out;
    int64_t norm_out_st; /* rms_out: [Tkv, L] bf16, the normalized c_kv */
    /* Padded query heads (q form absorbed): q_out holds q_heads rows per token, heads of them the model's, and the
     * rows [heads, q_heads) are written as zeros (an attention kernel that wants 64 or 128 heads reads a
     * tensor-parallel rank's 8 or 16). 0: heads. Read when size covers it. */
    int64_t q_heads; /* 0, or in [heads, 65536] */
    /* A write mask (write kernels): [Tkv] bytes (uint8 or bool), KV row t written only where write_mask[t] != 0,
     * beside min_slot and negative slots (the reserved and padding rows an engine never wants written, whatever its
     * slot mapping says). The query rows and norm_out do not look at it. NULL: every row. Read when size covers it. */
    const void *write_mask;
} ropekv_args;

/* Is this configuration supported, before anything is compiled? ROPEKV_OK, or the status that
 * ropekv_kernel_get / ropekv_launch would return, with the reason in why (may be NULL). args may
 * be NULL to ask about the variant alone; with args, every launch check runs too. */
ROPEKV_API ropekv_status ropekv_query(ropekv_ctx *ctx, const ropekv_variant *v, const ropekv_args *args, char *why,
                                      size_t why_cap);

/* The kernel for v on the context's target: from memory, else the disk cache, else compiled (once
 * per process even when many threads ask at once). Release with ropekv_kernel_release. What is built
 * here is the kernel's 32-bit-index entry; the 64-bit one, needed only when a launch's offsets into a per-token
 * tensor (the query, k_nope / k_pe, the outputs) reach 2^31 bytes (a cache's rows are addressed in 64 bits by both
 * entries: an engine-sized cache needs no 64-bit entry), is built (cache, then compiler) by ropekv_kernel_prepare
 * or by the first such launch.
 *
 * Lifetimes: a kernel reference keeps its context alive. ropekv_destroy with kernels still held
 * gives up the caller's handle only: the context's code, device and memory stay until the last
 * kernel is released, and those kernels still work (launch, prepare, info, name, release; their
 * errors are recorded on the context, which the caller can no longer read). Tear down in either
 * order; every kernel obtained must be released once, or the context is never freed. */
ROPEKV_API ropekv_status ropekv_kernel_get(ropekv_ctx *ctx, const ropekv_variant *v, ropekv_kernel **out);
ROPEKV_API void ropekv_kernel_release(ropekv_kernel *k);

/* Builds a kernel's entries now rather than on first need, so that nothing compiles later (e.g. during
 * CUDA/HIP graph capture, where a compile or module load would break the capture). entries is an OR of
 * the flags below; ROPEKV_ENTRY_32 is always built by ropekv_kernel_get, so prepare(k, ROPEKV_ENTRY_64)
 * is the useful call: it builds the 64-bit entry (disk cache, else the compiler) if it is not built
 * yet, and returns the build's status (ROPEKV_ERR_COMPILE with the compiler's log). Another bit is
 * ROPEKV_ERR_ARG. */
#define ROPEKV_ENTRY_32 1u /* the 32-bit-index entry */
#define ROPEKV_ENTRY_64 2u /* the 64-bit-index entry, for launches whose per-token offsets reach 2^31 bytes */
ROPEKV_API ropekv_status ropekv_kernel_prepare(ropekv_kernel *k, unsigned entries);

/* The extern "C" kernel name, which spells every parameter of the code (for logs and cache listings;
 * read the parameters with ropekv_kernel_param, not from the name). */
ROPEKV_API const char *ropekv_kernel_name(const ropekv_kernel *k);

/* ---- what a kernel is: its parameters, one at a time ------------------------------------------------
 * Every parameter of a kernel's code and launch, by index or by name, as text of one of these kinds: */
typedef enum ropekv_param_kind {
    ROPEKV_PARAM_TEXT = 0, /* a spelling of the spec files ("gptj", "fp8_e4m3"), a name, a key or the spec's words;
                              "" where the parameter does not apply to the kernel */
    ROPEKV_PARAM_INT,      /* a decimal integer */
    ROPEKV_PARAM_FLOAT,    /* a float32 as the shortest decimal that reads back as it ("448", "1e-06") */
    ROPEKV_PARAM_BOOL,     /* "true" or "false" */
} ropekv_param_kind;
/* The parameters, in this order (a later version may add others; a name keeps its meaning):
 *   name, key, spec, target   the kernel name (ropekv_kernel_name), the variant key
 *                             ("deepseek_v3/sm_90/fp8_e4m3/absorbed/pos=int64/slot=int64"), the spec's name, the row of
 *                             specs/archs.lua the code is built for
 *   kv_lora_rank, rope_dim    L and R (INT): rows are L + R wide
 *   rope, cos_sin             "gptj", "neox" or "none"; "f32_cat", "f32_split" or "bf16_split"
 *   positions, slots          the index dtypes, "int64" or "int32"
 *   kv                        the cache row format (ropekv_kv_dtype's spelling: "bf16", "fp8_e4m3", "fp8_tile")
 *   fp8_format                an fp8 or fp8_tile cache: the target's fp8 bytes, "ocp" or "fnuz"
 *   fp8_scale, fp8_saturate, fp8_rope_bf16_round
 *                             the cache's fp8 policy: scale convention ("none" for bf16 and fp8_tile), saturation
 *                             bound (FLOAT; 0 for bf16), the rope part rounded to bf16 first (BOOL)
 *   fp8_matches               the spec's word on whose convention its fp8 policy follows ("" if none)
 *   negative_slot             "skip_kv" or "skip_all"
 *   q, q_dtype                the q form ("absorbed", "zero_copy", "inplace", "none") and the query output's dtype
 *                             ("bf16" or "fp8_e4m3"; "bf16" for q form none)
 *   q_fp8_format              an fp8 query output: "ocp" or "fnuz"
 *   layout                    where the KV rows lie: "flat", "paged" or "split"
 *   q_fp8_scale, q_fp8_saturate, q_fp8_rope_bf16_round, q_fp8_matches
 *                             the query output's fp8 policy, as the cache's ("none", 0, false for a bf16 query)
 *   sanitize                  BOOL: NaN -> 0, +-inf -> +-max finite in the KV row
 *   op                        "write" or "read"
 *   fp8_tile, fp8_tile_scale, fp8_tile_scales_at, fp8_tile_rope_at
 *                             an fp8_tile row: values per tile (INT, else 0), "f32" or "pow2" (the tile scale's form:
 *                             as computed, or rounded up to a power of two), the byte offsets of the float32 tile
 *                             scales and of the bf16 rope part
 *   fp8_tile_readers          an fp8_tile row: the spec's word on which readers (engines' kernels) read it right
 *                             ("" if none): readers that take the scale as a power of two (E8M0) need pow2
 *   row_bytes                 INT: bytes of one cache row (of the latent part alone in the split layout)
 *   read_negative_slot        read: "zero" or "skip" (what a row without a valid slot gets)
 *   norm, norm_weight, norm_eps, norm_rounding, norm_matches
 *                             the fused kv_a RMSNorm ("none", "rms", "rms_out"), and with one its weight's dtype
 *                             ("bf16", "f32"), eps (FLOAT, else 0), rounding ("twice", "once") and the spec's word
 *   block, wide_block, wide_from
 *                             INT: threads per block of a launch of fewer than wide_from 16-byte chunks, of larger
 *                             launches, and that bound (a launch's chunks: tokens x lanes, docs/architecture.md)
 *   pdl                       BOOL: launches use programmatic dependent launch on this context
 * Text stays valid while the context lives. */

/* The number of parameters of k (0 for NULL). */
ROPEKV_API int ropekv_kernel_param_count(const ropekv_kernel *k);
/* Parameter i, 0 <= i < ropekv_kernel_param_count(k): its name, its value as text and its kind (each output may be
 * NULL). ROPEKV_OK, ROPEKV_ERR_NULL for a NULL k, ROPEKV_ERR_ARG for an i out of range; on failure the outputs are
 * left as they are. */
ROPEKV_API ropekv_status ropekv_kernel_param(const ropekv_kernel *k, int i, const char **name, const char **value,
                                             ropekv_param_kind *kind);
/* The same by name: ROPEKV_ERR_NULL for a NULL k or name, ROPEKV_ERR_ARG for a name the library does not have. */
ROPEKV_API ropekv_status ropekv_kernel_param_find(const ropekv_kernel *k, const char *name, const char **value,
                                                  ropekv_param_kind *kind);

/* Deprecated: ropekv_kernel_param reads the same parameters and the ones added since; this struct no longer grows.
 * What a kernel is: its variant and every parameter of its code and launch as of version 0.1. Strings are the
 * spellings of the spec files and stay valid while the context lives. */
typedef struct ropekv_kernel_params {
    const char *name;   /* the kernel name (ropekv_kernel_name) */
    const char *key;    /* "deepseek_v3/sm_90/fp8_e4m3/absorbed/pos=int64/slot=int64" */
    const char *spec;   /* spec name */
    const char *target; /* the row of specs/archs.lua the code is built for */
    int kv_lora_rank;   /* L */
    int rope_dim;       /* R (qk_rope_head_dim); rows are L + R wide */
    ropekv_kv_dtype kv;
    ropekv_q_form q;
    ropekv_index positions, slots;
    const char *rope;               /* "gptj", "neox" or "none" */
    const char *cos_sin;            /* "f32_cat", "f32_split" or "bf16_split" */
    const char *fp8_format;         /* fp8 cache: "ocp" or "fnuz" (the target's bytes); bf16 cache: "" */
    const char *fp8_scale;          /* "none", "mul_recip", "div" or "mul" ("none" for a bf16 cache) */
    float fp8_saturate;             /* fp8 saturation bound (0 for a bf16 cache) */
    int fp8_rope_bf16_round;        /* 1: the KV rope part is rounded to bf16 before the fp8 conversion */
    const char *fp8_matches;        /* the spec's word on whose convention its KV fp8 policy follows ("" if none) */
    ropekv_q_dtype q_dtype;         /* the query output's dtype (bf16 for q form none) */
    const char *q_fp8_format;       /* fp8 query output: "ocp" or "fnuz"; else "" */
    const char *q_fp8_scale;        /* fp8 query output: its scale convention; else "none" */
    float q_fp8_saturate;           /* fp8 query output: its saturation bound; else 0 */
    int q_fp8_rope_bf16_round;      /* 1: the query rope part is rounded to bf16 before the fp8 conversion */
    const char *q_fp8_matches;      /* the spec's word on whose convention its query fp8 policy follows */
    ropekv_kv_layout layout;        /* where the KV rows lie */
    const char *negative_slot;      /* "skip_kv" or "skip_all" */
    int sanitize;                   /* 1: NaN -> 0, +-inf -> +-max finite in the KV row */
    int block;                      /* threads per block of a launch of fewer than wide_from 16-byte chunks */
    int pdl;                        /* 1: launches use programmatic dependent launch on this context */
    ropekv_op op;                   /* write or read */
    const char *read_negative_slot; /* read: "zero" or "skip" (what a row without a valid slot gets) */
    int fp8_tile;                   /* fp8_tile row: values per tile; else 0 */
    const char *fp8_tile_scale;     /* fp8_tile row: "f32" (raw) or "pow2" (rounded up to a power of two); else "" */
    int fp8_tile_scales_at;         /* fp8_tile row: byte offset of the float32 tile scales */
    int fp8_tile_rope_at;           /* fp8_tile row: byte offset of the bf16 rope part */
    int row_bytes;                  /* bytes of one cache row (of the latent part alone in the split layout) */
    ropekv_norm norm;               /* the fused kv_a RMSNorm */
    const char *norm_weight;        /* norm: the weight's dtype, "bf16" or "f32"; else "" */
    float norm_eps;                 /* norm: eps; else 0 */
    const char *norm_rounding;      /* norm: "twice" or "once"; else "" */
    const char *norm_matches;       /* norm: the spec's word on whose RMSNorm this is ("" if none) */
    int wide_block;                 /* threads per block of a launch of at least wide_from chunks */
    int64_t wide_from;              /* (a launch's chunks: tokens x the lanes of a token, docs/architecture.md) */
} ropekv_kernel_params;
ROPEKV_API ropekv_status ropekv_kernel_info(const ropekv_kernel *k, ropekv_kernel_params *out);

/* ---- what a kernel takes: its tensors, one at a time ----------------------------------------------------
 * Every tensor a kernel reads or writes, as the argument checks of ropekv_launch see it: the ropekv_args field of its
 * pointer, whether the kernel reads or writes it, its dtype, its dimensions as symbols, the ropekv_args fields of
 * their strides, its alignment and when the launch needs it. A tensor the kernel never touches (q_nope of the
 * zero_copy form, the norm's tensors without a norm, kv_rope_cache outside the split layout, ...) is not listed.
 *
 * Dimension symbols (sizes[i] gives the number where the kernel fixes it, -1 where the launch does):
 *   T          tokens (query rows; the read-back op's rows)       Tkv   the tokens with a KV row (kv_tokens)
 *   P          max(T, Tkv)                                       H     heads
 *   max_pos    rows of the cos/sin tables                        kv_rows  the slots of a flat cache
 *   blocks, block_size   a paged or split cache: kv_rows / kv_block_size blocks of kv_block_size entries
 *   L, R, W    kv_lora_rank, qk_rope_head_dim, L + R             R/2   half the rope dimension (split tables)
 *   row_bytes  an fp8_tile row's bytes                           out_w W, or L when out_rope is given (read-back)
 *   1          one element (a scale)
 * Strides count elements of the tensor's dtype (bytes for fp8 and uint8). strides[i] names the ropekv_args field of
 * dimension i's stride, or is NULL where the tensor is packed there: the last dimension always, and every dimension of
 * a dense tensor (positions, slots, the cos/sin tables, the norm weight, the scales), whose stride is the product of
 * the sizes after it. */
typedef enum ropekv_tensor_access {
    ROPEKV_TENSOR_READ = 1,
    ROPEKV_TENSOR_WRITE = 2,
    ROPEKV_TENSOR_READ_WRITE = 3, /* q_pe of the inplace form: read, then rewritten in place */
} ropekv_tensor_access;
/* When a launch needs the tensor (its pointer may then not be NULL); otherwise the pointer is not read. */
typedef enum ropekv_tensor_need {
    ROPEKV_NEED_TOKENS = 0, /* the launch has rows: T > 0 (query rows; the read-back op's rows) */
    ROPEKV_NEED_KV_TOKENS,  /* it has KV rows: Tkv > 0 */
    ROPEKV_NEED_POSITIONS,  /* it has either: P = max(T, Tkv) > 0 */
    ROPEKV_NEED_ROPE,       /* it rotates a row: query rows of a q form that has a query, or KV rows */
    ROPEKV_NEED_OPTIONAL,   /* never: a choice (out_rope: where the read-back op puts the rope parts) */
} ropekv_tensor_need;
#define ROPEKV_TENSOR_RANK_MAX 3
typedef struct ropekv_tensor_info {
    size_t size;                 /* set by the caller: 0 or sizeof(ropekv_tensor_info); the library fills that much */
    const char *name;            /* the ropekv_args field of its pointer: "q_nope", "kv_cache", ... */
    ropekv_tensor_access access; /* read, written or both */
    ropekv_tensor_need need;     /* when a launch needs it */
    const char *dtype; /* "bf16", "f32", "fp8_e4m3" (the kernel's fp8_format bytes), "uint8" (an fp8_tile row's
                                    bytes), "int32" or "int64" */
    int elem_bytes;    /* bytes of one element */
    int rank;          /* dimensions, <= ROPEKV_TENSOR_RANK_MAX */
    const char *dims[ROPEKV_TENSOR_RANK_MAX];    /* symbols (above), outermost first */
    int64_t sizes[ROPEKV_TENSOR_RANK_MAX];       /* the size of a dimension the kernel fixes, -1 for a launch's count */
    const char *strides[ROPEKV_TENSOR_RANK_MAX]; /* the ropekv_args stride field of each dimension, or NULL (packed) */
    int align;                                   /* the pointer's alignment in bytes */
    int stride_multiple;                         /* strides are multiples of this many elements */
    const char *when; /* why it is needed, in words ("q form absorbed", "fp8 cache with a scale"); "" if plain */
} ropekv_tensor_info;

/* The number of tensors of k (0 for NULL). */
ROPEKV_API int ropekv_kernel_tensor_count(const ropekv_kernel *k);
/* Tensor i, 0 <= i < ropekv_kernel_tensor_count(k), into *out (out->size set by the caller). ROPEKV_OK,
 * ROPEKV_ERR_NULL for a NULL k or out, ROPEKV_ERR_ARG for an i out of range, ROPEKV_ERR_VERSION for an out->size that
 * is not 0 and smaller than the size field or larger than 4096; a size larger than the library's struct gets its
 * fields and zeros past them. Text stays valid while the context lives. */
ROPEKV_API ropekv_status ropekv_kernel_tensor(const ropekv_kernel *k, int i, ropekv_tensor_info *out);
/* The same by name: ROPEKV_ERR_NULL for a NULL k, name or out, ROPEKV_ERR_ARG for a tensor k does not take. */
ROPEKV_API ropekv_status ropekv_kernel_tensor_find(const ropekv_kernel *k, const char *name, ropekv_tensor_info *out);

/* The tensors of a family of kernels, without a context or a kernel (for bindings that declare an operation's
 * arguments before any kernel is built): every tensor some kernel of the write op with q form q, or of the read op (q
 * is then ignored), may take, over every spec, kv dtype, layout, q dtype, index dtype and norm, in ropekv_args' order.
 * access is written where some kernel writes the tensor; need is ROPEKV_NEED_OPTIONAL where some kernel of the family
 * does not take it (or the kernels' needs differ), else the kernels' own; what the kernels do not agree on is left empty: dtype "" (elem_bytes 0),
 * rank 0 (no dims or strides), align and stride_multiple 0, when "". sizes are -1 (the spec fixes them). Count: 0 for
 * an op or q outside the enums. ROPEKV_OK, ROPEKV_ERR_NULL for a NULL out, ROPEKV_ERR_ARG for an op, q or i out of
 * range, ROPEKV_ERR_VERSION as ropekv_kernel_tensor. Text is static. Thread-safe. */
ROPEKV_API int ropekv_family_tensor_count(ropekv_op op, ropekv_q_form q);
ROPEKV_API ropekv_status ropekv_family_tensor(ropekv_op op, ropekv_q_form q, int i, ropekv_tensor_info *out);

/* ---- cache records: what one token's row holds, byte for byte ----------------------------------------------
 * A record (docs/formats.md, "Cache records") is a list of segments over the row's logical values x[0, L + R) (the
 * latent, then the rope part after RoPE): each stores x[from, from + n) as one element type at a byte offset of the
 * row, optionally in blocks of `block` values sharing a scale, and names the readers (engines' kernels) it was
 * checked for. This is the description the kernels are specialized from and the library's reference encodes with,
 * for bindings that encode or decode rows themselves (ropekv.reference). Two sources:
 *   ropekv_kernel_record   a kernel's row: the record its variant names, or its kv dtype's row as a record
 *                          ("bf16", "fp8_e4m3": two e4m3 segments under the spec's fp8 policy, "fp8_tile")
 *   ropekv_record_at       the library's records (specs/records.lua), without a context, in the file's order
 * Text is static (the library's records) or lives as long as the kernel's context; handles likewise. The three
 * structs begin with their size, set by the caller: 0 or sizeof(the struct); the library fills that much (a larger
 * size gets zeros past its fields; one smaller than the size field, or over 4096, is ROPEKV_ERR_VERSION). */
typedef struct ropekv_record ropekv_record; /* opaque */
typedef struct ropekv_record_info {
    size_t size;
    const char *name; /* "fp8_ds_mla"; a kv dtype's row: its spelling */
    int L, R;         /* the geometry: the segments cover x[0, L + R) exactly once */
    int row_bytes;    /* bytes of a token's row */
    int split_at;     /* the split layout's cut (bytes [0, split_at) in kv_cache, the rest in kv_rope_cache); 0: none */
    int tail_bytes;   /* bytes of a token's page-tail part (page_tail scales); 0: none */
    const char *conv; /* how a "tensor" outer scale takes k_scale: "mul_recip" (x * (1 / k)), "div", "mul"; "none" */
    int segments;     /* the number of segments (ropekv_record_segment) */
    int readers;      /* the number of readers (ropekv_record_reader) */
    const char *matches; /* whose writer it matches, in the spec's words ("" if none) */
} ropekv_record_info;
typedef struct ropekv_record_segment {
    size_t size;
    int from, n;       /* it stores x[from, from + n) */
    const char *elem;  /* "bf16", "e4m3" (the target's fp8 bytes), "e2m1" (two a byte, the first in the low nibble) */
    int at;            /* byte offset of its first value in the row */
    int block;         /* values per block scale; 0: no block scales */
    const char *scale; /* the block scale's storage: "none", "f32", "ue8m0" (2^(b - 127), 0xff NaN), "e4m3" */
    const char *rule;  /* "exact", "pow2_up" (rounded up to a power of two), "up" (an e4m3 scale: the least e4m3
                          value >= s) or "exact_zero" (an e4m3 scale as exact, one that rounds to zero stored as 0x00
                          and its block's values times 0, where exact stores 0x01) */
    const char *scale_at; /* "inline" (at scales_at of the row) or "page_tail" (at scales_at of the token's tail) */
    int scales_at;
    float saturate_ocp, saturate_fnuz; /* the bound a block's amax maps to (s = max(amax / sat, floor)), or an
                                          unblocked fp8 segment's clamp, per fp8 byte format; 0 for bf16 */
    const char *outer; /* "none"; "tensor" (the launch's k_scale under conv); "token" (a float32 in the row) */
    int outer_at;      /* token: the byte offset of its float32 */
    int rope_bf16;     /* 1: rope values (index >= L) are rounded to bf16 before they are quantized */
    float floor; /* the least block scale before its rule (FLT_MIN unless the record names one); 0 without blocks */
    const char *block_conv; /* how a block's values take its decoded scale d: "div" (y / d), "mul_recip" (y * (1 / d));
                               "none" without blocks */
    int scales_interleave;  /* 0: block b's scale at place b; k: at (b % k) * (blocks / k) + b / k */
} ropekv_record_segment;
typedef struct ropekv_record_reader {
    size_t size;
    const char *name;  /* the engine kernel, e.g. "flashmla_sm100_sparse" */
    const char *scale; /* how it takes a block scale back: "exact", "bf16" (rounded to bf16), "pow2_down" */
} ropekv_record_reader;

/* k's record (NULL for a NULL k). A read kernel's record has the writer's facts canonical: saturate_ocp,
 * saturate_fnuz and rope_bf16 are 0 (they never change how a row reads back). */
ROPEKV_API const ropekv_record *ropekv_kernel_record(const ropekv_kernel *k);
/* The library's records: their number, and record i (NULL out of range). Thread-safe. */
ROPEKV_API int ropekv_record_count(void);
ROPEKV_API const ropekv_record *ropekv_record_at(int i);
/* The record, segment i of it, reader i of it. ROPEKV_OK, ROPEKV_ERR_NULL for a NULL r or out, ROPEKV_ERR_ARG for an
 * i out of range, ROPEKV_ERR_VERSION for a bad out->size. */
ROPEKV_API ropekv_status ropekv_record_describe(const ropekv_record *r, ropekv_record_info *out);
ROPEKV_API ropekv_status ropekv_record_segment_at(const ropekv_record *r, int i, ropekv_record_segment *out);
ROPEKV_API ropekv_status ropekv_record_reader_at(const ropekv_record *r, int i, ropekv_record_reader *out);

/* Validates args on the host (see ROPEKV_ERR_NULL..ROPEKV_ERR_ALIAS) and launches on stream (a
 * hipStream_t / CUstream, NULL for the default stream; ignored by the host backend, which runs
 * synchronously). Nothing is launched when a check fails. The first launch whose per-token offsets reach 2^31
 * bytes builds the kernel's 64-bit entry first, unless ropekv_kernel_prepare did; if that build fails it
 * returns its status (e.g. ROPEKV_ERR_COMPILE, with the compiler's log) and the next such launch
 * tries again. */
ROPEKV_API ropekv_status ropekv_launch(ropekv_kernel *k, const ropekv_args *args, void *stream);

#ifdef __cplusplus
}
#endif

#endif
