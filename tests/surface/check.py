"""The tools and the Python layer on libdcp's public surface.

Tool code - the mains (plugin/cli/dcp_*.c), the tools' helpers (plugin/cli/helpers/) and the MPI
launch (plugin/cli/launch/) - includes only include/dcp.h, system headers (<...>), the tools'
own headers (helpers/, launch/), the support library's (plugin/cli/support/: libdcpt, the
tools' one door to the library's insides), and the internal headers of INTERNAL below, each
only in the files it names, with the reason it cannot be avoided. An entry no named file uses
any more fails too, so the list stays as short as the code lets it be.

The Python layer (plugin/python/) reaches libdcp only through functions declared in
include/dcp.h: every dcp_* name it binds (a string, e.g. a ctypes prototype's key, or an
attribute, e.g. lib.dcp_plan_create) is a DCP_API function there; and it reads no bytes the
library can answer for (no `struct` unpacking: a plan's shape, stats and layout have calls).

    python3 tests/surface/check.py [--self-test]

Exits 1 naming every violation (file:line); --self-test first proves on a scratch tree that
each rule fails when broken.
"""
import ast
import fnmatch
import glob
import os
import re
import shutil
import sys
import tempfile

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

TOOL_CODE = ["plugin/cli/dcp_*.c", "plugin/cli/helpers/*.[ch]", "plugin/cli/launch/*.[ch]"]
OWN_HEADERS = ["include/dcp.h", "plugin/cli/support/*.h", "plugin/cli/helpers/*.h",
               "plugin/cli/launch/*.h"]
PYTHON_CODE = ["plugin/python/**/*.py"]

# header: (the tool files that may include it, why it cannot be avoided)
INTERNAL = {
    "include/base/error.h": (
        ["plugin/cli/dcp_*.c", "plugin/cli/helpers/*.c", "plugin/cli/launch/*.c"],
        "failures recorded as the library records them (dcp_set_error, DCP_CHECK, the "
        "thread-local last error every tool prints), checked allocation, the clock"),
    "include/base/out_file.h": (
        ["plugin/cli/dcp_calibrate.c", "plugin/cli/dcp_kernel_bench.c"],
        "output files written whole or not at all, as the library writes its own"),
    "include/base/half.h": (
        ["plugin/cli/dcp_kernel_bench.c"],
        "bf16/fp16 inputs for the kernels it times, rounded as the library rounds them"),
    "include/base/env.h": (
        ["plugin/cli/dcp_topo.c", "plugin/cli/helpers/settings_report.c",
         "plugin/cli/launch/mpi_launch.c"],
        "the table of settings: dcp-topo --env prints every row with the value in force, and "
        "the tools read their own rows (DCP_FAULT, DCP_TIMEOUT_S) through its parser"),
    "include/base/timeout.h": (
        ["plugin/cli/launch/mpi_launch.c"],
        "the watchdog around MPI_Init/MPI_Finalize takes its deadline as the library does"),
    "kernels/kernel.h": (
        ["plugin/cli/dcp_kernel_bench.c"],
        "dcp-kernel-bench times the kernel table itself, below any public call"),
    "kernels/device.h": (
        ["plugin/cli/dcp_kernel_bench.c"],
        "... on the device table's memory, streams and timers"),
    "kernels/cuda/device.h": (
        ["plugin/cli/dcp_kernel_bench.c"],
        "... and reports the CUDA kernels' build facts (GPUs seen, warp rows)"),
    "kernels/segment.h": (
        ["plugin/cli/dcp_kernel_bench.c", "plugin/cli/helpers/cudnn_probe.c"],
        "... and the attention engine's segment programs (--engine cudnn|twin, --probe)"),
    "kernels/cudnn.h": (
        ["plugin/cli/dcp_kernel_bench.c", "plugin/cli/helpers/cudnn_probe.h"],
        "... and cuDNN's graphs (--engine cudnn, --probe)"),
    "plugin/attn_engine.h": (
        ["plugin/cli/dcp_kernel_bench.c"],
        "... whose programs it places as a context does (dcp_attn_upload)"),
    "topo/kernel_table.h": (
        ["plugin/cli/dcp_kernel_bench.c", "plugin/cli/dcp_calibrate.c"],
        "they write the kernel table the library reads, with its one writer"),
    "topo/node.h": (
        ["plugin/cli/dcp_topo.c", "plugin/cli/helpers/pinning.h"],
        "dcp-topo prints topo's node model (GPUs, NICs, PCI paths) and the pinning it implies"),
    "topo/gdr.h": (
        ["plugin/cli/dcp_topo.c"],
        "... GPUDirect RDMA's prerequisites on the live node"),
    "topo/node_figures.h": (
        ["plugin/cli/dcp_topo.c"],
        "... the cost-model figures a cluster of such nodes gets"),
    "transport/select.h": (
        ["plugin/cli/dcp_topo.c"],
        "... the engine kinds and link classes of the choice it shows"),
    "plugin/job.h": (
        ["plugin/cli/dcp_topo.c"],
        "... made by the job's own choice (dcp_job_engines_for_node)"),
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
DCP_API_FN = re.compile(r"\bDCP_API\b[^;{]*?\b(dcp_\w+)\s*\(", re.S)
DCP_NAME = re.compile(r"^dcp_\w+$")


def expand(root, patterns):
    out = set()
    for p in patterns:
        out.update(os.path.relpath(f, root)
                   for f in glob.glob(os.path.join(root, p), recursive=True))
    return sorted(out)


def matches(path, patterns):
    return any(fnmatch.fnmatch(path, p) for p in patterns)


def check_tools(root, internal):
    """Violations of the include rule, and entries of `internal` no file needs."""
    bad, used = [], set()
    own = set(expand(root, OWN_HEADERS))
    for path in expand(root, TOOL_CODE):
        with open(os.path.join(root, path)) as f:
            for no, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                inc = m.group(1)
                if inc in own:
                    continue
                entry = internal.get(inc)
                if entry and matches(path, entry[0]):
                    used.add((inc, path))
                    continue
                why = ("allowed only in " + ", ".join(entry[0])) if entry else \
                    "not include/dcp.h, a tool or support header, nor in the named list"
                bad.append("%s:%d: includes \"%s\": %s (tests/surface/check.py)"
                           % (path, no, inc, why))
    for inc, (files, _) in sorted(internal.items()):
        for pattern in files:
            if not any(i == inc and fnmatch.fnmatch(p, pattern) for i, p in used):
                bad.append("tests/surface/check.py: \"%s\" is allowed in %s, which no longer "
                           "includes it: drop it from the list" % (inc, pattern))
    return bad


def public_functions(root):
    with open(os.path.join(root, "include/dcp.h")) as f:
        return set(DCP_API_FN.findall(f.read()))


def check_python(root):
    """dcp_* names the Python layer binds that dcp.h does not declare; struct unpacking."""
    bad = []
    public = public_functions(root)
    for path in expand(root, PYTHON_CODE):
        with open(os.path.join(root, path)) as f:
            tree = ast.parse(f.read(), path)
        for node in ast.walk(tree):
            name = None
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                name = node.value if DCP_NAME.match(node.value) else None
            elif isinstance(node, ast.Attribute) and DCP_NAME.match(node.attr):
                name = node.attr
            if name and name not in public:
                bad.append("%s:%d: binds %s, which include/dcp.h does not declare"
                           % (path, node.lineno, name))
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                mods = [a.name for a in node.names] if isinstance(node, ast.Import) \
                    else [node.module or ""]
                if "struct" in mods:
                    bad.append("%s:%d: imports struct: bytes the library can answer for are "
                               "read through its calls (dcp_plan_get_shape, _get_stats, "
                               "_local_layout)" % (path, node.lineno))
    return bad


def check(root, internal):
    return check_tools(root, internal) + check_python(root)


def self_test():
    """Each rule, broken on a scratch tree, must fail; the tree unbroken must pass."""
    def tree(files):
        d = tempfile.mkdtemp(prefix="dcp-surface-")
        for path, text in files.items():
            full = os.path.join(d, path)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "w") as f:
                f.write(text)
        return d

    header = "DCP_API dcp_status_t dcp_plan_create(int a,\n    int b);\nDCP_API void dcp_x(void);\n"
    good = {
        "include/dcp.h": header,
        "plugin/cli/dcp_t.c": '#include "include/dcp.h"\n#include "plugin/cli/support/s.h"\n'
                              '#include "kernels/k.h"\n#include <stdio.h>\n',
        "plugin/cli/support/s.h": "",
        "plugin/cli/helpers/h.c": '#include "plugin/cli/helpers/h.h"\n',
        "plugin/cli/helpers/h.h": "",
        "plugin/python/dcp/core.py": 'P = {"dcp_plan_create": 1}\n\ndef f(lib):\n'
                                     '    return lib.dcp_x()\n',
    }
    allowed = {"kernels/k.h": (["plugin/cli/dcp_t.c"], "it times them")}
    cases = [
        ("unbroken", {}, allowed, 0),
        ("an internal header in a main",
         {"plugin/cli/dcp_t.c": good["plugin/cli/dcp_t.c"] + '#include "plugin/context.h"\n'},
         allowed, 1),
        ("an allowed header outside its files",
         {"plugin/cli/helpers/h.c": '#include "kernels/k.h"\n'}, allowed, 1),
        ("an entry no file uses", {}, dict(allowed, **{"topo/t.h": (["plugin/cli/*.c"], "x")}), 1),
        ("a binding dcp.h lacks",
         {"plugin/python/dcp/core.py": "def f(lib):\n    return lib.dcp_secret()\n"}, allowed, 1),
        ("a prototype key dcp.h lacks",
         {"plugin/python/dcp/core.py": 'P = {"dcp_plan_peek": 1}\n'}, allowed, 1),
        ("struct unpacking", {"plugin/python/dcp/core.py": "import struct\n"}, allowed, 1),
    ]
    failed = 0
    for what, change, internal, want in cases:
        d = tree(dict(good, **change))
        got = check(d, internal)
        shutil.rmtree(d)
        if (len(got) > 0) != (want > 0):
            print("tests/surface self-test: %s: %s" % (what, got or "no violation found"))
            failed += 1
    return failed


def main():
    if "--self-test" in sys.argv[1:]:
        if self_test():
            sys.exit(1)
        print("tests/surface: self-test passed (each rule fails when broken)")
    bad = check(REPO, INTERNAL)
    for b in bad:
        print(b)
    if bad:
        print("tests/surface: %d violation(s)" % len(bad))
        sys.exit(1)
    print("tests/surface: tools on include/dcp.h, libdcpt and %d named internal headers; "
          "the Python layer on include/dcp.h" % len(INTERNAL))


if __name__ == "__main__":
    main()
