#!/usr/bin/env bash
# Our ring between local daemons next to Gloo's (c10d::ProcessGroupGloo), same run, for N = 2 and
# 4 members and 4 MiB and 64 MiB of float32: `ravnest bench allreduce` (median of --reps), the
# whole grid repeated --runs times back to back. Prints each run's bus-bandwidth ratio
# (ours / Gloo) and, per cell, the median and the lowest ratio over the runs. Plain TCP on both
# sides by default (Gloo has no encryption); --tls measures our daemons with TLS, as they run in
# production (docs/performance.md says what TLS costs). The daemons, all on this host, pass
# segments through shared memory unless --no-shared-memory (then through their connections, as
# daemons on different hosts do).
#   bench/allreduce.sh [--runs 5] [--reps 10] [--tls] [--no-shared-memory]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${RAVNEST_BUILD_DIR:-build}
runs=5 reps=10 insecure=--insecure shared=
while [ $# -gt 0 ]; do
  case $1 in
    --runs) runs=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --tls) insecure=; shift ;;
    --no-shared-memory) shared=--no-shared-memory; shift ;;
    *) echo "bench/allreduce.sh: unknown flag $1" >&2; exit 2 ;;
  esac
done
bash scripts/build ravnest ravnestd >/dev/null
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for run in $(seq "$runs"); do
  for nodes in 2 4; do
    for size in 4MiB 64MiB; do
      "$build/apps/ravnest/ravnest" bench allreduce --nodes "$nodes" --size "$size" \
          --reps "$reps" $insecure $shared 2>/dev/null |
        awk -v run="$run" -v n="$nodes" -v size="$size" '
          /^ravnest ring/ { ours = $13 } /^gloo/ { gloo = $12 }
          END { printf "%d %d %s %.3f %.3f %.2f\n", run, n, size, ours, gloo, ours / gloo }' |
        tee -a "$out"
    done
  done
done | awk 'BEGIN { print "run  N  size    ours GB/s  gloo GB/s  ratio (bus bandwidth)" }
            { printf "%-4s %-2s %-7s %9s %10s  %5sx\n", $1, $2, $3, $4, $5, $6 }'
echo
/usr/bin/python3 - "$out" <<'PY'
import statistics, sys
cells = {}
for line in open(sys.argv[1]):
    run, n, size, ours, gloo, ratio = line.split()
    cells.setdefault((int(n), size), []).append(float(ratio))
print("N  size    median ratio  lowest ratio  (over %d runs)" % max(len(v) for v in cells.values()))
for (n, size), ratios in sorted(cells.items()):
    print("%-2d %-7s %11.2fx %12.2fx" % (n, size, statistics.median(ratios), min(ratios)))
PY
