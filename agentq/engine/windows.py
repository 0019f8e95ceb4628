"""The context windows the model's refusals taught ("prompt is too long: N tokens > M maximum"), per model, for
the fleet: kept in the store (`agentq:llm:windows`), read back by every dispatcher at most once a heartbeat, so a
job whose ticks move between dispatchers, and every later job of that model, stays under the window after the
first refusal. A window only ever shrinks; it is in agentq's estimated tokens (`protocol/compaction.py`)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from agentq.errors import StoreError
from agentq.store.contracts import LimitStore

log = logging.getLogger("agentq.agent")


class LearnedWindows:
    """The learned windows of one process, refreshed from the store's limits part every `refresh_s` (None: this
    process's own only, shared with nobody); thread-safe."""

    def __init__(self, store: LimitStore | None, refresh_s: float, *, clock: Callable[[], float] = time.monotonic):
        self.store = store
        self.refresh_s = refresh_s
        self.clock = clock
        self._known: dict[str, int] = {}
        self._read_at: float | None = None
        self._lock = threading.Lock()

    def get(self, model: str) -> int | None:
        """The window taught for `model` (None: none yet), read from the store when the last read is old."""
        now = self.clock()
        with self._lock:
            stale = self._read_at is None or now - self._read_at >= self.refresh_s
            if stale:
                self._read_at = now
        if stale and self.store is not None:
            try:
                fleet = self.store.context_windows()
            except StoreError as error:  # the process's own knowledge holds until the next read
                log.warning("cannot read the learned context windows: %s", error)
                fleet = {}
            with self._lock:
                for name, tokens in fleet.items():
                    self._known[name] = min(tokens, self._known.get(name, tokens))
        return self._known.get(model)

    def learn(self, model: str, tokens: int) -> int:
        """Keep `tokens` as `model`'s window (unless a smaller one is known), for the fleet; returns the window."""
        with self._lock:
            window = self._known[model] = min(tokens, self._known.get(model, tokens))
        try:
            if self.store is not None:
                self.store.learn_context_window(model, window)
        except StoreError as error:
            log.warning("cannot keep the context window of %s for the fleet: %s", model, error)
        return window


__all__ = ["LearnedWindows"]
