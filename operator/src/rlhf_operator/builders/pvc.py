"""The job's storage PVC (checkpoints and outputs), unless `spec.checkpoint.storage.claimName`
names the user's own.

A job without `spec.checkpoint.storage` gets one of the operator's default size: pod-local
scratch would lose the checkpoints with the pods, and a retry would "resume" from nothing.
With `retainOnDelete` (the default) the PVC has no owner reference, so deleting the RLHFJob
keeps its checkpoints and final model; otherwise garbage collection removes it with the job.
A claim given by `claimName` belongs to the user and is never created, changed or deleted here.
"""

from __future__ import annotations

from ..api.v1alpha1 import RLHFJob
from ..settings import OperatorSettings
from .common import JSON, metadata, pvc_name
from .volumes import default_storage_size, storage_access_mode


def build_pvc(job: RLHFJob, settings: OperatorSettings) -> JSON | None:
    size = default_storage_size(job, settings)
    mode = storage_access_mode(job)
    if size is None or mode is None:
        return None
    storage = job.spec.checkpoint.storage
    # A plain string: the enum would not survive YAML rendering.
    spec: JSON = {"accessModes": [mode.value], "resources": {"requests": {"storage": size}}}
    if storage is not None and storage.storage_class_name is not None:
        spec["storageClassName"] = storage.storage_class_name
    retain = storage is None or storage.retain_on_delete
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": metadata(job, pvc_name(job.name), "storage", owned=not retain),
        "spec": spec,
    }
