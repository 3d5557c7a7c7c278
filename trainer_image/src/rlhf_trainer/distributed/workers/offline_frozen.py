"""The offline trainers' frozen ranks and the passes they make: the reference of
DPO/IPO/cDPO/KTO (sequence log-probs, with the very function the trained rank uses) and
distillation's teacher (next-token distributions over the whole vocabulary), data-parallel
over their ranks in micro-batch passes that every rank makes alike (ZeRO-3 gathers are
collective).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from rlhf_trainer.objectives.collate import trim_right
from rlhf_trainer.objectives.kinds import offline_spec
from rlhf_trainer.objectives.offline import sequence_logps_of, teacher_token_logps

from ..groups import Pending, RoleGroup, split_rows
from ..strategy import init_eval_engine
from .base import RankBase, count_params


class OfflineReferenceRank(RankBase):
    def build(self) -> int:
        from rlhf_trainer.models.loading import load_causal_lm

        self.spec = offline_spec(self.settings.job)
        model = load_causal_lm(self.settings.model_dir, self.dtype, self.load_options())
        self.use_cpu_kernels(model)
        self.model = init_eval_engine(
            model, self.settings.job.training, self.world_size, self.device
        )
        self.check_packing(self.model)
        return count_params(model)

    def sequence_logps(self, shard: dict[str, Tensor], micro_steps: int) -> Tensor:
        """`[b, K]` reference log-probs of the shard's sequences (see `micro_sequence_logps`)."""
        return micro_sequence_logps(self, self.model, shard, micro_steps)


@torch.no_grad()
def micro_passes(
    rank: RankBase,
    shard: dict[str, Tensor],
    micro_steps: int,
    forward: Callable[[dict[str, Tensor]], Tensor],
) -> list[Tensor]:
    """`forward` on the shard in `micro_steps` passes of at most `microTrainBatchSize`
    samples (the size training already fits in memory), each chunk trimmed of its padding;
    results on the CPU. Every rank runs the same number of passes: ZeRO-3 gathers are
    collective."""
    size = rank.settings.job.training.micro_train_batch_size
    rows = shard["input_ids"].shape[0]
    parts = []
    for index in range(micro_steps):
        start = index * size
        if start < rows:
            chunk = {k: v[start : start + size] for k, v in shard.items()}
        else:  # a pass only to keep the ranks in step; its result is dropped
            chunk = {k: v[:1] for k, v in shard.items()}
        out = forward(rank.to_device(trim_right(chunk)))
        if start < rows:
            parts.append(out.cpu())
    return parts


def micro_sequence_logps(
    rank: RankBase, model: Any, shard: dict[str, Tensor], micro_steps: int
) -> Tensor:
    """`[b, K]` log-probs of the shard's sequences under `model` (see `micro_passes`)."""
    average = offline_spec(rank.settings.job).average_logps
    return torch.cat(
        micro_passes(
            rank,
            shard,
            micro_steps,
            lambda chunk: sequence_logps_of(
                model, chunk, average=average, packed=rank.packed
            ).float(),
        )
    )


class OfflineTeacherRank(OfflineReferenceRank):
    """Distillation's frozen teacher: its next-token distributions over the whole vocabulary
    at every position (`[b, K, L, V]` log-probs, zero beyond a chunk's own length), which
    the student is trained towards."""

    def token_logps(self, shard: dict[str, Tensor], micro_steps: int) -> Tensor:
        length = shard["input_ids"].shape[-1]
        parts = micro_passes(
            self, shard, micro_steps, lambda chunk: teacher_token_logps(self.model, chunk)
        )
        # Chunks are trimmed to their own longest row: pad back to the shard's length.
        return torch.cat(
            [torch.nn.functional.pad(p, (0, 0, 0, length - p.shape[-2])) for p in parts]
        )


# A frozen rank's passes over its shard: (actor handle, shard, micro steps) -> the object ref.
FrozenCall = Callable[[Any, dict[str, Tensor], int], Any]


def frozen_over(
    group: RoleGroup, remote: FrozenCall, batch: dict[str, Tensor], size: int
) -> Pending:
    """A frozen model's `[B, ...]` outputs for a batch, data-parallel over the ranks of
    `group`, each running `remote(worker, shard, micro_steps)`, in passes of at most `size`
    rows (ranks with no rows still join the passes, on a copy of row 0, result dropped)."""
    shards = split_rows(batch, group.size)
    rows = [next(iter(s.values())).shape[0] for s in shards]
    micro_steps = max(1, -(-max(rows) // size))
    sent = [
        s if n else {k: v[:1] for k, v in batch.items()} for s, n in zip(shards, rows, strict=True)
    ]
    refs = [remote(w, s, micro_steps) for w, s in zip(group.workers, sent, strict=True)]
    kept = [i for i, n in enumerate(rows) if n]
    return Pending(refs, lambda parts: torch.cat([parts[i] for i in kept]))


def sequence_logps_over(group: RoleGroup, batch: dict[str, Tensor], size: int) -> Pending:
    """`[B, K]` sequence log-probs of a batch over the ranks of `group` (`frozen_over`)."""
    return frozen_over(group, sequence_logps_call, batch, size)


def sequence_logps_call(worker: Any, shard: dict[str, Tensor], micro_steps: int) -> Any:
    """`OfflineReferenceRank.sequence_logps` (or the iterative policy's) as a remote call."""
    return worker.sequence_logps.remote(shard, micro_steps)


def token_logps_call(worker: Any, shard: dict[str, Tensor], micro_steps: int) -> Any:
    """`OfflineTeacherRank.token_logps` as a remote call."""
    return worker.token_logps.remote(shard, micro_steps)
