#!/usr/bin/env bash
# Clusterizes torchvision's resnet50 over 8 nodes and prints the time of each phase
# (load, profile, plan, cut, save). Run from the repository root after scripts/build.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 tests/models/export_models.py --out "$work/models" --only resnet50 >/dev/null
/usr/bin/python3 - "$work/pool.json" <<'PY'
import json, sys
pool = {str(i): {"IP": f"127.0.0.1:{9100 + i}",
                 "benchmarks": {"ram": [2, 2, 4, 4, 8, 8, 16, 1][i], "bandwidth": 100 + 50 * i}}
        for i in range(8)}
json.dump(pool, open(sys.argv[1], "w"), indent=1)
PY
batch=${BATCH:-32}
/usr/bin/time -f "wall %es, max RSS %MKB" build/apps/ravnest/ravnest clusterize \
  "$work/models/resnet50.pt" --nodes "$work/pool.json" --out "$work/plan" \
  --example-input "${batch}x3x224x224:float32" | grep -E "^(phases|[0-9]+ cluster)"
