"""Counting the round trips a redis-py client makes, for tests that pin how many requests a step costs."""

from __future__ import annotations

import threading
from typing import Any


class RoundTrips:
    """Wraps `client` so every request it sends is recorded as the list of its command names: one name for a
    command, all of a pipeline's for a pipeline (one round trip)."""

    def __init__(self, client: Any):
        self.requests: list[list[str]] = []
        self.threads: list[str] = []  # the name of the thread that sent each request
        self._lock = threading.Lock()
        execute_command, pipeline = client.execute_command, client.pipeline

        def counted_command(*args: Any, **kwargs: Any) -> Any:
            self._add([str(args[0]).upper()])
            return execute_command(*args, **kwargs)

        def counted_pipeline(*args: Any, **kwargs: Any) -> Any:
            pipe = pipeline(*args, **kwargs)
            execute = pipe.execute

            def counted_execute(*a: Any, **k: Any) -> Any:
                self._add([str(c[0][0]).upper() for c in pipe.command_stack])
                return execute(*a, **k)

            pipe.execute = counted_execute
            return pipe

        client.execute_command, client.pipeline = counted_command, counted_pipeline

    def _add(self, names: list[str]) -> None:
        with self._lock:
            self.requests.append(names)
            self.threads.append(threading.current_thread().name)

    def take(self) -> list[list[str]]:
        return [names for _, names in self.take_by_thread()]

    def take_by_thread(self) -> list[tuple[str, list[str]]]:
        """The requests so far with the name of the thread that sent each, oldest first; forgets them."""
        with self._lock:
            taken = list(zip(self.threads, self.requests, strict=True))
            self.requests, self.threads = [], []
        return taken
