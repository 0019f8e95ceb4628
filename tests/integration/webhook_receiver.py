"""A webhook receiver for tests: a real HTTP server on loopback that checks each request the way a Standard
Webhooks consumer does, written from the convention (standardwebhooks.com), not from agentq's code:

- the signed content is `{webhook-id}.{webhook-timestamp}.{raw body}`;
- the secret is `whsec_` + base64: the HMAC-SHA256 key is the base64-decoded part;
- `webhook-signature` is a space-separated list of `v1,<base64 signature>`: one must match (constant time);
- the timestamp must be within five minutes of now.

It answers each request with the next status of its script (then 200), and records what it got.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SECRET = "whsec_" + base64.b64encode(b"agentq webhook test secret, 32 b").decode()
TOLERANCE_S = 300


def verify(secret: str, headers: dict[str, str], body: bytes) -> bool:
    """The Standard Webhooks check of one request."""
    msg_id, timestamp, signatures = (headers.get("webhook-id"), headers.get("webhook-timestamp"),
                                     headers.get("webhook-signature"))
    if not (msg_id and timestamp and signatures) or not timestamp.isdigit():
        return False
    if abs(time.time() - int(timestamp)) > TOLERANCE_S:
        return False
    key = base64.b64decode(secret.removeprefix("whsec_"))
    expected = base64.b64encode(hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest())
    for item in signatures.split(" "):
        version, _, value = item.partition(",")
        if version == "v1" and hmac.compare_digest(value.encode(), expected):
            return True
    return False


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    verified: bool
    answered: int

    @property
    def payload(self) -> Any:
        return json.loads(self.body)


class Receiver:
    def __init__(self, script: list[int] | None = None, secret: str = SECRET, delay_s: float = 0.0):
        self.script = list(script or [])
        self.delay_s = delay_s  # how long each answer waits (a slow receiver)
        self.hold: threading.Event | None = None  # set: answers wait until it is set (at most 30 s)
        self.secret = secret
        self.received: list[Received] = []
        self.lock = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                headers = {k.lower(): v for k, v in self.headers.items()}
                with receiver.lock:
                    status = receiver.script.pop(0) if receiver.script else 200
                    receiver.received.append(Received(self.path, headers, body,
                                                      verify(receiver.secret, headers, body), status))
                    receiver.lock.notify_all()
                time.sleep(receiver.delay_s)
                if receiver.hold is not None:
                    receiver.hold.wait(30)
                self.send_response(status)
                if 300 <= status < 400:
                    self.send_header("location", "https://elsewhere.example.org/hook")
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def wait(self, count: int, timeout: float = 20.0) -> list[Received]:
        """Wait until `count` requests arrived; returns them all."""
        deadline = time.monotonic() + timeout
        with self.lock:
            while len(self.received) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"{len(self.received)} webhook requests after {timeout} s, expected "
                                         f"{count}: {[r.payload for r in self.received]}")
                self.lock.wait(left)
            return list(self.received)

    def delivered(self, predicate: Any, timeout: float = 20.0) -> Received:
        """Wait for a request answered 2xx that `predicate(received)` accepts."""
        deadline = time.monotonic() + timeout
        with self.lock:
            while True:
                for r in self.received:
                    if 200 <= r.answered < 300 and predicate(r):
                        return r
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no matching delivery in {timeout} s: {[r.payload for r in self.received]}")
                self.lock.wait(left)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
