"""`spec.models`: where each role's weights come from, and the reward sources."""

from __future__ import annotations

from enum import StrEnum
from typing import Self

from pydantic import Field, model_validator

from .base import ConfigModel
from .graders import Grader
from .names import NAME_MAX, PATH_MAX
from .refs import ConfigMapKeyRef, SecretKeyRef
from .steps import ProcessReward

# The trainer reads the remote reward's token from here; on a cluster the operator fills it
# from `models.remoteReward.authSecret`.
REMOTE_REWARD_TOKEN_ENV = "RLHF_REMOTE_REWARD_TOKEN"
SOURCE_KEYS = "pretrained, randomInit, fromJob or fromStage"


class TinyArchitecture(StrEnum):
    LLAMA = "llama"


class RandomInit(ConfigModel):
    """A small random-initialised model built from a config, with a tokenizer trained on the
    trainer's bundled corpus. For laptops, CI and demos: no hub download is needed. The model is
    written to disk and then loaded with the regular `from_pretrained` path."""

    architecture: TinyArchitecture = TinyArchitecture.LLAMA
    hidden_size: int = Field(64, ge=8, le=8192)
    num_layers: int = Field(2, ge=1, le=128)
    num_heads: int = Field(2, ge=1, le=128)
    intermediate_size: int = Field(128, ge=8, le=65536)
    vocab_size: int = Field(512, ge=64, le=262144)
    max_position_embeddings: int = Field(512, ge=16, le=1048576)
    seed: int = Field(0, ge=0)

    @model_validator(mode="after")
    def _heads_divide_hidden(self) -> Self:
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"hiddenSize ({self.hidden_size}) must be divisible by numHeads ({self.num_heads})"
            )
        return self


# An RLHFJob's or a pipeline stage's name (loading.NAME_PATTERN, which imports this module).
_JOB_NAME = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"


class ModelSource(ConfigModel):
    """Exactly one of `pretrained` (a Hugging Face id or a directory, as `from_pretrained`
    takes it), `randomInit` (a tiny model built locally), `fromJob` (the final model of
    another RLHFJob of the namespace, which the operator resolves once that job succeeded) or
    `fromStage` (the final model of an earlier stage of the same RLHFPipeline)."""

    pretrained: str | None = Field(
        None,
        min_length=1,
        max_length=PATH_MAX,
        description="Hugging Face model id or a path on a mounted volume.",
    )
    random_init: RandomInit | None = Field(
        None, description="Build a tiny random-initialised model instead of loading one."
    )
    from_job: str | None = Field(
        None,
        max_length=40,
        pattern=_JOB_NAME,
        description="Name of an RLHFJob of the same namespace: its final model "
        "(status.output.model) once it succeeded; the job waits until then.",
    )
    from_stage: str | None = Field(
        None,
        max_length=40,
        pattern=_JOB_NAME,
        description="In an RLHFPipeline stage only: the final model of an earlier stage.",
    )
    revision: str | None = Field(
        None, max_length=NAME_MAX, description="Hub revision (branch, tag or commit)."
    )
    trust_remote_code: bool = False

    @model_validator(mode="after")
    def _exactly_one_source(self) -> Self:
        given = (self.pretrained, self.random_init, self.from_job, self.from_stage)
        if sum(x is not None for x in given) != 1:
            raise ValueError(f"set exactly one of {SOURCE_KEYS}")
        return self

    @property
    def label(self) -> str:
        if self.from_job is not None:
            return f"fromJob {self.from_job}"
        if self.from_stage is not None:
            return f"fromStage {self.from_stage}"
        return self.pretrained or "random-init"


class RewardModel(ModelSource):
    """A sequence-scoring model (HF sequence classification or a value-head model)."""

    weight: float = Field(1.0, gt=0, description="Weight of this model's score in the sum.")
    process: ProcessReward | None = Field(
        None, description="A process reward model (trained by algorithm prm): how it scores."
    )
    score_range: list[float] | None = Field(
        None,
        min_length=2,
        max_length=2,
        description="[low, high]: the model's raw score s becomes low + (high - low) * "
        "sigmoid(s), a bounded score as an OpenAI score_model grader's range gives; "
        "default: the raw score.",
    )

    @model_validator(mode="after")
    def _score_range_ordered(self) -> Self:
        if self.score_range is not None and not self.score_range[0] < self.score_range[1]:
            raise ValueError(
                f"scoreRange must be [low, high] with low < high; got {self.score_range}"
            )
        if self.score_range is not None and self.process is not None:
            raise ValueError("scoreRange: a process reward model's step scores are not mapped")
        return self


class RewardErrorPolicy(StrEnum):
    # A failing call (it raised, broke a limit, timed out, returned no rewards) ends the run:
    # it is a bug in the job, and training on made-up rewards would hide it.
    FAIL = "fail"
    # For functions that run untrusted model output (generated code): the batch is scored again
    # one sample at a time, and each sample whose call still fails scores 0.
    ZERO = "zero"


class RewardFunctionLimits(ConfigModel):
    """What the function's process (and every process it starts) may use. The defaults suit a
    CPU scorer that may import torch; a function needing more says so here. Limits apply to a
    file's function (`path`, `configMapRef`), not to builtins, which are the trainer's code."""

    memory_mib: int = Field(
        8192,
        ge=128,
        le=1024 * 1024,
        alias="memoryMiB",
        description="Address space of each process (RLIMIT_AS), in MiB. Allocations beyond it "
        "fail (MemoryError). Virtual, not resident: importing torch takes about 1 GiB.",
    )
    cpu_seconds: int = Field(
        600,
        ge=1,
        le=86400,
        description="CPU time one call may use, all threads together (RLIMIT_CPU).",
    )
    open_files: int = Field(
        256, ge=16, le=65536, description="Open file descriptors per process (RLIMIT_NOFILE)."
    )
    processes: int = Field(
        16,
        ge=1,
        le=4096,
        description="Processes at once, the function's own included; more and all are killed.",
    )
    file_size_mib: int = Field(
        256,
        ge=1,
        le=1024 * 1024,
        alias="fileSizeMiB",
        description="Largest file a process may write (RLIMIT_FSIZE), in MiB.",
    )
    output_bytes: int = Field(
        8 * 1024 * 1024,
        ge=4096,
        le=1024**3,
        description="What one call may print (stdout and stderr together), and the largest "
        "reply it may return; beyond either the process is killed.",
    )


class RewardFunction(ConfigModel):
    """A Python file defining `reward_func(queries, prompts, labels)`; run in its own process.

    Locally `path` names the file. On a cluster it comes from a ConfigMap (`configMapRef`),
    which the operator mounts; `builtin` names a function shipped with the trainer.

    The file's process runs with `limits`, in its own process group (killed whole on a
    timeout), with an environment that holds none of the job's secrets."""

    path: str | None = Field(None, min_length=1, max_length=PATH_MAX)
    config_map_ref: ConfigMapKeyRef | None = None
    builtin: str | None = Field(
        None,
        min_length=1,
        max_length=NAME_MAX,
        description="A reward function bundled with the trainer.",
    )
    weight: float = Field(1.0, gt=0)
    timeout_seconds: float = Field(60.0, gt=0, le=3600, description="Per-batch time limit.")
    limits: RewardFunctionLimits = Field(default_factory=RewardFunctionLimits)
    on_error: RewardErrorPolicy = Field(
        RewardErrorPolicy.FAIL,
        description="fail: a failing call ends the run. zero: the batch is scored again one "
        "sample at a time and each sample whose call fails scores 0 (for functions that run "
        "untrusted model output).",
    )

    @model_validator(mode="after")
    def _exactly_one_source(self) -> Self:
        given = [x for x in (self.path, self.config_map_ref, self.builtin) if x is not None]
        if len(given) != 1:
            raise ValueError("set exactly one of path, configMapRef or builtin")
        return self


class RemoteReward(ConfigModel):
    """An HTTP service: POST {"query", "prompts", "labels"} -> {"rewards": [...]}.

    The prompts and responses leave the job: https is required unless `allowInsecureHttp`
    says otherwise (e.g. a service inside the cluster's own network), and the service can
    demand a token (`authSecret`, sent as `Authorization: Bearer <token>`)."""

    url: str = Field(
        max_length=PATH_MAX, pattern=r"^https?://[^\s]+$", description="URL of the reward service."
    )
    weight: float = Field(1.0, gt=0)
    timeout_seconds: float = Field(30.0, gt=0, le=3600)
    retries: int = Field(3, ge=0, le=20)
    allow_insecure_http: bool = Field(
        False, description="Allow an http:// URL (prompts and responses travel unencrypted)."
    )
    auth_secret: SecretKeyRef | None = Field(
        None, description="Secret key holding a bearer token for the service."
    )
    max_response_bytes: int = Field(
        16 * 1024 * 1024, gt=0, le=1024**3, description="Larger replies are refused."
    )


class GraderReward(ConfigModel):
    """`spec.models.graderReward`: an OpenAI grader scoring each sample, with the training
    row's fields as `item`. A python grader runs in the reward-function sandbox: its own
    process, `limits`, an environment without the job's secrets, `timeoutSeconds` per batch."""

    grader: Grader = Field(
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
        description="An OpenAI grader object (type string_check, text_similarity, python, "
        "score_model or multi), spelled as OpenAI's API spells it; validated by the operator.",
    )
    weight: float = Field(1.0, gt=0, description="Weight of the grade in the summed reward.")
    timeout_seconds: float = Field(
        120.0, gt=0, le=3600, description="Time limit for grading one batch (python graders)."
    )
    limits: RewardFunctionLimits = Field(
        default_factory=RewardFunctionLimits,
        description="The python grader's process limits (as models.rewardFunction.limits).",
    )
    on_error: RewardErrorPolicy = Field(
        RewardErrorPolicy.FAIL,
        description="fail: a grader error ends the run. zero: a sample whose grading fails "
        "scores 0.",
    )


class ModelsConfig(ConfigModel):
    """`spec.models`: actor (the model trained), critic, reference and reward sources."""

    actor: ModelSource = Field(description="The policy; for offline trainers, the model trained.")
    critic: ModelSource | None = Field(
        None, description="Value model (PPO). Default: the first reward model, else the actor."
    )
    reference: ModelSource | None = Field(None, description="Reference policy. Default: actor.")
    teacher: ModelSource | None = Field(
        None,
        description="distillation and on-policy-distillation: the frozen teacher (the "
        "actor's tokenizer and vocabulary).",
    )
    reward_models: list[RewardModel] = Field(default_factory=list, max_length=16)
    reward_function: RewardFunction | None = None
    remote_reward: RemoteReward | None = None
    grader_reward: GraderReward | None = Field(
        None, description="An OpenAI grader scoring each sample against its training row."
    )

    @property
    def has_reward_source(self) -> bool:
        return (
            bool(self.reward_models)
            or self.reward_function is not None
            or (self.remote_reward is not None)
            or (self.grader_reward is not None)
        )

    def resolved_critic(self) -> ModelSource:
        if self.critic is not None:
            return self.critic
        if self.reward_models:
            first = self.reward_models[0]
            return ModelSource(
                pretrained=first.pretrained,
                random_init=first.random_init,
                from_job=first.from_job,
                from_stage=first.from_stage,
                revision=first.revision,
                trust_remote_code=first.trust_remote_code,
            )
        return self.actor

    def resolved_reference(self) -> ModelSource:
        return self.reference if self.reference is not None else self.actor
