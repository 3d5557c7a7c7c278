"""Test objects built from a small base spec plus overrides, fluent enough for tables."""

from __future__ import annotations

import copy
from typing import Any

from rlhf_operator.api.v1alpha1 import RLHFJob, RLHFJobStatus
from rlhf_trainer.config import JobSpec

# A PPO job whose batch sizes divide any power-of-two device count up to 128.
BASE_SPEC: dict[str, Any] = {
    "algorithm": {"name": "ppo"},
    "models": {
        "actor": {"pretrained": "org/actor-7b"},
        "rewardModels": [{"pretrained": "org/rm-7b"}],
    },
    "data": {"train": [{"hfId": "org/prompts"}]},
    "rollout": {"numEngines": 1, "tensorParallelSize": 1},
    "training": {"rolloutBatchSize": 1024, "trainBatchSize": 128, "microTrainBatchSize": 1},
}


def merge(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """Deep-merge `patch` into a copy of `base`; a None value removes the key."""
    out = copy.deepcopy(base)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def spec_dict(**sections: Any) -> dict[str, Any]:
    return merge(BASE_SPEC, sections)


def make_spec(**sections: Any) -> JobSpec:
    return JobSpec.model_validate(spec_dict(**sections))


def job_body(
    name: str = "ppo-7b",
    namespace: str = "team-a",
    *,
    uid: str = "0b9d1c1e-1111-4222-8333-444455556666",
    generation: int = 1,
    spec: dict[str, Any] | None = None,
    status: dict[str, Any] | None = None,
    **sections: Any,
) -> dict[str, Any]:
    """An RLHFJob as the API server would return it."""
    body: dict[str, Any] = {
        "apiVersion": "rlhf.dev/v1alpha1",
        "kind": "RLHFJob",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "generation": generation,
            "creationTimestamp": "2026-11-29T10:00:00Z",
        },
        "spec": spec if spec is not None else spec_dict(**sections),
    }
    if status is not None:
        body["status"] = status
    return body


def make_job(**kwargs: Any) -> RLHFJob:
    return RLHFJob.model_validate(job_body(**kwargs))


def ray_job(
    attempt: int = 0,
    deployment: str | None = None,
    job_status: str | None = None,
    *,
    suspend: bool = False,
    job: str = "ppo-7b",
    **status: Any,
) -> dict[str, Any]:
    st: dict[str, Any] = dict(status)
    if deployment is not None:
        st["jobDeploymentStatus"] = deployment
    if job_status is not None:
        st["jobStatus"] = job_status
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {
            "name": f"{job}-r{attempt}",
            "namespace": "team-a",
            "labels": {"rlhf.dev/job": job, "rlhf.dev/attempt": str(attempt)},
        },
        "spec": {"suspend": suspend},
        "status": st,
    }


def conditions(status: RLHFJobStatus) -> dict[str, tuple[str, str]]:
    return {c.type.value: (c.status.value, c.reason.value) for c in status.conditions}
