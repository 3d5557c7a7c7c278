"""On-policy distillation's pure parts: per-token reverse-KL rewards on padded batches (garbage
in the padding), the advantages the estimator gives them, the step's metrics, and the
teacher's tokenizer check."""

from __future__ import annotations

import math

import pytest
import torch

from rlhf_trainer.config import AlgorithmConfig, AlgorithmName
from rlhf_trainer.loop.distill import (
    REVERSE_KL,
    distill_scores,
    reverse_kl_tokens,
    tokenizer_problem,
)
from rlhf_trainer.loop.estimators import compute_advantages

OPD = AlgorithmConfig(name=AlgorithmName.ON_POLICY_DISTILLATION)


def padded_batch(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Student and teacher log-probs `[3, 5]` with rows of 5, 3 and 1 real tokens, and
    -inf / NaN / 1e6 where the rows are padded."""
    g = torch.Generator().manual_seed(seed)
    student = -torch.rand(3, 5, generator=g) * 4
    teacher = -torch.rand(3, 5, generator=g) * 4
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]])
    student[1, 3:], teacher[1, 3:] = -math.inf, math.nan
    student[2, 1:], teacher[2, 1:] = 1e6, -math.inf
    return student, teacher, mask


def reference(
    student: torch.Tensor, teacher: torch.Tensor, mask: torch.Tensor
) -> list[list[float]]:
    """Row by row, token by token: logp_student - logp_teacher on real tokens, 0 elsewhere."""
    return [
        [float(student[b, t] - teacher[b, t]) if mask[b, t] else 0.0 for t in range(5)]
        for b in range(3)
    ]


def test_reverse_kl_tokens_match_a_loop_and_ignore_padding() -> None:
    student, teacher, mask = padded_batch()
    got = reverse_kl_tokens(student, teacher, mask)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, torch.tensor(reference(student, teacher, mask)))


def test_scores_are_minus_each_sequences_reverse_kl_and_the_metric_its_token_mean() -> None:
    student, teacher, mask = padded_batch(1)
    totals, metrics = distill_scores(student, teacher, mask)
    rows = reference(student, teacher, mask)
    assert totals.tolist() == pytest.approx([-sum(r) for r in rows], abs=1e-5)
    per_token = [
        v for r, m in zip(rows, mask.tolist(), strict=True) for v, k in zip(r, m, strict=True) if k
    ]
    assert metrics == {REVERSE_KL: pytest.approx(sum(per_token) / len(per_token), abs=1e-6)}


def test_each_tokens_advantage_is_its_own_reward_unwhitened() -> None:
    """Discount 0 (Thinking Machines' recipe): a token's advantage is -(logp_s - logp_t) at
    that token only; no KL to a reference; the sequence scores are not used."""
    student, teacher, mask = padded_batch(2)
    adv = compute_advantages(
        OPD,
        torch.full((3,), 99.0),
        mask,
        old_logp=student,
        ref_logp=None,
        values=None,
        kl_coef=0.5,
        group_size=1,
        teacher_logp=teacher,
    )
    expected = -torch.tensor(reference(student, teacher, mask))
    torch.testing.assert_close(adv.advantages, expected)
    assert torch.equal(adv.advantages, adv.returns)
    assert torch.equal(adv.kl, torch.zeros_like(adv.kl))


def test_the_estimator_needs_the_teacher() -> None:
    student, _, mask = padded_batch()
    with pytest.raises(ValueError, match="teacher's log-probs"):
        compute_advantages(
            OPD,
            torch.zeros(3),
            mask,
            old_logp=student,
            ref_logp=None,
            values=None,
            kl_coef=0.0,
            group_size=1,
        )


def test_a_teacher_must_share_the_students_tokenizer() -> None:
    vocab = {"<pad>": 0, "a": 1, "b": 2}
    assert tokenizer_problem(vocab, dict(vocab)) is None
    problem = tokenizer_problem(vocab, {"<pad>": 0, "a": 2, "b": 1, "c": 3})
    assert problem is not None
    assert problem.startswith(
        "models.teacher: its tokenizer differs from the actor's (4 tokens, the actor's 3; "
        "3 differ, e.g. 'a', 'b', 'c')"
    )
