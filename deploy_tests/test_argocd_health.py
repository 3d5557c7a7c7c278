"""The Argo CD health check (manifests/argocd/health.lua), run with real Lua 5.1 (lupa) in the
sandbox Argo CD gives health scripts, on the cases of health_test.yaml (Argo CD's own test format).

The cases are shared with the operator's status semantics: every test object must be a valid
RLHFJob for the operator's pydantic models and for the CRD, and together they cover every phase
of the operator's closed `Phase` enum."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from helm_tool import REPO, kubectl_kustomize

from support.crd_schema import CRDValidator

lupa_lua51 = pytest.importorskip("lupa.lua51", reason="lupa (dev extra) runs the Lua check")

from argocd_lua import HEALTH_LUA, run_health_check, sandboxed_runtime  # noqa: E402

ARGOCD = REPO / "manifests" / "argocd"
SCRIPT = HEALTH_LUA.read_text()
CASES = yaml.safe_load((ARGOCD / "health_test.yaml").read_text())["tests"]
ARGO_HEALTH = {"Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown"}


def _load(case: dict[str, Any]) -> dict[str, Any]:
    return dict(yaml.safe_load((ARGOCD / case["inputPath"]).read_text()))


@pytest.mark.parametrize("case", CASES, ids=[Path(c["inputPath"]).stem for c in CASES])
def test_health_of_each_case(case: dict[str, Any]) -> None:
    assert run_health_check(_load(case)) == case["healthStatus"]


JOB_CASES = [c for c in CASES if not Path(c["inputPath"]).stem.startswith("pipeline-")]
PIPELINE_CASES = [c for c in CASES if c not in JOB_CASES]


@pytest.mark.parametrize("case", JOB_CASES, ids=[Path(c["inputPath"]).stem for c in JOB_CASES])
def test_each_case_is_an_rlhfjob_the_operator_could_have_written(
    case: dict[str, Any], rlhfjob_validator: CRDValidator
) -> None:
    api = pytest.importorskip("rlhf_operator.api.v1alpha1")
    obj = _load(case)
    job = api.RLHFJob.model_validate(obj)  # spec and status through the operator's models
    assert job.kind == "RLHFJob"
    assert rlhfjob_validator.validate(obj) == []
    assert case["healthStatus"]["status"] in ARGO_HEALTH


@pytest.mark.parametrize(
    "case", PIPELINE_CASES, ids=[Path(c["inputPath"]).stem for c in PIPELINE_CASES]
)
def test_each_pipeline_case_is_one_the_operator_could_have_written(case: dict[str, Any]) -> None:
    pipeline = pytest.importorskip("rlhf_operator.api.v1alpha1.pipeline")
    from support.crd_schema import validator_for_crd

    obj = _load(case)
    crd = yaml.safe_load((REPO / "crds" / "rlhf.dev_rlhfpipelines.yaml").read_text())
    assert validator_for_crd(crd, "v1alpha1", strict=True).validate(obj) == []
    status = pipeline.RLHFPipelineStatus.model_validate(obj.get("status") or {})
    assert status.phase.value == (obj.get("status") or {}).get("phase", "Pending")
    assert obj["kind"] == "RLHFPipeline"


def test_pipeline_cases_cover_every_phase() -> None:
    phases = {_load(case).get("status", {}).get("phase") for case in PIPELINE_CASES}
    status = pytest.importorskip("rlhf_operator.api.v1alpha1.status")
    pipeline_phases = set(status.Phase) - {status.Phase.PROVISIONING}  # a job's only
    assert {phase.value for phase in pipeline_phases} <= phases


def test_cases_cover_every_phase_and_every_health() -> None:
    status = pytest.importorskip("rlhf_operator.api.v1alpha1.status")
    phases = {_load(case).get("status", {}).get("phase") for case in CASES}
    assert {phase.value for phase in status.Phase} <= phases
    assert {c["healthStatus"]["status"] for c in CASES} == {
        "Healthy",
        "Progressing",
        "Degraded",
        "Suspended",
    }


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        pytest.param(
            {"phase": "Hibernating"},
            {"status": "Unknown", "message": "Unknown phase Hibernating"},
            id="phase-from-a-newer-operator",
        ),
        pytest.param(
            {"phase": ""},
            {"status": "Progressing", "message": "Waiting for rlhf-operator to reconcile the job"},
            id="empty-phase",
        ),
        pytest.param(
            {"phase": "Running", "trainer": {"step": 7}},
            {"status": "Progressing", "message": "Running: step 7"},
            id="step-without-total",
        ),
        pytest.param(
            {"phase": "Running", "trainer": {"step": 3, "totalSteps": 10, "reward": -0.123456}},
            {"status": "Progressing", "message": "Running: step 3/10, reward -0.1235"},
            id="negative-reward-rounded",
        ),
    ],
)
def test_edge_cases(status: dict[str, Any], expected: dict[str, str]) -> None:
    obj = {"apiVersion": "rlhf.dev/v1alpha1", "kind": "RLHFJob", "metadata": {}, "status": status}
    assert run_health_check(obj) == expected


def test_script_uses_nothing_outside_the_sandbox() -> None:
    # A direct probe of the sandbox itself, so a passing suite means the script avoided
    # string/math rather than the sandbox silently providing them.
    runtime = sandboxed_runtime()
    assert runtime.execute("return string == nil and math == nil") is True
    with pytest.raises(lupa_lua51.LuaError):
        runtime.execute('return ("x"):upper()')


def test_component_merges_the_script_into_argocd_cm(tmp_path: Path, tools: Path) -> None:
    # The documented setup: Argo CD's install (namespace-less) + `namespace: argocd` + our
    # Component. kustomize needs relative paths between kustomization roots.
    (tmp_path / "argocd-cm.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: argocd-cm\n"
        "data:\n  url: https://argocd.example.com\n"
    )
    component = os.path.relpath(ARGOCD, tmp_path)
    (tmp_path / "kustomization.yaml").write_text(
        f"namespace: argocd\nresources: [argocd-cm.yaml]\ncomponents: [{component}]\n"
    )
    (config_map,) = kubectl_kustomize(tmp_path)
    assert config_map["metadata"] == {"name": "argocd-cm", "namespace": "argocd"}
    assert config_map["data"]["url"] == "https://argocd.example.com"
    assert config_map["data"]["resource.customizations.health.rlhf.dev_RLHFJob"] == SCRIPT
    assert config_map["data"]["resource.customizations.health.rlhf.dev_RLHFPipeline"] == SCRIPT
