#!/bin/sh
# One plan for a model whose layers use different masks, against the alternatives
# (dcp-plan --layers --compare): the joint placement of every layer kind, beside (a) the
# placement planned for the global mask alone and used for every layer, (b) the one planned
# for the window alone, (c) a placement per kind with an all-to-all re-layout between kinds.
# Gemma 3 (five window-1024 layers per global layer) and GPT-OSS (128-token windows
# alternating with causal layers); the built-in length histogram and the shared WLB-LLM
# lengths; 4x8 and 8x8 (the cost model's default figures), 128K and 512K tokens; BATCHES
# batches each, METIS (the default strategy), 8/2 heads x 128 bf16, block 1024, 2 head groups.
# Prints the model's predicted and simulated attention step (forward + backward, every layer)
# per placement, the joint plan's against the best alternative, and its planning CPU time
# against the global mask's alone (medians of REPEAT plans, on one core).
#   tests/perf/layers_bench.sh [BIN_DIR] [BATCHES] [REPEAT]   (build/bin, 2, 3)
set -e
B=${1:-build/bin}
BATCHES=${2:-2}
REPEAT=${3:-3}
LENGTHS=${DCP_LENGTHS_FILE:-$(dirname "$0")/../../../shared/data/lengths_wlbllm.txt}
PIN=
command -v taskset >/dev/null && PIN="taskset -c $(($(nproc) - 1))"
T=$(mktemp)
trap 'rm -f "$T"' EXIT
for src in histogram wlbllm; do
    FILE=
    if [ $src = wlbllm ]; then
        [ -r "$LENGTHS" ] || { echo "no $LENGTHS: the WLB-LLM batches are skipped" >&2; break; }
        FILE="--lengths-file $LENGTHS"
    fi
    for cluster in 4x8 8x8; do
        for tokens in 131072 524288; do
            for model in gemma3 gpt-oss; do
                case $model in
                gemma3) layers=causal:1,window:1024:5 ;;
                gpt-oss) layers=causal:1,window:128:1 ;;
                esac
                # shellcheck disable=SC2086
                $PIN "$B/dcp-plan" --cluster $cluster --tokens $tokens --batches "$BATCHES" \
                    --block 1024 --head-blocks 2 --layers $layers --compare --simulate \
                    --strategy metis --repeat "$REPEAT" --json $FILE |
                    sed "s/^{/{\"src\": \"$src\", \"cluster\": \"$cluster\", \"tokens\": $tokens, \"model\": \"$model\", /" >>"$T"
            done
        done
    done
done
python3 - "$T" <<'PY'
import json, statistics, sys
from collections import defaultdict
rows = [json.loads(l) for l in open(sys.argv[1])]
cfg = defaultdict(lambda: defaultdict(list))  # config -> placement -> model rows
for r in rows:
    if r["kind"] is None:
        key = (r["src"], r["cluster"], r["tokens"], r["model"])
        cfg[key][r["placement"]].append(r)
mean = lambda rs, f: sum(r[f] for r in rs) / len(rs)
print("| lengths | cluster | tokens | model | joint pred / sim (ms) | global only | window only "
      "| per-kind + re-layout | joint vs best other (pred, sim) | plan CPU ms joint / global alone |")
print("|---|---|---|---|---|---|---|---|---|---|")
worst = []
for key in sorted(cfg, key=lambda k: (k[0], k[1], k[2], k[3])):
    p = cfg[key]
    names = list(p)
    joint = p["joint"]
    glob = next(n for n in names if n.startswith("causal"))
    win = next(n for n in names if n.startswith("window"))
    cell = lambda n: f"{mean(p[n], 'step_ms'):.2f} / {mean(p[n], 'sim_step_ms'):.2f}"
    best_p = min(mean(p[n], "step_ms") for n in (glob, win, "per-kind"))
    best_s = min(mean(p[n], "sim_step_ms") for n in (glob, win, "per-kind"))
    jp, js = mean(joint, "step_ms"), mean(joint, "sim_step_ms")
    worst.append((jp / best_p, js / best_s))
    cpu = lambda rs: statistics.median(r["plan_cpu_ms"] for r in rs)
    plan = cpu(joint) / cpu(p[glob])
    print(f"| {key[0]} | {key[1]} | {key[2] // 1024}K | {key[3]} | {cell('joint')} | {cell(glob)} "
          f"| {cell(win)} | {cell('per-kind')} | {jp / best_p:.2f}x, {js / best_s:.2f}x "
          f"| {cpu(joint):.0f} / {cpu(p[glob]):.0f} ({plan:.2f}x) |")
print(f"joint / best other: predicted worst {max(w[0] for w in worst):.2f}x, "
      f"simulated worst {max(w[1] for w in worst):.2f}x over {len(worst)} configurations")
PY
