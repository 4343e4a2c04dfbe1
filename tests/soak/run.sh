#!/bin/bash
# The soak (tests/soak/soak.c): dcp-soak on 4 processes under mpirun, UCX over shared memory;
# exits with its status (1 when dcp's live bytes, live blocks or open descriptors moved after
# the warm-up, or a call failed).
#
#   tests/soak/run.sh [BIN_DIR] [STEPS]      (default build/bin, 10000)
set -u
bin=${1:-build/bin}
steps=${2:-10000}
# the ranks share the cores: let UCX and Open MPI yield instead of spinning
export OMPI_MCA_mpi_yield_when_idle=1
exec mpirun --allow-run-as-root --oversubscribe --bind-to none -np 4 \
    -x OMPI_MCA_mpi_yield_when_idle -x UCX_TLS="${UCX_TLS:-sm,self}" \
    "$bin/dcp-soak" --steps "$steps"
