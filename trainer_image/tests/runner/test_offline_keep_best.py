"""`checkpoint.keepBest` on the offline loop, on the stand-in cluster of the preemption tests
(no Ray, no models): the best step's checkpoint is kept beside `keep: 1`'s newest, exported at
once as best/ with best.json, reported, and a resumed run knows it from the manifests (the
online loop's counterpart: tests/loop/test_distill_best_driver.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from test_preemption_loops import Done, OfflineCluster, Recorder, Samples, collate

from rlhf_trainer.checkpoint import CheckpointManager
from rlhf_trainer.checkpoint_best import BestCheckpoint
from rlhf_trainer.config import JobConfig
from rlhf_trainer.offline.driver import OfflineTrainer


class LossCluster(OfflineCluster):
    """Each update reports the next of `losses`; exports are counted."""

    def __init__(self, losses: list[float]) -> None:
        super().__init__(lambda stage, step: None)
        self.losses = losses
        self.exported: list[str] = []

    def train(self, batch: Any, step: int) -> Done:
        self.updates.append(step)
        return Done({"loss": self.losses[len(self.updates) - 1]})

    def export_hf(self, directory: str, tokenizer_dir: str) -> None:
        super().export_hf(directory, tokenizer_dir)
        self.exported.append(directory)


class BestRecorder(Recorder):
    def __init__(self) -> None:
        super().__init__()
        self.best: list[BestCheckpoint] = []

    def on_best(self, best: BestCheckpoint) -> None:
        self.best.append(best)


def offline_run(
    root: Path, losses: list[float], steps: int
) -> tuple[OfflineTrainer, LossCluster, BestRecorder]:
    job = JobConfig.model_validate(
        {
            "algorithm": {"name": "sft"},
            "models": {"actor": {"pretrained": "/m"}},
            "data": {"train": [{"path": "d.jsonl"}]},
            "training": {"trainBatchSize": 4, "microTrainBatchSize": 2, "maxSteps": steps},
            "checkpoint": {
                "everySteps": 1,
                "keep": 1,
                "keepBest": {"metric": "loss", "mode": "min"},
            },
        }
    )
    keep = job.checkpoint
    cluster, reporter = LossCluster(losses), BestRecorder()
    trainer = OfflineTrainer(
        job,
        cluster,
        Samples(),
        collate,
        checkpoints=CheckpointManager(root / "ckpt", keep.keep, keep_best=keep.keep_best),
        reporter=reporter,
        total_steps=steps,
        export_dir=root / "final",
        tokenizer_dir="/m",
    )
    return trainer, cluster, reporter


def test_offline_keep_best_keeps_the_lowest_loss_beside_keep_1_and_exports_it(
    tmp_path: Path,
) -> None:
    trainer, cluster, reporter = offline_run(tmp_path, [0.9, 0.3, 0.5, 0.6], 4)
    trainer.fit()
    manager = trainer.checkpoints
    assert isinstance(manager, CheckpointManager)
    assert [c.step for c in manager.checkpoints()] == [2, 4]  # keep: 1 alone keeps [4]
    best = manager.best()
    assert best is not None and (best.step, best.metric, best.score) == (2, "loss", 0.3)
    assert [(b.step, b.score) for b in reporter.best] == [(1, 0.9), (2, 0.3)]
    # Each new best exported when the ranks held its weights (steps 1, 2), then the final model.
    assert [Path(d).parent for d in cluster.exported] == [tmp_path] * 3
    record = json.loads((tmp_path / "best" / "best.json").read_text())
    assert record == {"step": 2, "metric": "loss", "score": 0.3, "checkpoint": str(best.path)}
    assert (tmp_path / "best" / "model").read_text() == "exported"
    assert (tmp_path / "final" / "model").read_text() == "exported"

    # A resumed run (one more step, worse) knows the best and exports nothing but the final.
    again, cluster, reporter = offline_run(tmp_path, [0.8], 5)
    again.fit()
    assert again.resumed_from == 4 and cluster.updates == [5]
    assert again.best == best and reporter.best == [best]
    assert [c.step for c in again.checkpoints.checkpoints()] == [2, 5]  # type: ignore[attr-defined]
    assert len(cluster.exported) == 1
