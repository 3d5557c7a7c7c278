"""The example manifests of conditional SFT and distillation learn what their mode promises
(opt in with `-m slow`; each run is a few minutes on 2 CPU cores)."""

from __future__ import annotations

from pathlib import Path

import pytest

from offline.test_offline_training import greedy, mean, series, step_metrics
from rlhf_trainer.config import JobConfig, ModelSource, load_file
from rlhf_trainer.data.builtin import repeat_letter_score
from rlhf_trainer.data.conditional import condition_prompt
from rlhf_trainer.runner.main import run_config

from .sampling import held_out_step_accuracy, sampled_answers

pytestmark = pytest.mark.slow
EXAMPLES = Path(__file__).resolve().parents[3] / "manifests" / "examples"


def example(name: str) -> tuple[JobConfig, Path]:
    (job,) = load_file(EXAMPLES / f"{name}.yaml")
    assert job.config is not None, job.problems
    return job.config, job.base_dir


def run_example(cfg: JobConfig, base: Path, run_dir: Path) -> list[dict[str, object]]:
    assert run_config(cfg, name=run_dir.name, base_dir=base, run_dir=run_dir) == 0
    return step_metrics(run_dir)


def test_conditioning_on_a_high_score_yields_better_answers(ray_up: None, tmp_path: Path) -> None:
    """tiny-conditional-sft-cpu: 16 answers sampled (temperature 1) per letter, the prompt
    conditioned on score 4 and on score 0. Measured: mean reward 0.72 at score 4, 0.02 at score 0
    (192 steps, 5.4 min of training on 2 shared cores)."""
    cfg, base = example("tiny-conditional-sft-cpu")
    run_example(cfg, base, tmp_path / "csft")
    final = tmp_path / "csft" / "final"

    def reward(score: int) -> float:
        rewards = []
        for letter in "ab":
            prompt = condition_prompt(
                f"Repeat the letter {letter}.", score, cfg.data.score_template
            )
            answers = sampled_answers(final, prompt, n=16, tokens=20, seed=0)
            rewards += [repeat_letter_score(a, letter) for a in answers]
        return mean(rewards)

    high, low = reward(4), reward(0)
    assert high > low + 0.4, (high, low)


def held_out(cfg: JobConfig) -> JobConfig:
    """The config reading its builtin task's held-out split ("test") instead of "train"."""
    train = [s.model_copy(update={"split": "test"}) for s in cfg.data.train]
    return cfg.model_copy(update={"data": cfg.data.model_copy(update={"train": train})})


def held_out_forward_kl(student: Path, teacher: Path, cfg: JobConfig, base: Path) -> float:
    """Mean KL(teacher || student) over the response tokens of the held-out rows."""
    import torch

    from rlhf_trainer.algos.distillation import token_kls
    from rlhf_trainer.algos.masking import masked_mean
    from rlhf_trainer.data.offline import load_sft
    from rlhf_trainer.models.loading import load_causal_lm, load_tokenizer
    from rlhf_trainer.objectives.collate import collate
    from rlhf_trainer.objectives.kinds import offline_spec
    from rlhf_trainer.objectives.offline import flat, teacher_token_logps

    tok = load_tokenizer(student)
    items = list(load_sft(held_out(cfg).data, tok, base, cfg.training.seed))
    batch = collate(items, offline_spec(cfg), int(tok.pad_token_id), cfg.data.max_length)
    with torch.no_grad():
        logps = [teacher_token_logps(load_causal_lm(d).eval(), batch) for d in (teacher, student)]
    forward, _ = token_kls(logps[1].flatten(0, 1), logps[0].flatten(0, 1))
    return float(masked_mean(forward, flat(batch, "loss_mask")[:, 1:].bool()))


def test_the_student_matches_its_teacher(ray_up: None, tmp_path: Path) -> None:
    """tiny-distillation-cpu with tiny-sft-cpu's model as the teacher: KL(teacher || student)
    on the response tokens falls, also on the task's held-out rows, and the one-layer student's
    greedy answer to every held-out prompt (64 rows; the task has 4 distinct prompts) is the
    teacher's. Measured (256 steps, 28 s of training; the whole test 7 min on 2 busy shared
    cores): KL 6.22 -> 0.00002 (mean of the last 4 steps), 0.00002 on the held-out rows,
    greedy agreement 64/64. With 96 steps (KL 0.05) the student answered 'd' to "Repeat the
    letter c." (its first-token distribution for c and d was the same: d 0.49, c 0.44): the
    letter is one of nine trained tokens, and the learning rate had decayed before the one
    layer told c from d."""
    from rlhf_trainer.data.builtin import builtin_rows

    teacher_cfg, teacher_base = example("tiny-sft-cpu")
    run_example(teacher_cfg, teacher_base, tmp_path / "tiny-sft-cpu")
    teacher = tmp_path / "tiny-sft-cpu" / "final"
    cfg, base = example("tiny-distillation-cpu")
    models = cfg.models.model_copy(update={"teacher": ModelSource(pretrained=str(teacher))})
    records = run_example(cfg.model_copy(update={"models": models}), base, tmp_path / "distill")
    kl = series(records, "forward_kl")
    assert mean(kl[-4:]) < 0.01 * kl[0], kl
    student = tmp_path / "distill" / "final"
    assert held_out_forward_kl(student, teacher, cfg, base) < 0.01
    (source,) = cfg.data.train
    assert source.builtin is not None
    rows = builtin_rows(source.builtin, "test", cfg.training.seed, "prompt", cfg.data)
    prompts = [str(row[cfg.data.input_key]) for row in rows]
    answers = {p: (greedy(student, p, 20), greedy(teacher, p, 20)) for p in set(prompts)}
    assert len(answers) == 4 and all(a for a, _ in answers.values()), answers
    agree = sum(answers[p][0] == answers[p][1] for p in prompts)
    assert agree == len(prompts) == 64, (agree, answers)


def test_the_prm_judges_held_out_steps_and_scores_rollouts(ray_up: None, tmp_path: Path) -> None:
    """tiny-prm-cpu: step accuracy on the 64 held-out examples (256 steps) rises from the
    random-init model's; as a reward model (min aggregation) it scores a right answer above a
    wrong one. Measured with the example (4 layers, 640 steps, 1-2 min): held-out step
    accuracy 1.0 (2 layers and 320 steps reached only 0.71)."""
    import torch

    from rlhf_trainer.data.steps import step_ids
    from rlhf_trainer.models.loading import (
        load_causal_lm,
        load_tokenizer,
        model_cache_dir,
        resolve_model_dir,
    )
    from rlhf_trainer.rewards.process import process_batch, process_rewards

    cfg, base = example("tiny-prm-cpu")
    start = Path(resolve_model_dir(cfg.models.actor, model_cache_dir(), "causal-lm", base))
    before = held_out_step_accuracy(start, cfg, base)
    records = run_example(cfg, base, tmp_path / "prm")
    final = tmp_path / "prm" / "final"
    after = held_out_step_accuracy(final, cfg, base)
    assert after > max(0.9, before + 0.3), (before, after, series(records, "accuracy"))

    tok, model = load_tokenizer(final), load_causal_lm(final).eval()
    ids = step_ids(tok, cfg.algorithm.prm, "rewardModels[0].process")
    prompt = tok("Repeat the letter c.", add_special_tokens=False)["input_ids"]
    rows = [
        prompt + tok(text, add_special_tokens=False)["input_ids"]
        for text in ("c\nc\nc\nc\n", "c\nd\nc\nc\n")
    ]
    width = max(len(r) for r in rows) - len(prompt)
    padded = torch.tensor([r + [tok.pad_token_id] * (len(prompt) + width - len(r)) for r in rows])
    mask = torch.tensor([[1] * len(r) + [0] * (len(prompt) + width - len(r)) for r in rows])
    steps = process_batch(padded, mask, width, tok, ids, "\n")
    with torch.no_grad():
        logits = model(input_ids=steps["input_ids"], attention_mask=steps["attention_mask"]).logits
    right, wrong = process_rewards(logits, steps["step_mask"], ids, "min").tolist()
    assert right > 0.5 > wrong, (right, wrong)
