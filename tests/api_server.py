"""A real agentq API for tests: uvicorn serving `create_api` on a free 127.0.0.1 port, in a thread of the test
process (or `agentq api` as a separate process, see `tests/e2e/test_api_cli.py`), plus a small HTTP client.

    with ApiServer(settings, tokens=["t0k"]) as api:
        status, headers, body = api.request("POST", "/v1/jobs", json={...})
        for message in api.sse("/v1/jobs/ID/events"): ...

The client is plain `http.client` on purpose: what a service in any language would send, nothing of agentq's.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from agentq.api import ApiAuth, create_api
from agentq.metrics import Metrics
from agentq.protocol.tools import ToolRegistry
from agentq.runtime.root import Parts, connect
from agentq.settings import Settings


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class SseMessage:
    """One server-sent event as a client parses it (fields it did not carry are None)."""

    id: str | None = None
    event: str | None = None
    data: str | None = None
    retry: int | None = None
    comments: list[str] = field(default_factory=list)

    def json(self) -> Any:
        return json.loads(self.data or "null")


class ApiServer:
    """`create_api` over the composition root, served by uvicorn in a thread until `stop()`."""

    def __init__(self, settings: Settings, *, tokens: list[str] | None = None, auth_enabled: bool = True,
                 tools: ToolRegistry | None = None, port: int | None = None, metrics: Metrics | None = None):
        import uvicorn

        self.auth = ApiAuth.configure(tokens if tokens is not None else ["test-token"], enabled=auth_enabled)
        self.token = self.auth.page_token
        self.parts: Parts = connect(settings, tools=tools, metrics=metrics)
        self.app = create_api(self.parts, auth=self.auth)
        self.port = port or free_port()  # a given port: a restart where clients reconnect
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning",
                                                    timeout_graceful_shutdown=2))
        self._thread = threading.Thread(target=self.server.run, name="agentq-test-api", daemon=True)

    def start(self, timeout: float = 20.0) -> ApiServer:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the test API did not start on port {self.port}")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self._thread.join(10)
        self.parts.close()

    def __enter__(self) -> ApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------------------------ client

    def headers(self, token: str | None = "default") -> dict[str, str]:
        token = self.token if token == "default" else token
        return {"Authorization": f"Bearer {token}"} if token else {}

    def request(self, method: str, path: str, *, json_body: Any = None, body: bytes | None = None,
                token: str | None = "default", headers: dict[str, str] | None = None,
                timeout: float = 30.0) -> Response:
        """One request; `json_body` is encoded, `body` sent as is."""
        sent = {**self.headers(token), **(headers or {})}
        if json_body is not None:
            body = json.dumps(json_body).encode()
            sent.setdefault("Content-Type", "application/json")
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            connection.request(method, path, body=body, headers=sent)
            reply = connection.getresponse()
            return Response(reply.status, {k.lower(): v for k, v in reply.getheaders()}, reply.read())
        finally:
            connection.close()

    def sse(self, path: str, *, token: str | None = "default", headers: dict[str, str] | None = None,
            timeout: float = 30.0, stop_after: int | None = None) -> Iterator[SseMessage]:
        """The messages of an event stream as they arrive (a comment alone is a message with only `comments`), until
        the server ends the stream or `stop_after` messages were read (the connection is then dropped, as a
        client that lost its network would)."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            connection.request("GET", path, headers={**self.headers(token), "Accept": "text/event-stream",
                                                     **(headers or {})})
            reply = connection.getresponse()
            if reply.status != 200:
                raise AssertionError(f"GET {path}: {reply.status} {reply.read()[:500]!r}")
            for count, message in enumerate(parse_sse(reply), 1):
                yield message
                if stop_after is not None and count >= stop_after:
                    return
        finally:
            connection.close()


def parse_sse(stream: Any) -> Iterator[SseMessage]:
    """Server-sent events of a byte stream, parsed as the HTML standard says (lines, fields, blank line)."""
    message = SseMessage()
    data: list[str] = []
    while True:
        raw = stream.readline()
        if not raw:
            return
        line = raw.decode("utf-8").rstrip("\r\n")
        if line == "":
            if data or message.comments or message.id is not None or message.event is not None \
                    or message.retry is not None:
                message.data = "\n".join(data) if data else None
                yield message
                message, data = SseMessage(), []
            continue
        if line.startswith(":"):
            message.comments.append(line[1:].strip())
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data":
            data.append(value)
        elif name == "id":
            message.id = value
        elif name == "event":
            message.event = value
        elif name == "retry" and value.isdigit():
            message.retry = int(value)
