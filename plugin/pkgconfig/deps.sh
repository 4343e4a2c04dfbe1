#!/bin/sh
# What `make run` (run) and `make test` (test) need, probed the way the build will use it: each
# library's header compiles and the library links with the Makefile's flags (a site module's
# *_HOME included), each tool of the tests is on PATH. Nothing is installed when everything is
# found. Otherwise the missing ones are named; where apt-get exists their Debian packages are
# installed (sudo when not root), and elsewhere a missing library stops the build while a
# missing test tool only leaves its suite to say it skipped.
#
#   CC=... DEP_FLAGS="..." MPI_CFLAGS=... MPI_LIBS=... DEB_PKGS="..." deps.sh run|test
set -u
want=${1:?deps.sh run|test}
cc=${CC:-cc}
missing= packages= fatal=0

# note WHAT PACKAGE FATAL: WHAT is missing, PACKAGE (one of $DEB_PKGS) brings it
note() {
    missing="$missing
  $1 (Debian: $2)"
    case " $DEB_PKGS " in *" $2 "*) ;; *) echo "deps.sh: package $2 is not in DEB_PKGS" >&2; exit 2 ;; esac
    packages="$packages $2"
    [ "$3" = 1 ] && fatal=1
    return 0
}

# lib WHAT HEADER "FLAGS" PACKAGE FATAL
lib() {
    printf '#include <%s>\nint main(void) { return 0; }\n' "$2" |
        $cc -x c - -o /dev/null $3 >/dev/null 2>&1 || note "$1: <$2> with $3" "$4" "$5"
}

# tool COMMAND PACKAGE
tool() {
    command -v "$1" >/dev/null 2>&1 || PATH=$PATH:/usr/sbin:/sbin command -v "$1" >/dev/null 2>&1 ||
        note "command $1" "$2" 0
}

flags=${DEP_FLAGS:-}
lib hwloc hwloc.h "$flags -lhwloc" libhwloc-dev 1
lib METIS metis.h "$flags -lmetis" libmetis-dev 1
lib UCX ucp/api/ucp.h "$flags -lucp -luct -lucs" libucx-dev 1
lib MPI mpi.h "${MPI_CFLAGS:-} ${MPI_LIBS:-}" libopenmpi-dev 1
tool pkg-config pkg-config
if [ "$want" = test ]; then
    lib CUnit CUnit/CUnit.h "-lcunit" libcunit1-dev 1
    pkg-config --exists libudev 2>/dev/null || note "libudev.pc (hwloc's --static flags)" libudev-dev 0
    tool mpirun openmpi-bin
    tool ucx_perftest ucx-utils
    tool lstopo-no-graphics hwloc
    tool ps procps
    tool ip iproute2
    tool tc iproute2
    tool unshare util-linux
    tool slurmd slurmd
    tool slurmctld slurmctld
    tool srun slurm-client
    tool munged munge
    tool mpicc.mpich libmpich-dev
    tool mpirun.mpich mpich
    tool patchelf patchelf
    # (the suites try python3 on PATH, then the system's)
    py() { for p in python3 /usr/bin/python3; do "$p" -c "$1" >/dev/null 2>&1 && return 0; done; return 1; }
    tool python3 python3-torch
    py 'import torch' || note "python3 module torch" python3-torch 0
    py 'import ensurepip' || note "python3 venv (ensurepip)" python3-venv 0
fi
[ -z "$missing" ] && exit 0

echo "deps: missing:$missing"
if command -v apt-get >/dev/null 2>&1 && [ -z "${DEPS_INSTALLED:-}" ]; then
    sudo=
    [ "$(id -u)" = 0 ] || sudo=sudo
    packages=$(echo $packages | tr ' ' '\n' | sort -u | tr '\n' ' ')
    echo "deps: installing $packages"
    $sudo apt-get update -qq &&
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $packages ||
        { echo "deps: apt-get failed" >&2; exit 1; }
    DEPS_INSTALLED=1 exec sh "$0" "$want" # what is still missing stops here
fi
if [ $fatal = 1 ]; then
    echo "deps: install the libraries above (or load their modules and name their prefixes:" \
        "UCX_HOME, METIS_HOME, HWLOC_HOME, MPI_HOME or MPICC;" \
        "plugin/README.md \"Building on a cluster's modules\")" >&2
    exit 1
fi
echo "deps: the suites that need the commands above will say they were skipped"
exit 0
