#!/usr/bin/env bash
# libs/exported's runtime against eager PyTorch and TorchScript, one thread, same run: one
# micro-batch's forward + backward for the digits CNN and a resnet basic block
# (bench/exported_runtime.py writes the models and times eager; bench_exported_runtime the rest).
# Needs the LibTorch 2.x build: run from the repository root after
#   RAVNEST_BUILD_DIR=build-torch2 bash scripts/build --torch2 bench_exported_runtime
#   bench/exported_runtime.sh [--reps N]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${RAVNEST_BUILD_DIR:-build-torch2}
python=${RAVNEST_PYTHON:-$HOME/.cache/ravnest/venv-torch2/bin/python}
reps=50
[ "${1:-}" = "--reps" ] && reps=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
OMP_NUM_THREADS=1 "$python" bench/exported_runtime.py --out "$work" --reps "$reps" 2>/dev/null
OMP_NUM_THREADS=1 "$build/bench/bench_exported_runtime" "$work" --reps "$reps"
