"""The Helm chart: `helm lint --strict`, `helm template` for default and non-default values,
every rendered object validated against Kubernetes' schemas, and the operator contract (command,
environment, probes, security context) checked on the output."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from helm_tool import (
    CHART,
    KUBERAY_DEPENDENCY,
    CommandFailed,
    Helm,
    Manifest,
    by_kind,
    one,
    parse_manifests,
)
from scenarios import NAMESPACED, SCENARIOS

from support.crd_schema import validator_for_crd

# The operator's configuration contract (rlhf_operator settings): these and only these.
OPERATOR_ENV = (
    "RLHF_OPERATOR_NAMESPACES",
    "RLHF_OPERATOR_DEFAULT_TRAINER_IMAGE",
    "RLHF_OPERATOR_DEFAULT_STORAGE_SIZE",
    "RLHF_OPERATOR_METRICS_PORT",
    "RLHF_OPERATOR_HEALTH_PORT",
    "RLHF_OPERATOR_PEERING",
    "RLHF_OPERATOR_LOG_LEVEL",
    "RLHF_OPERATOR_ALLOWED_IMAGE_PREFIXES",
    "RLHF_OPERATOR_ALLOWED_PRIORITY_CLASSES",
    "RLHF_OPERATOR_ALLOWED_SCHEDULER_NAMES",
    "RLHF_OPERATOR_ALLOWED_NODE_SELECTOR_KEYS",
    "RLHF_OPERATOR_NODE_SELECTOR",
    "RLHF_OPERATOR_REQUIRE_QUEUE_NAME",
    "RLHF_OPERATOR_KUBERAY_NAMESPACE",
    "RLHF_OPERATOR_API_SERVER_CIDRS",
)
KOPF_PEERING_CRDS = CHART / "charts" / "kopf-peering" / "crds" / "kopf.dev_peerings.yaml"

_renders: dict[str, list[Manifest]] = {}


@pytest.fixture
def render(helm: Helm, offline_chart: Path) -> Callable[[str], list[Manifest]]:
    """Rendered objects of a scenario (cached: each scenario is rendered once per session)."""

    def rendered(scenario: str) -> list[Manifest]:
        if scenario not in _renders:
            _renders[scenario] = parse_manifests(helm.template(offline_chart, SCENARIOS[scenario]))
        return _renders[scenario]

    return rendered


def _container(manifests: list[Manifest]) -> dict[str, Any]:
    containers = one(manifests, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["operator"]
    return dict(containers[0])


def _env(manifests: list[Manifest]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in _container(manifests)["env"]}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_lint_strict_is_clean(helm: Helm, offline_chart: Path, scenario: str) -> None:
    result = helm.lint(offline_chart, SCENARIOS[scenario], "--with-subcharts")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[WARNING]" not in result.stdout and "[ERROR]" not in result.stdout, result.stdout


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_rendered_objects_validate_against_kubernetes_schemas(
    render: Callable[[str], list[Manifest]],
    kube_validate: Callable[[dict[str, Any]], None],
    scenario: str,
) -> None:
    kopf_crds = {
        crd["spec"]["names"]["kind"]: crd
        for crd in yaml.safe_load_all(KOPF_PEERING_CRDS.read_text())
    }
    validated = set()
    for obj in render(scenario):
        if obj["kind"] in kopf_crds:
            # kopf's own CRDs define these: validate as the API server would.
            errors = validator_for_crd(kopf_crds[obj["kind"]], "v1", strict=True).validate(obj)
            assert errors == [], errors
        elif obj["kind"] == "ServiceMonitor":
            # prometheus-operator's CRD is not available offline; check the fields we rely on.
            endpoint = obj["spec"]["endpoints"][0]
            assert obj["apiVersion"] == "monitoring.coreos.com/v1"
            assert set(endpoint) <= {"port", "path", "interval", "scrapeTimeout"}
        else:
            kube_validate(obj)
        validated.add(obj["kind"])
    assert "Deployment" in validated


@pytest.mark.parametrize("scenario", ["default", "peering-cluster-wide", "peering-namespaced"])
def test_crds_render_valid_and_peering_crds_come_only_with_peering(
    helm: Helm,
    offline_chart: Path,
    kube_validate: Callable[[dict[str, Any]], None],
    scenario: str,
) -> None:
    manifests = parse_manifests(
        helm.template(offline_chart, SCENARIOS[scenario], include_crds=True)
    )
    crds = by_kind(manifests, "CustomResourceDefinition")
    for crd in crds:
        kube_validate(crd)
    names = {crd["metadata"]["name"] for crd in crds}
    peering = {"clusterkopfpeerings.kopf.dev", "kopfpeerings.kopf.dev"}
    assert {"rlhfjobs.rlhf.dev", "rlhfpipelines.rlhf.dev"} <= names
    assert (peering <= names) == SCENARIOS[scenario].get("peering", {}).get("enabled", False)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_operator_runs_with_the_settings_contract(
    render: Callable[[str], list[Manifest]], scenario: str
) -> None:
    container = _container(render(scenario))
    assert container["command"] == ["rlhf-operator", "run"]
    names = [e["name"] for e in container["env"]]
    assert names[: len(OPERATOR_ENV)] == list(OPERATOR_ENV)
    assert len(set(names)) == len(names), f"duplicate env vars: {names}"


@pytest.mark.parametrize(
    ("scenario", "expected"),
    [
        pytest.param(
            "default",
            {
                "RLHF_OPERATOR_NAMESPACES": "",
                "RLHF_OPERATOR_DEFAULT_TRAINER_IMAGE": "ghcr.io/rlhf-operator/rlhf-trainer:0.1.0",
                "RLHF_OPERATOR_DEFAULT_STORAGE_SIZE": "50Gi",
                "RLHF_OPERATOR_METRICS_PORT": "8080",
                "RLHF_OPERATOR_HEALTH_PORT": "8081",
                "RLHF_OPERATOR_PEERING": "",
                "RLHF_OPERATOR_LOG_LEVEL": "INFO",
            },
            id="default",
        ),
        pytest.param("namespaced", {"RLHF_OPERATOR_NAMESPACES": "team-a,team-b"}, id="namespaced"),
        pytest.param(
            "peering-namespaced",
            {"RLHF_OPERATOR_NAMESPACES": "team-a", "RLHF_OPERATOR_PEERING": "rlhf"},
            id="peering-namespaced",
        ),
        pytest.param(
            "metrics-servicemonitor", {"RLHF_OPERATOR_METRICS_PORT": "9090"}, id="metrics-port"
        ),
        pytest.param(
            "customised",
            {
                "RLHF_OPERATOR_DEFAULT_TRAINER_IMAGE": (
                    "registry.example.com/ml/rlhf-trainer:0.1.0-cu128"
                ),
                "RLHF_OPERATOR_LOG_LEVEL": "DEBUG",
                "HTTPS_PROXY": "http://proxy.example.com:3128",
            },
            id="customised",
        ),
    ],
)
def test_environment_follows_values(
    render: Callable[[str], list[Manifest]], scenario: str, expected: dict[str, str]
) -> None:
    env = _env(render(scenario))
    assert {name: env.get(name) for name in expected} == expected


def test_platform_policy_values_reach_the_operator_settings(
    render: Callable[[str], list[Manifest]],
) -> None:
    settings = pytest.importorskip("rlhf_operator.settings")
    operator = settings.OperatorSettings.from_env(_env(render("platform-policy")))
    assert operator.policy == settings.PlatformPolicy(
        allowed_image_prefixes=("registry.example.com/ml", "ghcr.io/rlhf-operator/"),
        allowed_priority_classes=("training-low", "training-high"),
        allowed_scheduler_names=("volcano",),
        allowed_node_selector_keys=("nvidia.com/gpu.product",),
        node_selector=(("example.com/team", "research"), ("pool", "ml")),
        require_queue_name=True,
    )
    assert operator.kuberay_namespace == "kuberay-system"
    assert operator.api_server_cidrs == ("10.0.0.1/32",)
    # Defaults: no restriction, and the KubeRay namespace follows the bundled subchart.
    assert settings.OperatorSettings.from_env(_env(render("default"))).policy == (
        settings.PlatformPolicy()
    )
    assert settings.OperatorSettings.from_env(_env(render("kuberay-enabled"))).kuberay_namespace


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_pod_meets_the_restricted_pod_security_standard(
    render: Callable[[str], list[Manifest]], scenario: str
) -> None:
    pod = one(render(scenario), "Deployment")["spec"]["template"]["spec"]
    container = _container(render(scenario))
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert "hostNetwork" not in pod and "hostPID" not in pod
    # A read-only root filesystem still needs a writable /tmp.
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]
    assert container["resources"]["requests"]["cpu"]
    assert container["resources"]["limits"]["memory"]


@pytest.mark.parametrize("scenario", ["default", "metrics-servicemonitor"])
def test_probes_hit_kopf_liveness_on_the_health_port(
    render: Callable[[str], list[Manifest]], scenario: str
) -> None:
    container = _container(render(scenario))
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["health"] == int(_env(render(scenario))["RLHF_OPERATOR_HEALTH_PORT"])
    assert ports["metrics"] == int(_env(render(scenario))["RLHF_OPERATOR_METRICS_PORT"])
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "health"}


@pytest.mark.parametrize(
    ("scenario", "strategy", "replicas", "pdb"),
    [
        ("default", "Recreate", 1, False),
        ("peering-cluster-wide", "RollingUpdate", 2, True),
        ("peering-namespaced", "RollingUpdate", 2, True),
    ],
)
def test_rollout_never_runs_two_unpeered_operators(
    render: Callable[[str], list[Manifest]], scenario: str, strategy: str, replicas: int, pdb: bool
) -> None:
    manifests = render(scenario)
    spec = one(manifests, "Deployment")["spec"]
    assert spec["strategy"]["type"] == strategy
    assert spec["replicas"] == replicas
    assert bool(by_kind(manifests, "PodDisruptionBudget")) == pdb
    if replicas > 1:
        anti = spec["template"]["spec"]["affinity"]["podAntiAffinity"]
        term = anti["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
        assert term["labelSelector"]["matchLabels"] == spec["selector"]["matchLabels"]


@pytest.mark.parametrize(
    ("scenario", "kind", "namespaces"),
    [
        ("peering-cluster-wide", "ClusterKopfPeering", [None]),
        ("peering-namespaced", "KopfPeering", ["team-a"]),
    ],
)
def test_peering_objects_exist_where_kopf_looks_for_them(
    render: Callable[[str], list[Manifest]], scenario: str, kind: str, namespaces: list[str | None]
) -> None:
    # kopf with an explicit peering name stays paused until that object exists.
    manifests = render(scenario)
    peerings = by_kind(manifests, kind)
    assert [p["metadata"].get("namespace") for p in peerings] == namespaces
    assert {p["metadata"]["name"] for p in peerings} == {_env(manifests)["RLHF_OPERATOR_PEERING"]}


def test_no_peering_objects_without_peering(render: Callable[[str], list[Manifest]]) -> None:
    kinds = {m["kind"] for m in render("default")}
    assert not kinds & {"ClusterKopfPeering", "KopfPeering", "PodDisruptionBudget"}


def test_metrics_service_and_servicemonitor_select_the_operator(
    render: Callable[[str], list[Manifest]],
) -> None:
    manifests = render("metrics-servicemonitor")
    deployment = one(manifests, "Deployment")
    service = one(manifests, "Service")
    monitor = one(manifests, "ServiceMonitor")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["ports"][0] == {
        "name": "metrics",
        "port": 9090,
        "targetPort": "metrics",
        "protocol": "TCP",
    }
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"
    assert not by_kind(render("default"), "Service")


def test_customised_values_reach_the_pod(render: Callable[[str], list[Manifest]]) -> None:
    manifests = render("customised")
    deployment = one(manifests, "Deployment")
    pod = deployment["spec"]["template"]
    container = _container(manifests)
    assert deployment["metadata"]["name"] == "rlhf-ctl"
    assert container["image"] == "registry.example.com/ml/rlhf-operator@sha256:" + "ab" * 32
    assert container["imagePullPolicy"] == "Always"
    assert pod["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["spec"]["serviceAccountName"] == "platform-operator"
    assert pod["spec"]["priorityClassName"] == "system-cluster-critical"
    assert pod["spec"]["tolerations"] == [{"key": "CriticalAddonsOnly", "operator": "Exists"}]
    assert pod["metadata"]["annotations"] == {"example.com/team": "ml-platform"}
    assert pod["metadata"]["labels"]["team"] == "ml-platform"
    # serviceAccount.create=false: bind the given account, create none.
    assert not by_kind(manifests, "ServiceAccount")
    binding = one(manifests, "ClusterRoleBinding")
    assert binding["subjects"][0]["name"] == "platform-operator"


def test_rbac_create_false_renders_no_rbac(render: Callable[[str], list[Manifest]]) -> None:
    kinds = {m["kind"] for m in render("rbac-external")}
    assert not kinds & {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_namespaced_objects_live_in_the_release_or_watched_namespaces(
    render: Callable[[str], list[Manifest]], scenario: str
) -> None:
    allowed = {"rlhf-system", *SCENARIOS[scenario].get("watchNamespaces", [])}
    cluster_scoped = {"ClusterRole", "ClusterRoleBinding", "ClusterKopfPeering"}
    for obj in render(scenario):
        namespace = obj["metadata"].get("namespace")
        if obj["kind"] in cluster_scoped:
            assert namespace is None
        else:
            assert namespace in allowed, f"{obj['kind']} {obj['metadata']['name']} in {namespace}"
    if scenario in NAMESPACED:
        roles = by_kind(render(scenario), "Role")
        assert {r["metadata"]["namespace"] for r in roles} == set(
            SCENARIOS[scenario]["watchNamespaces"]
        )


@pytest.mark.parametrize(
    ("values", "message"),
    [
        pytest.param(
            {"metrics": {"port": 9000}, "health": {"port": 9000}},
            "metrics.port and health.port must differ",
            id="same-port-twice",
        ),
        pytest.param(
            {"serviceAccount": {"create": False}},
            "serviceAccount.name is required when serviceAccount.create is false",
            id="external-service-account-without-name",
        ),
    ],
)
def test_template_refuses_inconsistent_values(
    helm: Helm, offline_chart: Path, values: dict[str, Any], message: str
) -> None:
    with pytest.raises(CommandFailed) as failure:
        helm.template(offline_chart, values)
    assert message in failure.value.stderr


@pytest.mark.parametrize(
    ("values", "lines"),
    [
        pytest.param(
            {},
            ["serves RLHFJobs in every namespace", "kubectl get crd rayjobs.ray.io"],
            id="default",
        ),
        pytest.param(
            {"watchNamespaces": ["team-a", "team-b"]},
            ["serves RLHFJobs in: team-a, team-b (Roles only"],
            id="namespaced",
        ),
        pytest.param(
            {"replicaCount": 2, "peering": {"enabled": True, "name": "rlhf"}},
            ['Replicas: 2, peered through ClusterKopfPeering "rlhf"'],
            id="peering",
        ),
        pytest.param(
            {"kuberay": {"enabled": True}},
            ["This release installed the KubeRay operator too."],
            id="kuberay",
        ),
    ],
)
def test_notes_tell_the_user_what_to_do_next(
    helm: Helm, offline_chart: Path, values: dict[str, Any], lines: list[str]
) -> None:
    # `helm install --dry-run=client` renders NOTES.txt without a cluster.
    values_file = helm.values_file(values)
    result = helm.run(
        "install",
        "rlhf",
        str(offline_chart),
        "-n",
        "rlhf-system",
        "--dry-run=client",
        "-f",
        str(values_file),
    )
    notes = result.stdout.split("NOTES:", 1)[1]
    for line in [*lines, "rollout status deployment/rlhf-rlhf-operator", "helm upgrade"]:
        assert line in notes, notes


def test_kuberay_is_an_optional_dependency_with_a_condition() -> None:
    metadata = yaml.safe_load((CHART / "Chart.yaml").read_text())
    dependencies = {dep["name"]: dep for dep in metadata["dependencies"]}
    kuberay = dependencies[KUBERAY_DEPENDENCY]
    assert kuberay["condition"] == "kuberay.enabled"
    assert kuberay["alias"] == "kuberay"
    assert kuberay["repository"].startswith("https://")
    assert dependencies["kopf-peering"]["condition"] == "peering.enabled"
    assert yaml.safe_load((CHART / "values.yaml").read_text())["kuberay"] == {"enabled": False}


def test_shipped_chart_asks_for_helm_dependency_build_until_kuberay_is_fetched(
    helm: Helm,
) -> None:
    if any((CHART / "charts").glob(f"{KUBERAY_DEPENDENCY}-*.tgz")):
        pytest.skip("the KubeRay subchart is present: test_full_chart_with_kuberay covers it")
    with pytest.raises(CommandFailed) as failure:
        helm.template(CHART, {})
    assert "helm dependency build" in failure.value.stderr
    assert KUBERAY_DEPENDENCY in failure.value.stderr


def test_full_chart_with_kuberay(helm: Helm) -> None:
    if not any((CHART / "charts").glob(f"{KUBERAY_DEPENDENCY}-*.tgz")):
        pytest.skip(
            "KubeRay subchart not fetched: run `helm dependency build helm/rlhf-operator` on a "
            "machine that reaches https://ray-project.github.io/kuberay-helm/ (not this one)"
        )
    lint = helm.lint(CHART, {"kuberay": {"enabled": True}})
    assert lint.returncode == 0, lint.stdout + lint.stderr
    manifests = parse_manifests(helm.template(CHART, {"kuberay": {"enabled": True}}))
    assert any("kuberay" in m["metadata"]["name"] for m in by_kind(manifests, "Deployment"))


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_operator_settings_accept_the_rendered_environment(
    render: Callable[[str], list[Manifest]], scenario: str
) -> None:
    # The operator's own parser reads what the chart sets: a renamed variable or a bad value
    # fails here, not in a crash-looping pod.
    settings = pytest.importorskip("rlhf_operator.settings")
    parsed = settings.OperatorSettings.from_env(_env(render(scenario)))
    values = SCENARIOS[scenario]
    assert parsed.namespaces == tuple(values.get("watchNamespaces", ()))
    peering = values.get("peering", {})
    assert parsed.peering == (peering["name"] if peering.get("enabled") else None)
    assert parsed.metrics_port == values.get("metrics", {}).get("port", 8080)
    assert parsed.default_trainer_image


@pytest.mark.parametrize(
    ("kube_version", "accepted"),
    [("1.28.9", False), ("1.29.0", True), ("1.35.0", True)],
)
def test_kube_version_floor(
    helm: Helm, offline_chart: Path, kube_version: str, accepted: bool
) -> None:
    # The CRD's CEL transition rules (self == oldSelf) need Kubernetes 1.29.
    if accepted:
        assert helm.template(offline_chart, {}, kube_version=kube_version)
    else:
        with pytest.raises(CommandFailed) as failure:
            helm.template(offline_chart, {}, kube_version=kube_version)
        assert f"incompatible with Kubernetes v{kube_version}" in failure.value.stderr
