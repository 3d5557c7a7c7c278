"""Resolving model sources and loading actor, critic and reward models through from_pretrained."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import LlamaForSequenceClassification

from rlhf_trainer.config import ModelSource, RandomInit
from rlhf_trainer.models.loading import (
    ModelLoadError,
    load_causal_lm,
    load_tokenizer,
    load_value_model,
    model_cache_dir,
    resolve_model_dir,
    resolve_pretrained,
)
from rlhf_trainer.models.value import (
    ValueModel,
    gather_last_real,
    last_real_token_index,
    score_with_model,
)

SMALL = RandomInit(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, vocab_size=300)


def test_random_init_source_builds_into_the_cache_once(tmp_path: Path) -> None:
    source = ModelSource(random_init=SMALL)
    lm = resolve_model_dir(source, tmp_path)
    assert resolve_model_dir(source, tmp_path) == lm
    reward = resolve_model_dir(source, tmp_path, kind="reward")
    assert reward != lm and sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [Path(lm).name, Path(reward).name]
    )


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("org/model", "org/model"),  # not on disk: a Hub id
        ("models/actor", "<base>/models/actor"),  # exists under the job's directory
        ("./models/actor", "<base>/models/actor"),
    ],
    ids=["hub-id", "relative-existing", "dot-relative"],
)
def test_pretrained_names_resolve_against_the_base_dir(
    tmp_path: Path, name: str, expected: str
) -> None:
    (tmp_path / "models" / "actor").mkdir(parents=True)
    got = resolve_pretrained(name, tmp_path)
    assert got == expected.replace("<base>", str(tmp_path.resolve()))


def test_missing_explicit_path_names_the_path(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match=r"'\./nope' does not exist"):
        resolve_model_dir(ModelSource(pretrained="./nope"), tmp_path, base_dir=tmp_path)


def test_unreachable_hub_id_gives_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError, match="read as a Hugging Face Hub id"):
        load_causal_lm("no-such-org/no-such-model")


def test_actor_loads_in_the_requested_dtype(tiny_model_dir: Path) -> None:
    model = load_causal_lm(tiny_model_dir, "bfloat16")
    assert next(model.parameters()).dtype == torch.bfloat16
    assert load_tokenizer(tiny_model_dir).padding_side == "left"


def test_reward_model_keeps_its_head_and_scores_match_hf_pooling(
    tiny_reward_model_dir: Path,
) -> None:
    model = load_value_model(tiny_reward_model_dir)
    saved = LlamaForSequenceClassification.from_pretrained(tiny_reward_model_dir)
    assert torch.equal(model.head.weight, saved.score.weight)
    tok = load_tokenizer(tiny_reward_model_dir)
    batch = tok(["<s>hello", "<s>hi there my friend"], padding=True, return_tensors="pt")
    scores = score_with_model(model, batch.input_ids, batch.attention_mask)
    # HF's own pooled forward (last non-pad token) gives the same numbers for unpadded row 2;
    # row 1 is left-padded, where ours counts positions from the first real token.
    hf = model.hf(input_ids=batch.input_ids[1:], attention_mask=batch.attention_mask[1:])
    torch.testing.assert_close(scores[1:], hf.logits.squeeze(-1))
    alone = tok(["<s>hello"], return_tensors="pt")
    torch.testing.assert_close(
        scores[:1], score_with_model(model, alone.input_ids, alone.attention_mask)
    )


def test_critic_from_causal_lm_gets_a_seeded_fresh_head(tiny_model_dir: Path) -> None:
    a, b = load_value_model(tiny_model_dir), load_value_model(tiny_model_dir)
    c = load_value_model(tiny_model_dir, head_seed=1)
    assert isinstance(a, ValueModel)
    assert torch.equal(a.head.weight, b.head.weight)
    assert not torch.equal(a.head.weight, c.head.weight)
    lm = load_causal_lm(tiny_model_dir)
    torch.testing.assert_close(
        a.hf.model.embed_tokens.weight, lm.model.embed_tokens.weight
    )  # backbone from the LM


def test_critic_trains_per_token_and_exports_as_hf(tiny_model_dir: Path, tmp_path: Path) -> None:
    critic = load_value_model(tiny_model_dir)
    ids = torch.tensor([[1, 20, 30, 40]])
    values = critic(ids, torch.ones_like(ids))
    assert values.shape == (1, 4) and values.dtype == torch.float32
    values.sum().backward()
    assert critic.head.weight.grad is not None
    critic.save_pretrained(tmp_path / "critic")
    again = load_value_model(tmp_path / "critic")
    torch.testing.assert_close(again.head.weight, critic.head.weight)


@pytest.mark.parametrize(
    ("mask", "index"),
    [
        ([[1, 1, 1, 0, 0]], [2]),
        ([[0, 0, 1, 1, 1]], [4]),
        ([[0, 1, 1, 1, 0]], [3]),
        ([[0, 0, 0, 0, 0]], [0]),
    ],
    ids=["right-pad", "left-pad", "both", "empty"],
)
def test_last_real_token_index(mask: list[list[int]], index: list[int]) -> None:
    m = torch.tensor(mask)
    assert last_real_token_index(m).tolist() == index
    values = torch.arange(5, dtype=torch.float32).unsqueeze(0)
    assert gather_last_real(values, m).tolist() == [float(i) for i in index]


def test_non_scalar_head_is_refused(tiny_model_dir: Path) -> None:
    with pytest.raises(ValueError, match="no scalar `score` head"):
        ValueModel(load_causal_lm(tiny_model_dir))


def test_model_cache_is_on_the_job_volume_in_a_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The driver builds random-init models on the head pod; workers on other pods load them
    by path, so in a cluster they go to the job's volume (RLHF_CHECKPOINT_DIR's)."""
    monkeypatch.delenv("RLHF_CACHE_DIR", raising=False)
    monkeypatch.delenv("RLHF_CHECKPOINT_DIR", raising=False)
    assert model_cache_dir() == Path.home() / ".cache" / "rlhf-operator" / "models"
    monkeypatch.setenv("RLHF_CHECKPOINT_DIR", str(tmp_path / "checkpoints"))
    assert model_cache_dir() == tmp_path / "checkpoints" / ".models"
    monkeypatch.setenv("RLHF_CACHE_DIR", str(tmp_path / "cache"))
    assert model_cache_dir() == tmp_path / "cache"
