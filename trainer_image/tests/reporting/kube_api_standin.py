"""A stand-in for the Kubernetes API server: records merge PATCHes of the report ConfigMap."""

from __future__ import annotations

import copy
import json
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class ApiServer:
    url: str = ""
    patches: list[dict[str, Any]] = field(default_factory=list)
    fail_with: int | None = None  # answer every request with this HTTP status
    data: dict[str, Any] = field(default_factory=dict)  # the ConfigMap's data, merged

    def document(self, key: str) -> dict[str, Any]:
        """One key of the data, parsed as the JSON document the trainer wrote."""
        parsed: dict[str, Any] = json.loads(self.data[key])
        return parsed


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    # RFC 7386 JSON merge patch.
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)  # never alias a recorded request body


@contextmanager
def kube_api(tls: ssl.SSLContext | None = None) -> Iterator[ApiServer]:
    """The stand-in on a free local port; HTTPS when given a server TLS context."""
    api = ApiServer()

    class Handler(BaseHTTPRequestHandler):
        def do_PATCH(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            api.patches.append(
                {
                    "path": self.path,
                    "content_type": self.headers["Content-Type"],
                    "authorization": self.headers.get("Authorization"),
                    "body": body,
                }
            )
            if api.fail_with is not None:
                self._answer(api.fail_with, {"kind": "Status", "message": "nope"})
                return
            _merge(api.data, body.get("data") or {})
            self._answer(200, {"data": api.data})

        def _answer(self, code: int, obj: dict[str, Any]) -> None:
            data = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    scheme = "http"
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
        scheme = "https"
    api.url = f"{scheme}://127.0.0.1:{server.server_address[1]}"
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    ).start()
    try:
        yield api
    finally:
        server.shutdown()
        server.server_close()
