"""`kubectl get` columns of the built-in kinds a person looks at on the local substrate, as the
real server's printers show them (pkg/printers/internalversion): pods (with kubectl's STATUS
rules), jobs, deployments, PVCs and events. Other built-ins show Name and Age."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

JSON = dict[str, Any]
AGE = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


def pod_status(pod: Mapping[str, Any]) -> str:
    """kubectl's STATUS of a pod: the most telling reason, init progress, Terminating."""
    status = pod.get("status") or {}
    reason = str(status.get("reason") or status.get("phase") or "Pending")
    inits = status.get("initContainerStatuses") or []
    for i, c in enumerate(inits):
        state = c.get("state") or {}
        if (state.get("terminated") or {}).get("exitCode") == 0:
            continue
        if "terminated" in state:
            reason = f"Init:{state['terminated'].get('reason') or 'Error'}"
        elif (state.get("waiting") or {}).get("reason") not in (None, "PodInitializing"):
            reason = f"Init:{state['waiting']['reason']}"
        else:
            reason = f"Init:{i}/{len(inits)}"
        break
    else:
        for c in status.get("containerStatuses") or []:
            state = c.get("state") or {}
            if (state.get("waiting") or {}).get("reason"):
                reason = state["waiting"]["reason"]
            elif (state.get("terminated") or {}).get("reason"):
                reason = state["terminated"]["reason"]
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        reason = "Terminating"
    return reason


def _ready(pod: Mapping[str, Any]) -> str:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    total = len((pod.get("spec") or {}).get("containers") or [])
    return f"{sum(1 for c in statuses if c.get('ready'))}/{total}"


def _restarts(pod: Mapping[str, Any]) -> int:
    return sum(
        int(c.get("restartCount", 0))
        for c in (pod.get("status") or {}).get("containerStatuses") or []
    )


def _job_status(job: Mapping[str, Any]) -> str:
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("status") == "True" and condition.get("type") in ("Complete", "Failed"):
            return str(condition["type"])
    return "Running"


def _completions(job: Mapping[str, Any]) -> str:
    succeeded = (job.get("status") or {}).get("succeeded", 0)
    return f"{succeeded}/{(job.get('spec') or {}).get('completions', 1)}"


def _access_modes(claim: Mapping[str, Any]) -> str:
    return ",".join((claim.get("status") or {}).get("accessModes") or [])


def _deployment_ready(deployment: Mapping[str, Any]) -> str:
    ready = (deployment.get("status") or {}).get("readyReplicas", 0)
    return f"{ready}/{(deployment.get('spec') or {}).get('replicas', 1)}"


def _object(event: Mapping[str, Any]) -> str:
    subject = event.get("involvedObject") or {}
    return f"{str(subject.get('kind', '')).lower()}/{subject.get('name', '')}"


Column = dict[str, Any]  # a printer column; "compute" replaces "jsonPath" where given
COLUMNS: Mapping[tuple[str, str], list[Column]] = {
    ("", "pods"): [
        {"name": "Ready", "type": "string", "compute": _ready},
        {"name": "Status", "type": "string", "compute": pod_status},
        {"name": "Restarts", "type": "integer", "compute": _restarts},
        AGE,
        {"name": "IP", "type": "string", "jsonPath": ".status.podIP", "priority": 1},
        {"name": "Node", "type": "string", "jsonPath": ".spec.nodeName", "priority": 1},
    ],
    ("batch", "jobs"): [
        {"name": "Status", "type": "string", "compute": _job_status},
        {"name": "Completions", "type": "string", "compute": _completions},
        AGE,
    ],
    ("apps", "deployments"): [
        {"name": "Ready", "type": "string", "compute": _deployment_ready},
        {"name": "Available", "type": "integer", "jsonPath": ".status.availableReplicas"},
        AGE,
    ],
    ("", "persistentvolumeclaims"): [
        {"name": "Status", "type": "string", "jsonPath": ".status.phase"},
        {"name": "Volume", "type": "string", "jsonPath": ".spec.volumeName"},
        {"name": "Capacity", "type": "string", "jsonPath": ".status.capacity.storage"},
        {"name": "Access Modes", "type": "string", "compute": _access_modes},
        AGE,
    ],
    ("", "events"): [
        {"name": "Last Seen", "type": "date", "jsonPath": ".lastTimestamp"},
        {"name": "Type", "type": "string", "jsonPath": ".type"},
        {"name": "Reason", "type": "string", "jsonPath": ".reason"},
        {"name": "Object", "type": "string", "compute": _object},
        {"name": "Message", "type": "string", "jsonPath": ".message"},
    ],
}


def columns_of(group: str, plural: str) -> list[Column] | None:
    return COLUMNS.get((group, plural))
