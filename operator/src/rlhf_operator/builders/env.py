"""The trainer's environment in every pod of a job (pure): the user's `spec.env`, credentials
by Secret reference, and what the operator tells the trainer about the run."""

from __future__ import annotations

from rlhf_trainer.config.checkpoint import JOB_UID_ENV
from rlhf_trainer.config.models import REMOTE_REWARD_TOKEN_ENV
from rlhf_trainer.config.report import REPORT_ENV

from ..api.v1alpha1 import RLHFJob
from .common import JSON, report_name
from .secret import ray_auth_env
from .volumes import HOME_DIR, checkpoint_dir, output_dir


def _secret(name: str, ref: JSON) -> JSON:
    return {"name": name, "valueFrom": {"secretKeyRef": ref}}


def trainer_env(job: RLHFJob, attempt: int) -> list[JSON]:
    spec = job.spec
    # spec.env cannot name what the operator sets below (rlhf_trainer.config.env_rules).
    env: list[JSON] = [e.to_manifest() for e in spec.env]
    secrets = spec.secrets
    for var, ref in (("HF_TOKEN", secrets.hf_token), ("WANDB_API_KEY", secrets.wandb_api_key)):
        if ref is not None:
            env.append(_secret(var, ref.to_manifest()))
    store = spec.object_store
    if store is not None and store.credentials_secret is not None:
        creds = store.credentials_secret
        env.append(
            _secret("AWS_ACCESS_KEY_ID", {"name": creds.name, "key": creds.access_key_id_key})
        )
        env.append(
            _secret(
                "AWS_SECRET_ACCESS_KEY", {"name": creds.name, "key": creds.secret_access_key_key}
            )
        )
    remote = spec.models.remote_reward
    if remote is not None and remote.auth_secret is not None:
        env.append(_secret(REMOTE_REWARD_TOKEN_ENV, remote.auth_secret.to_manifest()))
    env += [
        {"name": "RLHF_JOB_NAME", "value": job.name},
        {"name": "RLHF_JOB_NAMESPACE", "value": job.namespace},
        # Recorded in every checkpoint: a job created again under this name gets another UID
        # and the same storage, and must not resume this one's checkpoints.
        {"name": JOB_UID_ENV, "value": str(job.metadata.get("uid", ""))},
        {"name": "RLHF_JOB_ATTEMPT", "value": str(attempt)},
        {"name": "RLHF_CHECKPOINT_DIR", "value": checkpoint_dir(job)},
        {"name": "RLHF_OUTPUT_DIR", "value": output_dir(job)},
        {"name": REPORT_ENV, "value": report_name(job.name)},
        # The writable home of the read-only image (an emptyDir, volumes.scratch).
        {"name": "HOME", "value": HOME_DIR},
        # Ray's job supervisor (on the head) sends SIGTERM when a job is stopped, then SIGKILL
        # after this many seconds (default 3): the trainer needs the pods' whole grace period
        # to checkpoint the last finished step.
        {
            "name": "RAY_JOB_STOP_WAIT_TIME_S",
            "value": str(spec.run_policy.checkpoint_on_preemption_seconds),
        },
        *ray_auth_env(job),
    ]
    return env
