"""The Ray pods' preStop hook (`rlhf prestop`): a pod that is going away (a node drain, a
Kueue eviction, a spot reclaim, a suspension) first has the driver checkpoint.

Kubernetes runs a container's preStop hook before it sends SIGTERM, within the pod's
`terminationGracePeriodSeconds` (the job's `runPolicy.checkpointOnPreemptionSeconds`). When
every pod of a job is evicted at once, nothing else would tell the driver: KubeRay's containers
run `ray start --block` under a shell that is PID 1 and ignores SIGTERM, and SIGKILL at the end
of the grace period takes the driver, the ranks and the last steps together. So every Ray pod's
hook asks Ray to stop the cluster's running jobs: Ray's job supervisor sends the driver SIGTERM
(and SIGKILL only after `RAY_JOB_STOP_WAIT_TIME_S`, which the operator sets to the same grace),
the driver stops at the next step boundary and checkpoints the last finished step with its
ranks (`rlhf_trainer.context.preemption`), reports itself Preempted and exits. The hook waits
until no job runs: meanwhile this pod's Ray node, and the ranks on it, keep serving the
checkpoint. Then it returns, and the pod's command line runs `ray stop`, so the pod ends now
rather than at the end of its grace period.

Whichever pod goes first, head or worker, the job checkpoints: a rank lost with its pod would
fail the step anyway. A pod deleted after its job ended finds nothing to stop and returns at
once. The head is reached at `RAY_ADDRESS`'s host (KubeRay sets it: 127.0.0.1 on the head, the
head Service on workers); an unreachable head means the cluster is gone: nothing to wait for.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

log = logging.getLogger(__name__)

DASHBOARD_PORT = 8265  # KubeRay's default; the operator's RayJobs do not change it
ACTIVE = frozenset({"PENDING", "RUNNING"})
POLL_SECONDS = 1.0
# After the job supervisor's own grace (RAY_JOB_STOP_WAIT_TIME_S) it kills the driver: by then
# the job has ended, or the kubelet has ended this hook.
STOP_WAIT_ENV = "RAY_JOB_STOP_WAIT_TIME_S"
DEFAULT_STOP_WAIT_S = 300.0


class JobApi(Protocol):
    """What the hook uses of Ray's job API (`ray.job_submission.JobSubmissionClient`)."""

    def active_jobs(self) -> list[str]: ...

    def stop_job(self, job_id: str) -> bool: ...

    def status(self, job_id: str) -> str: ...


@dataclass(frozen=True)
class Stopped:
    jobs: tuple[str, ...]
    ended: bool  # every job reached a terminal state before the deadline

    def describe(self) -> str:
        if not self.jobs:
            return "no Ray job was running"
        names = ", ".join(self.jobs)
        return f"stopped {names}" if self.ended else f"{names} still running at the deadline"


def dashboard_address(env: Mapping[str, str]) -> str:
    """The head's dashboard: `RAY_API_SERVER_ADDRESS` where set (as for `ray job`), else at
    the host of KubeRay's `RAY_ADDRESS` (`host:port` of the GCS)."""
    if env.get("RAY_API_SERVER_ADDRESS"):
        return env["RAY_API_SERVER_ADDRESS"]
    gcs = env.get("RAY_ADDRESS") or "127.0.0.1:6379"
    host = gcs.removeprefix("ray://").rsplit(":", 1)[0] or "127.0.0.1"
    return f"http://{host}:{DASHBOARD_PORT}"


def stop_jobs_and_wait(
    api: JobApi,
    *,
    wait_s: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Stopped:
    """Ask every running job to stop, then wait up to `wait_s` for all of them to end."""
    jobs = tuple(api.active_jobs())
    for job_id in jobs:
        api.stop_job(job_id)  # False: already stopping (another pod's hook asked first)
    deadline = clock() + wait_s
    pending = list(jobs)
    while pending:
        pending = [j for j in pending if api.status(j) in ACTIVE]
        if not pending:
            break
        left = deadline - clock()
        if left <= 0:
            return Stopped(jobs, ended=False)
        sleep(min(POLL_SECONDS, left))
    return Stopped(jobs, ended=True)


class RayJobApi:
    """Ray's job API at the head's dashboard (token authentication from the pod's env)."""

    def __init__(self, address: str) -> None:
        from ray.job_submission import JobSubmissionClient

        self.client = JobSubmissionClient(address)

    def active_jobs(self) -> list[str]:
        return [
            job.submission_id
            for job in self.client.list_jobs()
            if job.submission_id and str(job.status) in ACTIVE
        ]

    def stop_job(self, job_id: str) -> bool:
        return bool(self.client.stop_job(job_id))

    def status(self, job_id: str) -> str:
        return str(self.client.get_job_status(job_id))


def prestop(env: Mapping[str, str] | None = None) -> int:
    """The hook: 0 whatever happens (a failed hook only delays the pod's end)."""
    env = os.environ if env is None else env
    address = dashboard_address(env)
    try:
        wait_s = float(env.get(STOP_WAIT_ENV) or DEFAULT_STOP_WAIT_S)
    except ValueError:
        wait_s = DEFAULT_STOP_WAIT_S
    try:
        api = RayJobApi(address)
        stopped = stop_jobs_and_wait(api, wait_s=wait_s)
    except Exception as err:  # the head is gone: its jobs with it
        print(f"rlhf prestop: Ray's job API at {address} did not answer ({err})", flush=True)
        return 0
    print(f"rlhf prestop: {stopped.describe()}", flush=True)
    return 0
