"""Builtin reward functions, the example task file, and combining weighted sources."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from reward_server import Script, reward_server

from rlhf_trainer.config import ModelsConfig, RewardFunction
from rlhf_trainer.data.builtin import repeat_letter_answer
from rlhf_trainer.rewards.builtin import BuiltinRewardFunction, response_of
from rlhf_trainer.rewards.function_runner import RewardFunctionLoadError, RewardFunctionRunner
from rlhf_trainer.rewards.output import combine_rewards
from rlhf_trainer.rewards.sources import RewardSources, build_reward_function

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "manifests" / "examples" / "tiny-task"
PROMPT = "<s><|user|>\nRepeat the letter a.</s>\n<|assistant|>\n"

CASES = [
    ("a a a a a a a a", 1.0),
    ("aaaaaaaaaaaa", 1.0),
    ("a", 1 / 8),
    ("", 0.0),
    ("b b b b b b b b", 0.0),
    ("a a a a b b b b", 0.5),
    ("a a a a a a a a b b b b b b b b", 0.5),
    ("a a a a a a a a</s>", 1.0),
]
CASE_IDS = [
    "perfect",
    "no-spaces",
    "one-letter",
    "empty",
    "wrong-letter",
    "half",
    "too-long",
    "eos-left-in",
]


@pytest.mark.parametrize(("response", "reward"), CASES, ids=CASE_IDS)
def test_builtin_repeat_letter(response: str, reward: float) -> None:
    fn = BuiltinRewardFunction("repeat-letter")
    result = fn([PROMPT + response], [PROMPT], ["a"])
    assert result.rewards.tolist() == pytest.approx([reward])
    # Without labels the letter is read from the prompt.
    assert fn([PROMPT + response], [PROMPT], [None]).rewards.tolist() == pytest.approx([reward])


def load_example() -> Any:
    spec = importlib.util.spec_from_file_location("tiny_task_reward", EXAMPLE / "reward_func.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_example_file_agrees_with_the_builtin() -> None:
    example = load_example()
    queries = [PROMPT + r for r, _ in CASES]
    got = example.reward_func(queries, [PROMPT] * len(CASES), ["a"] * len(CASES))
    assert got["rewards"] == pytest.approx([r for _, r in CASES])
    assert repeat_letter_answer("a") == CASES[0][0]


def test_example_file_runs_in_the_worker() -> None:
    with RewardFunctionRunner(EXAMPLE / "reward_func.py") as runner:
        result = runner([PROMPT + "a a a a a a a a", PROMPT + "b"], [PROMPT] * 2, ["a", "a"])
    assert result.rewards.tolist() == [1.0, 0.0]
    assert result.scores.tolist() == [1.0, 0.0]
    assert set(result.extra_logs) == {"response_chars"}


@pytest.mark.parametrize(
    ("query", "prompt", "response"),
    [
        ("P: x", "P: ", "x"),
        ("<|user|>\nhi\n<|assistant|>\nyes", "something else", "yes"),
        ("no marker", "other", "no marker"),
    ],
    ids=["prefix", "assistant-marker", "fallback-whole"],
)
def test_response_of(query: str, prompt: str, response: str) -> None:
    assert response_of(query, prompt) == response


def test_unknown_builtin_lists_the_available() -> None:
    with pytest.raises(ValueError, match="unknown; available: repeat-letter"):
        BuiltinRewardFunction("nope")


def test_combine_rewards_weights_and_checks_shapes() -> None:
    a, b = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 2.0])
    assert combine_rewards([(1.0, a), (0.5, b)]).tolist() == [1.0, 1.0]
    with pytest.raises(ValueError, match="same shape"):
        combine_rewards([(1.0, a), (1.0, torch.zeros(3))])
    with pytest.raises(ValueError, match="at least one"):
        combine_rewards([])


def test_config_map_reference_is_read_from_the_operators_mount(tmp_path: Path) -> None:
    cfg = RewardFunction.model_validate({"configMapRef": {"name": "cm", "key": "r.py"}})
    with pytest.raises(RewardFunctionLoadError, match=r"use rewardFunction\.path"):
        build_reward_function(cfg, tmp_path, mount_dir=tmp_path)
    (tmp_path / "r.py").write_text("def reward_func(q, p, l):\n    return [0.0] * len(q)\n")
    fn = build_reward_function(cfg, tmp_path, mount_dir=tmp_path)
    try:
        assert fn(["x"], ["x"], [None]).rewards.tolist() == [0.0]
    finally:
        fn.close()


def test_start_loads_the_reward_function_file_before_any_scoring(tmp_path: Path) -> None:
    (tmp_path / "rf.py").write_text("import no_such_module\n")
    models = ModelsConfig.model_validate(
        {"actor": {"pretrained": "/m"}, "rewardFunction": {"path": "rf.py"}}
    )
    sources = RewardSources(models, tmp_path)
    try:
        with pytest.raises(RewardFunctionLoadError, match=r"cannot load(.|\n)*no_such_module"):
            sources.start()
    finally:
        sources.close()


def test_all_sources_are_weighted_and_summed(tmp_path: Path) -> None:
    (tmp_path / "rf.py").write_text(
        "def reward_func(q, p, l):\n"
        "    return {'rewards': [1.0] * len(q), 'extra_logs': {'calls': 1}}\n"
    )
    script = Script([(200, {"rewards": [2.0, 4.0]})])
    with reward_server(script) as url:
        models = ModelsConfig.model_validate(
            {
                "actor": {"pretrained": "x"},
                "rewardModels": [{"pretrained": "rm", "weight": 0.5}],
                "rewardFunction": {"path": "rf.py", "weight": 2.0},
                "remoteReward": {"url": url, "weight": 0.25, "allowInsecureHttp": True},
            }
        )
        sources = RewardSources(models, tmp_path)
        try:
            total, metrics = sources.score(
                ["q1", "q2"], ["p", "p"], [None, None], [torch.tensor([4.0, 0.0])]
            )
        finally:
            sources.close()
    # 0.5 * model + 2 * function + 0.25 * remote
    assert total.tolist() == [0.5 * 4 + 2 * 1 + 0.25 * 2, 0.5 * 0 + 2 * 1 + 0.25 * 4]
    assert metrics == {
        "reward/model_0": 2.0,
        "reward/function": 1.0,
        "score/function": 1.0,
        "reward/function/calls": 1.0,
        "reward/remote": 3.0,
        "score/remote": 3.0,
    }
    with pytest.raises(ValueError, match="1 configured reward models"):
        sources.score(["q"], ["p"], [None], [])


def test_a_score_range_maps_the_models_raw_scores_by_a_sigmoid(tmp_path: Path) -> None:
    """`scoreRange: [low, high]` (an OpenAI score_model grader's range): low + (high - low)
    * sigmoid(raw); a model without one keeps its raw scores."""
    models = ModelsConfig.model_validate(
        {
            "actor": {"pretrained": "x"},
            "rewardModels": [
                {"pretrained": "judge", "scoreRange": [-1.0, 3.0]},
                {"pretrained": "rm", "weight": 2.0},
            ],
        }
    )
    raw = torch.tensor([0.0, 2.0, -50.0, 50.0])
    sources = RewardSources(models, tmp_path)
    try:
        total, metrics = sources.score(["q"] * 4, ["p"] * 4, [None] * 4, [raw, raw])
    finally:
        sources.close()
    mapped = [-1.0 + 4.0 / (1.0 + math.exp(-s)) for s in raw.tolist()]
    assert mapped[0] == 1.0 and mapped[2] == pytest.approx(-1.0) and mapped[3] == 3.0
    assert total.tolist() == pytest.approx(
        [m + 2.0 * r for m, r in zip(mapped, raw.tolist(), strict=True)]
    )
    assert metrics["reward/model_0"] == pytest.approx(sum(mapped) / 4)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"scoreRange": [1.0, 1.0]}, "low < high"),
        ({"scoreRange": [0.0]}, "at least 2 items"),
        ({"scoreRange": [0.0, 1.0], "process": {}}, "process reward model"),
    ],
    ids=["empty-range", "one-bound", "process-model"],
)
def test_score_range_is_checked(entry: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ModelsConfig.model_validate(
            {"actor": {"pretrained": "x"}, "rewardModels": [{"pretrained": "rm", **entry}]}
        )
