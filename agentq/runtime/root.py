"""The composition root: settings → store, Celery app, dispatcher, job service.

`connect()` is the one place these parts are wired; `Client`, the CLI, embedded mode, workers (through
`Runtime`) and the HTTP API all start from it, and none of them wires the parts itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentq.protocol.activities import ActivityRegistry
from agentq.protocol.tools import ToolRegistry
from agentq.runtime.app import Dispatcher, create_app
from agentq.runtime.modules import ModuleLibrary
from agentq.runtime.routing import Routing
from agentq.runtime.service import JobService
from agentq.runtime.signing import TaskSigner
from agentq.settings import Settings
from agentq.store.state import StateStore


@dataclass
class Parts:
    """What a process needs to submit, follow and run jobs against one deployment."""

    settings: Settings
    store: StateStore
    app: Any  # the Celery app
    routing: Routing
    dispatcher: Dispatcher
    jobs: JobService
    modules: ModuleLibrary

    def close(self) -> None:
        try:
            self.store.close()
        finally:
            self.app.close()


def open_store(settings: Settings) -> StateStore:
    """The state store alone, for processes that need nothing else (`agentq healthcheck`, run every few
    seconds by container runtimes, stays light: no Celery app)."""
    return StateStore(settings.redis_url, cluster=settings.redis_cluster, namespace=settings.namespace)


def connect(settings: Settings, *, tools: ToolRegistry | None = None, activities: ActivityRegistry | None = None,
            local_activities_are_live: bool = False) -> Parts:
    """Wire the parts for `settings`. Nothing connects yet: Redis and the broker are reached on first use.

    `tools` are tool schemas this process knows besides those the fleet published (a submitter's `-m`
    modules, `--tools` folders); `activities` the ones it serves."""
    store = open_store(settings)
    app = create_app(settings)
    routing = Routing.from_settings(settings)
    dispatcher = Dispatcher(app, routing, TaskSigner(store.task_signing_key))
    modules = ModuleLibrary.from_settings(settings)
    jobs = JobService(store, dispatcher, settings=settings, routing=routing, tools=tools, activities=activities,
                      local_activities_are_live=local_activities_are_live, module_loader=modules.loader)
    return Parts(settings=settings, store=store, app=app, routing=routing, dispatcher=dispatcher, jobs=jobs,
                 modules=modules)
