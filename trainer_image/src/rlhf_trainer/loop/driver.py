"""The driver loop, as named stages: generate -> experience (log-probs, values, rewards,
advantages) -> update -> sync weights -> checkpoint -> report.

One step reads `rolloutBatchSize` prompts, generates `samplesPerPrompt` responses for each,
scores them, and trains the actor (and the critic, for PPO) on them for `ppoEpochs` passes.
The driver holds the whole step's batch, so reward normalisation and advantage whitening are
global; the ranks only run forward passes and updates on their shards.

Fit, resume, checkpoints (periodic, final, after a failure) and stop checks are the one step
loop's (`rlhf_trainer.context.steploop`); this module plugs in the online stages. A stop
request (SIGTERM) is honoured between steps and, within a step, before its update: the step's
rollouts and experience are dropped whole (no weights, no data position, no controller state
of theirs is kept) and `Preempted` takes the failure path, which checkpoints the last finished
step. Once the update has begun the step runs to its end, as its models are consistent only
then (or when it failed before any optimizer step: `models_consistent`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

import torch
from torch import Tensor

from rlhf_trainer.algos.masking import masked_mean
from rlhf_trainer.algos.rewards import overlong_penalty
from rlhf_trainer.checkpoint import TrainerState
from rlhf_trainer.config import JobConfig
from rlhf_trainer.context.preemption import StopCheck, never
from rlhf_trainer.context.protocols import CheckpointStore, Reporter
from rlhf_trainer.context.steploop import IDLE, UPDATE, StepLoop, check_finite
from rlhf_trainer.data.pretrain import PretrainBatches
from rlhf_trainer.objectives.online import CorrectionSettings, mismatch_metrics
from rlhf_trainer.reporting.timing import StageTimer

from .batch import Sample, behaviour_log_probs, to_batch
from .cluster import OnlineCluster
from .distill import distill_scores
from .estimators import compute_advantages, kl_statistic, process_scores
from .evaluation import evaluate, is_eval_step
from .pipeline import rollout_source
from .rollout import Agents, PromptInput, Response, multi_turn, single_turn
from .schedule import Rollout
from .state import (
    REWARD_STATS,
    advanced,
    kl_controller,
    load_state,
    normalizer_stats,
    reward_normalizer,
    save_state,
)

ACTOR_KEYS = ("input_ids", "attention_mask", "action_mask", "advantages")
CRITIC_KEYS = ("input_ids", "attention_mask", "action_mask", "old_values", "returns")


class Scorer(Protocol):
    def score(
        self, samples: list[Sample], model_scores: list[Tensor]
    ) -> tuple[Tensor, dict[str, float]]: ...


@dataclass(frozen=True)
class Hooks:
    """The driver's I/O edges; tests replace them, `run` wires the real ones."""

    scorer: Scorer
    checkpoints: CheckpointStore
    reporter: Reporter
    agents: Agents | None = None  # the multi-turn agent, in its confined process
    # PPO-ptx: the pretraining batches the actor also models (None without algorithm.ptxCoef).
    pretrain: PretrainBatches | None = None


Cluster = TypeVar("Cluster", bound=OnlineCluster)


class Trainer(StepLoop[Cluster]):
    """The online stages on the step loop; `IterativeTrainer` replaces two of them."""

    def __init__(
        self,
        cfg: JobConfig,
        cluster: Cluster,
        tokenizer: Any,
        prompts: Any,
        hooks: Hooks,
        *,
        total_steps: int,
        export_dir: Path | None,
        stop: StopCheck = never,
        eval_prompts: Sequence[Any] = (),
    ) -> None:
        self.kl = kl_controller(cfg.algorithm)
        super().__init__(
            cfg,
            cluster,
            hooks.checkpoints,
            hooks.reporter,
            total_steps=total_steps,
            export_dir=export_dir,
            stop=stop,
            state=TrainerState(kl_coef=self.kl.value),
        )
        self.tokenizer, self.prompts, self.hooks = tokenizer, prompts, hooks
        self.eval_prompts = eval_prompts
        self.pad_id = int(tokenizer.pad_token_id)
        self.correction = CorrectionSettings.from_job(cfg)
        self.steps_before_update: tuple[int, ...] = ()
        # Each step's batch (in dynamic-sampling rounds or not): generated on the spot, or
        # ahead with `rollout.async`.
        self.rollouts = rollout_source(cfg, self, cluster, total_steps)

    def next_prompts(self, position: int) -> tuple[list[Any], int]:
        size = self.cfg.training.rollout_batch_size
        batch = next(self.prompts.batches(size, start=position, passes=None))
        return batch.items, batch.position

    # --- the step -------------------------------------------------------------------------
    def train_step(self, state: TrainerState) -> TrainerState:
        step = state.step + 1
        timer = StageTimer()
        self.phase = "rollout"
        with timer("generation"):  # async: only the wait for a batch generated ahead
            rollout = self.rollouts.take(step, state)
        samples = rollout.samples
        self.stop_if_requested()  # generation is most of a step: no need to score it too
        with timer("make_experience"):
            experience, metrics, reward_stats = self.make_experience(step, rollout, state, timer)
        metrics |= {"staleness": float(rollout.staleness()), "rollout_s": rollout.generate_s}
        metrics |= rollout.metrics
        self.stop_if_requested()  # the last point where the step leaves no trace
        self.phase = UPDATE
        self.steps_before_update = self.cluster.optimizer_steps()
        with timer("training"):
            self.cluster.sleep_engines()
            metrics |= self.update(step, experience)
        new_state = advanced(
            state,
            step=step,
            data_position=rollout.position,
            kl_coef=self.kl.value,
            samples_seen=state.samples_seen + len(samples),
            metrics={k: v for k, v in metrics.items() if isinstance(v, float)},
            extra={**state.extra, REWARD_STATS: reward_stats} if reward_stats else state.extra,
        )
        self.state, self.phase = new_state, "updated"
        with timer("weight_sync"):
            self.cluster.wake_engines()
            self.rollouts.updated(step)
        if self.eval_prompts and is_eval_step(self.cfg, step, self.total_steps):
            with timer("eval"):  # on the engines once they hold this step's weights
                metrics |= self.rollouts.on_engines(lambda: evaluate(self, step, self.eval_prompts))
        if self.due(step):
            with timer("checkpoint"):
                self.checkpoint(new_state, metrics=metrics)
        self.report(step, samples, metrics, timer.timings())
        self.phase = IDLE
        self.check_health(step, metrics)
        return new_state

    # --- stages ---------------------------------------------------------------------------
    def generate(
        self, step: int, items: list[Any], *, cfg: JobConfig | None = None, stream: str = ""
    ) -> list[Sample]:
        """Rollouts from the engines (token ids in, token ids out); `cfg` overrides the job's
        sampling (evaluation), `stream` names a generation other than the step's first."""
        from rlhf_trainer.distributed.vllm_engine import SamplingSettings

        cfg = cfg or self.cfg
        r = cfg.rollout
        # The behaviour policy's log-probs: async rollout trains on older weights' samples,
        # and rollout correction compares the engine with the trainer.
        logprobs = r.async_rollout or self.correction is not None
        stop_ids = tuple(i for i in [self.tokenizer.eos_token_id] if i is not None)

        def engine(
            ids: list[list[int]], seeds: list[int], n: int, max_new: int
        ) -> list[list[Response]]:
            settings = SamplingSettings(
                n,
                max_new,
                r.temperature,
                r.top_p,
                r.top_k,
                tuple(r.stop),
                stop_ids,
                seeded=self.cfg.training.deterministic,
                logprobs=logprobs,
            )
            out = self.cluster.generate(ids, seeds, settings, self.pad_id)
            if logprobs:
                return [[g.response() for g in group] for group in out]
            return [[(g.token_ids, g.finish_reason) for g in group] for group in out]

        prompts = [
            PromptInput(i, it.prompt_text, list(it.prompt_ids), it.label, it.item)
            for i, it in enumerate(items)
        ]
        if self.hooks.agents is None:
            return single_turn(prompts, engine, self.tokenizer, cfg, step, stream)
        return multi_turn(
            prompts,
            engine,
            self.tokenizer,
            cfg,
            step,
            self.hooks.agents,
            self.cluster.max_context(),
            stream,
        )

    def score(self, samples: list[Sample]) -> tuple[Tensor, dict[str, float]]:
        """The job's reward sources on `samples` (reward models, function, remote, agent)."""
        pending = self.cluster.reward_model_scores(to_batch(samples, self.pad_id))
        return self.hooks.scorer.score(samples, [p.result() for p in pending])

    def make_experience(
        self, step: int, rollout: Rollout, state: TrainerState, timer: StageTimer
    ) -> tuple[dict[str, Tensor], dict[str, float], dict[str, Any]]:
        """Log-probs, values and rewards (the ranks' forward passes overlap the reward
        function), then KL, token rewards, advantages and returns for the whole batch. The
        engines' sampling log-probs of samples generated by older weights (async rollout)
        take the old log-probs' place in the importance ratio, unless rollout correction
        compares them with the trainer's (then recomputed: the ratio is taken against the
        trainer's, and the correction weights the engine's gap to it); rewards computed
        already (dynamic sampling: `rollout.scored`) are not computed again."""
        cfg, algo = self.cfg, self.cfg.algorithm
        samples, scored = rollout.samples, rollout.scored
        behaviour = behaviour_log_probs(samples)
        batch = to_batch(samples, self.pad_id)
        mask = batch["action_mask"]
        # On-policy (one optimizer step per step, no KL to a reference): the policy that
        # generated is the one being trained, so the old log-probs are the training forward's
        # own (detached) and the extra forward pass is skipped, as TRL does.
        # Rollout correction: the engines' log-probs against the trainer's, recomputed.
        rollout_logp = behaviour if self.correction is not None else None
        if self.correction is not None and rollout_logp is None:
            raise RuntimeError("algorithm.rolloutCorrection: the engines returned no log-probs")
        recompute = rollout_logp is not None or (behaviour is None and not self.on_policy())
        old_logp_p = self.cluster.actor_log_probs(batch) if recompute else None
        ref_p = self.cluster.reference_log_probs(batch)
        teacher_p = self.cluster.teacher_log_probs(batch) if algo.name.needs_teacher else None
        values_p = self.cluster.critic_values(batch)
        if scored is None and teacher_p is None:
            rm_p = self.cluster.reward_model_scores(batch)
            with timer("reward"):
                scored = self.hooks.scorer.score(samples, [p.result() for p in rm_p])
        old_logp = old_logp_p.result() if old_logp_p is not None else behaviour
        teacher_logp = teacher_p.result() if teacher_p is not None else None
        if teacher_logp is not None:  # on-policy distillation: the teacher is the reward
            if old_logp is None:
                raise RuntimeError("on-policy distillation needs the student's log-probs")
            scored = distill_scores(old_logp, teacher_logp, mask)
        if scored is None:
            raise RuntimeError("no rewards: neither reward sources nor a teacher scored")
        raw, reward_metrics = scored
        check_finite("the combined reward", raw, step, "a reward source returned NaN/inf")
        if rollout_logp is not None:
            engine_logp = torch.where(mask != 0, rollout_logp, 0.0)
            why = "vLLM gave no finite log-prob for a token it sampled"
            check_finite("the engines' log-probs", engine_logp, step, why)
        ref_logp = ref_p.result() if ref_p is not None else None
        values = values_p.result() if values_p is not None else None
        hint = "the weights diverged; lower the learning rate (the last checkpoint is still good)"
        if old_logp is not None:
            check_finite("the actor's log-probs", torch.where(mask != 0, old_logp, 0.0), step, hint)
        if values is not None:
            check_finite("the critic's values", torch.where(mask != 0, values, 0.0), step, hint)

        scores = raw
        if algo.overlong_buffer is not None:
            lengths = mask.sum(-1)
            scores = scores + overlong_penalty(
                lengths, cfg.rollout.max_new_tokens, algo.overlong_buffer, algo.overlong_penalty
            )
        normalizer = reward_normalizer(state)
        scores = process_scores(scores, algo, normalizer)
        adv = compute_advantages(
            algo,
            scores,
            mask,
            old_logp=old_logp if old_logp is not None else torch.zeros(mask.shape),
            ref_logp=ref_logp,
            values=values,
            kl_coef=self.kl.value,
            group_size=cfg.rollout.samples_per_prompt,
            teacher_logp=teacher_logp,
        )
        scale = "rewards too large for the float range: set algorithm.rewardClip or scale them"
        check_finite("the advantages", adv.advantages, step, scale)
        check_finite("the returns", adv.returns, step, scale)
        kl = kl_statistic(adv.kl, mask)
        self.kl.update(kl, len(samples))
        batch |= {"advantages": adv.advantages, "returns": adv.returns}
        if old_logp is not None:
            batch["old_logps"] = old_logp
        if rollout_logp is not None:
            batch["rollout_logps"] = rollout_logp
        if values is not None:
            batch["old_values"] = values
        if ref_logp is not None and algo.use_kl_loss:
            batch["ref_logps"] = ref_logp
        real = mask != 0
        metrics = {
            "reward": float(raw.mean()),
            "reward_std": float(raw.std()) if len(raw) > 1 else 0.0,
            "score": float(scores.mean()),
            "kl": kl,
            "kl_coef": self.kl.value,
            "advantages_abs": float(masked_mean(adv.advantages.abs(), real)),
            "returns": float(masked_mean(adv.returns, real)),
            "response_length": float(mask.sum(-1).float().mean()),
            "truncated": sum(s.finish_reason == "length" for s in samples) / len(samples),
            "generated_tokens": float(mask.sum()),
            **reward_metrics,
        }
        if values is not None:
            metrics["values"] = float(masked_mean(values, real))
        if self.correction is not None and rollout_logp is not None and old_logp is not None:
            metrics |= mismatch_metrics(self.correction, old_logp, rollout_logp, mask)
        return batch, metrics, normalizer_stats(normalizer) if algo.normalize_reward else {}

    def evaluates(self, step: int) -> bool:
        return bool(self.eval_prompts) and is_eval_step(self.cfg, step, self.total_steps)

    def on_policy(self) -> bool:
        """Can the old log-probs be the training forward's own? Not for on-policy
        distillation, whose rewards are computed from them before the update."""
        t, algo = self.cfg.training, self.cfg.algorithm
        samples = t.rollout_batch_size * self.cfg.rollout.samples_per_prompt
        one_step = t.ppo_epochs == 1 and samples == t.train_batch_size
        return one_step and algo.kl_coef == 0 and not algo.name.needs_teacher

    def update(self, step: int, batch: dict[str, Tensor]) -> dict[str, float]:
        """PPO epochs on the actor and the critic at the same time (separate ranks)."""
        optional = ("old_logps", "ref_logps", "rollout_logps")
        actor_keys = ACTOR_KEYS + tuple(k for k in optional if k in batch)
        frozen = step <= self.cfg.training.freeze_actor_steps
        actor = (
            None
            if frozen
            else self.cluster.train_actor(
                {k: batch[k] for k in actor_keys},
                step,
                self.kl.value,
                self.hooks.pretrain.batch(step) if self.hooks.pretrain else None,
            )
        )
        critic = None
        if "old_values" in batch:
            critic = self.cluster.train_critic({k: batch[k] for k in CRITIC_KEYS}, step)
        metrics: dict[str, float] = {"actor_frozen": float(frozen)}
        if actor is not None:
            metrics |= actor.result()
        if critic is not None:
            metrics |= critic.result()
        return metrics

    def report(
        self, step: int, samples: list[Sample], metrics: dict[str, float], timings: dict[str, float]
    ) -> None:
        total = timings["total"]
        metrics = dict(metrics)
        metrics["samples_per_s"] = len(samples) / total if total else 0.0
        metrics["tokens_per_s"] = metrics["generated_tokens"] / total if total else 0.0
        shown = [
            {"prompt": s.prompt_text, "response": s.response_text, "label": s.label}
            for s in samples[: min(2, len(samples))]
        ]
        self.reporter.on_step(step, self.total_steps, metrics, timings, shown)

    # --- what a checkpoint keeps, resume, export -----------------------------------------
    def save_driver_state(
        self, directory: Path, state: TrainerState, *, after_failure: bool
    ) -> None:
        save_state(state, directory)
        # After a failure the producer may be what failed: save what it finished.
        self.rollouts.save(directory, state, wait=not after_failure)

    def load_driver_state(self, directory: Path) -> TrainerState:
        state = load_state(directory)
        self.kl = kl_controller(self.cfg.algorithm, state.kl_coef)
        # The engines still hold the initial weights: send them the restored ones.
        self.cluster.sync_weights()
        self.rollouts.resume(directory, state)
        return state

    def start_fresh(self) -> None:
        lora = self.cfg.training.lora
        if lora is not None and lora.quantization is not None:
            # The engines loaded the unquantised base; the actor is its NF4 rounding: step 1
            # samples from the policy it trains, as every later step does.
            self.cluster.sync_weights()

    def models_consistent(self) -> bool:
        # An update that failed before any optimizer step left the models as they were.
        return self.phase != UPDATE or self.cluster.optimizer_steps() == self.steps_before_update

    def export(self, directory: Path) -> None:
        self.cluster.export_hf(str(directory))

    def close(self) -> None:
        self.rollouts.close()
