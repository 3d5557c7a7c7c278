"""The job's Kubernetes Events, kept in the attempt's `events.jsonl` while its head pod runs.

Recorded from the head pod, by its log wrapper (`--events`): the operator cannot write them,
since it mounts no job's volume (each job has its own claim, which only its pods mount), and
the head pod is the one pod of an attempt that lives from its start to its end and holds the
job's ServiceAccount token. Its Role may `list` and `watch` Events of the namespace (Kubernetes
cannot narrow that to one object); only the job's are kept:

- the RLHFJob's own (the operator's: Created, Retrying, Suspended, guardrail trips...);
- those of the attempt's objects, all named after its RayJob `<job>-r<N>` (the RayJob, its
  RayCluster, pods and submitter Job: scheduling, image pulls, kills, OOM, back-offs).

The list at start brings the Events the API server still holds (an hour by default): what led
up to this attempt (the previous attempt's end, the operator's retry). Events after the last
attempt's head pod is gone (the job's final phase) are on the RLHFJob's status instead. Each
Event is kept once per `count` (a repeated Event is a new line with its new count), as a JSON
object (core/v1 Event fields). The file rotates at the containers' bound (config/podlogs.py).
"""

from __future__ import annotations

import json
import logging
import ssl
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from logging.handlers import RotatingFileHandler
from pathlib import Path
from typing import Any

from rlhf_trainer.config.podlogs import EVENTS_FILE, ContainerLogsConfig
from rlhf_trainer.reporting.kube import KubeTarget, job_attempt, target_from_env

log = logging.getLogger(__name__)

JOB_KIND = "RLHFJob"
KEPT = (
    "type",
    "reason",
    "message",
    "count",
    "firstTimestamp",
    "lastTimestamp",
    "eventTime",
    "involvedObject",
    "source",
    "reportingComponent",
)
WATCH_SECONDS = 300
MAX_BACKOFF = 60.0


def ray_job_name(job: str, attempt: int) -> str:
    """The operator's name of an attempt's RayJob (rlhf_operator.builders.common)."""
    return f"{job}-r{attempt}"


def is_the_jobs(event: Mapping[str, Any], job: str, attempt: int) -> bool:
    """Whether an Event is about the job or one of this attempt's objects (pure)."""
    obj = event.get("involvedObject") or {}
    name = str(obj.get("name", ""))
    if obj.get("kind") == JOB_KIND:
        return name == job
    ray_job = ray_job_name(job, attempt)
    return name == ray_job or name.startswith(f"{ray_job}-")


def kept(event: Mapping[str, Any]) -> dict[str, Any]:
    """The fields worth keeping of a core/v1 Event (pure)."""
    meta = event.get("metadata") or {}
    record = {"name": meta.get("name"), "uid": meta.get("uid")}
    record |= {k: event[k] for k in KEPT if event.get(k) is not None}
    return record


class EventsFile:
    """Appends each new (Event, count) once, as a JSON line, to a rotated file."""

    def __init__(self, path: Path, limits: ContainerLogsConfig) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.handler = RotatingFileHandler(
            path, maxBytes=limits.max_bytes, backupCount=limits.backups, encoding="utf-8"
        )
        self.handler.setFormatter(logging.Formatter("%(message)s"))
        self.seen: set[tuple[str, int]] = set()

    def add(self, event: Mapping[str, Any]) -> bool:
        record = kept(event)
        key = (str(record.get("uid") or record.get("name")), int(record.get("count") or 1))
        if key in self.seen:
            return False
        self.seen.add(key)
        text = json.dumps(record, ensure_ascii=False, separators=(",", ":"))
        self.handler.emit(logging.LogRecord("events", logging.INFO, "", 0, text, None, None))
        return True

    def close(self) -> None:
        self.handler.close()


class EventsApi:
    """List and watch the namespace's core/v1 Events with the pod's ServiceAccount."""

    def __init__(self, target: KubeTarget, timeout: float = WATCH_SECONDS + 30) -> None:
        self.target, self.timeout = target, timeout
        self.ssl: ssl.SSLContext | None = None
        if target.api_url.startswith("https"):
            ca = str(target.ca_file) if target.ca_file is not None else None
            self.ssl = ssl.create_default_context(cafile=ca)

    def _open(self, query: dict[str, str]) -> Any:
        ns = urllib.parse.quote(self.target.namespace, safe="")
        url = f"{self.target.api_url.rstrip('/')}/api/v1/namespaces/{ns}/events"
        headers = {"Accept": "application/json"}
        if self.target.token_file is not None:  # re-read: projected tokens are rotated
            headers["Authorization"] = f"Bearer {self.target.token_file.read_text().strip()}"
        request = urllib.request.Request(f"{url}?{urllib.parse.urlencode(query)}", headers=headers)
        return urllib.request.urlopen(request, timeout=self.timeout, context=self.ssl)

    def list(self) -> tuple[list[dict[str, Any]], str]:
        with self._open({}) as response:
            body = json.loads(response.read())
        return list(body.get("items") or []), str(body["metadata"].get("resourceVersion", ""))

    def watch(self, resource_version: str) -> Iterator[tuple[str, dict[str, Any]]]:
        query = {
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(WATCH_SECONDS),
        }
        with self._open(query) as response:
            for line in response:
                if line.strip():
                    change = json.loads(line)
                    yield str(change.get("type", "")), dict(change.get("object") or {})


def record_events(
    api: EventsApi,
    file: EventsFile,
    job: str,
    attempt: int,
    stop: threading.Event,
) -> None:
    """List, then watch, until `stop`; an error (the API server restarting, a 410 Gone)
    starts over after a back-off. Never raises."""
    failures = 0
    while not stop.is_set():
        try:
            items, version = api.list()
            for event in items:
                if is_the_jobs(event, job, attempt):
                    file.add(event)
            for kind, obj in api.watch(version):
                if stop.is_set():
                    return
                if kind == "ERROR":  # e.g. 410 Gone: the version is too old; list again
                    break
                if kind == "BOOKMARK":
                    continue
                if kind in ("ADDED", "MODIFIED") and is_the_jobs(obj, job, attempt):
                    file.add(obj)
            failures = 0
        except Exception as err:
            failures += 1
            delay = min(MAX_BACKOFF, 2.0**failures)
            detail = f"HTTP {err.code}" if isinstance(err, urllib.error.HTTPError) else str(err)
            log.warning("events of %s: %s; again in %.0f s", job, detail, delay)
            if stop.wait(delay):
                return


def start_recording(
    env: Mapping[str, str], logs_dir: Path, limits: ContainerLogsConfig
) -> tuple[threading.Event, threading.Thread] | None:
    """A daemon thread keeping the job's Events in `logs_dir/events.jsonl`; None where this
    is no cluster job's pod (no job name or API server in the environment)."""
    target = target_from_env(env)
    job = env.get("RLHF_JOB_NAME")
    if target is None or not job:
        return None
    try:
        file = EventsFile(logs_dir / EVENTS_FILE, limits)
    except OSError as err:
        log.warning("cannot keep the job's events in %s: %s", logs_dir, err)
        return None
    stop = threading.Event()
    thread = threading.Thread(
        target=record_events,
        args=(EventsApi(target), file, job, job_attempt(env), stop),
        name="rlhf-events",
        daemon=True,
    )
    thread.start()
    return stop, thread
