"""Who a caller is: ServiceAccount tokens map to their namespace, other identities through
the platform's mapping, and RBAC (as the caller) decides; the console script's contract."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import openai
import pytest
import yaml

from .harness import RBAC, Service, gateway_service
from .test_gateway_files import SFT_ROWS, jsonl


async def test_a_mapped_user_acts_in_its_namespace_with_its_own_rbac(
    tmp_path: pathlib.Path,
) -> None:
    async with gateway_service(tmp_path, namespaces={"alice@example.com": "team-a"}) as service:
        alice = service.security.add_user("alice@example.com", ["oidc:ml"])
        bob = service.security.add_user("bob@example.com")
        service.tokens.update(alice=alice, bob=bob)
        client = service.client("alice")
        with pytest.raises(openai.PermissionDeniedError) as caught:  # no RoleBinding yet
            await client.files.list()
        assert 'User "alice@example.com" cannot list resource "configmaps"' in caught.value.message
        service.emulator.create(
            f"{RBAC}/rolebindings",
            {
                "metadata": {"name": "alice"},
                "roleRef": {"apiGroup": RBAC[:-3], "kind": "ClusterRole", "name": "rlhf-tenant"},
                "subjects": [{"kind": "User", "name": "alice@example.com"}],
            },
            "team-a",
        )
        made = await client.files.create(file=("t.jsonl", jsonl(SFT_ROWS)), purpose="fine-tune")
        assert [f.id for f in (await service.client("team-a").files.list()).data] == [made.id]
        with pytest.raises(openai.PermissionDeniedError) as refused:  # no namespace at all
            await service.client("bob").files.list()
        assert refused.value.body["code"] == "no_tenant_namespace"  # type: ignore[index]


async def test_a_read_only_tenant_is_refused_with_the_servers_words(service: Service) -> None:
    service.emulator.create(
        f"{RBAC}/clusterroles",
        {
            "metadata": {"name": "reader"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}],
        },
    )
    service.emulator.create_namespace("team-c")
    service.emulator.create("serviceaccounts", {"metadata": {"name": "viewer"}}, "team-c")
    service.emulator.create(
        f"{RBAC}/rolebindings",
        {
            "metadata": {"name": "viewer"},
            "roleRef": {"apiGroup": RBAC[:-3], "kind": "ClusterRole", "name": "reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "viewer", "namespace": "team-c"}],
        },
        "team-c",
    )
    service.tokens["viewer"] = service.security.service_account_token("team-c", "viewer")
    client = service.client("viewer")
    assert (await client.files.list()).data == []
    with pytest.raises(openai.PermissionDeniedError) as caught:
        await client.files.create(file=("t.jsonl", jsonl(SFT_ROWS)), purpose="fine-tune")
    assert 'cannot create resource "configmaps"' in caught.value.message
    assert service.emulator.list("configmaps", "team-c", label_selector="rlhf.dev/file") == []


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "rlhf_gateway.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def test_the_console_script_prints_its_openapi_and_names_bad_settings(
    tmp_path: pathlib.Path,
) -> None:
    good = tmp_path / "gateway.yaml"
    good.write_text(yaml.safe_dump({"files": {"uri": "s3://bucket-1/files"}}))
    printed = _run("--config", str(good), "--openapi")
    assert printed.returncode == 0, printed.stderr
    assert "/v1/fine_tuning/jobs/{job_id}/events" in json.loads(printed.stdout)["paths"]
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"files": {"uri": "ftp://x"}, "reinforcementAlgorithm": "sft2"}))
    refused = _run("--config", str(bad))
    assert refused.returncode == 2
    assert "reinforcementAlgorithm" in refused.stderr and "s3://" in refused.stderr


async def test_api_server_failures_are_openai_errors_and_leave_nothing(service: Service) -> None:
    client = service.client("team-a")
    training = (
        await client.files.create(file=("t.jsonl", jsonl(SFT_ROWS)), purpose="fine-tune")
    ).id
    service.emulator.faults.add("create", "rlhfjobs.rlhf.dev", code=500)
    with pytest.raises(openai.APIStatusError) as caught:
        await client.fine_tuning.jobs.create(model="tiny-llama-random", training_file=training)
    assert caught.value.status_code == 502
    assert caught.value.body["code"] == "upstream_error"  # type: ignore[index]
    assert service.emulator.list("rlhfjobs.rlhf.dev", "team-a") == []

    await service.emulator.stop()  # the API server is gone: no token can be reviewed
    with pytest.raises(openai.APIStatusError) as down:
        await client.files.list()
    assert down.value.status_code == 503
    assert down.value.body["code"] == "token_review_failed"  # type: ignore[index]
