"""kopf handlers: thin adapters from kopf's triggers to the `Controller`'s passes.

Level-based: whatever happened (an RLHFJob created, edited, found at an operator's start, any
change to it, to one of its RayJobs, to its trainer's report or to one of its pods), the same
pass runs for that job, queued as a task of its own (`Controller.enqueue`): a handler returns
at once, and events that come before the pass starts share it. Four kopf indexes are the
watch caches: RLHFJobs by (namespace, name), RayJobs, report ConfigMaps and pods by
(namespace, rlhf.dev/job); kopf fills them before any handler runs, so a restarted operator
sees every child it made before it decides anything. The API server filters the RayJob,
ConfigMap and pod watches by label (handlers/kopf_settings.py): the operator never receives
the namespace's other objects. Pods are indexed as what the start-up diagnosis reads of them
(attempt, phase, troubles), not whole, and RLHFJobs with their spec and status packed
(controllers/stored.py).

RLHFJobs have event handlers only, no `on.create`/`on.update`/`on.resume`: those make kopf keep
a diff-base of each job in an annotation, one PATCH per job and spec change (and their handler
runs again on each event until that patch is seen), for a change detection the pass does
itself (`Controller.nothing_new`: the job's UID, generation and status as its last pass left
them). The event's type names the trigger in the metrics (`Controller.trigger_of`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import kopf

from ..api.v1alpha1 import GROUP, PLURAL, VERSION
from ..builders.common import ATTEMPT_LABEL, COMPONENT_LABEL, JOB_LABEL
from ..builders.report import REPORT_COMPONENT
from ..controllers.first_status import kuberay_reported
from ..controllers.jobs import Controller
from ..controllers.reader import ray_job_summary, without_bookkeeping
from ..controllers.stored import StoredJob
from ..kube.client import login as connection_info
from ..reconcile.inputs import named_jobs
from ..reconcile.observed import PodObservation, RayJobObservation, parse_report
from ..settings import OperatorSettings
from .kopf_settings import configure_kopf

logger = logging.getLogger(__name__)

JOBS_INDEX = "rlhfjob_index"
RAY_JOBS_INDEX = "rayjob_index"
REPORTS_INDEX = "report_index"
PODS_INDEX = "pod_index"
# (namespace, job name) -> the jobs of the namespace that take a model from it (fromJob).
CONSUMERS_INDEX = "consumer_index"
POD_LABELS: Mapping[str, Any] = {JOB_LABEL: kopf.PRESENT}
# kopf's filter types are private: its PRESENT marker beside a plain value.
REPORT_LABELS: Mapping[str, Any] = {
    JOB_LABEL: kopf.PRESENT,
    COMPONENT_LABEL: REPORT_COMPONENT,
}


def register(
    registry: kopf.OperatorRegistry, controller: Controller, settings: OperatorSettings
) -> None:
    @kopf.on.startup(registry=registry)
    def startup(settings: kopf.OperatorSettings, **kwargs: Any) -> None:
        configure_kopf(settings, controller.settings)
        controller.bind(
            kwargs[JOBS_INDEX], kwargs[RAY_JOBS_INDEX], kwargs[REPORTS_INDEX], kwargs[PODS_INDEX]
        )
        controller.consumers = kwargs[CONSUMERS_INDEX]

    @kopf.on.cleanup(registry=registry)
    async def cleanup(**_: Any) -> None:
        await controller.close()

    @kopf.on.login(registry=registry)
    def login(settings: kopf.OperatorSettings, **_: Any) -> kopf.ConnectionInfo:
        return connection_info(settings)

    # The indexes are `async def`: kopf runs a plain `def` handler in its thread pool, and
    # each of these takes microseconds; a burst of thousands of events queued there, each
    # holding its decoded object, a task and a copied context until a thread took it.
    @kopf.index(GROUP, VERSION, PLURAL, id=JOBS_INDEX, registry=registry)
    async def index_job(
        namespace: str | None, name: str, body: kopf.Body, **_: Any
    ) -> dict[Any, Any]:
        return {(namespace, name): StoredJob(body)}

    @kopf.index(GROUP, VERSION, PLURAL, id=CONSUMERS_INDEX, registry=registry)
    async def index_consumer(
        namespace: str | None, name: str, body: kopf.Body, **_: Any
    ) -> dict[Any, Any]:
        return {(namespace, producer): name for _, producer in named_jobs(body)}

    @kopf.index(
        "ray.io",
        "v1",
        "rayjobs",
        id=RAY_JOBS_INDEX,
        labels={JOB_LABEL: kopf.PRESENT},
        registry=registry,
    )
    async def index_ray_job(
        namespace: str | None, labels: kopf.Labels, body: kopf.Body, **_: Any
    ) -> dict[Any, Any]:
        return {(namespace, labels[JOB_LABEL]): ray_job_summary(body)}

    @kopf.index("", "v1", "configmaps", id=REPORTS_INDEX, labels=REPORT_LABELS, registry=registry)
    async def index_report(
        namespace: str | None, labels: kopf.Labels, body: kopf.Body, **_: Any
    ) -> dict[Any, Any]:
        return {(namespace, labels[JOB_LABEL]): without_bookkeeping(body)}

    @kopf.index("", "v1", "pods", id=PODS_INDEX, labels=POD_LABELS, registry=registry)
    async def index_pod(
        namespace: str | None, labels: kopf.Labels, body: kopf.Body, **_: Any
    ) -> Any:
        observation = PodObservation.from_object(body)
        return {(namespace, labels[JOB_LABEL]): (str(labels.get(ATTEMPT_LABEL, "")), observation)}

    @kopf.on.event(GROUP, VERSION, PLURAL, registry=registry)
    async def job_event(
        type: str | None, body: kopf.Body, namespace: str | None, name: str, **_: Any
    ) -> None:
        # Jobs waiting for this one's model look again (their pass reads its status).
        controller.wake_consumers((namespace or "", name))
        if type == "DELETED":
            controller.deleted((namespace or "", name), str(body.get("metadata", {}).get("uid")))
            return
        if controller.nothing_new(body):
            return  # our own status patch coming back
        controller.enqueue((namespace or "", name), controller.trigger_of(type, body))

    @kopf.on.event("ray.io", "v1", "rayjobs", labels={JOB_LABEL: kopf.PRESENT}, registry=registry)
    async def ray_job_event(
        type: str,
        namespace: str | None,
        name: str,
        labels: kopf.Labels,
        body: kopf.Body,
        **_: Any,
    ) -> None:
        # A new job's RayJob that KubeRay has not looked at yet: nothing for its pass (the
        # job's first status waits for KubeRay's word, and that word's event brings it).
        key = (namespace or "", labels[JOB_LABEL])
        if (
            type != "DELETED"
            and not kuberay_reported([RayJobObservation.from_object(body)])
            and controller.first_status.awaiting(key)
        ):
            return
        await _child_event(controller, "RayJob", type, namespace, name, labels, "rayjob")

    @kopf.on.event("", "v1", "pods", labels=POD_LABELS, registry=registry)
    async def pod_event(namespace: str | None, labels: kopf.Labels, **_: Any) -> None:
        # A pod of the job came, changed or went: the start-up diagnosis reads the index. A
        # pass only where the job's pods now say something its last pass did not read (a
        # problem or a disruption came or went): a pod that came Pending or went Running
        # without one changes nothing, and a queue of jobs' pods coming would be a pass each.
        key = (namespace or "", labels[JOB_LABEL])
        owner = controller.job_body(key)
        if owner is not None and controller.pods_matter(key, owner):
            controller.enqueue(key, "pod-event")

    @kopf.on.event("", "v1", "configmaps", labels=REPORT_LABELS, registry=registry)
    async def report_event(
        type: str,
        namespace: str | None,
        name: str,
        labels: kopf.Labels,
        body: kopf.Body,
        **_: Any,
    ) -> None:
        # The trainer wrote its report (or the object went): mirror it into status.trainer.
        # Not the report as the operator made it: with nothing in it, a pass observes what it
        # did before the object existed (no report), and decides nothing new.
        if type != "DELETED" and parse_report(body.get("data")) is None:
            return
        await _child_event(controller, "ConfigMap", type, namespace, name, labels, "report")


async def _child_event(
    controller: Controller,
    kind: str,
    type: str,
    namespace: str | None,
    name: str,
    labels: kopf.Labels,
    trigger: str,
) -> None:
    """An event on a job's child: one deleted is applied again if the job still exists (and
    still wants it); any other change runs the job's pass."""
    key = (namespace or "", labels[JOB_LABEL])
    if type == "DELETED":
        controller.child_deleted(key, kind, name)
        await _quietly_after_deletion(controller, key, f"{trigger}-deleted")
        return
    if controller.job_body(key) is not None:
        controller.enqueue(key, f"{trigger}-event")


async def _quietly_after_deletion(controller: Controller, key: Any, trigger: str) -> None:
    try:
        await controller.after_child_deleted(key, trigger)
    except Exception:
        logger.exception("reconcile %s/%s (%s) failed", *key, trigger)
        controller.metrics.reconcile_errors.labels(trigger, "exception").inc()
        controller.retry_later(key)
