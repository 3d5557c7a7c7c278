"""The offline trainers end to end: the runner on real Ray actors with DeepSpeed (gloo on CPU),
a tiny random-init Llama, and synthetic data each trainer must learn.

One local Ray (2 CPUs, 4 "GPU-like" devices) serves the module. Each run takes ~10 s here, most
of it the rank processes importing torch/DeepSpeed; the steps themselves take milliseconds.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from rlhf_trainer.config import JobConfig
from rlhf_trainer.runner.main import run_config

from .jobs import RAY_RESOURCE, offline_job
from .synthetic import FIXED_ANSWER, kto_rows, preference_rows, sft_rows, write_jsonl


@pytest.fixture(scope="module")
def ray_module() -> Iterator[None]:
    import ray

    yield
    if ray.is_initialized():
        ray.shutdown()


@pytest.fixture
def ray_up(ray_module: None) -> None:
    """A local Ray with room for 4 ranks (re-started if a run shut it down)."""
    import ray

    if not ray.is_initialized():
        ray.init(
            num_cpus=2,
            resources={RAY_RESOURCE: 4},
            include_dashboard=False,
            log_to_driver=False,
            object_store_memory=256 * 2**20,
        )


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("offline-data")
    write_jsonl(out / "sft.jsonl", sft_rows(64))
    write_jsonl(out / "preferences.jsonl", preference_rows(128))
    write_jsonl(out / "kto.jsonl", kto_rows(128))
    return out


def run(job: JobConfig, data_dir: Path, run_dir: Path, resume: str = "never") -> int:
    return run_config(job, name=run_dir.name, base_dir=data_dir, run_dir=run_dir, resume=resume)


def step_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """Step records of metrics.jsonl in file order (a resumed run appends its steps)."""
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if "metrics" in r]


def series(records: list[dict[str, Any]], key: str) -> list[float]:
    return [r["metrics"][key] for r in records]


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


def greedy(model_dir: Path, prompt: str, tokens: int) -> str:
    from rlhf_trainer.models.loading import load_causal_lm, load_tokenizer

    model, tok = load_causal_lm(model_dir).eval(), load_tokenizer(model_dir)
    text = tok.apply_chat_template(
        [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
    )
    ids = tok(text, add_special_tokens=False, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(
            **ids, max_new_tokens=tokens, do_sample=False, pad_token_id=tok.pad_token_id
        )
    return str(tok.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True))


def test_sft_learns_a_fixed_response_and_resumes_at_the_right_step(
    ray_up: None, data_dir: Path, tiny_model_dir: Path, tmp_path: Path
) -> None:
    job = offline_job("sft", tiny_model_dir, "sft.jsonl", steps=24, lr=1e-2, every=12)
    run_dir = tmp_path / "sft"
    assert run(job, data_dir, run_dir) == 0
    first = step_metrics(run_dir)
    loss = series(first, "loss")
    assert [r["step"] for r in first] == list(range(1, 25))
    assert loss[-1] < 0.1 * loss[0], loss  # measured: 6.25 -> ~0.25
    assert all(g > 0 for g in series(first, "grad_norm"))
    # The HF export answers an unseen prompt with the trained response.
    assert greedy(run_dir / "final", "Tell me about owls.", 12) == FIXED_ANSWER

    # Lose the last checkpoint, as if the run died after step 12: `resume: auto` continues
    # from step 12 and repeats steps 13-24 exactly (same data, weights, Adam and LR state).
    shutil.rmtree(run_dir / "checkpoints" / "step-000024")
    assert run(job, data_dir, run_dir, resume="auto") == 0
    resumed = step_metrics(run_dir)[len(first) :]
    assert [r["step"] for r in resumed] == list(range(13, 25))
    for key in ("loss", "lr"):
        assert series(resumed, key) == pytest.approx(series(first[12:], key), rel=1e-4, abs=1e-6)
    state = json.loads((run_dir / "checkpoints" / "step-000024" / "trainer_state.json").read_text())
    assert (state["step"], state["data_position"], state["samples_seen"]) == (24, 192, 192)


def test_dpo_on_two_zero2_ranks_widens_the_chosen_rejected_margin(
    ray_up: None, data_dir: Path, tiny_model_dir: Path, tmp_path: Path
) -> None:
    job = offline_job(
        "dpo", tiny_model_dir, "preferences.jsonl", steps=12, lr=1e-3, ranks=2, zero=2, micro=2
    )
    run_dir = tmp_path / "dpo"
    assert run(job, data_dir, run_dir) == 0
    records = step_metrics(run_dir)
    margin, loss = series(records, "margin"), series(records, "loss")
    # Step 1: the policy is the reference, so the log-ratio margin is 0 and the loss log 2.
    assert margin[0] == pytest.approx(0.0, abs=1e-4)
    assert loss[0] == pytest.approx(0.6931, abs=1e-3)
    assert mean(margin[-3:]) > 0.5, margin  # measured ~1.2
    assert mean(series(records, "accuracy")[-3:]) >= 0.9
    assert mean(loss[-3:]) < 0.45, loss
    assert all(g > 0 for g in series(records, "grad_norm"))
    assert (run_dir / "final" / "model.safetensors").exists()


def test_reward_model_ranks_held_out_pairs_and_exports_a_loadable_value_model(
    ray_up: None, data_dir: Path, tiny_model_dir: Path, tmp_path: Path
) -> None:
    from transformers import AutoModelForSequenceClassification

    from rlhf_trainer.data.offline import load_preferences
    from rlhf_trainer.models.loading import load_tokenizer, load_value_model
    from rlhf_trainer.objectives.collate import collate
    from rlhf_trainer.objectives.kinds import offline_spec
    from rlhf_trainer.objectives.offline import sequence_scores

    job = offline_job("reward-model", tiny_model_dir, "preferences.jsonl", steps=12, lr=1e-3)
    run_dir = tmp_path / "rm"
    assert run(job, data_dir, run_dir) == 0
    records = step_metrics(run_dir)
    accuracy, loss = series(records, "accuracy"), series(records, "loss")
    assert mean(accuracy[-4:]) >= 0.9, accuracy  # measured: 0.375 -> 1.0
    assert mean(loss[-4:]) < 0.5 * loss[0], loss

    final = run_dir / "final"
    _, info = AutoModelForSequenceClassification.from_pretrained(
        final, num_labels=1, output_loading_info=True
    )
    assert not info["missing_keys"]  # the trained head is in the export
    model = load_value_model(final).eval()
    held_out = write_jsonl(
        tmp_path / "held-out" / "preferences.jsonl", preference_rows(32, seed=99)
    )
    pairs = load_preferences(job.data, load_tokenizer(final), held_out.parent, seed=0)
    spec = offline_spec(job)
    with torch.no_grad():
        scores = sequence_scores(model, collate(list(pairs), spec, 0, job.data.max_length))
    assert float((scores[:, 0] > scores[:, 1]).float().mean()) >= 0.8


def test_kto_loss_falls_and_separates_desirable_from_undesirable(
    ray_up: None, data_dir: Path, tiny_model_dir: Path, tmp_path: Path
) -> None:
    job = offline_job("kto", tiny_model_dir, "kto.jsonl", steps=16, lr=1e-3)
    run_dir = tmp_path / "kto"
    assert run(job, data_dir, run_dir) == 0
    records = step_metrics(run_dir)
    loss = series(records, "loss")
    assert loss[0] == pytest.approx(0.5, abs=1e-3)  # 1 - sigmoid(0): policy == reference
    assert mean(loss[-4:]) < mean(loss[:4]) - 0.03, loss
    last = records[-4:]
    assert mean(series(last, "desirable_reward")) > mean(series(last, "undesirable_reward"))


def test_s3_data_in_and_every_output_file_up_to_the_bucket(
    ray_up: None, data_dir: Path, tiny_model_dir: Path, tmp_path: Path, s3_store: Any
) -> None:
    """The cluster's storage path without a cluster: the data comes from an s3:// location,
    and once training ends the final model, metrics.jsonl and the TensorBoard logs are in the
    bucket too (moto's S3 server), the model loadable from there."""
    from rlhf_trainer.config.locations import parse_s3
    from rlhf_trainer.objectstore import client, download

    s3 = client(s3_store)
    s3.upload_file(str(data_dir / "sft.jsonl"), "rlhf-test", "data/sft.jsonl")
    job = offline_job("sft", tiny_model_dir, "s3://rlhf-test/data/sft.jsonl", steps=2, lr=1e-3)
    doc = job.to_manifest()
    doc["objectStore"] = s3_store.to_manifest()
    doc["output"] = {"uri": "s3://rlhf-test/team-a/sft-s3"}
    run_dir = tmp_path / "sft-s3"
    assert run(JobConfig.model_validate(doc), data_dir, run_dir) == 0
    listed = s3.list_objects_v2(Bucket="rlhf-test", Prefix="team-a/sft-s3/")["Contents"]
    keys = {o["Key"].removeprefix("team-a/sft-s3/") for o in listed}
    local = {str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if p.is_file()}
    outputs = {k for k in local if k.split("/")[0] in ("final", "tensorboard", "metrics.jsonl")}
    assert {k for k in outputs if k.startswith("final/")}, local
    assert keys == outputs
    fetched = download(parse_s3("s3://rlhf-test/team-a/sft-s3/final"), tmp_path / "m", s3_store)
    assert greedy(fetched, "Tell me about owls.", 4) == greedy(
        run_dir / "final", "Tell me about owls.", 4
    )


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["dpo", "reward-model"])
def test_a_packed_run_trains_like_the_padded_one(
    algorithm: str, ray_up: None, data_dir: Path, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """`training.packingSamples` on the real ranks (trained, and DPO's reference): every step's
    loss equals the padded run's, the updates in between included."""
    losses = {}
    for packed in (False, True):
        job = offline_job(
            algorithm,
            tiny_model_dir,
            "preferences.jsonl",
            steps=4,
            lr=1e-3,
            training_extra={"packingSamples": packed},
        )
        run_dir = tmp_path / f"{algorithm}-packed-{packed}"
        assert run(job, data_dir, run_dir) == 0
        losses[packed] = series(step_metrics(run_dir), "loss")
    assert len(losses[True]) == 4
    assert losses[True] == pytest.approx(losses[False], rel=1e-4, abs=1e-5)
