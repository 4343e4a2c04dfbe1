"""dcp.torch.attention_inproc against plain PyTorch attention: forward and the gradients of
q, k and v, every mask kind, several strategies and clusters, fp32 (1e-5 relative to the
double reference) and bf16 (FlashAttention's rule: dcp's error at most twice that of plain
bf16 PyTorch attention plus one bf16 rounding step of the largest value); and the Python
surface: plans, layouts, bytes, errors.

    PYTHONPATH=plugin/python python3 tests/torch/test_attention.py [-v]
"""
import ctypes as C
import random
import unittest
import warnings

import torch

import reference as ref
import dcp
import dcp.torch as dt

HQ, HKV, D, BLOCK = 4, 2, 16, 32
SHAPE = dict(q_heads=HQ, kv_heads=HKV, head_dim=D, dtype=torch.float32)
LENGTHS = [150, 37, 96, 1, 64]
MASKS = ["full", "causal", "window:24", "lambda:8:24", "blockwise:16:2",
         "shared-question:0.25:3", "custom", "mixed"]
CASES = [("1x3", "zigzag"), ("2x2", "metis"), ("1x4", "lpt")]


def mask_specs(kind, lengths, rng):
    """One mask per sequence: `kind` everywhere, random custom ranges, or a mix."""
    if kind == "custom":
        return [ref.random_custom(n, rng) for n in lengths]
    if kind == "mixed":
        pool = MASKS[:6]
        return [pool[i % len(pool)] for i in range(len(lengths))]
    return [kind] * len(lengths)


def run_dcp(plan, q, k, v, dout):
    """O and the gradients through attention_inproc, gathered back to global order."""
    n = plan.num_ranks
    idx = [plan.local_indices(r, device=q.device) for r in range(n)]
    leaves = [[x[i].detach().clone().requires_grad_() for i in idx] for x in (q, k, v)]
    outs = dt.attention_inproc(plan, *leaves)
    torch.autograd.backward(outs, [dout[i] for i in idx])

    def gather(parts, like):
        full = torch.zeros_like(like)
        for i, p in zip(idx, parts):
            full[i] = p.detach()
        return full
    return (gather(outs, q), gather([x.grad for x in leaves[0]], q),
            gather([x.grad for x in leaves[1]], k), gather([x.grad for x in leaves[2]], v))


def run_torch(q, k, v, dout, lengths, masks):
    leaves = [x.detach().clone().requires_grad_() for x in (q, k, v)]
    o = ref.attention(*leaves, lengths, masks)
    o.backward(dout)
    return (o.detach(),) + tuple(x.grad for x in leaves)


def inputs(lengths, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    t = sum(lengths)
    return [torch.randn(t, h, D, generator=g, dtype=torch.float64).to(dtype)
            for h in (HQ, HKV, HKV, HQ)]


class Variants(unittest.TestCase):
    """The attention of today's open models through attention_inproc and autograd against a
    float64 module (reference.attention): learnable sinks (GPT-OSS; their gradient too), a
    logit softcap (Gemma 2), Gemma's head dim 256, MLA's 192/128 heads and a value head dim
    of its own (DeepSeek-V3) and the max logit, every mask kind on 1, 3, 4 and 8 ranks; fp32
    to 1e-5 of the largest value."""

    def run_case(self, kind, cluster, strategy, seed, dv=None, softcap=0.0, sinks=False, d=D,
                 hq=HQ, hkv=HKV):
        rng = random.Random(seed)
        masks = mask_specs(kind, LENGTHS, rng)
        g = torch.Generator().manual_seed(seed)
        t = sum(LENGTHS)
        dv = d if dv is None else dv
        q, k = (torch.randn(t, h, d, generator=g, dtype=torch.float64) for h in (hq, hkv))
        v = torch.randn(t, hkv, dv, generator=g, dtype=torch.float64)
        dout = torch.randn(t, hq, dv, generator=g, dtype=torch.float64)
        s = torch.randn(hq, generator=g, dtype=torch.float64) if sinks else None
        plan = dt.plan(LENGTHS, masks, cluster, like=(q.float(), k.float(), v.float()),
                       softcap=softcap, block_size=BLOCK, strategy=strategy)
        self.assertEqual((plan.shape[2], plan.head_dim_v, plan.softcap), (d, dv, softcap))
        # the float64 module
        leaves = [x.clone().requires_grad_() for x in (q, k, v)]
        sl = s.clone().requires_grad_() if sinks else None
        o, lse, ml = ref.attention(*leaves, LENGTHS, masks, return_lse=True, sinks=sl,
                                   softcap=softcap, return_max_logit=True)
        torch.autograd.backward(o, dout)
        want = [o.detach(), lse.detach(), ml] + [x.grad for x in leaves] + \
            ([sl.grad] if sinks else [])
        # dcp, ranks as threads
        n = plan.num_ranks
        idx = [plan.local_indices(r) for r in range(n)]
        mine = [[x[i].float().clone().requires_grad_() for i in idx] for x in (q, k, v)]
        sd = s.float().clone().requires_grad_() if sinks else None
        outs, lses, mls = dt.attention_inproc(plan, *mine, sinks=sd, return_lse=True,
                                              return_max_logit=True)
        torch.autograd.backward(outs, [dout[i].float() for i in idx])

        def gather(parts, like):
            full = torch.zeros(like.shape, dtype=torch.float64)
            for i, p in zip(idx, parts):
                full[i] = p.detach().double()
            return full
        for r in range(1, n):  # the same max logit on every rank
            self.assertTrue(torch.equal(mls[r], mls[0]))
        got = [gather(outs, o), gather(lses, lse), mls[0].double()] + \
            [gather([x.grad for x in m], w) for m, w in zip(mine, (q, k, v))] + \
            ([sd.grad.double()] if sinks else [])
        names = ["O", "LSE", "max logit", "dQ", "dK", "dV", "d sinks"]
        for name, a, w in zip(names, got, want):
            fin = torch.isfinite(w)
            self.assertTrue(torch.equal(fin, torch.isfinite(a)), name)
            err, top = ref.max_err(a[fin], w[fin]), max(ref.peak(w[fin]), 1.0)
            self.assertLessEqual(err, 1e-5 * top, "%s %s %s %s: %s error %.3g of %.3g" %
                                 (kind, cluster, strategy, (d, dv, softcap, sinks), name, err,
                                  top))

    def test_sinks(self):
        for kind in MASKS:
            for cluster, strategy in CASES[:2] + [("1x1", "metis")]:
                with self.subTest(mask=kind, cluster=cluster):
                    self.run_case(kind, cluster, strategy, 21, sinks=True)

    def test_softcap(self):
        for kind in MASKS:
            for cluster, strategy in CASES[:2]:
                with self.subTest(mask=kind, cluster=cluster):
                    self.run_case(kind, cluster, strategy, 22, softcap=1.5)

    def test_head_dims(self):
        """Gemma's 256 and MLA's 192/128 on 2 query heads over 1 KV head, 4 ranks as zigzag
        places them and 8 as the default does, with sinks and a softcap on the way."""
        for d, dv in ((256, 256), (192, 128)):
            for kind in ("causal", "lambda:8:24", "custom"):
                for cluster, strategy in (("1x4", "zigzag"), ("2x4", "metis")):
                    with self.subTest(d=d, dv=dv, mask=kind, cluster=cluster):
                        self.run_case(kind, cluster, strategy, 25, dv=dv, d=d, hq=2, hkv=1,
                                      softcap=2.0 if kind == "custom" else 0.0,
                                      sinks=kind == "lambda:8:24")

    def test_value_head_dim(self):
        for kind in MASKS:
            with self.subTest(mask=kind):
                self.run_case(kind, "1x3", "zigzag", 23, dv=8)

    def test_all_at_once(self):
        self.run_case("mixed", "1x4", "lpt", 24, dv=24, softcap=3.0, sinks=True)

    def test_like_q_k_v_reads_the_value_head_dim(self):
        q, k = torch.randn(33, HQ, D), torch.randn(33, HKV, D)
        v = torch.randn(33, HKV, 12)
        plan = dt.plan([20, 13], "causal", "1x2", like=(q, k, v))
        self.assertEqual(plan.shape + (plan.head_dim_v,), (HQ, HKV, D, 12))
        again = dt.plan_from_bytes(plan.to_bytes())
        self.assertEqual(again.head_dim_v, 12)
        with self.assertRaises(ValueError) as e:  # v of the wrong head dim for the plan
            dt.attention_inproc(plan, [q[:20], q[20:]], [k[:20], k[20:]],
                                [k[:20], k[20:]])
        self.assertIn("v has shape", str(e.exception))


class AttentionInproc(unittest.TestCase):
    """Every mask x (cluster, strategy), fp32 then bf16."""

    def check(self, kind, cluster, strategy, dtype, seed):
        rng = random.Random(seed)
        masks = mask_specs(kind, LENGTHS, rng)
        plan = dt.plan(LENGTHS, masks, cluster, q_heads=HQ, kv_heads=HKV, head_dim=D,
                       dtype=dtype, block_size=BLOCK, strategy=strategy)
        q, k, v, dout = inputs(LENGTHS, dtype, seed)
        want = run_torch(*(x.double() for x in (q, k, v, dout)), LENGTHS, masks)
        got = run_dcp(plan, q, k, v, dout)
        plain = run_torch(q, k, v, dout, LENGTHS, masks) if dtype != torch.float32 else None
        names = ("O", "dQ", "dK", "dV")
        line = []
        for i, name in enumerate(names):
            err, top = ref.max_err(got[i], want[i]), ref.peak(want[i])
            self.assertTrue(torch.isfinite(got[i]).all(), "%s not finite" % name)
            self.assertGreater(top, 0, name)
            if plain is None:
                self.assertLessEqual(err, 1e-5 * top, "%s: %s %s %s: max error %.3g of %.3g"
                                     % (name, kind, cluster, strategy, err, top))
                line.append("%s %.1e" % (name, err / top))
            else:
                low = ref.max_err(plain[i], want[i])
                self.assertLessEqual(err, 2 * low + top * 2.0 ** -8,
                                     "%s: %s %s %s bf16: error %.3g, plain bf16 %.3g, peak %.3g"
                                     % (name, kind, cluster, strategy, err, low, top))
                line.append("%s %.2f" % (name, err / low if low else 0.0))
        return " ".join(line)

    def test_masks_fp32(self):
        for kind in MASKS:
            for cluster, strategy in CASES:
                with self.subTest(mask=kind, cluster=cluster, strategy=strategy):
                    rel = self.check(kind, cluster, strategy, torch.float32, 7)
                    if kind in ("causal", "custom"):
                        print("  fp32 %-22s %s %-6s max error / peak: %s" %
                              (kind, cluster, strategy, rel))

    def test_masks_bf16(self):
        for kind in MASKS:
            for cluster, strategy in CASES[:2]:
                with self.subTest(mask=kind, cluster=cluster, strategy=strategy):
                    rel = self.check(kind, cluster, strategy, torch.bfloat16, 8)
                    if kind in ("causal", "custom"):
                        print("  bf16 %-22s %s %-6s dcp error / plain bf16 error: %s" %
                              (kind, cluster, strategy, rel))


@unittest.skipUnless(torch.cuda.is_available(), "no CUDA device: the GPU case is skipped")
class AttentionCuda(unittest.TestCase):
    """Every rank on one GPU (bf16, fp16, head dim 64),
    FlashAttention's rule against plain PyTorch attention in the same type on the GPU."""

    def test_masks_one_gpu(self):
        lengths, d = [700, 37, 300, 1, 129], 64
        for dtype in (torch.bfloat16, torch.float16):
            for kind in MASKS:
                masks = mask_specs(kind, lengths, random.Random(4))
                with self.subTest(mask=kind, dtype=dtype):
                    plan = dt.plan(lengths, masks, "1x4", q_heads=8, kv_heads=2,
                                   head_dim=d, dtype=dtype, block_size=128, strategy="metis")
                    g = torch.Generator().manual_seed(9)
                    x = [torch.randn(sum(lengths), h, d, generator=g, dtype=torch.float64)
                         .to(dtype) for h in (8, 2, 2, 8)]
                    want = run_torch(*(t.double() for t in x), lengths, masks)
                    got = run_dcp(plan, *(t.cuda() for t in x))
                    plain = run_torch(*(t.cuda() for t in x), lengths, masks)
                    step = 2.0 ** (-8 if dtype == torch.bfloat16 else -11)
                    for name, a, w, p in zip(("O", "dQ", "dK", "dV"), got, want, plain):
                        err, low = ref.max_err(a.cpu(), w), ref.max_err(p.cpu(), w)
                        self.assertLessEqual(err, 2 * low + step * ref.peak(w),
                                             "%s %s %s: error %.3g, plain %.3g" %
                                             (name, kind, dtype, err, low))


class Surface(unittest.TestCase):
    """Plans, layouts, bytes and errors as the Python package shows them."""

    def setUp(self):
        self.plan = dt.plan(LENGTHS, "causal", "2x2", **SHAPE, block_size=BLOCK,
                            strategy="metis", seed=3)

    def test_local_indices_partition_tokens(self):
        idx = torch.cat([self.plan.local_indices(r) for r in range(self.plan.num_ranks)])
        self.assertEqual(idx.dtype, torch.long)
        self.assertTrue(torch.equal(idx.sort().values, torch.arange(sum(LENGTHS))))

    def test_stats(self):
        s = self.plan.stats()
        self.assertEqual(s["num_ranks"], 4)
        # the default (metis) hands back zigzag's plan, or one of its hierarchical candidates
        # (documents packed into nodes; head groups over a node), where that one is faster
        self.assertIn(s["strategy"], ("metis", "zigzag", "nodes", "ulysses"))
        self.assertEqual(s["total_tokens"], sum(LENGTHS))
        pairs = sum(ref.mask_matrix("causal", n).sum().item() for n in LENGTHS)
        self.assertEqual(s["total_flops"], 4 * D * HQ * pairs)
        ranks = [self.plan.rank_stats(r) for r in range(4)]
        self.assertEqual(sum(r["local_tokens"] for r in ranks), sum(LENGTHS))

    def test_bytes_round_trip(self):
        b = self.plan.to_bytes()
        again = dt.plan_from_bytes(b)
        self.assertEqual(again.to_bytes(), b)
        self.assertEqual(again.lengths, LENGTHS)
        self.assertEqual(again.shape, (HQ, HKV, D))
        self.assertEqual(again.dtype, torch.float32)
        for r in range(4):
            self.assertTrue(torch.equal(again.local_indices(r), self.plan.local_indices(r)))
        q, k, v, dout = inputs(LENGTHS, torch.float32, 5)
        a, b2 = run_dcp(self.plan, q, k, v, dout), run_dcp(again, q, k, v, dout)
        for x, y in zip(a, b2):
            self.assertTrue(torch.equal(x, y))

    def test_corrupt_bytes_raise(self):
        b = bytearray(self.plan.to_bytes())
        b[len(b) // 2] ^= 0x55
        with self.assertRaises(dcp.DcpError) as e:
            dt.plan_from_bytes(bytes(b))
        self.assertEqual(e.exception.status_name, "DCP_ERR_PLAN_CORRUPT")

    def test_bad_arguments_raise_with_the_library_text(self):
        with self.assertRaises(dcp.DcpError) as e:
            dt.plan(LENGTHS, "window:0", "1x2", **SHAPE)
        self.assertEqual(e.exception.status, 1)
        self.assertIn("window", e.exception.message)
        with self.assertRaises(dcp.DcpError) as e:
            dt.plan([10, 0], "causal", "1x2", **SHAPE)
        self.assertIn("lengths[1]", str(e.exception))
        with self.assertRaises(dcp.DcpError):
            dt.plan(LENGTHS, "causal", "1x2", q_heads=3, kv_heads=2, head_dim=D,
                    dtype=torch.float32)  # Hq % Hkv
        with self.assertRaises(dcp.DcpError):
            dt.plan(LENGTHS, "causal", "nonsense", **SHAPE)

    def test_wrong_tensors_refused_before_the_library(self):
        n = self.plan.num_ranks
        q, k, v, _ = inputs(LENGTHS, torch.float32, 5)
        idx = [self.plan.local_indices(r) for r in range(n)]
        qs, ks, vs = ([x[i] for i in idx] for x in (q, k, v))
        with self.assertRaises(ValueError):  # one row short on rank 1
            dt.attention_inproc(self.plan, qs[:1] + [qs[1][1:]] + qs[2:], ks, vs)
        with self.assertRaises(TypeError):  # fp64 for an fp32 plan
            dt.attention_inproc(self.plan, [x.double() for x in qs], ks, vs)
        with self.assertRaises(ValueError):  # 3 ranks' tensors
            dt.attention_inproc(self.plan, qs[:3], ks[:3], vs[:3])

    def test_planner_service(self):
        batches = [(LENGTHS, "causal"), ([40, 300, 7], "window:24"), (LENGTHS[::-1], "full")]
        with dt.Planner("2x2", num_threads=2) as planner:
            tickets = [planner.submit(n, m, **SHAPE, block_size=BLOCK, strategy="metis",
                                      seed=3) for n, m in batches]
            again = planner.submit(LENGTHS, "causal", **SHAPE, block_size=BLOCK,
                                   strategy="metis", seed=3)
            plans = [planner.wait(t) for t in tickets]
            while True:  # try_wait: None until made
                cached = planner.try_wait(again)
                if cached is not None:
                    break
            with self.assertRaises(dcp.DcpError) as e:  # checked at submission
                planner.submit([10, 0], "causal", **SHAPE)
            self.assertIn("lengths[1]", e.exception.message)
            stats = planner.stats()
        self.assertEqual(plans[0].to_bytes(), self.plan.to_bytes())
        self.assertEqual(cached.to_bytes(), self.plan.to_bytes())
        for (n, m), p in zip(batches, plans):
            self.assertEqual(p.lengths, n)
            self.assertEqual(p.to_bytes(), dt.plan(n, m, "2x2", **SHAPE, block_size=BLOCK,
                                                   strategy="metis", seed=3).to_bytes())
        self.assertEqual((stats["submitted"], stats["pending"]), (4, 0))
        self.assertEqual(stats["planned"] + stats["cache_hits"], 4)
        self.assertGreaterEqual(stats["cache_hits"], 1)

    def test_shape_from_keywords_or_example_tensors(self):
        q, k, _, _ = inputs(LENGTHS, torch.float32, 5)
        like = dt.plan(LENGTHS, "causal", "2x2", like=(q, k), block_size=BLOCK,
                       strategy="metis", seed=3)
        self.assertEqual(like.to_bytes(), self.plan.to_bytes())
        self.assertEqual(like.checksum, self.plan.checksum)
        with warnings.catch_warnings(record=True) as seen:  # the old positional form
            warnings.simplefilter("always")
            old = dt.plan(LENGTHS, "causal", "2x2", HQ, HKV, D, torch.float32,
                          block_size=BLOCK, strategy="metis", seed=3)
        self.assertTrue(any(issubclass(w.category, DeprecationWarning) for w in seen))
        self.assertEqual(old.to_bytes(), self.plan.to_bytes())
        with self.assertRaises(TypeError) as e:  # no shape at all
            dt.plan(LENGTHS, "causal", "2x2")
        self.assertIn("q_heads", str(e.exception))
        with self.assertRaises(TypeError):
            dt.plan(LENGTHS, "causal", "2x2", HQ, q_heads=HQ, kv_heads=HKV, head_dim=D,
                    dtype=torch.float32)

    def test_local_positions_are_positions_in_the_sequence(self):
        starts = [sum(LENGTHS[:s]) for s in range(len(LENGTHS))]
        for r in range(self.plan.num_ranks):
            idx, pos = self.plan.local_indices(r), self.plan.local_positions(r)
            seq = self.plan.local_sequences(r)
            self.assertEqual(pos.shape, idx.shape)
            want = idx - torch.tensor(starts)[seq]
            self.assertTrue(torch.equal(pos, want))
            self.assertTrue(bool((pos < torch.tensor(LENGTHS)[seq]).all()))

    def test_gather_undoes_dispatch(self):
        x = torch.randn(sum(LENGTHS), 3, requires_grad=True)
        parts = [self.plan.dispatch(x, r) for r in range(self.plan.num_ranks)]
        y = self.plan.gather(parts)
        self.assertTrue(torch.equal(y, x))
        y.sum().backward()  # every token once
        self.assertTrue(torch.equal(x.grad, torch.ones_like(x)))
        with self.assertRaises(ValueError):
            self.plan.gather(parts[:2])

    def test_lse_and_call_time_scale_match_the_reference(self):
        masks = ["causal", "window:24", "full", "lambda:8:24", "custom"]
        rng = random.Random(3)
        masks = [ref.random_custom(n, rng) if m == "custom" else m
                 for n, m in zip(LENGTHS, masks)]
        plan = dt.plan(LENGTHS, masks, "2x2", **SHAPE, block_size=BLOCK, strategy="metis")
        q, k, v, dout = inputs(LENGTHS, torch.float32, 11)
        for scale in (None, 0.05):
            n = plan.num_ranks
            leaves = [[plan.dispatch(x, r).clone().requires_grad_() for r in range(n)]
                      for x in (q, k, v)]
            outs, lses = dt.attention_inproc(plan, *leaves, softmax_scale=scale,
                                             return_lse=True)
            torch.autograd.backward(outs, [plan.dispatch(dout, r) for r in range(n)])
            want_leaves = [x.double().requires_grad_() for x in (q, k, v)]
            want_o, want_lse = ref.attention(*want_leaves, LENGTHS, masks, scale=scale,
                                             return_lse=True)
            want_o.backward(dout.double())
            lse = plan.gather(lses)
            finite = torch.isfinite(want_lse)
            self.assertTrue(torch.equal(torch.isfinite(lse), finite))  # -inf where no key
            self.assertLessEqual(ref.max_err(lse[finite], want_lse[finite]), 1e-5)
            self.assertLessEqual(ref.max_err(plan.gather(outs), want_o), 1e-5 * ref.peak(want_o))
            for i, name in enumerate(("dq", "dk", "dv")):
                got = plan.gather([x.grad for x in leaves[i]])
                want = want_leaves[i].grad
                self.assertLessEqual(ref.max_err(got, want), 1e-5 * ref.peak(want),
                                     "%s, softmax_scale %s" % (name, scale))
        with self.assertRaises(ValueError):
            dt.attention_inproc(plan, *leaves, softmax_scale=-1.0)

    def test_bad_lengths_and_custom_ranges_refused_by_name(self):
        cases = [([10, 2.0], "causal", TypeError, "lengths[1]"),
                 ([10, 3], [torch.zeros(9, 4, dtype=torch.int32), "causal"], ValueError,
                  "mask[0]: custom ranges have 9 rows"),
                 ([10, 3], [torch.zeros(11, 4, dtype=torch.int64), "causal"], ValueError,
                  "11 rows"),
                 ([10, 3], [torch.zeros(0, 4, dtype=torch.int32), "causal"], ValueError,
                  "0 rows"),
                 ([10, 3], [torch.zeros(10, 4), "causal"], TypeError, "give integers"),
                 ([10, 3], ["causal", [(0, 1, 0, 1)] * 2 + [(0, 1.5, 0, 0)]], TypeError,
                  "mask[1] ranges[9] = 1.5"),
                 ([10, 3], ["causal", [(0, 1, 0)] * 3], ValueError, "row 0"),
                 ([10, 3], "causal", TypeError, "block_size")]
        for lengths, mask, exc, text in cases:
            with self.subTest(text=text), self.assertRaises(exc) as e:
                extra = {"block_size": 8.5} if text == "block_size" else {}
                dt.plan(lengths, mask, "1x2", **SHAPE, **extra)
            self.assertIn(text, str(e.exception))

    def test_values_that_do_not_fit_c_are_refused_by_name(self):
        """ctypes would wrap them silently (2**32 + 20 tokens planned as 20)."""
        big = 2 ** 32 + 20
        cases = [([big, 13], "causal", {}, ValueError, "lengths[0] = 4294967316"),
                 ([20, 13], "causal", {"q_heads": 2 ** 32 + 2}, ValueError, "q_heads"),
                 ([20, 13], "causal", {"block_size": big}, ValueError, "block_size"),
                 ([20, 13], "causal", {"seed": 2 ** 64}, ValueError, "seed"),
                 ([20, 13], "causal", {"strategy": 2 ** 32}, ValueError, "strategy"),
                 ([20, 13], "causal", {"strategy": True}, TypeError, "strategy"),
                 ([20, 13], {"g": "causal"}, {"layers": {"g": big}}, ValueError, "layers['g']"),
                 ([6, 13], [[(0, big, 0, 0)] * 6, "causal"], {}, ValueError, "ranges[1]"),
                 ([20, 13], "causal\0junk", {}, ValueError, "NUL"),
                 ([20, 13], "causal", {"softmax_scale": 1e-50}, ValueError, "float32"),
                 ([20, 13], "causal", {"softmax_scale": "0.5"}, TypeError, "softmax_scale"),
                 ([20, 13], "causal", {"eps_inter": "x"}, TypeError, "eps_inter")]
        for lengths, mask, extra, exc, text in cases:
            with self.subTest(text=text), self.assertRaises(exc) as e:
                args = dict(SHAPE)
                args.update(extra)
                dt.plan(lengths, mask, "1x2", **args)
            self.assertIn(text, str(e.exception))
        with self.assertRaises(ValueError):
            dt.plan([20, 13], "causal", "1x2\0zz", **SHAPE)
        lib = dcp.load()
        with self.assertRaises(ValueError) as e:
            lib.allowed(lib.mask("causal"), big, 5)
        self.assertIn("length", str(e.exception))
        with self.assertRaises(ValueError) as e:  # the safety net under every C call
            lib.lib.dcp_mask_allowed(C.byref(lib.mask("causal")), big, 5, (C.c_int32 * 4)())
        self.assertIn("dcp_mask_allowed: argument 2", str(e.exception))

    def test_wrong_kinds_of_argument_are_named(self):
        plan = dt.plan([20, 13], "causal", "1x2", **SHAPE)
        q = torch.randn(33, HQ, D)
        cases = [
            (lambda: dt.plan([20], None, "1x2", **SHAPE), TypeError, "mask = None"),
            (lambda: dt.plan([20], b"causal", "1x2", **SHAPE), TypeError, "mask = b'causal'"),
            (lambda: dt.plan([20, 13], ["causal", 5], "1x2", **SHAPE), TypeError,
             "mask[1] = 5 is not a mask"),
            (lambda: dt.plan([20], "causal", "1x2", like=(None, None)), ValueError, "like[0]"),
            (lambda: dt.plan([20], "causal", "1x2", like=(q, q, q, q)), ValueError, "4 tensors"),
            (lambda: dt.plan([20], "causal", "1x2", like=(q, q, q[:, :1])), ValueError,
             "same tokens and heads"),
            (lambda: dt.plan([20], "causal", "1x2", softcap=-1.0, **SHAPE), ValueError,
             "softcap"),
            (lambda: dt.plan([20], "causal", "1x2", like=(q, q[:5])), ValueError,
             "same tokens"),
            (lambda: dt.plan([20], {"a": "causal"}, "1x2", layers=[1, 2], **SHAPE), TypeError,
             "layers = [1, 2]"),
            (lambda: dt.plan_from_bytes(None), TypeError, "not NoneType"),
            (lambda: plan.local_indices(1.5), TypeError, "rank = 1.5"),
            (lambda: plan.rank_stats("0"), TypeError, "rank = '0'"),
            (lambda: plan.dispatch(torch.randn(40, HQ, D), 0), ValueError, "of 33 rows"),
            (lambda: plan.gather([q[:17], q[:16]]), ValueError, "rank 0's tensor has 17 rows"),
            (lambda: dt.attention_inproc(None, [q], [q], [q]), TypeError, "a dcp.torch.Plan"),
            (lambda: dt.attention(None, plan, q, q, q), TypeError, "a dcp.torch.Context"),
            (lambda: dt.attention_inproc(plan, [q[:20], q[:13]], [q[:20, :HKV]] * 2,
                                         [q[:20, :HKV]] * 2, sinks=torch.zeros(HQ + 1)),
             ValueError, "sinks must be a [4] tensor"),
            (lambda: dt.Planner("1x2", num_threads="2"), TypeError, "num_threads = '2'")]
        for fn, exc, text in cases:
            with self.subTest(text=text), self.assertRaises(exc) as e:
                fn()
            self.assertIn(text, str(e.exception))

    def test_closing_a_cluster_closes_its_planners_first(self):
        """A planner reads its cluster: closed under it, it would plan from freed memory."""
        cl = dcp.load().cluster("1x2")
        planner = dt.Planner(cl)
        ticket = planner.submit([20, 13], "causal", **SHAPE)
        planner.wait(ticket)
        cl.close()
        with self.assertRaises(ValueError) as e:
            planner.submit([20, 13], "causal", **SHAPE)
        self.assertIn("closed", str(e.exception))

    def test_reference_masks_match_the_library(self):
        lib = dcp.load()
        rng = random.Random(2)
        for spec in MASKS[:6] + ["window", "lambda", "blockwise", "shared-question"]:
            for n in (1, 7, 40, 257):
                m, want = lib.mask(spec), ref.mask_matrix(spec, n)
                for i in sorted(rng.sample(range(n), min(n, 12))):
                    keys = torch.zeros(n, dtype=torch.bool)
                    keys[lib.allowed(m, n, i)] = True
                    self.assertTrue(torch.equal(keys, want[i]), "%s L=%d query %d" % (spec, n, i))


if __name__ == "__main__":
    unittest.main()
