"""Prometheus metrics: RLHFJobs by phase, GPU time per job, reconcile durations and errors,
API requests.

One registry per operator instance (tests run several in a process). Jobs by phase and GPU time
per job are read at scrape time from the operator's watch cache: they cost no API request.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from pydantic import ValidationError

from ..api.v1alpha1 import Phase, Usage
from ..reconcile.usage import allocated_now

RECONCILE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class _JobsByPhase(Collector):
    def __init__(self, jobs: Callable[[], Iterable[Mapping[str, Any]]]) -> None:
        self._jobs = jobs

    def collect(self) -> Iterator[GaugeMetricFamily]:
        counts = Tally(
            str((job.get("status") or {}).get("phase") or "Pending") for job in self._jobs()
        )
        family = GaugeMetricFamily(
            "rlhf_operator_jobs", "RLHFJobs seen by the operator, by phase", labels=["phase"]
        )
        for phase in Phase:
            family.add_metric([phase.value], counts.get(phase.value, 0))
        yield family


class _JobUsage(Collector):
    """`status.usage` of every job, by namespace and job; GPU-seconds allocated include the
    current Running interval up to the scrape."""

    def __init__(
        self, jobs: Callable[[], Iterable[Mapping[str, Any]]], clock: Callable[[], datetime]
    ) -> None:
        self._jobs = jobs
        self._clock = clock

    def collect(self) -> Iterator[Metric]:
        labels = ["namespace", "job"]
        allocated = CounterMetricFamily(
            "rlhf_operator_job_gpu_seconds_allocated",
            "GPU-seconds allocated to an RLHFJob while Running, across its attempts",
            labels=labels,
        )
        lost = CounterMetricFamily(
            "rlhf_operator_job_gpu_seconds_lost",
            "GPU-seconds of training an RLHFJob lost to failed attempts (since their last "
            "checkpoint)",
            labels=labels,
        )
        attempts = GaugeMetricFamily(
            "rlhf_operator_job_attempts", "RayJobs created for an RLHFJob", labels=labels
        )
        now = self._clock()
        for job in self._jobs():
            status = job.get("status") or {}
            try:
                usage = Usage.model_validate(status.get("usage") or {})
            except ValidationError:
                continue  # not ours to judge here: the next reconcile rewrites it
            meta = job.get("metadata") or {}
            key = [str(meta.get("namespace", "")), str(meta.get("name", ""))]
            gpus = int(status.get("totalGpus") or 0)
            allocated.add_metric(key, allocated_now(usage, gpus, now))
            lost.add_metric(key, usage.gpu_seconds_lost)
            attempts.add_metric(key, usage.attempts)
        yield from (allocated, lost, attempts)


class Metrics:
    def __init__(
        self,
        jobs: Callable[[], Iterable[Mapping[str, Any]]] = list,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(_JobsByPhase(jobs))
        self.registry.register(_JobUsage(jobs, clock))
        self.reconcile_seconds = Histogram(
            "rlhf_operator_reconcile_duration_seconds",
            "Time of one reconcile pass of an RLHFJob, by what triggered it",
            ["trigger"],
            buckets=RECONCILE_BUCKETS,
            registry=self.registry,
        )
        self.reconcile_errors = Counter(
            "rlhf_operator_reconcile_errors_total",
            "Reconcile passes that failed, by trigger and kind of error",
            ["trigger", "error"],
            registry=self.registry,
        )
        self.api_requests = Counter(
            "rlhf_operator_api_requests_total",
            "Requests the operator made to the API server (kopf's own not included)",
            ["verb", "kind", "code"],
            registry=self.registry,
        )
        self.children = Counter(
            "rlhf_operator_children_applied_total",
            "Children applied, by kind and outcome (created, updated, unchanged, conflict, "
            "refused)",
            ["kind", "outcome"],
            registry=self.registry,
        )

    def on_request(self, verb: str, kind: str, code: int) -> None:
        self.api_requests.labels(verb, kind, str(code)).inc()

    def serve(self, port: int) -> None:
        """Expose /metrics on `port` (0: not at all) from a daemon thread."""
        if port:
            start_http_server(port, registry=self.registry)
