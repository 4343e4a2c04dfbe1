#!/usr/bin/env python3
"""dcp beside PyTorch on one GPU, case by case.

Runs the same attention through dcp (libdcp.so via ctypes: a one-rank plan, a CUDA context,
dcp_forward on PyTorch's tensors) and through PyTorch's scaled_dot_product_attention with the
flash and cuDNN backends (full and causal masks) or FlexAttention (lambda, blockwise,
shared-question), in one process, and prints the time of each and the ratio
(other time / dcp time: above 1 means dcp is faster). TFLOP/s count exact allowed pairs
(4 x D x query heads per pair), as dcp-kernel-bench does.

Needs PyTorch and a CUDA GPU; not part of `make test`.

    python3 tests/perf/compare_sdpa.py --lib build/lib/libdcp.so
    python3 tests/perf/compare_sdpa.py --dry-run      # ctypes layer only: plans, no GPU

Standard library and PyTorch only.
"""
import argparse
import ctypes as C
import json
import statistics
import sys

# ---- libdcp through ctypes (include/dcp.h) ---------------------------------------------


class Mask(C.Structure):
    _fields_ = [("kind", C.c_int), ("window", C.c_int32), ("sink", C.c_int32),
                ("block", C.c_int32), ("k", C.c_int32), ("answers", C.c_int32),
                ("question_frac", C.c_double), ("ranges", C.POINTER(C.c_int32))]


class Batch(C.Structure):
    _fields_ = [("num_seqs", C.c_int32), ("lengths", C.POINTER(C.c_int32)),
                ("masks", C.POINTER(Mask))]


class Shape(C.Structure):
    _fields_ = [("num_heads", C.c_int32), ("num_kv_heads", C.c_int32),
                ("head_dim", C.c_int32), ("dtype", C.c_int), ("scale", C.c_float)]


class PlanOptions(C.Structure):
    _fields_ = [("block_size", C.c_int32), ("head_blocks", C.c_int32),
                ("divisions", C.c_int32), ("strategy", C.c_int),
                ("eps_inter", C.c_double), ("eps_intra", C.c_double),
                ("mem_cap_bytes", C.c_int64), ("seed", C.c_uint64),
                ("expansion", C.c_int), ("net_cap", C.c_int32), ("refine", C.c_int32),
                ("comm_schedule", C.c_int), ("coalesce", C.c_int32)]


class PlanStats(C.Structure):
    _fields_ = [("num_ranks", C.c_int32), ("num_nodes", C.c_int32), ("strategy", C.c_int),
                ("num_divisions", C.c_int32), ("num_token_blocks", C.c_int32),
                ("num_comp_blocks", C.c_int64), ("total_tokens", C.c_int64),
                ("total_flops", C.c_int64), ("comm_bytes", C.c_int64),
                ("inter_node_bytes", C.c_int64), ("max_rank_bytes", C.c_int64),
                ("compute_imbalance", C.c_double), ("memory_imbalance", C.c_double),
                ("max_buffer_bytes", C.c_int64), ("num_transfers", C.c_int32),
                ("num_phases", C.c_int32), ("predicted_ms", C.c_double),
                ("fallback", C.c_int32), ("plan_ms", C.c_double)]


class ContextConfig(C.Structure):
    _fields_ = [("rank", C.c_int32), ("group", C.c_void_p), ("bootstrap", C.c_void_p),
                ("timeout_s", C.c_double), ("transport_intra", C.c_char_p),
                ("transport_inter", C.c_char_p), ("device", C.c_char_p)]


class Tensors(C.Structure):
    _fields_ = [("q", C.c_void_p), ("k", C.c_void_p), ("v", C.c_void_p),
                ("o", C.c_void_p), ("lse", C.c_void_p)]


DTYPE_FP32, DTYPE_BF16, DTYPE_FP16 = 0, 1, 2


class Dcp:
    def __init__(self, path):
        self.lib = C.CDLL(path)
        L = self.lib
        L.dcp_last_error.restype = C.c_char_p
        L.dcp_status_string.restype = C.c_char_p
        L.dcp_plan_options_default.argtypes = [C.POINTER(PlanOptions)]
        L.dcp_plan_options_default.restype = None
        for name in ("dcp_plan_destroy", "dcp_cluster_destroy", "dcp_context_destroy",
                     "dcp_group_destroy"):
            getattr(L, name).argtypes = [C.c_void_p]
            getattr(L, name).restype = None

    def check(self, status, what):
        if status != 0:
            raise RuntimeError("%s: %s: %s" % (what, self.lib.dcp_status_string(status).decode(),
                                               self.lib.dcp_last_error().decode()))

    def mask(self, spec):
        m = Mask()
        self.check(self.lib.dcp_mask_parse(spec.encode(), C.byref(m)), "mask " + spec)
        return m

    def pairs(self, m, total):
        n = C.c_int64()
        self.check(self.lib.dcp_mask_count_pairs(C.byref(m), total, 0, total, 0, total,
                                                 C.byref(n)), "pairs")
        return n.value

    def plan(self, m, total, hq, hkv, d, dtype, block):
        """A one-rank plan of one sequence: all of it on the one GPU."""
        cluster = C.c_void_p()
        self.check(self.lib.dcp_cluster_from_spec(b"1x1", C.byref(cluster)), "cluster")
        lengths = (C.c_int32 * 1)(total)
        masks = (Mask * 1)(m)
        batch = Batch(1, lengths, masks)
        shape = Shape(hq, hkv, d, dtype, 0.0)
        opts = PlanOptions()
        self.lib.dcp_plan_options_default(C.byref(opts))
        opts.block_size = block
        plan = C.c_void_p()
        st = self.lib.dcp_plan_create(C.byref(batch), C.byref(shape), C.byref(opts), cluster,
                                      C.byref(plan))
        self.lib.dcp_cluster_destroy(cluster)
        self.check(st, "plan")
        stats = PlanStats()
        self.check(self.lib.dcp_plan_get_stats(plan, C.byref(stats)), "stats")
        nspans = C.c_int32()
        self.check(self.lib.dcp_plan_local_layout(plan, 0, None, 0, C.byref(nspans), None),
                   "layout")
        if nspans.value != 1:  # one sequence on one rank: rows in sequence order
            raise RuntimeError("one-rank plan has %d spans" % nspans.value)
        return plan, stats

    def context(self, device):
        group = C.c_void_p()
        self.check(self.lib.dcp_group_create(1, C.byref(group)), "group")
        cfg = ContextConfig(0, group, None, 0.0, None, None, device.encode())
        ctx = C.c_void_p()
        self.check(self.lib.dcp_context_create(C.byref(cfg), C.byref(ctx)), "context")
        return group, ctx


# ---- the cases -----------------------------------------------------------------------------


def flex_mask_mod(spec, total):
    """The DESIGN.md rule of a mask as a FlexAttention mask_mod (full and causal use SDPA)."""
    parts = spec.split(":")
    kind = parts[0]
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


def run_case(dcp, torch, ctx, spec, total, hq, hkv, d, block, args):
    m = dcp.mask(spec)
    flops = 4.0 * d * hq * dcp.pairs(m, total)
    plan, _ = dcp.plan(m, total, hq, hkv, d, DTYPE_BF16, block)
    dev = "cuda"
    q = torch.randn(total, hq, d, device=dev, dtype=torch.bfloat16)
    k = torch.randn(total, hkv, d, device=dev, dtype=torch.bfloat16)
    v = torch.randn(total, hkv, d, device=dev, dtype=torch.bfloat16)
    o = torch.empty(total, hq, d, device=dev, dtype=torch.bfloat16)
    lse = torch.empty(total, hq, device=dev, dtype=torch.float32)
    io = Tensors(q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr())

    def run_dcp():
        dcp.check(dcp.lib.dcp_forward(ctx, plan, C.byref(io)), "forward")

    row = {"mask": spec, "total": total, "heads": "%d/%d" % (hq, hkv), "D": d, "block": block}
    row["dcp_ms"] = median_ms(torch, run_dcp, args.warmup, args.iters)
    row["dcp_tflops"] = flops / (row["dcp_ms"] * 1e9)

    # PyTorch's layout: [1, heads, tokens, D]; K/V expanded for GQA before timing
    qt = q.transpose(0, 1).unsqueeze(0)
    kt = k.repeat_interleave(hq // hkv, dim=1).transpose(0, 1).unsqueeze(0)
    vt = v.repeat_interleave(hq // hkv, dim=1).transpose(0, 1).unsqueeze(0)
    kind = spec.split(":")[0]
    others = {}
    if kind in ("full", "causal"):
        from torch.nn.attention import SDPBackend, sdpa_kernel
        F = torch.nn.functional
        for name, backend in (("flash", SDPBackend.FLASH_ATTENTION),
                              ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            def run_sdpa(backend=backend):
                with sdpa_kernel(backend):
                    F.scaled_dot_product_attention(qt, kt, vt, is_causal=kind == "causal")
            try:
                others[name] = median_ms(torch, run_sdpa, args.warmup, args.iters)
                ref = F.scaled_dot_product_attention(qt, kt, vt, is_causal=kind == "causal")
                row[name + "_max_diff"] = (ref[0].transpose(0, 1) - o).abs().max().item()
            except RuntimeError as e:  # backend not available for this shape or build
                row[name + "_error"] = str(e).splitlines()[0]
    else:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        flex = torch.compile(flex_attention)
        bm = create_block_mask(flex_mask_mod(spec, total), None, None, total, total, device=dev)
        others["flex"] = median_ms(torch, lambda: flex(qt, kt, vt, block_mask=bm), args.warmup,
                                   args.iters)
        ref = flex(qt, kt, vt, block_mask=bm)
        row["flex_max_diff"] = (ref[0].transpose(0, 1) - o).abs().max().item()
    for name, ms in others.items():
        row[name + "_ms"] = ms
        row[name + "_ratio"] = ms / row["dcp_ms"]
    dcp.lib.dcp_plan_destroy(plan)
    return row


def cpu_forward(dcp):
    """The context and tensor structs through a small fp32 forward on the CPU: with V all
    ones every output is 1 and every LSE finite."""
    total, hq, hkv, d = 300, 4, 2, 16
    m = dcp.mask("causal")
    plan, _ = dcp.plan(m, total, hq, hkv, d, DTYPE_FP32, 128)
    group, ctx = dcp.context("cpu")
    q = (C.c_float * (total * hq * d))(*([0.5] * (total * hq * d)))
    k = (C.c_float * (total * hkv * d))(*([0.25] * (total * hkv * d)))
    v = (C.c_float * (total * hkv * d))(*([1.0] * (total * hkv * d)))
    o = (C.c_float * (total * hq * d))()
    lse = (C.c_float * (total * hq))()
    io = Tensors(C.addressof(q), C.addressof(k), C.addressof(v), C.addressof(o),
                 C.addressof(lse))
    dcp.check(dcp.lib.dcp_forward(ctx, plan, C.byref(io)), "forward")
    assert all(abs(x - 1.0) < 1e-5 for x in o), "O"
    assert all(-1e30 < x < 1e30 for x in lse), "LSE"
    dcp.lib.dcp_context_destroy(ctx)
    dcp.lib.dcp_group_destroy(group)
    dcp.lib.dcp_plan_destroy(plan)
    print("cpu forward through ctypes ok")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", default="build/lib/libdcp.so")
    ap.add_argument("--masks", default="full,causal,lambda,blockwise,shared-question")
    ap.add_argument("--totals", default="8192,16384,32768")
    ap.add_argument("--gqa", default="8:2,64:8")
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--block", type=int, default=2048, help="dcp token block (tile edge)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--dry-run", action="store_true",
                    help="plan every case through ctypes and stop (no PyTorch, no GPU)")
    args = ap.parse_args()
    dcp = Dcp(args.lib)
    masks = args.masks.split(",")
    totals = [int(t) for t in args.totals.split(",")]
    gqas = [tuple(int(x) for x in g.split(":")) for g in args.gqa.split(",")]
    if args.dry_run:
        for spec in masks:
            for total in totals:
                for hq, hkv in gqas:
                    m = dcp.mask(spec)
                    plan, st = dcp.plan(m, total, hq, hkv, args.head_dim, DTYPE_BF16, args.block)
                    flops = 4 * args.head_dim * hq * dcp.pairs(m, total)
                    assert st.total_flops == flops, (st.total_flops, flops)
                    print("%-16s %7d %5s plan ok: %d blocks, %.3g GFLOP" %
                          (spec, total, "%d/%d" % (hq, hkv), st.num_token_blocks, flops / 1e9))
                    dcp.lib.dcp_plan_destroy(plan)
        cpu_forward(dcp)
        return 0
    import torch
    if not torch.cuda.is_available():
        print("compare_sdpa: no CUDA device", file=sys.stderr)
        return 1
    group, ctx = dcp.context("cuda:%d" % torch.cuda.current_device())
    rows = []
    for spec in masks:
        for total in totals:
            for hq, hkv in gqas:
                row = run_case(dcp, torch, ctx, spec, total, hq, hkv, args.head_dim, args.block,
                               args)
                rows.append(row)
                if args.json:
                    print(json.dumps(row), flush=True)
                    continue
                ratios = "  ".join("%s %.3f ms (x%.2f)" % (n, row[n + "_ms"], row[n + "_ratio"])
                                   for n in ("flash", "cudnn", "flex") if n + "_ms" in row)
                print("%-18s %6d %5s  dcp %.3f ms %.1f TFLOP/s  %s" %
                      (spec, total, row["heads"], row["dcp_ms"], row["dcp_tflops"], ratios),
                      flush=True)
    dcp.lib.dcp_context_destroy(ctx)
    dcp.lib.dcp_group_destroy(group)
    return 0


if __name__ == "__main__":
    sys.exit(main())
