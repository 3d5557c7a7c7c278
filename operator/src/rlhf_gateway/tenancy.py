"""Who is calling: the bearer token, reviewed by the API server (TokenReview), and the
namespace that is the tenant's (its ServiceAccount's, else the configured mapping).

The gateway trusts nothing of its own: whatever the cluster accepts as a token (ServiceAccount
tokens, OIDC, ...) is a tenant, and every later call impersonates it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .errors import ApiError
from .kube import Identity, Kube, KubeError

SA_PREFIX = "system:serviceaccount:"


@dataclass(frozen=True)
class Tenant:
    identity: Identity
    namespace: str

    @property
    def name(self) -> str:
        """How the tenant appears in fine-tuned model ids: its namespace."""
        return self.namespace


def unauthorized(message: str) -> ApiError:
    return ApiError(401, message, code="invalid_api_key")


def bearer_token(authorization: str | None) -> str:
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise unauthorized(
            "You didn't provide an API key. Send your Kubernetes token as "
            "'Authorization: Bearer TOKEN' (the openai SDK's api_key)."
        )
    return token.strip()


def tenant_from_review(review: Mapping[str, Any], namespaces: Mapping[str, str]) -> Tenant:
    """The tenant of a TokenReview's answer (pure): 401 when not authenticated, 403 when the
    identity has no namespace."""
    status = review.get("status") or {}
    if not status.get("authenticated"):
        raise unauthorized("Incorrect API key provided: the cluster did not accept the token.")
    user = (status.get("user") or {}).get("username") or ""
    groups = tuple((status.get("user") or {}).get("groups") or ())
    identity = Identity(user, groups)
    if user.startswith(SA_PREFIX) and user.count(":") == 3:
        return Tenant(identity, user[len(SA_PREFIX) :].split(":")[0])
    if user in namespaces:
        return Tenant(identity, namespaces[user])
    raise ApiError(
        403,
        f"The identity '{user}' has no tenant namespace: use a ServiceAccount token, or ask "
        "the platform team to map the user to a namespace (gateway.namespaces).",
        code="no_tenant_namespace",
    )


async def authenticate(
    kube: Kube, authorization: str | None, namespaces: Mapping[str, str]
) -> Tenant:
    token = bearer_token(authorization)
    try:
        review = await kube.review_token(token)
    except KubeError as err:
        raise ApiError(
            503, f"The token could not be reviewed: {err.message}", code="token_review_failed"
        ) from None
    return tenant_from_review(review, namespaces)
