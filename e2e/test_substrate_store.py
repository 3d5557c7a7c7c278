"""The local substrate's built-image store (e2e/local/substrate/store.py), checked without
Docker: image references, the image config's USER against the image's own /etc/passwd, and the
choice between built images and host mode. An export is laid out here as build-images.sh writes
one (`docker image inspect` JSON and a root filesystem)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from substrate import images, plans, store

PASSWD = (
    "root:x:0:0:root:/root:/bin/bash\n"
    "rlhf-operator:x:65532:999::/tmp:/usr/sbin/nologin\n"
    "ray:x:1000:1000::/home/ray:/bin/bash\n"
)
TRAINER_CONFIG: dict[str, Any] = {
    "User": "1000:1000",
    "Env": ["PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/home/ray", "A=b=c"],
    "WorkingDir": "/home/ray",
    "Entrypoint": ["python", "-m", "rlhf_trainer"],
    "Cmd": ["--help"],
}
DIGEST = "ab" * 32


def export(root: Path, tag: str, config: dict[str, Any], digest: str = DIGEST) -> store.Store:
    """An export as scripts/build-images.sh leaves one."""
    image_dir = root / digest
    (image_dir / "rootfs" / "etc").mkdir(parents=True)
    (image_dir / "rootfs" / "etc" / "passwd").write_text(PASSWD)
    (image_dir / "image.json").write_text(
        json.dumps([{"Id": f"sha256:{digest}", "Config": config}])
    )
    (root / "tags").mkdir(exist_ok=True)
    (root / "tags" / tag).write_text(f"{digest} 0123456789abcdef\n")
    return store.Store(root)


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ("rlhf-trainer-cpu:e2e", "rlhf-trainer-cpu:e2e"),
        ("registry.example:5000/ml/rlhf-trainer-cpu:e2e", "rlhf-trainer-cpu:e2e"),
        ("rlhf-operator", "rlhf-operator:latest"),
        (f"ghcr.io/x/rlhf-operator@sha256:{DIGEST}", f"rlhf-operator@sha256:{DIGEST}"),
    ],
    ids=["name-tag", "registry-port-path", "no-tag-is-latest", "digest"],
)
def test_reference(image: str, expected: str) -> None:
    assert store.reference(image) == expected


@pytest.mark.parametrize(
    ("user", "expected"),
    [
        ("", (0, 0)),
        ("65532:65532", (65532, 65532)),
        ("65532", (65532, 999)),  # the group of the image's passwd entry, as a runtime takes it
        ("ray", (1000, 1000)),
        ("ray:root", (1000, 0)),
        ("4242", (4242, 0)),  # a numeric user the image does not list runs with group 0
    ],
    ids=["empty-is-root", "uid-gid", "uid-only", "name", "name-group-name", "unlisted-uid"],
)
def test_user_ids_follow_the_images_passwd(
    tmp_path: Path, user: str, expected: tuple[int, int]
) -> None:
    users = store.passwd_users(_rootfs_with_passwd(tmp_path))
    assert store.user_ids(user, users) == expected


def _rootfs_with_passwd(root: Path) -> Path:
    (root / "etc").mkdir()
    (root / "etc" / "passwd").write_text(PASSWD)
    return root


def test_unknown_user_name_fails_like_a_runtime(tmp_path: Path) -> None:
    with pytest.raises(images.ImageError, match="unable to find user nobody-here"):
        store.user_ids("nobody-here", store.passwd_users(_rootfs_with_passwd(tmp_path)))


def test_a_built_image_is_its_config_and_root_filesystem(tmp_path: Path) -> None:
    built = export(tmp_path, "rlhf-trainer-cpu:e2e", TRAINER_CONFIG)
    image = built.load("registry.example/ml/rlhf-trainer-cpu:e2e")
    assert image.rootfs == tmp_path / DIGEST / "rootfs"
    assert image.digest == f"sha256:{DIGEST}"
    assert (image.uid, image.gid, image.workdir, image.home) == (
        1000,
        1000,
        "/home/ray",
        "/home/ray",
    )
    assert (image.entrypoint, image.cmd) == (("python", "-m", "rlhf_trainer"), ("--help",))
    assert image.env == {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/home/ray", "A": "b=c"}
    assert image.seeds == {}  # no host build cache: the image carries what its build made
    assert built.load(f"rlhf-trainer-cpu@sha256:{DIGEST}").rootfs == image.rootfs


def test_an_image_that_was_not_built_is_err_image_pull(tmp_path: Path) -> None:
    built = export(tmp_path, "rlhf-trainer-cpu:e2e", TRAINER_CONFIG)
    with pytest.raises(images.ImageError) as error:
        built.load("rlhf-trainer-cpu:other")
    assert error.value.reason == "ErrImagePull"
    assert "make images" in error.value.message and "rlhf-trainer-cpu:e2e" in error.value.message


def test_the_plan_of_a_built_image_lays_only_its_root_filesystem(tmp_path: Path) -> None:
    image = export(tmp_path / "store", "rlhf-trainer-cpu:e2e", TRAINER_CONFIG).load(
        "rlhf-trainer-cpu:e2e"
    )
    cluster = plans.Cluster(tmp_path / "state", "198.18.213.1", 443, tmp_path / "ca.crt")
    pod = {"metadata": {"name": "p", "namespace": "ns"}, "spec": {}}
    container = {"name": "c", "image": "rlhf-trainer-cpu:e2e", "args": ["run"]}
    plan = plans.container_plan(
        cluster,
        pod,
        container,
        image,
        lambda *_: None,
        volumes={},
        kubelet_files={},
        container_dir=tmp_path / "c",
    )
    assert plan["rootfs"]["lower"] == str(image.rootfs)
    assert (plan["rootfs"]["masks"], plan["rootfs"]["keep"], plan["rootfs"]["hide"]) == (
        {},
        [],
        None,
    )
    assert plan["users"] == [] and plan["seeds"] == []  # the image's own passwd and files
    assert (plan["uid"], plan["gid"], plan["cwd"]) == (1000, 1000, "/home/ray")
    assert plan["argv"] == ["python", "-m", "rlhf_trainer", "run"]
    assert plan["env"]["HOME"] == "/home/ray" and plan["env"]["HOSTNAME"] == "p"


def test_host_mode_plan_keeps_this_machine_as_the_lower_layer(tmp_path: Path) -> None:
    image = images.load("rlhf-trainer-cpu:e2e")
    cluster = plans.Cluster(tmp_path / "state", "198.18.213.1", 443, tmp_path / "ca.crt")
    pod = {"metadata": {"name": "p", "namespace": "ns"}, "spec": {}}
    plan = plans.container_plan(
        cluster,
        pod,
        {"name": "c", "image": "rlhf-trainer-cpu:e2e"},
        image,
        lambda *_: None,
        volumes={},
        kubelet_files={},
        container_dir=tmp_path / "c",
    )
    assert plan["rootfs"]["lower"] == "/"
    assert set(plan["rootfs"]["masks"]) == set(plans.MASKS)
    assert [u["name"] for u in plan["users"]] == ["ray"]


@pytest.mark.parametrize(
    ("requested", "built", "expected"),
    [
        ("auto", True, "built"),
        ("auto", False, "host"),
        ("host", True, "host"),
        ("built", True, "built"),
    ],
    ids=["auto-built", "auto-nothing-built", "host-asked", "built-asked"],
)
def test_choose(tmp_path: Path, requested: str, built: bool, expected: str) -> None:
    found = (
        export(tmp_path, "rlhf-operator:local", {"User": "65532"})
        if built
        else store.Store(tmp_path)
    )
    mode, why = store.choose(requested, found)
    assert mode == expected
    assert ("rlhf-operator:local" in why) == (expected == "built")


def test_built_mode_without_images_refuses_to_start(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="run make images"):
        store.choose("built", store.Store(tmp_path))
