"""The case runners the binding's tests (and test_ops.py) share: one launch on make_inputs' tensors compared bit for bit
with reference() (run_and_check); caches laid out as engines hold them, with padding (layout_cache), and a write
into one (run_layout_case); a read-back of random rows (run_read_case); the fused kv_a RMSNorm against the unfused
composition (run_norm_case); and the layout and read case lists."""
from _reference import SPECS, make_inputs, read_reference, reference
from _support import _equal_bits, _first_differences, _same_bits, compare_bits, ref


# ---- one launch against the reference -------------------------------------------------------------------------
def run_and_check(torch, ctx, spec, q, kv, T, H, device, slots_dtype="int64", specials=False, seed=0, kv_tokens=None,
                  min_slot=0, q_dtype="bf16", q_scale=None, q_specials=False, q_out_dtype=None, via="kernel"):
    """One launch of spec's (q, kv, q_dtype) kernel on make_inputs' tensors, every output compared bit for bit
    with reference(). q_scale: the fp8 query's scale value; q_out_dtype: the fp8 q_out passed as this dtype (a
    view of the uint8 buffer, e.g. torch.float8_e4m3fn). via: "kernel" (Kernel.__call__) or "op" (ropekv.ops.write,
    the torch.ops.ropekv operator)."""
    k = ctx.kernel(spec, kv=kv, q=q, positions=SPECS[spec]["pos"], slots=slots_dtype, q_dtype=q_dtype)
    s = SPECS[spec]
    assert (k.info.L, k.info.R, k.info.rope, k.info.cos_sin, k.info.q) == (s["L"], s["R"], s["rope"], s["cos_sin"], q)
    assert k.info.negative_slot == s["neg"] and k.info.sanitize == s["sanitize"]
    if kv != "bf16":
        assert k.info.fp8_format == "ocp", "these tests compare with OCP e4m3 (e4m3_codes)"
        assert (k.info.scale, k.info.sat, k.info.rope_bf16_round) == (s["scale"], s["sat"], s["rr"])
    fp8_q = q_dtype == "fp8_e4m3" and q != "none"
    if fp8_q:
        i = k.info
        assert i.q_dtype == "fp8_e4m3" and i.q_fp8_format == "ocp", "these tests compare with OCP e4m3 (e4m3_codes)"
        assert (i.q_fp8_scale, i.q_fp8_saturate, i.q_fp8_rope_bf16_round) == (s["q_scale"], s["q_sat"], s["q_rr"]), i
    else:
        assert k.info.q_dtype == "bf16"
    x = make_inputs(torch, spec, q, kv, T, H, device, slots_dtype, specials, seed, kv_tokens, min_slot, q_dtype,
                    q_scale, q_specials)
    want = reference(torch, spec, q, kv, x, min_slot, q_dtype if fp8_q else "bf16")
    call = dict(x)
    if q_out_dtype is not None and "q_out" in x:
        call["q_out"] = x["q_out"].view(q_out_dtype)
    if via == "op":
        import ropekv.ops
        ropekv.ops.write(spec, kv=kv, q_form=q, q_dtype=q_dtype if fp8_q else "bf16", **call, min_slot=min_slot)
    else:
        k(**call, min_slot=min_slot)
    if device != "cpu":
        torch.cuda.synchronize()
    report, failures = [], []
    total_n = total_eq = 0
    for name, exp in want.items():
        kind = "bf16" if exp.dtype == torch.bfloat16 else "fp8"
        got = x[name]
        if name == "q_pe" and fp8_q:  # fp8 codes over the first R bytes of each bf16 row, the rest untouched
            R = s["R"]
            got, exp = got.view(torch.uint8)[..., :R], exp[..., :R]
            tail_got, tail_want = x[name].view(torch.uint8)[..., R:], want[name][..., R:]
            if not torch.equal(tail_got, tail_want):
                failures.append("q_pe: bytes past the first R of a row were written")
        steps, frac, n, bad = compare_bits(torch, got, exp, kind)
        total_n += n
        total_eq += n - bad
        report.append("%s: max %d step(s), %.4f%% bit-identical" % (name, steps, 100 * frac))
        if name == "kv_cache" or name == "q_out":
            L = s["L"]
            part = x[name][..., L:] if name == "q_out" else x[name].view(-1, x[name].shape[-1])[:, L:]
            wpart = exp[..., L:] if name == "q_out" else exp.view(-1, exp.shape[-1])[:, L:]
            report.append("(rope part %.4f%%)" % (100 * compare_bits(torch, part, wpart, kind)[1]))
        if bad:
            failures.append("%s: %d of %d elements not bit-identical (max %d %s steps; %s)" % (
                name, bad, n, steps, kind, _first_differences(torch, got, exp, kind)))
    frac = total_eq / max(total_n, 1)
    qd = " q_dtype=%s q_scale=%s" % (q_dtype, "%.6g" % q_scale if q_scale is not None else "none") if fp8_q else ""
    print("%s q=%s kv=%s%s T=%d H=%d %s: %s; all %.4f%% bit-identical" % (spec, q, kv, qd, T, H, device,
                                                                         " ".join(report), 100 * frac))
    # The reference does ropekv's arithmetic exactly (one rounded product, one exactly emulated fma), so any
    # difference, even one step on one element, is a real one.
    assert not failures, "%s %s %s %s: %s" % (spec, q, kv, device, "; ".join(failures))
    return k, x


# ---- KV layouts ------------------------------------------------------------------------------------------------
def row_width(spec, kv):
    """Elements of one flat cache row: W, or the fp8_tile row's bytes."""
    s = SPECS[spec]
    return s["row_bytes"] if kv == "fp8_tile" else s["L"] + s["R"]


def layout_cache(torch, spec, kv, layout, rows, B, device, unit_dim=False, fill=None):
    """A cache of `rows` slots laid out as engines hold it, with padding: paged, [rows / B, B, width] entries of
    (width + pad) elements in blocks with a gap after them (unit_dim: [blocks, B, 1, width], vLLM's head dim);
    split, the latent parts [rows / B, B, L] and the rope parts [rows / B, B, R] in two padded buffers (FlashInfer);
    flat, [rows, width] rows of (width + pad). bf16 caches are bf16, fp8 and fp8_tile caches uint8. Padding and
    every entry hold a sentinel (-777.0 / 0x5A); fill (flat rows [rows, width]) is placed in the entries when
    given. Returns {"kv_cache", "kv_rope_cache" (split), "bases" (the buffers), "entries" (the [blocks, B, w]
    views, one per buffer)}."""
    s = SPECS[spec]
    assert rows % B == 0, (rows, B)
    blocks = rows // B
    dt = torch.bfloat16 if kv == "bf16" else torch.uint8
    pad = 8 if kv == "bf16" else 16
    gap = 32
    sentinel = -777.0 if kv == "bf16" else 0x5A
    if layout == "split":
        widths = [s["L"], s["R"]]
    else:
        widths = [row_width(spec, kv)]
    out = {"bases": [], "entries": []}
    for w in widths:
        if layout == "flat":
            base = torch.full((rows, w + pad), sentinel, dtype=dt, device=device)
            entries = base[:, :w].unsqueeze(0)
        else:
            base = torch.full((blocks, B * (w + pad) + gap), sentinel, dtype=dt, device=device)
            entries = base[:, :B * (w + pad)].view(blocks, B, w + pad)[..., :w]
        out["bases"].append(base)
        out["entries"].append(entries)
    if fill is not None:
        place_rows(torch, out["entries"], fill, s["L"])
    e = out["entries"]
    if layout == "flat":
        out["kv_cache"] = e[0][0]
    else:
        out["kv_cache"] = e[0].unsqueeze(2) if unit_dim else e[0]
    if layout == "split":
        out["kv_rope_cache"] = e[1].unsqueeze(2) if unit_dim else e[1]
    return out


def place_rows(torch, entries, flat, L):
    """Writes flat rows [rows, width] into the [blocks, B, w] entry views (split: latent and rope parts)."""
    B = entries[0].shape[1]
    r = torch.arange(flat.shape[0], device=flat.device)
    if flat.dtype != entries[0].dtype:  # an fp8 cache held as uint8 (or the other way round): the same bytes
        flat = flat.view(entries[0].dtype)
    if len(entries) == 2:
        entries[0][r // B, r % B] = flat[:, :L]
        entries[1][r // B, r % B] = flat[:, L:]
    else:
        entries[0][r // B, r % B] = flat


def expected_bases(torch, cache, flat, L):
    """The buffers of a layout_cache after flat rows [rows, width] were written in its entries: clones of the
    bases with the rows placed (padding and gaps as they were)."""
    bases = [b.clone() for b in cache["bases"]]
    entries = [nb.as_strided(e.shape, e.stride(), e.storage_offset() - b.storage_offset())
               for nb, b, e in zip(bases, cache["bases"], cache["entries"])]
    place_rows(torch, entries, flat, L)
    return bases


def run_layout_case(torch, ctx, spec, kv, layout, B, device="cpu", unit_dim=False, q="absorbed", T=11, H=3,
                    seed=41, slots_dtype="int64", specials=True, min_slot=0, via="kernel"):
    """One write launch into a layout_cache (padded entries and blocks), compared with reference() on a flat cache
    of the same rows: every buffer bit for bit, padding included, and the query output. via "op": through
    ropekv.ops.write (the torch.ops.ropekv operator)."""
    s = SPECS[spec]
    k = ctx.kernel(spec, kv=kv, q=q, positions=s["pos"], slots=slots_dtype, layout=layout)
    assert (k.info.layout, k.info.kv, k.info.op) == (layout, kv, "write"), k.info
    x = make_inputs(torch, spec, q, kv, T, H, device, slots_dtype, specials=specials, seed=seed, min_slot=min_slot)
    width = row_width(spec, kv)
    rows = x["kv_cache"].numel() // width
    want = reference(torch, spec, q, kv, x, min_slot)
    cache = layout_cache(torch, spec, kv, layout, rows, B, device, unit_dim)
    call = dict(x, kv_cache=cache["kv_cache"])
    if layout == "split":
        call["kv_rope_cache"] = cache["kv_rope_cache"]
    ok, why = ctx.query(spec, kv=kv, q=q, layout=layout, **call)  # index types from the tensors
    assert ok, why
    if via == "op":
        import ropekv.ops
        ropekv.ops.write(spec, kv=kv, layout=layout, q_form=q, **call, min_slot=min_slot)
    else:
        k(**call, min_slot=min_slot)
    if device != "cpu":
        torch.cuda.synchronize()
    flat_want = want["kv_cache"].reshape(rows, width)
    for i, (got, exp) in enumerate(zip(cache["bases"], expected_bases(torch, cache, flat_want, s["L"]))):
        _equal_bits(torch, got, exp, "%s %s %s B=%d: cache buffer %d" % (spec, kv, layout, B, i))
    if "q_out" in want:
        _equal_bits(torch, x["q_out"], want["q_out"], "%s %s %s: q_out" % (spec, kv, layout))
    print("%s kv=%s layout=%s B=%d%s T=%d: cache buffers and q_out bit-identical" % (
        spec, kv, layout, B, " (unit dim)" if unit_dim else "", T))
    return k, x, cache, flat_want


# (spec, kv, layout, block size, unit dim): deepseek_v2_lite lists every layout
LAYOUT_CASES = [("deepseek_v2_lite", "bf16", "paged", 16, False), ("deepseek_v2_lite", "fp8_e4m3", "paged", 8, True),
                ("deepseek_v2_lite", "bf16", "paged", 1, True), ("deepseek_v2_lite", "bf16", "split", 16, False),
                ("deepseek_v2_lite", "fp8_e4m3", "split", 8, True), ("deepseek_v2_lite", "fp8_e4m3", "flat", 1, False)]
# the specs of the tile-scaled row and the read-back op
TILE_LAYOUT_CASES = [("deepseek_v32", "fp8_tile", "paged", 64, False), ("deepseek_v32", "fp8_tile", "paged", 16, True),
                     ("deepseek_v32", "fp8_tile", "flat", 1, False), ("deepseek_v32", "bf16", "paged", 16, False),
                     ("deepseek_v3", "fp8_e4m3", "paged", 16, True), ("kimi_k2", "bf16", "paged", 8, False)]


# ---- the read-back op -------------------------------------------------------------------------------------------
def fill_rows(torch, spec, kv, rows, seed, specials=True):
    """Random cache rows (flat [rows, width]) of a kv dtype: bf16 values (NaN, +-inf among them); every fp8 byte
    (NaN codes included); fp8_tile rows with random codes, positive float32 scales over a wide range and bf16
    rope values."""
    s = SPECS[spec]
    L, R = s["L"], s["R"]
    g = torch.Generator().manual_seed(seed)
    if kv == "bf16":
        v = torch.randn(rows, L + R, generator=g).to(torch.bfloat16)
        if specials and rows >= 4:
            v[1, 3], v[2, L + 1], v[3, 7] = float("nan"), float("inf"), float("-inf")
        return v
    if kv == "fp8_e4m3":
        return torch.randint(0, 256, (rows, L + R), generator=g).to(torch.uint8)
    out = torch.zeros(rows, s["row_bytes"], dtype=torch.uint8)
    out[:, :L] = torch.randint(0, 256, (rows, L), generator=g).to(torch.uint8)
    nt = L // s["tile"]
    scale = torch.exp2(torch.randint(-40, 20, (rows, nt), generator=g).float())
    scale = scale * (1 + torch.rand(rows, nt, generator=g))
    out[:, s["scales_at"]:s["scales_at"] + 4 * nt] = scale.contiguous().view(torch.uint8)
    out[:, s["rope_at"]:s["rope_at"] + 2 * R] = torch.randn(rows, R, generator=g).to(torch.bfloat16).view(torch.uint8)
    return out


def run_read_case(torch, ctx, spec, kv, layout, B, device="cpu", split_out=False, min_slot=0, slots_dtype="int64",
                  T=13, rows=64, seed=51, unit_dim=False, alloc=False, via="kernel"):
    """One read-back launch of random cache rows in a layout_cache: out against read_reference bit for bit (NaN ==
    NaN), with padding slots (-1), a slot past the cache and, with min_slot, slot 0 below it. via "op": through
    ropekv.ops.read (the torch.ops.ropekv operator) instead of Kernel.__call__."""
    s = SPECS[spec]
    k = ctx.kernel(spec, kv=kv, slots=slots_dtype, layout=layout, op="read")
    assert (k.info.op, k.info.kv, k.info.layout, k.info.slots) == ("read", kv, layout, slots_dtype), k.info
    assert k.info.read_negative_slot in ("zero", "skip"), k.info
    flat = fill_rows(torch, spec, kv, rows, seed)
    cache = layout_cache(torch, spec, kv, layout, rows, B, device, unit_dim, fill=flat.to(device))
    g = torch.Generator().manual_seed(seed + 1)
    slots = torch.randperm(rows, generator=g)[:T]
    slots[::4] = -1
    slots[2] = rows + 3
    if min_slot:
        slots[1] = 0
    slots = slots.to(torch.int64 if slots_dtype == "int64" else torch.int32).to(device)
    k_scale = torch.tensor([0.37], dtype=torch.float32, device=device) if kv == "fp8_e4m3" else None
    call = dict(kv_cache=cache["kv_cache"], slots=slots, min_slot=min_slot)
    if k_scale is not None and s["scale"] != "none":
        call["k_scale"] = k_scale
    if layout == "split":
        call["kv_rope_cache"] = cache["kv_rope_cache"]
    L, W = s["L"], s["L"] + s["R"]
    prior = torch.full((T, W), -777.0, dtype=torch.bfloat16)
    read = k
    if via == "op":
        import ropekv.ops

        def read(**kw):
            return ropekv.ops.read(spec, kv=kv, layout=layout, **kw)
    if alloc:
        got = k(**call)
        if split_out:
            raise AssertionError("alloc with split_out is not a case")
        prior = torch.zeros(T, W, dtype=torch.bfloat16)
    elif split_out:
        out, out_rope = prior[:, :L].clone().to(device), prior[:, L:].clone().to(device)
        r = read(**call, out=out, out_rope=out_rope)
        assert r[0] is out and r[1] is out_rope
        got = torch.cat([out, out_rope], dim=-1)
    else:
        pad = torch.full((T, W + 8), -777.0, dtype=torch.bfloat16, device=device)  # rows of a wider stride
        out = pad[:, :W]
        assert read(**call, out=out) is out
        got = out
        assert bool((pad[:, W:] == -777.0).all()), "out's padding was written"
    want = read_reference(torch, spec, kv, flat, slots.cpu(), k_scale.cpu() if k_scale is not None else None,
                          min_slot, prior, k.info.read_negative_slot)
    _equal_bits(torch, got.cpu(), want, "%s %s %s read (B=%d%s)" % (spec, kv, layout, B,
                                                                    ", out_rope" if split_out else ""))
    print("%s kv=%s layout=%s B=%d read T=%d%s: out bit-identical" % (spec, kv, layout, B, T,
                                                                     " with out_rope" if split_out else ""))
    return k


# (spec, kv, layout, block size, out_rope, min_slot, slots dtype)
READ_CASES = [("deepseek_v3", "bf16", "flat", 1, False, 0, "int64"),
              ("deepseek_v3", "fp8_e4m3", "flat", 1, False, 1, "int32"),
              ("deepseek_v3", "fp8_e4m3", "paged", 16, True, 0, "int64"),
              ("kimi_k2", "fp8_e4m3", "paged", 8, False, 0, "int64"),
              ("minicpm3_4b", "fp8_e4m3", "flat", 1, True, 0, "int64"),
              ("deepseek_v2_lite", "fp8_e4m3", "split", 16, False, 0, "int64"),
              ("deepseek_v2_lite", "bf16", "split", 8, True, 1, "int64"),
              ("deepseek_v32", "fp8_tile", "paged", 64, False, 0, "int64"),
              ("deepseek_v32", "fp8_tile", "flat", 1, True, 1, "int32"),
              ("deepseek_v32", "bf16", "paged", 16, False, 0, "int64")]


# ---- the fused kv_a RMSNorm (norm rms / rms_out) --------------------------------------------------------------
NORM_SENTINEL = -777.0


def norm_inputs(torch, spec, q, kv, T, H, device, seed=0, kv_tokens=None, min_slot=0, specials=False):
    """make_inputs' tensors with k_nope as a raw kv_a projection's c_kv: each token's row scaled by a power of two
    in 2^-12 .. 2^12, and, with 8 or more rows, row 5 all zeros, row 6 scaled by 2^100 (its squares overflow float32:
    r = 0) and row 7 by 2^-120 (its squares underflow: r = 1 / sqrt(eps)); and the RMSNorm weight [L] (bf16, about 1
    +- 0.5). The same seed gives the same tensors (fresh outputs for each launch compared)."""
    x = make_inputs(torch, spec, q, kv, T, H, device, specials=specials, seed=seed, kv_tokens=kv_tokens,
                    min_slot=min_slot)
    L = SPECS[spec]["L"]
    g = torch.Generator().manual_seed(seed + 1)
    k = x["k_nope"].cpu().float()
    P = k.shape[0]
    scale = torch.exp2(torch.randint(-12, 13, (P, 1), generator=g).float())
    if P >= 8:
        scale[5], scale[6], scale[7] = 0.0, 2.0 ** 100, 2.0 ** -120
    x["k_nope"].copy_((k * scale).to(torch.bfloat16).to(device))  # a view of the projection: written in place
    w = (1.0 + 0.5 * torch.randn(L, generator=g)).to(torch.bfloat16).to(device)
    return x, w


def _norm_launch(torch, ctx, spec, q, kv, norm, x, w, norm_out, min_slot, via):
    kw = dict(x)
    if norm != "none":
        kw["norm_weight"] = w
    if norm_out is not None:
        kw["norm_out"] = norm_out
    if via == "op":
        import ropekv.ops
        ropekv.ops.write(spec, kv=kv, q_form=q, q_dtype="bf16", **kw, min_slot=min_slot, norm=norm)
    else:
        k = ctx.kernel(spec, kv=kv, q=q, positions=SPECS[spec]["pos"], norm=norm)
        assert k.info.norm == norm and k.norm == norm, (k.info.key, norm)
        k(**kw, min_slot=min_slot)


NORM_REL_TOL = 2.0 ** -7 + 2.0 ** -12  # norm_out vs a float64 RMSNorm: see run_norm_case


def run_norm_case(torch, ctx, spec, q, kv, T, H, device, seed=0, kv_tokens=None, min_slot=0, specials=False,
                  via="kernel"):
    """The fused kv_a RMSNorm against the unfused composition, bit for bit: an rms_out launch on the raw c_kv writes
    norm_out; the op without the norm (norm none) launched with k_nope := that norm_out must write the same query
    output and cache bits as the rms_out and rms launches; norm_out must equal ropekv.reference.rms_norm bit for bit
    on every row it writes (every KV token, but a negative slot under skip_all, whose row keeps its prior contents),
    and the reference op (reference()) on k_nope := rms_norm(c_kv) must give every output (NaN == NaN whatever the
    payload). Finally norm_out against a float64 RMSNorm of the same rows (x / sqrt(mean(x^2) + eps) * w): within
    NORM_REL_TOL = 2^-7 + 2^-12 relative, the two bf16 roundings of the "twice" rounding (x * r, then * w; each at most
    half an ulp, 2^-8 relative) and the float32 arithmetic (a few 2^-24), on the rows whose sum of squares is finite
    in float32 (a row whose squares overflow normalizes to zeros, as the kernels define it)."""
    s = SPECS[spec]
    L = s["L"]
    info = ctx.kernel(spec, kv=kv, q=q, positions=s["pos"], norm="rms_out").info
    assert (info.norm, info.norm_weight, info.norm_rounding) == ("rms_out", "bf16", "twice"), info
    assert abs(info.norm_eps - 1e-6) < 1e-12 and info.key.endswith("/norm=rms_out"), info
    args = (torch, spec, q, kv, T, H, device, seed, kv_tokens, min_slot, specials)
    fused, w = norm_inputs(*args)
    P = fused["k_nope"].shape[0]
    norm_out = torch.full((P, L), NORM_SENTINEL, dtype=torch.bfloat16, device=device)
    _norm_launch(torch, ctx, spec, q, kv, "rms_out", fused, w, norm_out, min_slot, via)
    rms, _ = norm_inputs(*args)
    _norm_launch(torch, ctx, spec, q, kv, "rms", rms, w, None, min_slot, via)
    unfused, _ = norm_inputs(*args)
    unfused["k_nope"] = norm_out
    _norm_launch(torch, ctx, spec, q, kv, "none", unfused, w, None, min_slot, via)
    if device != "cpu":
        torch.cuda.synchronize()
    outs = [n for n in ("q_out", "q_pe", "kv_cache") if n in fused]
    for name in outs:
        assert _same_bits(torch, fused[name], unfused[name]), "%s: rms_out differs from norm none on norm_out" % name
        assert _same_bits(torch, rms[name], unfused[name]), "%s: rms differs from norm none on norm_out" % name
    # norm_out: written for every KV token except a negative slot under skip_all
    raw, _ = norm_inputs(*args)
    slots = raw["slots"].long()
    K = slots.shape[0]
    written = torch.zeros(P, dtype=torch.bool, device=slots.device)
    written[:K] = True
    if s["neg"] == "skip_all":
        written[:K] &= slots >= 0
    want = ref.rms_norm(raw["k_nope"], w, info.norm_eps, info.norm_rounding)
    got = norm_out[written]
    bad = compare_bits(torch, got, want[written], "bf16")[3]
    assert bad == 0, "norm_out: %d elements differ from rms_norm (%s)" % (
        bad, _first_differences(torch, got, want[written], "bf16"))
    assert bool((norm_out[~written] == NORM_SENTINEL).all()), "norm_out rows of tokens without one were written"
    # the reference op on the normalized rows
    normed = dict(raw)
    normed["k_nope"] = want
    exp = reference(torch, spec, q, kv, normed, min_slot)
    for name, e in exp.items():
        kind = "bf16" if e.dtype == torch.bfloat16 else "fp8"
        steps, frac, n, bad = compare_bits(torch, fused[name], e, kind)
        assert bad == 0, "%s: %d of %d elements differ from the reference on rms_norm's rows (%s)" % (
            name, bad, n, _first_differences(torch, fused[name], e, kind))
    # closeness to a float64 RMSNorm
    x64 = raw["k_nope"][:K].double().cpu()
    n64 = x64 / torch.sqrt((x64 * x64).mean(-1, keepdim=True) + info.norm_eps) * w.double().cpu()
    ok_rows = torch.isfinite(x64).all(-1) & ((x64 * x64).sum(-1) < 3.4e38) & written[:K].cpu()
    err = (norm_out[:K].double().cpu() - n64).abs()
    rel = (err / n64.abs().clamp(min=1e-300))[ok_rows]
    exact0 = (n64 == 0)[ok_rows]
    worst = float(torch.where(exact0, err[ok_rows], rel).max()) if rel.numel() else 0.0
    assert worst <= NORM_REL_TOL, "norm_out vs a float64 RMSNorm: %g relative > %g" % (worst, NORM_REL_TOL)
    print("%s q=%s kv=%s norm T=%d K=%d %s: fused == unfused composition bit for bit (%s), norm_out == rms_norm, "
          "float64 RMSNorm within %.3g relative (bound %.3g)" % (spec, q, kv, T, K, device, ", ".join(outs), worst,
                                                                 NORM_REL_TOL))
