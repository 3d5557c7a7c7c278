"""The ASGI application: routers, error envelope, the OpenAPI document at /openapi.json."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError

from .console import routes as console
from .deps import Gateway
from .errors import ApiError, handle_api_error, handle_unexpected, handle_validation_error
from .routes import files, graders, jobs, models, progress

TITLE = "RLHF gateway"
VERSION = "0.1.0"
DESCRIPTION = (
    "OpenAI's fine-tuning API over RLHFJobs: authenticate with a Kubernetes token the cluster "
    "trusts; every call acts as you, in your namespace."
)


def create_app(parts: Gateway) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        await parts.kube.close()

    app = FastAPI(
        title=TITLE,
        version=VERSION,
        description=DESCRIPTION,
        openapi_url="/openapi.json",
        lifespan=lifespan,
    )
    app.state.gateway = parts
    app.add_exception_handler(ApiError, handle_api_error)
    app.add_exception_handler(RequestValidationError, handle_validation_error)
    app.add_exception_handler(Exception, handle_unexpected)
    for module in (files, jobs, progress, models, graders, console):
        app.include_router(module.router)

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app
