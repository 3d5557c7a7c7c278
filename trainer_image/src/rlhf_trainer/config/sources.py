"""Model sources that name another run's result instead of weights (pure).

- `fromJob: <name>`: the final model of another RLHFJob of the same namespace. Only the
  operator can resolve it (it reads that job's `status.output.model` once it succeeded) and
  substitutes it as `pretrained:` in the config the trainer receives; `rlhf run` refuses it.
- `fromStage: <stage>`: inside an RLHFPipeline only, the final model of an earlier stage. The
  pipeline renders it as `fromJob: <pipeline>-<stage>` on a cluster, and `rlhf run PIPELINE`
  as the earlier stage's local export directory.

A role is named as in the manifest below `models`: `actor`, `critic`, `reference`,
`teacher`, `rewardModels[0]`.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from .base import Problem

if TYPE_CHECKING:
    from .job import JobConfig
    from .models import ModelSource

C = TypeVar("C", bound="JobConfig")

# pydantic validation context key: set while validating an RLHFPipeline's stages, where
# `fromStage` is allowed.
IN_PIPELINE = "rlhf.dev/in-pipeline"
# `models` keys holding one model source each (besides the list `rewardModels`).
SINGLE_ROLES = ("actor", "critic", "reference", "teacher")


def model_sources(cfg: JobConfig) -> Iterator[tuple[str, ModelSource]]:
    """(role, source) of every model the job names, as written (defaults not filled in)."""
    m = cfg.models
    for role in SINGLE_ROLES:
        source = getattr(m, role)
        if source is not None:
            yield role, source
    for i, reward_model in enumerate(m.reward_models):
        yield f"rewardModels[{i}]", reward_model


def job_references(cfg: JobConfig) -> dict[str, str]:
    """role -> the RLHFJob named by its `fromJob`."""
    return {role: s.from_job for role, s in model_sources(cfg) if s.from_job is not None}


def stage_references(cfg: JobConfig) -> dict[str, str]:
    """role -> the pipeline stage named by its `fromStage`."""
    return {role: s.from_stage for role, s in model_sources(cfg) if s.from_stage is not None}


def stage_outside_pipeline_problems(cfg: JobConfig) -> list[Problem]:
    """`fromStage` means nothing outside a pipeline (part of every job's rules)."""
    return [
        Problem(
            f"models.{role}.fromStage",
            f"names a pipeline stage ({stage!r}), which only an RLHFPipeline's stages may do; "
            "an RLHFJob names another job's model with fromJob",
        )
        for role, stage in stage_references(cfg).items()
    ]


def local_run_problems(cfg: JobConfig) -> list[Problem]:
    """What `rlhf run` of a single job cannot resolve: another RLHFJob's output exists only
    on a cluster, and only the operator reads it (`rlhf validate` accepts it)."""
    return [
        Problem(
            f"models.{role}.fromJob",
            f"names the model of RLHFJob {job!r}, which only the operator resolves (on a "
            "cluster, once that job succeeded); locally, give the model's directory as "
            "pretrained, or run the jobs as stages of an RLHFPipeline (`rlhf run "
            "PIPELINE.yaml`, with fromStage)",
        )
        for role, job in job_references(cfg).items()
    ]


def _node(doc: dict[str, Any], role: str) -> dict[str, Any]:
    models = doc["models"]
    if role.startswith("rewardModels["):
        node: dict[str, Any] = models["rewardModels"][int(role[len("rewardModels[") : -1])]
        return node
    result: dict[str, Any] = models[role]
    return result


def replace_sources(
    doc: Mapping[str, Any], sources: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """A copy of a spec (or job config) manifest dict in which each role of `sources` loads
    from the source given there (e.g. `{"pretrained": ...}`) instead of the one written; the
    other keys of each source (trustRemoteCode, a reward model's weight) stay."""
    out = copy.deepcopy(dict(doc))
    for role, source in sources.items():
        node = _node(out, role)
        for key in ("pretrained", "randomInit", "fromJob", "fromStage", "revision"):
            node.pop(key, None)
        node.update(source)
    return out


def with_pretrained(cfg: C, locations: Mapping[str, str]) -> C:
    """`cfg` in which each role of `locations` loads `pretrained: <location>` instead of the
    source written; the source's other fields (trustRemoteCode, a reward model's weight)
    stay. A typed copy: exactly one source holds by construction, nothing is parsed again."""
    if not locations:
        return cfg
    loaded = {"from_job": None, "from_stage": None, "random_init": None, "revision": None}
    models = cfg.models
    rewards = list(models.reward_models)
    update: dict[str, Any] = {}
    for role, location in locations.items():
        change = {**loaded, "pretrained": location}
        if role.startswith("rewardModels["):
            i = int(role[len("rewardModels[") : -1])
            rewards[i] = rewards[i].model_copy(update=change)
        else:
            source = getattr(models, role)
            if source is None:
                raise ValueError(f"models.{role}: no source to load {location!r} into")
            update[role] = source.model_copy(update=change)
    update["reward_models"] = rewards
    return cfg.model_copy(update={"models": models.model_copy(update=update)})
