"""Keeps the leases of the calls this process is running alive.

A claim gives the running attempt a lease that expires after `lease_s`. While the handler runs, one
background thread per process renews every lease it holds every `lease_s / 3` seconds, all of them in one round
trip (a dispatcher may hold hundreds: one per agent tick in flight). If the process
dies the renewals stop, the lease expires, and a redelivered task may take the call over.

A store outage fails every round until the store is back: the keeper says so once when the first round fails and
once when a round goes through again (how many failed, for how long), not once per round.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import defaultdict

from agentq.store.contracts import LeaseStore

log = logging.getLogger("agentq.leases")


class LeaseKeeper:
    def __init__(self, store: LeaseStore, lease_s: float):
        self.store = store
        self.lease_s = lease_s
        self._held: dict[tuple[str, str], str] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self._stop = threading.Event()
        self._failing: tuple[float, int] | None = None  # since when (monotonic) renewals fail, and how many rounds

    def hold(self, job_id: str, call_id: str, token: str) -> None:
        with self._lock:
            self._held[(job_id, call_id)] = token
            self._ensure_thread()

    def release(self, job_id: str, call_id: str) -> None:
        with self._lock:
            self._held.pop((job_id, call_id), None)

    def _ensure_thread(self) -> None:
        # After a fork (prefork pool) the parent's thread does not exist in the child: start our own.
        if self._thread is None or self._pid != os.getpid() or not self._thread.is_alive():
            self._pid = os.getpid()
            self._thread = threading.Thread(target=self._run, name="agentq-leases", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        interval = self.lease_s / 3
        while not self._stop.wait(interval):
            with self._lock:
                by_job: dict[str, dict[str, str]] = defaultdict(dict)
                for (job_id, call_id), token in self._held.items():
                    by_job[job_id][call_id] = token
            if not by_job:
                continue
            try:
                self.store.renew_all(by_job, int(self.lease_s * 1000))  # one round trip for every job
            except Exception as error:  # a transient Redis error: the next round tries again
                self._failed(len(by_job), error)
            else:
                self._went_through()

    def _failed(self, jobs: int, error: Exception) -> None:
        """A round failed: said on the first failure of an outage only (the others at debug level)."""
        if self._failing is None:
            self._failing = (time.monotonic(), 1)
            log.warning("could not renew the leases of %d job(s): %s: %s; trying again every %g s (said once "
                        "until a renewal goes through)", jobs, type(error).__name__, error, self.lease_s / 3)
            log.debug("the failed renewal", exc_info=True)
        else:
            self._failing = (self._failing[0], self._failing[1] + 1)
            log.debug("lease renewal failed again (%d rounds): %s", self._failing[1], error)

    def _went_through(self) -> None:
        """A round went through: after failed ones, said once."""
        if self._failing is not None:
            since, rounds = self._failing
            self._failing = None
            log.warning("lease renewals go through again, after %d failed round(s) in %.1f s", rounds,
                        time.monotonic() - since)

    def stop(self) -> None:
        self._stop.set()
