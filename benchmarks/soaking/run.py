"""One soak from start to report: the fleet up, the load and the faults for `duration_s`, then the load stops
(no new jobs), the faults stop, every open job is given `drain_s` to end, and the invariants are checked."""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentq.store.state import StateStore
from benchmarks.soaking import checks, store_checks
from benchmarks.soaking.checks import Check
from benchmarks.soaking.faults import KINDS, Fault, Injector
from benchmarks.soaking.fleet import TOKENS, Fleet
from benchmarks.soaking.hooks import HookReceiver
from benchmarks.soaking.jobs import SCHEDULE, SoakJob
from benchmarks.soaking.ledger import read_ledger
from benchmarks.soaking.load import Load, http
from benchmarks.soaking.model import ModelRequest, SoakModel


@dataclass
class SoakConfig:
    duration_s: float
    seed: int
    workers: int = 4
    open_jobs: int = 24
    drain_s: float = 60.0  # after the load and the faults stop: every job ends within this
    warmup_s: float = 3.0  # before the first fault
    gap_s: tuple[float, float] = (4.0, 10.0)
    kinds: tuple[str, ...] = KINDS
    burst_jobs: int = 12  # acme's burst after the faults (0: none), each of BURST_CALLS calls
    fair_bound_s: float = checks.FAIR_BOUND_S
    outage_scale: float = 1.0  # a Redis pause, a model outage, the receiver down: their drawn length times this
    workdir: Path | None = None


@dataclass
class SoakResult:
    config: SoakConfig
    began: float
    load_ended: float
    ended: float
    jobs: list[SoakJob]
    faults: list[Fault]
    checks: list[Check]
    requests: list[ModelRequest]
    calls_run: int
    memory: dict[str, int] = field(default_factory=dict)
    figures: dict[str, Any] = field(default_factory=dict)
    workdir: str = ""

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)


def _used_memory(url: str) -> int:
    store = StateStore(url)
    try:
        return int(store.redis.info("memory")["used_memory"])
    finally:
        store.redis.close()


def _wait_ends(load: Load, drain_s: float) -> None:
    deadline = time.monotonic() + drain_s
    while load.open() and time.monotonic() < deadline:
        time.sleep(0.2)


def recovery(faults: list[Fault], jobs: list[SoakJob]) -> None:
    """Per fault: from its end to the next job end, and to the end of every job open at its end (both 0 when no
    job was open then: nothing had to move)."""
    ends = sorted(j.ended_at for j in jobs if j.ended_at)
    for fault in faults:
        later = [e for e in ends if e > fault.ended]
        fault.recovery_s = round(later[0] - fault.ended, 2) if later else None
        open_then = [j for j in jobs if j.submitted_at and j.submitted_at <= fault.ended
                     and (not j.ended_at or j.ended_at > fault.ended)]
        if not open_then:
            fault.recovery_s = fault.settled_s = 0.0
        elif all(j.ended_at for j in open_then):
            fault.settled_s = round(max(j.ended_at for j in open_then) - fault.ended, 2)


def _schedule_check(store: StateStore, load: Load) -> Check:
    due, late = load.due_slots()
    exists = [store.redis.exists(store.keys(f"sched-{SCHEDULE}-{s}").job) for s in due + late]
    fired = {s for s, e in zip(due + late, exists, strict=True) if e}
    view = http(load.api, "GET", f"/v1/schedules/{SCHEDULE}", TOKENS["acme"])
    return checks.schedule_fired(due, fired, dict(view.get("counts") or {}))


def run_soak(config: SoakConfig) -> SoakResult:
    workdir = config.workdir or Path(tempfile.mkdtemp(prefix="agentq-soak-"))
    model, hooks = SoakModel().start(), HookReceiver()
    hooks.up()
    fleet = Fleet(workdir, model.url, workers=config.workers)
    try:
        starting = time.monotonic()
        fleet.start()
        fleet.wait_ready()
        startup_s = time.monotonic() - starting
        memory = {"before": _used_memory(fleet.url)}
        load = Load(fleet.api_url, fleet.url, hooks.url, config.seed, open_jobs=config.open_jobs)
        injector = Injector(fleet, model, hooks, config.seed, gap_s=config.gap_s, kinds=config.kinds,
                            outage_scale=config.outage_scale)
        began = time.time()
        load.start()
        time.sleep(config.warmup_s)
        injector.start(until=began + config.duration_s)
        time.sleep(max(0.0, began + config.duration_s - time.time()))
        injector.every_kind_once.wait(config.drain_s)  # a slow machine: the load runs on until each kind ran once
        load.stop_submitting()
        injector.join()
        load.pause_schedule()
        load_ended = time.time()
        if config.burst_jobs:  # the faults are over: what the burst measures is the admission's share alone
            load.burst(config.burst_jobs, timeout_s=config.drain_s)
        burst_ended = time.time()
        _wait_ends(load, config.drain_s)
        load.stop()
        result = _checked(config, fleet, load, injector, model, hooks, began, load_ended, memory, workdir)
        last_end = max((j.ended_at for j in result.jobs if j.ended_at), default=load_ended)
        result.figures.update(startup_s=round(startup_s, 1), drained_s=round(max(0.0, last_end - burst_ended), 1),
                              burst_s=round(burst_ended - load_ended, 1))
        return result
    finally:
        fleet.stop()
        hooks.down()
        model.stop()


def _checked(config: SoakConfig, fleet: Fleet, load: Load, injector: Injector, model: SoakModel,
             hooks: HookReceiver, began: float, load_ended: float, memory: dict[str, int], workdir: Path) -> SoakResult:
    ended = time.time()
    jobs = list(load.jobs)
    recovery(injector.faults, jobs)
    ledger = read_ledger(fleet.ledger)
    store = StateStore(fleet.url)
    try:
        found = [checks.jobs_ended(jobs)]
        found[0].violations = [f"{v}: {store_checks.where_stuck(store, j)}"
                               for v, j in zip(found[0].violations, [j for j in jobs if not j.ended_at], strict=True)]
        done = [j for j in jobs if j.ended_at]
        found.append(store_checks.counters_zero(store, jobs, timeout_s=30))
        deadline = time.monotonic() + 30  # deliveries retried after the receiver's last outage
        while (c := checks.webhooks_delivered(jobs, hooks.snapshot())).violations and time.monotonic() < deadline:
            time.sleep(0.5)
        found += [c, checks.handler_runs(ledger, fleet.kills), checks.limits_held(ledger, fleet.kills),
                  checks.budgets_held(jobs, model.snapshot()), checks.fairness(jobs, config.fair_bound_s),
                  store_checks.event_streams(store, done),
                  store_checks.outputs_once(store, done, ledger), store_checks.keys_expire(store, done)]
        states = {j.job_id: store.record(j.job_id).state for j in done if j.kind in ("event", "module")}
        found.append(checks.events_delivered(jobs, dict(load.events), states))
        found.append(checks.modules_answered(jobs, states))
        found.append(_schedule_check(store, load))
        found.append(checks.requests_accepted(model.refusals(), model.snapshot()))
        memory["after"] = int(store.redis.info("memory")["used_memory"])
    finally:
        store.redis.close()
    calls_run = sum(1 for runs in ledger.values() for r in runs if r.end is not None)
    restarts: dict[str, int] = {}
    exits: dict[str, int] = {}
    for proc in fleet.procs:
        restarts[proc.role] = restarts.get(proc.role, 0) + proc.restarts
        if proc.exits:
            exits[proc.role] = exits.get(proc.role, 0) + proc.exits
    figures = {"submit_errors": dict(load.errors), "last_errors": dict(load.last_errors), "approved": load.approved,
               "restarts": restarts,
               "exited_on_their_own": exits, "kills": len(fleet.kills)}
    return SoakResult(config, began, load_ended, ended, jobs, list(injector.faults), found, model.snapshot(),
                      calls_run, memory, figures, str(workdir))
