#!/usr/bin/env bash
# Stops the local substrate that up.sh started: every pod's processes, the API server, the pod
# network. Volumes and logs stay in the state directory until the next up.sh.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
state="${SUBSTRATE_STATE:-${here}/.state}"
pid_file="${state}/substrate.pid"
[[ -f "${pid_file}" ]] || { echo "down.sh: no substrate recorded in ${state}"; exit 0; }
pid="$(cat "${pid_file}")"
bridge="$(sed -n 's/.*"bridge": "\([^"]*\)".*/\1/p' "${state}/substrate.json" 2>/dev/null || true)"
if kill -0 "${pid}" 2>/dev/null; then
  kill -TERM "${pid}"
  # Pods get a few seconds to stop; then whatever is left is killed with the substrate, whose
  # children all die with it (PR_SET_PDEATHSIG).
  for _ in $(seq 1 300); do
    kill -0 "${pid}" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "${pid}" 2>/dev/null; then
    echo "down.sh: the substrate did not stop within 30 s; killing it" >&2
    kill -KILL "${pid}"
    # Killed outright, it could not remove its pod network (its pods died with it).
    [[ -z "${bridge}" ]] || ip link del "${bridge}" 2>/dev/null || true
  fi
fi
rm -f "${pid_file}"
echo "The local substrate is down."
