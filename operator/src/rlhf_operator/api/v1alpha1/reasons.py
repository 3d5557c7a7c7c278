"""The reasons an RLHFJob gives, on its conditions and in its Events: one vocabulary.

A condition's reason is a `ConditionReason` (the CRD's enum for `status.conditions[].reason`).
An Event announcing a condition's change carries that condition's reason, so `kubectl describe`
and the status say the same word; `EventReason` holds only what no condition says: what the
operator did to the job's objects, and the milestones named after the condition (or phase)
they announce. No string is in both.
"""

from __future__ import annotations

from enum import StrEnum


class ConditionReason(StrEnum):
    SPEC_VALID = "SpecValid"
    SPEC_INVALID = "SpecInvalid"
    # Well-formed, but the platform's policy does not allow it (an image, a priority class...).
    POLICY_VIOLATION = "PolicyViolation"
    PLACEMENT_IMPOSSIBLE = "PlacementImpossible"
    RAY_JOB_CREATED = "RayJobCreated"
    WAITING_FOR_ADMISSION = "WaitingForAdmission"
    SUSPENDED_BY_USER = "SuspendedByUser"
    RESUMED = "Resumed"
    CLUSTER_PROVISIONING = "ClusterProvisioning"
    CLUSTER_READY = "ClusterReady"
    TRAINING = "Training"
    CHECKPOINT_SAVED = "CheckpointSaved"
    NO_CHECKPOINT = "NoCheckpoint"
    JOB_SUCCEEDED = "JobSucceeded"
    JOB_FAILED = "JobFailed"
    RETRYING = "Retrying"
    BACKOFF_LIMIT_EXCEEDED = "BackoffLimitExceeded"
    DEADLINE_EXCEEDED = "DeadlineExceeded"
    RAY_JOB_MISSING = "RayJobMissing"
    # A ConfigMap or PVC the spec references does not exist (yet).
    DEPENDENCY_MISSING = "DependencyMissing"
    # KubeRay removed the Ray cluster after the job finished (its GPUs are free).
    CLUSTER_SHUT_DOWN = "ClusterShutDown"
    # An object with a child's name exists that this job does not provably own (another
    # controller's, a user's, a former job's): it is left untouched, the job waits.
    CHILD_CONFLICT = "ChildConflict"
    CHILDREN_APPLIED = "ChildrenApplied"
    # The API server refused a child (HTTP 4xx/5xx); retried with exponential backoff.
    CHILD_APPLY_FAILED = "ChildApplyFailed"
    # Why the current attempt's pods do not run yet (ClusterReady=False while provisioning).
    UNSCHEDULABLE = "Unschedulable"
    IMAGE_PULL_FAILED = "ImagePullFailed"
    CONTAINER_CONFIG_ERROR = "ContainerConfigError"
    CONTAINER_CRASH_LOOPING = "ContainerCrashLooping"
    # The pods did not all run within runPolicy.startupTimeoutSeconds (terminal).
    STARTUP_TIMEOUT = "StartupTimeout"
    # An attempt failed in a way a retry cannot fix (FailureClass InvalidSpec; terminal).
    NOT_RETRYABLE = "NotRetryable"
    # An attempt was preempted: retried, not counted against runPolicy.backoffLimit.
    PREEMPTED = "Preempted"
    # A `fromJob` source names a job that has not succeeded yet (or does not exist yet).
    WAITING_FOR_JOB = "WaitingForJob"
    # A `fromJob` source names a job that failed, or succeeded without exporting a model.
    INPUT_JOB_FAILED = "InputJobFailed"
    INPUTS_RESOLVED = "InputsResolved"
    # A guardrail tripped: the attempt checkpointed and stopped; the job is suspended until its
    # spec changes (e.g. the bound raised), or failed with `runPolicy.guardrails.action: fail`.
    GUARDRAIL_TRIPPED = "GuardrailTripped"
    # Healthy=False, one reason per guard of runPolicy.guardrails.
    NON_FINITE_METRIC = "NonFiniteMetric"
    KL_ABOVE_BOUND = "KLAboveBound"
    RESPONSES_TOO_SHORT = "ResponsesTooShort"
    RESPONSES_TRUNCATED = "ResponsesTruncated"
    REWARD_EVAL_DIVERGENCE = "RewardEvalDivergence"
    ENTROPY_COLLAPSE = "EntropyCollapse"
    # Healthy=True again: the spec changed after a trip, and a new attempt resumes.
    GUARDRAIL_RESUMED = "GuardrailResumed"


class EventReason(StrEnum):
    """Reasons only Events carry (never a condition's)."""

    # What the operator did.
    CREATED = "Created"
    UPDATED = "Updated"
    DELETED = "Deleted"
    TTL_EXPIRED = "TTLExpired"
    # Milestones, named after the condition that turned True (Complete: the phase).
    ADMITTED = "Admitted"
    RUNNING = "Running"
    SUSPENDED = "Suspended"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class EventType(StrEnum):
    NORMAL = "Normal"
    WARNING = "Warning"
