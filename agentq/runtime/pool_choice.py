"""Which Celery pool a worker process runs and how it is tuned: `pool_of` (a dispatcher on threads, an activity worker
on Celery's prefork pool), `processes_of` (the processes that run its calls, which it announces) and
`switch_interval` (the interpreter's for an engine on threads). Pure: `worker.serve` and `InProcessWorker` apply them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentq.settings import Settings


def pool_of(settings: Settings, *, engine: bool, pool: str | None, concurrency: int | None) -> tuple[str, int | None]:
    """The Celery pool of a worker process and its size (None: Celery's default, one per CPU).

    A dispatcher (`engine`) runs on threads, `AGENTQ_ENGINE_CONCURRENCY` of them: its tasks spend their time waiting
    on model streams and the store, and a waiting thread costs little memory and no CPU, where a process per task
    would cost both. An activity worker keeps Celery's prefork pool, one process per CPU, for CPU-bound and blocking
    activities. An explicit `pool` or `concurrency` wins."""
    chosen = pool or ("threads" if engine else "prefork")
    if concurrency is None and engine and chosen == "threads":
        concurrency = settings.engine_concurrency
    return chosen, concurrency


ENGINE_SWITCH_INTERVAL_S = 0.02
"""How long a thread of an engine on threads may hold the interpreter before it is asked to let another run (Python's
default: 5 ms). A dispatcher's threads each wake for every piece of their streams, for a fraction of a millisecond;
with a thousand of them, the default's forced hand-overs between runnable threads cost more CPU than the work itself
(`benchmarks/streams.py`: 1,000 streams at once through the SDK, 3.8 to 8.3 ms of CPU per request at 5 ms, 2.6 to
2.9 ms at 20 ms). A thread that waits on I/O still lets the others run at once."""


def processes_of(pool: str, concurrency: int) -> int:
    """The processes that run a worker's calls: a prefork pool's children, else the worker's own process."""
    return max(concurrency, 1) if pool == "prefork" else 1


def switch_interval(*, engine: bool, pool: str) -> float | None:
    """The interpreter's switch interval for a worker process (None: Python's default): `ENGINE_SWITCH_INTERVAL_S`
    for an engine on threads."""
    return ENGINE_SWITCH_INTERVAL_S if engine and pool == "threads" else None
