#!/bin/sh
# bench/planner.sh [bench_planner's arguments]: plan time, clusters and estimated samples/s of
# plan_pool() on simulated pools of 16, 128, 1000 and 10,000 nodes (RAM 20-160 MB, bandwidth
# 10-1000 Mbps, a resnet18-like profile), beside the search as it was before issue 26 (every pool
# searched whole) up to 128 nodes, where it still finishes. --continuous: every node its own RAM.
set -e
root=$(cd "$(dirname "$0")/.." && pwd)
build=${RAVNEST_BUILD:-$root/build}
[ -x "$build/bench/bench_planner" ] || "$root/scripts/build" bench_planner
exec "$build/bench/bench_planner" "$@"
