#!/usr/bin/env bash
# Starts the local substrate in the background (API server, KubeRay's part, the kubelet, and the
# operator from the Helm chart), waits until the operator's pod is Ready, and prints the line
# that points kubectl at it. Needs root (namespaces, a bridge). Stop it with e2e/local/down.sh.
#
#   e2e/local/up.sh [--set chart.key=value ...]
#
# `--set gateway.enabled=true` adds the RLHF gateway with e2e/local/gateway-values.yaml (the tiny
# catalog model) and an S3 store for its files (moto, on the node's address; e2e/README.md).
#
# Pods run from the images `make images` built when there are any, else from this machine's
# filesystem and the checkout's venv (host mode); it prints which.
#
# Env: SUBSTRATE_STATE (default e2e/local/.state), SUBSTRATE_KUBECONFIG (e2e/local/.kubeconfig),
#      SUBSTRATE_TIMEOUT seconds to wait for the operator (default 300), PYTHON (.venv/bin/python),
#      SUBSTRATE_IMAGES (auto: built images when there are any; built; host)
#
# On a failure it says what failed (the substrate's log, or the operator's containers: state,
# start error, last log lines) and stops what it started; the state directory stays.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "${here}/../.." && pwd)"
state="${SUBSTRATE_STATE:-${here}/.state}"
kubeconfig="${SUBSTRATE_KUBECONFIG:-${here}/.kubeconfig}"
python="${PYTHON:-${repo}/.venv/bin/python}"
timeout="${SUBSTRATE_TIMEOUT:-300}"

if [[ "$(id -u)" != 0 ]]; then
  echo "up.sh: the local substrate needs root (mount and network namespaces, a bridge)" >&2
  exit 1
fi
if [[ -f "${state}/substrate.pid" ]] && kill -0 "$(cat "${state}/substrate.pid")" 2>/dev/null; then
  echo "up.sh: a substrate already runs from ${state} (pid $(cat "${state}/substrate.pid")); e2e/local/down.sh stops it" >&2
  exit 1
fi
# A fresh cluster each time: the previous one's volumes and logs go (copy out what you need).
rm -rf "${state}"
mkdir -p "${state}"
kubectl="$(bash "${repo}/scripts/get-helm.sh")/kubectl"

# Whatever fails from here on, what up.sh started is stopped (down.sh), and its state directory
# (logs, pod directories) is kept for a look.
started=""
stop_on_failure() {
  local code=$?
  if [[ "${code}" != 0 && -n "${started}" ]]; then
    echo "up.sh: stopping the substrate it started; its logs stay in ${state}" >&2
    SUBSTRATE_STATE="${state}" bash "${here}/down.sh" >&2 || true
  fi
}
trap stop_on_failure EXIT
trap 'exit 130' INT TERM

PYTHONPATH="${here}:${repo}/operator/tests" setsid "${python}" -m substrate serve \
  --state "${state}" --kubeconfig "${kubeconfig}" \
  --set image.repository=rlhf-operator --set image.tag=local \
  --set trainer.defaultImage=rlhf-trainer-cpu:local "$@" \
  > "${state}/substrate.log" 2>&1 < /dev/null &
echo $! > "${state}/substrate.pid"
started=1

deadline=$((SECONDS + timeout))
until [[ -f "${state}/substrate.json" ]]; do
  if ! kill -0 "$(cat "${state}/substrate.pid")" 2>/dev/null; then
    echo "up.sh: the substrate exited; its log (${state}/substrate.log):" >&2
    tail -n 40 "${state}/substrate.log" >&2
    exit 1
  fi
  if (( SECONDS >= deadline )); then
    echo "up.sh: no API server after ${timeout} s; the substrate's log (${state}/substrate.log):" >&2
    tail -n 40 "${state}/substrate.log" >&2
    exit 1
  fi
  sleep 0.5
done
namespace=rlhf-system
selector=app.kubernetes.io/name=rlhf-operator
until [[ "$("${kubectl}" --kubeconfig "${kubeconfig}" get pods -n "${namespace}" -l "${selector}" \
  -o 'jsonpath={.items[*].status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" == True ]]; do
  if (( SECONDS >= deadline )); then
    echo "up.sh: the operator is not Ready after ${timeout} s. Its containers:" >&2
    PYTHONPATH="${here}" "${python}" -m substrate.why "${kubectl}" "${kubeconfig}" \
      "${namespace}" "${selector}" >&2 || true
    echo "The pod as kubectl describes it:" >&2
    "${kubectl}" --kubeconfig "${kubeconfig}" describe pods -n "${namespace}" -l "${selector}" >&2 || true
    echo "The substrate's log (${state}/substrate.log), last lines:" >&2
    tail -n 20 "${state}/substrate.log" >&2
    exit 1
  fi
  sleep 1
done
echo "The local substrate is up (log: ${state}/substrate.log); pods run from $("${python}" -c \
  'import json, sys; print(json.load(open(sys.argv[1]))["images"]["why"])' "${state}/substrate.json")."
echo "Point kubectl at it with:"
echo "export KUBECONFIG=${kubeconfig}"
