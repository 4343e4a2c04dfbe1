"""Training through dcp: a small transformer block trained on 4 processes (torch.distributed
gloo, CPU) with its attention through dcp, checked against the same training in one process
with plain PyTorch attention.

Every step is a batch of variable-length documents drawn from the WLB-LLM lengths (scaled
down), each document with its own mask (causal, sliding window, lambda, blockwise, shared
question, full, by turns). Each rank holds the tokens its plan gives it (embedding, MLP and
loss on those rows only); rotary position embeddings take each row's position in its own
document from Plan.local_positions; the attention runs through dcp.torch.attention (fp32 in
dcp) and parameter gradients are summed over the ranks. The planner service plans batches
k+1 and k+2 while batch k trains; every rank plans (plans are deterministic) and the ranks
check that their plans are byte-identical.

The model runs in float64 on both sides, so the only difference is dcp's fp32 attention:
the loss curve and the final parameters must agree with the float64 reference within
TOL_REL (relative to the largest value), and within twice what plain PyTorch attention in
fp32 gives (plus a floor for the gradient-summation order), which is the scale a correct
fp32 attention shows.

    python3 tests/torch/train.py                          # 4 processes of its own, or
    torchrun --nproc_per_node 4 tests/torch/train.py      # (add --redirects 1 --tee 1 on
                                                          #  Debian 12's PyTorch 1.13)
"""
import os
import random
import sys
import tempfile
import time
import zlib

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import reference as ref

WORLD, STEPS, TOKENS, SCALE, MAX_LEN, BLOCK = 4, 8, 1024, 16, 384, 32
MASKS = ["causal", "window:48", "lambda:8:40", "blockwise:32:2", "shared-question:0.2:3",
         "full"]
VOCAB, DM, HQ, HKV, HD, HIDDEN, LR = 97, 32, 4, 2, 8, 64, 0.5
TOL_REL = 1e-5


def batches():
    """The steps' batches: lengths, a mask per document, tokens and targets (the same in
    every process)."""
    rng = random.Random(1234)
    g = torch.Generator().manual_seed(1234)
    out = []
    for step in range(STEPS):
        lengths, source = ref.sample_lengths(rng, TOKENS, SCALE, MAX_LEN)
        t = sum(lengths)
        masks = [MASKS[(step + i) % len(MASKS)] for i in range(len(lengths))]
        out.append({"lengths": lengths, "masks": masks, "source": source,
                    "tokens": torch.randint(VOCAB, (t,), generator=g),
                    "targets": None})
        b = out[-1]
        b["targets"] = (3 * b["tokens"] + 1) % VOCAB  # learnable
    return out


def positions(lengths):
    """Every token's position in its own document, in the batch's order."""
    return torch.cat([torch.arange(n) for n in lengths])


def rope(x, pos):
    """Rotary position embedding of x [tokens, heads, HD] at positions pos [tokens]."""
    half = HD // 2
    freq = 10000.0 ** (-torch.arange(half, dtype=x.dtype) / half)
    angle = pos.to(x.dtype).unsqueeze(1) * freq  # [tokens, half]
    cos, sin = angle.cos().unsqueeze(1), angle.sin().unsqueeze(1)
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)


class Block(torch.nn.Module):
    """Embedding, pre-norm GQA attention with RoPE (attention function given per call),
    MLP, head."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, DM)
        self.ln1, self.ln2 = torch.nn.LayerNorm(DM), torch.nn.LayerNorm(DM)
        self.wq = torch.nn.Linear(DM, HQ * HD, bias=False)
        self.wkv = torch.nn.Linear(DM, 2 * HKV * HD, bias=False)
        self.wo = torch.nn.Linear(HQ * HD, DM)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(DM, HIDDEN), torch.nn.GELU(),
                                       torch.nn.Linear(HIDDEN, DM))
        self.head = torch.nn.Linear(DM, VOCAB)

    def forward(self, tokens, pos, attend):
        x = self.emb(tokens)
        h = self.ln1(x)
        t = x.shape[0]
        q = rope(self.wq(h).view(t, HQ, HD), pos)
        k, v = self.wkv(h).view(t, 2, HKV, HD).unbind(1)
        k = rope(k, pos)
        x = x + self.wo(attend(q, k, v).reshape(t, HQ * HD))
        x = x + self.mlp(self.ln2(x))
        return self.head(x)


def model():
    torch.manual_seed(0)
    return Block().double()


def sgd(m):
    ref.sgd(m, LR)


def train_single(attn_dtype):
    """The reference: all tokens in one process, plain PyTorch attention in attn_dtype."""
    m = model()
    losses = []
    for b in batches():
        def attend(q, k, v):
            return ref.attention(q.to(attn_dtype), k.to(attn_dtype), v.to(attn_dtype),
                                 b["lengths"], b["masks"]).double()
        logits = m(b["tokens"], positions(b["lengths"]), attend)
        loss = torch.nn.functional.cross_entropy(logits, b["targets"], reduction="sum")
        loss = loss / len(b["tokens"])
        loss.backward()
        losses.append(loss.item())
        sgd(m)
    return losses, {n: p.detach().clone() for n, p in m.named_parameters()}


def submit(planner, b):
    return planner.submit(b["lengths"], b["masks"], q_heads=HQ, kv_heads=HKV, head_dim=HD,
                          dtype=torch.float32, block_size=BLOCK, strategy="metis")


def worker(rank, rdzv, out):
    """One rank's training; rank 0 saves the results to `out` (or returns them: torchrun)."""
    import dcp.torch as dt
    torch.set_num_threads(1)
    if rdzv:
        dist.init_process_group("gloo", init_method="file://" + rdzv, rank=rank,
                                world_size=WORLD)
    else:  # torchrun gives the rendezvous
        dist.init_process_group("gloo")
    data = batches()
    with dt.Context() as ctx:
        planner = dt.Planner(ctx, num_threads=1)
        tickets = {k: submit(planner, data[k]) for k in range(min(2, STEPS))}
        m = model()
        losses, timing, crcs = [], [], []
        for step, b in enumerate(data):
            t0, waited = time.perf_counter(), planner.stats()["wait_ms"]
            # README: begin training step
            plan = planner.wait(tickets.pop(step))      # planned during the earlier steps
            for ahead in (step + 1, step + 2):          # batches k+1, k+2 plan while k trains
                if ahead < STEPS and ahead not in tickets:
                    tickets[ahead] = submit(planner, data[ahead])
            idx = plan.local_indices(rank)              # this rank's tokens, in row order
            pos = plan.local_positions(rank)            # their positions in their documents

            def attend(q, k, v):                        # [local tokens, heads, head_dim]
                return dt.attention(ctx, plan, q.float(), k.float(), v.float()).double()
            logits = m(b["tokens"][idx], pos, attend)   # RoPE at pos inside the model
            loss = torch.nn.functional.cross_entropy(logits, b["targets"][idx],
                                                     reduction="sum") / len(b["tokens"])
            loss.backward()
            for p in m.parameters():                    # data parallel over the ranks
                dist.all_reduce(p.grad)
            sgd(m)
            # README: end training step
            total = loss.detach().clone()
            dist.all_reduce(total)
            losses.append(total.item())
            crcs.append(zlib.crc32(plan.to_bytes()))
            timing.append({"plan_ms": plan.stats()["plan_ms"],
                           "wait_ms": planner.stats()["wait_ms"] - waited,
                           "step_ms": (time.perf_counter() - t0) * 1e3,
                           "local": len(idx), "strategy": plan.stats()["strategy"]})
        # an identical batch again: served from the planner's cache, the same bytes
        first = planner.wait(submit(planner, data[0])).to_bytes()
        service = planner.stats()
        planner.close()
        all_crcs = [None] * WORLD
        dist.all_gather_object(all_crcs, crcs + [zlib.crc32(first)])
        transport = ctx.transport()
    dist.destroy_process_group()
    if rank == 0:
        got = {"losses": losses, "timing": timing, "crcs": all_crcs, "transport": transport,
               "service": service,
               "params": {n: p.detach().clone() for n, p in m.named_parameters()}}
        if out is None:
            return got
        torch.save(got, out)
    return None


def main():
    t_start = time.perf_counter()
    if "RANK" in os.environ:  # under torchrun: this process is one rank, rank 0 checks
        if int(os.environ.get("WORLD_SIZE", 0)) != WORLD:
            print("train.py: run it with --nproc_per_node %d" % WORLD)
            return 1
        got = worker(int(os.environ["RANK"]), None, None)
        if got is None:
            return 0
    else:
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "result.pt")
            mp.spawn(worker, args=(os.path.join(tmp, "rdzv"), out), nprocs=WORLD, join=True)
            got = torch.load(out)
    t_dcp = time.perf_counter() - t_start
    want_losses, want_params = train_single(torch.float64)
    f32_losses, f32_params = train_single(torch.float32)

    data = batches()
    print("  %d processes (gloo + dcp over %s), %d steps, %s scaled 1/%d: %s tokens" %
          (WORLD, got["transport"], STEPS, data[0]["source"], SCALE,
           "/".join(str(sum(b["lengths"])) for b in data)))
    for step, (b, t) in enumerate(zip(data, got["timing"])):
        hidden = max(0.0, t["plan_ms"] - t["wait_ms"])
        print("  step %d %d mask kinds %2d docs  loss %.10f (ref %.10f)  plan %.2f ms (%s), waited "
              "%.2f ms, hidden %.2f ms  step %.1f ms" %
              (step, len({m.split(":")[0] for m in b["masks"]}),
               len(b["lengths"]), got["losses"][step], want_losses[step],
               t["plan_ms"], t["strategy"], t["wait_ms"], hidden, t["step_ms"]))
    later = got["timing"][1:]
    hidden = [max(0.0, t["plan_ms"] - t["wait_ms"]) for t in later]
    planned = [t["plan_ms"] for t in later]
    svc = got["service"]
    same = all(c == got["crcs"][0] for c in got["crcs"])
    cached = all(c[-1] == c[0] for c in got["crcs"]) and svc["cache_hits"] >= 1
    ok = ref.training_agrees(got["losses"], got["params"], (want_losses, want_params),
                             (f32_losses, f32_params), TOL_REL)
    print("  planning hidden per step (steps 1..%d, batches k+1, k+2 planned during step k): "
          "%.2f of %.2f ms on average (%.0f%%)" %
          (STEPS - 1, sum(hidden) / len(hidden), sum(planned) / len(planned),
           100.0 * sum(hidden) / max(sum(planned), 1e-9)))
    print("  rank 0's planner service: %d tickets, %d planned, %d from the cache, workers "
          "%.1f ms, callers waited %.1f ms; plans byte-identical on all ranks: %s" %
          (svc["submitted"], svc["planned"], svc["cache_hits"], svc["plan_ms"], svc["wait_ms"],
           same))
    if not same:
        print("FAIL: the ranks' plans differ: %s" % got["crcs"])
        ok = False
    if not cached:
        print("FAIL: the repeated batch was not served from the cache with the same bytes")
        ok = False
    print("training loop: %s (%.1f s with 4 processes)" % ("ok" if ok else "FAILED", t_dcp))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
