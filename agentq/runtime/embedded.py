"""Embedded mode: a private Redis server plus an in-process dispatcher and worker, for one command.

`agentq run` and `agentq demo` use it when `AGENTQ_REDIS_URL` is not set (or with `--embedded`), so a job
runs on a fresh machine without touching any Redis the user did not name. Each part is built once: the
runtime's parts (store, Celery app, job service) also serve the command's client and the HTTP API
(`Embedded.parts`).

The private Redis listens on 127.0.0.1, where any local user could reach it, so it requires a random password
made for this run. Only the in-process parts get it (inside the Redis URL of the settings they are built with);
what is shown names the server by its address alone.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterable
from pathlib import Path

from agentq.embedded import RedisServer
from agentq.protocol.activities import ActivityRegistry
from agentq.protocol.tools import ToolRegistry
from agentq.runtime.root import Parts, Runtime
from agentq.runtime.worker import InProcessWorker, load_modules
from agentq.settings import Settings, load_settings

log = logging.getLogger("agentq.embedded")


class Embedded:
    """Context manager: start a private Redis and in-process workers; stop everything on exit.

    The workers serve `activities` and know `tools` (default: the registries `modules` filled)."""

    def __init__(self, *, modules: Iterable[str] = (), tool_dirs: Iterable[Path | str] = (),
                 settings: Settings | None = None, concurrency: int = 8,
                 activities: ActivityRegistry | None = None, tools: ToolRegistry | None = None):
        self.modules, self.tool_dirs = tuple(modules), tuple(tool_dirs)
        self.base_settings = settings or load_settings()
        self.concurrency = concurrency
        self._activities, self._tools = activities, tools
        self.server: RedisServer | None = None
        self.runtime: Runtime | None = None
        self.worker: InProcessWorker | None = None

    def __enter__(self) -> Embedded:
        self.server = RedisServer(password=secrets.token_urlsafe(32)).start()
        try:
            settings = self.base_settings.model_copy(update={"redis_url": self.server.url, "broker_url": None,
                                                              "redis_cluster": False})
            registries = load_modules(settings, modules=self.modules, tool_dirs=self.tool_dirs,
                                      activities=self._activities, tools=self._tools)
            self.runtime = Runtime(settings=settings, activities=registries.activities, tools=registries.tools)
            self.worker = InProcessWorker(self.runtime, concurrency=self.concurrency).start()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        log.info("embedded runtime on the private Redis at %s", self.server.address)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.worker is not None:
            self.worker.stop()
        if self.runtime is not None:
            self.runtime.close()
        if self.server is not None:
            self.server.stop()

    @property
    def settings(self) -> Settings:
        assert self.runtime is not None, "use Embedded as a context manager"
        return self.runtime.settings

    @property
    def parts(self) -> Parts:
        """The runtime's parts, for the command's client and the HTTP API (closed with the runtime)."""
        assert self.runtime is not None, "use Embedded as a context manager"
        return self.runtime.parts
