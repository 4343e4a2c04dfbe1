"""The layers of the code, checked on what the compiler made and what the sources include.

Every library and tool object's calls (nm: the global symbols it leaves undefined that another
object defines) and every source's `#include "..."` lines make one graph of files. It fails on
  - a call or include from a folder to one it may not use (USES below: README.md's map of the
    code's folders, and partition/'s sub-folders in their order),
  - a circle: files that reach each other through calls or includes (within one folder too),
  - MPI outside the code that is built with it (plugin/mpi/, plugin/cli/launch/),
  - a source in a sub-folder of partition/ or plugin/ that USES does not name,
naming the two files and the symbol or header of each edge.

    python3 tests/layers/check.py BUILD OBJ...   (make test-layers: the library and tool objects)
    python3 tests/layers/check.py --self-test    (a small tree with each kind of fault injected)
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

# The folders a folder's files may call or include besides their own (and, through these,
# whatever these may use). Top-level: README.md's "Map of the code"; partition/'s sub-folders:
# their READMEs. Files of partition/ itself (the planner) sit on its sub-folders.
USES = {
    "include": [],
    "topo": ["include"],
    "kernels": ["include"],
    "transport": ["topo"],
    "partition/model": ["topo"],
    "partition/place": ["partition/model"],
    "partition/plan": ["partition/place"],
    "partition/program": ["partition/plan"],
    "partition/sim": ["partition/plan"],
    "partition": ["partition/program", "partition/sim"],
    "plugin": ["partition", "transport", "kernels"],
    "plugin/mpi": ["plugin"],
    # the tools: the support library (the tests' too) on the library, the tools' helpers on
    # it, the MPI launch beside them, the tool mains on top (plugin/cli/README.md)
    "plugin/cli/support": ["plugin"],
    "plugin/cli/helpers": ["plugin/cli/support"],
    "plugin/cli/launch": ["plugin/cli/support", "plugin/mpi"],
    "plugin/cli": ["plugin/cli/helpers", "plugin/cli/launch"],
}
# folders whose sub-folders are layers of their own: a sub-folder USES does not name fails
SPLIT = ("partition", "plugin")
# the only code that sees MPI (the Makefile gives just it MPI's flags)
MPI_OK = re.compile(r"^plugin/mpi/|^plugin/cli/launch/")
MPI_SYM = re.compile(r"^P?MPI_|^ompi_|^MPIR_")
MPI_HDR = re.compile(r"^\s*#\s*include\s*<(mpi\.h|mpi_[^>]*)>")
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
SOURCE_EXT = (".c", ".h", ".cu", ".cuh")


def closure(uses):
    """Every folder each folder may use, transitively."""
    out = {}
    for f in uses:
        seen, todo = set(), list(uses[f])
        while todo:
            g = todo.pop()
            if g not in seen:
                seen.add(g)
                todo.extend(uses[g])
        out[f] = seen
    return out


def layer_of(path, uses):
    """The layer (a key of uses) of a file's folder, or None for an undeclared sub-folder."""
    d = os.path.dirname(path)
    if d in uses:
        return d
    for s in SPLIT:
        if d.startswith(s + "/"):
            return None
    while d and d not in uses:
        d = os.path.dirname(d)
    return d or None


def source_of(root, build, obj):
    """The source an object was compiled from: BUILD/obj/X.o -> X.c or X.cu."""
    rel = os.path.relpath(obj, os.path.join(build, "obj"))[:-2]
    return rel + (".cu" if os.path.exists(os.path.join(root, rel + ".cu")) else ".c")


def call_edges(root, build, objs):
    """(caller source, callee source, symbol) of every call between objects, and the MPI
    symbols each source uses."""
    defs, undef, mpi = {}, {}, []
    if not objs:
        return [], []
    out = subprocess.run(["nm", "-A", "-P"] + objs, capture_output=True, text=True, check=True)
    for line in out.stdout.splitlines():
        head, _, rest = line.partition(": ")
        p = rest.split()
        if len(p) < 2:
            continue
        src = source_of(root, build, head)
        name, kind = p[0], p[1]
        if kind in "Uw":
            undef.setdefault(src, set()).add(name)
            if MPI_SYM.match(name):
                mpi.append((src, name))
        elif kind in "TDBRWVCGS" and kind.isupper():
            defs.setdefault(name, src)
    edges = []
    for src, names in undef.items():
        for n in sorted(names):
            if n in defs and defs[n] != src:
                edges.append((src, defs[n], n))
    return edges, mpi


def include_edges(root, folders):
    """(file, included file, header) of every quoted include that names a file of the tree,
    and the MPI headers each file includes."""
    edges, mpi = [], []
    for top in folders:
        for d, _, files in os.walk(os.path.join(root, top)):
            for f in sorted(files):
                if not f.endswith(SOURCE_EXT):
                    continue
                path = os.path.relpath(os.path.join(d, f), root)
                with open(os.path.join(root, path), errors="replace") as fh:
                    for line in fh:
                        m = INCLUDE.match(line)
                        if m:
                            inc = m.group(1)
                            for cand in (inc, os.path.join(os.path.dirname(path), inc)):
                                if os.path.isfile(os.path.join(root, cand)):
                                    edges.append((path, os.path.normpath(cand), inc))
                                    break
                        elif MPI_HDR.match(line):
                            mpi.append((path, MPI_HDR.match(line).group(1)))
    return edges, mpi


def circles(edges):
    """Strongly connected components of more than one file (Tarjan, iterative)."""
    succ = {}
    for a, b, _ in edges:
        succ.setdefault(a, set()).add(b)
        succ.setdefault(b, set())
    index, low, stack, on, comps, n = {}, {}, [], set(), [], 0
    for v0 in sorted(succ):
        if v0 in index:
            continue
        work = [(v0, iter(sorted(succ[v0])))]
        index[v0] = low[v0] = n
        n += 1
        stack.append(v0)
        on.add(v0)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = n
                    n += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(succ[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    comps.append(sorted(comp))
    return comps


def check(root, build, objs, uses=USES):
    """Every fault found, one line each."""
    may = closure(uses)
    folders = sorted({k.split("/")[0] for k in uses})
    calls, mpi_syms = call_edges(root, build, objs)
    incs, mpi_hdrs = include_edges(root, folders)
    faults = []
    named = set()
    for a, b, what in [(a, b, "calls " + s) for a, b, s in calls] + [
        (a, b, 'includes "%s"' % h) for a, b, h in incs
    ]:
        for f in (a, b):
            if layer_of(f, uses) is None and f not in named:
                named.add(f)
                faults.append("%s: its folder is no layer (tests/layers/check.py USES)" % f)
        la, lb = layer_of(a, uses), layer_of(b, uses)
        if la is None or lb is None or la == lb or lb in may[la]:
            continue
        faults.append("%s %s (%s): %s/ may not use %s/" % (a, what, b, la, lb))
    for comp in circles([(a, b, s) for a, b, s in calls] + incs):
        inside = set(comp)
        how = ["%s -> %s (%s)" % (a, b, s) for a, b, s in sorted(calls + incs)
               if a in inside and b in inside]
        faults.append("circle of %d files: %s" % (len(comp), "; ".join(how)))
    for src, what in sorted(set(mpi_syms)) + sorted(set(mpi_hdrs)):
        if not MPI_OK.match(src):
            faults.append("%s uses MPI (%s): only plugin/mpi/ and plugin/cli/launch/ may"
                          % (src, what))
    return faults


# The self-test's tree: a few files per layer, every edge allowed.
FAKE = {
    "include/base/err.h": "int dcp_err(int);\n",
    "include/base/err.c": '#include "include/base/err.h"\nint dcp_err(int x) { return x; }\n',
    "topo/node.h": '#include "include/base/err.h"\nint dcp_node(int);\n',
    "topo/node.c": '#include "topo/node.h"\nint dcp_node(int x) { return dcp_err(x); }\n',
    "partition/model/blk.h": '#include "topo/node.h"\nint dcp_blk(int);\n',
    "partition/model/blk.c": '#include "partition/model/blk.h"\n'
                             "int dcp_blk(int x) { return dcp_node(x); }\n",
    "partition/model/tile.c": '#include "partition/model/blk.h"\n'
                              "int dcp_tile(int x) { return dcp_blk(x); }\n",
    "partition/plan/plan.h": '#include "partition/model/blk.h"\nint dcp_plan(int);\n',
    "partition/plan/plan.c": '#include "partition/plan/plan.h"\n'
                             "int dcp_plan(int x) { return dcp_blk(x); }\n",
    "partition/planner.c": '#include "partition/plan/plan.h"\n'
                           "int dcp_planner(int x) { return dcp_plan(x); }\n",
    "plugin/ctx.c": "int dcp_planner(int);\nint dcp_ctx(int x) { return dcp_planner(x); }\n",
    "plugin/mpi/boot.c": "int MPI_Init(int *, char ***);\n"
                         "int dcp_boot(void) { return MPI_Init(0, 0); }\n",
}
FAKE_USES = {
    "include": [],
    "topo": ["include"],
    "partition/model": ["topo"],
    "partition/plan": ["partition/model"],
    "partition": ["partition/plan"],
    "plugin": ["partition"],
    "plugin/mpi": ["plugin"],
}
# each fault injected alone, and a piece of the message it must give
INJECTED = [
    ("a call up a layer",
     {"partition/model/tile.c": "int dcp_plan(int);\n"
                                "int dcp_tile(int x) { return dcp_plan(x); }\n"},
     "partition/model/tile.c calls dcp_plan (partition/plan/plan.c): partition/model/ may not "
     "use partition/plan/"),
    ("an include up a layer",
     {"topo/node.c": '#include "partition/model/blk.h"\nint dcp_node(int x) { return x; }\n'},
     'topo/node.c includes "partition/model/blk.h" (partition/model/blk.h): topo/ may not use '
     "partition/model/"),
    ("a folder below plugin/ that knows plugin/",
     {"partition/model/tile.c": "int dcp_ctx(int);\nint dcp_tile(int x) { return dcp_ctx(x); }\n"},
     "partition/model/tile.c calls dcp_ctx (plugin/ctx.c): partition/model/ may not use plugin/"),
    ("a circle within a folder",
     {"partition/model/blk.c": '#include "partition/model/blk.h"\nint dcp_tile(int);\n'
                               "int dcp_blk(int x) { return x ? dcp_tile(x - 1) : 0; }\n"},
     "circle of 2 files: partition/model/blk.c -> partition/model/tile.c (dcp_tile); "
     "partition/model/tile.c -> partition/model/blk.c (dcp_blk)"),
    ("MPI below plugin/mpi",
     {"plugin/ctx.c": "#include <mpi.h>\nint dcp_ctx(int x) { return x; }\n"},
     "plugin/ctx.c uses MPI (mpi.h)"),
    ("an MPI call below plugin/mpi",
     {"topo/node.c": "int MPI_Init(int *, char ***);\n"
                     "int dcp_node(int x) { return x + MPI_Init(0, 0); }\n"},
     "topo/node.c uses MPI (MPI_Init)"),
    ("a sub-folder of partition/ with no layer",
     {"partition/extra/x.c": "int dcp_plan(int);\nint dcp_x(int x) { return dcp_plan(x); }\n"},
     "partition/extra/x.c: its folder is no layer"),
]


def write_tree(root, files, base=None):
    """Writes the tree (over a copy of `base`, a tree already built) and compiles the .c
    files it writes (the MPI header aside, which only the check reads); returns the objects."""
    build = os.path.join(root, "build")
    if base:
        shutil.copytree(base, root)
    for path, text in files.items():
        os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
        with open(os.path.join(root, path), "w") as f:
            f.write(text)
        if not path.endswith(".c"):
            continue
        obj = os.path.join(build, "obj", path[:-2] + ".o")
        os.makedirs(os.path.dirname(obj), exist_ok=True)
        cc = os.environ.get("CC") or "cc"
        subprocess.run([cc, "-c", "-I", root, "-o", obj, "-x", "c", "-"], check=True, cwd=root,
                       input=text.replace("#include <mpi.h>\n", ""), text=True)
    objs = []
    for d, _, names in os.walk(os.path.join(build, "obj")):
        objs += [os.path.join(d, n) for n in sorted(names) if n.endswith(".o")]
    return build, sorted(objs)


def self_test():
    ok, lines = True, []
    top = tempfile.mkdtemp(prefix="dcp-layers-")
    try:
        base = os.path.join(top, "clean")
        for i, (what, change, expect) in enumerate([("the clean tree", FAKE, None)] + INJECTED):
            root = base if i == 0 else os.path.join(top, str(i))
            build, objs = write_tree(root, change, None if i == 0 else base)
            faults = check(root, build, objs, FAKE_USES)
            if expect is None:
                good = not faults
            else:
                good = len(faults) == 1 and expect in faults[0]
            lines.append("%s: %s%s" % ("ok" if good else "FAILED", what,
                                       "" if good else " -> %s" % (faults or "no fault")))
            ok &= good
    finally:
        shutil.rmtree(top, ignore_errors=True)
    if not ok:
        print("\n".join(lines))
    return ok, len(INJECTED)


def main(argv):
    if argv[1:] == ["--self-test"]:
        ok, n = self_test()
        print("layers self-test: %s" % ("a clean tree passes, %d injected faults each caught" % n
                                         if ok else "FAILED"))
        return 0 if ok else 1
    if len(argv) < 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    build, objs = argv[1], argv[2:]
    faults = check(REPO, build, objs)
    for f in faults:
        print("layers: " + f)
    n = len(objs)
    if faults:
        print("layers: %d fault%s in %d objects and the sources (USES in tests/layers/check.py)"
              % (len(faults), "" if len(faults) == 1 else "s", n))
        return 1
    print("layers: %d objects and their sources, no call or include up a layer, no circle" % n)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
