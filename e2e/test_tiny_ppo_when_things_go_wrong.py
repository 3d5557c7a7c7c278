"""Issue 9's "Must show" beyond the happy journey (test_tiny_ppo_on_kind.py), each with its own
job so nothing collides with the journey's: a worker pod's processes killed mid-run (a retry
that resumes from the checkpoint on the volume), tiny-sft-cpu with its exported model, a job
waiting on a Secret that does not exist, and suspend/resume mid-run. Slow (minutes each): opt
in with `-m slow`. Parts that need the machine's processes or the volume's directory are the
local substrate's (skipped on a real cluster, as in test_tiny_ppo_on_local.py)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_cluster import Cluster, wait_for
from e2e_job import EXAMPLES, adapt_for_kind, load_example, tiny_task_config_map
from e2e_local import LocalSubstrate
from e2e_settings import OPERATOR_NAMESPACE, TIMEOUT, TRAINER_IMAGE

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

Manifest = dict[str, Any]
SUSPENDED_STEPS = 100


@pytest.fixture
def jobs(cluster: Cluster, operator: str, namespace: str) -> Iterator[Callable[[Manifest], str]]:
    """Applies a job (and the tiny task's ConfigMap); deletes every job it applied, and its
    checkpoint claim, at the end of the test."""
    applied: list[str] = []
    cluster.apply(tiny_task_config_map(namespace))

    def apply(job: Manifest) -> str:
        cluster.apply(job)
        applied.append(str(job["metadata"]["name"]))
        return applied[-1]

    yield apply
    for name in applied:
        cluster.kubectl(
            "delete", "rlhfjob", name, "-n", namespace, "--ignore-not-found", timeout=300
        )
        cluster.kubectl(
            "delete",
            "pvc",
            f"{name}-checkpoints",
            "-n",
            namespace,
            "--ignore-not-found",
            "--wait=false",
        )


def local_only(substrate: LocalSubstrate | None) -> LocalSubstrate:
    if substrate is None:
        pytest.skip("needs the machine's processes and volume directories: local substrate only")
    return substrate


def status(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    return dict(((cluster.get("rlhfjob", name, namespace) or {}).get("status")) or {})


def wait_finished(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    def final() -> dict[str, Any] | None:
        found = status(cluster, namespace, name)
        return found if found.get("phase") in ("Succeeded", "Failed") else None

    return wait_for(
        final,
        timeout=TIMEOUT,
        interval=5,
        what=f"RLHFJob {namespace}/{name} to finish",
        on_timeout=lambda: cluster.diagnostics(namespace, OPERATOR_NAMESPACE),
    )


def assert_succeeded(cluster: Cluster, namespace: str, found: dict[str, Any]) -> None:
    assert found["phase"] == "Succeeded", (
        json.dumps(found, indent=2) + "\n" + cluster.diagnostics(namespace, OPERATOR_NAMESPACE)
    )


def step_records(metrics: Path) -> list[dict[str, Any]]:
    if not metrics.exists():
        return []
    records = []
    for line in metrics.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line being written
        if record.get("event") == "step":
            records.append(record)
    return records


def complete_checkpoints(volume: Path) -> list[int]:
    found = [p for p in volume.rglob("step-*") if p.is_dir() and (p / "COMPLETE").exists()]
    return sorted(int(p.name.removeprefix("step-")) for p in found)


def attempts(records: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The step records split where the step goes back (a new attempt resumed)."""
    runs: list[list[dict[str, Any]]] = [[]]
    for record in records:
        if runs[-1] and record["step"] <= runs[-1][-1]["step"]:
            runs.append([])
        runs[-1].append(record)
    return runs


def test_killed_worker_is_retried_and_resumes_from_the_checkpoint(
    cluster: Cluster,
    substrate: LocalSubstrate | None,
    namespace: str,
    jobs: Callable[[Manifest], str],
) -> None:
    """SIGKILL every container of the worker pod once a step after the first checkpoint was
    logged: the RayJob fails, the operator starts attempt 2 (restarts: 1), the trainer resumes
    at the checkpoint's step + 1, and the job succeeds. Deterministic mode: the steps both
    attempts ran have the same metrics (wall-clock fields aside)."""
    local = local_only(substrate)
    job = adapt_for_kind(load_example(), image=TRAINER_IMAGE, namespace=namespace, max_steps=10)
    name = job["metadata"]["name"] = "tiny-ppo-killed"
    job["spec"]["training"]["deterministic"] = True
    job["spec"]["checkpoint"]["everySteps"] = 3
    job["spec"]["runPolicy"]["backoffLimit"] = 1
    jobs(job)
    volume = local.pvc_dir(namespace, f"{name}-checkpoints")
    metrics = volume / name / "output" / "metrics.jsonl"

    def after_a_checkpoint() -> int | None:
        steps = [r["step"] for r in step_records(metrics)]
        done = complete_checkpoints(volume)
        if done and steps and done[-1] < steps[-1] < 10:
            return int(steps[-1])
        assert not steps or steps[-1] < 10, "the run ended before the worker could be killed"
        return None

    wait_for(
        after_a_checkpoint,
        timeout=TIMEOUT,
        interval=0.5,
        what=f"{name}: a step logged after a complete checkpoint",
        on_timeout=lambda: cluster.diagnostics(namespace, OPERATOR_NAMESPACE),
    )
    workers = cluster.list("pods", namespace, f"rlhf.dev/job={name},ray.io/node-type=worker")
    assert workers, cluster.diagnostics(namespace, OPERATOR_NAMESPACE)
    killed = [
        pid for pod in workers for pid in local.kill_containers(namespace, pod["metadata"]["name"])
    ]
    assert killed, f"no container process of {[p['metadata']['name'] for p in workers]}"
    resume_from = complete_checkpoints(volume)[-1]

    found = wait_finished(cluster, namespace, name)
    assert_succeeded(cluster, namespace, found)
    assert found["restarts"] == 1
    assert found["trainer"]["step"] == found["trainer"]["totalSteps"] == 10
    first, second = attempts(step_records(metrics))
    assert second[0]["step"] == resume_from + 1, (
        f"attempt 2 began at step {second[0]['step']}, the checkpoint was step {resume_from}"
    )
    assert second[-1]["step"] == 10
    # Steps both attempts ran (after the checkpoint, before the kill): deterministic mode
    # gives the same numbers; times and throughputs are the machine's.
    overlap = {r["step"]: r for r in first if r["step"] > resume_from}
    assert overlap, "attempt 1 logged no step after the checkpoint"
    compared = [r["step"] for r in second if r["step"] in overlap]
    assert compared, "attempt 2 logged none of the steps attempt 1 ran after the checkpoint"
    for record in second:
        if record["step"] in overlap:
            before = overlap[record["step"]]
            assert numbers(record) == numbers(before), record["step"]


def numbers(record: dict[str, Any]) -> dict[str, Any]:
    """A step record without what the clock decides: times, throughputs (`*_s` metrics), ETA."""
    metrics = {k: v for k, v in record["metrics"].items() if not k.endswith("_s")}
    return {"metrics": metrics, "examples": record.get("examples"), "step": record["step"]}


def test_tiny_sft_succeeds_with_its_exported_model_where_status_says(
    cluster: Cluster,
    substrate: LocalSubstrate | None,
    namespace: str,
    jobs: Callable[[Manifest], str],
) -> None:
    """tiny-sft-cpu (offline: DeepSpeed on one rank, no rollout engine) reaches Succeeded;
    status.output.model names pvc://<claim>/<job>/output/final, and on the local substrate
    that directory loads with transformers and generates."""
    job = adapt_for_kind(
        load_example(EXAMPLES / "tiny-sft-cpu.yaml"), image=TRAINER_IMAGE, namespace=namespace
    )
    name = job["metadata"]["name"] = "tiny-sft-e2e"
    jobs(job)
    found = wait_finished(cluster, namespace, name)
    assert_succeeded(cluster, namespace, found)
    assert found["trainer"]["step"] == found["trainer"]["totalSteps"] > 0
    claim = f"{name}-checkpoints"
    assert found["output"]["model"] == f"pvc://{claim}/{name}/output/final"
    if substrate is None:
        return  # the claim's files are the storage's business on a real cluster
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    final = substrate.pvc_dir(namespace, claim) / name / "output" / "final"
    model = AutoModelForCausalLM.from_pretrained(final).eval()
    tokenizer = AutoTokenizer.from_pretrained(final)
    ids = tokenizer("Repeat the letter c.", return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=4, do_sample=False)
    assert out.shape[1] > ids["input_ids"].shape[1]


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        # The operator reads ConfigMaps itself: it waits before making the RayJob.
        ("ConfigMap", ("Pending", "Admitted", "DependencyMissing")),
        # It may not read Secrets (least privilege): the pods' CreateContainerConfigError,
        # which names the Secret, is what it reports while the Ray cluster cannot start.
        ("Secret", ("Provisioning", "ClusterReady", "ContainerConfigError")),
    ],
)
def test_a_missing_secret_or_config_map_is_named_in_the_status(
    cluster: Cluster,
    namespace: str,
    jobs: Callable[[Manifest], str],
    kind: str,
    expected: tuple[str, str, str],
) -> None:
    """A job that names a Secret (spec.secrets) or a ConfigMap (a data source's configMapRef)
    that does not exist: its status says which object and why it is waiting, in status.message
    and in a False condition with its reason (not a silent Provisioning)."""
    job = adapt_for_kind(load_example(), image=TRAINER_IMAGE, namespace=namespace)
    name = job["metadata"]["name"] = f"tiny-ppo-no-{kind.lower()}"
    missing = f"e2e-no-such-{kind.lower()}"
    if kind == "Secret":
        job["spec"]["secrets"] = {"hfToken": {"name": missing, "key": "token"}}
    else:
        job["spec"]["data"]["train"][0]["configMapRef"]["name"] = missing
    jobs(job)
    phase, condition, reason = expected

    def reported() -> dict[str, Any] | None:
        found = status(cluster, namespace, name)
        said = {c["type"]: c for c in found.get("conditions") or []}.get(condition) or {}
        return found if missing in said.get("message", "") else None

    found = wait_for(
        reported,
        timeout=600,
        interval=2,
        what=f"{name}'s {condition} condition to name the {kind} {missing}",
        on_timeout=lambda: cluster.diagnostics(namespace, OPERATOR_NAMESPACE),
    )
    said = {c["type"]: c for c in found["conditions"]}[condition]
    assert (said["status"], said["reason"]) == ("False", reason), said
    assert found["phase"] == phase, found
    assert missing in found.get("message", ""), found
    assert kind in found["message"] or kind.lower() in found["message"], found
    if kind == "ConfigMap":
        assert not cluster.list("rayjobs.ray.io", namespace, f"rlhf.dev/job={name}")


def test_suspend_frees_the_pods_and_resume_continues_from_the_checkpoint(
    cluster: Cluster,
    substrate: LocalSubstrate | None,
    namespace: str,
    jobs: Callable[[Manifest], str],
) -> None:
    """spec.runPolicy.suspend: true once a checkpoint was written: the job's pods go (on the
    local substrate: not one process of them is left), the job says Suspended; suspend: false
    brings them back and the trainer continues from the checkpoint to Succeeded."""
    # Long enough that the run is still going when the suspension lands (a step takes about
    # 0.5 s here, and the status reports a checkpoint some seconds after it was written).
    job = adapt_for_kind(
        load_example(), image=TRAINER_IMAGE, namespace=namespace, max_steps=SUSPENDED_STEPS
    )
    name = job["metadata"]["name"] = "tiny-ppo-suspended"
    job["spec"]["checkpoint"]["everySteps"] = 5
    jobs(job)
    volume = substrate.pvc_dir(namespace, f"{name}-checkpoints") if substrate else None

    def checkpointed() -> bool | None:
        if volume is not None:  # the volume's directory says it first
            return True if complete_checkpoints(volume) else None
        found = status(cluster, namespace, name)
        assert found.get("phase") not in ("Succeeded", "Failed"), found
        return True if (found.get("trainer") or {}).get("checkpoints") else None

    wait_for(
        checkpointed,
        timeout=TIMEOUT,
        interval=0.5,
        what=f"{name}: a checkpoint written",
        on_timeout=lambda: cluster.diagnostics(namespace, OPERATOR_NAMESPACE),
    )

    def set_suspend(value: bool) -> None:
        patch = json.dumps({"spec": {"runPolicy": {"suspend": value}}})
        cluster.kubectl("patch", "rlhfjob", name, "-n", namespace, "--type=merge", "-p", patch)

    set_suspend(True)
    selector = f"rlhf.dev/job={name}"
    wait_for(
        lambda: (
            True
            if status(cluster, namespace, name).get("phase") == "Suspended"
            and not cluster.list("pods", namespace, selector)
            else None
        ),
        timeout=600,
        interval=2,
        what=f"{name}: Suspended with no pod left",
        on_timeout=lambda: cluster.diagnostics(namespace, OPERATOR_NAMESPACE),
    )
    metrics, resume_from = None, 0
    if substrate is not None:
        prefix = substrate.pod_dir_prefix(namespace, f"{name}-")
        wait_for(
            lambda: (
                None
                if substrate.processes(argv_contains=prefix, env_entry=f"RLHF_JOB_NAME={name}")
                else True
            ),
            timeout=120,
            interval=1,
            what=f"{name}: every process of its pods gone",
        )
        assert volume is not None
        metrics = volume / name / "output" / "metrics.jsonl"
        resume_from = complete_checkpoints(volume)[-1]
        before = [r["step"] for r in step_records(metrics)]
        assert before[-1] < SUSPENDED_STEPS, "the run ended before the suspension landed"
    resumed_at = time.time()
    set_suspend(False)

    found = wait_finished(cluster, namespace, name)
    assert_succeeded(cluster, namespace, found)
    assert found["trainer"]["step"] == found["trainer"]["totalSteps"] == SUSPENDED_STEPS
    if metrics is not None:
        after = [r["step"] for r in step_records(metrics) if r["time"] > resumed_at]
        assert after and after[0] == resume_from + 1, (resume_from, after)
        assert after[-1] == SUSPENDED_STEPS
