"""What the trainer's pods mount, and where the job's files are inside them (pure).

- The job's storage volume (the PVC of `spec.checkpoint.storage`, or one the operator creates
  of its default size: never pod-local scratch, so a retry always finds the checkpoints of the
  attempt before) is mounted at /storage on the head and every worker. The job writes under
  `/storage/<job name>/`: `checkpoints/`, `output/` (the final HF model, metrics.jsonl,
  tensorboard/) and `logs/` (every container's output, podlogs.py), which outlive the pods:
  `status.output` names them as `pvc://` locations.
- Inputs: every `pvc://<claim>/<path>` location of the spec (data, reward function, agent,
  models) is mounted read-only at /inputs/pvc/<claim> (the storage claim itself is already at
  /storage), every `configMapRef` file (data, reward function) at /inputs/configmap/<name>/.
  The ConfigMap's job config names the files by their path in the pod (`pod_job_config`).
- Scratch: the root filesystem is read-only, so what Ray and the libraries write goes to
  emptyDirs with a `sizeLimit` each (the kubelet evicts a pod past it rather than let it fill
  the node): /tmp (Ray's session dir, logs, object spilling), the home directory (model
  downloads, compile caches) and /dev/shm (Ray's object store, NCCL; in memory, so bounded by
  the pod's memory limit).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from rlhf_trainer.config.checkpoint import AccessMode
from rlhf_trainer.config.location_rules import file_locations, model_locations
from rlhf_trainer.config.locations import is_pvc, parse_pvc
from rlhf_trainer.config.podlogs import LOGS_DIR

from ..api.v1alpha1 import BestOutput, JobOutput, RLHFJob, TrainerBest
from ..settings import OperatorSettings
from .common import CONFIG_DIR, JSON, config_map_name, pvc_name

STORAGE_DIR = "/storage"
INPUTS_DIR = "/inputs"
STORAGE_VOLUME = "storage"
TMP_DIR = "/tmp"
# The trainer image's HOME (trainer_image/Dockerfile): HF_HOME and the compile caches are in it.
HOME_DIR = "/home/ray"
SHM_DIR = "/dev/shm"
# The submitter only runs `ray job submit`: a little scratch is plenty.
SUBMITTER_SCRATCH = "1Gi"


def storage_claim(job: RLHFJob) -> str:
    """The PVC of the job's storage volume: the user's claim, or the one the operator makes."""
    storage = job.spec.checkpoint.storage
    if storage is not None and storage.claim_name is not None:
        return storage.claim_name
    return pvc_name(job.name)


def job_dir(job: RLHFJob) -> str:
    """The job's directory inside the storage volume (a claim may be shared by jobs)."""
    return job.name


def checkpoint_dir(job: RLHFJob) -> str:
    return f"{STORAGE_DIR}/{job_dir(job)}/checkpoints"


def output_dir(job: RLHFJob) -> str:
    """`rlhf run --run-dir`: final/, metrics.jsonl and tensorboard/ go here."""
    return f"{STORAGE_DIR}/{job_dir(job)}/output"


def storage_access_mode(job: RLHFJob) -> AccessMode | None:
    """The access mode of a PVC the operator creates (None: the user's claim, unknown)."""
    storage = job.spec.checkpoint.storage
    if storage is not None and storage.claim_name is not None:
        return None
    if storage is None or storage.access_mode is None:
        return AccessMode.READ_WRITE_MANY
    return storage.access_mode


def default_storage_size(job: RLHFJob, settings: OperatorSettings) -> str | None:
    """The size of the PVC to create (None: the user gave a claim)."""
    storage = job.spec.checkpoint.storage
    if storage is None:
        return settings.default_storage_size
    return storage.size


@dataclass(frozen=True)
class Inputs:
    """Input volumes: pvc claims (other than the storage claim) and ConfigMap files."""

    claims: tuple[str, ...]
    config_maps: dict[str, tuple[str, ...]]  # name -> keys


def _pod_path(job: RLHFJob, value: str) -> str:
    pvc = parse_pvc(value)
    root = STORAGE_DIR if pvc.claim == storage_claim(job) else f"{INPUTS_DIR}/pvc/{pvc.claim}"
    return f"{root}/{pvc.path}".rstrip("/")


def config_map_path(name: str, key: str) -> str:
    return f"{INPUTS_DIR}/configmap/{name}/{key}"


def pod_locations(job: RLHFJob) -> dict[str, str]:
    """camelCase field -> the path in the pod, for every pvc:// location of the spec."""
    cfg = job.spec
    return {
        field: _pod_path(job, value)
        for field, value in [*file_locations(cfg), *model_locations(cfg)]
        if is_pvc(value)
    }


def inputs(job: RLHFJob) -> Inputs:
    cfg = job.spec
    own = storage_claim(job)
    claims: list[str] = []
    for _, value in [*file_locations(cfg), *model_locations(cfg)]:
        if is_pvc(value):
            claim = parse_pvc(value).claim
            if claim != own and claim not in claims:
                claims.append(claim)
    config_maps: dict[str, list[str]] = defaultdict(list)
    refs = [s.config_map_ref for s in [*cfg.data.train, *cfg.data.eval, *cfg.data.pretrain]]
    if cfg.models.reward_function is not None:
        refs.append(cfg.models.reward_function.config_map_ref)
    for ref in refs:
        if ref is not None and ref.key not in config_maps[ref.name]:
            config_maps[ref.name].append(ref.key)
    return Inputs(tuple(claims), {name: tuple(keys) for name, keys in config_maps.items()})


def referenced_objects(job: RLHFJob) -> list[tuple[str, str, str]]:
    """(kind, name, what refers to it) of every object the pods cannot start without."""
    found: list[tuple[str, str, str]] = []
    storage = job.spec.checkpoint.storage
    if storage is not None and storage.claim_name is not None:
        found.append(("PersistentVolumeClaim", storage.claim_name, "spec.checkpoint.storage"))
    wanted = inputs(job)
    found += [("PersistentVolumeClaim", c, "a pvc:// location of the spec") for c in wanted.claims]
    found += [("ConfigMap", n, "a configMapRef of the spec") for n in wanted.config_maps]
    return found


def storage_volume(job: RLHFJob) -> tuple[JSON, JSON]:
    """(volume, mount) of the job's storage volume at /storage."""
    volume = {"name": STORAGE_VOLUME, "persistentVolumeClaim": {"claimName": storage_claim(job)}}
    return volume, {"name": STORAGE_VOLUME, "mountPath": STORAGE_DIR}


def volumes(job: RLHFJob) -> tuple[list[JSON], list[JSON]]:
    """(pod volumes, container mounts) shared by head and workers."""
    storage, storage_mount = storage_volume(job)
    volume_list: list[JSON] = [
        {"name": "job-config", "configMap": {"name": config_map_name(job.name)}},
        storage,
    ]
    mounts: list[JSON] = [
        {"name": "job-config", "mountPath": CONFIG_DIR, "readOnly": True},
        storage_mount,
    ]
    wanted = inputs(job)
    # Volume names are DNS labels of at most 63 characters: numbered, not named after claims.
    for i, claim in enumerate(wanted.claims):
        name = f"input-pvc-{i}"
        volume_list.append(
            {"name": name, "persistentVolumeClaim": {"claimName": claim, "readOnly": True}}
        )
        mounts.append({"name": name, "mountPath": f"{INPUTS_DIR}/pvc/{claim}", "readOnly": True})
    for i, (cm, keys) in enumerate(wanted.config_maps.items()):
        name = f"input-configmap-{i}"
        items = [{"key": k, "path": k} for k in keys]
        volume_list.append({"name": name, "configMap": {"name": cm, "items": items}})
        mounts.append({"name": name, "mountPath": f"{INPUTS_DIR}/configmap/{cm}", "readOnly": True})
    return volume_list, mounts


def scratch(tmp_size: str, home_size: str, shm_size: str | None) -> tuple[list[JSON], list[JSON]]:
    """(volumes, mounts) of the writable scratch dirs of a pod whose root is read-only.
    `shm_size`: the pod's memory limit (a memory-backed emptyDir counts against it); None
    for a pod that needs no shared memory."""
    dirs = [("tmp", TMP_DIR, {"sizeLimit": tmp_size}), ("home", HOME_DIR, {"sizeLimit": home_size})]
    if shm_size is not None:
        # Ray's object store, NCCL and vLLM move tensors through shared memory; the runtime's
        # default /dev/shm of 64 MiB is far too small.
        dirs.append(("dshm", SHM_DIR, {"medium": "Memory", "sizeLimit": shm_size}))
    volume_list = [{"name": name, "emptyDir": source} for name, _, source in dirs]
    mounts = [{"name": name, "mountPath": path} for name, path, _ in dirs]
    return volume_list, mounts


def job_output(job: RLHFJob, best: TrainerBest | None = None) -> JobOutput:
    """Where the trainer wrote the job's results (`output_dir` in its pods) on the storage
    volume, and where it uploaded them; `best`: the trainer's best checkpoint
    (checkpoint.keepBest), exported as best/ beside final/."""
    base = f"pvc://{storage_claim(job)}/{job_dir(job)}/output"
    export = job.spec.checkpoint.export_hf
    # The online trainers export the policy as final/actor (and PPO's critic as final/critic);
    # the offline ones export the one model they train as final/. best/ is laid out the same.
    model = "actor" if job.spec.algorithm.name.is_online else ""
    best_output = None
    if best is not None:
        best_output = BestOutput(
            model=_join(f"{base}/best", model) if export else None,
            step=best.step,
            metric=best.metric,
            score=best.score,
        )
    return JobOutput(
        model=_join(f"{base}/final", model) if export else None,
        metrics=f"{base}/metrics.jsonl",
        tensorboard=f"{base}/tensorboard",
        logs=job_logs(job),
        uploaded=job.spec.output.uri,
        best=best_output,
    )


def job_logs(job: RLHFJob) -> str:
    """Where the pods keep their logs (builders/podlogs.py), as a location."""
    return f"pvc://{storage_claim(job)}/{job_dir(job)}/{LOGS_DIR}"


def _join(directory: str, name: str) -> str:
    return f"{directory}/{name}" if name else directory
