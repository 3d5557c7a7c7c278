"""kopf handlers of RLHFPipelines: thin adapters to `PipelineController.reconcile`.

Level-based, as the RLHFJobs' (handlers/jobs.py): the pipeline created, edited or resumed after a
restart, any event on it, and any event on one of its stage jobs (labelled rlhf.dev/pipeline)
run the same pass. The RLHFJobs come from handlers/jobs.py's index of them.
"""

from __future__ import annotations

from typing import Any

import kopf

from ..api.v1alpha1 import GROUP, PLURAL, VERSION
from ..api.v1alpha1.pipeline import PIPELINE_PLURAL
from ..controllers.pipelines import PipelineController
from ..reconcile.pipelines import PIPELINE_LABEL
from ..settings import OperatorSettings

PIPELINES_INDEX = "rlhfpipeline_index"


def register_pipelines(
    registry: kopf.OperatorRegistry,
    controller: PipelineController,
    settings: OperatorSettings,
    jobs_index: str,
) -> None:
    @kopf.on.startup(registry=registry)
    def bind(**kwargs: Any) -> None:
        controller.bind(kwargs[PIPELINES_INDEX], kwargs[jobs_index])

    @kopf.on.cleanup(registry=registry)
    async def close(**_: Any) -> None:
        await controller.close()

    @kopf.index(GROUP, VERSION, PIPELINE_PLURAL, id=PIPELINES_INDEX, registry=registry)
    async def index_pipeline(  # async: see handlers/jobs.py's indexes
        namespace: str | None, name: str, body: kopf.Body, **_: Any
    ) -> dict[Any, Any]:
        return {(namespace, name): dict(body)}

    @kopf.on.resume(GROUP, VERSION, PIPELINE_PLURAL, registry=registry)
    async def resumed(namespace: str | None, name: str, **_: Any) -> None:
        controller.schedule((namespace or "", name), 0.0)  # a failure: the timer retries

    @kopf.on.create(GROUP, VERSION, PIPELINE_PLURAL, registry=registry)
    async def created(namespace: str | None, name: str, **_: Any) -> None:
        controller.schedule((namespace or "", name), 0.0)  # a failure: the timer retries

    @kopf.on.update(GROUP, VERSION, PIPELINE_PLURAL, field="spec", registry=registry)
    async def updated(namespace: str | None, name: str, **_: Any) -> None:
        controller.schedule((namespace or "", name), 0.0)  # a failure: the timer retries

    @kopf.on.event(GROUP, VERSION, PIPELINE_PLURAL, registry=registry)
    async def pipeline_event(
        type: str, body: kopf.Body, namespace: str | None, name: str, **_: Any
    ) -> None:
        if type == "DELETED":
            controller.forget(str(body.get("metadata", {}).get("uid", "")))
            return
        # Through the timer, which logs a failure and looks again (event handlers have no
        # retries in kopf).
        controller.schedule((namespace or "", name), 0.0)

    @kopf.on.event(GROUP, VERSION, PLURAL, labels={PIPELINE_LABEL: kopf.PRESENT}, registry=registry)
    async def stage_job_event(namespace: str | None, labels: kopf.Labels, **_: Any) -> None:
        # Through the timer: one pass however many of its jobs' events arrive at once.
        controller.schedule((namespace or "", str(labels[PIPELINE_LABEL])), 0.0)
