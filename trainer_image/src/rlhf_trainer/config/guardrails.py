"""`spec.runPolicy.guardrails`: training-health checks after every step, so that a run that
collapses stops instead of burning its GPUs until `maxSteps`.

Each guard reads the step's metrics (the ones in metrics.jsonl); a guard whose metric the job
does not produce (no KL without a reference, no entropy without `algorithm.entropyCoef`, no
eval reward without `data.eval`) never trips. On a trip the trainer checkpoints the step
(unless its weights are not finite: then the last checkpoint stands), then stops: with
`action: suspend` (default) the operator suspends the job (`spec.runPolicy.suspend: true`),
which resumes from that checkpoint once unsuspended, typically with the bound raised; with
`action: fail` the job fails without retries. `rlhf run` stops the same way, with the same
message.
"""

from __future__ import annotations

import re
from enum import StrEnum

from pydantic import Field

from .base import ConfigModel


class GuardrailAction(StrEnum):
    SUSPEND = "suspend"
    FAIL = "fail"


class Guard(StrEnum):
    """The guards, by the name a trip reports (condition reason, event, message)."""

    NON_FINITE = "nonFinite"
    KL = "maxKl"
    SHORT_RESPONSES = "minResponseLength"
    LONG_RESPONSES = "maxTruncatedFraction"
    REWARD_EVAL_DIVERGENCE = "rewardEvalDivergence"
    ENTROPY = "minEntropy"


FIELD = "runPolicy.guardrails"
_TRIPPED = re.compile(r"\bguardrail runPolicy\.guardrails\.(\w+) tripped\b")


def tripped_guard(message: str) -> Guard | None:
    """The guard a trainer's outcome message says tripped (`context.health` writes it)."""
    found = _TRIPPED.search(message)
    try:
        return Guard(found.group(1)) if found else None
    except ValueError:
        return None


class Guardrails(ConfigModel):
    enabled: bool = Field(True, description="false turns every guard off.")
    action: GuardrailAction = Field(
        GuardrailAction.SUSPEND,
        description="suspend: checkpoint, then suspend the job (resume by unsuspending, the "
        "bound raised). fail: checkpoint, then fail without retries.",
    )
    non_finite: bool = Field(
        True, description="Trip on a NaN/inf loss, KL or reward (the weights diverged)."
    )
    max_kl: float | None = Field(
        10.0,
        gt=0,
        description="Trip when the mean per-token KL to the reference (metric kl) exceeds it "
        "(10 nats: a policy that left its reference; null: off).",
    )
    min_response_length: float | None = Field(
        1.0,
        ge=0,
        description="Trip when the mean response length in tokens (metric response_length) "
        "falls below it: responses shrank to nothing (null: off).",
    )
    max_truncated_fraction: float | None = Field(
        None,
        gt=0,
        le=1,
        description="Trip when at least this share of the responses hit rollout.maxNewTokens "
        "(metric truncated) for `patience` steps in a row: responses running to the cap. Off "
        "by default: tasks whose answers fill the cap by design would trip it.",
    )
    reward_eval_divergence: int | None = Field(
        4,
        ge=2,
        le=100,
        description="Trip when over this many evaluations in a row the train reward rose and "
        "the eval reward (eval/mean_reward) fell: reward hacking (null: off).",
    )
    min_entropy: float | None = Field(
        None,
        ge=0,
        description="Trip when the policy's mean token entropy (metric entropy, reported with "
        "algorithm.entropyCoef) falls below it for `patience` steps in a row: entropy "
        "collapse. Off by default: a task with one right answer collapses it by design.",
    )
    patience: int = Field(
        3, ge=1, le=1000, description="Steps in a row maxTruncatedFraction and minEntropy wait."
    )
