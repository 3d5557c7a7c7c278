"""A pod's sandbox process (the "pause" container): it holds the pod's network, UTS and mount
namespaces for as long as the pod lives. The kubelet starts it with
`unshare --net --uts --mount --propagation private`, wires its network from outside, and
enters these namespaces for every container of the pod.

It sets the pod's hostname and mounts the pod's memory-backed emptyDir volumes (tmpfs): they
exist in this mount namespace only, so every container of the pod shares them and they vanish
with the pod. Then it writes its ready file and sleeps until it is killed.

    python -m substrate.sandbox PLAN.json
"""

from __future__ import annotations

import json
import signal
import socket
import sys
from pathlib import Path

from .container import MS_NODEV, MS_NOSUID, mount


def main(plan_file: str) -> None:
    plan = json.loads(Path(plan_file).read_text())
    socket.sethostname(plan["hostname"])
    for directory, size in plan["memoryVolumes"].items():
        Path(directory).mkdir(parents=True, exist_ok=True)
        options = f"mode=1777,size={size}" if size else "mode=1777"
        mount("tmpfs", directory, "tmpfs", MS_NOSUID | MS_NODEV, options)
    Path(plan["ready"]).write_text("ready\n")
    while True:
        signal.pause()  # SIGTERM/SIGKILL from the kubelet end it


if __name__ == "__main__":
    main(sys.argv[1])
