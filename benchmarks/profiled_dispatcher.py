"""`agentq dispatcher` with every thread under cProfile, timed by the thread's own CPU clock.

Run by ``benchmarks/engine.py --cprofile PATH`` in place of ``python -m agentq.cli dispatcher`` (the same
arguments); on exit (SIGTERM's warm shutdown) it writes the merged stats of all its threads to
``$AGENTQ_BENCH_PROFILE`` (a ``pstats`` file). cProfile only sees the thread that enables it, so each thread
enables a profiler of its own when it starts (``threading.setprofile`` runs in a thread before its target).
Not a test; the profiler's own cost roughly doubles the CPU a request takes, so read the shares, not the sums.
"""

from __future__ import annotations

import atexit
import cProfile
import os
import pstats
import sys
import threading
import time

PROFILERS: list[cProfile.Profile] = []
_LOCK = threading.Lock()


def _new_profiler() -> cProfile.Profile:
    profiler = cProfile.Profile(time.thread_time)
    with _LOCK:
        PROFILERS.append(profiler)
    return profiler


def _start_in_thread(frame: object, event: str, arg: object) -> None:
    """The first profile event of a new thread: swap this hook for the thread's own profiler."""
    sys.setprofile(None)
    _new_profiler().enable()


class _Taken:
    """A profiler's stats as `pstats.Stats` reads them."""

    def __init__(self, stats: dict) -> None:
        self.stats = stats

    def create_stats(self) -> None:
        """Already made."""


def _write() -> None:
    path = os.environ.get("AGENTQ_BENCH_PROFILE")
    if not path:
        return
    with _LOCK:
        profilers = list(PROFILERS)
    stats: pstats.Stats | None = None
    for profiler in profilers:
        # not `disable()`/`create_stats()` from this thread: they would close the other thread's open frames
        # (a pool thread waiting for its next task) on this thread's CPU clock
        profiler.snapshot_stats()
        try:
            stats = pstats.Stats(_Taken(profiler.stats)) if stats is None else stats.add(_Taken(profiler.stats))
        except (TypeError, ValueError):  # a profiler that saw nothing
            continue
    if stats is not None:
        stats.dump_stats(path)


def main() -> None:
    threading.setprofile(_start_in_thread)
    atexit.register(_write)
    _new_profiler().enable()
    from agentq.cli import main as cli

    sys.argv = ["agentq", *sys.argv[1:]]
    sys.exit(cli())


if __name__ == "__main__":
    main()
