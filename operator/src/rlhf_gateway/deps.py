"""What every route needs, as FastAPI dependencies: the gateway's parts and the caller."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from .filestore import FileStore
from .kube import Kube
from .settings import GatewaySettings
from .tenancy import authenticate
from .tenantapi import TenantApi

# Shown in /openapi.json as the bearer scheme; missing tokens are answered by `authenticate`
# with OpenAI's 401 envelope rather than FastAPI's.
_bearer = HTTPBearer(auto_error=False, description="A Kubernetes token the cluster trusts.")


@dataclass(frozen=True)
class Gateway:
    settings: GatewaySettings
    kube: Kube
    store: FileStore


def gateway(request: Request) -> Gateway:
    parts: Gateway = request.app.state.gateway
    return parts


async def tenant_api(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> TenantApi:
    parts = gateway(request)
    header = f"Bearer {credentials.credentials}" if credentials else None
    tenant = await authenticate(parts.kube, header, parts.settings.namespaces)
    return TenantApi(parts.kube, tenant)


GatewayDep = Annotated[Gateway, Depends(gateway)]
TenantDep = Annotated[TenantApi, Depends(tenant_api)]
