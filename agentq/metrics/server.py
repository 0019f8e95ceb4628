"""`agentq metrics`: `render_metrics` over HTTP (GET /metrics), with bearer tokens unless auth is off."""

from __future__ import annotations

import logging
import secrets
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from agentq.metrics.render import render_metrics

if TYPE_CHECKING:
    from agentq.runtime.root import Parts

log = logging.getLogger("agentq.metrics")

_TEXT = "text/plain; charset=utf-8"


@dataclass
class MetricsServer:
    """`agentq metrics`: `render_metrics` over HTTP (GET /metrics), with bearer tokens unless auth is off."""

    parts: Parts
    host: str
    port: int
    tokens: tuple[str, ...]  # empty: no auth (only when turned off explicitly)
    server: ThreadingHTTPServer | None = None

    def start(self) -> MetricsServer:
        self.server = ThreadingHTTPServer((self.host, self.port), _handler_for(self))
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        return self

    def serve_forever(self) -> None:
        assert self.server is not None
        self.server.serve_forever()

    def serve_in_thread(self) -> threading.Thread:
        thread = threading.Thread(target=self.serve_forever, name="agentq-metrics", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


def _handler_for(outer: MetricsServer) -> type[BaseHTTPRequestHandler]:
    """The request handler of `outer`: /metrics only, its tokens checked, rendering failures answered 500."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] not in ("/metrics", "/metrics/"):
                self._reply(404, b"not found: the metrics are at /metrics\n", _TEXT)
                return
            if outer.tokens and not accepted(self.headers.get("Authorization"), outer.tokens):
                self._reply(401, b"missing or wrong token: send `Authorization: Bearer <token>` "
                            b"(AGENTQ_METRICS_TOKEN)\n", _TEXT, {"WWW-Authenticate": "Bearer"})
                return
            try:
                body, content_type = render_metrics(outer.parts)
            except Exception as error:
                log.exception("metrics: rendering failed")
                self._reply(500, f"rendering the metrics failed: {error}\n".encode(), "text/plain")
                return
            self._reply(200, body, content_type)

        def _reply(self, status: int, body: bytes, content_type: str, headers: dict | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("metrics: " + format, *args)

    return Handler


def accepted(header: str | None, tokens: tuple[str, ...]) -> bool:
    """Whether an `Authorization` header carries one of `tokens` as a bearer token (compared in constant time)."""
    scheme, _, token = (header or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return False
    matches = [secrets.compare_digest(token.strip().encode(), known.encode()) for known in tokens]
    return any(matches)
