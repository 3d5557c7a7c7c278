"""One rank at ZeRO stage 0 and the resume of its ZeRO-1/2 checkpoints (zero_resume)."""

from __future__ import annotations

from collections import namedtuple
from pathlib import Path

import one_gloo_rank
import pytest
import torch

from rlhf_trainer.config import TrainingConfig
from rlhf_trainer.distributed.zero_resume import one_rank_training, stage0_optimizer_state

# DeepSpeed's fragment address has these two fields (deepspeed.utils.tensor_fragment).
Address = namedtuple("Address", ["numel", "start"])


@pytest.mark.parametrize(
    ("stage", "world_size", "offload", "on_gpu", "runs_at"),
    [
        (2, 1, False, False, 0),
        (1, 1, False, True, 0),
        (2, 1, True, False, 0),  # Adam offload means nothing on a CPU: host memory already
        (2, 1, True, True, 2),  # on a GPU it needs the ZeRO optimizer
        (2, 2, False, False, 2),
        (3, 1, False, False, 3),
        (0, 1, False, False, 0),
    ],
)
def test_one_rank_runs_zero_1_and_2_at_stage_0(
    stage: int, world_size: int, offload: bool, on_gpu: bool, runs_at: int
) -> None:
    t = TrainingConfig.model_validate({"zeroStage": stage, "adamOffload": offload})
    assert one_rank_training(t, world_size, on_gpu=on_gpu).zero_stage == runs_at
    assert t.zero_stage == stage  # the job's own settings untouched


def zero_state(partitions: int = 1) -> dict[str, object]:
    """A one-group ZeRO optimizer state over `a` (2 x 3) then `b` (4,), padded to 12."""
    flat = torch.arange(12, dtype=torch.float32)
    return {
        "partition_count": [partitions],
        "param_slice_mappings": [{"a": Address(6, 0), "b": Address(4, 6)}],
        "single_partition_of_fp32_groups": [flat[:10]],
        "base_optimizer_state": {
            "state": {0: {"step": torch.tensor(7.0), "exp_avg": flat + 100, "exp_avg_sq": flat}},
            "param_groups": [{"lr": 0.5, "initial_lr": 1.0, "betas": (0.9, 0.95), "params": [0]}],
        },
    }


def test_the_flat_state_is_cut_per_parameter_by_name() -> None:
    # The optimizer's order differs from the partition's: the names decide.
    state, masters = stage0_optimizer_state(
        zero_state(), [("b", torch.Size([4])), ("a", torch.Size([2, 3]))]
    )
    assert masters[0].tolist() == [6, 7, 8, 9]
    assert masters[1].tolist() == [[0, 1, 2], [3, 4, 5]]
    assert state["state"][0]["exp_avg"].tolist() == [106, 107, 108, 109]
    assert state["state"][1]["exp_avg_sq"].shape == (2, 3)
    assert float(state["state"][1]["step"]) == 7.0
    assert state["param_groups"] == [
        {"lr": 0.5, "initial_lr": 1.0, "betas": (0.9, 0.95), "params": [0, 1]}
    ]


def test_a_partitioned_or_foreign_checkpoint_is_refused() -> None:
    with pytest.raises(ValueError, match="partitioned over 2 ranks"):
        stage0_optimizer_state(zero_state(partitions=2), [("a", torch.Size([2, 3]))])
    with pytest.raises(ValueError, match=r"1 of the 2 trained parameters \(first: c\)"):
        stage0_optimizer_state(zero_state(), [("a", torch.Size([2, 3])), ("c", torch.Size([4]))])


RESUME_AT_STAGE_0 = """
    from rlhf_trainer.config import TrainingConfig
    from rlhf_trainer.distributed import strategy
    from rlhf_trainer.distributed.zero_resume import load_engine_checkpoint, one_rank_training

    out, bf16 = Path(sys.argv[1]), sys.argv[2] == "bf16"
    dtype = torch.bfloat16 if bf16 else torch.float32
    t = TrainingConfig.model_validate(
        {"trainBatchSize": 4, "microTrainBatchSize": 4, "zeroStage": 2, "bf16": bf16,
         "maxGradNorm": 0.5, "weightDecay": 0.01}
    )
    spec = strategy.OptimSpec(learning_rate=1e-2, total_optimizer_steps=100)

    # The engine one rank ran before: the job's stage 2.
    old = strategy.init_train_engine(model(), t, spec, 1, on_gpu=False)
    train(old, 2, dtype)
    old.save_checkpoint(str(out), tag="engine")
    train(old, 1, dtype)

    new = strategy.init_train_engine(model(), one_rank_training(t, 1, on_gpu=False), spec, 1,
                                     on_gpu=False)
    loaded = load_engine_checkpoint(new, out, "engine", load_lr_scheduler_states=True)
    steps_after_load = new.global_steps
    lr_after_load = new.lr_scheduler.get_last_lr()
    train(new, 1, dtype)
    old_fp32 = old.optimizer.single_partition_of_fp32_groups[0]
    new_params = list(new.module.parameters())
    if type(new.optimizer).__name__ == "MasterWeightAdamW":
        new_fp32 = torch.cat([new.optimizer.state[p]["master"].reshape(-1) for p in new_params])
    else:
        new_fp32 = torch.cat([p.detach().reshape(-1) for p in new_params])
    old_avg = old.optimizer.optimizer.state[old_fp32]["exp_avg"][: new_fp32.numel()]
    new_avg = torch.cat([new.optimizer.state[p]["exp_avg"].reshape(-1) for p in new_params])
    print(json.dumps({
        "loaded": loaded is not None,
        "stages": [old.zero_optimization_stage(), new.zero_optimization_stage()],
        "optimizers": [type(old.optimizer).__name__, type(new.optimizer).__name__],
        "steps": [steps_after_load, new.global_steps, old.global_steps],
        "lr": [lr_after_load, old.lr_scheduler.get_last_lr(), new.lr_scheduler.get_last_lr()],
        "masters": (old_fp32[: new_fp32.numel()] - new_fp32).abs().max().item(),
        "exp_avg": (old_avg - new_avg).abs().max().item(),
        "scale": old_fp32.abs().max().item(),
        "weights": max((a.float() - b.float()).abs().max().item()
                       for a, b in zip(old.module.parameters(), new_params)),
    }))
"""


@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_a_stage_2_checkpoint_of_one_rank_resumes_at_stage_0(
    tmp_path: Path, precision: str
) -> None:
    """Real DeepSpeed on one gloo rank: a run checkpointed by its ZeRO-2 engine resumes on the
    stage-0 engine, and the step after the resume is the one the ZeRO-2 engine made."""
    result = one_gloo_rank.run(RESUME_AT_STAGE_0, str(tmp_path / "ckpt"), precision)
    assert result["loaded"] and result["stages"] == [2, 0]
    assert result["optimizers"][0] == "DeepSpeedZeroOptimizer"
    expected = "MasterWeightAdamW" if precision == "bf16" else "ClippedAdamW"
    assert result["optimizers"][1] == expected
    assert result["steps"] == [2, 3, 3]
    lr_at_load, old_lr, new_lr = result["lr"]
    assert new_lr == pytest.approx(old_lr) and lr_at_load != new_lr
    # Same masters and moments after the step (fp32 rounding of the two update paths).
    assert result["masters"] <= 1e-6 * max(1.0, result["scale"])
    assert result["exp_avg"] <= 1e-6
    # bf16 weights are the masters rounded: within one bf16 step.
    assert result["weights"] <= (2**-7 if precision == "bf16" else 1e-6) * result["scale"]
