"""`helm install` of this checkout's chart into the substrate: `helm template` renders it (the
real Helm v4 binary that scripts/get-helm.sh fetches), and every object is created through the
API as the release's namespace admin would. The Deployment's pods then come from the workloads
controller and run on the kubelet like any others: the operator runs with the chart's
ServiceAccount, RBAC, environment, probes and security context.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from emulator import ApiError, Emulator

from .images import REPO

JSON = dict[str, Any]
RELEASE, NAMESPACE = "rlhf-operator", "rlhf-system"


def render(
    values: Mapping[str, str],
    *,
    files: Sequence[Path] = (),
    release: str = RELEASE,
    namespace: str = NAMESPACE,
) -> list[JSON]:
    """The chart's objects with `files` (`-f`, in order) and `values` (`--set`, which win)."""
    sys.path.insert(0, str(REPO / "deploy_tests"))
    from helm_tool import (  # the chart minus its unfetchable KubeRay dependency
        offline_chart_copy,
        tool_dir,
    )

    with tempfile.TemporaryDirectory() as scratch:
        home = Path(scratch)
        chart = offline_chart_copy(home / "chart")
        command = [
            str(tool_dir() / "helm"),
            "template",
            release,
            str(chart),
            "--namespace",
            namespace,
            "--include-crds",
        ]
        for file in files:
            command += ["--values", str(file)]
        for key, value in values.items():
            command += ["--set", f"{key}={value}"]
        env = {
            "HELM_CACHE_HOME": str(home / "c"),
            "HELM_CONFIG_HOME": str(home / "f"),
            "HELM_DATA_HOME": str(home / "d"),
            "PATH": "/usr/bin:/bin",
        }
        result = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"helm template failed:\n{result.stderr}")
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def resource_of(api: Emulator, obj: JSON) -> str:
    group, _, version = str(obj["apiVersion"]).rpartition("/")
    for info in api.registry.all():
        if (info.group, info.version, info.kind) == (group, version, obj["kind"]):
            return f"{group}/{version}/{info.plural}" if group else f"{version}/{info.plural}"
    raise ValueError(f"the substrate's API does not serve {obj['apiVersion']} {obj['kind']}")


def install(api: Emulator, objects: list[JSON], *, namespace: str = NAMESPACE) -> None:
    """Like `helm install --create-namespace`: CRDs first (kept when present), then the rest."""
    if api.find("namespaces", namespace) is None:
        api.create_namespace(namespace)
    ordered = sorted(objects, key=lambda o: o["kind"] != "CustomResourceDefinition")
    for obj in ordered:
        resource = resource_of(api, obj)
        name = obj["metadata"]["name"]
        target = namespace if api.registry.resolve(resource).namespaced else None
        if obj["kind"] == "CustomResourceDefinition" and api.find(resource, name) is not None:
            continue
        try:
            api.create(resource, obj, target)
        except ApiError as err:
            raise RuntimeError(f"installing {obj['kind']} {name}: {err.message}") from err
