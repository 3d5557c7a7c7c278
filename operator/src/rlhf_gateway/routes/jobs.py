"""`/v1/fine_tuning/jobs`: create, list, get, cancel, pause, resume."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel

from .. import files, jobview
from ..deps import Gateway, GatewayDep, TenantDep
from ..errors import ApiError, bad_request, conflict
from ..jobrequest import (
    GATEWAY_LABEL,
    GATEWAY_VALUE,
    CreateJobRequest,
    FileRef,
    check_manifest,
    manifest,
    request_problems,
    translate,
)
from ..jobview import FineTuningJob, job_object, job_status
from ..settings import CatalogModel
from ..tenantapi import TenantApi
from .graders import reward_of

router = APIRouter(prefix="/v1/fine_tuning/jobs", tags=["fine-tuning"])


class JobList(BaseModel):
    object: Literal["list"] = "list"
    data: list[FineTuningJob]
    has_more: bool


def new_job_id() -> str:
    """`ftjob-` + 24 hex digits: the RLHFJob's name (a DNS-1035 label of 30 characters)."""
    return f"{jobview.JOB_PREFIX}{secrets.token_hex(12)}"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def resolve_model(
    gw: Gateway, api: TenantApi, model: str
) -> tuple[CatalogModel, dict[str, Any]]:
    """The catalog entry a job starts from and the actor's model source: the catalog's, or
    `fromJob` for one of the tenant's fine-tuned models."""
    job_name = jobview.job_of_model(model)
    entry = gw.settings.catalog_model(jobview.base_model_of(model))
    unknown = bad_request(
        f"model: '{model}' is not available for fine-tuning or does not exist "
        "(GET /v1/models lists the ones that are)",
        "model",
        "model_not_found",
    )
    if entry is None:
        raise unknown
    if job_name is None:
        return entry, entry.source.to_manifest()
    try:
        job = await api.get_job(job_name)
    except ApiError as err:
        if err.status == 404:
            raise unknown from None
        raise
    if jobview.fine_tuned_model_id(job) != model:
        raise unknown
    return entry, {"fromJob": job_name}


async def file_ref(api: TenantApi, file_id: str, param: str, method: str) -> FileRef:
    missing = bad_request(f"{param}: no file with id '{file_id}'", param, "file_not_found")
    if not files.is_file_id(file_id):
        raise missing
    try:
        record = await api.get_configmap(file_id, what="file", param=param)
    except ApiError as err:
        if err.status == 404:
            raise missing from None
        raise
    fmt = files.file_format(record)
    if fmt != method:  # a file's format is named after the method its rows serve
        raise bad_request(
            f"{param}: '{file_id}' holds {fmt} rows; a {method} job needs {method} rows",
            param,
            "invalid_file_format",
        )
    return FileRef(file_id, files.file_location(record), fmt)


@router.post("", response_model=FineTuningJob)
async def create_job(gw: GatewayDep, api: TenantDep, req: CreateJobRequest) -> FineTuningJob:
    request_problems(req)
    method = req.method_type()
    base, actor = await resolve_model(gw, api, req.model)
    training = await file_ref(api, req.training_file, "training_file", method)
    validation = (
        await file_ref(api, req.validation_file, "validation_file", method)
        if req.validation_file
        else None
    )
    reward = reward_of(gw.settings, req) if method == "reinforcement" else None
    plan = translate(
        req,
        base=base,
        actor=actor,
        training=training,
        validation=validation,
        rl_algorithm=gw.settings.reinforcement_algorithm,
        reward=reward,
        object_store=(
            gw.settings.files.object_store.to_manifest() if gw.settings.files.object_store else None
        ),
    )
    hp, _ = req.hyper()
    name = new_job_id()
    doc = manifest(name, req, plan.spec, hp.model_dump(exclude_none=True))
    check_manifest(doc, plan, req.model)  # 400 before anything exists
    return job_object(await api.create_job(doc, ident=name))


def _metadata_filter(request: Request) -> dict[str, str]:
    return {
        key[len("metadata[") : -1]: value
        for key, value in request.query_params.items()
        if key.startswith("metadata[") and key.endswith("]")
    }


@router.get("", response_model=JobList)
async def list_jobs(
    request: Request,
    api: TenantDep,
    gw: GatewayDep,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1)] = 20,
) -> JobList:
    wanted = _metadata_filter(request)
    items = await api.list_jobs(f"{GATEWAY_LABEL}={GATEWAY_VALUE}")
    jobs = sorted((job_object(i) for i in items), key=lambda j: (-j.created_at, j.id))
    jobs = [j for j in jobs if all((j.metadata or {}).get(k) == v for k, v in wanted.items())]
    if after is not None:
        ids = [j.id for j in jobs]
        jobs = jobs[ids.index(after) + 1 :] if after in ids else []
    limit = min(limit, gw.settings.max_jobs_listed)
    return JobList(data=jobs[:limit], has_more=len(jobs) > limit)


async def tenant_job(api: TenantApi, job_id: str) -> dict[str, Any]:
    if not job_id.startswith(jobview.JOB_PREFIX):  # never another kind of RLHFJob
        raise ApiError(404, f"No fine-tuning job found with id '{job_id}'.", code="not_found")
    job = await api.get_job(job_id)
    if (job["metadata"].get("labels") or {}).get(GATEWAY_LABEL) != GATEWAY_VALUE:
        raise ApiError(404, f"No fine-tuning job found with id '{job_id}'.", code="not_found")
    return job


@router.get("/{job_id}", response_model=FineTuningJob)
async def get_job(api: TenantDep, job_id: str) -> FineTuningJob:
    return job_object(await tenant_job(api, job_id))


@router.post("/{job_id}/cancel", response_model=FineTuningJob)
async def cancel_job(api: TenantDep, job_id: str) -> FineTuningJob:
    job = await tenant_job(api, job_id)
    state = job_status(job)
    if state in jobview.FINISHED:
        raise conflict(f"Job {job_id} is already {state}: it cannot be cancelled.")
    # Suspending frees the job's GPUs at once; the annotation makes it final.
    patch = {
        "metadata": {"annotations": {jobview.CANCELLED_ANNOTATION: _now()}},
        "spec": {"runPolicy": {"suspend": True}},
    }
    return job_object(await api.patch_job(job_id, patch))


@router.post("/{job_id}/pause", response_model=FineTuningJob)
async def pause_job(api: TenantDep, job_id: str) -> FineTuningJob:
    job = await tenant_job(api, job_id)
    state = job_status(job)
    if state in jobview.FINISHED or state == "paused":
        raise conflict(f"Job {job_id} is {state}: only a queued or running job can be paused.")
    return job_object(await api.patch_job(job_id, {"spec": {"runPolicy": {"suspend": True}}}))


@router.post("/{job_id}/resume", response_model=FineTuningJob)
async def resume_job(api: TenantDep, job_id: str) -> FineTuningJob:
    job = await tenant_job(api, job_id)
    state = job_status(job)
    if state != "paused":
        raise conflict(f"Job {job_id} is {state}: only a paused job can be resumed.")
    return job_object(await api.patch_job(job_id, {"spec": {"runPolicy": {"suspend": False}}}))
