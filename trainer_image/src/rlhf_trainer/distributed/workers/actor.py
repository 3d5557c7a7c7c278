"""The actor (policy) rank: DeepSpeed-trained causal LM; log-probs, PPO update, weights out.

It also generates with HF `generate` when `rollout.engine: hf` is chosen (the fallback), and
is the sending end of the weight sync to the vLLM engines.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor

from rlhf_trainer.objectives.online import PolicyLossSettings, policy_objective

from ..forward import action_log_probs, chunked
from ..vllm_engine import Generated, SamplingSettings
from ..weights import (
    OBJECT_STORE_BUCKET_BYTES,
    Packed,
    TensorMeta,
    broadcast,
    buckets,
    flatten,
    iter_weights,
    new_group,
    pack,
    state_dict_for_export,
    unwrap,
)
from .base import RankBase, WorkerSettings
from .trained import TrainedRank


class ActorWorker(TrainedRank):
    def __init__(self, role: str, rank: int, world_size: int, settings: WorkerSettings) -> None:
        RankBase.__init__(self, role, rank, world_size, settings)
        self.loss_settings = PolicyLossSettings.from_job(settings.job)
        self.temperature = settings.job.rollout.temperature
        self.sync_group: Any = None

    def build(self) -> int:
        """Load the model (with LoRA and gradient checkpointing if asked) into DeepSpeed."""
        lr = self.settings.job.training.actor_learning_rate
        return self.build_engine(value_model=False, learning_rate=lr)

    # --- experience -----------------------------------------------------------------------
    def log_probs(self, batch: dict[str, Tensor]) -> Tensor:
        """Log-probs of the response tokens under the current policy (the "old" policy)."""
        self.engine.eval()
        size = self.settings.job.training.micro_rollout_batch_size
        return chunked(
            lambda micro: action_log_probs(
                self.engine, self.to_device(micro), self.temperature, packed=self.packed
            )[0],
            batch,
            size,
        ).cpu()

    # --- update ---------------------------------------------------------------------------
    def train(
        self,
        shard: dict[str, Tensor],
        step: int,
        kl_coef: float,
        ptx: dict[str, Tensor] | None = None,
    ) -> dict[str, float]:
        """PPO epochs on this rank's shard. With `ptx` (PPO-ptx), every micro-batch adds
        `algorithm.ptxCoef` x the LM loss of the next `microTrainBatchSize` pretraining rows."""
        settings = self.loss_settings
        ptx_parts = itertools.cycle(self._ptx_parts(ptx)) if ptx is not None else None

        def micro_loss(micro: dict[str, Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
            logp, entropy = action_log_probs(
                self.engine,
                micro,
                self.temperature,
                with_entropy=True,
                entropy_grad=settings.entropy_coef > 0,
                packed=self.packed,
            )
            loss, stats = policy_objective(
                logp,
                # Absent on-policy (see the driver): the forward's own log-probs, detached.
                micro["old_logps"] if "old_logps" in micro else logp.detach(),
                micro["advantages"],
                micro["action_mask"],
                settings,
                kl_coef=kl_coef,
                ref_logp=micro.get("ref_logps"),
                entropy=entropy,
                rollout_logp=micro.get("rollout_logps"),
            )
            if ptx_parts is None:
                return loss, stats
            from rlhf_trainer.data.pretrain import lm_loss

            ptx_loss = lm_loss(self.engine, self.to_device(next(ptx_parts)))
            coef = self.settings.job.algorithm.ptx_coef
            return loss + coef * ptx_loss, {**stats, "ptx_loss": ptx_loss.detach()}

        return self._epochs(shard, step, "actor", micro_loss)

    def _ptx_parts(self, ptx: dict[str, Tensor]) -> list[dict[str, Tensor]]:
        """The pretraining rows in micro-batches, taken one per policy micro-batch (the driver
        sends one row per experience row and PPO epoch)."""
        size = self.settings.job.training.micro_train_batch_size
        rows = ptx["input_ids"].shape[0]
        return [{k: v[i : i + size] for k, v in ptx.items()} for i in range(0, rows, size)]

    # --- rollout fallback: HF generate ----------------------------------------------------
    @torch.no_grad()
    def generate(
        self, prompts: list[list[int]], seeds: list[int], sampling: SamplingSettings, pad_id: int
    ) -> list[list[Generated]]:
        """`sampling.n` responses per prompt with HF `generate` (the `rollout.engine: hf` path)."""
        from .hf_generate import generate_responses

        self.engine.eval()
        tokenizer = None
        if sampling.stop:  # HF matches stop strings on text
            from rlhf_trainer.models.loading import load_tokenizer

            tokenizer = load_tokenizer(self.settings.model_dir, self.load_options())
        return generate_responses(
            unwrap(self.engine),
            prompts,
            seeds,
            sampling,
            pad_id,
            self.device,
            synced=self._zero3(),
            tokenizer=tokenizer,
        )

    def _zero3(self) -> bool:
        return self.settings.job.training.zero_stage == 3 and self.world_size > 1

    # --- weights out ----------------------------------------------------------------------
    def packed_weights(self, dtype: str) -> Iterator[Packed]:
        """Rank 0 yields the weights bucket by bucket (a Ray streaming generator: each bucket
        goes to the object store as soon as it is packed); other ranks only take part in the
        ZeRO-3 gathers and yield nothing."""
        weights = iter_weights(self.engine, rank=self.rank, dtype=getattr(torch, dtype))
        for bucket in buckets(weights, OBJECT_STORE_BUCKET_BYTES):
            yield pack(bucket)

    def broadcast_plan(self, dtype: str) -> list[list[TensorMeta]] | None:
        """The bucket layout the engines must expect (rank 0); computed without sending."""
        plan = [
            flatten(bucket)[1]
            for bucket in buckets(
                iter_weights(self.engine, rank=self.rank, dtype=getattr(torch, dtype))
            )
        ]
        return plan if self.rank == 0 else None

    def init_weight_group(self, backend: str, address: str, port: int, world_size: int) -> bool:
        if self.rank == 0:
            self.sync_group = new_group(backend, address, port, 0, world_size)
        return True

    def broadcast_weights(self, dtype: str) -> int:
        """Send every bucket to the engines (rank 0); other ranks join the ZeRO-3 gathers."""
        count = 0
        for bucket in buckets(
            iter_weights(self.engine, rank=self.rank, dtype=getattr(torch, dtype))
        ):
            flat, metas = flatten(bucket)
            if self.rank == 0:
                broadcast(self.sync_group, flat.to(self.device))
            count += len(metas)
        return count

    # --- export ---------------------------------------------------------------------------
    def export_hf(self, directory: str, tokenizer_dir: str) -> None:
        """The actor in HF format (LoRA merged), loadable with `from_pretrained`."""
        weights = state_dict_for_export(self.engine, rank=self.rank, dtype=self.dtype)
        if self.rank != 0:
            return
        model: Any = unwrap(self.engine)
        from rlhf_trainer.models.qlora import savable_base

        savable_base(model).save_pretrained(directory, state_dict=weights)
        from rlhf_trainer.models.loading import load_tokenizer

        load_tokenizer(tokenizer_dir, self.load_options()).save_pretrained(directory)
