"""Every kernel the installed ropekv's bundles hold for a context's target, got from them with zero compiles.

    python3 tests/package/bundle_kernels.py [BACKEND]     # host (default), cuda or hip

For each bundle of ropekv.bundle_dirs(), each `kernel KEY NAME TARGET` line of its manifest whose target is the
context's: the variant the key names, through Context.kernel, must be the kernel NAME (so a key read wrong fails
here), and both its entries (32- and 64-bit) must come from the bundles: Context.stats() counts two disk hits a
kernel and no compile. Run it where no compiler is (CXX and PATH pointing nowhere for the host backend,
ROPEKV_NVRTC=/nonexistent for cuda) to see a node start. tests/package/wheel_bundle.sh runs it on the host."""
import os
import sys

import ropekv

ctx = ropekv.Context(sys.argv[1] if len(sys.argv) > 1 else "host")
ARGS = {"pos": "positions", "slot": "slots", "q_dtype": "q_dtype", "layout": "layout", "norm": "norm"}
n = 0
for d in ropekv.bundle_dirs():
    with open(os.path.join(d, ropekv._capi.BUNDLE_MANIFEST)) as f:
        lines = f.read().splitlines()[2:]
    for line in lines:
        _, key, name, target = line.split(" ")
        if target != ctx.target:
            continue
        # spec/row/kv-or-record/q form (or read)/name=value...
        spec, _, row, q, *rest = key.split("/")
        kw = {ARGS[k]: v for k, v in (p.split("=", 1) for p in rest)}
        kw.update(op="read") if q == "read" else kw.update(q=q)
        k = ctx.kernel(spec, record=row, **kw)
        if k.info.name != name:
            raise SystemExit("FAIL: %s gave %s, the bundle's kernel is %s" % (key, k.info.name, name))
        k.prepare()
        n += 1
st = ctx.stats()
print("%s (%s): %d kernels of %d bundle(s): %s" % (ctx.backend, ctx.target, n, len(ropekv.bundle_dirs()), st))
if n == 0 or st["compiles"] != 0 or st["disk_hits"] != 2 * n:
    raise SystemExit("FAIL: want every kernel's two entries from the bundles and no compile")
