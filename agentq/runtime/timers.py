"""The waits' timer loop (docs/waits.md): a daemon thread of every dispatcher that fires the waits whose timer is
due — a sleep that ends, a wait that times out, a wait an event or a signal woke (they bring its timer due now).

Any number of dispatchers run it: each due entry is claimed by one of them for `CLAIM_MS` (`timers_take.lua`), and a
dispatcher killed before it fired an entry leaves it to be taken again when the claim runs out. The wait's outcome
is decided once in its job's keys and committed once (`engine/waits.py`), so a fire repeated by another dispatcher
does nothing twice. Between rounds the loop holds no thread of the engine's pool and nothing of any job.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from agentq.engine.waits import Waits
from agentq.store.contracts import JobTimerStore, WaitStore
from agentq.store.job_timers import JOB_TIMER_PREFIX


class TimersStore(WaitStore, JobTimerStore, Protocol):
    """The waits' timers and the jobs' own."""


class JobTimerFiring(Protocol):
    """Fires a job's own timer (`runtime/job_timers.py`): whether it is done with (else taken again later)."""

    def fire_job_timer(self, job_id: str, kind: str) -> bool: ...

log = logging.getLogger("agentq.timers")

CLAIM_MS = 10_000  # a taken entry is this dispatcher's for this long (then due again, should it have died)
BATCH = 200  # entries taken per round trip; a full batch is followed by the next at once
FIRING_THREADS = 8  # a batch's waits fire on this many threads (each fire is a few round trips to the store)


class TimerLoop:
    """Takes due timers every `interval_s` and fires their waits, and the jobs' own timers (`<job> @<kind>`: a
    deadline) through `jobs`."""

    def __init__(self, store: TimersStore, waits: Waits, *, interval_s: float, jobs: JobTimerFiring | None = None):
        self.store = store
        self.waits = waits
        self.jobs = jobs
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None  # made on the first due batch (no threads while none is due)

    def start(self) -> TimerLoop:
        self._thread = threading.Thread(target=self._run, name="agentq-timers", daemon=True)
        self._thread.start()
        return self

    def run_once(self) -> int:
        """Fire the due waits, batch after batch; how many were taken."""
        taken = 0
        while not self._stop.is_set():
            due = self.store.take_due_timers(now_ms=round(time.time() * 1000), limit=BATCH, claim_ms=CLAIM_MS)
            if len(due) == 1:
                self._fire(*due[0])
            elif due:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(FIRING_THREADS, thread_name_prefix="agentq-timers-fire")
                list(self._pool.map(lambda entry: self._fire(*entry), due))
            taken += len(due)
            if len(due) < BATCH:
                break
        return taken

    def _fire(self, job_id: str, call_id: str) -> None:
        try:
            if call_id.startswith(JOB_TIMER_PREFIX):
                kind = call_id.removeprefix(JOB_TIMER_PREFIX)
                if self.jobs is not None and self.jobs.fire_job_timer(job_id, kind):
                    self.store.drop_job_timer(job_id, kind)
            else:
                self.waits.fire(job_id, call_id)
        except Exception:  # one wait's failure must not stop the others: its claim runs out, it comes back
            log.warning("firing the wait %s of job %s failed; it is taken again in %d s", call_id, job_id,
                        CLAIM_MS // 1000, exc_info=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.run_once()
            except Exception:
                log.warning("the timers' round failed; the next one tries again", exc_info=True)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
