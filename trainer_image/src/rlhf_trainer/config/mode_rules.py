"""Rules of the training modes of issue 13 (conditional SFT, distillation, PRMs, PPO-ptx) and
of QLoRA: pure checks that name the field and say what is allowed; `rules.job_problems` runs
them with the others.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .algorithm import AlgorithmName
from .base import Problem
from .conditioning import template_problem
from .steps import StepAggregation

if TYPE_CHECKING:
    from .job import JobConfig


def mode_problems(cfg: JobConfig) -> list[Problem]:
    return [
        *_conditional_problems(cfg),
        *_teacher_problems(cfg),
        *_ptx_problems(cfg),
        *_process_reward_problems(cfg),
        *_qlora_problems(cfg),
        *_packing_problems(cfg),
        *_compile_problems(cfg),
    ]


def _compile_problems(cfg: JobConfig) -> list[Problem]:
    if cfg.training.compile and cfg.training.zero_stage == 3:
        return [
            Problem(
                "training.compile",
                "cannot run with training.zeroStage 3: ZeRO-3 gathers and releases each "
                "parameter in hooks around every module, which break the compiled graphs; use "
                "zeroStage 0, 1 or 2, or compile false",
            )
        ]
    return []


def auto_mode_problems(cfg: JobConfig) -> list[Problem]:
    """What `placement.auto` cannot plan (checked before it plans)."""
    if cfg.algorithm.name.needs_teacher:
        return [
            Problem(
                "placement.auto",
                f"does not place a teacher ({cfg.algorithm.name.value}) yet: set "
                "placement.actorGpus and placement.teacherGpus (and colocateActorReference) "
                "yourself",
            )
        ]
    return []


def _conditional_problems(cfg: JobConfig) -> list[Problem]:
    if cfg.algorithm.name is not AlgorithmName.CONDITIONAL_SFT:
        return []
    why = template_problem(cfg.data.score_template)
    return [Problem("data.scoreTemplate", why)] if why else []


def _teacher_problems(cfg: JobConfig) -> list[Problem]:
    algo, teacher = cfg.algorithm.name, cfg.models.teacher
    if algo.needs_teacher and teacher is None:
        what = (
            "scores the student's sampled tokens with a teacher's log-probs"
            if algo.is_online
            else "learns from a teacher's token distributions"
        )
        return [
            Problem(
                "models.teacher",
                f"algorithm {algo.value} {what}: set models.teacher (pretrained or "
                "randomInit), a model with the actor's tokenizer",
            )
        ]
    if not algo.needs_teacher and teacher is not None:
        return [
            Problem(
                "models.teacher",
                f"only algorithms distillation and on-policy-distillation use a teacher (got "
                f"{algo.value}): remove it",
            )
        ]
    student = cfg.models.actor.random_init
    tiny = teacher.random_init if teacher is not None else None
    if tiny is not None and student is not None and tiny.vocab_size != student.vocab_size:
        return [
            Problem(
                "models.teacher.randomInit.vocabSize",
                "the teacher must share the actor's tokenizer (its log-probs are read at the "
                f"actor's token ids): got {tiny.vocab_size}, the actor's is "
                f"{student.vocab_size}",
            )
        ]
    return []


def _ptx_problems(cfg: JobConfig) -> list[Problem]:
    algo, coef, pretrain = cfg.algorithm.name, cfg.algorithm.ptx_coef, cfg.data.pretrain
    if coef > 0 and (not algo.is_online or algo.is_iterative):
        return [
            Problem(
                "algorithm.ptxCoef",
                "the pretraining loss is added to the PPO-family actor update (PPO-ptx); "
                f"algorithm {algo.value} has none: set it to 0",
            )
        ]
    if coef > 0 and not pretrain:
        return [
            Problem("data.pretrain", "algorithm.ptxCoef > 0 needs pretraining text: add a source")
        ]
    if pretrain and coef == 0:
        return [
            Problem(
                "algorithm.ptxCoef",
                "data.pretrain is used only with a ptx coefficient: set ptxCoef > 0 (e.g. "
                "0.05) or remove data.pretrain",
            )
        ]
    return []


def _process_reward_problems(cfg: JobConfig) -> list[Problem]:
    return [
        Problem(
            f"models.rewardModels[{i}].process.aggregation",
            "per-step (dense) process rewards are not implemented yet in this trainer (its "
            "advantage estimators take one reward per response); use min, last or mean",
        )
        for i, model in enumerate(cfg.models.reward_models)
        if model.process is not None and model.process.aggregation is StepAggregation.PER_STEP
    ]


def _qlora_problems(cfg: JobConfig) -> list[Problem]:
    """QLoRA runs wherever bitsandbytes has 4-bit kernels: CUDA GPUs and (bitsandbytes >= 0.48)
    x86/ARM CPUs, i.e. both `placement.device` values. What it cannot do is named here."""
    lora = cfg.training.lora
    if lora is None or lora.quantization is None:
        return []
    if cfg.training.zero_stage == 3:
        return [
            Problem(
                "training.lora.quantization",
                "4bit (QLoRA) cannot run with training.zeroStage 3: ZeRO-3 partitions every "
                "parameter across ranks, and bitsandbytes' packed 4-bit weights (with their "
                "quantisation state) cannot be partitioned; use zeroStage 0, 1 or 2 (the 4-bit "
                "base is small enough to keep whole on each rank), or plain LoRA with ZeRO-3",
            )
        ]
    return []


def _packing_problems(cfg: JobConfig) -> list[Problem]:
    algo = cfg.algorithm.name
    if not cfg.training.packing_samples or algo not in (
        AlgorithmName.DISTILLATION,
        AlgorithmName.PRM,
    ):
        return []
    what = "the teacher's distributions" if algo is AlgorithmName.DISTILLATION else "step labels"
    return [
        Problem(
            "training.packingSamples",
            f"is not implemented yet for algorithm {algo.value} ({what} are laid out per "
            "padded row); set it false",
        )
    ]
