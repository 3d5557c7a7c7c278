"""The offline trainers' forward passes and objectives, built on `rlhf_trainer.algos` (pure torch).

The trained ranks and the frozen reference ranks compute sequence log-probs with the very same
function (`sequence_logps_of`), so before the first update the policy's log-ratio to the
reference is zero up to float noise, as DPO and KTO assume. Statistics are detached tensors.
With `packed` (`training.packingSamples`) a forward runs on the real tokens only, as one row,
and its outputs come back in the padded layout (`rlhf_trainer.models.packing`).
"""

from __future__ import annotations

from torch import Tensor, nn

from rlhf_trainer.algos.distillation import distillation_loss
from rlhf_trainer.algos.losses import (
    dpo_loss,
    kto_loss,
    log_probs_from_logits,
    pairwise_rm_loss,
    sequence_logps,
    sft_loss,
)
from rlhf_trainer.algos.prm import prm_loss, step_margins
from rlhf_trainer.config import AlgorithmConfig
from rlhf_trainer.models.packing import causal_lm_logits, token_values
from rlhf_trainer.models.value import gather_last_real

from .kinds import OfflineSpec

Stats = dict[str, Tensor]


def flat(batch: dict[str, Tensor], key: str) -> Tensor:
    """`[B, K, L]` -> `[B * K, L]` (sample-major: the K sequences of a sample are adjacent)."""
    value = batch[key]
    return value.reshape(-1, value.shape[-1])


def causal_logits(model: nn.Module, batch: dict[str, Tensor], *, packed: bool = False) -> Tensor:
    """`[B * K, L - 1, V]` logits of a causal LM (or a DeepSpeed engine around one) at every
    position but the last: the logits at t score token t + 1."""
    return causal_lm_logits(
        model,
        flat(batch, "input_ids"),
        flat(batch, "attention_mask"),
        packed=packed,
        columns=slice(None, -1),
    )


def sequence_logps_of(
    model: nn.Module, batch: dict[str, Tensor], *, average: bool, packed: bool = False
) -> Tensor:
    """`[B, K]` log-probs of each response (sum, or mean with `average`) under `model`."""
    ids = flat(batch, "input_ids")
    token_logps = log_probs_from_logits(causal_logits(model, batch, packed=packed), ids[:, 1:])
    seq = sequence_logps(token_logps, flat(batch, "loss_mask")[:, 1:], average=average)
    return seq.reshape(batch["input_ids"].shape[:2])


def sft_objective(
    model: nn.Module, batch: dict[str, Tensor], *, packed: bool = False
) -> tuple[Tensor, Stats]:
    """Mean negative log-likelihood of the response tokens (the prompt is masked out)."""
    ids = flat(batch, "input_ids")
    mask = flat(batch, "loss_mask")[:, 1:]
    loss = sft_loss(causal_logits(model, batch, packed=packed), ids[:, 1:], mask)
    return loss, {"loss": loss.detach()}


def teacher_token_logps(model: nn.Module, batch: dict[str, Tensor]) -> Tensor:
    """`[B, K, L - 1, V]` next-token log-probs of a (teacher) model (float32): at t, of the
    token t + 1, as `causal_logits` aligns them."""
    logits = causal_logits(model, batch).float()
    return logits.log_softmax(dim=-1).reshape(*batch["input_ids"].shape[:2], *logits.shape[1:])


def distillation_objective(
    model: nn.Module, batch: dict[str, Tensor], algo: AlgorithmConfig
) -> tuple[Tensor, Stats]:
    """The divergence (`algorithm.distillLoss`) between the teacher's next-token distributions
    (`teacher_logps`) and the student's on the response tokens, plus `distillSftCoef` x the
    NLL of the data's responses."""
    ids = flat(batch, "input_ids")
    mask = flat(batch, "loss_mask")[:, 1:]
    logits = causal_logits(model, batch)
    teacher = batch["teacher_logps"].reshape(-1, *batch["teacher_logps"].shape[-2:])
    # The teacher's positions were cut with the batch's columns: keep the student's.
    teacher = teacher[:, : logits.shape[1]]
    kd, stats = distillation_loss(
        logits, teacher, mask, kind=algo.distill_loss.value, mix=algo.distill_mix
    )
    nll = sft_loss(logits, ids[:, 1:], mask)
    coef = algo.distill_sft_coef
    loss = (1.0 - coef) * kd + coef * nll if coef else kd
    return loss, {"loss": loss.detach(), "nll": nll.detach(), **stats}


def prm_objective(
    model: nn.Module, batch: dict[str, Tensor], positive: int, negative: int
) -> tuple[Tensor, Stats]:
    """Binary cross-entropy of the good-step log-odds at each step's separator token (the
    logits there predict the label token that follows; a step may end the sequence, so
    every position's logits are taken)."""
    logits = causal_lm_logits(
        model, flat(batch, "input_ids"), flat(batch, "attention_mask"), packed=False
    )
    margins = step_margins(logits, positive, negative)
    loss, stats = prm_loss(margins, flat(batch, "step_labels"))
    return loss, {"loss": loss.detach(), **stats}


def sequence_scores(model: nn.Module, batch: dict[str, Tensor], *, packed: bool = False) -> Tensor:
    """`[B, K]` scores of a value model: its value at each sequence's last real token."""
    mask = flat(batch, "attention_mask")
    values = token_values(model, flat(batch, "input_ids"), mask, packed=packed)
    return gather_last_real(values, mask).reshape(batch["input_ids"].shape[:2])


def reward_model_objective(scores: Tensor, margin: float | None) -> tuple[Tensor, Stats]:
    """Bradley-Terry pairwise loss on `[B, 2]` (chosen, rejected) scores."""
    chosen, rejected = scores[:, 0], scores[:, 1]
    loss = pairwise_rm_loss(chosen, rejected, margin)
    detached = scores.detach()
    stats = {
        "loss": loss.detach(),
        "accuracy": (detached[:, 0] > detached[:, 1]).float().mean(),
        "chosen_score": detached[:, 0].mean(),
        "rejected_score": detached[:, 1].mean(),
        "margin": (detached[:, 0] - detached[:, 1]).mean(),
    }
    return loss, stats


def preference_objective(
    policy: Tensor, reference: Tensor, spec: OfflineSpec, algo: AlgorithmConfig
) -> tuple[Tensor, Stats]:
    """DPO / IPO / cDPO on `[B, 2]` (chosen, rejected) policy and reference log-probs.

    `accuracy` is the share of pairs whose implicit reward `beta * (policy - ref)` is higher
    for the chosen response; `margin` the mean chosen-minus-rejected implicit reward.
    """
    if spec.dpo_variant is None:
        raise ValueError(f"{spec.algorithm.value} is not a preference (DPO-family) trainer")
    losses, chosen, rejected = dpo_loss(
        policy[:, 0],
        policy[:, 1],
        reference[:, 0],
        reference[:, 1],
        algo.beta,
        kind=spec.dpo_variant,
        label_smoothing=algo.label_smoothing,
    )
    loss = losses.mean()
    stats = {
        "loss": loss.detach(),
        "accuracy": (chosen > rejected).float().mean(),
        "chosen_reward": chosen.mean(),
        "rejected_reward": rejected.mean(),
        "margin": (chosen - rejected).mean(),
        "chosen_logps": policy[:, 0].detach().mean(),
        "rejected_logps": policy[:, 1].detach().mean(),
    }
    return loss, stats


def kl_reference_point(policy: Tensor, reference: Tensor) -> Tensor:
    """KTO's batch estimate of KL(policy || reference): the mean log-ratio of the mismatched
    completions (column 1), detached (a constant reference point, as in the paper)."""
    return (policy[:, 1] - reference[:, 1]).detach().mean()


def kto_objective(
    policy: Tensor, reference: Tensor, desirable: Tensor, kl: Tensor, algo: AlgorithmConfig
) -> tuple[Tensor, Stats]:
    """KTO on the examples (column 0) of `[B, 2]` log-probs, with reference point `kl`."""
    losses, rewards = kto_loss(
        policy[:, 0],
        reference[:, 0],
        desirable,
        kl,
        algo.beta,
        desirable_weight=algo.desirable_weight,
        undesirable_weight=algo.undesirable_weight,
    )
    loss = losses.mean()
    good = desirable.bool()
    stats = {
        "loss": loss.detach(),
        # The raw estimate; the loss uses max(0, kl) as its reference point.
        "kl": kl.detach(),
        # NaN when the micro-batch has no example of that kind; averaged out by the ranks.
        "desirable_reward": rewards[good].mean(),
        "undesirable_reward": rewards[~good].mean(),
    }
    return loss, stats
