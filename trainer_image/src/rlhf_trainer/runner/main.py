"""`rlhf run FILE`: one job on this machine (local Ray) or inside a RayJob (the cluster's Ray).

    code = run_from_cli(Path("job.yaml"), resume=None, max_steps=None, run_dir=None)

Selects the job, resolves its directories, dispatches to the train function of its algorithm
(online: `loop.train`, offline: `offline.train`) with SIGTERM turned into a stop request, and
turns however it ends into one message, one exit code (`ExitCode`) and, on a cluster, the
outcome on the RLHFJob's status (`status.trainer.outcome`), which tells the operator whether
a retry can help. Set `RLHF_TRACEBACK=1` for the full traceback of a failure.
"""

from __future__ import annotations

import logging
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from rlhf_trainer.config import (
    JobConfig,
    LayoutError,
    LoadedJob,
    describe_layout,
    load_file,
    local_config_reader,
    plan_layout,
    resolve_job,
)
from rlhf_trainer.config.outcome import ExitCode, FailureClass
from rlhf_trainer.config.podlogs import LOGS_DIR_ENV
from rlhf_trainer.config.sources import local_run_problems
from rlhf_trainer.context.health import Unhealthy
from rlhf_trainer.context.job import JobError, RunContext, RunFailed, RunResult, run_dirs
from rlhf_trainer.context.preemption import Preempted, StopCheck, StopOnSignal, never
from rlhf_trainer.podlogs.trainer_log import trainer_log

from .outcome import classify, exit_code, explain
from .pipeline import run_pipeline

log = logging.getLogger(__name__)

TrainFn = Callable[[RunContext], RunResult]
PREFIX = "rlhf run"


def select_job(path: Path) -> tuple[LoadedJob, JobConfig | None]:
    """The one valid job of `path` and its config (None for an RLHFPipeline, whose stages
    each have theirs); `JobError` listing every problem otherwise."""
    jobs = load_file(path)
    problems = [f"{path}: {p}" for job in jobs for p in job.problems]
    if problems:
        raise JobError("\n".join(problems))
    if len(jobs) != 1:
        names = ", ".join(j.name for j in jobs)
        raise JobError(f"{path}: holds {len(jobs)} jobs ({names}); `rlhf run` runs one per file")
    if jobs[0].pipeline is not None:
        return jobs[0], None
    config = jobs[0].config
    if config is None:  # a valid document always has a config
        raise JobError(f"{path}: no job config")
    prefix = "spec" if jobs[0].is_manifest else ""
    unresolved = [f"{path}: {p.render(prefix)}" for p in local_run_problems(config)]
    if unresolved:
        raise JobError("\n".join(unresolved))
    return jobs[0], config


def train_function(cfg: JobConfig) -> TrainFn:
    """The online loop (rollouts, rewards, policy updates), the iterative one (rounds of
    rollouts, rewards, selection and offline-objective training) or the offline one (a fixed
    data set)."""
    if cfg.algorithm.name.is_iterative:
        from rlhf_trainer.iterative.train import train_iterative

        return train_iterative
    if cfg.algorithm.name.is_online:
        from rlhf_trainer.loop.train import train_online

        return train_online
    from rlhf_trainer.offline.train import train_offline

    return train_offline


def run_job(
    cfg: JobConfig,
    *,
    name: str,
    base_dir: Path,
    run_dir: Path | None = None,
    stop: StopCheck = never,
) -> RunResult:
    """Train `cfg` and tear everything down, whatever happens; raises what the train function
    raised (`RunFailed` once training began). `base_dir`: where the job's relative paths start."""
    from rlhf_trainer.checkpoint_manifest import resume_fingerprint
    from rlhf_trainer.objectstore import fetch_inputs, inputs_cache_dir, upload_outputs

    dirs = run_dirs(cfg, name=name, base_dir=base_dir, run_dir=run_dir)
    fingerprint = resume_fingerprint(cfg)  # of the job as written: see RunContext
    # s3:// inputs are fetched before anything starts: a missing object costs no cluster.
    cfg = fetch_inputs(cfg, inputs_cache_dir())
    context = RunContext(cfg, name, base_dir, dirs, stop, fingerprint)
    log.info("%s: %s, outputs in %s", name, cfg.algorithm.name.value, dirs.run)
    try:
        result = train_function(cfg)(context)
    finally:
        context.close()
        upload_pod_logs(cfg)
    # After teardown, so metrics.jsonl and the TensorBoard files are complete.
    upload_outputs(dirs.run, cfg)
    return result


def upload_pod_logs(cfg: JobConfig) -> None:
    """On a cluster with `output.uri`: copy the job's logs so far (this attempt's, and the
    earlier attempts' whole) to `<output.uri>/logs`; never masks how the run ended."""
    from rlhf_trainer.objectstore import upload_logs

    attempt_dir = os.environ.get(LOGS_DIR_ENV)
    if not attempt_dir or cfg.output.uri is None:
        return
    try:
        upload_logs(Path(attempt_dir).parent, cfg)
    except Exception:
        log.exception("could not copy the logs to %s", cfg.output.uri)


def run_from_cli(
    path: Path, *, resume: str | None, max_steps: int | None, run_dir: Path | None
) -> int:
    """`rlhf run FILE`: run the one job of `path`; the process exit code."""
    try:
        job, config = select_job(path)
    except JobError as err:
        return finish(err)
    if config is None:
        return run_pipeline(job, run_config, resume=resume, max_steps=max_steps, run_dir=run_dir)
    name = job.name
    if not job.is_manifest:  # in a RayJob the file is job.yaml: the operator names the run
        name = os.environ.get("RLHF_JOB_NAME", name)
    return run_config(
        config,
        name=name,
        base_dir=job.base_dir,
        run_dir=run_dir,
        resume=resume,
        max_steps=max_steps,
    )


def run_config(
    config: JobConfig,
    *,
    name: str,
    base_dir: Path,
    run_dir: Path | None = None,
    resume: str | None = None,
    max_steps: int | None = None,
) -> int:
    """Run one job config (command-line overrides `resume`, `max_steps`) with SIGTERM as a
    stop request; print how it ended, report it on the RLHFJob, return the exit code. In a
    cluster job's pod the run's records go to the attempt's trainer.jsonl as well."""
    with trainer_log(os.environ, config.logging.container_logs):
        return _run_config(config, name, base_dir, run_dir, resume, max_steps)


def _run_config(
    config: JobConfig,
    name: str,
    base_dir: Path,
    run_dir: Path | None,
    resume: str | None,
    max_steps: int | None,
) -> int:
    started = time.time()
    try:
        placed = place(config, base_dir)
        try:
            cfg = placed.with_overrides(resume=resume, max_steps=max_steps)
        except ValueError as err:  # pydantic's ValidationError: an override the rules refuse
            raise JobError(f"--resume/--max-steps: {err}") from err
        with StopOnSignal() as stop:
            result = run_job(cfg, name=name, base_dir=base_dir, run_dir=run_dir, stop=stop)
    except (Exception, KeyboardInterrupt) as err:
        return finish(err)
    minutes = (time.time() - started) / 60
    resumed = f" (resumed at step {result.resumed_from})" if result.resumed_from else ""
    exported = f"; model in {result.exported}" if result.exported else ""
    message = (
        f"{name} finished {result.steps} steps{resumed} in {minutes:.1f} min; "
        f"outputs in {result.dirs.run}{exported}{best_summary(result)}"
    )
    report_outcome(ExitCode.SUCCEEDED, None, message)
    log.info(message)  # the attempt's trainer.jsonl on a cluster
    print(f"{PREFIX}: {message}", file=sys.stderr)
    return int(ExitCode.SUCCEEDED)


def best_summary(result: RunResult) -> str:
    """checkpoint.keepBest's part of the summary: which checkpoint scored best, and where its
    model is."""
    best = result.best
    if best is None:
        return ""
    where = f", model in {result.best_exported}" if result.best_exported else ""
    return f"; best: step {best.step} ({best.metric} = {best.score:.6g}, {best.path}{where})"


def place(config: JobConfig, base_dir: Path) -> JobConfig:
    """The job with `placement.auto` resolved (local models' config.json read: the exact
    sizes), its choice printed; on a cluster the operator resolved it already."""
    if not config.placement.auto:
        return config
    reader = local_config_reader(base_dir)
    try:
        placed = resolve_job(config, reader)
    except LayoutError as err:
        raise JobError(str(err)) from err
    layout = describe_layout(plan_layout(config, reader))
    print(f"{PREFIX}: placement.auto chose\n{layout}", file=sys.stderr)
    return placed


def finish(err: BaseException) -> int:
    """The end of a failed run: message, outcome on the RLHFJob, exit code."""
    code, message = exit_code(err), failure_message(err)
    report_outcome(code, classify(err), message)
    log.error("exit code %d: %s", int(code), message)  # the attempt's trainer.jsonl
    print(f"{PREFIX}: {message}", file=sys.stderr)
    if os.environ.get("RLHF_TRACEBACK") and not isinstance(err, JobError):
        traceback.print_exception(err.cause if isinstance(err, RunFailed) else err)
    return int(code)


def failure_message(err: BaseException) -> str:
    """One line (a `JobError` may list several problems): what happened, after how many
    steps, and which checkpoint a resume continues from."""
    if not isinstance(err, RunFailed):
        if isinstance(err, KeyboardInterrupt):
            return "interrupted"
        return str(err) if isinstance(err, JobError) else explain(err)
    where = f"after {err.completed_steps} completed steps"
    if err.checkpoint:
        saved = f"; final checkpoint: {err.checkpoint}"
    elif err.latest:
        saved = f"; no final checkpoint (models not in a consistent state); last: {err.latest}"
        if isinstance(err.cause, Preempted | KeyboardInterrupt | Unhealthy):  # stopped, not broken
            saved = f"; last checkpoint: {err.latest}"
    else:
        saved = "; no checkpoint"
    if isinstance(err.cause, Unhealthy):
        return f"{err.cause}{saved}"
    if isinstance(err.cause, Preempted):
        return f"preempted (SIGTERM) {where}{saved}; a resume (--resume auto) continues there"
    if isinstance(err.cause, KeyboardInterrupt):
        return f"interrupted {where}{saved}"
    return f"failed {where}: {explain(err.cause)}{saved}"


def report_outcome(code: ExitCode, failure: FailureClass | None, message: str) -> None:
    """`status.trainer.outcome` of the RLHFJob this run is (none: a local run)."""
    from rlhf_trainer.reporting.kube import report_outcome as send

    try:
        send(exit_code=int(code), failure_class=failure, message=message)
    except Exception:  # the exit code still tells the operator; never mask the run's own end
        log.exception("could not report the outcome on the RLHFJob")
