"""The offline trainers' cluster, beside the online one (`cluster`): Ray start-up, placement
(the online trainer's plan: actor group, reference or teacher group, or both colocated), the
trained ranks (`workers.offline.OfflineTrainRank`) and the frozen ones, and plain-tensor calls
on them.

Why a frozen reference rank and not a first pass that precomputes every reference log-prob:
the reference is placed where the job's placement (and the operator's GPU allocation) says,
`referenceGpus` / `colocateActorReference` mean what they mean for PPO, a reference that is
not the actor's starting point works the same way, nothing large is kept on disk or in
memory between passes, and the driver asks for step k+1's log-probs while step k trains, so
on separate devices they cost no step time.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

from torch import Tensor

from rlhf_trainer.config import Device, JobConfig

from .groups import Pending, RoleGroup, split_rows
from .plan import ACTOR, REFERENCE, TEACHER, plan_placement
from .ray_session import CPUS_PER_RANK, place_groups, start_ray
from .workers.base import WorkerSettings
from .workers.offline import OfflineTrainRank
from .workers.offline_frozen import (
    FrozenCall,
    OfflineReferenceRank,
    OfflineTeacherRank,
    frozen_over,
    sequence_logps_call,
    token_logps_call,
)
from .workers.trained import mean_over_ranks


def offline_threads(ranks: int) -> int:
    """Torch threads per rank on a CPU machine: the cores shared by all ranks placed on it
    (they run at the same time: reference passes overlap training). `RLHF_THREADS_PER_RANK`
    overrides."""
    override = os.environ.get("RLHF_THREADS_PER_RANK")
    if override:
        return max(1, int(override))
    return max(1, (os.cpu_count() or 1) // max(1, ranks))


@dataclass(frozen=True)
class FrozenDirs:
    """The frozen models' directories: DPO/IPO/cDPO/KTO's reference, distillation's teacher."""

    reference: str | None = None
    teacher: str | None = None


class OfflineCluster:
    """The trained ranks (role `actor`) and the frozen ones: for DPO/IPO/cDPO/KTO the
    reference ranks, for distillation the teacher ranks."""

    def __init__(
        self,
        job: JobConfig,
        model_dir: str,
        frozen: FrozenDirs,
        *,
        total_optimizer_steps: int,
    ) -> None:
        self.job = job
        self.plan = plan_placement(job)
        device = job.placement.device
        self.on_gpu = device is Device.GPU
        start_ray(self.plan, device)
        cpus = CPUS_PER_RANK[device]
        ranks = sum(s.ranks for g in self.plan.groups for s in g.shares)
        threads = 0 if self.on_gpu else offline_threads(ranks)
        env = {"TOKENIZERS_PARALLELISM": "false"}
        if threads:
            env["OMP_NUM_THREADS"] = str(threads)
        self.placed = place_groups(self.plan, cpus)
        self.groups: list[RoleGroup] = []

        def group(role: str, cls: type, directory: str) -> RoleGroup:
            placed, share = self.plan.locate(role)
            settings = WorkerSettings(job, directory, self.on_gpu, threads, total_optimizer_steps)
            made = RoleGroup(
                role,
                cls,
                self.placed[placed.name].slots(share),
                resource=self.plan.resource,
                fraction=share.fraction,
                cpus=cpus,
                env=env,
                args=(settings,),
            )
            self.groups.append(made)
            return made

        self.trainer = group(ACTOR, OfflineTrainRank, model_dir)
        # The one frozen group of this trainer (the layout places at most one), the call
        # giving its outputs, and the batch key they go to.
        self.frozen: tuple[RoleGroup, FrozenCall, str] | None = None
        for role, cls, directory, method, key in (
            (REFERENCE, OfflineReferenceRank, frozen.reference, sequence_logps_call, "ref_logps"),
            (TEACHER, OfflineTeacherRank, frozen.teacher, token_logps_call, "teacher_logps"),
        ):
            if directory is None:
                continue
            if role not in self.plan.roles():
                raise ValueError(
                    f"algorithm {job.algorithm.name.value} has no {role} role in its placement"
                )
            self.frozen = (group(role, cls, directory), method, key)
        builds = [g.call(lambda w: w.build.remote()) for g in self.groups]
        self.num_params = {g.role: p.result()[0] for g, p in zip(self.groups, builds, strict=True)}

    def frozen_outputs(self, batch: dict[str, Tensor]) -> Pending | None:
        """What the frozen ranks add to a step batch (data-parallel over them), as
        `{key: tensor}`: the reference's `[B, K]` log-probs (`ref_logps`) or the teacher's
        `[B, K, L, V]` distributions (`teacher_logps`); None without a frozen model."""
        if self.frozen is None:
            return None
        frozen, method, key = self.frozen
        pending = frozen_over(frozen, method, batch, self.job.training.micro_train_batch_size)
        return Pending(pending.refs, lambda parts: {key: pending.combine(parts)})

    def train(self, batch: dict[str, Tensor], step: int) -> Pending:
        """One optimiser step on the batch (split evenly over the trained ranks); result: the
        statistics averaged over ranks."""
        shards = split_rows(batch, self.trainer.size)
        return Pending(
            [
                w.train_step.remote(s, step)
                for w, s in zip(self.trainer.workers, shards, strict=True)
            ],
            mean_over_ranks,
        )

    def save_checkpoint(self, directory: str) -> None:
        self.trainer.call(lambda w: w.save_checkpoint.remote(directory)).result()

    def load_checkpoint(self, directory: str) -> None:
        self.trainer.call(lambda w: w.load_checkpoint.remote(directory)).result()

    def export_hf(self, directory: str, tokenizer_dir: str) -> None:
        self.trainer.call(lambda w: w.export_hf.remote(directory, tokenizer_dir)).result()

    def weights_finite(self) -> bool:
        return all(self.trainer.call(lambda w: w.params_finite.remote()).result())

    def shutdown(self) -> None:
        # Best effort: a process may be gone already.
        for g in self.groups:
            with contextlib.suppress(Exception):
                g.kill()
        for placed in self.placed.values():
            placed.remove()
