"""The reward-function worker process: `python -m rlhf_trainer.sandbox._worker FILE LIMITS
[MODE]`.

LIMITS is `models.rewardFunction.limits` as JSON; the worker confines itself to them (see
`_confine`) before it imports FILE.

Protocol (one JSON object per line): the worker writes `{"ready": true}` once the user's file is
loaded (or `{"ok": false, "phase": "load" | "confine", "error": traceback}`), then answers each
request `{"queries": [...], "prompts": [...], "labels": [...]}` with `{"ok": true, "result":
...}` or `{"ok": false, "error": traceback}`. A failure that reached a limit carries `"limit"`
(the field's camelCase name); every message carries `"cpu"`, the CPU seconds the worker has
used. The protocol runs on a private copy of the original stdout; the user's prints go to
stderr, so they cannot corrupt it (the driver caps both streams anyway).

MODE `grade` serves an OpenAI python grader instead (`rlhf_trainer.grading.python_grader`): the
file defines `grade(sample, item) -> float`, each request is `{"samples": [...], "items":
[...]}`, and the result holds one entry per sample, `{"score": float}` or `{"error": traceback}`,
so that one sample's exception is that sample's error and not the batch's.

Deliberately free of torch and of other rlhf_trainer imports (`_confine` is standard library
only): it starts in a fraction of a second unless the user's file imports heavy packages.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import traceback
from collections.abc import Callable
from types import ModuleType
from typing import Any, TextIO

from rlhf_trainer.sandbox._confine import (
    Limits,
    broken_limit,
    confine,
    cpu_used,
    start_call_budget,
)

FUNCTION_NAME = "reward_func"
GRADE_MODE = "grade"
GRADE_FUNCTION = "grade"


def load_module(path: str, module_name: str) -> ModuleType:
    """The user's file, imported as `module_name`."""
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    # The file's own directory is importable, so helpers beside it can be imported.
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    spec.loader.exec_module(module)
    return module


def load_function(path: str, name: str = FUNCTION_NAME) -> Callable[..., Any]:
    module = load_module(path, "user_reward_function")
    func: Callable[..., Any] | None = getattr(module, name, None)
    if not callable(func):
        wanted = "(sample, item)" if name == GRADE_FUNCTION else "(queries, prompts, labels)"
        raise AttributeError(f"{path} defines no function {name}{wanted}")
    return func


def grade_all(func: Callable[..., Any], request: dict[str, Any]) -> list[dict[str, Any]]:
    """grade(sample, item) for each pair; a sample's exception is its own error, except one
    that broke a limit, which fails the call (the worker is replaced)."""
    out: list[dict[str, Any]] = []
    for sample, item in zip(request["samples"], request["items"], strict=True):
        try:
            score = func(sample, item)
        except Exception as err:
            if broken_limit(err):
                raise
            out.append({"error": traceback.format_exc(limit=-8)})
            continue
        if isinstance(score, bool) or not isinstance(score, int | float):
            out.append({"error": f"grade returned {type(score).__name__}, not a number"})
        else:
            out.append({"score": float(score)})
    return out


def plain(value: Any) -> Any:
    """JSON-able copy of a result: tensors and arrays become lists (duck-typed: no torch)."""
    if hasattr(value, "detach"):
        value = value.detach()
    if hasattr(value, "cpu"):
        value = value.cpu()
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def send(out: TextIO, message: dict[str, Any], max_bytes: int | None = None) -> None:
    message = {**message, "cpu": cpu_used()}
    text = json.dumps(message, allow_nan=True)
    if max_bytes is not None and len(text) > max_bytes:
        # Refused here, with a clear message; the driver also cuts a longer line, for code
        # that writes to this descriptor itself.
        text = json.dumps(
            {
                "ok": False,
                "limit": "outputBytes",
                "error": f"the function returned a reply of {len(text)} bytes",
                "cpu": message["cpu"],
            }
        )
    out.write(text + "\n")
    out.flush()


def failure(err: BaseException, **extra: Any) -> dict[str, Any]:
    return {"ok": False, "error": traceback.format_exc(), "limit": broken_limit(err), **extra}


def main(argv: list[str]) -> int:
    # Keep the real stdout for the protocol; everything else printed goes to stderr.
    protocol = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    sys.stdout = sys.stderr
    limits = Limits.from_json(argv[2]) if len(argv) > 2 else None
    try:
        if limits is not None:
            confine(limits)
    except BaseException:
        send(protocol, {"ok": False, "phase": "confine", "error": traceback.format_exc()})
        return 1
    grading = len(argv) > 3 and argv[3] == GRADE_MODE
    try:
        func = load_function(argv[1], GRADE_FUNCTION if grading else FUNCTION_NAME)
    except BaseException as err:
        send(protocol, failure(err, phase="load"))
        return 1
    send(protocol, {"ready": True})
    max_bytes = limits.output_bytes if limits is not None else None
    for line in sys.stdin:
        request = json.loads(line)
        if limits is not None:
            start_call_budget(limits)
        try:
            if grading:
                result: Any = grade_all(func, request)
            else:
                result = func(request["queries"], request["prompts"], request["labels"])
            reply = {"ok": True, "result": plain(result)}
        except Exception as err:
            reply = failure(err)
        try:
            send(protocol, reply, max_bytes)
        except MemoryError as err:  # a result too large to encode within memoryMiB
            send(protocol, failure(err), max_bytes)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
