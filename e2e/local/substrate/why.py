"""Why pods are not Ready, in the words a person debugging them needs first: each container's
state, the error its last start failed with (a StartError's message: the exec or mount that
failed) and its last log lines. up.sh prints this when the operator does not come up, before
`kubectl describe`.

    python -m substrate.why KUBECTL KUBECONFIG NAMESPACE SELECTOR
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

JSON = dict[str, Any]
LOG_LINES = 40


def _state(state: JSON) -> str:
    """`waiting: CrashLoopBackOff (back-off 20s ...)`, `terminated: StartError, exit 128 (...)`."""
    if not state:
        return "none"
    kind, detail = next(iter(state.items()))
    words = [str(detail["reason"])] if detail.get("reason") else []
    if "exitCode" in detail:
        words.append(f"exit code {detail['exitCode']}")
    text = f"{kind}: {', '.join(words)}" if words else kind
    return f"{text}: {detail['message']}" if detail.get("message") else text


def containers(pods: JSON) -> list[tuple[str, str, bool, str]]:
    """(pod, container, has a previous attempt, one line of its state) for every container."""
    found = []
    for pod in pods.get("items") or []:
        name = pod["metadata"]["name"]
        status = pod.get("status") or {}
        for c in [
            *(status.get("initContainerStatuses") or []),
            *(status.get("containerStatuses") or []),
        ]:
            line = f"now {_state(c.get('state') or {})}"
            if c.get("lastState"):
                line += f"; last attempt {_state(c['lastState'])}"
            line += f"; restarts {c.get('restartCount', 0)}"
            found.append((name, c["name"], bool(c.get("restartCount")), line))
    return found


def report(kubectl: str, kubeconfig: str, namespace: str, selector: str) -> str:
    base = [kubectl, "--kubeconfig", kubeconfig, "-n", namespace]

    def run(*args: str) -> str:
        done = subprocess.run([*base, *args], capture_output=True, text=True, check=False)
        return (
            done.stdout
            if done.returncode == 0
            else f"(kubectl {' '.join(args)}: {done.stderr.strip()})"
        )

    listing = run("get", "pods", "-l", selector, "-o", "json")
    try:
        pods = json.loads(listing)
    except json.JSONDecodeError:
        return listing
    if not pods.get("items"):
        return f"no pod in {namespace} matches {selector}"
    parts = []
    for pod, container, restarted, line in containers(pods):
        parts.append(f"pod {pod}, container {container}: {line}")
        attempt = ["--previous"] if restarted else []
        logs = run("logs", pod, "-c", container, f"--tail={LOG_LINES}", *attempt).rstrip()
        which = "previous attempt" if restarted else "current attempt"
        parts.append(f"  its last {LOG_LINES} log lines ({which}):")
        parts.extend(f"    {text}" for text in (logs.splitlines() or ["(empty)"]))
    return "\n".join(parts)


if __name__ == "__main__":
    print(report(*sys.argv[1:5]))
