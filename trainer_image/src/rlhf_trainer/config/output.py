"""`spec.objectStore` and `spec.output`: the S3-compatible store a job reads and writes, and
where its results go besides the job's storage volume.

On a cluster the final model (`final/`, Hugging Face format), `metrics.jsonl` and the
TensorBoard logs are always written to the job's storage volume (the checkpoint PVC), so they
outlive the pods; `output.uri: s3://<bucket>/<prefix>` uploads them too once training ends, and
the pods' logs (`<job>/logs/`, rlhf_trainer.config.podlogs) under `logs/` after each attempt.
Locally (`rlhf run`) they go to `./runs/<name>/` and are uploaded the same way when asked.
"""

from __future__ import annotations

from pydantic import Field

from .base import ConfigModel
from .locations import S3_SCHEME
from .names import DATA_KEY, DNS_SUBDOMAIN, PATH_MAX


class S3CredentialsRef(ConfigModel):
    """A Secret holding the store's access key pair; the operator maps it to AWS_ACCESS_KEY_ID
    and AWS_SECRET_ACCESS_KEY. Without it the trainer uses the pod's own identity (IRSA,
    Workload Identity) or the environment."""

    name: str = Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)
    access_key_id_key: str = Field(
        "AWS_ACCESS_KEY_ID", min_length=1, max_length=253, pattern=DATA_KEY
    )
    secret_access_key_key: str = Field(
        "AWS_SECRET_ACCESS_KEY", min_length=1, max_length=253, pattern=DATA_KEY
    )


class ObjectStoreConfig(ConfigModel):
    """How to reach the S3-compatible store of every `s3://` location of the job."""

    endpoint_url: str | None = Field(
        None,
        max_length=2048,
        pattern=r"^https?://[^\s]+$",
        description="Endpoint of an S3-compatible store (MinIO, Ceph, GCS...); default: AWS.",
    )
    region: str | None = Field(None, min_length=1, max_length=64, pattern=r"^[a-z0-9][-a-z0-9]*$")
    credentials_secret: S3CredentialsRef | None = Field(
        None, description="Cluster only: the Secret with the access key pair."
    )


class OutputConfig(ConfigModel):
    uri: str | None = Field(
        None,
        max_length=PATH_MAX,
        pattern=rf"^{S3_SCHEME}[a-z0-9][a-z0-9.-]{{1,61}}[a-z0-9](/.*)?$",
        description="s3://<bucket>/<prefix>: upload final/, metrics.jsonl and tensorboard/ "
        "there after training, and the pods' logs under logs/ after each attempt (besides the "
        "job's storage volume).",
    )
