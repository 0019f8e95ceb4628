"""`agentq.AsyncClient`: `agentq.Client` for asyncio services (docs/protocol.md#the-job-record), with `async` methods.

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
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

from agentq.client_base import BaseClient, Event, event_of
from agentq.protocol.tenants import DEFAULT_TENANT
from agentq.protocol.tools import ToolRegistry
from agentq.settings import Settings

T = TypeVar("T")


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
        """Wait until the job ends (at most `timeout` seconds) and return its record: one round trip for a job
        that has ended, as `JobHandle.result` (the same step of `store/core.py`)."""
        return (await self._client._reads.result(self.id, timeout)).to_dict()

    async def events(self, *, after: str = "0-0", follow: bool = True,
                     technical: bool = False) -> AsyncIterator[Event]:
        """Events in order from `after`; with `follow`, until the job's final event. Parts are stripped of
        technical details unless `technical=True`."""
        async for entry_id, data in self._client._reads.events(self.id, after, follow=follow):
            yield event_of(entry_id, data, technical=technical)

    async def cancel(self) -> str:
        return await self._client._thread(self._client._canceled, self.id)

    async def resume(self, options: dict | None = None) -> dict:
        """As `JobHandle.resume` (docs/resume.md): resume the job where it stopped; its record."""
        return await self._client._thread(self._client._resumed, self.id, options)

    async def calls(self) -> list[dict]:
        """The job's calls (README.md#the-http-api-and-the-web-page `/calls`)."""
        return await self._client.calls(self.id)

    async def deliveries(self) -> list[dict]:
        """The job's webhook deliveries (docs/webhooks.md), as `JobHandle.deliveries`."""
        return await self._client.deliveries(self.id)

    async def history(self) -> dict:
        """The job's history message (seed 004)."""
        return await self._client.history(self.id)

    async def approve(self, call_id: str) -> dict:
        return await self._client.approve(self.id, call_id)

    async def reject(self, call_id: str, reason: str | None = None) -> dict:
        return await self._client.reject(self.id, call_id, reason=reason)

    async def edit(self, call_id: str, params: dict) -> dict:
        return await self._client.edit(self.id, call_id, params)

    async def signal(self, name: str, data: Any = None) -> dict:
        """Send the job the signal `name` (docs/waits.md), as `Client.signal`."""
        return await self._client.signal(self.id, name, data)

    async def continue_(self, messages: list, options: dict | None = None) -> AsyncJobHandle:
        """As `JobHandle.continue_` (docs/continue-and-fork.md)."""
        return await self._client.continue_job(self.id, messages, options=options)

    async def fork(self, at_tick: int, *, options: dict | None = None, tools: list | None = None,
                   context: list | None = None) -> AsyncJobHandle:
        """As `JobHandle.fork` (docs/continue-and-fork.md)."""
        return await self._client.fork(self.id, at_tick, options=options, tools=tools, context=context)


class AsyncClient(BaseClient):
    """An asyncio connection to agentq's state store and broker (see the module docstring). Close it with
    `await client.aclose()` or use it as `async with`."""

    def __init__(self, redis_url: str | None = None, *, broker_url: str | None = None,
                 settings: Settings | None = None, tools: ToolRegistry | None = None, tenant: str = DEFAULT_TENANT):
        from agentq.store.aio import open_async_store

        super().__init__(redis_url, broker_url=broker_url, settings=settings, tools=tools, tenant=tenant)
        self._reads = open_async_store(self.settings)

    async def _thread(self, function: Callable[..., T], *args: Any) -> T:
        """A job-service operation (a few short round trips) in a worker thread."""
        return await asyncio.to_thread(function, *args)

    async def submit(self, job: Any, *, job_id: str | None = None, traceparent: str | None = None) -> AsyncJobHandle:
        """Validate and enqueue a job (a dict or JSON text). Raises `JobValidationError`; nothing is written then.
        The job's trace continues `traceparent` (W3C), else the current OpenTelemetry context: kept with the job
        even when this process does not trace, for the processes that do (docs/tracing.md)."""
        return AsyncJobHandle(self, await self._thread(self._submitted, job, job_id, traceparent))

    async def job(self, job_id: str) -> AsyncJobHandle:
        await self._reads.job_status(job_id)  # raises JobNotFoundError early
        return AsyncJobHandle(self, job_id)

    async def record(self, job_id: str) -> dict:
        return (await self._reads.record(job_id)).to_dict()

    async def resume(self, job_id: str, options: dict | None = None) -> AsyncJobHandle:
        """As `Client.resume` (docs/resume.md)."""
        await self._thread(self._resumed, job_id, options)
        return AsyncJobHandle(self, job_id)

    async def calls(self, job_id: str) -> list[dict]:
        return await self._thread(self._calls, job_id)

    async def deliveries(self, job_id: str) -> list[dict]:
        return await self._thread(self._deliveries, job_id)

    async def history(self, job_id: str) -> dict:
        from agentq.runtime.history import history_of

        await self._reads.job_status(job_id)  # raises JobNotFoundError
        return history_of([entry async for entry in self._reads.events(job_id, follow=False)])

    async def diff(self, a: str, b: str) -> dict:
        """Two jobs compared side by side, as `Client.diff`."""
        return await self._thread(self._diff, a, b)

    async def approve(self, job_id: str, call_id: str) -> dict:
        return await self._thread(self._approved, job_id, call_id)

    async def reject(self, job_id: str, call_id: str, reason: str | None = None) -> dict:
        return await self._thread(self._rejected, job_id, call_id, reason)

    async def edit(self, job_id: str, call_id: str, params: dict) -> dict:
        return await self._thread(self._edited, job_id, call_id, params)

    async def signal(self, job_id: str, name: str, data: Any = None) -> dict:
        """As `Client.signal` (docs/waits.md)."""
        return await self._thread(self._signaled, job_id, name, data)

    async def send_event(self, name: str, data: Any = None, id: str | None = None) -> dict:
        """As `Client.send_event` (docs/waits.md)."""
        return await self._thread(self._event_sent, name, data, id)

    async def continue_job(self, job_id: str, messages: list, *, options: dict | None = None) -> AsyncJobHandle:
        """As `Client.continue_job` (docs/continue-and-fork.md)."""
        return AsyncJobHandle(self, await self._thread(self._continued, job_id, messages, options))

    async def fork(self, job_id: str, at_tick: int, *, options: dict | None = None, tools: list | None = None,
                   context: list | None = None) -> AsyncJobHandle:
        """As `Client.fork` (docs/continue-and-fork.md)."""
        changes = {"options": options, "tools": tools, "context": context}
        return AsyncJobHandle(self, await self._thread(self._forked, job_id, at_tick, changes))

    async def thread(self, thread: str) -> dict:
        """As `Client.thread`."""
        return await self._thread(self._thread_of, thread)

    async def forks(self, job_id: str) -> dict:
        """As `Client.forks`."""
        return await self._thread(self._forks_of, job_id)

    async def tools(self) -> dict[str, dict]:
        return await self._thread(self._tools)

    async def activities(self) -> dict[str, dict]:
        return await self._thread(self._activities)

    async def forget_activity(self, name: str) -> bool:
        return await self._thread(self._forget_activity, name)

    async def ping(self) -> None:
        await self._reads.ping()

    @property
    def schedules(self) -> AsyncSchedules:
        """The schedules (docs/schedules.md), as `Client.schedules` sees them, each operation awaited."""
        return AsyncSchedules(self)

    async def aclose(self) -> None:
        try:
            await self._reads.close()
        finally:
            await self._thread(self._close_parts)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class AsyncSchedules:
    """`Client.schedules`' operations for asyncio: each runs in a worker thread (a few short round trips)."""

    def __init__(self, client: AsyncClient):
        self._client = client

    async def set(self, name: str, body: Any) -> dict:
        return await self._client._thread(self._client._schedules().set, name, body)

    async def get(self, name: str) -> dict:
        return await self._client._thread(self._client._schedules().get, name)

    async def list(self) -> list[dict]:
        return await self._client._thread(self._client._schedules().list)

    async def pause(self, name: str) -> dict:
        return await self._client._thread(self._client._schedules().pause, name)

    async def resume(self, name: str) -> dict:
        return await self._client._thread(self._client._schedules().resume, name)

    async def trigger(self, name: str) -> str:
        return await self._client._thread(self._client._schedules().trigger, name)

    async def delete(self, name: str) -> None:
        await self._client._thread(self._client._schedules().delete, name)
