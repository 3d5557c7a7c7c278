"""Status tables: each observed RayJob state -> phase and conditions; run policy; events."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from rlhf_operator.api.v1alpha1 import (
    ConditionReason,
    ConditionType,
    Phase,
    RLHFJobStatus,
    TrainerReport,
)
from rlhf_operator.reconcile.decide import decide, status_patch
from rlhf_operator.reconcile.observed import Observed
from rlhf_operator.settings import OperatorSettings

from .factories import conditions, job_body, ray_job

NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
SETTINGS = OperatorSettings(default_trainer_image="rlhf-trainer:test", instance="test")


@dataclass(frozen=True)
class Row:
    id: str
    ray_jobs: list[dict[str, Any]]
    phase: Phase
    expect: dict[str, tuple[str, str]]
    sections: dict[str, Any] = field(default_factory=dict)
    status: dict[str, Any] | None = None
    restarts: int = 0
    apply_ray_job: str | None = None
    delete: tuple[str, ...] = ()


T, F = "True", "False"
PROVISIONING = {"ClusterReady": (F, "ClusterProvisioning"), "Running": (F, "ClusterProvisioning")}
TABLE = [
    Row("no-rayjob-yet", [], Phase.PENDING, {"Valid": (T, "SpecValid")}, apply_ray_job="ppo-7b-r0"),
    Row(
        "new",
        [ray_job(0, "")],
        Phase.PROVISIONING,
        {"Admitted": (T, "RayJobCreated"), **PROVISIONING},
        apply_ray_job="ppo-7b-r0",
    ),
    Row("initializing", [ray_job(0, "Initializing")], Phase.PROVISIONING, PROVISIONING),
    Row("waiting", [ray_job(0, "Waiting")], Phase.PROVISIONING, PROVISIONING),
    Row(
        "running",
        [ray_job(0, "Running", "RUNNING", rayClusterName="c")],
        Phase.RUNNING,
        {"ClusterReady": (T, "ClusterReady"), "Running": (T, "Training")},
    ),
    Row(
        "complete-succeeded",
        [ray_job(0, "Complete", "SUCCEEDED")],
        Phase.SUCCEEDED,
        {"Complete": (T, "JobSucceeded"), "ClusterReady": (F, "ClusterShutDown")},
    ),
    Row(
        "complete-but-ray-job-failed-retries",
        [ray_job(0, "Complete", "FAILED", message="OOM")],
        Phase.PENDING,
        {"Restarted": (T, "Retrying"), "Running": (F, "Retrying")},
        restarts=1,
        apply_ray_job="ppo-7b-r1",
        delete=("ppo-7b-r0",),
    ),
    Row(
        "failed-retries",
        [ray_job(0, "Failed", "FAILED", reason="AppFailed")],
        Phase.PENDING,
        {"Restarted": (T, "Retrying")},
        restarts=1,
        apply_ray_job="ppo-7b-r1",
        delete=("ppo-7b-r0",),
    ),
    Row(
        "stopped-counts-as-failure",
        [ray_job(0, "Complete", "STOPPED")],
        Phase.PENDING,
        {"Restarted": (T, "Retrying")},
        restarts=1,
        delete=("ppo-7b-r0",),
    ),
    Row(
        "failed-at-backoff-limit",
        [ray_job(2, "Failed", "FAILED")],
        Phase.FAILED,
        {"Failed": (T, "BackoffLimitExceeded"), "Running": (F, "BackoffLimitExceeded")},
        sections={"runPolicy": {"backoffLimit": 2}},
        status={"restarts": 2},
        restarts=2,
    ),
    Row(
        "backoff-limit-zero-fails-at-once",
        [ray_job(0, "Failed")],
        Phase.FAILED,
        {"Failed": (T, "BackoffLimitExceeded")},
        sections={"runPolicy": {"backoffLimit": 0}},
    ),
    Row(
        "kuberay-validation-failed-is-final",
        [ray_job(0, "ValidationFailed", reason="ValidationFailed")],
        Phase.FAILED,
        {"Failed": (T, "JobFailed")},
    ),
    Row(
        "suspended-by-user",
        [ray_job(0, "Suspended", suspend=True)],
        Phase.SUSPENDED,
        {"Suspended": (T, "SuspendedByUser"), "ClusterReady": (F, "SuspendedByUser")},
        sections={"runPolicy": {"suspend": True}},
        apply_ray_job="ppo-7b-r0",
    ),
    Row(
        "suspending",
        [ray_job(0, "Suspending", suspend=True)],
        Phase.SUSPENDED,
        {"Suspended": (T, "SuspendedByUser")},
        sections={"runPolicy": {"suspend": True}},
    ),
    Row(
        "resumed-while-kuberay-still-suspended",
        [ray_job(0, "Suspended", suspend=True)],
        Phase.PROVISIONING,
        {"Suspended": (F, "Resumed"), "ClusterReady": (F, "ClusterProvisioning")},
        status={
            "phase": "Suspended",
            "conditions": [
                {
                    "type": "Suspended",
                    "status": "True",
                    "reason": "SuspendedByUser",
                    "lastTransitionTime": "2026-11-29T11:00:00Z",
                }
            ],
        },
    ),
    Row(
        "queued-in-kueue",
        [ray_job(0, "Suspended", suspend=True)],
        Phase.PENDING,
        {"Admitted": (F, "WaitingForAdmission")},
        sections={"placement": {"queueName": "research"}},
    ),
    Row(
        "admitted-by-kueue",
        [ray_job(0, "Running", "RUNNING", suspend=False)],
        Phase.RUNNING,
        {"Admitted": (T, "RayJobCreated")},
        sections={"placement": {"queueName": "research"}},
    ),
    Row(
        "reference-configmap-missing",
        [],
        Phase.PENDING,
        {"Admitted": (F, "DependencyMissing")},
    ),
    Row(
        "rayjob-disappeared",
        [],
        Phase.PENDING,
        {"Admitted": (F, "RayJobMissing")},
        status={"phase": "Running", "rayJob": {"name": "ppo-7b-r0"}},
        apply_ray_job="ppo-7b-r0",
    ),
    Row(
        "restarted-operator-finds-newer-attempt",
        [ray_job(0, "Failed"), ray_job(1, "Running", "RUNNING")],
        Phase.RUNNING,
        {"Running": (T, "Training")},
        status={"restarts": 0},
        restarts=1,
        delete=("ppo-7b-r0",),
    ),
]


def _decide(row: Row, **observed: Any) -> Any:
    body = job_body(status=row.status, **row.sections)
    return decide(body, Observed.of(row.ray_jobs, **observed), SETTINGS, NOW)


@pytest.mark.parametrize("row", TABLE, ids=lambda r: r.id)
def test_status_table(row: Row) -> None:
    extra = {}
    if row.id == "reference-configmap-missing":
        extra["missing_dependencies"] = ("ConfigMap math-reward",)
    decision = _decide(row, **extra)
    status = decision.status
    assert status.phase is row.phase, status.message
    got = conditions(status)
    for kind, expected in row.expect.items():
        assert got.get(kind) == expected, (kind, got)
    assert status.restarts == row.restarts
    assert decision.delete_ray_jobs == row.delete
    ray_jobs = [d.name for d in decision.apply if d.kind == "RayJob"]
    if row.apply_ray_job is not None:
        assert ray_jobs == [row.apply_ray_job]
    if status.phase.is_finished:
        assert ray_jobs == []
        assert status.completion_time is not None
    assert status.observed_generation == 1
    assert status.allocation is not None and status.total_gpus == status.allocation.total_gpus


def test_cluster_progress_from_the_mirrored_raycluster_status() -> None:
    cluster = {"state": "", "readyWorkerReplicas": 1, "desiredWorkerReplicas": 2}
    observed = Observed.of(
        [ray_job(0, "Initializing", rayClusterName="ppo-7b-r0-abcde", rayClusterStatus=cluster)]
    )
    status = decide(job_body(), observed, SETTINGS, NOW).status
    ready = {c.type: c for c in status.conditions}[ConditionType.CLUSTER_READY]
    assert ready.message == ("Ray cluster ppo-7b-r0-abcde: 1/2 workers ready (RayJob Initializing)")


def test_missing_dependency_waits_without_a_rayjob() -> None:
    decision = decide(
        job_body(),
        Observed(missing_dependencies=("ConfigMap math-reward (spec.models.rewardFunction)",)),
        SETTINGS,
        NOW,
    )
    assert decision.waiting is not None and "math-reward" in decision.waiting
    kinds = [d.kind for d in decision.apply]
    # Everything but the RayJob: the storage PVC the pods will mount too.
    assert kinds == [
        "ServiceAccount",
        "ConfigMap",
        "Role",
        "RoleBinding",
        "ConfigMap",
        "Secret",
        "NetworkPolicy",
        "PersistentVolumeClaim",
    ]
    assert [e.reason for e in decision.events] == [ConditionReason.DEPENDENCY_MISSING]


def test_child_owned_by_someone_else_is_not_taken() -> None:
    taken = "ConfigMap ppo-7b-config (controlled by Secret/other)"
    decision = decide(job_body(), Observed(conflicts=(taken,)), SETTINGS, NOW)
    assert "RayJob" not in [d.kind for d in decision.apply]
    found = {c.type: c for c in decision.status.conditions}
    assert conditions(decision.status)["Admitted"] == (F, "ChildConflict")
    applied = found[ConditionType.CHILDREN_APPLIED]
    assert (applied.status, applied.reason) == (F, ConditionReason.CHILD_CONFLICT)
    assert taken in applied.message and "claimName" in applied.message
    # One Warning event, from ChildrenApplied.
    assert [e.reason for e in decision.events].count(ConditionReason.CHILD_CONFLICT) == 1


def test_a_conflict_shows_while_the_rayjob_runs() -> None:
    # A child kind added by an operator upgrade may collide while the job already runs.
    taken = "NetworkPolicy ppo-7b-ray (not created by this job)"
    observed = Observed.of([ray_job(0, "Running", "RUNNING")], conflicts=(taken,))
    status = decide(job_body(), observed, SETTINGS, NOW).status
    assert status.phase is Phase.RUNNING
    assert conditions(status)["ChildrenApplied"] == (F, "ChildConflict")


def test_kueue_owns_suspend_of_queued_rayjobs() -> None:
    body = job_body(placement={"queueName": "research"})
    [ray] = [d for d in decide(body, Observed(), SETTINGS, NOW).apply if d.kind == "RayJob"]
    assert ray.preserve == (("spec", "suspend"),)
    assert ray.obj["spec"]["suspend"] is True
    # When the user suspends, the operator asserts suspend itself.
    body = job_body(placement={"queueName": "research"}, runPolicy={"suspend": True})
    [ray] = [d for d in decide(body, Observed(), SETTINGS, NOW).apply if d.kind == "RayJob"]
    assert ray.preserve == ()


def test_pvc_is_create_only() -> None:
    body = job_body(checkpoint={"storage": {"size": "10Gi"}})
    [pvc] = [d for d in decide(body, Observed(), SETTINGS, NOW).apply if d.kind.endswith("Claim")]
    assert pvc.create_only


# --- invalid specs --------------------------------------------------------------------------


def test_invalid_spec_fails_with_field_message_and_no_children() -> None:
    body = job_body(algorithm={"name": "grpo"})  # group estimator with samplesPerPrompt 1
    decision = decide(body, Observed(), SETTINGS, NOW)
    assert decision.invalid is not None
    assert "spec.rollout.samplesPerPrompt: must be > 1" in decision.invalid
    assert decision.apply == () and decision.delete_ray_jobs == ()
    assert decision.status.phase is Phase.FAILED
    assert conditions(decision.status)["Valid"] == (F, "SpecInvalid")
    assert conditions(decision.status)["Failed"] == (T, "SpecInvalid")
    assert [e.reason for e in decision.events] == [ConditionReason.SPEC_INVALID]


def test_fixing_the_spec_recovers() -> None:
    bad = decide(job_body(algorithm={"name": "grpo"}), Observed(), SETTINGS, NOW)
    stored = bad.status.to_manifest()
    fixed = decide(job_body(generation=2, status=stored), Observed(), SETTINGS, NOW)
    assert fixed.invalid is None
    assert fixed.status.phase is Phase.PENDING
    got = conditions(fixed.status)
    assert got["Valid"] == (T, "SpecValid") and got["Failed"] == (F, "SpecValid")
    assert ConditionReason.SPEC_VALID in [e.reason for e in fixed.events]
    assert any(d.kind == "RayJob" for d in fixed.apply)


def test_impossible_placement_is_invalid() -> None:
    # The layout rules are config rules: the same message as `rlhf validate` and `rlhf plan`.
    body = job_body(
        placement={"device": "cpu", "gpusPerNode": 1}, rollout={"tensorParallelSize": 2}
    )
    decision = decide(body, Observed(), SETTINGS, NOW)
    assert decision.invalid is not None
    assert (
        "spec.rollout.tensorParallelSize: a vLLM engine's 2 tensor-parallel devices must "
        "share one node: at most placement.gpusPerNode (1)" in decision.invalid
    )
    assert conditions(decision.status)["Valid"] == (F, "SpecInvalid")
    assert decision.apply == ()


def test_invalid_edit_of_a_running_job_keeps_it_running() -> None:
    body = job_body(algorithm={"name": "grpo"}, status={"phase": "Running", "restarts": 0})
    decision = decide(body, Observed.of([ray_job(0, "Running", "RUNNING")]), SETTINGS, NOW)
    assert decision.status.phase is Phase.RUNNING
    assert conditions(decision.status)["Valid"] == (F, "SpecInvalid")
    assert "Failed" not in conditions(decision.status)


def test_bad_name_is_reported() -> None:
    decision = decide(job_body(name="Bad_Name"), Observed(), SETTINGS, NOW)
    assert decision.invalid is not None and decision.invalid.startswith("metadata.name:")


def test_no_trainer_image_is_invalid() -> None:
    decision = decide(job_body(), Observed(), OperatorSettings(instance="t"), NOW)
    assert decision.invalid is not None and "spec.image" in decision.invalid


# --- time: deadline and TTL -----------------------------------------------------------------


def test_deadline_fails_and_stops_the_rayjob() -> None:
    started = (NOW - timedelta(seconds=120)).strftime("%Y-%m-%dT%H:%M:%SZ")
    body = job_body(runPolicy={"activeDeadlineSeconds": 60}, status={"startTime": started})
    decision = decide(body, Observed.of([ray_job(0, "Running", "RUNNING")]), SETTINGS, NOW)
    assert decision.status.phase is Phase.FAILED
    assert conditions(decision.status)["Failed"] == (T, "DeadlineExceeded")
    assert decision.delete_ray_jobs == ("ppo-7b-r0",)
    assert ConditionReason.DEADLINE_EXCEEDED in [e.reason for e in decision.events]


def test_deadline_requeues_until_due() -> None:
    started = (NOW - timedelta(seconds=20)).strftime("%Y-%m-%dT%H:%M:%SZ")
    body = job_body(runPolicy={"activeDeadlineSeconds": 60}, status={"startTime": started})
    decision = decide(body, Observed.of([ray_job(0, "Running", "RUNNING")]), SETTINGS, NOW)
    assert decision.status.phase is Phase.RUNNING
    assert decision.requeue_after == pytest.approx(40)


def test_suspension_stops_the_deadline_clock() -> None:
    body = job_body(
        runPolicy={"suspend": True, "activeDeadlineSeconds": 1},
        status={"startTime": "2026-01-01T00:00:00Z"},
    )
    decision = decide(body, Observed.of([ray_job(0, "Suspended", suspend=True)]), SETTINGS, NOW)
    assert decision.status.phase is Phase.SUSPENDED
    assert decision.status.start_time is None


def _succeeded_status(completed: datetime) -> dict[str, Any]:
    at = completed.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "phase": "Succeeded",
        "completionTime": at,
        "conditions": [
            {
                "type": "Complete",
                "status": "True",
                "reason": "JobSucceeded",
                "lastTransitionTime": at,
            }
        ],
    }


@pytest.mark.parametrize(
    ("ago", "delete_self", "requeue"),
    [(30, False, 30.0), (60, True, None), (600, True, None)],
    ids=["before-ttl", "at-ttl", "long-after"],
)
def test_ttl_after_finished(ago: int, delete_self: bool, requeue: float | None) -> None:
    body = job_body(
        runPolicy={"ttlSecondsAfterFinished": 60},
        status=_succeeded_status(NOW - timedelta(seconds=ago)),
    )
    decision = decide(body, Observed.of([ray_job(0, "Complete", "SUCCEEDED")]), SETTINGS, NOW)
    assert decision.delete_self is delete_self
    assert decision.requeue_after == requeue
    assert decision.apply == ()


def test_finished_jobs_stay_finished_after_spec_edits() -> None:
    body = job_body(generation=5, status=_succeeded_status(NOW), training={"trainBatchSize": 64})
    decision = decide(body, Observed(), SETTINGS, NOW)
    assert decision.status.phase is Phase.SUCCEEDED
    assert decision.apply == ()


# --- transitions, events, and the status patch ----------------------------------------------


def _walk(states: list[list[dict[str, Any]]], **sections: Any) -> list[Any]:
    """Feed successive observations, storing each computed status like the API server."""
    stored: dict[str, Any] | None = None
    decisions = []
    for i, ray_jobs in enumerate(states):
        now = NOW + timedelta(seconds=10 * i)
        decision = decide(job_body(status=stored, **sections), Observed.of(ray_jobs), SETTINGS, now)
        decisions.append(decision)
        stored = decision.status.to_manifest()
    return decisions


def test_happy_path_events_and_stable_transition_times() -> None:
    decisions = _walk(
        [
            [],
            [ray_job(0, "Initializing")],
            [ray_job(0, "Running", "RUNNING")],
            [ray_job(0, "Running", "RUNNING")],
            [ray_job(0, "Complete", "SUCCEEDED")],
        ]
    )
    phases = [d.status.phase for d in decisions]
    assert phases == [
        Phase.PENDING,
        Phase.PROVISIONING,
        Phase.RUNNING,
        Phase.RUNNING,
        Phase.SUCCEEDED,
    ]
    reasons = [[e.reason.value for e in d.events] for d in decisions]
    # The RayJob's creation is the Created event's (the controller's, naming it), so its first
    # Admitted=True is not announced again; ClusterReady=True comes with Running=True, whose
    # event says it.
    assert reasons == [[], [], ["Running"], [], ["Succeeded"]]
    # Nothing changed between the two Running observations: no status patch at all.
    previous = decisions[2].status.to_manifest()
    assert status_patch(previous, decisions[3].status) == {}
    running = {c.type: c for c in decisions[3].status.conditions}[ConditionType.RUNNING]
    assert running.last_transition_time == "2026-11-29T12:00:20Z"
    assert decisions[-1].status.completion_time is not None


def test_admission_after_waiting_is_announced() -> None:
    queued = {"placement": {"queueName": "research"}}
    decisions = _walk(
        [
            [],
            [ray_job(0, "Suspended", suspend=True)],
            [ray_job(0, "Initializing", rayClusterName="c", suspend=False)],
            [ray_job(0, "Running", "RUNNING", rayClusterName="c", suspend=False)],
        ],
        **queued,
    )
    events = [[(e.reason.value, e.message) for e in d.events] for d in decisions]
    assert events == [
        [],
        [("WaitingForAdmission", "queued in research")],
        [("Admitted", "RayJob ppo-7b-r0 created and admitted")],
        [("Running", "attempt 0")],
    ]


def test_retry_then_backoff_limit() -> None:
    decisions = _walk(
        [
            [ray_job(0, "Running", "RUNNING")],
            [ray_job(0, "Failed", message="worker died")],
            [ray_job(1, "Running", "RUNNING")],
            [ray_job(1, "Failed", message="worker died again")],
        ],
        runPolicy={"backoffLimit": 1},
    )
    retry, running, final = decisions[1], decisions[2], decisions[3]
    assert retry.status.restarts == 1
    restarted = {c.type: c for c in retry.status.conditions}[ConditionType.RESTARTED]
    assert "worker died" in restarted.message and "restart 1 of 1" in restarted.message
    assert ConditionReason.RETRYING in [e.reason for e in retry.events]
    assert running.status.phase is Phase.RUNNING and running.status.restarts == 1
    assert final.status.phase is Phase.FAILED
    assert conditions(final.status)["Failed"] == (T, "BackoffLimitExceeded")
    # The reason of the earlier restart is still there.
    assert conditions(final.status)["Restarted"] == (T, "Retrying")


def test_checkpoints_from_the_trainer_report() -> None:
    status = {
        "trainer": {
            "step": 20,
            "totalSteps": 100,
            "progress": "20/100",
            "checkpoints": [
                {"step": 10, "path": "/checkpoints/step-10"},
                {"step": 20, "path": "/checkpoints/step-20"},
            ],
        }
    }
    body = job_body(status=status)
    decision = decide(body, Observed.of([ray_job(0, "Running", "RUNNING")]), SETTINGS, NOW)
    checkpointed = {c.type: c for c in decision.status.conditions}[ConditionType.CHECKPOINTED]
    assert checkpointed.reason is ConditionReason.CHECKPOINT_SAVED
    assert checkpointed.message == "step 20: /checkpoints/step-20"
    # Nothing new observed: the mirror keeps the report's values (only defaults are added).
    trainer = status_patch(body["status"], decision.status).get("trainer", {})
    assert set(trainer) <= {"metrics"} and not trainer.get("metrics")


def test_the_report_object_is_mirrored_into_status_trainer() -> None:
    body = job_body(status={"trainer": {"step": 1, "progress": "1/100"}})
    report = TrainerReport.model_validate({"step": 30, "totalSteps": 100, "progress": "30/100"})
    observed = Observed.of([ray_job(0, "Running", "RUNNING")], report=report)
    decision = decide(body, observed, SETTINGS, NOW)
    assert decision.status.trainer == report
    patch = status_patch(body["status"], decision.status)
    assert {k: patch["trainer"][k] for k in ("step", "progress", "totalSteps")} == {
        "step": 30,
        "progress": "30/100",
        "totalSteps": 100,
    }


def test_the_latest_evaluation_shows_in_status_trainer_eval() -> None:
    evaluation = {
        "step": 20,
        "prompts": 16,
        "samples": 4,
        "meanReward": 0.5,
        "greedyReward": 0.75,
        "passAtK": {"1": 0.4, "2": 0.6, "4": 0.9},
    }
    report = TrainerReport.model_validate({"step": 23, "totalSteps": 100, "eval": evaluation})
    body = job_body(status={"trainer": {"step": 20}})
    observed = Observed.of([ray_job(0, "Running", "RUNNING")], report=report)
    decision = decide(body, observed, SETTINGS, NOW)
    trainer = decision.status.trainer
    assert trainer is not None and trainer.eval is not None
    assert (trainer.eval.step, trainer.eval.greedy_reward) == (20, 0.75)
    patch = status_patch(body["status"], decision.status)
    assert patch["trainer"]["eval"] == evaluation


def test_status_patch_removes_cleared_fields() -> None:
    old = {"phase": "Running", "startTime": "x", "message": "training", "trainer": {"step": 1}}
    new = RLHFJobStatus.model_validate({"phase": "Suspended", "message": "suspended"})
    patch = status_patch(old, new)
    assert patch["startTime"] is None and patch["phase"] == "Suspended"
    assert patch["trainer"] is None
