"""Failures the user can see before training starts: children the API server refuses, pods that
do not run (and why), and the startup timeout."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest

from rlhf_operator.api.v1alpha1 import ConditionReason, EventType, Phase
from rlhf_operator.controllers.reader import Reader
from rlhf_operator.kube.client import KubeApi
from rlhf_operator.reconcile.decide import Decision, decide
from rlhf_operator.reconcile.diagnosis import pod_diagnosis
from rlhf_operator.reconcile.observed import (
    ApplyFailure,
    Observed,
    PodObservation,
    PodProblem,
    PodTrouble,
)
from rlhf_operator.settings import OperatorSettings

from .factories import conditions, job_body, ray_job

NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
SETTINGS = OperatorSettings(default_trainer_image="rlhf-trainer:test", instance="test")
T, F = "True", "False"
NO_GPU = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."
PULL = 'Back-off pulling image "rlhf-trainer:typo"'
NO_SECRET = 'secret "hf-token" not found'


def _ago(seconds: float) -> str:
    return (NOW - timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(
    name: str,
    *,
    unschedulable: str | None = None,
    waiting: tuple[str, str] | None = None,
    init_waiting: tuple[str, str] | None = None,
) -> PodObservation:
    """A Pod object as the API server returns it, observed."""
    status: dict[str, Any] = {"phase": "Pending", "conditions": []}
    if unschedulable is not None:
        status["conditions"].append(
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": unschedulable,
            }
        )
    for key, state in (("containerStatuses", waiting), ("initContainerStatuses", init_waiting)):
        if state is not None:
            reason, message = state
            waiting_state = {"waiting": {"reason": reason, "message": message}}
            status[key] = [{"name": "ray-worker", "state": waiting_state}]
    return PodObservation.from_object({"metadata": {"name": name}, "status": status})


@pytest.mark.parametrize(
    ("pods", "reason", "message"),
    [
        (
            [pod("w-0", unschedulable=NO_GPU)],
            ConditionReason.UNSCHEDULABLE,
            f"pod w-0: Unschedulable: {NO_GPU}",
        ),
        (
            [pod("head", waiting=("ImagePullBackOff", PULL))],
            ConditionReason.IMAGE_PULL_FAILED,
            f"pod head: container ray-worker: ImagePullBackOff: {PULL}",
        ),
        (
            [pod("head", init_waiting=("ErrImagePull", PULL))],
            ConditionReason.IMAGE_PULL_FAILED,
            "ErrImagePull",
        ),
        (
            [pod("w-0", waiting=("CreateContainerConfigError", NO_SECRET))],
            ConditionReason.CONTAINER_CONFIG_ERROR,
            f"CreateContainerConfigError: {NO_SECRET}",
        ),
        (
            [pod("w-0", waiting=("CrashLoopBackOff", "back-off 5m0s restarting"))],
            ConditionReason.CONTAINER_CRASH_LOOPING,
            "CrashLoopBackOff: back-off 5m0s restarting",
        ),
        (
            [pod(f"w-{i}", unschedulable=NO_GPU) for i in range(3)]
            + [pod("head", waiting=("CreateContainerConfigError", NO_SECRET))],
            ConditionReason.CONTAINER_CONFIG_ERROR,
            f"{NO_SECRET}; pod w-0 (and 2 more): Unschedulable: {NO_GPU}",
        ),
    ],
    ids=[
        "unschedulable",
        "image-pull-backoff",
        "init-container-image",
        "missing-secret",
        "crash-loop",
        "the-one-to-fix-first-leads-replicas-named-once",
    ],
)
def test_pod_diagnosis(pods: list[PodObservation], reason: ConditionReason, message: str) -> None:
    found = pod_diagnosis(pods)
    assert found is not None
    assert found[0] is reason
    assert message in found[1]


def test_pods_that_are_only_starting_have_no_trouble() -> None:
    creating = pod("head", waiting=("ContainerCreating", ""))
    assert pod_diagnosis([creating, pod("w-0")]) is None


# --- the startup timeout ----------------------------------------------------------------


def _provisioning_status(since: float, **extra: Any) -> dict[str, Any]:
    """Stored status of an attempt whose RayJob was created `since` seconds ago."""
    at = _ago(since)
    return {
        "phase": "Provisioning",
        "conditions": [
            {"type": kind, "status": state, "reason": reason, "lastTransitionTime": at}
            for kind, state, reason in (
                ("Admitted", T, "RayJobCreated"),
                ("Running", F, "ClusterProvisioning"),
            )
        ],
        **extra,
    }


def _decide(
    status: dict[str, Any] | None, pods: tuple[PodObservation, ...] = (), **spec: Any
) -> Decision:
    observed = Observed.of([ray_job(0, "Initializing")], pods=pods)
    return decide(job_body(status=status, **spec), observed, SETTINGS, NOW)


def test_pods_that_do_not_run_are_reported_while_waiting() -> None:
    decision = _decide(_provisioning_status(60), (pod("head", waiting=("ImagePullBackOff", PULL)),))
    assert decision.status.phase is Phase.PROVISIONING
    assert conditions(decision.status)["ClusterReady"] == (F, "ImagePullFailed")
    assert PULL in (decision.status.message or "")
    [event] = [e for e in decision.events if e.reason is ConditionReason.IMAGE_PULL_FAILED]
    assert event.type is EventType.WARNING and PULL in event.message
    # No timer to look at the pods again (their watch runs the next pass): the next look of
    # its own is due at the start-up timeout (1800 s, 60 s of it gone). Nothing is deleted.
    assert decision.requeue_after == pytest.approx(1800 - 60)
    assert decision.delete_ray_jobs == ()


def test_startup_timeout_fails_the_job_and_frees_the_pods() -> None:
    pods = (pod("w-0", unschedulable=NO_GPU),)
    decision = _decide(_provisioning_status(1801), pods)
    assert decision.status.phase is Phase.FAILED
    assert conditions(decision.status)["Failed"] == (T, "StartupTimeout")
    message = decision.status.message or ""
    assert "runPolicy.startupTimeoutSeconds (1800s)" in message and NO_GPU in message
    assert decision.delete_ray_jobs == ("ppo-7b-r0",)
    assert ConditionReason.STARTUP_TIMEOUT in [e.reason for e in decision.events]


def test_startup_timeout_quotes_kuberay_when_no_pod_says_why() -> None:
    observed = Observed.of([ray_job(0, "Initializing", reason="HeadPodNotFound")])
    body = job_body(status=_provisioning_status(1801))
    decision = decide(body, observed, SETTINGS, NOW)
    assert "KubeRay: HeadPodNotFound" in (decision.status.message or "")


def test_before_the_timeout_the_next_look_is_due_at_it() -> None:
    decision = _decide(_provisioning_status(50), runPolicy={"startupTimeoutSeconds": 60})
    assert decision.status.phase is Phase.PROVISIONING
    assert decision.requeue_after == pytest.approx(10)


def test_the_clock_restarts_when_the_user_resumes() -> None:
    status = _provisioning_status(7200)
    status["conditions"].append(
        {"type": "Suspended", "status": F, "reason": "Resumed", "lastTransitionTime": _ago(10)}
    )
    decision = _decide(status)
    assert decision.status.phase is Phase.PROVISIONING


def test_no_timeout_while_kueue_holds_the_rayjob() -> None:
    observed = Observed.of([ray_job(0, "Suspended", suspend=True)])
    body = job_body(status=_provisioning_status(7200), placement={"queueName": "research"})
    decision = decide(body, observed, SETTINGS, NOW)
    assert decision.status.phase is Phase.PENDING
    assert "Failed" not in conditions(decision.status)


# --- children the API server refuses ----------------------------------------------------

NO_CRD = ApplyFailure(
    "RayJob", "ppo-7b-r0", 404, "NotFound", "the server could not find the requested resource"
)
QUOTA = ApplyFailure(
    "ConfigMap",
    "ppo-7b-config",
    403,
    "Forbidden",
    'configmaps "ppo-7b-config" is forbidden: exceeded quota: team-a, requested: configmaps=1',
)


def test_missing_kuberay_crd_is_a_condition_and_an_event_naming_the_rayjob() -> None:
    decision = decide(job_body(), Observed(apply_failures=(NO_CRD,)), SETTINGS, NOW)
    assert conditions(decision.status)["ChildrenApplied"] == (F, "ChildApplyFailed")
    message = decision.status.message or ""
    assert message.startswith("RayJob ppo-7b-r0: HTTP 404 NotFound: the server could not find")
    assert "is KubeRay installed?" in message
    [event] = [e for e in decision.events if e.reason is ConditionReason.CHILD_APPLY_FAILED]
    assert event.type is EventType.WARNING and "RayJob ppo-7b-r0" in event.message
    assert decision.status.phase is Phase.PENDING


def test_a_refused_child_holds_back_the_rayjob() -> None:
    decision = decide(job_body(), Observed(apply_failures=(QUOTA,)), SETTINGS, NOW)
    assert "RayJob" not in [d.kind for d in decision.apply]
    [condition] = [c for c in decision.status.conditions if c.type.value == "ChildrenApplied"]
    assert "exceeded quota" in condition.message and "ConfigMap ppo-7b-config" in condition.message


def test_recovery_is_announced_once_and_a_repeated_refusal_is_not() -> None:
    refused = decide(job_body(), Observed(apply_failures=(NO_CRD,)), SETTINGS, NOW)
    stored = refused.status.to_manifest()
    again = decide(job_body(status=stored), Observed(apply_failures=(NO_CRD,)), SETTINGS, NOW)
    assert ConditionReason.CHILD_APPLY_FAILED not in [e.reason for e in again.events]
    fixed = decide(job_body(status=stored), Observed(), SETTINGS, NOW)
    assert conditions(fixed.status)["ChildrenApplied"] == (T, "ChildrenApplied")
    assert [e.reason for e in fixed.events] == [ConditionReason.CHILDREN_APPLIED]


def test_a_pod_event_concerns_the_job_only_where_a_problem_or_disruption_came_or_went() -> None:
    """What a pass reads of a job's pods is their problems and disruptions: a pod that comes
    Pending or goes Running without either runs no pass; one that gains or loses one does."""
    reader = Reader(cast(KubeApi, None), SETTINGS)
    key = ("default", "ppo")
    pulling = PodObservation(
        "ppo-r0-head",
        "Pending",
        (PodProblem(PodTrouble.IMAGE_PULL, f"container ray-head: {PULL}"),),
    )
    index: dict[Any, list[tuple[str, PodObservation]]] = {key: []}
    reader.pods = index
    assert reader.pods_changed(key)  # no pass has read this job yet
    reader.mark_pods_read(key)  # as a pass does
    index[key] = [("0", PodObservation("ppo-r0-head", "Pending"))]
    assert not reader.pods_changed(key)
    index[key] = [("0", PodObservation("ppo-r0-head", "Running"))]
    assert not reader.pods_changed(key)
    index[key] = [("0", pulling)]
    assert reader.pods_changed(key)
    reader.mark_pods_read(key)
    index[key] = [("0", pulling), ("0", PodObservation("ppo-r0-worker", "Pending"))]
    assert not reader.pods_changed(key)
    index[key] = [("0", PodObservation("ppo-r0-head", "Pending"))]  # the pull went through
    assert reader.pods_changed(key)
    reader.forget(key)
    assert reader.pods_changed(key)
