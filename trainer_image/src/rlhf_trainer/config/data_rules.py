"""Rules of the data section: source mixing, evaluation prompts and builtin data sets.
Pure; `rules.job_problems` runs them with the others.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .algorithm import ITERATIVE_ALGORITHMS, ONLINE_ALGORITHMS, AlgorithmName
from .base import Problem
from .builtins import BUILTIN_REWARD_NAMES, BUILTIN_TASK_NAMES, builtin_problem
from .data import DataFormat
from .data_size import fixed_steps, known_train_rows, step_basis, too_little_data
from .report import EVAL_PREFIX

if TYPE_CHECKING:
    from .job import JobConfig


# Trainers whose rows OpenAI's fine-tuning files cannot hold (a desirable flag, a score, steps).
_COLUMNS_ONLY = {AlgorithmName.KTO, AlgorithmName.CONDITIONAL_SFT, AlgorithmName.PRM}


def data_problems(cfg: JobConfig) -> list[Problem]:
    algo = cfg.algorithm.name
    if cfg.data.format is DataFormat.OPENAI and algo in _COLUMNS_ONLY:
        return [
            Problem(
                "data.format",
                f"openai holds OpenAI's supervised, dpo and reinforcement files; algorithm "
                f"{algo.value} reads other rows: use data.format: columns",
            )
        ]
    train = cfg.data.train
    total = sum(s.probability for s in train)
    if len(train) > 1 and abs(total - 1.0) > 1e-6:
        return [
            Problem(
                "data.train",
                f"mixing probabilities of several sources must sum to 1 (got {total:g})",
            )
        ]
    return []


def eval_problems(cfg: JobConfig) -> list[Problem]:
    t, algo = cfg.training, cfg.algorithm.name
    out: list[Problem] = []
    if cfg.data.eval and (not algo.is_online or algo.is_iterative):
        evaluated = ONLINE_ALGORITHMS - ITERATIVE_ALGORITHMS
        rl = ", ".join(sorted(a.value for a in evaluated if a.needs_reward_source))
        out.append(
            Problem(
                "data.eval",
                f"evaluation during training runs in the RL loop ({rl}); it is not implemented "
                f"for algorithm {algo.value}: remove it",
            )
        )
    if cfg.data.eval and not algo.needs_reward_source and algo.is_online:
        out.append(
            Problem(
                "data.eval",
                "evaluation scores responses with the job's reward sources, and algorithm "
                f"{algo.value} has none (its reward is the teacher's): remove it; "
                "distill/reverse_kl is reported every step",
            )
        )
    best = cfg.checkpoint.keep_best
    if best is not None and best.metric.startswith(EVAL_PREFIX) and not cfg.data.eval:
        out.append(
            Problem(
                "checkpoint.keepBest.metric",
                f"{best.metric} is reported by evaluations on data.eval prompts: set data.eval "
                "(and training.evalEverySteps), or keep the best by a training metric",
            )
        )
    for field, value in (("evalEverySteps", t.eval_every_steps), ("evalSamples", t.eval_samples)):
        if value is not None and not cfg.data.eval:
            out.append(
                Problem(f"training.{field}", "evaluates on data.eval prompts: set data.eval too")
            )
    return out


def builtin_problems(cfg: JobConfig) -> list[Problem]:
    """Builtin data sets and reward functions: known names, good parameters, and training
    data at least one batch large."""
    out: list[Problem] = []
    named = [("train", cfg.data.train), ("eval", cfg.data.eval), ("pretrain", cfg.data.pretrain)]
    indexed = [(which, i, s) for which, sources in named for i, s in enumerate(sources)]
    for which, index, source in indexed:
        why = builtin_problem(source.builtin, BUILTIN_TASK_NAMES) if source.builtin else None
        if why:
            out.append(Problem(f"data.{which}[{index}].builtin", why))
    function = cfg.models.reward_function
    if function is not None and function.builtin is not None:
        why = builtin_problem(function.builtin, BUILTIN_REWARD_NAMES)
        if why:
            out.append(Problem("models.rewardFunction.builtin", why))
    return out + _builtin_size_problems(cfg)


def _builtin_size_problems(cfg: JobConfig) -> list[Problem]:
    """A batch larger than builtin training data, whose size the spec tells: refused here
    rather than by the trainer once it has loaded the data (and taken its devices)."""
    rows = known_train_rows(cfg)
    if rows is None or fixed_steps(cfg) is not None:
        return []
    problem = too_little_data(step_basis(cfg), rows)
    return [] if problem is None else [problem]
