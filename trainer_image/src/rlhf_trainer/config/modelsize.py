"""How many parameters each model of a job has, and how we know it (for `placement.auto`).

Sources, best first:
1. `randomInit`: exact, counted from its config (the trainer builds exactly that Llama).
2. A local `pretrained` directory's `config.json`, where the caller can read files (`rlhf
   plan/validate/run` on the machine that has them; never the operator, which reads no files).
3. `placement.modelSize` as the user wrote it (e.g. `7B`).
4. A size in the model's name (`Qwen/Qwen2.5-7B-Instruct` -> 7B), said to be parsed.

The count is what `from_pretrained` builds: embeddings, decoder layers, final norm and the
head (a language-model head for the actor and reference, a one-output score head for the
critic and reward models). Llama, Qwen2 and Mistral configs count exactly; other decoder
configs with the same keys are counted with the same formula and said to be estimated.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .models import ModelSource, RandomInit

# `placement.modelSize`: 7B, 1.5b, 500M, 0.5T or a plain count.
SIZE_PATTERN = r"^[0-9]+(\.[0-9]+)?[KkMmBbTt]?$"
_UNITS = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "t": 10**12}
# A size inside a model name: `-7B`, `_70b-`, `8x7B` (mixture of experts), bounded by
# something that is not a letter or digit, so `Qwen2.5` or `v0.3` are never taken for one.
_NAME_SIZE = re.compile(r"(?<![A-Za-z0-9.])(?:(\d+)x)?(\d+(?:\.\d+)?)([MmBb])(?![A-Za-z0-9])")
_SIZE = re.compile(SIZE_PATTERN)
_EXACT_TYPES = {"llama", "qwen2", "mistral"}

# The parsed config.json of a `pretrained` location, or None where it cannot be read here.
ConfigReader = Callable[[str], Mapping[str, Any] | None]


@dataclass(frozen=True)
class ModelSize:
    params: int
    source: str  # how it is known, for the plan's reasons

    @property
    def label(self) -> str:
        return format_params(self.params)


def format_params(params: int) -> str:
    """7615616512 -> '7.6B'; 494032768 -> '494M'; 70553706496 -> '70.6B'."""
    if params >= 10**9:
        return f"{params / 10**9:.1f}B"
    if params >= 10**6:
        return f"{params / 10**6:.0f}M"
    return f"{params / 10**3:.0f}K"


def parse_size(text: str) -> int | None:
    """`7B` -> 7_000_000_000; None when it is not a size."""
    if not _SIZE.match(text):
        return None
    unit = text[-1].lower() if text[-1].isalpha() else ""
    return int(float(text.rstrip("KkMmBbTt")) * _UNITS[unit])


def name_params(name: str) -> int | None:
    """The size a model's name states (the last one, e.g. `Llama-3-8B` -> 8B), if any."""
    found = _NAME_SIZE.findall(name.rsplit("/", 1)[-1])
    if not found:
        return None
    experts, number, unit = found[-1]
    params = float(number) * _UNITS[unit.lower()]
    return int(params * (int(experts) if experts else 1))


def _decoder_params(
    *,
    vocab: int,
    hidden: int,
    layers: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    intermediate: int,
    qkv_bias: bool,
    o_bias: bool,
    mlp_bias: bool,
) -> int:
    q, kv = heads * head_dim, kv_heads * head_dim
    attention = hidden * q + 2 * hidden * kv + q * hidden
    attention += (q + 2 * kv) * qkv_bias + hidden * o_bias
    mlp = 3 * hidden * intermediate + (2 * intermediate + hidden) * mlp_bias
    norms = 2 * hidden
    return vocab * hidden + layers * (attention + mlp + norms) + hidden


def _head_params(vocab: int, hidden: int, *, scoring: bool, tied: bool) -> int:
    if scoring:
        return hidden  # one score per sequence, no bias (value and reward heads)
    return 0 if tied else vocab * hidden


def random_init_params(spec: RandomInit, *, scoring: bool = False) -> int:
    """Exact parameter count of the Llama `rlhf_trainer.models.tiny` builds from `spec`."""
    head_dim = spec.hidden_size // spec.num_heads
    body = _decoder_params(
        vocab=spec.vocab_size,
        hidden=spec.hidden_size,
        layers=spec.num_layers,
        heads=spec.num_heads,
        kv_heads=spec.num_heads,
        head_dim=head_dim,
        intermediate=spec.intermediate_size,
        qkv_bias=False,
        o_bias=False,
        mlp_bias=False,
    )
    return body + _head_params(spec.vocab_size, spec.hidden_size, scoring=scoring, tied=False)


def config_params(config: Mapping[str, Any], *, scoring: bool = False) -> tuple[int, bool] | None:
    """(parameter count, exact?) of a Hugging Face decoder config.json; None without the keys."""
    try:
        hidden = int(config["hidden_size"])
        heads = int(config["num_attention_heads"])
        kind = str(config.get("model_type", ""))
        llama_bias = bool(config.get("attention_bias", False))
        body = _decoder_params(
            vocab=int(config["vocab_size"]),
            hidden=hidden,
            layers=int(config["num_hidden_layers"]),
            heads=heads,
            kv_heads=int(config.get("num_key_value_heads") or heads),
            head_dim=int(config.get("head_dim") or hidden // heads),
            intermediate=int(config["intermediate_size"]),
            qkv_bias=kind == "qwen2" or llama_bias,
            o_bias=llama_bias,
            mlp_bias=bool(config.get("mlp_bias", False)),
        )
        tied = bool(config.get("tie_word_embeddings", False))
        head = _head_params(int(config["vocab_size"]), hidden, scoring=scoring, tied=tied)
    except (KeyError, TypeError, ValueError):
        return None
    return body + head, kind in _EXACT_TYPES


def source_size(
    source: ModelSource,
    *,
    stated: str | None,
    read_config: ConfigReader | None = None,
    scoring: bool = False,
) -> ModelSize | None:
    """The size of one model (sources in the module's order); None when nothing tells it."""
    if source.random_init is not None:
        exact = random_init_params(source.random_init, scoring=scoring)
        return ModelSize(exact, "exact, from its randomInit config")
    name = source.pretrained or ""
    config = read_config(name) if read_config is not None else None
    counted = config_params(config, scoring=scoring) if config is not None else None
    if counted is not None:
        params, exact = counted
        return ModelSize(params, f"{'counted' if exact else 'estimated'} from {name}/config.json")
    if stated is not None:
        params_stated = parse_size(stated)
        if params_stated is not None:
            return ModelSize(params_stated, "placement.modelSize")
    parsed = name_params(name)
    if parsed is not None:
        return ModelSize(parsed, f"parsed from the name {name!r}")
    return None


def local_config_reader(base_dir: Path) -> ConfigReader:
    """Reads `<dir>/config.json` of a `pretrained` directory on this machine (relative paths
    start at `base_dir`, the manifest's directory, as `rlhf run` resolves them)."""

    def read(location: str) -> Mapping[str, Any] | None:
        if not location or "://" in location:
            return None
        path = Path(location).expanduser()
        if not path.is_absolute():
            path = base_dir / path
        try:
            loaded = json.loads((path / "config.json").read_text())
        except (OSError, ValueError):
            return None
        return loaded if isinstance(loaded, dict) else None

    return read
