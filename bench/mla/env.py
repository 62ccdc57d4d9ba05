"""The run's environment: the source tree, the log, the GPU platform torch drives, and torch and ropekv.reference, which
main() imports (so that --help and py_compile work without torch) and bind() hands to the modules that use them."""
import os
import sys
import time
import traceback

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))

T0 = time.time()
# The GPU torch.cuda drives: NVIDIA (CUDA PyTorch) or AMD (ROCm PyTorch, where torch.cuda is HIP, torch.version.hip
# is set, and torch.cuda.CUDAGraph / Event are hipGraph / hipEvent behind the same calls). Set by main().
GPU = {"backend": "cuda", "runtime": "-"}
PDL_ONLY = ("programmatic dependent launch (Triton's gdc_wait / gdc_launch_dependents, launch_pdl) is NVIDIA sm_90+ "
            "only: n/a under ROCm")


def bind(torch_module, rkref_module):
    """Sets the `torch` and `rkref` (ropekv.reference: ropekv's arithmetic in PyTorch) globals of every module of this
    package that has them (each starts as None): main() calls it once it has imported torch."""
    package = __name__.rsplit(".", 1)[0] + "."
    for name, module in list(sys.modules.items()):
        if name.startswith(package):
            for attr, value in (("torch", torch_module), ("rkref", rkref_module)):
                if hasattr(module, attr):
                    setattr(module, attr, value)


def log(msg):
    print("[%7.1fs] %s" % (time.time() - T0, msg), flush=True)


def error_text(e):
    """The first line of the exception e's message, 200 characters at most; its traceback printed with
    $BENCH_TRACEBACK (call it in the except block)."""
    if os.environ.get("BENCH_TRACEBACK"):
        traceback.print_exc()
    return str(e).split("\n")[0][:200]


def failed(what, e):
    """error_text(e), logged as "  what: the text"."""
    msg = error_text(e)
    log("  %s: %s" % (what, msg))
    return msg


def gpu_platform(torch):
    """(ropekv backend, runtime label) of the GPU torch.cuda drives: ("hip", "HIP 6.4.x") under ROCm PyTorch,
    ("cuda", "CUDA 12.8") under CUDA PyTorch."""
    hip = getattr(torch.version, "hip", None)
    return ("hip", "HIP %s" % hip) if hip else ("cuda", "CUDA %s" % torch.version.cuda)


def rk_backend(cpu):
    """The ropekv backend of this run: the host backend with --cpu, else the GPU's."""
    return "host" if cpu else GPU["backend"]


def require_pdl():
    """A PDL method's first step: raises (the method is reported n/a with the reason) where there is no PDL."""
    if GPU["backend"] != "cuda":
        raise RuntimeError(PDL_ONLY)
