# Sourced by the fault tests (tests/mpi/kill.sh, tests/cluster/run.sh): the checks of one
# surviving rank of a job whose ranks ran under tests/mpi/rank.sh (DIR/{rc,end}.RANK).
#
#   survivor_ended NAME DIR RANK FAULT LIMIT
#       the rank ended by itself, with status 1, at most LIMIT s after FAULT (a date +%s.%N);
#       failures go through the caller's fail(); survivor_worst keeps the latest end seen
#       (seconds after the fault; the caller zeroes it per job). Returns 1 when the rank
#       still runs.
survivor_worst=0
survivor_ended() {
    local name=$1 dir=$2 r=$3 fault=$4 limit=$5 rc secs
    if [ ! -f "$dir/rc.$r" ]; then
        fail "$name: rank $r still runs $(survivor_later "$fault" "$(date +%s.%N)") s after the fault"
        return 1
    fi
    rc=$(cat "$dir/rc.$r")
    secs=$(survivor_later "$fault" "$(cat "$dir/end.$r")")
    awk -v s="$secs" -v w="$survivor_worst" 'BEGIN { exit !(s > w) }' && survivor_worst=$secs
    [ "$rc" = 1 ] || fail "$name: rank $r exited with $rc, not 1"
    awk -v s="$secs" -v l="$limit" 'BEGIN { exit !(s <= l) }' ||
        fail "$name: rank $r ended $secs s after the fault (limit $limit s)"
    return 0
}

survivor_later() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
