"""A multi-turn agent (`rollout.agent.path`, a file defining `AgentInstance`) in its own,
confined process, as a reward function runs (`confined.ConfinedRunner`, `_agent_worker`).

The agent is code nobody reviewed, and it reads model output: it runs in its own session and
process group, under `rollout.agent.limits` (the reward function's limits: memory, CPU per
call, open files, processes, file size, output), with an environment built from the same
allowlist (no HF/W&B/S3/Ray/remote-reward tokens, no Kubernetes variables), and every call
(an episode's reset, a turn's step) has `rollout.agent.timeoutSeconds`.

`ConfinedAgents` keeps the episodes: one request per episode and call, so a failure has an
owner. Under `onError: fail` any failure ends the run, naming the agent, the method and the
limit. Under `onError: zero` the episode whose call failed ends with reward 0 and the others
go on; when the failure killed the worker (a limit, a timeout, a crash), the other episodes'
instances died with it, and each is rebuilt in the fresh worker by replaying its reset and
the steps it already took (their results are discarded: an agent is expected to answer a
replayed turn as it did the first time). If every episode of a rollout of several fails, the
agent itself is broken, not the responses: that error ends the run, as under `fail`.
"""

from __future__ import annotations

import itertools
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlhf_trainer.config import RewardErrorPolicy, RewardFunctionLimits
from rlhf_trainer.config.outcome import InvalidSpecError

from .confined import ConfinedRunner, ErrorKinds

log = logging.getLogger(__name__)

AGENT_WORKER_MODULE = "rlhf_trainer.sandbox._agent_worker"


class AgentFailure(RuntimeError):
    """The agent's call failed: its process died or timed out (maybe the machine's fault)."""


class AgentError(InvalidSpecError, AgentFailure):
    """The user's agent failed: its file does not import or lacks `AgentInstance`, or its
    code raised or returned something unusable (the message names the method)."""


class AgentLimitError(AgentError):
    """The agent reached one of `rollout.agent.limits` (`limit`: its camelCase name)."""

    def __init__(self, message: str, limit: str) -> None:
        super().__init__(message)
        self.limit = limit


class AgentTimeout(AgentFailure):
    pass


class AgentRunner(ConfinedRunner):
    label = "agent"
    field = "rollout.agent"
    timeout_field = "rollout.agent.timeoutSeconds"
    module = AGENT_WORKER_MODULE
    errors = ErrorKinds(
        failed=AgentFailure,
        load=AgentError,
        code=AgentError,
        limit=AgentLimitError,
        timeout=AgentTimeout,
    )

    def call(self, method: str, message: dict[str, Any]) -> dict[str, Any]:
        """One request; a failure's message names `AgentInstance.<method>`."""
        try:
            return self.request(message, f"in AgentInstance.{method}")
        except AgentFailure as err:
            raise type(err)(*_args(err, f"AgentInstance.{method}: {err}")) from err


def _args(err: AgentFailure, message: str) -> tuple[Any, ...]:
    return (message, err.limit) if isinstance(err, AgentLimitError) else (message,)


@dataclass
class _History:
    prompt: str
    label: Any
    steps: list[tuple[str, int]] = field(default_factory=list)  # (response, turn)
    worker: int = 0  # the runner's restart count when its instance was built
    failed: bool = False


class ConfinedAgents:
    """The episodes of every rollout, their agents in one confined worker."""

    def __init__(
        self,
        path: str | Path,
        *,
        timeout_seconds: float = 60.0,
        limits: RewardFunctionLimits | None = None,
        on_error: RewardErrorPolicy = RewardErrorPolicy.FAIL,
    ) -> None:
        self.runner = AgentRunner(path, timeout_seconds, limits=limits)
        self.on_error = on_error
        self._ids = itertools.count()
        self._episodes: dict[int, _History] = {}
        self._lock = threading.Lock()
        self.errors = 0  # episodes ended with reward 0 by `onError: zero`
        self._last_error = ""

    @property
    def name(self) -> str:
        return self.runner.name

    def start(self) -> None:
        """Start the worker: a file that does not load fails here, before training."""
        self.runner.start()

    def close(self) -> None:
        self.runner.close()

    def __enter__(self) -> ConfinedAgents:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def reset(self, prompt: str, label: Any) -> int:
        """A new episode; its id for `step`."""
        with self._lock:
            episode = next(self._ids)
        history = _History(prompt, label, worker=self.runner.restarts)
        self._episodes[episode] = history
        self._guard(episode, lambda: self._reset(episode, history))
        return episode

    def step(self, episode: int, response: str, turn: int) -> dict[str, Any]:
        """`AgentInstance.step`'s dict; under `onError: zero`, a failed call's is
        `{"reward": 0.0, "done": True}` (and the episode is marked failed)."""
        history = self._episodes[episode]
        if history.failed:
            return {"reward": 0.0, "done": True}
        result = self._guard(episode, lambda: self._step(episode, history, response, turn))
        return result if result is not None else {"reward": 0.0, "done": True}

    def failed(self, episode: int) -> bool:
        return self._episodes[episode].failed

    def finish(self, episodes: list[int]) -> None:
        """The rollout of `episodes` ended: release their instances; raise if every one of
        several failed (the agent is broken, not the responses)."""
        histories = [self._episodes.pop(e) for e in episodes]
        if episodes:
            self.runner.call("drop", {"op": "drop", "ids": episodes})
        if len(histories) > 1 and all(h.failed for h in histories):
            raise AgentError(
                f"{self.name} failed on every one of the rollout's {len(histories)} episodes "
                "(rollout.agent.onError: zero scores single failures 0; failing on all is the "
                f"agent's own fault): {self._last_error}"
            )

    def abandon(self, episodes: list[int]) -> None:
        """The rollout of `episodes` ended by an error: forget them (the worker goes with the
        run, or drops them when it is replaced)."""
        for episode in episodes:
            self._episodes.pop(episode, None)

    # --- the calls, and what a failure does ---------------------------------------------------
    def _guard(self, episode: int, call: Any) -> Any:
        try:
            return call()
        except AgentFailure as err:
            if self.on_error != RewardErrorPolicy.ZERO:
                raise
            self._episodes[episode].failed = True
            self.errors += 1
            self._last_error = str(err).splitlines()[0] if str(err) else type(err).__name__
            log.warning(
                "%s: episode scored 0 (rollout.agent.onError: zero): %s",
                self.name,
                self._last_error,
            )
            return None

    def _reset(self, episode: int, history: _History) -> None:
        message = {"op": "reset", "id": episode, "prompt": history.prompt, "label": history.label}
        self.runner.call("reset", message)

    def _step(self, episode: int, history: _History, response: str, turn: int) -> dict[str, Any]:
        if history.worker != self.runner.restarts:
            self._replay(episode, history)
        result = self.runner.call("step", _step_message(episode, history, response, turn))["result"]
        history.steps.append((response, turn))
        return dict(result)

    def _replay(self, episode: int, history: _History) -> None:
        """Rebuild an episode whose instance died with an earlier worker."""
        history.worker = self.runner.restarts
        self._reset(episode, history)
        for response, turn in history.steps:
            self.runner.call("step", _step_message(episode, history, response, turn))
        # Another failure meanwhile started yet another worker: replay again on the next step.
        if history.worker != self.runner.restarts:
            history.worker = -1


def _step_message(episode: int, history: _History, response: str, turn: int) -> dict[str, Any]:
    return {
        "op": "step",
        "id": episode,
        "prompt": history.prompt,
        "response": response,
        "label": history.label,
        "turn": turn,
    }
