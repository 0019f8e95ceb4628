"""What the fleet published (tools) and announced (known and live activities), as the job service sees it:
`FleetViews`, a mixin of `JobService` (`runtime/service.py`), which builds the parts it uses.

What the fleet published (tools) and announced (known activities) is read once per heartbeat
(`AGENTQ_HEARTBEAT_S`, the pace at which workers announce it) and reused by the submissions meanwhile,
which saves a submission five round trips. The cache is trusted only for what it can tell for sure: a job it
rejects, or one with a call it would hand to the model (a latent or module call), or an agent job naming a
tool it knows no activity of, is planned again against a fresh read (`_plan`). So a tool or activity announced
since is seen at once; a change to one already known (a tool's schema, an activity's queue, an activity
forgotten) within one heartbeat. This process's own tools, and its activities when they count as live (embedded
mode), are laid over what the fleet announced.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from agentq.engine.routing import Routing
from agentq.errors import JobValidationError
from agentq.protocol.activities import ActivityRegistry
from agentq.protocol.digests import now_iso
from agentq.protocol.jobs import JobLimits, JobPlan, ModuleLoader, plan_job
from agentq.protocol.records import CallMode, JobKind
from agentq.protocol.tools import ToolRegistry
from agentq.protocol.waits import WAIT_TOOLS
from agentq.settings import Settings
from agentq.store.contracts import FleetStore


@dataclass(frozen=True)
class FleetView:
    """What the fleet published and announced, as read at `read_at` (the job service's clock)."""

    tools: dict[str, dict]  # published tool schemas
    known: dict[str, dict]  # the store's known activities (docs/protocol.md#activities)
    read_at: float


class FleetViews:
    """The fleet's tools and activities, read now or within the last heartbeat."""

    fleet_store: FleetStore  # the fleet part (`store/fleet.py`)
    settings: Settings
    routing: Routing
    tools: ToolRegistry
    activities: ActivityRegistry
    local_activities_are_live: bool
    fleet_ttl_s: float
    _clock: Callable[[], float]
    _fleet: FleetView | None
    _fleet_lock: threading.Lock
    limits: JobLimits
    module_loader: ModuleLoader | None

    def available_tools(self) -> dict[str, dict]:
        """Published tools, overridden by this process's own registry (read now)."""
        return self._with_local_tools(self.fleet_store.published_tools())

    def _with_local_tools(self, published: dict[str, dict]) -> dict[str, dict]:
        return {**published, **self.tools.snapshot()}

    def live_activities(self) -> dict[str, dict]:
        live = self.fleet_store.live_activities()
        if self.local_activities_are_live:
            for spec in self.activities.specs():
                live.setdefault(spec.name, self.routing.announcement(spec))
        return live

    def known_activities(self) -> dict[str, dict]:
        """The known activities (docs/protocol.md#activities): every activity announced within
        `AGENTQ_ACTIVITY_MEMORY_S`, live or not (`FleetStore.known_activities`), plus this process's own as live when
        they count as such (read now)."""
        return self._with_local_activities(self.fleet_store.known_activities(self.settings.activity_memory_s))

    def known_activities_for(self, names: Collection[str]) -> dict[str, dict]:
        """The known activities for an agent tick whose tools are `names`: the view read within the last heartbeat
        when it knows an activity of every one of them, else read now (one it does not know may only have been
        announced since: its tool would go to the model)."""
        view, cached = self.fleet()
        known = self._with_local_activities(view.known)
        if cached and not all(name in known or name in WAIT_TOOLS for name in names):
            view, _ = self.fleet(fresh=True)
            known = self._with_local_activities(view.known)
        return known

    def _with_local_activities(self, stored: dict[str, dict]) -> dict[str, dict]:
        known = dict(stored)  # `stored` may be the cached view: never changed in place
        if self.local_activities_are_live:
            for spec in self.activities.specs():
                entry = known.get(spec.name)
                if entry is None or not entry["live"]:
                    known[spec.name] = {**(entry or {"workers": [], "last_seen": now_iso()}),
                                        **self.routing.announcement(spec), "live": True}
        return known

    def forget_activity(self, name: str) -> bool:
        """Retire a known activity at once (`FleetStore.forget_activity`); this process's next submission reads the
        fleet again, other submitters see it within one heartbeat. True when it was known."""
        forgotten = self.fleet_store.forget_activity(name)
        with self._fleet_lock:
            self._fleet = None
        return forgotten

    def fleet(self, *, fresh: bool = False) -> tuple[FleetView, bool]:
        """What the fleet published and announced: the view read within the last heartbeat unless `fresh`
        (or none was read yet), else read now. Returns (view, whether it came from the cache)."""
        now = self._clock()
        with self._fleet_lock:
            view = self._fleet
        if not fresh and view is not None and 0 <= now - view.read_at < self.fleet_ttl_s:
            return view, True
        view = FleetView(tools=self.fleet_store.published_tools(),
                         known=self.fleet_store.known_activities(self.settings.activity_memory_s), read_at=now)
        with self._fleet_lock:
            self._fleet = view
        return view, False

    def _plan(self, job: Any, size: int, job_id: str | None) -> tuple[JobPlan, dict[str, dict]]:
        """Plan `job` against the fleet (known activities, not only live ones: a call waits on its queue for a
        worker, docs/protocol.md#activities); returns the plan and the known activities it was routed against. A cached
        view is trusted only when every call it planned runs an activity it knows, or, for an agent job, when it knows
        an activity of every tool the job names (as a tick's `known_activities_for`); otherwise (a rejection, a call
        for the model, a tool it knows no activity of) the job is planned again against a fresh read."""
        view, cached = self.fleet()
        try:
            known = self._with_local_activities(view.known)
            plan = self._plan_against(job, size, job_id, view, known)
            if not cached or _certain(plan, known):
                return plan, known
        except JobValidationError:
            if not cached:
                raise
        view, _ = self.fleet(fresh=True)
        known = self._with_local_activities(view.known)
        return self._plan_against(job, size, job_id, view, known), known

    def _plan_against(self, job: Any, size: int, job_id: str | None, view: FleetView,
                      known: dict[str, dict]) -> JobPlan:
        tools = {**WAIT_TOOLS, **self._with_local_tools(view.tools)}  # the wait tools are built in (docs/waits.md)
        return plan_job(job, tools=tools, live_activities=known, limits=self.limits,
                        size=size, job_id=job_id, module_loader=self.module_loader)


def _certain(plan: JobPlan, known: Mapping[str, Any]) -> bool:
    """Whether a plan made against a cached view of the fleet can stand: a plan job whose calls all run known
    activities (a call the view would hand to the model may only lack an activity announced since); an agent job
    every tool of which has a known activity (its ticks compose its tools again, against the view they read)."""
    if plan.kind is JobKind.AGENT:
        return all(name in known or name in WAIT_TOOLS for name in plan.registered)
    return all(call.mode in (CallMode.EXPLICIT, CallMode.WAIT) for call in plan.calls)
