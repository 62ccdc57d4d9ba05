// ---- the read-back op: cache rows gathered by slot into bf16 rows ---------------------------------------
// out[t] = the row of slots[t], t in [0, a.tokens), dequantized and rounded to bf16 (include/ropekv.h,
// ropekv_op). A lane per 16-byte chunk of the output row: L_CH latent chunks, then R_CH rope chunks
// (a.lanes = L_CH + R_CH: rk_launch_plan). Like the writer, a lane loads what it needs itself.
namespace rk {

// Eight fp8 bytes -> eight floats (exact).
RK_DEVICE f8 unpack_fp8(rk_v8 p) {
    f8 r;
    rk_unpack_fp8(p.x, &r.v[0], &r.v[1]);
    rk_unpack_fp8(p.x >> 16, &r.v[2], &r.v[3]);
    rk_unpack_fp8(p.y, &r.v[4], &r.v[5]);
    rk_unpack_fp8(p.y >> 16, &r.v[6], &r.v[7]);
    return r;
}

// The factor an fp8 value is scaled back with: the inverse of the writer's convention (mul_recip and div
// divided by k_scale, so multiply; mul multiplied, so divide); *divides says which.
RK_DEVICE float read_factor(const args &a, bool *divides) {
    *divides = KV == Kv::fp8_e4m3 && SCALE == Scale::mul;
    return KV == Kv::fp8_e4m3 && SCALE != Scale::none ? *a.k_scale : 1.0f;
}

// Chunk c of token t's output row.
template <class I>
RK_DEVICE void read_chunk(const args &a, I t, int c) {
    const bool rope = c >= L_CH;
    rk_u16 *dst = a.out_rope && rope ? (rk_u16 *)a.out_rope + t * (I)a.out_rope_st + (c - L_CH) * V
                                     : (rk_u16 *)a.out + t * (I)a.out_st + c * V;
    grid_sync(a);  // RK_PDL: the cache may still be written by the grid before
    const rk_i64 slot = load_index(a.slots, t, SLOT == Index::int64);
    if (slot < a.min_slot || slot >= a.kv_rows) {
        if (READ_NEG == ReadNeg::zero) rk_store16_out(dst, rk_v16{0, 0, 0, 0});
        return;
    }
    const rk_u8 *cache = (const rk_u8 *)(LAYOUT == Layout::split && rope ? a.kv_rope_cache : a.kv_cache);
    const I at = kv_at<I>(a, (I)slot, c);
    if (KV == Kv::bf16 || (KV == Kv::fp8_tile && rope)) {  // bf16 bits, copied
        rk_store16_out(dst, rk_load16(cache + at * (KV == Kv::bf16 ? 2 : 1)));
        return;
    }
    f8 y = unpack_fp8(rk_load8(cache + at));
    bool divides = false;
    float k = KV == Kv::fp8_tile ? *(const float *)(cache + (at - c * V) + SCALES_AT + 4 * (c / TILE_CH))
                                 : read_factor(a, &divides);
    if (KV == Kv::fp8_tile || SCALE != Scale::none)
        for (int i = 0; i < V; i++) y.v[i] = divides ? y.v[i] / k : y.v[i] * k;
    rk_store16_out(dst, pack_bf16(y));
}

// Chunk g of the whole launch.
template <class I>
RK_DEVICE void read_lane(const args &a, I g) {
    const I t = token_of<I>(a, g);
    read_chunk<I>(a, t, (int)(g - t * (I)a.lanes));
}

}  // namespace rk
