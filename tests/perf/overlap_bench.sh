#!/bin/sh
# How much of the default's (metis) simulated training step is communication it does not hide:
# 32/8 heads x 128, bf16, block 1024, 2 head groups, 4096 tokens per GPU (128K on
# 4x8, 256K on 8x8, 512K on 16x8), h100-ib and a100-efa presets, masks causal, lambda,
# blockwise and shared-question, the shared WLB-LLM lengths and the built-in histogram,
# BATCHES batches each (DCP's packing, seed 1). Per row: step / compute (the simulated
# forward + backward over the slowest rank's kernel time, as dcp-plan --simulate reports it)
# and exposed communication as a share of the step, mean and worst batch, forward and
# backward apart, and the median planning time.
#   tests/perf/overlap_bench.sh run [BIN_DIR] [BATCHES] [OUT.jsonl] [dcp-plan flags...]
#       (build/bin, 4, overlap.jsonl): plans and simulates, writes JSON lines, prints the table
#   tests/perf/overlap_bench.sh show FILE.jsonl          the table of a run
#   tests/perf/overlap_bench.sh compare BEFORE.jsonl AFTER.jsonl
#       the two side by side, rows matched by (lengths, cluster, mask)
#   tests/perf/overlap_bench.sh cpu BEFORE_BIN AFTER_BIN [ROUNDS] [dcp-attn-test flags...]
#       (3 rounds) the CPU executor: dcp-attn-test --backward --check on 8 in-process ranks
#       (2x4, 16K tokens of the built-in histogram, causal and lambda, every strategy), the
#       two builds one after the other ROUNDS times; per row the median over the rounds of
#       each run's median forward and backward time, before and after (a quiet host gives
#       figures worth comparing: the ranks share its cores)
# DCP_BENCH_CLUSTERS ("4x8 8x8 16x8"), DCP_BENCH_PRESETS ("h100-ib a100-efa") and
# DCP_BENCH_MASKS narrow a run.
set -e
MODE=${1:-run}
[ $# -ge 1 ] && shift
summarise() {
    python3 - "$@" <<'PY'
import json, statistics, sys
def load(path):
    rows = {}
    for line in open(path):
        r = json.loads(line)
        key = (r["src"], r["cluster"], r["mask"])
        rows.setdefault(key, []).append(r)
    return rows
def figures(rs):
    step = [r["sim_fwd_ms"] + r["sim_bwd_ms"] for r in rs]
    ratio = [s / r["sim_compute_ms"] for s, r in zip(step, rs)]
    exp = [r["sim_exposed_comm_ms"] / s for s, r in zip(step, rs)]
    fwd = [r["sim_fwd"]["ms"] / r["sim_fwd"]["compute_ms"] for r in rs if "sim_fwd" in r]
    bwd = [r["sim_bwd"]["ms"] / r["sim_bwd"]["compute_ms"] for r in rs if "sim_bwd" in r]
    return {"n": len(rs), "ratio": statistics.mean(ratio), "ratio_max": max(ratio),
            "exp": 100 * statistics.mean(exp), "exp_max": 100 * max(exp),
            "fwd": statistics.mean(fwd) if fwd else float("nan"),
            "bwd": statistics.mean(bwd) if bwd else float("nan"),
            "step": statistics.mean(step),
            "plan": statistics.median(r["plan_ms"] for r in rs)}
def order(key):
    src, cl, mask = key
    n = int(cl.split("x")[0])
    return (src, cl.split("x")[1], n, ["causal", "lambda", "blockwise", "shared"].index(
        next(m for m in ["causal", "lambda", "blockwise", "shared"] if mask.startswith(m))))
def cell(f):
    return (f"{f['ratio']:5.2f} {f['ratio_max']:5.2f}  {f['exp']:5.1f} {f['exp_max']:5.1f}  "
            f"{f['fwd']:5.2f} {f['bwd']:5.2f} {f['step']:8.2f} {f['plan']:8.1f}")
head = "x-comp worst  exp% worst    fwd   bwd  step(ms)  plan(ms)"
runs = [load(p) for p in sys.argv[1:]]
keys = sorted(set().union(*[set(r) for r in runs]), key=order)
print("# step / compute: mean and worst batch; exposed: % of the step, mean and worst; "
      "fwd, bwd: each pass's time / its compute (mean); step: mean ms; plan: median ms")
print(f"{'lengths':9s} {'cluster':13s} {'mask':22s} {'n':>2s}  " +
      ("  |  ".join(["before: " + head, "after:  " + head]) if len(runs) == 2 else head))
for k in keys:
    cells = [cell(figures(r[k])) if k in r else "-" for r in runs]
    n = max(len(r.get(k, [])) for r in runs)
    print(f"{k[0]:9s} {k[1]:13s} {k[2][:22]:22s} {n:2d}  " + "  |  ".join(cells))
PY
}
cpu_compare() {
    python3 - "$@" <<'PY'
import json, statistics, sys
runs = {}
for path in sys.argv[1:]:
    which = "after" if "after" in path.rsplit("/", 1)[-1] else "before"
    for line in open(path):
        r = json.loads(line)
        runs.setdefault((r["mask"], r["strategy"]), {}).setdefault(which, []).append(r)
print("# CPU executor, 8 in-process ranks: median over rounds of each run's median (ms)")
print(f"{'mask':16s} {'strategy':8s} {'fwd before':>10s} {'fwd after':>10s} {'bwd before':>10s} "
      f"{'bwd after':>10s}  check")
for (mask, strat), w in sorted(runs.items()):
    cell = lambda k, key: statistics.median(r[key] for r in w[k]) if k in w else float("nan")
    ok = all(r["passed"] and r["bwd_passed"] for k in w for r in w[k])
    print(f"{mask[:16]:16s} {strat:8s} {cell('before', 'exec_ms'):10.1f} {cell('after', 'exec_ms'):10.1f} "
          f"{cell('before', 'bwd_exec_ms'):10.1f} {cell('after', 'bwd_exec_ms'):10.1f}  "
          f"{'PASS' if ok else 'FAIL'}")
PY
}
case $MODE in
show) summarise "$1"; exit 0 ;;
cpu)
    BEFORE=$1 AFTER=$2 ROUNDS=${3:-3}
    [ $# -ge 3 ] && shift 3 || shift $#
    T=$(mktemp -d)
    trap 'rm -rf "$T"' EXIT
    for i in $(seq "$ROUNDS"); do
        for w in before after; do
            [ $w = before ] && B=$BEFORE || B=$AFTER
            "$B/dcp-attn-test" --cluster 2x4 --tokens 16384 --mask causal,lambda --strategy all \
                --backward --check --json "$@" >>"$T/$w.jsonl"
        done
    done
    cpu_compare "$T/before.jsonl" "$T/after.jsonl"
    exit 0 ;;
compare) summarise "$1" "$2"; exit 0 ;;
run) ;;
*) echo "usage: $0 run [BIN_DIR] [BATCHES] [OUT.jsonl] [flags] | show F | compare A B | cpu A B" >&2
   exit 2 ;;
esac
B=${1:-build/bin}
BATCHES=${2:-4}
OUT=${3:-overlap.jsonl}
[ $# -ge 3 ] && shift 3 || shift $#
LENGTHS=${DCP_LENGTHS_FILE:-$(dirname "$0")/../../../shared/data/lengths_wlbllm.txt}
CLUSTERS=${DCP_BENCH_CLUSTERS:-4x8 8x8 16x8}
PRESETS=${DCP_BENCH_PRESETS:-h100-ib a100-efa}
MASKS=${DCP_BENCH_MASKS:-causal,lambda,blockwise,shared-question}
: >"$OUT"
for src in wlbllm histogram; do
    FILE=
    if [ $src = wlbllm ]; then
        [ -r "$LENGTHS" ] || { echo "no $LENGTHS: the WLB-LLM rows are skipped" >&2; continue; }
        FILE="--lengths-file $LENGTHS"
    fi
    for cl in $CLUSTERS; do
        nodes=${cl%x*}
        tokens=$((nodes * 8 * 4096))
        for preset in $PRESETS; do
            # shellcheck disable=SC2086
            "$B/dcp-plan" --cluster "${nodes}x$preset" --tokens $tokens --heads 32 --kv-heads 8 \
                --head-dim 128 --block 1024 --head-blocks 2 --mask "$MASKS" --strategy metis \
                --batches "$BATCHES" --seed 1 --simulate --json $FILE "$@" 2>/dev/null |
                sed "s/^{/{\"src\": \"$src\", \"cluster\": \"${nodes}x$preset\", /" >>"$OUT"
        done
    done
done
summarise "$OUT"
