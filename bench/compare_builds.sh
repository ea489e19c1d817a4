#!/usr/bin/env bash
# An old build against a new one, same run: the ring (`ravnest bench allreduce`, ours / Gloo) and
# the pipeline (bench_pipeline_throughput on the digits CNN, ours / single-process LibTorch),
# each measured by the old binaries and by the new ones in turn, the order swapped every run so
# that neither side always runs on a warmer machine. Each side's figure is already a ratio to a
# baseline measured beside it, so a loaded machine moves both sides alike; the line that matters
# is new/old (1.00: no change; below 0.95 on the median: look).
#   bench/compare_builds.sh OLD [--new DIR] [--runs 3] [--nodes 2] [--size 64MiB] [--stages 2]
# OLD, DIR: build folders, or any folder holding apps/ravnest/ravnest, apps/ravnestd/ravnestd and
# apps/bench/bench_pipeline_throughput (a copy of those three binaries of an older commit: they
# link our libraries statically). DIR defaults to $RAVNEST_BUILD_DIR or build/, built first.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: bench/compare_builds.sh OLD [--new DIR] [--runs N]" >&2; exit 2; }
old=$(cd "$1" && pwd); shift
new=${RAVNEST_BUILD_DIR:-build} runs=3 nodes=2 size=64MiB stages=2
while [ $# -gt 0 ]; do
  case $1 in
    --new) new=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --nodes) nodes=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --stages) stages=$2; shift 2 ;;
    *) echo "bench/compare_builds.sh: unknown flag $1" >&2; exit 2 ;;
  esac
done
if [ -f "$new/build.ninja" ]; then
  ninja -C "$new" ravnest ravnestd bench_pipeline_throughput >/dev/null
fi
new=$(cd "$new" && pwd)
for side in "$old" "$new"; do
  for binary in apps/ravnest/ravnest apps/ravnestd/ravnestd apps/bench/bench_pipeline_throughput; do
    [ -x "$side/$binary" ] || { echo "bench/compare_builds.sh: $side/$binary: missing" >&2; exit 2; }
  done
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 examples/digits/make_data.py --out "$work" >/dev/null
sed 's/^epochs = 15/epochs = 2/; s/^validation = .*//' configs/job_digits.toml > "$work/job.toml"

# ring SIDE: ours/gloo bus bandwidth; pipeline SIDE: ours/single-process samples per second.
ring() {
  "$1/apps/ravnest/ravnest" bench allreduce --nodes "$nodes" --size "$size" --reps 10 --insecure |
    awk '/^ravnest ring/ { ours = $13 } $1 == "gloo" { gloo = $12 }
         END { if (gloo > 0) printf "%.4f\n", ours / gloo; else print "nan" }'
}
pipeline() {
  "$1/apps/bench/bench_pipeline_throughput" "$work/small_cnn.pt" "$work/job.toml" "$stages" |
    awk '/single-process LibTorch\)/ { gsub(/[(x]/, "", $(NF - 2)); print $(NF - 2) }' | tail -1
}
out=$work/figures
: > "$out"
for run in $(seq "$runs"); do
  order=(old new)
  [ $((run % 2)) = 0 ] && order=(new old)
  for label in "${order[@]}"; do
    side=$new; [ "$label" = old ] && side=$old
    echo "$run $label ring $(ring "$side")" >> "$out"
    echo "$run $label pipeline $(pipeline "$side")" >> "$out"
  done
done
echo "old: $old"
echo "new: $new"
/usr/bin/python3 - "$out" "$nodes" "$size" "$stages" <<'PY'
import statistics, sys
figures = {}
for line in open(sys.argv[1]):
    run, side, bench, value = line.split()
    figures.setdefault(bench, {}).setdefault(side, []).append(float(value))
names = {"ring": "ring, %s nodes, %s (ours/gloo)" % (sys.argv[2], sys.argv[3]),
         "pipeline": "pipeline, digits, %s stages (ours/single)" % sys.argv[4]}
print("%-44s %8s %8s %8s  (medians over %d runs; per run new/old: ...)"
      % ("", "old", "new", "new/old", len(figures["ring"]["old"])))
for bench in ("ring", "pipeline"):
    old, new = figures[bench]["old"], figures[bench]["new"]
    per_run = " ".join("%.2f" % (n / o) if o > 0 else "nan" for o, n in zip(old, new))
    mo, mn = statistics.median(old), statistics.median(new)
    print("%-44s %7.2fx %7.2fx %7.2fx  (%s)" % (names[bench], mo, mn, mn / mo, per_run))
PY
