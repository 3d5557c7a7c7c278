"""Issue 21's logs that outlive the pods: a tiny job of two attempts (a worker killed after a
checkpoint, retried) is deleted together with its pods; `rlhf logs` then prints, from the
job's volume, each pod's log of both attempts (head, worker, submitter; the killed worker's
up to its kill) and the trainer's records. Slow: opt in with `-m slow`; the volume's
directory is the local substrate's."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
from e2e_cluster import Cluster, wait_for
from e2e_job import adapt_for_kind, load_example
from e2e_local import LocalSubstrate
from e2e_settings import OPERATOR_NAMESPACE, TIMEOUT, TRAINER_IMAGE
from test_tiny_ppo_when_things_go_wrong import (
    assert_succeeded,
    complete_checkpoints,
    jobs,  # noqa: F401 (the fixture)
    local_only,
    step_records,
    wait_finished,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

Manifest = dict[str, Any]
STEPS = 6


def rlhf_logs(*args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "rlhf_trainer.cli", "logs", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def sections(text: str) -> dict[str, list[str]]:
    """`rlhf logs` output: file (the header's path) -> its lines."""
    found: dict[str, list[str]] = {}
    current = ""
    for line in text.splitlines():
        if line.startswith("==> ") and line.endswith(" <=="):
            current = line[4:-4]
            found[current] = []
        else:
            found[current].append(line)
    return found


def test_every_pods_log_of_both_attempts_is_read_back_after_the_job_is_deleted(
    cluster: Cluster,
    substrate: LocalSubstrate | None,
    namespace: str,
    jobs: Callable[[Manifest], str],  # noqa: F811
) -> None:
    local = local_only(substrate)
    job = adapt_for_kind(load_example(), image=TRAINER_IMAGE, namespace=namespace, max_steps=STEPS)
    name = job["metadata"]["name"] = "tiny-ppo-logs"
    job["spec"]["checkpoint"]["everySteps"] = 2
    # Kept when the job is deleted (else garbage-collected with it, logs and all).
    job["spec"]["checkpoint"]["storage"]["retainOnDelete"] = True
    job["spec"]["runPolicy"]["backoffLimit"] = 1
    jobs(job)
    volume = local.pvc_dir(namespace, f"{name}-checkpoints")
    metrics = volume / name / "output" / "metrics.jsonl"
    pods: dict[int, set[str]] = {}

    def seen() -> None:
        for pod in cluster.list("pods", namespace, f"rlhf.dev/job={name}"):
            labels = pod["metadata"]["labels"]
            pods.setdefault(int(labels["rlhf.dev/attempt"]), set()).add(pod["metadata"]["name"])

    def after_a_checkpoint() -> int | None:
        seen()
        steps = [r["step"] for r in step_records(metrics)]
        done = complete_checkpoints(volume)
        assert not steps or steps[-1] < STEPS, "the run ended before the worker could be killed"
        return int(steps[-1]) if done and steps and done[-1] < steps[-1] else None

    wait_for(
        after_a_checkpoint,
        timeout=TIMEOUT,
        interval=0.5,
        what=f"{name}: a step logged after a complete checkpoint",
        on_timeout=lambda: cluster.diagnostics(namespace, OPERATOR_NAMESPACE),
    )
    workers = cluster.list("pods", namespace, f"rlhf.dev/job={name},ray.io/node-type=worker")
    killed = [
        pid for pod in workers for pid in local.kill_containers(namespace, pod["metadata"]["name"])
    ]
    assert killed, cluster.diagnostics(namespace, OPERATOR_NAMESPACE)

    def second_attempt_running() -> bool | None:
        seen()
        return True if len(pods.get(1, ())) >= 3 else None  # head, worker, submitter

    wait_for(second_attempt_running, timeout=TIMEOUT, interval=1, what="attempt 1's pods")
    found = wait_finished(cluster, namespace, name)
    assert_succeeded(cluster, namespace, found)
    assert found["restarts"] == 1
    claim = f"{name}-checkpoints"
    assert found["output"]["logs"] == f"pvc://{claim}/{name}/logs"

    # The job and every pod of it gone; the claim (and so the volume) stays.
    cluster.kubectl("delete", "rlhfjob", name, "-n", namespace, "--wait=true", timeout=300)
    wait_for(
        lambda: not cluster.list("pods", namespace, f"rlhf.dev/job={name}"),
        timeout=300,
        interval=2,
        what=f"{name}'s pods to be gone",
    )
    assert cluster.get("rlhfjob", name, namespace) is None

    listed = rlhf_logs("--job", name, "--from", str(volume), "--list").splitlines()
    shown = sections(rlhf_logs("--job", name, "--from", str(volume)))
    for attempt in (0, 1):
        files = [f for f in shown if f.startswith(f"attempt-{attempt}/")]
        kept = {f.split("/")[1] for f in listed if f.startswith(f"attempt-{attempt}/")}
        assert pods[attempt] <= kept, (attempt, pods[attempt], listed)
        for pod in pods[attempt]:
            [log] = [f for f in files if f.split("/")[1] == pod]
            assert any(line.strip() for line in shown[log]), f"{log} is empty"
        head = [line for f in files if "-head-" in f for line in shown[f]]
        assert any("Ray runtime started" in line for line in head), head
        assert [f for f in files if f.endswith("/ray-job-submitter.log")], files
        assert shown.get(f"attempt-{attempt}/trainer.jsonl"), f"attempt {attempt}: no records"
    # The driver's output reached the volume through the submitter: attempt 1 resumed, ended.
    ended = f"{name} finished {STEPS} steps (resumed at step"
    submitted = [line for f in shown if f.endswith("/ray-job-submitter.log") for line in shown[f]]
    assert any(ended in line for line in submitted), submitted
    assert any(ended in line for line in shown["attempt-1/trainer.jsonl"])
    assert any("checkpoint of step" in line for line in shown["attempt-0/trainer.jsonl"])
    assert any("resumed from the checkpoint of step" in x for x in shown["attempt-1/trainer.jsonl"])
    # The job's Events, kept by attempt 1's head pod: the operator's retry among them.
    events = shown.get("attempt-1/events.jsonl", [])
    assert any(" rlhfjob/tiny-ppo-logs: " in line for line in events), events
    assert any("/tiny-ppo-logs-r1" in line for line in events), events
    # One pod's log alone, by a part of its name.
    only = sections(
        rlhf_logs("--job", name, "--from", str(volume), "--attempt", "0", "--pod", "worker")
    )
    assert only and all(f.startswith("attempt-0/") and "worker" in f for f in only), only
