"""Report patches against a local API server stand-in: where they go, shape, throttling,
failures."""

from __future__ import annotations

import copy
import json
import logging
import shutil
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from kube_api_standin import ApiServer, kube_api

from rlhf_trainer.config.report import PROGRESS_KEY
from rlhf_trainer.reporting.kube import KubeReporter, KubeTarget, target_from_env
from rlhf_trainer.reporting.reporter import Reporter

CRD = Path(__file__).resolve().parents[3] / "crds" / "rlhf.dev_rlhfjobs.yaml"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def api() -> Iterator[ApiServer]:
    with kube_api() as server:
        yield server


def reporter_for(api: ApiServer, tmp_path: Path, clock: Clock) -> tuple[Reporter, KubeReporter]:
    token = tmp_path / "token"
    token.write_text("secret-token\n")
    env = {
        "RLHF_JOB_NAME": "tiny",
        "RLHF_JOB_NAMESPACE": "team-a",
        "RLHF_JOB_REPORT": "tiny-report",
        "RLHF_KUBE_API_URL": api.url,
        "RLHF_KUBE_TOKEN_FILE": str(token),
    }
    target = target_from_env(env)
    assert target is not None
    kube = KubeReporter(target, min_interval=5.0, clock=clock)
    return Reporter([kube]), kube


def sent_steps(api: ApiServer) -> list[int]:
    return [json.loads(p["body"]["data"][PROGRESS_KEY])["step"] for p in api.patches]


def step(reporter: Reporter, n: int, total: int = 10, reward: float = 0.5) -> None:
    reporter.on_step(n, total, {"reward": reward, "kl": 0.01}, {"total": 2.0}, samples=8)


def crd_trainer_schema() -> dict[str, Any]:
    crd = yaml.safe_load(CRD.read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    trainer = copy.deepcopy(schema["properties"]["status"]["properties"]["trainer"])
    trainer["additionalProperties"] = False  # every key we send must be one the CRD declares
    return trainer


def test_patches_go_to_the_report_configmap_in_the_shape_of_the_crd(
    api: ApiServer, tmp_path: Path
) -> None:
    reporter, _ = reporter_for(api, tmp_path, Clock())
    step(reporter, 1)
    reporter.on_checkpoint(1, tmp_path / "step-000001")
    reporter.close()
    first = api.patches[0]
    # The report object, never the RLHFJob: the trainer's Role allows nothing else.
    assert first["path"] == "/api/v1/namespaces/team-a/configmaps/tiny-report"
    assert first["content_type"] == "application/merge-patch+json"
    assert first["authorization"] == "Bearer secret-token"
    assert set(first["body"]) == {"data"} and set(first["body"]["data"]) == {PROGRESS_KEY}
    trainer = api.document(PROGRESS_KEY)
    jsonschema.validate(trainer, crd_trainer_schema())
    assert trainer["step"] == 1 and trainer["totalSteps"] == 10 and trainer["progress"] == "1/10"
    assert trainer["reward"] == 0.5 and trainer["metrics"] == {"reward": 0.5, "kl": 0.01}
    assert trainer["samplesPerSecond"] == 4.0 and trainer["etaSeconds"] == 18.0
    assert trainer["checkpoints"][0]["step"] == 1
    assert trainer["checkpoints"][0]["path"].endswith("step-000001")


def test_patches_are_throttled_but_the_final_step_always_goes(
    api: ApiServer, tmp_path: Path
) -> None:
    clock = Clock()
    reporter, _ = reporter_for(api, tmp_path, clock)
    for n in range(1, 10):  # 1 s apart: one patch every 5 s at most
        step(reporter, n)
        clock.now += 1.0
    assert sent_steps(api) == [1, 6]
    step(reporter, 10)  # final: sent at once although only 4 s passed
    assert sent_steps(api)[-1] == 10


def test_close_flushes_the_last_unsent_step(api: ApiServer, tmp_path: Path) -> None:
    clock = Clock()
    reporter, _ = reporter_for(api, tmp_path, clock)
    step(reporter, 1)
    step(reporter, 2)  # throttled
    reporter.close()
    assert sent_steps(api) == [1, 2]


def test_api_errors_are_logged_and_training_goes_on(
    api: ApiServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    reporter, _kube = reporter_for(api, tmp_path, clock)
    api.fail_with = 403
    with caplog.at_level(logging.WARNING):
        step(reporter, 1)
    assert "HTTP 403" in caplog.text and "training continues" in caplog.text
    clock.now += 6.0
    step(reporter, 2)  # within the back-off (10 s after one failure): not tried
    assert len(api.patches) == 1
    api.fail_with = None
    clock.now += 10.0
    step(reporter, 3)
    assert api.document(PROGRESS_KEY)["step"] == 3


def test_unreachable_api_server_does_not_raise(tmp_path: Path) -> None:
    target = KubeTarget("http://127.0.0.1:9", "ns", "job", None, None)
    reporter = Reporter([KubeReporter(target, timeout=1.0)])
    reporter.on_step(10, 10, {"reward": 1.0}, {"total": 1.0})
    reporter.close()


@pytest.mark.parametrize(
    ("env", "url"),
    [
        ({}, None),
        ({"RLHF_JOB_NAME": "j"}, None),
        ({"RLHF_JOB_NAME": "j", "RLHF_JOB_NAMESPACE": "n"}, None),
        (
            {
                "RLHF_JOB_NAME": "j",
                "RLHF_JOB_NAMESPACE": "n",
                "KUBERNETES_SERVICE_HOST": "10.0.0.1",
                "KUBERNETES_SERVICE_PORT": "6443",
            },
            "https://10.0.0.1:6443/api/v1/namespaces/n/configmaps/j-report",
        ),
        (
            {
                "RLHF_JOB_NAME": "j",
                "RLHF_JOB_NAMESPACE": "n",
                "KUBERNETES_SERVICE_HOST": "fd00::1",
                "KUBERNETES_SERVICE_PORT": "443",
            },
            "https://[fd00::1]:443/api/v1/namespaces/n/configmaps/j-report",
        ),
        (
            {"RLHF_JOB_NAME": "j", "RLHF_JOB_NAMESPACE": "n", "RLHF_KUBE_API_URL": "http://x:1/"},
            "http://x:1/api/v1/namespaces/n/configmaps/j-report",
        ),
        (
            {
                "RLHF_JOB_NAME": "j",
                "RLHF_JOB_NAMESPACE": "n",
                "RLHF_JOB_REPORT": "r",
                "RLHF_KUBE_API_URL": "http://x:1",
            },
            "http://x:1/api/v1/namespaces/n/configmaps/r",
        ),
    ],
    ids=[
        "no-env",
        "no-namespace",
        "no-api-server",
        "in-cluster",
        "in-cluster-ipv6",
        "override",
        "named-report",
    ],
)
def test_target_from_env(env: dict[str, str], url: str | None) -> None:
    target = target_from_env(env)
    assert (target.report_url if target else None) == url


def self_signed(tmp_path: Path) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate and is not installed")
    cert, key = tmp_path / "ca.crt", tmp_path / "tls.key"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=kube-api-standin",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


def test_https_with_the_service_account_ca(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    with kube_api(tls) as api:
        env = {"RLHF_JOB_NAME": "j", "RLHF_JOB_NAMESPACE": "n", "RLHF_KUBE_API_URL": api.url}
        trusted = target_from_env({**env, "RLHF_KUBE_CA_FILE": str(cert)})
        assert trusted is not None and trusted.ca_file == cert
        assert KubeReporter(trusted).write(PROGRESS_KEY, {"step": 1})
        assert api.document(PROGRESS_KEY) == {"step": 1}
        # Without the cluster's CA the server is not trusted: reported as a failure, no raise.
        untrusted = KubeTarget(api.url, "n", "j-report", None, None)
        assert not KubeReporter(untrusted).write(PROGRESS_KEY, {"step": 2})
        assert api.document(PROGRESS_KEY) == {"step": 1}


EVAL = {
    "eval/greedy_reward": 0.75,
    "eval/mean_reward": 0.5,
    "eval/pass@1": 0.4,
    "eval/pass@4": 0.9,
    "eval/prompts": 16.0,
    "eval/samples": 4.0,
}


def test_the_latest_evaluation_goes_to_status_trainer_eval_and_stays(
    api: ApiServer, tmp_path: Path
) -> None:
    from rlhf_operator.api.v1alpha1 import TrainerReport

    clock = Clock()
    reporter, _ = reporter_for(api, tmp_path, clock)
    step(reporter, 1)
    assert "eval" not in api.document(PROGRESS_KEY)
    clock.now += 10
    reporter.on_step(2, 10, {"reward": 0.5, **EVAL}, {"total": 2.0}, samples=8)
    clock.now += 10
    step(reporter, 3)  # evaluated nothing: the step-2 evaluation is still the latest
    trainer = api.document(PROGRESS_KEY)
    jsonschema.validate(trainer, crd_trainer_schema())
    assert trainer["step"] == 3
    assert trainer["eval"] == {
        "step": 2,
        "prompts": 16,
        "samples": 4,
        "meanReward": 0.5,
        "greedyReward": 0.75,
        "passAtK": {"1": 0.4, "4": 0.9},
    }
    report = TrainerReport.model_validate(trainer)
    assert report.eval is not None and report.eval.pass_at_k == {"1": 0.4, "4": 0.9}
    # The step-2 document carried the evaluation as status.trainer.eval, not among metrics.
    second = json.loads(api.patches[1]["body"]["data"][PROGRESS_KEY])
    assert second["eval"]["step"] == 2
    assert not any(k.startswith("eval/") for k in second["metrics"])


def test_the_metrics_history_goes_to_status_trainer_history(api: ApiServer, tmp_path: Path) -> None:
    from rlhf_operator.api.v1alpha1 import TrainerReport

    clock = Clock()
    reporter, _ = reporter_for(api, tmp_path, clock)
    for n in range(1, 6):
        clock.now += 10
        reporter.on_step(n, 5, {"reward": n / 10, "kl": 0.01 * n, "other": 1.0}, {"total": 1.0})
    trainer = api.document(PROGRESS_KEY)
    jsonschema.validate(trainer, crd_trainer_schema())
    assert trainer["history"]["reward"] == [[n, n / 10] for n in range(1, 6)]
    assert set(trainer["history"]) == {"reward", "kl"}
    report = TrainerReport.model_validate(trainer)
    assert report.history is not None and report.history["kl"][-1] == [5, 0.05]


def test_a_retried_attempt_continues_the_history_of_the_earlier_ones(tmp_path: Path) -> None:
    from rlhf_trainer.reporting.reporter import read_history

    lines = [
        {"event": "step", "step": 1, "metrics": {"reward": 0.1}},
        {"event": "checkpoint", "step": 1, "path": "x"},
        {"event": "step", "step": 2, "metrics": {"reward": 0.2}},
        {"event": "step", "step": 3, "metrics": {"reward": 0.3}},
    ]
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in lines) + '{"event": "st')
    history = read_history(path)
    history.add(3, {"reward": 0.35})  # the attempt resumed from step 2's checkpoint
    assert history.to_json() == {"reward": [[1, 0.1], [2, 0.2], [3, 0.35]]}
    assert read_history(tmp_path / "none.jsonl").to_json() == {}
