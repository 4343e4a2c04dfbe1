#!/usr/bin/env python3
"""PyTorch's own cuDNN attention graphs, captured on a GPU machine (the GPU report's
sdpa-capture step): one forward and backward of scaled_dot_product_attention on the cuDNN
backend per case, with cuDNN's API log on, so that the backend descriptors PyTorch's frontend
hands to cuDNN can be compared with dcp's graphs and with the CPU captures of cudnn-frontend in
tests/data/cudnn_sdpa_graphs (bf16, d 128, GQA 32/8; causal and full; the packed
variable-length path where this PyTorch offers one).

    python3 sdpa_capture.py OUTDIR

cuDNN reads CUDNN_LOGLEVEL_DBG / CUDNN_LOGDEST_DBG when it loads, so each case runs in a
child process of its own with them set; OUTDIR/<case>.cudnn.log is that case's log, and
OUTDIR/sdpa_capture.json says per case what ran (or why not). Exit 0 when every case that
PyTorch offers ran on the cuDNN backend.
"""
import json
import os
import subprocess
import sys

CASES = ["causal", "full", "varlen_causal"]


def child(case):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.manual_seed(0)
    dev = "cuda"
    hq, hkv, d = 32, 8, 128
    if case.startswith("varlen"):
        try:
            from torch.nn.attention.varlen import varlen_attn  # PyTorch >= 2.10
        except ImportError as e:
            return {"case": case, "ran": False, "why": "no varlen attention in this PyTorch: %s" % e}
        lens = [512, 1024, 256, 2304]
        total = sum(lens)
        cu = torch.tensor([0] + [sum(lens[: i + 1]) for i in range(len(lens))], device=dev,
                          dtype=torch.int32)
        q = torch.randn(total, hq, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn(total, hkv, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
        v = torch.randn(total, hkv, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
        try:
            o = varlen_attn(q, k, v, cu, cu, max(lens), max(lens), is_causal=True)
        except Exception as e:  # GQA or this signature may not be there
            return {"case": case, "ran": False, "why": "varlen_attn: %s" % e}
    else:
        b, s = 2, 4096
        q = torch.randn(b, hq, s, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn(b, hkv, s, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
        v = torch.randn(b, hkv, s, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            o = F.scaled_dot_product_attention(q, k, v, is_causal=case == "causal",
                                               enable_gqa=True)
    o.backward(torch.randn_like(o))
    torch.cuda.synchronize()
    return {"case": case, "ran": True, "torch": torch.__version__,
            "cudnn": torch.backends.cudnn.version()}


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--case":
        print(json.dumps(child(sys.argv[2])))
        return 0
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    results, ok = [], True
    for case in CASES:
        log = os.path.join(out, case + ".cudnn.log")
        env = dict(os.environ, CUDNN_LOGLEVEL_DBG="3", CUDNN_LOGDEST_DBG=log)
        p = subprocess.run([sys.executable, __file__, "--case", case], env=env,
                           capture_output=True, text=True, timeout=300)
        try:
            r = json.loads(p.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            r = {"case": case, "ran": False, "why": (p.stderr or p.stdout)[-2000:]}
        r["log_bytes"] = os.path.getsize(log) if os.path.exists(log) else 0
        results.append(r)
        ok &= r["ran"] or not case.startswith(("causal", "full"))
        print("%-14s %s %s" % (case, "ran" if r["ran"] else "not run:", r.get("why", "")))
    with open(os.path.join(out, "sdpa_capture.json"), "w") as f:
        json.dump(results, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
