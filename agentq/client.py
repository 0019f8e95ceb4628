"""`agentq.Client`: submit jobs and follow them from another service, without any activity code.

    client = Client("redis://redis:6379/0")
    handle = client.submit({"context": [...], "calls": [...]})
    for event in handle.events():
        print(event.event, event.part)
    record = handle.result(timeout=60)
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Iterator

from agentq.errors import JobTimeoutError
from agentq.protocol.events import strip_technical_details
from agentq.settings import Settings

FINAL = ("succeeded", "failed", "canceled")


@dataclass(frozen=True)
class Event:
    """One entry of a job's event stream; `id` resumes a stream after a disconnect."""

    id: str
    event: str
    data: dict

    @property
    def part(self) -> dict | None:
        return self.data.get("part")


class JobHandle:
    def __init__(self, client: "Client", job_id: str):
        self._client = client
        self.id = job_id

    def __repr__(self) -> str:
        return f"JobHandle({self.id!r})"

    def status(self) -> str:
        return self._client.store.job_status(self.id)

    def result(self, timeout: float | None = None) -> dict:
        """Wait until the job ends (at most `timeout` seconds) and return its record."""
        deadline = None if timeout is None else time.monotonic() + timeout
        store = self._client.store
        # Block on the job's end signal rather than on its event stream: one wake-up per job, not per event.
        # The status is re-read at least every second, so a job that ended without the signal is seen too.
        while self.status() not in FINAL:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise JobTimeoutError(f"job {self.id} did not finish within {timeout} s (status: {self.status()})")
            if store.wait_finished(self.id, 1.0 if remaining is None else min(1.0, remaining)) is not None:
                break
        return store.record(self.id)

    def events(self, *, after: str = "0-0", follow: bool = True, technical: bool = False) -> Iterator[Event]:
        """Events in order from `after`; with `follow`, until the job's final event. Parts are stripped of
        technical details unless `technical=True`."""
        for entry_id, envelope in self._client.store.iter_events(self.id, after, follow=follow):
            if not technical and "part" in envelope:
                envelope = {**envelope, "part": strip_technical_details(envelope["part"])}
            yield Event(entry_id, envelope.get("event", ""), envelope)

    def cancel(self) -> str:
        return self._client.service.cancel(self.id)


class Client:
    """A connection to agentq's state store and broker for submitting and following jobs."""

    def __init__(self, redis_url: str | None = None, *, broker_url: str | None = None,
                 settings: Settings | None = None):
        from agentq.runtime.app import Dispatcher, create_app
        from agentq.runtime.service import JobService
        from agentq.store.state import StateStore

        settings = settings or Settings()
        updates = {k: v for k, v in (("redis_url", redis_url), ("broker_url", broker_url)) if v}
        self.settings = settings.model_copy(update=updates) if updates else settings
        self.store = StateStore.from_settings(self.settings)
        self.app = create_app(self.settings)
        self.service = JobService(self.store, Dispatcher(self.app), settings=self.settings)

    def submit(self, job: Any, *, job_id: str | None = None) -> JobHandle:
        """Validate and enqueue a job (a dict or JSON text). Raises `JobValidationError`; nothing is written then."""
        return JobHandle(self, self.service.submit(job, job_id=job_id))

    def job(self, job_id: str) -> JobHandle:
        self.store.job_status(job_id)  # raises JobNotFoundError early
        return JobHandle(self, job_id)

    def close(self) -> None:
        self.store.redis.close()
        self.app.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
