"""Prometheus metrics: RLHFJobs by phase, reconcile durations and errors, API requests.

One registry per operator instance (tests run several in a process). Jobs by phase is read at
scrape time from the operator's watch cache: counting costs no API request.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from .api.v1alpha1 import Phase

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


class Metrics:
    def __init__(self, jobs: Callable[[], Iterable[Mapping[str, Any]]] = list) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(_JobsByPhase(jobs))
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
            "Children applied, by kind and outcome (created, updated, adopted, conflict)",
            ["kind", "outcome"],
            registry=self.registry,
        )

    def on_request(self, verb: str, kind: str, code: int) -> None:
        self.api_requests.labels(verb, kind, str(code)).inc()

    def serve(self, port: int) -> None:
        """Expose /metrics on `port` (0: not at all) from a daemon thread."""
        if port:
            start_http_server(port, registry=self.registry)
