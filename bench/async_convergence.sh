#!/usr/bin/env bash
# The digits demo trained synchronously and asynchronously on local daemons, same run: training
# loss per epoch side by side, validation, samples/s (docs/async.md).
#   bench/async_convergence.sh [STAGES] [MAX_IN_FLIGHT]
# Run from the repository root after scripts/build (builds its own target).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${RAVNEST_BUILD_DIR:-build}
ninja -C "$build" bench_async_convergence ravnestd >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 examples/digits/make_data.py --out "$work" >/dev/null
cp configs/job_digits.toml "$work/job.toml"
"$build/apps/bench/bench_async_convergence" "$work" "$@"
