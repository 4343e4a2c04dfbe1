#!/bin/bash
# A build on site modules: the dependencies' headers and libraries copied into a scratch prefix
# laid out as an HPC centre's modules are (one folder per package, include/ and lib/ each),
# MPICH among them, then dcp built with UCX_HOME, METIS_HOME, HWLOC_HOME, MPI_HOME (and
# NCCL_HOME where nvcc builds the NCCL engine) pointing there. The binaries show that they
# resolve into the prefix: their RUNPATH names its folders, ldd finds every dependency there,
# the compiler's dependency files show the prefix's headers were the ones compiled. Then the
# MPICH-built dcp-attn-test runs a checked job under MPICH's own launcher with nothing on
# LD_LIBRARY_PATH.
#
#   tests/pkg/prefix.sh BUILD_DIR [OUT_DIR]
# OUT_DIR (default BUILD_DIR/site-check) keeps the build (OUT_DIR/build/bin: tests/cluster/srun.sh
# runs its dcp-attn-test under srun --mpi=pmi2). Skipped, saying why, without MPICH.
set -u
build=$(realpath "${1:-build}")
out=${2:-$build/site-check}
repo=$(cd "$(dirname "$0")/../.." && pwd)
fail() {
    echo "prefix: FAIL: $*"
    exit 1
}
if ! command -v mpirun.mpich >/dev/null || [ ! -f /usr/include/x86_64-linux-gnu/mpich/mpi.h ]; then
    echo "prefix: SKIPPED: no MPICH (mpich, libmpich-dev)"
    exit 0
fi
command -v patchelf >/dev/null || { echo "prefix: SKIPPED: no patchelf"; exit 0; }
start=$SECONDS
unset MAKEFLAGS MFLAGS MAKELEVEL # (under make test: the prefix build takes only its own flags)
rm -rf "$out"
site=$out/site
mkdir -p "$site" || fail "cannot make $site"
sys=/usr/lib/x86_64-linux-gnu

# copy_lib NAME DEST [RUNPATH]: libNAME's file, its SONAME link and libNAME.so, as a module
# installs them: with the RUNPATH a libtool install into a prefix gives it (its own folder,
# and the folders of the modules it was built against), so that its own dependencies resolve
# there too
copy_lib() {
    local real soname
    real=$(readlink -f "$sys/lib$1.so") || return 1
    soname=$(readelf -d "$real" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
    mkdir -p "$2" && cp "$real" "$2/" && ln -sf "$(basename "$real")" "$2/$soname" &&
        ln -sf "$soname" "$2/lib$1.so" &&
        patchelf --set-rpath "${3:-$2}" "$2/$(basename "$real")"
}
mkdir -p "$site"/{hwloc,metis,ucx,mpich}/include
cp -r /usr/include/hwloc.h /usr/include/hwloc "$site/hwloc/include/" &&
    copy_lib hwloc "$site/hwloc/lib" || fail "copying hwloc"
cp /usr/include/metis.h "$site/metis/include/" && copy_lib metis "$site/metis/lib" ||
    fail "copying METIS"
cp -r /usr/include/ucp /usr/include/uct /usr/include/ucs /usr/include/ucm "$site/ucx/include/" &&
    for l in ucp uct ucs ucm; do copy_lib $l "$site/ucx/lib" || exit 1; done &&
    cp -r "$sys/ucx" "$site/ucx/lib/" || fail "copying UCX" # (its transports, beside libuct)
cp -r /usr/include/x86_64-linux-gnu/mpich/. "$site/mpich/include/" &&
    copy_lib mpich "$site/mpich/lib" "$site/mpich/lib:$site/ucx/lib:$site/hwloc/lib" ||
    fail "copying MPICH"
homes=(UCX_HOME="$site/ucx" METIS_HOME="$site/metis" HWLOC_HOME="$site/hwloc"
       MPI_HOME="$site/mpich" MPI_LIBNAME=mpich)

# the C build (no nvcc: the point is where things come from, not the kernels)
nb=$out/build
make -s -C "$repo" -j"${JOBS:-$(nproc)}" BUILD="$nb" NVCC= OPT="-O0 -g0" "${homes[@]}" lib \
    "$nb/bin/dcp-attn-test" "$nb/bin/dcp-example" >"$out/make.log" 2>&1 ||
    { tail -20 "$out/make.log"; fail "the build on the prefix failed (log $out/make.log)"; }

# RUNPATH: the library has the three, the MPI tool MPICH's as well
runpath() { readelf -d "$1" | sed -n 's/.*Library runpath: \[\(.*\)\]/\1/p'; }
lib=$(readlink -f "$nb/lib/libdcp.so")
for f in "$lib" "$nb/bin/dcp-attn-test"; do
    rp=$(runpath "$f")
    for d in ucx metis hwloc; do
        [[ ":$rp:" == *":$site/$d/lib:"* ]] || fail "$(basename "$f"): RUNPATH '$rp' lacks $site/$d/lib"
    done
done
[[ ":$(runpath "$nb/bin/dcp-attn-test"):" == *":$site/mpich/lib:"* ]] ||
    fail "dcp-attn-test: RUNPATH lacks $site/mpich/lib"
echo "prefix: RUNPATH of dcp-attn-test: $(runpath "$nb/bin/dcp-attn-test")"

# ldd: every dependency found in the prefix, none on the system (libdcp in the build)
check_ldd() { # FILE SONAME...
    local f=$1 line where
    shift
    ldd "$f" >"$out/ldd" 2>&1 || fail "ldd $f: $(cat "$out/ldd")"
    for so in "$@"; do
        line=$(grep -m1 "^\s*$so " "$out/ldd")
        where=$site/
        [[ $so == libdcp.* ]] && where=$nb/lib/
        [[ "$line" == *"=> $where"* ]] || fail "$(basename "$f"): $so does not resolve into $where: ${line:-absent}"
        echo "prefix: $(basename "$f"): $(echo "$line" | sed 's/ (0x[0-9a-f]*)//; s/^\s*//')"
    done
}
check_ldd "$lib" libucp.so.0 libuct.so.0 libucs.so.0 libucm.so.0 libhwloc.so.15 libmetis.so.5
check_ldd "$nb/bin/dcp-attn-test" libmpich.so.12 libucp.so.0 libuct.so.0 libucs.so.0 \
    libhwloc.so.15 libmetis.so.5
check_ldd "$nb/bin/dcp-example" libdcp.so.0.2 libucp.so.0 libuct.so.0 libhwloc.so.15

# the headers compiled were the prefix's: each file's compile line, as make runs it, again with
# -H (the headers it reads; -isystem keeps them out of -MMD's dependency files)
headers_of() { # FILE.c BUILD [MAKE ARGS...]: the headers its compile in BUILD reads
    local src=$1 b=$2 cmd
    shift 2
    cmd=$(make -s -C "$repo" -n -B BUILD="$b" "$@" "$b/obj/${src%.c}.o" 2>/dev/null |
        grep -- "-c $src -o")
    [ -n "$cmd" ] || return 1
    cmd=$(sed -e 's/ -MMD -MP / /' -e 's/ -o [^ ]*$/ -fsyntax-only -H/' <<<"$cmd")
    (cd "$repo" && eval "$cmd") 2>&1 >/dev/null | sed -n 's/^\.* //p'
}
for pair in topo/node.c:hwloc/include/hwloc.h transport/ucx.c:ucx/include/ucp/api/ucp.h \
    partition/place/metis_graph.c:metis/include/metis.h \
    plugin/mpi/bootstrap_mpi.c:mpich/include/mpi.h; do
    src=${pair%%:*}
    headers_of "$src" "$nb" NVCC= OPT="-O0 -g0" "${homes[@]}" | grep -qx "$site/${pair#*:}" ||
        fail "$src was not compiled against $site/${pair#*:}"
done
echo "prefix: hwloc.h, ucp.h, metis.h and mpi.h compiled from $site"

# NCCL_HOME: where nvcc builds the NCCL engine, its header comes from the prefix and its
# folder is in the RUNPATH dlopen searches (the library itself is loaded at run time)
nvcc=$(command -v nvcc || { [ -x /usr/local/cuda/bin/nvcc ] && echo /usr/local/cuda/bin/nvcc; })
if [ -n "$nvcc" ] && [ -f "$(dirname "$nvcc")/../include/nccl.h" ]; then
    mkdir -p "$site/nccl/include" "$site/nccl/lib"
    cp "$(dirname "$nvcc")/../include/nccl.h" "$site/nccl/include/"
    headers_of transport/nccl.c "$out/build-nccl" NVCC="$nvcc" OPT="-O0 -g0" \
        NCCL_HOME="$site/nccl" "${homes[@]}" | grep -qx "$site/nccl/include/nccl.h" ||
        fail "transport/nccl.c is not compiled against the prefix's nccl.h"
    rp=$(make -s -C "$repo" -p NCCL_HOME="$site/nccl" -n lib 2>/dev/null | sed -n 's/^SITE_RPATH := //p')
    [[ "$rp" == *"-rpath,$site/nccl/lib"* ]] || fail "NCCL_HOME does not reach the RUNPATH: $rp"
    echo "prefix: NCCL_HOME: nccl.h from $site/nccl/include, $site/nccl/lib in the RUNPATH"
else
    echo "prefix: NCCL_HOME not checked (no nvcc with NCCL's header)"
fi

# MPICH runs it: 2 processes under Hydra, a checked job, nothing on LD_LIBRARY_PATH
if ! env -u LD_LIBRARY_PATH timeout 120 mpirun.mpich -np 2 env UCX_TLS=sm,tcp,self \
    "$nb/bin/dcp-attn-test" --tokens 1024 --block 128 --mask causal --strategy lpt --warmup 0 \
    --iters 1 --check >"$out/mpich.out" 2>&1; then
    tail -5 "$out/mpich.out"
    fail "the MPICH build's dcp-attn-test failed under mpirun.mpich"
fi
grep -q "2 ranks (1x2) as processes" "$out/mpich.out" ||
    fail "mpirun.mpich -np 2: not one job of 2 processes: $(head -3 "$out/mpich.out")"
grep -q PASS "$out/mpich.out" || fail "mpirun.mpich: the check did not pass"
echo "prefix: MPICH (mpirun.mpich -np 2) ran the prefix build's dcp-attn-test: PASS" \
    "($((SECONDS - start)) s in all)"
