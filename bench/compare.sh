#!/usr/bin/env bash
# Runs weir's benchmark and the LangGraph peer benchmark on this machine, one after the
# other, and prints each metric side by side with the ratio.
#
#   bench/compare.sh            # both engines (installs LangGraph into a venv on first use)
#   RUNS=3 bench/compare.sh     # the median of three runs of each
#
# Needs: cargo, python3 (venv + pip); the peer script lives in ../shared/bench/.
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${RUNS:-1}"
peer_dir="${PEER_DIR:-../shared/bench}"
venv="${LG_VENV:-$HOME/.cache/weir-tools/lg-venv}"
out="$(mktemp -d)"

if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet langgraph==1.2.24 langgraph-checkpoint-sqlite==3.1.2
fi

cargo build --release --quiet -p weir-bench -p weir-cli
bin="${CARGO_TARGET_DIR:-target}/release"
for i in $(seq 1 "$runs"); do
  "$bin/weir-bench" > "$out/weir-$i.jsonl"
  "$venv/bin/python" "$peer_dir/langgraph_bench.py" > "$out/lg-$i.jsonl"
  # The agent loop: LangGraph's prebuilt ReAct agent on the script weir's `react` plays.
  "$venv/bin/python" "$peer_dir/langgraph_agent_bench.py" react >> "$out/lg-$i.jsonl"
done

# Whole-process start-up: `weir run` of a two-node workflow on the mock model.
db="$out/startup.db"
start=$(date +%s%N)
for _ in $(seq 1 20); do
  "$bin/weir" --db "$db" run bench/startup.json --input '{"who": "Ada"}' > /dev/null 2>&1
done
end=$(date +%s%N)
echo "{\"bench\": \"startup\", \"metric\": \"weir_run_process\", \"value\": $(( (end - start) / 20000 )), \"unit\": \"us\"}" > "$out/startup.jsonl"

python3 - "$out" "$runs" <<'PY'
import json, statistics, sys, glob
out, runs = sys.argv[1], int(sys.argv[2])
def load(prefix):
    vals = {}
    for f in sorted(glob.glob(f"{out}/{prefix}-*.jsonl")):
        for line in open(f):
            r = json.loads(line)
            if isinstance(r["value"], (int, float)):
                vals.setdefault((r["bench"], r["metric"]), (r["unit"], []))[1].append(r["value"])
    return {k: (u, statistics.median(v)) for k, (u, v) in vals.items()}
weir, lg = load("weir"), load("lg")
print(f"{'bench':<14} {'metric':<22} {'weir':>12} {'langgraph':>12} {'unit':<7} {'weir advantage':>14}")
for key in sorted(set(weir) | set(lg)):
    if key[0] == "env":
        continue
    w, l = weir.get(key), lg.get(key)
    unit = (w or l)[0]
    higher_is_better = unit.endswith("/s")
    if w and l and w[1] and l[1] and unit != "count":
        ratio = f"{(w[1] / l[1]) if higher_is_better else (l[1] / w[1]):.1f}x"
    else:
        ratio = "-"
    fmt = lambda x: f"{x[1]:.3f}" if x else "-"
    print(f"{key[0]:<14} {key[1]:<22} {fmt(w):>12} {fmt(l):>12} {unit:<7} {ratio:>14}")
for line in open(f"{out}/startup.jsonl"):
    r = json.loads(line)
    print(f"{r['bench']:<14} {r['metric']:<22} {r['value']:>12} {'-':>12} {r['unit']:<7} {'-':>14}")
PY
echo "raw results: $out" >&2
