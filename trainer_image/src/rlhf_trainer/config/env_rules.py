"""Which environment variables `spec.env` may set in a job's pods, and how.

`spec.env` reaches every container of the job (head, workers, their init containers, the
submitter): a variable that changes what runs or where it talks would let a manifest take
over the trainer's process or send its ServiceAccount token elsewhere. Such names are refused
by `rlhf validate`, the operator and the CRD (one list, here), with the reason; none is
dropped silently:

- the operator's own variables (it sets them in every pod, from the job and its settings);
- the trainer's and operator's namespace `RLHF_*`, but for the few tuning knobs below;
- what KubeRay and Kubernetes inject to say where the cluster and the API server are;
- what makes the dynamic loader, Python or a shell run other code than the image's.

Credentials are never inline: a name that says it holds one (`*_TOKEN`, `*_PASSWORD`,
`*_SECRET`, `*_API_KEY`, `AWS_SECRET_ACCESS_KEY`, ...) must come from `valueFrom.secretKeyRef`.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from .base import Problem

if TYPE_CHECKING:
    from .job import JobSpec

# Set by the operator in every pod (rlhf_operator/builders/env.py and secret.py).
OPERATOR_ENV = frozenset(
    {
        "RLHF_JOB_NAME",
        "RLHF_JOB_NAMESPACE",
        "RLHF_JOB_UID",
        "RLHF_JOB_ATTEMPT",
        "RLHF_CHECKPOINT_DIR",
        "RLHF_OUTPUT_DIR",
        "RLHF_JOB_REPORT",
        "RLHF_REMOTE_REWARD_TOKEN",
        "RAY_JOB_STOP_WAIT_TIME_S",
        "RAY_AUTH_MODE",
        "RAY_AUTH_TOKEN",
        "HOME",
    }
)
# RLHF_* variables a job may set: how the trainer logs and uses its CPUs, nothing else.
TUNABLE_RLHF_ENV = frozenset(
    {"RLHF_TRACEBACK", "RLHF_VERBOSE", "RLHF_WEIGHT_SYNC", "RLHF_THREADS_PER_RANK"}
)
# Where the Ray cluster and the API server are: KubeRay and the kubelet set these.
LOCATION_ENV = frozenset(
    {
        "RAY_ADDRESS",
        "RAY_IP",
        "RAY_PORT",
        "RAY_CLUSTER_NAME",
        "RAY_CLOUD_INSTANCE_ID",
        "RAY_NODE_TYPE_NAME",
        "RAY_REDIS_ADDRESS",
        "KUBECONFIG",
    }
)
LOCATION_PREFIXES = ("KUBERNETES_", "KUBERAY_")
# What runs: the loader's, Python's and the shells' hooks (KubeRay starts Ray through bash).
RUNTIME_ENV = frozenset(
    {
        "PATH",
        "PYTHONPATH",
        "PYTHONHOME",
        "PYTHONSTARTUP",
        "PYTHONUSERBASE",
        "PYTHONEXECUTABLE",
        "PYTHONBREAKPOINT",
        "PYTHONINSPECT",
        "PYTHONPLATLIBDIR",
        "PYTHONSAFEPATH",
        "PYTHONNOUSERSITE",
        "BASH_ENV",
        "ENV",
        "SHELLOPTS",
        "BASHOPTS",
        "IFS",
        "PS4",
        "GLOBIGNORE",
        "CDPATH",
    }
)
RUNTIME_PREFIXES = ("LD_", "BASH_FUNC_")
# Credentials the operator fills from spec fields (Secret references).
CREDENTIAL_ENV_VARS = {
    "HF_TOKEN": "spec.secrets.hfToken",
    "HUGGING_FACE_HUB_TOKEN": "spec.secrets.hfToken",
    "WANDB_API_KEY": "spec.secrets.wandbApiKey",
    "AWS_ACCESS_KEY_ID": "spec.objectStore.credentialsSecret",
    "AWS_SECRET_ACCESS_KEY": "spec.objectStore.credentialsSecret",
    "AWS_SESSION_TOKEN": "valueFrom.secretKeyRef",
}
# RE2 and Python alike (the CRD's CEL rule uses it too).
CREDENTIAL_PATTERN = (
    r"(?i)(^|_)(TOKEN|PASSWORD|PASSWD|SECRET|API_KEY|SECRET_KEY|ACCESS_KEY|PRIVATE_KEY"
    r"|CREDENTIALS)$"
)
_CREDENTIAL_NAME = re.compile(CREDENTIAL_PATTERN)


RESERVED_NAMES = OPERATOR_ENV | LOCATION_ENV | RUNTIME_ENV
RESERVED_PREFIXES = LOCATION_PREFIXES + RUNTIME_PREFIXES


def reserved_reason(name: str) -> str | None:
    """Why a job may not set this variable at all (any source), or None."""
    if name in OPERATOR_ENV:
        return "set by the operator in every pod of the job; a job cannot set it"
    if name.startswith("RLHF_") and name not in TUNABLE_RLHF_ENV:
        return (
            "reserved for the trainer and the operator (a job may set only "
            f"{', '.join(sorted(TUNABLE_RLHF_ENV))})"
        )
    if name in LOCATION_ENV or name.startswith(LOCATION_PREFIXES):
        return (
            "says where the Ray cluster or the API server is; KubeRay and Kubernetes set it, "
            "and a job that changed it would send its tokens elsewhere"
        )
    if name in RUNTIME_ENV or name.startswith(RUNTIME_PREFIXES):
        return (
            "changes which code the pods' processes run (the loader, Python or the shell); "
            "put such settings in the image"
        )
    return None


def is_credential(name: str) -> bool:
    """A name that says it holds a credential: its value must come from a Secret."""
    return name in CREDENTIAL_ENV_VARS or bool(_CREDENTIAL_NAME.search(name))


def inline_credential_reason(name: str) -> str:
    where = CREDENTIAL_ENV_VARS.get(name)
    by = f"{where} or valueFrom.secretKeyRef" if where else "valueFrom.secretKeyRef"
    return f"{name} holds a credential and must not be inlined: reference a Secret with {by}"


def env_problems(spec: JobSpec) -> list[Problem]:
    """`spec.env` against the rest of the spec: each name once (the CRD says it too, a list
    map keyed by name), and none the operator sets from another field."""
    from_spec: dict[str, str] = {}
    if spec.secrets.hf_token is not None:
        from_spec |= {"HF_TOKEN": "secrets.hfToken", "HUGGING_FACE_HUB_TOKEN": "secrets.hfToken"}
    if spec.secrets.wandb_api_key is not None:
        from_spec["WANDB_API_KEY"] = "secrets.wandbApiKey"
    if spec.object_store is not None and spec.object_store.credentials_secret is not None:
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            from_spec[name] = "objectStore.credentialsSecret"
    problems: list[Problem] = []
    first: dict[str, int] = {}
    for i, var in enumerate(spec.env):
        if var.name in first:
            problems.append(
                Problem(f"env[{i}].name", f"{var.name} is set twice (env[{first[var.name]}])")
            )
        first.setdefault(var.name, i)
        if var.name in from_spec:
            problems.append(
                Problem(
                    f"env[{i}].name", f"{var.name} is set by {from_spec[var.name]}: set it once"
                )
            )
    return problems
