"""What every run needs before and around its training, online or offline: its directories
and paths, its step count, the errors that end it, `RunContext` (what the runner hands a train
function) and `fit`, the one ending of every train function.

Light on purpose (no torch, no Ray): the train functions and the runner both import it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from rlhf_trainer.config import JobConfig
from rlhf_trainer.config.data_size import fixed_steps, step_basis, too_little_data
from rlhf_trainer.config.outcome import InvalidSpecError

from .preemption import StopCheck, never

if TYPE_CHECKING:
    from rlhf_trainer.checkpoint import CheckpointManager
    from rlhf_trainer.checkpoint_best import BestCheckpoint
    from rlhf_trainer.reporting.reporter import Reporter

log = logging.getLogger(__name__)

CHECKPOINTS_DIR = "checkpoints"
FINAL_DIR = "final"
# checkpoint.keepBest: the best-scoring checkpoint's export, beside final/.
BEST_DIR = "best"
# In best/: which checkpoint it is, its metric and score.
BEST_RECORD = "best.json"


class JobError(InvalidSpecError, RuntimeError):
    """The job cannot run as written (the message names the field and says why). A retry
    cannot fix it: the runner exits with `ExitCode.INVALID`."""


class RunFailed(RuntimeError):
    """Training stopped with `cause` after `completed_steps`; `checkpoint` is the one written
    after the failure (None when none was: nothing new, or the models were not in one state),
    `latest` the newest complete checkpoint, the state a resume continues from."""

    def __init__(
        self,
        cause: BaseException,
        completed_steps: int,
        checkpoint: Path | None,
        latest: Path | None,
    ) -> None:
        super().__init__(str(cause))
        self.cause, self.completed_steps = cause, completed_steps
        self.checkpoint, self.latest = checkpoint, latest


def resolve_path(value: str, base_dir: Path, field: str) -> Path:
    """A path of the job (relative: to the job file's directory) that must exist."""
    path = Path(value).expanduser()
    if not path.is_absolute():
        path = base_dir / path
    if not path.exists():
        raise JobError(f"{field}: {value!r} does not exist (resolved to {path})")
    return path.resolve()


@dataclass(frozen=True)
class RunDirs:
    run: Path  # metrics.jsonl, tensorboard/, final/
    checkpoints: Path

    @property
    def final(self) -> Path:
        """The trained model(s) in Hugging Face format, published whole at the end."""
        return self.run / FINAL_DIR

    @property
    def best(self) -> Path:
        """checkpoint.keepBest: the best checkpoint's model(s), published when it is found."""
        return self.run / BEST_DIR


def run_dirs(
    cfg: JobConfig, *, name: str, base_dir: Path, run_dir: Path | None, cwd: Path | None = None
) -> RunDirs:
    """Where a run writes, as absolute paths.

    The run directory is `--run-dir`, else `runs/<name>`; both are command-line paths, so a
    relative one is read against the current directory. `checkpoint.dir` is a path of the job,
    so, like every other path in it (models, data, reward function), a relative one is read
    against the job file's directory: the same file checkpoints to the same place wherever it
    is run from. Without it, checkpoints go to `<run dir>/checkpoints`.
    """
    here = Path.cwd() if cwd is None else cwd
    run = here / (run_dir if run_dir is not None else Path("runs") / name)
    checkpoints = run / CHECKPOINTS_DIR
    if cfg.checkpoint.dir:
        checkpoints = base_dir / Path(cfg.checkpoint.dir).expanduser()
    return RunDirs(run.absolute(), checkpoints.absolute())


def total_steps(cfg: JobConfig, items: int) -> int:
    """`training.maxSteps`, else `algorithm.iterations` (rounds of the iterative algorithms),
    else the full batches in the data's passes: online, `items` prompts
    x `numEpisodes` / `rolloutBatchSize`; offline, `items` samples x `epochs` /
    `trainBatchSize`. A last partial batch is dropped (it would bias a step's statistics)."""
    fixed = fixed_steps(cfg)
    if fixed is not None:
        return fixed
    basis = step_basis(cfg)
    problem = too_little_data(basis, items)
    if problem is not None:
        raise JobError(problem.render())
    return basis.steps(items)


@dataclass(frozen=True)
class RunResult:
    name: str
    dirs: RunDirs
    steps: int
    resumed_from: int | None  # the checkpoint's step the run continued from
    checkpoint: Path | None  # the newest complete checkpoint
    exported: Path | None  # the final HF model, when written
    best: BestCheckpoint | None = None  # checkpoint.keepBest's, when one scored
    best_exported: Path | None = None  # its HF model, when written


@dataclass
class RunContext:
    """What the runner hands a train function: the job (command-line overrides applied), where
    it writes, how it learns of a stop request, and where it registers its teardown."""

    cfg: JobConfig
    name: str
    base_dir: Path  # the job file's directory: relative paths of the job start here
    dirs: RunDirs
    stop: StopCheck = never
    # `checkpoint_manifest.resume_fingerprint` of the job as written, before s3:// inputs
    # became local paths (which may differ between attempts); None: computed from `cfg`.
    fingerprint: dict[str, Any] | None = None
    _closers: ExitStack = field(default_factory=ExitStack, repr=False)
    _reporter: Reporter | None = field(default=None, repr=False)

    def on_close(self, fn: Callable[[], object]) -> None:
        """Run `fn` at teardown, whatever the outcome (last registered, first run). Teardown
        is best effort: an error is logged, and the next closer still runs."""
        self._closers.callback(_quietly, fn)

    def reporter(self) -> Reporter:
        """The run's reporter (console, metrics.jsonl, TensorBoard, W&B, the RLHFJob status),
        built on first use, so a job that fails while loading leaves no empty logs behind."""
        if self._reporter is None:
            from rlhf_trainer.reporting.reporter import build_reporter

            self.dirs.run.mkdir(parents=True, exist_ok=True)
            manifest = {"name": self.name, **self.cfg.to_manifest()}
            self._reporter = build_reporter(self.cfg.logging, self.dirs.run, config=manifest)
            self.on_close(self._reporter.close)
        return self._reporter

    def checkpoints(self) -> CheckpointManager:
        """The job's checkpoint directory, written as this job: its RLHFJob's UID
        (`RLHF_JOB_UID`; none locally) and config fingerprint go into every checkpoint, and a
        resume takes only checkpoints that match them (`CheckpointManager.resume_point`)."""
        from rlhf_trainer.checkpoint import (
            CheckpointManager,
            CheckpointOwner,
            job_uid,
            resume_fingerprint,
        )

        fingerprint = self.fingerprint
        if fingerprint is None:
            fingerprint = resume_fingerprint(self.cfg)
        owner = CheckpointOwner(job_uid(), fingerprint)
        c = self.cfg.checkpoint
        return CheckpointManager(self.dirs.checkpoints, c.keep, owner, c.keep_best)

    def close(self) -> None:
        self._closers.close()


def _quietly(fn: Callable[[], object]) -> None:
    try:
        fn()
    except Exception:
        log.exception("teardown step %s failed; continuing", getattr(fn, "__qualname__", fn))


class _Trainer(Protocol):
    """What `fit` needs of the online and offline drivers."""

    state: Any  # has `step`: the steps completed
    failure_checkpoint: Path | None
    resumed_from: int | None

    def fit(self) -> Any: ...


def fit(ctx: RunContext, trainer: _Trainer, checkpoints: CheckpointManager) -> RunResult:
    """Train to the end; `RunFailed` (with the checkpoint a resume continues from) otherwise.
    The one ending of both train functions."""
    try:
        state = trainer.fit()
    except BaseException as err:
        latest = checkpoints.latest()
        raise RunFailed(
            err, trainer.state.step, trainer.failure_checkpoint, latest.path if latest else None
        ) from err
    latest, best = checkpoints.latest(), checkpoints.best()
    final, best_dir = ctx.dirs.final, ctx.dirs.best
    exported = final if ctx.cfg.checkpoint.export_hf and final.exists() else None
    best_exported = best_dir if best is not None and read_best_record(best_dir) == best else None
    return RunResult(
        ctx.name,
        ctx.dirs,
        state.step,
        trainer.resumed_from,
        latest.path if latest else None,
        exported,
        best,
        best_exported,
    )


def write_best_record(directory: Path, best: BestCheckpoint) -> None:
    """`best.json` in an export of the best checkpoint: its step, metric, score and path."""
    record = {"step": best.step, "metric": best.metric, "score": best.score}
    record["checkpoint"] = str(best.path)
    (directory / BEST_RECORD).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")


def read_best_record(directory: Path) -> BestCheckpoint | None:
    """The best checkpoint an export in `directory` is of (None: none there, or unreadable)."""
    from rlhf_trainer.checkpoint_best import BestCheckpoint

    try:
        data = json.loads((directory / BEST_RECORD).read_text(encoding="utf-8"))
        return BestCheckpoint(
            int(data["step"]), Path(data["checkpoint"]), str(data["metric"]), float(data["score"])
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
