"""A model whose layers use different masks, trained on 4 processes (torch.distributed gloo,
CPU) with one dcp plan per batch for both of its layer kinds, against the same training in
one process with plain PyTorch attention in float64.

Two transformer blocks alternate a global (causal) layer and a sliding-window layer, as
Gemma 3 and GPT-OSS do, and every layer has GPT-OSS's learnable sinks (a logit per query head
in each row's softmax, trained like any parameter: each rank's part of its gradient, summed
over the ranks). Each step plans its batch once with
dcp.torch.plan(lengths, {"global": "causal", "local": "window:W"}, ...): one placement of the
tokens (each rank holds its rows for both layers: embedding, MLPs and loss on those rows
only) and a program pair per kind; every attention call names its kind. The model runs in
float64 on both sides, so the only difference is dcp's fp32 attention: the losses and the
final parameters must agree with the float64 reference within TOL_REL of the largest value
and within twice what plain fp32 attention gives (plus a floor), as in test_training.py.
Before the job, the two kinds run through attention_inproc against the reference (forward
and gradients, the sinks' too) and a kind the plan does not have is refused by name; in the
job's first step every attention call also returns the max logit, which must be the same on
every rank and equal the reference's over the whole batch.

    PYTHONPATH=plugin/python python3 tests/torch/test_layers.py
"""
import os
import random
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import reference as ref

WORLD, STEPS, TOKENS, SCALE, MAX_LEN, BLOCK = 4, 4, 768, 16, 384, 32
KINDS = {"global": "causal", "local": "window:40"}
VOCAB, DM, HQ, HKV, HD, HIDDEN, LR = 97, 32, 4, 2, 8, 64, 0.5
TOL_REL = 1e-5


def batches():
    """The steps' batches: lengths, tokens and targets (the same in every process)."""
    rng = random.Random(4321)
    g = torch.Generator().manual_seed(4321)
    out = []
    for _ in range(STEPS):
        lengths, source = ref.sample_lengths(rng, TOKENS, SCALE, MAX_LEN)
        tokens = torch.randint(VOCAB, (sum(lengths),), generator=g)
        out.append({"lengths": lengths, "source": source, "tokens": tokens,
                    "targets": (5 * tokens + 2) % VOCAB})
    return out


class Layer(torch.nn.Module):
    """Pre-norm GQA attention with learnable sinks (the attention function given per call)
    and an MLP."""

    def __init__(self):
        super().__init__()
        self.sinks = torch.nn.Parameter(torch.randn(HQ))
        self.ln1, self.ln2 = torch.nn.LayerNorm(DM), torch.nn.LayerNorm(DM)
        self.wq = torch.nn.Linear(DM, HQ * HD, bias=False)
        self.wkv = torch.nn.Linear(DM, 2 * HKV * HD, bias=False)
        self.wo = torch.nn.Linear(HQ * HD, DM)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(DM, HIDDEN), torch.nn.GELU(),
                                       torch.nn.Linear(HIDDEN, DM))

    def forward(self, x, attend):
        h = self.ln1(x)
        t = x.shape[0]
        q = self.wq(h).view(t, HQ, HD)
        k, v = self.wkv(h).view(t, 2, HKV, HD).unbind(1)
        x = x + self.wo(attend(q, k, v, self.sinks).reshape(t, HQ * HD))
        return x + self.mlp(self.ln2(x))


class Model(torch.nn.Module):
    """Embedding, a global layer, a local (window) layer, head."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, DM)
        self.layers = torch.nn.ModuleList([Layer(), Layer()])
        self.kinds = ["global", "local"]
        self.head = torch.nn.Linear(DM, VOCAB)

    def forward(self, tokens, attend):
        x = self.emb(tokens)
        for layer, kind in zip(self.layers, self.kinds):
            x = layer(x, lambda q, k, v, s, kind=kind: attend(q, k, v, s, kind))
        return self.head(x)


def model():
    torch.manual_seed(0)
    return Model().double()


def train_single(attn_dtype):
    """The reference: all tokens in one process, plain PyTorch attention in attn_dtype."""
    def batch_loss(m, b):
        def attend(q, k, v, sinks, kind):
            masks = [KINDS[kind]] * len(b["lengths"])
            return ref.attention(q.to(attn_dtype), k.to(attn_dtype), v.to(attn_dtype),
                                 b["lengths"], masks, sinks=sinks.to(attn_dtype)).double()
        return torch.nn.functional.cross_entropy(m(b["tokens"], attend), b["targets"],
                                                 reduction="sum") / len(b["tokens"])
    return ref.train_reference(model(), batches(), batch_loss, LR)


def plan_of(dt, b, cluster):
    return dt.plan(b["lengths"], KINDS, cluster, q_heads=HQ, kv_heads=HKV, head_dim=HD,
                   dtype=torch.float32, block_size=BLOCK, strategy="metis",
                   layers={"global": 1, "local": 3})


def worker(rank, rdzv, out):
    import dcp.torch as dt
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + rdzv, rank=rank, world_size=WORLD)
    data = batches()
    max_logit_err = 0.0
    with dt.Context() as ctx:
        m = model()
        losses, stats = [], []
        for step, b in enumerate(data):
            plan = plan_of(dt, b, ctx)
            idx = plan.local_indices(rank)

            def attend(q, k, v, sinks, kind):
                nonlocal max_logit_err
                if step > 0:
                    return dt.attention(ctx, plan, q.float(), k.float(), v.float(), kind=kind,
                                        sinks=sinks).double()
                o, ml = dt.attention(ctx, plan, q.float(), k.float(), v.float(), kind=kind,
                                     sinks=sinks, return_max_logit=True)
                # the batch's max logit: every rank's equal, and the reference's over all rows
                every = [torch.empty_like(ml) for _ in range(WORLD)]
                dist.all_gather(every, ml)
                with torch.no_grad():
                    full = [plan.undispatch(x.detach().float(), ctx).double() for x in (q, k, v)]
                    _, want = ref.attention(*full, b["lengths"], [KINDS[kind]] * len(b["lengths"]),
                                            return_max_logit=True)
                err = max((e.double() - want).abs().max().item() for e in every)
                max_logit_err = max(max_logit_err, err / want.abs().max().item())
                return o.double()
            loss = torch.nn.functional.cross_entropy(m(b["tokens"][idx], attend),
                                                     b["targets"][idx],
                                                     reduction="sum") / len(b["tokens"])
            loss.backward()
            for p in m.parameters():
                dist.all_reduce(p.grad)
            total = loss.detach().clone()
            dist.all_reduce(total)
            losses.append(total.item())
            ref.sgd(m, LR)
            stats.append({k: plan.stats(k) for k in KINDS})
    if rank == 0:
        torch.save({"losses": losses, "stats": stats, "max_logit_err": max_logit_err,
                    "params": {n: p.detach().clone() for n, p in m.named_parameters()}}, out)
    dist.destroy_process_group()


def check_inproc():
    """Both kinds of one plan on 4 in-process ranks against the reference; a bad kind named."""
    import dcp.torch as dt
    b = batches()[0]
    plan = plan_of(dt, b, "1x4")
    ok = plan.kinds == list(KINDS) and plan.num_kinds == 2
    g = torch.Generator().manual_seed(7)
    t = sum(b["lengths"])
    q = torch.randn(t, HQ, HD, generator=g, dtype=torch.float64, requires_grad=True)
    k = torch.randn(t, HKV, HD, generator=g, dtype=torch.float64, requires_grad=True)
    v = torch.randn(t, HKV, HD, generator=g, dtype=torch.float64, requires_grad=True)
    dout = torch.randn(t, HQ, HD, generator=g, dtype=torch.float64)
    sinks = torch.randn(HQ, generator=g, dtype=torch.float64, requires_grad=True)
    idx = [plan.local_indices(r) for r in range(4)]
    for kind, spec in KINDS.items():
        want = ref.attention(q, k, v, b["lengths"], [spec] * len(b["lengths"]), sinks=sinks)
        wq, wk, wv, ws = torch.autograd.grad(want, (q, k, v, sinks), dout)
        outs = dt.attention_inproc(plan, [q[i].float() for i in idx], [k[i].float() for i in idx],
                                   [v[i].float() for i in idx], kind=kind, sinks=sinks)
        got = torch.empty_like(want)
        for i, o in zip(idx, outs):
            got[i] = o.double()
        gq, gk, gv, gs = torch.autograd.grad(got, (q, k, v, sinks), dout)
        errs = [ref.max_err(a, w) / ref.peak(w) for a, w in
                ((got, want), (gq, wq), (gk, wk), (gv, wv), (gs, ws))]
        print("  inproc %-6s (%s): rel err O %.2e, dQ %.2e, dK %.2e, dV %.2e, d sinks %.2e" %
              (kind, spec, *errs))
        ok &= max(errs) <= 1e-5
    try:
        dt.attention_inproc(plan, [q[i].float() for i in idx], [k[i].float() for i in idx],
                            [v[i].float() for i in idx], kind="remote")
        ok = False
        print("FAIL: a kind the plan does not have was accepted")
    except ValueError as e:
        ok &= "remote" in str(e)
    return ok


def main():
    ok = check_inproc()
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.pt")
        mp.spawn(worker, args=(os.path.join(tmp, "rdzv"), out), nprocs=WORLD, join=True)
        got = torch.load(out)
    t_dcp = time.perf_counter() - t_start
    want_losses, want_params = train_single(torch.float64)
    f32_losses, f32_params = train_single(torch.float32)
    data = batches()
    print("  %d processes (gloo), %d steps, %s scaled 1/%d, layer kinds %s" %
          (WORLD, STEPS, data[0]["source"], SCALE, KINDS))
    for step, (b, s) in enumerate(zip(data, got["stats"])):
        print("  step %d %2d seqs  loss %.10f (ref %.10f)  predicted ms: global %.3f x%d, "
              "local %.3f x%d, model %.3f" %
              (step, len(b["lengths"]), got["losses"][step], want_losses[step],
               s["global"]["predicted_ms"] + s["global"]["bwd_predicted_ms"],
               s["global"]["layers"], s["local"]["predicted_ms"] + s["local"]["bwd_predicted_ms"],
               s["local"]["layers"], s["global"]["model_step_ms"]))
        ok &= s["global"]["num_kinds"] == 2 and s["local"]["kind"] == 1
    ok &= ref.training_agrees(got["losses"], got["params"], (want_losses, want_params),
                              (f32_losses, f32_params), TOL_REL)
    print("  max logit of step 0's layers: every rank's equal to the reference's within %.2e "
          "(relative)" % got["max_logit_err"])
    ok &= got["max_logit_err"] <= TOL_REL
    print("layer kinds: %s (%.1f s with 4 processes)" % ("ok" if ok else "FAILED", t_dcp))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
