"""kubectl and helm against the e2e cluster (E2E_KUBECONFIG), with polling helpers. The only
module of the e2e suite that runs commands."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml

T = TypeVar("T")


class CommandFailed(RuntimeError):
    pass


class TimedOut(AssertionError):
    pass


@dataclass(frozen=True)
class Cluster:
    kubeconfig: Path
    kubectl_binary: Path
    helm_binary: Path
    helm_home: Path

    def _run(
        self, command: Sequence[str], *, stdin: str | None = None, timeout: float = 300
    ) -> str:
        result = subprocess.run(
            list(command),
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env={
                # The caller's environment: kubeconfig exec plugins (cloud auth) need PATH.
                **os.environ,
                "KUBECONFIG": str(self.kubeconfig),
                "HELM_CACHE_HOME": str(self.helm_home / "cache"),
                "HELM_CONFIG_HOME": str(self.helm_home / "config"),
                "HELM_DATA_HOME": str(self.helm_home / "data"),
            },
        )
        if result.returncode != 0:
            raise CommandFailed(
                f"`{' '.join(command)}` exited {result.returncode}:\n{result.stderr}{result.stdout}"
            )
        return result.stdout

    def kubectl(self, *args: str, stdin: str | None = None, timeout: float = 300) -> str:
        return self._run([str(self.kubectl_binary), *args], stdin=stdin, timeout=timeout)

    def helm(self, *args: str, timeout: float = 600) -> str:
        return self._run([str(self.helm_binary), *args], timeout=timeout)

    def apply(self, obj: dict[str, Any]) -> None:
        self.kubectl(
            "apply",
            "--server-side",
            "--field-manager=rlhf-e2e",
            "-f",
            "-",
            stdin=yaml.safe_dump(obj),
        )

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        args = ["get", kind, name, "-o", "json", "--ignore-not-found"]
        if namespace:
            args += ["-n", namespace]
        out = self.kubectl(*args)
        return json.loads(out) if out.strip() else None

    def list(self, kind: str, namespace: str, selector: str) -> list[dict[str, Any]]:
        out = self.kubectl("get", kind, "-n", namespace, "-l", selector, "-o", "json")
        return list(json.loads(out)["items"])

    def diagnostics(self, namespace: str, operator_namespace: str) -> str:
        """What a human would look at when the run goes wrong, for the failure message."""
        parts = []
        for args in (
            ("get", "rlhfjobs,rayjobs,rayclusters,pods,pvc", "-n", namespace, "-o", "wide"),
            ("describe", "rlhfjobs", "-n", namespace),
            ("get", "events", "-n", namespace, "--sort-by=.lastTimestamp"),
            (
                "logs",
                "-n",
                operator_namespace,
                "-l",
                "app.kubernetes.io/name=rlhf-operator",
                "--tail=200",
            ),
        ):
            try:
                parts.append(f"$ kubectl {' '.join(args)}\n{self.kubectl(*args)}")
            except CommandFailed as error:
                parts.append(str(error))
        return "\n".join(parts)


def wait_for(
    probe: Callable[[], T | None],
    *,
    timeout: float,
    interval: float = 5.0,
    what: str,
    on_timeout: Callable[[], str] = lambda: "",
) -> T:
    """Poll `probe` until it returns something other than None; raise TimedOut after timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            raise TimedOut(f"timed out after {timeout:.0f} s waiting for {what}\n{on_timeout()}")
        time.sleep(interval)
