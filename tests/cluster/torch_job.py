# One rank of a torchrun job on the emulated cluster (tests/cluster/run.sh: one torchrun per
# host, gloo over the bridge). dcp's context, bootstrapped over the torch.distributed group,
# must find the hosts as nodes (the plan's cluster has as many nodes as there are hosts and
# moves bytes between them); every rank checks its rows of O and of the gradients of q, k
# and v against plain PyTorch attention of the whole batch.
#   torchrun --nnodes H --node_rank I ... tests/cluster/torch_job.py HOSTS
import os
import sys

import torch
import torch.distributed as dist

sys.stderr = sys.stdout  # torchrun 1.13 keeps stdout only (--redirects 1)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "torch"))
import reference  # noqa: E402  (also puts plugin/python on the path)
import dcp.torch as dt  # noqa: E402

hosts = int(sys.argv[1])
dist.init_process_group("gloo")
rank, size = dist.get_rank(), dist.get_world_size()
lengths, mask = [700, 200, 900, 300], "causal"
torch.manual_seed(0)  # the same whole batch on every rank
n = sum(lengths)
full = [torch.randn(n, h, 64, dtype=torch.float64) for h in (4, 2, 2)]
dout = torch.randn(n, 4, 64, dtype=torch.float64)
with dt.Context() as ctx:
    # zigzag over the whole group: the default would rightly keep each document inside one
    # host on these 1 Gbit/s links, and this job is here to move bytes between hosts
    plan = dt.plan(lengths, mask, ctx, q_heads=4, kv_heads=2, head_dim=64, dtype=torch.float32,
                   block_size=128, strategy="zigzag")
    st = plan.stats()
    if st["num_nodes"] != hosts or st["inter_node_bytes"] <= 0:
        raise SystemExit("rank %d: the plan sees %d nodes and moves %d bytes between them; "
                         "want %d hosts" % (rank, st["num_nodes"], st["inter_node_bytes"], hosts))
    idx = plan.local_indices(rank)
    q, k, v = (x[idx].float().requires_grad_() for x in full)
    o = dt.attention(ctx, plan, q, k, v)
    o.backward(dout[idx].float())
    ref = [x.clone().requires_grad_() for x in full]
    ro = reference.attention(*ref, lengths, [mask] * len(lengths))
    ro.backward(dout)
    errs = [reference.max_err(a, b[idx]) / reference.peak(b)
            for a, b in ((o, ro), (q.grad, ref[0].grad), (k.grad, ref[1].grad),
                         (v.grad, ref[2].grad))]
    if max(errs) > 1e-5:
        raise SystemExit("rank %d: O, dq, dk, dv relative errors %s" % (rank, errs))
    print("rank %d of %d on %s: %d nodes, %s between nodes, %d tokens here, max rel err %.1e"
          % (rank, size, os.uname().nodename, st["num_nodes"], ctx.transport(True), len(idx),
             max(errs)))
dist.destroy_process_group()
