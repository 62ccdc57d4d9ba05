// ---- the kernel: fused MLA RoPE + KV-cache write ------------------------------------------------------
// Work is cut into 16-byte chunks of output: 8 bf16 values per lane. A lane loads all it needs
// itself (no shared memory; lanes meet only within a wave: the shuffles of a block's amax or a norm's sum, and the
// group sync of the in-place fp8 query), and the same text runs on the host. Each token
// owns a.lanes lanes in two sections (see chunk()): the rotating chunks first, then the
// copied ones, so consecutive lanes still write consecutive bytes within each head's row.
namespace rk {
using namespace rkp;

using args = ::rk_args;  // templates/args.h

// RK_PDL: the wait for the previous grid in the stream, and with a.early_release the release of
// the next one. Without a.prefetch a lane waits in enter(), once it knows its chunk and before its
// first memory access (the index math before it overlaps the previous grid's tail). With a.prefetch
// it waits in gate(), where it first touches memory the previous kernel may have written (q, k,
// k_scale) or may still read (the outputs), after reading its positions, slots and cos/sin rows.
// The launcher sets a.prefetch only on a row with pdl (NVIDIA sm_90+). Elsewhere on NVIDIA the test stays, at run
// time: ptxas keeps each load on its side of it, which keeps a row's load ahead of the position -> cos/sin chain
// (without it ptxas issues that load after the chain: 5-9% slower at large T on an H200). On AMD and the host, which
// have no pdl, a kernel has the one path (an AMD load behind a branch is waited for where the paths join).
RK_DEVICE bool prefetching(const args &a) {
#if defined(RK_NV)
    return a.prefetch;
#else
    (void)a;
    return false;
#endif
}
RK_DEVICE void grid_sync(const args &a) {
    rk_grid_wait();
    if (a.early_release) rk_grid_release();
}
RK_DEVICE void enter(const args &a) {
    if (!prefetching(a)) grid_sync(a);
}
RK_DEVICE void gate(const args &a) {
    if (prefetching(a)) grid_sync(a);
}

constexpr int V = 8;                  // bf16 elements per chunk
constexpr int L_CH = L / V, R_CH = R / V;
constexpr int H2 = R / 2;
constexpr float BF16_MAX = 3.38953139e38f;

struct f8 { float v[V]; };

RK_DEVICE f8 unpack_bf16(rk_v16 p) {
    f8 r;
    rk_u32 w[4] = {p.x, p.y, p.z, p.w};
    for (int i = 0; i < 4; i++) { r.v[2 * i] = rk_bf16_lo(w[i]); r.v[2 * i + 1] = rk_bf16_hi(w[i]); }
    return r;
}

RK_DEVICE rk_v16 pack_bf16(const f8 &y) {
    return rk_v16{rk_pack_bf16(y.v[0], y.v[1]), rk_pack_bf16(y.v[2], y.v[3]),
                  rk_pack_bf16(y.v[4], y.v[5]), rk_pack_bf16(y.v[6], y.v[7])};
}

RK_DEVICE rk_i64 load_index(const void *p, rk_i64 t, bool wide) {
    return wide ? ((const rk_i64 *)p)[t] : (rk_i64)((const rk_i32 *)p)[t];
}

// Four cos (or sin) values starting at column i of table row pos; f32 or bf16 table of width w.
RK_DEVICE void load4(const void *table, rk_i64 pos, int w, int i, float *out) {
    if (COS_SIN == CosSin::bf16_split) {
        rk_v8 p = *(const rk_v8 *)((const rk_u16 *)table + pos * w + i);
        out[0] = rk_bf16_lo(p.x); out[1] = rk_bf16_hi(p.x);
        out[2] = rk_bf16_lo(p.y); out[3] = rk_bf16_hi(p.y);
    } else {
        rk_v16 p = rk_load16_ro((const float *)table + pos * w + i);
        out[0] = rk_bits_f32(p.x); out[1] = rk_bits_f32(p.y);
        out[2] = rk_bits_f32(p.z); out[3] = rk_bits_f32(p.w);
    }
}

// cos and sin for pair indices i .. i+n-1 (n = 4 or 8) at position pos.
RK_DEVICE void load_cos_sin(const args &a, rk_i64 pos, int i, int n, float *c, float *s) {
    for (int k = 0; k < n; k += 4) {
        if (COS_SIN == CosSin::f32_cat) {
            load4(a.cos_sin, pos, R, i + k, c + k);
            load4(a.cos_sin, pos, R, H2 + i + k, s + k);
        } else {
            load4(a.cos_sin, pos, H2, i + k, c + k);
            load4(a.sin, pos, H2, i + k, s + k);
        }
    }
}

RK_DEVICE rk_i64 position(const args &a, rk_i64 t) {
    rk_i64 p = load_index(a.positions, t, POS == Index::int64);
    return p < 0 ? 0 : p >= a.max_pos ? a.max_pos - 1 : p;
}

// One chunk's rotation, its inputs already loaded: p0 the chunk (neox: its first-half part, p1 the
// second-half part), c and s its cos and sin (gptj: 4 pairs; neox: 8). For neox the other half is
// returned in *partner (the in-place form writes both).
RK_DEVICE f8 rotate8(bool first, rk_v16 p0, rk_v16 p1, const float *c, const float *s, f8 *partner) {
    f8 y;
    if (ROPE == Rope::gptj) {  // gptj: pairs (2i, 2i+1) inside the chunk
        f8 x8 = unpack_bf16(p0);
        for (int i = 0; i < 4; i++) {
            float x0 = x8.v[2 * i], x1 = x8.v[2 * i + 1];
            y.v[2 * i] = rk_fma(x0, c[i], -(x1 * s[i]));
            y.v[2 * i + 1] = rk_fma(x1, c[i], x0 * s[i]);
        }
    } else {  // neox: pairs (i, i + R/2); the chunk lies in one half, its partner in the other
        f8 lo = unpack_bf16(p0), hi = unpack_bf16(p1), ylo, yhi;
        for (int i = 0; i < V; i++) {
            ylo.v[i] = rk_fma(lo.v[i], c[i], -(hi.v[i] * s[i]));
            yhi.v[i] = rk_fma(hi.v[i], c[i], lo.v[i] * s[i]);
        }
        y = first ? ylo : yhi;
        *partner = first ? yhi : ylo;
    }
    return y;
}

// Where chunk j's inputs lie: the element its load starts at (neox: the first-half part) and the
// first cos/sin pair it uses, with how many (4 for gptj, 8 for neox).
RK_DEVICE int rope_at(int j) { return ROPE == Rope::gptj ? j : j < H2 ? j : j - H2; }
RK_DEVICE int pair_at(int j) { return ROPE == Rope::gptj ? j / 2 : rope_at(j); }
constexpr int PAIRS = ROPE == Rope::gptj ? 4 : 8;

// Rotated values of x[j .. j+8) for one row x[0 .. R) of bf16 (j a multiple of 8); see rotate8.
// The row's values are loaded before the position and its cos/sin, so that their load overlaps that
// two-step chain (position, then its table row) instead of following it; with a.prefetch they are
// loaded after the gate instead (the grid before may still write them). Rope none rotates nothing and reads no
// position: the chunk as it is, its bits in *raw (given), which a bf16 output copies as it copies the latent's.
// prep(p, e) turns the loaded chunk p of the row's elements [e, e + 8) into the values rotated (a normalized row's:
// see row_factor); it runs after the lane has waited for the previous grid.
template <class F>
RK_DEVICE f8 rope8(const args &a, const rk_u16 *x, int j, rk_i64 t, f8 *partner, F prep, rk_v16 *raw = nullptr) {
    if constexpr (ROPE == Rope::none) {
        gate(a);
        const rk_v16 p = prep(rk_load16(x + j), j);
        if (raw) *raw = p;
        return unpack_bf16(p);
    }
    const int at = rope_at(j);
    rk_v16 p0 = {0, 0, 0, 0}, p1 = {0, 0, 0, 0};
    if (!prefetching(a)) {
        p0 = rk_load16(x + at);
        if (ROPE == Rope::neox) p1 = rk_load16(x + at + H2);
    }
    rk_issue_point();  // the row's loads issue before the position's wait (the cos/sin row's address needs it)
    float c[V], s[V];
    load_cos_sin(a, position(a, t), pair_at(j), PAIRS, c, s);
    rk_issue_point();  // the table's loads issue before anything uses the row's values
    gate(a);
    if (prefetching(a)) {
        p0 = rk_load16(x + at);
        if (ROPE == Rope::neox) p1 = rk_load16(x + at + H2);
    }
    p0 = prep(p0, at);
    if (ROPE == Rope::neox) p1 = prep(p1, at + H2);
    return rotate8(j < H2, p0, p1, c, s, partner);
}
RK_DEVICE f8 rope8(const args &a, const rk_u16 *x, int j, rk_i64 t, f8 *partner, rk_v16 *raw = nullptr) {
    return rope8(a, x, j, t, partner, [](rk_v16 p, int) { return p; }, raw);
}

// ---- the fused kv_a RMSNorm (NORM != none): c_kv normalized before the row uses it (gen/ref.c) ----------
// The sum of squares is the reference's tree: chunk sums p[c], then for d = L_CH/2, .., 1, p[c] + p[c ^ d]. The NG
// lanes of a token's latent that share a wave take the steps d < NG by shuffles (rk_group_sum: the latent starts
// at a multiple of the wave, and a token's lanes are a multiple of NG: chunk()); a lane takes the steps d >= NG
// itself, from the chunks c ^ k NG it loads besides its own (wave32 targets with L_CH = 64: one more load). On the
// host, where lanes run one after another, a lane sums the whole row.
constexpr int NG = L_CH < RK_WAVE ? L_CH : RK_WAVE;
constexpr int NCOL = L_CH / NG;  // chunks of the row a lane sums itself (on the GPUs)

RK_DEVICE float sum_squares8(rk_v16 p) {
    const f8 x = unpack_bf16(p);
    float s = 0.0f;
    for (int i = 0; i < V; i++) s = rk_fma(x.v[i], x.v[i], s);
    return s;
}

// The tree's steps over p[0, n) (n a power of two): p[c] + p[c + d] for d = n/2, .., 1; the sum is p[0].
RK_DEVICE float tree_sum(float *p, int n) {
    for (int d = n / 2; d >= 1; d /= 2)
        for (int c = 0; c < d; c++) p[c] = p[c] + p[c + d];
    return p[0];
}

// r = 1 / sqrt(sum(x^2) / L + eps) of token t's latent row; own is chunk c's bits, already loaded.
template <class I>
RK_DEVICE float norm_factor(const args &a, I t, int c, rk_v16 own) {
    const rk_u16 *row = (const rk_u16 *)a.k_nope + t * (I)a.k_nope_st;
#if defined(RK_HOST)
    float p[L_CH];
    for (int k = 0; k < L_CH; k++) p[k] = sum_squares8(k == c ? own : rk_load16(row + k * V));
    const float sum = tree_sum(p, L_CH);
#else
    // Every chunk is loaded again, own included: a select of own by this lane's column would put the loads
    // behind a branch per column, one after another (about 0.1 us more per call at T = 16 on an H200).
    float p[NCOL];
#pragma unroll
    for (int m = 0; m < NCOL; m++) p[m] = sum_squares8(NCOL == 1 ? own : rk_load16_ro(row + (c % NG + m * NG) * V));
    const float sum = rk_group_sum<NG>(tree_sum(p, NCOL));
#endif
    return 1.0f / rk_sqrt_rn(sum / (float)L + NORM_EPS);
}

// The weight of chunk c, as floats.
RK_DEVICE f8 norm_weight8(const args &a, int c) {
    f8 w;
    if (NORM_WEIGHT == NormWeight::bf16) return unpack_bf16(rk_load16_ro((const rk_u16 *)a.norm_weight + c * V));
    const rk_v16 lo = rk_load16_ro((const float *)a.norm_weight + c * V);
    const rk_v16 hi = rk_load16_ro((const float *)a.norm_weight + c * V + 4);
    const rk_u32 u[V] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
    for (int i = 0; i < V; i++) w.v[i] = rk_bits_f32(u[i]);
    return w;
}

// A chunk of a latent row normalized, w its weight: bf16(bf16(x * r) * w), or bf16(x * r * w) rounding once.
RK_DEVICE rk_v16 norm8(rk_v16 raw, const f8 &w, float r) {
    f8 x = unpack_bf16(raw);
    for (int i = 0; i < V; i++) {
        float y = x.v[i] * r;
        if (NORM_ROUNDING == NormRounding::twice) y = rk_bits_f32(rk_bf16_sw(y) << 16);
        x.v[i] = y * w.v[i];
    }
    return pack_bf16(x);
}

// A norm over a whole row (the lanes row by row: ORDER rows): r = 1 / sqrt(sum(x^2) / W + eps) of the row
// x = nope[0, L) | pe[0, R) (a query head's q_nope and q_pe, or the KV row's c_kv and k_pe before the rotation), the
// same tree over its HC chunks. Every lane of a row calls it at one place, before the row's lanes part ways (a
// wave lies in one row: HC >= the wave, gen/spec.c), so that the shuffles see every lane of the wave.
constexpr int HC = (L + R) / V;
constexpr int HG = HC < RK_WAVE ? HC : RK_WAVE;
constexpr int HCOL = HC / HG;
RK_DEVICE rk_v16 row_chunk(const rk_u16 *nope, const rk_u16 *pe, int k) {
    return k < L_CH ? rk_load16_ro(nope + k * V) : rk_load16_ro(pe + (k - L_CH) * V);
}
RK_DEVICE float row_factor(const rk_u16 *nope, const rk_u16 *pe, int c, float eps) {
#if defined(RK_HOST)
    float p[HC];
    for (int k = 0; k < HC; k++) p[k] = sum_squares8(row_chunk(nope, pe, k));
    const float sum = tree_sum(p, HC);
    (void)c;
#else
    float p[HCOL];
#pragma unroll
    for (int m = 0; m < HCOL; m++) p[m] = sum_squares8(row_chunk(nope, pe, c % HG + m * HG));
    const float sum = rk_group_sum<HG>(tree_sum(p, HCOL));
#endif
    return 1.0f / rk_sqrt_rn(sum / (float)(L + R) + eps);
}

// A query head's chunk normalized by the weightless q_norm: bf16(x * r).
RK_DEVICE rk_v16 qnorm8(rk_v16 raw, float r) {
    f8 x = unpack_bf16(raw);
    for (int i = 0; i < V; i++) x.v[i] = x.v[i] * r;
    return pack_bf16(x);
}
constexpr bool ROWS = ORDER == Order::rows;
constexpr bool HEAD_NORM = NORM != Norm::none && NORM_OVER == NormOver::head;

// A chunk's values scaled by convention S: multiplied by k (which holds 1/scale for mul_recip: see fp8_factor), or
// for div divided by it: an IEEE division each (on sm_90 faster than one reciprocal a chunk with a Markstein fma
// correction per value and the range tests that keep that exact, which took a Kimi-K2 KV row 21% longer at
// 32768 x 16: docs/results.md).
template <Scale S>
RK_DEVICE f8 scale8(f8 y, float k) {
    if (S == Scale::mul_recip || S == Scale::mul)
        for (int i = 0; i < V; i++) y.v[i] = y.v[i] * k;
    else if (S == Scale::div)
        for (int i = 0; i < V; i++) y.v[i] = y.v[i] / k;
    return y;
}

// An element on its way to fp8, already scaled (scale8): sanitized when CLEAN (NaN -> 0; inf is clamped), clamped to
// the bound sat (NaN passes).
template <bool CLEAN>
RK_DEVICE float fp8_prep(float x, float sat) {
    if (CLEAN) x = rk_isnan(x) ? 0.0f : x;
    return x > sat ? sat : x < -sat ? -sat : x;
}

// The factor scale8 takes for a scale read from memory: its reciprocal (an f32) for mul_recip.
template <Scale S>
RK_DEVICE float fp8_factor(float scale) { return S == Scale::mul_recip ? 1.0f / scale : scale; }

// Eight values -> eight fp8 bytes in the target's format; with rope_bf16 each value is rounded to bf16
// first.
template <Scale S, bool CLEAN>
RK_DEVICE rk_v8 pack_fp8(f8 y, float k, float sat, bool rope_bf16) {
    if (rope_bf16)
        for (int i = 0; i < V; i++) y.v[i] = rk_bits_f32(rk_bf16_sw(y.v[i]) << 16);
    y = scale8<S>(y, k);
    for (int i = 0; i < V; i++) y.v[i] = fp8_prep<CLEAN>(y.v[i], sat);
    return rk_v8{rk_pack_fp8(y.v[0], y.v[1]) | (rk_pack_fp8(y.v[2], y.v[3]) << 16),
                 rk_pack_fp8(y.v[4], y.v[5]) | (rk_pack_fp8(y.v[6], y.v[7]) << 16)};
}

// The query output: bf16, or fp8 with the spec's q_fp8 policy (no sanitizing).
constexpr bool Q8 = Q_DTYPE == QDtype::fp8_e4m3;
// query rope lanes per head (the launch plan's, rk_query_rope_lanes): a chunk each
constexpr int QR = QFORM == QForm::none ? 0 : R_CH;
static_assert(!(QFORM == QForm::inplace && Q8) || (!ROWS && RK_WAVE % QR == 0 && (QR & (QR - 1)) == 0 && L_CH % QR == 0),
              "in place with an fp8 query, a head's rope lanes are an aligned group of one wave (the rope section "
              "is whole waves, the copy section a multiple of QR lanes)");
RK_DEVICE rk_v8 pack_q8(const f8 &y, float k, bool rope) {
    return pack_fp8<Q_SCALE, false>(y, k, Q_SAT, rope && Q_ROPE_BF16);
}

// The in-place form with an fp8 query: its fp8 bytes go over the first R bytes of the bf16 row, where values of
// other chunks still sit. On the GPUs each chunk has its lane and the head's QR lanes, consecutive lanes
// of one wave, wait for each other (rk_group_sync) between their loads and their stores (q_chunk). On the host,
// whose lanes run one after another, the head's first lane rotates the whole row into registers before it stores
// anything (here; the host has no prefetch, so the scale is q_chunk's). (Only the packed fp8 row is kept, 2
// registers a chunk.)
#if defined(RK_HOST)
RK_DEVICE void q_row_inplace_fp8(const args &a, rk_u16 *q_pe, rk_i64 t, bool skip, float q_scale) {
    rk_v8 row[R_CH > 0 ? R_CH : 1];  // R = 0 (no rope part) has no in-place form: never called
    float k = fp8_factor<Q_SCALE>(q_scale);
#pragma unroll
    for (int j = 0; j < R; j += V) {
        if (ROPE == Rope::neox && j >= H2) break;  // neox: each step rotates a pair of chunks
        f8 partner;
        f8 y = rope8(a, q_pe, j, t, &partner);
        row[j / V] = pack_q8(y, k, true);
        if (ROPE == Rope::neox) row[(j + H2) / V] = pack_q8(partner, k, true);
    }
    if (skip) return;
#pragma unroll
    for (int c = 0; c < R_CH; c++) rk_store8((rk_u8 *)q_pe + c * V, row[c]);
}
#endif

// With negative_slot = skip_all a token whose slot is negative writes no query row (a token past kv_tokens has no
// slot, so its rows are written).
template <class I>
RK_DEVICE bool q_skipped(const args &a, I t) {
    return NEG == Neg::skip_all && t < (I)a.kv_tokens && load_index(a.slots, t, SLOT == Index::int64) < 0;
}

// A padded query head (h >= heads, q form absorbed): chunk c of its q_out row written as zeros.
template <class I>
RK_DEVICE void q_pad(const args &a, I t, I h, int c) {
    const bool skip = q_skipped<I>(a, t);
    gate(a);
    if (skip) return;
    const I at = t * (I)a.q_out_st + h * (I)a.q_out_sh + (c < L_CH ? c * V : L + (c - L_CH) * V);
    if (Q8) rk_store8_out((rk_u8 *)a.q_out + at, rk_v8{0, 0});
    else rk_store16_out((rk_u16 *)a.q_out + at, rk_v16{0, 0, 0, 0});
}

// One chunk of a query row: copy (or quantize) q_nope, or rotate q_pe. With negative_slot = skip_all a
// token whose slot is negative writes nothing (a token past kv_tokens has no slot, so its rows are
// written); its slot is waited for only at the store, so that load overlaps the chunk's own (a slot
// read first would add a memory round trip to the chain). An fp8 query's scale is read as the cache's
// is (kv_chunk).
// rq: the head's q_norm factor (row_factor; 1 without a q_norm).
template <class I>
RK_DEVICE void q_chunk(const args &a, I t, I h, int c, float rq) {
    const bool skip = q_skipped<I>(a, t);
    const bool scaled = Q8 && Q_SCALE != Scale::none;
    float q_scale = scaled && !prefetching(a) ? *a.q_scale : 1.0f;
    rk_u16 *q_pe = R > 0 ? (rk_u16 *)a.q_pe + t * (I)a.q_pe_st + h * (I)a.q_pe_sh : nullptr;  // R = 0: no q_pe
    const I out_at = t * (I)a.q_out_st + h * (I)a.q_out_sh;  // in q_out's elements: bf16, or fp8 bytes
    if (QFORM == QForm::absorbed && c < L_CH) {
        const rk_u16 *src = (const rk_u16 *)a.q_nope + t * (I)a.q_nope_st + h * (I)a.q_nope_sh;
        gate(a);
        rk_v16 x = rk_load16_ro(src + c * V);
        if (Q_NORM == QNorm::rms) x = qnorm8(x, rq);
        if (scaled && prefetching(a)) q_scale = *a.q_scale;
        if (skip) return;
        if (Q8) rk_store8_out((rk_u8 *)a.q_out + out_at + c * V, pack_q8(unpack_bf16(x), fp8_factor<Q_SCALE>(q_scale), false));
        else rk_store16_out((rk_u16 *)a.q_out + out_at + c * V, x);
        return;
    }
    const int j = (QFORM == QForm::absorbed ? c - L_CH : c) * V;
    if constexpr (QFORM == QForm::inplace && Q8) {
#if defined(RK_HOST)
        if (j == 0) q_row_inplace_fp8(a, q_pe, t, skip, q_scale);  // the head's first lane rewrites the row
#else
        f8 partner;  // a lane per chunk (its neox partner loaded beside it)
        const f8 y = rope8(a, q_pe, j, t, &partner);
        if (scaled && prefetching(a)) q_scale = *a.q_scale;
        const rk_v8 out = pack_q8(y, fp8_factor<Q_SCALE>(q_scale), true);
        rk_group_sync<R_CH>();  // every lane of the head has read its bf16 values
        if (!skip) rk_store8((rk_u8 *)q_pe + j, out);
#endif
        return;
    }
    if (QFORM == QForm::inplace) {
        // In place, a neox pair spans two chunks: the first-half lane rotates and writes both, so no
        // lane reads a value another lane has already overwritten.
        if (ROPE == Rope::neox && j >= H2) return;
        f8 partner;
        rk_v16 out = pack_bf16(rope8(a, q_pe, j, t, &partner));
        if (skip) return;
        if (ROPE == Rope::neox) rk_store16(q_pe + j + H2, pack_bf16(partner));
        rk_store16(q_pe + j, out);
        return;
    }
    f8 unused;
    rk_v16 raw = {0, 0, 0, 0};  // rope none: q_pe's bits, copied as q_nope's are
    f8 y = Q_NORM == QNorm::rms
               ? rope8(a, q_pe, j, t, &unused, [rq](rk_v16 p, int) { return qnorm8(p, rq); }, &raw)
               : rope8(a, q_pe, j, t, &unused, &raw);
    if (scaled && prefetching(a)) q_scale = *a.q_scale;
    if (skip) return;
    if (Q8) rk_store8_out((rk_u8 *)a.q_out + out_at + L + j, pack_q8(y, fp8_factor<Q_SCALE>(q_scale), true));
    else rk_store16_out((rk_u16 *)a.q_out + out_at + L + j, ROPE == Rope::none ? raw : pack_bf16(y));
}

// A value on its way to a bf16 store of the KV row: with SANITIZE, NaN -> 0 and a value beyond the bf16 max
// finite (an inf, or a float that would round to inf) -> +-BF16_MAX, so the rounding never makes an inf.
RK_DEVICE float bf16_prep(float x) {
    if (!SANITIZE) return x;
    return rk_isnan(x) ? 0.0f : x > BF16_MAX ? BF16_MAX : x < -BF16_MAX ? -BF16_MAX : x;
}

// n / d (n >= 0): a multiply and a shift by the launcher's magic numbers (rk_div_magic: mul < 2^32, so one 32 x 32
// -> 64-bit multiply), exact for n < 2^31, which the 32-bit entry's n always is; the 64-bit entry divides only an n
// past that (a 64-bit divide is some sixty instructions a lane).
template <class I>
RK_DEVICE I divide(I n, rk_i64 d, rk_i64 mul, rk_i64 shift) {
    if (sizeof(I) == 4 || (rk_u64)n <= 0x7fffffffu) return (I)(((rk_u64)(rk_u32)n * (rk_u32)mul) >> shift);
    return n / (I)d;
}

// A paged slot's block and entry in it: a slot below 2^31 (every slot of a cache of fewer rows) in 32-bit
// arithmetic, a larger one by a 64-bit divide.
struct Place {
    rk_i64 block, entry;
};
RK_DEVICE Place place_of(const args &a, rk_i64 slot) {
    if ((rk_u64)slot <= 0x7fffffffu) {
        const rk_u32 s = (rk_u32)slot, b = divide<rk_u32>(s, a.kv_block_size, a.block_mul, a.block_shift);
        return {(rk_i64)b, (rk_i64)(s - b * (rk_u32)a.kv_block_size)};
    }
    const rk_i64 b = slot / a.kv_block_size;
    return {b, slot - b * a.kv_block_size};
}

// Where a slot's row lies, in elements of its cache (kv_cache; kv_rope_cache for the rope part of a split
// layout): include/ropekv.h, ropekv_kv_layout. A cache's addresses are 64-bit in both entries (a row's, once per
// lane), so that an engine-sized cache (past 2^31 bytes) does not decide the entry: only the per-token tensors do.
// A paged row is block * block_st + entry * st = slot * st + block * gap (gap = block_st - block_size * st, the
// launcher's, modulo 2^64 as this sum is): a cache of contiguous blocks (gap 0) finds it as a flat one does.
RK_DEVICE rk_i64 row_at(const args &a, rk_i64 slot, bool rope) {
    if (LAYOUT == Layout::flat) return slot * a.kv_st;
    const bool second = LAYOUT == Layout::split && rope;
    const rk_u64 gap = (rk_u64)(second ? a.rope_block_gap : a.block_gap);
    rk_u64 row = (rk_u64)slot * (rk_u64)(second ? a.kv_rope_st : a.kv_st);
    if (gap != 0) row += (rk_u64)place_of(a, slot).block * gap;
    return (rk_i64)row;
}

// Byte b of a slot's row: the split layout puts the record's bytes [SPLIT_AT, ROW_BYTES) in kv_rope_cache (the
// rows' strides count UNIT bytes, the cache's element).
RK_DEVICE rk_u8 *row_byte(const args &a, rk_i64 slot, int b) {
    const bool second = LAYOUT == Layout::split && SPLIT_AT > 0 && b >= SPLIT_AT;
    rk_u8 *cache = (rk_u8 *)(second ? a.kv_rope_cache : a.kv_cache);
    return cache + row_at(a, slot, second) * UNIT + (second ? b - SPLIT_AT : b);
}

// Byte b of a slot's page tail (paged layout): after its block's kv_block_size rows, TAIL_BYTES a token.
RK_DEVICE rk_u8 *tail_byte(const args &a, rk_i64 slot, int b) {
    const Place at = place_of(a, slot);
    return (rk_u8 *)a.kv_cache + (at.block * a.kv_block_st + a.kv_block_size * a.kv_st) * UNIT + at.entry * TAIL_BYTES +
           b;
}

// Segment S of the record: bits of a value, lanes of a block, bytes of a block scale, the first chunk past it
// (segments are in the order of their values: gen/render.c); the byte of value x[j] (j in the segment).
template <int S>
constexpr int SEG_BITS = SEG[S].elem == Elem::bf16 ? 16 : SEG[S].elem == Elem::e4m3 ? 8 : 4;
template <int S>
constexpr int BLOCK_CH = SEG[S].block > 0 ? SEG[S].block / V : 1;
template <int S>
constexpr int SCALE_BYTES = SEG[S].scale == ScaleType::f32 ? 4 : 1;
// The place of block b's scale among segment S's (rk_seg_scale_slot: in block order, or interleaved).
template <int S>
RK_DEVICE constexpr int scale_slot(int b) {
    constexpr int K = SEG[S].interleave, NB = SEG[S].block > 0 ? SEG[S].n / SEG[S].block : 1;
    return K >= 2 ? b % K * (NB / K) + b / K : b;
}
template <int S>
constexpr int SEG_END_CH = (SEG[S].from + SEG[S].n) / V;
// 1 when segment S's values and inline scales lie in one part of a split row (a scale is then addressed from its
// value's byte).
template <int S>
constexpr bool SAME_PART = SPLIT_AT == 0 || (SEG[S].at >= SPLIT_AT) == (SEG[S].scales_at >= SPLIT_AT);
template <int S>
RK_DEVICE int value_byte(int j) { return SEG[S].at + (j - SEG[S].from) * SEG_BITS<S> / 8; }
static_assert(NSEG >= 1 && ROW_BYTES >= SEG[NSEG - 1].at, "a record has a segment, inside its row");

// Block-scaled segments: a block of SEG[S].block values is BLOCK_CH<S> chunks, on consecutive lanes of one wave
// (the copy section starts at a multiple of the wave, a token's lanes are a multiple of BLOCK_CH, and a block
// starts at a multiple of its values: chunk()).

// A latent lane may take two neighbouring chunks where the latent is one block-scaled e4m3 or e2m1 segment in blocks
// of an even number of chunks: both lie in one block, and the pair's bytes are one aligned access (a record's rows are
// 16-byte aligned; the segment starts at a multiple of the pair's bytes). The read-back op pairs in large launches
// (READ_PAIRS: read.hip); the writer in a KV-only launch of token groups where the segment is the latent alone,
// without a norm or a per-token scale, on a row with write_pairs (WRITE_PAIRS): a lane's own work (its index math,
// slot, block scale and store) then serves sixteen values, which is what bounds an e2m1 writer there (rk_read_pairs,
// rk_write_pairs in gen/desc.c: a.lanes).
constexpr int PAIR_BYTES = SEG[0].elem == Elem::e4m3 ? 16 : 8;
constexpr bool LATENT_PAIRS = SEG[0].from == 0 && SEG[0].n >= L && SEG[0].elem != Elem::bf16 && SEG[0].block > 0 &&
                              SEG[0].at % PAIR_BYTES == 0 && L_CH % 2 == 0 && BLOCK_CH<0> % 2 == 0;
constexpr bool WRITE_PAIRS = RK_WRITE_PAIRS;
static_assert(!WRITE_PAIRS || (LATENT_PAIRS && SEG[0].n == L && RK_KV_GROUP > 1 && NORM == Norm::none &&
                                SEG[0].outer != Outer::token),
              "write pairs: a block-scaled latent of its own, KV-only groups, no norm, no per-token scale");

// Chunk c (>= L_CH) of the KV row: k_pe's values rotated, normalized first with the factor r by a norm over the
// whole head.
template <class I>
RK_DEVICE f8 kv_rope8(const args &a, I t, int c, float r, rk_v16 *raw = nullptr) {
    f8 unused;
    const rk_u16 *pe = (const rk_u16 *)a.k_pe + t * (I)a.k_pe_st;
    if constexpr (HEAD_NORM)
        return rope8(
            a, pe, (c - L_CH) * V, t, &unused,
            [&a, r](rk_v16 p, int e) { return norm8(p, norm_weight8(a, L_CH + e / V), r); }, raw);
    else return rope8(a, pe, (c - L_CH) * V, t, &unused, raw);
}

// Chunk q of token t's KV row as values (the host's lanes, and a lane's other columns): c_kv normalized with the
// row's factor r (a fused norm), or k_pe rotated (kv_rope8).
template <class I>
RK_DEVICE f8 kv_values(const args &a, I t, int q, float r) {
    if (q >= L_CH) return kv_rope8(a, t, q, r);
    rk_v16 p = rk_load16_ro((const rk_u16 *)a.k_nope + t * (I)a.k_nope_st + q * V);
    if (NORM != Norm::none) p = norm8(p, norm_weight8(a, q), r);
    return unpack_bf16(p);
}

// The largest |x| of a chunk, NaN ignored.
RK_DEVICE float amax8(const f8 &y) {
    float m = 0.0f;
    for (int i = 0; i < V; i++) m = rk_max_num(m, rk_bits_f32(rk_f32_bits(y.v[i]) & 0x7fffffffu));
    return m;
}

// A chunk's values on their way into segment S's blocks: a rope value rounded to bf16 first (rope_bf16), the
// launch's tensor scale (k: fp8_factor's), and with SANITIZE NaN -> 0 and +-inf -> +-BF16_MAX (the block's scale
// stays finite).
template <int S>
RK_DEVICE f8 block_prep(f8 y, bool nope, float k) {
    constexpr Segment G = SEG[S];
    constexpr Scale CONV = G.outer == Outer::tensor ? G.conv : Scale::none;
    if (G.rope_bf16 && !nope)
        for (int i = 0; i < V; i++) y.v[i] = rk_bits_f32(rk_bf16_sw(y.v[i]) << 16);
    y = scale8<CONV>(y, k);
    if (SANITIZE)
        for (int i = 0; i < V; i++) y.v[i] = bf16_prep(y.v[i]);
    return y;
}

// The amax of chunk c's block of segment S, own being the lane's N chunks': the block's lanes exchange theirs
// (rk_group_max); on the host, where lanes run one after another, the lane computes its block's values itself
// (the latent normalized with the row's factor r, the rope part rotated; k: block_prep's).
template <class I, int S, int N = 1>
RK_DEVICE float block_amax(const args &a, I t, int c, float own, float r, float k) {
    constexpr int B = BLOCK_CH<S>;
#if defined(RK_HOST)
    const int first = SEG[S].from / V + (c - SEG[S].from / V) / B * B;
    float m = 0.0f;
    for (int q = first; q < first + B; q++) {
        float x = amax8(block_prep<S>(kv_values<I>(a, t, q, r), q < L_CH, k));
        m = x > m ? x : m;
    }
    (void)own;
    return m;
#else
    (void)a;
    (void)t;
    (void)c;
    (void)r;
    (void)k;
    return rk_group_max<B / N>(own);
#endif
}

// A per-token outer scale (segment S over the latent, [0, L): rk_record_unsupported): g = max(amax over the
// segment / (smax * sat), FLT_MIN), smax the block scale type's largest value (f32 1, UE8M0 2^127, e4m3 the
// target's). The segment's SC chunks are consecutive lanes of the copy section, TG of a wave: a lane takes the
// amax of the chunks c % TG + m TG it computes besides its own (own: its chunk's), and the group exchanges them; on
// the host a lane computes the whole segment.
template <int S>
constexpr float SCALE_MAX = SEG[S].scale == ScaleType::ue8m0 ? 1.70141183e38f
                            : SEG[S].scale == ScaleType::e4m3 ? (RK_FP8_FNUZ ? 240.0f : 448.0f)
                                                              : 1.0f;
template <class I, int S>
RK_DEVICE float token_scale(const args &a, I t, int c, float own, float r, float k) {
    constexpr Segment G = SEG[S];
    constexpr int SC = G.n / V, TG = SC < RK_WAVE ? SC : RK_WAVE, TCOL = SC / TG;
    static_assert(G.from == 0 && G.n == L && (SC & (SC - 1)) == 0, "a token scale over the whole latent");
    float m = 0.0f;
#if defined(RK_HOST)
    for (int q = 0; q < SC; q++) {
        const float x = amax8(block_prep<S>(kv_values<I>(a, t, q, r), true, k));
        m = x > m ? x : m;
    }
    (void)own;
    (void)c;
#else
#pragma unroll
    for (int col = 0; col < TCOL; col++) {
        const float x = TCOL == 1 ? own : amax8(block_prep<S>(kv_values<I>(a, t, c % TG + col * TG, r), true, k));
        m = x > m ? x : m;
    }
    m = rk_group_max<TG>(m);
#endif
    const float g = m / (SCALE_MAX<S> * G.sat);
    return g >= 1.17549435e-38f ? g : 1.17549435e-38f;  // NaN: FLT_MIN
}

// 1 when segment S's block scale is rounded up to a power of two (pow2_up, or a UE8M0 byte, which holds nothing else).
template <int S>
constexpr bool POW2_SCALE = SEG[S].rule == ScaleRule::pow2_up || SEG[S].scale == ScaleType::ue8m0;

// A block's scale: s = max(amax / sat, floor) (an IEEE division; floor FLT_MIN unless the segment names one),
// rounded up to a power of two by pow2_up (and for a UE8M0 byte, which holds nothing else; an inf amax gives an inf
// scale). *bits is what the row stores (the float's bits, the UE8M0 byte, or the e4m3 byte: to nearest even, or by
// rule up the least e4m3 value >= s, saturating either way; 0x01 for an s that rounds to zero, 0x00 by rule
// exact_zero); the value returned is what the values are divided by (the stored scale decoded: UE8M0 0xff is NaN; 0
// for exact_zero's zero byte, whose block block_divide multiplies by 0).
template <int S>
RK_DEVICE float block_scale(float amax, float gs, rk_u32 *bits) {
    constexpr Segment G = SEG[S];
    float s = amax / G.sat;
    if (G.outer == Outer::token) s = s / gs;  // a token scale gs: the block's scale is relative to it
    s = s > G.floor ? s : G.floor;
    if (POW2_SCALE<S>) {
        rk_u32 u = rk_f32_bits(s);
        if ((u & 0x7fffffu) != 0u && u < 0x7f800000u) u = (u & 0xff800000u) + 0x800000u;
        s = rk_bits_f32(u);
    }
    if (G.scale == ScaleType::ue8m0) {
        *bits = rk_ue8m0(s);
        return *bits == 0xffu ? rk_bits_f32(0x7fc00000u) : s;
    }
    if (G.scale == ScaleType::e4m3) {
        rk_u32 b = rk_pack_fp8(s, 0.0f) & 0xffu;
        b = (b & 0x7fu) == 0u ? (G.rule == ScaleRule::exact_zero ? 0u : 1u) : b;
        if (G.rule == ScaleRule::up && rk_fp8_scale_to_f32(b) < s && b < (RK_FP8_FNUZ ? 0x7fu : 0x7eu)) b += 1u;
        *bits = b;
        return rk_fp8_scale_to_f32(b);
    }
    *bits = rk_f32_bits(s);
    return s;
}

// A block's values divided by its scale d (block_scale's), as pack_fp8 and pack_e2m1 quantize them: y / d rounded as
// the IEEE division rounds it, which takes some ten instructions a value. d and amax, the largest |y| (NaN ignored),
// are the same on every lane of the block.
// - d a power of two by the record (a UE8M0 or pow2_up f32 scale, no token scale): y * (1 / d), the same exact
//   value rounded once (1 / d is exact; an inf or NaN d, an inf or NaN y give what y / d gives).
// - d in [2^-60, 2^60] and amax / d below 2^19 (every y finite, every quotient far from overflow): with k = 1 / d,
//   q = y * k corrected once, q - (d q - y) k (three instructions a value). This is y / d bit for bit wherever
//   |y / d| >= 2^-11 (a correctly rounded reciprocal, no step near the subnormal range; test_ref
//   test_block_division); a smaller quotient is a zero code either way, of y's sign (a signed zero keeps it through
//   this order of operations), and a NaN y stays NaN.
// - otherwise (an inf in the block, a tiny or a saturated scale): the IEEE division.
// A segment whose values take the scale by block_conv mul_recip is y * (1 / d) by definition; by rule exact_zero a
// zero d takes them times 0.
template <int S>
RK_DEVICE f8 block_divide(f8 y, float d, float amax) {
    constexpr Segment G = SEG[S];
    constexpr bool POW2 = POW2_SCALE<S> && G.scale != ScaleType::e4m3 && G.outer != Outer::token;
    const bool zero = G.rule == ScaleRule::exact_zero && d == 0.0f;
    const float k = zero ? 0.0f : 1.0f / d;
    if (POW2 || G.block_conv == BlockConv::mul_recip || zero) {
        for (int i = 0; i < V; i++) y.v[i] = y.v[i] * k;
    } else if (d >= 8.67361738e-19f && d <= 1.15292150e18f && amax * k < 524288.0f) {  // [2^-60, 2^60], 2^19
        for (int i = 0; i < V; i++) {
            const float q = y.v[i] * k;
            y.v[i] = rk_fma(-rk_fma(d, q, -y.v[i]), k, q);
        }
    } else {
        for (int i = 0; i < V; i++) y.v[i] = y.v[i] / d;
    }
    return y;
}

// Eight values -> eight e2m1 nibbles (the first in the low nibble), each scaled and clamped as pack_fp8's. The
// clamp is left to the encoder where it would change no code: a bound of 6 or more (the encoder saturates there,
// inf too, and a NaN passes either way) without sanitizing.
template <Scale S, bool CLEAN>
RK_DEVICE rk_u32 pack_e2m1(f8 y, float k, float sat, bool rope_bf16) {
    if (rope_bf16)
        for (int i = 0; i < V; i++) y.v[i] = rk_bits_f32(rk_bf16_sw(y.v[i]) << 16);
    y = scale8<S>(y, k);
    if (CLEAN || sat < 6.0f)
        for (int i = 0; i < V; i++) y.v[i] = fp8_prep<CLEAN>(y.v[i], sat);
    return rk_pack_e2m1(y.v[0], y.v[1]) | (rk_pack_e2m1(y.v[2], y.v[3]) << 8) |
           (rk_pack_e2m1(y.v[4], y.v[5]) << 16) | (rk_pack_e2m1(y.v[6], y.v[7]) << 24);
}

// Where a block's scale goes (the block's first lane stores it): segment S's scale of the block holding x[j], for the
// row of slot whose value bytes at x[j] are p.
template <int S>
RK_DEVICE void store_block_scale(const args &a, rk_i64 slot, rk_u8 *p, int j, rk_u32 bits) {
    constexpr Segment G = SEG[S];
    const int at = G.scales_at + SCALE_BYTES<S> * scale_slot<S>((j - G.from) / G.block);
    rk_u8 *q = G.scale_at == ScaleAt::tail ? tail_byte(a, slot, at)
               : SAME_PART<S>               ? p + (at - value_byte<S>(j))
                                            : row_byte(a, slot, at);
    if (G.scale == ScaleType::f32) *(float *)q = rk_bits_f32(bits);
    else *q = (rk_u8)bits;
}

// A block-scaled chunk's quantized values (block_divide's) stored from p, with N = 2 a pair's second chunk y1 beside
// them in the same access: 8 or 16 bytes of e4m3, 4 or 8 of e2m1.
template <int S, int N>
RK_DEVICE void store_block_values(rk_u8 *p, f8 y, f8 y1) {
    constexpr Segment G = SEG[S];
    if constexpr (G.elem == Elem::e4m3) {
        const rk_v8 lo = pack_fp8<Scale::none, false>(y, 1.0f, G.sat, false);
        if constexpr (N == 2) {
            const rk_v8 hi = pack_fp8<Scale::none, false>(y1, 1.0f, G.sat, false);
            rk_store16_out(p, rk_v16{lo.x, lo.y, hi.x, hi.y});
        } else {
            rk_store8_out(p, lo);
        }
    } else {
        const rk_u32 lo = pack_e2m1<Scale::none, false>(y, 1.0f, G.sat, false);
        if constexpr (N == 2) rk_store8_out(p, rk_v8{lo, pack_e2m1<Scale::none, false>(y1, 1.0f, G.sat, false)});
        else rk_store4_out(p, lo);
    }
}

// The generic writer: chunk c of token t's row (its values x[8c, 8c + 8): c_kv for c < L_CH, else rotated k_pe),
// stored as segment S of the record says; with N = 2 (a WRITE_PAIRS latent lane) chunks c and c + 1, stored in one
// access. The slot is loaded first but waited for only at the store, like skip_all's above: a slot below min_slot
// (negative, or a reserved row) or past the cache skips the write. The tensor scale is read with them (the lane has
// waited in enter()), or with a.prefetch after the gate: read after the rotation it would add a memory round trip to
// the chain. A block-scaled chunk finds its block's scale with the other lanes of the block before any of them can
// skip.
template <class I, int S, int N = 1>
RK_DEVICE void kv_segment(const args &a, I t, int c, float r_row) {
    constexpr Segment G = SEG[S];
    static_assert(G.outer != Outer::token || G.block > 0, "a per-token outer scale over blocks only");
    static_assert(G.block == 0 || G.from % G.block == 0, "a block starts at a multiple of its values");
    static_assert(N == 1 || (S == 0 && WRITE_PAIRS), "two chunks a lane: the latent of a WRITE_PAIRS record");
    constexpr bool HAS_NOPE = G.from < L, HAS_ROPE = G.from + G.n > L;
    constexpr bool scaled = G.outer == Outer::tensor && G.conv != Scale::none;
    constexpr Scale CONV = scaled ? G.conv : Scale::none;
    const rk_i64 slot = load_index(a.slots, t, SLOT == Index::int64);
    // the row is written for a slot in [min_slot, kv_rows) where the write mask (if any) is set; the mask is loaded
    // with the slot (without a branch on AMD: rk_zero_byte_if, the slot's first byte standing in), both waited for
    // only at the store
    const bool masked = rk_zero_byte_if(a.write_mask != nullptr, a.write_mask, t, a.slots);
    float k_scale = scaled && !prefetching(a) ? *a.k_scale : 1.0f;
    const bool nope = HAS_NOPE && (!HAS_ROPE || c < L_CH);
    f8 y, y1;  // y1: the second chunk of a pair
    rk_v16 raw = {0, 0, 0, 0};
    float r = r_row;  // the norm's factor (a norm over the whole head: the row's, from chunk())
    if (N == 2) {
        gate(a);
        const rk_u16 *src = (const rk_u16 *)a.k_nope + t * (I)a.k_nope_st + c * V;
        raw = rk_load16_ro(src);
        const rk_v16 raw1 = rk_load16_ro(src + V);
        rk_issue_point();
        y = unpack_bf16(raw);
        y1 = unpack_bf16(raw1);
    } else if (nope) {
        gate(a);
        raw = rk_load16_ro((const rk_u16 *)a.k_nope + t * (I)a.k_nope_st + c * V);
        rk_issue_point();  // the chunk's load issues before the slot's range test and its wait
        if constexpr (NORM != Norm::none) {  // from here on the row is the normalized one
            const f8 w = norm_weight8(a, c);  // loaded beside the row, not after its sum
            if constexpr (!HEAD_NORM) r = norm_factor<I>(a, t, c, raw);
            raw = norm8(raw, w, r);
            if (NORM == Norm::rms_out && !(NEG == Neg::skip_all && slot < 0))
                rk_store16_out((rk_u16 *)a.norm_out + t * (I)a.norm_out_st + c * V, raw);
        }
        y = unpack_bf16(raw);
    } else if constexpr (HAS_ROPE) {  // rope none: raw is k_pe's chunk, copied as the latent's
        y = kv_rope8(a, t, c, r, &raw);
    }
    if (scaled && prefetching(a)) k_scale = *a.k_scale;
    const int j = c * V;  // the chunk's first value
    if constexpr (G.elem == Elem::bf16) {
        if (slot < a.min_slot || slot >= a.kv_rows || masked) return;
        for (int i = 0; i < V; i++) y.v[i] = bf16_prep(y.v[i]);
        rk_v16 out = ((nope || ROPE == Rope::none) && !SANITIZE) ? raw : pack_bf16(y);
        rk_store16_out(row_byte(a, slot, value_byte<S>(j)), out);
    } else if constexpr (G.block == 0) {
        if (slot < a.min_slot || slot >= a.kv_rows || masked) return;
        rk_u8 *p = row_byte(a, slot, value_byte<S>(j));
        if constexpr (G.elem == Elem::e4m3)
            rk_store8_out(p, pack_fp8<CONV, SANITIZE>(y, fp8_factor<CONV>(k_scale), G.sat, G.rope_bf16 && !nope));
        else
            rk_store4_out(p, pack_e2m1<CONV, SANITIZE>(y, fp8_factor<CONV>(k_scale), G.sat, G.rope_bf16 && !nope));
    } else {
        const float k = fp8_factor<CONV>(k_scale);
        y = block_prep<S>(y, nope, k);
        float own = amax8(y);
        if (N == 2) {
            y1 = block_prep<S>(y1, true, k);
            own = rk_max_num(own, amax8(y1));
        }
        rk_u32 bits;
        float gs = 1.0f;  // the token scale
        if constexpr (G.outer == Outer::token) gs = token_scale<I, S>(a, t, c, own, r, k);
        const float amax = block_amax<I, S, N>(a, t, c, own, r, k);
        float d = block_scale<S>(amax, gs, &bits);
        if (G.outer == Outer::token) d = d * gs;  // the values are divided by the stored scale times gs
        if (slot < a.min_slot || slot >= a.kv_rows || masked) return;
        rk_u8 *p = row_byte(a, slot, value_byte<S>(j));
        if (G.outer == Outer::token && j == G.from) *(float *)row_byte(a, slot, G.outer_at) = gs;
        y = block_divide<S>(y, d, amax);
        if (N == 2) y1 = block_divide<S>(y1, d, amax);
        store_block_values<S, N>(p, y, y1);
        if ((j - G.from) % G.block == 0) store_block_scale<S>(a, slot, p, j, bits);  // the block's first lane
    }
}

// Chunk c of the KV row (with pair, chunks c and c + 1 of the latent: WRITE_PAIRS): its segment is found by
// comparisons with the segments' constant bounds.
template <class I, int S = 0>
RK_DEVICE void kv_chunk(const args &a, I t, int c, float r, bool pair = false) {
    if constexpr (S == 0 && WRITE_PAIRS) {
        if (pair) {
            kv_segment<I, 0, 2>(a, t, c, r);
            return;
        }
    }
    if constexpr (S + 1 < NSEG) {
        if (c >= SEG_END_CH<S>) {
            kv_chunk<I, S + 1>(a, t, c, r);
            return;
        }
    }
    kv_segment<I, S>(a, t, c, r);
}

// A token's lanes, in two sections, so that no wave mixes rotating lanes (two dependent loads:
// position, then its cos/sin row) with copying lanes (one load): a wave runs divergent paths one
// after the other, and a mixed wave would wait for both chains in turn.
//   rope section: heads * QR query rope chunks, R_CH KV rope chunks, idle lanes up to a whole wave
//   copy section: heads * QN q_nope chunks (absorbed form), L_CH c_kv chunks of the KV row
// A large KV-only launch (q form none, a.kv_group = RK_KV_GROUP) lays out groups of tokens instead, their R_CH
// rope chunks side by side in whole waves, then their L_CH chunks each (L_CH / 2 lanes of two chunks with
// WRITE_PAIRS): a token's R_CH = 8 rope lanes would otherwise idle 24 lanes of a 32-lane wave, and those waves issue
// as many instructions as full ones.
// (rk_launch_plan in gen/desc.c counts the same: a.lanes, the lanes of a token or of a group.)
constexpr int QN = QFORM == QForm::absorbed ? L_CH : 0;  // query chunks copied from q_nope per head
template <class I>
RK_DEVICE I rope_lanes(I heads) { return (heads * QR + R_CH + RK_WAVE - 1) / RK_WAVE * RK_WAVE; }

// The token of lane g (divide()).
template <class I>
RK_DEVICE I token_of(const args &a, I g) { return divide<I>(g, a.lanes, a.lanes_mul, a.lanes_shift); }

// Chunk g of the whole launch. I is int when every offset fits in 31 bits, else long long.
// Row by row (ROWS): q_heads query rows of HC lanes (q form absorbed: q_chunk's numbering is the row's), then the
// KV row's HC lanes. A norm over a row is summed here, where all of the row's lanes are, before they part ways.
template <class I>
RK_DEVICE void row_chunk_of(const args &a, I t, int r) {
    const int row = r / HC, c = r - row * HC;
    if (QFORM != QForm::none && row < (int)a.q_heads) {
        if (t >= (I)a.tokens) return;  // past the query rows
        enter(a);
        if (row >= (int)a.heads) {
            q_pad<I>(a, t, row, c);
            return;
        }
        float rq = 1.0f;
        if constexpr (Q_NORM == QNorm::rms) {
            gate(a);
            rq = row_factor((const rk_u16 *)a.q_nope + t * (I)a.q_nope_st + row * (I)a.q_nope_sh,
                            (const rk_u16 *)a.q_pe + t * (I)a.q_pe_st + row * (I)a.q_pe_sh, c, Q_NORM_EPS);
        }
        q_chunk<I>(a, t, row, c, rq);
        return;
    }
    if (t >= (I)a.kv_tokens) return;  // past the KV rows
    enter(a);
    float rk = 1.0f;
    if constexpr (HEAD_NORM) {
        gate(a);
        rk = row_factor((const rk_u16 *)a.k_nope + t * (I)a.k_nope_st, (const rk_u16 *)a.k_pe + t * (I)a.k_pe_st, c,
                        NORM_EPS);
    }
    kv_chunk<I>(a, t, c, rk);
}

static_assert(RK_KV_GROUP == 1 || (QFORM == QForm::none && !ROWS && RK_KV_GROUP * R_CH % RK_WAVE == 0),
              "a group's rope chunks fill whole waves");

// A lane's place within its token (r < a.lanes < 2^31: the launch plan) is 32-bit index math in both entries.
template <class I>
RK_DEVICE void chunk(const args &a, I g) {
    const int heads = (int)a.q_heads, rope = rope_lanes<int>(heads);
    I t = token_of<I>(a, g);  // the group's, for a KV-only launch of groups
    int r = (int)(g - t * (I)a.lanes);
    bool pair = false;  // a latent lane of two chunks (WRITE_PAIRS)
    if constexpr (RK_KV_GROUP > 1) {
        if (a.kv_group > 1) {  // lane r of the group: token k's, numbered as in a launch of a token a group
            constexpr int ROPE = RK_KV_GROUP * R_CH;           // the group's rope section
            constexpr int KL = WRITE_PAIRS ? L_CH / 2 : L_CH;  // a token's latent lanes
            int k;
            if (r < ROPE) {
                k = r / R_CH;
                r -= k * R_CH;  // the token's rope lane
            } else {
                k = (r - ROPE) / KL;
                r -= ROPE + k * KL;  // the token's latent lane
                pair = WRITE_PAIRS;
                r = rope + (pair ? 2 * r : r);  // its (first) chunk's lane in a launch of a token a group
            }
            t = t * RK_KV_GROUP + k;
        }
    }
    if constexpr (ROWS) {
        row_chunk_of<I>(a, t, r);
        return;
    }
    int h = 0;
    int c;  // chunk within the query row (q_chunk's numbering) or the KV row
    bool q_lane;
    if (r < rope) {
        q_lane = r < heads * QR;
        if (q_lane) {
            h = r / QR;
            c = (QFORM == QForm::absorbed ? L_CH : 0) + (r - h * QR);
        } else if (r < heads * QR + R_CH) {
            c = L_CH + (r - heads * QR);
        } else {
            return;  // idle up to the end of the wave
        }
    } else {
        r -= rope;
        q_lane = r < heads * QN;
        if (q_lane) {
            h = r / L_CH;
            c = r - h * L_CH;
        } else {
            c = r - heads * QN;
        }
    }
    if (q_lane) {
        if (t >= (I)a.tokens) return;  // past the query rows
        enter(a);
        if (h >= (int)a.heads) q_pad<I>(a, t, h, c);
        else q_chunk<I>(a, t, h, c, 1.0f);
    } else {
        if (t >= (I)a.kv_tokens) return;  // past the KV rows
        enter(a);
        kv_chunk<I>(a, t, c, 1.0f, pair);
    }
}

}  // namespace rk
