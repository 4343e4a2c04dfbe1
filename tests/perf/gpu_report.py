#!/usr/bin/env python3
"""The report of tests/perf/gpu_check.sh: its work folder (meta.txt, steps.tsv, logs/) into
OUTDIR/gpu_check.json (every figure: the tools' JSON objects per step, and a summary) and
OUTDIR/gpu_check.txt (the same for people: one line per step, the key figures, the end of
every failed step's log). Standard library only; run after every step.

    python3 tests/perf/gpu_report.py WORKDIR OUTDIR
"""
import json
import os
import re
import sys


def records(text):
    """The JSON objects a tool printed, one per line."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def suite_tests(text):
    """dcp-tests -v lines "  suite/test: ok" or a failure; {test: "ok" | "FAILED"}."""
    res = {}
    for m in re.finditer(r"^\s+(\w+)/(\w+): (.*)$", text, re.M):
        res[m.group(2)] = "ok" if m.group(3).strip() == "ok" else "FAILED"
    for m in re.finditer(r"^--- (\w+)$", text, re.M):
        res.setdefault(m.group(1), "FAILED (no result)")
    return res


def sanitizer_errors(text):
    """compute-sanitizer's summary per test run (the --- lines name them): memcheck and
    synccheck end with "ERROR SUMMARY: N errors", racecheck with "RACECHECK SUMMARY: N hazards
    displayed (E errors, W warnings)"; hazards count as errors."""
    res, current = {}, None
    for line in text.splitlines():
        m = re.match(r"^--- \w+: (\w+)$", line)
        if m:
            current = m.group(1)
            res[current] = None
        m = (re.search(r"ERROR SUMMARY: (\d+) error", line) or
             re.search(r"RACECHECK SUMMARY: (\d+) hazard", line))
        if m and current:
            res[current] = int(m.group(1))
    return res


def attn_row(r):
    """The figures of one dcp-attn-test row that a reader compares."""
    keep = ("mask", "strategy", "engine", "cudnn_version", "engine_note", "passed",
            "bwd_passed", "max_rel_err", "max_rel_err_dq", "exec_ms", "bwd_exec_ms", "gflops",
            "bwd_gflops", "host_us", "bwd_host_us", "wait_us", "repeat_runs", "mismatches",
            "failed_checks", "max_diff_ratio", "plans_built", "plan_build_ms")
    return {k: r[k] for k in keep if k in r}


def summarize(steps):
    s = {}
    by = {st["name"]: st for st in steps}
    ran = [st for st in steps if st["status"] != "skip"]
    s["steps_passed"] = sum(st["status"] == "pass" for st in steps)
    s["steps_failed"] = [st["name"] for st in steps if st["status"] in ("fail", "timeout")]
    s["steps_skipped"] = {st["name"]: st["note"] for st in steps if st["status"] == "skip"}
    if "env" in by:
        eng = [r for r in by["env"]["records"] if "engine" in r]
        if eng:
            s["engine"] = {k: eng[0].get(k) for k in ("engine", "cudnn_version", "engine_note")}
    if "gpu-suite" in by and by["gpu-suite"]["status"] != "skip":
        t = by["gpu-suite"]["tests"]
        s["gpu_tests"] = {"passed": sum(v == "ok" for v in t.values()),
                          "failed": sorted(k for k, v in t.items() if v != "ok")}
    if "gpupath" in by and by["gpupath"]["status"] != "skip":
        t, rows = by["gpupath"]["tests"], [r for r in by["gpupath"]["records"] if "path" in r]
        s["gpupath"] = {"passed": sum(v == "ok" for v in t.values()),
                        "failed": sorted(k for k, v in t.items() if v != "ok"),
                        "torch": [{k: r.get(k) for k in ("path", "passed", "skipped", "report")}
                                  for r in rows]}
    for tool in ("memcheck", "racecheck", "synccheck"):
        if tool in by and by[tool]["status"] != "skip":
            errs = by[tool]["sanitizer"]
            s[tool + "_errors"] = sum(v or 0 for v in errs.values())
            s[tool + "_unfinished"] = sorted(k for k, v in errs.items() if v is None)
    if "stress" in by and by["stress"]["status"] != "skip":
        rows = by["stress"]["records"]
        s["stress"] = {"cases": len(rows), "runs": sum(r.get("repeat_runs", 0) for r in rows),
                       "mismatches": sum(r.get("mismatches", 0) for r in rows),
                       "failed_checks": sum(r.get("failed_checks", 0) for r in rows),
                       "worst_diff_ratio": max([r.get("max_diff_ratio") or 0 for r in rows] or [0])}
    for name in ("attn", "engine", "host-us"):
        if name in by and by[name]["status"] != "skip":
            rows = by[name]["records"]
            s[name] = {"rows": len(rows),
                       "failed": ["%s/%s/%s" % (r.get("engine", "-"), r.get("mask"), r.get("strategy"))
                                  for r in rows if r.get("passed") is False]}
    if "engine" in by and by["engine"]["status"] != "skip":
        notes = {}
        for r in by["engine"]["records"]:
            notes.setdefault(r.get("engine", "-"), r.get("engine_note", ""))
        s["engine_notes"] = notes
    if "deterministic" in by and by["deterministic"]["status"] != "skip":
        # runs whose gradients differ from the first run's in any bit: 0 in deterministic
        # mode, dcp's kernels and the cuDNN engine (its waves counted); the atomic kernel's
        # count beside them; both backward kernels' TFLOP/s
        recs = by["deterministic"]["records"]
        d = {}
        for key, mode, own in (("deterministic", True, True), ("atomic", False, True),
                               ("engine_deterministic", True, False)):
            rows = [r for r in recs if "unequal_bwd" in r and bool(r.get("deterministic")) == mode
                    and (r.get("engine", "own") == "own") == own]
            d[key] = {"cases": len(rows), "runs": sum(r.get("repeat_runs", 0) for r in rows),
                      "unequal_bwd": sum(r.get("unequal_bwd", 0) for r in rows),
                      "unequal_fwd": sum(r.get("unequal_fwd", 0) for r in rows),
                      "mismatches": sum(r.get("mismatches", 0) for r in rows),
                      "bwd_waves": sum(r.get("bwd_waves", 0) for r in rows)}
        for mode, key in ((True, "deterministic"), (False, "atomic")):
            d[key + "_bwd_tflops"] = {r.get("mask"): r.get("tflops") for r in recs
                                      if r.get("kernel") == "bwd" and
                                      bool(r.get("deterministic")) == mode}
        s["deterministic"] = d
    if "kernel-bench" in by and by["kernel-bench"]["status"] != "skip":
        best = {}
        for r in by["kernel-bench"]["records"]:
            if r.get("tflops") is None:
                continue
            key = "%s/%s/%s" % (r.get("engine", "-"), r.get("kernel"), r.get("mask"))
            best[key] = max(best.get(key, 0), r["tflops"])
        s["kernel_bench_best_tflops"] = best
    if "warp-rows" in by and by["warp-rows"]["status"] != "skip":
        # the forward's two shapes, TFLOP/s per (rows per warp, mask, head dim): best over
        # tiles and totals
        shapes = {}
        for r in by["warp-rows"]["records"]:
            if r.get("tflops") is None:
                continue
            key = "%s/%s/d%s" % (r.get("warp_rows"), r.get("mask"), r.get("head_dim"))
            shapes[key] = max(shapes.get(key, 0), r["tflops"])
        s["warp_rows_best_tflops"] = shapes
    if "torch" in by and by["torch"]["status"] != "skip":
        rows = [r for r in by["torch"]["records"] if "path" in r]
        s["torch"] = {"cases": len(rows), "failed": ["%s/%s/%s" % (r["path"], r["mask"], r["dtype"])
                                                     for r in rows if not r.get("passed")]}
    s["green"] = bool(ran) and not s["steps_failed"] and s.get("stress", {}).get("mismatches", 0) == 0
    return s


def text_report(meta, steps, summary):
    lines = ["dcp GPU report", ""] + meta + ["", "%-13s %-8s %5s %6s %6s  %s" %
                                             ("step", "status", "rc", "secs", "limit", "note")]
    for st in steps:
        lines.append("%-13s %-8s %5s %6s %6s  %s" % (st["name"], st["status"], st["rc"],
                                                      st["seconds"], st["limit_s"], st["note"]))
    lines += ["", "summary:", json.dumps(summary, indent=1, sort_keys=True), ""]
    for st in steps:
        rows = st["records"]
        if st["name"] in ("attn", "engine", "host-us", "stress") and rows:
            lines.append("%s:" % st["name"])
            for r in rows:
                a = attn_row(r)
                lines.append("  " + " ".join("%s=%s" % (k, a[k]) for k in a))
            lines.append("")
        elif st["name"] in ("kernel-bench", "warp-rows", "compare-sdpa", "torch", "env",
                            "deterministic", "gpupath") and rows:
            lines.append("%s:" % st["name"])
            lines += ["  " + json.dumps(r, sort_keys=True) for r in rows]
            lines.append("")
    for st in steps:
        if st["status"] in ("fail", "timeout"):
            lines += ["---- %s (%s): end of its log" % (st["name"], st["status"])] + st["tail"] + [""]
    return "\n".join(lines) + "\n"


def main():
    work, out = sys.argv[1], sys.argv[2]
    with open(os.path.join(work, "meta.txt")) as f:
        meta = f.read().splitlines()
    steps = []
    with open(os.path.join(work, "steps.tsv")) as f:
        for line in f:
            p = line.rstrip("\n").split("\t")
            if len(p) < 6:
                continue
            name, status, rc, secs, limit, note = p[:6]
            log = os.path.join(work, "logs", name + ".log")
            text = open(log, errors="replace").read() if os.path.exists(log) else ""
            st = {"name": name, "status": status, "rc": rc, "seconds": int(secs),
                  "limit_s": limit, "note": note, "records": records(text),
                  "tail": text.splitlines()[-40:]}
            if name in ("gpu-suite", "gpupath"):
                st["tests"] = suite_tests(text)
            if name in ("memcheck", "racecheck", "synccheck"):
                st["sanitizer"] = sanitizer_errors(text)
            steps.append(st)
    summary = summarize(steps)
    doc = {"meta": meta, "summary": summary,
           "steps": [{k: v for k, v in st.items() if k != "tail" or st["status"] in ("fail", "timeout")}
                     for st in steps]}
    with open(os.path.join(out, "gpu_check.json"), "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")
    with open(os.path.join(out, "gpu_check.txt"), "w") as f:
        f.write(text_report(meta, steps, summary))


if __name__ == "__main__":
    main()
