#!/bin/bash
# The tools as a user meets them: JSON that parses (a host name with a quote and a
# backslash), flag errors that blame the flag that was wrong, outputs checked before any
# work, --help defaults taken from the code, the bench harness's median [min-max], and a
# kernel table written by dcp-kernel-bench that dcp-plan --kernel-table reads, the attention
# engine's report, layer kinds (--layers, --compare), --version, dcp-plan's work buffers, and
# dcp's settings (dcp-topo --env, DCP_DEBUG).
#
#   tests/tools/run.sh [BIN_DIR]      (default build/bin)
set -u
bin=${1:-build/bin}
here=$(cd "$(dirname "$0")/../data" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}
# expect STATUS PATTERN CMD...: CMD exits STATUS and its stderr holds PATTERN
expect() {
    local want=$1 pattern=$2
    shift 2
    "$@" >"$work/out" 2>"$work/err"
    local rc=$?
    [ "$rc" = "$want" ] || fail "$* exited $rc, not $want: $(head -c 300 "$work/err")"
    grep -q -- "$pattern" "$work/err" || fail "$*: stderr lacks '$pattern': $(head -c 300 "$work/err")"
}
# json_check FILE PYTHON-EXPR: every line of FILE parses and the expression (over `rows`)
# holds
json_check() {
    python3 - "$1" "$2" <<'PY' || fail "json check '$2' on $1"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
assert rows, "no JSON lines"
assert eval("(" + sys.argv[2] + ")"), sys.argv[2]
PY
}

# 1. dcp-topo --json escapes a host name with a quote and a backslash, null for unknowns
sed 's/HostName" value="h100-ib-node"/HostName" value="h100 \&quot;ib\&quot; node\\x"/' \
    "$here/h100-ib.xml" >"$work/quoted.xml"
"$bin/dcp-topo" --xml "$work/quoted.xml" --json >"$work/topo.json" || fail "dcp-topo --json"
json_check "$work/topo.json" \
    'rows[0]["host"] == "h100 \"ib\" node\\x" and rows[0]["figures"]["inter_gbps"] > 0 and
     all(n["link_gbps"] is None or n["link_gbps"] > 0 for n in rows[0]["nics"])'

# ... rails and pinning: a p5 (after aws-ofi-nccl's published layout) gives each GPU its four
# EFA (50 GB/s summed, UCX_NET_DEVICES listing the four, FI_PROVIDER=efa for the job); a DGX
# H100 one InfiniBand HCA each (NCCL_IB_HCA with '=' for the exact name); captures leave
# GPUDirect RDMA unchecked (null), the live machine reports it
"$bin/dcp-topo" --xml "$here/p5.xml" --json >"$work/p5.json" || fail "dcp-topo --xml p5.xml"
json_check "$work/p5.json" \
    'all(len(g["nics"]) == 4 and abs(g["net_gbps"] - 50) < 1e-9 for g in rows[0]["gpus"]) and
     rows[0]["gpus"][1]["env"]["ucx"] == "UCX_NET_DEVICES=rdmap96s0:1,rdmap97s0:1,rdmap98s0:1,rdmap99s0:1" and
     rows[0]["gpus"][1]["env"]["nccl"] is None and rows[0]["job_env"] == "FI_PROVIDER=efa" and
     all(n["fabric"] == "EFA" and n["gpus"] == 1 for n in rows[0]["nics"]) and
     rows[0]["figures"]["inter_gbps"] == 50 and rows[0]["figures"]["nics"] == 32 and
     rows[0]["gdr"] is None'
"$bin/dcp-topo" --xml "$here/h100-ib.xml" --json >"$work/dgx.json" || fail "dcp-topo --xml h100-ib.xml"
json_check "$work/dgx.json" \
    'all(len(g["nics"]) == 1 for g in rows[0]["gpus"]) and
     rows[0]["gpus"][3]["env"]["nccl"] == "NCCL_IB_HCA==mlx5_5:1" and
     rows[0]["gpus"][3]["env"]["ucx"] == "UCX_NET_DEVICES=mlx5_5:1" and
     [n["fabric"] for n in rows[0]["nics"] if n["gpus"]] == ["InfiniBand"] * 8 and
     rows[0]["job_env"] is None'
"$bin/dcp-topo" --xml "$here/p5.xml" | grep -q "^3) export UCX_NET_DEVICES=rdmap130s0:1,rdmap131s0:1,rdmap132s0:1,rdmap133s0:1 ;;$" ||
    fail "dcp-topo --xml p5.xml: no pinning line for local rank 3"
"$bin/dcp-topo" --json >"$work/here.json" || fail "dcp-topo on this machine"
json_check "$work/here.json" 'isinstance(rows[0]["gdr"]["possible"], bool) and rows[0]["gdr"]["kernel"]'

# 2. flag blame: a bad bus id names --busids, a bad capture --xml
expect 2 "--busids:" "$bin/dcp-topo" --xml "$here/h100-ib.xml" --busids 0000:ff:00.0
expect 2 "--xml:" "$bin/dcp-topo" --xml "$work/missing.xml" --busids 0000:ff:00.0
expect 2 "--tokens:" "$bin/dcp-plan" --tokens 0

# 3. outputs are checked before any work: a --svg in a missing folder fails at once
expect 2 "--svg:" "$bin/dcp-plan" --svg "$work/missing/plan.svg" --tokens 1000000 --batches 50
expect 2 "--write-table:" "$bin/dcp-kernel-bench" --device cpu --write-table "$work/missing/t"
expect 2 "add attn to --kernel" "$bin/dcp-kernel-bench" --device cpu --kernel merge \
    --write-table "$work/t"
# ... a flag where a value belongs is a missing value, not a file named --json; nothing
# sampled or simulated is ignored silently; --scale never wraps a length
expect 2 "--hgr: needs a value, got the flag --json" "$bin/dcp-plan" --seqlens 100 --hgr --json
[ ! -e ./--json ] && [ ! -e "$work/--json" ] || fail "dcp-plan wrote a file named --json"
expect 2 "--tokens:" "$bin/dcp-plan" --seqlens 100 --tokens 5000
expect 2 "--batches:" "$bin/dcp-plan" --seqlens 100 --batches 2
expect 2 "--sim-kernels:" "$bin/dcp-plan" --seqlens 100 --sim-kernels h100
expect 2 "--scale: a length of 200 x 1e+17" "$bin/dcp-plan" --seqlens 200 --scale 1e17
"$bin/dcp-plan" --tokens 4096 --max-len 500 --batches 2 --ranks 2 --block 64 \
    --strategy ring >"$work/maxlen" 2>&1 || fail "dcp-plan --max-len: $(tail -3 "$work/maxlen")"
grep -q "longest [1-4][0-9][0-9])" "$work/maxlen" || fail "dcp-plan --batches ignores --max-len"
# ... outputs are written whole or not at all: a failing --partition leaves no --hgr behind
expect 2 "--partition:" "$bin/dcp-plan" --seqlens 300 --block 64 --strategy ring \
    --hgr "$work/all.hgr" --partition /proc/dcp-no-such-file
[ ! -e "$work/all.hgr" ] || fail "dcp-plan left --hgr behind when --partition failed"
ls "$work"/*.tmp.* >/dev/null 2>&1 && fail "dcp-plan left a temporary file: $(ls "$work"/*.tmp.*)"
# ... a lengths file is read by whole lines, however long
{ printf '%*s123\n' 300 ''; echo 77; } >"$work/long.lengths"
"$bin/dcp-plan" --lengths-file "$work/long.lengths" --tokens 200 --ranks 2 --block 64 \
    --strategy ring >"$work/lf" 2>&1 || fail "dcp-plan --lengths-file: $(tail -3 "$work/lf")"
grep -q "2 sequences (longest 123)" "$work/lf" || fail "long line: $(head -1 "$work/lf")"

# 4. --help shows the defaults the runs use (dcp-plan's are its own, not the shared ones)
"$bin/dcp-plan" --help >"$work/help" || fail "dcp-plan --help"
grep -q -- "--heads N .*(default 8)" "$work/help" || fail "dcp-plan --help: heads default"
grep -q -- "--block N .*(default 1024)" "$work/help" || fail "dcp-plan --help: block default"
grep -q -- "--tokens N .*(default 131072)" "$work/help" || fail "dcp-plan --help: tokens default"

# 5. capacity errors name the strategy asked for and exit 2
expect 2 "strategy zigzag" "$bin/dcp-plan" --strategy zigzag --mem-cap 1000 --tokens 8192

# 6. the bench harness: median within [min, max], units beside ucx_perftest's; the transport
#    bench in nccl-tests' shape: -b/-e/-f sweeps, every pair of 3 ranks, the data check (which
#    sees a flipped bit), flags it cannot honour refused by name
"$bin/dcp-transport-bench" --engine inproc --sizes 8,64K --mb 2 --reps 3 --json \
    >"$work/tb.json" || fail "dcp-transport-bench --json"
json_check "$work/tb.json" \
    'all(r["time_us_min"] <= r["time_us"] <= r["time_us_max"] and
         r["latency_us_min"] <= r["latency_us"] <= r["latency_us_max"] and
         abs(r["algbw"] - r["size"] / r["time_us"] / 1e3) < 1e-4 * r["algbw"] and
         r["busbw"] == r["algbw"] and r["wrong"] == 0 and r["count"] == r["size"] and
         abs(r["mibps"] - r["algbw"] * 1e9 / 2**20) < 1e-3 * r["mibps"] + 1e-9 and
         r["link"] == "threads" and r["ucx_tls"] is None for r in rows)'
"$bin/dcp-transport-bench" --engine inproc --ranks 3 -b 1K -e 64K -f 8 --mb 1 --reps 2 --json \
    >"$work/tb3.json" || fail "dcp-transport-bench --ranks 3 -b 1K -e 64K -f 8"
json_check "$work/tb3.json" \
    '[(r["peers"], r["size"]) for r in rows] ==
     [(p, s) for p in ("0->1", "0->2", "1->2") for s in (1024, 8192, 65536)]'
DCP_FAULT=1:check:flip expect 1 "the check found 1 bytes that differ" \
    "$bin/dcp-transport-bench" --engine inproc --sizes 4K --mb 1 --reps 1
grep -q "Out of bounds values : 1 FAILED" "$work/out" || fail "a flipped bit is not counted: $(tail -3 "$work/out")"
expect 2 "--memory: inproc moves host memory" "$bin/dcp-transport-bench" --engine inproc --memory device
expect 2 "--pattern: rails join nodes" "$bin/dcp-transport-bench" --engine inproc --pattern rails
expect 2 "--maxbytes: 1K is below --minbytes 4K" "$bin/dcp-transport-bench" --engine inproc -b 4K -e 1K
expect 2 "--sizes: give a list or -b/-e/-f" "$bin/dcp-transport-bench" --engine inproc --sizes 8 -b 8
"$bin/dcp-attn-test" --tokens 1024 --strategy zigzag --json --warmup 1 --iters 3 \
    >"$work/at.json" || fail "dcp-attn-test --json"
json_check "$work/at.json" \
    'all(r["exec_ms_min"] <= r["exec_ms"] <= r["exec_ms_max"] and r["max_rel_err"] is None
         for r in rows)'

# 7. the kernel tables dcp-kernel-bench writes (--write-table, --json) are ones dcp-plan
#    reads (--kernel-table, --sim-kernels)
"$bin/dcp-kernel-bench" --device cpu --kernel attn --mask causal --total 512 --tile 64,128 \
    --warmup 0 --iters 1 --peak-tflops 0.01 --write-table "$work/kt" --json >/dev/null 2>&1 ||
    fail "dcp-kernel-bench --write-table"
[ "$(grep -vc '^#' "$work/kt")" = 2 ] || fail "kernel table: $(cat "$work/kt")"
"$bin/dcp-plan" --kernel-table "$work/kt" --tokens 8192 --strategy zigzag >/dev/null ||
    fail "dcp-plan --kernel-table reads dcp-kernel-bench's table"
"$bin/dcp-kernel-bench" --device cpu --kernel attn,bwd,merge,copy --mask causal --total 512 \
    --tile 128 --warmup 0 --iters 1 --json >"$work/kb.json" 2>/dev/null ||
    fail "dcp-kernel-bench --json"
"$bin/dcp-plan" --sim-kernels "$work/kb.json" --simulate --tokens 8192 --strategy zigzag \
    >/dev/null || fail "dcp-plan --sim-kernels reads dcp-kernel-bench --json"
sed '2s/"tile": 128/"tile": -64/' "$work/kb.json" >"$work/kb-bad.json"
expect 2 "kb-bad.json' line 2" "$bin/dcp-plan" --sim-kernels "$work/kb-bad.json" --simulate \
    --tokens 8192 --strategy zigzag

# 8. the attention engine: the twin runs cuDNN's data path on the CPU and passes, the race
#    check counts its runs, the window goes to the band classes, forward and backward; a CPU
#    context asked for cuDNN runs dcp's kernels and says why
"$bin/dcp-attn-test" --tokens 1024 --strategy lpt --mask causal,window:300 --check --backward \
    --engine twin --repeat 2 --warmup 0 --iters 1 --json >"$work/eng.json" ||
    fail "dcp-attn-test --engine twin --repeat 2"
json_check "$work/eng.json" \
    'all(r["engine"] == "twin" and r["passed"] and r["bwd_passed"] and r["repeat_runs"] == 2
         and r["mismatches"] == 0 for r in rows)
     and rows[0]["pairs_full"] + rows[0]["pairs_causal"] > 0
     and rows[1]["pairs_band"] + rows[1]["pairs_left"] > 0
     and rows[1]["bwd_pairs_band"] + rows[1]["bwd_pairs_left"] > 0'
DCP_ATTN_ENGINE=cudnn "$bin/dcp-attn-test" --tokens 1024 --warmup 0 --iters 1 --json \
    >"$work/eng2.json" || fail "DCP_ATTN_ENGINE=cudnn dcp-attn-test on the CPU"
json_check "$work/eng2.json" 'all(r["engine"] == "own" and "CPU" in r["engine_note"] for r in rows)'

# 9. --layers: bad kinds blame --layers (and --compare without it, --compare); a joint plan
#    prints a row per kind and a model row whose step is the kinds' sum, with --compare the
#    alternatives beside it
expect 2 "--layers:" "$bin/dcp-plan" --layers causal,window:64:2
expect 2 "--layers:" "$bin/dcp-plan" --layers causal:0
expect 2 "--layers:" "$bin/dcp-plan" --layers causal:1 --mask causal
expect 2 "--layers:" "$bin/dcp-attn-test" --layers nope:1
expect 2 "--compare:" "$bin/dcp-plan" --compare
expect 2 "--hgr:" "$bin/dcp-plan" --layers causal:1,window:64:2 --hgr "$work/h.hgr"
"$bin/dcp-plan" --layers causal:1,window:256:3 --tokens 8192 --block 256 --strategy metis,lpt \
    --compare --json >"$work/layers.json" || fail "dcp-plan --layers --compare"
json_check "$work/layers.json" \
    'len(rows) == 2 * 4 * 3 and all(
         abs(m["step_ms"] - m["relayout_ms"] - sum(r["layers"] * r["step_ms"] for r in rows
             if r["kind"] is not None and (r["strategy"], r["placement"]) ==
             (m["strategy"], m["placement"]))) < 1e-5 * m["step_ms"]
         and (m["relayout_ms"] > 0) == (m["placement"] == "per-kind")
         for m in rows if m["kind"] is None)'
"$bin/dcp-attn-test" --layers causal:1,window:256:3 --tokens 2048 --block 256 --check \
    --backward --warmup 0 --iters 1 >"$work/layers.txt" || fail "dcp-attn-test --layers"
[ "$(grep -c PASS "$work/layers.txt")" = 3 ] || fail "dcp-attn-test --layers: $(cat "$work/layers.txt")"

# 10. dcp-plan --simulate explains each pass: the critical path's parts add up to the pass,
#    the exposed split to the slowest rank's exposed time; with --svg, a rank's timeline
"$bin/dcp-plan" --cluster 2x4 --tokens 16384 --strategy metis --simulate --json \
    --svg "$work/p.svg" --svg-rank 3 >"$work/sim.json" 2>/dev/null || fail "dcp-plan --simulate"
json_check "$work/sim.json" '
all(abs(sum(x["path"]["xfer"]["by_kind"].values()) + x["path"]["attn_ms"] +
        x["path"]["memory_ms"] + x["path"]["latency_ms"] - x["ms"]) < 1e-4 * x["ms"] and
    abs(sum(x["exposed"]["by_link"].values()) - x["exposed_comm_ms"]) < 1e-4 * x["ms"] and
    abs(sum(x["exposed"]["by_step"].values()) - x["exposed_comm_ms"]) < 1e-4 * x["ms"] and
    x["busiest_compute_ms"] >= x["compute_ms"] * (1 - 1e-9)
    for r in rows for x in (r["sim_fwd"], r["sim_bwd"])) and
set(rows[0]["sim_bwd"]["exposed"]["by_kind"]) == {"q_do", "stats", "kv", "dq", "dkv"}'
grep -q "rank 3 ends at" "$work"/p-causal-*-timeline.svg || fail "dcp-plan --svg: no timeline"

# 11. dcp-calibrate's files are ones the tools read: its node file as a cluster
#    (--cluster Nx@FILE, its devices and figures), its kernel table as the simulator's; bad
#    block sizes name --tiles, a missing folder --out
"$bin/dcp-calibrate" --ranks 2 --tiles 64,128 --tokens 512 --reps 1 --warmup 0 \
    --out "$work/cal" >"$work/cal.txt" 2>&1 || fail "dcp-calibrate: $(tail -8 "$work/cal.txt")"
grep -q "^devices 2$" "$work/cal.node" && [ "$(grep -c '^kernel ' "$work/cal.node")" = 2 ] ||
    fail "dcp-calibrate node file: $(cat "$work/cal.node")"
"$bin/dcp-plan" --cluster "3x@$work/cal.node" --seqlens 3000,700 --dtype fp32 --heads 4 \
    --head-dim 64 --strategy lpt --simulate --sim-kernels "$work/cal.json" --json \
    >"$work/calp.json" || fail "dcp-plan reads dcp-calibrate's files"
json_check "$work/calp.json" 'rows[0]["ranks"] == 6 and rows[0]["sim_fwd_ms"] > 0'
expect 2 "--tiles:" "$bin/dcp-calibrate" --out "$work/x" --tiles 128,64
expect 2 "--tiles:" "$bin/dcp-calibrate" --out "$work/x" --tiles 64,100000 --tokens 2048
expect 2 "--out:" "$bin/dcp-calibrate" --out "$work/missing/x"

# 12. --version on every tool: the library's version, equal to the header's
want=$(sed -n 's/^#define DCP_VERSION_\(MAJOR\|MINOR\|PATCH\) //p' "$here/../../include/dcp.h" | paste -sd.)
for t in dcp-attn-test dcp-calibrate dcp-plan dcp-topo dcp-kernel-bench dcp-transport-bench; do
    "$bin/$t" --version >"$work/v" 2>&1 || fail "$t --version exited non-zero"
    grep -q "^$t (dcp) $want, built with dcp.h $want$" "$work/v" || fail "$t --version: $(cat "$work/v")"
done

# 13. dcp-plan --json reports each plan's work buffers, on one rank (the accumulators; nothing
# moves) and on eight (received blocks and partials too)
"$bin/dcp-plan" --cluster 1x1 --tokens 4096 --mask causal --strategy lpt --json >"$work/one.json" \
    2>/dev/null || fail "dcp-plan --json on 1x1"
"$bin/dcp-plan" --cluster 1x8 --tokens 4096 --mask causal --strategy ring --json \
    >"$work/eight.json" 2>/dev/null || fail "dcp-plan --json on 1x8"
json_check "$work/one.json" 'rows[0]["max_buffer_bytes"] > 0 and rows[0]["max_rank_bytes"] == 0'
json_check "$work/eight.json" 'rows[0]["max_buffer_bytes"] > 0 and rows[0]["max_rank_bytes"] > 0'

# 14. the peer policies: --strategy peers compares them with the default batch by batch (every
# one planned, the default's row 1.000); a parameter where none is taken, a group of ranks the
# KV heads do not divide among and two kernel tables at once each blame their flag
"$bin/dcp-plan" --cluster 2x4 --tokens 16384 --kv-heads 4 --strategy peers,magi:512 --simulate \
    --kernels h100-cudnn >"$work/peers" 2>"$work/peers.err" ||
    fail "dcp-plan --strategy peers: $(tail -3 "$work/peers.err")"
python3 - "$work/peers" <<'PY' || fail "dcp-plan --strategy peers: the comparison table"
import sys
lines = open(sys.argv[1]).read().split("against the default")[1].splitlines()
rows = {l.split()[0]: l.split() for l in lines if l and l.split()[0] in
        ("metis", "packed", "dyncp", "ulysses", "usp", "magi", "magi:512")}
assert len(rows) == 7, rows
assert rows["metis"][3] == "1.000", rows["metis"]
PY
grep -q "kernels h100-cudnn" "$work/peers" || fail "dcp-plan --kernels: not in the header"
expect 2 "--strategy: strategy 'metis:2'" "$bin/dcp-plan" --seqlens 100 --strategy metis:2
expect 2 "--sim-kernels: not with --kernels" "$bin/dcp-plan" --seqlens 100 --simulate \
    --kernels h100-dcp --sim-kernels h100
expect 1 "num_kv_heads = 2" "$bin/dcp-attn-test" --ranks 4 --tokens 512 --strategy ulysses:4 \
    --warmup 0 --iters 1

# 15. dcp's settings: dcp-topo --env prints every one with the value in force and where it
# came from (a bad value named, exit 1); a bad library setting fails a job by name; DCP_DEBUG=INFO
# logs the engines, the plan and the segments, and nothing is logged without it
DCP_TIMEOUT_S=7 "$bin/dcp-topo" --env --json >"$work/env.json" || fail "dcp-topo --env --json"
json_check "$work/env.json" '
{s["name"]: (s["value"], s["from"]) for s in rows[0]["settings"]}["DCP_TIMEOUT_S"] ==
    ("7", "environment") and
{s["name"]: (s["value"], s["from"]) for s in rows[0]["settings"]}["DCP_ATTN_MIN_ROWS"] ==
    ("64", "default") and
{s["name"]: s["scope"] for s in rows[0]["settings"]}["DCP_LIB"] == "python" and
all(s["error"] is None and s["effect"] for s in rows[0]["settings"])'
DCP_TIMEOUT_S=5s "$bin/dcp-topo" --env >"$work/env.txt"
[ $? = 1 ] && grep -q '^DCP_TIMEOUT_S=5s .*# environment: $DCP_TIMEOUT_S = "5s": a number of seconds > 0' \
    "$work/env.txt" || fail "dcp-topo --env with DCP_TIMEOUT_S=5s: $(grep TIMEOUT "$work/env.txt")"
expect 2 "--markdown: goes with --env" "$bin/dcp-topo" --markdown
DCP_ATTN_MIN_ROWS=0 expect 1 'DCP_ATTN_MIN_ROWS = "0": an integer in \[1, 1073741824\]' \
    "$bin/dcp-attn-test" --ranks 2 --tokens 512 --warmup 0 --iters 1
DCP_DEBUG=INFO "$bin/dcp-attn-test" --ranks 2 --tokens 2048 --block 128 --strategy zigzag \
    --engine twin --warmup 0 --iters 1 >/dev/null 2>"$work/log" || fail "DCP_DEBUG=INFO dcp-attn-test"
for want in ' INFO INIT intra-node links: engine inproc' ' INFO PLAN plan [0-9]* bound: strategy zigzag, 2 ranks' \
    ' INFO ATTN plan [0-9]* forward: .* pairs on twin'; do
    grep -q "^dcp:[0-9]*:[01]$want" "$work/log" || fail "DCP_DEBUG=INFO: no line '$want': $(head -5 "$work/log")"
done
"$bin/dcp-attn-test" --ranks 2 --tokens 2048 --block 128 --warmup 0 --iters 1 >/dev/null \
    2>"$work/nolog" || fail "dcp-attn-test without DCP_DEBUG"
grep -q '^dcp:' "$work/nolog" && fail "dcp-attn-test logs without DCP_DEBUG: $(head -3 "$work/nolog")"

if [ "$failures" -ne 0 ]; then
    echo "tests/tools: $failures failure(s)"
    exit 1
fi
echo "tests/tools: all passed"
