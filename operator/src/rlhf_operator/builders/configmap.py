"""The job ConfigMap: `job.yaml`, the trainer's job config as its pods see it."""

from __future__ import annotations

import hashlib
import zlib
from collections import OrderedDict
from typing import Any

import yaml

from rlhf_trainer.config import JobConfig, JobSpec, resolve_job
from rlhf_trainer.config.locations import set_field

from ..api.v1alpha1 import RLHFJob
from .block_yaml import dump_block
from .common import CONFIG_KEY, JSON, config_map_name, metadata
from .encoding import compact
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


# Where `dump_block` is unsure of PyYAML's text: libyaml's emitter when present (the
# pure-Python one costs milliseconds per job).
_Dumper: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
# Rendered texts by a digest of their config's JSON (the same keys in the same order give the
# same YAML), zlib-packed. Every pass renders a job's children again; a new job's config is
# written by `dump_block` (PyYAML's text without its pure-Python representer: ~0.7 ms a job
# with libyaml's emitter), the key and the unpacking ~0.05 ms.
# Sized for a platform's jobs (~1.5 KB a text packed, 24 MB at most): one smaller
# than the number of jobs passed in turn would never hit (5,000 jobs created at once, each
# passed again after the other 4,999). The least recently used goes first; a miss costs only
# the render.
_RENDERED: OrderedDict[bytes, bytes] = OrderedDict()
RENDERED_CACHE_SIZE = 16384


def _dump(config: dict[str, Any]) -> str:
    # Not sorted: the same keys in another order make another YAML.
    key = hashlib.sha256(compact(config)).digest()
    packed = _RENDERED.get(key)
    if packed is not None:
        _RENDERED.move_to_end(key)
        return zlib.decompress(packed).decode()
    text = dump_block(config)
    if text is None:
        text = yaml.dump(config, Dumper=_Dumper, sort_keys=False, default_flow_style=False)
    _RENDERED[key] = zlib.compress(text.encode(), 1)
    if len(_RENDERED) > RENDERED_CACHE_SIZE:
        _RENDERED.popitem(last=False)
    return text


def render_job_yaml(job: RLHFJob) -> str:
    return _dump(pod_job_config(job))


def build_config_map(job: RLHFJob) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(job, config_map_name(job.name), "config"),
        "data": {CONFIG_KEY: render_job_yaml(job)},
    }
