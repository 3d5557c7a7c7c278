#!/usr/bin/env bash
# Deletes the e2e kind cluster (and with it everything the suite created).
set -euo pipefail
cluster="${E2E_CLUSTER:-rlhf-e2e}"
kind delete cluster --name "${cluster}"
rm -f "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/.kubeconfig"
