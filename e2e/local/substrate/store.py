"""Built images: what scripts/build-images.sh (`make images`) built from the Dockerfiles and
exported for the substrate, once per image digest:

    <store>/<digest>/rootfs/       the image's root filesystem (`docker export`)
    <store>/<digest>/image.json    its config (`docker image inspect`)
    <store>/tags/<name>:<tag>      "<digest> <context key>" of the image the tag names

A container of such an image runs on an overlay whose lower layer is that root filesystem, with
the ENV, USER, WORKDIR, ENTRYPOINT and CMD of the image's config: nothing comes from this
machine's filesystem or from parsing a Dockerfile. No Docker daemon is needed to run them.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .images import ImageError, ImageUser, LocalImage, repository

CACHE = Path(os.environ.get("RLHF_IMAGES_CACHE") or Path.home() / ".cache/rlhf-operator/images")
STORE = CACHE / "store"


def reference(image: str) -> str:
    """`registry.example/ml/rlhf-trainer-cpu:e2e` -> `rlhf-trainer-cpu:e2e`; no tag is
    `latest`, as in Docker. A digest reference keeps its digest (`name@sha256:...`)."""
    name, _, digest = image.partition("@")
    last = name.rsplit("/", 1)[-1]
    if digest:
        return f"{repository(image)}@{digest}"
    return last if ":" in last else f"{last}:latest"


def passwd_users(rootfs: Path) -> tuple[ImageUser, ...]:
    """The users of the image's /etc/passwd (those its build's `useradd` made among them)."""
    path = rootfs / "etc" / "passwd"
    users = []
    for line in path.read_text().splitlines() if path.exists() else []:
        fields = line.split(":")
        if len(fields) == 7 and fields[2].isdigit() and fields[3].isdigit():
            users.append(
                ImageUser(fields[0], int(fields[2]), int(fields[3]), fields[5], fields[6], False)
            )
    return tuple(users)


def user_ids(user: str, users: tuple[ImageUser, ...]) -> tuple[int, int]:
    """The (uid, gid) of a config's User: `65532:65532`, `ray`, `1000` or empty (root)."""
    name, _, group = (user or "0").partition(":")
    found = next((u for u in users if u.name == name or str(u.uid) == name), None)
    if found is None and not name.isdigit():
        raise ImageError("CreateContainerError", f"unable to find user {name}: no such user")
    uid = found.uid if found else int(name)
    if not group:
        return uid, found.gid if found else 0
    by_name = {u.name: u.gid for u in users}
    return uid, int(group) if group.isdigit() else by_name.get(group, 0)


def from_config(name: str, digest: str, config: dict[str, Any], rootfs: Path) -> LocalImage:
    """The LocalImage of an image's config (`docker image inspect`'s `Config`)."""
    env = dict(entry.split("=", 1) for entry in config.get("Env") or [] if "=" in entry)
    users = passwd_users(rootfs)
    uid, gid = user_ids(str(config.get("User") or ""), users)
    return LocalImage(
        name=name,
        dockerfile=None,
        env=env,
        uid=uid,
        gid=gid,
        workdir=str(config.get("WorkingDir") or "/"),
        entrypoint=tuple(config.get("Entrypoint") or ()),
        cmd=tuple(config.get("Cmd") or ()),
        users=users,
        rootfs=rootfs,
        digest=f"sha256:{digest}",
    )


@dataclass(frozen=True)
class Store:
    root: Path = STORE

    def tags(self) -> dict[str, str]:
        """`name:tag` -> digest of every image exported here."""
        directory = self.root / "tags"
        if not directory.is_dir():
            return {}
        return {p.name: p.read_text().split()[0] for p in directory.iterdir() if p.read_text()}

    def load(self, image: str) -> LocalImage:
        """The built image `image` names, or ImageError (ErrImagePull) for one not built."""
        ref = reference(image)
        tags = self.tags()
        digest = ref.split("@sha256:", 1)[1] if "@sha256:" in ref else tags.get(ref)
        directory = self.root / digest if digest else None
        if directory is None or not (directory / "image.json").exists():
            known = ", ".join(sorted(tags)) or "none"
            raise ImageError(
                "ErrImagePull",
                f'Failed to pull image "{image}": the local substrate pulls nothing; it runs the '
                f"images `make images` built (here: {known})",
            )
        (inspected,) = json.loads((directory / "image.json").read_text())
        return from_config(image, directory.name, inspected["Config"], directory / "rootfs")


MODES = ("auto", "built", "host")


def choose(requested: str, store: Store) -> tuple[str, str]:
    """Which images the kubelet runs, and why: "built" (this store's) or "host" (this
    machine's filesystem and this checkout's venv, images.py). `auto` takes the built images
    when there are any."""
    tags = store.tags()
    if requested == "host":
        return "host", "host mode as asked (--images host): this machine's filesystem and venv"
    if tags:
        return "built", f"the images `make images` built ({', '.join(sorted(tags))})"
    if requested == "built":
        raise SystemExit(f"--images built: no image was built into {store.root}: run make images")
    return "host", (
        f"host mode: no image was built into {store.root} (`make images` builds them), so pods "
        "run on this machine's filesystem and this checkout's venv"
    )
