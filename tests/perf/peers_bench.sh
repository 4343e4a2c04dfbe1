#!/bin/sh
# The default (metis) against the peer policies, simulated, as partition/README.md's comparison: 8x8
# h100-ib and 4 x p4de, the built-in length histogram and the shared WLB-LLM lengths, causal,
# lambda and blockwise masks, batches of TOKENS tokens (seeds 1..SEEDS), 32/8 heads x 128
# (bf16), block 1024, 2 head groups; each kernel table both plans and simulates (--kernels).
# Prints a table per (cluster, kernels): per policy its simulated step over the default's
# (geometric mean over the batches and the worst batch: below 1 where the default lost), its
# exposed communication's share of its step and its planning time; then the figures the
# default is held to.
#   tests/perf/peers_bench.sh [BIN_DIR] [OUT.jsonl]     (build/bin; rows kept in OUT.jsonl)
# Environment: PEERS_CLUSTERS ("8xh100-ib 4xp4de"), PEERS_KERNELS ("h100 h100-cudnn" for
# H100 clusters; A100 clusters use their own table), PEERS_SEEDS (3), PEERS_TOKENS (262144),
# PEERS_STRATEGIES (peers,packed:16,magi:512), PEERS_MASKS ("causal lambda blockwise").
set -e
B=${1:-build/bin}
OUT=${2:-$(mktemp)}
LENGTHS=${DCP_LENGTHS_FILE:-$(dirname "$0")/../../../shared/data/lengths_wlbllm.txt}
CLUSTERS=${PEERS_CLUSTERS:-8xh100-ib 4xp4de}
SEEDS=${PEERS_SEEDS:-3}
TOKENS=${PEERS_TOKENS:-262144}
STRATEGIES=${PEERS_STRATEGIES:-peers,packed:16,magi:512}
MASKS=${PEERS_MASKS:-causal lambda blockwise}
: >"$OUT"
for cluster in $CLUSTERS; do
    case $cluster in *h100*) kernels=${PEERS_KERNELS:-h100 h100-cudnn} ;; *) kernels=own ;; esac
    for k in $kernels; do
        kflag=
        [ "$k" != own ] && kflag="--kernels $k"
        for src in histogram wlbllm; do
            lf=
            if [ $src = wlbllm ]; then
                [ -r "$LENGTHS" ] || { echo "no $LENGTHS: WLB-LLM batches skipped" >&2; continue; }
                lf="--lengths-file $LENGTHS"
            fi
            for mask in $MASKS; do
                seed=1
                while [ $seed -le "$SEEDS" ]; do
                    # shellcheck disable=SC2086
                    "$B/dcp-plan" --cluster "$cluster" $lf --tokens "$TOKENS" --heads 32 \
                        --kv-heads 8 --head-dim 128 --block 1024 --head-blocks 2 --mask "$mask" \
                        --seed $seed --strategy "$STRATEGIES" --simulate $kflag --json |
                        sed "s/^{/{\"cluster\": \"$cluster\", \"kernels\": \"$k\", \"src\": \"$src\", \"seed\": $seed, /" >>"$OUT"
                    seed=$((seed + 1))
                done
            done
        done
    done
done
python3 - "$OUT" <<'PY'
import collections, json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
step = lambda r: r["sim_fwd_ms"] + r["sim_bwd_ms"]
groups = collections.OrderedDict()
for r in rows:
    groups.setdefault((r["cluster"], r["kernels"]), []).append(r)
worst_lead, worst_exposed, packed_ratios = 1e9, 0.0, []
for (cluster, kernels), rs in groups.items():
    batches = collections.OrderedDict()
    for r in rs:
        batches.setdefault((r["src"], r["mask"], r["seed"]), {})[r["strategy"]] = r
    names = []
    for r in rs:
        if r["strategy"] not in names:
            names.append(r["strategy"])
    cols = collections.OrderedDict()
    for (src, mask, seed) in batches:
        cols.setdefault((src, mask), []).append((src, mask, seed))
    print(f"\n{cluster}, kernels {kernels}: step over the default's, geometric mean [worst batch] "
          f"per lengths and mask; exposed: its communication's share of its step (mean); plan: "
          f"median ms")
    head = "| policy | " + " | ".join(f"{s} {m.split(':')[0]}" for s, m in cols) + " | exposed | plan (ms) |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for name in names:
        cells, exposed, plans = [], [], []
        for key, bs in cols.items():
            mask = key[1]
            rat = []
            for b in bs:
                d, x = batches[b].get("metis"), batches[b].get(name)
                if not d or not x:
                    continue
                rat.append(step(x) / step(d))
                exposed.append(x["sim_exposed_comm_ms"] / step(x))
                plans.append(x["plan_ms"])
                if name != "metis":
                    worst_lead = min(worst_lead, step(x) / step(d))
                if name == "metis" and cluster.startswith("8x") and "cudnn" in kernels:
                    worst_exposed = max(worst_exposed, exposed[-1])
                if name.startswith("packed") and name in ("packed", "packed:8") and cluster.startswith("8x") and mask.startswith("causal"):
                    packed_ratios.append(step(x) / step(d))
            if rat:
                g = math.exp(sum(map(math.log, rat)) / len(rat))
                cells.append(f"{g:.2f} [{min(rat):.2f}]")
            else:
                cells.append("refused")
        plans.sort()
        med = f"{plans[len(plans) // 2]:.0f}" if plans else "-"
        ex = f"{100 * sum(exposed) / len(exposed):.1f}%" if exposed else "-"
        print(f"| {name} | " + " | ".join(cells) + f" | {ex} | {med} |")
print(f"\nthe default's step over the best policy's, worst batch: {1 / worst_lead:.3f}")
if packed_ratios:
    g = math.exp(sum(map(math.log, packed_ratios)) / len(packed_ratios))
    print(f"lead over packed:8 at 64 GPUs, causal: geometric mean {g:.2f} over {len(packed_ratios)} batches")
print(f"the default's exposed communication at 64 H100s with cuDNN-rate kernels, worst: {100 * worst_exposed:.1f}%")
PY
