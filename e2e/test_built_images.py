"""What only a built image can answer, asked of the images `make images` exported (the local
substrate's store), without Docker: each runs as its config's USER, numeric and not root, on a
read-only root with no network, and its entrypoint works there: `rlhf-operator --help` in the
operator image; in the CPU trainer image the whole stack imports and DeepSpeed's shm op loads
from the image (prebuilt: a JIT build would need a writable home). Skipped, with the reason,
where the images are not built or not up to date with this checkout (scripts/build-images.sh
builds them; it runs the same checks with `docker run` at build time)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from e2e_local import REPO
from substrate import store

TRAINER_CHECK = """
import os
import rlhf_trainer, torch, ray, deepspeed, vllm
from deepspeed.git_version_info import installed_ops
from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder
assert installed_ops["deepspeed_shm_comm"], installed_ops
ShareMemCommBuilder().load(verbose=False)
print("uid", os.getuid(), "torch", torch.__version__, "vllm", vllm.__version__)
"""


def _why_not() -> str | None:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return "running an exported image needs root and unshare (util-linux)"
    check = subprocess.run(
        ["bash", str(REPO / "scripts" / "build-images.sh"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    if check.returncode != 0:
        return f"the images are not built from this checkout (make images): {check.stderr[-300:]}"
    return None


WHY_NOT = _why_not()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=str(WHY_NOT))


def run_in_image(name: str, argv: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """`argv` in the exported image `name` as its config's user: a private mount namespace, the
    root filesystem bound read-only, /proc, a tmpfs /tmp, no network namespace shared out."""
    image = store.Store().load(name)
    assert image.rootfs is not None
    root = tmp_path / "root"
    root.mkdir()
    env = " ".join(shlex.quote(f"{k}={v}") for k, v in image.env.items())
    script = (
        f'mount --bind "{image.rootfs}" "{root}" && mount -o remount,bind,ro "{root}" '
        f'&& mount -t proc proc "{root}/proc" && mount -t tmpfs tmpfs "{root}/tmp" '
        f'&& exec chroot --userspec={image.uid}:{image.gid} "{root}" '
        f'env -i {env} sh -c \'cd "{image.workdir}" && exec "$@"\' sh "$@"'
    )
    return subprocess.run(
        ["unshare", "--mount", "--pid", "--net", "--fork", "sh", "-c", script, "sh", *argv],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.parametrize("name", ["rlhf-operator:local", "rlhf-trainer-cpu:local"])
def test_runs_as_a_numeric_non_root_user(name: str) -> None:
    (inspected,) = json.loads((store.STORE / store.Store().tags()[name] / "image.json").read_text())
    user = inspected["Config"]["User"].split(":")[0]
    assert user.isdigit() and user != "0", f"{name} has USER {user!r}"


def test_operator_help_on_a_read_only_root(tmp_path: Path) -> None:
    image = store.Store().load("rlhf-operator:local")
    result = run_in_image("rlhf-operator:local", [*image.entrypoint, "--help"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert "usage" in result.stdout.lower()


def test_trainer_stack_imports_and_the_deepspeed_op_is_prebuilt(tmp_path: Path) -> None:
    result = run_in_image("rlhf-trainer-cpu:local", ["python", "-c", TRAINER_CHECK], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    # The last line is the check's (DeepSpeed logs its accelerator choice to stdout first).
    assert result.stdout.splitlines()[-1].split()[:2] == ["uid", "1000"], result.stdout
