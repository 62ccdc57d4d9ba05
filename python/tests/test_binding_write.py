"""The write op through torch tensors, every output against reference() bit for bit: the specs' q forms and caches on
the host backend (CPU tensors) and on a CUDA GPU, padding and short slot lists, large shapes, CUDA graph capture,
chained launches with and without PDL, and the argument errors.

    python3 python/tests/test_binding_write.py    # this file; python3 python/tests/test_binding.py runs them all"""
import sys

from _cases import run_and_check
from _reference import SPECS, make_inputs, reference
from _support import (_CACHE_DIR, _cuda_torch, _expect, _first_differences, _torch, compare_bits, context, main,
                      parametrize)

import ropekv  # noqa: E402  (after _support, which puts python/ on sys.path)


# ---- torch on the host backend (CPU tensors) ---------------------------------------------------------------
HOST_CASES = [("deepseek_v3", "absorbed", "bf16"), ("deepseek_v3", "absorbed", "fp8_e4m3"),
              ("deepseek_v3", "zero_copy", "fp8_e4m3"), ("kimi_k2", "inplace", "bf16"),
              ("kimi_k2", "inplace", "fp8_e4m3"), ("minicpm3_4b", "zero_copy", "bf16"),
              ("minicpm3_4b", "inplace", "fp8_e4m3")]


@parametrize("spec,q,kv", HOST_CASES)
def test_host_torch(spec, q, kv):
    torch = _torch()
    run_and_check(torch, context("host"), spec, q, kv, T=11, H=3, device="cpu", specials=spec == "kimi_k2")


PADDING_CASES = [("deepseek_v3", "absorbed", "fp8_e4m3", 11, 5, 1), ("deepseek_v3", "zero_copy", "bf16", 3, 11, 2),
                 ("kimi_k2", "inplace", "fp8_e4m3", 11, 6, 1), ("kimi_k2", "absorbed", "bf16", 4, 9, 0),
                 ("deepseek_v3", "absorbed", "bf16", 0, 5, 1), ("kimi_k2", "absorbed", "fp8_e4m3", 6, 0, 0),
                 ("deepseek_v3", "none", "fp8_e4m3", 0, 7, 1)]


@parametrize("spec,q,kv,T,K,min_slot", PADDING_CASES)
def test_host_torch_padding(spec, q, kv, T, K, min_slot):
    """Query rows for T tokens, KV rows for K (a short slot list, or padded queries), reserved slots kept."""
    torch = _torch()
    run_and_check(torch, context("host"), spec, q, kv, T=T, H=3, device="cpu", specials=True, kv_tokens=K,
                  min_slot=min_slot)


def test_host_torch_errors():
    torch = _torch()
    _check_errors(torch, context("host"), "cpu")


# ---- CUDA ---------------------------------------------------------------------------------------------------
@parametrize("kv,q,slots", [(kv, q, sl) for kv in ("bf16", "fp8_e4m3") for q in ("absorbed", "zero_copy", "none")
                            for sl in ("int64",)] + [("fp8_e4m3", "absorbed", "int32")])
def test_cuda_deepseek_v3(kv, q, slots):
    torch = _cuda_torch()
    run_and_check(torch, context("cuda"), "deepseek_v3", q, kv, T=67, H=16, device="cuda", slots_dtype=slots)


@parametrize("kv,q", [("fp8_e4m3", "inplace"), ("fp8_e4m3", "absorbed"), ("bf16", "inplace")])
def test_cuda_kimi_k2(kv, q):
    torch = _cuda_torch()
    run_and_check(torch, context("cuda"), "kimi_k2", q, kv, T=41, H=8, device="cuda", specials=True, seed=3)


@parametrize("kv,q", [(kv, q) for kv in ("bf16", "fp8_e4m3") for q in ("absorbed", "zero_copy", "inplace")])
def test_cuda_minicpm3_4b(kv, q):
    torch = _cuda_torch()
    run_and_check(torch, context("cuda"), "minicpm3_4b", q, kv, T=33, H=40, device="cuda", seed=5)


def test_cuda_large_strides():
    """Many tokens and heads (index math past 2^31 elements is not reached here; strides and the 2-D grid are)."""
    torch = _cuda_torch()
    run_and_check(torch, context("cuda"), "deepseek_v3", "absorbed", "fp8_e4m3", T=4099, H=128, device="cuda",
                  seed=7)


@parametrize("spec,q,kv,T,K,min_slot", PADDING_CASES + [("deepseek_v3", "absorbed", "bf16", 1000, 700, 1)])
def test_cuda_padding(spec, q, kv, T, K, min_slot):
    torch = _cuda_torch()
    run_and_check(torch, context("cuda"), spec, q, kv, T=T, H=16, device="cuda", specials=True, kv_tokens=K,
                  min_slot=min_slot)


def test_cuda_graph_capture():
    """A bound launch captured in a CUDA graph runs on replay (the launch goes to torch's current stream)."""
    torch = _cuda_torch()
    ctx = context("cuda")
    k = ctx.kernel("deepseek_v3", kv="bf16", q="absorbed")
    x = make_inputs(torch, "deepseek_v3", "absorbed", "bf16", 32, 16, "cuda", seed=11)
    want = reference(torch, "deepseek_v3", "absorbed", "bf16", x)
    launch = k.bind(**x)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        launch()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    x["q_out"].fill_(-777.0)
    x["kv_cache"].fill_(-777.0)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        launch()
    torch.cuda.synchronize()
    assert bool((x["q_out"] == -777.0).all()), "the captured launch ran during capture"
    g.replay()
    torch.cuda.synchronize()
    for name in ("q_out", "kv_cache"):
        steps, frac, n, bad = compare_bits(torch, x[name], want[name], "bf16")
        assert bad == 0, "%s after replay: %d of %d elements not bit-identical (max %d steps; %s)" % (
            name, bad, n, steps, _first_differences(torch, x[name], want[name], "bf16"))


def test_cuda_pdl_chain():
    """Chained in-place launches (each rotates the previous one's q_pe) give the same bits with programmatic
    dependent launch (the default on sm_90), also with pdl_prefetch, as without it, eagerly and replayed from a
    CUDA graph."""
    torch = _cuda_torch()
    on = ropekv.Context("cuda", cache_dir=_CACHE_DIR, pdl=True)
    off = ropekv.Context("cuda", cache_dir=_CACHE_DIR, pdl=False)
    pf = ropekv.Context("cuda", cache_dir=_CACHE_DIR, pdl=True, pdl_prefetch=True)
    try:
        results = []
        runs = ((off, False), (on, False), (on, True), (pf, False), (pf, True))
        for ctx, graph in runs:
            k = ctx.kernel("kimi_k2", kv="bf16", q="inplace", positions=SPECS["kimi_k2"]["pos"])
            x = make_inputs(torch, "kimi_k2", "inplace", "bf16", 1000, 16, "cuda", seed=17)
            launch = k.bind(**x)
            if graph:
                q0 = x["q_pe"].clone()
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    launch()
                torch.cuda.current_stream().wait_stream(s)
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    for _ in range(16):
                        launch()
                x["q_pe"].copy_(q0)
                g.replay()
            else:
                for _ in range(16):
                    launch()
            torch.cuda.synchronize()
            results.append((x["q_pe"].clone(), x["kv_cache"].clone()))
        for name, i in (("q_pe", 0), ("kv_cache", 1)):
            for j in range(1, len(runs)):
                steps, frac, n, bad = compare_bits(torch, results[j][i], results[0][i], "bf16")
                assert bad == 0, "%s, %s%s: %d of %d elements differ from launches without PDL" % (
                    name, "graph" if runs[j][1] else "eager", " with prefetch" if runs[j][0] is pf else "", bad, n)
    finally:
        on.close()
        off.close()
        pf.close()


def _check_errors(torch, ctx, device):
    k = ctx.kernel("deepseek_v3", kv="bf16", q="absorbed")
    T, H = 16, 4
    x = make_inputs(torch, "deepseek_v3", "absorbed", "bf16", T, H, device, seed=13)
    # dtypes
    _expect(TypeError, lambda: k(**dict(x, q_pe=x["q_pe"].to(torch.float16))))
    _expect(TypeError, lambda: k(**dict(x, positions=x["positions"].to(torch.int32))))
    _expect(TypeError, lambda: k(**dict(x, kv_cache=x["kv_cache"].view(torch.int16))))
    _expect(TypeError, lambda: k(**dict(x, q_out=3)))
    if hasattr(torch, "float8_e4m3fn"):
        kf = ctx.kernel("deepseek_v3", kv="fp8_e4m3", q="absorbed")
        xf = make_inputs(torch, "deepseek_v3", "absorbed", "fp8_e4m3", T, H, device, seed=13)
        if hasattr(torch, "float8_e4m3fnuz"):
            _expect(TypeError, lambda: kf(**dict(xf, kv_cache=xf["kv_cache"].view(torch.float8_e4m3fnuz))))
        kf(**dict(xf, kv_cache=xf["kv_cache"].view(torch.uint8)))  # raw bytes are fine
        _expect(ValueError, lambda: kf(**dict(xf, k_scale=None)))  # a missing scale is not 1.0
        runs = []  # k_scale=1.0 said as a number: the unit tensor's bytes
        for scale in (1.0, torch.ones(1, dtype=torch.float32, device=device)):
            runs.append(dict(xf, kv_cache=xf["kv_cache"].clone(), q_out=xf["q_out"].clone(), k_scale=scale))
            kf(**runs[-1])
        assert torch.equal(runs[0]["kv_cache"].view(torch.uint8), runs[1]["kv_cache"].view(torch.uint8))
        _expect(ValueError, lambda: kf(**dict(xf, k_scale=torch.ones(2, device=device))))
    # shapes and layouts
    _expect(ValueError, lambda: k(**dict(x, q_pe=x["q_pe"][:, :2])))
    _expect(ValueError, lambda: k(**dict(x, k_pe=x["k_pe"].t().contiguous().t())))  # last dim not contiguous
    _expect(ValueError, lambda: k(**dict(x, kv_cache=x["kv_cache"][:, :8])))  # rows of two strides
    _expect(ValueError, lambda: k(**dict(x, sin=x["cos_sin"])))
    _expect(ValueError, lambda: ctx.kernel("deepseek_v3", kv="bf16", q="none")(**x))  # q tensors for form none
    _expect(TypeError, lambda: k(**dict(x, bogus=x["q_out"])))
    _expect(ValueError, lambda: k(**dict(x, positions=x["positions"][:T - 1])))  # fewer than the query tokens
    _expect(ValueError, lambda: k(**dict(x, k_nope=x["k_nope"][:T - 1], k_pe=x["k_pe"][:T - 1])))  # < slots
    _expect(ValueError, lambda: k(**x, min_slot=-1))
    # the library's checks
    qb = torch.empty(T, H, 576 + 8, dtype=torch.bfloat16, device=device)
    _expect(ropekv.RopekvError, lambda: k(**dict(x, q_nope=qb[..., 1:513])), {"ROPEKV_ERR_ALIGN"})
    ov = torch.empty(T * H * 576, dtype=torch.bfloat16, device=device)
    overlapping = torch.as_strided(ov, (T, H, 576), (H * 576, 8, 1))
    e = _expect(ropekv.RopekvError, lambda: k(**dict(x, q_out=overlapping)), {"ROPEKV_ERR_STRIDE"})
    assert "q_out" in e.message
    ok, why = ctx.query("deepseek_v3", kv="bf16", q="absorbed", **dict(x, q_out=overlapping))
    assert not ok and "ROPEKV_ERR_STRIDE" in why
    ok, why = ctx.query("deepseek_v3", kv="bf16", q="absorbed", **x)
    assert ok, why
    # aliasing: a tensor the kernel writes shares no byte with another, checked at every launch (the same signature as
    # a launch that ran: its plan is reused, the library still refuses)
    k(**x)
    e = _expect(ropekv.RopekvError, lambda: k(**dict(x, q_pe=x["q_out"][..., 512:])), {"ROPEKV_ERR_ALIAS"})
    assert "q_pe" in e.message and "q_out" in e.message, e
    ok, why = ctx.query("deepseek_v3", kv="bf16", q="absorbed", **dict(x, q_pe=x["q_out"][..., 512:]))
    assert not ok and "ROPEKV_ERR_ALIAS" in why, why
    e = _expect(ropekv.RopekvError, lambda: k(**dict(x, slots=x["kv_cache"].view(-1).view(torch.int64)[:T])),
                {"ROPEKV_ERR_ALIAS"})
    assert "slots" in e.message and "kv_cache" in e.message, e
    # devices
    if device == "cpu":
        if torch.cuda.is_available():
            _expect(ValueError, lambda: k(**dict(x, k_nope=x["k_nope"].cuda())))
    else:
        _expect(ValueError, lambda: k(**dict(x, k_nope=x["k_nope"].cpu())))
        _expect(ValueError, lambda: k(**{n: v.cpu() for n, v in x.items()}))
    return k, x


def test_cuda_errors():
    torch = _cuda_torch()
    _check_errors(torch, context("cuda"), "cuda")


if __name__ == "__main__":
    sys.exit(main(globals()))
