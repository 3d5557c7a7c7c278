"""`data.format: openai`: OpenAI's fine-tuning JSONL rows, checked with the gateway's validators
(`rlhf_trainer.config.finetune_files`) and laid out as the trainer's columns.

Supervised rows feed sft, dpo rows the preference trainers (dpo, ipo, cdpo, reward-model),
reinforcement rows the online algorithms: their `messages` are the prompt, and the whole row is
a grader's `item`.
"""

from __future__ import annotations

from typing import Any

from rlhf_trainer.config import DataConfig
from rlhf_trainer.config.finetune_files import FineTuneMethod, row_problems, training_columns

from .builtin import RowKind

Row = dict[str, Any]
METHOD_OF_KIND: dict[str, FineTuneMethod] = {
    "prompt": FineTuneMethod.REINFORCEMENT,
    "sft": FineTuneMethod.SUPERVISED,
    "preference": FineTuneMethod.DPO,
}


class OpenAIRowError(ValueError):
    pass


def openai_rows(rows: list[Row], kind: RowKind, cfg: DataConfig, where: str) -> list[Row]:
    """Each row checked (the first bad one is refused, naming its number and field) and, for
    sft and preference data, moved to the columns `data.*Key` name. Prompt rows are kept
    whole: `prompt_value` reads their messages. Pretraining text (`data.pretrain`) is read as
    columns."""
    if kind == "text":  # PPO-ptx's pretraining text stays plain text
        return rows
    method = METHOD_OF_KIND.get(kind)
    if method is None:
        raise OpenAIRowError(
            f"data.format openai holds OpenAI's supervised, dpo and reinforcement files; "
            f"this algorithm reads {kind} rows: use data.format: columns"
        )
    out = []
    for number, row in enumerate(rows, start=1):
        problems = row_problems(method, row)
        if problems:
            field, why = problems[0]
            raise OpenAIRowError(
                f"{where}: row {number} is not OpenAI's {method.value} format: "
                f"{field + ': ' if field else ''}{why}"
            )
        if method is FineTuneMethod.REINFORCEMENT:
            out.append(row)
            continue
        columns = training_columns(method, row)
        keys = {
            "prompt": cfg.input_key,
            "response": cfg.output_key,
            "chosen": cfg.chosen_key,
            "rejected": cfg.rejected_key,
        }
        out.append({keys[k]: v for k, v in columns.items()})
    return out


def prompt_value(row: Row) -> Any:
    """A reinforcement row's prompt: its messages as chat messages."""
    return training_columns(FineTuneMethod.REINFORCEMENT, row)["prompt"]
