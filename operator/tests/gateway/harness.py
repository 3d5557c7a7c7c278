"""The gateway as a tenant meets it: uvicorn on loopback in front of the API emulator with
authentication and RBAC on, our CRD, the chart's own gateway and tenant rules, and two
tenants (`team-a`, `team-b`: a ServiceAccount each, bound to the tenant ClusterRole)."""

from __future__ import annotations

import asyncio
import contextlib
import pathlib
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any

import openai
import uvicorn
import yaml

from emulator import Emulator, run_emulator
from emulator.harness import OUR_CRD
from emulator.rbac import Security
from rlhf_gateway.app import create_app
from rlhf_gateway.deps import Gateway
from rlhf_gateway.filestore import open_store
from rlhf_gateway.kube import Kube, load_configuration
from rlhf_gateway.settings import GatewaySettings

REPO = pathlib.Path(__file__).resolve().parents[3]
CHART_FILES = REPO / "helm" / "rlhf-operator" / "files"
RBAC = "rbac.authorization.k8s.io/v1"
TENANTS = ("team-a", "team-b")
TINY = {"hiddenSize": 64, "numLayers": 2, "numHeads": 2, "intermediateSize": 128, "vocabSize": 512}
# The local substrate's kind of catalog: a tiny random-init model that trains on CPUs.
CATALOG: list[dict[str, Any]] = [
    {
        "id": "tiny-llama-random",
        "source": {"randomInit": TINY},
        "spec": {
            "data": {"maxPromptLength": 32, "maxLength": 64},
            "training": {
                "trainBatchSize": 16,
                "microTrainBatchSize": 8,
                "actorLearningRate": 0.01,
                "zeroStage": 0,
                "bf16": False,
            },
            "rollout": {"samplesPerPrompt": 4, "maxNewTokens": 16, "gpuMemoryUtilization": 0.1},
            "placement": {"device": "cpu", "rayResource": "GPU-like"},
            "checkpoint": {"everySteps": 8, "keep": 2},
        },
    }
]


def _rules(name: str) -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = yaml.safe_load((CHART_FILES / name).read_text())
    return rules


@dataclass
class Service:
    emulator: Emulator
    security: Security
    url: str
    tokens: dict[str, str] = field(default_factory=dict)
    clients: list[openai.AsyncOpenAI] = field(default_factory=list)

    def client(self, tenant: str | None, **kwargs: Any) -> openai.AsyncOpenAI:
        """The official SDK as the tenant would use it: only base_url and api_key."""
        key = self.tokens[tenant] if tenant else "not-a-token"
        client = openai.AsyncOpenAI(base_url=f"{self.url}/v1", api_key=key, max_retries=0, **kwargs)
        self.clients.append(client)
        return client


def _bind_cluster_role(emulator: Emulator, name: str, rules: list[dict[str, Any]]) -> None:
    emulator.create(f"{RBAC}/clusterroles", {"metadata": {"name": name}, "rules": rules})


def _add_tenant(emulator: Emulator, security: Security, namespace: str) -> str:
    emulator.create_namespace(namespace)
    emulator.create("serviceaccounts", {"metadata": {"name": "tenant"}}, namespace)
    # The platform's share of uploaded files, claimed in every tenant namespace (pvc:// files).
    emulator.create(
        "persistentvolumeclaims",
        {
            "metadata": {"name": "rlhf-files"},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "resources": {"requests": {"storage": "10Gi"}},
            },
        },
        namespace,
    )
    emulator.create(
        f"{RBAC}/rolebindings",
        {
            "metadata": {"name": "rlhf-tenant", "namespace": namespace},
            "roleRef": {"apiGroup": RBAC[:-3], "kind": "ClusterRole", "name": "rlhf-tenant"},
            "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": namespace}],
        },
        namespace,
    )
    return security.service_account_token(namespace, "tenant")


@contextlib.asynccontextmanager
async def gateway_service(
    tmp_path: pathlib.Path, crds: Iterable[Any] = (OUR_CRD,), **settings: Any
) -> AsyncIterator[Service]:
    async with run_emulator(crds=crds, namespaces=["rlhf-system"]) as emulator:
        security = emulator.enable_security()
        emulator.create("serviceaccounts", {"metadata": {"name": "rlhf-gateway"}}, "rlhf-system")
        _bind_cluster_role(emulator, "rlhf-gateway", _rules("gateway-rules.yaml"))
        emulator.create(
            f"{RBAC}/clusterrolebindings",
            {
                "metadata": {"name": "rlhf-gateway"},
                "roleRef": {"apiGroup": RBAC[:-3], "kind": "ClusterRole", "name": "rlhf-gateway"},
                "subjects": [
                    {"kind": "ServiceAccount", "name": "rlhf-gateway", "namespace": "rlhf-system"}
                ],
            },
        )
        _bind_cluster_role(emulator, "rlhf-tenant", _rules("gateway-tenant-rules.yaml"))
        tokens = {ns: _add_tenant(emulator, security, ns) for ns in TENANTS}
        kubeconfig = emulator.write_kubeconfig(
            tmp_path / "gateway-kubeconfig",
            token=security.service_account_token("rlhf-system", "rlhf-gateway"),
        )
        config = GatewaySettings.model_validate(
            {
                "catalog": CATALOG,
                "files": {"uri": "pvc://rlhf-files/uploads", "mountPath": str(tmp_path / "files")},
                **settings,
            }
        )
        parts = Gateway(config, Kube(load_configuration(str(kubeconfig))), open_store(config.files))
        server = uvicorn.Server(
            uvicorn.Config(create_app(parts), host="127.0.0.1", port=0, log_level="warning")
        )
        task = asyncio.create_task(server.serve())
        try:
            while not server.started:
                if task.done():
                    task.result()
                await asyncio.sleep(0.02)
            port = server.servers[0].sockets[0].getsockname()[1]
            service = Service(emulator, security, f"http://127.0.0.1:{port}", tokens)
            try:
                yield service
            finally:
                for client in service.clients:
                    await client.close()
        finally:
            server.should_exit = True
            await task
