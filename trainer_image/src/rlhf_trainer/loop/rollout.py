"""Generation: single-turn rollouts and the token-in/token-out multi-turn agent executor.

Token ids go to the engines and come back as ids; the executor appends them to each
episode's context unchanged (never decode-then-re-encode, which drifts: BPE does not
round-trip). Environment feedback is encoded once and appended with action mask 0, so the
policy is trained only on tokens it generated.

A user's agent file defines `AgentInstance` (one instance per episode, in the agent's own
confined process: `rewards.agent_runner`):

    class AgentInstance:
        def reset(self, prompt: str, label) -> None: ...
        def step(self, prompt: str, response: str, label, turn: int) -> dict:
            return {"reward": 1.0 or None, "feedback": "text for the next turn", "done": False}

`response` is the text of the latest turn only. An episode ends when `done` is true, after
`maxTurns` turns, or when the context would exceed the model's length. A file that does not
import, agent code that raises or reaches one of `rollout.agent.limits`, is `AgentError`: a
fault of the job, not of the machine (under `onError: zero`, only that episode's reward is 0).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from rlhf_trainer.config import JobConfig

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
    item: dict[str, Any] | None = None


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
                    item=prompt.item,
                    response_text=tokenizer.decode(list(ids), skip_special_tokens=True),
                    logprobs=_logprobs(response),
                    weight_versions=_versions(response),
                )
            )
    return samples


class Agents(Protocol):
    """The job's agent, one instance per episode (`rewards.agent_runner.ConfinedAgents`: in
    its own confined process, as a reward function)."""

    def reset(self, prompt: str, label: Any) -> int: ...
    def step(self, episode: int, response: str, turn: int) -> dict[str, Any]: ...
    def finish(self, episodes: list[int]) -> None: ...
    def abandon(self, episodes: list[int]) -> None: ...


@dataclass
class _Episode:
    prompt: PromptInput
    agent: int  # the episode's id with `Agents`
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
    agents: Agents,
    max_context: int,
    stream: str = "",
) -> list[Sample]:
    """Run one episode per (prompt, sample): generate, let the agent answer, repeat."""
    n = cfg.rollout.samples_per_prompt
    episodes = [
        _Episode(p, agents.reset(p.text, p.label), [], []) for p in prompts for _ in range(n)
    ]
    try:
        _turns(episodes, generate, tokenizer, cfg, step, agents, max_context, stream)
    except BaseException:
        agents.abandon([e.agent for e in episodes])
        raise
    agents.finish([e.agent for e in episodes])
    return [
        Sample(
            prompt_index=e.prompt.index,
            prompt_ids=list(e.prompt.ids),
            response_ids=e.response_ids,
            action_mask=e.action_mask,
            finish_reason=e.finish_reason,
            prompt_text=e.prompt.text,
            label=e.prompt.label,
            item=e.prompt.item,
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


def _turns(
    episodes: list[_Episode],
    generate: GenerateFn,
    tokenizer: Tokenizer,
    cfg: JobConfig,
    step: int,
    agents: Agents,
    max_context: int,
    stream: str,
) -> None:
    max_turns = cfg.rollout.agent.max_turns if cfg.rollout.agent else 1
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
            _advance(episode, ids, reason, tokenizer, agents, turn, turn + 1 == max_turns)


def _advance(
    episode: _Episode,
    ids: list[int],
    reason: str,
    tokenizer: Tokenizer,
    agents: Agents,
    turn: int,
    last: bool,
) -> None:
    episode.response_ids += ids
    episode.action_mask += [1] * len(ids)
    episode.turns = turn + 1
    episode.finish_reason = reason
    result = agents.step(episode.agent, tokenizer.decode(ids, skip_special_tokens=True), turn)
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
