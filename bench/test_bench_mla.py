"""Tests of bench_mla.py's pure-Python parts on the CPU (no GPU, no Triton; torch needed, float8 dtypes not).

    python3 bench/test_bench_mla.py          # plain runner
    python3 -m pytest bench/test_bench_mla.py

The bytes each job moves, the e4m3 codes made without a float8 dtype, that the checks pass the PyTorch methods
and catch a wrong output, and a --cpu run's tables (the BW % columns); the same for --mode v32 (the fp8_tile
row, its reference against a scalar model of the format) and --mode read; the ROCm platform choices, and the
aiter peer's argument mapping through a stand-in of its op; the norm section: when it runs, the peers' RMSNorm against
the reference's, its checks (with the host backend's kernels) passing the methods and catching a wrong output, the
Triton RMSNorm's argument mapping through a stand-in, and a --cpu --norm run's table; --mode records: the records'
PyTorch encoder and decoder on hand-made cases, its checks catching a changed byte, the Triton record writer's
arguments against its signature, and a --cpu run (every row bit-identical to the host backend's kernels)."""
import csv
import glob
import importlib.util
import os
import shutil
import sys
import tempfile
import types

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("bench_mla", os.path.join(HERE, "bench_mla.py"))
bm = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bm)  # the entry point (bm.main); it puts bench/ on sys.path for its package, mla
from mla import (cli, env, jobs, library, norm, numerics, peers, read, records, shapes, triton_kernels,  # noqa: E402
                 v32, write)

rkref = None  # ropekv.reference, imported with torch


class Skip(Exception):
    pass


def _torch():
    try:
        import torch
    except ImportError:
        raise Skip("torch is not installed")
    global rkref
    import ropekv.reference
    rkref = ropekv.reference
    env.bind(torch, rkref)  # what main() does: the package's modules get torch and ropekv.reference
    return torch


def test_op_bytes():
    for T, H, kv8 in ((1, 16, False), (2048, 128, True)):
        kvb = 1 if kv8 else 2
        absorbed = T * H * 576 * 2 * 2 + T * 576 * 2 + T * 576 * kvb + T * 16 + T * 64 * 4
        assert shapes.op_bytes(T, H, kv8) == absorbed
        assert shapes.op_bytes(T, H, kv8, "absorbed", True) == absorbed - T * H * 576
        assert shapes.op_bytes(T, H, kv8, "zero_copy") == absorbed - T * H * (512 * 2 * 2)
        assert shapes.op_bytes(T, H, kv8, "inplace", True) == absorbed - T * H * (576 * 4 - 64 * 3)
        assert shapes.op_bytes(T, H, kv8, "none") == absorbed - T * H * 576 * 4
    assert shapes.method_bytes(4, 16, "fp8_e4m3", "ropekv_fp8q") == shapes.op_bytes(4, 16, True, "absorbed", True)
    assert abs(shapes.bw_pct(2e6, 1.0, 4e12) - 50.0) < 1e-9 and shapes.bw_pct(1, None, 1e12) is None


def test_e4m3_codes_exact():
    """The float8-free encoder against the nearest of the 254 finite codes (ties to the even code), and the
    decoding table against the codes' values."""
    torch = _torch()
    values = rkref.e4m3_values(torch.arange(256).to(torch.uint8)).double()
    finite = [c for c in range(256) if c & 0x7F != 0x7F]
    fv = values[finite]
    x = torch.cat([torch.linspace(-448, 448, 20001), (fv[:-1] + fv[1:]) / 2, fv.float().double(),
                   torch.tensor([0.0, -0.0, 2.0 ** -10, -2.0 ** -10, 1e-30])]).float()
    got = rkref.e4m3_codes(x).tolist()
    for v, g in zip(x.double().tolist(), got):
        d = (fv - v).abs()
        best = [finite[i] for i in (d == d.min()).nonzero().reshape(-1).tolist()]
        if len(best) > 1:  # a tie: the even mantissa; +-0 by the sign
            best = [c for c in best if c & 1 == 0] or best
            if v == 0 or all(c & 0x7F == 0 for c in best):
                best = [0x80 if str(v).startswith("-") else 0x00]
        assert g in best, (v, hex(g), [hex(c) for c in best])
    nan = rkref.e4m3_codes(torch.tensor([float("nan")]))
    assert nan.tolist() == [0x7F]
    if hasattr(torch, "float8_e4m3fn"):
        v = (torch.randn(1 << 16) * 100).clamp(-448, 448)
        assert torch.equal(rkref.e4m3_codes(v), v.to(torch.float8_e4m3fn).view(torch.uint8))


def _cos_sin(torch):
    inv = 1.0 / (10000.0 ** (torch.arange(0, 32, dtype=torch.float64) * 2 / 64))
    freqs = torch.arange(shapes.MAX_POS, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cat([freqs.cos(), freqs.sin()], dim=-1).float().contiguous()


def test_checks_pass_and_catch():
    """eager and eager_fp8q pass the checks on the CPU (both KV dtypes, both specs' policies); a q_nope element
    changed and the largest rope element of a row negated in the query output fail them."""
    torch = _torch()
    dev = torch.device("cpu")
    cs = _cos_sin(torch)
    ks, qs = torch.tensor([0.5]), torch.tensor([0.0123])
    L = shapes.L
    for spec in sorted(shapes.SPECS):
        for kv in ("bf16", "fp8_e4m3"):
            pb = write.Problem(torch, 9, 3, kv, dev, cs, ks, 7, qs, dict(shapes.SPECS[spec]))
            ref = write.Reference(torch, pb, q8=True)
            pb.ref = ref
            for m in ("eager", "eager_fp8q"):
                fn, outputs = write.METHODS[m]({"args": None}, pb)
                fn()
                form, q8 = shapes.FORMS[m]
                ok, steps, exact, bad = write.check(torch, pb, ref, outputs(), form, q8)
                assert ok, (spec, kv, m, steps, bad)
                o = outputs()
                if q8:
                    qo = o["q_out"].view(torch.uint8)
                    j = int(numerics._decode(torch, ref.q_rope8[1, 2]).abs().argmax())
                    qo[1, 2, L + j] ^= 0x80
                    qo[0, 0, 3] = (qo[0, 0, 3] & 0x80) | ((qo[0, 0, 3] & 0x7F) + 2) % 0x7E
                else:
                    qo = o["q_out"]
                    j = int(ref.q_rope[1, 2].float().abs().argmax())
                    qo[1, 2, L + j] = -qo[1, 2, L + j]
                    qo[0, 0, 3] += 1.0
                ok, steps, exact, bad = write.check(torch, pb, ref, o, form, q8)
                assert not ok and bad == 2, (spec, kv, m, bad)


def test_rocm_platform():
    """Under ROCm PyTorch (torch.version.hip set) the ropekv methods use the hip backend and the PDL methods are n/a
    with the reason; under CUDA PyTorch, cuda and PDL."""
    import types
    saved = dict(env.GPU)
    try:
        rocm = types.SimpleNamespace(version=types.SimpleNamespace(hip="6.4.43483", cuda=None))
        cuda = types.SimpleNamespace(version=types.SimpleNamespace(hip=None, cuda="12.8"))
        assert env.gpu_platform(rocm) == ("hip", "HIP 6.4.43483") and env.gpu_platform(cuda) == ("cuda", "CUDA 12.8")
        env.GPU["backend"], env.GPU["runtime"] = env.gpu_platform(rocm)
        assert env.rk_backend(False) == "hip" and env.rk_backend(True) == "host"
        for m in ("triton_pdl", "triton_prefetch", "triton_fp8q_pdl"):
            try:
                write.METHODS[m]({"args": None}, None)
            except RuntimeError as e:
                assert "NVIDIA sm_90+ only" in str(e), (m, e)
            else:
                raise AssertionError("%s ran under ROCm" % m)
        env.GPU["backend"] = "cuda"
        env.require_pdl()
    finally:
        env.GPU.clear()
        env.GPU.update(saved)


def _fake_aiter(torch):
    """A stand-in for aiter's fused_qk_rope_cat_and_cache_mla (ROCm only: not installable here), written from its
    documented arguments in PyTorch on the CPU: the shape rules it asserts, GPT-J rope of q_pe and k_pe with cos / sin
    tables R/2 wide (entry d // 2 for element d) in float32 (two roundings, as its Triton kernel), q_out = cat(q_nope,
    rope(q_pe)), kv_cache[slot, 0] = cat(k_nope, rope(k_pe)) (times 1 / k_scale with apply_scale) for slots >= 0,
    k_pe_out = rope(k_pe). It tests the script's mapping of its tensors to aiter's arguments, not aiter."""
    def op(q_nope, q_pe, k_nope, k_pe, kv_cache, slot_mapping, pos, cos, sin, k_scale, is_neox,
           num_decode_toks_for_zeros=0, apply_scale=True, q_out=None, decode_q_pe_out=None, k_pe_out=None,
           q_out_dtype=None):
        b, qh, dn = q_nope.shape
        bk, kh, dkn = k_nope.shape
        dp = q_pe.shape[2]
        assert q_pe.shape[:2] == (b, qh) and k_pe.shape == (bk, kh, dp) and dkn == dn and b <= bk
        assert kv_cache.dim() == 3 and kv_cache.shape[1] == kh and kv_cache.shape[2] == dn + dp
        assert kv_cache.stride(2) == 1 and slot_mapping.shape == (bk,) and pos.shape[0] >= b
        assert cos.shape == sin.shape and cos.shape[-1] == dp // 2 and not is_neox  # the form the script uses
        assert q_out.shape == (b, qh, dn + dp) and k_pe_out.shape == (bk, kh, dp)
        c = cos[pos].float().repeat_interleave(2, -1)[:, None, :]
        s = sin[pos].float().repeat_interleave(2, -1)[:, None, :]

        def rope(x):
            x = x.float()
            rot = torch.stack([-x[..., 1::2], x[..., 0::2]], -1).reshape(x.shape)
            return x * c[:x.shape[0]] + rot * s[:x.shape[0]]

        q_out[..., :dn] = q_nope
        q_out[..., dn:] = rope(q_pe).to(q_out.dtype)
        kr = rope(k_pe)
        k_pe_out.copy_(kr.to(k_pe_out.dtype))
        row = torch.cat([k_nope.float(), kr], -1)
        if apply_scale:
            row = row * (1.0 / k_scale.float())
        for t in range(bk):
            if int(slot_mapping[t]) >= 0:
                bf16 = kv_cache.dtype == torch.bfloat16
                kv_cache[int(slot_mapping[t])] = row[t].to(torch.bfloat16) if bf16 else numerics.to_fp8(row[t])
        return q_out, decode_q_pe_out, k_pe_out, kv_cache

    return op


def test_aiter_mapping():
    """The aiter peer's arguments (aiter_args) drive a stand-in of aiter's op to outputs that pass the checks, for both
    cache dtypes; the same mapping with cos and sin swapped fails them (the test can fail)."""
    torch = _torch()
    import types
    names = ["aiter", "aiter.ops", "aiter.ops.triton", peers.AITER_MODULES[0]]
    saved = {n: sys.modules.get(n) for n in names}
    for n in names:
        sys.modules[n] = types.ModuleType(n)
    sys.modules[peers.AITER_MODULES[0]].fused_qk_rope_cat_and_cache_mla = _fake_aiter(torch)
    real_args = peers.aiter_args
    try:
        cs = _cos_sin(torch)
        for kv in ("bf16", "fp8_e4m3"):
            pb = write.Problem(torch, 9, 3, kv, torch.device("cpu"), cs, torch.tensor([0.5]), 7, None,
                            dict(shapes.SPECS["deepseek_v3"]))
            pb.ref = ref = write.Reference(torch, pb)
            fn, outputs = write.METHODS["aiter"]({"args": None}, pb)
            fn()
            ok, steps, exact, bad = write.check(torch, pb, ref, outputs(), "absorbed", False)
            assert ok, (kv, steps, bad)

            def swapped(*a):
                args, kw = real_args(*a)
                return args[:7] + (args[8], args[7]) + args[9:], kw

            peers.aiter_args = swapped
            fn, outputs = write.METHODS["aiter"]({"args": None}, pb)
            fn()
            ok, steps, exact, bad = write.check(torch, pb, ref, outputs(), "absorbed", False)
            assert not ok and bad > 0, (kv, bad)
            peers.aiter_args = real_args
    finally:
        peers.aiter_args = real_args
        for n, m in saved.items():
            if m is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = m


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


def test_job_bytes():
    for T, H in ((1, 16), (2048, 128)):
        q = T * H * 576 * 2 * 2
        kv = T * 576 * 2 + T * 656 + T * 16 + T * 64 * 4
        assert shapes.v32_bytes(T, H, "absorbed") == q + kv and shapes.v32_bytes(T, H, "none") == kv
        assert shapes.job_bytes(T, H, "fp8_tile", "triton_v32_none") == kv
        for kv_dtype, row in (("bf16", 1152), ("fp8_e4m3", 576), ("fp8_tile", 656)):
            assert shapes.read_bytes(T, kv_dtype) == T * row + T * 1152 + T * 8
            assert shapes.job_bytes(T, H, kv_dtype, "eager_read") == shapes.read_bytes(T, kv_dtype)


def _scalar_tile_row(latent, rope_bits):
    """One 656-byte row from 512 float values (bf16-exact) and 64 bf16 bit patterns, by the format's definition
    with Python floats: per tile scale = max(amax / 448, 2^-126) rounded to float32, each code the e4m3 value
    nearest to float32(x / scale) (ties to the even code), clamped to +-448."""
    import struct

    def f32(v):
        return struct.unpack("<f", struct.pack("<f", v))[0]

    finite = [(c, (-1 if c & 0x80 else 1) * (((8 + (c & 7)) * 2.0 ** (((c >> 3) & 15) - 10)) if (c >> 3) & 15
                                               else (c & 7) * 2.0 ** -9))
              for c in range(256) if c & 0x7F != 0x7F]
    out = bytearray(656)
    for k in range(4):
        tile = latent[128 * k:128 * (k + 1)]
        scale = f32(max(f32(max(abs(v) for v in tile) / 448.0), 2.0 ** -126))
        for j, v in enumerate(tile):
            y = max(-448.0, min(448.0, f32(v / scale)))
            best = min(finite, key=lambda cv: (abs(cv[1] - y), cv[0] & 1, (cv[0] & 0x80) != (0x80 if y < 0 else 0)))
            out[128 * k + j] = best[0]
        out[512 + 4 * k:516 + 4 * k] = struct.pack("<f", scale)
    for j, b in enumerate(rope_bits):
        out[528 + 2 * j:530 + 2 * j] = struct.pack("<H", b & 0xFFFF)
    return bytes(out)


def test_tile_row_bytes():
    """tile_row_bytes (the v32 reference's row) against the scalar model, with tiles of very different ranges and
    an all-zero tile (the FLT_MIN scale)."""
    torch = _torch()
    g = torch.Generator().manual_seed(3)
    x = torch.randn(3, 512, generator=g)
    x[0, :128] = 0
    x[1, 128:256] *= 1e-20
    x[2, 256:384] *= 1e20
    lat = x.to(torch.bfloat16)
    rope = torch.randn(3, 64, generator=g).to(torch.bfloat16)
    rows, scale = numerics.tile_row_bytes(torch, lat, rope)
    assert rows.shape == (3, 656) and scale.shape == (3, 4)
    for i in range(3):
        want = _scalar_tile_row(lat[i].float().tolist(), rope[i].view(torch.int16).tolist())
        got = bytes(rows[i].tolist())
        bad = [j for j in range(656) if got[j] != want[j]]
        assert not bad, (i, bad[:8])
    assert rows[0, 512:516].contiguous().view(torch.float32).item() == 2.0 ** -126


def test_job_checks_pass_and_catch():
    """eager_v32 (both forms) and eager_read (every kv) pass their checks on the CPU; one latent code, one scale,
    one rope element or one read value changed fails them."""
    torch = _torch()
    dev = torch.device("cpu")
    cs = _cos_sin(torch)
    for form, m in (("absorbed", "eager_v32"), ("none", "eager_v32_none")):
        pb = v32.V32Problem(torch, 9, 3, dev, cs, 5, 4)
        ref = v32.V32Reference(torch, pb)
        fn, outputs = jobs.JOB_METHODS[m]({"args": None}, pb, m)
        fn()
        ok, steps, exact, bad = v32.check_v32(torch, pb, ref, outputs(), form)
        assert ok and exact == 1.0, (m, steps, bad, exact)
        flat = outputs()["cache"].view(-1, 656)
        s0, s1, s2 = (int(pb.slots[i]) for i in range(3))
        flat[s0, 7] = (int(flat[s0, 7]) & 0x80) | ((int(flat[s0, 7]) & 0x7F) + 3) % 0x7E  # a code 3 steps off
        scale = flat[s1, 516:520].clone().view(torch.float32) * 1.01
        flat[s1, 516:520] = scale.view(torch.uint8)
        flat[s2, 528:530] = flat[s2, 528:530] ^ torch.tensor([0, 0x80], dtype=torch.uint8)  # a rope value negated
        ok, steps, exact, bad = v32.check_v32(torch, pb, ref, outputs(), form)
        assert not ok and bad >= 2, (m, bad)  # the negated value may be a zero (-0 == 0 within tolerance)
    k_scale = torch.tensor([0.5])
    for kv in ("fp8_tile", "fp8_e4m3", "bf16"):
        pb = read.ReadProblem(torch, 70, kv, dev, 9, 16, k_scale)
        want = read.read_reference(torch, pb)
        assert bool((want[63] == 0).all()) and int(pb.slots[63]) == -1, "the 64th token is padding"
        fn, outputs = jobs.JOB_METHODS["eager_read"]({"args": None}, pb, "eager_read")
        fn()
        ok, steps, exact, bad = read.check_read(torch, pb, want, outputs())
        assert ok and exact == 1.0, (kv, steps, bad)
        outputs()["out"][5, 100] = outputs()["out"][5, 100] * 2 + 1
        ok, steps, exact, bad = read.check_read(torch, pb, want, outputs())
        assert not ok and bad == 1, (kv, bad)


def _ropekv_host():
    """True when the library loads and the host backend has a compiler (the ropekv methods of --cpu)."""
    try:
        sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
        import ropekv
        ropekv.version()
    except Exception:  # noqa: BLE001
        return False
    return shutil.which((os.environ.get("CXX") or "c++").split()[0]) is not None


def test_cpu_run_jobs():
    """--cpu runs of --mode v32 and --mode read: the md tables and one csv row per shape and method; with the
    library, the ropekv methods (host backend) pass the checks, bit-identical to the reference."""
    _torch()
    rk = _ropekv_host()
    for mode, methods, kvs, n_shapes in (("v32", ["eager_v32", "eager_v32_none"], ["fp8_tile"], 2 * 2),
                                         ("read", ["eager_read"], ["fp8_tile", "fp8_e4m3", "bf16"], 3 * 2)):
        if rk:
            methods = ["ropekv_" + m.split("_", 1)[1] for m in methods] + methods
        out = tempfile.mkdtemp(prefix="bench-mla-test-")
        try:
            rc = bm.main(["--mode", mode, "--cpu", "--T", "1,70", "--H", "2,3", "--methods", ",".join(methods),
                          "--block-size", "16", "--calls", "2", "--reps", "1", "--no-plot", "--out", out, "--tag", "t"])
            assert rc == 0, mode
            md = open(glob.glob(os.path.join(out, "*_%s_t.md" % mode))[0]).read()
            assert "| %s BW %% |" % methods[-1] in md
            rows = list(csv.DictReader(open(glob.glob(os.path.join(out, "*_%s_t.csv" % mode))[0])))
            assert len(rows) == n_shapes * len(methods), (mode, len(rows))
            assert all(r["status"] == "ok" and r["bw_pct"] and r["mode"] == mode for r in rows)
            assert {r["kv"] for r in rows} == set(kvs)
            for r in rows:
                if r["method"].startswith("ropekv"):
                    assert float(r["bit_identical"]) == 1.0, r
                    assert "%s vs best peer" % r["method"] in md
        finally:
            shutil.rmtree(out, ignore_errors=True)


# ---- the fused kv_a RMSNorm section ------------------------------------------------------------------------------
def test_norm_args():
    """When the norm section runs: after a default or --quick sweep, alone with --norm, after a --methods sweep only
    when --norm-methods asks for it, never with --no-norm; its KV dtypes are --kv's, else bf16 and fp8_e4m3."""
    a = cli.parse_args(["--quick"])
    assert a.norm_on and not a.norm_only and a.norm_kv_list == ["bf16", "fp8_e4m3"] and a.kv_list == ["bf16"]
    assert a.norm_method_list == shapes.NORM_METHODS
    a = cli.parse_args(["--norm", "--kv", "fp8_e4m3", "--T", "1,64"])
    assert a.norm_on and a.norm_only and a.method_list == [] and a.norm_kv_list == ["fp8_e4m3"]
    assert not cli.parse_args(["--methods", "eager"]).norm_on
    a = cli.parse_args(["--methods", "eager", "--norm-methods", "ropekv_norm,ropekv_nonorm"])
    assert a.norm_on and not a.norm_only and a.norm_method_list == ["ropekv_norm", "ropekv_nonorm"]
    assert not cli.parse_args(["--no-norm"]).norm_on and not cli.parse_args(["--mode", "read"]).norm_on
    for bad in (["--norm", "--no-norm"], ["--mode", "v32", "--norm"], ["--norm-methods", "triton_norm"]):
        saved = sys.stderr
        sys.stderr = open(os.devnull, "w")
        try:
            cli.parse_args(bad)
        except SystemExit:
            pass
        else:
            raise AssertionError("%s accepted" % bad)
        finally:
            sys.stderr.close()
            sys.stderr = saved
    assert shapes.norm_bytes(8, 16, True, "rms_out") == shapes.op_bytes(8, 16, True) + 512 * 2 + 8 * 512 * 2


def test_rmsnorm_torch():
    """The peers' RMSNorm (rmsnorm_torch) against ropekv.reference.rms_norm (the kernels' arithmetic): within the
    peers' 2 bf16 steps, both rounding modes; and the reference against a float64 RMSNorm within 2^-7 + 2^-12."""
    torch = _torch()
    g = torch.Generator().manual_seed(5)
    x = (torch.randn(64, 512, generator=g) * torch.exp2(torch.randint(-8, 9, (64, 1), generator=g).float()))
    x = x.to(torch.bfloat16)
    w = (1 + 0.5 * torch.randn(512, generator=g)).to(torch.bfloat16)
    for rounding in ("twice", "once"):
        want = rkref.rms_norm(x, w, 1e-6, rounding)
        got = peers.rmsnorm_torch(x, w, 1e-6, rounding)
        assert int(numerics.code_steps(torch, got, want, "bf16").max()) <= shapes.NORM_PEER_STEPS["bf16"], rounding
    pb = types.SimpleNamespace(k_nope=x, norm_weight=w, norm_eps=1e-6, norm_rounding="twice")
    exact, rel = norm.norm_ref_check(torch, pb, rkref.rms_norm(x, w, 1e-6))
    assert exact == 1.0 and rel <= norm.NORM_REL_TOL, (exact, rel)
    exact, rel = norm.norm_ref_check(torch, pb, rkref.rms_norm(x, w, 1e-3))  # another eps: caught
    assert exact < 1.0


class _FakeRmsnormKernel:
    """A stand-in for the Triton RMSNorm (triton_kernels()["rmsnorm"]) that reads its arguments as the kernel does
    (pointers plus element strides, a program per token) and computes the RMSNorm in PyTorch: it tests the script's
    mapping (rmsnorm_triton_launch), not Triton."""

    def __getitem__(self, grid):
        def run(x_ptr, w_ptr, out_ptr, x_st, out_st, eps, L, TWICE, num_warps):
            import torch
            (T,) = grid
            x = torch.as_strided(x_ptr, (T, L), (x_st, 1))
            out = torch.as_strided(out_ptr, (T, L), (out_st, 1))
            out.copy_(peers.rmsnorm_torch(x, w_ptr[:L], eps, "twice" if TWICE else "once"))
        return run


def _norm_case(torch, kv, T=9, H=3):
    """A norm-section problem on the CPU with the host backend's kernels: the fused op's rows, the baseline's outputs
    and the reference, as run_norm_section makes them."""
    import ropekv
    args = cli.parse_args(["--cpu", "--norm", "--T", str(T), "--H", str(H)])
    state = {"args": args, "meta": {"kernels": {}}, "kernels": {}, "ctx": ropekv.Context("host")}
    info = library.ropekv_kernel(state, "ctx", "absorbed", False, kv, "rms").info
    ks = torch.tensor([0.5])
    pb = norm.norm_problem(torch, T, H, kv, torch.device("cpu"), _cos_sin(torch), ks, 11, dict(shapes.SPECS["deepseek_v3"]),
                         info)
    fn, outputs = library.method_ropekv_norm(state, pb, "rms_out")
    fn()
    pb.n_fused = outputs()["norm"]
    pb.pn = norm.prenormed(pb, pb.n_fused)
    ref = write.Reference(torch, pb.pn)
    fn, outputs = library.method_ropekv_nonorm(state, pb)
    fn()
    return state, pb, ref, outputs()


def test_norm_checks_pass_and_catch():
    """With the host backend: every norm method passes check_norm (the fused op's cache equal to norm none on its
    norm_out, the peers within their steps); a fused cache's k_nope code one step off fails (bit for bit), a peer's
    within NORM_PEER_STEPS passes and one step more fails; the Triton RMSNorm's argument mapping, through a stand-in,
    passes, and with c_kv read at the buffer's row stride fails."""
    torch = _torch()
    if not _ropekv_host():
        raise Skip("no libropekv or no C++ compiler for the host backend")
    saved = dict(triton_kernels._TRITON)
    try:
        for kv in ("bf16", "fp8_e4m3"):
            state, pb, ref, base = _norm_case(torch, kv)
            kind = "fp8" if kv == "fp8_e4m3" else "bf16"
            outs = {}
            for m in shapes.NORM_METHODS:
                fn, outputs = norm.NORM_FNS[m](state, pb)
                fn()
                outs[m] = outputs()
                ok, steps, exact, bad, note = norm.check_norm(torch, pb, ref, outs[m], m, base)
                assert ok, (kv, m, steps, bad, note)
                if m.startswith("ropekv"):
                    assert exact == 1.0, (kv, m, exact)
            flat = lambda c: c.view(torch.uint8).view(-1, shapes.W) if kind == "fp8" else c.view(-1, shapes.W)  # noqa: E731
            s0 = int(pb.slots[2])

            def nudge(cache, j, steps):  # the code of row s0, element j, moved by steps (away from zero)
                v = flat(cache)[s0, j:j + 1]
                bits = v.view(torch.uint8) if kind == "fp8" else v.view(torch.int16)
                bits += steps

            nudge(outs["ropekv_norm"]["cache"], 5, 1)
            ok, steps, exact, bad, note = norm.check_norm(torch, pb, ref, outs["ropekv_norm"], "ropekv_norm", base)
            assert not ok and "cache differs" in note, (kv, note)
            lim = shapes.NORM_PEER_STEPS[kind]
            nudge(outs["eager_norm"]["cache"], 5, lim)
            assert norm.check_norm(torch, pb, ref, outs["eager_norm"], "eager_norm", base)[0], kv
            nudge(outs["eager_norm"]["cache"], 5, 1)
            assert not norm.check_norm(torch, pb, ref, outs["eager_norm"], "eager_norm", base)[0], kv
            outs["rmsnorm_ropekv"]["norm"].view(torch.int16)[1, 7] += 3
            assert not norm.check_norm(torch, pb, ref, outs["rmsnorm_ropekv"], "rmsnorm_ropekv", base)[0], kv
            # the Triton RMSNorm's mapping, through the stand-in
            triton_kernels._TRITON.clear()
            triton_kernels._TRITON["rmsnorm"] = _FakeRmsnormKernel()
            state["rmsnorm_impl"] = "triton"
            fn, outputs = peers.method_rmsnorm_ropekv(state, pb)
            fn()
            ok, steps, exact, bad, note = norm.check_norm(torch, pb, ref, outputs(), "rmsnorm_ropekv", base)
            assert ok, (kv, steps, bad, note)
            real = peers.rmsnorm_triton_launch

            def wrong_stride(pb_, out):  # c_kv read with the buffer's row stride (512, not the projection's 576)
                grid, a, kw = real(pb_, out)
                return grid, a[:3] + (a[4], a[4]) + a[5:], kw

            peers.rmsnorm_triton_launch = wrong_stride
            try:
                fn, outputs = peers.method_rmsnorm_ropekv(state, pb)
                fn()
                assert not norm.check_norm(torch, pb, ref, outputs(), "rmsnorm_ropekv", base)[0], kv
            finally:
                peers.rmsnorm_triton_launch = real
                state["rmsnorm_impl"] = "torch"
            state["ctx"].close()
    finally:
        triton_kernels._TRITON.clear()
        triton_kernels._TRITON.update(saved)


def test_cpu_run_norm():
    """A --cpu --norm run: the norm table (every method, the fused / no-norm ratio, the goal line) and one csv row per
    shape and method, ropekv's methods bit-identical to the reference and norm_out equal to rms_norm's."""
    _torch()
    if not _ropekv_host():
        raise Skip("no libropekv or no C++ compiler for the host backend")
    out = tempfile.mkdtemp(prefix="bench-mla-test-")
    try:
        rc = bm.main(["--cpu", "--norm", "--T", "1,9", "--H", "2", "--calls", "2", "--reps", "1", "--no-plot",
                      "--out", out, "--tag", "t"])
        assert rc == 0
        assert not glob.glob(os.path.join(out, "*_cpu_t.md")), "--norm wrote the main table"
        md = open(glob.glob(os.path.join(out, "*_norm_t.md"))[0]).read()
        assert "| fused / no-norm |" in md and "goal (fused within 5% of ropekv without the norm)" in md
        assert "| ropekv_norm us | ropekv_norm_out us | rmsnorm_ropekv us | eager_norm us | ropekv_nonorm us |" in md
        rows = list(csv.DictReader(open(glob.glob(os.path.join(out, "*_norm_t.csv"))[0])))
        assert len(rows) == 2 * 2 * len(shapes.NORM_METHODS), len(rows)
        assert all(r["status"] == "ok" and r["us"] and float(r["norm_out_exact"]) == 1.0 for r in rows)
        assert {r["kv"] for r in rows} == {"bf16", "fp8_e4m3"}
        for r in rows:
            if r["method"].startswith("ropekv"):
                assert float(r["bit_identical"]) == 1.0, r
    finally:
        shutil.rmtree(out, ignore_errors=True)


# ---- --mode records ----------------------------------------------------------------------------------------------
def _rows_by_label():
    return {r["label"]: r for r in records.record_table()}


def test_records_codec():
    """The records' encoder on hand-made cases (e2m1 ties to the even code, the sign and NaN; a power-of-two scale
    kept and another rounded up; an all-zero block's e4m3 scale the least code; the tensor scale), its decoder
    giving the bf16 row back exactly and every other row within its format's error, and record_bytes."""
    torch = _torch()
    v = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0, -0.0, -0.1, -5.5, float("nan")])
    assert records._e2m1_codes(v).tolist() == [0, 2, 2, 4, 4, 6, 6, 7, 8, 8, 15, 7]
    rows = _rows_by_label()
    g = torch.Generator().manual_seed(11)
    lat = torch.randn(4, 512, generator=g)
    lat[0, :128] = 0
    lat[1, :128] *= 448 * 2 / lat[1, :128].abs().max()  # tile amax 896: scale 2 exactly
    lat[2, :128] *= 448 * 3 / lat[2, :128].abs().max()  # 3 -> 4 when rounded up
    lat = lat.to(torch.bfloat16)
    rope = torch.randn(4, 64, generator=g).to(torch.bfloat16).float()
    ks = torch.tensor([0.5])
    pow2 = records.encode_rows(rows["deepseek_v32_pow2/fp8_ds_mla_pow2"], lat, rope, ks)
    exact = records.encode_rows(rows["deepseek_v32/fp8_ds_mla"], lat, rope, ks)
    f = lambda r, i: r[i, 512:516].contiguous().view(torch.float32).item()  # noqa: E731
    assert f(pow2, 0) == f(exact, 0) == 2.0 ** -126
    assert f(pow2, 1) == f(exact, 1) == 2.0 and f(exact, 2) == 3.0 and f(pow2, 2) == 4.0
    nv = records.encode_rows(rows["deepseek_v3/nvfp4"], lat, rope, ks)
    assert nv[0, 256:264].tolist() == [1] * 8 and nv[0, :64].tolist() == [0] * 64  # zero blocks: scale 2^-9, codes 0
    fp8 = records.encode_rows(rows["deepseek_v3/fp8_e4m3"], lat, rope, ks)
    assert torch.equal(fp8[:, :512], numerics._fp8_codes(torch, (lat.float() * 2).clamp(-448, 448)))
    x = torch.cat([lat.float(), rope], dim=1)
    for label, rec in rows.items():
        enc = records.encode_rows(rec, lat, rope, ks)
        assert enc.shape == (4, rec["row_bytes"]), label
        dec = records.decode_rows(rec, enc, ks).float()
        if label.endswith("/bf16"):
            assert torch.equal(dec, x.to(torch.bfloat16).float()), label
            continue
        for g_ in rec["segments"]:
            xs, ds = x[:, g_["frm"]:g_["frm"] + g_["n"]], dec[:, g_["frm"]:g_["frm"] + g_["n"]]
            blk = g_["block"] or g_["n"]
            amax = xs.reshape(4, -1, blk).abs().amax(-1, keepdim=True)
            err = (ds - xs).abs().reshape(4, -1, blk)
            tol = (0.25 if g_["elem"] == "e2m1" else 2.0 ** -4) * amax + (2.0 ** -9 if not g_["block"] else 0)
            if not g_["block"]:  # a tensor-scaled value past the bound saturates: not an error
                tol = torch.where(xs.reshape(4, -1, blk).abs() / 0.5 > 448, torch.full_like(tol, 1e30), tol)
            assert bool((err <= tol).all()), (label, g_["frm"], float((err - tol).max()))
    assert records.record_bytes(2, 3, 656, "write") == 2 * 3 * 576 * 4 + 2 * 1152 + 2 * 656 + 2 * 16 + 2 * 256
    assert records.record_bytes(2, 3, 352, "kv") == 2 * 1152 + 2 * 352 + 2 * 16 + 2 * 256
    assert records.record_bytes(5, 1, 352, "read") == 5 * 352 + 5 * 1152 + 5 * 8


def test_records_check_catches():
    """check_write passes rows and a query row written as expected, and counts one changed byte of a row, of the
    spare row and of q_out; check_table refuses a row whose bytes the library sees otherwise."""
    torch = _torch()
    dev = torch.device("cpu")
    pb = records.Problem(9, 3, dev, _cos_sin(torch), 5)
    rec = _rows_by_label()["deepseek_v32/nvfp4_fp8rope"]
    ref = records.encode_rows(rec, pb.k_nope, pb.kv_rope, pb.k_scale)
    cache = pb.new_cache(rec)
    cache[pb.slots] = ref
    q_out = torch.cat([pb.q[..., :512], pb.q_rope(0, 9)], dim=-1)
    outs = {"cache": cache, "q_out": q_out}
    same, n = records.check_write(pb, ref, outs)
    assert same == n and n == 9 * 352 + 352 + 9 * 3 * 576, (same, n)
    spare = int(torch.ones(10, dtype=torch.bool).index_fill_(0, pb.slots, False).nonzero())
    cache[int(pb.slots[4]), 300] ^= 1
    cache[spare, 0] = 1
    q_out[2, 1, 520] = -q_out[2, 1, 520] if q_out[2, 1, 520] != 0 else 1.0
    assert records.check_write(pb, ref, outs) == (n - 3, n)
    info = types.SimpleNamespace(record="nvfp4_fp8rope", record_row_bytes=352, record_split_at=0, scale="none",
                                 sanitize=False, op="write")
    records.check_table(rec, info)
    info.record_split_at = 288
    try:
        records.check_table(rec, info)
    except RuntimeError as e:
        assert "record_table" in str(e)
    else:
        raise AssertionError("check_table took a row the library sees otherwise")


def _jit_signature(name):
    """(runtime parameter names, constexpr parameter names) of a Triton function in mla/triton_kernels.py, read from
    its source (no Triton here)."""
    import ast
    tree = ast.parse(open(triton_kernels.__file__).read())
    fn = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name][0]
    const = [a.arg for a in fn.args.args if a.annotation is not None and ast.unparse(a.annotation) == "tl.constexpr"]
    return [a.arg for a in fn.args.args if a.arg not in const], const, fn


def test_records_triton_args():
    """The Triton record writer's launch (records._triton, through a stand-in of the kernel) against the kernel's
    signature: the runtime arguments in number, the constexprs by name, the grid; and each record_segment call
    passing every parameter."""
    torch = _torch()
    import ast
    runtime, const, fn = _jit_signature("record_write_kernel")
    seg_runtime, seg_const, _ = _jit_signature("record_segment")
    calls = [c for c in ast.walk(fn) if isinstance(c, ast.Call) and getattr(c.func, "id", "") == "record_segment"]
    assert len(calls) == 2 and all(len(c.args) == len(seg_runtime) + len(seg_const) for c in calls)
    launches = []

    class Kernel:
        def __getitem__(self, grid):
            return lambda *a, **kw: launches.append((grid, a, kw))

    real = records.triton_kernels
    records.triton_kernels = lambda: {"record": Kernel()}
    try:
        dev = torch.device("cpu")
        for H, method in ((3, "triton_rec_pdl"), (0, "triton_rec_none")):
            pb = records.Problem(5, H, dev, _cos_sin(torch), 2)
            for rec in records.record_table():
                fn_, outputs = records._triton(None, rec, pb, method)
                fn_()
                grid, a, kw = launches.pop()
                assert grid == (5, H + 1) and len(a) == len(runtime), (grid, len(a))
                assert a[5] is outputs()["cache"] and a[-2] == rec["row_bytes"] and a[-1] == H
                assert set(kw) - {"num_warps", "launch_pdl"} == set(const), set(kw) ^ set(const)
                assert kw["USE_GDC"] == method.endswith("_pdl") and kw.get("launch_pdl", False) == kw["USE_GDC"]
                assert (H > 0) == ("q_out" in outputs())
    finally:
        records.triton_kernels = real
    kw = records.triton_constexprs(_rows_by_label()["deepseek_v3/nvfp4"])
    assert (kw["E0"], kw["B0"], kw["S0"], kw["SA0"], kw["SAT0"], kw["C0"]) == (2, 16, 3, 256, 6.0, 1)
    assert (kw["E1"], kw["A1"], kw["B1"], kw["C1"]) == (1, 288, 0, 1)
    kw = records.triton_constexprs(_rows_by_label()["kimi_k2/fp8"])
    assert kw["CLEAN"] and kw["C0"] == kw["C1"] == 2


def test_cpu_run_records():
    """A --cpu run of --mode records: the md tables and goals, one csv row per row, shape and method; with the
    library, every row's ropekv outputs (write, none, read) bit-identical to the PyTorch encoder and decoder."""
    _torch()
    if not _ropekv_host():
        raise Skip("no library or no host compiler")
    out = tempfile.mkdtemp(prefix="bench-mla-test-")
    try:
        rc = bm.main(["--mode", "records", "--cpu", "--T", "1,5", "--H", "2", "--read-rows", "7,70", "--calls", "2",
                      "--reps", "1", "--no-plot", "--out", out, "--tag", "t"])
        assert rc == 0
        md = open(glob.glob(os.path.join(out, "*_records_t.md"))[0]).read()
        assert "Goals:" in md and "### Write, q form absorbed (bf16 query)" in md and "### Read-back" in md
        rows = list(csv.DictReader(open(glob.glob(os.path.join(out, "*_records_t.csv"))[0])))
        assert len(rows) == len(records.record_table()) * 3 * 2, len(rows)
        assert all(r["status"] == "ok" and r["us"] and float(r["same"]) == 1.0 for r in rows)
        assert {r["job"] for r in rows} == {"write", "kv", "read"}
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
