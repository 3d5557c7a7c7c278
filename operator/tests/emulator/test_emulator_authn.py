"""TokenReview, TokenRequest and impersonation (authn.py): what the RLHF gateway needs."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest

from emulator import Emulator, run_emulator
from emulator.rbac import Security
from emulator.testkit import Api

RBAC = "rbac.authorization.k8s.io/v1"
REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"


@pytest.fixture
async def secured() -> AsyncIterator[tuple[Emulator, Security]]:
    async with run_emulator(namespaces=["default", "tenant"]) as emulator:
        security = emulator.enable_security()
        for ns, name in (("default", "gateway"), ("tenant", "alice")):
            emulator.create("serviceaccounts", {"metadata": {"name": name}}, ns)
        emulator.create(
            f"{RBAC}/clusterroles",
            {
                "metadata": {"name": "gateway"},
                "rules": [
                    {
                        "apiGroups": ["authentication.k8s.io"],
                        "resources": ["tokenreviews"],
                        "verbs": ["create"],
                    },
                    {
                        "apiGroups": [""],
                        "resources": ["serviceaccounts", "groups"],
                        "verbs": ["impersonate"],
                    },
                ],
            },
        )
        emulator.create(
            f"{RBAC}/clusterrolebindings",
            {
                "metadata": {"name": "gateway"},
                "roleRef": {"apiGroup": RBAC[:-3], "kind": "ClusterRole", "name": "gateway"},
                "subjects": [{"kind": "ServiceAccount", "name": "gateway", "namespace": "default"}],
            },
        )
        yield emulator, security


def client(emulator: Emulator, token: str, **headers: str) -> Api:
    return Api(
        aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}", **headers}),
        emulator.url,
    )


async def test_token_review_says_who_a_token_is(secured: tuple[Emulator, Security]) -> None:
    emulator, security = secured
    api = client(emulator, security.service_account_token("default", "gateway"))
    alice = security.service_account_token("tenant", "alice")
    try:
        known = await api.post(REVIEWS, {"kind": "TokenReview", "spec": {"token": alice}})
        assert known.status == 201
        assert known.body["status"]["authenticated"] is True
        assert known.body["status"]["user"]["username"] == "system:serviceaccount:tenant:alice"
        assert "system:serviceaccounts:tenant" in known.body["status"]["user"]["groups"]
        forged = await api.post(REVIEWS, {"spec": {"token": "forged"}})
        assert forged.body["status"]["authenticated"] is False
    finally:
        await api.session.close()
    denied = client(emulator, alice)  # a tenant may not review tokens
    try:
        assert (await denied.post(REVIEWS, {"spec": {"token": alice}})).status == 403
    finally:
        await denied.session.close()


async def test_impersonation_acts_with_the_impersonated_rbac(
    secured: tuple[Emulator, Security],
) -> None:
    emulator, security = secured
    gateway = security.service_account_token("default", "gateway")
    as_alice = client(
        emulator, gateway, **{"Impersonate-User": "system:serviceaccount:tenant:alice"}
    )
    try:
        denied = await as_alice.get("/api/v1/namespaces/tenant/configmaps")
        assert denied.status == 403
        assert 'User "system:serviceaccount:tenant:alice" cannot list' in denied.body["message"]
        emulator.create(
            f"{RBAC}/roles",
            {
                "metadata": {"name": "cm"},
                "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}],
            },
            "tenant",
        )
        emulator.create(
            f"{RBAC}/rolebindings",
            {
                "metadata": {"name": "cm"},
                "roleRef": {"apiGroup": RBAC[:-3], "kind": "Role", "name": "cm"},
                "subjects": [{"kind": "ServiceAccount", "name": "alice", "namespace": "tenant"}],
            },
            "tenant",
        )
        assert (await as_alice.get("/api/v1/namespaces/tenant/configmaps")).status == 200
    finally:
        await as_alice.session.close()
    # Impersonating needs the right: a plain user may not, nor may the gateway impersonate
    # a user outside what its role names.
    alice = security.service_account_token("tenant", "alice")
    for token, user in ((alice, "system:serviceaccount:default:gateway"), (gateway, "admin")):
        api = client(emulator, token, **{"Impersonate-User": user})
        try:
            refused = await api.get("/api/v1/namespaces/tenant/configmaps")
            assert refused.status == 403 and "cannot impersonate" in refused.body["message"]
        finally:
            await api.session.close()


async def test_token_request_mints_the_accounts_token(secured: tuple[Emulator, Security]) -> None:
    emulator, security = secured
    admin = client(emulator, security.add_user("admin", ["system:masters"]))
    try:
        path = "/api/v1/namespaces/tenant/serviceaccounts/alice/token"
        answer = await admin.post(path, {"kind": "TokenRequest", "spec": {}})
        assert answer.status == 201
        assert answer.body["status"]["token"] == security.service_account_token("tenant", "alice")
        missing = await admin.post("/api/v1/namespaces/tenant/serviceaccounts/bob/token", {})
        assert missing.status == 404
    finally:
        await admin.session.close()
