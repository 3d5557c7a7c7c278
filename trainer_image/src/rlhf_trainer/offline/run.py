"""`rlhf run` for the offline trainers: resolve the models and data, place the ranks, train,
export, and turn every failure into one clear message and a non-zero exit code.

    from rlhf_trainer.offline.run import run_offline
    code = run_offline(job_config, name=..., base_dir=..., run_dir=..., resume=..., max_steps=...)

Outputs under `run_dir`: `metrics.jsonl`, `tensorboard/`, `checkpoints/step-N/` (unless
`checkpoint.dir` says otherwise) and `final/`, the trained model in HF format.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from rlhf_trainer.config import JobConfig
from rlhf_trainer.models.loading import model_cache_dir

from .kinds import OfflineConfigError, OfflineSpec, TrainerKind, offline_spec

FINAL_DIR = "final"


class OfflineJobError(RuntimeError):
    """The job cannot run as written (the message names the field and says why)."""


class OfflineRunFailed(RuntimeError):
    def __init__(self, cause: BaseException, completed_steps: int, checkpoint: Path | None) -> None:
        super().__init__(str(cause))
        self.cause, self.completed_steps, self.checkpoint = cause, completed_steps, checkpoint


@dataclass(frozen=True)
class OfflineResult:
    name: str
    run_dir: Path
    steps: int
    resumed_from: int | None
    final_dir: Path | None
    checkpoint: Path | None


def total_steps(cfg: JobConfig, num_samples: int) -> int:
    """`training.maxSteps`, else the full batches in `training.epochs` passes over the data."""
    t = cfg.training
    if t.max_steps is not None:
        return t.max_steps
    steps = num_samples * t.epochs // t.train_batch_size
    if steps < 1:
        raise OfflineJobError(
            f"training.trainBatchSize ({t.train_batch_size}) is larger than the data "
            f"({num_samples} samples x {t.epochs} epochs): not one full step; lower it or add data"
        )
    return steps


def load_dataset(spec: OfflineSpec, cfg: JobConfig, tokenizer: Any, base_dir: Path) -> Any:
    from rlhf_trainer.data.offline import load_kto, load_preferences, load_sft

    loader = {
        TrainerKind.SFT: load_sft,
        TrainerKind.REWARD_MODEL: load_preferences,
        TrainerKind.PREFERENCE: load_preferences,
        TrainerKind.KTO: load_kto,
    }[spec.kind]
    return loader(cfg.data, tokenizer, base_dir, cfg.training.seed)


def train_offline(cfg: JobConfig, *, name: str, base_dir: Path, run_dir: Path) -> OfflineResult:
    """Build everything, train, export, and tear the cluster down (also on failure)."""
    import torch

    from rlhf_trainer.checkpoint import CheckpointManager
    from rlhf_trainer.distributed.cluster import shutdown_ray
    from rlhf_trainer.distributed.workers.offline import OfflineCluster
    from rlhf_trainer.models.loading import load_tokenizer, resolve_model_dir
    from rlhf_trainer.reporting.reporter import build_reporter

    from .collate import collate
    from .driver import OfflineTrainer

    spec = offline_spec(cfg)
    torch.manual_seed(cfg.training.seed)
    if cfg.training.packing_samples:
        print(
            "rlhf run: training.packingSamples is not implemented by the offline trainers yet; "
            "batches are padded instead (same result, more compute)",
            file=sys.stderr,
        )
    cache = model_cache_dir()
    model_dir = resolve_model_dir(cfg.models.actor, cache, spec.model_kind, base_dir)
    reference_dir = None
    if spec.needs_reference:
        reference_dir = resolve_model_dir(
            cfg.models.resolved_reference(), cache, "causal-lm", base_dir
        )
    tokenizer = load_tokenizer(model_dir)
    dataset = load_dataset(spec, cfg, tokenizer, base_dir)
    steps = total_steps(cfg, len(dataset))
    collate_fn = partial(
        collate, spec=spec, pad_id=int(tokenizer.pad_token_id), max_length=cfg.data.max_length
    )

    run_dir.mkdir(parents=True, exist_ok=True)
    root = Path(cfg.checkpoint.dir) if cfg.checkpoint.dir else run_dir / "checkpoints"
    checkpoints = CheckpointManager(root, cfg.checkpoint.keep)
    reporter = build_reporter(cfg.logging, run_dir, config=cfg.to_manifest())
    cluster = None
    try:
        cluster = OfflineCluster(cfg, model_dir, reference_dir, total_optimizer_steps=steps)
        trainer = OfflineTrainer(
            cfg,
            cluster,
            dataset,
            collate_fn,
            checkpoints=checkpoints,
            reporter=reporter,
            total_steps=steps,
            export_dir=run_dir / FINAL_DIR,
            tokenizer_dir=model_dir,
        )
        try:
            state = trainer.fit()
        except BaseException as err:
            raise OfflineRunFailed(err, trainer.state.step, trainer.failure_checkpoint) from err
        latest = checkpoints.latest()
        final = run_dir / FINAL_DIR
        return OfflineResult(
            name,
            run_dir,
            state.step,
            trainer.resumed_from,
            final if final.exists() else None,
            latest.path if latest else None,
        )
    finally:
        reporter.close()
        if cluster is not None:
            cluster.shutdown()
        shutdown_ray()


def explain(err: BaseException) -> str:
    """The error a user should read: the original exception, unwrapped from Ray's."""
    from rlhf_trainer.distributed.cluster import unwrap_error

    inner = unwrap_error(err)
    text = str(inner).strip() or type(inner).__name__
    lines = [ln for ln in text.splitlines() if ln.strip()]
    # Ray prefixes remote errors with the task and a traceback; the last line is the error.
    if len(lines) > 3 and ("Traceback" in text or "ray::" in text):
        text = lines[-1]
    name = type(inner).__name__
    return text if text.startswith(name) else f"{name}: {text}"


def run_offline(
    job: JobConfig,
    *,
    name: str,
    base_dir: Path,
    run_dir: Path,
    resume: str | None,
    max_steps: int | None,
) -> int:
    """Run one offline job (sft, reward-model, dpo, ipo, cdpo, kto); the process exit code."""
    started = time.time()
    try:
        cfg = job.with_overrides(resume=resume, max_steps=max_steps)
        result = train_offline(cfg, name=name, base_dir=Path(base_dir), run_dir=Path(run_dir))
    except (OfflineConfigError, OfflineJobError) as err:
        print(f"rlhf run: {err}", file=sys.stderr)
        return 1
    except OfflineRunFailed as err:
        if isinstance(err.cause, KeyboardInterrupt):
            print("rlhf run: interrupted", file=sys.stderr)
            return 130
        saved = f"; final checkpoint: {err.checkpoint}" if err.checkpoint else ""
        print(
            f"rlhf run: failed after {err.completed_steps} completed steps: "
            f"{explain(err.cause)}{saved}",
            file=sys.stderr,
        )
        if os.environ.get("RLHF_TRACEBACK"):
            traceback.print_exception(err.cause)
        return 1
    except KeyboardInterrupt:
        print("rlhf run: interrupted", file=sys.stderr)
        return 130
    except Exception as err:
        print(f"rlhf run: {explain(err)}", file=sys.stderr)
        if os.environ.get("RLHF_TRACEBACK"):
            traceback.print_exc()
        return 1
    minutes = (time.time() - started) / 60
    resumed = f" (resumed at step {result.resumed_from})" if result.resumed_from else ""
    exported = f"; model in {result.final_dir}" if result.final_dir else ""
    print(
        f"rlhf run: {name} finished {result.steps} steps{resumed} in {minutes:.1f} min; "
        f"outputs in {result.run_dir}{exported}",
        file=sys.stderr,
    )
    return 0
