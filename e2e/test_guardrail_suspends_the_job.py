"""Issue 21's guardrail "Must show" on a cluster: the tiny PPO job with a KL bound it must
exceed (maxKl 1e-9; the actor is frozen for 2 steps, so step 4 is the first whose samples come
from an updated policy) stops at step 4 with its checkpoint, is Suspended with Healthy=False
(KLAboveBound) and a Warning Event quoting the metric, its value and the bound; the bound
raised, it resumes from that checkpoint and succeeds. Slow: opt in with `-m slow`."""

from __future__ import annotations

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
    jobs,
    status,
    wait_finished,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
__all__ = ["jobs"]  # the fixture, shared with the other slow journeys

Manifest = dict[str, Any]


def test_a_kl_bound_suspends_the_job_and_raising_it_resumes(
    cluster: Cluster,
    substrate: LocalSubstrate | None,
    namespace: str,
    jobs: Callable[[Manifest], str],
) -> None:
    job = adapt_for_kind(load_example(), image=TRAINER_IMAGE, namespace=namespace, max_steps=6)
    job["metadata"]["name"] = "tiny-ppo-guardrail"
    job["spec"]["checkpoint"]["everySteps"] = 100  # only the trip's and the last
    job["spec"]["runPolicy"]["guardrails"] = {"maxKl": 1e-9}
    name = jobs(job)

    def suspended() -> dict[str, Any] | None:
        found = status(cluster, namespace, name)
        assert found.get("phase") not in ("Succeeded", "Failed"), found
        return found if found.get("phase") == "Suspended" else None

    tripped = wait_for(
        suspended,
        timeout=TIMEOUT,
        interval=5,
        what=f"RLHFJob {namespace}/{name} to be suspended by its guardrail",
        on_timeout=lambda: cluster.diagnostics(namespace, OPERATOR_NAMESPACE),
    )
    healthy = next(c for c in tripped["conditions"] if c["type"] == "Healthy")
    assert (healthy["status"], healthy["reason"]) == ("False", "KLAboveBound")
    assert "guardrail runPolicy.guardrails.maxKl tripped at step 4" in healthy["message"]
    assert "> 1e-09" in healthy["message"]
    assert tripped["guardrailTrips"] == 1
    events = cluster.kubectl(
        "get", "events", "-n", namespace, "--field-selector", f"involvedObject.name={name}"
    )
    assert "KLAboveBound" in events and "maxKl tripped at step 4" in events, events
    if substrate is not None:  # the checkpoint of the trip, on the volume
        volume = substrate.pvc_dir(namespace, f"{name}-checkpoints")
        assert 4 in complete_checkpoints(volume), complete_checkpoints(volume)

    cluster.kubectl(
        "patch",
        "rlhfjob",
        name,
        "-n",
        namespace,
        "--type",
        "merge",
        "-p",
        '{"spec": {"runPolicy": {"guardrails": {"maxKl": 10}}}}',
    )
    found = wait_finished(cluster, namespace, name)
    assert_succeeded(cluster, namespace, found)
    assert (found["restarts"], found["guardrailTrips"]) == (1, 1)
    assert found["trainer"]["step"] == 6
    conditions = {c["type"]: c for c in found["conditions"]}
    assert (conditions["Healthy"]["status"], conditions["Healthy"]["reason"]) == (
        "True",
        "GuardrailResumed",
    )
