"""Start the operator: the kube client, the controller, metrics, kopf with our settings."""

from __future__ import annotations

import asyncio
import logging
import threading

import kopf

from ..controllers.jobs import Controller
from ..controllers.metrics import Metrics
from ..controllers.pipelines import PipelineController
from ..kube.client import KubeApi, login
from ..kube.throttle import TokenBucket
from ..settings import OperatorSettings
from .collector import IdleCollector, tune_gc
from .jobs import JOBS_INDEX, register
from .kopf_json import decode_watch_streams_with_orjson
from .kopf_spawn import spawn_workers_without_pause
from .kopf_views import unlink_kopf_views
from .pipelines import register_pipelines


def throttle(settings: OperatorSettings) -> TokenBucket | None:
    """The client-side rate limit, when one is set (burst: twice the rate by default)."""
    if settings.client_qps <= 0:
        return None
    burst = settings.client_burst or max(1, int(2 * settings.client_qps))
    return TokenBucket(settings.client_qps, burst)


def build(settings: OperatorSettings) -> tuple[kopf.OperatorRegistry, Controller]:
    """A fresh registry wired to a fresh controller (several can live in one process)."""
    decode_watch_streams_with_orjson()
    spawn_workers_without_pause()
    unlink_kopf_views()
    controller_ref: list[Controller] = []
    metrics = Metrics(jobs=lambda: controller_ref[0].job_bodies() if controller_ref else [])
    api = KubeApi(login, on_request=metrics.on_request, throttle=throttle(settings))
    controller = Controller(settings, api, metrics)
    controller_ref.append(controller)
    registry = kopf.OperatorRegistry()
    register(registry, controller, settings)
    register_pipelines(registry, PipelineController(settings, api), settings, JOBS_INDEX)
    return registry, controller


def _operator_kwargs(settings: OperatorSettings) -> dict[str, object]:
    return {
        "clusterwide": settings.clusterwide,
        "namespaces": list(settings.namespaces),
        "standalone": settings.peering is None,
        "peering_name": settings.peering,
        "liveness_endpoint": settings.liveness_endpoint if settings.health_port else None,
    }


async def run_operator(
    settings: OperatorSettings,
    *,
    stop_flag: asyncio.Event | None = None,
    ready_flag: asyncio.Event | None = None,
) -> None:
    """Run in the current event loop until `stop_flag` is set (tests, benchmarks). The host
    process's garbage collector is its own business: only `main` tunes it."""
    registry, controller = build(settings)
    controller.metrics.serve(settings.metrics_port)
    await kopf.operator(
        registry=registry,
        stop_flag=stop_flag,
        ready_flag=ready_flag,
        **_operator_kwargs(settings),  # type: ignore[arg-type]
    )


def configure_logging(level: str) -> None:
    kopf.configure(debug=level == "DEBUG", quiet=level in {"WARNING", "ERROR"})
    logging.getLogger().setLevel(level)


def main(settings: OperatorSettings) -> int:
    """`rlhf-operator run`: blocks until SIGTERM/SIGINT (kopf handles the signals)."""
    configure_logging(settings.log_level)
    registry, controller = build(settings)
    controller.metrics.serve(settings.metrics_port)
    tune_gc()  # everything the operator imports is loaded by now
    controller.when_idle.append(IdleCollector(controller.passes_idle).soon)
    assert threading.current_thread() is threading.main_thread()
    kopf.run(registry=registry, **_operator_kwargs(settings))  # type: ignore[arg-type]
    return 0
