"""The soak's webhook receiver: a real HTTP server on a fixed loopback port that checks each request's Standard
Webhooks signature and logs it (its own record, outside the store). `down()` closes its socket (a refused
connection, as a receiver being deployed gives) and `up()` binds the same port again."""

from __future__ import annotations

import base64
import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.integration.webhook_receiver import verify

WEBHOOK_SECRET = "whsec_" + base64.b64encode(b"agentq soak webhook secret, 32 b").decode()


@dataclass(frozen=True)
class Delivery:
    at: float  # unix time
    webhook_id: str
    job_id: str
    event: str
    verified: bool


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a sender killed mid-request (the soak's faults) resets its connection: expected, not worth a traceback


class HookReceiver:
    def __init__(self) -> None:
        self.deliveries: list[Delivery] = []
        self.lock = threading.Lock()
        self.port = 0
        self.server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def up(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                headers = {k.lower(): v for k, v in self.headers.items()}
                try:
                    payload: Any = json.loads(body)
                except ValueError:
                    payload = {}
                data = payload.get("data") if isinstance(payload, dict) else None
                job_id = str((data or {}).get("id") or (data or {}).get("job_id") or "")
                delivery = Delivery(time.time(), headers.get("webhook-id", ""), job_id,
                                    str(payload.get("type", "")) if isinstance(payload, dict) else "",
                                    verify(WEBHOOK_SECRET, headers, body))
                with receiver.lock:
                    receiver.deliveries.append(delivery)
                self.send_response(204)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = _Server(("127.0.0.1", self.port), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def down(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def snapshot(self) -> list[Delivery]:
        with self.lock:
            return list(self.deliveries)
