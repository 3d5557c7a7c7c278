"""Samples -> tensors, and the token-in/token-out rollout executors (with a scripted engine)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from rlhf_trainer.config import JobConfig
from rlhf_trainer.distributed.forward import trim_padding
from rlhf_trainer.loop.batch import Sample, to_batch
from rlhf_trainer.loop.rollout import PromptInput, multi_turn, sample_seeds, single_turn
from rlhf_trainer.rewards.agent_runner import AgentError, ConfinedAgents

PAD = 0


def sample(prompt: list[int], response: list[int], mask: list[int] | None = None) -> Sample:
    return Sample(0, prompt, response, mask or [1] * len(response), "stop")


def test_to_batch_left_pads_prompts_and_right_pads_responses() -> None:
    batch = to_batch([sample([5, 6, 7], [8, 9]), sample([5], [8, 9, 10], [1, 0, 1])], PAD)
    assert batch["input_ids"].tolist() == [[5, 6, 7, 8, 9, 0], [0, 0, 5, 8, 9, 10]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1, 1, 0], [0, 0, 1, 1, 1, 1]]
    assert batch["action_mask"].tolist() == [[1, 1, 0], [1, 0, 1]]


def test_trim_padding_keeps_the_response_as_the_last_columns() -> None:
    batch = to_batch([sample([5, 6], [8]), sample([5], [8, 9])], PAD)
    batch["old_logps"] = torch.tensor([[-1.0, 0.0], [-1.0, -2.0]])
    batch = {k: v[:1] for k, v in batch.items()}  # row 0 only: one response token, wide prompt
    trimmed = trim_padding(batch)
    assert trimmed["input_ids"].tolist() == [[5, 6, 8]]
    assert trimmed["action_mask"].tolist() == [[1]]
    assert trimmed["old_logps"].tolist() == [[-1.0]]


def test_mismatched_action_mask_is_rejected() -> None:
    with pytest.raises(ValueError, match="action_mask has 1 entries for 2"):
        Sample(0, [1], [2, 3], [1], "stop")


class CharTokenizer:
    """One token per character (ord), enough to test that ids are never re-tokenised."""

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return "".join(chr(i) for i in ids)


def cfg(**rollout: Any) -> JobConfig:
    return JobConfig.model_validate(
        {
            "algorithm": {"name": "grpo"},
            "models": {"actor": {"randomInit": {}}, "rewardFunction": {"builtin": "repeat-letter"}},
            "data": {"train": [{"builtin": "repeat-letter"}]},
            "rollout": {"samplesPerPrompt": 2, "maxNewTokens": 4, **rollout},
            "training": {"rolloutBatchSize": 2, "trainBatchSize": 4, "microTrainBatchSize": 2},
        }
    )


class ScriptedEngine:
    """Answers every context with the next scripted ids; records what it was asked."""

    def __init__(self, answers: list[list[int]]) -> None:
        self.answers, self.calls = list(answers), []

    def __call__(
        self, prompts: list[list[int]], seeds: list[int], n: int, max_new: int
    ) -> list[list[tuple[list[int], str]]]:
        self.calls.append((prompts, seeds, n, max_new))
        return [[(self.answers.pop(0), "stop") for _ in range(n)] for _ in prompts]


PROMPTS = [PromptInput(0, "ab", [97, 98], "x"), PromptInput(1, "c", [99], "y")]


def test_single_turn_lays_out_groups_prompt_by_prompt() -> None:
    engine = ScriptedEngine([[1], [2], [3], [4]])
    samples = single_turn(PROMPTS, engine, CharTokenizer(), cfg(), step=3)
    assert [(s.prompt_index, s.response_ids, s.label) for s in samples] == [
        (0, [1], "x"),
        (0, [2], "x"),
        (1, [3], "y"),
        (1, [4], "y"),
    ]
    assert engine.calls[0][1] == sample_seeds(42, 3, 2)


def test_each_sample_carries_its_prompts_row_to_the_reward() -> None:
    rows = [{"letter": "a"}, {"letter": "b", "meta": [1]}]
    prompts = [
        PromptInput(p.index, p.text, p.ids, p.label, row)
        for p, row in zip(PROMPTS, rows, strict=True)
    ]
    samples = single_turn(prompts, ScriptedEngine([[1], [2], [3], [4]]), CharTokenizer(), cfg(), 1)
    assert [s.item for s in samples] == [rows[0], rows[0], rows[1], rows[1]]


def test_sampling_seeds_depend_on_step_prompt_and_turn_only() -> None:
    assert sample_seeds(1, 2, 3) == sample_seeds(1, 2, 3)
    assert len(set(sample_seeds(1, 2, 3) + sample_seeds(1, 3, 3) + sample_seeds(1, 2, 3, 1))) == 9


AGENT = """
class AgentInstance:
    def reset(self, prompt, label):
        self.turns = 0

    def step(self, prompt, response, label, turn):
        self.turns += 1
        done = response.endswith("!")
        return {"reward": 1.0 if done else 0.0, "feedback": "<" + str(turn) + ">", "done": done}
"""


def test_multi_turn_keeps_generated_ids_and_masks_feedback(tmp_path: Path) -> None:
    path = tmp_path / "agent.py"
    path.write_text(AGENT)
    # Two episodes per prompt; episode 0 finishes in turn 1, the others in turn 2.
    first = [[ord("!")], [ord("z")], [ord("y")], [ord("w")]]
    second = [[ord("o"), ord("!")], [ord("p"), ord("!")], [ord("q"), ord("!")]]
    engine = ScriptedEngine(first + second)
    job = cfg(agent={"mode": "multi-turn", "path": str(path), "maxTurns": 3})
    with ConfinedAgents(path) as agents:
        samples = multi_turn(PROMPTS, engine, CharTokenizer(), job, 0, agents, max_context=64)

    assert samples[0].response_ids == [ord("!")] and samples[0].agent_reward == 1.0
    feedback = [ord(c) for c in "<0>"]
    assert samples[1].response_ids == [ord("z"), *feedback, ord("o"), ord("!")]
    assert samples[1].action_mask == [1, 0, 0, 0, 1, 1]
    assert samples[1].turns == 2 and samples[1].agent_reward == 1.0
    # The second turn was generated from the exact ids of turn one plus the feedback.
    assert engine.calls[1][0][0] == [97, 98, ord("z"), *feedback]
    assert engine.calls[1][2] == 1


def test_agent_file_without_agent_instance_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "bad.py"
    path.write_text("x = 1\n")
    with ConfinedAgents(path) as agents, pytest.raises(AgentError, match="must define a class"):
        agents.start()


def test_an_agent_file_that_does_not_import_is_named(tmp_path: Path) -> None:
    path = tmp_path / "agent.py"
    path.write_text("import no_such_module\n")
    with ConfinedAgents(path) as agents, pytest.raises(AgentError, match="no_such_module"):
        agents.start()


def test_agent_code_that_raises_is_an_agent_error_naming_the_method(tmp_path: Path) -> None:
    path = tmp_path / "agent.py"
    path.write_text(AGENT.replace("self.turns += 1", "self.turns += 1 / 0"))
    engine = ScriptedEngine([[ord("!")]] * 4)
    job = cfg(agent={"mode": "multi-turn", "path": str(path), "maxTurns": 3})
    with (
        ConfinedAgents(path) as agents,
        pytest.raises(AgentError, match=r"(?s)AgentInstance\.step: .*ZeroDivisionError"),
    ):
        multi_turn(PROMPTS, engine, CharTokenizer(), job, 0, agents, 64)
