"""Fixtures of the HTTP API and web page tests: the integration harness (real Redis, real in-process Celery
workers), the fake Messages API, and `serve_api` to start a real uvicorn server over the harness's settings."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.api_server import ApiServer
from tests.fake_anthropic import anthropic_env, fake_anthropic  # noqa: F401  (fixtures)
from tests.integration.conftest import Harness, harness, worker_procs  # noqa: F401  (fixtures)


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
