#!/bin/bash
# The fault-injection suite: four dcp-attn-test ranks under mpirun in Open MPI's recovery
# mode (so that what the survivors do is dcp's doing, not mpirun's), one rank SIGKILLed or
# SIGSTOPped at each phase of the job (DCP_FAULT, plugin/cli/launch/mpi_launch.h): after MPI_Init,
# inside context creation, at the planning vote, on entering the forward, between cases,
# before the context is destroyed; from outside (kill -KILL / -STOP) in the middle of the
# timed forward and backward passes, where the survivors wait on transfers; and a rank
# started with a bad flag. Every survivor must exit with
# status 1 within the timeout plus a margin after the fault, naming the failed rank with
# DCP_ERR_TIMEOUT or DCP_ERR_PEER; the victim's own status is checked too (killed: 137; a
# stopped one is still stopped when the others have ended, then killed here; bad flag: 2).
# Each rank's status comes from tests/mpi/rank.sh (under recovery mode mpirun exits 0 even
# when every rank failed).
#
#   tests/mpi/kill.sh [BIN_DIR]      (default build/bin)
set -u
bin=${1:-build/bin}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
# Under ASan: Open MPI's and UCX's plugins leak at exit, unloaded and unnamed, so leak
# checking is off here (and the ranks end with _exit after a failure anyway).
[ -n "${ASAN_OPTIONS:-}" ] && export ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0"
trap 'rm -rf "$work"; [ -n "${job:-}" ] && kill -9 "$job" 2>/dev/null' EXIT
timeout_s=3
margin=${DCP_FAULT_MARGIN:-6} # start-up skew, 2 shared cores, ASan
export DCP_TIMEOUT_S=$timeout_s OMPI_MCA_mpi_yield_when_idle=1
tool=("$bin/dcp-attn-test" --tokens 512 --block 128 --cluster 1x4 --strategy lpt,zigzag
      --backward --iters 2)
mpirun=(mpirun --allow-run-as-root --oversubscribe --bind-to none --mca orte_enable_recovery 1
        -x DCP_TIMEOUT_S -x OMPI_MCA_mpi_yield_when_idle)
failures=0
fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}
now() { date +%s.%N; }
source "$here/survivor.sh"

# case NAME VICTIM PHASE ACTION TLS: runs the job, waits for the survivors, checks everyone.
# With HYBRID=1 the job is 2 processes x 2 threads (--ranks-per-process 2); VICTIM is then a
# process, which holds ranks 2 VICTIM and 2 VICTIM + 1.
run_case() {
    local name=$1 victim=$2 phase=$3 action=$4 tls=$5 dir="$work/$1" r
    local np=4 extra=()
    [ "${HYBRID:-0}" = 1 ] && np=2 extra=(--ranks-per-process 2 --cluster 2x2)
    local procs
    procs=$(seq 0 $((np - 1)))
    mkdir -p "$dir"
    local cmd=("${mpirun[@]}" -x UCX_TLS="$tls") fault=
    if [ "$phase" = midrun ]; then # ranks in their timed runs, signalled from here
        cmd+=(-np "$np" "$here/rank.sh" "$dir" "${tool[@]}" "${extra[@]}" --warmup 1000 --iters 1000)
    elif [ "$action" = flag ]; then # the last rank gets a bad flag
        cmd+=(-np 3 "$here/rank.sh" "$dir" "${tool[@]}" : -np 1 "$here/rank.sh" "$dir"
              "${tool[@]}" --tol 5)
    else
        cmd+=(-x DCP_FAULT="$victim:$phase:$action" -x DCP_FAULT_STAMP="$dir/stamp" -np 4
              "$here/rank.sh" "$dir" "${tool[@]}")
    fi
    local start
    start=$(now)
    "${cmd[@]}" >"$dir/mpirun.out" 2>&1 &
    job=$!
    if [ "$phase" = midrun ]; then
        for _ in $(seq 300); do grep -q "^strategy" "$dir/out.0" 2>/dev/null && break; sleep 0.1; done
        sleep 1
        fault=$(now)
        kill -"${action^^}" "$(cat "$dir/pid.$victim")"
    fi
    # the survivors must end by themselves: wait for their statuses (60 s at most)
    for _ in $(seq 600); do
        local ended=0
        for r in $procs; do [ "$r" = "$victim" ] || [ ! -f "$dir/rc.$r" ] || ended=$((ended + 1)); done
        [ $ended -eq $((np - 1)) ] && break
        sleep 0.1
    done
    if [ "$action" = flag ]; then fault=$(cat "$dir/end.$victim" 2>/dev/null || echo "$start")
    elif [ -z "$fault" ]; then fault=$(cat "$dir/stamp" 2>/dev/null || echo "$start"); fi
    local msg=""
    survivor_worst=0
    for r in $procs; do
        [ "$r" = "$victim" ] && continue
        survivor_ended "$name" "$dir" "$r" "$fault" $((timeout_s + margin)) || continue
        # every survivor names the victim: a rank that relays a failure (its abort notice)
        # passes on the rank that failed first, so no survivor blames the relaying one.
        # (A stopped victim mid-run is seen only as a timeout, by each survivor on the peer
        # it waited for, which may be another survivor still waiting: only the status.)
        local named="rank $victim.*DCP_ERR_(TIMEOUT|PEER)|DCP_ERR_(TIMEOUT|PEER).*rank $victim"
        [ "$phase" = midrun ] && [ "$action" = stop ] && named="DCP_ERR_(TIMEOUT|PEER)"
        # (hybrid: the survivor process's first failing thread speaks for it; a thread that
        # learnt of the failure from a sibling thread names that sibling's rank)
        [ "${HYBRID:-0}" = 1 ] && named="DCP_ERR_(TIMEOUT|PEER)"
        # (Every place a rank learns of a failure between calls, entering a call or a
        # barrier, relays it like one inside a call: a relay that exited without its notice
        # was once named by the survivors that found its process gone.)
        if ! grep -qE "$named" "$dir/err.$r"; then
            fail "$name: rank $r does not name rank $victim: $(head -c 300 "$dir/err.$r")"
        fi
        [ -n "$msg" ] || msg=$(grep -m1 -oE "DCP_ERR_(TIMEOUT|PEER): [^(]*" "$dir/err.$r")
    done
    # the victim: killed (137), still stopped (then killed here), or exited on its flag (2)
    local vpid
    vpid=$(cat "$dir/pid.$victim" 2>/dev/null)
    case $action in
    kill) [ "$(cat "$dir/rc.$victim" 2>/dev/null)" = 137 ] ||
        fail "$name: the victim's status is $(cat "$dir/rc.$victim" 2>/dev/null), not 137" ;;
    stop)
        [ "$(ps -o stat= -p "$vpid" 2>/dev/null | cut -c1)" = T ] ||
            fail "$name: the stopped victim is not stopped ($(ps -o stat= -p "$vpid"))"
        kill -9 "$vpid" 2>/dev/null ;;
    flag) [ "$(cat "$dir/rc.$victim" 2>/dev/null)" = 2 ] ||
        fail "$name: the victim's status is $(cat "$dir/rc.$victim" 2>/dev/null), not 2" ;;
    esac
    # and the job ends
    for _ in $(seq 100); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$job" 2>/dev/null; then
        fail "$name: mpirun still runs after every rank ended"
        kill -9 "$job" 2>/dev/null
    fi
    wait "$job" 2>/dev/null
    job=
    printf 'ok   %-8s %-5s rank %d: survivors ended %4.1f s after the fault: %s\n' "$phase" \
        "$action" "$victim" "$survivor_worst" "$msg"
}

echo "# fault injection: 4 ranks, timeout $timeout_s s, margin $margin s (phase, action, worst survivor)"
run_case flag 3 start flag shm,self
for phase in init context plan forward between destroy; do
    for action in kill stop; do
        tls=shm,self
        [ "$phase" = forward ] && [ "$action" = kill ] && tls=tcp,self
        run_case "$phase-$action" 2 "$phase" "$action" "$tls"
    done
done
run_case midrun-kill 1 midrun kill shm,self
run_case midrun-stop 1 midrun stop tcp,self
# the hybrid job: a killed process ends the other's ranks (threads) with DCP_ERR_PEER
HYBRID=1 run_case hybrid-kill 1 midrun kill shm,self
[ "$failures" -eq 0 ] && echo "faults: all passed" || echo "faults: $failures failed"
[ "$failures" -eq 0 ]
