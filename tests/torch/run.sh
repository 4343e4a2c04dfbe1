#!/bin/bash
# The PyTorch suites: dcp.torch.attention_inproc against plain PyTorch attention (every mask,
# forward and gradients, fp32 and bf16, the Python surface), a Context on one gloo process
# (the communicator it may lend, synchronize, its transport report), ranks that disagree on 4
# gloo processes, then the training example (tests/torch/train.py) on 4 processes against a
# single-process run, and a model of global and window layers on one plan of two layer
# kinds (test_layers.py). Skipped, and said so, only where no python3 can import torch. (The
# README's own torchrun commands run in tests/readme/check.py.)
#
#   tests/torch/run.sh [LIBDCP]      (default build/lib/libdcp.so; PYTHON=... to choose)
set -u
here=$(cd "$(dirname "$0")" && pwd)
lib=$(realpath "${1:-$here/../../build/lib/libdcp.so}")
py=
# Debian's python3-torch belongs to /usr/bin/python3, which another python3 on PATH may hide
for c in ${PYTHON:-} python3 /usr/bin/python3; do
    if command -v "$c" >/dev/null && "$c" -c 'import torch' 2>/dev/null; then
        py=$c
        break
    fi
done
if [ -z "$py" ]; then
    echo "tests/torch: SKIPPED: no python3 here imports torch (make deps installs python3-torch)"
    exit 0
fi
export DCP_LIB="$lib" PYTHONPATH="$here/../../plugin/python${PYTHONPATH:+:$PYTHONPATH}"
"$py" -c 'import sys, torch; print("tests/torch: Python %s, PyTorch %s" %
          (sys.version.split()[0], torch.__version__))'
failures=0
for t in test_attention.py test_context.py test_disagree.py train.py test_layers.py; do
    echo "tests/torch/$t"
    timeout 300 "$py" "$here/$t" || { echo "FAIL: tests/torch/$t"; failures=$((failures + 1)); }
done
exit $((failures > 0))
