"""The driver on the stand-in cluster of `test_async_driver` (no Ray, no models): on-policy
distillation trains on the teacher's per-token rewards with no reward source; keepBest keeps
the best step's checkpoint besides the newest, exports it as best/, reports it, and a resumed
run knows it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from test_async_driver import Cluster, Done, Prompts, Reporter, Tokenizer
from torch import Tensor

from rlhf_trainer.checkpoint import CheckpointManager
from rlhf_trainer.checkpoint_best import BestCheckpoint
from rlhf_trainer.config import JobConfig
from rlhf_trainer.distributed.vllm_engine import Generated
from rlhf_trainer.loop.driver import Hooks, Trainer

STUDENT = [-1.0, -2.0]  # the trainer's log-probs of the sampled tokens [5, 6]
TEACHER = [-1.5, -0.5]  # the teacher's


class Sync(Cluster):
    """Sync rollout (no engine log-probs); the actor and the teacher score the tokens."""

    def __init__(self) -> None:
        super().__init__()
        self.exported: list[str] = []

    def generate(self, ids: list[list[int]], seeds: Any, settings: Any, pad: int) -> Any:
        reply = Generated(token_ids=[5, 6], logprobs=None, finish_reason="stop")
        return [[reply] * settings.n for _ in ids]

    def actor_log_probs(self, batch: dict[str, Tensor]) -> Done:
        return Done(torch.tensor([STUDENT] * batch["action_mask"].shape[0]))

    def teacher_log_probs(self, batch: dict[str, Tensor]) -> Done:
        return Done(torch.tensor([TEACHER] * batch["action_mask"].shape[0]))

    def export_hf(self, directory: str) -> dict[str, str]:
        self.exported.append(directory)
        (Path(directory) / "actor").mkdir()
        return {"actor": str(Path(directory) / "actor")}


class NoScorer:
    def score(self, samples: list[Any], model_scores: list[Tensor]) -> Any:
        raise AssertionError("on-policy distillation uses no reward source")


class StepScorer:
    """Rewards whose mean is the step's entry of `means` (calls count the steps)."""

    def __init__(self, means: list[float]) -> None:
        self.means, self.calls = means, 0

    def score(self, samples: list[Any], model_scores: list[Tensor]) -> tuple[Tensor, dict]:
        mean = self.means[self.calls]
        self.calls += 1
        return torch.tensor([mean - 0.5, mean + 0.5] * (len(samples) // 2)), {}


class BestReporter(Reporter):
    def __init__(self) -> None:
        super().__init__()
        self.best: list[BestCheckpoint] = []

    def on_best(self, best: BestCheckpoint) -> None:
        self.best.append(best)


def job(**sections: Any) -> JobConfig:
    doc: dict[str, Any] = {
        "algorithm": {"name": "grpo", "klCoef": 0},
        "models": {"actor": {"pretrained": "/m"}, "rewardFunction": {"builtin": "repeat-letter"}},
        "data": {"train": [{"path": "d.jsonl"}]},
        "rollout": {"samplesPerPrompt": 2, "maxNewTokens": 4},
        "training": {
            "rolloutBatchSize": 2,
            "trainBatchSize": 4,
            "microTrainBatchSize": 2,
            "microRolloutBatchSize": 2,
        },
        "checkpoint": {"everySteps": 1, "keep": 1},
    }
    for key, value in sections.items():
        doc[key] = {**doc[key], **value}
    return JobConfig.model_validate(doc)


def trainer(cfg: JobConfig, root: Path, scorer: Any, steps: int) -> tuple[Trainer[Any], Sync]:
    cluster = Sync()
    keep = cfg.checkpoint
    checkpoints = CheckpointManager(root / "checkpoints", keep.keep, keep_best=keep.keep_best)
    hooks = Hooks(scorer, checkpoints, BestReporter())
    made = Trainer(
        cfg, cluster, Tokenizer(), Prompts(), hooks, total_steps=steps, export_dir=root / "final"
    )
    return made, cluster


def test_distillation_trains_on_minus_the_reverse_kl_of_each_token(tmp_path: Path) -> None:
    cfg = job(
        algorithm={"name": "on-policy-distillation"},
        models={
            "actor": {"pretrained": "/m"},
            "rewardFunction": None,
            "teacher": {"pretrained": "/t"},
        },
    )
    run, cluster = trainer(cfg, tmp_path, NoScorer(), 2)
    run.fit()
    reverse = [s - t for s, t in zip(STUDENT, TEACHER, strict=True)]  # [0.5, -1.5]
    for batch in cluster.trained:
        assert batch["advantages"].tolist() == [[-r for r in reverse]] * 4
        assert torch.equal(batch["old_logps"], torch.tensor([STUDENT] * 4))
    reporter = run.hooks.reporter
    assert isinstance(reporter, BestReporter)
    for metrics in reporter.metrics:
        assert metrics["distill/reverse_kl"] == pytest.approx(sum(reverse) / 2)
        assert metrics["reward"] == pytest.approx(-sum(reverse))
        assert metrics["kl"] == 0.0


def test_keep_best_keeps_the_best_step_exports_it_and_a_resume_knows_it(tmp_path: Path) -> None:
    cfg = job(checkpoint={"keepBest": {"metric": "reward", "mode": "max"}})
    run, cluster = trainer(cfg, tmp_path, StepScorer([0.25, 0.75, 0.5, 0.5]), 3)
    run.fit()
    manager = run.checkpoints
    assert isinstance(manager, CheckpointManager)
    assert [c.step for c in manager.checkpoints()] == [2, 3]  # keep: 1 alone keeps [3]
    best = manager.best()
    assert best is not None and (best.step, best.metric, best.score) == (2, "reward", 0.75)
    reporter = run.hooks.reporter
    assert isinstance(reporter, BestReporter)
    assert [(b.step, b.score) for b in reporter.best] == [(1, 0.25), (2, 0.75)]
    # Each new best was exported when its weights were the ranks' (steps 1 and 2), then the
    # final model at the end.
    assert [Path(d).parent for d in cluster.exported] == [tmp_path] * 3
    record = json.loads((tmp_path / "best" / "best.json").read_text())
    assert record == {"step": 2, "metric": "reward", "score": 0.75, "checkpoint": str(best.path)}
    assert (tmp_path / "best" / "actor").is_dir() and (tmp_path / "final" / "actor").is_dir()

    # A resumed run (one more step, worse) knows the best from the manifests and reports it.
    again, cluster = trainer(cfg, tmp_path, StepScorer([0.5]), 4)
    again.fit()
    assert again.resumed_from == 3
    assert again.best == best
    reporter = again.hooks.reporter
    assert isinstance(reporter, BestReporter)
    assert reporter.best == [best]
    assert [c.step for c in again.checkpoints.checkpoints()] == [2, 4]  # type: ignore[attr-defined]
    assert len(cluster.exported) == 1  # the final model only: the best did not change
