"""On-policy distillation (`algorithm.name: on-policy-distillation`), the online loop's part:
the student samples, a frozen teacher scores the sampled tokens, and each token's reward is
`-(logp_student - logp_teacher)`, the single-sample (k1) estimate of the reverse KL
`KL(student || teacher)` at that position. Pure functions; the driver calls them.

As in Thinking Machines' recipe (Lu et al., "On-Policy Distillation", 2025; their
`kl_discount_factor` 0) and NeMo RL's distillation advantage, a token's advantage is its own
reward, not the sum of the rewards after it, and it is not whitened: the policy-gradient
update (the actor's clipped surrogate) then lowers the student's log-prob exactly where it
puts more mass than the teacher. The student's log-prob is the one under the weights that
sampled (the trainer's forward before the update, or the engines' with `rollout.async`), as
verl's and TRL's on-policy trainers take it; the teacher reads the same token ids, so it
must share the student's tokenizer (`tokenizer_problem`).
"""

from __future__ import annotations

from collections.abc import Mapping

from torch import Tensor

from rlhf_trainer.algos.kl import kl_estimate
from rlhf_trainer.algos.masking import masked_mean

REVERSE_KL = "distill/reverse_kl"


def reverse_kl_tokens(student_logp: Tensor, teacher_logp: Tensor, mask: Tensor) -> Tensor:
    """`[B, R]` per-token `logp_student - logp_teacher` of the sampled tokens, 0 on padding
    (whatever the log-probs hold there)."""
    return kl_estimate(student_logp.float(), teacher_logp.float(), "k1", mask=mask)


def distill_scores(
    student_logp: Tensor, teacher_logp: Tensor, mask: Tensor
) -> tuple[Tensor, dict[str, float]]:
    """Each sequence's total reward `[B]` (minus its sampled reverse KL: the step's `reward`)
    and the step's `distill/reverse_kl`, the mean per-token reverse KL over the real tokens."""
    real = mask != 0
    reverse = reverse_kl_tokens(student_logp, teacher_logp, real)
    return -reverse.sum(dim=-1), {REVERSE_KL: float(masked_mean(reverse, real))}


def tokenizer_problem(student: Mapping[str, int], teacher: Mapping[str, int]) -> str | None:
    """Why a teacher with vocabulary `teacher` cannot score a student's tokens (None: it
    can): the same token must have the same id in both."""
    if dict(student) == dict(teacher):
        return None
    differing = sorted(t for t in set(student) | set(teacher) if student.get(t) != teacher.get(t))
    shown = ", ".join(repr(t) for t in differing[:3])
    return (
        f"models.teacher: its tokenizer differs from the actor's ({len(teacher)} tokens, the "
        f"actor's {len(student)}; {len(differing)} differ, e.g. {shown}); on-policy "
        "distillation reads the teacher's log-probs at the student's token ids: use a teacher "
        "with the actor's tokenizer (e.g. a larger model of the same family)"
    )
