"""`agentq dispatcher` with every thread under cProfile, timed by the thread's own CPU clock.

Run by ``benchmarks/engine.py --cprofile PATH`` in place of ``python -m agentq.cli dispatcher`` (the same
arguments); on exit (SIGTERM's warm shutdown) it writes the merged stats of all its threads to
``$AGENTQ_BENCH_PROFILE`` (a ``pstats`` file): what they did since ``$AGENTQ_BENCH_PROFILE.mark`` last appeared (the
start of what is measured: the process's start, its imports and its first requests left out), or since its start.
cProfile only sees the thread that enables it, so each thread enables a profiler of its own when it starts
(``threading.setprofile`` runs in a thread before its target). Not a test; the profiler's own cost roughly doubles
the CPU a request takes, so read the shares, not the sums.
"""

from __future__ import annotations

import atexit
import cProfile
import os
import pstats
import sys
import threading
import time
from typing import cast

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


def _taken() -> dict:
    """The merged stats of every thread's profiler so far (pstats' form: function -> (cc, nc, tt, ct, callers))."""
    with _LOCK:
        profilers = list(PROFILERS)
    stats: pstats.Stats | None = None
    for profiler in profilers:
        # not `disable()`/`create_stats()` from this thread: they would close the other thread's open frames
        # (a pool thread waiting for its next task) on this thread's CPU clock
        profiler.snapshot_stats()
        try:
            taken = cast(cProfile.Profile, _Taken(profiler.stats))  # what pstats reads of a profiler
            stats = pstats.Stats(taken) if stats is None else stats.add(taken)
        except (TypeError, ValueError):  # a profiler that saw nothing
            continue
    return dict(stats.stats) if stats is not None else {}  # type: ignore[attr-defined]


def _minus(now: dict, before: dict) -> dict:
    """`now` less what `before` counted, function by function (and caller by caller)."""
    left = {}
    for func, (cc, nc, tt, ct, callers) in now.items():
        was = before.get(func)
        if was is None:
            left[func] = (cc, nc, tt, ct, callers)
            continue
        kept = {}
        for caller, counts in callers.items():
            old = was[4].get(caller)
            kept[caller] = counts if old is None else tuple(a - b for a, b in zip(counts, old, strict=True))
        if nc - was[1] > 0:
            left[func] = (cc - was[0], nc - was[1], tt - was[2], ct - was[3], kept)
    return left


_MARK: dict = {}


def _watch_marks(path: str) -> None:
    """Each time `path` appears (not a signal: Celery's worker takes SIGUSR1 and SIGUSR2), the profile counts from
    there; the file is removed."""
    while True:
        time.sleep(0.05)
        if os.path.exists(path):
            _MARK.clear()
            _MARK.update(_taken())
            os.unlink(path)


def _write() -> None:
    path = os.environ.get("AGENTQ_BENCH_PROFILE")
    if not path:
        return
    stats = pstats.Stats(cast(cProfile.Profile, _Taken(_minus(_taken(), _MARK))))
    stats.dump_stats(path)


def main() -> None:
    threading.setprofile(_start_in_thread)
    path = os.environ.get("AGENTQ_BENCH_PROFILE")
    if path:
        threading.Thread(target=_watch_marks, args=(f"{path}.mark",), daemon=True, name="profile-marks").start()
    atexit.register(_write)
    _new_profiler().enable()
    from agentq.cli import main as cli

    sys.argv = ["agentq", *sys.argv[1:]]
    sys.exit(cli())


if __name__ == "__main__":
    main()
