#!/bin/bash
# Multi-node attention on an emulated cluster (tests/cluster/lib.sh: hosts as network and UTS
# namespaces behind a bridge, each link shaped with tc tbf):
#  - the peer table finds the hosts: dcp-attn-test under mpirun without --cluster plans for
#    the cluster it discovered (2 hosts x 2 processes x 2 threads: 2x4);
#  - links: inside a host, threads go in-process and processes over UCX shared memory; between
#    hosts, UCX TCP on the host's eth0: each host's eth0 carries the plans' inter-node bytes
#    (and little else), its loopback almost nothing;
#  - every mask with lpt, zigzag and metis on 2 hosts x 2 processes x 2 threads, forward and
#    backward checked against the reference, with digests of O, LSE, dQ, dK and dV equal to
#    the same plans on in-process ranks; the peer policies and the default's nodes candidate
#    likewise on 2 hosts x 2 processes (causal);
#  - faults: a host's link taken down mid-run, and a host's processes killed mid-run: every
#    rank of the other host ends with status 1 within the timeout plus a margin, naming a
#    rank of the failed host (DCP_ERR_TIMEOUT or DCP_ERR_PEER); the cut-off host's ranks end
#    too;
#  - a torchrun-style job: tests/cluster/torch_job.py, one torchrun per host, gloo over the
#    bridge (where python3 imports torch).
# Skipped, and said why, where namespaces are not permitted (not root, no iproute2, a
# container without network namespaces).
#
#   tests/cluster/run.sh [BIN_DIR]      (default build/bin)
set -u
bin=$(realpath "${1:-build/bin}")
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"
source "$here/../mpi/survivor.sh"
tool="$bin/dcp-attn-test"
work=$(mktemp -d)
# Under ASan: Open MPI's and UCX's plugins leak at exit (as in tests/mpi/run.sh)
[ -n "${ASAN_OPTIONS:-}" ] && export ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0"
asan() { [ -n "${ASAN_OPTIONS:-}" ]; }
cluster_trap '[ -n "${DCP_KEEP:-}" ] && echo "kept $work" || rm -rf "$work"'

if ! cluster_can_run; then
    echo "tests/cluster: SKIPPED: $cluster_why"
    exit 0
fi
cluster_sweep
rate=1gbit
cluster_up 2 "$rate" || { echo "FAIL: cannot build the emulated cluster"; exit 1; }
echo "# emulated cluster: 2 hosts ($(cluster_ns 0), $(cluster_ns 1)), links $rate (tbf)"
export OMPI_MCA_mpi_yield_when_idle=1

failures=0
fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}
now() { date +%s.%N; }
later() { survivor_later "$@"; }
sum_json() { # FILE KEY...: sum of the integer fields over every line
    local f=$1
    shift
    python3 -c 'import json, sys
print(sum(int(json.loads(l)[k]) for l in open(sys.argv[1]) for k in sys.argv[2:]))' "$f" "$@"
}

# ---- discovery ---------------------------------------------------------------------------
cluster_limit_s=120
if out=$(cluster_mpirun 2 4 "$tool" --ranks-per-process 2 --tokens 1024 --block 128 --mask causal --strategy lpt \
    --warmup 0 --iters 1 --check 2>&1) && grep -q "^# dcp-attn-test: 8 ranks (2x4) as processes" <<<"$out"; then
    echo "ok   discovery: $(grep -o '8 ranks (2x4) as processes, engines [^,]*, [^,]*' <<<"$out")"
else
    fail "discovery: the job did not find 2 hosts x 4 ranks: $(grep -v '^\[' <<<"$out" | head -5)"
fi

# ---- every mask x lpt, zigzag, metis: 2 hosts x 2 processes x 2 threads ------------------
masks=full,causal,window:300,lambda:64:512,blockwise:256:2,shared-question:0.2:4
asan && masks=causal # MPI jobs run 5-10x slower under ASan
flags=(--tokens 2048 --block 128 --seed 11 --mask "$masks" --strategy lpt,zigzag,metis
       --check --backward --json --timeout 60 --warmup 0 --iters 1 --cluster 2x4)
digests() { sed -n 's/.*"mask": "\([^"]*\)", "strategy": "\([^"]*\)".*"digest": "\([0-9a-f]*\)".*/\1 \2 \3/p' "$1"; }
want=$(($(tr , '\n' <<<"$masks" | wc -l) * 3))
if ! "$tool" "${flags[@]}" >"$work/threads.json" 2>"$work/err"; then
    fail "threads: $(cat "$work/err")"
fi
declare -a before
for h in 0 1; do before[h]=$(cluster_counters $h); done
start=$(now)
cluster_limit_s=300
cluster_mpirun 2 4 "$tool" "${flags[@]}" --ranks-per-process 2 >"$work/cluster.json" 2>"$work/err"
rc=$?
if [ $rc -ne 0 ]; then
    fail "2 hosts x 2 processes x 2 threads: exit status $rc: $(grep -v '^\[' "$work/err" | head -5)"
else
    runs=$(grep -c '"passed": true' "$work/cluster.json")
    [ "$runs" -eq "$want" ] || fail "2x2x2: $runs of $want runs passed"
    diff <(digests "$work/threads.json") <(digests "$work/cluster.json") >"$work/diff" ||
        fail "2x2x2: outputs differ from the in-process run: $(head -4 "$work/diff")"
    printf 'ok   %-40s %2d runs passed, digests equal to threads (%.1f s)\n' \
        "2 hosts x 2 processes x 2 threads" "$runs" "$(later "$start" "$(now)")"
    # the links: inter-node bytes crossed the hosts' eth0, same-host bytes never reached TCP
    inter=$(sum_json "$work/cluster.json" inter_node_bytes bwd_inter_node_bytes)
    intra=$(($(sum_json "$work/cluster.json" comm_bytes bwd_comm_bytes) - inter))
    tx=0 lo=0
    for h in 0 1; do
        read -r t0 _ l0 <<<"${before[h]}"
        read -r t1 _ l1 <<<"$(cluster_counters $h)"
        tx=$((tx + t1 - t0)) lo=$((lo + l1 - l0))
    done
    # (TCP/IP headers add ~4%; PMIx and MPI's own bootstrap a few MB)
    if [ "$tx" -lt "$inter" ] || [ "$tx" -gt $((inter * 12 / 10 + 8000000)) ]; then
        fail "links: eth0 carried $tx bytes, the plans move $inter between hosts"
    elif [ "$lo" -gt $((intra / 100 + 1000000)) ]; then
        fail "links: loopback carried $lo bytes (same-host bytes $intra should use shm/threads)"
    else
        echo "ok   links: eth0 carried $((tx / 1000)) kB for the plans' $((inter / 1000)) kB" \
            "between hosts; loopback $((lo / 1000)) kB of $((intra / 1000)) kB inside hosts"
    fi
fi

# ---- the peer policies and the default's nodes candidate: 2 hosts x 2 processes ----------
if ! asan; then
    peers=(--tokens 1024 --block 64 --seed 14 --kv-heads 4 --mask causal --strategy peers,nodes
           --check --backward --json --timeout 60 --warmup 0 --iters 1 --cluster 2x2)
    if ! "$tool" "${peers[@]}" >"$work/peers-threads.json" 2>"$work/err"; then
        fail "peers, threads: $(cat "$work/err")"
    fi
    start=$(now)
    cluster_mpirun 2 4 "$tool" "${peers[@]}" >"$work/peers.json" 2>"$work/err"
    rc=$?
    runs=$(grep -c '"passed": true' "$work/peers.json")
    if [ $rc -ne 0 ] || [ "$runs" -ne 7 ]; then # the default, 5 policies and nodes
        fail "peers on 2 hosts x 2 processes: exit status $rc, $runs of 7 runs passed:" \
            "$(grep -v '^\[' "$work/err" | head -5)"
    elif ! diff <(digests "$work/peers-threads.json") <(digests "$work/peers.json") >"$work/diff"; then
        fail "peers on 2 hosts x 2 processes: outputs differ from threads: $(head -4 "$work/diff")"
    else
        printf 'ok   %-40s %2d runs passed, digests equal to threads (%.1f s)\n' \
            "peer policies, 2 hosts x 2 processes" "$runs" "$(later "$start" "$(now)")"
    fi
fi

# ---- faults ------------------------------------------------------------------------------
timeout_s=3
margin=${DCP_FAULT_MARGIN:-8} # start-up skew, 2 shared cores, TCP, ASan
fault_tool=("$tool" --tokens 1024 --block 128 --cluster 2x2 --strategy lpt --backward
            --timeout "$timeout_s" --warmup 1000 --iters 1000)
# fault NAME ACTION: 2 hosts x 2 processes; host 1 fails by ACTION (down: its link is taken
# down; kill: its processes are killed) once the timed runs are under way.
fault() {
    local name=$1 action=$2 dir="$work/$1" r
    mkdir -p "$dir"
    cluster_up_again
    cluster_mpi_opts=(--mca orte_enable_recovery 1 -x DCP_TIMEOUT_S=$timeout_s)
    cluster_limit_s=120
    cluster_mpirun 2 4 "$here/../mpi/rank.sh" "$dir" "${fault_tool[@]}" >"$dir/mpirun.out" 2>&1 &
    for _ in $(seq 300); do grep -q "^strategy" "$dir/out.0" 2>/dev/null && break; sleep 0.1; done
    sleep 1
    local t
    t=$(now)
    case $action in
    down) cluster_link_down 1 ;;
    kill) cluster_kill_host 1 ;;
    esac
    for _ in $(seq 600); do
        local ended=0
        for r in 0 1 2 3; do [ -f "$dir/rc.$r" ] && ended=$((ended + 1)); done
        [ $ended -eq 4 ] || { [ $action = kill ] && [ $ended -eq 2 ] && [ -f "$dir/rc.0" ] && [ -f "$dir/rc.1" ]; } && break
        sleep 0.1
    done
    local msg=
    survivor_worst=0
    for r in 0 1 2 3; do
        local victim=$((r >= 2))
        [ $action = kill ] && [ $victim = 1 ] && continue
        survivor_ended "$name" "$dir" "$r" "$t" $((timeout_s + margin)) || continue
        # a rank of the healthy host names a rank of the failed one
        if [ $victim = 0 ] && ! grep -qE "rank [23].*DCP_ERR_(TIMEOUT|PEER)|DCP_ERR_(TIMEOUT|PEER).*rank [23]" "$dir/err.$r"; then
            fail "$name: rank $r does not name a rank of host 1: $(head -c 300 "$dir/err.$r")"
        fi
        [ $victim = 0 ] && [ -z "$msg" ] && msg=$(grep -m1 -oE "DCP_ERR_(TIMEOUT|PEER): [^(]*" "$dir/err.$r")
    done
    for _ in $(seq 100); do cluster_job_alive || break; sleep 0.1; done
    cluster_job_alive && fail "$name: mpirun still runs after every rank ended"
    cluster_mpi_opts=()
    printf 'ok   %-12s host 1: ranks ended %4.1f s after the fault: %s\n' "$name" "$survivor_worst" "$msg"
}
# each fault case on a fresh cluster (a pulled cable stays pulled)
cluster_up_again() {
    cluster_down
    cluster_up 2 "$rate" || fail "cannot rebuild the emulated cluster"
}
echo "# faults: 2 hosts x 2 processes, timeout $timeout_s s, margin $margin s"
fault link-down down
fault host-kill kill

# ---- a torchrun-style job: one torchrun per host, gloo over the bridge --------------------
torch_job() {
    local py= lib
    lib=$(realpath "$bin/../lib/libdcp.so")
    for c in ${PYTHON:-} python3 /usr/bin/python3; do
        command -v "$c" >/dev/null && "$c" -c 'import torch' 2>/dev/null && py=$c && break
    done
    if [ -z "$py" ]; then echo "skip torchrun job: no python3 here imports torch"; return; fi
    if ldd "$lib" | grep -q libasan; then echo "skip torchrun job: ASan build"; return; fi
    cluster_up_again
    local h pids=() start
    start=$(now)
    for h in 0 1; do
        mkdir -p "$work/torch$h"
        # (--redirects 1 --tee 1: Debian's torchrun 1.13 under Python 3.11, tests/torch/run.sh)
        cluster_host_exec $h env GLOO_SOCKET_IFNAME=eth0 UCX_NET_DEVICES=eth0 UCX_TLS=sm,tcp,self \
            DCP_LIB="$lib" timeout 120 "$py" -m torch.distributed.run --nnodes 2 --node_rank $h \
            --nproc_per_node 2 --master_addr "$cluster_subnet.1" --master_port 29500 \
            --redirects 1 --tee 1 --log_dir "$work/torch$h" "$here/torch_job.py" 2 \
            >"$work/torch$h.out" 2>&1 &
        pids+=($!)
    done
    local ok=1
    for h in 0 1; do wait "${pids[h]}" || ok=0; done
    local lines
    lines=$(cat "$work"/torch[01].out | grep -c 'rank [0-3] of 4 on h[01]: 2 nodes')
    if [ $ok = 1 ] && [ "$lines" = 4 ]; then
        printf 'ok   torchrun, 2 hosts x 2 processes (gloo): 4 ranks checked (%.1f s): %s\n' \
            "$(later "$start" "$(now)")" "$(grep -m1 -o 'rank 0 of 4 .*' "$work/torch0.out")"
    else
        # the workers' own lines (torchrun prefixes them with [defaultN]) name the cause
        fail "torchrun job: $(grep -h "^\[default" "$work"/torch[01].out | tail -6)"
    fi
}
torch_job

[ "$failures" -eq 0 ] && echo "cluster: all passed" || echo "cluster: $failures failed"
[ "$failures" -eq 0 ]
