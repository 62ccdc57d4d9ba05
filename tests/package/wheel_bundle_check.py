"""The kernels of an installed wheel's bundles, run where no compiler is (tests/package/wheel_bundle.sh runs it from
/ with only the wheel on PYTHONPATH, no ROPEKV_LIB, CXX and PATH pointing nowhere and no writable cache):

  - ropekv loads the wheel's library and finds the wheel's bundles (ropekv.bundle_dirs(): the two of the script);
  - each bundled variant, deepseek_v3's fp8 paged write in the q forms zero_copy (decode) and none (prefill), with
    norm none, rms and rms_out, runs with zero compiles (Context.stats(): every entry a disk hit, both entries of
    each) and writes the cache, q_out and norm_out bit for bit as ropekv.reference computes them;
  - the layers' order: the caller's cache_ro, else $ROPEKV_CACHE_RO, then the bundles;
  - a variant not in the bundles, and the bundled ones with the bundles turned off (bundles=False,
    $ROPEKV_NO_BUNDLE=1), fail with ROPEKV_ERR_COMPILE naming the missing compiler.
usage: wheel_bundle_check.py SITE (where the wheel is installed)"""
import os
import sys
import tempfile

import torch

import ropekv
import ropekv.reference as ref

site = os.path.realpath(sys.argv[1])
L, R, T, H, ROWS, BLOCK = 512, 64, 5, 4, 16, 4
CXX = "/nonexistent/c++"  # the script's CXX: any compile names it
BUNDLED = [(q, norm) for q in ("zero_copy", "none") for norm in ("none", "rms", "rms_out")]


def check(cond, what):
    if not cond:
        raise SystemExit("FAIL: " + what)


check(os.path.realpath(ropekv.library_path()) == os.path.join(site, "ropekv", "libropekv.so"),
      "the wheel's library is loaded, not %s" % ropekv.library_path())
dirs = ropekv.bundle_dirs()
check([os.path.relpath(os.path.realpath(d), site) for d in dirs] == ["ropekv/bundles/decode", "ropekv/bundles/prefill"],
      "the wheel's bundles are found: %s" % dirs)


def inputs(g):
    rnd = lambda *s: torch.randn(*s, generator=g).to(torch.bfloat16)  # noqa: E731
    max_pos = 64
    inv = 1.0 / (10000.0 ** (torch.arange(0, R, 2, dtype=torch.float64) / R))
    f = torch.arange(max_pos, dtype=torch.float64)[:, None] * inv[None, :]
    return dict(q_pe=rnd(T, H, R), q_out=rnd(T, H, L + R), k_nope=rnd(T, L) * 3, k_pe=rnd(T, R),
                kv_cache=torch.randint(0, 256, (ROWS // BLOCK, BLOCK, L + R), generator=g, dtype=torch.uint8),
                positions=torch.randint(0, max_pos, (T,), generator=g),
                slots=torch.randperm(ROWS, generator=g)[:T], cos_sin=torch.cat([f.cos(), f.sin()], -1).float(),
                k_scale=torch.tensor([0.37]), norm_weight=rnd(L) * 0.1 + 1)


def expected(k, a):
    """The cache, q_out and norm_out of a launch on a, from ropekv.reference (the spec's conventions from k.info)."""
    info = k.info
    c_kv = a["k_nope"]
    if info.norm != "none":
        c_kv = ref.rms_norm(c_kv, a["norm_weight"], info.norm_eps, info.norm_rounding)
    cs = a["cos_sin"][a["positions"]]
    c, s = cs[:, :R // 2], cs[:, R // 2:]
    q_out = a["q_out"].clone()
    if info.q != "none":
        q_out[..., L:] = ref.rope(a["q_pe"], c[:, None], s[:, None], info.rope).to(torch.bfloat16)
    row = torch.cat([c_kv.float(), ref.rope(a["k_pe"], c, s, info.rope)], dim=-1)
    v = ref.scale(row, info.scale, a["k_scale"]).clamp(-info.sat, info.sat)
    cache = a["kv_cache"].clone()
    cache.view(-1, L + R)[a["slots"]] = ref.e4m3_codes(v, info.fp8_format)
    return cache, q_out, c_kv


def run(ctx, q, norm, g):
    k = ctx.kernel("deepseek_v3", kv="fp8_e4m3", q=q, layout="paged", norm=norm)
    a = inputs(g)
    cache, q_out, norm_out = expected(k, a)
    args = dict(k_nope=a["k_nope"], k_pe=a["k_pe"], kv_cache=a["kv_cache"], positions=a["positions"],
                slots=a["slots"], cos_sin=a["cos_sin"], k_scale=a["k_scale"])
    if q == "zero_copy":
        args.update(q_pe=a["q_pe"], q_out=a["q_out"])
    if norm != "none":
        args["norm_weight"] = a["norm_weight"]
    if norm == "rms_out":
        args["norm_out"] = torch.zeros(T, L, dtype=torch.bfloat16)
    k(**args)
    what = "%s, norm %s" % (q, norm)
    check(torch.equal(a["kv_cache"], cache), "the cache of %s equals ropekv.reference's" % what)
    check(torch.equal(a["q_out"].view(torch.int16), q_out.view(torch.int16)), "q_out of %s" % what)
    if norm == "rms_out":
        check(torch.equal(args["norm_out"].view(torch.int16), norm_out.view(torch.int16)), "norm_out of %s" % what)
    return k


def expect_no_compiler(ctx, what, **variant):
    try:
        ctx.kernel("deepseek_v3", layout="paged", **variant)
    except ropekv.RopekvError as e:
        check(e.status == "ROPEKV_ERR_COMPILE" and CXX in e.message, "%s: ROPEKV_ERR_COMPILE naming %s, got %s" %
              (what, CXX, e))
        return
    check(False, "%s: a kernel where no compiler is" % what)


g = torch.Generator().manual_seed(28)
ctx = ropekv.Context("host")
check(ctx.cache_ro == ":".join(dirs), "the bundles are the only layers: %s" % ctx.cache_ro)
for q, norm in BUNDLED:
    run(ctx, q, norm, g).prepare()  # the 64-bit entry too
st = ctx.stats()
check(st["compiles"] == 0 and st["disk_hits"] == 2 * len(BUNDLED) and st["cache_rejects"] == 0,
      "every entry from the bundles, none compiled: %s" % st)
expect_no_compiler(ctx, "a variant not in the bundles", kv="fp8_e4m3", q="absorbed")
print("bundled: %d variants, both entries each, 0 compiles, bit for bit as ropekv.reference" % len(BUNDLED))

# the order of the layers: the caller's first (cache_ro, else $ROPEKV_CACHE_RO), then the bundles
mine = tempfile.mkdtemp()  # an empty layer of the caller's
check(ropekv.Context("host", cache_ro=mine).cache_ro == ":".join([mine] + dirs), "cache_ro, then the bundles")
check(ropekv.Context("host", cache_ro=[mine, mine]).cache_ro == ":".join([mine, mine] + dirs), "a list of layers")
os.environ["ROPEKV_CACHE_RO"] = mine
check(ropekv.Context("host").cache_ro == ":".join([mine] + dirs), "$ROPEKV_CACHE_RO, then the bundles")
del os.environ["ROPEKV_CACHE_RO"]

# turned off: the bundled variants need the compiler again
expect_no_compiler(ropekv.Context("host", bundles=False), "bundles=False", kv="fp8_e4m3", q="none")
os.environ["ROPEKV_NO_BUNDLE"] = "1"
off = ropekv.Context("host")
check(off.cache_ro is None, "ROPEKV_NO_BUNDLE=1 gives the library no layer: %s" % off.cache_ro)
expect_no_compiler(off, "ROPEKV_NO_BUNDLE=1", kv="fp8_e4m3", q="none")
check(ropekv.Context("host", bundles=True).cache_ro == ":".join(dirs), "bundles=True wins over ROPEKV_NO_BUNDLE")
del os.environ["ROPEKV_NO_BUNDLE"]
os.rmdir(mine)
print("layers: cache_ro / $ROPEKV_CACHE_RO first, then the bundles; bundles=False and ROPEKV_NO_BUNDLE=1 turn them off")
