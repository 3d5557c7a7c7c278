"""How a run ends, decided without running anything: failure classes by exception type (Ray's
wrappers and network causes included), exit codes, the one-line messages."""

from __future__ import annotations

from pathlib import Path

import httpx2
import pytest
import ray.exceptions
from huggingface_hub.errors import OfflineModeIsEnabled

from rlhf_trainer.config.outcome import ExitCode, FailureClass
from rlhf_trainer.context.job import JobError, RunFailed
from rlhf_trainer.context.preemption import Preempted
from rlhf_trainer.context.steploop import NonFiniteError
from rlhf_trainer.data.sources import DataLoadError
from rlhf_trainer.distributed.workers.trained import NonFiniteLossError
from rlhf_trainer.models.loading import ModelLoadError
from rlhf_trainer.rewards.agent_runner import AgentError
from rlhf_trainer.rewards.function_runner import (
    RewardFunctionCodeError,
    RewardFunctionError,
    RewardFunctionLoadError,
    RewardFunctionTimeout,
)
from rlhf_trainer.rewards.remote import RemoteRewardError
from rlhf_trainer.runner.main import failure_message
from rlhf_trainer.runner.outcome import classify, exit_code, explain

INVALID, PREEMPTED, INFRA = (
    FailureClass.INVALID_SPEC,
    FailureClass.PREEMPTED,
    FailureClass.INFRASTRUCTURE,
)


def caused(err: BaseException, cause: BaseException) -> BaseException:
    """`err` raised `from cause`, as the loaders do."""
    err.__cause__ = cause
    return err


def from_rank(err: BaseException) -> BaseException:
    """`err` as `ray.get` raises it when a rank's method raised it."""
    return ray.exceptions.RayTaskError("ActorWorker.build", "Traceback ...", err)


def hub_outage() -> BaseException:
    """A model load that failed because the Hub could not be reached (the loaders' chain)."""
    network = httpx2.ConnectError("[Errno 111] Connection refused")
    return caused(ModelLoadError("cannot load causal LM: 'org/m'"), caused(OSError(), network))


CASES = [
    # The job as written cannot run: no retry.
    pytest.param(JobError("training.maxSteps: ..."), INVALID, id="job-error"),
    pytest.param(DataLoadError("column 'prompt' missing"), INVALID, id="data-key-missing"),
    pytest.param(ModelLoadError("model path './m' does not exist"), INVALID, id="model-missing"),
    pytest.param(RewardFunctionLoadError("cannot load r.py"), INVALID, id="reward-fn-import"),
    pytest.param(RewardFunctionCodeError("raised an exception"), INVALID, id="reward-fn-raised"),
    pytest.param(AgentError("rollout.agent.path: cannot import"), INVALID, id="agent-import"),
    pytest.param(from_rank(ModelLoadError("not a model")), INVALID, id="model-load-in-a-rank"),
    pytest.param(
        RunFailed(RewardFunctionCodeError("at step 7"), 6, None, None), INVALID, id="mid-run-bug"
    ),
    pytest.param(
        caused(ModelLoadError("not cached"), OfflineModeIsEnabled("offline")),
        INVALID,
        id="hub-offline-mode",
    ),
    # Stopped from outside at a step boundary: retried, not counted.
    pytest.param(Preempted(3), PREEMPTED, id="sigterm"),
    pytest.param(RunFailed(Preempted(3), 3, Path("/c/step-3"), None), PREEMPTED, id="sigterm-run"),
    pytest.param(ray.exceptions.RayActorError(preempted=True), PREEMPTED, id="node-preempted"),
    # Anything else: retried within backoffLimit.
    pytest.param(ray.exceptions.ActorDiedError(), INFRA, id="rank-died"),
    pytest.param(ray.exceptions.RayActorError(), INFRA, id="actor-lost"),
    pytest.param(ray.exceptions.WorkerCrashedError(), INFRA, id="worker-crashed"),
    pytest.param(from_rank(RuntimeError("CUDA out of memory")), INFRA, id="oom-in-a-rank"),
    pytest.param(RewardFunctionTimeout("no result within 60 s"), INFRA, id="reward-fn-timeout"),
    pytest.param(RewardFunctionError("the worker process died"), INFRA, id="reward-fn-died"),
    pytest.param(RemoteRewardError("no valid answer"), INFRA, id="remote-rm-down"),
    pytest.param(NonFiniteError("advantages"), INFRA, id="diverged-driver"),
    pytest.param(from_rank(NonFiniteLossError("loss")), INFRA, id="diverged-rank"),
    pytest.param(hub_outage(), INFRA, id="hub-outage"),
    pytest.param(
        caused(DataLoadError("hfId 'x' could not be loaded"), TimeoutError("read")),
        INFRA,
        id="data-hub-timeout",
    ),
    pytest.param(ValueError("unexpected"), INFRA, id="anything-else"),
]


@pytest.mark.parametrize(("err", "expected"), CASES)
def test_classify(err: BaseException, expected: FailureClass) -> None:
    assert classify(err) is expected
    assert exit_code(err) == expected.exit_code


@pytest.mark.parametrize(
    "err",
    [KeyboardInterrupt(), RunFailed(KeyboardInterrupt(), 2, None, None)],
    ids=["before-training", "during-training"],
)
def test_ctrl_c_exits_130(err: BaseException) -> None:
    assert exit_code(err) == ExitCode.INTERRUPTED == 130


def test_exit_codes_the_operator_reads() -> None:
    assert exit_code(JobError("x")) == 78
    assert exit_code(Preempted(1)) == 75
    assert exit_code(RuntimeError("x")) == 1


def test_explain_keeps_what_failed_and_the_error_that_made_it_fail() -> None:
    err = RewardFunctionCodeError(
        "reward function r.py raised an exception:\nTraceback (most recent call last):\n"
        '  File "r.py", line 3, in reward_func\nValueError: the verifier crashed'
    )
    assert explain(from_rank(err)) == (
        "RewardFunctionCodeError: reward function r.py raised an exception: ... "
        "ValueError: the verifier crashed"
    )
    assert explain(RuntimeError()) == "RuntimeError"


@pytest.mark.parametrize(
    ("err", "message"),
    [
        pytest.param(
            RunFailed(Preempted(3), 3, Path("/c/step-000003"), None),
            "preempted (SIGTERM) after 3 completed steps; final checkpoint: /c/step-000003; "
            "a resume (--resume auto) continues there",
            id="preempted-with-its-checkpoint",
        ),
        pytest.param(
            RunFailed(Preempted(3), 3, None, Path("/c/step-000003")),
            "preempted (SIGTERM) after 3 completed steps; last checkpoint: /c/step-000003; "
            "a resume (--resume auto) continues there",
            id="preempted-already-saved",
        ),
        pytest.param(
            RunFailed(RuntimeError("rank died"), 2, None, Path("/c/step-000001")),
            "failed after 2 completed steps: RuntimeError: rank died; no final checkpoint "
            "(models not in a consistent state); last: /c/step-000001",
            id="failed-torn",
        ),
        pytest.param(
            RunFailed(KeyboardInterrupt(), 0, None, None),
            "interrupted after 0 completed steps; no checkpoint",
            id="interrupted",
        ),
        pytest.param(JobError("a.b: wrong\nc.d: wrong"), "a.b: wrong\nc.d: wrong", id="job"),
        pytest.param(DataLoadError("no rows"), "DataLoadError: no rows", id="before-training"),
    ],
)
def test_failure_messages(err: BaseException, message: str) -> None:
    assert failure_message(err) == message
