// ---- the read-back op: cache rows gathered by slot into bf16 rows ---------------------------------------
// out[t] = the row of slots[t], t in [0, a.tokens), dequantized and rounded to bf16 (include/ropekv.h,
// ropekv_op). A lane per 16-byte chunk of the output row (two for an fp8_tile latent in large launches:
// READ_PAIRS below): the latent lanes, then R_CH rope lanes (a.lanes: rk_launch_plan). Like the writer, a lane loads
// what it needs itself.
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

// fp8_tile rows may pair latent chunks (16 fp8 bytes in one load: the row is 16-byte aligned, and both halves
// lie in one tile): a launch the plan makes paired has a.lanes = L_CH / 2 + R_CH (rk_read_pairs, gen/desc.c).
constexpr bool READ_PAIRS = KV == Kv::fp8_tile && L_CH % 2 == 0 && TILE_CH % 2 == 0;

// Eight fp8 values of chunk c of the row at cache + row (c < L_CH), dequantized (k: read_factor's).
RK_DEVICE f8 dequant8(rk_v8 p, const rk_u8 *row, int c, float k, bool divides) {
    f8 y = unpack_fp8(p);
    if (KV == Kv::fp8_tile) k = *(const float *)(row + SCALES_AT + 4 * (c / TILE_CH));
    if (KV == Kv::fp8_tile || SCALE != Scale::none)
        for (int i = 0; i < V; i++) y.v[i] = divides ? y.v[i] / k : y.v[i] * k;
    return y;
}

// Lane j of token t's output row: output chunks c .. c + n - 1 (a row is ln latent lanes, then R_CH rope lanes).
template <class I>
RK_DEVICE void read_chunk(const args &a, I t, int j) {
    const bool paired = READ_PAIRS && a.lanes != L_CH + R_CH;
    const int ln = paired ? L_CH / 2 : L_CH;
    const bool rope = j >= ln;
    const int c = rope ? j - ln + L_CH : paired ? 2 * j : j, n = rope || !paired ? 1 : 2;
    rk_u16 *dst = a.out_rope && rope ? (rk_u16 *)a.out_rope + t * (I)a.out_rope_st + (c - L_CH) * V
                                     : (rk_u16 *)a.out + t * (I)a.out_st + c * V;
    grid_sync(a);  // RK_PDL: the cache may still be written by the grid before
    const rk_i64 slot = load_index(a.slots, t, SLOT == Index::int64);
    if (slot < a.min_slot || slot >= a.kv_rows) {
        if (READ_NEG == ReadNeg::zero)
            for (int i = 0; i < n; i++) rk_store16_out(dst + i * V, rk_v16{0, 0, 0, 0});
        return;
    }
    const rk_u8 *cache = (const rk_u8 *)(LAYOUT == Layout::split && rope ? a.kv_rope_cache : a.kv_cache);
    const I at = kv_at<I>(a, (I)slot, c);
    if (KV == Kv::bf16 || (KV == Kv::fp8_tile && rope)) {  // bf16 bits, copied
        rk_store16_out(dst, rk_load16(cache + at * (KV == Kv::bf16 ? 2 : 1)));
        return;
    }
    bool divides = false;
    const float k = read_factor(a, &divides);
    const rk_u8 *row = cache + (at - c * V);  // (fp8 rows: c * V bytes into the row)
    if (n == 2) {
        const rk_v16 p = rk_load16(cache + at);  // both halves in one tile: one scale
        const rk_v16 lo = pack_bf16(dequant8(rk_v8{p.x, p.y}, row, c, k, divides));
        const rk_v16 hi = pack_bf16(dequant8(rk_v8{p.z, p.w}, row, c + 1, k, divides));
        rk_store16_out(dst, lo);
        rk_store16_out(dst + V, hi);
        return;
    }
    rk_store16_out(dst, pack_bf16(dequant8(rk_load8(cache + at), row, c, k, divides)));
}

// Chunk g of the whole launch.
template <class I>
RK_DEVICE void read_lane(const args &a, I g) {
    const I t = token_of<I>(a, g);
    read_chunk<I>(a, t, (int)(g - t * (I)a.lanes));
}

}  // namespace rk
