"""The Python layer's allocation walk (tests/README.md "Failure walks"): dcp.core's and
dcp.torch's calls over a libdcp.so built with the allocation hook (make builds it at
build/lib/hooks/libdcp.so; never installed), every allocation of libdcp failing in turn
(DCP_WALK=full) or a seeded sample of them. Each run must raise DcpError with
DCP_ERR_NO_MEMORY, or complete with the clean run's result, and once Python has collected its
objects no block of libdcp's allocator may be left.

dcp.core: a cluster, a plan of four sequences (custom ranges included), its bytes both ways,
layouts, stats and checksum, the planner service (wait and try), an in-process context.
dcp.torch (where PyTorch imports, unless --core-only): a plan, forward and backward of every
rank as threads (attention_inproc, autograd), and the planner.

    python3 tests/python/alloc_walk.py HOOKED_LIBDCP [--core-only]
"""
import ctypes as C
import gc
import hashlib
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "plugin", "python"))
from dcp import core  # noqa: E402

LENGTHS = [700, 300, 130, 60]
SAMPLE = 15


def custom_rows(n):
    rows = []
    for i in range(n):
        own = max(10, i // 8 * 8)
        rows.append((0, i + 1, i + 1, i + 1) if i < 10 else (0, 10, own, i + 1))
    return rows


def run_core(L, h):
    """Every dcp.core call of the walk; returns a digest of what they gave."""
    cl = L.cluster("2x2")
    batch = core.BatchArgs(L, LENGTHS, ["causal", "lambda:16:128", "window:64",
                                        core.CustomMask(custom_rows(60))])
    shape = core.Shape(4, 2, 8, core.DTYPE_FP32, 0.0)
    opts = L.plan_options(strategy="metis", block_size=128, metis_tries=1)
    p = L.plan(batch, shape, opts, cl)
    data = p.to_bytes()
    back = L.plan_from_bytes(data)
    h.update(data)
    h.update(repr([back.layout(r) for r in range(back.num_ranks)]).encode())
    h.update(repr((back.checksum(), core.stats_dict(L, back.stats())["comm_bytes"])).encode())
    pl = core.Planner(L, cl, 1, 1, 0)
    t = pl.submit(batch, shape, opts)
    h.update(pl.wait(t).to_bytes())
    t = pl.submit(batch, shape, opts)  # a hit
    got = None
    while got is None:
        got = pl.try_wait(t)
        time.sleep(0.0005) if got is None else None
    h.update(got.to_bytes())
    pl.close()
    group, ctx = L.context("cpu")
    L.lib.dcp_context_destroy(ctx)
    group.close()
    cl.close()


def run_torch(dt, torch, h):
    """dcp.torch: a plan, forward and backward of every rank as threads, the planner."""
    p = dt.plan(LENGTHS, ["causal", "lambda:16:128", "window:64", "full"], "2x2", q_heads=4,
                kv_heads=2, head_dim=8, dtype=torch.float32, block_size=128, strategy="lpt")
    g = torch.Generator().manual_seed(3)
    qs, ks, vs = [], [], []
    for r in range(p.num_ranks):
        n = p.local_tokens(r)
        qs.append(torch.rand(n, 4, 8, generator=g, requires_grad=True))
        ks.append(torch.rand(n, 2, 8, generator=g, requires_grad=True))
        vs.append(torch.rand(n, 2, 8, generator=g, requires_grad=True))
    outs = dt.attention_inproc(p, qs, ks, vs)
    sum(o.sum() for o in outs).backward()
    for t in outs + [x.grad for x in qs + ks + vs]:
        h.update(t.detach().numpy().tobytes())
    with dt.Planner("2x2") as pl:
        t = pl.submit(LENGTHS, "causal", q_heads=4, kv_heads=2, head_dim=8,
                      dtype=torch.float32, block_size=128)
        h.update(pl.wait(t).to_bytes())
    p.close()


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    path = os.path.abspath(sys.argv[1])
    os.environ["DCP_LIB"] = path
    L = core.load(path)
    hook = L.lib
    hook.dcp_test_alloc_fail_at.argtypes = [C.c_int64]
    hook.dcp_test_alloc_count.restype = C.c_int64
    hook.dcp_test_alloc_fired.argtypes = [C.c_void_p]
    hook.dcp_test_alloc_live_blocks.restype = C.c_int64
    hook.dcp_test_alloc_live_bytes.restype = C.c_int64
    hook.dcp_test_alloc_track(1)
    parts = [("dcp.core", lambda h: run_core(L, h))]
    if "--core-only" not in sys.argv:
        try:
            import torch
            import dcp.torch as dt
            parts.append(("dcp.torch", lambda h: run_torch(dt, torch, h)))
        except ImportError as e:
            print("alloc_walk.py: dcp.torch skipped (%s)" % e)
    full = os.environ.get("DCP_WALK") == "full"
    seed = int(os.environ.get("DCP_WALK_SEED", "45"), 0)
    failures = 0
    for name, run in parts:
        def once():
            """(None, digest) or (the exception's type name, status, text), with every object
            of the run collected (a traceback would keep the run's frame alive)."""
            h = hashlib.sha256()
            try:
                run(h)
                result = (None, h.hexdigest())
            except core.DcpError as e:
                result = ("DcpError", e.status, str(e))
            except Exception as e:  # anything but DcpError is a broken promise
                result = (type(e).__name__, None, str(e))
            gc.collect()
            return result

        hook.dcp_test_alloc_fail_at(0)
        first = once()
        clean = first[1] if first[0] is None else None
        total = hook.dcp_test_alloc_count()
        if first[0] is not None or hook.dcp_test_alloc_live_blocks():
            print("FAIL %s: the clean run: %s; %d blocks left" %
                  (name, first, hook.dcp_test_alloc_live_blocks()))
            failures += 1
            continue
        ns = list(range(1, total + 1))
        if not full and total > SAMPLE:
            rng = random.Random(seed)
            ns = sorted({1, total} | set(rng.sample(range(2, total), SAMPLE - 2)))
        named = absorbed = runs = 0
        for n in ns:
            hook.dcp_test_alloc_fail_at(n)
            result = once()
            fired = hook.dcp_test_alloc_fired(None)
            hook.dcp_test_alloc_fail_at(0)
            left = hook.dcp_test_alloc_live_blocks()
            if not fired:
                continue
            runs += 1
            ok = (result[0] == "DcpError" and result[1] == core.ERR_NO_MEMORY
                  if result[0] is not None else result[1] == clean)
            named += result[0] is not None and ok
            absorbed += result[0] is None and ok
            if not ok or left:
                failures += 1
                print("FAIL %s: allocation %d of %d: %s; %d blocks (%d bytes) left" %
                      (name, n, total, "%s: %s" % (result[0], result[2])
                       if result[0] is not None else "completed with another result",
                       left, hook.dcp_test_alloc_live_bytes()))
                if failures > 5:
                    return 1
        print("  walk %-22s %6d allocations; %5d runs failed: %5d named (DcpError), %4d "
              "absorbed%s" % (name, total, runs, named, absorbed, "" if full else " (sampled)"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
