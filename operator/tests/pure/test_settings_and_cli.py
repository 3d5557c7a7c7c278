"""Operator settings from the environment (the names the Helm chart sets), kopf's settings,
and the `rlhf-operator render` command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import kopf
import pytest
import yaml

from rlhf_operator.cli import main
from rlhf_operator.handlers.kopf_settings import configure_kopf
from rlhf_operator.handlers.start import throttle
from rlhf_operator.kube.throttle import TokenBucket
from rlhf_operator.settings import OperatorSettings, SettingsError

FIXTURES = Path(__file__).parent / "fixtures"


def test_defaults() -> None:
    s = OperatorSettings.from_env({})
    assert (s.namespaces, s.clusterwide, s.metrics_port, s.health_port) == ((), True, 8080, 8081)
    assert s.peering is None and s.default_trainer_image is None and s.log_level == "INFO"
    assert s.liveness_endpoint == "http://0.0.0.0:8081/healthz"


def test_every_helm_variable() -> None:
    s = OperatorSettings.from_env(
        {
            "RLHF_OPERATOR_NAMESPACES": " team-a, team-b ,,",
            "RLHF_OPERATOR_DEFAULT_TRAINER_IMAGE": "ghcr.io/x/trainer:1",
            "RLHF_OPERATOR_METRICS_PORT": "9090",
            "RLHF_OPERATOR_HEALTH_PORT": "9091",
            "RLHF_OPERATOR_PEERING": "rlhf-operator",
            "RLHF_OPERATOR_LOG_LEVEL": "debug",
        }
    )
    assert s.namespaces == ("team-a", "team-b") and not s.clusterwide
    assert (s.default_trainer_image, s.metrics_port, s.health_port) == (
        "ghcr.io/x/trainer:1",
        9090,
        9091,
    )
    assert (s.peering, s.log_level) == ("rlhf-operator", "DEBUG")


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"RLHF_OPERATOR_METRICS_PORT": "http"}, "RLHF_OPERATOR_METRICS_PORT: must be an integer"),
        ({"RLHF_OPERATOR_HEALTH_PORT": "70000"}, "RLHF_OPERATOR_HEALTH_PORT: must be a TCP port"),
        ({"RLHF_OPERATOR_LOG_LEVEL": "chatty"}, "RLHF_OPERATOR_LOG_LEVEL: must be one of"),
        ({"RLHF_OPERATOR_API_RETRY_SECONDS": "-1"}, "RLHF_OPERATOR_API_RETRY_SECONDS: must be > 0"),
        (
            {"RLHF_OPERATOR_DEFAULT_STORAGE_SIZE": "50 GB"},
            "RLHF_OPERATOR_DEFAULT_STORAGE_SIZE: must be a storage quantity",
        ),
        ({"RLHF_OPERATOR_WORKER_LIMIT": "0"}, "RLHF_OPERATOR_WORKER_LIMIT: must be a positive"),
        ({"RLHF_OPERATOR_CLIENT_QPS": "-5"}, "RLHF_OPERATOR_CLIENT_QPS: must be > 0"),
        ({"RLHF_OPERATOR_CLIENT_BURST": "x"}, "RLHF_OPERATOR_CLIENT_BURST: must be an integer"),
    ],
    ids=[
        "port-not-a-number",
        "port-out-of-range",
        "unknown-log-level",
        "negative-delay",
        "storage-size",
        "worker-limit-zero",
        "negative-qps",
        "burst-not-a-number",
    ],
)
def test_bad_values_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        OperatorSettings.from_env(env)


def test_kopf_settings_keep_kopf_out_of_status() -> None:
    kopf_settings = kopf.OperatorSettings()
    configure_kopf(kopf_settings, OperatorSettings(instance="pod-1"))
    persistence = kopf_settings.persistence
    assert persistence.finalizer == "rlhf.dev/finalizer"
    assert isinstance(persistence.progress_storage, kopf.AnnotationsProgressStorage)
    assert persistence.progress_storage.prefix == "rlhf.dev"
    assert isinstance(persistence.diffbase_storage, kopf.AnnotationsDiffBaseStorage)
    assert persistence.diffbase_storage.prefix == "rlhf.dev"
    assert kopf_settings.posting.reporting_component == "rlhf-operator"
    assert kopf_settings.posting.reporting_instance == "pod-1"
    assert kopf_settings.watching.server_timeout == 270.0
    assert kopf_settings.peering.standalone is True


def test_scale_settings_reach_kopf_and_the_client() -> None:
    s = OperatorSettings.from_env(
        {
            "RLHF_OPERATOR_WORKER_LIMIT": "200",
            "RLHF_OPERATOR_CLIENT_QPS": "50",
            "RLHF_OPERATOR_CLIENT_BURST": "100",
            "RLHF_OPERATOR_WORKER_IDLE_SECONDS": "2",
        }
    )
    assert (s.worker_limit, s.client_qps, s.client_burst) == (200, 50.0, 100)
    kopf_settings = kopf.OperatorSettings()
    configure_kopf(kopf_settings, s)
    assert kopf_settings.queueing.worker_limit == 200
    assert kopf_settings.queueing.idle_timeout == 2.0
    configure_kopf(kopf_settings, OperatorSettings.from_env({}))
    assert kopf_settings.queueing.idle_timeout == 0.5  # not kopf's 5 s: see settings.py
    bucket = throttle(s)
    assert bucket is not None and (bucket.qps, bucket.burst) == (50.0, 100)
    assert throttle(OperatorSettings.from_env({})) is None  # no limit unless asked for
    default_burst = throttle(OperatorSettings(client_qps=20.0))
    assert default_burst is not None and default_burst.burst == 40


def test_token_bucket_allows_a_burst_then_the_rate() -> None:
    now = [0.0]
    bucket = TokenBucket(10.0, 3, clock=lambda: now[0])
    assert [bucket.wait_seconds() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.wait_seconds() == pytest.approx(0.1)  # empty: one token per 1/qps
    now[0] += 0.1
    assert bucket.wait_seconds() == 0.0
    now[0] += 10.0  # a quiet spell refills up to the burst, not beyond
    assert [bucket.wait_seconds() for _ in range(4)][-1] == pytest.approx(0.1)


def test_peering_gets_distinct_priorities() -> None:
    priorities = set()
    for _ in range(5):
        kopf_settings = kopf.OperatorSettings()
        configure_kopf(kopf_settings, OperatorSettings(peering="rlhf", namespaces=("a",)))
        assert (kopf_settings.peering.name, kopf_settings.peering.standalone) == ("rlhf", False)
        assert kopf_settings.peering.mandatory and not kopf_settings.peering.clusterwide
        priorities.add(kopf_settings.peering.priority)
    assert len(priorities) > 1  # two replicas: one works, the other waits


def test_render_prints_every_child(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", str(FIXTURES / "ppo-7b-paper.yaml"), "--namespace", "ns1"]) == 0
    objects = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [o["kind"] for o in objects] == [
        "ServiceAccount",
        "ConfigMap",
        "Role",
        "RoleBinding",
        "ConfigMap",
        "Secret",
        "NetworkPolicy",
        "PersistentVolumeClaim",
        "RayJob",
    ]
    assert {o["metadata"]["namespace"] for o in objects} == {"ns1"}


def test_render_without_image_fails_with_the_field(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RLHF_OPERATOR_DEFAULT_TRAINER_IMAGE", raising=False)
    example = FIXTURES / "grpo-hybrid-reward-fn.yaml"
    assert main(["render", str(example)]) == 1
    assert "spec.image: no trainer image" in capsys.readouterr().err
    assert main(["render", str(example), "--image", "trainer:1"]) == 0


@pytest.mark.parametrize(
    ("failures", "delay"),
    [(1, 5.0), (2, 10.0), (3, 20.0), (6, 160.0), (7, 300.0), (1000, 300.0)],
    ids=["first", "second", "third", "sixth", "capped", "long-outage"],
)
def test_retry_delay_doubles_up_to_the_cap(failures: int, delay: float) -> None:
    assert OperatorSettings().retry_delay(failures) == delay


def test_retry_cap_from_the_environment() -> None:
    settings = OperatorSettings.from_env({"RLHF_OPERATOR_RETRY_MAX_SECONDS": "60"})
    assert settings.retry_max_seconds == 60.0
    assert settings.retry_delay(10) == 60.0


def test_the_operator_process_loads_no_kubernetes_client_library() -> None:
    """kopf imports the `kubernetes` clients when installed (the gateway's dependency), for
    helpers the operator does not use: ~85 MB of RSS. `rlhf-operator run` keeps them out,
    and the operator (kopf included) starts without them."""
    code = (
        "import sys; from rlhf_operator import cli; cli._without_unused_clients(); "
        "import kopf, rlhf_operator.handlers.start; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in cli.UNUSED_CLIENTS "
        "and sys.modules[m] is not None))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
