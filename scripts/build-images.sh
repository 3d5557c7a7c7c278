#!/usr/bin/env bash
# Builds the project's images from their Dockerfiles, unchanged but for build args, checks each
# built image for what only a built image can answer, and exports it for the local substrate:
#
#   rlhf-operator:TAG      operator/Dockerfile
#   rlhf-trainer-cpu:TAG   e2e/trainer-cpu.Dockerfile (the CPU trainer)
#
# The GPU trainer image (trainer_image/Dockerfile) starts FROM a CUDA base image; it is built only
# where that base exists (BUILD_GPU_IMAGE=1 with a daemon that has or can pull it). Elsewhere it
# stays linted by deploy_tests/test_dockerfiles.py, and this script says so.
#
# Docker: the daemon `docker info` reaches, if one runs; otherwise a private `dockerd` (Debian's
# docker.io) with its own socket, data root and exec root under ${cache}/docker, no bridge and
# no iptables rules, stopped when this script exits. Builds use the host's network.
# Base: python:${PYTHON_VERSION}-slim-bookworm if the daemon has it or can pull it; otherwise a
# stand-in made once with debootstrap (Debian bookworm minbase with python3, its headers, pip and
# venv, this machine's CA bundle) and cached as a tarball, imported under that tag and labelled as such.
# Builder: Docker's classic builder (BuildKit would first pull its `# syntax` frontend image);
# it reads no per-Dockerfile ignore file, so the context goes in as a tar of exactly the paths
# <Dockerfile>.dockerignore admits (an allow-list; see context_tar below).
# Torch: the CPU wheel from PyTorch's CPU index unless TORCH_INDEX_URL is set; where that index
# is unreachable, pip's own copy of the CPU wheel on this machine (`pip download
# torch==X+cpu`) is served to the build from a local index on 127.0.0.1.
# Export: each image's root filesystem and config (`docker image inspect`), once per image
# digest, into ${cache}/store/<digest>/; ${cache}/store/tags/<name:tag> names the digest.
#
#   scripts/build-images.sh [operator] [trainer-cpu]     (default: both; `make images`)
#   scripts/build-images.sh --check [IMAGE...]           exit 0 when the exports are up to date
#
# An image whose export was made from the same context (see context_key) is not rebuilt, and no
# daemon starts when every image is up to date.
#
# Env: IMAGE_TAGS (the tags each image gets: "local e2e"), RLHF_IMAGES_CACHE (~/.cache/rlhf-operator/images), TORCH_INDEX_URL,
#      PYTHON (python3, for pip download and the local index), BUILD_GPU_IMAGE (0)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${RLHF_IMAGES_CACHE:-${HOME}/.cache/rlhf-operator/images}"
# Each image gets every tag: `local` (e2e/local/up.sh) and `e2e` (the e2e suite's default names).
read -r -a tags <<< "${IMAGE_TAGS:-local e2e}"
tag="${tags[0]}"
python="${PYTHON:-python3}"
python_version="$(sed -n 's/^ARG PYTHON_VERSION=//p' "${repo}/operator/Dockerfile")"
base="python:${python_version}-slim-bookworm"
# What the stand-in base holds (the official image has Python's headers too: DeepSpeed's op
# compiles against them).
stand_in_packages="python3,python3-dev,python3-pip,python3-venv,ca-certificates"
export DOCKER_BUILDKIT=0
check_only=0
[[ "${1:-}" != --check ]] || { check_only=1; shift; }
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(operator trainer-cpu)

log() { printf '[build-images] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
mkdir -p "${cache}"
cleanups=()
cleanup() { for ((i = ${#cleanups[@]} - 1; i >= 0; i--)); do eval "${cleanups[i]}" || true; done; }
trap cleanup EXIT

# --- Docker ---------------------------------------------------------------------------------
stop_daemon() {
  local pid
  pid="$(cat "${cache}/docker/dockerd.pid" 2>/dev/null)" || return 0
  kill -TERM "${pid}" 2>/dev/null || return 0
  local stopped=""
  for _ in $(seq 1 150); do kill -0 "${pid}" 2>/dev/null || { stopped=1; break; }; sleep 0.2; done
  if [[ -n "${stopped}" ]]; then
    log "private dockerd stopped"
  else
    log "private dockerd (pid ${pid}) did not stop within 30 s; killing it"
    kill -KILL "${pid}" 2>/dev/null || true
  fi
  # dockerd leaves its default network namespace mounted under the exec root: without this the
  # cache folder cannot be removed ("Device or resource busy") until someone unmounts it.
  findmnt -rn -o TARGET | grep "^${cache}/docker/exec/" | xargs -r umount 2>/dev/null || true
}

start_daemon() {
  command -v dockerd >/dev/null || die "no Docker daemon runs and dockerd is not installed (Debian: apt-get install docker.io)"
  [[ "$(id -u)" == 0 ]] || die "no Docker daemon runs, and starting a private one needs root"
  local dir="${cache}/docker"
  mkdir -p "${dir}/data" "${dir}/exec"
  export DOCKER_HOST="unix://${dir}/docker.sock"
  if docker info >/dev/null 2>&1; then
    log "a private dockerd from an earlier run still answers at ${DOCKER_HOST}; using it"
  else
    log "no Docker daemon runs: starting a private one (data root ${dir}/data, log ${dir}/dockerd.log)"
    dockerd --host "${DOCKER_HOST}" --data-root "${dir}/data" --exec-root "${dir}/exec" \
      --pidfile "${dir}/dockerd.pid" --bridge none --iptables=false --ip-masq=false \
      > "${dir}/dockerd.log" 2>&1 &
    for _ in $(seq 1 120); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
    docker info >/dev/null 2>&1 || { tail -n 20 "${dir}/dockerd.log" >&2; die "the private dockerd did not start (log above)"; }
  fi
  cleanups+=(stop_daemon)
}

# --- The base image ---------------------------------------------------------------------------
stand_in_base() {
  local recipe tarball
  recipe="$(echo "${stand_in_packages}" | sha256sum | cut -c1-8)"
  tarball="${cache}/base/${base//[:]/_}-stand-in-${recipe}.tar"
  if [[ ! -f "${tarball}" ]]; then
    command -v debootstrap >/dev/null || die "${base} cannot be pulled and debootstrap is not installed (Debian: apt-get install debootstrap)"
    local root="${cache}/base/root.partial"
    rm -rf "${root}"
    mkdir -p "${root}"
    log "making a stand-in ${base} with debootstrap (about a minute, once)"
    debootstrap --variant=minbase --include="${stand_in_packages}" \
      bookworm "${root}" http://deb.debian.org/debian > "${cache}/base/debootstrap.log" 2>&1 \
      || { tail -n 20 "${cache}/base/debootstrap.log" >&2; die "debootstrap failed (log above)"; }
    ln -sf python3 "${root}/usr/bin/python"
    ln -sf pip3 "${root}/usr/bin/pip"
    # Outbound HTTPS from this machine needs its CA bundle (pip fails verification without it).
    cp /etc/ssl/certs/ca-certificates.crt "${root}/etc/ssl/certs/ca-certificates.crt"
    printf 'deb http://deb.debian.org/debian bookworm main\ndeb http://deb.debian.org/debian bookworm-updates main\ndeb http://deb.debian.org/debian-security bookworm-security main\n' \
      > "${root}/etc/apt/sources.list"
    rm -rf "${root}/var/cache/apt/archives/"*.deb "${root}/var/lib/apt/lists/"*
    tar -C "${root}" --numeric-owner -cf "${tarball}.partial" .
    mv "${tarball}.partial" "${tarball}"
    rm -rf "${root}"
  fi
  log "importing the stand-in base as ${base} (${tarball})"
  docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'ENV PIP_BREAK_SYSTEM_PACKAGES=1' \
    --change 'LABEL org.rlhf-operator.stand-in="debootstrap bookworm minbase, not the official image"' \
    --change "LABEL org.rlhf-operator.stand-in-packages=${stand_in_packages}" \
    --change 'CMD ["python3"]' \
    "${tarball}" "${base}" >/dev/null
}

ensure_base() {
  local labels
  if labels="$(docker image inspect --format '{{json .Config.Labels}}' "${base}" 2>/dev/null)"; then
    # The official image, or a stand-in made by this recipe.
    [[ "${labels}" == *org.rlhf-operator.stand-in* && "${labels}" != *"\"${stand_in_packages}\""* ]] || return 0
    log "the stand-in ${base} was made by another recipe: making it anew"
    stand_in_base
    return 0
  fi
  if timeout 60 docker pull "${base}" >/dev/null 2>&1; then
    log "pulled ${base}"
  else
    log "${base} cannot be pulled here: using a stand-in"
    stand_in_base
  fi
}

# --- Torch for the CPU trainer ------------------------------------------------------------------
# Sets torch_url (not a $(...) subshell: the local index's server must be cleaned up here).
torch_url=""
torch_index() {
  if [[ -n "${TORCH_INDEX_URL:-}" ]]; then
    torch_url="${TORCH_INDEX_URL}"
    return 0
  fi
  local version index="${cache}/torch-index"
  version="$(sed -n 's/^ARG TORCH_VERSION=//p' "${repo}/e2e/trainer-cpu.Dockerfile")"
  if timeout 20 "${python}" -c "import urllib.request as u; u.urlopen('https://download.pytorch.org/whl/cpu/torch/', timeout=15)" 2>/dev/null; then
    torch_url="https://download.pytorch.org/whl/cpu"
    return 0
  fi
  if ! compgen -G "${index}/files/torch-${version}+cpu-*.whl" >/dev/null; then
    log "PyTorch's CPU index is unreachable: taking torch==${version}+cpu and its dependencies from pip"
    "${python}" -c 'import sys; sys.exit(sys.version_info[:2] != tuple(map(int, sys.argv[1].split("."))))' "${python_version}" \
      || die "${python} is not Python ${python_version}: set PYTHON to one (its pip fetches the image's torch) or TORCH_INDEX_URL"
    "${python}" -m pip download --quiet --only-binary=:all: --dest "${index}/files" "torch==${version}+cpu" \
      || die "neither PyTorch's CPU index nor pip has torch==${version}+cpu; set TORCH_INDEX_URL"
  fi
  # A simple index (one folder per project) over those files.
  local wheel project
  for wheel in "${index}/files/"*.whl; do
    project="$(basename "${wheel}" | cut -d- -f1 | tr 'A-Z_.' 'a-z--')"
    mkdir -p "${index}/simple/${project}"
    ln -sf "../../files/$(basename "${wheel}")" "${index}/simple/${project}/"
  done
  # A fixed port: the URL is a build arg, which Docker's layer cache keys on.
  local port="${TORCH_INDEX_PORT:-38523}"
  "${python}" -m http.server --bind 127.0.0.1 --directory "${index}/simple" "${port}" > "${cache}/torch-index.log" 2>&1 &
  cleanups+=("kill $! 2>/dev/null")
  for _ in $(seq 1 50); do
    "${python}" -c "import urllib.request as u; u.urlopen('http://127.0.0.1:${port}/torch/')" 2>/dev/null && break
    kill -0 "$!" 2>/dev/null || die "the local torch index could not listen on 127.0.0.1:${port} (set TORCH_INDEX_PORT)"
    sleep 0.1
  done
  log "serving $(basename "${index}"/files/torch-*.whl) and its dependencies to the build at http://127.0.0.1:${port}/"
  torch_url="http://127.0.0.1:${port}/"
}

# --- Build, check, export -------------------------------------------------------------------------
# The context as Docker would send it with <Dockerfile>.dockerignore: that file must be an
# allow-list (`*`, then `!path` lines); `**/name` lines exclude a name anywhere, other lines a path
# at the root. The Dockerfile itself goes in too (the classic builder reads it from the context).
context_tar() {
  local dockerfile="$1" ignore="${1}.dockerignore" line
  local allowed=() excludes=(--no-anchored)
  [[ -f "${ignore}" ]] || die "${ignore} is missing: the build context would be the whole checkout"
  [[ "$(grep -v -e '^#' -e '^$' "${ignore}" | head -n 1)" == "*" ]] || die "${ignore} must start with '*' (an allow-list)"
  while IFS= read -r line; do
    case "${line}" in
      '' | '#'* | '*') ;;
      '!'*) allowed+=("${line#!}") ;;
      '**/'*) excludes+=("--exclude=${line#\*\*/}") ;;
      *) excludes+=(--anchored "--exclude=${line}" --no-anchored) ;;
    esac
  done < "${ignore}"
  # Sorted, with fixed times and owners: the same sources give the same bytes (context_key).
  tar -C "${repo}" -c --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
    "${excludes[@]}" -- "${allowed[@]}" "${dockerfile#"${repo}"/}"
}

built=()
build() {
  local name="$1" dockerfile="$2"
  shift 2
  local image="${name}:${tag}" start
  start=$(date +%s)
  log "building ${image} from ${dockerfile#"${repo}"/}"
  local tag_args=() t
  for t in "${tags[@]}"; do tag_args+=(--tag "${name}:${t}"); done
  context_tar "${dockerfile}" | docker build --network host "${tag_args[@]}" \
    --file "${dockerfile#"${repo}"/}" "$@" - > "${cache}/build-${name}.log" 2>&1 \
    || { tail -n 40 "${cache}/build-${name}.log" >&2; die "building ${image} failed (log: ${cache}/build-${name}.log)"; }
  local size
  size="$(docker image inspect --format '{{.Size}}' "${image}")"
  built+=("$(printf '%-28s %6d MB  built in %4d s' "${image}" $((size / 1000000)) $(($(date +%s) - start)))")
}

# Runs in the image as it would in a hardened pod: its own user, read-only root, no network.
in_image() {
  local image="$1" entrypoint="$2"
  shift 2
  docker run --rm --read-only --network none --tmpfs /tmp --entrypoint "${entrypoint}" "${image}" "$@" 2>&1
}

check_non_root() {
  local image="$1" user
  user="$(docker image inspect --format '{{.Config.User}}' "${image}")"
  [[ "${user%%:*}" =~ ^[0-9]+$ && "${user%%:*}" != 0 ]] \
    || die "${image} must run as a numeric non-root USER (so a kubelet can check runAsNonRoot); it has '${user}'"
}

check_operator() {
  local image="rlhf-operator:${tag}"
  check_non_root "${image}"
  # shellcheck disable=SC2016 # expanded by the image's shell
  in_image "${image}" sh -c '[ "$(id -u)" != 0 ] && rlhf-operator --help' >/dev/null \
    || die "${image}: 'rlhf-operator --help' failed as the image's user on a read-only root"
  log "checked ${image}: non-root ($(docker image inspect --format '{{.Config.User}}' "${image}")), 'rlhf-operator --help' on a read-only root"
}

check_trainer() {
  local image="rlhf-trainer-cpu:${tag}" out
  check_non_root "${image}"
  # DeepSpeed's shm op must load from the image (prebuilt): a JIT build would need a writable
  # $HOME, which a read-only root does not give it.
  out="$(in_image "${image}" python -c '
import os
import rlhf_trainer, torch, ray, deepspeed, vllm
from deepspeed.git_version_info import installed_ops
from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder
assert os.getuid() != 0, "runs as root"
assert installed_ops["deepspeed_shm_comm"], installed_ops
ShareMemCommBuilder().load(verbose=False)
print("torch", torch.__version__, "ray", ray.__version__, "deepspeed", deepspeed.__version__,
      "vllm", vllm.__version__, "uid", os.getuid())
')" || { echo "${out}" | tail -n 20 >&2; die "${image}: the trainer stack does not import or the DeepSpeed op is not prebuilt"; }
  log "checked ${image}: $(echo "${out}" | tail -n 1), DeepSpeed's shm op prebuilt, read-only root"
}

export_image() {
  local image="$1" key="$2" id digest
  id="$(docker image inspect --format '{{.Id}}' "${image}")"
  digest="${id#sha256:}"
  local dir="${cache}/store/${digest}"
  mkdir -p "${cache}/store/tags"
  if [[ ! -d "${dir}" ]]; then
    log "exporting ${image} (${digest:0:12}) for the local substrate"
    local partial="${dir}.partial" container
    rm -rf "${partial}"
    mkdir -p "${partial}/rootfs"
    container="$(docker create "${image}")"
    docker export "${container}" | tar -C "${partial}/rootfs" --numeric-owner -xpf -
    docker rm "${container}" >/dev/null
    docker image inspect "${image}" > "${partial}/image.json"
    mv "${partial}" "${dir}"
  fi
  local t
  for t in "${tags[@]}"; do echo "${digest} ${key}" > "${cache}/store/tags/${image%:*}:${t}"; done
  # Exports of digests no tag names any more go.
  local kept
  kept="$(cut -d' ' -f1 "${cache}/store/tags/"* 2>/dev/null | sort -u)"
  for old in "${cache}/store/"*; do
    [[ "$(basename "${old}")" == tags ]] || grep -qx "$(basename "${old}")" <<< "${kept}" || rm -rf "${old}"
  done
}

# What each image is built from: its Dockerfile, and the build args that change its content.
dockerfile_of() { case "$1" in operator) echo "${repo}/operator/Dockerfile" ;; trainer-cpu) echo "${repo}/e2e/trainer-cpu.Dockerfile" ;; *) die "unknown image '$1' (operator, trainer-cpu)" ;; esac; }
name_of() { case "$1" in operator) echo rlhf-operator ;; trainer-cpu) echo rlhf-trainer-cpu ;; esac; }
# The build's key: a hash of the context it sends (the Dockerfile, the sources and pyproject.toml's
# pins) and of the base's name. An export made from the same key is up to date.
context_key() { { context_tar "$(dockerfile_of "$1")" | sha256sum; echo "${base} ${stand_in_packages}"; } | sha256sum | cut -c1-16; }
up_to_date() {
  local record digest key
  local wanted t
  wanted="$(context_key "$1")"
  for t in "${tags[@]}"; do
    record="$(cat "${cache}/store/tags/$(name_of "$1"):${t}" 2>/dev/null)" || return 1
    read -r digest key <<< "${record}"
    [[ "${key}" == "${wanted}" && -d "${cache}/store/${digest}/rootfs" ]] || return 1
  done
}

stale=()
for target in "${targets[@]}"; do
  dockerfile_of "${target}" >/dev/null
  if up_to_date "${target}"; then
    log "$(name_of "${target}"):${tag} is up to date with this checkout (${cache}/store)"
  else
    stale+=("${target}")
  fi
done
if [[ "${check_only}" == 1 ]]; then
  [[ ${#stale[@]} -eq 0 ]] || { log "stale or missing: ${stale[*]} (make images builds them)"; exit 1; }
  exit 0
fi
if [[ ${#stale[@]} -gt 0 ]]; then
  if docker info >/dev/null 2>&1; then
    log "using the running Docker daemon ($(docker info --format '{{.ServerVersion}}'))"
  else
    start_daemon
  fi
  ensure_base
fi
for target in "${stale[@]}"; do
  case "${target}" in
    operator)
      build rlhf-operator "${repo}/operator/Dockerfile" --build-arg "PYTHON_VERSION=${python_version}"
      check_operator
      ;;
    trainer-cpu)
      torch_index
      build rlhf-trainer-cpu "${repo}/e2e/trainer-cpu.Dockerfile" --build-arg "TORCH_INDEX_URL=${torch_url}"
      check_trainer
      ;;
  esac
  export_image "$(name_of "${target}"):${tag}" "$(context_key "${target}")"
done
# Images no tag names any more (the previous build of a tag) go; the layer cache stays.
[[ ${#stale[@]} -eq 0 ]] || docker image prune --force >/dev/null
if [[ "${BUILD_GPU_IMAGE:-0}" == 1 ]]; then
  build rlhf-trainer "${repo}/trainer_image/Dockerfile"
else
  log "not built: trainer_image/Dockerfile (the GPU trainer) starts FROM a CUDA base image that is not here; it is linted by deploy_tests/test_dockerfiles.py (BUILD_GPU_IMAGE=1 builds it where the base exists)"
fi
if [[ ${#built[@]} -gt 0 ]]; then
  log "built (exports for the local substrate in ${cache}/store):"
  printf '  %s\n' "${built[@]}" >&2
fi
