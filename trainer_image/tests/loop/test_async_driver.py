"""The driver with `rollout.async`, on a stand-in cluster (no Ray, no models): the engines'
sampling log-probs reach the actor's update as the old log-probs (no recompute pass), the
staleness is reported, and a checkpoint keeps the batch generated for the next step.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch import Tensor

from rlhf_trainer.checkpoint import CheckpointManager
from rlhf_trainer.config import JobConfig
from rlhf_trainer.distributed.vllm_engine import Generated
from rlhf_trainer.loop.driver import Hooks, Trainer
from rlhf_trainer.loop.schedule import PENDING_ROLLOUTS_FILE


class Done:
    def __init__(self, value: Any) -> None:
        self.value = value

    def result(self) -> Any:
        return self.value


class Cluster:
    """A GRPO step's cluster calls; generation answers with fixed tokens and log-probs."""

    def __init__(self) -> None:
        self.trained: list[dict[str, Tensor]] = []
        self.staged = 0

    def generate(self, ids: list[list[int]], seeds: Any, settings: Any, pad: int) -> Any:
        assert settings.logprobs, "async rollout asks the engines for log-probs"
        reply = Generated(token_ids=[5, 6], logprobs=[-0.5, -0.25], finish_reason="stop")
        return [[reply] * settings.n for _ in ids]

    def train_actor(
        self, batch: dict[str, Tensor], step: int, kl: float, ptx: dict[str, Tensor] | None
    ) -> Done:
        self.trained.append(batch)
        return Done({"policy_loss": 0.1})

    def actor_log_probs(self, batch: Any) -> None:
        raise AssertionError("async: the behaviour log-probs come from the engines")

    def stage_weights(self) -> Callable[[], float]:
        self.staged += 1
        return lambda: 0.0

    def sync_weights(self) -> float:
        return 0.0

    def optimizer_steps(self) -> tuple[int, ...]:
        return (len(self.trained),)

    def save_checkpoint(self, directory: str) -> None:
        (Path(directory) / "weights").write_text(str(len(self.trained)))

    def load_checkpoint(self, directory: str) -> None: ...

    def reference_log_probs(self, batch: Any) -> None:
        return None

    def critic_values(self, batch: Any) -> None:
        return None

    def reward_model_scores(self, batch: Any) -> list[Done]:
        return []

    def weights_finite(self) -> bool:
        return True

    def sleep_engines(self) -> None: ...
    def wake_engines(self) -> None: ...


class Prompts:
    def batches(self, size: int, start: int = 0, *, passes: int | None = 1) -> Iterator[Any]:
        while True:
            items = [
                SimpleNamespace(prompt_text=f"p{i}", prompt_ids=[1, 10 + i], label=None, item=None)
                for i in range(start, start + size)
            ]
            start += size
            yield SimpleNamespace(items=items, position=start)


class Scorer:
    def score(self, samples: list[Any], model_scores: list[Tensor]) -> tuple[Tensor, dict]:
        return torch.arange(len(samples), dtype=torch.float32), {}


class Reporter:
    def __init__(self) -> None:
        self.metrics: list[dict[str, Any]] = []

    def on_step(self, step: int, total: int, metrics: Any, timings: Any, samples: Any) -> None:
        self.metrics.append(dict(metrics))

    def on_checkpoint(self, step: int, path: Path) -> None: ...


class Tokenizer:
    pad_token_id, eos_token_id = 0, 2

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return " ".join(map(str, ids))


def async_job(**algorithm: Any) -> JobConfig:
    """GRPO, 4 steps of 2 prompts x 2 samples, async, a checkpoint every 2 steps."""
    return JobConfig.model_validate(
        {
            "algorithm": {"name": "grpo", "klCoef": 0, **algorithm},
            "models": {
                "actor": {"pretrained": "/m"},
                "rewardFunction": {"builtin": "repeat-letter"},
            },
            "data": {"train": [{"path": "d.jsonl"}]},
            "rollout": {"samplesPerPrompt": 2, "maxNewTokens": 4, "async": True},
            "training": {
                "rolloutBatchSize": 2,
                "trainBatchSize": 4,
                "microTrainBatchSize": 2,
                "microRolloutBatchSize": 2,
                "maxSteps": 4,
            },
            "checkpoint": {"everySteps": 2},
        }
    )


def test_async_steps_train_on_the_engines_log_probs(tmp_path: Path) -> None:
    job = async_job()
    cluster, reporter = Cluster(), Reporter()
    checkpoints = CheckpointManager(tmp_path, keep=5)
    trainer = Trainer(
        job,
        cluster,
        Tokenizer(),
        Prompts(),
        Hooks(Scorer(), checkpoints, reporter),
        total_steps=4,
        export_dir=None,
    )
    state = trainer.fit()
    assert state.step == 4 and state.data_position == 8
    assert cluster.staged == 4
    for batch in cluster.trained:
        assert torch.equal(batch["old_logps"], torch.tensor([[-0.5, -0.25]] * 4))
    assert [m["staleness"] for m in reporter.metrics] == [0.0, 1.0, 1.0, 1.0]
    step2 = json.loads((tmp_path / "step-000002" / PENDING_ROLLOUTS_FILE).read_text())
    assert [r["step"] for r in step2["rollouts"]] == [3]
    assert step2["rollouts"][0]["policy_version"] == 1
    step4 = json.loads((tmp_path / "step-000004" / PENDING_ROLLOUTS_FILE).read_text())
    assert step4["rollouts"] == []  # the last step: nothing generated ahead


class PromptLogProbs(Cluster):
    """Each response's first log-prob names its prompt (`p<i>` -> -i/100): a trained row
    shows which sample, refill rounds included, its behaviour log-probs came from."""

    def generate(self, ids: list[list[int]], seeds: Any, settings: Any, pad: int) -> Any:
        assert settings.logprobs, "every round, refills included, asks for log-probs"
        return [
            [Generated(token_ids=[5, 6], logprobs=[-p[-1] / 100, -0.25], finish_reason="stop")]
            * settings.n
            for p in ids
        ]


class RoundScorer:
    """Prompts `p<i>` with i % 3 == 2 get rewards 0, 1 (informative); others 1, 1."""

    def __init__(self) -> None:
        self.calls = 0

    def score(
        self, samples: list[Any], model_scores: list[Tensor]
    ) -> tuple[Tensor, dict[str, float]]:
        self.calls += 1
        informative = [int(s.prompt_text[1:]) % 3 == 2 for s in samples]
        return torch.tensor([float(j % 2) if k else 1.0 for j, k in enumerate(informative)]), {}


def test_async_dynamic_sampling_trains_full_batches_on_their_behaviour_log_probs(
    tmp_path: Path,
) -> None:
    job = async_job(dynamicSampling=True)
    cluster, reporter, scorer = PromptLogProbs(), Reporter(), RoundScorer()
    trainer = Trainer(
        job,
        cluster,
        Tokenizer(),
        Prompts(),
        Hooks(scorer, CheckpointManager(tmp_path, keep=5), reporter),
        total_steps=4,
        export_dir=None,
    )
    state = trainer.fit()
    # Three rounds of two prompts a step (p6t+2 and p6t+5 kept); the driver never scored.
    assert state.data_position == 24 and scorer.calls == 12
    for t, batch in enumerate(cluster.trained):
        kept = [6 * t + 2, 6 * t + 5]
        first = [-(10 + p) / 100 for p in kept for _ in range(2)]
        assert batch["old_logps"][:, 0].tolist() == pytest.approx(first)
        assert batch["old_logps"][:, 1].tolist() == [-0.25] * 4
    assert [m["staleness"] for m in reporter.metrics] == [0.0, 1.0, 1.0, 1.0]
    assert [m["dynamic_sampling/extra_rounds"] for m in reporter.metrics] == [2.0] * 4
    saved = json.loads((tmp_path / "step-000002" / PENDING_ROLLOUTS_FILE).read_text())
    (step3,) = saved["rollouts"]
    assert (step3["step"], step3["position"], step3["policy_version"]) == (3, 18, 1)
    assert step3["rewards"] == [0.0, 1.0, 0.0, 1.0]
    assert step3["metrics"]["dynamic_sampling/extra_rounds"] == 2.0
