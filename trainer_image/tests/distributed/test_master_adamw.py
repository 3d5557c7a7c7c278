"""MasterWeightAdamW: the update DeepSpeed's bf16 wrapper made (fp32 masters, clipping, AdamW),
its skipped steps, its checkpoints and the resume from one DeepSpeed's wrapper wrote."""

from __future__ import annotations

import io
from pathlib import Path

import one_gloo_rank
import pytest
import torch

from rlhf_trainer.distributed import master_adamw
from rlhf_trainer.distributed.master_adamw import MasterWeightAdamW, cast_parameters

SHAPES = [(7, 5), (13,), (4, 9), (3,)]  # 35 + 13 + 36 + 3 elements


def fp32_params(seed: int = 0) -> list[torch.nn.Parameter]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(s, generator=generator)) for s in SHAPES]


def bf16_grads(step: int, scale: float) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(100 + step)
    return [(torch.randn(s, generator=generator) * scale).bfloat16() for s in SHAPES]


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks of 16 elements: parameters split across chunks and chunks spanning several."""
    monkeypatch.setattr(master_adamw, "CHUNK_ELEMENTS", 16)


@pytest.mark.parametrize("scale", [0.01, 10.0], ids=["under-the-clip", "clipped"])
def test_steps_like_torch_adamw_on_fp32_masters_with_clipping(
    small_chunks: None, scale: float
) -> None:
    """The reference: torch's AdamW on fp32 copies, gradients widened from bf16 and clipped by
    clip_grad_norm_; the bf16 weights are the masters rounded."""
    ours, reference = fp32_params(), fp32_params()
    optimizer = MasterWeightAdamW(
        ours, lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1, max_grad_norm=1.0
    )
    for p in ours:
        p.data = p.data.bfloat16()
    torch_adamw = torch.optim.AdamW(reference, lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1)
    for step in range(4):
        grads = bf16_grads(step, scale)
        for p, r, g in zip(ours, reference, grads, strict=True):
            p.grad, r.grad = g.clone(), g.float()
        norm = torch.nn.utils.clip_grad_norm_(reference, 1.0)
        torch_adamw.step()
        optimizer.step()
        assert optimizer._global_grad_norm == pytest.approx(float(norm), rel=1e-6)
        assert not optimizer.overflow
    for p, r in zip(ours, reference, strict=True):
        torch.testing.assert_close(optimizer.state[p]["master"], r, rtol=1e-6, atol=1e-7)
        assert p.dtype is torch.bfloat16
        assert torch.equal(p, optimizer.state[p]["master"].bfloat16())


def test_a_step_with_a_non_finite_gradient_changes_nothing(small_chunks: None) -> None:
    params = fp32_params()
    optimizer = MasterWeightAdamW(params, lr=1e-2, max_grad_norm=1.0)
    before = [p.detach().clone() for p in params]
    for p, g in zip(params, bf16_grads(0, 1.0), strict=True):
        p.grad = g.float()
    params[2].grad[1, 3] = float("inf")
    optimizer.step()
    assert optimizer.overflow and optimizer._global_grad_norm == float("inf")
    for p, b in zip(params, before, strict=True):
        assert torch.equal(p, b)
        assert float(optimizer.state[p]["step"]) == 0
        assert not optimizer.state[p]["exp_avg"].any()


def test_a_parameter_without_a_gradient_steps_as_with_zeros(small_chunks: None) -> None:
    """As DeepSpeed's wrapper: moments decay and weight decay applies."""
    ours, reference = fp32_params(), fp32_params()
    optimizer = MasterWeightAdamW(ours, lr=1e-2, weight_decay=0.1)
    torch_adamw = torch.optim.AdamW(reference, lr=1e-2, weight_decay=0.1)
    for step in range(2):
        for p, r, g in zip(ours, reference, bf16_grads(step, 1.0), strict=True):
            p.grad, r.grad = g.float(), g.float()
        ours[1].grad = None
        reference[1].grad = torch.zeros_like(reference[1])
        optimizer.step()
        torch_adamw.step()
    torch.testing.assert_close(ours[1], reference[1])


def trained(steps: int) -> tuple[list[torch.nn.Parameter], MasterWeightAdamW]:
    params = fp32_params()
    optimizer = MasterWeightAdamW(params, lr=1e-2, max_grad_norm=1.0)
    for step in range(steps):
        for p, g in zip(params, bf16_grads(step, 1.0), strict=True):
            p.grad = g.float()
        optimizer.step()
    return params, optimizer


def test_a_checkpoint_resumes_the_same_run(small_chunks: None) -> None:
    straight, straight_opt = trained(3)
    _, optimizer = trained(2)
    buffer = io.BytesIO()
    torch.save(optimizer.state_dict(), buffer)
    buffer.seek(0)
    resumed = fp32_params(seed=1)  # other weights: the checkpoint's masters replace them
    resumed_opt = MasterWeightAdamW(resumed, lr=5.0)
    resumed_opt.load_state_dict(torch.load(buffer, weights_only=True))
    assert resumed_opt.param_groups[0]["lr"] == 1e-2
    assert resumed_opt.max_grad_norm == 0.0  # the job's setting, not the checkpoint's
    resumed_opt.max_grad_norm = 1.0
    for p, g in zip(resumed, bf16_grads(2, 1.0), strict=True):
        p.grad = g.float()
    resumed_opt.step()
    for a, b in zip(resumed, straight, strict=True):
        assert torch.equal(resumed_opt.state[a]["master"], straight_opt.state[b]["master"])
        assert torch.equal(a, b)


def test_a_checkpoint_of_another_model_is_refused() -> None:
    _, optimizer = trained(1)
    other = MasterWeightAdamW(fp32_params()[:2], lr=1e-2)
    with pytest.raises(ValueError, match="has 4 parameters in 1 groups; this model trains 2 in 1"):
        other.load_state_dict(optimizer.state_dict())


def test_strided_gradients_are_read_and_strided_parameters_refused(small_chunks: None) -> None:
    ours, reference = fp32_params(), fp32_params()
    optimizer = MasterWeightAdamW(ours, lr=1e-2)
    torch_adamw = torch.optim.AdamW(reference, lr=1e-2, weight_decay=0.0)
    for p, r, g in zip(ours, reference, bf16_grads(0, 1.0), strict=True):
        # A transposed copy viewed back: same values, other strides.
        p.grad = g.float().t().contiguous().t() if g.dim() == 2 else g.float()
        r.grad = g.float()
    assert not ours[0].grad.is_contiguous()
    optimizer.step()
    torch_adamw.step()
    for p, r in zip(ours, reference, strict=True):
        torch.testing.assert_close(p, r)
    with pytest.raises(ValueError, match="needs contiguous parameters; got one of shape"):
        MasterWeightAdamW([torch.nn.Parameter(torch.randn(4, 3).t())], lr=1e-2)


def test_cast_parameters_keeps_the_objects_and_the_buffers() -> None:
    model = torch.nn.Linear(3, 2)
    model.register_buffer("inv_freq", torch.ones(2))
    weight = model.weight
    cast_parameters(model, torch.bfloat16)
    assert model.weight is weight and weight.dtype is torch.bfloat16
    assert model.inv_freq.dtype is torch.float32


RESUME_FROM_DEEPSPEEDS_WRAPPER = """
    import deepspeed
    from rlhf_trainer.config import TrainingConfig
    from rlhf_trainer.distributed import strategy

    out = sys.argv[1]
    t = TrainingConfig.model_validate(
        {"trainBatchSize": 4, "microTrainBatchSize": 4, "zeroStage": 0, "bf16": True,
         "maxGradNorm": 0.5, "weightDecay": 0.01}
    )

    # The engine before MasterWeightAdamW: DeepSpeed's bf16 mode around torch's fused AdamW.
    old_config = strategy.train_config(t, 1, on_gpu=False)
    old_config |= {"bf16": {"enabled": True}, "gradient_clipping": t.max_grad_norm}
    old_config.pop("communication_data_type")
    net = model()
    adamw = torch.optim.AdamW(net.parameters(), lr=1e-2, betas=t.adam_betas,
                              weight_decay=t.weight_decay, fused=True)
    old, _, _, _ = deepspeed.initialize(model=net, optimizer=adamw, config=old_config,
                                        dist_init_required=False)
    train(old, 2, torch.bfloat16)
    old.save_checkpoint(out, tag="step2")
    train(old, 1, torch.bfloat16)

    spec = strategy.OptimSpec(learning_rate=1e-2, total_optimizer_steps=10**6)
    new = strategy.init_train_engine(model(), t, spec, 1, on_gpu=False)
    new.lr_scheduler = None  # the old engine had none: compare the update alone
    new.load_checkpoint(out, tag="step2", load_lr_scheduler_states=False)
    train(new, 1, torch.bfloat16)
    print(json.dumps({
        "old": type(old.optimizer).__name__,
        "new": type(new.optimizer).__name__,
        "bf16_mode": new.bfloat16_enabled(),
        "allreduce": [old.enable_backward_allreduce, new.enable_backward_allreduce],
        "grad_norm": [old.get_global_grad_norm(), new.get_global_grad_norm()],
        "masters": [
            (a - new.optimizer.state[b]["master"]).abs().max().item()
            for a, b in zip(old.optimizer.fp32_groups[0], new.module.parameters())
        ],
        "weights": [torch.equal(a, b) for a, b in zip(old.module.parameters(),
                                                        new.module.parameters())],
        "dtypes": sorted({str(p.dtype) for p in new.module.parameters()}),
    }))
"""


def test_a_deepspeed_bf16_checkpoint_resumes_on_it(tmp_path: Path) -> None:
    """A stage-0 bf16 run checkpointed by DeepSpeed's wrapper resumes on our optimizer: the
    step after the resume is the one the old engine made (real DeepSpeed, one gloo rank), the
    old reducing its gradients over the one rank, the new not (`skip_lone_allreduce`)."""
    result = one_gloo_rank.run(RESUME_FROM_DEEPSPEEDS_WRAPPER, str(tmp_path / "ckpt"))
    assert result["old"] == "FP16_UnfusedOptimizer" and result["new"] == "MasterWeightAdamW"
    assert result["bf16_mode"] is False and result["dtypes"] == ["torch.bfloat16"]
    # The new engine skipped DeepSpeed's all-reduce over its one rank, and stepped the same.
    assert result["allreduce"] == [True, False]
    old_norm, new_norm = result["grad_norm"]
    assert new_norm == pytest.approx(old_norm, rel=1e-5) and new_norm > 0.5  # clipped
    assert max(result["masters"]) < 1e-6
    assert all(result["weights"])
