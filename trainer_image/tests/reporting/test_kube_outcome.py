"""The outcome: how an attempt ended, in the shape the operator's model reads, written beside the
progress in the job's report (never over it), and by `rlhf run` itself before it exits."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kube_api_standin import ApiServer, kube_api

from rlhf_operator.api.v1alpha1 import TrainerOutcome, TrainerReport
from rlhf_operator.reconcile.observed import parse_report
from rlhf_trainer.cli import main
from rlhf_trainer.config.outcome import FailureClass
from rlhf_trainer.config.report import OUTCOME_KEY, PROGRESS_KEY
from rlhf_trainer.reporting.kube import (
    MAX_MESSAGE,
    KubeReporter,
    report_outcome,
    target_from_env,
)
from rlhf_trainer.reporting.reporter import Reporter


@pytest.fixture
def api() -> Iterator[ApiServer]:
    with kube_api() as server:
        yield server


def job_env(api: ApiServer, attempt: str = "2") -> dict[str, str]:
    return {
        "RLHF_JOB_NAME": "tiny",
        "RLHF_JOB_NAMESPACE": "team-a",
        "RLHF_KUBE_API_URL": api.url,
        "RLHF_JOB_ATTEMPT": attempt,
    }


def report(api: ApiServer) -> TrainerReport:
    """What the operator makes of the report (the very function it uses)."""
    parsed = parse_report(api.data)
    assert parsed is not None
    return parsed


def test_the_outcome_is_written_beside_the_progress_as_the_operator_reads_it(
    api: ApiServer,
) -> None:
    target = target_from_env(job_env(api))
    assert target is not None
    progress = Reporter([KubeReporter(target)])
    progress.on_step(3, 10, {"reward": 0.5}, {"total": 1.0}, 8)
    progress.close()

    message = "preempted (SIGTERM) after 3 completed steps; final checkpoint: /c/step-000003"
    sent = report_outcome(
        exit_code=75, failure_class=FailureClass.PREEMPTED, message=message, env=job_env(api)
    )
    assert sent
    assert api.patches[-1]["content_type"] == "application/merge-patch+json"
    assert set(api.patches[-1]["body"]["data"]) == {OUTCOME_KEY}  # the progress is not touched
    # The operator's models forbid unknown keys: a key they refuse would be dropped.
    TrainerReport.model_validate(api.document(PROGRESS_KEY))
    TrainerOutcome.model_validate(api.document(OUTCOME_KEY))
    parsed = report(api)
    assert parsed.step == 3
    assert parsed.outcome == TrainerOutcome(
        attempt=2, exit_code=75, failure_class=FailureClass.PREEMPTED, message=message
    )


def test_success_has_no_failure_class_and_long_messages_keep_their_end(api: ApiServer) -> None:
    assert report_outcome(exit_code=0, failure_class=None, message="ok", env=job_env(api, "0"))
    outcome = report(api).outcome
    assert outcome == TrainerOutcome(attempt=0, exit_code=0, failure_class=None, message="ok")

    long = "x" * 10_000 + " ValueError: the error itself"
    report_outcome(
        exit_code=78, failure_class=FailureClass.INVALID_SPEC, message=long, env=job_env(api)
    )
    message = api.document(OUTCOME_KEY)["message"]
    assert len(message) == MAX_MESSAGE and message.endswith("ValueError: the error itself")
    assert report(api).outcome is not None


def test_a_local_run_reports_nothing_and_an_api_failure_is_retried_then_given_up(
    api: ApiServer,
) -> None:
    assert not report_outcome(exit_code=1, failure_class=None, message="m", env={})
    assert api.patches == []
    api.fail_with = 500
    env = job_env(api)
    sent = report_outcome(exit_code=1, failure_class=None, message="m", env=env, retry_delay=0)
    assert not sent
    assert len(api.patches) == 3


def test_rlhf_run_writes_the_outcome_of_a_job_it_refuses(
    api: ApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in job_env(api, "1").items():
        monkeypatch.setenv(key, value)
    path = tmp_path / "job.yaml"
    doc = {
        "algorithm": {"name": "grpo"},
        "models": {"actor": {"pretrained": "/m"}, "rewardFunction": {"builtin": "repeat-letter"}},
        "data": {"train": [{"path": "d.jsonl"}]},
        "rollout": {"samplesPerPrompt": 1},
    }
    path.write_text(yaml.safe_dump(doc))
    assert main(["run", str(path)]) == 78
    outcome = report(api).outcome
    assert outcome is not None
    assert (outcome.attempt, outcome.exit_code) == (1, 78)
    assert outcome.failure_class is FailureClass.INVALID_SPEC
    assert "rollout.samplesPerPrompt: must be > 1" in outcome.message
