"""Rules about where a job's files and volumes are: malformed `pvc://`/`s3://` locations,
storage that the pods of a multi-node job cannot all write, and (on a cluster only) paths that
name files on the author's machine."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from .autoplace import decide
from .autoplan import AutoError
from .base import Problem
from .checkpoint import AccessMode
from .layout import plan_layout
from .locations import is_relative_local, is_relative_model_path, location_problem

if TYPE_CHECKING:
    from .job import JobConfig

HOW_TO_SHIP = (
    "ship it as pvc://<claim>/<path> (a volume the pods mount), s3://<bucket>/<key> (with "
    "spec.objectStore) or in a ConfigMap (configMapRef)"
)
MODEL_SOURCES = (
    "name the model as a Hugging Face id (org/name), pvc://<claim>/<path> (a volume the pods "
    "mount), s3://<bucket>/<key> (with spec.objectStore), an absolute path inside the image or "
    "a mounted volume, or replace pretrained with fromJob: <job> (the final model of another "
    "RLHFJob; fromStage: <stage> in a pipeline)"
)


def file_locations(cfg: JobConfig) -> Iterator[tuple[str, str]]:
    """(camelCase field, value) of every file or directory location the job names."""
    data = cfg.data
    for which, sources in (("train", data.train), ("eval", data.eval), ("pretrain", data.pretrain)):
        for i, source in enumerate(sources):
            if source.path is not None:
                yield f"data.{which}[{i}].path", source.path
    if cfg.models.reward_function is not None and cfg.models.reward_function.path is not None:
        yield "models.rewardFunction.path", cfg.models.reward_function.path
    if cfg.rollout.agent is not None and cfg.rollout.agent.path is not None:
        yield "rollout.agent.path", cfg.rollout.agent.path


def model_locations(cfg: JobConfig) -> Iterator[tuple[str, str]]:
    """(camelCase field, value) of every `pretrained` model location."""
    m = cfg.models
    named = [("actor", m.actor), ("critic", m.critic), ("reference", m.reference)]
    named += [("teacher", m.teacher)]
    named += [(f"rewardModels[{i}]", rm) for i, rm in enumerate(m.reward_models)]
    for field, source in named:
        if source is not None and source.pretrained is not None:
            yield f"models.{field}.pretrained", source.pretrained


def location_problems(cfg: JobConfig) -> list[Problem]:
    out = []
    for field, value in [*file_locations(cfg), *model_locations(cfg)]:
        why = location_problem(value)
        if why:
            out.append(Problem(field, why))
    return out


def storage_problems(cfg: JobConfig) -> list[Problem]:
    """A ReadWriteOnce volume attaches to one node: fine for one worker pod (the operator keeps
    the head beside it), never for a job whose worker pods may land on several nodes."""
    storage = cfg.checkpoint.storage
    if storage is None or storage.access_mode is not AccessMode.READ_WRITE_ONCE:
        return []
    try:
        pods = sum(p.replicas for p in plan_layout(cfg).pods)
    except ValueError:
        return []  # the layout's own problems are reported by its rules
    if pods <= 1:
        return []
    return [
        Problem(
            "checkpoint.storage.accessMode",
            f"ReadWriteOnce volumes attach to one node, but this job's head and {pods} worker "
            "pods may run on several nodes and all write checkpoints: use ReadWriteMany (the "
            "default; a storage class such as NFS, CephFS, EFS or Filestore) or fit the job "
            "in one worker pod (placement.gpusPerNode)",
        )
    ]


def cluster_problems(cfg: JobConfig) -> list[Problem]:
    """What cannot work in a cluster's pods although `rlhf run` can run it: a relative path
    names a file or a model directory beside the manifest on the author's machine, which no
    pod has; a `placement.auto` job whose actor size only a model's config.json tells (the
    operator reads no model files)."""
    out = [
        Problem(field, f"{value!r} is a file on your machine, which no pod has: {HOW_TO_SHIP}")
        for field, value in file_locations(cfg)
        if is_relative_local(value)
    ]
    out += [
        Problem(
            field,
            f"{value!r} is a directory on your machine (relative to the manifest), which no "
            f"pod has: {MODEL_SOURCES}",
        )
        for field, value in model_locations(cfg)
        if is_relative_model_path(value)
    ]
    return out + _auto_size_problems(cfg)


def _auto_size_problems(cfg: JobConfig) -> list[Problem]:
    if not cfg.placement.auto:
        return []
    try:
        decide(cfg)
    except AutoError as err:
        if err.size_unknown:
            return [
                Problem(
                    "placement.modelSize",
                    f"placement.auto needs the actor's size and the operator reads no model "
                    f"files: models.actor.pretrained {cfg.models.actor.pretrained!r} states no "
                    "size in its name; set placement.modelSize, e.g. 7B",
                )
            ]
    return []
