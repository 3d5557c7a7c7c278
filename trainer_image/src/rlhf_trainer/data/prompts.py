"""Prompt data sets for the online algorithms: templated, tokenized, truncated, mixed, ordered."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from transformers import PreTrainedTokenizerBase

from rlhf_trainer.config import DataConfig, DatasetSource
from rlhf_trainer.config.data import DataFormat

from .dataset import OrderedDataset
from .openai_rows import prompt_value
from .sources import DataLoadError, Row, describe, mixed_rows


@dataclass(frozen=True)
class PromptItem:
    """One prompt: the text the policy sees (chat template applied if configured), the label
    passed to reward functions (None without `data.labelKey`), and the prompt's token ids."""

    prompt_text: str
    label: str | None
    prompt_ids: list[int]
    # The row's fields: a grader's `item`.
    item: dict[str, Any] | None = None


class PromptDataset(OrderedDataset[PromptItem]):
    """Prompts in a fixed order; `batches(size, start=position)` resumes mid-run."""


def load_prompts(
    cfg: DataConfig,
    tokenizer: PreTrainedTokenizerBase,
    base_dir: Path,
    seed: int,
    *,
    which: Literal["train", "eval"] = "train",
) -> PromptDataset:
    """Read `data.train` (or `data.eval`), mix sources by probability, template, tokenize and
    left-truncate to `maxPromptLength`, shuffle with `seed` when `data.shuffle`."""
    sources = cfg.train if which == "train" else cfg.eval
    if not sources:
        raise DataLoadError(f"data.{which} has no sources")
    rows = mixed_rows(sources, cfg, base_dir, seed, "prompt")
    return PromptDataset(
        prompt_items(rows, cfg, tokenizer, where=f"data.{which}"), seed=seed, shuffle=cfg.shuffle
    )


def prompt_items(
    rows: list[tuple[DatasetSource, Row]],
    cfg: DataConfig,
    tokenizer: PreTrainedTokenizerBase,
    *,
    where: str,
) -> list[PromptItem]:
    texts = [render_prompt(prompt_column(row, cfg, src), tokenizer, cfg) for src, row in rows]
    # A chat template writes the special tokens itself; a raw prompt gets the tokenizer's own.
    encoded = tokenizer(texts, add_special_tokens=not cfg.apply_chat_template)["input_ids"]
    items = []
    for (src, row), text, ids in zip(rows, texts, encoded, strict=True):
        if len(ids) > cfg.max_prompt_length:
            # Keep the end: the instruction closest to the answer, and the generation prompt.
            ids = ids[-cfg.max_prompt_length :]
            text = str(tokenizer.decode(ids, skip_special_tokens=False))
        label = None
        if cfg.label_key is not None:
            label = label_text(column(row, cfg.label_key, src))
        items.append(PromptItem(text, label, list(ids), row))
    if not items:
        raise DataLoadError(f"{where}: no prompts")
    return items


def prompt_column(row: Row, cfg: DataConfig, source: DatasetSource) -> Any:
    """The prompt of a row: `data.inputKey`'s column, or an OpenAI row's messages."""
    if cfg.format is DataFormat.OPENAI:
        return prompt_value(row)
    return column(row, cfg.input_key, source)


def column(row: Row, key: str, source: DatasetSource) -> Any:
    if key not in row:
        raise DataLoadError(
            f"{describe(source)}: a row has no column {key!r} (it has: "
            f"{', '.join(sorted(map(str, row))) or 'nothing'}); set the data.*Key fields to the "
            "column names of your data"
        )
    return row[key]


def label_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def render_prompt(value: Any, tokenizer: PreTrainedTokenizerBase, cfg: DataConfig) -> str:
    """A prompt string, or a list of chat messages, as the text the policy continues."""
    messages = as_messages(value)
    if not cfg.apply_chat_template:
        if isinstance(value, str):
            return value
        raise DataLoadError(
            "a prompt is a list of chat messages but data.applyChatTemplate is false; "
            "enable it or give prompts as plain strings"
        )
    template = cfg.chat_template or tokenizer.chat_template
    if not template:
        raise DataLoadError(
            "data.applyChatTemplate is true but the tokenizer has no chat template: set "
            "data.chatTemplate (a Jinja template) or data.applyChatTemplate: false"
        )
    text = tokenizer.apply_chat_template(
        messages, chat_template=template, tokenize=False, add_generation_prompt=True
    )
    return str(text)


def as_messages(value: Any) -> list[dict[str, str]]:
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if isinstance(value, list) and all(
        isinstance(m, dict) and "role" in m and "content" in m for m in value
    ):
        return [{"role": str(m["role"]), "content": str(m["content"])} for m in value]
    raise DataLoadError(
        "a prompt must be a string or a list of {role, content} chat messages; "
        f"got {type(value).__name__}"
    )
