#!/usr/bin/env bash
# Samples/s of the digits demo on 1, 2 and 3 local daemons next to single-process LibTorch.
# Run from the repository root after scripts/build (builds its own target).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${RAVNEST_BUILD_DIR:-build}
ninja -C "$build" bench_pipeline_throughput ravnestd >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 examples/digits/make_data.py --out "$work" >/dev/null
sed 's/^epochs = 15/epochs = 3/; s/^validation = .*//' configs/job_digits.toml > "$work/job.toml"
"$build/apps/bench/bench_pipeline_throughput" "$work" "$@"
