"""The trainer's identity: a ServiceAccount whose Role lets it patch the status of its own
RLHFJob and nothing else (`resourceNames`), so a compromised trainer cannot touch other jobs."""

from __future__ import annotations

from ..api.v1alpha1 import GROUP, PLURAL, RLHFJob
from .common import JSON, metadata, service_account_name


def build_service_account(job: RLHFJob) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": metadata(job, service_account_name(job.name), "rbac"),
        # The trainer's status reporter uses the pod's token.
        "automountServiceAccountToken": True,
    }


def build_role(job: RLHFJob) -> JSON:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": metadata(job, service_account_name(job.name), "rbac"),
        "rules": [
            {
                "apiGroups": [GROUP],
                "resources": [f"{PLURAL}/status"],
                "resourceNames": [job.name],
                "verbs": ["get", "patch"],
            }
        ],
    }


def build_role_binding(job: RLHFJob) -> JSON:
    name = service_account_name(job.name)
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": metadata(job, name, "rbac"),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": job.namespace}],
    }
