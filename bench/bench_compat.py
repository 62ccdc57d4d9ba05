"""The cost of the engine shims (ropekv.compat) over the ropekv.ops call each one wraps: the same tensors, eager and in
a CUDA graph, on DeepSeek-V3 shapes (L = 512, R = 64), a markdown table.

    python3 bench/bench_compat.py                      # CUDA: T in {1, 16, 128}, H in {16, 128}
    python3 bench/bench_compat.py --out bench/results  # also the table there
    python3 bench/bench_compat.py --cpu                # the script itself on the host backend (tiny; no graphs)

Per shim, the shim's call as an engine makes it and the direct call, ropekv.ops.write with what the shim passes it
(its constant tensors and scales made beforehand, once); both write the same tensors, and each row says whether their
bytes are equal (the run exits 1 where they are not). Eager: the median over --reps runs of --calls back-to-back calls
per method, the methods taking turns run by run (bench_eager.py's timing: on a decode shape the GPU waits on the host,
so this is the host's cost per call). Graph: --graph-calls calls captured in one CUDA graph, the median over
--graph-reps replays (CUDA events), divided by the calls. Shims:

  vllm.concat_and_cache_mla     "auto" (bf16) paged cache, k_pe rotated by the identity table
  vllm.rotary_embedding         q_pe [T, H, R] slice and k_pe [T, 1, R] rotated in place: two launches
  flashinfer.mla_rope_quantize_fp8                  fp8 query and key rows into preallocated buffers
  flashinfer.rope_quantize_fp8_append_paged_kv_cache  the page table's slots computed in PyTorch each call (the
                                direct call takes them precomputed)
  sglang.mla_rope_quantize_fp8_fused                fp8 q_out and the fp8 row into kv_buffer at kv_cache_loc
  aiter.fused_qk_rope_cat_and_cache_mla             bf16 q_out and bf16 paged cache, cos / sin halves of one table
"""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)

L, R, W = 512, 64, 576
SPEC = "deepseek_v3"


def _pairs(torch, T, H, device):
    """{name: (shim call, direct call, tensors both write)} for T tokens and H heads on device."""
    import ropekv.ops as ops
    from ropekv import compat
    from ropekv.compat import _common as c
    import ropekv.compat.aiter  # noqa: F401
    import ropekv.compat.flashinfer  # noqa: F401
    import ropekv.compat.sglang  # noqa: F401
    import ropekv.compat.vllm  # noqa: F401
    g = torch.Generator().manual_seed(T * 1000 + H)

    def bf16(*shape):
        return torch.randn(*shape, generator=g).to(torch.bfloat16).to(device)

    blocks, block = 64, 64
    q, kv = bf16(T, H, W), bf16(T, W)
    table = (torch.rand(4096, R // 2, generator=g) * 6.3)
    table = torch.cat([table.cos(), table.sin()], dim=-1).to(device)
    pos = torch.randint(0, 4096, (T,), generator=g).to(device)
    slots = torch.randperm(blocks * block, generator=g)[:T].to(device)
    out = {}

    # vLLM: the cache write (no rope: the identity table), and the rope in place
    cache = torch.zeros(blocks, block, W, dtype=torch.bfloat16, device=device)
    scale = torch.ones(1, dtype=torch.float32, device=device)
    ident = c.identity_table(R, device)
    out["vllm.concat_and_cache_mla"] = (
        lambda: compat.vllm.concat_and_cache_mla(kv[:, :L], kv[:, L:], cache, slots, "auto", scale),
        lambda: ops.write(SPEC, kv="bf16", layout="paged", q_form="none", k_nope=kv[:, :L], k_pe=kv[:, L:],
                          kv_cache=cache, positions=slots, slots=slots, cos_sin=ident),
        [cache])
    qr, kr = bf16(T, H, 192), bf16(T, 1, R)
    nk, npe, ncache, nslots = c.no_kv(L, R, device)

    def rotate_direct():
        for x in (qr[..., 128:], kr):
            ops.write(SPEC, kv="bf16", q_form="inplace", q_dtype="bf16", q_pe=x.view(T, -1, R), k_nope=nk, k_pe=npe,
                      kv_cache=ncache, positions=pos, slots=nslots, cos_sin=table)
    out["vllm.rotary_embedding"] = (
        lambda: compat.vllm.rotary_embedding(pos, qr[..., 128:], kr, R, table, False), rotate_direct, [qr, kr])

    # FlashInfer: fp8 query and key rows; the paged append with its page table
    qo = torch.zeros(T, H, W, dtype=torch.uint8, device=device)
    ko = torch.zeros(T, W, dtype=torch.uint8, device=device)
    ks, qs = c.scale_tensor(1.0, device), c.scale_tensor(1.0, device)
    ramp = c.ramp(T, device)
    out["flashinfer.mla_rope_quantize_fp8"] = (
        lambda: compat.flashinfer.mla_rope_quantize_fp8(q[..., L:], kv[:, L:], q[..., :L], kv[:, :L], table, pos,
                                                        False, torch.uint8, 1.0, 1.0, qo[..., L:], ko[:, L:],
                                                        qo[..., :L], ko[:, :L]),
        lambda: ops.write(SPEC, kv="fp8_e4m3", q_nope=q[..., :L], q_pe=q[..., L:], q_out=qo, k_nope=kv[:, :L],
                          k_pe=kv[:, L:], kv_cache=ko, positions=pos, slots=ramp, cos_sin=table, k_scale=ks,
                          q_scale=qs),
        [qo, ko])
    page = 16
    pages = blocks * block // page
    buf = torch.zeros(pages, page, W, dtype=torch.uint8, device=device)
    qo2 = torch.zeros(T, H, W, dtype=torch.uint8, device=device)
    per_req = (T + 3) // 4  # 4 requests
    batch = (torch.arange(T) // per_req).to(torch.int32).to(device)
    positions = (torch.arange(T) % per_req + 100).to(torch.int32).to(device)
    need = (per_req + 100 + page - 1) // page
    kv_indices = torch.randperm(pages, generator=g)[:4 * need].to(torch.int32).to(device)
    kv_indptr = (torch.arange(5) * need).to(torch.int32).to(device)
    page_slots = compat.flashinfer._slots(kv_indices, kv_indptr, batch, positions, page)
    out["flashinfer.rope_quantize_fp8_append_paged_kv_cache"] = (
        lambda: compat.flashinfer.rope_quantize_fp8_append_paged_kv_cache(
            q[..., L:], kv[:, L:], q[..., :L], kv[:, :L], None, table, pos, (buf[..., :L], buf[..., L:]), kv_indices,
            kv_indptr, batch, positions, False, torch.uint8, 1.0, 1.0, page, "NHD", qo2[..., L:], qo2[..., :L]),
        lambda: ops.write(SPEC, kv="fp8_e4m3", layout="paged", q_nope=q[..., :L], q_pe=q[..., L:], q_out=qo2,
                          k_nope=kv[:, :L], k_pe=kv[:, L:], kv_cache=buf, positions=pos, slots=page_slots,
                          cos_sin=table, k_scale=ks, q_scale=qs),
        [qo2, buf])

    # SGLang: fp8 q_out and the fp8 row into the MLA pool
    q_out = torch.zeros(T, H, W, dtype=torch.uint8, device=device)
    kv_buffer = torch.zeros(blocks * block, 1, W, dtype=torch.uint8, device=device)
    out["sglang.mla_rope_quantize_fp8_fused"] = (
        lambda: compat.sglang.mla_rope_quantize_fp8_fused(q[..., :L], q[..., L:], kv[:, :L], kv[:, L:], table, pos,
                                                          False, q_out, None, None, kv_buffer, slots),
        lambda: ops.write(SPEC, kv="fp8_e4m3", q_nope=q[..., :L], q_pe=q[..., L:], q_out=q_out, k_nope=kv[:, :L],
                          k_pe=kv[:, L:], kv_cache=kv_buffer, positions=pos, slots=slots, cos_sin=table, k_scale=ks,
                          q_scale=qs),
        [q_out, kv_buffer])

    # aiter: bf16 q_out and cache, the tables' halves
    q_out_a = torch.zeros(T, H, W, dtype=torch.bfloat16, device=device)
    cache_a = torch.zeros(blocks * block, 1, W, dtype=torch.bfloat16, device=device)
    cos, sin = table.chunk(2, dim=-1)
    kv3 = kv.view(T, 1, W)
    out["aiter.fused_qk_rope_cat_and_cache_mla"] = (
        lambda: compat.aiter.fused_qk_rope_cat_and_cache_mla(q[..., :L], q[..., L:], kv3[..., :L], kv3[..., L:],
                                                             cache_a, slots, pos, cos, sin, None, False,
                                                             q_out=q_out_a),
        lambda: ops.write(SPEC, kv="bf16", q_nope=q[..., :L], q_pe=q[..., L:], q_out=q_out_a, k_nope=kv[:, :L],
                          k_pe=kv[:, L:], kv_cache=cache_a, positions=pos, slots=slots, cos_sin=table),
        [q_out_a, cache_a])
    return out


def same_bytes(torch, shim, direct, outs):
    """Whether the shim and the direct call write the same bytes into outs, from the same starting bytes (restored
    before each)."""
    start = [o.clone() for o in outs]
    got = []
    for fn in (shim, direct):
        for o, s in zip(outs, start):
            o.copy_(s)
        fn()
        got.append([o.clone() for o in outs])
    for o, s in zip(outs, start):
        o.copy_(s)
    changed = any(not torch.equal(a.view(torch.uint8), s.view(torch.uint8)) for a, s in zip(got[0], start))
    return changed and all(torch.equal(a.view(torch.uint8), b.view(torch.uint8)) for a, b in zip(*got))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cpu", action="store_true", help="the host backend, tiny shapes (checks the script)")
    ap.add_argument("--T", default=None, help="tokens, a comma list (default 1,16,128; --cpu 1,5)")
    ap.add_argument("--H", default=None, help="heads, a comma list (default 16,128; --cpu 2)")
    ap.add_argument("--calls", type=int, default=None, help="calls per eager run (default 500; --cpu 5)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--graph-calls", type=int, default=50)
    ap.add_argument("--graph-reps", type=int, default=20)
    ap.add_argument("--out", default=None)
    ap.add_argument("--tag", default="h200")
    args = ap.parse_args(argv)
    import torch
    import ropekv
    import bench_eager
    from mla.timing import time_graph
    device = torch.device("cpu" if args.cpu else "cuda")
    if device.type == "cuda" and not torch.cuda.is_available():
        print("bench_compat: no CUDA device (--cpu runs the script on the host backend)", file=sys.stderr)
        return 2
    Ts = [int(x) for x in (args.T or ("1,5" if args.cpu else "1,16,128")).split(",")]
    Hs = [int(x) for x in (args.H or ("2" if args.cpu else "16,128")).split(",")]
    calls = args.calls or (5 if args.cpu else 500)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    rows, bad = [], []
    for H in Hs:
        for T in Ts:
            pairs = _pairs(torch, T, H, device)
            for name, (shim, direct, outs) in pairs.items():
                same = same_bytes(torch, shim, direct, outs)
                if not same:
                    bad.append("%s T=%d H=%d" % (name, T, H))
                eager = bench_eager.per_call_us({"shim": shim, "direct": direct}, calls, args.reps, sync)
                if device.type == "cuda":
                    gs = time_graph(torch, shim, args.graph_calls, args.graph_reps)
                    gd = time_graph(torch, direct, args.graph_calls, args.graph_reps)
                else:
                    gs = gd = None
                rows.append((name, T, H, eager["shim"][0], eager["direct"][0], gs, gd, same))
                print("%-52s T=%-4d H=%-4d eager %7.2f / %7.2f us  graph %s / %s us  same bytes %s" % (
                    name, T, H, eager["shim"][0], eager["direct"][0], "%.2f" % gs if gs is not None else "n/a",
                    "%.2f" % gd if gd is not None else "n/a", "yes" if same else "NO"), flush=True)
    dev = torch.cuda.get_device_name() if device.type == "cuda" else "cpu (host backend)"
    head = ("torch %s, ropekv %s, %s; %s (L 512, R 64); eager: median of %d runs of %d back-to-back calls, shim and "
            "direct taking turns; graph: median of %d replays of %d calls captured in one CUDA graph, per call.\n\n"
            % (torch.__version__, ropekv.__version__, dev, SPEC, args.reps, calls, args.graph_reps,
               args.graph_calls))
    table = ["| shim | T | H | eager shim us | eager direct us | eager shim - direct | graph shim us | "
             "graph direct us | same bytes |", "|---|---|---|---|---|---|---|---|---|"]
    for name, T, H, es, ed, gs, gd, same in rows:
        table.append("| %s | %d | %d | %.2f | %.2f | %+.2f | %s | %s | %s |" % (
            name, T, H, es, ed, es - ed, "%.2f" % gs if gs is not None else "n/a",
            "%.2f" % gd if gd is not None else "n/a", "yes" if same else "no"))
    print()
    print(head + "\n".join(table))
    if args.out:
        path = os.path.join(args.out, time.strftime("%Y-%m-%d") + "_compat_cost_%s.md" % args.tag)
        with open(path, "w") as f:
            f.write("# The engine shims against the direct call (bench/bench_compat.py)\n\n" + head +
                    "\n".join(table) + "\n")
        print("wrote %s" % path)
    if bad:
        print("bench_compat: the shim and the direct call wrote different bytes: %s" % "; ".join(bad),
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
