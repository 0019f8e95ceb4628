"""`agentq.Client`: submit jobs and follow them from another service, without any activity code.

    client = Client("redis://redis:6379/0")
    handle = client.submit({"context": [...], "calls": [...]})
    for event in handle.events():
        print(event.event, event.part)
    record = handle.result(timeout=60)

Job records are returned as plain dicts in the shape of the job record (docs/protocol.md#the-job-record: `{"id",
"status", "result", "state", "instances", "error", "usage", "created_at", "finished_at"}`), ready for JSON; statuses are
strings.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from agentq.client_base import BaseClient, Event, event_of
from agentq.protocol.tenants import DEFAULT_TENANT
from agentq.protocol.tools import ToolRegistry
from agentq.settings import Settings

if TYPE_CHECKING:
    from agentq.runtime.fleet_config import FleetConfig
    from agentq.runtime.rollouts import Rollouts
    from agentq.runtime.root import Parts
    from agentq.runtime.schedules import Schedules

__all__ = ["BaseClient", "Client", "Event", "JobHandle", "event_of"]


class JobHandle:
    def __init__(self, client: Client, job_id: str):
        self._client = client
        self.id = job_id

    def __repr__(self) -> str:
        return f"JobHandle({self.id!r})"

    def status(self) -> str:
        return self._client._reads.job_status(self.id).value

    def record(self) -> dict:
        """The job record as it stands now (final once the job ended)."""
        return self._client.record(self.id)

    def result(self, timeout: float | None = None) -> dict:
        """Wait until the job ends (at most `timeout` seconds) and return its record: one round trip for a job
        that has ended (the wait for its end signal and the read of its saved record go in one pipeline)."""
        return self._client._reads.result(self.id, timeout).to_dict()

    def events(self, *, after: str = "0-0", follow: bool = True, technical: bool = False) -> Iterator[Event]:
        """Events in order from `after`; with `follow`, until the job's final event. Parts are stripped of
        technical details unless `technical=True`."""
        for entry_id, data in self._client._reads.events(self.id, after, follow=follow):
            yield event_of(entry_id, data, technical=technical)

    def cancel(self) -> str:
        return self._client._canceled(self.id)

    def resume(self, options: dict | None = None) -> dict:
        """Resume the failed, canceled or deadline-exceeded job where it stopped (docs/resume.md), with `options`
        overrides (a larger `budget`, ...); returns its record. `ConflictError` for a job that succeeded or runs,
        `JobExpiredError` once its data expired, `JobValidationError` for bad options: nothing is written then."""
        return self._client._resumed(self.id, options)

    def calls(self) -> list[dict]:
        """The job's calls (README.md#the-http-api-and-the-web-page `/calls`): id, tool, activity, mode, instance,
        status, attempts, depends_on, output_path, started_at, finished_at, duration_ms, error, and the rollout route of
        a call whose tool has a rule (docs/tenants.md)."""
        return self._client.calls(self.id)

    def deliveries(self) -> list[dict]:
        """The job's webhook deliveries (docs/webhooks.md), oldest first: id, type, url, state (pending, delivered,
        failed), next_attempt_at and every attempt's time, status or error."""
        return self._client.deliveries(self.id)

    def history(self) -> dict:
        """The job's history message (seed 004): `{"role": "assistant", "parts": [...], "activity_parts": [...]}`
        with one consolidated `tool_call` per call, in chronological order, without technical details."""
        return self._client.history(self.id)

    def approve(self, call_id: str) -> dict:
        """Let a call awaiting approval run; returns the call as in `calls()`."""
        return self._client.approve(self.id, call_id)

    def reject(self, call_id: str, reason: str | None = None) -> dict:
        """Fail a call awaiting approval with "rejected by reviewer[: reason]"; returns the call."""
        return self._client.reject(self.id, call_id, reason=reason)

    def edit(self, call_id: str, params: dict) -> dict:
        """Replace the parameters of a call awaiting approval (re-validated; meta fields stay) and let it
        run; returns the call. `JobValidationError` (nothing changes) when the edited call is invalid."""
        return self._client.edit(self.id, call_id, params)

    def signal(self, name: str, data: Any = None) -> dict:
        """Send the job the signal `name` (docs/waits.md), as `Client.signal`."""
        return self._client.signal(self.id, name, data)

    def continue_(self, messages: list, options: dict | None = None) -> JobHandle:
        """Continue this ended agent job with `messages` (docs/continue-and-fork.md), as `Client.continue_job`."""
        return self._client.continue_job(self.id, messages, options=options)

    def fork(self, at_tick: int, *, options: dict | None = None, tools: list | None = None,
             context: list | None = None) -> JobHandle:
        """Fork this agent job at tick `at_tick` with the changes given, as `Client.fork`."""
        return self._client.fork(self.id, at_tick, options=options, tools=tools, context=context)

    def forks(self) -> dict:
        """This job's forks, as `Client.forks`."""
        return self._client.forks(self.id)


class Client(BaseClient):
    """A connection to agentq's state store and broker for submitting and following jobs.

    `tools` adds tool schemas this process knows to those the fleet published (a submitter that carries its
    own tool files); the client never needs activity code."""

    def __init__(self, redis_url: str | None = None, *, broker_url: str | None = None,
                 settings: Settings | None = None, tools: ToolRegistry | None = None, parts: Parts | None = None,
                 tenant: str = DEFAULT_TENANT):
        super().__init__(redis_url, broker_url=broker_url, settings=settings, tools=tools, parts=parts,
                         tenant=tenant)
        self._reads = self._parts.reads

    def submit(self, job: Any, *, job_id: str | None = None, traceparent: str | None = None) -> JobHandle:
        """Validate and enqueue a job (a dict or JSON text). Raises `JobValidationError`; nothing is written then.
        The job's trace continues `traceparent` (W3C), else the current OpenTelemetry context: kept with the job
        even when this process does not trace, for the processes that do (docs/tracing.md)."""
        return JobHandle(self, self._submitted(job, job_id, traceparent))

    def job(self, job_id: str) -> JobHandle:
        self._reads.job_status(job_id)  # raises JobNotFoundError early
        return JobHandle(self, job_id)

    def record(self, job_id: str) -> dict:
        """The record of a job, as `JobHandle.record`."""
        return self._reads.record(job_id).to_dict()

    def resume(self, job_id: str, options: dict | None = None) -> JobHandle:
        """Resume a job where it stopped, as `JobHandle.resume`; its handle follows the resumed run."""
        self._resumed(job_id, options)
        return JobHandle(self, job_id)

    def calls(self, job_id: str) -> list[dict]:
        """The calls of a job, as `JobHandle.calls`."""
        return self._calls(job_id)

    def deliveries(self, job_id: str) -> list[dict]:
        """The webhook deliveries of a job, as `JobHandle.deliveries`."""
        return self._deliveries(job_id)

    def history(self, job_id: str) -> dict:
        """The history message of a job, as `JobHandle.history`."""
        from agentq.runtime.history import history_of

        self._reads.job_status(job_id)  # raises JobNotFoundError
        return history_of(self._reads.events(job_id, follow=False))

    def diff(self, a: str, b: str) -> dict:
        """Two jobs compared side by side (docs/compare.md), as `GET /v1/jobs/{a}/diff/{b}` answers; one
        `JobNotFoundError` (`JobExpiredError` when their data expired) naming each side that cannot be read."""
        return self._diff(a, b)

    # Approvals (docs/protocol.md#approvals): each raises `ConflictError` when the call is not awaiting approval, and
    # `JobNotFoundError` / `CallNotFoundError` for an unknown job or call.

    def approve(self, job_id: str, call_id: str) -> dict:
        """Let a call awaiting approval run; returns the call as in `calls()`."""
        return self._approved(job_id, call_id)

    def reject(self, job_id: str, call_id: str, reason: str | None = None) -> dict:
        """Fail a call awaiting approval with "rejected by reviewer[: reason]" (its job goes on as after any
        failed call); returns the call."""
        return self._rejected(job_id, call_id, reason)

    def edit(self, job_id: str, call_id: str, params: dict) -> dict:
        """Replace the parameters of a call awaiting approval and let it run; returns the call. Raises
        `JobValidationError` (nothing changes) when the edited call is invalid, each problem at `/params/...`."""
        return self._edited(job_id, call_id, params)

    # Continue and fork (docs/continue-and-fork.md): `JobNotFoundError` for an unknown job (or another tenant's),
    # `JobExpiredError` once its data expired, `ConflictError` for a job that cannot be continued (running, a plan
    # job), `JobValidationError` naming every problem of the request; nothing is written on any of them.

    def continue_job(self, job_id: str, messages: list, *, options: dict | None = None) -> JobHandle:
        """A new agent job continuing the ended agent job `job_id`: its conversation, state and tools, then
        `messages`; `options` over its options. Its first request repeats the old conversation (prompt cache)."""
        return JobHandle(self, self._continued(job_id, messages, options))

    def fork(self, job_id: str, at_tick: int, *, options: dict | None = None, tools: list | None = None,
             context: list | None = None) -> JobHandle:
        """A new agent job replaying the first `at_tick` ticks of `job_id` (no request, no activity run, no cost),
        then running live with the given options, tools or first messages."""
        return JobHandle(self, self._forked(job_id, at_tick, {"options": options, "tools": tools,
                                                              "context": context}))

    def thread(self, thread: str) -> dict:
        """A thread's jobs in order (`{"thread", "jobs": [{"id", "messages", "record"}]}`)."""
        return self._thread_of(thread)

    def forks(self, job_id: str) -> dict:
        """A job's forks, oldest first (`{"job", "forks": [{"id", "messages", "record"}]}`)."""
        return self._forks_of(job_id)

    # Waits (docs/waits.md)

    def signal(self, job_id: str, name: str, data: Any = None) -> dict:
        """Send a job the signal `name` with `data`: taken by its oldest open `waitForSignal` of that name, else kept
        for the next one. Returns `{"signal": {"name", "data", "id", "time"}, "taken": bool}`; `ConflictError` when
        the job has ended, `JobNotFoundError` for an unknown job."""
        return self._signaled(job_id, name, data)

    def send_event(self, name: str, data: Any = None, id: str | None = None) -> dict:
        """Send an event to the open `waitForEvent` calls of this client's tenant whose event and match fit it
        (never another tenant's; a wait opened later does not get it). An `id` sent within a day is not delivered
        again. Returns `{"id", "woken"}`; `InvalidInputError` names every problem of a bad event."""
        return self._event_sent(name, data, id)

    def tools(self) -> dict[str, dict]:
        """The tool schemas a submission through this client can name (published, then its own)."""
        return self._tools()

    def live_activities(self) -> dict[str, dict]:
        """Activity name → its announcement, for the activities a live worker serves."""
        return self._parts.jobs.live_activities()

    def activities(self) -> dict[str, dict]:
        """The known activities (docs/protocol.md#activities), by name: each one's announcement (`queue`, `task`,
        options), `live`, the ids of the live `workers` serving it and `last_seen` (ISO-8601 UTC). A submission composes
        against these: a known activity with no live worker keeps its tools explicit, and their calls wait on its
        queue."""
        return self._activities()

    def forget_activity(self, name: str) -> bool:
        """Retire a known activity at once, so its tools turn latent (unless a live worker announces it
        again): for this client's next submission at once, for other submitting processes within one
        heartbeat (`AGENTQ_HEARTBEAT_S`). False when it was not known."""
        return self._forget_activity(name)

    @property
    def rollouts(self) -> Rollouts:
        """The tools' rollout rules (`set`, `clear`, `rules`) and their `report()` (docs/rollouts.md)."""
        return self._parts.rollouts

    @property
    def schedules(self) -> Schedules:
        """The schedules (docs/schedules.md): `set(name, body)`, `get`, `list()`, `pause`, `resume`, `trigger`,
        `delete`."""
        return self._schedules()

    @property
    def config(self) -> FleetConfig:
        """The fleet's shared settings: `show()`, `set(name, value)`, and the values this process uses
        (docs/config.md)."""
        return self._parts.config

    def tool_conflicts(self) -> dict[str, dict]:
        """Tools that two processes published with different schemas."""
        return self._parts.fleet.tool_conflicts()

    def ping(self) -> None:
        """Raise `StoreUnavailableError` when the state store cannot be reached."""
        self._parts.store.ping()

    def close(self) -> None:
        self._close_parts()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
