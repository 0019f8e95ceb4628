"""The configured Celery app, for Celery's own tools: `celery -A agentq.celery flower` (also `events`, `inspect`,
`control`, `status`).

The app is built from `load_settings()` (the `AGENTQ_*` environment: `AGENTQ_BROKER_URL`, else `AGENTQ_REDIS_URL`)
by the composition root, exactly as workers and clients build theirs; nothing connects until a tool uses it.
It registers no task: it is for monitoring and control, not for running a worker (that is `agentq worker`).

`import agentq` does not import this module (it imports Celery).
"""

from __future__ import annotations

from agentq.runtime.root import connect
from agentq.settings import load_settings

app = connect(load_settings()).app

__all__ = ["app"]
