#!/usr/bin/env bash
# Time per step of a synchronous parameter server, ours next to torch.distributed's, same run and
# same setup: seed 003's LeNet on the MNIST-format digits, 1 server + 3 workers, batches of 32,
# SGD with momentum (docs/parameter-server.md#measured).
#   bench/ps/run.sh
# Ours: examples/ps/run.sh (clusterize --mode ps, five daemons with TLS, push, train 4 epochs,
# fuse); its time per step is the batch over a worker's samples/s as `ravnest status` reports it
# (the whole training, first step included). Baseline: bench/ps/torch_ps.py (gloo, 127.0.0.1),
# the median step after two warm-up steps. Prints figures; asserts nothing.
set -euo pipefail
cd "$(dirname "$0")/../.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
RAVNEST_PS_DIR=$work/ours bash examples/ps/run.sh > "$work/ours.log" 2>&1 ||
  { cat "$work/ours.log"; exit 1; }
ours=$(awk '$4 == "worker" && $5 == "finished" {print $NF}' "$work/ours.log" | sort -g | head -1)
accuracy=$(sed -n 's/.*accuracy \([0-9.]*\) (.*/\1/p' "$work/ours.log" | tail -1)
baseline=$(/usr/bin/python3 bench/ps/torch_ps.py --data "$work/ours" --workers 3 --steps 40 |
           sed -n 's/.*: \([0-9.]*\) ms per step/\1/p')
/usr/bin/python3 - "$ours" "$baseline" "$accuracy" <<'PY'
import sys
samples_per_second, baseline_ms, accuracy = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
ours_ms = 1000 * 32 / samples_per_second
print("parameter server, LeNet, 1 server + 3 workers, batch 32, 2 cores")
print("%-34s %10s" % ("", "ms/step"))
print("%-34s %10.2f" % ("ravnest (TLS, 5 daemons)", ours_ms))
print("%-34s %10.2f" % ("torch.distributed gloo (4 procs)", baseline_ms))
print("ratio (gloo time / ours): %.2fx; ravnest's trained model: accuracy %s" %
      (baseline_ms / ours_ms, accuracy))
PY
