"""The delivery loop every worker and dispatcher process runs (waiting while the fleet's webhook allowlist is empty).

Each poll (`AGENTQ_WEBHOOK_POLL_S`) one process of the fleet looks for new webhook events (`watcher.py`; the
`agentq:webhooks:scan` key elects it for that poll), and every process attempts the deliveries that are due
on `AGENTQ_WEBHOOK_CONCURRENCY` threads, each taking one at a time with a lease (`store.claim_due`). All of it
lives in Redis, so a delivery that fell due while no process ran is attempted by the first one that starts, and
one whose process died mid-attempt is attempted again, with the same id, when its lease ends.

Retries: the n-th failed attempt waits `AGENTQ_WEBHOOK_BACKOFF_S * 2^(n-1)` (at most an hour, ±10 % jitter; a
longer `Retry-After` is honoured up to an hour) until `AGENTQ_WEBHOOK_RETRY_S` after the event: then the
delivery has failed. A 410 Gone ends it at once.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
from collections.abc import Callable
from typing import Protocol

from agentq.settings import Settings
from agentq.store.contracts import WebhookStore
from agentq.webhooks.records import Attempt, Delivery, DeliveryState
from agentq.webhooks.sender import Answer, Sender
from agentq.webhooks.signing import secret_keys
from agentq.webhooks.targets import Allowlist
from agentq.webhooks.watcher import WatchedStore, Watcher

log = logging.getLogger("agentq.webhooks")

MAX_WAIT_S = 3600.0
LEASE_MARGIN_S = 5.0
ATTEMPTS_PER_POLL = 50  # due deliveries one process attempts before it looks for new events again


def retry_delay(failures: int, backoff_s: float, retry_after_s: float | None = None,
                jitter: Callable[[], float] = random.random) -> float:
    """How long to wait after the `failures`-th failed attempt."""
    delay = min(backoff_s * 2 ** min(failures - 1, 40), MAX_WAIT_S) * (0.9 + 0.2 * jitter())
    if retry_after_s is not None:
        delay = max(delay, min(retry_after_s, MAX_WAIT_S))
    return delay


class AttemptCounter(Protocol):
    """What counts delivery attempts (`agentq.metrics.Metrics`)."""

    def webhook_attempted(self, event_type: str, outcome: str) -> None: ...


class Deliverer:
    """Attempts due deliveries and keeps each outcome."""

    def __init__(self, deliveries: WebhookStore, sender: Sender, settings: Settings, *,
                 clock: Callable[[], float] = time.time, metrics: AttemptCounter | None = None):
        self.metrics = metrics
        self.deliveries = deliveries
        self.sender = sender
        self.settings = settings
        self.clock = clock
        self.lease_ms = int((settings.webhook_timeout_s + LEASE_MARGIN_S) * 1000)

    def attempt_due(self, limit: int = ATTEMPTS_PER_POLL) -> int:
        """Attempt due deliveries, one claimed at a time, up to `limit`; returns how many were attempted."""
        attempted = 0
        while attempted < limit:
            claimed = self.deliveries.claim_due(int(self.clock() * 1000), self.lease_ms, 1)
            if not claimed:
                break
            job_id, delivery_id = claimed[0]
            self.attempt(job_id, delivery_id)
            attempted += 1
        return attempted

    def attempt(self, job_id: str, delivery_id: str) -> None:
        stored = self.deliveries.read_delivery(job_id, delivery_id)
        delivery = Delivery.from_dict(stored.data) if stored is not None else None
        if stored is None or delivery is None or delivery.state is not DeliveryState.PENDING:
            self.deliveries.forget_due(job_id, delivery_id)  # expired with its job, or ended already
            return
        self._attempt(delivery, stored.body)

    def _attempt(self, delivery: Delivery, body: bytes) -> None:
        """Send a pending delivery and keep its outcome."""
        job_id = delivery.job_id
        answer = self.sender.send(delivery, body)
        delivery, next_at = self.outcome(delivery, answer)
        if self.metrics is not None:
            outcome = "retry" if delivery.state is DeliveryState.PENDING else delivery.state.value
            self.metrics.webhook_attempted(delivery.type, outcome)
        self.deliveries.save_delivery(job_id, delivery.id, delivery.to_dict(),
                                      int(next_at * 1000) if next_at is not None else None)
        if delivery.state is DeliveryState.PENDING:
            log.info("webhook %s of job %s not delivered (%s); next attempt in %.1f s", delivery.id, job_id,
                     answer.error, next_at - self.clock() if next_at is not None else 0)
        elif delivery.state is DeliveryState.FAILED:
            log.warning("webhook %s of job %s failed for good after %d attempts: %s", delivery.id, job_id,
                        len(delivery.attempts), answer.error)

    def outcome(self, delivery: Delivery, answer: Answer) -> tuple[Delivery, float | None]:
        """The delivery after `answer`, and when its next attempt is due (None: it ended)."""
        now = self.clock()
        attempt = Attempt(at=now, status=answer.status, error=answer.error, duration_ms=answer.duration_ms)
        if answer.delivered:
            return delivery.attempted(attempt, state=DeliveryState.DELIVERED, next_at=None), None
        failures = len(delivery.attempts) + 1
        next_at = now + retry_delay(failures, self.settings.webhook_backoff_s, answer.retry_after_s)
        if answer.status == 410 or next_at > delivery.created_at + self.settings.webhook_retry_s:
            return delivery.attempted(attempt, state=DeliveryState.FAILED, next_at=None), None
        return delivery.attempted(attempt, state=DeliveryState.PENDING, next_at=next_at), next_at


class WebhookLoop:
    """The threads of one process: one looks for webhook events, `AGENTQ_WEBHOOK_CONCURRENCY` attempt due
    deliveries, so a slow receiver holds one thread, neither the other deliveries nor the finding of events."""

    def __init__(self, store: WatchedStore, deliveries: WebhookStore, settings: Settings, *,
                 metrics: AttemptCounter | None = None, allowlist: Allowlist | None = None):
        self.settings = settings
        secret = settings.webhook_secret.get_secret_value() if settings.webhook_secret is not None else ""
        # the fleet's allowlist as read now (`LiveAllowlist`), else `AGENTQ_WEBHOOK_ALLOWLIST`; while it is empty
        # the loop's rounds wait (no delivery could reach anything)
        allowlist = allowlist if allowlist is not None else Allowlist.parse(settings.webhook_allowlist)
        self.deliveries = deliveries  # the root's, kept AGENTQ_WEBHOOK_RETRY_S plus the job lifetime
        self.sender = Sender(allowlist, keys=secret_keys(secret), timeout_s=settings.webhook_timeout_s)
        self.watcher = Watcher(store, self.deliveries)
        self.deliverer = Deliverer(self.deliveries, self.sender, settings, metrics=metrics)
        self.token = uuid.uuid4().hex
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> WebhookLoop:
        rounds = [self.scan, *[self.deliverer.attempt_due] * self.settings.webhook_concurrency]
        for n, work in enumerate(rounds):
            thread = threading.Thread(target=self._run, args=(work,), name=f"agentq-webhooks-{n}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def scan(self) -> None:
        """Look for new events when this process is the one elected for this poll."""
        if self.deliveries.take_scan(self.token, int(self.settings.webhook_poll_s * 1000)):
            self.watcher.scan()

    def _run(self, work: Callable[[], object]) -> None:
        while not self._stop.is_set():
            try:
                if self.sender.allowlist:
                    work()
            except Exception:
                log.warning("webhook delivery loop failed; retrying", exc_info=True)
            self._stop.wait(self.settings.webhook_poll_s)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=self.settings.webhook_timeout_s + 5)
        self.sender.close()
