#!/usr/bin/env python3
"""Turns one captured graph (capture.sh's raw files) into the trimmed text kept in
tests/data/cudnn_sdpa_graphs: every backend call up to the operation graph's finalize, in the
order the frontend made it, descriptors numbered by creation, enumerators by name, one call a
line; a summary of tensors and operations in front of it as comments.

Before writing, the trace (cudnn_trace.c) is checked call by call against cuDNN's own API log
of the same run: same functions, descriptor types, attributes, types, counts, values and
statuses, or the script fails naming the first difference.

Usage: trim.py --header cudnn_graph_v9.h --raw RAWDIR NAME > NAME.txt
       trim.py --header ... --raw RAWDIR --compare-log OTHER.cudnn.log NAME   (check only)
"""
import argparse
import math
import os
import re
import sys

FUNCS = {
    "cudnnBackendCreateDescriptor": "create",
    "cudnnBackendSetAttribute": "set",
    "cudnnBackendFinalize": "finalize",
    "cudnnBackendGetAttribute": "get",
    "cudnnBackendDestroyDescriptor": "destroy",
}

# Attribute type -> the enumeration its values come from.
TYPE_ENUMS = {
    1: "cudnnDataType_t",
    8: "cudnnBackendHeurMode_t",
    9: "cudnnBackendKnobType_t",
    10: "cudnnNanPropagation_t",
    11: "cudnnBackendNumericalNote_t",
    12: "cudnnBackendLayoutType_t",
    13: "cudnnBackendAttributeName_t",
    14: "cudnnPointwiseMode_t",
    16: "cudnnGenStatsMode_t",
    17: "cudnnBnFinalizeStatsMode_t",
    18: "cudnnReduceTensorOp_t",
    19: "cudnnBackendBehaviorNote_t",
    20: "cudnnBackendTensorReordering_t",
    21: "cudnnResampleMode_t",
    22: "cudnnPaddingMode_t",
    25: "cudnnSignalMode_t",
    27: "cudnnBackendNormMode_t",
    28: "cudnnBackendNormFwdPhase_t",
    29: "cudnnRngDistribution_t",
    30: "cudnnMoeGroupedMatmulMode_t",
}
T_BOOLEAN, T_DESCRIPTOR = 2, 15
D_TENSOR, D_OPGRAPH = 17, 15


def fail(msg):
    sys.stderr.write("trim.py: %s\n" % msg)
    sys.exit(1)


def parse_enums(path):
    """typedef enum { A = 1, B, ... } name; -> {name: {value: enumerator}} (first name wins)."""
    text = open(path).read()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    enums = {}
    for body, name in re.findall(r"typedef\s+enum\s*\w*\s*\{(.*?)\}\s*(\w+)\s*;", text, flags=re.S):
        values, names, nxt = {}, {}, 0
        for item in body.split(","):
            item = item.replace("CUDNN_DEPRECATED_ENUM", "").strip()
            if not item:
                continue
            m = re.match(r"(\w+)\s*(?:=\s*(.+))?$", item, flags=re.S)
            if not m:
                continue
            ident, expr = m.group(1), m.group(2)
            if expr is not None:
                expr = expr.strip()
                if re.fullmatch(r"-?(0x[0-9a-fA-F]+|\d+)", expr):
                    nxt = int(expr, 0)
                elif expr in names:
                    nxt = names[expr]
                else:
                    continue
            names[ident] = nxt
            values.setdefault(nxt, ident)
            nxt += 1
        enums[name] = values
    return enums


class Names:
    def __init__(self, enums):
        self.enums = enums

    def of(self, enum, value):
        return self.enums.get(enum, {}).get(int(value), str(value))

    def desc_type(self, v):
        return self.of("cudnnBackendDescriptorType_t", v)

    def attr(self, v):
        return self.of("cudnnBackendAttributeName_t", v)

    def attr_type(self, v):
        return self.of("cudnnBackendAttributeType_t", v)

    def value(self, attr_type, token):
        if token.startswith("@") or token == "ptr" or token.startswith('"'):
            return token
        if attr_type == T_BOOLEAN:
            return "true" if token == "1" else "false"
        if attr_type in TYPE_ENUMS:
            return self.of(TYPE_ENUMS[attr_type], token)
        return token


def read_trace(path):
    calls = []
    for lineno, line in enumerate(open(path), 1):
        tok = line.split()
        if not tok:
            continue
        kind = tok[0]
        if kind == "create":
            calls.append({"f": "create", "id": tok[1], "type": int(tok[2]), "status": int(tok[3])})
        elif kind == "set":
            status = tok[-1]
            if not status.startswith("STATUS="):
                fail("%s:%d: no status" % (path, lineno))
            if len(tok) > 5 and tok[5].startswith('"'):
                values = [" ".join(tok[5:-1])]
            else:
                values = tok[5:-1]
            calls.append({"f": "set", "id": tok[1], "attr": int(tok[2]), "type": int(tok[3]),
                          "count": int(tok[4]), "values": values, "status": int(status[7:])})
        elif kind == "get":
            calls.append({"f": "get", "id": tok[1], "attr": int(tok[2]), "type": int(tok[3]),
                          "status": int(tok[5][7:])})
        elif kind in ("finalize", "destroy"):
            calls.append({"f": kind, "id": tok[1], "status": int(tok[2])})
        else:
            fail("%s:%d: unknown record %r" % (path, lineno, kind))
    return calls


def read_api_log(path):
    """cuDNN's API log -> the backend calls in order, each with its status."""
    calls, block, head = [], None, None

    def close():
        if head is None:
            return
        func, lines = head, block
        if func not in FUNCS:
            return
        status = None
        params = []
        for l in lines:
            m = re.match(r"i!     status: type=cudnnStatus_t; val=\w+ \((\d+)\);", l)
            if m:
                status = int(m.group(1))
            params.append(l)
        if status is not None and len(params) == 1:
            for c in reversed(calls):
                if c["f"] == FUNCS[func] and c.get("status") is None:
                    c["status"] = status
                    break
            return
        call = {"f": FUNCS[func], "status": None}
        for l in params:
            m = re.match(r"i!     descriptorType: .*\((\d+)\);", l)
            if m:
                call["type"] = int(m.group(1))
            m = re.match(r"i!     attributeName: .*\((\d+)\);", l)
            if m:
                call["attr"] = int(m.group(1))
            m = re.match(r"i!     attributeType: .*\((\d+)\);", l)
            if m:
                call["atype"] = int(m.group(1))
            m = re.match(r"i!     elementCount: type=int64_t; val=(-?\d+);", l)
            if m:
                call["count"] = int(m.group(1))
            m = re.match(r"i!     \[(\d+)\]?: type=[^;]*; val=(.*);$", l)
            if m:
                call.setdefault("values", []).append(m.group(2))
        calls.append(call)

    for line in open(path, errors="replace"):
        line = line.rstrip("\n")
        m = re.match(r"[IWE]! CuDNN \(v\d+ \d+\) function (\w+)\(\) called:", line)
        if m:
            close()
            if line.startswith("I!"):
                head, block = m.group(1), []
            else:
                head, block = None, None
            continue
        if head is not None and line.startswith("i!") and not line.startswith(("i! Time:", "i! Process=")):
            block.append(line)
    close()
    return calls


def log_value(text):
    """A value as the API log prints it -> number, or None where it is an address."""
    m = re.search(r"\((-?\d+)\)$", text)
    if m:
        return float(m.group(1))
    if text in ("true", "false"):
        return 1.0 if text == "true" else 0.0
    if text.startswith("0x") or text in ("NULL_PTR", "nil"):
        return None
    try:
        return float(text)
    except ValueError:
        return None


def cross_check(trace, log, label):
    if len(trace) != len(log):
        fail("%s: %d backend calls in the trace, %d in the API log" % (label, len(trace), len(log)))
    for i, (t, l) in enumerate(zip(trace, log)):
        where = "%s: call %d (%s %s)" % (label, i + 1, t["f"], t["id"])
        if t["f"] != l["f"]:
            fail("%s: the API log has %s" % (where, l["f"]))
        if t["status"] != l["status"]:
            fail("%s: status %s in the trace, %s in the API log" % (where, t["status"], l["status"]))
        if t["f"] == "create" and t["type"] != l.get("type"):
            fail("%s: descriptor type %s against %s" % (where, t["type"], l.get("type")))
        if t["f"] in ("set", "get"):
            if t["attr"] != l.get("attr") or t["type"] != l.get("atype"):
                fail("%s: attribute %s/%s against %s/%s" % (where, t["attr"], t["type"], l.get("attr"), l.get("atype")))
        if t["f"] == "set":
            if t["count"] != l.get("count"):
                fail("%s: count %s against %s" % (where, t["count"], l.get("count")))
            lv = l.get("values", [])
            if t["type"] != 24 and len(lv) != len(t["values"]):
                fail("%s: %d values against %d" % (where, len(t["values"]), len(lv)))
            for tv, text in zip(t["values"], lv):
                want = log_value(text)
                if want is None or tv.startswith("@") or tv == "ptr" or tv.startswith('"'):
                    continue
                got = float(tv)
                same = (got == want) or (math.isnan(got) and math.isnan(want)) or \
                    (abs(got - want) <= 1e-6 * max(abs(got), abs(want)))
                if not same:
                    fail("%s: value %s in the trace, %s in the API log" % (where, tv, text))
    return len(trace)


def read_uid_names(path):
    names = {}
    if os.path.exists(path):
        for m in re.finditer(r"Backend Tensor named '([^']*)' with UID (\d+) being created", open(path).read()):
            names.setdefault(int(m.group(2)), m.group(1))
    return names


def read_out(path):
    """The capture program's report: its lines, by-value scalars and workspace tensors by uid."""
    lines = open(path).read().splitlines()
    byval, placed, total = {}, {}, 0
    for l in lines:
        m = re.match(r"by-value scalar: uid (\d+) = (.*)$", l)
        if m:
            byval[int(m.group(1))] = m.group(2)
        m = re.match(r"frontend workspace: (\d+) bytes", l)
        if m:
            total = int(m.group(1))
        m = re.match(r"frontend workspace tensor: uid (\d+) at offset (\d+) \(action \d+: (.*)\)$", l)
        if m:
            placed[int(m.group(1))] = (int(m.group(2)), m.group(3))
    # each buffer runs to the next one's offset (the last to the end of the frontend's part)
    offsets = sorted(o for o, _ in placed.values()) + [total]
    ws = {}
    for uid, (off, action) in placed.items():
        end = next(o for o in offsets if o > off) if any(o > off for o in offsets) else total
        ws[uid] = "workspace[%d,+%d) %s" % (off, end - off, action)
    return lines, byval, ws


def summarize(calls, names, uid_names, byval, ws):
    """Tensors and operations of the operation graph, as comment lines."""
    descs, order = {}, []
    for c in calls:
        if c["f"] == "create":
            descs[c["id"]] = {"type": c["type"], "attrs": []}
            order.append(c["id"])
        elif c["f"] == "set":
            descs[c["id"]]["attrs"].append(c)

    def attr_short(c):
        n = names.attr(c["attr"])
        for p in ("CUDNN_ATTR_OPERATION_POINTWISE_", "CUDNN_ATTR_OPERATION_MATMUL_", "CUDNN_ATTR_OPERATION_REDUCTION_",
                  "CUDNN_ATTR_OPERATION_RESHAPE_", "CUDNN_ATTR_OPERATION_SDPA_FWD_", "CUDNN_ATTR_OPERATION_SDPA_BWD_",
                  "CUDNN_ATTR_POINTWISE_", "CUDNN_ATTR_MATMUL_", "CUDNN_ATTR_REDUCTION_", "CUDNN_ATTR_TENSOR_",
                  "CUDNN_ATTR_"):
            if n.startswith(p):
                return n[len(p):].lower()
        return n

    def tensor_info(d):
        info = {"uid": None, "dtype": "?", "dim": "?", "stride": "?", "virtual": False, "byval": False, "ragged": None}
        for a in d["attrs"]:
            n = names.attr(a["attr"])
            v = a["values"]
            if n == "CUDNN_ATTR_TENSOR_UNIQUE_ID":
                info["uid"] = int(v[0])
            elif n == "CUDNN_ATTR_TENSOR_DATA_TYPE":
                info["dtype"] = names.value(a["type"], v[0]).replace("CUDNN_DATA_", "")
            elif n == "CUDNN_ATTR_TENSOR_DIMENSIONS":
                info["dim"] = "{" + ",".join(v) + "}"
            elif n == "CUDNN_ATTR_TENSOR_STRIDES":
                info["stride"] = "{" + ",".join(v) + "}"
            elif n == "CUDNN_ATTR_TENSOR_IS_VIRTUAL":
                info["virtual"] = v[0] == "1"
            elif n == "CUDNN_ATTR_TENSOR_IS_BY_VALUE":
                info["byval"] = v[0] == "1"
            elif n == "CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC":
                info["ragged"] = v[0]
        return info

    def tensor_ref(ref):
        d = descs.get(ref)
        if not d or d["type"] != D_TENSOR:
            return ref
        t = tensor_info(d)
        return "uid%s" % t["uid"]

    out = ["# tensors (@descriptor uid name: type dims strides flags)"]
    for ref in order:
        d = descs[ref]
        if d["type"] != D_TENSOR:
            continue
        t = tensor_info(d)
        flags = []
        if t["virtual"]:
            flags.append("virtual")
        if t["byval"]:
            flags.append("by-value")
        if t["ragged"]:
            flags.append("ragged-offset=%s" % tensor_ref(t["ragged"]))
        if t["uid"] in byval:
            flags.append("value=%s" % byval[t["uid"]].split()[-1])
        if t["uid"] in ws:
            flags.append(ws[t["uid"]])
        out.append("#   %s uid%s %s: %s %s %s%s" % (ref, t["uid"], uid_names.get(t["uid"], "?"), t["dtype"], t["dim"],
                                                    t["stride"], (" " + " ".join(flags)) if flags else ""))
    graph = [c for c in calls if c["f"] == "set" and names.attr(c["attr"]) == "CUDNN_ATTR_OPERATIONGRAPH_OPS"]
    ops = graph[-1]["values"] if graph else []
    out.append("# operations in CUDNN_ATTR_OPERATIONGRAPH_OPS order (tensors by uid; sub-descriptors inline)")
    for i, ref in enumerate(ops, 1):
        d = descs.get(ref)
        if not d:
            out.append("#   %d %s ?" % (i, ref))
            continue
        kind = names.desc_type(d["type"]).replace("CUDNN_BACKEND_OPERATION_", "").replace("_DESCRIPTOR", "")
        parts = []
        for a in d["attrs"]:
            v = a["values"]
            if a["type"] == T_DESCRIPTOR and len(v) == 1 and v[0] in descs and descs[v[0]]["type"] != D_TENSOR:
                sub = descs[v[0]]
                inner = ",".join("%s=%s" % (attr_short(s), " ".join(names.value(s["type"], x) for x in s["values"]))
                                 for s in sub["attrs"])
                parts.append("%s{%s}" % (attr_short(a), inner))
            elif a["type"] == T_DESCRIPTOR:
                parts.append("%s=%s" % (attr_short(a), ",".join(tensor_ref(x) for x in v)))
            else:
                parts.append("%s=%s" % (attr_short(a), ",".join(names.value(a["type"], x) for x in v)))
        out.append("#   %d %s %s %s" % (i, ref, kind, " ".join(parts)))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--header", required=True)
    ap.add_argument("--raw", required=True)
    ap.add_argument("--compare-log")
    ap.add_argument("name")
    args = ap.parse_args()

    raw = os.path.join(args.raw, args.name)
    names = Names(parse_enums(args.header))
    trace = read_trace(raw + ".trace")
    log_path = args.compare_log or (raw + ".cudnn.log")
    checked = cross_check(trace, read_api_log(log_path), os.path.basename(log_path))
    if args.compare_log:
        print("%s: the same %d backend calls (functions, types, attributes, counts, values, statuses) as %s"
              % (os.path.basename(args.compare_log), checked, os.path.basename(raw + ".trace")))
        return

    ends = [i for i, c in enumerate(trace) if c["f"] == "finalize" and
            any(k["f"] == "create" and k["id"] == c["id"] and k["type"] == D_OPGRAPH for k in trace)]
    if not ends:
        fail("%s: the operation graph was never finalized" % args.name)
    end = ends[0]
    body = trace[:end + 1]
    rest = trace[end + 1:]
    uid_names = read_uid_names(raw + ".frontend.log")
    printed, byval, ws = read_out(raw + ".out")

    out = []
    out.append("# cuDNN backend calls cudnn-frontend made for the SDPA graph '%s', captured without a GPU" % args.name)
    out.append("# (tests/perf/cudnn_capture; README.md in this folder says how and with what).")
    for line in printed:
        if line.startswith(("frontend version", "direction", "max_total", "implementation", "frontend workspace:",
                            "step")) and not line.startswith("step collect"):
            out.append("# " + line)
    out.append("# checked call by call against cuDNN's API log of the same run: %d calls agree" % checked)
    out.append("#")
    out.append("# format, one call a line in the order made; descriptors @N by creation order; '#' starts a comment:")
    out.append("#   create @N DESCRIPTOR_TYPE")
    out.append("#   set @N ATTRIBUTE ATTRIBUTE_TYPE COUNT VALUE...   (descriptors as @N, booleans true/false)")
    out.append("#   finalize @N")
    out.append("# every call returned CUDNN_STATUS_SUCCESS; the frontend destroys each MATMUL/POINTWISE/REDUCTION")
    out.append("# descriptor right after finalizing the operation that uses it (destroys are not listed).")
    out.append("#")
    out.extend(summarize(body, names, uid_names, byval, ws))
    out.append("#")
    for c in body:
        if c["status"] != 0:
            fail("%s: %s %s returned %d before the operation graph was finalized" % (args.name, c["f"], c["id"], c["status"]))
        if c["f"] == "create":
            out.append("create %s %s" % (c["id"], names.desc_type(c["type"])))
        elif c["f"] == "set":
            vals = " ".join(names.value(c["type"], v) for v in c["values"])
            out.append("set %s %s %s %d %s" % (c["id"], names.attr(c["attr"]), names.attr_type(c["type"]), c["count"], vals))
        elif c["f"] == "finalize":
            out.append("finalize %s" % c["id"])
    out.append("#")
    out.append("# after the operation graph, heuristics (what a GPU is needed for):")
    for c in rest:
        if c["f"] == "destroy":
            continue
        if c["f"] == "create":
            out.append("#   create %s %s -> %s" % (c["id"], names.desc_type(c["type"]), names.of("cudnnStatus_t", c["status"])))
        elif c["f"] == "set":
            out.append("#   set %s %s %s -> %s" % (c["id"], names.attr(c["attr"]),
                                                  " ".join(names.value(c["type"], v) for v in c["values"]),
                                                  names.of("cudnnStatus_t", c["status"])))
        elif c["f"] == "get":
            out.append("#   get %s %s -> %s" % (c["id"], names.attr(c["attr"]), names.of("cudnnStatus_t", c["status"])))
        else:
            out.append("#   %s %s -> %s" % (c["f"], c["id"], names.of("cudnnStatus_t", c["status"])))
    log_text = open(log_path, errors="replace").read()
    for m in re.finditer(r"Warning: (CUDNN_STATUS_\w+); Reason: ([^\n]*)", log_text):
        if m.group(1) != "CUDNN_STATUS_SUCCESS":
            out.append("#   API log warning: %s; Reason: %s" % (m.group(1), m.group(2).strip()))
    print("\n".join(out))


if __name__ == "__main__":
    main()
