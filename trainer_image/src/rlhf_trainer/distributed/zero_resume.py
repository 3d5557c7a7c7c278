"""One rank at ZeRO stage 0, and the resume of a checkpoint that rank wrote at stage 1 or 2.

ZeRO stages 1 and 2 partition the optimizer states (and gradients) over the data-parallel
ranks; over a group of one they partition nothing, and still flatten every gradient into the
ZeRO optimizer's buffer, reduce it over that one rank and step a flat fp32 copy. At the
benchmark's size L on 2 cores a micro-batch took 1.24-1.28 s at stage 2 against 1.00 s at
stage 0 (`bench/train_step.py --configs 0,2`: the optimizer step 0.28 -> 0.10 s, the backward
0.69 -> 0.62 s). So a trained role of one rank runs its engine at stage 0
(`one_rank_training`), unless Adam offload on a GPU needs the ZeRO optimizer; the job's
`training.zeroStage` (in the resume fingerprint) stays as written.

A checkpoint such a rank wrote before (DeepSpeed's `*zero_pp_rank_0_*_optim_states.pt`
beside the model states) still resumes: DeepSpeed loads the module, the scheduler and the
step counters, and `stage0_optimizer_state` rebuilds the stage-0 optimizer's state from the
ZeRO file, parameter by parameter, through the slice of the flat partition DeepSpeed recorded
for each parameter name (`param_slice_mappings`): fp32 masters from the flat fp32 copy, the
Adam moments from its inner optimizer's flat state. Nothing of the run's optimizer is lost.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from rlhf_trainer.config import TrainingConfig

from .master_adamw import MasterWeightAdamW

# DeepSpeed's names: the per-rank optimizer file of a ZeRO-1/2 checkpoint (a `bf16_` prefix
# for its BF16_Optimizer) and the keys of the state it holds (deepspeed.checkpoint.constants).
ZERO_OPTIMIZER_FILES = "*zero_pp_rank_*_optim_states.pt"
BASE_OPTIMIZER_STATE = "base_optimizer_state"
FP32_PARTITIONS = "single_partition_of_fp32_groups"
SLICE_MAPPINGS = "param_slice_mappings"
PARTITION_COUNT = "partition_count"


def one_rank_training(t: TrainingConfig, world_size: int, *, on_gpu: bool) -> TrainingConfig:
    """The training settings a trained role's engine runs with: stage 0 for ZeRO stages 1
    and 2 on one rank (see the module doc), else the job's own."""
    if world_size == 1 and t.zero_stage in (1, 2) and not (t.adam_offload and on_gpu):
        return t.model_copy(update={"zero_stage": 0})
    return t


def zero_optimizer_files(tag_dir: Path) -> list[Path]:
    """The ZeRO-1/2 optimizer files of one checkpoint tag, one per data-parallel rank."""
    return sorted(tag_dir.glob(ZERO_OPTIMIZER_FILES))


def stage0_optimizer_state(
    zero_state: Mapping[str, Any], params: Sequence[tuple[str, torch.Size]]
) -> tuple[dict[str, Any], list[Tensor]]:
    """From one rank's ZeRO-1/2 optimizer state dict, for the trained `params` (name, shape)
    in the optimizer's order: a torch-AdamW-layout state dict (`state` by index, one param
    group) and each parameter's fp32 copy. Raises where the checkpoint cannot give every
    parameter its state: partitioned over several ranks, or a parameter it does not hold."""
    counts = zero_state.get(PARTITION_COUNT, [1])
    counts = list(counts) if isinstance(counts, list | tuple) else [counts]
    if any(int(c) != 1 for c in counts):
        raise ValueError(
            f"this ZeRO checkpoint is partitioned over {max(int(c) for c in counts)} ranks; "
            "only a one-rank ZeRO-1/2 checkpoint resumes on one rank at stage 0"
        )
    base = zero_state[BASE_OPTIMIZER_STATE]
    where: dict[str, tuple[int, int, int]] = {
        name: (group, int(address.start), int(address.numel))
        for group, mapping in enumerate(zero_state[SLICE_MAPPINGS])
        for name, address in mapping.items()
    }
    missing = [name for name, _ in params if name not in where]
    if missing:
        raise ValueError(
            f"the ZeRO checkpoint holds no optimizer state for {len(missing)} of the "
            f"{len(params)} trained parameters (first: {missing[0]}): it was written for "
            "another model"
        )
    state: dict[int, dict[str, Tensor]] = {}
    masters: list[Tensor] = []
    for index, (name, shape) in enumerate(params):
        group, start, numel = where[name]
        inner = base["state"][group]
        state[index] = {
            "exp_avg": _piece(inner["exp_avg"], start, numel, shape),
            "exp_avg_sq": _piece(inner["exp_avg_sq"], start, numel, shape),
            "step": torch.tensor(float(inner["step"]), dtype=torch.float32),
        }
        masters.append(_piece(zero_state[FP32_PARTITIONS][group], start, numel, shape))
    # The schedule's `initial_lr` and the hyper-parameters of the inner optimizer's group.
    saved_group = {k: v for k, v in base["param_groups"][0].items() if k != "params"}
    group_dict = {**saved_group, "params": list(range(len(params)))}
    return {"state": state, "param_groups": [group_dict]}, masters


def _piece(flat: Tensor, start: int, numel: int, shape: torch.Size) -> Tensor:
    return flat.narrow(0, start, numel).view(shape).clone()


def load_stage0_optimizer(engine: Any, zero_file: Path) -> None:
    """Fill a stage-0 engine's optimizer from one rank's ZeRO-1/2 optimizer file, after
    DeepSpeed loaded the checkpoint's module and schedule. `MasterWeightAdamW` takes the fp32
    copies as its masters (and its bf16 weights from them); a plain optimizer's fp32
    parameters take them as their values."""
    saved = torch.load(zero_file, map_location="cpu", weights_only=False)
    named = [(n, p) for n, p in engine.module.named_parameters() if p.requires_grad]
    state, masters = stage0_optimizer_state(
        saved["optimizer_state_dict"], [(n, p.shape) for n, p in named]
    )
    if isinstance(engine.optimizer, MasterWeightAdamW):
        for index, master in enumerate(masters):
            state["state"][index]["master"] = master
        engine.optimizer.load_state_dict(state)
        return
    engine.optimizer.load_state_dict(state)
    with torch.no_grad():
        for (_, p), master in zip(named, masters, strict=True):
            p.copy_(master)


def load_engine_checkpoint(engine: Any, path: Path, tag: str, **options: Any) -> str | None:
    """`engine.load_checkpoint(path, tag, optimizer states included, **options)`; a
    checkpoint this one rank wrote at ZeRO 1-2 into a stage-0 engine has its optimizer state
    converted from DeepSpeed's ZeRO file. DeepSpeed's load path, or None where none is."""
    zero_files = zero_optimizer_files(path / tag)
    convert = bool(zero_files) and not engine.zero_optimization()
    load_path, _ = engine.load_checkpoint(
        str(path), tag=tag, load_optimizer_states=not convert, **options
    )
    if load_path is None or not convert:
        return load_path  # type: ignore[no-any-return]
    if len(zero_files) != 1:
        raise ValueError(
            f"the checkpoint under {path} holds ZeRO optimizer shards of {len(zero_files)} "
            "ranks; this role trains on one"
        )
    load_stage0_optimizer(engine, zero_files[0])
    return load_path  # type: ignore[no-any-return]
