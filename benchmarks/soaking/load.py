"""The soak's load: a submitter keeping `open_jobs` jobs in flight through the HTTP API (two tenants' tokens,
an `Idempotency-Key` per job so a submission retried after a lost answer is one job), the fairness burst (acme's
burst of jobs at once, globex's short jobs beside it), a bot that approves the
calls awaiting approval and sends the signals the `wait` jobs wait for, and a watcher that notes when each job
ends (a read of each open job's status; the records themselves are read by the checks at the end).

Every loop retries what the fleet refuses while a fault lasts (a killed API, a paused Redis) and never stops the
soak for it: the faults are the point.
"""

from __future__ import annotations

import json
import random
import threading
import time
import urllib.error
import urllib.request
from http.client import HTTPException
from typing import Any

import redis

from agentq.store.state import StateStore
from benchmarks.soaking.fleet import TOKENS
from benchmarks.soaking.jobs import EVENT, SCHEDULE, SCHEDULE_EVERY_S, SoakJob, burst_job, make_job, schedule, short_job

FINAL = {"succeeded", "failed", "canceled"}
EVENT_AGAIN_S = 5.0  # an event job still waiting this long after its event was sent gets another (counted)


class ApiError(Exception):
    pass


def http(base: str, method: str, path: str, token: str, body: Any = None, headers: dict[str, str] | None = None,
         timeout: float = 5.0) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{base}{path}", data=data, method=method, headers={
        "authorization": f"Bearer {token}", "content-type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return json.loads(answer.read() or b"null")
    except urllib.error.HTTPError as e:
        raise ApiError(f"{method} {path}: {e.code} {e.read()[:300]!r}") from e
    except (OSError, HTTPException, ValueError) as e:  # refused, cut mid-answer, half a body
        raise ApiError(f"{method} {path}: {e!r}") from e


class Load:
    def __init__(self, api_url: str, redis_url: str, hook_url: str, seed: int, open_jobs: int = 24):
        self.api = api_url
        self.redis_url = redis_url
        self.hook_url = hook_url
        self.rng = random.Random(seed)
        self.open_jobs = open_jobs
        self.jobs: list[SoakJob] = []
        self.lock = threading.Lock()
        self.submitting = threading.Event()
        self.stopping = threading.Event()
        self.errors: dict[str, int] = {}
        self.last_errors: dict[str, str] = {}  # per loop, the last error it retried (shown in the report)
        self.signals: dict[str, float] = {}  # job id -> when its signal is due (unix time)
        self.approved = 0
        # event jobs: job id -> each event sent for it (its id, the sending tenant, how many waits it woke)
        self.events: dict[str, list[tuple[str, str, int]]] = {}
        self.events_sent_at: dict[str, float] = {}
        self.number = 0  # the last job's number (each job's tag has its own)
        self.schedule_set_at = self.schedule_paused_at = 0.0  # unix time (0: not yet)
        self.slots_seen: set[int] = set()
        self.threads = [threading.Thread(target=f, daemon=True, name=f.__name__)
                        for f in (self._submit_loop, self._watch_loop, self._bot_loop)]

    def start(self) -> None:
        self.schedule_set_at = self._schedule_call("PUT", "", schedule())
        self.submitting.set()
        for thread in self.threads:
            thread.start()

    def stop_submitting(self) -> None:
        self.submitting.clear()

    def stop(self) -> None:
        self.stop_submitting()
        self.stopping.set()
        for thread in self.threads:
            thread.join(10)

    def pause_schedule(self) -> None:
        self.schedule_paused_at = self._schedule_call("POST", "/pause")

    def _schedule_call(self, method: str, path: str, body: Any = None, timeout_s: float = 30.0) -> float:
        """Set or pause the schedule (retried while a fault lasts); the time the request that took was sent."""
        deadline = time.monotonic() + timeout_s
        while True:
            sent = time.time()
            try:
                http(self.api, method, f"/v1/schedules/{SCHEDULE}{path}", TOKENS["acme"], body)
                return sent
            except ApiError as e:
                self._error("schedule", e)
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)

    def due_slots(self) -> tuple[list[int], list[int]]:
        """The schedule's slots between its setting and its pause: those that must have fired (a slot fires up to
        5 s late after a dispatcher's death), and the last few that may have."""
        end = self.schedule_paused_at or time.time()
        every = SCHEDULE_EVERY_S
        slots = list(range((int(self.schedule_set_at) // every + 1) * every, int(end) + 1, every))
        return [s for s in slots if s <= end - 6], [s for s in slots if s > end - 6]

    def _watch_slots(self, store: StateStore) -> None:
        """The slots' jobs (their ids derive from the slot), watched like the load's once they exist."""
        due, late = self.due_slots()
        slots = [s for s in due + late if s not in self.slots_seen and s > time.time() - 120]
        pipe = store.redis.pipeline(transaction=False)
        for slot in slots:
            pipe.exists(store.keys(f"sched-{SCHEDULE}-{slot}").job)
        for slot, exists in zip(slots, pipe.execute(), strict=True):
            if exists:
                with self.lock:
                    self.slots_seen.add(slot)
                    self.jobs.append(SoakJob(f"acme-sched{slot}", "scheduled", "acme", {}, False,
                                             f"sched-{SCHEDULE}-{slot}", float(slot)))

    def open(self) -> list[SoakJob]:
        with self.lock:
            return [j for j in self.jobs if j.job_id and not j.ended_at]

    def _error(self, where: str, error: Exception | None = None) -> None:
        with self.lock:
            self.errors[where] = self.errors.get(where, 0) + 1
            if error is not None:
                self.last_errors[where] = str(error)[:300]

    def _next_number(self) -> int:
        with self.lock:
            self.number += 1
            return self.number

    def _submit(self, job: SoakJob) -> bool:
        """One try at submitting `job` (True: it is in); the same `Idempotency-Key` on every try."""
        try:
            record = http(self.api, "POST", "/v1/jobs", TOKENS[job.tenant], job.body,
                          headers={"idempotency-key": job.tag})
        except ApiError as e:
            self._error("submit", e)
            return False
        job.job_id, job.submitted_at = record["id"], time.time()
        with self.lock:
            self.jobs.append(job)
            if job.kind == "wait":
                self.signals[job.job_id] = time.time() + self.rng.uniform(0.2, 3.0)
        return True

    def _submit_loop(self) -> None:
        pending: SoakJob | None = None
        while not self.stopping.is_set():
            if not self.submitting.is_set() or len(self.open()) >= self.open_jobs:
                time.sleep(0.05)
                continue
            if pending is None:
                pending = make_job(self._next_number(), self.rng, self.hook_url)
            if not self._submit(pending):
                time.sleep(0.3)
                continue
            pending = None

    def burst(self, jobs: int, probe_every_s: float = 0.4, timeout_s: float = 120.0) -> None:
        """Acme submits `jobs` burst jobs at once; while any of them is open, globex submits a short job every
        `probe_every_s` (whose submit-to-end the fairness check holds to its bound). Returns when the burst ended."""
        rng = random.Random(self.rng.random())
        burst = [burst_job(self._next_number(), rng) for _ in range(jobs)]
        deadline = time.monotonic() + timeout_s
        for job in burst:
            while not self._submit(job) and time.monotonic() < deadline:
                time.sleep(0.3)
        while any(j.job_id and not j.ended_at for j in burst) and time.monotonic() < deadline:
            probe = short_job(self._next_number(), rng)
            while not self._submit(probe) and time.monotonic() < deadline:
                time.sleep(0.3)
            time.sleep(probe_every_s)

    def _watch_loop(self) -> None:
        store = StateStore(self.redis_url)
        try:
            while not self.stopping.is_set():
                time.sleep(0.2)
                try:
                    self._watch_slots(store)
                except redis.RedisError as e:
                    self._error("watch", e)
                jobs = self.open()
                if not jobs:
                    continue
                try:
                    pipe = store.redis.pipeline(transaction=False)
                    for job in jobs:
                        pipe.hget(store.keys(job.job_id).job, "status")
                    statuses = pipe.execute()
                except redis.RedisError as e:
                    self._error("watch", e)
                    continue
                now = time.time()
                with self.lock:
                    for job, status in zip(jobs, statuses, strict=True):
                        status = status.decode() if isinstance(status, bytes) else status
                        if status in FINAL:
                            job.ended_at, job.status = now, status
        finally:
            store.redis.close()

    def _bot_loop(self) -> None:
        while not self.stopping.is_set():
            time.sleep(0.3)
            self._signal_due()
            self._send_events()
            try:
                self._approve_waiting()
            except ApiError as e:
                self._error("bot", e)

    def _signal_due(self) -> None:
        now = time.time()
        with self.lock:
            due = [job_id for job_id, at in self.signals.items() if at <= now]
            tenants = {j.job_id: j.tenant for j in self.jobs}
        for job_id in due:  # each on its own: one refused signal holds up no other
            try:
                http(self.api, "POST", f"/v1/jobs/{job_id}/signals/go", TOKENS[tenants[job_id]], {"data": {"ok": True}})
            except ApiError as e:
                self._error("signal", e)
                continue
            with self.lock:
                self.signals.pop(job_id, None)

    def _send_events(self) -> None:
        """For each event job whose `waitForEvent` is open: the other tenant's event first (it must wake nothing),
        then its own tenant's; again, under a new id, when the job still waits `EVENT_AGAIN_S` later."""
        now = time.time()
        with self.lock:
            due = [j for j in self.jobs if j.kind == "event" and not j.ended_at
                   and now - self.events_sent_at.get(j.job_id, 0.0) >= EVENT_AGAIN_S]
        for job in due:
            try:
                calls = http(self.api, "GET", f"/v1/jobs/{job.job_id}/calls", TOKENS[job.tenant])
                if not any(c["tool"] == "waitForEvent" and c["status"] == "waiting" for c in calls):
                    continue
                n = len(self.events.get(job.job_id, []))
                for tenant in ("globex" if job.tenant == "acme" else "acme", job.tenant):
                    sent = http(self.api, "POST", "/v1/events", TOKENS[tenant], {
                        "name": EVENT, "data": {"tag": job.tag, "tenant": tenant}, "id": f"{job.tag}-{tenant}{n}"})
                    with self.lock:
                        self.events.setdefault(job.job_id, []).append((str(sent["id"]), tenant, int(sent["woken"])))
                        self.events_sent_at[job.job_id] = time.time()
            except ApiError as e:
                self._error("event", e)

    def _approve_waiting(self) -> None:
        waiting = http(self.api, "GET", "/v1/jobs?status=awaiting_approval&limit=500", TOKENS["admin"])
        for record in waiting:
            for call in http(self.api, "GET", f"/v1/jobs/{record['id']}/calls", TOKENS["admin"]):
                if call["status"] == "awaiting_approval":
                    try:
                        http(self.api, "POST", f"/v1/jobs/{record['id']}/calls/{call['id']}/approve", TOKENS["admin"])
                    except ApiError as e:
                        if ": 409 " not in str(e):  # decided already (an answer lost, asked again): fine
                            raise
                    with self.lock:
                        self.approved += 1
