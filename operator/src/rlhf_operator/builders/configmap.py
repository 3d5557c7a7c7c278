"""The job ConfigMap: `job.yaml`, the trainer's job config as its pods see it."""

from __future__ import annotations

from typing import Any

import yaml

from rlhf_trainer.config import JobConfig, JobSpec, resolve_job
from rlhf_trainer.config.locations import set_field

from ..api.v1alpha1 import RLHFJob
from .common import CONFIG_KEY, JSON, config_map_name, metadata
from .volumes import checkpoint_dir, config_map_path, pod_locations

# The spec's Kubernetes parts (image, env, runPolicy, ...): not the trainer's business.
_KUBERNETES_KEYS = {
    field.alias or name
    for name, field in JobSpec.model_fields.items()
    if name not in JobConfig.model_fields
}


def pod_job_config(job: RLHFJob) -> dict[str, Any]:
    """The trainer's part of the spec (`spec.job_config()`) as a manifest, with locations
    rewritten for the pod (volumes.py
    mounts them): a `pvc://` location becomes the path of its mount, a `configMapRef` file
    (data, reward function) a plain `path` to the mounted file, and checkpoints go to the
    job's directory on its storage volume. With `placement.auto` the pods get the values it
    chose (auto off): the trainer places exactly the GPUs the operator requested."""
    manifest = resolve_job(job.spec).to_manifest()  # the spec is a JobConfig: no re-validation
    config = {k: v for k, v in manifest.items() if k not in _KUBERNETES_KEYS}
    for field, path in pod_locations(job).items():
        set_field(config, field, path)
    data = config["data"]
    sources = [*data.get("train", []), *data.get("eval", []), *data.get("pretrain", [])]
    sources.append(config["models"].get("rewardFunction") or {})
    for source in sources:
        if "configMapRef" in source:
            ref = source.pop("configMapRef")
            source["path"] = config_map_path(ref["name"], ref["key"])
    config["checkpoint"]["dir"] = checkpoint_dir(job)
    # The trainer reads only the guardrails of runPolicy; the rest (suspend, retries) is the
    # operator's, and a change to it must not change the trainer's config.
    config["runPolicy"] = {"guardrails": config["runPolicy"]["guardrails"]}
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
