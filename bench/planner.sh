#!/bin/sh
# bench/planner.sh [bench_planner's arguments]: plan time, clusters and estimated samples/s of
# plan_pool() on simulated pools of 16, 128, 1000 and 10,000 nodes (RAM 20-160 MB, bandwidth
# 10-1000 Mbps, a resnet18-like profile), beside the search as it was before issue 26 (every pool
# searched whole) up to 128 nodes, where it still finishes. --continuous: every node its own RAM.
#
# bench/planner.sh --ga [SIZES] [SEED]: the same pools (default 16,128,1000,10000) with a third
# line each, Ravnest's genetic algorithm (bench/planner/ravnest_ga.py, its published code) given
# the memory this cost model says the model needs, its clusters scored by bench_planner
# --score-clusters (each cluster's best single pipeline, cut by our planner). The GA runs in
# Python for up to RAVNEST_GA_TIMEOUT seconds (600; 60 above 1000 nodes), else "not finished".
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
if [ "$1" = "--ga" ]; then
  sizes=${2:-16,128,1000,10000} seed=${3:-1}
  bench="$build/bench/bench_planner"
  work=$(mktemp -d /tmp/ravnest_ga_bench_XXXXXX)
  trap 'rm -rf "$work"' EXIT
  need=$("$bench" --training-need-mb)
  echo "L for the GA: $need MB (this cost model's need; Ravnest's own get_memory_reqs()" \
       "counts $("$bench" --ravnest-model-mb) MB)"
  for n in $(echo "$sizes" | tr , ' '); do
    "$bench" --seed "$seed" --sizes "$n"
    "$bench" --seed "$seed" --write-pool "$n" "$work/pool.json"
    limit=${RAVNEST_GA_TIMEOUT:-$([ "$n" -gt 1000 ] && echo 60 || echo 600)}
    if timeout "$limit" /usr/bin/python3 "$root/bench/planner/ravnest_ga.py" "$work/pool.json" \
         "$need" "$seed" > "$work/clusters.json" 2> "$work/ga.log"; then
      seconds=$(sed -n 's/^ga: \([0-9.]*\) s.*/\1/p' "$work/ga.log")
      "$bench" --seed "$seed" --seconds "$seconds" --score-clusters "$n" "$work/clusters.json"
      sed 's/^/        /' "$work/ga.log"
    else
      printf '%6s  ga       not finished in %s s\n' "$n" "$limit"
    fi
  done
  exit 0
fi
exec "$build/bench/bench_planner" "$@"
