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


def ray_job_name(job: str, attempt: int) -> str:
    """One RayJob per attempt: a retry is a fresh RayJob (a fresh Ray cluster)."""
    return f"{job}-r{attempt}"


def labels(job: str, component: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "rlhf-trainer",
        "app.kubernetes.io/instance": job,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/part-of": OPERATOR_NAME,
        "app.kubernetes.io/managed-by": OPERATOR_NAME,
        JOB_LABEL: job,
    }


def owner_reference(job: RLHFJob) -> JSON:
    """Controller reference: garbage collection deletes the child with its RLHFJob."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "name": job.name,
        "uid": str(job.metadata.get("uid", "")),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def metadata(job: RLHFJob, name: str, component: str, *, owned: bool = True) -> JSON:
    meta: JSON = {"name": name, "namespace": job.namespace, "labels": labels(job.name, component)}
    if owned:
        meta["ownerReferences"] = [owner_reference(job)]
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
    return {
        "allowPrivilegeEscalation": False,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }
