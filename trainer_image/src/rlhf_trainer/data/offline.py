"""Data sets of the offline trainers: SFT (prompt, response; conditional SFT with the score in
the prompt), preferences (prompt, chosen, rejected) for reward models and DPO/IPO/cDPO, KTO
(prompt, response, desirable) and PRM (prompt, steps, a label per step).

Each sample keeps prompt and response token ids apart, so a trainer can mask the prompt out of
the loss. The prompt is templated and left-truncated to `maxPromptLength` as for online
prompts; each response ends with the eos token and is cut so that prompt + response fits
`maxLength`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import PreTrainedTokenizerBase

from rlhf_trainer.config import DataConfig
from rlhf_trainer.config.steps import StepTokens

from .conditional import condition_prompt
from .dataset import OrderedDataset
from .prompts import column, render_prompt
from .sources import DataLoadError, mixed_rows
from .steps import StepTokenError, encode_steps, step_ids


@dataclass(frozen=True)
class SFTItem:
    prompt_ids: list[int]
    response_ids: list[int]

    @property
    def input_ids(self) -> list[int]:
        return self.prompt_ids + self.response_ids

    @property
    def loss_mask(self) -> list[int]:
        """1 on response tokens (trained), 0 on prompt tokens."""
        return [0] * len(self.prompt_ids) + [1] * len(self.response_ids)


@dataclass(frozen=True)
class PreferenceItem:
    prompt_ids: list[int]
    chosen_ids: list[int]
    rejected_ids: list[int]


@dataclass(frozen=True)
class PRMItem:
    """A response of steps: `positions` index the response's separator tokens (where the PRM
    is trained), `labels` say whether each step is good."""

    prompt_ids: list[int]
    response_ids: list[int]
    positions: list[int]
    labels: list[bool]


@dataclass(frozen=True)
class KTOItem:
    prompt_ids: list[int]
    response_ids: list[int]
    desirable: bool


def load_sft(
    cfg: DataConfig, tokenizer: PreTrainedTokenizerBase, base_dir: Path, seed: int
) -> OrderedDataset[SFTItem]:
    rows = mixed_rows(cfg.train, cfg, base_dir, seed, "sft")
    items = []
    for source, row in rows:
        prompt = _prompt_ids(column(row, cfg.input_key, source), tokenizer, cfg)
        response = _response_ids(column(row, cfg.output_key, source), tokenizer, cfg, prompt)
        items.append(SFTItem(prompt, response))
    return OrderedDataset(items, seed=seed, shuffle=cfg.shuffle)


def load_conditional_sft(
    cfg: DataConfig, tokenizer: PreTrainedTokenizerBase, base_dir: Path, seed: int
) -> OrderedDataset[SFTItem]:
    """SFT samples whose prompt carries the row's score (`data.scoreKey`) through
    `data.scoreTemplate` (see `conditional`)."""
    rows = mixed_rows(cfg.train, cfg, base_dir, seed, "conditional")
    items = []
    for source, row in rows:
        score = column(row, cfg.score_key, source)
        try:
            value = condition_prompt(column(row, cfg.input_key, source), score, cfg.score_template)
        except ValueError as err:
            raise DataLoadError(f"column {cfg.score_key!r} (data.scoreKey): {err}") from err
        prompt = _prompt_ids(value, tokenizer, cfg)
        response = _response_ids(column(row, cfg.output_key, source), tokenizer, cfg, prompt)
        items.append(SFTItem(prompt, response))
    return OrderedDataset(items, seed=seed, shuffle=cfg.shuffle)


def load_prm(
    cfg: DataConfig,
    tokenizer: PreTrainedTokenizerBase,
    base_dir: Path,
    seed: int,
    tokens: StepTokens,
    split: str | None = None,
) -> OrderedDataset[PRMItem]:
    """Prompts with their steps (`data.stepsKey`) and per-step labels (`data.stepLabelsKey`),
    encoded as `steps.encode_steps` does; steps beyond `maxLength` are dropped. `split`
    overrides the sources' split (a held-out evaluation of a builtin task)."""
    try:
        ids = step_ids(tokenizer, tokens, "algorithm.prm")
    except StepTokenError as err:
        raise DataLoadError(str(err)) from err
    sources = (
        cfg.train if split is None else [s.model_copy(update={"split": split}) for s in cfg.train]
    )
    rows = mixed_rows(sources, cfg, base_dir, seed, "prm")
    items = []
    for source, row in rows:
        prompt = _prompt_ids(column(row, cfg.input_key, source), tokenizer, cfg)
        steps = column(row, cfg.steps_key, source)
        labels = column(row, cfg.step_labels_key, source)
        if not isinstance(steps, list) or not isinstance(labels, list) or len(steps) != len(labels):
            raise DataLoadError(
                f"columns {cfg.steps_key!r} and {cfg.step_labels_key!r} (data.stepsKey, "
                "data.stepLabelsKey) must be lists of the same length: the steps and a label "
                "for each"
            )
        response, positions = encode_steps(tokenizer, [str(s) for s in steps], ids)
        room = cfg.max_length - len(prompt)
        kept = [i for i, p in enumerate(positions) if p < room]
        if not kept:
            raise DataLoadError(
                f"data.maxLength ({cfg.max_length}) leaves no room for a step after a prompt "
                f"of {len(prompt)} tokens; raise maxLength or lower maxPromptLength"
            )
        flags = [_desirable(labels[i], cfg.step_labels_key, "data.stepLabelsKey") for i in kept]
        end = positions[kept[-1]] + 1
        items.append(PRMItem(prompt, response[:end], [positions[i] for i in kept], flags))
    return OrderedDataset(items, seed=seed, shuffle=cfg.shuffle)


def load_preferences(
    cfg: DataConfig, tokenizer: PreTrainedTokenizerBase, base_dir: Path, seed: int
) -> OrderedDataset[PreferenceItem]:
    rows = mixed_rows(cfg.train, cfg, base_dir, seed, "preference")
    items = []
    for source, row in rows:
        prompt = _prompt_ids(column(row, cfg.input_key, source), tokenizer, cfg)
        chosen = _response_ids(column(row, cfg.chosen_key, source), tokenizer, cfg, prompt)
        rejected = _response_ids(column(row, cfg.rejected_key, source), tokenizer, cfg, prompt)
        items.append(PreferenceItem(prompt, chosen, rejected))
    return OrderedDataset(items, seed=seed, shuffle=cfg.shuffle)


def load_kto(
    cfg: DataConfig, tokenizer: PreTrainedTokenizerBase, base_dir: Path, seed: int
) -> OrderedDataset[KTOItem]:
    rows = mixed_rows(cfg.train, cfg, base_dir, seed, "kto")
    items = []
    for source, row in rows:
        prompt = _prompt_ids(column(row, cfg.input_key, source), tokenizer, cfg)
        response = _response_ids(column(row, cfg.output_key, source), tokenizer, cfg, prompt)
        flag = column(row, cfg.desirable_key, source)
        items.append(KTOItem(prompt, response, _desirable(flag, cfg.desirable_key)))
    return OrderedDataset(items, seed=seed, shuffle=cfg.shuffle)


def _prompt_ids(value: Any, tokenizer: PreTrainedTokenizerBase, cfg: DataConfig) -> list[int]:
    text = render_prompt(value, tokenizer, cfg)
    ids: list[int] = tokenizer(text, add_special_tokens=not cfg.apply_chat_template)["input_ids"]
    return ids[-cfg.max_prompt_length :]


def _response_ids(
    value: Any, tokenizer: PreTrainedTokenizerBase, cfg: DataConfig, prompt: list[int]
) -> list[int]:
    text = _response_text(value)
    ids: list[int] = tokenizer(text, add_special_tokens=False)["input_ids"]
    if tokenizer.eos_token_id is not None:
        ids = [*ids, tokenizer.eos_token_id]
    room = cfg.max_length - len(prompt)
    if room <= 0:
        raise DataLoadError(
            f"data.maxLength ({cfg.max_length}) leaves no room for a response after a prompt "
            f"of {len(prompt)} tokens; raise maxLength or lower maxPromptLength"
        )
    return ids[:room]


def _response_text(value: Any) -> str:
    """A response string, or a chat (list of messages) whose last message is the response."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and isinstance(value[-1], dict) and "content" in value[-1]:
        return str(value[-1]["content"])
    raise DataLoadError(
        "a response must be a string or a list of chat messages ending with the response; "
        f"got {type(value).__name__}"
    )


def _desirable(value: Any, key: str, field: str = "data.desirableKey") -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):
        return value.lower() in ("true", "1")
    raise DataLoadError(f"column {key!r} ({field}) must be a boolean; got {value!r}")
