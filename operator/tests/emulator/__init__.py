"""A Kubernetes API server emulator for running the real kopf operator in tests and benchmarks.

Real HTTP on loopback, written directly on aiohttp (kmock 0.8 would have needed nearly every
method replaced: see README.md). Import it with `operator/tests` on `sys.path`
(pytest does that through `pythonpath` in pyproject.toml; a script adds it itself):

    from emulator import run_emulator
    async with run_emulator(crds=[path_or_dict], kubeconfig="kubeconfig") as k8s:
        ...  # k8s.url, k8s.get(...), k8s.patch_status(...), k8s.requests.counts()
"""

from .accounting import Faults, RequestLog, RequestRecord
from .errors import ApiError
from .harness import (
    KUBERAY_CRDS_DIR,
    OUR_CRD,
    EmittedEvent,
    Emulator,
    load_crds,
    project_crds,
    run_emulator,
)
from .resources import ResourceInfo

__all__ = [
    "KUBERAY_CRDS_DIR",
    "OUR_CRD",
    "ApiError",
    "EmittedEvent",
    "Emulator",
    "Faults",
    "RequestLog",
    "RequestRecord",
    "ResourceInfo",
    "load_crds",
    "project_crds",
    "run_emulator",
]
