"""Where a job's files live, as a manifest names them: on the author's machine, on a volume of
the cluster (`pvc://<claim>/<path>`), in an S3-compatible bucket (`s3://<bucket>/<key>`), or in a
ConfigMap (a `configMapRef` beside the path). Pure parsing; the trainer resolves them, the
operator mounts them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

PVC_SCHEME, S3_SCHEME = "pvc://", "s3://"
# A PVC name is a DNS-1123 subdomain; an S3 bucket name is 3-63 lower-case letters, digits,
# dots and hyphens.
_CLAIM = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


@dataclass(frozen=True)
class PvcPath:
    claim: str
    path: str  # inside the volume, no leading slash; "" is the volume's root

    def __str__(self) -> str:
        return f"{PVC_SCHEME}{self.claim}/{self.path}".rstrip("/")


@dataclass(frozen=True)
class S3Uri:
    bucket: str
    key: str  # an object, or a prefix (a "directory") when it names several

    def __str__(self) -> str:
        return f"{S3_SCHEME}{self.bucket}/{self.key}".rstrip("/")

    def child(self, name: str) -> S3Uri:
        return S3Uri(self.bucket, f"{self.key.rstrip('/')}/{name}".lstrip("/"))


def parse_pvc(value: str) -> PvcPath:
    """`pvc://claim/some/path` -> PvcPath; ValueError saying what is wrong otherwise."""
    rest = value.removeprefix(PVC_SCHEME)
    claim, _, path = rest.partition("/")
    if not _CLAIM.match(claim):
        raise ValueError(
            f"{value!r}: the claim must be a PersistentVolumeClaim name (pvc://<claim>/<path>)"
        )
    if ".." in path.split("/"):
        raise ValueError(f"{value!r}: the path inside the volume must not contain '..'")
    return PvcPath(claim, path.strip("/"))


def parse_s3(value: str) -> S3Uri:
    """`s3://bucket/key` -> S3Uri; ValueError saying what is wrong otherwise."""
    rest = value.removeprefix(S3_SCHEME)
    bucket, _, key = rest.partition("/")
    if not _BUCKET.match(bucket):
        raise ValueError(f"{value!r}: not an S3 bucket name (s3://<bucket>/<key>)")
    return S3Uri(bucket, key.strip("/"))


def is_pvc(value: str) -> bool:
    return value.startswith(PVC_SCHEME)


def is_s3(value: str) -> bool:
    return value.startswith(S3_SCHEME)


def location_problem(value: str) -> str | None:
    """Why a `pvc://` or `s3://` location is malformed (None for a good one or a plain path)."""
    try:
        if is_pvc(value):
            parse_pvc(value)
        elif is_s3(value):
            parse_s3(value)
    except ValueError as err:
        return str(err)
    return None


def is_relative_local(value: str) -> bool:
    """A path on the author's machine, relative to the manifest's directory: no pod has it."""
    return not (is_pvc(value) or is_s3(value) or value.startswith(("/", "~")))


def is_relative_model_path(value: str) -> bool:
    """A `pretrained` directory relative to the manifest (`./x`, `../x`). Only the leading dot
    tells it from a Hugging Face id: `org/name` is a hub id, as `from_pretrained` reads it."""
    return value in (".", "..") or value.startswith(("./", "../"))


def set_field(doc: dict[str, Any], field: str, value: str) -> None:
    """Set a camelCase path such as `data.train[0].path` in a manifest dict: how the trainer
    (a fetched s3:// copy) and the operator (a pod's mount) point a location elsewhere."""
    node: Any = doc
    parts = field.replace("]", "").replace("[", ".").split(".")
    for part in parts[:-1]:
        node = node[int(part)] if part.isdigit() else node[part]
    node[parts[-1]] = value
