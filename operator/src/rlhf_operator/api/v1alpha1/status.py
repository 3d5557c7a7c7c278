"""`status` of an RLHFJob. The operator computes all of it except `trainer`, which the
trainer writes and the operator only reads. Phases, condition types and reasons
(`reasons.py`) are closed enums (as KubeRay's are): dashboards and alerts can rely on them."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from rlhf_trainer.config import ConfigModel, Device, FailureClass
from rlhf_trainer.config.history import HISTORY_METRICS, MAX_POINTS, HistorySeries

from .reasons import ConditionReason


class Phase(StrEnum):
    PENDING = "Pending"
    PROVISIONING = "Provisioning"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    SUSPENDED = "Suspended"

    @property
    def is_finished(self) -> bool:
        return self in {Phase.SUCCEEDED, Phase.FAILED}


class ConditionType(StrEnum):
    VALID = "Valid"
    # Every child (ConfigMap, RBAC, PVC, RayJob) was accepted by the API server on the last
    # try; False quotes the server's refusal (a missing KubeRay CRD, a quota, a webhook).
    CHILDREN_APPLIED = "ChildrenApplied"
    ADMITTED = "Admitted"
    SUSPENDED = "Suspended"
    CLUSTER_READY = "ClusterReady"
    RUNNING = "Running"
    CHECKPOINTED = "Checkpointed"
    COMPLETE = "Complete"
    FAILED = "Failed"
    # A failed attempt was replaced by a fresh RayJob resuming from the latest checkpoint;
    # the message keeps why the previous attempt failed.
    RESTARTED = "Restarted"
    # Every `fromJob` model source names a Succeeded RLHFJob's model (only on jobs with one).
    INPUTS_READY = "InputsReady"
    # False: a training-health guardrail (runPolicy.guardrails) tripped; the reason names the
    # guard, the message quotes the metric, its values and the bound.
    HEALTHY = "Healthy"
    # True while the current attempt's pods are being disrupted (their DisruptionTarget
    # condition: an eviction, a node drain, a preemption, a lost node); the message names the
    # pods and the cause. A failure of that attempt is classed Preempted, not charged to
    # runPolicy.backoffLimit. Dropped when the next attempt starts.
    DISRUPTED = "Disrupted"


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(ConfigModel):
    type: ConditionType
    status: ConditionStatus
    reason: ConditionReason
    message: str = ""
    last_transition_time: str = Field(description="RFC 3339 time of the last status change.")
    observed_generation: int | None = None


class RayJobRef(ConfigModel):
    name: str
    ray_cluster_name: str | None = None
    job_id: str | None = None
    job_deployment_status: str | None = None
    job_status: str | None = None
    dashboard_url: str | None = None
    message: str | None = Field(
        None, description="KubeRay's message, at most 1024 characters (head and tail kept)."
    )


class WorkerGroupAllocation(ConfigModel):
    name: str
    replicas: int = Field(ge=0)
    gpus_per_pod: int = Field(ge=0)
    roles: list[str] = Field(default_factory=list)


class Allocation(ConfigModel):
    """Devices per role after colocation, and how they are packed into Ray worker groups.

    Keys of `gpus_per_role` are device groups: roles sharing devices are joined with '+'
    (e.g. `actor+reference`). With `device: cpu` the counts are CPU ranks, not GPUs."""

    device: Device = Device.GPU
    gpus_per_role: dict[str, int] = Field(default_factory=dict)
    rollout_engines: int = Field(0, ge=0)
    tensor_parallel_size: int = Field(1, ge=1)
    worker_groups: list[WorkerGroupAllocation] = Field(default_factory=list)
    total_gpus: int = Field(0, ge=0)
    reasons: dict[str, str] = Field(
        default_factory=dict,
        description="With spec.placement.auto: why each role got its GPUs (model sizes, "
        "layout, ZeRO strategy, memory per GPU), one line per key.",
    )


class TrainerCheckpoint(ConfigModel):
    step: int = Field(ge=0)
    path: str
    time: str | None = None


class TrainerOutcome(ConfigModel):
    """How one attempt's trainer ended, written just before it exits (see
    `rlhf_trainer.config.outcome`): the operator retries or not by `failure_class`."""

    attempt: int = Field(ge=0, description="RLHF_JOB_ATTEMPT of the run that wrote it.")
    exit_code: int
    failure_class: FailureClass | None = Field(None, description="None: succeeded.")
    message: str = Field("", max_length=4096)


class TrainerEval(ConfigModel):
    """The latest evaluation on `data.eval` (`training.evalEverySteps`): greedy and sampled
    responses scored by the job's reward sources."""

    step: int = Field(ge=0, description="The step whose weights were evaluated.")
    prompts: int = Field(0, ge=0, description="Eval prompts.")
    samples: int = Field(0, ge=0, description="Sampled responses per prompt (n of pass@k).")
    mean_reward: float | None = Field(None, description="Mean reward of the sampled responses.")
    greedy_reward: float | None = Field(None, description="Mean reward of greedy responses.")
    pass_at_k: dict[str, float] = Field(
        default_factory=dict,
        description="pass@k by k (unbiased estimator): a response passes when its reward is "
        ">= training.evalPassThreshold.",
    )


class TrainerBest(ConfigModel):
    """The checkpoint that scored best on `checkpoint.keepBest.metric` so far (kept whatever
    `checkpoint.keep` says, and exported as `best/` beside `final/`)."""

    step: int = Field(ge=0, description="The step of the best checkpoint.")
    metric: str = Field(description="checkpoint.keepBest.metric.")
    score: float = Field(description="Its value at that step.")
    checkpoint: str = Field(description="The checkpoint directory (in the trainer's pods).")


class TrainerReport(ConfigModel):
    """Written by the trainer (merge-patch of status.trainer); read by the operator."""

    step: int = Field(0, ge=0)
    total_steps: int | None = Field(None, ge=0)
    progress: str | None = Field(None, description="'step/total', for printer columns.")
    reward: float | None = None
    metrics: dict[str, float] = Field(default_factory=dict)
    samples_per_second: float | None = None
    eta_seconds: float | None = None
    checkpoints: list[TrainerCheckpoint] = Field(default_factory=list)
    eval: TrainerEval | None = None
    best: TrainerBest | None = None
    history: dict[str, HistorySeries] | None = Field(
        None,
        max_length=len(HISTORY_METRICS),
        description="Bounded metrics history for curves: per metric, up to "
        f"{MAX_POINTS} [step, value] points, downsampled over the whole run, newest last.",
    )
    message: str | None = None
    updated_at: str | None = None
    outcome: TrainerOutcome | None = None


class Usage(ConfigModel):
    """GPU time of the job across its attempts (always 0 with `device: cpu`)."""

    # Settled when a Running interval ends, so that the status changes only when something
    # happens. Up to now: gpuSecondsAllocated + (now - runningSince) x totalGpus while
    # runningSince is set; the operator's metrics export that live value.
    attempts: int = Field(0, ge=0, description="RayJobs created: the first and every retry.")
    gpu_seconds_allocated: int = Field(
        0, ge=0, description="GPU-seconds of every Running interval that ended."
    )
    gpu_seconds_lost: int = Field(
        0,
        ge=0,
        description="GPU-seconds of training lost to attempts that failed (preemptions "
        "included): from the attempt's last checkpoint, or its start, to the failure.",
    )
    running_since: str | None = Field(
        None,
        description="Start of the current Running interval, not yet in gpuSecondsAllocated "
        "(add (now - runningSince) x totalGpus for the live value).",
    )


class BestOutput(ConfigModel):
    """`checkpoint.keepBest`: the best-scoring checkpoint's model, exported as `best/`."""

    model: str | None = Field(
        None, description="Its model, Hugging Face format (as output.model is the final one)."
    )
    step: int = Field(ge=0)
    metric: str
    score: float


class JobOutput(ConfigModel):
    """Where a job's results are; they outlive its pods. `pvc://<claim>/<path>` locations can
    be given as another job's model or data (`models.actor.pretrained`). `logs` is there from
    the first attempt on; the rest once the job succeeded."""

    model: str | None = Field(None, description="The final model, Hugging Face format.")
    metrics: str | None = Field(None, description="metrics.jsonl, one record per step.")
    tensorboard: str | None = None
    logs: str | None = Field(
        None,
        description="Every container's log and the Events of each attempt "
        "(attempt-<N>/<pod>/<container>.log, events.jsonl, trainer.jsonl), kept while the "
        "pods run; `rlhf logs` reads them.",
    )
    uploaded: str | None = Field(
        None, description="spec.output.uri: the s3:// copy of final/, metrics and logs."
    )
    best: BestOutput | None = Field(
        None, description="With checkpoint.keepBest: the best checkpoint, its step and score."
    )


class JobInput(ConfigModel):
    """A model this job loads from another RLHFJob (`fromJob`). Recorded when first resolved
    and pinned from then on: a later change to that job does not change this job's inputs."""

    role: str = Field(description="The model source: actor, critic, reference, rewardModels[i].")
    from_job: str = Field(description="The RLHFJob whose final model it is.")
    uid: str = Field(description="That job's uid when it was resolved.")
    model: str = Field(description="The exact location given to the trainer as pretrained.")


class RLHFJobStatus(ConfigModel):
    phase: Phase = Phase.PENDING
    conditions: list[Condition] = Field(default_factory=list)
    observed_generation: int | None = None
    ray_job: RayJobRef | None = None
    allocation: Allocation | None = None
    trainer: TrainerReport | None = None
    restarts: int = Field(
        0, ge=0, description="Attempts replaced by a fresh RayJob, whatever the cause."
    )
    preemptions: int = Field(
        0,
        ge=0,
        description="Restarts after a preemption; they do not count against "
        "runPolicy.backoffLimit (restarts - preemptions do).",
    )
    guardrail_trips: int = Field(
        0,
        ge=0,
        description="Attempts stopped by a runPolicy.guardrails trip; the restarts after them "
        "(once the spec changed) do not count against runPolicy.backoffLimit.",
    )
    total_gpus: int | None = Field(None, ge=0, description="Mirror for printer columns.")
    start_time: str | None = None
    completion_time: str | None = None
    message: str | None = None
    usage: Usage | None = None
    output: JobOutput | None = None
    inputs: list[JobInput] | None = Field(
        None, description="Models taken from other RLHFJobs (fromJob), as resolved."
    )
