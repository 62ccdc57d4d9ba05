"""The fused kv_a RMSNorm (norm="rms" / "rms_out"): the fused op against the unfused composition bit for bit, norm_out
against ropekv.reference.rms_norm and a float64 RMSNorm (run_norm_case), on the host backend and a CUDA GPU; the norm
as KernelInfo reports it; the norm tensors' argument errors.

    python3 python/tests/test_binding_norm.py    # this file; python3 python/tests/test_binding.py runs them all"""
import sys

from _cases import norm_inputs, run_norm_case
from _support import _cuda_spec, _cuda_torch, _expect, _torch, context, main, parametrize

import ropekv  # noqa: E402  (after _support, which puts python/ on sys.path)


NORM_CASES = [("deepseek_v3", "absorbed", "bf16", 11, None, 0), ("deepseek_v3", "absorbed", "fp8_e4m3", 11, None, 0),
              ("deepseek_v3", "zero_copy", "bf16", 9, None, 0), ("deepseek_v3", "none", "fp8_e4m3", 0, 9, 1),
              ("kimi_k2", "inplace", "fp8_e4m3", 11, None, 0), ("kimi_k2", "absorbed", "bf16", 6, 11, 1),
              ("deepseek_v3", "absorbed", "bf16", 11, 5, 1), ("deepseek_v32", "absorbed", "fp8_tile", 11, None, 0)]


@parametrize("spec,q,kv,T,K,min_slot", NORM_CASES)
def test_host_torch_norm(spec, q, kv, T, K, min_slot):
    torch = _torch()
    run_norm_case(torch, context("host"), spec, q, kv, T, 3, "cpu", seed=41, kv_tokens=K, min_slot=min_slot,
                  specials=spec == "kimi_k2")


def test_host_norm_kernel_info():
    """The norm of a kernel comes from the library (KernelInfo), is part of its key, and a spec without a kv_norm
    table refuses it."""
    c = context("host")
    none, rms = c.kernel("deepseek_v3"), c.kernel("deepseek_v3", norm="rms")
    assert (none.info.norm, none.info.norm_weight, none.info.norm_eps, none.info.norm_rounding) == ("none", None, 0.0,
                                                                                                    None)
    assert (rms.info.norm, rms.info.norm_weight, rms.info.norm_rounding) == ("rms", "bf16", "twice")
    assert rms.info.key == none.info.key + "/norm=rms" and rms.name != none.name and rms.norm == "rms"
    assert "RMSNorm" in (rms.info.norm_matches or ""), rms.info.norm_matches
    assert c.kernel("deepseek_v3", norm=2).info.norm == "rms_out" and ropekv.NORMS == {"none": 0, "rms": 1,
                                                                                        "rms_out": 2}
    ok, why = c.query("deepseek_v3", norm="rms_out")
    assert ok, why
    ok, why = c.query("minicpm3_4b", norm="rms")
    assert not ok and "ROPEKV_ERR_UNSUPPORTED" in why, why
    _expect(ValueError, lambda: c.kernel("deepseek_v3", norm="layer"))


def _check_norm_errors(torch, ctx, device):
    """The norm's tensors are checked by name before the library sees them; the library's own checks (alignment,
    a norm tensor passed raw to a kernel without the norm) still apply."""
    x, w = norm_inputs(torch, "deepseek_v3", "absorbed", "bf16", 8, 2, device, seed=43)
    none = ctx.kernel("deepseek_v3")
    rms = ctx.kernel("deepseek_v3", norm="rms")
    out = ctx.kernel("deepseek_v3", norm="rms_out")
    no = torch.zeros(8, 512, dtype=torch.bfloat16, device=device)
    e = _expect(ValueError, lambda: rms(**x))
    assert "norm_weight is required" in str(e), e
    e = _expect(TypeError, lambda: rms(**x, norm_weight=w.float()))
    assert "norm_weight must be bfloat16" in str(e), e
    e = _expect(ValueError, lambda: rms(**x, norm_weight=w[:511]))
    assert "norm_weight must have shape [512]" in str(e), e
    _expect(ValueError, lambda: rms(**x, norm_weight=w.view(1, 512)))
    strided = torch.zeros(1024, dtype=torch.bfloat16, device=device)[::2]
    e = _expect(ValueError, lambda: rms(**x, norm_weight=strided))
    assert "norm_weight must be contiguous" in str(e), e
    _expect(TypeError, lambda: rms(**x, norm_weight=[1.0] * 512))
    e = _expect(ValueError, lambda: rms(**x, norm_weight=w, norm_out=no))
    assert "norm_out is written by norm='rms_out' kernels only" in str(e), e
    e = _expect(ValueError, lambda: none(**x, norm_weight=w))
    assert "norm_weight is for a kernel with the fused kv_a RMSNorm" in str(e), e
    _expect(ValueError, lambda: none(**x, norm_out=no))
    e = _expect(ValueError, lambda: out(**x, norm_weight=w))
    assert "norm_out is required" in str(e), e
    e = _expect(TypeError, lambda: out(**x, norm_weight=w, norm_out=no.float()))
    assert "norm_out must be bfloat16" in str(e), e
    e = _expect(ValueError, lambda: out(**x, norm_weight=w, norm_out=no[:7]))
    assert "norm_out must have shape [n, 512] with n >= 8" in str(e), e
    _expect(ValueError, lambda: out(**x, norm_weight=w, norm_out=no.t().contiguous().t()))
    base = torch.zeros(8 * 520 + 8, dtype=torch.bfloat16, device=device)
    _expect(ropekv.RopekvError, lambda: out(**x, norm_weight=w, norm_out=base[4:4 + 8 * 520].view(8, 520)[:, :512]),
            {"ROPEKV_ERR_ALIGN"})  # a row stride of 520 is fine, 8 bytes past a 16-byte boundary is not
    out(**x, norm_weight=w, norm_out=base[:8 * 520].view(8, 520)[:, :512])
    # norm_out over k_nope races with its reads: refused by the library (ROPEKV_ERR_ALIAS); beside it in one buffer
    # (the halves of [8, 1024] rows), accepted
    e = _expect(ropekv.RopekvError, lambda: out(**x, norm_weight=w, norm_out=x["k_nope"]), {"ROPEKV_ERR_ALIAS"})
    assert "norm_out" in e.message and "k_nope" in e.message, e
    halves = torch.zeros(8, 1024, dtype=torch.bfloat16, device=device)
    halves[:, :512] = x["k_nope"][:8]
    out(**dict(x, k_nope=halves[:, :512]), norm_weight=w, norm_out=halves[:, 512:])
    e = _expect(ValueError, lambda: ctx.kernel("deepseek_v3", op="read")(kv_cache=x["kv_cache"], slots=x["slots"],
                                                                      norm_weight=w))
    assert "norm_weight" in str(e), e
    if device == "cpu" and torch.cuda.is_available():
        _expect(ValueError, lambda: rms(**x, norm_weight=w.cuda()))
    elif device != "cpu":
        _expect(ValueError, lambda: rms(**x, norm_weight=w.cpu()))
    # the library refuses the norm's pointers for a kernel without the norm (ROPEKV_ERR_ARG), and checks that a
    # norm kernel gets its weight (ROPEKV_ERR_NULL): what Context.query with raw arguments reports
    raw, keep = none.args(**x)
    fields = {name: getattr(raw, name) for name, _ in ropekv.ropekv_args._fields_}
    fields["norm_weight"] = w.data_ptr()
    e = _expect(ropekv.RopekvError, lambda: none.launch_raw(fields), {"ROPEKV_ERR_ARG"})
    assert "norm" in e.message, e
    ok, why = ctx.query("deepseek_v3", raw=dict(fields, norm_weight=0), norm="rms")
    assert not ok and "ROPEKV_ERR_NULL" in why, why
    ok, why = ctx.query("deepseek_v3", raw=fields, norm="rms")
    assert ok, why
    del keep


def test_host_norm_errors():
    torch = _torch()
    _check_norm_errors(torch, context("host"), "cpu")


# ---- CUDA ---------------------------------------------------------------------------------------------------
@parametrize("spec,q,kv,T,K,min_slot", [(s, q, kv, 1000 if T else 0, K and 700, m) for s, q, kv, T, K, m in NORM_CASES])
def test_cuda_norm(spec, q, kv, T, K, min_slot):
    torch = _cuda_torch()
    ctx = context("cuda")
    _cuda_spec(ctx, spec, kv=kv, q=q, norm="rms")
    run_norm_case(torch, ctx, spec, q, kv, T, 16, "cuda", seed=47, kv_tokens=K, min_slot=min_slot,
                  specials=spec == "kimi_k2")


def test_cuda_norm_errors():
    torch = _cuda_torch()
    _check_norm_errors(torch, context("cuda"), "cuda")


if __name__ == "__main__":
    sys.exit(main(globals()))
