"""TokenReview, TokenRequest and impersonation, as kube-apiserver does them (with `Security` on).

What an authenticating front end needs (the RLHF gateway): it reviews a caller's bearer token
(`POST /apis/authentication.k8s.io/v1/tokenreviews`, which needs `create tokenreviews`) and
then makes every request as that caller with `Impersonate-User` / `Impersonate-Group`
headers, which need `impersonate` on `users` / `groups` (or on the `serviceaccounts` object
for a ServiceAccount's user) and turn the request's identity into the impersonated one: the
caller's own RBAC then decides. `kubectl create token SA` is a TokenRequest
(`serviceaccounts/<name>/token`); it answers the account's token (one per account here, no
expiry: the emulator has no clock-bound tokens).

Not emulated: `Impersonate-Uid`, `Impersonate-Extra-*`, token audiences and expiry.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import errors
from .rbac import AUTHENTICATED, Attributes, Identity, Security

JSON = dict[str, Any]
AUTH_GROUP = "authentication.k8s.io"
SA_PREFIX = "system:serviceaccount:"


def impersonated(
    security: Security | None, identity: Identity | None, headers: Mapping[str, str]
) -> Identity | None:
    """The identity a request acts as: its own, or the one its Impersonate-* headers name
    once the caller was allowed to impersonate each of them (403 otherwise)."""
    user = headers.get("Impersonate-User")
    groups = tuple(v for k, v in headers.items() if k.lower() == "impersonate-group")
    if security is None or identity is None or (user is None and not groups):
        return identity
    if not user:
        raise errors.bad_request("requested impersonation of groups without impersonating a user")
    if user.startswith(SA_PREFIX) and user.count(":") == 3:
        namespace, name = user[len(SA_PREFIX) :].split(":")
        checks = [Attributes("impersonate", "", "serviceaccounts", namespace, name)]
        if not groups:  # the real server gives an impersonated account its groups
            groups = ("system:serviceaccounts", f"system:serviceaccounts:{namespace}")
    else:
        checks = [Attributes("impersonate", "", "users", None, user)]
    checks += [Attributes("impersonate", "", "groups", None, group) for group in groups]
    for attrs in checks:
        security.authorize(identity, attrs)
    return Identity(user, (*groups, AUTHENTICATED) if AUTHENTICATED not in groups else groups)


def token_review(security: Security | None, body: Any) -> JSON:
    """The server's answer to a TokenReview: who the token is, or `authenticated: false`."""
    token = ((body or {}).get("spec") or {}).get("token") if isinstance(body, dict) else None
    if not token:
        raise errors.bad_request("TokenReview: spec.token: Required value")
    status: JSON
    if security is None:
        raise errors.ApiError(
            503, "ServiceUnavailable", "TokenReview needs authentication (enable_security())"
        )
    try:
        who = security.authenticate(f"Bearer {token}")
        status = {
            "authenticated": True,
            "user": {"username": who.user, "groups": list(who.groups)},
        }
    except errors.ApiError:
        status = {"authenticated": False, "user": {}, "error": "invalid bearer token"}
    return {
        "apiVersion": f"{AUTH_GROUP}/v1",
        "kind": "TokenReview",
        "metadata": {"creationTimestamp": None},
        "spec": {"token": token},
        "status": status,
    }


def token_request(security: Security | None, namespace: str, name: str, body: Any) -> JSON:
    """`kubectl create token NAME`: the ServiceAccount's token (404 if it does not exist)."""
    if security is None:
        raise errors.ApiError(
            503, "ServiceUnavailable", "TokenRequest needs authentication (enable_security())"
        )
    try:
        token = security.service_account_token(namespace, name)
    except KeyError:
        raise errors.not_found("serviceaccounts", name) from None
    spec = (body or {}).get("spec") if isinstance(body, dict) else None
    return {
        "apiVersion": f"{AUTH_GROUP}/v1",
        "kind": "TokenRequest",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec or {},
        "status": {"token": token, "expirationTimestamp": "2099-01-01T00:00:00Z"},
    }
