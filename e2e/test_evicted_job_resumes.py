"""Issue 21's whole-job preemption "Must show" on a cluster: every pod of a running tiny PPO
job is evicted at once (policy/v1 Eviction, as a node drain or Kueue sends it). Each Ray pod's
preStop hook has Ray stop the job: the driver checkpoints its last finished step while the
ranks on the evicted workers still serve it, reports itself Preempted and exits; the operator
says Disrupted=True meanwhile, classes the attempt Preempted (`preemptions: 1`; backoffLimit 0
and still retried: not charged), and attempt 2 resumes at the step after that checkpoint and
succeeds. Slow: opt in with `-m slow`."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from e2e_cluster import Cluster, wait_for
from e2e_job import adapt_for_kind, load_example
from e2e_local import LocalSubstrate
from e2e_settings import OPERATOR_NAMESPACE, TIMEOUT, TRAINER_IMAGE
from test_tiny_ppo_when_things_go_wrong import (
    assert_succeeded,
    complete_checkpoints,
    jobs,
    local_only,
    status,
    step_records,
    wait_finished,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
__all__ = ["jobs"]  # the fixture, shared with the other slow journeys

Manifest = dict[str, Any]
MAX_STEPS = 30
GRACE_SECONDS = 180


def all_records(metrics: Path) -> list[dict[str, Any]]:
    """metrics.jsonl's records (steps and checkpoints), a line being written left out."""
    out = []
    for line in metrics.read_text().splitlines() if metrics.exists() else []:
        with contextlib.suppress(json.JSONDecodeError):
            out.append(json.loads(line))
    return out


def evict(cluster: Cluster, namespace: str, pod: str) -> str:
    """`kubectl drain`'s request for one pod."""
    eviction = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": pod, "namespace": namespace},
    }
    path = f"/api/v1/namespaces/{namespace}/pods/{pod}/eviction"
    return cluster.kubectl("create", "--raw", path, "-f", "-", stdin=json.dumps(eviction))


def test_evicting_every_pod_checkpoints_and_the_next_attempt_resumes_there(
    cluster: Cluster,
    substrate: LocalSubstrate | None,
    namespace: str,
    jobs: Callable[[Manifest], str],
) -> None:
    local = local_only(substrate)  # reads the volume's metrics and checkpoints
    job = adapt_for_kind(
        load_example(), image=TRAINER_IMAGE, namespace=namespace, max_steps=MAX_STEPS
    )
    name = job["metadata"]["name"] = "tiny-ppo-evicted"
    job["spec"]["training"]["deterministic"] = True
    job["spec"]["checkpoint"]["everySteps"] = 1000  # only the eviction's and the last
    job["spec"]["runPolicy"]["backoffLimit"] = 0  # a charged failure would fail the job
    job["spec"]["runPolicy"]["checkpointOnPreemptionSeconds"] = GRACE_SECONDS
    jobs(job)
    volume = local.pvc_dir(namespace, f"{name}-checkpoints")
    metrics = volume / name / "output" / "metrics.jsonl"

    def training() -> int | None:
        steps = [r["step"] for r in step_records(metrics)]
        assert not steps or steps[-1] < MAX_STEPS, "the run ended before the eviction"
        return steps[-1] if steps and steps[-1] >= 3 else None

    wait_for(
        training,
        timeout=TIMEOUT,
        interval=0.5,
        what=f"{name}: three steps logged",
        on_timeout=lambda: cluster.diagnostics(namespace, OPERATOR_NAMESPACE),
    )
    pods = [p["metadata"]["name"] for p in cluster.list("pods", namespace, f"rlhf.dev/job={name}")]
    assert len(pods) >= 3, pods  # the head, the workers and the submitter
    assert not complete_checkpoints(volume), "a checkpoint before the eviction"
    with ThreadPoolExecutor(len(pods)) as pool:  # at once, as a drain of their node
        said = list(pool.map(lambda pod: evict(cluster, namespace, pod), pods))
    assert all('"status":"Success"' in s.replace(" ", "") for s in said), said

    def disrupted() -> dict[str, Any] | None:
        found = status(cluster, namespace, name)
        by_type = {c["type"]: c for c in found.get("conditions") or []}
        if found.get("preemptions"):
            return found  # the pass that saw the pods may have been quick
        return found if by_type.get("Disrupted", {}).get("status") == "True" else None

    seen = wait_for(
        disrupted,
        timeout=120,
        interval=0.5,
        what=f"{name}: Disrupted=True",
        on_timeout=lambda: cluster.diagnostics(namespace, OPERATOR_NAMESPACE),
    )
    by_type = {c["type"]: c for c in seen.get("conditions") or []}
    if "Disrupted" in by_type:
        assert by_type["Disrupted"]["reason"] == "Preempted"
        assert "EvictionByEvictionAPI" in by_type["Disrupted"]["message"]

    found = wait_finished(cluster, namespace, name)
    assert_succeeded(cluster, namespace, found)
    assert (found["restarts"], found["preemptions"]) == (1, 1), found  # backoffLimit 0 intact
    assert found["trainer"]["step"] == found["trainer"]["totalSteps"] == MAX_STEPS
    restarted = {c["type"]: c for c in found["conditions"]}["Restarted"]
    assert restarted["reason"] == "Preempted", restarted
    assert "was preempted" in restarted["message"], restarted

    # metrics.jsonl in file order: attempt 1's steps, the checkpoint taken at the eviction
    # (everySteps is out of reach: the first checkpoint there is), attempt 2's steps.
    records = [r for r in all_records(metrics) if r.get("event") in ("step", "checkpoint")]
    at = next((i for i, r in enumerate(records) if r["event"] == "checkpoint"), None)
    assert at is not None, f"no checkpoint in {metrics}: {complete_checkpoints(volume)}"
    at_eviction = records[at]["step"]
    first = [r for r in records[:at] if r["event"] == "step"]
    second = [r for r in records[at + 1 :] if r["event"] == "step"]
    assert first[-1]["step"] == at_eviction < MAX_STEPS  # the latest step attempt 1 finished
    assert at_eviction in complete_checkpoints(volume), (at_eviction, complete_checkpoints(volume))
    # The trainer's own words, quoted on status: where it stopped and that it checkpointed.
    assert f"after {at_eviction} completed steps; final checkpoint" in restarted["message"]
    assert second[0]["step"] == at_eviction + 1, (
        f"attempt 2 began at step {second[0]['step']}; attempt 1 checkpointed step {at_eviction}"
    )
    assert second[-1]["step"] == MAX_STEPS
