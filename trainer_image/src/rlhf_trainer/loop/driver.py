"""The driver loop, as named stages: generate -> experience (log-probs, values, rewards,
advantages) -> update -> sync weights -> checkpoint -> report.

One step reads `rolloutBatchSize` prompts, generates `samplesPerPrompt` responses for each,
scores them, and trains the actor (and the critic, for PPO) on them for `ppoEpochs` passes.
The driver holds the whole step's batch, so reward normalisation and advantage whitening are
global; the ranks only run forward passes and updates on their shards.

On failure the run stops with the error, after writing a final checkpoint when the models are
in a consistent state (the failure came before this step's update, or after it completed) and
their weights are finite; a checkpoint is never half-written (see `CheckpointStore`).

A stop request (SIGTERM, see `rlhf_trainer.context.preemption`) is honoured between steps and,
within a step, before its update: the step's rollouts and experience are dropped whole (no
weights, no data position, no controller state of theirs is kept) and `Preempted` takes the
failure path above, which checkpoints the last finished step. Once the update has begun the
step runs to its end, as its models are consistent only then.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import Tensor

from rlhf_trainer.algos.masking import masked_mean
from rlhf_trainer.algos.rewards import overlong_penalty
from rlhf_trainer.checkpoint import CheckpointRef, TrainerState, publish_dir
from rlhf_trainer.config import JobConfig, ResumePolicy
from rlhf_trainer.context.health import HealthWatch, Unhealthy
from rlhf_trainer.context.preemption import Preempted, StopCheck, never
from rlhf_trainer.data.pretrain import PretrainBatches
from rlhf_trainer.reporting.timing import StageTimer

from .batch import Sample, behaviour_log_probs, to_batch
from .estimators import compute_advantages, kl_statistic, process_scores
from .evaluation import evaluate, is_eval_step
from .pipeline import rollout_source
from .rollout import Agents, PromptInput, Response, multi_turn, single_turn
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


class NonFiniteError(FloatingPointError):
    """A stage produced NaN/inf: the run has diverged (or a reward source misbehaves)."""


class Scorer(Protocol):
    def score(
        self, samples: list[Sample], model_scores: list[Tensor]
    ) -> tuple[Tensor, dict[str, float]]: ...


class CheckpointStore(Protocol):
    def save(self, step: int, write_fn: Callable[[Path], None]) -> Path: ...
    def latest(self) -> CheckpointRef | None: ...
    def resume_point(
        self, resume: ResumePolicy, resume_from: str | None
    ) -> CheckpointRef | None: ...


class Reporter(Protocol):
    def on_step(
        self,
        step: int,
        total_steps: int,
        metrics: Mapping[str, Any],
        timings: Mapping[str, float],
        samples: int | Sequence[Mapping[str, Any]] = ...,
    ) -> object: ...

    def on_checkpoint(self, step: int, path: Path) -> None: ...


@dataclass(frozen=True)
class Hooks:
    """The driver's I/O edges; tests replace them, `run` wires the real ones."""

    scorer: Scorer
    checkpoints: CheckpointStore
    reporter: Reporter
    agents: Agents | None = None  # the multi-turn agent, in its confined process
    # PPO-ptx: the pretraining batches the actor also models (None without algorithm.ptxCoef).
    pretrain: PretrainBatches | None = None


def check_finite(name: str, value: Tensor, step: int, hint: str) -> None:
    if not bool(torch.isfinite(value).all()):
        bad = int((~torch.isfinite(value)).sum())
        raise NonFiniteError(f"step {step}: {name} has {bad} non-finite values (NaN/inf); {hint}")


class Trainer:
    def __init__(
        self,
        cfg: JobConfig,
        cluster: Any,
        tokenizer: Any,
        prompts: Any,
        hooks: Hooks,
        *,
        total_steps: int,
        export_dir: Path | None,
        stop: StopCheck = never,
        eval_prompts: Sequence[Any] = (),
    ) -> None:
        self.cfg, self.cluster, self.tokenizer, self.prompts = cfg, cluster, tokenizer, prompts
        self.eval_prompts = eval_prompts
        self.hooks, self.total_steps, self.export_dir = hooks, total_steps, export_dir
        self.stop = stop
        self.resumed_from: int | None = None
        self.kl = kl_controller(cfg.algorithm)
        self.state = TrainerState(kl_coef=self.kl.value)
        self.saved_step = -1
        self.pad_id = int(tokenizer.pad_token_id)
        self.steps_before_update: tuple[int, ...] = ()
        self.failure_checkpoint: Path | None = None
        # Where the step is: the models are consistent before "update" and after it completes.
        self.phase = "idle"
        # Each step's batch (in dynamic-sampling rounds or not): generated on the spot, or
        # ahead with `rollout.async`.
        self.rollouts = rollout_source(cfg, self, cluster, total_steps)
        self.health = HealthWatch(cfg.run_policy.guardrails)

    def next_prompts(self, position: int) -> tuple[list[Any], int]:
        size = self.cfg.training.rollout_batch_size
        batch = next(self.prompts.batches(size, start=position, passes=None))
        return batch.items, batch.position

    # --- the loop -------------------------------------------------------------------------
    def fit(self) -> TrainerState:
        self.resume()
        try:
            while self.state.step < self.total_steps:
                self.stop_if_requested()
                try:
                    self.state = self.train_step(self.state)
                except NonFiniteError as err:
                    trip = self.health.diverged(self.state.step + 1, str(err))
                    if trip is None:
                        raise
                    raise Unhealthy(trip) from err
            if self.saved_step != self.state.step:
                self.checkpoint(self.state)
            if self.export_dir is not None and self.cfg.checkpoint.export_hf:
                publish_dir(lambda d: self.cluster.export_hf(str(d)), self.export_dir)
        except BaseException as err:
            self.final_checkpoint_after(err)
            raise
        finally:
            self.rollouts.close()
        return self.state

    def train_step(self, state: TrainerState) -> TrainerState:
        step = state.step + 1
        timer = StageTimer()
        self.phase = "rollout"
        with timer("generation"):  # async: only the wait for a batch generated ahead
            rollout = self.rollouts.take(step, state)
        samples = rollout.samples
        self.stop_if_requested()  # generation is most of a step: no need to score it too
        with timer("make_experience"):
            experience, metrics, reward_stats = self.make_experience(
                step, samples, state, timer, behaviour_log_probs(samples), rollout.scored
            )
        metrics |= {"staleness": float(rollout.staleness()), "rollout_s": rollout.generate_s}
        metrics |= rollout.metrics
        self.stop_if_requested()  # the last point where the step leaves no trace
        self.phase = "update"
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
        every = self.cfg.checkpoint.every_steps
        if (every and step % every == 0) or step == self.total_steps:
            with timer("checkpoint"):
                self.checkpoint(new_state)
        self.report(step, samples, metrics, timer.timings())
        self.phase = "idle"
        trip = self.health.check(step, metrics)
        if trip is not None:  # `fit` checkpoints this step, then the run stops
            raise Unhealthy(trip)
        return new_state

    def stop_if_requested(self) -> None:
        """Raise `Preempted` at a point where the models are those of `self.state`."""
        if self.stop():
            raise Preempted(self.state.step)

    # --- stages ---------------------------------------------------------------------------
    def generate(
        self, step: int, items: list[Any], *, cfg: JobConfig | None = None, stream: str = ""
    ) -> list[Sample]:
        """Rollouts from the engines (token ids in, token ids out); `cfg` overrides the job's
        sampling (evaluation), `stream` names a generation other than the step's first."""
        from rlhf_trainer.distributed.vllm_engine import SamplingSettings

        cfg = cfg or self.cfg
        r = cfg.rollout
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
                # Async rollout trains on older weights' samples: keep the behaviour policy's.
                logprobs=r.async_rollout,
            )
            out = self.cluster.generate(ids, seeds, settings, self.pad_id)
            if r.async_rollout:
                return [[g.response() for g in group] for group in out]
            return [[(g.token_ids, g.finish_reason) for g in group] for group in out]

        prompts = [
            PromptInput(i, it.prompt_text, list(it.prompt_ids), it.label)
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
        self,
        step: int,
        samples: list[Sample],
        state: TrainerState,
        timer: StageTimer,
        behaviour: Tensor | None = None,
        scored: tuple[Tensor, dict[str, float]] | None = None,
    ) -> tuple[dict[str, Tensor], dict[str, float], dict[str, Any]]:
        """Log-probs, values and rewards (the ranks' forward passes overlap the reward
        function), then KL, token rewards, advantages and returns for the whole batch.
        `behaviour`: the engines' sampling log-probs of samples generated by older weights
        (async rollout), which take the old log-probs' place in the importance ratio.
        `scored`: the samples' rewards when already computed (dynamic sampling)."""
        cfg, algo = self.cfg, self.cfg.algorithm
        batch = to_batch(samples, self.pad_id)
        mask = batch["action_mask"]
        # On-policy (one optimizer step per step, no KL to a reference): the policy that
        # generated is the one being trained, so the old log-probs are the training forward's
        # own (detached) and the extra forward pass is skipped, as TRL does.
        recompute = behaviour is None and not self.on_policy()
        old_logp_p = self.cluster.actor_log_probs(batch) if recompute else None
        ref_p = self.cluster.reference_log_probs(batch)
        values_p = self.cluster.critic_values(batch)
        if scored is None:
            rm_p = self.cluster.reward_model_scores(batch)
            with timer("reward"):
                scored = self.hooks.scorer.score(samples, [p.result() for p in rm_p])
        raw, reward_metrics = scored
        check_finite("the combined reward", raw, step, "a reward source returned NaN/inf")
        old_logp = old_logp_p.result() if old_logp_p is not None else behaviour
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
        )
        scale = "rewards too large for the float range: set algorithm.rewardClip or scale them"
        check_finite("the advantages", adv.advantages, step, scale)
        check_finite("the returns", adv.returns, step, scale)
        kl = kl_statistic(adv.kl, mask)
        self.kl.update(kl, len(samples))
        batch |= {"advantages": adv.advantages, "returns": adv.returns}
        if old_logp is not None:
            batch["old_logp"] = old_logp
        if values is not None:
            batch["old_values"] = values
        if ref_logp is not None and algo.use_kl_loss:
            batch["ref_logp"] = ref_logp
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
        return batch, metrics, normalizer_stats(normalizer) if algo.normalize_reward else {}

    def on_policy(self) -> bool:
        t = self.cfg.training
        samples = t.rollout_batch_size * self.cfg.rollout.samples_per_prompt
        one_step = t.ppo_epochs == 1 and samples == t.train_batch_size
        return one_step and self.cfg.algorithm.kl_coef == 0

    def update(self, step: int, batch: dict[str, Tensor]) -> dict[str, float]:
        """PPO epochs on the actor and the critic at the same time (separate ranks)."""
        actor_keys = ACTOR_KEYS + tuple(k for k in ("old_logp", "ref_logp") if k in batch)
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
        self.hooks.reporter.on_step(step, self.total_steps, metrics, timings, shown)

    # --- checkpoints ----------------------------------------------------------------------
    def checkpoint(self, state: TrainerState, *, wait_rollouts: bool = True) -> Path:
        def write(directory: Path) -> None:
            self.cluster.save_checkpoint(str(directory))
            save_state(state, directory)
            self.rollouts.save(directory, state, wait=wait_rollouts)

        path = self.hooks.checkpoints.save(state.step, write)
        self.saved_step = state.step
        self.hooks.reporter.on_checkpoint(state.step, path)
        return path

    def resume(self) -> None:
        """Continue from this job's checkpoint, if it has one (see `resume_point`: only
        its own, written for this config, with all its files)."""
        c = self.cfg.checkpoint
        latest = self.hooks.checkpoints.resume_point(c.resume, c.resume_from)
        if latest is None:
            lora = self.cfg.training.lora
            if lora is not None and lora.quantization is not None:
                # The engines loaded the unquantised base; the actor is its NF4 rounding:
                # step 1 samples from the policy it trains, as every later step does.
                self.cluster.sync_weights()
            return
        self.cluster.load_checkpoint(str(latest.path))
        self.state = load_state(latest.path)
        self.kl = kl_controller(self.cfg.algorithm, self.state.kl_coef)
        self.saved_step = self.resumed_from = self.state.step
        # The engines still hold the initial weights: send them the restored ones.
        self.cluster.sync_weights()
        self.rollouts.resume(latest.path, self.state)

    def final_checkpoint_after(self, err: BaseException) -> None:
        """Save the last consistent state after a failure, when that is possible and useful."""
        if self.state.step == self.saved_step or self.state.step == 0:
            return
        try:
            # An update that failed before any optimizer step left the models as they were.
            if (
                self.phase == "update"
                and self.cluster.optimizer_steps() != self.steps_before_update
            ):
                return
            if not self.cluster.weights_finite():
                return
            self.failure_checkpoint = self.checkpoint(self.state, wait_rollouts=False)
        except Exception:
            return
