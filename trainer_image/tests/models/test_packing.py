"""Sample packing: a packed batch gives the padded batch's log-probs, values, losses and
gradients (online PPO layout and every offline objective), for each CPU attention kernel; a
model that attends across packed sequences is refused before training."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import Tensor, nn

from rlhf_trainer.algos.masking import masked_mean
from rlhf_trainer.config import AlgorithmConfig, AlgorithmName, AttnImplementation, JobConfig
from rlhf_trainer.data.offline import KTOItem, PreferenceItem, SFTItem
from rlhf_trainer.distributed.forward import action_log_probs, action_values
from rlhf_trainer.models.attention import CPU_AUTO
from rlhf_trainer.models.loading import LoadOptions, load_causal_lm, load_value_model
from rlhf_trainer.models.packing import (
    PackingError,
    causal_lm_logits,
    check_packing,
    pack,
    row_limit,
    unpack,
)
from rlhf_trainer.objectives.collate import collate
from rlhf_trainer.objectives.kinds import offline_spec
from rlhf_trainer.objectives.offline import (
    kl_reference_point,
    kto_objective,
    preference_objective,
    reward_model_objective,
    sequence_logps_of,
    sequence_scores,
    sft_objective,
)
from rlhf_trainer.objectives.online import PolicyLossSettings, critic_objective, policy_objective

KERNELS = [AttnImplementation.SDPA.value, AttnImplementation.EAGER.value, CPU_AUTO]
# float32 on CPU: packed and padded runs differ by summation order only.
ATOL = 2e-5


def offline_job(algorithm: str) -> JobConfig:
    return JobConfig.model_validate(
        {
            "algorithm": {"name": algorithm},
            "models": {"actor": {"pretrained": "/m"}},
            "data": {"train": [{"path": "d.jsonl"}]},
        }
    )


def grads(model: nn.Module) -> dict[str, Tensor]:
    out = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    return out


def both_ways(
    model: nn.Module, loss_of: Callable[[bool], tuple[Tensor, Tensor]]
) -> tuple[tuple[Tensor, Tensor, dict[str, Tensor]], ...]:
    """(loss, per-token output, gradients) of a padded and of a packed forward."""
    runs = []
    for packed in (False, True):
        loss, output = loss_of(packed)
        loss.backward()
        runs.append((loss.detach(), output.detach(), grads(model)))
    return tuple(runs)


def assert_same_grads(padded: dict[str, Tensor], packed: dict[str, Tensor]) -> None:
    assert padded.keys() == packed.keys() and padded
    for name, grad in padded.items():
        scale = float(grad.abs().max()) or 1.0
        assert float((packed[name] - grad).abs().max()) <= 1e-4 * scale + 1e-7, name


# --- layout -------------------------------------------------------------------------------------
def test_pack_keeps_real_tokens_and_restarts_positions() -> None:
    ids = torch.tensor([[0, 0, 5, 6, 7], [8, 9, 0, 0, 0], [1, 2, 3, 4, 5]])
    mask = (ids != 0).long()
    row = pack(ids, mask)
    assert row.input_ids.tolist() == [[5, 6, 7, 8, 9, 1, 2, 3, 4, 5]]
    assert row.position_ids.tolist() == [[0, 1, 2, 0, 1, 0, 1, 2, 3, 4]]
    back = unpack(row.input_ids.unsqueeze(-1).float(), row)[..., 0]
    assert torch.equal(back.long(), ids)  # padding comes back as 0
    assert unpack(row.input_ids.float(), row, slice(-2, None)).tolist() == [
        [6.0, 7.0],
        [0.0, 0.0],
        [4.0, 5.0],
    ]


def test_rows_are_bounded_for_mask_based_kernels() -> None:
    """With a row limit, sequences fill rows in order; a row's unused tail restarts at 0."""
    ids = torch.tensor([[0, 0, 5, 6, 7], [8, 0, 0, 0, 0], [1, 2, 3, 4, 5]])
    mask = (ids != 0).long()
    rows = pack(ids, mask, row_tokens=4)  # raised to 5, the longest sequence
    assert rows.input_ids.tolist() == [[5, 6, 7, 8, 0], [1, 2, 3, 4, 5]]
    assert rows.position_ids.tolist() == [[0, 1, 2, 0, 0], [0, 1, 2, 3, 4]]
    back = unpack(rows.input_ids.unsqueeze(-1).float(), rows)[..., 0]
    assert torch.equal(back.long(), ids)


def test_one_row_for_flash_and_flex_attention(tiny_model_dir: Path) -> None:
    """Flash's varlen kernel reads sequence starts in one row only, and flex's block mask costs
    what the sequences cost; sdpa's mask is quadratic in the row: rows as wide as the batch."""
    model = load_causal_lm(tiny_model_dir, torch.float32)
    ids = torch.ones((3, 7), dtype=torch.long)
    assert row_limit(model, ids) == 7
    for kernel in ("flash_attention_2", "flex_attention"):
        model.config._attn_implementation = kernel
        assert row_limit(model, ids) is None


@pytest.mark.parametrize("kernel", KERNELS)
def test_rows_of_several_sequences_give_the_padded_logits(
    kernel: str, tiny_model_dir: Path
) -> None:
    """Short sequences share rows (3+4, 2+6, 1 under the width 8) and still see only
    themselves."""
    model = load_causal_lm(tiny_model_dir, torch.float32, LoadOptions(attn_implementation=kernel))
    lengths = (3, 4, 2, 6, 1)
    ids = torch.zeros((len(lengths), 8), dtype=torch.long)
    for row, n in enumerate(lengths):
        ids[row, 8 - n :] = torch.randint(
            3, 100, (n,), generator=torch.Generator().manual_seed(row)
        )
    mask = (ids != 0).long()
    assert pack(ids, mask, row_limit(model, ids)).input_ids.shape == (3, 8)
    with torch.no_grad():
        padded = causal_lm_logits(model, ids, mask, packed=False)
        packed = causal_lm_logits(model, ids, mask, packed=True)
    real = mask.bool()
    torch.testing.assert_close(packed[real], padded[real], atol=ATOL, rtol=1e-4)


# --- online: PPO layout (left-padded prompt, right-padded response) ----------------------------
def online_batch(generator: torch.Generator, vocab: int) -> dict[str, Tensor]:
    """Six samples, prompts of 2-6 tokens left-padded, responses of 1-8 right-padded: about
    half the 14 x 6 positions are padding."""
    prompts, responses = (2, 6, 3, 4, 5, 2), (8, 1, 5, 3, 7, 2)
    width_p, width_r = max(prompts), max(responses)
    rows = len(prompts)
    ids = torch.zeros((rows, width_p + width_r), dtype=torch.long)
    mask = torch.zeros_like(ids)
    actions = torch.zeros((rows, width_r), dtype=torch.long)
    for row, (p, r) in enumerate(zip(prompts, responses, strict=True)):
        ids[row, width_p - p : width_p + r] = torch.randint(3, vocab, (p + r,), generator=generator)
        mask[row, width_p - p : width_p + r] = 1
        actions[row, :r] = 1
    return {"input_ids": ids, "attention_mask": mask, "action_mask": actions}


@pytest.mark.parametrize("kernel", KERNELS)
def test_ppo_policy_loss_log_probs_and_gradients_match(kernel: str, tiny_model_dir: Path) -> None:
    model = load_causal_lm(tiny_model_dir, options=LoadOptions(attn_implementation=kernel))
    assert model.config._attn_implementation == kernel
    generator = torch.Generator().manual_seed(0)
    batch = online_batch(generator, model.config.vocab_size)
    mask = batch["action_mask"]
    advantages = torch.randn(mask.shape, generator=generator)
    old_logp = -torch.rand(mask.shape, generator=generator) * 5
    ref_logp = -torch.rand(mask.shape, generator=generator) * 5
    settings = PolicyLossSettings(
        clip_low=0.2,
        clip_high=0.28,
        dual_clip=3.0,
        aggregation="seq-mean-token-mean",
        norm_length=None,
        entropy_coef=0.01,
        use_kl_loss=True,
        kl_estimator="k3",
    )

    def loss_of(packed: bool) -> tuple[Tensor, Tensor]:
        logp, entropy = action_log_probs(
            model, batch, 0.7, with_entropy=True, entropy_grad=True, packed=packed
        )
        assert entropy is not None
        loss, _ = policy_objective(
            logp, old_logp, advantages, mask, settings, kl_coef=0.1, ref_logp=ref_logp
        )
        return loss - 0.01 * masked_mean(entropy, mask), logp

    (loss, logp, g), (loss_p, logp_p, g_p) = both_ways(model, loss_of)
    real = mask.bool()
    assert torch.allclose(logp_p[real], logp[real], atol=ATOL)
    assert float(loss_p) == pytest.approx(float(loss), abs=ATOL)
    assert_same_grads(g, g_p)


@pytest.mark.parametrize("kernel", KERNELS)
def test_ppo_value_loss_values_and_gradients_match(kernel: str, tiny_model_dir: Path) -> None:
    critic = load_value_model(tiny_model_dir, options=LoadOptions(attn_implementation=kernel))
    generator = torch.Generator().manual_seed(1)
    batch = online_batch(generator, critic.config.vocab_size)
    mask = batch["action_mask"]
    old_values = torch.randn(mask.shape, generator=generator)
    returns = torch.randn(mask.shape, generator=generator)

    def loss_of(packed: bool) -> tuple[Tensor, Tensor]:
        values = action_values(critic, batch, packed=packed)
        loss, _ = critic_objective(values, old_values, returns, mask, clip=0.2)
        return loss, values

    (loss, values, g), (loss_p, values_p, g_p) = both_ways(critic, loss_of)
    real = mask.bool()
    assert torch.allclose(values_p[real], values[real], atol=ATOL)
    assert float(loss_p) == pytest.approx(float(loss), abs=ATOL)
    assert_same_grads(g, g_p)


# --- offline: SFT, DPO, KTO, reward model (right-padded [B, K, L]) -----------------------------
def sequences(generator: torch.Generator, vocab: int, count: int) -> list[list[int]]:
    lengths = torch.randint(1, 9, (count,), generator=generator).tolist()
    return [torch.randint(3, vocab, (n,), generator=generator).tolist() for n in lengths]


@pytest.mark.parametrize("algorithm", ["sft", "dpo", "kto"])
def test_offline_losses_and_gradients_match(algorithm: str, tiny_model_dir: Path) -> None:
    model = load_causal_lm(tiny_model_dir)
    generator = torch.Generator().manual_seed(2)
    vocab = model.config.vocab_size
    prompts, a, b = (sequences(generator, vocab, 4) for _ in range(3))
    spec = offline_spec(offline_job(algorithm))
    algo = AlgorithmConfig(name=AlgorithmName(algorithm))
    items: list[SFTItem] | list[PreferenceItem] | list[KTOItem]
    if algorithm == "sft":
        items = [SFTItem(p, r) for p, r in zip(prompts, a, strict=True)]
    elif algorithm == "dpo":
        items = [PreferenceItem(p, c, r) for p, c, r in zip(prompts, a, b, strict=True)]
    else:
        items = [KTOItem(p, r, i % 2 == 0) for i, (p, r) in enumerate(zip(prompts, a, strict=True))]
    batch = collate(items, spec, 0, 64)
    reference = -torch.rand(batch["input_ids"].shape[:2], generator=generator) * 20

    def loss_of(packed: bool) -> tuple[Tensor, Tensor]:
        if algorithm == "sft":
            loss, _ = sft_objective(model, batch, packed=packed)
            return loss, loss
        policy = sequence_logps_of(model, batch, average=False, packed=packed)
        if algorithm == "dpo":
            return preference_objective(policy, reference, spec, algo)[0], policy
        kl = kl_reference_point(policy, reference)
        return kto_objective(policy, reference, batch["desirable"], kl, algo)[0], policy

    (loss, out, g), (loss_p, out_p, g_p) = both_ways(model, loss_of)
    assert torch.allclose(out_p, out, atol=1e-4)
    assert float(loss_p) == pytest.approx(float(loss), abs=1e-5)
    assert_same_grads(g, g_p)


def test_reward_model_loss_and_gradients_match(tiny_model_dir: Path) -> None:
    value_model = load_value_model(tiny_model_dir, head_seed=3)
    generator = torch.Generator().manual_seed(3)
    vocab = value_model.config.vocab_size
    prompts, chosen, rejected = (sequences(generator, vocab, 4) for _ in range(3))
    spec = offline_spec(offline_job("reward-model"))
    items = [PreferenceItem(p, c, r) for p, c, r in zip(prompts, chosen, rejected, strict=True)]
    batch = collate(items, spec, 0, 64)

    def loss_of(packed: bool) -> tuple[Tensor, Tensor]:
        scores = sequence_scores(value_model, batch, packed=packed)
        return reward_model_objective(scores, None)[0], scores

    (loss, scores, g), (loss_p, scores_p, g_p) = both_ways(value_model, loss_of)
    assert torch.allclose(scores_p, scores, atol=ATOL)
    assert float(loss_p) == pytest.approx(float(loss), abs=ATOL)
    assert_same_grads(g, g_p)


# --- the guard ----------------------------------------------------------------------------------
@pytest.mark.parametrize("kernel", KERNELS)
def test_probe_accepts_models_that_keep_sequences_apart(kernel: str, tiny_model_dir: Path) -> None:
    model = load_causal_lm(tiny_model_dir, options=LoadOptions(attn_implementation=kernel))

    def forward(ids: Tensor, positions: Tensor) -> Tensor:
        out = model(input_ids=ids, attention_mask=None, position_ids=positions, use_cache=False)
        return out.logits  # type: ignore[no-any-return]

    check_packing(forward, model.config.vocab_size, torch.device("cpu"))


def test_probe_refuses_a_forward_that_attends_across_sequences(tiny_model_dir: Path) -> None:
    """With a KV cache, transformers 5.19 skips its packed-sequence detection and the row
    attends across its sequences: the silent failure the probe exists for."""
    model = load_causal_lm(tiny_model_dir)

    def forward(ids: Tensor, positions: Tensor) -> Tensor:
        out = model(input_ids=ids, attention_mask=None, position_ids=positions, use_cache=True)
        return out.logits  # type: ignore[no-any-return]

    with pytest.raises(PackingError, match="attends across packed sequences"):
        check_packing(forward, model.config.vocab_size, torch.device("cpu"))
