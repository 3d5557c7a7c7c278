"""What only the local substrate can show about the journey (test_tiny_ppo_on_kind.py, which
runs first: pytest takes the files in name order): after the RLHFJob was deleted, no process
of its pods is left on the machine, and its checkpoints outlived it in the volume's directory.
On a real cluster these are the kubelet's and the storage's business: skipped there."""

from __future__ import annotations

import time

import pytest
from e2e_job import load_example
from e2e_local import LocalSubstrate

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def local(substrate: LocalSubstrate | None, namespace: str) -> LocalSubstrate:
    if substrate is None:
        pytest.skip("local-substrate checks: this run is on a real cluster")
    job = str(load_example()["metadata"]["name"])
    if not substrate.pvc_dir(namespace, f"{job}-checkpoints").exists():
        pytest.skip("the journey (test_tiny_ppo_on_kind.py) did not run in this session")
    return substrate


def test_no_process_of_the_jobs_pods_is_left(local: LocalSubstrate, namespace: str) -> None:
    job = str(load_example()["metadata"]["name"])
    pod_dirs = local.pod_dir_prefix(namespace, f"{job}-")
    deadline = time.monotonic() + 120  # pods stop within their grace period
    while left := local.processes(argv_contains=pod_dirs, env_entry=f"RLHF_JOB_NAME={job}"):
        assert time.monotonic() < deadline, "processes of deleted pods:\n" + "\n".join(left)
        time.sleep(1)


def test_checkpoints_outlive_the_job_in_the_volume_directory(
    local: LocalSubstrate, namespace: str
) -> None:
    job = str(load_example()["metadata"]["name"])
    volume = local.pvc_dir(namespace, f"{job}-checkpoints")
    steps = sorted(p for p in volume.rglob("step-*") if p.is_dir() and (p / "COMPLETE").exists())
    assert steps, f"no complete checkpoint under {volume}: {sorted(volume.rglob('*'))[:20]}"


def test_the_final_model_outlives_the_pods_where_status_said(
    local: LocalSubstrate, namespace: str
) -> None:
    """status.output.model is pvc://<claim>/<job>/output/final/actor (checked on both substrates);
    here the claim's directory is readable: the model loads with transformers and generates."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    job = str(load_example()["metadata"]["name"])
    output = local.pvc_dir(namespace, f"{job}-checkpoints") / job / "output"
    assert (output / "metrics.jsonl").read_text().strip(), "no metrics on the volume"
    model = AutoModelForCausalLM.from_pretrained(output / "final" / "actor").eval()
    tokenizer = AutoTokenizer.from_pretrained(output / "final" / "actor")
    ids = tokenizer("Repeat the letter a.", return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=4, do_sample=False)
    assert out.shape[1] > ids["input_ids"].shape[1]
