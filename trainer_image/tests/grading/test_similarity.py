"""text_similarity's metrics against values worked out by hand from each metric's definition
and the libraries' own documented examples."""

from __future__ import annotations

import pytest

from rlhf_trainer.config.graders import SimilarityMetric as M
from rlhf_trainer.grading.similarity import MetricUnavailable, meteor_available, similarity


@pytest.mark.parametrize(
    ("metric", "text", "reference", "expected"),
    [
        # rapidfuzz's documented example: fuzz.ratio("this is a test", "this is a test!")
        (M.FUZZY_MATCH, "this is a test", "this is a test!", 0.9655172413793103),
        (M.FUZZY_MATCH, "abc", "abc", 1.0),
        (M.FUZZY_MATCH, "abc", "xyz", 0.0),
        (M.BLEU, "the cat sat on the mat", "the cat sat on the mat", 1.0),
        (M.BLEU, "dog", "the cat sat on the mat", 0.0),
        # GLEU = min(precision, recall) over 1..4-grams: 3 of 3 hypothesis n-grams match,
        # the reference has 3 + 2 + 1 = 6 -> min(1, 0.5).
        (M.GLEU, "the cat", "the cat sat", 0.5),
        (M.GLEU, "a b c d", "a b c d", 1.0),
        # ROUGE-1: P = 2/2, R = 2/3 -> F = 0.8; ROUGE-2: P = 1/1, R = 1/2 -> F = 2/3.
        (M.ROUGE_1, "the cat", "the cat sat", 0.8),
        (M.ROUGE_2, "the cat", "the cat sat", 2 / 3),
        (M.ROUGE_3, "a b c", "a b c d", 2 / 3),  # 1 of 1 trigram, 1 of 2: F = 2/3
        (M.ROUGE_4, "a b c d", "a b c d", 1.0),
        (M.ROUGE_5, "a b c d", "a b c d e", 0.0),  # no 5-gram in the text
        # ROUGE-L: LCS "the sat" = 2; P = 2/3, R = 2/3.
        (M.ROUGE_L, "the dog sat", "the cat sat", 2 / 3),
    ],
)
def test_metric_values(metric: M, text: str, reference: str, expected: float) -> None:
    assert similarity(metric, text, reference) == pytest.approx(expected, abs=1e-9)


def test_bleu_is_sacrebleus_sentence_bleu_scaled() -> None:
    import sacrebleu

    text, ref = "the cat is on the mat", "the cat sat on the mat"
    assert similarity(M.BLEU, text, ref) == pytest.approx(
        sacrebleu.sentence_bleu(text, [ref]).score / 100
    )
    assert 0 < similarity(M.BLEU, text, ref) < 1


def test_meteor_runs_where_wordnet_is_installed_and_says_why_not_elsewhere() -> None:
    if meteor_available():
        assert similarity(M.METEOR, "the cat sat", "the cat sat") > 0.9
    else:
        with pytest.raises(MetricUnavailable, match="WordNet"):
            similarity(M.METEOR, "the cat sat", "the cat sat")
