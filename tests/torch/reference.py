"""Plain PyTorch attention over a batch of variable-length sequences, for checking dcp.

The masks follow partition/README.md's table, written here again from it (not through libdcp),
so that a mask bug in dcp cannot hide in its own reference. Tensors are THD: [tokens, heads,
head_dim], the sequences concatenated.
"""
import math
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "plugin", "python"))

# DCP's parameters for the bare specs (dcp.h, dcp_mask_parse)
_DEFAULTS = {"window": [4096], "lambda": [64, 4096], "blockwise": [256, 2],
             "shared-question": [0.2, 4]}


def mask_matrix(spec, length):
    """[length, length] bool: query i may attend key j. spec: a mask string or a custom mask
    (an [L, 4] tensor of (s0, e0, s1, e1) per query)."""
    i = torch.arange(length).unsqueeze(1)
    j = torch.arange(length).unsqueeze(0)
    if not isinstance(spec, str):
        r = torch.as_tensor(spec).long()
        s0, e0, s1, e1 = (r[:, c].unsqueeze(1) for c in range(4))
        return ((j >= s0) & (j < e0)) | ((j >= s1) & (j < e1))
    kind, *params = spec.split(":")
    if kind in _DEFAULTS and not params:
        params = _DEFAULTS[kind]
    causal = j <= i
    if kind == "full":
        return torch.ones(length, length, dtype=torch.bool)
    if kind == "causal":
        return causal
    if kind == "window":
        w = int(params[0])
        return causal & (j > i - w)
    if kind == "lambda":
        s, w = int(params[0]), int(params[1])
        return causal & ((j < s) | (j > i - w))
    if kind == "blockwise":
        b, k = int(params[0]), int(params[1])
        n = -(-length // b)
        c = i // b
        edge = (c == 0) | (c == n - 1)
        lo = torch.clamp(i - k * b, min=b)
        return causal & (edge | (j < b) | (j >= lo))
    if kind == "shared-question":
        p, a = float(params[0]), int(params[1])
        q = math.floor(length * p)
        m = (length - q) // a
        r = torch.clamp((i - q) // m, max=a - 1) if m else torch.zeros_like(i)
        st = q + r * m
        answer = (j < q) | (j >= st)
        return causal & ((i < q) | answer)
    raise ValueError("unknown mask %r" % spec)


def random_custom(length, rng):
    """A custom mask: two random ranges per query, some queries with no key at all."""
    rows = []
    for _ in range(length):
        if rng.random() < 0.1:
            s = rng.randrange(length + 1)
            rows.append((s, s, s, s))
        else:
            rows.append(tuple(sorted(rng.randrange(length + 1) for _ in range(4))))
    return torch.tensor(rows, dtype=torch.int32)


def attention(q, k, v, lengths, masks, scale=None, return_lse=False, sinks=None, softcap=0.0,
              return_max_logit=False):
    """Masked softmax attention per sequence in q's dtype (plain PyTorch, differentiable);
    GQA by repeating KV heads; v's head dim may differ from q's and k's (MLA); a query with no
    allowed key gets 0 (and LSE -inf). softcap c: every scaled score becomes c tanh(s / c)
    before the mask (Gemma 2). sinks [Hq]: one more logit per query head in every row's
    softmax, with no value (GPT-OSS's reference: the sink column is concatenated to the
    scores, the softmax taken, the column dropped); a row with no allowed key then gets O = 0
    and LSE = its sink. With return_lse also the [tokens, heads] log-sum-exp; with
    return_max_logit the [heads] largest (capped) score of an allowed pair over the batch,
    sinks excluded (-inf for a head with none)."""
    hq, hkv, d = q.shape[1], k.shape[1], q.shape[2]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    outs, lses, start = [], [], 0
    neg_inf = torch.full((), float("-inf"), dtype=q.dtype, device=q.device)
    max_logit = neg_inf.expand(hq).clone()
    for length, spec in zip(lengths, masks):
        sl = slice(start, start + length)
        qs = q[sl].transpose(0, 1)                                   # [H, L, D]
        ks = k[sl].repeat_interleave(hq // hkv, dim=1).transpose(0, 1)
        vs = v[sl].repeat_interleave(hq // hkv, dim=1).transpose(0, 1)
        allowed = mask_matrix(spec, length).to(q.device)
        any_key = allowed.any(1, keepdim=True)
        s = (qs @ ks.transpose(1, 2)) * scale
        if softcap:
            s = softcap * torch.tanh(s / softcap)
        if allowed.any():
            max_logit = torch.maximum(max_logit, s.detach().masked_fill(~allowed, float("-inf"))
                                      .flatten(1).max(1).values)
        # rows with no key keep finite scores (their output is zeroed below) so that no NaN
        # reaches the gradients
        s = s.masked_fill(~allowed & any_key, float("-inf"))
        if sinks is not None:  # [H, L, L + 1]: the sink column last
            col = sinks.to(q.dtype).view(hq, 1, 1).expand(hq, length, 1)
            s = torch.cat([s.masked_fill(~any_key, float("-inf")), col], dim=-1)
            lse = torch.logsumexp(s, dim=-1)
            o = torch.softmax(s, dim=-1)[..., :length] @ vs
        else:
            lse = torch.where(any_key.squeeze(1), torch.logsumexp(s, dim=-1), neg_inf)
            p = torch.softmax(s, dim=-1)
            o = torch.where(any_key, p @ vs, torch.zeros((), dtype=q.dtype, device=q.device))
        lses.append(lse.transpose(0, 1))
        outs.append(o.transpose(0, 1))
        start += length
    res = (torch.cat(outs, 0),)
    if return_lse:
        res += (torch.cat(lses, 0),)
    if return_max_logit:
        res += (max_logit,)
    return res if len(res) > 1 else res[0]


def sample_lengths(rng, tokens, scale, max_len, path=None):
    """Sequence lengths drawn from the WLB-LLM length file (../shared/data, outside the
    repository), each divided by `scale` and capped at max_len, until `tokens` are reached;
    from a small built-in list of the same shape when the file is missing."""
    path = path or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                "shared", "data", "lengths_wlbllm.txt")
    try:
        with open(path) as f:
            pool = [int(x) for x in f.read().split()]
        source = "lengths_wlbllm.txt"
    except OSError:
        pool = [2792, 4238, 642, 5298, 2888, 131, 9120, 3227, 1460, 5784, 17, 24500, 700,
                3900, 2100, 88, 6400, 1200]
        source = "built-in lengths"
    out = []
    while sum(out) < tokens:
        n = max(1, min(max_len, round(rng.choice(pool) / scale)))
        out.append(min(n, tokens - sum(out)) if sum(out) + n > tokens else n)
    return out, source


def max_err(a, b):
    return (a.double() - b.double()).abs().max().item() if a.numel() else 0.0


def peak(a):
    return a.double().abs().max().item() if a.numel() else 0.0


def sgd(model, lr):
    """One plain SGD step of every parameter by its gradient, which it clears."""
    with torch.no_grad():
        for p in model.parameters():
            p -= lr * p.grad
            p.grad = None


def max_param_diff(a, b):
    """The largest difference of two {name: tensor} parameter sets, and the largest value."""
    return max(max_err(a[n], b[n]) for n in a), max(peak(a[n]) for n in a)


def training_agrees(losses, params, want, f32, tol_rel):
    """Whether a distributed run's losses and final parameters agree with the float64
    reference `want` = (losses, params): within tol_rel of the largest value and within twice
    what plain fp32 attention (`f32`, the same shape) gives, plus a floor. Prints the
    differences, and each failure."""
    loss_diff = max(abs(a - b) for a, b in zip(losses, want[0]))
    loss_peak = max(abs(x) for x in want[0])
    f32_loss_diff = max(abs(a - b) for a, b in zip(f32[0], want[0]))
    param_diff, param_peak = max_param_diff(params, want[1])
    f32_param_diff, _ = max_param_diff(f32[1], want[1])
    print("  max loss difference %.3g (plain fp32 attention: %.3g), max parameter difference "
          "%.3g (plain fp32: %.3g)" % (loss_diff, f32_loss_diff, param_diff, f32_param_diff))
    ok = True
    for what, d, d32, top in (("loss", loss_diff, f32_loss_diff, loss_peak),
                              ("parameters", param_diff, f32_param_diff, param_peak)):
        bound = min(tol_rel * top, 2 * d32 + 1e-9 * top)
        if not d <= bound or math.isnan(d):
            print("FAIL: %s differ by %.3g, more than %.3g" % (what, d, bound))
            ok = False
    return ok


def train_reference(model, data, batch_loss, lr):
    """A training test's reference run: `model` trained in one process over `data`, one SGD
    step per batch on batch_loss(model, batch); returns (losses, {name: final parameter})."""
    losses = []
    for b in data:
        loss = batch_loss(model, b)
        loss.backward()
        losses.append(loss.item())
        sgd(model, lr)
    return losses, {n: p.detach().clone() for n, p in model.named_parameters()}
