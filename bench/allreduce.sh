#!/usr/bin/env bash
# Our ring between local daemons next to Gloo's (c10d::ProcessGroupGloo), same run, for N = 2 and
# 4 members and 4 MiB and 64 MiB of float32: `ravnest bench allreduce` (median of --reps), the
# whole grid repeated --runs times back to back. Prints each run's bus-bandwidth ratio
# (ours / Gloo) and, per cell, the median and the lowest ratio over the runs. Plain TCP on both
# sides by default (Gloo has no encryption); --tls measures our daemons with TLS, as they run in
# production (docs/performance.md says what TLS costs). The daemons, all on this host, pass
# segments through shared memory unless --no-shared-memory (then through their connections, as
# daemons on different hosts do). --hosts puts each daemon and each Gloo rank in a network
# namespace of its own (scripts/wan's bridge, veth links: TCP as between hosts; needs root);
# --rate R shapes those links (tbf) and adds each run's measured link bound and the ratios to it;
# --codec C runs our ring under that [compression] rings codec (effective bandwidth, float32
# bytes). --nodes and --sizes change the grid (slow links: smaller sizes).
#   bench/allreduce.sh [--runs 5] [--reps 10] [--tls] [--no-shared-memory] [--hosts]
#                      [--rate 100mbit] [--codec int8] [--nodes "2 4"] [--sizes "4MiB 64MiB"]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${RAVNEST_BUILD_DIR:-build}
runs=5 reps=10 insecure=--insecure shared= hosts=() codec=() node_counts="2 4" sizes="4MiB 64MiB"
while [ $# -gt 0 ]; do
  case $1 in
    --runs) runs=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --tls) insecure=; shift ;;
    --no-shared-memory) shared=--no-shared-memory; shift ;;
    --hosts) hosts+=(--hosts); shift ;;
    --rate) hosts+=(--hosts --rate "$2"); shift 2 ;;
    --codec) codec=(--codec "$2"); shift 2 ;;
    --nodes) node_counts=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    *) echo "bench/allreduce.sh: unknown flag $1" >&2; exit 2 ;;
  esac
done
bash scripts/build ravnest ravnestd >/dev/null
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for run in $(seq "$runs"); do
  for nodes in $node_counts; do
    for size in $sizes; do
      # The link bound ("link bound ... = X GB/s"), with --rate; 0 without.
      "$build/apps/ravnest/ravnest" bench allreduce --nodes "$nodes" --size "$size" \
          --reps "$reps" $insecure $shared "${hosts[@]}" "${codec[@]}" |
        awk -v run="$run" -v n="$nodes" -v size="$size" '
          /^ravnest ring/ { ours = $13 } /^gloo/ { gloo = $12 }
          /^link bound/ { for (i = 1; i < NF; ++i) if ($i == "=") bound = $(i + 1) }
          END { printf "%d %d %s %.4f %.4f %.2f %.4f %.2f\n", run, n, size, ours, gloo,
                       ours / gloo, bound, bound > 0 ? ours / bound : 0 }' |
        tee -a "$out"
    done
  done
done | awk 'BEGIN { print "run  N  size    ours GB/s  gloo GB/s  vs gloo  link GB/s  vs link (bus bandwidth)" }
            { printf "%-4s %-2s %-7s %9s %10s  %6sx %10s  %6sx\n", $1, $2, $3, $4, $5, $6, $7, $8 }'
echo
/usr/bin/python3 - "$out" <<'PY'
import statistics, sys
cells = {}
for line in open(sys.argv[1]):
    run, n, size, ours, gloo, ratio, bound, link_ratio = line.split()
    cells.setdefault((int(n), size), []).append((float(ratio), float(link_ratio)))
print("N  size    vs gloo: median  lowest   vs link bound: median  lowest  (over %d runs)"
      % max(len(v) for v in cells.values()))
for (n, size), ratios in sorted(cells.items()):
    gloo = [r for r, _ in ratios]
    link = [l for _, l in ratios]
    print("%-2d %-7s %14.2fx %7.2fx %21.2fx %7.2fx"
          % (n, size, statistics.median(gloo), min(gloo), statistics.median(link), min(link)))
PY
