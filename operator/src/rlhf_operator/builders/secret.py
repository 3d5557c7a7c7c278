"""The job's Ray token: a Secret the Ray cluster of every attempt authenticates with.

Ray (2.52+) with `RAY_AUTH_MODE=token` refuses every client (dashboard, job API, GCS, Ray
Client) that does not present the token; KubeRay (1.7) turns it on for a cluster through
`rayClusterSpec.authOptions` and reads the token from the Secret named there, key
`auth_token`, for its own calls to the dashboard. The operator makes one Secret per job, so
that every attempt's cluster, the submitter and the driver share it.

Builders are pure and a token is not: this Secret is rendered without data, and the I/O layer
fills `generated` keys with fresh random values when it creates it, once (create-only, and
`immutable`: re-renders and operator restarts never rotate a running job's token).
"""

from __future__ import annotations

from ..api.v1alpha1 import RLHFJob
from .common import JSON, metadata, ray_token_secret_name

# KubeRay's RAY_AUTH_TOKEN_SECRET_KEY (ray-operator/controllers/ray/utils/constant.go).
RAY_TOKEN_KEY = "auth_token"
RAY_AUTH_MODE_ENV = "RAY_AUTH_MODE"
RAY_AUTH_TOKEN_ENV = "RAY_AUTH_TOKEN"


def build_ray_token_secret(job: RLHFJob) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata(job, ray_token_secret_name(job.name), "ray-token"),
        "type": "Opaque",
        "immutable": True,
    }


def ray_auth_env(job: RLHFJob) -> list[JSON]:
    """What every Ray process of the job (head, workers, their init containers, the
    submitter, the driver) needs to be let in. KubeRay injects the same for the Ray
    containers, but only where the variables are absent, and not into the submitter on every
    version: set here, they are the same everywhere."""
    return [
        {"name": RAY_AUTH_MODE_ENV, "value": "token"},
        {
            "name": RAY_AUTH_TOKEN_ENV,
            "valueFrom": {
                "secretKeyRef": {"name": ray_token_secret_name(job.name), "key": RAY_TOKEN_KEY}
            },
        },
    ]


def auth_options(job: RLHFJob) -> JSON:
    """`rayClusterSpec.authOptions`: token mode with our Secret (KubeRay then generates none)."""
    return {"mode": "token", "secretName": ray_token_secret_name(job.name)}
