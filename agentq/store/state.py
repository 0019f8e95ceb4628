"""`StateStore`: a job's state machine in Redis — every step of its scripts and the reads of its keys — as one
facade over one connection.

Each state transition is one Lua script (see `lua/`), so it is atomic and costs one round trip; each is
idempotent so a redelivered task cannot write twice. Values are JSON. `scripts.py` lays out each script's keys
and arguments and reads its reply into a record of `replies.py`; the store's concerns live in their own
modules, each a mixin over `connection.StoreConnection` (the connection and key layout):

- `jobs.py`: submission (with the fleet-wide listing and its undo), rejection, cancel, finalize, job reads;
- `calls.py`: claim, commit, settle, retry, lease renewal and holding, decisions, reads of a job's calls;
- `ticks.py`: an agent job's tick steps, its composed tools, module relay's reads and writes;
- `events.py`: appending to and reading a job's event stream;
- `stats.py`: the metrics' bookkeeping of jobs as they end;
- `concurrency.py`: the jobs' concurrency keys (docs/tenants.md);
- `admission.py`: the admission of ready calls to their queues (docs/tenants.md);
- `waits.py`: wait calls, their timers, events and signals (docs/waits.md);
- `job_timers.py`: a job's own timers (its deadline, a later start);
- `copies.py`: what a continued or forked job reads of its source, threads and forks (docs/continue-and-fork.md);
- `resume.py`: resuming an ended job where it stopped (docs/resume.md).

The fleet-wide concerns that have no step in a job's scripts are parts of their own over the same connection
(`part.py`), built once by the composition root: `fleet.py` (`RedisFleet`: workers, activities, tools, the
task-signing secret, node names), `limits.py` (`RedisLimits`: the models' rate limits and context windows),
`tenants.py` (`RedisTenants`: the tenants' job limits), `fleet_stats.py` (`RedisStats`: the metrics' reads),
`webhooks.py` (`WebhookKeys`).

The runtime is written against the `Store` protocol (`base.py`); only the composition root
(`runtime/root.py`) constructs a `StateStore`.
"""

from __future__ import annotations

from agentq.store.admission import AdmissionSteps
from agentq.store.calls import CallSteps
from agentq.store.concurrency import ConcurrencySteps
from agentq.store.copies import CopySteps
from agentq.store.job_timers import JobTimerSteps
from agentq.store.jobs import JobSteps
from agentq.store.resume import ResumeSteps
from agentq.store.ticks import TickSteps
from agentq.store.waits import WaitSteps


class StateStore(CopySteps, JobSteps, CallSteps, TickSteps, ConcurrencySteps, AdmissionSteps, WaitSteps, JobTimerSteps,
                 ResumeSteps):
    """The Redis state store. Thread-safe; share one per process.

    Built as `StateStore(redis_url, cluster=..., namespace=..., clock=...)` (see `connection.StoreConnection`).
    Every public method maps Redis connection and timeout errors to `StoreUnavailableError` (see
    `store/boundary.py`), so nothing above the store handles redis-py's exceptions.
    """
