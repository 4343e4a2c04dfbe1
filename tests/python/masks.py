"""Custom range tables through dcp.core (standard library only, so it also runs with an
ASan-built libdcp preloaded into python: make test-asan). Short, long and empty tables:
dcp.core refuses them by name before C sees them; a Mask built by hand with the wrong
num_rows (what a caller of the C API could pass) is refused by libdcp by name, and the
tables are allocated exactly, so a read past them is a sanitizer error.

    python3 tests/python/masks.py [LIBDCP]
"""
import ctypes as C
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "plugin", "python"))
import dcp  # noqa: E402
from dcp import core  # noqa: E402

L = 3000


def expect(exc, text, fn):
    try:
        fn()
    except exc as e:
        if text not in str(e):
            raise AssertionError("%r does not say %r" % (str(e), text))
        return str(e)
    raise AssertionError("no %s (%s)" % (exc.__name__, text))


def table(rows):
    return [(0, min(i + 1, L), 0, 0) for i in range(rows)]


def main():
    lib = dcp.load(sys.argv[1] if len(sys.argv) > 1 else None)
    cluster = lib.cluster("1x2")
    shape = core.Shape(2, 1, 8, core.DTYPE_FP32, 0.0)
    seen = []
    for rows in (L - 1, L + 1, 0):  # through the Python layer
        seen.append(expect(ValueError, "custom ranges have %d rows" % rows, lambda: lib.plan(
            core.BatchArgs(lib, [10, L], ["causal", dcp.CustomMask(table(rows))]), shape,
            None, cluster)))
    seen.append(expect(TypeError, "3.5 is not an integer",
                       lambda: core.BatchArgs(lib, [10, 3.5], "causal")))
    seen.append(expect(TypeError, "ranges[1] = 2.0", lambda: dcp.CustomMask([(0, 2.0, 0, 0)])))
    for rows in (L - 1, L + 1, 0):  # past it, as a C caller could: libdcp names the field
        buf = (C.c_int32 * max(4 * rows, 1))(*[x for r in table(rows) for x in r])
        m = core.Mask(kind=core.MASK_CUSTOM, ranges=C.cast(buf, C.POINTER(C.c_int32)),
                      num_rows=rows)
        lengths = (C.c_int32 * 2)(10, L)
        masks = (core.Mask * 2)(core.Mask(kind=core.MASK_CAUSAL), m)
        h = C.c_void_p()
        st = lib.lib.dcp_plan_create(C.byref(core.Batch(2, lengths, masks)), C.byref(shape),
                                     None, cluster.handle, C.byref(h))
        seen.append(expect(dcp.DcpError, "batch.masks[1].num_rows = %d" % rows,
                           lambda: lib.check(st, "plan")))
    for text in seen:
        print("  refused: %s" % text)
    print("masks through dcp.core: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
