"""The local substrate (e2e/local/) as the e2e suite's cluster when no E2E_KUBECONFIG is given:
started with up.sh into a private state directory, stopped with down.sh, and inspected from
the outside (processes, mounts, volume directories) for what only this machine can show."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LOCAL = REPO / "e2e" / "local"
KUBERAY_CRDS = Path(os.environ.get("KUBERAY_CRDS_DIR", REPO.parent / "shared" / "kuberay-crds"))


def unavailable() -> str | None:
    """Why the local substrate cannot run on this machine (None: it can)."""
    if os.geteuid() != 0:
        return "the local substrate needs root (mount and network namespaces, a bridge)"
    missing = [tool for tool in ("unshare", "nsenter", "ip", "openssl") if not shutil.which(tool)]
    if missing:
        return f"the local substrate needs {', '.join(missing)} (util-linux, iproute2, openssl)"
    if not KUBERAY_CRDS.is_dir():
        return f"KubeRay's CRDs are missing at {KUBERAY_CRDS} (set KUBERAY_CRDS_DIR)"
    return None


def image_mode() -> tuple[str, str]:
    """(SUBSTRATE_IMAGES for up.sh, why): the images `make images` built when they are up to
    date with this checkout (scripts/build-images.sh --check), else host mode, saying why;
    SUBSTRATE_IMAGES=built|host chooses."""
    requested = os.environ.get("SUBSTRATE_IMAGES", "auto")
    if requested != "auto":
        return requested, f"SUBSTRATE_IMAGES={requested}"
    check = subprocess.run(
        ["bash", str(REPO / "scripts" / "build-images.sh"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    if check.returncode == 0:
        return "built", "the images are up to date with this checkout"
    said = check.stderr.strip().splitlines()
    return "host", f"no up-to-date built images ({said[-1] if said else 'build-images.sh --check'})"


@dataclass(frozen=True)
class LocalSubstrate:
    state: Path
    images: str = "auto"  # SUBSTRATE_IMAGES for up.sh: auto, built or host

    @property
    def kubeconfig(self) -> Path:
        return self.state / "kubeconfig"

    def _env(self) -> dict[str, str]:
        return {
            **os.environ,
            "SUBSTRATE_STATE": str(self.state),
            "SUBSTRATE_KUBECONFIG": str(self.kubeconfig),
            "SUBSTRATE_IMAGES": self.images,
        }

    def up(self, *chart_values: str, timeout: float = 600) -> None:
        args = [a for value in chart_values for a in ("--set", value)]
        result = subprocess.run(
            ["bash", str(LOCAL / "up.sh"), *args],
            env={**self._env(), "SUBSTRATE_TIMEOUT": str(int(timeout))},
            capture_output=True,
            text=True,
            timeout=timeout + 60,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(f"e2e/local/up.sh failed:\n{result.stderr}{result.stdout}")

    def image_source(self) -> str:
        """What the running substrate runs its pods from (its substrate.json says)."""
        recorded = json.loads((self.state / "substrate.json").read_text())
        return f"{recorded['images']['mode']}: {recorded['images']['why']}"

    def down(self) -> None:
        subprocess.run(["bash", str(LOCAL / "down.sh")], env=self._env(), check=True, timeout=120)

    def log(self, lines: int = 80) -> str:
        path = self.state / "substrate.log"
        return "\n".join(path.read_text().splitlines()[-lines:]) if path.exists() else ""

    def pvc_dir(self, namespace: str, claim: str) -> Path:
        return self.state / "pvc" / namespace / claim

    def processes(self, *, argv_contains: str, env_entry: str | None = None) -> list[str]:
        """`pid: command` of every process whose command line contains `argv_contains` (a pod
        directory: the pod's sandbox and each container's runtime process name their plans) or
        whose environment holds `env_entry` (e.g. `RLHF_JOB_NAME=<job>`, which every process of
        a job's pods inherits, Ray's included)."""
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                argv = (entry / "cmdline").read_bytes()
                environ = (entry / "environ").read_bytes().split(b"\0")
            except OSError:
                continue  # gone meanwhile
            if argv_contains.encode() in argv or (env_entry and env_entry.encode() in environ):
                command = argv.replace(b"\0", b" ").decode(errors="replace")
                found.append(f"{entry.name}: {command[:160]}")
        return found

    def pod_dir_prefix(self, namespace: str, pod_prefix: str) -> str:
        """What the directories of the pods `<namespace>/<pod_prefix>...` start with."""
        return str(self.state / "pods" / f"{namespace}_{pod_prefix}")

    def kill_containers(self, namespace: str, pod_prefix: str) -> list[int]:
        """SIGKILL the first process of every container of the pods `<namespace>/<pod_prefix>...`
        (a node's processes dying under a pod: its PID namespace goes with it); the kubelet then
        restarts the containers per their restart policy. Returns the PIDs killed."""
        killed = []
        for line in self.processes(argv_contains=self.pod_dir_prefix(namespace, pod_prefix)):
            pid = int(line.split(":", 1)[0])
            try:
                if b"substrate.container" not in Path(f"/proc/{pid}/cmdline").read_bytes():
                    continue  # the pod's sandbox: kept, as a node keeps a pod's network
                children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            except OSError:
                continue  # gone meanwhile
            for child in children:  # `unshare --fork`'s child is the container's PID 1
                os.kill(int(child), signal.SIGKILL)
                killed.append(int(child))
        return killed

    def mounts(self) -> list[str]:
        """Mounts of this machine's (the test's) mount namespace under the state directory."""
        lines = Path("/proc/mounts").read_text().splitlines()
        return [line for line in lines if str(self.state) in line]
