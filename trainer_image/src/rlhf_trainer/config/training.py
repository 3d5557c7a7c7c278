"""`spec.training`: batch sizes, optimisation and the DeepSpeed strategy."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field, StringConstraints

from .base import ConfigModel
from .names import NAME_MAX


class LRScheduler(StrEnum):
    COSINE_WITH_MIN_LR = "cosine_with_min_lr"
    CONSTANT_WITH_WARMUP = "constant_with_warmup"
    LINEAR = "linear"


class AttnImplementation(StrEnum):
    """Attention kernels (transformers' `attn_implementation`) of the trained and frozen models.

    `auto`: FlashAttention-2 on GPUs where the `flash-attn` package is installed; without it
    FlexAttention for packed rows on GPUs; else PyTorch's scaled-dot-product attention.
    `flex_attention`: PyTorch's FlexAttention, compiled on first use; its block masks skip the
    blocks between packed sequences. vLLM engines choose their own kernels."""

    AUTO = "auto"
    FLASH_ATTENTION_2 = "flash_attention_2"
    FLEX_ATTENTION = "flex_attention"
    SDPA = "sdpa"
    EAGER = "eager"


class LoRAQuantization(StrEnum):
    # QLoRA (Dettmers et al. 2023): the frozen base in 4-bit NF4 (bitsandbytes, double
    # quantisation, computing in the job's dtype), trained adapters on top (models.qlora).
    FOUR_BIT = "4bit"


class LoRAConfig(ConfigModel):
    rank: int = Field(gt=0, le=1024)
    alpha: int = Field(16, gt=0)
    dropout: float = Field(0.0, ge=0, lt=1)
    target_modules: list[Annotated[str, StringConstraints(min_length=1, max_length=NAME_MAX)]] = (
        Field(
            default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"],
            min_length=1,
            max_length=64,
        )
    )
    quantization: LoRAQuantization | None = Field(
        None,
        description="4bit: QLoRA, the frozen base quantised to 4-bit NF4 by bitsandbytes (GPU "
        "or CPU; not with zeroStage 3); the vLLM engines and the export get full-precision "
        "weights (base dequantised, adapters merged).",
    )


class TrainingConfig(ConfigModel):
    # Batches. A step generates rolloutBatchSize prompts x samplesPerPrompt responses and trains
    # on them in optimiser steps of trainBatchSize samples, ppoEpochs times.
    rollout_batch_size: int = Field(512, gt=0, description="Prompts per step (online algorithms).")
    micro_rollout_batch_size: int = Field(
        8, gt=0, description="Per-device batch for log-prob/value/reward forward passes."
    )
    train_batch_size: int = Field(128, gt=0, description="Samples per optimiser step (global).")
    micro_train_batch_size: int = Field(4, gt=0, description="Per-device micro batch.")
    ppo_epochs: int = Field(1, gt=0, le=100, description="Passes over each step's samples.")
    num_episodes: int = Field(1, gt=0, description="Passes over the prompt data set.")
    epochs: int = Field(
        1,
        gt=0,
        description="Passes over the data set (offline trainers), or over each round's "
        "selected samples (rejection-sampling, iterative-dpo).",
    )
    max_steps: int | None = Field(
        None, gt=0, description="Stop after this many steps; default: what the data allows."
    )

    # Evaluation on data.eval (online algorithms): greedy and sampled responses, scored by the
    # job's reward sources.
    eval_every_steps: int | None = Field(
        None,
        gt=0,
        description="Evaluate on data.eval every N steps; with data.eval set, the last step "
        "is always evaluated.",
    )
    eval_samples: int | None = Field(
        None,
        ge=1,
        le=1024,
        description="Sampled responses per eval prompt (n of pass@k), at rollout.temperature; "
        "default: rollout.samplesPerPrompt.",
    )
    eval_pass_threshold: float = Field(
        1.0,
        description="An eval response passes (for pass@k) when its reward is >= this; 1.0 is "
        "a verifiable task's reward for a correct answer.",
    )

    # Optimisation.
    actor_learning_rate: float = Field(1e-6, gt=0, lt=1)
    critic_learning_rate: float = Field(9e-6, gt=0, lt=1)
    lr_scheduler: LRScheduler = LRScheduler.COSINE_WITH_MIN_LR
    lr_warmup_ratio: float = Field(0.03, ge=0, le=1)
    min_lr_ratio: float = Field(0.1, ge=0, le=1)
    weight_decay: float = Field(0.0, ge=0)
    adam_betas: tuple[float, float] = (0.9, 0.95)
    max_grad_norm: float = Field(1.0, gt=0)
    freeze_actor_steps: int = Field(
        0, ge=0, description="Critic warm-up: train only the critic for the first N steps."
    )

    # DeepSpeed strategy.
    zero_stage: int = Field(
        2,
        ge=0,
        le=3,
        description="DeepSpeed ZeRO stage. A role trained on one rank runs stages 1 and 2 as "
        "stage 0 (they would partition over a group of one), except with adamOffload on GPUs.",
    )
    bf16: bool = True
    adam_offload: bool = Field(False, description="Offload Adam states to CPU memory.")
    ref_reward_offload: bool = Field(False, description="Offload frozen reference/reward models.")
    gradient_checkpointing: bool = False
    compile: bool = Field(
        False,
        description="torch.compile the trained models (actor, critic, the offline trainers' "
        "model): their elementwise work fused, e.g. a size-L CPU update 2.0 -> 1.75 s; the "
        "first steps compile (~30-40 s on 2 CPU cores, again when sequence lengths first "
        "change). Not with zeroStage 3.",
    )
    packing_samples: bool = Field(
        False,
        description="Pack each micro-batch's sequences into one row without padding; attention "
        "stays within each sequence (position ids restart per sequence).",
    )
    attn_implementation: AttnImplementation = Field(
        AttnImplementation.AUTO,
        description="Attention kernel of the trained and frozen models: auto (FlashAttention-2 "
        "on GPUs with flash-attn installed, else flex_attention for packed rows on GPUs, else "
        "sdpa), flash_attention_2, flex_attention, sdpa "
        "or eager.",
    )
    lora: LoRAConfig | None = None
    seed: int = Field(42, ge=0)
    deterministic: bool = Field(
        False, description="Deterministic kernels (bit-exact resume where the platform allows)."
    )
