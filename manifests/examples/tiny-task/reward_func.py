"""Reward function of the tiny "repeat the letter" task (the same task as the trainer's builtin
`repeat-letter`, written out as a user's file would be).

The trainer calls `reward_func(queries, prompts, labels)` in its own process with one batch:
`queries` are prompt + response texts, `prompts` the prompt texts, `labels` the `label` column
of prompts.jsonl (here: the letter to repeat). It returns one reward per query; a dict with
`rewards`, `scores` and `extra_logs` is accepted too.
"""

TARGET_LENGTH = 8
SPECIAL_TOKENS = ("</s>", "<s>", "<pad>", "<unk>")


def score(response: str, letter: str) -> float:
    """Fraction of the response's non-space characters that are `letter`, over >= 8 chars."""
    for token in SPECIAL_TOKENS:
        response = response.replace(token, "")
    chars = [c for c in response if not c.isspace()]
    hits = sum(c == letter for c in chars)
    return hits / max(len(chars), TARGET_LENGTH)


def reward_func(queries, prompts, labels):
    rewards = []
    lengths = []
    for query, prompt, letter in zip(queries, prompts, labels, strict=True):
        response = query[len(prompt) :] if query.startswith(prompt) else query
        rewards.append(score(response, letter))
        lengths.append(len(response))
    return {
        "rewards": rewards,
        "scores": [1.0 if r == 1.0 else 0.0 for r in rewards],  # exact solves
        "extra_logs": {"response_chars": lengths},
    }
