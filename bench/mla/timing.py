"""The timing method: CALLS calls captured in one CUDA graph (a hipGraph under ROCm PyTorch), replayed REPS times, the
median per-call time, each replay queued behind ~0.5 ms of GPU spinning (back-to-back launches timed with events when
a capture fails); the floors of the run (an empty kernel, a 16 B round trip, the device copy bandwidth); --cpu's
wall-clock timer."""
import statistics
import time

from .env import failed, log
from .report import cell
from .triton_kernels import triton_kernels

torch = None  # set by env.bind() in main()


def gpu_busy(torch):
    """Queue ~0.5 ms of GPU spinning, so that the start event recorded next is taken when the GPU reaches
    it and not while the host is still submitting the work after it (that host time is not GPU time)."""
    torch.cuda._sleep(1_000_000)  # ROCm PyTorch has it too (a clock64 spin: its length follows the GPU's clock)


def time_graph(torch, fn, calls, reps):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        gpu_busy(torch)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / calls)
    del g
    return statistics.median(times)


def time_events(torch, fn, calls, reps):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(calls):
            fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / calls)
    return statistics.median(times)


def time_method(torch, fn, calls, reps):
    """(us per call, "graph" | "events", note)."""
    try:
        return time_graph(torch, fn, calls, reps), "graph", ""
    except Exception as e:  # noqa: BLE001
        note = "graph capture failed: %s" % str(e).split("\n")[0][:200]
        try:
            torch.cuda.synchronize()
        except Exception:  # noqa: BLE001
            pass
        return time_events(torch, fn, calls, reps), "events", note


def time_cpu(fn, calls, reps):
    """--cpu: wall-clock us per call of CALLS back-to-back calls, median of REPS (a check of the script only)."""
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) * 1e6 / calls)
    return statistics.median(times)


def measure_floors(torch, dev, calls, reps):
    f = {}
    try:
        tk = triton_kernels()
        buf = torch.zeros(4, dtype=torch.int32, device=dev)
        out4 = torch.zeros(4, dtype=torch.int32, device=dev)
        f["empty_us"] = time_graph(torch, lambda: tk["empty"][(1,)](buf), calls, reps)
        f["roundtrip_us"] = time_graph(torch, lambda: tk["roundtrip"][(1,)](buf, out4), calls, reps)
    except Exception as e:  # noqa: BLE001
        log("floors: Triton kernels failed (%s); using a 1-element torch op for both" % str(e).split("\n")[0])
        x = torch.zeros(4, dtype=torch.int32, device=dev)
        f["empty_us"] = f["roundtrip_us"] = time_graph(torch, lambda: x.add_(1), calls, reps)
    nbytes = 2 << 30
    src = torch.empty(nbytes, dtype=torch.uint8, device=dev)
    dst = torch.empty(nbytes, dtype=torch.uint8, device=dev)
    src.fill_(1)
    dst.copy_(src)
    torch.cuda.synchronize()
    times = []
    for _ in range(10):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        gpu_busy(torch)
        a.record()
        dst.copy_(src)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e-3)
    del src, dst
    torch.cuda.empty_cache()
    f["copy_Bps"] = 2 * nbytes / statistics.median(times)
    return f


def measure_floors_cpu(calls, reps):
    """--cpu: a 64 MiB CPU copy for the bandwidth, a 1-element op for the round trip (not GPU figures)."""
    x = torch.zeros(4, dtype=torch.int32)
    us = time_cpu(lambda: x.add_(1), calls, reps)
    src = torch.ones(64 << 20, dtype=torch.uint8)
    dst = torch.empty_like(src)
    copy_us = time_cpu(lambda: dst.copy_(src), 3, 3)
    return {"empty_us": us, "roundtrip_us": us, "copy_Bps": 2 * src.numel() / (copy_us * 1e-6)}


def time_call(torch, fn, args, cpu):
    """A checked method's (us per call, "graph" | "events" | "cpu", note): time_method, or time_cpu with --cpu."""
    if cpu:
        return time_cpu(fn, args.calls, args.reps), "cpu", ""
    return time_method(torch, fn, args.calls, args.reps)


def timed(torch, args, cpu, fn):
    """us per call of fn: time_cpu with --cpu, else time_graph (no fallback to events)."""
    return time_cpu(fn, args.calls, args.reps) if cpu else time_graph(torch, fn, args.calls, args.reps)


def run_floors(torch, args, cpu, dev):
    """The floors of this run (measure_floors, measure_floors_cpu with --cpu), logged."""
    floors = measure_floors_cpu(args.calls, args.reps) if cpu else measure_floors(torch, dev, args.calls, args.reps)
    log("floors: empty %.2f us, round trip %.2f us, copy %.2f TB/s" % (floors["empty_us"], floors["roundtrip_us"],
                                                                       floors["copy_Bps"] / 1e12))
    return floors


def same_size_copy_us(torch, args, cpu, dev, nbytes):
    """The shape's `copy us`: dst.copy_(src) of half of nbytes (the same bytes read + written), timed like the
    methods; None where it fails (logged)."""
    try:
        n = max(16, nbytes // 2 // 16 * 16)
        src = torch.ones(n, dtype=torch.uint8, device=dev)
        dst = torch.empty_like(src)
        return timed(torch, args, cpu, lambda: dst.copy_(src))
    except Exception as e:  # noqa: BLE001
        log("  same-size copy failed: %s" % str(e).split("\n")[0][:200])
        return None


def first_call_failed(torch, m, e, cpu, sync=True):
    """A method whose setup or first call raised e (call it in the except block): logged (the traceback too with
    $BENCH_TRACEBACK), the GPU synchronized where sync asks and it can be. Returns (its n/a result, the first line of
    the message)."""
    msg = failed("%s failed" % m, e)
    _sync_quietly(torch, cpu, sync)
    return {"status": "n/a", "us": None, "note": "%s: %s" % (type(e).__name__, msg)}, msg


def timing_failed(torch, res, m, e, cpu, sync=True):
    """A checked method whose timing raised e: logged, its result res made n/a with the reason, the GPU synchronized
    where sync asks and it can be."""
    msg = failed("%s: timing failed" % m, e)
    res.update(status="n/a", us=None, note="timing failed: %s" % msg)
    _sync_quietly(torch, cpu, sync)


def _sync_quietly(torch, cpu, sync):
    """The GPU synchronized after a failure, where sync asks and it can be (a failed launch may leave it unable)."""
    if sync and not cpu:
        try:
            torch.cuda.synchronize()
        except Exception:  # noqa: BLE001
            pass


def each_shape(run, kv_list, shape, tag, tail):
    """Every shape of the run (H, then kv in kv_list, then T): shape(T, H, kv) -> (its row, whether its methods ran)
    (its problem, reference and outputs freed on return), the GPU's allocator cache emptied after each that ran, and a
    line of its results, `tag` before them and tail(row) after. Returns the rows."""
    rows = []
    for H in run.args.H_list:
        for kv in kv_list:
            for T in run.args.T_list:
                r, ran = shape(T, H, kv)
                rows.append(r)
                if not ran:
                    continue
                if not run.cpu:
                    torch.cuda.empty_cache()
                res = r["results"]
                log("T=%5d H=%3d %-8s %s" % (T, H, kv, tag) + "  ".join("%s %s" % (m, cell(res.get(m)))
                                                                        for m in run.methods) + tail(r))
    return rows
