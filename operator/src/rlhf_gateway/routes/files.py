"""`/v1/files`: upload (multipart), list, get, content, delete."""

from __future__ import annotations

import time
from typing import Annotated, Literal

from fastapi import APIRouter, File, Form, Query, UploadFile
from fastapi.responses import Response

from .. import files
from ..deps import GatewayDep, TenantDep
from ..errors import ApiError, bad_request, not_found
from ..formats import check_rows
from ..progress import page

router = APIRouter(prefix="/v1/files", tags=["files"])
WHAT = "file"


def _checked_id(file_id: str) -> str:
    if not files.is_file_id(file_id):  # never a name of something else in the namespace
        raise not_found(WHAT, file_id)
    return file_id


@router.post("", response_model=files.FileObject)
async def upload_file(
    gw: GatewayDep,
    api: TenantDep,
    file: Annotated[UploadFile, File(description="A JSONL file of training rows.")],
    purpose: Annotated[str, Form()],
) -> files.FileObject:
    if purpose not in files.PURPOSES:
        raise bad_request(
            f"purpose: must be one of {', '.join(files.PURPOSES)} (got {purpose!r})", "purpose"
        )
    limit = gw.settings.files.max_bytes
    data = await file.read(limit + 1)
    if len(data) > limit:
        raise ApiError(
            413,
            f"file: larger than the platform's limit of {limit} bytes",
            param="file",
            code="file_too_large",
        )
    fmt, rows = check_rows(files.jsonl_rows(data))
    namespace = api.tenant.namespace
    file_id = files.new_file_id()
    body = files.record(
        file_id,
        filename=file.filename or "upload.jsonl",
        purpose=purpose,
        size=len(data),
        created_at=int(time.time()),
        location=gw.store.location(namespace, file_id),
        fmt=fmt,
        rows=rows,
    )
    # Record first, so that RBAC refuses before anything is stored; content next; a failed
    # write takes the record away again (nothing half-created).
    created = await api.create_configmap(body, what=WHAT, ident=file_id)
    try:
        await gw.store.put(namespace, file_id, data)
    except Exception as err:
        await api.delete_configmap(file_id, what=WHAT)
        raise ApiError(502, f"The file could not be stored: {err}", code="storage_error") from None
    return files.file_object(created)


@router.get("", response_model=files.FileList)
async def list_files(
    api: TenantDep,
    purpose: str | None = None,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=10000)] = 10000,
    order: Literal["asc", "desc"] = "desc",
) -> files.FileList:
    if purpose is not None and purpose not in files.PURPOSES:
        raise bad_request(
            f"purpose: one of {', '.join(files.PURPOSES)} (got {purpose!r})", "purpose"
        )
    selector = files.FILE_LABEL + (f",rlhf.dev/purpose={purpose}" if purpose else "")
    items = await api.list_configmaps(selector, what=WHAT)
    ordered = sorted((files.file_object(i) for i in items), key=lambda f: (f.created_at, f.id))
    data, more = page(ordered[::-1] if order == "desc" else ordered, after, limit)
    return files.FileList(
        data=data,
        has_more=more,
        first_id=data[0].id if data else None,
        last_id=data[-1].id if data else None,
    )


@router.get("/{file_id}", response_model=files.FileObject)
async def get_file(api: TenantDep, file_id: str) -> files.FileObject:
    return files.file_object(await api.get_configmap(_checked_id(file_id), what=WHAT))


@router.get("/{file_id}/content", response_class=Response)
async def file_content(gw: GatewayDep, api: TenantDep, file_id: str) -> Response:
    await api.get_configmap(_checked_id(file_id), what=WHAT)  # the tenant's? else 404
    data = await gw.store.get(api.tenant.namespace, file_id)
    return Response(data, media_type="application/jsonl")


@router.delete("/{file_id}", response_model=files.FileDeleted)
async def delete_file(gw: GatewayDep, api: TenantDep, file_id: str) -> files.FileDeleted:
    await api.get_configmap(_checked_id(file_id), what=WHAT)
    await api.delete_configmap(file_id, what=WHAT)
    await gw.store.delete(api.tenant.namespace, file_id)
    return files.FileDeleted(id=file_id, deleted=True)
