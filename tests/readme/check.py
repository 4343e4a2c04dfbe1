"""The README as a user meets it: every command it marks as runnable runs as printed, and
every code excerpt it shows is in the file it names, verbatim.

In README.md an HTML comment before a fenced block says what to do with it:
  <!-- run -->           a shell block: run it, as printed, with bash -e in the repository
                         root, under the PATH a fresh Debian shell has; it must exit 0
  <!-- excerpt: PATH --> a block whose lines must appear, consecutive and verbatim, in PATH
Blocks without a comment are reported as not checked (the GPU's commands, long benches,
make run and make test themselves, which CI runs).

    python3 tests/readme/check.py [README] [--list]
"""
import os
import re
import subprocess
import sys
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEBIAN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
FENCE = re.compile(r"^```(\w*)\s*$")
TAG = re.compile(r"^<!-- (run|excerpt: (\S+)) -->\s*$")


def blocks(text):
    """(line number, language, tag, excerpt path, block lines) of every fenced block."""
    lines = text.split("\n")
    out, i, tag, path = [], 0, None, None
    while i < len(lines):
        m = TAG.match(lines[i])
        if m:
            tag, path = ("run", None) if m.group(1) == "run" else ("excerpt", m.group(2))
            i += 1
            continue
        f = FENCE.match(lines[i])
        if f:
            start, lang = i + 1, f.group(1)
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            out.append((start, lang, tag, path, lines[i + 1:j]))
            tag = path = None
            i = j + 1
            continue
        if lines[i].strip():
            tag = path = None  # a tag applies to the block right after it
        i += 1
    return out


def is_excerpt(block, path):
    with open(os.path.join(REPO, path)) as f:
        have = [line.rstrip() for line in f.read().split("\n")]
    want = [line.rstrip() for line in block]
    n = len(want)
    return any(have[k:k + n] == want for k in range(len(have) - n + 1))


def main():
    readme = next((a for a in sys.argv[1:] if not a.startswith("--")),
                  os.path.join(REPO, "README.md"))
    with open(readme) as f:
        found = blocks(f.read())
    venv = os.path.join(REPO, ".venv")  # the README makes one: removed after, if it was not there
    had_venv = os.path.exists(venv)
    env = dict(os.environ, PATH=DEBIAN_PATH)
    for var in ("PYTHONPATH", "DCP_LIB", "VIRTUAL_ENV"):
        env.pop(var, None)
    failures, unchecked = 0, []
    for line, lang, tag, path, body in found:
        if tag == "excerpt":
            ok = is_excerpt(body, path)
            print("%s excerpt of %s (README line %d)" % ("ok  " if ok else "FAIL", path, line))
            failures += not ok
        elif tag == "run":
            if "--list" in sys.argv:
                print("would run (README line %d): %s" % (line, " / ".join(body)))
                continue
            t0 = time.time()
            r = subprocess.run(["bash", "-e", "-c", "\n".join(body)], cwd=REPO, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=900)
            head = body[0] if len(body) == 1 else "%s ... (%d lines)" % (body[0], len(body))
            print("%s %s (README line %d, %.1f s)" % ("ok  " if r.returncode == 0 else "FAIL",
                                                    head, line, time.time() - t0))
            if r.returncode != 0:
                print("\n".join("     | " + x for x in r.stdout.rstrip().split("\n")[-30:]))
                failures += 1
        else:
            unchecked.append("%d (%s)" % (line, lang or "text"))
    if not had_venv and os.path.exists(venv):
        subprocess.run(["rm", "-rf", venv], check=False)
    print("readme: %d blocks run or checked, %d not checked (README lines %s): %s" %
          (len(found) - len(unchecked), len(unchecked), ", ".join(unchecked),
           "all passed" if failures == 0 else "%d FAILED" % failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
