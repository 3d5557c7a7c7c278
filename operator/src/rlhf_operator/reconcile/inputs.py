"""Models taken from other RLHFJobs (`fromJob`): resolve them against what the producing jobs'
status says, pin what was resolved on `status.inputs`, and give the builders a job whose spec
names plain `pretrained: pvc://...` locations (so the usual input mounting applies). Pure.

- the named job does not exist yet, or has not succeeded  -> wait (nothing is created)
- it failed, or succeeded without a model export           -> the job fails, saying which
- it succeeded                                             -> its `status.output.model`
A role once resolved keeps its recorded location (and producer uid) as long as the spec
names the same job: a producer deleted, re-created or re-run later does not change what a
running (or finished) job loaded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rlhf_trainer.config import JobSpec
from rlhf_trainer.config.sources import SINGLE_ROLES, job_references, with_pretrained

from ..api.v1alpha1 import JobInput, Phase, RLHFJob


@dataclass(frozen=True)
class Producer:
    """What a consumer needs to know of an RLHFJob its spec names."""

    name: str
    uid: str
    phase: str | None
    model: str | None
    message: str = ""

    @classmethod
    def from_body(cls, name: str, body: Mapping[str, Any] | None) -> Producer | None:
        if body is None:
            return None
        meta = body.get("metadata") or {}
        status = body.get("status") or {}
        output = status.get("output") or {}
        return cls(
            name=name,
            uid=str(meta.get("uid", "")),
            phase=status.get("phase"),
            model=output.get("model"),
            message=str(status.get("message") or ""),
        )


@dataclass(frozen=True)
class Resolution:
    inputs: tuple[JobInput, ...] = ()
    waiting: tuple[str, ...] = ()  # one line per role still waiting
    failed: tuple[str, ...] = ()  # one line per role that cannot be resolved

    @property
    def ready(self) -> bool:
        return not self.waiting and not self.failed

    @property
    def summary(self) -> str:
        """InputsReady's message: what is wrong, else where each model comes from."""
        if self.failed or self.waiting:
            return "; ".join([*self.failed, *self.waiting])
        return "; ".join(f"{i.role}: {i.model} (RLHFJob {i.from_job})" for i in self.inputs)


def resolve(
    spec: JobSpec,
    pinned: list[JobInput] | None,
    producers: Mapping[str, Producer | None],
) -> Resolution:
    """Each `fromJob` role of `spec`: its pinned input, else the producer's model if it
    succeeded; `producers` maps a job name to what was observed of it (None: no such job)."""
    recorded = {i.role: i for i in pinned or ()}
    inputs: list[JobInput] = []
    waiting: list[str] = []
    failed: list[str] = []
    for role, name in job_references(spec).items():
        known = recorded.get(role)
        if known is not None and known.from_job == name:
            inputs.append(known)
            continue
        field = f"spec.models.{role}.fromJob"
        producer = producers.get(name)
        if producer is None:
            waiting.append(f"{field}: waiting for RLHFJob {name}, which does not exist (yet)")
        elif producer.phase == Phase.FAILED:
            why = f": {producer.message}" if producer.message else ""
            failed.append(f"{field}: RLHFJob {name} failed{why}")
        elif producer.phase != Phase.SUCCEEDED:
            phase = producer.phase or "Pending"
            waiting.append(f"{field}: waiting for RLHFJob {name} to succeed (it is {phase})")
        elif not producer.model:
            failed.append(
                f"{field}: RLHFJob {name} succeeded without exporting a model "
                "(its spec.checkpoint.exportHf is false)"
            )
        else:
            inputs.append(
                JobInput(role=role, from_job=name, uid=producer.uid, model=producer.model)
            )
    return Resolution(tuple(inputs), tuple(waiting), tuple(failed))


def with_inputs(job: RLHFJob, inputs: tuple[JobInput, ...]) -> RLHFJob:
    """`job` whose spec loads each resolved role from its location (`pretrained`)."""
    if not inputs:
        return job
    return job.model_copy(
        update={"spec": with_pretrained(job.spec, {i.role: i.model for i in inputs})}
    )


def pinned_inputs(body: Mapping[str, Any]) -> list[JobInput]:
    """`status.inputs` as stored (entries that do not parse are dropped: resolved again)."""
    out: list[JobInput] = []
    for raw in (body.get("status") or {}).get("inputs") or ():
        try:
            out.append(JobInput.model_validate(raw))
        except ValueError:
            continue
    return out


def named_jobs(body: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(role, RLHFJob name) of every `fromJob` of the raw spec: read without validating it,
    since every pass asks (the spec's own problems are `decide`'s business)."""
    models = (body.get("spec") or {}).get("models") or {}
    sources = [(role, models.get(role)) for role in SINGLE_ROLES]
    sources += [(f"rewardModels[{i}]", m) for i, m in enumerate(models.get("rewardModels") or ())]
    return [
        (role, str(source["fromJob"]))
        for role, source in sources
        if isinstance(source, Mapping) and source.get("fromJob")
    ]
