"""--mode read: the read-back op, T rows gathered by slot and dequantized to bf16 [T, 576] (zeros for padding), from
an fp8_tile (deepseek_v32, paged), fp8_e4m3 or bf16 (deepseek_v3, flat) cache: the problem, the reference (built
apart from the methods, from the exact e4m3 decoding table) and the check. The sweep is jobs.py's."""
from .numerics import _fp8_codes, compare_bits, tile_row_bytes
from .shapes import FP8_MAX, L, NTILES, R, READ_KV, ROPE_AT, ROW_BYTES, SCALES_AT, TILE, W

rkref = None  # ropekv.reference, set by env.bind() in main()


class ReadProblem:
    """The read-back's inputs: a cache of the kv dtype in the layout the spec benchmarked holds it (fp8_tile:
    deepseek_v32's paged uint8 [blocks, block_size, 656]; fp8_e4m3 and bf16: deepseek_v3's flat [rows, 576]) with
    rows as a writer leaves them, and slots: T distinct rows, every 64th token (the 64th, 128th, ...) padding (-1: a
    zero row)."""

    def __init__(self, torch, T, kv, dev, seed, block_size, k_scale):
        self.torch, self.T, self.H, self.kv, self.dev = torch, T, 1, kv, dev
        self.spec, self.layout = READ_KV[kv]
        B = block_size if self.layout == "paged" else 1
        self.rows = (T + B) // B * B
        g = torch.Generator(device=dev).manual_seed(seed)
        v = torch.randn(self.rows, W, device=dev, generator=g)
        if kv == "bf16":
            self.cache = v.to(torch.bfloat16)
        elif kv == "fp8_e4m3":
            self.cache = _fp8_codes(torch, (v * 8).clamp(-FP8_MAX, FP8_MAX))
        else:
            spread = torch.exp2(torch.randint(-4, 5, (self.rows, NTILES, 1), device=dev, generator=g).float())
            lat = (v[:, :L].reshape(self.rows, NTILES, TILE) * spread).reshape(self.rows, L).to(torch.bfloat16)
            self.cache = tile_row_bytes(torch, lat, v[:, L:].to(torch.bfloat16))[0].view(self.rows // B, B, ROW_BYTES)
        slots = torch.randperm(self.rows, device=dev, generator=g)[:T].to(torch.int64)
        slots[63::64] = -1
        self.slots = slots
        self.k_scale = k_scale

    def flat(self):
        return self.cache.view(-1, self.cache.shape[-1])

    def new_out(self):
        return self.torch.empty(self.T, W, device=self.dev, dtype=self.torch.bfloat16)


def read_reference(torch, pb):
    """The expected out, built apart from the methods' code: the rows of the valid slots, each fp8 code's value from
    the exact decoding table (ropekv.reference.e4m3_values), times k_scale or its tile's scale as one float32 product, rounded to
    bf16; a bf16 row as it is; zero rows for padding."""
    want = torch.zeros(pb.T, W, dtype=torch.bfloat16, device=pb.dev)
    ok = (pb.slots >= 0).nonzero().reshape(-1)
    rows = pb.flat()[pb.slots[ok]]
    if pb.kv == "bf16":
        want[ok] = rows
        return want
    b = rows.view(torch.uint8)
    if pb.kv == "fp8_e4m3":
        want[ok] = (rkref.e4m3_values(b) * pb.k_scale.float()).to(torch.bfloat16)
        return want
    n = b.shape[0]
    scale = b[:, SCALES_AT:ROPE_AT].contiguous().view(torch.float32).repeat_interleave(TILE, dim=1)
    want[ok, :L] = (rkref.e4m3_values(b[:, :L]) * scale).to(torch.bfloat16)
    want[ok, L:] = b[:, ROPE_AT:].contiguous().view(torch.bfloat16).reshape(n, R)
    return want


def check_read(torch, pb, want, outs):
    """Every element of out bit-identical to the reference (NaN == NaN): the op is one float32 operation rounded to
    bf16 per value, with no room for another result."""
    worst, same, n = compare_bits(torch, outs["out"], want, "bf16")
    return same == n, worst, same / max(n, 1), n - same
