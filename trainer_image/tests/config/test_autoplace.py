"""`placement.auto`: the OpenRLHF paper's layouts, small clusters, refusals with the numbers,
and how the job it resolves to runs (chosen values written, every rule checked)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from rlhf_trainer.cli import plan_files, validate_files
from rlhf_trainer.config import (
    DataConfig,
    JobConfig,
    LayoutError,
    ModelsConfig,
    PlacementConfig,
    RolloutConfig,
    TrainingConfig,
    cluster_problems,
    describe_layout,
    local_config_reader,
    plan_layout,
    resolve_job,
)
from rlhf_trainer.config.algorithm import AlgorithmConfig
from rlhf_trainer.config.autoplace import decide
from rlhf_trainer.config.autoplan import AutoError, Mode
from rlhf_trainer.config.memory import Zero

BASE: dict[str, Any] = {
    "algorithm": {"name": "ppo"},
    "models": {
        "actor": {"pretrained": "org/actor"},
        "rewardModels": [{"pretrained": "org/rm"}],
    },
    "data": {"train": [{"hfId": "org/prompts"}]},
    "training": {"rolloutBatchSize": 1024, "trainBatchSize": 128, "microTrainBatchSize": 1},
}
GRPO = {
    "algorithm": {"name": "grpo", "klCoef": 0.001},
    "models": {"rewardModels": [], "rewardFunction": {"builtin": "repeat-letter"}},
    "rollout": {"samplesPerPrompt": 8},
}
SECTIONS: dict[str, type[BaseModel]] = {
    "algorithm": AlgorithmConfig,
    "models": ModelsConfig,
    "data": DataConfig,
    "rollout": RolloutConfig,
    "training": TrainingConfig,
    "placement": PlacementConfig,
}


def merge(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """`base` with each section of `patch` laid over its own (one level deep)."""
    return {**base, **{k: {**base.get(k, {}), **v} for k, v in patch.items()}}


def auto(size: str, gpus: int, **more: Any) -> dict[str, Any]:
    return {"auto": True, "modelSize": size, "totalGpus": gpus, **more}


# Host memory per GPU for Adam offload: 16 bytes per parameter on the host (CPU Adam's fp32
# weights, moments and gradients), e.g. 260.8 GiB per GPU for a 70B actor on 4 GPUs.
BIG_HOSTS = {"resources": {"workerMemoryPerGpu": "320Gi"}}


def unchecked(doc: dict[str, Any]) -> JobConfig:
    """A job config whose sections are valid but whose cross-field rules are not run: the
    decision itself is tested, apart from the rules on what it chose."""
    sections = {k: SECTIONS[k].model_validate(v) for k, v in doc.items()}
    return JobConfig.model_construct(**sections)  # type: ignore[arg-type]


# id, spec patch, devices per role, tensor parallel, ZeRO, mode
DECISIONS = [
    # OpenRLHF (arXiv:2405.11143), Table 2: its four layouts on 80 GiB GPUs.
    (
        "paper-7B-16gpu-4/4/2/2-vllm4x1",
        {"placement": auto("7B", 16)},
        {"actor": 4, "reference": 2, "critic": 4, "reward": 2, "rollout": 4},
        1,
        Zero(2, False),
        Mode.SEPARATE,
    ),
    (
        "paper-13B-32gpu-8/8/4/4-vllm8x1",
        {"placement": auto("13B", 32)},
        {"actor": 8, "reference": 4, "critic": 8, "reward": 4, "rollout": 8},
        1,
        Zero(2, False),
        Mode.SEPARATE,
    ),
    (
        "paper-34B-32gpu-8/8/4/4-vllm4x2",
        {"placement": auto("34B", 32)},
        {"actor": 8, "reference": 4, "critic": 8, "reward": 4, "rollout": 8},
        2,
        Zero(3, False),
        Mode.SEPARATE,
    ),
    (
        "paper-70B-32gpu-4/4/4/4-vllm4x4",
        {"placement": auto("70B", 32, **BIG_HOSTS)},
        {"actor": 4, "reference": 4, "critic": 4, "reward": 4, "rollout": 16},
        4,
        Zero(3, True),
        Mode.SEPARATE,
    ),
    (
        "paper-7B-row-by-the-name-llama-3-8b",
        {
            "models": {
                "actor": {"pretrained": "OpenRLHF/Llama-3-8b-sft-mixture"},
                "rewardModels": [{"pretrained": "OpenRLHF/Llama-3-8b-rm-mixture"}],
            },
            "placement": {"auto": True, "totalGpus": 16},
        },
        {"actor": 4, "reference": 2, "critic": 4, "reward": 2, "rollout": 4},
        1,
        Zero(2, False),
        Mode.SEPARATE,
    ),
    # Elsewhere: the memory arithmetic.
    (
        "7B-8gpu-distributed",
        {"placement": auto("7B", 8)},
        {"actor": 2, "reference": 1, "critic": 2, "reward": 1, "rollout": 2},
        1,
        Zero(2, False),
        Mode.SEPARATE,
    ),
    (
        "7B-8gpu-24GiB-zero3-offload-tp2",
        {"placement": auto("7B", 8, gpuMemoryGiB=24)},
        {"actor": 2, "reference": 1, "critic": 2, "reward": 1, "rollout": 2},
        2,
        Zero(3, True),
        Mode.SEPARATE,
    ),
    (
        "70B-64gpu-zero3-vllm4x4",
        {"placement": auto("70B", 64)},
        {"actor": 16, "reference": 8, "critic": 16, "reward": 8, "rollout": 16},
        4,
        Zero(3, False),
        Mode.SEPARATE,
    ),
    (
        "1.5B-1gpu-hybrid-engine",
        {"placement": auto("1.5B", 1)},
        {"actor": 1, "reference": 1, "critic": 1, "reward": 1, "rollout": 1},
        1,
        Zero(2, False),
        Mode.HYBRID,
    ),
    (
        "grpo-7B-1gpu-hybrid-adam-offload",
        merge(GRPO, {"placement": auto("7B", 1, **BIG_HOSTS)}),
        {"actor": 1, "reference": 1, "rollout": 1},
        1,
        Zero(2, True),
        Mode.HYBRID,
    ),
    (
        "grpo-7B-8gpu-distributed",
        merge(GRPO, {"placement": auto("7B", 8)}),
        {"actor": 4, "reference": 2, "rollout": 2},
        1,
        Zero(2, False),
        Mode.SEPARATE,
    ),
    (
        "grpo-7B-11gpu-a-spare-gpu-becomes-an-engine",
        merge(GRPO, {"placement": auto("7B", 11)}),
        {"actor": 4, "reference": 2, "rollout": 5},
        1,
        Zero(2, False),
        Mode.SEPARATE,
    ),
    (
        "sft-7B-1gpu-adam-offload",
        {
            "algorithm": {"name": "sft"},
            "models": {"rewardModels": []},
            "placement": auto("7B", 1, **BIG_HOSTS),
        },
        {"actor": 1},
        1,
        Zero(2, True),
        Mode.SEPARATE,
    ),
    (
        "70B-16gpu-hf-engine-no-vllm",
        {"rollout": {"engine": "hf"}, "placement": auto("70B", 16, **BIG_HOSTS)},
        {"actor": 8, "reference": 2, "critic": 4, "reward": 2},
        1,
        Zero(3, True),
        Mode.SEPARATE,
    ),
]


@pytest.mark.parametrize(
    ("patch", "devices", "tp", "zero", "mode"),
    [c[1:] for c in DECISIONS],
    ids=[c[0] for c in DECISIONS],
)
def test_decision(
    patch: dict[str, Any], devices: dict[str, int], tp: int, zero: Zero, mode: Mode
) -> None:
    choice = decide(unchecked(merge(BASE, patch)))
    assert (choice.devices, choice.tensor_parallel, choice.zero, choice.mode) == (
        devices,
        tp,
        zero,
        mode,
    )
    # one line per role it places, plus the model sizes and the layout
    assert list(choice.reasons) == ["model", "layout", *devices]
    assert all(choice.reasons.values())


def test_the_paper_rows_say_so_and_the_rest_show_their_arithmetic() -> None:
    paper = decide(unchecked(merge(BASE, {"placement": auto("7B", 16)}))).reasons
    assert "OpenRLHF paper's layout (arXiv:2405.11143) for 7B on 16 GPUs" in paper["layout"]
    assert paper["model"] == ("actor, reference, critic, reward 7.0B (placement.modelSize)")
    assert paper["actor"] == (
        "4 GPUs: 35.9 of 68.0 usable GiB per GPU (ZeRO-2: bf16 weights, gradients, Adam states)"
    )
    big = decide(unchecked(merge(BASE, {"placement": auto("70B", 32, **BIG_HOSTS)}))).reasons
    assert "CPU Adam's states on the host: 260.8 of 288.0 GiB per GPU" in big["actor"]
    assert big["rollout"].startswith("4 engines x tensor parallel 4: 32.6 GiB of weights")
    hybrid = decide(unchecked(merge(BASE, {"placement": auto("1.5B", 1)}))).reasons
    assert "hybrid engine" in hybrid["layout"]
    assert "gpuMemoryUtilization 0.2: what the models leave" in hybrid["rollout"]


REFUSALS = [
    (
        "70B-actor-on-2-gpus",
        {"placement": auto("70B", 2)},
        "placement.totalGpus: a 70.0B actor needs >= 4 x 80 GiB GPUs with ZeRO-3 + Adam "
        "offload (65.2 of 68.0 usable GiB per GPU at 4); placement.totalGpus is 2",
    ),
    (
        "7B-ppo-on-1-gpu",
        {"placement": auto("7B", 1)},
        "placement.totalGpus: ppo with 7.0B models needs >= 2 x 80 GiB GPUs (hybrid engine: "
        "actor+reference+critic+reward+rollout 2, ZeRO-3 + Adam offload); "
        "placement.totalGpus is 1",
    ),
    (
        "default-total-is-one-node",
        {"placement": {"auto": True, "modelSize": "7B", "gpusPerNode": 1}},
        "placement.totalGpus is 1 (default: gpusPerNode)",
    ),
    (
        "70B-engine-on-24GiB-2-per-node",
        {"placement": auto("70B", 64, gpuMemoryGiB=24, gpusPerNode=2)},
        "placement.gpusPerNode: a 70.0B vLLM engine holds 65.2 GiB of weights per GPU even at "
        "tensor parallel 2 (one node), and needs as much again for its KV cache: more than "
        "rollout.gpuMemoryUtilization 0.9 x 24 GiB; raise gpusPerNode or gpuMemoryGiB",
    ),
    (
        "host-memory-for-adam-offload",
        {"placement": auto("70B", 32)},
        "placement.resources.workerMemoryPerGpu: ppo with 70.0B models fits 32 x 80 GiB GPUs "
        "only with ZeRO-3 + Adam offload, whose states take 130.4 GiB of host memory per GPU "
        "(critic on 8): more than 90% of workerMemoryPerGpu (64 GiB); set it to >= 145Gi or "
        "give more GPUs",
    ),
    (
        "cpu-device",
        {"placement": {**auto("7B", 8), "device": "cpu"}},
        "placement.auto: chooses layouts from GPU memory",
    ),
]


@pytest.mark.parametrize(
    ("patch", "message"), [c[1:] for c in REFUSALS], ids=[c[0] for c in REFUSALS]
)
def test_refusal_names_what_is_missing(patch: dict[str, Any], message: str) -> None:
    with pytest.raises(AutoError) as err:
        decide(unchecked(merge(BASE, patch)))
    assert message in str(err.value)
    # the same words from `rlhf validate`, the operator and the trainer (a config rule)
    with pytest.raises(ValidationError, match=re.escape(message)):
        JobConfig.model_validate(merge(BASE, patch))


def test_values_it_chose_are_named_in_a_rule_refusal() -> None:
    """A rule broken by a value placement.auto chose says so: 4 actor GPUs for a 70B actor do
    not divide a train batch of 6."""
    patch = {"placement": auto("70B", 32, **BIG_HOSTS), "training": {"trainBatchSize": 6}}
    with pytest.raises(ValidationError) as err:
        JobConfig.model_validate(merge(BASE, patch))
    text = str(err.value)
    assert (
        "placement.actorGpus (1 x 4 = 4); got 6 (chosen by placement.auto: see rlhf plan)" in text
    )


def test_a_70b_choice_runs_tensor_parallel_engines() -> None:
    cfg = JobConfig.model_validate(merge(BASE, {"placement": auto("70B", 32, **BIG_HOSTS)}))
    rollout = resolve_job(cfg).rollout
    assert (rollout.num_engines, rollout.tensor_parallel_size) == (4, 4)


def test_resolved_job_has_the_chosen_values_and_auto_off() -> None:
    cfg = JobConfig.model_validate(merge(BASE, {"placement": auto("7B", 16)}))
    placed = resolve_job(cfg)
    p, t, r = placed.placement, placed.training, placed.rollout
    assert not p.auto
    assert (p.actor_gpus, p.reference_gpus, p.critic_gpus, p.reward_gpus) == (4, 2, 4, 2)
    assert (t.zero_stage, t.adam_offload, r.num_engines, r.tensor_parallel_size) == (2, False, 4, 1)
    # it is a valid job as written, and places exactly what auto's layout said
    again = JobConfig.model_validate(placed.to_manifest())
    assert plan_layout(again).to_dict() | {"auto": None} == plan_layout(cfg).to_dict() | {
        "auto": None
    }


def test_explicit_placement_is_untouched() -> None:
    cfg = JobConfig.model_validate(merge(BASE, {"placement": {"actorGpus": 2}}))
    assert resolve_job(cfg) is cfg
    assert plan_layout(cfg).auto is None
    assert "auto" not in plan_layout(cfg).to_dict()


def test_the_plan_shows_the_choice() -> None:
    layout = plan_layout(JobConfig.model_validate(merge(BASE, {"placement": auto("7B", 16)})))
    text = describe_layout(layout)
    assert "auto       distributed, ZeRO-2" in text
    assert "  rollout   4 engines x tensor parallel 1" in text
    doc = layout.to_dict()["auto"]
    assert (doc["layout"], doc["zeroStage"], doc["adamOffload"]) == ("distributed", 2, False)
    assert set(doc["reasons"]) == {
        "model",
        "layout",
        "actor",
        "reference",
        "critic",
        "reward",
        "rollout",
    }


def test_a_size_only_a_config_json_tells(tmp_path: Path) -> None:
    """`rlhf validate/plan/run` read the local model's config.json; the operator cannot and
    asks for placement.modelSize."""
    model = tmp_path / "models" / "policy"
    model.mkdir(parents=True)
    (model / "config.json").write_text(
        json.dumps(
            {
                "model_type": "qwen2",
                "hidden_size": 3584,
                "intermediate_size": 18944,
                "num_hidden_layers": 28,
                "num_attention_heads": 28,
                "num_key_value_heads": 4,
                "vocab_size": 152064,
                "tie_word_embeddings": False,
            }
        )
    )
    doc = merge(
        BASE,
        {
            "models": {"actor": {"pretrained": "./models/policy"}},
            "placement": {"auto": True, "totalGpus": 16},
        },
    )
    cfg = JobConfig.model_validate(doc)  # the rules wait for the size
    # On a cluster the relative directory names nothing either.
    problems = [p.path for p in cluster_problems(cfg)]
    assert problems == ["models.actor.pretrained", "placement.modelSize"]
    with pytest.raises(LayoutError, match=re.escape("placement.modelSize: cannot tell the")):
        resolve_job(cfg)
    reader = local_config_reader(tmp_path)
    layout = plan_layout(cfg, reader)
    assert layout.auto is not None
    # Qwen2.5-7B's config: 7,615,616,512 parameters, exactly what transformers builds
    assert layout.auto.reasons["model"].startswith(
        "actor, reference 7.6B (counted from ./models/policy/config.json)"
    )
    assert "critic, reward 7.6B (assumed the actor's size)" in layout.auto.reasons["model"]
    assert resolve_job(cfg, reader).placement.actor_gpus == 4
    # the CLI reads it beside the manifest; without the file it names the field to set
    manifest = tmp_path / "job.yaml"
    manifest.write_text(
        json.dumps(
            {
                "apiVersion": "rlhf.dev/v1alpha1",
                "kind": "RLHFJob",
                "metadata": {"name": "auto"},
                "spec": doc,
            }
        )
    )
    assert validate_files([str(manifest)]) == (0, [f"{manifest}: ok (RLHFJob auto)"])
    code, lines = plan_files([str(manifest)], "json")
    assert code == 0
    assert json.loads(lines[0])["auto"]["reasons"]["actor"].startswith("4 GPUs: ")
    (model / "config.json").unlink()
    code, lines = validate_files([str(manifest)])
    assert code == 1
    assert lines[0].startswith(f"{manifest}: spec.placement.modelSize: cannot tell the size")


def test_rlhf_run_trains_the_resolved_job(capsys: pytest.CaptureFixture[str]) -> None:
    from rlhf_trainer.context.job import JobError
    from rlhf_trainer.runner.main import place

    cfg = JobConfig.model_validate(merge(BASE, {"placement": auto("7B", 16)}))
    placed = place(cfg, Path("."))
    assert not placed.placement.auto and placed.rollout.num_engines == 4
    assert "placement.auto chose" in capsys.readouterr().err
    unknown = JobConfig.model_validate(merge(BASE, {"placement": {"auto": True}}))
    with pytest.raises(JobError, match=re.escape("placement.modelSize")):
        place(unknown, Path("."))
