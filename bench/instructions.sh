#!/usr/bin/env bash
# Instruction counts of weir's in-memory workloads and of the durable chain without fsync,
# under `valgrind --tool=callgrind`: unlike wall-clock times on a busy 2-core VM, they repeat
# (to a few parts in a thousand) for the same binary, so a change's effect can be read off
# them. Each workload runs at two sizes on one thread; the difference of the totals divided
# by the extra nodes (or iterations) is the count per node, with start-up and warm-up
# cancelled out.
#
#   bench/instructions.sh                 # chain fanout loop launch durable_normal durable_state
#   bench/instructions.sh durable_long    # a 400-node durable run (not in the default list: slow under valgrind)
#   bench/instructions.sh chain loop      # some of them
#
# Prints JSON lines {"bench", "metric": "instructions_per_…", "value", "unit": "instr"}.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "needs valgrind (apt-get install valgrind)" >&2; exit 2; }
[ -n "${WEIR_BENCH_BIN:-}" ] || cargo build --release --quiet -p weir-bench
bin="${WEIR_BENCH_BIN:-${CARGO_TARGET_DIR:-target}/release/weir-bench}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

# workload → small runs, large runs, units of work per run, unit name
declare -A small=([chain]=5 [fanout]=5 [loop]=2 [durable_normal]=3 [durable_state]=3 [launch]=20 [durable_long]=1)
declare -A large=([chain]=25 [fanout]=25 [loop]=6 [durable_normal]=13 [durable_state]=13 [launch]=100 [durable_long]=3)
declare -A per=([chain]=20 [fanout]=1 [loop]=100 [durable_normal]=20 [durable_state]=20 [launch]=1 [durable_long]=400)
declare -A unit=([chain]=node [fanout]=run [loop]=iteration [durable_normal]=node [durable_state]=node [launch]=run [durable_long]=node)

count() { # workload runs → total instructions
  WEIR_BENCH_RUNTIME=current_thread WEIR_BENCH_RUNS="$2" \
    valgrind --tool=callgrind --callgrind-out-file="$out/cg.$1.$2" "$bin" "$1" >/dev/null 2>"$out/log"
  awk '/^(summary|totals):/ {print $2; exit}' "$out/cg.$1.$2"
}

for w in "${@:-chain fanout loop launch durable_normal durable_state}"; do
  for name in $w; do
    a=$(count "$name" "${small[$name]}")
    b=$(count "$name" "${large[$name]}")
    units=$(( (${large[$name]} - ${small[$name]}) * ${per[$name]} ))
    echo "{\"bench\": \"$name\", \"metric\": \"instructions_per_${unit[$name]}\", \"value\": $(( (b - a) / units )), \"unit\": \"instr\"}"
  done
done
