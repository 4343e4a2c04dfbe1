# The README's "From PyTorch" example: one rank per process, run by tests/torch/run.sh and by
# the README's own command (tests/readme/check.py) under torchrun with 2 processes.
import torch
import torch.distributed as dist
import dcp.torch as dt

dist.init_process_group("gloo")                    # torchrun gives rank and size; or "nccl"
with dt.Context() as ctx:                          # dcp's bootstrap: allgathers over the group
    lengths = [3000, 500, 1200, 700]               # this batch's documents, in tokens
    g = torch.Generator().manual_seed(0)           # the same whole batch on every rank
    q, k, v = (torch.randn(sum(lengths), h, 64, generator=g) for h in (8, 2, 2))
    plan = dt.plan(lengths, "causal", ctx, like=(q, k), block_size=256)  # shapes from q, k
    idx = plan.local_indices(ctx.rank)             # this rank's tokens, in its row order
    pos = plan.local_positions(ctx.rank)           # their positions in their documents (RoPE)
    lq, lk, lv = (x[idx].requires_grad_() for x in (q, k, v))
    o, lse = dt.attention(ctx, plan, lq, lk, lv, return_lse=True)  # [tokens, heads, 64]
    o.square().sum().backward()                    # dcp's backward: lq.grad, lk.grad, lv.grad
    full = plan.undispatch(o, ctx)                 # every rank's rows, in the global order
    print("rank %d: %d of %d tokens (positions %d..%d), |dq| %.3f, global O %s" %
          (ctx.rank, len(idx), sum(lengths), pos.min(), pos.max(), lq.grad.norm(),
           list(full.shape)))
dist.destroy_process_group()
