#!/bin/bash
# The kill test: four dcp-attn-test ranks under mpirun run forward passes back to back; one
# rank is killed with SIGKILL mid-run. The survivors must end their waits with DCP_ERR_PEER
# or DCP_ERR_TIMEOUT within the timeout (DCP_TIMEOUT_S=5 here) and the job must end,
# never hang. Open MPI's recovery mode keeps mpirun from killing the survivors itself, so
# that what they report is dcp's doing.
#
#   tests/mpi/kill.sh [BIN_DIR]      (default build/bin)
set -u
bin=${1:-build/bin}
work=$(mktemp -d)
# Under ASan: Open MPI's and UCX's plugins leak at exit, unloaded and unnamed, so leak
# checking is off here; the unit tests run dcp's own process-rank paths (bootstrap, UCX
# engine, job contexts) over threads with it on.
[ -n "${ASAN_OPTIONS:-}" ] && export ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0"
trap 'rm -rf "$work"; [ -n "${job:-}" ] && kill -9 "$job" 2>/dev/null' EXIT
export DCP_TIMEOUT_S=5 OMPI_MCA_mpi_yield_when_idle=1
for tls in shm,self tcp,self; do
    mpirun --allow-run-as-root --oversubscribe --bind-to none --mca orte_enable_recovery 1 \
        -np 4 -x UCX_TLS="$tls" "$bin/dcp-attn-test" --tokens 2048 --block 128 --cluster 1x4 \
        --strategy metis --warmup 1000 --iters 1000 >"$work/out" 2>"$work/err" &
    job=$!
    # wait until the ranks are inside their timed runs (the table header is out)
    for _ in $(seq 100); do grep -q "^strategy" "$work/out" && break; sleep 0.1; done
    sleep 1
    victim=$(pgrep -P "$job" -f dcp-attn-test | sed -n 2p)
    if [ -z "$victim" ]; then
        echo "FAIL: UCX_TLS=$tls: no rank to kill"; cat "$work/err"; exit 1
    fi
    killed=$(date +%s.%N)
    kill -9 "$victim"
    # the job must end by itself well within timeout + slack
    for _ in $(seq 300); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
    secs=$(awk -v a="$killed" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')
    if kill -0 "$job" 2>/dev/null; then
        echo "FAIL: UCX_TLS=$tls: the job still runs $secs s after the kill"; exit 1
    fi
    # (in recovery mode mpirun's exit status does not tell; the survivors' reports do)
    wait "$job"
    job=
    reports=$(grep -cE "DCP_ERR_(PEER|TIMEOUT)" "$work/err")
    if [ "$reports" -lt 1 ]; then
        echo "FAIL: UCX_TLS=$tls: no survivor reported the failure"
        grep -v '^\[' "$work/err" | head -20
        exit 1
    fi
    printf 'ok   kill one of 4 ranks, UCX_TLS=%-9s job ended %.1f s after the kill; %d survivor(s) reported:\n' \
        "$tls" "$secs" "$reports"
    grep -E "DCP_ERR_(PEER|TIMEOUT)" "$work/err" | sed 's/^/       /'
done
