#!/usr/bin/env bash
# The GPU report: every GPU claim of dcp checked in one run, every figure
# in OUTDIR/gpu_check.json and OUTDIR/gpu_check.txt, every log in OUTDIR/gpu_check_logs.tar.gz
# (three files: what one device call brings back). Both are rewritten after each step, so a
# run cut short still reports the steps it finished.
#
#   DIR/gpu_check.sh [--quick|--full] [--dry-run] [--serial] [--steps A,B,..] [--budget S] OUTDIR
#
# DIR is a bundle (`make gpu-bundle DIR=...`, copied to the GPU machine) or, run from a
# checkout, tests/perf with the build in build/ (--build DIR to choose). It needs bash,
# coreutils' timeout and python3 (the GPU machine's, with PyTorch); it sets LD_LIBRARY_PATH
# itself: the bundle's lib/, then cuDNN and NCCL from the PyTorch wheels (python3 -c 'import
# nvidia.cudnn' ...), which DCP_CUDNN_LIB and DCP_NCCL_LIB also name for libdcp.
#
# --quick (the default) fits one 10-minute device call (--budget 570 s): every step at a
# small size. --full is the second call: the 50-run race check, the sanitizers over more of
# the suite, all masks, the bigger benchmarks (--budget 570 s too; --steps picks steps).
# Each step runs under `timeout`, the whole under the budget: a step that would not fit is
# reported as skipped, never started.
#
# cudnn-probe builds every cuDNN graph dcp asks for (a line each: built, ms, engine, cuDNN's own
# error) and sdpa-capture logs the cuDNN graphs PyTorch itself builds (its logs in the logs
# tarball, logs/sdpa-capture/), the reference for dcp's graphs.
#
# On a GPU the correctness steps run side by side, in lanes (the probe then the capture; the
# GPU suite; graph then torch;
# the three sanitizers; stress, its dtypes and strategies at once; attn; engine), each lane within
# --lane-budget S (3/5 of the budget by default), then the steps that time (deterministic,
# host-us, kernel-bench, compare-sdpa, warp-rows) alone on the GPU in what is left, so that
# the timings are undisturbed. --serial runs every step in turn.
#
# --dry-run (or no GPU visible) runs the steps that need no GPU (the bundle's own check that
# every library resolves inside it, the CPU suites, a CPU attention check, the ctypes mirror)
# and reports every GPU step as skipped with the reason: what `make test` runs on the bundle.
#
# Steps: env bundle cpu-suites cpu-attn ctypes cudnn-probe sdpa-capture gpu-suite memcheck
#        racecheck synccheck stress attn engine gpupath deterministic host-us graph torch
#        kernel-bench compare-sdpa warp-rows
# (gpupath: GPU waits that time out, NCCL's device-memory stamps on one rank, lent NCCL
# communicators, and PyTorch's NCCL communicator lent to a Context; limit 150 s)
set -uo pipefail
mode=quick dry=0 budget=570 only= out= build= lanes=1 lane_budget= lane_work=
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) mode=quick ;;
    --full) mode=full ;;
    --dry-run) dry=1 ;;
    --steps) only=$2; shift ;;
    --steps=*) only=${1#*=} ;;
    --budget) budget=$2; shift ;;
    --budget=*) budget=${1#*=} ;;
    --serial) lanes=0 ;;
    --lane-budget) lane_budget=$2; shift ;;
    --lane-work) lane_work=$2; shift ;; # internal: one lane, writing into the parent's work
    --build) build=$2; shift ;;
    --build=*) build=${1#*=} ;;
    -h | --help) sed -n '2,34p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "gpu_check: unknown flag $1 (--help)" >&2; exit 2 ;;
    *) [ -z "$out" ] || { echo "gpu_check: one OUTDIR, got $out and $1" >&2; exit 2; }; out=$1 ;;
    esac
    shift
done
[ -n "$out" ] || { echo "gpu_check: give OUTDIR (--help)" >&2; exit 2; }
case "$budget" in '' | *[!0-9]*) echo "gpu_check: --budget $budget is not a number of seconds" >&2; exit 2 ;; esac
lane_budget=${lane_budget:-$((budget * 3 / 5))}
case "$lane_budget" in '' | *[!0-9]*) echo "gpu_check: --lane-budget $lane_budget is not a number of seconds" >&2; exit 2 ;; esac
start=$(date +%s)
here=$(cd "$(dirname "$0")" && pwd)
if [ -x "$here/bin/dcp-tests" ]; then # a bundle
    base=$here bin=$here/bin lib=$here/lib pydir=$here/python tests=$here/tests
else # a checkout: tests/perf/gpu_check.sh
    repo=$(cd "$here/../.." && pwd)
    build=${build:-$repo/build}
    base=$repo bin=$build/bin lib=$build/lib pydir=$repo/plugin/python tests=$repo/tests
fi
mkdir -p "$out" || exit 2
out=$(cd "$out" && pwd)
if [ -n "$lane_work" ]; then # a lane: the parent's work folder, its report
    work=$lane_work
else
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    mkdir -p "$work/logs"
    : >"$work/steps.tsv"
fi

# ---- environment: the bundle's libraries, cuDNN and NCCL from the PyTorch wheels ----------
py=$(command -v python3 || true)
wheel_lib() { # python module, library file name: the wheel's lib/ folder holding it
    [ -n "$py" ] || return 1
    "$py" - "$1" "$2" 2>/dev/null <<'EOF'
import importlib, os, sys
mod, name = sys.argv[1], sys.argv[2]
try:
    m = importlib.import_module(mod)
except Exception:
    sys.exit(1)
for root in list(getattr(m, "__path__", [])) + [os.path.dirname(getattr(m, "__file__", "") or ".")]:
    for sub in ("lib", "lib64", ""):
        d = os.path.join(root, sub)
        if os.path.exists(os.path.join(d, name)):
            print(d)
            sys.exit(0)
sys.exit(1)
EOF
}
cudnn_dir=$(wheel_lib nvidia.cudnn libcudnn.so.9 || wheel_lib nvidia.cu13 libcudnn.so.9 || true)
nccl_dir=$(wheel_lib nvidia.nccl libnccl.so.2 || wheel_lib nvidia.cu13 libnccl.so.2 || true)
if [ -z "$cudnn_dir" ] && [ -n "$py" ]; then # any site-packages copy (bounded search)
    cudnn_dir=$(dirname "$(find "$("$py" -c 'import site; print(site.getsitepackages()[0])' 2>/dev/null || echo /nonexistent)" \
        -maxdepth 5 -name libcudnn.so.9 2>/dev/null | head -1)" 2>/dev/null)
    [ "$cudnn_dir" = . ] && cudnn_dir=
fi
export LD_LIBRARY_PATH="$lib${cudnn_dir:+:$cudnn_dir}${nccl_dir:+:$nccl_dir}"
[ -n "$cudnn_dir" ] && export DCP_CUDNN_LIB="$cudnn_dir/libcudnn.so.9"
[ -n "$nccl_dir" ] && export DCP_NCCL_LIB="$nccl_dir/libnccl.so.2"
[ -d "$lib/ucx" ] && export UCX_MODULE_DIR="$lib/ucx"
[ -d "$lib/hwloc" ] && export HWLOC_PLUGINS_PATH="$lib/hwloc"
export DCP_LIB="$lib/libdcp.so" PYTHONPATH="$pydir${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1

gpu=0 why_no_gpu="--dry-run"
if [ $dry = 0 ]; then
    suites=$("$bin/dcp-tests" -l 2>/dev/null) # (not piped into grep -q: pipefail and SIGPIPE)
    if grep -q '^gpu$' <<<"$suites"; then
        gpu=1
    else
        why_no_gpu="no CUDA device visible to dcp-tests"
        grep -q '^cuda: none' "$base/MANIFEST" 2>/dev/null &&
            why_no_gpu="the bundle holds no GPU code (MANIFEST: built without nvcc)"
    fi
fi
torch_cuda=0
if [ $gpu = 1 ] && [ -n "$py" ] && "$py" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    torch_cuda=1
fi
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)

[ -n "$lane_work" ] || {
    echo "mode=$mode dry_run=$dry gpu=$gpu budget_s=$budget lanes=$lanes"
    echo "base=$base"
    echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    echo "DCP_CUDNN_LIB=${DCP_CUDNN_LIB:-} DCP_NCCL_LIB=${DCP_NCCL_LIB:-}"
    echo "python3=${py:-none} torch_cuda=$torch_cuda compute_sanitizer=${sanitizer:-none}"
    [ -f "$base/MANIFEST" ] && sed -n '1,4p' "$base/MANIFEST"
} >"$work/meta.txt"

report() {
    [ -z "$lane_work" ] || return 0 # the parent reports its lanes' steps
    if [ -n "$py" ]; then
        "$py" "$tests/perf/gpu_report.py" "$work" "$out" || echo "gpu_check: gpu_report.py failed" >&2
    else
        cp "$work/steps.tsv" "$out/gpu_check.txt"
        printf '{"error": "no python3 to write the JSON report; see gpu_check.txt"}\n' >"$out/gpu_check.json"
    fi
    tar -C "$work" -czf "$out/gpu_check_logs.tar.gz" logs meta.txt steps.tsv 2>/dev/null
}

wanted() { [ -z "$only" ] || [[ ",$only," == *",$1,"* ]]; }
in_lanes= # the steps the lanes ran: the parent skips them
# Why a step that needs `needs` (cpu, gpu, torch: PyTorch on the GPU, sanitizer) cannot run
# here ("" when it can).
cannot() {
    case "$1" in
    gpu) [ $gpu = 1 ] || echo "skipped: $why_no_gpu" ;;
    torch) if [ $gpu = 0 ]; then echo "skipped: $why_no_gpu"; elif [ $torch_cuda = 0 ]; then
        echo "skipped: python3 here has no PyTorch with CUDA"; fi ;;
    sanitizer) if [ $gpu = 0 ]; then echo "skipped: $why_no_gpu"; elif [ -z "$sanitizer" ]; then
        echo "skipped: compute-sanitizer not found"; fi ;;
    esac
}
# step NAME NEEDS LIMIT_S COMMAND...: one line in steps.tsv (name, status, rc, seconds, limit,
# note) and the log in logs/NAME.log. Shell functions run through bash (they are exported).
step() {
    local name=$1 needs=$2 limit=$3
    shift 3
    wanted "$name" || return 0
    [[ " $in_lanes " == *" $name "* ]] && return 0
    local note left status
    note=$(cannot "$needs")
    left=$((budget - ($(date +%s) - start) - 10))
    if [ -z "$note" ] && [ $left -lt 20 ]; then note="skipped: budget ($budget s) spent"; fi
    if [ -n "$note" ]; then
        printf '%s\tskip\t-\t0\t%s\t%s\n' "$name" "$limit" "$note" >>"$work/steps.tsv"
        echo "== $name: $note"
        report
        return 0
    fi
    [ "$limit" -gt $left ] && limit=$left
    echo "== $name (limit ${limit} s): $*"
    local t0 rc secs
    t0=$(date +%s)
    (cd "$work" && timeout -k 10 "$limit" bash -c '"$@"' step "$@") >"$work/logs/$name.log" 2>&1
    rc=$?
    secs=$(($(date +%s) - t0))
    case $rc in 0) status=pass ;; 124 | 137) status=timeout ;; *) status=fail ;; esac
    printf '%s\t%s\t%s\t%s\t%s\t\n' "$name" "$status" "$rc" "$secs" "$limit" >>"$work/steps.tsv"
    tail -n 5 "$work/logs/$name.log"
    echo "== $name: $status ($rc) in ${secs} s"
    report
}
q() { [ $mode = quick ] && echo "$1" || echo "$2"; } # the quick or the full value

# ---- the bundle itself: every library every binary loads resolves inside it ----------------
bundle_check() {
    local bad=0 f name path
    for f in "$bin"/* "$lib"/libdcp.so "$lib"/ucx/*.so* "$lib"/hwloc/*.so; do
        [ -f "$f" ] || continue
        while read -r name path; do
            case "$name" in
            linux-vdso.so.* | ld-linux-x86-64.so.* | libc.so.* | libm.so.* | libdl.so.* | \
                libpthread.so.* | librt.so.* | libresolv.so.* | libstdc++.so.* | libgcc_s.so.*) continue ;;
            esac
            case "$path" in
            "$lib"/*) ;;
            *) echo "$f: $name -> ${path:-not found} (outside $lib)"; bad=1 ;;
            esac
        done < <(ldd "$f" 2>/dev/null | awk '/=>/ {print $1, $3}')
    done
    [ $bad = 0 ] && echo "every library of $bin and $lib resolves inside $lib (or is the C runtime)"
    "$bin/dcp-tests" -l >/dev/null || { echo "dcp-tests does not start"; bad=1; }
    return $bad
}
gpu_tests() { # every test of the gpu suite but the ones named, one process each
    local fail=0 t
    for t in $("$bin/dcp-tests" -l | awk '/^gpu$/ {g=1; next} /^[^ ]/ {g=0} g {print $1}'); do
        [[ " $* " == *" $t "* ]] && continue
        echo "--- $t"
        "$bin/dcp-tests" -s gpu -t "$t" -v || fail=1
    done
    return $fail
}
sanitize() { # tool, tests...
    local tool=$1 fail=0 t
    shift
    for t in "$@"; do
        echo "--- $tool: $t"
        "$sanitizer" --tool "$tool" --error-exitcode 9 --print-limit 20 \
            "$bin/dcp-tests" -s gpu -t "$t" || fail=1
    done
    return $fail
}
stress() { # the race check: 8 ranks on one GPU, every run against the CPU executor's result;
    # the dtypes, and with 8 cores or more the strategies, side by side (the CPU executor's
    # and the reference's time dominate), their JSON lines written whole (line-buffered) into
    # the one log, so a run cut short keeps them. The 50-run check (--full) runs dcp's kernels
    # (--engine own): a fresh context builds its cuDNN plans anew, 0.2-2.2 s each on an H100,
    # which 50 x 24 runs cannot afford
    local reps=$1 engine=$2 fail=0 dt s n=0 strategies=ring,zigzag,lpt,metis
    [ "$(nproc)" -lt 8 ] || strategies="ring zigzag lpt metis"
    for dt in bf16 fp16; do
        for s in $strategies; do
            stdbuf -oL "$bin/dcp-attn-test" --device cuda --engine "$engine" --dtype $dt --heads 4 \
                --kv-heads 2 --head-dim 128 --block 512 --ranks 8 --cluster 2x4 \
                --seqlens 1059,3263,3870 --mask full,causal,lambda:64:1024 --strategy "$s" \
                --check --backward --repeat "$reps" --warmup 0 --iters 1 --json &
            n=$((n + 1))
        done
    done
    for ((; n > 0; n--)); do wait -n || fail=1; done
    return $fail
}

echo "gpu_check: $mode, $( [ $gpu = 1 ] && echo GPU || echo "no GPU ($why_no_gpu)"), out $out"
env_info() { # the machine, the libraries found, and the engine libdcp picks here (and why)
    cat "$work/meta.txt"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1
    "$bin/dcp-attn-test" --device "$1" --dtype bf16 --seqlens 300 --ranks 1 --cluster 1x1 \
        --heads 4 --kv-heads 2 --head-dim 64 --block 128 --engine auto --warmup 0 --iters 1 --json
}
cpu_suites() { # from the base: the cudnn suite reads tests/data/cudnn_sdpa_graphs
    cd "$base" && "$bin/dcp-tests" -s kernels && "$bin/dcp-tests" -s segment &&
        "$bin/dcp-tests" -s cudnn
}
# the gpu suite's tests of the gpupath step (the gpu-suite step leaves them to it)
gpupath_tests="synchronize_times_out_behind_a_held_stream next_call_times_out_behind_a_held_stream nccl_one_rank_device_stamps nccl_lent_comm_checked"
gpupath() { # those tests, one process each, then Context(nccl_comm="group") through PyTorch
    local fail=0 t
    for t in $gpupath_tests; do
        echo "--- $t"
        "$bin/dcp-tests" -s gpu -t "$t" -v || fail=1
    done
    if [ "$torch_cuda" = 1 ]; then
        "$py" "$tests/perf/torch_cuda_check.py" --only nccl_comm --json || fail=1
    else
        echo "torch_cuda_check --only nccl_comm: skipped (python3 here has no PyTorch with CUDA)"
    fi
    return $fail
}
export -f env_info bundle_check gpu_tests sanitize stress cpu_suites gpupath
export bin lib work sanitizer gpupath_tests torch_cuda py tests base
# lanes: the correctness steps side by side (each its own instance of this script,
# writing into this work folder), then the rest below, alone on the GPU
if [ $lanes = 1 ] && [ -z "$lane_work" ] && [ $gpu = 1 ]; then
    lane_steps=("cudnn-probe,sdpa-capture" "gpu-suite" "graph,torch" "memcheck,racecheck,synccheck"
        "stress" "attn" "engine" "gpupath")
    echo "== lanes (${lane_budget} s each): ${lane_steps[*]}"
    for l in "${lane_steps[@]}"; do
        mine=
        for s in ${l//,/ }; do wanted "$s" && mine+="${mine:+,}$s" && in_lanes+=" $s"; done
        [ -n "$mine" ] || continue
        "$0" --"$mode" --lane-work "$work" --budget "$lane_budget" --steps "$mine" \
            ${build:+--build "$build"} "$out" >"$work/logs/lane-${mine%%,*}.out" 2>&1 &
    done
fi
step env cpu 60 env_info "$( [ $gpu = 1 ] && echo cuda || echo cpu)"
step bundle cpu 60 bundle_check
[ -z "$in_lanes" ] || { wait; report; }
if [ $gpu = 0 ]; then
    step cpu-suites cpu 240 cpu_suites
    step cpu-attn cpu 240 "$bin/dcp-attn-test" --device cpu --dtype bf16 --heads 4 --kv-heads 2 \
        --head-dim 32 --block 128 --ranks 4 --cluster 1x4 --seqlens 300,517 \
        --mask causal,lambda:8:128 --strategy ring,metis --engine twin --check --backward \
        --repeat 2 --warmup 0 --iters 1 --json
    step ctypes cpu 120 "$py" "$tests/perf/compare_sdpa.py" --dry-run --lib "$lib/libdcp.so" --totals 4096
fi
step cudnn-probe gpu 150 "$bin/dcp-kernel-bench" --device cuda --engine cudnn --probe
step sdpa-capture torch 200 "$py" "$tests/perf/sdpa_capture.py" logs/sdpa-capture
step gpu-suite gpu "$(q 240 400)" gpu_tests eight_ranks_on_one_gpu_repeated $gpupath_tests
step memcheck sanitizer "$(q 150 300)" sanitize memcheck $(q "attention_gqa_dims_and_edges backward_gqa_dims_and_edges backward_deterministic merge_and_copy" \
    "attention_every_mask attention_gqa_dims_and_edges backward_every_mask backward_gqa_dims_and_edges backward_deterministic merge_and_copy accumulate_grads executor_on_one_gpu")
step racecheck sanitizer "$(q 150 300)" sanitize racecheck $(q "attention_gqa_dims_and_edges backward_gqa_dims_and_edges backward_deterministic" \
    "attention_gqa_dims_and_edges backward_gqa_dims_and_edges backward_deterministic fully_masked_rows merge_and_copy bwd_delta")
step synccheck sanitizer "$(q 100 200)" sanitize synccheck $(q "attention_gqa_dims_and_edges backward_gqa_dims_and_edges" \
    "attention_gqa_dims_and_edges backward_gqa_dims_and_edges merge_and_copy accumulate_grads")
step stress gpu "$(q 300 540)" stress "$(q 3 50)" "$(q auto own)"
step attn gpu "$(q 300 400)" "$bin/dcp-attn-test" --device cuda --ranks 8 --cluster 2x4 --tokens "$(q 8192 16384)" \
    --heads 8 --kv-heads 2 --head-dim 128 --block 1024 \
    --mask "$(q full,causal,lambda,blockwise full,causal,window,lambda,blockwise,shared-question)" \
    --strategy all --check --backward --warmup 1 --iters 3 --json
engines() { # own, then cudnn, on the same plans: times side by side, both checked
    local e fail=0
    for e in own cudnn; do
        "$bin/dcp-attn-test" --device cuda --engine $e --ranks 8 --cluster 2x4 --tokens "$1" \
            --heads 8 --kv-heads 2 --head-dim 128 --block 1024 --mask full,causal,lambda,blockwise \
            --strategy "$2" --check --backward --warmup 1 --iters 3 --json || fail=1
    done
    return $fail
}
export -f engines
step engine gpu "$(q 300 300)" engines "$(q 8192 16384)" "$(q metis all)"
step gpupath gpu 150 gpupath
deterministic() { # the deterministic backward (--deterministic fails a row whose runs differ
    # in any bit) on dcp's kernels and on the engine cuDNN runs in (auto: its waves where its
    # backward is on), then the atomic kernel's count of unequal runs beside it (reported);
    # then both backward kernels timed
    local fail=0 d
    for d in "own --deterministic" "auto --deterministic" own; do
        "$bin/dcp-attn-test" --device cuda --engine $d --dtype bf16 --heads 8 --kv-heads 2 \
            --head-dim 128 --block 512 --ranks 8 --cluster 2x4 --seqlens 1059,3263,3870 \
            --mask full,causal,lambda:64:1024,blockwise --strategy ring,lpt --check --backward \
            --repeat "$1" --warmup 0 --iters 1 --json || { [ "$d" = own ] || fail=1; }
    done
    for d in --deterministic ""; do
        "$bin/dcp-kernel-bench" --kernel bwd $d --mask full,causal,lambda,blockwise --total 16384 \
            --tile 2048 --head-dim 128 --gqa 8:2 --json || fail=1
    done
    return $fail
}
export -f deterministic
step deterministic gpu "$(q 260 480)" deterministic "$(q 3 10)"
step host-us gpu 120 "$bin/dcp-attn-test" --device cuda --ranks 8 --cluster 2x4 --tokens 16384 --heads 8 \
    --kv-heads 2 --head-dim 128 --block 1024 --mask causal --strategy all --backward --warmup 2 --iters 20 --json
step graph gpu 60 "$bin/dcp-tests" -s gpu -t graph_capture_forward_backward -v
torch_checks() {
    "$py" "$tests/perf/torch_cuda_check.py" --json &&
        (cd "$tests/torch" && "$py" test_attention.py AttentionCuda -v)
}
export -f torch_checks
export py tests
step torch torch "$(q 300 400)" torch_checks
kernel_benches() { # dcp's kernels, then the same tiles through cuDNN (reported, not failed, when
    # cuDNN is missing or refused: the engine step fails for that)
    "$bin/dcp-kernel-bench" --total "$1" --tile "$2" --head-dim 128 --gqa "$3" --json || return 1
    "$bin/dcp-kernel-bench" --engine cudnn --kernel attn,bwd --total "$1" --tile "$2" \
        --head-dim 128 --gqa "$3" --json || echo "kernel-bench --engine cudnn: failed (above)"
}
export -f kernel_benches
step kernel-bench gpu "$(q 150 300)" kernel_benches "$(q 16384 16384,65536)" "$(q 2048,4096 1024,2048,4096)" "$(q 8:2 8:2,64:8)"
step compare-sdpa torch "$(q 180 400)" "$py" "$tests/perf/compare_sdpa.py" --lib "$lib/libdcp.so" --json $(q "--totals 16384" "")
warp_rows() { # the forward's other shape (DCP_ATTN_WARP_ROWS=16: 8 warps of 16 rows; the
    # default is FlashAttention-2's 32): its tests and sanitizers, then both shapes timed side by
    # side (JSON warp_rows 16 and 32)
    local fail=0 t wr
    for t in attention_every_mask attention_gqa_dims_and_edges fully_masked_rows accumulate \
        executor_on_one_gpu; do
        echo "--- $t, 16 rows per warp"
        DCP_ATTN_WARP_ROWS=16 "$bin/dcp-tests" -s gpu -t "$t" -v || fail=1
    done
    if [ -n "$sanitizer" ]; then
        for t in memcheck racecheck synccheck; do
            DCP_ATTN_WARP_ROWS=16 sanitize $t attention_gqa_dims_and_edges || fail=1
        done
    fi
    for wr in 16 32; do
        DCP_ATTN_WARP_ROWS=$wr "$bin/dcp-kernel-bench" --kernel attn --mask "$1" --total "$2" \
            --tile "$3" --head-dim 64,128 --gqa 8:2 --json || fail=1
    done
    return $fail
}
export -f warp_rows
step warp-rows gpu "$(q 150 300)" warp_rows "$(q causal,lambda,blockwise full,causal,window,lambda,blockwise,shared-question)" "$(q 16384 16384,65536)" "$(q 2048 1024,2048,4096)"
report
echo "gpu_check: report in $out/gpu_check.txt and $out/gpu_check.json, logs in $out/gpu_check_logs.tar.gz"
awk -F'\t' '$2 == "fail" || $2 == "timeout" {bad = 1} END {exit bad}' "$work/steps.tsv"
