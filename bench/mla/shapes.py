"""The shapes: DeepSeek-V3's dimensions, the shape sets of the sweeps, each mode's methods (their q forms, peers and
what --cpu runs), and the bytes each job moves at least (the limit and the BW % columns)."""

L, R, W = 512, 64, 576
MAX_POS = 4096
FP8_MAX = 448.0
K_SCALE = 0.5
Q_SCALE = 0.0123  # the fp8 query's per-tensor scale: about max |q| / 448 for the bf16 randn query
BLOCK_SIZE = 16

# The fp8 policies of the specs benchmarked (specs/<name>.lua: L = 512, R = 64, GPT-J, f32_cat for both). The
# spec's policy is the definition: main() compares these with the ropekv kernels' info and takes the library's.
SPECS = {
    "deepseek_v3": dict(kv_scale="mul_recip", kv_rr=False, q_scale="mul_recip", q_rr=False, q_sat=FP8_MAX,
                        q_forms=("absorbed", "zero_copy", "none")),
    "kimi_k2": dict(kv_scale="div", kv_rr=False, q_scale="mul_recip", q_rr=True, q_sat=FP8_MAX,
                    q_forms=("absorbed", "inplace")),
}
SCALE_CONV = {"none": 0, "mul_recip": 1, "div": 2, "mul": 3}  # the Triton kernel's constexpr

ALL_T = [1, 4, 16, 64, 128, 512, 2048, 8192, 32768]
ALL_H = [16, 128]
ALL_KV = ["bf16", "fp8_e4m3"]
# method -> (q form, fp8 query): what its job is, hence its bytes moved and how it is checked
FORMS = {
    "ropekv": ("absorbed", False), "ropekv_nopdl": ("absorbed", False), "ropekv_prefetch": ("absorbed", False),
    "ropekv_fp8q": ("absorbed", True), "ropekv_zero_copy": ("zero_copy", False),
    "ropekv_zero_copy_fp8q": ("zero_copy", True), "ropekv_inplace": ("inplace", False),
    "ropekv_inplace_fp8q": ("inplace", True), "ropekv_none": ("none", False),
    "triton": ("absorbed", False), "triton_pdl": ("absorbed", False), "triton_prefetch": ("absorbed", False),
    "triton_fp8q": ("absorbed", True), "triton_fp8q_pdl": ("absorbed", True),
    "compile": ("absorbed", False), "eager": ("absorbed", False), "aiter": ("absorbed", False),
    "compile_fp8q": ("absorbed", True), "eager_fp8q": ("absorbed", True),
}
ALL_METHODS = list(FORMS)
PEERS = ["triton", "triton_pdl", "compile", "eager", "aiter"]
PREFETCH_PEERS = ["triton_prefetch"]  # compared with ropekv_prefetch only (the same contract)
FP8Q_PEERS = ["triton_fp8q", "triton_fp8q_pdl", "compile_fp8q", "eager_fp8q"]  # compared with ropekv_fp8q
CPU_METHODS = ["eager", "eager_fp8q"] + [m for m in FORMS if m.startswith("ropekv")]  # what --cpu can run

# --mode v32: DeepSeek-V3.2's writer, the fp8_tile row (656 bytes: 4 tiles of 128 fp8 latent values, their 4 float32
# scales, the 64 rope values in bf16) in a paged cache; method -> its q form
TILE, ROW_BYTES, SCALES_AT, ROPE_AT = 128, 656, 512, 528
NTILES = L // TILE
FLT_MIN = 2.0 ** -126
V32_BLOCK = 64  # vLLM's block size for DeepSeek-V3.2's fp8_ds_mla cache
V32_FORMS = {"ropekv_v32": "absorbed", "ropekv_v32_none": "none", "triton_v32": "absorbed",
             "triton_v32_pdl": "absorbed", "triton_v32_none": "none", "compile_v32": "absorbed",
             "eager_v32": "absorbed", "eager_v32_none": "none"}
# --mode read: rows gathered by slot and dequantized to bf16 [T, 576]; kv dtype -> (spec, layout) read
READ_KV = {"fp8_tile": ("deepseek_v32", "paged"), "fp8_e4m3": ("deepseek_v3", "flat"), "bf16": ("deepseek_v3", "flat")}
READ_METHODS = ["ropekv_read", "triton_read", "triton_read_pdl", "compile_read", "eager_read"]
# per ropekv method of these modes: the peers doing the same job (its "vs best peer" column)
JOB_PEERS = {"ropekv_v32": ["triton_v32", "triton_v32_pdl", "compile_v32", "eager_v32"],
             "ropekv_v32_none": ["triton_v32_none", "eager_v32_none"],
             "ropekv_read": ["triton_read", "triton_read_pdl", "compile_read", "eager_read"]}
# the Triton peers whose outputs must equal ropekv's byte for byte (the same arithmetic)
SAME_AS = {"triton_v32": "ropekv_v32", "triton_v32_pdl": "ropekv_v32", "triton_v32_none": "ropekv_v32_none",
           "triton_read": "ropekv_read", "triton_read_pdl": "ropekv_read"}
# --mode records: every cache record of the built-in specs (records.record_table) written (absorbed: T x H; none: the
# row only) and read back, beside a Triton writer of the same record; each method's job is in records.METHODS
RECORD_T = [1, 4, 16, 128, 2048, 8192, 32768]
RECORD_READ_ROWS = [8192, 32768, 131072, 524288]
RECORD_METHODS = ["ropekv_rec", "triton_rec", "triton_rec_pdl", "ropekv_rec_none", "triton_rec_none", "ropekv_rec_read"]
MODE_METHODS = {"write": ALL_METHODS, "v32": list(V32_FORMS), "read": READ_METHODS, "records": RECORD_METHODS}
# the fused kv_a RMSNorm section (write mode, absorbed bf16 query, --spec's kv_norm): the fused op, its peers, and ropekv
# without the norm on the already-normalized input (the baseline of the goal: fused within NORM_GOAL of it)
NORM_METHODS = ["ropekv_norm", "ropekv_norm_out", "rmsnorm_ropekv", "eager_norm", "ropekv_nonorm"]
NORM_PEERS = ["rmsnorm_ropekv", "eager_norm"]
NORM_GOAL = 1.05
# a peer's normalized values against the fused op's: its RMSNorm sums in another order (and may use an approximate
# rsqrt), so r differs by a few float32 ulps; bf16(x * r) can then land one bf16 step away, and after * w that is at
# most 2 bf16 steps of the result (less than 2 ulps of it before the last rounding); an fp8 cache's code at most 1 fp8
# step (2 bf16 steps are far below one fp8 step: one rounding boundary crossed at most)
NORM_PEER_STEPS = {"bf16": 2, "fp8": 1}


def default_methods(spec):
    """Every method whose q form the spec lists."""
    return [m for m in ALL_METHODS if FORMS[m][0] in SPECS[spec]["q_forms"]]


def op_bytes(T, H, kv_fp8, form="absorbed", q_fp8=False):
    """The bytes one call's job moves at least: the query part of its q form (absorbed: q_nope + q_pe read,
    q_out written; zero_copy: q_pe read, q_out[..., L:] written; inplace: q_pe read and written back, fp8: R
    bytes a row; none: nothing), an fp8 query writing 1 byte an element instead of 2; then k_nope + k_pe read,
    the KV row written (1 or 2 bytes an element), positions + slots (int64) and the cos/sin rows (f32) read."""
    qb = 1 if q_fp8 else 2
    q = {"absorbed": T * H * (L + R) * 2 + T * H * W * qb,
         "zero_copy": T * H * R * 2 + T * H * R * qb,
         "inplace": T * H * R * 2 + T * H * R * qb,
         "none": 0}[form]
    kvb = 1 if kv_fp8 else 2
    return q + T * (L + R) * 2 + T * W * kvb + T * 8 * 2 + T * R * 4


def method_bytes(T, H, kv, method):
    form, q_fp8 = FORMS[method]
    return op_bytes(T, H, kv == "fp8_e4m3", form, q_fp8)


def bw_pct(nbytes, us, copy_Bps):
    """Bytes moved per second as a fraction of the copy bandwidth, in %; None without a time."""
    if not us or not copy_Bps:
        return None
    return 100.0 * nbytes / (us * 1e-6) / copy_Bps


def v32_bytes(T, H, form):
    """The bytes one call of the V3.2 writer moves at least: the absorbed query (q_nope + q_pe read, q_out written;
    none: nothing), k_nope + k_pe read, the 656-byte row written, positions + slots (int64) and the cos/sin rows."""
    q = T * H * (L + R) * 2 + T * H * W * 2 if form == "absorbed" else 0
    return q + T * (L + R) * 2 + T * ROW_BYTES + T * 8 * 2 + T * R * 4


READ_ROW_BYTES = {"bf16": 2 * W, "fp8_e4m3": W, "fp8_tile": ROW_BYTES}


def read_bytes(T, kv):
    """The bytes one read-back call moves: each row read (1152, 576 or 656 bytes), the bf16 [T, 576] out written,
    the slots (int64) read."""
    return T * READ_ROW_BYTES[kv] + T * W * 2 + T * 8


def job_bytes(T, H, kv, method):
    if method in V32_FORMS:
        return v32_bytes(T, H, V32_FORMS[method])
    return read_bytes(T, kv)


def norm_bytes(T, H, kv_fp8, norm="rms"):
    """The bytes of the fused job: the absorbed op's (op_bytes; the raw c_kv is read where k_nope was), the weight,
    and for rms_out the normalized rows written."""
    return op_bytes(T, H, kv_fp8) + L * 2 + (T * L * 2 if norm == "rms_out" else 0)


def cos_sin_table(torch, dev):
    """The cos_sin_cache [MAX_POS, R] of every sweep: cos | sin of the rope angles (base 10000), computed in float64,
    stored as float32."""
    half = R // 2
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, half, dtype=torch.float64, device=dev) * 2 / R))
    freqs = torch.arange(MAX_POS, dtype=torch.float64, device=dev)[:, None] * inv_freq[None, :]
    return torch.cat([freqs.cos(), freqs.sin()], dim=-1).float().contiguous()
