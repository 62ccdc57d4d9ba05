"""Which device a launch of ropekv.ops (and of the engine shims over it) goes to: the context of its tensors' device,
the current stream of that device, whichever device is current.

    python3 python/tests/test_devices.py        # plain runner (no pytest needed)

The rules, tested on the CPU with test doubles (a recording context, kernel and tensors standing in for cuda ones, a
recording stream lookup), since the choice itself needs no GPU: a tensor on cuda:1 takes cuda:1's context and kernels
(index 1 of ropekv.ops' tables), never cuda:0's; a device without an index (torch.device("cuda")) means
torch.cuda.current_device(); the launch's stream is the current stream of the context's device; a CUDA-graph check
asks about the scale's device's stream; tensors on two devices are a ValueError naming them (CPU and meta tensors,
real launches). The tests named test_two_gpus_* run on a machine with two CUDA devices (they skip with fewer): cuda:1
tensors launched while cuda:0 is current go to device 1's context and stream, and give the same bits as cuda:0 and
the reference."""
import contextlib
import os
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import _cases as cs  # noqa: E402
import _support as sp  # noqa: E402
from _reference import make_inputs  # noqa: E402
from _support import skip  # noqa: E402


# ---- test doubles -------------------------------------------------------------------------------------------------
class ContextDouble:
    """A test double for ropekv.Context: records how it was made and the kernels asked of it; makes no library call."""
    made = []  # every ContextDouble made, in order

    def __init__(self, backend="auto", device=0, **_):
        self.backend, self.device, self.closed = ("host" if backend == "host" else "cuda"), device, False
        self.kernels = []
        ContextDouble.made.append(self)

    def kernel(self, spec, **variant):
        k = KernelDouble(self, spec, variant)
        self.kernels.append(k)
        return k


class KernelDouble:
    """A test double for ropekv.Kernel: records its launches (the tensors by name) instead of launching."""

    def __init__(self, ctx, spec, variant):
        self.ctx, self.spec, self.variant, self.launches = ctx, spec, variant, []
        self._h = object()
        self.info = ("info", ctx.device, spec)

    def launch_tensors(self, vals, min_slot=0, stream=None):
        from ropekv import _capi
        self.launches.append(dict(zip(_capi.ARGS_POINTERS, vals)))


class CudaTensorDouble:
    """A test double for a torch tensor on cuda:<index> (a machine without a GPU has none): what ropekv.ops reads to
    choose a kernel (get_device, device, dtype)."""

    def __init__(self, torch, index, dtype=None):
        self.device = torch.device("cuda", index)
        self.dtype = dtype if dtype is not None else torch.int64
        self._index = index

    def get_device(self):
        return self._index


@contextlib.contextmanager
def doubles(current_device=0):
    """ropekv.ops with ContextDouble in place of ropekv.Context and torch.cuda.current_device() answering
    current_device; its context and kernel tables empty inside, restored after."""
    torch = sp._torch()
    import ropekv.ops as ops
    saved = (dict(ops._CONTEXTS), dict(ops._KERNELS), ops._core.Context, torch.cuda.current_device)
    ops._CONTEXTS.clear()
    ops._KERNELS.clear()
    ops._core.Context = ContextDouble
    torch.cuda.current_device = lambda: current_device
    del ContextDouble.made[:]
    try:
        yield torch, ops
    finally:
        ops._CONTEXTS.clear()
        ops._CONTEXTS.update(saved[0])
        ops._KERNELS.clear()
        ops._KERNELS.update(saved[1])
        ops._core.Context, torch.cuda.current_device = saved[2], saved[3]


def _write_args(torch, index):
    """ropekv.ops._launch's arguments of a write whose tensors are CudaTensorDoubles on cuda:<index>."""
    t = {n: CudaTensorDouble(torch, index) for n in ("q_nope", "q_pe", "q_out", "k_nope", "k_pe", "kv_cache",
                                                     "positions", "slots", "cos_sin")}
    return dict(t, spec="deepseek_v3", kv="bf16", q_form="absorbed", q_dtype="bf16", layout="flat")


# ---- the device rules, with doubles ------------------------------------------------------------------------------
def test_device_without_index_is_the_current_device():
    with doubles(current_device=1) as (torch, ops):
        assert ops._device_key(torch.device("cuda")) == ("cuda", 1)
        assert ops._device_key(torch.device("cuda", 0)) == ("cuda", 0)
        assert ops._device_key(torch.device("cpu")) == ("cpu", 0)
        one = ops.context("cuda")
        assert (one.backend, one.device) == ("cuda", 1), (one.backend, one.device)
        assert ops.context("cuda:1") is one and ops.context(torch.device("cuda", 1)) is one
        zero = ops.context("cuda:0")
        assert zero is not one and zero.device == 0
        assert ops.context("cpu").backend == "host"
        assert len(ContextDouble.made) == 3, ContextDouble.made  # one per device, made once


def test_launch_takes_the_context_of_the_tensors_device():
    """A write and a read of tensors on cuda:1 launch a kernel of cuda:1's context, with cuda:0 current; then cuda:0's
    tensors one of cuda:0's; each device's kernels are its own (index 0 and 1 of the kernel table)."""
    with doubles(current_device=0) as (torch, ops):
        ops._launch("write", _write_args(torch, 1))
        ops._launch("read", dict(spec="deepseek_v3", kv="bf16", layout="flat", kv_cache=CudaTensorDouble(torch, 1),
                                 slots=CudaTensorDouble(torch, 1), out=CudaTensorDouble(torch, 1)))
        ops._launch("write", _write_args(torch, 0))
        by_device = {c.device: c for c in ContextDouble.made}
        assert sorted(by_device) == [0, 1], by_device
        one, zero = by_device[1], by_device[0]
        assert [(k.variant["op"], len(k.launches)) for k in one.kernels] == [("write", 1), ("read", 1)]
        assert [(k.variant["op"], len(k.launches)) for k in zero.kernels] == [("write", 1)]
        assert all(t.get_device() == 1 for k in one.kernels for t in k.launches[0].values() if t is not None)
        assert {key[0] for key in ops._KERNELS} == {0, 1}, list(ops._KERNELS)
        # a second launch on cuda:1 finds its kernel, not cuda:0's
        ops._launch("write", _write_args(torch, 1))
        assert len(one.kernels[0].launches) == 2 and len(zero.kernels[0].launches) == 1


def test_engine_shims_take_the_tensors_device():
    """ropekv.compat's kernel_info (the shims' spec facts) asks the kernel of the given tensor's device."""
    with doubles(current_device=0) as (torch, ops):
        from ropekv.compat import _common as c
        info = c.kernel_info(CudaTensorDouble(torch, 1), "deepseek_v3", "bf16", "inplace",
                             CudaTensorDouble(torch, 1), CudaTensorDouble(torch, 1))
        assert info == ("info", 1, "deepseek_v3"), info
        assert [c.device for c in ContextDouble.made] == [1]


def test_use_context_replaces_one_device_only():
    with doubles(current_device=0) as (torch, ops):
        ops._launch("write", _write_args(torch, 0))
        ops._launch("write", _write_args(torch, 1))
        mine = ContextDouble("cuda", device=1)
        ops.use_context(mine)
        assert ops._CONTEXTS[("cuda", 1)] is mine and ops._CONTEXTS[("cuda", 0)].device == 0
        assert {key[0] for key in ops._KERNELS} == {0}  # cuda:1's kernels dropped, cuda:0's kept
        ops._launch("write", _write_args(torch, 1))
        assert len(mine.kernels) == 1 and len(mine.kernels[0].launches) == 1


def test_stream_is_the_devices_current_stream():
    """A launch on cuda:1's context goes to torch's current stream of device 1 (asked by index, whatever device is
    current); a stream given is taken as it is; the host backend has none."""
    torch = sp._torch()
    from ropekv import _torch as rt
    asked = []

    def current_raw_stream_double(index):  # a test double for torch._C._cuda_getCurrentRawStream
        asked.append(index)
        return 0x1000 + index

    saved = list(rt._RAW_STREAM)
    rt._RAW_STREAM[:] = [current_raw_stream_double]
    try:
        assert rt.stream_for(ContextDouble("cuda", device=1), None) == 0x1001
        assert rt.stream_for(ContextDouble("cuda", device=0), None) == 0x1000
        assert rt.stream_for(ContextDouble("cuda", device=1), 0x77) == 0x77
        assert rt.stream_for(ContextDouble("host"), None) is None
    finally:
        rt._RAW_STREAM[:] = saved
    assert asked == [1, 0], asked
    del torch


def test_device_check_follows_the_index():
    """The launch checks accept a tensor on the context's device only: cuda:1's context refuses cuda:0's tensors, and
    a cuda tensor without an index is on the current device."""
    torch = sp._torch()
    from ropekv import _torch as rt
    one = ContextDouble("cuda", device=1)
    assert rt._device_ok(one, CudaTensorDouble(torch, 1))
    assert not rt._device_ok(one, CudaTensorDouble(torch, 0))
    assert not rt._device_ok(one, torch.zeros(1))
    no_index = types.SimpleNamespace(device=torch.device("cuda"))
    with doubles(current_device=1):
        assert rt._device_ok(one, no_index)
    with doubles(current_device=0):
        assert not rt._device_ok(one, no_index)
    assert rt._device_ok(ContextDouble("host"), torch.zeros(1))
    assert not rt._device_ok(ContextDouble("host"), CudaTensorDouble(torch, 0))


def test_graph_capture_check_asks_the_scales_device():
    """A scale given as a number is made into a tensor on its device, except during CUDA-graph capture there: the
    capture is asked of that device's current stream (with the device made current), not of the current device's."""
    torch = sp._torch()
    from ropekv import _torch as rt
    current = [0]

    @contextlib.contextmanager
    def device_double(d):  # a test double for torch.cuda.device
        before, current[0] = current[0], torch.device(d).index
        try:
            yield
        finally:
            current[0] = before

    cuda_double = types.SimpleNamespace(device=device_double, is_current_stream_capturing=lambda: current[0] == 1)
    torch_double = types.SimpleNamespace(cuda=cuda_double)  # a test double for torch: device 1 is capturing
    assert rt._capturing(torch_double, torch.device("cuda", 1))
    assert not rt._capturing(torch_double, torch.device("cuda", 0))
    assert current[0] == 0


# ---- tensors on two devices, real launches (host backend) ---------------------------------------------------------
def _inputs(torch):
    x = make_inputs(torch, "deepseek_v3", "absorbed", "bf16", 4, 2, "cpu", seed=5)
    return x


def test_mixed_devices_are_refused_by_name():
    """CPU tensors with a meta one, through ropekv.ops.write: the launch (the CPU cache's) and the dispatcher's path
    (a meta cache) each refuse it with a ValueError naming the tensor, and nothing is written."""
    torch = sp._torch()
    import ropekv.ops as ops
    ops.use_context(sp.context("host"))
    x = _inputs(torch)
    before = {n: t.clone() for n, t in x.items()}
    bad = dict(x, q_out=torch.empty(x["q_out"].shape, dtype=torch.bfloat16, device="meta"))
    try:
        ops.write("deepseek_v3", **bad)
    except ValueError as e:
        assert "q_out is on meta" in str(e), e
    else:
        raise AssertionError("q_out on meta with a CPU cache was not refused")
    bad = dict(x, kv_cache=torch.empty(x["kv_cache"].shape, dtype=x["kv_cache"].dtype, device="meta"))
    try:
        ops.write("deepseek_v3", **bad)
    except ValueError as e:
        assert "one device" in str(e) and "kv_cache on meta" in str(e), e
    else:
        raise AssertionError("a meta cache with CPU tensors was not refused")
    for n, t in x.items():
        assert torch.equal(t, before[n]), n
    ops.write("deepseek_v3", **x)  # the same tensors on one device launch
    assert not torch.equal(x["kv_cache"], before["kv_cache"])


# ---- two GPUs ------------------------------------------------------------------------------------------------------
CASES = [("deepseek_v3", "absorbed", "fp8_e4m3"), ("kimi_k2", "inplace", "bf16"), ("deepseek_v3", "none", "bf16")]


def _two_gpus():
    torch = sp._cuda_torch()
    if torch.cuda.device_count() < 2:
        skip("needs two CUDA devices, found %d" % torch.cuda.device_count())
    import ropekv
    import ropekv.ops as ops
    for d in (0, 1):
        ops.use_context(ropekv.Context("cuda", device=d, cache_dir=sp._CACHE_DIR))
    return torch, ops


def test_two_gpus_cuda1_launches_on_device1():
    """cuda:1 tensors launched with cuda:0 current (and cuda:0 tensors with cuda:1 current): each on its own device's
    context, every output bit for bit the reference's and the other device's; the current device unchanged."""
    torch, ops = _two_gpus()
    for spec, q, kv in CASES:
        got = {}
        for dev, current in (("cuda:1", 0), ("cuda:0", 1)):
            torch.cuda.set_device(current)
            _, x = cs.run_and_check(torch, ops.context(dev), spec, q, kv, T=300, H=16, device=dev, specials=True,
                                    via="op")
            torch.cuda.synchronize(dev)
            assert torch.cuda.current_device() == current
            index = torch.device(dev).index
            assert ops._CONTEXTS[("cuda", index)].device == index
            assert all(t.device == torch.device(dev) for t in x.values() if isinstance(t, torch.Tensor))
            got[dev] = {n: t.cpu() for n, t in x.items() if n in ("q_out", "q_pe", "kv_cache")}
        for n in got["cuda:0"]:
            assert sp._same_bits(torch, got["cuda:0"][n], got["cuda:1"][n]), "%s %s %s: %s differs" % (spec, q, kv, n)
    torch.cuda.set_device(0)


def test_two_gpus_read_on_device1():
    torch, ops = _two_gpus()
    torch.cuda.set_device(0)
    cs.run_read_case(torch, ops.context("cuda:1"), "deepseek_v32", "fp8_tile", "paged", 64, device="cuda:1",
                     via="op")
    assert torch.cuda.current_device() == 0


def test_two_gpus_stream_of_device1():
    """With cuda:0 current and a side stream current on device 1, a cuda:1 launch goes to that side stream (the handle
    handed to the library is its), ordered after the work queued on it before."""
    torch, ops = _two_gpus()
    from ropekv import _torch as rt
    x = make_inputs(torch, "deepseek_v3", "absorbed", "bf16", 64, 16, "cpu", seed=9)
    want = {n: t.clone() for n, t in x.items()}
    ops.use_context(sp.context("host"))
    ops.write("deepseek_v3", **want)  # the host backend's bits
    torch.cuda.set_device(1)
    side = torch.cuda.Stream(device=1)
    torch.cuda.set_stream(side)  # device 1's current stream (and device 1 current)
    torch.cuda.set_device(0)
    handed = []
    real = rt.stream_for

    def stream_for_spy(ctx, stream):  # a test double recording the real stream_for's answers
        h = real(ctx, stream)
        handed.append((ctx.device, h))
        return h

    rt.stream_for = stream_for_spy
    try:
        with torch.cuda.stream(side):
            y = {n: t.to("cuda:1") for n, t in x.items()}
            torch.cuda._sleep(200000000)  # work ahead of the launch on the side stream
        ops.write("deepseek_v3", **y)
        side.synchronize()
    finally:
        rt.stream_for = real
        torch.cuda.set_device(1)
        torch.cuda.set_stream(torch.cuda.default_stream(1))
        torch.cuda.set_device(0)
    assert handed == [(1, side.cuda_stream)], (handed, side.cuda_stream)
    for n in ("q_out", "kv_cache"):
        assert sp._same_bits(torch, y[n].cpu(), want[n]), n


def test_two_gpus_mixed_devices_are_refused():
    torch, ops = _two_gpus()
    x = make_inputs(torch, "deepseek_v3", "absorbed", "bf16", 8, 2, "cuda:1", seed=3)
    bad = dict(x, q_out=x["q_out"].to("cuda:0"))
    try:
        ops.write("deepseek_v3", **bad)
    except ValueError as e:
        assert "q_out is on cuda:0" in str(e) and "cuda:1" in str(e), e
    else:
        raise AssertionError("q_out on cuda:0 with a cuda:1 cache was not refused")


if __name__ == "__main__":
    sys.exit(sp.main(globals()))
