#!/usr/bin/env bash
# The parameter-server example (docs/parameter-server.md): seed 003's LeNet on MNIST-format digits
# with one server, three workers and an evaluator, five local ravnestd daemons, then the servers'
# model fused and loaded strictly in Python.
#   examples/ps/run.sh            (work directory: $RAVNEST_PS_DIR, default ps_run/ in the repo)
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
bash scripts/build ravnest ravnestd >/dev/null
bin=$(realpath -m "${RAVNEST_BUILD_DIR:-build}")/apps  # relative to the repository, or absolute
work=${RAVNEST_PS_DIR:-ps_run}
case $work in /*) ;; *) work=$root/$work ;; esac
rm -rf "$work" && mkdir -p "$work/node_data"
cd "$work"

echo "== 1. MNIST-format data and seed 003's LeNet"
/usr/bin/python3 "$root/examples/ps/make_data.py" --out . | sed 's/^/   /'
cp "$root/examples/ps/job.toml" job.toml

echo "== 2. five provider nodes on this machine; node 0 has the widest link"
/usr/bin/python3 - <<'PY'
import json, socket
ports = []
for _ in range(5):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); ports.append(s.getsockname()[1]); s.close()
pool = {str(i): {"IP": f"127.0.0.1:{p}",
                 "benchmarks": {"ram": 4, "bandwidth": 1000 if i == 0 else 100}}
        for i, p in enumerate(ports)}
json.dump(pool, open("node_data/node_configs.json", "w"), indent=2)
PY

echo "== 3. ravnest clusterize --mode ps --servers 1 --evaluator"
"$bin/ravnest/ravnest" clusterize lenet.pt --example-input 32x1x28x28 --mode ps --servers 1 \
  --evaluator --verify

echo "== 4. one ravnestd per node (logs in $work/node_*.log)"
head -c 24 /dev/urandom | base64 > secret && chmod 600 secret
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null' EXIT
for i in 0 1 2 3 4; do
  address=$(/usr/bin/python3 -c "import json;print(json.load(open('node_data/node_configs.json'))['$i']['IP'])")
  "$bin/ravnestd/ravnestd" --node "node_$i" --listen "$address" --data-dir "data_node_$i" \
    --secret-file secret --log-file "node_$i.log" &
  pids+=($!)
  port=${address##*:}
  for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
done
export RAVNEST_SECRET_FILE=$work/secret

echo "== 5. ravnest push, ravnest train job.toml"
"$bin/ravnest/ravnest" push
"$bin/ravnest/ravnest" train job.toml
"$bin/ravnest/ravnest" status

echo "== 6. ravnest fuse (the servers' model), then Python loads the state dict strictly"
"$bin/ravnest/ravnest" fuse
/usr/bin/python3 "$root/tests/python/load_fused.py" trained/trained_state_dict.pt lenet.pt | sed 's/^/   /'
"$bin/ravnest/ravnest" evaluate trained/model.pt job.toml
