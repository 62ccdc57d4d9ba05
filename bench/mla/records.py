"""--mode records: the cache records the built-in specs list (and deepseek_v3's bf16 / fp8_e4m3 and deepseek_v32's
fp8_tile rows as the baseline), each written by ropekv's generic writer (q form absorbed with a bf16 query, and none)
and read back by its generic reader, side by side with a Triton writer of the same record (one kernel specialized by
the record's segments: triton_kernels.py, record_write_kernel) and a device copy of the same bytes.

Every output is checked before it is timed: ropekv's rows against a PyTorch encoder of the record (encode_rows: the
writer's arithmetic, one float32 operation a step), the query rows against ropekv.reference's rope, the read-back
against a PyTorch decoder (decode_rows), and the Triton writer's bytes against ropekv's. An output that differs is
reported `differs` with the fraction of equal bytes, and still timed (the table marks it)."""
import time

from .env import failed, log, require_pdl, rk_backend
from .library import require_ocp
from .numerics import _fp8_codes, compare_bits, fp8_values
from .report import file_stem, floors_line, fmt_us, preamble, table, write
from .shapes import K_SCALE, L, MAX_POS, R, SCALE_CONV, W, bw_pct, cos_sin_table
from .timing import first_call_failed, run_floors, same_size_copy_us, time_call, timing_failed
from .triton_kernels import triton_kernels

torch = None  # set by env.bind() in main()
rkref = None  # ropekv.reference, set with torch

FLT_MIN = 2.0 ** -126
ELEM_CODE = {"bf16": 0, "e4m3": 1, "e2m1": 2}
SCALE_CODE = {"none": 0, "f32": 1, "ue8m0": 2, "e4m3": 3}
RULE_CODE = {"exact": 0, "pow2_up": 1, "up": 2, "exact_zero": 3}
SCALE_BYTES = {"none": 0, "f32": 4, "ue8m0": 1, "e4m3": 1}
E2M1_VALUES = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]

# method -> its job: "write" (q form absorbed, bf16 query), "kv" (q form none: the row only), "read" (the read-back)
METHODS = {"ropekv_rec": "write", "triton_rec": "write", "triton_rec_pdl": "write", "ropekv_rec_none": "kv",
           "triton_rec_none": "kv", "ropekv_rec_read": "read"}
TRITON_PEERS = {"ropekv_rec": ["triton_rec", "triton_rec_pdl"], "ropekv_rec_none": ["triton_rec_none"]}
# a record's row with the same bytes from a kv dtype kernel (the generic writer against the row it generalizes)
SAME_BYTES = {"deepseek_v32/fp8_ds_mla": "deepseek_v32/fp8_tile"}
GOAL_SMALL_US, GOAL_COPY, GOAL_TRITON, GOAL_SAME = 1.2, 85.0, 1.2, 1.02


def record_table():
    """The rows benchmarked: (spec, the row's name, chosen as a kv dtype or a record), each described by the library's
    record of its bytes (ropekv.record: specs/records.lua through ropekv_record_describe; a kv dtype's row is the record
    of the same bytes: bf16, fp8, fp8_ds_mla). What a spec changes in a record (kimi_k2's fp8 divides: conv "div", and
    sanitizes) is said here and checked against the kernel's own view at startup (check_table).
    A segment stores x[frm, frm + n) (here always two: the latent x[0, L), then the rope part after RoPE) as elem from
    byte at; block values share a scale (scale type, rule, at scales_at); tensor: the launch's k_scale applies under the
    row's conv; sat: the OCP bound."""
    import ropekv

    def row(spec, name, choice, base, conv=None, sanitize=False):
        r = ropekv.record(base)
        segs = [dict(frm=g.from_, n=g.n, elem=g.elem, at=g.at, block=g.block, scale=g.scale, rule=g.rule,
                     scales_at=g.scales_at, sat=g.saturate_ocp if g.elem != "bf16" else 0.0,
                     tensor=g.outer == "tensor", rope_bf16=g.rope_bf16, floor=g.floor or FLT_MIN,
                     recip=g.block_conv == "mul_recip", interleave=g.scales_interleave) for g in r.segments]
        return dict(spec=spec, name=name, choice=choice, label="%s/%s" % (spec, name), row_bytes=r.row_bytes,
                    split_at=r.split_at, segments=segs, conv=conv or r.conv, sanitize=sanitize)

    return [
        row("deepseek_v3", "bf16", "kv", "bf16"),
        row("deepseek_v3", "fp8_e4m3", "kv", "fp8"),
        row("deepseek_v3", "nvfp4", "record", "nvfp4"),
        row("deepseek_v32", "fp8_tile", "kv", "fp8_ds_mla"),
        row("deepseek_v32", "fp8_ds_mla", "record", "fp8_ds_mla"),
        row("deepseek_v32", "nvfp4_fp8rope", "record", "nvfp4_fp8rope"),
        row("deepseek_v32_pow2", "fp8_ds_mla_pow2", "record", "fp8_ds_mla_pow2"),
        row("glm5", "nvfp4_ds_mla", "record", "nvfp4_ds_mla"),
        row("kimi_k2", "fp8", "record", "fp8", conv="div", sanitize=True),
    ]


def check_table(rec, info):
    """Raises where the library's view of a row (KernelInfo) differs from record_table's: its name, row_bytes,
    split_at, scale convention, sanitizing (a writer's: a reader has none); also where the table's segments do not tile
    x[0, L + R) as the Triton writer takes them (the latent, then the rope part)."""
    got = (info.record, info.record_row_bytes, info.record_split_at, info.scale, bool(info.sanitize))
    want = (rec["name"], rec["row_bytes"], rec["split_at"], rec["conv"], rec["sanitize"] and info.op == "write")
    if got != want:
        raise RuntimeError("%s: the library has (record, row_bytes, split_at, scale, sanitize) = %r, this script's "
                           "record_table %r: update record_table" % (rec["label"], got, want))
    if [(g["frm"], g["n"]) for g in rec["segments"]] != [(0, L), (L, R)]:
        raise RuntimeError("%s: the Triton writer takes two segments, the latent and the rope part" % rec["label"])


def triton_constexprs(rec):
    """record_write_kernel's constexpr arguments for a row: per segment i, E<i> (element), A<i> (byte), B<i> (block),
    S<i> (scale type), P<i> (rule: 0 exact, 1 pow2_up, 2 up, 3 exact_zero), SA<i> (scales' byte), SAT<i> (bound),
    C<i> (tensor scale convention), RB<i>, F<i> (the scale's floor), M<i> (block_conv mul_recip), IL<i>
    (scales_interleave)."""
    kw = {"CLEAN": rec["sanitize"]}
    for i, g in enumerate(rec["segments"]):
        kw.update({"E%d" % i: ELEM_CODE[g["elem"]], "A%d" % i: g["at"], "B%d" % i: g["block"],
                   "S%d" % i: SCALE_CODE[g["scale"]], "P%d" % i: RULE_CODE[g["rule"]], "SA%d" % i: g["scales_at"],
                   "SAT%d" % i: g["sat"], "C%d" % i: SCALE_CONV[rec["conv"]] if g["tensor"] else 0,
                   "RB%d" % i: g["rope_bf16"], "F%d" % i: g["floor"], "M%d" % i: g["recip"],
                   "IL%d" % i: g["interleave"]})
    return kw


def scale_slots(g, nb):
    """The place of each of nb blocks' scales (rk_seg_scale_slot): block order, or scales_interleave k's runs."""
    k = g["interleave"]
    return [b if k < 2 else b % k * (nb // k) + b // k for b in range(nb)]


def record_bytes(T, H, row_bytes, job):
    """The bytes a job moves at least: write (absorbed): q_nope + q_pe read, q_out written; write and kv: k_nope + k_pe
    read, the row written, positions + slots (int64) and the cos/sin rows (f32) read; read: the rows read, the bf16
    out [T, 576] written, the slots read."""
    if job == "read":
        return T * row_bytes + T * W * 2 + T * 8
    q = T * H * (L + R) * 2 + T * H * W * 2 if job == "write" else 0
    return q + T * (L + R) * 2 + T * row_bytes + T * 16 + T * R * 4


# ---- the record's bytes in PyTorch -----------------------------------------------------------------------------------
def _e2m1_codes(v):
    """float32 values (clamped) as e2m1 codes (int32): rk_e2m1_sw's comparisons (ties to the even code), the sign
    kept, NaN -> 7."""
    a = v.abs()
    code = sum((a > 0.25, a >= 0.75, a > 1.25, a >= 1.75, a > 2.5, a >= 3.5, a > 5.0), torch.zeros_like(a)).int()
    code = code | ((v.view(torch.int32) >> 28) & 8)
    return torch.where(torch.isnan(v), torch.full_like(code, 7), code)


def _segment_bytes(rec, g, x, k_scale):
    """(value bytes, scale bytes or None) of one segment of n rows: x [n, g.n] float32 (the rope part rotated), in the
    writer's order: bf16 rounding (rope_bf16), the tensor scale, sanitizing, then the element's conversion, or per
    block amax (NaN ignored), s = max(amax / sat, FLT_MIN) (a float32 division), pow2_up, the stored scale and the
    values divided by it (float32), clamped, converted."""
    n = x.shape[0]
    if g["rope_bf16"] and g["frm"] >= L:
        x = x.to(torch.bfloat16).float()
    if g["tensor"]:
        x = rkref.scale(x, rec["conv"], k_scale)
    clean = rec["sanitize"]
    if clean and (g["elem"] == "bf16" or g["block"]):
        x = torch.where(torch.isnan(x), torch.zeros_like(x), x).clamp(-3.38953139e38, 3.38953139e38)
    if g["elem"] == "bf16":
        return x.to(torch.bfloat16).view(torch.uint8), None
    sat, scale = g["sat"], None
    if not g["block"]:
        if clean:
            x = torch.where(torch.isnan(x), torch.zeros_like(x), x)
        v = x.clamp(-sat, sat)
    else:
        xb = x.reshape(n, -1, g["block"])
        a = xb.abs()
        amax = torch.where(torch.isnan(a), torch.zeros_like(a), a).amax(dim=-1)
        s = amax / torch.full_like(amax, sat)  # a tensor divisor: a true division on CUDA
        floor = torch.full_like(s, g["floor"])
        s = torch.where(s > floor, s, floor)
        if g["rule"] == "pow2_up" or g["scale"] == "ue8m0":
            u = s.view(torch.int32)
            up = ((u & 0x7FFFFF) != 0) & (u < 0x7F800000)
            s = torch.where(up, ((u >> 23) + 1) << 23, u).view(torch.float32)
        if g["scale"] == "f32":
            d, scale = s, s.contiguous().view(torch.uint8)
        elif g["scale"] == "ue8m0":
            scale = ((s.view(torch.int32) >> 23) & 0xFF).to(torch.uint8)
            d = torch.where(scale == 0xFF, torch.full_like(s, float("nan")), s)
        else:
            scale = _fp8_codes(torch, s.clamp(max=448.0))
            least = 0 if g["rule"] == "exact_zero" else 1  # a scale that rounds to zero (exact_zero: kept)
            scale = torch.where((scale & 0x7F) == 0, torch.full_like(scale, least), scale)
            if g["rule"] == "up":  # the next e4m3 value while the nearest is below s, short of 448
                scale = torch.where((fp8_values(torch, scale) < s) & (scale < 0x7E), scale + 1, scale)
            d = fp8_values(torch, scale)
        v = xb * (1.0 / d)[..., None] if g["recip"] else xb / d[..., None]
        if g["rule"] == "exact_zero":  # a zero scale: the block's values times 0
            v = torch.where((d == 0)[..., None], xb * 0.0, v)
        v = v.clamp(-sat, sat).reshape(n, -1)
        scale = scale[:, torch.argsort(torch.tensor(scale_slots(g, scale.shape[1]), device=scale.device))]
    if g["elem"] == "e4m3":
        return _fp8_codes(torch, v), scale
    c = _e2m1_codes(v).reshape(n, -1, 2)
    return (c[..., 0] | (c[..., 1] << 4)).to(torch.uint8), scale


def encode_rows(rec, latent, rope, k_scale):
    """The rows (uint8 [n, row_bytes]) of latent [n, L] (bf16) and rope [n, R] (float32, after RoPE), as the record
    stores them (templates/kernel.hip, kv_segment); padding bytes zero."""
    n = latent.shape[0]
    x = torch.cat([latent.float(), rope.float()], dim=1)
    rows = torch.zeros(n, rec["row_bytes"], dtype=torch.uint8, device=latent.device)
    for g in rec["segments"]:
        vals, scale = _segment_bytes(rec, g, x[:, g["frm"]:g["frm"] + g["n"]], k_scale)
        rows[:, g["at"]:g["at"] + vals.shape[1]] = vals
        if scale is not None:
            sb = scale.reshape(n, -1)
            rows[:, g["scales_at"]:g["scales_at"] + sb.shape[1]] = sb
    return rows


def decode_rows(rec, rows, k_scale):
    """The read-back of rows (uint8 [n, row_bytes]) as bf16 [n, L + R] (templates/read.hip): bf16 bits copied; codes
    decoded exactly, times the block's stored scale, then times k_scale (mul_recip, div) or divided by it (mul), each
    a float32 operation, rounded to bf16."""
    n = rows.shape[0]
    out = torch.empty(n, W, dtype=torch.bfloat16, device=rows.device)
    for g in rec["segments"]:
        at, m = g["at"], g["n"]
        if g["elem"] == "bf16":
            out[:, g["frm"]:g["frm"] + m] = rows[:, at:at + 2 * m].contiguous().view(torch.bfloat16)
            continue
        if g["elem"] == "e4m3":
            y = fp8_values(torch, rows[:, at:at + m].contiguous())
        else:
            b = rows[:, at:at + m // 2].long()
            codes = torch.stack((b & 15, b >> 4), dim=-1).reshape(n, m)
            table = torch.tensor(E2M1_VALUES + [-v for v in E2M1_VALUES], dtype=torch.float32, device=rows.device)
            y = table[codes]
        if g["block"]:
            nb, sa = m // g["block"], g["scales_at"]
            sb = rows[:, sa:sa + nb * SCALE_BYTES[g["scale"]]].contiguous()
            if g["scale"] == "f32":
                d = sb.view(torch.float32)
            elif g["scale"] == "ue8m0":
                e = sb.int()
                d = torch.where(e == 0, torch.full_like(e, 0x400000), e << 23).view(torch.float32)
                d = torch.where(e == 0xFF, torch.full_like(d, float("nan")), d)
            else:
                d = fp8_values(torch, sb)
            d = d[:, scale_slots(g, nb)]  # block b's scale from its place
            y = (y.reshape(n, nb, g["block"]) * d[..., None]).reshape(n, m)
        if g["tensor"] and rec["conv"] != "none":
            y = y / k_scale if rec["conv"] == "mul" else y * k_scale
        out[:, g["frm"]:g["frm"] + m] = y.to(torch.bfloat16)
    return out


# ---- the problems ----------------------------------------------------------------------------------------------------
class Problem:
    """One shape's inputs, shared by every row: q [T, H, 576] (H = 0: none), the projection [T, 576] whose latent
    blocks of 16 are scaled by 2^-4 .. 2^4 (so that block scales differ), a token's last one by 2^-10 (an e4m3 block
    scale that rounds to zero: 0x01, or 0x00 by rule exact_zero), random positions, slots a permutation of
    T of the T + 1 cache rows; the expected rotated k_pe (float32) and, with a query, the expected bf16 q rope."""

    def __init__(self, T, H, dev, cos_sin, seed):
        self.T, self.H, self.dev = T, H, dev
        g = torch.Generator(device=dev).manual_seed(seed)
        bf = torch.bfloat16
        self.q = torch.randn(T, H, W, device=dev, dtype=bf, generator=g) if H else None
        proj = torch.randn(T, W, device=dev, generator=g)
        spread = torch.exp2(torch.randint(-4, 5, (T, L // 16, 1), device=dev, generator=g).float())
        spread[:, -1] = 2.0 ** -10
        proj[:, :L] = (proj[:, :L].reshape(T, -1, 16) * spread).reshape(T, L)
        self.proj = proj.to(bf)
        self.k_nope, self.k_pe = self.proj[:, :L], self.proj[:, L:]
        self.positions = torch.randint(0, MAX_POS, (T,), device=dev, generator=g, dtype=torch.int64)
        self.rows = T + 1
        self.slots = torch.randperm(self.rows, device=dev, generator=g)[:T].to(torch.int64)
        self.cos_sin = cos_sin
        cs = cos_sin.index_select(0, self.positions)
        self.c, self.s = cs[:, :R // 2], cs[:, R // 2:]
        self.kv_rope = rkref.rope(self.k_pe, self.c, self.s)
        self.k_scale = torch.tensor([K_SCALE], dtype=torch.float32, device=dev)

    def q_rope(self, t0, t1):
        return rkref.rope(self.q[t0:t1, :, L:], self.c[t0:t1, None], self.s[t0:t1, None]).to(torch.bfloat16)

    def new_cache(self, rec):
        return torch.zeros(self.rows, rec["row_bytes"], dtype=torch.uint8, device=self.dev)

    def new_q_out(self):
        return torch.empty(self.T, self.H, W, dtype=torch.bfloat16, device=self.dev)


class ReadProblem:
    """The read-back's inputs for one row: n + 1 cache rows encoded from random values (encode_rows; latent blocks
    spread as Problem's), slots n distinct rows with every 64th -1 (a zero row)."""

    def __init__(self, rec, n, dev, seed, k_scale):
        g = torch.Generator(device=dev).manual_seed(seed)
        rows = n + 1
        v = torch.randn(rows, W, device=dev, generator=g)
        spread = torch.exp2(torch.randint(-4, 5, (rows, L // 16, 1), device=dev, generator=g).float())
        lat = (v[:, :L].reshape(rows, -1, 16) * spread).reshape(rows, L).to(torch.bfloat16)
        self.cache = encode_rows(rec, lat, v[:, L:].to(torch.bfloat16).float(), k_scale)
        self.slots = torch.randperm(rows, device=dev, generator=g)[:n].to(torch.int64)
        self.slots[63::64] = -1
        self.T, self.k_scale = n, k_scale

    def reference(self, rec):
        want = torch.zeros(self.T, W, dtype=torch.bfloat16, device=self.cache.device)
        ok = (self.slots >= 0).nonzero().reshape(-1)
        want[ok] = decode_rows(rec, self.cache[self.slots[ok]], self.k_scale)
        return want


# ---- the methods: (fn, outputs) --------------------------------------------------------------------------------------
def _cache_arg(k, cache):
    """The uint8 rows as the kernel takes its cache: a bf16 kv dtype's as bf16 [rows, 576], else as they are."""
    return cache.view(torch.bfloat16) if {t.name: t.dtype for t in k.tensors}["kv_cache"] == "bf16" else cache


def _ropekv(run, rec, pb, method):
    absorbed = METHODS[method] == "write"
    k = run.kernels[(rec["label"], "absorbed" if absorbed else "none")]
    out = {"cache": pb.new_cache(rec)}
    kw = dict(k_nope=pb.k_nope, k_pe=pb.k_pe, kv_cache=_cache_arg(k, out["cache"]), positions=pb.positions,
              slots=pb.slots,
              cos_sin=pb.cos_sin, k_scale=pb.k_scale if rec["conv"] != "none" else None)
    if absorbed:
        out["q_out"] = pb.new_q_out()
        kw.update(q_nope=pb.q[..., :L], q_pe=pb.q[..., L:], q_out=out["q_out"])
    return k.bind(**kw), lambda: out


def _triton(run, rec, pb, method):
    pdl = method.endswith("_pdl")
    if pdl:
        require_pdl()
    kern = triton_kernels()["record"]
    absorbed = METHODS[method] == "write"
    cache = pb.new_cache(rec)
    out = {"cache": cache}
    q_out = pb.new_q_out() if absorbed else pb.proj  # a placeholder pointer for the none form (never written)
    q = pb.q if absorbed else pb.proj[:, None, :]
    if absorbed:
        out["q_out"] = q_out
    H = pb.H if absorbed else 0
    grid = (pb.T, H + 1)
    a = (q[..., :L], q[..., L:], q_out, pb.k_nope, pb.k_pe, cache, pb.positions, pb.slots, pb.cos_sin, pb.k_scale,
         q.stride(0), q.stride(1), q.stride(0), q.stride(1), q_out.stride(0), q_out.stride(1) if absorbed else 0,
         pb.k_nope.stride(0), pb.k_pe.stride(0), cache.stride(0), H)
    kw = dict(L=L, R=R, USE_GDC=pdl, num_warps=4, **triton_constexprs(rec))
    if pdl:
        kw["launch_pdl"] = True

    def fn():
        kern[grid](*a, **kw)

    return fn, lambda: out


def _ropekv_read(run, rec, pb, method):
    k = run.kernels[(rec["label"], "read")]
    out = {"out": torch.empty(pb.T, W, dtype=torch.bfloat16, device=pb.cache.device)}
    kw = dict(kv_cache=_cache_arg(k, pb.cache), slots=pb.slots, out=out["out"],
              k_scale=pb.k_scale if rec["conv"] != "none" else None)
    return k.bind(**kw), lambda: out


# ---- checks ----------------------------------------------------------------------------------------------------------
def _same_bytes(a, b):
    """(equal elements, elements) of two tensors compared bit for bit (as bytes)."""
    x, y = a.contiguous().view(torch.uint8).reshape(-1), b.contiguous().view(torch.uint8).reshape(-1)
    return int((x == y).sum()), x.numel()


def check_write(pb, ref_rows, outs, chunk=1 << 24):
    """(equal, total) over a writer's outputs against the expected: the rows at the slots equal to encode_rows', the
    spare row untouched (zero); q_out's q_nope part copied and its rope part equal to ropekv.reference's rope."""
    cache = outs["cache"]
    same, n = _same_bytes(cache[pb.slots], ref_rows)
    spare = torch.ones(pb.rows, dtype=torch.bool, device=cache.device)
    spare[pb.slots] = False
    s, m = _same_bytes(cache[spare], torch.zeros_like(cache[spare]))
    same, n = same + s, n + m
    if outs.get("q_out") is not None:
        step = max(1, chunk // max(1, pb.H * W))
        for t0 in range(0, pb.T, step):
            t1 = min(pb.T, t0 + step)
            for got, want in ((outs["q_out"][t0:t1, :, :L], pb.q[t0:t1, :, :L]),
                              (outs["q_out"][t0:t1, :, L:], pb.q_rope(t0, t1))):
                _, s, m = compare_bits(torch, got, want, "bf16")
                same, n = same + s, n + m
    return same, n


def check_same(outs, base):
    """(equal, total) bytes of a Triton writer's outputs against ropekv's of the same shape (cache and q_out)."""
    same, n = _same_bytes(outs["cache"], base["cache"])
    if outs.get("q_out") is not None:
        s, m = _same_bytes(outs["q_out"], base["q_out"])
        same, n = same + s, n + m
    return same, n


# ---- the sweep -------------------------------------------------------------------------------------------------------
class Run:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def open_kernels(ctx, rows, methods, meta):
    """The ropekv kernels of every row and job the methods need (flat layout, 64-bit indices), each checked against
    record_table (check_table) and for OCP fp8. Returns {(label, form): kernel}."""
    forms = sorted({{"write": "absorbed", "kv": "none", "read": "read"}[METHODS[m]] for m in methods
                    if m.startswith("ropekv")})
    kernels = {}
    for rec in rows:
        for form in forms:
            choice = {"kv": rec["name"]} if rec["choice"] == "kv" else {"record": rec["name"]}
            kw = dict(op="read") if form == "read" else dict(q=form)
            t0 = time.perf_counter()
            k = ctx.kernel(rec["spec"], **choice, **kw)
            check_table(rec, k.info)
            require_ocp(k.info)
            kernels[(rec["label"], form)] = k
            meta["kernels"]["%s %s" % (rec["label"], form)] = (k.name, (time.perf_counter() - t0) * 1e3)
    return kernels


def run_records(args, meta, dev):
    """--mode records: the kernels (checked against record_table), the floors, then per shape each row's methods
    checked and timed next to a copy of the job's bytes; the report. Returns 1 when an output differed, else 0."""
    import ropekv
    rows = record_table()
    if args.records:
        want = [s.strip() for s in args.records.split(",") if s.strip()]
        unknown = sorted(set(want) - {r["label"] for r in rows})
        if unknown:
            raise SystemExit("bench_mla: unknown --records %s (known: %s)" % (
                ", ".join(unknown), ", ".join(r["label"] for r in rows)))
        rows = [r for r in rows if r["label"] in want]
    methods = list(args.method_list)
    meta["mode"] = "records"
    meta["ropekv"] = ropekv.version()
    ctx = ropekv.Context(rk_backend(args.cpu), device=args.device)
    meta["target"] = ctx.target
    kernels = open_kernels(ctx, rows, methods, meta)
    log("ropekv %s on %s: %d kernels, rows %s" % (meta["ropekv"], ctx.target, len(kernels),
                                                   ", ".join(r["label"] for r in rows)))
    floors = run_floors(torch, args, args.cpu, dev)
    run = Run(args=args, cpu=args.cpu, dev=dev, rows=rows, methods=methods, kernels=kernels, floors=floors,
              cos_sin=cos_sin_table(torch, dev), k_scale=torch.tensor([K_SCALE], dtype=torch.float32, device=dev))
    results = []
    for job in ("write", "kv", "read"):
        ms = [m for m in methods if METHODS[m] == job]
        if not ms:
            continue
        shapes = ([(T, H) for H in args.H_list for T in args.T_list] if job == "write" else
                  [(T, 1) for T in (args.read_rows if job == "read" else args.T_list)])
        for T, H in shapes:
            results += _shape(run, job, ms, T, H)
            if not args.cpu:
                torch.cuda.empty_cache()
    paths = write_records_outputs(args, meta, floors, results, methods)
    log("wrote " + ", ".join(paths))
    ctx.close()
    bad = [r for r in results for v in r["results"].values() if v["status"] in ("differs", "WRONG")]
    return 1 if bad else 0


def _shape(run, job, methods, T, H):
    """Every row's result at one shape of a job: its problem (shared by the rows for the writes), the copy of its
    bytes, each method checked, then timed."""
    out = []
    seed = T * 1000 + H * 10 + ("write", "kv", "read").index(job)
    need = (4 * T * H * W * 2 if job == "write" else 0) + 48 * T * W + (256 << 20)
    free = torch.cuda.mem_get_info(run.dev)[0] if not run.cpu else float("inf")
    if need > 0.9 * free:
        log("%s T=%d H=%d: skipped (needs ~%.1f GB, %.1f GB free)" % (job, T, H, need / 1e9, free / 1e9))
        return out
    pb = Problem(T, H if job == "write" else 0, run.dev, run.cos_sin, seed) if job != "read" else None
    for i, rec in enumerate(run.rows):
        r = {"label": rec["label"], "job": job, "T": T, "H": H, "results": {},
             "bytes": record_bytes(T, H, rec["row_bytes"], job)}
        try:
            if job == "read":
                p = ReadProblem(rec, T, run.dev, seed + i, run.k_scale)
                ref = p.reference(rec)
            else:
                p = pb
                ref = encode_rows(rec, pb.k_nope, pb.kv_rope, pb.k_scale)
        except Exception as e:  # noqa: BLE001
            failed("%s %s T=%d: problem or reference failed" % (rec["label"], job, T), e)
            out.append(r)
            continue
        r["copy_us"] = same_size_copy_us(torch, run.args, run.cpu, run.dev, r["bytes"])
        kept = {}
        for m in methods:
            r["results"][m] = _method(run, rec, m, p, ref, kept, r["bytes"])
        log("%-28s %-5s T=%6d H=%3d  " % (rec["label"], job, T, H) + "  ".join(
            "%s %s" % (m, _cell(r["results"][m])) for m in methods) + "  copy %s" % fmt_us(r["copy_us"]))
        out.append(r)
    return out


def _method(run, rec, m, p, ref, kept, nbytes):
    """One method's result: n/a (its setup or first call raised), ok or differs (its outputs against the expected or
    against ropekv's, with the fraction equal), and its time."""
    res = {"status": "ok", "us": None, "timing": "", "note": ""}
    make = _ropekv_read if m == "ropekv_rec_read" else _ropekv if m.startswith("ropekv") else _triton
    try:
        fn, outputs = make(run, rec, p, m)
        fn()
        if not run.cpu:
            torch.cuda.synchronize()
        outs = outputs()
    except Exception as e:  # noqa: BLE001
        return first_call_failed(torch, m, e, run.cpu)[0]
    if m.startswith("ropekv"):
        if METHODS[m] == "read":
            _, same, n = compare_bits(torch, outs["out"], ref, "bf16")
        else:
            same, n = check_write(p, ref, outs)
        kept[m] = outs
        what = "the expected"
    else:
        base = [k for k, v in TRITON_PEERS.items() if m in v][0]
        if base not in kept:
            same, n = check_write(p, ref, outs)
            what = "the expected"
        else:
            same, n = check_same(outs, kept[base])
            what = base + "'s"
    res["same"] = same / max(n, 1)
    if same != n:
        res["status"] = "differs"
        res["note"] = "%.4f%% of the outputs equal to %s (%d differ)" % (100 * res["same"], what, n - same)
        log("  %s %s: %s" % (rec["label"], m, res["note"]))
    try:
        res["us"], res["timing"], note = time_call(torch, fn, run.args, run.cpu)
        res["note"] = "; ".join(x for x in (res["note"], note) if x)
        res["bw_pct"] = bw_pct(nbytes, res["us"], run.floors["copy_Bps"])
    except Exception as e:  # noqa: BLE001
        timing_failed(torch, res, m, e, run.cpu)
    return res


# ---- the report ------------------------------------------------------------------------------------------------------
def _cell(res):
    if res is None:
        return "-"
    if res["status"] not in ("ok", "differs") or res.get("us") is None:
        return res["status"]
    return fmt_us(res["us"]) + ("*" if res["timing"] == "events" else "") + ("!" if res["status"] == "differs" else "")


def _us(r, m):
    v = r["results"].get(m)
    return v["us"] if v and v["status"] in ("ok", "differs") and v.get("us") else None


def pct_of_copy(r, m):
    us = _us(r, m)
    return 100.0 * r["copy_us"] / us if us and r.get("copy_us") else None


def copy_fraction(r, m):
    """The lower of % of copy and BW %: where the same-size copy runs below the floor's bandwidth (the largest sizes),
    BW % is the stricter figure; at mid sizes, where a copy's ramp-up and tail show, % of copy is."""
    v = r["results"].get(m) or {}
    vals = [x for x in (pct_of_copy(r, m), v.get("bw_pct") if _us(r, m) else None) if x is not None]
    return min(vals) if vals else None


def vs_triton(r, m):
    """The fastest Triton writer's us / ropekv's, None without both."""
    us = _us(r, m)
    peers = [x for x in (_us(r, p) for p in TRITON_PEERS.get(m, [])) if x]
    return min(peers) / us if us and peers else None


def vs_same_bytes(results, r, m):
    """ropekv us / the same-bytes kv dtype row's ropekv us at the shape (SAME_BYTES), None without both."""
    base = SAME_BYTES.get(r["label"])
    other = [x for x in results if x["label"] == base and x["job"] == r["job"] and (x["T"], x["H"]) == (r["T"], r["H"])]
    us, them = _us(r, m), _us(other[0], m) if other else None
    return us / them if us and them else None


def goals(results):
    """The goals' lines: (what, shapes met, shapes measured, the worst figure and its shape)."""
    lines = []

    def add(what, items, ok, worst_key, fmt):
        items = [(r, v) for r, v in items if v is not None]
        if not items:
            return
        met = sum(1 for _, v in items if ok(v))
        r, v = worst_key(items)
        lines.append("- %s: met at %d of %d; worst %s (%s, T = %d%s)" % (
            what, met, len(items), fmt % v, r["label"], r["T"], ", H = %d" % r["H"] if r["job"] == "write" else ""))

    small = [(r, _us(r, "ropekv_rec")) for r in results if r["job"] == "write" and r["T"] <= 16]
    add("T <= 16, absorbed write <= %.1f us" % GOAL_SMALL_US, small, lambda v: v <= GOAL_SMALL_US,
        lambda it: max(it, key=lambda x: x[1]), "%.2f us")
    for job, m in (("write", "ropekv_rec"), ("kv", "ropekv_rec_none")):
        big = [(r, copy_fraction(r, m)) for r in results if r["job"] == job and r["T"] >= 8192]
        add("T >= 8192, %s >= %.0f%% of the copy of its bytes (the lower of %% of copy and BW %%)" % (m, GOAL_COPY),
            big, lambda v: v >= GOAL_COPY, lambda it: min(it, key=lambda x: x[1]), "%.0f%%")
    reads = [(r, copy_fraction(r, "ropekv_rec_read")) for r in results if r["job"] == "read"]
    add("read-back >= %.0f%% of the copy of its bytes (the lower of %% of copy and BW %%)" % GOAL_COPY, reads,
        lambda v: v >= GOAL_COPY, lambda it: min(it, key=lambda x: x[1]), "%.0f%%")
    for job, m in (("write", "ropekv_rec"), ("kv", "ropekv_rec_none")):
        tri = [(r, vs_triton(r, m)) for r in results if r["job"] == job]
        add("%s >= %.1fx its own Triton writer" % (m, GOAL_TRITON), tri, lambda v: v >= GOAL_TRITON,
            lambda it: min(it, key=lambda x: x[1]), "%.2fx")
    for job, m in (("write", "ropekv_rec"), ("kv", "ropekv_rec_none"), ("read", "ropekv_rec_read")):
        same = [(r, vs_same_bytes(results, r, m)) for r in results if r["job"] == job]
        add("%s within %.0f%% of the kv dtype row of the same bytes (%s)" % (
            m, 100 * (GOAL_SAME - 1), ", ".join("%s vs %s" % kv for kv in SAME_BYTES.items())), same,
            lambda v: v <= GOAL_SAME, lambda it: max(it, key=lambda x: x[1]), "%.3f")
    return lines


CSV = ["date", "gpu", "row", "job", "T", "H", "method", "status", "us", "timing", "same", "bytes", "copy_us",
       "pct_of_copy", "vs_triton", "bw_pct", "empty_us", "roundtrip_us", "copy_TBps", "note"]


def write_records_outputs(args, meta, floors, results, methods):
    """bench_<date>_<gpu>_records[_tag].md / .csv: the header, the goals, then a table per job."""
    lines = preamble("Cache records: ropekv's generic writer and reader against a Triton writer and the copy,", args,
                     meta, bandwidths=False)
    lines += ["- rows: %s; L = %d, R = %d, GPT-J rope, f32 cos_sin_cache [%d, %d], flat uint8 caches [T + 1, "
              "row bytes], slots a permutation, k_scale %.2f where the row takes it; latent blocks of 16 scaled by "
              "2^-4 .. 2^4" % (", ".join(r["label"] for r in record_table()), L, R, MAX_POS, R, K_SCALE),
              "- jobs: write = q form absorbed (bf16 query [T, H, 576] in, q_out written) + the row; kv = q form "
              "none (the row only); read = the read-back of T rows (every 64th slot -1) into bf16 [T, 576]",
              "- timing: %d calls per CUDA graph, median of %d replays, each queued behind a GPU spin (* = CUDA "
              "events)" % (args.calls, args.reps), floors_line(floors),
              "- checks: ropekv's rows bit-identical to a PyTorch encoder of the record, q_out to ropekv.reference's "
              "rope, the read-back to a PyTorch decoder; the Triton writers' bytes equal to ropekv's (`!` and "
              "`differs`: not all equal, the fraction in the csv)",
              "- % of copy = a device copy of the same bytes (half read, half written) us / the method's us; BW % = "
              "the job's bytes / its time / the floor's copy bandwidth (at the largest sizes the same-size copy, a "
              "graph memcpy node, runs below that bandwidth and % of copy passes 100%); vs Triton = the fastest "
              "Triton writer's us (triton_rec, triton_rec_pdl) / ropekv's", "", "Goals:"]
    lines += goals(results) or ["- (nothing timed)"]
    for job, ms in (("write", ["ropekv_rec", "triton_rec", "triton_rec_pdl"]),
                    ("kv", ["ropekv_rec_none", "triton_rec_none"]), ("read", ["ropekv_rec_read"])):
        ms = [m for m in ms if m in methods]
        rs = [r for r in results if r["job"] == job]
        if not ms or not rs:
            continue
        rk = ms[0]
        head = ["row", "T"] + (["H"] if job == "write" else []) + ["%s us" % m for m in ms] + [
            "copy us", "% of copy", "BW %"] + (["vs Triton"] if job != "read" else []) + (
            ["vs same bytes"] if any(r["label"] in SAME_BYTES for r in rs) else [])
        body = []
        for r in rs:
            p, t, bw = pct_of_copy(r, rk), vs_triton(r, rk), (r["results"].get(rk) or {}).get("bw_pct")
            vals = [r["label"], str(r["T"])] + ([str(r["H"])] if job == "write" else [])
            vals += [_cell(r["results"].get(m)) for m in ms] + [fmt_us(r.get("copy_us")),
                                                               "%.0f%%" % p if p is not None else "-",
                                                               "%.0f%%" % bw if bw is not None else "-"]
            if job != "read":
                vals.append("%.2fx" % t if t is not None else "-")
            if "vs same bytes" in head:
                s = vs_same_bytes(results, r, rk)
                vals.append("%.3f" % s if s is not None else "-")
            body.append(vals)
        lines += ["", "### %s" % {"write": "Write, q form absorbed (bf16 query)", "kv": "Write, q form none (the row "
                                  "only)", "read": "Read-back"}[job], ""] + table(head, body)
    notes = sorted({"%s %s: %s" % (r["label"], m, v["note"]) for r in results for m, v in r["results"].items()
                    if v.get("note")})
    if notes:
        lines += ["", "Notes:"] + ["- " + n for n in notes[:30]]

    def rows_csv():
        for r in results:
            for m, v in r["results"].items():
                p, t = pct_of_copy(r, m), vs_triton(r, m)
                yield [meta["datetime"], meta["gpu"], r["label"], r["job"], r["T"], r["H"], m, v["status"],
                       "%.4f" % v["us"] if v.get("us") is not None else "", v.get("timing", ""),
                       "%.6f" % v["same"] if v.get("same") is not None else "", r["bytes"],
                       "%.4f" % r["copy_us"] if r.get("copy_us") else "", "%.2f" % p if p is not None else "",
                       "%.3f" % t if t is not None else "", "%.2f" % v["bw_pct"] if v.get("bw_pct") is not None else "",
                       "%.4f" % floors["empty_us"], "%.4f" % floors["roundtrip_us"],
                       "%.4f" % (floors["copy_Bps"] / 1e12), v.get("note", "")]

    return write(args, meta, file_stem(args, meta, "records", quick=False), lines, CSV, rows_csv())
