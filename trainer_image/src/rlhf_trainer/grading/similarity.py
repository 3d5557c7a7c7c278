"""text_similarity's metrics, each from the library that defines it, scaled to 0..1:

- fuzzy_match: rapidfuzz's `fuzz.ratio` (normalised Indel similarity) / 100;
- bleu: sacrebleu's sentence BLEU (its default 13a tokenisation, exponential smoothing) / 100;
- gleu: nltk's `sentence_gleu` (Google-BLEU) on whitespace tokens;
- meteor: nltk's `meteor_score` on whitespace tokens; needs NLTK's WordNet corpus;
- rouge_1 .. rouge_5, rouge_l: rouge-score's F-measure of rouge1..rouge5, rougeL.

The libraries are imported on first use.
"""

from __future__ import annotations

import functools
from typing import Any

from rlhf_trainer.config.graders import SimilarityMetric

_ROUGE = {
    SimilarityMetric.ROUGE_1: "rouge1",
    SimilarityMetric.ROUGE_2: "rouge2",
    SimilarityMetric.ROUGE_3: "rouge3",
    SimilarityMetric.ROUGE_4: "rouge4",
    SimilarityMetric.ROUGE_5: "rouge5",
    SimilarityMetric.ROUGE_L: "rougeL",
}


class MetricUnavailable(RuntimeError):
    """A metric whose data is not installed here (meteor without WordNet)."""


@functools.cache
def _rouge_scorer(kind: str) -> Any:
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer([kind])


@functools.cache
def wordnet() -> Any:
    """NLTK's WordNet reader, loaded; raises MetricUnavailable where the corpus is missing."""
    from nltk.corpus import wordnet as reader

    try:
        reader.ensure_loaded()
    except LookupError:
        raise MetricUnavailable(
            "evaluation_metric meteor needs NLTK's WordNet corpus (corpora/wordnet in one of "
            "NLTK's data directories, or NLTK_DATA), and it is not installed here; NLTK "
            "downloads it from its own server, which this platform cannot reach, and no PyPI "
            "package ships it: use another metric (e.g. rouge_l or bleu), or ask the platform "
            "to install the corpus"
        ) from None
    return reader


def meteor_available() -> bool:
    try:
        wordnet()
    except MetricUnavailable:
        return False
    return True


def similarity(metric: SimilarityMetric, text: str, reference: str) -> float:
    """How close `text` is to `reference` by `metric`, in 0..1."""
    if metric is SimilarityMetric.FUZZY_MATCH:
        from rapidfuzz import fuzz

        return float(fuzz.ratio(text, reference)) / 100.0
    if metric is SimilarityMetric.BLEU:
        import sacrebleu

        return float(sacrebleu.sentence_bleu(text, [reference]).score) / 100.0
    if metric is SimilarityMetric.GLEU:
        from nltk.translate.gleu_score import sentence_gleu

        return float(sentence_gleu([reference.split()], text.split()))
    if metric is SimilarityMetric.METEOR:
        from nltk.translate.meteor_score import meteor_score

        return float(meteor_score([reference.split()], text.split(), wordnet=wordnet()))
    kind = _ROUGE[metric]
    return float(_rouge_scorer(kind).score(reference, text)[kind].fmeasure)
