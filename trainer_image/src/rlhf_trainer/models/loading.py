"""Where a role's weights come from, and loading them with the ordinary `from_pretrained` path.

`resolve_model_dir` turns a `ModelSource` into what `from_pretrained` takes: a Hub id or a
directory for `pretrained` (relative paths are read against the job file's directory), the built
directory for `randomInit`. The loaders add one thing to `from_pretrained`: an error that says
what was tried and why it may have failed (typically: a Hub id on a machine with no network).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from rlhf_trainer.config import AttnImplementation, ModelSource, TrainingConfig
from rlhf_trainer.config.outcome import InvalidSpecError

from .attention import CPU_AUTO
from .attention import register as register_cpu_auto
from .tiny import ModelKind, build_record, build_tiny_model
from .value import ValueModel, init_value_head

_PATH_PREFIXES = ("./", "../", "~", ".\\", "..\\")


class ModelLoadError(InvalidSpecError, RuntimeError):
    """A model or tokenizer could not be loaded; the message says what was tried."""


@dataclass(frozen=True)
class LoadOptions:
    """What `from_pretrained` gets besides the path, for one model (and its tokenizer).

    `revision` and `trust_remote_code` come from the model's source (`models.*`);
    `attn_implementation` from `training.attnImplementation`, resolved for the device
    (`attention_kernel`); None leaves transformers' own choice.
    """

    revision: str | None = None
    trust_remote_code: bool = False
    attn_implementation: str | None = None

    @classmethod
    def of(cls, source: ModelSource, attn_implementation: str | None = None) -> LoadOptions:
        # A random-init build is a local directory of ours: no revision, no remote code.
        revision = source.revision if source.pretrained is not None else None
        return cls(revision, source.trust_remote_code, attn_implementation)

    def tokenizer_kwargs(self) -> dict[str, Any]:
        out: dict[str, Any] = {"trust_remote_code": self.trust_remote_code}
        if self.revision is not None:
            out["revision"] = self.revision
        return out

    def model_kwargs(self) -> dict[str, Any]:
        out = self.tokenizer_kwargs()
        if self.attn_implementation is not None:
            out["attn_implementation"] = self.attn_implementation
        if self.attn_implementation == CPU_AUTO:
            register_cpu_auto()  # in the process that loads the model
        return out


def attention_kernel(choice: AttnImplementation, *, on_gpu: bool, packed: bool = False) -> str:
    """transformers' `attn_implementation` for `training.attnImplementation` on this device.

    `auto` takes FlashAttention-2 on GPUs when the `flash_attn` package is importable (its
    varlen kernels skip the work between packed sequences). Without it, packed rows on a GPU
    take FlexAttention, whose block masks skip that work too: sdpa gets a dense block-diagonal
    mask, leaves its flash kernel and computes the whole row's square. Measured on an H200
    (`bench/packing.py --size 1B --dtype bf16 --samples 64 --micro 16 --prompt 16:256
    --response 1:768 --device cuda`, 48 % padding): padded sdpa 0.931 s per update, packed sdpa
    1.009 s (8 % slower; one row per micro-batch, before rows were capped at the batch's width,
    which is unmeasured on a GPU), packed flex 0.563 s (40 % saved). Elsewhere PyTorch's sdpa
    (on CPUs FlexAttention compiles for minutes), and on CPUs eager attention for short rows
    (`models.attention`: sdpa's CPU flash backward is slow at RL's ~100-token rows).
    """
    if choice is not AttnImplementation.AUTO:
        return choice.value
    if on_gpu and importlib.util.find_spec("flash_attn") is not None:
        return AttnImplementation.FLASH_ATTENTION_2.value
    if on_gpu and packed:
        return AttnImplementation.FLEX_ATTENTION.value
    if not on_gpu:
        return register_cpu_auto()
    return AttnImplementation.SDPA.value


def model_cache_dir() -> Path:
    """Where random-init models are built (deterministic, shared by every run and trainer):
    `RLHF_CACHE_DIR`; in a cluster's pods (the operator sets `RLHF_CHECKPOINT_DIR`, on the
    job's volume) `<RLHF_CHECKPOINT_DIR>/.models`, because the driver builds them on the head
    pod and the Ray workers of other pods load them by path; else `~/.cache/rlhf-operator/models`.
    """
    if os.environ.get("RLHF_CACHE_DIR"):
        return Path(os.environ["RLHF_CACHE_DIR"])
    if os.environ.get("RLHF_CHECKPOINT_DIR"):
        return Path(os.environ["RLHF_CHECKPOINT_DIR"]) / ".models"
    return Path.home() / ".cache" / "rlhf-operator" / "models"


def random_init_dir(source: ModelSource, cache_dir: Path, kind: ModelKind) -> Path:
    """The cache directory of a random-init build: one per (spec, kind), named by its digest."""
    if source.random_init is None:
        raise ValueError("random_init_dir needs a ModelSource with randomInit set")
    record = json.dumps(build_record(source.random_init, kind), sort_keys=True)
    digest = hashlib.sha256(record.encode()).hexdigest()[:12]
    return Path(cache_dir) / f"random-init-{kind}-{digest}"


def resolve_model_dir(
    source: ModelSource,
    cache_dir: Path,
    kind: ModelKind = "causal-lm",
    base_dir: Path | None = None,
) -> str:
    """What `from_pretrained` should get for `source`; builds random-init models on demand.

    `kind` matters only for `randomInit` (a causal LM or a reward model is built); a
    `pretrained` source is used as given, whatever its head. `base_dir` is where relative paths
    are read from (the job file's directory); default: the current directory.
    """
    if source.random_init is not None:
        out = random_init_dir(source, cache_dir, kind)
        return str(build_tiny_model(source.random_init, out, kind=kind))
    if source.pretrained is None:  # fromJob/fromStage: resolved before a run, never here
        raise ValueError(
            f"model source {source.label!r} was not resolved to a location: fromJob is "
            "resolved by the operator, fromStage by an RLHFPipeline"
        )
    return resolve_pretrained(source.pretrained, base_dir)


def resolve_pretrained(name: str, base_dir: Path | None = None) -> str:
    """A directory (absolute, `./`-relative, or existing under `base_dir`) or else a Hub id."""
    base = Path.cwd() if base_dir is None else Path(base_dir)
    explicit_path = name.startswith(("/", *_PATH_PREFIXES))
    candidate = Path(name).expanduser()
    if not candidate.is_absolute():
        candidate = base / candidate
    if candidate.exists():
        return str(candidate.resolve())
    if explicit_path:
        raise ModelLoadError(
            f"model path {name!r} does not exist (resolved to {candidate}); relative paths are "
            "read against the job file's directory"
        )
    return name  # a Hugging Face id such as "org/model"


def _load_hint(path: str) -> str:
    if Path(path).is_dir():
        return f"{path} is a directory but does not hold a loadable model"
    return (
        f"{path!r} is not a local directory, so it was read as a Hugging Face Hub id; with no "
        "network the model must already be in the HF cache (HF_HOME) or be given as a path"
    )


def _dtype(dtype: torch.dtype | str) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    value = getattr(torch, dtype, None)
    if not isinstance(value, torch.dtype):
        raise ValueError(f"dtype must be a torch dtype name such as bfloat16; got {dtype!r}")
    return value


def load_tokenizer(
    path: str | Path, options: LoadOptions | None = None, **kwargs: Any
) -> PreTrainedTokenizerBase:
    """The model's tokenizer; a missing pad token falls back to eos (left padding for prompts)."""
    extra = (options or LoadOptions()).tokenizer_kwargs()
    try:
        tok = AutoTokenizer.from_pretrained(str(path), **extra, **kwargs)
    except (OSError, ValueError) as err:
        raise ModelLoadError(f"cannot load tokenizer: {_load_hint(str(path))}: {err}") from err
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return tok


def load_causal_lm(
    path: str | Path,
    dtype: torch.dtype | str = torch.float32,
    options: LoadOptions | None = None,
    **kwargs: Any,
) -> PreTrainedModel:
    """The actor / reference policy: `AutoModelForCausalLM.from_pretrained(path)`."""
    extra = (options or LoadOptions()).model_kwargs()
    try:
        model: PreTrainedModel = AutoModelForCausalLM.from_pretrained(
            str(path), dtype=_dtype(dtype), **extra, **kwargs
        )
    except (OSError, ValueError) as err:
        raise ModelLoadError(f"cannot load causal LM: {_load_hint(str(path))}: {err}") from err
    return model


def load_trainable_causal_lm(
    path: str | Path,
    training: TrainingConfig,
    options: LoadOptions | None = None,
    device: torch.device | None = None,
) -> Any:
    """A causal LM ready to train in fp32 master weights: gradient checkpointing and LoRA
    (peft) applied as `training` asks. The actor of the online loop and the model of the
    offline trainers both start here.

    With `training.lora.quantization: 4bit` (QLoRA) the frozen base is quantised to NF4 while it
    loads, on `device` (the rank's; default CPU), computing in the job's dtype; see `qlora`.
    """
    lora = training.lora
    model: Any
    if lora is not None and lora.quantization is not None:
        from .qlora import prepare_for_kbit, quantized_load_kwargs

        compute = torch.bfloat16 if training.bf16 else torch.float32
        place = device if device is not None else torch.device("cpu")
        model = load_causal_lm(
            path, torch.float32, options, **quantized_load_kwargs(compute, place)
        )
        model = prepare_for_kbit(model, gradient_checkpointing=training.gradient_checkpointing)
    else:
        model = load_causal_lm(path, dtype=torch.float32, options=options)
        if training.gradient_checkpointing:
            model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False}
            )
            model.config.use_cache = False
    if lora is not None:
        from peft import LoraConfig, TaskType, get_peft_model

        model.enable_input_require_grads()
        model = get_peft_model(
            model,
            LoraConfig(
                task_type=TaskType.CAUSAL_LM,
                r=lora.rank,
                lora_alpha=lora.alpha,
                lora_dropout=lora.dropout,
                target_modules=list(lora.target_modules),
            ),
        )
    return model


def load_value_model(
    path: str | Path,
    dtype: torch.dtype | str = torch.float32,
    options: LoadOptions | None = None,
    *,
    head_seed: int = 0,
    **kwargs: Any,
) -> ValueModel:
    """A critic or reward model (`ValueModel`) from a reward model or a causal-LM checkpoint.

    From a sequence-classification checkpoint the trained `score` head is loaded; from a causal
    LM only the backbone is, and the head is initialised from `head_seed` (deterministic).
    """
    extra = (options or LoadOptions()).model_kwargs()
    try:
        hf, info = AutoModelForSequenceClassification.from_pretrained(
            str(path),
            dtype=_dtype(dtype),
            num_labels=1,
            output_loading_info=True,
            **extra,
            **kwargs,
        )
    except (OSError, ValueError) as err:
        raise ModelLoadError(f"cannot load value model: {_load_hint(str(path))}: {err}") from err
    model = ValueModel(hf)
    missing = set(info.get("missing_keys", ()))
    if any(key.startswith("score.") for key in missing):
        init_value_head(model.head, head_seed)
    if hf.config.pad_token_id is None and hf.config.eos_token_id is not None:
        # HF's pooled forward needs a pad id to find each row's last token.
        eos = hf.config.eos_token_id
        hf.config.pad_token_id = eos[0] if isinstance(eos, list) else eos
    return model
