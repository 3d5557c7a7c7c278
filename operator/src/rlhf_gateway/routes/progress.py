"""`/v1/fine_tuning/jobs/{id}/events`, `/checkpoints` and `/metrics`."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel

from ..deps import TenantDep
from ..progress import Checkpoint, JobEvent, history_of, job_checkpoints, job_events, page
from .jobs import tenant_job

router = APIRouter(prefix="/v1/fine_tuning/jobs", tags=["fine-tuning"])


class EventList(BaseModel):
    object: Literal["list"] = "list"
    data: list[JobEvent]
    has_more: bool


class CheckpointList(BaseModel):
    object: Literal["list"] = "list"
    data: list[Checkpoint]
    has_more: bool
    first_id: str | None = None
    last_id: str | None = None


class Metrics(BaseModel):
    """metric -> [[step, value], ...] oldest first (the trainer's bounded history)."""

    object: Literal["fine_tuning.job.metrics"] = "fine_tuning.job.metrics"
    job_id: str
    metrics: dict[str, list[tuple[int, float]]]


@router.get("/{job_id}/events", response_model=EventList)
async def list_events(
    api: TenantDep,
    job_id: str,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 20,
) -> EventList:
    job = await tenant_job(api, job_id)
    events = job_events(job, await api.job_events(job_id), history_of(job))
    data, more = page(events, after, limit)
    return EventList(data=data, has_more=more)


@router.get("/{job_id}/checkpoints", response_model=CheckpointList)
async def list_checkpoints(
    api: TenantDep,
    job_id: str,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 10,
) -> CheckpointList:
    job = await tenant_job(api, job_id)
    data, more = page(job_checkpoints(job, history_of(job)), after, limit)
    return CheckpointList(
        data=data,
        has_more=more,
        first_id=data[0].id if data else None,
        last_id=data[-1].id if data else None,
    )


@router.get("/{job_id}/metrics", response_model=Metrics)
async def job_metrics(api: TenantDep, job_id: str) -> Metrics:
    job = await tenant_job(api, job_id)
    return Metrics(job_id=job_id, metrics=history_of(job))
