"""Names, labels, owner references and pod conventions shared by every child of an RLHFJob.

Children are named `<job>-<suffix>` (deterministic, so a restarted operator finds what it
created before instead of creating duplicates) and carry the `app.kubernetes.io/*` labels plus
`rlhf.dev/job`, by which the operator's watches and `kubectl get -l` find them.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from ..api.v1alpha1 import GROUP, KIND, VERSION, RLHFJob
from ..settings import OPERATOR_NAME, OperatorSettings

JOB_LABEL = f"{GROUP}/job"
ATTEMPT_LABEL = f"{GROUP}/attempt"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
COMPONENT_LABEL = "app.kubernetes.io/component"
# The UID of the job a child belongs to: how the operator proves ownership of a child that
# has no owner reference by design (a retained storage PVC outlives its job).
JOB_UID_ANNOTATION = f"{GROUP}/job-uid"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"

# Where things are in the trainer's pods.
CONFIG_DIR = "/etc/rlhf"
CONFIG_KEY = "job.yaml"
CONFIG_PATH = f"{CONFIG_DIR}/{CONFIG_KEY}"

# Non-root: the trainer image runs as this user (its Dockerfile creates it).
RUN_AS_USER = 1000

JSON = dict[str, Any]


class BuildError(ValueError):
    """The spec cannot be rendered with these settings; `field` names what to change."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def config_map_name(job: str) -> str:
    return f"{job}-config"


def service_account_name(job: str) -> str:
    return f"{job}-trainer"


def pvc_name(job: str) -> str:
    return f"{job}-checkpoints"


def ray_token_secret_name(job: str) -> str:
    return f"{job}-ray-token"


def network_policy_name(job: str) -> str:
    return f"{job}-ray"


def report_name(job: str) -> str:
    """The ConfigMap the trainer writes its report into (the only object it may change)."""
    return f"{job}-report"


def ray_job_name(job: str, attempt: int) -> str:
    """One RayJob per attempt: a retry is a fresh RayJob (a fresh Ray cluster)."""
    return f"{job}-r{attempt}"


def labels(job: str, component: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "rlhf-trainer",
        "app.kubernetes.io/instance": job,
        COMPONENT_LABEL: component,
        "app.kubernetes.io/part-of": OPERATOR_NAME,
        MANAGED_BY_LABEL: OPERATOR_NAME,
        JOB_LABEL: job,
    }


def owner_reference(job: RLHFJob) -> JSON:
    """Controller reference: garbage collection deletes the child with its RLHFJob."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "name": job.name,
        "uid": job_uid(job),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def job_uid(job: RLHFJob) -> str:
    return str(job.metadata.get("uid", ""))


def metadata(job: RLHFJob, name: str, component: str, *, owned: bool = True) -> JSON:
    """`owned`: a controller reference (garbage-collected with the job). Without it the child
    carries the job's UID in an annotation instead, so that the operator can still tell its
    own from an object someone else made with the same name."""
    meta: JSON = {"name": name, "namespace": job.namespace, "labels": labels(job.name, component)}
    if owned:
        meta["ownerReferences"] = [owner_reference(job)]
    else:
        meta["annotations"] = {JOB_UID_ANNOTATION: job_uid(job)}
    return meta


def trainer_image(job: RLHFJob, settings: OperatorSettings) -> str:
    image = job.spec.image or settings.default_trainer_image
    if not image:
        raise BuildError(
            "spec.image",
            "no trainer image: set spec.image, or the operator's default "
            "(RLHF_OPERATOR_DEFAULT_TRAINER_IMAGE, Helm value trainer.defaultImage)",
        )
    return image


def multiply_quantity(quantity: str, factor: int) -> str:
    """`"8"` x 4 -> `"32"`, `"64Gi"` x 2 -> `"128Gi"`, `"500m"` x 3 -> `"1500m"`. The unit
    suffix is kept; quantities come validated by the spec's pattern."""
    digits = quantity.rstrip("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    suffix = quantity[len(digits) :]
    value = Decimal(digits) * factor
    text = format(value.normalize(), "f")
    return f"{text}{suffix}"


def pod_security_context() -> JSON:
    return {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS_USER,
        "runAsGroup": RUN_AS_USER,
        "fsGroup": RUN_AS_USER,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security_context() -> JSON:
    """Pod Security "restricted", plus a read-only root filesystem: what a pod writes goes to
    volumes with limits (volumes.py), not to the node's disk through the image's layers."""
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }
