"""`ManualClock`: Unix seconds that move only when the test says so, for the parts that take a clock (the store's
Python side, `JobService`, `PatientStore`). Steps that keep their own time in Lua read Redis's `TIME`: their tests
let real time pass (short TTLs) instead."""

from __future__ import annotations

import threading
import time


class ManualClock:
    """Unix seconds that only move when the test says so (from now, or from `start`)."""

    def __init__(self, start: float | None = None):
        self._now = time.time() if start is None else start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds
