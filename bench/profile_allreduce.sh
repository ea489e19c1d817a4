#!/usr/bin/env bash
# Where the daemons spend an all-reduce (docs/performance.md): runs `ravnest bench allreduce`
# long enough, records every CPU with perf while the daemons reduce, and prints the hottest
# symbols (flat), then the callers of the copies. Needs perf (Debian: linux-perf) and root, or
# kernel.perf_event_paranoid <= 0.
#   bench/profile_allreduce.sh [--nodes 4] [--size 64MiB] [--tls] [--dwarf] [--out perf.data]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${RAVNEST_BUILD_DIR:-build}
nodes=4 size=64MiB insecure=--insecure graph=(-g) out=$(mktemp --suffix=.perf.data)
while [ $# -gt 0 ]; do
  case $1 in
    --nodes) nodes=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --tls) insecure=; shift ;;
    --dwarf) graph=(--call-graph dwarf,32768); shift ;;  # full stacks through libraries without frame pointers
    --out) out=$2; shift 2 ;;
    *) echo "bench/profile_allreduce.sh: unknown flag $1" >&2; exit 2 ;;
  esac
done
bash scripts/build ravnest ravnestd >/dev/null
log=$(mktemp)
"$build/apps/ravnest/ravnest" bench allreduce --nodes "$nodes" --size "$size" --reps 200 \
    --no-gloo $insecure >"$log" 2>&1 &
bench=$!
trap 'kill $bench 2>/dev/null || true; wait $bench 2>/dev/null || true; rm -f "$log"' EXIT
# The daemons start, load LibTorch and warm up before the timed repetitions.
for _ in $(seq 100); do pgrep -x ravnestd >/dev/null && break; sleep 0.1; done
sleep 5
perf record -a "${graph[@]}" -o "$out" -- sleep 2 2>/dev/null
echo "== hottest symbols (all CPUs, 2 s of ${nodes} daemons reducing ${size}) =="
perf report -i "$out" --no-children --sort dso,sym -g none 2>/dev/null | grep '%' | head -25
echo
echo "== by library =="
perf report -i "$out" --no-children --sort dso -g none 2>/dev/null | grep '%' | head -10
echo
echo "== who copies (user-space memmove/memcpy/memset) =="
perf report -i "$out" --no-children --sort sym -G 2>/dev/null \
  -S __memmove_avx512_unaligned_erms,__memmove_avx_unaligned_erms,__memset_avx512_unaligned_erms |
  grep -v '^#' | grep -v '^$' | head -40
echo
echo "perf data: $out"
