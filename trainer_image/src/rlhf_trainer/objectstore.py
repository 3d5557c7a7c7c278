"""The job's S3-compatible object store: `s3://` inputs fetched before training, outputs
uploaded after it.

    cfg = fetch_inputs(cfg, cache_dir)           # every s3:// file/model location -> a local path
    upload_outputs(run_dir, cfg)                 # final/, metrics.jsonl, tensorboard/ -> output.uri
    upload_logs(logs_dir, cfg)                   # the pods' logs (podlogs) -> output.uri/logs

Credentials come the standard way (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY in the
environment, which the operator fills from `spec.objectStore.credentialsSecret`, or the pod's
own cloud identity); `spec.objectStore.endpointUrl` points at MinIO, Ceph or any other
S3-compatible store. A `pvc://` location exists only inside a cluster's pods, where the
operator mounts the volume and rewrites the location to the mount path; outside one it is
refused with that reason.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rlhf_trainer.config import JobConfig
from rlhf_trainer.config.location_rules import file_locations, model_locations
from rlhf_trainer.config.locations import S3Uri, is_pvc, is_s3, parse_s3, set_field
from rlhf_trainer.config.outcome import InvalidSpecError
from rlhf_trainer.config.output import ObjectStoreConfig
from rlhf_trainer.config.podlogs import LOGS_DIR

# What a run leaves that must outlive it, relative to the run directory.
OUTPUTS = ("final", "metrics.jsonl", "tensorboard")


class ObjectStoreError(RuntimeError):
    """An s3:// location could not be read or written (the message names it and why); the
    network or the store may be to blame, so a retry may help."""


class InputLocationError(InvalidSpecError, ObjectStoreError):
    """An input location the job names does not exist, is not readable with the job's
    credentials, or cannot exist here (pvc:// outside a cluster): a retry cannot help."""


# S3 error codes that say the location or the credentials are wrong, not the network.
_NOT_RETRYABLE = frozenset(
    {
        "404",
        "NoSuchKey",
        "NoSuchBucket",
        "403",
        "AccessDenied",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
    }
)


def inputs_cache_dir() -> Path:
    """Where s3:// inputs are copied. The driver fetches them, but Ray workers in other pods
    read them by path: in a cluster's pods (the operator sets `RLHF_CHECKPOINT_DIR`, on the
    job's shared volume) `<RLHF_CHECKPOINT_DIR>/.inputs`; else `RLHF_CACHE_DIR`/inputs, default
    `~/.cache/rlhf-operator/inputs`."""
    if os.environ.get("RLHF_CHECKPOINT_DIR"):
        return Path(os.environ["RLHF_CHECKPOINT_DIR"]) / ".inputs"
    root = os.environ.get("RLHF_CACHE_DIR")
    return Path(root) / "inputs" if root else Path.home() / ".cache" / "rlhf-operator" / "inputs"


def client(store: ObjectStoreConfig | None) -> Any:
    import boto3

    kwargs: dict[str, Any] = {}
    if store is not None and store.endpoint_url:
        kwargs["endpoint_url"] = store.endpoint_url
    region = (store.region if store is not None else None) or os.environ.get("AWS_REGION")
    kwargs["region_name"] = region or "us-east-1"
    return boto3.client("s3", **kwargs)


def list_keys(uri: S3Uri, store: ObjectStoreConfig | None) -> list[str]:
    """Every key under `uri` taken as a prefix."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return list(_keys(client(store), uri))
    except (BotoCoreError, ClientError) as err:
        raise ObjectStoreError(f"cannot list {uri}: {err}") from err


def read_object(bucket: str, key: str, store: ObjectStoreConfig | None) -> bytes:
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return bytes(client(store).get_object(Bucket=bucket, Key=key)["Body"].read())
    except (BotoCoreError, ClientError) as err:
        raise ObjectStoreError(f"cannot read s3://{bucket}/{key}: {err}") from err


def _keys(s3: Any, uri: S3Uri) -> Iterator[str]:
    """Keys under `uri` taken as a prefix ("directory"), paginated."""
    prefix = f"{uri.key.rstrip('/')}/" if uri.key else ""
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=uri.bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            yield str(item["Key"])


def download(uri: S3Uri, dest: Path, store: ObjectStoreConfig | None) -> Path:
    """An object to the file `dest`, or every object under a prefix into the directory
    `dest` (keeping the relative layout). Returns the local path."""
    from botocore.exceptions import BotoCoreError, ClientError

    s3 = client(store)
    try:
        keys = list(_keys(s3, uri))
        if not keys:  # not a prefix: a single object
            dest.parent.mkdir(parents=True, exist_ok=True)
            s3.download_file(uri.bucket, uri.key, str(dest))
            return dest
        for key in keys:
            relative = key[len(uri.key) :].lstrip("/")
            target = dest / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            s3.download_file(uri.bucket, key, str(target))
        return dest
    except ClientError as err:
        code = str(err.response.get("Error", {}).get("Code", ""))
        kind = InputLocationError if code in _NOT_RETRYABLE else ObjectStoreError
        raise kind(f"cannot read {uri}: {err}") from err
    except BotoCoreError as err:
        raise ObjectStoreError(f"cannot read {uri}: {err}") from err


def upload_tree(src: Path, uri: S3Uri, store: ObjectStoreConfig | None) -> list[str]:
    """Upload a file, or every file under a directory, to `uri`; returns the keys written."""
    from botocore.exceptions import BotoCoreError, ClientError

    s3 = client(store)
    files = [src] if src.is_file() else sorted(p for p in src.rglob("*") if p.is_file())
    written = []
    try:
        for path in files:
            key = uri.key if src.is_file() else uri.child(str(path.relative_to(src))).key
            s3.upload_file(str(path), uri.bucket, key)
            written.append(key)
    except (BotoCoreError, ClientError) as err:
        raise ObjectStoreError(f"cannot write {uri}: {err}") from err
    return written


def _local_copy(value: str, cache_dir: Path, store: ObjectStoreConfig | None) -> str:
    uri = parse_s3(value)
    # One directory per location: the same input is fetched once per cache.
    digest = hashlib.sha256(value.encode()).hexdigest()[:16]
    name = Path(uri.key).name or uri.bucket
    dest = cache_dir / "s3" / digest / name
    if not dest.exists():
        # Fetched beside it, then renamed: a download that died half-way (a preempted pod)
        # must not be taken for a complete copy by the next attempt.
        partial = dest.with_name(f".partial-{os.getpid()}-{name}")
        shutil.rmtree(partial, ignore_errors=True)
        download(uri, partial, store)
        os.replace(partial, dest)
    return str(dest)


def fetch_inputs(cfg: JobConfig, cache_dir: Path) -> JobConfig:
    """This job with every `s3://` file and model location replaced by a local copy; refuses
    `pvc://` locations, which only a cluster's pods have."""
    fields = dict([*file_locations(cfg), *model_locations(cfg)])
    pvc = [f"{field}: {value!r}" for field, value in fields.items() if is_pvc(value)]
    if pvc:
        raise InputLocationError(
            "pvc:// names a volume of a Kubernetes cluster, mounted by the operator in the job's "
            f"pods; outside a cluster give a local path or s3:// instead ({'; '.join(pvc)})"
        )
    local = {
        field: _local_copy(value, cache_dir, cfg.object_store)
        for field, value in fields.items()
        if is_s3(value)
    }
    if not local:
        return cfg
    doc = cfg.to_manifest()
    for field, path in local.items():
        set_field(doc, field, path)
    return JobConfig.model_validate(doc)


def upload_logs(logs_dir: Path, cfg: JobConfig) -> list[str]:
    """Copy the job's logs directory (every attempt so far) to `<output.uri>/logs` (nothing
    when unset or when there are none); the keys written."""
    from botocore.exceptions import BotoCoreError, ClientError

    if cfg.output.uri is None or not logs_dir.is_dir():
        return []
    base = parse_s3(cfg.output.uri).child(LOGS_DIR)
    s3 = client(cfg.object_store)
    written = []
    # The pods are still writing: a file may be rotated away between listing and upload.
    for path in sorted(p for p in logs_dir.rglob("*") if p.is_file()):
        key = base.child(str(path.relative_to(logs_dir))).key
        try:
            s3.upload_file(str(path), base.bucket, key)
        except FileNotFoundError:
            continue
        except (BotoCoreError, ClientError) as err:
            raise ObjectStoreError(f"cannot write {base}: {err}") from err
        written.append(key)
    return written


def upload_outputs(run_dir: Path, cfg: JobConfig) -> list[str]:
    """Copy the run's outputs to `output.uri` (nothing when unset); the keys written."""
    if cfg.output.uri is None:
        return []
    base = parse_s3(cfg.output.uri)
    written: list[str] = []
    for name in OUTPUTS:
        path = run_dir / name
        if path.exists():
            written += upload_tree(path, base.child(name), cfg.object_store)
    return written
