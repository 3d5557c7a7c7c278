"""The console: its page and rows over HTTP, and the page itself in headless Chromium
(Debian's chromium driven by Playwright; skipped where either is missing) on a job that the
real operator moved, with a screenshot kept as an artefact (RLHF_TEST_ARTIFACTS, else the
test's tmp_path)."""

from __future__ import annotations

import os
import pathlib
from datetime import UTC, datetime

import httpx
import pytest

from emulated.harness import Cluster

from .harness import Service
from .test_gateway_files import SFT_ROWS
from .test_gateway_jobs import upload
from .test_gateway_progress import running  # noqa: F401  (the real operator behind the gateway)

CHROMIUM = pathlib.Path("/usr/bin/chromium")


async def test_the_page_and_the_rows_it_lists(service: Service) -> None:
    client = service.client("team-a")
    job = await client.fine_tuning.jobs.create(
        model="tiny-llama-random", training_file=await upload(client, SFT_ROWS)
    )
    async with httpx.AsyncClient(base_url=service.url) as http:
        page = await http.get("/console")
        assert page.status_code == 200 and 'id="token-form"' in page.text
        script = await http.get("/console/app.js")
        assert script.headers["content-type"].startswith("text/javascript")
        assert "textContent" in script.text and "innerHTML" not in script.text
        assert (await http.get("/v1/console/jobs")).status_code == 401
        mine = await http.get(
            "/v1/console/jobs", headers={"Authorization": f"Bearer {service.tokens['team-a']}"}
        )
        theirs = await http.get(
            "/v1/console/jobs", headers={"Authorization": f"Bearer {service.tokens['team-b']}"}
        )
    assert [(r["id"], r["status"]) for r in mine.json()["data"]] == [(job.id, "validating_files")]
    assert theirs.json()["data"] == []


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium (/usr/bin/chromium)")
async def test_a_tenant_watches_its_job_in_the_console(
    running: Service,  # noqa: F811
    tmp_path: pathlib.Path,
) -> None:
    playwright_api = pytest.importorskip("playwright.async_api")
    client = running.client("team-a")
    job = await client.fine_tuning.jobs.create(
        model="tiny-llama-random", training_file=await upload(client, SFT_ROWS), suffix="letters"
    )
    cluster = Cluster(running.emulator, "team-a")
    await cluster.until(lambda: cluster.ray_jobs(job.id), "RayJob created")
    cluster.kuberay(f"{job.id}-r0", jobDeploymentStatus="Running", jobStatus="RUNNING")
    await cluster.phase(job.id, "Running")
    history = {
        "reward": [[s, round(0.1 * s, 3)] for s in range(1, 9)],
        "kl": [[s, round(0.01 * s, 3)] for s in range(1, 9)],
        "response_length": [[s, 16 - s] for s in range(1, 9)],
    }
    cluster.trainer_reports(
        job.id,
        {
            "step": 8,
            "totalSteps": 16,
            "progress": "8/16",
            "reward": 0.8,
            "metrics": {"reward": 0.8, "kl": 0.08},
            "history": history,
            "checkpoints": [{"step": 8, "path": "/checkpoints/step-8"}],
            "updatedAt": _now(),
        },
    )
    await cluster.until(
        lambda: (cluster.status(job.id).get("trainer") or {}).get("history"), "history mirrored"
    )

    async with playwright_api.async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=str(CHROMIUM),
            headless=True,
            args=["--no-sandbox", "--disable-background-networking", "--disable-gpu"],
        )
        try:
            page = await browser.new_page(viewport={"width": 1200, "height": 1000})
            await page.goto(f"{running.url}/console")
            await page.fill("#token", running.tokens["team-a"])
            await page.click("#token-form button")
            row = page.locator(f"tr.job[data-id='{job.id}']")
            await row.wait_for()
            cells = await row.locator("td").all_text_contents()
            assert cells[1:4] == ["running", "8/16", "0.800"]
            await row.click()
            await page.locator("figure.curve[data-metric='reward']").wait_for()
            metrics = await page.locator("figure.curve").evaluate_all(
                "els => els.map(e => e.dataset.metric)"
            )
            assert metrics[:3] == ["reward", "kl", "response_length"]
            caption = await page.locator(
                "figure.curve[data-metric='reward'] figcaption"
            ).text_content()
            assert caption is not None and caption.startswith("reward: 0.800 at step 8")
            assert "/checkpoints/step-8" in (
                await page.locator("#checkpoints").text_content() or ""
            )
            assert "Created fine-tuning job" in (await page.locator("#events").text_content() or "")
            shot = pathlib.Path(os.environ.get("RLHF_TEST_ARTIFACTS", tmp_path)) / "console-job.png"
            shot.parent.mkdir(parents=True, exist_ok=True)
            await page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 10_000

            await page.click(".actions button[data-action='pause']")
            await page.locator("#job-title", has_text="paused").wait_for()
            assert cluster.job(job.id)["spec"]["runPolicy"]["suspend"] is True  # type: ignore[index]

            other = await browser.new_page()  # the other tenant sees none of it
            await other.goto(f"{running.url}/console")
            await other.fill("#token", running.tokens["team-b"])
            await other.click("#token-form button")
            await other.locator("#no-jobs").wait_for()
            assert await other.locator("tr.job").count() == 0
        finally:
            await browser.close()
