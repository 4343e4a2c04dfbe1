"""The READMEs as a user meets them: every command they mark as runnable runs as printed, every
code excerpt they show is in the file it names, verbatim, and they hold together.

Every README.md of the repository is read (found by walking the tree; build folders, hidden
folders and Python build output are left out), the top one first. In a README an HTML comment
before a fenced block says what to do with it:
  <!-- run -->           a shell block: run it, as printed, with bash -e in the repository
                         root, under the PATH a fresh Debian shell has; it must exit 0
  <!-- excerpt: PATH --> a block whose lines must appear, consecutive and verbatim, in PATH
                         (relative to the repository root)
Blocks without a comment are reported as not checked (the GPU's commands, long benches,
make run and make test themselves, which CI runs).

Beside the blocks it fails when the top README.md is longer than MAX_LINES lines or does not
link every other README, when a README links a file or a heading that is not there, and when
any README names a commit hash or a work-item or stop number (a README speaks of the project
as it is, not of its history).

    python3 tests/readme/check.py [README ...] [--list]

With README paths only those are read (the whole-repository checks still run).
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
MAX_LINES = 300
# seven to forty hex digits with at least one letter and one digit: a commit, however short
HASH = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")
WORK_ITEM = re.compile(r"\b([Ii]ssue|[Ss]top)s? [0-9]")
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)|^\[[^\]]+\]:\s*(\S+)", re.M)
LINK_ANY = re.compile(r"\]\(([^)\s]+)\)|^\[[^\]]+\]:\s*(\S+)", re.M)


def skipped(name):
    return (name.startswith(".") or name.startswith("build") or name == "__pycache__"
            or name.endswith(".egg-info"))


def readmes():
    """Every README.md of the repository, relative to its root, the top one first."""
    found = []
    for root, dirs, files in os.walk(REPO):
        dirs[:] = sorted(d for d in dirs if not skipped(d))
        if "README.md" in files:
            found.append(os.path.relpath(os.path.join(root, "README.md"), REPO))
    return sorted(found, key=lambda p: (p != "README.md", p))


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
    full = os.path.join(REPO, path)
    if not os.path.isfile(full):
        return False
    with open(full) as f:
        have = [line.rstrip() for line in f.read().split("\n")]
    want = [line.rstrip() for line in block]
    n = len(want)
    return any(have[k:k + n] == want for k in range(len(have) - n + 1))


def history(name, text):
    """Lines of a README that name a commit hash or a work-item or stop number."""
    bad = []
    for n, line in enumerate(text.split("\n"), 1):
        for rx, what in ((HASH, "a commit hash"), (WORK_ITEM, "a work-item or stop number")):
            m = rx.search(line)
            if m:
                bad.append("FAIL %s line %d names %s: %r" % (name, n, what, m.group(0)))
    return bad


def anchors(text):
    """The anchors of a Markdown file's headings, as GitHub makes them."""
    out, fence = set(), False
    for line in text.split("\n"):
        if line.startswith("```"):
            fence = not fence
        m = None if fence else re.match(r"^#+ (.*)", line)
        if m:
            out.add(re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-"))
    return out


def links(name, text):
    """Relative links of a README (outside its code blocks) whose file or heading is not there."""
    bad, prose, fence = [], [], False
    for line in text.split("\n"):
        fence = fence != line.startswith("```")
        prose.append("" if fence or line.startswith("```") else line)
    for m in LINK_ANY.finditer("\n".join(prose)):
        target = m.group(1) or m.group(2)
        if re.match(r"^[a-z]+:", target):
            continue
        path, _, frag = target.partition("#")
        full = os.path.normpath(os.path.join(REPO, os.path.dirname(name), path)) if path \
            else os.path.join(REPO, name)
        if not os.path.exists(full):
            bad.append("FAIL %s links %s, which is not there" % (name, target))
        elif frag and full.endswith(".md"):
            with open(full) as f:
                if frag not in anchors(f.read()):
                    bad.append("FAIL %s links %s: no such heading" % (name, target))
    return bad


def structure(names, texts):
    """The top README's length and its links to every other README."""
    bad = []
    top = texts.get("README.md")
    if top is None:
        return ["FAIL README.md is missing"]
    n = top.count("\n")
    if n > MAX_LINES:
        bad.append("FAIL README.md has %d lines, more than %d" % (n, MAX_LINES))
    linked = {os.path.normpath(a or b) for a, b in LINK.findall(top)}
    for name in names:
        if name != "README.md" and os.path.normpath(name) not in linked:
            bad.append("FAIL README.md does not link %s" % name)
    return bad


def main():
    listing = "--list" in sys.argv
    asked = [os.path.relpath(os.path.abspath(a), REPO) for a in sys.argv[1:]
             if not a.startswith("--")]
    every = readmes()
    texts = {}
    for name in every + [a for a in asked if a not in every]:
        with open(os.path.join(REPO, name)) as f:
            texts[name] = f.read()
    names = asked or every
    venv = os.path.join(REPO, ".venv")  # the top README makes one: removed after, if not there
    had_venv = os.path.exists(venv)
    env = dict(os.environ, PATH=DEBIAN_PATH)
    for var in ("PYTHONPATH", "DCP_LIB", "VIRTUAL_ENV"):
        env.pop(var, None)
    failures, checked, unchecked = 0, 0, []
    problems = structure(every, texts)
    for x in every:
        problems += links(x, texts[x]) + history(x, texts[x])
    for problem in problems:
        print(problem)
        failures += 1
    for name in names:
        for line, lang, tag, path, body in blocks(texts[name]):
            where = "%s line %d" % (name, line)
            if tag == "excerpt":
                ok = is_excerpt(body, path)
                print("%s excerpt of %s (%s)" % ("ok  " if ok else "FAIL", path, where))
                failures += not ok
                checked += 1
            elif tag == "run":
                checked += 1
                if listing:
                    print("would run (%s): %s" % (where, " / ".join(body)))
                    continue
                t0 = time.time()
                r = subprocess.run(["bash", "-e", "-c", "\n".join(body)], cwd=REPO, env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   timeout=900)
                head = body[0] if len(body) == 1 else "%s ... (%d lines)" % (body[0], len(body))
                print("%s %s (%s, %.1f s)" % ("ok  " if r.returncode == 0 else "FAIL", head,
                                              where, time.time() - t0))
                if r.returncode != 0:
                    print("\n".join("     | " + x for x in r.stdout.rstrip().split("\n")[-30:]))
                    failures += 1
            else:
                unchecked.append("%s:%d (%s)" % (name, line, lang or "text"))
    if not had_venv and os.path.exists(venv):
        subprocess.run(["rm", "-rf", venv], check=False)
    print("readme: %d READMEs, %d blocks run or checked, %d not checked: %s" %
          (len(names), checked, len(unchecked), "all passed" if failures == 0 else
           "%d FAILED" % failures))
    if unchecked and "-v" in sys.argv:
        print("not checked: " + ", ".join(unchecked))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
