"""A DeepSeek-style MLA attention layer in PyTorch, absorbed decode path, with ropekv doing the RoPE + KV write.

    python3 examples/mla_decode_layer.py                  # CUDA if there is a device, else the CPU (host backend)
    python3 examples/mla_decode_layer.py --device cpu --steps 3
    python3 examples/mla_decode_layer.py --time --out bench/results   # step times in CUDA graphs (GPU)

One layer, as DeepSeek-V3 / Kimi-K2 engines run it in decode (kv_lora_rank L = 512, qk_rope_head_dim R = 64,
qk_nope_head_dim 128, v_head_dim 128):

    q            = x @ W_q                          [T, H, 128 + 64]  -> q_nope, q_pe
    kv           = x @ W_kv_a                       [T, 576]          -> c_kv (RMSNorm'ed), k_pe
    q_out[.., :L] = bmm(q_nope, W_UK)               written straight into q_out (the zero-copy form)
    ropekv:        q_out[.., L:] = rope(q_pe); cache[slot] = fp8(cat(c_kv, rope(k_pe)) / k_scale)   one launch
    attention over the paged fp8 cache (plain PyTorch, a block table per sequence), then W_UV and W_o

The same layer runs once with ropekv (the torch.ops.ropekv.write operator) and once with the unfused PyTorch
sequence doing ropekv's arithmetic (ropekv.reference: one rounded product and one exact fma per rope output, the
spec's fp8 policy), for several decode steps over sequences that grow by one token per step, after a prefill
that writes each sequence's context rows (q form none). Checked every step: the two caches are byte-identical,
q_out is bit-identical, and the layer outputs are equal (the same bytes go through the same attention code).
With --compile the ropekv layer also runs under torch.compile(fullgraph=True) (its outputs within the stated
tolerance of eager: inductor fuses and reorders the float32 attention arithmetic; the cache bytes still equal).
--time captures one decode step in a CUDA graph for each path (eager and compiled) and reports the replay time
per step; "unfused_fp32" is the sequence as engines write it (x0*c - x1*s in float32, two roundings: a few
cache bytes may differ from ropekv's, counted, not asserted).
"""
import argparse
import importlib.util
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if importlib.util.find_spec("ropekv") is None:  # an installed ropekv (a wheel) first, else this checkout's python/
    sys.path.insert(0, os.path.join(HERE, "..", "python"))

try:
    import torch  # noqa: E402
except ImportError:
    print("SKIP: this example needs torch (pip install torch, or Debian's python3-torch)")
    sys.exit(77)

import ropekv  # noqa: E402
import ropekv.ops  # noqa: E402
import ropekv.reference as rkref  # noqa: E402

SPEC = "deepseek_v3"  # its fp8 policy: x * (1 / k_scale), saturate at 448, the rope float not rounded to bf16
L, R, NOPE, V = 512, 64, 128, 128
FP8_MAX = 448.0
# compiled vs eager: the attention's float32 reductions are fused and reordered by inductor (bf16 output)
COMPILE_RTOL, COMPILE_ATOL = 2e-2, 2e-2


def is_compiling():
    f = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    return f() if f is not None else False


def has_float8():
    return hasattr(torch, "float8_e4m3fn")


def fp8_codes(v):
    """float32 values, clamped to +-448, as OCP e4m3 codes (uint8): torch's round-to-nearest-even cast where torch
    has float8, ropekv.reference's encoder (the same codes) where it does not."""
    if has_float8():
        return v.to(torch.float8_e4m3fn).view(torch.uint8)
    return rkref.e4m3_codes(v)


def fp8_values(codes):
    if has_float8():
        return codes.view(torch.float8_e4m3fn).float()
    return rkref.e4m3_values(codes)


def cos_sin_cache(max_pos, device):
    """DeepSeek's rope table as one float32 [max_pos, R] tensor, cos | sin (the spec's cos_sin = f32_cat)."""
    inv = 1.0 / (10000.0 ** (torch.arange(0, R, 2, dtype=torch.float64) / R))
    f = torch.arange(max_pos, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cat([f.cos(), f.sin()], dim=-1).float().to(device)


def rms_norm(x, w, eps=1e-6):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(torch.bfloat16)


class MLADecodeLayer(torch.nn.Module):
    """One MLA attention layer (absorbed decode). path: "ropekv" (the fused operator), "unfused" (PyTorch, ropekv's
    arithmetic: the reference) or "unfused_fp32" (PyTorch as engines write the rope: plain float32)."""

    def __init__(self, hidden, heads, path, device, seed=0, heads_of=None):
        """heads_of (lo, hi): only query heads lo .. hi - 1 of the layer's `heads` (a tensor-parallel rank's share:
        their columns of W_q, their W_UK and W_UV, their rows of W_o; examples/tp_decode.py); the weights are the whole
        layer's, drawn from seed either way."""
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        lo, hi = heads_of or (0, heads)

        def w(*shape, scale, keep=lambda t: t):
            t = keep((torch.randn(*shape, generator=g) * scale).to(torch.bfloat16))
            return torch.nn.Parameter(t.contiguous().to(device), requires_grad=False)

        self.hidden, self.heads, self.path = hidden, hi - lo, path
        self.w_q = w(hidden, heads * (NOPE + R), scale=hidden ** -0.5,
                     keep=lambda t: t.view(hidden, heads, NOPE + R)[:, lo:hi].reshape(hidden, -1))
        self.w_kv_a = w(hidden, L + R, scale=hidden ** -0.5)
        self.kv_norm = w(L, scale=0.1)
        with torch.no_grad():
            self.kv_norm += 1.0
        self.w_uk = w(heads, NOPE, L, scale=NOPE ** -0.5, keep=lambda t: t[lo:hi])
        self.w_uv = w(heads, L, V, scale=L ** -0.5, keep=lambda t: t[lo:hi])
        self.w_o = w(heads * V, hidden, scale=(heads * V) ** -0.5, keep=lambda t: t[lo * V:hi * V])
        self.sm_scale = (NOPE + R) ** -0.5

    # -- the RoPE + KV write: fused, or the PyTorch sequence --
    def rope_write(self, q_pe, q_out, c_kv, k_pe, kv_cache, positions, slots, cos_sin, k_scale):
        if self.path == "ropekv":
            # zero-copy form: q_out[..., :L] already holds the W_UK product; the kernel writes q_out[..., L:] and the
            # cache rows (q_pe / q_out None: q form none, a prefill writing the KV rows only)
            ropekv.ops.write(SPEC, kv="fp8_e4m3", layout="paged", q_pe=q_pe, q_out=q_out, k_nope=c_kv, k_pe=k_pe,
                             kv_cache=kv_cache, positions=positions, slots=slots, cos_sin=cos_sin, k_scale=k_scale)
            return
        cs = cos_sin[positions]
        c, s = cs[:, :R // 2], cs[:, R // 2:]
        if self.path == "unfused":
            def rope(x, c, s):
                return rkref.rope(x, c, s, "gptj")
        else:
            def rope(x, c, s):
                xf = x.float()
                x0, x1 = xf[..., 0::2], xf[..., 1::2]
                return torch.stack((x0 * c - x1 * s, x1 * c + x0 * s), dim=-1).flatten(-2)
        if q_out is not None:
            q_out[..., L:] = rope(q_pe, c[:, None], s[:, None]).to(torch.bfloat16)
        row = torch.cat([c_kv.float(), rope(k_pe, c, s)], dim=-1)
        codes = fp8_codes(rkref.scale(row, "mul_recip", k_scale).clamp(-FP8_MAX, FP8_MAX))
        kv_cache.view(torch.uint8).view(-1, L + R).index_copy_(0, slots, codes)

    def project_kv(self, x):
        kv = x @ self.w_kv_a
        return rms_norm(kv[:, :L], self.kv_norm), kv[:, L:]

    def prefill(self, x, positions, slots, kv_cache, cos_sin, k_scale):
        """Writes the KV rows of a context (no queries: ropekv's q form none)."""
        c_kv, k_pe = self.project_kv(x)
        self.rope_write(None, None, c_kv, k_pe, kv_cache, positions, slots, cos_sin, k_scale)

    def project_q(self, x):
        """The query projection, [T, H, NOPE + R]."""
        return (x @ self.w_q).view(x.shape[0], self.heads, NOPE + R)

    def absorb(self, q_nope, q_out):
        """q_out[..., :L] = q_nope x W_UK per head, written into q_out (the zero-copy form)."""
        if is_compiling():  # dynamo does not trace out= into a strided view: the product goes through a temporary
            q_out[..., :L] = torch.bmm(q_nope.transpose(0, 1), self.w_uk).transpose(0, 1)
        else:
            torch.bmm(q_nope.transpose(0, 1), self.w_uk, out=q_out[..., :L].transpose(0, 1))

    def forward(self, x, positions, slots, block_table, seq_lens, kv_cache, cos_sin, k_scale, q_out):
        """One decode step for T sequences (one token each). q_out: [T, H, L + R] bf16, filled here (returned too)."""
        T, H = x.shape[0], self.heads
        q = self.project_q(x)
        q_nope, q_pe = q[..., :NOPE], q[..., NOPE:]
        c_kv, k_pe = self.project_kv(x)
        self.absorb(q_nope, q_out)
        self.rope_write(q_pe, q_out, c_kv, k_pe, kv_cache, positions, slots, cos_sin, k_scale)
        # attention over each sequence's cached rows (plain PyTorch; a serving engine calls its MLA decode kernel)
        rows = kv_cache.view(torch.uint8)[block_table].reshape(T, -1, L + R)
        vals = fp8_values(rows) * k_scale  # [T, C, L + R]
        scores = torch.einsum("thd,tcd->thc", q_out.float(), vals) * self.sm_scale
        ctx = torch.arange(vals.shape[1], device=x.device)
        scores = scores.masked_fill((ctx[None, :] >= seq_lens[:, None])[:, None, :], float("-inf"))
        lat = torch.einsum("thc,tcd->thd", torch.softmax(scores, dim=-1), vals[..., :L]).to(torch.bfloat16)
        o = torch.bmm(lat.transpose(0, 1), self.w_uv).transpose(0, 1)  # [T, H, V]
        return o.reshape(T, H * V) @ self.w_o, q_out


class Batch:
    """Sequences in a paged fp8 cache [blocks, block_size, L + R]: each owns max_blocks blocks (shuffled ids) and a
    context length that grows by one token per decode step."""

    def __init__(self, seqs, block_size, max_ctx, hidden, device, seed):
        g = torch.Generator().manual_seed(seed)
        self.B, self.block_size, self.hidden, self.device = seqs, block_size, hidden, device
        self.max_blocks = -(-max_ctx // block_size)
        blocks = seqs * self.max_blocks + 3  # a few never used
        self.blocks = blocks
        self.block_table = torch.randperm(blocks, generator=g)[:seqs * self.max_blocks].view(seqs, self.max_blocks)
        self.seq_lens = torch.randint(1, max_ctx // 2, (seqs,), generator=g)
        self.max_ctx = max_ctx
        self.g = g
        self.block_table = self.block_table.to(device)

    def slots_of(self, seq, pos):
        bt = self.block_table.cpu()
        return bt[seq, pos // self.block_size] * self.block_size + pos % self.block_size

    def new_cache(self):
        return torch.zeros(self.blocks, self.block_size, L + R, dtype=torch.uint8, device=self.device)

    def context(self):
        """(x, positions, slots) of every sequence's context tokens, for the prefill."""
        seq = torch.cat([torch.full((int(n),), i) for i, n in enumerate(self.seq_lens)])
        pos = torch.cat([torch.arange(int(n)) for n in self.seq_lens])
        x = (torch.randn(len(pos), self.hidden, generator=self.g)).to(torch.bfloat16)
        return x.to(self.device), pos.to(self.device), self.slots_of(seq, pos).to(self.device)

    def step(self):
        """(x, positions, slots, seq_lens after the step) of the next decode token of every sequence."""
        pos = self.seq_lens.clone()
        if int(pos.max()) >= self.max_ctx:
            raise ValueError("a sequence outgrew max_ctx")
        x = torch.randn(self.B, self.hidden, generator=self.g).to(torch.bfloat16)
        slots = self.slots_of(torch.arange(self.B), pos)
        self.seq_lens = pos + 1
        return (x.to(self.device), pos.to(self.device), slots.to(self.device), self.seq_lens.to(self.device))


def run_steps(args, device):
    """Prefill, then args.steps decode steps with both paths; every step checked. Returns the layers, the batch's
    last step inputs and the caches (for timing)."""
    layers = {p: MLADecodeLayer(args.hidden, args.heads, p, device, seed=args.seed) for p in ("ropekv", "unfused")}
    batch = Batch(args.seqs, args.block_size, args.max_ctx, args.hidden, device, args.seed + 1)
    cos_sin = cos_sin_cache(args.max_ctx, device)
    k_scale = torch.tensor([args.k_scale], dtype=torch.float32, device=device)
    caches = {p: batch.new_cache() for p in layers}
    x, pos, slots = batch.context()
    for p, layer in layers.items():
        layer.prefill(x, pos, slots, caches[p], cos_sin, k_scale)
    assert torch.equal(caches["ropekv"], caches["unfused"]), "prefill: the caches differ"
    print("prefill: %d context rows of %d sequences, caches byte-identical" % (len(pos), args.seqs))
    compiled = torch.compile(layers["ropekv"], fullgraph=True) if args.compile else None
    if compiled is not None:
        caches["compiled"] = caches["ropekv"].clone()
    for step in range(args.steps):
        x, pos, slots, seq_lens = batch.step()
        bt = batch.block_table
        outs = {}
        for p, layer in layers.items():
            q_out = torch.empty(args.seqs, args.heads, L + R, dtype=torch.bfloat16, device=device)
            outs[p] = layer(x, pos, slots, bt, seq_lens, caches[p], cos_sin, k_scale, q_out)
        same_cache = torch.equal(caches["ropekv"], caches["unfused"])
        same_q = torch.equal(outs["ropekv"][1].view(torch.int16), outs["unfused"][1].view(torch.int16))
        same_out = torch.equal(outs["ropekv"][0], outs["unfused"][0])
        line = "step %d: T=%d, contexts %d..%d: cache %s, q_out %s, output %s" % (
            step, args.seqs, int(seq_lens.min()), int(seq_lens.max()), "byte-identical" if same_cache else "DIFFERS",
            "bit-identical" if same_q else "DIFFERS", "equal" if same_out else "DIFFERS")
        if compiled is not None:
            q_out = torch.empty(args.seqs, args.heads, L + R, dtype=torch.bfloat16, device=device)
            out_c, _ = compiled(x, pos, slots, bt, seq_lens, caches["compiled"], cos_sin, k_scale, q_out)
            c_same = torch.equal(caches["compiled"], caches["ropekv"])
            err = (out_c.float() - outs["ropekv"][0].float()).abs().max().item()
            c_ok = torch.allclose(out_c.float(), outs["ropekv"][0].float(), rtol=COMPILE_RTOL, atol=COMPILE_ATOL)
            line += "; compiled (fullgraph): cache %s, output max |diff| %.3g (%s)" % (
                "byte-identical" if c_same else "DIFFERS", err, "within tolerance" if c_ok else "OUT OF TOLERANCE")
            if not (c_same and c_ok):
                raise AssertionError(line)
        print(line)
        if not (same_cache and same_q and same_out):
            raise AssertionError(line)
    return layers, compiled, batch, (x, pos, slots, batch.block_table, seq_lens, cos_sin, k_scale)


def graph_time(fn, args_, reps):
    """us per replay of fn(*args_) captured in a CUDA graph (warmed up first, outside capture)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn(*args_)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn(*args_)
    g.replay()
    torch.cuda.synchronize()
    best = math.inf
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            g.replay()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) * 1000.0 / reps)
    return best


def time_steps(args, layers, compiled, batch, inputs, device):
    """Replay time of one decode step per path, eager and compiled, each in its own CUDA graph."""
    x, pos, slots, bt, seq_lens, cos_sin, k_scale = inputs
    rows = []
    paths = dict(layers)
    paths["unfused_fp32"] = MLADecodeLayer(args.hidden, args.heads, "unfused_fp32", device, seed=args.seed)
    results = {}
    for name, layer in paths.items():
        for mode in ("eager", "compiled"):
            fn = layer if mode == "eager" else torch.compile(layer, fullgraph=True)
            cache = batch.new_cache()
            q_out = torch.empty(args.seqs, args.heads, L + R, dtype=torch.bfloat16, device=device)
            us = graph_time(lambda *a: fn(*a), (x, pos, slots, bt, seq_lens, cache, cos_sin, k_scale, q_out),
                            args.reps)
            results[(name, mode)] = cache
            rows.append((name, mode, us))
            print("%-13s %-8s %8.1f us per step (CUDA graph replay)" % (name, mode, us))
    diff = int((results[("unfused_fp32", "eager")] != results[("ropekv", "eager")]).sum())
    print("unfused_fp32 cache bytes differing from ropekv's (plain float32 rope): %d of %d written" % (
        diff, args.seqs * (L + R)))
    return rows, diff


def write_results(args, rows, diff, out_dir):
    name = time.strftime("%Y-%m-%d") + "_example_layer_%s.md" % args.tag
    path = os.path.join(out_dir, name)
    dev = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    with open(path, "w") as f:
        f.write("# MLA decode layer step (examples/mla_decode_layer.py), %s\n\n" % dev)
        f.write("torch %s; hidden %d, heads %d, %d sequences (T = %d per step), block size %d, contexts up to %d; "
                "one decode step captured in a CUDA graph, best of 5 x %d replays.\n\n" % (
                    torch.__version__, args.hidden, args.heads, args.seqs, args.seqs, args.block_size, args.max_ctx,
                    args.reps))
        f.write("| path | mode | us per step |\n|---|---|---|\n")
        for name, mode, us in rows:
            f.write("| %s | %s | %.1f |\n" % (name, mode, us))
        f.write("\nropekv: torch.ops.ropekv.write (one launch); unfused: the PyTorch sequence with ropekv's arithmetic "
                "(exact fma emulation, the reference); unfused_fp32: the sequence as engines write it (%d cache "
                "bytes of %d differ from ropekv's).\n" % (diff, args.seqs * (L + R)))
    print("wrote %s" % path)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--seqs", type=int, default=8, help="sequences (query tokens per decode step)")
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--block-size", type=int, default=64)
    ap.add_argument("--max-ctx", type=int, default=512)
    ap.add_argument("--k-scale", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--compile", action="store_true", help="also run the ropekv layer under torch.compile(fullgraph)")
    ap.add_argument("--time", action="store_true", help="CUDA-graph step times of each path, eager and compiled")
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--out", default=None, help="write the step times as a markdown table into this directory")
    ap.add_argument("--tag", default="h200")
    args = ap.parse_args(argv)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if (args.compile or args.time) and not hasattr(torch, "compile"):
        print("torch %s has no torch.compile: --compile and --time need torch 2.x" % torch.__version__)
        return 2
    if args.time and device.type != "cuda":
        print("--time needs a CUDA device")
        return 2
    torch.set_grad_enabled(False)
    print("ropekv %s on %s (backend %s), torch %s" % (ropekv.__version__, device, ropekv.ops.context(device).backend,
                                                    torch.__version__))
    layers, compiled, batch, inputs = run_steps(args, device)
    if args.time:
        rows, diff = time_steps(args, layers, compiled, batch, inputs, device)
        if args.out:
            write_results(args, rows, diff, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
