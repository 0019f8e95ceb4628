"""A task handed back while the store is down, where the broker is the store's own Redis: when its retry cannot be
published (the server down, or loading its data after a restart), Celery would reject the task without requeueing
it and its call or tick would be lost. The retry is published again until it goes through, and a task whose retry
never could be is rejected with requeue, left to the broker. (The soak, `benchmarks/soak.py`, restarts Redis
under load with real processes: a tick lost this way left its agent job running for good.)"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from celery.exceptions import Reject

from agentq.errors import StoreUnavailableError
from agentq.runtime import app

pytestmark = pytest.mark.timeout(20)


class Task:
    """A bound task whose `retry` cannot publish its message the first `refusals` times, as Celery's own
    `Task.retry` raises `Reject(requeue=False)` when `apply_async` fails."""

    def __init__(self, refusals: int):
        self.request = SimpleNamespace(retries=0, id="task-1")
        self.name = "agentq.engine.tick"
        self.refusals = refusals
        self.asked = 0

    def retry(self, **options: Any) -> str:
        self.asked += 1
        if self.asked <= self.refusals:
            raise Reject(ConnectionError("Redis is loading the dataset in memory"), requeue=False)
        return "published"


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    slept: list[float] = []
    monkeypatch.setattr(app.time, "sleep", slept.append)
    return slept


def test_a_retry_that_cannot_be_published_is_published_again_until_it_goes_through(waits: list[float]):
    task = Task(refusals=3)
    assert app._store_retry(task, StoreUnavailableError("down")) == "published"
    assert task.asked == 4 and waits == [1.0, 1.0, 1.0]


def test_a_retry_never_published_rejects_the_task_with_requeue(waits: list[float], monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(app, "RETRY_PUBLISH_S", 0.0)
    outcome = app._store_retry(Task(refusals=100), StoreUnavailableError("down"))
    assert isinstance(outcome, Reject) and outcome.requeue is True


def test_a_calls_own_retry_that_cannot_be_published_is_published_again(waits: list[float]):
    """A call's retry (released for its next attempt, or finding another attempt's lease: the soak's seed 109 left
    such a call `running` with no task anywhere) goes the same way: Celery's plain `task.retry` dropped the task."""
    task = Task(refusals=2)
    assert app._published_retry(task, 0.1, argsrepr="[]", kwargsrepr="{}") == "published"
    assert task.asked == 3 and waits == [1.0, 1.0]
