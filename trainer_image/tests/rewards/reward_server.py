"""A local HTTP reward service stand-in: scripted replies, records what it was sent."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Script:
    """Replies in order (the last repeats): (status, body) or ("sleep", seconds)."""

    replies: list[tuple[Any, Any]]
    requests: list[dict[str, Any]] = field(default_factory=list)
    authorizations: list[str | None] = field(default_factory=list)

    def next(self) -> tuple[Any, Any]:
        index = min(len(self.requests) - 1, len(self.replies) - 1)
        return self.replies[index]


@contextmanager
def reward_server(script: Script) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers["Content-Length"])
            script.requests.append(json.loads(self.rfile.read(length)))
            script.authorizations.append(self.headers.get("Authorization"))
            status, body = script.next()
            if status == "sleep":
                time.sleep(body)
                status, body = 200, {"rewards": []}
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            with suppress(BrokenPipeError):
                self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/reward"
    finally:
        server.shutdown()
        server.server_close()
