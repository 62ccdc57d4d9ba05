// ---- the read-back op: cache rows gathered by slot into bf16 rows ---------------------------------------
// out[t] = the row of slots[t], t in [0, a.tokens), dequantized and rounded to bf16 (include/ropekv.h,
// ropekv_op). A lane per 16-byte chunk of the output row (two for a block-scaled e4m3 or e2m1 latent in large launches:
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

// Four e2m1 bytes -> eight floats (exact; the first value in the low nibble). On NVIDIA byte permutes look up four
// magnitudes at a time in two 8-entry tables, the f32's top byte and the one below it (0, 0.5, 1, 1.5, 2, 3, 4, 6:
// 00 00, 3f 00, 3f 80, 3f c0, 40 00, 40 40, 40 80, 40 c0), a third permute pairs them into two values' upper halves,
// and each value's sign bit is moved to bit 31: about four instructions a value for rk_e2m1_to_f32's nine, the same
// bits (test_ref test_e2m1_permute_decode).
RK_DEVICE f8 unpack_e2m1(rk_u32 p) {
    f8 r;
#if defined(RK_NV)
    for (int h = 0; h < 2; h++) {
        const rk_u32 s = p >> (16 * h), sel = s & 0x7777u;
        const rk_u32 e = __byte_perm(0x3f3f3f00u, 0x40404040u, sel), m = __byte_perm(0xc0800000u, 0xc0804000u, sel);
        const rk_u32 w01 = __byte_perm(m, e, 0x5140u), w23 = __byte_perm(m, e, 0x7362u);
        r.v[4 * h] = rk_bits_f32(w01 << 16 | (s << 28 & 0x80000000u));
        r.v[4 * h + 1] = rk_bits_f32((w01 & 0xffff0000u) | (s << 24 & 0x80000000u));
        r.v[4 * h + 2] = rk_bits_f32(w23 << 16 | (s << 20 & 0x80000000u));
        r.v[4 * h + 3] = rk_bits_f32((w23 & 0xffff0000u) | (s << 16 & 0x80000000u));
    }
#else
    for (int i = 0; i < V; i++) r.v[i] = rk_e2m1_to_f32(p >> (4 * i));
#endif
    return r;
}

// A latent lane may take two neighbouring chunks in one load (16 e4m3 bytes, or 8 e2m1 bytes; LATENT_PAIRS, kernel.hip): both
// halves lie in one block, whose scale the lane reads once. A launch the plan makes paired has a.lanes = L_CH / 2 +
// R_CH (rk_read_pairs, gen/desc.c).
constexpr bool READ_PAIRS = LATENT_PAIRS;

// The factor chunk c of segment S takes back from its block (p: its bytes in the row): the block's scale as stored in
// the row (the read op's reader takes it exactly), times the token scale where the record has one; 1 without blocks.
template <int S>
RK_DEVICE float block_factor(const args &a, rk_i64 slot, const rk_u8 *p, int c) {
    constexpr Segment G = SEG[S];
    if constexpr (G.block == 0) {
        (void)a, (void)slot, (void)p, (void)c;
        return 1.0f;
    } else {
        const int at = G.scales_at + SCALE_BYTES<S> * scale_slot<S>((c * V - G.from) / G.block);
        const rk_u8 *q = G.scale_at == ScaleAt::tail ? tail_byte(a, slot, at)
                         : SAME_PART<S>               ? p + (at - value_byte<S>(c * V))
                                                      : row_byte(a, slot, at);
        const float d = G.scale == ScaleType::f32     ? *(const float *)q
                        : G.scale == ScaleType::ue8m0 ? rk_ue8m0_to_f32(*q)
                                                      : rk_fp8_scale_to_f32(*q);
        if (G.outer == Outer::token) return d * *(const float *)row_byte(a, slot, G.outer_at);  // times the token scale
        return d;
    }
}

// Eight stored values y of segment S dequantized: times their block's factor dg (block_factor), then the inverse of
// the writer's tensor scale convention (mul_recip and div divided by k_scale, so multiply; mul multiplied, so divide;
// k = *k_scale), as rk_record_decode.
template <int S>
RK_DEVICE f8 dequant8(f8 y, float dg, float k) {
    constexpr Segment G = SEG[S];
    if (G.block > 0)
        for (int i = 0; i < V; i++) y.v[i] = y.v[i] * dg;
    if (G.conv != Scale::none)  // then the tensor scale (k is 1 without one)
        for (int i = 0; i < V; i++) y.v[i] = G.conv == Scale::mul ? y.v[i] / k : y.v[i] * k;
    return y;
}

// Output chunks c .. c + n - 1 of a row, in segment S: bf16 bits copied, or dequantized and rounded to bf16.
template <int S>
RK_DEVICE void read_segment(const args &a, rk_i64 slot, int c, int n, rk_u16 *dst) {
    constexpr Segment G = SEG[S];
    static_assert(G.outer != Outer::token || G.block > 0, "a per-token outer scale over blocks only");
    const rk_u8 *p = row_byte(a, slot, value_byte<S>(c * V));
    if constexpr (G.elem == Elem::bf16) {
        rk_store16_out(dst, rk_load16(p));
    } else {
        const float k = G.outer == Outer::tensor && G.conv != Scale::none ? *a.k_scale : 1.0f;
        if (READ_PAIRS && S == 0 && n == 2) {
            rk_v16 w;  // the pair's bytes: 16 e4m3 ones, or 8 e2m1 ones in w.x and w.y
            if constexpr (G.elem == Elem::e4m3) {
                w = rk_load16(p);
            } else {
                const rk_v8 h = rk_load8(p);
                w = rk_v16{h.x, h.y, 0u, 0u};
            }
            const float dg = block_factor<S>(a, slot, p, c);  // both halves in one block: one scale, read once
            const f8 x = G.elem == Elem::e4m3 ? unpack_fp8(rk_v8{w.x, w.y}) : unpack_e2m1(w.x);
            const f8 y = G.elem == Elem::e4m3 ? unpack_fp8(rk_v8{w.z, w.w}) : unpack_e2m1(w.y);
            rk_store16_out(dst, pack_bf16(dequant8<S>(x, dg, k)));
            rk_store16_out(dst + V, pack_bf16(dequant8<S>(y, dg, k)));
            return;
        }
        const f8 y = G.elem == Elem::e4m3 ? unpack_fp8(rk_load8(p)) : unpack_e2m1(*(const rk_u32 *)p);
        rk_store16_out(dst, pack_bf16(dequant8<S>(y, block_factor<S>(a, slot, p, c), k)));
    }
}

template <int S = 0>
RK_DEVICE void read_row_chunk(const args &a, rk_i64 slot, int c, int n, rk_u16 *dst) {
    if constexpr (S + 1 < NSEG) {
        if (c >= SEG_END_CH<S>) {
            read_row_chunk<S + 1>(a, slot, c, n, dst);
            return;
        }
    }
    read_segment<S>(a, slot, c, n, dst);
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
    read_row_chunk(a, slot, c, n, dst);
}

// Chunk g of the whole launch.
template <class I>
RK_DEVICE void read_lane(const args &a, I g) {
    const I t = token_of<I>(a, g);
    read_chunk<I>(a, t, (int)(g - t * (I)a.lanes));
}

}  // namespace rk
