"""Rules of the attention kernel and of sample packing (pure; see `rules.job_problems`).

Packed sequences are kept apart by transformers' own attention masks, which read where each
sequence starts from the position ids (`rlhf_trainer.models.packing`): a model that runs its
own code may ignore them and attend across the sequences of a row, silently. The trainer also
checks every model with a packed forward before training; these rules refuse what is known
before any device is taken.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import Problem
from .models import ModelSource
from .placement import Device
from .training import AttnImplementation

if TYPE_CHECKING:
    from .job import JobConfig


def attention_problems(cfg: JobConfig) -> list[Problem]:
    t = cfg.training
    out: list[Problem] = []
    if t.attn_implementation is AttnImplementation.FLASH_ATTENTION_2 and (
        cfg.placement.device is Device.CPU
    ):
        out.append(
            Problem(
                "training.attnImplementation",
                "flash_attention_2 runs on CUDA GPUs only (flash-attn has no CPU kernels); use "
                "sdpa, eager or auto with placement.device: cpu",
            )
        )
    if t.packing_samples:
        # Packed sequences are kept apart by transformers' own masks (sequence starts read
        # from the position ids); a model's own code may build a plain causal mask instead
        # and silently attend across the sequences of a row.
        remote = [field for field, source in _hf_models(cfg) if source.trust_remote_code]
        if remote:
            out.append(
                Problem(
                    "training.packingSamples",
                    "packing keeps sequences apart through transformers' own attention masks; "
                    f"{', '.join(remote)} run the model's own code (trustRemoteCode), which may "
                    "attend across packed sequences: set packingSamples false for these models",
                )
            )
    return out


def _hf_models(cfg: JobConfig) -> list[tuple[str, ModelSource]]:
    """The models the trainer runs with transformers (vLLM engines aside), by field; the
    defaults (critic, reference) are models listed already."""
    m = cfg.models
    out: list[tuple[str, ModelSource]] = [("models.actor", m.actor)]
    if m.critic is not None and cfg.algorithm.name.needs_critic:
        out.append(("models.critic", m.critic))
    if m.reference is not None:
        out.append(("models.reference", m.reference))
    out += [(f"models.rewardModels[{i}]", rm) for i, rm in enumerate(m.reward_models)]
    return out
