# The README's "From PyTorch" example: one rank per process, run by tests/torch/run.sh as
#   PYTHONPATH=plugin/python torchrun --nproc_per_node 2 tests/torch/example.py
import torch
import torch.distributed as dist
import dcp.torch as dt

dist.init_process_group("gloo")                   # torchrun gives rank and size; or "nccl"
rank = dist.get_rank()
with dt.Context() as ctx:                         # dcp's bootstrap: allgathers over the group
    lengths = [3000, 500, 1200, 700]              # this batch's sequences, in tokens
    plan = dt.plan(lengths, "causal", ctx, q_heads=8, kv_heads=2, head_dim=64,
                   dtype=torch.float32, block_size=256)
    idx = plan.local_indices(rank)                # this rank's tokens, in its row order
    g = torch.Generator().manual_seed(0)          # the same full batch on every rank
    q, k, v = (torch.randn(sum(lengths), h, 64, generator=g)[idx].requires_grad_()
               for h in (8, 2, 2))                # [tokens, heads, head_dim] rows
    o = dt.attention(ctx, plan, q, k, v)          # differentiable: dcp's backward
    o.square().sum().backward()                   # q.grad, k.grad, v.grad
    print("rank %d: %d of %d tokens, |dq| %.3f" % (rank, len(idx), sum(lengths), q.grad.norm()))
dist.destroy_process_group()
