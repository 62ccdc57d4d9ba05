"""A tensor-parallel MLA decode step with torch.distributed: the query heads split across ranks, ropekv writing each
rank's own latent cache.

    python3 examples/tp_decode.py                       # 2 ranks: NCCL on 2 GPUs where there are, else gloo on the CPU
    python3 examples/tp_decode.py --device cpu --steps 3
    torchrun --nproc-per-node 2 examples/tp_decode.py   # ranks started by torchrun (RANK, WORLD_SIZE, LOCAL_RANK, ...)

The layer is examples/mla_decode_layer.py's (absorbed decode, deepseek_v3's paged fp8 cache), split as tensor
parallelism splits MLA: rank r of W owns query heads [r H / W, (r + 1) H / W) (its columns of W_q, its W_UK and W_UV,
its rows of W_o); the kv projection and the latent cache are replicated (MLA has one KV head: every rank writes the
whole KV row of every token into its own cache, and its own heads' rows of q_out). Each rank's partial output is summed
across ranks (all_reduce). A rank's kernels come from the context of its tensors' device (ropekv.ops): the host
backend on the CPU, cuda:<local rank> on GPUs.

Checked every step, after a prefill that writes each sequence's context rows:
- on each rank, bit for bit: q_out and the cache equal those of the same shard computed by ropekv.reference (the
  unfused PyTorch sequence doing ropekv's arithmetic), and the layer outputs are equal;
- against a 1-rank run of the same step (rank 0 runs the whole layer, every head, with a cache of its own), bit for bit:
  the ranks' q_out heads put side by side equal its q_out, and every rank's cache its cache; the summed output is
  within 1e-2 (rtol and atol) of its output (the partial products are summed in another order; the maximum difference
  is printed).
The query projection and the W_UK product are GEMMs per head, so a head's q_out is the same bits whatever the number of
heads beside it: a single GEMM over a rank's columns (or one batched over its heads) may block or split its sums
otherwise than one over all of them.

Exit status: 0 when every check holds, 1 otherwise, 77 without torch or torch.distributed.
"""
import argparse
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "python"))

try:
    import torch  # noqa: E402
    import torch.distributed as dist  # noqa: E402
except ImportError:
    print("SKIP: this example needs torch (pip install torch, or Debian's python3-torch)")
    sys.exit(77)

import ropekv  # noqa: E402
import ropekv.ops  # noqa: E402
from mla_decode_layer import L, NOPE, R, Batch, MLADecodeLayer, cos_sin_cache  # noqa: E402

OUT_RTOL, OUT_ATOL = 1e-2, 1e-2  # the summed output against the 1-rank run's


class Shard(MLADecodeLayer):
    """Rank rank of world's share of the layer: heads [rank H / world, (rank + 1) H / world). path as
    MLADecodeLayer's: "ropekv" or "unfused" (ropekv.reference). forward returns the rank's partial output."""

    def __init__(self, hidden, heads, rank, world, path, device, seed):
        if heads % world:
            raise ValueError("%d heads do not split across %d ranks" % (heads, world))
        h = heads // world
        super().__init__(hidden, heads, path, device, seed=seed, heads_of=(rank * h, (rank + 1) * h))
        self.w_q_heads = self.w_q.view(hidden, h, NOPE + R).transpose(0, 1).contiguous()  # [h, hidden, NOPE + R]

    # A head's products are GEMMs of the same shapes whatever the heads beside it (so a head's q_out has the same bits
    # on a rank as in the 1-rank run); one GEMM over a rank's columns, or one batched over its heads, may be blocked
    # or split otherwise by the BLAS for the other shape.
    def project_q(self, x):
        return torch.stack([x @ w for w in self.w_q_heads], dim=1)  # [T, h, NOPE + R]

    def absorb(self, q_nope, q_out):
        for i in range(self.heads):
            q_out[:, i, :L] = q_nope[:, i].contiguous() @ self.w_uk[i]


def all_gather(t, world):
    """Every rank's t (the same shape on each), as a list by rank; bf16 passed as its bytes (gloo has no bf16)."""
    b = t.contiguous().view(torch.uint8)
    got = [torch.empty_like(b) for _ in range(world)]
    dist.all_gather(got, b)
    return [g.view(t.dtype) for g in got]


def reduce_partial(partial):
    """The rank's partial output summed over the ranks (float32: gloo has no bf16), as bf16."""
    s = partial.float()
    dist.all_reduce(s)
    return s.to(torch.bfloat16)


def failures_of_all(device, n):
    """The failed checks of every rank, summed (so every rank learns of any rank's failure)."""
    t = torch.tensor([n], dtype=torch.int64, device=device)
    dist.all_reduce(t)
    return int(t.item())


def same_bits(a, b):
    return a.shape == b.shape and torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


def run(rank, world, device, args):
    """Prefill and args.steps decode steps on this rank; returns the number of failed checks (the same on every
    rank)."""
    shards = {p: Shard(args.hidden, args.heads, rank, world, p, device, args.seed) for p in ("ropekv", "unfused")}
    one = Shard(args.hidden, args.heads, 0, 1, "ropekv", device, args.seed) if rank == 0 else None
    batch = Batch(args.seqs, args.block_size, args.max_ctx, args.hidden, device, args.seed + 1)
    cos_sin = cos_sin_cache(args.max_ctx, device)
    k_scale = torch.tensor([args.k_scale], dtype=torch.float32, device=device)
    caches = {p: batch.new_cache() for p in shards}
    one_cache = batch.new_cache() if one is not None else None
    failed = 0

    def caches_agree():
        """Rank-local cache == the reference's, and (rank 0) every rank's cache == the 1-rank run's."""
        local = same_bits(caches["ropekv"], caches["unfused"])
        ranks = all_gather(caches["ropekv"], world)
        vs_one = one is None or all(same_bits(c, one_cache) for c in ranks)
        return local, vs_one

    x, pos, slots = batch.context()
    for p, shard in shards.items():
        shard.prefill(x, pos, slots, caches[p], cos_sin, k_scale)
    if one is not None:
        one.prefill(x, pos, slots, one_cache, cos_sin, k_scale)
    local, vs_one = caches_agree()
    failed += failures_of_all(device, (not local) + (not vs_one))
    if rank == 0:
        print("prefill: %d context rows of %d sequences; cache %s the reference's, %s the 1-rank run's" % (
            len(pos), args.seqs, "byte-identical to" if local else "DIFFERS from",
            "every rank's byte-identical to" if vs_one else "a rank's DIFFERS from"))
    h = args.heads // world
    for step in range(args.steps):
        x, pos, slots, seq_lens = batch.step()
        bt = batch.block_table
        outs, q_outs = {}, {}
        for p, shard in shards.items():
            q_outs[p] = torch.empty(args.seqs, h, L + R, dtype=torch.bfloat16, device=device)
            partial, _ = shard(x, pos, slots, bt, seq_lens, caches[p], cos_sin, k_scale, q_outs[p])
            outs[p] = reduce_partial(partial)
        if one is not None:
            q_one = torch.empty(args.seqs, args.heads, L + R, dtype=torch.bfloat16, device=device)
            out_one, _ = one(x, pos, slots, bt, seq_lens, one_cache, cos_sin, k_scale, q_one)
        ok = {"q_out": same_bits(q_outs["ropekv"], q_outs["unfused"]),
              "output": same_bits(outs["ropekv"], outs["unfused"])}
        ok["cache"], ok["cache vs 1 rank"] = caches_agree()
        q_all = torch.cat(all_gather(q_outs["ropekv"], world), dim=1)  # [T, H, L + R], the ranks' heads in order
        diff = 0.0
        if one is not None:
            ok["q_out vs 1 rank"] = same_bits(q_all, q_one)
            diff = (outs["ropekv"].float() - out_one.float()).abs().max().item()
            ok["output vs 1 rank"] = torch.allclose(outs["ropekv"].float(), out_one.float(), rtol=OUT_RTOL,
                                                    atol=OUT_ATOL)
        failed += failures_of_all(device, sum(not v for v in ok.values()))
        line = "step %d, rank %d, against the reference: q_out %s, cache %s, output %s" % (
            step, rank, "bit-identical" if ok["q_out"] else "DIFFERS", "byte-identical" if ok["cache"] else "DIFFERS",
            "equal" if ok["output"] else "DIFFERS")
        if one is not None:
            line += "; against the 1-rank run: q_out (the %d ranks' heads) %s, caches %s, output max |diff| %.3g (%s)" \
                % (world, "bit-identical" if ok["q_out vs 1 rank"] else "DIFFERS",
                   "byte-identical" if ok["cache vs 1 rank"] else "DIFFER", diff,
                   "within tolerance" if ok["output vs 1 rank"] else "OUT OF TOLERANCE")
        if rank == 0 or not all(ok.values()):
            print(line, flush=True)
    return failed


def rank_main(rank, world, device_type, init_method, args):
    """One rank: joins the group, runs the steps; raises when a check failed on any rank."""
    if device_type == "cuda":
        local = int(os.environ.get("LOCAL_RANK", rank))
        torch.cuda.set_device(local)
        device, backend = torch.device("cuda", local), "nccl"
    else:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
        device, backend = torch.device("cpu"), "gloo"
    dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world)
    try:
        torch.set_grad_enabled(False)
        if rank == 0:
            print("ropekv %s, torch %s: %d ranks (%s), rank 0 on %s (backend %s); %d heads, %d a rank" % (
                ropekv.__version__, torch.__version__, world, backend, device, ropekv.ops.context(device).backend,
                args.heads, args.heads // world), flush=True)
        failed = run(rank, world, device, args)
    finally:
        dist.destroy_process_group()
    if failed:
        raise AssertionError("rank %d: %d checks failed across the ranks" % (rank, failed))
    if rank == 0:
        print("ok: %d ranks agree with the reference and the 1-rank run" % world)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default=None,
                    help="cuda (NCCL, one GPU a rank) or cpu (gloo, host backend); default cuda with enough GPUs")
    ap.add_argument("--world", type=int, default=2, help="ranks (ignored under torchrun: WORLD_SIZE)")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--seqs", type=int, default=4, help="sequences (query tokens per decode step)")
    ap.add_argument("--heads", type=int, default=16, help="query heads of the whole layer")
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--block-size", type=int, default=64)
    ap.add_argument("--max-ctx", type=int, default=256)
    ap.add_argument("--k-scale", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if not dist.is_available():
        print("SKIP: this torch has no torch.distributed")
        return 77
    torchrun = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    world = int(os.environ["WORLD_SIZE"]) if torchrun else args.world
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    device_type = args.device or ("cuda" if gpus >= world else "cpu")
    if device_type == "cuda" and gpus < world:
        print("--device cuda: %d ranks need %d GPUs, found %d" % (world, world, gpus))
        return 2
    if torchrun:
        rank_main(int(os.environ["RANK"]), world, device_type, "env://", args)
        return 0
    import torch.multiprocessing as mp
    with tempfile.TemporaryDirectory(prefix="ropekv-tp-") as d:
        try:
            mp.spawn(rank_main, args=(world, device_type, "file://" + os.path.join(d, "rendezvous"), args),
                     nprocs=world)
        except mp.ProcessRaisedException as e:
            print("FAIL: %s" % str(e).strip().splitlines()[-1])
            return 1
        except mp.ProcessExitedException as e:
            print("FAIL: %s" % e)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
