"""One pod's life on the node, as a kubelet's pod worker lives it: pull (map) the images, mount
the volumes, start the sandbox, run the init containers in order, then the containers with
their restart policy and back-off, probe them, and stop everything on deletion (each
container's preStop hook, then SIGTERM to its PID 1, SIGKILL when the grace period is spent).
The pod's status in the API follows every step with the kubelet's phases, conditions,
container states, reasons and messages.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import images, plans
from .containers import Ctr, qos_class
from .events import now
from .podspec import ConfigError
from .probes import run_probe

if TYPE_CHECKING:
    from .kubelet import Kubelet

JSON = dict[str, Any]
log = logging.getLogger("substrate.kubelet")
RETRY_SECONDS = 2.0  # a pod waiting for a Secret, ConfigMap or volume is retried this often
BACKOFF_START, BACKOFF_MAX = 10.0, 300.0
# What the kubelet leaves a container for SIGTERM when its preStop hook took the whole grace.
MIN_GRACE_AFTER_HOOK = 2.0


class PodWorker:
    def __init__(self, kubelet: Kubelet, pod: JSON) -> None:
        self.kubelet = kubelet
        self.pod = pod
        meta = pod["metadata"]
        self.uid, self.namespace, self.name = meta["uid"], meta["namespace"], meta["name"]
        self.dir = kubelet.cluster.state / "pods" / f"{self.namespace}_{self.name}_{self.uid[:8]}"
        spec = pod.get("spec") or {}
        self.policy = spec.get("restartPolicy", "Always")
        self.init = [Ctr(c, True) for c in spec.get("initContainers") or []]
        self.main = [Ctr(c, False) for c in spec.get("containers") or []]
        self.grace = float(spec.get("terminationGracePeriodSeconds", 30))
        self.stopping = asyncio.Event()
        self.changed = asyncio.Event()
        self.sandbox: Any = None
        self.volumes: dict[str, tuple[Path, bool]] = {}
        self.files: dict[str, Path] = {}
        self.phase = "Pending"
        self.reason = self.message = ""
        self.initialized = False
        self.started_at = now()
        self.transitions: dict[str, str] = {}
        self.published: JSON | None = None

    # --- API status ---------------------------------------------------------------------------

    def _condition(self, kind: str, ok: bool) -> JSON:
        status = "True" if ok else "False"
        key = f"{kind}={status}"
        if key not in self.transitions:
            self.transitions = {
                k: v for k, v in self.transitions.items() if k.split("=")[0] != kind
            }
            self.transitions[key] = now()
        return {"type": kind, "status": status, "lastTransitionTime": self.transitions[key]}

    def status(self) -> JSON:
        ready = bool(self.main) and all(c.ready and "running" in c.state for c in self.main)
        status: JSON = {
            "phase": self.phase,
            "conditions": [
                self._condition("PodReadyToStartContainers", self.sandbox is not None),
                self._condition("Initialized", self.initialized),
                self._condition("ContainersReady", ready),
                self._condition("Ready", ready),
                {"type": "PodScheduled", "status": "True"},
            ],
            "hostIP": self.kubelet.cluster.api_host,
            "hostIPs": [{"ip": self.kubelet.cluster.api_host}],
            "startTime": self.started_at,
            "qosClass": qos_class(self.pod),
            "containerStatuses": [c.status(self.uid) for c in self.main],
        }
        if self.init:
            status["initContainerStatuses"] = [c.status(self.uid) for c in self.init]
        if self.reason:
            status.update(reason=self.reason, message=self.message)
        if self.sandbox is not None:
            status["podIP"] = self.sandbox.ip
            status["podIPs"] = [{"ip": self.sandbox.ip}]
        return status

    def publish(self) -> None:
        status = self.status()
        if status != self.published:
            self.published = status
            self.kubelet.set_status(self.pod, status)
        self.changed.set()

    def event(self, event_type: str, reason: str, message: str) -> None:
        self.kubelet.recorder.record(self.pod, "Pod", event_type, reason, message)

    # --- the worker -----------------------------------------------------------------------------

    def stop(self, grace: float | None) -> None:
        if grace is not None:
            self.grace = min(self.grace, grace) if self.stopping.is_set() else grace
        self.stopping.set()
        self.changed.set()

    async def _pause(self, seconds: float) -> bool:
        """Sleep; True when the pod is being stopped meanwhile."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), seconds)
        return self.stopping.is_set()

    async def run(self) -> None:
        try:
            if await self._prepare():
                await self._run_init() and await self._run_main()
        except Exception as err:  # the substrate's own failure: said on the pod, not hidden
            log.exception("pod %s/%s failed in the substrate", self.namespace, self.name)
            self.phase, self.reason = "Failed", "SubstrateError"
            self.message = f"the local substrate could not run this pod: {err}"
        finally:
            await self._teardown()

    async def _prepare(self) -> bool:
        for c in [*self.init, *self.main]:
            try:
                c.image = self.kubelet.images(str(c.spec.get("image", "")))
            except images.ImageError as err:
                c.state = {"waiting": {"reason": err.reason, "message": err.message}}
                self.event("Warning", "Failed", err.message)
        if any(c.image is None for c in [*self.init, *self.main]):
            self.publish()
            await self.stopping.wait()
            return False
        while True:
            try:
                self.volumes, memory = plans.prepare_volumes(
                    self.kubelet.cluster, self.pod, self.dir, self.kubelet.lookup
                )
                self.files = self.kubelet.kubelet_files(self.pod, self.dir)
                break
            except ConfigError as err:
                self.event("Warning", err.reason, err.message)
                self.publish()
                if await self._pause(RETRY_SECONDS):
                    return False
        plan = self.dir / "sandbox.json"
        plan.write_text(
            json.dumps(
                {
                    "hostname": self.name[:63],
                    "memoryVolumes": memory,
                    "ready": str(self.dir / "ready"),
                }
            )
        )
        (self.dir / "ready").unlink(missing_ok=True)
        self.sandbox = await self.kubelet.runtime.start_sandbox(
            plan, self.dir / "ready", f"rsv{self.uid.replace('-', '')[:10]}"
        )
        self.kubelet.write_hosts(self.pod, self.dir, self.sandbox.ip)
        self.publish()
        return True

    async def _start(self, c: Ctr) -> bool:
        """Start (or restart) a container; False when its config is missing (retried later)."""
        assert c.image is not None
        c.directory = self.dir / "containers" / f"{c.name}-{c.restarts}"
        c.directory.mkdir(parents=True, exist_ok=True)
        try:
            plan = plans.container_plan(
                self.kubelet.cluster,
                self.pod_with_ip(),
                c.spec,
                c.image,
                self.kubelet.lookup,
                volumes=self.volumes,
                kubelet_files=self.files,
                container_dir=c.directory,
            )
        except ConfigError as err:
            if c.state.get("waiting", {}).get("message") != err.message:
                self.event("Warning", "Failed", f"Error: {err.message}")
            c.state = {"waiting": {"reason": err.reason, "message": err.message}}
            self.publish()
            return False
        c.ids = (plan["uid"], plan["gid"])
        (c.directory / "plan.json").write_text(json.dumps(plan))
        logs = self.dir / "logs" / c.name
        logs.mkdir(parents=True, exist_ok=True)
        c.process = await self.kubelet.runtime.start_container(
            self.sandbox, c.directory / "plan.json", logs / f"{c.restarts}.log"
        )
        c.state = {"running": {"startedAt": now()}}
        c.ready = "readinessProbe" not in c.spec
        self.event("Normal", "Started", f"Started container {c.name}")
        for kind in ("readinessProbe", "livenessProbe"):
            if kind in c.spec and not c.init:
                c.probes.append(asyncio.create_task(self._probe(c, kind, c.spec[kind])))
        self.publish()
        return True

    def pod_with_ip(self) -> JSON:
        """The pod as the downward API sees it (status.podIP/hostIP are known by now)."""
        return {**self.pod, "status": {**(self.pod.get("status") or {}), **self.status()}}

    async def _exited(self, c: Ctr) -> int:
        assert c.process is not None and c.directory is not None
        code = await c.process.wait()
        for task in c.probes:
            task.cancel()
        c.probes.clear()
        code = 128 - code if code < 0 else code  # killed by a signal: 128 + its number
        start_error = (c.directory / "start-error").read_text().strip()
        started = c.state.get("running", {}).get("startedAt", now())
        reason = "StartError" if start_error else ("Completed" if code == 0 else "Error")
        terminated: JSON = {
            "exitCode": code,
            "reason": reason,
            "startedAt": started,
            "finishedAt": now(),
        }
        if start_error:
            terminated["message"] = start_error
        c.state, c.ready, c.process = {"terminated": terminated}, False, None
        self.publish()
        return code

    def _backoff(self, c: Ctr) -> None:
        c.last_state = c.state
        delay = min(BACKOFF_MAX, BACKOFF_START * 2 ** max(0, c.restarts - 1)) if c.restarts else 0
        c.restarts += 1
        c.restart_at = time.monotonic() + delay
        if delay:
            message = f"back-off {delay:g}s restarting failed container={c.name} pod={self.name}"
            c.state = {"waiting": {"reason": "CrashLoopBackOff", "message": message}}
            self.event("Warning", "BackOff", f"Back-off restarting failed container {c.name}")

    async def _run_init(self) -> bool:
        for c in self.init:
            while True:
                if not await self._start(c):
                    if await self._pause(RETRY_SECONDS):
                        return False
                    continue
                waiter = asyncio.create_task(self._exited(c))
                stopper = asyncio.create_task(self.stopping.wait())
                await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
                stopper.cancel()
                if not waiter.done():
                    waiter.cancel()
                    return False
                if waiter.result() == 0:
                    break
                if self.policy == "Never":
                    self.phase = "Failed"
                    self.publish()
                    return False
                self._backoff(c)
                self.publish()
                if c.restart_at and await self._pause(c.restart_at - time.monotonic()):
                    return False
        self.initialized = True
        self.publish()
        return True

    async def _run_main(self) -> bool:
        for c in self.main:
            c.restart_at = time.monotonic()
        waiters: dict[asyncio.Task[int], Ctr] = {}
        try:
            return await self._supervise(waiters)
        finally:
            for task in waiters:  # on a stop, _teardown kills the containers and records it
                task.cancel()

    async def _supervise(self, waiters: dict[asyncio.Task[int], Ctr]) -> bool:
        while not self.stopping.is_set():
            for c in self.main:
                due = c.restart_at is not None and c.restart_at <= time.monotonic()
                if c.process is None and not c.done and due:
                    if await self._start(c):
                        c.restart_at = None
                        waiters[asyncio.create_task(self._exited(c))] = c
                    else:
                        c.restart_at = time.monotonic() + RETRY_SECONDS
            if all(c.done for c in self.main):
                self.phase = (
                    "Succeeded"
                    if all(c.state["terminated"]["exitCode"] == 0 for c in self.main)
                    else "Failed"
                )
                self.publish()
                return True
            if any("running" in c.state or c.last_state for c in self.main):
                self.phase = "Running"
            self.publish()
            self.changed.clear()
            pending = [c.restart_at for c in self.main if c.restart_at is not None]
            timeout = max(0.05, min(pending) - time.monotonic()) if pending else None
            changed = asyncio.create_task(self.changed.wait())
            finished, _ = await asyncio.wait(
                {*waiters, changed}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
            changed.cancel()
            for task in finished & set(waiters):
                c = waiters.pop(task)
                code = task.result()
                if self.policy == "Always" or (self.policy == "OnFailure" and code != 0):
                    self._backoff(c)
                else:
                    c.done = True
        return False

    async def _probe(self, c: Ctr, kind: str, probe: JSON) -> None:
        await asyncio.sleep(float(probe.get("initialDelaySeconds", 0)))
        period = float(probe.get("periodSeconds", 10))
        fails, passes = 0, 0
        while c.process is not None:
            ok, why = await run_probe(
                probe,
                container=c.spec,
                pod_ip=self.sandbox.ip,
                init_pid=self.kubelet.runtime.init_pid(c.process) if c.process else None,
                uid=c.ids[0],
                gid=c.ids[1],
            )
            fails, passes = (0, passes + 1) if ok else (fails + 1, 0)
            if kind == "readinessProbe":
                if ok and passes >= int(probe.get("successThreshold", 1)) and not c.ready:
                    c.ready = True
                    self.publish()
                elif not ok and fails >= int(probe.get("failureThreshold", 3)) and c.ready:
                    c.ready = False
                    self.publish()
            elif not ok and fails >= int(probe.get("failureThreshold", 3)) and c.process:
                self.event("Warning", "Killing", f"Container {c.name} failed liveness probe")
                await self._kill(c, self.grace)
                return
            if not ok:
                self.event("Warning", "Unhealthy", f"{kind[:-5].title()} probe failed: {why}")
            await asyncio.sleep(period)

    async def _kill(self, c: Ctr, grace: float) -> None:
        process = c.process
        if process is None or process.returncode is not None:
            return
        started = time.monotonic()
        if not c.init and await self._pre_stop(c, grace):
            grace = max(MIN_GRACE_AFTER_HOOK, grace - (time.monotonic() - started))
        if process.returncode is not None:
            return  # the hook ended it (`ray stop`)
        self.kubelet.runtime.signal(process, signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(process.wait()), grace)
        self.kubelet.runtime.signal(process, signal.SIGKILL)
        await process.wait()

    async def _pre_stop(self, c: Ctr, grace: float) -> bool:
        """The container's preStop hook, if it has one (False: none), within `grace` seconds
        (the kubelet kills a hook still running then); a failure is a Warning Event, and the
        container is stopped all the same."""
        hook = (c.spec.get("lifecycle") or {}).get("preStop") or {}
        if not hook:
            return False
        if "sleep" in hook:
            await asyncio.sleep(min(grace, float(hook["sleep"].get("seconds", 0))))
            return True
        plan = json.loads((c.directory / "plan.json").read_text()) if c.directory else {}
        ok, why = await run_probe(
            {**hook, "timeoutSeconds": grace},
            container=c.spec,
            pod_ip=self.sandbox.ip if self.sandbox is not None else "",
            init_pid=self.kubelet.runtime.init_pid(c.process) if c.process else None,
            uid=c.ids[0],
            gid=c.ids[1],
            env=plan.get("env"),
        )
        if not ok:
            message = f'PreStopHook failed for container "{c.name}" in pod "{self.name}": {why}'
            self.event("Warning", "FailedPreStopHook", message)
        return True

    async def _teardown(self) -> None:
        running = [c for c in [*self.init, *self.main] if c.process is not None]
        if running:
            self.event(
                "Normal", "Killing", f"Stopping container(s) {', '.join(c.name for c in running)}"
            )
        await asyncio.gather(*(self._kill(c, self.grace) for c in running))
        for c in running:
            if c.process is not None:
                await self._exited(c)
        if self.sandbox is not None:
            await self.kubelet.runtime.stop_sandbox(self.sandbox)
            self.sandbox = None
        if self.phase in ("Pending", "Running") and self.stopping.is_set():
            codes = [c.state.get("terminated", {}).get("exitCode", 1) for c in self.main]
            self.phase = "Succeeded" if codes and all(x == 0 for x in codes) else "Failed"
        self.publish()
