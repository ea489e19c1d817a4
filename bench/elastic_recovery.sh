#!/usr/bin/env bash
# From a node's death to the job training again (docs/tracker.md#elastic-jobs), on 127.0.0.1: a
# tracker, three one-node clusters of the digits CNN and an idle node, `ravnest train --elastic`;
# node_2 is killed with -9 once cluster 0 has trained 30 batches, and node_3 takes its place; the
# run ends (every process killed) a second after cluster 2 rejoined.
# Per run, the seconds from the kill to the replacement's first batch, broken into: detection
# (the tracker's expiry and the requester's 6 s of silence: the follower acts on the later),
# decision and replacement (the follower's poll, the stage pushed to node_3, plan.json), the wait
# for the requester's next look and the update boundary with the take-in (hold, stop,
# checkpoint copied, load), and the first batch. Baselines from the same run: the expiry
# (detection against it) and the job's update time before the kill (the rest, in updates).
# Medians over the runs. These machines are shared and noisy: the ratios mean more than seconds.
#   bench/elastic_recovery.sh [BUILD_DIR] [RUNS] [EXPIRY_SECONDS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(realpath -m "${1:-$root/build}")
runs=${2:-3}
expiry=${3:-3}
bin=$build/apps
if [ ! -x "$bin/ravnest/ravnest" ] || [ ! -x "$bin/ravnestd/ravnestd" ]; then
  bash "$root/scripts/build" ravnest ravnestd
fi
torch_python=${RAVNEST_PYTHON:-/usr/bin/python3}  # has torch: the model's export
python=$(command -v python3)

free_port() {
  "$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
now() { "$python" -c 'import time; print("%.3f" % time.time())'; }

pids=()
stop_all() {
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  pids=()
}
trap stop_all EXIT

# Waits (at most $2 s) until the command $1 succeeds.
eventually() {
  local i
  for ((i = 0; i < $2 * 5; i++)); do
    if eval "$1" >/dev/null 2>&1; then return 0; fi
    sleep 0.2
  done
  echo "elastic_recovery: timed out waiting for: $1" >&2
  return 1
}

one_run() {
  local work=$1
  trap stop_all EXIT  # one_run runs in a subshell of its own
  mkdir -p "$work/node_data"
  cd "$work"
  "$torch_python" "$root/examples/digits/make_data.py" --out . >/dev/null
  head -c 24 /dev/urandom | base64 >node_data/secret && chmod 600 node_data/secret
  local tracker=127.0.0.1:$(free_port)
  "$bin/ravnest/ravnest" tracker --listen "$tracker" --state-dir tracker --secret-file \
    node_data/secret --heartbeat-seconds 1 --expiry-seconds "$expiry" >tracker.log 2>&1 &
  pids+=($!)
  local ports=() i
  for i in 0 1 2 3; do ports+=("$(free_port)"); done
  start_daemon() {
    "$bin/ravnestd/ravnestd" --node "node_$1" --listen "127.0.0.1:${ports[$1]}" \
      --data-dir "data_node_$1" --secret-file node_data/secret --log-file "node_$1.log" \
      --tracker "$tracker" >/dev/null 2>&1 &
    pids+=($!)
  }
  for i in 0 1 2; do start_daemon "$i"; done
  pool_has() {
    [ "$("$bin/ravnest/ravnest" status --tracker "$tracker" --secret-file node_data/secret 2>/dev/null |
      grep -c 'node_[0-9]')" -ge "$1" ]
  }
  eventually "pool_has 3" 60
  "$bin/ravnest/ravnest" clusterize small_cnn.pt --example-input 32x1x8x8:float32 --clusters 3 \
    --stages 1 --tracker "$tracker" --secret-file node_data/secret --no-memory-probe --push \
    >clusterize.log 2>&1
  start_daemon 3  # idle before the job starts: a spare
  eventually "pool_has 4" 60
  cat >job.toml <<EOF
[train]
epochs = 300
batch_size = 32
micro_batches = 2
seed = 5
schedule = "1f1b"
reduce = "parameters"
max_steps = 100000

[data]
format = "csv"
train = "digits_train.csv"
label_column = "label"
input_shape = [1, 8, 8]
scale = 0.0625
num_classes = 10

[loss]
name = "cross_entropy"

[optimizer]
name = "sgd"
lr = 0.05
EOF
  "$bin/ravnest/ravnest" train job.toml --elastic --tracker "$tracker" >train.log 2>&1 &
  local train=$!
  eventually "grep -q 'metrics (CSV, TensorBoard)' train.log" 120
  local metrics
  metrics=$(sed -n 's/.*metrics (CSV, TensorBoard): //p' train.log | head -1)
  rows() { [ "$(wc -l <"$metrics/cluster_0/metrics.csv" 2>/dev/null || echo 0)" -gt "$1" ]; }
  eventually "rows 30" 120
  kill -9 "${pids[3]}"  # node_2 (pids: tracker, node_0, node_1, node_2, node_3)
  local killed
  killed=$(now)
  wait "${pids[3]}" 2>/dev/null || true  # reaped here: bash says nothing of it
  # The job is long (its length is not the point): once cluster 2 trains again, it ends here.
  eventually "grep -q 'cluster 2 rejoined after update' train.log" $((expiry + 120))
  sleep 1
  kill -9 "$train" 2>/dev/null || true
  wait "$train" 2>/dev/null || true
    "$python" - "$killed" "$metrics" "$expiry" <<'PY'
# Times from the processes' own records, not from train's output (which may come in bursts):
# the tracker's and the daemons' logs (spdlog, milliseconds), elastic.csv (the follower, once the
# replacement is done) and the metrics CSV (the requester, as each batch's event arrives).
import csv, datetime, os, re, statistics, sys
killed, metrics, expiry = float(sys.argv[1]), sys.argv[2], float(sys.argv[3])
def logged(path, pattern, after=0.0):
    for line in open(path, errors="replace"):
        if re.search(pattern, line):
            t = datetime.datetime.strptime(" ".join(line.split(" ")[:2]),
                                           "%Y-%m-%d %H:%M:%S.%f").timestamp()
            if t >= after:
                return t
    sys.exit("elastic_recovery: %s/%s never logged /%s/" % (os.getcwd(), path, pattern))
expired = logged("tracker.log", r"node_2 expired")
dropped = logged("node_0.log", r"ring membership epoch 1 ", killed)  # the requester's drop
with open(os.path.join(metrics, "elastic.csv")) as f:
    replaced = next(float(r["wall_time"]) for r in csv.DictReader(f) if r["kind"] == "replace")
loaded = logged("node_3.log", r"loaded, resuming after update")
started = logged("node_3.log", r"job [0-9]+ started")
said = open("train.log").read()
hold = float(re.search(r"cluster 2 rejoined after update [0-9]+: .*\(([0-9.]+) s from the hold", said,
                       re.S).group(1))
def rows(cluster):
    with open(os.path.join(metrics, "cluster_%d" % cluster, "metrics.csv")) as f:
        return [r for r in csv.DictReader(f) if r["loss"]]
first = min(float(r["wall_time"]) for r in rows(2) if float(r["wall_time"]) > started)
before = [float(r["wall_time"]) for r in rows(0) if float(r["wall_time"]) < killed]
update = statistics.median(b - a for a, b in zip(before, before[1:]))
detected = max(expired, dropped)
# detection parts, decision+replace, the requester's look, hold to start, first batch, total
print("RUN %.2f %.2f %.2f %.2f %.2f %.2f %.2f %.4f" % (
    expired - killed, dropped - killed, replaced - detected, started - replaced - hold, hold,
    first - started, first - killed, update))
PY
  stop_all
  cd - >/dev/null
}

results=()
for ((run = 1; run <= runs; run++)); do
  work=$(mktemp -d "${TMPDIR:-/tmp}/ravnest-elastic-bench-XXXXXX")
  line=$(one_run "$work" | grep '^RUN ')
  results+=("$line")
  read -r _ exp drop decide look hold first total update <<<"$line"
  printf 'run %d: %.1f s from the kill to the first batch: expired %.1f s, dropped %.1f s, decision+replace %.1f s, to the hold %.1f s, hold to start %.1f s, first batch %.2f s (update time %.3f s)\n' \
    "$run" "$total" "$exp" "$drop" "$decide" "$look" "$hold" "$first" "$update"
  rm -rf "$work"
done
printf '%s\n' "${results[@]}" | "$python" -c '
import statistics, sys
runs = [list(map(float, l.split()[1:])) for l in sys.stdin if l.strip()]
m = [statistics.median(c) for c in zip(*runs)]
exp, drop, decide, look, hold, first, total, update = m
expiry = float(sys.argv[1])
detect = max(exp, drop)
print("median of %d: %.1f s from the kill to the replacement'"'"'s first batch" % (len(runs), total))
print("  detection %.1f s: the tracker expired it after %.1f s (%.2fx its --expiry-seconds %g), "
      "the requester dropped its cluster after %.1f s" % (detect, exp, exp / expiry, expiry, drop))
print("  decision+replace %.1f s (the follower'"'"'s poll, the stage pushed, plan.json), to the hold "
      "%.1f s (the requester'"'"'s next look), hold at the boundary to the start %.1f s (stop, "
      "checkpoint copied, load), first batch %.2f s" % (decide, look, hold, first))
print("  after detection: %.1f s = %.0f updates of %.3f s (ratio to the job'"'"'s update time, same run)"
      % (total - detect, (total - detect) / update, update))
print("ratio recovery/expiry: median %.2f" % (total / expiry))
' "$expiry"
