"""agentq: a distributed task-queue backend for LLM agents.

    from agentq import Tool, Activity

    Tool.register("weatherCheck", {...})

    @Activity.register("weatherCheck", retries=3, timeout=10)
    async def weather_check(call, tool, context): ...

`import agentq` loads no Redis, Celery or Anthropic code; `Client`, `AsyncClient` and `Settings` are imported on
first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentq.errors import (
    AgentQError,
    CallValidationError,
    ConfigurationError,
    DuplicateRegistrationError,
    JobNotFoundError,
    JobTimeoutError,
    JobValidationError,
    NonRetryableError,
    ProtocolError,
    RateLimited,
    ReferenceSyntaxError,
    StoreError,
    StoreUnavailableError,
    ToolSchemaError,
    UnknownToolError,
)
from agentq.protocol.activities import Activity, ActivityRegistry
from agentq.protocol.tools import Tool, ToolRegistry

if TYPE_CHECKING:
    from agentq.async_client import AsyncClient, AsyncJobHandle
    from agentq.client import Client, JobHandle
    from agentq.settings import Settings

__version__ = "0.1.0"

__all__ = [
    "Activity",
    "ActivityRegistry",
    "AgentQError",
    "AsyncClient",
    "AsyncJobHandle",
    "CallValidationError",
    "Client",
    "ConfigurationError",
    "DuplicateRegistrationError",
    "JobHandle",
    "JobNotFoundError",
    "JobTimeoutError",
    "JobValidationError",
    "NonRetryableError",
    "ProtocolError",
    "RateLimited",
    "ReferenceSyntaxError",
    "Settings",
    "StoreError",
    "StoreUnavailableError",
    "Tool",
    "ToolRegistry",
    "ToolSchemaError",
    "UnknownToolError",
    "__version__",
]

_LAZY = {"AsyncClient": "agentq.async_client", "AsyncJobHandle": "agentq.async_client", "Client": "agentq.client",
         "JobHandle": "agentq.client", "Settings": "agentq.settings"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'agentq' has no attribute {name!r}")
