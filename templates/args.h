// The argument block every kernel takes by value: one field list for both sides. gen/rk.h includes
// this file (C: the launchers fill rk_args), and the generator puts it into every kernel source (C++:
// the kernel reads it), so the two layouts cannot drift; the checks below hold it to the ABI on each
// compiler (every field 8 bytes, in list order).
//
// Tensors (all strides in elements of the tensor's own dtype, bytes for an fp8 cache; only the last
// dimension of each tensor is contiguous):
//   q_nope [T,H,L] bf16   q_pe [T,H,R] bf16   q_out [T,H,L+R] bf16 (zero_copy: only [...,L:] written)
//   k_nope [K,L] bf16     k_pe [K,R] bf16     kv_cache rows of L+R (bf16 or fp8 bytes), or with the
//   split layout the latent parts (L) in kv_cache and the rope parts (R) in kv_rope_cache; the layouts'
//   addressing is in include/ropekv.h (ropekv_kv_layout)
//   positions [max(T,K)], slots [K] (int32 or int64 per variant); cos_sin / sin tables per the spec's layout:
//     f32_cat: cos_sin = [max_pos, R] f32 (cos | sin halves), sin unused;
//     f32_split / bf16_split: cos_sin = cos [max_pos, R/2], sin [max_pos, R/2].
//   k_scale: one float32 on the device (fp8 cache with a scale), else unused; q_scale the same for an
//   fp8 query. An fp8 query's q_out strides count bytes; the in-place form writes its fp8 row over the
//   first R bytes of the q_pe row.
//   out [T, W] bf16 (or [T, L] and out_rope [T, R]): the read-back op's rows (include/ropekv.h, ropekv_op).
//   norm_weight [L] bf16 or f32 per the spec's kv_norm ([W] with a norm over the whole head); norm_out [K, L] bf16
//   (include/ropekv.h, ropekv_norm).
//   q_heads: the query rows q_out holds per token, >= heads (the launcher resolves 0 to heads); the rows
//   [heads, q_heads) are written as zeros (padded heads).
//   write_mask: NULL, or [K] bytes: KV row t is written only where write_mask[t] != 0.
//   T = tokens: query rows [0, T); K = kv_tokens: KV rows [0, K); min_slot: slots below it are never
//   written.
//   (The launcher passes kv_tokens as a count: ropekv_args' 0 and ROPEKV_KV_TOKENS_NONE are resolved.)
// The caller's fields carry the names of the public ropekv_args fields, which are copied by name.
#ifndef RK_ARGS_H
#define RK_ARGS_H

// clang-format off
#define RK_ARGS_CALLER(F)      \
    F(const void *, q_nope)    \
    F(const void *, q_pe)      \
    F(void *, q_out)           \
    F(const void *, k_nope)    \
    F(const void *, k_pe)      \
    F(void *, kv_cache)        \
    F(const void *, positions) \
    F(const void *, slots)     \
    F(const void *, cos_sin)   \
    F(const void *, sin)       \
    F(const float *, k_scale)  \
    F(rk_i64, tokens)          \
    F(rk_i64, heads)           \
    F(rk_i64, max_pos)         \
    F(rk_i64, q_nope_st)       \
    F(rk_i64, q_nope_sh)       \
    F(rk_i64, q_pe_st)         \
    F(rk_i64, q_pe_sh)         \
    F(rk_i64, q_out_st)        \
    F(rk_i64, q_out_sh)        \
    F(rk_i64, k_nope_st)       \
    F(rk_i64, k_pe_st)         \
    F(rk_i64, kv_st)           \
    F(rk_i64, kv_rows)         \
    F(rk_i64, kv_tokens)       \
    F(rk_i64, min_slot)        \
    F(const float *, q_scale)  \
    F(rk_i64, kv_block_size)   \
    F(rk_i64, kv_block_st)     \
    F(void *, kv_rope_cache)   \
    F(rk_i64, kv_rope_block_st) \
    F(rk_i64, kv_rope_st)      \
    F(void *, out)             \
    F(rk_i64, out_st)          \
    F(void *, out_rope)        \
    F(rk_i64, out_rope_st)     \
    F(const void *, norm_weight) \
    F(void *, norm_out)        \
    F(rk_i64, norm_out_st)     \
    F(rk_i64, q_heads)         \
    F(const void *, write_mask)

// Filled by rk_launch_plan (gen/desc.c) from the description and the shape:
//   chunks         16-byte chunks per thread of this launch (1 .. the row's chunks)
//   early_release  pdl rows: 1 lets the next grid launch once this one has started, 0 when its blocks
//                  exit (early only when threads take one chunk each: a multi-chunk launch that fits
//                  the GPU at once would have the next grid's blocks packed unevenly beside it)
//   prefetch       pdl rows: 1 reads positions, slots and cos/sin before waiting for the previous
//                  grid (ropekv_options.pdl_prefetch), 0 waits before any access
//   lanes          lanes (16-byte chunks) per token group (templates/kernel.hip, chunk())
//   lanes_mul, lanes_shift: g / lanes == (g * lanes_mul) >> lanes_shift for 0 <= g < 2^31, so the
//                  32-bit entry divides without a divide (rk_div_magic)
//   kv_group       tokens a lane group covers: 1, or in a KV-only launch of at least the row's chunks_from chunks
//                  (throughput, not latency, bounds it) the kernel's RK_KV_GROUP (rk_kv_group)
//   grid_groups    token groups the grid covers, lanes lanes each: max(tokens, kv_tokens) tokens in groups of
//                  kv_group
//   block_mul, block_shift: slot / kv_block_size the same way (paged and split layouts)
//   block_gap, rope_block_gap: kv_block_st - kv_block_size * kv_st (and the rope cache's), modulo 2^64: a slot's
//                  row is slot * kv_st + (slot / kv_block_size) * block_gap; 0 for blocks of contiguous rows, whose
//                  rows need no division
#define RK_ARGS_PLAN(F)      \
    F(rk_i64, chunks)        \
    F(rk_i64, early_release) \
    F(rk_i64, prefetch)      \
    F(rk_i64, lanes)         \
    F(rk_i64, lanes_mul)     \
    F(rk_i64, lanes_shift)   \
    F(rk_i64, kv_group)      \
    F(rk_i64, grid_groups)   \
    F(rk_i64, block_mul)     \
    F(rk_i64, block_shift)   \
    F(rk_i64, block_gap)     \
    F(rk_i64, rope_block_gap)
// clang-format on

#define RK_ARGS(F) RK_ARGS_CALLER(F) RK_ARGS_PLAN(F)

#define RK_ARG_FIELD_(type, name) type name;
typedef struct rk_args {
    RK_ARGS(RK_ARG_FIELD_)
} rk_args;
#undef RK_ARG_FIELD_

// The ABI: field i at byte 8 * i, 8 * (number of fields) bytes in all. Every field being 8 bytes and
// the whole being 8 bytes a field already fixes the offsets (members are laid out in declaration order);
// where the compiler has __builtin_offsetof (not nvrtc) the offsets are checked one by one as well.
#define RK_ARG_INDEX_(type, name) RK_ARG_AT_##name,
enum rk_arg_index { RK_ARGS(RK_ARG_INDEX_) RK_ARG_COUNT };
#undef RK_ARG_INDEX_
#ifdef __cplusplus
#define RK_LAYOUT_CHECK_ static_assert
#else
#define RK_LAYOUT_CHECK_ _Static_assert
#endif
#if defined(__CUDACC_RTC__)
#define RK_ARG_CHECK_(type, name) RK_LAYOUT_CHECK_(sizeof(type) == 8, "rk_args layout: " #name);
#else
#define RK_ARG_CHECK_(type, name)                                                                    \
    RK_LAYOUT_CHECK_(sizeof(type) == 8 && __builtin_offsetof(rk_args, name) == 8 * RK_ARG_AT_##name, \
                     "rk_args layout: " #name);
#endif
RK_ARGS(RK_ARG_CHECK_)
RK_LAYOUT_CHECK_(sizeof(rk_args) == 8 * RK_ARG_COUNT, "rk_args layout: size");
#undef RK_ARG_CHECK_
#undef RK_LAYOUT_CHECK_

#endif
