"""The e2e RLHFJob: the tiny CPU example (`manifests/examples/tiny-ppo-cpu.yaml`) adapted to the
pods of a laptop-sized kind cluster. Pure: a manifest in, a manifest out."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from e2e_settings import MAX_STEPS

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "manifests" / "examples"
EXAMPLE = EXAMPLES / "tiny-ppo-cpu.yaml"
# The ConfigMap `kubectl apply -k manifests/examples` makes of the tiny task's files.
TINY_TASK = "tiny-task"

Manifest = dict[str, Any]

# The kind node is the Docker host, documented as at least 6 CPUs and 16 GiB (e2e/README.md).
# kube-system, KubeRay and the operator request about 1 CPU and 1 GiB of that, so the job's
# pods (Ray head + workers + submitter) must fit in what is left: test_e2e_job.py checks.
NODE_BUDGET = {"cpu": 4.5, "memory": 12 * 2**30}
CPU_POD_RESOURCES = {
    "headCpu": "1",
    "headMemory": "2Gi",
    "workerCpuPerGpu": "500m",
    "workerMemoryPerGpu": "2Gi",
}


def load_example(path: Path = EXAMPLE) -> Manifest:
    if not path.exists():
        raise FileNotFoundError(
            f"{path.relative_to(REPO)} is missing: the e2e suite runs the tiny CPU example"
        )
    return dict(yaml.safe_load(path.read_text()))


def adapt_for_kind(
    manifest: Manifest,
    *,
    image: str,
    namespace: str,
    deadline_seconds: int = 1800,
    checkpoint_size: str = "1Gi",
    max_steps: int | None = MAX_STEPS,
) -> Manifest:
    """The example with CPU pods, the locally built trainer image, checkpoints on a PVC of the
    cluster's default StorageClass, and a deadline so a stuck run fails instead of hanging;
    `max_steps` makes the run that short, with a checkpoint halfway."""
    job = copy.deepcopy(manifest)
    job["metadata"]["namespace"] = namespace
    spec = job["spec"]
    spec["image"] = image
    # kind-loaded images exist on the node and must never be pulled.
    spec["imagePullPolicy"] = "IfNotPresent"
    placement = spec.setdefault("placement", {})
    placement["device"] = "cpu"
    placement["resources"] = dict(CPU_POD_RESOURCES)
    for key in ("nodeSelector", "tolerations", "priorityClassName", "queueName"):
        placement.pop(key, None)
    checkpoint = spec.setdefault("checkpoint", {})
    # A new PVC of the default StorageClass (kind: local-path, which provisions ReadWriteOnce
    # only: the job has one worker pod, and the operator keeps the head beside it); kept after
    # the job is deleted.
    checkpoint["storage"] = {"size": checkpoint_size, "accessMode": "ReadWriteOnce"}
    # Files beside the manifest exist on this machine only: read them from the ConfigMap, as
    # manifests/examples/kustomization.yaml does.
    for source in spec["data"]["train"]:
        if "path" in source:
            source["configMapRef"] = {"name": TINY_TASK, "key": Path(source.pop("path")).name}
    reward = spec["models"].get("rewardFunction") or {}
    if "path" in reward:
        reward["configMapRef"] = {"name": TINY_TASK, "key": Path(reward.pop("path")).name}
    if max_steps is not None:
        spec.setdefault("training", {})["maxSteps"] = max_steps
        checkpoint["everySteps"] = max(1, max_steps // 2)
    run_policy = spec.setdefault("runPolicy", {})
    run_policy["activeDeadlineSeconds"] = deadline_seconds
    run_policy["backoffLimit"] = 0
    return job


def tiny_task_config_map(namespace: str) -> Manifest:
    """The ConfigMap of the tiny task's files, as the examples' kustomization makes it."""
    files = sorted(p for p in (EXAMPLES / TINY_TASK).iterdir() if p.is_file())
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": TINY_TASK, "namespace": namespace},
        "data": {p.name: p.read_text() for p in files},
    }
