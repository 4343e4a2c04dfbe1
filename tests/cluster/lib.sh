# An emulated cluster on one machine, sourced by tests/cluster/*.sh and tests/perf/cluster_bench.sh.
#
# Each host is a network namespace (dcpc<PID>-h<i>, with eth0 = 10.66.0.<i+1>) whose
# processes also get their own UTS namespace with host name h<i>, so dcp's peer table (ranks
# grouped by host name) sees real nodes. The hosts hang off a bridge in a switch namespace
# (dcpc<PID>-sw, 10.66.0.254), where mpirun runs: its out-of-band channel and its PMIx server
# listen on the bridge, and each rank enters its host's namespaces before MPI_Init
# (tests/cluster/enter.sh). Every host's link is rate-limited with tc tbf in both directions
# (egress on the host's eth0, ingress on its port of the bridge): a full-duplex NIC.
#
# Nothing lives in the root namespace, so concurrent clusters (another test run on the same
# machine) cannot collide: their names carry the owner's PID, and cluster_sweep removes only
# clusters whose owner is gone. cluster_down runs from the caller's EXIT trap
# (cluster_trap), also after a failure or a signal.
#
#   cluster_can_run             0, or 1 with the reason in $cluster_why
#   cluster_up H RATE           H hosts, each link at RATE (tc units: 1gbit, 200mbit; 0 = unshaped)
#   cluster_rate RATE           every link to RATE
#   cluster_mpirun PPH NP CMD...  CMD as NP processes, PPH per host (more mpirun options in
#                               the array cluster_mpi_opts; a time limit in cluster_limit_s)
#   cluster_job_alive           whether a job's mpirun still runs
#   cluster_host_exec I CMD...  CMD inside host I (its network and host name)
#   cluster_link_down I         host I's cable pulled (its bridge port down)
#   cluster_kill_host I         SIGKILL to every process of host I
#   cluster_counters I          "tx_bytes rx_bytes lo_bytes" of host I
#   cluster_down                everything removed, its processes killed

cluster_prefix=dcpc$$
cluster_hosts=0
cluster_subnet=10.66.0
cluster_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

cluster_ns() { echo "$cluster_prefix-h$1"; }
cluster_sw() { echo "$cluster_prefix-sw"; }

# Why an emulated cluster cannot run here (root, ip, tc, unshare, a namespace that works), or 0.
cluster_can_run() {
    cluster_why=
    if [ "$(id -u)" != 0 ]; then
        cluster_why="not root (network namespaces, veth links and tc need CAP_NET_ADMIN)"
    elif ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
        cluster_why="no ip or tc (iproute2)"
    elif ! command -v unshare >/dev/null; then
        cluster_why="no unshare (util-linux)"
    elif ! ip netns add "$cluster_prefix-probe" 2>/dev/null; then
        cluster_why="ip netns add fails here (no network namespaces in this container?)"
    else
        local ok=1
        ip netns exec "$cluster_prefix-probe" unshare --uts true 2>/dev/null || ok=0
        ip netns del "$cluster_prefix-probe" 2>/dev/null
        [ $ok = 1 ] || cluster_why="unshare --uts fails inside a network namespace"
    fi
    [ -z "$cluster_why" ]
}

# Clusters of owners that are gone (a run killed before its trap ran).
cluster_sweep() {
    local ns pid
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^dcpc[0-9]+-'); do
        pid=${ns#dcpc}
        pid=${pid%%-*}
        [ "$pid" = $$ ] && continue
        kill -0 "$pid" 2>/dev/null && continue
        cluster_kill_ns "$ns"
        ip netns del "$ns" 2>/dev/null && echo "cluster: removed stale namespace $ns"
    done
}

cluster_kill_ns() {
    local pids
    pids=$(ip netns pids "$1" 2>/dev/null)
    [ -n "$pids" ] && kill -9 $pids 2>/dev/null
    return 0
}

# tbf on one interface inside namespace $1: burst of 4 ms at the rate (at least 64 KB, so a
# TSO/GRO segment passes whole), and a queue of 200 ms at the rate (enough for TCP's window
# at these rates: drops would measure TCP's recovery, not the link).
cluster_shape() { # NS DEV RATE
    local ns=$1 dev=$2 rate=$3
    if [ "$rate" = 0 ] || [ "$rate" = none ]; then
        ip -n "$ns" link show "$dev" >/dev/null && tc -n "$ns" qdisc del dev "$dev" root 2>/dev/null
        return 0
    fi
    local bps
    bps=$(cluster_rate_bps "$rate") || return 1
    local burst=$((bps / 8 / 250)) limit=$((bps / 8 / 5))
    [ $burst -lt 65536 ] && burst=65536
    [ $limit -lt $((4 * burst)) ] && limit=$((4 * burst))
    tc -n "$ns" qdisc replace dev "$dev" root tbf rate "$rate" burst "$burst" limit "$limit"
}

# A tc rate (1gbit, 500mbit, 100kbit, 2000000 bits) in bits per second.
cluster_rate_bps() {
    local r=${1,,}
    case $r in
    *gbit) echo $((${r%gbit} * 1000000000)) ;;
    *mbit) echo $((${r%mbit} * 1000000)) ;;
    *kbit) echo $((${r%kbit} * 1000)) ;;
    *[!0-9]* | "") echo "cluster: rate '$1': use Ngbit, Nmbit, Nkbit or 0" >&2; return 1 ;;
    *) echo "$r" ;;
    esac
}

cluster_up() { # HOSTS RATE
    local hosts=$1 rate=$2 sw h ns
    sw=$(cluster_sw)
    cluster_rate_bps "$rate" >/dev/null || [ "$rate" = 0 ] || return 1
    ip netns add "$sw" || return 1
    cluster_hosts=$hosts
    ip -n "$sw" link set lo up &&
        ip -n "$sw" link add br0 type bridge &&
        ip -n "$sw" addr add "$cluster_subnet.254/24" dev br0 &&
        ip -n "$sw" link set br0 up || return 1
    for h in $(seq 0 $((hosts - 1))); do
        ns=$(cluster_ns "$h")
        ip netns add "$ns" &&
            ip -n "$ns" link set lo up &&
            ip -n "$sw" link add "port$h" type veth peer name eth0 netns "$ns" &&
            ip -n "$sw" link set "port$h" master br0 up &&
            ip -n "$ns" addr add "$cluster_subnet.$((h + 1))/24" dev eth0 &&
            ip -n "$ns" link set eth0 up || return 1
    done
    cluster_rate "$rate"
}

cluster_rate() { # RATE
    local h
    for h in $(seq 0 $((cluster_hosts - 1))); do
        cluster_shape "$(cluster_ns "$h")" eth0 "$1" &&
            cluster_shape "$(cluster_sw)" "port$h" "$1" || return 1
    done
}

cluster_down() {
    local h
    for h in $(seq 0 $((cluster_hosts - 1))); do cluster_kill_ns "$(cluster_ns "$h")"; done
    cluster_kill_ns "$(cluster_sw)"
    for h in $(seq 0 $((cluster_hosts - 1))); do ip netns del "$(cluster_ns "$h")" 2>/dev/null; done
    ip netns del "$(cluster_sw)" 2>/dev/null
    cluster_hosts=0
    return 0
}

# The caller's EXIT trap, with its own cleanup (a command string) run first; INT and TERM
# exit through it.
cluster_trap() {
    trap "$1; cluster_down" EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}

# mpirun in the switch namespace: the out-of-band channel and the PMIx server on the bridge
# (PMIx's TCP listener takes remote connections there: the ranks are in other namespaces),
# UCX TCP on each host's eth0 only, shared memory between the processes of a host; the
# ranks' shared-memory BTL is Open MPI's own business (its bootstrap traffic).
cluster_mpi_opts=()
cluster_limit_s=
cluster_mpirun() { # PPH NP CMD...
    local pph=$1 np=$2
    shift 2
    ${cluster_limit_s:+timeout "$cluster_limit_s"} ip netns exec "$(cluster_sw)" env PMIX_MCA_ptl_tcp_remote_connections=1 \
        PMIX_MCA_ptl_tcp_if_include=br0 DCP_CLUSTER_PREFIX="$cluster_prefix" \
        DCP_CLUSTER_PPH="$pph" \
        mpirun --allow-run-as-root --oversubscribe --bind-to none --mca oob_tcp_if_include br0 \
        -x DCP_CLUSTER_PREFIX -x DCP_CLUSTER_PPH -x UCX_NET_DEVICES=eth0 \
        -x UCX_TLS="${UCX_TLS:-sm,tcp,self}" "${cluster_mpi_opts[@]}" -np "$np" \
        "$cluster_here/enter.sh" "$@"
}

cluster_job_alive() { [ -n "$(ip netns pids "$(cluster_sw)" 2>/dev/null)" ]; }

cluster_host_exec() { # I CMD...
    local h=$1
    shift
    ip netns exec "$(cluster_ns "$h")" unshare --uts sh -c 'hostname "$0" && exec "$@"' "h$h" "$@"
}

cluster_link_down() { ip -n "$(cluster_sw)" link set "port$1" down; }

cluster_kill_host() { cluster_kill_ns "$(cluster_ns "$1")"; }

cluster_counters() { # I: eth0 tx, eth0 rx, lo tx bytes
    local ns
    ns=$(cluster_ns "$1")
    echo "$(ip netns exec "$ns" cat /sys/class/net/eth0/statistics/tx_bytes)" \
        "$(ip netns exec "$ns" cat /sys/class/net/eth0/statistics/rx_bytes)" \
        "$(ip netns exec "$ns" cat /sys/class/net/lo/statistics/tx_bytes)"
}
