#!/usr/bin/env python3
"""The table of settings holds the tree to itself (include/base/env.h):

  - every DCP_* variable read anywhere is a row of the table: C reads go through the parser
    (no getenv("DCP_...") outside include/base/env.c; names set by setenv in tests are rows),
    Python reads (os.environ, os.getenv), shell reads and assignments ($DCP_<NAME>,
    ${DCP_<NAME>...}, DCP_<NAME>=... in scripts and the Makefile), and the settings the
    documentation names (`DCP_<NAME>=...`, `$DCP_<NAME>` in a README);
  - every row is read somewhere (no stale rows);
  - plugin/SETTINGS.md's table is `dcp-topo --env --markdown`'s output, and README.md links it.

    tests/settings/check.py [BIN_DIR]      (default build/bin)
"""
import json
import os
import re
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "bin")
SETTINGS_MD = "plugin/SETTINGS.md"
BEGIN, END = "<!-- dcp-topo --env --markdown: begin -->", "<!-- dcp-topo --env --markdown: end -->"
NAME = r"DCP_[A-Z0-9_]*[A-Z0-9]"

C_EXT = (".c", ".h", ".cu", ".cuh", ".cc", ".cpp")
C_GETENV = re.compile(r'getenv\s*\(\s*"(DCP_[A-Z0-9_]*)')
C_SETENV = re.compile(r'\b(?:setenv|unsetenv)\s*\(\s*"(' + NAME + ')"')
C_ID = re.compile(r"\bDCP_ENV_([A-Z0-9_]+)\b")
ENV_H = "include/base/env.h"
ID_ENUM = re.compile(r"typedef enum \{([^}]*)\} dcp_env_id_t;")
PY_READ = [re.compile(p) for p in (
    r'os\.environ(?:\.get|\.setdefault|\.pop)?\s*[\(\[]\s*["\'](' + NAME + r')["\']',
    r'os\.getenv\s*\(\s*["\'](' + NAME + r')["\']',
    r'["\'](' + NAME + r')["\']\s+(?:not\s+)?in\s+os\.environ',
    r'\b(' + NAME + r')=',  # a variable handed to a child in an env= dict or command line
)]
SH_READ = re.compile(r"\$\{?(" + NAME + r")\b")
SH_SET = re.compile(r"(?:^|[\s;(\"'])(?:export\s+|-x\s+)?(" + NAME + r")=")
MD_USE = [re.compile(r"\$\{?(" + NAME + r")\b"), re.compile(r"(?<![A-Za-z0-9_])(" + NAME + r")=")]

failures = []


def fail(msg):
    failures.append(msg)


def tracked_files():
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                             check=True).stdout.decode()
        files = [f for f in out.split("\0") if f]
        others = subprocess.run(["git", "ls-files", "-z", "--others", "--exclude-standard"],
                                cwd=ROOT, capture_output=True, check=True).stdout.decode()
        return sorted(set(files) | {f for f in others.split("\0") if f})
    except (OSError, subprocess.CalledProcessError):  # not a checkout: walk the tree
        files = []
        for d, dirs, names in os.walk(ROOT):
            dirs[:] = [x for x in dirs if not x.startswith((".", "build"))]
            files += [os.path.relpath(os.path.join(d, n), ROOT) for n in names]
        return sorted(files)


def table():
    out = subprocess.run([os.path.join(BIN, "dcp-topo"), "--env", "--json"], capture_output=True,
                         text=True, env={k: v for k, v in os.environ.items()
                                         if not k.startswith("DCP_")})
    if out.returncode != 0:
        sys.exit("tests/settings: dcp-topo --env --json exited %d: %s" % (out.returncode,
                                                                        out.stderr[:300]))
    return {s["name"]: s for s in json.loads(out.stdout)["settings"]}


def markdown():
    out = subprocess.run([os.path.join(BIN, "dcp-topo"), "--env", "--markdown"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("tests/settings: dcp-topo --env --markdown exited %d" % out.returncode)
    return out.stdout


def main():
    rows = table()
    reads = {}  # name -> first place it is read

    def read(name, where):
        reads.setdefault(name, where)

    ids_used = set()
    for f in tracked_files():
        path = os.path.join(ROOT, f)
        if not os.path.isfile(path) or f.startswith(("build", "shared/")):
            continue
        try:
            text = open(path, encoding="utf-8").read()
        except (UnicodeDecodeError, OSError):
            continue
        lines = text.splitlines()
        base = os.path.basename(f)
        for n, line in enumerate(lines, 1):
            where = "%s:%d" % (f, n)
            if f.endswith(C_EXT):
                if f != "include/base/env.c":
                    for m in C_GETENV.finditer(line):
                        fail("%s: getenv(\"%s...\") outside include/base/env.c: read it through "
                             "include/base/env.h" % (where, m.group(1)))
                    if f != ENV_H:
                        ids_used.update(m.group(1) for m in C_ID.finditer(line))
                for m in C_SETENV.finditer(line):
                    read(m.group(1), where)
            elif f.endswith(".py"):
                for r in PY_READ:
                    for m in r.finditer(line):
                        read(m.group(1), where)
            elif f.endswith((".sh", ".bash")) or base == "Makefile":
                for r in (SH_READ, SH_SET):
                    for m in r.finditer(line):
                        read(m.group(1), where)
            elif f.endswith(".md"):
                for r in MD_USE:
                    for m in r.finditer(line):
                        read(m.group(1), where)
    # the ids of dcp_env_id_t: each names a row (env.c makes each row's name from its id), and
    # a C read is a use of its id
    m = ID_ENUM.search(open(os.path.join(ROOT, ENV_H), encoding="utf-8").read())
    ids = [x.strip() for x in m.group(1).split(",") if x.strip()] if m else []
    if not ids or ids[-1] != "DCP_ENV_COUNT":
        fail("%s: no dcp_env_id_t ending in DCP_ENV_COUNT" % ENV_H)
    for i in ids[:-1]:
        name = "DCP_" + i[len("DCP_ENV_"):]
        if name not in rows:
            fail("%s: %s names no row of the table" % (ENV_H, i))
        if i[len("DCP_ENV_"):] in ids_used:
            read(name, "(C: %s)" % i)
    for name, where in sorted(reads.items()):
        if name not in rows:
            fail("%s: %s is read or documented but is no row of the table "
                 "(include/base/env.c)" % (where, name))
    for name in sorted(rows):
        if name not in reads:
            fail("%s is a row of the table but nothing reads it" % name)

    # plugin/SETTINGS.md's table is the tool's
    md_path = os.path.join(ROOT, SETTINGS_MD)
    doc = open(md_path, encoding="utf-8").read() if os.path.exists(md_path) else ""
    if BEGIN not in doc or END not in doc:
        fail("%s: no generated table between %s and %s" % (SETTINGS_MD, BEGIN, END))
    else:
        got = doc.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n") + "\n"
        want = markdown()
        if got != want:
            fail("%s differs from `dcp-topo --env --markdown` (regenerate it: "
                 "tests/settings/check.py --write)" % SETTINGS_MD)
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    if SETTINGS_MD not in readme:
        fail("README.md does not link %s" % SETTINGS_MD)

    if failures:
        for f in failures:
            print("FAIL: " + f)
        print("tests/settings: %d failure(s)" % len(failures))
        return 1
    print("tests/settings: %d settings, each read and documented once; %s matches "
          "dcp-topo --env --markdown" % (len(rows), SETTINGS_MD))
    return 0


def write():
    """--write: puts the tool's table between the markers of plugin/SETTINGS.md."""
    md_path = os.path.join(ROOT, SETTINGS_MD)
    doc = open(md_path, encoding="utf-8").read()
    head, rest = doc.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    open(md_path, "w", encoding="utf-8").write(head + BEGIN + "\n" + markdown() + END + tail)
    return 0


if __name__ == "__main__":
    if "--write" in sys.argv:
        sys.argv.remove("--write")
        BIN = sys.argv[1] if len(sys.argv) > 1 else BIN
        sys.exit(write())
    sys.exit(main())
