"""DeepSpeed strategy: configs for trained and frozen models (pure), and engine construction.

On CPU, DeepSpeed picks its CPU accelerator and gloo by itself. The optimizer is always handed
to DeepSpeed as an instance (torch AdamW, or DeepSpeedCPUAdam for Adam offload on GPUs): a
config-declared optimizer would JIT-build `fused_adam`/`cpu_adam` (~45 s each on 2 cores) and
on CPU the offload is a no-op anyway, since the states already live in host memory. At ZeRO
stage 0 in bf16 it is our `MasterWeightAdamW`, which keeps the fp32 masters DeepSpeed's bf16
mode would otherwise keep in its slower unfused wrapper (master_adamw.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from rlhf_trainer.config import LRScheduler, TrainingConfig

from .clipped_adamw import ClippedAdamW
from .master_adamw import MasterWeightAdamW, cast_parameters

# ZeRO-3 keeps parameters below this many elements on every rank (cheap to replicate, and
# gathering them one by one would cost more than they save).
PARAM_PERSISTENCE_THRESHOLD = 10_000


@dataclass(frozen=True)
class OptimSpec:
    """What one trainable role's optimiser needs; actor and critic differ in lr."""

    learning_rate: float
    total_optimizer_steps: int


def gradient_accumulation(train_batch_size: int, micro_batch_size: int, world_size: int) -> int:
    unit = micro_batch_size * world_size
    if train_batch_size % unit:
        raise ValueError(
            f"training.trainBatchSize ({train_batch_size}) must be divisible by "
            f"microTrainBatchSize x ranks ({micro_batch_size} x {world_size})"
        )
    return train_batch_size // unit


def zero_section(t: TrainingConfig, *, offload_optimizer: bool) -> dict[str, Any]:
    section: dict[str, Any] = {
        "stage": t.zero_stage,
        "stage3_param_persistence_threshold": PARAM_PERSISTENCE_THRESHOLD,
        "stage3_max_live_parameters": 1e9,
        "stage3_prefetch_bucket_size": 5e7,
        "reduce_bucket_size": 5e7,
        "allgather_bucket_size": 5e7,
    }
    if offload_optimizer and t.zero_stage >= 1:
        section["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    return section


def clips_itself(t: TrainingConfig, *, on_gpu: bool) -> bool:
    """ZeRO stage 0 steps our own optimizers, which clip and report the gradient norm:
    `MasterWeightAdamW` in bf16, `ClippedAdamW` in fp32 (GPU Adam offload is refused at 0)."""
    return t.zero_stage == 0 and not (t.adam_offload and on_gpu)


def uses_master_adamw(t: TrainingConfig, *, on_gpu: bool) -> bool:
    """ZeRO stage 0 in bf16 trains through our `MasterWeightAdamW` (fp32 masters, clipping and
    the update in one fused pass) instead of DeepSpeed's unfused bf16 wrapper: DeepSpeed then
    sees plain parameters (its bf16 mode off), which we cast ourselves."""
    return t.bf16 and clips_itself(t, on_gpu=on_gpu)


def train_config(t: TrainingConfig, world_size: int, *, on_gpu: bool) -> dict[str, Any]:
    """The DeepSpeed config of a trained role (actor or critic)."""
    accumulation = gradient_accumulation(t.train_batch_size, t.micro_train_batch_size, world_size)
    own_precision = uses_master_adamw(t, on_gpu=on_gpu)
    precision: dict[str, Any] = {"bf16": {"enabled": t.bf16 and not own_precision}}
    if clips_itself(t, on_gpu=on_gpu):
        precision["gradient_clipping"] = 0.0  # our optimizer clips (it takes the norm anyway)
    if own_precision:
        precision["communication_data_type"] = "bf16"  # gradients still cross ranks in bf16
    return {
        "train_micro_batch_size_per_gpu": t.micro_train_batch_size,
        "gradient_accumulation_steps": accumulation,
        "train_batch_size": t.micro_train_batch_size * accumulation * world_size,
        "gradient_clipping": t.max_grad_norm,
        "zero_optimization": zero_section(t, offload_optimizer=t.adam_offload and on_gpu),
        **precision,
        # A torch optimizer instance is what we pass on CPU even with adamOffload set.
        "zero_force_ds_cpu_optimizer": False,
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }


def eval_config(t: TrainingConfig, world_size: int) -> dict[str, Any]:
    """DeepSpeed config of a frozen model (reference, reward): ZeRO-3 shards it, else none."""
    section: dict[str, Any] = {
        "stage": 3 if t.zero_stage == 3 else 0,
        "stage3_param_persistence_threshold": PARAM_PERSISTENCE_THRESHOLD,
    }
    if t.ref_reward_offload and t.zero_stage == 3:
        section["offload_param"] = {"device": "cpu", "pin_memory": True}
    return {
        "train_micro_batch_size_per_gpu": t.micro_rollout_batch_size,
        "train_batch_size": t.micro_rollout_batch_size * world_size,
        "zero_optimization": section,
        "bf16": {"enabled": t.bf16},
        "steps_per_print": 10**9,
    }


def total_optimizer_steps(
    max_steps: int, samples_per_step: int, train_batch_size: int, ppo_epochs: int
) -> int:
    """Optimizer steps of a run: scheduler length (warm-up and cosine are fractions of it)."""
    return max(1, max_steps * math.ceil(samples_per_step / train_batch_size) * ppo_epochs)


def build_scheduler(
    optimizer: torch.optim.Optimizer, t: TrainingConfig, total_steps: int
) -> torch.optim.lr_scheduler.LRScheduler:
    """Warm-up then cosine decay to `minLrRatio` x lr (or constant / linear), as OpenRLHF."""
    from transformers import get_scheduler

    warmup = math.ceil(total_steps * t.lr_warmup_ratio)
    extra: dict[str, Any] = {}
    if t.lr_scheduler is LRScheduler.COSINE_WITH_MIN_LR:
        extra = {"min_lr_rate": t.min_lr_ratio}
    scheduler: torch.optim.lr_scheduler.LRScheduler = get_scheduler(
        t.lr_scheduler.value,
        optimizer,
        num_warmup_steps=warmup,
        num_training_steps=total_steps,
        scheduler_specific_kwargs=extra,
    )
    return scheduler


def build_optimizer(
    model: nn.Module, t: TrainingConfig, lr: float, *, on_gpu: bool
) -> torch.optim.Optimizer:
    """The optimizer of `model`'s trainable parameters. At ZeRO-0 in bf16 this also casts the
    model's parameters to bf16, after `MasterWeightAdamW` has copied them (fp32 masters from
    the weights as loaded, not from their bf16 rounding)."""
    params = [p for p in model.parameters() if p.requires_grad]
    if t.adam_offload and on_gpu:
        from deepspeed.ops.adam import DeepSpeedCPUAdam

        offloaded: torch.optim.Optimizer = DeepSpeedCPUAdam(
            params, lr=lr, betas=t.adam_betas, weight_decay=t.weight_decay
        )
        return offloaded
    if uses_master_adamw(t, on_gpu=on_gpu):
        # Then the weights cast to bf16 as DeepSpeed's bf16 mode would: floating parameters
        # only, buffers kept.
        master = MasterWeightAdamW(
            params,
            lr=lr,
            betas=t.adam_betas,
            weight_decay=t.weight_decay,
            max_grad_norm=t.max_grad_norm,
        )
        cast_parameters(model, torch.bfloat16)
        return master
    if clips_itself(t, on_gpu=on_gpu):  # fp32 at stage 0: fused AdamW, clipped by itself
        return ClippedAdamW(
            params,
            lr=lr,
            betas=t.adam_betas,
            weight_decay=t.weight_decay,
            max_grad_norm=t.max_grad_norm,
        )
    # The fused kernel (CPU and CUDA; what transformers' Trainer, hence TRL, uses by default):
    # the same AdamW update in one pass over each tensor. On CPU the per-tensor loop took
    # ~5x longer for a 91M-parameter model (bench/ppo_step.py size L: seconds per step).
    adamw = torch.optim.AdamW(
        params, lr=lr, betas=t.adam_betas, weight_decay=t.weight_decay, fused=True
    )
    return adamw


def init_train_engine(
    model: nn.Module, t: TrainingConfig, optim: OptimSpec, world_size: int, *, on_gpu: bool
) -> Any:
    """A DeepSpeed engine with optimizer and scheduler (saved in its checkpoints)."""
    import deepspeed

    optimizer = build_optimizer(model, t, optim.learning_rate, on_gpu=on_gpu)
    scheduler = build_scheduler(optimizer, t, optim.total_optimizer_steps)
    engine, _, _, _ = deepspeed.initialize(
        model=model,
        optimizer=optimizer,
        lr_scheduler=scheduler,
        config=train_config(t, world_size, on_gpu=on_gpu),
        dist_init_required=False,
    )
    skip_lone_allreduce(engine, world_size)
    return engine


def skip_lone_allreduce(engine: Any, world_size: int) -> None:
    """Turn off DeepSpeed's backward all-reduce for one rank at ZeRO stage 0, where it is an
    identity that costs: it flattens every gradient into one buffer, reduces that over a group
    of one and copies it back (the `cat` and `_foreach_copy_` of ~0.1 s a micro-batch at size L
    on 2 cores). The flag is the one DeepSpeed clears itself when it has no process group.
    ZeRO stages 1-3 keep theirs: their reduction also fills the optimizer's partitions."""
    if world_size == 1 and not engine.zero_optimization():
        engine.enable_backward_allreduce = False


def init_eval_engine(
    model: nn.Module, t: TrainingConfig, world_size: int, device: torch.device
) -> nn.Module:
    """A frozen model: sharded by a DeepSpeed ZeRO-3 engine when zeroStage is 3, else whole on
    this rank's device (DeepSpeed places the ZeRO-3 engine itself; without it nothing would
    move the weights off the CPU where `from_pretrained` loaded them)."""
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    if t.zero_stage != 3:
        return model.to(device)
    import deepspeed

    engine, _, _, _ = deepspeed.initialize(
        model=model, config=eval_config(t, world_size), dist_init_required=False
    )
    engine.eval()
    module: nn.Module = engine
    return module
