#!/bin/sh
# libs/wire loopback throughput against a plain TCP socket, measured in the same run (these
# machines are shared and noisy: only the ratios mean something).
#   bench/wire_throughput.sh [BUILD_DIR] [REPS]
# Builds bench_wire_throughput in BUILD_DIR (default build/) and runs the default configuration
# (1 MiB chunks, TCP_NODELAY, huge pages for the received tensor) and the variants that the
# investigation of slow transfers looked at.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
reps=${2:-15}
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
fi
ninja -C "$build" -j1 bench_wire_throughput
bin=$build/bench/bench_wire_throughput
for variant in "" "--no-huge-pages" "--raw-reuse" "--chunk-kib 256" "--chunk-kib 4096" \
               "--ez" "--tls" "--nagle" "--inline"; do
  echo
  # shellcheck disable=SC2086
  "$bin" --reps "$reps" $variant | sed -n '1p;/^raw /p;/^wire /p;/^ratio /p'
done
