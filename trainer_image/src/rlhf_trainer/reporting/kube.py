"""Progress on a cluster: merge-patches of the job's report ConfigMap, from inside the pod.

The trainer may change nothing of its RLHFJob; it writes its own report object
(`rlhf_trainer.config.report`: `RLHF_JOB_REPORT`, default `<job>-report`), which its Role lets
it `patch` and nothing else. The operator validates the report and mirrors it into
`status.trainer`.

Enabled by the environment the operator gives the trainer: `RLHF_JOB_NAME`,
`RLHF_JOB_NAMESPACE` and `RLHF_JOB_REPORT`, plus the API server of the pod
(`KUBERNETES_SERVICE_HOST`/`_PORT`) and its service account token and CA at the standard paths.
`RLHF_KUBE_API_URL`, `RLHF_KUBE_TOKEN_FILE` and `RLHF_KUBE_CA_FILE` override those (tests;
out-of-cluster runs).

The progress (`progress.json`) is `rlhf_operator.api.v1alpha1.TrainerReport` without its
outcome, in camelCase (this package must not import the operator, so the shape is written out
here and a test checks it against that model). Patches go out at most every `min_interval`
seconds (always for the final step and at close); an API error is logged and never stops
training, and after one the reporter backs off.

`report_outcome` writes `outcome.json` once, just before the trainer exits: the attempt
(`RLHF_JOB_ATTEMPT`), the exit code, the failure class and the message, from which the
operator decides whether to retry. Each key is a whole JSON document, so a merge patch of one
never touches the other.
"""

from __future__ import annotations

import json
import logging
import os
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlhf_trainer.config.history import MetricsHistory
from rlhf_trainer.config.outcome import FailureClass
from rlhf_trainer.config.report import (
    EVAL_GREEDY_REWARD,
    EVAL_MEAN_REWARD,
    EVAL_PASS_AT,
    EVAL_PREFIX,
    EVAL_PROMPTS,
    EVAL_SAMPLES,
    OUTCOME_KEY,
    PROGRESS_KEY,
    REPORT_ENV,
)

from .base import StepReport

if TYPE_CHECKING:
    from rlhf_trainer.checkpoint_best import BestCheckpoint

log = logging.getLogger(__name__)

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
MAX_CHECKPOINTS = 10
MAX_BACKOFF = 300.0
MAX_MESSAGE = 4096  # TrainerOutcome.message's bound in the CRD
OUTCOME_TRIES = 3


@dataclass(frozen=True)
class KubeTarget:
    api_url: str
    namespace: str
    report: str  # the report ConfigMap's name
    token_file: Path | None
    ca_file: Path | None

    @property
    def report_url(self) -> str:
        ns, name = (urllib.parse.quote(x, safe="") for x in (self.namespace, self.report))
        return f"{self.api_url.rstrip('/')}/api/v1/namespaces/{ns}/configmaps/{name}"


def target_from_env(env: Mapping[str, str] | None = None) -> KubeTarget | None:
    """Where to report, or None when this run is not an RLHFJob on a cluster."""
    env = os.environ if env is None else env
    name, namespace = env.get("RLHF_JOB_NAME"), env.get("RLHF_JOB_NAMESPACE")
    if not name or not namespace:
        return None
    api_url = env.get("RLHF_KUBE_API_URL")
    if not api_url:
        host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
        if not host:
            log.warning(
                "RLHF_JOB_NAME is set but no API server is known (KUBERNETES_SERVICE_HOST or "
                "RLHF_KUBE_API_URL): progress will not be reported"
            )
            return None
        host = f"[{host}]" if ":" in host else host  # IPv6
        api_url = f"https://{host}:{port or 443}"
    token = Path(env.get("RLHF_KUBE_TOKEN_FILE") or SA_DIR / "token")
    ca = Path(env.get("RLHF_KUBE_CA_FILE") or SA_DIR / "ca.crt")
    report = env.get(REPORT_ENV) or f"{name}-report"
    return KubeTarget(
        api_url, namespace, report, token if token.is_file() else None, ca if ca.is_file() else None
    )


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def eval_status(step: int, metrics: Mapping[str, float]) -> dict[str, Any] | None:
    """`status.trainer.eval` from a step's `eval/` metrics, or None when it evaluated nothing
    (pure)."""
    if EVAL_PROMPTS not in metrics:
        return None
    body: dict[str, Any] = {
        "step": step,
        "prompts": int(metrics[EVAL_PROMPTS]),
        "samples": int(metrics.get(EVAL_SAMPLES, 0)),
        "passAtK": {
            key.removeprefix(EVAL_PASS_AT): value
            for key, value in metrics.items()
            if key.startswith(EVAL_PASS_AT)
        },
    }
    for key, field in ((EVAL_MEAN_REWARD, "meanReward"), (EVAL_GREEDY_REWARD, "greedyReward")):
        if key in metrics:
            body[field] = metrics[key]
    return body


def best_status(best: BestCheckpoint) -> dict[str, Any]:
    """`status.trainer.best` (pure)."""
    return {
        "step": best.step,
        "metric": best.metric,
        "score": best.score,
        "checkpoint": str(best.path),
    }


def trainer_status(
    report: StepReport,
    checkpoints: list[dict[str, Any]],
    now: str,
    evaluation: dict[str, Any] | None = None,
    history: dict[str, list[list[float]]] | None = None,
    best: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The camelCase progress (`status.trainer` without the outcome) of one step (pure); the
    latest evaluation (`eval_status`) goes under `eval`, not among the step's metrics; the
    bounded metrics history (`config.history`) under `history`."""
    body: dict[str, Any] = {
        "step": report.step,
        "totalSteps": report.total_steps,
        "progress": f"{report.step}/{report.total_steps}",
        "metrics": {k: v for k, v in report.metrics.items() if not k.startswith(EVAL_PREFIX)},
        "checkpoints": list(checkpoints),
        "updatedAt": now,
    }
    if evaluation is not None:
        body["eval"] = evaluation
    if best is not None:
        body["best"] = best
    if history:
        body["history"] = history
    if report.reward is not None:
        body["reward"] = report.reward
    if report.samples_per_second is not None:
        body["samplesPerSecond"] = round(report.samples_per_second, 4)
    if report.eta_seconds is not None:
        body["etaSeconds"] = round(report.eta_seconds, 1)
    return body


def job_attempt(env: Mapping[str, str] | None = None) -> int:
    """`RLHF_JOB_ATTEMPT`, which the operator sets on every attempt's pods (0: the first)."""
    env = os.environ if env is None else env
    try:
        return max(0, int(env.get("RLHF_JOB_ATTEMPT", "0")))
    except ValueError:
        return 0


def outcome_status(
    attempt: int, exit_code: int, failure_class: FailureClass | None, message: str
) -> dict[str, Any]:
    """The camelCase `status.trainer.outcome` body (pure); the message cut to the CRD's bound,
    keeping its end, where the error is."""
    if len(message) > MAX_MESSAGE:
        message = "..." + message[-(MAX_MESSAGE - 3) :]
    return {
        "attempt": attempt,
        "exitCode": exit_code,
        "failureClass": failure_class.value if failure_class is not None else None,
        "message": message,
    }


def report_outcome(
    *,
    exit_code: int,
    failure_class: FailureClass | None,
    message: str,
    env: Mapping[str, str] | None = None,
    retry_delay: float = 1.0,
) -> bool:
    """Write the outcome of the RLHFJob attempt this process runs into its report (False: not
    on a cluster, or the API did not take it). Tried a few times: the operator's retry
    decision rests on it, but the process must still exit well within the pod's grace
    period."""
    target = target_from_env(env)
    if target is None:
        return False
    body = outcome_status(job_attempt(env), exit_code, failure_class, message)
    reporter = KubeReporter(target)
    for attempt in range(OUTCOME_TRIES):
        if attempt:
            time.sleep(retry_delay * attempt)
        if reporter.write(OUTCOME_KEY, body):
            return True
    return False


class KubeReporter:
    """A sink that merge-patches the job's report ConfigMap (throttled, never raising)."""

    def __init__(
        self,
        target: KubeTarget,
        *,
        min_interval: float = 5.0,
        timeout: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        history: MetricsHistory | None = None,
    ) -> None:
        """`history`: the run's curves so far (a retried attempt's, read back from its
        metrics.jsonl), continued by this attempt's steps."""
        self.target = target
        self.min_interval = min_interval
        self.timeout = timeout
        self._clock = clock
        self._checkpoints: list[dict[str, Any]] = []
        self._last: StepReport | None = None  # the newest step report
        self._eval: dict[str, Any] | None = None  # the newest evaluation, kept between them
        self._best: dict[str, Any] | None = None  # checkpoint.keepBest's best checkpoint
        self._history = history if history is not None else MetricsHistory()
        self._dirty = False  # something not yet sent (a step or a checkpoint)
        self._last_sent: float | None = None
        self._blocked_until = 0.0
        self._failures = 0
        self._ssl = self._ssl_context()

    def _ssl_context(self) -> ssl.SSLContext | None:
        if not self.target.api_url.startswith("https"):
            return None
        if self.target.ca_file is not None:
            return ssl.create_default_context(cafile=str(self.target.ca_file))
        return ssl.create_default_context()

    # --- sink interface -----------------------------------------------------------------
    def write_step(self, report: StepReport) -> None:
        self._last, self._dirty = report, True
        self._eval = eval_status(report.step, report.metrics) or self._eval
        self._history.add(report.step, report.metrics)
        self._flush(force=report.is_final)

    def write_checkpoint(self, step: int, path: Path) -> None:
        self._checkpoints.append({"step": step, "path": str(path), "time": utc_now()})
        del self._checkpoints[:-MAX_CHECKPOINTS]
        self._dirty = True
        self._flush(force=False)

    def write_best(self, best: BestCheckpoint) -> None:
        self._best = best_status(best)
        self._dirty = True
        self._flush(force=False)

    def close(self) -> None:
        self._flush(force=True)

    # --- sending ------------------------------------------------------------------------
    def _flush(self, *, force: bool) -> None:
        report = self._last
        if report is None or not self._dirty:
            return
        now = self._clock()
        due = self._last_sent is None or now - self._last_sent >= self.min_interval
        if not (force or due) or (now < self._blocked_until and not force):
            return
        body = trainer_status(
            report, self._checkpoints, utc_now(), self._eval, self._history.to_json(), self._best
        )
        if self.write(PROGRESS_KEY, body):
            self._dirty = False
        self._last_sent = now

    def write(self, key: str, document: dict[str, Any]) -> bool:
        """One merge-patch setting `key` of the report's data to `document` as JSON; False
        (and a warning) on any failure."""
        body = json.dumps({"data": {key: json.dumps(document, separators=(",", ":"))}}).encode()
        headers = {"Content-Type": "application/merge-patch+json", "Accept": "application/json"}
        try:
            if self.target.token_file is not None:
                # Re-read every time: projected service-account tokens are rotated.
                token = self.target.token_file.read_text().strip()
                headers["Authorization"] = f"Bearer {token}"
            request = urllib.request.Request(
                self.target.report_url, data=body, method="PATCH", headers=headers
            )
            with urllib.request.urlopen(request, timeout=self.timeout, context=self._ssl) as r:
                r.read()
        except Exception as err:
            self._failures += 1
            backoff = min(MAX_BACKOFF, self.min_interval * 2**self._failures)
            self._blocked_until = self._clock() + backoff
            detail = str(err)
            if isinstance(err, urllib.error.HTTPError):
                detail = f"HTTP {err.code}: {err.read()[:300].decode('utf-8', 'replace')}"
            log.warning(
                "report to %s failed (%s); training continues, next try in %.0f s",
                self.target.report_url,
                detail,
                backoff,
            )
            return False
        self._failures = 0
        self._blocked_until = 0.0
        return True
