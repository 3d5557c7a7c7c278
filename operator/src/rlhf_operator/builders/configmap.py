"""The job ConfigMap: `job.yaml`, the trainer's job config as its pods see it."""

from __future__ import annotations

from typing import Any

import yaml

from ..api.v1alpha1 import RLHFJob
from .common import (
    CHECKPOINT_DIR,
    CONFIG_KEY,
    JSON,
    REWARD_FUNCTION_DIR,
    config_map_name,
    metadata,
)


def pod_job_config(job: RLHFJob) -> dict[str, Any]:
    """`spec.job_config()` as a manifest, with paths rewritten for the pod.

    - A reward function from a ConfigMap is mounted (see rayjob.py) at a fixed directory, so
      the trainer gets a plain `path` to the file instead of the reference.
    - Checkpoints go to the checkpoint volume (the PVC, or pod-local scratch without one).
    """
    config = job.spec.job_config().to_manifest()
    reward_function = config["models"].get("rewardFunction")
    if reward_function and "configMapRef" in reward_function:
        ref = reward_function.pop("configMapRef")
        reward_function["path"] = f"{REWARD_FUNCTION_DIR}/{ref['key']}"
    config["checkpoint"]["dir"] = CHECKPOINT_DIR
    return config


# libyaml's emitter when present: the pure-Python one costs milliseconds per job.
_Dumper: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def render_job_yaml(job: RLHFJob) -> str:
    return yaml.dump(pod_job_config(job), Dumper=_Dumper, sort_keys=False, default_flow_style=False)


def build_config_map(job: RLHFJob) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(job, config_map_name(job.name), "config"),
        "data": {CONFIG_KEY: render_job_yaml(job)},
    }
