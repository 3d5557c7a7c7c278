"""The kubelet's preparation of a pod (files on disk) and of each container (the plan that
container.py executes): volumes, the kubelet-managed /etc files, the ServiceAccount token,
the container's user, environment and command line.

Volumes: emptyDir is a fresh directory per pod (tmpfs for `medium: Memory`, mounted by the
sandbox), ConfigMap/Secret/projected volumes are files written from the API's objects, a PVC is
its directory under the substrate's state (`pvc/<namespace>/<claim>`, made by the provisioner),
hostPath is the host path. Other kinds fail to mount with a message that says so.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import podspec
from .images import REPO, LocalImage
from .podspec import ConfigError, Lookup

JSON = dict[str, Any]
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
# Host directories a container must not see (its own empty ones instead), with their modes.
MASKS = {"/tmp": 0o1777, "/var/tmp": 0o1777, "/root": 0o700, "/home": 0o755}


@dataclass(frozen=True)
class Cluster:
    """What every pod's setup needs to know about the cluster."""

    state: Path  # the substrate's state directory
    api_host: str  # the API server's address on the pod network
    api_port: int
    ca_file: Path
    cluster_domain: str = "cluster.local"

    @property
    def pvc_root(self) -> Path:
        return self.state / "pvc"


def pvc_dir(cluster: Cluster, namespace: str, claim: str) -> Path:
    return cluster.pvc_root / namespace / claim


def _under(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def _apply_fs_group(path: Path, fs_group: int | None, recursive: bool) -> None:
    """What the kubelet does for volumes that support ownership management: the fsGroup owns
    them, the group may read and write, new files inherit the group (setgid directories)."""
    if fs_group is None:
        return
    paths = [path]
    if recursive:
        for directory, dirs, files in os.walk(path):
            paths += [Path(directory, n) for n in (*dirs, *files)]
    for p in paths:
        os.chown(p, -1, fs_group, follow_symlinks=False)
        if p.is_symlink():
            continue
        mode = p.stat().st_mode
        extra = 0o2070 if p.is_dir() else (0o060 if mode & 0o200 else 0o040)
        os.chmod(p, (mode & 0o7777) | extra)


def fs_group(pod: JSON) -> int | None:
    value = ((pod.get("spec") or {}).get("securityContext") or {}).get("fsGroup")
    return int(value) if value is not None else None


def prepare_volumes(
    cluster: Cluster, pod: JSON, pod_dir: Path, lookup: Lookup
) -> tuple[dict[str, tuple[Path, bool]], dict[str, str]]:
    """Each volume's host path and read-only flag, plus the memory volumes the sandbox mounts
    (host path -> tmpfs size). ConfigError("FailedMount", ...) when one cannot be set up."""
    namespace = pod["metadata"]["namespace"]
    group = fs_group(pod)
    paths: dict[str, tuple[Path, bool]] = {}
    memory: dict[str, str] = {}
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        name = volume["name"]
        target = pod_dir / "volumes" / name
        files = podspec.volume_files(pod, volume, lookup)
        if files is not None:
            target.mkdir(parents=True, exist_ok=True)
            for relative, (content, mode) in files.items():
                path = target / relative
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(content)
                os.chmod(path, mode)
            _apply_fs_group(target, group, recursive=True)
            paths[name] = (target, True)
        elif "emptyDir" in volume:
            target.mkdir(parents=True, exist_ok=True)
            os.chmod(target, 0o777)
            _apply_fs_group(target, group, recursive=False)
            if (volume["emptyDir"] or {}).get("medium") == "Memory":
                size = (volume["emptyDir"] or {}).get("sizeLimit")
                memory[str(target)] = str(podspec.quantity_value(size)) if size else ""
            paths[name] = (target, False)
        elif "persistentVolumeClaim" in volume:
            source = volume["persistentVolumeClaim"]
            claim = lookup("persistentvolumeclaims", namespace, str(source.get("claimName")))
            directory = pvc_dir(cluster, namespace, str(source.get("claimName")))
            if claim is None or (claim.get("status") or {}).get("phase") != "Bound":
                raise ConfigError(
                    "FailedMount",
                    f'MountVolume.SetUp failed for volume "{name}" : persistentvolumeclaim '
                    f'"{source.get("claimName")}" is not bound',
                )
            _apply_fs_group(directory, group, recursive=True)
            paths[name] = (directory, bool(source.get("readOnly", False)))
        elif "hostPath" in volume:
            host = Path(volume["hostPath"]["path"])
            if volume["hostPath"].get("type") in ("DirectoryOrCreate",):
                host.mkdir(parents=True, exist_ok=True)
            if not host.exists():
                raise ConfigError(
                    "FailedMount",
                    f'MountVolume.SetUp failed for volume "{name}" : hostPath {host} is missing',
                )
            paths[name] = (host, False)
        else:
            kinds = sorted(k for k in volume if k != "name")
            raise ConfigError(
                "FailedMount",
                f'MountVolume.SetUp failed for volume "{name}" : the local substrate cannot mount '
                f"{', '.join(kinds)} volumes (it mounts configMap, secret, projected, emptyDir, "
                "persistentVolumeClaim and hostPath)",
            )
    return paths, memory


def write_service_account(cluster: Cluster, pod: JSON, pod_dir: Path, token: str) -> Path:
    directory = pod_dir / "serviceaccount"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "token").write_text(token)
    (directory / "ca.crt").write_bytes(cluster.ca_file.read_bytes())
    (directory / "namespace").write_text(pod["metadata"]["namespace"])
    for file in directory.iterdir():
        os.chmod(file, 0o644)
    _apply_fs_group(directory, fs_group(pod), recursive=True)
    return directory


def security(pod: JSON, container: JSON, image: LocalImage) -> tuple[int, int, list[int], JSON]:
    """(uid, gid, supplementary groups, effective security context) of a container."""
    pod_ctx = (pod.get("spec") or {}).get("securityContext") or {}
    ctx = {**pod_ctx, **(container.get("securityContext") or {})}
    uid = int(ctx["runAsUser"]) if ctx.get("runAsUser") is not None else image.uid
    if ctx.get("runAsGroup") is not None:
        gid = int(ctx["runAsGroup"])
    else:
        user = image.user_named(uid)
        gid = user.gid if user else (image.gid if uid == image.uid else 0)
    groups = [int(g) for g in pod_ctx.get("supplementalGroups") or []]
    if pod_ctx.get("fsGroup") is not None:
        groups.append(int(pod_ctx["fsGroup"]))
    if ctx.get("runAsNonRoot") and uid == 0:
        raise ConfigError(
            "CreateContainerConfigError", "container has runAsNonRoot and image will run as root"
        )
    return uid, gid, sorted({gid, *groups}), ctx


def base_environment(cluster: Cluster, pod: JSON, image: LocalImage, uid: int) -> dict[str, str]:
    """The image's ENV, HOME and HOSTNAME as a container runtime sets them, and the variables of
    the `kubernetes` Service that the kubelet gives every container."""
    user = image.user_named(uid)
    env = dict(image.env)
    env.setdefault("HOME", user.home if user else ("/root" if uid == 0 else "/"))
    env["HOSTNAME"] = pod["metadata"]["name"]
    host, port = cluster.api_host, str(cluster.api_port)
    env.update(
        {
            "KUBERNETES_SERVICE_HOST": host,
            "KUBERNETES_SERVICE_PORT": port,
            "KUBERNETES_SERVICE_PORT_HTTPS": port,
            "KUBERNETES_PORT": f"tcp://{host}:{port}",
            f"KUBERNETES_PORT_{port}_TCP": f"tcp://{host}:{port}",
            f"KUBERNETES_PORT_{port}_TCP_PROTO": "tcp",
            f"KUBERNETES_PORT_{port}_TCP_PORT": port,
            f"KUBERNETES_PORT_{port}_TCP_ADDR": host,
        }
    )
    return env


def _kept_paths(covered: list[str]) -> list[str]:
    """The image's own directories that lie under a masked directory or a pod's volume: the
    interpreter the venv was made from (pyenv installs it under /root), the venv, this
    checkout. A real image keeps its Python where no volume goes (/usr/local, /opt/venv); this
    one's lies wherever the checkout is (/tmp, a home directory), so container.py binds these
    back, read-only, over whatever covers them. A volume mounted exactly on one of them wins."""
    wanted = {sys.base_prefix, sys.prefix, str(REPO)}
    return sorted(p for p in wanted if any(_under(p, c) and p != c for c in covered))


def _host_layers(cluster: Cluster, container_dir: Path, mounts: list[JSON]) -> JSON:
    """Host mode: this machine's root under the container's layer, with the host's private
    directories covered by empty ones and the image's Python (interpreter, venv, checkout)
    bound back over whatever covers it: appended to `mounts` when a volume does."""
    kept = _kept_paths([*MASKS, *(m["target"] for m in mounts)])
    # The image's directories under a volume: bound back over it (container.py mounts in depth
    # order, so a volume deeper inside the checkout still lands on top of them).
    for path in kept:
        covering = [
            m["target"] for m in mounts if _under(path, m["target"]) and path != m["target"]
        ]
        if covering:
            why = (
                f"the image's {path} (this checkout's venv, its interpreter or the checkout: the "
                f"local image's Python) lies under the pod's volume at {max(covering, key=len)}"
            )
            mounts.append({"source": path, "target": path, "readOnly": True, "image": why})
    masks = {
        target: [str(container_dir / "masks" / target.strip("/").replace("/", "_")), mode]
        for target, mode in MASKS.items()
    }
    if any(_under(k, "/root") for k in kept):
        masks["/root"][1] = 0o711  # traversable, so that non-root users reach the interpreter
    return {
        "lower": "/",
        "masks": masks,
        "keep": kept,
        # After the kept paths: the substrate's state holds every pod's token and volumes.
        "hide": [str(cluster.state), str(container_dir / "masks" / "_state")],
    }


def _built_layers(image: LocalImage) -> JSON:
    """Built mode: the image's exported root filesystem under the container's layer, alone."""
    return {"lower": str(image.rootfs), "masks": {}, "keep": [], "hide": None}


def container_plan(
    cluster: Cluster,
    pod: JSON,
    container: JSON,
    image: LocalImage,
    lookup: Lookup,
    *,
    volumes: Mapping[str, tuple[Path, bool]],
    kubelet_files: Mapping[str, Path],
    container_dir: Path,
) -> JSON:
    """What container.py needs to start `container` (ConfigError when it cannot start)."""
    uid, gid, groups, ctx = security(pod, container, image)
    env = podspec.environment(pod, container, lookup, base_environment(cluster, pod, image, uid))
    argv = podspec.command_line(container, image.entrypoint, image.cmd, env)
    mounts = [
        {"source": str(source), "target": target, "readOnly": True}
        for target, source in kubelet_files.items()
    ]
    for mount in container.get("volumeMounts") or []:
        if mount["name"] not in volumes:
            raise ConfigError(
                "CreateContainerConfigError", f'volume "{mount["name"]}" not found in the pod'
            )
        source, read_only = volumes[mount["name"]]
        if mount.get("subPath"):
            source = source / str(mount["subPath"])
            source.mkdir(parents=True, exist_ok=True) if not source.exists() else None
        mounts.append(
            {
                "source": str(source),
                "target": str(mount["mountPath"]),
                "readOnly": bool(mount.get("readOnly", False) or read_only),
            }
        )
    layers = _built_layers(image) if image.rootfs else _host_layers(cluster, container_dir, mounts)
    return {
        "rootfs": {
            "root": str(container_dir / "rootfs"),
            "upper": str(container_dir / "upper"),
            "work": str(container_dir / "work"),
            **layers,
            "readOnly": bool(ctx.get("readOnlyRootFilesystem", False)),
        },
        "mounts": mounts,
        # Host mode: the users the Dockerfile's `useradd` makes (a built image has its own).
        "users": [
            {
                "name": u.name,
                "uid": u.uid,
                "gid": u.gid,
                "home": u.home,
                "shell": u.shell,
                "createHome": u.create_home,
            }
            for u in (image.users if image.rootfs is None else ())
        ],
        "seeds": [{"source": s, "target": t} for s, t in image.seeds.items()],
        "uid": uid,
        "gid": gid,
        "groups": groups,
        "noNewPrivs": ctx.get("allowPrivilegeEscalation") is False,
        "cwd": str(container.get("workingDir") or image.workdir),
        "env": env,
        "argv": argv,
        "startError": str(container_dir / "start-error"),
    }
