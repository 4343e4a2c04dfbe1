#!/bin/bash
# Packaging as a user meets it: `make install` into a scratch prefix, the README's example
# built through pkg-config (shared, and static through `pkg-config --static`) and run, the
# MPI example compiled through dcp_mpi.pc with a plain C compiler, then `make uninstall`
# leaving nothing behind. Usage: tests/pkg/check.sh BUILD_DIR
set -euo pipefail
build=${1:-build}
cc=${CC:-cc}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
prefix=$stage/prefix
fail() { echo "pkg: FAIL: $*" >&2; exit 1; }

make -s BUILD="$build" PREFIX="$prefix" install >/dev/null
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
pc() { pkg-config "$@"; }

[ "$(pc --modversion dcp)" = "$(sed -n 's/^#define DCP_VERSION_\(MAJOR\|MINOR\|PATCH\) //p' include/dcp.h | paste -sd.)" ] ||
    fail "dcp.pc version $(pc --modversion dcp) differs from dcp.h"
soname=$(readelf -d "$prefix/lib/libdcp.so" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ -n "$soname" ] && [ -e "$prefix/lib/$soname" ] || fail "libdcp.so has no SONAME or $soname is missing"
pc --print-requires-private dcp | grep -q '^hwloc' || fail "dcp.pc does not require hwloc privately"
pc --print-requires-private dcp | grep -q '^ucx' || fail "dcp.pc does not require ucx privately"

# shared: the program records the SONAME and runs from the installed prefix
$cc -std=c11 -o "$stage/shared" tests/e2e/example.c $(pc --cflags --libs dcp) -lm
readelf -d "$stage/shared" | grep -q "NEEDED.*\[$soname\]" || fail "shared example does not need $soname"
LD_LIBRARY_PATH=$prefix/lib "$stage/shared" >"$stage/shared.out" || fail "shared example failed"

# static: libdcp.a with the flags of `pkg-config --static`
$cc -std=c11 -o "$stage/static" tests/e2e/example.c $(pc --cflags dcp) \
    $(pc --static --libs dcp | sed 's/-ldcp /-l:libdcp.a /') -lm
! readelf -d "$stage/static" | grep -q 'NEEDED.*libdcp' || fail "static example still needs libdcp.so"
env -u LD_LIBRARY_PATH "$stage/static" >"$stage/static.out" || fail "static example failed"
cmp -s "$stage/shared.out" "$stage/static.out" || fail "shared and static examples printed different results"

# MPI: dcp_mpi.pc carries MPI's flags, so a plain compiler builds the MPI example
$cc -std=c11 -o "$stage/mpi" tests/e2e/example_mpi.c $(pc --cflags --libs dcp_mpi) ||
    fail "example_mpi does not build through dcp_mpi.pc"

make -s BUILD="$build" PREFIX="$prefix" uninstall >/dev/null
left=$(find "$prefix" -type f -o -type l)
[ -z "$left" ] || fail "make uninstall left: $left"
echo "pkg: install, pkg-config (shared, --static, dcp_mpi), SONAME $soname, uninstall: ok"
