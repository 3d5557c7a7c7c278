"""`rlhf-operator render` and `rlhf validate` of the largest RLHFJob we accept (issue 25).

The spec fills every bound at once: a chat template just under the job config's budget (its
ConfigMap stays under 1 MiB), spec.env at its 128 KiB budget, 32 node-selector labels, 32
tolerations, 16 image pull secrets, 32 train, eval and pretrain sources, 64 egress CIDRs, 4096
GPUs per role (64 worker pods). Prints one JSON line: the file's size, the median wall time of
the whole CLI (a fresh interpreter: start-up, parse, validate, render, dump) and of the
in-process `render_file` and dump, and whether libyaml was used (`--pure-yaml`: without it).

    .venv/bin/python bench/render_large.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from rlhf_trainer.config.sizes import ENV_BUDGET, JOB_CONFIG_BUDGET


def largest_manifest() -> dict[str, Any]:
    env_value = 30_000
    env = [{"name": f"BIG_{i}", "value": "v" * env_value} for i in range(ENV_BUDGET // 31_000)]
    sources = [{"hfId": f"org/data-{i}", "probability": 1 / 32} for i in range(32)]
    spec: dict[str, Any] = {
        "algorithm": {"name": "ppo", "ptxCoef": 0.05},
        "models": {
            "actor": {"pretrained": "org/actor-7b"},
            "rewardModels": [{"pretrained": f"org/rm-{i}", "weight": 0.5} for i in range(8)],
        },
        "data": {
            "train": sources,
            "eval": sources,
            "pretrain": sources,
            # The rest of the config is a few KiB: the template takes what is left.
            "chatTemplate": "{{ message }}" * ((JOB_CONFIG_BUDGET - 40_000) // 13),
        },
        "rollout": {"numEngines": 512, "tensorParallelSize": 8},
        "training": {"rolloutBatchSize": 4096, "trainBatchSize": 4096, "microTrainBatchSize": 1},
        "placement": {
            "actorGpus": 4096,
            "criticGpus": 4096,
            "referenceGpus": 4096,
            "rewardGpus": 4096,
            "colocateActorReference": True,
            "colocateCriticReward": True,
            "gpusPerNode": 64,
            "nodeSelector": {f"example.com/label-{i}": f"value-{i}" for i in range(32)},
            "tolerations": [
                {"key": f"example.com/taint-{i}", "operator": "Exists"} for i in range(32)
            ],
        },
        "imagePullSecrets": [f"registry-{i}" for i in range(16)],
        "env": env,
        "network": {
            "egress": "restricted",
            "egressCidrs": [f"10.{i}.0.0/16" for i in range(64)],
        },
        "checkpoint": {"storage": {"size": "10Ti"}},
    }
    return {
        "apiVersion": "rlhf.dev/v1alpha1",
        "kind": "RLHFJob",
        "metadata": {"name": "largest"},
        "spec": spec,
    }


API_SERVER = "10.96.0.1/32"


def _timed(argv: list[str]) -> float:
    env = {**os.environ, "RLHF_OPERATOR_API_SERVER_CIDRS": API_SERVER}
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False, env=env)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{argv[2:4]} failed: {done.stderr[-2000:]}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--pure-yaml",
        action="store_true",
        help="in-process only, with PyYAML's pure-Python loader and emitter (as before libyaml)",
    )
    args = parser.parse_args()
    if args.pure_yaml:  # before our modules pick libyaml's classes
        for name in ("CSafeLoader", "CSafeDumper"):
            delattr(yaml, name)
    from rlhf_operator.render import render_file, to_yaml
    from rlhf_operator.settings import OperatorSettings

    settings = OperatorSettings(
        default_trainer_image="rlhf-trainer:bench",
        instance="bench",
        api_server_cidrs=(API_SERVER,),
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "largest.yaml"
        path.write_text(yaml.safe_dump(largest_manifest(), sort_keys=False, width=10**9))
        (rendered,) = render_file(path, settings)
        if rendered.problems:
            raise SystemExit(f"the largest spec is refused: {rendered.problems}")
        in_process = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            to_yaml(render_file(path, settings)[0].objects)
            in_process.append(time.perf_counter() - start)
        render_cli = [
            sys.executable,
            "-m",
            "rlhf_operator.cli",
            "render",
            "--image",
            "t:1",
            str(path),
        ]
        validate_cli = [sys.executable, "-m", "rlhf_trainer", "validate", "--cluster", str(path)]
        runs = 0 if args.pure_yaml else args.repeats
        cli = [_timed(render_cli) for _ in range(runs)]
        validate = [_timed(validate_cli) for _ in range(runs)]
        sizes = {o["kind"]: len(json.dumps(o)) for o in rendered.objects}
        print(
            json.dumps(
                {
                    "bench": "render_large",
                    "file_bytes": path.stat().st_size,
                    "objects": len(rendered.objects),
                    "largest_object_bytes": max(sizes.values()),
                    "configmap_bytes": max(
                        len(json.dumps(o)) for o in rendered.objects if o["kind"] == "ConfigMap"
                    ),
                    "rayjob_bytes": sizes["RayJob"],
                    "render_in_process_s": round(statistics.median(in_process), 3),
                    "render_cli_s": round(statistics.median(cli), 3) if cli else None,
                    "validate_cli_s": round(statistics.median(validate), 3) if validate else None,
                    "libyaml": hasattr(yaml, "CSafeLoader"),
                }
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
