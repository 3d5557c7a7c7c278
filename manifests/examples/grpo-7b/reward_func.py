"""Verifiable reward for GSM8K: 1.0 when the response's final number equals the answer's.

GSM8K answers end with `#### <number>`; the response's final answer is the last number it
writes (commas and a trailing period dropped). The trainer calls `reward_func(queries,
prompts, labels)` in its own process with one batch and a timeout (`timeoutSeconds`).
"""

import re

NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def final_number(text):
    if "####" in text:
        text = text.rsplit("####", 1)[1]
    found = NUMBER.findall(text)
    if not found:
        return None
    value = found[-1].replace(",", "").rstrip(".")
    try:
        return float(value)
    except ValueError:
        return None


def reward_func(queries, prompts, labels):
    rewards = []
    for query, prompt, label in zip(queries, prompts, labels, strict=True):
        response = query[len(prompt) :] if query.startswith(prompt) else query
        answer, given = final_number(label or ""), final_number(response)
        rewards.append(1.0 if answer is not None and given == answer else 0.0)
    return {"rewards": rewards, "scores": rewards}
