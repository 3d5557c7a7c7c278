"""Sample packing on a CUDA GPU: the checks `models/test_packing.py` makes on the CPU, on cuda.

On a GPU, transformers' sdpa and eager kernels must read sequence starts from the packed row's
position ids exactly as on the CPU (a block-diagonal causal mask), and the probe every rank runs
at build time must accept them there. Needs only torch and transformers (no Ray, DeepSpeed or
vLLM), so it runs on a bare GPU machine: `pytest -m gpu trainer_image/tests/gpu`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import Tensor

from rlhf_trainer.config import AttnImplementation
from rlhf_trainer.distributed.forward import action_log_probs
from rlhf_trainer.models.loading import LoadOptions, load_causal_lm
from rlhf_trainer.models.packing import check_packing
from rlhf_trainer.objectives.online import PolicyLossSettings, policy_objective

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

KERNELS = [
    AttnImplementation.SDPA.value,
    AttnImplementation.EAGER.value,
    AttnImplementation.FLEX_ATTENTION.value,
]
# (dtype, absolute log-prob tolerance, relative gradient tolerance): bf16 rounds each matmul,
# and packed and padded rows sum in different orders.
PRECISIONS = [(torch.float32, 1e-4, 1e-3), (torch.bfloat16, 0.1, 0.1)]
SETTINGS = PolicyLossSettings(
    clip_low=0.2,
    clip_high=0.28,
    dual_clip=None,
    aggregation="token-mean",
    norm_length=None,
    entropy_coef=0.0,
    use_kl_loss=False,
    kl_estimator="k1",
)


def ppo_batch(vocab: int, device: torch.device) -> dict[str, Tensor]:
    """Eight samples, left-padded prompts of 3-20 tokens and right-padded responses of 1-40."""
    generator = torch.Generator().manual_seed(0)
    prompts = torch.randint(3, 21, (8,), generator=generator).tolist()
    responses = torch.randint(1, 41, (8,), generator=generator).tolist()
    width_p, width_r = max(prompts), max(responses)
    ids = torch.zeros((8, width_p + width_r), dtype=torch.long)
    mask, actions = torch.zeros_like(ids), torch.zeros((8, width_r), dtype=torch.long)
    for row, (p, r) in enumerate(zip(prompts, responses, strict=True)):
        ids[row, width_p - p : width_p + r] = torch.randint(3, vocab, (p + r,), generator=generator)
        mask[row, width_p - p : width_p + r] = 1
        actions[row, :r] = 1
    batch = {"input_ids": ids, "attention_mask": mask, "action_mask": actions}
    batch["advantages"] = torch.randn(actions.shape, generator=generator)
    batch["old_logps"] = -torch.rand(actions.shape, generator=generator) * 5
    return {k: v.to(device) for k, v in batch.items()}


@pytest.mark.parametrize("kernel", KERNELS)
def test_probe_accepts_packing_on_cuda(kernel: str, tiny_model_dir: Path) -> None:
    model = load_causal_lm(tiny_model_dir, options=LoadOptions(attn_implementation=kernel))
    model.to("cuda")

    def forward(ids: Tensor, positions: Tensor) -> Tensor:
        out = model(input_ids=ids, attention_mask=None, position_ids=positions, use_cache=False)
        return out.logits  # type: ignore[no-any-return]

    check_packing(forward, model.config.vocab_size, torch.device("cuda"))


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize(("dtype", "logp_tol", "grad_tol"), PRECISIONS)
def test_packed_policy_loss_matches_padded_on_cuda(
    kernel: str, dtype: torch.dtype, logp_tol: float, grad_tol: float, tiny_model_dir: Path
) -> None:
    model = load_causal_lm(tiny_model_dir, dtype, LoadOptions(attn_implementation=kernel))
    model.to("cuda")
    batch = ppo_batch(model.config.vocab_size, torch.device("cuda"))
    runs = []
    for packed in (False, True):
        logp, _ = action_log_probs(model, batch, 1.0, packed=packed)
        loss, _ = policy_objective(
            logp,
            batch["old_logps"],
            batch["advantages"],
            batch["action_mask"],
            SETTINGS,
            kl_coef=0.0,
        )
        loss.backward()
        grads = {
            n: p.grad.float().clone() for n, p in model.named_parameters() if p.grad is not None
        }
        model.zero_grad()
        runs.append((logp.detach().float(), float(loss.detach()), grads))
    (logp, loss, grads), (logp_p, loss_p, grads_p) = runs
    real = batch["action_mask"].bool()
    assert float((logp_p[real] - logp[real]).abs().max()) <= logp_tol
    assert loss_p == pytest.approx(loss, abs=logp_tol)
    assert grads.keys() == grads_p.keys() and grads
    for name, grad in grads.items():
        scale = float(grad.abs().max()) or 1.0
        assert float((grads_p[name] - grad).abs().max()) <= grad_tol * scale + 1e-6, name
