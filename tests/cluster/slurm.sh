# A Slurm cluster on the emulated hosts of tests/cluster/lib.sh, sourced after it: Debian's
# slurmctld in the switch namespace (host name "sw", 10.66.0.254) and one slurmd per host,
# each in its host's network namespace, in a UTS namespace named for the host and in a mount
# namespace with a /tmp of its own (the PMIx server of a job step keeps its session
# directories there, and two real hosts never share one). Authentication by a munged of the
# cluster's own (its key, socket and state under the work folder). Everything runs from the
# work folder, nothing in /etc or /run is touched, and slurm_down (from cluster_down's trap,
# cluster_trap) stops every daemon it started, by the pid it recorded.
#
#   slurm_can_run              0, or 1 with the reason in $slurm_why (the daemons and the
#                              plugins mpi/pmix_v4 and mpi/pmi2 are there)
#   slurm_up DIR               the daemons up, both nodes idle (within 30 s), or 1 with the
#                              logs' tails on stderr; exports SLURM_CONF
#   slurm_srun ARGS...         srun from the switch namespace (srun's ports on the bridge)
#   slurm_down                 the daemons stopped (slurm_up's DIR is left to the caller)

slurm_dir=
slurm_pids=()
slurm_plugins=/usr/lib/x86_64-linux-gnu/slurm-wlm

slurm_can_run() {
    slurm_why=
    local c
    for c in slurmctld slurmd srun sinfo munged mungekey; do
        PATH=$PATH:/usr/sbin command -v $c >/dev/null || { slurm_why="no $c (make deps)"; return 1; }
    done
    for c in mpi_pmix_v4 mpi_pmi2; do
        [ -f "$slurm_plugins/$c.so" ] || { slurm_why="no $slurm_plugins/$c.so"; return 1; }
    done
    unshare --mount --propagation private true 2>/dev/null ||
        { slurm_why="unshare --mount fails here"; return 1; }
    return 0
}

slurm_conf() { # DIR HOSTS
    local d=$1 hosts=$2
    cat <<EOF
# written by tests/cluster/slurm.sh for one test run
ClusterName=dcpc$$
SlurmctldHost=sw($cluster_subnet.254)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$d/munge/socket
CredType=cred/munge
PluginDir=$slurm_plugins
StateSaveLocation=$d/ctld
TmpFS=$d/tmp
SlurmctldPidFile=$d/ctld/slurmctld.pid
SlurmctldLogFile=$d/ctld/slurmctld.log
SlurmdSpoolDir=$d/%n/spool
SlurmdPidFile=$d/%n/slurmd.pid
SlurmdLogFile=$d/%n/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
SlurmdTimeout=30
InactiveLimit=0
KillWait=2
MessageTimeout=20
NodeName=h[0-$((hosts - 1))] NodeAddr=$cluster_subnet.[1-$hosts] CPUs=4 RealMemory=1000 State=UNKNOWN
PartitionName=emulated Nodes=ALL Default=YES MaxTime=10 State=UP OverSubscribe=YES
EOF
}

slurm_up() { # DIR
    local d=$1 h
    slurm_dir=$d
    mkdir -p "$d/munge" "$d/ctld" || return 1
    chmod 700 "$d" "$d/munge"
    mungekey --create --keyfile="$d/munge/key" 2>/dev/null ||
        dd if=/dev/urandom of="$d/munge/key" bs=1024 count=1 2>/dev/null
    chmod 600 "$d/munge/key"
    /usr/sbin/munged --force --socket="$d/munge/socket" --key-file="$d/munge/key" \
        --pid-file="$d/munge/pid" --log-file="$d/munge/log" --seed-file="$d/munge/seed" ||
        { echo "slurm: munged does not start: $(tail -3 "$d/munge/log")" >&2; return 1; }
    slurm_pids+=("$(cat "$d/munge/pid")")
    slurm_conf "$d" "$cluster_hosts" >"$d/slurm.conf"
    # slurmd loads a cgroup plugin whatever the proctrack and task plugins (here pgid and
    # none: the jobs' processes are not confined): the machine's version, v1 where
    # /sys/fs/cgroup is a tmpfs of v1 hierarchies
    if [ "$(stat -fc %T /sys/fs/cgroup 2>/dev/null)" = cgroup2fs ]; then
        printf 'CgroupPlugin=cgroup/v2\nIgnoreSystemd=yes\n' >"$d/cgroup.conf"
    else
        printf 'CgroupPlugin=cgroup/v1\nCgroupAutomount=no\n' >"$d/cgroup.conf"
    fi
    export SLURM_CONF=$d/slurm.conf
    # slurmctld -i: no state from an earlier run; -D in the background, so its pid is ours
    ip netns exec "$(cluster_sw)" unshare --uts sh -c 'hostname sw && exec "$@"' x \
        /usr/sbin/slurmctld -D -i -f "$SLURM_CONF" >"$d/ctld/stdout" 2>&1 &
    slurm_pids+=($!)
    for h in $(seq 0 $((cluster_hosts - 1))); do
        mkdir -p "$d/h$h/spool" "$d/h$h/tmp" "$d/tmp"
        chmod 1777 "$d/h$h/tmp"
        ip netns exec "$(cluster_ns "$h")" unshare --uts --mount --propagation private \
            sh -c 'hostname "$1" && mount --bind "$2" "$3" && shift 3 && exec "$@"' x "h$h" \
            "$d/h$h/tmp" "$d/tmp" /usr/sbin/slurmd -D -N "h$h" -f "$SLURM_CONF" >"$d/h$h/stdout" 2>&1 &
        slurm_pids+=($!)
    done
    local idle until=$((SECONDS + 30))
    while [ $SECONDS -lt $until ]; do
        idle=$(ip netns exec "$(cluster_sw)" sinfo -h -N -o '%N %t' 2>/dev/null | grep -c ' idle$')
        [ "$idle" = "$cluster_hosts" ] && return 0
        sleep 0.2
    done
    echo "slurm: $idle of $cluster_hosts nodes idle after 30 s" >&2
    ip netns exec "$(cluster_sw)" sinfo -N >&2
    tail -n 5 "$d/ctld/slurmctld.log" "$d"/h*/slurmd.log "$d"/h*/stdout "$d/ctld/stdout" >&2
    return 1
}

slurm_srun() {
    ip netns exec "$(cluster_sw)" srun "$@"
}

# Each daemon by its pid (TERM, then KILL after 5 s); the job steps' processes live in the
# hosts' namespaces, which cluster_down empties.
slurm_down() {
    local p i
    [ ${#slurm_pids[@]} = 0 ] && return 0
    kill -TERM "${slurm_pids[@]}" 2>/dev/null
    for i in $(seq 50); do
        local alive=0
        for p in "${slurm_pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
        [ $alive = 0 ] && break
        sleep 0.1
    done
    kill -KILL "${slurm_pids[@]}" 2>/dev/null
    slurm_pids=()
    return 0
}
