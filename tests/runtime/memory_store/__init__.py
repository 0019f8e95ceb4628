"""`MemoryStore`: an in-memory `agentq.store.base.Store` for fast unit tests of the executor, the agent loop,
delegation and the job service, as dramatiq's stub broker stands in for a real one.

It mirrors the Lua steps in `agentq/store/lua/` step by step (each method names its script), returns the same
frozen replies (`agentq/store/replies.py`), keeps values in their stored form as Redis does (JSON text, event
entries packed by `store/event_codec.py`, so every read hands out fresh objects), and measures leases and job
expiry on a clock the test can advance (`ManualClock`). One lock makes every step atomic, as a script is.
`tests/runtime/test_store_contract.py` runs the same assertions against it, the real `StateStore` and a
Redis Cluster.

Rooms: `core` (one job's keys, leases, streams, the shared `_committed.lua` functions), `jobs` (submission,
finalize, cancel, usage, relay), `calls` (claim, commit, settle, retry, renew, decide), `ticks` (agent ticks),
`reads`, `fleet`, `limits` (the models' rate limits). A stand-in for unit tests only: acceptance tests run on
real Redis and real workers.
"""

from __future__ import annotations

from collections.abc import Callable

from tests.runtime.memory_store.admission import AdmissionSteps
from tests.runtime.memory_store.calls import CallSteps
from tests.runtime.memory_store.concurrency import ConcurrencySteps
from tests.runtime.memory_store.core import JobState, ManualClock
from tests.runtime.memory_store.fleet import Fleet
from tests.runtime.memory_store.jobs import JobSteps
from tests.runtime.memory_store.limits import LimitSteps
from tests.runtime.memory_store.reads import Reads
from tests.runtime.memory_store.tenants import TenantSteps
from tests.runtime.memory_store.ticks import TickSteps

__all__ = ["JobState", "ManualClock", "MemoryStore"]


class MemoryStore(JobSteps, CallSteps, TickSteps, Reads, Fleet, LimitSteps, TenantSteps, ConcurrencySteps,
                  AdmissionSteps):
    """An in-memory state store with `StateStore`'s contract. Thread-safe (one lock)."""

    def __init__(self, *, clock: Callable[[], float] | None = None, namespace: str = "agentq"):
        super().__init__(clock=clock, namespace=namespace)
        self._recent: dict[str, float] = {}
        self._task_key: str | None = None
        self._workers: dict[str, tuple[str, float]] = {}
        self._activities: dict[str, str] = {}
        self._tools: dict[str, str] = {}
        self._tool_conflicts: dict[str, str] = {}
        self._node_names: dict[str, tuple[str, float]] = {}
