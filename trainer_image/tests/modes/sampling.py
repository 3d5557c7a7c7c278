"""Measuring what a trained tiny model does on the repeat-letter task (test helper)."""

from __future__ import annotations

from pathlib import Path

import torch

from rlhf_trainer.config import JobConfig


def chat_ids(tok: object, prompt: str) -> torch.Tensor:
    text = tok.apply_chat_template(  # type: ignore[attr-defined]
        [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
    )
    ids: torch.Tensor = tok(text, add_special_tokens=False, return_tensors="pt")["input_ids"]  # type: ignore[operator]
    return ids


def sampled_answers(model_dir: Path, prompt: str, n: int, tokens: int, seed: int) -> list[str]:
    """`n` answers sampled at temperature 1 (seeded), special tokens dropped."""
    from rlhf_trainer.models.loading import load_causal_lm, load_tokenizer

    model, tok = load_causal_lm(model_dir).eval(), load_tokenizer(model_dir)
    ids = chat_ids(tok, prompt).repeat(n, 1)
    torch.manual_seed(seed)
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=tokens,
            do_sample=True,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            pad_token_id=tok.pad_token_id,
        )
    return [str(tok.decode(row[ids.shape[1] :], skip_special_tokens=True)) for row in out]


def held_out_step_accuracy(model_dir: Path, cfg: JobConfig, base: Path) -> float:
    """Share of the steps of the builtin task's held-out split ("test") the model judges
    right (good-step log-odds > 0 exactly for the good steps)."""
    from rlhf_trainer.data.offline import load_prm
    from rlhf_trainer.data.steps import step_ids
    from rlhf_trainer.models.loading import load_causal_lm, load_tokenizer
    from rlhf_trainer.objectives.collate import collate
    from rlhf_trainer.objectives.kinds import offline_spec
    from rlhf_trainer.objectives.offline import prm_objective

    tok = load_tokenizer(model_dir)
    items = list(load_prm(cfg.data, tok, base, 0, cfg.algorithm.prm, split="test"))
    batch = collate(items, offline_spec(cfg), int(tok.pad_token_id), cfg.data.max_length)
    ids = step_ids(tok, cfg.algorithm.prm, "algorithm.prm")
    with torch.no_grad():
        _, stats = prm_objective(
            load_causal_lm(model_dir).eval(), batch, ids.positive, ids.negative
        )
    return float(stats["accuracy"])


def right_step_share(model_dir: Path, letters: str, n: int, seed: int) -> float:
    """Share of the steps (lines) of `n` sampled answers per letter that are the letter the
    prompt names: the repeat-letter task's own check of a step-form answer."""
    right = total = 0
    for letter in letters:
        for answer in sampled_answers(model_dir, f"Repeat the letter {letter}.", n, 16, seed):
            steps = [s.strip() for s in answer.split("\n") if s.strip()]
            right += sum(s == letter for s in steps)
            total += max(len(steps), 1)
    return right / total
