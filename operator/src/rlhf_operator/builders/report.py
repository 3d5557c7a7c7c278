"""The trainer's identity and report: a ServiceAccount, a ConfigMap `<job>-report` that the
trainer writes its progress and outcome into, and a Role whose rules let that ServiceAccount
`patch` that one ConfigMap (`resourceNames`), and read (list, watch) the namespace's Events,
of which its head pod keeps the job's with its logs; nothing else.

The trainer cannot change its RLHFJob at all: conditions, phase and retries are decided by the
operator alone, which validates the report before mirroring it into `status.trainer`
(rlhf_trainer.config.report). A compromised trainer can lie only about its own progress.
"""

from __future__ import annotations

from ..api.v1alpha1 import RLHFJob
from .common import JSON, metadata, report_name, service_account_name

RBAC_API = "rbac.authorization.k8s.io"
# The operator watches ConfigMaps with this component label only (handlers/kopf_settings.py).
REPORT_COMPONENT = "report"


def build_service_account(job: RLHFJob) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": metadata(job, service_account_name(job.name), "rbac"),
        # Only the head pod (the driver, which reports) mounts the token: the pod templates
        # of the workers and the submitter turn it off (rayjob.py).
        "automountServiceAccountToken": True,
    }


def build_report(job: RLHFJob) -> JSON:
    """Created empty, once (create-only): from then on its data is the trainer's."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(job, report_name(job.name), REPORT_COMPONENT),
        "data": {},
    }


def build_role(job: RLHFJob) -> JSON:
    return {
        "apiVersion": f"{RBAC_API}/v1",
        "kind": "Role",
        "metadata": metadata(job, service_account_name(job.name), "rbac"),
        "rules": [
            {
                "apiGroups": [""],
                "resources": ["configmaps"],
                "resourceNames": [report_name(job.name)],
                "verbs": ["patch"],
            },
            # The head pod keeps the job's Events on its volume (the logs that outlive the
            # pods): reading Events cannot be narrowed to one object's; it keeps the job's.
            {"apiGroups": [""], "resources": ["events"], "verbs": ["list", "watch"]},
        ],
    }


def build_role_binding(job: RLHFJob) -> JSON:
    name = service_account_name(job.name)
    return {
        "apiVersion": f"{RBAC_API}/v1",
        "kind": "RoleBinding",
        "metadata": metadata(job, name, "rbac"),
        "roleRef": {"apiGroup": RBAC_API, "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": job.namespace}],
    }
