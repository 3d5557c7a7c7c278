"""Run a user's `reward_func(queries, prompts, labels)` file in its own, confined process
(`confined.ConfinedRunner`, shared with multi-turn agents): a plain subprocess, so it works the
same from a script, a test or a Ray actor, and a reward function cannot hang or crash the
driver. An exception comes back as `RewardFunctionCodeError` carrying the user's traceback; a
broken limit as `RewardFunctionLimitError` naming the limit, its value and the field to change;
a worker that dies otherwise is reported with its exit status and replaced on the next call.

The error types say whose fault a failure is (the runner retries a job or not by them): the
file (`RewardFunctionLoadError`) and the code (`RewardFunctionCodeError`, limits included: a
function that needs more than its job allows is a bug in the job) are the job's; a timeout or a
dead process (`RewardFunctionTimeout`, `RewardFunctionError`) may be the machine's.
"""

from __future__ import annotations

from collections.abc import Sequence

from rlhf_trainer.config.outcome import InvalidSpecError
from rlhf_trainer.sandbox.process import WORKER_MODULE

from .confined import ConfinedRunner, ErrorKinds
from .output import RewardOutputError, RewardResult, parse_reward_output


class RewardFunctionError(RuntimeError):
    """The reward function failed: it raised, returned bad values, timed out or crashed."""


class RewardFunctionLoadError(InvalidSpecError, RewardFunctionError):
    """The file does not exist, does not import, or defines no `reward_func`."""


class RewardFunctionCodeError(InvalidSpecError, RewardFunctionError):
    """The user's `reward_func` raised, or returned something that is not rewards."""


class RewardFunctionLimitError(RewardFunctionCodeError):
    """The function reached one of `models.rewardFunction.limits` (`limit`: its camelCase
    name)."""

    def __init__(self, message: str, limit: str) -> None:
        super().__init__(message)
        self.limit = limit


class RewardFunctionTimeout(RewardFunctionError):
    pass


class RewardFunctionRunner(ConfinedRunner):
    """Calls `reward_func` from `path` in a worker process; `close()` (or `with`) stops it."""

    label = "reward function"
    field = "models.rewardFunction"
    timeout_field = "rewardFunction.timeoutSeconds"
    module = WORKER_MODULE
    errors = ErrorKinds(
        failed=RewardFunctionError,
        load=RewardFunctionLoadError,
        code=RewardFunctionCodeError,
        limit=RewardFunctionLimitError,
        timeout=RewardFunctionTimeout,
    )

    def __call__(
        self, queries: Sequence[str], prompts: Sequence[str], labels: Sequence[str | None]
    ) -> RewardResult:
        if not (len(queries) == len(prompts) == len(labels)):
            raise ValueError("queries, prompts and labels must have the same length")
        message = {"queries": list(queries), "prompts": list(prompts), "labels": list(labels)}
        reply = self.request(message, f"for {len(queries)} queries")
        try:
            return parse_reward_output(reply["result"], len(queries), self.name)
        except RewardOutputError as err:
            raise RewardFunctionCodeError(str(err)) from err
