"""Why an attempt failed or does not start, in words fit for status and Events (pure).

- `classify`: the FailureClass of a failed attempt, from the trainer's own outcome for that
  attempt (`status.trainer.outcome`), else from the exit code KubeRay quotes in its message.
- `pod_diagnosis`: the ClusterReady reason and message from the pods of a starting attempt
  (unschedulable, image pull, a missing Secret, crash loops).
- `bounded`: a message cut to a size fit for status (Ray puts up to 20,000 characters of logs
  into a failed job's message).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from rlhf_trainer.config import ExitCode, FailureClass

from ..api.v1alpha1 import ConditionReason, TrainerReport
from .observed import PodObservation, PodTrouble, RayJobObservation

REPORT_LIMIT = 1024
# Ray's "Job entrypoint command failed with exit code 78, last available logs ...".
_EXIT_CODE = re.compile(r"exit code (-?\d+)")

# The trouble a user must act on first comes first: a missing Secret or a wrong image never
# fixes itself, an unschedulable pod may (the cluster autoscaler adds a node).
_TROUBLE_ORDER = (
    PodTrouble.CONFIG,
    PodTrouble.IMAGE_PULL,
    PodTrouble.CRASH_LOOP,
    PodTrouble.UNSCHEDULABLE,
)
_TROUBLE_REASON = {
    PodTrouble.CONFIG: ConditionReason.CONTAINER_CONFIG_ERROR,
    PodTrouble.IMAGE_PULL: ConditionReason.IMAGE_PULL_FAILED,
    PodTrouble.CRASH_LOOP: ConditionReason.CONTAINER_CRASH_LOOPING,
    PodTrouble.UNSCHEDULABLE: ConditionReason.UNSCHEDULABLE,
}
# ClusterReady=False for one of these: the pods' own trouble (announced as a Warning).
POD_TROUBLE_REASONS = frozenset(_TROUBLE_REASON.values())


def bounded(text: str, limit: int = REPORT_LIMIT) -> str:
    """At most `limit` characters. The head and the tail are kept, joined by an ellipsis: a
    Ray job's message starts with the exit code and ends with the last lines of its logs,
    where the error is."""
    if len(text) <= limit:
        return text
    head = limit // 3
    tail = limit - head - 1
    return f"{text[:head]}…{text[-tail:]}"


def exit_code_in(message: str | None) -> int | None:
    match = _EXIT_CODE.search(message or "")
    return int(match.group(1)) if match else None


@dataclass(frozen=True)
class Verdict:
    """How a failed attempt is classed, and on whose word."""

    failure_class: FailureClass
    exit_code: int | None
    detail: str

    def describe(self) -> str:
        code = f", exit code {self.exit_code}" if self.exit_code is not None else ""
        return f"{self.failure_class.value}{code}: {self.detail}"


def classify(current: RayJobObservation, report: TrainerReport | None) -> Verdict | None:
    """The class of a failed attempt; None while neither the trainer nor KubeRay has said
    (the caller waits a little for the trainer's report, then calls it Infrastructure)."""
    outcome = report.outcome if report is not None else None
    # Exit 0 says the trainer succeeded whatever class is left beside it (a merge patch of a
    # success that omits failureClass keeps an earlier attempt's).
    succeeded = outcome is not None and outcome.exit_code == ExitCode.SUCCEEDED
    if (
        outcome is not None
        and outcome.attempt == current.attempt
        and outcome.failure_class
        and not succeeded
    ):
        detail = outcome.message or current.failure
        return Verdict(outcome.failure_class, outcome.exit_code, bounded(detail))
    code = exit_code_in(current.message)
    if code is None:
        return None
    # Exit 0 with a failed RayJob: the trainer finished but something after it failed.
    failure = FailureClass.from_exit_code(code) or FailureClass.INFRASTRUCTURE
    return Verdict(failure, code, bounded(current.failure))


def disruption_verdict(verdict: Verdict | None, disruption: str | None) -> Verdict | None:
    """The class of a failed attempt whose pods were disrupted (`disruption`: what the
    Disrupted condition says). Preempted, as batch/v1 Jobs' podFailurePolicy treats
    DisruptionTarget, when the trainer did not say or blamed the infrastructure (ranks lost
    with their pods); a class the trainer found itself (its spec, a guardrail, a preemption
    it checkpointed) stands."""
    if disruption is None:
        return verdict
    if verdict is not None and verdict.failure_class is not FailureClass.INFRASTRUCTURE:
        return verdict
    code = verdict.exit_code if verdict is not None else None
    return Verdict(FailureClass.PREEMPTED, code, bounded(f"its pods were disrupted: {disruption}"))


def describe_disruption(pods: Iterable[PodObservation]) -> str | None:
    """`pod a: EvictionByEvictionAPI: Eviction API: evicting (and 2 more)`: the pods being
    disrupted, those with the same cause named once; None when none is."""
    grouped: dict[str, list[str]] = {}
    for pod in pods:
        if pod.disruption:
            grouped.setdefault(pod.disruption, []).append(pod.name)
    if not grouped:
        return None
    parts = []
    for cause, names in grouped.items():
        more = f" (and {len(names) - 1} more)" if len(names) > 1 else ""
        parts.append(f"pod {names[0]}{more}: {cause}")
    return bounded("; ".join(parts))


def unclassified(current: RayJobObservation) -> Verdict:
    """No word from the trainer nor an exit code (a lost node, a deleted head pod)."""
    return Verdict(FailureClass.INFRASTRUCTURE, None, bounded(current.failure))


def pod_diagnosis(pods: Iterable[PodObservation]) -> tuple[ConditionReason, str] | None:
    """The most pressing trouble of the pods as the ClusterReady reason, and every distinct
    trouble in the message (replicas with the same trouble are named once)."""
    grouped: dict[tuple[PodTrouble, str], list[str]] = {}
    for pod in pods:
        for problem in pod.problems:
            grouped.setdefault((problem.trouble, problem.message), []).append(pod.name)
    if not grouped:
        return None
    ordered = sorted(grouped.items(), key=lambda item: _TROUBLE_ORDER.index(item[0][0]))
    parts = []
    for (_, message), names in ordered:
        who = f"pod {names[0]}"
        if len(names) > 1:
            who += f" (and {len(names) - 1} more)"
        parts.append(f"{who}: {message}")
    return _TROUBLE_REASON[ordered[0][0][0]], bounded("; ".join(parts))


def kuberay_diagnosis(current: RayJobObservation) -> str:
    """What KubeRay says about a starting RayJob and its cluster, if anything."""
    said = [p for p in (current.reason, current.message, current.cluster_reason) if p]
    return bounded(": ".join(said)) if said else ""
