"""Shared fixtures for the trainer tests: tiny random-init models built once per session.

Keep this file additive: several test packages (models, data, rewards, distributed, loop) use it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rlhf_trainer.config import RandomInit
from rlhf_trainer.config.output import ObjectStoreConfig

S3_BUCKET = "rlhf-test"

# Nothing can be downloaded here: fail fast on a Hub id instead of retrying for a minute.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny_spec() -> RandomInit:
    """The default `RandomInit` spec: Llama, hidden 64, 2 layers, 2 heads, vocab 512."""
    return RandomInit()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory, tiny_spec: RandomInit) -> Path:
    """A tiny random-init `LlamaForCausalLM` + tokenizer, saved with `save_pretrained`."""
    from rlhf_trainer.models.tiny import build_tiny_model

    return build_tiny_model(tiny_spec, tmp_path_factory.mktemp("tiny") / "causal-lm")


@pytest.fixture(scope="session")
def tiny_reward_model_dir(tmp_path_factory: pytest.TempPathFactory, tiny_spec: RandomInit) -> Path:
    """A tiny random-init `LlamaForSequenceClassification` (num_labels=1) + tokenizer."""
    from rlhf_trainer.models.tiny import build_tiny_model

    return build_tiny_model(tiny_spec, tmp_path_factory.mktemp("tiny") / "reward", kind="reward")


@pytest.fixture(scope="session")
def s3_store() -> Iterator[ObjectStoreConfig]:
    """moto's S3 server on loopback with bucket `rlhf-test`; the access keys it accepts are set
    in the environment, as the operator sets them from the job's Secret."""
    from moto.server import ThreadedMotoServer

    from rlhf_trainer.objectstore import client

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    with pytest.MonkeyPatch.context() as env:
        env.setenv("AWS_ACCESS_KEY_ID", "test")
        env.setenv("AWS_SECRET_ACCESS_KEY", "test")
        store = ObjectStoreConfig(endpoint_url=f"http://{host}:{port}")
        client(store).create_bucket(Bucket=S3_BUCKET)
        yield store
    server.stop()


@pytest.fixture
def rlhf_run(tmp_path: Path) -> Callable[[Path], tuple[Path, str]]:
    """Runs `python -m rlhf_trainer run MANIFEST` as a user would (a pipeline's stages in order)
    and asserts it succeeded; returns the run directory and the run's stderr."""

    def run(manifest: Path) -> tuple[Path, str]:
        run_dir = tmp_path / "runs"
        command = [sys.executable, "-m", "rlhf_trainer", "run", str(manifest)]
        result = subprocess.run(
            [*command, "--run-dir", str(run_dir)],
            capture_output=True,
            text=True,
            check=False,
            timeout=3000,
            env={**os.environ, "RLHF_TRACEBACK": "1"},
        )
        assert result.returncode == 0, result.stderr[-4000:]
        return run_dir, result.stderr

    return run
