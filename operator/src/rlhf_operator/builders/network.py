"""The job's NetworkPolicy: only the job's own pods reach its Ray ports.

A Ray cluster listens on many ports (GCS 6379, dashboard and job API 8265, Ray Client 10001,
and the raylets', object managers' and workers' ports, some chosen at random), and whoever
reaches them can run code as the trainer. The policy selects every pod of the job (head,
workers, submitter: all carry `rlhf.dev/job`, across attempts) and lets in only:

- the job's own pods, on every port (Ray's inner traffic; simpler and as tight as listing
  ports, since nothing else is let in);
- KubeRay's operator, on the dashboard port only: it polls the job's status there (and
  authenticates with the job's Ray token). From `kuberay_namespace` when the platform set
  it, else from any namespace (the token still guards the port).

Egress is open by default: jobs download models and data. `spec.network.egress: restricted`
allows only DNS, the job's own pods, the Kubernetes API (`api_server_cidrs`: the trainer's
report) and the job's `egressCidrs`.

The policy is enforced only where the cluster's network plugin implements NetworkPolicy.
"""

from __future__ import annotations

from rlhf_trainer.config import EgressPolicy

from ..api.v1alpha1 import RLHFJob
from ..settings import OperatorSettings
from .common import JOB_LABEL, JSON, metadata, network_policy_name

DASHBOARD_PORT = 8265
API_SERVER_PORTS = (443, 6443)
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


def _tcp(port: int) -> JSON:
    return {"protocol": "TCP", "port": port}


def _job_pods(job: RLHFJob) -> JSON:
    return {"podSelector": {"matchLabels": {JOB_LABEL: job.name}}}


def _kuberay(settings: OperatorSettings) -> JSON:
    if settings.kuberay_namespace is None:
        return {"namespaceSelector": {}}
    return {
        "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: settings.kuberay_namespace}}
    }


def _egress(job: RLHFJob, settings: OperatorSettings) -> list[JSON]:
    dns = [{"protocol": proto, "port": 53} for proto in ("UDP", "TCP")]
    rules: list[JSON] = [
        {"to": [_job_pods(job)]},
        {"ports": dns},
    ]
    if settings.api_server_cidrs:
        rules.append(
            {
                "to": [{"ipBlock": {"cidr": cidr}} for cidr in settings.api_server_cidrs],
                "ports": [_tcp(port) for port in API_SERVER_PORTS],
            }
        )
    cidrs = job.spec.network.egress_cidrs
    if cidrs:
        rules.append({"to": [{"ipBlock": {"cidr": cidr}} for cidr in cidrs]})
    return rules


def build_network_policy(job: RLHFJob, settings: OperatorSettings) -> JSON:
    restricted = job.spec.network.egress is EgressPolicy.RESTRICTED
    spec: JSON = {
        "podSelector": {"matchLabels": {JOB_LABEL: job.name}},
        "policyTypes": ["Ingress", "Egress"] if restricted else ["Ingress"],
        "ingress": [
            {"from": [_job_pods(job)]},
            {"from": [_kuberay(settings)], "ports": [_tcp(DASHBOARD_PORT)]},
        ],
    }
    if restricted:
        spec["egress"] = _egress(job, settings)
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(job, network_policy_name(job.name), "network"),
        "spec": spec,
    }
