"""Every Redis key agentq uses, in one place.

A job's keys share the hash tag `{<job_id>}` so the multi-key Lua steps touching one job map to one
Redis Cluster slot. Fleet-wide keys (workers, published tools, the metrics' job counts) live outside any job
and never appear in a job's script on a cluster: they are written by separate commands after it (on a single
Redis, submit.lua adds a new job to the fleet's listings itself, declared among its keys).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cached_property

from agentq.errors import InvalidJobIdError
from agentq.protocol.ids import job_id_problem
from agentq.protocol.records import TICK

# The fields of a job's `spec` hash: large and rarely read, so they stay out of the job hash that every advance,
# tick and commit reads whole. `submitted`: the job as submitted (an Idempotency-Key replay compares it);
# `solution`: the composed solution schema; `registered`: an agent job's tools as registered (its ticks compose
# from them). A job written before the spec key existed keeps them in its job hash: readers fall back to it.
SPEC_FIELDS = ("submitted", "solution", "registered")


#: the names of `JobKeys.all`, in the order submit.lua takes them
_ALL = ("job", "log", "calls", "status", "waiting", "attempts", "tools", "events", "dependents", "exchanges",
        "approval", "lost", "spec")


@dataclass(frozen=True)
class JobKeys:
    """The keys of one job, in the order the Lua scripts expect them (see `all`). Each key's name is built on its
    first use and kept (a store keeps the keys of the jobs it works on, see `StoreConnection.keys`).

    The job id is checked here too (docs/architecture.md#runtime--the-only-place-that-knows-celery), so no code path can
    build a key from an id that would change the key's hash slot or meaning: `InvalidJobIdError` before any key
    exists."""

    namespace: str
    job_id: str

    def __post_init__(self) -> None:
        problem = job_id_problem(self.job_id)
        if problem is not None:
            raise InvalidJobIdError(problem)

    @cached_property
    def _prefix(self) -> str:
        return f"{self.namespace}:{{{self.job_id}}}"

    @cached_property
    def job(self) -> str:  # hash: status, counters, timestamps, options, output schema, parent, final record
        return f"{self._prefix}:job"

    @cached_property
    def spec(self) -> str:  # hash: the job's cold spec, written once at submission (see `SPEC_FIELDS`)
        return f"{self._prefix}:spec"

    @cached_property
    def log(self) -> str:  # list: the context log, JSON messages, append-only
        return f"{self._prefix}:log"

    @cached_property
    def calls(self) -> str:  # hash: call id -> call record JSON
        return f"{self._prefix}:calls"

    @cached_property
    def dependents(self) -> str:  # hash: call id -> JSON list of the calls that wait on it
        return f"{self._prefix}:dependents"

    @cached_property
    def status(self) -> str:  # hash: call id -> status
        return f"{self._prefix}:status"

    @cached_property
    def waiting(self) -> str:  # hash: call id -> unfinished calls it still waits on
        return f"{self._prefix}:waiting"

    @cached_property
    def attempts(self) -> str:  # hash: call id -> attempts started
        return f"{self._prefix}:attempts"

    @cached_property
    def lost(self) -> str:  # hash: call id -> attempts lost (their process died before they ended)
        return f"{self._prefix}:lost"

    @cached_property
    def tools(self) -> str:  # hash: tool name -> the job's composed tool schema JSON
        return f"{self._prefix}:tools"

    @cached_property
    def events(self) -> str:  # stream: event envelopes for front ends and clients
        return f"{self._prefix}:events"

    @cached_property
    def exchanges(self) -> str:  # list: an agent job's model requests and answers (`Exchange` JSON), oldest first
        return f"{self._prefix}:exchanges"

    @cached_property
    def approval(self) -> str:  # hash: call id -> 1 for the calls a reviewer must approve (docs/protocol.md#approvals)
        return f"{self._prefix}:approval"

    @cached_property
    def done(self) -> str:  # list: the final status, pushed once when the job ends; waiters BLMOVE it onto itself
        return f"{self._prefix}:done"

    @cached_property
    def budget(self) -> str:  # hash: what the job and its module child jobs spent and hold in flight (budget.lua)
        return f"{self._prefix}:budget"

    @cached_property
    def leases(self) -> str:  # key prefix; one string key per running call, see `lease`
        return f"{self._prefix}:lease:"

    def lease(self, call_id: str) -> str:  # string: the token of the attempt running the call
        return f"{self.leases}{call_id}"

    @cached_property
    def tick_lease(self) -> str:  # string: the token of the agent tick in flight
        return self.lease(TICK)

    @property
    def deliveries(self) -> str:  # hash: webhook delivery id -> its state JSON, `<id>:body` -> the body it sends
        return f"{self._prefix}:deliveries"

    @property
    def webhook(self) -> str:  # hash: `cursor`, the job's last event entry its webhook's watcher handled
        return f"{self._prefix}:webhook"

    @cached_property
    def waits(self) -> str:  # hash: call id -> its open wait JSON, `<call>:woken` -> what ended it (docs/waits.md)
        return f"{self._prefix}:waits"

    def signals(self, name: str) -> str:  # list: the signals named `name` no wait has taken yet, oldest first
        return f"{self._prefix}:signals:{name}"

    @staticmethod
    def job_of(key: str) -> str:
        """The job id of one of a job's keys (inside its hash tag: a job id has no braces)."""
        return key[key.rindex("{") + 1:key.rindex("}")]

    @property
    def all(self) -> tuple[str, ...]:
        """Keys that live exactly as long as the job (leases expire on their own): each named as its property names
        it, built here in one go (a submission's script takes them all; no cached property's lock per key)."""
        prefix = f"{self.namespace}:{{{self.job_id}}}"
        return tuple([f"{prefix}:{name}" for name in _ALL])


@dataclass(frozen=True)
class FleetKeys:
    """Keys shared by the whole fleet."""

    namespace: str

    @property
    def timers(self) -> str:  # zset: `<job> <call>` of each open wait -> its due time (unix ms; taken: + a claim)
        return f"{self.namespace}:{{timers}}:due"

    def event_shapes(self, tenant: str, event: str) -> str:  # set: the match shapes of a tenant's waits for `event`
        return f"{self.namespace}:{{waits:{tenant}}}:shapes:{event}"

    def event_waits(self, tenant: str, event: str, digest: str) -> str:  # set: `<job> <call>` of the open waits
        return f"{self.namespace}:{{waits:{tenant}}}:event:{event}:{digest}"  # whose match has that digest

    def event_seen(self, tenant: str, event_id: str) -> str:  # string: an event id sent within a day (dedup)
        return f"{self.namespace}:{{waits:{tenant}}}:seen:{event_id}"

    @property
    def workers(self) -> str:  # zset: worker id -> heartbeat expiry (unix seconds)
        return f"{self.namespace}:workers"

    def worker(self, worker_id: str) -> str:  # string: the worker's announcement JSON, with a TTL
        return f"{self.namespace}:worker:{worker_id}"

    def node(self, name: str) -> str:  # string: the process holding Celery node name `name`, with a TTL (nodes.py)
        return f"{self.namespace}:node:{name}"

    @property
    def activities(self) -> str:  # hash: activity name -> its last announcement JSON plus `last_seen` (unix s)
        return f"{self.namespace}:activities"

    @property
    def tools(self) -> str:  # hash: tool name -> published schema JSON
        return f"{self.namespace}:tools"

    @property
    def tool_conflicts(self) -> str:  # hash: tool name -> description of a conflicting publication
        return f"{self.namespace}:tools:conflicts"

    @property
    def jobs(self) -> str:  # zset: job id -> created_at (unix seconds), for listings
        return f"{self.namespace}:jobs"

    def tenant_active(self, tenant: str) -> str:  # zset: job id -> its expiry (s), a limited tenant's active jobs
        return f"{self.namespace}:tenant:{{{tenant}}}:active"

    def tenant_rate(self, tenant: str) -> str:  # hash: `tat` (ms), a limited tenant's rate of jobs (GCRA)
        return f"{self.namespace}:tenant:{{{tenant}}}:rate"

    def concurrency(self, tenant: str) -> str:  # hash: job id -> its concurrency keys JSON (concurrency.lua)
        return f"{self.namespace}:conc:{{{tenant}}}:jobs"

    @property
    def concurrency_tenants(self) -> str:  # set: tenants that had jobs waiting for concurrency keys (the sweep's)
        return f"{self.namespace}:conc:tenants"

    def concurrency_prefix(self, tenant: str) -> str:  # key prefix: `h:<key>` holders, `w:<key>` waiters, `seq`
        return f"{self.namespace}:conc:{{{tenant}}}:"

    def admission(self, part: str) -> str:  # the admission of calls (store/admission.py); one hash tag
        return f"{self.namespace}:{{admission}}:{part}"

    def tenant_jobs(self, tenant: str) -> str:  # zset: job id -> created_at, the listing of one tenant's jobs
        return f"{self.namespace}:jobs:tenant:{tenant}"

    def thread(self, thread: str) -> str:  # zset: the jobs of a thread (its first job's id) -> their order
        return f"{self.namespace}:thread:{thread}"

    def forks(self, job_id: str) -> str:  # zset: the forks of a job -> when they were made (unix s)
        return f"{self.namespace}:forks:{job_id}"

    @property
    def active_jobs(self) -> str:  # zset: job id -> its expiry (unix seconds), while the job is active (metrics)
        return f"{self.namespace}:jobs:active"

    @property
    def approval_jobs(self) -> str:  # zset: job id -> when a step last may have held a call of it for a reviewer
        return f"{self.namespace}:jobs:approvals"

    @property
    def task_key(self) -> str:  # string: the secret that signs call tasks (see `RedisFleet.task_signing_key`)
        return f"{self.namespace}:taskkey"

    def llm(self, model: str) -> str:  # hash: the model's rate-limit buckets and pause (llm_take.lua, _buckets.lua)
        return f"{self.namespace}:llm:{{{_model_tag(model)}}}"

    @property
    def llm_windows(self) -> str:  # hash: model -> the context window a refusal taught (agentq's estimated tokens)
        return f"{self.namespace}:llm:windows"

    def llm_tickets(self, model: str) -> str:  # zset: place of a deferred request -> ms from which it may be sent
        return f"{self.namespace}:llm:{{{_model_tag(model)}}}:tickets"

    @property
    def webhook_jobs(self) -> str:  # zset: job id with a webhook -> when its watcher last looked at it (ms)
        return f"{self.namespace}:webhooks:jobs"

    @property
    def webhook_due(self) -> str:  # zset: "<job id> <delivery id>" -> when its next attempt is due (ms)
        return f"{self.namespace}:webhooks:due"

    @property
    def webhook_scan(self) -> str:  # string: the process looking for new webhook events, for one poll
        return f"{self.namespace}:webhooks:scan"

    @property
    def job_totals(self) -> str:  # hash: final status, and `<status>:<tenant>` -> jobs that ended so (metrics)
        return f"{self.namespace}:stats:jobs"

    @property
    def config(self) -> str:  # hash: the fleet's shared settings, name -> {"version", "value", "set_at", "source"}
        return f"{self.namespace}:config"

    # rollouts (docs/rollouts.md, store/rollouts.py): one hash tag, so the report reads rules and figures in one slot
    @property
    def rollout_rules(self) -> str:  # hash: tool -> its rollout rule JSON
        return f"{self.namespace}:{{rollouts}}:rules"

    @property
    def rollout_stats(self) -> str:  # hash: "<tool>|<route>|<figure>" -> count (calls, done, failed, cost, b<bucket>)
        return f"{self.namespace}:{{rollouts}}:stats"

    # the batch lane (engine/batch.py): one hash tag, so its pipelines stay in one Redis Cluster slot
    @property
    def batch_queue(self) -> str:  # zset: custom_id of a request waiting for its batch -> when it came (ms)
        return f"{self.namespace}:{{batch}}:queue"

    def batch_request(self, custom_id: str) -> str:  # hash: a batch-lane request (place, job, params, batch, result)
        return f"{self.namespace}:{{batch}}:req:{custom_id}"

    @property
    def batch_open(self) -> str:  # set: ids of the batches sent and not yet ended
        return f"{self.namespace}:{{batch}}:open"

    def batch_members(self, batch_id: str) -> str:  # set: the custom_ids a sent batch holds
        return f"{self.namespace}:{{batch}}:members:{batch_id}"

    @property
    def batch_lock(self) -> str:  # string: the dispatcher running the lane's round (flush, poll), with a TTL
        return f"{self.namespace}:{{batch}}:lock"

    def schedules(self, part: str) -> str:  # the schedules (store/schedules.py): `defs`, `state`, `due`, `lease`
        return f"{self.namespace}:{{schedules}}:{part}"


_PLAIN_MODEL = re.compile(r"^[A-Za-z0-9._:@-]{1,128}$")


def _model_tag(model: str) -> str:
    """A model's name as its keys' hash tag (one slot per model): as it is when plain, else its SHA-1."""
    return model if _PLAIN_MODEL.match(model) else "sha1-" + hashlib.sha1(model.encode()).hexdigest()
