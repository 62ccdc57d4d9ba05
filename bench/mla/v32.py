"""--mode v32: DeepSeek-V3.2's writer, the fp8_tile row (656 bytes: 4 tiles of 128 fp8 latent values, their 4 float32
scales, the 64 rope values in bf16) in a paged cache, with the absorbed query or none: the problem, the reference
(ropekv's arithmetic) and the checks. The sweep is jobs.py's."""
from .numerics import BF16_ULP, FP8_ULP, _decode, _outside, _ulp, compare_bits, tile_row_bytes
from .shapes import FP8_MAX, L, MAX_POS, NTILES, R, ROPE_AT, ROW_BYTES, SCALES_AT, TILE, W
from .write import Reference


class V32Problem:
    """DeepSeek-V3.2's writer inputs: q [T, H, 576] (q_nope | q_pe), the projection [T, 576] (k_nope | k_pe), the
    latents' tiles spread over a wide range (each token's 4 tiles scaled by 2^-4 .. 2^4), random positions, a
    paged uint8 cache [blocks, block_size, 656], slots a permutation of its rows (the last row is the eager
    sequence's scratch row)."""

    def __init__(self, torch, T, H, dev, cos_sin_cache, seed, block_size):
        self.torch, self.T, self.H, self.dev, self.kv = torch, T, H, dev, "fp8_tile"
        g = torch.Generator(device=dev).manual_seed(seed)
        bf = torch.bfloat16
        self.q = torch.randn(T, H, W, device=dev, dtype=bf, generator=g)
        self.q_nope, self.q_pe = self.q[..., :L], self.q[..., L:]
        proj = torch.randn(T, W, device=dev, dtype=torch.float32, generator=g)
        spread = torch.exp2(torch.randint(-4, 5, (T, NTILES, 1), device=dev, generator=g).float())
        proj[:, :L] = (proj[:, :L].reshape(T, NTILES, TILE) * spread).reshape(T, L)
        self.proj = proj.to(bf)
        self.k_nope, self.k_pe = self.proj[:, :L], self.proj[:, L:]
        self.positions = torch.randint(0, MAX_POS, (T,), device=dev, generator=g, dtype=torch.int64)
        self.block_size = block_size
        self.blocks = (T + 1 + block_size - 1) // block_size
        self.rows = self.blocks * block_size
        self.slots = torch.randperm(self.rows - 1, device=dev, generator=g)[:T].to(torch.int64)
        self.cos_sin_cache = cos_sin_cache

    def new_cache(self):
        return self.torch.zeros(self.blocks, self.block_size, ROW_BYTES, device=self.dev, dtype=self.torch.uint8)

    def new_q_out(self):
        return self.torch.empty(self.T, self.H, W, device=self.dev, dtype=self.torch.bfloat16)


class V32Reference:
    """The V3.2 writer's outputs in ropekv's arithmetic: the query rope and the KV rope (Reference._rope: one
    rounded product, one fma) rounded to bf16 with their tolerances for two-rounding peers, and the 656-byte rows
    (tile_row_bytes). lat_tol: per latent code, one fp8 step at max(|expected|, |x / scale|), for a peer whose
    division is not correctly rounded (torch.compile's generated Triton)."""

    def __init__(self, torch, pb, q=True, chunk_elems=1 << 24):
        half = R // 2
        cs = pb.cos_sin_cache.index_select(0, pb.positions)
        q_rope, q_tol = [], []
        step = max(1, chunk_elems // (pb.H * R))
        for t0 in range(0, pb.T if q else 0, step):
            sl = slice(t0, min(pb.T, t0 + step))
            y, m = Reference._rope(torch, pb.q_pe[sl], cs[sl, None, :half], cs[sl, None, half:])
            q_rope.append(y.to(torch.bfloat16))
            q_tol.append(_ulp(torch, torch.maximum(_decode(torch, q_rope[-1]).abs(), m), *BF16_ULP).float())
        self.q_rope = torch.cat(q_rope) if q_rope else None
        self.q_tol = torch.cat(q_tol) if q_tol else None
        y, m = Reference._rope(torch, pb.k_pe, cs[:, :half], cs[:, half:])
        self.kv_rope = y.to(torch.bfloat16)
        self.kv_tol = _ulp(torch, torch.maximum(_decode(torch, self.kv_rope).abs(), m), *BF16_ULP).float()
        self.rows, scale = tile_row_bytes(torch, pb.k_nope, self.kv_rope)
        quot = (pb.k_nope.double().reshape(pb.T, NTILES, TILE) / scale.double()[..., None]).abs().reshape(pb.T, L)
        self.lat_tol = _ulp(torch, torch.maximum(_decode(torch, self.rows[:, :L]).abs(), quot.clamp(max=FP8_MAX)),
                            *FP8_ULP).float()


def check_v32(torch, pb, ref, outs, form, chunk_elems=1 << 25):
    """(ok, max steps, fraction bit-identical, elements failing) of a V3.2 writer's outputs: each token's 656-byte
    row at its slot (the latent codes bit-identical or within lat_tol, the float32 scales bit-identical or within
    2 ulps, the bf16 rope part bit-identical or within kv_tol), every other row untouched (zero), and for the
    absorbed form q_out (q_nope bit-identical, the rope part within q_tol)."""
    flat = outs["cache"].view(-1, ROW_BYTES)
    rows = flat[pb.slots]
    worst = same = n = bad = 0

    def add(r):
        nonlocal worst, same, n
        worst, same, n = max(worst, r[0]), same + r[1], n + r[2]
        return r[2] - r[1]

    add(compare_bits(torch, rows[:, :L], ref.rows[:, :L], "fp8"))
    bad += _outside(torch, rows[:, :L], ref.rows[:, :L], ref.lat_tol)
    gs = rows[:, SCALES_AT:ROPE_AT].contiguous().view(torch.float32)
    ws = ref.rows[:, SCALES_AT:ROPE_AT].contiguous().view(torch.float32)
    eq = gs.view(torch.int32) == ws.view(torch.int32)
    same, n = same + int(eq.sum()), n + eq.numel()
    bad += int(((gs.double() - ws.double()).abs() > ws.double().abs() * 2.0 ** -22).sum())
    gr = rows[:, ROPE_AT:].contiguous().view(torch.bfloat16)
    add(compare_bits(torch, gr, ref.kv_rope, "bf16"))
    bad += _outside(torch, gr, ref.kv_rope, ref.kv_tol)
    untouched = torch.ones(pb.rows - 1, dtype=torch.bool, device=flat.device)
    untouched[pb.slots] = False
    others = flat[:pb.rows - 1][untouched]
    bad += add(compare_bits(torch, others, torch.zeros_like(others), "fp8"))
    if form == "absorbed":
        step = max(1, chunk_elems // (pb.H * W))
        q_out = outs["q_out"]
        for t0 in range(0, pb.T, step):
            sl = slice(t0, min(pb.T, t0 + step))
            bad += add(compare_bits(torch, q_out[sl, :, :L], pb.q_nope[sl], "bf16"))
            add(compare_bits(torch, q_out[sl, :, L:], ref.q_rope[sl], "bf16"))
            bad += _outside(torch, q_out[sl, :, L:], ref.q_rope[sl], ref.q_tol[sl])
    return bad == 0, worst, same / max(n, 1), bad
