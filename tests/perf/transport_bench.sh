#!/bin/bash
# dcp-transport-bench beside ucx_perftest on the emulated cluster (tests/cluster/lib.sh, its
# Slurm from tests/cluster/slurm.sh): two hosts whose links are shaped to $RATE, UCX over TCP on
# each host's eth0.
#  - ucx_perftest -t tag_bw between the hosts (server on h1, client on h0), per size, at most
#    $WINDOW sends outstanding (-O), as dcp's window;
#  - dcp-transport-bench under srun -N 2 --ntasks-per-node 1 --mpi=pmix, the same sizes (one
#    pair: 0->1, window $WINDOW), then -N 2 --ntasks-per-node 2 --pattern rails (both ranks of
#    each host at once to the other host: the rails share its one link);
# and a table of both in MiB/s (ucx_perftest's "MB/s" is 2^20 bytes per second). Needs root
# (namespaces) and a quiet machine.
#
#   tests/perf/transport_bench.sh [BIN_DIR]                (default build/bin)
#   RATE=1gbit SIZES=64K,1M,4M MB=128 WINDOW=8 (defaults; MB: data per measurement, both tools)
set -u
bin=$(realpath "${1:-build/bin}")
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../cluster/lib.sh"
source "$here/../cluster/slurm.sh"
RATE=${RATE:-1gbit}
SIZES=${SIZES:-64K,1M,4M}
MB=${MB:-128}
WINDOW=${WINDOW:-8}
work=$(mktemp -d)
cluster_trap 'slurm_down; rm -rf "$work"'
cluster_can_run || { echo "transport_bench: $cluster_why"; exit 1; }
slurm_can_run || { echo "transport_bench: $slurm_why"; exit 1; }
command -v ucx_perftest >/dev/null || { echo "transport_bench: no ucx_perftest (ucx-utils)"; exit 1; }
cluster_sweep
cluster_up 2 "$RATE" && slurm_up "$work/slurm" || exit 1
export UCX_NET_DEVICES=eth0 UCX_TLS=sm,tcp,self OMPI_MCA_mpi_yield_when_idle=1
echo "# $(date -u +%Y-%m-%dT%H:%MZ), $(uname -n), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg);" \
    "2 emulated hosts, links $RATE (tc tbf), UCX $(ucx_info -v | sed -n 's/^# Version //p') over TCP on eth0"

bytes() { # 64K -> 65536
    local s=$1
    case $s in *K) echo $((${s%K} * 1024)) ;; *M) echo $((${s%M} * 1048576)) ;; *) echo "$s" ;; esac
}

echo
echo "## ucx_perftest -t tag_bw -O $WINDOW, h0 -> h1 (-n: $MB MB per size, -w: a tenth of that first)"
declare -A perftest
port=13337
for s in ${SIZES//,/ }; do
    n=$(bytes "$s")
    iters=$((MB * 1048576 / n))
    [ $iters -lt 10 ] && iters=10
    port=$((port + 1))
    cluster_host_exec 1 env UCX_TLS=tcp,self timeout 120 ucx_perftest -p $port >"$work/srv" 2>&1 &
    srv=$!
    sleep 1
    cluster_host_exec 0 env UCX_TLS=tcp,self timeout 120 ucx_perftest "$cluster_subnet.2" -p $port \
        -t tag_bw -s "$n" -n "$iters" -w $((iters / 10)) -O "$WINDOW" >"$work/perftest.$s" 2>&1
    wait $srv
    line=$(grep '^Final:' "$work/perftest.$s")
    perftest[$s]=$(awk '{print $7}' <<<"$line")
    printf '%10s B  %s\n' "$n" "$line"
done

echo
echo "## srun -N 2 --ntasks-per-node 1 --mpi=pmix dcp-transport-bench --sizes $SIZES --window $WINDOW"
slurm_srun -N 2 --ntasks-per-node 1 --mpi=pmix "$bin/dcp-transport-bench" --sizes "$SIZES" \
    --window "$WINDOW" --mb "$MB" >"$work/pair.txt" 2>&1 || { cat "$work/pair.txt"; exit 1; }
cat "$work/pair.txt"

echo
echo "## srun -N 2 --ntasks-per-node 2 --mpi=pmix dcp-transport-bench --pattern rails --sizes $SIZES"
slurm_srun -N 2 --ntasks-per-node 2 --mpi=pmix "$bin/dcp-transport-bench" --pattern rails \
    --sizes "$SIZES" --window "$WINDOW" --mb "$MB" 2>&1 || exit 1

echo
echo "## side by side, MiB/s (2^20 B/s)"
printf '%10s  %16s  %22s  %6s\n' "size(B)" "ucx_perftest" "dcp-transport-bench" "ratio"
for s in ${SIZES//,/ }; do
    # its row's algbw (GB/s) in MiB/s
    dcp=$(awk -v n="$(bytes "$s")" '$1 == n && $4 == "0->1" {printf "%.2f", $7 * 1e9 / 1048576}' "$work/pair.txt")
    printf '%10s  %16s  %22s  %6.2f\n' "$(bytes "$s")" "${perftest[$s]}" "$dcp" \
        "$(python3 -c "print($dcp / ${perftest[$s]})")"
done
