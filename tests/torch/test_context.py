"""dcp.torch.Context on one gloo process: the communicator it may lend dcp (nccl_comm) is
refused by name where it cannot serve (a gloo group has no NCCL communicator; not an address;
a CPU context, whose transfers never run on NCCL: libdcp's own refusal), and synchronize()
and transport_report speak for the context. (The CUDA side, a group's own NCCL communicator
lent to dcp, is tests/perf/torch_cuda_check.py's on a GPU.)

    PYTHONPATH=plugin/python python3 tests/torch/test_context.py [-v]
"""
import os
import tempfile
import unittest

import torch
import torch.distributed as dist

import dcp.torch as dt


class OneProcess(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        dist.init_process_group("gloo", init_method="file://" + os.path.join(cls.tmp.name, "s"),
                                rank=0, world_size=1)

    @classmethod
    def tearDownClass(cls):
        dist.destroy_process_group()
        cls.tmp.cleanup()

    def test_nccl_comm_refused_by_name(self):
        cases = [("group", ValueError, 'nccl_comm = "group": the group\'s backend is gloo'),
                 (1.5, TypeError, "nccl_comm = 1.5"),
                 (True, TypeError, "nccl_comm = True"),
                 (-4, ValueError, "nccl_comm = -4 is not an address"),
                 (2 ** 64, ValueError, "is not an address"),
                 (0x1000, dt.DcpError, "config.nccl_comm is set but no link uses NCCL")]
        for comm, exc, text in cases:
            with self.subTest(nccl_comm=comm), self.assertRaises(exc) as e:
                dt.Context(nccl_comm=comm)
            self.assertIn(text, str(e.exception))
        with dt.Context(nccl_comm=None) as ctx:  # nothing lent: dcp's own engines
            self.assertNotIn("nccl", ctx.transport_report)

    def test_synchronize_and_report(self):
        with dt.Context(timeout_s=5) as ctx:
            report = ctx.transport_report
            self.assertIn("engine ucx", report)
            self.assertIn("call stamps in host memory", report)
            q = torch.randn(40, 4, 16)
            plan = dt.plan([40], "causal", ctx, like=(q, q[:, :2]))
            o = dt.attention(ctx, plan, q, q[:, :2].contiguous(), q[:, :2].contiguous())
            ctx.synchronize()
            ctx.synchronize(0.5)
            self.assertEqual(o.shape, q.shape)
            with self.assertRaises(TypeError) as e:
                ctx.synchronize("1")
            self.assertIn("timeout_s = '1'", str(e.exception))
            with self.assertRaises(dt.DcpError) as e:
                ctx.synchronize(-1)
            self.assertIn("timeout_s = -1", str(e.exception))


if __name__ == "__main__":
    unittest.main()
