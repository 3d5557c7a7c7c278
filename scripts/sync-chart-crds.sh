#!/usr/bin/env bash
# Copies the generated CRDs (crds/, written by `rlhf-operator crd`) to the two install paths that
# must ship them byte for byte: the Helm chart's crds/ and the kustomize base. KubeRay does the
# same with `make sync-crds`; deploy_tests/test_crd_sync.py fails when a copy drifts.
#
# Usage: scripts/sync-chart-crds.sh           copy
#        scripts/sync-chart-crds.sh --check   only report drift (exit 1 if any)
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source_dir="${repo_root}/crds"
targets=("${repo_root}/helm/rlhf-operator/crds" "${repo_root}/manifests/base/crds")
check_only=false
[[ "${1:-}" == "--check" ]] && check_only=true

shopt -s nullglob
sources=("${source_dir}"/*.yaml)
if [[ ${#sources[@]} -eq 0 ]]; then
  echo "no CRDs in ${source_dir}: run \`rlhf-operator crd\` first" >&2
  exit 1
fi

drift=0
for target in "${targets[@]}"; do
  if ${check_only}; then
    if ! diff -r -q "${source_dir}" "${target}" --exclude=kustomization.yaml >&2; then
      drift=1
    fi
    continue
  fi
  mkdir -p "${target}"
  # Remove copies of CRDs that no longer exist, keep kustomize's own file.
  for old in "${target}"/*.yaml; do
    [[ "$(basename "${old}")" == "kustomization.yaml" ]] && continue
    [[ -e "${source_dir}/$(basename "${old}")" ]] || rm -f "${old}"
  done
  cp "${sources[@]}" "${target}/"
  echo "synced ${#sources[@]} CRD(s) into ${target#"${repo_root}"/}" >&2
done

if ${check_only} && [[ ${drift} -ne 0 ]]; then
  echo "CRD copies differ from crds/: run scripts/sync-chart-crds.sh" >&2
  exit 1
fi
