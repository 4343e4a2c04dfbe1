#!/usr/bin/env python3
"""The planner's CPU time per plan, before and after a change, on plan_bench.sh's 18 batches
(4x8, 128K tokens, block 1024, 2 head groups, 8/2 heads x 128; causal, lambda, blockwise; the
built-in histogram and the WLB-LLM lengths; seeds 1-3), default strategy.

    tests/perf/plan_cpu.py BEFORE AFTER [ROUNDS]
BEFORE and AFTER are dcp-plan binaries; BEFORE may be "AFTER --no-hierarchy" (one argument,
quoted) to time the default without its hierarchical candidates. Each batch is planned by the
two in turn ROUNDS times (default 2), each time as --repeat 6 minus --repeat 1 (the CPU time of
5 plans without the process and the batch), so that the machine's load changes neither; per
batch the medians, then the median over batches and the worst ratio. The lengths file is
$DCP_LENGTHS_FILE (default ../shared/data/lengths_wlbllm.txt beside the checkout)."""
import json
import os
import resource
import shlex
import statistics
import subprocess
import sys


def cpu_ms(cmd):
    usage = lambda: sum(resource.getrusage(resource.RUSAGE_CHILDREN)[:2])
    t0 = usage()
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return (usage() - t0) * 1e3, out


def per_plan(binary, args):
    one, _ = cpu_ms(binary + args + ["--repeat", "1"])
    six, out = cpu_ms(binary + args + ["--repeat", "6"])
    return (six - one) / 5, json.loads(out.strip().splitlines()[-1])


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    bins = {"before": shlex.split(sys.argv[1]), "after": shlex.split(sys.argv[2])}
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    here = os.path.dirname(os.path.abspath(__file__))
    lengths = os.environ.get("DCP_LENGTHS_FILE",
                             os.path.join(here, "../../../shared/data/lengths_wlbllm.txt"))
    ratios, before_ms, after_ms = [], [], []
    for src in ["histogram", "wlbllm"]:
        for mask in ["causal", "lambda", "blockwise"]:
            for seed in ["1", "2", "3"]:
                args = ["--cluster", "4x8", "--tokens", "131072", "--block", "1024",
                        "--head-blocks", "2", "--mask", mask, "--seed", seed, "--strategy",
                        "metis", "--json"]
                if src == "wlbllm":
                    args += ["--lengths-file", lengths]
                got = {"before": [], "after": []}
                for r in range(rounds):
                    for name in (["before", "after"] if r % 2 == 0 else ["after", "before"]):
                        got[name].append(per_plan(bins[name], args)[0])
                b, a = statistics.median(got["before"]), statistics.median(got["after"])
                before_ms.append(b)
                after_ms.append(a)
                ratios.append(a / b)
                print(f"{src:9s} {mask:9s} {seed}  {b:8.1f} -> {a:8.1f} ms  x{a / b:.2f}",
                      flush=True)
    mb, ma = statistics.median(before_ms), statistics.median(after_ms)
    print(f"median per plan {mb:.1f} -> {ma:.1f} ms (x{ma / mb:.2f}); per batch: median "
          f"x{statistics.median(ratios):.2f}, worst x{max(ratios):.2f}")


main()
