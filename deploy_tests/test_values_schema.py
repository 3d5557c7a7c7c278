"""values.schema.json rejects bad values with a message that names the field, through Helm itself
(`helm template` validates values against the schema before rendering)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from helm_tool import CHART, CommandFailed, Helm

BAD_VALUES: dict[str, tuple[dict[str, Any], str]] = {
    "unknown-top-level-key": ({"replicas": 2}, "additional properties 'replicas' not allowed"),
    "typo-in-nested-key": ({"image": {"tags": "v1"}}, "additional properties 'tags' not allowed"),
    "two-replicas-without-peering": ({"replicaCount": 2}, "/peering/enabled"),
    "negative-replicas": ({"replicaCount": -1}, "/replicaCount"),
    "namespace-not-a-dns-label": ({"watchNamespaces": ["Team_A"]}, "/watchNamespaces/0"),
    "namespace-listed-twice": ({"watchNamespaces": ["a", "a"]}, "/watchNamespaces"),
    "namespaces-as-a-string": ({"watchNamespaces": "team-a"}, "/watchNamespaces"),
    "unknown-log-level": ({"logLevel": "verbose"}, "/logLevel"),
    "pull-policy-enum": ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
    "digest-not-sha256": ({"image": {"digest": "md5:abc"}}, "/image/digest"),
    "tag-with-space": ({"image": {"tag": "v1 beta"}}, "/image/tag"),
    "metrics-port-zero": ({"metrics": {"port": 0}}, "/metrics/port"),
    "health-port-too-big": ({"health": {"port": 70000}}, "/health/port"),
    "port-as-string": ({"metrics": {"port": "8080"}}, "/metrics/port"),
    "servicemonitor-without-service": (
        {"metrics": {"serviceMonitor": {"enabled": True}}},
        "/metrics/service/enabled",
    ),
    "scrape-interval-not-a-duration": (
        {"metrics": {"serviceMonitor": {"interval": "often"}}},
        "/metrics/serviceMonitor/interval",
    ),
    "peering-enabled-as-string": ({"peering": {"enabled": "yes"}}, "/peering/enabled"),
    "peering-name-uppercase": ({"peering": {"name": "RLHF"}}, "/peering/name"),
    "kuberay-enabled-as-string": ({"kuberay": {"enabled": "true"}}, "/kuberay/enabled"),
    "resource-quantity-garbage": (
        {"resources": {"requests": {"cpu": "lots"}}},
        "/resources/requests/cpu",
    ),
    "pull-secret-without-name": ({"imagePullSecrets": [{"secret": "x"}]}, "/imagePullSecrets/0"),
    "extra-env-overrides-contract": (
        {"extraEnv": [{"name": "RLHF_OPERATOR_NAMESPACES", "value": "x"}]},
        "/extraEnv/0/name",
    ),
    "node-selector-non-string": ({"nodeSelector": {"gpu": True}}, "/nodeSelector/gpu"),
    "policy-image-prefix-with-comma": (
        {"policy": {"allowedImagePrefixes": ["a,b"]}},
        "/policy/allowedImagePrefixes/0",
    ),
    "policy-priority-class-uppercase": (
        {"policy": {"allowedPriorityClasses": ["High"]}},
        "/policy/allowedPriorityClasses/0",
    ),
    "policy-node-selector-value-with-comma": (
        {"policy": {"nodeSelector": {"pool": "a,b=c"}}},
        "/policy/nodeSelector/pool",
    ),
    "policy-queue-required-as-string": (
        {"policy": {"requireQueueName": "yes"}},
        "/policy/requireQueueName",
    ),
    "network-cidr-garbage": (
        {"network": {"apiServerCidrs": ["kubernetes.default"]}},
        "/network/apiServerCidrs/0",
    ),
    "network-kuberay-namespace-uppercase": (
        {"network": {"kuberayNamespace": "KubeRay"}},
        "/network/kuberayNamespace",
    ),
    "pdb-max-unavailable-garbage": (
        {"podDisruptionBudget": {"maxUnavailable": "half"}},
        "/podDisruptionBudget/maxUnavailable",
    ),
}


@pytest.mark.parametrize(("values", "field"), BAD_VALUES.values(), ids=BAD_VALUES.keys())
def test_helm_rejects_bad_values(
    helm: Helm, offline_chart: Path, values: dict[str, Any], field: str
) -> None:
    with pytest.raises(CommandFailed) as failure:
        helm.template(offline_chart, values)
    assert "don't meet the specifications of the schema" in failure.value.stderr
    assert field in failure.value.stderr, failure.value.stderr


def test_schema_accepts_the_default_values() -> None:
    # The same check without Helm, so a broken schema shows up with jsonschema's own message.
    schema = json.loads((CHART / "values.schema.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    jsonschema.validate(yaml.safe_load((CHART / "values.yaml").read_text()), schema)


def test_every_default_value_is_described_in_the_schema() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert sorted(values) == sorted(set(schema["properties"]) - {"global", "kopf-peering"})


def test_every_log_level_the_schema_allows_is_one_the_operator_accepts() -> None:
    settings = pytest.importorskip("rlhf_operator.settings")
    schema = json.loads((CHART / "values.schema.json").read_text())
    allowed = schema["properties"]["logLevel"]["enum"]
    for level in allowed:
        parsed = settings.OperatorSettings.from_env({"RLHF_OPERATOR_LOG_LEVEL": level})
        assert parsed.log_level == level
    assert set(allowed) == set(settings.LOG_LEVELS)
