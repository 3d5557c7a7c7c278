"""Request bodies in Kubernetes' protobuf encoding, for the built-in kinds kubectl creates
imperatively (`kubectl create namespace|configmap|secret|serviceaccount` send protobuf and
do not fall back to JSON). Decoded by hand from k8s.io/api's generated.proto field numbers:
the `k8s\\0` magic, a runtime.Unknown envelope, then the object. Other kinds get 415.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from typing import Any

from . import errors

JSON = dict[str, Any]
MAGIC = b"k8s\x00"
Field = tuple[int, int, Any]  # (number, wire type, value: int or bytes)


def _varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[i]
        value |= (byte & 0x7F) << shift
        i += 1
        if not byte & 0x80:
            return value, i
        shift += 7


def fields(data: bytes) -> Iterator[Field]:
    i = 0
    while i < len(data):
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == 0:
            value, i = _varint(data, i)
        elif wire == 2:
            length, i = _varint(data, i)
            value, i = data[i : i + length], i + length
        elif wire == 5:
            value, i = data[i : i + 4], i + 4
        elif wire == 1:
            value, i = data[i : i + 8], i + 8
        else:
            raise errors.bad_request(f"unsupported protobuf wire type {wire}")
        yield number, wire, value


def _map(entries: list[bytes], as_bytes: bool) -> dict[str, str]:
    found = {}
    for entry in entries:
        parts = {n: v for n, _, v in fields(entry)}
        value = parts.get(2, b"")
        text = base64.b64encode(value).decode() if as_bytes else value.decode()
        found[parts.get(1, b"").decode()] = text
    return found


def _collect(data: bytes) -> dict[int, list[Any]]:
    found: dict[int, list[Any]] = {}
    for number, _, value in fields(data):
        found.setdefault(number, []).append(value)
    return found


def _metadata(data: bytes) -> JSON:
    f = _collect(data)
    meta: JSON = {}
    for number, key in ((1, "name"), (2, "generateName"), (3, "namespace")):
        if number in f:
            meta[key] = f[number][0].decode()
    for number, key in ((11, "labels"), (12, "annotations")):
        if number in f:
            meta[key] = _map(f[number], as_bytes=False)
    if 14 in f:
        meta["finalizers"] = [v.decode() for v in f[14]]
    return meta


def _namespace(f: dict[int, list[Any]]) -> JSON:
    spec = _collect(f[2][0]) if 2 in f else {}
    return {"spec": {"finalizers": [v.decode() for v in spec.get(1, [])]}} if spec else {}


def _configmap(f: dict[int, list[Any]]) -> JSON:
    body: JSON = {}
    if 2 in f:
        body["data"] = _map(f[2], as_bytes=False)
    if 3 in f:
        body["binaryData"] = _map(f[3], as_bytes=True)
    if 4 in f:
        body["immutable"] = bool(f[4][0])
    return body


def _secret(f: dict[int, list[Any]]) -> JSON:
    body: JSON = {}
    if 2 in f:
        body["data"] = _map(f[2], as_bytes=True)
    if 3 in f:
        body["type"] = f[3][0].decode()
    if 4 in f:
        body["stringData"] = _map(f[4], as_bytes=False)
    if 5 in f:
        body["immutable"] = bool(f[5][0])
    return body


def _service_account(f: dict[int, list[Any]]) -> JSON:
    return {"automountServiceAccountToken": bool(f[4][0])} if 4 in f else {}


KINDS: dict[tuple[str, str], Callable[[dict[int, list[Any]]], JSON]] = {
    ("v1", "Namespace"): _namespace,
    ("v1", "ConfigMap"): _configmap,
    ("v1", "Secret"): _secret,
    ("v1", "ServiceAccount"): _service_account,
}


def decode(raw: bytes) -> JSON:
    """The JSON form of a protobuf request body, or 415 for a kind not decoded here."""
    if not raw.startswith(MAGIC):
        raise errors.bad_request("a protobuf body must start with the k8s\\0 magic")
    envelope = _collect(raw[len(MAGIC) :])
    type_meta = _collect(envelope[1][0]) if 1 in envelope else {}
    api_version = type_meta.get(1, [b""])[0].decode()
    kind = type_meta.get(2, [b""])[0].decode()
    build = KINDS.get((api_version, kind))
    if build is None:
        raise errors.unsupported_media_type(
            "application/vnd.kubernetes.protobuf", ["application/json", "application/yaml"]
        )
    obj = _collect(envelope.get(2, [b""])[0])
    metadata = _metadata(obj[1][0]) if 1 in obj else {}
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata, **build(obj)}
