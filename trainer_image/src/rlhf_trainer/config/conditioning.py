"""conditional-sft's prompt template (`data.scoreTemplate`): what a usable one holds (pure).

The data loader (`rlhf_trainer.data.conditional`) fills it; the rules refuse a template it
could not fill before anything runs.
"""

from __future__ import annotations

PROMPT_FIELD, SCORE_FIELD = "{prompt}", "{score}"


def template_problem(template: str) -> str | None:
    """Why `template` cannot condition a prompt (None when it can)."""
    missing = [f for f in (PROMPT_FIELD, SCORE_FIELD) if f not in template]
    if missing:
        return (
            f"must contain {' and '.join(missing)} (where the prompt and the score go), e.g. "
            f"'{{prompt}} <rm_score>: {{score}}'; got {template!r}"
        )
    return None
