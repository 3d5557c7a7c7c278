"""The KubeRay RayJob (ray.io/v1) that runs one attempt of an RLHFJob.

Its embedded `rayClusterSpec` has a head pod without devices (the trainer's driver runs there)
and one worker group per pod shape of the placement plan. Every pod mounts the job ConfigMap at
/etc/rlhf, the job's storage volume at /storage and its inputs (volumes.py). KubeRay shuts the
Ray cluster down as soon as the job finishes, which frees the GPUs; retries are fresh RayJobs
made by the operator, so KubeRay's own `backoffLimit` stays 0.

Every pod is hardened the same way: Pod Security "restricted", a read-only root filesystem
with size-limited scratch volumes, the job's own ServiceAccount (its token mounted only on the
head, where the driver reports), and the job's Ray token (secret.py) so that the cluster
answers nobody else.
"""

from __future__ import annotations

import json
from typing import Any

from rlhf_trainer.config import Device, JobSpec
from rlhf_trainer.config.checkpoint import AccessMode

from ..api.v1alpha1 import Allocation, RLHFJob, WorkerGroupAllocation
from ..settings import OperatorSettings
from .common import (
    ATTEMPT_LABEL,
    CONFIG_PATH,
    JOB_LABEL,
    JSON,
    KUEUE_QUEUE_LABEL,
    container_security_context,
    labels,
    metadata,
    multiply_quantity,
    pod_security_context,
    ray_job_name,
    service_account_name,
    trainer_image,
)
from .env import trainer_env
from .podlogs import OVERWRITE_COMMAND_ANNOTATION, logs_env, ray_command, submitter_command
from .secret import auth_options, ray_auth_env
from .volumes import (
    SUBMITTER_SCRATCH,
    output_dir,
    scratch,
    storage_access_mode,
    storage_volume,
)
from .volumes import volumes as pod_volumes

HEAD_PORTS = [
    {"name": "gcs-server", "containerPort": 6379},
    {"name": "dashboard", "containerPort": 8265},
    {"name": "client", "containerPort": 10001},
]


def merged_node_selector(spec: JobSpec, settings: OperatorSettings) -> dict[str, str]:
    """The job's node selector with the platform's fixed keys on top (a job that sets one to
    another value is refused by `policy_problems` before anything is built)."""
    return {**spec.placement.node_selector, **dict(settings.policy.node_selector)}


def entrypoint(job: RLHFJob) -> str:
    # `--resume` follows spec.checkpoint.resume (auto by default): every attempt, first or
    # retried or resumed after a suspension, continues from the newest complete checkpoint.
    # `--run-dir`: the final model, metrics and logs go to the job's storage volume, where
    # they outlive the pods.
    return (
        f"python -m rlhf_trainer run --config {CONFIG_PATH} "
        f"--resume {job.spec.checkpoint.resume.value} --run-dir {output_dir(job)}"
    )


# Before SIGTERM, within the grace period: Ray stops the cluster's running jobs (the driver
# checkpoints its last finished step while the ranks of every pod still serve it), then the
# node stops at once, as KubeRay's samples' `ray stop` hook does (the shell that is the
# container's PID 1 ignores SIGTERM: the pod would linger until SIGKILL). See
# rlhf_trainer.distributed.prestop.
PRE_STOP = ["/bin/sh", "-c", "python -m rlhf_trainer prestop; ray stop"]


def _pod_template(
    job: RLHFJob,
    settings: OperatorSettings,
    attempt: int,
    *,
    component: str,
    container_name: str,
    resources: JSON,
    ports: list[JSON] | None = None,
    reports: bool = False,
) -> JSON:
    """`reports`: the pod runs the driver, which writes the job's report through the API:
    only this pod mounts the ServiceAccount token."""
    p = job.spec.placement
    volumes, mounts = pod_volumes(job)
    more_volumes, more_mounts = scratch(
        p.resources.tmp_size, p.resources.cache_size, resources["limits"]["memory"]
    )
    volumes, mounts = volumes + more_volumes, mounts + more_mounts
    # `ray start` in the log wrapper (podlogs.py): the container's output is kept on the volume.
    command, args = ray_command(job, container_name, head=reports)
    container: JSON = {
        "name": container_name,
        "image": trainer_image(job, settings),
        "imagePullPolicy": job.spec.image_pull_policy.value,
        "command": command,
        "args": args,
        "env": trainer_env(job, attempt) + logs_env(job, attempt),
        "resources": resources,
        "volumeMounts": mounts,
        "securityContext": container_security_context(),
        "lifecycle": {"preStop": {"exec": {"command": list(PRE_STOP)}}},
    }
    if ports:
        container["ports"] = ports
    pod: JSON = {
        "serviceAccountName": service_account_name(job.name),
        "automountServiceAccountToken": reports,
        "securityContext": pod_security_context(),
        "containers": [container],
        "volumes": volumes,
        # A node drain, a Kueue eviction, a spot reclaim: the preStop hook has the driver
        # checkpoint the last finished step; the kubelet waits this long before SIGKILL.
        "terminationGracePeriodSeconds": job.spec.run_policy.checkpoint_on_preemption_seconds,
    }
    if job.spec.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": n} for n in job.spec.image_pull_secrets]
    node_selector = merged_node_selector(job.spec, settings)
    if node_selector:
        pod["nodeSelector"] = node_selector
    if p.tolerations:
        pod["tolerations"] = [t.to_manifest() for t in p.tolerations]
    if p.priority_class_name:
        pod["priorityClassName"] = p.priority_class_name
    if p.scheduler_name:
        pod["schedulerName"] = p.scheduler_name
    pod_labels = labels(job.name, component)
    pod_labels[ATTEMPT_LABEL] = str(attempt)
    annotations = {OVERWRITE_COMMAND_ANNOTATION: "true"}
    return {"metadata": {"labels": pod_labels, "annotations": annotations}, "spec": pod}


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
    """KubeRay's submitter pod (`ray job submit`, which follows the driver's output): under
    the job's ServiceAccount (never the namespace's default one) without its token, with the
    job's Ray token, and as hardened as every other pod of the job. Its output is kept on the
    job's volume (podlogs.py); a ReadWriteOnce volume attaches to one node, so the submitter
    then joins the worker's node, unless the platform pins it to a node pool of its own
    (`policy.nodeSelector`): there its output is not kept (the driver's records are, in
    trainer.jsonl)."""
    amounts = {"cpu": "500m", "memory": "512Mi"}
    volumes, mounts = scratch(SUBMITTER_SCRATCH, SUBMITTER_SCRATCH, None)
    env = ray_auth_env(job)
    one_node = storage_access_mode(job) is AccessMode.READ_WRITE_ONCE
    keeps_logs = not (one_node and settings.policy.node_selector)
    if keeps_logs:
        volume, mount = storage_volume(job)
        volumes, mounts = [volume, *volumes], [mount, *mounts]
        env = env + logs_env(job, attempt)
    command, args = submitter_command(job, "ray-job-submitter", entrypoint(job))
    template: JSON = {
        "metadata": {"labels": {**labels(job.name, "ray-submitter"), ATTEMPT_LABEL: str(attempt)}},
        "spec": {
            "restartPolicy": "Never",
            "serviceAccountName": service_account_name(job.name),
            "automountServiceAccountToken": False,
            "securityContext": pod_security_context(),
            "containers": [
                {
                    "name": "ray-job-submitter",
                    "image": trainer_image(job, settings),
                    "imagePullPolicy": job.spec.image_pull_policy.value,
                    "command": command,
                    "args": args,
                    "env": env,
                    "resources": {"requests": dict(amounts), "limits": dict(amounts)},
                    "volumeMounts": mounts,
                    "securityContext": container_security_context(),
                }
            ],
            "volumes": volumes,
        },
    }
    if job.spec.image_pull_secrets:
        template["spec"]["imagePullSecrets"] = [{"name": n} for n in job.spec.image_pull_secrets]
    if settings.policy.node_selector:
        # The platform's own node pool; the job's (GPU) selector is for its Ray pods.
        template["spec"]["nodeSelector"] = dict(settings.policy.node_selector)
    elif one_node:
        template["spec"]["affinity"] = _beside_worker(job, attempt)
    return template


def _beside_worker(job: RLHFJob, attempt: int) -> JSON:
    worker = {JOB_LABEL: job.name, "app.kubernetes.io/component": "ray-worker"}
    return {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {**worker, ATTEMPT_LABEL: str(attempt)}},
                    "topologyKey": "kubernetes.io/hostname",
                }
            ]
        }
    }


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
    head: JSON = {
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
            reports=True,
        ),
    }
    if storage_access_mode(job) is AccessMode.READ_WRITE_ONCE:
        # A ReadWriteOnce volume attaches to one node, and the rules allow it only for a job
        # with one worker pod: the head follows that worker (the worker needs the GPU node).
        head["template"]["spec"]["affinity"] = _beside_worker(job, attempt)
    meta = metadata(job, ray_job_name(job.name, attempt), "rayjob")
    meta["labels"][ATTEMPT_LABEL] = str(attempt)
    # KubeRay copies it to the RayCluster, whose pods then run the commands we give them.
    meta.setdefault("annotations", {})[OVERWRITE_COMMAND_ANNOTATION] = "true"
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
                # Ray token authentication (Ray >= 2.52): see secret.py.
                "authOptions": auth_options(job),
                "enableInTreeAutoscaling": False,
                "headGroupSpec": head,
                "workerGroupSpecs": [
                    _worker_group(job, settings, attempt, g) for g in allocation.worker_groups
                ],
            },
        },
    }
