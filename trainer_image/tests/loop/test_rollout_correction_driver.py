"""The driver with `algorithm.rolloutCorrection`, on the stand-in cluster of
`test_async_driver` (no Ray, no models): the engines are asked for log-probs in sync and async
rollout alike, the trainer's log-probs are recomputed before the update and become the
ratio's `old_logps`, the engines' travel as `rollout_logps` to the actor, and each step
reports the mismatch between the two over the whole batch.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
from test_async_driver import Cluster, Done, Prompts, Reporter, Scorer, Tokenizer, async_job
from torch import Tensor

from rlhf_trainer.checkpoint import CheckpointManager
from rlhf_trainer.config import JobConfig
from rlhf_trainer.loop.driver import Hooks, Trainer

ENGINE = [-0.5, -0.25]  # the engines' sampling log-probs of tokens [5, 6] (Cluster.generate)
TRAINER = [-0.4, -1.25]  # the trainer's log-probs of the same tokens


class Recomputing(Cluster):
    """The stand-in cluster, whose actor recomputes log-probs (the trainer's view)."""

    def __init__(self) -> None:
        super().__init__()
        self.recomputed = 0

    def actor_log_probs(self, batch: dict[str, Tensor]) -> Done:
        self.recomputed += 1
        rows = batch["action_mask"].shape[0]
        return Done(torch.tensor([TRAINER] * rows))


def job(asynchronous: bool, **correction: Any) -> JobConfig:
    cfg = async_job(rolloutCorrection={"mode": "tis", **correction})
    doc = cfg.to_manifest()
    doc["rollout"]["async"] = asynchronous
    return JobConfig.model_validate(doc)


def run(cfg: JobConfig, tmp_path: Path) -> tuple[Recomputing, Reporter]:
    cluster, reporter = Recomputing(), Reporter()
    trainer = Trainer(
        cfg,
        cluster,
        Tokenizer(),
        Prompts(),
        Hooks(Scorer(), CheckpointManager(tmp_path, keep=5), reporter),
        total_steps=4,
        export_dir=None,
    )
    assert trainer.fit().step == 4
    return cluster, reporter


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_correction_trains_on_the_trainers_ratio_with_the_engines_log_probs(
    asynchronous: bool, tmp_path: Path
) -> None:
    cluster, reporter = run(job(asynchronous), tmp_path)
    assert cluster.recomputed == 4  # one recompute per step, on-policy or not
    for batch in cluster.trained:
        assert torch.equal(batch["old_logps"], torch.tensor([TRAINER] * 4))
        assert torch.equal(batch["rollout_logps"], torch.tensor([ENGINE] * 4))
    rho = [math.exp(t - e) for t, e in zip(TRAINER, ENGINE, strict=True)]
    k3 = [math.exp(t - e) - (t - e) - 1 for t, e in zip(TRAINER, ENGINE, strict=True)]
    for metrics in reporter.metrics:
        assert metrics["rollout/rho_mean"] == pytest.approx(sum(rho) / 2)
        assert metrics["rollout/rho_min"] == pytest.approx(min(rho))
        assert metrics["rollout/rho_max"] == pytest.approx(max(rho))
        assert metrics["rollout/mismatch_kl"] == pytest.approx(sum(k3) / 2)
        assert metrics["rollout/masked_fraction"] == 0.0  # tis drops nothing
        assert metrics["rollout/truncated_fraction"] == 0.0  # both under upper 2


def test_mis_reports_the_tokens_it_drops(tmp_path: Path) -> None:
    # rho = exp(0.1) and exp(-1): the second is under lower = 1/2.
    cfg = job(True, mode="mis")
    _, reporter = run(cfg, tmp_path)
    assert [m["rollout/masked_fraction"] for m in reporter.metrics] == [0.5] * 4


def test_without_correction_nothing_changes(tmp_path: Path) -> None:
    """Async alone: the engines' log-probs are the old log-probs, nothing is recomputed, no
    rollout_logps and no mismatch metrics (the existing behaviour)."""
    cluster, reporter = Recomputing(), Reporter()
    trainer = Trainer(
        async_job(),
        cluster,
        Tokenizer(),
        Prompts(),
        Hooks(Scorer(), CheckpointManager(tmp_path, keep=5), reporter),
        total_steps=4,
        export_dir=None,
    )
    trainer.fit()
    assert cluster.recomputed == 0
    assert all("rollout_logps" not in b for b in cluster.trained)
    assert not any(k.startswith("rollout/") for m in reporter.metrics for k in m)
