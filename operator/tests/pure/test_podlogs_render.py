"""Every container of a job's pods runs in the log wrapper: the rendered RayJob (annotation,
command, environment, the storage volume on the submitter) and the rendered command lines
themselves, run by bash as KubeRay's pods would, with KubeRay's generated `ray start` line
(quotes and all) and the submitter's environment."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from rlhf_operator.builders.children import render_children
from rlhf_operator.builders.podlogs import OVERWRITE_COMMAND_ANNOTATION
from rlhf_operator.settings import OperatorSettings, PlatformPolicy

from .factories import make_job

SETTINGS = OperatorSettings(default_trainer_image="rlhf-trainer:test", instance="test")
JSON = dict[str, Any]


def _ray_job(attempt: int = 2, **sections: Any) -> JSON:
    return render_children(make_job(**sections), SETTINGS, attempt=attempt).ray_job


def _containers(ray_job: JSON) -> dict[str, tuple[JSON, JSON]]:
    """role -> (pod template, its one container)."""
    cluster = ray_job["spec"]["rayClusterSpec"]
    templates = {"head": cluster["headGroupSpec"]["template"]}
    for group in cluster["workerGroupSpecs"]:
        templates[f"worker:{group['groupName']}"] = group["template"]
    templates["submitter"] = ray_job["spec"]["submitterPodTemplate"]
    return {role: (t, t["spec"]["containers"][0]) for role, t in templates.items()}


def _env(container: JSON) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_every_container_is_wrapped_and_knows_where_to_write() -> None:
    ray_job = _ray_job()
    assert ray_job["metadata"]["annotations"][OVERWRITE_COMMAND_ANNOTATION] == "true"
    for role, (template, container) in _containers(ray_job).items():
        line = " ".join(container["command"] + container["args"])
        assert "exec python -m rlhf_trainer.podlogs" in line, role
        events = " --events" if role == "head" else ""  # the head keeps the job's Events
        assert f"--container {container['name']} --max-size 10Mi --max-files 5{events} --" in line
        env = _env(container)
        assert env["RLHF_LOGS_DIR"] == "/storage/ppo-7b/logs/attempt-2", role
        assert env["RLHF_POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}, role
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        assert mounts["/storage"] == "storage", role
        if role != "submitter":
            assert template["metadata"]["annotations"][OVERWRITE_COMMAND_ANNOTATION] == "true"
            assert '"$KUBERAY_GEN_RAY_START_CMD"' in line, role


def test_the_rotation_bounds_come_from_the_spec() -> None:
    ray_job = _ray_job(logging={"containerLogs": {"maxSize": "1Mi", "maxFiles": 2}})
    for role, (_, container) in _containers(ray_job).items():
        assert "--max-size 1Mi --max-files 2" in container["args"][0], role


def test_a_read_write_once_volume_takes_the_submitter_to_the_workers_node() -> None:
    """It attaches to one node: the submitter joins the worker there (as the head does),
    unless the platform pins the submitter to a node pool of its own: then no log of it."""
    storage = {"storage": {"size": "10Gi", "accessMode": "ReadWriteOnce"}}
    ray_job = _ray_job(checkpoint=storage)
    template, submitter = _containers(ray_job)["submitter"]
    head_template, head = _containers(ray_job)["head"]
    assert template["spec"]["affinity"] == head_template["spec"]["affinity"]
    assert _env(submitter)["RLHF_LOGS_DIR"] == _env(head)["RLHF_LOGS_DIR"]
    pinned = replace(SETTINGS, policy=PlatformPolicy(node_selector=(("pool", "system"),)))
    ray_job = render_children(make_job(checkpoint=storage), pinned, attempt=2).ray_job
    template, submitter = _containers(ray_job)["submitter"]
    assert "affinity" not in template["spec"]
    assert "/storage" not in {m["mountPath"] for m in submitter["volumeMounts"]}
    assert "RLHF_LOGS_DIR" not in _env(submitter)


def _bash(container: JSON, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The container's command as the kubelet runs it, with `env`'s PATH first, then this
    test's Python (the image's `python`)."""
    first = [env.pop("PATH")] if "PATH" in env else []
    path = ":".join([*first, str(Path(sys.executable).parent), os.environ["PATH"]])
    return subprocess.run(
        container["command"] + container["args"],
        env={**env, "PATH": path, "HOME": env.get("HOME", "/tmp")},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("role", ["head", "worker"])
def test_the_rendered_ray_command_runs_kuberays_start_line_and_keeps_its_output(
    role: str, tmp_path: Path
) -> None:
    ray_job = _ray_job(attempt=1)
    [(_, container)] = [c for r, c in _containers(ray_job).items() if r.startswith(role)]
    # What KubeRay puts there: flags with single-quoted JSON (rayStartParams' resources).
    start = "printf '%s\\n' --resources='{\"GPU-like\": 4}' --block; exit 3"
    logs = tmp_path / "attempt-1"
    result = _bash(
        container,
        {"KUBERAY_GEN_RAY_START_CMD": start, "RLHF_LOGS_DIR": str(logs), "RLHF_POD_NAME": "p-0"},
    )
    assert result.returncode == 3, result.stderr
    assert result.stdout.splitlines() == ['--resources={"GPU-like": 4}', "--block"]
    kept = (logs / "p-0" / f"{container['name']}.log").read_text().splitlines()
    assert [line.split(" ", 1)[1] for line in kept] == result.stdout.splitlines()


def test_the_rendered_submitter_submits_once_and_follows_a_job_already_submitted(
    tmp_path: Path,
) -> None:
    """`ray` is replaced by a script that records its arguments: what is checked here is the
    shell quoting of KubeRay's submit command inside the wrapper."""
    ray_job = _ray_job(attempt=0)
    _, container = _containers(ray_job)["submitter"]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    ray = bin_dir / "ray"
    # `ray job status` fails (nothing submitted yet) unless $SUBMITTED is set.
    ray.write_text(
        '#!/bin/bash\nif [ "$2" = status ]; then [ -n "$SUBMITTED" ]; exit; fi\necho "ray $*"\n'
    )
    ray.chmod(ray.stat().st_mode | stat.S_IXUSR)
    env = {
        "PATH": str(bin_dir),
        "RAY_DASHBOARD_ADDRESS": "ppo-7b-r0-head-svc.team-a.svc.cluster.local:8265",
        "RAY_JOB_SUBMISSION_ID": "ppo-7b-r0-abcde",
        "RLHF_LOGS_DIR": str(tmp_path / "attempt-0"),
        "RLHF_POD_NAME": "ppo-7b-r0-xyz",
    }
    first = _bash(container, dict(env))
    assert first.returncode == 0, first.stderr
    address = "--address http://ppo-7b-r0-head-svc.team-a.svc.cluster.local:8265"
    assert first.stdout.strip() == (
        f"ray job submit {address} --submission-id ppo-7b-r0-abcde -- python -m rlhf_trainer "
        "run --config /etc/rlhf/job.yaml --resume auto --run-dir /storage/ppo-7b/output"
    )
    retried = _bash(container, {**env, "SUBMITTED": "1"})
    assert retried.stdout.strip() == f"ray job logs {address} --follow ppo-7b-r0-abcde"
    kept = (tmp_path / "attempt-0" / "ppo-7b-r0-xyz" / "ray-job-submitter.log").read_text()
    assert "ray job submit" in kept and "ray job logs" in kept
