#!/bin/sh
# The planner on its benchmark batches: 4x8 cluster, 128K tokens, block 1024, 2 head groups,
# 8/2 heads x 128 (bf16); causal, lambda and blockwise masks; the built-in length histogram
# and the shared WLB-LLM lengths; seeds 1-3 (18 batches). Each batch is planned REPEAT times
# with the default strategy (metis) on one core; prints a line per batch and the median
# planning time, bytes moved (all, inter-node) and predicted training-step attention time.
#   tests/perf/plan_bench.sh [BIN_DIR] [REPEAT] [dcp-plan flags...]   (build/bin, 5)
set -e
B=${1:-build/bin}
REPEAT=${2:-5}
[ $# -ge 2 ] && shift 2 || shift $#
LENGTHS=${DCP_LENGTHS_FILE:-$(dirname "$0")/../../../shared/data/lengths_wlbllm.txt}
PIN=
command -v taskset >/dev/null && PIN="taskset -c $(($(nproc) - 1))"
T=$(mktemp)
trap 'rm -f "$T"' EXIT
for src in histogram wlbllm; do
    if [ $src = wlbllm ]; then
        [ -r "$LENGTHS" ] || { echo "no $LENGTHS: the WLB-LLM batches are skipped" >&2; break; }
        set -- "$@" --lengths-file "$LENGTHS"
    fi
    for mask in causal lambda blockwise; do
        for seed in 1 2 3; do
            $PIN "$B/dcp-plan" --cluster 4x8 --tokens 131072 --block 1024 --head-blocks 2 \
                --mask $mask --seed $seed --strategy metis --repeat "$REPEAT" --json "$@" |
                sed "s/^{/{\"src\": \"$src\", \"seed\": $seed, /" >>"$T"
        done
    done
done
python3 - "$T" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
step = lambda r: r["predicted_ms"] + r["bwd_predicted_ms"]
for r in rows:
    print(f"{r['src']:9s} {r['mask'][:9]:9s} seed {r['seed']}  plan {r['plan_ms']:8.1f} ms  "
          f"{r['comm_bytes'] / 1e6:7.1f} MB  inter {r['inter_node_bytes'] / 1e6:7.1f} MB  "
          f"step {step(r):7.3f} ms  {r['placement']}")
print(f"{len(rows)} batches: median plan {statistics.median(r['plan_ms'] for r in rows):.1f} ms, "
      f"{sum(r['comm_bytes'] for r in rows) / 1e6:.0f} MB moved "
      f"({sum(r['inter_node_bytes'] for r in rows) / 1e6:.0f} MB inter-node), "
      f"predicted step {sum(step(r) for r in rows):.2f} ms in all")
PY
