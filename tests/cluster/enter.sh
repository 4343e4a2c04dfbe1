#!/bin/sh
# What mpirun starts for each rank of an emulated cluster (tests/cluster/lib.sh): the rank
# enters its host's network namespace and a UTS namespace named for the host, then runs the
# command. Rank r of the job lives on host r / DCP_CLUSTER_PPH (processes per host), so the
# ranks are placed host by host, as dcp's peer table expects of a launcher.
#   enter.sh CMD...     (DCP_CLUSTER_PREFIX, DCP_CLUSTER_PPH from tests/cluster/lib.sh)
r=${OMPI_COMM_WORLD_RANK:?enter.sh: not started by mpirun}
h=$((r / ${DCP_CLUSTER_PPH:?}))
exec ip netns exec "${DCP_CLUSTER_PREFIX:?}-h$h" unshare --uts \
    sh -c 'hostname "$0" && exec "$@"' "h$h" "$@"
