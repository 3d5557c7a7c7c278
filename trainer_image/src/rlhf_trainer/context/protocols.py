"""What every step loop needs of its edges, written once: the checkpoint store, the reporter,
the cluster's checkpoint side and a pending result.

The real ones are `checkpoint.CheckpointManager`, `reporting.reporter.Reporter` and the
clusters in `rlhf_trainer.distributed`; the tests pass stand-ins with the same methods. Each
loop's cluster protocol (`loop.cluster.OnlineCluster`, `offline.driver.OfflineCluster`,
`iterative.driver.IterativeCluster`) extends `Cluster` with the calls of its stages.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

from rlhf_trainer.checkpoint import CheckpointRef
from rlhf_trainer.checkpoint_best import BestCheckpoint
from rlhf_trainer.config import ResumePolicy

T_co = TypeVar("T_co", covariant=True)


class Pending(Protocol[T_co]):
    """A result on its way (Ray object refs, combined when asked)."""

    def result(self) -> T_co: ...


class CheckpointStore(Protocol):
    def save(
        self, step: int, write_fn: Callable[[Path], None], *, score: float | None = ...
    ) -> Path: ...
    def latest(self) -> CheckpointRef | None: ...
    def best(self) -> BestCheckpoint | None: ...
    def resume_point(
        self, resume: ResumePolicy, resume_from: str | None
    ) -> CheckpointRef | None: ...


class Reporter(Protocol):
    def on_step(
        self,
        step: int,
        total_steps: int,
        metrics: Mapping[str, Any],
        timings: Mapping[str, float],
        samples: int | Sequence[Mapping[str, Any]] = ...,
    ) -> object: ...

    def on_checkpoint(self, step: int, path: Path) -> None: ...

    def on_best(self, best: BestCheckpoint) -> None: ...


class Cluster(Protocol):
    """The cluster's part in checkpoints: every trained rank's weights, optimizer and RNG."""

    def save_checkpoint(self, directory: str) -> None: ...
    def load_checkpoint(self, directory: str) -> None: ...
    def weights_finite(self) -> bool: ...
