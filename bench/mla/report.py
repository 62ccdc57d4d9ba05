"""The report writer: one function (write) puts a section's lines in <out>/<stem>.md (and prints them), its rows in
.csv and, for the timing sweeps, the log-log plot in .png; the sections' layouts (write mode, --mode v32 / read, the
norm section) build the header, the tables and the csv rows from the sweep's rows."""
import csv
import os
import re

from .env import log
from .shapes import (BLOCK_SIZE, FORMS, FP8_MAX, FP8Q_PEERS, JOB_PEERS, K_SCALE, L, MAX_POS, NORM_GOAL,
                     NORM_PEER_STEPS, NORM_PEERS, NTILES, PEERS, R, ROW_BYTES, SAME_AS, TILE, V32_FORMS, W, job_bytes,
                     method_bytes, norm_bytes, op_bytes, read_bytes, v32_bytes)


# ---- cells -----------------------------------------------------------------------------------------------------------

def fmt_us(v):
    if v is None:
        return "-"
    if v < 10:
        return "%.2f" % v
    if v < 1000:
        return "%.1f" % v
    return "%.0f" % v


def cell(res):
    if res is None:
        return "-"
    if res["status"] != "ok":
        return res["status"]
    return fmt_us(res["us"]) + ("*" if res["timing"] == "events" else "")


def _ratio_vs_best(res, method, peers):
    """best peer us / method us, formatted; '-' when either is missing."""
    me = res.get(method)
    best = [res[m]["us"] for m in peers if res.get(m) and res[m]["status"] == "ok"]
    if me is None or me["status"] != "ok" or not best:
        return "-"
    return "%.2fx" % (min(best) / me["us"])


def _exact(res):
    return "%.4f%%" % (100 * res["exact"]) if res is not None and res.get("exact") is not None else "-"


def _norm_ratio(res, a, b):
    """a us / b us as '1.03' ('-' when either is missing)."""
    x, y = res.get(a), res.get(b)
    if not x or not y or x["status"] != "ok" or y["status"] != "ok":
        return "-"
    return "%.3f" % (x["us"] / y["us"])


def norm_goal(rows):
    """(shapes where ropekv_norm and ropekv_nonorm were both timed, those within NORM_GOAL, the worst ratio and its
    shape)."""
    n = met = 0
    worst = None
    for r in rows:
        v = _norm_ratio(r["results"], "ropekv_norm", "ropekv_nonorm")
        if v == "-":
            continue
        n += 1
        met += float(v) <= NORM_GOAL
        if worst is None or float(v) > worst[0]:
            worst = (float(v), r["T"], r["H"], r["kv"])
    return n, met, worst


# ---- the plot --------------------------------------------------------------------------------------------------------
PLOT_STYLE = {"ropekv": ("C3", "o"), "ropekv_nopdl": ("C5", "o"), "ropekv_prefetch": ("C6", "o"),
              "ropekv_fp8q": ("C3", "D"), "ropekv_zero_copy": ("C8", "o"), "ropekv_zero_copy_fp8q": ("C8", "D"),
              "ropekv_inplace": ("C7", "o"), "ropekv_inplace_fp8q": ("C7", "D"), "ropekv_none": ("k", "x"),
              "triton": ("C0", "s"), "triton_pdl": ("C4", "s"), "triton_prefetch": ("C9", "s"), "aiter": ("C1", "^"),
              "triton_fp8q": ("C0", "P"), "triton_fp8q_pdl": ("C4", "P"),
              "compile": ("C2", "^"), "eager": ("C1", "v"), "compile_fp8q": ("C2", "<"), "eager_fp8q": ("C1", ">"),
              "ropekv_v32": ("C3", "o"), "ropekv_v32_none": ("C3", "x"), "triton_v32": ("C0", "s"),
              "triton_v32_pdl": ("C4", "s"), "triton_v32_none": ("C0", "x"), "compile_v32": ("C2", "^"),
              "eager_v32": ("C1", "v"), "eager_v32_none": ("C1", "x"), "ropekv_read": ("C3", "o"),
              "triton_read": ("C0", "s"), "triton_read_pdl": ("C4", "s"), "compile_read": ("C2", "^"),
              "eager_read": ("C1", "v")}


def plot(path, meta, rows, methods, args):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    Hs = sorted({r["H"] for r in rows})
    kvs = []
    for r in rows:
        if r["kv"] not in kvs:
            kvs.append(r["kv"])
    fig, axes = plt.subplots(len(Hs), len(kvs), figsize=(6.5 * len(kvs), 4.8 * len(Hs)), squeeze=False)
    for i, H in enumerate(Hs):
        for j, kv in enumerate(kvs):
            ax = axes[i][j]
            sel = sorted((r for r in rows if r["H"] == H and r["kv"] == kv), key=lambda r: r["T"])
            for m in methods:
                pts = [(r["T"], r["results"][m]["us"]) for r in sel
                       if r["results"].get(m) and r["results"][m]["status"] == "ok"]
                if pts:
                    c, mk = PLOT_STYLE.get(m, ("k", "."))
                    ls = "--" if (FORMS[m][1] if m in FORMS else m.endswith("_none")) else "-"
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=mk, color=c, linestyle=ls, label=m)
            if sel:
                ax.plot([r["T"] for r in sel], [r["limit_us"] for r in sel], "k--", label="limit")
                cp = [(r["T"], r["copy_us"]) for r in sel if r.get("copy_us")]
                if cp:
                    ax.plot([p[0] for p in cp], [p[1] for p in cp], "k:", label="copy (same bytes)")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("tokens T")
            ax.set_ylabel("us per call")
            ax.set_title("H=%d, kv=%s" % (H, kv))
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
    title = {"v32": "DeepSeek-V3.2 fp8_tile writer", "read": "KV-cache read-back"}.get(
        meta.get("mode"), "MLA RoPE + KV write, DeepSeek-V3 dims")
    fig.suptitle("%s, %s (%s)" % (title, meta["gpu"], meta["date"]))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# ---- the writer ------------------------------------------------------------------------------------------------------
def file_stem(args, meta, section="", quick=True):
    """bench_<date>_<gpu>[_quick][_<section>][_<tag>]: the files' name (quick: whether --quick marks it)."""
    gpu = re.sub(r"[^A-Za-z0-9]+", "_", meta["gpu"]).strip("_") or "gpu"
    tag = re.sub(r"[^A-Za-z0-9_.-]+", "_", args.tag)
    return "bench_%s_%s%s%s%s" % (meta["date"], gpu, "_quick" if quick and args.quick else "",
                                  "_" + section if section else "", "_" + tag if tag else "")


def write(args, meta, stem, lines, csv_head, csv_rows, plot_rows=None, methods=None):
    """Writes <args.out>/<stem>.md (the lines, also printed), .csv (csv_head, then csv_rows) and, given plot_rows and
    without --no-plot, the .png plot of plot_rows (a plot that fails is logged). Returns the paths written."""
    os.makedirs(args.out, exist_ok=True)
    base = os.path.join(args.out, stem)
    md = "\n".join(lines) + "\n"
    with open(base + ".md", "w") as fh:
        fh.write(md)
    print(md)
    with open(base + ".csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(csv_head)
        for row in csv_rows:
            w.writerow(row)
    paths = [base + ".md", base + ".csv"]
    if plot_rows is not None and not args.no_plot:
        try:
            paths.append(plot(base + ".png", meta, plot_rows, methods, args))
        except Exception as e:  # noqa: BLE001
            log("plot failed: %s" % e)
    return paths


def table(head, rows):
    """A markdown table's lines: the head, the rule, one line per row of cells."""
    return (["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
            + ["| " + " | ".join(vals) + " |" for vals in rows])


def run_line(meta):
    return "- date: %s; GPU: %s (%d SMs / CUs); torch %s (%s); triton %s; ropekv %s (target %s)" % (
        meta["datetime"], meta["gpu"], meta["sms"], meta["torch"], meta["cuda"], meta["triton"], meta["ropekv"],
        meta["target"])


def preamble(title, args, meta, kernels=True, bandwidths=True):
    """A report's first lines: "# <title> on <gpu>", the run's line, the --cpu warning, and with kernels the ropekv
    kernels' lines."""
    lines = ["# %s on %s" % (title, meta["gpu"]), "", run_line(meta)]
    if args.cpu:
        lines.append("- **--cpu: the script checked on the CPU; the times%s are not GPU figures**"
                     % (" and bandwidths" if bandwidths else ""))
    return lines + (kernel_lines(meta) if kernels else [])


def kernel_lines(meta):
    return ["- ropekv kernel (%s): `%s` (kernel_get %.1f ms)" % (label, name, get_ms)
            for label, (name, get_ms) in meta["kernels"].items()]


def floors_line(floors):
    return ("- floors (same run): empty kernel %.2f us; 16 B read + 16 B write kernel %.2f us; device copy "
            "%.2f TB/s (2 GiB, read + write)" % (floors["empty_us"], floors["roundtrip_us"], floors["copy_Bps"] / 1e12))


def notes_lines(rows, methods):
    """The methods' notes (the first 20, sorted, each once) after a blank line and "Notes:"; none without notes."""
    notes = sorted({"%s: %s" % (m, r["results"][m]["note"]) for r in rows for m in methods
                    if r["results"].get(m) and r["results"][m].get("note")})
    return ["", "Notes:"] + ["- " + n for n in notes[:20]] if notes else []


def bw_cells(res, methods):
    """Each method's BW % cell ('-' unless it ran ok with a bandwidth)."""
    vals = []
    for m in methods:
        v = res.get(m)
        pct = v.get("bw_pct") if v is not None and v["status"] == "ok" else None
        vals.append("%.0f%%" % pct if pct is not None else "-")
    return vals


def result_cells(res):
    """A result's csv columns: status, us, timing, max_steps, bit_identical."""
    return [res["status"], "%.4f" % res["us"] if res.get("us") is not None else "", res.get("timing", ""),
            res.get("steps", ""), "%.6f" % res["exact"] if res.get("exact") is not None else ""]


def floors_cells(floors):
    """The floors' csv columns: empty_us, roundtrip_us, copy_TBps."""
    return ["%.4f" % floors["empty_us"], "%.4f" % floors["roundtrip_us"], "%.4f" % (floors["copy_Bps"] / 1e12)]


def csv_rows(rows, methods, cells):
    """One csv row per shape and method with a result: cells(row, method, result)."""
    for r in rows:
        for m in methods:
            res = r["results"].get(m)
            if res is None:
                continue
            yield cells(r, m, res)


# ---- --mode write ----------------------------------------------------------------------------------------------------
WRITE_CSV = ["date", "gpu", "T", "H", "kv", "method", "status", "us", "timing", "max_steps", "bit_identical", "bytes",
             "limit_us", "copy_us", "empty_us", "roundtrip_us", "copy_TBps", "spec", "q_form", "q_dtype",
             "method_bytes", "bw_pct", "note"]


def write_outputs(args, meta, floors, rows, methods):
    """The write sweep's report: bench_<date>_<gpu>[_quick][_tag].md (per shape each method's us, ropekv's speed-up
    over the best peer, its % of the limit and of the copy, the bit-identical fractions; then BW % per method),
    .csv (one row per shape and method) and .png."""
    lines = _write_header(args, meta, floors, methods) + [""] + _write_table(rows, methods)
    lines += _write_bandwidth(floors, rows, methods) + notes_lines(rows, methods)

    def cells(r, m, res):
        form, q_fp8 = FORMS[m]
        return ([meta["datetime"], meta["gpu"], r["T"], r["H"], r["kv"], m] + result_cells(res)
                + [r["bytes"], "%.4f" % r["limit_us"], "%.4f" % r["copy_us"] if r.get("copy_us") else ""]
                + floors_cells(floors)
                + [args.spec, form, "fp8_e4m3" if q_fp8 else "bf16", method_bytes(r["T"], r["H"], r["kv"], m),
                   "%.2f" % res["bw_pct"] if res.get("bw_pct") is not None else "", res.get("note", "")])

    return write(args, meta, file_stem(args, meta), lines, WRITE_CSV, csv_rows(rows, methods, cells), rows, methods)


def _write_header(args, meta, floors, methods):
    pol = meta["policy"]
    lines = preamble("MLA RoPE + KV-cache write: ropekv vs peers", args, meta)
    lines.append("- shapes: DeepSeek-V3 L=%d, R=%d, GPT-J rope, f32 cos_sin_cache [%d, %d]; paged cache [blocks, %d, %d];"
                 " fp8: OCP e4m3, k_scale %.2f (x * 1/k_scale), clamp +-%g" % (L, R, MAX_POS, R, BLOCK_SIZE, W,
                                                                            K_SCALE, FP8_MAX))
    if any(FORMS[m][1] for m in methods):
        lines.append("- fp8 query (spec %s): q_scale %g, %s%s, clamp +-%g, OCP e4m3 (q_nope and the rope part of "
                     "q_out)" % (args.spec, args.q_scale, {"mul_recip": "x * (1/q_scale)", "div": "x / q_scale",
                                                           "mul": "x * q_scale", "none": "no scale"}[pol["q_scale"]],
                                 ", the rope rounded to bf16 first" if pol["q_rr"] else "", pol["q_sat"]))
    lines.append("- timing: %d calls per CUDA graph, median of %d replays, each queued behind a GPU spin so the host's "
                 "submission is not timed; per-call us (* = graph capture failed: back-to-back launches timed with "
                 "CUDA events)" % (args.calls, args.reps))
    lines.append(floors_line(floors))
    lines.append("- limit = max(round-trip floor, bytes / copy bandwidth), bytes = the absorbed form's with a bf16 "
                 "query; vs best peer = best peer us / ropekv us; "
                 "%% of limit = limit us / ropekv us x 100; copy us = a device copy of the same bytes (half read, "
                 "half written) in the same graph timing; %% of copy = copy us / ropekv us x 100; ropekv and "
                 "triton_pdl launch with PDL, ropekv_nopdl and triton without; prefetch vs peer = triton_prefetch us "
                 "/ ropekv_prefetch us (both read positions and cos/sin before the PDL wait); fp8q vs best fp8q peer "
                 "= best of %s us / ropekv_fp8q us" % ", ".join(FP8Q_PEERS))
    lines.append("- torch.compile: mode=%s, dynamic=%s" % (args.compile_mode, args.compile_dynamic))
    lines.append("- checks: every method before timing vs a PyTorch reference of ropekv's arithmetic (one rounded "
                 "product, one fma, emulated exactly): q_nope/k_nope parts bit-identical (an fp8 query's q_nope: "
                 "within 1 fp8 step), rope elements bit-identical "
                 "or within 1 bf16 (fp8) step of max(|expected|, |x0*c| + |x1*s|), the bound of two-rounding "
                 "x0*c - x1*s; 'bit-identical' = the outputs equal to the reference's bit for bit (ropekv's here, "
                 "every method's in the csv)")
    return lines


def _write_table(rows, methods):
    peers = [m for m in PEERS if m in methods]
    fp8q_peers = [m for m in FP8Q_PEERS if m in methods]
    head = ["T", "H", "kv"] + ["%s us" % m for m in methods] + ["limit us", "copy us"]
    if "ropekv" in methods:
        head += ["vs best peer", "% of limit", "% of copy", "bit-identical"]
    pf = "ropekv_prefetch" in methods and "triton_prefetch" in methods
    if pf:
        head += ["prefetch vs peer"]
    fq = "ropekv_fp8q" in methods
    if fq:
        head += ["fp8q vs best fp8q peer", "fp8q bit-identical"]
    for m in ("triton_fp8q", "triton_fp8q_pdl"):  # expected bit-identical too (ropekv's arithmetic)
        if m in methods:
            head += ["%s bit-identical" % m]
    body = []
    for r in rows:
        res = r["results"]
        vals = [str(r["T"]), str(r["H"]), r["kv"]] + [cell(res.get(m)) for m in methods] + [fmt_us(r["limit_us"]),
                                                                                            fmt_us(r.get("copy_us"))]
        if "ropekv" in methods:
            rk = res.get("ropekv")
            ok_rk = rk is not None and rk["status"] == "ok"
            vals.append(_ratio_vs_best(res, "ropekv", peers))
            vals.append("%.0f%%" % (100 * r["limit_us"] / rk["us"]) if ok_rk else "-")
            vals.append("%.0f%%" % (100 * r["copy_us"] / rk["us"]) if ok_rk and r.get("copy_us") else "-")
            vals.append(_exact(rk))
        if pf:
            a, b = res.get("ropekv_prefetch"), res.get("triton_prefetch")
            ok = a and b and a["status"] == "ok" and b["status"] == "ok"
            vals.append("%.2fx" % (b["us"] / a["us"]) if ok else "-")
        if fq:
            vals.append(_ratio_vs_best(res, "ropekv_fp8q", fp8q_peers))
            vals.append(_exact(res.get("ropekv_fp8q")))
        for m in ("triton_fp8q", "triton_fp8q_pdl"):
            if m in methods:
                vals.append(_exact(res.get(m)))
        body.append(vals)
    return table(head, body)


def _write_bandwidth(floors, rows, methods):
    """The bandwidth fraction of every method: its own job's bytes / its time / the copy bandwidth of this run."""
    lines = [""]
    lines.append("Bandwidth: BW %% = bytes the method's job moves (its q form and query dtype: absorbed reads q_nope + "
                 "q_pe and writes q_out, zero_copy reads q_pe and writes q_out[..., L:], inplace reads and writes q_pe "
                 "(fp8: R bytes a row), none no query; an fp8 query 1 byte an element; KV row, positions, slots, "
                 "cos/sin rows for all) / time / the copy bandwidth above (%.2f TB/s). MB = those bytes." %
                 (floors["copy_Bps"] / 1e12))
    lines.append("")
    jobs = []  # the distinct jobs (q form, fp8 query) of the methods, for the bytes columns
    for m in methods:
        if FORMS[m] not in jobs:
            jobs.append(FORMS[m])
    head = ["T", "H", "kv"] + ["%s BW %%" % m for m in methods]
    head += ["%s%s MB" % (form, " fp8q" if q_fp8 else "") for form, q_fp8 in jobs]
    body = [[str(r["T"]), str(r["H"]), r["kv"]] + bw_cells(r["results"], methods)
            + ["%.3f" % (op_bytes(r["T"], r["H"], r["kv"] == "fp8_e4m3", form, q_fp8) / 1e6) for form, q_fp8 in jobs]
            for r in rows]
    return lines + table(head, body)


# ---- --mode v32 and --mode read --------------------------------------------------------------------------------------
JOB_CSV = ["date", "gpu", "mode", "T", "H", "kv", "method", "status", "us", "timing", "max_steps", "bit_identical",
           "same_as_ropekv", "bytes", "limit_us", "copy_us", "empty_us", "roundtrip_us", "copy_TBps", "job",
           "method_bytes", "bw_pct", "note"]


def write_job_outputs(args, meta, floors, rows, methods):
    """The md tables (time per method, each ropekv method's speed-up over its best peer, % of the copy of the same
    bytes, bit-identical fractions, the Triton peers' equality with ropekv; then BW % per method), the csv and the
    plot: bench_<date>_<gpu>_<mode>[_tag]."""
    mode = args.mode
    lines = _job_header(args, meta, floors, methods) + [""] + _job_table(mode, rows, methods)
    lines += _job_bandwidth(mode, floors, rows, methods) + notes_lines(rows, methods)

    def cells(r, m, res):
        return ([meta["datetime"], meta["gpu"], mode, r["T"], r["H"], r["kv"], m] + result_cells(res)
                + ["%.6f" % res["same"] if res.get("same") is not None else "", r["bytes"], "%.4f" % r["limit_us"],
                   "%.4f" % r["copy_us"] if r.get("copy_us") else ""] + floors_cells(floors)
                + [V32_FORMS.get(m, "read"), job_bytes(r["T"], r["H"], r["kv"], m),
                   "%.2f" % res["bw_pct"] if res.get("bw_pct") is not None else "", res.get("note", "")])

    return write(args, meta, file_stem(args, meta, mode, quick=False), lines, JOB_CSV, csv_rows(rows, methods, cells),
                 rows, methods)


def _job_header(args, meta, floors, methods):
    mode = args.mode
    lines = preamble("DeepSeek-V3.2 writer (fp8_tile rows, paged cache): ropekv vs peers" if mode == "v32" else
                     "KV-cache read-back (rows by slot, dequantized to bf16): ropekv vs peers", args, meta)
    if mode == "v32":
        lines.append("- shapes: DeepSeek-V3.2 L=%d, R=%d, GPT-J rope, f32 cos_sin_cache [%d, %d]; paged uint8 cache "
                     "[blocks, %d, %d]: per token %d fp8 e4m3 codes (tiles of %d, scale = max(amax / 448, FLT_MIN)), "
                     "%d float32 scales, %d bf16 rope values; query absorbed (bf16 [T, H, %d]) or none" % (
                         L, R, MAX_POS, R, args.block_size, ROW_BYTES, L, TILE, NTILES, R, W))
    else:
        lines.append("- caches: fp8_tile = deepseek_v32's paged uint8 [blocks, %d, %d]; fp8_e4m3 = deepseek_v3's "
                     "flat [rows, %d] (k_scale %.2f, value * k_scale); bf16 = deepseek_v3's flat [rows, %d]; "
                     "out bf16 [T, %d]; every 64th slot -1 (a zero row)" % (args.block_size, ROW_BYTES, W, K_SCALE,
                                                                           W, W))
    lines.append("- timing: %d calls per CUDA graph, median of %d replays, each queued behind a GPU spin; per-call "
                 "us (* = graph capture failed: CUDA events)" % (args.calls, args.reps))
    lines.append(floors_line(floors))
    if mode == "v32":
        lines.append("- checks: the rows' latent codes and float32 scales bit-identical to a PyTorch reference (or "
                     "within one fp8 step / 2 ulps, for a division not correctly rounded), the rope parts (row and "
                     "q_out) bit-identical to ropekv's fma rope or within one bf16 step of max(|expected|, "
                     "|x0*c| + |x1*s|), q_nope copied bit for bit, other rows untouched; `= ropekv`: the fraction of "
                     "a Triton peer's output bytes equal to ropekv's")
    else:
        lines.append("- checks: out bit-identical to a PyTorch reference (one float32 product rounded to bf16 per "
                     "value; bf16 rows copied; padding rows zero); `= ropekv`: the fraction of a Triton peer's out "
                     "equal to ropekv's")
    peers = "; ".join("%s: %s" % (k, ", ".join(p for p in v if p in methods)) for k, v in JOB_PEERS.items()
                      if k in methods)
    lines.append("- limit = max(round-trip floor, bytes / copy bandwidth) with the bytes of %s; copy us = a device "
                 "copy of the same bytes (half read, half written)%s" % (
                     "the absorbed job" if mode == "v32" else "the read",
                     "; vs best peer = best peer us / ropekv us, the peers of each ropekv method: " + peers
                     if peers else ""))
    return lines


def _job_table(mode, rows, methods):
    rk = [m for m in methods if m in JOB_PEERS]
    sames = [m for m in methods if m in SAME_AS]
    head = ["T"] + (["H"] if mode == "v32" else []) + ["kv"] + ["%s us" % m for m in methods] + ["limit us", "copy us"]
    for m in rk:
        head += ["%s vs best peer" % m, "%s %% of copy" % m, "%s bit-identical" % m]
    head += ["%s = ropekv" % m for m in sames]
    body = []
    for r in rows:
        res = r["results"]
        vals = [str(r["T"])] + ([str(r["H"])] if mode == "v32" else []) + [r["kv"]]
        vals += [cell(res.get(m)) for m in methods] + [fmt_us(r["limit_us"]), fmt_us(r.get("copy_us"))]
        for m in rk:
            me = res.get(m)
            ok = me is not None and me["status"] == "ok"
            vals.append(_ratio_vs_best(res, m, [p for p in JOB_PEERS[m] if p in methods]))
            vals.append("%.0f%%" % (100 * r["copy_us"] / me["us"]) if ok and r.get("copy_us") else "-")
            vals.append(_exact(me))
        for m in sames:
            v = res.get(m)
            vals.append("%.4f%%" % (100 * v["same"]) if v is not None and v.get("same") is not None else "-")
        body.append(vals)
    return table(head, body)


def _job_bandwidth(mode, floors, rows, methods):
    lines = [""]
    lines.append("Bandwidth: BW %% = bytes the method's job moves / time / the copy bandwidth above (%.2f TB/s). %s "
                 "MB = those bytes." % (floors["copy_Bps"] / 1e12,
                                        "The V3.2 writer's: the absorbed query (q_nope + q_pe read, q_out written; "
                                        "none: nothing), k_nope + k_pe read, the 656-byte row written, positions, "
                                        "slots and cos/sin rows read." if mode == "v32" else
                                        "The read's: each row read (1152, 576 or 656 bytes), the bf16 out row "
                                        "(1152 bytes) written, the slots read."))
    lines.append("")
    jobs = []
    for m in methods:
        j = V32_FORMS.get(m, "read")
        if j not in jobs:
            jobs.append(j)
    head = ["T"] + (["H"] if mode == "v32" else []) + ["kv"] + ["%s BW %%" % m for m in methods]
    head += ["%s MB" % j for j in jobs]
    body = []
    for r in rows:
        vals = [str(r["T"])] + ([str(r["H"])] if mode == "v32" else []) + [r["kv"]] + bw_cells(r["results"], methods)
        vals += ["%.3f" % ((v32_bytes(r["T"], r["H"], j) if mode == "v32" else read_bytes(r["T"], r["kv"])) / 1e6)
                 for j in jobs]
        body.append(vals)
    return lines + table(head, body)


# ---- the norm section ------------------------------------------------------------------------------------------------
NORM_CSV = ["date", "gpu", "T", "H", "kv", "method", "status", "us", "timing", "max_steps", "bit_identical", "bytes",
            "limit_us", "empty_us", "roundtrip_us", "copy_TBps", "spec", "fused_over_nonorm", "norm_out_exact",
            "norm_out_rel_f64", "note"]


def write_norm_outputs(args, meta, floors, rows, methods):
    """The norm section's md table (per-call us of each method, the fused op / ropekv without the norm, the fused op's
    speed-up over each peer, its share of the limit, bit-identical fractions) and csv:
    bench_<date>_<gpu>[_quick]_norm[_tag] (no plot)."""
    lines = _norm_header(args, meta, floors, rows) + [""] + _norm_table(rows, methods) + notes_lines(rows, methods)

    def cells(r, m, res):
        return ([meta["datetime"], meta["gpu"], r["T"], r["H"], r["kv"], m] + result_cells(res)
                + [norm_bytes(r["T"], r["H"], r["kv"] == "fp8_e4m3", "rms_out" if m == "ropekv_norm_out" else "rms"),
                   "%.4f" % r["limit_us"]] + floors_cells(floors)
                + [args.spec, _norm_ratio(r["results"], "ropekv_norm", "ropekv_nonorm"),
                   "%.6f" % r["norm_exact"] if r.get("norm_exact") is not None else "",
                   "%.3g" % r["norm_rel"] if r.get("norm_rel") is not None else "", res.get("note", "")])

    return write(args, meta, file_stem(args, meta, "norm"), lines, NORM_CSV, csv_rows(rows, methods, cells))


def _norm_header(args, meta, floors, rows):
    lines = preamble("Fused kv_a RMSNorm + MLA RoPE + KV-cache write: ropekv norm='rms' vs RMSNorm + ropekv", args,
                     meta, kernels=False, bandwidths=False)
    lines.append("- spec %s, norm: %s; DeepSeek-V3 dims L=%d, R=%d, absorbed bf16 query [T, H, %d]; the raw c_kv = the "
                 "first %d columns of the [T, %d] projection, each token's row scaled by 2^-8 .. 2^8; paged cache "
                 "[blocks, %d, %d]; fp8: OCP e4m3, k_scale %.2f" % (args.spec, meta.get("norm", "-"), L, R, W, L, W,
                                                                  BLOCK_SIZE, W, K_SCALE))
    lines.append("- methods: ropekv_norm = norm='rms' (one launch); ropekv_norm_out = norm='rms_out' (also writes the "
                 "normalized c_kv [T, %d]); rmsnorm_ropekv = a separate RMSNorm kernel (%s) into a [T, %d] bf16 buffer, "
                 "then ropekv with norm none on it (two launches); eager_norm = the unfused PyTorch sequence with the "
                 "RMSNorm in torch (float32 mean, rsqrt); ropekv_nonorm = ropekv with norm none on the already-"
                 "normalized input (the baseline)" % (L, meta.get("rmsnorm_impl", "-"), L))
    lines.append("- timing: %d calls per CUDA graph, median of %d replays, each queued behind a GPU spin; per-call us "
                 "(* = graph capture failed: CUDA events)" % (args.calls, args.reps))
    lines.append(floors_line(floors) + "; limit = max(round trip, bytes of the rms job / copy bandwidth)")
    lines.append("- fused / no-norm = ropekv_norm us / ropekv_nonorm us (goal: <= %.2f at every shape); out / no-norm the "
                 "same for ropekv_norm_out; vs X = X us / ropekv_norm us" % NORM_GOAL)
    lines.append("- checks before timing: an rms_out launch gives the normalized rows n; ropekv_norm's and "
                 "ropekv_norm_out's cache and q_out equal, bit for bit, those of ropekv norm none on k_nope := n; every "
                 "method against the fma reference of the op on n (k_nope parts bit-identical for ropekv; for the peers, "
                 "whose RMSNorm sums in another order, within %d bf16 / %d fp8 steps, their normalized buffer within %d "
                 "bf16 steps of n); n itself against ropekv.reference.rms_norm (`norm_out = ref`: the kernels' "
                 "arithmetic, expected 100%%) and a float64 RMSNorm (within 2^-7 + 2^-12 relative)" % (
                     NORM_PEER_STEPS["bf16"], NORM_PEER_STEPS["fp8"], NORM_PEER_STEPS["bf16"]))
    n, met, worst = norm_goal(rows)
    if n:
        lines.append("- **goal (fused within %d%% of ropekv without the norm): met at %d of %d shapes; worst %.3f at T=%d "
                     "H=%d %s**" % (round(100 * (NORM_GOAL - 1)), met, n, worst[0], worst[1], worst[2], worst[3]))
    return lines


def _norm_table(rows, methods):
    head = ["T", "H", "kv"] + ["%s us" % m for m in methods] + ["limit us", "fused / no-norm", "out / no-norm"]
    head += ["vs %s" % m for m in NORM_PEERS if m in methods] + ["% of limit", "bit-identical", "norm_out = ref"]
    body = []
    for r in rows:
        res = r["results"]
        fused = res.get("ropekv_norm")
        ok = fused is not None and fused["status"] == "ok"
        vals = [str(r["T"]), str(r["H"]), r["kv"]] + [cell(res.get(m)) for m in methods] + [fmt_us(r["limit_us"])]
        vals += [_norm_ratio(res, "ropekv_norm", "ropekv_nonorm"), _norm_ratio(res, "ropekv_norm_out", "ropekv_nonorm")]
        vals += ["%.2fx" % (res[m]["us"] / fused["us"]) if ok and res.get(m) and res[m]["status"] == "ok" else "-"
                 for m in NORM_PEERS if m in methods]
        vals.append("%.0f%%" % (100 * r["limit_us"] / fused["us"]) if ok else "-")
        vals.append(_exact(fused))
        vals.append("%.4f%%" % (100 * r["norm_exact"]) if r.get("norm_exact") is not None else "-")
        body.append(vals)
    return table(head, body)
