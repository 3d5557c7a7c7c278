"""Tiny random-init builds: real HF models and tokenizers, deterministic, cached, atomic."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer, LlamaForCausalLM, LlamaForSequenceClassification

from rlhf_trainer.config import RandomInit
from rlhf_trainer.models.tiny import BUILD_MARKER, build_tiny_model
from rlhf_trainer.models.tokenizer import CHAT_TEMPLATE, train_tokenizer

SMALL = RandomInit(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, vocab_size=300)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_build_is_a_loadable_llama_with_its_tokenizer(tiny_model_dir: Path) -> None:
    model = LlamaForCausalLM.from_pretrained(tiny_model_dir)
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    assert model.config.hidden_size == 64 and model.config.num_hidden_layers == 2
    assert len(tok) == model.config.vocab_size == 512
    assert (tok.pad_token, tok.bos_token, tok.eos_token) == ("<pad>", "<s>", "</s>")
    assert model.config.eos_token_id == tok.eos_token_id
    assert model.generation_config.pad_token_id == tok.pad_token_id
    ids = tok("Repeat the letter a.", return_tensors="pt").input_ids
    out = model.generate(ids, max_new_tokens=4, do_sample=False)
    assert out.shape == (1, ids.shape[1] + 4) or out[0, -1] == tok.eos_token_id


def test_chat_template_wraps_turns_and_opens_the_assistant_turn(tiny_model_dir: Path) -> None:
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    text = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert text == "<s><|user|>\nhi</s>\n<|assistant|>\n"
    ids = tok(text, add_special_tokens=False).input_ids
    assert ids[0] == tok.bos_token_id and tok.convert_ids_to_tokens(ids[1]) == "<|user|>"
    assert tok.decode(ids) == text


def test_same_spec_gives_identical_files_and_other_seed_differs(tmp_path: Path) -> None:
    a = build_tiny_model(SMALL, tmp_path / "a")
    b = build_tiny_model(SMALL, tmp_path / "b")
    c = build_tiny_model(SMALL.model_copy(update={"seed": 1}), tmp_path / "c")
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        assert digest(a / name) == digest(b / name), name
    assert digest(a / "model.safetensors") != digest(c / "model.safetensors")
    assert digest(a / "tokenizer.json") == digest(c / "tokenizer.json")  # corpus-only


def test_another_process_builds_the_same_files(tmp_path: Path) -> None:
    # Ray actors on other nodes build their own copy: it must be byte-identical.
    here = build_tiny_model(SMALL, tmp_path / "here")
    code = (
        "import sys; from pathlib import Path; from rlhf_trainer.config import RandomInit;"
        "from rlhf_trainer.models.tiny import build_tiny_model;"
        f"build_tiny_model(RandomInit.model_validate_json({SMALL.model_dump_json()!r}),"
        " Path(sys.argv[1]))"
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "there")], check=True)
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        assert digest(here / name) == digest(tmp_path / "there" / name), name


def test_complete_build_is_reused_and_foreign_dir_is_refused(tmp_path: Path) -> None:
    out = build_tiny_model(SMALL, tmp_path / "m")
    stamp = (out / "model.safetensors").stat().st_mtime_ns
    assert build_tiny_model(SMALL, out) == out
    assert (out / "model.safetensors").stat().st_mtime_ns == stamp
    other = SMALL.model_copy(update={"seed": 7})
    with pytest.raises(FileExistsError, match="does not hold a complete"):
        build_tiny_model(other, out)


def test_half_written_build_is_not_taken_for_complete(tmp_path: Path) -> None:
    out = build_tiny_model(SMALL, tmp_path / "m")
    (out / BUILD_MARKER).unlink()  # as if the build died before its last write
    with pytest.raises(FileExistsError):
        build_tiny_model(SMALL, out)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".m.")]  # no temp left


def test_reward_kind_is_sequence_classification_with_one_label(tmp_path: Path) -> None:
    out = build_tiny_model(SMALL, tmp_path / "r", kind="reward")
    model = LlamaForSequenceClassification.from_pretrained(out)
    assert model.score.out_features == 1
    assert json.loads((out / BUILD_MARKER).read_text())["kind"] == "reward"


def test_unknown_kind_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="kind must be one of"):
        build_tiny_model(SMALL, tmp_path / "x", kind="critic")  # type: ignore[arg-type]


@pytest.mark.parametrize("vocab", [64, 128, 263, 300, 1024], ids=lambda v: f"vocab-{v}")
def test_tokenizer_has_exactly_the_vocab_size_and_round_trips(vocab: int) -> None:
    tok = train_tokenizer(vocab)
    assert len(tok) == vocab
    assert tok.chat_template == CHAT_TEMPLATE
    text = "Repeat the letter a. a a a"
    assert tok.decode(tok(text, add_special_tokens=False).input_ids) == text
    # Every id a model of this vocabulary can sample decodes without error.
    tok.decode(list(range(vocab)))


def test_tokenizer_too_small_is_refused() -> None:
    with pytest.raises(ValueError, match="vocabSize must be at least"):
        train_tokenizer(16)


def test_building_does_not_disturb_the_callers_random_stream(tmp_path: Path) -> None:
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    build_tiny_model(SMALL, tmp_path / "m")
    assert torch.equal(torch.rand(3), expected)
