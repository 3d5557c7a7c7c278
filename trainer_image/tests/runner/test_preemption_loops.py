"""A stop request (SIGTERM) in both driver loops, on stand-in clusters (no Ray, no models):
the step in progress is finished or dropped whole, the last finished step is checkpointed, and
a resume redoes a dropped step from its own data.

The stand-ins record what the loops ask of a cluster; `when(stage, step)` lets a test request
the stop at a chosen point of a chosen step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch import Tensor

from rlhf_trainer.checkpoint import CheckpointManager, load_trainer_state
from rlhf_trainer.config import JobConfig
from rlhf_trainer.context.preemption import Preempted, StopOnSignal
from rlhf_trainer.loop.driver import Hooks, Trainer
from rlhf_trainer.offline.driver import OfflineTrainer

Hook = Callable[[str, int], None]


class Done:
    def __init__(self, value: Any) -> None:
        self.value = value

    def result(self) -> Any:
        return self.value


class Recorder:
    """The reporter: which steps were reported and checkpointed."""

    def __init__(self) -> None:
        self.steps: list[int] = []
        self.checkpoints: list[int] = []

    def on_step(self, step: int, total: int, metrics: Any, timings: Any, samples: Any) -> None:
        self.steps.append(step)

    def on_checkpoint(self, step: int, path: Path) -> None:
        self.checkpoints.append(step)


def weights(directory: Path) -> str:
    return (directory / "weights").read_text()


# --- online -----------------------------------------------------------------------------


class OnlineCluster:
    """The `TrainingCluster` calls of a GRPO step without KL (no critic, no reference)."""

    def __init__(self, hook: Hook) -> None:
        self.hook, self.step = hook, 0
        self.updates: list[int] = []  # the steps whose update ran
        self.prompts: list[list[list[int]]] = []  # prompt ids of every generate call

    def generate(self, ids: list[list[int]], seeds: Any, settings: Any, pad: int) -> Any:
        self.step += 1
        self.prompts.append(ids)
        self.hook("generate", self.step)
        reply = SimpleNamespace(token_ids=[5, 6], finish_reason="stop")
        return [[reply] * settings.n for _ in ids]

    def train_actor(
        self, batch: dict[str, Tensor], step: int, kl: float, ptx: dict[str, Tensor] | None
    ) -> Done:
        self.hook("update", step)
        self.updates.append(step)
        return Done({"policy_loss": 0.1})

    def optimizer_steps(self) -> tuple[int, ...]:
        return (len(self.updates),)

    def save_checkpoint(self, directory: str) -> None:
        (Path(directory) / "weights").write_text(f"after update {self.updates[-1:]}")

    def load_checkpoint(self, directory: str) -> None:
        pass

    def export_hf(self, directory: str) -> None:
        (Path(directory) / "actor").mkdir()

    def actor_log_probs(self, batch: Any) -> None:
        raise AssertionError("on-policy: the loop needs no old log-probs pass")

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
    def sync_weights(self) -> None: ...


class Prompts:
    """Prompt i has ids [1, 10 + i]; a batch of `size` from `start` ends at `start + size`."""

    def batches(self, size: int, start: int = 0, *, passes: int | None = 1) -> Iterator[Any]:
        while True:
            items = [
                SimpleNamespace(prompt_text=f"p{i}", prompt_ids=[1, 10 + i], label=None, item=None)
                for i in range(start, start + size)
            ]
            start += size
            yield SimpleNamespace(items=items, position=start)


class Scorer:
    def __init__(self, hook: Hook, cluster: OnlineCluster) -> None:
        self.hook, self.cluster = hook, cluster

    def score(self, samples: list[Any], model_scores: list[Tensor]) -> tuple[Tensor, dict]:
        self.hook("score", self.cluster.step)
        return torch.arange(len(samples), dtype=torch.float32), {}


class Tokenizer:
    pad_token_id, eos_token_id = 0, 2

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return " ".join(map(str, ids))


def online_job(steps: int = 4) -> JobConfig:
    return JobConfig.model_validate(
        {
            "algorithm": {"name": "grpo", "klCoef": 0},
            "models": {
                "actor": {"pretrained": "/m"},
                "rewardFunction": {"builtin": "repeat-letter"},
            },
            "data": {"train": [{"path": "d.jsonl"}]},
            "rollout": {"samplesPerPrompt": 2, "maxNewTokens": 4},
            "training": {
                "rolloutBatchSize": 2,
                "trainBatchSize": 4,
                "microTrainBatchSize": 2,
                "microRolloutBatchSize": 2,
                "maxSteps": steps,
                "freezeActorSteps": 0,
            },
            "checkpoint": {"everySteps": 100},  # only the final / preemption checkpoints
        }
    )


def online_run(root: Path, when: tuple[str, int] | None) -> tuple[Trainer, OnlineCluster, Recorder]:
    stop = StopOnSignal()  # never entered: `request()` plays the SIGTERM

    def hook(stage: str, step: int) -> None:
        if (stage, step) == when:
            stop.request()

    cluster, reporter = OnlineCluster(hook), Recorder()
    hooks = Hooks(Scorer(hook, cluster), CheckpointManager(root, keep=5), reporter)
    trainer = Trainer(
        online_job(),
        cluster,
        Tokenizer(),
        Prompts(),
        hooks,
        total_steps=4,
        export_dir=None,
        stop=stop,
    )
    return trainer, cluster, reporter


@pytest.mark.parametrize(
    ("when", "updates"),
    [
        pytest.param(("generate", 3), [1, 2], id="during-generation"),
        pytest.param(("score", 3), [1, 2], id="during-scoring"),
        pytest.param(("update", 2), [1, 2], id="during-the-update-the-step-finishes"),
    ],
)
def test_online_stop_checkpoints_the_last_finished_step(
    tmp_path: Path, when: tuple[str, int], updates: list[int]
) -> None:
    trainer, cluster, reporter = online_run(tmp_path, when)
    with pytest.raises(Preempted, match="after 2 completed steps"):
        trainer.fit()
    assert cluster.updates == updates and reporter.steps == [1, 2]
    latest = CheckpointManager(tmp_path, keep=5).latest()
    assert latest is not None and latest.step == 2 and trainer.failure_checkpoint == latest.path
    assert weights(latest.path) == "after update [2]"
    # Step 3's prompts (2 per step) are not consumed: the resume starts them afresh.
    assert load_trainer_state(latest.path).data_position == 4


def test_online_resume_after_a_stop_redoes_the_dropped_step_as_it_would_have_run(
    tmp_path: Path,
) -> None:
    straight, straight_cluster, _ = online_run(tmp_path / "straight", None)
    straight.fit()
    first, _, _ = online_run(tmp_path / "stopped", ("score", 3))
    with pytest.raises(Preempted):
        first.fit()
    resumed, cluster, reporter = online_run(tmp_path / "stopped", None)
    resumed.fit()
    assert resumed.resumed_from == 2 and reporter.steps == [3, 4]
    assert cluster.prompts == straight_cluster.prompts[2:]


def test_online_stop_before_the_first_step_writes_nothing(tmp_path: Path) -> None:
    trainer, cluster, _ = online_run(tmp_path, None)
    trainer.stop = lambda: True
    with pytest.raises(Preempted, match="after 0 completed steps"):
        trainer.fit()
    assert cluster.prompts == [] and CheckpointManager(tmp_path, keep=5).latest() is None


# --- offline ----------------------------------------------------------------------------


class OfflineCluster:
    def __init__(self, hook: Hook) -> None:
        self.hook = hook
        self.updates: list[int] = []

    def frozen_outputs(self, batch: dict[str, Tensor]) -> None:
        return None

    def train(self, batch: dict[str, Tensor], step: int) -> Done:
        self.hook("update", step)
        self.updates.append(step)
        return Done({"loss": 1.0 / step})

    def save_checkpoint(self, directory: str) -> None:
        (Path(directory) / "weights").write_text(f"after update {self.updates[-1:]}")

    def load_checkpoint(self, directory: str) -> None:
        pass

    def export_hf(self, directory: str, tokenizer_dir: str) -> None:
        (Path(directory) / "model").write_text("exported")

    def weights_finite(self) -> bool:
        return True


class Samples:
    def __len__(self) -> int:
        return 100

    def batches(self, size: int, start: int = 0, *, passes: int | None = 1) -> Iterator[Any]:
        while True:
            start += size
            yield SimpleNamespace(items=list(range(start - size, start)), position=start)


def collate(items: Any) -> dict[str, Tensor]:
    return {"loss_mask": torch.ones(len(items), 3)}


def offline_run(root: Path, when: tuple[str, int] | None) -> tuple[OfflineTrainer, OfflineCluster]:
    stop = StopOnSignal()

    def hook(stage: str, step: int) -> None:
        if (stage, step) == when:
            stop.request()

    cluster = OfflineCluster(hook)
    job = JobConfig.model_validate(
        {
            "algorithm": {"name": "sft"},
            "models": {"actor": {"pretrained": "/m"}},
            "data": {"train": [{"path": "d.jsonl"}]},
            "training": {"trainBatchSize": 4, "microTrainBatchSize": 2, "maxSteps": 5},
        }
    )
    trainer = OfflineTrainer(
        job,
        cluster,
        Samples(),
        collate,
        checkpoints=CheckpointManager(root, keep=5),
        reporter=Recorder(),
        total_steps=5,
        export_dir=root.parent / "final",
        tokenizer_dir="/m",
        stop=stop,
    )
    return trainer, cluster


def test_offline_stop_during_an_update_finishes_it_and_checkpoints_it(tmp_path: Path) -> None:
    trainer, cluster = offline_run(tmp_path / "ckpt", ("update", 2))
    with pytest.raises(Preempted, match="after 2 completed steps"):
        trainer.fit()
    assert cluster.updates == [1, 2]
    latest = CheckpointManager(tmp_path / "ckpt", keep=5).latest()
    assert latest is not None and latest.step == 2 and weights(latest.path) == "after update [2]"
    assert load_trainer_state(latest.path).data_position == 8  # step 3's batch not consumed
    assert not (tmp_path / "final").exists()  # no export of an unfinished run

    resumed, cluster = offline_run(tmp_path / "ckpt", None)
    resumed.fit()
    assert resumed.resumed_from == 2 and cluster.updates == [3, 4, 5]
    assert (tmp_path / "final" / "model").read_text() == "exported"
