#!/usr/bin/env bash
# libs/exported's runtime against eager PyTorch and TorchScript, one thread, same run: one
# micro-batch's forward + backward in train mode for the digits CNN, a resnet basic block,
# resnet50 (224x224) and a GPT-2-small-shaped block (bench/exported_runtime.py writes the models
# and times eager; bench_exported_runtime the .pt2 runtime and TorchScript, interleaved).
# ROUNDS rounds, each eager then the two runtimes, N repetitions a model each; the last lines
# are the medians over rounds of the times and of each round's ratios (a loaded machine drifts:
# a round's ratios compare figures taken a few seconds apart).
# Needs the LibTorch 2.x build and torchvision in its Python: run from the repository root after
#   RAVNEST_BUILD_DIR=build-torch2 bash scripts/build --torch2 bench_exported_runtime
#   bench/exported_runtime.sh [--reps N] [--rounds R] [--models a,b] [--quick]
# --quick: digits and resblock, 10 repetitions, one round (a smoke check, under a minute).
# Defaults: all four models, 8 repetitions, 3 rounds (about 3 minutes on one core).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${RAVNEST_BUILD_DIR:-build-torch2}
python=${RAVNEST_PYTHON:-$HOME/.cache/ravnest/venv-torch2/bin/python}
reps=8 rounds=3 models=digits,resblock,resnet50,gpt2
while [ $# -gt 0 ]; do
  case $1 in
    --reps) reps=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --quick) reps=10 rounds=1 models=digits,resblock; shift ;;
    *) echo "exported_runtime.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for round in $(seq 1 "$rounds"); do
  write=; [ "$round" = 1 ] && write=--write
  OMP_NUM_THREADS=1 "$python" bench/exported_runtime.py --out "$work" --reps "$reps" \
    --models "$models" $write 2>/dev/null
  echo "round $round"
  OMP_NUM_THREADS=1 "$build/bench/bench_exported_runtime" "$work" --reps "$reps" \
    --models "$models" | tee -a "$work/log"
done
echo "medians over $rounds rounds (machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)):"
"$python" bench/exported_runtime.py --summarize "$work/log"
