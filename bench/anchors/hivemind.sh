#!/usr/bin/env bash
# Hivemind side by side (issue 27, docs/performance.md#hivemind-side-by-side): the same float32
# tensor all-reduced among the same scripts/wan namespaces and links, by our ring (ravnestd in
# each namespace, TLS on, no shared memory) and by Hivemind's DecentralizedAverager (one peer in
# each namespace, from PyPI), in the same run; one table of bus bandwidths.
#
#   bench/anchors/hivemind.sh [--nodes 2,4] [--sizes 4MiB,64MiB] \
#       [--links none/0ms,100mbit/20ms] [--reps 3] [--insecure] [--name rnh]
#
# Hivemind lives in its own venv, made here once (${RAVNEST_HIVEMIND_VENV:-
# ~/.cache/ravnest/venv-hivemind}), never a dependency of the project: `pip install hivemind`
# (its manylinux wheel carries the go-libp2p daemon, p2pd). The venv borrows its torch from
# scripts/venv's environment (a .pth line) instead of downloading another copy. Needs root (network
# namespaces); the namespaces are named NAME0.. and are removed at the end, also on failure.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=${RAVNEST_HIVEMIND_VENV:-$HOME/.cache/ravnest/venv-hivemind}
hivemind_spec=${RAVNEST_HIVEMIND_SPEC:-hivemind==1.1.12}
name=rnh
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  [ "${args[$i]}" = --name ] && name=${args[$((i + 1))]}
done

make_venv() {
  if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c 'import hivemind, torch' 2>/dev/null; then
    return
  fi
  local torch_python site
  torch_python=$(scripts/venv | tail -1)
  site=$("$torch_python" -c 'import site; print(site.getsitepackages()[0])')
  rm -rf "$venv"
  /usr/bin/python3 -m venv "$venv"
  # torch (and numpy) from the torch2 environment: pip sees them installed and leaves them.
  echo "$site" >"$(ls -d "$venv"/lib/python3*/site-packages)/zz_ravnest_torch2.pth"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "$hivemind_spec" >&2
  "$venv/bin/python" -c 'import hivemind, torch' 2>/dev/null
  echo "hivemind.sh: made $venv ($("$venv/bin/python" -c 'import hivemind; print(hivemind.__version__)'))" >&2
}

make_venv
bash scripts/build ravnestd bench_anchor_ring wan_relay >/dev/null
trap 'scripts/wan down --name "$name"' EXIT
trap 'exit 130' INT TERM
/usr/bin/python3 bench/anchors/anchors.py --python "$venv/bin/python" \
  --build "${RAVNEST_BUILD_DIR:-build}" "$@"
