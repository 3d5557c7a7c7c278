"""Generation: single-turn rollouts and the token-in/token-out multi-turn agent executor.

Token ids go to the engines and come back as ids; the executor appends them to each
episode's context unchanged (never decode-then-re-encode, which drifts: BPE does not
round-trip). Environment feedback is encoded once and appended with action mask 0, so the
policy is trained only on tokens it generated.

A user's agent file defines `AgentInstance` (one instance per episode):

    class AgentInstance:
        def reset(self, prompt: str, label) -> None: ...
        def step(self, prompt: str, response: str, label, turn: int) -> dict:
            return {"reward": 1.0 or None, "feedback": "text for the next turn", "done": False}

`response` is the text of the latest turn only. An episode ends when `done` is true, after
`maxTurns` turns, or when the context would exceed the model's length. A file that does not
import, or agent code that raises, is `AgentError`: a fault of the job, not of the machine.
"""

from __future__ import annotations

import importlib.util
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rlhf_trainer.config import JobConfig
from rlhf_trainer.config.outcome import InvalidSpecError

from .batch import Sample

# One response: (ids, finish_reason), or (ids, finish_reason, sampling log-probs of the ids),
# or with the weight versions that sampled the ids, oldest first (partial rollout).
Response = (
    tuple[list[int], str]
    | tuple[list[int], str, list[float]]
    | tuple[list[int], str, list[float], tuple[int, ...]]
)
# generate(prompt token lists, seeds, n, max_new_tokens) -> per prompt, n responses
GenerateFn = Callable[[list[list[int]], list[int], int, int], list[list[Response]]]


def _logprobs(response: Response) -> list[float] | None:
    return list(response[2]) if len(response) > 2 else None


def _versions(response: Response) -> list[int]:
    return list(response[3]) if len(response) > 3 else []


class Tokenizer(Protocol):
    def decode(self, ids: list[int], skip_special_tokens: bool = ...) -> str: ...
    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...


@dataclass(frozen=True)
class PromptInput:
    index: int
    text: str
    ids: list[int]
    label: Any


def sample_seeds(seed: int, step: int, count: int, turn: int = 0, stream: str = "") -> list[int]:
    """One sampling seed per prompt, a function of (run seed, step, prompt, turn) only;
    `stream` names other generations of the same step (a dynamic-sampling round, evaluation)
    so that they draw apart from the step's first."""
    tail = f"/{stream}" if stream else ""
    return [
        zlib.crc32(f"{seed}/{step}/{i}/{turn}{tail}".encode()) & 0x7FFFFFFF for i in range(count)
    ]


def single_turn(
    prompts: list[PromptInput],
    generate: GenerateFn,
    tokenizer: Tokenizer,
    cfg: JobConfig,
    step: int,
    stream: str = "",
) -> list[Sample]:
    """`samplesPerPrompt` responses per prompt, laid out prompt by prompt (groups adjacent)."""
    n = cfg.rollout.samples_per_prompt
    seeds = sample_seeds(cfg.training.seed, step, len(prompts), stream=stream)
    outputs = generate([p.ids for p in prompts], seeds, n, cfg.rollout.max_new_tokens)
    samples = []
    for prompt, responses in zip(prompts, outputs, strict=True):
        for response in responses:
            ids, reason = response[0], response[1]
            samples.append(
                Sample(
                    prompt_index=prompt.index,
                    prompt_ids=list(prompt.ids),
                    response_ids=list(ids),
                    action_mask=[1] * len(ids),
                    finish_reason=reason,
                    prompt_text=prompt.text,
                    label=prompt.label,
                    response_text=tokenizer.decode(list(ids), skip_special_tokens=True),
                    logprobs=_logprobs(response),
                    weight_versions=_versions(response),
                )
            )
    return samples


class AgentError(InvalidSpecError, RuntimeError):
    """The user's agent failed: its file does not import or lacks `AgentInstance`, or its
    code raised (the message names the method and keeps the user's error)."""


def load_agent_class(path: Path) -> type:
    """`AgentInstance` from a user's Python file."""
    spec = importlib.util.spec_from_file_location(f"rlhf_agent_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise AgentError(f"rollout.agent.path: cannot import {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as err:
        raise AgentError(
            f"rollout.agent.path: cannot import {path}: {type(err).__name__}: {err}"
        ) from err
    cls = getattr(module, "AgentInstance", None)
    if not isinstance(cls, type):
        raise AgentError(f"rollout.agent.path: {path} must define a class AgentInstance")
    return cls


def _agent_call(what: str, fn: Callable[..., Any], *args: Any) -> Any:
    """Call the user's agent code; its exceptions become `AgentError` naming the method."""
    try:
        return fn(*args)
    except Exception as err:
        raise AgentError(f"AgentInstance.{what} raised {type(err).__name__}: {err}") from err


@dataclass
class _Episode:
    prompt: PromptInput
    agent: Any
    response_ids: list[int]
    action_mask: list[int]
    reward: float | None = None
    done: bool = False
    turns: int = 0
    finish_reason: str = "length"
    # Sampling log-probs, aligned with response_ids (0 for feedback); None if not returned.
    logprobs: list[float] | None = None
    versions: list[int] = field(default_factory=list)


def multi_turn(
    prompts: list[PromptInput],
    generate: GenerateFn,
    tokenizer: Tokenizer,
    cfg: JobConfig,
    step: int,
    agent_cls: type,
    max_context: int,
    stream: str = "",
) -> list[Sample]:
    """Run one episode per (prompt, sample): generate, let the agent answer, repeat."""
    n = cfg.rollout.samples_per_prompt
    max_turns = cfg.rollout.agent.max_turns if cfg.rollout.agent else 1
    episodes = []
    for p in prompts:
        for _ in range(n):
            agent = _agent_call("__init__", agent_cls)
            if hasattr(agent, "reset"):
                _agent_call("reset", agent.reset, p.text, p.label)
            episodes.append(_Episode(p, agent, [], []))
    for turn in range(max_turns):
        active = [(i, e) for i, e in enumerate(episodes) if not e.done]
        if not active:
            break
        contexts = [e.prompt.ids + e.response_ids for _, e in active]
        budget = min(cfg.rollout.max_new_tokens, max_context - max(len(c) for c in contexts))
        if budget <= 0:
            break
        seeds = sample_seeds(cfg.training.seed, step, len(episodes), turn, stream)
        outputs = generate(contexts, [seeds[i] for i, _ in active], 1, budget)
        for (_, episode), [response] in zip(active, outputs, strict=True):
            if turn == 0:
                episode.logprobs = [] if len(response) > 2 else None
            if episode.logprobs is not None:
                episode.logprobs += _logprobs(response) or []
            episode.versions += [v for v in _versions(response) if v not in episode.versions]
            ids, reason = list(response[0]), response[1]
            _advance(episode, ids, reason, tokenizer, turn, turn + 1 == max_turns)
    return [
        Sample(
            prompt_index=e.prompt.index,
            prompt_ids=list(e.prompt.ids),
            response_ids=e.response_ids,
            action_mask=e.action_mask,
            finish_reason=e.finish_reason,
            prompt_text=e.prompt.text,
            label=e.prompt.label,
            response_text=tokenizer.decode(
                [t for t, m in zip(e.response_ids, e.action_mask, strict=True) if m],
                skip_special_tokens=True,
            ),
            agent_reward=e.reward,
            turns=e.turns,
            logprobs=e.logprobs,
            weight_versions=e.versions,
        )
        for e in episodes
    ]


def _advance(
    episode: _Episode, ids: list[int], reason: str, tokenizer: Tokenizer, turn: int, last: bool
) -> None:
    episode.response_ids += ids
    episode.action_mask += [1] * len(ids)
    episode.turns = turn + 1
    episode.finish_reason = reason
    text = tokenizer.decode(ids, skip_special_tokens=True)
    result = _agent_call(
        "step", episode.agent.step, episode.prompt.text, text, episode.prompt.label, turn
    )
    if not isinstance(result, dict):
        raise AgentError(
            "AgentInstance.step must return a dict with reward/feedback/done; "
            f"got {type(result).__name__}"
        )
    reward = result.get("reward")
    if reward is not None:
        episode.reward = (episode.reward or 0.0) + float(reward)
    episode.done = bool(result.get("done", False)) or last
    feedback = result.get("feedback") or ""
    if feedback and not episode.done:
        feedback_ids = tokenizer.encode(str(feedback), add_special_tokens=False)
        episode.response_ids += feedback_ids
        episode.action_mask += [0] * len(feedback_ids)
        if episode.logprobs is not None:
            episode.logprobs += [0.0] * len(feedback_ids)
