"""A container's first process: runs as root inside its pod's namespaces (the kubelet starts it
with nsenter), makes a fresh PID and mount namespace and forks PID 1 into them (main), which
turns the plan the kubelet wrote into the container's filesystem and identity, then execs the
container's command, which becomes PID 1 (with PID 1's signal rules, as in any container).

The filesystem: an overlay whose lower layer is this machine's root (the "image"; this
checkout's venv is its Python) and whose upper layer is the container's own writable layer on
disk. Directories a container must not share with the host (/tmp, /root, /home, /var/tmp and
the substrate's own state, which holds every pod's tokens) are covered with fresh empty ones;
the image's own directories under them (the base interpreter the venv was made from, the venv,
this checkout) are bound back read-only where they live. Then /proc (of the new PID namespace),
/dev, /sys, the volumes and the kubelet's files (/etc/hosts, the ServiceAccount token, ...) are
mounted in depth order, the image's directories again over any volume that covers them (the
operator's emptyDir at /tmp covers a checkout under /tmp; a real image keeps its Python where
no volume goes), the root is made read-only if the spec says so, and the process chroots, drops
to the container's user and execs.

    python -m substrate.container PLAN.json
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import sys
from pathlib import Path
from typing import Any

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC = 1, 2, 4, 32, 4096, 16384
MS_PRIVATE = 1 << 18
CLONE_NEWNS, CLONE_NEWPID = 0x00020000, 0x20000000
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38
_libc = ctypes.CDLL(None, use_errno=True)


def mount(source: str, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    result = _libc.mount(
        source.encode(),
        target.encode(),
        fstype.encode() if fstype else None,
        ctypes.c_ulong(flags),
        data.encode() if data else None,
    )
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mount {source} on {target}: {os.strerror(errno)}")


def bind(source: str, target: str, *, read_only: bool = False, recursive: bool = False) -> None:
    mount(source, target, None, MS_BIND | (MS_REC if recursive else 0), None)
    if read_only:
        mount("none", target, None, MS_BIND | MS_REMOUNT | MS_RDONLY, None)


def inside(root: str, path: str) -> str:
    """`path` of the container's filesystem as a host path under `root`, with symlinks resolved
    inside the root (the image's /var/run -> /run must not lead to the host's /run)."""
    parts = [p for p in path.split("/") if p not in ("", ".")]
    resolved: list[str] = []
    for _ in range(255):
        if not parts:
            return os.path.join(root, *resolved)
        part = parts.pop(0)
        if part == "..":
            resolved = resolved[:-1]
            continue
        candidate = os.path.join(root, *resolved, part)
        if os.path.islink(candidate):
            link = os.readlink(candidate)
            parts = [p for p in link.split("/") if p not in ("", ".")] + parts
            if link.startswith("/"):
                resolved = []
            continue
        resolved.append(part)
    raise OSError(40, f"too many levels of symbolic links in {path}")


def mount_point(source: str, target: str) -> None:
    """Create what `target` must be for `source` to be bound on it (a directory or a file)."""
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if not os.path.exists(target):
            Path(target).touch()


def add_users(root: str, users: list[dict[str, Any]]) -> None:
    """What the image's `useradd` did: its passwd/group entries (replacing any the host has for
    the same id or name: the image's base has none) and the home directory."""
    passwd, group = Path(inside(root, "/etc/passwd")), Path(inside(root, "/etc/group"))
    for user in users:
        uid, gid, name = str(user["uid"]), str(user["gid"]), user["name"]
        for path, entry, ident in (
            (passwd, f"{name}:x:{uid}:{gid}::{user['home']}:{user['shell']}", uid),
            (group, f"{name}:x:{gid}:", gid),
        ):
            kept = [
                line
                for line in path.read_text().splitlines()
                if line.split(":")[0] != name and [*line.split(":"), "", ""][2] != ident
            ]
            path.write_text("\n".join([*kept, entry]) + "\n")
        if user["createHome"]:
            home = inside(root, user["home"])
            os.makedirs(home, exist_ok=True)
            os.chown(home, user["uid"], user["gid"])


def seed(root: str, source: str, target: str, uid: int, gid: int) -> None:
    """Copy a build cache into the image's path for it, owned by the container's user."""
    destination = Path(inside(root, target))
    if destination.exists() or not os.path.isdir(source):
        return
    created = [p for p in [destination, *destination.parents] if not p.exists()]
    shutil.copytree(source, destination, symlinks=True)
    for path in created:
        os.chown(path, uid, gid)
    for directory, _, files in os.walk(destination):
        os.chown(directory, uid, gid)
        for name in files:
            os.chown(os.path.join(directory, name), uid, gid, follow_symlinks=False)


def hide(root: str, what: list[str] | None) -> None:
    """Cover the host directory `what[0]` (the substrate's state) with the empty `what[1]`
    (host mode: a built image's root does not hold it)."""
    if what is None:
        return
    hidden, empty = what
    if os.path.isdir(inside(root, hidden)):
        os.makedirs(empty, mode=0o700, exist_ok=True)
        bind(empty, inside(root, hidden))


def build_root(plan: dict[str, Any]) -> str:
    fs = plan["rootfs"]
    root = fs["root"]
    for directory in (root, fs["upper"], fs["work"]):
        os.makedirs(directory, exist_ok=True)
    options = f"lowerdir={fs['lower']},upperdir={fs['upper']},workdir={fs['work']}"
    mount("overlay", root, "overlay", 0, options)
    for target, (source, mode) in sorted(fs["masks"].items()):
        os.makedirs(source, exist_ok=True)
        os.chmod(source, mode)
        os.makedirs(inside(root, target), exist_ok=True)
        bind(source, inside(root, target))
    for path in fs["keep"]:
        os.makedirs(inside(root, path), mode=0o755, exist_ok=True)
        bind(path, inside(root, path), read_only=True, recursive=True)
    hide(root, fs["hide"])
    add_users(root, plan["users"])
    for item in plan["seeds"]:
        seed(root, item["source"], item["target"], plan["uid"], plan["gid"])
    mount("proc", inside(root, "/proc"), "proc", MS_NOSUID | MS_NODEV, None)
    bind("/dev", inside(root, "/dev"), recursive=True)
    bind("/sys", inside(root, "/sys"), recursive=True)
    targets = {m["target"] for m in plan["mounts"]}
    if "/dev/shm" not in targets:  # a container runtime's default: a private 64 MiB tmpfs
        mount("shm", inside(root, "/dev/shm"), "tmpfs", MS_NOSUID | MS_NODEV, "size=64m")
    for item in sorted(plan["mounts"], key=lambda m: m["target"].count("/")):
        target = inside(root, item["target"])
        if "image" in item:  # the image's own files, bound back over a volume that covers them
            try:
                mount_point(item["source"], target)
            except OSError as err:
                raise OSError(
                    err.errno,
                    f"{item['image']}, which cannot take a mount point ({err.strerror}); "
                    "use a checkout outside that path",
                ) from err
            bind(item["source"], target, read_only=True, recursive=True)
        else:
            mount_point(item["source"], target)
            bind(item["source"], target, read_only=item["readOnly"])
    if any("image" in item for item in plan["mounts"]):
        hide(root, fs["hide"])  # the checkout bound back shows the substrate's state again
    os.makedirs(inside(root, plan["cwd"]), exist_ok=True)
    if fs["readOnly"]:
        mount("none", root, None, MS_BIND | MS_REMOUNT | MS_RDONLY, None)
    return str(root)


def start(plan_file: str) -> None:
    """The container's PID 1: build its filesystem and identity, then exec its command."""
    plan = json.loads(Path(plan_file).read_text())
    # Opened before the chroot: how a failed start is reported to the kubelet (its StartError).
    report = open(plan["startError"], "w")  # noqa: SIM115 - kept open until exec
    try:
        root = build_root(plan)
        os.chroot(root)
        os.chdir(plan["cwd"])
        os.setgroups(plan["groups"])
        os.setgid(plan["gid"])
        os.setuid(plan["uid"])
        if plan["noNewPrivs"] and _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
        os.umask(0o022)
    except OSError as err:
        report.write(f"failed to create the container: {err}")
        sys.exit(128)
    argv, env = plan["argv"], plan["env"]
    try:
        os.execvpe(argv[0], argv, env)
    except OSError as err:
        why = "executable file not found in $PATH" if err.errno == 2 else str(err)
        report.write(f'exec: "{argv[0]}": {why}')
        sys.exit(128)


def main(plan_file: str) -> None:
    """New PID and mount namespaces (private propagation), then PID 1 forked into them. This
    process stays outside as the container's parent (the runtime's "shim"): it dies with PID 1
    and exits the way it did (a signal re-raised, so the kubelet sees 128 + its number), and
    PID 1 gets SIGKILL if the shim dies. `unshare --fork` would do the same, but util-linux
    2.38 loses a child's SIGKILL ("sigprocmask unblock failed") and exits 1."""
    if _libc.unshare(CLONE_NEWNS | CLONE_NEWPID) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS | CLONE_NEWPID)")
    mount("none", "/", None, MS_REC | MS_PRIVATE, None)
    child = os.fork()
    if child == 0:
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        start(plan_file)
        return
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)  # the kubelet signals PID 1, not the shim
    _, status = os.waitpid(child, 0)
    if os.WIFSIGNALED(status):
        killed_by = os.WTERMSIG(status)
        if killed_by not in (signal.SIGKILL, signal.SIGSTOP):  # these have no handler to reset
            signal.signal(killed_by, signal.SIG_DFL)
        os.kill(os.getpid(), killed_by)
    sys.exit(os.waitstatus_to_exitcode(status))


if __name__ == "__main__":
    main(sys.argv[1])
