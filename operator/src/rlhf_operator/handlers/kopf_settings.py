"""kopf's startup settings, from ours: kopf keeps its handler progress and diff-base in
annotations with our `rlhf.dev` prefix (the CRD's status schema is strict, so nothing
kopf-owned may live in `status`), uses our finalizer name, posts events as `rlhf-operator`,
and watches with bounded timeouts so a silently dropped watch reconnects."""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable

import kopf

from rlhf_trainer.config.pipeline import PIPELINE_KIND

from ..builders.common import COMPONENT_LABEL, JOB_LABEL, MANAGED_BY_LABEL
from ..builders.report import REPORT_COMPONENT
from ..settings import (
    ANNOTATION_PREFIX,
    DIFF_BASE_KEY,
    FINALIZER,
    OPERATOR_NAME,
    OperatorSettings,
)


class PipelineDiffBase(kopf.AnnotationsDiffBaseStorage):
    """kopf's diff base, built for RLHFPipelines only. kopf builds one for every event of every
    watched resource (two deep copies of the whole body: a RayJob's pod templates and all),
    though only on.create/update/resume handlers read it, and RLHFPipelines are the only
    resource with such handlers (RLHFJobs, RayJobs, pods and ConfigMaps have event handlers
    and indexes, which see the body itself). For the rest an empty essence: no diff."""

    def build(
        self,
        *,
        body: kopf.Body,
        extra_fields: Iterable[kopf.FieldSpec] | None = None,
    ) -> kopf.BodyEssence:
        if body.get("kind") != PIPELINE_KIND:
            return kopf.BodyEssence()
        return super().build(body=body, extra_fields=extra_fields)


def configure_kopf(kopf_settings: kopf.OperatorSettings, settings: OperatorSettings) -> None:
    """Apply our conventions to kopf's settings (called from the startup handler)."""
    persistence = kopf_settings.persistence
    persistence.finalizer = FINALIZER
    persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=ANNOTATION_PREFIX)
    persistence.diffbase_storage = PipelineDiffBase(prefix=ANNOTATION_PREFIX, key=DIFF_BASE_KEY)

    posting = kopf_settings.posting
    posting.enabled = True
    posting.loggers = False  # only explicit transition events, never log lines
    posting.level = logging.INFO
    posting.reporting_component = OPERATOR_NAME
    posting.reporting_instance = settings.instance
    posting.event_name_prefix = f"{OPERATOR_NAME}-"

    kopf_settings.queueing.worker_limit = settings.worker_limit
    kopf_settings.queueing.idle_timeout = settings.worker_idle_seconds

    watching = kopf_settings.watching
    watching.server_timeout = settings.watch_server_timeout
    watching.client_timeout = settings.watch_client_timeout
    watching.connect_timeout = settings.watch_connect_timeout
    # Only our RayJobs, report ConfigMaps and the jobs' pods are watched: the API server
    # filters, not the operator (which thus never receives the namespace's other objects).
    watching.label_selectors["ray.io", "rayjobs"] = f"{MANAGED_BY_LABEL}={OPERATOR_NAME}"
    watching.label_selectors["v1", "configmaps"] = (
        f"{MANAGED_BY_LABEL}={OPERATOR_NAME},{COMPONENT_LABEL}={REPORT_COMPONENT}"
    )
    watching.label_selectors["v1", "pods"] = JOB_LABEL  # KubeRay copies our template's labels

    peering = kopf_settings.peering
    peering.standalone = settings.peering is None
    if settings.peering is not None:
        peering.name = settings.peering
        peering.mandatory = True  # a missing peering object is an install error, say so
        peering.clusterwide = settings.clusterwide
        # Equal priorities pause every replica; distinct ones let exactly one work.
        peering.priority = (
            settings.peering_priority
            if settings.peering_priority is not None
            else random.randint(1, 1_000_000)
        )
        peering.stealth = True
