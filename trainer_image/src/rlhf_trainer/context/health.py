"""The training-health guardrails (`runPolicy.guardrails`) as a pure watch over the steps'
metrics: `HealthWatch.check(step, metrics)` returns the first guard the step trips, with a
message that quotes the metric, its values and the threshold, the same words in the trainer's
output, the RLHFJob's condition and its Event.

The driver raises `Unhealthy` with it after the step is reported; its failure path then
checkpoints the step (when the weights are finite), and the runner ends the run with
`FailureClass.UNHEALTHY`. A resumed run starts a fresh watch: the windows of the patient
guards and the evaluation history begin again at the resumed step.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from rlhf_trainer.config.guardrails import FIELD, Guard, GuardrailAction, Guardrails

REWARD = "reward"
EVAL_REWARD = "eval/mean_reward"
# Metrics a non-finite value of which means the run diverged (the losses end in "loss").
_WATCHED = ("kl", "reward", "entropy", "grad_norm")
# What the patient guards' metrics mean, for their messages.
_MEANING = {
    "truncated": "share of responses that hit rollout.maxNewTokens",
    "entropy": "mean token entropy of the policy",
}


@dataclass(frozen=True)
class Trip:
    guard: Guard
    step: int
    message: str
    action: GuardrailAction

    def __str__(self) -> str:
        return self.message


class Unhealthy(RuntimeError):
    """A guardrail tripped at `trip.step`; the run stops (see the module's docstring)."""

    def __init__(self, trip: Trip) -> None:
        super().__init__(trip.message)
        self.trip = trip


def _fmt(value: float) -> str:
    return f"{value:.4g}"


def _field(guard: Guard) -> str:
    return f"{FIELD}.{guard.value}"


@dataclass
class HealthWatch:
    cfg: Guardrails
    _recent: dict[Guard, deque[float]] = field(default_factory=dict)
    # (train reward averaged since the previous evaluation, eval reward), one per evaluation
    _evals: list[tuple[float, float]] = field(default_factory=list)
    _train_rewards: list[float] = field(default_factory=list)

    @classmethod
    def offline(cls, cfg: Guardrails) -> HealthWatch:
        """The offline trainers' watch: their metrics are losses (a `kl` there is to a
        teacher, not a reference), so only `nonFinite` applies."""
        off = dict.fromkeys(
            (
                "max_kl",
                "min_response_length",
                "max_truncated_fraction",
                "reward_eval_divergence",
                "min_entropy",
            )
        )
        return cls(cfg.model_copy(update=off))

    def check(self, step: int, metrics: Mapping[str, float]) -> Trip | None:
        """The first guard `step` trips, None when healthy (or guardrails are off)."""
        if not self.cfg.enabled:
            return None
        for check in (
            self._non_finite,
            self._kl,
            self._short,
            self._truncated,
            self._entropy,
            self._divergence,
        ):
            found = check(metrics)
            if found is not None:
                return self._trip(found[0], step, found[1])
        return None

    def diverged(self, step: int, what: str) -> Trip | None:
        """The `nonFinite` trip for a non-finite value the driver found mid-step (a reward,
        log-probs, advantages: `what` says which); None when that guard is off."""
        if not (self.cfg.enabled and self.cfg.non_finite):
            return None
        return self._trip(Guard.NON_FINITE, step, what)

    def _trip(self, guard: Guard, step: int, text: str) -> Trip:
        what = "suspending" if self.cfg.action == GuardrailAction.SUSPEND else "failing"
        return Trip(
            guard,
            step,
            f"guardrail {_field(guard)} tripped at step {step}: {text}; {what} the job after "
            f"checkpointing the last consistent step (raise or turn off {_field(guard)} to "
            "go on)",
            self.cfg.action,
        )

    # --- the guards: (guard, what happened) or None ------------------------------------------
    def _non_finite(self, m: Mapping[str, float]) -> tuple[Guard, str] | None:
        if not self.cfg.non_finite:
            return None
        for key, value in m.items():
            watched = key.endswith("loss") or key in _WATCHED
            if watched and isinstance(value, float) and not math.isfinite(value):
                return Guard.NON_FINITE, f"{key} is {value} (the weights diverged)"
        return None

    def _kl(self, m: Mapping[str, float]) -> tuple[Guard, str] | None:
        bound, kl = self.cfg.max_kl, m.get("kl")
        if bound is None or kl is None or not math.isfinite(kl) or kl <= bound:
            return None
        return Guard.KL, f"kl (mean per-token KL to the reference) is {_fmt(kl)} > {bound:g}"

    def _short(self, m: Mapping[str, float]) -> tuple[Guard, str] | None:
        bound, length = self.cfg.min_response_length, m.get("response_length")
        if bound is None or length is None or length >= bound:
            return None
        return (
            Guard.SHORT_RESPONSES,
            f"response_length (mean tokens per response) is {_fmt(length)} < {bound:g}",
        )

    def _window(self, guard: Guard, value: float | None) -> list[float] | None:
        """The last `patience` values of a patient guard's metric, once there are that many."""
        if value is None:
            return None
        window = self._recent.setdefault(guard, deque(maxlen=self.cfg.patience))
        window.append(value)
        return list(window) if len(window) == self.cfg.patience else None

    def _held(
        self, guard: Guard, m: Mapping[str, float], metric: str, bound: float | None, *, low: bool
    ) -> tuple[Guard, str] | None:
        """A patient guard: `metric` below `bound` (`low`), else at or above it, for the last
        `patience` steps in a row."""
        if bound is None:
            return None
        window = self._window(guard, m.get(metric))
        if window is None or (max(window) >= bound if low else min(window) < bound):
            return None
        values = ", ".join(_fmt(v) for v in window)
        return (
            guard,
            f"{metric} ({_MEANING[metric]}) was [{values}] {'<' if low else '>='} {bound:g} for "
            f"{len(window)} steps in a row",
        )

    def _truncated(self, m: Mapping[str, float]) -> tuple[Guard, str] | None:
        bound = self.cfg.max_truncated_fraction
        return self._held(Guard.LONG_RESPONSES, m, "truncated", bound, low=False)

    def _entropy(self, m: Mapping[str, float]) -> tuple[Guard, str] | None:
        return self._held(Guard.ENTROPY, m, "entropy", self.cfg.min_entropy, low=True)

    def _divergence(self, m: Mapping[str, float]) -> tuple[Guard, str] | None:
        n = self.cfg.reward_eval_divergence
        if REWARD in m and math.isfinite(m[REWARD]):
            self._train_rewards.append(m[REWARD])
        if n is None or EVAL_REWARD not in m or not self._train_rewards:
            return None
        train = sum(self._train_rewards) / len(self._train_rewards)
        self._train_rewards.clear()
        self._evals.append((train, m[EVAL_REWARD]))
        recent = self._evals[-(n + 1) :]
        if len(recent) < n + 1:
            return None
        pairs = list(itertools.pairwise(recent))
        if not all(b[0] > a[0] and b[1] < a[1] for a, b in pairs):
            return None
        trains = ", ".join(_fmt(t) for t, _ in recent)
        evals = ", ".join(_fmt(e) for _, e in recent)
        return (
            Guard.REWARD_EVAL_DIVERGENCE,
            f"over the last {n} evaluations the train reward rose [{trains}] while "
            f"{EVAL_REWARD} fell [{evals}]",
        )
