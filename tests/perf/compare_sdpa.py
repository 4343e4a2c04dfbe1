#!/usr/bin/env python3
"""dcp beside PyTorch on one GPU, case by case, forward and backward.

Runs the same attention through dcp (libdcp.so via ctypes: a one-rank plan, a CUDA context,
dcp_forward and then dcp_backward on PyTorch's tensors) and through PyTorch's
scaled_dot_product_attention with the flash and cuDNN backends (full and causal masks) or
FlexAttention (window, lambda, blockwise, shared-question), forward and autograd backward, in one
process, and prints the time of each pass and the ratio (other time / dcp time: above 1 means
dcp is faster), and the largest difference of O and of dQ/dK/dV from PyTorch's. Only the pass
itself is timed: the backward runs on a forward done before timing. TFLOP/s count exact
allowed pairs (forward 4 x D x query heads per pair, backward 2.5 times that), as
dcp-kernel-bench does. Each row says which engine ran dcp's segments: the allowed pairs per
segment class of the case, forward and backward (dcp_pairs, dcp_pairs_bwd: full, causal,
band, left, masked; the masked ones ran on dcp's own kernels), and the cuDNN graphs that did
not build.

The GPU comparison needs PyTorch and a CUDA GPU and is not part of `make test`. --dry-run
needs neither: it plans every case through the ctypes mirror of dcp.h (the dcp package's
binding, plugin/python/dcp/core.py) and runs a small fp32 forward and backward on the CPU
(two in-process ranks) against a plain Python reference, so that `make test` checks the
mirror of every struct it uses.

    python3 tests/perf/compare_sdpa.py                # libdcp: --lib, $DCP_LIB or build/lib
    python3 tests/perf/compare_sdpa.py --dry-run      # ctypes layer only: no PyTorch, no GPU

Standard library and PyTorch only.
"""
import argparse
import ctypes as C
import json
import math
import os
import random
import statistics
import sys

# ---- libdcp through ctypes: the dcp package's binding (plugin/python/dcp/core.py) ----------

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "plugin",
                                "python"))
from dcp import core  # noqa: E402
from dcp.core import DTYPE_BF16, DTYPE_FP32, STRATEGY_ZIGZAG, GradTensors, Tensors  # noqa: E402


def plan_batch(dcp, masks, lengths, hq, hkv, d, dtype, block, cluster_spec="1x1",
               strategy=None):
    """A plan of sequences `lengths` (mask masks[i] each) on `cluster_spec`; with its stats.
    strategy None keeps the library's default."""
    cluster = dcp.cluster(cluster_spec)
    plan = dcp.plan(core.BatchArgs(dcp, lengths, masks), core.Shape(hq, hkv, d, dtype, 0.0),
                    dcp.plan_options(block_size=block, strategy=strategy), cluster)
    cluster.close()
    return plan, plan.stats()


def plan_one(dcp, m, total, hq, hkv, d, dtype, block):
    """A one-rank plan of one sequence: all of it on the one GPU."""
    plan, stats = plan_batch(dcp, [m], [total], hq, hkv, d, dtype, block)
    if len(plan.layout(0)) != 1:  # one sequence on one rank: rows in sequence order
        raise RuntimeError("one-rank plan has more than one span")
    return plan, stats


# ---- the cases -----------------------------------------------------------------------------


def flex_mask_mod(spec, total):
    """A mask's rule (partition/README.md) as a FlexAttention mask_mod (full, causal: SDPA)."""
    parts = spec.split(":")
    kind = parts[0]
    if kind == "window":
        w = int(parts[1]) if len(parts) == 2 else 4096
        return lambda b, h, q, kv: (kv <= q) & (q - kv < w)
    if kind == "lambda":
        s, w = (int(parts[1]), int(parts[2])) if len(parts) == 3 else (64, 4096)
        return lambda b, h, q, kv: (kv <= q) & ((kv < s) | (q - kv < w))
    if kind == "blockwise":
        blk, k = (int(parts[1]), int(parts[2])) if len(parts) == 3 else (256, 2)
        n = (total + blk - 1) // blk

        def mod(b, h, q, kv):
            c = q // blk
            edge = (c == 0) | (c == n - 1)
            lo = q - k * blk
            lo = lo * (lo > blk) + blk * (lo <= blk)  # max(b, i - k*b)
            middle = (kv < blk) | ((kv >= lo) & (kv <= q))
            return (edge & (kv <= q)) | (~edge & middle)
        return mod
    if kind == "shared-question":
        p, a = (float(parts[1]), int(parts[2])) if len(parts) == 3 else (0.2, 4)
        qn = int(total * p)
        m = (total - qn) // a

        def mod(b, h, q, kv):
            causal = kv <= q
            if m == 0:
                return causal
            r = (q - qn) // m
            r = r * (r < a - 1) + (a - 1) * (r >= a - 1)
            st = qn + r * m
            answer = (kv < qn) | ((kv >= st) & causal)
            return ((q < qn) & causal) | ((q >= qn) & answer)
        return mod
    raise ValueError(spec)


def median_ms(torch, fn, warmup, iters):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def grads_to_thd(grads, hq, hkv):
    """PyTorch's [1, heads, tokens, D] gradients of Q and of the GQA-expanded K and V in
    dcp's THD layout, dK and dV summed over the query heads of each KV head."""
    gq, gk, gv = grads
    total, d = gq.shape[2], gq.shape[3]

    def fold(g):
        return g[0].float().reshape(hkv, hq // hkv, total, d).sum(1).transpose(0, 1)
    return gq[0].transpose(0, 1), fold(gk), fold(gv)


def max_diff(a, b):
    return (a.float() - b.float()).abs().max().item()


def run_torch(torch, name, forward, leaves, dout_t, dcp_out, hq, hkv, row, args):
    """Times one PyTorch attention: its forward (no autograd) and the autograd backward of
    one forward done beforehand; records times and differences from dcp's outputs
    (dcp_out: O, dQ, dK, dV in THD) in row. A pass the backend cannot run records an
    error instead (and no time)."""
    try:
        with torch.no_grad():
            ms = median_ms(torch, forward, args.warmup, args.iters)
        out = forward()
        diff = max_diff(out[0].transpose(0, 1), dcp_out[0])
    except RuntimeError as e:  # backend not available for this shape or build
        row[name + "_error"] = str(e).splitlines()[0]
        return
    row[name + "_ms"], row[name + "_max_diff"] = ms, diff
    if args.no_backward:
        return
    try:
        def backward():
            torch.autograd.grad(out, leaves, dout_t, retain_graph=True)
        ms = median_ms(torch, backward, args.warmup, args.iters)
        grads = grads_to_thd(torch.autograd.grad(out, leaves, dout_t), hq, hkv)
        diffs = [max_diff(ref, mine) for ref, mine in zip(grads, dcp_out[1:])]
    except RuntimeError as e:
        row[name + "_bwd_error"] = str(e).splitlines()[0]
        return
    row[name + "_bwd_ms"] = ms
    for g, x in zip(("dq", "dk", "dv"), diffs):
        row["%s_%s_max_diff" % (name, g)] = x


def compile_flex_per_case(torch):
    """FlexAttention compiled for every case: each mask and shape is a recompile of
    flex_attention, past dynamo's default limit of 8 (after which it runs unfused, scores
    materialised); and its backward timed repeatedly needs retain_graph, which donated
    buffers forbid."""
    import torch._dynamo
    import torch._functorch.config
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, 256)
    if hasattr(torch._functorch.config, "donated_buffer"):
        torch._functorch.config.donated_buffer = False


def run_case(dcp, torch, ctx, spec, total, hq, hkv, d, block, args):
    m = dcp.mask(spec)
    flops = 4.0 * d * hq * dcp.pairs(m, total)
    plan, _ = plan_one(dcp, m, total, hq, hkv, d, DTYPE_BF16, block)
    dev = "cuda"
    q = torch.randn(total, hq, d, device=dev, dtype=torch.bfloat16)
    k = torch.randn(total, hkv, d, device=dev, dtype=torch.bfloat16)
    v = torch.randn(total, hkv, d, device=dev, dtype=torch.bfloat16)
    o = torch.empty(total, hq, d, device=dev, dtype=torch.bfloat16)
    lse = torch.empty(total, hq, device=dev, dtype=torch.float32)
    io = Tensors(q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(), o=o.data_ptr(),
                 lse=lse.data_ptr())
    dout = torch.randn(total, hq, d, device=dev, dtype=torch.bfloat16)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    gio = GradTensors(fwd=io, dout=dout.data_ptr(), dq=dq.data_ptr(), dk=dk.data_ptr(),
                      dv=dv.data_ptr())

    def run_dcp():
        dcp.check(dcp.lib.dcp_forward(ctx, plan.handle, C.byref(io), None), "forward")

    def run_dcp_bwd():  # on the O and LSE of the forward runs before it
        dcp.check(dcp.lib.dcp_backward(ctx, plan.handle, C.byref(gio), None), "backward")

    row = {"mask": spec, "total": total, "heads": "%d/%d" % (hq, hkv), "D": d, "block": block,
           "flops": flops, "bwd_flops": 2.5 * flops}
    row["dcp_ms"] = median_ms(torch, run_dcp, args.warmup, args.iters)
    if not args.no_backward:
        row["dcp_bwd_ms"] = median_ms(torch, run_dcp_bwd, args.warmup, args.iters)
    torch.cuda.synchronize()

    # PyTorch's layout: [1, heads, tokens, D]; K/V expanded for GQA before timing, so their
    # gradients are the expanded ones (folded back per KV head before comparing)
    leaves = [x.transpose(0, 1).unsqueeze(0).detach().requires_grad_()
              for x in (q, k.repeat_interleave(hq // hkv, dim=1),
                        v.repeat_interleave(hq // hkv, dim=1))]
    qt, kt, vt = leaves
    dout_t = dout.transpose(0, 1).unsqueeze(0)
    dcp_out = (o, dq, dk, dv)
    kind = spec.split(":")[0]
    if kind in ("full", "causal"):
        from torch.nn.attention import SDPBackend, sdpa_kernel
        F = torch.nn.functional
        for name, backend in (("flash", SDPBackend.FLASH_ATTENTION),
                              ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            def run_sdpa(backend=backend):
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(qt, kt, vt, is_causal=kind == "causal")
            run_torch(torch, name, run_sdpa, leaves, dout_t, dcp_out, hq, hkv, row, args)
    else:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        flex = torch.compile(flex_attention)
        bm = create_block_mask(flex_mask_mod(spec, total), None, None, total, total, device=dev)
        run_torch(torch, "flex", lambda: flex(qt, kt, vt, block_mask=bm), leaves, dout_t,
                  dcp_out, hq, hkv, row, args)
    for p, key in (("", "flops"), ("_bwd", "bwd_flops")):
        for name in ("dcp", "flash", "cudnn", "flex"):
            if name + p + "_ms" in row:
                row[name + p + "_tflops"] = row[key] / (row[name + p + "_ms"] * 1e9)
                if name != "dcp":
                    row[name + p + "_ratio"] = row[name + p + "_ms"] / row["dcp" + p + "_ms"]
    plan.close()
    return row


def print_row(row):
    """Two lines per case: the forward, then the backward with dQ/dK/dV differences."""
    head = "%-18s %6d %5s" % (row["mask"], row["total"], row["heads"])
    for p, label in (("", "fwd"), ("_bwd", "bwd")):
        if "dcp" + p + "_ms" not in row:
            continue
        cells = []
        for n in ("flash", "cudnn", "flex"):
            if n + p + "_ms" in row:
                diff = ("diff %.1e" % row[n + "_max_diff"] if not p else
                        "diff %.1e/%.1e/%.1e" % tuple(row["%s_%s_max_diff" % (n, g)]
                                                      for g in ("dq", "dk", "dv")))
                cells.append("%s %.3f ms %.1f TFLOP/s (x%.2f, %s)" %
                             (n, row[n + p + "_ms"], row[n + p + "_tflops"],
                              row[n + p + "_ratio"], diff))
            elif n + p + "_error" in row:
                cells.append("%s: %s" % (n, row[n + p + "_error"]))
        pairs = row.get("dcp_pairs" + p, [])
        engine = ("" if not sum(pairs) else " (%s %.0f%%)" % (
            row.get("dcp_engine", "?"), 100.0 * (sum(pairs) - pairs[-1]) / sum(pairs)))
        print("%s  %s  dcp%s %.3f ms %.1f TFLOP/s  %s" %
              (head, label, engine, row["dcp" + p + "_ms"], row["dcp" + p + "_tflops"],
               "  ".join(cells)), flush=True)
        head = " " * len(head)


# ---- the ctypes layer on the CPU (--dry-run) -----------------------------------------------


def reference(masks, lengths, tensors, hq, hkv, d, allowed):
    """Attention forward and backward in double, per sequence: O, LSE, dQ, dK, dV as
    [seq][pos] lists of flat [heads x D] rows (partition/README.md's rules; dK/dV summed over the
    query heads of each KV head)."""
    scale = 1.0 / math.sqrt(d)
    gs = hq // hkv
    out = {n: [] for n in ("o", "lse", "dq", "dk", "dv")}
    for s, length in enumerate(lengths):
        q, k, v, do = (tensors[n][s] for n in ("q", "k", "v", "dout"))
        o = [[0.0] * (hq * d) for _ in range(length)]
        lse = [[0.0] * hq for _ in range(length)]
        dq = [[0.0] * (hq * d) for _ in range(length)]
        dk = [[0.0] * (hkv * d) for _ in range(length)]
        dv = [[0.0] * (hkv * d) for _ in range(length)]
        for i in range(length):
            keys = allowed(masks[s], length, i)
            for h in range(hq):
                g = h // gs
                qi, doi = q[i][h * d:(h + 1) * d], do[i][h * d:(h + 1) * d]
                sc = [scale * sum(a * b for a, b in zip(qi, k[j][g * d:(g + 1) * d]))
                      for j in keys]
                mx = max(sc)
                ls = mx + math.log(sum(math.exp(x - mx) for x in sc))
                p = [math.exp(x - ls) for x in sc]
                oi = [sum(pj * v[j][g * d + e] for pj, j in zip(p, keys)) for e in range(d)]
                o[i][h * d:(h + 1) * d] = oi
                lse[i][h] = ls
                delta = sum(a * b for a, b in zip(doi, oi))
                for pj, j in zip(p, keys):
                    dp = sum(a * b for a, b in zip(doi, v[j][g * d:(g + 1) * d]))
                    ds = pj * (dp - delta) * scale
                    for e in range(d):
                        dq[i][h * d + e] += ds * k[j][g * d + e]
                        dk[j][g * d + e] += ds * qi[e]
                        dv[j][g * d + e] += pj * doi[e]
        for n, x in (("o", o), ("lse", lse), ("dq", dq), ("dk", dk), ("dv", dv)):
            out[n].append(x)
    return out


def cpu_passes(dcp, cluster_spec, strategy):
    """A small fp32 forward and backward on the CPU through every struct the GPU run uses
    (PlanStats, RankStats, TokenSpan, Tensors, GradTensors) against the double reference:
    one rank through a context and dcp_forward/dcp_backward as on the GPU, or several
    in-process ranks through dcp_forward_inproc/dcp_backward_inproc."""
    specs, lengths, hq, hkv, d, block = ["causal", "window:16"], [70, 45], 4, 2, 8, 16
    masks = [dcp.mask(x) for x in specs]
    plan, st = plan_batch(dcp, masks, lengths, hq, hkv, d, DTYPE_FP32, block, cluster_spec,
                          strategy)
    nr = st.num_ranks
    pairs = sum(dcp.pairs(m, n) for m, n in zip(masks, lengths))
    assert st.total_flops == 4 * d * hq * pairs, (st.total_flops, pairs)
    assert 2 * st.bwd_flops == 5 * st.total_flops, (st.bwd_flops, st.total_flops)
    assert st.bwd_predicted_ms > st.predicted_ms > 0, "backward predicted_ms"
    assert st.bwd_compute_imbalance == st.compute_imbalance, "same placement, same balance"
    traffic = st.bwd_comm_bytes > 0 and st.bwd_num_transfers > 0 and st.bwd_num_phases > 0
    assert traffic == (nr > 1), "backward traffic"
    assert st.bwd_max_rank_bytes <= 2 * st.bwd_comm_bytes, "bwd_max_rank_bytes"
    rs = [plan.rank_stats(r) for r in range(nr)]
    assert sum(x.bwd_flops for x in rs) == st.bwd_flops, "rank bwd_flops"
    assert sum(x.bwd_sent_bytes for x in rs) == st.bwd_comm_bytes, "rank bwd_sent_bytes"
    assert sum(x.bwd_recv_bytes for x in rs) == st.bwd_comm_bytes, "rank bwd_recv_bytes"
    assert max(x.bwd_predicted_ms for x in rs) == st.bwd_predicted_ms, "rank bwd_predicted_ms"
    assert all(x.bwd_num_instructions > 0 for x in rs), "rank bwd_num_instructions"

    rnd = random.Random(11)
    width = {"q": hq * d, "k": hkv * d, "v": hkv * d, "dout": hq * d}
    tensors = {n: [[[rnd.uniform(-1, 1) for _ in range(w)] for _ in range(length)]
                   for length in lengths] for n, w in width.items()}
    layouts = [plan.layout(r) for r in range(nr)]
    rows = [[(s, start + i) for s, start, n in lay for i in range(n)] for lay in layouts]
    assert sorted(x for r in rows for x in r) == [(s, i) for s, n in enumerate(lengths)
                                                  for i in range(n)], "layouts"

    def local(name, r):  # rank r's rows of a global tensor, as a C float array
        flat = [x for s, i in rows[r] for x in tensors[name][s][i]]
        return (C.c_float * max(len(flat), 1))(*flat)

    keep, io, gio = [], (Tensors * nr)(), (GradTensors * nr)()
    for r in range(nr):
        t = len(rows[r])
        bufs = [local(n, r) for n in ("q", "k", "v", "dout")]
        bufs += [(C.c_float * max(t * w, 1))() for w in (hq * d, hq, hq * d, hkv * d, hkv * d)]
        keep.append(bufs)
        a = [C.addressof(b) for b in bufs]
        io[r] = Tensors(q=a[0], k=a[1], v=a[2], o=a[4], lse=a[5])
        gio[r] = GradTensors(fwd=io[r], dout=a[3], dq=a[6], dk=a[7], dv=a[8])
    if nr == 1:  # through the twin of cuDNN's data path: the engine fields of the mirror too
        group, ctx = dcp.context("cpu", attn_engine="twin")
        dcp.check(dcp.lib.dcp_forward(ctx, plan.handle, C.byref(io[0]), None), "forward")
        dcp.check(dcp.lib.dcp_backward(ctx, plan.handle, C.byref(gio[0]), None), "backward")
        engine = dcp.attn_engine(ctx)
        if engine["engine"] != "twin" or sum(engine["pairs"]) <= 0:
            raise RuntimeError("compare_sdpa --dry-run: attention engine %r" % engine)
        dcp.lib.dcp_context_destroy(ctx)
        group.close()
    else:
        dcp.check(dcp.lib.dcp_forward_inproc(plan.handle, io, 30.0, None), "forward_inproc")
        dcp.check(dcp.lib.dcp_backward_inproc(plan.handle, gio, 30.0, None), "backward_inproc")
    plan.close()

    ref = reference(masks, lengths, tensors, hq, hkv, d, dcp.allowed)
    worst = {}
    for n, slot, w in (("o", 4, hq * d), ("lse", 5, hq), ("dq", 6, hq * d), ("dk", 7, hkv * d),
                       ("dv", 8, hkv * d)):
        err, peak = 0.0, 0.0
        for r in range(nr):
            got = keep[r][slot]
            for row, (s, i) in enumerate(rows[r]):
                for e in range(w):
                    want = ref[n][s][i][e]
                    x = got[row * w + e]
                    assert math.isfinite(x), "%s: rank %d row %d not finite" % (n, r, row)
                    err, peak = max(err, abs(x - want)), max(peak, abs(want))
        assert peak > 0, "%s is all zero" % n
        assert err <= 1e-4 * max(1.0, peak), "%s: max diff %.3g (peak %.3g)" % (n, err, peak)
        worst[n] = err
    print("cpu fp32 forward+backward through ctypes ok: %s, %d rank(s), %s, bwd %d bytes in "
          "%d transfers; max diff %s" %
          (cluster_spec, nr, ",".join(specs), st.bwd_comm_bytes, st.bwd_num_transfers,
           " ".join("%s %.1e" % kv for kv in worst.items())))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", default=None,
                    help="libdcp.so (default: $DCP_LIB, build/lib/libdcp.so, the installed one)")
    ap.add_argument("--masks",
                    default="full,causal,window:1024,lambda:64:4096,blockwise,shared-question")
    ap.add_argument("--totals", default="8192,16384,32768")
    ap.add_argument("--gqa", default="8:2,64:8")
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--block", type=int, default=2048, help="dcp token block (tile edge)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--no-backward", action="store_true", help="time the forward only")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--dry-run", action="store_true",
                    help="plan every case and run a small CPU forward and backward through "
                         "ctypes, then stop (no PyTorch, no GPU)")
    args = ap.parse_args()
    dcp = core.load(args.lib)
    masks = args.masks.split(",")
    totals = [int(t) for t in args.totals.split(",")]
    gqas = [tuple(int(x) for x in g.split(":")) for g in args.gqa.split(",")]
    if args.dry_run:
        for spec in masks:
            for total in totals:
                for hq, hkv in gqas:
                    m = dcp.mask(spec)
                    plan, st = plan_one(dcp, m, total, hq, hkv, args.head_dim, DTYPE_BF16,
                                        args.block)
                    flops = 4 * args.head_dim * hq * dcp.pairs(m, total)
                    assert st.total_flops == flops, (st.total_flops, flops)
                    assert 2 * st.bwd_flops == 5 * flops, (st.bwd_flops, flops)
                    print("%-16s %7d %5s plan ok: %d blocks, %.3g GFLOP, bwd %.3g GFLOP" %
                          (spec, total, "%d/%d" % (hq, hkv), st.num_token_blocks, flops / 1e9,
                           st.bwd_flops / 1e9))
                    plan.close()
        cpu_passes(dcp, "1x1", None)
        cpu_passes(dcp, "1x2", STRATEGY_ZIGZAG)
        return 0
    import torch
    if not torch.cuda.is_available():
        print("compare_sdpa: no CUDA device", file=sys.stderr)
        return 1
    compile_flex_per_case(torch)
    group, ctx = dcp.context("cuda:%d" % torch.cuda.current_device())
    engine = dcp.attn_engine(ctx)
    if not args.json:
        print("dcp attention engine: %s (%s)" % (engine["engine"], engine["note"]))
    for spec in masks:
        for total in totals:
            for hq, hkv in gqas:
                before = dcp.attn_engine(ctx)
                row = run_case(dcp, torch, ctx, spec, total, hq, hkv, args.head_dim, args.block,
                               args)
                after = dcp.attn_engine(ctx)
                row["dcp_engine"] = after["engine"]
                for key in ("pairs", "pairs_bwd"):
                    row["dcp_" + key] = [a - b for a, b in zip(after[key], before[key])]
                row["dcp_graphs_failed"] = after["graphs_failed"] - before["graphs_failed"]
                if args.json:
                    print(json.dumps(row), flush=True)
                else:
                    print_row(row)
    dcp.lib.dcp_context_destroy(ctx)
    group.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
