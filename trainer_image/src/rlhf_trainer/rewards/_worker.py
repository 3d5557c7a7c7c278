"""The reward-function worker process: `python -m rlhf_trainer.rewards._worker FILE`.

Protocol (one JSON object per line): the worker writes `{"ready": true}` once the user's file is
loaded (or `{"ok": false, "phase": "load", "error": traceback}`), then answers each request
`{"queries": [...], "prompts": [...], "labels": [...]}` with `{"ok": true, "result": ...}` or
`{"ok": false, "error": traceback}`. The protocol runs on a private copy of the original stdout;
the user's prints go to stderr, so they cannot corrupt it.

Deliberately free of torch and of other rlhf_trainer imports: it starts in a fraction of a
second unless the user's file imports heavy packages itself.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any, TextIO

FUNCTION_NAME = "reward_func"


def load_function(path: str) -> Callable[..., Any]:
    spec = importlib.util.spec_from_file_location("user_reward_function", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    # The file's own directory is importable, so helpers beside it can be imported.
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    spec.loader.exec_module(module)
    func: Callable[..., Any] | None = getattr(module, FUNCTION_NAME, None)
    if not callable(func):
        raise AttributeError(
            f"{path} defines no function {FUNCTION_NAME}(queries, prompts, labels)"
        )
    return func


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


def send(out: TextIO, message: dict[str, Any]) -> None:
    out.write(json.dumps(message, allow_nan=True) + "\n")
    out.flush()


def main(argv: list[str]) -> int:
    # Keep the real stdout for the protocol; everything else printed goes to stderr.
    protocol = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    sys.stdout = sys.stderr
    try:
        func = load_function(argv[1])
    except BaseException:
        send(protocol, {"ok": False, "phase": "load", "error": traceback.format_exc()})
        return 1
    send(protocol, {"ready": True})
    for line in sys.stdin:
        request = json.loads(line)
        try:
            result = func(request["queries"], request["prompts"], request["labels"])
            send(protocol, {"ok": True, "result": plain(result)})
        except Exception:
            send(protocol, {"ok": False, "error": traceback.format_exc()})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
