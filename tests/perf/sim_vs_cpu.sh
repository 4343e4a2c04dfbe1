#!/bin/sh
# The step-time simulator against the CPU executor on this host: measures the CPU kernels
# (dcp-kernel-bench, every core busy), runs one batch on 8 in-process ranks and on 8 MPI processes
# (dcp-attn-test, forward and backward), simulates the same plans with the measured kernel
# table and the host's cores (dcp-plan --simulate --sim-host-cores), and prints simulated
# against measured times per strategy.
#   tests/perf/sim_vs_cpu.sh [BIN_DIR] [CORES]     (build/bin, nproc)
# CORES is the processors the 8 ranks share relative to the one the kernel bench used; on a
# busy host give the ratio of the shares they really get.
set -e
B=${1:-build/bin}
CORES=${2:-$(nproc)}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
F="--ranks 8 --cluster 2x4 --seqlens 3000,1800,1200,900,700,400,192 --block 512 --heads 4 \
--kv-heads 2 --head-dim 64 --head-blocks 1 --divisions 4 --seed 1 --mask causal \
--strategy ring,zigzag,lpt,metis"
# The kernels are timed as the ranks run them: every core busy (one bench per core at
# once; the table takes medians over all their rows). Timed alone, a kernel has the
# caches and the memory bandwidth to itself and the simulation came out 10-20% fast.
for i in $(seq "$(nproc)"); do
    "$B/dcp-kernel-bench" --device cpu --kernel attn,bwd,merge,copy --mask full,causal \
        --total 2048 --tile 32,64,128,256,512 --head-dim 64 --gqa 4:2 --warmup 1 --iters 3 --json \
        >"$T/kernels.$i.json" &
done
wait
cat "$T"/kernels.*.json >"$T/kernels.json"
"$B/dcp-attn-test" $F --backward --warmup 1 --iters 7 --json >"$T/threads.json"
mpirun --allow-run-as-root --oversubscribe -np 8 "$B/dcp-attn-test" $F --backward --warmup 1 \
    --iters 7 --json >"$T/mpi.json"
"$B/dcp-plan" $F --dtype fp32 --json --simulate --sim-kernels "$T/kernels.json" \
    --sim-host-cores "$CORES" >"$T/sim.json"
python3 - "$T" <<'PY'
import json, sys
def rows(p):
    return {d["strategy"]: d for d in (json.loads(l) for l in open(p) if l.startswith("{"))}
t = sys.argv[1]
sim = rows(t + "/sim.json")
for mode in ("threads", "mpi"):
    m = rows(f"{t}/{mode}.json")
    for s, a in sim.items():
        b = m[s]
        assert a["comm_bytes"] == b["comm_bytes"], "the simulated plan differs from the run one"
        print(f"{mode:7s} {s:7s} fwd sim {a['sim_fwd_ms']:8.1f} ms measured {b['exec_ms']:8.1f} ms "
              f"({100 * (a['sim_fwd_ms'] / b['exec_ms'] - 1):+6.1f}%)  bwd sim {a['sim_bwd_ms']:8.1f} "
              f"measured {b['bwd_exec_ms']:8.1f} ({100 * (a['sim_bwd_ms'] / b['bwd_exec_ms'] - 1):+6.1f}%)")
PY
