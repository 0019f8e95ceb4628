"""What the sync and async clients share (`client.py`, `async_client.py`): the parts they open from settings, each
of the job service's and store's steps a client method runs, and the `Event` a job's stream yields."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentq.errors import ConfigurationError
from agentq.protocol.envelopes import Envelope, parse_envelope
from agentq.protocol.events import strip_technical_details
from agentq.protocol.tenants import DEFAULT_TENANT, tenant_problem
from agentq.protocol.tools import ToolRegistry
from agentq.settings import Settings, load_settings

if TYPE_CHECKING:
    from agentq.runtime.root import Parts
    from agentq.runtime.schedules import Schedules


@dataclass(frozen=True)
class Event:
    """One entry of a job's event stream; `id` resumes a stream after a disconnect."""

    id: str
    event: str
    data: dict

    @property
    def part(self) -> dict | None:
        return self.data.get("part")

    @property
    def envelope(self) -> Envelope:
        """The typed envelope (`agentq.protocol.envelopes`)."""
        return parse_envelope(self.data)


class BaseClient:
    """What `Client` and `AsyncClient` share (as httpx's clients share theirs): the settings, the parts the
    composition root builds from them (the job service that validates, writes and publishes), the job service's
    operations (synchronous: `AsyncClient` runs them in a worker thread), and how an event is handed out. Their
    reads are the same steps of `store/core.py`, each client sending them with its own I/O."""

    def __init__(self, redis_url: str | None = None, *, broker_url: str | None = None,
                 settings: Settings | None = None, tools: ToolRegistry | None = None, parts: Parts | None = None,
                 tenant: str = DEFAULT_TENANT):
        """`parts`: the composition root's parts of a runtime this process already built (embedded mode), used
        instead of building new ones; the client then leaves closing them to their owner. `tenant`: the tenant
        of the jobs this client submits (docs/tenants.md)."""
        from agentq.runtime.root import connect

        if (problem := tenant_problem(tenant)) is not None:
            raise ConfigurationError(f"Client(tenant=...): {problem}")
        self.tenant = tenant
        self._owns_parts = parts is None
        if parts is not None:
            self.settings, self._parts = parts.settings, parts
            return
        settings = settings or load_settings()
        updates = {k: v for k, v in (("redis_url", redis_url), ("broker_url", broker_url)) if v}
        self.settings = settings.model_copy(update=updates) if updates else settings
        self._parts = connect(self.settings, tools=tools)

    def _close_parts(self) -> None:
        if self._owns_parts:
            self._parts.close()

    def _submitted(self, job: Any, job_id: str | None, traceparent: str | None = None) -> str:
        return self._parts.jobs.submit(job, job_id=job_id, traceparent=traceparent, tenant=self.tenant)

    def _canceled(self, job_id: str) -> str:
        return self._parts.jobs.cancel(job_id).value

    def _calls(self, job_id: str) -> list[dict]:
        return self._parts.jobs.calls(job_id)

    def _resumed(self, job_id: str, options: Any) -> dict:
        self._parts.jobs.resume(job_id, options)
        return self._parts.store.record(job_id).to_dict()

    def _deliveries(self, job_id: str) -> list[dict]:
        return self._parts.jobs.deliveries(job_id)

    def _approved(self, job_id: str, call_id: str) -> dict:
        self._parts.jobs.approve(job_id, call_id)
        return self._call(job_id, call_id)

    def _rejected(self, job_id: str, call_id: str, reason: str | None) -> dict:
        self._parts.jobs.reject(job_id, call_id, reason)
        return self._call(job_id, call_id)

    def _edited(self, job_id: str, call_id: str, params: dict) -> dict:
        self._parts.jobs.edit(job_id, call_id, params)
        return self._call(job_id, call_id)

    def _diff(self, a: str, b: str) -> dict:
        from agentq.engine.job_compare import compare_jobs

        return compare_jobs(self._parts.store, a, b).to_dict()

    def _call(self, job_id: str, call_id: str) -> dict:
        from agentq.engine.call_views import job_call

        return job_call(self._parts.store, job_id, call_id)

    def _signaled(self, job_id: str, name: str, data: Any) -> dict:
        return self._parts.jobs.signal(job_id, name, data)

    def _event_sent(self, name: str, data: Any, event_id: str | None) -> dict:
        body = {"name": name, "data": data, **({"id": event_id} if event_id is not None else {})}
        return self._parts.jobs.send_event(body, tenant=self.tenant)

    def _tools(self) -> dict[str, dict]:
        return self._parts.jobs.available_tools()

    def _activities(self) -> dict[str, dict]:
        return self._parts.jobs.known_activities()

    def _forget_activity(self, name: str) -> bool:
        return self._parts.jobs.forget_activity(name)

    def _schedules(self) -> Schedules:
        """The schedules as this client sees them: a client of the default tenant all of them, one of a named
        tenant its own tenant's (docs/schedules.md)."""
        from agentq.protocol.tenants import Principal, Role

        role = Role.ADMIN if self.tenant == DEFAULT_TENANT else Role.SUBMIT
        return self._parts.schedules.for_principal(Principal(self.tenant, role))

    # Continue and fork (docs/continue-and-fork.md): a client of a named tenant sees only its tenant's jobs

    def _copies(self) -> Any:
        from agentq.protocol.tenants import Principal, Role
        from agentq.runtime.continuation import Continuations

        role = Role.ADMIN if self.tenant == DEFAULT_TENANT else Role.SUBMIT
        return Continuations(self._parts.jobs), Principal(self.tenant, role).sees

    def _continued(self, job_id: str, messages: Any, options: dict | None) -> str:
        copies, sees = self._copies()
        body = {"context": messages, **({"options": options} if options is not None else {})}
        return copies.continue_job(job_id, body, visible=sees)

    def _forked(self, job_id: str, at_tick: Any, changes: dict[str, Any]) -> str:
        copies, sees = self._copies()
        return copies.fork(job_id, {"at_tick": at_tick, **{k: v for k, v in changes.items() if v is not None}},
                           visible=sees)

    def _thread_of(self, thread: str) -> dict:
        copies, sees = self._copies()
        return copies.thread(thread, visible=sees)

    def _forks_of(self, job_id: str) -> dict:
        copies, sees = self._copies()
        return copies.forks(job_id, visible=sees)


def event_of(entry_id: str, data: dict, *, technical: bool) -> Event:
    """The `Event` of a stream entry; its part without technical details unless `technical`."""
    if not technical and "part" in data:
        data = {**data, "part": strip_technical_details(data["part"])}
    return Event(entry_id, data.get("event", ""), data)
