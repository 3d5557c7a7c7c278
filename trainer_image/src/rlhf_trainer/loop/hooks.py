"""The driver's I/O edges, built from the job: the reward sources (the runner builds the
reporter and the checkpoint directory, see `rlhf_trainer.context.job.RunContext`)."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from rlhf_trainer.config import JobConfig
from rlhf_trainer.rewards.sources import RewardSources

from .batch import Sample


class SampleScorer:
    """Scores samples with the job's reward sources (queries are prompt + response text, as
    reward functions expect); a multi-turn agent's own reward, when it gives one, replaces the
    sources' score of that episode."""

    def __init__(self, sources: RewardSources) -> None:
        self.sources = sources

    def score(
        self, samples: list[Sample], model_scores: list[Tensor]
    ) -> tuple[Tensor, dict[str, float]]:
        queries = [s.prompt_text + s.response_text for s in samples]
        prompts = [s.prompt_text for s in samples]
        labels = [s.label for s in samples]
        rewards, metrics = self.sources.score(
            queries,
            prompts,
            labels,
            model_scores,
            responses=[s.response_text for s in samples],
            items=[s.item or {} for s in samples],
        )
        agent = [s.agent_reward for s in samples]
        if any(r is not None for r in agent):
            given = torch.tensor([r is not None for r in agent])
            values = torch.tensor([r if r is not None else 0.0 for r in agent])
            rewards = torch.where(given, values.to(rewards.dtype), rewards)
            metrics["reward/agent"] = float(values[given].mean())
        return rewards, metrics

    def start(self) -> None:
        self.sources.start()

    def close(self) -> None:
        self.sources.close()


def open_scorer(cfg: JobConfig, base_dir: Path) -> SampleScorer:
    return SampleScorer(RewardSources(cfg.models, base_dir))
