"""Operator configuration: read once from the environment (the Helm chart sets it), immutable.

Pure data: the pure modules (builders, status) read it. How it maps onto kopf's own settings
lives in `handlers/kopf_settings.py`, beside the other kopf-facing code.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from pydantic import TypeAdapter, ValidationError

from rlhf_trainer.config.cluster import Cidr
from rlhf_trainer.config.names import DNS_LABEL, STORAGE_QUANTITY

from .api.v1alpha1 import GROUP

OPERATOR_NAME = "rlhf-operator"
FINALIZER = f"{GROUP}/finalizer"
ANNOTATION_PREFIX = GROUP
# kopf's diff-base annotation (the last handled spec, as JSON): kopf's alone.
DIFF_BASE_KEY = "last-handled-configuration"
ENV_PREFIX = "RLHF_OPERATOR_"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")

_Getter = Callable[[str], "str | None"]


class SettingsError(ValueError):
    """A setting has a value we cannot use; the message names the environment variable."""


@dataclass(frozen=True)
class PlatformPolicy:
    """What the platform team allows jobs to ask for (Helm values `policy.*`). Empty means no
    restriction; `policy.check` turns a job that breaks it into Valid=False naming the field."""

    # spec.image must start with one of these (a registry or repository prefix; matched at a
    # path boundary, so `ghcr.io/org` does not admit `ghcr.io/org-evil/x`).
    allowed_image_prefixes: tuple[str, ...] = ()
    allowed_priority_classes: tuple[str, ...] = ()
    allowed_scheduler_names: tuple[str, ...] = ()
    # spec.placement.nodeSelector keys a job may set.
    allowed_node_selector_keys: tuple[str, ...] = ()
    # Merged into every pod's nodeSelector; a job may not set these keys to other values.
    node_selector: tuple[tuple[str, str], ...] = ()
    # Every job must name a Kueue LocalQueue (spec.placement.queueName).
    require_queue_name: bool = False


@dataclass(frozen=True)
class OperatorSettings:
    # Namespaces served; empty means the whole cluster.
    namespaces: tuple[str, ...] = ()
    # Trainer image used when an RLHFJob has no spec.image.
    default_trainer_image: str | None = None
    # Size of the storage PVC created for an RLHFJob without spec.checkpoint.storage.
    default_storage_size: str = "50Gi"
    # Prometheus /metrics; 0 disables it.
    metrics_port: int = 8080
    # kopf's liveness endpoint is served at http://0.0.0.0:<health_port>/healthz; 0 disables.
    health_port: int = 8081
    # kopf peering object name: with two replicas, one pauses while the other works.
    # Empty: standalone (one replica).
    peering: str | None = None
    peering_priority: int | None = None
    log_level: str = "INFO"
    # Ray version the trainer image ships; KubeRay uses it to pick features.
    ray_version: str = "2.60.0"
    # How long to wait before re-checking a job that waits for something (a referenced
    # ConfigMap or PVC, a child in someone else's way). The pods of a starting attempt need
    # no re-check: they are watched.
    dependency_retry_seconds: float = 30.0
    # How long a new job's first status waits for KubeRay's first word on its RayJob
    # (controllers/first_status.py): where KubeRay is slow or down, the job says so then.
    first_status_grace_seconds: float = 5.0
    # After a failed request: the first retry waits api_retry_seconds, each further one twice
    # as long, up to retry_max_seconds; a success starts over.
    api_retry_seconds: float = 5.0
    retry_max_seconds: float = 300.0
    # Watch timeouts: the server closes each watch after ~server_timeout; the client gives
    # up on a silent connection after client_timeout and reconnects.
    watch_server_timeout: float = 270.0
    watch_client_timeout: float = 300.0
    watch_connect_timeout: float = 30.0
    # kopf's workers: how many objects are handled at once (None: one worker per object with
    # events, kopf's default). A bound keeps a burst of thousands of new jobs from holding
    # thousands of passes in memory at once; see docs/scale.md.
    worker_limit: int | None = None
    # How long a kopf worker waits for its object's next event before it exits (kopf's
    # `queueing.idle_timeout`, 5 s by default). Each worker holds a task, a queue and the
    # object's last event while it waits: with kopf's 5 s, a burst of thousands of jobs kept
    # a worker for each of them and each of their children at once, and the memory it took
    # stayed with the process (the operator's RSS at 2,000 jobs 240-260 MB, 180 with 0.5 s).
    # An event after it starts a new worker: microseconds.
    worker_idle_seconds: float = 0.5
    # Reconcile passes in progress at once (the others wait their turn, first come first
    # served, before parsing anything): a pass holds its parsed job and rendered children
    # until its requests return, so a burst of thousands of new jobs would otherwise hold
    # thousands of them; the CPU is the bound either way, so the burst takes no longer,
    # and each job is done sooner (its pass is not interleaved with all the others'). 16,
    # not 32: a burst of 500 beside 5,000 jobs, p50 create -> RayJob 2.04 -> 1.76-1.85 s
    # (8: 1.80-1.85 s), the CPU a job the same. Not measured, reckoned: a pass makes two
    # round trips, so 16 passes keep up with the CPU's ~110 jobs a second (~9 ms each) until
    # a request takes ~70 ms (16 / (2 x 0.07 s) = 114 passes a second).
    pass_limit: int = 16
    # The operator's own requests (children, status, events; not kopf's watches): at most
    # client_qps a second on average, client_burst at once. 0: no client-side limit.
    client_qps: float = 0.0
    client_burst: int = 0
    # What jobs may ask for (images, priority classes, schedulers, node selectors, queues).
    policy: PlatformPolicy = field(default_factory=PlatformPolicy)
    # The namespace of the KubeRay operator, which polls every job's Ray dashboard (8265):
    # the only pods outside a job that its NetworkPolicy lets in. None: any namespace may
    # reach the dashboard port (still behind the job's Ray token).
    kuberay_namespace: str | None = None
    # The Kubernetes API server's addresses, for jobs with `spec.network.egress: restricted`
    # (the trainer reports through the API). Empty: such jobs are refused (Valid=False).
    api_server_cidrs: tuple[str, ...] = ()
    # Identity in posted Events (reportingInstance): the pod name in a cluster.
    instance: str = field(default_factory=lambda: os.environ.get("HOSTNAME", "local"))

    @property
    def clusterwide(self) -> bool:
        return not self.namespaces

    def retry_delay(self, failures: int) -> float:
        """Seconds to wait after `failures` failures in a row (1 or more)."""
        doublings = min(max(failures, 1) - 1, 30)  # bounded: 2**30 x anything exceeds the cap
        return min(self.retry_max_seconds, self.api_retry_seconds * 2.0**doublings)

    @property
    def liveness_endpoint(self) -> str:
        return f"http://0.0.0.0:{self.health_port}/healthz"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> OperatorSettings:
        env = os.environ if env is None else env

        def get(name: str) -> str | None:
            value = env.get(ENV_PREFIX + name, "").strip()
            return value or None

        namespaces = tuple(n.strip() for n in (get("NAMESPACES") or "").split(",") if n.strip())
        log_level = (get("LOG_LEVEL") or "INFO").upper()
        if log_level not in LOG_LEVELS:
            raise SettingsError(
                f"{ENV_PREFIX}LOG_LEVEL: must be one of {', '.join(LOG_LEVELS)} (got {log_level!r})"
            )
        defaults = cls()
        return cls(
            namespaces=namespaces,
            default_trainer_image=get("DEFAULT_TRAINER_IMAGE"),
            default_storage_size=_quantity(
                get, "DEFAULT_STORAGE_SIZE", defaults.default_storage_size
            ),
            metrics_port=_port(get, "METRICS_PORT", defaults.metrics_port),
            health_port=_port(get, "HEALTH_PORT", defaults.health_port),
            peering=get("PEERING"),
            peering_priority=_int(get, "PEERING_PRIORITY", None),
            log_level=log_level,
            ray_version=get("RAY_VERSION") or defaults.ray_version,
            dependency_retry_seconds=_seconds(
                get, "DEPENDENCY_RETRY_SECONDS", defaults.dependency_retry_seconds
            ),
            first_status_grace_seconds=_seconds(
                get, "FIRST_STATUS_GRACE_SECONDS", defaults.first_status_grace_seconds
            ),
            api_retry_seconds=_seconds(get, "API_RETRY_SECONDS", defaults.api_retry_seconds),
            retry_max_seconds=_seconds(get, "RETRY_MAX_SECONDS", defaults.retry_max_seconds),
            watch_server_timeout=_seconds(
                get, "WATCH_SERVER_TIMEOUT", defaults.watch_server_timeout
            ),
            watch_client_timeout=_seconds(
                get, "WATCH_CLIENT_TIMEOUT", defaults.watch_client_timeout
            ),
            worker_limit=_count(get, "WORKER_LIMIT"),
            worker_idle_seconds=_seconds(get, "WORKER_IDLE_SECONDS", defaults.worker_idle_seconds),
            pass_limit=_count(get, "PASS_LIMIT") or defaults.pass_limit,
            client_qps=_rate(get, "CLIENT_QPS"),
            client_burst=_count(get, "CLIENT_BURST") or 0,
            policy=PlatformPolicy(
                allowed_image_prefixes=_list(get, "ALLOWED_IMAGE_PREFIXES"),
                allowed_priority_classes=_list(get, "ALLOWED_PRIORITY_CLASSES"),
                allowed_scheduler_names=_list(get, "ALLOWED_SCHEDULER_NAMES"),
                allowed_node_selector_keys=_list(get, "ALLOWED_NODE_SELECTOR_KEYS"),
                node_selector=_pairs(get, "NODE_SELECTOR"),
                require_queue_name=_bool(get, "REQUIRE_QUEUE_NAME"),
            ),
            kuberay_namespace=_name(get, "KUBERAY_NAMESPACE"),
            api_server_cidrs=_cidrs(get, "API_SERVER_CIDRS"),
        )


def _quantity(get: _Getter, name: str, default: str) -> str:
    raw = get(name)
    if raw is None:
        return default
    if not re.fullmatch(STORAGE_QUANTITY, raw):
        raise SettingsError(
            f"{ENV_PREFIX}{name}: must be a storage quantity such as 50Gi (got {raw!r})"
        )
    return raw


def _int(get: _Getter, name: str, default: int | None) -> int | None:
    raw = get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise SettingsError(f"{ENV_PREFIX}{name}: must be an integer (got {raw!r})") from None


def _port(get: _Getter, name: str, default: int) -> int:
    value = _int(get, name, default)
    if value is None or not 0 <= value <= 65535:
        raise SettingsError(
            f"{ENV_PREFIX}{name}: must be a TCP port 1..65535, or 0 to disable (got {value})"
        )
    return value


def _seconds(get: _Getter, name: str, default: float) -> float:
    raw = get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(
            f"{ENV_PREFIX}{name}: must be a number of seconds (got {raw!r})"
        ) from None
    if value <= 0:
        raise SettingsError(f"{ENV_PREFIX}{name}: must be > 0 (got {raw!r})")
    return value


def _count(get: _Getter, name: str) -> int | None:
    """A positive integer, or None when unset."""
    value = _int(get, name, None)
    if value is not None and value < 1:
        raise SettingsError(f"{ENV_PREFIX}{name}: must be a positive integer (got {value})")
    return value


def _rate(get: _Getter, name: str) -> float:
    """Requests per second; unset or 0 means no limit."""
    raw = get(name)
    if raw is None or raw == "0":
        return 0.0
    return _seconds(get, name, 0.0)


def _list(get: _Getter, name: str) -> tuple[str, ...]:
    """A comma-separated list (blanks dropped)."""
    return tuple(item.strip() for item in (get(name) or "").split(",") if item.strip())


def _pairs(get: _Getter, name: str) -> tuple[tuple[str, str], ...]:
    """`key=value,key2=value2` (a node selector)."""
    pairs = []
    for item in _list(get, name):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SettingsError(
                f"{ENV_PREFIX}{name}: must be key=value pairs separated by commas (got {item!r})"
            )
        pairs.append((key.strip(), value.strip()))
    return tuple(pairs)


def _bool(get: _Getter, name: str) -> bool:
    raw = (get(name) or "false").lower()
    if raw not in {"true", "false"}:
        raise SettingsError(f"{ENV_PREFIX}{name}: must be true or false (got {raw!r})")
    return raw == "true"


def _name(get: _Getter, name: str) -> str | None:
    raw = get(name)
    if raw is not None and not re.fullmatch(DNS_LABEL, raw):
        raise SettingsError(f"{ENV_PREFIX}{name}: must be a namespace name (got {raw!r})")
    return raw


_CIDR = TypeAdapter(Cidr)


def _cidrs(get: _Getter, name: str) -> tuple[str, ...]:
    found = []
    for item in _list(get, name):
        try:
            found.append(_CIDR.validate_python(item))
        except ValidationError:
            raise SettingsError(
                f"{ENV_PREFIX}{name}: must be CIDRs such as 10.0.0.1/32 (got {item!r})"
            ) from None
    return tuple(found)
