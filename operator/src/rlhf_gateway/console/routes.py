"""`/console` (the page and its script) and `/v1/console/jobs` (the rows it lists)."""

from __future__ import annotations

from importlib import resources
from typing import Literal

from fastapi import APIRouter
from fastapi.responses import HTMLResponse, Response
from pydantic import BaseModel

from ..deps import TenantDep
from ..jobrequest import GATEWAY_LABEL, GATEWAY_VALUE
from ..routes.jobs import tenant_job
from .rows import ConsoleJob, console_job

router = APIRouter(tags=["console"])
_STATIC = resources.files(__package__) / "static"


class ConsoleJobList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ConsoleJob]


@router.get("/console", response_class=HTMLResponse, include_in_schema=False)
async def page() -> HTMLResponse:
    """The page itself holds no data: it asks for the tenant's token and calls the API."""
    return HTMLResponse((_STATIC / "index.html").read_text(encoding="utf-8"))


@router.get("/console/app.js", include_in_schema=False)
async def script() -> Response:
    body = (_STATIC / "app.js").read_text(encoding="utf-8")
    return Response(body, media_type="text/javascript")


@router.get("/v1/console/jobs", response_model=ConsoleJobList)
async def console_jobs(api: TenantDep) -> ConsoleJobList:
    items = await api.list_jobs(f"{GATEWAY_LABEL}={GATEWAY_VALUE}")
    rows = sorted((console_job(i) for i in items), key=lambda r: (-r.created_at, r.id))
    return ConsoleJobList(data=rows)


@router.get("/v1/console/jobs/{job_id}", response_model=ConsoleJob)
async def console_job_row(api: TenantDep, job_id: str) -> ConsoleJob:
    return console_job(await tenant_job(api, job_id))
