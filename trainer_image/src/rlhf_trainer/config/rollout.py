"""`spec.rollout`: how responses are generated (vLLM engines, sampling)."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from .base import ConfigModel
from .models import RewardErrorPolicy, RewardFunctionLimits
from .names import PATH_MAX


class RolloutEngine(StrEnum):
    VLLM = "vllm"
    # Hugging Face `generate`: a slow fallback, only when chosen explicitly.
    HF = "hf"


class AgentMode(StrEnum):
    SINGLE_TURN = "single-turn"
    MULTI_TURN = "multi-turn"


class AgentConfig(ConfigModel):
    """A token-in/token-out agent loop; `path` is a Python file defining `AgentInstance`.

    The agent is untrusted code, contained as a reward function is: its own process (and
    process group, killed whole), `limits`, an environment holding none of the job's secrets,
    capped output, a time limit per call."""

    mode: AgentMode = AgentMode.SINGLE_TURN
    path: str | None = Field(None, min_length=1, max_length=PATH_MAX)
    max_turns: int = Field(1, ge=1, le=64)
    timeout_seconds: float = Field(
        60.0, gt=0, le=3600, description="Time limit of one call (reset or step of an episode)."
    )
    limits: RewardFunctionLimits = Field(default_factory=RewardFunctionLimits)
    on_error: RewardErrorPolicy = Field(
        RewardErrorPolicy.FAIL,
        description="fail: a failing call ends the run. zero: the episode whose call failed "
        "ends with reward 0 and the others go on (for agents that run untrusted model output).",
    )


class RolloutConfig(ConfigModel):
    engine: RolloutEngine = RolloutEngine.VLLM
    num_engines: int = Field(1, ge=1, le=1024, description="vLLM engines (Ray actors).")
    tensor_parallel_size: int = Field(
        1,
        ge=1,
        le=64,
        description="Devices per vLLM engine (its tensor-parallel ranks, on one node).",
    )
    samples_per_prompt: int = Field(1, ge=1, le=1024, description="Responses per prompt (n).")
    max_new_tokens: int = Field(1024, ge=1, le=1048576)
    temperature: float = Field(1.0, ge=0, le=10)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(-1, ge=-1, description="-1 disables top-k.")
    stop: list[str] = Field(default_factory=list, max_length=32, description="Stop strings.")
    gpu_memory_utilization: float = Field(
        0.9, gt=0, le=1, description="vLLM memory fraction (of RAM on CPU builds)."
    )
    max_model_len: int | None = Field(None, gt=0)
    enforce_eager: bool | None = Field(
        None,
        description=(
            "Run the engine eagerly: no CUDA graphs on GPUs, no torch.compile on CPUs. Unset: "
            "off on GPUs, on on CPUs, where compiling costs ~40 s at the engine's first start "
            "(cached after) for ~20 % faster generation (size L): set false for long CPU runs."
        ),
    )
    enable_sleep: bool = Field(
        False, description="Sleep vLLM during training (hybrid engine on GPUs only)."
    )
    agent: AgentConfig | None = None
    async_rollout: bool = Field(
        False,
        alias="async",
        description=(
            "Generate the next step's samples while this step trains (one step off-policy, "
            "as OpenRLHF's async training and verl's one-step-off-policy); the importance "
            "ratio uses the engines' sampling log-probs (the behaviour policy's)."
        ),
    )
    max_staleness: int = Field(
        1,
        ge=1,
        le=8,
        description=(
            "With async: the most optimizer steps the generating weights may lag the "
            "trained ones (1: one step off-policy)."
        ),
    )
    partial_rollout: bool = Field(
        False,
        description=(
            "With async: pause the engines' in-flight requests around a weight update and "
            "resume them with the new weights (their KV cache recomputed), instead of "
            "letting them finish first (vLLM's AsyncLLM engines)."
        ),
    )
