"""Issue 19's "Must show" on the local substrate: a tenant with only a token (made with the
TokenRequest API, as `kubectl create token` makes it) and the official `openai` SDK (base_url
and api_key, nothing else) uploads a JSONL, fine-tunes the tiny catalog model with RL on a
python grader it wrote (the real operator, real trainer pods: Ray, DeepSpeed, vLLM on CPU),
follows the job to `succeeded`, reads its events, checkpoints and metrics, finds its model in
`models.list()`, and sees the run in the console (headless Chromium; a screenshot is kept);
cancels a second job, pauses and resumes a third; a second tenant sees none of it; no token is
a 401; a bad grader is a 400 naming it. The gateway runs from the chart (gateway.enabled, the
substrate's gateway-values.yaml) with its files on the substrate's S3 store.

Slow (a few minutes of training): `pytest -m slow e2e/test_gateway_journey.py`. The journey's
wall time is written to `gateway-journey.json` beside the screenshot (RLHF_TEST_ARTIFACTS, else
the test's tmp_path)."""

from __future__ import annotations

import base64
import json
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from e2e_cluster import Cluster, wait_for
from e2e_local import LocalSubstrate
from e2e_settings import OPERATOR_NAMESPACE, TIMEOUT

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
ROWS = REPO / "manifests" / "examples" / "tiny-task" / "reinforcement.jsonl"
MODEL = "tiny-llama-random"  # e2e/local/gateway-values.yaml's catalog
TENANT_ROLE = "rlhf-operator-gateway-tenant"
CHROMIUM = Path("/usr/bin/chromium")
# The tenant's own grader: the share of the answer's letters that are the row's letter.
GRADER = {
    "type": "python",
    "name": "repeat-letter",
    "source": (
        "def grade(sample, item):\n"
        "    letters = [c for c in sample['output_text'] if not c.isspace()]\n"
        "    right = sum(c == item['letter'] for c in letters)\n"
        "    return right / max(len(letters), 8)\n"
    ),
}


@dataclass(frozen=True)
class Gateway:
    url: str  # http://<pod address>:<port>: no kube-proxy here, the pod answers directly
    tokens: dict[str, str]

    def client(self, tenant: str) -> openai.OpenAI:
        """The official SDK as a tenant uses it: base_url and api_key only."""
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=self.tokens[tenant])


def add_tenant(cluster: Cluster, namespace: str) -> str:
    """What the platform team does per tenant (docs/service.md): a namespace, a ServiceAccount
    bound to the chart's tenant ClusterRole, the keys its jobs read the S3 files with; then
    `kubectl create token` (TokenRequest) is the tenant's API key."""
    cluster.kubectl("create", "namespace", namespace)
    cluster.kubectl("create", "serviceaccount", "tenant", "-n", namespace)
    cluster.apply(  # as `kubectl create rolebinding` would (the substrate takes it as YAML)
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "rlhf-tenant", "namespace": namespace},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": TENANT_ROLE,
            },
            "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": namespace}],
        }
    )
    keys = {
        k: base64.b64encode(b"substrate").decode()
        for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
    }
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "rlhf-files-s3", "namespace": namespace},
            "data": keys,
        }
    )
    return cluster.kubectl("create", "token", "tenant", "-n", namespace, "--duration=2h").strip()


@pytest.fixture(scope="module")
def gateway(cluster: Cluster, substrate: LocalSubstrate | None) -> Iterator[Gateway]:
    if substrate is None:
        pytest.skip(
            "the gateway journey runs on the local substrate (its S3 store holds the files)"
        )
    selector = "app.kubernetes.io/component=gateway"

    def ready() -> str | None:
        for pod in cluster.list("pods", OPERATOR_NAMESPACE, selector):
            conditions = {c["type"]: c["status"] for c in pod["status"].get("conditions", [])}
            if conditions.get("Ready") == "True":
                return str(pod["status"]["podIP"])
        return None

    address = wait_for(
        ready,
        timeout=300,
        interval=2,
        what="the gateway pod to be Ready",
        on_timeout=lambda: cluster.kubectl(
            "describe", "pods", "-n", OPERATOR_NAMESPACE, "-l", selector
        ),
    )
    tenants = {ns: add_tenant(cluster, ns) for ns in ("team-a", "team-b")}
    yield Gateway(f"http://{address}:8000", tenants)
    for namespace in tenants:
        cluster.kubectl("delete", "namespace", namespace, "--wait=false")


def artefacts(tmp_path: Path) -> Path:
    where = Path(os.environ.get("RLHF_TEST_ARTIFACTS", tmp_path))
    where.mkdir(parents=True, exist_ok=True)
    return where


def until_status(
    client: openai.OpenAI, job_id: str, done: Callable[[str], bool], cluster: Cluster
) -> Any:
    def probe() -> Any:
        job = client.fine_tuning.jobs.retrieve(job_id)
        return job if done(job.status) else None

    return wait_for(
        probe,
        timeout=TIMEOUT,
        interval=3,
        what=f"job {job_id}'s status",
        on_timeout=lambda: cluster.diagnostics("team-a", OPERATOR_NAMESPACE),
    )


def phase(cluster: Cluster, name: str) -> str | None:
    found = cluster.get("rlhfjob", name, "team-a") or {}
    return (found.get("status") or {}).get("phase")


def reinforcement(grader: dict[str, Any]) -> Any:  # the SDK's Method, as a tenant writes it
    return {"type": "reinforcement", "reinforcement": {"grader": grader}}


def test_a_tenant_fine_tunes_the_tiny_model_with_its_own_grader(
    gateway: Gateway, cluster: Cluster, tmp_path: Path
) -> None:
    client, other = gateway.client("team-a"), gateway.client("team-b")
    started = time.monotonic()
    with ROWS.open("rb") as rows:
        train = client.files.create(file=rows, purpose="fine-tune")
    assert train.status == "processed" and train.bytes == ROWS.stat().st_size
    job = client.fine_tuning.jobs.create(
        model=MODEL,
        training_file=train.id,
        method=reinforcement(GRADER),
        suffix="letters",
        metadata={"journey": "must-show"},
    )
    assert job.status in ("validating_files", "queued") and job.model == MODEL
    done = until_status(
        client, job.id, lambda s: s in ("succeeded", "failed", "cancelled"), cluster
    )
    trained_s = time.monotonic() - started
    assert done.status == "succeeded", (
        done.error,
        cluster.diagnostics("team-a", OPERATOR_NAMESPACE),
    )
    assert done.fine_tuned_model == f"ft:{MODEL}:team-a:letters:{job.id}"
    assert done.finished_at and done.metadata == {"journey": "must-show"}

    events = [e.message for e in client.fine_tuning.jobs.list_events(job.id, limit=100)]
    assert "Created fine-tuning job" in events
    steps = [m for m in events if m.startswith("Step ")]
    assert any(m.startswith("Step 4/4: ") for m in steps), events
    assert f"New fine-tuned model created: {done.fine_tuned_model}" in events
    checkpoints = list(client.fine_tuning.jobs.checkpoints.list(job.id))
    assert [c.step_number for c in checkpoints][:1] == [4], checkpoints
    assert all(c.fine_tuned_model_checkpoint.startswith(done.fine_tuned_model) for c in checkpoints)
    metrics = client.get(f"/fine_tuning/jobs/{job.id}/metrics", cast_to=httpx.Response).json()
    rewards = metrics["metrics"]["reward"]
    assert [step for step, _ in rewards] == [1, 2, 3, 4]
    assert all(0.0 <= value <= 1.0 for _, value in rewards)  # the grader's scale
    assert done.fine_tuned_model in [m.id for m in client.models.list()]
    assert client.models.retrieve(done.fine_tuned_model).owned_by == "team-a"

    screenshot = console_screenshot(gateway, job.id, artefacts(tmp_path))

    # The second tenant sees none of it: empty lists, 404s.
    assert list(other.fine_tuning.jobs.list()) == []
    assert list(other.files.list()) == []
    assert done.fine_tuned_model not in [m.id for m in other.models.list()]
    for call in (
        lambda: other.fine_tuning.jobs.retrieve(job.id),
        lambda: other.fine_tuning.jobs.cancel(job.id),
        lambda: other.fine_tuning.jobs.list_events(job.id),
        lambda: other.files.retrieve(train.id),
        lambda: other.files.content(train.id),
        lambda: other.models.retrieve(done.fine_tuned_model),
    ):
        with pytest.raises(openai.NotFoundError):
            call()
    # No token: 401, on the API and the console's rows alike.
    for path in ("/v1/models", "/v1/fine_tuning/jobs", "/v1/console/jobs"):
        assert httpx.get(f"{gateway.url}{path}").status_code == 401
    # A bad grader: a 400 naming its field, and no job made.
    broken = {**GRADER, "source": "def score(sample):\n    return 1.0\n"}
    with pytest.raises(openai.BadRequestError) as refused:
        client.fine_tuning.jobs.create(
            model=MODEL, training_file=train.id, method=reinforcement(broken)
        )
    assert refused.value.param == "method.reinforcement.grader.source", refused.value.body
    assert "grade" in refused.value.message
    assert [j.id for j in client.fine_tuning.jobs.list()] == [job.id]

    cancelled = second_job_is_cancelled(client, train.id, cluster)
    pause_s = third_job_is_paused_and_resumed(client, train.id, cluster)
    record = {
        "upload_to_succeeded_s": round(trained_s, 1),
        "whole_journey_s": round(time.monotonic() - started, 1),
        "pause_resume_s": round(pause_s, 1),
        "job": job.id,
        "fine_tuned_model": done.fine_tuned_model,
        "cancelled_job": cancelled,
        "screenshot": str(screenshot),
    }
    (artefacts(tmp_path) / "gateway-journey.json").write_text(json.dumps(record, indent=2))
    print(f"gateway journey: {json.dumps(record)}")


def second_job_is_cancelled(client: openai.OpenAI, file_id: str, cluster: Cluster) -> str:
    job = client.fine_tuning.jobs.create(
        model=MODEL, training_file=file_id, method=reinforcement(GRADER)
    )
    assert client.fine_tuning.jobs.cancel(job.id).status == "cancelled"
    assert client.fine_tuning.jobs.retrieve(job.id).status == "cancelled"
    with pytest.raises(openai.ConflictError):
        client.fine_tuning.jobs.cancel(job.id)
    # Cancelled is suspended: no pod of it is left running.
    wait_for(
        lambda: True if not cluster.list("pods", "team-a", f"rlhf.dev/job={job.id}") else None,
        timeout=300,
        interval=3,
        what=f"the cancelled job {job.id}'s pods to go",
    )
    return job.id


def third_job_is_paused_and_resumed(client: openai.OpenAI, file_id: str, cluster: Cluster) -> float:
    job = client.fine_tuning.jobs.create(
        model=MODEL, training_file=file_id, method=reinforcement(GRADER)
    )
    until_status(client, job.id, lambda s: s in ("queued", "running"), cluster)
    started = time.monotonic()
    assert str(client.fine_tuning.jobs.pause(job.id).status) == "paused"
    with pytest.raises(openai.ConflictError):
        client.fine_tuning.jobs.pause(job.id)
    assert cluster.get("rlhfjob", job.id, "team-a")["spec"]["runPolicy"]["suspend"] is True  # type: ignore[index]
    wait_for(  # the operator suspends it (its pods go), and it stays paused
        lambda: True if phase(cluster, job.id) == "Suspended" else None,
        timeout=300,
        interval=3,
        what=f"job {job.id} to be Suspended",
    )
    assert str(client.fine_tuning.jobs.retrieve(job.id).status) == "paused"
    resumed = client.fine_tuning.jobs.resume(job.id)
    assert str(resumed.status) in ("queued", "running"), resumed.status
    assert not cluster.get("rlhfjob", job.id, "team-a")["spec"]["runPolicy"]["suspend"]  # type: ignore[index]
    until_status(client, job.id, lambda s: s == "running", cluster)
    took = time.monotonic() - started
    client.fine_tuning.jobs.cancel(job.id)  # the journey has shown the resume: free the CPUs
    return took


def console_screenshot(gateway: Gateway, job_id: str, where: Path) -> Path:
    """The console's page of the finished job in headless Chromium, as the tenant sees it."""
    if not CHROMIUM.exists():
        pytest.skip("needs Debian's chromium (/usr/bin/chromium) for the console")
    sync_api = pytest.importorskip("playwright.sync_api")
    shot = where / "gateway-journey-console.png"
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=str(CHROMIUM),
            headless=True,
            args=["--no-sandbox", "--disable-background-networking", "--disable-gpu"],
        )
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 1000})
            page.goto(f"{gateway.url}/console")
            page.fill("#token", gateway.tokens["team-a"])
            page.click("#token-form button")
            row = page.locator(f"tr.job[data-id='{job_id}']")
            row.wait_for()
            cells = row.locator("td").all_text_contents()
            assert cells[1:3] == ["succeeded", "4/4"], cells
            row.click()
            page.locator("figure.curve[data-metric='reward']").wait_for()
            caption = page.locator("figure.curve[data-metric='reward'] figcaption").text_content()
            assert caption is not None and "at step 4" in caption, caption
            # Cell by cell: the table's text runs the cells together ("...step-0000042reward").
            cells = page.locator("#checkpoints td").all_text_contents()
            assert any(re.search(r"checkpoints/step-0*4$", c.strip()) for c in cells), cells
            page.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()
    assert shot.stat().st_size > 10_000
    return shot
