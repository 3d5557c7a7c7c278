"""`rlhf`: run an RLHFJob manifest (or bare job config) on this machine, or validate files.

    rlhf run FILE [--config FILE] [--resume auto|never] [--max-steps N] [--run-dir DIR]
                 (an RLHFPipeline FILE: its stages one after another)
    rlhf validate [--cluster] FILE...
    rlhf plan FILE... [--output text|json]
    rlhf logs FILE|--job NAME [--from DIR|s3://...] [--attempt N] [--pod P] [--container C]

`run` on a cluster is `python -m rlhf_trainer run --config /etc/rlhf/job.yaml`. Heavy imports
(torch, ray, ...) happen only inside `run`, so `validate` starts in a fraction of a second.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlhf_trainer.config import (
    JobConfig,
    LayoutError,
    LoadedJob,
    cluster_problems,
    describe_layout,
    load_file,
    local_config_reader,
    plan_layout,
    resolve_job,
)
from rlhf_trainer.config.documents import quote
from rlhf_trainer.config.pipeline import stage_job_name, topological_order


def _document_label(job: LoadedJob, index: int, count: int) -> str:
    """`FILE` for single-document files, `FILE[i] (name)` when a file holds several."""
    if count == 1:
        return job.source
    return f"{job.source}[{index}] ({job.name})"


def _configs(job: LoadedJob) -> list[tuple[str, JobConfig]]:
    """(field prefix, config) of a document: its own, or each stage's of a pipeline."""
    if job.pipeline is not None:
        return [(f"spec.stages[{i}].spec", s.spec) for i, s in enumerate(job.pipeline.stages)]
    if job.config is None:
        return []
    return [("spec" if job.is_manifest else "", job.config)]


def _stages(job: LoadedJob) -> str:
    if job.pipeline is None:
        return ""
    return f": stages {' -> '.join(topological_order(job.pipeline))}"


def _auto_problems(job: LoadedJob) -> list[str]:
    """A `placement.auto` job's (or stage's) refusals once the models' config.json on this
    machine are read (sizes no rule could see without them)."""
    out: list[str] = []
    for prefix, cfg in _configs(job):
        if not cfg.placement.auto:
            continue
        try:
            resolve_job(cfg, local_config_reader(job.base_dir))
        except LayoutError as err:
            out += [p.render(prefix) for p in err.problems]
    return out


def validate_files(paths: Sequence[str], *, cluster: bool = False) -> tuple[int, list[str]]:
    """(exit code, lines to print): 0 and one `ok` line per document when all are valid.
    `cluster`: also what only a cluster cannot run (the operator's refusals, e.g. a path to a
    file on this machine)."""
    lines: list[str] = []
    bad = False
    for path in paths:
        jobs = load_file(path)
        for i, job in enumerate(jobs):
            label = _document_label(job, i, len(jobs))
            if job.ok and cluster:
                problems = [
                    p.render(prefix) for prefix, cfg in _configs(job) for p in cluster_problems(cfg)
                ]
                if problems:
                    bad = True
                    lines.extend(f"{label}: {problem}" for problem in problems)
                    continue
            auto = _auto_problems(job) if job.ok else []
            if auto:
                bad = True
                lines.extend(f"{label}: {problem}" for problem in auto)
                continue
            if job.ok:
                lines.append(f"{label}: ok ({job.kind} {job.name}{_stages(job)})")
                continue
            bad = True
            lines.extend(f"{label}: {problem}" for problem in job.problems)
    return (1 if bad else 0), lines


def _cmd_validate(args: argparse.Namespace) -> int:
    # Like linters, the report itself goes to stdout; the exit code says whether it is clean.
    code, lines = validate_files(args.files, cluster=args.cluster)
    for line in lines:
        print(line)
    return code


def plan_files(paths: Sequence[str], output: str) -> tuple[int, list[str]]:
    """(exit code, lines to print): each document's layout (the devices per role, engines,
    pods), or its field-level problems and exit code 1 for a spec that cannot run."""
    lines: list[str] = []
    plans: list[dict[str, object]] = []
    bad = False
    for path in paths:
        jobs = load_file(path)
        for i, job in enumerate(jobs):
            label = _document_label(job, i, len(jobs))
            problems = job.problems or _auto_problems(job)
            if not _configs(job) or problems:
                bad = True
                lines.extend(f"{label}: {problem}" for problem in problems)
                continue
            for name, cfg in _named_configs(job):
                # A valid config always has a layout; placement.auto reads local config.json.
                layout = plan_layout(cfg, local_config_reader(job.base_dir))
                if output == "json":
                    plans.append({"source": label, "name": name, **layout.to_dict()})
                else:
                    lines.append(f"{label} ({name}):")
                    lines.extend(f"  {line}" for line in describe_layout(layout).splitlines())
    if output == "json" and not bad:
        lines = [json.dumps(plans[0] if len(plans) == 1 else plans, indent=2)]
    return (1 if bad else 0), lines


def _named_configs(job: LoadedJob) -> list[tuple[str, JobConfig]]:
    """(run name, config): the job's, or each stage's (`<pipeline>-<stage>`)."""
    if job.pipeline is None:
        return [(job.name, cfg) for _, cfg in _configs(job)]
    return [(stage_job_name(job.name, s.name), s.spec) for s in job.pipeline.stages]


def _cmd_plan(args: argparse.Namespace) -> int:
    code, lines = plan_files(args.files, args.output)
    stream = sys.stdout if code == 0 else sys.stderr
    for line in lines:
        print(line, file=stream)
    return code


def _cmd_run(args: argparse.Namespace) -> int:
    # Imported here: the run pulls in torch and Ray.
    from rlhf_trainer.runner.main import run_from_cli

    file = args.config or args.file
    if file is None:
        print("rlhf run: give a FILE or --config FILE", file=sys.stderr)
        return 2
    return run_from_cli(
        Path(file),
        resume=args.resume,
        max_steps=args.max_steps,
        run_dir=Path(args.run_dir) if args.run_dir else None,
    )


def _cmd_logs(args: argparse.Namespace) -> int:
    from rlhf_trainer.objectstore import ObjectStoreError
    from rlhf_trainer.podlogs.command import LogsError, LogsRequest, run

    if args.attempt is not None and args.attempt < 0:
        print(f"rlhf logs: --attempt must be >= 0 (got {args.attempt})", file=sys.stderr)
        return 2
    request = LogsRequest(
        file=args.file,
        job=args.job,
        source=args.source,
        attempt=args.attempt,
        pods=tuple(args.pod or ()),
        containers=tuple(args.container or ()),
        timestamps=args.timestamps,
        list_only=args.list,
    )
    try:
        return run(request, print)
    except (LogsError, ObjectStoreError) as err:
        print(f"rlhf logs: {err}", file=sys.stderr)
        return 1


def _add_logs(sub: Any) -> None:
    logs = sub.add_parser(
        "logs",
        help="Print a job's kept logs (every pod's containers, Events, the trainer's records), "
        "attempt by attempt, from its volume or bucket: after its pods are gone.",
    )
    logs.add_argument("file", nargs="?", help="The job's manifest (its name and output.uri).")
    logs.add_argument("--job", help="The job's name (without FILE, or instead of its name).")
    logs.add_argument(
        "--from",
        dest="source",
        help="Where: a directory holding <job>/logs (the storage volume, mounted or copied), or "
        "s3://... (the job's output.uri). Default: the manifest's output.uri.",
    )
    logs.add_argument("--attempt", type=int, help="Only this attempt (0: the first).")
    logs.add_argument("--pod", action="append", help="Only pods whose name contains this.")
    logs.add_argument("--container", "-c", action="append", help="Only this container.")
    logs.add_argument("--timestamps", action="store_true", help="Keep each line's time.")
    logs.add_argument("--list", action="store_true", help="Only name the files.")
    logs.set_defaults(func=_cmd_logs)


def _cmd_prestop(args: argparse.Namespace) -> int:
    # Imported here: it needs Ray's job API.
    from rlhf_trainer.distributed.prestop import prestop

    return prestop()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlhf", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="Run an RLHFJob manifest or a bare job config locally.")
    run.add_argument("file", nargs="?", help="RLHFJob manifest or job config (YAML/JSON).")
    run.add_argument("--config", help="Same as FILE (the form the cluster entrypoint uses).")
    run.add_argument(
        "--resume",
        choices=["auto", "never"],
        default=None,
        help="Override checkpoint.resume: continue from the latest checkpoint or start fresh.",
    )
    run.add_argument(
        "--max-steps", type=int, default=None, help="Override training.maxSteps (> 0)."
    )
    run.add_argument("--run-dir", help="Output directory (default: ./runs/<name>).")
    run.set_defaults(func=_cmd_run)

    val = sub.add_parser("validate", help="Check manifests / job configs; exit 1 on problems.")
    val.add_argument("files", nargs="+", help="Files to check (YAML or JSON, many documents).")
    val.add_argument(
        "--cluster",
        action="store_true",
        help="Check as the operator does for `kubectl apply` (no files of this machine).",
    )
    val.set_defaults(func=_cmd_validate)

    plan = sub.add_parser(
        "plan",
        help="Print where each role runs (devices, engines, pods; with placement.auto what it "
        "chose and why); exit 1 if it cannot.",
    )
    plan.add_argument("files", nargs="+", help="RLHFJob manifests or job configs.")
    plan.add_argument("--output", "-o", choices=["text", "json"], default="text")
    plan.set_defaults(func=_cmd_plan)
    _add_logs(sub)

    hook = sub.add_parser(
        "prestop",
        help="The Ray pods' preStop hook: stop the cluster's running Ray jobs (the driver "
        "checkpoints its last finished step) and wait until they ended.",
    )
    hook.set_defaults(func=_cmd_prestop)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "max_steps", None) is not None and args.max_steps <= 0:
        print(f"rlhf run: --max-steps must be > 0 (got {args.max_steps})", file=sys.stderr)
        return 2
    if args.command == "run":
        code: int = args.func(args)  # the runner reports its own failures (exit codes)
        return code
    try:
        code = args.func(args)
    except Exception as err:  # a bug of ours must not print a file's content as a traceback
        print(
            f"rlhf {args.command}: internal error ({type(err).__name__}: {quote(str(err))}); "
            "please report it with the file that caused it",
            file=sys.stderr,
        )
        return 70
    return code


if __name__ == "__main__":
    sys.exit(main())
