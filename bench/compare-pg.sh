#!/usr/bin/env bash
# weir on Postgres beside the DBOS Transact peer (../shared/bench/DBOS.md), on the same server,
# one after the other, with each metric side by side.
#
#   bench/compare-pg.sh [postgres://postgres@127.0.0.1:5432/postgres]
#
# Installs DBOS into a venv on first use; builds weir-bench and weir in release.
set -euo pipefail
cd "$(dirname "$0")/.."
url="${1:-${WEIR_BENCH_PG:-postgres://postgres@127.0.0.1:5432/postgres}}"
peer_dir="${PEER_DIR:-../shared/bench}"
venv="${DBOS_VENV:-$HOME/.cache/weir-tools/dbos-venv}"
out="$(mktemp -d)"

if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet dbos
fi
cargo build --release --quiet -p weir-bench -p weir-cli
bin="${CARGO_TARGET_DIR:-target}/release"
WEIR_BENCH_PG="$url" WEIR_BIN="$bin/weir" "$bin/weir-bench" pg > "$out/weir.jsonl"
# DBOS takes the server URL without a database (it makes its own).
"$venv/bin/python" "$peer_dir/dbos_bench.py" "${url%/*}" > "$out/dbos.jsonl" 2> "$out/dbos.log"

python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
def load(name):
    return {(r["bench"], r["metric"]): (r["value"], r["unit"])
            for r in map(json.loads, open(f"{out}/{name}.jsonl")) if r["bench"] != "env"}
weir, dbos = load("weir"), load("dbos")
print(f"{'bench':<13} {'metric':<22} {'weir':>10} {'dbos':>10} {'unit':<8} {'weir advantage':>14}")
for key in sorted(set(weir) | set(dbos)):
    w, d = weir.get(key), dbos.get(key)
    unit = (w or d)[1]
    ratio = "-"
    if w and d and w[0] and d[0] and key[1] != "wall_time":
        ratio = f"{(w[0] / d[0]) if unit.endswith('/s') else (d[0] / w[0]):.1f}x"
    fmt = lambda x: f"{x[0]:.1f}" if x else "-"
    print(f"{key[0]:<13} {key[1]:<22} {fmt(w):>10} {fmt(d):>10} {unit:<8} {ratio:>14}")
PY
