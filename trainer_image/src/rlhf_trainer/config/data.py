"""`spec.data`: prompt, SFT and preference datasets."""

from __future__ import annotations

from enum import StrEnum
from typing import Self

from pydantic import Field, model_validator

from .base import ConfigModel
from .names import NAME_MAX, PATH_MAX
from .refs import ConfigMapKeyRef
from .sizes import JOB_CONFIG_BUDGET


class DatasetSource(ConfigModel):
    """Exactly one of `path` (JSON/JSONL/Parquet file or directory: a local path, or on a
    cluster `pvc://<claim>/<path>` or `s3://<bucket>/<key>`), `hfId` (a Hugging Face dataset
    id), `configMapRef` (a file in a ConfigMap, cluster only) or `builtin` (a synthetic task
    bundled with the trainer)."""

    path: str | None = Field(None, min_length=1, max_length=PATH_MAX)
    hf_id: str | None = Field(None, min_length=1, max_length=PATH_MAX, alias="hfId")
    config_map_ref: ConfigMapKeyRef | None = Field(
        None, description="Cluster only: a data file kept in a ConfigMap (up to ~1 MiB)."
    )
    builtin: str | None = Field(None, min_length=1, max_length=NAME_MAX)
    split: str = Field("train", min_length=1, max_length=NAME_MAX)
    probability: float = Field(
        1.0, gt=0, le=1, description="Mixing probability when several sources are given."
    )

    @model_validator(mode="after")
    def _exactly_one_source(self) -> Self:
        sources = (self.path, self.hf_id, self.config_map_ref, self.builtin)
        if sum(x is not None for x in sources) != 1:
            raise ValueError("set exactly one of path, hfId, configMapRef or builtin")
        return self


class DataFormat(StrEnum):
    # Rows with the columns the *Key fields name.
    COLUMNS = "columns"
    # OpenAI's fine-tuning JSONL (config.finetune_files): supervised rows for sft, dpo rows
    # for the preference trainers, reinforcement rows for the online algorithms.
    OPENAI = "openai"


class DataConfig(ConfigModel):
    """Which columns hold what, and how prompts are templated and truncated."""

    format: DataFormat = Field(
        DataFormat.COLUMNS,
        description="columns: rows with the columns the *Key fields name. openai: OpenAI's "
        "fine-tuning JSONL: {messages} for sft, {input, preferred_output, "
        "non_preferred_output} for dpo-like trainers, {messages, ...fields} for online "
        "algorithms (every field is a grader's item); the *Key fields are then not used.",
    )
    train: list[DatasetSource] = Field(min_length=1, max_length=32)
    eval: list[DatasetSource] = Field(default_factory=list, max_length=32)
    pretrain: list[DatasetSource] = Field(
        default_factory=list,
        max_length=32,
        description="PPO-ptx: pretraining text the actor keeps modelling (algorithm.ptxCoef).",
    )
    pretrain_key: str = Field(
        "text", min_length=1, max_length=NAME_MAX, description="Column with pretraining text."
    )
    input_key: str = Field(
        "prompt", min_length=1, max_length=NAME_MAX, description="Column with the prompt."
    )
    label_key: str | None = Field(
        None,
        max_length=NAME_MAX,
        description="Column passed to reward functions as the label (e.g. the answer).",
    )
    output_key: str = Field(
        "response", min_length=1, max_length=NAME_MAX, description="SFT target column."
    )
    chosen_key: str = Field("chosen", min_length=1, max_length=NAME_MAX)
    rejected_key: str = Field("rejected", min_length=1, max_length=NAME_MAX)
    desirable_key: str = Field(
        "label", min_length=1, max_length=NAME_MAX, description="KTO: desirable flag column."
    )
    score_key: str = Field(
        "score",
        min_length=1,
        max_length=NAME_MAX,
        description="conditional-sft: column with the sample's score.",
    )
    score_template: str = Field(
        "{prompt} <rm_score>: {score}",
        min_length=1,
        max_length=PATH_MAX,
        description="conditional-sft: how a prompt is conditioned on a score (SteerLM); the "
        "same template with the desired score conditions the trained model at inference.",
    )
    steps_key: str = Field(
        "steps", min_length=1, max_length=NAME_MAX, description="prm: column with the steps."
    )
    step_labels_key: str = Field(
        "step_labels",
        min_length=1,
        max_length=NAME_MAX,
        description="prm: column with each step's good/bad flag.",
    )
    apply_chat_template: bool = Field(
        True, description="Wrap prompts in the tokenizer's chat template."
    )
    chat_template: str | None = Field(
        None, max_length=JOB_CONFIG_BUDGET, description="Jinja template overriding the model's."
    )
    max_samples: int | None = Field(None, gt=0, description="Cap on samples read per source.")
    max_prompt_length: int = Field(1024, gt=0, le=1048576, description="Prompt tokens kept.")
    max_length: int = Field(2048, gt=0, le=1048576, description="Offline trainers' sequence cap.")
    shuffle: bool = True
