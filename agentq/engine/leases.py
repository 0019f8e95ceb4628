"""Keeps the leases of the calls this process is running alive.

A claim gives the running attempt a lease that expires after `lease_s`. While the handler runs, one
background thread per process renews every lease it holds every `lease_s / 3` seconds, all of them in one round
trip (a dispatcher may hold hundreds: one per agent tick in flight). If the process
dies the renewals stop, the lease expires, and a redelivered task may take the call over.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import defaultdict

from agentq.store.base import Store

log = logging.getLogger("agentq.leases")


class LeaseKeeper:
    def __init__(self, store: Store, lease_s: float):
        self.store = store
        self.lease_s = lease_s
        self._held: dict[tuple[str, str], str] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self._stop = threading.Event()

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
            except Exception:  # a transient Redis error: the next round tries again
                log.warning("could not renew the leases of %d job(s)", len(by_job), exc_info=True)

    def stop(self) -> None:
        self._stop.set()
