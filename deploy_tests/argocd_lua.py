"""Run manifests/argocd/health.lua the way Argo CD does: Lua 5.1 with only the base, package and
table libraries and a safe `os` (Argo CD's util/lua), the object as the global `obj`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
HEALTH_LUA = REPO / "manifests" / "argocd" / "health.lua"

# No string or math library, and strings have no methods (no string metatable).
ARGO_SANDBOX = """
local safe_os = { time = os.time, date = os.date }
debug.setmetatable("", nil)
string, math, io, debug, coroutine, dofile, loadfile = nil, nil, nil, nil, nil, nil, nil
os = safe_os
"""


def sandboxed_runtime() -> Any:
    """A fresh Lua 5.1 runtime with Argo CD's library set (lupa, from the dev extra)."""
    from lupa import lua51

    runtime = lua51.LuaRuntime()
    runtime.execute(ARGO_SANDBOX)
    return runtime


def run_health_check(obj: dict[str, Any], script: str | None = None) -> dict[str, str]:
    """{"status": ..., "message": ...} as Argo CD would show it for `obj`."""
    runtime = sandboxed_runtime()
    runtime.globals().obj = runtime.table_from(obj, recursive=True)
    result = runtime.execute(HEALTH_LUA.read_text() if script is None else script)
    return {key: result[key] for key in ("status", "message") if result[key] is not None}
