"""The parts of kube-controller-manager (and a storage provisioner) the journey needs, each kept
to what the operator's chart, KubeRay's submitter and the RLHFJob children use:

- ServiceAccounts: a `default` account in every namespace.
- Volumes: a PersistentVolumeClaim is bound at once to a directory of this machine,
  `<state>/pvc/<namespace>/<claim>/` (mode 0777, like kind's local-path provisioner). The
  directory outlives the pods and the claim (reclaim policy Retain): a later claim of the same
  name gets a fresh directory and the old one is moved to `<state>/pvc-released/`. No
  PersistentVolume or StorageClass objects; access modes are recorded, not enforced (one node).
- Deployments (strategy Recreate or RollingUpdate alike): the pods of the template, recreated
  when deleted, replaced when the template changes. No ReplicaSet objects in between.
- Jobs (batch/v1, one pod at a time): a new pod after each failure until `backoffLimit`, with
  the Job's Complete/Failed conditions as the job controller sets them.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import shutil
import time
from typing import Any

from emulator import ApiError, Emulator

from .events import Recorder, now
from .plans import Cluster, pvc_dir

JSON = dict[str, Any]
_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def suffix(n: int = 5) -> str:
    return "".join(secrets.choice(_ALPHABET) for _ in range(n))


def owned_by(obj: JSON, owner: JSON) -> bool:
    uid = owner["metadata"]["uid"]
    return any(r.get("uid") == uid for r in obj["metadata"].get("ownerReferences") or [])


def controller_ref(owner: JSON) -> JSON:
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def phase(pod: JSON) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def is_ready(pod: JSON) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


class Workloads:
    def __init__(self, api: Emulator, cluster: Cluster) -> None:
        self.api = api
        self.cluster = cluster
        self.deployments = Recorder(api, "deployment-controller")
        self.jobs = Recorder(api, "job-controller")
        self.volumes = Recorder(api, "persistentvolume-controller")
        self._job_retry_at: dict[str, float] = {}

    async def sync(self) -> None:
        for namespace in self.api.list("namespaces"):
            name = namespace["metadata"]["name"]
            live = not namespace["metadata"].get("deletionTimestamp")
            if live and self.api.find("serviceaccounts", "default", name) is None:
                self._create("serviceaccounts", {"metadata": {"name": "default"}}, name)
        for claim in self.api.list("persistentvolumeclaims"):
            if (claim.get("status") or {}).get("phase") != "Bound":
                self._provision(claim)
        for deployment in self.api.list("deployments"):
            self._deployment(deployment)
        for job in self.api.list("jobs"):
            self._job(job)

    def _create(self, resource: str, body: JSON, namespace: str) -> JSON | None:
        try:
            return self.api.create(resource, body, namespace)
        except ApiError:
            return None  # e.g. the namespace is terminating; the next tick sees the new state

    # --- volumes ----------------------------------------------------------------------------------

    def _provision(self, claim: JSON) -> None:
        meta = claim["metadata"]
        if meta.get("deletionTimestamp"):
            return
        directory = pvc_dir(self.cluster, meta["namespace"], meta["name"])
        marker = directory.parent / f".{meta['name']}.claim-uid"
        if directory.exists() and (not marker.exists() or marker.read_text() != meta["uid"]):
            old = marker.read_text() if marker.exists() else "unknown"
            released = (
                self.cluster.state / "pvc-released" / meta["namespace"] / f"{meta['name']}-{old}"
            )
            released.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(directory), str(released))
        directory.mkdir(parents=True, exist_ok=True)
        directory.chmod(0o777)
        marker.write_text(meta["uid"])
        spec = claim.get("spec") or {}
        self.api.patch(
            "persistentvolumeclaims",
            meta["name"],
            {"spec": {"volumeName": f"pvc-{meta['uid']}"}},
            meta["namespace"],
        )
        status = {
            "phase": "Bound",
            "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
            "capacity": {
                "storage": ((spec.get("resources") or {}).get("requests") or {}).get(
                    "storage", "1Gi"
                )
            },
        }
        self.api.patch_status("persistentvolumeclaims", meta["name"], status, meta["namespace"])
        self.volumes.record(
            claim,
            "PersistentVolumeClaim",
            "Normal",
            "ProvisioningSucceeded",
            f"Successfully provisioned volume pvc-{meta['uid']} at {directory}",
        )

    # --- deployments ------------------------------------------------------------------------------

    def _deployment(self, deployment: JSON) -> None:
        meta, spec = deployment["metadata"], deployment.get("spec") or {}
        if meta.get("deletionTimestamp"):
            return
        namespace = meta["namespace"]
        template = spec.get("template") or {}
        template_hash = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[
            :10
        ]
        pods = [p for p in self.api.list("pods", namespace) if owned_by(p, deployment)]
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        current = [
            p for p in live if p["metadata"]["labels"].get("pod-template-hash") == template_hash
        ]
        for pod in live:
            if pod not in current or phase(pod) in ("Succeeded", "Failed"):
                self.api.delete("pods", pod["metadata"]["name"], namespace)
        replicas = int(spec.get("replicas", 1))
        if len(pods) == len(current):  # Recreate: new pods once the old ones are gone
            for _ in range(replicas - len(current)):
                body = json.loads(json.dumps(template))
                body.setdefault("metadata", {}).setdefault("labels", {})["pod-template-hash"] = (
                    template_hash
                )
                body["metadata"]["name"] = f"{meta['name']}-{template_hash}-{suffix()}"
                body["metadata"]["ownerReferences"] = [controller_ref(deployment)]
                if self._create("pods", body, namespace) is not None:
                    self.deployments.record(
                        deployment,
                        "Deployment",
                        "Normal",
                        "ScalingReplicaSet",
                        f"Created pod {body['metadata']['name']}",
                    )
        ready = sum(1 for p in current if is_ready(p))
        status = {
            "observedGeneration": meta.get("generation", 1),
            "replicas": len(live),
            "updatedReplicas": len(current),
            "readyReplicas": ready,
            "availableReplicas": ready,
            "conditions": [
                {
                    "type": "Available",
                    "status": "True" if ready >= replicas else "False",
                    "reason": "MinimumReplicasAvailable"
                    if ready >= replicas
                    else "MinimumReplicasUnavailable",
                }
            ],
        }
        if {k: v for k, v in (deployment.get("status") or {}).items()} != status:
            self.api.patch(
                "deployments",
                meta["name"],
                [{"op": "add", "path": "/status", "value": status}],
                namespace,
                subresource="status",
            )

    # --- jobs -------------------------------------------------------------------------------------

    def _job(self, job: JSON) -> None:
        meta, spec = job["metadata"], job.get("spec") or {}
        status = dict(job.get("status") or {})
        if meta.get("deletionTimestamp") or any(
            c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
            for c in status.get("conditions") or []
        ):
            return
        namespace = meta["namespace"]
        if not spec.get("selector"):
            # What the API server's defaulting gives every Job (kubectl logs job/x uses it).
            labels = {"batch.kubernetes.io/controller-uid": meta["uid"]}
            self.api.patch(
                "jobs", meta["name"], {"spec": {"selector": {"matchLabels": labels}}}, namespace
            )
        pods = [p for p in self.api.list("pods", namespace) if owned_by(p, job)]
        succeeded = sum(1 for p in pods if phase(p) == "Succeeded")
        failed = sum(1 for p in pods if phase(p) == "Failed")
        active = [
            p
            for p in pods
            if phase(p) not in ("Succeeded", "Failed")
            and not p["metadata"].get("deletionTimestamp")
        ]
        new = {
            **status,
            "active": len(active),
            "succeeded": succeeded,
            "failed": failed,
            "ready": sum(1 for p in active if is_ready(p)),
        }
        new.setdefault("startTime", now())
        backoff_limit = int(spec.get("backoffLimit", 6))
        if succeeded:
            new["completionTime"] = now()
            new["conditions"] = [
                {
                    "type": "SuccessCriteriaMet",
                    "status": "True",
                    "reason": "CompletionsReached",
                    "message": "Reached expected number of succeeded pods",
                    "lastTransitionTime": now(),
                },
                {
                    "type": "Complete",
                    "status": "True",
                    "reason": "CompletionsReached",
                    "message": "Reached expected number of succeeded pods",
                    "lastTransitionTime": now(),
                },
            ]
            self.jobs.record(job, "Job", "Normal", "Completed", "Job completed")
        elif failed > backoff_limit:
            message = "Job has reached the specified backoff limit"
            new["conditions"] = [
                {
                    "type": "FailureTarget",
                    "status": "True",
                    "reason": "BackoffLimitExceeded",
                    "message": message,
                    "lastTransitionTime": now(),
                },
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "BackoffLimitExceeded",
                    "message": message,
                    "lastTransitionTime": now(),
                },
            ]
            self.jobs.record(job, "Job", "Warning", "BackoffLimitExceeded", message)
        elif not active:
            key = meta["uid"]
            # The job controller's back-off between failed pods: 10 s, doubling, at most 6 min.
            retry_at = self._job_retry_at.setdefault(
                key, time.monotonic() + (min(360, 10 * 2 ** (failed - 1)) if failed else 0)
            )
            if time.monotonic() >= retry_at:
                self._job_retry_at.pop(key, None)
                body = json.loads(json.dumps(spec.get("template") or {}))
                labels = body.setdefault("metadata", {}).setdefault("labels", {})
                labels.update(
                    {
                        "batch.kubernetes.io/controller-uid": meta["uid"],
                        "batch.kubernetes.io/job-name": meta["name"],
                        "controller-uid": meta["uid"],
                        "job-name": meta["name"],
                    }
                )
                body["metadata"]["name"] = f"{meta['name']}-{suffix()}"
                body["metadata"]["ownerReferences"] = [controller_ref(job)]
                if self._create("pods", body, namespace) is not None:
                    new["active"] = 1
                    self.jobs.record(
                        job,
                        "Job",
                        "Normal",
                        "SuccessfulCreate",
                        f"Created pod: {body['metadata']['name']}",
                    )
        if new != status:
            self.api.patch(
                "jobs",
                meta["name"],
                [{"op": "add", "path": "/status", "value": new}],
                namespace,
                subresource="status",
            )
