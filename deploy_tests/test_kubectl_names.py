"""The README's kubectl lines, run with the real kubectl 1.35 against the API emulator serving
our generated CRDs (light: no pods; the e2e suite runs them on the local substrate too):
`get rlhf`, `get rlhf -w`, `describe rlhf NAME` and `get rlhfp` behave as one kind's short
name, and `get rlhf-all` lists both kinds. With the CRDs' old category `rlhf`, kubectl
expanded it before the short name and refused the watch and the describe."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml
from helm_tool import ToolUnavailable, tool_dir

from emulator import Emulator, project_crds, run_emulator

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "manifests" / "examples"


@pytest.fixture
def kubectl() -> Path:
    try:
        return tool_dir() / "kubectl"
    except ToolUnavailable as err:
        pytest.skip(str(err))


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Emulator]:
    config = tmp_path / "kubeconfig"
    async with run_emulator(crds=project_crds(), namespaces=["demo"], kubeconfig=config) as k8s:
        job = yaml.safe_load((EXAMPLES / "tiny-ppo-cpu.yaml").read_text())
        job["metadata"] = {"name": "tiny", "namespace": "demo"}
        k8s.create("rlhfjobs.rlhf.dev", job, "demo")
        pipeline = yaml.safe_load((EXAMPLES / "tiny-pipeline-cpu.yaml").read_text())
        pipeline["metadata"] = {"name": "recipe", "namespace": "demo"}
        k8s.create("rlhfpipelines.rlhf.dev", pipeline, "demo")
        yield k8s


async def run(kubectl: Path, k8s: Emulator, *args: str, seconds: float = 30) -> str:
    proc = await asyncio.create_subprocess_exec(
        str(kubectl),
        *args,
        "-n",
        "demo",
        env={**os.environ, "KUBECONFIG": str(k8s.kubeconfig)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), seconds)
    assert proc.returncode == 0, f"kubectl {' '.join(args)}: {err.decode()}"
    return out.decode()


async def test_get_rlhf_prints_the_jobs_columns(kubectl: Path, cluster: Emulator) -> None:
    lines = (await run(kubectl, cluster, "get", "rlhf")).splitlines()
    assert lines[0].split() == [
        "NAME", "PHASE", "ALGORITHM", "PROGRESS", "REWARD", "GPUS", "RESTARTS", "AGE"
    ]  # fmt: skip
    assert lines[1].split()[:2] == ["tiny", "ppo"]


async def test_get_rlhf_watch_streams_the_rows(kubectl: Path, cluster: Emulator) -> None:
    proc = await asyncio.create_subprocess_exec(
        str(kubectl),
        *("get", "rlhf", "-w", "-n", "demo"),
        env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        header = await asyncio.wait_for(proc.stdout.readline(), 30)
        row = await asyncio.wait_for(proc.stdout.readline(), 30)
        await asyncio.sleep(0.5)
        assert proc.returncode is None, "the watch ended by itself"
    finally:
        proc.terminate()
        await proc.wait()
    assert header.decode().split()[:2] == ["NAME", "PHASE"]
    assert row.decode().split()[:2] == ["tiny", "ppo"]


async def test_describe_rlhf_name(kubectl: Path, cluster: Emulator) -> None:
    lines = (await run(kubectl, cluster, "describe", "rlhf", "tiny")).splitlines()
    assert lines[0].split() == ["Name:", "tiny"]
    assert ["Kind:", "RLHFJob"] in [line.split() for line in lines]


async def test_get_rlhfp_and_the_category_of_both(kubectl: Path, cluster: Emulator) -> None:
    pipelines = await run(kubectl, cluster, "get", "rlhfp")
    assert pipelines.splitlines()[1].split()[0] == "recipe"
    both = (await run(kubectl, cluster, "get", "rlhf-all", "-o", "name")).split()
    assert sorted(both) == ["rlhfjob.rlhf.dev/tiny", "rlhfpipeline.rlhf.dev/recipe"]
