"""What the operator's watch caches keep per job; one JSON line.

    .venv/bin/python bench/operator_cache_memory.py

In process, no API server: the bench's PPO job (bench/operator_scale.py) parsed and decided as
a pass does, its RLHFJob as the API server returns it (status, kopf's diff-base annotation,
`managedFields` for three writers), its RayJob as rendered plus a status as KubeRay writes it.
Each is decoded from JSON 300 times and kept, whole (what the caches kept before issue 24), as
session 6 kept it (`without_bookkeeping`) and as the caches keep it now (`StoredJob`: spec and
status packed; `ray_job_summary`); tracemalloc counts the live Python objects. Before and in
session 6 the operator kept a job's RLHFJob twice (the index and the answer to its last status
patch, for as long as the job lived); now once (that answer is dropped when the watch brings the
job as new), and its RayJob once.
"""

from __future__ import annotations

import copy
import gc
import json
import sys
import tracemalloc
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from operator_scale import job_manifest

from rlhf_operator.builders.children import render_children
from rlhf_operator.controllers.reader import ray_job_summary, without_bookkeeping
from rlhf_operator.controllers.stored import StoredJob
from rlhf_operator.reconcile.decide import decide
from rlhf_operator.reconcile.observed import Observed
from rlhf_operator.reconcile.parse import parse
from rlhf_operator.settings import OperatorSettings

COPIES = 300


def bodies() -> tuple[dict[str, Any], dict[str, Any]]:
    settings = OperatorSettings(default_trainer_image="rlhf-trainer:bench")
    job = job_manifest("ppo-0001")
    job["metadata"].update(
        uid="6d1c1c52-2f4c-4a8e-9d0e-1b0c9c6f0a11",
        generation=1,
        resourceVersion="123456",
        creationTimestamp="2026-12-02T00:00:00Z",
    )
    parsed = parse(job, settings)
    decision = decide(
        parsed, Observed.of([], report=None, producers={}), settings, datetime.now(UTC)
    )
    assert parsed.job is not None
    ray_job = copy.deepcopy(render_children(parsed.job, settings).ray_job)
    job["status"] = decision.status.to_manifest()
    job["metadata"]["annotations"] = {
        "rlhf.dev/last-handled-configuration": json.dumps({"spec": job["spec"]})
    }
    fields = {
        "f:spec": {f"f:{key}": {} for key in job["spec"]},
        "f:status": {f"f:{key}": {} for key in job["status"]},
    }
    job["metadata"]["managedFields"] = [
        {"manager": manager, "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": fields}
        for manager in ("kopf", "rlhf-operator", "kubectl")
    ]
    ray_job["metadata"].update(uid="0b9d1c1e-1111-4222-8333-444455556666", resourceVersion="1")
    ray_job["status"] = {
        "jobDeploymentStatus": "Running",
        "jobStatus": "RUNNING",
        "rayClusterName": "ppo-0001-r0-raycluster-x7k2p",
        "jobId": "ppo-0001-r0-8xk2q",
        "dashboardURL": "ppo-0001-r0-raycluster-x7k2p-head-svc.default.svc:8265",
        "startTime": "2026-12-02T00:00:00Z",
        "rayClusterStatus": {
            "state": "ready",
            "readyWorkerReplicas": 2,
            "desiredWorkerReplicas": 2,
        },
    }
    return job, ray_job


def kept_kb(body: dict[str, Any], keep: Callable[[dict[str, Any]], Any] | None = None) -> float:
    """KB of live Python objects per copy of `body` as decoded from JSON and kept."""
    text = json.dumps(body)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    kept = [(keep or (lambda b: b))(json.loads(text)) for _ in range(COPIES)]
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert len(kept) == COPIES
    return round((after - before) / COPIES / 1024, 1)


def main() -> None:
    job, ray_job = bodies()
    figures = {
        "bench": "operator_cache_memory",
        "rlhfjob_whole_kb": kept_kb(job),
        "rlhfjob_session6_kb": kept_kb(job, without_bookkeeping),
        "rlhfjob_kept_kb": kept_kb(job, StoredJob),
        "rayjob_whole_kb": kept_kb(ray_job),
        "rayjob_kept_kb": kept_kb(ray_job, ray_job_summary),
    }
    figures["per_job_before_kb"] = round(
        2 * figures["rlhfjob_whole_kb"] + figures["rayjob_whole_kb"], 1
    )
    figures["per_job_session6_kb"] = round(
        2 * figures["rlhfjob_session6_kb"] + figures["rayjob_kept_kb"], 1
    )
    figures["per_job_now_kb"] = round(figures["rlhfjob_kept_kb"] + figures["rayjob_kept_kb"], 1)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
