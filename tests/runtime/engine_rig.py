"""A whole engine on a `StateStore` (the session's private Redis), without Celery: the job service, the executor (with
its agent loop and delegation) and a dispatcher that queues what it is asked to send; `Engine.run` delivers the queue in
order, as the Celery tasks would, calling the same entry points (`Executor.run_call`, `Executor.tick`).

`ScriptedModel` stands in for the LLM provider (`agentq.llm.base.LLM`), as pydantic-ai's `FunctionModel` does: a
function of the request gives each answer's solution (or raises the provider's error), whose calls are reported
through `on_call` as a streamed answer reports them.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentq.engine.budget import BudgetGate
from agentq.engine.executor import Executor, Outcome
from agentq.engine.hooks import Hook, Hooks
from agentq.engine.limits import ModelLimiter
from agentq.engine.modules import ModuleLibrary
from agentq.engine.routing import Routing
from agentq.engine.signing import TaskSigner
from agentq.llm.base import LLMAnswer, LLMRequest, OnCall, Usage
from agentq.llm.prices import PricedLLM, PriceTable
from agentq.protocol.activities import ActivityRegistry
from agentq.protocol.digests import record_digest
from agentq.protocol.limits import ModelLimits
from agentq.protocol.records import CallRecord
from agentq.protocol.tools import ToolRegistry
from agentq.runtime.service import JobService
from agentq.settings import Settings
from agentq.store.fleet import RedisFleet
from agentq.store.limits import RedisLimits
from agentq.store.state import StateStore
from agentq.store.tenants import RedisTenants
from tests.runtime.conftest import tool_schema

ANSWER_USAGE = Usage(requests=1, input_tokens=100, output_tokens=20)


class ScriptedModel:
    """An LLM whose answers a function of the request gives: a solution (any JSON), or an exception to raise."""

    def __init__(self, answer: Callable[[LLMRequest], Any]):
        self.answer = answer
        self.requests: list[LLMRequest] = []
        self._lock = threading.Lock()

    @classmethod
    def replies(cls, *solutions: Any) -> ScriptedModel:
        """Answers the requests in order with `solutions`."""
        queue = deque(solutions)
        return cls(lambda request: queue.popleft())

    def solve(self, request: LLMRequest, *, on_call: OnCall | None = None) -> LLMAnswer:
        with self._lock:
            self.requests.append(request)
            n = len(self.requests)
        solution = self.answer(request)
        if isinstance(solution, BaseException):
            raise solution
        calls = solution.get("calls") if isinstance(solution, dict) else None
        if on_call is not None and isinstance(calls, list):
            for i, call in enumerate(calls):
                if isinstance(call, dict):
                    on_call(i, call)
        return LLMAnswer(solution=solution, raw=json.dumps(solution), tool_use_id=f"toolu_{n:04d}",
                         usage=ANSWER_USAGE, stop_reason="tool_use")


@dataclass(frozen=True)
class Task:
    """One queued task: a call's delivery, or an agent tick (`n`: the job's request number)."""

    job_id: str
    record: CallRecord | None = None
    n: int = 0


class QueueDispatcher:
    """The dispatcher: what it is asked to send goes on one queue, in order (revocations are kept)."""

    def __init__(self) -> None:
        self.queue: deque[Task] = deque()
        self.sent: list[Task] = []
        self.revoked: list[tuple[str, list[str]]] = []
        self._lock = threading.Lock()

    def __call__(self, job_id: str, records: list[CallRecord]) -> None:
        with self._lock:
            for record in records:
                self._put(Task(job_id, record))

    def tick(self, job_id: str, n: int = 0) -> None:
        with self._lock:
            self._put(Task(job_id, n=n))

    def ended(self, job_id: str, call_ids: list[str], released: list[CallRecord]) -> None:
        self(job_id, released)  # no admission here: every released call is sent

    def revoke(self, job_id: str, call_ids: list[str], run: int = 1) -> None:
        self.revoked.append((job_id, list(call_ids)))

    def _put(self, task: Task) -> None:
        self.queue.append(task)
        self.sent.append(task)


class Engines(list["Engine"]):
    """The engines a test made (closed at its end), each on `store` unless given its own."""

    def __init__(self, store: StateStore):
        super().__init__()
        self.store = store


class Engine:
    """The service and the executor of one process on one `StateStore`, fed by a queue."""

    def __init__(self, store: StateStore, *, llm: Any = None, modules: Any = None,
                 settings: Settings | None = None, signed: bool = False, prices: PriceTable | None = None,
                 limits: Mapping[str, ModelLimits] | None = None):
        """`prices`: the model's answers are priced with them and every request goes through the budget's gate,
        as `runtime/root.py` wires a process; `limits`: every request goes through the rate limiter's gate."""
        self.store = store
        self.settings = settings if settings is not None else Settings()
        self.dispatcher = QueueDispatcher()
        self.tools, self.activities = ToolRegistry(), ActivityRegistry()
        routing = Routing.from_settings(self.settings)
        self.service = JobService(self.store, self.dispatcher, settings=self.settings, routing=routing,
                                  tools=self.tools, activities=self.activities, local_activities_are_live=True,
                                  module_loader=getattr(modules, "loader", None), fleet=RedisFleet(store),
                                  tenants=RedisTenants(store))
        self.signer = TaskSigner(RedisFleet(store).task_signing_key) if signed else None
        gates: list[Hook] = [BudgetGate(self.store, prices)] if prices is not None else []
        if limits is not None:
            gates.append(ModelLimiter(RedisLimits(store), limits))
        hooks = Hooks(gates) if gates else None
        self.executor = Executor(self.store, self.activities, self.dispatcher,
                                 llm=PricedLLM(llm, prices) if prices is not None and llm is not None else llm,
                                 routing=routing,
                                 settings=self.settings.model_copy(update={"lease_s": 30.0, "default_timeout_s": 5.0}),
                                 known_activities=self.service.known_activities_for, modules=modules,
                                 submit_child=self.service.submit_child, signer=self.signer, hooks=hooks,
                                 limits=RedisLimits(store))
        self.runs: Counter[str] = Counter()
        self.outcomes: list[tuple[str, Outcome]] = []
        self.waits: list[float] = []  # what tick tasks asked to wait before their next attempt
        self.wait_ends: list[float] = []  # when each of those waits ends (`time.monotonic()`)

    def activity(self, name: str, fn: Callable[..., Any], params: dict | None = None, *,
                 required: tuple[str, ...] = (), **options: Any) -> None:
        """Register a tool (its `required` parameters) and the activity that serves it (its runs counted; `fn`
        takes the call)."""
        schema = tool_schema(name, params if params is not None else {})
        self.tools.register(name, {**schema, "required": ["_tool", *required]} if required else schema)

        def counted(call: dict) -> Any:
            self.runs[name] += 1
            return fn(call)

        self.activities.register(name, counted, **options)

    def tool(self, name: str, params: dict | None = None, **meta: Any) -> None:
        self.tools.register(name, tool_schema(name, params, **meta))

    def run(self, limit: int = 200, *, wait: bool = False) -> list[str]:
        """Deliver the queued tasks in order until none is left (a retry goes to the back at once; with `wait`, once
        the wait it asked for passed, as the broker brings it back); the calls' outcomes."""
        statuses: list[str] = []
        while self.dispatcher.queue and limit:
            limit -= 1
            task = self.dispatcher.queue.popleft()
            if task.record is None:
                delay = self.executor.tick(task.job_id, task.n)
                if delay is not None:
                    self.waits.append(delay)
                    self.wait_ends.append(time.monotonic() + delay)
                    self._later(task, delay if wait else 0.0)
                continue
            outcome = self._deliver(task)
            statuses.append(outcome.status)
            if statuses[-1] == "retry":
                self._later(task, (outcome.retry_in or 0.0) if wait else 0.0)
        return statuses

    def _later(self, task: Task, delay: float) -> None:
        """A task that retries: at the back of the queue, once `delay` seconds passed for the models' rate limits."""
        if delay > 0:
            limits_age(self.store, delay)
        self.dispatcher.queue.append(task)

    def _deliver(self, task: Task) -> Outcome:
        record = task.record
        assert record is not None
        signature = (self.signer.sign(task.job_id, record.id, record_digest(record))
                     if self.signer is not None else None)
        outcome = self.executor.run_call(task.job_id, record.id, record=record, signature=signature)
        self.outcomes.append((record.tool, outcome))
        return outcome

    def events(self, job_id: str) -> list[dict]:
        return [e for _, e in self.store.read_events(job_id)]

    def names(self, job_id: str, among: Iterable[str] | None = None) -> list[str]:
        wanted = set(among) if among is not None else None
        return [e["event"] for e in self.events(job_id) if wanted is None or e["event"] in wanted]

    def close(self) -> None:
        self.executor.leases.stop()


def limits_age(store: StateStore, seconds: float) -> None:
    """Let `seconds` pass for every model's rate limits at once, without waiting for them: the limits' steps read
    Redis's clock (`_buckets.lua`), and every moment they keep is an absolute ms (a bucket's `<kind>.at`, a pause's
    `paused_until`, a ticket's score), so moving each of them `seconds` earlier is what those seconds passing does."""
    shift = round(seconds * 1000)
    for key in store.redis.scan_iter(match=f"{store.namespace}:llm:*"):
        if store.redis.type(key) == "zset":
            store.redis.zadd(key, {place: at - shift for place, at in store.redis.zrange(key, 0, -1, withscores=True)})
            continue
        moments = {field: float(value) - shift for field, value in store.redis.hgetall(key).items()
                   if field.endswith(".at") or field == "paused_until"}
        if moments:
            store.redis.hset(key, mapping=moments)


RESEARCHER = {"context": [{"type": "text", "role": "system", "text": "You are the Researcher."}],
              "tools": ["weather"],
              "output": {"type": "object", "properties": {"facts": {"type": "array"}}, "required": ["facts"]}}


def researcher_library(folder: Path) -> ModuleLibrary:
    """A module library holding one module, `researcher` (the weather tool, an output of facts)."""
    (folder / "researcher.json").write_text(json.dumps(RESEARCHER), encoding="utf-8")
    return ModuleLibrary([folder])
