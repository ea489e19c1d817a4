#!/usr/bin/env bash
# Pipelines of daemons on one GPU against one PyTorch process on that GPU, in the same run:
# resnet50 at 224x224 and a GPT-2-small shaped transformer (bench/gpu/make_models.py), each on
# 2 and 3 local daemons that all compute on DEVICE, with each stage's busy fraction and
# `ours/pytorch = X.XXx` (bench/pipeline_throughput.cpp --device --pytorch). PyTorch trains
# the same TorchScript model, batches, micro-batches and optimizer (tests/python/reference_train.py
# --timing). Both sides keep their defaults (TF32 in cuDNN's convolutions, not in matrix products).
# Run from the repository root after building ravnestd and bench_pipeline_throughput.
#   bench/gpu_pipeline.sh [--device cuda:0] [--tiny] [--models resnet50,gpt] [--stages "2 3"]
#                         [--python PY] [--build DIR]
# --tiny: small sizes (bench/gpu/make_models.py --tiny) for a CPU (--device cpu), to test the
# whole path in about a minute; the figures then mean nothing.
# PY defaults to $RAVNEST_PYTHON, else python3 when it imports torch, else /usr/bin/python3.
# On an H100 the full sizes take about 2-3 minutes (models written, stages pushed, 5 trainings
# each).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${RAVNEST_BUILD_DIR:-build}
device=cuda:0
tiny=()
models=resnet50,gpt
stages="2 3"
python=${RAVNEST_PYTHON:-}
while [ $# -gt 0 ]; do
  case "$1" in
    --device) device=$2; shift 2 ;;
    --tiny) tiny=(--tiny); shift ;;
    --models) models=$2; shift 2 ;;
    --stages) stages=$2; shift 2 ;;
    --python) python=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    *) echo "bench/gpu_pipeline.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
if [ -z "$python" ]; then
  if python3 -c 'import torch' 2>/dev/null; then python=python3; else python=/usr/bin/python3; fi
fi
bench=$build/apps/bench/bench_pipeline_throughput
for f in "$bench" "$build/apps/ravnestd/ravnestd"; do
  [ -x "$f" ] || { echo "bench/gpu_pipeline.sh: $f is not built" >&2; exit 2; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "device $device, python $python ($("$python" -c 'import torch; print(torch.__version__)'))"
if [ "${device%%:*}" = cuda ]; then
  "$python" -c 'import torch; print("GPU:", torch.cuda.get_device_name(0))' || true
fi
status=0
for model in ${models//,/ }; do
  echo "== $model $(date -u +%H:%M:%S)"
  "$python" bench/gpu/make_models.py --out "$work/$model" --model "$model" "${tiny[@]}"
  # shellcheck disable=SC2086
  "$bench" --device "$device" --pytorch "$python" --script tests/python/reference_train.py \
    "$work/$model/$model.pt" "$work/$model/job.toml" $stages || status=1
  rm -rf "$work/$model"
  echo
done
echo "== done $(date -u +%H:%M:%S)"
exit $status
