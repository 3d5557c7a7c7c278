"""How a run ended: its failure class (retry or not), its exit code and the message to read.

`classify` decides by exception type, after unwrapping the runner's `RunFailed` and Ray's task
errors (both carry the exception they wrap as `cause`), whether a retry can help:

- `InvalidSpec` (exit 78, no retry): the job as written cannot run: an `InvalidSpecError`
  (`rlhf_trainer.config.outcome`), whatever raised it. The spec (`JobError`), the
  data (`DataLoadError`: a missing file or key, no rows, bad JSON), the models
  (`ModelLoadError`: not found, not loadable), the user's code (`RewardFunctionLoadError`: the
  reward function file is missing, does not import or lacks `reward_func`;
  `RewardFunctionCodeError`: it raised or returned something that is not rewards;
  `AgentError`: the multi-turn agent file does not import, or its code raised; a reward
  function that reached one of its limits is a `RewardFunctionCodeError` too), an input
  location that does not exist or is denied (`InputLocationError`), a checkpoint the job
  cannot resume as written (`CheckpointRefused`: written for another config, or the one
  `checkpoint.resumeFrom` names is missing or damaged).
- `Preempted` (exit 75, retried without counting against backoffLimit): SIGTERM stopped the
  run at a step boundary, or Ray reports that a node was preempted under an actor.
- `Unhealthy` (exit 65, never retried as it stands): a training-health guardrail
  (`runPolicy.guardrails`) tripped; the step was checkpointed, and the operator suspends the
  job (`action: suspend`, the default) or fails it (`action: fail`).
- `Infrastructure` (exit 1, retried within backoffLimit): everything else: a rank or a node
  lost, an OOM kill, a reward function that timed out or whose process died, a remote reward
  service that does not answer, a diverged run (NaN/inf: a faulty device produces those too,
  and the retry resumes from the last good checkpoint), an error nobody anticipated.

User code that raises in the middle of training (a reward function at step 7) is
`InvalidSpec`: it is a bug in the job, and the retry would replay the same prompts from the
same checkpoint (exactly so in deterministic mode) into the same bug, burning the GPUs of every
retry first. A model or data set that cannot be fetched because the network failed under it
(the Hub's connection errors in the cause chain) is no fault of the spec: `Infrastructure`.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from functools import cache

from rlhf_trainer.config.outcome import ExitCode, FailureClass, InvalidSpecError
from rlhf_trainer.context.health import Unhealthy
from rlhf_trainer.context.job import RunFailed
from rlhf_trainer.context.preemption import Preempted


def unwrap(err: BaseException) -> BaseException:
    """The exception that ended the run: the cause of a `RunFailed`, out of Ray's wrapper (a
    `RayTaskError` holds what the task raised as `cause`; so this needs no Ray import, and a
    job refused before training never pays for one)."""
    if isinstance(err, RunFailed):
        err = err.cause
    cause = getattr(err, "cause", None)
    return cause if isinstance(cause, BaseException) else err


def classify(err: BaseException) -> FailureClass:
    """Whether a retry can help (see the module's docstring for the table and the reasons)."""
    inner = unwrap(err)
    if isinstance(inner, Preempted) or getattr(inner, "preempted", False) is True:
        # The second test: Ray's RayActorError.preempted, an actor lost with a preempted node.
        return FailureClass.PREEMPTED
    if isinstance(inner, Unhealthy):
        return FailureClass.UNHEALTHY
    if isinstance(inner, InvalidSpecError) and not _network_failure(inner):
        return FailureClass.INVALID_SPEC
    return FailureClass.INFRASTRUCTURE


def exit_code(err: BaseException) -> ExitCode:
    inner = err.cause if isinstance(err, RunFailed) else err
    if isinstance(inner, KeyboardInterrupt):
        return ExitCode.INTERRUPTED
    return classify(err).exit_code


def explain(err: BaseException) -> str:
    """The error a user should read: the original exception, unwrapped from Ray's, with a
    traceback (from a rank or a reward function's process) cut to its first and last lines:
    what failed, and the exception that made it fail."""
    inner = unwrap(err)
    name = type(inner).__name__
    lines = [ln.strip() for ln in str(inner).splitlines() if ln.strip()] or [name]
    text = lines[0]
    if len(lines) > 1:
        text = f"{lines[0]} ... {lines[-1]}"
    return text if text.startswith(name) else f"{name}: {text}"


def _causes(err: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _network_failure(err: BaseException) -> bool:
    """Did a connection fail or time out under `err` (a Hub download)? The Hub's offline mode
    is a ConnectionError too, but retrying it cannot help: the files are not in the cache."""
    network, offline = _network_errors()
    return any(isinstance(e, network) and not isinstance(e, offline) for e in _causes(err))


@cache
def _network_errors() -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
    network: list[type[BaseException]] = [ConnectionError, TimeoutError]
    offline: list[type[BaseException]] = []
    # The HTTP clients under the Hub and `datasets`, where installed; their transport errors
    # are not the builtin ones.
    for module, names in (
        ("httpx2", ("TransportError",)),
        ("httpx", ("TransportError",)),
        ("requests", ("ConnectionError", "Timeout")),
    ):
        with contextlib.suppress(ImportError):
            network += [getattr(importlib.import_module(module), n) for n in names]
    with contextlib.suppress(ImportError):
        from huggingface_hub.errors import OfflineModeIsEnabled

        offline.append(OfflineModeIsEnabled)
    return tuple(network), tuple(offline)
