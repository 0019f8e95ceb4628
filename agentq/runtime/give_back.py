"""The places of ended calls waiting to be given back, and the thread of the process that gives them back: `Noted`
(`runtime/admission.py`'s `Admission.ended` notes a place; the thread gives back what was noted in one step, once a
group of `enough` places is noted or `GIVE_BACK_S` after the first).

Each step costs about a dozen Redis commands however many places it gives back, so a burst of short calls, whose
places free up hundreds a second, is cheaper in groups; the longest wait is short next to the time the admission
window's prefetched tasks keep the workers busy, so the queue does not run dry meanwhile. Each process holds back up
to a group less one, and every process serving a queue holds its own, so the group is sized by the `Admission`
from how many share a queue's window (`Admission.group`): together they must leave most of it in flight, else the
hold's timer, not the workers, would set a queue's pace (at most its window every `GIVE_BACK_S`).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence

log = logging.getLogger("agentq.admission")

GIVE_BACK_S = 0.025  # the longest a noted place waits for others to join its group
CLOSE_WAIT_S = 5.0  # how long a close waits for the thread's last step (the store's connect timeout)
RETRY_S = (0.05, 1.0)  # after a step that failed (the store down or restarting): the first wait, and the longest


def _new_start_lock() -> None:
    global _starting
    _starting = threading.Lock()


_starting = threading.Lock()  # two threads noting a process's first places start one thread, not two
os.register_at_fork(after_in_child=_new_start_lock)  # a child never inherits it held by a parent's thread


class Noted:
    """The places of ended calls waiting to be given back, and the thread of the process that gives them back
    (started on first use, again in a forked child)."""

    def __init__(self, enough: int | Callable[[], int] = 1) -> None:
        # a group this large is given back at once: a number, or asked of `enough()` by the thread before each group
        self._enough = enough
        self.enough = 1
        self._pid = 0
        self._members: list[str] = []
        self._wake = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None

    def add(self, members: Sequence[str], give_back: Callable[[], None]) -> None:
        if self._closed:  # no thread any more: given back now
            self._members += members
            give_back()
            return
        if self._pid != os.getpid():
            self._start(give_back)
        with self._wake:
            first = not self._members
            self._members += members
            # the thread waits for a first place, then for its group to fill: only those wake it (a wake-up per
            # ended call cost each a thread switch in the process running the calls)
            if first or len(self._members) >= self.enough:
                self._wake.notify()

    def close(self) -> None:
        """No more groups: the thread gives back what was noted and ends before this returns, so its last step
        runs before the process closes the store it goes through."""
        with self._wake:
            self._closed = True
            self._wake.notify()
        thread = self._thread
        if thread is not None and self._pid == os.getpid() and thread is not threading.current_thread():
            thread.join(CLOSE_WAIT_S)

    def _start(self, give_back: Callable[[], None]) -> None:
        """Start this process's thread: a forked child has the parent's lock states and none of its threads."""
        with _starting:
            if self._pid == os.getpid():  # another thread of this process started it meanwhile
                return
            self._members, self._wake = [], threading.Condition()
            self._thread = threading.Thread(target=self._run, args=(self._wake, give_back), name="agentq-admission",
                                            daemon=True)
            self._thread.start()
            self._pid = os.getpid()

    def _group(self) -> int:
        """The size of the next group; the last one when asking failed (the store out of reach: the step that gives
        the places back fails too, and says so)."""
        enough = self._enough
        if not callable(enough):
            return max(1, enough)
        try:
            return max(1, enough())
        except Exception:
            log.debug("could not size the group of places to give back", exc_info=True)
            return self.enough

    def take(self) -> list[str]:
        if not self._members:
            return []
        with self._wake:
            members, self._members = self._members, []
        return members

    def put_back(self, members: Sequence[str]) -> None:
        """Places taken for a step that failed: kept for the next one (giving a place back twice is harmless, the
        step gives back only what is still held)."""
        with self._wake:
            self._members[:0] = members

    def _run(self, wake: threading.Condition, give_back: Callable[[], None]) -> None:
        failures = 0
        while not self._closed:
            with wake:
                wake.wait_for(lambda: bool(self._members) or self._closed)
            self.enough = self._group()
            with wake:
                # the ends that follow join the group, until it is large enough
                wake.wait_for(lambda: len(self._members) >= self.enough or self._closed, timeout=GIVE_BACK_S)
            try:
                give_back()
            except Exception:  # the places were put back (`put_back`): tried again once the store answers
                if not failures:
                    log.warning("could not give back the places of ended calls; trying again", exc_info=True)
                with wake:  # a close ends the wait
                    wake.wait_for(lambda: self._closed, timeout=min(RETRY_S[0] * 2 ** failures, RETRY_S[1]))
                failures += 1
            else:
                failures = 0

