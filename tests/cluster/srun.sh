#!/bin/bash
# Slurm on the emulated cluster (tests/cluster/lib.sh: hosts as network and UTS namespaces
# behind a bridge; tests/cluster/slurm.sh: Debian's slurmctld, a slurmd per host, munge):
#  - srun -N 2 --ntasks-per-node 2 --mpi=pmix dcp-attn-test --check --backward: one job of 4
#    ranks that finds 2 nodes x 2 (Open MPI taking PMIx from slurmstepd), checked;
#  - --mpi=pmi2: the same job built with MPICH (tests/pkg/prefix.sh's build, where it ran);
#    that build under --mpi=pmix, whose PMI it does not speak, stops naming it;
#  - --mpi=none: every task says it has no PMI, naming the variables it read, and stops;
#  - $DCP_NODE_FILE: the job priced with a node file; a file that says the network is 10^4
#    times slower gives another plan (other bytes between the hosts), both checked;
#  - dcp-transport-bench --pattern rails: every rank to its peer on the other host at once,
#    three sizes, every byte checked;
#  - cleanup: a run that fails once its cluster is up leaves no namespace and no daemon behind,
#    and neither does this one.
# Skipped, saying why, where namespaces, Slurm or its PMI plugins are missing.
#
#   tests/cluster/srun.sh [BIN_DIR [MPICH_BIN_DIR]]   (default build/bin, BIN_DIR/../site-check/build/bin)
set -u
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"
source "$here/slurm.sh"

# a run that fails on purpose once its cluster is up (the cleanup check below starts one)
if [ -n "${DCP_SRUN_FAIL_UP:-}" ]; then
    cluster_trap 'slurm_down'
    cluster_up 2 0 && slurm_up "$DCP_SRUN_FAIL_UP" || exit 3
    echo "${slurm_pids[*]}" >"$DCP_SRUN_FAIL_UP/pids"
    exit 1
fi

bin=$(realpath "${1:-build/bin}")
mpich_bin=${2:-$bin/../site-check/build/bin}
tool="$bin/dcp-attn-test"
work=$(mktemp -d)
[ -n "${ASAN_OPTIONS:-}" ] && export ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0" # as tests/cluster/run.sh
cluster_trap 'slurm_down; [ -n "${DCP_KEEP:-}" ] && echo "kept $work" || rm -rf "$work"'
if ! cluster_can_run; then
    echo "tests/cluster/srun.sh: SKIPPED: $cluster_why"
    exit 0
fi
if ! slurm_can_run; then
    echo "tests/cluster/srun.sh: SKIPPED: $slurm_why"
    exit 0
fi
cluster_sweep
failures=0
fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}
t0=$SECONDS
cluster_up 2 1gbit || { echo "FAIL: cannot build the emulated cluster"; exit 1; }
slurm_up "$work/slurm" || { echo "FAIL: Slurm does not come up"; exit 1; }
echo "# Slurm $(ip netns exec "$(cluster_sw)" sinfo -V | cut -d' ' -f2) on 2 emulated hosts" \
    "($(ip netns exec "$(cluster_sw)" sinfo -h -N -o %N | tr '\n' ' ')idle after $((SECONDS - t0)) s)"
export UCX_NET_DEVICES=eth0 UCX_TLS=sm,tcp,self OMPI_MCA_mpi_yield_when_idle=1 DCP_TIMEOUT_S=60
job=(--tokens 4096 --block 256 --warmup 0 --iters 1)
asan=
if [ -n "${ASAN_OPTIONS:-}" ]; then # MPI jobs run 5-10x slower under ASan (tests/cluster/run.sh)
    asan=1
    job=(--tokens 1024 --block 128 --warmup 0 --iters 1)
fi
srun4() { slurm_srun -N 2 --ntasks-per-node 2 --time 3 "$@"; }

# ---- PMIx: Open MPI's tool, one job of 4 ranks on 2 nodes ------------------------------------
start=$SECONDS
if srun4 --mpi=pmix "$tool" --check --backward "${job[@]}" >"$work/pmix.out" 2>"$work/pmix.err" &&
    grep -q "^# dcp-attn-test: 4 ranks (2x2) as processes" "$work/pmix.out" &&
    [ "$(grep -c PASS "$work/pmix.out")" -ge 1 ] && ! grep -q FAIL "$work/pmix.out"; then
    echo "ok   srun --mpi=pmix: $(grep -o '4 ranks (2x2) as processes, engines [^,]*, [^,]*' "$work/pmix.out")," \
        "forward and backward PASS ($((SECONDS - start)) s)"
else
    fail "srun --mpi=pmix: $(tail -3 "$work/pmix.err") $(head -3 "$work/pmix.out")"
fi

# ---- PMI-2: the MPICH build ------------------------------------------------------------------
if [ -n "${ASAN_OPTIONS:-}" ]; then
    echo "skip srun --mpi=pmi2: ASan build (the MPICH build is not sanitized)"
elif [ ! -x "$mpich_bin/dcp-attn-test" ]; then
    echo "skip srun --mpi=pmi2: no MPICH build at $mpich_bin (tests/pkg/prefix.sh makes it)"
else
    start=$SECONDS
    # (a smaller batch: that build is unoptimised, -O0)
    if srun4 --mpi=pmi2 "$mpich_bin/dcp-attn-test" --check --backward --tokens 1024 --block 128 \
        --warmup 0 --iters 1 \
        >"$work/pmi2.out" 2>"$work/pmi2.err" &&
        grep -q "^# dcp-attn-test: 4 ranks (2x2) as processes" "$work/pmi2.out" &&
        grep -q PASS "$work/pmi2.out" && ! grep -q FAIL "$work/pmi2.out"; then
        echo "ok   srun --mpi=pmi2 (MPICH): 4 ranks (2x2) as processes, PASS ($((SECONDS - start)) s)"
    else
        fail "srun --mpi=pmi2 (MPICH): $(tail -3 "$work/pmi2.err") $(head -3 "$work/pmi2.out")"
    fi
    # ... and under PMIx, which it does not speak: it starts alone, and says so
    srun4 --mpi=pmix "$mpich_bin/dcp-attn-test" "${job[@]}" >/dev/null 2>"$work/mpich-pmix.err"
    said=$(grep -c "MPI_COMM_WORLD has 1 rank(s) but the launcher started 4 (SLURM_STEP_NUM_TASKS)" \
        "$work/mpich-pmix.err")
    [ "$said" = 4 ] && grep -q "interface (PMIx)" "$work/mpich-pmix.err" &&
        echo "ok   srun --mpi=pmix (MPICH): all 4 tasks stop: a world of 1 where 4 were started" ||
        fail "MPICH under --mpi=pmix: $said of 4 tasks named the PMI: $(head -c 300 "$work/mpich-pmix.err")"
    
fi

# ---- no PMI: each task names what it lacks and stops -----------------------------------------
srun4 --mpi=none "$tool" "${job[@]}" >"$work/none.out" 2>"$work/none.err"
rc=$?
said=$(grep -c "has no process-management interface" "$work/none.err")
if [ $rc -ne 0 ] && [ "$said" = 4 ] && grep -q "SLURM_PROCID" "$work/none.err" &&
    grep -q -- "--mpi=pmix" "$work/none.err" && ! grep -q "ranks" "$work/none.out"; then
    echo "ok   srun --mpi=none: all 4 tasks stop (srun exit $rc): $(grep -m1 -o 'Slurm task [0-9] of 4[^:]*' "$work/none.err")"
else
    fail "srun --mpi=none: exit $rc, $said of 4 tasks said so: $(head -c 300 "$work/none.err") $(head -2 "$work/none.out")"
fi

# ---- a node file reaches the job ----------------------------------------------------------------
node_job=(--seqlens 2048,512,512,256 --block 128 --mask causal --warmup 0 --iters 1 --json)
[ -z "$asan" ] && node_job+=(--check) # (the plans are the point; under ASan the reference is slow)
printf '# 2 CPU ranks per host\ndevices 2\nintra 2\ninter 1\nlat 20\ntflops 0.004\n' >"$work/fast.node"
sed 's/^inter 1$/inter 0.0001/; s/^lat 20$/lat 200000/' "$work/fast.node" >"$work/slow.node"
for speed in fast slow; do
    DCP_NODE_FILE=$work/$speed.node srun4 --mpi=pmix "$tool" "${node_job[@]}" \
        >"$work/$speed.json" 2>"$work/$speed.err" || fail "node file $speed: $(tail -3 "$work/$speed.err")"
done
field() { python3 -c 'import json, sys; print(json.loads(open(sys.argv[1]).readline())[sys.argv[2]])' "$@" 2>/dev/null; }
fb=$(field "$work/fast.json" comm_bytes) sb=$(field "$work/slow.json" comm_bytes)
fi_=$(field "$work/fast.json" inter_node_bytes) si=$(field "$work/slow.json" inter_node_bytes)
checked() { [ "$(field "$1" checked)" = True ] && [ "$(field "$1" passed)" = True ]; }
if { [ -n "$asan" ] || { checked "$work/fast.json" && checked "$work/slow.json"; }; } &&
    [ -n "$fb" ] && [ -n "$sb" ] && [ "$fb:$fi_" != "$sb:$si" ]; then
    echo "ok   \$DCP_NODE_FILE: inter 1 GB/s: $fb bytes moved ($fi_ between hosts); inter 0.0001 GB/s:" \
        "$sb bytes ($si between hosts)$([ -z "$asan" ] && echo "; both checked")"
else
    fail "\$DCP_NODE_FILE: the plan did not change with the network (fast $fb/$fi_, slow $sb/$si)" \
        "$(head -c 200 "$work/slow.err")"
fi
# a file for another machine: every task names it
printf 'devices 8\n' >"$work/other.node"
DCP_NODE_FILE=$work/other.node srun4 --mpi=pmix "$tool" "${job[@]}" >/dev/null 2>"$work/other.err"
grep -q "devices 8, but this job has 2 ranks per node" "$work/other.err" ||
    fail "a node file of 8 devices on 2 ranks per node: $(head -c 300 "$work/other.err")"

# ---- dcp-transport-bench between the hosts: every rail at once, every byte checked -------------
start=$SECONDS
srun4 --mpi=pmix "$bin/dcp-transport-bench" --pattern rails -b 64K -e 256K -f 2 --mb 1 --reps 1 \
    --warmup 0 --json >"$work/bench.json" 2>"$work/bench.err"
rc=$?
said=$(python3 - "$work/bench.json" <<'PY' 2>&1
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
assert [r["size"] for r in rows] == [65536, 131072, 262144], [r["size"] for r in rows]
assert all(r["wrong"] == 0 and r["engine"] == "ucx" and r["busbw"] > 0 for r in rows), rows
assert all(r["host0"] != r["host1"] for r in rows), "a rail that stays on one host"
print("%d sizes, 0 wrong, %.3f GB/s at 256K" % (len(rows), rows[-1]["busbw"]))
PY
)
if [ $rc -eq 0 ] && [ -n "$said" ] && ! grep -q Error <<<"$said"; then
    echo "ok   srun dcp-transport-bench --pattern rails: $said ($((SECONDS - start)) s)"
else
    fail "srun dcp-transport-bench --pattern rails: exit $rc: $said $(tail -3 "$work/bench.err")"
fi

# ---- cleanup, on failure and after this run -----------------------------------------------------
mkdir -p "$work/failed"
DCP_SRUN_FAIL_UP=$work/failed bash "$0" >"$work/failed.out" 2>&1 &
child=$!
wait $child
left=$(ip netns list 2>/dev/null | awk '{print $1}' | grep -c "^dcpc$child-")
alive=0
for p in $(cat "$work/failed/pids" 2>/dev/null); do kill -0 "$p" 2>/dev/null && alive=$((alive + 1)); done
if [ ! -s "$work/failed/pids" ]; then
    fail "cleanup: the failing run did not get its cluster up: $(tail -3 "$work/failed.out")"
elif [ "$left" != 0 ] || [ "$alive" != 0 ]; then
    fail "cleanup: a run that failed left $left namespace(s) and $alive daemon(s)"
else
    echo "ok   cleanup: a run that failed with its cluster up left no namespace and none of its" \
        "$(wc -w <"$work/failed/pids") daemons"
fi
pids=("${slurm_pids[@]}")
slurm_down
cluster_down
left=$(ip netns list 2>/dev/null | awk '{print $1}' | grep -c "^$cluster_prefix-")
alive=0
for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=$((alive + 1)); done
[ "$left" = 0 ] && [ "$alive" = 0 ] || fail "cleanup: $left namespace(s), $alive daemon(s) left"

echo "srun: $((SECONDS - t0)) s in all"
[ "$failures" -eq 0 ] && echo "srun: all passed" || echo "srun: $failures failed"
[ "$failures" -eq 0 ]
