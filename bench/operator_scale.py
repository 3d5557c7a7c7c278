"""Operator at scale: N RLHFJobs against the Kubernetes API emulator; one JSON line.

    .venv/bin/python bench/operator_scale.py [--jobs 500] [--idle-seconds 30]
        [--waiting | --finished] [--burst 500] [--sample FILE]

The emulator runs in this process; the operator runs as `rlhf-operator run` in its own process,
so its RSS and CPU time are its own. The bench plays KubeRay: each RayJob, once created, is
- running (default): jobDeploymentStatus Running, the job's phase Running;
- `--waiting`: Initializing with a Pending head pod (labelled as KubeRay labels it), for the
  whole idle window: the jobs stay Provisioning, as when a cluster waits for nodes;
- `--finished`: Complete/SUCCEEDED, the jobs Succeeded.
Reported:
- converge_s: from the first create until every job has its RayJob and the phase its mode
  leads to; settled_s: until the operator's last request (kopf's own bookkeeping, events)
  before it went quiet;
- create_to_rayjob_p50_s / _p95_s: per job, from its create to its RayJob's creation;
- operator_rss_mb: at the end (after the idle window, and the burst if any);
  operator_peak_rss_mb: the most it held (VmHWM);
- api_requests_per_job: every request the operator process made (kopf's and ours) until
  it settled, divided by N; `requests` breaks them down by verb and resource;
- idle_requests: requests during `--idle-seconds` after it settled (the goal is 0: an idle job
  costs nothing beyond the open watches);
- operator_cpu_s / operator_cpu_ms_per_job: the operator process's own CPU time (user + system,
  from /proc) from its start until it settled, not disturbed by the emulator sharing the
  cores; idle_cpu_s: its CPU time during the idle window; operator_faults_per_job: the pages
  it faulted in meanwhile (memory its allocator took from the kernel anew: a cost no profile
  of Python frames shows), per job (burst_operator_faults_per_job for the burst).
- with `--burst B`: after the idle window, B more jobs created at once beside the N settled
  ones (a platform's queue when a batch of tenants submits): burst_create_to_rayjob_p50_s /
  _p95_s, burst_converge_s, burst_operator_cpu_ms_per_job; burst_create_loop_s (the creates
  themselves), burst_all_rayjobs_s (until the last RayJob), burst_emulator_cpu_s (this
  process's CPU meanwhile: the emulator's share of the two cores).
`--sample FILE` writes where the operator's CPU time goes (SIGPROF sampling, stdlib only: the
share of samples per function, self and inclusive), without cProfile's cost per call; read
cProfile's figures (`--profile FILE`, `python -m pstats FILE`) with that in mind: its cost per
call makes cheap functions called often (deep copies, validators) look several times dearer.
A wait that times out still prints the figures measured so far (with `timed_out` saying which
wait) and exits 1. The operator is stopped however the bench ends: on an exception, on
SIGTERM/SIGINT, and (PR_SET_PDEATHSIG) even when the bench is killed outright.
Goals (issue 24): 5,000 jobs converge <= 60 s, p50 create -> RayJob <= 2 s for a burst of 500
beside them, <= 12 requests per job, 0 idle requests.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import gc
import json
import os
import pathlib
import signal
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
MODES = {  # mode -> (the RayJob status KubeRay would write, the job phase it leads to)
    "running": ({"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"}, "Running"),
    "waiting": ({"jobDeploymentStatus": "Initializing"}, "Provisioning"),
    "finished": (
        {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED", "endTime": "<now>"},
        "Succeeded",
    ),
}
PR_SET_PDEATHSIG = 1
# Run before the operator (`--sample FILE`): SIGPROF every 5 ms of the process's CPU time
# records the Python stack it interrupts; at exit, the share of samples per function, self and
# inclusive. Unlike cProfile it costs nothing per call (cheap functions called often do not
# look expensive), and unlike a sampling thread it counts CPU, not waits for the GIL.
SAMPLER = """import atexit, collections, signal
_self, _incl, _n = collections.Counter(), collections.Counter(), [0]
def _where(f):
    return f"{{f.f_code.co_qualname}} ({{f.f_code.co_filename.split('site-packages/')[-1]}})"
def _sample(signum, frame):
    _n[0] += 1
    _self[_where(frame)] += 1
    seen = set()
    while frame is not None:
        seen.add(_where(frame))
        frame = frame.f_back
    _incl.update(seen)
signal.signal(signal.SIGPROF, _sample)
signal.setitimer(signal.ITIMER_PROF, 0.005, 0.005)
def _dump():
    signal.setitimer(signal.ITIMER_PROF, 0, 0)
    with open({path!r}, "w") as out:
        n = max(_n[0], 1)
        out.write(f"{{_n[0]}} samples (5 ms of CPU each)\\n-- self\\n")
        for where, k in _self.most_common(40):
            out.write(f"{{100 * k / n:5.1f}}% {{where}}\\n")
        out.write("-- inclusive\\n")
        for where, k in _incl.most_common(80):
            out.write(f"{{100 * k / n:5.1f}}% {{where}}\\n")
atexit.register(_dump)
"""
# Run before the operator (`--tracemalloc FILE`): at its exit, the 30 largest allocation sites
# still alive, by the operator's own frames where they appear in the traceback.
# Tracing starts after the imports (traced, they take minutes).
TRACEMALLOC = """import atexit, tracemalloc
import rlhf_operator.handlers.start
tracemalloc.start(12)
def _dump():
    snapshot = tracemalloc.take_snapshot()
    with open({path!r}, "w") as out:
        for stat in snapshot.statistics("traceback")[:30]:
            out.write(f"{{stat.size / 2**20:8.2f}} MiB {{stat.count:8d}} blocks\\n")
            ours = [f for f in stat.traceback if "rlhf_operator" in f.filename]
            for frame in (ours or list(stat.traceback))[-4:]:
                out.write(f"    {{frame.filename}}:{{frame.lineno}}\\n")
atexit.register(_dump)
"""


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


def _stat(pid: int) -> list[str]:
    return pathlib.Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far, from /proc."""
    fields = _stat(pid)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def minor_faults(pid: int) -> int:
    """Pages the process has faulted in so far (memory the allocator took from the kernel
    anew: a cost that does not show in a profile of Python frames)."""
    return int(_stat(pid)[7])


def die_with_parent() -> None:
    """In the operator's process, before exec: SIGTERM when the bench dies, however it dies."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def pending_pod(job: str) -> dict[str, Any]:
    """The head pod KubeRay would make from our template, waiting for a node."""
    return {
        "metadata": {
            "name": f"{job}-r0-head",
            "labels": {"rlhf.dev/job": job, "rlhf.dev/attempt": "0"},
        },
        "spec": {"containers": [{"name": "ray-head", "image": "rlhf-trainer:bench"}]},
    }


class Timeline:
    """First sight of each job's RayJob and of the phase its mode leads to, from in-process
    watchers (they are not API requests, so they do not disturb the counts). Plays KubeRay:
    each new RayJob gets its mode's status (and, waiting, a Pending head pod)."""

    def __init__(self, k8s: Emulator, mode: str) -> None:
        self.k8s, self.mode = k8s, mode
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
        meta = obj["metadata"]
        job = meta.get("labels", {}).get("rlhf.dev/job")
        if not job or job in self.ray_job_at:
            return
        self.ray_job_at[job] = time.monotonic()
        status = dict(MODES[self.mode][0])
        if "endTime" in status:
            status["endTime"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        namespace = meta["namespace"]
        if self.mode == "waiting":
            self.k8s.create("pods", pending_pod(job), namespace)
            self.k8s.patch_status("pods", f"{job}-r0-head", {"phase": "Pending"}, namespace)
        self.k8s.patch_status(RAYJOBS, meta["name"], status, namespace)

    def _job(self, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        phase = (obj.get("status") or {}).get("phase")
        if name not in self.status_at and phase == MODES[self.mode][1]:
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


async def bench(
    jobs: int,
    mode: str,
    idle_seconds: float,
    timeout: float,
    profile: pathlib.Path | None = None,
    tracemalloc_file: pathlib.Path | None = None,
    sample: pathlib.Path | None = None,
    burst: int = 0,
) -> dict[str, Any]:
    figures: dict[str, Any] = {"bench": "operator_scale", "jobs": jobs, "mode": mode}
    with tempfile.TemporaryDirectory() as tmp:
        kubeconfig = pathlib.Path(tmp) / "kubeconfig"
        async with run_emulator(crds=project_crds(), kubeconfig=kubeconfig) as k8s:
            env = {
                **os.environ,
                "KUBECONFIG": str(kubeconfig),
                "RLHF_OPERATOR_DEFAULT_TRAINER_IMAGE": "rlhf-trainer:bench",
                "RLHF_OPERATOR_METRICS_PORT": os.environ.get("BENCH_METRICS_PORT", "0"),
                "RLHF_OPERATOR_HEALTH_PORT": "0",
                "RLHF_OPERATOR_LOG_LEVEL": "WARNING",
            }
            code = "from rlhf_operator.cli import main; main(['run'])"
            if tracemalloc_file is not None:  # written when the operator stops (SIGTERM)
                code = TRACEMALLOC.format(path=str(tracemalloc_file)) + code
            if sample is not None:  # written when the operator stops (SIGTERM)
                code = SAMPLER.format(path=str(sample)) + code
            command = [sys.executable, "-c", code]
            if profile is not None:  # cProfile writes it when the operator stops (SIGTERM)
                script = pathlib.Path(tmp) / "operator_main.py"
                script.write_text(code + "\n")
                command[1:] = ["-m", "cProfile", "-o", str(profile), str(script)]
            log = open(pathlib.Path(tmp) / "operator.log", "wb")  # noqa: SIM115
            operator = subprocess.Popen(
                command,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent,  # only a prctl, before exec
            )
            timeline = Timeline(k8s, mode)
            try:
                await measure(
                    k8s, operator.pid, timeline, jobs, idle_seconds, timeout, figures, burst
                )
            except TimeoutError as err:
                figures["timed_out"] = str(err)
            finally:
                timeline.stop()
                operator.terminate()
                try:
                    operator.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    operator.kill()
                log.close()
                if "timed_out" in figures:  # the operator's last words say why, often
                    tail = (pathlib.Path(tmp) / "operator.log").read_text(errors="replace")
                    print(tail[-3000:], file=sys.stderr)
            figures["rayjobs"] = len(k8s.list(RAYJOBS, "default"))
    figures["cpus"] = os.cpu_count()
    return figures


async def freeze_what_survives(every: float = 1.0) -> None:
    """This process plays the API server, whose collector never stops it: Python's, scanning
    the store as it grows to 5,000 jobs' objects, paused the emulator 0.1-0.8 s at a time (6 s
    in all over 5,000 jobs), and the operator waited on its answers meanwhile. What survives a
    second is frozen out of later collections; what dies young is still collected."""
    while True:
        await asyncio.sleep(every)
        gc.freeze()


async def measure(
    k8s: Emulator,
    pid: int,
    timeline: Timeline,
    jobs: int,
    idle_seconds: float,
    timeout: float,
    figures: dict[str, Any],
    burst: int = 0,
) -> None:
    """Fill `figures` as the run goes, so that a wait that times out leaves what it had."""
    # Started: kopf lists and watches RLHFJobs and RayJobs.
    await wait_until(
        lambda: (
            k8s.requests.count("watch", RLHFJOBS) > 0 and k8s.requests.count("watch", RAYJOBS) > 0
        ),
        180,  # a traced operator (--tracemalloc) starts slowly
        "operator watching",
    )
    figures["operator_rss_before_jobs_mb"] = round(rss_mb(pid)[0], 1)
    cpu_start, faults_start = cpu_s(pid), minor_faults(pid)
    timeline.start()
    mark = k8s.requests.mark()
    created_at: dict[str, float] = {}

    def so_far(settled: float | None = None) -> None:
        busy = k8s.requests.counts(since=mark)
        latencies = sorted(timeline.ray_job_at[n] - created_at[n] for n in timeline.ray_job_at)
        rss, peak = rss_mb(pid)
        cpu = cpu_s(pid) - cpu_start
        figures.update(
            {
                "converged_jobs": len(timeline.status_at),
                "rayjobs_seen": len(latencies),
                "operator_rss_mb": round(rss, 1),
                "operator_peak_rss_mb": round(peak, 1),
                "operator_cpu_s": round(cpu, 2),
                "operator_cpu_ms_per_job": round(1000 * cpu / jobs, 2),
                "operator_faults_per_job": round((minor_faults(pid) - faults_start) / jobs, 1),
                "api_requests_per_job": round(sum(busy.values()) / jobs, 2),
                "requests": {f"{v} {r}": n for (v, r), n in sorted(busy.items())},
            }
        )
        if latencies:
            figures["create_to_rayjob_p50_s"] = round(statistics.median(latencies), 3)
            p95 = latencies[int(0.95 * (len(latencies) - 1))]
            figures["create_to_rayjob_p95_s"] = round(p95, 3)
            figures["create_to_rayjob_max_s"] = round(latencies[-1], 3)
        if settled is not None:
            figures["settled_s"] = round(settled - t0, 2)

    freezer = asyncio.create_task(freeze_what_survives())
    t0 = time.monotonic()
    try:
        for i in range(jobs):
            name = f"ppo-{i:04d}"
            k8s.create(RLHFJOBS, job_manifest(name), "default")
            created_at[name] = time.monotonic()
            if i % 25 == 24:
                await asyncio.sleep(0)  # let the server answer meanwhile
        figures["create_loop_s"] = round(time.monotonic() - t0, 2)
        await wait_until(
            lambda: len(timeline.ray_job_at) == jobs and len(timeline.status_at) == jobs,
            timeout,
            f"{jobs} jobs converged",
        )
        converged = max(max(timeline.ray_job_at.values()), max(timeline.status_at.values()))
        figures["converge_s"] = round(converged - t0, 2)
        # Settled: kopf's own bookkeeping (diff-base annotations) and the events lag behind;
        # wait until no request has come for a second.
        settled = await quiet_since(k8s, timeout)
        so_far(settled)
    except TimeoutError:
        so_far()
        raise
    finally:
        freezer.cancel()
    idle_mark, idle_cpu = k8s.requests.mark(), cpu_s(pid)
    await asyncio.sleep(idle_seconds)
    idle = k8s.requests.counts(since=idle_mark)
    figures["idle_seconds"] = idle_seconds
    figures["idle_requests"] = sum(idle.values())
    figures["idle_breakdown"] = {f"{v} {r}": n for (v, r), n in sorted(idle.items())}
    figures["idle_cpu_s"] = round(cpu_s(pid) - idle_cpu, 2)
    figures["operator_rss_mb"], figures["operator_peak_rss_mb"] = map(round1, rss_mb(pid))
    if burst:
        await measure_burst(k8s, pid, timeline, burst, timeout, figures)


async def measure_burst(
    k8s: Emulator,
    pid: int,
    timeline: Timeline,
    burst: int,
    timeout: float,
    figures: dict[str, Any],
) -> None:
    """`burst` new jobs at once beside the settled ones: how soon each gets its RayJob."""
    figures["burst"] = burst
    # This process is the API server's stand-in: its collector scanning the 5,000 settled jobs'
    # objects (the emulator's store) took ~0.8 s of the burst's ~5 s of its CPU, a cost no
    # API server has, which the operator's requests would wait on. Frozen, it scans the new.
    gc.collect()
    gc.freeze()
    names = [f"burst-{i:04d}" for i in range(burst)]
    created_at: dict[str, float] = {}
    cpu, faults = cpu_s(pid), minor_faults(pid)
    bench_cpu = time.process_time()
    t0 = time.monotonic()
    for i, name in enumerate(names):
        k8s.create(RLHFJOBS, job_manifest(name), "default")
        created_at[name] = time.monotonic()
        if i % 25 == 24:
            await asyncio.sleep(0)
    figures["burst_create_loop_s"] = round(time.monotonic() - t0, 2)
    try:
        await wait_until(
            lambda: all(n in timeline.ray_job_at and n in timeline.status_at for n in names),
            timeout,
            f"a burst of {burst} jobs converged",
        )
    finally:
        seen = sorted(
            timeline.ray_job_at[n] - created_at[n] for n in names if n in timeline.ray_job_at
        )
        done = [timeline.status_at[n] for n in names if n in timeline.status_at]
        figures["burst_converged_jobs"] = len(done)
        if len(done) == burst:
            figures["burst_converge_s"] = round(max(done) - t0, 2)
        made = [timeline.ray_job_at[n] for n in names if n in timeline.ray_job_at]
        if len(made) == burst:
            figures["burst_all_rayjobs_s"] = round(max(made) - t0, 2)
        # This process's CPU meanwhile (the emulator, serving the operator): near one core's
        # worth, it, not the operator, may be what the burst waits on.
        figures["burst_emulator_cpu_s"] = round(time.process_time() - bench_cpu, 2)
        if seen:
            figures["burst_create_to_rayjob_p50_s"] = round(statistics.median(seen), 3)
            figures["burst_create_to_rayjob_p95_s"] = round(seen[int(0.95 * (len(seen) - 1))], 3)
        figures["burst_operator_cpu_ms_per_job"] = round(1000 * (cpu_s(pid) - cpu) / burst, 2)
        figures["burst_operator_faults_per_job"] = round((minor_faults(pid) - faults) / burst, 1)
        figures["operator_rss_mb"], figures["operator_peak_rss_mb"] = map(round1, rss_mb(pid))


def round1(value: float) -> float:
    return round(value, 1)


def _stop(signum: int, _: Any) -> None:
    """SIGTERM (a `timeout`, a CI runner) ends the bench like ^C: the operator is stopped."""
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument(
        "--burst",
        type=int,
        default=0,
        help="after the idle window, create this many more jobs at once and time them",
    )
    parser.add_argument(
        "--profile", type=pathlib.Path, help="write the operator's cProfile stats to this file"
    )
    parser.add_argument(
        "--tracemalloc",
        type=pathlib.Path,
        help="write the operator's largest live allocation sites (tracemalloc) to this file",
    )
    parser.add_argument(
        "--sample",
        type=pathlib.Path,
        help="write the operator's sampled profile (share of time per function) to this file",
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--waiting", action="store_const", dest="mode", const="waiting")
    which.add_argument("--finished", action="store_const", dest="mode", const="finished")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, _stop)
    mode = args.mode or "running"
    result = asyncio.run(
        bench(
            args.jobs,
            mode,
            args.idle_seconds,
            args.timeout,
            args.profile,
            args.tracemalloc,
            args.sample,
            args.burst,
        )
    )
    print(json.dumps(result), flush=True)
    if "timed_out" in result:
        sys.exit(1)


if __name__ == "__main__":
    main()
