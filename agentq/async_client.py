"""`agentq.AsyncClient`: `agentq.Client` for asyncio services (SPEC §12), with `async` methods.

    async with AsyncClient("redis://redis:6379/0") as client:
        handle = await client.submit(job)
        async for event in handle.events():
            print(event.event, event.part)
        record = await handle.result(timeout=60)

Everything that waits — a job's events, its end — is read with `redis.asyncio` and holds no thread: followers
of many jobs share one blocking read (`agentq.store.aio.EventHub`). Submissions, cancels and approvals go
through the same job service as `Client`, the CLI and the HTTP API (validation, planning, the atomic write,
the broker publish), run in a worker thread: each is a few short round trips.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from agentq.client import Event
from agentq.errors import JobTimeoutError
from agentq.protocol.events import strip_technical_details
from agentq.protocol.tools import ToolRegistry
from agentq.settings import Settings


class AsyncJobHandle:
    def __init__(self, client: AsyncClient, job_id: str):
        self._client = client
        self.id = job_id

    def __repr__(self) -> str:
        return f"AsyncJobHandle({self.id!r})"

    async def status(self) -> str:
        return (await self._client._reads.job_status(self.id)).value

    async def record(self) -> dict:
        """The job record as it stands now (final once the job ended)."""
        return await self._client.record(self.id)

    async def result(self, timeout: float | None = None) -> dict:
        """Wait until the job ends (at most `timeout` seconds) and return its record."""
        reads = self._client._reads
        deadline = None if timeout is None else time.monotonic() + timeout
        while not (await reads.job_status(self.id)).is_final:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise JobTimeoutError(f"job {self.id} did not finish within {timeout} s "
                                      f"(status: {await self.status()})")
            if await reads.wait_finished(self.id, 1.0 if remaining is None else min(1.0, remaining)) is not None:
                break
        return await self.record()

    async def events(self, *, after: str = "0-0", follow: bool = True,
                     technical: bool = False) -> AsyncIterator[Event]:
        """Events in order from `after`; with `follow`, until the job's final event. Parts are stripped of
        technical details unless `technical=True`."""
        reads = self._client._reads
        entries = reads.follow(self.id, after) if follow else _until_now(reads, self.id, after)
        async for entry_id, data in entries:
            if not technical and "part" in data:
                data = {**data, "part": strip_technical_details(data["part"])}
            yield Event(entry_id, data.get("event", ""), data)

    async def cancel(self) -> str:
        return await self._client._run(lambda: self._client._parts.jobs.cancel(self.id).value)

    async def calls(self) -> list[dict]:
        """The job's calls (SPEC §14 `/calls`)."""
        return await self._client.calls(self.id)

    async def history(self) -> dict:
        """The job's history message (seed 004)."""
        return await self._client.history(self.id)

    async def approve(self, call_id: str) -> dict:
        return await self._client.approve(self.id, call_id)

    async def reject(self, call_id: str, reason: str | None = None) -> dict:
        return await self._client.reject(self.id, call_id, reason=reason)

    async def edit(self, call_id: str, params: dict) -> dict:
        return await self._client.edit(self.id, call_id, params)


async def _until_now(reads: Any, job_id: str, after: str) -> AsyncIterator[tuple[str, dict]]:
    while batch := await reads.read_events(job_id, after, count=500):
        for entry in batch:
            yield entry
        after = batch[-1][0]


class AsyncClient:
    """An asyncio connection to agentq's state store and broker (see the module docstring). Close it with
    `await client.aclose()` or use it as `async with`."""

    def __init__(self, redis_url: str | None = None, *, broker_url: str | None = None,
                 settings: Settings | None = None, tools: ToolRegistry | None = None):
        from agentq.client import Client
        from agentq.store.aio import AsyncStateStore

        self._sync = Client(redis_url, broker_url=broker_url, settings=settings, tools=tools)
        self.settings = self._sync.settings
        self._parts = self._sync._parts
        self._reads = AsyncStateStore(self.settings.redis_url, namespace=self.settings.namespace,
                                      cluster=self.settings.redis_cluster)

    async def _run(self, function: Any, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(function, *args, **kwargs)

    async def submit(self, job: Any, *, job_id: str | None = None) -> AsyncJobHandle:
        """Validate and enqueue a job (a dict or JSON text). Raises `JobValidationError`; nothing is written then."""
        return AsyncJobHandle(self, await self._run(self._parts.jobs.submit, job, job_id=job_id))

    async def job(self, job_id: str) -> AsyncJobHandle:
        await self._reads.job_status(job_id)  # raises JobNotFoundError early
        return AsyncJobHandle(self, job_id)

    async def record(self, job_id: str) -> dict:
        return (await self._reads.record(job_id)).to_dict()

    async def calls(self, job_id: str) -> list[dict]:
        return await self._run(self._sync.calls, job_id)  # type: ignore[no-any-return]

    async def history(self, job_id: str) -> dict:
        from agentq.runtime.history import history_of

        await self._reads.job_status(job_id)
        entries = [entry async for entry in _until_now(self._reads, job_id, "0-0")]
        return history_of(entries)

    async def approve(self, job_id: str, call_id: str) -> dict:
        return await self._run(self._sync.approve, job_id, call_id)  # type: ignore[no-any-return]

    async def reject(self, job_id: str, call_id: str, reason: str | None = None) -> dict:
        return await self._run(self._sync.reject, job_id, call_id, reason)  # type: ignore[no-any-return]

    async def edit(self, job_id: str, call_id: str, params: dict) -> dict:
        return await self._run(self._sync.edit, job_id, call_id, params)  # type: ignore[no-any-return]

    async def tools(self) -> dict[str, dict]:
        return await self._run(self._sync.tools)  # type: ignore[no-any-return]

    async def activities(self) -> dict[str, dict]:
        return await self._run(self._sync.activities)  # type: ignore[no-any-return]

    async def forget_activity(self, name: str) -> bool:
        return await self._run(self._sync.forget_activity, name)  # type: ignore[no-any-return]

    async def ping(self) -> None:
        await self._reads.ping()

    async def aclose(self) -> None:
        try:
            await self._reads.close()
        finally:
            await self._run(self._sync.close)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
