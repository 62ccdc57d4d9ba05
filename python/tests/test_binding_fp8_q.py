"""The fp8 query output (q_dtype="fp8_e4m3", q_scale) through torch tensors: every q form each spec lists, both caches,
three scales, NaN, +-inf and out-of-range values in the query, against reference() bit for bit on the host backend
and a CUDA GPU; the policy as KernelInfo reports it; the argument errors.

    python3 python/tests/test_binding_fp8_q.py    # this file; python3 python/tests/test_binding.py runs them all"""
import sys

from _cases import run_and_check
from _reference import make_inputs
from _support import _cuda_torch, _expect, _torch, context, main, parametrize, skip

import ropekv  # noqa: E402  (after _support, which puts python/ on sys.path)


# ---- the host backend ------------------------------------------------------------------------------------------
Q_SCALES = (0.37, 1.0, 1.0 / 448)


# (spec, q form, kv dtype, q_scale): every q form each spec lists, both caches, the three scales, the specs' query
# fp8 policies (mul_recip; mul_recip and mul with the rope rounded to bf16 first)
FP8Q_HOST_CASES = [("deepseek_v3", "absorbed", "bf16", 0.37), ("deepseek_v3", "absorbed", "fp8_e4m3", 1.0),
                   ("deepseek_v3", "absorbed", "bf16", 1.0 / 448), ("deepseek_v3", "zero_copy", "fp8_e4m3", 0.37),
                   ("deepseek_v3", "zero_copy", "bf16", 1.0 / 448), ("deepseek_v3", "zero_copy", "bf16", 1.0),
                   ("deepseek_v3", "none", "fp8_e4m3", 0.37), ("kimi_k2", "absorbed", "fp8_e4m3", 0.37),
                   ("kimi_k2", "absorbed", "bf16", 1.0 / 448), ("kimi_k2", "inplace", "bf16", 0.37),
                   ("kimi_k2", "inplace", "fp8_e4m3", 1.0 / 448), ("kimi_k2", "inplace", "bf16", 1.0),
                   ("minicpm3_4b", "absorbed", "fp8_e4m3", 0.37), ("minicpm3_4b", "zero_copy", "bf16", 1.0 / 448),
                   ("minicpm3_4b", "inplace", "fp8_e4m3", 1.0)]


@parametrize("spec,q,kv,q_scale", FP8Q_HOST_CASES)
def test_host_torch_fp8_q(spec, q, kv, q_scale):
    """The fp8 query output on the host backend: every byte against reference() (q_fp8_reference: scale by the
    spec's convention, clamp, e4m3), with NaN, +-inf and out-of-range values in the query."""
    torch = _torch()
    run_and_check(torch, context("host"), spec, q, kv, T=11, H=3, device="cpu", specials=True, seed=21,
                  q_dtype="fp8_e4m3", q_scale=q_scale, q_specials=True)


FP8Q_PADDING_CASES = [("deepseek_v3", "absorbed", "fp8_e4m3", 11, 5, 1), ("deepseek_v3", "zero_copy", "bf16", 3, 11, 2),
                      ("kimi_k2", "inplace", "fp8_e4m3", 11, 6, 1), ("kimi_k2", "absorbed", "bf16", 6, 0, 0),
                      ("deepseek_v3", "absorbed", "bf16", 0, 5, 1)]


@parametrize("spec,q,kv,T,K,min_slot", FP8Q_PADDING_CASES)
def test_host_torch_fp8_q_padding(spec, q, kv, T, K, min_slot):
    """fp8 query rows for T tokens, KV rows for K; with T = 0 no q_scale is needed (none is passed)."""
    torch = _torch()
    run_and_check(torch, context("host"), spec, q, kv, T=T, H=3, device="cpu", specials=True, kv_tokens=K,
                  min_slot=min_slot, q_dtype="fp8_e4m3", q_scale=None if T == 0 else 0.37)


def test_host_torch_fp8_q_float8_dtype():
    """q_out passed as torch.float8_e4m3fn (the dtype matching the host's OCP bytes) instead of uint8."""
    torch = _torch()
    if not hasattr(torch, "float8_e4m3fn"):
        skip("this torch has no float8_e4m3fn (uint8 q_out is tested elsewhere)")
    for q in ("absorbed", "zero_copy"):
        run_and_check(torch, context("host"), "deepseek_v3", q, "bf16", T=5, H=2, device="cpu", q_dtype="fp8_e4m3",
                      q_scale=0.37, q_out_dtype=torch.float8_e4m3fn)


def test_host_fp8_q_kernel_info():
    """The fp8 query policy as the library describes it, the q_dtype spellings and what q form none makes."""
    c = context("host")
    k = c.kernel("deepseek_v3", kv="fp8_e4m3", q="absorbed", q_dtype="fp8_e4m3")
    i = k.info
    assert (i.q_dtype, i.q_fp8_format, i.q_fp8_scale, i.q_fp8_saturate, i.q_fp8_rope_bf16_round) == (
        "fp8_e4m3", "ocp", "mul_recip", 448.0, False), i
    assert (i.kv, i.scale, i.sat) == ("fp8_e4m3", "mul_recip", 448.0)
    assert k.q_dtype == "fp8_e4m3" and "/" in i.key
    kk = c.kernel("kimi_k2", kv="bf16", q="inplace", positions="int32", q_dtype="fp8_e4m3").info
    assert (kk.q_dtype, kk.q_fp8_format, kk.q_fp8_scale, kk.q_fp8_saturate, kk.q_fp8_rope_bf16_round) == (
        "fp8_e4m3", "ocp", "mul_recip", 448.0, True), kk
    b = c.kernel("deepseek_v3", kv="fp8_e4m3", q="absorbed").info
    assert (b.q_dtype, b.q_fp8_format, b.q_fp8_scale, b.q_fp8_saturate, b.q_fp8_rope_bf16_round) == (
        "bf16", None, "none", 0.0, False), b
    assert b.name != i.name and b.key != i.key
    assert c.kernel("deepseek_v3", kv="fp8_e4m3", q="absorbed", q_dtype=1).name == i.name
    # q form none writes no query: the fp8 choice makes the bf16 kernel
    n8 = c.kernel("deepseek_v3", kv="fp8_e4m3", q="none", q_dtype="fp8_e4m3")
    n = c.kernel("deepseek_v3", kv="fp8_e4m3", q="none")
    assert n8.name == n.name and n8.info.q_dtype == "bf16"
    ok, why = c.query("deepseek_v3", kv="bf16", q="zero_copy", q_dtype="fp8_e4m3")
    assert ok, why
    ok, why = c.query("kimi_k2", kv="bf16", q="inplace", q_dtype="fp8_e4m3")
    assert ok, why
    for bad in ("fp8", "float8_e4m3fn", 2, None, True):
        _expect(ValueError, lambda: c.kernel("deepseek_v3", q_dtype=bad))
        _expect(ValueError, lambda: c.query("deepseek_v3", q_dtype=bad))
    try:
        import torch
    except ImportError:
        return
    assert c.kernel("deepseek_v3", q_dtype=torch.bfloat16).name == c.kernel("deepseek_v3").name
    _expect(ValueError, lambda: c.kernel("deepseek_v3", q_dtype=torch.float16))
    if hasattr(torch, "float8_e4m3fn"):
        assert c.kernel("deepseek_v3", kv="fp8_e4m3", q_dtype=torch.float8_e4m3fn).name == i.name


def _check_fp8_q_errors(torch, ctx, device):
    """Argument errors of fp8 query launches: q_out's dtype, q_scale missing / of another dtype / size."""
    T, H = 8, 2
    k = ctx.kernel("deepseek_v3", kv="bf16", q="absorbed", q_dtype="fp8_e4m3")
    x = make_inputs(torch, "deepseek_v3", "absorbed", "bf16", T, H, device, seed=23, q_dtype="fp8_e4m3",
                    q_scale=0.37)
    k(**x)
    e = _expect(TypeError, lambda: k(**dict(x, q_out=torch.zeros(T, H, 576, dtype=torch.bfloat16, device=device))))
    assert "q_out" in str(e) and "uint8" in str(e)
    _expect(TypeError, lambda: k(**dict(x, q_out=x["q_out"].view(torch.int8))))
    if hasattr(torch, "float8_e4m3fnuz"):  # the other format's dtype
        _expect(TypeError, lambda: k(**dict(x, q_out=x["q_out"].view(torch.float8_e4m3fnuz))))
    # a missing q_scale is not taken as 1.0: the caller says 1.0 (a number) or passes a tensor
    e = _expect(ValueError, lambda: k(**dict(x, q_scale=None)))
    assert "q_scale is required" in str(e) and "1.0 for no scaling" in str(e), e
    runs = []
    for scale in (1.0, 1, torch.ones(1, dtype=torch.float32, device=device)):
        runs.append(dict(x, q_out=x["q_out"].clone(), kv_cache=x["kv_cache"].clone(), q_scale=scale))
        k(**runs[-1])
    assert all(torch.equal(r["q_out"].view(torch.uint8), runs[-1]["q_out"].view(torch.uint8)) for r in runs[:-1])
    # a scale that is not a positive finite float32 is refused by name: a number, or a CPU tensor's value
    for bad in (0.0, -0.37, float("nan"), float("inf"), 1e-50, 1e39):
        e = _expect(ValueError, lambda: k(**dict(x, q_scale=bad)))
        assert "q_scale = " in str(e) and "positive finite float32" in str(e), (bad, e)
    if device == "cpu":
        for bad in (0.0, float("nan"), -1.0):
            e = _expect(ValueError, lambda: k(**dict(x, q_scale=torch.tensor([bad]))))
            assert "positive finite float32" in str(e), (bad, e)
    _expect(TypeError, lambda: k(**dict(x, q_scale=x["q_scale"].double())))
    _expect(ValueError, lambda: k(**dict(x, q_scale=torch.ones(2, device=device))))
    _expect(ValueError, lambda: k(**dict(x, q_out=x["q_out"][:, :, :575])))
    ok, why = ctx.query("deepseek_v3", kv="bf16", q="absorbed", q_dtype="fp8_e4m3", **x)
    assert ok, why
    # a bf16 query kernel takes no fp8 q_out, and ignores a q_scale
    kb = ctx.kernel("deepseek_v3", kv="bf16", q="absorbed")
    _expect(TypeError, lambda: kb(**x))
    xb = make_inputs(torch, "deepseek_v3", "absorbed", "bf16", T, H, device, seed=23)
    kb(**dict(xb, q_scale=x["q_scale"]))
    # k as [T, 1, D] (one KV head, as SGLang, aiter and tokenspeed pass it): the same launch as [T, D]
    runs = []
    for unit in (False, True):
        r = dict(xb, kv_cache=xb["kv_cache"].clone(), q_out=xb["q_out"].clone())
        if unit:
            r.update(k_nope=xb["k_nope"].unsqueeze(1), k_pe=xb["k_pe"].unsqueeze(1))
        kb(**r)
        runs.append(r)
    assert torch.equal(runs[0]["kv_cache"], runs[1]["kv_cache"]) and torch.equal(runs[0]["q_out"], runs[1]["q_out"])
    # zero_copy: q_out[..., :L] may be passed as q_nope (it is not read); inplace takes the bf16 q_pe
    kz = ctx.kernel("deepseek_v3", kv="bf16", q="zero_copy", q_dtype="fp8_e4m3")
    xz = make_inputs(torch, "deepseek_v3", "zero_copy", "bf16", T, H, device, seed=23, q_dtype="fp8_e4m3",
                     q_scale=1.0)
    kz(**dict(xz, q_nope=xz["q_out"][..., :512]))
    ki = ctx.kernel("kimi_k2", kv="bf16", q="inplace", positions="int32", q_dtype="fp8_e4m3")
    xi = make_inputs(torch, "kimi_k2", "inplace", "bf16", T, H, device, seed=23, q_dtype="fp8_e4m3", q_scale=1.0)
    _expect(TypeError, lambda: ki(**dict(xi, q_pe=xi["q_pe"].float())))
    ki(**dict(xi, q_scale=1.0))  # no scaling, said explicitly
    # bound launches carry q_scale too
    launch = k.bind(**x)
    launch()
    # the library's own check of a NULL q_scale (raw arguments bypass the Python ones)
    args, keep = k.args(**x)
    args.q_scale = None
    e = _expect(ropekv.RopekvError, lambda: k.launch_raw(args), {"ROPEKV_ERR_NULL"})
    del keep


def test_host_fp8_q_errors():
    torch = _torch()
    _check_fp8_q_errors(torch, context("host"), "cpu")


# ---- CUDA ---------------------------------------------------------------------------------------------------
@parametrize("spec,q,kv,q_scale", [("deepseek_v3", q, kv, qs) for q in ("absorbed", "zero_copy")
                                   for kv in ("bf16", "fp8_e4m3") for qs in Q_SCALES]
             + [("kimi_k2", q, kv, qs) for q in ("absorbed", "inplace") for kv in ("bf16", "fp8_e4m3")
                for qs in (0.37, 1.0 / 448)]
             + [("minicpm3_4b", q, "fp8_e4m3", 0.37) for q in ("absorbed", "zero_copy", "inplace")])
def test_cuda_fp8_q(spec, q, kv, q_scale):
    torch = _cuda_torch()
    run_and_check(torch, context("cuda"), spec, q, kv, T=67, H=16, device="cuda", specials=spec == "kimi_k2",
                  seed=29, q_dtype="fp8_e4m3", q_scale=q_scale, q_specials=True)


@parametrize("spec,q,kv,T,K,min_slot", FP8Q_PADDING_CASES + [("deepseek_v3", "absorbed", "fp8_e4m3", 1000, 700, 1)])
def test_cuda_fp8_q_padding(spec, q, kv, T, K, min_slot):
    torch = _cuda_torch()
    run_and_check(torch, context("cuda"), spec, q, kv, T=T, H=16, device="cuda", specials=True, kv_tokens=K,
                  min_slot=min_slot, q_dtype="fp8_e4m3", q_scale=None if T == 0 else 0.37)


def test_cuda_fp8_q_large():
    """Many tokens and heads with an fp8 query and cache (the vector path, the 2-D grid)."""
    torch = _cuda_torch()
    run_and_check(torch, context("cuda"), "deepseek_v3", "absorbed", "fp8_e4m3", T=4099, H=128, device="cuda",
                  seed=31, q_dtype="fp8_e4m3", q_scale=0.37,
                  q_out_dtype=getattr(torch, "float8_e4m3fn", None))


def test_cuda_fp8_q_errors():
    torch = _cuda_torch()
    _check_fp8_q_errors(torch, context("cuda"), "cuda")


if __name__ == "__main__":
    sys.exit(main(globals()))
