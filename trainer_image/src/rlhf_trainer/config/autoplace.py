"""`placement.auto`: GPUs per role, colocation, ZeRO stage/offload and vLLM engines x tensor
parallel, chosen from the model sizes and the GPUs (pure; the one decision the operator, the
trainer and `rlhf plan` all use, through `layout.plan_layout`).

1. The OpenRLHF paper's layouts where they apply: PPO with actor, critic, reference, one reward
   model and vLLM, models of about 7B, 13B, 34B or 70B parameters on the paper's GPU count of
   80 GiB GPUs (OpenRLHF, Hu et al. 2024, arXiv:2405.11143, Table 2 / section 4, as
   `operator/tests/pure/test_placement.py` quotes it). The memory arithmetic still picks the
   ZeRO strategy and checks that the row fits.
2. Elsewhere, the memory arithmetic (config/memory.py): the fastest ZeRO strategy first
   (ZERO_CHOICES), and for it the least sharing: every role on its own GPUs (OpenRLHF's
   distributed mode), else actor+reference and critic+reward colocated, else everything on the
   same GPUs (the hybrid engine, vLLM asleep while training). Each group starts at the fewest
   GPUs (a power of two) its memory needs; the rest are handed out by doubling the group
   furthest below its share, actor : critic : reference : reward : rollout = 2 : 2 : 1 : 1 : 2
   (the paper's 7B split), so data-parallel sizes stay powers of two and divide batches.
3. Nothing fits: a LayoutError naming the field to change and the numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from .autoplan import (
    AutoChoice,
    AutoError,
    Cluster,
    Group,
    Mode,
    Sizes,
    engine_need,
    fewest,
    group_host,
    group_need,
    groups_of,
    job_sizes,
    need,
)
from .autoreasons import reasons
from .base import Problem
from .memory import (
    HOST_FRACTION,
    LEANEST,
    ZERO_CHOICES,
    Zero,
    engine_weights_gib,
    quantity_gib,
)
from .modelsize import ConfigReader
from .placement import Device
from .roles import ACTOR, CRITIC, PPO_ROLES, REFERENCE, REWARD, ROLLOUT, active_roles

if TYPE_CHECKING:
    from .job import JobConfig

MAX_GPUS = 4096
SHARE = {ACTOR: 2, CRITIC: 2, REFERENCE: 1, REWARD: 1, ROLLOUT: 2}
PAPER = "OpenRLHF paper (arXiv:2405.11143)"
PAPER_GPU_GIB = 80  # A800-80GB
SIZE_TOLERANCE = 0.15  # Llama-2-7b has 6.7B parameters, Qwen2.5-7B 7.6B


@dataclass(frozen=True)
class PaperRow:
    params: int
    gpus: int
    devices: dict[str, int]
    tensor_parallel: int

    @property
    def label(self) -> str:
        return f"{self.params // 10**9}B on {self.gpus} GPUs"


PAPER_ROWS = (
    PaperRow(7 * 10**9, 16, {ACTOR: 4, REFERENCE: 2, CRITIC: 4, REWARD: 2, ROLLOUT: 4}, 1),
    PaperRow(13 * 10**9, 32, {ACTOR: 8, REFERENCE: 4, CRITIC: 8, REWARD: 4, ROLLOUT: 8}, 1),
    PaperRow(34 * 10**9, 32, {ACTOR: 8, REFERENCE: 4, CRITIC: 8, REWARD: 4, ROLLOUT: 8}, 2),
    PaperRow(70 * 10**9, 32, {ACTOR: 4, REFERENCE: 4, CRITIC: 4, REWARD: 4, ROLLOUT: 16}, 4),
)


def _grow(groups: list[Group], start: dict[Group, int], gpus: int, tp: int) -> dict[Group, int]:
    """Double the group furthest below its share while the GPUs last; GPUs that no doubling
    can use become more vLLM engines of their own (an engine count need not divide batches)."""
    counts = dict(start)
    weight = {g: sum(SHARE[r] for r in g) for g in groups}
    total_weight = sum(weight.values())
    while True:
        used = sum(counts.values())
        order = sorted(groups, key=lambda g: counts[g] * total_weight / (gpus * weight[g]))
        grown = next((g for g in order if used + counts[g] <= gpus), None)
        if grown is None:
            break
        counts[grown] *= 2
    if (ROLLOUT,) in counts:
        counts[(ROLLOUT,)] += (gpus - sum(counts.values())) // tp * tp
    return counts


def _search(roles: Group, sizes: Sizes, c: Cluster) -> AutoChoice | None:
    for zero in ZERO_CHOICES:
        for mode in Mode:
            groups = groups_of(mode, roles)
            if groups is None:
                continue
            least = {g: fewest(g, sizes, zero, c, c.gpus) for g in groups}
            if any(f is None for f in least.values()):
                continue
            counts = {g: f[0] for g, f in least.items() if f is not None}
            if sum(counts.values()) > c.gpus:
                continue
            tp = next((f[1] for g, f in least.items() if f and ROLLOUT in g), 1)
            grown = _grow(groups, counts, c.gpus, tp)
            devices = {r: grown[g] for g in groups for r in g}
            return _choice(mode, zero, devices, tp, sizes, c)
    return None


def _choice(
    mode: Mode, zero: Zero, devices: dict[str, int], tp: int, sizes: Sizes, c: Cluster
) -> AutoChoice:
    utilization = None
    if mode is Mode.HYBRID:  # vLLM gets what the models leave, in steps of 0.05
        n = devices[ACTOR]
        models = sum(need(r, sizes, n, zero) for r in devices if r != ROLLOUT)
        utilization = max(0.05, int((c.usable - models) / c.gpu_gib * 20) / 20)
    return AutoChoice(mode, zero, devices, tp, utilization)


def _paper_row(roles: Group, sizes: Sizes, c: Cluster) -> tuple[AutoChoice, PaperRow] | None:
    if roles != PPO_ROLES or len(sizes.by_role[REWARD]) != 1 or c.gpu_gib < PAPER_GPU_GIB:
        return None
    for row in PAPER_ROWS:
        near = all(
            abs(sizes.params(r) - row.params) <= SIZE_TOLERANCE * row.params
            for r in (ACTOR, CRITIC, REWARD)
        )
        if not near or row.gpus != c.gpus or row.tensor_parallel > c.per_node:
            continue
        if engine_need(sizes, row.tensor_parallel) > c.vllm_utilization * c.gpu_gib:
            continue
        for zero in ZERO_CHOICES:
            needs = [need(r, sizes, row.devices[r], zero) for r in roles if r != ROLLOUT]
            hosts = [group_host((r,), sizes, row.devices[r], zero) for r in roles]
            if max(needs) <= c.usable and max(hosts) <= c.host_usable:
                devices = dict(row.devices)
                return AutoChoice(Mode.SEPARATE, zero, devices, row.tensor_parallel, None), row
    return None


def cluster_of(cfg: JobConfig) -> Cluster:
    p = cfg.placement
    gpus = p.total_gpus if p.total_gpus is not None else p.gpus_per_node
    host = quantity_gib(p.resources.worker_memory_per_gpu)
    return Cluster(
        gpus, p.gpus_per_node, p.gpu_memory_gib, cfg.rollout.gpu_memory_utilization, host
    )


def decide(cfg: JobConfig, read_config: ConfigReader | None = None) -> AutoChoice:
    """The automatic placement of an `auto` job; AutoError naming what is missing."""
    if cfg.placement.device is not Device.GPU:
        why = (
            "chooses layouts from GPU memory: with placement.device cpu set actorGpus etc. yourself"
        )
        raise AutoError([Problem("placement.auto", why)])
    sizes = job_sizes(cfg, read_config)
    roles, cluster = active_roles(cfg), cluster_of(cfg)
    paper = _paper_row(roles, sizes, cluster)
    choice = paper[0] if paper is not None else _search(roles, sizes, cluster)
    if choice is None:
        raise AutoError(refusal(cfg, roles, sizes, cluster))
    return AutoChoice(
        choice.mode,
        choice.zero,
        choice.devices,
        choice.tensor_parallel,
        choice.vllm_utilization,
        reasons(choice, sizes, cluster, paper=paper[1].label if paper else None),
    )


def refusal(cfg: JobConfig, roles: Group, sizes: Sizes, c: Cluster) -> list[Problem]:
    """What is missing, with the numbers, at the leanest strategy (ZeRO-3 + Adam offload)."""
    label = sizes.by_role[ACTOR][0].label
    given = f"placement.totalGpus is {c.gpus}" + (
        "" if cfg.placement.total_gpus is not None else " (default: gpusPerNode)"
    )
    if ROLLOUT in roles and fewest((ROLLOUT,), sizes, LEANEST, c, MAX_GPUS) is None:
        widest = c.per_node
        per_gpu = engine_weights_gib(sizes.params(ROLLOUT), widest)
        why = (
            f"a {label} vLLM engine holds {per_gpu:.1f} GiB of weights per GPU even at tensor "
            f"parallel {widest} (one node), and needs as much again for its KV cache: more than "
            f"rollout.gpuMemoryUtilization {c.vllm_utilization:g} x {c.gpu_gib:g} GiB; raise "
            "gpusPerNode or gpuMemoryGiB"
        )
        return [Problem("placement.gpusPerNode", why)]
    unbounded = replace(c, host_per_gpu_gib=math.inf)
    fits = _search(roles, sizes, unbounded)
    if fits is not None:  # only the host memory for the offloaded Adam states is missing
        return [_host_problem(cfg, fits, roles, sizes, c)]
    c = unbounded
    for role in roles:
        alone = fewest((role,), sizes, LEANEST, c, MAX_GPUS)
        if alone is not None and alone[0] <= c.gpus:
            continue
        what = f"a {sizes.by_role[role][0].label} {role}"
        if alone is None:
            why = f"{what} does not fit in {MAX_GPUS} x {c.gpu_gib:g} GiB GPUs"
        else:
            n = alone[0]
            per_gpu = group_need((role,), sizes, n, LEANEST, alone[1])
            why = (
                f"{what} needs >= {n} x {c.gpu_gib:g} GiB GPUs with {LEANEST.label} "
                f"({per_gpu:.1f} of {c.usable:.1f} usable GiB per GPU at {n}); {given}"
            )
        return [Problem("placement.totalGpus", why)]
    best: tuple[int, str] | None = None
    for mode in Mode:
        groups = groups_of(mode, roles)
        if groups is None:
            continue
        fewest_all = [fewest(g, sizes, LEANEST, c, MAX_GPUS) for g in groups]
        if any(f is None for f in fewest_all):
            continue
        counts = [f[0] for f in fewest_all if f is not None]
        split = ", ".join(f"{'+'.join(g)} {n}" for g, n in zip(groups, counts, strict=True))
        if best is None or sum(counts) < best[0]:
            best = (sum(counts), f"{mode.value}: {split}")
    least = f">= {best[0]} x {c.gpu_gib:g} GiB GPUs ({best[1]}, {LEANEST.label})" if best else ""
    why = f"{cfg.algorithm.name.value} with {label} models needs {least}; {given}"
    return [Problem("placement.totalGpus", why)]


def _host_problem(
    cfg: JobConfig, fits: AutoChoice, roles: Group, sizes: Sizes, c: Cluster
) -> Problem:
    """The GPUs suffice only with Adam offload, and its states do not fit the pods' memory."""
    groups = groups_of(fits.mode, roles) or [(r,) for r in roles]
    host, group = max((group_host(g, sizes, fits.devices[g[0]], fits.zero), g) for g in groups)
    why = (
        f"{cfg.algorithm.name.value} with {sizes.by_role[ACTOR][0].label} models fits "
        f"{c.gpus} x {c.gpu_gib:g} GiB GPUs only with {fits.zero.label}, whose states take "
        f"{host:.1f} GiB of host memory per GPU ({'+'.join(group)} on "
        f"{fits.devices[group[0]]}): more than {HOST_FRACTION:.0%} of workerMemoryPerGpu "
        f"({c.host_per_gpu_gib:g} GiB); set it to >= {math.ceil(host / HOST_FRACTION)}Gi or "
        "give more GPUs"
    )
    return Problem("placement.resources.workerMemoryPerGpu", why)


def apply_choice(cfg: JobConfig, choice: AutoChoice) -> JobConfig:
    """`cfg` with the chosen fields written (not validated again: the caller's rules run on
    it) and `placement.auto` off, as the operator hands it to the trainer."""
    d = choice.devices
    p, t, r = cfg.placement, cfg.training, cfg.rollout
    hybrid = choice.mode is Mode.HYBRID
    pairs = choice.mode is Mode.PAIRS
    placement = p.model_copy(
        update={
            "auto": False,
            "actor_gpus": d.get(ACTOR, p.actor_gpus),
            "reference_gpus": d.get(REFERENCE, p.reference_gpus),
            "critic_gpus": d.get(CRITIC, p.critic_gpus),
            "reward_gpus": d.get(REWARD, p.reward_gpus),
            "colocate_all": hybrid,
            "colocate_actor_reference": pairs and ACTOR in d and REFERENCE in d,
            "colocate_critic_reward": pairs and CRITIC in d and REWARD in d,
        }
    )
    training = t.model_copy(
        update={"zero_stage": choice.zero.stage, "adam_offload": choice.zero.offload}
    )
    rollout_update: dict[str, object] = {
        "num_engines": max(1, choice.engines),
        "tensor_parallel_size": choice.tensor_parallel,
        "enable_sleep": hybrid,
    }
    if choice.vllm_utilization is not None:
        rollout_update["gpu_memory_utilization"] = choice.vllm_utilization
    rollout = r.model_copy(update=rollout_update)
    return cfg.model_copy(update={"placement": placement, "training": training, "rollout": rollout})


# Fields `placement.auto` writes: problems naming them say that auto chose the value.
AUTO_FIELDS = (
    "placement.actorGpus",
    "placement.referenceGpus",
    "placement.criticGpus",
    "placement.rewardGpus",
    "placement.colocate",
    "training.zeroStage",
    "training.adamOffload",
    "rollout.numEngines",
    "rollout.tensorParallelSize",
    "rollout.gpuMemoryUtilization",
    "rollout.enableSleep",
)
