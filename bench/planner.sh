#!/bin/sh
# bench/planner.sh [bench_planner's arguments]: plan time, clusters and estimated samples/s of
# plan_pool() on simulated pools of 16, 128, 1000 and 10,000 nodes (RAM 20-160 MB, bandwidth
# 10-1000 Mbps, a resnet18-like profile), beside the search as it was before issue 26 (every pool
# searched whole) up to 128 nodes, where it still finishes. --continuous: every node its own RAM.
#
# bench/planner.sh --write-plan NODES MODEL EXAMPLE_INPUT [SEED]: the plan's files instead:
# `ravnest clusterize MODEL` (no memory probe) on a simulated pool of NODES, with its wall time,
# peak resident memory, the bytes the plan directory holds and its largest node file, e.g.
#   bench/planner.sh --write-plan 10000 small_cnn.pt 64x1x8x8:float32
# (small_cnn.pt: examples/digits/make_data.py --out DIR).
set -e
root=$(cd "$(dirname "$0")/.." && pwd)
build=${RAVNEST_BUILD:-$root/build}
[ -x "$build/bench/bench_planner" ] || "$root/scripts/build" bench_planner
if [ "$1" = "--write-plan" ]; then
  [ $# -ge 4 ] || { echo "bench/planner.sh: --write-plan NODES MODEL EXAMPLE_INPUT [SEED]" >&2; exit 2; }
  nodes=$2 model=$3 input=$4 seed=${5:-1}
  [ -x "$build/apps/ravnest/ravnest" ] || "$root/scripts/build" ravnest
  work=$(mktemp -d /tmp/ravnest_plan_bench_XXXXXX)
  trap 'rm -rf "$work"' EXIT
  "$build/bench/bench_planner" --seed "$seed" --write-pool "$nodes" "$work/pool.json"
  /usr/bin/time -f '%e %M %U %S' -o "$work/time" "$build/apps/ravnest/ravnest" clusterize "$model" \
    --nodes "$work/pool.json" --example-input "$input" --seed "$seed" --no-memory-probe \
    --out "$work/plan" > "$work/log" 2>&1 || { tail -5 "$work/log" >&2; exit 1; }
  read -r seconds rss_kb user sys < "$work/time"
  bytes=$(du -sb "$work/plan" | cut -f1)
  node_files=$(ls "$work/plan/nodes" | wc -l)
  largest=$(ls -lS "$work/plan/nodes" | awk 'NR == 2 { print $5 }')
  stages=$(ls "$work/plan/stages" | wc -l)
  echo "nodes $nodes: clusterize $seconds s (cpu $user s user, $sys s system)," \
       "peak RSS $((rss_kb / 1024)) MB," \
       "plan directory $bytes bytes ($node_files node files, the largest $largest bytes;" \
       "$stages stage files)"
  grep '^phases:' "$work/log" || true
  exit 0
fi
exec "$build/bench/bench_planner" "$@"
