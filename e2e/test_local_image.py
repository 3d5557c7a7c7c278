"""The local substrate's "image" is this machine's filesystem with this checkout's venv as its
Python, so the checkout may lie under a path a pod mounts a volume on: the operator's
Deployment mounts an emptyDir at /tmp, and a clone under /tmp used to leave its pod unable to
exec `rlhf-operator` (exit 128, crash loop). Whatever volume covers the checkout, the image's
Python stays where it is, read-only, and the rest of the volume is the pod's own. Local
substrate only (a real cluster's images are real)."""

from __future__ import annotations

from pathlib import Path

import pytest
from e2e_cluster import Cluster, wait_for
from e2e_local import REPO, LocalSubstrate
from e2e_settings import OPERATOR_IMAGE

pytestmark = pytest.mark.e2e


def test_a_volume_over_the_checkout_leaves_the_images_python_in_place(
    cluster: Cluster, substrate: LocalSubstrate | None, namespace: str
) -> None:
    if substrate is None:
        pytest.skip("the local substrate's image: this run is on a real cluster")
    if substrate.image_source().startswith("built"):
        pytest.skip("the pods run from the built images: their Python is in the image, not here")
    covered = REPO.parent
    if covered == Path("/"):
        pytest.skip("the checkout is a top-level directory: no volume can cover only it")
    pod = "image-under-a-volume"
    script = (
        f"rlhf-operator --help >/dev/null && echo ok > {covered}/written && ls -A {covered} && "
        f"if touch {REPO}/written 2>/dev/null; then echo checkout-writable; fi"
    )
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": pod, "namespace": namespace},
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "check",
                        "image": OPERATOR_IMAGE,  # runs as its Dockerfile's user, 65532
                        "command": ["sh", "-c", script],
                        "volumeMounts": [{"name": "cover", "mountPath": str(covered)}],
                    }
                ],
                "volumes": [{"name": "cover", "emptyDir": {}}],
            },
        }
    )

    def finished() -> str | None:
        phase = (cluster.get("pod", pod, namespace) or {}).get("status", {}).get("phase")
        return str(phase) if phase in ("Succeeded", "Failed") else None

    phase = wait_for(finished, timeout=120, interval=1, what=f"pod {pod}")
    found = cluster.get("pod", pod, namespace) or {}
    output = cluster.kubectl("logs", pod, "-n", namespace)
    cluster.kubectl("delete", "pod", pod, "-n", namespace, "--wait=false")
    assert phase == "Succeeded", f"{output}\n{found.get('status')}"
    # The volume is the pod's: empty but for what it wrote and the checkout's mount point.
    assert sorted(output.split()) == sorted([REPO.name, "written"])
