"""Riding out an outage of the state store.

A worker's task must never be acknowledged as done while the state store could not record what it did:
with the broker on another server, the broker stays reachable and would otherwise take the failed task as
finished, and its call would stay `ready` forever. So every store step a worker takes (`PatientStore`) is
tried again while the store is unreachable, with exponential jittered backoff, for up to
`AGENTQ_STORE_RETRY_S`; only then does the error reach the task, which hands the work back to the broker
(`task.retry` with `store_backoff_s`), never acknowledging it as done.

Retrying inside the step matters most once an activity has run: its result is held in memory and its commit
sent again until the store answers, so the activity never runs a second time because of an outage. Every
step is safe to send again when its first reply was lost: a claim replayed with its own token is the same
claim, a commit already made answers `duplicate`, a released retry answers as released.
"""

from __future__ import annotations

import functools
import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from agentq.errors import StoreUnavailableError

T = TypeVar("T")  # the store, or one of its fleet-wide parts (the limits' steps)

log = logging.getLogger("agentq.outages")

FIRST_WAIT_S = 0.1
MAX_WAIT_S = 2.0


def store_backoff_s(retries: int) -> float:
    """How long a task waits before its next delivery after the store stayed unreachable for a whole retry
    window: 1 s, 2 s, 4 s ... at most 60 s, jittered (`retries` is the task's number of retries so far)."""
    return min(60.0, 2.0 ** min(retries, 6)) * random.uniform(0.5, 1.0)


def _interrupted_by_soft_time_limit(error: BaseException) -> bool:
    """Celery's soft time limit raises `SoftTimeLimitExceeded` wherever the task is; it is meant for the
    activity, so a store step it interrupts (after the activity returned) is sent again."""
    return type(error).__name__ == "SoftTimeLimitExceeded"


class PatientStore(Generic[T]):
    """A store whose every step is retried while the store is unreachable, for up to `window_s` per step.

    Waits grow from 0.1 s to 2 s (jittered); a step that still fails after `window_s` raises
    `StoreUnavailableError`. Attributes that are not methods pass through. Thread-safe (no state of its own
    besides counters, and the wrapper made for each step, made again when the store's step changes)."""

    def __init__(self, store: T, window_s: float, *, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic):
        self._store = store
        self._window_s = window_s
        self._sleep = sleep
        self._clock = clock
        self._lock = threading.Lock()
        self.retried_steps = 0  # steps that needed more than one try (for logs and tests)
        self._patient: dict[str, tuple[Any, Callable[..., Any]]] = {}  # name -> (the step, its patient wrapper)

    @property
    def inner(self) -> T:
        """The store itself, whose steps fail at once."""
        return self._store

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._store, name)
        if name.startswith("_") or not callable(attribute):
            return attribute
        made = self._patient.get(name)
        if made is not None and made[0] == attribute:  # the same step as before (a bound method compares equal)
            return made[1]

        @functools.wraps(attribute)
        def patient(*args: Any, **kwargs: Any) -> Any:
            return self._run(name, attribute, args, kwargs)

        self._patient[name] = (attribute, patient)
        return patient

    def _run(self, name: str, step: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        began: float | None = None
        wait, tries = FIRST_WAIT_S, 0
        while True:
            tries += 1
            try:
                result = step(*args, **kwargs)
            except StoreUnavailableError as error:
                now = self._clock()
                if began is None:
                    began = now
                    log.warning("state store unreachable during %s%s (%s); trying again for up to %g s", name,
                                _subject(args), error, self._window_s)
                if now - began >= self._window_s:
                    log.error("state store still unreachable after %.1f s: %s%s handed back", now - began, name,
                              _subject(args))
                    raise
                self._sleep(min(wait * random.uniform(0.5, 1.0), max(0.0, began + self._window_s - now)))
                wait = min(wait * 2, MAX_WAIT_S)
                continue
            except Exception as error:
                if not _interrupted_by_soft_time_limit(error) or tries > 3:
                    raise
                log.warning("%s%s interrupted by the soft time limit; sending it again", name, _subject(args))
                continue
            if began is not None:
                with self._lock:
                    self.retried_steps += 1
                log.warning("state store reachable again: %s%s went through after %.1f s (%d tries)", name,
                            _subject(args), self._clock() - began, tries)
            return result


def _subject(args: tuple) -> str:
    """` of <job> <call>`: what a step was about, from its leading id arguments."""
    ids = [a for a in args[:2] if isinstance(a, str)]
    return f" of {' '.join(ids)}" if ids else ""
