#!/usr/bin/env bash
# The hybrid example (docs/parameter-server.md#hybrid): seed 004's model, its EmbeddingBag(100, 16)
# on a parameter server, its Linear(16, 8) with an orthogonality penalty data-parallel over two
# trainers; three local ravnestd daemons; then the model fused and loaded strictly in Python.
#   examples/hybrid/run.sh        (work directory: $RAVNEST_HYBRID_DIR, default hybrid_run/)
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
bash scripts/build ravnest ravnestd >/dev/null
bin=$(realpath -m "${RAVNEST_BUILD_DIR:-build}")/apps  # relative to the repository, or absolute
work=${RAVNEST_HYBRID_DIR:-hybrid_run}
case $work in /*) ;; *) work=$root/$work ;; esac
rm -rf "$work" && mkdir -p "$work/node_data"
cd "$work"

echo "== 1. seed 004's model, its loss and the bags of indices"
/usr/bin/python3 "$root/examples/hybrid/make_data.py" --out . | sed 's/^/   /'
cp "$root/examples/hybrid/job.toml" job.toml

echo "== 2. three provider nodes on this machine; node 0 has the widest link"
/usr/bin/python3 - <<'PY'
import json, socket
ports = []
for _ in range(3):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); ports.append(s.getsockname()[1]); s.close()
pool = {str(i): {"IP": f"127.0.0.1:{p}",
                 "benchmarks": {"ram": 4, "bandwidth": 1000 if i == 0 else 100}}
        for i, p in enumerate(ports)}
json.dump(pool, open("node_data/node_configs.json", "w"), indent=2)
PY

echo "== 3. ravnest clusterize --mode hybrid --on-server emb"
"$bin/ravnest/ravnest" clusterize hybrid.pt --example-input 32x8:int64:100 --mode hybrid \
  --on-server emb --verify

echo "== 4. one ravnestd per node (logs in $work/node_*.log)"
head -c 24 /dev/urandom | base64 > secret && chmod 600 secret
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null' EXIT
for i in 0 1 2; do
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

echo "== 6. ravnest fuse (the table from the server, the rest from trainer 0), loaded strictly"
"$bin/ravnest/ravnest" fuse
/usr/bin/python3 "$root/tests/python/load_fused.py" trained/trained_state_dict.pt hybrid.pt | sed 's/^/   /'
"$bin/ravnest/ravnest" evaluate trained/model.pt job.toml
/usr/bin/python3 - <<'PY'
import torch
w = torch.load("trained/trained_state_dict.pt")["fc.weight"].t()
print("   orthogonality of the trained Linear: ||W^T W - I||^2 = %.4f" %
      float(((w.t() @ w - torch.eye(8)) ** 2).sum()))
PY
