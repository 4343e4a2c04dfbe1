#!/bin/bash
# One rank of a fault-injection job (tests/mpi/kill.sh): runs the command with its output in
# DIR/{out,err}.RANK and records its pid, exit status and end time (DIR/{pid,rc,end}.RANK), so
# that the test reads every rank's own status, not mpirun's.
#   tests/mpi/rank.sh DIR COMMAND...
dir=$1; shift
r=${OMPI_COMM_WORLD_RANK:-0}
"$@" 2>"$dir/err.$r" >"$dir/out.$r" &
echo $! >"$dir/pid.$r"
wait $!
rc=$?
date +%s.%N >"$dir/end.$r"
echo $rc >"$dir/rc.$r"
