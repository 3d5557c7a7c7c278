"""The Kubernetes-only parts of an RLHFJob spec: image, environment, secrets, run policy, network.

They live beside the job config (not in the operator) so that `rlhf validate` checks a whole
manifest with the very models the operator uses; the trainer ignores them."""

from __future__ import annotations

import ipaddress
from enum import StrEnum
from typing import Annotated, Self

from pydantic import AfterValidator, Field, StringConstraints, field_validator, model_validator

from .base import ConfigModel, Problem, raise_problems
from .env_rules import inline_credential_reason, is_credential, reserved_reason
from .guardrails import Guardrails
from .names import CIDR, ENV_NAME
from .refs import ConfigMapKeyRef, SecretKeyRef

__all__ = ["ConfigMapKeyRef", "SecretKeyRef"]

# Bounds that keep every rendered object within Kubernetes' size limits (see sizes.py).
ENV_MAX_ITEMS = 128
ENV_VALUE_MAX_LENGTH = 32768


class EnvVarSource(ConfigModel):
    secret_key_ref: SecretKeyRef | None = None
    config_map_key_ref: ConfigMapKeyRef | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> Self:
        if (self.secret_key_ref is None) == (self.config_map_key_ref is None):
            raise ValueError("set exactly one of secretKeyRef or configMapKeyRef")
        return self


class EnvVar(ConfigModel):
    """One variable of every container; reserved names refused, credentials by Secret only."""

    name: str = Field(min_length=1, max_length=128, pattern=ENV_NAME)
    value: str | None = Field(None, max_length=ENV_VALUE_MAX_LENGTH)
    value_from: EnvVarSource | None = None

    @field_validator("name")
    @classmethod
    def _not_reserved(cls, name: str) -> str:
        reason = reserved_reason(name)
        if reason is not None:
            raise ValueError(f"{name}: {reason}")
        return name

    @model_validator(mode="after")
    def _value_or_ref(self) -> Self:
        if self.value is not None and self.value_from is not None:
            raise ValueError("set value or valueFrom, not both")
        secret = self.value_from is not None and self.value_from.secret_key_ref is not None
        if is_credential(self.name) and not secret:
            where = "value" if self.value is not None else "valueFrom"
            raise_problems([Problem(where, inline_credential_reason(self.name))])
        return self


class SecretRefs(ConfigModel):
    """Credentials by reference only; the operator maps them to environment variables."""

    hf_token: SecretKeyRef | None = Field(None, description="-> HF_TOKEN")
    wandb_api_key: SecretKeyRef | None = Field(None, description="-> WANDB_API_KEY")


class PullPolicy(StrEnum):
    ALWAYS = "Always"
    IF_NOT_PRESENT = "IfNotPresent"
    NEVER = "Never"


class RunPolicy(ConfigModel):
    suspend: bool = Field(False, description="Suspend: free the GPUs; resume from a checkpoint.")
    backoff_limit: int = Field(
        3, ge=0, le=100, description="Retries after a failure, each resuming from a checkpoint."
    )
    active_deadline_seconds: int | None = Field(None, gt=0)
    ttl_seconds_after_finished: int | None = Field(None, ge=0)
    startup_timeout_seconds: int = Field(
        1800,
        gt=0,
        description="Pods not all running this long after the RayJob is created: the job's "
        "conditions say why (unschedulable, image pull, a missing Secret).",
    )
    checkpoint_on_preemption_seconds: int = Field(
        300,
        ge=0,
        le=86400,
        description="Grace the pods get after SIGTERM (node drain, eviction) to checkpoint the "
        "last finished step; the pods' terminationGracePeriodSeconds.",
    )
    guardrails: Guardrails = Field(
        default_factory=Guardrails,
        description="Training-health checks after every step; a trip checkpoints, then "
        "suspends (default) or fails the job.",
    )


class EgressPolicy(StrEnum):
    # Model and data downloads (Hugging Face, object stores, pip) need the internet.
    OPEN = "open"
    # DNS, the job's own pods, the Kubernetes API (the trainer's report) and egressCidrs only.
    RESTRICTED = "restricted"


def _network(value: str) -> str:
    """A CIDR that the NetworkPolicy API takes as written (host bits zero)."""
    try:
        network = ipaddress.ip_network(value, strict=True)
    except ValueError as err:
        raise ValueError(f"not a CIDR such as 10.0.0.0/8: {err}") from None
    return str(network)


Cidr = Annotated[str, StringConstraints(pattern=CIDR, max_length=43), AfterValidator(_network)]


class NetworkConfig(ConfigModel):
    """Who the job's pods may talk to (ingress: only the job's own pods, and KubeRay)."""

    # Ingress is always closed to everything but the job's own pods (and KubeRay's operator,
    # for the dashboard): the operator's NetworkPolicy. Egress is open unless restricted.

    egress: EgressPolicy = Field(
        EgressPolicy.OPEN,
        description="open (default): the pods may reach anything (model and data downloads); "
        "restricted: only DNS, the job's own pods, the Kubernetes API and egressCidrs.",
    )
    egress_cidrs: list[Cidr] = Field(
        default_factory=list,
        max_length=64,
        description="With egress: restricted, further destinations the pods may reach (e.g. "
        "an object store or a model mirror), any port.",
    )

    @model_validator(mode="after")
    def _cidrs_need_restricted(self) -> Self:
        if self.egress_cidrs and self.egress is not EgressPolicy.RESTRICTED:
            raise ValueError("egressCidrs only apply with egress: restricted (open allows all)")
        return self
