#!/usr/bin/env python3
"""The PyTorch CUDA path on one GPU against a float64 reference, forward and gradients.

  attention_inproc  every rank of a 4-rank plan on the one GPU (bf16 and fp16, several masks)
  attention         one rank per process through a dcp.torch.Context (a one-process gloo
                    group), the tensors on the GPU, autograd through dcp_backward
  nccl_comm=group   the same through a Context whose NCCL engine runs on the communicator of
                    an NCCL group made for it (dist.new_group(backend="nccl"); PyTorch's own,
                    lent with nccl_comm="group"), which still serves the group afterwards; a
                    PyTorch that does not expose it is reported as such (--only nccl_comm: this
                    case, and only this one, runs)

Each case is held to FlashAttention's rule: dcp's max error against the float64 reference
is at most twice that of plain PyTorch attention in the same dtype on the GPU, plus one
rounding step of the largest reference value (tests/torch/test_attention.py's rule). Prints
one line per case (--json: one JSON object per case) and exits 1 when any case fails, 2
when there is no CUDA device. Run by tests/perf/gpu_check.sh.

    PYTHONPATH=plugin/python DCP_LIB=build/lib/libdcp.so python3 tests/perf/torch_cuda_check.py
"""
import argparse
import json
import os
import random
import sys
import tempfile

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "torch"))
import reference as ref  # noqa: E402
import dcp.torch as dt  # noqa: E402

LENGTHS = [700, 37, 300, 1, 129]
HQ, HKV, D = 8, 2, 128
MASKS = ["full", "causal", "lambda:16:200", "blockwise:64:2", "shared-question:0.2:3"]


def inputs(dtype, seed):
    g = torch.Generator().manual_seed(seed)
    t = sum(LENGTHS)
    return [torch.randn(t, h, D, generator=g, dtype=torch.float64).to(dtype)
            for h in (HQ, HKV, HKV, HQ)]


def run_torch(q, k, v, dout, masks):
    leaves = [x.detach().clone().requires_grad_() for x in (q, k, v)]
    o = ref.attention(*leaves, LENGTHS, masks)
    o.backward(dout)
    return (o.detach(),) + tuple(x.grad for x in leaves)


def gather(idx, parts, like):
    full = torch.zeros_like(like)
    for i, p in zip(idx, parts):
        full[i] = p.detach().to(like.device)
    return full


def run_inproc(plan, q, k, v, dout):
    idx = [plan.local_indices(r, device=q.device) for r in range(plan.num_ranks)]
    leaves = [[x[i].detach().clone().requires_grad_() for i in idx] for x in (q, k, v)]
    outs = dt.attention_inproc(plan, *leaves)
    torch.autograd.backward(outs, [dout[i] for i in idx])
    return (gather(idx, outs, q), gather(idx, [x.grad for x in leaves[0]], q),
            gather(idx, [x.grad for x in leaves[1]], k), gather(idx, [x.grad for x in leaves[2]], v))


def run_rank(ctx, plan, q, k, v, dout):
    idx = plan.local_indices(0, device=q.device)
    leaves = [x[idx].detach().clone().requires_grad_() for x in (q, k, v)]
    o = dt.attention(ctx, plan, *leaves)
    o.backward(dout[idx])
    torch.cuda.synchronize()
    return (gather([idx], [o], q), gather([idx], [leaves[0].grad], q),
            gather([idx], [leaves[1].grad], k), gather([idx], [leaves[2].grad], v))


def judge(path, mask, dtype, got, want, plain):
    step = 2.0 ** (-8 if dtype == torch.bfloat16 else -11)
    row = {"path": path, "mask": mask, "dtype": str(dtype).replace("torch.", ""), "passed": True}
    for name, a, w, p in zip(("o", "dq", "dk", "dv"), got, want, plain):
        a, p = a.cpu().double(), p.cpu().double()
        err, low, top = ref.max_err(a, w), ref.max_err(p, w), ref.peak(w)
        ok = bool(torch.isfinite(a).all()) and err <= 2 * low + step * top
        row[name + "_err"], row[name + "_plain_err"] = err, low
        row["passed"] &= ok
    return row


def lent_group_comm():
    """attention through a Context lent the communicator of an NCCL group made for it: checked
    as the others, then the group still runs a collective of its own (dcp did not destroy it)."""
    import torch.distributed as dist
    kind = "causal"
    torch.cuda.set_device(0)
    group = dist.new_group([0], backend="nccl")
    try:
        ctx = dt.Context(group=group, device="cuda:0", nccl_comm="group")
    except ValueError as e:  # this PyTorch does not expose the communicator
        return {"path": "attention nccl_comm=group", "mask": kind, "dtype": "bfloat16",
                "passed": None, "skipped": str(e)}
    with ctx:
        report = ctx.transport_report
        masks = [kind] * len(LENGTHS)
        x = inputs(torch.bfloat16, 13)
        want = run_torch(*(t.double() for t in x), masks)
        plain = run_torch(*(t.cuda() for t in x), masks)
        plan = dt.plan(LENGTHS, masks, ctx.cluster, q_heads=HQ, kv_heads=HKV, head_dim=D,
                       dtype=torch.bfloat16, block_size=128)
        row = judge("attention nccl_comm=group", kind, torch.bfloat16,
                    run_rank(ctx, plan, *(t.cuda() for t in x)), want, plain)
        ctx.synchronize()
    row["report"] = report
    row["passed"] &= "engine nccl" in report
    one = torch.ones(1, device="cuda:0")
    dist.all_reduce(one, group=group)  # the group's communicator outlived the context
    torch.cuda.synchronize()
    row["group_after"] = float(one.item())
    row["passed"] &= row["group_after"] == 1.0
    dist.destroy_process_group(group)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true", help="one JSON object per case")
    ap.add_argument("--masks", default=",".join(MASKS), help="comma-separated mask specs")
    ap.add_argument("--only", choices=["nccl_comm"], help="one case alone")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("torch_cuda_check: no CUDA device")
        return 2
    masks_list = args.masks.split(",")
    rows = []
    for dtype in (torch.bfloat16, torch.float16) if not args.only else ():
        for kind in masks_list:
            masks = [kind] * len(LENGTHS)
            x = inputs(dtype, 9)
            want = run_torch(*(t.double() for t in x), masks)
            plain = run_torch(*(t.cuda() for t in x), masks)
            plan = dt.plan(LENGTHS, masks, "1x4", q_heads=HQ, kv_heads=HKV, head_dim=D,
                           dtype=dtype, block_size=128, strategy="metis")
            rows.append(judge("attention_inproc", kind, dtype,
                              run_inproc(plan, *(t.cuda() for t in x)), want, plain))
    # one rank per process: a one-process gloo group, the context on the GPU
    import torch.distributed as dist
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("gloo", init_method="file://" + os.path.join(tmp, "store"),
                                rank=0, world_size=1)
        try:
            with dt.Context(device="cuda:0") as ctx:
                for kind in ("causal", masks_list[-1]) if not args.only else ():
                    masks = [kind] * len(LENGTHS)
                    x = inputs(torch.bfloat16, 11)
                    want = run_torch(*(t.double() for t in x), masks)
                    plain = run_torch(*(t.cuda() for t in x), masks)
                    plan = dt.plan(LENGTHS, masks, ctx.cluster, q_heads=HQ, kv_heads=HKV,
                                   head_dim=D, dtype=torch.bfloat16, block_size=128)
                    rows.append(judge("attention", kind, torch.bfloat16,
                                      run_rank(ctx, plan, *(t.cuda() for t in x)), want, plain))
            if args.only:  # run alone (gpu_check.sh's gpupath step), not with the rest
                rows.append(lent_group_comm())
        finally:
            dist.destroy_process_group()
    for r in rows:
        if args.json:
            print(json.dumps(r))
        elif r.get("skipped"):
            print("%-16s SKIPPED: %s" % (r["path"], r["skipped"]))
        else:
            print("%-16s %-24s %-8s %s  O %.2e (plain %.2e)  dQ %.2e (plain %.2e)" %
                  (r["path"], r["mask"], r["dtype"], "PASS" if r["passed"] else "FAIL",
                   r["o_err"], r["o_plain_err"], r["dq_err"], r["dq_plain_err"]))
    return 0 if all(r["passed"] is not False for r in rows) else 1  # None: skipped, said so


if __name__ == "__main__":
    random.seed(0)
    sys.exit(main())
