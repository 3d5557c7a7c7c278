"""The Kubernetes calls of one request, made as its tenant in the tenant's namespace, with the
API server's refusals turned into OpenAI's errors (a quota is a 429, RBAC a 403, a name that
is not in the tenant's namespace a 404: another tenant's objects are simply not there)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .errors import ApiError
from .kube import JSON, MERGE_PATCH, Kube, KubeError
from .tenancy import Tenant

RLHFJOBS = "/apis/rlhf.dev/v1alpha1"


def translate(err: KubeError, *, what: str, ident: str, param: str | None = None) -> ApiError:
    """An API server refusal as the gateway answers it (pure)."""
    if err.code == 404:
        return ApiError(404, f"No {what} found with id '{ident}'.", param=param, code="not_found")
    if err.code == 403 and "exceeded quota" in err.message:
        return ApiError(429, f"Quota exceeded: {err.message}", code="quota_exceeded")
    if err.code == 403:
        return ApiError(403, f"Not allowed: {err.message}", code="forbidden")
    if err.code == 409:
        return ApiError(409, f"Conflict: {err.message}", param=param, code="conflict")
    if err.code in (400, 422):
        return ApiError(400, f"Refused by the cluster: {err.message}", param=param)
    if err.code == 429:
        return ApiError(429, f"The cluster is busy: {err.message}", code="rate_limited")
    return ApiError(502, f"The cluster answered {err.code}: {err.message}", code="upstream_error")


@dataclass(frozen=True)
class TenantApi:
    kube: Kube
    tenant: Tenant

    async def _call(
        self,
        method: str,
        path: str,
        *,
        what: str,
        ident: str,
        body: Any = None,
        params: Mapping[str, str] | None = None,
        content_type: str | None = None,
        param: str | None = None,
    ) -> JSON:
        try:
            return await self.kube.call(
                method,
                path,
                as_=self.tenant.identity,
                body=body,
                params=params,
                content_type=content_type,
            )
        except KubeError as err:
            raise translate(err, what=what, ident=ident, param=param) from None

    def _path(self, base: str, plural: str, name: str | None = None) -> str:
        path = f"{base}/namespaces/{self.tenant.namespace}/{plural}"
        return f"{path}/{name}" if name else path

    # --- ConfigMaps (file records) ----------------------------------------------------------

    async def create_configmap(self, body: JSON, *, what: str, ident: str) -> JSON:
        return await self._call(
            "POST", self._path("/api/v1", "configmaps"), what=what, ident=ident, body=body
        )

    async def get_configmap(self, name: str, *, what: str, param: str | None = None) -> JSON:
        path = self._path("/api/v1", "configmaps", name)
        return await self._call("GET", path, what=what, ident=name, param=param)

    async def list_configmaps(self, selector: str, *, what: str) -> list[JSON]:
        path = self._path("/api/v1", "configmaps")
        answer = await self._call(
            "GET", path, what=what, ident="", params={"labelSelector": selector}
        )
        return list(answer.get("items") or [])

    async def delete_configmap(self, name: str, *, what: str) -> None:
        await self._call("DELETE", self._path("/api/v1", "configmaps", name), what=what, ident=name)

    # --- RLHFJobs ---------------------------------------------------------------------------

    async def create_job(self, body: JSON, *, ident: str) -> JSON:
        path = self._path(RLHFJOBS, "rlhfjobs")
        return await self._call("POST", path, what="fine-tuning job", ident=ident, body=body)

    async def get_job(self, name: str, *, what: str = "fine-tuning job", ident: str = "") -> JSON:
        path = self._path(RLHFJOBS, "rlhfjobs", name)
        return await self._call("GET", path, what=what, ident=ident or name)

    async def list_jobs(self, selector: str) -> list[JSON]:
        path = self._path(RLHFJOBS, "rlhfjobs")
        answer = await self._call(
            "GET", path, what="fine-tuning job", ident="", params={"labelSelector": selector}
        )
        return list(answer.get("items") or [])

    async def patch_job(self, name: str, patch: JSON) -> JSON:
        path = self._path(RLHFJOBS, "rlhfjobs", name)
        return await self._call(
            "PATCH", path, what="fine-tuning job", ident=name, body=patch, content_type=MERGE_PATCH
        )

    async def delete_job(self, name: str) -> None:
        path = self._path(RLHFJOBS, "rlhfjobs", name)
        await self._call("DELETE", path, what="fine-tuning job", ident=name)

    async def job_events(self, name: str) -> list[JSON]:
        """Kubernetes Events about the RLHFJob (the operator's and the cluster's)."""
        path = self._path("/api/v1", "events")
        answer = await self._call(
            "GET",
            path,
            what="event",
            ident=name,
            params={"fieldSelector": f"involvedObject.name={name},involvedObject.kind=RLHFJob"},
        )
        return list(answer.get("items") or [])
