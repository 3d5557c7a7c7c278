"""Measuring what a trained tiny model does on the repeat-letter task (test helper)."""

from __future__ import annotations

from pathlib import Path

import torch


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
