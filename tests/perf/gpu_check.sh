#!/usr/bin/env bash
# Everything that waits for a GPU, in one run on a machine with CUDA (and, for the last
# step, PyTorch): the GPU suite, dcp-attn-test --device cuda --check for every mask and
# strategy with all ranks on one GPU, the dcp-kernel-bench table, the PyTorch comparison.
# Output goes to OUT (default gpu-results/). Built here first, e.g.:
#   make && ../shared/scripts/bundle-runtime-libs.sh gpu-libs
# then on the GPU machine, with the build and the libraries carried along:
#   LD_LIBRARY_PATH=gpu-libs/lib:$NCCL_LIB tests/perf/gpu_check.sh build OUT
set -uo pipefail
bin=${1:-build}/bin
out=${2:-gpu-results}
mkdir -p "$out"
status=0
step() { # name, command...
    local name=$1
    shift
    echo "== $name: $*"
    "$@" >"$out/$name.txt" 2>&1
    local rc=$?
    tail -n 40 "$out/$name.txt"
    echo "== $name: exit $rc"
    [ $rc -eq 0 ] || status=1
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >"$out/gpu.txt" 2>&1
step suites "$bin/dcp-tests" -s gpu
# the double-precision reference bounds the size: ~1 TFLOP of checking per mask at 8192
step attn-test "$bin/dcp-attn-test" --device cuda --ranks 8 --cluster 2x4 --tokens 8192 \
    --heads 8 --kv-heads 2 --head-dim 128 --block 1024 \
    --mask full,causal,window,lambda,blockwise,shared-question --strategy all --check \
    --backward --warmup 1 --iters 3
# the 8-ranks-on-one-GPU ordering race (ring and zigzag failed 6/12 and 5/12 before the
# device allocations waited for their zero fill): 50 repetitions, any mismatch fails
stress() {
    local n=0 out
    for i in $(seq 50); do
        for dt in fp16 bf16; do
            out=$("$bin/dcp-attn-test" --device cuda --dtype $dt --heads 4 --kv-heads 2 \
                --head-dim 128 --block 512 --check --backward --ranks 8 --cluster 2x4 \
                --seqlens 1059,3263,3870 --mask full,causal --strategy ring,zigzag --seed "$i") ||
                { echo "$out"; echo "repetition $i, $dt: failed"; return 1; }
            n=$((n + $(grep -c PASS <<<"$out")))
        done
    done
    echo "$n runs passed"
}
step race-stress stress
step kernel-bench "$bin/dcp-kernel-bench" --json
step kernel-bench-table "$bin/dcp-kernel-bench" --total 16384,131072 --tile 2048,4096 \
    --head-dim 128 --gqa 8:2,64:8
if python3 -c "import torch" 2>/dev/null; then
    step compare-sdpa python3 "$(dirname "$0")/compare_sdpa.py" --lib "${1:-build}/lib/libdcp.so"
fi
exit $status
