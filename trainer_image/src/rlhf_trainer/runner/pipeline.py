"""`rlhf run PIPELINE.yaml`: an RLHFPipeline's stages on this machine, one after another in
topological order. Each stage runs as `rlhf run` runs a job named `<pipeline>-<stage>` (its
outputs in ./runs/<pipeline>-<stage>/, or <run-dir>/<stage>/); `fromStage: x` loads x's final
model from its export there, recorded before the stage runs in its run directory's
`inputs.json` (role, stage, location: what a cluster records on the stage job's
`status.inputs`). The first stage that fails ends the pipeline with its exit code.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Protocol

from rlhf_trainer.config import JobConfig, LoadedJob
from rlhf_trainer.config.outcome import ExitCode
from rlhf_trainer.config.pipeline import local_stage_config, stage_job_name, topological_order
from rlhf_trainer.config.sources import stage_references
from rlhf_trainer.context.job import run_dirs

PREFIX = "rlhf run"
INPUTS_FILE = "inputs.json"


def export_dir(cfg: JobConfig, *, name: str, base_dir: Path, run_dir: Path | None) -> Path:
    """Where a run of `cfg` exports its model: the online trainers write the policy to
    final/actor, the offline ones the model they train to final/ (as on a cluster)."""
    final = run_dirs(cfg, name=name, base_dir=base_dir, run_dir=run_dir).final
    return final / "actor" if cfg.algorithm.name.is_online else final


class RunConfig(Protocol):
    """How a stage runs: `main.run_config`, which hands the pipeline to it."""

    def __call__(
        self,
        config: JobConfig,
        *,
        name: str,
        base_dir: Path,
        run_dir: Path | None = None,
        resume: str | None = None,
        max_steps: int | None = None,
    ) -> int: ...


def run_pipeline(
    loaded: LoadedJob,
    run_config: RunConfig,
    *,
    resume: str | None,
    max_steps: int | None,
    run_dir: Path | None,
) -> int:
    """Run every stage with `run_config`; the process exit code (the failed stage's, else 0)."""
    spec = loaded.pipeline
    if spec is None:  # load_file gives a pipeline manifest its spec
        raise ValueError(f"{loaded.source}: not an RLHFPipeline")
    order = topological_order(spec)
    exports: dict[str, str] = {}
    print(f"{PREFIX}: pipeline {loaded.name}: stages {' -> '.join(order)}", file=sys.stderr)
    for stage_name in order:
        stage = spec.stage(stage_name)
        cfg = local_stage_config(stage, exports)
        name = stage_job_name(loaded.name, stage_name)
        stage_dir = run_dir / stage_name if run_dir is not None else None
        print(f"{PREFIX}: stage {stage_name} (job {name})", file=sys.stderr)
        inputs = [
            {"role": role, "fromStage": other, "model": exports[other]}
            for role, other in stage_references(stage.spec).items()
        ]
        run = run_dirs(cfg, name=name, base_dir=loaded.base_dir, run_dir=stage_dir).run
        run.mkdir(parents=True, exist_ok=True)
        (run / INPUTS_FILE).write_text(json.dumps(inputs, indent=2) + "\n")
        code = run_config(
            cfg,
            name=name,
            base_dir=loaded.base_dir,
            run_dir=stage_dir,
            resume=resume,
            max_steps=max_steps,
        )
        if code != ExitCode.SUCCEEDED:
            print(
                f"{PREFIX}: pipeline {loaded.name} stopped: stage {stage_name} failed",
                file=sys.stderr,
            )
            return code
        model = export_dir(cfg, name=name, base_dir=loaded.base_dir, run_dir=stage_dir)
        if not model.is_dir():
            print(
                f"{PREFIX}: stage {stage_name} exported no model in {model} "
                "(checkpoint.exportHf: false?); the stages after it cannot load it",
                file=sys.stderr,
            )
            return int(ExitCode.INVALID)
        exports[stage_name] = str(model)
    print(f"{PREFIX}: pipeline {loaded.name} succeeded: {len(order)} stages", file=sys.stderr)
    return int(ExitCode.SUCCEEDED)
