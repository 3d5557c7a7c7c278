"""The KubeRay RayJob (ray.io/v1) that runs one attempt of an RLHFJob.

Its embedded `rayClusterSpec` has a head pod without devices (the trainer's driver runs there)
and one worker group per pod shape of the placement plan. Every pod mounts the job ConfigMap at
/etc/rlhf, the checkpoint volume at /checkpoints (the PVC; pod-local scratch without one), and
the reward-function ConfigMap when the spec names one. KubeRay shuts the Ray cluster down as
soon as the job finishes, which frees the GPUs; retries are fresh RayJobs made by the operator,
so KubeRay's own `backoffLimit` stays 0.
"""

from __future__ import annotations

import json
from typing import Any

from rlhf_trainer.config import Device

from ..api.v1alpha1 import Allocation, RLHFJob, WorkerGroupAllocation
from ..settings import OperatorSettings
from .common import (
    ATTEMPT_LABEL,
    CHECKPOINT_DIR,
    CONFIG_DIR,
    CONFIG_PATH,
    JSON,
    KUEUE_QUEUE_LABEL,
    REWARD_FUNCTION_DIR,
    config_map_name,
    container_security_context,
    labels,
    metadata,
    multiply_quantity,
    pod_security_context,
    ray_job_name,
    service_account_name,
    trainer_image,
)
from .pvc import checkpoint_claim_name

HEAD_PORTS = [
    {"name": "gcs-server", "containerPort": 6379},
    {"name": "dashboard", "containerPort": 8265},
    {"name": "client", "containerPort": 10001},
]
# Names the operator sets in the trainer's environment; spec.env cannot override them.
RESERVED_ENV = ("RLHF_JOB_NAME", "RLHF_JOB_NAMESPACE", "RLHF_JOB_ATTEMPT", "RLHF_CHECKPOINT_DIR")


def entrypoint(job: RLHFJob) -> str:
    # `--resume` follows spec.checkpoint.resume (auto by default): every attempt, first or
    # retried or resumed after a suspension, continues from the newest complete checkpoint.
    return (
        f"python -m rlhf_trainer run --config {CONFIG_PATH} "
        f"--resume {job.spec.checkpoint.resume.value}"
    )


def trainer_env(job: RLHFJob, attempt: int) -> list[JSON]:
    env: list[JSON] = [e.to_manifest() for e in job.spec.env if e.name not in RESERVED_ENV]
    secrets = job.spec.secrets
    for var, ref in (("HF_TOKEN", secrets.hf_token), ("WANDB_API_KEY", secrets.wandb_api_key)):
        if ref is not None:
            env.append({"name": var, "valueFrom": {"secretKeyRef": ref.to_manifest()}})
    env += [
        {"name": "RLHF_JOB_NAME", "value": job.name},
        {"name": "RLHF_JOB_NAMESPACE", "value": job.namespace},
        {"name": "RLHF_JOB_ATTEMPT", "value": str(attempt)},
        {"name": "RLHF_CHECKPOINT_DIR", "value": CHECKPOINT_DIR},
    ]
    return env


def _volumes(job: RLHFJob) -> tuple[list[JSON], list[JSON]]:
    """(pod volumes, container mounts) shared by head and workers."""
    volumes: list[JSON] = [
        {"name": "job-config", "configMap": {"name": config_map_name(job.name)}},
        # Ray, NCCL and vLLM move tensors through shared memory; the default 64 MiB is too small.
        {"name": "dshm", "emptyDir": {"medium": "Memory"}},
    ]
    mounts: list[JSON] = [
        {"name": "job-config", "mountPath": CONFIG_DIR, "readOnly": True},
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "checkpoints", "mountPath": CHECKPOINT_DIR},
    ]
    claim = checkpoint_claim_name(job)
    if claim is not None:
        volumes.append({"name": "checkpoints", "persistentVolumeClaim": {"claimName": claim}})
    else:
        # No storage: checkpoints live and die with the pod, so retries start over.
        volumes.append({"name": "checkpoints", "emptyDir": {}})
    reward_function = job.spec.models.reward_function
    if reward_function is not None and reward_function.config_map_ref is not None:
        ref = reward_function.config_map_ref
        volumes.append(
            {
                "name": "reward-function",
                "configMap": {"name": ref.name, "items": [{"key": ref.key, "path": ref.key}]},
            }
        )
        mounts.append(
            {"name": "reward-function", "mountPath": REWARD_FUNCTION_DIR, "readOnly": True}
        )
    return volumes, mounts


def _pod_template(
    job: RLHFJob,
    settings: OperatorSettings,
    attempt: int,
    *,
    component: str,
    container_name: str,
    resources: JSON,
    ports: list[JSON] | None = None,
) -> JSON:
    p = job.spec.placement
    volumes, mounts = _volumes(job)
    container: JSON = {
        "name": container_name,
        "image": trainer_image(job, settings),
        "imagePullPolicy": job.spec.image_pull_policy.value,
        "env": trainer_env(job, attempt),
        "resources": resources,
        "volumeMounts": mounts,
        "securityContext": container_security_context(),
    }
    if ports:
        container["ports"] = ports
    pod: JSON = {
        "serviceAccountName": service_account_name(job.name),
        "securityContext": pod_security_context(),
        "containers": [container],
        "volumes": volumes,
        # After SIGTERM (a node drain, a Kueue eviction, a spot reclaim) the trainer writes a
        # checkpoint of the last finished step; the kubelet waits this long before SIGKILL.
        "terminationGracePeriodSeconds": job.spec.run_policy.checkpoint_on_preemption_seconds,
    }
    if job.spec.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": n} for n in job.spec.image_pull_secrets]
    if p.node_selector:
        pod["nodeSelector"] = dict(p.node_selector)
    if p.tolerations:
        pod["tolerations"] = [t.to_manifest() for t in p.tolerations]
    if p.priority_class_name:
        pod["priorityClassName"] = p.priority_class_name
    if p.scheduler_name:
        pod["schedulerName"] = p.scheduler_name
    pod_labels = labels(job.name, component)
    pod_labels[ATTEMPT_LABEL] = str(attempt)
    return {"metadata": {"labels": pod_labels}, "spec": pod}


def _worker_resources(job: RLHFJob, devices: int) -> JSON:
    p = job.spec.placement
    amounts: dict[str, Any] = {
        "cpu": multiply_quantity(p.resources.worker_cpu_per_gpu, devices),
        "memory": multiply_quantity(p.resources.worker_memory_per_gpu, devices),
    }
    if p.device is Device.GPU:
        amounts[p.gpu_resource_name] = str(devices)
    return {"requests": dict(amounts), "limits": dict(amounts)}


def _worker_start_params(job: RLHFJob, devices: int) -> dict[str, str]:
    """`ray start` flags; KubeRay wants every value as a string.

    Each trainer rank asks Ray for one unit of `placement.rayResource`, so every worker pod
    advertises one unit per device it has: real GPUs as `num-gpus`, a custom resource name in
    `resources`. On CPU pods with the default name `GPU`, the GPUs are logical (Ray's bookkeeping
    only), exactly as the trainer declares them when it starts Ray on a laptop.
    """
    p = job.spec.placement
    custom = p.ray_resource != "GPU"
    logical_gpus = p.device is Device.GPU or not custom
    params = {"num-gpus": str(devices if logical_gpus else 0)}
    if custom:
        # KubeRay pastes the value into a shell command, hence the single quotes.
        params["resources"] = "'" + json.dumps({p.ray_resource: devices}) + "'"
    return params


def _worker_group(
    job: RLHFJob, settings: OperatorSettings, attempt: int, group: WorkerGroupAllocation
) -> JSON:
    return {
        "groupName": group.name,
        "replicas": group.replicas,
        "minReplicas": group.replicas,
        "maxReplicas": group.replicas,
        "rayStartParams": _worker_start_params(job, group.gpus_per_pod),
        "template": _pod_template(
            job,
            settings,
            attempt,
            component="ray-worker",
            container_name="ray-worker",
            resources=_worker_resources(job, group.gpus_per_pod),
        ),
    }


def _submitter_template(job: RLHFJob, settings: OperatorSettings, attempt: int) -> JSON:
    """KubeRay's submitter pod (`ray job submit`, its command is filled in by KubeRay): ours
    only to run it non-root, like every other pod of the job."""
    amounts = {"cpu": "500m", "memory": "512Mi"}
    template: JSON = {
        "metadata": {"labels": {**labels(job.name, "ray-submitter"), ATTEMPT_LABEL: str(attempt)}},
        "spec": {
            "restartPolicy": "Never",
            "securityContext": pod_security_context(),
            "containers": [
                {
                    "name": "ray-job-submitter",
                    "image": trainer_image(job, settings),
                    "imagePullPolicy": job.spec.image_pull_policy.value,
                    "resources": {"requests": dict(amounts), "limits": dict(amounts)},
                    "securityContext": container_security_context(),
                }
            ],
        },
    }
    if job.spec.image_pull_secrets:
        template["spec"]["imagePullSecrets"] = [{"name": n} for n in job.spec.image_pull_secrets]
    return template


def build_ray_job(
    job: RLHFJob,
    allocation: Allocation,
    settings: OperatorSettings,
    *,
    attempt: int,
    suspend: bool,
) -> JSON:
    """The RayJob of attempt `attempt` (0 first, +1 per retry)."""
    p = job.spec.placement
    head_amounts = {"cpu": p.resources.head_cpu, "memory": p.resources.head_memory}
    head = {
        "serviceType": "ClusterIP",
        # The head schedules no training work: all devices are on workers.
        "rayStartParams": {"dashboard-host": "0.0.0.0", "num-gpus": "0"},
        "template": _pod_template(
            job,
            settings,
            attempt,
            component="ray-head",
            container_name="ray-head",
            resources={"requests": dict(head_amounts), "limits": dict(head_amounts)},
            ports=HEAD_PORTS,
        ),
    }
    meta = metadata(job, ray_job_name(job.name, attempt), "rayjob")
    meta["labels"][ATTEMPT_LABEL] = str(attempt)
    if p.queue_name:
        meta["labels"][KUEUE_QUEUE_LABEL] = p.queue_name
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": meta,
        "spec": {
            "entrypoint": entrypoint(job),
            "shutdownAfterJobFinishes": True,
            "ttlSecondsAfterFinished": 0,
            "backoffLimit": 0,
            "submissionMode": "K8sJobMode",
            "submitterPodTemplate": _submitter_template(job, settings, attempt),
            # Kueue admits a queued RayJob by unsuspending it, so queued ones start suspended.
            "suspend": suspend or bool(p.queue_name),
            "rayClusterSpec": {
                "rayVersion": settings.ray_version,
                "enableInTreeAutoscaling": False,
                "headGroupSpec": head,
                "workerGroupSpecs": [
                    _worker_group(job, settings, attempt, g) for g in allocation.worker_groups
                ],
            },
        },
    }
