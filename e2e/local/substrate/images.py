"""Container images in host mode, the local substrate's fallback where `make images` built
nothing (the built images are store.py's): this machine's filesystem with this checkout's venv
as the image's Python, plus what the image's Dockerfile declares in its final stage (ENV, USER,
WORKDIR, ENTRYPOINT, CMD and the user its `useradd` creates).

Nothing is pulled or built: an image name maps to one of this repository's Dockerfiles by its
repository's last path component. Any other image fails the way a kubelet reports an image it
cannot pull (ErrImagePull), with a message saying why.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import dockerfile

REPO = Path(__file__).resolve().parents[3]
VENV_BIN = Path(sys.executable).parent
# Docker's default PATH for the Debian-based python images the Dockerfiles start from.
IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Repository name (last path component) -> the Dockerfile that builds it.
DOCKERFILES: Mapping[str, Path] = {
    "rlhf-operator": REPO / "operator" / "Dockerfile",
    "rlhf-trainer-cpu": REPO / "e2e" / "trainer-cpu.Dockerfile",
}


class ImageError(Exception):
    """The image cannot run here; `reason` is the kubelet's waiting reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class ImageUser:
    name: str
    uid: int
    gid: int
    home: str
    shell: str
    create_home: bool


@dataclass(frozen=True)
class LocalImage:
    """An image as the kubelet runs it. Host mode: `dockerfile` set, this machine's root as the
    filesystem. Built mode (store.py): `rootfs` the image's exported root filesystem."""

    name: str
    dockerfile: Path | None
    env: dict[str, str]
    uid: int
    gid: int
    workdir: str
    entrypoint: tuple[str, ...]
    cmd: tuple[str, ...]
    users: tuple[ImageUser, ...] = ()
    # Files the image carries (host path -> path in the image): build caches, see seeds().
    seeds: dict[str, str] = field(default_factory=dict)
    rootfs: Path | None = None
    digest: str = ""  # the built image's ID (a pod's status.imageID)

    def user_named(self, uid: int) -> ImageUser | None:
        return next((u for u in self.users if u.uid == uid), None)

    @property
    def home(self) -> str:
        user = self.user_named(self.uid)
        return self.env.get("HOME") or (user.home if user else "/root")


def repository(image: str) -> str:
    """`ghcr.io/org/rlhf-operator:1.0@sha256:...` -> `rlhf-operator`."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return last.split(":", 1)[0]


def _useradd(command: str) -> ImageUser | None:
    """The user a Dockerfile's `RUN ... useradd ...` creates (the flags our Dockerfiles use)."""
    words = shlex.split(command)
    if "useradd" not in words:
        return None
    words = words[words.index("useradd") + 1 :]
    words = words[: words.index("&&")] if "&&" in words else words
    parser = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    parser.add_argument("--uid", "-u", type=int, required=True)
    parser.add_argument("--home-dir", "-d")
    parser.add_argument("--shell", "-s", default="/bin/sh")
    parser.add_argument("--create-home", "-m", action="store_true")
    parser.add_argument("--no-create-home", "-M", action="store_true")
    parser.add_argument("--user-group", "-U", action="store_true")
    parser.add_argument("--system", "-r", action="store_true")
    parser.add_argument("name")
    args = parser.parse_args(words)
    return ImageUser(
        name=args.name,
        uid=args.uid,
        gid=args.uid,  # --user-group: a group of the same name and id
        home=args.home_dir or f"/home/{args.name}",
        shell=args.shell,
        create_home=args.create_home and not args.no_create_home,
    )


def _parse_user(value: str, users: tuple[ImageUser, ...]) -> tuple[int, int]:
    user, _, group = value.partition(":")
    found = next((u for u in users if u.name == user), None)
    uid = found.uid if found else int(user)
    return uid, int(group) if group else (found.gid if found else uid)


def load(image: str) -> LocalImage:
    """The LocalImage of `image`, or ImageError (ErrImagePull) for one this substrate lacks."""
    path = DOCKERFILES.get(repository(image))
    if path is None:
        known = ", ".join(sorted(DOCKERFILES))
        raise ImageError(
            "ErrImagePull",
            f'Failed to pull image "{image}": the local substrate pulls nothing; it runs the '
            f"images this repository builds, by name ({known}), from this checkout's venv",
        )
    commands = dockerfile.parse_file(str(path))
    final = max(i for i, c in enumerate(commands) if c.cmd == "FROM")
    env: dict[str, str] = {"PATH": IMAGE_PATH}
    users: list[ImageUser] = []
    uid = gid = 0
    workdir, entrypoint, cmd = "/", (), ()
    for c in commands[final + 1 :]:
        if c.cmd == "ENV":
            pairs = c.value
            env.update({pairs[i]: pairs[i + 1] for i in range(0, len(pairs), 2)})
        elif c.cmd == "RUN":
            for part in " ".join(c.value).split("&&"):
                created = _useradd(part)
                if created is not None:
                    users.append(created)
        elif c.cmd == "USER":
            uid, gid = _parse_user(c.value[0], tuple(users))
        elif c.cmd == "WORKDIR":
            workdir = os.path.join(workdir, c.value[0])
        elif c.cmd == "ENTRYPOINT":
            entrypoint, cmd = tuple(c.value), ()  # a new ENTRYPOINT resets CMD, as in Docker
        elif c.cmd == "CMD":
            cmd = tuple(c.value)
    # The image's Python is this checkout's venv: first on PATH, as the image's own would be.
    env["PATH"] = f"{VENV_BIN}:{env['PATH']}"
    loaded = LocalImage(image, path, env, uid, gid, workdir, entrypoint, cmd, tuple(users))
    return dataclasses.replace(loaded, seeds=seeds(loaded))


def seeds(image: LocalImage) -> dict[str, str]:
    """Build caches an image would carry as a layer. DeepSpeed JIT-compiles its CPU ops into
    TORCH_EXTENSIONS_DIR on first use (about a minute on two cores); a real image would have
    them from its build, so the local one carries this machine's compiled copy when there is
    one (the test suite's trainer tests make it). Without one, each pod compiles its own."""
    target = image.env.get("TORCH_EXTENSIONS_DIR")
    host = Path(os.environ.get("TORCH_EXTENSIONS_DIR") or Path.home() / ".cache/torch_extensions")
    if target and host.is_dir():
        return {str(host): target}
    return {}
