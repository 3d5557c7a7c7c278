"""Operator at scale: N RLHFJobs against the Kubernetes API emulator; one JSON line.

    .venv/bin/python bench/operator_scale.py [--jobs 500] [--idle-seconds 5]

The emulator runs in this process; the operator runs as `rlhf-operator run` in its own process,
so its RSS is its own. Reported:
- converge_s: from the first create until every job has its RayJob and its status
  (status.allocation written); settled_s: until the operator's last request (kopf's own
  bookkeeping, events) before it went quiet;
- create_to_rayjob_p50_s / _p95_s: per job, from its create to its RayJob's creation;
- operator_rss_mb (after converging) and operator_peak_rss_mb (VmHWM);
- api_requests_per_job: every request the operator process made (kopf's and ours) until
  it settled, divided by N; `requests` breaks them down by verb and resource;
- idle_requests: requests during `--idle-seconds` after it settled (the goal is 0: an idle job
  costs nothing beyond the open watches).
Goals (issue 5): converge <= 60 s, RSS <= 200 MB, no requests for idle jobs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "operator" / "tests"))

from emulator import Emulator, project_crds, run_emulator  # noqa: E402
from emulator.selectors import field_matcher, label_matcher  # noqa: E402

RLHFJOBS = "rlhfjobs.rlhf.dev"
RAYJOBS = "rayjobs.ray.io"


def job_manifest(name: str) -> dict[str, Any]:
    """A PPO job on two 8-GPU nodes (OpenRLHF's 7B layout), typical of a real cluster."""
    return {
        "apiVersion": "rlhf.dev/v1alpha1",
        "kind": "RLHFJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "algorithm": {"name": "ppo"},
            "models": {
                "actor": {"pretrained": "OpenRLHF/Llama-3-8b-sft-mixture"},
                "rewardModels": [{"pretrained": "OpenRLHF/Llama-3-8b-rm-mixture"}],
            },
            "data": {"train": [{"hfId": "OpenRLHF/prompt-collection-v0.1"}]},
            "rollout": {"numEngines": 4},
            "training": {"rolloutBatchSize": 1024, "trainBatchSize": 128, "microTrainBatchSize": 2},
            "placement": {"actorGpus": 4, "criticGpus": 4, "referenceGpus": 2, "rewardGpus": 2},
            "checkpoint": {"storage": {"size": "500Gi"}},
        },
    }


def rss_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of a process in MiB, from /proc."""
    fields = {}
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in {"VmRSS", "VmHWM"}:
            fields[key] = int(value.split()[0]) / 1024
    return fields["VmRSS"], fields["VmHWM"]


class Timeline:
    """First sight of each job's RayJob and of its status, from in-process watchers (they are
    not API requests, so they do not disturb the counts)."""

    def __init__(self, k8s: Emulator) -> None:
        self.k8s = k8s
        self.ray_job_at: dict[str, float] = {}
        self.status_at: dict[str, float] = {}
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        store, registry = self.k8s.store, self.k8s.registry
        for resource, sink in ((RAYJOBS, self._ray_job), (RLHFJOBS, self._job)):
            info = registry.resolve(resource)
            watcher = store.watch(info, None, label_matcher(None), field_matcher(None), store.rv)
            self._tasks.append(asyncio.create_task(self._drain(watcher, sink)))

    async def _drain(self, watcher: Any, sink: Any) -> None:
        while True:
            line = await watcher.queue.get()
            if isinstance(line, bytes):
                sink(json.loads(line)["object"])

    def _ray_job(self, obj: dict[str, Any]) -> None:
        job = obj["metadata"].get("labels", {}).get("rlhf.dev/job")
        if job and job not in self.ray_job_at:
            self.ray_job_at[job] = time.monotonic()

    def _job(self, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        if name not in self.status_at and (obj.get("status") or {}).get("allocation"):
            self.status_at[name] = time.monotonic()

    def stop(self) -> None:
        for task in self._tasks:
            task.cancel()


async def wait_until(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not reached in {timeout} s")
        await asyncio.sleep(0.05)


async def quiet_since(k8s: Emulator, timeout: float, quiet: float = 1.0) -> float:
    """Wait until no request arrived for `quiet` seconds; return when the last one came."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        last = k8s.requests.records[-1].at if k8s.requests.records else 0.0
        if time.monotonic() - last >= quiet:
            return last
        await asyncio.sleep(0.1)
    raise TimeoutError("the operator never went quiet")


async def bench(jobs: int, idle_seconds: float, timeout: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        kubeconfig = pathlib.Path(tmp) / "kubeconfig"
        async with run_emulator(crds=project_crds(), kubeconfig=kubeconfig) as k8s:
            env = {
                **os.environ,
                "KUBECONFIG": str(kubeconfig),
                "RLHF_OPERATOR_DEFAULT_TRAINER_IMAGE": "rlhf-trainer:bench",
                "RLHF_OPERATOR_METRICS_PORT": "0",
                "RLHF_OPERATOR_HEALTH_PORT": "0",
                "RLHF_OPERATOR_LOG_LEVEL": "WARNING",
            }
            command = [sys.executable, "-c", "from rlhf_operator.cli import main; main(['run'])"]
            log = open(pathlib.Path(tmp) / "operator.log", "wb")  # noqa: SIM115
            operator = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
            try:
                # Started: kopf lists and watches RLHFJobs and RayJobs.
                await wait_until(
                    lambda: (
                        k8s.requests.count("watch", RLHFJOBS) > 0
                        and k8s.requests.count("watch", RAYJOBS) > 0
                    ),
                    60,
                    "operator watching",
                )
                rss_idle_start, _ = rss_mb(operator.pid)
                timeline = Timeline(k8s)
                timeline.start()
                mark = k8s.requests.mark()
                created_at: dict[str, float] = {}
                t0 = time.monotonic()
                for i in range(jobs):
                    name = f"ppo-{i:04d}"
                    k8s.create(RLHFJOBS, job_manifest(name), "default")
                    created_at[name] = time.monotonic()
                    if i % 25 == 24:
                        await asyncio.sleep(0)  # let the server answer meanwhile
                create_s = time.monotonic() - t0
                await wait_until(
                    lambda: len(timeline.ray_job_at) == jobs and len(timeline.status_at) == jobs,
                    timeout,
                    f"{jobs} jobs converged",
                )
                converged = max(max(timeline.ray_job_at.values()), max(timeline.status_at.values()))
                # Settled: kopf's own bookkeeping (diff-base annotations) and the events lag
                # behind; wait until no request has come for a second.
                settled = await quiet_since(k8s, timeout)
                busy_counts = k8s.requests.counts(since=mark)
                idle_mark = k8s.requests.mark()
                await asyncio.sleep(idle_seconds)
                idle = k8s.requests.counts(since=idle_mark)
                rss, peak = rss_mb(operator.pid)
                timeline.stop()
            finally:
                operator.terminate()
                try:
                    operator.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    operator.kill()
                log.close()
            latencies = sorted(timeline.ray_job_at[n] - created_at[n] for n in created_at)
            rayjobs = len(k8s.list(RAYJOBS, "default"))
    total = sum(busy_counts.values())
    return {
        "bench": "operator_scale",
        "jobs": jobs,
        "converge_s": round(converged - t0, 2),
        "settled_s": round(settled - t0, 2),
        "create_loop_s": round(create_s, 2),
        "create_to_rayjob_p50_s": round(statistics.median(latencies), 3),
        "create_to_rayjob_p95_s": round(latencies[int(0.95 * (len(latencies) - 1))], 3),
        "create_to_rayjob_max_s": round(latencies[-1], 3),
        "operator_rss_mb": round(rss, 1),
        "operator_peak_rss_mb": round(peak, 1),
        "operator_rss_before_jobs_mb": round(rss_idle_start, 1),
        "api_requests_per_job": round(total / jobs, 2),
        "requests": {f"{v} {r}": n for (v, r), n in sorted(busy_counts.items())},
        "idle_seconds": idle_seconds,
        "idle_requests": sum(idle.values()),
        "idle_breakdown": {f"{v} {r}": n for (v, r), n in sorted(idle.items())},
        "rayjobs": rayjobs,
        "cpus": os.cpu_count(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--idle-seconds", type=float, default=5.0)
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()
    result = asyncio.run(bench(args.jobs, args.idle_seconds, args.timeout))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
