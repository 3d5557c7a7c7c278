"""`/v1/models`: the platform's catalog and the tenant's fine-tuned models."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from fastapi import APIRouter
from pydantic import BaseModel

from .. import jobview
from ..deps import GatewayDep, TenantDep
from ..errors import ApiError, not_found
from ..jobrequest import GATEWAY_LABEL, GATEWAY_VALUE
from ..settings import CatalogModel

router = APIRouter(prefix="/v1/models", tags=["models"])
WHAT = "model"


class Model(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[Model]


class ModelDeleted(BaseModel):
    id: str
    object: Literal["model"] = "model"
    deleted: bool


def _catalog(entry: CatalogModel) -> Model:
    return Model(id=entry.id, created=entry.created, owned_by=entry.owned_by)


async def _fine_tuned(api: TenantDep) -> list[Model]:
    models = []
    for job in await api.list_jobs(f"{GATEWAY_LABEL}={GATEWAY_VALUE}"):
        model_id = jobview.fine_tuned_model_id(job)
        if model_id is not None:
            finished = jobview.epoch((job.get("status") or {}).get("completionTime"))
            models.append(Model(id=model_id, created=finished or 0, owned_by=api.tenant.name))
    return sorted(models, key=lambda m: (-m.created, m.id))


@router.get("", response_model=ModelList)
async def list_models(gw: GatewayDep, api: TenantDep) -> ModelList:
    return ModelList(data=[_catalog(m) for m in gw.settings.catalog] + await _fine_tuned(api))


async def _fine_tuned_job(api: TenantDep, model_id: str) -> dict[str, Any]:
    job_name = jobview.job_of_model(model_id)
    if job_name is None:
        raise not_found(WHAT, model_id)
    try:
        job = await api.get_job(job_name, what=WHAT, ident=model_id)
    except ApiError as err:
        raise not_found(WHAT, model_id) if err.status == 404 else err from None
    if jobview.fine_tuned_model_id(job) != model_id:
        raise not_found(WHAT, model_id)
    return job


@router.get("/{model_id:path}", response_model=Model)
async def get_model(gw: GatewayDep, api: TenantDep, model_id: str) -> Model:
    entry = gw.settings.catalog_model(model_id)
    if entry is not None:
        return _catalog(entry)
    job = await _fine_tuned_job(api, model_id)
    finished = jobview.epoch((job.get("status") or {}).get("completionTime"))
    return Model(id=model_id, created=finished or 0, owned_by=api.tenant.name)


@router.delete("/{model_id:path}", response_model=ModelDeleted)
async def delete_model(gw: GatewayDep, api: TenantDep, model_id: str) -> ModelDeleted:
    """A fine-tuned model leaves the tenant's list (its job stays; the weights stay on the
    job's storage until the RLHFJob itself is deleted). Catalog models are the platform's."""
    if gw.settings.catalog_model(model_id) is not None:
        raise ApiError(
            403,
            f"'{model_id}' is a platform model: only fine-tuned models can be deleted.",
            code="forbidden",
        )
    await _fine_tuned_job(api, model_id)
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    patch = {"metadata": {"annotations": {jobview.MODEL_DELETED_ANNOTATION: stamp}}}
    await api.patch_job(str(jobview.job_of_model(model_id)), patch)
    return ModelDeleted(id=model_id, deleted=True)
