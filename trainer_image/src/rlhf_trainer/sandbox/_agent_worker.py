"""The multi-turn agent's worker process: `python -m rlhf_trainer.sandbox._agent_worker FILE
LIMITS`, confined exactly as a reward function's (`_confine`, then `_worker`'s protocol
helpers) before it imports FILE, which must define `AgentInstance`.

It holds one `AgentInstance` per episode, by the driver's episode id. Requests (one JSON object
per line):

- `{"op": "reset", "id": N, "prompt": ..., "label": ...}`: a new instance, `reset` called
  (if it has one); `{"ok": true}`.
- `{"op": "step", "id": N, "prompt": ..., "response": ..., "label": ..., "turn": T}`:
  `{"ok": true, "result": {...}}`, the dict `step` returned.
- `{"op": "drop", "ids": [...]}`: the episodes ended; their instances are released.

A failure is `{"ok": false, "error": traceback, "method": "step"}` (with `"limit"` when a limit
was reached), as `_worker`'s. Standard library only, like `_worker`.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from typing import Any

from rlhf_trainer.sandbox._confine import Limits, confine, start_call_budget
from rlhf_trainer.sandbox._worker import failure, load_module, plain, send

CLASS_NAME = "AgentInstance"


def load_class(path: str) -> type:
    cls = getattr(load_module(path, "user_agent"), CLASS_NAME, None)
    if not isinstance(cls, type):
        raise AttributeError(f"{path} must define a class {CLASS_NAME}")
    return cls


def handle(cls: type, agents: dict[int, Any], request: dict[str, Any]) -> dict[str, Any]:
    op = request.get("op")
    if op == "drop":
        for key in request.get("ids", []):
            agents.pop(int(key), None)
        return {"ok": True}
    key = int(request["id"])
    if op == "reset":
        method = "__init__"
        try:
            agents[key] = agent = cls()
            method = "reset"
            if hasattr(agent, "reset"):
                agent.reset(request["prompt"], request["label"])
        except Exception as err:
            return failure(err, method=method)
        return {"ok": True}
    if op == "step":
        try:
            agent = agents[key]
            result = agent.step(
                request["prompt"], request["response"], request["label"], request["turn"]
            )
        except Exception as err:
            return failure(err, method="step")
        if not isinstance(result, dict):
            return {
                "ok": False,
                "method": "step",
                "error": f"{CLASS_NAME}.step must return a dict with reward/feedback/done; "
                f"got {type(result).__name__}",
            }
        return {"ok": True, "result": plain(result)}
    return {"ok": False, "error": f"unknown request {op!r}"}


def main(argv: list[str]) -> int:
    # Keep the real stdout for the protocol; everything else printed goes to stderr.
    protocol = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    sys.stdout = sys.stderr
    limits = Limits.from_json(argv[2])
    try:
        confine(limits)
    except BaseException:
        send(protocol, {"ok": False, "phase": "confine", "error": traceback.format_exc()})
        return 1
    try:
        cls = load_class(argv[1])
    except BaseException as err:
        send(protocol, failure(err, phase="load"))
        return 1
    send(protocol, {"ready": True})
    agents: dict[int, Any] = {}
    for line in sys.stdin:
        start_call_budget(limits)
        try:
            reply = handle(cls, agents, json.loads(line))
            send(protocol, reply, limits.output_bytes)
        except MemoryError as err:  # a reply too large to encode within memoryMiB
            send(protocol, failure(err), limits.output_bytes)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
