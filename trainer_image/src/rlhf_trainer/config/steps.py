"""Process reward models (PRM; Lightman et al. 2023, Math-Shepherd, Wang et al. 2024): how the
steps of a response are marked and judged, for training one (`algorithm.name: prm`,
`algorithm.prm`) and for scoring with one (`models.rewardModels[].process`).

A response is its steps, each followed by the step separator; at the separator's (last) token
the model predicts the positive token for a good step and the negative token for a bad one, so
a step's score is `P(positive) / (P(positive) + P(negative))` there (OpenRLHF's PRM trainer,
with `placeholder_token` and `reward_tokens`).
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from .base import ConfigModel


class StepTokens(ConfigModel):
    separator: str = Field(
        "\n",
        min_length=1,
        max_length=64,
        description="Text that ends every step (tokenized on its own).",
    )
    positive: str = Field(
        "+", min_length=1, max_length=64, description="A single token: a good step."
    )
    negative: str = Field(
        "-", min_length=1, max_length=64, description="A single token: a bad step."
    )


class StepAggregation(StrEnum):
    """How a response's step scores become its reward."""

    MIN = "min"  # the weakest step (Lightman et al.): one bad step spoils the answer
    LAST = "last"  # the final step's score
    MEAN = "mean"
    # A reward at every step's token (dense): not implemented yet (see config.rules).
    PER_STEP = "per-step"


class ProcessReward(StepTokens):
    """`rewardModels[].process`: the model is a PRM (a causal LM trained with `algorithm.name:
    prm`, same tokens) whose step scores are aggregated into the response's reward."""

    aggregation: StepAggregation = StepAggregation.MIN
