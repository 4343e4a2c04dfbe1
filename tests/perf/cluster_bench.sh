#!/bin/bash
# Measured speed-ups on an emulated cluster (tests/cluster/lib.sh), beside the simulator.
#
# For each host count in $HOSTS (each host one process of $RANKS / hosts rank threads, so that
# every configuration computes on the same number of ranks) and each link rate in $RATES (tc units; 0 = unshaped): dcp-calibrate measures the links and the
# kernels as the job will see them (PREFIX.node, PREFIX.json), then for each mask of $MASKS
# one batch of $TOKENS tokens sampled from the repository's length histogram
# (tests/data/doc_length_histogram.csv, seed $SEED: the default's batch has a 4560-token
# sequence among five shorter ones; the masks' windows are scaled to it) is
#  - run: dcp-attn-test under mpirun across the hosts, every strategy, forward + backward,
#    planned for the calibrated cluster (--cluster Hx@PREFIX.node: the planner sees the
#    emulated links and this machine's kernels); $ROUNDS rounds, each a job that times every
#    mask and strategy once after a warm-up, so that a change in the machine's load falls on
#    every strategy alike; the figures are medians over the rounds;
#  - simulated: dcp-plan --simulate on the same batch, options and cluster, with the
#    calibrated kernel table (--sim-kernels PREFIX.json) and, where the ranks share the
#    machine's cores, --sim-host-cores.
# Prints one row per (hosts, rate, mask, strategy): measured forward, backward and step,
# the simulated step and its error, the forward's share of time blocked in transfer waits,
# and the step's speed-up of metis (the default) over zigzag and lpt. Raw JSON lines stay in
# OUT_DIR. Needs root (network namespaces) and a quiet machine: the ranks' share of the
# cores is an input of both the calibration and the runs (the configuration line shows the
# load average). Where metis returned zigzag's plan (placement "zigzag") the two rows run the
# same plan, and their difference is the run-to-run noise.
#
#   tests/perf/cluster_bench.sh [BIN_DIR] [OUT_DIR]     (build/bin, a new temporary folder)
#   HOSTS="2 4" RANKS=8 RATES="0 1gbit 300mbit 100mbit" MASKS="causal lambda:32:512
#   blockwise:128:2 shared-question:0.2:4" TOKENS=8192 BLOCK=256 ROUNDS=3 SEED=2
#   STRATEGIES=ring,zigzag,lpt,metis HEADS=4 KV_HEADS=2 (defaults; STRATEGIES=peers with
#   KV_HEADS=4 measures the peer policies, whose head groups need the KV heads to divide)
set -u
bin=$(realpath "${1:-build/bin}")
out=${2:-$(mktemp -d /tmp/dcp-cluster-bench.XXXXXX)}
mkdir -p "$out" && out=$(realpath "$out")
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../cluster/lib.sh"
HOSTS=${HOSTS:-2 4}
RANKS=${RANKS:-8}
RATES=${RATES:-0 1gbit 300mbit 100mbit}
MASKS=${MASKS:-causal lambda:32:512 blockwise:128:2 shared-question:0.2:4}
TOKENS=${TOKENS:-8192}
BLOCK=${BLOCK:-256}
ROUNDS=${ROUNDS:-3}
SEED=${SEED:-2}
STRATEGIES=${STRATEGIES:-ring,zigzag,lpt,metis}
HEADS=${HEADS:-4}
KV_HEADS=${KV_HEADS:-2}
cluster_trap true
if ! cluster_can_run; then
    echo "cluster_bench: cannot run: $cluster_why" >&2
    exit 1
fi
cluster_sweep
export OMPI_MCA_mpi_yield_when_idle=1

# one batch from the histogram: a bin by its document count, a length uniform in the bin,
# until TOKENS (the last one cut to fit)
lengths=$(python3 - "$here/../data/doc_length_histogram.csv" "$TOKENS" "$SEED" <<'PY'
import csv, random, re, sys
rows = list(csv.DictReader(open(sys.argv[1])))
bins = [tuple(int(x) for x in re.findall(r"\d+", r["range"])) for r in rows]
weights = [int(r["number"]) for r in rows]
rng, left, out = random.Random(int(sys.argv[3])), int(sys.argv[2]), []
while left > 0:
    lo, hi = rng.choices(bins, weights)[0]
    n = min(max(1, rng.randint(lo, hi)), left)
    out.append(n)
    left -= n
print(",".join(map(str, out)))
PY
)
shape=(--seqlens "$lengths" --heads "$HEADS" --kv-heads "$KV_HEADS" --head-dim 64 --block "$BLOCK"
       --head-blocks 1 --divisions 4 --dtype fp32 --seed "$SEED" --strategy "$STRATEGIES")
echo "# cluster_bench: $RANKS ranks on hosts {$HOSTS}, rates {$RATES}, $TOKENS tokens" \
    "($(tr , '\n' <<<"$lengths" | wc -l) sequences, longest $(tr , '\n' <<<"$lengths" | sort -n |
    tail -1)), block $BLOCK, median of $ROUNDS rounds; $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# raw results in $out"
for hosts in $HOSTS; do
    threads=$((RANKS / hosts))
    cluster_up "$hosts" 0 || { echo "cannot build $hosts hosts" >&2; exit 1; }
    for rate in $RATES; do
        cluster_rate "$rate" || exit 1
        tag="h$hosts-$rate"
        cal="$out/cal-$tag"
        cluster_limit_s=600
        cluster_mpirun 1 "$hosts" "$bin/dcp-calibrate" --ranks-per-process "$threads" \
            --out "$cal" >"$cal.txt" 2>&1 || { echo "calibration failed: $(tail -3 "$cal.txt")" >&2; exit 1; }
        cores=$(sed -n '1s/.*"shared_processors": \([0-9.]*\).*/\1/p' "$cal.json")
        for mask in $MASKS; do
            "$bin/dcp-plan" --cluster "${hosts}x@$cal.node" --mask "$mask" "${shape[@]}" \
                --simulate --sim-kernels "$cal.json" --sim-host-cores "${cores:-0}" --json \
                >"$out/sim-$tag-$mask.json" || exit 1
        done
        for round in $(seq "$ROUNDS"); do
            for mask in $MASKS; do
                echo "  $hosts hosts, rate $rate, round $round, $mask (load $(cut -d' ' -f1 /proc/loadavg))" >&2
                cluster_limit_s=1800
                cluster_mpirun 1 "$hosts" "$bin/dcp-attn-test" --ranks-per-process "$threads" \
                    --cluster "${hosts}x@$cal.node" --mask "$mask" "${shape[@]}" --backward \
                    --warmup 1 --iters 1 --timeout 600 --json \
                    >>"$out/run-$tag-$mask.json" 2>"$out/run-$tag-$mask.err" ||
                    { echo "run failed: $(grep -v '^\[' "$out/run-$tag-$mask.err" | tail -3)" >&2; exit 1; }
            done
        done
    done
    cluster_down
done

python3 - "$out" "$HOSTS" "$RATES" "$MASKS" <<'PY'
import collections, json, statistics, sys
out, hosts, rates, masks = sys.argv[1], *[a.split() for a in sys.argv[2:5]]
def rows(path):
    return [json.loads(l) for l in open(path) if l.startswith("{")]
print("| hosts | link | mask | strategy | fwd ms | bwd ms | step ms [min-max] | sim step ms | "
      "sim err | fwd wait | step vs zigzag | step vs lpt | metis's step vs it |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for h in hosts:
    for rate in rates:
        for mask in masks:
            tag = f"h{h}-{rate}-{mask}"
            sim = {r["strategy"]: r for r in rows(f"{out}/sim-{tag}.json")}
            runs = collections.defaultdict(list)
            for r in rows(f"{out}/run-{tag}.json"):
                runs[r["strategy"]].append(r)
            med = lambda s, f: statistics.median(f(r) for r in runs[s])
            step = {s: med(s, lambda r: r["exec_ms"] + r["bwd_exec_ms"]) for s in runs}
            for s, rs in runs.items():
                m, r = sim[s], rs[0]
                if (m["comm_bytes"], m["inter_node_bytes"]) != (r["comm_bytes"], r["inter_node_bytes"]):
                    sys.exit(f"{tag} {s}: the simulated plan differs from the run's")
                sstep = m["sim_fwd_ms"] + m["sim_bwd_ms"]
                fwd = med(s, lambda r: r["exec_ms"])
                wait = med(s, lambda r: r["wait_us"] / 1e3 / r["exec_ms"])
                vs = lambda b: f"{step[b] / step[s]:.2f}x" if s == "metis" and b in step else ""
                shown = s if r["placement"].split(":")[0] == s.split(":")[0] else f"{s} ({r['placement']}'s plan)"
                steps = [x["exec_ms"] + x["bwd_exec_ms"] for x in rs]
                them = f"{step['metis'] / step[s]:.2f}x" if "metis" in step and s != "metis" else ""
                print(f"| {h} | {rate if rate != '0' else 'unshaped'} | {mask} | {shown} | "
                      f"{fwd:.0f} | {med(s, lambda r: r['bwd_exec_ms']):.0f} | {step[s]:.0f} "
                      f"[{min(steps):.0f}-{max(steps):.0f}] | "
                      f"{sstep:.0f} | {(sstep - step[s]) / step[s] * 100:+.0f}% | {wait * 100:.0f}% | "
                      f"{vs('zigzag')} | {vs('lpt')} | {them} |")
PY
