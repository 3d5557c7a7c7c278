"""How a trainer run ends, as both sides read it: the process exit code and the failure class.

The trainer exits with one of `ExitCode` and, on a cluster, writes the same outcome into its
report (`status.trainer.outcome`, with the attempt it belongs to) before exiting. The operator
decides from it whether a retry can help: `INVALID` ends the job at once (no retries),
`PREEMPTED` is retried without counting against `runPolicy.backoffLimit`, `UNHEALTHY` (a
guardrail tripped) suspends or fails the job as `runPolicy.guardrails.action` says, `FAILED`
(anything else: a crashed rank, a lost node, an OOM kill) is retried within the backoff limit.

The codes follow sysexits(3) where one fits, so they never collide with a signal's 128 + N.

Every error that means "the job as written cannot run" derives from `InvalidSpecError`, so the
runner classifies an outcome by one `isinstance`, without knowing (or importing) the modules
that raise them.
"""

from __future__ import annotations

from enum import IntEnum, StrEnum


class ExitCode(IntEnum):
    SUCCEEDED = 0
    # Retryable: infrastructure or an unexpected error (the default for anything unclassified).
    FAILED = 1
    # A SIGTERM (node drain, Kueue eviction, spot reclaim): the last finished step is
    # checkpointed, and a retry resumes from it (EX_TEMPFAIL).
    PREEMPTED = 75
    # A training-health guardrail tripped (runPolicy.guardrails): the step is checkpointed;
    # the job is suspended or failed, never retried as it stands (EX_DATAERR).
    UNHEALTHY = 65
    # A retry cannot fix it: the spec, the data, the reward function or the model (EX_CONFIG).
    INVALID = 78
    # Ctrl-C on a local run.
    INTERRUPTED = 130


class FailureClass(StrEnum):
    """Why an attempt ended without success, as conditions and the trainer report say it."""

    # The job as written cannot run: a field, a data set key, a reward function that does not
    # import, a model that does not exist. Not retried.
    INVALID_SPEC = "InvalidSpec"
    # Stopped from outside with time to checkpoint. Retried, not counted against backoffLimit.
    PREEMPTED = "Preempted"
    # A training-health guardrail tripped: suspended or failed per its `action`, not retried.
    UNHEALTHY = "Unhealthy"
    # Anything else: retried within runPolicy.backoffLimit.
    INFRASTRUCTURE = "Infrastructure"

    @property
    def exit_code(self) -> ExitCode:
        return _EXIT_CODES[self]

    @property
    def retryable(self) -> bool:
        return self not in (FailureClass.INVALID_SPEC, FailureClass.UNHEALTHY)

    @classmethod
    def from_exit_code(cls, code: int) -> FailureClass | None:
        """The class of a non-zero exit code (None for success); unknown codes, signals
        included (137 = SIGKILL, e.g. an OOM kill), are infrastructure failures."""
        if code == ExitCode.SUCCEEDED:
            return None
        for failure, exit_code in _EXIT_CODES.items():
            if code == exit_code:
                return failure
        return cls.INFRASTRUCTURE


class InvalidSpecError(Exception):
    """The job as written cannot run, and a retry cannot fix it (`FailureClass.INVALID_SPEC`):
    the spec, the data, the models, the user's code, an input location or a checkpoint the job
    cannot resume. Each module's error derives from it beside its usual base
    (`class DataLoadError(InvalidSpecError, RuntimeError)`)."""


_EXIT_CODES = {
    FailureClass.INVALID_SPEC: ExitCode.INVALID,
    FailureClass.PREEMPTED: ExitCode.PREEMPTED,
    FailureClass.UNHEALTHY: ExitCode.UNHEALTHY,
    FailureClass.INFRASTRUCTURE: ExitCode.FAILED,
}
