#!/usr/bin/env bash
# The *_hosts_* ctest entries (issue 27: hosts, not ports): runs a test binary's cases with
# RAVNEST_TEST_HOSTS=1, so that LocalCluster starts each daemon in a network namespace of its own
# (libs/local/namespace_hosts.h). Where namespaces cannot be made (not root, no `ip`, no
# CAP_NET_ADMIN) it says so loudly and exits 77, which ctest reports as a skip (SKIP_RETURN_CODE),
# never a pass. Namespaces the binary leaves (killed, crashed) are torn down here.
#   tests/integration/hosts_gate.sh TEST_BINARY CATCH2_ARGS...
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
skip() {
  echo "SKIPPED (hosts mode): $1: these cases did NOT run between namespaces" >&2
  exit 77
}
[ "$(id -u)" = 0 ] || skip "network namespaces need root"
command -v ip >/dev/null || skip "no \`ip\` (iproute2) on PATH"
probe=rntgate$$
ip netns add "$probe" 2>/dev/null || skip "cannot make a network namespace (ip netns add)"
ip netns delete "$probe"

export RAVNEST_TEST_HOSTS=1
"$@" &
child=$!
# LocalCluster names its sets rnt<pid % 1000><letter> (local::unique_hosts_name).
cleanup() {
  local prefix=rnt$((child % 1000))
  for name in $( (ip netns list; ip -o link show) 2>/dev/null |
                 grep -o "\b${prefix}[a-z]" | sort -u); do
    bash "$root/scripts/wan" down --name "$name"
  done
}
trap 'kill "$child" 2>/dev/null; wait "$child"; cleanup; exit 143' TERM INT
wait "$child"
rc=$?
cleanup
exit $rc
