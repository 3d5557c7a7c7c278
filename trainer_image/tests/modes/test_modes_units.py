"""conditional-sft and distillation: the pure parts (prompt conditioning, the KL losses, the
teacher's role, the rules and the batch layout)."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from pydantic import ValidationError

from rlhf_trainer.algos.distillation import distillation_loss, token_kls
from rlhf_trainer.config import (
    DataConfig,
    JobConfig,
    plan_layout,
    role_devices,
    validation_messages,
)
from rlhf_trainer.data.builtin import builtin_rows, repeat_letter_score
from rlhf_trainer.data.conditional import condition_prompt, format_score
from rlhf_trainer.objectives.collate import trim_right


def messages(doc: dict[str, Any]) -> list[str]:
    try:
        JobConfig.model_validate(doc)
    except ValidationError as err:
        return validation_messages(err)
    return []


def offline(algorithm: str, **sections: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "algorithm": {"name": algorithm},
        "models": {"actor": {"randomInit": {}}},
        "data": {"train": [{"builtin": "repeat-letter"}]},
        "training": {"trainBatchSize": 8, "microTrainBatchSize": 2},
    }
    for key, value in sections.items():
        doc[key] = {**doc.get(key, {}), **value}
    return doc


# --- conditional SFT -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prompt", "score", "expected"),
    [
        ("Repeat a.", 4, "Repeat a. <rm_score>: 4"),
        ("Repeat a.", 0.125, "Repeat a. <rm_score>: 0.12"),
        ("Repeat a.", "quality:4,toxicity:0", "Repeat a. <rm_score>: quality:4,toxicity:0"),
        ("a {score} b", 1.5, "a {score} b <rm_score>: 1.5"),
    ],
    ids=["int", "rounded", "steerlm-attributes", "braces-in-prompt"],
)
def test_condition_prompt_fills_the_template(prompt: str, score: Any, expected: str) -> None:
    assert condition_prompt(prompt, score, "{prompt} <rm_score>: {score}") == expected


def test_condition_prompt_conditions_the_last_chat_message() -> None:
    chat = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]
    out = condition_prompt(chat, 3, "{score} | {prompt}")
    assert out == [{"role": "system", "content": "s"}, {"role": "user", "content": "3 | q"}]
    assert chat[1]["content"] == "q"  # the input is not modified


@pytest.mark.parametrize("bad", [True, None, [1]], ids=["bool", "none", "list"])
def test_a_score_must_be_a_number_or_a_string(bad: Any) -> None:
    with pytest.raises(ValueError, match="a score must be a number or a string"):
        format_score(bad)


def test_a_template_without_its_fields_is_refused_by_the_rules() -> None:
    doc = offline("conditional-sft", data={"scoreTemplate": "{prompt} is good"})
    assert messages(doc) == [
        "data.scoreTemplate: must contain {score} (where the prompt and the score go), e.g. "
        "'{prompt} <rm_score>: {score}'; got '{prompt} is good'"
    ]


def test_builtin_conditional_rows_score_their_own_answers() -> None:
    cfg = DataConfig.model_validate({"train": [{"builtin": "repeat-letter"}]})
    rows = builtin_rows("repeat-letter:abcd", "train", 0, "conditional", cfg)
    assert {r["score"] for r in rows} == {0, 1, 2, 3, 4}
    for row in rows[:50]:
        letter = row["prompt"][-2]
        assert repeat_letter_score(row["response"], letter) == row["score"] / 4


# --- distillation ----------------------------------------------------------------------------


def test_distillation_needs_a_teacher_and_only_it_takes_one() -> None:
    assert messages(offline("distillation")) == [
        "models.teacher: algorithm distillation learns from a teacher's token distributions: "
        "set models.teacher (pretrained or randomInit), a model with the actor's tokenizer"
    ]
    teacher = {"actor": {"randomInit": {}}, "teacher": {"randomInit": {}}}
    assert messages(offline("sft", models=teacher)) == [
        "models.teacher: only algorithms distillation and on-policy-distillation use a "
        "teacher (got sft): remove it"
    ]


def test_the_teacher_is_placed_like_the_reference() -> None:
    models = {"actor": {"randomInit": {}}, "teacher": {"randomInit": {}}}
    cfg = JobConfig.model_validate(offline("distillation", models=models, placement={}))
    assert role_devices(cfg) == {"actor": 1, "teacher": 1}
    assert [g.name for g in plan_layout(cfg).groups] == ["actor", "teacher"]
    shared = offline("distillation", models=models, placement={"colocateActorReference": True})
    assert [g.name for g in plan_layout(JobConfig.model_validate(shared)).groups] == [
        "actor+teacher"
    ]
    uneven = offline(
        "distillation",
        models=models,
        placement={"colocateActorReference": True, "teacherGpus": 2},
    )
    assert messages(uneven) == [
        "placement.colocateActorReference: needs actorGpus == teacherGpus: colocated roles "
        "share devices (got 1 and 2)"
    ]


def _kl(p: list[float], q: list[float]) -> float:
    return sum(a * math.log(a / b) for a, b in zip(p, q, strict=True))


def test_token_kls_are_the_exact_divergences() -> None:
    teacher, student = [0.7, 0.2, 0.1], [0.4, 0.4, 0.2]
    t = torch.tensor(teacher).log().reshape(1, 1, 3)
    s = torch.tensor(student).log().reshape(1, 1, 3)
    forward, reverse = token_kls(s, t)
    assert float(forward) == pytest.approx(_kl(teacher, student), rel=1e-5)
    assert float(reverse) == pytest.approx(_kl(student, teacher), rel=1e-5)


@pytest.mark.parametrize(
    ("kind", "mix", "weights"),
    [
        ("forward-kl", 0.5, (1.0, 0.0)),
        ("reverse-kl", 0.5, (0.0, 1.0)),
        ("mixed", 0.25, (0.75, 0.25)),
    ],
)
def test_distillation_loss_is_the_masked_mean_of_the_chosen_kl(
    kind: str, mix: float, weights: tuple[float, float]
) -> None:
    torch.manual_seed(0)
    logits = torch.randn(2, 3, 5, requires_grad=True)
    teacher = torch.randn(2, 3, 5).log_softmax(-1)
    mask = torch.tensor([[1, 1, 0], [0, 1, 1]])
    loss, stats = distillation_loss(logits, teacher, mask, kind=kind, mix=mix)
    forward, reverse = token_kls(logits.detach().log_softmax(-1), teacher)
    real = mask.bool()
    expected = weights[0] * forward[real].mean() + weights[1] * reverse[real].mean()
    assert float(loss.detach()) == pytest.approx(float(expected), rel=1e-5)
    assert float(stats["forward_kl"]) == pytest.approx(float(forward[real].mean()), rel=1e-5)
    loss.backward()
    assert logits.grad is not None and bool(logits.grad[0, 2].eq(0).all())  # masked position


def test_distillation_loss_is_zero_when_the_student_is_the_teacher() -> None:
    logits = torch.randn(1, 4, 7)
    loss, _ = distillation_loss(logits, logits.log_softmax(-1), torch.ones(1, 4), kind="mixed")
    assert float(loss) == pytest.approx(0.0, abs=1e-6)


def test_teacher_and_student_need_the_same_vocabulary() -> None:
    with pytest.raises(ValueError, match="same vocabulary"):
        distillation_loss(torch.randn(1, 2, 5), torch.randn(1, 2, 6), torch.ones(1, 2))


def test_trim_right_trims_the_teacher_positions_with_the_sequences() -> None:
    batch = {
        "input_ids": torch.zeros(2, 1, 6, dtype=torch.long),
        "attention_mask": torch.tensor([[[1, 1, 1, 0, 0, 0]], [[1, 1, 0, 0, 0, 0]]]),
        "loss_mask": torch.zeros(2, 1, 6, dtype=torch.long),
        "teacher_logps": torch.zeros(2, 1, 6, 9),
    }
    out = trim_right(batch)
    assert out["input_ids"].shape == (2, 1, 3)
    assert out["teacher_logps"].shape == (2, 1, 3, 9)


@pytest.mark.parametrize("device", ["cpu", "gpu"])
@pytest.mark.parametrize("algorithm", ["sft", "dpo", "grpo", "ppo"])
def test_qlora_runs_on_both_devices_and_online_and_offline(device: str, algorithm: str) -> None:
    doc = offline(
        algorithm,
        training={"lora": {"rank": 8, "quantization": "4bit"}, "zeroStage": 2},
        placement={"device": device},
    )
    if algorithm in ("grpo", "ppo"):
        doc["models"]["rewardFunction"] = {"builtin": "repeat-letter"}
        doc["rollout"] = {"samplesPerPrompt": 4}
    assert messages(doc) == []


def test_compile_with_zero3_is_refused_with_the_reason() -> None:
    [message] = messages(offline("sft", training={"compile": True, "zeroStage": 3}))
    assert message.startswith("training.compile: cannot run with training.zeroStage 3")
    assert messages(offline("sft", training={"compile": True, "zeroStage": 2})) == []


def test_qlora_with_zero3_is_refused_with_the_reason() -> None:
    doc = offline("sft", training={"lora": {"rank": 8, "quantization": "4bit"}, "zeroStage": 3})
    [message] = messages(doc)
    assert message.startswith(
        "training.lora.quantization: 4bit (QLoRA) cannot run with training.zeroStage 3: ZeRO-3 "
        "partitions every parameter"
    )
    assert "use zeroStage 0, 1 or 2" in message


def test_qlora_reward_model_training_is_refused_as_lora_is() -> None:
    doc = offline("reward-model", training={"lora": {"rank": 8, "quantization": "4bit"}})
    doc["data"] = {"train": [{"path": "prefs.jsonl"}]}
    found = messages(doc)
    assert any(m.startswith("training.lora: LoRA is not implemented for reward") for m in found)


def test_a_teacher_may_be_another_jobs_model() -> None:
    from rlhf_trainer.config.sources import job_references, local_run_problems

    models = {"actor": {"randomInit": {}}, "teacher": {"fromJob": "tiny-sft-cpu"}}
    cfg = JobConfig.model_validate(offline("distillation", models=models))
    assert job_references(cfg) == {"teacher": "tiny-sft-cpu"}
    [problem] = local_run_problems(cfg)
    assert problem.path == "models.teacher.fromJob"
