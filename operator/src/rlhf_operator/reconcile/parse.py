"""An RLHFJob read once per pass (pure): its name and spec validated, the platform's policy
checked, its placement planned, and its stored status parsed. The controller parses each body
once and hands the result to the reader (what the pods will mount), to `decide`, and through
it to the status and the builders; nothing downstream validates or plans again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from rlhf_trainer.config import JobSpec, cluster_problems, validation_messages
from rlhf_trainer.config.documents import document_problems, quote
from rlhf_trainer.config.loading import NAME_MAX_LENGTH, NAME_PATTERN

from ..api.v1alpha1 import (
    Allocation,
    ConditionReason,
    RLHFJob,
    RLHFJobStatus,
    TrainerReport,
)
from ..builders.allocation import PlacementError, plan
from ..builders.children import Children, render_children
from ..builders.common import BuildError
from ..settings import OperatorSettings
from .platform_policy import policy_problems


@dataclass(frozen=True)
class Refusal:
    """Why a job cannot run as written: Valid=False with this reason, one line per problem."""

    reason: ConditionReason
    problems: list[str]


@dataclass(frozen=True)
class Parsed:
    """One RLHFJob body, read once. `job` and `allocation` are set exactly when the job is
    valid (`refusal` is None); `job.status` is the previous status."""

    body: Mapping[str, Any]
    generation: int | None
    previous: RLHFJobStatus | None
    # The trainer's report as last mirrored into status.trainer.
    mirrored: TrainerReport | None
    job: RLHFJob | None = None
    allocation: Allocation | None = None
    # The children of the job's first attempt as the spec says (rendered to find what the
    # builders refuse): the decision's own when nothing changes them (no resolved inputs,
    # attempt 0), so that a pass renders once.
    children: Children | None = None
    refusal: Refusal | None = None
    problems: list[str] = field(default_factory=list)


def parse(body: Mapping[str, Any], settings: OperatorSettings) -> Parsed:
    """The body as the pass works on it: validated, checked against the platform's policy,
    placed. Never raises for a bad spec: a refusal says why."""
    previous, mirrored = previous_status(body)
    base = Parsed(body, generation_of(body), previous, mirrored)
    spec, problems = _validated_spec(body)
    if spec is None or problems:
        return _refused(base, ConditionReason.SPEC_INVALID, problems)
    # Built from parts already validated: RLHFJob(...) would validate the spec again.
    job = RLHFJob.model_construct(
        api_version=str(body.get("apiVersion") or RLHFJob.model_fields["api_version"].default),
        metadata=dict(body.get("metadata") or {}),
        spec=spec,
        status=previous,
    )
    problems = policy_problems(spec, settings)
    if problems:
        return _refused(base, ConditionReason.POLICY_VIOLATION, problems)
    try:
        allocation = plan(spec)
        # The builders' other failures: no image, an object too big for Kubernetes.
        children = render_children(job, settings, allocation=allocation)
    except PlacementError as err:
        return _refused(base, ConditionReason.PLACEMENT_IMPOSSIBLE, [str(err)])
    except BuildError as err:
        return _refused(base, ConditionReason.SPEC_INVALID, [str(err)])
    return Parsed(base.body, base.generation, previous, mirrored, job, allocation, children)


def reparse(earlier: Parsed, body: Mapping[str, Any]) -> Parsed:
    """`parse(body)` from an earlier parse of a body with the same name, UID, generation and
    spec: what those decide (validation, policy, placement, children) is taken over, what may
    have changed since (the status, the trainer's report, the metadata) is read from `body`.
    The builders read the job's name, namespace, UID and spec only."""
    previous, mirrored = previous_status(body)
    job = earlier.job
    if job is not None:
        job = job.model_copy(
            update={"metadata": dict(body.get("metadata") or {}), "status": previous}
        )
    return Parsed(
        body,
        generation_of(body),
        previous,
        mirrored,
        job,
        earlier.allocation,
        earlier.children,
        earlier.refusal,
        earlier.problems,
    )


def _refused(base: Parsed, reason: ConditionReason, problems: list[str]) -> Parsed:
    return Parsed(
        base.body,
        base.generation,
        base.previous,
        base.mirrored,
        refusal=Refusal(reason, problems),
        problems=problems,
    )


def _validated_spec(body: Mapping[str, Any]) -> tuple[JobSpec | None, list[str]]:
    """The spec, validated once, and the field-level problems of the body's name and spec
    beyond what the CRD enforces."""
    problems: list[str] = []
    name = str((body.get("metadata") or {}).get("name", ""))
    if len(name) > NAME_MAX_LENGTH or not NAME_PATTERN.match(name):
        problems.append(
            f"metadata.name: must be a DNS-1035 label of at most {NAME_MAX_LENGTH} characters "
            f"(children are named after it); got {quote(name)}"
        )
    unstorable = document_problems(body.get("spec") or {}, "spec")
    if unstorable:
        return None, problems + unstorable
    try:
        spec = JobSpec.model_validate(body.get("spec") or {})
    except ValidationError as err:
        return None, problems + validation_messages(err, prefix="spec")
    # What `rlhf run` can run but no pod can (`rlhf validate --cluster` says the same).
    problems += [p.render("spec") for p in cluster_problems(spec)]
    return spec, problems


def generation_of(body: Mapping[str, Any]) -> int | None:
    value = (body.get("metadata") or {}).get("generation")
    return int(value) if value is not None else None


def previous_status(body: Mapping[str, Any]) -> tuple[RLHFJobStatus | None, TrainerReport | None]:
    """The stored status and the trainer's report as last mirrored into it; a part that does
    not parse is ignored (recomputed) rather than blocking the job."""
    raw = body.get("status") or {}
    trainer: TrainerReport | None = None
    if isinstance(raw.get("trainer"), Mapping):
        try:
            trainer = TrainerReport.model_validate(raw["trainer"])
        except ValidationError:
            trainer = None
    ours = {k: v for k, v in raw.items() if k != "trainer"}
    if not ours:
        return None, trainer
    try:
        return RLHFJobStatus.model_validate(ours), trainer
    except ValidationError:
        return None, trainer
