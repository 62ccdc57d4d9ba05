"""Runs every test of the Python binding (python/ropekv): the test_binding_*.py files of this directory, one topic each.

    python3 python/tests/test_binding.py               # all of them (the python_binding ctest); no pytest needed
    python3 python/tests/test_binding_layouts.py       # one topic
    python3 -m pytest -s python/tests/test_binding_*.py

    test_binding_context.py   no torch, no GPU: import, the structs against the header, kernel info, contexts
    test_binding_raw.py       raw-pointer launches against an exact scalar model; the e4m3 encoders
    test_binding_write.py     the write op through torch tensors (host backend, CUDA), padding, graphs, PDL, errors
    test_binding_fp8_q.py     the fp8 query output
    test_binding_layouts.py   paged, split and flat caches with padding; the layout and op enums
    test_binding_fp8_tile.py  DeepSeek-V3.2's fp8_tile rows
    test_binding_read.py      the read-back op and write-then-read round trips
    test_binding_norm.py      the fused kv_a RMSNorm
    test_binding_inputs.py    bad inputs refused before ctypes or the dispatcher: NUL bytes, ints past a field, devices

Helpers: _support.py (the pytest shim, contexts, bit comparisons, this runner), _reference.py (inputs as engines lay
them out, the op in PyTorch), _cases.py (the case runners test_ops.py shares).

Without torch only the tests that need none run (host backend, ctypes buffers); without a CUDA device the torch
tests on the host backend run and the CUDA ones skip. On a GPU machine the CUDA tests compare ropekv with a PyTorch
implementation of the op written here that does ropekv's arithmetic exactly (x1*s rounded to float32, then
x0*c - x1*s rounded once, as fmaf does; see _reference.reference()), so every bf16 and fp8 element must be
bit-identical (NaN == NaN whatever the payload)."""
import glob
import importlib
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import _support  # noqa: E402


def main():
    """Runs the test_* functions of every test_binding_*.py (in name order), with one set of contexts and one total."""
    names = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(HERE, "test_binding_*.py")))
    return _support.run([vars(importlib.import_module(n)) for n in names])


if __name__ == "__main__":
    sys.exit(main())
