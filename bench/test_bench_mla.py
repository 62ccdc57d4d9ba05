"""Tests of bench_mla.py's pure-Python parts on the CPU (no GPU, no Triton; torch needed, float8 dtypes not).

    python3 bench/test_bench_mla.py          # plain runner
    python3 -m pytest bench/test_bench_mla.py

The bytes each job moves, the e4m3 codes made without a float8 dtype, that the checks pass the PyTorch methods
and catch a wrong output, and a --cpu run's tables (the BW % columns)."""
import csv
import glob
import importlib.util
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("bench_mla", os.path.join(HERE, "bench_mla.py"))
bm = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bm)


class Skip(Exception):
    pass


def _torch():
    try:
        import torch
    except ImportError:
        raise Skip("torch is not installed")
    bm.torch = torch
    return torch


def test_op_bytes():
    for T, H, kv8 in ((1, 16, False), (2048, 128, True)):
        kvb = 1 if kv8 else 2
        absorbed = T * H * 576 * 2 * 2 + T * 576 * 2 + T * 576 * kvb + T * 16 + T * 64 * 4
        assert bm.op_bytes(T, H, kv8) == absorbed
        assert bm.op_bytes(T, H, kv8, "absorbed", True) == absorbed - T * H * 576
        assert bm.op_bytes(T, H, kv8, "zero_copy") == absorbed - T * H * (512 * 2 * 2)
        assert bm.op_bytes(T, H, kv8, "inplace", True) == absorbed - T * H * (576 * 4 - 64 * 3)
        assert bm.op_bytes(T, H, kv8, "none") == absorbed - T * H * 576 * 4
    assert bm.method_bytes(4, 16, "fp8_e4m3", "ropekv_fp8q") == bm.op_bytes(4, 16, True, "absorbed", True)
    assert abs(bm.bw_pct(2e6, 1.0, 4e12) - 50.0) < 1e-9 and bm.bw_pct(1, None, 1e12) is None


def test_e4m3_codes_exact():
    """The float8-free encoder against the nearest of the 254 finite codes (ties to the even code), and the
    decoding table against the codes' values."""
    torch = _torch()
    values = bm._e4m3_values(torch, torch.arange(256).to(torch.uint8)).double()
    finite = [c for c in range(256) if c & 0x7F != 0x7F]
    fv = values[finite]
    x = torch.cat([torch.linspace(-448, 448, 20001), (fv[:-1] + fv[1:]) / 2, fv.float().double(),
                   torch.tensor([0.0, -0.0, 2.0 ** -10, -2.0 ** -10, 1e-30])]).float()
    got = bm._e4m3_codes_exact(torch, x).tolist()
    for v, g in zip(x.double().tolist(), got):
        d = (fv - v).abs()
        best = [finite[i] for i in (d == d.min()).nonzero().reshape(-1).tolist()]
        if len(best) > 1:  # a tie: the even mantissa; +-0 by the sign
            best = [c for c in best if c & 1 == 0] or best
            if v == 0 or all(c & 0x7F == 0 for c in best):
                best = [0x80 if str(v).startswith("-") else 0x00]
        assert g in best, (v, hex(g), [hex(c) for c in best])
    nan = bm._e4m3_codes_exact(torch, torch.tensor([float("nan")]))
    assert nan.tolist() == [0x7F]
    if hasattr(torch, "float8_e4m3fn"):
        v = (torch.randn(1 << 16) * 100).clamp(-448, 448)
        assert torch.equal(bm._e4m3_codes_exact(torch, v), v.to(torch.float8_e4m3fn).view(torch.uint8))


def _cos_sin(torch):
    inv = 1.0 / (10000.0 ** (torch.arange(0, 32, dtype=torch.float64) * 2 / 64))
    freqs = torch.arange(bm.MAX_POS, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cat([freqs.cos(), freqs.sin()], dim=-1).float().contiguous()


def test_checks_pass_and_catch():
    """eager and eager_fp8q pass the checks on the CPU (both KV dtypes, both specs' policies); a q_nope element
    changed and the largest rope element of a row negated in the query output fail them."""
    torch = _torch()
    dev = torch.device("cpu")
    cs = _cos_sin(torch)
    ks, qs = torch.tensor([0.5]), torch.tensor([0.0123])
    L = bm.L
    for spec in sorted(bm.SPECS):
        for kv in ("bf16", "fp8_e4m3"):
            pb = bm.Problem(torch, 9, 3, kv, dev, cs, ks, 7, qs, dict(bm.SPECS[spec]))
            ref = bm.Reference(torch, pb, q8=True)
            pb.ref = ref
            for m in ("eager", "eager_fp8q"):
                fn, outputs = bm.METHODS[m]({"args": None}, pb)
                fn()
                form, q8 = bm.FORMS[m]
                ok, steps, exact, bad = bm.check(torch, pb, ref, outputs(), form, q8)
                assert ok, (spec, kv, m, steps, bad)
                o = outputs()
                if q8:
                    qo = o["q_out"].view(torch.uint8)
                    j = int(bm._decode(torch, ref.q_rope8[1, 2]).abs().argmax())
                    qo[1, 2, L + j] ^= 0x80
                    qo[0, 0, 3] = (qo[0, 0, 3] & 0x80) | ((qo[0, 0, 3] & 0x7F) + 2) % 0x7E
                else:
                    qo = o["q_out"]
                    j = int(ref.q_rope[1, 2].float().abs().argmax())
                    qo[1, 2, L + j] = -qo[1, 2, L + j]
                    qo[0, 0, 3] += 1.0
                ok, steps, exact, bad = bm.check(torch, pb, ref, o, form, q8)
                assert not ok and bad == 2, (spec, kv, m, bad)


def test_cpu_run():
    """A --cpu run writes the md tables (with the BW % columns) and one csv row per shape and method."""
    _torch()
    out = tempfile.mkdtemp(prefix="bench-mla-test-")
    try:
        rc = bm.main(["--cpu", "--T", "1,5", "--H", "2", "--kv", "bf16,fp8_e4m3", "--methods", "eager,eager_fp8q",
                      "--calls", "2", "--reps", "1", "--no-plot", "--out", out, "--tag", "t"])
        assert rc == 0
        md = open(glob.glob(os.path.join(out, "*_t.md"))[0]).read()
        assert "| eager BW % | eager_fp8q BW % |" in md and "absorbed fp8q MB" in md
        rows = list(csv.DictReader(open(glob.glob(os.path.join(out, "*_t.csv"))[0])))
        assert len(rows) == 2 * 2 * 2 and all(r["status"] == "ok" and r["bw_pct"] for r in rows)
        assert {r["q_dtype"] for r in rows} == {"bf16", "fp8_e4m3"}
    finally:
        shutil.rmtree(out, ignore_errors=True)


def main():
    passed = failed = skipped = 0
    for name, fn in sorted((n, f) for n, f in globals().items() if n.startswith("test_") and callable(f)):
        try:
            fn()
        except Skip as e:
            skipped += 1
            print("SKIP %s: %s" % (name, e))
            continue
        except Exception as e:  # noqa: BLE001
            failed += 1
            import traceback
            traceback.print_exc()
            print("FAIL %s: %s" % (name, e))
            continue
        passed += 1
        print("PASS %s" % name)
    print("%d passed, %d failed, %d skipped" % (passed, failed, skipped))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
