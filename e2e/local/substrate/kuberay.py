"""KubeRay v1.7's part: the RayJob and RayCluster controllers, following ray-project/kuberay's
ray-operator/controllers/ray/rayjob_controller.go and raycluster_controller.go.

RayJob, as its state machine does it: New -> (finalizer, jobId, rayClusterName, startTime)
Initializing -> (RayCluster created; once it is ready, dashboardURL set and the submitter Job
created) Running -> (the Ray job's status read from the head's dashboard; terminal and the
submitter finished) Complete | Failed -> (shutdownAfterJobFinishes: the RayCluster deleted once
ttlSecondsAfterFinished passed). `spec.suspend` goes Suspending (cluster and submitter deleted)
-> Suspended, and back to New when unsuspended; activeDeadlineSeconds fails the job with
DeadlineExceeded; a deleted RayJob stops its Ray job before its finalizer goes. As in KubeRay,
status is written only when jobStatus or jobDeploymentStatus change.

The RayCluster controller is raycluster.py.
"""

from __future__ import annotations

import base64
import copy
import datetime
import logging
from collections.abc import Callable
from typing import Any

import aiohttp

from emulator import ApiError, Emulator

from . import raypods
from .events import Recorder, now
from .raycluster import RayClusterController
from .workloads import controller_ref, suffix

JSON = dict[str, Any]
FINALIZER = "ray.io/rayjob-finalizer"
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")
log = logging.getLogger("substrate.kuberay")
# (host of a Service's DNS name) -> an address on the pod network, or None.
Resolver = Callable[[str], str | None]


def _ms(value: Any) -> str | None:
    if not value:
        return None
    stamp = datetime.datetime.fromtimestamp(int(value) / 1000, datetime.UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%SZ")


class KubeRay:
    def __init__(self, api: Emulator, resolve: Resolver) -> None:
        self.api = api
        self.resolve = resolve
        self.jobs = Recorder(api, "rayjob-controller")
        self.clusters = RayClusterController(api)
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def _dashboard(self, job: JSON, method: str, path: str) -> JSON | None:
        """The Ray dashboard's job API at the RayJob's dashboardURL; None when it has no such
        job (404) or cannot be reached (the caller retries, as KubeRay requeues)."""
        host, _, port = str(job["status"].get("dashboardURL", "")).partition(":")
        address = self.resolve(host)
        if address is None:
            return None
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
        headers = {}
        spec, namespace = job["spec"].get("rayClusterSpec") or {}, job["metadata"]["namespace"]
        secret = raypods.auth_secret(spec, str(job["status"].get("rayClusterName", "")))
        if secret is not None:  # the dashboard client sends the cluster's Ray token
            found = self.api.find("secrets", secret, namespace) or {}
            token = base64.b64decode((found.get("data") or {}).get(raypods.AUTH_TOKEN_KEY, ""))
            headers["x-ray-authorization"] = f"Bearer {token.decode()}"
        url = f"http://{address}:{port}{path}"
        try:
            async with self._session.request(method, url, headers=headers) as response:
                if response.status != 200:
                    return None
                return dict(await response.json(content_type=None))
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return None

    async def sync(self) -> None:
        for cluster in self.api.list("rayclusters.ray.io"):
            self.clusters.reconcile(cluster)
        for job in self.api.list("rayjobs.ray.io"):
            try:
                await self._job(job)
            except ApiError as err:
                log.info("RayJob %s: %s (retried)", job["metadata"]["name"], err.message)

    # --- RayJob -------------------------------------------------------------------------------

    def _delete(self, resource: str, name: str | None, namespace: str) -> bool:
        """Delete if present; True once it is gone."""
        if not name:
            return True
        found = self.api.find(resource, name, namespace)
        if found is None:
            return True
        if not found["metadata"].get("deletionTimestamp"):
            self.api.delete(resource, name, namespace, propagation="Background")
        return self.api.find(resource, name, namespace) is None

    async def _job(self, job: JSON) -> None:
        meta, spec = job["metadata"], job["spec"]
        namespace, name = meta["namespace"], meta["name"]
        status = copy.deepcopy(job.get("status") or {})
        job = {**job, "status": status}
        if meta.get("deletionTimestamp"):
            if status.get("jobStatus") not in TERMINAL and status.get("jobId"):
                await self._dashboard(job, "POST", f"/api/jobs/{status['jobId']}/stop")
            finalizers = [f for f in meta.get("finalizers") or [] if f != FINALIZER]
            if finalizers != (meta.get("finalizers") or []):
                self.api.patch(
                    "rayjobs.ray.io", name, {"metadata": {"finalizers": finalizers}}, namespace
                )
            return
        before = (status.get("jobStatus", ""), status.get("jobDeploymentStatus", ""))
        state = status.get("jobDeploymentStatus", "")
        if state == "":
            if FINALIZER not in (meta.get("finalizers") or []):
                self.api.patch(
                    "rayjobs.ray.io",
                    name,
                    {"metadata": {"finalizers": [*(meta.get("finalizers") or []), FINALIZER]}},
                    namespace,
                )
            status.setdefault("jobId", spec.get("jobId") or f"{name}-{suffix()}")
            status.setdefault("rayClusterName", f"{name}-raycluster-{suffix()}")
            status.setdefault("jobStatus", "")
            status["jobDeploymentStatus"] = "Initializing"
            status["startTime"] = now()
        elif state in ("Initializing", "Running") and spec.get("suspend"):
            status["jobDeploymentStatus"] = "Suspending"
        elif state in ("Initializing", "Running") and self._past_deadline(job):
            status.update(
                jobDeploymentStatus="Failed",
                reason="DeadlineExceeded",
                message="The RayJob has passed the activeDeadlineSeconds. StartTime: "
                f"{status.get('startTime')}. ActiveDeadlineSeconds: "
                f"{spec['activeDeadlineSeconds']}",
            )
        elif state == "Initializing":
            cluster = self._get_or_create_cluster(job)
            if (cluster.get("status") or {}).get("state") != "ready":
                return
            status["dashboardURL"] = (
                f"{raypods.fqdn(cluster['metadata']['name'], namespace)}:{raypods.DASHBOARD_PORT}"
            )
            if (
                spec.get("submissionMode", "K8sJobMode") == "K8sJobMode"
                and self.api.find("jobs", name, namespace) is None
            ):
                submitter = raypods.submitter_job(job, cluster)
                self.api.create("jobs", submitter, namespace)
                self.jobs.record(
                    job,
                    "RayJob",
                    "Normal",
                    "CreatedRayJobSubmitter",
                    f"Created Kubernetes Job {namespace}/{name}",
                )
            status["jobDeploymentStatus"] = "Running"
        elif state == "Running":
            await self._running(job, status)
        elif state in ("Suspending", "Retrying"):
            gone = self._delete("rayclusters.ray.io", status.get("rayClusterName"), namespace)
            gone = self._delete("jobs", name, namespace) and gone
            if not gone:
                return
            for key in (
                "rayClusterStatus",
                "rayClusterName",
                "dashboardURL",
                "jobId",
                "message",
                "reason",
                "rayJobInfo",
            ):
                status.pop(key, None)
            status["jobStatus"] = ""
            status["jobDeploymentStatus"] = "Suspended" if state == "Suspending" else ""
        elif state == "Suspended" and not spec.get("suspend"):
            status.update(jobStatus="", jobDeploymentStatus="")
        elif state in ("Complete", "Failed"):
            self._after_finish(job)
            return
        self._count_outcome(job, status)
        if (status.get("jobStatus", ""), status.get("jobDeploymentStatus", "")) != before:
            if status["jobDeploymentStatus"] in ("Complete", "Failed"):
                status["endTime"] = now()
            self.api.patch(
                "rayjobs.ray.io",
                name,
                [{"op": "add", "path": "/status", "value": status}],
                namespace,
                subresource="status",
            )

    def _past_deadline(self, job: JSON) -> bool:
        deadline, start = job["spec"].get("activeDeadlineSeconds"), job["status"].get("startTime")
        if deadline is None or not start:
            return False
        started = datetime.datetime.fromisoformat(start.replace("Z", "+00:00"))
        return datetime.datetime.now(datetime.UTC) >= started + datetime.timedelta(
            seconds=int(deadline)
        )

    def _get_or_create_cluster(self, job: JSON) -> JSON:
        namespace, name = job["metadata"]["namespace"], job["status"]["rayClusterName"]
        cluster = self.api.find("rayclusters.ray.io", name, namespace)
        if cluster is None:
            labels = {
                **(job["metadata"].get("labels") or {}),
                "ray.io/originated-from-cr-name": job["metadata"]["name"],
                "ray.io/originated-from-crd": "RayJob",
            }
            body = {
                "apiVersion": "ray.io/v1",
                "kind": "RayCluster",
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "labels": labels,
                    "annotations": dict(job["metadata"].get("annotations") or {}),
                    "ownerReferences": [controller_ref(job)],
                },
                "spec": copy.deepcopy(job["spec"]["rayClusterSpec"]),
            }
            cluster = self.api.create("rayclusters.ray.io", body, namespace)
            self.jobs.record(
                job,
                "RayJob",
                "Normal",
                "CreatedRayCluster",
                f"Created RayCluster {namespace}/{name}",
            )
        return cluster

    async def _running(self, job: JSON, status: JSON) -> None:
        namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
        submitter = None
        if job["spec"].get("submissionMode", "K8sJobMode") == "K8sJobMode":
            submitter = self.api.find("jobs", name, namespace)
            conditions = ((submitter or {}).get("status") or {}).get("conditions") or []
            failed = next(
                (c for c in conditions if c["type"] == "Failed" and c["status"] == "True"), None
            )
            if failed is not None:
                status["jobDeploymentStatus"] = "Failed"
                if status.get("jobStatus") == "FAILED":
                    status["reason"] = "AppFailed"
                else:
                    status["reason"] = "SubmissionFailed"
                    status["message"] = (
                        f"Job submission has failed. Reason: {failed.get('reason')}. "
                        f"Message: {failed.get('message')}"
                    )
                return
        cluster = self._get_or_create_cluster(job)
        info = await self._dashboard(job, "GET", f"/api/jobs/{status['jobId']}")
        if info is None:
            return  # not submitted yet, or the head is unreachable: KubeRay requeues
        job_status = str(info.get("status", ""))
        terminal = job_status in TERMINAL
        if submitter is not None:
            conditions = (submitter.get("status") or {}).get("conditions") or []
            terminal = terminal and any(
                c["type"] in ("Complete", "Failed") and c["status"] == "True" for c in conditions
            )
        status["rayClusterStatus"] = cluster.get("status") or {}
        status["jobStatus"] = job_status
        status["jobDeploymentStatus"] = (
            ("Failed" if job_status == "FAILED" else "Complete") if terminal else "Running"
        )
        status["reason"] = "AppFailed" if terminal and job_status == "FAILED" else ""
        status["message"] = str(info.get("message") or "")
        times = {
            k: v
            for k, v in (
                ("startTime", _ms(info.get("start_time"))),
                ("endTime", _ms(info.get("end_time"))),
            )
            if v
        }
        if times:
            status["rayJobInfo"] = times

    def _count_outcome(self, job: JSON, status: JSON) -> None:
        """checkBackoffLimitAndUpdateStatusIfNeeded (the operator's RayJobs use backoffLimit 0)."""
        if status.get("jobDeploymentStatus") == "Failed":
            status["failed"] = int(status.get("failed", 0)) + 1
        else:
            status.setdefault("failed", int(status.get("failed", 0)))
        succeeded = (
            status.get("jobStatus") == "SUCCEEDED"
            and status.get("jobDeploymentStatus") == "Complete"
        )
        status["succeeded"] = int(status.get("succeeded", 0)) + (1 if succeeded else 0)
        limit = job["spec"].get("backoffLimit")
        if (
            status.get("jobDeploymentStatus") == "Failed"
            and limit is not None
            and status["failed"] < int(limit) + 1
            and status.get("reason") != "DeadlineExceeded"
        ):
            status["jobDeploymentStatus"] = "Retrying"

    def _after_finish(self, job: JSON) -> None:
        spec, status = job["spec"], job["status"]
        if not spec.get("shutdownAfterJobFinishes") or spec.get("clusterSelector"):
            return
        ended = datetime.datetime.fromisoformat(
            str(status.get("endTime", now())).replace("Z", "+00:00")
        )
        if datetime.datetime.now(datetime.UTC) < ended + datetime.timedelta(
            seconds=int(spec.get("ttlSecondsAfterFinished", 0))
        ):
            return
        cluster = status.get("rayClusterName")
        if (
            cluster
            and self.api.find("rayclusters.ray.io", cluster, job["metadata"]["namespace"])
            is not None
        ):
            self._delete("rayclusters.ray.io", cluster, job["metadata"]["namespace"])
            self.jobs.record(
                job,
                "RayJob",
                "Normal",
                "DeletedRayCluster",
                f"Deleted cluster {job['metadata']['namespace']}/{cluster}",
            )
