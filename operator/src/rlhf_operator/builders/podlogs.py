"""Every container of a job's pods runs in the log wrapper (pure): its output is kept on the
job's storage volume as it is written, attempt by attempt (rlhf_trainer.config.podlogs has
the layout, rlhf_trainer.podlogs the wrapper).

KubeRay builds the Ray containers' command itself (`ulimit; ray start ...`); with the
annotation `ray.io/overwrite-container-cmd: "true"` on the RayCluster (KubeRay copies a
RayJob's annotations to its RayCluster) and on the pod templates, it keeps ours and hands the
`ray start` line it generated in `$KUBERAY_GEN_RAY_START_CMD`, which the wrapper runs. The
submitter's command is kept whenever one is given; it does what KubeRay's would (follow a job
already submitted by an earlier try of the submitter, else submit it), with the address and
submission id KubeRay puts into its environment.

Each wrapped container learns where to write from `RLHF_LOGS_DIR` (the attempt's directory)
and `RLHF_POD_NAME` (the downward API). The head's wrapper also keeps the job's Events: the
head pod lives from an attempt's start to its end and holds the job's ServiceAccount token,
whose Role lets it list and watch Events (report.py); the operator mounts no job's volume.
"""

from __future__ import annotations

import shlex

from rlhf_trainer.config.podlogs import (
    LOGS_DIR,
    LOGS_DIR_ENV,
    POD_NAME_ENV,
    ContainerLogsConfig,
    attempt_dir,
)

from ..api.v1alpha1 import RLHFJob
from .common import JSON
from .volumes import STORAGE_DIR, job_dir

OVERWRITE_COMMAND_ANNOTATION = "ray.io/overwrite-container-cmd"
SHELL = ["/bin/bash", "-c", "--"]
# What KubeRay runs before `ray start` when it writes the command itself.
ULIMIT = "ulimit -n ${RAY_START_ULIMIT_OPEN_FILES:-65536}"
RAY_START = '/bin/bash -c "$KUBERAY_GEN_RAY_START_CMD"'
# KubeRay's submitter command (common/job.go, GetK8sJobCommand): a retried submitter pod
# follows the job it submitted before instead of submitting it twice.
_ADDRESS = '--address "http://$RAY_DASHBOARD_ADDRESS"'
_SUBMIT = (
    f'if ray job status {_ADDRESS} "$RAY_JOB_SUBMISSION_ID" >/dev/null 2>&1; '
    f'then ray job logs {_ADDRESS} --follow "$RAY_JOB_SUBMISSION_ID"; '
    f'else ray job submit {_ADDRESS} --submission-id "$RAY_JOB_SUBMISSION_ID" -- {{entrypoint}}; '
    "fi"
)


def logs_dir(job: RLHFJob) -> str:
    """The job's logs directory in its pods."""
    return f"{STORAGE_DIR}/{job_dir(job)}/{LOGS_DIR}"


def logs_env(job: RLHFJob, attempt: int) -> list[JSON]:
    return [
        {"name": LOGS_DIR_ENV, "value": f"{logs_dir(job)}/{attempt_dir(attempt)}"},
        {"name": POD_NAME_ENV, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    ]


def wrapper(container: str, limits: ContainerLogsConfig, *, events: bool = False) -> str:
    """The wrapper's command line, to which the container's own command is appended.
    `events`: the head's, which also keeps the job's Events (rlhf_trainer.podlogs.events)."""
    return (
        f"exec python -m rlhf_trainer.podlogs --container {shlex.quote(container)} "
        f"--max-size {limits.max_size} --max-files {limits.max_files}"
        f"{' --events' if events else ''} --"
    )


def ray_command(job: RLHFJob, container: str, *, head: bool) -> tuple[list[str], list[str]]:
    """(command, args) of a head or worker container: `ray start` as KubeRay generated it."""
    limits = job.spec.logging.container_logs
    return list(SHELL), [f"{ULIMIT}; {wrapper(container, limits, events=head)} {RAY_START}"]


def submitter_command(job: RLHFJob, container: str, entrypoint: str) -> tuple[list[str], list[str]]:
    """(command, args) of the submitter container (`-e`, as KubeRay's own)."""
    limits = job.spec.logging.container_logs
    script = _SUBMIT.format(entrypoint=entrypoint)
    return ["/bin/bash", "-ce", "--"], [
        f"{wrapper(container, limits)} /bin/bash -ce {shlex.quote(script)}"
    ]
