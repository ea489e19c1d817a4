#!/usr/bin/env bash
# Training over slow links (docs/compression.md#slow-links): the digits CNN and resnet18 (32x32,
# synthetic images) over a 3-stage pipeline of local daemons, on loopback and on links shaped by
# scripts/wan (default 100 Mbit/s, 20 ms one-way), for sync (1f1b), async, async + fp16 and
# async + int8; prints samples/s, bytes per epoch (activations and gradients sent) and
# validation accuracy side by side, with ratios taken in the same run. Needs root.
#   bench/wan.sh [--models digits,resnet18] [--max-in-flight K] [--rate 100mbit] [--delay 20ms]
# --outer (docs/data-parallel.md#diloco): instead, two clusters of one daemon each, time to a
# target validation accuracy for reduce = "gradients", reduce = "parameters" and DiLoCo
# ([outer]) on the digits CNN and a small transformer (bench/wan/bench_outer.py; its flags pass
# on: --H 20,50, --epochs, --outer-lr, --outer-momentum, --val-freq, --repeats,
# --models digits,transformer, --targets digits=0.97; defaults: H 20, digits 10 epochs to 0.97,
# transformer 4 epochs to 0.80).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${RAVNEST_BUILD_DIR:-build}
bash scripts/build ravnest ravnestd wan_relay >/dev/null
work=$(mktemp -d)
rate=100mbit delay=20ms args=() outer=0
while [ $# -gt 0 ]; do
  case $1 in
    --rate) rate=$2; shift 2 ;;
    --delay) delay=$2; shift 2 ;;
    --outer) outer=1; shift ;;
    *) args+=("$1"); shift ;;
  esac
done
wan_name=rnbench; [ "$outer" = 1 ] && wan_name=rndout
cleanup() { bash scripts/wan down --name "$wan_name"; rm -rf "$work"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
/usr/bin/python3 examples/digits/make_data.py --out "$work" >/dev/null
if [ "$outer" = 1 ]; then
  # The test models are exported by ctest's export_test_models fixture (not a ninja target).
  [ -f "$build/test_models/transformer.pt" ] ||
    /usr/bin/python3 tests/models/export_models.py --out "$build/test_models" >/dev/null
  cp "$build/test_models/transformer.pt" "$work/"
  bash scripts/wan up 2 --name "$wan_name" --rate "$rate" --delay "$delay" --port 18600 --net 10.227 >/dev/null
  /usr/bin/python3 bench/wan/bench_outer.py --work "$work" --build "$build" --wan-name "$wan_name" \
    --net 10.227 --port 18600 --rate "$rate" --delay "$delay" "${args[@]}"
  exit 0
fi
/usr/bin/python3 bench/wan/make_resnet.py --out "$work"
bash scripts/wan up 3 --name rnbench --rate "$rate" --delay "$delay" --port 18500 >/dev/null
/usr/bin/python3 bench/wan/bench_wan.py --work "$work" --build "$build" --wan-name rnbench \
  --port 18500 --rate "$rate" --delay "$delay" "${args[@]}"
