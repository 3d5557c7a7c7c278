"""Evidence that the builtin `repeat-letter` task suits CPU demos: a tiny random-init model
learns it with plain group-baseline REINFORCE (no PPO machinery) in under 100 steps.

This checks the task and its reward, not the trainer: the trainer's own learning tests run the
same task through PPO and GRPO.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rlhf_trainer.config import DataConfig
from rlhf_trainer.data.prompts import load_prompts
from rlhf_trainer.models.loading import load_causal_lm, load_tokenizer
from rlhf_trainer.models.value import position_ids_from_mask
from rlhf_trainer.rewards.builtin import BuiltinRewardFunction

STEPS, PROMPTS, SAMPLES, NEW_TOKENS, LR = 80, 16, 4, 8, 3e-3


def reinforce_curve(model_dir: Path, seed: int) -> list[float]:
    torch.manual_seed(seed)
    tok, model = load_tokenizer(model_dir), load_causal_lm(model_dir)
    cfg = DataConfig.model_validate({"train": [{"builtin": "repeat-letter"}], "labelKey": "label"})
    prompts = load_prompts(cfg, tok, Path("."), seed)
    reward_fn = BuiltinRewardFunction("repeat-letter")
    optim = torch.optim.Adam(model.parameters(), lr=LR)
    curve = []
    for batch, _ in zip(prompts.batches(PROMPTS, passes=None), range(STEPS), strict=False):
        enc = tok.pad({"input_ids": [p.prompt_ids for p in batch.items]}, return_tensors="pt")
        ids = enc.input_ids.repeat_interleave(SAMPLES, 0)
        mask = enc.attention_mask.repeat_interleave(SAMPLES, 0)
        with torch.no_grad():
            out = model.generate(
                input_ids=ids,
                attention_mask=mask,
                do_sample=True,
                max_new_tokens=NEW_TOKENS,
                pad_token_id=tok.pad_token_id,
            )
        width = ids.shape[1]
        response = out[:, width:]
        eos = response == tok.eos_token_id
        action = ~((eos.long().cumsum(1) - eos.long()) > 0)  # up to and including eos
        texts = tok.batch_decode(response, skip_special_tokens=True)
        prompt_texts = [p.prompt_text for p in batch.items for _ in range(SAMPLES)]
        labels = [p.label for p in batch.items for _ in range(SAMPLES)]
        rewards = reward_fn(
            [p + t for p, t in zip(prompt_texts, texts, strict=True)], prompt_texts, labels
        ).rewards
        group = rewards.view(PROMPTS, SAMPLES)
        adv = (group - group.mean(1, keepdim=True)) / (group.std(1, keepdim=True) + 1e-6)
        full_mask = torch.cat([mask, action.long()], 1)
        logits = model(
            input_ids=out, attention_mask=full_mask, position_ids=position_ids_from_mask(full_mask)
        ).logits[:, width - 1 : -1]
        logp = torch.log_softmax(logits.float(), -1).gather(-1, response.unsqueeze(-1))[..., 0]
        loss = -(logp * adv.reshape(-1, 1) * action).sum() / action.sum()
        optim.zero_grad()
        loss.backward()
        optim.step()
        curve.append(float(rewards.mean()))
    return curve


@pytest.mark.slow
def test_tiny_model_learns_repeat_letter(tiny_model_dir: Path) -> None:
    curve = reinforce_curve(tiny_model_dir, seed=0)
    fifth = len(curve) // 5
    first, last = sum(curve[:fifth]) / fifth, sum(curve[-fifth:]) / fifth
    print(f"repeat-letter REINFORCE: first 20% {first:.3f}, last 20% {last:.3f}")
    assert first < 0.3 and last > 0.6 and last > first + 0.4
