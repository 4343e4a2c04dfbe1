#!/usr/bin/env bash
# Makes one self-contained folder to copy to a GPU machine that has the NVIDIA driver,
# PyTorch (with its cuDNN and NCCL wheels) and no package registry (`make gpu-bundle DIR=..`):
#
#   DIR/gpu_check.sh     the GPU report (tests/perf/gpu_check.sh; DIR/gpu_check.sh --help)
#   DIR/bin/             the tools and dcp-tests, debug info stripped
#   DIR/lib/             libdcp.so and every shared library they load that is not part of
#                        the C runtime (hwloc, METIS, UCX, CUnit, Open MPI's libmpi, libnuma,
#                        libevent, ...), found with ldd on this machine, so exactly the
#                        versions the build linked; lib/ucx and lib/hwloc hold the plugins
#                        UCX and hwloc load by name (and what those load)
#   DIR/python/dcp       the Python package; DIR/tests/{torch,perf} the Python checks;
#                        DIR/tests/data/cudnn_sdpa_graphs, what the cudnn suite compares with
#   DIR/MANIFEST         the commit, the build flags, every file with its size
#
# Left out on purpose: the C runtime (libc, libm, libstdc++, libgcc_s, the loader), which
# every Linux has (this build machine's glibc is 2.36, older than the GPU image's), the
# CUDA runtime (linked statically), the driver, cuDNN and NCCL (loaded at run time from the
# GPU machine's PyTorch wheels; gpu_check.sh finds them). Fails when DIR would exceed
# 64 MiB, what one device call carries.
#
# The MANIFEST's "cuda:" line says whether libdcp holds GPU code (a .nv_fatbin section). A
# build made with NVCC= (or where no nvcc was found) holds none, and `make` does not rebuild
# its objects when nvcc is named later: on a GPU such a bundle finds no GPU suite. With
# $REQUIRE_CUDA set (make gpu-bundle, where nvcc exists) that fails here, by name.
#
# Usage: gpu_bundle.sh BUILD DIR   (BUILD: a finished build folder, e.g. build)
set -euo pipefail
build=${1:?usage: gpu_bundle.sh BUILD DIR}
dir=${2:?usage: gpu_bundle.sh BUILD DIR}
repo=$(cd "$(dirname "$0")/../.." && pwd)
limit=$((64 * 1024 * 1024))
case "$dir" in /|"$repo"|"$repo"/) echo "gpu_bundle: refusing to replace $dir" >&2; exit 1 ;; esac
rm -rf "$dir"
mkdir -p "$dir"/{bin,lib/ucx,lib/hwloc,python,tests/torch,tests/perf,tests/data}
dir=$(cd "$dir" && pwd)

for t in dcp-tests dcp-attn-test dcp-kernel-bench dcp-plan dcp-topo dcp-transport-bench; do
    objcopy --strip-debug "$build/bin/$t" "$dir/bin/$t"
done
so=$(basename "$(readlink -f "$build/lib/libdcp.so")")
sections=$(objdump -h "$build/lib/$so") # (not piped into grep -q: pipefail and SIGPIPE)
if [[ "$sections" == *" .nv_fatbin "* ]]; then
    cuda="yes (libdcp holds GPU code)"
else
    cuda="none: $build was built without nvcc (NVCC= or none found); make gpu-bundle BUILD=build-gpu"
    if [ -n "${REQUIRE_CUDA:-}" ]; then
        echo "gpu_bundle: $build/lib/$so holds no GPU code: it was built without nvcc (NVCC= or" >&2
        echo "  none found), and make keeps those objects; make gpu-bundle BUILD=build-gpu" >&2
        echo "  (a fresh folder) or make clean first" >&2
        exit 1
    fi
fi
soname=$(objdump -p "$build/lib/$so" | awk '$1 == "SONAME" {print $2}')
objcopy --strip-debug "$build/lib/$so" "$dir/lib/$so"
[ -n "$soname" ] && [ "$soname" != "$so" ] && ln -sf "$so" "$dir/lib/$soname"
ln -sf "$so" "$dir/lib/libdcp.so"

# the C runtime every Linux has; everything else the binaries load comes along
is_system() {
    case "$1" in
    linux-vdso.so.* | ld-linux-x86-64.so.* | libc.so.* | libm.so.* | libdl.so.* | \
        libpthread.so.* | librt.so.* | libresolv.so.* | libstdc++.so.* | libgcc_s.so.*) return 0 ;;
    esac
    return 1
}
# plugins loaded by name at run time: UCX's transports, hwloc's PCI discovery (how GPUs and
# NICs are found); not hwloc's X11/OpenCL/libxml ones, which need a desktop stack
ucs=$(ldd "$dir/lib/$so" | awk '$1 ~ /^libucs\.so/ {print $3}')
if [ -n "$ucs" ] && [ -d "$(dirname "$ucs")/ucx" ]; then
    for f in "$(dirname "$ucs")"/ucx/*.so.0; do cp -L "$f" "$dir/lib/ucx/"; done
fi
hwloc=$(ldd "$dir/lib/$so" | awk '$1 ~ /^libhwloc\.so/ {print $3}')
if [ -n "$hwloc" ] && [ -f "$(dirname "$hwloc")/hwloc/hwloc_pci.so" ]; then
    cp -L "$(dirname "$hwloc")/hwloc/hwloc_pci.so" "$dir/lib/hwloc/"
fi
# the closure of their shared libraries, as this machine's loader resolves them
while :; do
    added=0
    for f in "$dir"/bin/* "$dir"/lib/*.so* "$dir"/lib/ucx/*.so* "$dir"/lib/hwloc/*.so; do
        [ -f "$f" ] || continue
        while read -r name path; do
            is_system "$name" && continue
            [ -e "$dir/lib/$name" ] && continue
            if [ -z "$path" ] || [ ! -f "$path" ]; then
                echo "gpu_bundle: $f needs $name, which this machine cannot resolve" >&2
                exit 1
            fi
            cp -L "$path" "$dir/lib/$name"
            added=1
        done < <(LD_LIBRARY_PATH="$dir/lib" ldd "$f" 2>/dev/null | awk '/=>/ {print $1, $3}')
    done
    [ $added = 0 ] && break
done

cp -r "$repo/plugin/python/dcp" "$dir/python/"
find "$dir/python" -name __pycache__ -prune -exec rm -rf {} +
cp "$repo"/tests/torch/*.py "$repo/tests/torch/run.sh" "$dir/tests/torch/"
cp "$repo"/tests/perf/compare_sdpa.py "$repo"/tests/perf/torch_cuda_check.py "$repo"/tests/perf/sdpa_capture.py \
    "$repo"/tests/perf/gpu_report.py "$dir/tests/perf/"
cp "$repo/tests/perf/gpu_check.sh" "$dir/gpu_check.sh"
cp -r "$repo/tests/data/cudnn_sdpa_graphs" "$dir/tests/data/" # the cudnn suite's captures

{
    echo "dcp GPU bundle"
    echo "commit: $(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)$(
        git -C "$repo" diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
    echo "made: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n), $(ldd --version | head -1)"
    echo "libdcp: $so"
    echo "cuda: $cuda"
    echo "files:"
    (cd "$dir" && find . -type f -printf '%10s %p\n' | sort -k2)
} >"$dir/MANIFEST"
bytes=$(du -sb "$dir" | cut -f1)
echo "gpu-bundle: $dir, $((bytes / 1024)) KiB ($(find "$dir" -type f | wc -l) files)"
if [ "$bytes" -gt "$limit" ]; then
    echo "gpu_bundle: $dir is $bytes bytes, over the 64 MiB one device call carries" >&2
    exit 1
fi
