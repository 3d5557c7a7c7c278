"""The checkpoint PVC, when `spec.checkpoint.storage.size` asks for a new one.

With `retainOnDelete` (the default) the PVC has no owner reference, so deleting the RLHFJob
keeps the checkpoints; otherwise garbage collection removes it with the job. A PVC given by
`claimName` belongs to the user and is never created, changed or deleted here.
"""

from __future__ import annotations

from rlhf_trainer.config.checkpoint import AccessMode

from ..api.v1alpha1 import RLHFJob
from .common import JSON, metadata, pvc_name


def checkpoint_claim_name(job: RLHFJob) -> str | None:
    """The PVC the trainer's pods mount for checkpoints, if any."""
    storage = job.spec.checkpoint.storage
    if storage is None:
        return None
    return storage.claim_name or pvc_name(job.name)


def build_pvc(job: RLHFJob) -> JSON | None:
    storage = job.spec.checkpoint.storage
    if storage is None or storage.size is None:
        return None
    spec: JSON = {
        # Unset: ReadWriteMany (the head and every worker pod mount it, on any node). A plain
        # string: the enum would not survive YAML rendering.
        "accessModes": [(storage.access_mode or AccessMode.READ_WRITE_MANY).value],
        "resources": {"requests": {"storage": storage.size}},
    }
    if storage.storage_class_name is not None:
        spec["storageClassName"] = storage.storage_class_name
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": metadata(
            job, pvc_name(job.name), "checkpoints", owned=not storage.retain_on_delete
        ),
        "spec": spec,
    }
