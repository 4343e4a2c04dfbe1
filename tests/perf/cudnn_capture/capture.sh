#!/bin/sh
# Builds the capture program against a cudnn-frontend tree and runs every graph it knows on a
# machine without a GPU, writing per graph into OUTDIR/raw:
#   NAME.out           what the program printed (steps, frontend workspace, serialized graph)
#   NAME.cudnn.log     cuDNN's API log (CUDNN_LOGLEVEL_DBG=3): every backend call, verbatim
#   NAME.frontend.log  the frontend's log (CUDNN_FRONTEND_LOG_INFO=1): tensor names and UIDs
#   NAME.trace         every backend call as cudnn_trace.c records it, descriptors numbered
# then the trimmed files (trim.py) into OUTDIR/trimmed, and OUTDIR/dynamic_loading.txt: the
# same graph built by a frontend compiled with NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING, with the
# shim preloaded and with the shim installed as libcudart.so.13.
#
# Usage: capture.sh FRONTEND_DIR OUTDIR      (CUDA_HOME defaults to /usr/local/cuda; cuDNN's
# headers and libcudnn.so.9 are looked for there, or in CUDNN_HOME)
set -eu

if [ $# -ne 2 ]; then
    echo "usage: $0 FRONTEND_DIR OUTDIR" >&2
    exit 2
fi
FRONTEND=$(cd "$1" && pwd)
mkdir -p "$2"
OUT=$(cd "$2" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
CUDNN_HOME=${CUDNN_HOME:-$CUDA_HOME}
CXX=${CXX:-g++}
CC=${CC:-gcc}

if [ ! -f "$FRONTEND/include/cudnn_frontend.h" ]; then
    echo "$0: $FRONTEND/include/cudnn_frontend.h not found (FRONTEND_DIR is a cudnn-frontend tree)" >&2
    exit 2
fi
if [ ! -f "$CUDNN_HOME/include/cudnn_graph_v9.h" ] && [ ! -f "$CUDNN_HOME/include/cudnn_graph.h" ]; then
    echo "$0: cuDNN headers not found in $CUDNN_HOME/include (set CUDNN_HOME)" >&2
    exit 2
fi
INC="-I$FRONTEND/include -I$CUDNN_HOME/include -I$CUDA_HOME/include"
LIBDIRS="-L$CUDNN_HOME/lib64 -L$CUDA_HOME/lib64"
export LD_LIBRARY_PATH="$CUDNN_HOME/lib64:$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

BUILD="$OUT/build"
RAW="$OUT/raw"
mkdir -p "$BUILD" "$RAW" "$OUT/trimmed"

echo "building in $BUILD"
$CC -O2 -Wall -Wextra -Werror -fPIC -shared -I"$CUDA_HOME/include" \
    "$HERE/cuda_shim.c" -o "$BUILD/libcuda_shim.so"
$CC -O2 -Wall -Wextra -Werror -fPIC -shared -I"$CUDNN_HOME/include" -I"$CUDA_HOME/include" \
    "$HERE/cudnn_trace.c" -o "$BUILD/libcudnn_trace.so" -ldl -lpthread
# shellcheck disable=SC2086
$CXX -std=c++17 -O1 $INC "$HERE/capture.cpp" -o "$BUILD/cudnn_capture" $LIBDIRS -lcudnn -lcudart -ldl
# shellcheck disable=SC2086
$CXX -std=c++17 -O1 -DNV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING $INC "$HERE/capture.cpp" \
    -o "$BUILD/cudnn_capture_dynamic" -ldl
mkdir -p "$BUILD/fake_cudart"
rm -f "$BUILD/fake_cudart/"libcudart.so.*
ln -sf ../libcuda_shim.so "$BUILD/fake_cudart/libcudart.so.13"

status=0
for name in $("$BUILD/cudnn_capture" --list); do
    rm -f "$RAW/$name".*
    if CUDNN_LOGLEVEL_DBG=3 CUDNN_LOGDEST_DBG="$RAW/$name.cudnn.log" \
        CUDNN_FRONTEND_LOG_INFO=1 CUDNN_FRONTEND_LOG_FILE="$RAW/$name.frontend.log" \
        CUDNN_TRACE_FILE="$RAW/$name.trace" \
        LD_PRELOAD="$BUILD/libcuda_shim.so $BUILD/libcudnn_trace.so" \
        "$BUILD/cudnn_capture" "$name" >"$RAW/$name.out" 2>&1; then
        echo "captured $name: $(grep -c '^set ' "$RAW/$name.trace") attributes set"
    else
        echo "$name: the capture program failed, see $RAW/$name.out" >&2
        status=1
    fi
done

# A frontend built with dynamic loading dlopens libcudart.so.12/.13 and resolves cudaGetDevice
# in that handle, which never reaches a preloaded library: the shim must be found under the
# runtime's own name instead.
{
    echo "# frontend built with NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING, graph fwd_causal"
    echo "## 1. shim in LD_PRELOAD"
    LD_PRELOAD="$BUILD/libcuda_shim.so" CUDA_SHIM_TRACE=1 \
        "$BUILD/cudnn_capture_dynamic" fwd_causal 2>&1 | grep -v '^serialized' || true
    echo "## 2. shim installed as libcudart.so.13 first on LD_LIBRARY_PATH"
    CUDNN_LOGLEVEL_DBG=3 CUDNN_LOGDEST_DBG="$RAW/fwd_causal.dynamic.cudnn.log" CUDA_SHIM_TRACE=1 \
        LD_LIBRARY_PATH="$BUILD/fake_cudart:$LD_LIBRARY_PATH" \
        "$BUILD/cudnn_capture_dynamic" fwd_causal 2>&1 | grep -v '^serialized' || true
} >"$OUT/dynamic_loading.txt"
echo "dynamic loading check: $OUT/dynamic_loading.txt"

HEADERS=""
for h in cudnn_graph_v9.h cudnn_graph.h; do
    if [ -f "$CUDNN_HOME/include/$h" ]; then
        HEADERS="$CUDNN_HOME/include/$h"
        break
    fi
done
for name in $("$BUILD/cudnn_capture" --list); do
    [ -f "$RAW/$name.trace" ] || continue
    if python3 "$HERE/trim.py" --header "$HEADERS" --raw "$RAW" "$name" >"$OUT/trimmed/$name.txt"; then
        echo "trimmed $name: $(wc -l <"$OUT/trimmed/$name.txt") lines"
    else
        echo "$name: trimming failed" >&2
        status=1
    fi
done
if [ -f "$RAW/fwd_causal.dynamic.cudnn.log" ]; then
    python3 "$HERE/trim.py" --header "$HEADERS" --raw "$RAW" --compare-log "$RAW/fwd_causal.dynamic.cudnn.log" \
        fwd_causal >>"$OUT/dynamic_loading.txt" 2>&1 || status=1
fi
exit $status
