"""Conditional SFT (SteerLM, Dong et al. 2023; OpenRLHF's conditional SFT): the prompt carries
the sample's score, so the model learns what a response of each score looks like; at inference
the desired score is written into the same template (pure).

    condition_prompt("Repeat the letter a.", 4, "{prompt} <rm_score>: {score}")
    -> "Repeat the letter a. <rm_score>: 4"

The template is `data.scoreTemplate`; scores come from the `data.scoreKey` column (a number, or
a string such as SteerLM's "quality:4,toxicity:0" attribute list).
"""

from __future__ import annotations

from typing import Any

from rlhf_trainer.config.conditioning import PROMPT_FIELD, SCORE_FIELD, template_problem


def format_score(value: Any) -> str:
    """A score as the model reads it: numbers rounded to 2 decimals without trailing zeros
    (4 -> "4", 0.125 -> "0.12"), strings as they are."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"a score must be a number or a string; got {value!r}")
    if isinstance(value, str):
        return value
    return f"{round(float(value), 2):g}"


def condition_text(text: str, score: Any, template: str) -> str:
    why = template_problem(template)
    if why:
        raise ValueError(f"data.scoreTemplate {why}")
    # Replace the score first: a prompt may itself contain "{score}".
    filled = template.replace(SCORE_FIELD, format_score(score))
    return filled.replace(PROMPT_FIELD, text)


def condition_prompt(prompt: Any, score: Any, template: str) -> Any:
    """The prompt (a string, or chat messages: the last message is conditioned) with `score`."""
    if isinstance(prompt, str):
        return condition_text(prompt, score, template)
    if isinstance(prompt, list) and prompt and isinstance(prompt[-1], dict):
        last = dict(prompt[-1])
        last["content"] = condition_text(str(last.get("content", "")), score, template)
        return [*prompt[:-1], last]
    raise ValueError(
        f"a prompt must be a string or a list of chat messages; got {type(prompt).__name__}"
    )
