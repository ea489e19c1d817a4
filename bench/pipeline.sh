#!/usr/bin/env bash
# Pipeline throughput against single-process LibTorch, with each stage's busy fraction and the
# stage bound (bench/pipeline_throughput.cpp): the digits CNN (batch 64 in 4 micro-batches of 16:
# overhead-bound) and resnet18 at 32x32 (batch 32 in 4 micro-batches of 8: compute-bound), each
# on 2 and 3 local daemons. Run from the repository root after scripts/build.
#   bench/pipeline.sh [--models digits,resnet18] [--stages "2 3"] [--plain]
# --plain: each pipeline again over plain TCP, to show what TLS costs.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${RAVNEST_BUILD_DIR:-build}
models=digits,resnet18
stages="2 3"
plain=()
while [ $# -gt 0 ]; do
  case "$1" in
    --models) models=$2; shift 2 ;;
    --stages) stages=$2; shift 2 ;;
    --plain) plain=(--plain); shift ;;
    *) echo "bench/pipeline.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
ninja -C "$build" bench_pipeline_throughput ravnestd >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for model in ${models//,/ }; do
  case "$model" in
    digits)
      mkdir -p "$work/digits"
      /usr/bin/python3 examples/digits/make_data.py --out "$work/digits" >/dev/null
      sed 's/^epochs = 15/epochs = 3/; s/^validation = .*//' configs/job_digits.toml \
        > "$work/digits/job.toml"
      # shellcheck disable=SC2086
      "$build/apps/bench/bench_pipeline_throughput" "${plain[@]}" "$work/digits/small_cnn.pt" \
        "$work/digits/job.toml" $stages ;;
    resnet18)
      mkdir -p "$work/resnet18"
      /usr/bin/python3 bench/wan/make_resnet.py --out "$work/resnet18" --train 640 --val 32
      cat > "$work/resnet18/job.toml" <<'JOB'
[train]
epochs = 2
batch_size = 32
micro_batches = 4
seed = 0
schedule = "1f1b"

[data]
format = "tensors"
train = "images_train.pt"
num_classes = 10

[loss]
name = "cross_entropy"

[optimizer]
name = "adam"
lr = 0.001
JOB
      # shellcheck disable=SC2086
      "$build/apps/bench/bench_pipeline_throughput" "${plain[@]}" "$work/resnet18/resnet18.pt" \
        "$work/resnet18/job.toml" $stages ;;
    *) echo "bench/pipeline.sh: unknown model $model (digits, resnet18)" >&2; exit 2 ;;
  esac
  echo
done
