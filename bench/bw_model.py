#!/usr/bin/env python3
"""A bandwidth model of ropekv's kernels per target: the time per call predicted from the bytes a call moves, the
kernel's ISA figures and the target's published memory bandwidth and compute-unit count.

    python3 bench/bw_model.py               # the H200 validation, then the predicted MI300X / MI355X / gfx1250 tables
    python3 bench/bw_model.py --validate    # the H200 validation only (per shape, against bench/results)
    python3 bench/bw_model.py --predict     # the predicted tables only (markdown)
    python3 bench/bw_model.py --check       # exit 1 where the H200 validation leaves its stated error bounds

The model (each assumption is named where its figure is set, below):

    t = t_launch + legs * t_leg + bytes / (f * B)

- bytes: what bench_kernel.c's bytes_moved() counts for the op (DeepSeek-V3 dimensions, absorbed q form, bf16
  query, int64 positions and slots): q_nope + q_pe read and q_out written per head, k_nope + k_pe read and the
  cache row written, the position, the slot and the float32 cos/sin row read per token; the read-back op the
  cache row and the slot read and the bf16 row written.
- B: the published peak memory bandwidth; f: the fraction of it a device copy reaches (the H200's measured copy
  rate over its published peak, assumed for the AMD targets). bytes / (f B) is the streaming time.
- legs * t_leg: the dependent memory legs of a lane's critical path (a load that waits for an earlier load, or
  the drain of the last store before the next graph node starts) times one leg's latency. legs come from the
  kernel: 2 dependent loads (position -> cos/sin row; slot -> cache row on the read-back) and the store, plus the
  loads the compiler serialized without a data dependence, read from the ISA (docs/amd.md, "Per-target ISA
  review": on the AMD targets the query / latent chunk's load is waited for before the slot is read: one more
  leg; the read-back's one wait between two loads is its slot -> row dependence: no extra leg). t_leg is calibrated on the H200: (round-trip kernel - empty kernel) / 2, the round trip being one load and
  one store.
- t_launch: the empty-kernel floor of a launch in a graph (the H200's measured; assumed for AMD). With PDL (the
  H200's default) the next launch overlaps the call before it, and the model takes t_launch = 0.
- Additive, not max(): a small call's lanes are all resident at once (below), so it pays the chain and then
  streams its bytes; a large call's chain is paid once and is lost in the streaming time.
- Concurrency (occupancy) check: resident lanes = CUs * SIMDs * waves per SIMD (from the ISA's VGPRs) * wave size;
  each lane keeps one 16-byte chunk load in flight per leg, so the bandwidth Little's law allows is
  lanes * 16 B / t_leg. Where that is below f B it replaces f B; on every target here it is 4 to 8 times higher,
  so occupancy does not limit these kernels (printed with the tables).
- Not modelled: caches. The benchmark replays 50 calls on the same tensors, so a call whose bytes fit the last
  level cache (H200 L2; the AMD Infinity Cache) is partly served from it and runs faster than the model says;
  such shapes are reported apart in the validation. Neither are the tail of the last wave of blocks, the bf16
  kernels' split 16-byte stores (docs/amd.md) nor clocks.
"""
import argparse
import csv
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")

# DeepSeek-V3 MLA dimensions (specs/deepseek_v3.lua): latent L, rope R, row W = L + R.
L, R = 512, 64
W = L + R


def bytes_write(T, H, kv, q_elem=2, idx=8):
    """bench_kernel.c bytes_moved() for the absorbed write: kv 'bf16' (a 1152-byte row) or 'fp8' (576 bytes)."""
    row = W * (2 if kv == "bf16" else 1)
    q = W * 2 + W * q_elem  # q_nope + q_pe read, q_out written
    return T * H * q + T * (W * 2 + row) + T * (idx + idx + R * 4)


def bytes_read(T, kv, idx=8):
    """bytes_moved() for the read-back op: the cache row and the slot read, the bf16 row written."""
    row = W * (2 if kv == "bf16" else 1)
    return T * (row + W * 2 + idx)


# Per-target table. Sources: see docs/amd.md, "A bandwidth model". 'B' in bytes/s, times in us.
H200_MEASURED = {  # bench/results/bench_2026-11-29_NVIDIA_H200_h16.md, its floors line (the same run as the figures)
    "empty_us": 0.5325,
    "roundtrip_us": 1.0861,
    "copy_Bps": 4.2490e12,
}
B_H200 = 4.8e12  # NVIDIA H200 product page / datasheet: 4.8 TB/s HBM3e
F_COPY = H200_MEASURED["copy_Bps"] / B_H200  # 0.885: the copy's share of the published peak
T_LEG = (H200_MEASURED["roundtrip_us"] - H200_MEASURED["empty_us"]) / 2  # one dependent leg, us

TARGETS = {
    # name: arch, published bandwidth, CUs (SMs), SIMDs per CU, wave size, waves per SIMD from the ISA's VGPRs,
    # extra serialized legs of the write kernel read from the ISA, t_launch, f, whether the figures are published or assumed
    # H200: 28 registers a thread (ptxas), so 2048 threads per SM; 0 extra legs: the PTX loads the chunk before the
    # position with nothing waiting for it in between
    "H200": dict(arch="sm_90", B=B_H200, cus=132, simds=4, wave=32, waves=16, extra_legs=0,
                 launch=H200_MEASURED["empty_us"], f=F_COPY, source="published (NVIDIA); f, t_launch, t_leg measured"),
    "MI300X": dict(arch="gfx942", B=5.3e12, cus=304, simds=4, wave=64, waves=8, extra_legs=1,
                   launch=H200_MEASURED["empty_us"], f=F_COPY,
                   source="B, CUs published (AMD); f, t_launch, t_leg assumed = the H200's"),
    "MI355X": dict(arch="gfx950", B=8.0e12, cus=256, simds=4, wave=64, waves=8, extra_legs=1,
                   launch=H200_MEASURED["empty_us"], f=F_COPY,
                   source="B, CUs published (AMD); f, t_launch, t_leg assumed = the H200's"),
    "gfx1250": dict(arch="gfx1250", B=8.0e12, cus=256, simds=4, wave=32, waves=16, extra_legs=1,
                    launch=H200_MEASURED["empty_us"], f=F_COPY,
                    source="no published product: B and CUs assumed = the MI355X's (placeholders, not verified)"),
}

BASE_LEGS = 3  # 2 dependent loads + the store's drain, from the template's data dependences


def concurrency_Bps(tg):
    lanes = tg["cus"] * tg["simds"] * tg["waves"] * tg["wave"]
    return lanes * 16 / (T_LEG * 1e-6)


def predict(tg, nbytes, pdl=False, op="write"):
    """Time per call in us."""
    legs = BASE_LEGS + (tg["extra_legs"] if op == "write" else 0)
    bw = min(tg["f"] * tg["B"], concurrency_Bps(tg))
    launch = 0.0 if pdl else tg["launch"]
    return launch + legs * T_LEG + nbytes / bw * 1e6


# ---- validation on the H200 ----

# (file, method column, op, the PDL launch or not)
VALIDATION = [
    ("bench_2026-11-29_NVIDIA_H200_h16.csv", "ropekv", "write", True),
    ("bench_2026-11-29_NVIDIA_H200_h128.csv", "ropekv", "write", True),
    ("bench_2026-11-29_NVIDIA_H200_h16.csv", "ropekv_nopdl", "write", False),
    ("bench_2026-11-29_NVIDIA_H200_h128.csv", "ropekv_nopdl", "write", False),
    ("bench_2026-11-30_NVIDIA_H200_read.csv", "ropekv_read", "read", True),
]
L2_H200 = 50 * 2**20  # bytes; H100 SXM5's L2 (NVIDIA Hopper whitepaper), assumed the same die's on the H200

# Stated error bounds of the validation (--check): mean |error| and worst |error| in %, per class of shape.
BOUNDS = {"all": (12.0, 35.0), "hbm": (8.0, 18.0)}


def measured_rows():
    rows = []
    for name, method, op, pdl in VALIDATION:
        path = os.path.join(RESULTS, name)
        with open(path, newline="") as fh:
            for r in csv.DictReader(fh):
                if r.get("method") != method or r.get("status") != "ok":
                    continue
                if op == "read" and r.get("kv") not in ("bf16", "fp8_e4m3"):
                    continue  # fp8_tile is DeepSeek-V3.2's record, another byte count
                T, H = int(r["T"]), int(r["H"])
                kv = "bf16" if r["kv"] == "bf16" else "fp8"
                nb = bytes_write(T, H, kv) if op == "write" else bytes_read(T, kv)
                if int(r["bytes"]) != nb:
                    sys.exit(f"bw_model: {name} T={T} H={H} {kv}: bytes {r['bytes']} in the file, {nb} here")
                rows.append(dict(file=name, method=method, op=op, pdl=pdl, T=T, H=H, kv=kv, bytes=nb,
                                 us=float(r["us"])))
    return rows


def classify(nbytes, pred_stream, pred_chain):
    if nbytes <= L2_H200:
        return "small" if pred_chain >= pred_stream else "l2"
    return "hbm"


def validate(out=sys.stdout):
    tg = TARGETS["H200"]
    rows = measured_rows()
    errs = {"all": [], "hbm": [], "small": [], "l2": []}
    print("| file | method | op | T | H | kv | MB | measured us | predicted us | error | regime |", file=out)
    print("|---|---|---|---|---|---|---|---|---|---|---|", file=out)
    for r in rows:
        p = predict(tg, r["bytes"], pdl=r["pdl"], op=r["op"])
        stream = r["bytes"] / (tg["f"] * tg["B"]) * 1e6
        chain = (0 if r["pdl"] else tg["launch"]) + (BASE_LEGS + tg["extra_legs"]) * T_LEG
        cls = classify(r["bytes"], stream, chain)
        e = 100.0 * (p - r["us"]) / r["us"]
        errs["all"].append(e)
        errs[cls].append(e)
        print(f"| {r['file'].replace('bench_', '').replace('.csv', '')} | {r['method']} | {r['op']} | {r['T']} | "
              f"{r['H']} | {r['kv']} | {r['bytes'] / 1e6:.3g} | {r['us']:.3g} | {p:.3g} | {e:+.0f}% | {cls} |",
              file=out)
    print(file=out)
    summary = {}
    for k in ("all", "hbm", "small", "l2"):
        v = errs[k]
        if not v:
            continue
        mean_abs = sum(abs(x) for x in v) / len(v)
        worst = max(v, key=abs)
        bias = sum(v) / len(v)
        summary[k] = (mean_abs, abs(worst))
        print(f"- {k}: {len(v)} shapes, mean |error| {mean_abs:.1f}%, mean error {bias:+.1f}%, worst {worst:+.0f}%",
              file=out)
    return summary


def predict_tables(out=sys.stdout):
    Ts = [1, 4, 16, 64, 128, 512, 2048, 8192, 32768]
    names = ["H200", "MI300X", "MI355X", "gfx1250"]
    print("Target figures (t_leg = %.3f us, f = %.3f):" % (T_LEG, F_COPY), file=out)
    print(file=out)
    print("| target | arch | B TB/s | f B TB/s | CUs | waves/SIMD (ISA) | legs | t_launch us | "
          "concurrency bound TB/s | figures |", file=out)
    print("|---|---|---|---|---|---|---|---|---|---|", file=out)
    for n in names:
        tg = TARGETS[n]
        print(f"| {n} | {tg['arch']} | {tg['B'] / 1e12:.2f} | {tg['f'] * tg['B'] / 1e12:.2f} | {tg['cus']} | "
              f"{tg['waves']} | {BASE_LEGS + tg['extra_legs']} | {tg['launch']:.2f} | "
              f"{concurrency_Bps(tg) / 1e12:.0f} | {tg['source']} |", file=out)
    print(file=out)
    print("Write (absorbed, bf16 query), us per call, plain launches in a graph (no PDL):", file=out)
    print(file=out)
    print("| T | H | MB (bf16 / fp8 cache) | " + " | ".join(f"{n} bf16 | {n} fp8" for n in names) + " |", file=out)
    print("|---|---|---|" + "---|---|" * len(names), file=out)
    for H in (16, 128):
        for T in Ts:
            b16, b8 = bytes_write(T, H, "bf16"), bytes_write(T, H, "fp8")
            cells = []
            for n in names:
                cells += [f"{predict(TARGETS[n], b16):.3g}", f"{predict(TARGETS[n], b8):.3g}"]
            print(f"| {T} | {H} | {b16 / 1e6:.3g} / {b8 / 1e6:.3g} | " + " | ".join(cells) + " |", file=out)
    print(file=out)
    print("Read-back (rows by slot to bf16), us per call, plain launches:", file=out)
    print(file=out)
    print("| T | MB (bf16 / fp8 cache) | " + " | ".join(f"{n} bf16 | {n} fp8" for n in names) + " |", file=out)
    print("|---|---|" + "---|---|" * len(names), file=out)
    for T in (1, 16, 128, 2048, 16384, 131072):
        b16, b8 = bytes_read(T, "bf16"), bytes_read(T, "fp8")
        cells = []
        for n in names:
            cells += [f"{predict(TARGETS[n], b16, op='read'):.3g}", f"{predict(TARGETS[n], b8, op='read'):.3g}"]
        print(f"| {T} | {b16 / 1e6:.3g} / {b8 / 1e6:.3g} | " + " | ".join(cells) + " |", file=out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--validate", action="store_true", help="the H200 validation only")
    ap.add_argument("--predict", action="store_true", help="the predicted tables only")
    ap.add_argument("--check", action="store_true", help="exit 1 where the validation leaves its stated bounds")
    a = ap.parse_args()
    if a.check:
        with open(os.devnull, "w") as null:
            s = validate(null)
        bad = [f"{k}: mean |error| {s[k][0]:.1f}% (bound {m}%), worst {s[k][1]:.0f}% (bound {w}%)"
               for k, (m, w) in BOUNDS.items() if k in s and (s[k][0] > m or s[k][1] > w)]
        for k, (m, w) in BOUNDS.items():
            print(f"bw_model: H200 {k}: mean |error| {s[k][0]:.1f}% (bound {m}%), worst {s[k][1]:.0f}% (bound {w}%)")
        if bad:
            print("bw_model: outside the stated error: " + "; ".join(bad))
            return 1
        return 0
    if not a.predict:
        validate()
    if not a.validate:
        print()
        predict_tables()
    return 0


if __name__ == "__main__":
    sys.exit(main())
