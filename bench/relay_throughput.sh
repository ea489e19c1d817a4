#!/bin/sh
# Throughput through a relay (a node behind NAT, docs/relay.md) against a direct link to the same
# node, same run, TLS on both (these machines are shared and noisy: only the ratio means much).
#   bench/relay_throughput.sh [BUILD_DIR] [REPS] [MIB]
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
reps=${2:-9}
mib=${3:-64}
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
fi
ninja -C "$build" -j1 bench_relay_throughput
"$build/bench/bench_relay_throughput" --reps "$reps" --mib "$mib"
