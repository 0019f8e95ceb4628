"""Fixtures of the HTTP API and web page tests: the integration harness (real Redis, real in-process Celery
workers), the fake Messages API, and `serve_api` to start a real uvicorn server over the harness's settings."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.api_server import ApiServer
from tests.fake_anthropic import anthropic_env, fake_anthropic  # noqa: F401  (fixtures)
from tests.integration.conftest import Harness, harness, worker_procs  # noqa: F401  (fixtures)
from tests.integration.test_plan_jobs import start_worker


@pytest.fixture
def serve_api(harness: Harness) -> Iterator[Callable[..., ApiServer]]:  # noqa: F811
    """`serve_api(tokens=[...], auth_enabled=True, **settings)`: a started API over the harness's Redis and
    tool registry (register tools and start workers on the harness first); stopped after the test."""
    started: list[ApiServer] = []

    def start(*, tokens: list[str] | None = None, auth_enabled: bool = True, **settings: Any) -> ApiServer:
        chosen = harness.settings.model_copy(update=settings) if settings else harness.settings
        server = ApiServer(chosen, tokens=tokens, auth_enabled=auth_enabled, tools=harness.tools,
                           metrics=harness.metrics).start()
        started.append(server)
        return server

    yield start
    for server in reversed(started):
        server.stop()


class Gate:
    """An activity that waits until the test opens the gate (so a job is still running while the test acts)."""

    def __init__(self) -> None:
        self.opened = threading.Event()
        self.entered = threading.Event()

    def activity(self, call: dict) -> dict:
        self.entered.set()
        assert self.opened.wait(30), "the test never opened the gate"
        return {"passed": call["text"]}


@pytest.fixture
def echo(harness: Harness) -> Gate:  # noqa: F811
    """Tools `echo` (text → {"said": text}), `gate` (waits for the test) and `boom` (always fails), served by a
    started worker."""
    gate = Gate()
    harness.tool("echo", params={"text": {"type": "string"}}, required=["text"])
    harness.tool("gate", params={"text": {"type": "string"}})
    harness.tool("boom", params={})
    harness.activities.register("echo", lambda call: {"said": call["text"]})
    harness.activities.register("gate", gate.activity)

    def boom(call: dict) -> None:
        raise RuntimeError("boom")

    harness.activities.register("boom", boom)
    start_worker(harness)
    return gate
