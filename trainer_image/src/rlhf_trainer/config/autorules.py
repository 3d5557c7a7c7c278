"""The rules of a `placement.auto` job hold for the values it chooses (rules.py runs them on
those; config/resolve.py resolves the job as it runs)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from .autoplace import AUTO_FIELDS, apply_choice, decide
from .autoplan import AutoError
from .base import Problem

if TYPE_CHECKING:
    from .job import JobConfig

Rules = Callable[["JobConfig"], list[Problem]]


def auto_problems(cfg: JobConfig, rules: Rules) -> list[Problem]:
    """`rules` on the values auto chooses. Where the actor's size is known only from a
    config.json the caller may read (`resolve_job`), the rules on the values it would choose
    wait for it; the operator refuses such a spec (`cluster_problems`)."""
    try:
        choice = decide(cfg)
    except AutoError as err:
        waiting = [p for p in rules(cfg) if not about_auto(p)]
        return waiting if err.size_unknown else [*err.problems, *waiting]
    return [chosen(p) for p in rules(apply_choice(cfg, choice))]


def about_auto(problem: Problem) -> bool:
    return any(f in problem.path or f in problem.message for f in AUTO_FIELDS)


def chosen(problem: Problem) -> Problem:
    """A problem with a value auto chose says so (the user did not write it)."""
    if not about_auto(problem):
        return problem
    return Problem(problem.path, f"{problem.message} (chosen by placement.auto: see rlhf plan)")
