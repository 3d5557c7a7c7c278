"""Where file contents live: an s3:// prefix (boto3) or a ReadWriteMany volume the gateway
mounts. Each tenant's files sit under its namespace's folder; which files a tenant has is
decided by the file records in its namespace (files.py), never by listing this store."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any, Protocol

from .settings import FilesConfig


class FileStore(Protocol):
    def location(self, namespace: str, file_id: str) -> str:
        """How a job names the file (`s3://...` or `pvc://claim/...`)."""

    async def put(self, namespace: str, file_id: str, data: bytes) -> None: ...

    async def get(self, namespace: str, file_id: str) -> bytes: ...

    async def delete(self, namespace: str, file_id: str) -> None: ...


def _key(prefix: str, namespace: str, file_id: str) -> str:
    return "/".join(p for p in (prefix, namespace, f"{file_id}.jsonl") if p)


class S3Store:
    """Files as objects under `s3://bucket/prefix/<namespace>/<file-id>.jsonl`. Credentials:
    the gateway pod's identity or AWS_* environment, as for any boto3 client."""

    def __init__(self, config: FilesConfig) -> None:
        import boto3  # only when files go to S3

        self._bucket, self._prefix = config.s3_bucket_prefix()
        store = config.object_store
        self._client: Any = boto3.client(
            "s3",
            endpoint_url=store.endpoint_url if store else None,
            region_name=store.region if store else None,
        )

    def location(self, namespace: str, file_id: str) -> str:
        return f"s3://{self._bucket}/{_key(self._prefix, namespace, file_id)}"

    async def put(self, namespace: str, file_id: str, data: bytes) -> None:
        key = _key(self._prefix, namespace, file_id)
        await asyncio.to_thread(self._client.put_object, Bucket=self._bucket, Key=key, Body=data)

    async def get(self, namespace: str, file_id: str) -> bytes:
        key = _key(self._prefix, namespace, file_id)
        answer = await asyncio.to_thread(self._client.get_object, Bucket=self._bucket, Key=key)
        body: bytes = await asyncio.to_thread(answer["Body"].read)
        return body

    async def delete(self, namespace: str, file_id: str) -> None:
        key = _key(self._prefix, namespace, file_id)
        await asyncio.to_thread(self._client.delete_object, Bucket=self._bucket, Key=key)


class VolumeStore:
    """Files on a ReadWriteMany claim mounted at `mountPath`: jobs read them as
    `pvc://<claim>/<path>/<namespace>/<file-id>.jsonl` from their namespace's claim of the
    same name (bound to the same share)."""

    def __init__(self, config: FilesConfig) -> None:
        self._claim, self._path = config.pvc_claim_path()
        self._root = Path(config.mount_path or "/")

    def _file(self, namespace: str, file_id: str) -> Path:
        return self._root / _key(self._path, namespace, file_id)

    def location(self, namespace: str, file_id: str) -> str:
        return f"pvc://{self._claim}/{_key(self._path, namespace, file_id)}"

    async def put(self, namespace: str, file_id: str, data: bytes) -> None:
        path = self._file(namespace, file_id)

        def write() -> None:
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_suffix(".partial")
            partial.write_bytes(data)
            os.replace(partial, path)  # readers never see half a file

        await asyncio.to_thread(write)

    async def get(self, namespace: str, file_id: str) -> bytes:
        return await asyncio.to_thread(self._file(namespace, file_id).read_bytes)

    async def delete(self, namespace: str, file_id: str) -> None:
        await asyncio.to_thread(self._file(namespace, file_id).unlink, True)


def open_store(config: FilesConfig) -> FileStore:
    return S3Store(config) if config.is_s3 else VolumeStore(config)
