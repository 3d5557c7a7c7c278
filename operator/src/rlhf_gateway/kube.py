"""The gateway's only way to the Kubernetes API: async HTTP (aiohttp), as the tenant.

Connection settings come from the `kubernetes` client's loaders (in-cluster ServiceAccount,
else `KUBECONFIG`), so that every way a kubeconfig names a server, a CA, a token or a client
certificate works as it does for kubectl. Every call but a TokenReview carries
`Impersonate-User` / `Impersonate-Group`: the API server then authorises it as the tenant,
whose RBAC (and quotas) are the only permissions there are.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from multidict import CIMultiDict

JSON = dict[str, Any]
MERGE_PATCH = "application/merge-patch+json"


@dataclass(frozen=True)
class Identity:
    """Who a request acts as (from a TokenReview)."""

    user: str
    groups: tuple[str, ...] = ()


class KubeError(Exception):
    """A non-2xx answer of the API server, with its `Status` fields."""

    def __init__(self, code: int, reason: str, message: str, details: JSON | None = None) -> None:
        super().__init__(f"{code} {reason}: {message}")
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details or {}


def load_configuration(kubeconfig: str | None = None) -> k8s_client.Configuration:
    """In-cluster when the pod has a ServiceAccount token (and no kubeconfig is named), else
    the kubeconfig (`KUBECONFIG` or ~/.kube/config)."""
    configuration = k8s_client.Configuration()
    if kubeconfig is None:
        try:
            k8s_config.load_incluster_config(client_configuration=configuration)
            return configuration
        except k8s_config.ConfigException:
            pass
    k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    return configuration


def _ssl_context(configuration: k8s_client.Configuration) -> ssl.SSLContext | bool:
    if not configuration.host.startswith("https"):
        return False
    if not configuration.verify_ssl:
        return False
    context = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, configuration.key_file)
    return context


class Kube:
    """A small async client of the API server's REST paths."""

    def __init__(self, configuration: k8s_client.Configuration) -> None:
        self._configuration = configuration
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _headers(self, as_: Identity | None, content_type: str | None) -> CIMultiDict[str]:
        headers: CIMultiDict[str] = CIMultiDict({"Accept": "application/json"})
        # The loader's refresh hook re-reads a rotated in-cluster token here.
        auth = self._configuration.get_api_key_with_prefix("authorization")
        if auth:
            headers["Authorization"] = auth
        if content_type:
            headers["Content-Type"] = content_type
        if as_ is not None:
            headers["Impersonate-User"] = as_.user
            for group in as_.groups:
                headers.add("Impersonate-Group", group)
        return headers

    async def call(
        self,
        method: str,
        path: str,
        *,
        as_: Identity | None,
        body: Any = None,
        params: Mapping[str, str] | None = None,
        content_type: str | None = None,
    ) -> JSON:
        if self._session is None:
            connector = aiohttp.TCPConnector(ssl=_ssl_context(self._configuration))
            self._session = aiohttp.ClientSession(connector=connector)
        data = None if body is None else json.dumps(body)
        if data is not None and content_type is None:
            content_type = "application/json"
        try:
            async with self._session.request(
                method,
                self._configuration.host.rstrip("/") + path,
                data=data,
                params=dict(params or {}),
                headers=self._headers(as_, content_type),
                timeout=aiohttp.ClientTimeout(total=30),
            ) as response:
                status, reason, text = response.status, response.reason, await response.text()
        except (aiohttp.ClientError, TimeoutError) as err:
            # No answer at all: the API server is down or unreachable (never the tenant's fault).
            raise KubeError(
                503, "ServiceUnavailable", f"the API server did not answer: {err!r}"
            ) from err
        try:
            answer = json.loads(text) if text else {}
        except ValueError:
            answer = {"message": text}
        if status >= 400:
            raise KubeError(
                status,
                str(answer.get("reason", reason or "")),
                str(answer.get("message", text)),
                answer.get("details"),
            )
        result: JSON = answer
        return result

    # --- the calls the gateway makes --------------------------------------------------------

    async def review_token(self, token: str) -> JSON:
        """A TokenReview, as the gateway itself (the one call not impersonated)."""
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token},
        }
        return await self.call(
            "POST", "/apis/authentication.k8s.io/v1/tokenreviews", as_=None, body=body
        )
