"""`RolloutStats`: the hook that counts every ended call of a tool with a rollout rule into its route's figures
(docs/rollouts.md, `store/rollouts.py`), with the cost of the model requests it made (a call for the model).

The executor tells hooks only of attempts whose outcome took effect, so each call counts once, also when its
task was delivered twice. A call's model requests are made in the process running it, between `before_call` and
`after_call`: their cost is summed here by the request's place (`<job>/<call>`) until the attempt ends.
"""

from __future__ import annotations

import threading
from typing import Protocol

from agentq.engine.hooks import CallEnded, Hook, RequestEnded
from agentq.protocol.records import CallRecord

MAX_OPEN = 10_000  # running routed attempts whose cost this process sums at most (the oldest go first)


class RouteCounter(Protocol):
    """What keeps the figures (`store.rollouts.RolloutStore`)."""

    def call_ended(self, tool: str, route: str, status: str, seconds: float, cost_nanousd: int | None) -> None: ...


class RolloutStats(Hook):
    """Counts routed calls into `counter`."""

    def __init__(self, counter: RouteCounter):
        self.counter = counter
        self._costs: dict[str, int | None] = {}  # place of a running routed call -> its requests' cost so far
        self._lock = threading.Lock()

    def before_call(self, job_id: str, record: CallRecord, attempt: int) -> None:
        if record.route is not None:
            with self._lock:
                while len(self._costs) >= MAX_OPEN:  # attempts that lost to a duplicate are never told to end
                    del self._costs[next(iter(self._costs))]
                self._costs[f"{job_id}/{record.id}"] = 0

    def after_request(self, ended: RequestEnded) -> None:
        place = ended.asked.place.removesuffix("/again")
        usage = ended.answer.usage if ended.answer is not None else None
        with self._lock:
            if place not in self._costs or usage is None:
                return
            so_far = self._costs[place]
            self._costs[place] = None if so_far is None or usage.cost_nanousd is None \
                else so_far + usage.cost_nanousd

    def after_call(self, ended: CallEnded) -> None:
        record = ended.record
        if record.route is None:
            return
        with self._lock:
            cost = self._costs.pop(f"{ended.job_id}/{record.id}", 0)
        self.counter.call_ended(record.tool, record.route, ended.status, ended.seconds, cost)
