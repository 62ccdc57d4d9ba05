"""The PyTorch model the binding's tests compare ropekv with, bit for bit: the specs' parameters, inputs built the way
engines lay them out (make_inputs), and the op in PyTorch doing ropekv's arithmetic (reference; tile_rows for the
fp8_tile row, read_reference for the read-back op)."""
from _support import ref


SPECS = {
    "deepseek_v3": dict(L=512, R=64, rope="gptj", cos_sin="f32_cat", scale="mul_recip", sat=448.0, rr=False,
                        neg="skip_kv", sanitize=False, pos="int64", nope_head=128,
                        q_scale="mul_recip", q_sat=448.0, q_rr=False),  # fp8 query: FlashInfer / aiter style
    "kimi_k2": dict(L=512, R=64, rope="gptj", cos_sin="f32_cat", scale="div", sat=448.0, rr=False,
                    neg="skip_all", sanitize=True, pos="int32", nope_head=128,
                    q_scale="mul_recip", q_sat=448.0, q_rr=True),  # fp8 query: vLLM's QuantFP8
    "minicpm3_4b": dict(L=256, R=32, rope="neox", cos_sin="f32_split", scale="none", sat=448.0, rr=True,
                        neg="skip_kv", sanitize=False, pos="int64", nope_head=64,
                        q_scale="mul", q_sat=448.0, q_rr=True),
    "deepseek_v2_lite": dict(L=512, R=64, rope="gptj", cos_sin="bf16_split", scale="mul", sat=448.0, rr=False,
                             neg="skip_kv", sanitize=False, pos="int64", nope_head=128),
    # DeepSeek-V3.2: the fp8_tile row (vLLM's fp8_ds_mla): 4 tiles of 128 fp8 values, 4 float32 scales, 64 bf16
    "deepseek_v32": dict(L=512, R=64, rope="gptj", cos_sin="f32_cat", scale="none", sat=448.0, rr=False,
                         neg="skip_kv", sanitize=False, pos="int64", nope_head=128,
                         q_scale="mul_recip", q_sat=448.0, q_rr=False,
                         tile=128, tile_scale="f32", scales_at=512, rope_at=528, row_bytes=656),
    # the same row with power-of-two scales (E8M0 readers: FlashMLA sm_100, FlashInfer sm_120)
    "deepseek_v32_pow2": dict(L=512, R=64, rope="gptj", cos_sin="f32_cat", scale="none", sat=448.0, rr=False,
                              neg="skip_kv", sanitize=False, pos="int64", nope_head=128,
                              tile=128, tile_scale="pow2", scales_at=512, rope_at=528, row_bytes=656),
}
BF16_MAX = 3.38953139e38


def make_inputs(torch, spec, q, kv, T, H, device, slots_dtype="int64", specials=False, seed=0, kv_tokens=None,
                min_slot=0, q_dtype="bf16", q_scale=None, q_specials=False):
    """Random inputs as engines pass them: q_nope/q_pe slices of one query buffer, k_nope/k_pe slices of the
    kv projection output, a paged cache [blocks, 16, W], positions (a few past max_pos, to test the clamp),
    slots (a permutation, every 5th token padding (-1), one past the cache). kv_tokens: slots for that many
    tokens (default T); the projection and positions cover max(T, kv_tokens). min_slot > 0: one slot points
    at the reserved slot 0. An fp8 cache is float8_e4m3fn where torch has it, else uint8.
    q_dtype "fp8_e4m3": q_out is uint8 (0x5A where nothing is written; zero_copy: [..., :L] random fp8 codes, as
    the BMM leaves them), q_scale a float32 tensor of the value q_scale. q_specials: NaN, +-inf and values far
    past the fp8 range in the query (it is not sanitized)."""
    s = SPECS[spec]
    g = torch.Generator().manual_seed(seed)

    def dev(t):  # bases go to the device first, views are taken there (so they stay views)
        return t.to(device)

    x = _query_inputs(torch, s, q, T, H, g, dev, q_dtype == "fp8_e4m3", q_specials)
    max_pos = 512
    x.update(_kv_inputs(torch, s, kv, T, T if kv_tokens is None else kv_tokens, g, dev, specials, slots_dtype,
                        max_pos))
    x.update(_cos_sin_inputs(torch, s, g, max_pos))
    if kv == "fp8_e4m3" and s["scale"] != "none":
        x["k_scale"] = torch.tensor([0.75], dtype=torch.float32)
    if q_dtype == "fp8_e4m3" and q != "none" and q_scale is not None:
        x["q_scale"] = torch.tensor([q_scale], dtype=torch.float32)
    for name in ("kv_cache", "positions", "slots", "cos_sin", "sin", "k_scale", "q_scale"):
        if name in x:
            x[name] = dev(x[name])
    return x


def _query_inputs(torch, s, q, T, H, g, dev, fp8_q, q_specials):
    """make_inputs' query tensors: q_nope / q_pe slices of one [T, H, W] query (absorbed) or q_pe a slice of a
    [T, H, nope_head + R] one (zero_copy, inplace), and q_out filled with a sentinel (zero_copy: [..., :L] written,
    as the absorption GEMM leaves it); none for q form none."""
    L, R, W = s["L"], s["R"], s["L"] + s["R"]
    bf = torch.bfloat16

    def randn(*shape):
        return torch.randn(*shape, generator=g).to(bf)

    x = {}
    sentinel = -777.0

    def query(*shape):
        v = randn(*shape)
        if q_specials and v.numel() >= 8:
            f = v.view(-1)
            n = f.numel()
            f[0], f[n // 7], f[n // 5], f[n // 3] = float("nan"), float("inf"), float("-inf"), 3.0e38
            f[n // 2], f[n - 1], f[n - 2] = -5000.0, 600.0, -1.0e-6
        return v

    def q_out_buf():
        if fp8_q:
            return torch.full((T, H, W), 0x5A, dtype=torch.uint8)
        return torch.full((T, H, W), sentinel, dtype=bf)

    if q == "absorbed":
        qb = dev(query(T, H, W))
        x["q_nope"], x["q_pe"] = qb[..., :L], qb[..., L:]
        x["q_out"] = dev(q_out_buf())
    elif q == "zero_copy":
        qp = dev(query(T, H, s["nope_head"] + R))
        x["q_pe"] = qp[..., s["nope_head"]:]
        qo = q_out_buf()
        if fp8_q:  # the absorption GEMM's epilogue quantized q_nope with the same q_scale
            qo[..., :L] = ref.e4m3_codes((randn(T, H, L).float() * 4).clamp(-448, 448))
        else:
            qo[..., :L] = randn(T, H, L)  # written by the absorption GEMM
        x["q_out"] = dev(qo)
    elif q == "inplace":
        qp = dev(query(T, H, s["nope_head"] + R))
        x["q_pe"] = qp[..., s["nope_head"]:]
    return x


def _kv_inputs(torch, s, kv, T, K, g, dev, specials, slots_dtype, max_pos):
    """make_inputs' KV tensors: k_nope / k_pe slices of the projection (max(T, K) tokens; specials: NaN and +-inf in
    it), the paged cache filled with a sentinel, positions (one past max_pos) and slots for K tokens."""
    L, W = s["L"], s["L"] + s["R"]
    bf = torch.bfloat16
    x = {}
    sentinel = -777.0
    P = max(T, K)
    proj = torch.randn(P, W, generator=g).to(bf)
    if specials and P >= 5:
        proj[1, 3] = float("nan")
        proj[2, 7] = float("inf")
        proj[4, L + 2] = float("-inf")
        proj[1, L + 5] = float("nan")
    proj = dev(proj)
    x["k_nope"], x["k_pe"] = proj[:, :L], proj[:, L:]
    blocks = (2 * T + 15) // 16 + 1
    rows = blocks * 16
    if kv == "bf16":
        cache = torch.full((blocks, 16, W), sentinel, dtype=bf)
    elif kv == "fp8_tile":
        cache = torch.full((blocks, 16, s["row_bytes"]), 0x5A, dtype=torch.uint8)
    else:
        cache = torch.full((blocks, 16, W), 0x5A, dtype=torch.uint8)
        if hasattr(torch, "float8_e4m3fn"):
            cache = cache.view(torch.float8_e4m3fn)
    x["kv_cache"] = cache
    pos = torch.randint(0, max_pos, (P,), generator=g)
    if P >= 3:
        pos[2] = max_pos + 3
    slots = torch.randperm(rows - 1, generator=g)[:K] + 1
    slots[::5] = -1
    if K >= 4:
        slots[3] = rows + 5  # past the cache: no KV write, q rows still written
    if K >= 2:
        slots[1] = 0  # the reserved row when min_slot > 0
    x["positions"] = pos.to(torch.int64 if s["pos"] == "int64" else torch.int32)
    x["slots"] = slots.to(torch.int64 if slots_dtype == "int64" else torch.int32)
    return x


def _cos_sin_inputs(torch, s, g, max_pos):
    """make_inputs' cos/sin table(s) of the spec's layout over max_pos positions, with a random mscale folded in."""
    R = s["R"]
    bf = torch.bfloat16
    x = {}
    half = R // 2
    inv = 10000.0 ** (-torch.arange(half, dtype=torch.float64) * 2 / R)
    ang = torch.arange(max_pos, dtype=torch.float64)[:, None] * inv[None, :]
    mscale = 1.0 + 0.1 * torch.rand(1, generator=g, dtype=torch.float64)  # folded in like YaRN's mscale
    c, sn = (ang.cos() * mscale).float(), (ang.sin() * mscale).float()
    if s["cos_sin"] == "f32_cat":
        x["cos_sin"] = torch.cat([c, sn], dim=1).contiguous()
    else:
        x["cos_sin"], x["sin"] = c.contiguous(), sn.contiguous()
        if s["cos_sin"] == "bf16_split":
            x["cos_sin"], x["sin"] = x["cos_sin"].to(bf), x["sin"].to(bf)
    return x


def q_fp8_reference(torch, spec, v, q_scale):
    """The fp8 query element of the float32 values v (the q_nope values, or the rope floats already rounded to
    bf16 when the spec's q_fp8 policy says so): scale with q_scale by the spec's convention (mul_recip: a float32
    reciprocal first), clamp to +-q_sat (NaN passes), round to OCP e4m3. No sanitizing."""
    s = SPECS[spec]
    if s["q_scale"] == "mul_recip":
        v = v * (1.0 / q_scale)
    elif s["q_scale"] == "div":
        v = v / q_scale
    elif s["q_scale"] == "mul":
        v = v * q_scale
    return ref.e4m3_codes(v.clamp(-s["q_sat"], s["q_sat"]))


FLT_MIN = 2.0 ** -126


def tile_scales(torch, x, sat, pow2=False):
    """The float32 scale of each tile (the last dimension of x, float32): max(amax / sat, FLT_MIN), amax the
    largest |x| ignoring NaN (an inf amax gives an inf scale), the quotient a float32 division; pow2 rounds a
    finite scale up to a power of two."""
    a = x.abs()
    amax = torch.where(torch.isnan(a), torch.zeros_like(a), a).amax(dim=-1)
    # a tensor divisor: torch divides by a Python number on CUDA as a multiply by its reciprocal
    scale = torch.clamp(amax / torch.full_like(amax, sat), min=FLT_MIN)
    if pow2:
        m, e = torch.frexp(scale)  # scale = m * 2^e, m in [0.5, 1): a power of two when m == 0.5
        up = torch.ldexp(torch.ones_like(scale), e.to(torch.int64))
        scale = torch.where((m == 0.5) | ~torch.isfinite(scale), scale, up)
    return scale


def tile_rows(torch, spec, k_nope, rope_bf16):
    """The fp8_tile rows (uint8 [K, row_bytes]) of the bf16 latents k_nope [K, L] and rope parts rope_bf16 [K, R]
    (already rotated, rounded to bf16): each tile of `tile` latent values x becomes fp8(x / scale) (a float32
    division, clamped to +-sat, NaN kept, OCP e4m3 to nearest even), the float32 scales at scales_at and the
    bf16 rope values at rope_at, little-endian as the device writes them."""
    s = SPECS[spec]
    L, tile, sat = s["L"], s["tile"], s["sat"]
    K = k_nope.shape[0]
    x = k_nope.float().reshape(K, L // tile, tile)
    scale = tile_scales(torch, x, sat, s["tile_scale"] == "pow2")
    v = (x / scale[..., None]).clamp(-sat, sat)
    out = torch.zeros(K, s["row_bytes"], dtype=torch.uint8, device=k_nope.device)
    out[:, :L] = ref.e4m3_codes(v).reshape(K, L)
    out[:, s["scales_at"]:s["scales_at"] + 4 * (L // tile)] = scale.contiguous().view(torch.uint8)
    out[:, s["rope_at"]:s["rope_at"] + 2 * s["R"]] = rope_bf16.contiguous().view(torch.uint8)
    return out


def read_rows(torch, spec, kv, rows, k_scale=None):
    """What the read-back op makes of cache rows (flat [n, W] bf16, [n, W] fp8 bytes or [n, row_bytes] fp8_tile
    bytes): bf16 [n, W]. bf16 rows as they are; fp8 e4m3: value * k_scale (mul_recip, div) or value / k_scale
    (mul) in float32, rounded to bf16; fp8_tile: value * its tile's float32 scale, rounded to bf16, the rope part's
    bf16 values as they are."""
    s = SPECS[spec]
    L, R = s["L"], s["R"]
    if kv == "bf16":
        return rows.clone()
    n = rows.shape[0]
    if kv == "fp8_e4m3":
        v = ref.e4m3_values(rows.view(torch.uint8))
        if s["scale"] in ("mul_recip", "div"):
            v = v * k_scale
        elif s["scale"] == "mul":
            v = v / k_scale
        return v.to(torch.bfloat16)
    b = rows.view(torch.uint8)
    scale = b[:, s["scales_at"]:s["scales_at"] + 4 * (L // s["tile"])].contiguous().view(torch.float32)
    v = ref.e4m3_values(b[:, :L]).reshape(n, L // s["tile"], s["tile"]) * scale[..., None]
    rope = b[:, s["rope_at"]:s["rope_at"] + 2 * R].contiguous().view(torch.bfloat16)
    return torch.cat([v.reshape(n, L).to(torch.bfloat16), rope], dim=-1)


def read_reference(torch, spec, kv, flat, slots, k_scale=None, min_slot=0, prior=None, negative="zero"):
    """The read-back op on a flat view of the cache rows (flat [rows, row width]): out [T, W] bf16 with the rows of
    slots, dequantized (read_rows). A row whose slot is below min_slot or past the rows is zero (read
    negative_slot "zero") or keeps prior's row ("skip"; prior: out's contents before the launch)."""
    s = SPECS[spec]
    T = slots.shape[0]
    sl = slots.long()
    valid = (sl >= min_slot) & (sl < flat.shape[0])
    want = torch.zeros(T, s["L"] + s["R"], dtype=torch.bfloat16) if prior is None else prior.clone()
    if negative == "zero":
        want[~valid] = 0
    idx = sl[valid]
    if idx.numel():
        want[valid] = read_rows(torch, spec, kv, flat[idx], k_scale)
    return want


def reference(torch, spec, q, kv, x, min_slot=0, q_dtype="bf16"):
    """The op in PyTorch, doing ropekv's arithmetic (docs/numerics.md, gen/ref.c): the rope as ropekv.reference.rope (one
    rounded product, one fused multiply-add, emulated exactly), bf16 by round to nearest even (torch's
    .to(bfloat16)), fp8 by scale (mul_recip: x * float32(1/k); div: x / k; mul: x * k; none), sanitize
    (NaN -> 0, +-inf -> +-bound), clamp to the bound (NaN passes through), then e4m3_codes (OCP, round to
    nearest even), with the rope float rounded to bf16 first when the spec sets rope_bf16_round.
    Query rows for the T tokens of the q tensors, KV rows for the K tokens of slots (a slot below min_slot is
    not written; with skip_all a negative slot skips the token's query rows, a token past K has none).
    q_dtype "fp8_e4m3": the query output as q_fp8_reference (OCP codes; the rope float rounded to bf16 first when
    the spec's q policy sets it): q_out [T,H,W] uint8 (absorbed: fp8(q_nope) | fp8(rope); zero_copy: [..., L:]
    only), inplace: q_pe's bytes with the R codes over the first R bytes of each row ("q_pe" is then uint8
    [T,H,2R]).
    Returns the expected q_out, q_pe and kv_cache (clones of the inputs with the op applied)."""
    s = SPECS[spec]
    half = s["R"] // 2
    max_pos = x["cos_sin"].shape[0]
    slot = x["slots"].long()
    K = slot.shape[0]
    qref = x.get("q_pe", x.get("q_out"))
    T = qref.shape[0] if qref is not None else K
    pos = x["positions"].long().clamp(0, max_pos - 1)
    if s["cos_sin"] == "f32_cat":
        c_all, sn_all = x["cos_sin"][pos, :half], x["cos_sin"][pos, half:]
    else:
        c_all, sn_all = x["cos_sin"][pos].float(), x["sin"][pos].float()
    c, sn = c_all[:T], sn_all[:T]
    write_q = torch.ones(T, dtype=torch.bool, device=slot.device)
    if s["neg"] == "skip_all":
        n = min(T, K)
        write_q[:n] = slot[:n] >= 0
    out = _query_reference(torch, spec, q, x, c, sn, write_q, q_dtype)
    out["kv_cache"] = _kv_reference(torch, spec, kv, x, slot, K, c_all[:K], sn_all[:K], min_slot)
    return out


def _query_reference(torch, spec, q, x, c, sn, write_q, q_dtype):
    """reference()'s query outputs ("q_out" or "q_pe"; none for q form none) of the rows write_q selects, with the
    rows' cos c and sin sn."""
    s = SPECS[spec]
    L, R = s["L"], s["R"]
    out = {}
    if q_dtype == "fp8_e4m3" and q != "none":
        qr = ref.rope(x["q_pe"], c[:, None, :], sn[:, None, :], s["rope"])
        if s["q_rr"]:
            qr = qr.to(torch.bfloat16).float()
        qs = x.get("q_scale")
        if qs is None:  # no query rows (T = 0): nothing is quantized
            qs = torch.ones(1, device=qr.device)
        qr8 = q_fp8_reference(torch, spec, qr, qs)
        if q == "inplace":
            qp = x["q_pe"].view(torch.uint8).clone()
            qp[write_q, :, :R] = qr8[write_q]
            out["q_pe"] = qp
        else:
            qo = x["q_out"].view(torch.uint8).clone()
            if q == "absorbed":
                qo[write_q, :, :L] = q_fp8_reference(torch, spec, x["q_nope"].float(), qs)[write_q]
            qo[write_q, :, L:] = qr8[write_q]
            out["q_out"] = qo
    elif q in ("absorbed", "zero_copy"):
        qo = x["q_out"].clone()
        qr = ref.rope(x["q_pe"], c[:, None, :], sn[:, None, :], s["rope"]).to(torch.bfloat16)
        if q == "absorbed":
            qo[write_q, :, :L] = x["q_nope"][write_q]
        qo[write_q, :, L:] = qr[write_q]
        out["q_out"] = qo
    if q == "inplace" and "q_pe" not in out:  # bf16 (the fp8 query output is made above)
        qp = x["q_pe"].clone()
        qr = ref.rope(x["q_pe"], c[:, None, :], sn[:, None, :], s["rope"]).to(torch.bfloat16)
        qp[write_q] = qr[write_q]
        out["q_pe"] = qp
    return out


def _kv_reference(torch, spec, kv, x, slot, K, c, sn, min_slot):
    """reference()'s kv_cache: a clone of the input's with the rows of the K tokens' slots (min_slot and up, within the
    cache) written; c and sn the K tokens' cos and sin."""
    s = SPECS[spec]
    cache = x["kv_cache"].clone()
    flat = cache.view(-1, cache.shape[-1])
    rows = flat.shape[0]
    valid = (slot >= min_slot) & (slot < rows)
    k_nope, k_pe = x["k_nope"][:K], x["k_pe"][:K]
    kr = ref.rope(k_pe, c, sn, s["rope"])
    if kv == "bf16":
        if s["sanitize"]:
            row = torch.cat([k_nope.float(), kr], dim=-1)
            # NaN -> 0, then clamped to the bf16 max: an inf, and a float that would round to inf, store +-0x7f7f
            row = torch.nan_to_num(row, nan=0.0).clamp(-BF16_MAX, BF16_MAX).to(torch.bfloat16)
        else:
            row = torch.cat([k_nope, kr.to(torch.bfloat16)], dim=-1)
        flat[slot[valid]] = row[valid]
    elif kv == "fp8_tile":
        flat[slot[valid]] = tile_rows(torch, spec, k_nope, kr.to(torch.bfloat16))[valid]
    else:
        if s["rr"]:
            kr = kr.to(torch.bfloat16).float()
        v = torch.cat([k_nope.float(), kr], dim=-1)
        ks = x.get("k_scale")
        if s["scale"] == "mul_recip":
            v = v * (1.0 / ks)
        elif s["scale"] == "div":
            v = v / ks
        elif s["scale"] == "mul":
            v = v * ks
        sat = s["sat"]
        if s["sanitize"]:
            v = torch.nan_to_num(v, nan=0.0, posinf=sat, neginf=-sat)
        v = v.clamp(-sat, sat)
        flat8 = cache.view(torch.uint8).view(-1, cache.shape[-1])
        flat8[slot[valid]] = ref.e4m3_codes(v)[valid]
    return cache
