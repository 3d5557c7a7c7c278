"""`models.rewardFunction.onError: zero`: a failing call scores its culprits 0 instead of
ending the run.

Meant for functions that run untrusted model output (generated code, tool calls): a response
that makes the function blow a limit, hang or raise deserves reward 0, and the run should go
on. A failure has no owner within a batch, so the batch is scored again one sample at a time
(each failing call costs up to `timeoutSeconds` and a fresh worker): the samples that fail
alone score 0, the others keep their scores. If every sample of a batch of several fails
alone, the function itself is broken, not the responses: that error ends the run, as under
`fail`. A file that does not load always ends it. `reward/function/errors` logs the share
of a batch scored 0.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import torch

from .function_runner import RewardFunctionError, RewardFunctionLoadError, RewardFunctionRunner
from .output import RewardResult

log = logging.getLogger(__name__)

ERRORS_LOG = "errors"


def _first_line(err: BaseException) -> str:
    return next((ln for ln in str(err).splitlines() if ln.strip()), type(err).__name__)


class ZeroOnError:
    def __init__(self, runner: RewardFunctionRunner) -> None:
        self.runner = runner

    @property
    def name(self) -> str:
        return self.runner.name

    def start(self) -> None:
        self.runner.start()

    def close(self) -> None:
        self.runner.close()

    def __call__(
        self, queries: Sequence[str], prompts: Sequence[str], labels: Sequence[str | None]
    ) -> RewardResult:
        try:
            result = self.runner(queries, prompts, labels)
        except RewardFunctionLoadError:
            raise
        except RewardFunctionError as err:
            log.warning(
                "%s failed on a batch of %d (%s); scoring it one sample at a time "
                "(rewardFunction.onError: zero)",
                self.name,
                len(queries),
                _first_line(err),
            )
        else:
            return RewardResult(
                result.rewards, result.scores, {**result.extra_logs, ERRORS_LOG: 0.0}
            )
        return self._one_by_one(queries, prompts, labels)

    def _one_by_one(
        self, queries: Sequence[str], prompts: Sequence[str], labels: Sequence[str | None]
    ) -> RewardResult:
        rewards, scores = [], []
        logs: dict[str, list[float]] = {}
        failed: list[tuple[int, RewardFunctionError]] = []
        for i, one in enumerate(zip(queries, prompts, labels, strict=True)):
            try:
                result = self.runner([one[0]], [one[1]], [one[2]])
            except RewardFunctionLoadError:
                raise
            except RewardFunctionError as err:
                failed.append((i, err))
                rewards.append(0.0)
                scores.append(0.0)
                continue
            rewards.append(float(result.rewards[0]))
            scores.append(float(result.scores[0]))
            for key, value in result.extra_logs.items():
                logs.setdefault(key, []).append(value)
        if len(failed) == len(queries) > 1:
            raise failed[-1][1]
        for i, error in failed:
            log.warning("%s: sample %d scored 0: %s", self.name, i, _first_line(error))
        extra = {key: sum(values) / len(values) for key, values in logs.items()}
        extra[ERRORS_LOG] = len(failed) / len(queries)
        return RewardResult(
            torch.tensor(rewards, dtype=torch.float32),
            torch.tensor(scores, dtype=torch.float32),
            extra,
        )
