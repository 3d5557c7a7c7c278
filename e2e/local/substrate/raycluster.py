"""KubeRay v1.7's RayCluster controller, following ray-project/kuberay's
ray-operator/controllers/ray/raycluster_controller.go: the head Service, the head pod and each
worker group's pods (built by raypods.py), recreated when they are deleted or end, and the
status KubeRay computes (`state: ready` once every pod runs and is ready, the head's address,
the endpoints, the HeadPodReady and RayClusterProvisioned conditions)."""

from __future__ import annotations

import base64
import secrets
from typing import Any

from emulator import Emulator

from . import raypods
from .events import Recorder, now
from .workloads import is_ready, owned_by, phase

JSON = dict[str, Any]


class RayClusterController:
    def __init__(self, api: Emulator) -> None:
        self.api = api
        self.events = Recorder(api, "raycluster-controller")

    def reconcile(self, cluster: JSON) -> None:
        meta, spec = cluster["metadata"], cluster["spec"]
        if meta.get("deletionTimestamp"):
            return
        namespace = meta["namespace"]
        secret = raypods.auth_secret(spec, meta["name"])
        generated = secret is not None and secret == raypods.check_name(meta["name"])
        if generated and self.api.find("secrets", str(secret), namespace) is None:
            # authentication_controller.go: a token Secret for clusters that name none
            token = base64.b64encode(secrets.token_urlsafe(32).encode()).decode()
            body = {
                "metadata": {"name": secret, "ownerReferences": [raypods.owner(cluster)]},
                "data": {raypods.AUTH_TOKEN_KEY: token},
            }
            self.api.create("secrets", body, namespace)
        service = raypods.head_service(cluster)
        if self.api.find("services", service["metadata"]["name"], namespace) is None:
            self.api.create("services", service, namespace)
        pods = [p for p in self.api.list("pods", namespace) if owned_by(p, cluster)]
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        for pod in live:
            if phase(pod) in ("Succeeded", "Failed"):  # a dead Ray node is replaced
                self.api.delete("pods", pod["metadata"]["name"], namespace)
        live = [p for p in live if phase(p) not in ("Succeeded", "Failed")]
        head = [p for p in live if p["metadata"]["labels"].get("ray.io/node-type") == "head"]
        if not head:
            created = self.api.create(
                "pods", raypods.build_pod(cluster, "head", spec["headGroupSpec"]), namespace
            )
            self.events.record(
                cluster,
                "RayCluster",
                "Normal",
                "CreatedHeadPod",
                f"Created head Pod {namespace}/{created['metadata']['name']}",
            )
        desired = 0
        for group in spec.get("workerGroupSpecs") or []:
            replicas = int(group.get("replicas", group.get("minReplicas", 0)))
            replicas = max(
                int(group.get("minReplicas", 0)),
                min(replicas, int(group.get("maxReplicas", replicas))),
            )
            replicas = 0 if group.get("suspend") else replicas
            desired += replicas
            members = [
                p
                for p in live
                if p["metadata"]["labels"].get("ray.io/group") == group["groupName"]
                and p not in head
            ]
            for _ in range(replicas - len(members)):
                created = self.api.create(
                    "pods", raypods.build_pod(cluster, "worker", group), namespace
                )
                self.events.record(
                    cluster,
                    "RayCluster",
                    "Normal",
                    "CreatedWorkerPod",
                    f"Created worker Pod {namespace}/{created['metadata']['name']}",
                )
            for extra in members[replicas:]:
                self.api.delete("pods", extra["metadata"]["name"], namespace)
        self._status(cluster, head, [p for p in live if p not in head], desired, service)

    def _status(
        self, cluster: JSON, head: list[JSON], workers: list[JSON], desired: int, service: JSON
    ) -> None:
        old = cluster.get("status") or {}
        all_ready = (
            bool(head)
            and is_ready(head[0])
            and len(workers) == desired
            and all(is_ready(w) and phase(w) == "Running" for w in workers)
        )
        head_ready = bool(head) and is_ready(head[0])
        status: JSON = {
            "desiredWorkerReplicas": desired,
            "minWorkerReplicas": sum(
                int(g.get("minReplicas", 0)) for g in cluster["spec"].get("workerGroupSpecs") or []
            ),
            "maxWorkerReplicas": sum(
                int(g.get("maxReplicas", 0)) for g in cluster["spec"].get("workerGroupSpecs") or []
            ),
            "readyWorkerReplicas": sum(1 for w in workers if is_ready(w) and phase(w) == "Running"),
            "availableWorkerReplicas": sum(1 for w in workers if phase(w) == "Running"),
            "endpoints": {p["name"]: str(p["port"]) for p in service["spec"]["ports"]},
            "head": {"serviceName": service["metadata"]["name"]},
            "observedGeneration": cluster["metadata"].get("generation", 1),
            "conditions": [
                {
                    "type": "HeadPodReady",
                    "status": "True" if head_ready else "False",
                    "reason": "HeadPodRunningAndReady"
                    if head_ready
                    else "HeadPodNotFound"
                    if not head
                    else "ContainersNotReady",
                    "message": "" if head_ready else "the head Pod is not running and ready",
                },
            ],
        }
        if head:
            ip = (head[0].get("status") or {}).get("podIP")
            status["head"].update(
                {
                    "podName": head[0]["metadata"]["name"],
                    **({"podIP": ip, "serviceIP": ip} if ip else {}),
                }
            )
        provisioned = all_ready or any(
            c.get("type") == "RayClusterProvisioned" and c.get("status") == "True"
            for c in old.get("conditions") or []
        )
        status["conditions"].append(
            {
                "type": "RayClusterProvisioned",
                "status": "True" if provisioned else "False",
                "reason": "AllPodRunningAndReadyFirstTime"
                if provisioned
                else "RayClusterPodsProvisioning",
                "message": "All Ray Pods are ready for the first time"
                if provisioned
                else "RayCluster Pods are being provisioned for first time",
            }
        )
        if all_ready:
            status["state"] = "ready"
        elif old.get("state"):
            status["state"] = old["state"]
        comparable = {
            k: v for k, v in old.items() if k not in ("lastUpdateTime", "stateTransitionTimes")
        }
        for condition in comparable.get("conditions", []):
            condition.pop("lastTransitionTime", None)
        if comparable != status:
            stamp = now()
            for condition in status["conditions"]:
                condition["lastTransitionTime"] = stamp
            status["lastUpdateTime"] = stamp
            self.api.patch(
                "rayclusters.ray.io",
                cluster["metadata"]["name"],
                [{"op": "add", "path": "/status", "value": status}],
                cluster["metadata"]["namespace"],
                subresource="status",
            )
