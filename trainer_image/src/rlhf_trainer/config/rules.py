"""Cross-field rules of a job config: pure checks that return every problem at once.

Each problem names the camelCase field to change and says what is allowed, e.g.
`rollout.samplesPerPrompt: must be > 1 for algorithm grpo (got 1)`. The CRD carries the
subset that CEL can express (see `rlhf_operator.crdgen`); these run everywhere else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .algorithm import AlgorithmName
from .base import Problem
from .placement import Device

if TYPE_CHECKING:
    from .job import JobConfig


def job_problems(cfg: JobConfig) -> list[Problem]:
    return [
        *_algorithm_problems(cfg),
        *_reward_source_problems(cfg),
        *_batch_problems(cfg),
        *_colocation_problems(cfg),
        *_rollout_problems(cfg),
        *_training_problems(cfg),
        *_data_problems(cfg),
    ]


def _algorithm_problems(cfg: JobConfig) -> list[Problem]:
    algo = cfg.algorithm.name
    out: list[Problem] = []
    if algo.is_group_estimator and cfg.rollout.samples_per_prompt < 2:
        out.append(
            Problem(
                "rollout.samplesPerPrompt",
                f"must be > 1 for algorithm {algo.value} (got {cfg.rollout.samples_per_prompt})",
            )
        )
    if algo is AlgorithmName.CDPO and cfg.algorithm.label_smoothing <= 0:
        out.append(
            Problem(
                "algorithm.labelSmoothing",
                "must be > 0 for algorithm cdpo (conservative DPO's label noise), e.g. 0.1",
            )
        )
    if cfg.training.freeze_actor_steps and not algo.needs_critic:
        out.append(
            Problem(
                "training.freezeActorSteps",
                f"critic warm-up needs a critic: only algorithm ppo has one (got {algo.value})",
            )
        )
    return out


def _reward_source_problems(cfg: JobConfig) -> list[Problem]:
    algo = cfg.algorithm.name
    if algo.is_online and not cfg.models.has_reward_source:
        return [
            Problem(
                "models",
                f"algorithm {algo.value} needs a reward source: set rewardModels, "
                "rewardFunction or remoteReward",
            )
        ]
    if not algo.is_online and cfg.models.has_reward_source:
        return [
            Problem(
                "models",
                f"reward sources are used by online algorithms only; algorithm {algo.value} "
                "trains on a fixed data set: remove rewardModels/rewardFunction/remoteReward",
            )
        ]
    return []


def _batch_problems(cfg: JobConfig) -> list[Problem]:
    t, p = cfg.training, cfg.placement
    out: list[Problem] = []
    roles = [("actorGpus", p.actor_gpus)]
    if cfg.algorithm.name.needs_critic:
        roles.append(("criticGpus", p.critic_gpus))
    for field, ranks in roles:
        unit = t.micro_train_batch_size * ranks
        if t.train_batch_size % unit:
            out.append(
                Problem(
                    "training.trainBatchSize",
                    f"must be divisible by microTrainBatchSize x placement.{field} "
                    f"({t.micro_train_batch_size} x {ranks} = {unit}); got {t.train_batch_size}",
                )
            )
    if cfg.algorithm.name.is_online:
        samples = t.rollout_batch_size * cfg.rollout.samples_per_prompt
        if samples % t.train_batch_size:
            out.append(
                Problem(
                    "training.trainBatchSize",
                    f"must divide rolloutBatchSize x rollout.samplesPerPrompt "
                    f"({t.rollout_batch_size} x {cfg.rollout.samples_per_prompt} = {samples}); "
                    f"got {t.train_batch_size}",
                )
            )
    return out


def role_devices(cfg: JobConfig) -> dict[str, int]:
    """Devices each role needs, for the roles this algorithm uses (before colocation)."""
    algo, p = cfg.algorithm.name, cfg.placement
    roles = {"actor": p.actor_gpus}
    if algo.needs_reference:
        roles["reference"] = p.reference_gpus
    if algo.needs_critic:
        roles["critic"] = p.critic_gpus
    if algo.is_online and cfg.models.reward_models:
        roles["reward"] = p.reward_gpus
    if algo.is_online:
        roles["rollout"] = cfg.rollout.num_engines * cfg.rollout.tensor_parallel_size
    return roles


def _colocation_problems(cfg: JobConfig) -> list[Problem]:
    p = cfg.placement
    roles = role_devices(cfg)
    out: list[Problem] = []
    if p.colocate_all:
        if len(set(roles.values())) > 1:
            shown = ", ".join(f"{r}={n}" for r, n in roles.items())
            out.append(
                Problem(
                    "placement.colocateAll",
                    "the hybrid engine puts every model and the vLLM engines on the same "
                    "devices, so each role needs the same count (rollout = numEngines x "
                    f"tensorParallelSize); got {shown}",
                )
            )
        return out
    if p.colocate_actor_reference and "reference" in roles and p.actor_gpus != p.reference_gpus:
        out.append(
            Problem(
                "placement.colocateActorReference",
                f"needs actorGpus == referenceGpus (got {p.actor_gpus} and {p.reference_gpus})",
            )
        )
    both = "critic" in roles and "reward" in roles
    if p.colocate_critic_reward and both and p.critic_gpus != p.reward_gpus:
        out.append(
            Problem(
                "placement.colocateCriticReward",
                f"needs criticGpus == rewardGpus (got {p.critic_gpus} and {p.reward_gpus})",
            )
        )
    return out


def _rollout_problems(cfg: JobConfig) -> list[Problem]:
    r, p = cfg.rollout, cfg.placement
    out: list[Problem] = []
    if p.device is Device.GPU and r.tensor_parallel_size > p.gpus_per_node:
        out.append(
            Problem(
                "rollout.tensorParallelSize",
                f"must fit on one node: at most placement.gpusPerNode ({p.gpus_per_node}); "
                f"got {r.tensor_parallel_size}",
            )
        )
    if r.enable_sleep and not p.colocate_all:
        out.append(
            Problem(
                "rollout.enableSleep",
                "sleep mode frees vLLM memory for training on shared devices: it needs "
                "placement.colocateAll: true",
            )
        )
    if r.max_model_len is not None:
        need = cfg.data.max_prompt_length + r.max_new_tokens
        if need > r.max_model_len:
            out.append(
                Problem(
                    "rollout.maxModelLen",
                    f"must hold data.maxPromptLength + rollout.maxNewTokens "
                    f"({cfg.data.max_prompt_length} + {r.max_new_tokens} = {need}); "
                    f"got {r.max_model_len}",
                )
            )
    if r.agent is not None and r.agent.mode.value == "multi-turn" and r.agent.path is None:
        out.append(
            Problem("rollout.agent.path", "multi-turn agents need a file defining AgentInstance")
        )
    return out


def _training_problems(cfg: JobConfig) -> list[Problem]:
    t = cfg.training
    if t.adam_offload and t.zero_stage == 0:
        return [
            Problem(
                "training.adamOffload",
                "DeepSpeed offloads optimizer states only with ZeRO: set training.zeroStage >= 1",
            )
        ]
    return []


def _data_problems(cfg: JobConfig) -> list[Problem]:
    train = cfg.data.train
    total = sum(s.probability for s in train)
    if len(train) > 1 and abs(total - 1.0) > 1e-6:
        return [
            Problem(
                "data.train",
                f"mixing probabilities of several sources must sum to 1 (got {total:g})",
            )
        ]
    return []
