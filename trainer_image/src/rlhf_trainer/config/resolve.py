"""`resolve_job`: a job as it runs, with `placement.auto` resolved (config/autoplace.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .autoplace import apply_choice, decide
from .autoplan import AutoError
from .autorules import chosen
from .layout import LayoutError
from .modelsize import ConfigReader
from .rules import job_problems

if TYPE_CHECKING:
    from .job import JobConfig


def resolve_job(cfg: JobConfig, read_config: ConfigReader | None = None) -> JobConfig:
    """The job as it runs: with `placement.auto`, the chosen values written and auto off
    (what the operator puts in the pods' job.yaml, and what `rlhf run` trains), checked by
    every rule. `read_config` reads local models' config.json; raises LayoutError."""
    if not cfg.placement.auto:
        return cfg
    try:
        resolved = apply_choice(cfg, decide(cfg, read_config))
    except AutoError as err:
        raise LayoutError(err.problems) from err
    problems = [chosen(p) for p in job_problems(resolved)]
    if problems:
        raise LayoutError(problems)
    return resolved
