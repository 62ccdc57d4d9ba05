"""The command line (python3 bench/bench_mla.py --help): the options, then the lists each mode runs and the checks
of their combinations."""
import argparse
import os

from .env import ROOT
from .shapes import (ALL_H, ALL_KV, ALL_METHODS, ALL_T, CPU_METHODS, MODE_METHODS, NORM_METHODS, Q_SCALE, READ_KV,
                     RECORD_READ_ROWS, RECORD_T, SPECS, V32_BLOCK, default_methods)

DESCRIPTION = ("Fused MLA RoPE + KV-cache write: ropekv against its peers, DeepSeek-V3 shapes, on one GPU (NVIDIA or "
               "AMD).")


def _parser():
    p = argparse.ArgumentParser(description=DESCRIPTION)
    p.add_argument("--out", default=os.path.join(ROOT, "bench", "results"), help="directory for .md, .csv, .png")
    p.add_argument("--mode", default="write", choices=sorted(MODE_METHODS),
                   help="write: the fused write of --spec (default); v32: DeepSeek-V3.2's fp8_tile paged writer; "
                        "read: the read-back op (rows gathered by slot, dequantized to bf16); records: every cache "
                        "record of the built-in specs written and read back, beside a Triton writer of it")
    p.add_argument("--block-size", type=int, default=V32_BLOCK,
                   help="entries per block of the paged caches of --mode v32 and read (default %d)" % V32_BLOCK)
    p.add_argument("--quick", action="store_true", help="T in {1, 128, 2048}, H = 16, kv bf16")
    p.add_argument("--spec", default="deepseek_v3", choices=sorted(SPECS),
                   help="the ropekv spec benchmarked: its q forms and fp8 policies (default deepseek_v3)")
    p.add_argument("--methods", default=None,
                   help="comma list of %s (default: every method whose q form the spec lists)" % ", ".join(ALL_METHODS))
    p.add_argument("--T", default=None, help="comma list of token counts (default: the full sweep)")
    p.add_argument("--H", default=None, help="comma list of head counts")
    p.add_argument("--kv", default=None, help="comma list of bf16, fp8_e4m3 (--mode read: and fp8_tile)")
    p.add_argument("--q-scale", type=float, default=Q_SCALE, help="the fp8 query's scale (default %g)" % Q_SCALE)
    p.add_argument("--calls", type=int, default=50, help="calls per CUDA graph")
    p.add_argument("--reps", type=int, default=5, help="graph replays (the median is reported)")
    p.add_argument("--compile-mode", default="default",
                   help="torch.compile mode (default, max-autotune-no-cudagraphs, ...)")
    p.add_argument("--compile-dynamic", default="auto", choices=["auto", "true", "false"],
                   help="torch.compile dynamic= (auto: PyTorch's automatic dynamic shapes, fewest recompiles)")
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--cpu", action="store_true",
                   help="check the script on the CPU: eager, eager_fp8q and the ropekv methods (host backend) "
                        "against the reference, CPU times (not numbers)")
    p.add_argument("--norm", action="store_true",
                   help="run only the fused kv_a RMSNorm section (write mode): ropekv's norm='rms' against RMSNorm + "
                        "ropekv, the unfused PyTorch sequence and ropekv without the norm")
    p.add_argument("--no-norm", action="store_true", help="skip the norm section")
    p.add_argument("--norm-methods", default=None,
                   help="comma list of %s (default: all; the norm section then also runs after a --methods sweep)"
                        % ", ".join(NORM_METHODS))
    p.add_argument("--records", default=None,
                   help="--mode records: comma list of spec/row (e.g. deepseek_v32/fp8_ds_mla; default: every row)")
    p.add_argument("--read-rows", default=None,
                   help="--mode records: rows of the read-back (default %s)" % ",".join(map(str, RECORD_READ_ROWS)))
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--tag", default="", help="suffix for the output file names (e.g. when a sweep is split)")
    return p


def parse_args(argv=None):
    p = _parser()
    a = p.parse_args(argv)
    ints = lambda s: [int(v) for v in s.split(",") if v.strip()]  # noqa: E731
    a.T_list = ints(a.T) if a.T else ([1, 128, 2048] if a.quick else RECORD_T if a.mode == "records" else ALL_T)
    a.H_list = ints(a.H) if a.H else ([16] if a.quick else ALL_H)
    if (a.records or a.read_rows) and a.mode != "records":
        p.error("--records and --read-rows are for --mode records")
    a.read_rows = ints(a.read_rows) if a.read_rows else ([8192] if a.quick else RECORD_READ_ROWS)
    known_kv = {"write": ALL_KV, "v32": ["fp8_tile"], "read": list(READ_KV), "records": []}[a.mode]
    if a.mode == "records":
        if a.kv:
            p.error("--mode records takes --records, not --kv")
        a.kv_list = []
    elif a.mode == "v32":
        a.kv_list = ["fp8_tile"]  # the job's cache
    elif a.mode == "read":
        a.H_list = [1]  # no heads: the op reads cache rows
        a.kv_list = [v.strip() for v in a.kv.split(",")] if a.kv else list(READ_KV)
    else:
        a.kv_list = [v.strip() for v in a.kv.split(",")] if a.kv else (["bf16"] if a.quick else ALL_KV)
    known = MODE_METHODS[a.mode]
    cpu_ok = CPU_METHODS if a.mode == "write" else [m for m in known if m.startswith(("ropekv", "eager"))]
    if a.methods:
        a.method_list = [m.strip() for m in a.methods.split(",") if m.strip()]
    elif a.mode == "write":
        a.method_list = [m for m in default_methods(a.spec) if not a.cpu or m in CPU_METHODS]
    else:
        a.method_list = [m for m in known if not a.cpu or m in cpu_ok]
    for m in a.method_list:
        if m not in known:
            p.error("unknown method %r for --mode %s (known: %s)" % (m, a.mode, ", ".join(known)))
        if a.cpu and m not in cpu_ok:
            p.error("--cpu runs the eager and ropekv methods only, not %r" % m)
    for kv in a.kv_list:
        if kv not in known_kv:
            p.error("unknown kv %r for --mode %s (known: %s)" % (kv, a.mode, ", ".join(known_kv)))
    if a.block_size < 1:
        p.error("--block-size must be >= 1")
    if not a.q_scale > 0:
        p.error("--q-scale must be > 0")
    # the norm section (write mode): after the main sweep in a default or --quick run; only it with --norm; after a
    # --methods sweep when --norm-methods asks for it; never with --no-norm
    if (a.norm or a.norm_methods) and a.mode != "write":
        p.error("--norm and --norm-methods are for --mode write")
    if a.norm and a.no_norm:
        p.error("--norm and --no-norm exclude each other")
    a.norm_only = a.norm
    a.norm_on = a.mode == "write" and not a.no_norm and (a.norm or not a.methods or bool(a.norm_methods))
    a.norm_method_list = ([m.strip() for m in a.norm_methods.split(",") if m.strip()] if a.norm_methods
                          else list(NORM_METHODS))
    for m in a.norm_method_list:
        if m not in NORM_METHODS:
            p.error("unknown norm method %r (known: %s)" % (m, ", ".join(NORM_METHODS)))
    # the norm section's KV dtypes: --kv where given, else bf16 and fp8_e4m3 (--quick too)
    a.norm_kv_list = [v.strip() for v in a.kv.split(",")] if a.kv and a.mode == "write" else list(ALL_KV)
    if a.norm_only:
        a.method_list = []
    return a
