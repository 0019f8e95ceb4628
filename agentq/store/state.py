"""`StateStore`: a job's state machine in Redis — every step of its scripts and the reads of its keys — as a
composition of parts over one connection.

Each state transition is one Lua script (see `lua/`), so it is atomic and costs one round trip; each is
idempotent so a redelivered task cannot write twice. Values are JSON. `scripts.py` lays out each script's keys
and arguments and reads its reply into a record of `replies.py`. Each concern is a part of its own
(`part.StorePart`: it takes the store's one `connection.StoreConnection`, the client, the key layout, the loaded
steps and the clock), none inheriting another; a part that needs another concern is given it:

- `jobs.py` (`RedisJobs`): submission (with the fleet-wide listing and its undo), rejection, cancel, finalize,
  budgets and usage, job reads;
- `calls.py` (`RedisCalls`): claim, commit, settle, retry, lease renewal and holding, decisions, a job's calls;
- `ticks.py` (`RedisTicks`): an agent job's tick steps, its composed tools, module relay's reads and writes;
- `events.py` (`RedisEvents`): appending to and reading a job's event stream;
- `concurrency.py` (`RedisConcurrency`): the jobs' concurrency keys (docs/tenants.md);
- `admission.py` (`RedisAdmission`): the admission of ready calls to their queues (docs/tenants.md);
- `waits.py` (`RedisWaits`): wait calls, their timers, events and signals (docs/waits.md);
- `job_timers.py` (`RedisJobTimers`): a job's own timers (its deadline, a later start);
- `copies.py` (`RedisCopies`): what a continued or forked job reads of its source, threads and forks
  (docs/continue-and-fork.md); given the `jobs` part (a `JobReader`) to tell an expired source from a missing one;
- `resume.py` (`RedisResumes`): resuming an ended job where it stopped (docs/resume.md);
- `active_jobs.py` (`RedisActiveJobs`): what the check after a restart of the store reads of the active jobs;
- `stats.py` (`JobCounts`): the metrics' bookkeeping of jobs as they end, a collaborator given to the parts that
  end or hold jobs (`jobs`, `calls`, `ticks`, `job_timers`), not a base of theirs.

`StateStore` is the connection (its base besides the contract it declares: the client, the key layout, `keys()`,
`ping`, `close`) holding the parts as attributes (`store.jobs`, `store.calls`, ...). The composition root
(`runtime/root.py`) hands a part to an engine or runtime part whose constructor takes that part's contract alone
(the lease keeper its `LeaseStore`, the budget gate its `BudgetStore`, ...). The parts of agentq that take several
contracts at once (`Store`, or a protocol of a few, e.g. the call intake's `IntakeStore`) still take the store: its
other members forward, each to one method of one part (`Forward`, typed as that method, no `__getattr__`), so
callers, tests and benchmarks keep `store.claim(...)` (the choice: handing each of those parts the several parts it
uses would redirect ~120 call sites and their tests' rigs at once; the forwards keep that for later, one caller at a
time). A forward adds no behaviour, and `StateStore` declares the `Store` contract, so mypy checks every forward
against its contract's signature and a contract member with no forward is an abstract member (`StateStore()` would
not type-check).

The fleet-wide concerns that have no step in a job's scripts are parts over the same connection too, built beside
this one by the root: `fleet.py` (`RedisFleet`), `limits.py` (`RedisLimits`), `tenants.py` (`RedisTenants`),
`fleet_stats.py` (`RedisStats`), `webhooks.py` (`WebhookKeys`); and `companions.py` builds the store's other parts
over it (config, rollout rules, schedules, the batch queue, the client's reads).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from agentq.store.active_jobs import RedisActiveJobs
from agentq.store.admission import RedisAdmission
from agentq.store.base import Store
from agentq.store.calls import RedisCalls
from agentq.store.concurrency import RedisConcurrency
from agentq.store.connect import DEFAULT_MAX_CONNECTIONS
from agentq.store.connection import StoreConnection
from agentq.store.copies import RedisCopies
from agentq.store.events import RedisEvents
from agentq.store.forward import Forward
from agentq.store.job_timers import RedisJobTimers
from agentq.store.jobs import RedisJobs
from agentq.store.resume import RedisResumes
from agentq.store.stats import JobCounts
from agentq.store.ticks import RedisTicks
from agentq.store.waits import RedisWaits


class StateStore(StoreConnection, Store):
    """The Redis state store: its connection, and the job-step parts over it. Thread-safe; share one per process.

    Built as `StateStore(redis_url, cluster=..., namespace=..., clock=...)` (see `connection.StoreConnection`).
    Every public method of every part maps Redis connection and timeout errors to `StoreUnavailableError` (see
    `store/boundary.py`), so nothing above the store handles redis-py's exceptions.
    """

    def __init__(self, redis_url: str, *, cluster: bool = False, client: Any = None, namespace: str = "agentq",
                 max_connections: int = DEFAULT_MAX_CONNECTIONS, clock: Callable[[], float] = time.time):
        super().__init__(redis_url, cluster=cluster, client=client, namespace=namespace,
                         max_connections=max_connections, clock=clock)
        self.counts = JobCounts(self)
        self.jobs = RedisJobs(self, self.counts)
        self.copies = RedisCopies(self, self.jobs)
        self.calls = RedisCalls(self, self.counts)
        self.ticks = RedisTicks(self, self.counts)
        self.events = RedisEvents(self)
        self.concurrency = RedisConcurrency(self)
        self.admission = RedisAdmission(self)
        self.waits = RedisWaits(self)
        self.job_timers = RedisJobTimers(self, self.counts)
        self.resumes = RedisResumes(self)
        self.active_jobs = RedisActiveJobs(self)

    # The forwards (`forward.py`): each member below is one method of one part, for the callers that take several
    # contracts at once.
    # jobs: RedisJobs
    create_job = Forward("jobs", RedisJobs.create_job)
    record_rejection = Forward("jobs", RedisJobs.record_rejection)
    finalize = Forward("jobs", RedisJobs.finalize)
    cancel = Forward("jobs", RedisJobs.cancel)
    save_record = Forward("jobs", RedisJobs.save_record)
    reserve_budget = Forward("jobs", RedisJobs.reserve_budget)
    settle_budget = Forward("jobs", RedisJobs.settle_budget)
    add_usage = Forward("jobs", RedisJobs.add_usage)
    adopt_traceparent = Forward("jobs", RedisJobs.adopt_traceparent)
    job_info = Forward("jobs", RedisJobs.job_info)
    job_status = Forward("jobs", RedisJobs.job_status)
    wait_finished = Forward("jobs", RedisJobs.wait_finished)
    wait_record = Forward("jobs", RedisJobs.wait_record)
    read_log = Forward("jobs", RedisJobs.read_log)
    record = Forward("jobs", RedisJobs.record)
    finish_inputs = Forward("jobs", RedisJobs.finish_inputs)
    missing = Forward("jobs", RedisJobs.missing)
    recent_jobs = Forward("jobs", RedisJobs.recent_jobs)
    # copies: RedisCopies
    copy_source = Forward("copies", RedisCopies.copy_source)
    list_copy = Forward("copies", RedisCopies.list_copy)
    submitted_job = Forward("copies", RedisCopies.submitted_job)
    thread_jobs = Forward("copies", RedisCopies.thread_jobs)
    forks_of = Forward("copies", RedisCopies.forks_of)
    # calls: RedisCalls
    claim = Forward("calls", RedisCalls.claim)
    commit = Forward("calls", RedisCalls.commit)
    settle = Forward("calls", RedisCalls.settle)
    release_for_retry = Forward("calls", RedisCalls.release_for_retry)
    unclaim = Forward("calls", RedisCalls.unclaim)
    renew_leases = Forward("calls", RedisCalls.renew_leases)
    renew_all = Forward("calls", RedisCalls.renew_all)
    hold_lease = Forward("calls", RedisCalls.hold_lease)
    decide = Forward("calls", RedisCalls.decide)
    call_records = Forward("calls", RedisCalls.call_records)
    call_statuses = Forward("calls", RedisCalls.call_statuses)
    dependents = Forward("calls", RedisCalls.dependents)
    call_table = Forward("calls", RedisCalls.call_table)
    # ticks: RedisTicks
    begin_tick = Forward("ticks", RedisTicks.begin_tick)
    end_ticking = Forward("ticks", RedisTicks.end_ticking)
    release_tick = Forward("ticks", RedisTicks.release_tick)
    agent_inputs = Forward("ticks", RedisTicks.agent_inputs)
    job_tools = Forward("ticks", RedisTicks.job_tools)
    set_job_tools = Forward("ticks", RedisTicks.set_job_tools)
    add_calls = Forward("ticks", RedisTicks.add_calls)
    end_tick = Forward("ticks", RedisTicks.end_tick)
    relay_cursor = Forward("ticks", RedisTicks.relay_cursor)
    write_relayed = Forward("ticks", RedisTicks.write_relayed)
    # events: RedisEvents
    add_events = Forward("events", RedisEvents.add_events)
    read_events = Forward("events", RedisEvents.read_events)
    # concurrency: RedisConcurrency
    admit_concurrency = Forward("concurrency", RedisConcurrency.admit_concurrency)
    sweep_concurrency = Forward("concurrency", RedisConcurrency.sweep_concurrency)
    release_concurrency = Forward("concurrency", RedisConcurrency.release_concurrency)
    start_waiting = Forward("concurrency", RedisConcurrency.start_waiting)
    # admission: RedisAdmission
    admit_calls = Forward("admission", RedisAdmission.admit_calls)
    admitted_before = Forward("admission", RedisAdmission.admitted_before)
    touch_admitted = Forward("admission", RedisAdmission.touch_admitted)
    parked_queues = Forward("admission", RedisAdmission.parked_queues)
    admission_counts = Forward("admission", RedisAdmission.admission_counts)
    take_admission_sweep = Forward("admission", RedisAdmission.take_admission_sweep)
    swap_fleet_seen = Forward("admission", RedisAdmission.swap_fleet_seen)
    admission_runs = Forward("admission", RedisAdmission.admission_runs)
    admission_members = Forward("admission", RedisAdmission.admission_members)
    leases_lapsed = Forward("admission", RedisAdmission.leases_lapsed)
    note_admission_run = Forward("admission", RedisAdmission.note_admission_run)
    broker_holds = Forward("admission", RedisAdmission.broker_holds)
    # waits: RedisWaits
    open_wait = Forward("waits", RedisWaits.open_wait)
    take_wait = Forward("waits", RedisWaits.take_wait)
    wake_wait = Forward("waits", RedisWaits.wake_wait)
    send_signal = Forward("waits", RedisWaits.send_signal)
    event_waiters = Forward("waits", RedisWaits.event_waiters)
    first_sight = Forward("waits", RedisWaits.first_sight)
    take_due_timers = Forward("waits", RedisWaits.take_due_timers)
    retime_wait = Forward("waits", RedisWaits.retime_wait)
    close_wait = Forward("waits", RedisWaits.close_wait)
    drop_event_wait = Forward("waits", RedisWaits.drop_event_wait)
    # job_timers: RedisJobTimers
    set_job_timer = Forward("job_timers", RedisJobTimers.set_job_timer)
    set_start_timeouts = Forward("job_timers", RedisJobTimers.set_start_timeouts)
    take_untaken = Forward("job_timers", RedisJobTimers.take_untaken)
    drop_job_timer = Forward("job_timers", RedisJobTimers.drop_job_timer)
    start_scheduled = Forward("job_timers", RedisJobTimers.start_scheduled)
    end_by_deadline = Forward("job_timers", RedisJobTimers.end_by_deadline)
    # resumes: RedisResumes
    resume_job = Forward("resumes", RedisResumes.resume_job)
    # active_jobs: RedisActiveJobs
    active_job_heads = Forward("active_jobs", RedisActiveJobs.active_job_heads)
