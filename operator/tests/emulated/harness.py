"""Running the operator against the emulator, and acting as KubeRay and as the trainer."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import os
import pathlib
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import aiohttp
import yaml

from emulator import Emulator
from rlhf_operator.builders.common import report_name
from rlhf_operator.handlers.start import run_operator
from rlhf_operator.settings import OperatorSettings
from rlhf_trainer.config.report import OUTCOME_KEY, PROGRESS_KEY

RLHFJOBS = "rlhfjobs.rlhf.dev"
RAYJOBS = "rayjobs.ray.io"
REPO = pathlib.Path(__file__).resolve().parents[3]
FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "pure" / "fixtures"

# Fast retries so that waiting tests stay short; everything else as in production.
TEST_SETTINGS = OperatorSettings(
    default_trainer_image="rlhf-trainer:test",
    metrics_port=0,
    health_port=0,
    dependency_retry_seconds=1.0,
    first_status_grace_seconds=0.5,
    api_retry_seconds=0.5,
    instance="test",
)
TEST_ENV = {
    "RLHF_OPERATOR_DEFAULT_TRAINER_IMAGE": "rlhf-trainer:test",
    "RLHF_OPERATOR_METRICS_PORT": "0",
    "RLHF_OPERATOR_HEALTH_PORT": "0",
    "RLHF_OPERATOR_DEPENDENCY_RETRY_SECONDS": "1",
    "RLHF_OPERATOR_FIRST_STATUS_GRACE_SECONDS": "0.5",
    "RLHF_OPERATOR_API_RETRY_SECONDS": "0.5",
    "RLHF_OPERATOR_LOG_LEVEL": "WARNING",
}


class OperatorThread:
    """The operator as `rlhf-operator run` starts it, on its own event loop in a thread.

    Its own loop, because kopf, when stopping, cancels every task of its loop that it did not
    start with (a pytest fixture's teardown would be one of them)."""

    def __init__(self, settings: OperatorSettings = TEST_SETTINGS) -> None:
        self.settings = settings
        self.loop = asyncio.new_event_loop()
        self._stop = asyncio.Event()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="operator", daemon=True)

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        ready = asyncio.Event()

        async def run() -> None:
            async def signal_ready() -> None:
                await ready.wait()
                self._ready.set()

            waiter = asyncio.create_task(signal_ready())
            try:
                await run_operator(self.settings, stop_flag=self._stop, ready_flag=ready)
            finally:
                waiter.cancel()

        try:
            self.loop.run_until_complete(run())
        except BaseException as err:  # reported by stop()
            self._error = err
        finally:
            self._ready.set()
            self.loop.close()

    async def start(self) -> None:
        self._thread.start()
        ok = await asyncio.to_thread(self._ready.wait, 20)
        if not ok or self._error is not None:
            raise RuntimeError(f"operator did not start: {self._error!r}")

    async def stop(self) -> None:
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self._stop.set)
            await asyncio.to_thread(self._thread.join, 20)
        if self._error is not None:
            raise self._error


@contextlib.asynccontextmanager
async def operator_running(settings: OperatorSettings = TEST_SETTINGS) -> AsyncIterator[None]:
    thread = OperatorThread(settings)
    await thread.start()
    try:
        yield
    finally:
        await thread.stop()


@dataclass
class OperatorProcess:
    """`rlhf-operator run` as a real process: for killing it with SIGKILL."""

    process: subprocess.Popen[bytes]

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()


def start_operator_process(kubeconfig: pathlib.Path, log: pathlib.Path) -> OperatorProcess:
    env = {**os.environ, **TEST_ENV, "KUBECONFIG": str(kubeconfig)}
    command = [sys.executable, "-c", "from rlhf_operator.cli import main; main(['run'])"]
    with open(log, "ab") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    return OperatorProcess(process)


def manifest(name: str = "dpo-cpu", **metadata: Any) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((FIXTURES / f"{name}.yaml").read_text())
    doc["metadata"].update(metadata)
    return doc


def ppo_manifest(name: str, namespace: str = "default", **spec: Any) -> dict[str, Any]:
    """A small PPO job on one 4-GPU pod, with whatever spec sections are given on top."""
    body: dict[str, Any] = {
        "apiVersion": "rlhf.dev/v1alpha1",
        "kind": "RLHFJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "algorithm": {"name": "ppo"},
            "models": {
                "actor": {"pretrained": "org/actor"},
                "rewardModels": [{"pretrained": "org/rm"}],
            },
            "data": {"train": [{"hfId": "org/prompts"}]},
            "training": {"rolloutBatchSize": 64, "trainBatchSize": 32, "microTrainBatchSize": 1},
            "placement": {"gpusPerNode": 4},
        },
    }
    for key, value in spec.items():
        body["spec"][key] = {**body["spec"].get(key, {}), **value}
    return body


class Cluster:
    """The emulator seen as a cluster: read objects, and play KubeRay and the trainer."""

    def __init__(self, k8s: Emulator, namespace: str = "default") -> None:
        self.k8s = k8s
        self.namespace = namespace

    def job(self, name: str) -> dict[str, Any] | None:
        return self.k8s.find(RLHFJOBS, name, self.namespace)

    def status(self, name: str) -> dict[str, Any]:
        return (self.job(name) or {}).get("status") or {}

    def conditions(self, name: str) -> dict[str, tuple[str, str]]:
        return {
            c["type"]: (c["status"], c["reason"]) for c in self.status(name).get("conditions", [])
        }

    def ray_jobs(self, job: str) -> list[dict[str, Any]]:
        return self.k8s.list(RAYJOBS, self.namespace, label_selector=f"rlhf.dev/job={job}")

    def children(self, job: str) -> dict[str, list[str]]:
        """kind -> names of every object labelled with this job."""
        found: dict[str, list[str]] = {}
        for resource in (
            "serviceaccounts",
            "configmaps",
            "secrets",
            "networkpolicies.networking.k8s.io",
            "persistentvolumeclaims",
            "roles.rbac.authorization.k8s.io",
            "rolebindings.rbac.authorization.k8s.io",
            RAYJOBS,
        ):
            selector = f"rlhf.dev/job={job}"
            for obj in self.k8s.list(resource, self.namespace, label_selector=selector):
                found.setdefault(obj["kind"], []).append(obj["metadata"]["name"])
        return found

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.k8s.create(RLHFJOBS, body, self.namespace)

    def edit_spec(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return self.k8s.patch(RLHFJOBS, name, {"spec": patch}, self.namespace)

    def kuberay(self, ray_job: str, **status: Any) -> None:
        """KubeRay's part: move a RayJob's status."""
        self.k8s.patch_status(RAYJOBS, ray_job, status, self.namespace)

    def trainer_reports(self, job: str, report: dict[str, Any]) -> None:
        """The trainer's part: merge-patch its report ConfigMap as `rlhf_trainer.reporting.kube`
        does, the progress and the outcome each under its own key."""
        data: dict[str, str] = {}
        progress = {k: v for k, v in report.items() if k != "outcome"}
        if progress:
            data[PROGRESS_KEY] = json.dumps(progress)
        if "outcome" in report:
            data[OUTCOME_KEY] = json.dumps(report["outcome"])
        self.k8s.patch("configmaps", report_name(job), {"data": data}, self.namespace)

    def fails_for_good(self, job: str, why: str, attempt: int = 0) -> None:
        """The trainer says a retry cannot help (InvalidSpec), then KubeRay sees it fail."""
        outcome = {"attempt": attempt, "exitCode": 78, "failureClass": "InvalidSpec"}
        self.trainer_reports(job, {"outcome": {**outcome, "message": why}})
        end = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        failed = {"jobDeploymentStatus": "Failed", "jobStatus": "FAILED", "reason": "AppFailed"}
        self.kuberay(f"{job}-r{attempt}", **failed, endTime=end)

    def reasons(self, job: str) -> list[str]:
        return [e.reason for e in self.k8s.events(self.namespace, about=job)]

    async def until(self, predicate: Callable[[], Any], what: str, timeout: float = 20.0) -> Any:
        return await self.k8s.wait_for(predicate, timeout=timeout, what=what)

    async def phase(self, name: str, phase: str, timeout: float = 20.0) -> dict[str, Any]:
        status: dict[str, Any] = await self.until(
            lambda: (s := self.status(name)).get("phase") == phase and copy.deepcopy(s),
            f"{name} phase {phase} (now {self.status(name).get('phase')})",
            timeout,
        )
        return status

    async def printer_row(self, name: str) -> dict[str, Any]:
        """`kubectl get rlhfjobs` through the server-side Table API."""
        headers = {"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}
        url = f"{self.k8s.url}/apis/rlhf.dev/v1alpha1/namespaces/{self.namespace}/rlhfjobs/{name}"
        async with aiohttp.ClientSession() as session, session.get(url, headers=headers) as reply:
            table = await reply.json()
        names = [c["name"] for c in table["columnDefinitions"]]
        return dict(zip(names, table["rows"][0]["cells"], strict=True))
