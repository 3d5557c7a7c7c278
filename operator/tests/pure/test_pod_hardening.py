"""Every pod of every job the project ships, as rendered: Pod Security "restricted", a read-only
root filesystem with size-limited scratch, the job's ServiceAccount (its token only where the
driver reports), and the job's Ray token in every Ray client; the restricted-profile checker
itself is tested on pods that break each rule."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from rlhf_operator.builders.children import render_children
from rlhf_operator.render import render_file
from rlhf_operator.settings import OperatorSettings
from rlhf_trainer.config import validation_messages
from rlhf_trainer.config.env_rules import is_credential, reserved_reason
from support.examples import example_files, local_only_examples
from support.pod_security import violations

from .factories import make_job

FIXTURES = Path(__file__).parent / "fixtures"
SETTINGS = OperatorSettings(default_trainer_image="rlhf-trainer:test", instance="test")
FILES = sorted(FIXTURES.glob("*.yaml")) + [
    p for p in example_files() if p not in local_only_examples()
]

JSON = dict[str, Any]


def _pods(ray_job: JSON) -> dict[str, JSON]:
    """role -> pod spec: the head, each worker group, the submitter."""
    cluster = ray_job["spec"]["rayClusterSpec"]
    pods = {"head": cluster["headGroupSpec"]["template"]["spec"]}
    for group in cluster["workerGroupSpecs"]:
        pods[f"worker:{group['groupName']}"] = group["template"]["spec"]
    pods["submitter"] = ray_job["spec"]["submitterPodTemplate"]["spec"]
    return pods


def _ray_jobs() -> list[tuple[str, JSON]]:
    found = []
    for path in FILES:
        for rendered in render_file(path, SETTINGS):
            assert not rendered.problems, (path, rendered.problems)
            # One RayJob per job (per stage of a pipeline).
            for ray_job in [o for o in rendered.objects if o["kind"] == "RayJob"]:
                found.append((f"{path.stem}/{ray_job['metadata']['name']}", ray_job))
    return found


RAY_JOBS = _ray_jobs()


@pytest.mark.parametrize(("name", "ray_job"), RAY_JOBS, ids=[n for n, _ in RAY_JOBS])
def test_every_pod_passes_the_restricted_pod_security_standard(name: str, ray_job: JSON) -> None:
    for role, pod in _pods(ray_job).items():
        assert violations(pod) == [], role


@pytest.mark.parametrize(("name", "ray_job"), RAY_JOBS, ids=[n for n, _ in RAY_JOBS])
def test_root_is_read_only_and_every_scratch_volume_has_a_limit(name: str, ray_job: JSON) -> None:
    for role, pod in _pods(ray_job).items():
        volumes = {v["name"]: v for v in pod["volumes"]}
        for volume in volumes.values():
            if "emptyDir" in volume:
                assert volume["emptyDir"].get("sizeLimit"), (role, volume["name"])
        for container in pod["containers"]:
            assert container["securityContext"]["readOnlyRootFilesystem"] is True, role
            mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
            # Ray's session dir (/tmp/ray) and the caches under HOME must stay writable.
            for path in ("/tmp", "/home/ray"):
                assert "emptyDir" in volumes[mounts[path]], (role, path)
            if role != "submitter":
                shm = volumes[mounts["/dev/shm"]]["emptyDir"]
                # In memory, so counted against the pod's limit: never above it.
                assert shm["medium"] == "Memory"
                assert shm["sizeLimit"] == container["resources"]["limits"]["memory"]


@pytest.mark.parametrize(("name", "ray_job"), RAY_JOBS, ids=[n for n, _ in RAY_JOBS])
def test_pods_run_as_the_job_and_only_the_head_holds_its_token(name: str, ray_job: JSON) -> None:
    job = ray_job["metadata"]["labels"]["rlhf.dev/job"]
    for role, pod in _pods(ray_job).items():
        # Never the namespace's default ServiceAccount (it may carry a cloud identity).
        assert pod["serviceAccountName"] == f"{job}-trainer", role
        # The driver runs on the head and writes the job's report; nobody else needs the token.
        assert pod["automountServiceAccountToken"] is (role == "head"), role


@pytest.mark.parametrize(("name", "ray_job"), RAY_JOBS, ids=[n for n, _ in RAY_JOBS])
def test_the_cluster_and_every_ray_client_use_the_jobs_token(name: str, ray_job: JSON) -> None:
    job = ray_job["metadata"]["labels"]["rlhf.dev/job"]
    secret = f"{job}-ray-token"
    cluster = ray_job["spec"]["rayClusterSpec"]
    assert cluster["authOptions"] == {"mode": "token", "secretName": secret}
    for role, pod in _pods(ray_job).items():
        env = {e["name"]: e for e in pod["containers"][0]["env"]}
        assert env["RAY_AUTH_MODE"]["value"] == "token", role
        ref = env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"]
        assert ref == {"name": secret, "key": "auth_token"}, role


@pytest.mark.parametrize(
    "name", ["RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RLHF_JOB_REPORT", "HOME", "RAY_ADDRESS"]
)
def test_a_job_cannot_switch_its_ray_authentication_off(name: str) -> None:
    """Refused, not dropped: the author learns why (rlhf_trainer.config.env_rules)."""
    with pytest.raises(ValidationError) as err:
        make_job(env=[{"name": name, "value": "disabled"}])
    assert validation_messages(err.value)[0].startswith(f"spec.env[0].name: {name}: ")


def test_every_variable_the_operator_sets_is_reserved() -> None:
    """One truth: what the builders put in a pod beside spec.env, spec.env cannot name."""
    ray_job = render_children(make_job(), SETTINGS).ray_job
    for role, pod in _pods(ray_job).items():
        ours = {e["name"] for e in pod["containers"][0]["env"]}
        settable = {n for n in ours if reserved_reason(n) is None and not is_credential(n)}
        assert not settable, (role, settable)


def test_scratch_sizes_follow_the_spec() -> None:
    resources = {"tmpSize": "10Gi", "cacheSize": "500Gi"}
    ray_job = render_children(make_job(placement={"resources": resources}), SETTINGS).ray_job
    head = _pods(ray_job)["head"]
    limits = {v["name"]: v["emptyDir"]["sizeLimit"] for v in head["volumes"] if "emptyDir" in v}
    assert limits == {"tmp": "10Gi", "home": "500Gi", "dshm": "8Gi"}


# --- the checker itself ----------------------------------------------------------------------

GOOD: JSON = {
    "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
    "containers": [
        {
            "name": "c",
            "securityContext": {
                "allowPrivilegeEscalation": False,
                "capabilities": {"drop": ["ALL"]},
            },
        }
    ],
    "volumes": [{"name": "v", "emptyDir": {}}],
}


def _with(path: str, value: Any) -> JSON:
    pod = copy.deepcopy(GOOD)
    node: Any = pod
    parts = path.split(".")
    for part in parts[:-1]:
        node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
    last = parts[-1]
    if value is None:
        node.pop(last, None)
    else:
        node[last] = value
    return pod


BROKEN = {
    "host-network": (_with("hostNetwork", True), "spec.hostNetwork"),
    "host-path": (_with("volumes", [{"name": "h", "hostPath": {"path": "/"}}]), "hostPath"),
    "privileged": (
        _with("containers.0.securityContext.privileged", True),
        "securityContext.privileged",
    ),
    "escalation-allowed": (
        _with("containers.0.securityContext.allowPrivilegeEscalation", None),
        "allowPrivilegeEscalation",
    ),
    "root": (_with("securityContext.runAsNonRoot", None), "runAsNonRoot"),
    "uid-0": (_with("securityContext.runAsUser", 0), "runAsUser"),
    "no-seccomp": (_with("securityContext.seccompProfile", None), "seccompProfile"),
    "capabilities-kept": (
        _with("containers.0.securityContext.capabilities", {"drop": []}),
        "capabilities.drop",
    ),
    "capability-added": (
        _with("containers.0.securityContext.capabilities", {"drop": ["ALL"], "add": ["SYS_ADMIN"]}),
        "capabilities.add",
    ),
    "host-port": (_with("containers.0.ports", [{"containerPort": 80, "hostPort": 80}]), "hostPort"),
    "unsafe-sysctl": (
        _with("securityContext.sysctls", [{"name": "kernel.msgmax", "value": "1"}]),
        "sysctls",
    ),
    "nfs-volume": (_with("volumes", [{"name": "n", "nfs": {"server": "x"}}]), "nfs"),
    "init-container-escalates": (
        _with("initContainers", [{"name": "i", "securityContext": {}}]),
        "spec.initContainers[0]",
    ),
}


def test_the_checker_passes_a_compliant_pod() -> None:
    assert violations(GOOD) == []


@pytest.mark.parametrize(("pod", "field"), BROKEN.values(), ids=BROKEN.keys())
def test_the_checker_names_each_broken_rule(pod: JSON, field: str) -> None:
    found = violations(pod)
    assert found and any(field in v for v in found), found
