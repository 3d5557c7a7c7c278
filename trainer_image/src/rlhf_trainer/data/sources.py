"""Reading rows (dicts) from a `DatasetSource`: local files, Hugging Face datasets, builtins.

Local files: `.jsonl` (one object per line), `.json` (a list of objects, or JSON lines), and
`.parquet`; a directory means every such file in it, in name order. Relative paths are read
against the job file's directory. Mixing several sources by probability is pure and seeded.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

from rlhf_trainer.config import DataConfig, DatasetSource
from rlhf_trainer.config.data import DataFormat
from rlhf_trainer.config.data_size import mixed_counts
from rlhf_trainer.config.outcome import InvalidSpecError

from .builtin import RowKind, builtin_rows
from .openai_rows import OpenAIRowError, openai_rows

Row = dict[str, Any]
T = TypeVar("T")
FILE_SUFFIXES = (".jsonl", ".json", ".parquet")


class DataLoadError(InvalidSpecError, RuntimeError):
    """A data set could not be read, or lacks a column; the message names the source."""


def describe(source: DatasetSource) -> str:
    if source.path is not None:
        return f"path {source.path!r}"
    if source.hf_id is not None:
        return f"hfId {source.hf_id!r} (split {source.split!r})"
    return f"builtin {source.builtin!r} (split {source.split!r})"


def read_source(
    source: DatasetSource, cfg: DataConfig, base_dir: Path, seed: int, kind: RowKind
) -> list[Row]:
    """All rows of one source, in its own order, capped at `cfg.max_samples`."""
    if source.path is not None:
        rows = read_path(resolve_data_path(source.path, base_dir))
    elif source.hf_id is not None:
        rows = read_hf(source.hf_id, source.split, cfg.max_samples)
    elif source.builtin is not None:
        try:
            rows = builtin_rows(source.builtin, source.split, seed, kind, cfg)
        except ValueError as err:
            raise DataLoadError(str(err)) from err
    elif source.config_map_ref is not None:
        # On a cluster the operator mounts the ConfigMap and gives the trainer a path instead.
        raise DataLoadError(
            f"configMapRef {source.config_map_ref.name}/{source.config_map_ref.key} is read "
            "from the cluster by the operator; outside a cluster give the file as path"
        )
    else:  # unreachable for a validated DatasetSource
        raise DataLoadError("a data source needs path, hfId, configMapRef or builtin")
    if cfg.max_samples is not None:
        rows = rows[: cfg.max_samples]
    if cfg.format is DataFormat.OPENAI:
        try:
            rows = openai_rows(rows, kind, cfg, describe(source))
        except OpenAIRowError as err:
            raise DataLoadError(str(err)) from None
    if not rows:
        raise DataLoadError(f"{describe(source)} holds no rows")
    return rows


def resolve_data_path(path: str, base_dir: Path) -> Path:
    candidate = Path(path).expanduser()
    if not candidate.is_absolute():
        candidate = Path(base_dir) / candidate
    if not candidate.exists():
        raise DataLoadError(
            f"data path {path!r} does not exist (resolved to {candidate}); relative paths are "
            "read against the job file's directory"
        )
    return candidate


def read_path(path: Path) -> list[Row]:
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix in FILE_SUFFIXES)
        if not files:
            raise DataLoadError(f"directory {path} has no {', '.join(FILE_SUFFIXES)} files to read")
        return [row for f in files for row in read_file(f)]
    return read_file(path)


def read_file(path: Path) -> list[Row]:
    if path.suffix == ".parquet":
        return _read_parquet(path)
    if path.suffix not in (".json", ".jsonl"):
        raise DataLoadError(
            f"{path}: unsupported file type {path.suffix!r}; use {', '.join(FILE_SUFFIXES)}"
        )
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json" and text.lstrip().startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise DataLoadError(f"{path}: not valid JSON: {err}") from err
        return _objects(data, path)
    rows: list[Row] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as err:
            raise DataLoadError(f"{path}:{number}: not a JSON object: {err.msg}") from err
    return _objects(rows, path)


def _objects(data: Any, where: Path) -> list[Row]:
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise DataLoadError(f"{where}: expected a list of JSON objects (one per sample)")
    return data


def _read_parquet(path: Path) -> list[Row]:
    try:
        import pyarrow.parquet as pq
    except ImportError as err:
        raise DataLoadError(
            f"{path}: reading Parquet needs pyarrow (part of the trainer extra): "
            "pip install pyarrow"
        ) from err
    rows: list[Row] = pq.read_table(path).to_pylist()
    return rows


def read_hf(hf_id: str, split: str, max_samples: int | None) -> list[Row]:
    """`datasets.load_dataset(hf_id, split=...)`: needs `datasets` and the Hub (or its cache)."""
    try:
        import datasets
    except ImportError as err:
        raise DataLoadError(
            f"hfId {hf_id!r}: loading Hugging Face datasets needs the `datasets` package, "
            "which this image does not include (pip install datasets); or download the data "
            "set and give it as a path (JSON/JSONL/Parquet)"
        ) from err
    try:
        ds = datasets.load_dataset(hf_id, split=split)
    except Exception as err:  # datasets raises many types (connection, file, value errors)
        raise DataLoadError(
            f"hfId {hf_id!r} (split {split!r}) could not be loaded: {err}. With no network the "
            "data set must already be in the HF cache (HF_HOME), or be given as a path"
        ) from err
    if max_samples is not None:
        ds = ds.select(range(min(max_samples, len(ds))))
    return [dict(row) for row in ds]


def mix(groups: Sequence[list[T]], probabilities: Sequence[float], seed: int) -> list[T]:
    """One list drawing on each group in proportion to its probability (seeded, exact counts).

    The mixture has as many rows as all groups together; group i contributes
    `round(p_i * total)` rows: a seeded sample without replacement, or whole seeded passes
    when it needs more rows than it has (a small source with a large probability repeats).
    """
    if len(groups) != len(probabilities):
        raise ValueError("mix needs one probability per group")
    if len(groups) == 1:
        return list(groups[0])
    rng = random.Random(seed)
    mixed: list[T] = []
    wants = mixed_counts([len(g) for g in groups], probabilities)
    for group, want in zip(groups, wants, strict=True):
        order: list[int] = []
        while len(order) < want:
            perm = list(range(len(group)))
            rng.shuffle(perm)
            order += perm
        mixed += [group[i] for i in order[:want]]
    return mixed


def mixed_rows(
    sources: Sequence[DatasetSource], cfg: DataConfig, base_dir: Path, seed: int, kind: RowKind
) -> list[tuple[DatasetSource, Row]]:
    """Every source's rows, tagged with their source (for error messages), mixed by
    probability, then shuffled with `seed` when `data.shuffle` is set."""
    groups = [[(s, row) for row in read_source(s, cfg, base_dir, seed, kind)] for s in sources]
    rows = mix(groups, [s.probability for s in sources], seed)
    if cfg.shuffle:
        random.Random(seed).shuffle(rows)
    return rows
