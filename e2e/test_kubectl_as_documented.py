"""The kubectl lines README.md and e2e/README.md give users, run with the real kubectl: `get
rlhf`, `get rlhf -w`, `describe rlhf NAME` and `get rlhfp` behave as one kind's short name, and
`get rlhf-all` lists both kinds. A suspended job and a suspended pipeline are enough (nothing
of theirs starts); kubectl expanded the CRDs' old category `rlhf` before the short name and
refused the watch and the describe ("you may only specify a single resource type")."""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterator

import pytest
import yaml
from e2e_cluster import Cluster, wait_for
from e2e_job import EXAMPLES, adapt_for_kind, load_example, tiny_task_config_map
from e2e_settings import OPERATOR_NAMESPACE, TRAINER_IMAGE

pytestmark = pytest.mark.e2e

JOB = "kubectl-docs"
PIPELINE = "kubectl-docs-pipeline"


@pytest.fixture(scope="module")
def suspended(cluster: Cluster, operator: str, namespace: str) -> Iterator[None]:
    job = adapt_for_kind(load_example(), image=TRAINER_IMAGE, namespace=namespace)
    job["metadata"]["name"] = JOB
    job["spec"]["runPolicy"]["suspend"] = True
    pipeline = yaml.safe_load((EXAMPLES / "tiny-pipeline-cpu.yaml").read_text())
    pipeline["metadata"] = {"name": PIPELINE, "namespace": namespace}
    pipeline["spec"]["suspend"] = True
    cluster.apply(tiny_task_config_map(namespace))  # the job's files, as the journey's
    cluster.apply(job)
    cluster.apply(pipeline)

    def phase() -> str | None:
        found = cluster.get("rlhfjob", JOB, namespace) or {}
        return found.get("status", {}).get("phase") or None

    wait_for(
        lambda: phase() == "Suspended" or None,
        timeout=300,
        interval=2,
        what=f"RLHFJob {JOB} to be Suspended",
        on_timeout=lambda: cluster.diagnostics(namespace, OPERATOR_NAMESPACE),
    )
    yield
    for kind, name in (("rlhfjob", JOB), ("rlhfpipeline", PIPELINE)):
        cluster.kubectl("delete", kind, name, "-n", namespace, "--wait=false")


def test_get_rlhf_prints_the_jobs_columns(
    cluster: Cluster, namespace: str, suspended: None
) -> None:
    out = cluster.kubectl("get", "rlhf", "-n", namespace).splitlines()
    assert out[0].split() == [
        "NAME", "PHASE", "ALGORITHM", "PROGRESS", "REWARD", "GPUS", "RESTARTS", "AGE"
    ]  # fmt: skip
    row = next(line.split() for line in out[1:] if line.split()[0] == JOB)
    assert row[1:3] == ["Suspended", "ppo"]


def test_get_rlhf_watch_streams_rows(cluster: Cluster, namespace: str, suspended: None) -> None:
    """`kubectl get rlhf -w` runs until stopped: its first rows are read, then it is ended."""
    watch = subprocess.Popen(
        [str(cluster.kubectl_binary), "get", "rlhf", "-n", namespace, "-w"],
        env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert watch.stdout is not None
        header, row = watch.stdout.readline(), watch.stdout.readline()
        time.sleep(1)
        ended = watch.poll() is not None
        assert not ended, f"the watch ended: {watch.stderr.read() if watch.stderr else ''}"
    finally:
        watch.terminate()
        watch.wait(timeout=10)
    assert header.split()[:2] == ["NAME", "PHASE"]
    assert row.split()[:2] == [JOB, "Suspended"]


def test_describe_rlhf_name(cluster: Cluster, namespace: str, suspended: None) -> None:
    out = cluster.kubectl("describe", "rlhf", JOB, "-n", namespace)
    assert re.search(rf"^Name:\s+{JOB}$", out, re.MULTILINE), out
    assert re.search(r"^Kind:\s+RLHFJob$", out, re.MULTILINE), out
    assert re.search(r"^\s+Conditions:$", out, re.MULTILINE), out


def test_get_rlhfp_and_the_category_of_both(
    cluster: Cluster, namespace: str, suspended: None
) -> None:
    pipelines = cluster.kubectl("get", "rlhfp", "-n", namespace)
    assert PIPELINE in pipelines and pipelines.split()[:2] == ["NAME", "PHASE"]
    both = cluster.kubectl("get", "rlhf-all", "-n", namespace, "-o", "name")
    assert f"rlhfjob.rlhf.dev/{JOB}" in both.split()
    assert f"rlhfpipeline.rlhf.dev/{PIPELINE}" in both.split()
