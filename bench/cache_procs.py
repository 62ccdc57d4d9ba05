"""Processes starting at once on one fresh cache directory, each getting the same kernels: the disk cache's lock lets
one of them compile each kernel, and the others load it.

    python3 bench/cache_procs.py                    # 8 processes, 3 host kernels, a fresh cache directory
    python3 bench/cache_procs.py --procs 8 --no-disk-cache   # the same in memory only: every process compiles

Each process (this script with --child) opens a host-backend context on the directory, says it is ready, waits until
every process is, then gets the kernels one after another (the same order in every process, as the ranks of a job ask
for a layer's kernels) and reports its context's counters (ropekv_get_stats). Printed: the wall time from the common
start to the last process's end, each process's compiles, disk hits and time, and the totals. With the disk cache the
total compiles must equal the number of distinct kernels and the disk hits the rest (procs x kernels - kernels), and
the directory must hold one entry per kernel: else the exit status is 1 (ctest cache_procs). Needs the library
(ROPEKV_LIB or a build) and the host C++ compiler; not torch.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

import ropekv  # noqa: E402

# distinct host kernels (one entry each: ropekv_kernel_get builds the 32-bit entry)
KERNELS = [dict(spec="deepseek_v3", kv="fp8_e4m3", q="absorbed"), dict(spec="deepseek_v3", kv="bf16", q="none"),
           dict(spec="kimi_k2", kv="bf16", q="inplace"), dict(spec="deepseek_v32", kv="fp8_tile", q="absorbed"),
           dict(spec="deepseek_v32", kv="fp8_tile", op="read", q="none")]


def child(cache_dir, kernels, disk_cache):
    ctx = ropekv.Context("host", cache_dir=cache_dir, disk_cache=disk_cache)
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return 2
    t0 = time.monotonic()
    names = []
    for v in KERNELS[:kernels]:
        v = dict(v)
        names.append(ctx.kernel(v.pop("spec"), **v).name)
    s = ctx.stats()
    print(json.dumps(dict(s, seconds=time.monotonic() - t0, names=names)), flush=True)
    ctx.close()
    return 0


def run(procs, kernels, cache_dir, disk_cache):
    """Starts procs children on cache_dir, releases them at once; returns (wall seconds, their reports)."""
    cmd = [sys.executable, os.path.abspath(__file__), "--child", cache_dir, "--kernels", str(kernels)]
    if not disk_cache:
        cmd.append("--no-disk-cache")
    ps = [subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for _ in range(procs)]
    for p in ps:
        line = p.stdout.readline().strip()
        if line != "ready":
            raise RuntimeError("a process did not start: %r (exit %s)" % (line, p.wait()))
    t0 = time.monotonic()
    for p in ps:
        p.stdin.write("go\n")
        p.stdin.flush()
    reports = []
    for p in ps:
        out, _ = p.communicate()
        if p.returncode != 0:
            raise RuntimeError("a process failed (exit %d): %s" % (p.returncode, out))
        reports.append(json.loads(out))
    return time.monotonic() - t0, reports


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument("--kernels", type=int, default=3, help="how many of the %d kernels (1..%d)" % (
        len(KERNELS), len(KERNELS)))
    ap.add_argument("--no-disk-cache", action="store_true", help="memory only: every process compiles every kernel")
    ap.add_argument("--child", metavar="DIR", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if not 1 <= args.kernels <= len(KERNELS):
        ap.error("--kernels must be from 1 to %d" % len(KERNELS))
    disk = not args.no_disk_cache
    if args.child:
        return child(args.child, args.kernels, disk)
    if shutil.which((os.environ.get("CXX") or "c++").split()[0]) is None:
        print("SKIP: no C++ compiler for the host backend")
        return 77
    cache_dir = tempfile.mkdtemp(prefix="ropekv-procs-")
    try:
        wall, reports = run(args.procs, args.kernels, cache_dir, disk)
        entries = sorted(f for f in os.listdir(cache_dir) if f.endswith(".rkco"))
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)
    names = reports[0]["names"]
    assert all(r["names"] == names for r in reports), "the processes got differently named kernels"
    print("%d processes, %d kernels, %s, %d cores, %s:" % (
        args.procs, args.kernels, "disk cache (fresh directory)" if disk else "memory only", os.cpu_count(),
        os.environ.get("CXX") or "c++"))
    for i, r in enumerate(reports):
        print("  process %d: %d compiles, %d disk hits, %.2f s" % (i, r["compiles"], r["disk_hits"], r["seconds"]))
    compiles = sum(r["compiles"] for r in reports)
    hits = sum(r["disk_hits"] for r in reports)
    print("total: %d compiles, %d disk hits, %d cache entries; wall %.2f s" % (compiles, hits, len(entries), wall))
    if disk:
        want = (args.kernels, args.procs * args.kernels - args.kernels, args.kernels)
        if (compiles, hits, len(entries)) != want:
            print("FAIL: want %d compiles (one per kernel), %d disk hits and %d entries" % want)
            return 1
        print("ok: each kernel compiled once")
    return 0


if __name__ == "__main__":
    sys.exit(main())
